/* C test harness, fake quantization: each SIMD path and thread count against the scalar kernels, bit
   for bit, via fqcore.h; and each ISA's per-channel nudge against fq_nudge, directly. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fpenv.h"
#include "fake_quant/fq_kernels.h"
#include "fqcore.h"
#include "harness.h"

#define GUARD ((size_t)32)      /* floats of guard on each side of every output buffer */
#define MAX_OFFSET ((size_t)16) /* starts are misaligned by 0..15 floats */
#define BIG ((size_t)200000) /* from here a call is large enough for several threads */

/* ---------------- buffers with guards and misaligned starts ---------------- */

typedef struct {
    float *base, *p;
    size_t n, total;
    uint32_t fill;
} buffer;

static void buffer_make(buffer *b, size_t n, size_t offset, uint32_t fill) {
    b->total = n + 2 * GUARD + MAX_OFFSET;
    b->base = xmalloc_aligned(b->total * sizeof(float));
    b->p = b->base + GUARD + offset;
    b->n = n;
    b->fill = fill;
    for (size_t i = 0; i < b->total; ++i) b->base[i] = from_bits(fill);
}

static int buffer_guards_ok(const buffer *b) {
    for (float *q = b->base; q < b->p; ++q)
        if (to_bits(*q) != b->fill) return 0;
    for (float *q = b->p + b->n; q < b->base + b->total; ++q)
        if (to_bits(*q) != b->fill) return 0;
    return 1;
}

static void buffer_free(buffer *b) { free(b->base); }

/* ---------------- the six ops behind one call description ---------------- */

typedef enum { OP_ARGS, OP_ARGS_GRAD, OP_VARS, OP_VARS_GRAD, OP_CHAN, OP_CHAN_GRAD } op_id;
static const char *const op_names[] = {"args", "args_grad", "vars", "vars_grad", "per_channel",
                                       "per_channel_grad"};

static int op_is_grad(op_id op) { return op == OP_ARGS_GRAD || op == OP_VARS_GRAD || op == OP_CHAN_GRAD; }
static int op_is_channel(op_id op) { return op == OP_CHAN || op == OP_CHAN_GRAD; }

/* Number of dmin/dmax values an op writes. */
static size_t op_sums(op_id op, size_t channels) {
    return op == OP_VARS_GRAD ? 1 : op == OP_CHAN_GRAD ? channels : 0;
}

typedef enum { ALIAS_NONE, ALIAS_X, ALIAS_G } alias_kind; /* out/dx is the same array as x or g */
static const char *const alias_names[] = {"", " out==x", " dx==g"};

typedef struct {
    op_id op;
    size_t n, channels;
    const float *x, *g;       /* inputs at their (possibly misaligned) starts */
    const float *min, *max;   /* 1 value for per-tensor ops, `channels` for per-channel ones */
    int bits, narrow;
    size_t x_off, g_off, out_off;
    const char *tag;          /* which generator made it, for reports */
} call;

static fq_status invoke(const call *c, const float *x, const float *g, float *out, float *dmin,
                        float *dmax) {
    switch (c->op) {
    case OP_ARGS: return fq_f32_args(x, out, c->n, c->min[0], c->max[0], c->bits, c->narrow);
    case OP_ARGS_GRAD:
        return fq_f32_args_grad(g, x, out, c->n, c->min[0], c->max[0], c->bits, c->narrow);
    case OP_VARS: return fq_f32_vars(x, out, c->n, c->min[0], c->max[0], c->bits, c->narrow);
    case OP_VARS_GRAD:
        return fq_f32_vars_grad(g, x, out, c->n, c->min[0], c->max[0], c->bits, c->narrow, dmin, dmax);
    case OP_CHAN:
        return fq_f32_vars_per_channel(x, out, c->n, c->channels, c->min, c->max, c->bits, c->narrow);
    case OP_CHAN_GRAD:
        return fq_f32_vars_per_channel_grad(g, x, out, c->n, c->channels, c->min, c->max, c->bits,
                                            c->narrow, dmin, dmax);
    }
    return FQ_ERR_BAD_ISA;
}

static void describe(const call *c, char *text, size_t size) {
    if (op_is_channel(c->op))
        snprintf(text, size, "%s n=%zu channels=%zu rows=%zu bits=%d narrow=%d min[0]=%a max[0]=%a "
                 "offsets x=%zu g=%zu out=%zu [%s]", op_names[c->op], c->n, c->channels,
                 c->channels ? c->n / c->channels : 0, c->bits, c->narrow, (double)c->min[0],
                 (double)c->max[0], c->x_off, c->g_off, c->out_off, c->tag);
    else
        snprintf(text, size, "%s n=%zu bits=%d narrow=%d min=%a max=%a offsets x=%zu g=%zu out=%zu [%s]",
                 op_names[c->op], c->n, c->bits, c->narrow, (double)c->min[0], (double)c->max[0],
                 c->x_off, c->g_off, c->out_off, c->tag);
}

typedef struct {
    fq_status status;
    buffer out, dmin, dmax;
    const float *untouched; /* what `out` holds if the call writes nothing (an aliased input) */
} result;


static void run(const call *c, fq_isa isa, int threads, alias_kind alias, uint32_t fill, result *r) {
    set_isa_threads(isa, threads);
    const size_t sums = op_sums(c->op, c->channels);
    buffer_make(&r->out, c->n, c->out_off, fill);
    buffer_make(&r->dmin, sums, 0, fill);
    buffer_make(&r->dmax, sums, 0, fill);
    const float *x = c->x, *g = c->g;
    r->untouched = NULL;
    if (alias == ALIAS_X) {
        if (c->n) memcpy(r->out.p, c->x, c->n * sizeof(float));
        r->untouched = x;
        x = r->out.p;
    } else if (alias == ALIAS_G) {
        if (c->n) memcpy(r->out.p, c->g, c->n * sizeof(float));
        r->untouched = g;
        g = r->out.p;
    }
    r->status = invoke(c, x, g, r->out.p, r->dmin.p, r->dmax.p);
}

static void result_free(result *r) {
    buffer_free(&r->out);
    buffer_free(&r->dmin);
    buffer_free(&r->dmax);
}

/* Why `got` differs from `ref` (the scalar single-thread run), or NULL when they agree. */
static const char *difference(const call *c, const result *ref, const result *got, char *why,
                              size_t size) {
    if (got->status != ref->status) {
        snprintf(why, size, "status %d (%s), scalar gave %d (%s)", got->status,
                 fq_status_string(got->status), ref->status, fq_status_string(ref->status));
        return why;
    }
    if (!buffer_guards_ok(&got->out) || !buffer_guards_ok(&got->dmin) || !buffer_guards_ok(&got->dmax)) {
        snprintf(why, size, "wrote outside its output arrays");
        return why;
    }
    if (got->status != FQ_OK) {
        for (size_t i = 0; i < c->n; ++i) {
            const uint32_t want = got->untouched ? to_bits(got->untouched[i]) : got->out.fill;
            if (to_bits(got->out.p[i]) != want) {
                snprintf(why, size, "failed with status %d but wrote out[%zu]", got->status, i);
                return why;
            }
        }
        return NULL;
    }
    for (size_t i = 0; i < c->n; ++i)
        if (!same(got->out.p[i], ref->out.p[i])) {
            snprintf(why, size, "out[%zu]=%a (0x%08x), scalar %a (0x%08x); x=%a g=%a", i,
                     (double)got->out.p[i], to_bits(got->out.p[i]), (double)ref->out.p[i],
                     to_bits(ref->out.p[i]), (double)c->x[i], c->g ? (double)c->g[i] : 0.0);
            return why;
        }
    const size_t sums = op_sums(c->op, c->channels);
    for (size_t j = 0; j < sums; ++j) {
        if (!same(got->dmin.p[j], ref->dmin.p[j])) {
            snprintf(why, size, "dmin[%zu]=%a, scalar %a", j, (double)got->dmin.p[j],
                     (double)ref->dmin.p[j]);
            return why;
        }
        if (!same(got->dmax.p[j], ref->dmax.p[j])) {
            snprintf(why, size, "dmax[%zu]=%a, scalar %a", j, (double)got->dmax.p[j],
                     (double)ref->dmax.p[j]);
            return why;
        }
    }
    return NULL;
}

static int inputs_intact(const call *c, const float *x_copy, const float *g_copy) {
    if (c->n == 0) return 1;
    if (memcmp(c->x, x_copy, c->n * sizeof(float)) != 0) return 0;
    return c->g == NULL || memcmp(c->g, g_copy, c->n * sizeof(float)) == 0;
}

/* Runs `c` on scalar with one thread (the reference), then on every ISA (and, with `thread_sweep`,
   on 1..THREADS_MAX threads; with `alias`, in place), and compares each run with the reference. */
