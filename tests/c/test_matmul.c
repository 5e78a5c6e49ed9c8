/* C test harness, the matrix product (fq_f32_matmul): scalar on one thread against a reference
   written from fqcore.h's rule (fused multiply-adds in order of depth, from 0.0f, subnormals
   flushed), bit for bit; every ISA and thread count against scalar, bit for bit, over shapes
   around the register blocks and the depth chunk, with a and b in every layout the kernels take
   apart (rows contiguous, transposed, strided; b read in place or packed); NaN and infinities;
   guards around c; statuses; a product continued (fq_f32_matmul_continue) over a depth split
   equals the whole one. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fqcore.h"
#include "harness.h"

static float flushed(float v) { return fpclassify(v) == FP_SUBNORMAL ? copysignf(0.0f, v) : v; }

/* The rule of fqcore.h, one element at a time (fmaf rounds once; FTZ and DAZ by hand). */
static float reference(const float *a, ptrdiff_t ar, ptrdiff_t ac, const float *b, ptrdiff_t br,
                       ptrdiff_t bc, size_t i, size_t j, size_t depth) {
    float acc = 0.0f;
    for (size_t p = 0; p < depth; ++p)
        acc = flushed(fmaf(flushed(a[(ptrdiff_t)i * ar + (ptrdiff_t)p * ac]),
                           flushed(b[(ptrdiff_t)p * br + (ptrdiff_t)j * bc]), acc));
    return acc;
}

/* An operand of rows x columns in one of four layouts: 0 row-major, 1 column-major (a transposed
   array), 2 row-major with every other row and column skipped, 3 column-major, skipping. Sets the
   strides; the storage is returned (free it), `*origin` is element [0, 0]. */
static float *operand(size_t rows, size_t columns, int layout, int specials, const float **origin,
                      ptrdiff_t *row_stride, ptrdiff_t *column_stride) {
    const size_t skip = layout >= 2 ? 2 : 1;
    const size_t stored = rows * columns * skip * skip + 1;
    float *data = xmalloc_aligned(stored * sizeof(float));
    for (size_t k = 0; k < stored; ++k) data[k] = unif(-2.0f, 2.0f);
    if (layout % 2 == 0) {
        *row_stride = (ptrdiff_t)(columns * skip * skip);
        *column_stride = (ptrdiff_t)skip;
    } else {
        *row_stride = (ptrdiff_t)skip;
        *column_stride = (ptrdiff_t)(rows * skip * skip);
    }
    if (specials && rows * columns > 0) {
        static const uint32_t bits[] = {0x7fc00000u, 0x7f800000u, 0xff800000u, 0x80000000u,
                                        0x00000001u, 0x807fffffu, 0x7f7fffffu};
        for (size_t k = 0; k < 3; ++k) {
            const size_t r = below(rows), c = below(columns);
            data[(ptrdiff_t)r * *row_stride + (ptrdiff_t)c * *column_stride] =
                from_bits(bits[below(sizeof bits / sizeof bits[0])]);
        }
    }
    *origin = data;
    return data;
}

/* c = a b in two calls: fq_f32_matmul over the first `cut` of the depth, then, unless that was all
   of it, fq_f32_matmul_continue over the rest. */
static fq_status product_in_two(const float *a, ptrdiff_t ar, ptrdiff_t ac, const float *b,
                                ptrdiff_t br, ptrdiff_t bc, size_t m, size_t depth, size_t n,
                                size_t cut, float *c) {
    const fq_status status = fq_f32_matmul(a, ar, ac, b, br, bc, m, cut, n, c);
    if (status != FQ_OK || cut == depth) return status;
    return fq_f32_matmul_continue(a + (ptrdiff_t)cut * ac, ar, ac, b + (ptrdiff_t)cut * br, br, bc,
                                  m, depth - cut, n, c);
}

/* One product in every ISA and thread count: scalar on one thread equals the reference sums, the
   rest equal scalar, each computing it as product_in_two with the depth split at `cut` (at depth:
   one call); c's guards hold. */
static void check_product(size_t m, size_t depth, size_t n, size_t cut, int a_layout, int b_layout,
                          int specials) {
    const float *a, *b;
    ptrdiff_t ar, ac, br, bc;
    float *a_data = operand(m, depth, a_layout, specials, &a, &ar, &ac);
    float *b_data = operand(depth, n, b_layout, specials, &b, &br, &bc);
    float *expected = guarded_output(m * n), *c = guarded_output(m * n);
    set_isa_threads(FQ_ISA_SCALAR, 1);
    fq_status status = fq_f32_matmul(a, ar, ac, b, br, bc, m, depth, n, expected);
    expect(status == FQ_OK, "status %d at [%zu, %zu] x [%zu, %zu]", (int)status, m, depth, depth, n);
    int ok = 1;
    for (size_t i = 0; i < m && ok; ++i)
        for (size_t j = 0; j < n && ok; ++j)
            ok = same(expected[i * n + j], reference(a, ar, ac, b, br, bc, i, j, depth));
    expect(ok, "scalar != reference at [%zu, %zu] x [%zu, %zu], layouts %d %d", m, depth, depth, n,
           a_layout, b_layout);
    for (int k = 0; k < n_isas; ++k)
        for (int threads = 1; threads <= THREADS_MAX; ++threads) {
            set_isa_threads(isas[k], threads);
            for (size_t e = 0; e < m * n; ++e) c[e] = from_bits(GUARD_BITS);
            status = product_in_two(a, ar, ac, b, br, bc, m, depth, n, cut, c);
            int equal = status == FQ_OK;
            for (size_t e = 0; e < m * n && equal; ++e) equal = same(c[e], expected[e]);
            expect(equal && output_intact(c, m * n),
                   "%s, %d threads: [%zu, %zu] x [%zu, %zu] cut at %zu, layouts %d %d",
                   fq_isa_name(isas[k]), threads, m, depth, depth, n, cut, a_layout, b_layout);
        }
    set_isa_threads(FQ_ISA_SCALAR, 1);
    free(a_data);
    free(b_data);
    free_output(expected);
    free_output(c);
}

