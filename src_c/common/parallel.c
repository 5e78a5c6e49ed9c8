/* fqcore's own thread pool behind fq_parallel_for. Threads claim runs of items from one shared
   counter, so the calling thread never waits for a worker that has not started: it runs whatever
   nobody took, and waits only for items a worker is running. Calls back off to one thread while
   workers come late (other processes keep them off their cores).

   Why not OpenMP: an OpenMP region ends in a barrier that waits for every thread of the team, so
   one worker kept off its core by another process stalls the call for a scheduler time slice (one
   busy process on 2 cores: a 256K-element call went from 0.3 ms to 18 ms), and idle OpenMP threads
   spin against other work between calls. */
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <time.h>

#include "fpenv.h"
#include "parallel.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FQ_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define FQ_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define FQ_CPU_RELAX() ((void)0)
#endif

/* A worker that finished its part of a call looks for the next call this long before it sleeps:
   back-to-back calls find it awake, while a gap (a BLAS call, Python code) finds it asleep rather
   than spinning against the BLAS threads or other processes. */
#define FQ_WORKER_SPIN_NS 20000
/* The caller waits this long for the items workers hold before it sleeps until they finish. */
#define FQ_CALLER_SPIN_NS 20000
/* A call is late when its caller waited, after running out of items, longer than this and longer
   than half its own time: the workers holding items were kept off their cores. */
#define FQ_LATE_MIN_NS 50000
/* After a late call, calls stay on one thread for this many times the wait, doubling while the
   calls after it are late again (up to FQ_BACKOFF_MAX_NS): one stall on a quiet machine costs
   little, and a machine that stays busy is probed less and less often. */
#define FQ_BACKOFF_FACTOR 4
#define FQ_BACKOFF_MAX_NS 1000000000LL
/* Workers need little stack (kernels keep a few vectors), and small stacks let many threads fit
   an address-space limit. */
#define FQ_WORKER_STACK ((size_t)256 << 10)

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* `claim` packs the call's generation (high 32 bits) with the items not yet claimed (low 32
   bits): a worker claims by compare-and-swap, so one that wakes after its call has ended can never
   take an item of the next. The call's fields are written before its generation is published and
   read only after a successful claim (the call cannot end before that claim's items are done). */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* sleeping workers wait for a new generation */
    pthread_cond_t finished; /* a sleeping caller waits for the last item, a reservation that
                                failed for its workers to retire */
    uint64_t claim;
    fq_range_fn body;
    void *context;
    uint32_t items;
    int threads;             /* the caller and workers 1 .. threads - 1 take part */
    uint32_t done;           /* items finished */
    uint32_t by_workers;     /* items workers ran */
    int sleepers;
    int caller_waiting;
    int busy;                /* a call holds the pool: a concurrent caller runs alone */
    int workers;             /* started so far */
    int refused;             /* the system refused a worker: calls stop asking for more */
    int keep;                /* workers with a higher index retire */
    int64_t backoff_until;
    int backoff_doublings;   /* late calls in a row */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .finished = PTHREAD_COND_INITIALIZER,
          .keep = INT_MAX};

static uint32_t generation_of(uint64_t claim) { return (uint32_t)(claim >> 32); }

/* Claims and runs items of `generation` until none are left. A claim takes a share of what is
   left (at least one item): long runs of adjacent items while much is left, which keeps the
   hardware prefetchers on one stream, and single items at the end, which balance the threads. */