static void check_call(const call *c, int thread_sweep, alias_kind alias) {
    char what[400], why[400];
    float *x_copy = NULL, *g_copy = NULL;
    if (c->n) {
        x_copy = malloc(c->n * sizeof(float));
        memcpy(x_copy, c->x, c->n * sizeof(float));
        if (c->g) {
            g_copy = malloc(c->n * sizeof(float));
            memcpy(g_copy, c->g, c->n * sizeof(float));
        }
    }
    result ref;
    run(c, FQ_ISA_SCALAR, 1, ALIAS_NONE, 0x5a5a5a5au, &ref);
    if (!expect(buffer_guards_ok(&ref.out) && buffer_guards_ok(&ref.dmin) && buffer_guards_ok(&ref.dmax) &&
                    inputs_intact(c, x_copy, g_copy),
                "%s: scalar wrote outside its outputs or changed an input",
                (describe(c, what, sizeof what), what))) {
        result_free(&ref);
        free(x_copy);
        free(g_copy);
        return;
    }
    if (ref.status == FQ_OK && c->n > 0) {
        int untouched = 0;
        for (size_t i = 0; i < c->n; ++i) untouched += to_bits(ref.out.p[i]) == ref.out.fill;
        expect(untouched == 0, "%s: scalar left %d outputs unwritten", (describe(c, what, sizeof what), what),
               untouched);
    }
    for (int k = 0; k < n_isas; ++k)
        for (int threads = 1; threads <= (thread_sweep ? THREADS_MAX : 1); ++threads) {
            if (isas[k] == FQ_ISA_SCALAR && threads == 1 && alias == ALIAS_NONE) continue;
            result got;
            run(c, isas[k], threads, alias, 0xa5a5a5a5u, &got);
            const char *diff = difference(c, &ref, &got, why, sizeof why);
            if (diff == NULL && !inputs_intact(c, x_copy, g_copy))
                diff = "changed an input array";
            const char *note = "";
            if (diff != NULL && alias != ALIAS_NONE) { /* tell an aliasing bug from a plain one */
                result plain;
                char scratch[400];
                run(c, isas[k], threads, ALIAS_NONE, 0xa5a5a5a5u, &plain);
                note = difference(c, &ref, &plain, scratch, sizeof scratch) == NULL
                           ? " (only in place: the same call on separate arrays passes)"
                           : " (fails on separate arrays too)";
                result_free(&plain);
            }
            describe(c, what, sizeof what);
            expect(diff == NULL, "%s threads=%d%s: %s: %s%s", fq_isa_name(isas[k]), threads,
                   alias_names[alias], what, diff, note);
            result_free(&got);
        }
    result_free(&ref);
    free(x_copy);
    free(g_copy);
}

/* ---------------- input generators ---------------- */

/* The nudged grid, computed the way the spec says (no flush-to-zero here; only to aim inputs). */
typedef struct {
    float nmin, nmax, scale;
    int levels, ok;
} aim;

static aim aim_at(float min, float max, int bits, int narrow) {
    aim a;
    const float qmin = narrow ? 1.0f : 0.0f, qmax = (float)((1 << bits) - 1);
    const float scale = (max - min) / (qmax - qmin);
    const float zpf = qmin - min / scale;
    const float zp = zpf < qmin ? qmin : zpf > qmax ? qmax : roundf(zpf);
    a.nmin = (qmin - zp) * scale;
    a.nmax = (qmax - zp) * scale;
    a.scale = scale;
    a.levels = (int)(qmax - qmin);
    a.ok = isfinite(a.nmin) && isfinite(a.nmax) && isfinite(scale) && scale > 0.0f;
    return a;
}

static float special_value(void) {
    switch (below(18)) {
    case 0: return NAN;
    case 1: return -NAN;
    case 2: return from_bits(0x7f800001u); /* signalling NaN */
    case 3: return from_bits(0xffc12345u); /* negative NaN with a payload */
    case 4: return INFINITY;
    case 5: return -INFINITY;
    case 6: return -0.0f;
    case 7: return 0.0f;
    case 8: return from_bits(1u + (uint32_t)below(0x7fffffu));               /* denormal */
    case 9: return from_bits(0x80000000u | (1u + (uint32_t)below(0x7fffffu))); /* -denormal */
    case 10: return FLT_MIN;
    case 11: return -FLT_MIN;
    case 12: return FLT_MAX;
    case 13: return -FLT_MAX;
    case 14: return -1e-40f;
    case 15: return FLT_TRUE_MIN;
    case 16: return unif(-1.0f, 1.0f) * 1e30f;
    default: return from_bits((uint32_t)rnd64()); /* any bits at all */
    }
}

/* Points of the grid: exact ties between levels, levels, the bounds and their neighbours. */
static float grid_value(const aim *q, float min, float max) {
    const float k = (float)((int)below((size_t)q->levels + 5) - 2);
    const float toward = below(2) ? INFINITY : -INFINITY;
    switch (below(13)) {
    case 0:
    case 1:
    case 2:
    case 3: return q->nmin + (k + 0.5f) * q->scale; /* a rounding tie */
    case 4: return nextafterf(q->nmin + (k + 0.5f) * q->scale, toward);
    case 5:
    case 6: return q->nmin + k * q->scale;
    case 7: return q->nmin;
    case 8: return q->nmax;
    case 9: return nextafterf(q->nmin, toward);
    case 10: return nextafterf(q->nmax, toward);
    case 11: return below(2) ? min : max;
    default: return nextafterf(below(2) ? min : max, toward);
    }
}

typedef enum { X_MIXED, X_INSIDE, X_SPECIAL } x_mode;
typedef enum { G_CLEAN, G_CANCEL, G_DIRTY, G_ONE_BAD, G_PAIRS } g_mode;
static const char *const x_mode_names[] = {"x-mixed", "x-inside", "x-special"};
static const char *const g_mode_names[] = {"g-clean", "g-cancel", "g-dirty", "g-one-bad", "g-pairs"};

static float gen_x(const aim *q, float min, float max, x_mode mode) {
    const size_t r = below(1000);
    if (mode == X_SPECIAL && r < 500) return special_value();
    if (!q->ok) { /* no usable grid (NaN, zero or reversed range): values around the raw bounds */
        float a = fabsf(min) > fabsf(max) ? fabsf(min) : fabsf(max);
        if (!(a >= 1e-30f && a <= 1e30f)) a = 1.0f;
        if (r < 60) return special_value();
        if (r < 160) return below(2) ? min : max;
        if (r < 200) return 0.0f;
        return unif(-2.0f * a, 2.0f * a);
    }
    const float width = q->nmax - q->nmin;
    if (mode == X_INSIDE && r < 985) return unif(q->nmin, q->nmax);
    if (r < 350) return unif(q->nmin, q->nmax);
    if (r < 650) return grid_value(q, min, max);
    if (r < 800) return below(2) ? q->nmin - unif(0.0f, 0.5f) * width : q->nmax + unif(0.0f, 0.5f) * width;
    if (r < 920) return unif(-3.0f, 3.0f) * (fabsf(q->nmin) + fabsf(q->nmax));
    return special_value();
}

static float clean_g(void) {
    const size_t r = below(100);
    if (r < 2) return below(2) ? 0.0f : -0.0f;
    if (r < 4) return from_bits((below(2) ? 0x80000000u : 0u) | (1u + (uint32_t)below(0x7fffffu)));
    return unif(-1.0f, 1.0f) * ldexpf(1.0f, (int)below(21) - 10);
}

static float gen_g(g_mode mode) {
    switch (mode) {
    case G_CANCEL: /* huge values that cancel beside small ones: the sums see any change of order */
        return below(3) == 0 ? (below(2) ? 1.0f : -1.0f) * unif(0.5f, 1.0f) * 1e20f : clean_g();
    case G_DIRTY:
        if (below(300) == 0) {
            const size_t k = below(3);
            return k == 0 ? NAN : k == 1 ? INFINITY : -INFINITY;
        }
        return clean_g();
    default: return clean_g();
    }
}

/* G_PAIRS: elements that enter the same sum get huge values +L and -L in pairs. The pairs cancel
   exactly whatever the order, but each small value added while an L is pending is rounded away,
   so the result depends on the exact order of the additions (lanes, runs, blocks). */
static void pair_up(const float *x, float *g, size_t n, size_t channels, const aim *q) {
    size_t *idx[2] = {malloc((n / channels + 1) * sizeof(size_t)), malloc((n / channels + 1) * sizeof(size_t))};
    for (size_t c = 0; c < channels; ++c) {
        if (!q[c].ok) continue;
        const float margin = (q[c].nmax - q[c].nmin) * 1e-3f;
        size_t count[2] = {0, 0};
        for (size_t i = c; i < n; i += channels) {
            if (x[i] < q[c].nmin - margin) idx[0][count[0]++] = i;
            else if (x[i] > q[c].nmax + margin) idx[1][count[1]++] = i;
        }
        for (int side = 0; side < 2; ++side) {
            size_t *v = idx[side];
            for (size_t k = count[side]; k > 1; --k) { /* Fisher-Yates */
                const size_t j = below(k), t = v[k - 1];
                v[k - 1] = v[j];
                v[j] = t;
            }
            /* A few pairs only: with many, every partial sum is huge and adds exactly. */
            const size_t pairs = 1 + below(6);
            for (size_t k = 0; k + 1 < count[side] && k < 2 * pairs; k += 2) {
                const float big = unif(0.5f, 1.0f) * ldexpf(1.0f, 36 + (int)below(24));
                g[v[k]] = big;
                g[v[k + 1]] = -big;
            }
        }
    }
    free(idx[0]);
    free(idx[1]);
}

