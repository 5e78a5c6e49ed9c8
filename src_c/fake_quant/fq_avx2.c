/* AVX2 fake-quant kernels (8 lanes); bit-identical to fq_scalar.c, including the sum lane order. */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "fq_avx2.c must be compiled with -mavx2 -mfma"
#endif
#include <immintrin.h>

#include "fq_channel_walk.h"
#include "fq_element.h"

typedef struct {
    __m256 nudged_min, nudged_max, scale, inv_scale, quant_zero;
} grid8;

static inline grid8 broadcast(const fq_grid *q) {
    return (grid8){_mm256_set1_ps(q->nudged_min), _mm256_set1_ps(q->nudged_max),
                   _mm256_set1_ps(q->scale), _mm256_set1_ps(q->inv_scale),
                   _mm256_set1_ps(q->quant_zero)};
}

static inline grid8 load_grid(const fq_grid_table *t, size_t p) {
    return (grid8){_mm256_loadu_ps(fq_grid_param(t, p, FQ_GRID_NUDGED_MIN)),
                   _mm256_loadu_ps(fq_grid_param(t, p, FQ_GRID_NUDGED_MAX)),
                   _mm256_loadu_ps(fq_grid_param(t, p, FQ_GRID_SCALE)),
                   _mm256_loadu_ps(fq_grid_param(t, p, FQ_GRID_INV_SCALE)),
                   _mm256_loadu_ps(fq_grid_param(t, p, FQ_GRID_QUANT_ZERO))};
}

/* minps/maxps return their second operand on NaN: min(nmax, x), max(nmin, c) keep a NaN x. */
static inline __m256 clamped8(__m256 x, const grid8 *q) {
    return _mm256_max_ps(q->nudged_min, _mm256_min_ps(q->nudged_max, x));
}

/* floor(t) * scale. */
static inline __m256 floor_scaled8(__m256 t, const grid8 *q) {
    return _mm256_mul_ps(_mm256_round_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC), q->scale);
}

/* a - b as a * 1 - b: the same rounding (NaNs and signed zeros included), on the FMA pipes, as in
   fq_avx512.c. */
static inline __m256 sub8_on_fma(__m256 a, __m256 b) { return _mm256_fmsub_ps(a, _mm256_set1_ps(1.0f), b); }

/* The dividing forward is bound by the divider and keeps the plain operations. */
static inline __m256 forward_div8(__m256 x, const grid8 *q) {
    const __m256 scaled = _mm256_div_ps(_mm256_sub_ps(clamped8(x, q), q->nudged_min), q->scale);
    return floor_scaled8(_mm256_add_ps(_mm256_sub_ps(scaled, q->quant_zero), _mm256_set1_ps(0.5f)), q);
}

/* Two subtractions on the FMAs balance the multiplying forward's operations four and four between
   the two kinds of pipes, as in fq_avx512.c. */
static inline __m256 forward_mul8(__m256 x, const grid8 *q) {
    const __m256 scaled = _mm256_mul_ps(sub8_on_fma(clamped8(x, q), q->nudged_min), q->inv_scale);
    return floor_scaled8(_mm256_add_ps(sub8_on_fma(scaled, q->quant_zero), _mm256_set1_ps(0.5f)), q);
}

static inline __m256 as_one(__m256 mask) { return _mm256_and_ps(mask, _mm256_set1_ps(1.0f)); }

static inline __m256 between8(__m256 x, __m256 nudged_min, __m256 nudged_max) {
    return _mm256_and_ps(_mm256_cmp_ps(x, nudged_min, _CMP_GE_OQ),
                         _mm256_cmp_ps(x, nudged_max, _CMP_LE_OQ));
}

