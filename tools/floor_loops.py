"""The floor under a fake-quant kernel on this CPU: how long its unavoidable arithmetic takes with no
memory traffic at all, next to the numpy ufunc that is its memory floor and the kernel itself; the
per-channel gradient's walk (its streams and grids, nothing else); and, with --batch-norm, the
memory floor of the batch-norm gradient at benchmarks/compare.py's channels-last shapes.

    python tools/floor_loops.py [--n 65536] [--isa avx512|avx2] [--batch-norm [--bn-batch N]]

Each compute-only loop runs the kernel's per-vector operations, in TF's order and with TF's
roundings, on inputs held in registers (an empty asm makes each vector a fresh input, so nothing is
hoisted and no vector waits on another), as many vectors as the call has. Where that alone takes
longer than 1.25x the ufunc, a 1.25x target is out of reach on this CPU whatever the walk: the note
of issue 18 quotes this table. Beside it, the same operations with their loads and stores, in order
(for the Vars gradient, its walk below): what they cost with the memory traffic of the call. Every
loop's time is less its call through ctypes (the same call with nothing to do), which costs more
than fqcore's bindings.

The Vars gradient's walk: the per-channel streams loop below over rows of one strip, one range for
all, which reads x and g and writes dx in order with the grid in registers, as the per-tensor kernel
does; and that walk tested (below).

- args forward: clamp (min, max), subtract, multiply, subtract, add, floor, multiply: 8 operations.
- vars gradient: the mask (two compares) as 1.0 / 0.0, times g; and dx - g, ORed over a group and
  compared with 0, which tells whether the sums may skip it: 7 operations a vector and a test.

The per-channel gradient's floor is a walk, not arithmetic alone: each vector needs its
positions' grids, which fit in registers only a strip of positions at a time. Its loop walks strips
of four vectors of positions down all the rows (x as compare.py's [n / 128, 128]), reads x and g,
writes dx and does the per-tensor gradient's operations with the strip's grids; no sums (they are
skipped where nothing is clipped). "Tested", the same walk also ends each group of vectors (the
kernel's FQ_GRAD_GROUP) in the test that lets a kernel skip the group's sums, and the branch on
it, whose loud side does nothing: a walk that skips quiet groups' sums by a branch does no less
(adding every group's products instead costs more: the README's per-channel notes). Beside them,
the kernel on compare.py's inputs and on the same inputs with nothing clipped: the difference is
what the clipped elements' per-channel sums cost.

The batch-norm gradient cannot start its output before it has summed dy and dy * x over the whole
batch, so it reads x and dy twice and writes dx once: five streams where np.add has three. Its
loops (channels last, the shapes where the targets are missed) walk those two passes as fqcore's
kernel does and do nothing else: pass 1 in memory order with float32 sums; pass 2 in items of
64K elements from the last to the first (what pass 1 left in the caches first), writing dx with
plain or with streamed stores (the faster of the two is the floor). Beside them: np.add, pass 1
alone (reading x and dy once), fqcore's gradient, and PyTorch's where it is installed. PyTorch's
time over the two passes' is the most any kernel that makes the two passes could be faster than
PyTorch; under 1.2, that target is out of reach on this CPU. Channels first, fqcore's gradient
reads x and dy from memory once (blocks of channels), so no such floor applies. The floor holds
for data beyond L2: with the few rows of a small --bn-batch, pass 1's sums (loaded and stored
in L1 for every row) cost more than its reads.

Needs a C compiler (cc); builds a small library in a temporary directory.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fqcore  # noqa: E402
from fqcore import _kernels  # noqa: E402
from benchmarks.machine import cpu_model  # noqa: E402
from benchmarks.placement import placed_arrays  # noqa: E402

# compare.py's per-channel layout: [n / 128, 128].
CHANNEL_PERIOD = 128
# The batch-norm kernels' elementwise items (bn_walk.c, BN_CHUNK): elements a pass takes at once.
BN_CHUNK = 65536

SOURCE = r"""
#include <immintrin.h>
#include <stddef.h>

/* An empty asm that claims to change v: each use is a fresh input to the compiler (nothing hoisted
   or folded) and costs nothing at run time; and one that claims to read it (nothing deleted). */
