/* AVX-512 fake-quant kernels (16 lanes); bit-identical to fq_scalar.c, including the sum lane order. */
#if !defined(__AVX512F__) || !defined(__AVX512DQ__)
#error "fq_avx512.c must be compiled with -mavx512f -mavx512dq -mavx512bw -mavx512vl"
#endif
#include <immintrin.h>

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
    return (grid16){_mm512_loadu_ps(t->nudged_min + p), _mm512_loadu_ps(t->nudged_max + p),
                    _mm512_loadu_ps(t->scale + p), _mm512_loadu_ps(t->inv_scale + p),
                    _mm512_loadu_ps(t->quant_zero + p)};
}

/* vminps/vmaxps return their second operand on NaN: min(nmax, x), max(nmin, c) keep a NaN x. */
static inline __m512 shifted16(__m512 x, const grid16 *q) {
    const __m512 c = _mm512_max_ps(q->nudged_min, _mm512_min_ps(q->nudged_max, x));
    return _mm512_sub_ps(c, q->nudged_min);
}

static inline __m512 finish16(__m512 scaled, const grid16 *q) {
    const __m512 t = _mm512_add_ps(_mm512_sub_ps(scaled, q->quant_zero), _mm512_set1_ps(0.5f));
    return _mm512_mul_ps(_mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC), q->scale);
}

static inline __m512 forward_mul16(__m512 x, const grid16 *q) {
    return finish16(_mm512_mul_ps(shifted16(x, q), q->inv_scale), q);
}

static inline __m512 forward_div16(__m512 x, const grid16 *q) {
    return finish16(_mm512_div_ps(shifted16(x, q), q->scale), q);
}

static inline __m512 as_one(__mmask16 mask) { return _mm512_maskz_mov_ps(mask, _mm512_set1_ps(1.0f)); }

static inline __mmask16 between16(__m512 x, __m512 nudged_min, __m512 nudged_max) {
    return _mm512_cmp_ps_mask(x, nudged_min, _CMP_GE_OQ) & _mm512_cmp_ps_mask(x, nudged_max, _CMP_LE_OQ);
}

static void forward_mul__avx512(const float *x, float *out, size_t n, const fq_grid *grid) {
    const grid16 q = broadcast(grid);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, forward_mul16(_mm512_loadu_ps(x + i), &q));
    if (i < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(out + i, tail, forward_mul16(_mm512_maskz_loadu_ps(tail, x + i), &q));
    }
}

static void forward_div__avx512(const float *x, float *out, size_t n, const fq_grid *grid) {
    const grid16 q = broadcast(grid);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, forward_div16(_mm512_loadu_ps(x + i), &q));
    if (i < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(out + i, tail, forward_div16(_mm512_maskz_loadu_ps(tail, x + i), &q));
    }
}

static void mask__avx512(const float *g, const float *x, float *dx, size_t n, const fq_grid *grid) {
    const __m512 nmin = _mm512_set1_ps(grid->nudged_min), nmax = _mm512_set1_ps(grid->nudged_max);
    size_t i = 0;
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

static inline void add_to_lanes(__m512 products, __m512d *lo, __m512d *hi) {
    *lo = _mm512_add_pd(*lo, _mm512_cvtps_pd(_mm512_castps512_ps256(products)));
    *hi = _mm512_add_pd(*hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(products, 1)));
}

/* QNaN | +inf | -inf | SNaN for vfpclassps. */
#define FQ_NOT_FINITE 0x99

/* dx for 16 elements; the sum products only when a lane is outside the grid or g is not finite
   (lanes inside with finite g add +-0, which leaves the float64 sums' bits unchanged). */
static inline void grad16(const float *g, const float *x, float *dx, __m512 nmin, __m512 nmax,
                          __m512d *min_lo, __m512d *min_hi, __m512d *max_lo, __m512d *max_hi) {
    const __m512 gv = _mm512_loadu_ps(g), xv = _mm512_loadu_ps(x);
    const __mmask16 inside = between16(xv, nmin, nmax);
    _mm512_storeu_ps(dx, _mm512_mul_ps(gv, as_one(inside)));
    const __mmask16 not_finite = _mm512_fpclass_ps_mask(gv, FQ_NOT_FINITE);
    if (inside == 0xffff && not_finite == 0) return;
    add_to_lanes(_mm512_mul_ps(gv, as_one(_mm512_cmp_ps_mask(xv, nmin, _CMP_LT_OQ))), min_lo, min_hi);
    add_to_lanes(_mm512_mul_ps(gv, as_one(_mm512_cmp_ps_mask(xv, nmax, _CMP_GT_OQ))), max_lo, max_hi);
}

