"""The test vectors and worked examples of shared/spec/fake_quant.md, written from the spec text, on every ISA."""

import numpy as np
import pytest

import fqcore
from helpers import assert_same_bits

nan, inf = np.nan, np.inf


def f32(*values):
    return np.array(values, dtype=np.float32)


def hexf(*literals):
    return f32(*[float.fromhex(s) for s in literals])


def scalar(value):
    return np.array(value, dtype=np.float32)


def after(value, toward):
    return np.nextafter(np.float32(value), np.float32(toward))


# [-0.1, 0.2] at 8 bits, from the spec's nudge examples.
NUDGED = hexf("-0x1.99999cp-4", "0x1.99999cp-3")
NUDGED_MIN, NUDGED_MAX = NUDGED


def vars_and_per_channel_gradients(g, x, lo, hi, **attrs):
    """The Vars gradient, and the PerChannel one on x as one channel (the spec: "PerChannel identical")."""
    v = fqcore.fake_quant_with_min_max_vars_gradient(g, x, min=scalar(lo), max=scalar(hi), **attrs)
    pc = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(
        g.reshape(-1, 1), x.reshape(-1, 1), min=f32(lo), max=f32(hi), **attrs
    )
    return [
        (v.backprops_wrt_input, v.backprop_wrt_min, v.backprop_wrt_max),
        (pc.backprops_wrt_input.reshape(-1), pc.backprop_wrt_min.reshape(()), pc.backprop_wrt_max.reshape(())),
    ]


def test_vector_1_mask_boundaries(isa):
    x = f32(after(NUDGED_MIN, -1), NUDGED_MIN, after(NUDGED_MIN, 1), 0, after(NUDGED_MAX, -1), NUDGED_MAX,
            after(NUDGED_MAX, 1), -0.1, 0.2, nan, inf, -inf)
    g = np.arange(1, 13, dtype=np.float32)
    for dx, dmin, dmax in vars_and_per_channel_gradients(g, x, -0.1, 0.2, num_bits=8):
        assert_same_bits(dx, f32(0, 2, 3, 4, 5, 6, 0, 8, 9, 0, 0, 0))
        assert_same_bits(dmin, scalar(13))
        assert_same_bits(dmax, scalar(18))


def test_vector_2_special_gradients(isa):
    x = f32(0, 0.05, -5, 5, 0.1)
    g = f32(inf, nan, -3, -inf, -2)
    for dx, dmin, dmax in vars_and_per_channel_gradients(g, x, -0.1, 0.2, num_bits=8):
        assert_same_bits(dx, f32(inf, nan, -0.0, nan, -2))
        assert_same_bits(dmin, scalar(nan))
        assert_same_bits(dmax, scalar(nan))


def test_vector_3_forward_minus1_to_3(isa):
    x = f32(-7, -1, -0.3, -0.01, 0, 0.004, 0.5, 1, 1.234, 2.9, 3, 10)
    printed = f32(-1.0039216, -1.0039216, -0.2980392, -0.0156863, 0, 0, 0.5019608, 1.0039216, 1.2392157,
                  2.9019608, 2.9960785, 2.9960785)
    outputs = {
        "vars": fqcore.fake_quant_with_min_max_vars(x, min=scalar(-1), max=scalar(3), num_bits=8),
        "args": fqcore.fake_quant_with_min_max_args(x, min=-1.0, max=3.0, num_bits=8),
        "per_channel": fqcore.fake_quant_with_min_max_vars_per_channel(x, min=np.full(12, -1, np.float32),
                                                                       max=np.full(12, 3, np.float32), num_bits=8),
    }
    for op, y in outputs.items():
        # The spec prints 7 decimals; below and above the range the outputs are exactly the nudged bounds.
        np.testing.assert_allclose(y, printed, rtol=0, atol=1e-7, err_msg=op)
        assert_same_bits(y[[0, 10]], y[[1, 11]])
        assert_same_bits(y[4:6], f32(0, 0))


def test_vector_4_args_defaults(isa):
    y = fqcore.fake_quant_with_min_max_args(f32(-0.0236, -0.0235, 6.5))
    assert_same_bits(y, f32(float.fromhex("-0x1.818182p-5"), 0, 5.97647047))