#define FRESH(v) __asm__ volatile("" : "+v"(v))
#define USE(v) __asm__ volatile("" ::"v"(v))
#define CHAINS 8

/* The Vars gradient's operations on one vector, as the kernels do them: dx = g times the mask
   (x inside [lo, hi]) as 1.0 / 0.0; and `changes` ORs in the bits of dx - g (the sums may skip a
   group where that is +-0 in every lane: fq_simd.h, vector_dx_change). The compute-only loops and
   the per-channel streams share them. */
static inline __attribute__((always_inline, target("avx512f,avx512dq"))) __m512
vars_grad_vector_avx512(__m512 x, __m512 g, __m512 lo, __m512 hi, __m512 *changes) {
    const __mmask16 inside =
        _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(x, hi, _CMP_LE_OQ);
    const __m512 dx = _mm512_mul_ps(g, _mm512_maskz_mov_ps(inside, _mm512_set1_ps(1.0f)));
    *changes = _mm512_or_ps(*changes, _mm512_sub_ps(dx, g));
    return dx;
}

static inline __attribute__((always_inline, target("avx2,fma"))) __m256
vars_grad_vector_avx2(__m256 x, __m256 g, __m256 lo, __m256 hi, __m256 *changes) {
    const __m256 inside =
        _mm256_and_ps(_mm256_cmp_ps(x, lo, _CMP_GE_OQ), _mm256_cmp_ps(x, hi, _CMP_LE_OQ));
    const __m256 dx = _mm256_mul_ps(g, _mm256_and_ps(inside, _mm256_set1_ps(1.0f)));
    *changes = _mm256_or_ps(*changes, _mm256_sub_ps(dx, g));
    return dx;
}

/* Whether a group's ORed changes are +-0 in every lane. */
static inline __attribute__((always_inline, target("avx512f,avx512dq"))) unsigned
quiet_avx512(__m512 changes) {
    return _mm512_cmp_ps_mask(changes, _mm512_setzero_ps(), _CMP_EQ_OQ) == 0xffff;
}

static inline __attribute__((always_inline, target("avx2,fma"))) unsigned
quiet_avx2(__m256 changes) {
    return _mm256_movemask_ps(_mm256_cmp_ps(changes, _mm256_setzero_ps(), _CMP_EQ_OQ)) == 0xff;
}

/* The Args forward's eight operations on one vector, as the kernels do them. */
static inline __attribute__((always_inline, target("avx512f,avx512dq"))) __m512
args_forward_vector_avx512(__m512 x) {
    const __m512 nmin = _mm512_set1_ps(-6.0f), nmax = _mm512_set1_ps(6.0f);
    const __m512 inv = _mm512_set1_ps(21.25f), zero = _mm512_set1_ps(128.0f);
    const __m512 half = _mm512_set1_ps(0.5f), scale = _mm512_set1_ps(12.0f / 255.0f);
    const __m512 c = _mm512_max_ps(nmin, _mm512_min_ps(nmax, x));
    const __m512 s = _mm512_mul_ps(_mm512_sub_ps(c, nmin), inv);
    const __m512 t = _mm512_add_ps(_mm512_sub_ps(s, zero), half);
    return _mm512_mul_ps(_mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC), scale);
}

__attribute__((target("avx512f,avx512dq"))) void args_forward_compute_avx512(size_t vectors) {
    __m512 in[CHAINS];
    for (int k = 0; k < CHAINS; ++k) in[k] = _mm512_set1_ps(0.37f * (float)k - 3.0f);
    for (size_t i = 0; i < vectors; i += CHAINS)
        for (int k = 0; k < CHAINS; ++k) {
            FRESH(in[k]);
            USE(args_forward_vector_avx512(in[k]));
        }
}

/* The same operations with their memory traffic: x read, out written, in order. */
__attribute__((target("avx512f,avx512dq"))) void args_forward_streams_avx512(
        const float *x, float *out, size_t n) {
    for (size_t i = 0; i < n; i += 16)
        _mm512_storeu_ps(out + i, args_forward_vector_avx512(_mm512_loadu_ps(x + i)));
}

