/* fqcore public C API: TF-exact fake quantization kernels with run-time SIMD dispatch (plain C99). */
#ifndef FQCORE_H
#define FQCORE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FQCORE_VERSION_STRING "0.1.0"

typedef enum {
    FQ_OK = 0,
    FQ_ERR_NULL_POINTER = 1,    /* a required pointer is NULL while its length is not zero */
    FQ_ERR_NUM_BITS = 2,        /* num_bits outside 2..16 */
    FQ_ERR_MIN_NOT_BELOW_MAX = 3, /* Args ops: min >= max (after flushing denormals), or NaN */
    FQ_ERR_NO_MEMORY = 4,       /* a scratch allocation failed */
    FQ_ERR_ISA_UNAVAILABLE = 5, /* the requested ISA is not compiled in or not supported by this CPU */
    FQ_ERR_BAD_ISA = 6,         /* not a known fq_isa value or name */
    FQ_ERR_BAD_THREADS = 7,     /* thread count below 1 */
    FQ_ERR_BAD_SHAPE = 8        /* per-channel: channels == 0 while the input is not empty */
} fq_status;

/* A static English description of a status code. */
const char *fq_status_string(fq_status status);

/* Instruction sets, in priority order (best last). */
typedef enum {
    FQ_ISA_SCALAR = 0,
    FQ_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C, with OS support for the YMM state */
    FQ_ISA_AVX512 = 2, /* AVX-512 F/BW/DQ/VL, with OS support for the ZMM state */
    FQ_ISA_NEON = 3,   /* AArch64 Advanced SIMD */
    FQ_ISA_COUNT = 4
} fq_isa;

const char *fq_isa_name(fq_isa isa);
/* Parses "scalar", "avx2", "avx512" or "neon"; FQ_ERR_BAD_ISA otherwise. */
fq_status fq_isa_from_name(const char *name, fq_isa *isa);
/* 1 when the library was built with kernels for this ISA. */
int fq_isa_compiled(fq_isa isa);
/* 1 when the ISA is compiled in and this CPU and OS can run it. */
int fq_isa_available(fq_isa isa);
/* The ISA the kernels run on now. Chosen at first use: FQCORE_ISA if set (an unavailable or unknown
   value makes fq_init() report an error and keeps the best available ISA), else the best available. */
fq_isa fq_get_isa(void);
fq_status fq_set_isa(fq_isa isa);
/* Status of the environment overrides read at start-up (FQCORE_ISA, FQCORE_NUM_THREADS); FQ_OK when
   they were absent or valid. The bindings turn a bad value into an error at import. */
fq_status fq_init(void);

/* Threads used by one call (OpenMP; 1 when built without it). Results never depend on this. */
int fq_get_num_threads(void);
fq_status fq_set_num_threads(int num_threads);
/* 1 when built with OpenMP. */
int fq_has_openmp(void);

/* --- Fake quantization (float32). n counts elements; arrays may alias only exactly (out == in). ---
   Semantics: shared spec of FakeQuantWithMinMaxArgs/Vars/VarsPerChannel and their gradients in
   TensorFlow 2.21, with denormals flushed to zero as TF's CPU threads do. */

/* FakeQuantWithMinMaxArgs: out = fq(x), multiplying by the inverse scale. */
fq_status fq_f32_args(const float *x, float *out, size_t n, float min, float max, int num_bits,
                      int narrow_range);
/* FakeQuantWithMinMaxArgsGradient: dx = g * (x in [nudged_min, nudged_max]). */
fq_status fq_f32_args_grad(const float *g, const float *x, float *dx, size_t n, float min, float max,
                           int num_bits, int narrow_range);
/* FakeQuantWithMinMaxVars: out = fq(x), dividing by the scale. */
fq_status fq_f32_vars(const float *x, float *out, size_t n, float min, float max, int num_bits,
                      int narrow_range);
/* FakeQuantWithMinMaxVarsGradient, fused: dx and both sums in one pass. */
fq_status fq_f32_vars_grad(const float *g, const float *x, float *dx, size_t n, float min, float max,
                           int num_bits, int narrow_range, float *dmin, float *dmax);
/* FakeQuantWithMinMaxVarsPerChannel on x viewed as [n / channels, channels] (n % channels == 0);
   min and max have `channels` elements. */
fq_status fq_f32_vars_per_channel(const float *x, float *out, size_t n, size_t channels,
                                  const float *min, const float *max, int num_bits, int narrow_range);
/* FakeQuantWithMinMaxVarsPerChannelGradient; dmin and dmax have `channels` elements. */
fq_status fq_f32_vars_per_channel_grad(const float *g, const float *x, float *dx, size_t n,
                                       size_t channels, const float *min, const float *max,
                                       int num_bits, int narrow_range, float *dmin, float *dmax);

#ifdef __cplusplus
}
#endif
#endif /* FQCORE_H */