/* Rows around the register blocks (4, 6, 8, 12, 24 rows), columns around the column blocks (4,
   8, 16, 32: a multiple of the wide block takes it, any other count the narrow one), depths
   around the chunk (256). */
static void test_shapes(void) {
    static const size_t rows[] = {1, 5, 6, 7, 12, 13, 23, 24, 25};
    static const size_t columns[] = {1, 3, 15, 16, 17, 32, 33, 64};
    static const size_t depths[] = {1, 2, 9, 255, 256, 257};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; ++r)
        for (size_t q = 0; q < sizeof columns / sizeof columns[0]; ++q)
            for (size_t d = 0; d < sizeof depths / sizeof depths[0]; ++d)
                check_product(rows[r], depths[d], columns[q], depths[d], (int)below(4), (int)below(4), 0);
}

static void test_layouts(void) {
    for (int a_layout = 0; a_layout < 4; ++a_layout)
        for (int b_layout = 0; b_layout < 4; ++b_layout) {
            check_product(29, 300, 64, 300, a_layout, b_layout, 0);
            check_product(13, 40, 20, 40, a_layout, b_layout, 0);
        }
}

static void test_specials(void) {
    for (int k = 0; k < 8; ++k) check_product(14, 33, 35, 33, (int)below(4), (int)below(4), 1);
}

static void test_large(void) {
    check_product(300, 600, 96, 600, 0, 0, 0);
    check_product(96, 1100, 32, 1100, 1, 0, 0);
}

/* Cuts at both ends, inside and across the depth chunk (256), around the register blocks; and a
   continued product of no depth leaves c as it is. */
static void test_continued(void) {
    static const size_t shapes[][4] = {{13, 40, 33, 17}, {25, 300, 64, 256}, {25, 300, 64, 255},
                                       {7, 9, 5, 0}, {7, 9, 5, 1}, {24, 600, 32, 300}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        check_product(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], (int)below(4),
                      (int)below(4), 0);
    float c[4] = {1, 2, 3, 4};
    for (int k = 0; k < n_isas; ++k) {
        set_isa_threads(isas[k], 1);
        expect(fq_f32_matmul_continue(NULL, 0, 0, NULL, 0, 0, 2, 0, 2, c) == FQ_OK && c[0] == 1.0f &&
                   c[3] == 4.0f, "%s: depth 0 changed c", fq_isa_name(isas[k]));
    }
    set_isa_threads(FQ_ISA_SCALAR, 1);
}

/* The two roundings a separate multiply and add would make, against the one of a fused
   multiply-add: (1 + 2^-12)^2 + (-1 - 2^-11) is 2^-24 exactly, which a rounded square loses. */
static void test_fused(void) {
    const float a[2] = {1.0f + 0x1p-12f, -1.0f - 0x1p-11f}, b[2] = {1.0f + 0x1p-12f, 1.0f};
    float c = -1.0f;
    for (int k = 0; k < n_isas; ++k) {
        set_isa_threads(isas[k], 1);
        expect(fq_f32_matmul(a + 1, 1, -1, b + 1, -1, 1, 1, 2, 1, &c) == FQ_OK, "status");
        expect(c == 0x1p-24f, "%s: fused sum %a, expected 0x1p-24", fq_isa_name(isas[k]), (double)c);
    }
    set_isa_threads(FQ_ISA_SCALAR, 1);
}

static void test_statuses(void) {
    float a[4] = {1, 2, 3, 4}, c[4] = {9, 9, 9, 9};
    expect(fq_f32_matmul(a, 2, 1, a, 2, 1, 2, 2, 2, NULL) == FQ_ERR_NULL_POINTER, "NULL c");
    expect(fq_f32_matmul(NULL, 2, 1, a, 2, 1, 2, 2, 2, c) == FQ_ERR_NULL_POINTER, "NULL a");
    expect(fq_f32_matmul(a, 2, 1, NULL, 2, 1, 2, 2, 2, c) == FQ_ERR_NULL_POINTER, "NULL b");
    expect(fq_f32_matmul(a, 1, 1, a, 1, 1, SIZE_MAX / 2, 4, 4, c) == FQ_ERR_BAD_SHAPE, "overflow");
    expect(fq_f32_matmul(NULL, 0, 0, NULL, 0, 0, 0, 5, 0, NULL) == FQ_OK, "empty");
    expect(fq_f32_matmul(NULL, 0, 0, NULL, 0, 0, 2, 0, 2, c) == FQ_OK && c[0] == 0.0f &&
               !signbit(c[0]) && c[3] == 0.0f, "depth 0: zeros");
}

int main(void) {
    static const harness_section sections[] = {
        {"statuses", test_statuses},
        {"fused multiply-add, every ISA", test_fused},
        {"shapes around the blocks, every ISA, threads 1..4", test_shapes},
        {"layouts of a and b", test_layouts},
        {"NaN, infinities, subnormals", test_specials},
        {"large", test_large},
        {"a product continued over a depth split, every ISA, threads 1..4", test_continued},
    };
    return harness_main("C kernel harness (matrix product)", sections, sizeof sections / sizeof sections[0]);
}
