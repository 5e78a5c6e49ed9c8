/* C test harness, Conv2D as matrix products (fq_f32_conv2d_forward / fq_f32_conv2d_grad): on every
   ISA and thread count, the bits of the calls they stand for made one at a time (fq_f32_im2col,
   fq_f32_matmul and its continuation, fq_f32_col2im), over geometries with windows (strided,
   padded, dilated) and pointwise ones, one filter and two, filter gradients formed either way
   round; guards around every output; statuses. */
#include <stdio.h>
#include <stdlib.h>

#include "fqcore.h"
#include "harness.h"

#define TERMS_MAX 2

typedef struct {
    fq_conv_geometry g;
    size_t terms, outputs[TERMS_MAX];
} products_case;

static size_t input_size(const fq_conv_geometry *g) {
    return g->batch * g->height * g->width * g->channels;
}
static size_t pixels(const fq_conv_geometry *g) {
    return g->batch * g->out_height * g->out_width;
}
static size_t window(const fq_conv_geometry *g) {
    return g->kernel_height * g->kernel_width * g->channels;
}

static int all_same(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (!same(a[i], b[i])) return 0;
    return 1;
}

/* The forward and the gradients of case k, one call each, against the calls one at a time on the
   same ISA and thread count. */
static void check_case(const products_case *k, const char *isa, int threads) {
    const fq_conv_geometry *g = &k->g;
    const size_t p = pixels(g), win = window(g), n_in = input_size(g);
    const int pointwise = fq_conv_geometry_pointwise(g);
    float *x = random_floats(n_in);
    const float *w[TERMS_MAX], *dy[TERMS_MAX];
    for (size_t t = 0; t < k->terms; ++t) {
        w[t] = random_floats(win * k->outputs[t]);
        dy[t] = random_floats(p * k->outputs[t]);
    }
    /* The steps one at a time. */
    float *cols = pointwise ? x : xmalloc_aligned(p * win * sizeof(float) + 1);
    float *y_steps = xmalloc_aligned(p * k->outputs[0] * sizeof(float) + 1);
    float *dw_steps = xmalloc_aligned(win * k->outputs[0] * sizeof(float) + 1);
    float *dcols = xmalloc_aligned(p * win * sizeof(float) + 1);
    float *dx_steps = xmalloc_aligned(n_in * sizeof(float) + 1);
    fq_status s = pointwise ? FQ_OK : fq_f32_im2col(x, g, cols);
    s |= fq_f32_matmul(cols, (ptrdiff_t)win, 1, w[0], (ptrdiff_t)k->outputs[0], 1, p, win,
                       k->outputs[0], y_steps);
    s |= fq_f32_matmul(cols, 1, (ptrdiff_t)win, dy[0], (ptrdiff_t)k->outputs[0], 1, win, p,
                       k->outputs[0], dw_steps);
    for (size_t t = 0; t < k->terms; ++t)
        s |= (t == 0 ? fq_f32_matmul : fq_f32_matmul_continue)(
            dy[t], (ptrdiff_t)k->outputs[t], 1, w[t], 1, (ptrdiff_t)k->outputs[t], p,
            k->outputs[t], win, dcols);
    if (pointwise) {
        for (size_t e = 0; e < n_in; ++e) dx_steps[e] = dcols[e];
    } else {
        s |= fq_f32_col2im(dcols, g, dx_steps);
    }
    expect(s == FQ_OK, "%s x%d: the steps one at a time failed", isa, threads);

    /* One call each, columns made and given. */
    float *cols_made = guarded_output(p * win), *y = guarded_output(p * k->outputs[0]);
    float *y_given = guarded_output(p * k->outputs[0]);
    float *dw = guarded_output(win * k->outputs[0]), *dx = guarded_output(n_in);
    float *scratch = guarded_output(p * win);
    expect(fq_f32_conv2d_forward(x, g, cols_made, 0, w[0], k->outputs[0], y) == FQ_OK &&
               fq_f32_conv2d_forward(NULL, g, cols, 1, w[0], k->outputs[0], y_given) == FQ_OK,
           "%s x%d: forward failed", isa, threads);
    expect(all_same(y, y_steps, p * k->outputs[0]) && all_same(y_given, y_steps, p * k->outputs[0]),
           "%s x%d: forward differs from im2col and the product", isa, threads);
    expect(pointwise || all_same(cols_made, cols, p * win), "%s x%d: columns differ from im2col",
           isa, threads);
    expect(fq_f32_conv2d_grad(cols, g, k->terms, w, dy, k->outputs, dw, dx, scratch) == FQ_OK,
           "%s x%d: gradient failed", isa, threads);
    expect(all_same(dw, dw_steps, win * k->outputs[0]), "%s x%d: filter gradient differs", isa,
           threads);
    expect(all_same(dx, dx_steps, n_in), "%s x%d: input gradient differs (%zu terms)", isa, threads,
           k->terms);
    expect(output_intact(cols_made, p * win) && output_intact(y, p * k->outputs[0]) &&
               output_intact(y_given, p * k->outputs[0]) &&
               output_intact(dw, win * k->outputs[0]) && output_intact(dx, n_in) &&
               output_intact(scratch, p * win),
           "%s x%d: a write outside an output", isa, threads);
    free_output(cols_made);
    free_output(y);
    free_output(y_given);
    free_output(dw);
    free_output(dx);
    free_output(scratch);
    if (!pointwise) free(cols);
    free(x);
    free(y_steps);
    free(dw_steps);
    free(dcols);
    free(dx_steps);
    for (size_t t = 0; t < k->terms; ++t) {
        free((void *)w[t]);
        free((void *)dy[t]);
    }
}

