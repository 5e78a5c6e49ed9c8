/* NEON (AArch64) matrix product: 4 lanes a vector; blocks of 6 rows x 4 vectors and 24 rows x 1
   vector (24 of the 32 Q registers hold c); the kernel is in matmul_simd.h. Not timed on AArch64
   hardware (the harness runs qemu). */
#if !defined(__aarch64__)
#error "matmul_neon.c is for AArch64 only"
#endif
#include <arm_neon.h>

#define MM_LANES 4
#define MM_WIDE_ROWS 6
#define MM_WIDE_VECS 4
#define MM_NARROW_ROWS 24
#define MM_TABLE fq_matmul__neon

typedef float32x4_t mm_v;

static inline mm_v mm_zero(void) { return vdupq_n_f32(0.0f); }
static inline mm_v mm_set1(float x) { return vdupq_n_f32(x); }
static inline mm_v mm_load(const float *p) { return vld1q_f32(p); }
static inline void mm_store(float *p, mm_v v) { vst1q_f32(p, v); }
static inline mm_v mm_fma(mm_v a, mm_v b, mm_v c) { return vfmaq_f32(c, a, b); }

#include "matmul_simd.h"
