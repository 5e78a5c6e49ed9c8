/* C test harness, fused batch norm: every ISA and thread count against scalar on one thread, bit for
   bit, through fqcore.h; and checks that need no scalar run (independent rounding, known values,
   long-double statistics, statuses). */
#include <fenv.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_norm/bn_kernels.h"
#include "common/kernel_choices.h"
#include "fqcore.h"
#include "harness.h"

#define GUARD_BYTES ((size_t)64) /* guard on each side of every output array */
#define MAX_OFFSET ((size_t)16)  /* starts are misaligned by 0..15 elements */
#define PARALLEL_MIN ((size_t)65536) /* dispatch.c: from here a call may use several threads */
#define EPS_DEFAULT 1e-4f

/* ---------------- element types, and conversions written apart from bn_convert.h ---------------- */

static const fq_dtype dtypes[3] = {FQ_DTYPE_F32, FQ_DTYPE_F16, FQ_DTYPE_BF16};
static const char *const dtype_names[3] = {"f32", "f16", "bf16"};

static size_t esize(fq_dtype d) { return d == FQ_DTYPE_F32 ? 4 : 2; }

/* Exact, by arithmetic on the fields. A NaN comes back quiet with its payload, as the spec says. */
static float ref_f16_to_f32(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 0x3ff;
    const float sign = (h & 0x8000) ? -1.0f : 1.0f;
    if (e == 31) {
        if (m == 0) return sign * INFINITY;
        return from_bits(((uint32_t)(h & 0x8000) << 16) | 0x7fc00000u | ((uint32_t)m << 13));
    }
    if (e == 0) return sign * ldexpf((float)m, -24);
    return sign * ldexpf((float)(m | 0x400), e - 25);
}

static float ref_bf16_to_f32(uint16_t b) { return from_bits((uint32_t)b << 16); }

/* Round to nearest even through double arithmetic: the number of quanta of the result's binade,
   rounded by nearbyint (the harness runs in the default rounding mode), times the quantum. A float32
   denormal counts as zero (the kernels' inputs never hold one: they come out of flush-to-zero
   arithmetic). */
static uint16_t ref_f32_to_f16(float v) {
    const uint32_t bits = to_bits(v);
    const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    if (isnan(v)) return (uint16_t)(sign | 0x7e00u | ((bits >> 13) & 0x1ffu));
    const double a = fabs((double)v);
    if (a < (double)FLT_MIN) return sign;
    if (isinf(v)) return (uint16_t)(sign | 0x7c00u);
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int q = e - 11;
    if (q < -24) q = -24;
    const double rounded = ldexp(nearbyint(ldexp(a, -q)), q);
    if (rounded > 65504.0) return (uint16_t)(sign | 0x7c00u);
    if (rounded < 0x1p-14) return (uint16_t)(sign | (uint16_t)ldexp(rounded, 24));
    frexp(rounded, &e);
    const unsigned mantissa = (unsigned)ldexp(rounded, 11 - e) - 1024u;
    return (uint16_t)(sign | (unsigned)(e + 14) << 10 | mantissa);
}

static uint16_t ref_f32_to_bf16(float v) {
    const uint32_t bits = to_bits(v);
    if (isnan(v)) return (uint16_t)((bits >> 16) | 0x40u);
    if (isinf(v) || v == 0.0f) return (uint16_t)(bits >> 16);
    const double a = fabs((double)v);
    int e;
    frexp(a, &e);
    int q = e - 8;
    if (q < -133) q = -133; /* bfloat16 denormals are float32 denormals with 7 bits */
    const double rounded = ldexp(nearbyint(ldexp(a, -q)), q);
    const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    if (rounded >= 0x1p128) return (uint16_t)(sign | 0x7f80u);
    return (uint16_t)(sign | (to_bits((float)rounded) >> 16));
}

/* The stored bits of element i. */
static uint32_t raw_at(const void *a, size_t i, fq_dtype d) {
    if (d == FQ_DTYPE_F32) return to_bits(((const float *)a)[i]);
    return ((const uint16_t *)a)[i];
}

static float value_at(const void *a, size_t i, fq_dtype d) {
    switch (d) {
    case FQ_DTYPE_F16: return ref_f16_to_f32(((const uint16_t *)a)[i]);
    case FQ_DTYPE_BF16: return ref_bf16_to_f32(((const uint16_t *)a)[i]);
    default: return ((const float *)a)[i];
    }
}

static void put_raw(void *a, size_t i, fq_dtype d, uint32_t bits) {
    if (d == FQ_DTYPE_F32) ((float *)a)[i] = from_bits(bits);
    else ((uint16_t *)a)[i] = (uint16_t)bits;
}

/* v rounded to the type's bits. */
static uint32_t round_to(float v, fq_dtype d) {
    switch (d) {
    case FQ_DTYPE_F16: return ref_f32_to_f16(v);
    case FQ_DTYPE_BF16: return ref_f32_to_bf16(v);
    default: return to_bits(v);
    }
}

static void put_value(void *a, size_t i, fq_dtype d, float v) { put_raw(a, i, d, round_to(v, d)); }

/* The kernels' float32 arithmetic runs with denormals flushed, inputs and results. */
static float ftz(float v) { return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v; }

/* ---------------- buffers with guards and misaligned starts ---------------- */

typedef struct {
    unsigned char *base, *p;
    size_t n, bytes, total;
    unsigned char fill;
} buffer;

static void buffer_make(buffer *b, size_t n, size_t element_size, size_t offset, unsigned char fill) {
    b->n = n;
    b->bytes = n * element_size;
    b->total = b->bytes + 2 * GUARD_BYTES + MAX_OFFSET * element_size;
    b->base = xmalloc_aligned(b->total);
    b->p = b->base + GUARD_BYTES + offset * element_size;
    b->fill = fill;
    memset(b->base, fill, b->total);
}

static int buffer_guards_ok(const buffer *b) {
    for (const unsigned char *q = b->base; q < b->p; ++q)
        if (*q != b->fill) return 0;
    for (const unsigned char *q = b->p + b->bytes; q < b->base + b->total; ++q)
        if (*q != b->fill) return 0;
    return 1;
}

static void buffer_free(buffer *b) { free(b->base); }

/* ---------------- one call of the API ---------------- */

typedef enum { EP_TRAIN, EP_INFER, EP_GRAD_TRAIN, EP_GRAD_INFER, EP_COUNT } entry;
static const char *const entry_names[] = {"forward_training", "forward_inference", "grad_training",
                                          "grad_inference"};
static const char *const stat_names[2][4] = {
    {"batch_mean", "batch_variance", "saved_mean", "saved_variance"},
    {"scale_backprop", "offset_backprop", "", ""}};

static int is_grad(entry e) { return e == EP_GRAD_TRAIN || e == EP_GRAD_INFER; }
static size_t n_stats(entry e) { return e == EP_TRAIN ? 4 : e == EP_INFER ? 0 : 2; }

/* Where the output lives: its own array, or the array of x (forward, gradient) or of dy. */
typedef enum { ALIAS_NONE, ALIAS_X, ALIAS_DY } alias_kind;
static const char *const alias_names[] = {"", " out==x", " dx==dy"};

typedef struct {
    entry ep;
    fq_dtype dtype;
    fq_bn_shape shape;
    const void *x, *dy;  /* at their (possibly misaligned) starts */
    const float *scale, *offset;
    const float *mean, *var; /* training forward: mean_in / variance_in (NULL allowed when factor 1) */
    float epsilon, factor;
    size_t out_off;
    const char *tag;
} bn_call;

static size_t call_count(const bn_call *c) { return c->shape.outer * c->shape.channels * c->shape.inner; }

static size_t channel_of(const fq_bn_shape *s, size_t i) {
    return s->layout == FQ_BN_CHANNELS_LAST ? i % s->channels : i / s->inner % s->channels;
}

/* Element k (in memory order) of channel c. */
static size_t element_of(const fq_bn_shape *s, size_t c, size_t k) {
    const size_t o = k / s->inner, j = k % s->inner;
    return s->layout == FQ_BN_CHANNELS_LAST ? (o * s->inner + j) * s->channels + c
                                            : (o * s->channels + c) * s->inner + j;
}

static fq_status invoke(const bn_call *c, const void *x, const void *dy, void *out, float *const st[4]) {
    switch (c->ep) {
    case EP_TRAIN:
        return fq_bn_forward_training(x, c->dtype, c->shape, c->scale, c->offset, c->epsilon, c->factor,
                                      c->mean, c->var, out, st[0], st[1], st[2], st[3]);
    case EP_INFER:
        return fq_bn_forward_inference(x, c->dtype, c->shape, c->scale, c->offset, c->mean, c->var,
                                       c->epsilon, out);
    default:
        return fq_bn_grad(dy, x, c->dtype, c->shape, c->scale, c->mean, c->var, c->epsilon,
                          c->ep == EP_GRAD_TRAIN, out, st[0], st[1]);
    }
}

static int dtype_index(fq_dtype d) { return d == FQ_DTYPE_F16 ? 1 : d == FQ_DTYPE_BF16 ? 2 : 0; }

static void describe(const bn_call *c, char *text, size_t size) {
    snprintf(text, size, "%s %s %s outer=%zu channels=%zu inner=%zu eps=%a factor=%g out_off=%zu [%s]",
             entry_names[c->ep], dtype_names[dtype_index(c->dtype)],
             c->shape.layout == FQ_BN_CHANNELS_LAST ? "channels-last" : "channels-first",
             c->shape.outer, c->shape.channels, c->shape.inner, (double)c->epsilon, (double)c->factor,
             c->out_off, c->tag);
}

typedef struct {
    fq_status status;
    buffer out, stats[4];
    const void *untouched; /* what `out` holds if the call writes nothing (an aliased input) */
} result;

static void run(const bn_call *c, fq_isa isa, int threads, alias_kind alias, unsigned char fill,
                result *r) {
    set_isa_threads(isa, threads);
    const size_t n = call_count(c), es = esize(c->dtype);
    buffer_make(&r->out, n, es, c->out_off, fill);
    float *st[4];
    for (int k = 0; k < 4; ++k) {
        buffer_make(&r->stats[k], c->shape.channels, sizeof(float), 0, fill);
        st[k] = (float *)(void *)r->stats[k].p;
    }
    const void *x = c->x, *dy = c->dy;
    r->untouched = NULL;
    if (alias != ALIAS_NONE) {
        r->untouched = alias == ALIAS_X ? x : dy;
        if (n) memcpy(r->out.p, r->untouched, n * es);
        if (alias == ALIAS_X) x = r->out.p;
        else dy = r->out.p;
    }
    r->status = invoke(c, x, dy, r->out.p, st);
}

static void result_free(result *r) {
    buffer_free(&r->out);
    for (int k = 0; k < 4; ++k) buffer_free(&r->stats[k]);
}

static const float *stat_of(const result *r, int k) { return (const float *)(const void *)r->stats[k].p; }

/* Which channels must match NaN payloads too. Where two NaNs of different bits meet in one
   operation, the result's payload is the first operand's (x86: always; AArch64: the first quiet one
   after signalling ones), and C leaves the operand order of a commutative + or * to the compiler,
   which orders them differently in the scalar loop, in each ISA's vector loop and in each element
   type's instance of it. Only NaNs of one payload meet when a channel holds no NaN input (NaNs it
   makes are all the default NaN), or exactly one NaN input and nothing that makes a default NaN
   (no infinity, variance + epsilon > 0): then every bit must agree. Elsewhere a NaN must stay a
   NaN, and all other values agree bit for bit. */
static int is_nan_bits(uint32_t bits, fq_dtype d) {
    switch (d) {
    case FQ_DTYPE_F16: return (bits & 0x7fffu) > 0x7c00u;
    case FQ_DTYPE_BF16: return (bits & 0x7fffu) > 0x7f80u;
    default: return (bits & 0x7fffffffu) > 0x7f800000u;
    }
}

