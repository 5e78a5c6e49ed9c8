"""Range observer (fqcore.observe.batch_range, C fq_f32_range): every ISA equals scalar bit for bit
and a numpy model of the rules in src_c/include/fqcore.h; thread counts agree; the Python API's
shapes, copies and errors."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fqcore
from fqcore import _kernels
from fqcore.observe import batch_range
from helpers import describe, run_on

TINY = np.float32(np.finfo(np.float32).tiny)  # smallest normal
NAN_BITS = 0x7FC00000
SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40, 1e-45, -TINY, TINY,
                    3e38, -3e38], np.float32)
SIZES = [0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257,
         1000, 16383, 16384, 16385, 70001]
CHANNELS = [1, 2, 3, 7, 8, 15, 16, 17, 64, 100, 255, 256, 257, 1000]
ROWS = [1, 2, 3, 4, 5, 9, 33]


def reference(x, per_axis):
    """The rules of fq_f32_range written with numpy reductions: NaN anywhere -> NaN (0x7fc00000),
    denormals read as zeros of their sign, -0 below +0, empty -> (+inf, -inf)."""
    x = np.asarray(x, np.float32)
    if not per_axis:
        lo, hi = reference(x.reshape(-1, 1), True)
        return lo.reshape(()), hi.reshape(())
    x2 = x.reshape(int(np.prod(x.shape[:-1])), x.shape[-1])
    if x2.shape[0] == 0:
        return (np.full(x2.shape[1], np.inf, np.float32), np.full(x2.shape[1], -np.inf, np.float32))
    flushed = np.where(np.abs(x2) < TINY, np.copysign(np.float32(0), x2), x2).astype(np.float32)
    zero = flushed == 0
    has_minus_zero = (zero & np.signbit(flushed)).any(axis=0)
    has_plus_zero = (zero & ~np.signbit(flushed)).any(axis=0)
    lo, hi = flushed.min(axis=0), flushed.max(axis=0)  # numpy propagates NaN
    lo = np.where(lo == 0, np.where(has_minus_zero, np.float32(-0.0), np.float32(0.0)), lo)
    hi = np.where(hi == 0, np.where(has_plus_zero, np.float32(0.0), np.float32(-0.0)), hi)
    nan = np.isnan(lo) | np.isnan(hi)
    canonical = np.uint32(NAN_BITS).view(np.float32)
    return (np.where(nan, canonical, lo).astype(np.float32),
            np.where(nan, canonical, hi).astype(np.float32))


def assert_bits(actual, expected):
    """Same shape, dtype float32 and bit patterns (NaN payloads and zero signs included)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == np.float32 and expected.dtype == np.float32
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    a = np.ascontiguousarray(actual).reshape(-1).view(np.uint32)
    e = np.ascontiguousarray(expected).reshape(-1).view(np.uint32)
    bad = np.flatnonzero(a != e)
    if bad.size:
        af, ef = a.view(np.float32), e.view(np.float32)
        lines = [f"{bad.size} of {a.size} differ (index: actual vs expected):"]
        lines += [f"  [{i}] {describe(af[i])} {a[i]:#010x} vs {describe(ef[i])} {e[i]:#010x}"
                  for i in bad[:10]]
        raise AssertionError("\n".join(lines))


def assert_range(actual, expected):
    assert_bits(actual[0], expected[0])
    assert_bits(actual[1], expected[1])


def _data(n, seed, offset=0, specials=3, nans=True):
    """n float32 values as a view `offset` elements into a buffer (so not 64-byte aligned), with a
    few special values (NaN only when `nans`) and some denormals and signed zeros."""
    rng = np.random.default_rng(seed)
    buf = (rng.standard_normal(n + offset) * 4).astype(np.float32)
    x = buf[offset:]
    pool = SPECIAL if nans else SPECIAL[1:]
    if n:
        k = min(specials, n)
        x[rng.integers(0, n, k)] = rng.choice(pool, k)
    return x


# ---- Every ISA equals scalar, and the model ----

