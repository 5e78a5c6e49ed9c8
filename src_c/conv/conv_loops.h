/* The convolution kernels, written once and compiled by each ISA file with its own flags
   (conv_scalar.c, conv_avx2.c, ...). Each lane is its own element, and -ffp-contract=off keeps
   each multiply and add rounded on its own, so every ISA gives the same bits. Define
   FQ_CONV_TABLE (the table's name) before including this file.

   The forward and the input gradient (column stride 1) sum each output element in registers: a
   block of CONV_PIXELS pixels x CONV_CHANNELS channels, started at 0.0f, given its taps' terms in
   the documented order (taps row-major, then the multiplier) and stored once; accumulating in the
   output instead costs a load and a store of it per tap. A block row is a conv_vec, GCC's generic
   vector of CONV_CHANNELS floats, which each ISA's compiler keeps in its registers (one zmm, ymm
   or xmm; four NEON vectors): written as float arrays, the blocks stayed in memory.
   Block sizes are compile-time constants (their loops unroll); the ragged ends (a row's edge
   pixels, whose taps fall partly in the padding, its last pixels, the channels past the last
   whole block) run the same code on fewer pixels or on fewer lanes.

   The filter gradient sums a group of taps over a block of rows in registers (see its section).
   col2im and the input gradient at larger column strides loop over the longest contiguous runs
   the layout has (register blocks were not faster there on every shape measured). */
#include <stddef.h>
#include <string.h>

#include "conv_kernels.h"

#define CONV_PIXELS 4 /* gather_pixels has a case for each size up to it */
/* A block row's channels: one register of the ISA (conv_avx2.c and the others set theirs). GCC
   splits a wider generic vector into registers in a late pass, and on AVX2 it then kept the
   blocks in memory (the forward and the input gradient ran 2-4x slower than with 8 lanes). */
#ifndef CONV_CHANNELS
#define CONV_CHANNELS 4
#endif

typedef float conv_vec __attribute__((vector_size(CONV_CHANNELS * sizeof(float))));

/* The filter gradient's channels per sum vector: one register, as CONV_CHANNELS (NEON keeps the
   forward's blocks of 16, conv_neon.c). */
#ifndef FILTER_CHANNELS
#define FILTER_CHANNELS CONV_CHANNELS
#endif

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

/* --- The blocks: acc[p] lane c for p < pixels, c < width (both at most the block's size). --- */

/* *v = `width` floats `m` apart from p (lanes past width 0). Vectors go by pointer: passed by
   value they would change the ABI where the ISA has no such registers (always inlined, no ABI is
   involved, but GCC warns). */
CONV_INLINE void load_lanes(conv_vec *v, const float *p, size_t width, size_t m) {
    if (width == CONV_CHANNELS && m == 1) {
        memcpy(v, p, sizeof *v);
        return;
    }
    *v = (conv_vec){0};
    for (size_t c = 0; c < width; ++c) (*v)[c] = p[c * m];
}

CONV_INLINE void store_lanes(float *p, const conv_vec *v, size_t width) {
    if (width == CONV_CHANNELS) memcpy(p, v, sizeof *v);
    else for (size_t c = 0; c < width; ++c) p[c] = (*v)[c];
}

CONV_INLINE void block_zero(conv_vec *acc, size_t pixels) {
    CONV_UNROLL for (size_t p = 0; p < pixels; ++p) acc[p] = (conv_vec){0};
}

/* acc[p][c] += a[p * step + c * m + k] * w[c * m + k] for k < m in order: one tap's terms, the
   multiplier's last (m is 1 but in the input gradient). */
CONV_INLINE void block_multiply_add(conv_vec *acc, size_t pixels, size_t width, size_t m,
                                    const float *a, size_t step, const float *w) {
    for (size_t k = 0; k < m; ++k) {
        conv_vec wk, ak;
        load_lanes(&wk, w + k, width, m);
        CONV_UNROLL for (size_t p = 0; p < pixels; ++p) {
            load_lanes(&ak, a + p * step + k, width, m);
            acc[p] += ak * wk;
        }
    }
}

CONV_INLINE void block_store(float *out, size_t step, const conv_vec *acc, size_t pixels,
                             size_t width) {
    CONV_UNROLL for (size_t p = 0; p < pixels; ++p) store_lanes(out + p * step, &acc[p], width);
}

