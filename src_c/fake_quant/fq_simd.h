/* The fake-quant kernels once, for every SIMD ISA. An ISA file defines its vector vocabulary, then
   includes this file, which defines that ISA's kernel table fq_fake_quant__<FQ_ISA>:

     FQ_W                  float lanes per vector: 4, 8 or 16 (it divides FQ_GRID_CHUNK and
                           FQ_SUM_LANES)
     FQ_GRID_REG_VECTORS   4 or 8: vectors of a period whose grids (two registers each) the
                           per-channel gradient keeps in registers, so that periods of up to
                           FQ_W * FQ_GRID_REG_VECTORS positions walk with no grid load at all
     FQ_GRAD_GROUP         2 or 4: vectors a gradient step holds (g, x and two grids each) before
                           any dx is stored; 4 fill AVX2's 16 registers, so it takes 2
     fqv, fqv_mask, fqv_d  a float32 vector; a compare's result, one flag per lane; a float64
                           vector of FQ_W / 2 lanes
     fqv_load, fqv_store   FQ_W floats, unaligned
     fqv_load_lanes(p, lo, hi), fqv_store_lanes(p, lo, hi, v)
                           lanes [lo, hi) only (0 <= lo < hi <= FQ_W): the other lanes load as +0
                           and store nothing, and their memory is never touched
     fqv_set1, fqv_zero
     fqv_add, fqv_sub, fqv_mul, fqv_div
                           IEEE float32 arithmetic, each operation rounded on its own
     fqv_sub_on_fma, fqv_add_on_fma
                           a - b and a + b, rounded as fqv_sub / fqv_add round them (NaNs and
                           signed zeros included), issued where the ISA is best served: x86 as
                           a * 1 -/+ b on the FMA pipes (see forward_mul_v)
     fqv_floor             rounding toward -inf
     fqv_round_nonneg      roundf (half away from zero) in lanes >= 0; anything in the others
     fqv_abs
     fqv_clamp(x, lo, hi)  fq_clamp: hi < x ? hi : x, then lo where that is below lo (a NaN x
                           stays NaN)
     fqv_ge, _le, _lt, _gt, _eq
                           ordered compares (false where either lane is NaN); fqv_is_nan
     fqv_and, fqv_or; fqv_andnot(a, b)
                           on masks: b and not a
     fqv_or_bits(a, b)     the bitwise or of two float vectors
     fqv_all, fqv_any      whether every / some lane of a mask is set
     fqv_as_one(m)         1.0f where set, +0.0f elsewhere
     fqv_select(m, a, b)   a where set, b elsewhere
     fqv_not_finite(v)     the lanes holding a NaN or an infinity
     fqv_low_d, fqv_high_d the first / last FQ_W / 2 floats of a fqv as float64 (exact)
     fqv_load_d, fqv_store_d, fqv_add_d

   Vectors only ever run across elements or positions: each element meets the scalar formulas'
   operations in their order, and each sum adds its terms in the order fq_kernels.h fixes, so every
   ISA equals fq_scalar.c bit for bit. */
#include <stdint.h>

#include "fq_channel_walk.h"
#include "fq_element.h"

#define FQ_INLINE static inline __attribute__((always_inline))
#define FQ_CAT2(a, b) a##__##b
#define FQ_CAT(a, b) FQ_CAT2(a, b)
#define FQ_NAME(kernel) FQ_CAT(kernel, FQ_ISA)

#if FQ_GRID_CHUNK % FQ_W != 0 || FQ_SUM_LANES % FQ_W != 0 || FQ_W < 4
#error "FQ_W must divide FQ_GRID_CHUNK and FQ_SUM_LANES"
#endif
#if FQ_GRID_REG_VECTORS != 4 && FQ_GRID_REG_VECTORS != 8
#error "FQ_GRID_REG_VECTORS must be 4 or 8"
#endif
#if (FQ_GRAD_GROUP != 2 && FQ_GRAD_GROUP != 4) || (FQ_GRAD_GROUP * FQ_W) % FQ_GRID_CHUNK != 0
#error "FQ_GRAD_GROUP must be 2 or 4 and make whole chunks"
#endif

/* Vectors in one chunk of the grid table, and in one run of each sum's 16 lanes. Four vectors (the
   forward walks' step) and a gradient group always make whole chunks and whole rows of lanes. */
#define FQ_CHUNK_VECTORS (FQ_GRID_CHUNK / FQ_W)
#define FQ_LANE_VECTORS (FQ_SUM_LANES / FQ_W)
#define FQ_CHUNK_FLOATS (FQ_GRID_CHUNK * FQ_GRID_PARAMS)

typedef struct {
    fqv nudged_min, nudged_max, scale, inv_scale, quant_zero;
} fq_vgrid;

FQ_INLINE fq_vgrid broadcast(const fq_grid *q) {
    return (fq_vgrid){fqv_set1(q->nudged_min), fqv_set1(q->nudged_max), fqv_set1(q->scale),
                      fqv_set1(q->inv_scale), fqv_set1(q->quant_zero)};
}

/* The grids of FQ_W consecutive positions of one chunk, the first at `at` (where its nudged_min is
   stored: fq_grid_param(t, p, FQ_GRID_NUDGED_MIN)). */
FQ_INLINE fq_vgrid grid_at(const float *at) {
    return (fq_vgrid){fqv_load(at + FQ_GRID_CHUNK * FQ_GRID_NUDGED_MIN),
                      fqv_load(at + FQ_GRID_CHUNK * FQ_GRID_NUDGED_MAX),
                      fqv_load(at + FQ_GRID_CHUNK * FQ_GRID_SCALE),
                      fqv_load(at + FQ_GRID_CHUNK * FQ_GRID_INV_SCALE),
                      fqv_load(at + FQ_GRID_CHUNK * FQ_GRID_QUANT_ZERO)};
}

/* Where vector k of a group that starts at a chunk boundary finds its grids, from that chunk. */
FQ_INLINE size_t vector_grid_offset(int k) {
    return (size_t)(k / FQ_CHUNK_VECTORS) * FQ_CHUNK_FLOATS + (size_t)(k % FQ_CHUNK_VECTORS) * FQ_W;
}

/* ---- Forward ---- */

/* floor(t) * scale. */
FQ_INLINE fqv floor_scaled(fqv t, const fq_vgrid *q) { return fqv_mul(fqv_floor(t), q->scale); }

/* The dividing forward is bound by the divider: it keeps the plain operations (moving them made no
   difference on Zen 4). */
FQ_INLINE fqv forward_div_v(fqv x, const fq_vgrid *q) {
    const fqv scaled = fqv_div(fqv_sub(fqv_clamp(x, q->nudged_min, q->nudged_max), q->nudged_min), q->scale);
    return floor_scaled(fqv_add(fqv_sub(scaled, q->quant_zero), fqv_set1(0.5f)), q);
}

/* The multiplying forward's eight operations are six of the kind Zen 4 runs on its add pipes (add,
   subtract, min, max, round) and two of the kind it runs on its multiply/FMA pipes; with `on_fma`
   its two subtractions on the FMAs balance them four and four (AVX-512, 64K elements in L2: 6.9 ->
   5.5 us; the addition of 0.5 moved as well made it 5.9 us). Intel's cores are the other way:
   min, max, multiply and round (two operations) issue on the two ports that also run the FMAs,
   while a plain subtraction may take a third, so on the AVX2 path the FMA subtractions make those
   two ports the bottleneck (Intel Xeon, Sapphire Rapids class, one thread, 64K elements, Args
   forward against np.multiply: 1.49-1.50x on the FMAs, 1.28-1.29x plain; AVX-512, whose 512-bit
   operations issue on two ports either way, 1.05-1.06x both). `on_fma` is a constant of each
   caller (kernel_choices.h picks per CPU); the bits are the same. */
FQ_INLINE fqv forward_mul_v(fqv x, const fq_vgrid *q, const int on_fma) {
    const fqv clamped = fqv_clamp(x, q->nudged_min, q->nudged_max);
    const fqv shifted = on_fma ? fqv_sub_on_fma(clamped, q->nudged_min) : fqv_sub(clamped, q->nudged_min);
    const fqv scaled = fqv_mul(shifted, q->inv_scale);
    const fqv centred = on_fma ? fqv_sub_on_fma(scaled, q->quant_zero) : fqv_sub(scaled, q->quant_zero);
    return floor_scaled(fqv_add(centred, fqv_set1(0.5f)), q);
}

/* The forward of `op` (a constant of each caller). */
enum { FQ_FORWARD_DIV, FQ_FORWARD_MUL_ON_FMA, FQ_FORWARD_MUL_ON_ADDS };
FQ_INLINE fqv forward_v(fqv x, const fq_vgrid *q, const int op) {
    return op == FQ_FORWARD_DIV ? forward_div_v(x, q) : forward_mul_v(x, q, op == FQ_FORWARD_MUL_ON_FMA);
}

