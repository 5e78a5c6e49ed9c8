/* NEON (AArch64 Advanced SIMD) fake-quant kernels (4 lanes); bit-identical to fq_scalar.c, sum lane order included. */
#if !defined(__aarch64__)
#error "fq_neon.c is for AArch64 only (Advanced SIMD with float64 lanes, vrndmq_f32, vdivq_f32)"
#endif
#include <arm_neon.h>

#include "fq_element.h"

/* No FMA anywhere: arm_neon.h writes vmulq_f32/vsubq_f32 as plain C operators, so this file relies
   on -ffp-contract=off (setup.py, tests/c/Makefile) to keep each multiply and add rounded on its own,
   as fq_scalar.c does. */

typedef struct {
    float32x4_t nudged_min, nudged_max, scale, inv_scale, quant_zero;
} grid4;

static inline grid4 broadcast(const fq_grid *q) {
    return (grid4){vdupq_n_f32(q->nudged_min), vdupq_n_f32(q->nudged_max), vdupq_n_f32(q->scale),
                   vdupq_n_f32(q->inv_scale), vdupq_n_f32(q->quant_zero)};
}

static inline grid4 load_grid(const fq_grid_table *t, size_t p) {
    return (grid4){vld1q_f32(t->nudged_min + p), vld1q_f32(t->nudged_max + p),
                   vld1q_f32(t->scale + p), vld1q_f32(t->inv_scale + p),
                   vld1q_f32(t->quant_zero + p)};
}

/* fq_clamp with compare + select: vminq/vmaxq would propagate a NaN bound and order -0 below +0,
   which the scalar `nmax < x ? nmax : x; c < nmin ? nmin : c` does not. */
static inline float32x4_t shifted4(float32x4_t x, const grid4 *q) {
    float32x4_t c = vbslq_f32(vcltq_f32(q->nudged_max, x), q->nudged_max, x);
    c = vbslq_f32(vcltq_f32(c, q->nudged_min), q->nudged_min, c);
    return vsubq_f32(c, q->nudged_min);
}

static inline float32x4_t finish4(float32x4_t scaled, const grid4 *q) {
    const float32x4_t t = vaddq_f32(vsubq_f32(scaled, q->quant_zero), vdupq_n_f32(0.5f));
    return vmulq_f32(vrndmq_f32(t), q->scale);
}

static inline float32x4_t forward_mul4(float32x4_t x, const grid4 *q) {
    return finish4(vmulq_f32(shifted4(x, q), q->inv_scale), q);
}

static inline float32x4_t forward_div4(float32x4_t x, const grid4 *q) {
    return finish4(vdivq_f32(shifted4(x, q), q->scale), q);
}

/* A compare mask (all ones / all zeros per lane) as 1.0f / +0.0f. */
static inline float32x4_t as_one(uint32x4_t mask) {
    return vreinterpretq_f32_u32(vandq_u32(mask, vreinterpretq_u32_f32(vdupq_n_f32(1.0f))));
}

static inline uint32x4_t between4(float32x4_t x, float32x4_t nudged_min, float32x4_t nudged_max) {
    return vandq_u32(vcgeq_f32(x, nudged_min), vcleq_f32(x, nudged_max));
}

static void forward_mul__neon(const float *x, float *out, size_t n, const fq_grid *grid) {
    const grid4 q = broadcast(grid);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
        const float32x4_t c = vld1q_f32(x + i + 8), d = vld1q_f32(x + i + 12);
        vst1q_f32(out + i, forward_mul4(a, &q));
        vst1q_f32(out + i + 4, forward_mul4(b, &q));
        vst1q_f32(out + i + 8, forward_mul4(c, &q));
        vst1q_f32(out + i + 12, forward_mul4(d, &q));
    }
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, forward_mul4(vld1q_f32(x + i), &q));
    for (; i < n; ++i)
        out[i] = fq_element_mul(x[i], grid->nudged_min, grid->nudged_max, grid->inv_scale,
                                grid->quant_zero, grid->scale);
}

