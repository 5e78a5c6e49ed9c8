/* The convolution kernels, written once and compiled by each ISA file with its own flags
   (conv_scalar.c, conv_avx2.c, ...). Each lane is its own element, and -ffp-contract=off keeps
   each multiply and add rounded on its own, so every ISA gives the same bits. Define
   FQ_CONV_TABLE (the table's name) before including this file.

   The forward sums each output element in registers: a block of CONV_PIXELS pixels x
   CONV_CHANNELS channels, started at 0.0f, given its taps' terms in row-major order and stored
   once; accumulating in the output instead costs a load and a store of it per tap. A block row is
   a conv_vec, GCC's generic vector of CONV_CHANNELS floats, which each ISA's compiler splits into
   its own registers (one zmm, two ymm, four NEON or SSE vectors): written as float arrays, the
   blocks stayed in memory. Block sizes are compile-time constants (their loops unroll); the ragged
   ends (a row's edge pixels, whose taps fall partly in the padding, its last pixels, the channels
   past the last whole block) run the same code on one pixel or on fewer lanes.

   The gradients and col2im loop over the longest contiguous runs the layout has: with a column
   stride of 1, the pixels of a row that one kernel position meets are consecutive, so that
   position's work on the row is one loop over (pixels x channels) floats (for the input gradient,
   against the filter tap repeated along the row: fq_conv_job.tiled); per pixel, a loop over the
   channels alone would be a few vectors long. */
#include <stddef.h>
#include <string.h>

#include "conv_kernels.h"

#define CONV_PIXELS 4
#define CONV_CHANNELS 16

typedef float conv_vec __attribute__((vector_size(CONV_CHANNELS * sizeof(float))));

#define CONV_INLINE static inline __attribute__((always_inline))
#define CONV_UNROLL _Pragma("GCC unroll 16")

static inline size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* The output indices [*first, *end) whose window reads an input index in [0, size) at tap `tap`:
   out * stride + tap * dilation - pad in [0, size), out < out_size. */
static inline void conv_reading(size_t tap, size_t stride, size_t dilation, size_t pad,
                                size_t size, size_t out_size, size_t *first, size_t *end) {
    const size_t offset = tap * dilation;
    *first = offset >= pad ? 0 : (pad - offset + stride - 1) / stride;
    *end = size + pad <= offset ? 0 : (size + pad - offset - 1) / stride + 1;
    if (*end > out_size) *end = out_size;
    if (*first > *end) *first = *end;
}

/* The input index that output index `out` reads at tap `tap` (within conv_reading's range). */
static inline size_t conv_read_index(size_t out, size_t tap, size_t stride, size_t dilation,
                                     size_t pad) {
    return out * stride + tap * dilation - pad;
}

/* --- The forward's blocks: acc[p] lane c for p < pixels, c < width (both at most the block's
   size). --- */

/* *v = `width` floats from p (lanes past width 0). Vectors go by pointer: passed by value they
   would change the ABI where the ISA has no such registers (always inlined, no ABI is involved,
   but GCC warns). */
CONV_INLINE void load_lanes(conv_vec *v, const float *p, size_t width) {
    if (width == CONV_CHANNELS) {
        memcpy(v, p, sizeof *v);
        return;
    }
    *v = (conv_vec){0};
    for (size_t c = 0; c < width; ++c) (*v)[c] = p[c];
}

CONV_INLINE void store_lanes(float *p, const conv_vec *v, size_t width) {
    if (width == CONV_CHANNELS) memcpy(p, v, sizeof *v);
    else for (size_t c = 0; c < width; ++c) p[c] = (*v)[c];
}

CONV_INLINE void block_zero(conv_vec *acc, size_t pixels) {
    CONV_UNROLL for (size_t p = 0; p < pixels; ++p) acc[p] = (conv_vec){0};
}

/* acc[p][c] += a[p * step + c] * w[c]: one tap's terms. */
CONV_INLINE void block_multiply_add(conv_vec *acc, size_t pixels, size_t width, const float *a,
                                    size_t step, const float *w) {
    conv_vec wv, av;
    load_lanes(&wv, w, width);
    CONV_UNROLL for (size_t p = 0; p < pixels; ++p) {
        load_lanes(&av, a + p * step, width);
        acc[p] += av * wv;
    }
}

