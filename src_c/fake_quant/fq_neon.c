/* NEON (AArch64) fake-quant kernels (4 lanes); bit-identical to fq_scalar.c, including the sum order. */
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
    return (grid4){vld1q_f32(fq_grid_param(t, p, FQ_GRID_NUDGED_MIN)),
                   vld1q_f32(fq_grid_param(t, p, FQ_GRID_NUDGED_MAX)),
                   vld1q_f32(fq_grid_param(t, p, FQ_GRID_SCALE)),
                   vld1q_f32(fq_grid_param(t, p, FQ_GRID_INV_SCALE)),
                   vld1q_f32(fq_grid_param(t, p, FQ_GRID_QUANT_ZERO))};
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

/* Both forward kernels; `divide` is a constant in each caller, which gets a loop of its own.
   Four vectors per step give the dependent chains of each room to overlap. */
static inline float32x4_t forward4(float32x4_t v, const grid4 *q, int divide) {
    return divide ? forward_div4(v, q) : forward_mul4(v, q);
}

static inline void forward_loop(const float *x, float *out, size_t n, const fq_grid *grid, int divide) {
    const grid4 q = broadcast(grid);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
        const float32x4_t c = vld1q_f32(x + i + 8), d = vld1q_f32(x + i + 12);
        vst1q_f32(out + i, forward4(a, &q, divide));
        vst1q_f32(out + i + 4, forward4(b, &q, divide));
        vst1q_f32(out + i + 8, forward4(c, &q, divide));
        vst1q_f32(out + i + 12, forward4(d, &q, divide));
    }
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, forward4(vld1q_f32(x + i), &q, divide));
    for (; i < n; ++i)
        out[i] = divide ? fq_element_div(x[i], grid)
                        : fq_element_mul(x[i], grid->nudged_min, grid->nudged_max, grid->inv_scale,
                                         grid->quant_zero, grid->scale);
}

static void forward_mul__neon(const float *x, float *out, size_t n, const fq_grid *grid) {
    forward_loop(x, out, n, grid, 0);
}

static void forward_div__neon(const float *x, float *out, size_t n, const fq_grid *grid) {
    forward_loop(x, out, n, grid, 1);
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
    for (; i < n; ++i) dx[i] = fq_element_mask(g[i], x[i], grid->nudged_min, grid->nudged_max);
}

/* A 4-lane float32 run of each sum, added as a whole into float64 lanes (fq_kernels.h). */
static inline void flush_run(float32x4_t run_min, float32x4_t run_max, double *lanes_min,
                             double *lanes_max) {
    vst1q_f64(lanes_min, vaddq_f64(vld1q_f64(lanes_min), vcvt_f64_f32(vget_low_f32(run_min))));
    vst1q_f64(lanes_min + 2, vaddq_f64(vld1q_f64(lanes_min + 2), vcvt_high_f64_f32(run_min)));
    vst1q_f64(lanes_max, vaddq_f64(vld1q_f64(lanes_max), vcvt_f64_f32(vget_low_f32(run_max))));
    vst1q_f64(lanes_max + 2, vaddq_f64(vld1q_f64(lanes_max + 2), vcvt_high_f64_f32(run_max)));
}

/* Set in every lane where x is inside the grid and g is finite: there both sum products are +-0. */
static inline uint32x4_t quiet4(float32x4_t g, uint32x4_t inside) {
    return vandq_u32(inside, vcaltq_f32(g, vdupq_n_f32(INFINITY))); /* |g| < inf: false for NaN */
}

/* dx of `vectors` (1 to 4) consecutive vectors, and unless all of them are quiet, their exact
   products g * (x < nmin), g * (x > nmax) added into the float32 runs run_min[k], run_max[k].
   Skipping quiet vectors keeps the bits: their products are +-0, which leave a non-zero run as it
   is and can change only the sign of a zero run, invisible once added into a float64 lane (which
   starts at +0 and so is never -0). Everything comes from registers loaded once, so dx may be the
   same array as g or x (a second pass over memory would read dx). Returns 1 when products were
   added. */
