/* AVX2 fake-quant kernels: 8 floats a vector, compares as all-ones lanes. The kernels themselves
   are in fq_simd.h. */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "fq_avx2.c must be built with -mavx2 -mfma (setup.py adds them)"
#endif
#include <immintrin.h>
#include <math.h>
#include <stddef.h>

#define FQ_ISA avx2
#define FQ_W 8
/* Eight of the 16 YMM registers: periods up to 32 positions keep their grids there. */
#define FQ_GRID_REG_VECTORS 4
/* Two vectors a gradient group: four fill the 16 registers. */
#define FQ_GRAD_GROUP 2

typedef __m256 fqv;
typedef __m256 fqv_mask;
typedef __m256d fqv_d;

/* vmaskmovps loads zeros and stores nothing in the lanes whose mask is clear, and does not fault
   on their memory. */
static inline __m256i fqv_lane_range(size_t lo, size_t hi) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)lo), lane),
                               _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), lane));
}
static inline fqv fqv_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void fqv_store(float *p, fqv v) { _mm256_storeu_ps(p, v); }
static inline fqv fqv_load_lanes(const float *p, size_t lo, size_t hi) {
    return _mm256_maskload_ps(p, fqv_lane_range(lo, hi));
}
static inline void fqv_store_lanes(float *p, size_t lo, size_t hi, fqv v) {
    _mm256_maskstore_ps(p, fqv_lane_range(lo, hi), v);
}
static inline fqv fqv_set1(float f) { return _mm256_set1_ps(f); }
static inline fqv fqv_zero(void) { return _mm256_setzero_ps(); }
static inline fqv fqv_add(fqv a, fqv b) { return _mm256_add_ps(a, b); }
static inline fqv fqv_sub(fqv a, fqv b) { return _mm256_sub_ps(a, b); }
static inline fqv fqv_mul(fqv a, fqv b) { return _mm256_mul_ps(a, b); }
static inline fqv fqv_div(fqv a, fqv b) { return _mm256_div_ps(a, b); }
/* a * 1 -/+ b on the FMA pipes, as in fq_avx512.c. */
static inline fqv fqv_sub_on_fma(fqv a, fqv b) { return _mm256_fmsub_ps(a, _mm256_set1_ps(1.0f), b); }
static inline fqv fqv_add_on_fma(fqv a, fqv b) { return _mm256_fmadd_ps(a, _mm256_set1_ps(1.0f), b); }
static inline fqv fqv_floor(fqv v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
/* The truncation, plus one where the (exact) fraction is at least a half. */
static inline fqv fqv_round_nonneg(fqv v) {
    const fqv whole = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const fqv up = _mm256_cmp_ps(_mm256_sub_ps(v, whole), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_blendv_ps(whole, _mm256_add_ps(whole, _mm256_set1_ps(1.0f)), up);
}
static inline fqv fqv_abs(fqv v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
/* minps / maxps return their second operand on NaN: min(hi, x), max(lo, c) keep a NaN x. */
static inline fqv fqv_clamp(fqv x, fqv lo, fqv hi) { return _mm256_max_ps(lo, _mm256_min_ps(hi, x)); }
static inline fqv_mask fqv_ge(fqv a, fqv b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline fqv_mask fqv_le(fqv a, fqv b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
static inline fqv_mask fqv_lt(fqv a, fqv b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline fqv_mask fqv_gt(fqv a, fqv b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline fqv_mask fqv_eq(fqv a, fqv b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
static inline fqv_mask fqv_is_nan(fqv v) { return _mm256_cmp_ps(v, v, _CMP_UNORD_Q); }
static inline fqv_mask fqv_and(fqv_mask a, fqv_mask b) { return _mm256_and_ps(a, b); }
static inline fqv_mask fqv_or(fqv_mask a, fqv_mask b) { return _mm256_or_ps(a, b); }
static inline fqv fqv_or_bits(fqv a, fqv b) { return _mm256_or_ps(a, b); }
static inline fqv_mask fqv_andnot(fqv_mask a, fqv_mask b) { return _mm256_andnot_ps(a, b); }
static inline int fqv_all(fqv_mask m) { return _mm256_movemask_ps(m) == 0xff; }
static inline int fqv_any(fqv_mask m) { return _mm256_movemask_ps(m) != 0; }
static inline fqv fqv_as_one(fqv_mask m) { return _mm256_and_ps(m, _mm256_set1_ps(1.0f)); }
static inline fqv fqv_select(fqv_mask m, fqv a, fqv b) { return _mm256_blendv_ps(b, a, m); }
/* |v| < inf is false for NaN and for both infinities. */
static inline fqv_mask fqv_not_finite(fqv v) { return _mm256_cmp_ps(fqv_abs(v), _mm256_set1_ps(INFINITY), _CMP_NLT_UQ); }
static inline fqv_d fqv_low_d(fqv v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
static inline fqv_d fqv_high_d(fqv v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
static inline fqv_d fqv_load_d(const double *p) { return _mm256_loadu_pd(p); }
static inline void fqv_store_d(double *p, fqv_d v) { _mm256_storeu_pd(p, v); }
static inline fqv_d fqv_add_d(fqv_d a, fqv_d b) { return _mm256_add_pd(a, b); }

#include "fq_simd.h"