CONV_INLINE void block_store(float *out, size_t step, const conv_vec *acc, size_t pixels,
                             size_t width) {
    CONV_UNROLL for (size_t p = 0; p < pixels; ++p) store_lanes(out + p * step, &acc[p], width);
}

/* --- The taps that meet one output position, along one dimension: `count` taps from `first`;
   the input index at the first and its change per tap. --- */
typedef struct {
    size_t first, count, index;
    ptrdiff_t index_step;
} conv_walk;

/* Output index `out` reads input index out * stride + t * dilation - pad, in [0, size). */
static conv_walk forward_walk(size_t out, size_t taps, size_t stride, size_t dilation, size_t pad,
                              size_t size) {
    conv_walk walk = {0, 0, 0, (ptrdiff_t)dilation};
    const size_t at = out * stride;
    const size_t first = at >= pad ? 0 : (pad - at + dilation - 1) / dilation;
    const size_t end = min_size(taps, at >= pad + size ? 0 : (pad + size - at - 1) / dilation + 1);
    if (first < end) {
        walk.first = first;
        walk.count = end - first;
        walk.index = at + first * dilation - pad;
    }
    return walk;
}

/* Whether the positions between two whose walks these are meet the same taps: valid taps move
   monotonically with the position, so equal ends say so, unless both are empty (the run may pass
   between them). */
static int same_taps(conv_walk a, conv_walk b) {
    return a.count > 0 && a.first == b.first && a.count == b.count;
}

/* A block's taps: rows x cols of them, the k-th row and l-th column's term reading
   src + k * src_row + l * src_col (pixel p at p * step further) and w + k * w_row + l * w_col;
   channel c0's at c0 further. */
typedef struct {
    const float *src, *w;
    ptrdiff_t src_row, src_col, w_row, w_col;
    size_t rows, cols, step;
} conv_taps;

/* acc[p][c] for channels [c0, c0 + width): each tap's term, taps row-major. */
CONV_INLINE void block_taps(conv_vec *acc, size_t pixels, size_t width, const conv_taps *t,
                            size_t c0) {
    for (size_t k = 0; k < t->rows; ++k)
        for (size_t l = 0; l < t->cols; ++l)
            block_multiply_add(acc, pixels, width,
                               t->src + (ptrdiff_t)k * t->src_row + (ptrdiff_t)l * t->src_col + c0,
                               t->step,
                               t->w + (ptrdiff_t)k * t->w_row + (ptrdiff_t)l * t->w_col + c0);
}

/* `pixels` pixels (out[p * out_step]) that share their taps, every channel: whole blocks, then the
   rest. */
CONV_INLINE void block_pixels(const conv_taps *t, size_t pixels, size_t channels,
                              float *restrict out, size_t out_step) {
    const size_t whole = channels - channels % CONV_CHANNELS;
    conv_vec acc[CONV_PIXELS];
    for (size_t c0 = 0; c0 < whole; c0 += CONV_CHANNELS) {
        block_zero(acc, pixels);
        block_taps(acc, pixels, CONV_CHANNELS, t, c0);
        block_store(out + c0, out_step, acc, pixels, CONV_CHANNELS);
    }
    if (whole < channels) {
        block_zero(acc, pixels);
        block_taps(acc, pixels, channels - whole, t, whole);
        block_store(out + whole, out_step, acc, pixels, channels - whole);
    }
}

/* --- Forward: y[n, r, q, c] = sum over taps of x[n, ih, iw, c] * w[i, j, c] (a multiplier M
   arrives as x with each channel repeated M times: conv_api.c). Blocks of CONV_PIXELS
   consecutive output pixels whose taps are the same (all but a padded row's edges). --- */
