/* CPU feature detection, the ISA table, environment overrides and the thread budget. */
#include <stdlib.h>
#include <string.h>

#include "include/fqcore.h"
#include "common/cpu_budget.h"
#include "common/parallel.h"
#include "common/runtime.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define FQ_X86 1
#include <cpuid.h>
#endif

/* Below this many elements a call stays on the calling thread. */
#define FQ_PARALLEL_MIN_WORK ((size_t)65536)
/* Below this many elements only workers already awake take part: waking a sleeping one costs
   more than the call gains (about 30 us from the signal to its first item on a 2-core KVM guest). */
#define FQ_PARALLEL_WAKE_MIN_WORK ((size_t)262144)
/* Each extra thread gets at least this much work. */
#define FQ_PARALLEL_WORK_PER_THREAD ((size_t)32768)

static const char *const isa_names[FQ_ISA_COUNT] = {"scalar", "avx2", "avx512", "neon"};

static const int isa_compiled[FQ_ISA_COUNT] = {
    1,
#ifdef FQ_BUILD_AVX2
    1,
#else
    0,
#endif
#ifdef FQ_BUILD_AVX512
    1,
#else
    0,
#endif
#ifdef FQ_BUILD_NEON
    1,
#else
    0,
#endif
};

#ifdef FQ_X86
/* XCR0 via xgetbv, encoded as bytes so this file needs no -mxsave. */
static unsigned long long read_xcr0(void) {
    unsigned int eax, edx;
    __asm__ __volatile__(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static void detect_x86(int supported[FQ_ISA_COUNT]) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx) return;
    const unsigned long long xcr0 = read_xcr0();
    const int ymm_state = (xcr0 & 0x6) == 0x6;    /* SSE + AVX state saved by the OS */
    const int zmm_state = (xcr0 & 0xe6) == 0xe6;  /* + opmask, ZMM_Hi256, Hi16_ZMM */
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    const int avx2 = (b >> 5) & 1;
    const int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1,
              avx512vl = (b >> 31) & 1;
    supported[FQ_ISA_AVX2] = ymm_state && avx2 && fma && f16c;
    supported[FQ_ISA_AVX512] = supported[FQ_ISA_AVX2] && zmm_state && avx512f && avx512dq &&
                               avx512bw && avx512vl;
}
#endif

static int isa_supported[FQ_ISA_COUNT];
static int active_isa;
static int num_threads = FQ_THREADS_AUTO;
static fq_status init_status;
static int initialized;

static void detect(void) {
    isa_supported[FQ_ISA_SCALAR] = 1;
#ifdef FQ_X86
    detect_x86(isa_supported);
#endif
#if defined(__aarch64__)
    isa_supported[FQ_ISA_NEON] = 1; /* Advanced SIMD is part of the AArch64 baseline */
#endif
}

/* After detect(): compiled in and supported by this CPU. */
static int usable(fq_isa isa) { return fq_isa_compiled(isa) && isa_supported[isa]; }

static fq_isa best_available(void) {
    for (int isa = FQ_ISA_COUNT - 1; isa > FQ_ISA_SCALAR; --isa)
        if (usable((fq_isa)isa)) return (fq_isa)isa;
    return FQ_ISA_SCALAR;
}

/* FQCORE_NUM_THREADS: unset, empty or "auto" for the default, else a count from 1 to 1024. */
static fq_status threads_from_env(int *out) {
    const char *text = getenv("FQCORE_NUM_THREADS");
    *out = FQ_THREADS_AUTO;
    if (text == NULL || *text == '\0' || strcmp(text, "auto") == 0) return FQ_OK;
    char *end;
    long value = strtol(text, &end, 10);
    if (*end != '\0' || value < 1 || value > FQ_MAX_THREADS) return FQ_ERR_BAD_THREADS;
    *out = (int)value;
    return FQ_OK;
}

fq_status fq_init(void) {
    if (__atomic_load_n(&initialized, __ATOMIC_ACQUIRE)) return init_status;
    detect();
    fq_status status = FQ_OK;
    fq_isa isa = best_available();
    const char *requested = getenv("FQCORE_ISA");
    if (requested != NULL && *requested != '\0') {
        fq_isa wanted;
        status = fq_isa_from_name(requested, &wanted);
        if (status == FQ_OK && !usable(wanted)) status = FQ_ERR_ISA_UNAVAILABLE;
        if (status == FQ_OK) isa = wanted;
    }
    int threads = FQ_THREADS_AUTO;
    fq_status thread_status = threads_from_env(&threads);
    if (status == FQ_OK) status = thread_status;
    active_isa = (int)isa;
    num_threads = threads;
    fq_usable_cpus(); /* reads the CPU budget now, before the application starts threads */
    init_status = status;
    __atomic_store_n(&initialized, 1, __ATOMIC_RELEASE);
    return status;
}

