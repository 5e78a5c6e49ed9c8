"""Integer arithmetic every rounding mode shares: TFLite's padding and output sizes, exact int32
accumulation of the convolutions and fully connected layers, pooling windows, fused-activation
clamps, and TFLite's fixed-point primitives (QuantizeMultiplier, SaturatingRoundingDoublingHighMul,
RoundingDivideByPOT and both MultiplyByQuantizedMultiplier variants), vectorized over numpy arrays
of int64 holding int32 values."""
import numpy as np

from ..model import QUANTIZED_RANGES

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def wrap_int32(x):
    """Two's-complement wrap of int64 values to int32, as the C kernels' int32 arithmetic does."""
    return np.asarray(x, np.int64).astype(np.int32).astype(np.int64)


def float_to_int32(x):
    """static_cast<int32_t> of already-rounded floats as x86 does it (cvttss2si / cvttsd2si):
    a value outside int32, or NaN, becomes INT32_MIN. int64 result."""
    x = np.asarray(x)
    inside = (x >= -2.0**31) & (x < 2.0**31)
    return np.where(inside, x, INT32_MIN).astype(np.int64)


def round_half_away(x):
    """TfLiteRound / std::round: to nearest, ties away from zero, in x's own float precision.
    Splitting off the integer part keeps x = k + 0.5 - ulp from rounding up (x + 0.5 would)."""
    x = np.asarray(x)
    magnitude = np.abs(x)
    whole = np.floor(magnitude)
    with np.errstate(invalid="ignore"):     # inf - inf; infinities and NaN pass through
        whole = whole + (magnitude - whole >= 0.5)
    return np.copysign(whole, x)


# -- windows -----------------------------------------------------------------------------------
def output_size(padding, size, kernel, stride, dilation=1):
    """TFLite's ComputeOutSize (TensorFlow's GetWindowedOutputSize): SAME ceil(size / stride),
    VALID ceil((size - effective kernel + 1) / stride); 0 or less means no output."""
    effective = (kernel - 1) * dilation + 1
    if padding == "SAME":
        return (size + stride - 1) // stride
    return (size + stride - effective) // stride


def padding_before(size, kernel, stride, dilation, out_size):
    """TFLite's ComputePaddingWithOffset: the padding before the first element (the kernels use
    only this one; the window simply runs past the end). An odd total puts the extra one after."""
    effective = (kernel - 1) * dilation + 1
    return max((out_size - 1) * stride + effective - size, 0) // 2


def _padded(x, pad_h, pad_w, out_h, out_w, eff_h, eff_w, stride_h, stride_w):
    """x [N, H, W, C] zero-padded so that every window of the output grid lies inside."""
    n, h, w, c = x.shape
    rows = max((out_h - 1) * stride_h + eff_h, pad_h + h)
    cols = max((out_w - 1) * stride_w + eff_w, pad_w + w)
    padded = np.zeros((n, rows, cols, c), x.dtype)
    padded[:, pad_h:pad_h + h, pad_w:pad_w + w] = x
    return padded


def _window_slices(padded, kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w,
                   out_h, out_w):
    """(i, j, view) for each kernel position: the [N, out_h, out_w, C] inputs it meets."""
    for i in range(kernel_h):
        for j in range(kernel_w):
            r, c = i * dilation_h, j * dilation_w
            yield i, j, padded[:, r:r + (out_h - 1) * stride_h + 1:stride_h,
                               c:c + (out_w - 1) * stride_w + 1:stride_w]


def _geometry(x_shape, kernel_h, kernel_w, options):
    padding = options["padding"]
    sh, sw = options["stride_h"], options["stride_w"]
    dh, dw = options.get("dilation_h", 1), options.get("dilation_w", 1)
    _, h, w, _ = x_shape
    out_h = output_size(padding, h, kernel_h, sh, dh)
    out_w = output_size(padding, w, kernel_w, sw, dw)
    pad_h = padding_before(h, kernel_h, sh, dh, out_h)
    pad_w = padding_before(w, kernel_w, sw, dw, out_w)
    return out_h, out_w, pad_h, pad_w, sh, sw, dh, dw


