"""Every SIMD path equals the scalar kernels bit for bit; the sums also equal across thread counts."""
import numpy as np
import pytest

import fqcore
from helpers import assert_same_bits, placed, run_on

SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40, 3e38, -3e38], np.float32)
SIZES = [0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000,
         16383, 16384, 16385, 70001]
CHANNELS = [1, 2, 3, 7, 8, 15, 16, 17, 64, 100, 255, 256, 257, 1000, 1024, 4096, 4097]


def _inputs(n, seed, offset):
    """x (with special values and exact rounding ties) and g, as misaligned views of a buffer."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-8, 8, n + offset).astype(np.float32)
    g = rng.standard_normal(n + offset).astype(np.float32)
    if n > 4:
        x[offset + rng.integers(0, n, 4)] = rng.choice(SPECIAL, 4)
        g[offset + rng.integers(0, n, 2)] = rng.choice(SPECIAL, 2)
        scale = np.float32(12.0 / 255)
        ties = (np.float32(-6.023529529571533) + (rng.integers(0, 255, n // 4) + np.float32(0.5)) * scale)
        x[offset + rng.integers(0, n, n // 4)] = ties.astype(np.float32)
    return x[offset:], g[offset:]


def _all_outputs(x, g, lo, hi, num_bits, narrow, channels):
    outputs = [
        fqcore.fake_quant_with_min_max_args(x, float(lo), float(hi), num_bits, narrow),
        fqcore.fake_quant_with_min_max_args_gradient(g, x, float(lo), float(hi), num_bits, narrow),
        fqcore.fake_quant_with_min_max_vars(x, lo, hi, num_bits, narrow),
        *fqcore.fake_quant_with_min_max_vars_gradient(g, x, lo, hi, num_bits, narrow),
    ]
    if x.size % channels == 0 and x.size:
        rng = np.random.default_rng(channels)
        cmin = rng.uniform(-7, 0, channels).astype(np.float32)
        cmax = (cmin + rng.uniform(0, 8, channels)).astype(np.float32)
        cmin[channels // 2] = cmax[channels // 2] = 0  # one all-zero channel
        xs, gs = x.reshape(-1, channels), g.reshape(-1, channels)
        outputs.append(fqcore.fake_quant_with_min_max_vars_per_channel(xs, cmin, cmax, num_bits, narrow))
        outputs.extend(fqcore.fake_quant_with_min_max_vars_per_channel_gradient(gs, xs, cmin, cmax, num_bits, narrow))
    return [np.asarray(o) for o in outputs]


@pytest.mark.parametrize("n", SIZES)
def test_simd_equals_scalar(isa, n):
    for offset, channels in ((0, 1), (1, 3), (3, 17), (5, 16)):
        x, g = _inputs(n, seed=n * 10 + offset, offset=offset)
        num_bits = 2 + (n + offset) % 15
        narrow = bool(offset % 2)
        for lo, hi in ((-6.0, 6.0), (-0.1, 0.2), (0.5, 1.0), (-3.0, -1.0)):
            args = (x, g, np.float32(lo), np.float32(hi), num_bits, narrow, channels)
            expected = run_on("scalar", lambda: _all_outputs(*args))
            actual = run_on(isa, lambda: _all_outputs(*args))
            for a, e in zip(actual, expected):
                assert_same_bits(a, e)


@pytest.mark.parametrize("channels", CHANNELS)
def test_per_channel_simd_equals_scalar(isa, channels):
    for rows in (1, 2, 5, 9, 33):
        x, g = _inputs(rows * channels, seed=channels * 100 + rows, offset=rows % 4)
        args = (x, g, np.float32(-1.0), np.float32(1.0), 8, False, channels)
        expected = run_on("scalar", lambda: _all_outputs(*args))
        actual = run_on(isa, lambda: _all_outputs(*args))
        for a, e in zip(actual, expected):
            assert_same_bits(a, e)


@pytest.mark.parametrize("channels", [16, 48, 128, 1000, 1024])
def test_per_channel_gradient_from_any_alignment(isa, channels):
    """Gradients of 2**17 elements and more walk from the first element whose x is 64-byte aligned;
    each misalignment of x (and of g and dx apart from it) gives the scalar kernels' bits."""
    period = np.lcm(channels, 16)
    rows = -(-(1 << 17) // period) * (period // channels)
    x, g = _inputs(rows * channels, seed=channels, offset=0)
    x, g = x.reshape(rows, channels), g.reshape(rows, channels)
    rng = np.random.default_rng(channels)
    lo = rng.uniform(-7, 0, channels).astype(np.float32)
    hi = (lo + rng.uniform(0, 8, channels)).astype(np.float32)
    for x_past, g_past in ((1, 1), (4, 0), (12, 7), (15, 15)):
        xs, gs = placed(x, x_past), placed(g, g_past)
        expected = run_on("scalar", lambda: fqcore.fake_quant_with_min_max_vars_per_channel_gradient(gs, xs, lo, hi), threads=1)
        for threads in (1, 2):
            out = placed(np.zeros_like(x), (x_past + 3) % 16)
            actual = run_on(isa, lambda: fqcore.fake_quant_with_min_max_vars_per_channel_gradient(gs, xs, lo, hi, out=out), threads=threads)
            for a, e in zip(actual, expected):
                assert_same_bits(np.asarray(a), np.asarray(e))


@pytest.mark.parametrize("channels", [16, 32, 100, 128, 256])
@pytest.mark.parametrize("sd", [2.5, 3.0, 4.0])
def test_per_channel_gradient_with_a_few_percent_clipped(isa, channels, sd):
    """With 1.2%, 4.6% and 13% of x outside [-6, 6] (N(0, sd)), where the AVX2 and NEON walks of data
    beyond the caches (12 MiB here) may add every group's products rather than branch on each
    (fq_simd.h, adds_every_group): the scalar kernels' bits in short calls and in long ones, on 1
    and 2 threads."""
    rng = np.random.default_rng(channels)
    lim = np.full(channels, 6.0, np.float32)
    for rows in (40, (1 << 20) // channels):
        x = (rng.standard_normal((rows, channels)) * sd).astype(np.float32)
        g = rng.standard_normal((rows, channels)).astype(np.float32)
        call = lambda: fqcore.fake_quant_with_min_max_vars_per_channel_gradient(g, x, -lim, lim)
        expected = run_on("scalar", call, threads=1)
        for threads in (1, 2):
            for a, e in zip(run_on(isa, call, threads=threads), expected):
                assert_same_bits(np.asarray(a), np.asarray(e))


@pytest.mark.parametrize("channels", [48, 128, 256, 1000, 1024])
@pytest.mark.parametrize("where", ["apart", "in place of g", "in place of x"])
def test_per_channel_gradient_of_calibrated_inputs(isa, channels, where):
    """With a few in a thousand elements clipped (x ~ N(0, 2) against [-6, 6]: most groups quiet,
    the skipped sums' case), in calls of 64K elements (walked from the first element) and 256K (from
    the first 64-byte aligned one), with dx apart from g and x or in place of either, non-finite g
    and NaN x among the quiet elements: the scalar kernels' bits on 1 and 2 threads."""
    rng = np.random.default_rng(channels)
    lim = np.full(channels, 6.0, np.float32)
    for elements in (1 << 16, 1 << 18):
        rows = -(-elements // channels)
        x = placed((rng.standard_normal((rows, channels)) * 2).astype(np.float32), 4)
        g = placed(rng.standard_normal((rows, channels)).astype(np.float32), 4)
        x.flat[rng.integers(0, x.size, 3)] = np.nan
        g.flat[rng.integers(0, g.size, 3)] = rng.choice(SPECIAL[:3], 3)
        expected = run_on("scalar", lambda: fqcore.fake_quant_with_min_max_vars_per_channel_gradient(g, x, -lim, lim), threads=1)
        for threads in (1, 2):
            xs, gs = x.copy(), g.copy()
            out = {"apart": None, "in place of g": gs, "in place of x": xs}[where]
            actual = run_on(isa, lambda: fqcore.fake_quant_with_min_max_vars_per_channel_gradient(gs, xs, -lim, lim, out=out), threads=threads)
            for a, e in zip(actual, expected):
                assert_same_bits(np.asarray(a), np.asarray(e))


@pytest.mark.parametrize("shape", [(3_000_001,), (3000, 1000), (20000, 100), (2, 1_500_000)])
def test_sums_identical_across_isas_and_threads(shape):
    rng = np.random.default_rng(7)
    x = rng.uniform(-7, 7, shape).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    results = {}
    previous_threads = fqcore.get_num_threads()
    try:
        for isa_name in fqcore.available_isas():
            for threads in (1, 2, 3, 4):
                fqcore.set_num_threads(threads)
                if len(shape) == 1:
                    r = run_on(isa_name, lambda: fqcore.fake_quant_with_min_max_vars_gradient(g, x, -6.0, 6.0))
                else:
                    lim = np.full(shape[-1], 6.0, np.float32)
                    r = run_on(isa_name, lambda: fqcore.fake_quant_with_min_max_vars_per_channel_gradient(g, x, -lim, lim))
                results[(isa_name, threads)] = [np.asarray(v) for v in r]
    finally:
        fqcore.set_num_threads(previous_threads)
    reference = results[("scalar", 1)]
    for key, outputs in results.items():
        for a, e in zip(outputs, reference):
            assert_same_bits(a, e), key


@pytest.mark.parametrize("n", [5, 64, 100, 16385])
def test_out_may_be_an_input(isa, n):
    """out=gradients or out=inputs: every input is read before its element of dx is written."""
    channels = 5 if n % 5 == 0 else 1
    x, g = _inputs(n, seed=n, offset=0)
    g[0] = np.inf  # a non-finite g takes the exact path of the sums
    # 2-D so that out can be the very array passed as an input (a reshaped view would be copied)
    x, g = x.reshape(-1, channels), g.reshape(-1, channels)
    lo = np.full(channels, -1.0, np.float32)
    hi = np.full(channels, 1.0, np.float32)
    lo[0] = hi[0] = 0  # an all-zero channel passes g through
    calls = [
        lambda g, x, out: (fqcore.fake_quant_with_min_max_args_gradient(g, x, -1.0, 1.0, out=out),),
        lambda g, x, out: fqcore.fake_quant_with_min_max_vars_gradient(g, x, -1.0, 1.0, out=out),
        lambda g, x, out: fqcore.fake_quant_with_min_max_vars_per_channel_gradient(g, x, lo, hi, out=out),
    ]
    for call in calls:
        expected = run_on(isa, lambda: [np.asarray(v).copy() for v in call(g, x, None)])
        for aliased in ("g", "x"):
            gc, xc = g.copy(), x.copy()
            out = gc if aliased == "g" else xc
            actual = run_on(isa, lambda: [np.asarray(v) for v in call(gc, xc, out)])
            for a, e in zip(actual, expected):
                assert_same_bits(a, e)
    for fn in (fqcore.fake_quant_with_min_max_args, lambda v, out: fqcore.fake_quant_with_min_max_vars(v, -1.0, 1.0, out=out)):
        expected = run_on(isa, lambda: fn(x, out=None))
        xc = x.copy()
        run_on(isa, lambda: fn(xc, out=xc))
        assert_same_bits(xc, expected)
