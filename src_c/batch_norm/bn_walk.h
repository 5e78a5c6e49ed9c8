/* Walks a batch-norm tensor in either memory layout: per-channel sums in one fixed order, and the
   elementwise passes, split over threads without changing a bit of the result. */
#ifndef FQ_BN_WALK_H
#define FQ_BN_WALK_H

#include <stddef.h>

#include "../include/fqcore.h"
#include "bn_kernels.h"

typedef struct {
    const fq_bn_kernels *kernels;
    fq_dtype dtype;
    size_t element_size;
    fq_bn_shape shape; /* channels-first with inner == 1 is walked as channels-last */
    size_t per_channel;  /* elements of each channel: outer * inner */
    size_t count;        /* all elements */
} fq_bn_walk;

void fq_bn_walk_init(fq_bn_walk *walk, fq_dtype dtype, fq_bn_shape shape);

/* out = the pass's formula over every element with the per-channel constants of `per_channel`
   (four tables of `channels` floats, all present whatever the pass reads): NORMALIZE reads x,
   BACKPROP dy and x, SCALE dy. */
fq_status fq_bn_walk_elementwise(const fq_bn_walk *walk, fq_bn_pass pass, const void *dy,
                                 const void *x, void *out, const fq_bn_table *per_channel);

/* Turns the sums of channels [c0, c1) into their elementwise constants and the call's per-channel
   outputs. Called once for each channel, possibly on several threads at once (disjoint ranges). */
typedef void (*fq_bn_finish)(void *context, size_t c0, size_t c1);

/* Per-channel float64 sums of float32 runs (bn_kernels.h), then finish, then the pass (none when out
   is NULL) with the constants finish wrote into per_channel. With dy == NULL the sums are the
   moments of x about center (sum_a: of x - center, sum_b: of its squares); otherwise sum_a: of dy,
   sum_b: of dy * (x - center). The sums' order, so their bits, do not depend on how the walk
   interleaves the steps. */
fq_status fq_bn_walk_fused(const fq_bn_walk *walk, fq_bn_pass pass, const void *dy, const void *x,
                           void *out, const float *center, double *sum_a, double *sum_b,
                           fq_bn_finish finish, void *context, const fq_bn_table *per_channel);

#endif
