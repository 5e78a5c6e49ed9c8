/* How the SIMD per-channel forward walks a call's rows: the choice by shape and by CPU
   (common/kernel_choices.h), measured. The bits are the same whichever walk runs; only speed differs. */
#ifndef FQ_CHANNEL_WALK_H
#define FQ_CHANNEL_WALK_H

#include <stddef.h>

/* Times: per-channel over per-tensor Vars, one thread.
   - By default FQ_ROWS_PER_GRID rows go at a time, sharing each grid load, as loads per vector
     bound the speed while the data is in cache (Zen 4, [3, 3, 64, 128]: 1.25x against 1.8x row by
     row; [8192, 128]: 1.2x against 1.55x flat; [1024, 16384]: 1.6x against 2.3x. Intel Xeon,
     AVX2, [576, 128]: 0.82x against 0.94x one row at a time, four vectors a step; medians).
   - Zen 4, AVX-512: rows exactly 4 KiB apart (a period of 1024) go FQ_PAIR_ROWS at a time,
     FQ_PAIR_VECTORS vectors each: each row's current line, and each output row's, fall in one L1
     set, and with its 64-byte vectors using each line once, 4 rows a step keep 8 lines in flight
     there ([1024, 1024], out placed 0 / 16 / 128 bytes past x modulo 4 KiB: 127 / 139 / 181 us
     with 4 rows, 124 / 130 / 153 us in pairs). AVX2, whose vectors use each line twice, keeps 4
     ([1024, 1024]: 153-165 us against 172-177 in pairs).
   - Intel Xeon (Sapphire Rapids class), past L2 (x and out more than FQ_PAST_L2_ELEMENTS
     elements of a thread's call): one row at a time, FQ_ONE_ROW_VECTORS vectors loaded ahead, is
     within 1.04x of per-tensor for every placement of out against x, where rows sharing grid loads
     reach 1.5x (AVX-512, [1024, 1024], out 16 or 32 bytes past x: 1.55-1.76x in fours or pairs;
     [2048, 512]: 1.01x against 1.69x; AVX2 [1024, 1024]: 1.01x against 1.24x). In L2 the shared
     rows stay faster ([256, 512], AVX2: 0.85x against 1.00x).
   - Short rows past the last-level cache go as one flat loop instead, whose position wraps without
     a branch: a short loop per row ends in a mispredicted branch every few vectors, and each one
     throws away the memory reads in flight (Zen 4, [131072, 128]: 1.7-2.2x against 2.3-2.6x;
     [32768, 128]: 2.5x against 3.7x). The flat loop takes four vectors a step, all loaded before
     any grid load or store, as the per-tensor loop does ([131072, 128]: 1.1-1.2x against 1.6-2.1x
     one vector at a time with software prefetch; [65536, 256]: 1.1x against 1.7-1.9x).
   - Zen 5, AVX-512: short rows flat at every size (FQ_SHORT_ROWS_FLAT); Zen 4, AVX2: one row at
     a time past L2, as on Intel (common/kernel_choices.c has the measurements). */
#define FQ_ROWS_PER_GRID 4
#define FQ_PAIR_ROWS 2
#define FQ_PAIR_VECTORS 2
#define FQ_ONE_ROW_VECTORS 4
#define FQ_PAST_L2_ELEMENTS ((size_t)1 << 18)
#define FQ_IN_CACHE_ELEMENTS ((size_t)1 << 21)
#define FQ_SHORT_PERIOD ((size_t)256)

/* Whether a call over `rows` rows, positions [p0, p1) of each period, walks flat: whole short
   rows past the last-level cache, or at any size where the CPU's walk says so (`any_size`). */
static inline int fq_channel_forward_is_flat(size_t rows, size_t period, size_t p0, size_t p1,
                                             int any_size) {
    return (any_size || rows * period > FQ_IN_CACHE_ELEMENTS) && period <= FQ_SHORT_PERIOD &&
           p0 == 0 && p1 == period && period % 16 == 0;
}

/* Whether such a call's x and out are more than L2 holds (FQ_ONE_ROW_PAST_L2). */
static inline int fq_channel_forward_is_past_l2(size_t rows, size_t p0, size_t p1) {
    return rows * (p1 - p0) >= FQ_PAST_L2_ELEMENTS;
}

#endif
