/* Scalar batch-norm kernels: the reference every SIMD path must equal bit for bit. */
#include <math.h>

#include "bn_convert.h"
#include "bn_kernels.h"

/* Each run's positions, whole rows in float32 runs of FQ_BN_SUM_RUN, then the cut-short last
   period's elements as runs of one. */
static void sums__scalar(const void *dy, const void *x, fq_dtype dtype, size_t runs, size_t run_stride,
                         size_t count, size_t period, const float *center, double *sum_a,
                         double *sum_b, size_t table_stride) {
    const size_t rows = count / period;
    for (size_t j = 0; j < runs; ++j) {
        const size_t run = j * run_stride, t = j * table_stride;
        for (size_t r = 0; r < rows; r += FQ_BN_SUM_RUN) {
            const size_t n = rows - r < FQ_BN_SUM_RUN ? rows - r : FQ_BN_SUM_RUN;
            for (size_t p = 0; p < period; ++p)
                fq_bn_sum_run(dy, x, dtype, run + r * period + p, period, n, center[t + p], &sum_a[t + p],
                              &sum_b[t + p]);
        }
        for (size_t p = 0; rows * period + p < count; ++p)
            fq_bn_sum_run(dy, x, dtype, run + rows * period + p, period, 1, center[t + p], &sum_a[t + p],
                          &sum_b[t + p]);
    }
}

static void moments__scalar(const void *x, fq_dtype dtype, size_t runs, size_t run_stride,
                            size_t count, size_t period, const float *shift, double *sum,
                            double *sum_sq, size_t table_stride, size_t readable_after) {
    (void)readable_after;
    sums__scalar(NULL, x, dtype, runs, run_stride, count, period, shift, sum, sum_sq, table_stride);
}

static void grad_sums__scalar(const void *dy, const void *x, fq_dtype dtype, size_t runs,
                              size_t run_stride, size_t count, size_t period, const float *mean,
                              double *sum_dy, double *sum_dy_xc, size_t table_stride,
                              size_t readable_after, int rows_in_order) {
    (void)readable_after;
    (void)rows_in_order;
    sums__scalar(dy, x, dtype, runs, run_stride, count, period, mean, sum_dy, sum_dy_xc, table_stride);
}

static void pass__scalar(fq_bn_pass pass, const void *dy, const void *x, void *out, fq_dtype dtype,
                         size_t runs, size_t run_stride, size_t count, size_t period,
                         const fq_bn_table *table, size_t table_stride) {
    for (size_t j = 0; j < runs; ++j) {
        const fq_bn_table t = fq_bn_table_of_run(table, j, table_stride);
        for (size_t i = j * run_stride, end = i + count, p = 0; i < end; ++i) {
            fq_store_element(out, i, dtype, fq_bn_pass_one(pass, dy, x, dtype, i, &t, p));
            if (++p == period) p = 0;
        }
    }
}

/* The scalar stores are plain: `stream` is a hint for the SIMD kernels. */
static void normalize__scalar(const void *x, void *y, fq_dtype dtype, size_t runs,
                              size_t run_stride, size_t count, size_t period,
                              const fq_bn_table *table, size_t table_stride, int stream) {
    (void)stream;
    pass__scalar(FQ_BN_NORMALIZE, NULL, x, y, dtype, runs, run_stride, count, period, table, table_stride);
}

static void backprop__scalar(const void *dy, const void *x, void *dx, fq_dtype dtype, size_t runs,
                             size_t run_stride, size_t count, size_t period,
                             const fq_bn_table *table, size_t table_stride, int stream) {
    (void)stream;
    pass__scalar(FQ_BN_BACKPROP, dy, x, dx, dtype, runs, run_stride, count, period, table, table_stride);
}

static void scale__scalar(const void *dy, void *dx, fq_dtype dtype, size_t runs, size_t run_stride,
                          size_t count, size_t period, const fq_bn_table *table,
                          size_t table_stride, int stream) {
    (void)stream;
    pass__scalar(FQ_BN_SCALE, dy, NULL, dx, dtype, runs, run_stride, count, period, table, table_stride);
}

const fq_bn_kernels fq_bn__scalar = {moments__scalar, grad_sums__scalar, normalize__scalar,
                                     backprop__scalar, scale__scalar};
