/* fqcore's own thread pool behind fq_parallel_for. Each thread of a call has a home range of the
   items and takes runs from its front; a thread whose range is empty steals runs from the back of
   the others'. So the calling thread never waits for a worker that has not started (it steals
   that worker's whole range), and waits only for items a worker is running; and calls on the
   same data give each thread the same home (the data stays in its core's cache). Calls back off
   to one thread while workers come late (other processes keep them off their cores).

   Why not OpenMP: an OpenMP region ends in a barrier that waits for every thread of the team, so
   one worker kept off its core by another process stalls the call for a scheduler time slice (one
   busy process on 2 cores: a 256K-element call went from 0.3 ms to 18 ms), and idle OpenMP threads
   spin against other work between calls. */
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <time.h>

#include "../include/fqcore.h"
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

/* A worker that finished its part of a call looks for the next call for twice the recent gaps
   between calls (their decaying maximum; gaps too long to spin for left out), within these
   bounds, before it sleeps: calls that come in a loop find it awake (waking a sleeping worker
   costs ~30 us on a 2-core KVM guest, a tenth of a 1M-element call), while after a longer gap (a
   BLAS call, other Python code) it sleeps instead of spinning against BLAS threads or other
   processes. A maximum, because the gaps alternate: short between the passes of a batch norm,
   longer between two batch norms. */
#define FQ_WORKER_SPIN_MIN_NS 20000
#define FQ_WORKER_SPIN_MAX_NS 250000
/* While a caller holds the workers awake (fq_keep_workers_awake), at least this long: a training
   step's calls come with gaps of up to ~1.2 ms between them (Python between layers, the step's
   end and the next step's start; the demo at batch 64 woke a worker 6.5 times a step under the
   rule above, and its step took 22-27% longer). Only for callers that know no other thread pool
   of the process runs between their calls: a worker spinning through two-thread BLAS calls made
   each pair of a 1M-element fake quant and a 384x384 matmul take 1.0-1.1 ms instead of 0.55-0.58
   (Intel Xeon, KVM guest, 2 cores). */
#define FQ_KEPT_AWAKE_SPIN_NS 2000000
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
#define FQ_MAX_WORKERS (FQ_MAX_THREADS - 1)
/* Workers need little stack (kernels keep a few vectors), and small stacks let many threads fit
   an address-space limit. */
#define FQ_WORKER_STACK ((size_t)256 << 10)

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* One thread's range of a call's items: first (low 32 bits) and end (high 32 bits), taken by its
   owner from the front (from the back in a backward call) and by thieves from the other end, each
   by compare-and-swap. On its own line, so that threads taking from their own ranges do not
   contend. */
typedef struct {
    _Alignas(64) uint64_t span;
} home_range;

/* A call publishes its fields, then the ranges, then a new generation, which wakes the workers.
   A thread reads the call's fields only after it has taken items from a range (acquire), and the
   call cannot end before those items are done: so a worker that wakes late, after its call ended,
   either finds every range empty or takes items of the call running then, which it runs as such. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* sleeping workers wait for a new generation */
    pthread_cond_t finished; /* a sleeping caller waits for the last item */
    pthread_mutex_t reserving; /* one reservation at a time (it joins workers unlocked) */
    uint32_t generation;
    home_range range[FQ_MAX_THREADS];
    fq_range_fn body;
    void *context;
    uint32_t items;
    int threads;             /* the caller and workers 1 .. threads - 1 take part */
    int backward;            /* owners walk their ranges from the back */
    fq_fpenv env;            /* the caller's floating-point environment, the workers' for the call */
    uint32_t done;           /* items finished */
    uint32_t by_workers;     /* items workers ran */
    int sleepers;
    int caller_waiting;
    int busy;                /* a call holds the pool: a concurrent caller runs alone */
    int workers;             /* started so far */
    int refused;             /* the system refused a worker: calls stop asking for more */
    int keep;                /* workers with a higher index retire */
    pthread_t thread[FQ_MAX_WORKERS]; /* worker i is thread[i - 1] */
    int64_t backoff_until;
    int64_t last_end;        /* when the last call ended */
    int64_t recent_gap;      /* decaying maximum of the gaps between calls */
    int64_t spin_ns;         /* how long an idle worker looks for the next call */
    int backoff_doublings;   /* late calls in a row */
    int kept_awake;          /* holders of fq_keep_workers_awake */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .finished = PTHREAD_COND_INITIALIZER,
          .reserving = PTHREAD_MUTEX_INITIALIZER,
          .keep = INT_MAX};

