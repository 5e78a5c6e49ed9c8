/* AVX-512 fake-quant kernels (16 lanes); bit-identical to fq_scalar.c, including the sum lane order. */
#if !defined(__AVX512F__) || !defined(__AVX512DQ__)
#error "fq_avx512.c must be compiled with -mavx512f -mavx512dq -mavx512bw -mavx512vl"
#endif
#include <immintrin.h>

#include "fq_channel_walk.h"
#include "fq_element.h"

typedef struct {
    __m512 nudged_min, nudged_max, scale, inv_scale, quant_zero;
} grid16;

static inline grid16 broadcast(const fq_grid *q) {
    return (grid16){_mm512_set1_ps(q->nudged_min), _mm512_set1_ps(q->nudged_max),
                    _mm512_set1_ps(q->scale), _mm512_set1_ps(q->inv_scale),
                    _mm512_set1_ps(q->quant_zero)};
}

static inline grid16 load_grid(const fq_grid_table *t, size_t p) {
    return (grid16){_mm512_loadu_ps(fq_grid_param(t, p, FQ_GRID_NUDGED_MIN)),
                    _mm512_loadu_ps(fq_grid_param(t, p, FQ_GRID_NUDGED_MAX)),
                    _mm512_loadu_ps(fq_grid_param(t, p, FQ_GRID_SCALE)),
                    _mm512_loadu_ps(fq_grid_param(t, p, FQ_GRID_INV_SCALE)),
                    _mm512_loadu_ps(fq_grid_param(t, p, FQ_GRID_QUANT_ZERO))};
}

/* vminps/vmaxps return their second operand on NaN: min(nmax, x), max(nmin, c) keep a NaN x. */
static inline __m512 clamped16(__m512 x, const grid16 *q) {
    return _mm512_max_ps(q->nudged_min, _mm512_min_ps(q->nudged_max, x));
}

/* floor(t) * scale. */
static inline __m512 floor_scaled16(__m512 t, const grid16 *q) {
    return _mm512_mul_ps(_mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC), q->scale);
}

/* a - b as a * 1 - b and a + b as a * 1 + b: the same roundings (NaNs and signed zeros included),
   issued on the FMA pipes. Zen 4 runs float32 additions, subtractions, min, max and roundings on
   two pipes, multiplications and FMAs on the two others; a loop that queues on one kind while the
   other idles gets faster with some of its additions moved. */
static inline __m512 sub16_on_fma(__m512 a, __m512 b) { return _mm512_fmsub_ps(a, _mm512_set1_ps(1.0f), b); }
static inline __m512 add16_on_fma(__m512 a, __m512 b) { return _mm512_fmadd_ps(a, _mm512_set1_ps(1.0f), b); }

/* The dividing forward is bound by the divider: it keeps the plain operations (moving them made
   no difference). */
static inline __m512 forward_div16(__m512 x, const grid16 *q) {
    const __m512 scaled = _mm512_div_ps(_mm512_sub_ps(clamped16(x, q), q->nudged_min), q->scale);
    return floor_scaled16(_mm512_add_ps(_mm512_sub_ps(scaled, q->quant_zero), _mm512_set1_ps(0.5f)), q);
}

/* The multiplying forward's eight operations are six of the first kind and two of the second;
   its two subtractions on the FMAs balance them four and four (64K elements in L2: 6.9 -> 5.5 us;
   the addition of 0.5 moved as well made it 5.9 us). */
static inline __m512 forward_mul16(__m512 x, const grid16 *q) {
    const __m512 scaled = _mm512_mul_ps(sub16_on_fma(clamped16(x, q), q->nudged_min), q->inv_scale);
    return floor_scaled16(_mm512_add_ps(sub16_on_fma(scaled, q->quant_zero), _mm512_set1_ps(0.5f)), q);
}

/* The rest of the per-channel forward after its clamp of scaled values: with both the subtraction
   and the addition on the FMAs, its operations split four and four ([512, 128] float32: 7.8 -> 6.4
   us; the multiplying forward's split of the subtractions measured 6.5-6.8 us here). */
static inline __m512 finish16_on_fma(__m512 scaled, const grid16 *q) {
    return floor_scaled16(add16_on_fma(sub16_on_fma(scaled, q->quant_zero), _mm512_set1_ps(0.5f)), q);
}

static inline __m512 as_one(__mmask16 mask) { return _mm512_maskz_mov_ps(mask, _mm512_set1_ps(1.0f)); }

static inline __mmask16 between16(__m512 x, __m512 nudged_min, __m512 nudged_max) {
    return _mm512_cmp_ps_mask(x, nudged_min, _CMP_GE_OQ) & _mm512_cmp_ps_mask(x, nudged_max, _CMP_LE_OQ);
}

