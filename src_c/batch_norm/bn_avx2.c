/* AVX2 batch-norm kernels: 8 floats a vector, float16 through F16C, bfloat16 by integer rounding.
   The kernels themselves are in bn_simd.h. */
#if !defined(__AVX2__) || !defined(__F16C__) || !defined(__FMA__)
#error "bn_avx2.c must be built with -mavx2 -mfma -mf16c (setup.py adds them)"
#endif
#include <immintrin.h>
#include <stdint.h>

#define BN_ISA avx2
#define BN_W 8
#define BN_STRIP_VECTORS 2
#define BN_PASS_REG_VECTORS 2

typedef __m256 bn_vf;
typedef __m256d bn_vd;

static inline bn_vf bn_load_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline bn_vf bn_load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline bn_vf bn_load_bf16(const uint16_t *p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
static inline void bn_store_f32(float *p, bn_vf v) { _mm256_storeu_ps(p, v); }
static inline void bn_store_f16(uint16_t *p, bn_vf v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline void bn_store_bf16(uint16_t *p, bn_vf v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    const __m256i halves = _mm256_blendv_epi8(rounded, quiet, nan);
    /* Pack each 128-bit lane's four 32-bit values to 16 bits, then gather the two low quarters. */
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(halves, halves), 0x08);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}
static inline bn_vf bn_set1_f(float v) { return _mm256_set1_ps(v); }
static inline bn_vf bn_add_f(bn_vf a, bn_vf b) { return _mm256_add_ps(a, b); }
static inline bn_vf bn_sub_f(bn_vf a, bn_vf b) { return _mm256_sub_ps(a, b); }
static inline bn_vf bn_mul_f(bn_vf a, bn_vf b) { return _mm256_mul_ps(a, b); }
static inline bn_vf bn_fma_f(bn_vf a, bn_vf b, bn_vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline bn_vd bn_low_d(bn_vf v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
static inline bn_vd bn_high_d(bn_vf v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
static inline bn_vd bn_load_d(const double *p) { return _mm256_loadu_pd(p); }
static inline void bn_store_d(double *p, bn_vd v) { _mm256_storeu_pd(p, v); }
static inline bn_vd bn_add_d(bn_vd a, bn_vd b) { return _mm256_add_pd(a, b); }
#define BN_STREAM_ALIGN 32
static inline void bn_stream_f32(float *p, bn_vf v) { _mm256_stream_ps(p, v); }
static inline void bn_stream_fence(void) { _mm_sfence(); }

#include "bn_simd.h"
