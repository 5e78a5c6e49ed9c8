/* Layout walks for batch norm: which elements each kernel call sees, in which order sums combine,
   and how calls are spread over threads. */
#include <stdlib.h>

#include "../common/kernel_choices.h"
#include "../common/parallel.h"
#include "../common/period.h"
#include "../common/runtime.h"
#include "bn_convert.h"
#include "bn_walk.h"

/* Channels-last channel counts are padded to a period that fills whole 16-lane vectors (lcm(C, 16))
   when that stays this short; longer rows use a period of C with a short last vector. */
#define BN_MAX_PADDED_PERIOD ((size_t)1024)
/* Channels-last sums: one float64 partial per position for each block of periods; blocks hold at
   least this many periods (the partials stay a small fraction of the data) and number at most
   BN_MAX_BLOCKS. Both are functions of the shape alone, so the order of the sums is too. */
#define BN_MIN_BLOCK_PERIODS ((size_t)64)
#define BN_MAX_BLOCKS ((size_t)64)
/* Elementwise passes: items of about this many elements, taken from the last to the first (on one
   thread too). Smaller items (32768) made the reversed walk cost up to 10% on data beyond L2 (each
   item restarts the prefetchers); this size still splits every benchmarked shape over 2 threads. */
#define BN_CHUNK ((size_t)65536)
/* An op whose arrays together exceed this is taken to be beyond the caches: its sums walk as for
   data from memory (sums_first_channels; rows_in_order in bn_simd.h, where the CPU gains by it),
   and its pass writes its output with non-temporal stores: the stores then skip reading each
   destination line first (a quarter of an np.add-like pass's memory traffic), and an output this
   large is unlikely to be read from the cache. At 32 MiB the NHWC 64x14x14x256 forward (25.6 MB)
   was not streamed: with TF and PyTorch interleaved (compare.py, x and y out of the caches at each
   batch's start) it took 2.0-2.2 ms, streamed 1.42-1.46 ms (Intel Xeon, one thread, three runs);
   called back to back, with its arrays in L3, streamed is 3-5% slower (forward 1.40 -> 1.43-1.46
   ms, inference 0.92 -> 0.97 ms). */
#define BN_BEYOND_CACHES_BYTES ((size_t)16 << 20)

