/* Public fake-quant entry points: validation, the nudge, work partitioning and deterministic sums. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../include/fqcore.h"
#include "../common/fpenv.h"
#include "../common/line_alloc.h"
#include "../common/parallel.h"
#include "../common/period.h"
#include "../common/runtime.h"
#include "fq_channel_walk.h"
#include "fq_element.h"
#include "fq_kernels.h"

/* Elementwise work is split into chunks of whole cache lines. */
#define FQ_CHUNK_ALIGN ((size_t)64)
/* Per-channel gradients keep one row of float64 partial sums per row block: at most this many
   blocks (a fixed function of the shape, never of the thread count), of about this much work.
   Blocks exist for threads, not accuracy (the partials are float64), and more threads than blocks
   split the positions too; so few blocks: 16 cost [1024, 1024] 264 KiB of partials to clear,
   fill and fold on each call, 4 cut its single-thread time from 190 to 180 us. */
#define FQ_CHANNEL_MAX_BLOCKS ((size_t)4)
#define FQ_CHANNEL_BLOCK_WORK ((size_t)65536)
/* Per-channel gradients of at least this many elements walk aligned where the kernels can. */
#define FQ_ALIGNED_GRAD_MIN_ELEMENTS ((size_t)1 << 17)
/* Per-channel gradients whose g, x and dx together reach this many bytes walk as for data from
   memory (fq_fake_quant_kernels.channel_mask_sums; fq_simd.h, adds_every_group). On Zen 4 the
   time an element jumped between [4096, 128] (6 MiB: 0.27 ns) and [6144, 128] (9 MiB: 0.42 ns). */
#define FQ_GRAD_FROM_MEMORY_BYTES ((size_t)8 << 20)
/* Channel counts are padded to a period that fills whole vectors when that stays this short. */
#define FQ_CHANNEL_MAX_PADDED_PERIOD ((size_t)4096)

const fq_fake_quant_kernels *fq_fake_quant_kernels_for(fq_isa isa) {
    switch (isa) {
#ifdef FQ_BUILD_AVX2
    case FQ_ISA_AVX2: return &fq_fake_quant__avx2;
#endif
#ifdef FQ_BUILD_AVX512
    case FQ_ISA_AVX512: return &fq_fake_quant__avx512;
#endif
#ifdef FQ_BUILD_NEON
    case FQ_ISA_NEON: return &fq_fake_quant__neon;
#endif
    default: return &fq_fake_quant__scalar;
    }
}

static const fq_fake_quant_kernels *active_kernels(void) { return fq_fake_quant_kernels_for(fq_get_isa()); }

