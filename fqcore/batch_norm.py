"""Fused batch norm with TensorFlow's names and semantics (FusedBatchNormV3, FusedBatchNormGradV3):
validation, dtypes, layouts and named-tuple results around the C kernels."""
import math
from collections import namedtuple

import numpy as np

from . import _kernels
from .ops import _array, _attr_float, _flag, _kernel_form

FusedBatchNormV3 = namedtuple(
    "FusedBatchNormV3",
    ["y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2", "reserve_space_3"])
FusedBatchNormGradV3 = namedtuple(
    "FusedBatchNormGradV3",
    ["x_backprop", "scale_backprop", "offset_backprop", "reserve_space_4", "reserve_space_5"])

# data_format -> (rank, channels last?)
_FORMATS = {"NHWC": (4, True), "NCHW": (4, False), "NDHWC": (5, True), "NCDHW": (5, False)}
# Element types with the code the C API knows them by. bfloat16 is ml_dtypes' dtype, known by its
# name (ml_dtypes is optional); the others by dtype, as dtype.name takes microseconds to build.
_DTYPE_CODES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1}
_BFLOAT16_CODE = 2


def _layout(data_format, x):
    """(channels_last, outer, channels, inner) of x in `data_format`."""
    if not isinstance(data_format, str) or data_format not in _FORMATS:
        raise ValueError(f"data_format must be one of {', '.join(_FORMATS)}, got {data_format!r}")
    rank, channels_last = _FORMATS[data_format]
    if x.ndim not in (4, 5):
        raise ValueError(f"input must be 4 or 5-dimensional, got shape {x.shape}")
    if x.ndim != rank:
        raise ValueError(f"data_format {data_format} needs a {rank}-dimensional input, got shape {x.shape}")
    channels = x.shape[-1] if channels_last else x.shape[1]
    spatial = x.shape[1:-1] if channels_last else x.shape[2:]
    return channels_last, x.shape[0], channels, math.prod(spatial)


def _elements(value, name):
    """An element array (x, y_backprop): float32, float16 or bfloat16, native byte order,
    C-contiguous (copied when not), with its dtype code."""
    if not isinstance(value, np.ndarray):
        if isinstance(value, (str, bytes)) or value is None:
            raise TypeError(f"{name} must be a float32, float16 or bfloat16 array, got {type(value).__name__}")
        value = _array(value, name)
    dtype = value.dtype
    code = _DTYPE_CODES.get(dtype)
    if code is None and dtype.name == "bfloat16":
        code = _BFLOAT16_CODE
    if code is None or not dtype.isnative:
        raise TypeError(f"{name} must be a float32, float16 or bfloat16 array (native byte order), "
                        f"got dtype {dtype}")
    return _kernel_form(value), code


def _bytes(array):
    return array.reshape(-1).view(np.uint8)


def _tf_shape(shape):
    """A shape as TF's error messages print it (TensorShape::DebugString): [2,3,3,4]."""
    return "[" + ",".join(map(str, shape)) + "]"


def _per_channel(value, name, channels, required=True, when=None):
    """A float32 vector of one value per channel; when not required, None whatever `value` is
    (TF reads, and so checks, the running statistics only where it uses them). `when` is the
    condition TF's message for a running statistic opens with ("When is_training=false")."""
    if not required:
        return None
    words = f"{name} must have the same number of elements as the channels of x, got"
    if when is not None:
        words = f"{when}, {words}"
    if value is None:
        if when is None:
            raise ValueError(f"{name} is required: expected {channels} values, one per channel")
        # TF's Python wrapper passes a missing statistic as an empty tensor: 0 elements.
        raise ValueError(f"{words} 0 and {channels}; {name} is required: expected {channels} "
                         f"values, one per channel, got None")
    array = _array(value, name)
    if array.ndim != 1 or array.shape[0] != channels:
        raise ValueError(f"{words} {array.size if array.ndim == 1 else array.shape} and {channels}")
    return _kernel_form(array)


def _empty_vector():
    return np.empty(0, np.float32)


