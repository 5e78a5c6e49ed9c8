/* The per-channel chain kernels (and a residual sum's activation), written once as plain loops
   over a tile and compiled by each ISA file with its own flags (channel_scalar.c, ...), which the
   compiler turns into vectors of that ISA; each lane is its own element and -ffp-contract=off
   keeps every multiply and add rounded on its own, so every ISA gives the same bits. Define
   FQ_CHANNEL_TABLE before including this file.

   The steps are exactly numpy's on the unfused ops, so that the chain equals them bit for bit:
   x * scale, + shift_a, + shift_b, each rounded to float32; Relu as np.maximum(v, 0) (NaN kept,
   -0 becomes +0), Relu6 as np.clip(v, 0, 6) (NaN and -0 kept); the gradient multiplies dy by 1.0f
   or 0.0f (so an infinite or NaN dy times 0 is NaN, as numpy's g * mask). */
#include <stddef.h>

#include "channel_kernels.h"
#include "../fake_quant/fq_element.h"

/* The loops, each over restrict-qualified operands and free of branches the vectorizer cannot
   turn into selects. */
static void multiply(float *restrict y, const float *restrict a, const float *restrict b, size_t n) {
    for (size_t k = 0; k < n; ++k) y[k] = a[k] * b[k];
}

static void copy(float *restrict y, const float *restrict x, size_t n) {
    for (size_t k = 0; k < n; ++k) y[k] = x[k];
}

static void add_to(float *restrict y, const float *restrict a, size_t n) {
    for (size_t k = 0; k < n; ++k) y[k] = y[k] + a[k];
}

static void add(float *restrict y, const float *restrict a, const float *restrict b, size_t n) {
    for (size_t k = 0; k < n; ++k) y[k] = a[k] + b[k];
}

static void relu(float *restrict y, size_t n) {
    for (size_t k = 0; k < n; ++k) y[k] = (y[k] > 0.0f || y[k] != y[k]) ? y[k] : 0.0f;
}

static void relu6(float *restrict y, size_t n) {
    for (size_t k = 0; k < n; ++k) {
        const float v = y[k];
        y[k] = v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v);
    }
}

/* The chain's last step, in place: none, Relu or Relu6. */
static void activate(float *restrict y, size_t n, fq_activation activation) {
    if (activation == FQ_ACTIVATION_RELU) relu(y, n);
    else if (activation == FQ_ACTIVATION_RELU6) relu6(y, n);
}

static void pass_relu(float *restrict g, const float *restrict dy, const float *restrict y, size_t n) {
    for (size_t k = 0; k < n; ++k) g[k] = dy[k] * (y[k] > 0.0f ? 1.0f : 0.0f);
}

static void pass_relu6(float *restrict g, const float *restrict dy, const float *restrict y,
                       size_t n) {
    for (size_t k = 0; k < n; ++k) g[k] = dy[k] * ((y[k] > 0.0f && y[k] < 6.0f) ? 1.0f : 0.0f);
}

/* g = dy as a FakeQuantWithMinMaxVars gradient passes it (fq_element_mask: dy and y as
   denormals-are-zero sees them, y inside [lo, hi]), in place of dy. */
static void pass_clip(float *restrict g, const float *restrict dy, const float *restrict y, float lo,
                      float hi, size_t n) {
    for (size_t k = 0; k < n; ++k) g[k] = fq_element_mask(dy[k], fq_daz(y[k]), lo, hi);
}

/* The activations' masks applied to g in place (pass_relu, pass_relu6 after pass_clip). */
static void mask_relu(float *restrict g, const float *restrict y, size_t n) {
    for (size_t k = 0; k < n; ++k) g[k] = g[k] * (y[k] > 0.0f ? 1.0f : 0.0f);
}

static void mask_relu6(float *restrict g, const float *restrict y, size_t n) {
    for (size_t k = 0; k < n; ++k) g[k] = g[k] * ((y[k] > 0.0f && y[k] < 6.0f) ? 1.0f : 0.0f);
}

static void sum_products(double *restrict sum, const float *restrict a, const float *restrict b,
                         size_t n) {
    for (size_t k = 0; k < n; ++k) sum[k] += (double)(a[k] * b[k]);
}

static void sum_values(double *restrict sum, const float *restrict a, size_t n) {
    for (size_t k = 0; k < n; ++k) sum[k] += (double)a[k];
}

/* The elements of the tile that starts at element `start`: a whole tile but for the last. */
static inline size_t tile_length(const fq_channel_job *job, size_t start) {
    return job->n - start < job->tile ? job->n - start : job->tile;
}

static void affine_tiles(void *context, size_t first, size_t end) {
    const fq_channel_job *job = context;
    for (size_t tile = first; tile < end; ++tile) {
        const size_t start = tile * job->tile;
        const size_t len = tile_length(job, start);
        float *y = job->out + start;
        if (job->scale != NULL) multiply(y, job->x + start, job->scale, len);
        else copy(y, job->x + start, len);
        if (job->shift_a != NULL) add_to(y, job->shift_a, len);
        if (job->shift_b != NULL) add_to(y, job->shift_b, len);
        activate(y, len, job->activation);
    }
}

/* out = activation(x + addend), a tile at a time: the sum, then the activation in place while the
   tile is in L1. */
static void add_activation_tiles(void *context, size_t first, size_t end) {
    const fq_channel_job *job = context;
    for (size_t tile = first; tile < end; ++tile) {
        const size_t start = tile * job->tile;
        const size_t len = tile_length(job, start);
        float *y = job->out + start;
        add(y, job->x + start, job->addend + start, len);
        activate(y, len, job->activation);
    }
}