static void mask_sums__avx512(const float *g, const float *x, float *dx, size_t n,
                              const fq_grid *grid, double lanes_min[FQ_SUM_LANES],
                              double lanes_max[FQ_SUM_LANES]) {
    const __m512 nmin = _mm512_set1_ps(grid->nudged_min), nmax = _mm512_set1_ps(grid->nudged_max);
    __m512d min_lo = _mm512_loadu_pd(lanes_min), min_hi = _mm512_loadu_pd(lanes_min + 8);
    __m512d max_lo = _mm512_loadu_pd(lanes_max), max_hi = _mm512_loadu_pd(lanes_max + 8);
    size_t i = 0;
    for (; i + FQ_SUM_LANES <= n; i += FQ_SUM_LANES)
        grad16(g + i, x + i, dx + i, nmin, nmax, &min_lo, &min_hi, &max_lo, &max_hi);
    _mm512_storeu_pd(lanes_min, min_lo);
    _mm512_storeu_pd(lanes_min + 8, min_hi);
    _mm512_storeu_pd(lanes_max, max_lo);
    _mm512_storeu_pd(lanes_max + 8, max_hi);
    for (; i < n; ++i) {
        float to_min, to_max;
        dx[i] = fq_element_grad(g[i], x[i], grid->nudged_min, grid->nudged_max, &to_min, &to_max);
        lanes_min[i % FQ_SUM_LANES] += (double)to_min;
        lanes_max[i % FQ_SUM_LANES] += (double)to_max;
    }
}

/* Per-channel kernels walk FQ_ROW_BLOCK rows at a time, positions inside: each row stays a
   sequential stream, and a position's grid (and sums) are loaded once per block of rows. */
#define FQ_ROW_BLOCK 8

static void channel_forward__avx512(const float *x, float *out, size_t rows, const fq_grid_table *t,
                                    size_t p0, size_t p1) {
    for (size_t r0 = 0; r0 < rows; r0 += FQ_ROW_BLOCK) {
        const size_t r1 = rows - r0 < FQ_ROW_BLOCK ? rows : r0 + FQ_ROW_BLOCK;
        size_t p = p0;
        for (; p + 16 <= p1; p += 16) {
            const grid16 q = load_grid(t, p);
            for (size_t r = r0; r < r1; ++r) {
                const size_t i = r * t->period + p;
                _mm512_storeu_ps(out + i, forward_mul16(_mm512_loadu_ps(x + i), &q));
            }
        }
        for (; p < p1; ++p)
            for (size_t r = r0; r < r1; ++r) {
                const size_t i = r * t->period + p;
                out[i] = fq_element_mul(x[i], t->nudged_min[p], t->nudged_max[p], t->inv_scale[p],
                                        t->quant_zero[p], t->scale[p]);
            }
    }
}

static void channel_mask_sums__avx512(const float *g, const float *x, float *dx, size_t rows,
                                      const fq_grid_table *t, size_t p0, size_t p1,
                                      double *acc_min, double *acc_max) {
    for (size_t r0 = 0; r0 < rows; r0 += FQ_ROW_BLOCK) {
        const size_t r1 = rows - r0 < FQ_ROW_BLOCK ? rows : r0 + FQ_ROW_BLOCK;
        size_t p = p0;
        for (; p + 16 <= p1; p += 16) {
            const __m512 nmin = _mm512_loadu_ps(t->nudged_min + p);
            const __m512 nmax = _mm512_loadu_ps(t->nudged_max + p);
            __m512d min_lo = _mm512_loadu_pd(acc_min + p), min_hi = _mm512_loadu_pd(acc_min + p + 8);
            __m512d max_lo = _mm512_loadu_pd(acc_max + p), max_hi = _mm512_loadu_pd(acc_max + p + 8);
            for (size_t r = r0; r < r1; ++r) {
                const size_t i = r * t->period + p;
                grad16(g + i, x + i, dx + i, nmin, nmax, &min_lo, &min_hi, &max_lo, &max_hi);
            }
            _mm512_storeu_pd(acc_min + p, min_lo);
            _mm512_storeu_pd(acc_min + p + 8, min_hi);
            _mm512_storeu_pd(acc_max + p, max_lo);
            _mm512_storeu_pd(acc_max + p + 8, max_hi);
        }
        for (; p < p1; ++p)
            for (size_t r = r0; r < r1; ++r) {
                const size_t i = r * t->period + p;
                float to_min, to_max;
                dx[i] = fq_element_grad(g[i], x[i], t->nudged_min[p], t->nudged_max[p], &to_min,
                                        &to_max);
                acc_min[p] += (double)to_min;
                acc_max[p] += (double)to_max;
            }
    }
}

const fq_fake_quant_kernels fq_fake_quant__avx512 = {
    forward_mul__avx512,     forward_div__avx512,     mask__avx512,
    mask_sums__avx512,       channel_forward__avx512, channel_mask_sums__avx512,
};
