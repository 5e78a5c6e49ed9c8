/* The per-channel chain kernels vectorized for AVX2 by the compiler (channel_loops.h says why that
   keeps the bits). */
#if !defined(__AVX2__)
#error "channel_avx2.c must be built with -mavx2 (setup.py adds it)"
#endif
#define FQ_CHANNEL_TABLE fq_channel__avx2
#include "channel_loops.h"
