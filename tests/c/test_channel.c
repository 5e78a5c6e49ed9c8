/* C test harness, per-channel chains (fq_f32_channel_affine and its gradient) and a residual sum's
   activation (fq_f32_add_activation): every ISA and thread count against scalar on one thread, bit
   for bit; the forwards and x_backprop against a reference written from fqcore.h's rules, bit for
   bit (NaN, infinities, -0 and denormals among the inputs); the sums against float64; guards
   around every output; statuses. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fqcore.h"
#include "harness.h"

static const uint32_t special_bits[] = {0x7fc00000u, 0xffc00000u, 0x7f800000u, 0xff800000u,
                                        0x80000000u, 0x00000000u, 0x40c00000u, 0xc0c00000u,
                                        0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x3f800000u};
#define N_SPECIAL (sizeof special_bits / sizeof special_bits[0])

static float *values(size_t n, int specials) {
    float *a = xmalloc_aligned(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; ++i) a[i] = unif(-8.0f, 8.0f);
    if (specials)
        for (size_t k = 0; k < n / 7 + 1 && n; ++k) a[below(n)] = from_bits(special_bits[below(N_SPECIAL)]);
    return a;
}

static float ref_forward(float v, size_t c, const float *scale, const float *a, const float *b,
                         fq_activation act) {
    if (scale) v = v * scale[c];
    if (a) v = v + a[c];
    if (b) v = v + b[c];
    if (act == FQ_ACTIVATION_RELU) return (v > 0.0f || isnan(v)) ? v : 0.0f;
    if (act == FQ_ACTIVATION_RELU6) return v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v);
    return v;
}

static float ref_pass(float dy, float y, fq_activation act) {
    if (act == FQ_ACTIVATION_RELU) return dy * (y > 0.0f ? 1.0f : 0.0f);
    if (act == FQ_ACTIVATION_RELU6) return dy * ((y > 0.0f && y < 6.0f) ? 1.0f : 0.0f);
    return dy;
}

static int bits_equal(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (!same(a[i], b[i])) return 0;
    return 1;
}

static void check(size_t rows, size_t channels, int with_scale, int shifts, fq_activation act) {
    const size_t n = rows * channels;
    float *x = values(n, 1), *dy = values(n, 1);
    float *scale = with_scale ? values(channels, 0) : NULL;
    float *a = shifts > 0 ? values(channels, 0) : NULL, *b = shifts > 1 ? values(channels, 0) : NULL;
    float *ref_y = xmalloc_aligned(n * sizeof(float) + 1), *ref_dx = xmalloc_aligned(n * sizeof(float) + 1);
    double *sum_s = calloc(channels + 1, sizeof(double)), *sum_b = calloc(channels + 1, sizeof(double));
    for (size_t i = 0; i < n; ++i) {
        const size_t c = i % channels;
        ref_y[i] = ref_forward(x[i], c, scale, a, b, act);
        const float g = ref_pass(dy[i], ref_y[i], act);
        ref_dx[i] = scale ? scale[c] * g : g;
        sum_s[c] += (double)(g * x[i]);
        sum_b[c] += (double)g;
    }
    char where[120];
    snprintf(where, sizeof where, "rows %zu channels %zu scale %d shifts %d activation %d", rows,
             channels, with_scale, shifts, (int)act);
    float *y0 = guarded_output(n), *dx0 = guarded_output(n), *ds0 = guarded_output(channels), *db0 = guarded_output(channels);
    set_isa_threads(FQ_ISA_SCALAR, 1);
    expect(fq_f32_channel_affine(x, n, channels, scale, a, b, act, y0) == FQ_OK, "%s: status", where);
    expect(bits_equal(y0, ref_y, n) && output_intact(y0, n), "%s: forward differs from the reference", where);
    expect(fq_f32_channel_affine_grad(dy, x, y0, n, channels, scale, act, dx0, ds0, db0) == FQ_OK,
           "%s: gradient status", where);
    expect(bits_equal(dx0, ref_dx, n) && output_intact(dx0, n), "%s: x_backprop differs from the reference", where);
    int sums_ok = output_intact(ds0, channels) && output_intact(db0, channels);
    for (size_t c = 0; c < channels; ++c) {
        const double fs = (double)(float)sum_s[c], fb = (double)(float)sum_b[c];
        sums_ok &= (isnan(fs) && isnan(ds0[c])) || fs == ds0[c] || fabs(fs - ds0[c]) <= 1e-6 * fabs(fs);
        sums_ok &= (isnan(fb) && isnan(db0[c])) || fb == db0[c] || fabs(fb - db0[c]) <= 1e-6 * fabs(fb);
    }
    expect(sums_ok, "%s: sums differ from float64", where);
    for (int k = 0; k < n_isas; ++k)
        for (int threads = 1; threads <= THREADS_MAX; ++threads) {
            if (isas[k] == FQ_ISA_SCALAR && threads == 1) continue;
            set_isa_threads(isas[k], threads);
            float *y = guarded_output(n), *dx = guarded_output(n), *ds = guarded_output(channels), *db = guarded_output(channels);
            fq_f32_channel_affine(x, n, channels, scale, a, b, act, y);
            fq_f32_channel_affine_grad(dy, x, y, n, channels, scale, act, dx, ds, db);
            expect(bits_equal(y, y0, n) && bits_equal(dx, dx0, n) && bits_equal(ds, ds0, channels) &&
                       bits_equal(db, db0, channels) && output_intact(y, n) && output_intact(dx, n) &&
                       output_intact(ds, channels) && output_intact(db, channels),
                   "%s on %s, %d threads: differs from scalar", where, fq_isa_name(isas[k]), threads);
            free_output(y); free_output(dx); free_output(ds); free_output(db);
        }
    set_isa_threads(FQ_ISA_SCALAR, 1);
    free_output(y0); free_output(dx0); free_output(ds0); free_output(db0);
    free(x); free(dy); free(scale); free(a); free(b); free(ref_y); free(ref_dx); free(sum_s); free(sum_b);
}

static void test_shapes(void) {
    static const size_t channel_counts[] = {1, 3, 15, 16, 17, 32, 64, 100, 1023, 1024, 1500};
    for (size_t k = 0; k < sizeof channel_counts / sizeof channel_counts[0]; ++k)
        for (int act = 0; act <= FQ_ACTIVATION_RELU6; ++act)
            for (int form = 0; form < 6; ++form)
                check(1 + below(40), channel_counts[k], form % 2, form / 2, (fq_activation)act);
}

/* Enough data for several threads and blocks of the sums. */
static void test_large(void) {
    check(8192, 32, 1, 2, FQ_ACTIVATION_RELU6);
    check(2000, 100, 1, 1, FQ_ACTIVATION_RELU);
    check(300, 1500, 0, 2, FQ_ACTIVATION_NONE);
}

