/* Pow on float32 with libm's powf for every element. TensorFlow's CPU Pow computes a scalar with
   std::pow, which is the C library's powf; numpy's float32 power takes a vector library of its own
   on AVX-512 machines, whose results differ from powf in the last bit for about one input pair in
   five (contrib's debiased moving averages raise 1 - decay to the step count every step). No SIMD
   here on purpose: the bits are the C library's, under TF's flush-to-zero and denormals-are-zero
   (a subnormal base or result is zero, or what powf makes of a base that reads as zero). */
#include <math.h>

#include "../include/fqcore.h"
#include "../common/fpenv.h"

fq_status fq_f32_pow(const float *x, const float *y, size_t n, float *out) {
    if (n > 0 && (x == NULL || y == NULL || out == NULL)) return FQ_ERR_NULL_POINTER;
    const fq_fpenv saved = fq_fpenv_enter();
    for (size_t i = 0; i < n; ++i) out[i] = powf(x[i], y[i]);
    fq_fpenv_leave(saved);
    return FQ_OK;
}
