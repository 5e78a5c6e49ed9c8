/* C test harness, convolution helpers (im2col, col2im, depthwise and its gradients): every ISA and
   thread count against scalar on one thread, bit for bit; the sums against a reference that adds
   in the documented order (taps row-major, then the multiplier), bit for bit, and the filter
   gradient against float64; guards around every output; statuses. */
#include <fenv.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fqcore.h"
#include "harness.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#define GUARD ((size_t)16)

/* An output array with GUARD floats of a signalling NaN on each side. */
typedef struct {
    float *buf, *data;
    size_t n;
} guarded;

static guarded guarded_new(size_t n) {
    guarded g = {xmalloc_aligned((2 * GUARD + n) * sizeof(float)), NULL, n};
    for (size_t i = 0; i < 2 * GUARD + n; ++i) g.buf[i] = from_bits(GUARD_BITS);
    g.data = g.buf + GUARD;
    return g;
}

static int guards_intact(const guarded *g) {
    for (size_t i = 0; i < GUARD; ++i)
        if (to_bits(g->buf[i]) != GUARD_BITS || to_bits(g->data[g->n + i]) != GUARD_BITS) return 0;
    return 1;
}

/* Input index of output index `out` at tap `tap`, or -1 in the padding. */
static long input_index(size_t out, size_t tap, size_t stride, size_t dilation, size_t pad,
                        size_t size) {
    const size_t at = out * stride + tap * dilation;
    return at < pad || at - pad >= size ? -1 : (long)(at - pad);
}

typedef struct {
    fq_conv_geometry g;
    size_t m;
} conv_case;

static size_t input_size(const conv_case *k) { return k->g.batch * k->g.height * k->g.width * k->g.channels; }
static size_t pixels(const conv_case *k) { return k->g.batch * k->g.out_height * k->g.out_width; }
static size_t window(const conv_case *k) { return k->g.kernel_height * k->g.kernel_width * k->g.channels; }

/* The references: every output element summed from 0.0f, taps in row-major order, then m. */
static void ref_depthwise(const conv_case *k, const float *x, const float *w, float *y) {
    const fq_conv_geometry *g = &k->g;
    const size_t c_out = g->channels * k->m;
    for (size_t n = 0; n < g->batch; ++n)
        for (size_t r = 0; r < g->out_height; ++r)
            for (size_t q = 0; q < g->out_width; ++q)
                for (size_t o = 0; o < c_out; ++o) {
                    float sum = 0.0f;
                    for (size_t i = 0; i < g->kernel_height; ++i)
                        for (size_t j = 0; j < g->kernel_width; ++j) {
                            const long ih = input_index(r, i, g->stride_height, g->dilation_height, g->pad_top, g->height);
                            const long iw = input_index(q, j, g->stride_width, g->dilation_width, g->pad_left, g->width);
                            if (ih < 0 || iw < 0) continue;
                            sum += x[((n * g->height + (size_t)ih) * g->width + (size_t)iw) * g->channels + o / k->m] *
                                   w[(i * g->kernel_width + j) * c_out + o];
                        }
                    y[((n * g->out_height + r) * g->out_width + q) * c_out + o] = sum;
                }
}

/* dx by scattering in (tap, output pixel) order would not be the documented order; the gather:
   for each input element, its taps in order, then m. */
static void ref_depthwise_grad_input(const conv_case *k, const float *dy, const float *w, float *dx) {
    const fq_conv_geometry *g = &k->g;
    const size_t c_out = g->channels * k->m;
    for (size_t n = 0; n < g->batch; ++n)
        for (size_t h = 0; h < g->height; ++h)
            for (size_t col = 0; col < g->width; ++col)
                for (size_t c = 0; c < g->channels; ++c) {
                    float sum = 0.0f;
                    for (size_t i = 0; i < g->kernel_height; ++i)
                        for (size_t j = 0; j < g->kernel_width; ++j)
                            for (size_t r = 0; r < g->out_height; ++r)
                                for (size_t q = 0; q < g->out_width; ++q) {
                                    if (input_index(r, i, g->stride_height, g->dilation_height, g->pad_top, g->height) != (long)h ||
                                        input_index(q, j, g->stride_width, g->dilation_width, g->pad_left, g->width) != (long)col)
                                        continue;
                                    for (size_t mm = 0; mm < k->m; ++mm)
                                        sum += dy[((n * g->out_height + r) * g->out_width + q) * c_out + c * k->m + mm] *
                                               w[(i * g->kernel_width + j) * c_out + c * k->m + mm];
                                }
                    dx[((n * g->height + h) * g->width + col) * g->channels + c] = sum;
                }
}

