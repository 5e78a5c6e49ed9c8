/* How the SIMD per-channel forward walks a call's rows: the choice by shape, measured. */
#ifndef FQ_CHANNEL_WALK_H
#define FQ_CHANNEL_WALK_H

#include <stddef.h>

/* The bits are the same whichever walk runs; only speed differs. Times on Zen 4, per-channel over
   per-tensor Vars. By default FQ_ROWS_PER_GRID rows go at a time, sharing each grid load, as loads
   per vector bound the speed while the data is in cache ([3, 3, 64, 128]: 1.25x against 1.8x row
   by row; [8192, 128]: 1.2x against 1.55x flat; [1024, 16384]: 1.6x against 2.3x). Short rows past
   the last-level cache go as one flat loop instead, whose position wraps without a branch: a short
   loop per row ends in a mispredicted branch every few vectors, and each one throws away the
   memory reads in flight ([131072, 128]: 1.7-2.2x against 2.3-2.6x; [32768, 128]: 2.5x against
   3.7x). The flat loop takes four vectors a step, all loaded before any grid load or store, as the
   per-tensor loop does: more memory reads in flight ([131072, 128]: 1.1-1.2x against 1.6-2.1x one
   vector at a time with software prefetch; [65536, 256]: 1.1x against 1.7-1.9x; prefetching on
   top of it measured slower). */
#define FQ_ROWS_PER_GRID 4
/* AVX-512 takes 2 rows a step where they are exactly 4 KiB apart (a period of 1024): each row's
   current line, and each output row's, then falls in one L1 set, and with its 64-byte vectors
   using each line once, 4 rows a step keep 8 lines in flight there ([1024, 1024], out placed
   0 / 16 / 128 bytes past x modulo 4 KiB: 127 / 139 / 181 us with 4 rows, 124 / 130 / 153 us with
   2). Wider 4 KiB multiples keep 4, their grid tables being beyond L1 ([256, 4096]: 144 us against
   181 with 2), and so does AVX2 (its vectors use each line twice; [1024, 1024]: 153-165 us against
   172-177 with 2). */
#define FQ_ROWS_PER_GRID_4K 2
#define FQ_IN_CACHE_ELEMENTS ((size_t)1 << 21)
#define FQ_SHORT_PERIOD ((size_t)256)

/* Whether a call over `rows` rows, positions [p0, p1) of each period, walks flat. */
static inline int fq_channel_forward_is_flat(size_t rows, size_t period, size_t p0, size_t p1) {
    return rows * period > FQ_IN_CACHE_ELEMENTS && period <= FQ_SHORT_PERIOD && p0 == 0 &&
           p1 == period && period % 16 == 0;
}

#endif
