/* AVX2 range-observer kernels: 8 lanes a vector; the kernels themselves are in range_simd.h. */
#if !defined(__AVX2__)
#error "range_avx2.c must be built with -mavx2 (setup.py adds it)"
#endif
#include <immintrin.h>
#include <stdint.h>

#define RG_ISA avx2
#define RG_W 8
/* Four vectors: twelve accumulators and the loads fill the 16 YMM registers. */
#define RG_FLAT_VECTORS 4

typedef __m256i rg_v;

static inline rg_v rg_load(const float *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline rg_v rg_set1(uint32_t v) { return _mm256_set1_epi32((int)v); }
static inline rg_v rg_load_u(const uint32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void rg_store_u(uint32_t *p, rg_v v) { _mm256_storeu_si256((__m256i *)p, v); }
static inline rg_v rg_max_u(rg_v a, rg_v b) { return _mm256_max_epu32(a, b); }
static inline rg_v rg_min_u(rg_v a, rg_v b) { return _mm256_min_epu32(a, b); }
static inline rg_v rg_max_s(rg_v a, rg_v b) { return _mm256_max_epi32(a, b); }
#define rg_prefetch_l1(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define rg_prefetch_l2(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)

#include "range_simd.h"
