/* The per-channel chain kernels vectorized for NEON by the compiler (channel_loops.h says why that
   keeps the bits). */
#if !defined(__aarch64__)
#error "channel_neon.c is for AArch64 (Advanced SIMD is part of its baseline)"
#endif
#define FQ_CHANNEL_TABLE fq_channel__neon
#include "channel_loops.h"
