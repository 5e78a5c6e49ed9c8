/* The batch-norm kernels once, for every SIMD ISA. An ISA file defines its vector vocabulary, then
   includes this file, which defines that ISA's kernel table `FQ_BN_TABLE`:

     BN_W                  floats per vector (even); BN_STRIP_VECTORS: vectors of sums kept in
                           registers at once (4 vectors hold 4 * BN_W positions: for the center
                           and the two float32 runs one register each, for the two float64 sums
                           two halves each: 7 registers a vector)
     bn_vf, bn_vd          float32 and float64 vectors (bn_vd holds BN_W / 2 lanes)
     bn_load_f32/f16/bf16  BN_W elements -> bn_vf (exact)
     bn_store_f32/f16/bf16 bn_vf -> BN_W elements, rounded to nearest even as bn_convert.h does
     bn_set1_f             one float in every lane
     bn_add/sub/mul_f      bn_vf arithmetic
     bn_fma_f              a * b + c on bn_vf, rounded once (fmaf)
     bn_low_d, bn_high_d   the first / last BN_W / 2 floats of a bn_vf as a bn_vd
     bn_load_d, bn_store_d, bn_add_d
     BN_HAS_PARTIAL        optional: bn_load_partial_f32/f16/bf16(p, n) and
                           bn_store_partial_f32/f16/bf16(p, n, v) for the first n < BN_W lanes;
                           bn_add_d_n(acc, v, n): acc + v in the first n lanes, acc unchanged in
                           the others
     bn_stream_f32         a non-temporal store of a bn_vf to a BN_STREAM_ALIGN-byte aligned
                           address (a plain store where the ISA has none); bn_stream_fence()
                           orders those stores before the kernel returns

   Vectors run across positions only: each position's sums still add its elements in the float32
   runs of bn_kernels.h, run after run in index order, and each element sees the scalar formula's
   operations in the same order, so the results equal bn_scalar.c bit for bit. Whatever does not
   fill a vector goes through the scalar formulas of bn_kernels.h / bn_convert.h. */
#include <math.h>
#include <stdint.h>

#include "bn_convert.h"
#include "bn_kernels.h"

#define BN_INLINE static inline __attribute__((always_inline))

BN_INLINE bn_vf bn_load(const void *base, size_t i, fq_dtype dtype) {
    switch (dtype) {
    case FQ_DTYPE_F16: return bn_load_f16((const uint16_t *)base + i);
    case FQ_DTYPE_BF16: return bn_load_bf16((const uint16_t *)base + i);
    default: return bn_load_f32((const float *)base + i);
    }
}

BN_INLINE void bn_store(void *base, size_t i, fq_dtype dtype, bn_vf v) {
    switch (dtype) {
    case FQ_DTYPE_F16: bn_store_f16((uint16_t *)base + i, v); break;
    case FQ_DTYPE_BF16: bn_store_bf16((uint16_t *)base + i, v); break;
    default: bn_store_f32((float *)base + i, v); break;
    }
}

/* The elements [i, i + n) of a vector, n <= BN_W; an ISA with partial vectors (BN_HAS_PARTIAL)
   loads the lanes past n as zeros without touching their memory, and does not store them. */
BN_INLINE bn_vf bn_load_n(const void *base, size_t i, size_t n, fq_dtype dtype) {
#ifdef BN_HAS_PARTIAL
    if (n < BN_W) {
        switch (dtype) {
        case FQ_DTYPE_F16: return bn_load_partial_f16((const uint16_t *)base + i, n);
        case FQ_DTYPE_BF16: return bn_load_partial_bf16((const uint16_t *)base + i, n);
        default: return bn_load_partial_f32((const float *)base + i, n);
        }
    }
#else
    (void)n;
#endif
    return bn_load(base, i, dtype);
}

#ifdef BN_HAS_PARTIAL
BN_INLINE void store_n(void *out, size_t i, size_t n, fq_dtype dtype, bn_vf v) {
    switch (dtype) {
    case FQ_DTYPE_F16: bn_store_partial_f16((uint16_t *)out + i, n, v); break;
    case FQ_DTYPE_BF16: bn_store_partial_bf16((uint16_t *)out + i, n, v); break;
    default: bn_store_partial_f32((float *)out + i, n, v); break;
    }
}
#endif

/* ---- Sums: strips of vectors of positions, down groups of periods, in float32 runs ---- */

/* The row of a vector of positions at element i (lanes [0, n)), centered on c, starts its float32
   runs ra, rb (first) or adds to them, with fq_bn_sum_run's operations. */
BN_INLINE void run_add(const void *dy, const void *x, fq_dtype dtype, size_t i, size_t n, bn_vf c,
                       bn_vf *ra, bn_vf *rb, int first) {
    const bn_vf a = bn_sub_f(bn_load_n(x, i, n, dtype), c);
    const bn_vf g = dy == NULL ? a : bn_load_n(dy, i, n, dtype);
    if (first) {
        *ra = g;
        *rb = bn_mul_f(g, a);
    } else {
        *ra = bn_add_f(*ra, g);
        *rb = bn_fma_f(g, a, *rb);
    }
}

