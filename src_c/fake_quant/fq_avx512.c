/* AVX-512 fake-quant kernels: 16 floats a vector, compares as mask registers. The kernels
   themselves are in fq_simd.h. */
#if !defined(__AVX512F__) || !defined(__AVX512DQ__)
#error "fq_avx512.c must be built with -mavx512f -mavx512dq -mavx512bw -mavx512vl (setup.py adds them)"
#endif
#include <immintrin.h>
#include <stddef.h>

#define FQ_ISA avx512
#define FQ_W 16
/* Sixteen of the 32 ZMM registers: periods up to 128 positions keep their grids there. */
#define FQ_GRID_REG_VECTORS 8
/* Four vectors a gradient group, in 16 of the 32 registers. */
#define FQ_GRAD_GROUP 4

typedef __m512 fqv;
typedef __mmask16 fqv_mask;
typedef __m512d fqv_d;

static inline __mmask16 fqv_lane_range(size_t lo, size_t hi) {
    return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}
static inline fqv fqv_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void fqv_store(float *p, fqv v) { _mm512_storeu_ps(p, v); }
static inline fqv fqv_load_lanes(const float *p, size_t lo, size_t hi) {
    return _mm512_maskz_loadu_ps(fqv_lane_range(lo, hi), p);
}
static inline void fqv_store_lanes(float *p, size_t lo, size_t hi, fqv v) {
    _mm512_mask_storeu_ps(p, fqv_lane_range(lo, hi), v);
}
static inline fqv fqv_set1(float f) { return _mm512_set1_ps(f); }
static inline fqv fqv_zero(void) { return _mm512_setzero_ps(); }
static inline fqv fqv_add(fqv a, fqv b) { return _mm512_add_ps(a, b); }
static inline fqv fqv_sub(fqv a, fqv b) { return _mm512_sub_ps(a, b); }
static inline fqv fqv_mul(fqv a, fqv b) { return _mm512_mul_ps(a, b); }
static inline fqv fqv_div(fqv a, fqv b) { return _mm512_div_ps(a, b); }
/* Zen 4 runs float32 additions, subtractions, min, max and roundings on two pipes, multiplications
   and FMAs on the two others: a * 1 -/+ b moves work from the first kind to the second. */
static inline fqv fqv_sub_on_fma(fqv a, fqv b) { return _mm512_fmsub_ps(a, _mm512_set1_ps(1.0f), b); }
static inline fqv fqv_add_on_fma(fqv a, fqv b) { return _mm512_fmadd_ps(a, _mm512_set1_ps(1.0f), b); }
static inline fqv fqv_floor(fqv v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
/* The truncation, plus one where the (exact) fraction is at least a half. */
static inline fqv fqv_round_nonneg(fqv v) {
    const fqv whole = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(v, whole), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm512_mask_add_ps(whole, up, whole, _mm512_set1_ps(1.0f));
}
static inline fqv fqv_abs(fqv v) { return _mm512_abs_ps(v); }
/* vminps / vmaxps return their second operand on NaN: min(hi, x), max(lo, c) keep a NaN x. */
static inline fqv fqv_clamp(fqv x, fqv lo, fqv hi) { return _mm512_max_ps(lo, _mm512_min_ps(hi, x)); }
static inline fqv_mask fqv_ge(fqv a, fqv b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
static inline fqv_mask fqv_le(fqv a, fqv b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
static inline fqv_mask fqv_lt(fqv a, fqv b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline fqv_mask fqv_gt(fqv a, fqv b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline fqv_mask fqv_eq(fqv a, fqv b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
static inline fqv_mask fqv_is_nan(fqv v) { return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q); }
static inline fqv_mask fqv_and(fqv_mask a, fqv_mask b) { return a & b; }
static inline fqv_mask fqv_or(fqv_mask a, fqv_mask b) { return a | b; }
static inline fqv fqv_or_bits(fqv a, fqv b) { return _mm512_or_ps(a, b); }
static inline fqv_mask fqv_andnot(fqv_mask a, fqv_mask b) { return _kandn_mask16(a, b); }
static inline int fqv_all(fqv_mask m) { return m == 0xffff; }
static inline int fqv_any(fqv_mask m) { return m != 0; }
static inline fqv fqv_as_one(fqv_mask m) { return _mm512_maskz_mov_ps(m, _mm512_set1_ps(1.0f)); }
static inline fqv fqv_select(fqv_mask m, fqv a, fqv b) { return _mm512_mask_mov_ps(b, m, a); }
/* QNaN | +inf | -inf | SNaN for vfpclassps. */
static inline fqv_mask fqv_not_finite(fqv v) { return _mm512_fpclass_ps_mask(v, 0x99); }
static inline fqv_d fqv_low_d(fqv v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
static inline fqv_d fqv_high_d(fqv v) { return _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)); }
static inline fqv_d fqv_load_d(const double *p) { return _mm512_loadu_pd(p); }
static inline void fqv_store_d(double *p, fqv_d v) { _mm512_storeu_pd(p, v); }
static inline fqv_d fqv_add_d(fqv_d a, fqv_d b) { return _mm512_add_pd(a, b); }

#include "fq_simd.h"