/* Every per-tensor forward; `op` is a constant in each caller, which gets a loop of its own.
   Four vectors a step, all loaded before any is stored (AVX-512, 64K elements: 8.0 -> 7.1 us; one
   at a time 7.7): more independent chains in flight. The next step's vectors are loaded before
   this step's stores: when out sits a few bytes past x modulo 4 KiB (consecutive heap arrays do),
   loads issued after those stores wait on them as if they overlapped (out 144 bytes past x: 6.8
   -> 5.6 us). */
/* Elements before the first of `out` that starts a vector-aligned address (0 when it is aligned,
   odd, or the call short): a store split across two cache lines costs two L1 accesses, and numpy
   puts large arrays 16 or 32 bytes past a line, so an elementwise walk stores one partial vector
   first and the rest aligned (AVX-512 Args forward, 64K in L2, out 32 bytes past a line: 8.7-9.4
   -> 7.6-8.1 us, Intel Xeon; AVX2 unchanged). */
FQ_INLINE size_t head_to_align(const float *out, size_t n) {
    const size_t misaligned = (uintptr_t)out % (FQ_W * sizeof(float));
    if (misaligned == 0 || misaligned % sizeof(float) != 0 || n < 8 * FQ_W) return 0;
    return FQ_W - misaligned / sizeof(float);
}

FQ_INLINE void forward_loop(const float *x, float *out, size_t n, const fq_grid *grid, const int op) {
    const fq_vgrid q = broadcast(grid);
    const size_t head = head_to_align(out, n);
    if (head > 0) {
        fqv_store_lanes(out, 0, head, forward_v(fqv_load_lanes(x, 0, head), &q, op));
        x += head;
        out += head;
        n -= head;
    }
    size_t i = 0;
    if (n >= 4 * FQ_W) {
        fqv v[4];
        for (int k = 0; k < 4; ++k) v[k] = fqv_load(x + FQ_W * k);
        for (;; i += 4 * FQ_W) {
            const int last = i + 8 * FQ_W > n;
            fqv next[4];
            if (!last)
                for (int k = 0; k < 4; ++k) next[k] = fqv_load(x + i + FQ_W * (4 + k));
            for (int k = 0; k < 4; ++k) fqv_store(out + i + FQ_W * k, forward_v(v[k], &q, op));
            if (last) break;
            for (int k = 0; k < 4; ++k) v[k] = next[k];
        }
        i += 4 * FQ_W;
    }
    for (; i + FQ_W <= n; i += FQ_W) fqv_store(out + i, forward_v(fqv_load(x + i), &q, op));
    if (i < n) fqv_store_lanes(out + i, 0, n - i, forward_v(fqv_load_lanes(x + i, 0, n - i), &q, op));
}

static void FQ_NAME(forward_mul)(const float *x, float *out, size_t n, const fq_grid *grid) {
    forward_loop(x, out, n, grid, FQ_FORWARD_MUL_ON_FMA);
}

static void FQ_NAME(forward_mul_on_adds)(const float *x, float *out, size_t n, const fq_grid *grid) {
    forward_loop(x, out, n, grid, FQ_FORWARD_MUL_ON_ADDS);
}

static void FQ_NAME(forward_div)(const float *x, float *out, size_t n, const fq_grid *grid) {
    forward_loop(x, out, n, grid, FQ_FORWARD_DIV);
}

/* ---- Per-tensor gradient ---- */

FQ_INLINE fqv_mask between(fqv x, fqv nudged_min, fqv nudged_max) {
    return fqv_and(fqv_ge(x, nudged_min), fqv_le(x, nudged_max));
}

FQ_INLINE fqv masked_v(fqv g, fqv x, fqv nudged_min, fqv nudged_max) {
    return fqv_mul(g, fqv_as_one(between(x, nudged_min, nudged_max)));
}

static void FQ_NAME(mask)(const float *g, const float *x, float *dx, size_t n, const fq_grid *grid) {
    const fqv nmin = fqv_set1(grid->nudged_min), nmax = fqv_set1(grid->nudged_max);
    const size_t head = head_to_align(dx, n);
    if (head > 0) {
        fqv_store_lanes(dx, 0, head, masked_v(fqv_load_lanes(g, 0, head), fqv_load_lanes(x, 0, head), nmin, nmax));
        g += head;
        x += head;
        dx += head;
        n -= head;
    }
    size_t i = 0;
    for (; i + 4 * FQ_W <= n; i += 4 * FQ_W) {
        fqv gv[4], xv[4];
        for (int k = 0; k < 4; ++k) {
            gv[k] = fqv_load(g + i + FQ_W * k);
            xv[k] = fqv_load(x + i + FQ_W * k);
        }
        for (int k = 0; k < 4; ++k) fqv_store(dx + i + FQ_W * k, masked_v(gv[k], xv[k], nmin, nmax));
    }
    for (; i + FQ_W <= n; i += FQ_W)
        fqv_store(dx + i, masked_v(fqv_load(g + i), fqv_load(x + i), nmin, nmax));
    if (i < n)
        fqv_store_lanes(dx + i, 0, n - i,
                        masked_v(fqv_load_lanes(g + i, 0, n - i), fqv_load_lanes(x + i, 0, n - i), nmin, nmax));
}

/* Up to four vectors of a gradient, loaded before any dx is stored: dx may be g or x itself, and a
   load from the next row cannot wait on a store 4 KiB below it. Per-tensor walks broadcast one
   grid to every vector. */
typedef struct {
    fqv g[4], x[4], nmin[4], nmax[4];
    float *dx[4];
} fq_group;

FQ_INLINE void group_load(fq_group *v, int k, const float *g, const float *x, float *dx, fqv nmin,
                          fqv nmax) {
    v->g[k] = fqv_load(g);
    v->x[k] = fqv_load(x);
    v->nmin[k] = nmin;
    v->nmax[k] = nmax;
    v->dx[k] = dx;
}

/* group_load with the grids of FQ_W positions read from the table at `grid` (where the first
   position's nudged_min is stored). */
FQ_INLINE void group_load_grid(fq_group *v, int k, const float *g, const float *x, float *dx,
                               const float *grid) {
    group_load(v, k, g, x, dx, fqv_load(grid + FQ_GRID_CHUNK * FQ_GRID_NUDGED_MIN),
               fqv_load(grid + FQ_GRID_CHUNK * FQ_GRID_NUDGED_MAX));
}

/* Stores dx of vector k of a group; returns dx - g, whose lanes are +-0 only where both of the
   vector's products are +-0 and may be skipped: where x is inside and g finite (dx = g), or g is
   +-0. Elsewhere it is -g (x outside, or NaN, and g finite: a NaN x makes the lane loud though its
   products are +-0, which costs their adds alone) or NaN (g infinite or NaN). Two operations, and
   the group's changes ORed into one compare, where testing x inside and g finite took three a
   vector on AVX2 and NEON (magnitude, compare, and-not) and an and a vector for the group. Intel
   Xeon (Sapphire Rapids class), one thread, compare.py, three runs alternating with that test:
   AVX2 Vars gradient at 64K 1.35-1.38x -> 1.28-1.31x np.add; at [3, 3, 64, 128] with 4.6%
   clipped, per tensor 15.6-15.8 -> 14.3-14.7 us, per channel 17.5-17.9 -> 16.3-16.5. AVX-512
   tested finite in one operation (fpclass), and there the per-tensor gradient with 4.6% clipped
   went 12.6-13.0 -> 11.9-12.4 us (four runs of --sections layout), the rest unchanged (per channel
   13.2-13.6 -> 13.4-13.8, 64K rows 1.13-1.15x). */
FQ_INLINE fqv vector_dx_change(const fq_group *v, int k) {
    const fqv dx = fqv_mul(v->g[k], fqv_as_one(between(v->x[k], v->nmin[k], v->nmax[k])));
    fqv_store(v->dx[k], dx);
    return fqv_sub(dx, v->g[k]);
}

/* Whether every lane of a vector_dx_change (or of several ORed) is +-0: quiet. */
FQ_INLINE int all_quiet(fqv change) { return fqv_all(fqv_eq(change, fqv_zero())); }

/* Stores dx of the group's `count` vectors and each one's vector_dx_change in change[k]; returns
   whether all of them are quiet, when every product of both sums is +-0 and may be skipped (the
   sums start at +0, so adding +-0 never changes them). The changes' bits are ORed first, which is
   +-0 only where every one is: one compare and one branch a group. */
FQ_INLINE int group_dx_quiet(const fq_group *v, int count, fqv change[4]) {
    fqv all = change[0] = vector_dx_change(v, 0);
    for (int k = 1; k < count; ++k) all = fqv_or_bits(all, change[k] = vector_dx_change(v, k));
    return all_quiet(all);
}

/* The exact products of vector k with each side: g * (x < nmin) and g * (x > nmax) (a NaN or
   infinite g makes NaN even where x is inside, as TF's multiply by the 0/1 mask does). */
