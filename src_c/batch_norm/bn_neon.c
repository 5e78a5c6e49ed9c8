/* NEON (AArch64) batch-norm kernels: 4 floats a vector, float16 through FCVTL / FCVTN, bfloat16 by
   integer rounding. The kernels themselves are in bn_simd.h. */
#if !defined(__aarch64__)
#error "bn_neon.c is for AArch64 only (Advanced SIMD with float64 lanes)"
#endif
#include <arm_neon.h>
#include <stdint.h>

/* No contraction: arm_neon.h writes vmulq/vaddq as plain C operators, so this file relies on
   -ffp-contract=off (setup.py, tests/c/Makefile) as bn_scalar.c does.

   FPCR.FZ is set while the kernels run (fpenv.c). The half-precision converts follow the
   architecture's FPUnpackCV / FPRoundCV rules, which ignore FZ16 and apply FZ to the float32 side
   only: FCVTL turns a half subnormal into its exact normal float32; FCVTN flushes a float32 denormal
   input to a signed zero and still produces half subnormals (rounded to nearest even), as
   bn_convert.h's fq_f16_to_f32 / fq_f32_to_f16 do. NaNs keep sign and top payload bits and come
   back quiet in both directions (FPCR.DN is left clear). */

#define BN_ISA neon
#define BN_W 4
#define BN_STRIP_VECTORS 4
#define BN_PASS_REG_VECTORS 4

typedef float32x4_t bn_vf;
typedef float64x2_t bn_vd;

static inline bn_vf bn_load_f32(const float *p) { return vld1q_f32(p); }
static inline bn_vf bn_load_f16(const uint16_t *p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}
static inline bn_vf bn_load_bf16(const uint16_t *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
static inline void bn_store_f32(float *p, bn_vf v) { vst1q_f32(p, v); }
static inline void bn_store_f16(uint16_t *p, bn_vf v) {
    vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v)));
}
/* fq_f32_to_bf16: (bits + 0x7fff + odd) >> 16, a NaN instead keeps its top half with the quiet bit
   set. Integer arithmetic, so FZ does not touch a denormal (it rounds to a bfloat16 denormal or 0). */
static inline void bn_store_bf16(uint16_t *p, bn_vf v) {
    const uint32x4_t bits = vreinterpretq_u32_f32(v);
    const uint32x4_t magnitude = vandq_u32(bits, vdupq_n_u32(0x7fffffffu));
    const uint32x4_t nan = vcgtq_u32(magnitude, vdupq_n_u32(0x7f800000u));
    const uint32x4_t top = vshrq_n_u32(bits, 16);
    const uint32x4_t bias = vaddq_u32(vandq_u32(top, vdupq_n_u32(1u)), vdupq_n_u32(0x7fffu));
    const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(bits, bias), 16);
    const uint32x4_t quiet = vorrq_u32(top, vdupq_n_u32(0x40u));
    vst1_u16(p, vmovn_u32(vbslq_u32(nan, quiet, rounded)));
}
static inline bn_vf bn_set1_f(float v) { return vdupq_n_f32(v); }
static inline bn_vf bn_add_f(bn_vf a, bn_vf b) { return vaddq_f32(a, b); }
static inline bn_vf bn_sub_f(bn_vf a, bn_vf b) { return vsubq_f32(a, b); }
static inline bn_vf bn_mul_f(bn_vf a, bn_vf b) { return vmulq_f32(a, b); }
static inline bn_vf bn_fma_f(bn_vf a, bn_vf b, bn_vf c) { return vfmaq_f32(c, a, b); }
static inline bn_vd bn_low_d(bn_vf v) { return vcvt_f64_f32(vget_low_f32(v)); }
static inline bn_vd bn_high_d(bn_vf v) { return vcvt_high_f64_f32(v); }
static inline bn_vd bn_load_d(const double *p) { return vld1q_f64(p); }
static inline void bn_store_d(double *p, bn_vd v) { vst1q_f64(p, v); }
static inline bn_vd bn_add_d(bn_vd a, bn_vd b) { return vaddq_f64(a, b); }
/* A plain store: AArch64's non-temporal STNP is only a hint, and an asm statement for it would keep
   the compiler from scheduling the loop's other loads and stores around it. */
#define BN_STREAM_ALIGN 16
static inline void bn_stream_f32(float *p, bn_vf v) { vst1q_f32(p, v); }
static inline void bn_stream_fence(void) {}

#include "bn_simd.h"
