/* NEON (AArch64) range-observer kernels: 4 lanes a vector; the kernels are in range_simd.h. */
#if !defined(__aarch64__)
#error "range_neon.c is for AArch64 only"
#endif
#include <arm_neon.h>
#include <stdint.h>

#define RG_ISA neon
#define RG_W 4
/* Eight vectors: 24 accumulators of the 32 Q registers. */
#define RG_FLAT_VECTORS 8

typedef uint32x4_t rg_v;

static inline rg_v rg_load(const float *p) { return vreinterpretq_u32_f32(vld1q_f32(p)); }
static inline rg_v rg_set1(uint32_t v) { return vdupq_n_u32(v); }
static inline rg_v rg_load_u(const uint32_t *p) { return vld1q_u32(p); }
static inline void rg_store_u(uint32_t *p, rg_v v) { vst1q_u32(p, v); }
static inline rg_v rg_max_u(rg_v a, rg_v b) { return vmaxq_u32(a, b); }
static inline rg_v rg_min_u(rg_v a, rg_v b) { return vminq_u32(a, b); }
static inline rg_v rg_max_s(rg_v a, rg_v b) {
    return vreinterpretq_u32_s32(vmaxq_s32(vreinterpretq_s32_u32(a), vreinterpretq_s32_u32(b)));
}
#define rg_prefetch_l1(p) __builtin_prefetch((p), 0, 3)
#define rg_prefetch_l2(p) __builtin_prefetch((p), 0, 2)

#include "range_simd.h"
