/* One element of each fake-quant formula: the scalar kernels, and the tails of the SIMD kernels. */
#ifndef FQ_ELEMENT_H
#define FQ_ELEMENT_H

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

/* 1.0f inside [nmin, nmax] (inclusive), 0.0f outside or for NaN. */
static inline float fq_between(float x, float nudged_min, float nudged_max) {
    return (x >= nudged_min && x <= nudged_max) ? 1.0f : 0.0f;
}

/* Gradient of one element: dx, and the products that enter the min and max sums (NaN or inf g
   enters both sums even where masked, since TF multiplies by the 0/1 mask). */
static inline float fq_element_grad(float g, float x, float nudged_min, float nudged_max,
                                    float *to_min, float *to_max) {
    *to_min = g * (x < nudged_min ? 1.0f : 0.0f);
    *to_max = g * (x > nudged_max ? 1.0f : 0.0f);
    return g * fq_between(x, nudged_min, nudged_max);
}

#endif