/* Input arrays with room for a misaligned start. */
typedef struct {
    float *xbase, *gbase, *x, *g;
    size_t x_off, g_off;
} inputs;

static void inputs_make(inputs *in, size_t n, size_t x_off, size_t g_off) {
    in->xbase = xmalloc_aligned((n + MAX_OFFSET) * sizeof(float));
    in->gbase = xmalloc_aligned((n + MAX_OFFSET) * sizeof(float));
    in->x = in->xbase + x_off;
    in->g = in->gbase + g_off;
    in->x_off = x_off;
    in->g_off = g_off;
}

static void inputs_free(inputs *in) {
    free(in->xbase);
    free(in->gbase);
}

/* Fills x for per-tensor range [min, max] and g. */
static void fill_tensor(inputs *in, size_t n, float min, float max, int bits, int narrow, x_mode xm,
                        g_mode gm) {
    const aim q = aim_at(min, max, bits, narrow);
    for (size_t i = 0; i < n; ++i) in->x[i] = gen_x(&q, min, max, xm);
    for (size_t i = 0; i < n; ++i) in->g[i] = gen_g(gm);
    if (gm == G_ONE_BAD && n > 0) {
        const size_t k = below(3);
        in->g[below(n)] = k == 0 ? NAN : k == 1 ? INFINITY : -INFINITY;
    }
    if (gm == G_PAIRS) pair_up(in->x, in->g, n, 1, &q);
}

/* Ranges worth trying as they are: TF's examples, zero and equal ranges, reversed, non-finite,
   overflowing, denormal. */
static const float special_ranges[][2] = {
    {-0.1f, 0.2f},    {-6.0f, 6.0f},   {-1.0f, 3.0f},     {-2.5f, 4.5f},    {0.5f, 1.0f},
    {-1.0f, -0.5f},   {0.0f, 1.0f},    {-1.0f, 0.0f},     {-0.3f, 0.7f},    {0.0f, 0.0f},
    {-0.0f, 0.0f},    {0.0f, -0.0f},   {-1e-40f, 1e-40f}, {1.0f, 1.0f},     {-1.0f, -1.0f},
    {0.3f, 0.3f},     {1.0f, -1.0f},   {0.2f, -0.1f},     {NAN, 1.0f},      {-1.0f, NAN},
    {-INFINITY, 1.0f}, {-1.0f, INFINITY}, {-INFINITY, INFINITY}, {-3e38f, 3e38f}, {-1e-38f, 1e-38f},
    {-1e30f, 1e30f},  {1e-30f, 3e-30f}, {-65504.0f, 65504.0f}, {-1e-5f, 1e-5f}, {100.0f, 100.5f},
};
#define N_SPECIAL_RANGES (sizeof special_ranges / sizeof special_ranges[0])

static void random_range(float *min, float *max) {
    const float mag = ldexpf(1.0f, (int)below(17) - 8);
    switch (below(10)) {
    case 0: /* entirely positive: the grid shifts to [0, max - min] */
        *min = unif(0.01f, 1.0f) * mag;
        *max = *min + unif(0.01f, 1.0f) * mag;
        break;
    case 1: /* entirely negative */
        *max = -unif(0.01f, 1.0f) * mag;
        *min = *max - unif(0.01f, 1.0f) * mag;
        break;
    case 2:
        *min = 0.0f;
        *max = unif(0.01f, 1.0f) * mag;
        break;
    case 3:
        *min = -unif(0.01f, 1.0f) * mag;
        *max = 0.0f;
        break;
    default:
        *min = -unif(0.001f, 1.0f) * mag;
        *max = unif(0.001f, 1.0f) * mag;
        break;
    }
}

/* A per-tensor range: from the special list with probability special_pct %, else random. */
static void pick_range(float *min, float *max, size_t special_pct) {
    if (below(100) < special_pct) {
        const size_t k = below(N_SPECIAL_RANGES);
        *min = special_ranges[k][0];
        *max = special_ranges[k][1];
    } else {
        random_range(min, max);
    }
}

/* Per-channel ranges and inputs: each position's x is aimed at its own channel's grid. */
static void fill_channels(inputs *in, size_t n, size_t channels, float *mins, float *maxs, int bits,
                          int narrow, size_t special_pct, x_mode xm, g_mode gm) {
    aim *q = malloc(channels * sizeof(aim));
    for (size_t c = 0; c < channels; ++c) {
        pick_range(&mins[c], &maxs[c], special_pct);
        q[c] = aim_at(mins[c], maxs[c], bits, narrow);
    }
    for (size_t i = 0; i < n; ++i) {
        const size_t c = i % channels;
        in->x[i] = gen_x(&q[c], mins[c], maxs[c], xm);
        in->g[i] = gen_g(gm);
    }
    if (gm == G_ONE_BAD && n > 0) in->g[below(n)] = below(2) ? NAN : INFINITY;
    if (gm == G_PAIRS) pair_up(in->x, in->g, n, channels, q);
    free(q);
}

static size_t random_offset(void) { return below(MAX_OFFSET); }

/* ---------------- API behaviour: statuses ---------------- */

