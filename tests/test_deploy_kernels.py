"""Unit tests of fqcore.deploy.kernels and the reference interpreter: TFLite's fixed-point
primitives against hand-computed values and exact big-integer references, padding arithmetic,
the vectorized accumulations against naive loops, the mode interface, and the interpreter's
checks of models and feeds."""
import inspect
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fqcore.deploy.interpreter import Interpreter
from fqcore.deploy.kernels import MODES, integer
from fqcore.deploy.kernels.tflite_reference import REFERENCE, SINGLE
from fqcore.deploy.model import Model, Op, Quantization, Tensor

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
int32s = st.integers(INT32_MIN, INT32_MAX)


def _srdhm(a, b):
    return int(integer.saturating_rounding_doubling_high_mul(a, b))


def _rdbpot(x, exponent):
    return int(integer.rounding_divide_by_pot(x, exponent))


# -- SaturatingRoundingDoublingHighMul ---------------------------------------------------------
def test_srdhm_saturates_the_one_overflow():
    assert _srdhm(INT32_MIN, INT32_MIN) == INT32_MAX
    assert _srdhm(INT32_MIN, INT32_MAX) == -INT32_MAX
    assert _srdhm(INT32_MAX, INT32_MAX) == INT32_MAX - 1


def test_srdhm_rounds_ties_up():
    # 1 * 0.5, -1 * 0.5, -3 * 0.5 in Q0.31: VQRDMULH adds 2^30 and floors.
    assert _srdhm(1, 1 << 30) == 1
    assert _srdhm(-1, 1 << 30) == 0
    assert _srdhm(-3, 1 << 30) == -1
    assert _srdhm(1 << 30, 1 << 30) == 1 << 29


@given(int32s, int32s)
def test_srdhm_is_the_floor_of_the_nudged_product(a, b):
    expected = INT32_MAX if a == b == INT32_MIN else (a * b + (1 << 30)) >> 31
    assert _srdhm(a, b) == expected


# -- RoundingDivideByPOT -----------------------------------------------------------------------
@pytest.mark.parametrize("x, exponent, expected", [
    (5, 1, 3), (-5, 1, -3), (-1, 1, -1), (1, 1, 1), (-6, 2, -2), (-4, 2, -1), (-7, 2, -2),
    (7, 0, 7), (-7, 0, -7), (INT32_MIN, 31, -1), (INT32_MAX, 31, 1), (-(1 << 30), 31, -1),
    ((1 << 30) - 1, 31, 0)])
def test_rounding_divide_by_pot_rounds_half_away_from_zero(x, exponent, expected):
    assert _rdbpot(x, exponent) == expected


@given(int32s, st.integers(0, 31))
def test_rounding_divide_by_pot_matches_exact_rounding(x, exponent):
    q = Fraction(x, 1 << exponent)
    magnitude = abs(q)
    rounded = int(magnitude) + (magnitude - int(magnitude) >= Fraction(1, 2))
    assert _rdbpot(x, exponent) == (rounded if q >= 0 else -rounded)


def test_rounding_divide_by_pot_takes_an_exponent_per_element():
    out = integer.rounding_divide_by_pot(np.array([-5, -5, -5]), np.array([0, 1, 2]))
    assert out.tolist() == [-5, -3, -1]


# -- QuantizeMultiplier ------------------------------------------------------------------------
@pytest.mark.parametrize("real, q, shift", [
    (1.0, 1 << 30, 1), (0.5, 1 << 30, 0), (0.25, 1 << 30, -1), (3.0, 3 << 29, 2),
    (0.75, 3 << 29, 0),
    # Fractions within half a step of 1 round up to 2^31 and carry into the next exponent.
    (1 - 2**-40, 1 << 30, 1), (1 - 2**-32, 1 << 30, 1), (1 - 2**-31, INT32_MAX, 0),
    (2**-31, 1 << 30, -30), (2**-32, 1 << 30, -31),
    # Shifts below -31 would shift every bit out: flushed to zero.
    (2**-33, 0, 0), (1e-10, 0, 0), (0.0, 0, 0)])
def test_quantize_multiplier(real, q, shift):
    got_q, got_shift = integer.quantize_multiplier(real)
    assert (int(got_q), int(got_shift)) == (q, shift)