/* Both forward kernels; `divide` is a constant in each caller, which gets a loop of its own. */
static inline void forward_loop(const float *x, float *out, size_t n, const fq_grid *grid, int divide) {
    const grid16 q = broadcast(grid);
    size_t i = 0;
    /* Four vectors a step, all loaded before any is stored (measured: 8.0 -> 7.1 us for 64K
       elements; one at a time in a loop is 7.7): more independent chains in flight at once. The
       next step's vectors are loaded before this step's stores: when out sits a few bytes past x
       modulo 4 KiB (consecutive heap arrays do), loads issued after those stores wait on them as
       if they overlapped (64K elements, out 144 bytes past x: 6.8 -> 5.6 us). */
    if (n >= 64) {
        __m512 v[4];
        for (int k = 0; k < 4; ++k) v[k] = _mm512_loadu_ps(x + 16 * k);
        for (;; i += 64) {
            const int last = i + 128 > n;
            __m512 next[4];
            if (!last)
                for (int k = 0; k < 4; ++k) next[k] = _mm512_loadu_ps(x + i + 64 + 16 * k);
            for (int k = 0; k < 4; ++k)
                _mm512_storeu_ps(out + i + 16 * k, divide ? forward_div16(v[k], &q) : forward_mul16(v[k], &q));
            if (last) break;
            for (int k = 0; k < 4; ++k) v[k] = next[k];
        }
        i += 64;
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        _mm512_storeu_ps(out + i, divide ? forward_div16(v, &q) : forward_mul16(v, &q));
    }
    if (i < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(tail, x + i);
        _mm512_mask_storeu_ps(out + i, tail, divide ? forward_div16(v, &q) : forward_mul16(v, &q));
    }
}

static void forward_mul__avx512(const float *x, float *out, size_t n, const fq_grid *grid) {
    forward_loop(x, out, n, grid, 0);
}

static void forward_div__avx512(const float *x, float *out, size_t n, const fq_grid *grid) {
    forward_loop(x, out, n, grid, 1);
}

static void mask__avx512(const float *g, const float *x, float *dx, size_t n, const fq_grid *grid) {
    const __m512 nmin = _mm512_set1_ps(grid->nudged_min), nmax = _mm512_set1_ps(grid->nudged_max);
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 gv[4], xv[4];
        for (int k = 0; k < 4; ++k) {
            gv[k] = _mm512_loadu_ps(g + i + 16 * k);
            xv[k] = _mm512_loadu_ps(x + i + 16 * k);
        }
        for (int k = 0; k < 4; ++k)
            _mm512_storeu_ps(dx + i + 16 * k, _mm512_mul_ps(gv[k], as_one(between16(xv[k], nmin, nmax))));
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 keep = as_one(between16(_mm512_loadu_ps(x + i), nmin, nmax));
        _mm512_storeu_ps(dx + i, _mm512_mul_ps(_mm512_loadu_ps(g + i), keep));
    }
    if (i < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - i)) - 1);
        const __m512 keep = as_one(between16(_mm512_maskz_loadu_ps(tail, x + i), nmin, nmax));
        _mm512_mask_storeu_ps(dx + i, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, g + i), keep));
    }
}

static inline void add_to_lanes(__m512 runs, __m512d *lo, __m512d *hi) {
    *lo = _mm512_add_pd(*lo, _mm512_cvtps_pd(_mm512_castps512_ps256(runs)));
    *hi = _mm512_add_pd(*hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(runs, 1)));
}

/* acc holds lanes 0-7 and 8-15 of the min sums, then of the max sums. */
static inline void store_lanes(const __m512d acc[4], double *lanes_min, double *lanes_max) {
    _mm512_storeu_pd(lanes_min, acc[0]);
    _mm512_storeu_pd(lanes_min + 8, acc[1]);
    _mm512_storeu_pd(lanes_max, acc[2]);
    _mm512_storeu_pd(lanes_max + 8, acc[3]);
}

/* QNaN | +inf | -inf | SNaN for vfpclassps. */
#define FQ_NOT_FINITE 0x99

/* One run's worth of dx over 16 lanes, with the run's float32 sums taken as masked adds: where g
   is finite, g * (x < nmin) is g or +-0, and +-0 leaves a run (which starts at +0) unchanged. */
typedef struct {
    __m512 run_min, run_max;
    __mmask16 outside, not_finite;
} run16;

static inline void step16(__m512 gv, __m512 xv, float *dx, __m512 nmin, __m512 nmax, run16 *run) {
    _mm512_storeu_ps(dx, _mm512_mul_ps(gv, as_one(between16(xv, nmin, nmax))));
    const __mmask16 below = _mm512_cmp_ps_mask(xv, nmin, _CMP_LT_OQ);
    const __mmask16 above = _mm512_cmp_ps_mask(xv, nmax, _CMP_GT_OQ);
    run->run_min = _mm512_mask_add_ps(run->run_min, below, run->run_min, gv);
    run->run_max = _mm512_mask_add_ps(run->run_max, above, run->run_max, gv);
    run->outside |= below | above;
    run->not_finite |= _mm512_fpclass_ps_mask(gv, FQ_NOT_FINITE);
}

/* The exact products g * (x < nmin), g * (x > nmax) of 16 elements added into float32 runs; for
   runs holding a non-finite g, whose NaN products must reach the sums. */
static inline void products16(__m512 gv, __m512 xv, __m512 nmin, __m512 nmax, run16 *run) {
    run->run_min = _mm512_add_ps(run->run_min, _mm512_mul_ps(gv, as_one(_mm512_cmp_ps_mask(xv, nmin, _CMP_LT_OQ))));
    run->run_max = _mm512_add_ps(run->run_max, _mm512_mul_ps(gv, as_one(_mm512_cmp_ps_mask(xv, nmax, _CMP_GT_OQ))));
}

