/* Scalar batch-norm kernels: the reference every SIMD path must equal bit for bit. */
#include <math.h>

#include "bn_convert.h"
#include "bn_kernels.h"

static void moments__scalar(const void *x, fq_dtype dtype, size_t runs, size_t run_stride,
                            size_t count, size_t period, const double *shift, double *sum,
                            double *sum_sq, size_t table_stride, size_t readable_after) {
    (void)readable_after;
    for (size_t j = 0; j < runs; ++j) {
        const size_t t = j * table_stride;
        for (size_t i = j * run_stride, end = i + count, p = 0; i < end; ++i) {
            const double a = (double)fq_load_element(x, i, dtype) - shift[t + p];
            sum[t + p] += a;
            sum_sq[t + p] = fma(a, a, sum_sq[t + p]);
            if (++p == period) p = 0;
        }
    }
}

static void grad_sums__scalar(const void *dy, const void *x, fq_dtype dtype, size_t runs,
                              size_t run_stride, size_t count, size_t period, const double *mean,
                              double *sum_dy, double *sum_dy_xc, size_t table_stride,
                              size_t readable_after) {
    (void)readable_after;
    for (size_t j = 0; j < runs; ++j) {
        const size_t t = j * table_stride;
        for (size_t i = j * run_stride, end = i + count, p = 0; i < end; ++i) {
            const double d = (double)fq_load_element(dy, i, dtype);
            const double a = (double)fq_load_element(x, i, dtype) - mean[t + p];
            sum_dy[t + p] += d;
            sum_dy_xc[t + p] = fma(d, a, sum_dy_xc[t + p]);
            if (++p == period) p = 0;
        }
    }
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
