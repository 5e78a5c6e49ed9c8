/* Walks whose speed depends on the CPU's microarchitecture, chosen at run time from what the CPU
   is (cpuid's vendor and family), never from the build machine; fq_kernel_choices() (fqcore.h) says what was
   chosen. Every choice gives the same bits; the C harness forces each one on any CPU. */
#ifndef FQ_KERNEL_CHOICES_H
#define FQ_KERNEL_CHOICES_H

#include "../include/fqcore.h"

/* How the SIMD per-channel forward walks the rows of a call that is not flat
   (fake_quant/fq_channel_walk.h). */
typedef enum {
    /* FQ_ROWS_PER_GRID rows a step, sharing each grid load. */
    FQ_ROWS_SHARE_GRID = 0,
    /* The same, but rows exactly 4 KiB apart go two at a time, two vectors each. */
    FQ_ROWS_SHARE_GRID_PAIRS_AT_4K = 1,
    /* Rows sharing grid loads while the call's x and out fit L2; past it, one row at a time, four
       vectors a step. */
    FQ_ONE_ROW_PAST_L2 = 2,
    /* As FQ_ROWS_SHARE_GRID_PAIRS_AT_4K, but the whole rows of a short period walk flat at every
       size, not only past the last-level cache (fq_channel_forward_is_flat). */
    FQ_SHORT_ROWS_FLAT = 3,
    FQ_ROW_WALK_COUNT = 4
} fq_row_walk;

/* The row walk of `isa` on this CPU; fq_force_row_walk(w) makes it w for every ISA (the C harness
   checks that each walk gives the same bits on any CPU), fq_force_row_walk(-1) undoes it. */
fq_row_walk fq_row_walk_for(fq_isa isa);
void fq_force_row_walk(int walk);

/* Whether a channels-first batch-norm gradient walks blocks of channels (each block's sums,
   constants and elementwise pass while its x and dy are in L2: batch_norm/bn_walk.c), rather than
   the sums over the whole tensor, then the pass. fq_force_bn_blocks(1 or 0) fixes it for every
   CPU, fq_force_bn_blocks(-1) undoes that. */
int fq_bn_gradient_blocks(void);
void fq_force_bn_blocks(int blocks);

/* Whether a channels-last batch-norm gradient whose arrays are beyond the caches sums its rows in
   memory order where the period allows (batch_norm/bn_simd.h, sums_in_order), rather than in
   strips of positions down groups of rows as for data in the caches; the bits are the same.
   fq_force_bn_sums_in_order(1 or 0) fixes it for every CPU (the C harness checks both),
   fq_force_bn_sums_in_order(-1) undoes that. */
int fq_bn_sums_in_order(void);
void fq_force_bn_sums_in_order(int in_order);

/* Whether per-channel gradients of short periods whose data is in L2 walk in strips, each strip
   of positions down all the rows with its grids in registers (fake_quant/fq_simd.h, grad_strips),
   rather than row by row loading every vector's grids. fq_force_grad_strips(1 or 0) fixes it for
   every ISA on any CPU (the C harness checks both give the same bits), fq_force_grad_strips(-1)
   undoes that. */
int fq_grad_strips_for(fq_isa isa);
void fq_force_grad_strips(int strips);

/* Whether `isa`'s per-channel gradient, with its data in L2, adds the loud vectors of a group that
   is not quiet alone rather than all of them (fake_quant/fq_simd.h, grad_group); the bits are the
   same. fq_force_grad_skips(1 or 0) fixes it for every ISA on any CPU (the C harness checks
   both), fq_force_grad_skips(-1) undoes that. */
int fq_grad_skips_quiet_vectors_for(fq_isa isa);
void fq_force_grad_skips(int skips);

/* Whether `isa`'s multiplying per-tensor forward (the Args forward) issues its subtractions on the
   FMA pipes (fq_fake_quant_kernels.forward_mul) rather than as plain ones (forward_mul_on_adds);
   the bits are the same. fq_force_forward_on_fma(1 or 0) fixes it for every ISA on any CPU (the C
   harness checks both), fq_force_forward_on_fma(-1) undoes that. */
int fq_forward_on_fma_for(fq_isa isa);
void fq_force_forward_on_fma(int on_fma);

#endif