static inline run16 empty_run(void) {
    return (run16){_mm512_setzero_ps(), _mm512_setzero_ps(), 0, 0};
}

/* `count` (<= FQ_SUM_RUN) consecutive vectors of one run: dx, and the run's sums. Inputs are held
   in registers, never read again after dx is stored: dx may be g or x itself. */
static inline run16 run_vectors(const float *g, const float *x, float *dx, size_t count,
                                __m512 nmin, __m512 nmax) {
    __m512 gv[FQ_SUM_RUN], xv[FQ_SUM_RUN];
    for (size_t k = 0; k < count; ++k) {
        gv[k] = _mm512_loadu_ps(g + 16 * k);
        xv[k] = _mm512_loadu_ps(x + 16 * k);
    }
    run16 run = empty_run();
    for (size_t k = 0; k < count; ++k) step16(gv[k], xv[k], dx + 16 * k, nmin, nmax, &run);
    if (run.not_finite) {
        run = empty_run();
        for (size_t k = 0; k < count; ++k) products16(gv[k], xv[k], nmin, nmax, &run);
        run.outside = 0xffff; /* the NaN products must reach the float64 sums */
    }
    return run;
}

static void mask_sums__avx512(const float *g, const float *x, float *dx, size_t n,
                              const fq_grid *grid, double lanes_min[FQ_SUM_LANES],
                              double lanes_max[FQ_SUM_LANES]) {
    const __m512 nmin = _mm512_set1_ps(grid->nudged_min), nmax = _mm512_set1_ps(grid->nudged_max);
    __m512d acc[4] = {_mm512_loadu_pd(lanes_min), _mm512_loadu_pd(lanes_min + 8),
                      _mm512_loadu_pd(lanes_max), _mm512_loadu_pd(lanes_max + 8)};
    size_t i = 0;
    for (; i + FQ_SUM_RUN_ELEMENTS <= n; i += FQ_SUM_RUN_ELEMENTS) {
        const run16 run = run_vectors(g + i, x + i, dx + i, FQ_SUM_RUN, nmin, nmax);
        if (run.outside == 0) continue; /* every product was +-0 */
        add_to_lanes(run.run_min, &acc[0], &acc[1]);
        add_to_lanes(run.run_max, &acc[2], &acc[3]);
    }
    store_lanes(acc, lanes_min, lanes_max);
    if (i == n) return;
    /* The last, partial run: its whole vectors, then its elements, all in one run. */
    const size_t vectors = (n - i) / 16;
    const run16 run = run_vectors(g + i, x + i, dx + i, vectors, nmin, nmax);
    float run_min[FQ_SUM_LANES], run_max[FQ_SUM_LANES];
    _mm512_storeu_ps(run_min, run.run_min);
    _mm512_storeu_ps(run_max, run.run_max);
    for (i += 16 * vectors; i < n; ++i) {
        float to_min, to_max;
        dx[i] = fq_element_grad(g[i], x[i], grid->nudged_min, grid->nudged_max, &to_min, &to_max);
        run_min[i % FQ_SUM_LANES] += to_min;
        run_max[i % FQ_SUM_LANES] += to_max;
    }
    fq_flush_runs(run_min, run_max, lanes_min, lanes_max);
}

/* Per-channel kernels walk the rows in memory order (fq_channel_walk.h says how the forward
   chooses). */

/* The grid of 16 positions from one chunk of the interleaved table. */
static inline grid16 chunk_grid(const float *chunk) {
    return (grid16){_mm512_loadu_ps(chunk + 16 * FQ_GRID_NUDGED_MIN),
                    _mm512_loadu_ps(chunk + 16 * FQ_GRID_NUDGED_MAX),
                    _mm512_loadu_ps(chunk + 16 * FQ_GRID_SCALE),
                    _mm512_loadu_ps(chunk + 16 * FQ_GRID_INV_SCALE),
                    _mm512_loadu_ps(chunk + 16 * FQ_GRID_QUANT_ZERO)};
}

/* One vector of the per-channel forward: TF's clamp of x to [nmin, nmax], or, where the table
   allows it (fq_grid_table), the clamp after scaling, which leaves nudged_max unused: the compiler
   drops its load, one of five grid loads a vector ([1024, 1024]: 1.27x -> 1.24x per-tensor).
   `scaled_clamp` is a constant in each caller, which gets a loop of its own. */
static inline __m512 channel_forward16(__m512 x, const grid16 *q, int scaled_clamp, __m512 clamp_max) {
    if (!scaled_clamp) return forward_mul16(x, q);
    const __m512 scaled = _mm512_mul_ps(_mm512_sub_ps(x, q->nudged_min), q->inv_scale);
    /* min and max return their second operand on NaN: a NaN x stays NaN. */
    return finish16_on_fma(_mm512_min_ps(clamp_max, _mm512_max_ps(_mm512_setzero_ps(), scaled)), q);
}