/* fq_f32_fold_batch_norm_grad against the formula's float32 steps, every ISA and thread count. */
static void test_fold_gradient(void) {
    static const size_t shapes[][2] = {{1, 1}, {7, 3}, {40, 16}, {4096, 32}, {50, 1500}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; ++k) {
        const size_t rows = shapes[k][0], channels = shapes[k][1], n = rows * channels;
        float *x = values(n, 1), *mean = values(channels, 0), *gm = values(channels, 0);
        float *gv = values(channels, 0), *ref = xmalloc_aligned(n * sizeof(float) + 1);
        const float count = (float)rows;
        for (size_t i = 0; i < n; ++i) {
            const size_t c = i % channels;
            ref[i] = gm[c] / count + ((2.0f * gv[c]) * (x[i] - mean[c])) / (count - 1.0f);
        }
        for (int a = 0; a < n_isas; ++a)
            for (int threads = 1; threads <= THREADS_MAX; ++threads) {
                set_isa_threads(isas[a], threads);
                float *got = guarded_output(n);
                expect(fq_f32_fold_batch_norm_grad(x, n, channels, mean, gm, gv, count, got) == FQ_OK &&
                           bits_equal(got, ref, n) && output_intact(got, n),
                       "fold gradient rows %zu channels %zu on %s, %d threads", rows, channels,
                       fq_isa_name(isas[a]), threads);
                free_output(got);
            }
        set_isa_threads(FQ_ISA_SCALAR, 1);
        free(x); free(mean); free(gm); free(gv); free(ref);
    }
    float v[4] = {0};
    expect(fq_f32_fold_batch_norm_grad(v, 4, 3, v, v, v, 1.0f, v) == FQ_ERR_BAD_SHAPE, "fold 4 %% 3");
    expect(fq_f32_fold_batch_norm_grad(v, 4, 2, NULL, v, v, 1.0f, v) == FQ_ERR_NULL_POINTER, "fold NULL mean");
}