static void ref_im2col(const conv_case *k, const float *x, float *cols) {
    const fq_conv_geometry *g = &k->g;
    size_t at = 0;
    for (size_t n = 0; n < g->batch; ++n)
        for (size_t r = 0; r < g->out_height; ++r)
            for (size_t q = 0; q < g->out_width; ++q)
                for (size_t i = 0; i < g->kernel_height; ++i)
                    for (size_t j = 0; j < g->kernel_width; ++j) {
                        const long ih = input_index(r, i, g->stride_height, g->dilation_height, g->pad_top, g->height);
                        const long iw = input_index(q, j, g->stride_width, g->dilation_width, g->pad_left, g->width);
                        for (size_t c = 0; c < g->channels; ++c)
                            cols[at++] = ih < 0 || iw < 0 ? 0.0f
                                       : x[((n * g->height + (size_t)ih) * g->width + (size_t)iw) * g->channels + c];
                    }
}

static void ref_col2im(const conv_case *k, const float *cols, float *dx) {
    const fq_conv_geometry *g = &k->g;
    const size_t win = window(k);
    for (size_t e = 0; e < input_size(k); ++e) dx[e] = 0.0f;
    /* Taps outermost: each element's sum runs over its taps in order. */
    for (size_t i = 0; i < g->kernel_height; ++i)
        for (size_t j = 0; j < g->kernel_width; ++j)
            for (size_t n = 0; n < g->batch; ++n)
                for (size_t r = 0; r < g->out_height; ++r)
                    for (size_t q = 0; q < g->out_width; ++q) {
                        const long ih = input_index(r, i, g->stride_height, g->dilation_height, g->pad_top, g->height);
                        const long iw = input_index(q, j, g->stride_width, g->dilation_width, g->pad_left, g->width);
                        if (ih < 0 || iw < 0) continue;
                        for (size_t c = 0; c < g->channels; ++c)
                            dx[((n * g->height + (size_t)ih) * g->width + (size_t)iw) * g->channels + c] +=
                                cols[((n * g->out_height + r) * g->out_width + q) * win + (i * g->kernel_width + j) * g->channels + c];
                    }
}

static void ref_depthwise_grad_filter_f64(const conv_case *k, const float *x, const float *dy, double *dw) {
    const fq_conv_geometry *g = &k->g;
    const size_t c_out = g->channels * k->m;
    for (size_t e = 0; e < window(k) * k->m; ++e) dw[e] = 0.0;
    for (size_t n = 0; n < g->batch; ++n)
        for (size_t r = 0; r < g->out_height; ++r)
            for (size_t q = 0; q < g->out_width; ++q)
                for (size_t i = 0; i < g->kernel_height; ++i)
                    for (size_t j = 0; j < g->kernel_width; ++j) {
                        const long ih = input_index(r, i, g->stride_height, g->dilation_height, g->pad_top, g->height);
                        const long iw = input_index(q, j, g->stride_width, g->dilation_width, g->pad_left, g->width);
                        if (ih < 0 || iw < 0) continue;
                        for (size_t o = 0; o < c_out; ++o)
                            dw[(i * g->kernel_width + j) * c_out + o] +=
                                (double)x[((n * g->height + (size_t)ih) * g->width + (size_t)iw) * g->channels + o / k->m] *
                                (double)dy[((n * g->out_height + r) * g->out_width + q) * c_out + o];
                    }
}

