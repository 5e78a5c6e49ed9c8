"""Fused batch norm with TensorFlow's names and semantics (FusedBatchNormV3, FusedBatchNormGradV3):
validation, dtypes, layouts and named-tuple results around the C kernels."""
from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional, Tuple

import numpy as np
import numpy.typing as npt

from . import _kernels
from .ops import _array, _attr_float, _flag, _kernel_form



class FusedBatchNormV3(NamedTuple):
    """The result of :func:`fused_batch_norm`, as TF names FusedBatchNormV3's outputs.

    Attributes
    ----------
    y : numpy.ndarray or None
        The normalized, scaled and offset input, of its shape and dtype (None with
        ``normalize=False``).
    batch_mean, batch_variance : numpy.ndarray
        float32 per channel. Training: the running estimates, the batch's mean and
        Bessel-corrected variance blended into `mean` and `variance` by
        ``exponential_avg_factor``. Inference: copies of `mean` and `variance`.
    reserve_space_1, reserve_space_2 : numpy.ndarray
        float32 per channel, what :func:`fused_batch_norm_grad` takes. Training: the batch mean
        and biased variance. Inference: copies of `mean` and `variance`.
    reserve_space_3 : numpy.ndarray
        An empty float32 scalar, as TF's CPU kernel gives.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> x = np.array([1, 0, 3, 4], np.float32).reshape(2, 1, 1, 2)   # NHWC, 2 channels
    >>> ones, zeros = np.ones(2, np.float32), np.zeros(2, np.float32)
    >>> fwd = fqcore.fused_batch_norm(x, ones, zeros)
    >>> fwd.reserve_space_1, fwd.reserve_space_2
    (array([2., 2.], dtype=float32), array([1., 4.], dtype=float32))
    """

    y: Optional[np.ndarray]
    batch_mean: np.ndarray
    batch_variance: np.ndarray
    reserve_space_1: np.ndarray
    reserve_space_2: np.ndarray
    reserve_space_3: np.ndarray


class FusedBatchNormGradV3(NamedTuple):
    """The result of :func:`fused_batch_norm_grad`, as TF names FusedBatchNormGradV3's outputs.

    Attributes
    ----------
    x_backprop : numpy.ndarray
        The gradient with respect to `x`, of its shape and dtype.
    scale_backprop, offset_backprop : numpy.ndarray
        float32 per channel: the gradients with respect to `scale` and `offset`.
    reserve_space_4, reserve_space_5 : numpy.ndarray
        Empty float32 vectors, as TF's CPU kernel gives.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> x = np.array([1, 0, 3, 4], np.float32).reshape(2, 1, 1, 2)
    >>> ones, zeros = np.ones(2, np.float32), np.zeros(2, np.float32)
    >>> fwd = fqcore.fused_batch_norm(x, ones, zeros)
    >>> grad = fqcore.fused_batch_norm_grad(np.ones_like(x), x, ones, fwd.reserve_space_1,
    ...                                     fwd.reserve_space_2)
    >>> grad.offset_backprop
    array([2., 2.], dtype=float32)
    """

    x_backprop: np.ndarray
    scale_backprop: np.ndarray
    offset_backprop: np.ndarray
    reserve_space_4: np.ndarray
    reserve_space_5: np.ndarray


# data_format -> (rank, channels last?)
_FORMATS = {"NHWC": (4, True), "NCHW": (4, False), "NDHWC": (5, True), "NCDHW": (5, False)}
# Element types with the code the C API knows them by. bfloat16 is ml_dtypes' dtype, known by its
# name (ml_dtypes is optional); the others by dtype, as dtype.name takes microseconds to build.
_DTYPE_CODES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1}
_FLOAT32 = np.dtype(np.float32)
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


def _elements(value: Any, name: str) -> Tuple[np.ndarray, int]:
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


def _tf_shape(shape):
    """A shape as TF's error messages print it (TensorShape::DebugString): [2,3,3,4]."""
    return "[" + ",".join(map(str, shape)) + "]"


def _per_channel(value, name, channels, required=True, when=None):
    """A float32 vector of one value per channel; when not required, None whatever `value` is
    (TF reads, and so checks, the running statistics only where it uses them). `when` is the
    condition TF's message for a running statistic opens with ("When is_training=false")."""
    if not required:
        return None
    if value is None:
        if when is None:
            raise ValueError(f"{name} is required: expected {channels} values, one per channel")
        # TF's Python wrapper passes a missing statistic as an empty tensor: 0 elements.
        raise ValueError(f"{_size_words(name, when)} 0 and {channels}; {name} is required: "
                         f"expected {channels} values, one per channel, got None")
    array = _array(value, name)
    if array.ndim != 1 or array.shape[0] != channels:
        raise ValueError(f"{_size_words(name, when)} "
                         f"{array.size if array.ndim == 1 else array.shape} and {channels}")
    return _kernel_form(array)


