/* The convolution kernels vectorized for NEON by the compiler (conv_loops.h says why that keeps
   the bits). */
#if !defined(__aarch64__)
#error "conv_neon.c is for AArch64 (Advanced SIMD is part of its baseline)"
#endif
/* The forward's blocks stay 4 vectors a row (32 registers hold them); the filter gradient's 9
   sums take one vector each. Neither was timed on AArch64 hardware (the harness runs qemu). */
#define CONV_CHANNELS 16
#define FILTER_CHANNELS 4
#define FQ_CONV_TABLE fq_conv__neon
#include "conv_loops.h"
