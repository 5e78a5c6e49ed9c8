/* Public entry points of the per-channel chain: validation, the tiled vectors, the split over
   threads and the order of the gradient's sums. They run under the caller's floating-point
   environment, as the numpy ops they stand for do (no flush to zero). */
#include <stdlib.h>
#include <string.h>

#include "../include/fqcore.h"
#include "../common/line_alloc.h"
#include "../common/parallel.h"
#include "../common/runtime.h"
#include "channel_kernels.h"

/* A tile holds whole channel periods, at least this many floats when the channel count allows:
   loops long enough to run at vector speed, vectors repeated over it small enough for L1. */
#define FQ_CHANNEL_TILE_FLOATS ((size_t)1024)
/* The gradient's sums: blocks of about this many elements (at most FQ_CHANNEL_MAX_BLOCKS), a fixed
   function of the shape, each summed in float64 in tile order, then the blocks in order. */
#define FQ_CHANNEL_BLOCK_ELEMENTS ((size_t)65536)
#define FQ_CHANNEL_MAX_BLOCKS ((size_t)64)

static const fq_channel_kernels *active_kernels(void) {
    switch (fq_get_isa()) {
#ifdef FQ_BUILD_AVX2
    case FQ_ISA_AVX2: return &fq_channel__avx2;
#endif
#ifdef FQ_BUILD_AVX512
    case FQ_ISA_AVX512: return &fq_channel__avx512;
#endif
#ifdef FQ_BUILD_NEON
    case FQ_ISA_NEON: return &fq_channel__neon;
#endif
    default: return &fq_channel__scalar;
    }
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

static fq_status check(size_t n, size_t channels, fq_activation activation) {
    if (channels == 0) return n == 0 ? FQ_OK : FQ_ERR_BAD_SHAPE;
    if (n % channels != 0) return FQ_ERR_BAD_SHAPE;
    if ((unsigned)activation > FQ_ACTIVATION_RELU6) return FQ_ERR_BAD_SHAPE;
    return FQ_OK;
}

/* The given vectors (NULL stays NULL) repeated over one tile, in one allocation (*storage). */
static fq_status tile_vectors(size_t channels, size_t tile, const float *const vectors[3],
                              const float *tiled[3], float **storage) {
    size_t count = 0;
    for (int v = 0; v < 3; ++v) count += vectors[v] != NULL;
    *storage = count ? fq_line_alloc(count * tile * sizeof(float)) : NULL;
    if (count && *storage == NULL) return FQ_ERR_NO_MEMORY;
    float *next = *storage;
    for (int v = 0; v < 3; ++v) {
        tiled[v] = NULL;
        if (vectors[v] == NULL) continue;
        for (size_t at = 0; at < tile; at += channels) memcpy(next + at, vectors[v], channels * sizeof(float));
        tiled[v] = next;
        next += tile;
    }
    return FQ_OK;
}

static size_t tile_for(size_t channels) {
    return channels >= FQ_CHANNEL_TILE_FLOATS ? channels : ceil_div(FQ_CHANNEL_TILE_FLOATS, channels) * channels;
}

fq_status fq_f32_channel_affine(const float *x, size_t n, size_t channels, const float *scale,
                                const float *shift_a, const float *shift_b,
                                fq_activation activation, float *y) {
    fq_status status = check(n, channels, activation);
    if (status != FQ_OK || n == 0) return status;
    if (x == NULL || y == NULL) return FQ_ERR_NULL_POINTER;
    const size_t tile = tile_for(channels);
    const float *const vectors[3] = {scale, shift_a, shift_b};
    const float *tiled[3];
    float *storage;
    if ((status = tile_vectors(channels, tile, vectors, tiled, &storage)) != FQ_OK) return status;
    const fq_channel_job job = {x, NULL, NULL, y, tiled[0], tiled[1], tiled[2], activation, n,
                                tile, 0, NULL, NULL, 0, 0, 0.0f, 0, 0.0f, 0.0f, NULL};
    const size_t tiles = ceil_div(n, tile);
    fq_parallel_for(fq_runtime_threads_for(n, tiles), tiles, active_kernels()->affine, (void *)&job);
    free(storage);
    return FQ_OK;
}

/* The chain's gradient, after a fake quant's clip when `clip` is set. */
static fq_status affine_grad(const float *y_backprop, const float *x, const float *y, size_t n,
                             size_t channels, const float *scale, fq_activation activation,
                             int clip, float clip_min, float clip_max, float *x_backprop,
                             float *scale_backprop, float *shift_backprop) {
    fq_status status = check(n, channels, activation);
    if (status != FQ_OK) return status;
    if (n > 0 && (y_backprop == NULL || y == NULL || (scale_backprop != NULL && x == NULL)))
        return FQ_ERR_NULL_POINTER;
    for (size_t c = 0; c < channels; ++c) {
        if (scale_backprop != NULL) scale_backprop[c] = 0.0f;
        if (shift_backprop != NULL) shift_backprop[c] = 0.0f;
    }
    if (n == 0) return FQ_OK;
    const size_t tile = tile_for(channels), tiles = ceil_div(n, tile);
    size_t tiles_per_block = ceil_div(FQ_CHANNEL_BLOCK_ELEMENTS, tile);
    if (tiles > tiles_per_block * FQ_CHANNEL_MAX_BLOCKS) tiles_per_block = ceil_div(tiles, FQ_CHANNEL_MAX_BLOCKS);
    const size_t blocks = ceil_div(tiles, tiles_per_block);
    const float *const vectors[3] = {scale, NULL, NULL};
    const float *tiled[3];
    float *storage;
    if ((status = tile_vectors(channels, tile, vectors, tiled, &storage)) != FQ_OK) return status;
    /* On a line (fq_line_alloc): the loops add into the partials a vector at a time. Intel Xeon
       (Sapphire Rapids class), AVX-512, one thread, clipped ReLU6 gradient, three processes each
       against malloc's placement: [64, 8, 8, 32] 76-80 -> 62-64 us, [64, 4, 4, 64] 36-38 -> 28-30,
       [64, 8, 8, 24] 53-56 -> 43-45, [32, 8, 8, 96] 128-135 -> 124-126; past L2 ([64, 7, 7, 64])
       no change. */
    double *partials = fq_line_alloc(blocks * tile * (2 * sizeof(double) + sizeof(float)));
    if (partials == NULL) {
        free(storage);
        return FQ_ERR_NO_MEMORY;
    }
    const fq_channel_job job = {x, y, y_backprop, x_backprop, tiled[0], NULL, NULL, activation, n,
                                tile, tiles_per_block, partials,
                                (float *)(partials + 2 * blocks * tile), scale_backprop != NULL,
                                shift_backprop != NULL, 0.0f, clip, clip_min, clip_max, NULL};
    fq_parallel_for(fq_runtime_threads_for(n, blocks), blocks, active_kernels()->affine_grad,
                    (void *)&job);
    /* Blocks in order into block 0, then each channel's tile positions in order. */
    for (size_t block = 1; block < blocks; ++block)
        for (size_t k = 0; k < 2 * tile; ++k) partials[k] += partials[2 * block * tile + k];
    for (size_t c = 0; c < channels; ++c) {
        double scale_sum = 0.0, shift_sum = 0.0;
        for (size_t k = c; k < tile; k += channels) {
            scale_sum += partials[k];
            shift_sum += partials[tile + k];
        }
        if (scale_backprop != NULL) scale_backprop[c] = (float)scale_sum;
        if (shift_backprop != NULL) shift_backprop[c] = (float)shift_sum;
    }
    free(partials);
    free(storage);
    return FQ_OK;
}

fq_status fq_f32_channel_affine_grad(const float *y_backprop, const float *x, const float *y,
                                     size_t n, size_t channels, const float *scale,
                                     fq_activation activation, float *x_backprop,
                                     float *scale_backprop, float *shift_backprop) {
    return affine_grad(y_backprop, x, y, n, channels, scale, activation, 0, 0.0f, 0.0f, x_backprop,
                       scale_backprop, shift_backprop);
}

fq_status fq_f32_channel_affine_grad_clipped(const float *y_backprop, const float *x, const float *y,
                                             size_t n, size_t channels, const float *scale,
                                             fq_activation activation, float clip_min,
                                             float clip_max, float *x_backprop,
                                             float *scale_backprop, float *shift_backprop) {
    return affine_grad(y_backprop, x, y, n, channels, scale, activation, 1, clip_min, clip_max,
                       x_backprop, scale_backprop, shift_backprop);
}

fq_status fq_f32_fold_batch_norm_grad(const float *x, size_t n, size_t channels, const float *mean,
                                      const float *grad_mean, const float *grad_var, float count,
                                      float *x_backprop) {
    fq_status status = check(n, channels, FQ_ACTIVATION_NONE);
    if (status != FQ_OK || n == 0) return status;
    if (x == NULL || mean == NULL || grad_mean == NULL || grad_var == NULL || x_backprop == NULL)
        return FQ_ERR_NULL_POINTER;
    float *per_channel = malloc(2 * channels * sizeof(float));
    if (per_channel == NULL) return FQ_ERR_NO_MEMORY;
    for (size_t c = 0; c < channels; ++c) {
        per_channel[c] = grad_mean[c] / count;
        per_channel[channels + c] = 2.0f * grad_var[c];
    }
    const size_t tile = tile_for(channels);
    const float *const vectors[3] = {mean, per_channel, per_channel + channels};
    const float *tiled[3];
    float *storage;
    status = tile_vectors(channels, tile, vectors, tiled, &storage);
    free(per_channel);
    if (status != FQ_OK) return status;
    const fq_channel_job job = {x, NULL, NULL, x_backprop, tiled[0], tiled[1], tiled[2],
                                FQ_ACTIVATION_NONE, n, tile, 0, NULL, NULL, 0, 0, count - 1.0f, 0,
                                0.0f, 0.0f, NULL};
    const size_t tiles = ceil_div(n, tile);
    fq_parallel_for(fq_runtime_threads_for(n, tiles), tiles, active_kernels()->fold_grad,
                    (void *)&job);
    free(storage);
    return FQ_OK;
}

fq_status fq_f32_add_activation(const float *a, const float *b, size_t n, fq_activation activation,
                                float *y) {
    fq_status status = check(n, 1, activation);
    if (status != FQ_OK || n == 0) return status;
    if (a == NULL || b == NULL || y == NULL) return FQ_ERR_NULL_POINTER;
    const fq_channel_job job = {a, NULL, NULL, y, NULL, NULL, NULL, activation, n,
                                FQ_CHANNEL_TILE_FLOATS, 0, NULL, NULL, 0, 0, 0.0f, 0, 0.0f, 0.0f, b};
    const size_t tiles = ceil_div(n, FQ_CHANNEL_TILE_FLOATS);
    fq_parallel_for(fq_runtime_threads_for(n, tiles), tiles, active_kernels()->add_activation,
                    (void *)&job);
    return FQ_OK;
}
