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

/* Per-channel float64 sums of float32 runs (bn_kernels.h). With dy == NULL, the moments of x about
   center (sum_a: of x - center, sum_b: of its squares); otherwise sum_a: of dy, sum_b: of
   dy * (x - center). */
fq_status fq_bn_walk_sums(const fq_bn_walk *walk, const void *dy, const void *x,
                          const float *center, double *sum_a, double *sum_b);

/* out = the pass's formula over every element with the per-channel constants of `per_channel`
   (four tables of `channels` floats, all present whatever the pass reads): NORMALIZE reads x,
   BACKPROP dy and x, SCALE dy. */
fq_status fq_bn_walk_elementwise(const fq_bn_walk *walk, fq_bn_pass pass, const void *dy,
                                 const void *x, void *out, const fq_bn_table *per_channel);

#endif