static uint64_t span_of(uint32_t first, uint32_t end) { return (uint64_t)end << 32 | first; }

/* Takes half of what is left of range `slot` (at least one item): from the owner's end for its
   owner, which keeps the owner's walk in one direction through memory, from the other end for a
   thief. 0 when it was empty. */
static uint32_t take(int slot, int from_front, uint32_t *first) {
    uint64_t span = __atomic_load_n(&pool.range[slot].span, __ATOMIC_ACQUIRE);
    for (;;) {
        const uint32_t lo = (uint32_t)span, hi = (uint32_t)(span >> 32);
        if (lo >= hi) return 0;
        const uint32_t count = (hi - lo + 1) / 2;
        const uint64_t rest = from_front ? span_of(lo + count, hi) : span_of(lo, hi - count);
        if (__atomic_compare_exchange_n(&pool.range[slot].span, &span, rest, 1, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            *first = from_front ? lo : hi - count;
            return count;
        }
    }
}

/* Runs items of the current call: from the home range `slot`, then stolen from the others (the
   next slots first), until every range is empty. */
static void run_items(int slot, int worker) {
    const int threads = __atomic_load_n(&pool.threads, __ATOMIC_ACQUIRE);
    const int backward = __atomic_load_n(&pool.backward, __ATOMIC_ACQUIRE);
    for (int k = 0; k < threads;) {
        const int victim = (slot + k) % threads;
        uint32_t first, count = take(victim, (k == 0) != backward, &first);
        if (count == 0) {
            ++k;
            continue;
        }
        /* Read before the items are counted done: from then on the caller may start a call. A
           worker runs the items under the call's floating-point environment (it started with
           the process's default, and a worker that woke for one call may take items of the
           next). */
        const uint32_t items = pool.items;
        if (worker && fq_fpenv_get() != pool.env) fq_fpenv_leave(pool.env);
        pool.body(pool.context, first, first + count);
        if (worker) __atomic_add_fetch(&pool.by_workers, count, __ATOMIC_RELAXED);
        if (__atomic_add_fetch(&pool.done, count, __ATOMIC_SEQ_CST) == items &&
            __atomic_load_n(&pool.caller_waiting, __ATOMIC_SEQ_CST)) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.finished);
            pthread_mutex_unlock(&pool.lock);
        }
    }
}

static int retiring(int index) { return index > __atomic_load_n(&pool.keep, __ATOMIC_SEQ_CST); }

/* Spins briefly, then sleeps, until a generation other than `seen` is published or worker `index`
   is to retire. The sleeper count and the generation are both sequentially consistent: either the
   publisher sees this worker counted and wakes it, or this worker sees the new generation. */
