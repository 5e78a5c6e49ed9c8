/* AVX-512 range-observer kernels: 16 lanes a vector; the kernels themselves are in range_simd.h. */
#if !defined(__AVX512F__)
#error "range_avx512.c must be built with -mavx512f (setup.py adds it)"
#endif
#include <immintrin.h>
#include <stdint.h>

#define RG_ISA avx512
#define RG_W 16
/* Eight vectors: 24 accumulators of the 32 ZMM registers; the flat walk then covers 128 channels. */
#define RG_FLAT_VECTORS 8

typedef __m512i rg_v;

static inline rg_v rg_load(const float *p) { return _mm512_loadu_si512((const void *)p); }
static inline rg_v rg_set1(uint32_t v) { return _mm512_set1_epi32((int)v); }
static inline rg_v rg_load_u(const uint32_t *p) { return _mm512_loadu_si512((const void *)p); }
static inline void rg_store_u(uint32_t *p, rg_v v) { _mm512_storeu_si512((void *)p, v); }
static inline rg_v rg_max_u(rg_v a, rg_v b) { return _mm512_max_epu32(a, b); }
static inline rg_v rg_min_u(rg_v a, rg_v b) { return _mm512_min_epu32(a, b); }
static inline rg_v rg_max_s(rg_v a, rg_v b) { return _mm512_max_epi32(a, b); }
#define rg_prefetch_l1(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define rg_prefetch_l2(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)

#include "range_simd.h"