/* fq_f32_channel_affine_grad_clipped against fq_f32_vars_grad's dx fed to
   fq_f32_channel_affine_grad, bit for bit (x_backprop and the sums), every ISA and thread count:
   ranges that nudge, a y with values on the nudged bounds, NaN, infinities, -0 and denormals. */
static void test_clipped_gradient(void) {
    static const float ranges[][2] = {{-1.0f, 6.0f}, {0.0f, 6.0f}, {-0.37f, 2.9f}, {-1e-39f, 4.0f},
                                      {2.0f, 3.0f}};
    static const size_t shapes[][2] = {{1, 1}, {9, 3}, {40, 17}, {4096, 32}, {20, 1500}};
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; ++r)
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; ++k)
            for (int act = 0; act <= FQ_ACTIVATION_RELU6; ++act) {
                const size_t rows = shapes[k][0], channels = shapes[k][1], n = rows * channels;
                const int bits = 2 + (int)below(15), narrow = (int)below(2);
                int passes_all;
                float lo, hi;
                expect(fq_f32_vars_grad_interval(ranges[r][0], ranges[r][1], bits, narrow, &passes_all, &lo,
                                                 &hi) == FQ_OK && !passes_all,
                       "interval of range %zu", r);
                float *x = values(n, 1), *dy = values(n, 1), *scale = values(channels, 0);
                float *y = guarded_output(n), *dz = guarded_output(n), *want = guarded_output(n), *got = guarded_output(n);
                float want_s[1500], want_b[1500], got_s[1500], got_b[1500], dmin, dmax;
                set_isa_threads(FQ_ISA_SCALAR, 1);
                fq_f32_channel_affine(x, n, channels, scale, NULL, NULL, (fq_activation)act, y);
                for (size_t i = 0; i < n; i += 5) y[i] = i % 2 ? lo : hi; /* on the bounds */
                if (n > 3) y[3] = from_bits(0x80000001u);                  /* a negative denormal */
                fq_f32_vars_grad(dy, y, dz, n, ranges[r][0], ranges[r][1], bits, narrow, &dmin, &dmax);
                fq_f32_channel_affine_grad(dz, x, y, n, channels, scale, (fq_activation)act, want, want_s,
                                           want_b);
                for (int a = 0; a < n_isas; ++a)
                    for (int threads = 1; threads <= THREADS_MAX; ++threads) {
                        set_isa_threads(isas[a], threads);
                        expect(fq_f32_channel_affine_grad_clipped(dy, x, y, n, channels, scale,
                                                                  (fq_activation)act, lo, hi, got, got_s,
                                                                  got_b) == FQ_OK &&
                                   bits_equal(got, want, n) && output_intact(got, n) &&
                                   bits_equal(got_s, want_s, channels) && bits_equal(got_b, want_b, channels),
                               "clipped gradient range %zu rows %zu channels %zu activation %d on %s, %d threads",
                               r, rows, channels, act, fq_isa_name(isas[a]), threads);
                    }
                set_isa_threads(FQ_ISA_SCALAR, 1);
                free(x); free(dy); free(scale);
                free_output(y); free_output(dz); free_output(want); free_output(got);
            }
    int passes_all;
    float lo, hi;
    expect(fq_f32_vars_grad_interval(0.0f, 0.0f, 8, 0, &passes_all, &lo, &hi) == FQ_OK && passes_all,
           "an all-zero range passes everything");
    expect(fq_f32_vars_grad_interval(-1e-39f, 1e-39f, 8, 0, &passes_all, &lo, &hi) == FQ_OK && passes_all,
           "a range of denormals is all zero");
    expect(fq_f32_vars_grad_interval(0.0f, 1.0f, 1, 0, &passes_all, &lo, &hi) == FQ_ERR_NUM_BITS,
           "num_bits 1");
    expect(fq_f32_vars_grad_interval(0.0f, 1.0f, 8, 0, NULL, &lo, &hi) == FQ_ERR_NULL_POINTER, "NULL flag");
}

/* fq_f32_add_activation against the reference's sum and activation, every ISA and thread count;
   and its gradient as fqcore.h gives it (one channel, no x, no scale) against the activation's
   mask of a + b, the ops' own formula (Relu6: dy * (0 < a + b < 6)). */