def test_quantize_multiplier_rounds_ties_away():
    # A fraction 2^-1 + 2^-32 is exactly half a step above 2^30 / 2^31.
    q, shift = integer.quantize_multiplier(0.5 + 2**-32)
    assert (int(q), int(shift)) == ((1 << 30) + 1, 0)


def test_quantize_multiplier_single_rounding_saturates_big_shifts():
    q, shift = integer.quantize_multiplier([2.0**31, 2.0**40, 2.0**29], single_rounding=True)
    assert q.tolist() == [INT32_MAX, INT32_MAX, 1 << 30]
    assert shift.tolist() == [30, 30, 30]


@given(st.floats(2**-31, 2**20, allow_nan=False))
def test_quantize_multiplier_represents_the_real(real):
    q, shift = integer.quantize_multiplier(real)
    assert (1 << 30) <= q < (1 << 31)
    approx = Fraction(int(q), 1 << 31) * Fraction(2) ** int(shift)
    assert abs(approx - Fraction(real)) <= Fraction(2) ** (int(shift) - 32)


# -- MultiplyByQuantizedMultiplier -------------------------------------------------------------
def test_double_rounding_differs_from_single_rounding():
    # 5 * 0.25: the high mul rounds 2.5 up to 3, the shift rounds 1.5 up to 2; one rounding of
    # 1.25 gives 1.
    assert int(integer.multiply_by_quantized_multiplier(5, 1 << 30, -1)) == 2
    assert int(integer.multiply_by_quantized_multiplier_single(5, 1 << 30, -1)) == 1


@pytest.mark.parametrize("x, q, shift, double, single", [
    (-3, 1 << 30, -1, -1, -1),         # -0.75
    (-1, 1 << 30, 0, 0, 0),            # -0.5: both round the tie up
    (-5, 1 << 30, -1, -1, -1),         # -1.25: high mul -2.5 -> -2, then -1 -> -1
    (100, 3 << 29, 2, 300, 300),       # x * 3 with a left shift
    (1000, 0, 0, 0, 0),                # a flushed multiplier
])
def test_multiply_by_quantized_multiplier_examples(x, q, shift, double, single):
    assert int(integer.multiply_by_quantized_multiplier(x, q, shift)) == double
    assert int(integer.multiply_by_quantized_multiplier_single(x, q, shift)) == single


@given(st.integers(-(1 << 24), 1 << 24), st.integers(1 << 30, INT32_MAX), st.integers(-31, 0))
def test_single_rounding_is_one_rounding_half_up(x, q, shift):
    exact = Fraction(x * q, 1 << (31 - shift))
    assert int(integer.multiply_by_quantized_multiplier_single(x, q, shift)) == \
        math.floor(exact + Fraction(1, 2))


@given(st.integers(-(1 << 24), 1 << 24), st.integers(1 << 30, INT32_MAX), st.integers(-31, 0))
def test_double_rounding_is_within_one_of_exact(x, q, shift):
    exact = Fraction(x * q, 1 << (31 - shift))
    assert abs(int(integer.multiply_by_quantized_multiplier(x, q, shift)) - exact) <= 1


# -- rounding helpers --------------------------------------------------------------------------
def test_round_half_away_keeps_values_just_below_a_half():
    below = np.nextafter(np.float32(0.5), np.float32(0))
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, below, -below, 3.0], np.float32)
    assert integer.round_half_away(x).tolist() == [1, 2, 3, -1, -3, 0, 0, 3]
    assert integer.round_half_away(np.float64(0.49999999999999994)) == 0


def test_float_to_int32_as_x86_converts():
    x = np.array([1.0, -2.0**31, 2.0**31, 1e20, -1e20, np.inf, np.nan])
    assert integer.float_to_int32(x).tolist() == [1, INT32_MIN] + [INT32_MIN] * 5


# -- padding -----------------------------------------------------------------------------------
@pytest.mark.parametrize("padding, size, kernel, stride, dilation, out, before", [
    ("SAME", 7, 3, 1, 1, 7, 1), ("SAME", 7, 3, 2, 1, 4, 1), ("SAME", 6, 3, 2, 1, 3, 0),
    ("SAME", 5, 3, 2, 1, 3, 1), ("SAME", 8, 1, 2, 1, 4, 0), ("SAME", 7, 5, 1, 2, 7, 4),
    ("SAME", 4, 2, 2, 1, 2, 0), ("SAME", 5, 4, 1, 1, 5, 1), ("SAME", 1, 3, 1, 1, 1, 1),
    ("VALID", 7, 3, 2, 1, 3, 0), ("VALID", 7, 3, 1, 1, 5, 0), ("VALID", 5, 5, 1, 1, 1, 0),
    ("VALID", 7, 3, 1, 3, 1, 0), ("VALID", 8, 2, 3, 1, 3, 0), ("VALID", 4, 5, 1, 1, 0, 0)])