/* Lanes [0, n) of a vector's runs added into its float64 accumulators a[0..1], b[0..1] (n < BN_W
   needs BN_HAS_PARTIAL); the other lanes are left alone. */
BN_INLINE void run_flush(bn_vf ra, bn_vf rb, size_t n, bn_vd *a, bn_vd *b) {
#ifdef BN_HAS_PARTIAL
    if (n < BN_W) {
        const size_t low = n < BN_W / 2 ? n : BN_W / 2;
        a[0] = bn_add_d_n(a[0], bn_low_d(ra), low);
        b[0] = bn_add_d_n(b[0], bn_low_d(rb), low);
        if (n > BN_W / 2) {
            a[1] = bn_add_d_n(a[1], bn_high_d(ra), n - low);
            b[1] = bn_add_d_n(b[1], bn_high_d(rb), n - low);
        }
        return;
    }
#endif
    (void)n;
    a[0] = bn_add_d(a[0], bn_low_d(ra));
    a[1] = bn_add_d(a[1], bn_high_d(ra));
    b[0] = bn_add_d(b[0], bn_low_d(rb));
    b[1] = bn_add_d(b[1], bn_high_d(rb));
}

/* One float32 run of `n` rows (a constant where inlined: the rows unroll) of `vectors` vectors of
   positions, the rows `period` elements apart from element i, flushed into the accumulators;
   each row first prefetches one strip width of bytes from prefetch_x (and prefetch_dy), one after
   the other (NULL: none), `step` bytes on from row to row. */
BN_INLINE void strip_run(const void *dy, const void *x, fq_dtype dtype, size_t i, size_t period,
                         const size_t n, const bn_vf *c, bn_vd *a, bn_vd *b, const char *prefetch_x,
                         const char *prefetch_dy, size_t step, const int vectors) {
    bn_vf ra[BN_STRIP_VECTORS], rb[BN_STRIP_VECTORS];
    for (size_t k = 0; k < n; ++k, i += period) {
        if (prefetch_x != NULL) {
            for (size_t line = 0; line < step; line += 64) {
                __builtin_prefetch(prefetch_x + k * step + line);
                if (prefetch_dy != NULL) __builtin_prefetch(prefetch_dy + k * step + line);
            }
        }
        for (int v = 0; v < vectors; ++v)
            run_add(dy, x, dtype, i + (size_t)v * BN_W, BN_W, c[v], &ra[v], &rb[v], k == 0);
    }
    for (int v = 0; v < vectors; ++v) run_flush(ra[v], rb[v], BN_W, &a[2 * v], &b[2 * v]);
}

/* One vector of positions (center, sum_a and sum_b point at its first) over `count` elements from
   i, taken as rows of BN_W in float32 runs, then the cut-short last row (a run of its own) where
   the ISA has partial vectors, with the accumulators in registers from start to end. Serves
   periods of one vector (with 16 lanes: channels-first data, channels-last with C dividing 16), run
   by run, and the cut-short last period of wider ones, vector by vector. Through the strips, a run
   of 196 elements paid for storing the accumulators and reloading them for its last period:
   0.19 -> 0.16 ns an element in L2 for the gradient sums, 0.12 -> 0.10-0.11 for the moments (NCHW
   1x256x14x14, AVX-512, float64 per element). Returns the first element left (the cut-short row
   without partial vectors). */
BN_INLINE size_t sums_one_vector_run(const void *dy, const void *x, fq_dtype dtype, size_t i,
                                     size_t count, const float *center, double *sum_a,
                                     double *sum_b) {
    const bn_vf c = bn_load_f32(center);
    bn_vd a[2] = {bn_load_d(sum_a), bn_load_d(sum_a + BN_W / 2)};
    bn_vd b[2] = {bn_load_d(sum_b), bn_load_d(sum_b + BN_W / 2)};
    size_t rows = count / BN_W;
    for (; rows >= FQ_BN_SUM_RUN; rows -= FQ_BN_SUM_RUN, i += FQ_BN_SUM_RUN * BN_W)
        strip_run(dy, x, dtype, i, BN_W, FQ_BN_SUM_RUN, &c, a, b, NULL, NULL, 0, 1);
    if (rows > 0) {
        strip_run(dy, x, dtype, i, BN_W, rows, &c, a, b, NULL, NULL, 0, 1);
        i += rows * BN_W;
    }
#ifdef BN_HAS_PARTIAL
    if (count % BN_W > 0) {
        bn_vf ra, rb;
        run_add(dy, x, dtype, i, count % BN_W, c, &ra, &rb, 1);
        run_flush(ra, rb, count % BN_W, a, b);
        i += count % BN_W;
    }
#endif
    bn_store_d(sum_a, a[0]);
    bn_store_d(sum_a + BN_W / 2, a[1]);
    bn_store_d(sum_b, b[0]);
    bn_store_d(sum_b + BN_W / 2, b[1]);
    return i;
}