static const fq_bn_kernels *active_kernels(void) {
    switch (fq_get_isa()) {
#ifdef FQ_BUILD_AVX2
    case FQ_ISA_AVX2: return &fq_bn__avx2;
#endif
#ifdef FQ_BUILD_AVX512
    case FQ_ISA_AVX512: return &fq_bn__avx512;
#endif
#ifdef FQ_BUILD_NEON
    case FQ_ISA_NEON: return &fq_bn__neon;
#endif
    default: return &fq_bn__scalar;
    }
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

static int is_channels_last(const fq_bn_walk *w) { return w->shape.layout == FQ_BN_CHANNELS_LAST; }

void fq_bn_walk_init(fq_bn_walk *walk, fq_dtype dtype, fq_bn_shape shape) {
    walk->kernels = active_kernels();
    walk->dtype = dtype;
    walk->element_size = fq_dtype_size(dtype);
    /* [N, C, 1] is [N, 1, C] in memory. */
    if (shape.layout == FQ_BN_CHANNELS_FIRST && shape.inner == 1) {
        shape.layout = FQ_BN_CHANNELS_LAST;
    }
    walk->shape = shape;
    walk->per_channel = shape.outer * shape.inner;
    walk->count = walk->per_channel * shape.channels;
}

static const char *at(const void *base, size_t element, size_t element_size) {
    return base == NULL ? NULL : (const char *)base + element * element_size;
}

/* ---- Sums ---- */

typedef struct {
    const fq_bn_walk *walk;
    const void *dy, *x;
    const float *center;  /* channels-last: per position; channels-first: per lane of each channel */
    size_t period, periods, blocks;
    double *partials;     /* channels-last: blocks x (sum_a[period], sum_b[period]);
                             channels-first: per lane of each channel, sum_a then sum_b */
    int from_memory;      /* the op's arrays are beyond the caches (beyond_caches) */
    int rows_in_order;    /* the gradient's sums walk rows in memory order: from_memory on a CPU
                             that gains by it (fq_bn_sums_in_order), found once a call */
} sums_job;

static void sums_call(const sums_job *job, size_t first, size_t runs, size_t run_stride,
                      size_t count, size_t period, const float *center, double *a, double *b,
                      size_t table_stride, size_t readable_after) {
    const fq_bn_walk *w = job->walk;
    const char *x = at(job->x, first, w->element_size);
    if (job->dy == NULL) {
        w->kernels->moments(x, w->dtype, runs, run_stride, count, period, center, a, b, table_stride,
                            readable_after);
    } else {
        w->kernels->grad_sums(at(job->dy, first, w->element_size), x, w->dtype, runs, run_stride,
                              count, period, center, a, b, table_stride, readable_after,
                              job->rows_in_order);
    }
}

static void sums_last_blocks(void *context, size_t first_block, size_t end_block) {
    const sums_job *job = context;
    for (size_t block = first_block; block < end_block; ++block) {
        const size_t first = job->periods * block / job->blocks * job->period;
        size_t end = job->periods * (block + 1) / job->blocks * job->period;
        if (end > job->walk->count) end = job->walk->count;
        double *a = job->partials + 2 * job->period * block;
        double *b = a + job->period;
        for (size_t p = 0; p < 2 * job->period; ++p) a[p] = 0.0;
        /* The block may fetch the start of the next one ahead (on one thread, that comes next). */
        sums_call(job, first, 1, 0, end - first, job->period, job->center, a, b, 0,
                  job->walk->count - end);
    }
}

/* Channels-first sums of data beyond the caches whose channels' lane partials and centers (320
   bytes a channel) overflow L1 walk each channel's runs of a few batches at a time, those batches
   side by side (so that the partials are loaded and stored once for them); else batch by batch, all
   the call's channels in each. Walked batch by batch, every run brought its partials and center
   back into L1 (5 lines for the 12 of a plane of 196 floats) and wrote the partials back. Zen 4,
   AVX-512, one thread, ns an element of the sums alone (an ad hoc loop over the kernel table),
   batch by batch -> side by side: NCHW 64x256x14x14 moments 0.16-0.30 -> 0.10-0.17 (four batches),
   gradient sums 0.27-0.35 -> 0.18-0.31 (two batches: two inputs); 64x1024x7x7 moments 0.48 -> 0.26.
   With 64 channels (partials in L1) side by side was slower (moments 0.107 -> 0.119-0.140), and so
   was data in the caches with short planes (8x1024x7x7: moments 0.17 -> 0.19-0.21, gradient sums
   0.22 -> 0.27-0.28; 4x256x14x14 and 16x256x14x14 even). Each lane still adds its runs batch after
   batch, so the bits do not change. */
#define BN_FIRST_SUMS_L1_BYTES ((size_t)32 << 10)
#define BN_FIRST_SUMS_CHANNEL_BYTES ((size_t)FQ_BN_LANES * (2 * sizeof(double) + sizeof(float)))

/* Lane l of a channel takes the elements l, l + 16, ... of each of its runs, batch after batch.
   Items are channels; channels [c0, c1) are walked so that memory is read in order, or in a few
   streams in order (above). */
static void sums_first_channels(void *context, size_t c0, size_t c1) {
    const sums_job *job = context;
    const fq_bn_shape *s = &job->walk->shape;
    const size_t lanes = FQ_BN_LANES * s->channels;
    if (job->from_memory && (c1 - c0) * BN_FIRST_SUMS_CHANNEL_BYTES > BN_FIRST_SUMS_L1_BYTES) {
        const size_t side_by_side = job->dy == NULL ? 4 : 2;
        for (size_t n0 = 0; n0 < s->outer; n0 += side_by_side) {
            const size_t batches = s->outer - n0 < side_by_side ? s->outer - n0 : side_by_side;
            for (size_t c = c0; c < c1; ++c) {
                double *a = job->partials + FQ_BN_LANES * c;
                sums_call(job, (n0 * s->channels + c) * s->inner, batches, s->channels * s->inner,
                          s->inner, FQ_BN_LANES, job->center + FQ_BN_LANES * c, a, a + lanes, 0, 0);
            }
        }
        return;
    }
    double *a = job->partials + FQ_BN_LANES * c0, *b = a + lanes;
    for (size_t n = 0; n < s->outer; ++n)
        sums_call(job, (n * s->channels + c0) * s->inner, c1 - c0, s->inner, s->inner, FQ_BN_LANES,
                  job->center + FQ_BN_LANES * c0, a, b, FQ_BN_LANES, 0);
}

/* The channels-first sums' scratch: per lane of each channel, the two partials and the center. */
static fq_status sums_first_begin(sums_job *job, const float *center) {
    const size_t lanes = FQ_BN_LANES * job->walk->shape.channels;
    double *scratch = malloc((2 * sizeof(double) + sizeof(float)) * lanes);
    if (scratch == NULL) return FQ_ERR_NO_MEMORY;
    float *center_by_lane = (float *)(scratch + 2 * lanes);
    for (size_t i = 0; i < lanes; ++i) {
        scratch[i] = scratch[lanes + i] = 0.0;
        center_by_lane[i] = center[i / FQ_BN_LANES];
    }
    job->partials = scratch;
    job->center = center_by_lane;
    return FQ_OK;
}

/* The lanes of channels [c0, c1), in lane order. */
static void sums_first_totals(const sums_job *job, size_t c0, size_t c1, double *sum_a, double *sum_b) {
    const size_t lanes = FQ_BN_LANES * job->walk->shape.channels;
    for (size_t c = c0; c < c1; ++c) {
        double total_a = 0.0, total_b = 0.0;
        for (size_t l = 0; l < FQ_BN_LANES; ++l) {
            total_a += job->partials[FQ_BN_LANES * c + l];
            total_b += job->partials[lanes + FQ_BN_LANES * c + l];
        }
        sum_a[c] = total_a;
        sum_b[c] = total_b;
    }
}

static fq_status sums_last(sums_job *job, const float *center, double *sum_a, double *sum_b) {
    const fq_bn_walk *w = job->walk;
    const size_t channels = w->shape.channels;
    job->period = fq_padded_period(channels, BN_MAX_PADDED_PERIOD);
    job->periods = ceil_div(w->count, job->period);
    job->blocks = job->periods / BN_MIN_BLOCK_PERIODS;
    if (job->blocks < 1) job->blocks = 1;
    if (job->blocks > BN_MAX_BLOCKS) job->blocks = BN_MAX_BLOCKS;
    double *scratch = malloc((2 * job->blocks * sizeof(double) + sizeof(float)) * job->period);
    if (scratch == NULL) return FQ_ERR_NO_MEMORY;
    float *center_by_position = (float *)(scratch + 2 * job->period * job->blocks);
    for (size_t p = 0; p < job->period; ++p) center_by_position[p] = center[p % channels];
    job->center = center_by_position;
    job->partials = scratch;
    fq_parallel_for(fq_runtime_threads_for(w->count, job->blocks), job->blocks, sums_last_blocks, job);
    /* Blocks in index order for each position (into block 0's partials, walking each block's
       partials in memory order: position by position, the walk jumped a block's size at every
       step), then the positions of each channel in order. */
    double *total_a = scratch, *total_b = scratch + job->period;
    for (size_t block = 1; block < job->blocks; ++block) {
        const double *a = scratch + 2 * job->period * block, *b = a + job->period;
        for (size_t p = 0; p < job->period; ++p) {
            total_a[p] += a[p];
            total_b[p] += b[p];
        }
    }
    for (size_t c = 0; c < channels; ++c) sum_a[c] = sum_b[c] = 0.0;
    for (size_t p = 0; p < job->period; ++p) {
        sum_a[p % channels] += total_a[p];
        sum_b[p % channels] += total_b[p];
    }
    free(scratch);
    return FQ_OK;
}

/* ---- Elementwise passes ---- */

typedef struct {
    const fq_bn_walk *walk;
    fq_bn_pass pass;
    const void *dy, *x;
    void *out;
    size_t period, chunk; /* channels-last: elements per item; channels-first: runs per item */
    size_t items;
    int stream;
    /* Channels-last: the four parameters' tables over the padded period (period + FQ_BN_LANES
       entries each). Channels-first: the per-channel parameters themselves, one entry a channel,
       read as runs of period 1. */
    fq_bn_table table;
} elementwise_job;

static void elementwise_call(const elementwise_job *job, size_t first, size_t runs,
                             size_t run_stride, size_t count, const fq_bn_table *table,
                             size_t table_stride) {
    const fq_bn_walk *w = job->walk;
    const size_t es = w->element_size, period = job->period;
    void *out = (char *)job->out + first * es;
    const char *x = at(job->x, first, es), *dy = at(job->dy, first, es);
    switch (job->pass) {
    case FQ_BN_NORMALIZE:
        w->kernels->normalize(x, out, w->dtype, runs, run_stride, count, period, table, table_stride,
                              job->stream);
        break;
    case FQ_BN_BACKPROP:
        w->kernels->backprop(dy, x, out, w->dtype, runs, run_stride, count, period, table,
                             table_stride, job->stream);
        break;
    case FQ_BN_SCALE:
        w->kernels->scale(dy, out, w->dtype, runs, run_stride, count, period, table, table_stride,
                          job->stream);
        break;
    }
}

/* Items go from the last to the first: the sums pass before this one read the data forwards, so
   its end is what the caches still hold (with arrays beyond L3, the gradient's x and dy); on
   several threads, each thread's share of it (fq_parallel_for_backward). */
static void elementwise_last_item(const elementwise_job *job, size_t item) {
    const size_t first = item * job->chunk;
    const size_t count = job->walk->count - first < job->chunk ? job->walk->count - first : job->chunk;
    elementwise_call(job, first, 1, 0, count, &job->table, 0);
}

static void elementwise_last_items(void *context, size_t first, size_t end) {
    for (size_t item = end; item > first; --item) elementwise_last_item(context, item - 1);
}

/* Runs in memory order; the runs of one batch are consecutive channels, so one call takes them. */
static void elementwise_first_item(const elementwise_job *job, size_t item) {
    const fq_bn_shape *s = &job->walk->shape;
    const size_t runs = s->outer * s->channels;
    const size_t end = (item + 1) * job->chunk < runs ? (item + 1) * job->chunk : runs;
    for (size_t run = item * job->chunk; run < end;) {
        const size_t channel = run % s->channels;
        size_t batch_runs = s->channels - channel;
        if (batch_runs > end - run) batch_runs = end - run;
        const fq_bn_table table = fq_bn_table_of_run(&job->table, channel, 1);
        elementwise_call(job, run * s->inner, batch_runs, s->inner, s->inner, &table, 1);
        run += batch_runs;
    }
}

static void elementwise_first_items(void *context, size_t first, size_t end) {
    for (size_t item = end; item > first; --item) elementwise_first_item(context, item - 1);
}

/* The channels-last tables of the elementwise constants over the padded period, in `tables`
   (4 x (period + FQ_BN_LANES) floats). */
static fq_bn_table fill_tables(float *tables, size_t period, size_t channels,
                               const fq_bn_table *per_channel) {
    const size_t entries = period + FQ_BN_LANES;
    const float *params[4] = {per_channel->a, per_channel->b, per_channel->c, per_channel->d};
    for (size_t k = 0; k < 4; ++k)
        for (size_t e = 0; e < entries; ++e) tables[k * entries + e] = params[k][e % period % channels];
    const fq_bn_table t = {tables, tables + entries, tables + 2 * entries, tables + 3 * entries};
    return t;
}

static int beyond_caches(const fq_bn_walk *w, fq_bn_pass pass) {
    const size_t arrays = pass == FQ_BN_BACKPROP ? 3 : 2;
    return w->count * w->element_size * arrays >= BN_BEYOND_CACHES_BYTES;
}

fq_status fq_bn_walk_elementwise(const fq_bn_walk *w, fq_bn_pass pass, const void *dy,
                                 const void *x, void *out, const fq_bn_table *per_channel) {
    if (w->count == 0) return FQ_OK;
    const size_t channels = w->shape.channels;
    const int last = is_channels_last(w);
    const size_t period = last ? fq_padded_period(channels, BN_MAX_PADDED_PERIOD) : 1;
    float *tables = NULL;
    elementwise_job job = {w, pass, dy, x, out, period, 0, 0, beyond_caches(w, pass), *per_channel};
    if (last) {
        tables = malloc(sizeof(float) * 4 * (period + FQ_BN_LANES));
        if (tables == NULL) return FQ_ERR_NO_MEMORY;
        job.table = fill_tables(tables, period, channels, per_channel);
    }
    const size_t units = last ? ceil_div(w->count, period) : w->shape.outer * channels;
    const size_t unit_size = last ? period : w->shape.inner;
    size_t per_item = BN_CHUNK / unit_size;
    if (per_item < 1) per_item = 1;
    job.items = ceil_div(units, per_item);
    const int threads = fq_runtime_threads_for(w->count, job.items);
    job.chunk = last ? per_item * period : per_item;
    fq_parallel_for_backward(threads, job.items,
                             last ? elementwise_last_items : elementwise_first_items, &job);
    free(tables);
    return FQ_OK;
}

/* ---- Sums, per-channel constants, elementwise pass ---- */

/* Channels-first gradients are walked, where the CPU gains by it (fq_bn_gradient_blocks), in blocks
   of channels of about this many bytes of input: a block's sums, then its constants, then its
   elementwise pass, which reads the block's x and dy again while the cache still holds them (the
   per-core L2 is 1-2 MiB on the CPUs measured), so they come from memory once, not twice. Intel Xeon (Sapphire-Rapids class, AVX-512, one thread),
   against the two passes, compare.py --quick --sections bn, median of three runs' minima, without
   TF and PyTorch: NCHW 64x256x14x14 2.28 -> 2.00 ms, NCHW 32x64x56x56 4.59 -> 4.06-4.14 ms; with
   them: 2.68 -> 2.58, 5.54 -> 5.25. Back to back (median of 15 calls), the first 2.26 -> 1.70 ms
   with 512 KiB blocks; 128 KiB, 256 KiB, 1 MiB and 2 MiB gave 2.2, 1.85, 1.82 and 2.25-2.45 ms. */
#define BN_FUSED_BLOCK_BYTES ((size_t)1 << 19)

typedef struct {
    sums_job sums;
    elementwise_job pass;
    double *sum_a, *sum_b;
    fq_bn_finish finish;
    void *context;
    size_t block_channels;
} fused_job;

static void fused_blocks(void *context, size_t first, size_t end) {
    fused_job *job = context;
    const fq_bn_shape *s = &job->sums.walk->shape;
    for (size_t block = first; block < end; ++block) {
        const size_t c0 = block * job->block_channels;
        const size_t c1 = s->channels - c0 < job->block_channels ? s->channels : c0 + job->block_channels;
        sums_first_channels(&job->sums, c0, c1);
        sums_first_totals(&job->sums, c0, c1, job->sum_a, job->sum_b);
        job->finish(job->context, c0, c1);
        if (job->pass.out == NULL) continue;
        const fq_bn_table table = fq_bn_table_of_run(&job->pass.table, c0, 1);
        for (size_t n = 0; n < s->outer; ++n)
            elementwise_call(&job->pass, (n * s->channels + c0) * s->inner, c1 - c0, s->inner, s->inner,
                             &table, 1);
    }
}

fq_status fq_bn_walk_fused(const fq_bn_walk *w, fq_bn_pass pass, const void *dy, const void *x,
                           void *out, const float *center, double *sum_a, double *sum_b,
                           fq_bn_finish finish, void *context, const fq_bn_table *per_channel) {
    const size_t channels = w->shape.channels;
    if (w->count == 0) {
        for (size_t c = 0; c < channels; ++c) sum_a[c] = sum_b[c] = 0.0;
        finish(context, 0, channels);
        return FQ_OK;
    }
    const int from_memory = beyond_caches(w, pass);
    const int rows_in_order = from_memory && fq_bn_sums_in_order();
    fused_job job = {{w, dy, x, NULL, 0, 0, 0, NULL, from_memory, rows_in_order},
                     {w, pass, dy, x, out, 1, 0, 0, from_memory, *per_channel},
                     sum_a, sum_b, finish, context, 1};
    fq_status status;
    if (is_channels_last(w)) {
        status = sums_last(&job.sums, center, sum_a, sum_b);
        if (status != FQ_OK) return status;
        finish(context, 0, channels);
        return out == NULL ? FQ_OK : fq_bn_walk_elementwise(w, pass, dy, x, out, per_channel);
    }
    if ((status = sums_first_begin(&job.sums, center)) != FQ_OK) return status;
    const size_t channel_bytes = w->per_channel * w->element_size * 2;
    if (channel_bytes < BN_FUSED_BLOCK_BYTES) job.block_channels = BN_FUSED_BLOCK_BYTES / channel_bytes;
    const size_t blocks = ceil_div(channels, job.block_channels);
    const int threads = fq_runtime_threads_for(w->count, channels);
    /* The forward reads one array twice, not two: with TF and PyTorch interleaved (compare.py), where
       each batch of calls starts with x out of the caches, its blocks' short reads (a block's slice
       of each batch) lost more than the second pass gained (NCHW 32x64x56x56 3.43 -> 3.96 ms,
       64x256x14x14 1.59 -> 1.77 ms), though back to back they won (1.41 -> 1.19 ms). */
    if (dy != NULL && fq_bn_gradient_blocks() && (threads == 1 || blocks >= 4 * (size_t)threads)) {
        fq_parallel_for(fq_runtime_threads_for(w->count, blocks), blocks, fused_blocks, &job);
    } else {
        /* Two passes (or too few blocks to share among the threads): the sums, then the pass, each
           split its own way. */
        fq_parallel_for(threads, channels, sums_first_channels, &job.sums);
        sums_first_totals(&job.sums, 0, channels, sum_a, sum_b);
        finish(context, 0, channels);
        if (out != NULL) status = fq_bn_walk_elementwise(w, pass, dy, x, out, per_channel);
    }
    free(job.sums.partials);
    return status;
}
