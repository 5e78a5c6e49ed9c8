/* Batch-norm kernel interface shared by the per-ISA files and the public entry points. */
#ifndef FQ_BN_KERNELS_H
#define FQ_BN_KERNELS_H

#include <math.h>
#include <stddef.h>

#include "../include/fqcore.h"
#include "bn_convert.h"

/* Every kernel walks `runs` runs of `count` consecutive elements, run j starting at element
   j * run_stride. A run starts at position 0 of a period of `period` positions (its last period
   may be cut short); position p of every period belongs to the same channel and reads its
   per-channel values at index p of the tables. Channels-last data is one run whose period is whole
   rows of channels. Channels-first data is a run per channel and batch: its sums have FQ_BN_LANES
   positions holding one channel's values, its elementwise passes a period of 1. */
#define FQ_BN_LANES 16

/* Per-position float32 constants of the elementwise kernels. */
typedef struct {
    const float *a;
    const float *b;
    const float *c;
    const float *d;
} fq_bn_table;

/* Elementwise formulas, in float32 without contraction: the scalar kernels, and every SIMD tail,
   use exactly these. */
static inline float fq_bn_normalize_one(float x, float mean_hi, float mean_lo, float alpha,
                                        float beta) {
    return ((x - mean_hi) - mean_lo) * alpha + beta;
}

static inline float fq_bn_backprop_one(float dy, float x, float dy_mean, float mean, float k1,
                                       float k2) {
    return ((dy - dy_mean) - (x - mean) * k1) * k2;
}

/* The three elementwise passes: y from x (NORMALIZE), dx from dy and x (BACKPROP), dx from dy
   (SCALE). */
typedef enum { FQ_BN_NORMALIZE, FQ_BN_BACKPROP, FQ_BN_SCALE } fq_bn_pass;

/* Element i (position p) of a pass, with the scalar formulas. */
static inline float fq_bn_pass_one(fq_bn_pass pass, const void *dy, const void *x, fq_dtype dtype,
                                   size_t i, const fq_bn_table *t, size_t p) {
    switch (pass) {
    case FQ_BN_NORMALIZE:
        return fq_bn_normalize_one(fq_load_element(x, i, dtype), t->a[p], t->b[p], t->c[p], t->d[p]);
    case FQ_BN_BACKPROP:
        return fq_bn_backprop_one(fq_load_element(dy, i, dtype), fq_load_element(x, i, dtype),
                                  t->a[p], t->b[p], t->c[p], t->d[p]);
    default: return fq_load_element(dy, i, dtype) * t->a[p];
    }
}

/* The tables of run j. */
static inline fq_bn_table fq_bn_table_of_run(const fq_bn_table *t, size_t j, size_t table_stride) {
    const size_t o = j * table_stride;
    const fq_bn_table moved = {t->a + o, t->b + o, t->c + o, t->d + o};
    return moved;
}

/* The sums add each position's elements in float32 runs of FQ_BN_SUM_RUN rows: within one kernel
   run, a position's elements of rows [k * FQ_BN_SUM_RUN, (k + 1) * FQ_BN_SUM_RUN) (fewer for the last
   whole rows), and its element in a cut-short last period alone, are added up in float32 in row order,
   each run starting from its first element, and the run is then added into the position's float64
   accumulator, run after run. Centers are float32, so the centered value x - center is a float32
   (exact whenever x is within a factor 2 of the center, as near the mean: Sterbenz). */
#define FQ_BN_SUM_RUN 4

/* One float32 run of `n` >= 1 elements of a position, from element i in steps of `step`: with
   dy == NULL the sums of a = x - center and of a * a, else of dy and of dy * a (products fused
   into the run: fmaf, one rounding), added into *sum_a and *sum_b. The scalar kernels, and every
   SIMD tail, use exactly this. */
static inline void fq_bn_sum_run(const void *dy, const void *x, fq_dtype dtype, size_t i, size_t step,
                                 size_t n, float center, double *sum_a, double *sum_b) {
    float a = fq_load_element(x, i, dtype) - center;
    float g = dy == NULL ? a : fq_load_element(dy, i, dtype);
    float run_a = g, run_b = g * a;
    for (size_t k = 1; k < n; ++k) {
        i += step;
        a = fq_load_element(x, i, dtype) - center;
        g = dy == NULL ? a : fq_load_element(dy, i, dtype);
        run_a += g;
        run_b = fmaf(g, a, run_b);
    }
    *sum_a += (double)run_a;
    *sum_b += (double)run_b;
}

/* One ISA's kernels. Inputs are valid and the thread is already in flush-to-zero mode. Sums are
   added into the float64 accumulators of each position in float32 runs (FQ_BN_SUM_RUN), run after
   run in index order; the SIMD kernels keep that order per position (they vectorize across
   positions only). Every kernel moves its tables (per-position values and accumulators) on by
   table_stride entries from one run to the next: 0 when all runs share them. The elementwise
   tables hold period + FQ_BN_LANES entries, the last ones repeating the first, so a vector may
   cross the end of a period, except at a period of 1, where only entry 0 is read; `stream` asks
   for float32 output to bypass the caches (it is too large to stay). The sums may prefetch (never
   read) the `readable_after` elements that follow the last run: a caller that splits one array
   into consecutive calls lets each call fetch the next one's start. `rows_in_order` asks for the
   gradient's sums to walk rows in memory order where the period allows (bn_simd.h,
   sums_in_order): the caller's choice for inputs too large to stay in the caches, on CPUs that gain
   by it (bn_walk.c). It picks a walk, not a result. */
typedef struct {
    /* The float32 runs (fq_bn_sum_run) of a = x - shift[p] and a * a into sum[p], sum_sq[p]. */
    void (*moments)(const void *x, fq_dtype dtype, size_t runs, size_t run_stride, size_t count,
                    size_t period, const float *shift, double *sum, double *sum_sq,
                    size_t table_stride, size_t readable_after);
    /* The float32 runs of dy and dy * (x - mean[p]) into sum_dy[p], sum_dy_xc[p]. */
    void (*grad_sums)(const void *dy, const void *x, fq_dtype dtype, size_t runs,
                      size_t run_stride, size_t count, size_t period, const float *mean,
                      double *sum_dy, double *sum_dy_xc, size_t table_stride,
                      size_t readable_after, int rows_in_order);
    /* y = fq_bn_normalize_one(x, a[p], b[p], c[p], d[p]). */
    void (*normalize)(const void *x, void *y, fq_dtype dtype, size_t runs, size_t run_stride,
                      size_t count, size_t period, const fq_bn_table *table, size_t table_stride,
                      int stream);
    /* dx = fq_bn_backprop_one(dy, x, a[p], b[p], c[p], d[p]). */
    void (*backprop)(const void *dy, const void *x, void *dx, fq_dtype dtype, size_t runs,
                     size_t run_stride, size_t count, size_t period, const fq_bn_table *table,
                     size_t table_stride, int stream);
    /* dx = dy * a[p]. */
    void (*scale)(const void *dy, void *dx, fq_dtype dtype, size_t runs, size_t run_stride,
                  size_t count, size_t period, const fq_bn_table *table, size_t table_stride,
                  int stream);
} fq_bn_kernels;

extern const fq_bn_kernels fq_bn__scalar;
extern const fq_bn_kernels fq_bn__avx2;
extern const fq_bn_kernels fq_bn__avx512;
extern const fq_bn_kernels fq_bn__neon;

#endif