/* A period other than one vector is walked in groups of BN_GROUP_ROWS rows (whole float32 runs):
   each strip adds the group's rows with its accumulators in registers, then the next strip takes
   the same rows. Column by column, a group's lines are read out of order, which the hardware
   prefetchers do not follow; so each strip step asks for the next group's lines, in memory order
   (step s of the group's strip-major walk fetches the next group's s-th slice of that strip's
   width). Measured on Zen 4, period 256, 3.2M float32 elements: gradient sums 1.20 -> 0.69 ms,
   moments 0.59 -> 0.38 ms (AVX2, where period 64 is wide too: NHWC 32x56x56x64 forward 3.9 ->
   2.4 ms). Row by row, with the accumulators loaded and stored for every row, the sums were bound
   by those stores; whole calls walked strip by strip stalled once the data was beyond L2. A period
   that one strip covers is read in memory order either way, and still gains by the fetches ahead:
   on an Intel Xeon (Sapphire Rapids class), 6.4M float32 elements from memory, gradient sums in
   one group 2.12-2.20 ms, in groups 1.69-1.72 ms (AVX-512 periods 32, 48 and 64; AVX2 period 16:
   2.13-2.21 -> 1.70), as fast as the wider periods' strips; in the caches they cost nothing. Each
   position still adds its rows in order. */
#define BN_GROUP_ROWS ((size_t)(8 * FQ_BN_SUM_RUN))

/* With dy == NULL the moments of x about center, else the sums of dy and dy * (x - center), over
   `rows` periods from element `base`, for the positions [p, p + vectors * BN_W), in float32 runs.
   The strip's accumulators stay in registers while it walks the rows; each row prefetches one
   strip width of bytes from prefetch_x (and prefetch_dy), one after the other (NULL: none). */
BN_INLINE void sums_strip(const void *dy, const void *x, fq_dtype dtype, size_t base, size_t rows,
                          size_t period, size_t p, const float *center, double *sum_a,
                          double *sum_b, const char *prefetch_x, const char *prefetch_dy,
                          const int vectors) {
    bn_vf c[BN_STRIP_VECTORS];
    bn_vd a[2 * BN_STRIP_VECTORS], b[2 * BN_STRIP_VECTORS];
    for (int v = 0; v < vectors; ++v) c[v] = bn_load_f32(center + p + (size_t)v * BN_W);
    for (int h = 0; h < 2 * vectors; ++h) {
        a[h] = bn_load_d(sum_a + p + (size_t)h * (BN_W / 2));
        b[h] = bn_load_d(sum_b + p + (size_t)h * (BN_W / 2));
    }
    const size_t step = (size_t)vectors * BN_W * fq_dtype_size(dtype);
    size_t r = 0;
    for (; r + FQ_BN_SUM_RUN <= rows; r += FQ_BN_SUM_RUN)
        strip_run(dy, x, dtype, base + r * period + p, period, FQ_BN_SUM_RUN, c, a, b,
                  prefetch_x == NULL ? NULL : prefetch_x + r * step,
                  prefetch_dy == NULL ? NULL : prefetch_dy + r * step, step, vectors);
    if (r < rows)
        strip_run(dy, x, dtype, base + r * period + p, period, rows - r, c, a, b,
                  prefetch_x == NULL ? NULL : prefetch_x + r * step,
                  prefetch_dy == NULL ? NULL : prefetch_dy + r * step, step, vectors);
    for (int h = 0; h < 2 * vectors; ++h) {
        bn_store_d(sum_a + p + (size_t)h * (BN_W / 2), a[h]);
        bn_store_d(sum_b + p + (size_t)h * (BN_W / 2), b[h]);
    }
}

/* Strips as wide as the registers allow over `rows` periods; returns the first position left for
   the scalar formula (past the last whole vector of the period). next_x / next_dy: where the next
   group of `rows` periods starts (NULL: none to fetch); the strip at position p fetches from
   p * rows elements past it, one strip width a row, so the strips' walk covers the next group
   once, in memory order. */
BN_INLINE size_t sums_strips(const void *dy, const void *x, fq_dtype dtype, size_t base, size_t rows,
                             size_t period, const float *center, double *sum_a, double *sum_b,
                             const char *next_x, const char *next_dy) {
    const size_t size = fq_dtype_size(dtype);
    size_t p = 0;
    while (p + BN_W <= period) {
        const size_t left = (period - p) / BN_W;
        const size_t vectors = left < BN_STRIP_VECTORS ? left : BN_STRIP_VECTORS;
        const char *prefetch_x = next_x == NULL ? NULL : next_x + p * rows * size;
        const char *prefetch_dy = next_dy == NULL ? NULL : next_dy + p * rows * size;
        switch (vectors) {
#if BN_STRIP_VECTORS >= 4
        case 4: sums_strip(dy, x, dtype, base, rows, period, p, center, sum_a, sum_b, prefetch_x, prefetch_dy, 4); break;
#endif
#if BN_STRIP_VECTORS >= 3
        case 3: sums_strip(dy, x, dtype, base, rows, period, p, center, sum_a, sum_b, prefetch_x, prefetch_dy, 3); break;
#endif
        case 2: sums_strip(dy, x, dtype, base, rows, period, p, center, sum_a, sum_b, prefetch_x, prefetch_dy, 2); break;
        default: sums_strip(dy, x, dtype, base, rows, period, p, center, sum_a, sum_b, prefetch_x, prefetch_dy, 1); break;
        }
        p += vectors * BN_W;
    }
    return p;
}

