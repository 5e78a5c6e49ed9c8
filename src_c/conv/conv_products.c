/* A float32 Conv2D as matrix products, its forward and its gradients one call each: fq_f32_im2col,
   fq_f32_matmul and fq_f32_col2im in the order the training engine made those calls one at a time
   from Python (fqcore/graph/nn_numpy.py), so the same bits, without a Python call, a numpy view
   and an allocation per step between them. */
#include <stdlib.h>

#include "../include/fqcore.h"

/* fq_f32_matmul reads a result whose columns are a multiple of this many floats in place (its
   narrower column block on AVX-512, one vector; its wider one on AVX2), and pads the others. */
#define OWN_COLUMNS ((size_t)16)

int fq_conv_geometry_pointwise(const fq_conv_geometry *g) {
    return g->kernel_height == 1 && g->kernel_width == 1 && g->stride_height == 1 &&
           g->stride_width == 1 && g->pad_top == 0 && g->pad_left == 0 &&
           g->out_height == g->height && g->out_width == g->width;
}

/* The product's rows (output pixels) and depth (one window, KH * KW * C); FQ_ERR_BAD_SHAPE when
   they overflow. */
static fq_status product_sizes(const fq_conv_geometry *g, size_t *pixels, size_t *window) {
    if (g == NULL) return FQ_ERR_NULL_POINTER;
    size_t t;
    if (__builtin_mul_overflow(g->batch, g->out_height, &t) ||
        __builtin_mul_overflow(t, g->out_width, pixels) ||
        __builtin_mul_overflow(g->kernel_height, g->kernel_width, &t) ||
        __builtin_mul_overflow(t, g->channels, window))
        return FQ_ERR_BAD_SHAPE;
    return FQ_OK;
}

fq_status fq_f32_conv2d_forward(const float *x, const fq_conv_geometry *geometry, float *cols,
                                int columns_given, const float *w, size_t outputs, float *y) {
    size_t pixels, window;
    fq_status status = product_sizes(geometry, &pixels, &window);
    if (status != FQ_OK) return status;
    const float *columns = cols;
    if (!columns_given && fq_conv_geometry_pointwise(geometry))
        columns = x;
    else if (!columns_given && (status = fq_f32_im2col(x, geometry, cols)) != FQ_OK)
        return status;
    return fq_f32_matmul(columns, (ptrdiff_t)window, 1, w, (ptrdiff_t)outputs, 1, pixels, window,
                         outputs, y);
}

/* w_backprop [window, outputs] = cols' dy, or the transpose of dy' cols where fqcore's product
   runs faster that way round: with the result's columns a multiple of OWN_COLUMNS (read in
   place, not padded) and, that equal, with the longer side as its rows (AMD Zen 5: 84 against
   130 us at [8192, 96] x [8192, 8], 82 against 96 at [1024, 288] x [1024, 64]). Each element is
   the same sum in the same order either way. */
static fq_status filter_gradient(const float *cols, const float *dy, size_t pixels, size_t window,
                                 size_t outputs, float *w_backprop) {
    const int fills_outputs = outputs % OWN_COLUMNS == 0, fills_window = window % OWN_COLUMNS == 0;
    const int flip = (fills_window && !fills_outputs) ||
                     (fills_outputs == fills_window && outputs > window);
    size_t elements;
    if (!flip || outputs == 0 || window == 0)
        return fq_f32_matmul(cols, 1, (ptrdiff_t)window, dy, (ptrdiff_t)outputs, 1, window,
                             pixels, outputs, w_backprop);
    if (__builtin_mul_overflow(outputs, window, &elements) ||
        __builtin_mul_overflow(elements, sizeof(float), &elements))
        return FQ_ERR_BAD_SHAPE;
    float *flipped = malloc(elements);
    if (flipped == NULL) return FQ_ERR_NO_MEMORY;
    const fq_status status = fq_f32_matmul(dy, 1, (ptrdiff_t)outputs, cols, (ptrdiff_t)window, 1,
                                           outputs, pixels, window, flipped);
    if (status == FQ_OK)
        for (size_t o = 0; o < outputs; ++o)
            for (size_t k = 0; k < window; ++k) w_backprop[k * outputs + o] = flipped[o * window + k];
    free(flipped);
    return status;
}

fq_status fq_f32_conv2d_grad(const float *cols, const fq_conv_geometry *geometry, size_t terms,
                             const float *const *w, const float *const *dy, const size_t *outputs,
                             float *w_backprop, float *x_backprop, float *scratch) {
    size_t pixels, window;
    fq_status status = product_sizes(geometry, &pixels, &window);
    if (status != FQ_OK) return status;
    if (terms > 0 && (w == NULL || dy == NULL || outputs == NULL)) return FQ_ERR_NULL_POINTER;
    if (w_backprop != NULL) {
        if (terms == 0) return FQ_ERR_BAD_SHAPE;
        status = filter_gradient(cols, dy[0], pixels, window, outputs[0], w_backprop);
        if (status != FQ_OK) return status;
    }
    if (x_backprop == NULL) return FQ_OK;
    if (terms == 0) return FQ_ERR_BAD_SHAPE; /* an input gradient of no term */
    const int in_place = fq_conv_geometry_pointwise(geometry);
    float *input_columns = in_place ? x_backprop : scratch;
    for (size_t k = 0; k < terms && status == FQ_OK; ++k) {
        status = (k == 0 ? fq_f32_matmul : fq_f32_matmul_continue)(
            dy[k], (ptrdiff_t)outputs[k], 1, w[k], 1, (ptrdiff_t)outputs[k], pixels, outputs[k],
            window, input_columns);
    }
    if (status != FQ_OK || in_place) return status;
    return fq_f32_col2im(input_columns, geometry, x_backprop);
}