/* (batch, height, width, channels, kernel, stride, dilation, pad, SAME output) per case, and the
   filters' outputs: 3x3 windows (32 outputs: dw cols' dy; 10 with a window of 288, a multiple of
   the product's vectors: dw formed as (dy' cols)'), strided and dilated ones, pointwise ones. */
static void test_geometries(void) {
    static const products_case cases[] = {
        {{2, 6, 5, 3, 3, 3, 6, 5, 1, 1, 1, 1, 1, 1}, 1, {32}},
        {{2, 6, 6, 32, 3, 3, 3, 3, 2, 2, 1, 1, 0, 0}, 2, {10, 7}},
        {{1, 9, 8, 4, 2, 3, 4, 6, 2, 1, 2, 1, 0, 0}, 2, {5, 24}},
        {{3, 4, 5, 16, 1, 1, 4, 5, 1, 1, 1, 1, 0, 0}, 2, {16, 8}},
        {{2, 5, 5, 6, 1, 1, 3, 3, 2, 2, 1, 1, 0, 0}, 1, {9}},
    };
    for (int i = 0; i < n_isas; ++i)
        for (int threads = 1; threads <= THREADS_MAX; threads += 3) {
            set_isa_threads(isas[i], threads);
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c)
                check_case(&cases[c], fq_isa_name(isas[i]), threads);
        }
    set_isa_threads(FQ_ISA_SCALAR, 1);
}

static void test_statuses(void) {
    const fq_conv_geometry g = {1, 3, 3, 2, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1};
    fq_conv_geometry huge = g;
    huge.batch = huge.out_height = (size_t)1 << 40;
    float x[18] = {0}, w[18] = {0}, dy[9] = {0}, cols[162], dx[18], dw[18];
    const float *ws[1] = {w}, *dys[1] = {dy};
    const size_t outputs[1] = {1};
    expect(fq_f32_conv2d_forward(x, NULL, cols, 0, w, 1, dx) == FQ_ERR_NULL_POINTER,
           "forward: NULL geometry");
    expect(fq_f32_conv2d_forward(x, &huge, cols, 0, w, 1, dx) == FQ_ERR_BAD_SHAPE,
           "forward: pixels overflow");
    expect(fq_f32_conv2d_forward(NULL, &g, cols, 0, w, 1, dx) == FQ_ERR_NULL_POINTER,
           "forward: NULL x");
    expect(fq_f32_conv2d_grad(cols, NULL, 1, ws, dys, outputs, dw, dx, cols) ==
               FQ_ERR_NULL_POINTER,
           "gradient: NULL geometry");
    expect(fq_f32_conv2d_grad(cols, &huge, 1, ws, dys, outputs, dw, dx, cols) == FQ_ERR_BAD_SHAPE,
           "gradient: pixels overflow");
    expect(fq_f32_conv2d_grad(cols, &g, 1, NULL, dys, outputs, dw, dx, cols) ==
               FQ_ERR_NULL_POINTER,
           "gradient: NULL filters");
    expect(fq_f32_conv2d_grad(cols, &g, 0, NULL, NULL, NULL, NULL, dx, cols) == FQ_ERR_BAD_SHAPE,
           "gradient: an input gradient of no term");
    expect(fq_f32_conv2d_grad(cols, &g, 0, NULL, NULL, NULL, dw, NULL, NULL) == FQ_ERR_BAD_SHAPE,
           "gradient: a filter gradient of no term");
    expect(fq_f32_conv2d_grad(cols, &g, 0, NULL, NULL, NULL, NULL, NULL, NULL) == FQ_OK,
           "gradient: nothing asked");
}

int main(void) {
    static const harness_section sections[] = {
        {"statuses", test_statuses},
        {"geometries, one call against the steps, threads 1 and 4", test_geometries},
    };
    return harness_main("C kernel harness (convolution as products)", sections,
                        sizeof sections / sizeof sections[0]);
}
