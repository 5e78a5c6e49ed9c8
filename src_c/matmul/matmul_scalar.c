/* The matrix product at the build's baseline, one float a "vector" and fmaf for the fused
   multiply-add: the reference every other ISA equals. */
#include <math.h>

#define MM_LANES 1
#define MM_WIDE_ROWS 4
#define MM_WIDE_VECS 4
#define MM_NARROW_ROWS 8
#define MM_TABLE fq_matmul__scalar

typedef float mm_v;

static inline mm_v mm_zero(void) { return 0.0f; }
static inline mm_v mm_set1(float x) { return x; }
static inline mm_v mm_load(const float *p) { return *p; }
static inline void mm_store(float *p, mm_v v) { *p = v; }
static inline mm_v mm_fma(mm_v a, mm_v b, mm_v c) { return fmaf(a, b, c); }

#include "matmul_simd.h"
