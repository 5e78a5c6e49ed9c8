/* Public range-observer entry point: validation, the walk (flat or by rows) split over threads, and
   each channel's min and max from the exact extremes the kernels keep. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../include/fqcore.h"
#include "../common/fpenv.h"
#include "../common/parallel.h"
#include "../common/period.h"
#include "../common/runtime.h"
#include "range_kernels.h"

/* Thread chunks of the flat walk are whole multiples of every flat block (and of cache lines). */
#define FQ_RANGE_FLAT_ALIGN FQ_RANGE_MAX_FLAT_BLOCK
/* Channel counts are padded to a period that fills whole vectors when that stays this short (as
   the per-channel fake-quant ops do). */
#define FQ_RANGE_MAX_PADDED_PERIOD ((size_t)4096)
/* Rows of a thread's share come in multiples of this (the SIMD kernels take 4 rows a step). */
#define FQ_RANGE_ROW_ALIGN ((size_t)4)
/* Accumulator positions kept on the stack (per extreme): enough for the flat walk on a few
   threads, so a per-tensor call allocates nothing. */
#define FQ_RANGE_STACK_POSITIONS ((size_t)512)

#define FQ_SIGN_BIT 0x80000000u
#define FQ_EXPONENT_BITS 0x7f800000u
#define FQ_PLUS_INF_BITS 0x7f800000u
#define FQ_MINUS_INF_BITS 0xff800000u
/* Every NaN result is this quiet NaN (numpy's float32 nan), whatever NaN the data held. */
#define FQ_RANGE_NAN_BITS 0x7fc00000u