static int is_inf_bits(uint32_t bits, fq_dtype d) {
    switch (d) {
    case FQ_DTYPE_F16: return (bits & 0x7fffu) == 0x7c00u;
    case FQ_DTYPE_BF16: return (bits & 0x7fffu) == 0x7f80u;
    default: return (bits & 0x7fffffffu) == 0x7f800000u;
    }
}

/* A finite value so large (the largest float32 or bfloat16, which special_bits puts in x and dy)
   that a product or sum with it may overflow: +inf and -inf that then meet make a NaN of their
   own. */
static int is_huge_bits(uint32_t bits, fq_dtype d) {
    if (d == FQ_DTYPE_F16 || is_nan_bits(bits, d) || is_inf_bits(bits, d)) return 0;
    const uint32_t magnitude = d == FQ_DTYPE_BF16 ? (bits & 0x7fffu) << 16 : bits & 0x7fffffffu;
    return magnitude >= 0x71800000u; /* 2^100 */
}

/* Set by a test whose data lets only one NaN into each operation by construction. */
static int strict_all;

static unsigned char *payload_strict_channels(const bn_call *c) {
    const size_t C = c->shape.channels, n = call_count(c);
    if (strict_all) {
        unsigned char *all = malloc(C ? C : 1);
        memset(all, 1, C ? C : 1);
        return all;
    }
    unsigned *nans = calloc(C ? C : 1, sizeof(unsigned)), *infs = calloc(C ? C : 1, sizeof(unsigned));
    unsigned char *strict = malloc(C ? C : 1);
    for (size_t i = 0; i < n; ++i) {
        const size_t ch = channel_of(&c->shape, i);
        const uint32_t xb = raw_at(c->x, i, c->dtype);
        nans[ch] += is_nan_bits(xb, c->dtype);
        infs[ch] += is_inf_bits(xb, c->dtype) || is_huge_bits(xb, c->dtype);
        if (is_grad(c->ep)) {
            const uint32_t db = raw_at(c->dy, i, c->dtype);
            nans[ch] += is_nan_bits(db, c->dtype);
            infs[ch] += is_inf_bits(db, c->dtype) || is_huge_bits(db, c->dtype);
        }
    }
    for (size_t ch = 0; ch < C; ++ch) {
        float params[4];
        int count = 0, degenerate = 0;
        params[count++] = c->scale[ch];
        if (!is_grad(c->ep)) params[count++] = c->offset[ch];
        if (c->ep != EP_TRAIN || c->factor != 1.0f) {
            params[count++] = c->mean[ch];
            params[count++] = c->var[ch];
            degenerate = c->ep != EP_TRAIN && !((double)c->var[ch] + (double)c->epsilon > 0.0);
        }
        for (int k = 0; k < count; ++k) {
            nans[ch] += isnan(params[k]) != 0;
            infs[ch] += isinf(params[k]) != 0;
        }
        strict[ch] = nans[ch] == 0 || (nans[ch] == 1 && infs[ch] == 0 && !degenerate);
    }
    free(nans);
    free(infs);
    return strict;
}

/* NaN-payload differences let through in channels where several NaNs meet (reported per section). */
static long payload_tolerated;

static int agree(uint32_t got, uint32_t want, fq_dtype d, int strict) {
    if (got == want) return 1;
    if (strict || !is_nan_bits(got, d) || !is_nan_bits(want, d)) return 0;
    ++payload_tolerated;
    return 1;
}

/* Why `got` differs from `ref`, or NULL. `strict` (per channel, see payload_strict_channels):
   NaN payloads must agree too. */
static const char *difference(const bn_call *c, const unsigned char *strict, const result *ref,
                              const result *got, char *why, size_t size) {
    if (got->status != ref->status) {
        snprintf(why, size, "status %d (%s), scalar gave %d (%s)", got->status,
                 fq_status_string(got->status), ref->status, fq_status_string(ref->status));
        return why;
    }
    int guards = buffer_guards_ok(&got->out);
    for (int k = 0; k < 4; ++k) guards = guards && buffer_guards_ok(&got->stats[k]);
    if (!guards) {
        snprintf(why, size, "wrote outside its output arrays");
        return why;
    }
    const size_t n = call_count(c), es = esize(c->dtype);
    if (got->status != FQ_OK) {
        for (size_t i = 0; i < n * es; ++i) {
            const unsigned char want = got->untouched ? ((const unsigned char *)got->untouched)[i]
                                                      : got->out.fill;
            if (got->out.p[i] != want) {
                snprintf(why, size, "failed with status %d but wrote output byte %zu", got->status, i);
                return why;
            }
        }
        return NULL;
    }
    for (size_t i = 0; i < n; ++i) {
        const uint32_t g = raw_at(got->out.p, i, c->dtype), w = raw_at(ref->out.p, i, c->dtype);
        if (!agree(g, w, c->dtype, strict[channel_of(&c->shape, i)])) {
            snprintf(why, size, "out[%zu] (channel %zu) = %a (bits 0x%x), scalar %a (0x%x); x bits 0x%x, "
                     "dy bits 0x%x", i, channel_of(&c->shape, i), (double)value_at(got->out.p, i, c->dtype),
                     g, (double)value_at(ref->out.p, i, c->dtype), w, raw_at(c->x, i, c->dtype),
                     c->dy ? raw_at(c->dy, i, c->dtype) : 0u);
            return why;
        }
    }
    for (size_t k = 0; k < n_stats(c->ep); ++k)
        for (size_t j = 0; j < c->shape.channels; ++j) {
            const float g = stat_of(got, (int)k)[j], w = stat_of(ref, (int)k)[j];
            if (!agree(to_bits(g), to_bits(w), FQ_DTYPE_F32, strict[j])) {
                snprintf(why, size, "%s[%zu] = %a (0x%08x), scalar %a (0x%08x)",
                         stat_names[is_grad(c->ep)][k], j, (double)g, to_bits(g), (double)w, to_bits(w));
                return why;
            }
        }
    return NULL;
}

typedef struct {
    void *x, *dy;
    size_t bytes;
} snapshot;

static snapshot take_snapshot(const bn_call *c) {
    snapshot s = {NULL, NULL, call_count(c) * esize(c->dtype)};
    if (s.bytes) {
        s.x = malloc(s.bytes);
        memcpy(s.x, c->x, s.bytes);
        if (c->dy) {
            s.dy = malloc(s.bytes);
            memcpy(s.dy, c->dy, s.bytes);
        }
    }
    return s;
}

static int inputs_intact(const bn_call *c, const snapshot *s) {
    if (s->bytes == 0) return 1;
    return memcmp(c->x, s->x, s->bytes) == 0 && (c->dy == NULL || memcmp(c->dy, s->dy, s->bytes) == 0);
}

/* Runs `c` on scalar with one thread (the reference), then on every ISA (with `thread_sweep`, on
   1..THREADS_MAX threads; with `alias`, in place), and compares each run with the reference. */
static void check_call(const bn_call *c, int thread_sweep, alias_kind alias) {
    char what[400], why[600];
    snapshot snap = take_snapshot(c);
    unsigned char *strict = payload_strict_channels(c);
    result ref;
    run(c, FQ_ISA_SCALAR, 1, ALIAS_NONE, 0x5a, &ref);
    int guards = buffer_guards_ok(&ref.out);
    for (int k = 0; k < 4; ++k) guards = guards && buffer_guards_ok(&ref.stats[k]);
    describe(c, what, sizeof what);
    if (!expect(ref.status == FQ_OK && guards && inputs_intact(c, &snap),
                "%s: scalar: status %d, wrote outside its outputs or changed an input", what, ref.status)) {
        result_free(&ref);
        free(snap.x);
        free(snap.dy);
        free(strict);
        return;
    }
    /* Every output written: the fill pattern 0x5a5a is no value a kernel makes from these inputs
       often enough to matter, so count only whole runs of it. */
    const size_t n = call_count(c), es = esize(c->dtype);
    size_t untouched = 0;
    for (size_t i = 0; i < n; ++i) {
        size_t b = 0;
        while (b < es && ref.out.p[i * es + b] == 0x5a) ++b;
        untouched += b == es;
    }
    expect(untouched < 1 + n / 64, "%s: scalar left %zu of %zu outputs unwritten", what, untouched, n);
    for (int k = 0; k < n_isas; ++k)
        for (int threads = 1; threads <= (thread_sweep ? THREADS_MAX : 1); ++threads) {
            if (isas[k] == FQ_ISA_SCALAR && threads == 1 && alias == ALIAS_NONE) continue;
            result got;
            run(c, isas[k], threads, alias, 0xa5, &got);
            const char *diff = difference(c, strict, &ref, &got, why, sizeof why);
            if (diff == NULL && !inputs_intact(c, &snap)) diff = "changed an input array";
            const char *note = "";
            if (diff != NULL && alias != ALIAS_NONE) { /* tell an aliasing bug from a plain one */
                result plain;
                char scratch[600];
                run(c, isas[k], threads, ALIAS_NONE, 0xa5, &plain);
                note = difference(c, strict, &ref, &plain, scratch, sizeof scratch) == NULL
                           ? " (only in place: the same call on separate arrays passes)"
                           : " (fails on separate arrays too)";
                result_free(&plain);
            }
            expect(diff == NULL, "%s threads=%d%s: %s: %s%s", fq_isa_name(isas[k]), threads,
                   alias_names[alias], what, diff, note);
            result_free(&got);
        }
    result_free(&ref);
    free(snap.x);
    free(snap.dy);
    free(strict);
}

/* ---------------- inputs ---------------- */

/* Values of each type worth meeting: NaNs (quiet, signalling, payloads), infinities, zeros,
   denormals / half subnormals, the largest finite values, float32 values around 65504..65520. */
static uint32_t special_bits(fq_dtype d, int allow_nonfinite) {
    const size_t pick = allow_nonfinite ? below(12) : 4 + below(8);
    const uint32_t neg = below(2) ? 1u : 0u;
    switch (d) {
    case FQ_DTYPE_F16: {
        const uint16_t s = (uint16_t)(neg << 15);
        switch (pick) {
        case 0: return s | 0x7e00u;
        case 1: return s | (0x7c01u + (uint16_t)below(0x1ff)); /* signalling, with a payload */
        case 2: return s | 0x7e00u | (uint16_t)below(0x200);
        case 3: return s | 0x7c00u;
        case 4:
        case 5: return s; /* ±0 */
        case 6:
        case 7: return s | (uint16_t)(1 + below(0x3ff)); /* subnormal */
        case 8: return s | 0x0001u;
        case 9: return s | 0x7bffu; /* 65504 */
        case 10: return s | 0x0400u;
        default: return s | 0x03ffu;
        }
    }
    case FQ_DTYPE_BF16: {
        const uint16_t s = (uint16_t)(neg << 15);
        switch (pick) {
        case 0: return s | 0x7fc0u;
        case 1: return s | (0x7f81u + (uint16_t)below(0x3f));
        case 2: return s | 0x7fc0u | (uint16_t)below(0x40);
        case 3: return s | 0x7f80u;
        case 4:
        case 5: return s;
        case 6:
        case 7: return s | (uint16_t)(1 + below(0x7f)); /* denormal */
        case 8: return s | 0x477fu; /* 65280 */
        case 9: return s | 0x7f7fu; /* largest finite */
        case 10: return s | 0x0080u;
        default: return s | 0x4780u; /* 65536 */
        }
    }
    default: {
        const uint32_t s = neg << 31;
        switch (pick) {
        case 0: return s | 0x7fc00000u;
        case 1: return s | (0x7f800001u + (uint32_t)below(0x3fffff));
        case 2: return s | 0x7fc00000u | (uint32_t)below(0x400000);
        case 3: return s | 0x7f800000u;
        case 4: return s;
        case 5: return s | (1u + (uint32_t)below(0x7fffff)); /* denormal */
        case 6: return s | 0x477fe000u;                       /* 65504 */
        case 7: return s | 0x477fefffu;                       /* just below 65520 */
        case 8: return s | 0x477ff000u;                       /* 65520 */
        case 9: return s | 0x7f7fffffu;
        case 10: return s | 0x00800000u;
        default: return s | 0x47800000u; /* 65536 */
        }
    }
    }
}

