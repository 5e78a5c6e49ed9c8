/* Public convolution entry points: validation, im2col (a copy), and the split of the other kernels'
   rows over threads. */
#include <stdlib.h>

#include "../include/fqcore.h"
#include "../common/fpenv.h"
#include "../common/parallel.h"
#include "../common/runtime.h"
#include "conv_kernels.h"

/* The depthwise filter gradient sums blocks of about this many y_backprop elements each (at least
   one output row, at most FQ_CONV_MAX_BLOCKS blocks): a fixed function of the shape, so the order
   of the sums is too. */
#define FQ_CONV_BLOCK_ELEMENTS ((size_t)32768)
#define FQ_CONV_MAX_BLOCKS ((size_t)64)

static const fq_conv_kernels *active_kernels(void) {
    switch (fq_get_isa()) {
#ifdef FQ_BUILD_AVX2
    case FQ_ISA_AVX2: return &fq_conv__avx2;
#endif
#ifdef FQ_BUILD_AVX512
    case FQ_ISA_AVX512: return &fq_conv__avx512;
#endif
#ifdef FQ_BUILD_NEON
    case FQ_ISA_NEON: return &fq_conv__neon;
#endif
    default: return &fq_conv__scalar;
    }
}

/* The element counts of a call: input, output pixels, one window (KH * KW * C), and with the
   multiplier M the depthwise output (pixels * C * M) and filter (window * M). */
typedef struct {
    size_t input, pixels, window, output, filter;
} conv_sizes;

static int fits(size_t a, size_t b, size_t *product) { return !__builtin_mul_overflow(a, b, product); }

/* FQ_ERR_BAD_SHAPE unless every count and index the kernels form fits in size_t: the arrays'
   element counts (with the multiplier), and the padded positions out * stride + tap * dilation
   and in + pad. */
static fq_status check_geometry(const fq_conv_geometry *g, size_t multiplier, conv_sizes *s) {
    if (g == NULL) return FQ_ERR_NULL_POINTER;
    if (g->kernel_height == 0 || g->kernel_width == 0 || g->stride_height == 0 ||
        g->stride_width == 0 || g->dilation_height == 0 || g->dilation_width == 0 ||
        multiplier == 0)
        return FQ_ERR_BAD_SHAPE;
    size_t t, u, reach;
    const int ok =
        fits(g->batch, g->height, &t) && fits(t, g->width, &t) && fits(t, g->channels, &s->input) &&
        fits(s->input, multiplier, &t) &&
        fits(g->batch, g->out_height, &t) && fits(t, g->out_width, &s->pixels) &&
        fits(g->kernel_height, g->kernel_width, &t) && fits(t, g->channels, &s->window) &&
        fits(s->window, multiplier, &s->filter) &&
        fits(s->pixels, s->window, &t) && fits(t, multiplier, &t) &&
        fits(s->pixels, g->channels, &u) && fits(u, multiplier, &s->output) &&
        fits(g->out_height, g->stride_height, &t) && fits(g->kernel_height, g->dilation_height, &u) &&
        !__builtin_add_overflow(t, u, &reach) &&
        fits(g->out_width, g->stride_width, &t) && fits(g->kernel_width, g->dilation_width, &u) &&
        !__builtin_add_overflow(t, u, &reach) &&
        !__builtin_add_overflow(g->height, g->pad_top, &t) &&
        !__builtin_add_overflow(g->width, g->pad_left, &t);
    return ok ? FQ_OK : FQ_ERR_BAD_SHAPE;
}

static int missing(const void *p, size_t elements) { return elements > 0 && p == NULL; }

/* The forward and the filter gradient see a multiplier M as x with each channel repeated M times
   (C * M channels, multiplier 1): output channel c * M + m then pairs x[c] with w[.., c * M + m]
   and dy[.., c * M + m] as a multiplier of 1 pairs channel with channel. Sets job->x,
   job->g.channels and job->multiplier, and the buffer to free (NULL for M = 1); FQ_ERR_NO_MEMORY
   when it cannot be had. */
