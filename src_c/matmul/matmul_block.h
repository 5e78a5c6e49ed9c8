/* One register block shape of the matrix product (MM_ROWS rows x MM_VECS vectors), included
   by matmul_simd.h once per shape with MM_NAME giving its functions their names. */
#define MM_WIDTH (MM_VECS * MM_LANES)

/* Rows [i0, i0 + rows) (rows <= MM_ROWS) of c, columns of block `block`, depth [p0, p1): row r
   of a reads a_rows[r][p * step]. The first depth chunk starts each sum at 0.0f (or, for a job
   that continues, at c's value), later ones take it back from c, where the chunk before stored it
   (the same float: the sum goes on in order). */
MM_INLINE void MM_NAME(mm_block)(const fq_matmul_job *job, const float *const a_rows[MM_ROWS],
                        ptrdiff_t step, size_t i0, size_t rows, size_t block, size_t p0,
                        size_t p1) {
    const size_t j0 = block * MM_WIDTH;
    const size_t columns = job->n - j0 < MM_WIDTH ? job->n - j0 : MM_WIDTH;
    const int from_c = p0 > 0 || job->continues;
    float row[MM_WIDTH];
    mm_v acc[MM_ROWS][MM_VECS];
    MM_UNROLL for (size_t r = 0; r < MM_ROWS; ++r) {
        const float *sums = job->c + (i0 + (r < rows ? r : 0)) * job->n + j0;
        if (from_c && columns < MM_WIDTH) {
            memset(row, 0, sizeof row);
            memcpy(row, sums, columns * sizeof(float));
            sums = row;
        }
        MM_UNROLL for (size_t v = 0; v < MM_VECS; ++v)
            acc[r][v] = from_c ? mm_load(sums + v * MM_LANES) : mm_zero();
    }
    const float *b = job->panel + block * job->panel_block + p0 * job->panel_row;
    for (size_t p = p0; p < p1; ++p, b += job->panel_row) {
        mm_v bv[MM_VECS];
        MM_UNROLL for (size_t v = 0; v < MM_VECS; ++v) bv[v] = mm_load(b + v * MM_LANES);
        MM_UNROLL for (size_t r = 0; r < MM_ROWS; ++r) {
            const mm_v av = mm_set1(a_rows[r][(ptrdiff_t)(p - p0) * step]);
            MM_UNROLL for (size_t v = 0; v < MM_VECS; ++v) acc[r][v] = mm_fma(av, bv[v], acc[r][v]);
        }
    }
    MM_UNROLL for (size_t r = 0; r < MM_ROWS; ++r) {
        if (r >= rows) break;
        float *out = job->c + (i0 + r) * job->n + j0;
        if (columns == MM_WIDTH) {
            MM_UNROLL for (size_t v = 0; v < MM_VECS; ++v) mm_store(out + v * MM_LANES, acc[r][v]);
        } else {
            MM_UNROLL for (size_t v = 0; v < MM_VECS; ++v) mm_store(row + v * MM_LANES, acc[r][v]);
            memcpy(out, row, columns * sizeof(float));
        }
    }
}

/* Row blocks [first, end), one depth chunk at a time: the chunk's part of the panel stays in
   the cache while the row blocks pass over it. A row block reads a where one of a's strides is
   1 (a row-major a; a transposed one, as the filter gradient's columns, whose rows' elements of
   one p are adjacent); any other a is copied per row block and chunk into
   FQ_MATMUL_DEPTH_CHUNK x MM_ROWS floats first. */
static void MM_NAME(mm_rows)(void *context, size_t first, size_t end) {
    const fq_matmul_job *job = context;
    const size_t blocks = (job->n + MM_WIDTH - 1) / MM_WIDTH;
    const int packed = job->a_column != 1 && job->a_row != 1;
    float a_panel[FQ_MATMUL_DEPTH_CHUNK * MM_ROWS];
    for (size_t p0 = 0; p0 < job->depth; p0 += FQ_MATMUL_DEPTH_CHUNK) {
        const size_t p1 = job->depth - p0 < FQ_MATMUL_DEPTH_CHUNK ? job->depth
                                                                  : p0 + FQ_MATMUL_DEPTH_CHUNK;
        for (size_t rb = first; rb < end; ++rb) {
            const size_t i0 = rb * MM_ROWS;
            const size_t rows = job->m - i0 < MM_ROWS ? job->m - i0 : MM_ROWS;
            const float *a_rows[MM_ROWS];
            ptrdiff_t step;
            if (packed) {
                for (size_t p = p0; p < p1; ++p)
                    MM_UNROLL for (size_t r = 0; r < MM_ROWS; ++r)
                        a_panel[(p - p0) * MM_ROWS + r] =
                            job->a[(ptrdiff_t)(i0 + (r < rows ? r : rows - 1)) * job->a_row +
                                   (ptrdiff_t)p * job->a_column];
                MM_UNROLL for (size_t r = 0; r < MM_ROWS; ++r) a_rows[r] = a_panel + r;
                step = MM_ROWS;
            } else {
                MM_UNROLL for (size_t r = 0; r < MM_ROWS; ++r)
                    a_rows[r] = job->a + (ptrdiff_t)(i0 + (r < rows ? r : rows - 1)) * job->a_row +
                                (ptrdiff_t)p0 * job->a_column;
                step = job->a_column;
            }
            for (size_t block = 0; block < blocks; ++block)
                MM_NAME(mm_block)(job, a_rows, step, i0, rows, block, p0, p1);
        }
    }
}

#undef MM_WIDTH