/* Kinds of channel data. */
typedef enum {
    CH_UNIT,     /* mean 0, std 1 */
    CH_FAR,      /* mean 1e4, std 1: the sums' shift matters */
    CH_RANDOM,   /* random mean and spread */
    CH_CONSTANT, /* variance 0 */
    CH_TINY,     /* |x| ~ 1e-6: half subnormals, bf16 fine */
    CH_WIDE,     /* std 1e3 */
    CH_PAIRS,    /* small values and a few pairs +L, -L (x, or dy for the gradients): the pairs
                    cancel exactly, but small values added while an L is pending are rounded away,
                    so the sums see any change in the order of their additions */
    CH_NONFINITE,/* NaN / inf / zeros / denormals sprinkled in */
    CH_ZEROS,    /* zeros and denormals sprinkled in (statistics stay finite) */
    CH_ONE_NAN,  /* a single NaN (any payload, maybe signalling) in x or dy: its bits must carry */
    CH_KINDS
} channel_kind;

typedef struct {
    size_t n;
    fq_bn_shape shape;
    fq_dtype dtype;
    unsigned char *xbase, *dybase;
    void *x, *dy;
    size_t x_off, dy_off;
    float *scale, *offset, *mean, *var;
    channel_kind *kind;
} bn_data;

/* Per-channel parameters whose results cover f16 subnormal outputs (tiny scales), near-overflow
   outputs (large scales and offsets), zero and negative scales. */
static void pick_affine(float *scale, float *offset) {
    switch (below(10)) {
    case 0: *scale = ldexpf(unif(1.0f, 2.0f), -(int)(16 + below(10))); break; /* f16 subnormal y */
    case 1: *scale = unif(2e4f, 4e4f); break;
    case 2: *scale = below(2) ? 0.0f : -0.0f; break;
    case 3: *scale = -unif(0.1f, 3.0f); break;
    default: *scale = unif(0.1f, 3.0f); break;
    }
    switch (below(8)) {
    case 0: *offset = below(2) ? 0.0f : -0.0f; break;
    case 1: *offset = ldexpf(unif(-1.0f, 1.0f), -(int)(14 + below(12))); break;
    case 2: *offset = (below(2) ? 1.0f : -1.0f) * unif(6.5e4f, 6.56e4f); break;
    default: *offset = unif(-2.0f, 2.0f); break;
    }
}

static float kind_value(channel_kind k, float mu, float sd) {
    switch (k) {
    case CH_CONSTANT: return mu;
    case CH_TINY: return unif(-2e-6f, 2e-6f);
    default: return mu + sd * unif(-1.7f, 1.7f);
    }
}

/* Fills x (and dy when `with_dy`) and the per-channel tables. `special_pct`: share of channels
   (in percent) that get special values. */
static void data_make(bn_data *d, fq_dtype dtype, fq_bn_shape shape, int with_dy, size_t special_pct) {
    const size_t C = shape.channels, n = shape.outer * shape.channels * shape.inner, es = esize(dtype);
    d->n = n;
    d->shape = shape;
    d->dtype = dtype;
    d->x_off = below(MAX_OFFSET);
    d->dy_off = below(MAX_OFFSET);
    d->xbase = xmalloc_aligned((n + MAX_OFFSET) * es);
    d->dybase = xmalloc_aligned((n + MAX_OFFSET) * es);
    d->x = d->xbase + d->x_off * es;
    d->dy = d->dybase + d->dy_off * es;
    const size_t tab = C ? C : 1;
    d->scale = malloc(tab * sizeof(float));
    d->offset = malloc(tab * sizeof(float));
    d->mean = malloc(tab * sizeof(float));
    d->var = malloc(tab * sizeof(float));
    d->kind = malloc(tab * sizeof(channel_kind));
    float *mu = malloc(tab * sizeof(float)), *sd = malloc(tab * sizeof(float)),
          *dscale = malloc(tab * sizeof(float));
    for (size_t c = 0; c < C; ++c) {
        channel_kind k = (channel_kind)below(CH_NONFINITE);
        if (below(100) < special_pct) k = (channel_kind)(CH_NONFINITE + below(3));
        d->kind[c] = k;
        switch (k) {
        case CH_UNIT: mu[c] = 0.0f, sd[c] = 1.0f; break;
        case CH_FAR: mu[c] = 1e4f, sd[c] = 1.0f; break;
        case CH_WIDE: mu[c] = unif(-1e3f, 1e3f), sd[c] = 1e3f; break;
        case CH_CONSTANT: mu[c] = unif(-10.0f, 10.0f), sd[c] = 0.0f; break;
        case CH_TINY: mu[c] = 0.0f, sd[c] = 1e-6f; break;
        case CH_PAIRS: mu[c] = 0.0f, sd[c] = dtype == FQ_DTYPE_F16 ? 0x1p-12f : 1.0f; break;
        default: mu[c] = unif(-100.0f, 100.0f), sd[c] = ldexpf(unif(1.0f, 2.0f), (int)below(12) - 8); break;
        }
        pick_affine(&d->scale[c], &d->offset[c]);
        /* Statistics the gradient and inference calls take: near the data, sometimes degenerate. */
        d->mean[c] = mu[c] + sd[c] * unif(-0.1f, 0.1f);
        switch (below(12)) {
        case 0: d->var[c] = 0.0f; break;
        case 1: d->var[c] = below(2) ? NAN : INFINITY; break;
        default: d->var[c] = sd[c] * sd[c] * unif(0.5f, 2.0f); break;
        }
        dscale[c] = ldexpf(1.0f, (int)below(16) - 8);
    }
    for (size_t i = 0; i < n; ++i) {
        const size_t c = channel_of(&shape, i);
        const channel_kind k = d->kind[c];
        if ((k == CH_NONFINITE || k == CH_ZEROS) && below(100) < 6)
            put_raw(d->x, i, dtype, special_bits(dtype, k == CH_NONFINITE));
        else
            put_value(d->x, i, dtype, kind_value(k, mu[c], sd[c]));
        if (!with_dy) continue;
        if (k == CH_NONFINITE && below(100) < 3)
            put_raw(d->dy, i, dtype, special_bits(dtype, 1));
        else if (below(100) < 2)
            put_raw(d->dy, i, dtype, special_bits(dtype, 0));
        else
            put_value(d->dy, i, dtype, dscale[c] * unif(-1.0f, 1.0f));
    }
    /* The pairs of each CH_PAIRS channel, at random elements of the channel. */
    const size_t per_channel = C ? n / C : 0;
    for (size_t c = 0; c < C; ++c) {
        if (d->kind[c] != CH_PAIRS || per_channel < 2) continue;
        void *target = with_dy ? d->dy : d->x;
        for (size_t pairs = 1 + below(3); pairs > 0; --pairs) {
            const float big = dtype == FQ_DTYPE_F16 ? ldexpf(1.0f, 14 + (int)below(2))
                                                    : ldexpf(unif(1.0f, 2.0f), 40 + (int)below(20));
            put_value(target, element_of(&shape, c, below(per_channel)), dtype, big);
            put_value(target, element_of(&shape, c, below(per_channel)), dtype, -big);
        }
    }
    /* The single NaN of each CH_ONE_NAN channel: its k-th element. */
    size_t *seen = calloc(tab, sizeof(size_t)), *pick = malloc(tab * sizeof(size_t));
    for (size_t c = 0; c < C; ++c) pick[c] = below(per_channel);
    for (size_t i = 0; i < n; ++i) {
        const size_t c = channel_of(&shape, i);
        if (d->kind[c] != CH_ONE_NAN || seen[c]++ != pick[c]) continue;
        uint32_t bits;
        do bits = special_bits(dtype, 1);
        while (!is_nan_bits(bits, dtype));
        put_raw(with_dy && (pick[c] & 1) ? d->dy : d->x, i, dtype, bits);
    }
    free(seen);
    free(pick);
    if (!with_dy) d->dy = NULL;
    free(mu);
    free(sd);
    free(dscale);
}

static void data_free(bn_data *d) {
    free(d->xbase);
    free(d->dybase);
    free(d->scale);
    free(d->offset);
    free(d->mean);
    free(d->var);
    free(d->kind);
}

static float pick_epsilon(void) {
    switch (below(8)) {
    case 0: return 1e-3f;
    case 1: return 1e-5f;
    case 2: return 0.0f;
    default: return EPS_DEFAULT;
    }
}

/* Checks one entry point on freshly made data. */
static void check_entry(entry ep, fq_dtype dtype, fq_bn_shape shape, size_t special_pct, int thread_sweep,
                        alias_kind alias, const char *tag) {
    bn_data d;
    data_make(&d, dtype, shape, is_grad(ep), special_pct);
    float factor = 1.0f;
    const float *mean = d.mean, *var = d.var;
    if (ep == EP_TRAIN) {
        const size_t r = below(4);
        factor = r == 0 ? 0.25f : r == 1 ? 0.0f : 1.0f;
        if (factor == 1.0f && below(2)) mean = var = NULL; /* not read when factor == 1 */
    }
    const bn_call c = {ep, dtype, shape, d.x, d.dy, d.scale, d.offset, mean, var, pick_epsilon(), factor,
                       below(MAX_OFFSET), tag};
    check_call(&c, thread_sweep, alias);
    data_free(&d);
}

/* ---------------- sweeps against scalar ---------------- */

static const size_t channel_counts[] = {1, 3, 7, 8, 15, 16, 17, 19, 33, 64, 100, 256, 1000, 1030};
static const size_t inner_sizes[] = {1, 2, 5, 15, 16, 17, 49, 196};
static const size_t outer_sizes[] = {1, 2, 3, 8};
#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Every shape of the lists, both layouts and all three types; the four entry points take turns.
   Shapes from PARALLEL_MIN elements also run on 1..THREADS_MAX threads (every other one, to keep
   the emulated aarch64 run short; the large section adds more). */
static void test_shapes(void) {
    unsigned counter = 0, big = 0;
    for (size_t ci = 0; ci < COUNT_OF(channel_counts); ++ci)
        for (size_t ii = 0; ii < COUNT_OF(inner_sizes); ++ii)
            for (size_t oi = 0; oi < COUNT_OF(outer_sizes); ++oi)
                for (int layout = 0; layout < 2; ++layout)
                    for (int t = 0; t < 3; ++t, ++counter) {
                        const fq_bn_shape shape = {(fq_bn_layout)layout, outer_sizes[oi], channel_counts[ci],
                                                   inner_sizes[ii]};
                        const size_t n = shape.outer * shape.channels * shape.inner;
                        const int sweep = n >= PARALLEL_MIN && big++ % 2 == 0;
                        check_entry((entry)(counter % EP_COUNT), dtypes[t], shape, counter % 3 == 0 ? 40 : 0,
                                    sweep, ALIAS_NONE, "shapes");
                    }
}

/* In place: y == x for the forwards, dx == dy and dx == x for the gradients. */
static void test_in_place(void) {
    const size_t shapes[][3] = {{1, 1, 1}, {2, 3, 5}, {3, 7, 16}, {2, 8, 17}, {1, 17, 49}, {3, 19, 2},
                                {2, 33, 15}, {1, 64, 1}, {8, 100, 5}, {2, 256, 16}, {1, 1030, 3},
                                {8, 16, 196}, {3, 1000, 49}};
    unsigned counter = 0;
    for (size_t s = 0; s < COUNT_OF(shapes); ++s)
        for (int layout = 0; layout < 2; ++layout)
            for (int t = 0; t < 3; ++t)
                for (int ep = 0; ep < EP_COUNT; ++ep, ++counter) {
                    const fq_bn_shape shape = {(fq_bn_layout)layout, shapes[s][0], shapes[s][1], shapes[s][2]};
                    const size_t n = shape.outer * shape.channels * shape.inner;
                    if (!is_grad((entry)ep)) {
                        check_entry((entry)ep, dtypes[t], shape, 30, n >= PARALLEL_MIN, ALIAS_X, "in place");
                    } else {
                        check_entry((entry)ep, dtypes[t], shape, 30, n >= PARALLEL_MIN, ALIAS_DY, "in place");
                        check_entry((entry)ep, dtypes[t], shape, 30, n >= PARALLEL_MIN && counter % 2,
                                    ALIAS_X, "in place");
                    }
                }
}

