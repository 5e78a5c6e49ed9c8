/* Scalar range-observer kernels: the reference every SIMD path must equal bit for bit. */
#include "range_kernels.h"

static void flat__scalar(const float *x, size_t n, fq_range_acc acc) {
    for (size_t i = 0; i < n; ++i) fq_range_fold_one(acc, 0, x[i]);
}

static void rows__scalar(const float *x, size_t rows, size_t period, size_t p0, size_t p1,
                         fq_range_acc acc) {
    for (size_t r = 0; r < rows; ++r)
        for (size_t p = p0; p < p1; ++p) fq_range_fold_one(acc, p, x[r * period + p]);
}

const fq_range_kernels fq_range__scalar = {flat__scalar, 1, rows__scalar};
