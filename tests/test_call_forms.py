"""Every fake-quant op gives the same bits however its arguments arrive.

The kernel bindings take arguments as they are when they already are in the kernels' form (float32
C-contiguous aligned arrays, out= disjoint from the inputs or the very same memory, float ranges);
anything else goes through fqcore.ops' general path, which converts and copies. These tests hold
each acceptance rule of that fast path to the result of clean, separate arrays."""
import numpy as np
import pytest

import fqcore
from helpers import placed

N = 1000  # several 64-element kernel blocks, so a write that lands ahead of a read would show
RNG = np.random.default_rng(7)
X = RNG.uniform(-8, 8, N).astype(np.float32)
G = RNG.normal(0, 1, N).astype(np.float32)
CHANNELS = 8
LO, HI = np.full(CHANNELS, -6, np.float32), np.full(CHANNELS, 6, np.float32)


def forward_ops():
    return {
        "args": lambda x, out=None: fqcore.fake_quant_with_min_max_args(x, -6.0, 6.0, out=out),
        "vars": lambda x, out=None: fqcore.fake_quant_with_min_max_vars(x, -6.0, 6.0, out=out),
        "per_channel": lambda x, out=None: fqcore.fake_quant_with_min_max_vars_per_channel(
            x.reshape(-1, CHANNELS), LO, HI,
            out=None if out is None else out.reshape(-1, CHANNELS)).ravel(),
    }


def gradient_ops():
    def per_channel(g, x, out=None):
        shaped = None if out is None else out.reshape(-1, CHANNELS)
        result = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(
            g.reshape(-1, CHANNELS), x.reshape(-1, CHANNELS), LO, HI, out=shaped)
        return result[0].ravel(), result[1], result[2]
    return {
        "args": lambda g, x, out=None: (
            fqcore.fake_quant_with_min_max_args_gradient(g, x, -6.0, 6.0, out=out),),
        "vars": lambda g, x, out=None: tuple(
            fqcore.fake_quant_with_min_max_vars_gradient(g, x, -6.0, 6.0, out=out)),
        "per_channel": per_channel,
    }


def assert_same(results, expected):
    for got, want in zip(results, expected):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("name", sorted(forward_ops()))
@pytest.mark.parametrize("shift", [1, -1, 16, -16, 65, -65])
def test_forward_out_partly_overlapping_the_input(name, shift):
    op = forward_ops()[name]
    expected = op(X.copy())
    buf = np.zeros(N + abs(shift) + 2 * CHANNELS, np.float32)
    # Offsets that are multiples of the channel count keep the per-channel reshape valid.
    step = CHANNELS * (1 if shift > 0 else -1) if name == "per_channel" else shift
    x_at, out_at = (0, abs(step)) if step > 0 else (abs(step), 0)
    buf[x_at:x_at + N] = X
    result = op(buf[x_at:x_at + N], out=buf[out_at:out_at + N])
    np.testing.assert_array_equal(result, expected)
    np.testing.assert_array_equal(buf[out_at:out_at + N], expected)


@pytest.mark.parametrize("name", sorted(gradient_ops()))
@pytest.mark.parametrize("which", ["gradients", "inputs"])
@pytest.mark.parametrize("step", [CHANNELS, -CHANNELS, 64, -64])
def test_gradient_out_partly_overlapping_an_input(name, which, step):
    op = gradient_ops()[name]
    expected = op(G.copy(), X.copy())
    buf = np.zeros(N + abs(step), np.float32)
    at, out_at = (0, step) if step > 0 else (-step, 0)
    buf[at:at + N] = G if which == "gradients" else X
    shared = buf[at:at + N]
    out = buf[out_at:out_at + N]
    results = op(shared, X.copy(), out=out) if which == "gradients" else op(G.copy(), shared, out=out)
    assert_same(results, expected)
    np.testing.assert_array_equal(out, expected[0])


@pytest.mark.parametrize("name", sorted(forward_ops()))
def test_forward_in_place_through_another_view_of_the_same_memory(name):
    op = forward_ops()[name]
    expected = op(X.copy())
    buf = X.copy()
    view = buf[:]  # another array object over the same bytes
    assert view is not buf
    op(buf, out=view)
    np.testing.assert_array_equal(buf, expected)