FQ_INLINE fqv below_product(const fq_group *v, int k) {
    return fqv_mul(v->g[k], fqv_as_one(fqv_lt(v->x[k], v->nmin[k])));
}
FQ_INLINE fqv above_product(const fq_group *v, int k) {
    return fqv_mul(v->g[k], fqv_as_one(fqv_gt(v->x[k], v->nmax[k])));
}

/* Adds float32 runs of FQ_W lanes into their float64 lanes (two fqv_d each). */
FQ_INLINE void add_runs(const fqv run[FQ_LANE_VECTORS], fqv_d lanes[2 * FQ_LANE_VECTORS]) {
    for (int r = 0; r < FQ_LANE_VECTORS; ++r) {
        lanes[2 * r] = fqv_add_d(lanes[2 * r], fqv_low_d(run[r]));
        lanes[2 * r + 1] = fqv_add_d(lanes[2 * r + 1], fqv_high_d(run[r]));
    }
}

FQ_INLINE void zero_runs(fqv run_min[FQ_LANE_VECTORS], fqv run_max[FQ_LANE_VECTORS]) {
    for (int r = 0; r < FQ_LANE_VECTORS; ++r) run_min[r] = run_max[r] = fqv_zero();
}

/* fq_kernels.h fixes the sums' order: element i of a run goes to lane i % 16, so vector k of a run
   holds lanes (k % FQ_LANE_VECTORS) * FQ_W onwards. Runs whose groups are all quiet are skipped. */
static void FQ_NAME(mask_sums)(const float *g, const float *x, float *dx, size_t n,
                               const fq_grid *grid, double lanes_min[FQ_SUM_LANES],
                               double lanes_max[FQ_SUM_LANES]) {
    enum { RUN_VECTORS = FQ_SUM_RUN_ELEMENTS / FQ_W };
    const fqv nmin = fqv_set1(grid->nudged_min), nmax = fqv_set1(grid->nudged_max);
    fqv_d acc_min[2 * FQ_LANE_VECTORS], acc_max[2 * FQ_LANE_VECTORS];
    for (int j = 0; j < 2 * FQ_LANE_VECTORS; ++j) {
        acc_min[j] = fqv_load_d(lanes_min + FQ_W / 2 * j);
        acc_max[j] = fqv_load_d(lanes_max + FQ_W / 2 * j);
    }
    fqv run_min[FQ_LANE_VECTORS], run_max[FQ_LANE_VECTORS];
    size_t i = 0;
    for (; i + FQ_SUM_RUN_ELEMENTS <= n; i += FQ_SUM_RUN_ELEMENTS) {
        int touched = 0;
        for (int j = 0; j < RUN_VECTORS; j += FQ_GRAD_GROUP) {
            fq_group v;
            for (int k = 0; k < FQ_GRAD_GROUP; ++k) {
                const size_t at = i + FQ_W * (size_t)(j + k);
                group_load(&v, k, g + at, x + at, dx + at, nmin, nmax);
            }
            fqv change[4];
            if (group_dx_quiet(&v, FQ_GRAD_GROUP, change)) continue;
            if (!touched) zero_runs(run_min, run_max);
            touched = 1;
            for (int k = 0; k < FQ_GRAD_GROUP; ++k) {
                const int r = (j + k) % FQ_LANE_VECTORS;
                run_min[r] = fqv_add(run_min[r], below_product(&v, k));
                run_max[r] = fqv_add(run_max[r], above_product(&v, k));
            }
        }
        if (touched) {
            add_runs(run_min, acc_min);
            add_runs(run_max, acc_max);
        }
    }
    /* The last, partial run: every product, its last vector partial (the lanes past n load as
       g = x = 0, whose products are +0). */
    if (i < n) {
        zero_runs(run_min, run_max);
        for (int k = 0; i < n; i += FQ_W, ++k) {
            const size_t lanes = n - i < FQ_W ? n - i : FQ_W;
            fq_group v = {{fqv_load_lanes(g + i, 0, lanes)}, {fqv_load_lanes(x + i, 0, lanes)}, {nmin}, {nmax}, {NULL}};
            fqv_store_lanes(dx + i, 0, lanes, masked_v(v.g[0], v.x[0], nmin, nmax));
            const int r = k % FQ_LANE_VECTORS;
            run_min[r] = fqv_add(run_min[r], below_product(&v, 0));
            run_max[r] = fqv_add(run_max[r], above_product(&v, 0));
        }
        add_runs(run_min, acc_min);
        add_runs(run_max, acc_max);
    }
    for (int j = 0; j < 2 * FQ_LANE_VECTORS; ++j) {
        fqv_store_d(lanes_min + FQ_W / 2 * j, acc_min[j]);
        fqv_store_d(lanes_max + FQ_W / 2 * j, acc_max[j]);
    }
}

/* ---- Per-channel forward (fq_channel_walk.h says how a call's rows are walked) ---- */

/* One vector of the per-channel forward: TF's clamp of x to [nmin, nmax], or, where the table
   allows it (fq_grid_table.scaled_clamp_max), the clamp after scaling, which leaves nudged_max
   unused: the compiler drops its load, one of five grid loads a vector (AVX-512, [1024, 1024]:
   1.27x -> 1.24x per-tensor). With both its subtraction and its addition on the FMAs its
   operations split four and four ([512, 128]: 7.8 -> 6.4 us). `scaled_clamp` is a constant in each
   caller, which gets a loop of its own. */
FQ_INLINE fqv channel_forward_v(fqv x, const fq_vgrid *q, int scaled_clamp, fqv clamp_max) {
    if (!scaled_clamp) return forward_mul_v(x, q, 1);
    const fqv scaled = fqv_clamp(fqv_mul(fqv_sub(x, q->nudged_min), q->inv_scale), fqv_zero(), clamp_max);
    return floor_scaled(fqv_add_on_fma(fqv_sub_on_fma(scaled, q->quant_zero), fqv_set1(0.5f)), q);
}

/* n elements (whole chunks) from the start of a period, as one loop whose grid pointer wraps with
   the period: four vectors a step, loaded before any grid load or store. */
FQ_INLINE void forward_flat(const float *x, float *out, size_t n, const fq_grid_table *grids,
                            int scaled_clamp) {
    const float *chunk = grids->grid, *const end = grids->grid + fq_grid_offset(grids->period, 0);
    const fqv clamp_max = fqv_set1(grids->scaled_clamp_max);
    size_t i = 0;
    for (; i + 4 * FQ_W <= n; i += 4 * FQ_W) {
        fqv v[4];
        for (int k = 0; k < 4; ++k) v[k] = fqv_load(x + i + FQ_W * k);
        for (int k = 0; k < 4; ++k) {
            const fq_vgrid q = grid_at(chunk + (k % FQ_CHUNK_VECTORS) * FQ_W);
            fqv_store(out + i + FQ_W * k, channel_forward_v(v[k], &q, scaled_clamp, clamp_max));
            if (k % FQ_CHUNK_VECTORS == FQ_CHUNK_VECTORS - 1) {
                chunk += FQ_CHUNK_FLOATS;
                chunk = chunk == end ? grids->grid : chunk;
            }
        }
    }
    for (; i < n; i += FQ_GRID_CHUNK) {
        for (int k = 0; k < FQ_CHUNK_VECTORS; ++k) {
            const fq_vgrid q = grid_at(chunk + k * FQ_W);
            const size_t at = i + FQ_W * (size_t)k;
            fqv_store(out + at, channel_forward_v(fqv_load(x + at), &q, scaled_clamp, clamp_max));
        }
        chunk += FQ_CHUNK_FLOATS;
        chunk = chunk == end ? grids->grid : chunk;
    }
}

/* `rows` rows, positions [p0, p1), `vectors` vectors of each row a step, each grid load serving
   every row (fq_channel_walk.h says which walk takes how many). The rows' next vectors are loaded
   before this step's stores: the rows are a period apart, so when out sits a few bytes past x
   modulo 4 KiB (heap arrays often do), a load issued after those stores would wait on them as if
   it overlapped ([1024, 1024], out 32 bytes past x: 1.58x -> 1.35x per-tensor on Zen 4). */