/* Shapes of many elements, each on 1..THREADS_MAX threads: many sum blocks (channels-last), many
   channels per thread (channels-first), periods padded (lcm(C, 16) <= 1024) and not. */
static void test_large(void) {
    const size_t shapes[][3] = {{65536, 1, 1},  {1, 1, 65536}, {4096, 16, 1}, {8, 64, 196},
                                {2, 1030, 49},  {1, 1000, 196}, {21846, 3, 1}, {3, 7, 3121},
                                {64, 17, 61},   {1, 19, 3450},  {2, 33, 1000}, {5, 256, 64}};
    unsigned counter = 0;
    for (size_t s = 0; s < COUNT_OF(shapes); ++s)
        for (int layout = 0; layout < 2; ++layout)
            for (int ep = 0; ep < EP_COUNT; ++ep, ++counter) {
                const fq_bn_shape shape = {(fq_bn_layout)layout, shapes[s][0], shapes[s][1], shapes[s][2]};
                check_entry((entry)ep, dtypes[counter % 3], shape, counter % 4 == 0 ? 20 : 0, 1, ALIAS_NONE,
                            "large");
            }
}

/* Calls whose arrays together reach 16 MiB (bn_walk.c's BN_BEYOND_CACHES_BYTES) write float32
   output with non-temporal stores after a scalar prologue up to an aligned address, and walk their
   sums as for data from memory: channels-last gradient sums of periods 304, 150 and 97 (a short
   last vector) and 64 in memory order (AVX2 also at 64) and in strips, each channels-last
   gradient call both ways whichever this CPU takes (kernel_choices.h,
   fq_force_bn_sums_in_order); channels-first sums of 150 and 120 channels a few batches side by
   side (3 and 5 batches: an uneven last block). Float32 calls of that size, misaligned outputs,
   both layouts, in place too. */
static void test_streaming(void) {
    const struct { entry ep; size_t outer, channels, inner; alias_kind alias; } calls[] = {
        {EP_TRAIN, 1, 3, 1398103, ALIAS_NONE},     {EP_INFER, 2, 7, 299594, ALIAS_X},
        {EP_GRAD_TRAIN, 3, 19, 49060, ALIAS_NONE}, {EP_GRAD_INFER, 1, 1030, 4073, ALIAS_DY},
        {EP_GRAD_TRAIN, 5, 33, 16951, ALIAS_X},    {EP_GRAD_TRAIN, 3, 150, 5000, ALIAS_NONE},
        {EP_TRAIN, 5, 120, 4000, ALIAS_NONE},      {EP_GRAD_TRAIN, 2, 97, 22000, ALIAS_NONE},
        {EP_GRAD_TRAIN, 4, 64, 17000, ALIAS_DY},
    };
    for (size_t k = 0; k < COUNT_OF(calls); ++k)
        for (int layout = 0; layout < 2; ++layout) {
            const fq_bn_shape shape = {(fq_bn_layout)layout, calls[k].outer, calls[k].channels, calls[k].inner};
            /* The choice applies to channels-last gradients only. */
            const int both = shape.layout == FQ_BN_CHANNELS_LAST &&
                             (calls[k].ep == EP_GRAD_TRAIN || calls[k].ep == EP_GRAD_INFER);
            for (int in_order = both ? 0 : -1; in_order <= (both ? 1 : -1); ++in_order) {
                fq_force_bn_sums_in_order(in_order);
                const char *what = in_order < 0 ? "streamed output"
                                   : in_order    ? "streamed output, sums in memory order"
                                                 : "streamed output, sums in strips";
                check_entry(calls[k].ep, FQ_DTYPE_F32, shape, 10, 1,
                            layout ? calls[k].alias : ALIAS_NONE, what);
            }
            fq_force_bn_sums_in_order(-1);
        }
}

/* ---------------- checks that need no scalar run ---------------- */

/* A low-precision call equals the float32 call on the upcast inputs (upcast and rounded by the
   harness's own conversions): per-channel outputs bit for bit, elements rounded once. */
static void test_rounded_once(void) {
    const size_t shapes[][3] = {{2, 3, 5}, {3, 16, 17}, {1, 19, 49}, {8, 100, 2}, {2, 33, 16}, {1, 1030, 5},
                                {4, 8, 196}};
    unsigned counter = 0;
    for (int k = 0; k < n_isas; ++k)
        for (size_t s = 0; s < COUNT_OF(shapes); ++s)
            for (int layout = 0; layout < 2; ++layout)
                for (int t = 1; t < 3; ++t)
                    for (int ep = 0; ep < EP_COUNT; ++ep, ++counter) {
                        const fq_dtype dt = dtypes[t];
                        const fq_bn_shape shape = {(fq_bn_layout)layout, shapes[s][0], shapes[s][1], shapes[s][2]};
                        bn_data d;
                        data_make(&d, dt, shape, is_grad((entry)ep), counter % 2 ? 40 : 0);
                        const size_t n = d.n;
                        float *x32 = malloc((n ? n : 1) * sizeof(float)), *dy32 = malloc((n ? n : 1) * sizeof(float));
                        for (size_t i = 0; i < n; ++i) {
                            x32[i] = value_at(d.x, i, dt);
                            if (d.dy) dy32[i] = value_at(d.dy, i, dt);
                        }
                        const float factor = ep == EP_TRAIN && counter % 3 == 0 ? 0.5f : 1.0f;
                        bn_call lp = {(entry)ep, dt, shape, d.x, d.dy, d.scale, d.offset, d.mean, d.var,
                                      EPS_DEFAULT, factor, 0, "rounded once"};
                        bn_call hp = lp;
                        hp.dtype = FQ_DTYPE_F32;
                        hp.x = x32;
                        hp.dy = d.dy ? dy32 : NULL;
                        result a, b;
                        run(&lp, isas[k], 1, ALIAS_NONE, 0x5a, &a);
                        run(&hp, isas[k], 1, ALIAS_NONE, 0x5a, &b);
                        char what[400];
                        describe(&lp, what, sizeof what);
                        unsigned char *strict = payload_strict_channels(&lp);
                        size_t bad = 0, first = 0;
                        for (size_t i = 0; i < n; ++i)
                            if (!agree(raw_at(a.out.p, i, dt), round_to(((const float *)(const void *)b.out.p)[i], dt),
                                       dt, strict[channel_of(&shape, i)]) &&
                                bad++ == 0)
                                first = i;
                        int stats_ok = 1;
                        for (size_t q = 0; q < n_stats((entry)ep); ++q)
                            for (size_t j = 0; j < shape.channels; ++j)
                                stats_ok = stats_ok && agree(to_bits(stat_of(&a, (int)q)[j]),
                                                             to_bits(stat_of(&b, (int)q)[j]), FQ_DTYPE_F32, strict[j]);
                        free(strict);
                        expect(a.status == FQ_OK && b.status == FQ_OK && bad == 0 && stats_ok,
                               "%s: %s: %zu elements differ from the float32 call rounded once (first %zu: "
                               "0x%x, float32 gives %a -> 0x%x); statistics %s", fq_isa_name(isas[k]), what,
                               bad, first, n ? raw_at(a.out.p, first, dt) : 0u,
                               n ? (double)((const float *)(const void *)b.out.p)[first] : 0.0,
                               n ? round_to(((const float *)(const void *)b.out.p)[first], dt) : 0u,
                               stats_ok ? "equal" : "differ");
                        result_free(&a);
                        result_free(&b);
                        free(x32);
                        free(dy32);
                        data_free(&d);
                    }
}

/* Inference where rsqrt(variance + epsilon) * scale is exact (epsilon 0, variance a power of 4):
   y = ((x - mean) * alpha) + offset in float32 with flushed denormals, rounded by the harness.
   The data aims at rounding ties (float16 subnormal and normal, bfloat16), the float16 overflow
   boundary 65520 and the bfloat16 one. The gradient's dx = dy * alpha the same way. */
typedef struct {
    float mean, var, scale, offset;
    float (*x_of)(size_t i, fq_dtype d); /* element i of the channel (before rounding to d) */
} crafted;

static float x_integers(size_t i, fq_dtype d) {
    (void)d;
    return (float)((int)(i % 4097) - 2048); /* exact in every type up to 256, in f16 up to 2048 */
}
static float x_big_f16(size_t i, fq_dtype d) {
    (void)d;
    static const float v[] = {65504.0f, 65472.0f, 65440.0f, -65504.0f, 65504.0f, 32768.0f, 61440.0f};
    return v[i % 7];
}
static float x_bf16_walk(size_t i, fq_dtype d) {
    (void)d;
    return ldexpf(1.0f + (float)(i % 128) / 128.0f, (int)(i / 128 % 40) - 20); /* exact in bf16 */
}
static float x_bf16_max(size_t i, fq_dtype d) {
    (void)d;
    return (i & 1 ? -1.0f : 1.0f) * from_bits(0x7f7f0000u - (uint32_t)(i % 4) * 0x10000u);
}
static float x_f16_subnormal(size_t i, fq_dtype d) {
    (void)d;
    return ldexpf((float)(i % 1024), -24) * (i & 1024 ? -1.0f : 1.0f);
}

static const crafted crafted_channels[] = {
    {0.0f, 1.0f, 0x1p-25f, 0.0f, x_integers},   /* half a f16 subnormal quantum: ties */
    {0.0f, 1.0f, 0x1p-26f, 0.0f, x_integers},   /* quarters */
    {0.0f, 0.25f, 0x1p-27f, 0x1p-14f, x_integers}, /* across the smallest normal f16 */
    {-1024.0f, 1.0f, 1.0f, 0.5f, x_integers},   /* y = x + 1024.5: f16 ties in [1024, 2048) */
    {0.0f, 4.0f, 2.0f, 1.0f, x_integers},       /* y = x + 1 */
    {0.0f, 1.0f, 1.0f, 16.0f, x_big_f16},       /* 65520: a tie that rounds to inf */
    {0.0f, 1.0f, 1.0f, 15.99f, x_big_f16},
    {0.0f, 1.0f, 1.0f, -16.0f, x_big_f16},
    {-8.0f, 16.0f, 4.0f, 0.0f, x_big_f16},      /* (x + 8) * 1 */
    {0.0f, 1.0f, 1.0f, 0x1p-8f, x_bf16_walk},   /* bf16 ties where x in [1, 2) */
    {0.0f, 1.0f, 1.0f, -0x1p-9f, x_bf16_walk},
    {0.0f, 1.0f, 1.0f, 0x1.8p-9f, x_bf16_walk},
    {0.0f, 1.0f, -1.0f, 0.0f, x_bf16_max},      /* bf16 near its overflow */
    {0.0f, 1.0f, 1.0f, 0x1p+119f, x_bf16_max},  /* half a quantum: ties into inf */
    {0.0f, 1.0f, 0.5f, 0.0f, x_f16_subnormal},  /* f16 subnormal in, subnormal ties out */
    {0.0f, 0.0625f, 0.25f, 0x1p-24f, x_f16_subnormal},
    {3.0f, 1.0f, 1.0f, -3.0f, x_integers},      /* (x - 3) - 3 */
    {0.0f, 1.0f, 0x1p-103f, 0.0f, x_f16_subnormal}, /* products below FLT_MIN flush to zero */
    {0.0f, 16.0f, 0x1p-125f, 0.0f, x_integers}, /* alpha = 2^-127 is denormal: it counts as 0 */
    {0.0f, 1.0f, 0x1p+120f, 0.0f, x_big_f16},   /* float32 overflow */
};
#define N_CRAFTED COUNT_OF(crafted_channels)

/* The inference formula in float32 with every operand and result flushed as the kernels see them. */
static float exact_y(float x, float mean, float alpha, float offset) {
    return ftz(ftz(ftz(ftz(x) - ftz(mean)) * ftz(alpha)) + ftz(offset));
}

