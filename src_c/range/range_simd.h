/* The range-observer kernels once, for every SIMD ISA. An ISA file defines its vocabulary, then
   includes this file, which defines that ISA's table fq_range__<RG_ISA>:

     RG_W                 uint32 lanes per vector; RG_FLAT_VECTORS: vectors of positions the flat
                          kernel keeps in registers (three accumulators each), so its block is
                          RG_W * RG_FLAT_VECTORS positions (a power of two, FQ_RANGE_MAX_FLAT_BLOCK
                          at most)
     rg_v                 a vector of RG_W uint32 lanes
     rg_load              RG_W floats -> their bit patterns; rg_load_u / rg_store_u: uint32 arrays
     rg_set1              a uint32 in every lane
     rg_max_u, rg_min_u   lane-wise unsigned max / min; rg_max_s: signed max
     rg_prefetch_l1 / _l2 a read prefetch of one cache line into L1 / L2 (a macro: GCC 12 judges a
                          function around __builtin_prefetch const and deletes its calls); it
                          never faults, even past the end of the data

   Integer max / min are exact, so the lanes may see the elements in any order: the results equal
   range_scalar.c's bit for bit. */
#include <stdint.h>

#include "range_kernels.h"

#define RG_INLINE static inline __attribute__((always_inline))
#define RG_CAT2(a, b) a##__##b
#define RG_CAT(a, b) RG_CAT2(a, b)
#define RG_NAME(kernel) RG_CAT(kernel, RG_ISA)
#define RG_UNROLL _Pragma("GCC unroll 16")

#define RG_FLAT_BLOCK ((size_t)RG_W * RG_FLAT_VECTORS)
#if RG_W * RG_FLAT_VECTORS > 128 || (RG_W * RG_FLAT_VECTORS & (RG_W * RG_FLAT_VECTORS - 1)) != 0
#error "the flat block must be a power of two up to FQ_RANGE_MAX_FLAT_BLOCK"
#endif

/* The rows kernel takes RG_ROWS rows at a time, so each accumulator load and store serves as many
   element vectors. Reading several rows at once defeats the hardware prefetchers once the data
   comes from DRAM (Zen 4, AVX2, [131072, 128]: 5.5 ms against 2.5 ms row by row), so the kernel
   itself prefetches, in memory order, the group of rows RG_AHEAD_BYTES ahead (rounded up to whole
   groups): as many cache lines a step as it reads (2.0-2.5 ms; a per-tensor read of as many
   elements takes 1.6-1.8 ms). Groups up to RG_L1_GROUP_BYTES go to L1; larger ones to L2, which
   holds them until they are read ([4096, 4096]: 4.1-5.1 ms into L1, 1.8-3.0 ms into L2; at 128
   channels L2 is the slower of the two). */
#define RG_ROWS 4
#define RG_AHEAD_BYTES ((size_t)4096)
#define RG_L1_GROUP_BYTES ((size_t)8192)
#define RG_LINES_PER_STEP ((RG_ROWS * RG_W * 4 + 63) / 64)

typedef struct {
    rg_v max_u, min_u, max_s;
} rg_acc;

RG_INLINE void rg_fold(rg_acc *a, rg_v bits) {
    a->max_u = rg_max_u(a->max_u, bits);
    a->min_u = rg_min_u(a->min_u, bits);
    a->max_s = rg_max_s(a->max_s, bits);
}

RG_INLINE rg_acc rg_load_acc(fq_range_acc acc, size_t p) {
    const rg_acc a = {rg_load_u(acc.max_u + p), rg_load_u(acc.min_u + p),
                      rg_load_u((const uint32_t *)acc.max_s + p)};
    return a;
}

RG_INLINE void rg_store_acc(fq_range_acc acc, size_t p, rg_acc a) {
    rg_store_u(acc.max_u + p, a.max_u);
    rg_store_u(acc.min_u + p, a.min_u);
    rg_store_u((uint32_t *)acc.max_s + p, a.max_s);
}

/* Vectors load from multiples of their size, so that none is split over two cache lines: a split
   load costs (Zen 4, in cache, numpy's 16-byte aligned arrays) AVX-512 a third of its speed. */
#define RG_VECTOR_BYTES ((uintptr_t)RG_W * sizeof(float))

/* Elements from x to the next vector boundary, fewer than RG_W (0 when x is not float-aligned). */
RG_INLINE size_t rg_head(const float *x) {
    if ((uintptr_t)x % sizeof(float) != 0) return 0;
    return (size_t)((RG_VECTOR_BYTES - (uintptr_t)x % RG_VECTOR_BYTES) % RG_VECTOR_BYTES / sizeof(float));
}