FQ_INLINE void forward_rows(const float *x, float *out, const fq_grid_table *grids, size_t p0,
                            size_t p1, int scaled_clamp, const int rows, const int vectors) {
    const size_t period = grids->period, step = (size_t)FQ_W * vectors;
    const fqv clamp_max = fqv_set1(grids->scaled_clamp_max);
    size_t p = p0;
    if (p + step <= p1) {
        fqv v[FQ_ROWS_PER_GRID][FQ_ONE_ROW_VECTORS];
        for (int r = 0; r < rows; ++r)
            for (int j = 0; j < vectors; ++j) v[r][j] = fqv_load(x + r * period + p + FQ_W * j);
        for (;; p += step) {
            const int last = p + 2 * step > p1;
            fqv next[FQ_ROWS_PER_GRID][FQ_ONE_ROW_VECTORS];
            if (!last)
                for (int r = 0; r < rows; ++r)
                    for (int j = 0; j < vectors; ++j)
                        next[r][j] = fqv_load(x + r * period + p + step + FQ_W * j);
            for (int j = 0; j < vectors; ++j) {
                const fq_vgrid q = grid_at(fq_grid_param(grids, p + FQ_W * j, FQ_GRID_NUDGED_MIN));
                for (int r = 0; r < rows; ++r)
                    fqv_store(out + r * period + p + FQ_W * j,
                              channel_forward_v(v[r][j], &q, scaled_clamp, clamp_max));
            }
            if (last) break;
            for (int r = 0; r < rows; ++r)
                for (int j = 0; j < vectors; ++j) v[r][j] = next[r][j];
        }
        p += step;
    }
    for (; p + FQ_W <= p1; p += FQ_W) {
        const fq_vgrid q = grid_at(fq_grid_param(grids, p, FQ_GRID_NUDGED_MIN));
        for (int r = 0; r < rows; ++r)
            fqv_store(out + r * period + p, channel_forward_v(fqv_load(x + r * period + p), &q, scaled_clamp, clamp_max));
    }
    for (int r = 0; r < rows; ++r) fq_channel_forward_row(x + r * period, out + r * period, grids, p, p1);
}

FQ_INLINE void channel_forward_walk(const float *x, float *out, size_t rows,
                                    const fq_grid_table *grids, size_t p0, size_t p1,
                                    int scaled_clamp) {
    const size_t period = grids->period;
    if (fq_channel_forward_is_flat(rows, period, p0, p1, grids->row_walk == FQ_SHORT_ROWS_FLAT)) {
        forward_flat(x, out, rows * period, grids, scaled_clamp);
        return;
    }
    size_t r = 0;
    if (grids->row_walk == FQ_ONE_ROW_PAST_L2 && fq_channel_forward_is_past_l2(rows, p0, p1)) {
        for (; r < rows; ++r)
            forward_rows(x + r * period, out + r * period, grids, p0, p1, scaled_clamp, 1, FQ_ONE_ROW_VECTORS);
        return;
    }
    if ((grids->row_walk == FQ_ROWS_SHARE_GRID_PAIRS_AT_4K || grids->row_walk == FQ_SHORT_ROWS_FLAT) &&
        period * sizeof(float) == 4096)
        for (; r + FQ_PAIR_ROWS <= rows; r += FQ_PAIR_ROWS)
            forward_rows(x + r * period, out + r * period, grids, p0, p1, scaled_clamp, FQ_PAIR_ROWS, FQ_PAIR_VECTORS);
    for (; r + FQ_ROWS_PER_GRID <= rows; r += FQ_ROWS_PER_GRID)
        forward_rows(x + r * period, out + r * period, grids, p0, p1, scaled_clamp, FQ_ROWS_PER_GRID, 1);
    for (; r < rows; ++r) forward_rows(x + r * period, out + r * period, grids, p0, p1, scaled_clamp, 1, 1);
}

static void FQ_NAME(channel_forward)(const float *x, float *out, size_t rows,
                                     const fq_grid_table *t, size_t p0, size_t p1) {
    const fq_grid_table grids = *t; /* a local copy: stores to out cannot change it */
    if (grids.scaled_clamp_max > 0.0f)
        channel_forward_walk(x, out, rows, &grids, p0, p1, 1);
    else
        channel_forward_walk(x, out, rows, &grids, p0, p1, 0);
}

/* ---- Per-channel gradient ---- */

/* Adds FQ_W products into the float64 accumulators of FQ_W positions. */
FQ_INLINE void add_to_positions(fqv products, double *acc) {
    fqv_store_d(acc, fqv_add_d(fqv_load_d(acc), fqv_low_d(products)));
    fqv_store_d(acc + FQ_W / 2, fqv_add_d(fqv_load_d(acc + FQ_W / 2), fqv_high_d(products)));
}

/* dx of a group's `count` vectors, vector k at positions acc_min[k] / acc_max[k] of the
   accumulators; and unless the group is quiet, the products of all its vectors and sides, added
   there. A branch per vector and side (adding only those with a product but +-0) is mispredicted
   where a few percent of x are clipped, and since quiet groups are skipped it no longer paid where
   few are: AMD Zen 5 (EPYC, family 26), AVX-512, per-channel / per-tensor gradient with 4.6%
   clipped, [1024, 1024] 2.77 -> 1.32 and [8192, 128] 2.59 -> 1.28, at 0.27% 1.04-1.07 -> 1.05-1.22;
   Intel Xeon, AVX2, [8192, 128] with 4.6% clipped: 1034 -> 703 us. With `every` (a constant of each
   walk: adds_every_group) the products of quiet groups are added too, with no branch.
   With `skip_vectors` (fq_grid_table.grad_skips_quiet_vectors, the same for a whole call) a group
   that is not quiet adds its loud vectors alone, a branch a vector: where the data is in L2 the
   adds of the others cost more than the branches' mispredictions, with few or many clipped. Intel
   Xeon (Sapphire Rapids class), one thread, alternating with the walks before, per-channel
   gradient, us: AVX-512 [512, 128] with 0.27% clipped 8.1-8.9 -> 7.7-7.8 (compare.py, against
   np.add: 1.30-1.32x -> 1.19-1.24x), [3, 3, 64, 128] with 4.6% clipped 17.9 -> 12.8, [2000, 48]
   23.1 -> 16.3, [600, 256] 42.1 -> 30.8; AVX2 [3, 3, 64, 128] 18.9 -> 17.0, [2000, 48] 24.1 ->
   19.7. Past L2 the AVX2 path lost ([2048, 128] with 4.5% clipped 124 -> 172 us, [4096, 128] 280
   -> 403), so those calls keep skipping whole groups only. */
FQ_INLINE void grad_group(const fq_group *v, int count, double *const acc_min[4], double *const acc_max[4],
                          const int every, int skip_vectors) {
    fqv change[4];
    if (group_dx_quiet(v, count, change) && !every) return;
    for (int k = 0; k < count; ++k) {
        if (skip_vectors && !every && all_quiet(change[k])) continue;
        add_to_positions(below_product(v, k), acc_min[k]);
        add_to_positions(above_product(v, k), acc_max[k]);
    }
}

/* n elements (whole vectors) from the start of a period of `vectors` (1 to FQ_GRID_REG_VECTORS)
   vectors, as one loop whose grids stay in registers (no grid load per vector, as in the
   per-tensor loop). Groups step through units of lcm(vectors, FQ_GRAD_GROUP) vectors, so that
   each vector's position is a constant of the unrolled unit. */
FQ_INLINE void grad_in_registers(const float *g, const float *x, float *dx, size_t n,
                                 const fq_grid_table *t, double *acc_min, double *acc_max,
                                 const int vectors, const int every) {
    fqv nmin[FQ_GRID_REG_VECTORS], nmax[FQ_GRID_REG_VECTORS];
    for (int j = 0; j < vectors; ++j) {
        nmin[j] = fqv_load(fq_grid_param(t, FQ_W * (size_t)j, FQ_GRID_NUDGED_MIN));
        nmax[j] = fqv_load(fq_grid_param(t, FQ_W * (size_t)j, FQ_GRID_NUDGED_MAX));
    }
    const int unit = vectors % FQ_GRAD_GROUP == 0 ? vectors
                     : (vectors * 2) % FQ_GRAD_GROUP == 0 ? 2 * vectors
                                                         : FQ_GRAD_GROUP * vectors;
    size_t i = 0;
    for (; i + FQ_W * (size_t)unit <= n; i += FQ_W * (size_t)unit)
#pragma GCC unroll 8 /* whole units: each vector's grid is then a register, not an indexed load */
        for (int j = 0; j < unit; j += FQ_GRAD_GROUP) {
            fq_group v;
            double *am[4], *ax[4];
            for (int k = 0; k < FQ_GRAD_GROUP; ++k) {
                const size_t at = i + FQ_W * (size_t)(j + k), p = FQ_W * (size_t)((j + k) % vectors);
                group_load(&v, k, g + at, x + at, dx + at, nmin[(j + k) % vectors], nmax[(j + k) % vectors]);
                am[k] = acc_min + p;
                ax[k] = acc_max + p;
            }
            grad_group(&v, FQ_GRAD_GROUP, am, ax, every, t->grad_skips_quiet_vectors);
        }
    /* The last rows, fewer than a unit: one vector at a time (a unit starts at position 0). */
    for (int j = 0; i < n; i += FQ_W, ++j) {
        const size_t p = FQ_W * (size_t)(j % vectors);
        fq_group v;
        group_load(&v, 0, g + i, x + i, dx + i, nmin[j % vectors], nmax[j % vectors]);
        double *am[4] = {acc_min + p}, *ax[4] = {acc_max + p};
        grad_group(&v, 1, am, ax, every, t->grad_skips_quiet_vectors);
    }
}