static uint32_t next_generation(uint32_t seen, int index) {
    const int64_t give_up = now_ns() + __atomic_load_n(&pool.spin_ns, __ATOMIC_RELAXED);
    for (unsigned spin = 1;; ++spin) {
        const uint32_t generation = __atomic_load_n(&pool.generation, __ATOMIC_ACQUIRE);
        if (generation != seen || retiring(index)) return generation;
        FQ_CPU_RELAX();
        if (spin % 64 == 0 && now_ns() > give_up) break;
    }
    pthread_mutex_lock(&pool.lock);
    __atomic_add_fetch(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
    uint32_t generation;
    while ((generation = __atomic_load_n(&pool.generation, __ATOMIC_SEQ_CST)) == seen &&
           !retiring(index))
        pthread_cond_wait(&pool.wake, &pool.lock);
    __atomic_sub_fetch(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&pool.lock);
    return generation;
}

static void *worker_main(void *arg) {
    const int index = (int)(intptr_t)arg;
    uint32_t seen = __atomic_load_n(&pool.generation, __ATOMIC_ACQUIRE);
    for (;;) {
        seen = next_generation(seen, index);
        if (retiring(index)) return NULL; /* joined by the reservation that retires it */
        if (index >= __atomic_load_n(&pool.threads, __ATOMIC_ACQUIRE)) continue;
        const fq_fpenv saved = fq_fpenv_get();
        run_items(index, 1);
        fq_fpenv_leave(saved);
    }
}

/* A child process has none of the parent's workers, and the pool's lock and conditions may have
   been held or waited on by threads that do not exist there: it starts with an empty pool. The
   lock is held across fork() so the child's copy is consistent. */
static void before_fork(void) {
    pthread_mutex_lock(&pool.reserving);
    pthread_mutex_lock(&pool.lock);
}
static void after_fork_in_parent(void) {
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.reserving);
}
static void after_fork_in_child(void) {
    pthread_mutex_init(&pool.reserving, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.finished, NULL);
    pool.workers = pool.sleepers = pool.caller_waiting = pool.busy = pool.refused = 0;
    pool.kept_awake = 0; /* its holders are threads of the parent */
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
    pthread_attr_setstacksize(&attr, FQ_WORKER_STACK);
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    while (pool.workers < count) {
        pthread_t *thread = &pool.thread[pool.workers];
        if (pthread_create(thread, &attr, worker_main, (void *)(intptr_t)(pool.workers + 1)) != 0) {
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
    if (threads > FQ_MAX_WORKERS + 1) threads = FQ_MAX_WORKERS + 1;
    pthread_mutex_lock(&pool.reserving);
    pthread_mutex_lock(&pool.lock);
    __atomic_store_n(&pool.refused, 0, __ATOMIC_RELAXED);
    const int before = pool.workers;
    const int started = start_workers(threads - 1);
    pthread_mutex_unlock(&pool.lock);
    int workers = started;
    if (all_or_none && started < threads - 1 && started > before) {
        /* The workers started for a reservation that failed would hold address space for
           nothing (their stacks): they retire and are joined, and the pool is as it was. */
        __atomic_store_n(&pool.keep, before, __ATOMIC_SEQ_CST);
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
        for (int i = before; i < started; ++i) pthread_join(pool.thread[i], NULL);
        pthread_mutex_lock(&pool.lock);
        __atomic_store_n(&pool.workers, before, __ATOMIC_RELAXED);
        __atomic_store_n(&pool.keep, INT_MAX, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&pool.lock);
        workers = before;
    }
    pthread_mutex_unlock(&pool.reserving);
    return workers + 1;
}

int fq_parallel_awake_workers(void) {
    return __atomic_load_n(&pool.workers, __ATOMIC_RELAXED) -
           __atomic_load_n(&pool.sleepers, __ATOMIC_RELAXED);
}

void fq_keep_workers_awake(int hold) {
    __atomic_add_fetch(&pool.kept_awake, hold ? 1 : -1, __ATOMIC_RELAXED);
}

int fq_workers_kept_awake(void) { return __atomic_load_n(&pool.kept_awake, __ATOMIC_RELAXED); }

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

static void parallel_for(int threads, size_t items, fq_range_fn body, void *context,
                         int backward) {
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
    const int64_t gap = start - pool.last_end;
    pool.recent_gap -= pool.recent_gap / 8;
    if (gap > pool.recent_gap && 2 * gap <= FQ_WORKER_SPIN_MAX_NS) pool.recent_gap = gap;
    int64_t spin = 2 * pool.recent_gap;
    if (spin < FQ_WORKER_SPIN_MIN_NS) spin = FQ_WORKER_SPIN_MIN_NS;
    if (__atomic_load_n(&pool.kept_awake, __ATOMIC_RELAXED) > 0 && spin < FQ_KEPT_AWAKE_SPIN_NS)
        spin = FQ_KEPT_AWAKE_SPIN_NS;
    __atomic_store_n(&pool.spin_ns, spin, __ATOMIC_RELAXED);
    pool.body = body;
    pool.context = context;
    pool.items = (uint32_t)items;
    pool.done = 0;
    pool.by_workers = 0;
    __atomic_store_n(&pool.backward, backward, __ATOMIC_RELEASE);
    pool.env = fq_fpenv_get();
    __atomic_store_n(&pool.threads, threads, __ATOMIC_RELEASE);
    for (int slot = 0; slot < threads; ++slot)
        __atomic_store_n(&pool.range[slot].span,
                         span_of((uint32_t)(items * slot / threads),
                                 (uint32_t)(items * (slot + 1) / threads)), __ATOMIC_RELEASE);
    __atomic_add_fetch(&pool.generation, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&pool.sleepers, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    run_items(0, 0);
    const int64_t own_end = now_ns();
    wait_for_items(own_end);
    pool.last_end = now_ns();
    record(start, own_end, pool.last_end, __atomic_load_n(&pool.by_workers, __ATOMIC_RELAXED));
    __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
}

void fq_parallel_for(int threads, size_t items, fq_range_fn body, void *context) {
    parallel_for(threads, items, body, context, 0);
}

void fq_parallel_for_backward(int threads, size_t items, fq_range_fn body, void *context) {
    parallel_for(threads, items, body, context, 1);
}