typedef enum { OP_IM2COL, OP_COL2IM, OP_DEPTHWISE, OP_GRAD_INPUT, OP_GRAD_INPUT_SUM, OP_GRAD_FILTER,
               OP_COUNT } conv_op;
static const char *const op_names[OP_COUNT] = {"im2col", "col2im", "depthwise", "depthwise_grad_input",
                                               "depthwise_grad_input_sum", "depthwise_grad_filter"};

static size_t output_size(const conv_case *k, conv_op op) {
    switch (op) {
    case OP_IM2COL: return pixels(k) * window(k);
    case OP_COL2IM: case OP_GRAD_INPUT: case OP_GRAD_INPUT_SUM: return input_size(k);
    case OP_DEPTHWISE: return pixels(k) * k->g.channels * k->m;
    default: return window(k) * k->m;
    }
}

/* The second (y_backprop, w) pair of OP_GRAD_INPUT_SUM: dy and w read backwards. */
typedef struct {
    const float *dy, *w;
} second_pair;

static fq_status call(const conv_case *k, conv_op op, const float *x, const float *w,
                      const float *dy, const float *cols, second_pair b, float *out) {
    switch (op) {
    case OP_IM2COL: return fq_f32_im2col(x, &k->g, out);
    case OP_COL2IM: return fq_f32_col2im(cols, &k->g, out);
    case OP_DEPTHWISE: return fq_f32_depthwise(x, w, k->m, &k->g, out);
    case OP_GRAD_INPUT: return fq_f32_depthwise_grad_input(dy, w, k->m, &k->g, out);
    case OP_GRAD_INPUT_SUM: return fq_f32_depthwise_grad_input_sum(dy, w, b.dy, b.w, k->m, &k->g, out);
    default: return fq_f32_depthwise_grad_filter(x, dy, k->m, &k->g, out);
    }
}

/* Every op of the case on every ISA and 1..THREADS_MAX threads, against scalar on one thread and
   the references. */
static void check_case(const conv_case *k) {
    const size_t m = k->m;
    float *x = random_floats(input_size(k));
    float *w = random_floats(window(k) * m);
    float *dy = random_floats(pixels(k) * k->g.channels * m);
    float *cols = random_floats(pixels(k) * window(k));
    const second_pair b = {random_floats(pixels(k) * k->g.channels * m), random_floats(window(k) * m)};
    for (int op = 0; op < OP_COUNT; ++op) {
        if ((op == OP_IM2COL || op == OP_COL2IM) && k->m != 1) continue;
        const size_t n = output_size(k, (conv_op)op);
        float *expected = xmalloc_aligned(n * sizeof(float) + 1);
        double *expected64 = NULL;
        switch (op) {
        case OP_IM2COL: ref_im2col(k, x, expected); break;
        case OP_COL2IM: ref_col2im(k, cols, expected); break;
        case OP_DEPTHWISE: ref_depthwise(k, x, w, expected); break;
        case OP_GRAD_INPUT: ref_depthwise_grad_input(k, dy, w, expected); break;
        case OP_GRAD_INPUT_SUM: {
            /* Each input gradient, then their float32 sum. */
            float *part = xmalloc_aligned(n * sizeof(float) + 1);
            ref_depthwise_grad_input(k, dy, w, expected);
            ref_depthwise_grad_input(k, b.dy, b.w, part);
            for (size_t e = 0; e < n; ++e) expected[e] += part[e];
            free(part);
            break;
        }
        default:
            expected64 = malloc(n * sizeof(double) + 1);
            ref_depthwise_grad_filter_f64(k, x, dy, expected64);
        }
        guarded first = guarded_new(n);
        set_isa_threads(FQ_ISA_SCALAR, 1);
        expect(call(k, (conv_op)op, x, w, dy, cols, b, first.data) == FQ_OK, "%s: status", op_names[op]);
        const fq_conv_geometry *g = &k->g;
        char where[200];
        snprintf(where, sizeof where, "%s N%zu H%zu W%zu C%zu M%zu K%zux%zu S%zu,%zu D%zu,%zu P%zu,%zu O%zux%zu",
                 op_names[op], g->batch, g->height, g->width, g->channels, k->m, g->kernel_height,
                 g->kernel_width, g->stride_height, g->stride_width, g->dilation_height,
                 g->dilation_width, g->pad_top, g->pad_left, g->out_height, g->out_width);
        size_t bad = n;
        for (size_t e = 0; e < n && bad == n; ++e) {
            const int ok = expected64 == NULL ? same(first.data[e], expected[e])
                         : fabs(first.data[e] - expected64[e]) <= 1e-5 * (1.0 + fabs(expected64[e])) * (double)(pixels(k) + 1);
            if (!ok) bad = e;
        }
        expect(bad == n, "%s: scalar differs from the reference at %zu", where, bad);
        expect(guards_intact(&first), "%s: scalar wrote outside its output", where);
        for (int a = 0; a < n_isas; ++a)
            for (int threads = 1; threads <= THREADS_MAX; ++threads) {
                if (isas[a] == FQ_ISA_SCALAR && threads == 1) continue;
                guarded got = guarded_new(n);
                set_isa_threads(isas[a], threads);
                call(k, (conv_op)op, x, w, dy, cols, b, got.data);
                size_t diff = n;
                for (size_t e = 0; e < n && diff == n; ++e)
                    if (!same(got.data[e], first.data[e])) diff = e;
                expect(diff == n && guards_intact(&got), "%s on %s, %d threads: differs from scalar at %zu",
                       where, fq_isa_name(isas[a]), threads, diff);
                free(got.buf);
            }
        free(first.buf);
        free(expected);
        free(expected64);
    }
    set_isa_threads(FQ_ISA_SCALAR, 1);
    free(x);
    free(w);
    free(dy);
    free(cols);
    free((void *)b.dy);
    free((void *)b.w);
}

