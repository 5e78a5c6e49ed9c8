/* The convolution kernels vectorized for AVX2 by the compiler (conv_loops.h says why that keeps
   the bits). */
#if !defined(__AVX2__)
#error "conv_avx2.c must be built with -mavx2 (setup.py adds it)"
#endif
#define CONV_CHANNELS 8
#define FQ_CONV_TABLE fq_conv__avx2
#include "conv_loops.h"