static void test_exact_inference(void) {
    for (int k = 0; k < n_isas; ++k)
        for (int t = 0; t < 3; ++t)
            for (int layout = 0; layout < 2; ++layout)
                for (size_t inner = 1; inner <= 37; inner += 36) {
                    const fq_dtype dt = dtypes[t];
                    const size_t C = N_CRAFTED, outer = 9000 / (C * inner) + 1;
                    const fq_bn_shape shape = {(fq_bn_layout)layout, outer, C, inner};
                    const size_t n = outer * C * inner;
                    float mean[N_CRAFTED], var[N_CRAFTED], scale[N_CRAFTED], offset[N_CRAFTED], alpha[N_CRAFTED];
                    for (size_t c = 0; c < C; ++c) {
                        mean[c] = crafted_channels[c].mean;
                        var[c] = crafted_channels[c].var;
                        scale[c] = crafted_channels[c].scale;
                        offset[c] = crafted_channels[c].offset;
                        alpha[c] = scale[c] / sqrtf(var[c]);
                    }
                    unsigned char *x = xmalloc_aligned(n * 4), *dy = xmalloc_aligned(n * 4);
                    size_t *seen = calloc(C, sizeof(size_t));
                    for (size_t i = 0; i < n; ++i) {
                        const size_t c = channel_of(&shape, i);
                        put_value(x, i, dt, crafted_channels[c].x_of(seen[c]++, dt));
                        put_value(dy, i, dt, crafted_channels[(c + 3) % C].x_of(i, dt));
                    }
                    const bn_call fwd = {EP_INFER, dt, shape, x, NULL, scale, offset, mean, var, 0.0f, 1.0f, 0,
                                         "exact"};
                    const bn_call grad = {EP_GRAD_INFER, dt, shape, x, dy, scale, offset, mean, var, 0.0f, 1.0f,
                                          0, "exact"};
                    result a, b;
                    run(&fwd, isas[k], 1, ALIAS_NONE, 0x5a, &a);
                    run(&grad, isas[k], 1, ALIAS_NONE, 0x5a, &b);
                    size_t bad_y = 0, bad_dx = 0, first_y = 0, first_dx = 0;
                    for (size_t i = 0; i < n; ++i) {
                        const size_t c = channel_of(&shape, i);
                        const float y = exact_y(value_at(x, i, dt), mean[c], alpha[c], offset[c]);
                        const float dx = ftz(ftz(value_at(dy, i, dt)) * ftz(alpha[c]));
                        const uint32_t gy = raw_at(a.out.p, i, dt), gdx = raw_at(b.out.p, i, dt);
                        const int y_ok = gy == round_to(y, dt) || (isnan(y) && isnan(value_at(a.out.p, i, dt)));
                        const int dx_ok = gdx == round_to(dx, dt) || (isnan(dx) && isnan(value_at(b.out.p, i, dt)));
                        if (!y_ok && bad_y++ == 0) first_y = i;
                        if (!dx_ok && bad_dx++ == 0) first_dx = i;
                    }
                    const size_t cy = channel_of(&shape, first_y), cdx = channel_of(&shape, first_dx);
                    expect(a.status == FQ_OK && bad_y == 0,
                           "%s %s %s inner=%zu: inference y: %zu wrong; first [%zu] channel %zu: x=%a gives "
                           "0x%x, want 0x%x", fq_isa_name(isas[k]), dtype_names[t], layout ? "channels-first" :
                           "channels-last", inner, bad_y, first_y, cy, (double)value_at(x, first_y, dt),
                           raw_at(a.out.p, first_y, dt),
                           round_to(exact_y(value_at(x, first_y, dt), mean[cy], alpha[cy], offset[cy]), dt));
                    expect(b.status == FQ_OK && bad_dx == 0,
                           "%s %s %s inner=%zu: inference gradient dx: %zu wrong; first [%zu] channel %zu",
                           fq_isa_name(isas[k]), dtype_names[t], layout ? "channels-first" : "channels-last",
                           inner, bad_dx, first_dx, cdx);
                    result_free(&a);
                    result_free(&b);
                    free(x);
                    free(dy);
                    free(seen);
                }
}

/* NaN signs and payloads, strictly against scalar: per-channel constants that are NaN (with payloads,
   both signs, and the default NaN of inf * 0 and of sqrt(-1)) or infinite, meeting x and dy of -0,
   +0, negative and positive half subnormals, float32 / bfloat16 denormals, normal values and
   infinities, but never a second NaN. A compiler may fold the negation of a value into the
   arithmetic after it (-(a * b) for (-a) * b: AArch64 FNMUL), which flips the sign of a NaN result:
   the scalar reference must not negate floats it loads. Then training with constant channels whose
   variance is 0 with epsilon 0 (alpha = inf * scale). */
static float sign_values(size_t i, fq_dtype d) {
    static const float v[] = {-0.0f, 0.0f, -0x1p-24f, 0x1p-24f, -0x1.8p-20f, 0x1.8p-20f, -1.5f, 2.25f,
                              -INFINITY, INFINITY, -1e-40f, 1e-40f, -0x1p-14f};
    (void)d;
    return v[i % COUNT_OF(v)];
}

static void test_nan_signs(void) {
    enum { C = 8 };
    float scale[C] = {0.0f, 1.0f, -1.0f, from_bits(0x7fa12345u), from_bits(0xffb54321u), 1.0f, 1.0f, 1.0f};
    float offset[C] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.0f, 0.5f};
    float mean[C] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, from_bits(0xffa0f0f0u)};
    float var[C] = {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, -1.0f, 1.0f, 1.0f};
    strict_all = 1;
    for (int t = 0; t < 3; ++t)
        for (int layout = 0; layout < 2; ++layout)
            for (size_t inner = 1; inner <= 21; inner += 20) {
                const fq_dtype dt = dtypes[t];
                const fq_bn_shape shape = {(fq_bn_layout)layout, 7, C, inner};
                const size_t n = call_count(&(bn_call){.shape = shape});
                unsigned char *x = xmalloc_aligned(n * 4), *dy = xmalloc_aligned(n * 4);
                for (size_t i = 0; i < n; ++i) {
                    put_value(x, i, dt, sign_values(i, dt));
                    put_value(dy, i, dt, sign_values(i / 3 + 5, dt));
                }
                const bn_call fwd = {EP_INFER, dt, shape, x, NULL, scale, offset, mean, var, 0.0f, 1.0f, 3,
                                     "NaN signs"};
                check_call(&fwd, 0, ALIAS_NONE);
                check_call(&fwd, 0, ALIAS_X);
                const bn_call grad = {EP_GRAD_INFER, dt, shape, x, dy, scale, offset, mean, var, 0.0f, 1.0f, 5,
                                      "NaN signs"};
                check_call(&grad, 0, ALIAS_NONE);
                check_call(&grad, 0, ALIAS_DY);
                free(x);
                free(dy);
            }
    strict_all = 0;
    /* Constant channels, variance 0, epsilon 0: only default NaNs, so every bit must agree. */
    for (int t = 0; t < 3; ++t)
        for (int layout = 0; layout < 2; ++layout) {
            const fq_dtype dt = dtypes[t];
            const fq_bn_shape shape = {(fq_bn_layout)layout, 5, 13, 9};
            const size_t n = 5 * 13 * 9;
            unsigned char *x = xmalloc_aligned(n * 4), *dy = xmalloc_aligned(n * 4);
            float sc[13], off[13], mn[13], vr[13];
            for (size_t c = 0; c < 13; ++c) {
                sc[c] = c % 3 == 0 ? 0.0f : c % 3 == 1 ? 1.0f : -1.0f;
                off[c] = c & 1 ? 0.25f : -0.0f;
                mn[c] = sign_values(c, dt);
                vr[c] = 0.0f;
            }
            for (size_t i = 0; i < n; ++i) {
                put_value(x, i, dt, sign_values(channel_of(&shape, i) % 8, dt)); /* finite, constant */
                put_value(dy, i, dt, sign_values(i % 8, dt));
            }
            for (int ep = 0; ep < EP_COUNT; ++ep) {
                const bn_call call = {(entry)ep, dt, shape, x, is_grad((entry)ep) ? dy : NULL, sc, off, mn, vr,
                                      0.0f, 1.0f, 0, "variance 0, epsilon 0"};
                check_call(&call, 0, ALIAS_NONE);
            }
            free(x);
            free(dy);
        }
}

/* n = 1: variance 0, y = offset (rounded to the type) for finite x; the saved mean is x. */
static void test_single_element(void) {
    const size_t channel_list[] = {1, 3, 4, 8, 15, 16, 17, 100, 1030};
    for (int k = 0; k < n_isas; ++k)
        for (int t = 0; t < 3; ++t)
            for (size_t ci = 0; ci < COUNT_OF(channel_list); ++ci)
                for (int layout = 0; layout < 2; ++layout) {
                    const fq_dtype dt = dtypes[t];
                    const size_t C = channel_list[ci];
                    const fq_bn_shape shape = {(fq_bn_layout)layout, 1, C, 1};
                    unsigned char *x = xmalloc_aligned(C * 4);
                    float *scale = malloc(C * sizeof(float)), *offset = malloc(C * sizeof(float));
                    float *mean_in = malloc(C * sizeof(float)), *var_in = malloc(C * sizeof(float));
                    for (size_t c = 0; c < C; ++c) {
                        put_raw(x, c, dt, below(3) ? round_to(unif(-1e4f, 1e4f), dt) : special_bits(dt, 0));
                        pick_affine(&scale[c], &offset[c]);
                        if (offset[c] == 0.0f) offset[c] = 0.75f; /* 0 * alpha + -0 is +0 for alpha > 0 */
                        mean_in[c] = unif(-1.0f, 1.0f);
                        var_in[c] = unif(0.5f, 2.0f);
                    }
                    for (int f = 0; f < 2; ++f) {
                        const float factor = f ? 0.25f : 1.0f;
                        const bn_call call = {EP_TRAIN, dt, shape, x, NULL, scale, offset, mean_in, var_in,
                                              EPS_DEFAULT, factor, 0, "n=1"};
                        result r;
                        run(&call, isas[k], 1, ALIAS_NONE, 0x5a, &r);
                        int ok = r.status == FQ_OK;
                        size_t bad = C;
                        for (size_t c = 0; ok && c < C; ++c) {
                            const float mean = ftz(value_at(x, c, dt)) + 0.0f; /* -0 gives +0 */
                            const float bm = factor == 1.0f ? mean
                                                            : (float)((1.0 - factor) * (double)mean_in[c] +
                                                                      (double)factor * mean);
                            const float bv = (float)((1.0 - factor) * (double)var_in[c]);
                            ok = raw_at(r.out.p, c, dt) == round_to(offset[c], dt) &&
                                 to_bits(stat_of(&r, 2)[c]) == to_bits(mean) &&
                                 to_bits(stat_of(&r, 3)[c]) == 0u && to_bits(stat_of(&r, 0)[c]) == to_bits(bm) &&
                                 to_bits(stat_of(&r, 1)[c]) == to_bits(bv);
                            if (!ok) bad = c;
                        }
                        expect(ok, "%s %s %s C=%zu factor=%g: n=1, channel %zu: x=%a y=0x%x (offset %a -> 0x%x) "
                               "saved mean %a var %a, batch mean %a var %a", fq_isa_name(isas[k]), dtype_names[t],
                               layout ? "channels-first" : "channels-last", C, (double)factor, bad,
                               bad < C ? (double)value_at(x, bad, dt) : 0.0, bad < C ? raw_at(r.out.p, bad, dt) : 0u,
                               bad < C ? (double)offset[bad] : 0.0, bad < C ? round_to(offset[bad], dt) : 0u,
                               bad < C ? (double)stat_of(&r, 2)[bad] : 0.0, bad < C ? (double)stat_of(&r, 3)[bad] : 0.0,
                               bad < C ? (double)stat_of(&r, 0)[bad] : 0.0, bad < C ? (double)stat_of(&r, 1)[bad] : 0.0);
                        result_free(&r);
                    }
                    free(x);
                    free(scale);
                    free(offset);
                    free(mean_in);
                    free(var_in);
                }
}