@pytest.mark.parametrize("n", SIZES)
def test_per_tensor_simd_equals_scalar(isa, n):
    for offset in (0, 1, 3):
        for nans in (False, True):
            x = _data(n, seed=n * 7 + offset, offset=offset, specials=1 + n // 50, nans=nans)
            expected = run_on("scalar", lambda: batch_range(x))
            actual = run_on(isa, lambda: batch_range(x))
            assert_range(actual, expected)
            assert_range(actual, reference(x, False))


@pytest.mark.parametrize("channels", CHANNELS)
def test_per_axis_simd_equals_scalar(isa, channels):
    for rows in ROWS:
        for offset in (0, rows % 4 + 1):
            n = rows * channels
            x = _data(n, seed=channels * 100 + rows, offset=offset, specials=1 + n // 40,
                      nans=rows % 2 == 1).reshape(rows, channels)
            expected = run_on("scalar", lambda: batch_range(x, per_axis=True))
            actual = run_on(isa, lambda: batch_range(x, per_axis=True))
            assert_range(actual, expected)
            assert_range(actual, reference(x, True))


@pytest.mark.parametrize("channels", [1, 2, 4, 8, 16, 32, 64, 128, 3, 48, 100, 4096, 4097, 5000])
def test_every_position_and_lane(isa, channels):
    """One extreme at each of the first 260 and the last 20 elements in turn, over enough rows for
    the SIMD main loops: every lane of every accumulator and every tail position reaches its
    channel."""
    rows = max(9, -(-300 // channels))
    base = np.random.default_rng(channels).uniform(-1, 1, (rows, channels)).astype(np.float32)
    n = base.size
    for value in (np.float32(50), np.float32(-50), np.float32(np.nan)):
        for i in [*range(min(n, 260)), *range(max(260, n - 20), n)]:
            x = base.copy()
            x.reshape(-1)[i] = value
            assert_range(run_on(isa, lambda: batch_range(x, per_axis=True)), reference(x, True))
            if channels == 1:
                assert_range(run_on(isa, lambda: batch_range(x)), reference(x, False))


def test_large_and_threads_identical():
    """Large inputs on every ISA and 1-4 threads (flat chunks, row chunks, position chunks)."""
    rng = np.random.default_rng(3)
    cases = [((3_000_001,), False), ((3000, 1000), True), ((20000, 100), True), ((70000, 64), True),
             ((2, 1_500_000), True), ((700_000, 3), True), ((4096, 128), True), ((999, 4097), True)]
    for shape, per_axis in cases:
        x = rng.standard_normal(shape).astype(np.float32)
        flat = x.reshape(-1)
        flat[rng.integers(0, x.size, 6)] = rng.choice(SPECIAL[1:], 6)  # no NaN: keep ranges visible
        flat[x.size - 1] = 1e6  # the last element is the maximum of its channel
        expected = reference(x, per_axis)
        for isa_name in fqcore.available_isas():
            for threads in (1, 2, 3, 4):
                actual = run_on(isa_name, lambda: batch_range(x, per_axis), threads)
                assert_range(actual, expected)


# ---- The documented rules ----

def _channels(columns):
    """Columns of equal length as one [rows, C] float32 array."""
    return np.array(columns, np.float32).T.copy()


def test_nan_propagates_as_one_quiet_nan(isa):
    payloads = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, 0x7FC12345], np.uint32)
    for bits in payloads:
        nan = bits.view(np.float32)
        for rows in (1, 5, 40):
            for at in sorted({0, rows // 2, rows - 1}):
                x = np.random.default_rng(int(bits) % 1000 + rows).uniform(-3, 3, (rows, 19)).astype(np.float32)
                x[at, 7] = nan
                lo, hi = run_on(isa, lambda: batch_range(x, per_axis=True))
                assert lo.view(np.uint32)[7] == NAN_BITS and hi.view(np.uint32)[7] == NAN_BITS
                assert not np.isnan(np.delete(lo, 7)).any() and not np.isnan(np.delete(hi, 7)).any()
                lo, hi = run_on(isa, lambda: batch_range(x))
                assert lo.view(np.uint32) == NAN_BITS and hi.view(np.uint32) == NAN_BITS


def test_infinities(isa):
    inf = np.inf
    x = _channels([[inf, inf, inf], [-inf, -inf, -inf], [inf, -inf, 0], [1, inf, 2], [-1, -inf, 3]])
    lo, hi = run_on(isa, lambda: batch_range(x, per_axis=True))
    assert_bits(lo, np.array([inf, -inf, -inf, 1, -inf], np.float32))
    assert_bits(hi, np.array([inf, -inf, inf, inf, 3], np.float32))


def test_signed_zeros_ignore_order(isa):
    """IEEE 754-2019 minimum / maximum: -0 < +0, whatever order the zeros come in."""
    cases = [  # channel values -> (min, max)
        ([-0.0, -0.0, -0.0], (-0.0, -0.0)),
        ([0.0, 0.0, 0.0], (0.0, 0.0)),
        ([0.0, -0.0, 0.0], (-0.0, 0.0)),
        ([-0.0, 0.0, -0.0], (-0.0, 0.0)),
        ([0.0, -0.0, 1.0], (-0.0, 1.0)),
        ([-1.0, 0.0, -0.0], (-1.0, 0.0)),
        ([-1.0, -0.0, -2.0], (-2.0, -0.0)),
        ([2.0, 0.0, 1.0], (0.0, 2.0)),
    ]
    for values, (lo_expected, hi_expected) in cases:
        for rows in (3, 48):  # 48 rows: the zeros spread over vector main loops too
            column = np.resize(np.array(values, np.float32), rows)
            for shift in range(3):
                col = np.roll(column, shift)
                x = np.repeat(col[:, None], 20, axis=1)  # 20 channels: lanes and tails
                lo, hi = run_on(isa, lambda: batch_range(x, per_axis=True))
                assert_bits(lo, np.full(20, lo_expected, np.float32))
                assert_bits(hi, np.full(20, hi_expected, np.float32))
                lo, hi = run_on(isa, lambda: batch_range(col))
                assert_bits(lo, np.float32(lo_expected).reshape(()))
                assert_bits(hi, np.float32(hi_expected).reshape(()))


def test_denormals_read_as_signed_zeros(isa):
    d, big = np.float32(1e-40), np.float32(np.finfo(np.float32).smallest_subnormal * 0x7FFFFF)
    cases = [  # channel values -> (min, max)
        ([d, 1.0], (0.0, 1.0)),
        ([-d, 1.0], (-0.0, 1.0)),
        ([d, 2 * d], (0.0, 0.0)),
        ([-d, -2 * d], (-0.0, -0.0)),
        ([-d, d], (-0.0, 0.0)),
        ([-1.0, -d], (-1.0, -0.0)),
        ([-1.0, d], (-1.0, 0.0)),
        ([0.0, -big], (-0.0, 0.0)),
        ([-0.0, big], (-0.0, 0.0)),
        ([TINY, big], (0.0, TINY)),  # the smallest normal stays
        ([-TINY, -big], (-TINY, -0.0)),
    ]
    for values, (lo_expected, hi_expected) in cases:
        x = np.repeat(np.resize(np.array(values, np.float32), 37)[:, None], 9, axis=1)
        lo, hi = run_on(isa, lambda: batch_range(x, per_axis=True))
        assert_bits(lo, np.full(9, lo_expected, np.float32))
        assert_bits(hi, np.full(9, hi_expected, np.float32))


def test_empty():
    for per_axis, shape, expected_shape in ((False, (0,), ()), (False, (3, 0, 2), ()),
                                            (True, (0, 5), (5,)), (True, (2, 0, 3), (3,)),
                                            (True, (0,), (0,)), (True, (4, 0), (0,))):
        lo, hi = batch_range(np.zeros(shape, np.float32), per_axis)
        assert lo.shape == hi.shape == expected_shape and lo.dtype == hi.dtype == np.float32
        assert_bits(lo, np.full(expected_shape, np.inf, np.float32))
        assert_bits(hi, np.full(expected_shape, -np.inf, np.float32))


@settings(max_examples=300, deadline=None)
@given(x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=40),
                    elements=st.floats(width=32, allow_nan=True, allow_subnormal=True)),
       per_axis=st.booleans())
def test_matches_model(x, per_axis):
    expected = reference(x, per_axis)
    for isa_name in fqcore.available_isas():
        assert_range(run_on(isa_name, lambda: batch_range(x, per_axis)), expected)


def test_random_against_numpy(isa):
    rng = np.random.default_rng(11)
    for shape in ((1000,), (257, 31), (64, 3, 3, 96), (5, 7, 1000)):
        x = (rng.standard_normal(shape) * 10).astype(np.float32)
        lo, hi = run_on(isa, lambda: batch_range(x))
        assert lo == x.min() and hi == x.max()
        lo, hi = run_on(isa, lambda: batch_range(x, per_axis=True))
        axes = tuple(range(x.ndim - 1))
        np.testing.assert_array_equal(lo, x.min(axis=axes))
        np.testing.assert_array_equal(hi, x.max(axis=axes))


# ---- Python API ----

def test_spec_vectors():
    """Batch statistics of shared/spec/quantizers.md (before the range is widened to hold 0)."""
    lo, hi = batch_range(np.array([[1, -2], [3, -1], [-0.5, -4]], np.float32), per_axis=True)
    assert_bits(lo, np.array([-0.5, -4], np.float32))
    assert_bits(hi, np.array([3, -1], np.float32))
    lo, hi = batch_range(np.array([[[[1, -2]], [[-3, 0.5]]]], np.float32), per_axis=True)
    assert_bits(lo, np.array([-3, -2], np.float32))
    assert_bits(hi, np.array([1, 0.5], np.float32))
    lo, hi = batch_range(np.array([-1, 0.5, 2, 3], np.float32))
    assert lo.shape == () and hi.shape == () and lo == -1 and hi == 3


def test_rank_one_per_axis_is_elementwise():
    x = np.array([1, -2, 0.5, -0.0, 1e-40, np.nan, -np.inf], np.float32)
    lo, hi = batch_range(x, per_axis=True)
    expected = np.array([1, -2, 0.5, -0.0, 0.0, np.nan, -np.inf], np.float32)
    expected.view(np.uint32)[5] = NAN_BITS
    assert_bits(lo, expected)
    assert_bits(hi, expected)
    assert not np.shares_memory(lo, x) and not np.shares_memory(hi, lo)


def test_rank_zero_and_scalars():
    lo, hi = batch_range(np.array(2.5, np.float32))
    assert lo.shape == hi.shape == () and lo == hi == 2.5
    lo, hi = batch_range(np.float32(-3))
    assert lo == hi == -3
    with pytest.raises(ValueError, match="per_axis"):
        batch_range(np.array(2.5, np.float32), per_axis=True)


def test_non_contiguous_and_misaligned_inputs(isa):
    rng = np.random.default_rng(5)
    base = rng.standard_normal((40, 24, 18)).astype(np.float32)
    views = [base[:, ::2, 1::3], base.transpose(2, 0, 1), base[::-1], base[..., 5]]
    raw = np.zeros(base.size * 4 + 1, np.uint8)
    misaligned = raw[1:].view(np.float32).reshape(base.shape)
    misaligned[...] = base
    assert not misaligned.flags.aligned
    views.append(misaligned)
    for v in views:
        for per_axis in (False, True):
            actual = run_on(isa, lambda: batch_range(v, per_axis))
            assert_range(actual, reference(np.ascontiguousarray(v), per_axis))


@pytest.mark.parametrize("bad", [np.zeros(4, np.float64), np.zeros(4, np.int32),
                                 np.zeros(4, np.float16), np.zeros(4, ">f4"), [1.0, 2.0], 1.0,
                                 None, "abc", np.float64(1.0)])
def test_dtype_errors(bad):
    with pytest.raises(TypeError, match="float32"):
        batch_range(bad)
    with pytest.raises(TypeError, match="float32"):
        batch_range(bad, per_axis=True)


def test_c_validation_through_the_binding():
    x = np.arange(10, dtype=np.float32)
    three = np.empty(3, np.float32)
    with pytest.raises(ValueError, match="multiple of the channel count"):
        _kernels.batch_range(x, three, three.copy())
    with pytest.raises(ValueError, match="multiple of the channel count"):
        _kernels.batch_range(x, np.empty(0, np.float32), np.empty(0, np.float32))
    with pytest.raises(ValueError, match="same length"):
        _kernels.batch_range(x, np.empty(5, np.float32), np.empty(2, np.float32))
    _kernels.batch_range(np.empty(0, np.float32), np.empty(0, np.float32), np.empty(0, np.float32))
    lo, hi = np.empty(5, np.float32), np.empty(5, np.float32)
    _kernels.batch_range(x, lo, hi)
    assert_bits(lo, np.arange(5, dtype=np.float32))
    assert_bits(hi, np.arange(5, 10, dtype=np.float32))


# -- The moving-average state update (fq_f32_moving_average) ---------------------------------

def _flushed(a):
    """float32 `a` with denormals replaced by zeros of their sign (TF's threads)."""
    a = np.asarray(a, np.float32)
    return np.where(np.abs(a) < np.finfo(np.float32).tiny, np.copysign(np.float32(0), a), a)


def _moving_average_model(values, targets, rate):
    """values - (values - targets) * rate, each operation in float32 and flushed, as TF's
    assign_moving_average runs on its flush-to-zero threads."""
    with np.errstate(all="ignore"):
        v, t = _flushed(values), _flushed(targets)
        return _flushed(v - _flushed(_flushed(v - t) * rate))


def _same_bits(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    nan = np.isnan(a) & np.isnan(b)
    return np.array_equal(a.view(np.uint32)[~nan], b.view(np.uint32)[~nan]) and np.array_equal(
        np.isnan(a), np.isnan(b))


@pytest.mark.parametrize("rate", [np.float32(1.0 - 0.999), np.float32(0.5), np.float32(1.0)])
def test_moving_average_matches_the_flushing_model(rate):
    rng = np.random.default_rng(7)
    tiny = np.finfo(np.float32).tiny
    specials = np.array([0.0, -0.0, tiny, -tiny, tiny / 2, -tiny / 3, 3e38, -3e38, np.inf, -np.inf,
                         np.nan, 1e-30, -1e-35, 2 * tiny, 1.5], np.float32)
    values = np.concatenate([specials, rng.standard_normal(200).astype(np.float32),
                             (rng.standard_normal(200) * tiny * 4).astype(np.float32)])
    targets = np.concatenate([specials[::-1], rng.standard_normal(200).astype(np.float32),
                              (rng.standard_normal(200) * tiny * 3).astype(np.float32)])
    expected = _moving_average_model(values, targets, rate)
    got = values.copy()
    _kernels.moving_average(got, targets, rate)
    assert _same_bits(got, expected)
    assert (np.abs(got[got != 0]) >= tiny).all() or np.isnan(got[got != 0]).any()


def test_moving_average_quantizer_per_axis_flushes_state():
    """A per-axis moving average whose step is a denormal: TF's threads flush the step, so the
    value stays where it was (without the flush it would move by the denormal)."""
    tiny = np.finfo(np.float32).tiny
    q = fqcore.MovingAverageQuantizer(8, True, False, False)
    x = np.array([[3 * tiny, -2.0, 1.0], [5 * tiny, -1.0, 2.0]], np.float32)
    state = q.build(x.shape, "x", None)
    start = np.float32(tiny * 1.0004)
    state["min_var"][...] = start
    expected_min = _moving_average_model(state["min_var"], np.minimum(x.min(axis=0), 0), q._rate)
    q(x, True, state)
    assert _same_bits(state["min_var"], expected_min)
    assert state["min_var"][0] == start
    assert start - start * q._rate != start  # what unflushed float32 arithmetic would give


def test_moving_average_checks_lengths():
    with pytest.raises(ValueError, match="same length"):
        _kernels.moving_average(np.zeros(3, np.float32), np.zeros(2, np.float32), np.float32(0.1))