/* grad_in_registers for a period of FQ_W to FQ_W * FQ_GRID_REG_VECTORS positions (whole vectors). */
FQ_INLINE void grad_registers_by_period(const float *g, const float *x, float *dx, size_t n,
                                        const fq_grid_table *t, double *acc_min, double *acc_max,
                                        const int every) {
    switch (t->period / FQ_W) {
    case 1: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 1, every); return;
    case 2: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 2, every); return;
    case 3: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 3, every); return;
#if FQ_GRID_REG_VECTORS == 8
    case 4: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 4, every); return;
    case 5: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 5, every); return;
    case 6: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 6, every); return;
    case 7: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, 7, every); return;
#endif
    default: grad_in_registers(g, x, dx, n, t, acc_min, acc_max, FQ_GRID_REG_VECTORS, every); return;
    }
}

FQ_INLINE int in_registers(size_t period) {
    return period % FQ_W == 0 && period <= (size_t)FQ_W * FQ_GRID_REG_VECTORS;
}

/* One row, positions [p0, p1) (p0 a multiple of 16): a group of vectors at a time, their grids
   read from the chunks that follow one pointer; then one vector at a time; then element by
   element. */
FQ_INLINE void grad_row(const float *g, const float *x, float *dx, const fq_grid_table *t, size_t p0,
                        size_t p1, double *acc_min, double *acc_max, const int every) {
    const float *chunk = fq_grid_param(t, p0, FQ_GRID_NUDGED_MIN);
    size_t p = p0;
    for (; p + FQ_GRAD_GROUP * FQ_W <= p1;
         p += FQ_GRAD_GROUP * FQ_W, chunk += FQ_GRAD_GROUP / FQ_CHUNK_VECTORS * FQ_CHUNK_FLOATS) {
        fq_group v;
        double *am[4], *ax[4];
        for (int k = 0; k < FQ_GRAD_GROUP; ++k) {
            const size_t at = p + FQ_W * (size_t)k;
            const float *grid = chunk + vector_grid_offset(k);
            group_load_grid(&v, k, g + at, x + at, dx + at, grid);
            am[k] = acc_min + at;
            ax[k] = acc_max + at;
        }
        grad_group(&v, FQ_GRAD_GROUP, am, ax, every, t->grad_skips_quiet_vectors);
    }
    for (; p + FQ_W <= p1; p += FQ_W) {
        fq_group v;
        group_load_grid(&v, 0, g + p, x + p, dx + p, fq_grid_param(t, p, FQ_GRID_NUDGED_MIN));
        double *am[4] = {acc_min + p}, *ax[4] = {acc_max + p};
        grad_group(&v, 1, am, ax, every, t->grad_skips_quiet_vectors);
    }
    fq_channel_row(g, x, dx, t, p, p1, acc_min, acc_max);
}

/* Adds the products of two rows at FQ_W positions into their float64 accumulators, the first
   row's first: the sums of two grad_group calls, with one read and one write of the accumulators. */
FQ_INLINE void add_rows_to_positions(fqv first, fqv second, double *acc) {
    fqv_d low = fqv_add_d(fqv_load_d(acc), fqv_low_d(first));
    fqv_d high = fqv_add_d(fqv_load_d(acc + FQ_W / 2), fqv_high_d(first));
    fqv_store_d(acc, fqv_add_d(low, fqv_low_d(second)));
    fqv_store_d(acc + FQ_W / 2, fqv_add_d(high, fqv_high_d(second)));
}

/* `vectors` vectors of each of two rows a period apart, from position p: their grids loaded once
   for both rows; unless the group is quiet, each position's two products added in one read and
   one write of its accumulators. */
FQ_INLINE void grad_pair_step(const float *g, const float *x, float *dx, size_t period,
                              const fq_grid_table *t, size_t p, double *acc_min, double *acc_max,
                              const int vectors) {
    fq_group v;
    for (int j = 0; j < vectors; ++j) {
        const float *grid = fq_grid_param(t, p + FQ_W * (size_t)j, FQ_GRID_NUDGED_MIN);
        const fqv nmin = fqv_load(grid), nmax = fqv_load(grid + FQ_GRID_CHUNK);
        for (int r = 0; r < 2; ++r) {
            const size_t at = (size_t)r * period + p + FQ_W * (size_t)j;
            group_load(&v, r * vectors + j, g + at, x + at, dx + at, nmin, nmax);
        }
    }
    fqv change[4];
    if (group_dx_quiet(&v, 2 * vectors, change)) return;
    for (int j = 0; j < vectors; ++j) {
        const size_t at = p + FQ_W * (size_t)j;
        add_rows_to_positions(below_product(&v, j), below_product(&v, vectors + j), acc_min + at);
        add_rows_to_positions(above_product(&v, j), above_product(&v, vectors + j), acc_max + at);
    }
}

/* Two rows a period apart, positions [p0, p1): each position meets the first row, then the
   second, as row by row. Rows longer than FQ_SHORT_PERIOD go in pairs (channel_mask_sums and the
   aligned walk): a period's accumulators and grids (24 KiB at 1024 positions, 96 KiB at 4096) do
   not stay in L1 beside the data, and a pair reads and writes them half as often. Zen 4 (EPYC,
   family 25), one thread, per-channel / per-tensor gradient, three runs alternating with the
   row-by-row walk: AVX-512, [256, 4096] 1.61-1.89x -> 1.42-1.45x, with 4.6% of x clipped
   2.03-2.84x -> 1.47-1.64x; [1024, 1024] clipped 1.76-2.75x -> 1.60-1.76x, at 0.27% 1.37-1.56x ->
   1.24-1.38x. AVX2 clipped: [1024, 1024] 2.52-2.65x -> 1.68-1.97x, [256, 4096] 2.27-2.50x ->
   1.69-1.91x (one vector a row, half of AVX2's group, gained nothing). Short rows keep their walks:
   a loop over a pair of short rows ends in a mispredicted branch every few vectors. */
static void grad_row_pair(const float *g, const float *x, float *dx, size_t period,
                          const fq_grid_table *t, size_t p0, size_t p1, double *acc_min,
                          double *acc_max) {
    enum { PAIR_VECTORS = 2 };
    size_t p = p0;
    for (; p + PAIR_VECTORS * FQ_W <= p1; p += PAIR_VECTORS * FQ_W)
        grad_pair_step(g, x, dx, period, t, p, acc_min, acc_max, PAIR_VECTORS);
    for (; p + FQ_W <= p1; p += FQ_W) grad_pair_step(g, x, dx, period, t, p, acc_min, acc_max, 1);
    fq_channel_row(g, x, dx, t, p, p1, acc_min, acc_max);
    fq_channel_row(g + period, x + period, dx + period, t, p, p1, acc_min, acc_max);
}

/* Whether the walks take rows of `period` in pairs (grad_row_pair says why). */
FQ_INLINE int rows_in_pairs(size_t period) { return period > FQ_SHORT_PERIOD; }

/* Rows a strip takes a step (grad_strip). */
#define FQ_STRIP_ROWS 4

/* `rows` rows (a constant) of a strip of `vectors` vectors (a constant) at position p of each row:
   row by row, each row's vectors in groups, the grids in registers. */
FQ_INLINE void strip_rows(const float *g, const float *x, float *dx, size_t period, size_t p,
                          const fqv nmin[FQ_GRID_REG_VECTORS], const fqv nmax[FQ_GRID_REG_VECTORS],
                          double *const acc_min[FQ_GRID_REG_VECTORS],
                          double *const acc_max[FQ_GRID_REG_VECTORS], const int vectors,
                          const int rows, int skip_vectors) {
    for (int r = 0; r < rows; ++r)
        for (int j = 0; j < vectors; j += FQ_GRAD_GROUP) {
            const int count = vectors - j < FQ_GRAD_GROUP ? vectors - j : FQ_GRAD_GROUP;
            fq_group v;
            for (int k = 0; k < count; ++k) {
                const size_t at = (size_t)r * period + p + FQ_W * (size_t)(j + k);
                group_load(&v, k, g + at, x + at, dx + at, nmin[j + k], nmax[j + k]);
            }
            grad_group(&v, count, acc_min + j, acc_max + j, 0, skip_vectors);
        }
}

/* Positions [p, p + vectors * FQ_W) of every row, a strip: its grids loaded into registers once,
   then down the rows, FQ_STRIP_ROWS at a time. */
FQ_INLINE void grad_strip(const float *g, const float *x, float *dx, size_t rows, size_t period,
                          const fq_grid_table *t, size_t p, double *acc_min, double *acc_max,
                          const int vectors) {
    fqv nmin[FQ_GRID_REG_VECTORS], nmax[FQ_GRID_REG_VECTORS];
    double *am[FQ_GRID_REG_VECTORS], *ax[FQ_GRID_REG_VECTORS];
    for (int j = 0; j < vectors; ++j) {
        const size_t position = p + FQ_W * (size_t)j;
        nmin[j] = fqv_load(fq_grid_param(t, position, FQ_GRID_NUDGED_MIN));
        nmax[j] = fqv_load(fq_grid_param(t, position, FQ_GRID_NUDGED_MAX));
        am[j] = acc_min + position;
        ax[j] = acc_max + position;
    }
    size_t r = 0;
    for (; r + FQ_STRIP_ROWS <= rows; r += FQ_STRIP_ROWS) {
        const size_t at = r * period;
        strip_rows(g + at, x + at, dx + at, period, p, nmin, nmax, am, ax, vectors, FQ_STRIP_ROWS,
                   t->grad_skips_quiet_vectors);
    }
    for (; r < rows; ++r) {
        const size_t at = r * period;
        strip_rows(g + at, x + at, dx + at, period, p, nmin, nmax, am, ax, vectors, 1,
                   t->grad_skips_quiet_vectors);
    }
}