__attribute__((target("avx512f,avx512dq"))) void vars_grad_compute_avx512(size_t vectors) {
    const __m512 nmin = _mm512_set1_ps(-6.0f), nmax = _mm512_set1_ps(6.0f);
    __m512 g[CHAINS], x[CHAINS];
    for (int k = 0; k < CHAINS; ++k) {
        g[k] = _mm512_set1_ps(1.0f + (float)k);
        x[k] = _mm512_set1_ps(0.5f * (float)k);
    }
    for (size_t i = 0; i < vectors; i += CHAINS) {
        __m512 changes = _mm512_setzero_ps();
        for (int k = 0; k < CHAINS; ++k) {
            FRESH(g[k]);
            FRESH(x[k]);
            USE(vars_grad_vector_avx512(x[k], g[k], nmin, nmax, &changes));
        }
        __asm__ volatile("" ::"r"(quiet_avx512(changes)));
    }
}

static inline __attribute__((always_inline, target("avx2,fma"))) __m256
args_forward_vector_avx2(__m256 x) {
    const __m256 nmin = _mm256_set1_ps(-6.0f), nmax = _mm256_set1_ps(6.0f);
    const __m256 inv = _mm256_set1_ps(21.25f), zero = _mm256_set1_ps(128.0f);
    const __m256 half = _mm256_set1_ps(0.5f), scale = _mm256_set1_ps(12.0f / 255.0f);
    const __m256 c = _mm256_max_ps(nmin, _mm256_min_ps(nmax, x));
    const __m256 s = _mm256_mul_ps(_mm256_sub_ps(c, nmin), inv);
    const __m256 t = _mm256_add_ps(_mm256_sub_ps(s, zero), half);
    return _mm256_mul_ps(_mm256_round_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC), scale);
}

__attribute__((target("avx2,fma"))) void args_forward_compute_avx2(size_t vectors) {
    __m256 in[CHAINS];
    for (int k = 0; k < CHAINS; ++k) in[k] = _mm256_set1_ps(0.37f * (float)k - 3.0f);
    for (size_t i = 0; i < vectors; i += CHAINS)
        for (int k = 0; k < CHAINS; ++k) {
            FRESH(in[k]);
            USE(args_forward_vector_avx2(in[k]));
        }
}

__attribute__((target("avx2,fma"))) void args_forward_streams_avx2(const float *x, float *out,
                                                                   size_t n) {
    for (size_t i = 0; i < n; i += 8)
        _mm256_storeu_ps(out + i, args_forward_vector_avx2(_mm256_loadu_ps(x + i)));
}

__attribute__((target("avx2,fma"))) void vars_grad_compute_avx2(size_t vectors) {
    const __m256 nmin = _mm256_set1_ps(-6.0f), nmax = _mm256_set1_ps(6.0f);
    __m256 g[4], x[4];
    for (int k = 0; k < 4; ++k) {
        g[k] = _mm256_set1_ps(1.0f + (float)k);
        x[k] = _mm256_set1_ps(0.5f * (float)k);
    }
    for (size_t i = 0; i < vectors; i += 4) {
        __m256 changes = _mm256_setzero_ps();
        for (int k = 0; k < 4; ++k) {
            FRESH(g[k]);
            FRESH(x[k]);
            USE(vars_grad_vector_avx2(x[k], g[k], nmin, nmax, &changes));
        }
        __asm__ volatile("" ::"r"(quiet_avx2(changes)));
    }
}

/* The per-channel gradient's streams with its grids and nothing else, in strips: rows of `period`
   values, walked STRIP vectors of positions at a time down all the rows, so that the strip's low
   and high grids stay in registers (64 positions on AVX-512, 32 on AVX2); x and g read, dx
   written, the per-tensor gradient's step with the strip's grids; no sums, as where no element is
   clipped. `period` must be a multiple
   of STRIP vectors. Four vectors a strip: Intel Xeon, [512, 128], AVX-512 7.2 us against 7.8 with
   two and 7.3 with eight; AVX2 8.2 against 9.2 with two and 8.1 with eight (whose grids do not
   fit AVX2's 16 registers: the compiler keeps some on the stack). */
#define STRIP_AVX512 4
#define STRIP_AVX2 4

/* The streams of one ISA, channel_grad_streams_<isa> and channel_grad_streams_tested_<isa>: the
   second ends every GROUP vectors of a row (the ISA's FQ_GRAD_GROUP: 4 in fq_avx512.c, 2 in
   fq_avx2.c) in the test the kernels make before they may skip a group's sums (fq_simd.h,
   group_dx_quiet: its ORed changes compared with 0, and a branch), whose loud side does nothing. */