static fq_status repeat_channels(fq_conv_job *job, size_t input, float **buffer) {
    const size_t m = job->multiplier;
    *buffer = NULL;
    if (m == 1) return FQ_OK;
    job->g.channels *= m;
    job->multiplier = 1;
    if (input == 0) return FQ_OK; /* no tap reads x */
    float *repeated = malloc(input * m * sizeof(float));
    if (repeated == NULL) return FQ_ERR_NO_MEMORY;
    for (size_t e = 0; e < input; ++e)
        for (size_t k = 0; k < m; ++k) repeated[e * m + k] = job->x[e];
    job->x = repeated;
    *buffer = repeated;
    return FQ_OK;
}

/* The taps at which output indices read input index `in` (conv_reader), as a walk. */
static fq_conv_walk gather_walk(size_t in, size_t taps, size_t stride, size_t dilation, size_t pad,
                                size_t out_size) {
    fq_conv_walk walk = {0, 1, 0, 0, 0};
    for (size_t t = 0; t < taps; ++t) {
        size_t out;
        if (!conv_reader(in, t, stride, dilation, pad, out_size, &out)) continue;
        if (walk.count == 0) {
            walk.first = t;
            walk.index = out;
        } else if (walk.count == 1) {
            walk.step = t - walk.first;
        }
        ++walk.count;
    }
    if (walk.count > 0) walk.index_step = -(ptrdiff_t)(walk.step * dilation / stride);
    return walk;
}

/* job->walks for an input gradient that uses them (see fq_conv_job), or leaves them NULL; the
   buffer to free, and FQ_ERR_NO_MEMORY when it cannot be had. */
static fq_status input_walks(fq_conv_job *job, fq_conv_walk **buffer) {
    const fq_conv_geometry *g = &job->g;
    *buffer = NULL;
    if (g->stride_width != 1 || g->height + g->width == 0) return FQ_OK;
    fq_conv_walk *walks = malloc((g->height + g->width) * sizeof *walks);
    if (walks == NULL) return FQ_ERR_NO_MEMORY;
    for (size_t h = 0; h < g->height; ++h)
        walks[h] = gather_walk(h, g->kernel_height, g->stride_height, g->dilation_height,
                               g->pad_top, g->out_height);
    for (size_t w = 0; w < g->width; ++w)
        walks[g->height + w] = gather_walk(w, g->kernel_width, g->stride_width,
                                           g->dilation_width, g->pad_left, g->out_width);
    job->walks = walks;
    *buffer = walks;
    return FQ_OK;
}

/* Runs `kernel` over `rows` rows that write `elements` output elements in all, on the threads
   that many earn. */
static void run_rows(fq_range_fn kernel, const fq_conv_job *job, size_t rows, size_t elements) {
    if (rows == 0) return;
    fq_parallel_for(fq_runtime_threads_for(elements, rows), rows, kernel, (void *)job);
}

fq_status fq_f32_depthwise(const float *x, const float *w, size_t multiplier,
                           const fq_conv_geometry *geometry, float *y) {
    conv_sizes s;
    fq_status status = check_geometry(geometry, multiplier, &s);
    if (status != FQ_OK) return status;
    if (missing(x, s.input) || missing(w, s.filter) || missing(y, s.output))
        return FQ_ERR_NULL_POINTER;
    fq_conv_job job = {*geometry, multiplier, x, w, NULL, NULL, y, NULL, 0, NULL, 0};
    float *repeated;
    if ((status = repeat_channels(&job, s.input, &repeated)) != FQ_OK) return status;
    const fq_fpenv saved = fq_fpenv_enter();
    run_rows(active_kernels()->depthwise, &job, geometry->batch * geometry->out_height, s.output);
    fq_fpenv_leave(saved);
    free(repeated);
    return FQ_OK;
}