def _size_words(name, when):
    """TF's words for a per-channel value of the wrong size, up to the sizes."""
    words = f"{name} must have the same number of elements as the channels of x, got"
    return words if when is None else f"{when}, {words}"


def _empty_vector():
    return np.empty(0, np.float32)


# The running statistics the training forward does not read (exponential_avg_factor 1), passed as
# empty vectors: one read-only array for every call.
_NO_STATISTICS = _empty_vector()
_NO_STATISTICS.flags.writeable = False


def fused_batch_norm(x: npt.ArrayLike, scale: npt.ArrayLike, offset: npt.ArrayLike,
                     mean: Optional[npt.ArrayLike] = None, variance: Optional[npt.ArrayLike] = None,
                     epsilon: float = 1e-4, exponential_avg_factor: float = 1.0,
                     data_format: str = "NHWC", is_training: bool = True,
                     normalize: bool = True) -> FusedBatchNormV3:
    """FusedBatchNormV3: batch normalization, with the batch statistics (training) or given ones.

    TF 2.21's CPU semantics. Statistics are float64 sums taken about each channel's first value,
    in one fixed order, so every ISA and thread count gives the same bits; the per-channel
    ``1/sqrt`` is correctly rounded. float16 and bfloat16 are computed in float32 and rounded
    once.

    Parameters
    ----------
    x : array_like
        float32, float16 or bfloat16 (``ml_dtypes.bfloat16``), rank 4 or 5 as `data_format` says.
    scale, offset : array_like
        float32, one value per channel: the learned multiplier and shift.
    mean, variance : array_like, optional
        float32 per channel: the population statistics. Needed for inference, and in training
        when ``exponential_avg_factor != 1`` (the running estimates to blend into).
    epsilon : float, default 1e-4
        Added to the variance before its square root.
    exponential_avg_factor : float, default 1.0
        Training: the weight of this batch in the returned running estimates (1: the batch's
        alone).
    data_format : {"NHWC", "NCHW", "NDHWC", "NCDHW"}, default "NHWC"
        Where the channels are.
    is_training : bool, default True
        Normalize with the batch's statistics (True) or with `mean` and `variance` (False).
    normalize : bool, default True
        False (training only) skips the pass that makes `y` and returns it as None: the
        statistics alone, which is all a batch norm folded into its layer needs.

    Returns
    -------
    FusedBatchNormV3
        ``(y, batch_mean, batch_variance, reserve_space_1, reserve_space_2, reserve_space_3)``.

    Raises
    ------
    TypeError
        `x` of another dtype, a per-channel value that is not float32, a flag that is not a bool.
    ValueError
        An unknown `data_format`, `x` of the wrong rank, a per-channel value of the wrong size, a
        missing `mean` / `variance` where they are needed (TF's words), ``normalize=False`` with
        ``is_training=False``.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> x = np.array([1, 0, 3, 4], np.float32).reshape(2, 1, 1, 2)   # NHWC, 2 channels
    >>> ones, zeros = np.ones(2, np.float32), np.zeros(2, np.float32)
    >>> fwd = fqcore.fused_batch_norm(x, ones, zeros, epsilon=1e-3)
    >>> fwd.y.reshape(2, 2).round(3)
    array([[-1., -1.],
           [ 1.,  1.]], dtype=float32)
    >>> fwd.batch_mean, fwd.batch_variance         # variance Bessel-corrected: 2 samples
    (array([2., 2.], dtype=float32), array([2., 8.], dtype=float32))

    Inference, with population statistics:

    >>> mean, variance = np.array([2, 2], np.float32), np.array([4, 16], np.float32)
    >>> y = fqcore.fused_batch_norm(x, ones, zeros, mean, variance, is_training=False).y
    >>> y.reshape(2, 2).round(2)
    array([[-0.5, -0.5],
           [ 0.5,  0.5]], dtype=float32)
    """
    x, code = _elements(x, "x")
    channels_last, outer, channels, inner = _layout(data_format, x)
    is_training = _flag(is_training, "is_training")
    epsilon = _attr_float(epsilon, "epsilon")
    factor = _attr_float(exponential_avg_factor, "exponential_avg_factor")
    scale = _per_channel(scale, "scale", channels)
    offset = _per_channel(offset, "offset", channels)
    # The attribute is a float32, as in TF: a factor that rounds to 1 is 1. Exactly 1.0, the default,
    # skips the rounding (0.2 us of a small call).
    needs_stats = not is_training or (factor != 1.0 and np.float32(factor) != 1)
    # TF's message opens with why it reads the statistics; inference's reason wins when both hold.
    when = "When exponential_avg_factor != 1" if is_training else "When is_training=false"
    mean = _per_channel(mean, "mean", channels, needs_stats, when)
    variance = _per_channel(variance, "variance", channels, needs_stats, when)
    normalize = _flag(normalize, "normalize")
    if not normalize and not is_training:
        raise ValueError("normalize=False needs is_training=True: inference returns only y")
    y = np.empty(x.shape, x.dtype) if normalize else None
    if not is_training:
        _kernels.bn_forward_inference(x, code, channels_last, outer, channels, inner, scale,
                                      offset, mean, variance, epsilon, y)
        return FusedBatchNormV3(y, np.copy(mean), np.copy(variance), np.copy(mean),
                                np.copy(variance), np.zeros((), np.float32))
    stats = np.empty((4, channels), np.float32)
    _kernels.bn_forward_training(x, code, channels_last, outer, channels, inner, scale,
                                 offset, epsilon, factor,
                                 mean if mean is not None else _NO_STATISTICS,
                                 variance if variance is not None else _NO_STATISTICS,
                                 y, stats[0], stats[1], stats[2],
                                 stats[3])
    return FusedBatchNormV3(y, stats[0], stats[1], stats[2], stats[3], np.zeros((), np.float32))


