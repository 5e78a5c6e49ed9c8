"""TFLite's reference kernels (the BUILTIN_REF resolver) in numpy: the requantization of each op
as the default build computes it (two roundings: SaturatingRoundingDoublingHighMul, then
RoundingDivideByPOT), and as a TFLITE_SINGLE_ROUNDING build does (one rounding of x * q)."""
import numpy as np

from . import integer
from ..model import QUANTIZED_RANGES
from .integer import quantize_multiplier, rounding_divide_by_pot
from .integer import saturating_rounding_doubling_high_mul as _srdhm

_F64 = np.float64
_ADD_LEFT_SHIFT = 20      # 8-bit ADD lifts both inputs by 2^20 before rescaling them
_SOFTMAX_DIFF_BITS = 5    # integer bits of the Q5.26 input to exp()
_SOFTMAX_SUM_BITS = 12    # integer bits of the Q12.19 sum of exponentials


def _scale(quantization):
    return np.float32(quantization.scale[0])


def _zero_point(quantization):
    return int(quantization.zero_point[0])


def _clamp(x, lo, hi, dtype):
    return np.clip(x, lo, hi).astype(dtype)


def add_multipliers(a_q, b_q, output_q):
    """ADD's Prepare for 8-bit tensors: three QuantizeMultiplierSmallerThanOneExp of doubles
    around twice the larger input scale (the max taken in float32). ValueError where TFLite's
    CHECK on a multiplier below one would abort."""
    s1, s2, so = _scale(a_q), _scale(b_q), _scale(output_q)
    twice_max = 2 * _F64(max(s1, s2))
    reals = (_F64(s1) / twice_max, _F64(s2) / twice_max,
             twice_max / (_F64(1 << _ADD_LEFT_SHIFT) * _F64(so)))
    if reals[2] >= 1:
        raise ValueError(f"output scale {so} is too small for inputs of scales {s1} and {s2} "
                         f"(TFLite needs 2 * max input scale < 2^20 * output scale)")
    return reals


def softmax_multiplier(beta, input_scale, single_rounding=False):
    """PreprocessSoftmaxScaling: beta * input_scale * 2^26 (capped below 2^31, or 2^30 in the
    single-rounding build) as a multiplier above one and its left shift, and diff_min, the most
    negative input difference that still counts. ValueError where TFLite's CHECK would abort."""
    cap = (1 << 30) - 1.0 if single_rounding else (1 << 31) - 1.0
    real = min(_F64(np.float32(beta)) * _F64(np.float32(input_scale))
               * (1 << (31 - _SOFTMAX_DIFF_BITS)), cap)
    if not real > 1:
        raise ValueError(f"beta * input scale = {real / (1 << 26)!r} is too small for TFLite's "
                         f"softmax (it needs more than 2^-26)")
    q, shift = quantize_multiplier(real, single_rounding)
    shift = int(shift)
    # CalculateInputRadius: floor((2^5 - 1) * 2^26 / 2^shift), in double.
    radius = int(np.floor(((1 << _SOFTMAX_DIFF_BITS) - 1) * _F64(1 << 26) / _F64(1 << shift)))
    return int(q), shift, -radius


