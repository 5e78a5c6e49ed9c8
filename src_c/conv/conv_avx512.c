/* The convolution kernels vectorized for AVX-512 by the compiler (conv_loops.h says why that keeps
   the bits). */
#if !defined(__AVX512F__)
#error "conv_avx512.c must be built with -mavx512f (setup.py adds it)"
#endif
#define CONV_CHANNELS 16
#define FQ_CONV_TABLE fq_conv__avx512
#include "conv_loops.h"
