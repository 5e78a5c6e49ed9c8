/* Public batch-norm entry points: validation and the per-channel formulas (in float64, each result
   rounded once to float32); the walks over the data are in bn_walk.c. */
#include <math.h>
#include <stdlib.h>

#include "../common/fpenv.h"
#include "bn_convert.h"
#include "bn_walk.h"

static fq_status check_shape(const void *x, fq_dtype dtype, fq_bn_shape shape, const void *out) {
    if (dtype != FQ_DTYPE_F32 && dtype != FQ_DTYPE_F16 && dtype != FQ_DTYPE_BF16)
        return FQ_ERR_BAD_DTYPE;
    if (shape.layout != FQ_BN_CHANNELS_LAST && shape.layout != FQ_BN_CHANNELS_FIRST)
        return FQ_ERR_BAD_LAYOUT;
    if (shape.outer * shape.inner * shape.channels > 0 && (x == NULL || out == NULL))
        return FQ_ERR_NULL_POINTER;
    return FQ_OK;
}

static int any_null(size_t channels, const void *a, const void *b, const void *c, const void *d) {
    return channels > 0 && (a == NULL || b == NULL || c == NULL || d == NULL);
}

/* Per-channel scratch: two float64 sums, the centers, and four float32 tables. */
typedef struct {
    double *sum_a, *sum_b, *center;
    float *a, *b, *c, *d;
    void *block;
} per_channel;

static fq_status per_channel_alloc(per_channel *pc, size_t channels) {
    const size_t n = channels > 0 ? channels : 1;
    pc->block = malloc(n * (3 * sizeof(double) + 4 * sizeof(float)));
    if (pc->block == NULL) return FQ_ERR_NO_MEMORY;
    pc->sum_a = pc->block;
    pc->sum_b = pc->sum_a + n;
    pc->center = pc->sum_b + n;
    pc->a = (float *)(pc->center + n);
    pc->b = pc->a + n;
    pc->c = pc->b + n;
    pc->d = pc->c + n;
    return FQ_OK;
}

static fq_bn_table table_of(const per_channel *pc) {
    const fq_bn_table t = {pc->a, pc->b, pc->c, pc->d};
    return t;
}

static double inverse_sqrt(double variance, float epsilon) {
    return 1.0 / sqrt(variance + (double)epsilon);
}

/* Sums are taken about a shift near the data (the channel's first element), so a mean far from
   zero costs no precision: with shift K, n * var = sum (x - K)^2 - (sum (x - K))^2 / n, and since
   (K - mean)^2 <= n * var, the cancellation loses at most a factor n of float64 precision. A
   non-finite first element shifts by 0, so infinities reach the mean as TF's sums carry them. */
static double shift_of(const void *x, fq_dtype dtype, size_t element) {
    const double value = (double)fq_load_element(x, element, dtype);
    return isfinite(value) ? value : 0.0;
}

fq_status fq_bn_forward_training(const void *x, fq_dtype dtype, fq_bn_shape shape,
                                 const float *scale, const float *offset, float epsilon,
                                 float exponential_avg_factor, const float *mean_in,
                                 const float *variance_in, void *y, float *batch_mean,
                                 float *batch_variance, float *saved_mean, float *saved_variance) {
    fq_status status = check_shape(x, dtype, shape, y);
    if (status != FQ_OK) return status;
    const size_t channels = shape.channels;
    const int running = exponential_avg_factor != 1.0f;
    if (any_null(channels, scale, offset, batch_mean, batch_variance) ||
        any_null(channels, saved_mean, saved_variance, running ? mean_in : scale,
                 running ? variance_in : scale))
        return FQ_ERR_NULL_POINTER;
    per_channel pc;
    if ((status = per_channel_alloc(&pc, channels)) != FQ_OK) return status;
    const fq_fpenv saved = fq_fpenv_enter();
    fq_bn_walk walk;
    fq_bn_walk_init(&walk, dtype, shape);
    const size_t n = walk.per_channel;
    for (size_t c = 0; c < channels; ++c) {
        const size_t first = shape.layout == FQ_BN_CHANNELS_LAST ? c : c * shape.inner;
        pc.center[c] = walk.count > 0 ? shift_of(x, dtype, first) : 0.0;
    }
    status = fq_bn_walk_sums(&walk, NULL, x, pc.center, pc.sum_a, pc.sum_b);
    const double count = (double)n;
    const double bessel = count / (n > 1 ? (double)(n - 1) : 1.0);
    const double factor = (double)exponential_avg_factor;
    for (size_t c = 0; status == FQ_OK && c < channels; ++c) {
        const double deviation = pc.sum_a[c] / count;
        const double mean = pc.center[c] + deviation;
        double variance = pc.sum_b[c] / count - deviation * deviation;
        if (variance < 0.0) variance = 0.0;
        saved_mean[c] = (float)mean;
        saved_variance[c] = (float)variance;
        if (running) {
            batch_mean[c] = (float)((1.0 - factor) * (double)mean_in[c] + factor * mean);
            batch_variance[c] =
                (float)((1.0 - factor) * (double)variance_in[c] + factor * bessel * variance);
        } else {
            batch_mean[c] = (float)mean;
            batch_variance[c] = (float)(variance * bessel);
        }
        /* The mean as a float32 pair: x - hi is exact near the mean, so y keeps the float64 mean. */
        pc.a[c] = (float)mean;
        pc.b[c] = (float)(mean - (double)pc.a[c]);
        pc.c[c] = (float)(inverse_sqrt(variance, epsilon) * (double)scale[c]);
        pc.d[c] = offset[c];
    }
    if (status == FQ_OK) {
        const fq_bn_table table = table_of(&pc);
        status = fq_bn_walk_elementwise(&walk, FQ_BN_NORMALIZE, NULL, x, y, &table);
    }
    fq_fpenv_leave(saved);
    free(pc.block);
    return status;
}