static inline int step(const float *g, const float *x, float *dx, int vectors,
                       const float32x4_t *nmin, const float32x4_t *nmax, float32x4_t *run_min,
                       float32x4_t *run_max) {
    float32x4_t gv[4], xv[4];
    uint32x4_t quiet = vdupq_n_u32(0xffffffffu);
    for (int k = 0; k < vectors; ++k) {
        gv[k] = vld1q_f32(g + 4 * k);
        xv[k] = vld1q_f32(x + 4 * k);
        const uint32x4_t inside = between4(xv[k], nmin[k], nmax[k]);
        vst1q_f32(dx + 4 * k, vmulq_f32(gv[k], as_one(inside)));
        quiet = vandq_u32(quiet, quiet4(gv[k], inside));
    }
    if (vminvq_u32(quiet) == 0xffffffffu) return 0;
    for (int k = 0; k < vectors; ++k) {
        run_min[k] = vaddq_f32(run_min[k], vmulq_f32(gv[k], as_one(vcltq_f32(xv[k], nmin[k]))));
        run_max[k] = vaddq_f32(run_max[k], vmulq_f32(gv[k], as_one(vcgtq_f32(xv[k], nmax[k]))));
    }
    return 1;
}

static inline void zero_runs(float32x4_t *run_min, float32x4_t *run_max) {
    for (int k = 0; k < 4; ++k) run_min[k] = run_max[k] = vdupq_n_f32(0.0f);
}

static void mask_sums__neon(const float *g, const float *x, float *dx, size_t n, const fq_grid *grid,
                            double lanes_min[FQ_SUM_LANES], double lanes_max[FQ_SUM_LANES]) {
    float32x4_t nmin[4], nmax[4], run_min[4], run_max[4];
    for (int k = 0; k < 4; ++k) {
        nmin[k] = vdupq_n_f32(grid->nudged_min);
        nmax[k] = vdupq_n_f32(grid->nudged_max);
    }
    size_t i = 0;
    /* Whole runs: FQ_SUM_RUN rows of the 16 lanes, each row four vectors (lanes 4k..4k+3). */
    for (; i + FQ_SUM_RUN_ELEMENTS <= n; i += FQ_SUM_RUN_ELEMENTS) {
        zero_runs(run_min, run_max);
        int touched = 0;
        for (size_t r = 0; r < FQ_SUM_RUN; ++r) {
            const size_t at = i + r * FQ_SUM_LANES;
            touched |= step(g + at, x + at, dx + at, 4, nmin, nmax, run_min, run_max);
        }
        if (touched)
            for (int k = 0; k < 4; ++k)
                flush_run(run_min[k], run_max[k], lanes_min + 4 * k, lanes_max + 4 * k);
    }
    if (i == n) return;
    /* The last, partial run: whole rows, whole vectors (lane-aligned, as i % 16 == 0 here), then
       single elements, all into one run. */
    zero_runs(run_min, run_max);
    for (; i + FQ_SUM_LANES <= n; i += FQ_SUM_LANES)
        step(g + i, x + i, dx + i, 4, nmin, nmax, run_min, run_max);
    for (int k = 0; i + 4 <= n; i += 4, ++k)
        step(g + i, x + i, dx + i, 1, nmin, nmax, &run_min[k], &run_max[k]);
    float tail_min[FQ_SUM_LANES], tail_max[FQ_SUM_LANES];
    for (int k = 0; k < 4; ++k) {
        vst1q_f32(tail_min + 4 * k, run_min[k]);
        vst1q_f32(tail_max + 4 * k, run_max[k]);
    }
    for (; i < n; ++i) {
        float to_min, to_max;
        dx[i] = fq_element_grad(g[i], x[i], grid->nudged_min, grid->nudged_max, &to_min, &to_max);
        tail_min[i % FQ_SUM_LANES] += to_min;
        tail_max[i % FQ_SUM_LANES] += to_max;
    }
    fq_flush_runs(tail_min, tail_max, lanes_min, lanes_max);
}