/* |got - want| within `ulps` float32 units in the last place of want, plus `slack`. */
static int within_ulps(float got, long double want, int ulps, long double slack) {
    if (isnan(want) || isinf(want)) return to_bits(got) == to_bits((float)want) || (isnan(got) && isnan(want));
    if (want == 0.0L && slack == 0.0L) return got == 0.0f;
    int e;
    frexpl(fabsl(want), &e); /* |want| in [2^(e-1), 2^e): a float ulp there is 2^(e-24) */
    if (e - 24 < -149) e = -149 + 24;
    return fabsl((long double)got - want) <= (long double)ulps * ldexpl(1.0L, e - 24) + slack;
}

/* Batch statistics against long double sums of the same elements: means far from zero (1e4 with
   spread 1, 1e6 with spread 0.5), both layouts, all types, running averages. The gradient's sums the
   same way (dy of one sign, so the offset sums do not cancel).

   Allowed: 1 ulp of the result, plus what the float32 runs of FQ_BN_SUM_RUN elements can lose
   (bn_kernels.h), to first order with u = 2^-24: each centered value a = x - center rounds once
   (|a| u), each run element once more (the sums' additions, or the fused product's). So
   sum a: R u sum |a|; sum of products p = g a: (R + 1) u sum |p|; of squares (R + 2) u sum a^2. The forward's shift K is a mean of
   data, so |K - mean| <= M = max |x - mean|, and sum |x - K| <= sum |x - mean| + n M; the
   variance, sum (x-K)^2 / n - d^2 with d = mean - K, adds 2 |d| times the mean's error. Bounds of
   the worst case; an uncentered or whole-channel float32 sum misses them by far on the means of 1e4
   and 1e6 (n u |mean| against R u (sum |x - mean| / n + M)). */
static void test_statistics(void) {
    const size_t shapes[][3] = {{8, 3, 49}, {2, 17, 196}, {1, 100, 16}, {40, 16, 1}, {3, 1030, 5}, {7, 33, 127}};
    const float centers[][2] = {{1e4f, 1.0f}, {1e6f, 0.5f}, {-3.0f, 10.0f}, {0.0f, 1e-3f}};
    unsigned counter = 0;
    for (int k = 0; k < n_isas; ++k)
        for (size_t s = 0; s < COUNT_OF(shapes); ++s)
            for (int layout = 0; layout < 2; ++layout)
                for (int t = 0; t < 3; ++t, ++counter) {
                    const fq_dtype dt = dtypes[t];
                    const fq_bn_shape shape = {(fq_bn_layout)layout, shapes[s][0], shapes[s][1], shapes[s][2]};
                    const size_t C = shape.channels, n = shape.outer * C * shape.inner, m = n / C;
                    const float center = dt == FQ_DTYPE_F16 ? centers[counter % 4][0] / 16.0f : centers[counter % 4][0];
                    const float spread = centers[counter % 4][1] * (dt == FQ_DTYPE_F32 ? 1.0f : 256.0f);
                    unsigned char *x = xmalloc_aligned(n * 4), *dy = xmalloc_aligned(n * 4);
                    float *scale = malloc(C * 4), *offset = malloc(C * 4), *mean_in = malloc(C * 4),
                          *var_in = malloc(C * 4), *gmean = malloc(C * 4), *gvar = malloc(C * 4);
                    for (size_t i = 0; i < n; ++i) {
                        put_value(x, i, dt, center + spread * unif(-1.0f, 1.0f) * (float)(1 + channel_of(&shape, i) % 3));
                        put_value(dy, i, dt, unif(0.25f, 1.0f));
                    }
                    for (size_t c = 0; c < C; ++c) {
                        scale[c] = 1.0f, offset[c] = 0.0f;
                        mean_in[c] = center * 0.5f, var_in[c] = spread * spread;
                        gmean[c] = center + spread * unif(-0.5f, 0.5f);
                        gvar[c] = spread * spread * unif(0.5f, 2.0f);
                    }
                    /* Long-double reference sums per channel. */
                    long double *sum = calloc(C, sizeof(long double)), *sq = calloc(C, sizeof(long double)),
                                *sdy = calloc(C, sizeof(long double)), *sdyx = calloc(C, sizeof(long double)),
                                *sabs = calloc(C, sizeof(long double)), *maxdev = calloc(C, sizeof(long double)),
                                *sdy_abs = calloc(C, sizeof(long double)), *sdyx_abs = calloc(C, sizeof(long double));
                    for (size_t i = 0; i < n; ++i) sum[channel_of(&shape, i)] += (long double)value_at(x, i, dt);
                    for (size_t i = 0; i < n; ++i) {
                        const size_t c = channel_of(&shape, i);
                        const long double dev = (long double)value_at(x, i, dt) - sum[c] / (long double)m;
                        const long double g = (long double)value_at(dy, i, dt);
                        const long double p = g * ((long double)value_at(x, i, dt) - (long double)gmean[c]);
                        sq[c] += dev * dev;
                        sabs[c] += fabsl(dev);
                        if (fabsl(dev) > maxdev[c]) maxdev[c] = fabsl(dev);
                        sdy[c] += g;
                        sdy_abs[c] += fabsl(g);
                        sdyx[c] += p;
                        sdyx_abs[c] += fabsl(p);
                    }
                    const long double u = ldexpl(1.0L, -24), R = (long double)FQ_BN_SUM_RUN;
                    for (int f = 0; f < 2; ++f) {
                        const float factor = f ? 0.125f : 1.0f;
                        const bn_call call = {EP_TRAIN, dt, shape, x, NULL, scale, offset, mean_in, var_in,
                                              EPS_DEFAULT, factor, 0, "statistics"};
                        result r;
                        run(&call, isas[k], 1, ALIAS_NONE, 0x5a, &r);
                        size_t bad = C;
                        long double want[4] = {0, 0, 0, 0};
                        for (size_t c = 0; r.status == FQ_OK && c < C && bad == C; ++c) {
                            const long double mean = sum[c] / (long double)m, var = sq[c] / (long double)m;
                            const long double bessel = (long double)m / (long double)(m > 1 ? m - 1 : 1);
                            const long double fl = (long double)factor, M = maxdev[c];
                            const long double mean_err = R * u * (sabs[c] / (long double)m + M);
                            const long double var_err = (R + 2.0L) * u * (var + M * M) + 2.0L * M * mean_err;
                            const long double slack[4] = {f ? fl * mean_err : mean_err,
                                                          f ? fl * bessel * var_err : bessel * var_err,
                                                          mean_err, var_err};
                            want[2] = mean;
                            want[3] = var;
                            want[0] = f ? (1.0L - fl) * mean_in[c] + fl * mean : mean;
                            want[1] = f ? (1.0L - fl) * var_in[c] + fl * bessel * var : var * bessel;
                            for (int q = 0; q < 4; ++q)
                                if (!within_ulps(stat_of(&r, q)[c], want[q], 1, slack[q])) bad = c;
                        }
                        char what[400];
                        describe(&call, what, sizeof what);
                        expect(r.status == FQ_OK && bad == C,
                               "%s: %s: channel %zu: batch mean %a var %a saved mean %a var %a; long double "
                               "%La %La %La %La (1 ulp and the float32 runs' bound allowed)", fq_isa_name(isas[k]), what, bad,
                               bad < C ? (double)stat_of(&r, 0)[bad] : 0.0, bad < C ? (double)stat_of(&r, 1)[bad] : 0.0,
                               bad < C ? (double)stat_of(&r, 2)[bad] : 0.0, bad < C ? (double)stat_of(&r, 3)[bad] : 0.0,
                               want[0], want[1], want[2], want[3]);
                        result_free(&r);
                    }
                    for (int training = 0; training < 2; ++training) {
                        const bn_call call = {training ? EP_GRAD_TRAIN : EP_GRAD_INFER, dt, shape, x, dy, scale,
                                              offset, gmean, gvar, EPS_DEFAULT, 1.0f, 0, "gradient sums"};
                        result r;
                        run(&call, isas[k], 1, ALIAS_NONE, 0x5a, &r);
                        size_t bad = C;
                        long double want_scale = 0, want_offset = 0;
                        for (size_t c = 0; r.status == FQ_OK && c < C && bad == C; ++c) {
                            const long double coef = 1.0L / sqrtl((long double)gvar[c] + (long double)EPS_DEFAULT);
                            want_offset = sdy[c];
                            want_scale = sdyx[c] * coef;
                            if (!within_ulps(stat_of(&r, 0)[c], want_scale, 1, (R + 1.0L) * u * sdyx_abs[c] * coef) ||
                                !within_ulps(stat_of(&r, 1)[c], want_offset, 1, R * u * sdy_abs[c]))
                                bad = c;
                        }
                        char what[400];
                        describe(&call, what, sizeof what);
                        expect(r.status == FQ_OK && bad == C,
                               "%s: %s: channel %zu: scale_backprop %a offset_backprop %a; long double %La %La "
                               "(1 ulp and the float32 runs' bound allowed)", fq_isa_name(isas[k]), what, bad,
                               bad < C ? (double)stat_of(&r, 0)[bad] : 0.0, bad < C ? (double)stat_of(&r, 1)[bad] : 0.0,
                               want_scale, want_offset);
                        result_free(&r);
                    }
                    free(sum);
                    free(sq);
                    free(sdy);
                    free(sdyx);
                    free(sabs);
                    free(maxdev);
                    free(sdy_abs);
                    free(sdyx_abs);
                    free(x);
                    free(dy);
                    free(scale);
                    free(offset);
                    free(mean_in);
                    free(var_in);
                    free(gmean);
                    free(gvar);
                }
}

/* Empty tensors (no batch, no spatial extent, no channels): no array is needed, the training
   statistics are NaN, the gradient's sums +0. */
static void test_empty(void) {
    const size_t shapes[][3] = {{0, 5, 3}, {2, 5, 0}, {0, 17, 0}, {3, 0, 4}};
    float scale[17], offset[17], mean[17], var[17], st[4][17];
    for (int c = 0; c < 17; ++c) scale[c] = 1.0f, offset[c] = 0.5f, mean[c] = 0.25f, var[c] = 2.0f;
    for (int k = 0; k < n_isas; ++k)
        for (int threads = 1; threads <= THREADS_MAX; threads += THREADS_MAX - 1)
            for (size_t s = 0; s < COUNT_OF(shapes); ++s)
                for (int layout = 0; layout < 2; ++layout)
                    for (int t = 0; t < 3; ++t) {
                        set_isa_threads(isas[k], threads);
                        const fq_bn_shape shape = {(fq_bn_layout)layout, shapes[s][0], shapes[s][1], shapes[s][2]};
                        const size_t C = shape.channels;
                        const char *name = fq_isa_name(isas[k]);
                        for (int f = 0; f < 2; ++f) {
                            for (int q = 0; q < 4; ++q)
                                for (size_t c = 0; c < C; ++c) st[q][c] = 7.0f;
                            const fq_status status = fq_bn_forward_training(
                                NULL, dtypes[t], shape, scale, offset, EPS_DEFAULT, f ? 0.5f : 1.0f, f ? mean : NULL,
                                f ? var : NULL, NULL, st[0], st[1], st[2], st[3]);
                            int ok = status == FQ_OK;
                            for (int q = 0; q < 4; ++q)
                                for (size_t c = 0; c < C; ++c) ok = ok && isnan(st[q][c]);
                            expect(ok, "%s threads=%d: empty training forward %zux%zux%zu %s factor %s: status %d, "
                                   "statistics must be NaN (got %a)", name, threads, shape.outer, C, shape.inner,
                                   dtype_names[t], f ? "0.5" : "1", status, C ? (double)st[0][0] : 0.0);
                        }
                        expect(fq_bn_forward_inference(NULL, dtypes[t], shape, scale, offset, mean, var, EPS_DEFAULT,
                                                       NULL) == FQ_OK,
                               "%s: empty inference forward %s", name, dtype_names[t]);
                        for (int training = 0; training < 2; ++training) {
                            for (size_t c = 0; c < C; ++c) st[0][c] = st[1][c] = 7.0f;
                            const fq_status status = fq_bn_grad(NULL, NULL, dtypes[t], shape, scale, mean, var,
                                                                EPS_DEFAULT, training, NULL, st[0], st[1]);
                            int ok = status == FQ_OK;
                            for (size_t c = 0; c < C; ++c) ok = ok && to_bits(st[0][c]) == 0 && to_bits(st[1][c]) == 0;
                            expect(ok, "%s: empty gradient (%s) %s: status %d, sums must be +0 (got %a %a)", name,
                                   training ? "training" : "inference", dtype_names[t], status,
                                   C ? (double)st[0][0] : 0.0, C ? (double)st[1][0] : 0.0);
                        }
                    }
    fq_set_num_threads(1);
}