/* The gradient's sums of data from memory (too large for the caches) with a period wider than one
   strip, of BN_IN_ORDER_MIN_PERIOD to BN_IN_ORDER_MAX_PERIOD positions, go row by row in memory
   order: each vector of positions keeps its float32 runs in `runs_a`, `runs_b` (`period` floats
   each, in L1 with the accumulators and centers) and adds them into its float64 accumulators once a
   run. Strip by strip down a group of rows, the sums ran at half the speed of reading dy and x
   (likely causes: the group's lines are read out of memory order, and at period 256 those of every
   fourth row share L1 sets); in memory order they run at about that speed. Measured on Zen 4, 3.2M
   float32 elements, ns an element, strips -> memory order (a loop that only reads both inputs:
   0.19-0.34): AVX-512 period 128 0.32-0.63 -> 0.30-0.39, 192 0.52-0.61 -> 0.31-0.33, 256 0.40-0.48
   -> 0.24-0.29, 320 0.66 -> 0.38; AVX2 192 0.45 -> 0.31, 256 0.31 -> 0.25. Those inputs (26 MB)
   partly stayed in L3 (32 MiB); there narrower periods gained nothing (AVX-512 96 0.36 -> 0.34,
   AVX2 128 0.27 -> 0.27) or lost (AVX2 32 and 64: 0.26 -> 0.29-0.31). With 6.4M elements (51 MB)
   AVX2 48, 64 and 96 gain (0.51-0.56 -> 0.43-0.44; a loop that only reads both: 0.25-0.28) and 32
   still loses (0.44 -> 0.53); the whole NHWC 32x56x56x64 gradient, AVX2, three runs alternating:
   5.68-5.72 -> 4.70-4.81 ms (AVX-512 at 96, 64x28x28x96: 3.37-4.29 -> 3.26-3.54 ms). Wider periods
   lose (AVX2 512 0.29 -> 0.35, 1024 0.36 -> 0.48: the runs and accumulators crowd L1), and the
   moments, one input, gain nothing. Two rows at once (half the runs' loads and stores) was 2x
   slower beyond L2: the prefetchers do not follow two interleaved streams a row apart. With the
   inputs in the caches the strips are faster (AVX-512, back to back: periods 144-256, 64-4096
   rows, 0.11-0.18 -> 0.16-0.22; 8192 rows of 256, 16 MB, even), hence only for data from memory,
   and only on Zen: on an Intel Xeon the strips are faster there too (kernel_choices.c,
   fq_bn_sums_in_order). */
#define BN_IN_ORDER_MIN_PERIOD ((size_t)48)
#define BN_IN_ORDER_MAX_PERIOD ((size_t)384)

BN_INLINE int sums_in_order(const void *dy, size_t period, int rows_in_order) {
    return dy != NULL && rows_in_order && period > BN_STRIP_VECTORS * BN_W &&
           period >= BN_IN_ORDER_MIN_PERIOD && period <= BN_IN_ORDER_MAX_PERIOD;
}

/* One row's whole vectors added to the runs in runs_a, runs_b (first: starting them). */
BN_INLINE void row_into_runs(const void *dy, const void *x, fq_dtype dtype, size_t row, size_t whole,
                             const float *center, float *runs_a, float *runs_b, const int first) {
    for (size_t p = 0; p < whole; p += BN_W) {
        bn_vf ra, rb;
        if (!first) {
            ra = bn_load_f32(runs_a + p);
            rb = bn_load_f32(runs_b + p);
        }
        run_add(dy, x, dtype, row + p, BN_W, bn_load_f32(center + p), &ra, &rb, first);
        bn_store_f32(runs_a + p, ra);
        bn_store_f32(runs_b + p, rb);
    }
}

/* Whole rows from element `first` for the positions [0, period) in whole vectors; returns the first
   position left for the scalar formula. */