static void test_errors(void) {
    float x[16] = {0}, g[16] = {0}, out[16], mins[4] = {-1, -1, -1, -1}, maxs[4] = {1, 1, 1, 1};
    float dmin[4], dmax[4];
    const int bad_bits[] = {-1, 0, 1, 17, 32};
    for (size_t k = 0; k < sizeof bad_bits / sizeof bad_bits[0]; ++k) {
        const int b = bad_bits[k];
        expect(fq_f32_args(x, out, 16, -1, 1, b, 0) == FQ_ERR_NUM_BITS, "args num_bits=%d", b);
        expect(fq_f32_args_grad(g, x, out, 16, -1, 1, b, 0) == FQ_ERR_NUM_BITS, "args_grad num_bits=%d", b);
        expect(fq_f32_vars(x, out, 16, -1, 1, b, 0) == FQ_ERR_NUM_BITS, "vars num_bits=%d", b);
        expect(fq_f32_vars_grad(g, x, out, 16, -1, 1, b, 0, dmin, dmax) == FQ_ERR_NUM_BITS,
               "vars_grad num_bits=%d", b);
        expect(fq_f32_vars_per_channel(x, out, 16, 4, mins, maxs, b, 1) == FQ_ERR_NUM_BITS,
               "per_channel num_bits=%d", b);
        expect(fq_f32_vars_per_channel_grad(g, x, out, 16, 4, mins, maxs, b, 1, dmin, dmax) ==
                   FQ_ERR_NUM_BITS, "per_channel_grad num_bits=%d", b);
    }
    for (int b = 2; b <= 16; ++b) /* the valid extremes and everything between */
        expect(fq_f32_args(x, out, 16, -1, 1, b, b & 1) == FQ_OK, "args num_bits=%d rejected", b);

    const fq_status NP = FQ_ERR_NULL_POINTER;
    expect(fq_f32_args(NULL, out, 4, -1, 1, 8, 0) == NP, "args x NULL");
    expect(fq_f32_args(x, NULL, 4, -1, 1, 8, 0) == NP, "args out NULL");
    expect(fq_f32_args_grad(NULL, x, out, 4, -1, 1, 8, 0) == NP, "args_grad g NULL");
    expect(fq_f32_args_grad(g, NULL, out, 4, -1, 1, 8, 0) == NP, "args_grad x NULL");
    expect(fq_f32_args_grad(g, x, NULL, 4, -1, 1, 8, 0) == NP, "args_grad dx NULL");
    expect(fq_f32_vars(NULL, out, 4, -1, 1, 8, 0) == NP, "vars x NULL");
    expect(fq_f32_vars(x, NULL, 4, -1, 1, 8, 0) == NP, "vars out NULL");
    expect(fq_f32_vars_grad(NULL, x, out, 4, -1, 1, 8, 0, dmin, dmax) == NP, "vars_grad g NULL");
    expect(fq_f32_vars_grad(g, NULL, out, 4, -1, 1, 8, 0, dmin, dmax) == NP, "vars_grad x NULL");
    expect(fq_f32_vars_grad(g, x, NULL, 4, -1, 1, 8, 0, dmin, dmax) == NP, "vars_grad dx NULL");
    expect(fq_f32_vars_grad(g, x, out, 4, -1, 1, 8, 0, NULL, dmax) == NP, "vars_grad dmin NULL");
    expect(fq_f32_vars_grad(g, x, out, 4, -1, 1, 8, 0, dmin, NULL) == NP, "vars_grad dmax NULL");
    expect(fq_f32_vars_grad(g, x, out, 0, -1, 1, 8, 0, NULL, dmax) == NP, "vars_grad n=0 dmin NULL");
    expect(fq_f32_vars_per_channel(NULL, out, 4, 2, mins, maxs, 8, 0) == NP, "per_channel x NULL");
    expect(fq_f32_vars_per_channel(x, NULL, 4, 2, mins, maxs, 8, 0) == NP, "per_channel out NULL");
    expect(fq_f32_vars_per_channel(x, out, 4, 2, NULL, maxs, 8, 0) == NP, "per_channel min NULL");
    expect(fq_f32_vars_per_channel(x, out, 4, 2, mins, NULL, 8, 0) == NP, "per_channel max NULL");
    expect(fq_f32_vars_per_channel_grad(NULL, x, out, 4, 2, mins, maxs, 8, 0, dmin, dmax) == NP,
           "per_channel_grad g NULL");
    expect(fq_f32_vars_per_channel_grad(g, NULL, out, 4, 2, mins, maxs, 8, 0, dmin, dmax) == NP,
           "per_channel_grad x NULL");
    expect(fq_f32_vars_per_channel_grad(g, x, NULL, 4, 2, mins, maxs, 8, 0, dmin, dmax) == NP,
           "per_channel_grad dx NULL");
    expect(fq_f32_vars_per_channel_grad(g, x, out, 4, 2, NULL, maxs, 8, 0, dmin, dmax) == NP,
           "per_channel_grad min NULL");
    expect(fq_f32_vars_per_channel_grad(g, x, out, 4, 2, mins, NULL, 8, 0, dmin, dmax) == NP,
           "per_channel_grad max NULL");
    expect(fq_f32_vars_per_channel_grad(g, x, out, 4, 2, mins, maxs, 8, 0, NULL, dmax) == NP,
           "per_channel_grad dmin NULL");
    expect(fq_f32_vars_per_channel_grad(g, x, out, 4, 2, mins, maxs, 8, 0, dmin, NULL) == NP,
           "per_channel_grad dmax NULL");

    /* Empty inputs need no arrays, and the sums of nothing are +0. */
    expect(fq_f32_args(NULL, NULL, 0, -1, 1, 8, 0) == FQ_OK, "args n=0 with NULL arrays");
    expect(fq_f32_args_grad(NULL, NULL, NULL, 0, -1, 1, 8, 0) == FQ_OK, "args_grad n=0 with NULL arrays");
    expect(fq_f32_vars(NULL, NULL, 0, -1, 1, 8, 0) == FQ_OK, "vars n=0 with NULL arrays");
    dmin[0] = dmax[0] = 7.0f;
    expect(fq_f32_vars_grad(NULL, NULL, NULL, 0, -1, 1, 8, 0, dmin, dmax) == FQ_OK &&
               to_bits(dmin[0]) == 0 && to_bits(dmax[0]) == 0,
           "vars_grad n=0: status OK and sums +0 (got %a %a)", (double)dmin[0], (double)dmax[0]);
    for (int c = 0; c < 4; ++c) dmin[c] = dmax[c] = 7.0f;
    expect(fq_f32_vars_per_channel(NULL, NULL, 0, 4, mins, maxs, 8, 0) == FQ_OK, "per_channel n=0");
    expect(fq_f32_vars_per_channel_grad(NULL, NULL, NULL, 0, 4, mins, maxs, 8, 0, dmin, dmax) == FQ_OK &&
               to_bits(dmin[3]) == 0 && to_bits(dmax[3]) == 0,
           "per_channel_grad n=0: status OK and sums +0");

    /* Args: min must be below max, after flushing denormals; NaN is never below. */
    const float bad_ranges[][2] = {{2, 1}, {1, 1}, {0, -0.0f}, {NAN, 1}, {1, NAN}, {NAN, NAN},
                                   {-1e-38f, 1e-38f}, {-1e-40f, 1e-40f}, {INFINITY, INFINITY}};
    for (size_t k = 0; k < sizeof bad_ranges / sizeof bad_ranges[0]; ++k) {
        const float lo = bad_ranges[k][0], hi = bad_ranges[k][1];
        expect(fq_f32_args(x, out, 16, lo, hi, 8, 0) == FQ_ERR_MIN_NOT_BELOW_MAX, "args min=%a max=%a",
               (double)lo, (double)hi);
        expect(fq_f32_args_grad(g, x, out, 16, lo, hi, 8, 0) == FQ_ERR_MIN_NOT_BELOW_MAX,
               "args_grad min=%a max=%a", (double)lo, (double)hi);
        expect(fq_f32_args(x, out, 0, lo, hi, 8, 0) == FQ_ERR_MIN_NOT_BELOW_MAX, "args n=0 min=%a max=%a",
               (double)lo, (double)hi);
    }
    expect(fq_f32_args(x, out, 16, -INFINITY, INFINITY, 8, 0) == FQ_OK, "args [-inf, inf] is ordered");
    expect(fq_f32_args(x, out, 16, -1e-37f, 1e-37f, 8, 0) == FQ_OK, "args [-1e-37, 1e-37] is ordered");
    /* Vars never rejects a range. */
    expect(fq_f32_vars(x, out, 16, 2, 1, 8, 0) == FQ_OK, "vars min > max");
    expect(fq_f32_vars_grad(g, x, out, 16, NAN, 1, 8, 0, dmin, dmax) == FQ_OK, "vars_grad NaN min");

    /* Per-channel shapes. */
    expect(fq_f32_vars_per_channel(x, out, 10, 3, mins, maxs, 8, 0) == FQ_ERR_BAD_SHAPE, "per_channel 10 %% 3");
    expect(fq_f32_vars_per_channel_grad(g, x, out, 10, 3, mins, maxs, 8, 0, dmin, dmax) == FQ_ERR_BAD_SHAPE,
           "per_channel_grad 10 %% 3");
    expect(fq_f32_vars_per_channel(x, out, 5, 0, mins, maxs, 8, 0) == FQ_ERR_BAD_SHAPE, "per_channel 0 channels");
    expect(fq_f32_vars_per_channel_grad(g, x, out, 5, 0, mins, maxs, 8, 0, dmin, dmax) == FQ_ERR_BAD_SHAPE,
           "per_channel_grad 0 channels");
    expect(fq_f32_vars_per_channel(NULL, NULL, 0, 0, NULL, NULL, 8, 0) == FQ_OK, "per_channel empty, 0 channels");
    expect(fq_f32_vars_per_channel_grad(NULL, NULL, NULL, 0, 0, NULL, NULL, 8, 0, NULL, NULL) == FQ_OK,
           "per_channel_grad empty, 0 channels");

    /* Run-time settings. */
    expect(fq_set_num_threads(FQ_THREADS_AUTO) == FQ_OK && fq_num_threads_is_auto(), "threads auto");
    expect(fq_set_num_threads(-3) == FQ_ERR_BAD_THREADS, "threads -3");
    expect(fq_set_num_threads(1025) == FQ_ERR_BAD_THREADS, "threads 1025");
    expect(fq_set_num_threads(3) == FQ_OK && fq_get_num_threads() == 3, "threads 3 round trip");
    fq_set_num_threads(1);
    expect(fq_set_isa((fq_isa)99) == FQ_ERR_BAD_ISA, "set_isa 99");
    expect(fq_set_isa((fq_isa)-1) == FQ_ERR_BAD_ISA, "set_isa -1");
    fq_isa parsed;
    expect(fq_isa_from_name("sse2", &parsed) == FQ_ERR_BAD_ISA, "isa name sse2");
    expect(fq_isa_from_name(NULL, &parsed) == FQ_ERR_NULL_POINTER, "isa name NULL");
    for (int i = 0; i < FQ_ISA_COUNT; ++i) {
        expect(fq_isa_from_name(fq_isa_name((fq_isa)i), &parsed) == FQ_OK && parsed == (fq_isa)i,
               "isa name round trip %d", i);
        if (!fq_isa_available((fq_isa)i))
            expect(fq_set_isa((fq_isa)i) == FQ_ERR_ISA_UNAVAILABLE, "set_isa(%s) unavailable",
                   fq_isa_name((fq_isa)i));
        else
            expect(fq_set_isa((fq_isa)i) == FQ_OK && fq_get_isa() == (fq_isa)i, "set_isa(%s)",
                   fq_isa_name((fq_isa)i));
    }
    for (int s = 0; s <= FQ_ERR_BAD_SHAPE; ++s) {
        const char *text = fq_status_string((fq_status)s);
        expect(text != NULL && text[0] != '\0', "fq_status_string(%d)", s);
    }
    expect(fq_isa_available(FQ_ISA_SCALAR) && fq_isa_compiled(FQ_ISA_SCALAR), "scalar always available");
}

/* ---------------- known values from the spec, on every ISA ---------------- */

