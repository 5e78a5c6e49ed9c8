/* The per-channel chain kernels at the build's baseline (the reference every other ISA equals). */
#define FQ_CHANNEL_TABLE fq_channel__scalar
#include "channel_loops.h"