static inline __attribute__((always_inline)) void forward_flat(const float *x, float *out, size_t n,
                                                               const fq_grid_table *grids,
                                                               int scaled_clamp) {
    /* The chunks of the interleaved grid, in order: one pointer that wraps with the period. Four
       vectors a step, loaded before any grid load or store (fq_channel_walk.h has the numbers). */
    const float *chunk = grids->grid, *const end = grids->grid + fq_grid_offset(grids->period, 0);
    const __m512 clamp_max = _mm512_set1_ps(grids->scaled_clamp_max);
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 v[4];
        for (int k = 0; k < 4; ++k) v[k] = _mm512_loadu_ps(x + i + 16 * k);
        for (int k = 0; k < 4; ++k) {
            const grid16 q = chunk_grid(chunk);
            _mm512_storeu_ps(out + i + 16 * k, channel_forward16(v[k], &q, scaled_clamp, clamp_max));
            chunk += FQ_GRID_CHUNK * FQ_GRID_PARAMS;
            chunk = chunk == end ? grids->grid : chunk;
        }
    }
    for (; i < n; i += 16) {
        const grid16 q = chunk_grid(chunk);
        _mm512_storeu_ps(out + i, channel_forward16(_mm512_loadu_ps(x + i), &q, scaled_clamp, clamp_max));
        chunk += FQ_GRID_CHUNK * FQ_GRID_PARAMS;
        chunk = chunk == end ? grids->grid : chunk;
    }
}

/* FQ_ROWS_PER_GRID rows, positions [p0, p1), each grid load serving every row. The rows' next
   vectors are loaded before this step's stores: the rows are a period apart, so when out sits a
   few bytes past x modulo 4 KiB (heap arrays often do), a load issued after those stores would
   wait on them as if it overlapped ([1024, 1024], out 32 bytes past x: 1.58x -> 1.35x
   per-tensor). */
static inline __attribute__((always_inline)) void forward_rows_sharing_grid(
    const float *x, float *out, const fq_grid_table *grids, size_t p0, size_t p1, int scaled_clamp) {
    const size_t period = grids->period;
    const __m512 clamp_max = _mm512_set1_ps(grids->scaled_clamp_max);
    size_t p = p0;
    if (p + 16 <= p1) {
        __m512 v[FQ_ROWS_PER_GRID];
        for (int k = 0; k < FQ_ROWS_PER_GRID; ++k) v[k] = _mm512_loadu_ps(x + k * period + p);
        for (;; p += 16) {
            const grid16 q = load_grid(grids, p);
            const int last = p + 32 > p1;
            __m512 next[FQ_ROWS_PER_GRID];
            if (!last)
                for (int k = 0; k < FQ_ROWS_PER_GRID; ++k) next[k] = _mm512_loadu_ps(x + k * period + p + 16);
            for (int k = 0; k < FQ_ROWS_PER_GRID; ++k)
                _mm512_storeu_ps(out + k * period + p, channel_forward16(v[k], &q, scaled_clamp, clamp_max));
            if (last) break;
            for (int k = 0; k < FQ_ROWS_PER_GRID; ++k) v[k] = next[k];
        }
        p += 16;
    }
    for (int k = 0; k < FQ_ROWS_PER_GRID; ++k)
        fq_channel_forward_row(x + k * period, out + k * period, grids, p, p1);
}

/* FQ_ROWS_PER_GRID_4K rows exactly 4 KiB apart, positions [p0, p1): as forward_rows_sharing_grid,
   but two vectors of each row a step, so that the loads issued before a step's stores reach 128
   bytes past them ([1024, 1024], out 128 bytes past x: 164 -> 129 us; out 0 to 4 KiB past x in
   steps of 64 bytes: at most 1.23x per-tensor, against 1.68x with one vector a step). A single
   walk for both measured 3% slower at four rows ([8192, 128], median over placements of out:
   122 against 118 us). */
static inline __attribute__((always_inline)) void forward_row_pairs_4k(
    const float *x, float *out, const fq_grid_table *grids, size_t p0, size_t p1, int scaled_clamp) {
    enum { ROWS = FQ_ROWS_PER_GRID_4K, VECTORS = 2 };
    const size_t period = grids->period;
    const __m512 clamp_max = _mm512_set1_ps(grids->scaled_clamp_max);
    size_t p = p0;
    if (p + 16 * VECTORS <= p1) {
        __m512 v[ROWS][VECTORS];
        for (int k = 0; k < ROWS; ++k)
            for (int j = 0; j < VECTORS; ++j) v[k][j] = _mm512_loadu_ps(x + k * period + p + 16 * j);
        for (;; p += 16 * VECTORS) {
            const int last = p + 32 * VECTORS > p1;
            __m512 next[ROWS][VECTORS];
            if (!last)
                for (int k = 0; k < ROWS; ++k)
                    for (int j = 0; j < VECTORS; ++j)
                        next[k][j] = _mm512_loadu_ps(x + k * period + p + 16 * (VECTORS + j));
            for (int j = 0; j < VECTORS; ++j) {
                const grid16 q = load_grid(grids, p + 16 * j);
                for (int k = 0; k < ROWS; ++k)
                    _mm512_storeu_ps(out + k * period + p + 16 * j,
                                     channel_forward16(v[k][j], &q, scaled_clamp, clamp_max));
            }
            if (last) break;
            for (int k = 0; k < ROWS; ++k)
                for (int j = 0; j < VECTORS; ++j) v[k][j] = next[k][j];
        }
        p += 16 * VECTORS;
    }
    /* A single vector left here takes more than 64 threads splitting a period of 1024. */
    for (int k = 0; k < ROWS; ++k)
        fq_channel_forward_row(x + k * period, out + k * period, grids, p, p1);
}

