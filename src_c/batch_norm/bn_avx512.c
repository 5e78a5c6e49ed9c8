/* AVX-512 batch-norm kernels: 16 floats a vector, float16 through the F16C-style converts of
   AVX-512F, bfloat16 by integer rounding. The kernels themselves are in bn_simd.h. */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || !defined(__AVX512VL__)
#error "bn_avx512.c must be built with -mavx512f -mavx512bw -mavx512dq -mavx512vl (setup.py adds them)"
#endif
#include <immintrin.h>
#include <stdint.h>

#define BN_ISA avx512
#define BN_W 16
#define BN_STRIP_VECTORS 4
#define BN_PASS_REG_VECTORS 4

typedef __m512 bn_vf;
typedef __m512d bn_vd;

static inline bn_vf bn_load_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline bn_vf bn_load_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline bn_vf bn_load_bf16(const uint16_t *p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
static inline void bn_store_f32(float *p, bn_vf v) { _mm512_storeu_ps(p, v); }
static inline void bn_store_f16(uint16_t *p, bn_vf v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* bfloat16 bits of 16 floats, rounded as fq_f32_to_bf16 does (NaN: quiet, never infinity). */
static inline __m256i bn_bf16_bits(bn_vf v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
}
static inline void bn_store_bf16(uint16_t *p, bn_vf v) { _mm256_storeu_si256((__m256i *)p, bn_bf16_bits(v)); }

/* Partial vectors: masked loads do not touch the memory of masked-off lanes. */
#define BN_HAS_PARTIAL 1
static inline __mmask16 bn_lanes(size_t n) { return (__mmask16)((1u << n) - 1u); }
static inline bn_vf bn_load_partial_f32(const float *p, size_t n) { return _mm512_maskz_loadu_ps(bn_lanes(n), p); }
static inline bn_vf bn_load_partial_f16(const uint16_t *p, size_t n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(bn_lanes(n), p));
}
static inline bn_vf bn_load_partial_bf16(const uint16_t *p, size_t n) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(bn_lanes(n), p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
static inline void bn_store_partial_f32(float *p, size_t n, bn_vf v) { _mm512_mask_storeu_ps(p, bn_lanes(n), v); }
static inline void bn_store_partial_f16(uint16_t *p, size_t n, bn_vf v) {
    _mm256_mask_storeu_epi16(p, bn_lanes(n), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline void bn_store_partial_bf16(uint16_t *p, size_t n, bn_vf v) {
    _mm256_mask_storeu_epi16(p, bn_lanes(n), bn_bf16_bits(v));
}
static inline __m512d bn_add_d_n(__m512d acc, __m512d v, size_t n) {
    return _mm512_mask_add_pd(acc, (__mmask8)((1u << n) - 1u), acc, v);
}
static inline bn_vf bn_set1_f(float v) { return _mm512_set1_ps(v); }
static inline bn_vf bn_add_f(bn_vf a, bn_vf b) { return _mm512_add_ps(a, b); }
static inline bn_vf bn_sub_f(bn_vf a, bn_vf b) { return _mm512_sub_ps(a, b); }
static inline bn_vf bn_mul_f(bn_vf a, bn_vf b) { return _mm512_mul_ps(a, b); }
static inline bn_vf bn_fma_f(bn_vf a, bn_vf b, bn_vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline bn_vd bn_low_d(bn_vf v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
static inline bn_vd bn_high_d(bn_vf v) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
static inline bn_vd bn_load_d(const double *p) { return _mm512_loadu_pd(p); }
static inline void bn_store_d(double *p, bn_vd v) { _mm512_storeu_pd(p, v); }
static inline bn_vd bn_add_d(bn_vd a, bn_vd b) { return _mm512_add_pd(a, b); }
#define BN_STREAM_ALIGN 64
static inline void bn_stream_f32(float *p, bn_vf v) { _mm512_stream_ps(p, v); }
static inline void bn_stream_fence(void) { _mm_sfence(); }

#include "bn_simd.h"