#define CHANNEL_STREAMS(isa, vec, W, STRIP, GROUP, load, store, zero, quiet)                       \
    static inline __attribute__((always_inline)) void channel_streams_##isa(                       \
            const float *x, const float *g, float *dx, size_t n, const float *lo, const float *hi, \
            size_t period, const int group) {                                                      \
        vec changes = zero();                                                                      \
        for (size_t p0 = 0; p0 < period; p0 += W * STRIP) {                                        \
            vec low[STRIP], high[STRIP];                                                           \
            for (int k = 0; k < STRIP; ++k) {                                                      \
                low[k] = load(lo + p0 + W * k);                                                    \
                high[k] = load(hi + p0 + W * k);                                                   \
            }                                                                                      \
            for (size_t row = p0; row < n; row += period)                                          \
                for (int k = 0; k < STRIP; ++k) {                                                  \
                    const size_t at = row + W * k;                                                 \
                    vec v = load(x + at), d = load(g + at);                                        \
                    FRESH(v); /* one load of each in a register, not one for each of its uses */   \
                    FRESH(d);                                                                      \
                    store(dx + at, vars_grad_vector_##isa(v, d, low[k], high[k], &changes));       \
                    if (group > 0 && (k + 1) % group == 0) {                                       \
                        if (!quiet(changes)) __asm__ volatile("" ::: "memory");                    \
                        changes = zero();                                                          \
                    }                                                                              \
                }                                                                                  \
        }                                                                                          \
        __asm__ volatile("" ::"r"(quiet(changes)));                                                \
    }                                                                                              \
    void channel_grad_streams_##isa(const float *x, const float *g, float *dx, size_t n,           \
                                    const float *lo, const float *hi, size_t period) {             \
        channel_streams_##isa(x, g, dx, n, lo, hi, period, 0);                                     \
    }                                                                                              \
    void channel_grad_streams_tested_##isa(const float *x, const float *g, float *dx, size_t n,    \
                                           const float *lo, const float *hi, size_t period) {      \
        channel_streams_##isa(x, g, dx, n, lo, hi, period, GROUP);                                 \
    }

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq")
CHANNEL_STREAMS(avx512, __m512, 16, STRIP_AVX512, 4, _mm512_loadu_ps, _mm512_storeu_ps,
                _mm512_setzero_ps, quiet_avx512)
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
CHANNEL_STREAMS(avx2, __m256, 8, STRIP_AVX2, 2, _mm256_loadu_ps, _mm256_storeu_ps,
                _mm256_setzero_ps, quiet_avx2)
#pragma GCC pop_options

/* The batch-norm gradient's two passes and nothing else, channels last, walked as fqcore's kernel
   walks them (bn_walk.c): rows of `channels` values (a multiple of W). Pass 1 reads x and dy in
   memory order and sums dy and dy * x per channel in float32 (the sums in L1, even and odd rows
   apart, so that no add waits on the previous row's store of the same sums). Pass 2 writes
   dx = dy * k + x * m in items of `item_rows` rows from the last item to the first, each in
   memory order: it starts on what pass 1 left in the caches. `stream` writes dx with
   non-temporal stores (dx aligned to W floats), as the kernel does when its arrays exceed 16 MiB.
   bn_sums_<isa> is pass 1 alone: what reading x and dy once costs. Pass 1 asks for the lines
   BN_FETCH_AHEAD_FLOATS floats ahead of each row, as the kernel fetches its next group of rows
   (bn_simd.h), so that no walk of fqcore's reads faster than the floor's: on the Intel Xeon, 6.4M
   floats, pass 1 took 1.82 ms without, 1.76-1.78 ms with (2048 to 16384 floats ahead alike). */