static void forward_div__neon(const float *x, float *out, size_t n, const fq_grid *grid) {
    const grid4 q = broadcast(grid);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
        const float32x4_t c = vld1q_f32(x + i + 8), d = vld1q_f32(x + i + 12);
        vst1q_f32(out + i, forward_div4(a, &q));
        vst1q_f32(out + i + 4, forward_div4(b, &q));
        vst1q_f32(out + i + 8, forward_div4(c, &q));
        vst1q_f32(out + i + 12, forward_div4(d, &q));
    }
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, forward_div4(vld1q_f32(x + i), &q));
    for (; i < n; ++i) out[i] = fq_element_div(x[i], grid);
}

static inline float32x4_t mask4(const float *g, const float *x, float32x4_t nmin, float32x4_t nmax) {
    return vmulq_f32(vld1q_f32(g), as_one(between4(vld1q_f32(x), nmin, nmax)));
}

static void mask__neon(const float *g, const float *x, float *dx, size_t n, const fq_grid *grid) {
    const float32x4_t nmin = vdupq_n_f32(grid->nudged_min), nmax = vdupq_n_f32(grid->nudged_max);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const float32x4_t a = mask4(g + i, x + i, nmin, nmax);
        const float32x4_t b = mask4(g + i + 4, x + i + 4, nmin, nmax);
        const float32x4_t c = mask4(g + i + 8, x + i + 8, nmin, nmax);
        const float32x4_t d = mask4(g + i + 12, x + i + 12, nmin, nmax);
        vst1q_f32(dx + i, a);
        vst1q_f32(dx + i + 4, b);
        vst1q_f32(dx + i + 8, c);
        vst1q_f32(dx + i + 12, d);
    }
    for (; i + 4 <= n; i += 4) vst1q_f32(dx + i, mask4(g + i, x + i, nmin, nmax));
    for (; i < n; ++i) dx[i] = g[i] * fq_between(x[i], grid->nudged_min, grid->nudged_max);
}

/* Adds the 4 products of one vector into 4 float64 lanes (two 2-lane accumulators), in lane order. */
static inline void add_to_lanes(float32x4_t products, float64x2_t *lo, float64x2_t *hi) {
    *lo = vaddq_f64(*lo, vcvt_f64_f32(vget_low_f32(products)));
    *hi = vaddq_f64(*hi, vcvt_high_f64_f32(products));
}

/* All lanes set when x is inside the grid and g is finite: such a lane's sum products are +-0,
   which leave a float64 sum that started at +0 unchanged, so they may be skipped. */
static inline uint32x4_t quiet4(float32x4_t g, uint32x4_t inside) {
    return vandq_u32(inside, vcaltq_f32(g, vdupq_n_f32(INFINITY))); /* |g| < inf: false for NaN */
}

/* dx for 4 elements and, unless the vector is quiet, the products entering both sums. */
static inline void grad4(const float *g, const float *x, float *dx, float32x4_t nmin, float32x4_t nmax,
                         float64x2_t *min_lo, float64x2_t *min_hi, float64x2_t *max_lo,
                         float64x2_t *max_hi) {
    const float32x4_t gv = vld1q_f32(g), xv = vld1q_f32(x);
    const uint32x4_t inside = between4(xv, nmin, nmax);
    vst1q_f32(dx, vmulq_f32(gv, as_one(inside)));
    if (vminvq_u32(quiet4(gv, inside)) == 0xffffffffu) return;
    add_to_lanes(vmulq_f32(gv, as_one(vcltq_f32(xv, nmin))), min_lo, min_hi);
    add_to_lanes(vmulq_f32(gv, as_one(vcgtq_f32(xv, nmax))), max_lo, max_hi);
}

/* 16 elements (one row of the 16 sum lanes) at once: one test decides whether the whole group is
   quiet, which is the common case inside the grid. */
