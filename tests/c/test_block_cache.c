/* C test harness, memory blocks (common/block_cache.c): contents, alignment and sizes of every
   call, reuse of freed large blocks (the recent ones across sizes), rounds that give stale sizes
   back, the 1 GiB bound, requests too large to exist, concurrent callers and fork; and the kernels'
   line-aligned buffers (common/line_alloc.h). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/line_alloc.h"
#include "fqcore.h"
#include "harness.h"

#define LARGE ((size_t)16384)

static fq_block_cache_stats stats(void) {
    fq_block_cache_stats s;
    fq_block_cache_get_stats(&s);
    return s;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)(seed + i * 7);
}

static int holds(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != (unsigned char)(seed + i * 7)) return 0;
    return 1;
}

static int all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != 0) return 0;
    return 1;
}

/* Every size around the large-block limit can be written in full, keeps what is written, and
   (from the limit up) is 64-byte aligned. */
static void test_sizes(void) {
    static const size_t sizes[] = {0, 1, 15, 16, 17, 4095, LARGE - 1, LARGE, LARGE + 1, LARGE + 63,
                                   100000, (size_t)1 << 20, ((size_t)3 << 20) + 5};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
        const size_t n = sizes[k];
        unsigned char *p = fq_block_alloc(n);
        expect(p != NULL, "alloc(%zu) failed", n);
        if (p == NULL) continue;
        if (n >= LARGE) expect((uintptr_t)p % 64 == 0, "alloc(%zu) at %p, not 64-byte aligned", n, (void *)p);
        fill(p, n, (unsigned)k);
        expect(holds(p, n, (unsigned)k), "alloc(%zu) lost what was written", n);
        fq_block_free(p);
    }
    fq_block_free(NULL);
    fq_block_cache_release();
}

/* A freed large block serves the next request of its rounded size (a hit), calloc of a used block
   is all zeros, and sizes that round apart do not share blocks. */
static void test_reuse(void) {
    fq_block_cache_release();
    const fq_block_cache_stats before = stats();
    unsigned char *a = fq_block_alloc(100000);
    fill(a, 100000, 3);
    fq_block_free(a);
    expect(stats().cached_bytes == 100032, "cached %zu bytes, not 100032", stats().cached_bytes);
    unsigned char *b = fq_block_alloc(100001); /* rounds to the same 100032 */
    expect(b == a, "a freed block of the same rounded size was not reused");
    expect(stats().hits == before.hits + 1, "hits %llu, not %llu", stats().hits, before.hits + 1);
    fill(b, 100001, 5);
    fq_block_free(b);
    unsigned char *c = fq_block_calloc(1000, 100);
    expect(c == a, "calloc did not reuse the freed block");
    expect(all_zero(c, 100000), "calloc of a reused block is not all zeros");
    unsigned char *d = fq_block_alloc(100032 + 1); /* the next bucket: a fresh block */
    expect(d != c, "two live blocks at one address");
    expect(stats().misses == before.misses + 2, "misses %llu, not %llu", stats().misses, before.misses + 2);
    fq_block_free(c);
    fq_block_free(d);
    expect(stats().cached_blocks == 2, "%zu blocks kept, not 2", stats().cached_blocks);
    const size_t released = fq_block_cache_release();
    expect(released == 100032 + 100096, "release gave back %zu bytes, not %zu", released,
           (size_t)(100032 + 100096));
    expect(stats().cached_bytes == 0 && stats().cached_blocks == 0, "release kept %zu bytes",
           stats().cached_bytes);
}

/* A request takes the newest recently freed block that holds it and is at most 4 times its size,
   before its own size's block; not a block larger than that, nor one in use, nor one given back. */