/* Per-channel kernels walk rows in order, positions inside: sequential streams for the
   prefetchers, and the grids of a period stay in cache. The grid table is copied to a local so
   that stores to out/dx cannot make the compiler reload its pointers. */
static void channel_forward__neon(const float *x, float *out, size_t rows, const fq_grid_table *table,
                                  size_t p0, size_t p1) {
    const fq_grid_table grids = *table, *t = &grids;
    for (size_t r = 0; r < rows; ++r) {
        const float *xr = x + r * t->period;
        float *outr = out + r * t->period;
        size_t p = p0;
        for (; p + 16 <= p1; p += 16) {
            const float32x4_t a = vld1q_f32(xr + p), b = vld1q_f32(xr + p + 4);
            const float32x4_t c = vld1q_f32(xr + p + 8), d = vld1q_f32(xr + p + 12);
            const grid4 q0 = load_grid(t, p), q1 = load_grid(t, p + 4);
            const grid4 q2 = load_grid(t, p + 8), q3 = load_grid(t, p + 12);
            vst1q_f32(outr + p, forward_mul4(a, &q0));
            vst1q_f32(outr + p + 4, forward_mul4(b, &q1));
            vst1q_f32(outr + p + 8, forward_mul4(c, &q2));
            vst1q_f32(outr + p + 12, forward_mul4(d, &q3));
        }
        for (; p + 4 <= p1; p += 4) {
            const grid4 q = load_grid(t, p);
            vst1q_f32(outr + p, forward_mul4(vld1q_f32(xr + p), &q));
        }
        fq_channel_forward_row(xr, outr, t, p, p1);
    }
}

/* Adds 4 products into the float64 accumulators of 4 positions. */
static inline void add_to_positions(float32x4_t products, double *acc) {
    vst1q_f64(acc, vaddq_f64(vld1q_f64(acc), vcvt_f64_f32(vget_low_f32(products))));
    vst1q_f64(acc + 2, vaddq_f64(vld1q_f64(acc + 2), vcvt_high_f64_f32(products)));
}

/* dx of positions [p, p + 4 * vectors) of one row, and unless they are all quiet, their products
   added in float64 into the positions' accumulators (skipping +-0 products keeps the bits, as the
   accumulators start at +0 and so are never -0). g and x are loaded once: dx may alias them. */
static inline void channel_step(const float *g, const float *x, float *dx, const fq_grid_table *t,
                                size_t p, int vectors, double *acc_min, double *acc_max) {
    float32x4_t gv[4], xv[4], nmin[4], nmax[4];
    uint32x4_t quiet = vdupq_n_u32(0xffffffffu);
    for (int k = 0; k < vectors; ++k) {
        const size_t at = p + 4 * (size_t)k;
        gv[k] = vld1q_f32(g + at);
        xv[k] = vld1q_f32(x + at);
        nmin[k] = vld1q_f32(fq_grid_param(t, at, FQ_GRID_NUDGED_MIN));
        nmax[k] = vld1q_f32(fq_grid_param(t, at, FQ_GRID_NUDGED_MAX));
        const uint32x4_t inside = between4(xv[k], nmin[k], nmax[k]);
        vst1q_f32(dx + at, vmulq_f32(gv[k], as_one(inside)));
        quiet = vandq_u32(quiet, quiet4(gv[k], inside));
    }
    if (vminvq_u32(quiet) == 0xffffffffu) return;
    for (int k = 0; k < vectors; ++k) {
        const size_t at = p + 4 * (size_t)k;
        add_to_positions(vmulq_f32(gv[k], as_one(vcltq_f32(xv[k], nmin[k]))), acc_min + at);
        add_to_positions(vmulq_f32(gv[k], as_one(vcgtq_f32(xv[k], nmax[k]))), acc_max + at);
    }
}

