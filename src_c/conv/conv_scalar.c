/* The convolution kernels at the build's baseline (the reference every other ISA equals). */
#define FQ_CONV_TABLE fq_conv__scalar
#include "conv_loops.h"
