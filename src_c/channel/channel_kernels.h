/* Per-channel chain kernel interface (channel_api.c, channel_loops.h): the scale, shifts and
   activation that follow a convolution, and their gradient; a residual sum and its activation. */
#ifndef FQ_CHANNEL_KERNELS_H
#define FQ_CHANNEL_KERNELS_H

#include <stddef.h>

#include "../include/fqcore.h"
#include "../common/parallel.h"

/* One call over x viewed as a flat array walked in tiles of `tile` floats (a whole number of
   channel periods): the per-channel vectors come repeated over a tile, so every loop runs a whole
   tile whatever the channel count. */
typedef struct {
    const float *x, *y, *dy;
    float *out;
    const float *scale, *shift_a, *shift_b; /* tiled; NULL: the step is left out */
    fq_activation activation;
    size_t n, tile;
    size_t tiles_per_block;  /* gradient: the sums' fixed blocks of tiles */
    double *partials;        /* gradient: per block, scale sums then shift sums, `tile` each */
    float *scratch;          /* gradient: a tile per block */
    int want_scale_sum, want_shift_sum;
    float divisor;
    /* gradient: dy first through a fake quant of y that passes [clip_min, clip_max] (clip set) */
    int clip;
    float clip_min, clip_max;
    const float *addend;     /* add_activation: out = activation(x + addend) */
} fq_channel_job;

/* One ISA's kernels: the forward over tiles [first, end), the gradient over blocks. */
typedef struct {
    fq_range_fn affine;
    fq_range_fn affine_grad;
    fq_range_fn fold_grad;  /* over tiles: scale = mean, shift_a = grad_mean / count, shift_b =
                               2 * grad_var, divisor = count - 1 */
    fq_range_fn add_activation;  /* over tiles */
} fq_channel_kernels;

extern const fq_channel_kernels fq_channel__scalar;
#ifdef FQ_BUILD_AVX2
extern const fq_channel_kernels fq_channel__avx2;
#endif
#ifdef FQ_BUILD_AVX512
extern const fq_channel_kernels fq_channel__avx512;
#endif
#ifdef FQ_BUILD_NEON
extern const fq_channel_kernels fq_channel__neon;
#endif

#endif