fq_status fq_f32_depthwise_grad_input(const float *y_backprop, const float *w, size_t multiplier,
                                      const fq_conv_geometry *geometry, float *x_backprop) {
    conv_sizes s;
    fq_status status = check_geometry(geometry, multiplier, &s);
    if (status != FQ_OK) return status;
    if (missing(y_backprop, s.output) || missing(w, s.filter) || missing(x_backprop, s.input))
        return FQ_ERR_NULL_POINTER;
    fq_conv_job job = {*geometry, multiplier, NULL, w, y_backprop, NULL, x_backprop, NULL, 0,
                       NULL, 0};
    fq_conv_walk *walks;
    if ((status = input_walks(&job, &walks)) != FQ_OK) return status;
    const fq_fpenv saved = fq_fpenv_enter();
    run_rows(active_kernels()->depthwise_grad_input, &job, geometry->batch * geometry->height,
             s.input);
    fq_fpenv_leave(saved);
    free(walks);
    return FQ_OK;
}

/* Two input gradients of one geometry, summed. A column stride of 1 sums in the kernels' blocks
   (depthwise_grad_input_sum). Larger strides: each chunk of rows of the first is written in
   place, the second's into the task's chunk buffer (about FQ_CONV_SUM_CHUNK_FLOATS floats, at
   least a row), and the buffer added, so that dx is read and written once. Tasks are contiguous
   runs of rows, one buffer each. At a stride of 1 the chunks took 2.2-5x one gradient's time,
   by where numpy had put the arrays, and 3.6-4.3 ms inside the MobileNet-v2 benchmark's step for
   its 32x16x16x96 input; the blocks take 1.9-2.3x (0.63-0.89 ms on one thread, 0.33-0.42 on two)
   and 2.6 ms in the step (AMD Zen 5, AVX-512). */
#define FQ_CONV_SUM_CHUNK_FLOATS ((size_t)4096)

typedef struct {
    fq_conv_job first, second;
    float *buffers;  /* tasks x chunk_rows x row_elements */
    size_t rows, rows_per_task, row_elements, chunk_rows;
    fq_fpenv outer;  /* the caller's floating-point state: the sum is the one numpy would make */
} grad_input_sum_job;

static void grad_input_sum_tasks(void *context, size_t first_task, size_t end_task) {
    const grad_input_sum_job *p = context;
    const fq_range_fn kernel = active_kernels()->depthwise_grad_input;
    for (size_t task = first_task; task < end_task; ++task) {
        fq_conv_job second = p->second;
        second.out = p->buffers + task * p->chunk_rows * p->row_elements;
        const size_t first_row = task * p->rows_per_task;
        const size_t end_row = first_row + p->rows_per_task < p->rows ? first_row + p->rows_per_task
                                                                     : p->rows;
        for (size_t row = first_row; row < end_row; row += p->chunk_rows) {
            const size_t stop = row + p->chunk_rows < end_row ? row + p->chunk_rows : end_row;
            kernel((void *)&p->first, row, stop);
            second.out_row0 = row;
            kernel(&second, row, stop);
            float *restrict dx = p->first.out + row * p->row_elements;
            const float *restrict other = second.out;
            const size_t n = (stop - row) * p->row_elements;
            /* The two gradients are summed as reverse mode sums them: IEEE, no flush to zero. */
            const fq_fpenv kernels_state = fq_fpenv_get();
            fq_fpenv_leave(p->outer);
            for (size_t k = 0; k < n; ++k) dx[k] += other[k];
            fq_fpenv_leave(kernels_state);
        }
    }
}

