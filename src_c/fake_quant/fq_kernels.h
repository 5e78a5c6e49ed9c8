/* Fake-quant kernel interface shared by the per-ISA files and the public entry points. */
#ifndef FQ_KERNELS_H
#define FQ_KERNELS_H

#include <float.h>
#include <math.h>
#include <stddef.h>

#include "../include/fqcore.h"
#include "../common/kernel_choices.h"

/* The per-tensor quantization grid after TF's nudge (all float32, rounded as the spec says). */
typedef struct {
    float nudged_min;
    float nudged_max;
    float scale;
    float inv_scale;  /* its own division (qmax - qmin) / (max - min), not 1 / scale */
    float quant_zero; /* floorf(-nudged_min * inv_scale + 0.5f) */
} fq_grid;

/* The gradient sums are defined by one order that every ISA keeps, so they are bit-identical
   across ISAs; and blocks of FQ_SUM_BLOCK elements are combined in index order, so they do not
   depend on the thread count either. Inside a block, element i belongs to lane i % FQ_SUM_LANES;
   each lane adds its products in float32 over a run of FQ_SUM_RUN consecutive lane elements
   (FQ_SUM_LANES * FQ_SUM_RUN elements, starting from +0), then adds the run into its float64
   accumulator. A run whose products are all +-0 may be skipped: it leaves the bits unchanged. */
#define FQ_SUM_LANES 16
#define FQ_SUM_RUN 4
#define FQ_SUM_RUN_ELEMENTS (FQ_SUM_LANES * FQ_SUM_RUN)
#define FQ_SUM_BLOCK ((size_t)16384)

/* Per-channel grids over one period of P positions (P a multiple of the channel count, padded so
   that short channel counts still fill whole vectors): position p holds channel p % C. Stored
   interleaved by chunks of FQ_GRID_CHUNK positions, each chunk holding its five parameters as
   FQ_GRID_CHUNK consecutive floats apiece: a walk along a period reads one sequential stream. */
#define FQ_GRID_CHUNK 16
enum {
    FQ_GRID_NUDGED_MIN,
    FQ_GRID_NUDGED_MAX,
    FQ_GRID_SCALE,
    FQ_GRID_INV_SCALE,
    FQ_GRID_QUANT_ZERO,
    FQ_GRID_PARAMS
};

typedef struct {
    size_t period;
    const float *grid;
    /* When > 0, every channel of the table gives TF's bits with the clamp taken after scaling:
       min(scaled_clamp_max, max(0, (x - nmin) * inv_scale)) in place of (clamp(x) - nmin) *
       inv_scale, which needs no nudged_max (one grid load fewer per vector);
       fq_allows_scaled_clamp (fq_element.h) says why that is exact. 0 for kernels that do not use
       it (no scaled_clamp_max kernel). */
    float scaled_clamp_max;
    /* How the SIMD per-channel forward walks rows: the faster on this CPU (common/kernel_choices.h). */
    fq_row_walk row_walk;
    /* Whether the SIMD per-channel gradient walks short periods in L2 in strips (kernel_choices.h). */
    int grad_strips;
    /* Whether the SIMD per-channel gradient adds the loud vectors of a group alone, not all of
       them (fq_simd.h, grad_group): set per call, from kernel_choices.h and where the data is. */
    int grad_skips_quiet_vectors;
} fq_grid_table;

/* Where parameter `param` of position p is stored; the following positions of its chunk follow. */
static inline size_t fq_grid_offset(size_t p, int param) {
    return (p / FQ_GRID_CHUNK) * (FQ_GRID_CHUNK * FQ_GRID_PARAMS) + (size_t)param * FQ_GRID_CHUNK +
           p % FQ_GRID_CHUNK;
}

static inline const float *fq_grid_param(const fq_grid_table *t, size_t p, int param) {
    return t->grid + fq_grid_offset(p, param);
}

/* Where a per-channel gradient call's g, x and dx are, all three together (fq_api.c decides
   from the call's size): the kernels pick their walk by it. */
typedef enum {
    FQ_GRAD_IN_L2 = 0,       /* fewer bytes than the forward's past L2 (fq_channel_walk.h) */
    FQ_GRAD_PAST_L2 = 1,     /* more, but still in the last-level cache */
    FQ_GRAD_FROM_MEMORY = 2  /* beyond the caches */
} fq_grad_place;

/* One ISA's kernels. Inputs are valid (checked by the entry points) and the caller has already
   switched the thread to flush-to-zero. `rows` counts whole periods; a kernel touches positions
   [p0, p1) of each period, so callers can split work by rows or by positions. */