/* Both forward kernels; `divide` is a constant in each caller, which gets a loop of its own. */
static inline void forward_loop(const float *x, float *out, size_t n, const fq_grid *grid, int divide) {
    const grid8 q = broadcast(grid);
    size_t i = 0;
    /* Four vectors a step, all loaded before any is stored: more independent chains in flight;
       the next step's vectors are loaded before this step's stores (4 KiB false overlaps, as in
       fq_avx512.c). */
    if (n >= 32) {
        __m256 v[4];
        for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
        for (;; i += 32) {
            const int last = i + 64 > n;
            __m256 next[4];
            if (!last)
                for (int k = 0; k < 4; ++k) next[k] = _mm256_loadu_ps(x + i + 32 + 8 * k);
            for (int k = 0; k < 4; ++k)
                _mm256_storeu_ps(out + i + 8 * k, divide ? forward_div8(v[k], &q) : forward_mul8(v[k], &q));
            if (last) break;
            for (int k = 0; k < 4; ++k) v[k] = next[k];
        }
        i += 32;
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(out + i, divide ? forward_div8(v, &q) : forward_mul8(v, &q));
    }
    for (; i < n; ++i)
        out[i] = divide ? fq_element_div(x[i], grid)
                        : fq_element_mul(x[i], grid->nudged_min, grid->nudged_max, grid->inv_scale,
                                         grid->quant_zero, grid->scale);
}

static void forward_mul__avx2(const float *x, float *out, size_t n, const fq_grid *grid) {
    forward_loop(x, out, n, grid, 0);
}

static void forward_div__avx2(const float *x, float *out, size_t n, const fq_grid *grid) {
    forward_loop(x, out, n, grid, 1);
}

static void mask__avx2(const float *g, const float *x, float *dx, size_t n, const fq_grid *grid) {
    const __m256 nmin = _mm256_set1_ps(grid->nudged_min), nmax = _mm256_set1_ps(grid->nudged_max);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 gv[4], xv[4];
        for (int k = 0; k < 4; ++k) {
            gv[k] = _mm256_loadu_ps(g + i + 8 * k);
            xv[k] = _mm256_loadu_ps(x + i + 8 * k);
        }
        for (int k = 0; k < 4; ++k)
            _mm256_storeu_ps(dx + i + 8 * k, _mm256_mul_ps(gv[k], as_one(between8(xv[k], nmin, nmax))));
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 keep = as_one(between8(_mm256_loadu_ps(x + i), nmin, nmax));
        _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(g + i), keep));
    }
    for (; i < n; ++i) dx[i] = fq_element_mask(g[i], x[i], grid->nudged_min, grid->nudged_max);
}

/* Adds 8 float32 runs into 8 float64 lanes (two 4-lane accumulators). */
static inline void add_to_lanes(__m256 runs, __m256d *lo, __m256d *hi) {
    *lo = _mm256_add_pd(*lo, _mm256_cvtps_pd(_mm256_castps256_ps128(runs)));
    *hi = _mm256_add_pd(*hi, _mm256_cvtps_pd(_mm256_extractf128_ps(runs, 1)));
}

/* dx of 8 elements; where a lane is outside the grid or has a non-finite g, also the products
   g * (x < nmin), g * (x > nmax) added into the float32 runs (elsewhere they are +-0, which leaves a
   run that starts at +0 unchanged). Returns whether it added them. g and x are read once, before dx
   is stored: dx may be g or x itself. */
