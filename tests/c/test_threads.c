/* C test harness, threads: the pool behind fq_parallel_for (every item once, on any thread count,
   from concurrent callers, after fork), the thread settings, and the arithmetic of the CPU budget
   that the default thread count comes from. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cpu_budget.h"
#include "common/fpenv.h"
#include "common/parallel.h"
#include "fqcore.h"
#include "harness.h"

#define MAX_ITEMS 5000

typedef struct {
    unsigned runs[MAX_ITEMS];
    size_t spin; /* busy work per item, so that items overlap between threads */
    unsigned ranges_out_of_bounds;
    size_t items;
} count_job;

static void count_items(void *context, size_t first, size_t end) {
    count_job *job = context;
    if (first >= end || end > job->items) __atomic_add_fetch(&job->ranges_out_of_bounds, 1, __ATOMIC_RELAXED);
    for (size_t i = first; i < end && i < job->items; ++i) {
        volatile size_t sink = 0;
        for (size_t k = 0; k < job->spin; ++k) sink += k;
        __atomic_add_fetch(&job->runs[i], 1, __ATOMIC_RELAXED);
    }
}

/* Every item runs exactly once, and the ranges handed out are non-empty and in bounds. */
static int runs_each_item_once(int threads, size_t items, size_t spin) {
    count_job *job = calloc(1, sizeof *job);
    job->items = items;
    job->spin = spin;
    fq_parallel_for(threads, items, count_items, job);
    int ok = job->ranges_out_of_bounds == 0 || items == 0;
    for (size_t i = 0; i < items; ++i) ok &= job->runs[i] == 1;
    free(job);
    return ok;
}

static void test_items_run_once(void) {
    static const size_t counts[] = {0, 1, 2, 3, 7, 64, 65, 1000, MAX_ITEMS};
    for (int threads = 1; threads <= THREADS_MAX; ++threads)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; ++k)
            for (size_t spin = 0; spin <= 2000; spin += 2000)
                expect(runs_each_item_once(threads, counts[k], spin),
                       "threads=%d items=%zu spin=%zu: some item ran not exactly once", threads,
                       counts[k], spin);
    /* Many calls in a row: a worker that wakes late must never take an item of a later call. */
    int ok = 1;
    for (int call = 0; call < 2000; ++call) ok &= runs_each_item_once(2 + call % 3, 1 + call % 9, 0);
    expect(ok, "2000 short calls in a row: some item ran not exactly once");
}

static void *concurrent_caller(void *arg) {
    int *ok = arg;
    for (int call = 0; call < 200; ++call) *ok &= runs_each_item_once(THREADS_MAX, 97, 200);
    return NULL;
}

/* Callers on several threads at once: one holds the pool, the others run alone; all correct. */
static void test_concurrent_callers(void) {
    pthread_t callers[4];
    int ok[4] = {1, 1, 1, 1};
    for (int i = 0; i < 4; ++i) pthread_create(&callers[i], NULL, concurrent_caller, &ok[i]);
    for (int i = 0; i < 4; ++i) {
        pthread_join(callers[i], NULL);
        expect(ok[i], "concurrent caller %d: some item ran not exactly once", i);
    }
}

/* A child process starts with no workers (they are not copied by fork) and must still run
   parallel calls, starting its own. Skipped where the tool running the test cannot fork a
   multi-threaded process: ThreadSanitizer, and qemu-user (FQ_TEST_NO_FORK=1, set by the runner). */
static void test_fork(void) {
#if defined(__SANITIZE_THREAD__)
    return;
#endif
    if (getenv("FQ_TEST_NO_FORK") != NULL) return;
    expect(runs_each_item_once(THREADS_MAX, 500, 100), "before fork");
    fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
        const int ok = runs_each_item_once(THREADS_MAX, 500, 100) &&
                       fq_set_num_threads(THREADS_MAX) == FQ_OK &&
                       runs_each_item_once(THREADS_MAX, 500, 100);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    expect(child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
               WEXITSTATUS(status) == 0,
           "the forked child's parallel calls failed (status %d)", status);
    expect(runs_each_item_once(THREADS_MAX, 500, 100), "after fork, in the parent");
}

typedef struct {
    uint64_t csr[64];
} fpenv_job;

static void record_fpenv(void *context, size_t first, size_t end) {
    fpenv_job *job = context;
    for (size_t i = first; i < end; ++i) {
        const fq_fpenv current = fq_fpenv_enter();
        fq_fpenv_leave(current);
        job->csr[i] = current;
    }
}

/* Workers run items under the kernels' floating-point environment, as the caller does. */
static void test_worker_fpenv(void) {
    const fq_fpenv saved = fq_fpenv_enter();
    const fq_fpenv inside = fq_fpenv_enter();
    fq_fpenv_leave(inside);
    fpenv_job job;
    int ok = 1;
    for (int call = 0; call < 50; ++call) {
        fq_parallel_for(THREADS_MAX, 64, record_fpenv, &job);
        for (size_t i = 0; i < 64; ++i) ok &= job.csr[i] == inside;
    }
    fq_fpenv_leave(saved);
    expect(ok, "an item ran under another floating-point environment than the call's");
}

