/* The kernels' CPU-dependent walk choices (kernel_choices.h). */
#include "kernel_choices.h"

#include <stdio.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>

/* For AMD's and Hygon's Zen cores, whose measurements chose the shared rows, the CPU family
   (cpuid leaf 1: base plus extended family; Zen 4 is 0x19, Zen 5 0x1A); 0 for other CPUs. */
static int cpu_zen_family(void) {
    unsigned int max_leaf, a, b, c, d;
    if (!__get_cpuid(0, &max_leaf, &b, &c, &d)) return 0;
    char vendor[13];
    memcpy(vendor, &b, 4);
    memcpy(vendor + 4, &d, 4);
    memcpy(vendor + 8, &c, 4);
    vendor[12] = '\0';
    if (strcmp(vendor, "AuthenticAMD") != 0 && strcmp(vendor, "HygonGenuine") != 0) return 0;
    if (max_leaf < 1 || !__get_cpuid(1, &a, &b, &c, &d)) return 0x17; /* a Zen of unknown family */
    const int base = (int)((a >> 8) & 0xf);
    return base == 0xf ? base + (int)((a >> 20) & 0xff) : base;
}
#else
static int cpu_zen_family(void) { return 0; }
#endif

/* The Zen family of this CPU (cpu_zen_family), found once: 0 for other CPUs. */
static int zen_family(void) {
    static int family = -1;
    int found = __atomic_load_n(&family, __ATOMIC_RELAXED);
    if (found < 0) {
        found = cpu_zen_family();
        __atomic_store_n(&family, found, __ATOMIC_RELAXED);
    }
    return found;
}

static int on_zen(void) { return zen_family() != 0; }

/* From Zen 5 on. */
#define ZEN5_FAMILY 0x1a

static int forced = -1;

/* Zen 4 (fake_quant/fq_channel_walk.h), AVX-512: rows sharing grid loads everywhere, in pairs at
   4 KiB. Zen 4 (EPYC, family 0x19, model 0x11), AVX2: one row at a time past L2, as on Intel:
   per-channel over per-tensor Vars, one thread, three runs alternating the walks (fq_force_row_walk)
   in one process, [1024, 1024] 1.16-1.21x against 1.32-1.34x with shared rows, [8192, 128]
   1.07-1.25x against 1.33-1.44x; calls that fit L2 walk as before. Earlier Zens (family 0x17 and
   0x19 without AVX-512) take the same walk, unmeasured.
   Zen 5 (EPYC, family 0x1A), AVX-512: short rows flat at every size, per-channel over per-tensor
   Vars, one thread, two runs each: [3, 3, 64, 128] 1.18-1.23x against 1.28-1.30x with shared rows,
   [8192, 128] 1.01x against 1.10-1.43x, [3, 3, 32, 64] 1.07-1.19x against 1.24-1.25x, [576, 32]
   1.07-1.11x against 1.23-1.29x, [64, 256] 1.19-1.24x against 1.49-1.51x; on its AVX2 path shared
   rows were faster in 8 of 10 such runs over five short-period shapes (0.88-1.01x against
   0.92-1.01x flat), so it keeps them.
   Intel Xeon (Sapphire Rapids class), past L2: one row at a time with four vectors loaded ahead
   matches the per-tensor forward wherever out sits against x, where rows sharing grid loads lose
   up to 1.5x; NEON, never measured past L2 with shared rows, keeps the one-row walk it had. */
fq_row_walk fq_row_walk_for(fq_isa isa) {
    const int walk = __atomic_load_n(&forced, __ATOMIC_RELAXED);
    if (walk >= 0) return (fq_row_walk)walk;
    if (!on_zen()) return FQ_ONE_ROW_PAST_L2;
    if (isa != FQ_ISA_AVX512) return zen_family() >= ZEN5_FAMILY ? FQ_ROWS_SHARE_GRID : FQ_ONE_ROW_PAST_L2;
    return zen_family() >= ZEN5_FAMILY ? FQ_SHORT_ROWS_FLAT : FQ_ROWS_SHARE_GRID_PAIRS_AT_4K;
}

void fq_force_row_walk(int walk) {
    __atomic_store_n(&forced, walk >= 0 && walk < FQ_ROW_WALK_COUNT ? walk : -1, __ATOMIC_RELAXED);
}

/* A yes-or-no choice forced to 1 or 0 for every CPU (the C harness), or -1: the CPU's own. */
static int forced_or(const int *forced, int own) {
    const int choice = __atomic_load_n(forced, __ATOMIC_RELAXED);
    return choice >= 0 ? choice : own;
}

static void force(int *forced, int choice) {
    __atomic_store_n(forced, choice == 0 || choice == 1 ? choice : -1, __ATOMIC_RELAXED);
}

static int forced_bn_blocks = -1;

/* Intel Xeon (Sapphire-Rapids class, 2 MiB L2), one thread, compare.py: NCHW 64x256x14x14 2.28 ->
   2.00 ms, 32x64x56x56 4.59 -> 4.06-4.14 ms with the blocks (bn_walk.c has the detail). AMD Zen 5
   (EPYC, family 26, 1 MiB L2), the other way: 64x256x14x14 back to back 2.63-2.99 ms with blocks
   of 256 KiB to 1 MiB, 1.86-1.94 in two passes; in compare.py 3.06 against 2.06 ms (32x64x56x56:
   3.15 against 3.07). A block's slice of each batch is a few KiB there, too short for Zen's
   prefetchers; asking for the next slice ahead took blocks to 2.07 ms, still behind. */