# -- accumulation ------------------------------------------------------------------------------
# Products of 8-bit offsets are below 2^16 and the sums below 2^40: float64 (BLAS) is exact.
def conv_accumulate(x, x_zero_point, filters, filter_zero_point, bias, options):
    """CONV_2D's int32 accumulators with the bias added, [N, OH, OW, O] int64:
    sum over the window of (x - zp_x) * (w - zp_w) + bias. TFLite skips the taps outside the
    image, which is padding x - zp_x with zeros. filters [O, KH, KW, I]; zero points scalars
    or per-output-channel. One matrix product of the im2col patches, ordered (KH, KW, I) as the
    filter is."""
    o, kh, kw, _ = filters.shape
    out_h, out_w, pad_h, pad_w, sh, sw, dh, dw = _geometry(x.shape, kh, kw, options)
    centered = x.astype(np.float64) - x_zero_point
    w = filters.astype(np.float64) - np.reshape(filter_zero_point, (-1, 1, 1, 1))
    padded = _padded(centered, pad_h, pad_w, out_h, out_w, (kh - 1) * dh + 1, (kw - 1) * dw + 1,
                     sh, sw)
    views = [view for _, _, view in _window_slices(padded, kh, kw, sh, sw, dh, dw, out_h, out_w)]
    patches = views[0] if len(views) == 1 else np.concatenate(views, axis=3)
    acc = patches.reshape(-1, patches.shape[3]) @ w.reshape(o, -1).T
    return _with_bias(acc.reshape(x.shape[0], out_h, out_w, o), bias)


def depthwise_accumulate(x, x_zero_point, filters, filter_zero_point, bias, options):
    """DEPTHWISE_CONV_2D's accumulators [N, OH, OW, C * M] int64; output channel c reads input
    channel c // M. filters [1, KH, KW, C * M]. Summed in int32 as TFLite does."""
    _, kh, kw, out_c = filters.shape
    multiplier = out_c // x.shape[3]
    out_h, out_w, pad_h, pad_w, sh, sw, dh, dw = _geometry(x.shape, kh, kw, options)
    centered = np.repeat(x.astype(np.int32) - np.int32(x_zero_point), multiplier, axis=3)
    w = filters[0].astype(np.int32) - np.reshape(filter_zero_point, (1, 1, -1)).astype(np.int32)
    padded = _padded(centered, pad_h, pad_w, out_h, out_w, (kh - 1) * dh + 1, (kw - 1) * dw + 1,
                     sh, sw)
    acc = np.zeros((x.shape[0], out_h, out_w, out_c), np.int32)
    for i, j, view in _window_slices(padded, kh, kw, sh, sw, dh, dw, out_h, out_w):
        acc += view * w[i, j]
    return _with_bias(acc, bias)


def fully_connected_accumulate(x, x_zero_point, weights, weight_zero_point, bias):
    """FULLY_CONNECTED's accumulators [rows, O] int64; x [..., I] is flattened to rows of I as
    TFLite does, weights [O, I]."""
    rows = x.reshape(-1, weights.shape[1]).astype(np.float64) - x_zero_point
    w = weights.astype(np.float64) - np.reshape(weight_zero_point, (-1, 1))
    return _with_bias(rows @ w.T, bias)


def _with_bias(acc, bias):
    # The C kernels add the bias to an int32 accumulator.
    return wrap_int32(acc.astype(np.int64) + bias.astype(np.int64))


def window_sums(x, options):
    """AVERAGE_POOL_2D's windows clipped to the image: (sums [N, OH, OW, C] of x in the dtype of
    x's accumulation, int64 or float64, and counts [OH, OW] of the elements inside)."""
    kh, kw = options["filter_h"], options["filter_w"]
    out_h, out_w, pad_h, pad_w, sh, sw, _, _ = _geometry(x.shape, kh, kw, options)
    acc_type = np.float64 if np.issubdtype(x.dtype, np.floating) else np.int64
    padded = _padded(x.astype(acc_type), pad_h, pad_w, out_h, out_w, kh, kw, sh, sw)
    inside = _padded(np.ones((1,) + x.shape[1:3] + (1,), np.int64), pad_h, pad_w, out_h, out_w,
                     kh, kw, sh, sw)
    sums = np.zeros((x.shape[0], out_h, out_w, x.shape[3]), acc_type)
    counts = np.zeros((1, out_h, out_w, 1), np.int64)
    for _, _, view in _window_slices(padded, kh, kw, sh, sw, 1, 1, out_h, out_w):
        sums += view
    for _, _, view in _window_slices(inside, kh, kw, sh, sw, 1, 1, out_h, out_w):
        counts += view
    return sums, counts[0, :, :, 0]


