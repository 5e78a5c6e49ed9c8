/* The convolution kernels, written once as plain loops over contiguous floats and compiled by each
   ISA file with its own flags (conv_scalar.c, conv_avx2.c, ...), which the compiler turns into
   vectors of that ISA. Each lane is its own element, and -ffp-contract=off keeps each multiply and
   add rounded on its own, so every ISA gives the same bits. Define FQ_CONV_TABLE (the table's
   name) before including this file.

   Loops run over the longest contiguous runs the layout has: with a column stride of 1, the
   pixels of an output row that one kernel position reads are consecutive in the input, so that
   position's work on the row is one loop over (pixels x channels) floats against the filter tap
   repeated along the row (fq_conv_job.tiled); per pixel, a loop over the channels alone would be
   a few vectors long. */
#include <stddef.h>

#include "conv_kernels.h"

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

/* y[n, r, q, c * M + m] = sum over taps of x[n, ih, iw, c] * w[i, j, c, m]. */
static void depthwise(void *context, size_t first_row, size_t end_row) {
    const fq_conv_job *job = context;
    const fq_conv_geometry *g = &job->g;
    const size_t c_in = g->channels, m = job->multiplier, c_out = c_in * m;
    for (size_t row = first_row; row < end_row; ++row) {
        const size_t n = row / g->out_height, r = row % g->out_height;
        float *out = job->out + row * g->out_width * c_out;
        zero(out, g->out_width * c_out);
        size_t r0, r1;
        for (size_t i = 0; i < g->kernel_height; ++i) {
            conv_reading(i, g->stride_height, g->dilation_height, g->pad_top, g->height,
                         g->out_height, &r0, &r1);
            if (r < r0 || r >= r1) continue;
            const size_t ih = conv_read_index(r, i, g->stride_height, g->dilation_height, g->pad_top);
            const float *x_row = job->x + (n * g->height + ih) * g->width * c_in;
            for (size_t j = 0; j < g->kernel_width; ++j) {
                size_t q0, q1;
                conv_reading(j, g->stride_width, g->dilation_width, g->pad_left, g->width,
                             g->out_width, &q0, &q1);
                if (q0 == q1) continue;
                const size_t tap = i * g->kernel_width + j;
                const float *x = x_row + conv_read_index(q0, j, g->stride_width,
                                                         g->dilation_width, g->pad_left) * c_in;
                if (job->tiled != NULL) {
                    multiply_add(out + q0 * c_out, x, job->tiled + tap * job->tiled_length,
                                 (q1 - q0) * c_out);
                    continue;
                }
                const float *w = job->w + tap * c_out;
                for (size_t q = q0; q < q1; ++q, x += g->stride_width * c_in) {
                    if (m == 1) multiply_add(out + q * c_out, x, w, c_in);
                    else multiply_add_channels(out + q * c_out, x, w, c_in, m);
                }
            }
        }
    }
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