static fq_status check_common(size_t n, int num_bits, const void *a, const void *b, const void *c) {
    if (num_bits < 2 || num_bits > 16) return FQ_ERR_NUM_BITS;
    if (n > 0 && (a == NULL || b == NULL || c == NULL)) return FQ_ERR_NULL_POINTER;
    return FQ_OK;
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

/* ---- Per-tensor elementwise ops (forward and the Args gradient) ---- */

typedef enum { FORWARD_MUL, FORWARD_DIV, MASK } elementwise_op;

typedef struct {
    const fq_fake_quant_kernels *k;
    elementwise_op op;
    const float *g, *x;
    float *out;
    size_t n, chunk;
    const fq_grid *grid;
    void (*forward_mul)(const float *x, float *out, size_t n, const fq_grid *grid); /* this CPU's */
} elementwise_job;

/* Chunks [first, end) in one kernel call: one stream for the prefetchers. */
static void elementwise_range(void *context, size_t first, size_t end) {
    const elementwise_job *job = context;
    const size_t start = first * job->chunk;
    const size_t stop = end * job->chunk < job->n ? end * job->chunk : job->n;
    const size_t len = stop - start;
    switch (job->op) {
    case FORWARD_MUL: job->forward_mul(job->x + start, job->out + start, len, job->grid); break;
    case FORWARD_DIV: job->k->forward_div(job->x + start, job->out + start, len, job->grid); break;
    case MASK: job->k->mask(job->g + start, job->x + start, job->out + start, len, job->grid); break;
    }
}

static void run_elementwise(elementwise_op op, const float *g, const float *x, float *out, size_t n,
                            const fq_grid *grid) {
    const int threads = fq_runtime_threads_for(n, ceil_div(n, FQ_CHUNK_ALIGN));
    const fq_isa isa = fq_get_isa();
    const fq_fake_quant_kernels *k = fq_fake_quant_kernels_for(isa);
    elementwise_job job = {k, op, g, x, out, n, n, grid,
                           fq_forward_on_fma_for(isa) ? k->forward_mul : k->forward_mul_on_adds};
    if (threads > 1) job.chunk = FQ_ITEM_ELEMENTS;
    fq_parallel_for(threads, ceil_div(n, job.chunk), elementwise_range, &job);
}

static void fill_zero(float *out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = 0.0f;
}

/* The Args ops: a fixed range that must be ordered once denormals are flushed. */
static fq_status run_args(elementwise_op op, const float *g, const float *x, float *out, size_t n,
                          float min, float max, int num_bits, int narrow_range) {
    fq_status status = check_common(n, num_bits, op == MASK ? g : x, x, out);
    if (status != FQ_OK) return status;
    const fq_fpenv saved = fq_fpenv_enter();
    if (!fq_range_is_ordered(min, max)) {
        status = FQ_ERR_MIN_NOT_BELOW_MAX;
    } else if (n > 0) {
        fq_grid grid;
        fq_nudge(min, max, num_bits, narrow_range, &grid);
        run_elementwise(op, g, x, out, n, &grid);
    }
    fq_fpenv_leave(saved);
    return status;
}

fq_status fq_f32_args(const float *x, float *out, size_t n, float min, float max, int num_bits,
                      int narrow_range) {
    return run_args(FORWARD_MUL, NULL, x, out, n, min, max, num_bits, narrow_range);
}

fq_status fq_f32_args_grad(const float *g, const float *x, float *dx, size_t n, float min, float max,
                           int num_bits, int narrow_range) {
    return run_args(MASK, g, x, dx, n, min, max, num_bits, narrow_range);
}

fq_status fq_f32_vars(const float *x, float *out, size_t n, float min, float max, int num_bits,
                      int narrow_range) {
    const fq_status status = check_common(n, num_bits, x, out, out);
    if (status != FQ_OK || n == 0) return status;
    const fq_fpenv saved = fq_fpenv_enter();
    if (fq_range_is_zero(min, max)) {
        fill_zero(out, n);
    } else {
        fq_grid grid;
        fq_nudge(min, max, num_bits, narrow_range, &grid);
        run_elementwise(FORWARD_DIV, NULL, x, out, n, &grid);
    }
    fq_fpenv_leave(saved);
    return FQ_OK;
}

/* ---- Per-tensor gradient with sums ---- */

/* Combines the lanes of one block in a fixed pairwise order. */
static double reduce_lanes(double lanes[FQ_SUM_LANES]) {
    for (size_t width = FQ_SUM_LANES / 2; width > 0; width /= 2)
        for (size_t i = 0; i < width; ++i) lanes[i] += lanes[i + width];
    return lanes[0];
}

typedef struct {
    const fq_fake_quant_kernels *k;
    const float *g, *x;
    float *dx;
    size_t n;
    const fq_grid *grid;
    double *partials; /* [block][2]: min sum, max sum */
} sums_job;

static void sums_blocks(void *context, size_t first, size_t end) {
    const sums_job *job = context;
    for (size_t block = first; block < end; ++block) {
        const size_t start = block * FQ_SUM_BLOCK;
        const size_t len = job->n - start < FQ_SUM_BLOCK ? job->n - start : FQ_SUM_BLOCK;
        double lanes_min[FQ_SUM_LANES] = {0}, lanes_max[FQ_SUM_LANES] = {0};
        job->k->mask_sums(job->g + start, job->x + start, job->dx + start, len, job->grid,
                          lanes_min, lanes_max);
        job->partials[2 * block] = reduce_lanes(lanes_min);
        job->partials[2 * block + 1] = reduce_lanes(lanes_max);
    }
}

/* Block partials of up to 64 blocks (1M elements) live on the stack: no allocation per call. */
#define FQ_STACK_BLOCKS 64

fq_status fq_f32_vars_grad(const float *g, const float *x, float *dx, size_t n, float min, float max,
                           int num_bits, int narrow_range, float *dmin, float *dmax) {
    fq_status status = check_common(n, num_bits, g, x, dx);
    if (status != FQ_OK) return status;
    if (dmin == NULL || dmax == NULL) return FQ_ERR_NULL_POINTER;
    const fq_fpenv saved = fq_fpenv_enter();
    if (fq_range_is_zero(min, max)) {
        if (n > 0 && dx != g) memcpy(dx, g, n * sizeof(float));
        *dmin = 0.0f;
        *dmax = 0.0f;
        fq_fpenv_leave(saved);
        return FQ_OK;
    }
    fq_grid grid;
    fq_nudge(min, max, num_bits, narrow_range, &grid);
    const size_t blocks = ceil_div(n, FQ_SUM_BLOCK);
    double stack_partials[2 * FQ_STACK_BLOCKS];
    double *partials = stack_partials;
    if (blocks > FQ_STACK_BLOCKS) {
        partials = malloc(2 * blocks * sizeof(double));
        if (partials == NULL) {
            fq_fpenv_leave(saved);
            return FQ_ERR_NO_MEMORY;
        }
    }
    sums_job job = {active_kernels(), g, x, dx, n, &grid, partials};
    fq_parallel_for(fq_runtime_threads_for(n, blocks), blocks, sums_blocks, &job);
    double sum_min = 0.0, sum_max = 0.0;
    for (size_t b = 0; b < blocks; ++b) {
        sum_min += partials[2 * b];
        sum_max += partials[2 * b + 1];
    }
    *dmin = (float)sum_min;
    *dmax = (float)sum_max;
    if (partials != stack_partials) free(partials);
    fq_fpenv_leave(saved);
    return FQ_OK;
}

fq_status fq_f32_vars_grad_interval(float min, float max, int num_bits, int narrow_range,
                                    int *passes_all, float *nudged_min, float *nudged_max) {
    fq_status status = check_common(0, num_bits, NULL, NULL, NULL);
    if (status != FQ_OK) return status;
    if (passes_all == NULL || nudged_min == NULL || nudged_max == NULL) return FQ_ERR_NULL_POINTER;
    const fq_fpenv saved = fq_fpenv_enter();
    *passes_all = fq_range_is_zero(min, max);
    fq_grid grid;
    fq_nudge(min, max, num_bits, narrow_range, &grid);
    *nudged_min = grid.nudged_min;
    *nudged_max = grid.nudged_max;
    fq_fpenv_leave(saved);
    return FQ_OK;
}

/* ---- Per-channel ops ---- */

/* Spacing, in doubles, of the min and max partial sums of a period: two cache lines more than the
   period, so that at a 4 KiB period they do not fall in the same L1 set as each other and as the
   rows of the data (which are 4 KiB apart too), and so that an aligned walk has its 16 slots past
   the period (fq_fake_quant_kernels.channel_mask_sums_aligned). */
static size_t skewed_stride(size_t period) {
    const size_t per_line = 64 / sizeof(double);
    return ceil_div(period, per_line) * per_line + 2 * per_line;
}

/* Scratch of one per-channel call: the grid table over a period, in the order the walk meets its
   positions, and which channels are all-zero. Short periods keep it on the stack (a call on a few
   elements spends no time in malloc). */
#define FQ_STACK_PERIOD ((size_t)256)
#define FQ_STACK_GRID_FLOATS (FQ_STACK_PERIOD * FQ_GRID_PARAMS)
typedef struct {
    fq_grid_table table;
    float *grid;    /* the table's storage: on_stack, or storage */
    float *storage; /* NULL while the table is on_stack */
    _Alignas(64) float on_stack[FQ_STACK_GRID_FLOATS];
    float on_stack_ranges[2 * FQ_STACK_PERIOD];
    unsigned char on_stack_zero[FQ_STACK_PERIOD];
    const float *position_min, *position_max; /* the range of each position of the table */
    unsigned char *zero_channel;
    int any_zero_channel;
} channel_setup;

static void free_channels(channel_setup *s) { free(s->storage); }

/* The ranges of the table's positions: position p takes the grid of position (p + shift) % period
   of the unrotated period, which holds channel (p + shift) % channels (the period is a multiple of
   the channel count). Nudging these builds the table in walk order directly; rearranging a nudged
   table was most of a 1024-channel call's setup. */
static void gather_ranges(const float *min, const float *max, size_t channels, size_t period,
                          size_t shift, float *position_min, float *position_max) {
    size_t c = shift % channels;
    for (size_t p = 0; p < period; ++p) {
        position_min[p] = min[c];
        position_max[p] = max[c];
        if (++c == channels) c = 0;
    }
}

/* The grid table (64-byte aligned, like the vectors that load it), rotated by `shift` positions
   (see aligning_head), and the all-zero channels. */
static fq_status setup_channels(channel_setup *s, const fq_fake_quant_kernels *k, size_t channels,
                                const float *min, const float *max, int num_bits, int narrow_range,
                                size_t shift) {
    const size_t period = fq_padded_period(channels, FQ_CHANNEL_MAX_PADDED_PERIOD);
    const size_t floats = ceil_div(period, FQ_GRID_CHUNK) * FQ_GRID_CHUNK * FQ_GRID_PARAMS;
    s->grid = s->on_stack;
    s->storage = NULL;
    float *ranges = s->on_stack_ranges;
    s->zero_channel = s->on_stack_zero;
    if (floats > FQ_STACK_GRID_FLOATS) {
        s->storage = fq_line_alloc((floats + 2 * period) * sizeof(float) + channels);
        if (s->storage == NULL) return FQ_ERR_NO_MEMORY;
        s->grid = s->storage;
        ranges = s->grid + floats;
        s->zero_channel = (unsigned char *)(ranges + 2 * period);
    }
    s->position_min = min;
    s->position_max = max;
    if (period != channels || shift != 0) {
        gather_ranges(min, max, channels, period, shift, ranges, ranges + period);
        s->position_min = ranges;
        s->position_max = ranges + period;
    }
    k->nudge_channels(s->position_min, s->position_max, period, num_bits, narrow_range, s->grid);
    const fq_isa isa = fq_get_isa();
    /* The gradient sets grad_skips_quiet_vectors (channel_grad). */
    s->table =
        (fq_grid_table){period, s->grid, 0.0f, fq_row_walk_for(isa), fq_grad_strips_for(isa), 0};
    /* Locals, not s's fields: a store through an unsigned char pointer may alias any object, so
       the loop would reload s->zero_channel after each. */
    unsigned char *zero_channel = s->zero_channel;
    int any_zero_channel = 0;
    for (size_t c = 0; c < channels; ++c) {
        const int zero = fq_range_is_zero(min[c], max[c]);
        zero_channel[c] = (unsigned char)zero;
        any_zero_channel |= zero;
    }
    s->any_zero_channel = any_zero_channel;
    return FQ_OK;
}

/* numpy places large arrays 16 bytes past a cache line, so each 64-byte vector of a walk from the
   first element straddles two lines, and the per-channel forward, which loads its grid besides,
   pays for it (Zen 4, per-channel / per-tensor: [1024, 1024] 1.45x against 1.25x aligned,
   [8192, 128] 1.32x against 1.11x). So the forward walks from the first element whose input is
   64-byte aligned, over a grid table rotated by the elements it skipped: every element still meets
   its own channel's grid (same bits); the skipped head goes element by element. Short calls and
   periods that are not whole vectors walk from the first element. Where x and out sit differently
   against cache lines, aligning the loads rather than the stores measured faster (out 0 to 4 KiB
   past x, in steps of 16 bytes, median of one-thread times: [512, 128] 7.0-7.2 -> 6.6-6.8 us;
   [8192, 128] 129 -> 125 us; [2048, 512] 121 -> 119 us; [1024, 1024] 136 -> 135 us). */
static size_t aligning_head(const float *x, size_t n, size_t period) {
    const size_t misalignment = (uintptr_t)x % 64;
    if (misalignment == 0 || misalignment % sizeof(float) != 0 || period % FQ_GRID_CHUNK != 0 ||
        n < 8 * period)
        return 0;
    return (64 - misalignment) / sizeof(float);
}

/* Work over whole periods, split by rows, or by positions when there are too few rows. */
typedef struct {
    const fq_fake_quant_kernels *k;
    const float *g, *x;
    float *out;
    const fq_grid_table *table;
    size_t rows, row_chunk, col_chunk, col_chunks;
    double *partials; /* gradient only: per block, min sums then max sums, `acc_stride` apart */
    size_t acc_stride;
    size_t head; /* gradient only: > 0 for an aligned walk, `head` elements into each block */
    fq_grad_place place; /* gradient only: where g, x and dx are (grad_place) */
} channel_job;

static void channel_tile(const channel_job *job, size_t item, size_t *r0, size_t *rows, size_t *p0,
                         size_t *p1) {
    const size_t period = job->table->period;
    const size_t row_item = item / job->col_chunks, col_item = item % job->col_chunks;
    *r0 = row_item * job->row_chunk;
    *rows = job->rows - *r0 < job->row_chunk ? job->rows - *r0 : job->row_chunk;
    *p0 = col_item * job->col_chunk;
    *p1 = period - *p0 < job->col_chunk ? period : *p0 + job->col_chunk;
}

static void channel_forward_tiles(void *context, size_t first, size_t end) {
    const channel_job *job = context;
    for (size_t item = first; item < end; ++item) {
        size_t r0, rows, p0, p1;
        channel_tile(job, item, &r0, &rows, &p0, &p1);
        const size_t offset = r0 * job->table->period;
        job->k->channel_forward(job->x + offset, job->out + offset, rows, job->table, p0, p1);
    }
}

static void channel_grad_tiles(void *context, size_t first, size_t end) {
    const channel_job *job = context;
    for (size_t item = first; item < end; ++item) {
        size_t r0, rows, p0, p1;
        channel_tile(job, item, &r0, &rows, &p0, &p1);
        const size_t offset = r0 * job->table->period, block = item / job->col_chunks;
        double *acc = job->partials + block * 2 * job->acc_stride;
        if (job->head > 0)
            job->k->channel_mask_sums_aligned(job->g + offset, job->x + offset, job->out + offset,
                                              rows, job->table, job->head, acc,
                                              acc + job->acc_stride, job->place);
        else
            job->k->channel_mask_sums(job->g + offset, job->x + offset, job->out + offset, rows,
                                      job->table, p0, p1, acc, acc + job->acc_stride,
                                      job->place);
    }
}

/* Splits `rows` whole periods into `row_items` row chunks; when that gives fewer items than
   threads, the positions of each period are split too (positions never affect the sums' order). */
static void plan_channel_job(channel_job *job, size_t period, size_t rows, size_t row_items,
                             int threads) {
    job->rows = rows;
    job->row_chunk = row_items > 0 ? ceil_div(rows, row_items) : 1;
    job->col_chunk = period;
    job->col_chunks = 1;
    if (threads > 1 && row_items < (size_t)threads && period >= 2 * FQ_CHUNK_ALIGN) {
        job->col_chunk = ceil_div(ceil_div(period, (size_t)threads), 16) * 16;
        job->col_chunks = ceil_div(period, job->col_chunk);
    }
}

static fq_status check_channels(size_t n, size_t channels, int num_bits, const void *a,
                                const void *b, const float *min, const float *max) {
    fq_status status = check_common(n, num_bits, a, b, b);
    if (status != FQ_OK) return status;
    if (channels == 0) return n == 0 ? FQ_OK : FQ_ERR_BAD_SHAPE;
    if (n % channels != 0) return FQ_ERR_BAD_SHAPE;
    if (min == NULL || max == NULL) return FQ_ERR_NULL_POINTER;
    return FQ_OK;
}

fq_status fq_f32_vars_per_channel(const float *x, float *out, size_t n, size_t channels,
                                  const float *min, const float *max, int num_bits,
                                  int narrow_range) {
    fq_status status = check_channels(n, channels, num_bits, x, out, min, max);
    if (status != FQ_OK || n == 0) return status;
    const fq_fpenv saved = fq_fpenv_enter();
    channel_setup s;
    const fq_fake_quant_kernels *k = active_kernels();
    const size_t period = fq_padded_period(channels, FQ_CHANNEL_MAX_PADDED_PERIOD);
    const size_t head = aligning_head(x, n, period);
    status = setup_channels(&s, k, channels, min, max, num_bits, narrow_range, head);
    if (status == FQ_OK) {
        const size_t rows = (n - head) / period, rest = (n - head) % period;
        if (k->scaled_clamp_max != NULL)
            s.table.scaled_clamp_max =
                k->scaled_clamp_max(s.grid, s.position_min, s.position_max, period,
                                    fq_quant_max(num_bits) - fq_quant_min(narrow_range));
        /* Element j < head is at position j of the period: position period - head + j of the
           rotated table. */
        for (size_t j = 0; j < head; ++j) out[j] = fq_channel_element(x[j], &s.table, period - head + j);
        const float *walk_x = x + head;
        float *walk_out = out + head;
        const int threads = fq_runtime_threads_for(n, n / FQ_CHUNK_ALIGN);
        channel_job job = {k, NULL, walk_x, walk_out, &s.table, 0, 0, 0, 0, NULL, 0, 0, 0};
        const size_t row_items = threads > 1 ? ceil_div(n, FQ_ITEM_ELEMENTS) : 1;
        plan_channel_job(&job, period, rows, rows < row_items ? rows : row_items, threads);
        if (rows > 0)
            fq_parallel_for(threads, ceil_div(rows, job.row_chunk) * job.col_chunks,
                            channel_forward_tiles, &job);
        if (rest > 0)
            k->channel_forward(walk_x + rows * period, walk_out + rows * period, 1, &s.table, 0, rest);
        if (s.any_zero_channel)
            for (size_t c = 0; c < channels; ++c)
                if (s.zero_channel[c])
                    for (size_t i = c; i < n; i += channels) out[i] = 0.0f;
        free_channels(&s);
    }
    fq_fpenv_leave(saved);
    return status;
}

/* Where a per-channel gradient of n elements has its g, x and dx, by their size alone: past L2 from
   the bytes where the per-channel forward's x and out are (FQ_PAST_L2_ELEMENTS of each). */
static fq_grad_place grad_place(size_t n) {
    if (3 * n * sizeof(float) >= FQ_GRAD_FROM_MEMORY_BYTES) return FQ_GRAD_FROM_MEMORY;
    return 3 * n >= 2 * FQ_PAST_L2_ELEMENTS ? FQ_GRAD_PAST_L2 : FQ_GRAD_IN_L2;
}

/* Row blocks of the per-channel sums: a function of the shape only. */
static size_t channel_sum_blocks(size_t n, size_t period, size_t rows) {
    if (period >= FQ_CHANNEL_MAX_PADDED_PERIOD || rows <= 1) return 1;
    size_t blocks = n / FQ_CHANNEL_BLOCK_WORK;
    /* A call of one block's work is big enough for two threads (FQ_PARALLEL_MIN_WORK): two blocks
       give them whole rows. With one block they would split each row's positions, which is slower
       than one thread ([576, 128]: 24 us on two threads, 10 us on one; 6 us with two blocks). More
       blocks for every size was no better: their partials grew past what glibc keeps for reuse
       ([256, 1024] with 8 blocks, 132 KiB: page faults on every call, 45 -> 70 us). */
    if (blocks == 1) blocks = 2;
    if (blocks > FQ_CHANNEL_MAX_BLOCKS) blocks = FQ_CHANNEL_MAX_BLOCKS;
    if (blocks > rows) blocks = rows;
    return blocks < 1 ? 1 : blocks;
}

/* Per-channel sums: row blocks (fixed by the shape) of float64 partials per position, folded per
   channel in block order, then position order. */
/* TF passes g through unchanged on all-zero channels. dx may be g itself, which the kernels
   overwrite, so those channels' g is gathered first (they are rare: only then is memory spent). */
static float *save_zero_channels(const channel_setup *s, const float *g, size_t n, size_t channels) {
    size_t zero = 0;
    for (size_t c = 0; c < channels; ++c) zero += s->zero_channel[c];
    float *saved = malloc((n / channels) * zero * sizeof(float) + 1);
    if (saved == NULL) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i += channels)
        for (size_t c = 0; c < channels; ++c)
            if (s->zero_channel[c]) saved[k++] = g[i + c];
    return saved;
}

