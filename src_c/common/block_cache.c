/* Memory blocks for arrays, with freed large blocks kept for the next allocation of their size. A
   training step makes and frees the same arrays every time; glibc hands large freed blocks back to
   the system, and each comes back as fresh pages, a page fault per 4 KiB (the demo's step, AMD Zen
   4: 9.8-13.5 ms without these blocks, 5.1-7.1 ms with them). fqcore's Session.run and
   fqcore.cached_memory have numpy take the memory of the arrays they make from here (NEP 49's
   handler, in _kernels.pyx). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../include/fqcore.h"

/* A block's byte count is stored in the word before it, so that neither free nor realloc has to
   trust a caller's size. Small blocks come from malloc 16 bytes in; large ones are 64-byte
   aligned (a cache line, for the kernels' aligned walks) and start 64 bytes in. */
#define SMALL_HEADER ((size_t)16)
#define LARGE_HEADER ((size_t)64)
/* Sizes in one bucket: a request is rounded up to a multiple of this. */
#define LARGE_GRAIN ((size_t)64)
/* Blocks smaller than this go back to malloc when freed: glibc keeps small blocks in its heap. */
#define LARGE_MIN ((size_t)16384)
/* Cached bytes at most, all sizes together: a step's arrays, not a dataset. */
#define CACHE_MAX_BYTES ((size_t)1 << 30)
/* Distinct sizes cached at once (an open-addressing table); a size that finds no slot is freed. */
#define BUCKETS 512
/* A size neither taken nor freed in this many rounds (fq_block_cache_end_round: Session.run's) is
   given back: enough for a few other runs (an evaluation, a summary) between two training steps. */
#define STALE_ROUNDS 4
/* A request takes the newest of the last RECENT_BLOCKS blocks freed that holds it and is at most
   RECENT_MAX_RATIO times its size, before its own size's newest block: memory freed moments ago is
   still in the CPU's caches, and a loop whose later layers are smaller than its first ones (each
   size with blocks of its own, last touched a step before) otherwise reads its arrays from DRAM.
   A loop of fqcore calls on three layers' activations (benchmarks/ops_loop_memory.py, AMD Zen 4,
   median ms per step, three processes alternating): own size only 1.70-2.23, with the recent
   blocks 1.14-1.30, glibc keeping freed memory 1.13-1.71 (the last 8 blocks, 2 times the size at
   most: 1.56-1.76).
   The demo's and MobileNet-v2's training steps measured the same either way. */
#define RECENT_BLOCKS 16
#define RECENT_MAX_RATIO 4

/* A free block's first two words link it into its bucket's list, newest first. */
typedef struct free_links {
    struct free_links *next, *prev;
} free_links;

typedef struct {
    size_t size;      /* 0: an empty slot */
    free_links *head; /* the newest free block */
    size_t count;
    uint64_t last_round;
} bucket;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static bucket buckets[BUCKETS];
static size_t cached_bytes, cached_blocks;
static uint64_t round_now;
static unsigned long long hits, misses;
/* The last blocks freed into the cache, the newest at recent[(recent_next + RECENT_BLOCKS - 1) %
   RECENT_BLOCKS]; NULL where a block has left the cache since. */
static void *recent[RECENT_BLOCKS];
static size_t recent_next;

static void lock_for_fork(void) { pthread_mutex_lock(&cache_lock); }
static void unlock_after_fork(void) { pthread_mutex_unlock(&cache_lock); }

/* A child forked while another thread held the lock would wait on it forever. */
static void register_fork_handlers(void) {
    pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
}

static pthread_once_t fork_handlers_once = PTHREAD_ONCE_INIT;

static void lock(void) {
    pthread_once(&fork_handlers_once, register_fork_handlers);
    pthread_mutex_lock(&cache_lock);
}

static void unlock(void) { pthread_mutex_unlock(&cache_lock); }

static size_t slot_of(size_t size) {
    return (size_t)(((uint64_t)(size / LARGE_GRAIN) * UINT64_C(0x9E3779B97F4A7C15)) >> 32) % BUCKETS;
}

/* The bucket of `size`, or with `add` an empty slot made its bucket; NULL when there is none. */
static bucket *find_bucket(size_t size, int add) {
    for (size_t probe = 0, i = slot_of(size); probe < BUCKETS; ++probe, i = (i + 1) % BUCKETS) {
        if (buckets[i].size == size) return &buckets[i];
        if (buckets[i].size == 0) {
            if (!add) return NULL;
            buckets[i] = (bucket){size, NULL, 0, round_now};
            return &buckets[i];
        }
    }
    return NULL;
}

static size_t block_size(const void *block) { return ((const size_t *)block)[-1]; }

static void *block_base(void *block) {
    return (char *)block - (block_size(block) >= LARGE_MIN ? LARGE_HEADER : SMALL_HEADER);
}

static void *new_block(size_t size) {
    const int large = size >= LARGE_MIN;
    const size_t header = large ? LARGE_HEADER : SMALL_HEADER;
    if (size > SIZE_MAX - header) return NULL;
    char *base = large ? aligned_alloc(LARGE_HEADER, header + size) : malloc(header + size);
    if (base == NULL) return NULL;
    ((size_t *)(base + header))[-1] = size;
    return base + header;
}