/* Output index `out` reads input index out * stride + t * dilation - pad, in [0, size). */
static fq_conv_walk forward_walk(size_t out, size_t taps, size_t stride, size_t dilation, size_t pad,
                              size_t size) {
    fq_conv_walk walk = {0, 1, 0, 0, (ptrdiff_t)dilation};
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
static int same_taps(fq_conv_walk a, fq_conv_walk b) {
    return a.count > 0 && a.first == b.first && a.count == b.count;
}

/* A block's taps: rows x cols of them, the k-th row and l-th column's term reading
   src + k * src_row + l * src_col (pixel p at p * step further) and w + k * w_row + l * w_col;
   channel c0's at c0 (times the multiplier, for w and dy) further. */
typedef struct {
    const float *src, *w;
    ptrdiff_t src_row, src_col, w_row, w_col;
    size_t rows, cols, step;
} conv_taps;

/* acc[p][c] for channels [c0, c0 + width): each tap's term, taps row-major, with the multiplier m. */
CONV_INLINE void block_taps(conv_vec *acc, size_t pixels, size_t width, size_t m,
                            const conv_taps *t, size_t c0) {
    for (size_t k = 0; k < t->rows; ++k)
        for (size_t l = 0; l < t->cols; ++l)
            block_multiply_add(acc, pixels, width, m,
                               t->src + (ptrdiff_t)k * t->src_row + (ptrdiff_t)l * t->src_col + c0 * m,
                               t->step,
                               t->w + (ptrdiff_t)k * t->w_row + (ptrdiff_t)l * t->w_col + c0 * m);
}

/* acc: the block's sums for channels [c0, c0 + width), from 0.0f. */
CONV_INLINE void block_sums(conv_vec *acc, size_t pixels, size_t width, size_t m, const conv_taps *t,
                            size_t c0) {
    block_zero(acc, pixels);
    if (m == 1) block_taps(acc, pixels, width, 1, t, c0);
    else block_taps(acc, pixels, width, m, t, c0);
}

/* `pixels` pixels (out[p * out_step]) that share their taps, every channel: whole blocks, then the
   rest. */
CONV_INLINE void block_pixels(const conv_taps *t, size_t pixels, size_t channels, size_t m,
                              float *restrict out, size_t out_step) {
    const size_t whole = channels - channels % CONV_CHANNELS;
    conv_vec acc[CONV_PIXELS];
    for (size_t c0 = 0; c0 < whole; c0 += CONV_CHANNELS) {
        block_sums(acc, pixels, CONV_CHANNELS, m, t, c0);
        block_store(out + c0, out_step, acc, pixels, CONV_CHANNELS);
    }
    if (whole < channels) {
        block_sums(acc, pixels, channels - whole, m, t, whole);
        block_store(out + whole, out_step, acc, pixels, channels - whole);
    }
}

/* --- 3x3 filters at column stride and dilation 1, every channel in whole vectors (C a
   multiple of CONV_CHANNELS): blocks of CONV_PIXELS pixels that meet all nine taps, the same terms
   in the same order as block_pixels. Pixel p meets tap column l at column p + l of the tap's row
   (the input gradient: p + 2 - l), so a tap row's terms read CONV_PIXELS + 2 columns, each loaded
   once, walking by pointer. Through block_pixels, whose strides are run-time values (the
   channels), each term computed its own address: the forward and the input gradient took
   1.1-1.25x the time, the sum of two input gradients 1.65x (AMD Zen 5, AVX-512, one thread, x
   [32, 16, 16, 96], [32, 16, 16, 48] and [32, 8, 8, 96]). Each block is a call: inlined in the
   row loops, GCC ran out of registers for the columns' addresses and kept them on the stack. --- */

/* acc: the sums of channels [0, CONV_CHANNELS) from `src` (tap row 0's first column; the rows
   row_step elements apart, the columns c) and the filter's taps row-major from w (c apart). */
CONV_INLINE void sums_3x3(conv_vec *acc, const float *src, ptrdiff_t row_step, const float *w,
                          size_t c, const int flip) {
    block_zero(acc, CONV_PIXELS);
    /* Opaque to the optimizer: else GCC makes each of the 27 addresses below a pointer of its
       own, stepped from block to block, for which the registers do not suffice. */
    __asm__("" : "+r"(src), "+r"(w));
    CONV_UNROLL for (size_t k = 0; k < 3; ++k, src += row_step) {
        conv_vec cols[CONV_PIXELS + 2], wk[3];
        const float *col = src;
        CONV_UNROLL for (size_t j = 0; j < CONV_PIXELS + 2; ++j, col += c)
            memcpy(&cols[j], col, sizeof cols[j]);
        CONV_UNROLL for (size_t l = 0; l < 3; ++l, w += c) memcpy(&wk[l], w, sizeof wk[l]);
        CONV_UNROLL for (size_t l = 0; l < 3; ++l)
            CONV_UNROLL for (size_t p = 0; p < CONV_PIXELS; ++p)
                acc[p] += cols[flip ? p + 2 - l : p + l] * wk[l];
    }
}

/* Whether a job's blocks may take the 3x3 path (the forward's, or the input gradient's with
   flip: the walks of each block are checked apart). */
static int takes_3x3(const fq_conv_geometry *g, size_t m) {
    return g->kernel_height == 3 && g->kernel_width == 3 && g->stride_width == 1 &&
           g->dilation_width == 1 && m == 1 && g->channels % CONV_CHANNELS == 0;
}

/* Every channel of a block (out: its first pixel, pixels c apart); src as sums_3x3 takes it. */
static __attribute__((noinline)) void block_3x3(const float *src, ptrdiff_t row_step,
                                                const float *w, size_t c, int flip,
                                                float *restrict out) {
    conv_vec acc[CONV_PIXELS];
    for (size_t c0 = 0; c0 < c; c0 += CONV_CHANNELS) {
        if (flip) sums_3x3(acc, src + c0, row_step, w + c0, c, 1);
        else sums_3x3(acc, src + c0, row_step, w + c0, c, 0);
        block_store(out + c0, c, acc, CONV_PIXELS, CONV_CHANNELS);
    }
}

/* --- Forward: y[n, r, q, c] = sum over taps of x[n, ih, iw, c] * w[i, j, c] (a multiplier M
   arrives as x with each channel repeated M times: conv_api.c). Blocks of CONV_PIXELS
   consecutive output pixels whose taps are the same (all but a padded row's edges). --- */
static void depthwise(void *context, size_t first_row, size_t end_row) {
    const fq_conv_job *job = context;
    const fq_conv_geometry *g = &job->g;
    const size_t c = g->channels, kw = g->kernel_width;
    const int three_by_three = takes_3x3(g, 1);
    for (size_t row = first_row; row < end_row; ++row) {
        const size_t n = row / g->out_height, r = row % g->out_height;
        const fq_conv_walk rows = forward_walk(r, g->kernel_height, g->stride_height,
                                            g->dilation_height, g->pad_top, g->height);
        float *y_row = job->out + row * g->out_width * c;
        const float *x_row = job->x + (n * g->height + rows.index) * g->width * c;
        for (size_t q = 0; q < g->out_width;) {
            const fq_conv_walk cols = forward_walk(q, kw, g->stride_width, g->dilation_width,
                                                g->pad_left, g->width);
            const int block = q + CONV_PIXELS <= g->out_width &&
                              same_taps(cols, forward_walk(q + CONV_PIXELS - 1, kw, g->stride_width,
                                                           g->dilation_width, g->pad_left, g->width));
            const conv_taps taps = {x_row + cols.index * c,
                                    job->w + (rows.first * kw + cols.first) * c,
                                    rows.index_step * (ptrdiff_t)(g->width * c),
                                    cols.index_step * (ptrdiff_t)c, (ptrdiff_t)(kw * c),
                                    (ptrdiff_t)c, rows.count, cols.count, g->stride_width * c};
            if (block && three_by_three && rows.count == 3 && cols.count == 3)
                block_3x3(taps.src, taps.src_row, taps.w, c, 0, y_row + q * c);
            else if (block) block_pixels(&taps, CONV_PIXELS, c, 1, y_row + q * c, c);
            else block_pixels(&taps, 1, c, 1, y_row + q * c, c);
            q += block ? CONV_PIXELS : 1;
        }
    }
}

/* How many of the `most` (at most CONV_PIXELS) positions from walks[0] on meet the same taps as
   the first (1 when it meets none): a block's pixels, so a row's last few pixels take one block of
   fewer pixels rather than a block each. */
static size_t same_run(const fq_conv_walk *walks, size_t most) {
    size_t n = 1;
    while (n < most && same_taps(walks[0], walks[n])) ++n;
    return n;
}

/* block_pixels with `pixels` (1 to CONV_PIXELS) a compile-time constant. */
CONV_INLINE void gather_pixels(const conv_taps *t, size_t pixels, size_t channels, size_t m,
                               float *restrict out, size_t out_step) {
    switch (pixels) {
    case 4: block_pixels(t, 4, channels, m, out, out_step); break;
    case 3: block_pixels(t, 3, channels, m, out, out_step); break;
    case 2: block_pixels(t, 2, channels, m, out, out_step); break;
    default: block_pixels(t, 1, channels, m, out, out_step); break;
    }
}

/* --- Input gradient: dx[n, h, w, c] = sum over the taps (i, j) whose window reads (h, w) of
   dy[.., c * M + m] * w[i, j, c, m] (m in order). --- */

/* The taps of a block of input pixels of batch n with row walk `rows` and column walk `cols`,
   reading dy and w. */
CONV_INLINE conv_taps gather_taps(const fq_conv_geometry *g, size_t pixel, const float *dy,
                                  const float *w, size_t n, fq_conv_walk rows, fq_conv_walk cols) {
    const float *dy_row = dy + (n * g->out_height + rows.index) * g->out_width * pixel;
    const conv_taps t = {dy_row + cols.index * pixel,
                         w + (rows.first * g->kernel_width + cols.first) * pixel,
                         rows.index_step * (ptrdiff_t)(g->out_width * pixel),
                         cols.index_step * (ptrdiff_t)pixel,
                         (ptrdiff_t)(rows.step * g->kernel_width * pixel), (ptrdiff_t)(cols.step * pixel),
                         rows.count, cols.count, pixel};
    return t;
}

typedef int conv_mask __attribute__((vector_size(CONV_CHANNELS * sizeof(int))));

/* Out of line, so that the sums read a and b after the caller's state is back. */
static __attribute__((noinline)) void store_sum_in_caller_state(float *out, size_t out_step,
                                                                const conv_vec *a, const conv_vec *b,
                                                                size_t pixels, size_t width,
                                                                fq_fpenv caller) {
    const fq_fpenv kernels = fq_fpenv_get();
    fq_fpenv_leave(caller);
    for (size_t p = 0; p < pixels; ++p)
        for (size_t c = 0; c < width; ++c) out[p * out_step + c] = a[p][c] + b[p][c];
    fq_fpenv_leave(kernels);
}

/* Two gradients' sums of one block, a and b, each as block_pixels makes it, added as the caller
   adds: in the kernels' state, unless a lane's sum came out 0 from terms that do not cancel (the
   kernels flush a subnormal result to zero; the exact sum, then always representable, is what
   the caller gets without flushing) or the caller's state is another (sum->sum_in_caller_state). */
CONV_INLINE void block_store_sum(float *out, size_t out_step, const conv_vec *a, const conv_vec *b,
                                 size_t pixels, size_t width, const fq_conv_sum_job *sum) {
    conv_vec total[CONV_PIXELS];
    conv_mask flushed = {0};
    CONV_UNROLL for (size_t p = 0; p < pixels; ++p) {
        total[p] = a[p] + b[p];
        flushed |= (total[p] == (conv_vec){0}) & (a[p] != -b[p]);
    }
    int redo = sum->sum_in_caller_state;
    for (size_t c = 0; c < CONV_CHANNELS; ++c) redo |= flushed[c];
    if (redo) store_sum_in_caller_state(out, out_step, a, b, pixels, width, sum->caller);
    else block_store(out, out_step, total, pixels, width);
}

/* block_pixels for the sum of two gradients (taps ta and tb), each block's two sums made in
   registers and stored once. */
CONV_INLINE void block_pixel_sums(const conv_taps *ta, const conv_taps *tb, size_t pixels,
                                  size_t channels, size_t m, float *restrict out, size_t out_step,
                                  const fq_conv_sum_job *sum) {
    const size_t whole = channels - channels % CONV_CHANNELS;
    conv_vec a[CONV_PIXELS], b[CONV_PIXELS];
    for (size_t c0 = 0; c0 < whole; c0 += CONV_CHANNELS) {
        block_sums(a, pixels, CONV_CHANNELS, m, ta, c0);
        block_sums(b, pixels, CONV_CHANNELS, m, tb, c0);
        block_store_sum(out + c0, out_step, a, b, pixels, CONV_CHANNELS, sum);
    }
    if (whole < channels) {
        block_sums(a, pixels, channels - whole, m, ta, whole);
        block_sums(b, pixels, channels - whole, m, tb, whole);
        block_store_sum(out + whole, out_step, a, b, pixels, channels - whole, sum);
    }
}

/* gather_pixels for the sum of two gradients. */
CONV_INLINE void gather_pixel_sums(const conv_taps *ta, const conv_taps *tb, size_t pixels,
                                   size_t channels, size_t m, float *restrict out, size_t out_step,
                                   const fq_conv_sum_job *sum) {
    switch (pixels) {
    case 4: block_pixel_sums(ta, tb, 4, channels, m, out, out_step, sum); break;
    case 3: block_pixel_sums(ta, tb, 3, channels, m, out, out_step, sum); break;
    case 2: block_pixel_sums(ta, tb, 2, channels, m, out, out_step, sum); break;
    default: block_pixel_sums(ta, tb, 1, channels, m, out, out_step, sum); break;
    }
}

/* block_3x3 (flip) for the sum of two input gradients (dy_a with w_a, dy_b with w_b), each
   block's two sums added as block_pixel_sums adds them. */
static __attribute__((noinline)) void block_sum_3x3(const float *src_a, const float *src_b,
                                                    ptrdiff_t row_step, const float *w_a,
                                                    const float *w_b, size_t c,
                                                    float *restrict out,
                                                    const fq_conv_sum_job *sum) {
    conv_vec a[CONV_PIXELS], b[CONV_PIXELS];
    for (size_t c0 = 0; c0 < c; c0 += CONV_CHANNELS) {
        sums_3x3(a, src_a + c0, row_step, w_a + c0, c, 1);
        sums_3x3(b, src_b + c0, row_step, w_b + c0, c, 1);
        block_store_sum(out + c0, c, a, b, CONV_PIXELS, CONV_CHANNELS, sum);
    }
}

/* With a column stride of 1, consecutive input pixels meet a tap at consecutive output pixels, so
   a block takes CONV_PIXELS of them (a stride of 2 or more splits a row into that many phases of a
   few pixels each, and the blocks were slower there than the runs below). With `sum`, each block
   is the sum of job's gradient and sum's second (job is then &sum->first). m is the job's
   multiplier, a literal 1 where it is 1: with it a runtime value GCC spilled the block loops'
   strides to the stack, and the gradient took 2-4x the time of the forward. */
CONV_INLINE void grad_input_blocks(const fq_conv_job *job, const fq_conv_sum_job *sum, size_t m,
                                   size_t first_row, size_t end_row) {
    const fq_conv_geometry *g = &job->g;
    const size_t c = g->channels, pixel = c * m;
    const fq_conv_walk *row_walks = job->walks, *col_walks = job->walks + g->height;
    const int three_by_three = takes_3x3(g, m);
    for (size_t row = first_row; row < end_row; ++row) {
        const size_t n = row / g->height, h = row % g->height;
        const fq_conv_walk rows = row_walks[h];
        float *dx_row = job->out + (row - job->out_row0) * g->width * c;
        for (size_t w = 0; w < g->width;) {
            const fq_conv_walk cols = col_walks[w];
            const size_t pixels = same_run(col_walks + w, min_size(g->width - w, CONV_PIXELS));
            const conv_taps t = gather_taps(g, pixel, job->dy, job->w, n, rows, cols);
            if (three_by_three && pixels == CONV_PIXELS && rows.count == 3 && rows.step == 1 &&
                cols.count == 3 && cols.step == 1) {
                /* The taps' columns run backwards from t.src: the block's first is two before. */
                const float *src = t.src - 2 * (ptrdiff_t)c;
                if (sum == NULL) {
                    block_3x3(src, t.src_row, t.w, c, 1, dx_row + w * c);
                } else {
                    const conv_taps tb = gather_taps(g, pixel, sum->dy_b, sum->w_b, n, rows, cols);
                    block_sum_3x3(src, tb.src - 2 * (ptrdiff_t)c, t.src_row, t.w, tb.w, c,
                                  dx_row + w * c, sum);
                }
            } else if (sum == NULL) {
                gather_pixels(&t, pixels, c, m, dx_row + w * c, c);
            } else {
                const conv_taps tb = gather_taps(g, pixel, sum->dy_b, sum->w_b, n, rows, cols);
                gather_pixel_sums(&t, &tb, pixels, c, m, dx_row + w * c, c, sum);
            }
            w += pixels;
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

/* Column strides of 2 or more: dx's row starts at zero and takes each tap's terms in order, a
   tap's run of output pixels at a time. */
static void grad_input_runs(const fq_conv_job *job, size_t first_row, size_t end_row) {
    const fq_conv_geometry *g = &job->g;
    const size_t c_in = g->channels, m = job->multiplier, c_out = c_in * m;
    for (size_t row = first_row; row < end_row; ++row) {
        const size_t n = row / g->height, h = row % g->height;
        float *out = job->out + (row - job->out_row0) * g->width * c_in;
        zero(out, g->width * c_in);
        for (size_t i = 0; i < g->kernel_height; ++i) {
            size_t r;
            if (!conv_reader(h, i, g->stride_height, g->dilation_height, g->pad_top,
                             g->out_height, &r))
                continue;
            const float *dy_row = job->dy + (n * g->out_height + r) * g->out_width * c_out;
            for (size_t j = 0; j < g->kernel_width; ++j) {
                size_t q0, q1;
                conv_reading(j, g->stride_width, g->dilation_width, g->pad_left, g->width,
                             g->out_width, &q0, &q1);
                if (q0 == q1) continue;
                const float *w = job->w + (i * g->kernel_width + j) * c_out;
                const float *dy = dy_row + q0 * c_out;
                float *dx = out + conv_read_index(q0, j, g->stride_width, g->dilation_width,
                                                  g->pad_left) * c_in;
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

static void depthwise_grad_input(void *context, size_t first_row, size_t end_row) {
    const fq_conv_job *job = context;
    if (job->g.stride_width != 1) grad_input_runs(job, first_row, end_row);
    else if (job->multiplier == 1) grad_input_blocks(job, NULL, 1, first_row, end_row);
    else grad_input_blocks(job, NULL, job->multiplier, first_row, end_row);
}

/* The sum of two input gradients, column stride 1 (conv_api.c sums those of larger strides). */
static void depthwise_grad_input_sum(void *context, size_t first_row, size_t end_row) {
    const fq_conv_sum_job *sum = context;
    if (sum->first.multiplier == 1) grad_input_blocks(&sum->first, sum, 1, first_row, end_row);
    else grad_input_blocks(&sum->first, sum, sum->first.multiplier, first_row, end_row);
}

/* --- Filter gradient: block b's partial dw[i, j, c], the sum over its output rows of
   x[n, ih, iw, c] * dy[n, r, q, c], rows in order, in each row the pixels in order (a multiplier
   arrives as x with its channels repeated, as in the forward: conv_api.c). A group of up to
   FILTER_ROWS x FILTER_COLS taps keeps its sums for FILTER_CHANNELS channels in registers over
   the block's rows: 9 independent sums, where a kernel row's 3 taps were too few to hide the
   adds' latency. The taps of a group share each pixel's dy load. --- */
#define FILTER_ROWS 3
#define FILTER_COLS 3

typedef float filter_vec __attribute__((vector_size(FILTER_CHANNELS * sizeof(float))));

CONV_INLINE void filter_load(filter_vec *v, const float *p, size_t width) {
    if (width == FILTER_CHANNELS) {
        memcpy(v, p, sizeof *v);
        return;
    }
    *v = (filter_vec){0};
    for (size_t c = 0; c < width; ++c) (*v)[c] = p[c];
}

/* acc[i * FILTER_COLS + j][c] += x[i][q * x_step + j * tap_step + c] * dy[q * dy_step + c] for
   q < count in order, i < rows, j < cols. */
CONV_INLINE void filter_pixels(filter_vec *acc, size_t rows, size_t cols, size_t width,
                               const float *const *x, size_t x_step, size_t tap_step,
                               const float *dy, size_t dy_step, size_t count) {
    for (size_t q = 0; q < count; ++q) {
        filter_vec d, xt;
        filter_load(&d, dy + q * dy_step, width);
        CONV_UNROLL for (size_t i = 0; i < rows; ++i)
            CONV_UNROLL for (size_t j = 0; j < cols; ++j) {
                filter_load(&xt, x[i] + q * x_step + j * tap_step, width);
                acc[i * FILTER_COLS + j] += xt * d;
            }
    }
}

/* The output pixels tap column j0 + j of a group reads, [first[j], end[j]); those all of the
   group's columns read, [shared_first, shared_end) (empty: shared_first == shared_end); and those
   any of them reads, within [lowest, highest). */
typedef struct {
    size_t j0, first[FILTER_COLS], end[FILTER_COLS], shared_first, shared_end, lowest, highest;
} filter_columns;

static filter_columns filter_reads(const fq_conv_geometry *g, size_t j0, size_t cols) {
    filter_columns f = {j0, {0}, {0}, 0, g->out_width, g->out_width, 0};
    for (size_t j = 0; j < cols; ++j) {
        conv_reading(j0 + j, g->stride_width, g->dilation_width, g->pad_left, g->width,
                     g->out_width, &f.first[j], &f.end[j]);
        f.shared_first = f.first[j] > f.shared_first ? f.first[j] : f.shared_first;
        f.shared_end = min_size(f.end[j], f.shared_end);
        f.lowest = min_size(f.first[j], f.lowest);
        f.highest = f.end[j] > f.highest ? f.end[j] : f.highest;
    }
    if (f.shared_first > f.shared_end) f.shared_first = f.shared_end;
    return f;
}

/* The x that column j of a group reads at output pixel q, from x_row (the input row at channel
   c0); formed only for pixels j reads. */
static inline const float *tap_x(const fq_conv_geometry *g, const filter_columns *f,
                                 const float *x_row, size_t q, size_t j) {
    return x_row + (q * g->stride_width + (f->j0 + j) * g->dilation_width - g->pad_left) *
                       g->channels;
}

/* The terms of output pixels [q0, q1) for the taps of `rows` kernel rows and `cols` columns that
   read them, pixel by pixel: the few pixels at a row's ends, where some of the columns read
   padding. */
CONV_INLINE void filter_edge(const fq_conv_geometry *g, const filter_columns *f, filter_vec *acc,
                             size_t rows, size_t cols, size_t width, const float *const *x,
                             const float *dy, size_t q0, size_t q1) {
    for (size_t q = q0; q < q1; ++q) {
        filter_vec d, xt;
        filter_load(&d, dy + q * g->channels, width);
        CONV_UNROLL for (size_t i = 0; i < rows; ++i)
            CONV_UNROLL for (size_t j = 0; j < cols; ++j)
                if (f->first[j] <= q && q < f->end[j]) {
                    filter_load(&xt, tap_x(g, f, x[i], q, j), width);
                    acc[i * FILTER_COLS + j] += xt * d;
                }
    }
}

/* One output row's terms for `rows` kernel rows (x[i]: the input row kernel row i reads, as
   tap_x takes it) and `cols` columns from j0, each tap's pixels in order: the pixels all the
   columns read in one loop, those before and after them one by one. */
CONV_INLINE void filter_row(const fq_conv_geometry *g, const filter_columns *f, filter_vec *acc,
                            size_t rows, size_t cols, size_t width, const float *const *x,
                            const float *dy) {
    const size_t c = g->channels;
    if (f->shared_first == f->shared_end) {
        filter_edge(g, f, acc, rows, cols, width, x, dy, f->lowest, f->highest);
        return;
    }
    filter_edge(g, f, acc, rows, cols, width, x, dy, f->lowest, f->shared_first);
    const float *xs[FILTER_ROWS];
    CONV_UNROLL for (size_t i = 0; i < rows; ++i) xs[i] = tap_x(g, f, x[i], f->shared_first, 0);
    filter_pixels(acc, rows, cols, width, xs, g->stride_width * c, g->dilation_width * c,
                  dy + f->shared_first * c, c, f->shared_end - f->shared_first);
    filter_edge(g, f, acc, rows, cols, width, x, dy, f->shared_end, f->highest);
}

/* Taps [i0, i0 + rows) x [j0, j0 + cols) (a whole group or one tap), channels [c0, c0 + width),
   over output rows [first, end): their partial sums into `partial`. An output row whose window
   puts some of the group's kernel rows in the padding takes the others one at a time (a skipped
   tap adds nothing, not a zero: with flush-to-zero, -0 + 0 would flip a -0 sum). */
CONV_INLINE void filter_group(const fq_conv_job *job, size_t i0, size_t rows, size_t j0,
                              size_t cols, size_t c0, size_t width, size_t first, size_t end,
                              float *restrict partial) {
    const fq_conv_geometry *g = &job->g;
    const size_t c = g->channels;
    const filter_columns f = filter_reads(g, j0, cols);
    filter_vec acc[FILTER_ROWS * FILTER_COLS];
    CONV_UNROLL for (size_t t = 0; t < FILTER_ROWS * FILTER_COLS; ++t) acc[t] = (filter_vec){0};
    size_t n = first / g->out_height, r = first % g->out_height;
    for (size_t row = first; row < end; ++row) {
        const float *x[FILTER_ROWS];
        size_t inside = 0;
        CONV_UNROLL for (size_t i = 0; i < rows; ++i) {
            const size_t at = r * g->stride_height + (i0 + i) * g->dilation_height;
            x[i] = at >= g->pad_top && at - g->pad_top < g->height
                       ? job->x + (n * g->height + at - g->pad_top) * g->width * c + c0
                       : NULL;
            inside += x[i] != NULL;
        }
        const float *dy = job->dy + row * g->out_width * c + c0;
        if (inside == rows) {
            filter_row(g, &f, acc, rows, cols, width, x, dy);
        } else {
            CONV_UNROLL for (size_t i = 0; i < rows; ++i)
                if (x[i] != NULL) filter_row(g, &f, acc + i * FILTER_COLS, 1, cols, width, x + i, dy);
        }
        if (++r == g->out_height) {
            r = 0;
            ++n;
        }
    }
    CONV_UNROLL for (size_t i = 0; i < rows; ++i)
        CONV_UNROLL for (size_t j = 0; j < cols; ++j) {
            float *p = partial + ((i0 + i) * g->kernel_width + j0 + j) * c + c0;
            for (size_t k = 0; k < width; ++k) p[k] = acc[i * FILTER_COLS + j][k];
        }
}

/* Channels [c0, c0 + width) of every tap over output rows [first, end): whole groups where the
   kernel has them, the other taps one at a time. The channel block is the outer loop: the passes
   over the rows then read the same cache lines. */
CONV_INLINE void filter_channels(const fq_conv_job *job, size_t c0, size_t width, size_t first,
                                 size_t end, float *restrict partial) {
    const size_t kh = job->g.kernel_height, kw = job->g.kernel_width;
    for (size_t i0 = 0; i0 < kh;) {
        const size_t rows = i0 + FILTER_ROWS <= kh ? FILTER_ROWS : 1;
        for (size_t j0 = 0; j0 < kw;) {
            const size_t cols = rows == FILTER_ROWS && j0 + FILTER_COLS <= kw ? FILTER_COLS : 1;
            if (cols == FILTER_COLS) {
                filter_group(job, i0, FILTER_ROWS, j0, FILTER_COLS, c0, width, first, end, partial);
            } else {
                for (size_t i = i0; i < i0 + rows; ++i)
                    filter_group(job, i, 1, j0, 1, c0, width, first, end, partial);
            }
            j0 += cols;
        }
        i0 += rows;
    }
}

static void depthwise_grad_filter(void *context, size_t first_block, size_t end_block) {
    const fq_conv_job *job = context;
    const fq_conv_geometry *g = &job->g;
    const size_t c = g->channels, whole = c - c % FILTER_CHANNELS;
    const size_t taps = g->kernel_height * g->kernel_width, rows = g->batch * g->out_height;
    for (size_t block = first_block; block < end_block; ++block) {
        float *partial = job->partials + block * taps * c;
        const size_t first = block * job->rows_per_block;
        const size_t end = min_size(first + job->rows_per_block, rows);
        for (size_t c0 = 0; c0 < whole; c0 += FILTER_CHANNELS)
            filter_channels(job, c0, FILTER_CHANNELS, first, end, partial);
        if (whole < c) filter_channels(job, whole, c - whole, first, end, partial);
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
        float *out = job->out + (row - job->out_row0) * g->width * c_in;
        zero(out, g->width * c_in);
        for (size_t i = 0; i < g->kernel_height; ++i) {
            size_t r;
            if (!conv_reader(h, i, g->stride_height, g->dilation_height, g->pad_top,
                             g->out_height, &r))
                continue;
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

const fq_conv_kernels FQ_CONV_TABLE = {depthwise, depthwise_grad_input, depthwise_grad_input_sum,
                                       depthwise_grad_filter, col2im};