#define BN_FETCH_AHEAD_FLOATS 4096
#define BN_TWO_PASSES(isa, vec, W, load, store, stream_store, add, mul)                            \
    void bn_sums_##isa(const float *x, const float *dy, size_t rows, size_t channels,             \
                       float *sums) {                                                              \
        float *even = sums, *odd = sums + 2 * channels; /* sum dy, then sum dy * x */             \
        for (size_t c = 0; c < 4 * channels; ++c) sums[c] = 0.0f;                                  \
        const size_t ahead = BN_FETCH_AHEAD_FLOATS / channels;                                    \
        for (size_t r = 0; r < rows; ++r) {                                                        \
            float *s = r % 2 ? odd : even;                                                         \
            const float *xr = x + r * channels, *gr = dy + r * channels;                           \
            if (r + ahead < rows)                                                                  \
                for (size_t c = 0; c < channels; c += 16) {                                        \
                    __builtin_prefetch(xr + ahead * channels + c);                                 \
                    __builtin_prefetch(gr + ahead * channels + c);                                 \
                }                                                                                  \
            for (size_t c = 0; c < channels; c += W) {                                             \
                const vec g = load(gr + c);                                                        \
                store(s + c, add(load(s + c), g));                                                 \
                store(s + channels + c, add(load(s + channels + c), mul(g, load(xr + c))));        \
            }                                                                                      \
        }                                                                                          \
        for (size_t c = 0; c < 2 * channels; ++c) even[c] += odd[c];                               \
    }                                                                                              \
    void bn_two_passes_##isa(const float *x, const float *dy, float *dx, size_t rows,              \
                             size_t channels, float *sums, size_t item_rows, int stream) {         \
        bn_sums_##isa(x, dy, rows, channels, sums);                                                \
        for (size_t item = (rows + item_rows - 1) / item_rows; item > 0; --item) {                 \
            const size_t first = (item - 1) * item_rows;                                           \
            const size_t end = rows - first < item_rows ? rows : first + item_rows;                \
            for (size_t i = first * channels; i < end * channels; i += channels)                   \
                for (size_t c = 0; c < channels; c += W) {                                         \
                    const vec out = add(mul(load(dy + i + c), load(sums + c)),                     \
                                        mul(load(x + i + c), load(sums + channels + c)));          \
                    if (stream) {                                                                  \
                        stream_store(dx + i + c, out);                                             \
                    } else {                                                                       \
                        store(dx + i + c, out);                                                    \
                    }                                                                              \
                }                                                                                  \
        }                                                                                          \
        _mm_sfence();                                                                              \
    }

#pragma GCC push_options
#pragma GCC target("avx512f")
BN_TWO_PASSES(avx512, __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_stream_ps,
              _mm512_add_ps, _mm512_mul_ps)
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
BN_TWO_PASSES(avx2, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_stream_ps,
              _mm256_add_ps, _mm256_mul_ps)