/* Runs one per-tensor op on `isa`, replicating a short pattern `reps` times so SIMD loops see it. */
static fq_status run_pattern(op_id op, fq_isa isa, int threads, const float *xp, const float *gp,
                             size_t len, size_t reps, size_t channels, const float *mins,
                             const float *maxs, int bits, int narrow, float *out, float *dmin,
                             float *dmax) {
    const size_t n = len * reps;
    float *x = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; ++i) {
        x[i] = xp[i % len];
        g[i] = gp ? gp[i % len] : 1.0f;
    }
    set_isa_threads(isa, threads);
    const call c = {op, n, channels, x, g, mins, maxs, bits, narrow, 0, 0, 0, "spec"};
    const fq_status s = invoke(&c, x, g, out, dmin, dmax);
    free(x);
    free(g);
    return s;
}

static void test_spec_values(void) {
    enum { REPS = 37 };
    float out[12 * REPS], dmin[16], dmax[16];
    for (int k = 0; k < n_isas; ++k) {
        const fq_isa isa = isas[k];
        const char *name = fq_isa_name(isa);
        /* Test vector 1: mask edges at the nudged bounds of [-0.1, 0.2], 8 bits. */
        const float nmin = -0x1.99999cp-4f, nmax = 0x1.99999cp-3f;
        const float x1[12] = {nextafterf(nmin, -1), nmin, nextafterf(nmin, 1), 0, nextafterf(nmax, -1),
                              nmax, nextafterf(nmax, 1), -0.1f, 0.2f, NAN, INFINITY, -INFINITY};
        const float g1[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
        const float dx1[12] = {0, 2, 3, 4, 5, 6, 0, 8, 9, 0, 0, 0};
        const int below1[12] = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
        const int above1[12] = {0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0};
        const float lo = -0.1f, hi = 0.2f;
        for (int op = OP_ARGS_GRAD; op <= OP_CHAN_GRAD; ++op) {
            if (op == OP_VARS || op == OP_CHAN) continue;
            for (size_t channels = 1; channels <= 12; channels += 11) {
                if (op != OP_CHAN_GRAD && channels > 1) continue;
                float mins[12], maxs[12];
                for (int c = 0; c < 12; ++c) mins[c] = lo, maxs[c] = hi;
                const fq_status s = run_pattern((op_id)op, isa, 1, x1, g1, 12, REPS, channels, mins, maxs,
                                                8, 0, out, dmin, dmax);
                int ok = s == FQ_OK;
                for (int i = 0; i < 12 * REPS && ok; ++i) ok = to_bits(out[i]) == to_bits(dx1[i % 12]);
                if (ok && op == OP_VARS_GRAD) ok = dmin[0] == 13.0f * REPS && dmax[0] == 18.0f * REPS;
                if (ok && op == OP_CHAN_GRAD && channels == 1) ok = dmin[0] == 13.0f * REPS && dmax[0] == 18.0f * REPS;
                if (ok && op == OP_CHAN_GRAD && channels == 12)
                    for (int c = 0; c < 12; ++c)
                        ok = ok && dmin[c] == (below1[c] ? g1[c] * REPS : 0.0f) &&
                             dmax[c] == (above1[c] ? g1[c] * REPS : 0.0f);
                expect(ok, "%s: spec vector 1, %s channels=%zu", name, op_names[op], channels);
            }
        }
        /* Test vector 2: inf/NaN gradients, masked and not. */
        {
            const float x2[5] = {0, 0.05f, -5, 5, 0.1f}, g2[5] = {INFINITY, NAN, -3, -INFINITY, -2};
            const float mins[1] = {lo}, maxs[1] = {hi};
            for (int op = OP_ARGS_GRAD; op <= OP_CHAN_GRAD; op += 2) {
                const fq_status s = run_pattern((op_id)op, isa, 1, x2, g2, 5, 7, 1, mins, maxs, 8, 0, out,
                                                dmin, dmax);
                int ok = s == FQ_OK;
                for (int i = 0; i < 35 && ok; i += 5)
                    ok = to_bits(out[i]) == to_bits(INFINITY) && isnan(out[i + 1]) &&
                         to_bits(out[i + 2]) == 0x80000000u && isnan(out[i + 3]) && out[i + 4] == -2.0f;
                if (ok && op != OP_ARGS_GRAD) ok = isnan(dmin[0]) && isnan(dmax[0]);
                expect(ok, "%s: spec vector 2, %s", name, op_names[op]);
            }
        }
        /* Test vector 5: min == max != 0, so only x == 0 passes and every output is NaN. */
        for (int sign = -1; sign <= 1; sign += 2) {
            const float x5[8] = {-.2f, -.1f, -.05f, 0, .05f, .1f, .2f, .3f};
            const float mins[1] = {(float)sign}, maxs[1] = {(float)sign};
            for (int op = OP_VARS; op <= OP_CHAN_GRAD; ++op) {
                const fq_status s = run_pattern((op_id)op, isa, 1, x5, NULL, 8, 5, 1, mins, maxs, 8, 0, out,
                                                dmin, dmax);
                int ok = s == FQ_OK;
                for (int i = 0; i < 40 && ok; ++i)
                    ok = op_is_grad((op_id)op) ? out[i] == (i % 8 == 3 ? 1.0f : 0.0f) : isnan(out[i]);
                if (ok && op_is_grad((op_id)op)) ok = dmin[0] == 15.0f && dmax[0] == 20.0f;
                expect(ok, "%s: spec vector 5 (min = max = %d), %s", name, sign, op_names[op]);
            }
        }
        /* Forward values given in hex by the spec (Vars divides, Args multiplies). */
        {
            const struct { float min, max; int bits, narrow; float x, vars, args; } v[] = {
                {-0.1f, 0.2f, 8, 0, 0x1.99999ap-5f, 0x1.9e6b3ap-5f, 0x1.94c7fcp-5f},
                {-0.1f, 0.2f, 8, 1, -0x1.d06d80p-10f, -0x1.359e70p-10f, -0x1.359e70p-9f},
                {-6.0f, 6.0f, 8, 0, -0.0236f, NAN, -0x1.818182p-5f},
                {-6.0f, 6.0f, 8, 0, -0.0235f, NAN, 0.0f},
                {-6.0f, 6.0f, 8, 0, 6.5f, NAN, (float)5.976470470428467},
                {-6.0f, 6.0f, 8, 0, -100.0f, (float)-6.023529529571533, (float)-6.023529529571533},
                {-6.0f, 6.0f, 8, 1, -100.0f, -6.0f, -6.0f},
                {-6.0f, 6.0f, 8, 1, 100.0f, 6.0f, 6.0f},
                {-2.5f, 4.5f, 3, 0, -10.0f, -3.0f, -3.0f},
                {-2.5f, 4.5f, 3, 0, 10.0f, 4.0f, 4.0f},
                {-0.3f, 0.7f, 16, 0, -1.0f, -0x1.333534p-2f, -0x1.333534p-2f},
                {-0.3f, 0.7f, 16, 0, 1.0f, 0x1.666566p-1f, 0x1.666566p-1f},
                {0.5f, 1.0f, 8, 0, 2.0f, 0.5f, 0.5f},
                {0.5f, 1.0f, 8, 0, -2.0f, 0.0f, 0.0f},
            };
            for (size_t j = 0; j < sizeof v / sizeof v[0]; ++j) {
                const float mins[1] = {v[j].min}, maxs[1] = {v[j].max};
                for (int op = OP_ARGS; op <= OP_CHAN; op += 2) {
                    const float want = op == OP_VARS ? v[j].vars : v[j].args;
                    if (isnan(want)) continue;
                    const fq_status s = run_pattern((op_id)op, isa, 1, &v[j].x, NULL, 1, 21, 1, mins, maxs,
                                                    v[j].bits, v[j].narrow, out, dmin, dmax);
                    int ok = s == FQ_OK;
                    for (int i = 0; i < 21 && ok; ++i) ok = to_bits(out[i]) == to_bits(want);
                    expect(ok, "%s: %s [%g, %g] bits=%d narrow=%d x=%a gives %a, spec %a", name, op_names[op],
                           (double)v[j].min, (double)v[j].max, v[j].bits, v[j].narrow, (double)v[j].x,
                           (double)out[0], (double)want);
                }
            }
        }
        /* Test vector 3: min=-1, max=3, 8 bits (the spec prints 8 digits). */
        {
            const float x3[12] = {-7, -1, -0.3f, -0.01f, 0, 0.004f, 0.5f, 1, 1.234f, 2.9f, 3, 10};
            const double y3[12] = {-1.0039216, -1.0039216, -0.2980392, -0.0156863, 0, 0, 0.5019608,
                                   1.0039216, 1.2392157, 2.9019608, 2.9960785, 2.9960785};
            const float mins[1] = {-1}, maxs[1] = {3};
            for (int op = OP_ARGS; op <= OP_CHAN; op += 2) {
                const fq_status s = run_pattern((op_id)op, isa, 1, x3, NULL, 12, 3, 1, mins, maxs, 8, 0, out,
                                                dmin, dmax);
                int ok = s == FQ_OK;
                for (int i = 0; i < 36 && ok; ++i) ok = fabs((double)out[i] - y3[i % 12]) < 1e-6;
                expect(ok, "%s: spec vector 3, %s", name, op_names[op]);
            }
        }
        /* min > max: the formula runs with a negative scale; every x gives 0x1.fdfe00p-1. */
        {
            float xr[24], gr[24];
            for (int i = 0; i < 24; ++i) xr[i] = -0.9f + 0.075f * (float)i, gr[i] = (float)(i + 1);
            const float mins[1] = {1}, maxs[1] = {-1};
            for (int op = OP_VARS; op <= OP_CHAN_GRAD; ++op) {
                const fq_status s = run_pattern((op_id)op, isa, 1, xr, gr, 24, 2, 1, mins, maxs, 8, 0, out,
                                                dmin, dmax);
                int ok = s == FQ_OK;
                for (int i = 0; i < 48 && ok; ++i)
                    ok = op_is_grad((op_id)op) ? to_bits(out[i]) == 0 : out[i] == 0x1.fdfe00p-1f;
                if (ok && op_is_grad((op_id)op)) ok = dmin[0] == 600.0f && dmax[0] == 600.0f;
                expect(ok, "%s: min=1 max=-1, %s", name, op_names[op]);
            }
        }
        /* min == max == 0 (here also -0 and denormals): output +0 even for NaN x, dx = g, sums +0. */
        {
            const float zx[6] = {NAN, -1, 0.5f, -0.0f, INFINITY, 3};
            const float zg[6] = {1, -2, INFINITY, NAN, -0.0f, 1e-40f};
            const float zero_ranges[][2] = {{0, 0}, {-0.0f, 0}, {0, -0.0f}, {-1e-40f, 1e-40f}, {1e-45f, 0}};
            for (size_t z = 0; z < 5; ++z) {
                const float mins[1] = {zero_ranges[z][0]}, maxs[1] = {zero_ranges[z][1]};
                for (int op = OP_VARS; op <= OP_CHAN_GRAD; ++op) {
                    const fq_status s = run_pattern((op_id)op, isa, 1, zx, zg, 6, 4, 1, mins, maxs, 8, 0, out,
                                                    dmin, dmax);
                    int ok = s == FQ_OK;
                    for (int i = 0; i < 24 && ok; ++i)
                        ok = op_is_grad((op_id)op) ? same(out[i], zg[i % 6]) : to_bits(out[i]) == 0;
                    if (ok && op_is_grad((op_id)op)) ok = to_bits(dmin[0]) == 0 && to_bits(dmax[0]) == 0;
                    expect(ok, "%s: zero range [%a, %a], %s", name, (double)mins[0], (double)maxs[0],
                           op_names[op]);
                }
            }
        }
    }
}

/* ---------------- flush-to-zero ---------------- */

/* TF runs with denormals as zero: x = -1e-40 with nudged_min = 0 is inside the grid. Checked on
   every ISA and thread count (each worker thread must switch its own FPCR/MXCSR), on sizes that
   engage several threads. */
static void test_flush_to_zero(void) {
    const size_t n = 262144 + 37, channels = 16, rows = n / channels;
    float *x = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)), *dx = malloc(n * sizeof(float));
    float mins[16], maxs[16], dmin[16], dmax[16];
    for (int sign = -1; sign <= 1; sign += 2) {
        /* [0, 1] has nudged_min = +0; [-1, 0] has nudged_max = +0. */
        const float lo = sign < 0 ? 0.0f : -1.0f, hi = sign < 0 ? 1.0f : 0.0f;
        for (size_t i = 0; i < n; ++i) {
            const uint32_t mag = i % 3 == 0 ? 1u : i % 3 == 1 ? 0x7fffffu : 1u + (uint32_t)below(0x7fffffu);
            x[i] = from_bits((sign < 0 ? 0x80000000u : 0u) | mag);
            g[i] = (float)(i % 1000) + 0.5f;
        }
        for (size_t c = 0; c < channels; ++c) mins[c] = lo, maxs[c] = hi;
        for (int k = 0; k < n_isas; ++k)
            for (int threads = 1; threads <= THREADS_MAX; ++threads) {
                const char *name = fq_isa_name(isas[k]);
                set_isa_threads(isas[k], threads);
                fq_status s = fq_f32_vars_grad(g, x, dx, n, lo, hi, 8, 0, dmin, dmax);
                size_t bad = 0;
                for (size_t i = 0; i < n; ++i) bad += to_bits(dx[i]) != to_bits(g[i]);
                expect(s == FQ_OK && bad == 0 && to_bits(dmin[0]) == 0 && to_bits(dmax[0]) == 0,
                       "%s threads=%d: vars_grad [%g, %g] with %s denormal x: %zu elements masked, "
                       "dmin=%a dmax=%a (denormals must count as 0)", name, threads, (double)lo, (double)hi,
                       sign < 0 ? "negative" : "positive", bad, (double)dmin[0], (double)dmax[0]);
                s = fq_f32_args_grad(g, x, dx, n, lo, hi, 8, 0);
                bad = 0;
                for (size_t i = 0; i < n; ++i) bad += to_bits(dx[i]) != to_bits(g[i]);
                expect(s == FQ_OK && bad == 0, "%s threads=%d: args_grad with denormal x: %zu masked", name,
                       threads, bad);
                s = fq_f32_vars_per_channel_grad(g, x, dx, rows * channels, channels, mins, maxs, 8, 0, dmin,
                                                 dmax);
                bad = 0;
                for (size_t i = 0; i < rows * channels; ++i) bad += to_bits(dx[i]) != to_bits(g[i]);
                for (size_t c = 0; c < channels; ++c) bad += to_bits(dmin[c]) != 0 || to_bits(dmax[c]) != 0;
                expect(s == FQ_OK && bad == 0, "%s threads=%d: per_channel_grad with denormal x: %zu wrong",
                       name, threads, bad);
                /* A denormal range is the zero range: all +0, even for NaN x. */
                const float keep = x[5];
                x[5] = NAN;
                s = fq_f32_vars(x, dx, n, -1e-40f, 1e-40f, 8, 0);
                x[5] = keep;
                bad = 0;
                for (size_t i = 0; i < n; ++i) bad += to_bits(dx[i]) != 0;
                expect(s == FQ_OK && bad == 0, "%s threads=%d: vars over [-1e-40, 1e-40]: %zu not +0", name,
                       threads, bad);
            }
    }
    /* The caller's floating-point environment comes back unchanged. */
    volatile float tiny = 1e-40f, one = 1.0f;
    expect(tiny * one != 0.0f && tiny + 0.0f != 0.0f, "denormals flushed in the caller after fqcore calls");
    free(x);
    free(g);
    free(dx);
    fq_set_num_threads(1);
}

