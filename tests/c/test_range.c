/* C test harness, range observer (fq_f32_range): every ISA and thread count against a reference
   written from the rules in fqcore.h with float comparisons (not the kernels' bit-pattern extremes),
   bit for bit; guards around the outputs; statuses. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fqcore.h"
#include "harness.h"

#define GUARD ((size_t)16)       /* floats of guard on each side of min and max */
#define MAX_OFFSET ((size_t)16)  /* x starts 0..15 elements past a 64-byte boundary */
#define NAN_BITS 0x7fc00000u

/* ---------------- reference ---------------- */

/* A denormal as the zero of its sign. */
static float flushed(float v) { return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v; }

/* Channel c of x viewed as [n / channels, channels]: NaN anywhere -> the quiet NaN; -0 below +0;
   nothing -> (+inf, -inf). */
static void reference(const float *x, size_t n, size_t channels, size_t c, float *lo, float *hi) {
    float a = INFINITY, b = -INFINITY;
    int nan = 0;
    for (size_t i = c; i < n; i += channels) {
        const float v = flushed(x[i]);
        if (isnan(v)) {
            nan = 1;
            continue;
        }
        if (v < a || (v == a && signbit(v))) a = v;
        if (v > b || (v == b && !signbit(v))) b = v;
    }
    *lo = nan ? from_bits(NAN_BITS) : a;
    *hi = nan ? from_bits(NAN_BITS) : b;
}

/* ---------------- data ---------------- */

static const uint32_t special_bits[] = {
    0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffbfffffu, /* NaNs: quiet, negative, signalling */
    0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u, /* +-inf, +-0 */
    0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu, /* denormals */
    0x00800000u, 0x80800000u, 0x7f7fffffu, 0xff7fffffu, /* smallest normals, largest finite */
};
#define N_SPECIAL (sizeof special_bits / sizeof special_bits[0])

/* Values of mixed sign and scale with `specials` special values; NaNs only when `nans`. */
static void fill(float *x, size_t n, size_t specials, int nans) {
    for (size_t i = 0; i < n; ++i) x[i] = unif(-4.0f, 4.0f) * (float)(1 + below(3));
    for (size_t k = 0; k < specials && n > 0; ++k) {
        const size_t first = nans ? 0 : 4;
        x[below(n)] = from_bits(special_bits[first + below(N_SPECIAL - first)]);
    }
}

/* ---------------- one call, checked ---------------- */

typedef struct {
    float *buf; /* GUARD + channels + GUARD floats */
    float *out;
} guarded;

static guarded guarded_new(size_t channels) {
    guarded g;
    g.buf = xmalloc_aligned((2 * GUARD + channels) * sizeof(float));
    g.out = g.buf + GUARD;
    for (size_t i = 0; i < 2 * GUARD + channels; ++i) g.buf[i] = from_bits(GUARD_BITS);
    return g;
}

static int guards_intact(const guarded *g, size_t channels) {
    for (size_t i = 0; i < GUARD; ++i)
        if (to_bits(g->buf[i]) != GUARD_BITS || to_bits(g->out[channels + i]) != GUARD_BITS) return 0;
    return 1;
}

/* Runs fq_f32_range on every ISA and `threads` threads and checks every channel's bits. */
static void check_call(const float *x, size_t n, size_t channels, const char *what) {
    guarded lo = guarded_new(channels), hi = guarded_new(channels);
    float *ref_lo = xmalloc_aligned(channels * sizeof(float) + 1);
    float *ref_hi = xmalloc_aligned(channels * sizeof(float) + 1);
    for (size_t c = 0; c < channels; ++c) reference(x, n, channels, c, &ref_lo[c], &ref_hi[c]);
    for (int k = 0; k < n_isas; ++k)
        for (int threads = 1; threads <= THREADS_MAX; ++threads) {
            if (threads > 1 && n < 65536) break; /* below dispatch.c's parallel size */
            set_isa_threads(isas[k], threads);
            const fq_status s = fq_f32_range(x, n, channels, lo.out, hi.out);
            if (!expect(s == FQ_OK, "%s %s threads %d n %zu channels %zu: status %s", what,
                        fq_isa_name(isas[k]), threads, n, channels, fq_status_string(s)))
                continue;
            size_t bad = 0, first = 0;
            for (size_t c = 0; c < channels; ++c)
                if (to_bits(lo.out[c]) != to_bits(ref_lo[c]) || to_bits(hi.out[c]) != to_bits(ref_hi[c]))
                    if (bad++ == 0) first = c;
            expect(bad == 0,
                   "%s %s threads %d n %zu channels %zu: %zu channels differ, first %zu: "
                   "(%08x, %08x) expected (%08x, %08x)",
                   what, fq_isa_name(isas[k]), threads, n, channels, bad, first,
                   to_bits(lo.out[first]), to_bits(hi.out[first]), to_bits(ref_lo[first]),
                   to_bits(ref_hi[first]));
            expect(guards_intact(&lo, channels) && guards_intact(&hi, channels),
                   "%s %s threads %d n %zu channels %zu: wrote outside min / max", what,
                   fq_isa_name(isas[k]), threads, n, channels);
        }
    free(lo.buf);
    free(hi.buf);
    free(ref_lo);
    free(ref_hi);
}