static void channel_mask_sums__neon(const float *g, const float *x, float *dx, size_t rows,
                                    const fq_grid_table *table, size_t p0, size_t p1, double *acc_min,
                                    double *acc_max) {
    const fq_grid_table grids = *table, *t = &grids;
    for (size_t r = 0; r < rows; ++r) {
        const size_t base = r * t->period;
        const float *gr = g + base, *xr = x + base;
        float *dxr = dx + base;
        size_t p = p0;
        for (; p + 16 <= p1; p += 16) channel_step(gr, xr, dxr, t, p, 4, acc_min, acc_max);
        for (; p + 4 <= p1; p += 4) channel_step(gr, xr, dxr, t, p, 1, acc_min, acc_max);
        fq_channel_row(gr, xr, dxr, t, p, p1, acc_min, acc_max);
    }
}

/* fq_nudge of 4 ranges, operation for operation (vrndaq_f32 rounds half away from zero, as roundf;
   the selection of the zero point as selects, in fq_nudge's order). */
static inline grid4 nudge4(float32x4_t min, float32x4_t max, float quant_min, float quant_max) {
    const float32x4_t qmin = vdupq_n_f32(quant_min), qmax = vdupq_n_f32(quant_max);
    const float32x4_t levels = vdupq_n_f32(quant_max - quant_min), range = vsubq_f32(max, min);
    const float32x4_t scale = vdivq_f32(range, levels), inv_scale = vdivq_f32(levels, range);
    const float32x4_t from_min = vsubq_f32(qmin, vdivq_f32(min, scale));
    float32x4_t zero_point = vrndaq_f32(from_min);
    zero_point = vbslq_f32(vcgtq_f32(from_min, qmax), qmax, zero_point);
    zero_point = vbslq_f32(vcltq_f32(from_min, qmin), qmin, zero_point);
    zero_point = vbslq_f32(vceqq_f32(from_min, from_min), zero_point, vdupq_n_f32(0.0f));
    grid4 q;
    q.nudged_min = vmulq_f32(vsubq_f32(qmin, zero_point), scale);
    q.nudged_max = vmulq_f32(vsubq_f32(qmax, zero_point), scale);
    q.scale = scale;
    q.inv_scale = inv_scale;
    q.quant_zero = vrndmq_f32(vsubq_f32(vdupq_n_f32(0.5f), vmulq_f32(q.nudged_min, inv_scale)));
    return q;
}

static void nudge_channels__neon(const float *min, const float *max, size_t channels, int num_bits,
                                 int narrow_range, float *grid) {
    const float quant_min = fq_quant_min(narrow_range), quant_max = fq_quant_max(num_bits);
    size_t c = 0;
    for (; c + 4 <= channels; c += 4) {
        const grid4 q = nudge4(vld1q_f32(min + c), vld1q_f32(max + c), quant_min, quant_max);
        vst1q_f32(grid + fq_grid_offset(c, FQ_GRID_NUDGED_MIN), q.nudged_min);
        vst1q_f32(grid + fq_grid_offset(c, FQ_GRID_NUDGED_MAX), q.nudged_max);
        vst1q_f32(grid + fq_grid_offset(c, FQ_GRID_SCALE), q.scale);
        vst1q_f32(grid + fq_grid_offset(c, FQ_GRID_INV_SCALE), q.inv_scale);
        vst1q_f32(grid + fq_grid_offset(c, FQ_GRID_QUANT_ZERO), q.quant_zero);
    }
    fq_nudge_positions(min, max, c, channels, num_bits, narrow_range, grid);
}

const fq_fake_quant_kernels fq_fake_quant__neon = {
    forward_mul__neon,     forward_div__neon,       mask__neon,
    mask_sums__neon,       channel_forward__neon,   channel_mask_sums__neon,
    nudge_channels__neon,   NULL, NULL,
};
