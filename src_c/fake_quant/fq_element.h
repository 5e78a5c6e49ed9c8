/* One element of each fake-quant formula: the scalar kernels, and the tails of the SIMD kernels. */
#ifndef FQ_ELEMENT_H
#define FQ_ELEMENT_H

#include <float.h>
#include <math.h>

#include "fq_kernels.h"

/* TF's clamp: cwiseMin(nmax) then cwiseMax(nmin), written so a NaN x stays NaN (x86 minps/maxps
   order; the SIMD kernels use the same operand order). */
static inline float fq_clamp(float x, float nudged_min, float nudged_max) {
    float c = nudged_max < x ? nudged_max : x;
    return c < nudged_min ? nudged_min : c;
}

static inline float fq_element_mul(float x, float nudged_min, float nudged_max, float inv_scale,
                                   float quant_zero, float scale) {
    const float shifted = fq_clamp(x, nudged_min, nudged_max) - nudged_min;
    return floorf(shifted * inv_scale - quant_zero + 0.5f) * scale;
}

static inline float fq_element_div(float x, const fq_grid *grid) {
    const float shifted = fq_clamp(x, grid->nudged_min, grid->nudged_max) - grid->nudged_min;
    return floorf(shifted / grid->scale - grid->quant_zero + 0.5f) * grid->scale;
}

/* g as a multiply under denormals-are-zero sees it. Compilers fold g * 1.0f to g, which would keep a
   denormal g that the hardware multiply (TF's, and every SIMD path's) flushes to zero. */
static inline float fq_daz(float g) { return fabsf(g) < FLT_MIN ? copysignf(0.0f, g) : g; }

/* 1.0f inside [nmin, nmax] (inclusive), 0.0f outside or for NaN. */
static inline float fq_between(float x, float nudged_min, float nudged_max) {
    return (x >= nudged_min && x <= nudged_max) ? 1.0f : 0.0f;
}

/* Gradient of one element, without the sums (the Args gradient). */
static inline float fq_element_mask(float g, float x, float nudged_min, float nudged_max) {
    return fq_daz(g) * fq_between(x, nudged_min, nudged_max);
}

/* Gradient of one element: dx, and the products that enter the min and max sums (NaN or inf g
   enters both sums even where masked, since TF multiplies by the 0/1 mask). */
static inline float fq_element_grad(float g, float x, float nudged_min, float nudged_max,
                                    float *to_min, float *to_max) {
    *to_min = fq_daz(g) * (x < nudged_min ? 1.0f : 0.0f);
    *to_max = fq_daz(g) * (x > nudged_max ? 1.0f : 0.0f);
    return fq_element_mask(g, x, nudged_min, nudged_max);
}

/* Adds each lane's float32 run into its float64 accumulator and restarts the runs at +0. */
static inline void fq_flush_runs(float run_min[FQ_SUM_LANES], float run_max[FQ_SUM_LANES],
                                 double lanes_min[FQ_SUM_LANES], double lanes_max[FQ_SUM_LANES]) {
    for (int j = 0; j < FQ_SUM_LANES; ++j) {
        lanes_min[j] += (double)run_min[j];
        lanes_max[j] += (double)run_max[j];
        run_min[j] = run_max[j] = 0.0f;
    }
}

/* Positions [p0, p1) of one row of a per-channel gradient: dx, and the products added in float64
   into the positions' accumulators. */
static inline void fq_channel_row(const float *g, const float *x, float *dx, const fq_grid_table *t,
                                  size_t p0, size_t p1, double *acc_min, double *acc_max) {
    for (size_t p = p0; p < p1; ++p) {
        float to_min, to_max;
        dx[p] = fq_element_grad(g[p], x[p], *fq_grid_param(t, p, FQ_GRID_NUDGED_MIN),
                                *fq_grid_param(t, p, FQ_GRID_NUDGED_MAX), &to_min, &to_max);
        acc_min[p] += (double)to_min;
        acc_max[p] += (double)to_max;
    }
}

/* fq_nudge of channels [c0, c1), each written to its own position of a grid table's storage. */
static inline void fq_nudge_positions(const float *min, const float *max, size_t c0, size_t c1,
                                      int num_bits, int narrow_range, float *grid) {
    for (size_t c = c0; c < c1; ++c) {
        fq_grid q;
        fq_nudge(min[c], max[c], num_bits, narrow_range, &q);
        grid[fq_grid_offset(c, FQ_GRID_NUDGED_MIN)] = q.nudged_min;
        grid[fq_grid_offset(c, FQ_GRID_NUDGED_MAX)] = q.nudged_max;
        grid[fq_grid_offset(c, FQ_GRID_SCALE)] = q.scale;
        grid[fq_grid_offset(c, FQ_GRID_INV_SCALE)] = q.inv_scale;
        grid[fq_grid_offset(c, FQ_GRID_QUANT_ZERO)] = q.quant_zero;
    }
}

/* Whether the per-channel forward at position p may clamp after scaling (see fq_grid_table): then
   a = (x - nmin) * inv_scale is clamped to [0, span] instead of x to [nmin, nmax], span = qmax -
   qmin. Every step from a to the output is monotone, and TF's clamp makes a run from 0 (x = nmin)
   to a_max = (nmax - nmin) * inv_scale: the two agree on every x exactly when the grid index of
   a_max, floorf((a_max - quant_zero) + 0.5f) as the forward computes it, equals that of span (it
   differs only for degenerate ranges). An all-zero range allows it: its outputs are overwritten
   with zeros. */
static inline int fq_allows_scaled_clamp(const float *grid, size_t p, float min, float max, float span) {
    if (fq_range_is_zero(min, max)) return 1;
    const float nmin = grid[fq_grid_offset(p, FQ_GRID_NUDGED_MIN)];
    const float nmax = grid[fq_grid_offset(p, FQ_GRID_NUDGED_MAX)];
    const float inv = grid[fq_grid_offset(p, FQ_GRID_INV_SCALE)];
    const float zero = grid[fq_grid_offset(p, FQ_GRID_QUANT_ZERO)];
    return isfinite(nmin) && isfinite(inv) && inv > 0.0f &&
           floorf(((nmax - nmin) * inv - zero) + 0.5f) == floorf((span - zero) + 0.5f);
}

/* The per-channel forward of x at position p of a period. */
static inline float fq_channel_element(float x, const fq_grid_table *t, size_t p) {
    return fq_element_mul(x, *fq_grid_param(t, p, FQ_GRID_NUDGED_MIN),
                          *fq_grid_param(t, p, FQ_GRID_NUDGED_MAX),
                          *fq_grid_param(t, p, FQ_GRID_INV_SCALE),
                          *fq_grid_param(t, p, FQ_GRID_QUANT_ZERO), *fq_grid_param(t, p, FQ_GRID_SCALE));
}

/* Positions [p0, p1) of one row of a per-channel forward. */
static inline void fq_channel_forward_row(const float *x, float *out, const fq_grid_table *t,
                                          size_t p0, size_t p1) {
    for (size_t p = p0; p < p1; ++p) out[p] = fq_channel_element(x[p], t, p);
}

#endif
