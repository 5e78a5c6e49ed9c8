/* The matrix product kernel, written once over a small vector vocabulary that each ISA file
   defines before including this one (matmul_avx512.c, ..., matmul_scalar.c):
     mm_v                      a vector of MM_LANES floats
     mm_zero() mm_set1(x) mm_load(p) mm_store(p, v)
     mm_fma(a, b, c)           a * b + c rounded once (the scalar file's is fmaf)
     MM_WIDE_ROWS, MM_WIDE_VECS  the register block for wide products: rows x vectors of c
     MM_NARROW_ROWS            the rows of the block one vector wide, for products whose
                               columns are not a multiple of the wide block's
     MM_TABLE                  the name of the kernel table
   A register block of c starts at 0.0f and takes its depth's terms in order, one fused
   multiply-add each, then is stored once: every ISA rounds each element's sum the same way. */
#include <string.h>

#include "matmul_kernels.h"

#define MM_INLINE static inline __attribute__((always_inline))
#define MM_UNROLL _Pragma("GCC unroll 32")

#define MM_ROWS MM_WIDE_ROWS
#define MM_VECS MM_WIDE_VECS
#define MM_NAME(name) name##_wide
#include "matmul_block.h"
#undef MM_ROWS
#undef MM_VECS
#undef MM_NAME

#define MM_ROWS MM_NARROW_ROWS
#define MM_VECS 1
#define MM_NAME(name) name##_narrow
#include "matmul_block.h"
#undef MM_ROWS
#undef MM_VECS
#undef MM_NAME

const fq_matmul_kernels MM_TABLE = {
    {mm_rows_wide, MM_WIDE_ROWS, MM_WIDE_VECS * MM_LANES},
    {mm_rows_narrow, MM_NARROW_ROWS, MM_LANES},
};