@pytest.mark.parametrize("bound", [1.0, -1.0])
def test_vector_5_equal_bounds(isa, bound):
    x = f32(-0.2, -0.1, -0.05, 0, 0.05, 0.1, 0.2, 0.3)
    g = np.ones(8, np.float32)
    y = fqcore.fake_quant_with_min_max_vars(x, min=scalar(bound), max=scalar(bound), num_bits=8)
    assert_same_bits(y, np.full(8, nan, np.float32))
    for dx, dmin, dmax in vars_and_per_channel_gradients(g, x, bound, bound, num_bits=8):
        assert_same_bits(dx, f32(0, 0, 0, 1, 0, 0, 0, 0))
        assert_same_bits(dmin, scalar(3))
        assert_same_bits(dmax, scalar(4))


def test_vector_6_per_channel(isa):
    # The spec gives no x; these put channel 0 below/in/above/in, channel 1 above/in/in/above.
    x = f32(-1, 0.5, 5, 0, 0, 5, 2, 0, 5, 0.5, 0.5, 5).reshape(1, 2, 2, 3)
    g = np.arange(1, 13, dtype=np.float32).reshape(1, 2, 2, 3)
    r = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(
        g, x, min=f32(-0.5, -0.1, 0), max=f32(1, 0.2, 0), num_bits=8
    )
    assert_same_bits(r.backprops_wrt_input, f32(0, 0, 3, 4, 5, 6, 0, 8, 9, 10, 0, 12).reshape(1, 2, 2, 3))
    assert_same_bits(r.backprop_wrt_min, f32(1, 0, 0))
    assert_same_bits(r.backprop_wrt_max, f32(7, 13, 0))


def test_vector_7_narrow_range_vars_divides_args_multiplies(isa):
    x = hexf("-0x1.d06d80p-10")
    attrs = dict(num_bits=8, narrow_range=True)
    assert_same_bits(fqcore.fake_quant_with_min_max_vars(x, min=scalar(-0.1), max=scalar(0.2), **attrs),
                     hexf("-0x1.359e70p-10"))
    assert_same_bits(fqcore.fake_quant_with_min_max_args(x, min=-0.1, max=0.2, **attrs), hexf("-0x1.359e70p-9"))


# --- The spec's worked examples outside the numbered vectors.


def clamped_bounds(lo, hi, **attrs):
    """Vars outputs far below and far above the range: the nudged bounds."""
    return fqcore.fake_quant_with_min_max_vars(f32(-1e30, 1e30), min=scalar(lo), max=scalar(hi), **attrs)


@pytest.mark.parametrize(
    "lo,hi,attrs,nudged",
    [
        (-2.5, 4.5, dict(num_bits=3), f32(-3, 4)),  # zero point rounds half away from zero
        (-0.1, 0.2, dict(num_bits=8), NUDGED),
        (-0.1, 0.2, dict(num_bits=8, narrow_range=True), hexf("-0x1.9b366cp-4", "0x1.98cb30p-3")),
        (-6, 6, dict(num_bits=8), f32(-6.023529529571533, 5.976470470428467)),
        (-6, 6, dict(num_bits=8, narrow_range=True), f32(-6, 6)),
        (-0.3, 0.7, dict(num_bits=16), hexf("-0x1.333534p-2", "0x1.666566p-1")),
        (0.5, 1, dict(num_bits=8), f32(0, 0.5)),  # min > 0 shifts the range to [0, max - min]
        (-2, -0.5, dict(num_bits=8), f32(-1.5, 0)),  # max < 0 gives [-(max - min), 0]
    ],
)
def test_nudged_bounds(isa, lo, hi, attrs, nudged):
    assert_same_bits(clamped_bounds(lo, hi, **attrs), nudged)


def test_vars_divides_args_multiplies(isa):
    x = hexf("0x1.99999ap-5")
    assert_same_bits(fqcore.fake_quant_with_min_max_vars(x, min=scalar(-0.1), max=scalar(0.2), num_bits=8),
                     hexf("0x1.9e6b3ap-5"))
    assert_same_bits(fqcore.fake_quant_with_min_max_args(x, min=-0.1, max=0.2, num_bits=8), hexf("0x1.94c7fcp-5"))