static inline void grad16(const float *g, const float *x, float *dx, float32x4_t nmin,
                          float32x4_t nmax, float64x2_t mn[8], float64x2_t mx[8]) {
    float32x4_t gv[4], xv[4];
    uint32x4_t inside[4];
    for (int k = 0; k < 4; ++k) {
        gv[k] = vld1q_f32(g + 4 * k);
        xv[k] = vld1q_f32(x + 4 * k);
        inside[k] = between4(xv[k], nmin, nmax);
        vst1q_f32(dx + 4 * k, vmulq_f32(gv[k], as_one(inside[k])));
    }
    const uint32x4_t quiet = vandq_u32(vandq_u32(quiet4(gv[0], inside[0]), quiet4(gv[1], inside[1])),
                                       vandq_u32(quiet4(gv[2], inside[2]), quiet4(gv[3], inside[3])));
    if (vminvq_u32(quiet) == 0xffffffffu) return;
    for (int k = 0; k < 4; ++k) {
        add_to_lanes(vmulq_f32(gv[k], as_one(vcltq_f32(xv[k], nmin))), &mn[2 * k], &mn[2 * k + 1]);
        add_to_lanes(vmulq_f32(gv[k], as_one(vcgtq_f32(xv[k], nmax))), &mx[2 * k], &mx[2 * k + 1]);
    }
}

static void mask_sums__neon(const float *g, const float *x, float *dx, size_t n, const fq_grid *grid,
                            double lanes_min[FQ_SUM_LANES], double lanes_max[FQ_SUM_LANES]) {
    const float32x4_t nmin = vdupq_n_f32(grid->nudged_min), nmax = vdupq_n_f32(grid->nudged_max);
    float64x2_t mn[8], mx[8]; /* accumulator j holds sum lanes 2j and 2j + 1 */
    for (int j = 0; j < 8; ++j) {
        mn[j] = vld1q_f64(lanes_min + 2 * j);
        mx[j] = vld1q_f64(lanes_max + 2 * j);
    }
    size_t i = 0;
    for (; i + FQ_SUM_LANES <= n; i += FQ_SUM_LANES) grad16(g + i, x + i, dx + i, nmin, nmax, mn, mx);
    for (int j = 0; j < 8; ++j) {
        vst1q_f64(lanes_min + 2 * j, mn[j]);
        vst1q_f64(lanes_max + 2 * j, mx[j]);
    }
    for (; i < n; ++i) {
        float to_min, to_max;
        dx[i] = fq_element_grad(g[i], x[i], grid->nudged_min, grid->nudged_max, &to_min, &to_max);
        lanes_min[i % FQ_SUM_LANES] += (double)to_min;
        lanes_max[i % FQ_SUM_LANES] += (double)to_max;
    }
}

/* Per-channel kernels walk FQ_ROW_BLOCK rows at a time, positions inside: each row stays a
   sequential stream, and a position's grid (and sums) are loaded once per block of rows. A
   position's sum is still added row by row, whatever the vector width, so the bits match scalar. */
#define FQ_ROW_BLOCK 8

static void channel_forward__neon(const float *x, float *out, size_t rows, const fq_grid_table *t,
                                  size_t p0, size_t p1) {
    for (size_t r0 = 0; r0 < rows; r0 += FQ_ROW_BLOCK) {
        const size_t r1 = rows - r0 < FQ_ROW_BLOCK ? rows : r0 + FQ_ROW_BLOCK;
        size_t p = p0;
        for (; p + 16 <= p1; p += 16) {
            const grid4 q0 = load_grid(t, p), q1 = load_grid(t, p + 4);
            const grid4 q2 = load_grid(t, p + 8), q3 = load_grid(t, p + 12);
            for (size_t r = r0; r < r1; ++r) {
                const size_t i = r * t->period + p;
                vst1q_f32(out + i, forward_mul4(vld1q_f32(x + i), &q0));
                vst1q_f32(out + i + 4, forward_mul4(vld1q_f32(x + i + 4), &q1));
                vst1q_f32(out + i + 8, forward_mul4(vld1q_f32(x + i + 8), &q2));
                vst1q_f32(out + i + 12, forward_mul4(vld1q_f32(x + i + 12), &q3));
            }
        }
        for (; p + 4 <= p1; p += 4) {
            const grid4 q = load_grid(t, p);
            for (size_t r = r0; r < r1; ++r) {
                const size_t i = r * t->period + p;
                vst1q_f32(out + i, forward_mul4(vld1q_f32(x + i), &q));
            }
        }
        for (; p < p1; ++p)
            for (size_t r = r0; r < r1; ++r) {
                const size_t i = r * t->period + p;
                out[i] = fq_element_mul(x[i], t->nudged_min[p], t->nudged_max[p], t->inv_scale[p],
                                        t->quant_zero[p], t->scale[p]);
            }
    }
}