/* ---------------- statuses ---------------- */

static void test_errors(void) {
    enum { C = 3, N = 2 * C * 4 };
    const fq_bn_shape shape = {FQ_BN_CHANNELS_LAST, 2, C, 4};
    float x[N], dy[N], out[N], scale[C] = {1, 2, 3}, offset[C] = {0, 0, 0}, mean[C] = {0, 0, 0},
                                var[C] = {1, 1, 1}, st[4][C];
    for (int i = 0; i < N; ++i) x[i] = (float)i, dy[i] = 1.0f;
    const fq_status NP = FQ_ERR_NULL_POINTER;
    /* Fails without writing: the outputs keep their sentinel. */
    for (int t = 0; t < 3; ++t) {
        const fq_dtype d = dtypes[t];
        const char *dn = dtype_names[t];
        struct { const char *what; fq_status got; } cases[48];
        int m = 0;
#define CASE(text, call) do { cases[m].what = text; cases[m].got = (call); ++m; } while (0)
        CASE("training x", fq_bn_forward_training(NULL, d, shape, scale, offset, 1e-3f, 1.0f, NULL, NULL, out, st[0], st[1], st[2], st[3]));
        CASE("training scale", fq_bn_forward_training(x, d, shape, NULL, offset, 1e-3f, 1.0f, NULL, NULL, out, st[0], st[1], st[2], st[3]));
        CASE("training offset", fq_bn_forward_training(x, d, shape, scale, NULL, 1e-3f, 1.0f, NULL, NULL, out, st[0], st[1], st[2], st[3]));
        CASE("training batch_mean", fq_bn_forward_training(x, d, shape, scale, offset, 1e-3f, 1.0f, NULL, NULL, out, NULL, st[1], st[2], st[3]));
        CASE("training batch_variance", fq_bn_forward_training(x, d, shape, scale, offset, 1e-3f, 1.0f, NULL, NULL, out, st[0], NULL, st[2], st[3]));
        CASE("training saved_mean", fq_bn_forward_training(x, d, shape, scale, offset, 1e-3f, 1.0f, NULL, NULL, out, st[0], st[1], NULL, st[3]));
        CASE("training saved_variance", fq_bn_forward_training(x, d, shape, scale, offset, 1e-3f, 1.0f, NULL, NULL, out, st[0], st[1], st[2], NULL));
        CASE("training factor 0.5, mean_in", fq_bn_forward_training(x, d, shape, scale, offset, 1e-3f, 0.5f, NULL, var, out, st[0], st[1], st[2], st[3]));
        CASE("training factor 0.5, variance_in", fq_bn_forward_training(x, d, shape, scale, offset, 1e-3f, 0.5f, mean, NULL, out, st[0], st[1], st[2], st[3]));
        CASE("training empty, batch_mean", fq_bn_forward_training(NULL, d, (fq_bn_shape){FQ_BN_CHANNELS_LAST, 0, C, 4}, scale, offset, 1e-3f, 1.0f, NULL, NULL, NULL, NULL, st[1], st[2], st[3]));
        CASE("inference x", fq_bn_forward_inference(NULL, d, shape, scale, offset, mean, var, 1e-3f, out));
        CASE("inference y", fq_bn_forward_inference(x, d, shape, scale, offset, mean, var, 1e-3f, NULL));
        CASE("inference scale", fq_bn_forward_inference(x, d, shape, NULL, offset, mean, var, 1e-3f, out));
        CASE("inference offset", fq_bn_forward_inference(x, d, shape, scale, NULL, mean, var, 1e-3f, out));
        CASE("inference mean", fq_bn_forward_inference(x, d, shape, scale, offset, NULL, var, 1e-3f, out));
        CASE("inference variance", fq_bn_forward_inference(x, d, shape, scale, offset, mean, NULL, 1e-3f, out));
        for (int training = 0; training < 2; ++training) {
            CASE(training ? "grad training dy" : "grad inference dy", fq_bn_grad(NULL, x, d, shape, scale, mean, var, 1e-3f, training, out, st[0], st[1]));
            CASE(training ? "grad training x" : "grad inference x", fq_bn_grad(dy, NULL, d, shape, scale, mean, var, 1e-3f, training, out, st[0], st[1]));
            CASE(training ? "grad training dx" : "grad inference dx", fq_bn_grad(dy, x, d, shape, scale, mean, var, 1e-3f, training, NULL, st[0], st[1]));
            CASE(training ? "grad training scale" : "grad inference scale", fq_bn_grad(dy, x, d, shape, NULL, mean, var, 1e-3f, training, out, st[0], st[1]));
            CASE(training ? "grad training mean" : "grad inference mean", fq_bn_grad(dy, x, d, shape, scale, NULL, var, 1e-3f, training, out, st[0], st[1]));
            CASE(training ? "grad training variance" : "grad inference variance", fq_bn_grad(dy, x, d, shape, scale, mean, NULL, 1e-3f, training, out, st[0], st[1]));
            CASE(training ? "grad training scale_backprop" : "grad inference scale_backprop", fq_bn_grad(dy, x, d, shape, scale, mean, var, 1e-3f, training, out, NULL, st[1]));
            CASE(training ? "grad training offset_backprop" : "grad inference offset_backprop", fq_bn_grad(dy, x, d, shape, scale, mean, var, 1e-3f, training, out, st[0], NULL));
        }
#undef CASE
        /* Each case separately, so a write by one is not blamed on another. */
        for (int j = 0; j < m; ++j)
            expect(cases[j].got == NP, "%s: NULL %s gives status %d (%s), want FQ_ERR_NULL_POINTER", dn, cases[j].what,
                   cases[j].got, fq_status_string(cases[j].got));
    }
    /* A NULL y in training: the statistics alone, the same as with y. */
    for (int t = 0; t < 3; ++t) {
        float with_y[4][C], alone[4][C];
        const fq_status a = fq_bn_forward_training(x, dtypes[t], shape, scale, offset, 1e-3f, 0.5f, mean, var, out,
                                                   with_y[0], with_y[1], with_y[2], with_y[3]);
        const fq_status b = fq_bn_forward_training(x, dtypes[t], shape, scale, offset, 1e-3f, 0.5f, mean, var, NULL,
                                                   alone[0], alone[1], alone[2], alone[3]);
        expect(a == FQ_OK && b == FQ_OK && memcmp(with_y, alone, sizeof alone) == 0,
               "%s: training with y NULL gives other statistics (status %d)", dtype_names[t], (int)b);
    }
    /* Failing calls write nothing. */
    {
        for (int i = 0; i < N; ++i) out[i] = -9.0f;
        for (int q = 0; q < 4; ++q)
            for (int c = 0; c < C; ++c) st[q][c] = -9.0f;
        fq_bn_forward_training(x, FQ_DTYPE_F32, shape, scale, offset, 1e-3f, 0.5f, NULL, var, out, st[0], st[1], st[2], st[3]);
        fq_bn_forward_training(x, (fq_dtype)7, shape, scale, offset, 1e-3f, 1.0f, NULL, NULL, out, st[0], st[1], st[2], st[3]);
        fq_bn_forward_inference(x, FQ_DTYPE_F16, (fq_bn_shape){(fq_bn_layout)2, 2, C, 4}, scale, offset, mean, var, 1e-3f, out);
        fq_bn_grad(dy, x, FQ_DTYPE_BF16, shape, scale, mean, var, 1e-3f, 1, out, st[0], NULL);
        fq_bn_grad(NULL, x, FQ_DTYPE_F32, shape, scale, mean, var, 1e-3f, 0, out, st[0], st[1]);
        int ok = 1;
        for (int i = 0; i < N; ++i) ok = ok && out[i] == -9.0f;
        for (int q = 0; q < 4; ++q)
            for (int c = 0; c < C; ++c) ok = ok && st[q][c] == -9.0f;
        expect(ok, "a call that fails wrote an output");
    }
    /* Unknown element types and layouts. */
    const int bad_dtypes[] = {-1, 3, 99};
    for (size_t j = 0; j < COUNT_OF(bad_dtypes); ++j) {
        const fq_dtype d = (fq_dtype)bad_dtypes[j];
        expect(fq_bn_forward_training(x, d, shape, scale, offset, 1e-3f, 1.0f, NULL, NULL, out, st[0], st[1], st[2], st[3]) ==
                   FQ_ERR_BAD_DTYPE, "training dtype %d", bad_dtypes[j]);
        expect(fq_bn_forward_inference(x, d, shape, scale, offset, mean, var, 1e-3f, out) == FQ_ERR_BAD_DTYPE,
               "inference dtype %d", bad_dtypes[j]);
        expect(fq_bn_grad(dy, x, d, shape, scale, mean, var, 1e-3f, 1, out, st[0], st[1]) == FQ_ERR_BAD_DTYPE,
               "grad dtype %d", bad_dtypes[j]);
        expect(fq_bn_forward_inference(NULL, d, (fq_bn_shape){FQ_BN_CHANNELS_LAST, 0, C, 4}, scale, offset, mean,
                                       var, 1e-3f, NULL) == FQ_ERR_BAD_DTYPE,
               "empty inference dtype %d", bad_dtypes[j]);
    }
    const int bad_layouts[] = {-1, 2, 7};
    for (size_t j = 0; j < COUNT_OF(bad_layouts); ++j) {
        const fq_bn_shape s = {(fq_bn_layout)bad_layouts[j], 2, C, 4};
        expect(fq_bn_forward_training(x, FQ_DTYPE_F32, s, scale, offset, 1e-3f, 1.0f, NULL, NULL, out, st[0], st[1], st[2],
                                      st[3]) == FQ_ERR_BAD_LAYOUT, "training layout %d", bad_layouts[j]);
        expect(fq_bn_forward_inference(x, FQ_DTYPE_F16, s, scale, offset, mean, var, 1e-3f, out) == FQ_ERR_BAD_LAYOUT,
               "inference layout %d", bad_layouts[j]);
        expect(fq_bn_grad(dy, x, FQ_DTYPE_BF16, s, scale, mean, var, 1e-3f, 0, out, st[0], st[1]) == FQ_ERR_BAD_LAYOUT,
               "grad layout %d", bad_layouts[j]);
    }
    /* Element counts that do not fit a size_t describe no memory: rejected before any access. */
    const fq_bn_shape huge[] = {{FQ_BN_CHANNELS_LAST, SIZE_MAX / 2 + 1, 1, 2},
                                {FQ_BN_CHANNELS_FIRST, (size_t)1 << 32, 1, (size_t)1 << 32},
                                {FQ_BN_CHANNELS_LAST, (size_t)1 << 20, (size_t)1 << 40, (size_t)1 << 10},
                                {FQ_BN_CHANNELS_FIRST, 3, SIZE_MAX / 2, 3}};
    for (size_t j = 0; j < COUNT_OF(huge); ++j) {
        const fq_bn_shape h = huge[j];
        expect(fq_bn_forward_training(x, FQ_DTYPE_F32, h, scale, offset, 1e-3f, 1.0f, NULL, NULL, out, st[0], st[1],
                                      st[2], st[3]) == FQ_ERR_BAD_SHAPE, "training, element count overflows (%zu)", j);
        expect(fq_bn_forward_inference(x, FQ_DTYPE_BF16, h, scale, offset, mean, var, 1e-3f, out) == FQ_ERR_BAD_SHAPE,
               "inference, element count overflows (%zu)", j);
        expect(fq_bn_grad(dy, x, FQ_DTYPE_F16, h, scale, mean, var, 1e-3f, 1, out, st[0], st[1]) == FQ_ERR_BAD_SHAPE,
               "gradient, element count overflows (%zu)", j);
    }
    /* What may be NULL: mean_in / variance_in when the factor is 1; everything when there is no
       channel and no element. */
    expect(fq_bn_forward_training(x, FQ_DTYPE_F32, shape, scale, offset, 1e-3f, 1.0f, NULL, NULL, out, st[0], st[1], st[2],
                                  st[3]) == FQ_OK, "training, factor 1, NULL mean_in / variance_in");
    const fq_bn_shape none = {FQ_BN_CHANNELS_FIRST, 4, 0, 5};
    expect(fq_bn_forward_training(NULL, FQ_DTYPE_BF16, none, NULL, NULL, 1e-3f, 0.5f, NULL, NULL, NULL, NULL, NULL, NULL,
                                  NULL) == FQ_OK, "training with no channels and NULL everywhere");
    expect(fq_bn_forward_inference(NULL, FQ_DTYPE_F16, none, NULL, NULL, NULL, NULL, 1e-3f, NULL) == FQ_OK,
           "inference with no channels and NULL everywhere");
    expect(fq_bn_grad(NULL, NULL, FQ_DTYPE_F32, none, NULL, NULL, NULL, 1e-3f, 1, NULL, NULL, NULL) == FQ_OK,
           "gradient with no channels and NULL everywhere");
    for (int s = FQ_ERR_BAD_SHAPE; s <= FQ_ERR_BAD_LAYOUT; ++s) {
        const char *text = fq_status_string((fq_status)s);
        expect(text != NULL && text[0] != '\0' && strcmp(text, "unknown status") != 0, "fq_status_string(%d)", s);
    }
}

