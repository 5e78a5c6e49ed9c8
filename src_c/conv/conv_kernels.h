/* Convolution kernel interface shared by the per-ISA files and the public entry points: the loops
   over rows of NHWC data that depthwise convolution and col2im need. */
#ifndef FQ_CONV_KERNELS_H
#define FQ_CONV_KERNELS_H

#include <stddef.h>

#include "../include/fqcore.h"
#include "../common/fpenv.h"
#include "../common/parallel.h"

/* Whether an output index reads input index `in` at tap `tap` along one dimension (out * stride +
   tap * dilation - pad == in, out < out_size); *out is that index when it does. */
static inline int conv_reader(size_t in, size_t tap, size_t stride, size_t dilation, size_t pad,
                              size_t out_size, size_t *out) {
    const size_t at = in + pad, offset = tap * dilation;
    if (at < offset || (at - offset) % stride != 0) return 0;
    *out = (at - offset) / stride;
    return *out < out_size;
}

/* The taps that meet one position, along one dimension: `count` taps from `first`, `step` apart;
   the other side's index at the first (the input index for the forward, the output index for the
   input gradient) and its change per step. Valid taps always form such a run. */
typedef struct {
    size_t first, step, count, index;
    ptrdiff_t index_step;
} fq_conv_walk;

/* One call: the geometry, its operands, and the partial sums of a filter gradient. */
typedef struct {
    fq_conv_geometry g;
    /* depthwise: filter [KH, KW, C, M], output channel c * M + m; the forward's and the filter
       gradient's is 1, with x's channels repeated M times (g.channels C * M) */
    size_t multiplier;
    const float *x, *w, *dy, *cols;
    float *out;
    float *partials;      /* depthwise filter gradient: one [KH, KW, C, M] sum per block */
    size_t rows_per_block;
    /* The input gradient with a column stride of 1: the output rows and columns that read each
       input row (H walks), then each input column (W walks); NULL otherwise. They depend on the
       geometry alone, so they are found once per call rather than per row and pixel (each is a few
       divisions per tap). */
    const fq_conv_walk *walks;
    /* The input gradient writes row `row` at out + (row - out_row0) * W * C: 0 for the whole
       array, a row's index for a one-row buffer. */
    size_t out_row0;
} fq_conv_job;

/* The sum of two input gradients of one geometry with a column stride of 1: `first` (its w, dy,
   out and walks) and a second (w, dy) pair, summed into first.out as numpy would add them in the
   caller's floating-point state, `caller`; `sum_in_caller_state` when that state does not round
   to nearest or flushes subnormals, so that no sum can be made in the kernels' own. */
typedef struct {
    fq_conv_job first;
    const float *w_b, *dy_b;
    fq_fpenv caller;
    int sum_in_caller_state;
} fq_conv_sum_job;

/* One ISA's kernels, each over a range of rows: output rows (n * OH + r) for the forward and the
   filter gradient's blocks, input rows (n * H + h) for the gathers. Every output element is a sum
   in a fixed order (kernel position (i, j) row-major, then m), the same on every ISA and for any
   split of the rows. */
typedef struct {
    fq_range_fn depthwise;             /* (fq_conv_job *, first row, end row) */
    fq_range_fn depthwise_grad_input;
    fq_range_fn depthwise_grad_input_sum; /* (fq_conv_sum_job *, first row, end row) */
    fq_range_fn depthwise_grad_filter; /* over blocks of rows */
    fq_range_fn col2im;
} fq_conv_kernels;

extern const fq_conv_kernels fq_conv__scalar;
#ifdef FQ_BUILD_AVX2
extern const fq_conv_kernels fq_conv__avx2;
#endif
#ifdef FQ_BUILD_AVX512
extern const fq_conv_kernels fq_conv__avx512;
#endif
#ifdef FQ_BUILD_NEON
extern const fq_conv_kernels fq_conv__neon;
#endif

#endif