int fq_bn_gradient_blocks(void) { return forced_or(&forced_bn_blocks, !on_zen()); }

void fq_force_bn_blocks(int blocks) { force(&forced_bn_blocks, blocks); }

static int forced_bn_sums_in_order = -1;

/* Zen 4 gains from the sums in memory order (bn_simd.h, BN_IN_ORDER_MIN_PERIOD, has its figures).
   An Intel Xeon (Sapphire Rapids class) loses, one thread: the sums alone at 6.4M float32
   elements, strips against memory order, AVX-512 at periods 128 and 256 2.36 and 2.35 against
   3.07 and 3.59 ms, AVX2 at 64, 128 and 256 2.15-2.24 against 3.12-3.33 ms; the whole gradient,
   two runs alternating in one process, AVX2 NHWC 32x56x56x64 6.60-6.97 against 8.95-9.65 ms and
   64x14x14x256 2.84-2.91 against 3.04-3.18 ms; AVX-512 64x14x14x256 2.71-2.80 against
   2.70-2.86 ms, and 32x56x56x64 the same either way (one strip covers its period of 64, never
   walked in memory order). Zen 5 keeps memory order, unmeasured. */
int fq_bn_sums_in_order(void) { return forced_or(&forced_bn_sums_in_order, on_zen()); }

void fq_force_bn_sums_in_order(int in_order) { force(&forced_bn_sums_in_order, in_order); }

static int forced_grad_strips = -1;

/* The AVX2 path, whose registers hold the grids of 32 positions: Intel Xeon (Sapphire Rapids class)
   gains 9-20% in L2 (fq_simd.h, grad_strips, has the figures). AMD's Zens take the strips too,
   unmeasured: they save two loads a vector but stride down the rows (a period, up to 1 KiB, apart).
   AVX-512 holds periods up to 128 in its registers already and lost at a period of 256; NEON,
   never measured with strips, keeps its walks. */
int fq_grad_strips_for(fq_isa isa) { return forced_or(&forced_grad_strips, isa == FQ_ISA_AVX2); }

void fq_force_grad_strips(int strips) { force(&forced_grad_strips, strips); }

static int forced_grad_skips = -1;

/* Intel Xeon (Sapphire Rapids class) gains on both x86 paths (fq_simd.h, grad_group, has the
   figures). AMD's Zens keep adding every vector of a group that is not quiet: their figures in
   fq_simd.h were measured that way, the other never; nor was NEON. */
int fq_grad_skips_quiet_vectors_for(fq_isa isa) {
    return forced_or(&forced_grad_skips,
                     !on_zen() && (isa == FQ_ISA_AVX2 || isa == FQ_ISA_AVX512));
}

void fq_force_grad_skips(int skips) { force(&forced_grad_skips, skips); }

static int forced_forward_on_fma = -1;

/* fq_simd.h, forward_mul_v, has the figures: Zen 4 gains from the FMA subtractions (AVX-512, 64K
   elements in L2: 6.9 -> 5.5 us), the AVX2 path on an Intel Xeon (Sapphire Rapids class) loses
   (1.49-1.50x np.multiply with them, 1.28-1.29x with plain ones), and its AVX-512 path is the same
   either way, so keeps them. Zen's AVX2 path shares the pipes of its AVX-512 one, so it keeps them
   too (unmeasured); NEON's subtractions are plain in both kernels. */
int fq_forward_on_fma_for(fq_isa isa) {
    return forced_or(&forced_forward_on_fma, on_zen() || isa != FQ_ISA_AVX2);
}

void fq_force_forward_on_fma(int on_fma) { force(&forced_forward_on_fma, on_fma); }

#define ROWS_SHARE "rows sharing grid loads"

const char *fq_kernel_choices(void) {
    static const char *const walks[FQ_ROW_WALK_COUNT] = {
        [FQ_ROWS_SHARE_GRID] = ROWS_SHARE,
        [FQ_ROWS_SHARE_GRID_PAIRS_AT_4K] = ROWS_SHARE ", in pairs 4 KiB apart",
        [FQ_ONE_ROW_PAST_L2] = ROWS_SHARE " in L2, one row at a time past it",
        [FQ_SHORT_ROWS_FLAT] = ROWS_SHARE ", in pairs 4 KiB apart; short rows flat"};
    static _Thread_local char text[512];
    const fq_isa isa = fq_get_isa();
    if (isa == FQ_ISA_SCALAR) return "scalar kernels: no choices";
    snprintf(text, sizeof text,
             "per-channel forward: %s; per-channel gradient: %s; its groups in L2: %s; "
             "batch-norm channels-first gradient: %s; channels-last gradient sums from memory: "
             "%s; Args forward: %s",
             walks[fq_row_walk_for(isa)], fq_grad_strips_for(isa) ? "strips in L2" : "no strips",
             fq_grad_skips_quiet_vectors_for(isa) ? "loud vectors alone"
                                                  : "every vector if one is loud",
             fq_bn_gradient_blocks() ? "blocks of channels" : "two passes",
             fq_bn_sums_in_order() ? "in memory order" : "strips",
             fq_forward_on_fma_for(isa) ? "subtractions on the FMAs" : "plain subtractions");
    return text;
}