static inline __attribute__((always_inline)) void channel_forward_walk(
    const float *x, float *out, size_t rows, const fq_grid_table *grids, size_t p0, size_t p1,
    int scaled_clamp) {
    const size_t period = grids->period;
    if (fq_channel_forward_is_flat(rows, period, p0, p1)) {
        forward_flat(x, out, rows * period, grids, scaled_clamp);
        return;
    }
    size_t r = 0;
    if (period * sizeof(float) == 4096)
        for (; r + FQ_ROWS_PER_GRID_4K <= rows; r += FQ_ROWS_PER_GRID_4K)
            forward_row_pairs_4k(x + r * period, out + r * period, grids, p0, p1, scaled_clamp);
    for (; r + FQ_ROWS_PER_GRID <= rows; r += FQ_ROWS_PER_GRID)
        forward_rows_sharing_grid(x + r * period, out + r * period, grids, p0, p1, scaled_clamp);
    const __m512 clamp_max = _mm512_set1_ps(grids->scaled_clamp_max);
    for (; r < rows; ++r) {
        const float *xr = x + r * period;
        float *outr = out + r * period;
        size_t p = p0;
        for (; p + 16 <= p1; p += 16) {
            const grid16 q = load_grid(grids, p);
            _mm512_storeu_ps(outr + p, channel_forward16(_mm512_loadu_ps(xr + p), &q, scaled_clamp, clamp_max));
        }
        fq_channel_forward_row(xr, outr, grids, p, p1);
    }
}

static void channel_forward__avx512(const float *x, float *out, size_t rows, const fq_grid_table *t,
                                    size_t p0, size_t p1) {
    const fq_grid_table grids = *t; /* a local copy: stores to out cannot change it */
    if (grids.scaled_clamp_max > 0.0f)
        channel_forward_walk(x, out, rows, &grids, p0, p1, 1);
    else
        channel_forward_walk(x, out, rows, &grids, p0, p1, 0);
}

/* Adds 16 products into the float64 accumulators of 16 positions. */
static inline void add_to_positions(__m512 products, double *acc) {
    const __m512d lo = _mm512_add_pd(_mm512_loadu_pd(acc), _mm512_cvtps_pd(_mm512_castps512_ps256(products)));
    const __m512d hi = _mm512_add_pd(_mm512_loadu_pd(acc + 8), _mm512_cvtps_pd(_mm512_extractf32x8_ps(products, 1)));
    _mm512_storeu_pd(acc, lo);
    _mm512_storeu_pd(acc + 8, hi);
}

/* Up to four vectors of a per-channel gradient, loaded before any dx is stored (dx may alias g or
   x; and a load from the next row cannot wait on a store 4 KiB below it). */
typedef struct {
    __m512 g[4], x[4], nmin[4], nmax[4];
    float *dx[4];
    double *acc_min[4], *acc_max[4];
} group16;

/* dx of the group's `count` vectors; and unless all of their products are +-0 (x inside the grid
   and g finite: one branch for the group, with no other compare on the way), the products of each
   vector and side that has any other, added to its positions' accumulators (skipping +-0 products
   keeps the bits: accumulators start at +0). A group with a clipped element mostly has one: adding
   only its vector and side, not all eight, took [1024, 1024] from 1.6-1.7x to 1.28-1.36x
   per-tensor. */
static inline void grad_group16(const group16 *v, int count) {
    __mmask16 quiet = 0xffff;
    for (int k = 0; k < count; ++k) {
        const __mmask16 inside = between16(v->x[k], v->nmin[k], v->nmax[k]);
        _mm512_storeu_ps(v->dx[k], _mm512_mul_ps(v->g[k], as_one(inside)));
        quiet &= _kandn_mask16(_mm512_fpclass_ps_mask(v->g[k], FQ_NOT_FINITE), inside);
    }
    if (quiet == 0xffff) return;
    for (int k = 0; k < count; ++k) {
        const __mmask16 below = _mm512_cmp_ps_mask(v->x[k], v->nmin[k], _CMP_LT_OQ);
        const __mmask16 above = _mm512_cmp_ps_mask(v->x[k], v->nmax[k], _CMP_GT_OQ);
        const __mmask16 not_finite = _mm512_fpclass_ps_mask(v->g[k], FQ_NOT_FINITE);
        if (below | not_finite) add_to_positions(_mm512_mul_ps(v->g[k], as_one(below)), v->acc_min[k]);
        if (above | not_finite) add_to_positions(_mm512_mul_ps(v->g[k], as_one(above)), v->acc_max[k]);
    }
}

/* Vector k of a group: its data at element `at`, its grids from table chunk `chunk`, and the
   accumulators of its positions. */