#pragma GCC pop_options
"""


def build_library(directory):
    source = os.path.join(directory, "floor_loops.c")
    library = os.path.join(directory, "floor_loops.so")
    with open(source, "w") as f:
        f.write(SOURCE)
    subprocess.run(["cc", "-O3", "-shared", "-fPIC", "-ffp-contract=off", source, "-o", library],
                   check=True)
    return ctypes.CDLL(library)


def loop_time(loop, args, size_at):
    """best_time of the ctypes function `loop` on `args`, less that of the same call with its size
    (argument `size_at`) 0: the call through ctypes alone takes 0.2-0.6 us, more than fqcore's
    kernel bindings, and is no part of the work."""
    empty = tuple(0 if k == size_at else a for k, a in enumerate(args))
    return best_time(lambda: loop(*args)) - best_time(lambda: loop(*empty))


def best_time(fn, repeats=15, batch_s=0.005):
    fn()
    start = time.perf_counter()
    fn()
    calls = max(1, int(batch_s / max(time.perf_counter() - start, 1e-7)))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=65536,
                        help=f"elements, a multiple of {CHANNEL_PERIOD} (default 65536: in L2)")
    parser.add_argument("--isa", choices=["avx512", "avx2"], default=None,
                        help="default: every one this CPU runs")
    parser.add_argument("--batch-norm", action="store_true",
                        help="also the batch-norm gradient's memory floor at compare.py's "
                        "channels-last shapes")
    parser.add_argument("--bn-batch", type=int, default=None,
                        help="the batch of those shapes (default: compare.py's)")
    args = parser.parse_args(argv)
    if args.n < CHANNEL_PERIOD or args.n % CHANNEL_PERIOD:
        parser.error(f"--n must be a positive multiple of {CHANNEL_PERIOD}, got {args.n}")
    isas = [args.isa] if args.isa else [i for i in ("avx2", "avx512") if i in fqcore.available_isas()]
    fqcore.set_num_threads(1)
    rng = np.random.default_rng(0)
    # Apart in a 4 KiB page, as compare.py places them: the memory floor without 4K aliasing.
    x, g, out, inside = placed_arrays((args.n,), 4)
    x[:] = rng.standard_normal(args.n) * 2
    g[:] = rng.standard_normal(args.n)
    np.clip(x, -5.9, 5.9, out=inside)  # x with nothing clipped
    lanes = {"avx512": 16, "avx2": 8}
    print(f"CPU: {cpu_model()}; n = {args.n}, one thread; best of 15 batches (us per call)\n")
    print("| ISA | op | memory floor (numpy) | compute only | compute / memory | "
          "with its loads and stores | that / memory | fqcore kernel | kernel / memory |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as directory:
        lib = build_library(directory)
        walk_rows = []
        for isa in isas:
            fqcore.set_isa(isa)
            vectors = ctypes.c_size_t(args.n // lanes[isa])
            # The Vars gradient's walk: rows of one strip (STRIP_AVX512, STRIP_AVX2 vectors).
            walk, tested = streams_times(lib, isa, x, g, out, 4 * lanes[isa])
            cases = [
                ("args forward", lambda: np.multiply(x, 2.0, out=out),
                 getattr(lib, f"args_forward_compute_{isa}"),
                 lambda: args_streams_time(lib, isa, x, out),
                 lambda: _kernels.args_forward(x, -6.0, 6.0, 8, False, out)),
                ("vars gradient", lambda: np.add(x, g, out=out),
                 getattr(lib, f"vars_grad_compute_{isa}"), lambda: walk,
                 lambda: _kernels.vars_grad(g, x, -6.0, 6.0, 8, False, out)),
            ]
            measured = {}  # name: (its memory floor, its kernel)
            for name, memory, compute, with_memory, kernel in cases:
                compute.restype = None
                compute.argtypes = [ctypes.c_size_t]
                t_memory = best_time(memory)
                t_compute = loop_time(compute, (vectors,), 0)
                t_kernel = best_time(kernel)
                print(f"| {isa} | {name} | {t_memory * 1e6:.2f} | " + " | ".join(
                    f"{t * 1e6:.2f} | {t / t_memory:.2f}"
                    for t in (t_compute, with_memory(), t_kernel)) + " |")
                measured[name] = t_memory, t_kernel
            # The Vars gradient's floor, walk and kernel, measured once, serve its walk table too.
            t_add, t_kernel = measured["vars gradient"]
            t_inside = best_time(lambda: _kernels.vars_grad(g, inside, -6.0, 6.0, 8, False, out))
            walk_rows.append(table_row(isa, t_add, [walk, tested, t_kernel, t_inside]))
        vars_gradient_walks(x, walk_rows)
        channel_gradient_floors(lib, isas, x, g, out, inside)
        if args.batch_norm:
            fqcore.set_isa(isas[-1] if isas else fqcore.get_isa())
            batch_norm_floors(lib, fqcore.get_isa(), args.bn_batch)
    return 0


def args_streams(lib, isa):
    """The Args forward's loop with memory, a ctypes function of (x, out, n)."""
    streams = getattr(lib, f"args_forward_streams_{isa}")
    streams.restype = None
    streams.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_size_t]
    return streams


def args_streams_time(lib, isa, x, out):
    """loop_time of args_forward_streams_<isa> on x into out; raises if it does not write what
    args_forward_model says."""
    out.fill(np.nan)
    t = loop_time(args_streams(lib, isa), (x.ctypes.data, out.ctypes.data, x.size), 2)
    if not np.array_equal(out, args_forward_model(x)):
        raise RuntimeError(f"args_forward_streams_{isa} wrote another result than it times")
    return t


def args_forward_model(x):
    """What args_forward_streams_<isa> writes: the loop's formula in float32, operation by
    operation."""
    f = np.float32
    scaled = (np.clip(x, f(-6.0), f(6.0)) - f(-6.0)) * f(21.25)
    return np.floor((scaled - f(128.0)) + f(0.5)) * (f(12.0) / f(255.0))


