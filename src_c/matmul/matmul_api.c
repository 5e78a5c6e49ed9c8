/* The public matrix product: validation, the choice of block shape, b read in place or packed
   into column blocks, row blocks split over threads. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../include/fqcore.h"
#include "../common/fpenv.h"
#include "../common/runtime.h"
#include "matmul_kernels.h"

/* fq_runtime_threads_for counts work in elements of a memory-bound pass; this many fused
   multiply-adds count as one. AMD Zen 5, AVX-512: [1024, 64] x [64, 64] (4.2M of them) then takes
   a second thread, 22 against 40 us on one; [256, 64] x [64, 64] stays on one (10 us); with a
   busy process beside it, 1.01-1.05x one thread's time (tools/kernels_under_load.py). */
#define FQ_MATMUL_FMAS_PER_ELEMENT ((size_t)16)

static const fq_matmul_kernels *active_kernels(void) {
    switch (fq_get_isa()) {
#ifdef FQ_BUILD_AVX2
    case FQ_ISA_AVX2: return &fq_matmul__avx2;
#endif
#ifdef FQ_BUILD_AVX512
    case FQ_ISA_AVX512: return &fq_matmul__avx512;
#endif
#ifdef FQ_BUILD_NEON
    case FQ_ISA_NEON: return &fq_matmul__neon;
#endif
    default: return &fq_matmul__scalar;
    }
}

/* b [depth, n] into blocks of `width` columns (fq_matmul_job), zeros past column n. */
static void pack(const float *b, ptrdiff_t row_stride, ptrdiff_t column_stride, size_t depth,
                 size_t n, size_t width, float *panel) {
    const size_t blocks = n / width + (n % width != 0);
    for (size_t block = 0; block < blocks; ++block)
        for (size_t p = 0; p < depth; ++p)
            for (size_t q = 0; q < width; ++q) {
                const size_t j = block * width + q;
                *panel++ = j < n ? b[(ptrdiff_t)p * row_stride + (ptrdiff_t)j * column_stride]
                                 : 0.0f;
            }
}

static fq_status product(const float *a, ptrdiff_t a_row_stride, ptrdiff_t a_column_stride,
                         const float *b, ptrdiff_t b_row_stride, ptrdiff_t b_column_stride,
                         size_t m, size_t depth, size_t n, float *c, int continues) {
    size_t elements, t;
    if (__builtin_mul_overflow(m, n, &elements) || __builtin_mul_overflow(m, depth, &t) ||
        __builtin_mul_overflow(depth, n, &t))
        return FQ_ERR_BAD_SHAPE;
    if ((elements > 0 && c == NULL) || (m * depth > 0 && a == NULL) || (depth * n > 0 && b == NULL))
        return FQ_ERR_NULL_POINTER;
    if (elements == 0) return FQ_OK;
    if (depth == 0) { /* empty sums: zeros, or c's values going on */
        if (!continues) memset(c, 0, elements * sizeof(float));
        return FQ_OK;
    }
    const fq_matmul_kernels *kernels = active_kernels();
    const fq_matmul_shape *shape = n % kernels->wide.block_columns == 0 ? &kernels->wide
                                                                        : &kernels->narrow;
    const size_t width = shape->block_columns;
    const size_t blocks = n / width + (n % width != 0);
    fq_matmul_job job = {a, a_row_stride, a_column_stride, b, (size_t)b_row_stride, width, c, m,
                         depth, n, continues};
    float *panel = NULL;
    const int direct = b_column_stride == 1 && n % width == 0 && b_row_stride >= 0;
    if (!direct) {
        size_t panel_floats;
        if (__builtin_mul_overflow(blocks * width, depth, &panel_floats) ||
            panel_floats > SIZE_MAX / sizeof(float))
            return FQ_ERR_BAD_SHAPE;
        if ((panel = malloc(panel_floats * sizeof(float))) == NULL) return FQ_ERR_NO_MEMORY;
        pack(b, b_row_stride, b_column_stride, depth, n, width, panel);
        job.panel = panel;
        job.panel_row = width;
        job.panel_block = depth * width;
    }
    const size_t row_blocks = (m + shape->block_rows - 1) / shape->block_rows;
    size_t fmas;
    if (__builtin_mul_overflow(elements, depth, &fmas)) fmas = SIZE_MAX;
    const fq_fpenv saved = fq_fpenv_enter();
    fq_parallel_for(fq_runtime_threads_for(fmas / FQ_MATMUL_FMAS_PER_ELEMENT, row_blocks),
                    row_blocks, shape->rows, &job);
    fq_fpenv_leave(saved);
    free(panel);
    return FQ_OK;
}

fq_status fq_f32_matmul(const float *a, ptrdiff_t a_row_stride, ptrdiff_t a_column_stride,
                        const float *b, ptrdiff_t b_row_stride, ptrdiff_t b_column_stride,
                        size_t m, size_t depth, size_t n, float *c) {
    return product(a, a_row_stride, a_column_stride, b, b_row_stride, b_column_stride, m, depth, n,
                   c, 0);
}

fq_status fq_f32_matmul_continue(const float *a, ptrdiff_t a_row_stride,
                                 ptrdiff_t a_column_stride, const float *b,
                                 ptrdiff_t b_row_stride, ptrdiff_t b_column_stride, size_t m,
                                 size_t depth, size_t n, float *c) {
    return product(a, a_row_stride, a_column_stride, b, b_row_stride, b_column_stride, m, depth, n,
                   c, 1);
}
