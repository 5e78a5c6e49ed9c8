/* AVX-512 matrix product: 16 lanes a vector; blocks of 12 rows x 2 vectors and 24 rows x 1
   vector (24 of the 32 ZMM registers hold c); the kernel is in matmul_simd.h. */
#if !defined(__AVX512F__)
#error "matmul_avx512.c must be built with -mavx512f (setup.py adds it)"
#endif
#include <immintrin.h>

#define MM_LANES 16
#define MM_WIDE_ROWS 12
#define MM_WIDE_VECS 2
#define MM_NARROW_ROWS 24
#define MM_TABLE fq_matmul__avx512

typedef __m512 mm_v;

static inline mm_v mm_zero(void) { return _mm512_setzero_ps(); }
static inline mm_v mm_set1(float x) { return _mm512_set1_ps(x); }
static inline mm_v mm_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void mm_store(float *p, mm_v v) { _mm512_storeu_ps(p, v); }
static inline mm_v mm_fma(mm_v a, mm_v b, mm_v c) { return _mm512_fmadd_ps(a, b, c); }

#include "matmul_simd.h"