/* TF's SAME sizes and pads, or VALID's, or arbitrary ones (any are safe). */
static void random_case(conv_case *k, size_t max_side, size_t max_channels) {
    fq_conv_geometry *g = &k->g;
    g->batch = below(3) + (below(8) == 0 ? 0 : 1);
    g->height = 1 + below(max_side);
    g->width = 1 + below(max_side);
    g->channels = 1 + below(max_channels);
    g->kernel_height = 1 + below(4);
    g->kernel_width = 1 + below(4);
    g->stride_height = 1 + below(3);
    g->stride_width = 1 + below(3);
    g->dilation_height = 1 + below(2);
    g->dilation_width = 1 + below(2);
    k->m = below(3) == 0 ? 1 + below(3) : 1;
    const size_t kh = (g->kernel_height - 1) * g->dilation_height + 1;
    const size_t kw = (g->kernel_width - 1) * g->dilation_width + 1;
    switch (below(3)) {
    case 0: { /* SAME */
        g->out_height = (g->height + g->stride_height - 1) / g->stride_height;
        g->out_width = (g->width + g->stride_width - 1) / g->stride_width;
        const size_t th = (g->out_height - 1) * g->stride_height + kh, tw = (g->out_width - 1) * g->stride_width + kw;
        g->pad_top = th > g->height ? (th - g->height) / 2 : 0;
        g->pad_left = tw > g->width ? (tw - g->width) / 2 : 0;
        break;
    }
    case 1: /* VALID (or an empty output when the kernel is larger) */
        g->out_height = g->height >= kh ? (g->height - kh) / g->stride_height + 1 : 0;
        g->out_width = g->width >= kw ? (g->width - kw) / g->stride_width + 1 : 0;
        g->pad_top = g->pad_left = 0;
        break;
    default: /* anything */
        g->out_height = below(max_side + 3);
        g->out_width = below(max_side + 3);
        g->pad_top = below(kh + 3);
        g->pad_left = below(kw + 3);
    }
}

static void test_random_geometries(void) {
    for (int t = 0; t < 1000; ++t) {
        conv_case k;
        random_case(&k, 9, 20);
        check_case(&k);
    }
}