static void test_add_activation(void) {
    static const size_t sizes[] = {1, 7, 16, 1023, 1024, 1025, 5000, 300000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k)
        for (int act = 0; act <= FQ_ACTIVATION_RELU6; ++act) {
            const size_t n = sizes[k];
            float *a = values(n, 1), *b = values(n, 1), *dy = values(n, 1);
            float *ref_y = xmalloc_aligned(n * sizeof(float) + 1), *ref_dx = xmalloc_aligned(n * sizeof(float) + 1);
            for (size_t i = 0; i < n; ++i) {
                const float sum = a[i] + b[i];
                ref_y[i] = ref_forward(sum, 0, NULL, NULL, NULL, (fq_activation)act);
                if (act == FQ_ACTIVATION_RELU6) ref_dx[i] = dy[i] * ((sum > 0.0f && sum < 6.0f) ? 1.0f : 0.0f);
                else if (act == FQ_ACTIVATION_RELU) ref_dx[i] = dy[i] * (ref_y[i] > 0.0f ? 1.0f : 0.0f);
                else ref_dx[i] = dy[i];
            }
            for (int i = 0; i < n_isas; ++i)
                for (int threads = 1; threads <= THREADS_MAX; ++threads) {
                    set_isa_threads(isas[i], threads);
                    float *y = guarded_output(n), *dx = guarded_output(n);
                    expect(fq_f32_add_activation(a, b, n, (fq_activation)act, y) == FQ_OK &&
                               bits_equal(y, ref_y, n) && output_intact(y, n),
                           "add_activation n %zu activation %d on %s, %d threads: forward", n, act,
                           fq_isa_name(isas[i]), threads);
                    expect(fq_f32_channel_affine_grad(dy, NULL, y, n, 1, NULL, (fq_activation)act, dx, NULL,
                                                      NULL) == FQ_OK &&
                               bits_equal(dx, ref_dx, n) && output_intact(dx, n),
                           "add_activation n %zu activation %d on %s, %d threads: gradient", n, act,
                           fq_isa_name(isas[i]), threads);
                    free_output(y); free_output(dx);
                }
            set_isa_threads(FQ_ISA_SCALAR, 1);
            free(a); free(b); free(dy); free(ref_y); free(ref_dx);
        }
    float v[4] = {0}, y[4];
    expect(fq_f32_add_activation(v, v, 4, (fq_activation)3, y) == FQ_ERR_BAD_SHAPE, "add_activation 3");
    expect(fq_f32_add_activation(v, NULL, 4, FQ_ACTIVATION_RELU, y) == FQ_ERR_NULL_POINTER, "add_activation NULL b");
    expect(fq_f32_add_activation(NULL, NULL, 0, FQ_ACTIVATION_RELU, NULL) == FQ_OK, "add_activation empty");
}

static void test_statuses(void) {
    float x[8] = {0}, y[8], v[4] = {0};
    expect(fq_f32_channel_affine(x, 8, 3, v, NULL, NULL, FQ_ACTIVATION_NONE, y) == FQ_ERR_BAD_SHAPE, "8 %% 3");
    expect(fq_f32_channel_affine(x, 8, 0, NULL, NULL, NULL, FQ_ACTIVATION_NONE, y) == FQ_ERR_BAD_SHAPE, "0 channels");
    expect(fq_f32_channel_affine(x, 8, 4, NULL, NULL, NULL, (fq_activation)7, y) == FQ_ERR_BAD_SHAPE, "activation 7");
    expect(fq_f32_channel_affine(NULL, 8, 4, NULL, NULL, NULL, FQ_ACTIVATION_NONE, y) == FQ_ERR_NULL_POINTER, "NULL x");
    expect(fq_f32_channel_affine_grad(x, NULL, y, 8, 4, NULL, FQ_ACTIVATION_NONE, NULL, v, NULL) ==
               FQ_ERR_NULL_POINTER, "scale_backprop without x");
    expect(fq_f32_channel_affine(NULL, 0, 4, NULL, NULL, NULL, FQ_ACTIVATION_RELU, NULL) == FQ_OK, "empty");
}

int main(void) {
    static const harness_section sections[] = {
        {"statuses", test_statuses},
        {"shapes x forms, threads 1..4", test_shapes},
        {"large, threads 1..4", test_large},
        {"fold gradient, threads 1..4", test_fold_gradient},
        {"gradient through a fake quant's clip, threads 1..4", test_clipped_gradient},
        {"residual sum and activation, threads 1..4", test_add_activation},
    };
    return harness_main("C kernel harness (per-channel chain)", sections, sizeof sections / sizeof sections[0]);
}
