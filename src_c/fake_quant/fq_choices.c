/* The CPU-dependent walk choices of the fake-quant kernels (fq_choices.h). */
#include "fq_choices.h"

#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>

/* 1 for AMD's and Hygon's Zen cores, whose measurements chose the shared rows. */
static int cpu_is_zen(void) {
    unsigned int max_leaf, b, c, d;
    if (!__get_cpuid(0, &max_leaf, &b, &c, &d)) return 0;
    char vendor[13];
    memcpy(vendor, &b, 4);
    memcpy(vendor + 4, &d, 4);
    memcpy(vendor + 8, &c, 4);
    vendor[12] = '\0';
    return strcmp(vendor, "AuthenticAMD") == 0 || strcmp(vendor, "HygonGenuine") == 0;
}
#else
static int cpu_is_zen(void) { return 0; }
#endif

static int forced = -1;

/* Zen 4 (fq_channel_walk.h): rows sharing grid loads everywhere, in pairs at 4 KiB on AVX-512.
   Intel Xeon (Sapphire Rapids class), past L2: one row at a time with four vectors loaded ahead
   matches the per-tensor forward wherever out sits against x, where rows sharing grid loads lose
   up to 1.5x; NEON, never measured past L2 with shared rows, keeps the one-row walk it had. */
fq_row_walk fq_row_walk_for(fq_isa isa) {
    const int walk = __atomic_load_n(&forced, __ATOMIC_RELAXED);
    if (walk >= 0) return (fq_row_walk)walk;
    static int zen = -1;
    int is_zen = __atomic_load_n(&zen, __ATOMIC_RELAXED);
    if (is_zen < 0) {
        is_zen = cpu_is_zen();
        __atomic_store_n(&zen, is_zen, __ATOMIC_RELAXED);
    }
    if (!is_zen) return FQ_ONE_ROW_PAST_L2;
    return isa == FQ_ISA_AVX512 ? FQ_ROWS_SHARE_GRID_PAIRS_AT_4K : FQ_ROWS_SHARE_GRID;
}

void fq_force_row_walk(int walk) {
    __atomic_store_n(&forced, walk >= 0 && walk < FQ_ROW_WALK_COUNT ? walk : -1, __ATOMIC_RELAXED);
}

const char *fq_kernel_choices(void) {
    const fq_isa isa = fq_get_isa();
    if (isa == FQ_ISA_SCALAR) return "scalar kernels: no choices";
    switch (fq_row_walk_for(isa)) {
    case FQ_ROWS_SHARE_GRID: return "per-channel forward: rows sharing grid loads";
    case FQ_ROWS_SHARE_GRID_PAIRS_AT_4K:
        return "per-channel forward: rows sharing grid loads, in pairs 4 KiB apart";
    default: return "per-channel forward: rows sharing grid loads in L2, one row at a time past it";
    }
}