def fused_batch_norm(x, scale, offset, mean=None, variance=None, epsilon=1e-4,
                     exponential_avg_factor=1.0, data_format="NHWC", is_training=True,
                     normalize=True):
    """FusedBatchNormV3. Training normalizes with the batch statistics and returns them (batch_mean,
    batch_variance: running estimates, Bessel-corrected and blended by exponential_avg_factor;
    reserve_space_1/2: batch mean and biased variance, for the gradient). Inference normalizes with
    `mean` and `variance`. x: float32, float16 or bfloat16; per-channel values float32.
    normalize=False (training only) returns y as None and skips the pass that makes it: the
    statistics alone, which is all a batch norm folded into its layer needs."""
    x, code = _elements(x, "x")
    channels_last, outer, channels, inner = _layout(data_format, x)
    is_training = _flag(is_training, "is_training")
    epsilon = _attr_float(epsilon, "epsilon")
    factor = _attr_float(exponential_avg_factor, "exponential_avg_factor")
    scale = _per_channel(scale, "scale", channels)
    offset = _per_channel(offset, "offset", channels)
    needs_stats = not is_training or np.float32(factor) != 1
    # TF's message opens with why it reads the statistics; inference's reason wins when both hold.
    when = "When exponential_avg_factor != 1" if is_training else "When is_training=false"
    mean = _per_channel(mean, "mean", channels, needs_stats, when)
    variance = _per_channel(variance, "variance", channels, needs_stats, when)
    normalize = _flag(normalize, "normalize")
    if not normalize and not is_training:
        raise ValueError("normalize=False needs is_training=True: inference returns only y")
    y = np.empty(x.shape, x.dtype) if normalize else None
    if not is_training:
        _kernels.bn_forward_inference(_bytes(x), code, channels_last, outer, channels, inner, scale,
                                      offset, mean, variance, epsilon, _bytes(y))
        return FusedBatchNormV3(y, mean.copy(), variance.copy(), mean.copy(), variance.copy(),
                                np.zeros((), np.float32))
    stats = np.empty((4, channels), np.float32)
    _kernels.bn_forward_training(_bytes(x), code, channels_last, outer, channels, inner, scale,
                                 offset, epsilon, factor,
                                 mean if mean is not None else _empty_vector(),
                                 variance if variance is not None else _empty_vector(),
                                 None if y is None else _bytes(y), stats[0], stats[1], stats[2],
                                 stats[3])
    return FusedBatchNormV3(y, stats[0], stats[1], stats[2], stats[3], np.zeros((), np.float32))


def fused_batch_norm_grad(y_backprop, x, scale, reserve_space_1, reserve_space_2,
                          reserve_space_3=None, epsilon=1e-4, data_format="NHWC", is_training=True):
    """FusedBatchNormGradV3. Training: reserve_space_1/2 are the forward's batch mean and biased
    variance; inference: the population mean and variance. reserve_space_3 is ignored. Every
    data_format works in both modes."""
    del reserve_space_3  # TF's CPU kernel does not read it either
    y_backprop, code = _elements(y_backprop, "y_backprop")
    x, x_code = _elements(x, "x")
    if y_backprop.shape != x.shape:
        raise ValueError(f"x and y_backprop must have same shape, but x has shape "
                         f"{_tf_shape(x.shape)} and y_backprop has shape "
                         f"{_tf_shape(y_backprop.shape)}: got x {x.shape} and y_backprop "
                         f"{y_backprop.shape}")
    if x_code != code:
        raise TypeError(f"x and y_backprop must have the same dtype, got {x.dtype} and {y_backprop.dtype}")
    channels_last, outer, channels, inner = _layout(data_format, x)
    is_training = _flag(is_training, "is_training")
    epsilon = _attr_float(epsilon, "epsilon")
    scale = _per_channel(scale, "scale", channels)
    mean = _per_channel(reserve_space_1, "reserve_space_1", channels)
    variance = _per_channel(reserve_space_2, "reserve_space_2", channels)
    x_backprop = np.empty(x.shape, x.dtype)
    sums = np.empty((2, channels), np.float32)
    _kernels.bn_grad(_bytes(y_backprop), _bytes(x), code, channels_last, outer, channels, inner,
                     scale, mean, variance, epsilon, is_training, _bytes(x_backprop), sums[0], sums[1])
    return FusedBatchNormGradV3(x_backprop, sums[0], sums[1], _empty_vector(), _empty_vector())
