/* AVX2 matrix product: 8 lanes a vector; blocks of 6 rows x 2 vectors and 12 rows x 1 vector
   (12 of the 16 YMM registers hold c); the kernel is in matmul_simd.h. */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "matmul_avx2.c must be built with -mavx2 -mfma (setup.py adds them)"
#endif
#include <immintrin.h>

#define MM_LANES 8
#define MM_WIDE_ROWS 6
#define MM_WIDE_VECS 2
#define MM_NARROW_ROWS 12
#define MM_TABLE fq_matmul__avx2

typedef __m256 mm_v;

static inline mm_v mm_zero(void) { return _mm256_setzero_ps(); }
static inline mm_v mm_set1(float x) { return _mm256_set1_ps(x); }
static inline mm_v mm_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void mm_store(float *p, mm_v v) { _mm256_storeu_ps(p, v); }
static inline mm_v mm_fma(mm_v a, mm_v b, mm_v c) { return _mm256_fmadd_ps(a, b, c); }

#include "matmul_simd.h"