/* The fold's whole gradient step in one loop (a scale, both sums and x_backprop wanted): g as
   the passes below make it, then out = scale * g and both sums, without g's round trip through
   the scratch tile. `clip` and `activation` are compile-time constants at each call. */
static inline __attribute__((always_inline)) void
grad_scaled_tile(float *restrict out, double *restrict scale_sum, double *restrict shift_sum,
                 const float *restrict dy, const float *restrict y, const float *restrict x,
                 const float *restrict scale, float lo, float hi, size_t n, int clip,
                 fq_activation activation) {
    for (size_t k = 0; k < n; ++k) {
        float g = clip ? fq_element_mask(dy[k], fq_daz(y[k]), lo, hi) : dy[k];
        if (activation == FQ_ACTIVATION_RELU) g = g * (y[k] > 0.0f ? 1.0f : 0.0f);
        else if (activation == FQ_ACTIVATION_RELU6) g = g * ((y[k] > 0.0f && y[k] < 6.0f) ? 1.0f : 0.0f);
        out[k] = scale[k] * g;
        scale_sum[k] += (double)(g * x[k]);
        shift_sum[k] += (double)g;
    }
}

static void grad_scaled(const fq_channel_job *job, size_t start, size_t len, const float *y,
                        double *scale_sum, double *shift_sum) {
    const float *dy = job->dy + start, *x = job->x + start, lo = job->clip_min, hi = job->clip_max;
    float *out = job->out + start;
#define FQ_GRAD_SCALED(clip, activation) \
    grad_scaled_tile(out, scale_sum, shift_sum, dy, y, x, job->scale, lo, hi, len, clip, activation)
    switch (job->activation) {
    case FQ_ACTIVATION_RELU:
        if (job->clip) FQ_GRAD_SCALED(1, FQ_ACTIVATION_RELU); else FQ_GRAD_SCALED(0, FQ_ACTIVATION_RELU);
        break;
    case FQ_ACTIVATION_RELU6:
        if (job->clip) FQ_GRAD_SCALED(1, FQ_ACTIVATION_RELU6); else FQ_GRAD_SCALED(0, FQ_ACTIVATION_RELU6);
        break;
    default:
        if (job->clip) FQ_GRAD_SCALED(1, FQ_ACTIVATION_NONE); else FQ_GRAD_SCALED(0, FQ_ACTIVATION_NONE);
    }
#undef FQ_GRAD_SCALED
}

/* Block b: x_backprop over its tiles, and its partial sums per tile position (float64); g, the
   gradient after the activation, goes through the block's scratch tile. */
static void affine_grad_blocks(void *context, size_t first_block, size_t end_block) {
    const fq_channel_job *job = context;
    const size_t tiles = (job->n + job->tile - 1) / job->tile;
    for (size_t block = first_block; block < end_block; ++block) {
        double *scale_sum = job->partials + 2 * block * job->tile, *shift_sum = scale_sum + job->tile;
        float *g = job->scratch + block * job->tile;
        for (size_t k = 0; k < 2 * job->tile; ++k) scale_sum[k] = 0.0;
        const size_t first = block * job->tiles_per_block;
        const size_t end = first + job->tiles_per_block < tiles ? first + job->tiles_per_block : tiles;
        for (size_t tile = first; tile < end; ++tile) {
            const size_t start = tile * job->tile;
            const size_t len = tile_length(job, start);
            const float *dy = job->dy + start, *y = job->y + start;
            if (job->out != NULL && job->scale != NULL && job->want_scale_sum && job->want_shift_sum) {
                grad_scaled(job, start, len, y, scale_sum, shift_sum);
                continue;
            }
            if (job->clip) {
                pass_clip(g, dy, y, job->clip_min, job->clip_max, len);
                if (job->activation == FQ_ACTIVATION_RELU) mask_relu(g, y, len);
                else if (job->activation == FQ_ACTIVATION_RELU6) mask_relu6(g, y, len);
            } else if (job->activation == FQ_ACTIVATION_RELU) {
                pass_relu(g, dy, y, len);
            } else if (job->activation == FQ_ACTIVATION_RELU6) {
                pass_relu6(g, dy, y, len);
            } else {
                copy(g, dy, len);
            }
            if (job->out != NULL) {
                if (job->scale != NULL) multiply(job->out + start, job->scale, g, len);
                else copy(job->out + start, g, len);
            }
            if (job->want_scale_sum) sum_products(scale_sum, g, job->x + start, len);
            if (job->want_shift_sum) sum_values(shift_sum, g, len);
        }
    }
}

/* out = shift_a + ((shift_b * (x - scale)) / divisor), the fold's gradient (the vectors as
   fq_channel_kernels.fold_grad names them). */
static void fold_grad_tile(float *restrict out, const float *restrict x, const float *restrict mean,
                           const float *restrict dmean, const float *restrict twice, float divisor,
                           size_t n) {
    for (size_t k = 0; k < n; ++k) out[k] = dmean[k] + (twice[k] * (x[k] - mean[k])) / divisor;
}

static void fold_grad_tiles(void *context, size_t first, size_t end) {
    const fq_channel_job *job = context;
    for (size_t tile = first; tile < end; ++tile) {
        const size_t start = tile * job->tile;
        const size_t len = tile_length(job, start);
        fold_grad_tile(job->out + start, job->x + start, job->scale, job->shift_a, job->shift_b,
                       job->divisor, len);
    }
}

const fq_channel_kernels FQ_CHANNEL_TABLE = {affine_tiles, affine_grad_blocks, fold_grad_tiles,
                                              add_activation_tiles};