static void channel_mask_sums__neon(const float *g, const float *x, float *dx, size_t rows,
                                    const fq_grid_table *t, size_t p0, size_t p1, double *acc_min,
                                    double *acc_max) {
    for (size_t r0 = 0; r0 < rows; r0 += FQ_ROW_BLOCK) {
        const size_t r1 = rows - r0 < FQ_ROW_BLOCK ? rows : r0 + FQ_ROW_BLOCK;
        size_t p = p0;
        for (; p + 16 <= p1; p += 16) {
            float32x4_t nmin[4], nmax[4];
            float64x2_t mn[8], mx[8]; /* accumulator j holds positions p + 2j, p + 2j + 1 */
            for (int k = 0; k < 4; ++k) {
                nmin[k] = vld1q_f32(t->nudged_min + p + 4 * k);
                nmax[k] = vld1q_f32(t->nudged_max + p + 4 * k);
            }
            for (int j = 0; j < 8; ++j) {
                mn[j] = vld1q_f64(acc_min + p + 2 * j);
                mx[j] = vld1q_f64(acc_max + p + 2 * j);
            }
            for (size_t r = r0; r < r1; ++r) {
                const size_t i = r * t->period + p;
                for (int k = 0; k < 4; ++k)
                    grad4(g + i + 4 * k, x + i + 4 * k, dx + i + 4 * k, nmin[k], nmax[k],
                          &mn[2 * k], &mn[2 * k + 1], &mx[2 * k], &mx[2 * k + 1]);
            }
            for (int j = 0; j < 8; ++j) {
                vst1q_f64(acc_min + p + 2 * j, mn[j]);
                vst1q_f64(acc_max + p + 2 * j, mx[j]);
            }
        }
        for (; p + 4 <= p1; p += 4) {
            const float32x4_t nmin = vld1q_f32(t->nudged_min + p);
            const float32x4_t nmax = vld1q_f32(t->nudged_max + p);
            float64x2_t min_lo = vld1q_f64(acc_min + p), min_hi = vld1q_f64(acc_min + p + 2);
            float64x2_t max_lo = vld1q_f64(acc_max + p), max_hi = vld1q_f64(acc_max + p + 2);
            for (size_t r = r0; r < r1; ++r) {
                const size_t i = r * t->period + p;
                grad4(g + i, x + i, dx + i, nmin, nmax, &min_lo, &min_hi, &max_lo, &max_hi);
            }
            vst1q_f64(acc_min + p, min_lo);
            vst1q_f64(acc_min + p + 2, min_hi);
            vst1q_f64(acc_max + p, max_lo);
            vst1q_f64(acc_max + p + 2, max_hi);
        }
        for (; p < p1; ++p)
            for (size_t r = r0; r < r1; ++r) {
                const size_t i = r * t->period + p;
                float to_min, to_max;
                dx[i] = fq_element_grad(g[i], x[i], t->nudged_min[p], t->nudged_max[p], &to_min,
                                        &to_max);
                acc_min[p] += (double)to_min;
                acc_max[p] += (double)to_max;
            }
    }
}

const fq_fake_quant_kernels fq_fake_quant__neon = {
    forward_mul__neon,     forward_div__neon,     mask__neon,
    mask_sums__neon,       channel_forward__neon, channel_mask_sums__neon,
};