@pytest.mark.parametrize("lo,hi", [(0.0, 0.0), (-0.0, 0.0), (0.0, -0.0), (-0.0, -0.0), (1e-40, -1e-40)])
def test_zero_range(isa, lo, hi):
    x = f32(-1, 0, 0.5, nan, inf)
    g = f32(1, nan, -inf, 1e-40, -0.0)
    y = fqcore.fake_quant_with_min_max_vars(x, min=scalar(lo), max=scalar(hi), num_bits=8)
    assert_same_bits(y, np.zeros(5, np.float32))
    for dx, dmin, dmax in vars_and_per_channel_gradients(g, x, lo, hi, num_bits=8):
        assert_same_bits(dx, g)
        assert_same_bits(dmin, scalar(0))
        assert_same_bits(dmax, scalar(0))


def test_min_above_max_follows_the_formula(isa):
    x = f32(-5, -0.5, 0, 0.5, 0.9, 5)
    y = fqcore.fake_quant_with_min_max_vars(x, min=scalar(1), max=scalar(-1), num_bits=8)
    assert_same_bits(y, np.full(6, float.fromhex("0x1.fdfe00p-1"), np.float32))
    # Nudged bounds ~[1.004, -0.996]: inside that gap x is both below nudged_min and above nudged_max.
    inside = x[1:5]
    g = f32(1, 2, 4, 8)
    for dx, dmin, dmax in vars_and_per_channel_gradients(g, inside, 1.0, -1.0, num_bits=8):
        assert_same_bits(dx, np.zeros(4, np.float32))
        assert_same_bits(dmin, scalar(15))
        assert_same_bits(dmax, scalar(15))


@pytest.mark.parametrize("lo,hi", [(nan, 1.0), (-1.0, nan), (-inf, 1.0), (-1.0, inf), (-3e38, 3e38)])
def test_unusable_bounds_give_nan_and_zero_gradients(isa, lo, hi):
    # Without narrow_range: with it, TF's zero point for min = -inf puts both nudged bounds at +inf,
    # so x = +inf passes the mask (the golden data covers that).
    x = f32(-2, -0.5, 0, 0.5, 2, inf, -inf)
    g = np.arange(1, 8, dtype=np.float32)
    y = fqcore.fake_quant_with_min_max_vars(x, min=scalar(lo), max=scalar(hi), num_bits=8)
    assert_same_bits(y, np.full(7, nan, np.float32))
    for dx, dmin, dmax in vars_and_per_channel_gradients(g, x, lo, hi, num_bits=8):
        assert_same_bits(dx, np.zeros(7, np.float32))
        assert_same_bits(dmin, scalar(0))
        assert_same_bits(dmax, scalar(0))


def test_denormal_x_is_zero(isa):
    # nudged_min is 0 for [0, 1]; x = -1e-40 counts as 0 and passes the mask.
    r = fqcore.fake_quant_with_min_max_vars_gradient(f32(1, 2), f32(-1e-40, -1e-30), min=scalar(0), max=scalar(1))
    assert_same_bits(r.backprops_wrt_input, f32(1, 0))
    assert_same_bits(r.backprop_wrt_min, scalar(2))


def test_denormal_args_bounds_flush_to_an_empty_range():
    with pytest.raises(ValueError, match="min has to be smaller than max, was: -0 >= 0"):
        fqcore.fake_quant_with_min_max_args(f32(0.5), min=-1e-38, max=1e-38)


@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3)])
def test_empty_and_0d_inputs(isa, shape):
    x = np.full(shape, 0.05, np.float32)
    for y in (fqcore.fake_quant_with_min_max_args(x, min=-0.1, max=0.2),
              fqcore.fake_quant_with_min_max_vars(x, min=scalar(-0.1), max=scalar(0.2))):
        assert y.shape == shape and y.dtype == np.float32
    r = fqcore.fake_quant_with_min_max_vars_gradient(x, x, min=scalar(-0.1), max=scalar(0.2))
    assert_same_bits(r.backprops_wrt_input, x)
    assert_same_bits(np.asarray(r.backprop_wrt_min), scalar(0))