static inline void group_vector(group16 *v, int k, const float *g, const float *x, float *dx,
                                size_t at, const float *chunk, double *acc_min, double *acc_max) {
    v->g[k] = _mm512_loadu_ps(g + at);
    v->x[k] = _mm512_loadu_ps(x + at);
    v->nmin[k] = _mm512_loadu_ps(chunk + FQ_GRID_CHUNK * FQ_GRID_NUDGED_MIN);
    v->nmax[k] = _mm512_loadu_ps(chunk + FQ_GRID_CHUNK * FQ_GRID_NUDGED_MAX);
    v->dx[k] = dx + at;
    v->acc_min[k] = acc_min;
    v->acc_max[k] = acc_max;
}

/* n elements (whole vectors) from the start of a period of `vectors` (1 to 8) vectors, as one flat
   walk whose grids stay in registers (no grid load per vector, as in the per-tensor loop). Groups
   of four vectors step through units of lcm(vectors, 4) vectors, so that each vector's position is
   a constant of the unrolled unit. */
static inline __attribute__((always_inline)) void grad_in_registers(
    const float *g, const float *x, float *dx, size_t n, const fq_grid_table *t, double *acc_min,
    double *acc_max, const int vectors) {
    __m512 nmin[8], nmax[8];
    for (int v = 0; v < vectors; ++v) {
        nmin[v] = _mm512_loadu_ps(fq_grid_param(t, 16 * (size_t)v, FQ_GRID_NUDGED_MIN));
        nmax[v] = _mm512_loadu_ps(fq_grid_param(t, 16 * (size_t)v, FQ_GRID_NUDGED_MAX));
    }
    const int unit = vectors % 4 == 0 ? vectors : vectors % 2 == 0 ? 2 * vectors : 4 * vectors;
    size_t i = 0;
    for (; i + 16 * (size_t)unit <= n; i += 16 * (size_t)unit)
#pragma GCC unroll 8 /* whole units: each vector's grid is then a register, not an indexed load */
        for (int j = 0; j < unit; j += 4) {
            group16 v;
            for (int k = 0; k < 4; ++k) {
                const size_t at = i + 16 * (size_t)(j + k), p = 16 * (size_t)((j + k) % vectors);
                v.g[k] = _mm512_loadu_ps(g + at);
                v.x[k] = _mm512_loadu_ps(x + at);
                v.nmin[k] = nmin[(j + k) % vectors];
                v.nmax[k] = nmax[(j + k) % vectors];
                v.dx[k] = dx + at;
                v.acc_min[k] = acc_min + p;
                v.acc_max[k] = acc_max + p;
            }
            grad_group16(&v, 4);
        }
    /* The last rows, fewer than a unit: one vector at a time (a unit starts at position 0). */
    for (int j = 0; i < n; i += 16, ++j) {
        const size_t p = 16 * (size_t)(j % vectors);
        const group16 v = {{_mm512_loadu_ps(g + i)}, {_mm512_loadu_ps(x + i)}, {nmin[j % vectors]},
                           {nmax[j % vectors]}, {dx + i}, {acc_min + p}, {acc_max + p}};
        grad_group16(&v, 1);
    }
}

/* grad_in_registers for a period of 16 to 128 positions (a multiple of 16). */
static void grad_registers_by_period(const float *g, const float *x, float *dx, size_t n,
                                     const fq_grid_table *t, double *acc_min, double *acc_max) {
    switch (t->period / 16) {
    case 1: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 1); return;
    case 2: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 2); return;
    case 3: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 3); return;
    case 4: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 4); return;
    case 5: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 5); return;
    case 6: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 6); return;
    case 7: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 7); return;
    default: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 8); return;
    }
}

/* One row, positions [p0, p1) (p0 a multiple of 16): four vectors a group, their grids read from
   consecutive chunks of the table through one pointer; then one vector at a time. */
static void grad_row(const float *g, const float *x, float *dx, const fq_grid_table *t, size_t p0,
                     size_t p1, double *acc_min, double *acc_max) {
    const float *chunk = fq_grid_param(t, p0, FQ_GRID_NUDGED_MIN);
    size_t p = p0;
    for (; p + 64 <= p1; p += 64, chunk += 4 * FQ_GRID_CHUNK * FQ_GRID_PARAMS) {
        group16 v;
        for (int k = 0; k < 4; ++k) {
            const size_t at = p + 16 * (size_t)k;
            group_vector(&v, k, g, x, dx, at, chunk + (size_t)k * FQ_GRID_CHUNK * FQ_GRID_PARAMS,
                         acc_min + at, acc_max + at);
        }
        grad_group16(&v, 4);
    }
    for (; p + 16 <= p1; p += 16) {
        group16 v;
        group_vector(&v, 0, g, x, dx, p, fq_grid_param(t, p, FQ_GRID_NUDGED_MIN), acc_min + p,
                     acc_max + p);
        grad_group16(&v, 1);
    }
    fq_channel_row(g, x, dx, t, p, p1, acc_min, acc_max);
}

/* Whole periods of up to 8 vectors keep their grids in registers; other calls go row by row (grid
   loads shared across rows were slower at a 4 KiB row stride). */