class TFLiteArithmetic:
    """One build of TFLite's reference kernels; `single_rounding` picks TFLITE_SINGLE_ROUNDING.
    Implements the rounding-mode interface of fqcore.deploy.kernels."""

    def __init__(self, single_rounding):
        self.single_rounding = single_rounding
        self._mbqm = (integer.multiply_by_quantized_multiplier_single if single_rounding
                      else integer.multiply_by_quantized_multiplier)

    activation_range = staticmethod(integer.activation_range)

    # -- layers ----------------------------------------------------------------------------
    def requantize(self, kind, acc, input_q, filter_q, output_q, act_min, act_max, dtype):
        """int32 accumulators (bias added, channels last) to the output grid.
        FULLY_CONNECTED (int8 and uint8, per tensor or per channel): round(double(acc) *
        (double(s_in) * double(s_w[c]) / double(s_out))), no fixed point. The convolutions:
        MultiplyByQuantizedMultiplier by QuantizeMultiplier of double(s_in) * double(s_w[c]) /
        s_out for int8 (the per-channel kernels, also for per-tensor weights), of
        double(float32(s_in * s_w)) / s_out for uint8 (GetQuantizedConvolutionMultipler's float
        product)."""
        s_in, s_out = _F64(_scale(input_q)), _F64(_scale(output_q))
        s_w = np.broadcast_to(filter_q.scale, (acc.shape[-1],))
        if kind == "FULLY_CONNECTED":
            steps = integer.round_half_away(acc * (s_in * s_w.astype(_F64) / s_out))
            out = integer.wrap_int32(integer.float_to_int32(steps) + _zero_point(output_q))
            return _clamp(out, act_min, act_max, dtype)
        if dtype == "uint8":
            real = _F64(np.float32(s_in) * s_w) / s_out
        else:
            real = s_in * s_w.astype(_F64) / s_out
        q, shift = quantize_multiplier(real, self.single_rounding)
        mbqm = self._mbqm
        if kind == "DEPTHWISE_CONV_2D" and dtype == "uint8":
            # The uint8 depthwise reference kernel asks for DepthwiseConvOutputRounding::
            # kAwayFromZero, which is the double-rounding arithmetic in either build.
            mbqm = integer.multiply_by_quantized_multiplier
        out = mbqm(acc, q, shift) + _zero_point(output_q)
        return _clamp(out, act_min, act_max, dtype)

    # -- element-wise and pooling ----------------------------------------------------------
    def add(self, a, a_q, b, b_q, output_q, act_min, act_max, dtype):
        """reference_integer_ops::AddFunc: each input, offset and lifted by 2^20, is rescaled
        by its multiplier below one; the int32 sum is rescaled to the output grid."""
        (q1, s1), (q2, s2), (qo, so) = (quantize_multiplier(r, self.single_rounding)
                                        for r in add_multipliers(a_q, b_q, output_q))
        lift = np.int64(1 << _ADD_LEFT_SHIFT)
        x1 = self._mbqm((a.astype(np.int64) - _zero_point(a_q)) * lift, q1, s1)
        x2 = self._mbqm((b.astype(np.int64) - _zero_point(b_q)) * lift, q2, s2)
        out = self._mbqm(x1 + x2, qo, so) + _zero_point(output_q)
        return _clamp(out, act_min, act_max, dtype)

    def average_pool_2d(self, x, input_q, output_q, options, act_min, act_max, dtype):
        """The integer average of the raw values inside each window (the output keeps the input's
        grid): (sum +- count / 2) / count in C's truncating division, half away from zero."""
        sums, counts = integer.window_sums(x, options)
        counts = counts[None, :, :, None]
        average = np.sign(sums) * ((np.abs(sums) + counts // 2) // counts)
        return _clamp(average, act_min, act_max, dtype)

    def mean(self, x, axes, keep_dims, input_q, output_q, dtype):
        """reference_ops::QuantizedMeanOrSum: the int32 sum minus zp_in * n, rescaled by
        s_in / s_out folded with 1/n into the multiplier: (q << k) / n with k = floor(log2 n)
        (at most 32, and at most 31 + shift), the shift lowered by k."""
        n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
        q, shift = quantize_multiplier(_F64(_scale(input_q)) / _F64(_scale(output_q)),
                                       self.single_rounding)
        q, shift = int(q), int(shift)
        k = min(n.bit_length() - 1, 32, 31 + shift)
        q, shift = (q << k) // n, shift - k
        sums = integer.wrap_int32(np.sum(x, axis=axes, dtype=np.int64, keepdims=keep_dims))
        centered = integer.wrap_int32(sums - _zero_point(input_q) * n)
        out = self._mbqm(centered, q, shift) + _zero_point(output_q)
        return _clamp(out, *QUANTIZED_RANGES[dtype], dtype)

    def softmax(self, x, beta, input_q, output_q, dtype):
        """reference_ops::Softmax for 8-bit tensors, along the last axis: gemmlowp's fixed-point
        exp of the scaled differences to the row maximum, their Q12.19 sum, its reciprocal, and
        the output on the grid of 1/256 from the type's minimum."""
        multiplier, left_shift, diff_min = softmax_multiplier(beta, _scale(input_q),
                                                              self.single_rounding)
        diff = x.astype(np.int64) - x.max(axis=-1, keepdims=True)
        counted = diff >= diff_min
        if self.single_rounding:
            scaled = integer.multiply_by_quantized_multiplier_single(diff, multiplier,
                                                                     left_shift)
        else:
            scaled = _srdhm(diff * (1 << left_shift), multiplier)
        exps = np.where(counted, _exp_on_negative_values(np.where(counted, scaled, 0)), 0)
        sums = np.sum(rounding_divide_by_pot(exps, _SOFTMAX_SUM_BITS), axis=-1, keepdims=True)
        reciprocal, bits_over_unit = _reciprocal(integer.wrap_int32(sums),
                                                 _SOFTMAX_SUM_BITS)
        exponent = bits_over_unit + 31 - 8
        if exponent.max(initial=0) > 31:
            # TFLite's TFLITE_CHECK(exponent <= 31) aborts: the exponentials summed to 512 or more.
            raise ValueError("softmax: a row's exponentials sum to 512 or more, which TFLite's "
                             "reference kernel cannot represent (it aborts)")
        lowest, highest = QUANTIZED_RANGES[dtype]
        out = rounding_divide_by_pot(_srdhm(reciprocal, exps), exponent) + lowest
        return np.where(counted, np.clip(out, lowest, highest), lowest).astype(dtype)

    # -- conversions -----------------------------------------------------------------------
    def quantize(self, x, output_q, dtype):
        """reference_ops::AffineQuantize: TfLiteRound(x / scale) in float32, converted to int32
        as x86 does (a value out of range, or NaN, becomes INT32_MIN), plus the zero point with
        int32 wrap-around, clamped to the dtype."""
        steps = integer.round_half_away(x.astype(np.float32) / _scale(output_q))
        q = integer.wrap_int32(integer.float_to_int32(steps) + _zero_point(output_q))
        return _clamp(q, *QUANTIZED_RANGES[dtype], dtype)

    def dequantize(self, x, input_q):
        """reference_ops::Dequantize: float32(double(scale) * (q - zp))."""
        return ((x.astype(np.int64) - _zero_point(input_q)) * _F64(_scale(input_q))).astype(
            np.float32)


# -- gemmlowp fixed point, int32 values in int64 arrays ----------------------------------------
def _saturating_shift_left(x, exponent):
    """SaturatingRoundingMultiplyByPOT with a positive exponent: x * 2^exponent, saturated."""
    limit = (1 << (31 - exponent)) - 1
    return np.where(x > limit, integer.INT32_MAX,
                    np.where(x < -limit, integer.INT32_MIN, x << exponent))


def _exp_on_interval(a):
    """exp(a) for a in [-1/4, 0), Q0.31: gemmlowp's Taylor expansion around -1/8."""
    constant_term, one_third = 1895147668, 715827883
    x = a + (1 << 28)
    x2 = _srdhm(x, x)
    x3 = _srdhm(x2, x)
    x4 = _srdhm(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    tail = rounding_divide_by_pot(_srdhm(x4_over_4 + x3, one_third) + x2, 1)
    return integer.wrap_int32(constant_term + _srdhm(constant_term, x + tail))


# exp(-2^k) in Q0.31 for the bits k = -2..4 of a Q5.26 magnitude.
_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
               (2, 39332535), (3, 720401), (4, 242))


def _exp_on_negative_values(a):
    """gemmlowp's exp_on_negative_values for Q5.26 inputs a <= 0, result Q0.31."""
    fractional = 31 - _SOFTMAX_DIFF_BITS
    quarter = 1 << (fractional - 2)
    a_mod_quarter_minus_quarter = (a & (quarter - 1)) - quarter
    result = _exp_on_interval(_saturating_shift_left(a_mod_quarter_minus_quarter,
                                                     _SOFTMAX_DIFF_BITS))
    remainder = a_mod_quarter_minus_quarter - a
    for exponent, multiplier in _EXP_BARREL:
        bit = (remainder & (1 << (fractional + exponent))) != 0
        result = np.where(bit, _srdhm(result, multiplier), result)
    return np.where(a == 0, integer.INT32_MAX, result)


def _reciprocal(x, integer_bits):
    """TFLite's GetReciprocal of positive Q(integer_bits) x: (1 / x scaled into Q0.31, the number
    of bits x has above one), by gemmlowp's one_over_one_plus_x_for_x_in_0_1."""
    headroom_plus_one = 32 - np.frexp(x.astype(np.float64))[1].astype(np.int64)
    bits_over_unit = integer_bits - headroom_plus_one
    shifted_minus_one = integer.wrap_int32((x << headroom_plus_one) - (1 << 31))
    # one_over_one_plus_x_for_x_in_0_1: Newton-Raphson on half the denominator, in Q2.29.
    total = shifted_minus_one + integer.INT32_MAX
    half_denominator = integer.divide_truncating(total + np.where(total >= 0, 1, -1), 2)
    one_q2 = 1 << 29
    estimate = 1515870810 + _srdhm(half_denominator, -1010580540)
    for _ in range(3):
        error = one_q2 - _srdhm(half_denominator, estimate)
        estimate = estimate + _saturating_shift_left(_srdhm(estimate, error), 2)
    return _saturating_shift_left(estimate, 1), bits_over_unit


REFERENCE = TFLiteArithmetic(single_rounding=False)
SINGLE = TFLiteArithmetic(single_rounding=True)
