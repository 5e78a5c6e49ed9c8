"""ONNX Runtime's arithmetic (its CPU kernels on x86-64, as they run the graphs onnx_format.write
produces), bit for bit; also the approximation of TFLite's XNNPACK delegate. Every rounding is
to nearest even, in float32 unless said otherwise.

On x86 ONNX Runtime runs an int8 model as uint8 (it rewrites every int8 QuantizeLinear /
DequantizeLinear pair to uint8 with the zero point + 128): values and zero points shift by 128,
which is exact in integers but changes some float32 roundings, so the kernels here compute int8
in that uint8 form too (_SHIFT)."""
import math

import numpy as np

from . import integer
from ..model import QUANTIZED_RANGES

_F32 = np.float32
_SHIFT = {"int8": 128, "uint8": 0}
_INT32_MIN = -(1 << 31)


def _cvtps(v):
    """cvtps2dq: float32 to int32 rounding half to even; NaN and values out of int32's range
    become INT32_MIN (0x80000000), as the instruction does."""
    with np.errstate(invalid="ignore"):
        r = np.rint(v.astype(np.float64))
        return np.where(np.abs(r) < 2.0 ** 31, r, _INT32_MIN).astype(np.int64)


def _fma(a, b, c):
    """float32 fused multiply-add a * b + c, rounded once (the AVX2 vfmadd the kernels use).
    a * b is exact in float64; the sum's rounding error comes from TwoSum, and it decides the
    one case a float64 sum gets wrong: landing exactly halfway between two float32 values."""
    a, b, c = (np.asarray(v, _F32).astype(np.float64) for v in (a, b, c))
    product = a * b
    total = product + c
    back = total - c
    error = (product - back) + (c - (total - back))
    rounded = total.astype(_F32)
    r64 = rounded.astype(np.float64)
    toward = np.where(total > r64, np.inf, -np.inf).astype(_F32)
    other = np.nextafter(rounded, toward)
    halfway = (total != r64) & (total == (r64 + other.astype(np.float64)) / 2)
    # On a halfway point, the exact value lies on the side of its error.
    fix = halfway & (error != 0) & ((error > 0) == (other > rounded))
    return np.where(fix, other, rounded)


def activation_range(activation, quantization, dtype):
    """The fused activation's clamp as the graph applies it: QuantizeLinear of 0 and 6,
    zero point + rint(bound / scale), within the dtype's range."""
    qmin, qmax = QUANTIZED_RANGES[dtype]
    zero_point = int(quantization.zero_point[0])
    if activation == "NONE":
        return qmin, qmax
    low = max(qmin, zero_point)
    if activation == "RELU":
        return low, qmax
    with np.errstate(over="ignore"):
        steps = float(np.rint(_F32(6.0) / _F32(quantization.scale[0])))
    return low, int(min(qmax, zero_point + steps))


def _requantize(acc, scale, zero_point, act_min, act_max, dtype):
    """MlasRequantizeOutput: float32(acc) * scale, clamped, cvtps2dq, plus the zero point;
    then the activation's clamp (within the dtype's range)."""
    qmin, qmax = QUANTIZED_RANGES[dtype]
    values = np.asarray(acc).astype(_F32) * scale
    values = np.clip(values, _F32(qmin - zero_point), _F32(qmax - zero_point))
    return np.clip(_cvtps(values) + zero_point, act_min, act_max).astype(dtype)


def requantize(kind, acc, input_q, filter_q, output_q, act_min, act_max, dtype):
    """QLinearConv and QGemm: the multiplier of each output channel is
    float32(float32(s_in * s_w[c]) / s_out)."""
    s_w = np.broadcast_to(filter_q.scale, (acc.shape[-1],)).astype(_F32)
    multiplier = (_F32(input_q.scale[0]) * s_w) / _F32(output_q.scale[0])
    return _requantize(acc, multiplier, int(output_q.zero_point[0]), act_min, act_max, dtype)


