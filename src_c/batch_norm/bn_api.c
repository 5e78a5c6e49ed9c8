/* Public batch-norm entry points: validation and the per-channel formulas (in float64, each result
   rounded once to float32); the walks over the data are in bn_walk.c. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "../common/fpenv.h"
#include "bn_convert.h"
#include "bn_walk.h"

static fq_status check_shape(const void *x, fq_dtype dtype, fq_bn_shape shape, const void *out) {
    if (dtype != FQ_DTYPE_F32 && dtype != FQ_DTYPE_F16 && dtype != FQ_DTYPE_BF16)
        return FQ_ERR_BAD_DTYPE;
    if (shape.layout != FQ_BN_CHANNELS_LAST && shape.layout != FQ_BN_CHANNELS_FIRST)
        return FQ_ERR_BAD_LAYOUT;
    /* An element count that does not fit a size_t cannot describe memory. */
    if (shape.inner > 0 && shape.outer > SIZE_MAX / shape.inner) return FQ_ERR_BAD_SHAPE;
    if (shape.channels > 0 && shape.outer * shape.inner > SIZE_MAX / shape.channels)
        return FQ_ERR_BAD_SHAPE;
    if (shape.outer * shape.inner * shape.channels > 0 && (x == NULL || out == NULL))
        return FQ_ERR_NULL_POINTER;
    return FQ_OK;
}

/* 1 when there are channels and one of the `count` per-channel arrays is NULL. */
static int any_null(size_t channels, const void *const *arrays, size_t count) {
    for (size_t i = 0; channels > 0 && i < count; ++i)
        if (arrays[i] == NULL) return 1;
    return 0;
}

#define COUNT_OF(array) (sizeof(array) / sizeof((array)[0]))

/* One call's state: per-channel scratch (two float64 sums, the float32 centers, four float32
   tables), the walk over the data, and the floating-point mode to restore. */
typedef struct {
    double *sum_a, *sum_b;
    float *center, *a, *b, *c, *d;
    void *block;
    fq_bn_walk walk;
    fq_fpenv saved;
} call;

static fq_status call_begin(call *k, fq_dtype dtype, fq_bn_shape shape) {
    const size_t n = shape.channels > 0 ? shape.channels : 1;
    k->block = malloc(n * (2 * sizeof(double) + 5 * sizeof(float)));
    if (k->block == NULL) return FQ_ERR_NO_MEMORY;
    k->sum_a = k->block;
    k->sum_b = k->sum_a + n;
    k->center = (float *)(k->sum_b + n);
    k->a = k->center + n;
    k->b = k->a + n;
    k->c = k->b + n;
    k->d = k->c + n;
    k->saved = fq_fpenv_enter();
    fq_bn_walk_init(&k->walk, dtype, shape);
    return FQ_OK;
}

/* The call's end; returns its status. */
static fq_status call_close(call *k, fq_status status) {
    fq_fpenv_leave(k->saved);
    free(k->block);
    return status;
}

static fq_bn_table call_table(const call *k) {
    const fq_bn_table table = {k->a, k->b, k->c, k->d};
    return table;
}

static double inverse_sqrt(double variance, float epsilon) {
    return 1.0 / sqrt(variance + (double)epsilon);
}

/* Sums are taken about a shift K near the channel's mean, so a mean far from zero costs no
   precision: x - K is then exact (Sterbenz) and small, and n * var = sum (x - K)^2 -
   (sum (x - K))^2 / n cancels only the part (K - mean)^2 / var of the float32 runs' rounding
   (relative 2^-24 a run element). K is the mean of the finite ones among the channel's first
   BN_SHIFT_SAMPLE elements, rounded to float32, so (K - mean)^2 / var is about
   1 / BN_SHIFT_SAMPLE for data in random order; the first element alone (the shift before the
   float32 runs) is a sample of one, and a 4-sigma first element makes it 16. Without a finite
   element the shift is 0, so infinities reach the mean as TF's sums carry them. */
#define BN_SHIFT_SAMPLE ((size_t)16)