fq_status fq_bn_forward_inference(const void *x, fq_dtype dtype, fq_bn_shape shape,
                                  const float *scale, const float *offset, const float *mean,
                                  const float *variance, float epsilon, void *y) {
    fq_status status = check_shape(x, dtype, shape, y);
    if (status != FQ_OK) return status;
    const size_t channels = shape.channels;
    if (any_null(channels, scale, offset, mean, variance)) return FQ_ERR_NULL_POINTER;
    per_channel pc;
    if ((status = per_channel_alloc(&pc, channels)) != FQ_OK) return status;
    const fq_fpenv saved = fq_fpenv_enter();
    fq_bn_walk walk;
    fq_bn_walk_init(&walk, dtype, shape);
    for (size_t c = 0; c < channels; ++c) {
        pc.a[c] = mean[c];
        pc.b[c] = 0.0f; /* (x - mean) - 0 is x - mean, bit for bit */
        pc.c[c] = (float)(inverse_sqrt((double)variance[c], epsilon) * (double)scale[c]);
        pc.d[c] = offset[c];
    }
    const fq_bn_table table = table_of(&pc);
    status = fq_bn_walk_elementwise(&walk, FQ_BN_NORMALIZE, NULL, x, y, &table);
    fq_fpenv_leave(saved);
    free(pc.block);
    return status;
}

fq_status fq_bn_grad(const void *y_backprop, const void *x, fq_dtype dtype, fq_bn_shape shape,
                     const float *scale, const float *mean, const float *variance, float epsilon,
                     int is_training, void *x_backprop, float *scale_backprop,
                     float *offset_backprop) {
    fq_status status = check_shape(x, dtype, shape, x_backprop);
    if (status != FQ_OK) return status;
    const size_t channels = shape.channels;
    if ((shape.outer * shape.inner * channels > 0 && y_backprop == NULL) ||
        any_null(channels, scale, mean, variance, scale_backprop) ||
        any_null(channels, offset_backprop, scale, scale, scale))
        return FQ_ERR_NULL_POINTER;
    per_channel pc;
    if ((status = per_channel_alloc(&pc, channels)) != FQ_OK) return status;
    const fq_fpenv saved = fq_fpenv_enter();
    fq_bn_walk walk;
    fq_bn_walk_init(&walk, dtype, shape);
    for (size_t c = 0; c < channels; ++c) pc.center[c] = (double)mean[c];
    status = fq_bn_walk_sums(&walk, y_backprop, x, pc.center, pc.sum_a, pc.sum_b);
    const double count = (double)walk.per_channel;
    for (size_t c = 0; status == FQ_OK && c < channels; ++c) {
        const double coef = inverse_sqrt((double)variance[c], epsilon);
        offset_backprop[c] = (float)pc.sum_a[c];
        scale_backprop[c] = (float)(pc.sum_b[c] * coef);
        if (is_training) {
            pc.a[c] = (float)(pc.sum_a[c] / count);
            pc.b[c] = mean[c];
            pc.c[c] = (float)(coef * coef * (pc.sum_b[c] / count));
            pc.d[c] = (float)((double)scale[c] * coef);
        } else {
            pc.a[c] = (float)(coef * (double)scale[c]);
            pc.b[c] = pc.c[c] = pc.d[c] = 0.0f;
        }
    }
    if (status == FQ_OK) {
        const fq_bn_table table = table_of(&pc);
        status = fq_bn_walk_elementwise(&walk, is_training ? FQ_BN_BACKPROP : FQ_BN_SCALE,
                                        y_backprop, x, x_backprop, &table);
    }
    fq_fpenv_leave(saved);
    free(pc.block);
    return status;
}
