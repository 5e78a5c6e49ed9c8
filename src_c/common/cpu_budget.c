/* How many CPUs this process may use (affinity, cgroup CPU quota) and how many of them other
   processes keep busy now: the two numbers the default ("auto") thread count comes from. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef __linux__
#include <sched.h>
#endif

#include "cpu_budget.h"

/* The load estimate is renewed at most this often: reading /proc/stat takes ~20 us, and its counts
   advance in clock ticks (10 ms), so shorter intervals would only measure noise. */
#define FQ_LOAD_INTERVAL_NS 100000000LL

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

double fq_cpu_other_load_from(const fq_cpu_sample *previous, const fq_cpu_sample *now, int cpus,
                              long ticks_per_second) {
    const double wall = (double)(now->wall_ns - previous->wall_ns) * 1e-9;
    if (wall <= 0.0 || ticks_per_second <= 0) return 0.0;
    const double busy = (double)(now->busy_ticks - previous->busy_ticks) / (double)ticks_per_second;
    const double own = (double)(now->own_cpu_ns - previous->own_cpu_ns) * 1e-9;
    const double others = (busy - own) / wall;
    if (others < 0.0) return 0.0;
    return others > cpus ? (double)cpus : others;
}

int fq_free_cpus_for(int usable, int cpus, double other_load) {
    /* A CPU is free while others use less than half of it. */
    const int free = (int)floor((double)cpus - other_load + 0.5);
    if (free < 1) return 1;
    return free > usable ? usable : free;
}

#ifdef __linux__

static int affinity_cpus(cpu_set_t *set) {
    if (sched_getaffinity(0, sizeof(*set), set) != 0) return 0;
    return CPU_COUNT(set);
}

/* ceil(quota / period) of the cgroup v2 file cpu.max ("max 100000" when unlimited), or of v1's
   cpu.cfs_quota_us (-1 when unlimited) and cpu.cfs_period_us; 0 when there is no quota. */
static int quota_cpus(void) {
    long long quota = 0, period = 0;
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f != NULL) {
        if (fscanf(f, "%lld %lld", &quota, &period) != 2) quota = 0;
        fclose(f);
    } else {
        f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r");
        if (f == NULL) return 0;
        if (fscanf(f, "%lld", &quota) != 1) quota = 0;
        fclose(f);
        f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r");
        if (f == NULL) return 0;
        if (fscanf(f, "%lld", &period) != 1) period = 0;
        fclose(f);
    }
    if (quota <= 0 || period <= 0) return 0;
    return (int)((quota + period - 1) / period);
}

/* Busy ticks (all but idle and iowait; steal counts: the hypervisor gave the CPU to someone else)
   of the CPUs in `set`, from the aggregate line when the set is every CPU listed. */
static int read_busy_ticks(const cpu_set_t *set, int count, long long *busy) {
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL) return 0;
    char line[512];
    long long all = 0, mine = 0;
    int listed = 0, ok = 0;
    while (fgets(line, sizeof line, f) != NULL && strncmp(line, "cpu", 3) == 0) {
        unsigned long long v[8] = {0};
        int cpu = -1, consumed = 0;
        if (line[3] == ' ') {
            ok = sscanf(line + 3, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                        &v[3], &v[4], &v[5], &v[6], &v[7]) >= 4;
            if (ok) all = (long long)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
            continue;
        }
        if (sscanf(line + 3, "%d%n", &cpu, &consumed) != 1 || cpu < 0) continue;
        ++listed;
        if (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, set)) continue;
        if (sscanf(line + 3 + consumed, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) >= 4)
            mine += (long long)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
    }
    fclose(f);
    if (!ok) return 0;
    *busy = listed == count ? all : mine;
    return 1;
}

static int own_cpu_ns(int64_t *ns) {
    struct timespec t;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) != 0) return 0;
    *ns = (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
    return 1;
}

/* Set once (fq_init calls fq_usable_cpus at start-up, before an application's threads exist); the
   sample and the estimate change under `lock`, which a call only ever tries: a call that finds
   it held keeps the current estimate. */
static struct {
    pthread_mutex_t lock;
    int usable, cpus; /* usable: cpus (the affinity mask's) lowered to the quota */
    cpu_set_t set;
    long ticks;
    int have_sample;
    fq_cpu_sample last;
    int64_t checked_ns;
    double other_load;
} budget = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void take_sample(int64_t now) {
    fq_cpu_sample sample = {now, 0, 0};
    if (!read_busy_ticks(&budget.set, budget.cpus, &sample.busy_ticks) ||
        !own_cpu_ns(&sample.own_cpu_ns)) {
        budget.have_sample = 0;
        return;
    }
    if (budget.have_sample) {
        const double load = fq_cpu_other_load_from(&budget.last, &sample, budget.cpus, budget.ticks);
        __atomic_store(&budget.other_load, &load, __ATOMIC_RELAXED);
    }
    budget.last = sample;
    budget.have_sample = 1;
}

/* A child process may inherit the lock held by a thread it does not have. */
static void after_fork_in_child(void) { pthread_mutex_init(&budget.lock, NULL); }

static void init_budget(void) {
    int cpus = affinity_cpus(&budget.set);
    if (cpus <= 0) {
        const long online = sysconf(_SC_NPROCESSORS_ONLN);
        cpus = online > 0 ? (int)online : 1;
        CPU_ZERO(&budget.set);
        for (int cpu = 0; cpu < cpus && cpu < CPU_SETSIZE; ++cpu) CPU_SET(cpu, &budget.set);
    }
    const int quota = quota_cpus();
    budget.cpus = cpus;
    budget.usable = quota > 0 && quota < cpus ? quota : cpus;
    budget.ticks = sysconf(_SC_CLK_TCK);
    /* Until the first interval has passed the machine counts as quiet: calls whose workers come
       late meanwhile back off on their own (parallel.c). */
    budget.checked_ns = now_ns();
    take_sample(budget.checked_ns);
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

static pthread_once_t budget_once = PTHREAD_ONCE_INIT;

int fq_usable_cpus(void) {
    pthread_once(&budget_once, init_budget);
    return budget.usable;
}

double fq_other_cpu_load(void) {
    pthread_once(&budget_once, init_budget);
    const int64_t now = now_ns();
    if (pthread_mutex_trylock(&budget.lock) == 0) {
        if (now - budget.checked_ns >= FQ_LOAD_INTERVAL_NS) {
            budget.checked_ns = now;
            take_sample(now);
        }
        pthread_mutex_unlock(&budget.lock);
    }
    double load;
    __atomic_load(&budget.other_load, &load, __ATOMIC_RELAXED);
    return load;
}

int fq_free_cpus(void) {
    const double load = fq_other_cpu_load();
    return fq_free_cpus_for(budget.usable, budget.cpus, load);
}

#else

int fq_usable_cpus(void) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

/* No portable reading of other processes' CPU time: workers that come late make calls back off
   instead (parallel.c). */
double fq_other_cpu_load(void) { return 0.0; }

int fq_free_cpus(void) { return fq_usable_cpus(); }

#endif