@pytest.mark.parametrize("name", sorted(gradient_ops()))
@pytest.mark.parametrize("which", ["gradients", "inputs"])
def test_gradient_in_place(name, which):
    op = gradient_ops()[name]
    expected = op(G.copy(), X.copy())
    g, x = G.copy(), X.copy()
    target = g if which == "gradients" else x
    assert_same(op(g, x, out=target[:]), expected)
    np.testing.assert_array_equal(target, expected[0])


def test_out_over_the_same_bytes_with_another_shape_is_refused():
    x = X.copy().reshape(40, 25)
    with pytest.raises(ValueError, match=r"out has shape \(25, 40\), expected \(40, 25\)"):
        fqcore.fake_quant_with_min_max_vars(x, -6.0, 6.0, out=x.reshape(25, 40))


@pytest.mark.parametrize("form", ["python float", "0-d float32 array", "numpy float32 scalar",
                                  "python int", "0-d big-endian array", "0-d float64 array"])
def test_vars_range_forms(form):
    make = {"python float": float, "0-d float32 array": lambda v: np.array(v, np.float32),
            "numpy float32 scalar": np.float32, "python int": int,
            "0-d big-endian array": lambda v: np.array(v, ">f4")}
    if form == "0-d float64 array":
        with pytest.raises(TypeError, match="`min` must be float32, got dtype float64"):
            fqcore.fake_quant_with_min_max_vars(X, np.array(-6.0), np.array(6.0))
        return
    if form == "0-d big-endian array":
        with pytest.raises(TypeError, match="`min` must be float32"):
            fqcore.fake_quant_with_min_max_vars(X, make[form](-6), make[form](6))
        return
    lo, hi = make[form](-6), make[form](6)
    expected = fqcore.fake_quant_with_min_max_vars(X, -6.0, 6.0)
    np.testing.assert_array_equal(fqcore.fake_quant_with_min_max_vars(X, lo, hi), expected)
    dx, dmin, dmax = fqcore.fake_quant_with_min_max_vars_gradient(G, X, lo, hi)
    want = fqcore.fake_quant_with_min_max_vars_gradient(G, X, -6.0, 6.0)
    assert_same((dx, dmin, dmax), want)
    assert type(dmin) is np.float32 and type(dmax) is np.float32


@pytest.mark.parametrize("scalar", [np.float32, np.float64])
def test_numpy_float_ranges_take_the_fast_path_with_the_floats_bits(scalar):
    # What a numpy array's min() returns: the bindings take it as is (the general path costs
    # microseconds a call), rounded to float32 once as a Python float is.
    lo, hi = scalar(-5.9), scalar(6.1)
    same = float(lo), float(hi)
    calls = {"args_forward": lambda f, a, b: f(X, a, b, 8, False, None),
             "vars_forward": lambda f, a, b: f(X, a, b, 8, False, None),
             "args_grad": lambda f, a, b: f(G, X, a, b, 8, False, None),
             "vars_grad": lambda f, a, b: f(G, X, a, b, 8, False, None)}
    for name, call in calls.items():
        binding = getattr(fqcore._kernels, name)
        result = call(binding, lo, hi)
        assert result is not None, f"{name} refused {scalar.__name__} ranges"
        want = call(binding, *same)
        assert_same(result if isinstance(result, tuple) else (result,),
                    want if isinstance(want, tuple) else (want,))
    np.testing.assert_array_equal(fqcore.fake_quant_with_min_max_args(X, lo, hi),
                                  fqcore.fake_quant_with_min_max_args(X, *same))


def test_vars_range_rank_and_args_range_order_reported_from_the_fast_path():
    with pytest.raises(ValueError, match="`max` must be rank 0 but is rank 1"):
        fqcore.fake_quant_with_min_max_vars(X, -6.0, np.array([6.0], np.float32))
    with pytest.raises(ValueError, match="min has to be smaller than max, was: 6 >= -6"):
        fqcore.fake_quant_with_min_max_args(X, 6.0, -6.0)
    with pytest.raises(ValueError, match="min has to be smaller than max, was: 2 >= 2"):
        fqcore.fake_quant_with_min_max_args_gradient(G, X, 2.0, 2.0)


def test_big_endian_and_subclass_inputs():
    with pytest.raises(TypeError, match="native byte order"):
        fqcore.fake_quant_with_min_max_args(X.astype(">f4"))

    class Tagged(np.ndarray):
        pass

    tagged = X.copy().view(Tagged)
    np.testing.assert_array_equal(fqcore.fake_quant_with_min_max_args(tagged),
                                  fqcore.fake_quant_with_min_max_args(X))


