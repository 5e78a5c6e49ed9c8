/* Range-observer kernel interface shared by the per-ISA files and the public entry point. */
#ifndef FQ_RANGE_KERNELS_H
#define FQ_RANGE_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The kernels never compare floats. They keep, per position, three extremes of the elements' bit
   patterns, which are exact, so any split of the data and any order give the same bits (no FP
   environment involved either):
     max_u  largest pattern read as unsigned: when any element has its sign bit set, the most
            negative one (-NaN above -inf above every other negative, -0 last);
     min_u  smallest read as unsigned: the smallest element with a clear sign bit, or, when every
            element has its sign set, the one closest to zero (-0 first);
     max_s  largest read as signed: when any element has a clear sign bit, the largest of those
            (+NaN above +inf).
   fq_range_finish() turns them into the channel's min and max (range_api.c). */
typedef struct {
    uint32_t *max_u;
    uint32_t *min_u;
    int32_t *max_s;
} fq_range_acc;

#define FQ_RANGE_MAX_U_START ((uint32_t)0)
#define FQ_RANGE_MIN_U_START ((uint32_t)0xffffffffu)
#define FQ_RANGE_MAX_S_START INT32_MIN

static inline uint32_t fq_range_bits(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits;
}

/* Extremes of more elements into position p. */
static inline void fq_range_merge(fq_range_acc acc, size_t p, uint32_t max_u, uint32_t min_u,
                                  int32_t max_s) {
    if (max_u > acc.max_u[p]) acc.max_u[p] = max_u;
    if (min_u < acc.min_u[p]) acc.min_u[p] = min_u;
    if (max_s > acc.max_s[p]) acc.max_s[p] = max_s;
}

/* Element x into position p: the scalar kernel, and the heads and tails of the SIMD kernels. */
static inline void fq_range_fold_one(fq_range_acc acc, size_t p, float x) {
    const uint32_t bits = fq_range_bits(x);
    fq_range_merge(acc, p, bits, bits, (int32_t)bits);
}

/* One ISA's kernels. Inputs are valid (checked by the entry point); the accumulators hold running
   values (or the START values) and the kernels fold more elements into them. */
typedef struct {
    /* Element i of x goes to position i % flat_block (flat_block is 1 or a power of two up to
       FQ_RANGE_MAX_FLAT_BLOCK): one contiguous pass for any channel count dividing flat_block. */
    void (*flat)(const float *x, size_t n, fq_range_acc acc);
    size_t flat_block;
    /* Positions [p0, p1) of `rows` periods of `period` elements: element r * period + p goes to
       position p. */
    void (*rows)(const float *x, size_t rows, size_t period, size_t p0, size_t p1,
                 fq_range_acc acc);
} fq_range_kernels;

#define FQ_RANGE_MAX_FLAT_BLOCK ((size_t)128)

extern const fq_range_kernels fq_range__scalar;
extern const fq_range_kernels fq_range__avx2;
extern const fq_range_kernels fq_range__avx512;
extern const fq_range_kernels fq_range__neon;

#endif