# -- activation clamps -------------------------------------------------------------------------
def activation_range(activation, quantization, dtype):
    """CalculateActivationRangeQuantized: (min, max) of the fused activation on the output grid.
    Each bound is zp + TfLiteRound(bound / scale) with a float32 division, intersected with the
    dtype's range."""
    qmin, qmax = QUANTIZED_RANGES[dtype]
    scale = np.float32(quantization.scale[0])
    zero_point = int(quantization.zero_point[0])

    def quantized(value):
        steps = float(round_half_away(np.float32(value) / scale))
        if not INT32_MIN <= steps <= INT32_MAX:
            raise ValueError(f"the activation bound {value} does not fit int32 on a grid of "
                             f"scale {scale}")
        return zero_point + int(steps)

    if activation == "RELU":
        return max(qmin, quantized(0.0)), qmax
    if activation == "RELU6":
        return max(qmin, quantized(0.0)), min(qmax, quantized(6.0))
    return qmin, qmax


# -- fixed point -------------------------------------------------------------------------------
def quantize_multiplier(real, single_rounding=False):
    """QuantizeMultiplier, per element: (q, shift) int64 arrays with real ~ q / 2^31 * 2^shift,
    q in [2^30, 2^31). frexp of the double, TfLiteRound(fraction * 2^31); a fraction that rounds
    up to 2^31 is halved into the next exponent; shifts below -31 flush to (0, 0). The single-
    rounding build also saturates shifts above 30."""
    fraction, shift = np.frexp(np.asarray(real, np.float64))
    q = round_half_away(fraction * float(1 << 31)).astype(np.int64)
    shift = shift.astype(np.int64)
    carry = q == (1 << 31)
    q = np.where(carry, q // 2, q)
    shift = shift + carry
    tiny = shift < -31
    q, shift = np.where(tiny, 0, q), np.where(tiny, 0, shift)
    if single_rounding:
        big = shift > 30
        q, shift = np.where(big, INT32_MAX, q), np.where(big, 30, shift)
    return q, shift


def divide_truncating(x, divisor):
    """C's integer division (toward zero) of int64 x by a positive divisor."""
    return np.where(x >= 0, x // divisor, -((-x) // divisor))


def saturating_rounding_doubling_high_mul(a, b):
    """gemmlowp's SaturatingRoundingDoublingHighMul (ARM's VQRDMULH): a * b / 2^31 to nearest,
    ties toward +infinity, except INT32_MIN * INT32_MIN, which saturates to INT32_MAX.
    gemmlowp adds 2^30 to a non-negative product, 1 - 2^30 to a negative one, and divides
    truncating; both are floor((a * b + 2^30) / 2^31), an arithmetic shift, and the one product
    that leaves int32 (2^62, giving 2^31) is the saturating one."""
    product = np.asarray(a, np.int64) * np.asarray(b, np.int64)
    return np.minimum((product + (1 << 30)) >> 31, INT32_MAX)


def rounding_divide_by_pot(x, exponent):
    """gemmlowp's RoundingDivideByPOT: x / 2^exponent to nearest, ties away from zero
    (exponent 0..31, per element). gemmlowp adds one to the floor where the remainder exceeds
    half - 1 (half for negative x), half = 2^(exponent - 1); that is floor((x + half - [x < 0])
    / 2^exponent), with no correction at all for exponent 0."""
    x, exponent = np.asarray(x, np.int64), np.asarray(exponent, np.int64)
    half = (np.int64(1) << exponent) >> 1
    negative = (x >> 63) & -(half > 0).astype(np.int64)       # -1 where x < 0 and half > 0
    return (x + half + negative) >> exponent


def multiply_by_quantized_multiplier(x, q, shift):
    """TFLite's default (double-rounding) MultiplyByQuantizedMultiplier on int32 x: a left shift
    for positive shifts (wrapping as int32 arithmetic does), SaturatingRoundingDoublingHighMul by
    q, then RoundingDivideByPOT for negative shifts."""
    shift = np.asarray(shift, np.int64)
    x = np.asarray(x, np.int64)
    if np.any(shift > 0):
        x = wrap_int32(x << np.maximum(shift, 0))
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, q),
                                  np.maximum(-shift, 0))


def multiply_by_quantized_multiplier_single(x, q, shift):
    """The TFLITE_SINGLE_ROUNDING MultiplyByQuantizedMultiplier: (x * q + 2^(30 - shift)) >>
    (31 - shift), one rounding, ties toward +infinity."""
    total = 31 - np.asarray(shift, np.int64)
    return (np.asarray(x, np.int64) * q + (np.int64(1) << (total - 1))) >> total
