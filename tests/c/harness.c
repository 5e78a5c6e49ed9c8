/* Shared plumbing of the C test binaries (see harness.h). */
#include "harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_REPORTS 40

static uint64_t rng_state = 0x0fc0e5eed2024ull;

uint64_t rnd64(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

size_t below(size_t n) { return n ? (size_t)(rnd64() % n) : 0; }

float unif(float lo, float hi) { return lo + (hi - lo) * ((float)(rnd64() >> 40) * 0x1p-24f); }

float from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

uint32_t to_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

int same(float a, float b) { return (isnan(a) && isnan(b)) || to_bits(a) == to_bits(b); }

long n_passed, n_failed;
static int n_reports, max_reports = MAX_REPORTS;

int expect(int ok, const char *fmt, ...) {
    if (ok) {
        ++n_passed;
        return 1;
    }
    ++n_failed;
    ++n_reports;
    if (n_reports <= max_reports) {
        va_list ap;
        va_start(ap, fmt);
        printf("FAIL: ");
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
    } else if (n_reports == max_reports + 1) {
        printf("FAIL: (further failures are counted, not shown)\n");
    }
    return 0;
}

void *xmalloc_aligned(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes < 64 ? 64 : bytes) != 0) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

float *random_floats(size_t n) {
    float *a = xmalloc_aligned(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; ++i) a[i] = unif(-2.0f, 2.0f);
    return a;
}

float *guarded_output(size_t n) {
    float *buf = xmalloc_aligned((2 * GUARD_FLOATS + n) * sizeof(float));
    for (size_t i = 0; i < 2 * GUARD_FLOATS + n; ++i) buf[i] = from_bits(GUARD_BITS);
    return buf + GUARD_FLOATS;
}

int output_intact(const float *data, size_t n) {
    for (size_t i = 0; i < GUARD_FLOATS; ++i)
        if (to_bits(data[-1 - (long)i]) != GUARD_BITS || to_bits(data[n + i]) != GUARD_BITS) return 0;
    return 1;
}

void free_output(float *data) { free(data - GUARD_FLOATS); }

fq_isa isas[FQ_ISA_COUNT];
int n_isas;

void set_fpcr_bit(unsigned bit, int on) {
#if defined(__aarch64__)
    uint64_t fpcr;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    fpcr = on ? fpcr | ((uint64_t)1 << bit) : fpcr & ~((uint64_t)1 << bit);
    __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr));
#else
    (void)bit;
    (void)on;
#endif
}

void set_isa_threads(fq_isa isa, int threads) {
    fq_status s = fq_set_isa(isa);
    if (s != FQ_OK) {
        printf("fatal: fq_set_isa(%s): %s\n", fq_isa_name(isa), fq_status_string(s));
        exit(2);
    }
    s = fq_set_num_threads(threads);
    if (s != FQ_OK) {
        printf("fatal: fq_set_num_threads(%d): %s\n", threads, fq_status_string(s));
        exit(2);
    }
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int harness_main(const char *title, const harness_section *sections, size_t count) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (getenv("FQ_TEST_MAX_REPORTS") != NULL) max_reports = atoi(getenv("FQ_TEST_MAX_REPORTS"));
    const fq_status init = fq_init();
    printf("fqcore %s %s; fq_init: %s; usable CPUs: %d\n", FQCORE_VERSION_STRING, title,
           fq_status_string(init), fq_usable_cpus());
    printf("ISAs compiled:");
    for (int i = 0; i < FQ_ISA_COUNT; ++i)
        if (fq_isa_compiled((fq_isa)i)) printf(" %s", fq_isa_name((fq_isa)i));
    printf("; available:");
    for (int i = 0; i < FQ_ISA_COUNT; ++i)
        if (fq_isa_available((fq_isa)i)) {
            isas[n_isas++] = (fq_isa)i;
            printf(" %s", fq_isa_name((fq_isa)i));
        }
    printf("\n");
    if (n_isas == 1) printf("NOTE: only scalar is available: testing thread counts and known values only\n");
#if defined(__aarch64__)
    expect(fq_isa_available(FQ_ISA_NEON), "NEON must be available on AArch64");
#endif
    for (size_t k = 0; k < count; ++k) {
        const double start = now_seconds();
        const long passed = n_passed, failed = n_failed;
        sections[k].fn();
        printf("  %-34s %7ld passed, %ld failed  (%.1f s)\n", sections[k].name, n_passed - passed,
               n_failed - failed, now_seconds() - start);
        fflush(stdout);
    }
    printf("%ld passed, %ld failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