BN_INLINE size_t sums_rows_in_order(const void *dy, const void *x, fq_dtype dtype, size_t first,
                                    size_t rows, size_t period, const float *center,
                                    double *sum_a, double *sum_b, float *runs_a, float *runs_b) {
    const size_t whole = period / BN_W * BN_W;
    for (size_t r = 0; r < rows; r += FQ_BN_SUM_RUN) {
        const size_t n = rows - r < FQ_BN_SUM_RUN ? rows - r : FQ_BN_SUM_RUN;
        row_into_runs(dy, x, dtype, first + r * period, whole, center, runs_a, runs_b, 1);
        for (size_t k = 1; k < n; ++k)
            row_into_runs(dy, x, dtype, first + (r + k) * period, whole, center, runs_a, runs_b, 0);
        for (size_t p = 0; p < whole; p += BN_W) {
            bn_vd a[2] = {bn_load_d(sum_a + p), bn_load_d(sum_a + p + BN_W / 2)};
            bn_vd b[2] = {bn_load_d(sum_b + p), bn_load_d(sum_b + p + BN_W / 2)};
            run_flush(bn_load_f32(runs_a + p), bn_load_f32(runs_b + p), BN_W, a, b);
            bn_store_d(sum_a + p, a[0]);
            bn_store_d(sum_a + p + BN_W / 2, a[1]);
            bn_store_d(sum_b + p, b[0]);
            bn_store_d(sum_b + p + BN_W / 2, b[1]);
        }
    }
    return whole;
}

BN_INLINE void sums_body(const void *dy, const void *x, fq_dtype dtype, size_t runs,
                         size_t run_stride, size_t count, size_t period, const float *center,
                         double *sum_a, double *sum_b, size_t table_stride, size_t readable_after,
                         int rows_in_order) {
    if (period == BN_W) {
        for (size_t j = 0; j < runs; ++j) {
            const size_t run = j * run_stride, t = j * table_stride;
            const size_t rest = sums_one_vector_run(dy, x, dtype, run, count, center + t, sum_a + t, sum_b + t);
            for (size_t i = rest, q = t; i < run + count; ++i, ++q)
                fq_bn_sum_run(dy, x, dtype, i, BN_W, 1, center[q], &sum_a[q], &sum_b[q]);
        }
        return;
    }
    const size_t rows = count / period;
    const size_t size = fq_dtype_size(dtype);
    const int in_order = sums_in_order(dy, period, rows_in_order);
    float runs_a[BN_IN_ORDER_MAX_PERIOD], runs_b[BN_IN_ORDER_MAX_PERIOD];
    for (size_t j = 0; j < runs; ++j) {
        const size_t run = j * run_stride, t = j * table_stride;
        const float *c = center + t;
        double *a = sum_a + t, *b = sum_b + t;
        /* Only a whole next group is fetched ahead, within the run or what may follow the last
           one (whole periods follow a run of whole periods). */
        const size_t after = j + 1 == runs && rows * period == count ? readable_after : 0;
        for (size_t r0 = 0; r0 < rows; r0 += BN_GROUP_ROWS) {
            const size_t g = rows - r0 < BN_GROUP_ROWS ? rows - r0 : BN_GROUP_ROWS;
            const size_t first = run + r0 * period;
            const int ahead = (r0 + 2 * BN_GROUP_ROWS) * period <= rows * period + after;
            const size_t next = (first + g * period) * size;
            const size_t rest =
                in_order ? sums_rows_in_order(dy, x, dtype, first, g, period, c, a, b, runs_a, runs_b)
                         : sums_strips(dy, x, dtype, first, g, period, c, a, b,
                                       ahead ? (const char *)x + next : NULL,
                                       ahead && dy != NULL ? (const char *)dy + next : NULL);
            for (size_t r = 0; rest < period && r < g; r += FQ_BN_SUM_RUN)
                for (size_t q = rest; q < period; ++q)
                    fq_bn_sum_run(dy, x, dtype, first + r * period + q, period,
                                  g - r < FQ_BN_SUM_RUN ? g - r : FQ_BN_SUM_RUN, c[q], &a[q], &b[q]);
        }
        /* The run's cut-short last period: partial vectors where the ISA has them and the
           accumulators of a whole vector exist, the scalar formula for the rest. */
        size_t q = 0;
#ifdef BN_HAS_PARTIAL
        for (const size_t cut = count - rows * period; q < cut && q + BN_W <= period; q += BN_W)
            sums_one_vector_run(dy, x, dtype, run + rows * period + q, cut - q < BN_W ? cut - q : BN_W,
                                c + q, a + q, b + q);
#endif
        for (size_t i = run + rows * period + q; i < run + count; ++i, ++q)
            fq_bn_sum_run(dy, x, dtype, i, period, 1, c[q], &a[q], &b[q]);
    }
}

/* ---- Elementwise passes ---- */

/* A pass's four per-position constants for one vector of positions. */
typedef struct {
    bn_vf a, b, c, d;
} pass_consts;

BN_INLINE pass_consts consts_at(const fq_bn_table *t, size_t p) {
    const pass_consts k = {bn_load_f32(t->a + p), bn_load_f32(t->b + p), bn_load_f32(t->c + p),
                           bn_load_f32(t->d + p)};
    return k;
}

/* The constants of a run of one channel (a period of 1): entry 0 of each table in every lane. */
BN_INLINE pass_consts consts_of_channel(const fq_bn_table *t) {
    const pass_consts k = {bn_set1_f(t->a[0]), bn_set1_f(t->b[0]), bn_set1_f(t->c[0]), bn_set1_f(t->d[0])};
    return k;
}