def test_output_size_and_padding(padding, size, kernel, stride, dilation, out, before):
    assert integer.output_size(padding, size, kernel, stride, dilation) == out
    if out > 0:
        assert integer.padding_before(size, kernel, stride, dilation, out) == before


def test_window_counts_exclude_padding():
    x = np.zeros((1, 4, 4, 1), np.int8)
    options = dict(padding="SAME", stride_h=1, stride_w=1, filter_h=3, filter_w=3)
    _, counts = integer.window_sums(x, options)
    assert counts.tolist() == [[4, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]]
    options.update(stride_h=2, stride_w=3, padding="SAME")
    _, counts = integer.window_sums(np.zeros((1, 5, 7, 1), np.int8), options)
    assert counts.tolist() == [[4, 6, 4], [6, 9, 6], [4, 6, 4]]   # rows 2 3 2, columns 2 3 2


# -- accumulation against naive loops ----------------------------------------------------------
def _naive_conv(x, zx, w, zw, bias, padding, sh, sw, dh, dw, depthwise=False):
    n, h, wd, c = x.shape
    kh, kw = w.shape[1:3]
    out_c = w.shape[3] if depthwise else w.shape[0]
    oh = integer.output_size(padding, h, kh, sh, dh)
    ow = integer.output_size(padding, wd, kw, sw, dw)
    ph = integer.padding_before(h, kh, sh, dh, oh)
    pw = integer.padding_before(wd, kw, sw, dw, ow)
    zw = np.broadcast_to(zw, (out_c,))
    out = np.zeros((n, oh, ow, out_c), np.int64)
    for b in range(n):
        for oy in range(oh):
            for ox in range(ow):
                for o in range(out_c):
                    acc = int(bias[o])
                    for i in range(kh):
                        for j in range(kw):
                            y, xx = oy * sh - ph + i * dh, ox * sw - pw + j * dw
                            if not (0 <= y < h and 0 <= xx < wd):
                                continue
                            if depthwise:
                                acc += (int(x[b, y, xx, o // (out_c // c)]) - zx) * \
                                    (int(w[0, i, j, o]) - int(zw[o]))
                            else:
                                acc += int(np.dot(x[b, y, xx].astype(np.int64) - zx,
                                                  w[o, i, j].astype(np.int64) - int(zw[o])))
                    out[b, oy, ox, o] = acc
    return out


GEOMETRIES = [("SAME", 1, 1, 1, 1), ("VALID", 2, 2, 1, 1), ("SAME", 2, 1, 1, 2),
              ("VALID", 1, 2, 2, 1), ("SAME", 2, 2, 1, 1)]


@pytest.mark.parametrize("padding, sh, sw, dh, dw", GEOMETRIES)
@pytest.mark.parametrize("kernel", [(1, 1), (3, 3), (5, 3)])
def test_conv_accumulate_matches_loops(padding, sh, sw, dh, dw, kernel):
    rng = np.random.default_rng(hash((padding, sh, sw, dh, dw, kernel)) % 2**32)
    x = rng.integers(0, 256, (2, 9, 7, 3)).astype(np.uint8)
    w = rng.integers(0, 256, (4,) + kernel + (3,)).astype(np.uint8)
    bias = rng.integers(-1000, 1000, 4).astype(np.int32)
    options = dict(padding=padding, stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw)
    got = integer.conv_accumulate(x, 131, w, np.array([97]), bias, options)
    assert np.array_equal(got, _naive_conv(x, 131, w, 97, bias, padding, sh, sw, dh, dw))


@pytest.mark.parametrize("padding, sh, sw, dh, dw", GEOMETRIES)
@pytest.mark.parametrize("multiplier", [1, 2])
def test_depthwise_accumulate_matches_loops(padding, sh, sw, dh, dw, multiplier):
    rng = np.random.default_rng(hash((padding, sh, sw, dh, dw, multiplier)) % 2**32)
    x = rng.integers(-128, 128, (2, 7, 5, 3)).astype(np.int8)
    w = rng.integers(-127, 128, (1, 3, 3, 3 * multiplier)).astype(np.int8)
    bias = rng.integers(-1000, 1000, 3 * multiplier).astype(np.int32)
    options = dict(padding=padding, stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw)
    got = integer.depthwise_accumulate(x, -128, w, np.zeros(3 * multiplier, np.int64), bias,
                                       options)
    expected = _naive_conv(x, -128, w, 0, bias, padding, sh, sw, dh, dw, depthwise=True)
    assert np.array_equal(got, expected)


def test_fully_connected_accumulate_and_int32_wrap():
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (6, 33)).astype(np.int8)
    w = rng.integers(-128, 128, (4, 33)).astype(np.int8)
    bias = np.array([0, 1, -1, INT32_MAX], np.int32)
    got = integer.fully_connected_accumulate(x, 7, w, np.array([-3]), bias)
    exact = (x.astype(np.int64) - 7) @ (w.astype(np.int64) + 3).T + bias
    assert np.array_equal(got, exact.astype(np.int32))      # int32 wrap-around of the sum


# -- activation clamps -------------------------------------------------------------------------
def test_activation_range_divides_in_float32():
    # 6 / float32(0.8) is 7.4999999 in double but exactly 7.5 in float32: the bound is 8.
    q = Quantization([0.8], [0])
    assert integer.activation_range("RELU6", q, "uint8") == (0, 8)
    # 6 / float32(6 / 6.5) is exactly 6.5: half away from zero gives 7 (half to even: 6).
    assert integer.activation_range("RELU6", Quantization([6 / 6.5], [0]), "uint8") == (0, 7)


@pytest.mark.parametrize("activation, scale, zp, dtype, expected", [
    ("NONE", 0.1, 3, "int8", (-128, 127)), ("RELU", 0.1, 3, "int8", (3, 127)),
    ("RELU6", 6 / 255, -128, "int8", (-128, 127)), ("RELU6", 0.01, -128, "int8", (-128, 127)),
    ("RELU6", 0.1, 100, "int8", (100, 127)), ("RELU", 0.1, -128, "int8", (-128, 127)),
    ("RELU6", 0.05, 10, "uint8", (10, 130)), ("RELU", 0.05, 255, "uint8", (255, 255))])
def test_activation_range(activation, scale, zp, dtype, expected):
    assert integer.activation_range(activation, Quantization([scale], [zp]), dtype) == expected


# -- per-op arithmetic -------------------------------------------------------------------------
def test_average_pool_rounds_half_away_from_zero():
    x = np.array([-3, -2, 3, 2, -1, 0], np.int8).reshape(1, 1, 6, 1)
    options = dict(padding="VALID", stride_h=1, stride_w=2, filter_h=1, filter_w=2)
    q = Quantization([0.1], [0])
    out = REFERENCE.average_pool_2d(x, q, q, options, -128, 127, "int8")
    assert out.reshape(-1).tolist() == [-3, 3, -1]      # -2.5, 2.5, -0.5


def test_mean_of_one_element_keeps_values():
    q = Quantization([0.1], [-5])
    x = np.arange(-128, 128, dtype=np.int8).reshape(1, 1, 256)
    for mode in (REFERENCE, SINGLE):
        assert np.array_equal(mode.mean(x, (1,), True, q, q, "int8"), x)


def test_softmax_of_equal_logits_is_uniform():
    q_in, q_out = Quantization([0.1], [0]), Quantization([1 / 256], [-128])
    out = REFERENCE.softmax(np.zeros((2, 4), np.int8), 1.0, q_in, q_out, "int8")
    assert np.array_equal(out, np.full((2, 4), 64 - 128, np.int8))   # 0.25 on a grid of 1/256


def test_softmax_rejects_sums_tflite_cannot_hold():
    q_in, q_out = Quantization([0.1], [0]), Quantization([1 / 256], [-128])
    with pytest.raises(ValueError, match="512"):
        REFERENCE.softmax(np.zeros((1, 512), np.int8), 1.0, q_in, q_out, "int8")


def test_softmax_rejects_multipliers_tflite_aborts_on():
    # beta * scale * 2^26 <= 1 fails TFLite's CHECK on a multiplier above one, which aborts
    # the process running LiteRT; the interpreter says so when it is built.
    model = Model({"x": Tensor("x", (-1, 4), "int8", Quantization([1e-9], [0])),
                   "y": Tensor("y", (-1, 4), "int8", Quantization([1 / 256], [-128]))},
                  [Op("SOFTMAX", ["x"], ["y"], {"beta": 1.0})], ["x"], ["y"])
    with pytest.raises(ValueError, match="SOFTMAX op 0: beta \\* input scale.*too small"):
        Interpreter(model)


def test_quantize_ties_and_out_of_range():
    q = Quantization([0.5], [-100])
    x = np.array([0.25, -0.25, 0.75, 1e10, -1e10, np.inf, np.nan], np.float32)
    # x86 turns 1e10, -1e10, inf and NaN into INT32_MIN; the negative zero point wraps it to
    # the top of int32, so all four clamp to 127, as LiteRT computes them.
    assert REFERENCE.quantize(x, q, "int8").tolist() == [-99, -101, -98, 127, 127, 127, 127]
    q = Quantization([0.5], [100])
    assert REFERENCE.quantize(x[3:], q, "int8").tolist() == [-128, -128, -128, -128]
    assert MODES["float32_half_even"].quantize(x[:3], q, "int8").tolist() == [100, 100, 102]


# -- the modes ---------------------------------------------------------------------------------
INTERFACE = {
    "activation_range": ["activation", "quantization", "dtype"],
    "requantize": ["kind", "acc", "input_q", "filter_q", "output_q", "act_min", "act_max",
                   "dtype"],
    "add": ["a", "a_q", "b", "b_q", "output_q", "act_min", "act_max", "dtype"],
    "average_pool_2d": ["x", "input_q", "output_q", "options", "act_min", "act_max", "dtype"],
    "mean": ["x", "axes", "keep_dims", "input_q", "output_q", "dtype"],
    "softmax": ["x", "beta", "input_q", "output_q", "dtype"],
    "quantize": ["x", "output_q", "dtype"],
    "dequantize": ["x", "input_q"],
}


@pytest.mark.parametrize("name", sorted(MODES))
def test_modes_provide_the_interface(name):
    mode = MODES[name]
    for function, parameters in INTERFACE.items():
        signature = inspect.signature(getattr(mode, function))
        assert len(signature.parameters) == len(parameters), (name, function)


def test_modes_are_the_documented_three():
    assert sorted(MODES) == ["float32_half_even", "single", "tflite_reference"]


def test_uint8_depthwise_keeps_double_rounding_in_the_single_build():
    # s_in * s_w / s_out = 0.25 and acc 5: one rounding of 1.25 gives 1, two give 2.
    q_in, q_w, q_out = Quantization([0.5], [0]), Quantization([0.5], [0]), Quantization([1.0], [0])
    acc = np.array([[5]], np.int64)
    args = (acc, q_in, q_w, q_out, 0, 255, "uint8")
    assert SINGLE.requantize("CONV_2D", *args).tolist() == [[1]]
    assert SINGLE.requantize("DEPTHWISE_CONV_2D", *args).tolist() == [[2]]
    assert REFERENCE.requantize("CONV_2D", *args).tolist() == [[2]]


# -- the interpreter ---------------------------------------------------------------------------
def _small_cnn(dtype="int8", batch=-1):
    """QUANTIZE, CONV_2D (RELU6), DEPTHWISE_CONV_2D, ADD, MEAN, FULLY_CONNECTED, SOFTMAX,
    DEQUANTIZE on 8x8x1 images."""
    rng = np.random.default_rng(0)
    lo = -128 if dtype == "int8" else 0
    wlo = -127 if dtype == "int8" else 0

    def q(scale, zp):
        return Quantization([scale], [zp])

    t = {}

    def tensor(name, shape, kind=dtype, quant=None, data=None):
        t[name] = Tensor(name, shape, kind, quant, data)

    tensor("image", (batch, 8, 8, 1), "float32")
    tensor("x", (batch, 8, 8, 1), quant=q(1 / 255, lo))
    tensor("w1", (16, 3, 3, 1), quant=q(0.01, lo + 128 if dtype == "uint8" else 0),
           data=rng.integers(wlo, lo + 256, (16, 3, 3, 1)))
    tensor("b1", (16,), "int32", q(0.01 / 255, 0), rng.integers(-50, 50, 16))
    tensor("c1", (batch, 8, 8, 16), quant=q(6 / 255, lo))
    tensor("w2", (1, 3, 3, 16), quant=q(0.02, lo + 128 if dtype == "uint8" else 0),
           data=rng.integers(wlo, lo + 256, (1, 3, 3, 16)))
    tensor("b2", (16,), "int32", q(0.02 * 6 / 255, 0), rng.integers(-50, 50, 16))
    tensor("c2", (batch, 8, 8, 16), quant=q(0.05, lo + 120))
    tensor("s", (batch, 8, 8, 16), quant=q(0.06, lo + 110))
    tensor("axes", (2,), "int32", data=np.array([1, 2], np.int32))
    tensor("m", (batch, 16), quant=q(0.03, lo + 100))
    tensor("w3", (10, 16), quant=q(0.01, lo + 128 if dtype == "uint8" else 0),
           data=rng.integers(wlo, lo + 256, (10, 16)))
    tensor("b3", (10,), "int32", q(0.0003, 0), rng.integers(-50, 50, 10))
    tensor("f", (batch, 10), quant=q(0.1, lo + 128))
    tensor("p", (batch, 10), quant=q(1 / 256, lo))
    tensor("probabilities", (batch, 10), "float32")
    conv = dict(padding="SAME", stride_h=1, stride_w=1, dilation_h=1, dilation_w=1)
    ops = [Op("QUANTIZE", ["image"], ["x"]),
           Op("CONV_2D", ["x", "w1", "b1"], ["c1"], dict(conv, activation="RELU6")),
           Op("DEPTHWISE_CONV_2D", ["c1", "w2", "b2"], ["c2"],
              dict(conv, depth_multiplier=1, activation="NONE")),
           Op("ADD", ["c1", "c2"], ["s"], {"activation": "RELU"}),
           Op("MEAN", ["s", "axes"], ["m"], {"keep_dims": False}),
           Op("FULLY_CONNECTED", ["m", "w3", "b3"], ["f"], {"activation": "NONE"}),
           Op("SOFTMAX", ["f"], ["p"], {"beta": 1.0}),
           Op("DEQUANTIZE", ["p"], ["probabilities"])]
    return Model(t, ops, ["image"], ["probabilities"])


@pytest.mark.parametrize("rounding", sorted(MODES))
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_small_cnn_runs_in_every_mode(rounding, dtype):
    images = np.random.default_rng(1).random((5, 8, 8, 1), np.float32)
    interpreter = Interpreter(_small_cnn(dtype), rounding)
    out = interpreter.run(images)["probabilities"]
    assert out.shape == (5, 10) and out.dtype == np.float32
    assert np.all(np.abs(out.sum(axis=1) - 1) < 0.1)
    every = interpreter.tensors({"image": images})
    assert list(every) == ["image", "x", "c1", "c2", "s", "m", "f", "p", "probabilities"]
    assert every["c1"].dtype == np.dtype(dtype) and every["c1"].shape == (5, 8, 8, 16)


def test_batch_rows_are_independent():
    images = np.random.default_rng(2).random((7, 8, 8, 1), np.float32)
    interpreter = Interpreter(_small_cnn())
    together = interpreter.run(images)["probabilities"]
    alone = np.concatenate([interpreter.run(images[i:i + 1])["probabilities"] for i in range(7)])
    assert np.array_equal(together, alone)


def test_rounding_must_be_a_mode():
    with pytest.raises(ValueError, match="float32_half_even.*single.*tflite_reference.*'banker'"):
        Interpreter(_small_cnn(), rounding="banker")


@pytest.mark.parametrize("feeds, message", [
    ({"image": np.zeros((2, 8, 8, 1), np.float64)}, "input 'image': dtype float64"),
    ({"image": np.zeros((2, 8, 7, 1), np.float32)}, "input 'image': shape"),
    ({"image": np.zeros((8, 8, 1), np.float32)}, "input 'image': shape"),
    ({}, "input 'image' is missing"),
    ({"image": np.zeros((2, 8, 8, 1), np.float32), "extra": np.zeros(1)}, "no input 'extra'"),
])
def test_bad_feeds(feeds, message):
    with pytest.raises(ValueError, match=message):
        Interpreter(_small_cnn()).run(feeds)


def _broken(change):
    model = _small_cnn()
    change(model)
    return model


def _set(name, **fields):
    def change(model):
        for key, value in fields.items():
            setattr(model.tensors[name], key, value)
    return change


def _option(index, **options):
    def change(model):
        model.ops[index].options.update(options)
    return change


@pytest.mark.parametrize("change, message", [
    (_set("b1", dtype="int8", data=np.zeros(16, np.int8)), "CONV_2D op .*bias 'b1'"),
    (_set("b1", shape=(15,), data=np.zeros(15, np.int32)), "bias 'b1'.*\\(16,\\)"),
    (_set("w1", quantization=Quantization([0.01], [3])), "filter 'w1'.*zero point 0"),
    (_set("w1", quantization=Quantization(np.full(4, 0.01), np.zeros(4))),
     "filter 'w1'.*4 scales"),
    (_set("w1", shape=(16, 3, 3, 2), data=np.zeros((16, 3, 3, 2), np.int8)),
     "input 'x' has 1 channels"),
    (_set("w2", quantization=Quantization([0.02], [1])), "DEPTHWISE_CONV_2D.*'w2'.*zero point"),
    (_option(2, depth_multiplier=2), "depth_multiplier 2"),
    (_set("p", quantization=Quantization([0.01], [-128])), "SOFTMAX.*scale 1/256"),
    (_set("s", quantization=Quantization([1e-9], [0])), "ADD.*output scale"),
    (_set("c2", shape=(-1, 8, 8, 15)), "output 'c2' is declared"),
    (_set("c1", quantization=None), "'c1' is int8 without quantization"),
    (_set("c1", quantization=Quantization([-1.0], [0])), "scales must be positive"),
    (_set("m", dtype="uint8"), "output 'm' is uint8"),
    (_option(1, padding="FULL"), "padding must be one of"),
    (_option(1, stride_h=0), "stride_h must be a positive integer"),
    (_option(5, activation="TANH"), "FULLY_CONNECTED.*activation must be one of"),
    (_set("axes", data=np.array([1, 4], np.int32)), "MEAN.*axes \\[1, 4\\] out of range"),
    (_set("w3", data=None), "input 'w3' is computed by no earlier op"),
])
def test_bad_models_name_the_op_and_tensor(change, message):
    with pytest.raises(ValueError, match=message):
        Interpreter(_broken(change))


def test_ops_out_of_order_and_missing_outputs():
    model = _small_cnn()
    model.ops = model.ops[1:] + model.ops[:1]
    with pytest.raises(ValueError, match="input 'x' is computed by no earlier op"):
        Interpreter(model)
    model = _small_cnn()
    model.outputs = ["nowhere"]
    with pytest.raises(ValueError, match="output 'nowhere' is neither an input nor computed"):
        Interpreter(model)


def test_window_that_leaves_no_output():
    model = _small_cnn()
    model.tensors["w1"] = Tensor("w1", (16, 9, 9, 1), "int8", Quantization([0.01], [0]),
                                 np.zeros((16, 9, 9, 1), np.int8))
    model.ops[1].options["padding"] = "VALID"
    with pytest.raises(ValueError, match="leaves no output"):
        Interpreter(model)


def test_model_sources(tmp_path):
    with pytest.raises(ValueError, match="expected a .tflite or .onnx file"):
        Interpreter(str(tmp_path / "model.bin"))
    with pytest.raises(TypeError, match="model must be"):
        Interpreter(42)


def _two_input_add():
    q = Quantization([0.1], [0])
    return Model({"a": Tensor("a", (-1, 3), "int8", q), "b": Tensor("b", (-1, 3), "int8", q),
                  "y": Tensor("y", (-1, 3), "int8", q)},
                 [Op("ADD", ["a", "b"], ["y"], {"activation": "NONE"})], ["a", "b"], ["y"])


def test_feeds_of_a_two_input_model():
    interpreter = Interpreter(_two_input_add())
    a = np.array([[1, 2, 3]], np.int8)
    assert interpreter.run({"a": a, "b": a})["y"].tolist() == [[2, 4, 6]]
    with pytest.raises(ValueError, match="2 inputs.*pass a dict"):
        interpreter.run(a)
    with pytest.raises(ValueError, match="input 'b': batch 2, another input has batch 1"):
        interpreter.run({"a": a, "b": np.zeros((2, 3), np.int8)})


def test_only_the_batch_may_be_unknown():
    model = _two_input_add()
    model.tensors["a"].shape = (2, -1)
    with pytest.raises(ValueError, match="input 'a'.*only the first"):
        Interpreter(model)