const char *fq_status_string(fq_status status) {
    switch (status) {
    case FQ_OK: return "ok";
    case FQ_ERR_NULL_POINTER: return "a required pointer is NULL";
    case FQ_ERR_NUM_BITS: return "num_bits must be between 2 and 16, inclusive";
    case FQ_ERR_MIN_NOT_BELOW_MAX: return "min has to be smaller than max";
    case FQ_ERR_NO_MEMORY: return "out of memory for scratch space";
    case FQ_ERR_ISA_UNAVAILABLE: return "the requested ISA is not available on this build or CPU";
    case FQ_ERR_BAD_ISA: return "unknown ISA name (expected scalar, avx2, avx512 or neon)";
    case FQ_ERR_BAD_THREADS: return "the number of threads must be an integer from 1 to 1024, or auto";
    case FQ_ERR_NO_THREADS: return "the system refused to start that many threads";
    case FQ_ERR_BAD_PROGRAM: return "a vector program names an unknown opcode or a row it may not use";
    case FQ_ERR_BAD_SHAPE: return "the element count is not a multiple of the channel count";
    case FQ_ERR_BAD_DTYPE: return "unknown element type (expected float32, float16 or bfloat16)";
    case FQ_ERR_BAD_LAYOUT: return "unknown data layout (expected channels-last or channels-first)";
    }
    return "unknown status";
}

const char *fq_isa_name(fq_isa isa) {
    return (unsigned)isa < FQ_ISA_COUNT ? isa_names[isa] : "unknown";
}

fq_status fq_isa_from_name(const char *name, fq_isa *isa) {
    if (name == NULL || isa == NULL) return FQ_ERR_NULL_POINTER;
    for (int i = 0; i < FQ_ISA_COUNT; ++i)
        if (strcmp(name, isa_names[i]) == 0) {
            *isa = (fq_isa)i;
            return FQ_OK;
        }
    return FQ_ERR_BAD_ISA;
}

int fq_isa_compiled(fq_isa isa) { return (unsigned)isa < FQ_ISA_COUNT && isa_compiled[isa]; }

int fq_isa_available(fq_isa isa) {
    fq_init();
    return usable(isa);
}

fq_isa fq_get_isa(void) {
    fq_init();
    return (fq_isa)__atomic_load_n(&active_isa, __ATOMIC_RELAXED);
}

fq_status fq_set_isa(fq_isa isa) {
    if ((unsigned)isa >= FQ_ISA_COUNT) return FQ_ERR_BAD_ISA;
    if (!fq_isa_available(isa)) return FQ_ERR_ISA_UNAVAILABLE;
    __atomic_store_n(&active_isa, (int)isa, __ATOMIC_RELAXED);
    return FQ_OK;
}

int fq_get_num_threads(void) {
    fq_init();
    const int threads = __atomic_load_n(&num_threads, __ATOMIC_RELAXED);
    return threads == FQ_THREADS_AUTO ? fq_usable_cpus() : threads;
}

int fq_num_threads_is_auto(void) {
    fq_init();
    return __atomic_load_n(&num_threads, __ATOMIC_RELAXED) == FQ_THREADS_AUTO;
}

fq_status fq_set_num_threads(int threads) {
    if (threads < FQ_THREADS_AUTO || threads > FQ_MAX_THREADS) return FQ_ERR_BAD_THREADS;
    fq_init();
    /* A fixed count starts its workers now, so that a refusal is this call's error. */
    if (threads != FQ_THREADS_AUTO && fq_parallel_reserve(threads, 1) < threads) return FQ_ERR_NO_THREADS;
    __atomic_store_n(&num_threads, threads, __ATOMIC_RELAXED);
    return FQ_OK;
}

int fq_runtime_threads_for(size_t work, size_t max_items) {
    if (work < FQ_PARALLEL_MIN_WORK) return 1;
    size_t threads = (size_t)__atomic_load_n(&num_threads, __ATOMIC_RELAXED);
    if (threads == FQ_THREADS_AUTO) {
        if (fq_parallel_backing_off()) return 1;
        threads = (size_t)fq_free_cpus();
        if (work < FQ_PARALLEL_WAKE_MIN_WORK) {
            const size_t awake = (size_t)fq_parallel_awake_workers();
            if (threads > awake + 1) threads = awake + 1;
        }
    }
    size_t by_work = work / FQ_PARALLEL_WORK_PER_THREAD;
    if (threads > by_work) threads = by_work;
    if (threads > max_items) threads = max_items;
    return threads < 1 ? 1 : (int)threads;
}