/* ---------------- sections ---------------- */

static void test_errors(void) {
    float x[12] = {0}, lo[4], hi[4];
    expect(fq_f32_range(x, 12, 0, lo, hi) == FQ_ERR_BAD_SHAPE, "channels 0, n 12: bad shape");
    expect(fq_f32_range(x, 12, 5, lo, hi) == FQ_ERR_BAD_SHAPE, "12 %% 5 != 0: bad shape");
    expect(fq_f32_range(NULL, 12, 4, lo, hi) == FQ_ERR_NULL_POINTER, "x NULL");
    expect(fq_f32_range(x, 12, 4, NULL, hi) == FQ_ERR_NULL_POINTER, "min NULL");
    expect(fq_f32_range(x, 12, 4, lo, NULL) == FQ_ERR_NULL_POINTER, "max NULL");
    expect(fq_f32_range(NULL, 0, 0, NULL, NULL) == FQ_OK, "n 0, channels 0: nothing to do");
    expect(fq_f32_range(NULL, 0, 4, lo, hi) == FQ_OK, "n 0, channels 4: ok");
    for (int c = 0; c < 4; ++c)
        expect(to_bits(lo[c]) == 0x7f800000u && to_bits(hi[c]) == 0xff800000u,
               "empty channel %d: (+inf, -inf), got (%08x, %08x)", c, to_bits(lo[c]), to_bits(hi[c]));
    expect(fq_f32_range(NULL, 0, 4, NULL, hi) == FQ_ERR_NULL_POINTER, "n 0, min NULL");
}

/* Signed zeros and denormals in every order, against hand-written results. */
static void test_zeros_and_denormals(void) {
    typedef struct {
        float v[3];
        uint32_t lo, hi;
    } zcase;
    const float d = from_bits(0x00000005u), md = from_bits(0x80000005u);
    const zcase cases[] = {
        {{0.0f, -0.0f, 0.0f}, 0x80000000u, 0x00000000u},  {{-0.0f, -0.0f, -0.0f}, 0x80000000u, 0x80000000u},
        {{0.0f, 0.0f, 0.0f}, 0x00000000u, 0x00000000u},   {{-0.0f, 0.0f, 1.0f}, 0x80000000u, 0x3f800000u},
        {{-1.0f, 0.0f, -0.0f}, 0xbf800000u, 0x00000000u}, {{-1.0f, -0.0f, -2.0f}, 0xc0000000u, 0x80000000u},
        {{d, 1.0f, d}, 0x00000000u, 0x3f800000u},         {{md, 1.0f, d}, 0x80000000u, 0x3f800000u},
        {{d, d, d}, 0x00000000u, 0x00000000u},            {{md, md, md}, 0x80000000u, 0x80000000u},
        {{-1.0f, md, -1.0f}, 0xbf800000u, 0x80000000u},   {{-1.0f, d, md}, 0xbf800000u, 0x00000000u},
    };
    enum { ROWS = 40, CH = 21 };
    static float x[ROWS * CH];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k)
        for (int shift = 0; shift < 3; ++shift) {
            for (int r = 0; r < ROWS; ++r)
                for (int c = 0; c < CH; ++c) x[r * CH + c] = cases[k].v[(r + shift + c) % 3];
            for (int kk = 0; kk < n_isas; ++kk) {
                float lo[CH], hi[CH], t_lo, t_hi;
                set_isa_threads(isas[kk], 1);
                fq_f32_range(x, ROWS * CH, CH, lo, hi);
                fq_f32_range(x, ROWS * CH, 1, &t_lo, &t_hi);
                int ok = to_bits(t_lo) == cases[k].lo && to_bits(t_hi) == cases[k].hi;
                for (int c = 0; c < CH; ++c)
                    ok &= to_bits(lo[c]) == cases[k].lo && to_bits(hi[c]) == cases[k].hi;
                expect(ok, "%s zeros case %zu shift %d: (%08x, %08x) expected (%08x, %08x)",
                       fq_isa_name(isas[kk]), k, shift, to_bits(lo[0]), to_bits(hi[0]), cases[k].lo,
                       cases[k].hi);
            }
        }
}

/* Each NaN flavour, at each place of a channel: that channel only becomes 0x7fc00000. */
static void test_nan(void) {
    enum { ROWS = 37, CH = 35 };
    static float x[ROWS * CH];
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffbfffffu, 0x7fc12345u};
    for (size_t k = 0; k < sizeof nans / sizeof nans[0]; ++k)
        for (int at = 0; at < ROWS * CH; at += 97) {
            fill(x, ROWS * CH, 0, 0);
            x[at] = from_bits(nans[k]);
            check_call(x, ROWS * CH, CH, "nan");
            check_call(x, ROWS * CH, 1, "nan per tensor");
        }
}

