/* Scalar float16 / bfloat16 <-> float32 conversions with the rounding and NaN rules of the hardware
   converters (F16C, AArch64 FCVT): the reference every SIMD load and store must match. */
#ifndef FQ_BN_CONVERT_H
#define FQ_BN_CONVERT_H

#include <stdint.h>
#include <string.h>

#include "../include/fqcore.h"

static inline uint32_t fq_bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float fq_float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Exact; a signalling NaN comes back quiet, as the hardware converters return it. */
static inline float fq_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    const uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1fu)
        return fq_float_of(sign | 0x7f800000u | (mantissa << 13) | (mantissa ? 0x400000u : 0u));
    if (exponent == 0) {
        /* Half subnormals are normal floats; the product is exact. The sign goes in as a bit: a
           negation could be folded into a later multiply (AArch64 FNMUL), which flips NaN signs. */
        const float magnitude = (float)mantissa * 0x1p-24f;
        return fq_float_of(fq_bits_of(magnitude) | sign);
    }
    return fq_float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/* Round to nearest even. Inputs are results of arithmetic under flush-to-zero, so a float32 denormal
   never arrives; were one to, it is treated as zero, as denormals-are-zero makes the hardware do. */
static inline uint16_t fq_f32_to_f16(float f) {
    const uint32_t bits = fq_bits_of(f);
    const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    const uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
    if (magnitude >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (magnitude >= 0x38800000u) {                                /* a normal half */
        const uint32_t rebiased = magnitude - 0x38000000u;
        return (uint16_t)(sign | ((rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13));
    }
    if (magnitude < 0x00800000u) return sign;
    /* A half subnormal: the 24-bit significand shifted right by at least 14, rounded to even. */
    const uint32_t shift = 126u - (magnitude >> 23);
    if (shift > 24u) return sign;
    const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t kept = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    return (uint16_t)(sign | (kept + (rest > half || (rest == half && (kept & 1u)))));
}

static inline float fq_bf16_to_f32(uint16_t b) { return fq_float_of((uint32_t)b << 16); }

/* Round to nearest even; a NaN stays a NaN (made quiet) instead of rounding into infinity. */
static inline uint16_t fq_f32_to_bf16(float f) {
    const uint32_t bits = fq_bits_of(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* Bytes an element of `dtype` takes. */
static inline size_t fq_dtype_size(fq_dtype dtype) {
    return dtype == FQ_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
}

/* Element i of an array of `dtype`, as float32. */
static inline float fq_load_element(const void *data, size_t i, fq_dtype dtype) {
    switch (dtype) {
    case FQ_DTYPE_F16: return fq_f16_to_f32(((const uint16_t *)data)[i]);
    case FQ_DTYPE_BF16: return fq_bf16_to_f32(((const uint16_t *)data)[i]);
    default: return ((const float *)data)[i];
    }
}

static inline void fq_store_element(void *data, size_t i, fq_dtype dtype, float value) {
    switch (dtype) {
    case FQ_DTYPE_F16: ((uint16_t *)data)[i] = fq_f32_to_f16(value); break;
    case FQ_DTYPE_BF16: ((uint16_t *)data)[i] = fq_f32_to_bf16(value); break;
    default: ((float *)data)[i] = value; break;
    }
}

#endif
