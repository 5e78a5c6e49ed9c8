/* NEON (AArch64) fake-quant kernels: 4 floats a vector, compares as all-ones lanes. The kernels
   themselves are in fq_simd.h. */
#if !defined(__aarch64__)
#error "fq_neon.c is for AArch64 only (Advanced SIMD with float64 lanes, vrndmq_f32, vdivq_f32)"
#endif
#include <arm_neon.h>
#include <math.h>
#include <stddef.h>

#define FQ_ISA neon
#define FQ_W 4
/* Sixteen of the 32 Q registers: periods up to 32 positions keep their grids there. */
#define FQ_GRID_REG_VECTORS 8
/* Four vectors a gradient group, in 16 of the 32 registers. */
#define FQ_GRAD_GROUP 4

/* No FMA anywhere: arm_neon.h writes vmulq_f32 / vsubq_f32 as plain C operators, so this file
   relies on -ffp-contract=off (setup.py, tests/c/Makefile) to keep each multiply and add rounded
   on its own, as fq_scalar.c does. */

typedef float32x4_t fqv;
typedef uint32x4_t fqv_mask;
typedef float64x2_t fqv_d;

static inline fqv fqv_load(const float *p) { return vld1q_f32(p); }
static inline void fqv_store(float *p, fqv v) { vst1q_f32(p, v); }
/* NEON has no masked loads or stores: the lanes go through a vector's worth of stack. */
static inline fqv fqv_load_lanes(const float *p, size_t lo, size_t hi) {
    float lanes[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (size_t j = lo; j < hi; ++j) lanes[j] = p[j];
    return vld1q_f32(lanes);
}
static inline void fqv_store_lanes(float *p, size_t lo, size_t hi, fqv v) {
    float lanes[4];
    vst1q_f32(lanes, v);
    for (size_t j = lo; j < hi; ++j) p[j] = lanes[j];
}
static inline fqv fqv_set1(float f) { return vdupq_n_f32(f); }
static inline fqv fqv_zero(void) { return vdupq_n_f32(0.0f); }
static inline fqv fqv_add(fqv a, fqv b) { return vaddq_f32(a, b); }
static inline fqv fqv_sub(fqv a, fqv b) { return vsubq_f32(a, b); }
static inline fqv fqv_mul(fqv a, fqv b) { return vmulq_f32(a, b); }
static inline fqv fqv_div(fqv a, fqv b) { return vdivq_f32(a, b); }
/* One kind of pipe for all of them: the plain operations. */
static inline fqv fqv_sub_on_fma(fqv a, fqv b) { return vsubq_f32(a, b); }
static inline fqv fqv_add_on_fma(fqv a, fqv b) { return vaddq_f32(a, b); }
static inline fqv fqv_floor(fqv v) { return vrndmq_f32(v); }
static inline fqv fqv_round_nonneg(fqv v) { return vrndaq_f32(v); }
static inline fqv fqv_abs(fqv v) { return vabsq_f32(v); }
/* Compare and select: vminq / vmaxq would propagate a NaN bound and order -0 below +0, which
   fq_clamp does not. */
static inline fqv fqv_clamp(fqv x, fqv lo, fqv hi) {
    const fqv c = vbslq_f32(vcltq_f32(hi, x), hi, x);
    return vbslq_f32(vcltq_f32(c, lo), lo, c);
}
static inline fqv_mask fqv_ge(fqv a, fqv b) { return vcgeq_f32(a, b); }
static inline fqv_mask fqv_le(fqv a, fqv b) { return vcleq_f32(a, b); }
static inline fqv_mask fqv_lt(fqv a, fqv b) { return vcltq_f32(a, b); }
static inline fqv_mask fqv_gt(fqv a, fqv b) { return vcgtq_f32(a, b); }
static inline fqv_mask fqv_eq(fqv a, fqv b) { return vceqq_f32(a, b); }
static inline fqv_mask fqv_is_nan(fqv v) { return vmvnq_u32(vceqq_f32(v, v)); }
static inline fqv_mask fqv_and(fqv_mask a, fqv_mask b) { return vandq_u32(a, b); }
static inline fqv_mask fqv_or(fqv_mask a, fqv_mask b) { return vorrq_u32(a, b); }
static inline fqv fqv_or_bits(fqv a, fqv b) { return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b))); }
static inline fqv_mask fqv_andnot(fqv_mask a, fqv_mask b) { return vbicq_u32(b, a); }
static inline int fqv_all(fqv_mask m) { return vminvq_u32(m) == 0xffffffffu; }
static inline int fqv_any(fqv_mask m) { return vmaxvq_u32(m) != 0; }
static inline fqv fqv_as_one(fqv_mask m) {
    return vreinterpretq_f32_u32(vandq_u32(m, vreinterpretq_u32_f32(vdupq_n_f32(1.0f))));
}
static inline fqv fqv_select(fqv_mask m, fqv a, fqv b) { return vbslq_f32(m, a, b); }
/* |v| < inf is false for NaN and for both infinities. */
static inline fqv_mask fqv_not_finite(fqv v) { return vmvnq_u32(vcaltq_f32(v, vdupq_n_f32(INFINITY))); }
static inline fqv_d fqv_low_d(fqv v) { return vcvt_f64_f32(vget_low_f32(v)); }
static inline fqv_d fqv_high_d(fqv v) { return vcvt_high_f64_f32(v); }
static inline fqv_d fqv_load_d(const double *p) { return vld1q_f64(p); }
static inline void fqv_store_d(double *p, fqv_d v) { vst1q_f64(p, v); }
static inline fqv_d fqv_add_d(fqv_d a, fqv_d b) { return vaddq_f64(a, b); }

#include "fq_simd.h"