typedef struct {
    /* Args forward: floorf((c - nmin) * inv_scale - quant_zero + 0.5f) * scale. */
    void (*forward_mul)(const float *x, float *out, size_t n, const fq_grid *grid);
    /* The same, the bits too, with its subtractions issued as plain ones rather than on the FMAs
       (fq_forward_on_fma_for in common/kernel_choices.h picks one per CPU). */
    void (*forward_mul_on_adds)(const float *x, float *out, size_t n, const fq_grid *grid);
    /* Vars forward: the same with (c - nmin) / scale. */
    void (*forward_div)(const float *x, float *out, size_t n, const fq_grid *grid);
    /* dx = g * (nmin <= x <= nmax). */
    void (*mask)(const float *g, const float *x, float *dx, size_t n, const fq_grid *grid);
    /* The mask plus both sums, added into lanes_min / lanes_max; n <= FQ_SUM_BLOCK. */
    void (*mask_sums)(const float *g, const float *x, float *dx, size_t n, const fq_grid *grid,
                      double lanes_min[FQ_SUM_LANES], double lanes_max[FQ_SUM_LANES]);
    /* Per-channel forward (multiplying) over `rows` periods. */
    void (*channel_forward)(const float *x, float *out, size_t rows, const fq_grid_table *table,
                            size_t p0, size_t p1);
    /* Per-channel mask and sums: position p's products are added, row by row, in float64 into
       acc_min[p] / acc_max[p] (a row whose products at p are +-0 may be skipped). `place` says
       where the call's arrays are (it picks a walk, not a result). */
    void (*channel_mask_sums)(const float *g, const float *x, float *dx, size_t rows,
                              const fq_grid_table *table, size_t p0, size_t p1, double *acc_min,
                              double *acc_max, fq_grad_place place);
    /* fq_nudge of channels [0, channels), each grid written to the same position of a grid table's
       storage `grid` (bit for bit what fq_nudge gives, NaN bits included). */
    void (*nudge_channels)(const float *min, const float *max, size_t channels, int num_bits,
                           int narrow_range, float *grid);
    /* For kernels whose channel_forward reads fq_grid_table.scaled_clamp_max (the SIMD ones):
       `span` when every position of a nudged table allows the clamp after scaling
       (fq_allows_scaled_clamp, given each position's range), else 0. NULL for the scalar kernels
       (the check would be wasted). */
    float (*scaled_clamp_max)(const float *grid, const float *position_min,
                              const float *position_max, size_t positions, float span);
    /* channel_mask_sums over all positions of `rows` periods (a multiple of 16), walked from the
       first 64-byte aligned element, `head` (1 to 15) elements in, over a table rotated by head
       (position head + p at rotated position p); position p < head adds into acc_min[period + p]
       / acc_max[period + p], which the caller moves to p. The same sums as channel_mask_sums:
       each position still adds its rows in order. NULL for the scalar kernels. */
    void (*channel_mask_sums_aligned)(const float *g, const float *x, float *dx, size_t rows,
                                      const fq_grid_table *table, size_t head, double *acc_min,
                                      double *acc_max, fq_grad_place place);
} fq_fake_quant_kernels;

extern const fq_fake_quant_kernels fq_fake_quant__scalar;
extern const fq_fake_quant_kernels fq_fake_quant__avx2;
extern const fq_fake_quant_kernels fq_fake_quant__avx512;
extern const fq_fake_quant_kernels fq_fake_quant__neon;

/* The kernels of `isa` (the scalar ones for an ISA this build lacks). */
const fq_fake_quant_kernels *fq_fake_quant_kernels_for(fq_isa isa);

/* TF's quantized range [quant_min, quant_max] for num_bits and narrow_range. */
static inline float fq_quant_min(int narrow_range) { return narrow_range ? 1.0f : 0.0f; }
static inline float fq_quant_max(int num_bits) { return (float)((1 << num_bits) - 1); }

/* TF's Nudge for one range; quant_min/quant_max from num_bits and narrow_range. */
void fq_nudge(float min, float max, int num_bits, int narrow_range, fq_grid *grid);
/* 1 when min == max == 0 after flushing denormals: TF's "all zeros" short cut. Written with
   magnitudes, it needs no flush-to-zero mode, so it can be inline; and with & rather than &&, no
   branch, so a loop over channels vectorizes. */
static inline int fq_range_is_zero(float min, float max) {
    return (fabsf(min) < FLT_MIN) & (fabsf(max) < FLT_MIN);
}
/* 1 when min < max after flushing denormals (false for NaN). */
int fq_range_is_ordered(float min, float max);

#endif