fq_status fq_f32_depthwise_grad_input_sum(const float *y_backprop_a, const float *w_a,
                                          const float *y_backprop_b, const float *w_b,
                                          size_t multiplier, const fq_conv_geometry *geometry,
                                          float *x_backprop) {
    conv_sizes s;
    fq_status status = check_geometry(geometry, multiplier, &s);
    if (status != FQ_OK) return status;
    if (missing(y_backprop_a, s.output) || missing(w_a, s.filter) ||
        missing(y_backprop_b, s.output) || missing(w_b, s.filter) || missing(x_backprop, s.input))
        return FQ_ERR_NULL_POINTER;
    const size_t rows = geometry->batch * geometry->height;
    if (rows == 0 || s.input == 0) return FQ_OK;
    if (geometry->stride_width == 1) {
        fq_conv_sum_job sum = {{*geometry, multiplier, NULL, w_a, y_backprop_a, NULL, x_backprop, NULL,
                                0, NULL, 0},
                               w_b, y_backprop_b, 0, 0};
        fq_conv_walk *walks;
        if ((status = input_walks(&sum.first, &walks)) != FQ_OK) return status;
        sum.caller = fq_fpenv_enter();
        sum.sum_in_caller_state = !fq_fpenv_is_default(sum.caller);
        fq_parallel_for(fq_runtime_threads_for(2 * s.input, rows), rows,
                        active_kernels()->depthwise_grad_input_sum, &sum);
        fq_fpenv_leave(sum.caller);
        free(walks);
        return FQ_OK;
    }
    const size_t row_elements = s.input / rows;
    grad_input_sum_job p = {
        {*geometry, multiplier, NULL, w_a, y_backprop_a, NULL, x_backprop, NULL, 0, NULL, 0},
        {*geometry, multiplier, NULL, w_b, y_backprop_b, NULL, NULL, NULL, 0, NULL, 0},
        NULL, rows, 0, row_elements, 0, 0};
    const int threads = fq_runtime_threads_for(2 * s.input, rows);
    const size_t tasks = (size_t)threads < rows ? (size_t)threads : rows;
    p.rows_per_task = (rows + tasks - 1) / tasks;
    p.chunk_rows = row_elements >= FQ_CONV_SUM_CHUNK_FLOATS ? 1 : FQ_CONV_SUM_CHUNK_FLOATS / row_elements;
    if (p.chunk_rows > p.rows_per_task) p.chunk_rows = p.rows_per_task;
    fq_conv_walk *walks;
    if ((status = input_walks(&p.first, &walks)) != FQ_OK) return status;
    p.second.walks = p.first.walks;
    p.buffers = malloc(tasks * p.chunk_rows * row_elements * sizeof(float));
    if (p.buffers == NULL) {
        free(walks);
        return FQ_ERR_NO_MEMORY;
    }
    p.outer = fq_fpenv_enter();
    fq_parallel_for(threads, tasks, grad_input_sum_tasks, &p);
    fq_fpenv_leave(p.outer);
    free(p.buffers);
    free(walks);
    return FQ_OK;
}

fq_status fq_f32_depthwise_grad_filter(const float *x, const float *y_backprop, size_t multiplier,
                                       const fq_conv_geometry *geometry, float *w_backprop) {
    conv_sizes s;
    fq_status status = check_geometry(geometry, multiplier, &s);
    if (status != FQ_OK) return status;
    if (missing(x, s.input) || missing(y_backprop, s.output) || missing(w_backprop, s.filter))
        return FQ_ERR_NULL_POINTER;
    const size_t rows = geometry->batch * geometry->out_height;
    const size_t row_elements = geometry->out_width * geometry->channels * multiplier;
    size_t rows_per_block = row_elements == 0 ? rows : (FQ_CONV_BLOCK_ELEMENTS + row_elements - 1) / row_elements;
    if (rows_per_block == 0) rows_per_block = 1;
    if (rows > rows_per_block * FQ_CONV_MAX_BLOCKS)
        rows_per_block = (rows + FQ_CONV_MAX_BLOCKS - 1) / FQ_CONV_MAX_BLOCKS;
    const size_t blocks = rows == 0 ? 0 : (rows + rows_per_block - 1) / rows_per_block;
    for (size_t k = 0; k < s.filter; ++k) w_backprop[k] = 0.0f;
    if (blocks == 0 || s.filter == 0) return FQ_OK;
    float *partials = malloc(blocks * s.filter * sizeof(float));
    if (partials == NULL) return FQ_ERR_NO_MEMORY;
    fq_conv_job job = {*geometry, multiplier, x, NULL, y_backprop, NULL, NULL, partials,
                       rows_per_block, NULL, 0};
    float *repeated;
    if ((status = repeat_channels(&job, s.input, &repeated)) != FQ_OK) {
        free(partials);
        return status;
    }
    const fq_fpenv saved = fq_fpenv_enter();
    fq_parallel_for(fq_runtime_threads_for(s.output, blocks), blocks,
                    active_kernels()->depthwise_grad_filter, (void *)&job);
    /* Blocks in order: the same sum for any split of the blocks over threads. */
    for (size_t block = 0; block < blocks; ++block)
        for (size_t k = 0; k < s.filter; ++k) w_backprop[k] += partials[block * s.filter + k];
    fq_fpenv_leave(saved);
    free(repeated);
    free(partials);
    return FQ_OK;
}