static void depthwise(void *context, size_t first_row, size_t end_row) {
    const fq_conv_job *job = context;
    const fq_conv_geometry *g = &job->g;
    const size_t c = g->channels, kw = g->kernel_width;
    for (size_t row = first_row; row < end_row; ++row) {
        const size_t n = row / g->out_height, r = row % g->out_height;
        const conv_walk rows = forward_walk(r, g->kernel_height, g->stride_height,
                                            g->dilation_height, g->pad_top, g->height);
        float *y_row = job->out + row * g->out_width * c;
        const float *x_row = job->x + (n * g->height + rows.index) * g->width * c;
        for (size_t q = 0; q < g->out_width;) {
            const conv_walk cols = forward_walk(q, kw, g->stride_width, g->dilation_width,
                                                g->pad_left, g->width);
            const int block = q + CONV_PIXELS <= g->out_width &&
                              same_taps(cols, forward_walk(q + CONV_PIXELS - 1, kw, g->stride_width,
                                                           g->dilation_width, g->pad_left, g->width));
            const conv_taps taps = {x_row + cols.index * c,
                                    job->w + (rows.first * kw + cols.first) * c,
                                    rows.index_step * (ptrdiff_t)(g->width * c),
                                    cols.index_step * (ptrdiff_t)c, (ptrdiff_t)(kw * c),
                                    (ptrdiff_t)c, rows.count, cols.count, g->stride_width * c};
            if (block) block_pixels(&taps, CONV_PIXELS, c, y_row + q * c, c);
            else block_pixels(&taps, 1, c, y_row + q * c, c);
            q += block ? CONV_PIXELS : 1;
        }
    }
}

static void zero(float *restrict out, size_t n) {
    for (size_t k = 0; k < n; ++k) out[k] = 0.0f;
}

/* out[k] += a[k] * b[k] for k < n. */
static void multiply_add(float *restrict out, const float *restrict a, const float *restrict b,
                         size_t n) {
    for (size_t k = 0; k < n; ++k) out[k] += a[k] * b[k];
}

/* Depthwise with a multiplier: out[c * M + m] += x[c] * w[c * M + m]. */
static void multiply_add_channels(float *restrict out, const float *restrict x,
                                  const float *restrict w, size_t channels, size_t m) {
    for (size_t c = 0; c < channels; ++c)
        for (size_t k = 0; k < m; ++k) out[c * m + k] += x[c] * w[c * m + k];
}

/* dx[n, h, w, c] = sum over the taps and outputs that read it of dy[.., c * M + m] * w[i, j, c, m]. */
static void depthwise_grad_input(void *context, size_t first_row, size_t end_row) {
    const fq_conv_job *job = context;
    const fq_conv_geometry *g = &job->g;
    const size_t c_in = g->channels, m = job->multiplier, c_out = c_in * m;
    for (size_t row = first_row; row < end_row; ++row) {
        const size_t n = row / g->height, h = row % g->height;
        float *out = job->out + row * g->width * c_in;
        zero(out, g->width * c_in);
        for (size_t i = 0; i < g->kernel_height; ++i) {
            /* Output row r reads input row h at tap i when r * SH + i * DH - top == h. */
            const size_t at = h + g->pad_top, offset = i * g->dilation_height;
            if (at < offset || (at - offset) % g->stride_height != 0) continue;
            const size_t r = (at - offset) / g->stride_height;
            if (r >= g->out_height) continue;
            const float *dy_row = job->dy + (n * g->out_height + r) * g->out_width * c_out;
            for (size_t j = 0; j < g->kernel_width; ++j) {
                size_t q0, q1;
                conv_reading(j, g->stride_width, g->dilation_width, g->pad_left, g->width,
                             g->out_width, &q0, &q1);
                if (q0 == q1) continue;
                const size_t tap = i * g->kernel_width + j;
                const size_t col0 = conv_read_index(q0, j, g->stride_width, g->dilation_width,
                                                    g->pad_left);
                const float *dy = dy_row + q0 * c_out;
                if (job->tiled != NULL) {
                    multiply_add(out + col0 * c_in, dy, job->tiled + tap * job->tiled_length,
                                 (q1 - q0) * c_in);
                    continue;
                }
                const float *w = job->w + tap * c_out;
                float *dx = out + col0 * c_in;
                for (size_t q = q0; q < q1; ++q, dy += c_out, dx += g->stride_width * c_in) {
                    if (m == 1) {
                        multiply_add(dx, dy, w, c_in);
                    } else {
                        for (size_t c = 0; c < c_in; ++c)
                            for (size_t k = 0; k < m; ++k) dx[c] += dy[c * m + k] * w[c * m + k];
                    }
                }
            }
        }
    }
}