/* ---------------- per-tensor sweeps ---------------- */

static void check_tensor(op_id op, size_t n, float min, float max, int bits, int narrow, x_mode xm,
                         g_mode gm, size_t x_off, size_t g_off, size_t out_off, int thread_sweep,
                         alias_kind alias) {
    inputs in;
    inputs_make(&in, n, x_off, g_off);
    fill_tensor(&in, n, min, max, bits, narrow, xm, gm);
    char tag[64];
    snprintf(tag, sizeof tag, "%s %s", x_mode_names[xm], g_mode_names[gm]);
    const float mins[1] = {min}, maxs[1] = {max};
    const call c = {op, n, 1, in.x, op_is_grad(op) ? in.g : NULL, mins, maxs, bits, narrow,
                    x_off, g_off, out_off, tag};
    check_call(&c, thread_sweep, alias);
    inputs_free(&in);
}

/* Every size 0..70 and around 128, 256, 1000; misaligned starts; in-place calls. */
static void test_small_sizes(void) {
    size_t sizes[100], count = 0;
    for (size_t n = 0; n <= 70; ++n) sizes[count++] = n;
    const size_t extra[] = {127, 128, 129, 255, 256, 257, 1000};
    for (size_t k = 0; k < sizeof extra / sizeof extra[0]; ++k) sizes[count++] = extra[k];
    unsigned counter = 0;
    for (size_t s = 0; s < count; ++s)
        for (int rep = 0; rep < 4; ++rep)
            for (int op = OP_ARGS; op <= OP_VARS_GRAD; ++op, ++counter) {
                float min, max;
                pick_range(&min, &max, 25);
                const int bits = 2 + (int)(counter * 7 % 15), narrow = (int)(counter / 3 & 1);
                const size_t x_off = rep == 0 ? 0 : 1 + below(MAX_OFFSET - 1);
                const size_t g_off = rep == 0 ? 0 : random_offset();
                const size_t out_off = rep == 0 ? 0 : 1 + below(MAX_OFFSET - 1);
                alias_kind alias = ALIAS_NONE;
                if (rep == 3) alias = op_is_grad((op_id)op) && (counter & 2) ? ALIAS_G : ALIAS_X;
                check_tensor((op_id)op, sizes[s], min, max, bits, narrow, (x_mode)(counter % 3),
                             (g_mode)(counter / 2 % 5), x_off, g_off, out_off, 0, alias);
            }
}