/* Positions [p0, p1) of `rows` rows strip by strip, each strip as many whole vectors as keep their
   grids in registers (the last strip fewer), then the last positions of each row that make no
   whole vector. Each position still meets its rows in order, so the sums are those of the walks
   row by row; what changes is that no vector loads its grids. Where the grids take two loads for
   every vector of g and x (AVX2, whose periods past 32 positions do not fit its registers) the
   loads cost more than walking each strip down the rows: Intel Xeon (Sapphire Rapids class),
   AVX2, one thread, x ~ N(0, 2) against [-6, 6], alternating with grad_row: [512, 128] 15.2 ->
   13.9 us, [3, 3, 64, 128] 17.5 -> 15.5, [1024, 128] 43.7 -> 39.9, [256, 256] 15.7 -> 14.2,
   [2000, 48] 23.9 -> 19.3; per-channel / per-tensor at [3, 3, 64, 128] 1.37-1.40 -> 1.16-1.18 with
   four rows a step (1.23-1.25 with two, 1.31-1.34 with one). Past L2 the strided rows lose
   ([2048, 128] 137 -> 149 us, [4096, 128] 266 -> 351), and so does AVX-512 at a period of 256
   ([600, 256] 38 -> 47 us), whose periods up to 128 keep their grids in registers anyway. */
FQ_INLINE void grad_strips(const float *g, const float *x, float *dx, size_t rows, size_t period,
                           const fq_grid_table *t, size_t p0, size_t p1, double *acc_min,
                           double *acc_max) {
    size_t p = p0;
    for (; p + FQ_W * FQ_GRID_REG_VECTORS <= p1; p += FQ_W * FQ_GRID_REG_VECTORS)
        grad_strip(g, x, dx, rows, period, t, p, acc_min, acc_max, FQ_GRID_REG_VECTORS);
    const size_t last = (p1 - p) / FQ_W;
    switch (last) {
    case 1: grad_strip(g, x, dx, rows, period, t, p, acc_min, acc_max, 1); break;
    case 2: grad_strip(g, x, dx, rows, period, t, p, acc_min, acc_max, 2); break;
    case 3: grad_strip(g, x, dx, rows, period, t, p, acc_min, acc_max, 3); break;
#if FQ_GRID_REG_VECTORS == 8
    case 4: grad_strip(g, x, dx, rows, period, t, p, acc_min, acc_max, 4); break;
    case 5: grad_strip(g, x, dx, rows, period, t, p, acc_min, acc_max, 5); break;
    case 6: grad_strip(g, x, dx, rows, period, t, p, acc_min, acc_max, 6); break;
    case 7: grad_strip(g, x, dx, rows, period, t, p, acc_min, acc_max, 7); break;
#endif
    default: break;
    }
    p += last * FQ_W;
    if (p < p1)
        for (size_t r = 0; r < rows; ++r)
            fq_channel_row(g + r * period, x + r * period, dx + r * period, t, p, p1, acc_min, acc_max);
}

/* Whether a call over positions [p0, p1) walks in strips (grad_strips): where this CPU's ISA does
   (fq_grid_table.grad_strips), with the data in L2, and short rows (longer ones go in pairs,
   grad_row_pair) whose grids do not all fit the registers. */
FQ_INLINE int walks_strips(const fq_grid_table *t, fq_grad_place place, size_t p0, size_t p1) {
    return t->grad_strips && place == FQ_GRAD_IN_L2 && !rows_in_pairs(t->period) &&
           !(p0 == 0 && p1 == t->period && in_registers(t->period));
}

/* Elements the clip-share sample reads (clipped_share): a call's first rows up to this many. */
#define FQ_EVERY_SAMPLE ((size_t)4096)

/* The share of x outside its grid in the first rows of a call (at least FQ_EVERY_SAMPLE elements
   where there are as many). */
FQ_INLINE float clipped_share(const float *x, size_t rows, size_t period, const fq_grid_table *t,
                              size_t p0, size_t p1) {
    fqv outside = fqv_zero();
    size_t sampled = 0;
    for (size_t r = 0; r < rows && sampled < FQ_EVERY_SAMPLE; ++r)
        for (size_t p = p0; p + FQ_W <= p1; p += FQ_W, sampled += FQ_W) {
            const float *grid = fq_grid_param(t, p, FQ_GRID_NUDGED_MIN);
            const fqv v = fqv_load(x + r * period + p);
            outside = fqv_add(outside, fqv_as_one(fqv_or(fqv_lt(v, fqv_load(grid)),
                                                         fqv_gt(v, fqv_load(grid + FQ_GRID_CHUNK)))));
        }
    float lanes[FQ_W], clipped = 0.0f;
    fqv_store(lanes, outside);
    for (int k = 0; k < FQ_W; ++k) clipped += lanes[k];
    return clipped / (float)(sampled > 0 ? sampled : 1);
}

/* Whether a walk of data from memory adds the products of every group, quiet or not
   (grad_group), given `clipped`, the share of x outside its grid in the call's first rows
   (clipped_share), and the `period`. Skipping the quiet groups is a branch a group. Where about
   half of them hold a clipped element it goes either way at random, and in groups of 16 elements
   (AVX2, NEON) with the data coming from memory its mispredictions then cost more than the adds
   they save: Zen 4, AVX2, one thread, per-channel gradient [8192, 128] with
   4.6% of x clipped (0.74 clipped elements a group) 574-782 -> 336-464 us, alternating. Data in
   the caches lost ([3, 3, 64, 128] 22 -> 28-37 us, [4096, 128] 143 -> 167 us), and so did groups
   of 64 elements (AVX-512, and the row pairs of any ISA) with 0.9% to 1.6% clipped ([8192, 128]
   AVX-512 238-292 -> 294-296 us, [1024, 1024] 272-324 -> 396-449; AVX2 pairs 330-343 ->
   375-386), and groups of 16 with 13% clipped (2.1 a group: 435-479 -> 480-499), where few groups
   are quiet and the branch is mostly right. */
FQ_INLINE int adds_every_group(float clipped, size_t period) {
    if (FQ_GRAD_GROUP * FQ_W > 16 || rows_in_pairs(period)) return 0;
    const float per_group = clipped * (float)(FQ_GRAD_GROUP * FQ_W);
    return per_group >= 0.4f && per_group <= 1.2f;
}

/* The chunk after `chunk`, at position *p, wrapping to the period's start at `end`. */
FQ_INLINE void next_chunk(const fq_grid_table *t, const float *end, const float **chunk, size_t *p) {
    *chunk += FQ_CHUNK_FLOATS;
    *p += FQ_GRID_CHUNK;
    if (*chunk == end) {
        *chunk = t->grid;
        *p = 0;
    }
}

/* Vectors in a segment of the flagged walk: a bit each in one word. */
#define FQ_FLAG_VECTORS 64
/* Calls of at least this many elements may walk flagged: the sample that decides (clipped_share)
   is then at most a sixteenth of the call. */
#define FQ_FLAGGED_MIN_ELEMENTS ((size_t)16 * FQ_EVERY_SAMPLE)
/* Longer periods keep the row pairs, which read a period's grids (80 KiB at 4096 positions, past
   L1) once for two rows: flagged, [256, 4096] with 0.27% clipped took 262-325 us against 232-264
   (Zen 4, one thread, alternating). */
#define FQ_FLAGGED_MAX_PERIOD ((size_t)1024)

/* n elements (whole chunks) from the start of a period in two passes over each segment of
   FQ_FLAG_VECTORS vectors: the first stores dx and sets a bit for each vector that is not quiet,
   with no branch on the data; the second adds the products of those vectors alone, reading g and
   x again from L1, into their positions' accumulators, in memory order (each position still meets
   its rows in order). The other walks branch on groups of up to 64 elements, which where a few in
   a thousand elements are clipped goes either way often enough to cost more than the sums, and
   add every vector of a group that is not quiet. dx must not be g or x (the second pass reads
   them). */