/* Lanes [0, n) of the pass's formula at element i with the constants k, in the scalar formula's
   order of operations. */
BN_INLINE bn_vf pass_vector(fq_bn_pass pass, const void *dy, const void *x, fq_dtype dtype, size_t i,
                            size_t n, const pass_consts *k) {
    switch (pass) {
    case FQ_BN_NORMALIZE: {
        const bn_vf v = bn_load_n(x, i, n, dtype);
        return bn_add_f(bn_mul_f(bn_sub_f(bn_sub_f(v, k->a), k->b), k->c), k->d);
    }
    case FQ_BN_BACKPROP: {
        const bn_vf g = bn_load_n(dy, i, n, dtype);
        const bn_vf v = bn_load_n(x, i, n, dtype);
        const bn_vf centered = bn_sub_f(g, k->a);
        const bn_vf projection = bn_mul_f(bn_sub_f(v, k->b), k->c);
        return bn_mul_f(bn_sub_f(centered, projection), k->d);
    }
    default: return bn_mul_f(bn_load_n(dy, i, n, dtype), k->a);
    }
}

/* One whole vector at element i, stored plainly or streamed. */
BN_INLINE void pass_store(fq_bn_pass pass, const void *dy, const void *x, void *out, fq_dtype dtype,
                          size_t i, const pass_consts *k, int stream) {
    const bn_vf result = pass_vector(pass, dy, x, dtype, i, BN_W, k);
    if (stream) {
        bn_stream_f32((float *)out + i, result);
    } else {
        bn_store(out, i, dtype, result);
    }
}

#define BN_STREAM_MIN_RUN ((size_t)1024)

/* Whole periods ("rows") from element i while they fit before `end`, for a period of `vectors`
   whole vectors whose first position is p (p + period stays within the tables, which extend
   FQ_BN_LANES entries past the period): every constant stays in a register for the whole run, where
   loading four of them for each vector of data made the pass bound by loads, not by memory (Zen 4:
   0.15 -> 0.07 ns an element in L1). Wider periods go vector by vector: walking a block of rows
   column by column, to load each constant once for several rows, defeated the hardware prefetchers
   (2x slower once the data is beyond L2). Returns the first element left. */
BN_INLINE size_t pass_rows_in_registers(fq_bn_pass pass, const void *dy, const void *x, void *out,
                                        fq_dtype dtype, size_t i, size_t end, size_t period,
                                        const fq_bn_table *t, size_t p, int stream, const int vectors) {
    pass_consts k[BN_PASS_REG_VECTORS];
    for (int v = 0; v < vectors; ++v) k[v] = consts_at(t, p + (size_t)v * BN_W);
    for (; i + period <= end; i += period)
        for (int v = 0; v < vectors; ++v)
            pass_store(pass, dy, x, out, dtype, i + (size_t)v * BN_W, &k[v], stream);
    return i;
}

BN_INLINE size_t pass_rows(fq_bn_pass pass, const void *dy, const void *x, void *out, fq_dtype dtype,
                           size_t i, size_t end, size_t period, const fq_bn_table *t, size_t p,
                           int stream) {
    /* One instance per register count, so that the constants are registers, not a stack array. */
    switch (period / BN_W) {
    case 1: return pass_rows_in_registers(pass, dy, x, out, dtype, i, end, period, t, p, stream, 1);
    case 2: return pass_rows_in_registers(pass, dy, x, out, dtype, i, end, period, t, p, stream, 2);
#if BN_PASS_REG_VECTORS >= 4
    case 3: return pass_rows_in_registers(pass, dy, x, out, dtype, i, end, period, t, p, stream, 3);
    case 4: return pass_rows_in_registers(pass, dy, x, out, dtype, i, end, period, t, p, stream, 4);
#endif
    default: return i;
    }
}

/* Elements before the first whole vector of a run from element i to `end` whose loads (or
   streamed stores) are aligned (0 when there is none): a load that spans two cache lines costs
   two. */
BN_INLINE size_t head_to_align(const void *dy, const void *x, const void *out, fq_dtype dtype,
                               size_t i, size_t end, int stream) {
    const size_t size = fq_dtype_size(dtype);
    const uintptr_t address = (uintptr_t)(stream ? out : x != NULL ? x : dy) + i * size;
    const size_t head = (BN_W * size - address % (BN_W * size)) % (BN_W * size) / size;
    return address % size == 0 && i + head <= end ? head : 0;
}

#ifndef BN_HAS_PARTIAL
/* Whether elements [i, end) of out share no byte with those of the inputs (NULL inputs share
   none). */
BN_INLINE int output_apart(const void *dy, const void *x, const void *out, fq_dtype dtype, size_t i,
                           size_t end) {
    const size_t size = fq_dtype_size(dtype);
    const uintptr_t o0 = (uintptr_t)out + i * size, o1 = (uintptr_t)out + end * size;
    const void *inputs[2] = {dy, x};
    for (int k = 0; k < 2; ++k) {
        if (inputs[k] == NULL) continue;
        const uintptr_t a0 = (uintptr_t)inputs[k] + i * size, a1 = (uintptr_t)inputs[k] + end * size;
        if (o0 < a1 && a0 < o1) return 0;
    }
    return 1;
}
#endif