static void channel_mask_sums__avx512(const float *g, const float *x, float *dx, size_t rows,
                                      const fq_grid_table *table, size_t p0, size_t p1,
                                      double *acc_min, double *acc_max) {
    const fq_grid_table grids = *table, *t = &grids; /* a local copy: stores cannot change it */
    const size_t period = t->period;
    if (p0 == 0 && p1 == period && period % 16 == 0 && period <= 128) {
        grad_registers_by_period(g, x, dx, rows * period, t, acc_min, acc_max);
        return;
    }
    for (size_t r = 0; r < rows; ++r) {
        const size_t base = r * period;
        grad_row(g + base, x + base, dx + base, t, p0, p1, acc_min, acc_max);
    }
}

/* One partial vector of an aligned walk, `lanes` of it, with the grids of rotated chunk `chunk`.
   Its other lanes load as g = x = 0, whose products are +0: adding them to the accumulators of
   the positions they stand for leaves those unchanged, so the sums go in without a branch. */
static inline void grad_partial16(const float *g, const float *x, float *dx, __mmask16 lanes,
                                  const float *chunk, double *acc_min, double *acc_max) {
    const __m512 gv = _mm512_maskz_loadu_ps(lanes, g), xv = _mm512_maskz_loadu_ps(lanes, x);
    const __m512 nmin = _mm512_loadu_ps(chunk + FQ_GRID_CHUNK * FQ_GRID_NUDGED_MIN);
    const __m512 nmax = _mm512_loadu_ps(chunk + FQ_GRID_CHUNK * FQ_GRID_NUDGED_MAX);
    _mm512_mask_storeu_ps(dx, lanes, _mm512_mul_ps(gv, as_one(between16(xv, nmin, nmax))));
    add_to_positions(_mm512_mul_ps(gv, as_one(_mm512_cmp_ps_mask(xv, nmin, _CMP_LT_OQ))), acc_min);
    add_to_positions(_mm512_mul_ps(gv, as_one(_mm512_cmp_ps_mask(xv, nmax, _CMP_GT_OQ))), acc_max);
}

/* The next chunk of a walk at position p of a period, wrapping to the period's start. */
static inline void next_chunk(const fq_grid_table *t, size_t *p, const float **chunk) {
    *p += 16;
    *chunk += FQ_GRID_CHUNK * FQ_GRID_PARAMS;
    if (*p == t->period) {
        *p = 0;
        *chunk = t->grid;
    }
}

/* n elements (whole vectors) from the start of a period, grids loaded chunk by chunk through one
   pointer that wraps with the period. */
static void grad_flat(const float *g, const float *x, float *dx, size_t n, const fq_grid_table *t,
                      double *acc_min, double *acc_max) {
    const float *chunk = t->grid;
    size_t i = 0, p = 0; /* element i is at position p, the first of `chunk` */
    for (; i + 64 <= n; i += 64) {
        group16 v;
        for (int k = 0; k < 4; ++k) {
            group_vector(&v, k, g, x, dx, i + 16 * (size_t)k, chunk, acc_min + p, acc_max + p);
            next_chunk(t, &p, &chunk);
        }
        grad_group16(&v, 4);
    }
    for (; i < n; i += 16) {
        group16 v;
        group_vector(&v, 0, g, x, dx, i, chunk, acc_min + p, acc_max + p);
        grad_group16(&v, 1);
        next_chunk(t, &p, &chunk);
    }
}

/* fq_fake_quant_kernels.channel_mask_sums_aligned: the rows as one walk of 64-byte aligned
   vectors, each position still meeting its rows in order. Its first and last vectors are partial:
   positions [0, head) of the first row, and positions [period - 16 + head, period) of the last,
   both in the rotated table's last chunk; every whole vector between holds the 16 positions of
   one chunk, whose accumulators start `head` past the chunk's rotated position. */
static void channel_mask_sums_aligned__avx512(const float *g, const float *x, float *dx,
                                              size_t rows, const fq_grid_table *table, size_t head,
                                              double *acc_min, double *acc_max) {
    const fq_grid_table grids = *table, *t = &grids; /* a local copy: stores cannot change it */
    const size_t period = t->period, n = rows * period - 16;
    const float *const last = t->grid + fq_grid_offset(period - 16, 0);
    g += head;
    x += head;
    dx += head;
    acc_min += head;
    acc_max += head;
    grad_partial16(g - 16, x - 16, dx - 16, (__mmask16)(0xffffu << (16 - head)), last,
                   acc_min + period - 16, acc_max + period - 16);
    if (period <= 128)
        grad_registers_by_period(g, x, dx, n, t, acc_min, acc_max);
    else
        grad_flat(g, x, dx, n, t, acc_min, acc_max);
    grad_partial16(g + n, x + n, dx + n, (__mmask16)(0xffffu >> head), last, acc_min + period - 16,
                   acc_max + period - 16);
}

