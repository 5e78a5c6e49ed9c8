/* The per-channel chain kernels vectorized for AVX-512 by the compiler (channel_loops.h says why
   that keeps the bits). */
#if !defined(__AVX512F__)
#error "channel_avx512.c must be built with -mavx512f (setup.py adds it)"
#endif
#define FQ_CHANNEL_TABLE fq_channel__avx512
#include "channel_loops.h"