static void run_items(uint32_t generation, int worker) {
    uint64_t claim = __atomic_load_n(&pool.claim, __ATOMIC_ACQUIRE);
    for (;;) {
        const uint32_t left = (uint32_t)claim;
        if (generation_of(claim) != generation || left == 0) return;
        const int threads = __atomic_load_n(&pool.threads, __ATOMIC_RELAXED);
        uint32_t take = left / (uint32_t)(2 * threads);
        if (take < 1) take = 1;
        if (!__atomic_compare_exchange_n(&pool.claim, &claim, claim - take, 1, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue;
        /* Read before the items are counted done: from then on the caller may start a call. */
        const uint32_t items = pool.items, first = items - left;
        pool.body(pool.context, first, first + take);
        if (worker) __atomic_add_fetch(&pool.by_workers, take, __ATOMIC_RELAXED);
        if (__atomic_add_fetch(&pool.done, take, __ATOMIC_SEQ_CST) == items &&
            __atomic_load_n(&pool.caller_waiting, __ATOMIC_SEQ_CST)) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_broadcast(&pool.finished); /* a reservation may wait on it too */
            pthread_mutex_unlock(&pool.lock);
        }
        claim = __atomic_load_n(&pool.claim, __ATOMIC_ACQUIRE);
    }
}

static int retiring(int index) { return index > __atomic_load_n(&pool.keep, __ATOMIC_SEQ_CST); }

/* Spins briefly, then sleeps, until a generation other than `seen` is published or worker `index`
   is to retire. The sleeper count and the generation are both sequentially consistent: either the
   publisher sees this worker counted and wakes it, or this worker sees the new generation. */
static uint32_t next_generation(uint32_t seen, int index) {
    const int64_t give_up = now_ns() + FQ_WORKER_SPIN_NS;
    for (unsigned spin = 1;; ++spin) {
        const uint32_t generation = generation_of(__atomic_load_n(&pool.claim, __ATOMIC_ACQUIRE));
        if (generation != seen || retiring(index)) return generation;
        FQ_CPU_RELAX();
        if (spin % 64 == 0 && now_ns() > give_up) break;
    }
    pthread_mutex_lock(&pool.lock);
    __atomic_add_fetch(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
    uint32_t generation;
    while ((generation = generation_of(__atomic_load_n(&pool.claim, __ATOMIC_SEQ_CST))) == seen &&
           !retiring(index))
        pthread_cond_wait(&pool.wake, &pool.lock);
    __atomic_sub_fetch(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&pool.lock);
    return generation;
}

static void *worker_main(void *arg) {
    const int index = (int)(intptr_t)arg;
    uint32_t seen = generation_of(__atomic_load_n(&pool.claim, __ATOMIC_ACQUIRE));
    for (;;) {
        seen = next_generation(seen, index);
        if (retiring(index)) break;
        if (index >= __atomic_load_n(&pool.threads, __ATOMIC_ACQUIRE)) continue;
        /* Workers start with the process's default MXCSR/FPCR; the kernels need the call's. */
        const fq_fpenv saved = fq_fpenv_enter();
        run_items(seen, 1);
        fq_fpenv_leave(saved);
    }
    pthread_mutex_lock(&pool.lock);
    __atomic_sub_fetch(&pool.workers, 1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&pool.finished);
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

/* A child process has none of the parent's workers, and the pool's lock and conditions may have
   been held or waited on by threads that do not exist there: it starts with an empty pool. The
   lock is held across fork() so the child's copy is consistent. */
static void before_fork(void) { pthread_mutex_lock(&pool.lock); }
static void after_fork_in_parent(void) { pthread_mutex_unlock(&pool.lock); }
static void after_fork_in_child(void) {
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.finished, NULL);
    pool.workers = pool.sleepers = pool.caller_waiting = pool.busy = pool.refused = 0;
    pool.keep = INT_MAX;
}
static pthread_once_t fork_handlers_once = PTHREAD_ONCE_INIT;
static void install_fork_handlers(void) {
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

/* Starts workers until `count` run (under pool.lock); returns how many run. Workers block every
   signal, so signals reach the application's own threads (Python handles them on its main one). */
static int start_workers(int count) {
    pthread_once(&fork_handlers_once, install_fork_handlers);
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return pool.workers;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, FQ_WORKER_STACK);
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    while (pool.workers < count) {
        pthread_t thread;
        if (pthread_create(&thread, &attr, worker_main, (void *)(intptr_t)(pool.workers + 1)) != 0) {
            __atomic_store_n(&pool.refused, 1, __ATOMIC_RELAXED);
            break;
        }
        __atomic_store_n(&pool.workers, pool.workers + 1, __ATOMIC_RELAXED);
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    pthread_attr_destroy(&attr);
    return pool.workers;
}

int fq_parallel_reserve(int threads, int all_or_none) {
    pthread_mutex_lock(&pool.lock);
    __atomic_store_n(&pool.refused, 0, __ATOMIC_RELAXED);
    const int before = pool.workers;
    int workers = start_workers(threads - 1);
    if (all_or_none && workers < threads - 1 && workers > before) {
        /* The workers started for a reservation that failed would hold address space for
           nothing (their stacks): they retire, and the pool is as it was. */
        __atomic_store_n(&pool.keep, before, __ATOMIC_SEQ_CST);
        pthread_cond_broadcast(&pool.wake);
        while (pool.workers > before) pthread_cond_wait(&pool.finished, &pool.lock);
        __atomic_store_n(&pool.keep, INT_MAX, __ATOMIC_SEQ_CST);
        workers = before;
    }
    pthread_mutex_unlock(&pool.lock);
    return workers + 1;
}

int fq_parallel_awake_workers(void) {
    return __atomic_load_n(&pool.workers, __ATOMIC_RELAXED) -
           __atomic_load_n(&pool.sleepers, __ATOMIC_RELAXED);
}

int fq_parallel_backing_off(void) {
    return now_ns() < __atomic_load_n(&pool.backoff_until, __ATOMIC_RELAXED);
}

/* A late call starts a back-off, longer for each late call in a row; an on-time call with the
   workers' help ends the row. */
static void record(int64_t start, int64_t own_end, int64_t end, uint32_t by_workers) {
    const int64_t own = own_end - start, waited = end - own_end;
    if (waited > FQ_LATE_MIN_NS && 2 * waited > own) {
        int64_t backoff = FQ_BACKOFF_FACTOR * waited << pool.backoff_doublings;
        if (backoff > FQ_BACKOFF_MAX_NS) backoff = FQ_BACKOFF_MAX_NS;
        else ++pool.backoff_doublings;
        __atomic_store_n(&pool.backoff_until, end + backoff, __ATOMIC_RELAXED);
    } else if (by_workers > 0) {
        pool.backoff_doublings = 0;
    }
}

/* Waits until every item is done: spinning first (workers finish within microseconds on a quiet
   machine), then asleep, woken by the worker that finishes the last item. */
static void wait_for_items(int64_t from) {
    const int64_t give_up = from + FQ_CALLER_SPIN_NS;
    for (unsigned spin = 1; __atomic_load_n(&pool.done, __ATOMIC_ACQUIRE) != pool.items; ++spin) {
        FQ_CPU_RELAX();
        if (spin % 64 == 0 && now_ns() > give_up) {
            pthread_mutex_lock(&pool.lock);
            __atomic_store_n(&pool.caller_waiting, 1, __ATOMIC_SEQ_CST);
            while (__atomic_load_n(&pool.done, __ATOMIC_SEQ_CST) != pool.items)
                pthread_cond_wait(&pool.finished, &pool.lock);
            __atomic_store_n(&pool.caller_waiting, 0, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&pool.lock);
            return;
        }
    }
}

void fq_parallel_for(int threads, size_t items, fq_range_fn body, void *context) {
    int free = 0;
    if (threads < 2 || items < 2 || items > UINT32_MAX ||
        !__atomic_compare_exchange_n(&pool.busy, &free, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        body(context, 0, items);
        return;
    }
    const int workers = __atomic_load_n(&pool.workers, __ATOMIC_RELAXED);
    if (workers < threads - 1)
        threads = __atomic_load_n(&pool.refused, __ATOMIC_RELAXED) ? workers + 1
                                                                   : fq_parallel_reserve(threads, 0);
    if (threads < 2) {
        __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
        body(context, 0, items);
        return;
    }
    const int64_t start = now_ns();
    pool.body = body;
    pool.context = context;
    pool.items = (uint32_t)items;
    pool.done = 0;
    pool.by_workers = 0;
    __atomic_store_n(&pool.threads, threads, __ATOMIC_RELEASE);
    const uint32_t generation = generation_of(__atomic_load_n(&pool.claim, __ATOMIC_RELAXED)) + 1;
    __atomic_store_n(&pool.claim, ((uint64_t)generation << 32) | (uint32_t)items, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&pool.sleepers, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    run_items(generation, 0);
    const int64_t own_end = now_ns();
    wait_for_items(own_end);
    record(start, own_end, now_ns(), __atomic_load_n(&pool.by_workers, __ATOMIC_RELAXED));
    __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
}