static inline int grad8(const float *g, const float *x, float *dx, __m256 nmin, __m256 nmax,
                        __m256 *run_min, __m256 *run_max) {
    const __m256 gv = _mm256_loadu_ps(g), xv = _mm256_loadu_ps(x);
    const __m256 inside = between8(xv, nmin, nmax);
    const __m256 abs_g = _mm256_and_ps(gv, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    const __m256 finite = _mm256_cmp_ps(abs_g, _mm256_set1_ps(INFINITY), _CMP_LT_OQ);
    const int needed = _mm256_movemask_ps(_mm256_and_ps(inside, finite)) != 0xff;
    if (needed) {
        *run_min = _mm256_add_ps(*run_min, _mm256_mul_ps(gv, as_one(_mm256_cmp_ps(xv, nmin, _CMP_LT_OQ))));
        *run_max = _mm256_add_ps(*run_max, _mm256_mul_ps(gv, as_one(_mm256_cmp_ps(xv, nmax, _CMP_GT_OQ))));
    }
    _mm256_storeu_ps(dx, _mm256_mul_ps(gv, as_one(inside)));
    return needed;
}

static void mask_sums__avx2(const float *g, const float *x, float *dx, size_t n, const fq_grid *grid,
                            double lanes_min[FQ_SUM_LANES], double lanes_max[FQ_SUM_LANES]) {
    const __m256 nmin = _mm256_set1_ps(grid->nudged_min), nmax = _mm256_set1_ps(grid->nudged_max);
    __m256d mn[4], mx[4];
    for (int j = 0; j < 4; ++j) {
        mn[j] = _mm256_loadu_pd(lanes_min + 4 * j);
        mx[j] = _mm256_loadu_pd(lanes_max + 4 * j);
    }
    size_t i = 0;
    for (; i + FQ_SUM_RUN_ELEMENTS <= n; i += FQ_SUM_RUN_ELEMENTS) {
        /* Lanes 0-7 come from the even vectors of the run, lanes 8-15 from the odd ones. */
        __m256 run_min[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        __m256 run_max[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        int needed = 0;
        for (int k = 0; k < 2 * FQ_SUM_RUN; ++k)
            needed |= grad8(g + i + 8 * k, x + i + 8 * k, dx + i + 8 * k, nmin, nmax, &run_min[k & 1],
                            &run_max[k & 1]);
        if (needed == 0) continue; /* every product was +-0 */
        for (int h = 0; h < 2; ++h) {
            add_to_lanes(run_min[h], &mn[2 * h], &mn[2 * h + 1]);
            add_to_lanes(run_max[h], &mx[2 * h], &mx[2 * h + 1]);
        }
    }
    for (int j = 0; j < 4; ++j) {
        _mm256_storeu_pd(lanes_min + 4 * j, mn[j]);
        _mm256_storeu_pd(lanes_max + 4 * j, mx[j]);
    }
    if (i == n) return;
    /* The last, partial run, element by element. */
    float run_min[FQ_SUM_LANES] = {0}, run_max[FQ_SUM_LANES] = {0};
    for (; i < n; ++i) {
        float to_min, to_max;
        dx[i] = fq_element_grad(g[i], x[i], grid->nudged_min, grid->nudged_max, &to_min, &to_max);
        run_min[i % FQ_SUM_LANES] += to_min;
        run_max[i % FQ_SUM_LANES] += to_max;
    }
    fq_flush_runs(run_min, run_max, lanes_min, lanes_max);
}

/* Per-channel kernels walk the rows in memory order; fq_channel_walk.h says how the forward
   chooses. */
/* The grid of 8 positions at `c`, inside one chunk of the interleaved table. */
static inline grid8 chunk_grid(const float *c) {
    return (grid8){_mm256_loadu_ps(c + 16 * FQ_GRID_NUDGED_MIN),
                   _mm256_loadu_ps(c + 16 * FQ_GRID_NUDGED_MAX),
                   _mm256_loadu_ps(c + 16 * FQ_GRID_SCALE),
                   _mm256_loadu_ps(c + 16 * FQ_GRID_INV_SCALE),
                   _mm256_loadu_ps(c + 16 * FQ_GRID_QUANT_ZERO)};
}

static void forward_flat(const float *x, float *out, size_t n, const fq_grid_table *grids) {
    /* The chunks of the interleaved grid, in order: one pointer that wraps with the period; each
       chunk of 16 positions is two vectors. Two chunks a step, all four vectors loaded before
       any is stored. */
    const float *chunk = grids->grid, *const end = grids->grid + fq_grid_offset(grids->period, 0);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 v[4];
        for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + i + 8 * k);
        for (int k = 0; k < 4; ++k) {
            const float *c = chunk + 8 * (k & 1);
            const grid8 q = chunk_grid(c);
            _mm256_storeu_ps(out + i + 8 * k, forward_mul8(v[k], &q));
            if (k & 1) {
                chunk += FQ_GRID_CHUNK * FQ_GRID_PARAMS;
                chunk = chunk == end ? grids->grid : chunk;
            }
        }
    }
    for (; i < n; i += 16) {
        for (int half = 0; half < 2; ++half) {
            const float *c = chunk + 8 * half;
            const grid8 q = chunk_grid(c);
            _mm256_storeu_ps(out + i + 8 * half, forward_mul8(_mm256_loadu_ps(x + i + 8 * half), &q));
        }
        chunk += FQ_GRID_CHUNK * FQ_GRID_PARAMS;
        chunk = chunk == end ? grids->grid : chunk;
    }
}

/* FQ_ROWS_PER_GRID rows, positions [p0, p1), each grid load serving every row. The rows' next
   vectors are loaded before this step's stores, as in fq_avx512.c (4 KiB false overlaps). */
static void forward_rows_sharing_grid(const float *x, float *out, const fq_grid_table *grids,
                                      size_t p0, size_t p1) {
    const size_t period = grids->period;
    size_t p = p0;
    if (p + 8 <= p1) {
        __m256 v[FQ_ROWS_PER_GRID];
        for (int k = 0; k < FQ_ROWS_PER_GRID; ++k) v[k] = _mm256_loadu_ps(x + k * period + p);
        for (;; p += 8) {
            const grid8 q = load_grid(grids, p);
            const int last = p + 16 > p1;
            __m256 next[FQ_ROWS_PER_GRID];
            if (!last)
                for (int k = 0; k < FQ_ROWS_PER_GRID; ++k) next[k] = _mm256_loadu_ps(x + k * period + p + 8);
            for (int k = 0; k < FQ_ROWS_PER_GRID; ++k)
                _mm256_storeu_ps(out + k * period + p, forward_mul8(v[k], &q));
            if (last) break;
            for (int k = 0; k < FQ_ROWS_PER_GRID; ++k) v[k] = next[k];
        }
        p += 8;
    }
    for (int k = 0; k < FQ_ROWS_PER_GRID; ++k)
        fq_channel_forward_row(x + k * period, out + k * period, grids, p, p1);
}

static void channel_forward__avx2(const float *x, float *out, size_t rows, const fq_grid_table *t,
                                  size_t p0, size_t p1) {
    const fq_grid_table grids = *t; /* a local copy: stores to out cannot change it */
    const size_t period = grids.period;
    if (fq_channel_forward_is_flat(rows, period, p0, p1)) {
        forward_flat(x, out, rows * period, &grids);
        return;
    }
    size_t r = 0;
    for (; r + FQ_ROWS_PER_GRID <= rows; r += FQ_ROWS_PER_GRID)
        forward_rows_sharing_grid(x + r * period, out + r * period, &grids, p0, p1);
    for (; r < rows; ++r) {
        const float *xr = x + r * period;
        float *outr = out + r * period;
        size_t p = p0;
        for (; p + 8 <= p1; p += 8) {
            const grid8 q = load_grid(&grids, p);
            _mm256_storeu_ps(outr + p, forward_mul8(_mm256_loadu_ps(xr + p), &q));
        }
        fq_channel_forward_row(xr, outr, &grids, p, p1);
    }
}

/* Adds 8 products into the float64 accumulators of 8 positions. */
static inline void add_to_positions(__m256 products, double *acc) {
    const __m256d lo = _mm256_add_pd(_mm256_loadu_pd(acc), _mm256_cvtps_pd(_mm256_castps256_ps128(products)));
    const __m256d hi = _mm256_add_pd(_mm256_loadu_pd(acc + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(products, 1)));
    _mm256_storeu_pd(acc, lo);
    _mm256_storeu_pd(acc + 4, hi);
}

static void channel_mask_sums__avx2(const float *g, const float *x, float *dx, size_t rows,
                                    const fq_grid_table *table, size_t p0, size_t p1,
                                    double *acc_min, double *acc_max) {
    const fq_grid_table grids = *table, *t = &grids; /* a local copy: stores cannot change it */
    for (size_t r = 0; r < rows; ++r) {
        const size_t base = r * t->period;
        const float *gr = g + base, *xr = x + base;
        float *dxr = dx + base;
        size_t p = p0;
        for (; p + 8 <= p1; p += 8) {
            const __m256 nmin = _mm256_loadu_ps(fq_grid_param(t, p, FQ_GRID_NUDGED_MIN));
            const __m256 nmax = _mm256_loadu_ps(fq_grid_param(t, p, FQ_GRID_NUDGED_MAX));
            __m256 to_min = _mm256_setzero_ps(), to_max = _mm256_setzero_ps();
            /* Lanes inside with finite g add +-0, which leaves the accumulators unchanged. */
            if (!grad8(gr + p, xr + p, dxr + p, nmin, nmax, &to_min, &to_max)) continue;
            add_to_positions(to_min, acc_min + p);
            add_to_positions(to_max, acc_max + p);
        }
        fq_channel_row(gr, xr, dxr, t, p, p1, acc_min, acc_max);
    }
}

/* fq_nudge of 8 ranges, operation for operation (the selection of the zero point as blends). */
static inline grid8 nudge8(__m256 min, __m256 max, float quant_min, float quant_max) {
    const __m256 qmin = _mm256_set1_ps(quant_min), qmax = _mm256_set1_ps(quant_max);
    const __m256 levels = _mm256_set1_ps(quant_max - quant_min), range = _mm256_sub_ps(max, min);
    const __m256 scale = _mm256_div_ps(range, levels), inv_scale = _mm256_div_ps(levels, range);
    const __m256 from_min = _mm256_sub_ps(qmin, _mm256_div_ps(min, scale));
    /* roundf where it is kept (from_min in [quant_min, quant_max], so >= 0): the truncation, plus
       one where the (exact) fraction is at least a half. */
    const __m256 whole = _mm256_round_ps(from_min, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 up = _mm256_cmp_ps(_mm256_sub_ps(from_min, whole), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 zero_point = _mm256_blendv_ps(whole, _mm256_add_ps(whole, _mm256_set1_ps(1.0f)), up);
    zero_point = _mm256_blendv_ps(zero_point, qmax, _mm256_cmp_ps(from_min, qmax, _CMP_GT_OQ));
    zero_point = _mm256_blendv_ps(zero_point, qmin, _mm256_cmp_ps(from_min, qmin, _CMP_LT_OQ));
    zero_point = _mm256_blendv_ps(zero_point, _mm256_setzero_ps(),
                                  _mm256_cmp_ps(from_min, from_min, _CMP_UNORD_Q));
    grid8 q;
    q.nudged_min = _mm256_mul_ps(_mm256_sub_ps(qmin, zero_point), scale);
    q.nudged_max = _mm256_mul_ps(_mm256_sub_ps(qmax, zero_point), scale);
    q.scale = scale;
    q.inv_scale = inv_scale;
    q.quant_zero = _mm256_round_ps(_mm256_sub_ps(_mm256_set1_ps(0.5f), _mm256_mul_ps(q.nudged_min, inv_scale)),
                                   _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    return q;
}

static void nudge_channels__avx2(const float *min, const float *max, size_t channels, int num_bits,
                                 int narrow_range, float *grid) {
    const float quant_min = fq_quant_min(narrow_range), quant_max = fq_quant_max(num_bits);
    size_t c = 0;
    for (; c + 8 <= channels; c += 8) {
        const grid8 q = nudge8(_mm256_loadu_ps(min + c), _mm256_loadu_ps(max + c), quant_min, quant_max);
        _mm256_storeu_ps(grid + fq_grid_offset(c, FQ_GRID_NUDGED_MIN), q.nudged_min);
        _mm256_storeu_ps(grid + fq_grid_offset(c, FQ_GRID_NUDGED_MAX), q.nudged_max);
        _mm256_storeu_ps(grid + fq_grid_offset(c, FQ_GRID_SCALE), q.scale);
        _mm256_storeu_ps(grid + fq_grid_offset(c, FQ_GRID_INV_SCALE), q.inv_scale);
        _mm256_storeu_ps(grid + fq_grid_offset(c, FQ_GRID_QUANT_ZERO), q.quant_zero);
    }
    fq_nudge_positions(min, max, c, channels, num_bits, narrow_range, grid);
}

const fq_fake_quant_kernels fq_fake_quant__avx2 = {
    forward_mul__avx2,     forward_div__avx2,       mask__avx2,
    mask_sums__avx2,       channel_forward__avx2,   channel_mask_sums__avx2,
    nudge_channels__avx2,   NULL, NULL,
};