FQ_INLINE void grad_flat_flagged(const float *g, const float *x, float *dx, size_t n,
                                 const fq_grid_table *t, double *acc_min, double *acc_max) {
    const size_t period = t->period;
    const float *chunk = t->grid, *const end = t->grid + fq_grid_offset(period, 0);
    size_t i = 0, p = 0; /* element i is at position p, the first of `chunk` */
    while (i < n) {
        const size_t first = i, first_p = p;
        const size_t chunks = (n - i) / FQ_GRID_CHUNK < FQ_FLAG_VECTORS / FQ_CHUNK_VECTORS
                                  ? (n - i) / FQ_GRID_CHUNK
                                  : FQ_FLAG_VECTORS / FQ_CHUNK_VECTORS;
        uint64_t loud = 0;
        /* Four vectors a step (whole chunks: a chunk holds 1, 2 or 4), all loaded before any dx is
           stored (as grad_group's callers). */
        enum { STEP = 4, STEP_CHUNKS = STEP / FQ_CHUNK_VECTORS };
        size_t c = 0;
        for (; c + STEP_CHUNKS <= chunks; c += STEP_CHUNKS) {
            fq_group v;
            const float *grids[STEP];
            const float *step_chunk = chunk;
            size_t step_p = p;
            for (int k = 0; k < STEP; ++k) {
                grids[k] = step_chunk + (k % FQ_CHUNK_VECTORS) * FQ_W;
                if (k % FQ_CHUNK_VECTORS == FQ_CHUNK_VECTORS - 1) next_chunk(t, end, &step_chunk, &step_p);
            }
            for (int k = 0; k < STEP; ++k) {
                const size_t at = i + FQ_W * (size_t)k;
                group_load_grid(&v, k, g + at, x + at, dx + at, grids[k]);
            }
            uint64_t bits = 0;
            for (int k = 0; k < STEP; ++k) bits |= (uint64_t)!all_quiet(vector_dx_change(&v, k)) << k;
            loud |= bits << (c * FQ_CHUNK_VECTORS);
            i += STEP * FQ_W;
            chunk = step_chunk;
            p = step_p;
        }
        for (; c < chunks; ++c) {
            for (int k = 0; k < FQ_CHUNK_VECTORS; ++k) {
                const size_t at = i + FQ_W * (size_t)k;
                fq_group v;
                group_load_grid(&v, 0, g + at, x + at, dx + at, chunk + k * FQ_W);
                loud |= (uint64_t)!all_quiet(vector_dx_change(&v, 0)) << (c * FQ_CHUNK_VECTORS + (size_t)k);
            }
            i += FQ_GRID_CHUNK;
            next_chunk(t, end, &chunk, &p);
        }
        while (loud != 0) {
            const size_t k = (size_t)__builtin_ctzll(loud);
            loud &= loud - 1;
            const size_t at = first + FQ_W * k, position = (first_p + FQ_W * k) % period;
            fq_group v;
            group_load_grid(&v, 0, g + at, x + at, dx + at, fq_grid_param(t, position, FQ_GRID_NUDGED_MIN));
            add_to_positions(below_product(&v, 0), acc_min + position);
            add_to_positions(above_product(&v, 0), acc_max + position);
        }
    }
}

/* Whether a walk of whole periods (from position 0, a multiple of 16) may go flagged
   (grad_flat_flagged), before the sample says whether few enough elements are clipped: grids that
   do not fit the registers, a period the flagged walk serves, dx apart from g and x. */
FQ_INLINE int may_walk_flagged(size_t period, const float *g, const float *x, const float *dx) {
    return !in_registers(period) && period <= FQ_FLAGGED_MAX_PERIOD && dx != g && dx != x;
}

/* Whether a sampled share of clipped elements (clipped_share) is few enough for the flagged walk:
   at most a quarter of the vectors hold one. Zen 4 (EPYC, family 25), one thread,
   per-channel gradient with 0.27% of x clipped, three runs alternating with the branching walks,
   us (per-channel / per-tensor): AVX-512 [1024, 1024] 223-226 (1.23-1.38) -> 194-198
   (1.19-1.22), [2048, 512] 212-215 (1.36-1.38) -> 182-185 (1.10-1.13); AVX2 [1024, 1024] 231-242
   (1.37-1.43) -> 206-215 (1.22-1.28), [2048, 512] 221-239 -> 204-215. With 4.6% clipped (a third
   to a half of the vectors loud) the prototype of this walk took 506-608 us at [1024, 1024]
   against the branching walks' 360-420, which keep such calls. */
FQ_INLINE int few_clipped(float clipped) { return clipped * (float)FQ_W <= 0.25f; }

/* Whole periods that fit the registers keep their grids there; other calls go row by row, long
   rows two at a time (grad_row_pair). */
FQ_INLINE void channel_sums_walk(const float *g, const float *x, float *dx, size_t rows,
                                 const fq_grid_table *t, size_t p0, size_t p1, double *acc_min,
                                 double *acc_max, const int every) {
    const size_t period = t->period;
    if (p0 == 0 && p1 == period && in_registers(period)) {
        grad_registers_by_period(g, x, dx, rows * period, t, acc_min, acc_max, every);
        return;
    }
    size_t r = 0;
    if (rows_in_pairs(period))
        for (; r + 2 <= rows; r += 2) {
            const size_t base = r * period;
            grad_row_pair(g + base, x + base, dx + base, period, t, p0, p1, acc_min, acc_max);
        }
    for (; r < rows; ++r) {
        const size_t base = r * period;
        grad_row(g + base, x + base, dx + base, t, p0, p1, acc_min, acc_max, every);
    }
}

static void FQ_NAME(channel_mask_sums)(const float *g, const float *x, float *dx, size_t rows,
                                       const fq_grid_table *table, size_t p0, size_t p1,
                                       double *acc_min, double *acc_max, fq_grad_place place) {
    const fq_grid_table grids = *table, *t = &grids; /* a local copy: stores cannot change it */
    const size_t period = t->period;
    if (walks_strips(t, place, p0, p1)) {
        grad_strips(g, x, dx, rows, period, t, p0, p1, acc_min, acc_max);
        return;
    }
    const int from_memory = place == FQ_GRAD_FROM_MEMORY;
    const int may_flag = p0 == 0 && p1 == period && period % FQ_GRID_CHUNK == 0 &&
                         rows * period >= FQ_FLAGGED_MIN_ELEMENTS && may_walk_flagged(period, g, x, dx);
    const float clipped = from_memory || may_flag ? clipped_share(x, rows, period, t, p0, p1) : 0.0f;
    if (may_flag && few_clipped(clipped))
        grad_flat_flagged(g, x, dx, rows * period, t, acc_min, acc_max);
    else if (from_memory && adds_every_group(clipped, period))
        channel_sums_walk(g, x, dx, rows, t, p0, p1, acc_min, acc_max, 1);
    else
        channel_sums_walk(g, x, dx, rows, t, p0, p1, acc_min, acc_max, 0);
}

/* Lanes [lo, hi) of the 16 positions of rotated chunk `chunk` (an aligned walk's partial ends).
   The other lanes load as g = x = 0, whose products are +0: adding them to the accumulators of the
   positions they stand for leaves those unchanged, so the sums go in without a branch. */
FQ_INLINE void grad_partial_chunk(const float *g, const float *x, float *dx, size_t lo, size_t hi,
                                  const float *chunk, double *acc_min, double *acc_max) {
    for (size_t k = 0; k < FQ_CHUNK_VECTORS; ++k) {
        const size_t first = k * FQ_W, from = lo > first ? lo - first : 0;
        const size_t to = hi < first + FQ_W ? (hi > first ? hi - first : 0) : FQ_W;
        if (from >= to) continue;
        const fq_group v = {{fqv_load_lanes(g + first, from, to)}, {fqv_load_lanes(x + first, from, to)},
                            {fqv_load(chunk + first + FQ_GRID_CHUNK * FQ_GRID_NUDGED_MIN)},
                            {fqv_load(chunk + first + FQ_GRID_CHUNK * FQ_GRID_NUDGED_MAX)}, {NULL}};
        fqv_store_lanes(dx + first, from, to, masked_v(v.g[0], v.x[0], v.nmin[0], v.nmax[0]));
        add_to_positions(below_product(&v, 0), acc_min + first);
        add_to_positions(above_product(&v, 0), acc_max + first);
    }
}

/* n elements (whole chunks) from the start of a period, grids loaded chunk by chunk through one
   pointer that wraps with the period. */
