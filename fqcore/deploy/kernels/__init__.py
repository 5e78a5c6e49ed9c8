"""The rounding modes of the reference interpreter and the interface each one provides.

A mode is an object (a module or an instance) with these functions. Integer arrays are numpy
arrays of the tensor's dtype (int8 / uint8) or int64; quantizations are model.Quantization objects
(per tensor unless said otherwise); `dtype` is the output's dtype name, "int8" or "uint8"; act_min
and act_max are the clamp of the fused activation on the output grid. Each returns the output
array in `dtype` (float32 for dequantize).

    activation_range(activation, output_q, dtype) -> (act_min, act_max)
        The clamp of "NONE", "RELU" or "RELU6" on the grid of output_q.
    requantize(kind, acc, input_q, filter_q, output_q, act_min, act_max, dtype)
        CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED (`kind`): int64 accumulators with the bias
        added, channels on the last axis, to the output grid. filter_q is per tensor or per
        output channel.
    add(a, a_q, b, b_q, output_q, act_min, act_max, dtype)
        ADD of two integer arrays (numpy broadcasting).
    average_pool_2d(x, input_q, output_q, options, act_min, act_max, dtype)
        AVERAGE_POOL_2D of x [N, H, W, C]; options as model.OP_OPTIONS lists them.
    mean(x, axes, keep_dims, input_q, output_q, dtype)
        MEAN over `axes` (a tuple of distinct non-negative axes).
    softmax(x, beta, input_q, output_q, dtype)
        SOFTMAX along the last axis.
    quantize(x, output_q, dtype)
        QUANTIZE of float32 x.
    dequantize(x, input_q) -> float32
        DEQUANTIZE of integer x.

Mode-independent arithmetic (padding, accumulation, pooling windows, fixed-point primitives) is
in .integer.
"""
from . import float32_half_even
from .tflite_reference import REFERENCE, SINGLE

MODES = {"tflite_reference": REFERENCE, "single": SINGLE, "float32_half_even": float32_half_even}