/* Every special range, num_bits 2..16 and both narrow_range values, on a few hundred elements. */
static void test_param_sweep(void) {
    unsigned counter = 0;
    for (size_t r = 0; r < N_SPECIAL_RANGES + 10; ++r) {
        float min, max;
        if (r < N_SPECIAL_RANGES) {
            min = special_ranges[r][0];
            max = special_ranges[r][1];
        } else {
            random_range(&min, &max);
        }
        for (int bits = 2; bits <= 16; ++bits)
            for (int narrow = 0; narrow <= 1; ++narrow)
                for (int op = OP_ARGS; op <= OP_VARS_GRAD; ++op, ++counter)
                    check_tensor((op_id)op, 48 + below(160), min, max, bits, narrow, (x_mode)(counter % 3),
                                 (g_mode)(counter / 3 % 5), random_offset(), random_offset(),
                                 random_offset(), 0, ALIAS_NONE);
    }
}

/* Around the 16384-element sum blocks, and sizes that run on several threads. */
static void test_large_sizes(void) {
    const size_t sizes[] = {16383, 16384, 16385, 50000, 100003, BIG};
    const struct { float min, max; int bits, narrow; x_mode xm; g_mode gm; } configs[] = {
        {-0.1f, 0.2f, 8, 0, X_MIXED, G_CANCEL},
        {-0.1f, 0.2f, 8, 0, X_MIXED, G_PAIRS},
        {-1.0f, 3.0f, 4, 1, X_INSIDE, G_PAIRS},
        {-0.3f, 0.7f, 16, 1, X_INSIDE, G_CLEAN},
        {-6.0f, 6.0f, 8, 1, X_INSIDE, G_ONE_BAD},
        {-2.5f, 4.5f, 3, 0, X_SPECIAL, G_DIRTY},
        {1.0f, -1.0f, 8, 0, X_MIXED, G_CANCEL},
        {0.3f, 0.3f, 5, 0, X_MIXED, G_CLEAN},
        {NAN, 1.0f, 8, 0, X_MIXED, G_CLEAN},
        {0.0f, 0.0f, 8, 0, X_SPECIAL, G_DIRTY},
        {0.0f, 0.0f, 0, 0, X_MIXED, G_PAIRS}, /* a random range, see below */
    };
    const size_t n_configs = sizeof configs / sizeof configs[0];
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s)
        for (size_t k = 0; k < n_configs; ++k) {
            float min = configs[k].min, max = configs[k].max;
            int bits = configs[k].bits;
            if (bits == 0) {
                random_range(&min, &max);
                bits = 2 + (int)below(15);
            }
            const int sweep = sizes[s] >= 65536;
            for (int op = OP_ARGS; op <= OP_VARS_GRAD; ++op)
                check_tensor((op_id)op, sizes[s], min, max, bits, configs[k].narrow, configs[k].xm,
                             configs[k].gm, random_offset(), random_offset(), random_offset(), sweep,
                             ALIAS_NONE);
        }
    /* Large in-place calls on several threads. */
    for (int op = OP_ARGS; op <= OP_VARS_GRAD; ++op)
        check_tensor((op_id)op, BIG, -0.1f, 0.2f, 8, 0, X_MIXED, G_CANCEL, 3, 5, 7, 1,
                     op_is_grad((op_id)op) && op != OP_ARGS_GRAD ? ALIAS_G : ALIAS_X);
}

/* ---------------- per-channel sweeps ---------------- */

static void check_channel(op_id op, size_t channels, size_t rows, int bits, int narrow,
                          size_t special_pct, x_mode xm, g_mode gm, int thread_sweep, alias_kind alias) {
    const size_t n = channels * rows;
    const size_t x_off = random_offset(), g_off = random_offset(), out_off = random_offset();
    inputs in;
    inputs_make(&in, n, x_off, g_off);
    float *mins = malloc(channels * sizeof(float)), *maxs = malloc(channels * sizeof(float));
    fill_channels(&in, n, channels, mins, maxs, bits, narrow, special_pct, xm, gm);
    char tag[64];
    snprintf(tag, sizeof tag, "%s %s special=%zu%%", x_mode_names[xm], g_mode_names[gm], special_pct);
    const call c = {op, n, channels, in.x, op == OP_CHAN_GRAD ? in.g : NULL, mins, maxs, bits, narrow,
                    x_off, g_off, out_off, tag};
    check_call(&c, thread_sweep, alias);
    free(mins);
    free(maxs);
    inputs_free(&in);
}

static const size_t channel_counts[] = {1, 2, 3, 5, 7, 8, 15, 16, 17, 24, 31, 32, 33, 64, 96, 100, 128, 255, 256, 257,
                                        1000, 5000};

static void test_per_channel(void) {
    const size_t row_counts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 16, 17, 33, 100, 257};
    unsigned counter = 0;
    for (size_t ci = 0; ci < sizeof channel_counts / sizeof channel_counts[0]; ++ci)
        for (size_t ri = 0; ri < sizeof row_counts / sizeof row_counts[0]; ++ri) {
            const size_t channels = channel_counts[ci], rows = row_counts[ri];
            if (channels * rows > 300000) continue;
            for (int op = OP_CHAN; op <= OP_CHAN_GRAD; ++op, ++counter)
                check_channel((op_id)op, channels, rows, 2 + (int)(counter * 5 % 15), (int)(counter / 2 & 1),
                              counter % 4 == 0 ? 30 : 5, (x_mode)(counter % 3), (g_mode)(counter / 3 % 5), 0,
                              ALIAS_NONE);
        }
    /* In place: out == x for the forward op, dx == x and dx == g for the gradient. */
    for (size_t ci = 0; ci < sizeof channel_counts / sizeof channel_counts[0]; ++ci)
        for (size_t rows = 1; rows <= 9; rows += 4) {
            const size_t channels = channel_counts[ci];
            check_channel(OP_CHAN, channels, rows, 8, 0, 20, X_MIXED, G_CLEAN, 0, ALIAS_X);
            check_channel(OP_CHAN_GRAD, channels, rows, 8, 0, 20, X_MIXED, G_CLEAN, 0, ALIAS_X);
            check_channel(OP_CHAN_GRAD, channels, rows, 8, 0, 20, X_MIXED, G_CLEAN, 0, ALIAS_G);
        }
    /* Every bit width and narrow_range on a channel count that exercises vector bodies and tails. */
    for (int bits = 2; bits <= 16; ++bits)
        for (int narrow = 0; narrow <= 1; ++narrow)
            for (int op = OP_CHAN; op <= OP_CHAN_GRAD; ++op)
                check_channel((op_id)op, 37, 11, bits, narrow, 25, X_MIXED, G_CLEAN, 0, ALIAS_NONE);
}

/* Shapes of at least BIG elements: row blocks of the sums, the split of positions across threads,
   padded and unpadded periods. */
static void test_per_channel_large(void) {
    const size_t shapes[][2] = {{1, 200000}, {3, 70000}, {5, 40001}, {16, 12500}, {17, 12000},
                                {100, 2000}, {257, 800}, {1000, 200}, {2056, 100}, {4096, 50},
                                {5000, 41}, {33, 6200}};
    unsigned counter = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; ++k)
        for (int op = OP_CHAN; op <= OP_CHAN_GRAD; ++op, ++counter)
            check_channel((op_id)op, shapes[k][0], shapes[k][1], 2 + (int)(counter * 3 % 15),
                          (int)(counter & 1), 10, counter % 3 == 2 ? X_INSIDE : X_MIXED,
                          counter % 4 == 1 ? G_ONE_BAD : counter % 4 == 3 ? G_CANCEL : G_PAIRS, 1, ALIAS_NONE);
}

/* Calls beyond FQ_IN_CACHE_ELEMENTS with short periods of whole vectors: the forward's flat walk
   (one thread: a thread's share of the rows is what decides), and periods that do not take it. */
static void test_per_channel_flat_walk(void) {
    const size_t shapes[][2] = {{128, 16400}, {256, 8200}, {16, 131080}, {144, 14600}, {130, 16200}};
    unsigned counter = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; ++k)
        for (int op = OP_CHAN; op <= OP_CHAN_GRAD; ++op, ++counter)
            check_channel((op_id)op, shapes[k][0], shapes[k][1], 2 + (int)(counter * 5 % 15),
                          (int)(counter & 1), 10, counter % 2 ? X_INSIDE : X_MIXED, G_PAIRS, 1,
                          ALIAS_NONE);
}

/* Each row walk of the per-channel forward (common/kernel_choices.h), forced whatever this CPU is: rows 4 KiB
   apart in and past L2, other periods past L2, periods with a tail, and short periods in cache
   (flat under FQ_SHORT_ROWS_FLAT), on 1 to 4 threads. */