/* Rounded as the buckets hold it; SIZE_MAX where rounding would overflow (new_block refuses it). */
static size_t rounded(size_t size) {
    if (size < LARGE_MIN) return size;
    if (size > SIZE_MAX - (LARGE_GRAIN - 1)) return SIZE_MAX;
    return (size + LARGE_GRAIN - 1) / LARGE_GRAIN * LARGE_GRAIN;
}

/* Puts a freed block first in its bucket's list and among the recent blocks. */
static void push_block(bucket *b, void *block) {
    free_links *links = block;
    *links = (free_links){b->head, NULL};
    if (b->head != NULL) b->head->prev = links;
    b->head = links;
    b->count++;
    b->last_round = round_now;
    cached_bytes += b->size;
    cached_blocks++;
    recent[recent_next] = block;
    recent_next = (recent_next + 1) % RECENT_BLOCKS;
}

/* Takes `block` out of bucket b (whose size it has) for a request. */
static void *take_block(bucket *b, void *block) {
    free_links *links = block;
    if (links->prev != NULL) links->prev->next = links->next;
    else b->head = links->next;
    if (links->next != NULL) links->next->prev = links->prev;
    b->count--;
    b->last_round = round_now;
    cached_bytes -= b->size;
    cached_blocks--;
    for (size_t k = 0; k < RECENT_BLOCKS; ++k)
        if (recent[k] == block) recent[k] = NULL;
    return block;
}

/* The newest recent block of `size` to RECENT_MAX_RATIO times it, taken; NULL where none is. */
static void *take_recent(size_t size) {
    for (size_t k = 1; k <= RECENT_BLOCKS; ++k) {
        void *block = recent[(recent_next + RECENT_BLOCKS - k) % RECENT_BLOCKS];
        if (block == NULL) continue;
        const size_t held = block_size(block);
        if (held >= size && held / RECENT_MAX_RATIO <= size)
            return take_block(find_bucket(held, 0), block);
    }
    return NULL;
}

void *fq_block_alloc(size_t size) {
    size = rounded(size);
    if (size >= LARGE_MIN) {
        lock();
        void *block = take_recent(size);
        bucket *b = block == NULL ? find_bucket(size, 0) : NULL;
        if (b != NULL && b->head != NULL) block = take_block(b, b->head);
        if (block != NULL) hits++;
        else misses++;
        unlock();
        if (block != NULL) return block;
    }
    return new_block(size);
}

void *fq_block_calloc(size_t count, size_t size) {
    if (size != 0 && count > SIZE_MAX / size) return NULL;
    void *block = fq_block_alloc(count * size);
    if (block != NULL) memset(block, 0, count * size);
    return block;
}

void fq_block_free(void *block) {
    if (block == NULL) return;
    const size_t size = block_size(block);
    if (size >= LARGE_MIN) {
        lock();
        bucket *b = cached_bytes + size <= CACHE_MAX_BYTES ? find_bucket(size, 1) : NULL;
        if (b != NULL) {
            push_block(b, block);
            unlock();
            return;
        }
        unlock();
    }
    free(block_base(block));
}

void *fq_block_realloc(void *block, size_t size) {
    if (block == NULL) return fq_block_alloc(size);
    const size_t old = block_size(block);
    if (rounded(size) == old) return block;
    void *moved = fq_block_alloc(size);
    if (moved == NULL) return NULL;
    memcpy(moved, block, old < size ? old : size);
    fq_block_free(block);
    return moved;
}

/* A bucket in use whose size no request took or freed in the last STALE_ROUNDS rounds. */
static int is_stale(const bucket *b) {
    return b->size != 0 && round_now - b->last_round >= STALE_ROUNDS;
}

/* Frees the blocks of every bucket (`all`) or of the stale ones, then puts the others back where a
   lookup finds them (an emptied slot would cut a probe sequence short). Called with the lock held;
   returns the bytes freed. */
static size_t drop_buckets(int all) {
    bucket kept[BUCKETS];
    size_t n_kept = 0, dropped = 0;
    memset(recent, 0, sizeof recent); /* a hint only: the kept blocks stay in their buckets */
    for (size_t i = 0; i < BUCKETS; ++i) {
        bucket *b = &buckets[i];
        if (b->size == 0) continue;
        if (all || is_stale(b)) {
            for (free_links *block = b->head; block != NULL;) {
                free_links *next = block->next;
                free(block_base(block));
                block = next;
            }
            dropped += b->count * b->size;
            cached_bytes -= b->count * b->size;
            cached_blocks -= b->count;
        } else {
            kept[n_kept++] = *b;
        }
        b->size = 0;
    }
    for (size_t k = 0; k < n_kept; ++k) *find_bucket(kept[k].size, 1) = kept[k];
    return dropped;
}

void fq_block_cache_end_round(void) {
    lock();
    round_now++;
    int any_stale = 0; /* most rounds have none: then the table is not rebuilt */
    for (size_t i = 0; i < BUCKETS; ++i) any_stale |= is_stale(&buckets[i]);
    if (any_stale) drop_buckets(0);
    unlock();
}

size_t fq_block_cache_release(void) {
    lock();
    const size_t released = drop_buckets(1);
    unlock();
    return released;
}

void fq_block_cache_get_stats(fq_block_cache_stats *stats) {
    lock();
    *stats = (fq_block_cache_stats){cached_bytes, cached_blocks, hits, misses};
    unlock();
}