static void test_recent_blocks(void) {
    fq_block_cache_release();
    const fq_block_cache_stats before = stats();
    unsigned char *own = fq_block_alloc(LARGE * 2), *larger = fq_block_alloc(LARGE * 8);
    fq_block_free(own);
    fq_block_free(larger); /* the newest */
    unsigned char *a = fq_block_alloc(LARGE * 2);
    expect(a == larger, "the newest freed block, 4 times the size, did not serve the request");
    if (a == larger) fill(a, LARGE * 8, 11); /* the whole block is the caller's */
    unsigned char *b = fq_block_alloc(LARGE * 2);
    expect(b == own, "the request's own size did not serve it once the newer block was taken");
    unsigned char *c = fq_block_alloc(LARGE * 2);
    expect(c != a && c != b, "a block in use was handed out again");
    expect(stats().hits == before.hits + 2 && stats().misses == before.misses + 3,
           "hits %llu and misses %llu, not %llu and %llu", stats().hits, stats().misses,
           before.hits + 2, before.misses + 3);
    fq_block_free(c);
    fq_block_free(b);
    fq_block_free(a);
    unsigned char *too_large = fq_block_alloc(LARGE * 8 + 64); /* freed a's block: more than 4 times */
    unsigned char *d = fq_block_alloc(LARGE * 2 - 64);
    expect(d != a, "a block more than 4 times the request served it");
    expect(d == b, "the newest block of 2 to 4 times the request did not serve it");
    fq_block_free(d);
    fq_block_free(too_large);
    /* Blocks given back leave the recent ones too: this request gets fresh memory (ASan would see
       a write to freed memory otherwise). */
    fq_block_cache_release();
    unsigned char *e = fq_block_alloc(LARGE * 2);
    fill(e, LARGE * 2, 13);
    expect(holds(e, LARGE * 2, 13), "a block after release lost what was written");
    fq_block_free(e);
    void *idle = fq_block_alloc(LARGE * 3);
    fq_block_free(idle);
    for (int round = 0; round < 4; ++round) fq_block_cache_end_round(); /* idle's size goes back */
    unsigned char *f = fq_block_alloc(LARGE * 3);
    fill(f, LARGE * 3, 17);
    expect(holds(f, LARGE * 3, 17), "a block after a stale size went back lost what was written");
    fq_block_free(f);
    fq_block_cache_release();
}

/* realloc keeps the contents up to the smaller size, across the large-block limit both ways. */
static void test_realloc(void) {
    static const size_t steps[] = {10, LARGE + 100, 200000, 50, LARGE, LARGE - 1, 3};
    unsigned char *p = fq_block_realloc(NULL, 1);
    size_t size = 1;
    fill(p, size, 9);
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; ++k) {
        const size_t keep = size < steps[k] ? size : steps[k];
        p = fq_block_realloc(p, steps[k]);
        expect(p != NULL, "realloc to %zu failed", steps[k]);
        if (p == NULL) return;
        expect(holds(p, keep, 9), "realloc %zu -> %zu lost the first %zu bytes", size, steps[k], keep);
        size = steps[k];
        fill(p, size, 9);
    }
    fq_block_free(p);
    fq_block_cache_release();
}

/* A size neither taken nor freed for four rounds is given back, not before; one used every round
   stays. */
static void test_rounds(void) {
    fq_block_cache_release();
    void *idle = fq_block_alloc(LARGE * 4), *busy = fq_block_alloc(LARGE * 8);
    fq_block_free(idle);
    fq_block_free(busy);
    for (int round = 1; round <= 4; ++round) {
        fq_block_cache_end_round();
        const size_t kept = round < 4 ? LARGE * 12 : LARGE * 8;
        expect(stats().cached_bytes == kept, "after %d rounds %zu bytes kept, not %zu", round,
               stats().cached_bytes, kept);
        busy = fq_block_alloc(LARGE * 8);
        fq_block_free(busy);
    }
    void *again = fq_block_alloc(LARGE * 8);
    expect(again == busy, "the busy size's block was not kept across rounds");
    fq_block_free(again);
    fq_block_cache_release();
}

/* No more than 1 GiB is kept: of 17 freed blocks of 64 MiB (address space only, never touched),
   16 stay. */
static void test_bound(void) {
    fq_block_cache_release();
    enum { N = 17 };
    void *blocks[N];
    for (int k = 0; k < N; ++k) blocks[k] = fq_block_alloc((size_t)64 << 20);
    for (int k = 0; k < N; ++k) fq_block_free(blocks[k]);
    expect(stats().cached_blocks == 16 && stats().cached_bytes == (size_t)1 << 30,
           "%zu blocks, %zu bytes kept of 17 x 64 MiB", stats().cached_blocks, stats().cached_bytes);
    fq_block_cache_release();
}

/* Requests no block can hold fail with NULL and leave the block given to realloc as it was. */
static void test_too_large(void) {
    expect(fq_block_alloc(SIZE_MAX) == NULL, "alloc(SIZE_MAX) did not fail");
    expect(fq_block_alloc(SIZE_MAX - 40) == NULL, "alloc(SIZE_MAX - 40) did not fail");
    expect(fq_block_calloc(SIZE_MAX / 2, 3) == NULL, "calloc with an overflowing product did not fail");
    unsigned char *p = fq_block_alloc(LARGE);
    fill(p, LARGE, 4);
    expect(fq_block_realloc(p, SIZE_MAX - 8) == NULL, "realloc to SIZE_MAX - 8 did not fail");
    expect(holds(p, LARGE, 4), "a failed realloc changed the block");
    fq_block_free(p);
    fq_block_cache_release();
}