/* A run of one channel (period 1: channels-first data), walked as pass_body walks a run, its four
   constants broadcast into registers once from one entry a table. Tables of FQ_BN_LANES positions a
   channel (512 bytes) brought up to 8 more cache lines from L2 into every run. Zen 4, AVX-512, one
   thread, whole op, three runs alternating with those tables: NCHW 64x256x14x14 forward 1.31-1.50
   -> 1.03-1.14 ms, gradient 1.91-2.07 -> 1.69-1.89 ms; 8x1024x7x7 forward 245-249 -> 175-176 us,
   gradient 264-269 -> 188-189 us; 32x64x56x56 (long runs) and the AVX2 path unchanged. */
BN_INLINE void pass_channel_run(fq_bn_pass pass, const void *dy, const void *x, void *out,
                                fq_dtype dtype, size_t i, size_t end, const fq_bn_table *t,
                                int stream) {
    const pass_consts k = consts_of_channel(t);
#ifndef BN_HAS_PARTIAL
    /* Without partial vectors, a run of a vector or more whose output is apart from its inputs goes
       by whole vectors only: the first one where the run starts, then from the first aligned input,
       and the last one ending where the run ends. The elements computed twice get the same values
       twice; element by element they cost more. Zen 4, AVX2, one thread, three runs alternating
       with 16ddd35: NCHW 64x256x14x14 forward 1.44-1.54 -> 1.20-1.34 ms, gradient 2.24-2.54 ->
       1.94-2.09 ms. */
    if (!stream && end - i >= BN_W && output_apart(dy, x, out, dtype, i, end)) {
        const size_t head = head_to_align(dy, x, out, dtype, i, end, 0);
        pass_store(pass, dy, x, out, dtype, i, &k, 0);
        i += head > 0 ? head : BN_W;
        for (; i + BN_W <= end; i += BN_W) pass_store(pass, dy, x, out, dtype, i, &k, 0);
        if (i < end) pass_store(pass, dy, x, out, dtype, end - BN_W, &k, 0);
        return;
    }
#endif
#ifdef BN_HAS_PARTIAL
    const size_t head = head_to_align(dy, x, out, dtype, i, end, stream);
    if (head > 0) {
        store_n(out, i, head, dtype, pass_vector(pass, dy, x, dtype, i, head, &k));
        i += head;
    }
#endif
    for (; stream && i < end && (uintptr_t)((float *)out + i) % BN_STREAM_ALIGN != 0; ++i)
        fq_store_element(out, i, dtype, fq_bn_pass_one(pass, dy, x, dtype, i, t, 0));
    for (; i + BN_W <= end; i += BN_W) pass_store(pass, dy, x, out, dtype, i, &k, stream);
#ifdef BN_HAS_PARTIAL
    if (i < end) store_n(out, i, end - i, dtype, pass_vector(pass, dy, x, dtype, i, end - i, &k));
#else
    for (; i < end; ++i) fq_store_element(out, i, dtype, fq_bn_pass_one(pass, dy, x, dtype, i, t, 0));
#endif
}

/* Each run: a partial first vector up to an aligned address (where the ISA has partial vectors),
   then whole periods (pass_rows) when the period is a few whole vectors, then vector by vector with the
   position wrapping around the period (a vector that crosses the end of a period reads the tables'
   repeated entries past it), then the rest. Every input element of a vector is loaded before its
   outputs are stored, so out may be an input. Streamed float32 output starts with scalar elements up
   to the first aligned address. */