def add(a, a_q, b, b_q, output_q, act_min, act_max, dtype):
    """QLinearAdd (MLAS's AVX2 kernel). With ratios r = float32(s / s_out) and uint8-form
    values: fixed = z_out - fma(r_a, z_a, r_b * z_b), out = fma(a, r_a, fma(b, r_b, fixed)).
    A one-element input takes the kernel's scalar path, the other input as its vector:
    fixed = z_out - fma(r_v, z_v, r_s * z_s), out = fma(v, r_v, fma(s, r_s, fixed)). Any other
    broadcast computes as the general path (ONNX Runtime picks the scalar path wherever its
    innermost axis is broadcast, in whatever layout it chose; onnx_format.write refuses those)."""
    shift = _SHIFT[dtype]
    s_out = _F32(output_q.scale[0])
    z_out = _F32(int(output_q.zero_point[0]) + shift)

    def side(x, q):
        return (np.asarray(x).astype(np.int64) + shift).astype(_F32), \
            _F32(_F32(q.scale[0]) / s_out), _F32(int(q.zero_point[0]) + shift)

    (va, ra, za), (vb, rb, zb) = side(a, a_q), side(b, b_q)
    if va.size == 1 or vb.size == 1:
        # The scalar is input B of the kernel; ONNX Runtime swaps a scalar first input there.
        (vec, r_v, z_v), (sca, r_s, z_s) = ((vb, rb, zb), (va, ra, za)) if va.size == 1 \
            else ((va, ra, za), (vb, rb, zb))
        fixed = _F32(z_out - _fma(r_v, z_v, _F32(r_s * z_s)))
        fixed = _fma(sca.reshape(()), r_s, fixed)
        values = _fma(vec, r_v, fixed)
        values = np.broadcast_to(values, np.broadcast_shapes(va.shape, vb.shape))
    else:
        fixed = _F32(z_out - _fma(ra, za, _F32(rb * zb)))
        va, vb = np.broadcast_arrays(va, vb)
        values = _fma(va, ra, _fma(vb, rb, fixed))
    # cvtps2dq, then packs/packus: saturation to the uint8 range.
    out = np.clip(_cvtps(values), 0, 255) - shift
    return np.clip(out, act_min, act_max).astype(dtype)


def _global_average(sums, count, input_q, output_q, dtype):
    """MlasQLinearGlobalAveragePool on the window sums: (sum - z_in * count) exactly in int32,
    times float32(s_in / float32(s_out * count)), requantized. ONNX Runtime refuses the op
    when that scale is below 2^-32 or from 256 up."""
    scale = _F32(_F32(input_q.scale[0]) / (_F32(output_q.scale[0]) * _F32(count)))
    if not 2.0 ** -32 <= scale < 256.0 or count >= 1 << 24:
        raise ValueError(f"ONNX Runtime's global average pool refuses scale {scale} "
                         f"(s_in / (s_out * {count})) outside [2^-32, 256)")
    acc = sums - int(input_q.zero_point[0]) * count
    qmin, qmax = QUANTIZED_RANGES[dtype]
    return _requantize(acc, scale, int(output_q.zero_point[0]), qmin, qmax, dtype)


def average_pool_2d(x, input_q, output_q, options, act_min, act_max, dtype):
    """QLinearAveragePool: each input dequantized to float32, the window's part inside the
    image summed in order (rows, then columns) from 0.0, divided by float32(count), then
    nearbyint(avg / s_out + z_out) in float32 (uint8 form), clamped. A window covering the
    whole unpadded image takes the global average pool's integer path instead."""
    _, h, w, _ = x.shape
    kh, kw = options["filter_h"], options["filter_w"]
    sh, sw = options["stride_h"], options["stride_w"]
    out_h = integer.output_size(options["padding"], h, kh, sh)
    out_w = integer.output_size(options["padding"], w, kw, sw)
    pad_h = integer.padding_before(h, kh, sh, 1, out_h)
    pad_w = integer.padding_before(w, kw, sw, 1, out_w)
    # ONNX's pads: SAME pads only where a full output grid needs it.
    unpadded = options["padding"] == "VALID" or (
        (out_h - 1) * sh + kh <= h and (out_w - 1) * sw + kw <= w)
    if kh == h and kw == w and unpadded:
        sums = x.astype(np.int64).sum(axis=(1, 2), keepdims=True)
        out = _global_average(sums, h * w, input_q, output_q, dtype)
        return np.clip(out, act_min, act_max).astype(dtype)
    # Zeros around the image add +0.0 to the running sums, which leaves them exactly as they
    # are (they never hold -0.0), so summing the whole window in row order adds the inside
    # elements in ONNX Runtime's order.
    rows = (out_h - 1) * sh + kh
    cols = (out_w - 1) * sw + kw
    real = np.zeros((x.shape[0], max(rows, pad_h + h), max(cols, pad_w + w), x.shape[3]), _F32)
    real[:, pad_h:pad_h + h, pad_w:pad_w + w] = dequantize(x, input_q)
    inside = np.zeros(real.shape[1:3], np.int64)
    inside[pad_h:pad_h + h, pad_w:pad_w + w] = 1
    total = np.zeros((x.shape[0], out_h, out_w, x.shape[3]), _F32)
    counts = np.zeros((out_h, out_w), np.int64)
    for i in range(kh):
        for j in range(kw):
            window = (slice(i, i + (out_h - 1) * sh + 1, sh),
                      slice(j, j + (out_w - 1) * sw + 1, sw))
            total = total + real[(slice(None),) + window]
            counts += inside[window]
    average = total / counts[None, :, :, None].astype(_F32)
    shift = _SHIFT[dtype]
    steps = _cvtps(average / _F32(output_q.scale[0]) + _F32(int(output_q.zero_point[0]) + shift))
    out = np.clip(steps, 0, 255) - shift
    return np.clip(out, act_min, act_max).astype(dtype)