static void restore_zero_channels(const channel_setup *s, const float *saved, float *dx, size_t n,
                                  size_t channels) {
    size_t k = 0;
    for (size_t i = 0; i < n; i += channels)
        for (size_t c = 0; c < channels; ++c)
            if (s->zero_channel[c]) dx[i + c] = saved[k++];
}

/* Partial sums of up to this many doubles live on the stack (two blocks of a short period). */
#define FQ_STACK_PARTIALS ((size_t)2 * 2 * (FQ_STACK_PERIOD + 16))

static fq_status channel_grad(const fq_fake_quant_kernels *k, const float *g, const float *x,
                              float *dx, size_t n, size_t channels, const float *min,
                              const float *max, int num_bits, int narrow_range, float *dmin,
                              float *dmax) {
    const size_t period = fq_padded_period(channels, FQ_CHANNEL_MAX_PADDED_PERIOD);
    const size_t rows = n / period, rest = n % period;
    const int threads = fq_runtime_threads_for(n, n / FQ_CHUNK_ALIGN);
    const size_t acc_stride = skewed_stride(period);
    channel_job job = {k, g, x, dx, NULL, 0, 0, 0, 0, NULL, acc_stride, 0, grad_place(n)};
    plan_channel_job(&job, period, rows, channel_sum_blocks(n, period, rows), threads);
    /* Past L2, blocks of whole periods walk from their first element whose input is 64-byte
       aligned, where the kernels can: numpy's 16-byte offset otherwise splits every vector across
       two lines (x, g and dx 16 bytes past a line, one thread: [1024, 1024] 184 -> 170 us,
       [2048, 512] 176 -> 160 us, [8192, 128] 155 -> 150 us). In L2 the split lines cost little
       and the two partial vectors of each block more ([288, 48]: 2.23 -> 2.37 us). */
    if (k->channel_mask_sums_aligned != NULL && rest == 0 && job.col_chunks == 1 &&
        n >= FQ_ALIGNED_GRAD_MIN_ELEMENTS)
        job.head = aligning_head(x, n, period);
    channel_setup s;
    fq_status status = setup_channels(&s, k, channels, min, max, num_bits, narrow_range, job.head);
    if (status != FQ_OK) return status;
    s.table.grad_skips_quiet_vectors =
        job.place == FQ_GRAD_IN_L2 && fq_grad_skips_quiet_vectors_for(fq_get_isa());
    job.table = &s.table;
    float *saved = NULL;
    if (s.any_zero_channel) {
        saved = save_zero_channels(&s, g, n, channels);
        if (saved == NULL) {
            free_channels(&s);
            return FQ_ERR_NO_MEMORY;
        }
    }
    const size_t blocks = rows > 0 ? ceil_div(rows, job.row_chunk) : 1;
    /* The kernels read and write the partial sums a vector of doubles at a time, at every position
       they add to: each vector must lie on one 64-byte line, as it does when the partials start on
       one (acc_stride is whole lines). At malloc's 16 bytes every AVX-512 access splits across two
       lines: Intel Xeon (Sapphire Rapids class), one thread, [3, 3, 64, 128], partials 0 / 16 /
       32 / 48 / 64 bytes past a line: 0.27% of x clipped 10.1 / 11.7 / 11.5 / 11.1 / 9.8 us, 4.6%
       20.5 / 24.7 / 24.3 / 24.5 / 19.3 us. */
    _Alignas(FQ_LINE_BYTES) double stack_partials[FQ_STACK_PARTIALS];
    const size_t partial_count = blocks * 2 * acc_stride;
    job.partials = partial_count <= FQ_STACK_PARTIALS ? stack_partials
                                                      : fq_line_alloc(partial_count * sizeof(double));
    if (job.partials == NULL) {
        free(saved);
        free_channels(&s);
        return FQ_ERR_NO_MEMORY;
    }
    memset(job.partials, 0, partial_count * sizeof(double));
    if (rows > 0) fq_parallel_for(threads, blocks * job.col_chunks, channel_grad_tiles, &job);
    /* The partial last period comes after every whole row, so it joins the last block. */
    double *last = job.partials + (blocks - 1) * 2 * acc_stride;
    if (rest > 0)
        job.k->channel_mask_sums(g + rows * period, x + rows * period, dx + rows * period, 1,
                                 &s.table, 0, rest, last, last + acc_stride, job.place);
    /* An aligned walk left positions [0, head) past the period; their slots at p are still +0. */
    if (job.head > 0)
        for (size_t b = 0; b < blocks; ++b) {
            double *acc = job.partials + b * 2 * acc_stride;
            for (size_t p = 0; p < job.head; ++p) {
                acc[p] = acc[period + p];
                acc[acc_stride + p] = acc[acc_stride + period + p];
            }
        }
    /* Each channel's sums: the blocks in order, in each block its positions in order. They are
       folded into block 0's first period of positions, which hold each sum's first term (the
       accumulators start at +0 and so are never -0: starting from that term is starting from +0
       and adding it). */
    double *total_min = job.partials, *total_max = job.partials + acc_stride;
    for (size_t b = 0; b < blocks; ++b) {
        const double *acc = job.partials + b * 2 * acc_stride;
        /* A period holds whole repeats of the channels: a channel-wide inner loop vectorizes
           (one position at a time with a wrapping channel index took 9 us at 1024 x 16 blocks). */
        for (size_t p = b == 0 ? channels : 0; p < period; p += channels)
            for (size_t c = 0; c < channels; ++c) {
                total_min[c] += acc[p + c];
                total_max[c] += acc[acc_stride + p + c];
            }
    }
    for (size_t c = 0; c < channels; ++c) {
        dmin[c] = (float)total_min[c];
        dmax[c] = (float)total_max[c];
    }
    if (s.any_zero_channel)
        for (size_t c = 0; c < channels; ++c)
            if (s.zero_channel[c]) dmin[c] = dmax[c] = 0.0f;
    if (saved != NULL) restore_zero_channels(&s, saved, dx, n, channels);
    free(saved);
    if (job.partials != stack_partials) free(job.partials);
    free_channels(&s);
    return FQ_OK;
}

fq_status fq_f32_vars_per_channel_grad(const float *g, const float *x, float *dx, size_t n,
                                       size_t channels, const float *min, const float *max,
                                       int num_bits, int narrow_range, float *dmin, float *dmax) {
    fq_status status = check_channels(n, channels, num_bits, g, x, min, max);
    if (status == FQ_OK && n > 0 && dx == NULL) status = FQ_ERR_NULL_POINTER;
    if (status == FQ_OK && channels > 0 && (dmin == NULL || dmax == NULL)) status = FQ_ERR_NULL_POINTER;
    if (status != FQ_OK) return status;
    if (n == 0) {
        for (size_t c = 0; c < channels; ++c) dmin[c] = dmax[c] = 0.0f;
        return FQ_OK;
    }
    const fq_fpenv saved = fq_fpenv_enter();
    status = channel_grad(active_kernels(), g, x, dx, n, channels, min, max, num_bits, narrow_range,
                          dmin, dmax);
    fq_fpenv_leave(saved);
    return status;
}