static void RG_NAME(flat)(const float *x, size_t n, fq_range_acc acc) {
    size_t head = rg_head(x), i = 0;
    if (head > n) head = n;
    for (; i < head; ++i) fq_range_fold_one(acc, i % RG_FLAT_BLOCK, x[i]);
    if (n - head >= RG_FLAT_BLOCK) {
        /* Separate arrays, loops unrolled before GCC decides what lives in memory: this way
           GCC 12 keeps every accumulator in a register. Lane t of the registers holds position
           (head + t) % RG_FLAT_BLOCK. */
        rg_v max_u[RG_FLAT_VECTORS], min_u[RG_FLAT_VECTORS], max_s[RG_FLAT_VECTORS];
        RG_UNROLL
        for (int k = 0; k < RG_FLAT_VECTORS; ++k) {
            max_u[k] = rg_set1(FQ_RANGE_MAX_U_START);
            min_u[k] = rg_set1(FQ_RANGE_MIN_U_START);
            max_s[k] = rg_set1((uint32_t)FQ_RANGE_MAX_S_START);
        }
        for (; i + RG_FLAT_BLOCK <= n; i += RG_FLAT_BLOCK) {
            RG_UNROLL
            for (int k = 0; k < RG_FLAT_VECTORS; ++k) {
                const rg_v bits = rg_load(x + i + (size_t)k * RG_W);
                max_u[k] = rg_max_u(max_u[k], bits);
                min_u[k] = rg_min_u(min_u[k], bits);
                max_s[k] = rg_max_s(max_s[k], bits);
            }
        }
        uint32_t lanes_max_u[RG_FLAT_BLOCK], lanes_min_u[RG_FLAT_BLOCK], lanes_max_s[RG_FLAT_BLOCK];
        RG_UNROLL
        for (int k = 0; k < RG_FLAT_VECTORS; ++k) {
            rg_store_u(lanes_max_u + k * RG_W, max_u[k]);
            rg_store_u(lanes_min_u + k * RG_W, min_u[k]);
            rg_store_u(lanes_max_s + k * RG_W, max_s[k]);
        }
        for (size_t t = 0; t < RG_FLAT_BLOCK; ++t)
            fq_range_merge(acc, (head + t) % RG_FLAT_BLOCK, lanes_max_u[t], lanes_min_u[t],
                           (int32_t)lanes_max_s[t]);
    }
    for (; i < n; ++i) fq_range_fold_one(acc, i % RG_FLAT_BLOCK, x[i]);
}

/* `rows` rows (RG_ROWS, or 1 for the last few), positions [p0, p1); `ahead` is where this group's
   prefetches start. The vectors load wherever the positions fall: starting them at a vector
   boundary (with overlapping vectors at the ends) was 15% faster in cache but, past the caches,
   ran at 2.2 ms or at up to 5.3 ms from one run to the next ([131072, 128], AVX2, x 16 bytes off a
   vector boundary); unaligned loads stay at 1.8-2.2 ms for every start. */
RG_INLINE void RG_NAME(row_group)(const float *x, int rows, size_t period, size_t p0, size_t p1,
                                  const char *ahead, int into_l2, fq_range_acc acc) {
    size_t p = p0;
    for (; p + RG_W <= p1; p += RG_W) {
        for (int l = 0; l < RG_LINES_PER_STEP; ++l) {
            if (into_l2) {
                rg_prefetch_l2(ahead + 64 * l);
            } else {
                rg_prefetch_l1(ahead + 64 * l);
            }
        }
        ahead += 64 * RG_LINES_PER_STEP;
        rg_acc a = rg_load_acc(acc, p);
        for (int k = 0; k < rows; ++k) rg_fold(&a, rg_load(x + (size_t)k * period + p));
        rg_store_acc(acc, p, a);
    }
    for (; p < p1; ++p)
        for (int k = 0; k < rows; ++k) fq_range_fold_one(acc, p, x[(size_t)k * period + p]);
}

/* into_l2 is a constant in each caller, which gets a loop of its own. */
RG_INLINE void RG_NAME(rows_walk)(const float *x, size_t rows, size_t period, size_t p0, size_t p1,
                                  size_t ahead, int into_l2, fq_range_acc acc) {
    size_t r = 0;
    for (; r + RG_ROWS <= rows; r += RG_ROWS) {
        const float *xr = x + r * period;
        RG_NAME(row_group)(xr, RG_ROWS, period, p0, p1, (const char *)(xr + p0) + ahead, into_l2,
                           acc);
    }
    for (; r < rows; ++r) {
        const float *xr = x + r * period;
        RG_NAME(row_group)(xr, 1, period, p0, p1, (const char *)(xr + p0) + ahead, into_l2, acc);
    }
}

static void RG_NAME(rows)(const float *x, size_t rows, size_t period, size_t p0, size_t p1,
                          fq_range_acc acc) {
    const size_t group_bytes = RG_ROWS * period * sizeof(float);
    const size_t ahead = (RG_AHEAD_BYTES + group_bytes - 1) / group_bytes * group_bytes;
    if (group_bytes <= RG_L1_GROUP_BYTES) {
        RG_NAME(rows_walk)(x, rows, period, p0, p1, ahead, 0, acc);
    } else {
        RG_NAME(rows_walk)(x, rows, period, p0, p1, ahead, 1, acc);
    }
}

const fq_range_kernels RG_NAME(fq_range) = {RG_NAME(flat), RG_FLAT_BLOCK, RG_NAME(rows)};