FQ_INLINE void grad_flat(const float *g, const float *x, float *dx, size_t n, const fq_grid_table *t,
                         double *acc_min, double *acc_max, const int every) {
    const float *chunk = t->grid, *const end = t->grid + fq_grid_offset(t->period, 0);
    size_t i = 0, p = 0; /* element i is at position p, the first of `chunk` */
    for (; i + FQ_GRAD_GROUP * FQ_W <= n; i += FQ_GRAD_GROUP * FQ_W) {
        fq_group v;
        double *am[4], *ax[4];
        for (int k = 0; k < FQ_GRAD_GROUP; ++k) {
            const float *grid = chunk + (k % FQ_CHUNK_VECTORS) * FQ_W;
            const size_t at = i + FQ_W * (size_t)k, position = p + (k % FQ_CHUNK_VECTORS) * FQ_W;
            group_load_grid(&v, k, g + at, x + at, dx + at, grid);
            am[k] = acc_min + position;
            ax[k] = acc_max + position;
            if (k % FQ_CHUNK_VECTORS == FQ_CHUNK_VECTORS - 1) next_chunk(t, end, &chunk, &p);
        }
        grad_group(&v, FQ_GRAD_GROUP, am, ax, every, t->grad_skips_quiet_vectors);
    }
    for (; i < n; i += FQ_GRID_CHUNK) {
        fq_group v;
        double *am[4], *ax[4];
        for (int k = 0; k < FQ_CHUNK_VECTORS; ++k) {
            const float *grid = chunk + k * FQ_W;
            const size_t at = i + FQ_W * (size_t)k;
            group_load_grid(&v, k, g + at, x + at, dx + at, grid);
            am[k] = acc_min + p + FQ_W * (size_t)k;
            ax[k] = acc_max + p + FQ_W * (size_t)k;
        }
        grad_group(&v, FQ_CHUNK_VECTORS, am, ax, every, t->grad_skips_quiet_vectors);
        next_chunk(t, end, &chunk, &p);
    }
}

/* The whole chunks of an aligned walk: n elements from the start of a period. */
FQ_INLINE void aligned_walk(const float *g, const float *x, float *dx, size_t n, const fq_grid_table *t,
                            double *acc_min, double *acc_max, const int every) {
    const size_t period = t->period;
    if (in_registers(period)) {
        grad_registers_by_period(g, x, dx, n, t, acc_min, acc_max, every);
        return;
    }
    size_t done = 0;
    for (; rows_in_pairs(period) && done + 2 * period <= n; done += 2 * period)
        grad_row_pair(g + done, x + done, dx + done, period, t, 0, period, acc_min, acc_max);
    grad_flat(g + done, x + done, dx + done, n - done, t, acc_min, acc_max, every);
}

/* fq_fake_quant_kernels.channel_mask_sums_aligned: the rows as one walk from a 64-byte aligned
   element, each position still meeting its rows in order. Its first and last chunks are partial:
   positions [0, head) of the first row, and positions [period - 16 + head, period) of the last,
   both in the rotated table's last chunk; every whole chunk between holds the 16 positions of one
   chunk of the table, whose accumulators start `head` past the chunk's rotated position. */
static void FQ_NAME(channel_mask_sums_aligned)(const float *g, const float *x, float *dx,
                                               size_t rows, const fq_grid_table *table, size_t head,
                                               double *acc_min, double *acc_max,
                                               fq_grad_place place) {
    const fq_grid_table grids = *table, *t = &grids; /* a local copy: stores cannot change it */
    const int from_memory = place == FQ_GRAD_FROM_MEMORY;
    const size_t period = t->period, n = rows * period - FQ_GRID_CHUNK;
    const float *const last = t->grid + fq_grid_offset(period - FQ_GRID_CHUNK, 0);
    g += head;
    x += head;
    dx += head;
    acc_min += head;
    acc_max += head;
    grad_partial_chunk(g - FQ_GRID_CHUNK, x - FQ_GRID_CHUNK, dx - FQ_GRID_CHUNK, FQ_GRID_CHUNK - head,
                       FQ_GRID_CHUNK, last, acc_min + period - FQ_GRID_CHUNK, acc_max + period - FQ_GRID_CHUNK);
    /* The sample's rows are whole rotated periods before the last, partial one. */
    const int may_flag = may_walk_flagged(period, g, x, dx);
    const float clipped =
        from_memory || may_flag ? clipped_share(x, rows - 1, period, t, 0, period) : 0.0f;
    if (may_flag && few_clipped(clipped))
        grad_flat_flagged(g, x, dx, n, t, acc_min, acc_max);
    else if (from_memory && adds_every_group(clipped, period))
        aligned_walk(g, x, dx, n, t, acc_min, acc_max, 1);
    else
        aligned_walk(g, x, dx, n, t, acc_min, acc_max, 0);
    grad_partial_chunk(g + n, x + n, dx + n, 0, FQ_GRID_CHUNK - head, last,
                       acc_min + period - FQ_GRID_CHUNK, acc_max + period - FQ_GRID_CHUNK);
}

/* ---- Per-channel set-up ---- */

/* fq_nudge of FQ_W ranges, operation for operation (the selection of the zero point as selects,
   in fq_nudge's order). */
FQ_INLINE fq_vgrid nudge_v(fqv min, fqv max, float quant_min, float quant_max) {
    const fqv qmin = fqv_set1(quant_min), qmax = fqv_set1(quant_max);
    const fqv levels = fqv_set1(quant_max - quant_min), range = fqv_sub(max, min);
    const fqv scale = fqv_div(range, levels), inv_scale = fqv_div(levels, range);
    const fqv from_min = fqv_sub(qmin, fqv_div(min, scale));
    /* roundf is kept only where from_min is in [quant_min, quant_max], so >= 0. */
    fqv zero_point = fqv_round_nonneg(from_min);
    zero_point = fqv_select(fqv_gt(from_min, qmax), qmax, zero_point);
    zero_point = fqv_select(fqv_lt(from_min, qmin), qmin, zero_point);
    zero_point = fqv_select(fqv_is_nan(from_min), fqv_zero(), zero_point);
    fq_vgrid q;
    q.nudged_min = fqv_mul(fqv_sub(qmin, zero_point), scale);
    q.nudged_max = fqv_mul(fqv_sub(qmax, zero_point), scale);
    q.scale = scale;
    q.inv_scale = inv_scale;
    q.quant_zero = fqv_floor(fqv_sub(fqv_set1(0.5f), fqv_mul(q.nudged_min, inv_scale)));
    return q;
}

static void FQ_NAME(nudge_channels)(const float *min, const float *max, size_t channels,
                                    int num_bits, int narrow_range, float *grid) {
    const float quant_min = fq_quant_min(narrow_range), quant_max = fq_quant_max(num_bits);
    size_t c = 0;
    for (; c + FQ_W <= channels; c += FQ_W) {
        const fq_vgrid q = nudge_v(fqv_load(min + c), fqv_load(max + c), quant_min, quant_max);
        fqv_store(grid + fq_grid_offset(c, FQ_GRID_NUDGED_MIN), q.nudged_min);
        fqv_store(grid + fq_grid_offset(c, FQ_GRID_NUDGED_MAX), q.nudged_max);
        fqv_store(grid + fq_grid_offset(c, FQ_GRID_SCALE), q.scale);
        fqv_store(grid + fq_grid_offset(c, FQ_GRID_INV_SCALE), q.inv_scale);
        fqv_store(grid + fq_grid_offset(c, FQ_GRID_QUANT_ZERO), q.quant_zero);
    }
    fq_nudge_positions(min, max, c, channels, num_bits, narrow_range, grid);
}

/* floorf((a - quant_zero) + 0.5f), as the per-channel forward computes it. */
FQ_INLINE fqv grid_index(fqv a, fqv quant_zero) {
    return fqv_floor(fqv_add(fqv_sub(a, quant_zero), fqv_set1(0.5f)));
}

/* fq_allows_scaled_clamp of FQ_W positions a step (a 1024-channel forward spent 2-3 us on it one
   position at a time). */
static float FQ_NAME(scaled_clamp_max)(const float *grid, const float *position_min,
                                       const float *position_max, size_t positions, float span) {
    const fqv spans = fqv_set1(span), tiny = fqv_set1(FLT_MIN);
    size_t p = 0;
    for (; p + FQ_W <= positions; p += FQ_W) {
        const fq_vgrid q = grid_at(grid + fq_grid_offset(p, FQ_GRID_NUDGED_MIN));
        const fqv_mask zero_range = fqv_and(fqv_lt(fqv_abs(fqv_load(position_min + p)), tiny),
                                            fqv_lt(fqv_abs(fqv_load(position_max + p)), tiny));
        const fqv_mask finite = fqv_andnot(fqv_not_finite(q.nudged_min),
                                           fqv_andnot(fqv_not_finite(q.inv_scale), fqv_gt(q.inv_scale, fqv_zero())));
        const fqv a_max = fqv_mul(fqv_sub(q.nudged_max, q.nudged_min), q.inv_scale);
        const fqv_mask same = fqv_eq(grid_index(a_max, q.quant_zero), grid_index(spans, q.quant_zero));
        if (!fqv_all(fqv_or(fqv_and(finite, same), zero_range))) return 0.0f;
    }
    for (; p < positions; ++p)
        if (!fq_allows_scaled_clamp(grid, p, position_min[p], position_max[p], span)) return 0.0f;
    return span;
}

const fq_fake_quant_kernels FQ_NAME(fq_fake_quant) = {
    FQ_NAME(forward_mul),       FQ_NAME(forward_mul_on_adds), FQ_NAME(forward_div),
    FQ_NAME(mask),              FQ_NAME(mask_sums),           FQ_NAME(channel_forward),
    FQ_NAME(channel_mask_sums), FQ_NAME(nudge_channels),      FQ_NAME(scaled_clamp_max),
    FQ_NAME(channel_mask_sums_aligned),
};