/* fq_line_alloc: every size starts on a 64-byte line and can be written in full (the sanitized
   build checks the bounds); sizes past what rounding up to a line allows give NULL. */
static void test_line_alloc(void) {
    static const size_t sizes[] = {1, 8, 63, 64, 65, 200, 4097, 73728};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
        const size_t n = sizes[k];
        unsigned char *p = fq_line_alloc(n);
        expect(p != NULL, "line_alloc(%zu) failed", n);
        if (p == NULL) continue;
        expect((uintptr_t)p % 64 == 0, "line_alloc(%zu) at %p, not on a 64-byte line", n, (void *)p);
        fill(p, n, (unsigned)k);
        expect(holds(p, n, (unsigned)k), "line_alloc(%zu) lost what was written", n);
        free(p);
    }
    expect(fq_line_alloc(SIZE_MAX) == NULL, "line_alloc(SIZE_MAX) did not fail");
    /* Rounded up to a line, this size wraps around to 0. */
    expect(fq_line_alloc(SIZE_MAX - 10) == NULL, "line_alloc(SIZE_MAX - 10) did not fail");
}

typedef struct {
    unsigned seed;
    int corrupt;
} churn_job;

/* Allocates, fills, checks and frees blocks of a few large sizes: a block handed to two callers at
   once shows as another caller's pattern. */
static void *churn(void *arg) {
    churn_job *job = arg;
    unsigned char *held[8] = {0};
    size_t sizes[8] = {0};
    for (int i = 0; i < 4000; ++i) {
        const int slot = (int)((job->seed * 31u + (unsigned)i * 17u) % 8u);
        if (held[slot] != NULL) {
            if (!holds(held[slot], sizes[slot], job->seed + (unsigned)slot)) job->corrupt++;
            fq_block_free(held[slot]);
        }
        sizes[slot] = LARGE * (size_t)(1 + (i + (int)job->seed) % 5);
        held[slot] = fq_block_alloc(sizes[slot]);
        fill(held[slot], sizes[slot], job->seed + (unsigned)slot);
        if (i % 500 == 0) fq_block_cache_end_round();
    }
    for (int slot = 0; slot < 8; ++slot) fq_block_free(held[slot]);
    return NULL;
}

static void test_concurrent(void) {
    pthread_t threads[THREADS_MAX];
    churn_job jobs[THREADS_MAX];
    for (int t = 0; t < THREADS_MAX; ++t) {
        jobs[t] = (churn_job){(unsigned)(t * 1000 + 1), 0};
        pthread_create(&threads[t], NULL, churn, &jobs[t]);
    }
    for (int t = 0; t < THREADS_MAX; ++t) {
        pthread_join(threads[t], NULL);
        expect(jobs[t].corrupt == 0, "thread %d found %d blocks written by another", t, jobs[t].corrupt);
    }
    fq_block_cache_release();
}

static void *free_later(void *arg) {
    for (int i = 0; i < 20000; ++i) fq_block_free(fq_block_alloc(LARGE * (size_t)(1 + i % 3)));
    return arg;
}

/* A child forked while another thread uses the cache can still use it. Skipped where the tool
   running the test cannot fork a multi-threaded process (as test_threads.c's fork test). */
static void test_fork(void) {
#if defined(__SANITIZE_THREAD__)
    return;
#endif
    if (getenv("FQ_TEST_NO_FORK") != NULL) return;
    fflush(stdout);
    pthread_t busy;
    pthread_create(&busy, NULL, free_later, NULL);
    for (int k = 0; k < 20; ++k) {
        const pid_t child = fork();
        if (child == 0) {
            void *p = fq_block_alloc(LARGE * 2);
            fq_block_free(p);
            fq_block_cache_release();
            _exit(p != NULL ? 0 : 1);
        }
        int status = 0;
        waitpid(child, &status, 0);
        expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "forked child %d failed (status %d)", k, status);
    }
    pthread_join(busy, NULL);
    fq_block_cache_release();
}

int main(void) {
    static const harness_section sections[] = {
        {"sizes", test_sizes},         {"reuse", test_reuse},
        {"recent blocks", test_recent_blocks},
        {"realloc", test_realloc},     {"rounds", test_rounds},
        {"1 GiB bound", test_bound},   {"requests too large", test_too_large},
        {"concurrent callers", test_concurrent}, {"fork", test_fork},
        {"line-aligned buffers", test_line_alloc},
    };
    return harness_main("C harness (memory blocks)", sections, sizeof sections / sizeof sections[0]);
}