BN_INLINE void pass_body(fq_bn_pass pass, const void *dy, const void *x, void *out, fq_dtype dtype,
                         size_t runs, size_t run_stride, size_t count, size_t period,
                         const fq_bn_table *table, size_t table_stride, int stream) {
    /* Runs too short to repay the scalar elements before the first aligned address are stored
       plainly. */
    stream = stream && dtype == FQ_DTYPE_F32 && count >= BN_STREAM_MIN_RUN;
    for (size_t j = 0; j < runs; ++j) {
        const fq_bn_table t = fq_bn_table_of_run(table, j, table_stride);
        const size_t end = j * run_stride + count;
        size_t i = j * run_stride, p = 0;
        if (period == 1) {
            pass_channel_run(pass, dy, x, out, dtype, i, end, &t, stream);
            continue;
        }
#ifdef BN_HAS_PARTIAL
        const size_t head = head_to_align(dy, x, out, dtype, i, end, stream);
        if (head > 0) {
            const pass_consts k = consts_at(&t, p);
            store_n(out, i, head, dtype, pass_vector(pass, dy, x, dtype, i, head, &k));
            i += head;
            p += head;
            if (p >= period) p -= period;
        }
#endif
        for (; stream && i < end && (uintptr_t)((float *)out + i) % BN_STREAM_ALIGN != 0; ++i) {
            fq_store_element(out, i, dtype, fq_bn_pass_one(pass, dy, x, dtype, i, &t, p));
            if (++p == period) p = 0;
        }
        if (period % BN_W == 0 && p <= FQ_BN_LANES)
            i = pass_rows(pass, dy, x, out, dtype, i, end, period, &t, p, stream);
        for (; i + BN_W <= end; i += BN_W) {
            const pass_consts k = consts_at(&t, p);
            pass_store(pass, dy, x, out, dtype, i, &k, stream);
            p += BN_W;
            if (p >= period) p -= period;
        }
#ifdef BN_HAS_PARTIAL
        if (i < end) {
            const pass_consts k = consts_at(&t, p);
            store_n(out, i, end - i, dtype, pass_vector(pass, dy, x, dtype, i, end - i, &k));
        }
#else
        for (; i < end; ++i) {
            fq_store_element(out, i, dtype, fq_bn_pass_one(pass, dy, x, dtype, i, &t, p));
            if (++p == period) p = 0;
        }
#endif
    }
    if (stream) bn_stream_fence();
}

/* ---- The table: one instance of each body per element type ---- */

#define BN_CAT2(a, b) a##__##b
#define BN_CAT(a, b) BN_CAT2(a, b)
#define BN_NAME(kernel) BN_CAT(kernel, BN_ISA)

#define BN_BY_DTYPE(call_f32, call_f16, call_bf16) \
    switch (dtype) {                               \
    case FQ_DTYPE_F16: call_f16; break;            \
    case FQ_DTYPE_BF16: call_bf16; break;          \
    default: call_f32; break;                      \
    }

static void BN_NAME(moments)(const void *x, fq_dtype dtype, size_t runs, size_t run_stride,
                             size_t count, size_t period, const float *shift, double *sum,
                             double *sum_sq, size_t ts, size_t after) {
    BN_BY_DTYPE(sums_body(NULL, x, FQ_DTYPE_F32, runs, run_stride, count, period, shift, sum, sum_sq, ts, after, 0),
                sums_body(NULL, x, FQ_DTYPE_F16, runs, run_stride, count, period, shift, sum, sum_sq, ts, after, 0),
                sums_body(NULL, x, FQ_DTYPE_BF16, runs, run_stride, count, period, shift, sum, sum_sq, ts, after, 0))
}

static void BN_NAME(grad_sums)(const void *dy, const void *x, fq_dtype dtype, size_t runs,
                               size_t run_stride, size_t count, size_t period, const float *mean,
                               double *sum_dy, double *sum_dy_xc, size_t ts, size_t after,
                               int rows_in_order) {
    BN_BY_DTYPE(
        sums_body(dy, x, FQ_DTYPE_F32, runs, run_stride, count, period, mean, sum_dy, sum_dy_xc, ts, after, rows_in_order),
        sums_body(dy, x, FQ_DTYPE_F16, runs, run_stride, count, period, mean, sum_dy, sum_dy_xc, ts, after, rows_in_order),
        sums_body(dy, x, FQ_DTYPE_BF16, runs, run_stride, count, period, mean, sum_dy, sum_dy_xc, ts, after, rows_in_order))
}

#define BN_PASS(pass, dy, x, out)                                                            \
    BN_BY_DTYPE(pass_body(pass, dy, x, out, FQ_DTYPE_F32, runs, run_stride, count, period, \
                          table, table_stride, stream),                                    \
                pass_body(pass, dy, x, out, FQ_DTYPE_F16, runs, run_stride, count, period, \
                          table, table_stride, 0),                                         \
                pass_body(pass, dy, x, out, FQ_DTYPE_BF16, runs, run_stride, count, period, \
                          table, table_stride, 0))

static void BN_NAME(normalize)(const void *x, void *y, fq_dtype dtype, size_t runs,
                               size_t run_stride, size_t count, size_t period,
                               const fq_bn_table *table, size_t table_stride, int stream) {
    BN_PASS(FQ_BN_NORMALIZE, NULL, x, y)
}

static void BN_NAME(backprop)(const void *dy, const void *x, void *dx, fq_dtype dtype, size_t runs,
                              size_t run_stride, size_t count, size_t period,
                              const fq_bn_table *table, size_t table_stride, int stream) {
    BN_PASS(FQ_BN_BACKPROP, dy, x, dx)
}

static void BN_NAME(scale)(const void *dy, void *dx, fq_dtype dtype, size_t runs, size_t run_stride,
                           size_t count, size_t period, const fq_bn_table *table,
                           size_t table_stride, int stream) {
    BN_PASS(FQ_BN_SCALE, dy, NULL, dx)
}

const fq_bn_kernels BN_NAME(fq_bn) = {BN_NAME(moments), BN_NAME(grad_sums), BN_NAME(normalize),
                                      BN_NAME(backprop), BN_NAME(scale)};