static void test_per_channel_row_walks(void) {
    const size_t shapes[][2] = {{1024, 9}, {1024, 260}, {512, 520}, {384, 700}, {1000, 300}, {48, 6000},
                                {128, 576}, {16, 33}, {256, 3}, {144, 50}, {130, 40}};
    unsigned counter = 0;
    for (int walk = 0; walk < FQ_ROW_WALK_COUNT; ++walk) {
        fq_force_row_walk(walk);
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; ++k, ++counter)
            check_channel(OP_CHAN, shapes[k][0], shapes[k][1], 2 + (int)(counter * 5 % 15),
                          (int)(counter & 1), 10, counter % 2 ? X_INSIDE : X_MIXED, G_PAIRS, 1,
                          ALIAS_NONE);
    }
    fq_force_row_walk(-1);
}

/* The per-channel gradient's two walk choices (common/kernel_choices.h), in strips and without
   them, adding a loud group's vectors alone and all of them, each forced on every ISA whatever this
   CPU is. Short periods in L2 whose grids do not all fit the registers, with whole strips, a last
   strip of fewer vectors and positions past the last whole vector; row counts around a strip's
   step of four rows; periods whose grids fit the registers (16, 48, 128 positions) and longer rows
   (256, 1024), in L2 where the loud vectors may go alone; the harness's x and g modes, among them
   NaN and infinite g (loud where x is inside) and sums of pairs that cancel (G_PAIRS), whose bits
   show the order of their terms; dx in place of x or g; few rows on 2 to 4 threads, which then
   split each row's positions. */
static void test_per_channel_gradient_choices(void) {
    const size_t shapes[][2] = {{40, 9},    {48, 300},  {100, 7},   {128, 512}, {144, 33},
                                {200, 13},  {256, 3},   {33, 130},  {250, 2},   {96, 1},
                                {64, 4},    {136, 6},   {40, 41},   {100, 22},  {256, 17},
                                {72, 64},   {48, 2000}, {256, 600}, {16, 300},  {1024, 16},
                                {130, 40},  {3, 70}};
    static const alias_kind aliases[] = {ALIAS_NONE, ALIAS_X, ALIAS_G};
    unsigned counter = 0;
    for (int strips = 0; strips <= 1; ++strips)
        for (int skips = 0; skips <= 1; ++skips) {
            fq_force_grad_strips(strips);
            fq_force_grad_skips(skips);
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; ++k, ++counter)
                check_channel(OP_CHAN_GRAD, shapes[k][0], shapes[k][1], 2 + (int)(counter * 5 % 15),
                              (int)(counter & 1), counter % 2 ? 30 : 5, (x_mode)(counter % 3),
                              counter % 2 ? G_PAIRS : (g_mode)(counter / 2 % 4), 1,
                              aliases[counter % 3]);
        }
    fq_force_grad_strips(-1);
    fq_force_grad_skips(-1);
}

/* The Args forward with its subtractions on the FMAs and as plain ones (common/kernel_choices.h),
   forced on every ISA whatever this CPU is: sizes around the four-vector step and the aligning
   head, misaligned starts, every special range, 2 to 16 bits, both narrow_range values, 1 to 4
   threads at the largest size. */
static void test_args_forward_pipes(void) {
    const size_t sizes[] = {1, 15, 16, 17, 63, 64, 65, 127, 129, 1000, 100003};
    unsigned counter = 0;
    for (int on_fma = 0; on_fma <= 1; ++on_fma) {
        fq_force_forward_on_fma(on_fma);
        for (size_t r = 0; r < N_SPECIAL_RANGES; ++r)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s, ++counter) {
                const int last = s + 1 == sizeof sizes / sizeof sizes[0];
                check_tensor(OP_ARGS, sizes[s], special_ranges[r][0], special_ranges[r][1],
                             2 + (int)(counter * 7 % 15), (int)(counter & 1), (x_mode)(counter % 3),
                             (g_mode)(counter / 3 % 5), counter % 2 ? random_offset() : 0, 0,
                             counter % 3 ? random_offset() : 0, last, ALIAS_NONE);
            }
    }
    fq_force_forward_on_fma(-1);
}

/* ---------------- the per-channel nudge ---------------- */

/* Each ISA's nudge_channels against fq_nudge on the same ranges, every parameter bit for bit (NaN
   bits included), under the flush-to-zero the entry points switch to. */
static void check_nudge(const float *mins, const float *maxs, size_t channels, int bits, int narrow) {
    const size_t floats = (channels + FQ_GRID_CHUNK - 1) / FQ_GRID_CHUNK * FQ_GRID_CHUNK * FQ_GRID_PARAMS;
    float *grid = malloc(floats * sizeof(float));
    for (int i = 0; i < n_isas; ++i) {
        const fq_fpenv saved = fq_fpenv_enter();
        fq_fake_quant_kernels_for(isas[i])->nudge_channels(mins, maxs, channels, bits, narrow, grid);
        fq_fpenv_leave(saved);
        for (size_t c = 0; c < channels; ++c) {
            fq_grid want;
            const fq_fpenv saved_again = fq_fpenv_enter();
            fq_nudge(mins[c], maxs[c], bits, narrow, &want);
            fq_fpenv_leave(saved_again);
            const float wanted[FQ_GRID_PARAMS] = {want.nudged_min, want.nudged_max, want.scale,
                                                  want.inv_scale, want.quant_zero};
            for (int k = 0; k < FQ_GRID_PARAMS; ++k) {
                const float got = grid[fq_grid_offset(c, k)];
                expect(to_bits(got) == to_bits(wanted[k]),
                       "nudge %s: [%a, %a] bits=%d narrow=%d param %d: %08x, want %08x",
                       fq_isa_name(isas[i]), (double)mins[c], (double)maxs[c], bits, narrow, k,
                       to_bits(got), to_bits(wanted[k]));
            }
        }
    }
    free(grid);
}

/* Every pair of edge values (zero and equal ranges, reversed, zero inside and outside, denormals,
   huge and non-finite), ranges whose zero point is an exact tie, random ranges and random bits. */
static void test_nudge(void) {
    static const float edges[] = {
        0.0f, -0.0f, 1e-40f, -1e-40f, FLT_MIN, -FLT_MIN, 1e-38f, -1e-38f, 1e-30f, 0.1f, -0.1f,
        0.3f, -0.3f, 1.0f, -1.0f, 6.0f, -6.0f, 100.5f, -100.5f, 65504.0f, -65504.0f, 1e30f,
        -1e30f, 3e38f, -3e38f, FLT_MAX, -FLT_MAX, INFINITY, -INFINITY, NAN, -NAN};
    const size_t n_edges = sizeof edges / sizeof edges[0], pairs = n_edges * n_edges;
    float *mins = malloc(pairs * sizeof(float)), *maxs = malloc(pairs * sizeof(float));
    for (size_t k = 0; k < pairs; ++k) {
        mins[k] = edges[k / n_edges];
        maxs[k] = edges[k % n_edges];
    }
    for (int bits = 2; bits <= 16; ++bits)
        for (int narrow = 0; narrow <= 1; ++narrow) check_nudge(mins, maxs, pairs, bits, narrow);
    /* Zero points at exact ties k + 0.5 (scale 1 on 8 bits): roundf goes away from zero. */
    size_t n = 0;
    for (int k = 0; k < 255; ++k, ++n) {
        mins[n] = -((float)k + 0.5f);
        maxs[n] = mins[n] + 255.0f;
    }
    check_nudge(mins, maxs, n, 8, 0);
    /* Random ranges, then random bit patterns (NaNs, denormals, anything), on every tail length. */
    for (size_t channels = 1; channels <= 40; ++channels) {
        for (size_t c = 0; c < channels; ++c) random_range(&mins[c], &maxs[c]);
        check_nudge(mins, maxs, channels, 2 + (int)(channels % 15), (int)(channels & 1));
        for (size_t c = 0; c < channels; ++c) {
            mins[c] = from_bits((uint32_t)rnd64());
            maxs[c] = below(2) ? from_bits((uint32_t)rnd64()) : -mins[c];
        }
        check_nudge(mins, maxs, channels, 2 + (int)(channels * 7 % 15), (int)(channels / 2 & 1));
    }
    free(mins);
    free(maxs);
}

int main(void) {
    static const harness_section sections[] = {
        {"statuses and settings", test_errors},
        {"spec values", test_spec_values},
        {"flush-to-zero", test_flush_to_zero},
        {"per-tensor sizes 0..1000", test_small_sizes},
        {"per-tensor ranges x bits x narrow", test_param_sweep},
        {"per-tensor large, threads 1..4", test_large_sizes},
        {"Args forward, both subtractions", test_args_forward_pipes},
        {"per-channel nudge vs fq_nudge", test_nudge},
        {"per-channel shapes", test_per_channel},
        {"per-channel large, threads 1..4", test_per_channel_large},
        {"per-channel flat walk, threads 1..4", test_per_channel_flat_walk},
        {"per-channel row walks, threads 1..4", test_per_channel_row_walks},
        {"per-channel choices, threads 1..4", test_per_channel_gradient_choices},
    };
    return harness_main("C kernel harness (fake quantization)", sections,
                        sizeof sections / sizeof sections[0]);
}