def test_per_channel_ranges_of_the_wrong_length_or_rank():
    x = X.reshape(-1, CHANNELS)
    with pytest.raises(ValueError, match="min has incorrect size, expected 8 was 7"):
        fqcore.fake_quant_with_min_max_vars_per_channel(x, LO[:7], HI)
    with pytest.raises(ValueError, match="max must be rank 1 but is rank 2"):
        fqcore.fake_quant_with_min_max_vars_per_channel_gradient(x, x, LO, HI.reshape(1, -1))
    with pytest.raises(ValueError, match="inputs must be at least rank 1"):
        fqcore.fake_quant_with_min_max_vars_per_channel(np.float32(1) * np.ones((), np.float32),
                                                        LO[:1], HI[:1])


def test_results_are_new_arrays_each_call():
    first = fqcore.fake_quant_with_min_max_vars(X, -6.0, 6.0)
    second = fqcore.fake_quant_with_min_max_vars(X, -6.0, 6.0)
    assert first is not second and not np.shares_memory(first, second)
    dx, dmin, dmax = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(
        G.reshape(-1, CHANNELS), X.reshape(-1, CHANNELS), LO, HI)
    assert dmin.shape == (CHANNELS,) and dmin.dtype == np.float32
    assert not np.shares_memory(dmin, dmax)


def per_column_args(data, lo, hi, num_bits=8, narrow_range=False):
    return np.stack([fqcore.fake_quant_with_min_max_args(data[:, c].copy(), float(lo[c]), float(hi[c]),
                                                         num_bits, narrow_range)
                     for c in range(data.shape[1])], axis=1)


@pytest.mark.parametrize("channels", [16, 24, 128, 1000])
def test_per_channel_forward_wherever_the_arrays_start(channels, isa):
    """The per-channel forward walks from the first element whose input is 64-byte aligned, over
    a grid table rotated to match; every start offset of x and of out must still give each element
    its own channel's grid. Reference: each channel alone through the Args op, whose formula
    (multiplying by inv_scale) and nudge are the per-channel op's."""
    rng = np.random.default_rng(channels)
    rows = 40
    lo = rng.uniform(-8, -0.5, channels).astype(np.float32)
    hi = rng.uniform(0.5, 8, channels).astype(np.float32)
    data = rng.uniform(-9, 9, (rows, channels)).astype(np.float32)
    expected = per_column_args(data, lo, hi)
    for x_offset in range(16):
        for out_offset in (x_offset, (x_offset + 5) % 16):
            x = placed(data, x_offset)
            out = placed(np.zeros_like(data), out_offset)
            fqcore.fake_quant_with_min_max_vars_per_channel(x, lo, hi, out=out)
            np.testing.assert_array_equal(out, expected, err_msg=f"x at +{x_offset}, out at +{out_offset}")


@pytest.mark.parametrize("num_bits", range(2, 17))
@pytest.mark.parametrize("narrow_range", [False, True])
def test_per_channel_forward_at_the_clamp_edges(num_bits, narrow_range, isa):
    """Inputs a few ulps either side of each channel's range ends (where a clamp taken after
    scaling could differ from TF's clamp of x), and NaN, infinities and zeros, for ranges from tiny
    to huge: each channel as the Args op gives it."""
    rng = np.random.default_rng(num_bits * 2 + narrow_range)
    channels = 64
    magnitude = 10.0 ** rng.uniform(-30, 30, channels)
    lo = (-magnitude * rng.uniform(0, 1, channels)).astype(np.float32)
    hi = (lo + magnitude * rng.uniform(1e-6, 2, channels)).astype(np.float32)
    hi = np.where(hi > lo, hi, np.nextafter(lo, np.float32(np.inf))).astype(np.float32)
    ulps = np.arange(-6, 7, dtype=np.float32)
    data = [end + ulps[:, None] * np.spacing(end) for end in (lo, hi)]
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)[:, None] * np.ones(channels, np.float32)
    data = np.concatenate(data + [specials, rng.uniform(-1, 1, (40, 1)) * magnitude], axis=0).astype(np.float32)
    expected = per_column_args(data, lo, hi, num_bits, narrow_range)
    got = fqcore.fake_quant_with_min_max_vars_per_channel(data, lo, hi, num_bits, narrow_range)
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