def channel_streams(lib, name):
    """The per-channel streams loop `name` from the built library, as a ctypes function of (x, g,
    dx, n, lo, hi, period): pointers and sizes."""
    streams = getattr(lib, name)
    streams.restype = None
    streams.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_size_t] + [ctypes.c_void_p] * 2 + [
        ctypes.c_size_t]
    return streams


def streams_times(lib, isa, x, g, out, period):
    """loop_time of the streams over rows of `period` (every range [-6, 6]), without and with each
    group's test. Raises if a loop does not write the gradient it times."""
    lo, hi = np.full(period, -6.0, np.float32), np.full(period, 6.0, np.float32)
    # The pointers made once: each .ctypes.data builds an object (2.2 us for the six here).
    pointers = (x.ctypes.data, g.ctypes.data, out.ctypes.data, x.size, lo.ctypes.data,
                hi.ctypes.data, period)
    times = []
    for name in (f"channel_grad_streams_{isa}", f"channel_grad_streams_tested_{isa}"):
        out.fill(np.nan)
        times.append(loop_time(channel_streams(lib, name), pointers, 3))
        if not np.array_equal(out, g * ((x >= -6.0) & (x <= 6.0))):
            raise RuntimeError(f"{name} wrote another gradient than it times")
    return times


def table_row(isa, t_add, times):
    """A row of the walk tables: np.add's time, then each of `times` and its ratio to it (us)."""
    cells = [f"{t_add * 1e6:.2f}"] + [f"{t * 1e6:.2f} | {t / t_add:.2f}" for t in times]
    return f"| {isa} | {' | '.join(cells)} |"