# fused_batch_norm's training statistics of an NHWC float32 x without its checks, or None where the
# arrays are not as the kernel reads them (the binding's docstring says which): what a training
# graph's folded batch norms take every step (fqcore/graph/fusion.py's BatchNormStatistics).
nhwc_float32_statistics = _kernels.bn_statistics_nhwc


def fused_batch_norm_grad(y_backprop: npt.ArrayLike, x: npt.ArrayLike, scale: npt.ArrayLike,
                          reserve_space_1: npt.ArrayLike, reserve_space_2: npt.ArrayLike,
                          reserve_space_3: Optional[npt.ArrayLike] = None, epsilon: float = 1e-4,
                          data_format: str = "NHWC",
                          is_training: bool = True) -> FusedBatchNormGradV3:
    """FusedBatchNormGradV3: the gradients of :func:`fused_batch_norm` with respect to `x`,
    `scale` and `offset`.

    Every `data_format` works in both modes (TF's raw op refuses NCHW for inference).

    Parameters
    ----------
    y_backprop : array_like
        The gradient flowing back into `y`: the shape and dtype of `x`.
    x : array_like
        The forward's input: float32, float16 or bfloat16, rank 4 or 5.
    scale : array_like
        float32 per channel, the forward's `scale`.
    reserve_space_1, reserve_space_2 : array_like
        float32 per channel. Training: the forward's ``reserve_space_1`` and ``reserve_space_2``
        (batch mean and biased variance). Inference: the population mean and variance.
    reserve_space_3 : optional
        Ignored, as TF's CPU kernel ignores it.
    epsilon : float, default 1e-4
        The forward's `epsilon`.
    data_format : {"NHWC", "NCHW", "NDHWC", "NCDHW"}, default "NHWC"
        Where the channels are.
    is_training : bool, default True
        Whether the forward normalized with batch statistics.

    Returns
    -------
    FusedBatchNormGradV3
        ``(x_backprop, scale_backprop, offset_backprop, reserve_space_4, reserve_space_5)``.

    Raises
    ------
    TypeError
        `x` or `y_backprop` of another dtype or of different dtypes, a per-channel value that is
        not float32, a flag that is not a bool.
    ValueError
        `x` and `y_backprop` of different shapes (TF's words), an unknown `data_format`, the
        wrong rank, a per-channel value of the wrong size.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> x = np.array([1, 0, 3, 4], np.float32).reshape(2, 1, 1, 2)
    >>> ones, zeros = np.ones(2, np.float32), np.zeros(2, np.float32)
    >>> fwd = fqcore.fused_batch_norm(x, ones, zeros)
    >>> grad = fqcore.fused_batch_norm_grad(np.ones_like(x), x, ones, fwd.reserve_space_1,
    ...                                     fwd.reserve_space_2)
    >>> grad.x_backprop.ravel()        # a constant gradient is removed by the mean
    array([0., 0., 0., 0.], dtype=float32)
    >>> grad.offset_backprop           # the sum of y_backprop per channel
    array([2., 2.], dtype=float32)
    """
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
    _kernels.bn_grad(y_backprop, x, code, channels_last, outer, channels, inner,
                     scale, mean, variance, epsilon, is_training, x_backprop, sums[0], sums[1])
    return FusedBatchNormGradV3(x_backprop, sums[0], sums[1], _empty_vector(), _empty_vector())