static float shift_of(const void *x, fq_dtype dtype, fq_bn_shape shape, size_t per_channel,
                      size_t c) {
    const size_t sample = per_channel < BN_SHIFT_SAMPLE ? per_channel : BN_SHIFT_SAMPLE;
    const int last = shape.layout == FQ_BN_CHANNELS_LAST;
    /* The channel's k-th element: channels-last, row k; channels-first, the next one along its
       runs of `inner` (no division per element: 16 of them for each of 256 channels cost 30 us). */
    size_t element = last ? c : c * shape.inner, left_in_run = last ? 0 : shape.inner;
    double total = 0.0;
    size_t finite = 0;
    for (size_t k = 0; k < sample; ++k) {
        const double value = (double)fq_load_element(x, element, dtype);
        if (isfinite(value)) {
            total += value;
            ++finite;
        }
        if (last) {
            element += shape.channels;
        } else if (--left_in_run > 0) {
            ++element;
        } else {
            element += (shape.channels - 1) * shape.inner + 1;
            left_in_run = shape.inner;
        }
    }
    return finite > 0 ? (float)(total / (double)finite) : 0.0f;
}

/* The forward's per-channel step: statistics from the sums, and y's constants. */
typedef struct {
    call *pc;
    const float *scale, *offset, *mean_in, *variance_in;
    float *batch_mean, *batch_variance, *saved_mean, *saved_variance;
    float epsilon;
    int running;
    double count, bessel, factor;
} forward_step;

static void forward_finish(void *context, size_t c0, size_t c1) {
    const forward_step *f = context;
    call *pc = f->pc;
    for (size_t c = c0; c < c1; ++c) {
        const double deviation = pc->sum_a[c] / f->count;
        const double mean = (double)pc->center[c] + deviation;
        double variance = pc->sum_b[c] / f->count - deviation * deviation;
        if (variance < 0.0) variance = 0.0;
        f->saved_mean[c] = (float)mean;
        f->saved_variance[c] = (float)variance;
        if (f->running) {
            f->batch_mean[c] =
                (float)((1.0 - f->factor) * (double)f->mean_in[c] + f->factor * mean);
            f->batch_variance[c] = (float)((1.0 - f->factor) * (double)f->variance_in[c] +
                                           f->factor * f->bessel * variance);
        } else {
            f->batch_mean[c] = (float)mean;
            f->batch_variance[c] = (float)(variance * f->bessel);
        }
        /* The mean as a float32 pair: x - hi is exact near the mean, so y keeps the float64
           mean. */
        pc->a[c] = (float)mean;
        pc->b[c] = (float)(mean - (double)pc->a[c]);
        pc->c[c] = (float)(inverse_sqrt(variance, f->epsilon) * (double)f->scale[c]);
        pc->d[c] = f->offset[c];
    }
}

fq_status fq_bn_forward_training(const void *x, fq_dtype dtype, fq_bn_shape shape,
                                 const float *scale, const float *offset, float epsilon,
                                 float exponential_avg_factor, const float *mean_in,
                                 const float *variance_in, void *y, float *batch_mean,
                                 float *batch_variance, float *saved_mean, float *saved_variance) {
    fq_status status = check_shape(x, dtype, shape, y != NULL ? y : x);
    if (status != FQ_OK) return status;
    const size_t channels = shape.channels;
    const int running = exponential_avg_factor != 1.0f;
    const void *const required[] = {scale, offset, batch_mean, batch_variance, saved_mean, saved_variance};
    const void *const running_in[] = {mean_in, variance_in};
    if (any_null(channels, required, COUNT_OF(required)) ||
        (running && any_null(channels, running_in, COUNT_OF(running_in))))
        return FQ_ERR_NULL_POINTER;
    call pc;
    if ((status = call_begin(&pc, dtype, shape)) != FQ_OK) return status;
    const size_t n = pc.walk.per_channel;
    for (size_t c = 0; c < channels; ++c) pc.center[c] = shift_of(x, dtype, pc.walk.shape, n, c);
    const double count = (double)n;
    forward_step step = {&pc, scale, offset, mean_in, variance_in, batch_mean, batch_variance,
                         saved_mean, saved_variance, epsilon, running, count,
                         count / (n > 1 ? (double)(n - 1) : 1.0), (double)exponential_avg_factor};
    const fq_bn_table table = call_table(&pc);
    status = fq_bn_walk_fused(&pc.walk, FQ_BN_NORMALIZE, NULL, x, y, pc.center, pc.sum_a, pc.sum_b,
                              forward_finish, &step, &table);
    return call_close(&pc, status);
}

