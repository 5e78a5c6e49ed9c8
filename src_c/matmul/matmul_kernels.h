/* Matrix product kernel interface shared by the per-ISA files and the public entry point. */
#ifndef FQ_MATMUL_KERNELS_H
#define FQ_MATMUL_KERNELS_H

#include <stddef.h>

#include "../include/fqcore.h"
#include "../common/parallel.h"

/* One call. The kernels read b as `panel`: block k of `block_columns` columns has row p at
   panel + k * panel_block + p * panel_row, each row's block_columns floats contiguous. That is
   b itself when its rows are contiguous and n a multiple of block_columns; else the entry point
   packs b so (panel_row = block_columns, panel_block = depth * block_columns), zeros past
   column n. Row blocks are the kernels' work items. */
typedef struct {
    const float *a;
    ptrdiff_t a_row, a_column; /* a[i, p] is at a + i * a_row + p * a_column */
    const float *panel;
    size_t panel_row, panel_block;
    float *c;                  /* [m, n], contiguous */
    size_t m, depth, n;
    int continues;             /* the sums start from c's values (fq_f32_matmul_continue) */
} fq_matmul_job;

/* The kernels walk the depth in chunks of this many: a chunk of one column block of the panel
   is 32 KiB at 32 columns, and one row block's a (12 or 24 rows on AVX-512) 12 or 24 KiB, so
   both stay in the L1 and L2 caches while the chunk is summed. */
#define FQ_MATMUL_DEPTH_CHUNK ((size_t)256)

/* A kernel over a range of row blocks of `block_rows` rows (the last one partial), and the
   column block width its panel is packed for. Each c element is the sum over p of
   a[i, p] * b[p, j] as fused multiply-adds in order of p, from 0.0f (from c's value where the job
   continues): the same bits on every ISA, either block shape and any split of the row blocks. */
typedef struct {
    fq_range_fn rows;          /* (fq_matmul_job *, first row block, end row block) */
    size_t block_rows;
    size_t block_columns;
} fq_matmul_shape;

/* One ISA's kernels: `wide` blocks of several vectors for products whose columns are a multiple
   of them, `narrow` blocks of one vector (and more rows) for the others, which the wide blocks
   would pad with more zero columns. */
typedef struct {
    fq_matmul_shape wide, narrow;
} fq_matmul_kernels;

extern const fq_matmul_kernels fq_matmul__scalar;
#ifdef FQ_BUILD_AVX2
extern const fq_matmul_kernels fq_matmul__avx2;
#endif
#ifdef FQ_BUILD_AVX512
extern const fq_matmul_kernels fq_matmul__avx512;
#endif
#ifdef FQ_BUILD_NEON
extern const fq_matmul_kernels fq_matmul__neon;
#endif

#endif