/* Rows long enough for several threads and blocks of the filter gradient. */
static void test_large(void) {
    static const conv_case cases[] = {
        {{8, 16, 16, 32, 3, 3, 16, 16, 1, 1, 1, 1, 1, 1}, 1},
        {{8, 16, 16, 32, 3, 3, 8, 8, 2, 2, 1, 1, 0, 0}, 1},
        {{4, 12, 12, 24, 5, 5, 12, 12, 1, 1, 2, 2, 4, 4}, 2},
        {{16, 8, 8, 64, 1, 1, 8, 8, 1, 1, 1, 1, 0, 0}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) check_case(&cases[i]);
}

static void test_statuses(void) {
    fq_conv_geometry g = {1, 4, 4, 2, 3, 3, 4, 4, 1, 1, 1, 1, 1, 1};
    float x[32] = {0}, w[18] = {0}, out[288];
    expect(fq_f32_im2col(x, NULL, out) == FQ_ERR_NULL_POINTER, "NULL geometry");
    expect(fq_f32_im2col(NULL, &g, out) == FQ_ERR_NULL_POINTER, "NULL x");
    expect(fq_f32_depthwise(x, w, 0, &g, out) == FQ_ERR_BAD_SHAPE, "multiplier 0");
    fq_conv_geometry bad = g;
    bad.stride_width = 0;
    expect(fq_f32_depthwise(x, w, 1, &bad, out) == FQ_ERR_BAD_SHAPE, "stride 0");
    bad = g;
    bad.kernel_height = 0;
    expect(fq_f32_col2im(out, &bad, x) == FQ_ERR_BAD_SHAPE, "kernel height 0");
    bad = g;
    bad.batch = SIZE_MAX / 2;
    expect(fq_f32_depthwise_grad_filter(x, out, 1, &bad, w) == FQ_ERR_BAD_SHAPE, "overflowing batch");
    bad = g;
    bad.out_width = SIZE_MAX / 3;
    expect(fq_f32_im2col(x, &bad, out) == FQ_ERR_BAD_SHAPE, "overflowing output width");
    bad = g;
    bad.pad_top = SIZE_MAX;
    expect(fq_f32_col2im(out, &bad, x) == FQ_ERR_BAD_SHAPE, "overflowing padding");
    fq_conv_geometry empty = g;
    empty.batch = 0;
    expect(fq_f32_depthwise(NULL, w, 1, &empty, NULL) == FQ_OK, "an empty batch needs no arrays");
}

/* Flush-to-zero (and x86's denormals-are-zero) in the calling thread, on or off. */
static void caller_flushes(int on) {
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(on ? _mm_getcsr() | 0x8040u : _mm_getcsr() & ~0x8040u);
#else
    set_fpcr_bit(24, on);
#endif
}

/* dy_a and dy_b of two gradients that sum, where e % 3 != 2, to a subnormal (2^-110 + 2^-130
   and -2^-110), else to 1 + 2^-30. */
static void fill_cancelling(float *dy_a, float *dy_b, size_t n) {
    for (size_t e = 0; e < n; ++e) {
        const int tiny = e % 3 != 2;
        dy_a[e] = tiny ? 0x1p-110f + 0x1p-130f : 1.0f;
        dy_b[e] = tiny ? -0x1p-110f : 0x1p-30f;
    }
}

/* What the caller's addition makes of input-gradient element e (in the caller's state). */
typedef float (*caller_sum)(const fq_conv_geometry *g, const float *dy_a, const float *dy_b,
                            size_t e);

/* fq_f32_depthwise_grad_input_sum of (dy_a, w) and (dy_b, w) against `expected`, element by
   element, in the default state, flushing and rounding upward, on every ISA and thread count. */
static void check_sum_states(const char *name, const fq_conv_geometry *g, const float *w,
                             const float *dy_a, const float *dy_b, float *got, caller_sum expected) {
    const size_t n = g->height * g->width * g->channels;
    for (int state = 0; state < 3; ++state) {
        if (state == 1) caller_flushes(1);
        if (state == 2) fesetround(FE_UPWARD);
        for (int a = 0; a < n_isas; ++a)
            for (int threads = 1; threads <= THREADS_MAX; ++threads) {
                set_isa_threads(isas[a], threads);
                const fq_status status = fq_f32_depthwise_grad_input_sum(dy_a, w, dy_b, w, 1, g, got);
                size_t bad = n;
                for (size_t e = 0; e < n && bad == n; ++e)
                    if (!same(got[e], expected(g, dy_a, dy_b, e))) bad = e;
                expect(status == FQ_OK && bad == n, "%s, caller state %d, %s, %d threads: sum differs at %zu",
                       name, state, fq_isa_name(isas[a]), threads, bad);
            }
        caller_flushes(0);
        fesetround(FE_TONEAREST);
    }
    set_isa_threads(FQ_ISA_SCALAR, 1);
}

/* A 1x1 filter of ones: element e's terms are dy's at its pixel, or none between the strides. */
static float pointwise_sum(const fq_conv_geometry *g, const float *dy_a, const float *dy_b, size_t e) {
    const size_t c = g->channels, stride = g->stride_width, q = e / c, read = q / stride * c + e % c;
    if (q % stride != 0 || q / stride >= g->out_width) return 0.0f;
    volatile float term_a = dy_a[read], term_b = dy_b[read];
    return term_a + term_b;
}

/* A 3x3 filter whose centre tap is 1, the others 0 (stride 1, SAME): dy's at the same element. */
static float centre_sum(const fq_conv_geometry *g, const float *dy_a, const float *dy_b, size_t e) {
    (void)g;
    volatile float term_a = dy_a[e], term_b = dy_b[e];
    return term_a + term_b;
}

/* The sum of two input gradients is the one the caller's own addition makes, though the kernels
   flush subnormal results: two gradients that cancel to a subnormal sum to 2^-130 in the default
   state and to 0 in a caller's that flushes; rounded upward, 1 + 2^-30 is 1 + 2^-23. A 1x1 filter
   of ones makes each gradient its dy; 19 channels give whole vectors and a partial one; strides 1
   (summed in the kernels' blocks) and 2. Then the blocks of the 3x3 path (32 channels, a row of 8
   pixels), with a filter whose centre tap is 1 and the others 0 (each gradient its dy plus zero
   terms). */
static void test_sum_in_caller_state(void) {
    enum { C = 19, W = 4 };
    float dy_a[W * C], dy_b[W * C], ones[C], got[W * C];
    for (size_t c = 0; c < C; ++c) ones[c] = 1.0f;
    for (size_t stride = 1; stride <= 2; ++stride) {
        const size_t out_w = (W - 1) / stride + 1;
        const fq_conv_geometry g = {1, 1, W, C, 1, 1, 1, out_w, 1, stride, 1, 1, 0, 0};
        fill_cancelling(dy_a, dy_b, out_w * C);
        check_sum_states(stride == 1 ? "1x1, stride 1" : "1x1, stride 2", &g, ones, dy_a, dy_b, got,
                         pointwise_sum);
    }
    enum { C3 = 32, W3 = 8, H3 = 3 };
    static float dy3_a[H3 * W3 * C3], dy3_b[H3 * W3 * C3], centre[9 * C3], got3[H3 * W3 * C3];
    for (size_t e = 0; e < 9 * C3; ++e) centre[e] = e / C3 == 4 ? 1.0f : 0.0f;
    const fq_conv_geometry g3 = {1, H3, W3, C3, 3, 3, H3, W3, 1, 1, 1, 1, 1, 1};
    fill_cancelling(dy3_a, dy3_b, H3 * W3 * C3);
    check_sum_states("3x3", &g3, centre, dy3_a, dy3_b, got3, centre_sum);
}

int main(void) {
    static const harness_section sections[] = {
        {"statuses", test_statuses},
        {"random geometries, threads 1..4", test_random_geometries},
        {"large, threads 1..4", test_large},
        {"gradient sums in the caller's floating-point state", test_sum_in_caller_state},
    };
    return harness_main("C kernel harness (convolution)", sections, sizeof sections / sizeof sections[0]);
}