/* ---------------- flush-to-zero, and the caller's environment ---------------- */

/* A caller's floating-point state that is not the default: rounding toward zero, and on AArch64
   also FPCR.DN (default NaN: every NaN result becomes the default NaN). */
static void caller_state(int odd) {
    fesetround(odd ? FE_TOWARDZERO : FE_TONEAREST);
    set_fpcr_bit(25, odd);
}

/* Results do not depend on the caller's rounding mode (nor FPCR.DN): the spec rounds to nearest
   even, and worker threads start from the default state while the calling thread keeps its own,
   so a caller's mode that leaked into the kernels would also make results depend on the thread
   count. Every ISA, 1 and THREADS_MAX threads, against scalar on one thread in the default state. */
static void test_caller_environment(void) {
    const size_t shapes[][3] = {{64, 17, 61}, {3, 19, 5}};
    for (size_t s = 0; s < COUNT_OF(shapes); ++s)
        for (int layout = 0; layout < 2; ++layout)
            for (int t = 0; t < 3; ++t)
                for (int ep = 0; ep < EP_COUNT; ++ep) {
                    const fq_bn_shape shape = {(fq_bn_layout)layout, shapes[s][0], shapes[s][1], shapes[s][2]};
                    bn_data d;
                    data_make(&d, dtypes[t], shape, is_grad((entry)ep), 0);
                    if (d.n > 0) put_raw(d.x, d.n / 2, dtypes[t], special_bits(dtypes[t], 1) | 1u); /* NaN or inf */
                    const bn_call c = {(entry)ep, dtypes[t], shape, d.x, d.dy, d.scale, d.offset, d.mean, d.var,
                                       EPS_DEFAULT, ep == EP_TRAIN ? 0.5f : 1.0f, 1, "caller state"};
                    unsigned char *strict = payload_strict_channels(&c);
                    result ref;
                    run(&c, FQ_ISA_SCALAR, 1, ALIAS_NONE, 0x5a, &ref);
                    char what[400], why[600];
                    describe(&c, what, sizeof what);
                    for (int k = 0; k < n_isas; ++k)
                        for (int threads = 1; threads <= THREADS_MAX; threads += THREADS_MAX - 1) {
                            result got;
                            caller_state(1);
                            run(&c, isas[k], threads, ALIAS_NONE, 0xa5, &got);
                            caller_state(0);
                            const char *diff = difference(&c, strict, &ref, &got, why, sizeof why);
                            expect(diff == NULL, "%s threads=%d, caller rounding toward zero%s: %s: %s",
                                   fq_isa_name(isas[k]), threads,
#if defined(__aarch64__)
                                   " and FPCR.DN=1",
#else
                                   "",
#endif
                                   what, diff);
                            result_free(&got);
                        }
                    result_free(&ref);
                    free(strict);
                    data_free(&d);
                }
    expect(fegetround() == FE_TONEAREST, "the harness's rounding mode is back to nearest");
}

/* Denormal x counts as zero in every type (bf16 and f32 denormals; a half subnormal is a normal
   float32 and does not), on every ISA and thread count (each worker thread sets its own mode). */
static void test_flush_to_zero(void) {
    const fq_bn_shape shapes[2] = {{FQ_BN_CHANNELS_LAST, 4096, 20, 1}, {FQ_BN_CHANNELS_FIRST, 4, 5, 4096}};
    const size_t n = 4096 * 20;
    unsigned char *x = xmalloc_aligned(n * 4), *y = xmalloc_aligned(n * 4);
    float scale[20], offset[20], mean[20], var[20];
    for (int c = 0; c < 20; ++c) scale[c] = 1.0f, offset[c] = 0.0f, mean[c] = 0.0f, var[c] = 1.0f;
    for (int t = 0; t < 3; ++t) {
        const fq_dtype dt = dtypes[t];
        for (size_t i = 0; i < n; ++i) {
            const uint32_t sign = i & 1 ? 0x80000000u : 0u;
            if (dt == FQ_DTYPE_F32) put_raw(x, i, dt, sign | (1u + (uint32_t)(i * 2654435761u % 0x7fffffu)));
            else if (dt == FQ_DTYPE_BF16) put_raw(x, i, dt, sign >> 16 | (1u + (uint32_t)(i % 0x7fu)));
            else put_raw(x, i, dt, sign >> 16 | (1u + (uint32_t)(i % 0x3ffu))); /* half subnormals */
        }
        for (int k = 0; k < n_isas; ++k)
            for (int threads = 1; threads <= THREADS_MAX; ++threads)
                for (int s = 0; s < 2; ++s) {
                    set_isa_threads(isas[k], threads);
                    const fq_status status =
                        fq_bn_forward_inference(x, dt, shapes[s], scale, offset, mean, var, 0.0f, y);
                    size_t bad = 0;
                    for (size_t i = 0; i < n; ++i) {
                        const float want = dt == FQ_DTYPE_F16 ? value_at(x, i, dt) : 0.0f;
                        /* y = (x - 0) * 1 + 0: a flushed x gives +0 ((-0) + 0 is +0). */
                        bad += raw_at(y, i, dt) != round_to(want + 0.0f, dt);
                    }
                    expect(status == FQ_OK && bad == 0,
                           "%s threads=%d %s %s: inference of denormal x: %zu outputs not as flushed", fq_isa_name(isas[k]),
                           threads, dtype_names[t], s ? "channels-first" : "channels-last", bad);
                }
    }
    volatile float tiny = 1e-40f, one = 1.0f;
    expect(tiny * one != 0.0f && tiny + 0.0f != 0.0f, "denormals flushed in the caller after fqcore calls");
    free(x);
    free(y);
    fq_set_num_threads(1);
}

/* The sweeps, each followed by how many NaN-payload differences it let through. */
static void report_tolerated(void) {
    if (payload_tolerated)
        printf("    (%ld NaN-payload-only differences where several NaNs meet in a channel: allowed)\n",
               payload_tolerated);
    payload_tolerated = 0;
}

/* The channels-first gradient walked in blocks of channels and in two passes (kernel_choices.h),
   whichever this CPU takes: the same bits, every ISA, 1..THREADS_MAX threads, float32 and
   float16, shapes of one to many blocks. */
static void test_gradient_walks(void) {
    const size_t shapes[][3] = {{8, 64, 196}, {2, 1030, 49}, {64, 17, 61}, {5, 256, 64}, {3, 7, 3121}};
    for (size_t s = 0; s < COUNT_OF(shapes); ++s)
        for (int t = 0; t < 2; ++t) {
            const fq_bn_shape shape = {FQ_BN_CHANNELS_FIRST, shapes[s][0], shapes[s][1], shapes[s][2]};
            const size_t c = shape.channels, n = shape.outer * c * shape.inner, es = t ? 2 : 4;
            unsigned char *x = xmalloc_aligned(n * es), *dy = xmalloc_aligned(n * es);
            unsigned char *dx[2] = {xmalloc_aligned(n * es), xmalloc_aligned(n * es)};
            float *per_channel = malloc(7 * c * sizeof(float));
            float *scale = per_channel, *mean = scale + c, *var = mean + c, *ds[2] = {var + c, var + 2 * c},
                  *doff[2] = {var + 3 * c, var + 4 * c};
            uint32_t state = 12345u + (uint32_t)s;
            for (size_t i = 0; i < n; ++i) {
                state = state * 1664525u + 1013904223u;
                put_value(x, i, dtypes[t], (float)(state >> 8) / 16777216.0f * 4.0f - 1.5f);
                state = state * 1664525u + 1013904223u;
                put_value(dy, i, dtypes[t], (float)(state >> 8) / 16777216.0f - 0.5f);
            }
            for (size_t k = 0; k < c; ++k) scale[k] = 0.5f + (float)k / (float)c, mean[k] = 0.5f, var[k] = 1.25f;
            for (int k = 0; k < n_isas; ++k)
                for (int threads = 1; threads <= THREADS_MAX; ++threads) {
                    set_isa_threads(isas[k], threads);
                    fq_status status = FQ_OK;
                    for (int blocks = 0; blocks < 2; ++blocks) {
                        fq_force_bn_blocks(blocks);
                        status |= fq_bn_grad(dy, x, dtypes[t], shape, scale, mean, var, 1e-3f, 1, dx[blocks],
                                             ds[blocks], doff[blocks]);
                    }
                    fq_force_bn_blocks(-1);
                    expect(status == FQ_OK && memcmp(dx[0], dx[1], n * es) == 0 &&
                           memcmp(ds[0], ds[1], c * sizeof(float)) == 0 &&
                           memcmp(doff[0], doff[1], c * sizeof(float)) == 0,
                           "%s threads=%d %s %zux%zux%zu: blocks and two passes differ", fq_isa_name(isas[k]),
                           threads, dtype_names[t], shape.outer, c, shape.inner);
                }
            free(x);
            free(dy);
            free(dx[0]);
            free(dx[1]);
            free(per_channel);
        }
    fq_set_num_threads(1);
}

static void sweep_rounded_once(void) { test_rounded_once(); report_tolerated(); }
static void sweep_shapes(void) { test_shapes(); report_tolerated(); }
static void sweep_in_place(void) { test_in_place(); report_tolerated(); }
static void sweep_large(void) { test_large(); report_tolerated(); }
static void sweep_streaming(void) { test_streaming(); report_tolerated(); }

int main(void) {
    static const harness_section sections[] = {
        {"statuses", test_errors},
        {"empty tensors", test_empty},
        {"n = 1", test_single_element},
        {"flush-to-zero", test_flush_to_zero},
        {"NaN signs and payloads", test_nan_signs},
        {"caller's rounding mode", test_caller_environment},
        {"inference exact (ties, overflow)", test_exact_inference},
        {"low precision rounded once", sweep_rounded_once},
        {"statistics vs long double", test_statistics},
        {"shapes x layouts x types", sweep_shapes},
        {"in place", sweep_in_place},
        {"large, threads 1..4", sweep_large},
        {"channels-first gradient: blocks and two passes", test_gradient_walks},
        {"streamed output, threads 1..4", sweep_streaming},
    };
    return harness_main("C kernel harness (batch norm)", sections, sizeof sections / sizeof sections[0]);
}