static const fq_range_kernels *active_kernels(void) {
    switch (fq_get_isa()) {
#ifdef FQ_BUILD_AVX2
    case FQ_ISA_AVX2: return &fq_range__avx2;
#endif
#ifdef FQ_BUILD_AVX512
    case FQ_ISA_AVX512: return &fq_range__avx512;
#endif
#ifdef FQ_BUILD_NEON
    case FQ_ISA_NEON: return &fq_range__neon;
#endif
    default: return &fq_range__scalar;
    }
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

static float from_bits(uint32_t bits) {
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

/* A denormal becomes the zero of its sign, as a comparison under denormals-are-zero reads it. */
static uint32_t flush_bits(uint32_t bits) {
    return (bits & FQ_EXPONENT_BITS) == 0 ? bits & FQ_SIGN_BIT : bits;
}

/* min and max of a non-empty channel from its three extremes (range_kernels.h). Bit patterns with
   the sign set order in reverse as unsigned numbers, those without in order as signed ones: the
   most negative element is the largest unsigned pattern when any element is negative, else the
   smallest; the largest element is the largest signed pattern when any element is non-negative,
   else the smallest unsigned one. -0 sits below +0 in both, so zeros follow IEEE 754-2019 minimum
   and maximum; flushing denormals afterwards is the same as flushing them first, as the flush is
   monotone. A NaN of either sign lies beyond the infinity of its sign. */
static void finish(uint32_t max_u, uint32_t min_u, int32_t max_s, float *min, float *max) {
    if (max_s > (int32_t)FQ_PLUS_INF_BITS || max_u > FQ_MINUS_INF_BITS) {
        *min = *max = from_bits(FQ_RANGE_NAN_BITS);
        return;
    }
    const uint32_t lowest = (max_u & FQ_SIGN_BIT) ? max_u : min_u;
    const uint32_t highest = max_s >= 0 ? (uint32_t)max_s : min_u;
    *min = from_bits(flush_bits(lowest));
    *max = from_bits(flush_bits(highest));
}

/* `sets` accumulator sets of `positions` positions each. The flat walk's few fit on the stack. The
   rows walk stores to its accumulators between loads of x, and a load from an address 4 KiB apart
   from a pending store waits for it (4K aliasing): with 128 channels, rows 512 bytes apart, a
   position table at the same offset in a 512-byte block as x made every row wait (Zen 4: 1.6x
   slower). So its sets start 2 KiB + 128..192 bytes past x modulo 4 KiB, on a cache-line boundary
   (a vector split over two lines costs most as a store), each array 4 * period bytes after the
   previous (as rows are), and sets whole pages apart. */
#define FQ_RANGE_ACC_SKEW ((uintptr_t)2048 + 192)
#define FQ_RANGE_PAGE ((uintptr_t)4096)
#define FQ_RANGE_LINE ((uintptr_t)64)

typedef struct {
    unsigned char stack[3 * FQ_RANGE_STACK_POSITIONS * sizeof(uint32_t)];
    void *heap;
    unsigned char *base;
    size_t positions, set_bytes;
} acc_sets;

static fq_status acc_sets_init(acc_sets *s, size_t sets, size_t positions, const float *skew_from) {
    s->heap = NULL;
    s->positions = positions;
    s->set_bytes = 3 * positions * sizeof(uint32_t);
    if (skew_from == NULL && sets * positions <= FQ_RANGE_STACK_POSITIONS) {
        s->base = s->stack;
        return FQ_OK;
    }
    if (skew_from != NULL) s->set_bytes = ceil_div(s->set_bytes, FQ_RANGE_PAGE) * FQ_RANGE_PAGE;
    s->heap = malloc(sets * s->set_bytes + FQ_RANGE_PAGE);
    if (s->heap == NULL) return FQ_ERR_NO_MEMORY;
    const uintptr_t raw = (uintptr_t)s->heap;
    uintptr_t target = raw % FQ_RANGE_PAGE; /* no move without a skew */
    if (skew_from != NULL)
        target = ((uintptr_t)skew_from + FQ_RANGE_ACC_SKEW) % FQ_RANGE_PAGE / FQ_RANGE_LINE * FQ_RANGE_LINE;
    s->base = (unsigned char *)s->heap + (target - raw % FQ_RANGE_PAGE + FQ_RANGE_PAGE) % FQ_RANGE_PAGE;
    return FQ_OK;
}

static fq_range_acc acc_set(const acc_sets *s, size_t set) {
    uint32_t *u = (uint32_t *)(s->base + set * s->set_bytes);
    return (fq_range_acc){u, u + s->positions, (int32_t *)(u + 2 * s->positions)};
}

static void acc_start(fq_range_acc acc, size_t p0, size_t p1) {
    for (size_t p = p0; p < p1; ++p) {
        acc.max_u[p] = FQ_RANGE_MAX_U_START;
        acc.min_u[p] = FQ_RANGE_MIN_U_START;
        acc.max_s[p] = FQ_RANGE_MAX_S_START;
    }
}

/* Channel c is position p of every set for p = c, c + channels, ... below `positions`. */
static void finish_channels(const acc_sets *s, size_t sets, size_t channels, float *min,
                            float *max) {
    for (size_t c = 0; c < channels; ++c) {
        uint32_t max_u = FQ_RANGE_MAX_U_START, min_u = FQ_RANGE_MIN_U_START;
        int32_t max_s = FQ_RANGE_MAX_S_START;
        for (size_t set = 0; set < sets; ++set) {
            const fq_range_acc acc = acc_set(s, set);
            for (size_t p = c; p < s->positions; p += channels) {
                if (acc.max_u[p] > max_u) max_u = acc.max_u[p];
                if (acc.min_u[p] < min_u) min_u = acc.min_u[p];
                if (acc.max_s[p] > max_s) max_s = acc.max_s[p];
            }
        }
        finish(max_u, min_u, max_s, &min[c], &max[c]);
    }
}

/* ---- Flat walk: channel counts that divide the ISA's flat block, the per-tensor range among them.
   Thread item i takes elements [i * chunk, (i + 1) * chunk) into accumulator set i. ---- */

typedef struct {
    const fq_range_kernels *k;
    const float *x;
    size_t n, chunk;
    const acc_sets *sets;
} flat_job;

static void flat_items(void *context, size_t first, size_t end) {
    const flat_job *job = context;
    for (size_t item = first; item < end; ++item) {
        const size_t start = item * job->chunk;
        const size_t len = job->n - start < job->chunk ? job->n - start : job->chunk;
        const fq_range_acc acc = acc_set(job->sets, item);
        acc_start(acc, 0, job->k->flat_block);
        job->k->flat(job->x + start, len, acc);
    }
}

static fq_status range_flat(const fq_range_kernels *k, const float *x, size_t n, size_t channels,
                            float *min, float *max) {
    const int threads = fq_runtime_threads_for(n, ceil_div(n, FQ_RANGE_FLAT_ALIGN));
    const size_t chunk = threads > 1 ? FQ_ITEM_ELEMENTS : ceil_div(n, FQ_RANGE_FLAT_ALIGN) * FQ_RANGE_FLAT_ALIGN;
    const size_t items = ceil_div(n, chunk);
    acc_sets sets;
    const fq_status status = acc_sets_init(&sets, items, k->flat_block, NULL);
    if (status != FQ_OK) return status;
    flat_job job = {k, x, n, chunk, &sets};
    fq_parallel_for(threads, items, flat_items, &job);
    finish_channels(&sets, items, channels, min, max);
    free(sets.heap);
    return FQ_OK;
}

/* ---- Walk by rows of a period: every other channel count. ---- */


/* Items are tiles of row chunks (each its own accumulator set) by position chunks (disjoint
   positions of that set). */
typedef struct {
    const fq_range_kernels *k;
    const float *x;
    size_t period, rows, row_chunk, col_chunk, col_chunks;
    const acc_sets *sets;
} rows_job;

static void rows_items(void *context, size_t first, size_t end) {
    const rows_job *job = context;
    for (size_t item = first; item < end; ++item) {
        const size_t row_item = item / job->col_chunks, col_item = item % job->col_chunks;
        const size_t r0 = row_item * job->row_chunk;
        const size_t rows = job->rows - r0 < job->row_chunk ? job->rows - r0 : job->row_chunk;
        const size_t p0 = col_item * job->col_chunk;
        const size_t p1 = job->period - p0 < job->col_chunk ? job->period : p0 + job->col_chunk;
        const fq_range_acc acc = acc_set(job->sets, row_item);
        acc_start(acc, p0, p1);
        job->k->rows(job->x + r0 * job->period, rows, job->period, p0, p1, acc);
    }
}

static fq_status range_rows(const fq_range_kernels *k, const float *x, size_t n, size_t channels,
                            float *min, float *max) {
    const size_t period = fq_padded_period(channels, FQ_RANGE_MAX_PADDED_PERIOD);
    const size_t rows = n / period, rest = n % period;
    const int threads = fq_runtime_threads_for(n, ceil_div(n, FQ_RANGE_FLAT_ALIGN));
    rows_job job = {k, x, period, rows, rows, period, 1, NULL};
    size_t row_items = 1;
    if (rows >= (size_t)threads) {
        const size_t items = threads > 1 ? ceil_div(n, FQ_ITEM_ELEMENTS) : 1;
        job.row_chunk = ceil_div(ceil_div(rows, items), FQ_RANGE_ROW_ALIGN) * FQ_RANGE_ROW_ALIGN;
        row_items = ceil_div(rows, job.row_chunk);
    } else if (threads > 1 && period >= 2 * FQ_RANGE_FLAT_ALIGN) {
        /* Few rows: threads split the positions of one accumulator set instead. */
        job.col_chunk = ceil_div(ceil_div(period, (size_t)threads), 16) * 16;
        job.col_chunks = ceil_div(period, job.col_chunk);
    }
    acc_sets sets;
    const fq_status status = acc_sets_init(&sets, row_items, period, x);
    if (status != FQ_OK) return status;
    job.sets = &sets;
    if (rows > 0) {
        fq_parallel_for(threads, row_items * job.col_chunks, rows_items, &job);
    } else {
        acc_start(acc_set(&sets, 0), 0, period);
    }
    /* The last, partial period (a whole number of channel rows) joins set 0. */
    if (rest > 0) k->rows(x + rows * period, 1, period, 0, rest, acc_set(&sets, 0));
    finish_channels(&sets, row_items, channels, min, max);
    free(sets.heap);
    return FQ_OK;
}

/* One row of channels: each element is its channel's min and max. */
static void range_single_row(const float *x, size_t channels, float *min, float *max) {
    for (size_t c = 0; c < channels; ++c) {
        const uint32_t bits = fq_range_bits(x[c]);
        finish(bits, bits, (int32_t)bits, &min[c], &max[c]);
    }
}

fq_status fq_f32_range(const float *x, size_t n, size_t channels, float *min, float *max) {
    if (channels == 0) return n == 0 ? FQ_OK : FQ_ERR_BAD_SHAPE;
    if (n % channels != 0) return FQ_ERR_BAD_SHAPE;
    if ((n > 0 && x == NULL) || min == NULL || max == NULL) return FQ_ERR_NULL_POINTER;
    if (n == 0) {
        /* TF's reduce_min / reduce_max of nothing: the identities +inf and -inf. */
        for (size_t c = 0; c < channels; ++c) {
            min[c] = from_bits(FQ_PLUS_INF_BITS);
            max[c] = from_bits(FQ_MINUS_INF_BITS);
        }
        return FQ_OK;
    }
    if (n == channels) {
        range_single_row(x, channels, min, max);
        return FQ_OK;
    }
    const fq_range_kernels *k = active_kernels();
    if (k->flat_block % channels == 0) return range_flat(k, x, n, channels, min, max);
    return range_rows(k, x, n, channels, min, max);
}

fq_status fq_f32_moving_average(float *values, const float *targets, size_t n, float rate) {
    if (n > 0 && (values == NULL || targets == NULL)) return FQ_ERR_NULL_POINTER;
    /* A handful of values per quantizer: one thread, no SIMD; the float environment does the
       flushing that TF's threads do (and -ffp-contract=off keeps the two roundings). */
    const fq_fpenv saved = fq_fpenv_enter();
    for (size_t i = 0; i < n; ++i) values[i] = values[i] - (values[i] - targets[i]) * rate;
    fq_fpenv_leave(saved);
    return FQ_OK;
}