def vars_gradient_walks(x, rows):
    """The Vars gradient's walk table, its rows made by main: np.add; the per-channel streams loop
    over rows of one strip with one range for all, which is the per-tensor walk (contiguous, the
    grid in registers), without and with each group's test; fqcore's kernel on x and on x with
    nothing clipped (us)."""
    print(f"\nVars gradient, one thread, {np.mean(np.abs(x) > 6):.2%} of x clipped: us per call. "
          f"The walk reads x and g and writes dx, with no sums; tested, each group of vectors also "
          f"ends in the test that lets the kernel skip its sums (where a group is loud, as one in "
          f"{1 / (1 - (1 - np.mean(np.abs(x) > 6)) ** 16):.0f} of AVX2's groups of 16 elements "
          f"are here, that branch goes the way it rarely goes)\n")
    print("| ISA | np.add | walk | walk / np.add | walk, tested | tested / np.add | fqcore kernel | "
          "fqcore / np.add | fqcore, nothing clipped | that / np.add |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)


def channel_gradient_floors(lib, isas, x, g, out, inside, period=CHANNEL_PERIOD):
    """The per-channel gradient table: x as [n / period, period], every channel's range [-6, 6];
    np.add, the streams without and with each group's test, the kernel on x and on `inside`, x
    with nothing clipped."""
    print(f"\nPer-channel (Vars) gradient, one thread, x as [{x.size // period}, {period}], "
          f"{np.mean(np.abs(x) > 6):.2%} of it clipped: us per call. The streams read x, g and "
          f"each vector's grids and write dx, with no sums; tested, each group of vectors also "
          f"ends in the test that lets the kernel skip its sums; the kernel again on x clipped to "
          f"[-5.9, 5.9] shows what the clipped elements' sums cost\n")
    print("| ISA | np.add | streams with grids | streams / np.add | streams, tested | "
          "tested / np.add | fqcore kernel | fqcore / np.add | fqcore, nothing clipped | "
          "that / np.add |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows, grads, outs = x.reshape(-1, period), g.reshape(-1, period), out.reshape(-1, period)
    inside = inside.reshape(-1, period)
    lo, hi = np.full(period, -6.0, np.float32), np.full(period, 6.0, np.float32)
    for isa in isas:
        fqcore.set_isa(isa)
        t_add = best_time(lambda: np.add(x, g, out=out))
        times = streams_times(lib, isa, x, g, out, period)
        times += [best_time(lambda: _kernels.channel_grad(grads, rows, lo, hi, 8, False, outs)),
                  best_time(lambda: _kernels.channel_grad(grads, inside, lo, hi, 8, False, outs))]
        print(table_row(isa, t_add, times))


def batch_norm_floors(lib, isa, batch):
    """The batch-norm gradient table, channels-last cases: np.add, pass 1 alone, the two passes,
    fqcore's gradient and PyTorch's (us), each case's candidates timed in turns as compare.py times
    them (9 batches of 20 ms each, interleaved in alternating order; the fastest batch counts)."""
    from benchmarks.compare import Timer, load_torch
    from benchmarks.compare_batch_norm import CASES, TARGET_GRAD, TARGET_TORCH, BnCase, channels
    from fqcore.malloc import keep_freed_memory
    keep_freed_memory()  # as compare.py: the gradient's new dx reuses freed pages
    torch, _ = load_torch(True)
    print(f"\nBatch-norm gradient (training, channels last), one thread, {isa}: us per call; "
          f"targets fqcore / np.add <= {TARGET_GRAD}, PyTorch / fqcore >= {TARGET_TORCH}\n")
    print("| format | shape | np.add | pass 1 alone | two passes, dx plain / streamed | "
          "passes / np.add | fqcore gradient | fqcore / np.add | fqcore / passes | PyTorch | "
          "PyTorch / passes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    sums_loop, passes_loop = batch_norm_loops(lib, isa)
    for fmt, shape in CASES:
        if not fmt.endswith("C"):
            continue
        case = BnCase(fmt, (batch or shape[0],) + shape[1:], torch=torch)
        width = channels(fmt, case.shape)
        rows = case.n // width
        item_rows = max(1, BN_CHUNK // width)
        dx = placed_arrays(case.shape, 1)[0]  # aligned for the streamed stores
        sums = np.empty(4 * width, np.float32)
        x, dy, out, s = case.x.ctypes.data, case.dy.ctypes.data, dx.ctypes.data, sums.ctypes.data
        candidates = {
            "np.add": case.numpy_add(),
            "pass 1": lambda: sums_loop(x, dy, rows, width, s),
            "plain": lambda: passes_loop(x, dy, out, rows, width, s, item_rows, 0),
            "streamed": lambda: passes_loop(x, dy, out, rows, width, s, item_rows, 1),
            "fqcore": case.fq_gradient(),
        }
        if torch is not None:
            candidates["torch"] = case.torch_gradient(torch)
        t = {name: r["min"] for name, r in Timer(9, 0.02).measure(candidates).items()}
        t_passes = min(t["plain"], t["streamed"])
        t_torch = t.get("torch")
        torch_cells = (f"{t_torch * 1e6:.1f} | {t_torch / t_passes:.2f}" if t_torch
                       else "not installed | ")
        print(f"| {fmt} | {'x'.join(map(str, case.shape))} | {t['np.add'] * 1e6:.1f} | "
              f"{t['pass 1'] * 1e6:.1f} | {t['plain'] * 1e6:.1f} / {t['streamed'] * 1e6:.1f} | "
              f"{t_passes / t['np.add']:.2f} | {t['fqcore'] * 1e6:.1f} | "
              f"{t['fqcore'] / t['np.add']:.2f} | {t['fqcore'] / t_passes:.2f} | {torch_cells} |")
    print("\nChannels first, fqcore's gradient walks blocks of channels whose second pass reads x "
          "and dy from L2 (bn_walk.c), so they come from memory once: two passes over the whole "
          "tensor bound it from above only, and are not timed.")


def batch_norm_loops(lib, isa):
    """bn_sums_<isa> (x, dy, rows, channels, sums) and bn_two_passes_<isa> (x, dy, dx, rows,
    channels, sums, item_rows, stream), ready to call."""
    pointer, size = ctypes.c_void_p, ctypes.c_size_t
    sums_loop, passes_loop = getattr(lib, f"bn_sums_{isa}"), getattr(lib, f"bn_two_passes_{isa}")
    sums_loop.argtypes = [pointer] * 2 + [size] * 2 + [pointer]
    passes_loop.argtypes = [pointer] * 3 + [size] * 2 + [pointer, size, ctypes.c_int]
    sums_loop.restype = passes_loop.restype = None
    return sums_loop, passes_loop


if __name__ == "__main__":
    sys.exit(main())
