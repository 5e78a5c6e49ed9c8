"""ONNX Runtime's and XNNPACK's arithmetic, a first version: layers requantize in float32
(acc * float32(float32(s_in * s_w[c]) / s_out)), everything else dequantizes to float32, computes,
and quantizes back; every rounding is to nearest even."""
import numpy as np

from . import integer
from .integer import DTYPE_RANGES

_F32 = np.float32
activation_range = integer.activation_range


def _to_grid(values, quantization, lo, hi, dtype):
    """float32 values on the output grid: round half to even, plus the zero point, clamped."""
    steps = np.rint(values.astype(_F32))
    return np.clip(steps + _F32(quantization.zero_point[0]), lo, hi).astype(dtype)


def requantize(kind, acc, input_q, filter_q, output_q, act_min, act_max, dtype):
    """float32(acc) times the float32 multiplier of each output channel."""
    s_w = np.broadcast_to(filter_q.scale, (acc.shape[-1],)).astype(_F32)
    multiplier = (_F32(input_q.scale[0]) * s_w) / _F32(output_q.scale[0])
    return _to_grid(acc.astype(_F32) * multiplier, output_q, act_min, act_max, dtype)


def add(a, a_q, b, b_q, output_q, act_min, act_max, dtype):
    total = dequantize(a, a_q) + dequantize(b, b_q)
    return _to_grid(total / _F32(output_q.scale[0]), output_q, act_min, act_max, dtype)


def average_pool_2d(x, input_q, output_q, options, act_min, act_max, dtype):
    sums, counts = integer.window_sums(dequantize(x, input_q), options)
    average = sums.astype(_F32) / counts[None, :, :, None].astype(_F32)
    return _to_grid(average / _F32(output_q.scale[0]), output_q, act_min, act_max, dtype)


def mean(x, axes, keep_dims, input_q, output_q, dtype):
    average = np.mean(dequantize(x, input_q), axis=axes, keepdims=keep_dims, dtype=_F32)
    return _to_grid(average / _F32(output_q.scale[0]), output_q, *DTYPE_RANGES[dtype], dtype)


def softmax(x, beta, input_q, output_q, dtype):
    logits = dequantize(x, input_q) * _F32(beta)
    exps = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probabilities = exps / exps.sum(axis=-1, keepdims=True, dtype=_F32)
    return _to_grid(probabilities / _F32(output_q.scale[0]), output_q, *DTYPE_RANGES[dtype],
                    dtype)


def quantize(x, output_q, dtype):
    """QuantizeLinear: saturate(round_half_even(x / scale) + zero_point)."""
    with np.errstate(invalid="ignore"):
        return _to_grid(x.astype(_F32) / _F32(output_q.scale[0]), output_q,
                        *DTYPE_RANGES[dtype], dtype)


def dequantize(x, input_q):
    """DequantizeLinear: (q - zero_point) * scale in float32."""
    return (x.astype(_F32) - _F32(input_q.zero_point[0])) * _F32(input_q.scale[0])