/* Block b's partial dw: the sum over its output rows of x[n, ih, iw, c] * dy[n, r, q, c * M + m],
   rows in order, in each row the pixels in order. */
static void depthwise_grad_filter(void *context, size_t first_block, size_t end_block) {
    const fq_conv_job *job = context;
    const fq_conv_geometry *g = &job->g;
    const size_t c_in = g->channels, m = job->multiplier, c_out = c_in * m;
    const size_t taps = g->kernel_height * g->kernel_width, rows = g->batch * g->out_height;
    for (size_t block = first_block; block < end_block; ++block) {
        float *acc = job->partials + block * taps * c_out;
        zero(acc, taps * c_out);
        const size_t first = block * job->rows_per_block;
        const size_t end = first + job->rows_per_block < rows ? first + job->rows_per_block : rows;
        for (size_t row = first; row < end; ++row) {
            const size_t n = row / g->out_height, r = row % g->out_height;
            const float *dy_row = job->dy + row * g->out_width * c_out;
            size_t r0, r1;
            for (size_t i = 0; i < g->kernel_height; ++i) {
                conv_reading(i, g->stride_height, g->dilation_height, g->pad_top, g->height,
                             g->out_height, &r0, &r1);
                if (r < r0 || r >= r1) continue;
                const size_t ih = conv_read_index(r, i, g->stride_height, g->dilation_height,
                                                  g->pad_top);
                const float *x_row = job->x + (n * g->height + ih) * g->width * c_in;
                for (size_t j = 0; j < g->kernel_width; ++j) {
                    size_t q0, q1;
                    conv_reading(j, g->stride_width, g->dilation_width, g->pad_left, g->width,
                                 g->out_width, &q0, &q1);
                    float *a = acc + (i * g->kernel_width + j) * c_out;
                    const float *x = x_row + (q0 < q1 ? conv_read_index(q0, j, g->stride_width,
                                                                        g->dilation_width,
                                                                        g->pad_left) * c_in : 0);
                    const float *dy = dy_row + q0 * c_out;
                    for (size_t q = q0; q < q1; ++q, x += g->stride_width * c_in, dy += c_out) {
                        if (m == 1) multiply_add(a, x, dy, c_in);
                        else multiply_add_channels(a, x, dy, c_in, m);
                    }
                }
            }
        }
    }
}

/* dx[n, h, w, c] = the sum, over the taps (i, j) whose window reads it, of the column of cols
   that holds it: the adjoint of im2col, summed in tap order. */
static void col2im(void *context, size_t first_row, size_t end_row) {
    const fq_conv_job *job = context;
    const fq_conv_geometry *g = &job->g;
    const size_t c_in = g->channels, row_len = g->kernel_height * g->kernel_width * c_in;
    for (size_t row = first_row; row < end_row; ++row) {
        const size_t n = row / g->height, h = row % g->height;
        float *out = job->out + row * g->width * c_in;
        zero(out, g->width * c_in);
        for (size_t i = 0; i < g->kernel_height; ++i) {
            const size_t at = h + g->pad_top, offset = i * g->dilation_height;
            if (at < offset || (at - offset) % g->stride_height != 0) continue;
            const size_t r = (at - offset) / g->stride_height;
            if (r >= g->out_height) continue;
            for (size_t j = 0; j < g->kernel_width; ++j) {
                size_t q0, q1;
                conv_reading(j, g->stride_width, g->dilation_width, g->pad_left, g->width,
                             g->out_width, &q0, &q1);
                if (q0 == q1) continue;
                const float *src = job->cols + ((n * g->out_height + r) * g->out_width + q0) * row_len +
                                   (i * g->kernel_width + j) * c_in;
                float *dx = out + conv_read_index(q0, j, g->stride_width, g->dilation_width,
                                                  g->pad_left) * c_in;
                for (size_t q = q0; q < q1; ++q, src += row_len, dx += g->stride_width * c_in)
                    for (size_t c = 0; c < c_in; ++c) dx[c] += src[c];
            }
        }
    }
}

const fq_conv_kernels FQ_CONV_TABLE = {depthwise, depthwise_grad_input, depthwise_grad_filter,
                                       col2im};