static int64_t monotonic_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* While held, the workers still wait awake for the next call 0.5 ms after one (they look for 2 ms
   from when they saw it start); unheld, they look for at most 0.25 ms after calls that come this
   close together. An attempt counts when the check came within 1.5 ms of the call's start (a
   caller kept off its core longer proves nothing). */
static void test_workers_kept_awake(void) {
    const int before = fq_workers_kept_awake();
    fq_keep_workers_awake(1);
    fq_keep_workers_awake(1);
    expect(fq_workers_kept_awake() == before + 2, "holds nest");
    fq_keep_workers_awake(0);
    /* A quarter of the attempts in time must see a worker awake: on a loaded machine the worker may
       not have run at all by then (with two busy processes on 2 CPUs, 18 of 32 saw it; with the
       workers waiting 20 us instead of 2 ms, at most 1 of 40). */
    int in_time = 0, awake = 0;
    for (int attempt = 0; attempt < 40; ++attempt) {
        const int64_t start = monotonic_ns();
        expect(runs_each_item_once(2, 1000, 0), "a call while held: some item ran not once");
        while (monotonic_ns() < start + 500000) {
        }
        const int seen = fq_parallel_awake_workers();
        if (monotonic_ns() < start + 1500000) {
            ++in_time;
            awake += seen > 0;
        }
    }
    expect(4 * awake >= in_time, "0.5 ms after a call while held, a worker awake in %d of %d attempts",
           awake, in_time);
    fq_keep_workers_awake(0);
    expect(fq_workers_kept_awake() == before, "every hold let go of");
}

static void test_settings(void) {
    expect(fq_set_num_threads(FQ_THREADS_AUTO) == FQ_OK && fq_num_threads_is_auto(), "auto");
    expect(fq_get_num_threads() == fq_usable_cpus(), "auto: fq_get_num_threads is the usable CPUs");
    expect(fq_usable_cpus() >= 1, "at least one usable CPU");
    expect(fq_set_num_threads(3) == FQ_OK && !fq_num_threads_is_auto() && fq_get_num_threads() == 3,
           "a fixed count");
    expect(fq_set_num_threads(-1) == FQ_ERR_BAD_THREADS && fq_get_num_threads() == 3,
           "-1 refused, the setting kept");
    expect(fq_set_num_threads(FQ_MAX_THREADS + 1) == FQ_ERR_BAD_THREADS, "1025 refused");
    const double load = fq_other_cpu_load();
    expect(load >= 0.0 && load <= (double)sysconf(_SC_NPROCESSORS_ONLN),
           "other load %g within [0, CPUs]", load);
    expect(fq_set_num_threads(FQ_THREADS_AUTO) == FQ_OK, "back to auto");
}

static void test_budget_arithmetic(void) {
    const fq_cpu_sample a = {0, 1000, 0};
    /* 1 s, 2 CPUs at 100 ticks/s: 150 busy ticks, 0.5 s of it this process's -> 1 core others. */
    const fq_cpu_sample b = {1000000000LL, 1150, 500000000LL};
    expect(fabs(fq_cpu_other_load_from(&a, &b, 2, 100) - 1.0) < 1e-12, "others = busy - own");
    const fq_cpu_sample own_only = {1000000000LL, 1100, 1000000000LL};
    expect(fq_cpu_other_load_from(&a, &own_only, 2, 100) == 0.0, "only this process busy");
    const fq_cpu_sample all = {1000000000LL, 1000 + 900, 0};
    expect(fq_cpu_other_load_from(&a, &all, 2, 100) == 2.0, "clamped to the CPUs");
    const fq_cpu_sample skew = {1000000000LL, 1000, 300000000LL};
    expect(fq_cpu_other_load_from(&a, &skew, 2, 100) == 0.0, "own time beyond ticks: 0, not < 0");
    expect(fq_cpu_other_load_from(&a, &a, 2, 100) == 0.0, "no time passed: 0");

    expect(fq_free_cpus_for(2, 2, 0.0) == 2, "quiet: all");
    expect(fq_free_cpus_for(2, 2, 0.3) == 2, "a CPU a third busy elsewhere: still free");
    expect(fq_free_cpus_for(2, 2, 0.6) == 1, "a CPU over half busy elsewhere: taken");
    expect(fq_free_cpus_for(2, 2, 1.0) == 1, "one busy process on 2 CPUs: 1");
    expect(fq_free_cpus_for(2, 2, 2.0) == 1, "all busy: never below 1");
    expect(fq_free_cpus_for(2, 64, 30.0) == 2, "quota 2 of 64 CPUs, 30 busy: the quota");
    expect(fq_free_cpus_for(8, 8, 6.4) == 2, "6.4 of 8 busy: 2");
    expect(fq_free_cpus() >= 1 && fq_free_cpus() <= fq_usable_cpus(), "free within [1, usable]");
}

int main(void) {
    static const harness_section sections[] = {
        {"items run once", test_items_run_once},
        {"concurrent callers", test_concurrent_callers},
        {"fork", test_fork},
        {"worker floating-point environment", test_worker_fpenv},
        {"workers kept awake", test_workers_kept_awake},
        {"thread settings", test_settings},
        {"CPU budget arithmetic", test_budget_arithmetic},
    };
    return harness_main("C harness (threads)", sections, sizeof sections / sizeof sections[0]);
}