/* fq_nudge of 16 ranges, operation for operation (the selection of the zero point as masks). */
static inline grid16 nudge16(__m512 min, __m512 max, float quant_min, float quant_max) {
    const __m512 qmin = _mm512_set1_ps(quant_min), qmax = _mm512_set1_ps(quant_max);
    const __m512 levels = _mm512_set1_ps(quant_max - quant_min), range = _mm512_sub_ps(max, min);
    const __m512 scale = _mm512_div_ps(range, levels), inv_scale = _mm512_div_ps(levels, range);
    const __m512 from_min = _mm512_sub_ps(qmin, _mm512_div_ps(min, scale));
    /* roundf where it is kept (from_min in [quant_min, quant_max], so >= 0): the truncation, plus
       one where the (exact) fraction is at least a half. */
    const __m512 whole = _mm512_roundscale_ps(from_min, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(from_min, whole), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    __m512 zero_point = _mm512_mask_add_ps(whole, up, whole, _mm512_set1_ps(1.0f));
    zero_point = _mm512_mask_mov_ps(zero_point, _mm512_cmp_ps_mask(from_min, qmax, _CMP_GT_OQ), qmax);
    zero_point = _mm512_mask_mov_ps(zero_point, _mm512_cmp_ps_mask(from_min, qmin, _CMP_LT_OQ), qmin);
    zero_point = _mm512_mask_mov_ps(zero_point, _mm512_cmp_ps_mask(from_min, from_min, _CMP_UNORD_Q),
                                    _mm512_setzero_ps());
    grid16 q;
    q.nudged_min = _mm512_mul_ps(_mm512_sub_ps(qmin, zero_point), scale);
    q.nudged_max = _mm512_mul_ps(_mm512_sub_ps(qmax, zero_point), scale);
    q.scale = scale;
    q.inv_scale = inv_scale;
    q.quant_zero = _mm512_roundscale_ps(_mm512_sub_ps(_mm512_set1_ps(0.5f), _mm512_mul_ps(q.nudged_min, inv_scale)),
                                        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    return q;
}

static void nudge_channels__avx512(const float *min, const float *max, size_t channels, int num_bits,
                                   int narrow_range, float *grid) {
    const float quant_min = fq_quant_min(narrow_range), quant_max = fq_quant_max(num_bits);
    size_t c = 0;
    for (; c + 16 <= channels; c += 16) {
        const grid16 q = nudge16(_mm512_loadu_ps(min + c), _mm512_loadu_ps(max + c), quant_min, quant_max);
        _mm512_storeu_ps(grid + fq_grid_offset(c, FQ_GRID_NUDGED_MIN), q.nudged_min);
        _mm512_storeu_ps(grid + fq_grid_offset(c, FQ_GRID_NUDGED_MAX), q.nudged_max);
        _mm512_storeu_ps(grid + fq_grid_offset(c, FQ_GRID_SCALE), q.scale);
        _mm512_storeu_ps(grid + fq_grid_offset(c, FQ_GRID_INV_SCALE), q.inv_scale);
        _mm512_storeu_ps(grid + fq_grid_offset(c, FQ_GRID_QUANT_ZERO), q.quant_zero);
    }
    fq_nudge_positions(min, max, c, channels, num_bits, narrow_range, grid);
}

/* floorf((a - quant_zero) + 0.5f) of 16 lanes, as the per-channel forward computes it. */
static inline __m512 grid_index16(__m512 a, __m512 quant_zero) {
    return _mm512_roundscale_ps(_mm512_add_ps(_mm512_sub_ps(a, quant_zero), _mm512_set1_ps(0.5f)),
                                _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}

/* fq_allows_scaled_clamp of 16 positions a step (a 1024-channel forward spent 2-3 us on it one
   position at a time). */
static float scaled_clamp_max__avx512(const float *grid, const float *position_min,
                                      const float *position_max, size_t positions, float span) {
    const __m512 spans = _mm512_set1_ps(span), tiny = _mm512_set1_ps(FLT_MIN);
    size_t p = 0;
    for (; p + 16 <= positions; p += 16) {
        const grid16 q = chunk_grid(grid + fq_grid_offset(p, 0));
        const __mmask16 zero_range =
            _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(position_min + p)), tiny, _CMP_LT_OQ) &
            _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(position_max + p)), tiny, _CMP_LT_OQ);
        const __mmask16 finite = _mm512_cmp_ps_mask(q.inv_scale, _mm512_setzero_ps(), _CMP_GT_OQ) &
                                 ~_mm512_fpclass_ps_mask(q.inv_scale, FQ_NOT_FINITE) &
                                 ~_mm512_fpclass_ps_mask(q.nudged_min, FQ_NOT_FINITE);
        const __m512 a_max = _mm512_mul_ps(_mm512_sub_ps(q.nudged_max, q.nudged_min), q.inv_scale);
        const __mmask16 same = _mm512_cmp_ps_mask(grid_index16(a_max, q.quant_zero),
                                                  grid_index16(spans, q.quant_zero), _CMP_EQ_OQ);
        if ((__mmask16)((finite & same) | zero_range) != 0xffff) return 0.0f;
    }
    for (; p < positions; ++p)
        if (!fq_allows_scaled_clamp(grid, p, position_min[p], position_max[p], span)) return 0.0f;
    return span;
}

const fq_fake_quant_kernels fq_fake_quant__avx512 = {
    forward_mul__avx512,     forward_div__avx512,       mask__avx512,
    mask_sums__avx512,       channel_forward__avx512,   channel_mask_sums__avx512,
    nudge_channels__avx512,   scaled_clamp_max__avx512, channel_mask_sums_aligned__avx512,
};
