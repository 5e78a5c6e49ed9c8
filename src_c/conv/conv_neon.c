/* The convolution kernels vectorized for NEON by the compiler (conv_loops.h says why that keeps
   the bits). */
#if !defined(__aarch64__)
#error "conv_neon.c is for AArch64 (Advanced SIMD is part of its baseline)"
#endif
#define FQ_CONV_TABLE fq_conv__neon
#include "conv_loops.h"