def mean(x, axes, keep_dims, input_q, output_q, dtype):
    """QLinearGlobalAveragePool (MEAN over height and width of NHWC x, the only MEAN
    onnx_format.write exports)."""
    if x.ndim != 4 or tuple(sorted(axes)) != (1, 2):
        raise ValueError(f"MEAN over axes {axes} of a {x.ndim}-D input: ONNX Runtime's form of "
                         f"MEAN is the global average pool over height and width")
    sums = x.astype(np.int64).sum(axis=(1, 2), keepdims=True)
    out = _global_average(sums, x.shape[1] * x.shape[2], input_q, output_q, dtype)
    return out if keep_dims else out.reshape(x.shape[0], x.shape[3])


def _softmax_table(x_scale, depth):
    """QLinearSoftmax's lookup table of exp for the 256 uint8 inputs, in double and stored as
    float32, shifted so that a row of `depth` maxima still sums below FLT_MAX / e^5."""
    x_scale = float(x_scale)
    limit = float(_F32(np.finfo(_F32).max) / _F32(depth))
    # ONNX Runtime takes logf of the float32 limit; the float32-rounded double log equals
    # glibc's logf for every depth below 60594 (20 of the first million differ).
    bit_shift = max(0.0, float(_F32(math.log(limit))) - 5.0) / x_scale
    return np.array([math.exp((i - 255 + bit_shift) * x_scale) for i in range(256)], _F32)


def softmax(x, beta, input_q, output_q, dtype):
    """QLinearSoftmax: the table entry of each uint8-form input, moved so that the row's
    maximum reads entry 255; the entries summed in float32 in order; each output
    nearbyint(entry * floor(1 / s_out) / sum) + z_out, at most 255. ONNX's Softmax has no
    beta: it scales the input scale here (onnx_format.write exports beta 1 only)."""
    shift = _SHIFT[dtype]
    values = x.astype(np.int64) + shift
    table = _softmax_table(_F32(_F32(beta) * _F32(input_q.scale[0])), x.shape[-1])
    entries = table[255 - values.max(axis=-1, keepdims=True) + values]
    # cumsum adds in order, as ONNX Runtime's loop does (sum would pair the terms).
    total = np.cumsum(entries, axis=-1, dtype=_F32)[..., -1]
    y_scale = np.floor(_F32(1.0) / _F32(output_q.scale[0]))
    with np.errstate(over="ignore"):
        quotient = (entries * y_scale) / total[..., None]
    # A one-element row overflows entry * 256 to inf, which ends at the top of the range.
    steps = np.rint(np.minimum(quotient, _F32(1 << 16))).astype(np.int64)
    out = np.minimum(steps + int(output_q.zero_point[0]) + shift, 255)
    return (out - shift).astype(dtype)


def quantize(x, output_q, dtype):
    """MlasQuantizeLinear: x / scale, clamped to the range less the zero point (NaN to the
    bottom: MAXPS returns its second operand), cvtps2dq, plus the zero point."""
    qmin, qmax = QUANTIZED_RANGES[dtype]
    zero_point = int(output_q.zero_point[0])
    with np.errstate(all="ignore"):
        values = np.asarray(x, _F32) / _F32(output_q.scale[0])
    low, high = _F32(qmin - zero_point), _F32(qmax - zero_point)
    values = np.where(np.isnan(values), low, np.minimum(np.maximum(values, low), high))
    return (_cvtps(values) + zero_point).astype(dtype)


def dequantize(x, input_q):
    """DequantizeLinear: float32(q - zero_point) * scale."""
    centered = np.asarray(x).astype(np.int64) - int(input_q.zero_point[0])
    return centered.astype(_F32) * _F32(input_q.scale[0])