/* Channel counts around the vector widths, flat blocks and padded periods; rows around the 4-row
   steps; starts 0..15 elements off a 64-byte boundary. */
static void sweep_shapes(void) {
    static const size_t channels[] = {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65,
                                      100, 127, 128, 129, 255, 256, 257, 1000, 4095, 4096, 4097};
    static const size_t rows[] = {1, 2, 3, 4, 5, 7, 8, 9, 33};
    float *buf = xmalloc_aligned((4097 * 33 + MAX_OFFSET) * sizeof(float));
    for (size_t ci = 0; ci < sizeof channels / sizeof channels[0]; ++ci)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ++ri) {
            const size_t n = channels[ci] * rows[ri], offset = (ci + ri) % MAX_OFFSET;
            float *x = buf + offset;
            fill(x, n, 1 + n / 64, ri % 3 == 0);
            check_call(x, n, channels[ci], "shapes");
        }
    /* Per tensor, sizes around the vector widths and flat blocks. */
    for (size_t n = 0; n <= 300; ++n) {
        float *x = buf + n % MAX_OFFSET;
        fill(x, n, n / 50, n % 4 == 0);
        check_call(x, n, 1, "per tensor");
    }
    free(buf);
}

/* Past the parallel size: thread chunks of the flat walk, row chunks, position chunks (few rows),
   and one row of many channels. */
static void sweep_large(void) {
    static const size_t shapes[][2] = {{300001, 1}, {70001, 3}, {2048, 128}, {1000, 100},
                                       {5000, 16}, {2, 150000}, {3, 40000}, {1, 200000},
                                       {40, 4097}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; ++k) {
        const size_t n = shapes[k][0] * shapes[k][1];
        float *x = xmalloc_aligned(n * sizeof(float));
        fill(x, n, 8, 0);
        x[n - 1] = 1e30f; /* the last element is its channel's maximum */
        check_call(x, n, shapes[k][1], "large");
        free(x);
    }
}

/* fq_f32_moving_average against hand-worked float32 results, on whatever FP mode the caller
   has: a denormal step is flushed (the value stays), a denormal value counts as a zero of its
   sign, a result below FLT_MIN becomes a zero of its sign, infinities and NaN propagate. */
static void test_moving_average(void) {
    const float tiny = from_bits(0x00800000u), rate = 0.001f;
    const float start = from_bits(0x00800d1bu); /* just above FLT_MIN */
    typedef struct {
        float v, t, rate;
        uint32_t expected;
    } ecase;
    const ecase cases[] = {
        {start, 0.0f, rate, 0x00800d1bu},             /* step 1e-41: flushed, value unchanged */
        {from_bits(0x00000005u), 1.0f, 0.5f, 0x3f000000u},   /* denormal value counts as +0 */
        {from_bits(0x80000005u), 0.0f, 0.5f, 0x00000000u},   /* -0 - (-0 - 0) * r = +0 */
        {1.5f * tiny, 2.5f * tiny, 0.5f, 0x00c00000u},       /* step -0.5 tiny flushed to -0 */
        {tiny, -1.0f * tiny, 0.75f, 0x80000000u},           /* tiny - 1.5 tiny = -0.5 tiny -> -0 */
        {3.0f, 1.0f, 0.5f, 0x40000000u},                    /* 3 - (3 - 1) * 0.5 = 2 */
        {__builtin_inff(), 1.0f, rate, 0x7fc00000u},        /* inf - inf * r: a NaN */
        {1.0f, __builtin_inff(), rate, 0x7f800000u},        /* 1 - (-inf) * r = +inf */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
        float v = cases[k].v;
        expect(fq_f32_moving_average(&v, &cases[k].t, 1, cases[k].rate) == FQ_OK, "case %zu ok", k);
        const uint32_t want = cases[k].expected;
        expect(want == 0x7fc00000u ? v != v : to_bits(v) == want,
               "moving average case %zu: got %08x, expected %08x", k, to_bits(v), want);
    }
    expect(fq_f32_moving_average(NULL, NULL, 0, rate) == FQ_OK, "n 0: nothing to do");
    float one = 1.0f;
    expect(fq_f32_moving_average(&one, NULL, 1, rate) == FQ_ERR_NULL_POINTER, "targets NULL");
}

int main(void) {
    static const harness_section sections[] = {
        {"statuses", test_errors},
        {"signed zeros, denormals", test_zeros_and_denormals},
        {"NaN", test_nan},
        {"shapes x offsets", sweep_shapes},
        {"large, threads 1..4", sweep_large},
        {"moving-average update", test_moving_average},
    };
    return harness_main("C kernel harness (range)", sections, sizeof sections / sizeof sections[0]);
}