fq_status fq_bn_forward_inference(const void *x, fq_dtype dtype, fq_bn_shape shape,
                                  const float *scale, const float *offset, const float *mean,
                                  const float *variance, float epsilon, void *y) {
    fq_status status = check_shape(x, dtype, shape, y);
    if (status != FQ_OK) return status;
    const size_t channels = shape.channels;
    const void *const required[] = {scale, offset, mean, variance};
    if (any_null(channels, required, COUNT_OF(required))) return FQ_ERR_NULL_POINTER;
    call pc;
    if ((status = call_begin(&pc, dtype, shape)) != FQ_OK) return status;
    for (size_t c = 0; c < channels; ++c) {
        pc.a[c] = mean[c];
        pc.b[c] = 0.0f; /* (x - mean) - 0 is x - mean, bit for bit */
        pc.c[c] = (float)(inverse_sqrt((double)variance[c], epsilon) * (double)scale[c]);
        pc.d[c] = offset[c];
    }
    const fq_bn_table table = call_table(&pc);
    return call_close(&pc, fq_bn_walk_elementwise(&pc.walk, FQ_BN_NORMALIZE, NULL, x, y, &table));
}

/* The gradient's per-channel step: scale and offset backprop from the sums, and dx's constants. */
typedef struct {
    call *pc;
    const float *scale, *mean, *variance;
    float *scale_backprop, *offset_backprop;
    float epsilon;
    int is_training;
    double count;
} grad_step;

static void grad_finish(void *context, size_t c0, size_t c1) {
    const grad_step *g = context;
    call *pc = g->pc;
    for (size_t c = c0; c < c1; ++c) {
        const double coef = inverse_sqrt((double)g->variance[c], g->epsilon);
        g->offset_backprop[c] = (float)pc->sum_a[c];
        g->scale_backprop[c] = (float)(pc->sum_b[c] * coef);
        if (g->is_training) {
            pc->a[c] = (float)(pc->sum_a[c] / g->count);
            pc->b[c] = g->mean[c];
            pc->c[c] = (float)(coef * coef * (pc->sum_b[c] / g->count));
            pc->d[c] = (float)((double)g->scale[c] * coef);
        } else {
            pc->a[c] = (float)(coef * (double)g->scale[c]);
            pc->b[c] = pc->c[c] = pc->d[c] = 0.0f;
        }
    }
}

fq_status fq_bn_grad(const void *y_backprop, const void *x, fq_dtype dtype, fq_bn_shape shape,
                     const float *scale, const float *mean, const float *variance, float epsilon,
                     int is_training, void *x_backprop, float *scale_backprop,
                     float *offset_backprop) {
    fq_status status = check_shape(x, dtype, shape, x_backprop);
    if (status != FQ_OK) return status;
    const size_t channels = shape.channels;
    const void *const required[] = {scale, mean, variance, scale_backprop, offset_backprop};
    if ((shape.outer * shape.inner * channels > 0 && y_backprop == NULL) ||
        any_null(channels, required, COUNT_OF(required)))
        return FQ_ERR_NULL_POINTER;
    call pc;
    if ((status = call_begin(&pc, dtype, shape)) != FQ_OK) return status;
    for (size_t c = 0; c < channels; ++c) pc.center[c] = mean[c];
    grad_step step = {&pc, scale, mean, variance, scale_backprop, offset_backprop, epsilon,
                      is_training, (double)pc.walk.per_channel};
    const fq_bn_table table = call_table(&pc);
    status = fq_bn_walk_fused(&pc.walk, is_training ? FQ_BN_BACKPROP : FQ_BN_SCALE, y_backprop, x,
                              x_backprop, pc.center, pc.sum_a, pc.sum_b, grad_finish, &step,
                              &table);
    return call_close(&pc, status);
}