/* n floats from src (zeros when src is NULL). A loop, not memcpy: runs are often a few floats
   (a first layer's one or three channels), where a call costs more than the copy. */
static inline void copy_floats(float *restrict dst, const float *restrict src, size_t n) {
    if (src == NULL) {
        for (size_t k = 0; k < n; ++k) dst[k] = 0.0f;
    } else {
        for (size_t k = 0; k < n; ++k) dst[k] = src[k];
    }
}

/* Output rows [first, end) of im2col: a copy of each window, zeros for its padding. With a column
   dilation of 1, a window row whose taps all fall inside the input is one run of KW * C floats. */
static void im2col_rows(void *context, size_t first, size_t end) {
    const fq_conv_job *job = context;
    const fq_conv_geometry *g = &job->g;
    const size_t c = g->channels, kw = g->kernel_width, window = g->kernel_height * kw * c;
    for (size_t row = first; row < end; ++row) {
        const size_t n = row / g->out_height, r = row % g->out_height;
        float *dst = job->out + row * g->out_width * window;
        for (size_t q = 0; q < g->out_width; ++q) {
            const size_t at_w0 = q * g->stride_width;
            for (size_t i = 0; i < g->kernel_height; ++i, dst += kw * c) {
                const size_t at_h = r * g->stride_height + i * g->dilation_height;
                if (at_h < g->pad_top || at_h - g->pad_top >= g->height) {
                    copy_floats(dst, NULL, kw * c);
                    continue;
                }
                const float *x_row = job->x + (n * g->height + at_h - g->pad_top) * g->width * c;
                const size_t last_w = at_w0 + (kw - 1) * g->dilation_width;
                if (g->dilation_width == 1 && at_w0 >= g->pad_left && last_w - g->pad_left < g->width) {
                    copy_floats(dst, x_row + (at_w0 - g->pad_left) * c, kw * c);
                    continue;
                }
                for (size_t j = 0; j < kw; ++j) {
                    const size_t at_w = at_w0 + j * g->dilation_width;
                    const int inside = at_w >= g->pad_left && at_w - g->pad_left < g->width;
                    copy_floats(dst + j * c, inside ? x_row + (at_w - g->pad_left) * c : NULL, c);
                }
            }
        }
    }
}

fq_status fq_f32_im2col(const float *x, const fq_conv_geometry *geometry, float *cols) {
    conv_sizes s;
    fq_status status = check_geometry(geometry, 1, &s);
    if (status != FQ_OK) return status;
    if (missing(x, s.input) || missing(cols, s.pixels * s.window)) return FQ_ERR_NULL_POINTER;
    const fq_conv_job job = {*geometry, 1, x, NULL, NULL, NULL, cols, NULL, 0, NULL, 0};
    run_rows(im2col_rows, &job, geometry->batch * geometry->out_height, s.pixels * s.window);
    return FQ_OK;
}

fq_status fq_f32_col2im(const float *cols, const fq_conv_geometry *geometry, float *x_backprop) {
    conv_sizes s;
    fq_status status = check_geometry(geometry, 1, &s);
    if (status != FQ_OK) return status;
    if (missing(cols, s.pixels * s.window) || missing(x_backprop, s.input))
        return FQ_ERR_NULL_POINTER;
    const fq_conv_job job = {*geometry, 1, NULL, NULL, NULL, cols, x_backprop, NULL, 0, NULL, 0};
    const fq_fpenv saved = fq_fpenv_enter();
    run_rows(active_kernels()->col2im, &job, geometry->batch * geometry->height, s.input);
    fq_fpenv_leave(saved);
    return FQ_OK;
}
