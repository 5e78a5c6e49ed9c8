"""The numpy API with TensorFlow's op names: validation, dtypes, shapes, out= buffers, named tuples."""
from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple, Optional, Tuple

import numpy as np
import numpy.typing as npt

from . import _kernels



class FakeQuantWithMinMaxVarsGradient(NamedTuple):
    """The result of :func:`fake_quant_with_min_max_vars_gradient`, as TF names its outputs.

    Attributes
    ----------
    backprops_wrt_input : numpy.ndarray
        float32, the shape of the inputs: the incoming gradients where the inputs lie in the
        nudged range, 0 elsewhere.
    backprop_wrt_min : numpy.float32
        The sum of the incoming gradients where the inputs lie below the nudged range.
    backprop_wrt_max : numpy.float32
        The sum of the incoming gradients where the inputs lie above the nudged range.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> x = np.array([-3.0, 0.4, 300.0], np.float32)
    >>> grad = fqcore.fake_quant_with_min_max_vars_gradient(np.ones(3, np.float32), x, 0.0, 255.0)
    >>> grad.backprops_wrt_input
    array([0., 1., 0.], dtype=float32)
    >>> float(grad.backprop_wrt_min), float(grad.backprop_wrt_max)
    (1.0, 1.0)
    """

    backprops_wrt_input: np.ndarray
    backprop_wrt_min: np.float32
    backprop_wrt_max: np.float32


class FakeQuantWithMinMaxVarsPerChannelGradient(NamedTuple):
    """The result of :func:`fake_quant_with_min_max_vars_per_channel_gradient`, as TF names its
    outputs.

    Attributes
    ----------
    backprops_wrt_input : numpy.ndarray
        float32, the shape of the inputs: the incoming gradients where the inputs lie in their
        channel's nudged range, 0 elsewhere.
    backprop_wrt_min : numpy.ndarray
        float32, one per channel: the sum of the channel's incoming gradients where its inputs lie
        below its nudged range.
    backprop_wrt_max : numpy.ndarray
        float32, one per channel: the same above the range.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> x = np.array([[-1.0, 2.0], [9.0, 7.0]], np.float32)
    >>> lo, hi = np.zeros(2, np.float32), np.array([3.0, 6.0], np.float32)
    >>> grad = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(np.ones_like(x), x, lo, hi)
    >>> grad.backprops_wrt_input
    array([[0., 1.],
           [0., 0.]], dtype=float32)
    >>> grad.backprop_wrt_min, grad.backprop_wrt_max
    (array([1., 0.], dtype=float32), array([1., 1.], dtype=float32))
    """

    backprops_wrt_input: np.ndarray
    backprop_wrt_min: np.ndarray
    backprop_wrt_max: np.ndarray


_FLOAT32 = np.dtype(np.float32)
# A named tuple from a plain one without the generated __new__'s argument parsing (~0.1 us less).
_as_tuple = tuple.__new__
_SMALLEST_NORMAL = float(np.finfo(np.float32).tiny)
# Scalars that convert to a Python float exactly, as they are: the fast path of a range (a numpy
# array's min() is a np.float32; the general path costs microseconds a call, more than a small
# kernel). The bindings take the same types.
_EXACT_FLOATS = _kernels.EXACT_FLOATS


def _array(value: Any, name: str) -> np.ndarray:
    """`value` as a float32 ndarray; arrays of another dtype are refused rather than cast."""
    if type(value) is np.ndarray and value.dtype == _FLOAT32:
        return value
    if not isinstance(value, np.ndarray):
        if isinstance(value, (str, bytes)) or value is None:
            raise TypeError(f"{name} must be a float32 array, got {type(value).__name__}")
        try:
            converted = np.asarray(value)
        except Exception as error:  # ragged nested sequences and other non-arrays
            raise TypeError(f"{name} must be a float32 array: {error}") from None
        if converted.dtype.kind not in "fiu":
            raise TypeError(f"{name} must be a float32 array, got elements of dtype {converted.dtype}")
        value = converted.astype(np.float32)
    elif value.dtype != _FLOAT32:
        raise TypeError(f"{name} must be a float32 array (native byte order), got dtype {value.dtype}")
    return value


def _in_kernel_form(array):
    """Whether `array` (an ndarray) is C-contiguous and aligned, as the kernels read arrays: C
    compilers may assume float pointers are 4-byte aligned."""
    flags = array.flags
    return flags.c_contiguous and flags.aligned


def _kernel_form(array):
    """`array` when in the kernels' form (_in_kernel_form), else a copy that is."""
    if _in_kernel_form(array):
        return array
    return np.array(array, order="C")


def _flat(array):
    """A 1-D view (or, when the layout needs it, a copy) of `array` in the kernels' form."""
    return _kernel_form(array).ravel()


def _output(out, shape, inputs):
    """The result buffer, `out` after checks or a new array, and the inputs that overlap it."""
    if out is None:
        return np.empty(shape, _FLOAT32), ()
    if not isinstance(out, np.ndarray) or out.dtype != _FLOAT32:
        raise TypeError(f"out must be a float32 ndarray, got {getattr(out, 'dtype', type(out).__name__)}")
    if out.shape != shape:
        raise ValueError(f"out has shape {out.shape}, expected {shape}")
    flags = out.flags
    if not (flags.c_contiguous and flags.writeable and flags.aligned):
        lacking = [what for ok, what in ((flags.writeable, "writeable"), (flags.aligned, "aligned"),
                                         (flags.c_contiguous, "C-contiguous")) if not ok]
        raise ValueError(f"out must be a writeable, aligned, C-contiguous array; this one (shape "
                         f"{out.shape}, strides {out.strides}) is not {' and not '.join(lacking)}")
    # Two distinct arrays that own their data never overlap; that test is cheap, the other is not.
    return out, [a for a in inputs if a is not out and (a.base is not None or out.base is not None)
                 and np.may_share_memory(a, out)]


def _prepare(out, inputs, gradients=None):
    """The result buffer (checked `out`, or new) and the validated input arrays in the kernels'
    form (gradients first, when given). An input that partly overlaps `out` is copied; one that
    *is* out is safe to overwrite."""
    arrays = (inputs,) if gradients is None else (gradients, inputs)
    result, overlapping = _output(out, inputs.shape, arrays)
    ready = [_kernel_form(a) for a in arrays]
    if overlapping:
        ready = [a.copy() if any(np.may_share_memory(a, o) for o in overlapping) else a for a in ready]
    return result, ready


def _ran(result):
    """The result of a kernel binding called with arguments the general path prepared, which
    are in the kernels' form by construction."""
    if result is None:
        raise RuntimeError("fqcore internal error: prepared arguments were refused by the kernel "
                           "binding")
    return result


def _num_bits(num_bits):
    if type(num_bits) is int and 2 <= num_bits <= 16:
        return num_bits
    if isinstance(num_bits, bool) or not isinstance(num_bits, numbers.Integral):
        raise TypeError(f"num_bits must be an int, got {num_bits!r}")
    if not 2 <= num_bits <= 16:
        raise ValueError(f"num_bits must be between 2 and 16, inclusive, got {num_bits}")
    return int(num_bits)


def _flag(value, name):
    if value is True or value is False:
        return value
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def _attr_float(value, name):
    """An Args attr; a Python float goes to C as it is (C rounds it to float32 once)."""
    if type(value) in _EXACT_FLOATS:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {value!r}")
    return _to_float32(value, name)


def _to_float32(value, name):
    """A real number rounded to float32, as a Python float (beyond float32: infinite, as TF's
    float attrs hold it); an int too large for any float is refused, named."""
    try:
        with np.errstate(over="ignore"):
            return float(np.float32(value))
    except OverflowError:
        raise ValueError(f"{name} is an int too large for a float ({int(value).bit_length()} "
                         f"bits)") from None


def _tf_str(value):
    """A float32 printed as TF's error messages print it: 2, -0, 0.1, nan."""
    text = str(np.float32(value))
    return text[:-2] if text.endswith(".0") else text


def _flush(value):
    """TF's CPU threads treat denormals as zero: the sign survives, the magnitude does not."""
    return math.copysign(0.0, value) if abs(value) < _SMALLEST_NORMAL else value


def _range_error(min, max):
    """TF's message for an Args range that is not ordered (C found it so; here it is worded)."""
    with np.errstate(over="ignore"):  # a float64 beyond float32 is inf, as TF's float attr holds it
        lo, hi = _flush(float(np.float32(min))), _flush(float(np.float32(max)))
    return ValueError(f"min has to be smaller than max, was: {_tf_str(lo)} >= {_tf_str(hi)}")


def _scalar(value, name):
    """A Vars min/max: a Python real or a 0-d float32 array, as a Python float (C rounds it to
    float32 once)."""
    if type(value) in _EXACT_FLOATS:
        return float(value)
    if type(value) is np.ndarray and value.shape == () and value.dtype == _FLOAT32:
        return float(value)
    if isinstance(value, (list, tuple)):  # a sequence has a rank, as TF's tensor of it has
        try:
            value = np.asarray(value)
        except ValueError:  # ragged
            raise TypeError(f"`{name}` must be a float32 scalar, got {value!r}") from None
    if isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise ValueError(f"`{name}` must be rank 0 but is rank {value.ndim}")
        if value.dtype != _FLOAT32:
            raise TypeError(f"`{name}` must be float32, got dtype {value.dtype}")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be a float32 scalar, got {value!r}")
    return _to_float32(value, f"`{name}`")


def _gradient_inputs(gradients: Any, inputs: Any) -> Tuple[np.ndarray, np.ndarray]:
    """Both arrays of a gradient op, validated, of one shape."""
    gradients, inputs = _array(gradients, "gradients"), _array(inputs, "inputs")
    if gradients.shape != inputs.shape:
        raise ValueError(f"gradients and inputs must have the same shape, got gradients "
                         f"{gradients.shape} and inputs {inputs.shape}")
    return gradients, inputs


def _channel_range(value, name, channels):
    if type(value) is np.ndarray and value.dtype == _FLOAT32 and value.shape == (channels,):
        flags = value.flags
        if flags.c_contiguous and flags.aligned:
            return value
    array = _array(value, name)
    if array.ndim != 1:
        raise ValueError(f"{name} must be rank 1 but is rank {array.ndim}")
    if array.shape[0] != channels:
        raise ValueError(f"{name} has incorrect size, expected {channels} was {array.shape[0]}")
    return _kernel_form(array)


def _channel_ranges(inputs, min, max):
    """The per-channel min and max for `inputs`, whose last dimension holds the channels."""
    if inputs.ndim == 0:  # TF's words first (its shape function), then which array and why
        raise ValueError(f"inputs must be at least rank 1, got shape {inputs.shape}: per-channel "
                         f"quantization takes its channels from the last dimension")
    channels = inputs.shape[-1]
    return _channel_range(min, "min", channels), _channel_range(max, "max", channels)


def _args_range(inputs, min, max):
    return _attr_float(min, "min"), _attr_float(max, "max")


def _vars_range(inputs, min, max):
    return _scalar(min, "min"), _scalar(max, "max")


# Each op first hands its arguments to the kernel binding as they are, which runs when they already
# are in the kernels' form (the common call); otherwise the general path validates, converts and
# copies (`ranges` checks min and max), then calls the binding again.

def _forward(kernel, ranges, inputs, min, max, num_bits, narrow_range, out):
    result = kernel(inputs, min, max, num_bits, narrow_range, out)
    if result is None:
        inputs = _array(inputs, "inputs")
        min, max = ranges(inputs, min, max)
        num_bits, narrow_range = _num_bits(num_bits), _flag(narrow_range, "narrow_range")
        out, (x,) = _prepare(out, inputs)
        result = _ran(kernel(x, min, max, num_bits, narrow_range, out))
    if result is False:
        raise _range_error(min, max)
    return result


def _gradient(kernel, ranges, gradients, inputs, min, max, num_bits, narrow_range, out):
    result = kernel(gradients, inputs, min, max, num_bits, narrow_range, out)
    if result is None:
        gradients, inputs = _gradient_inputs(gradients, inputs)
        min, max = ranges(inputs, min, max)
        num_bits, narrow_range = _num_bits(num_bits), _flag(narrow_range, "narrow_range")
        out, (g, x) = _prepare(out, inputs, gradients)
        result = _ran(kernel(g, x, min, max, num_bits, narrow_range, out))
    if result is False:
        raise _range_error(min, max)
    return result


def fake_quant_with_min_max_args(inputs: npt.ArrayLike, min: float = -6.0, max: float = 6.0,
                                 num_bits: int = 8, narrow_range: bool = False, *,
                                 out: Optional[np.ndarray] = None) -> np.ndarray:
    """FakeQuantWithMinMaxArgs: fake-quantize `inputs` to the grid of a fixed range [min, max].

    The quantization step is an attribute of the op, so TF multiplies by its inverse; fqcore does
    the same.

    Parameters
    ----------
    inputs : array_like
        float32, any shape and layout (non-contiguous views are copied first). Lists are
        converted; arrays of another dtype are refused (TypeError), never cast.
    min, max : float
        The fixed range, default [-6, 6] (TF attributes, rounded to float32). It is nudged so that 0.0 is a grid
        point, as TF does.
    num_bits : int, default 8
        Bits of the quantization grid, 2 to 16: ``2**num_bits`` levels.
    narrow_range : bool, default False
        Use ``2**num_bits - 1`` levels, leaving out the lowest (as symmetric int8 weights do).
    out : numpy.ndarray, optional
        A writeable, aligned, C-contiguous float32 array of the inputs' shape to hold the result
        (it may be `inputs` itself); inputs are never modified otherwise.

    Returns
    -------
    numpy.ndarray
        float32, the shape of `inputs` (`out` when given): each element clamped to the nudged range
        and rounded to the nearest grid point, halves upward, as TF computes it bit for bit.

    Raises
    ------
    TypeError
        An array that is not float32, `num_bits` not an int, `narrow_range` not a bool, `out` not a
        float32 array.
    ValueError
        `num_bits` outside 2 to 16, an `out` of another shape or layout, or ``min >= max``, in TF's
        words (``min has to be smaller than max, was: 1 >= 1``).

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> x = np.array([-3.0, 0.4, 0.5, 1.7, 300.0], np.float32)
    >>> fqcore.fake_quant_with_min_max_args(x, min=0.0, max=255.0)
    array([  0.,   0.,   1.,   2., 255.], dtype=float32)
    >>> fqcore.fake_quant_with_min_max_args(x, min=0.0, max=3.0, num_bits=2)
    array([0., 0., 1., 2., 3.], dtype=float32)
    """
    return _forward(_kernels.args_forward, _args_range, inputs, min, max, num_bits, narrow_range,
                    out)


def fake_quant_with_min_max_args_gradient(gradients: npt.ArrayLike, inputs: npt.ArrayLike,
                                          min: float = -6.0, max: float = 6.0, num_bits: int = 8,
                                          narrow_range: bool = False, *,
                                          out: Optional[np.ndarray] = None) -> np.ndarray:
    """FakeQuantWithMinMaxArgsGradient: `gradients` where `inputs` lie in the nudged range, else 0.

    The straight-through estimator of :func:`fake_quant_with_min_max_args`.

    Parameters
    ----------
    gradients : array_like
        float32, the shape of `inputs`: the gradients flowing back into the op's output.
    inputs : array_like
        float32, any shape and layout (non-contiguous views are copied first). Lists are
        converted; arrays of another dtype are refused (TypeError), never cast.
    min, max : float
        The fixed range, default [-6, 6] (TF attributes, rounded to float32). It is nudged so that 0.0 is a grid
        point, as TF does.
    num_bits : int, default 8
        Bits of the quantization grid, 2 to 16: ``2**num_bits`` levels.
    narrow_range : bool, default False
        Use ``2**num_bits - 1`` levels, leaving out the lowest (as symmetric int8 weights do).
    out : numpy.ndarray, optional
        A writeable, aligned, C-contiguous float32 array of the inputs' shape to hold the result
        (it may be `inputs` itself); inputs are never modified otherwise.

    Returns
    -------
    numpy.ndarray
        float32, the shape of `inputs` (`out` when given).

    Raises
    ------
    TypeError
        An array that is not float32, `num_bits` not an int, `narrow_range` not a bool, `out` not a
        float32 array.
    ValueError
        `num_bits` outside 2 to 16, an `out` of another shape or layout, `gradients` and `inputs`
        of different shapes, or ``min >= max`` (TF's message).

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> x = np.array([-3.0, 0.4, 300.0], np.float32)
    >>> fqcore.fake_quant_with_min_max_args_gradient(np.ones(3, np.float32), x, min=0.0, max=255.0)
    array([0., 1., 0.], dtype=float32)
    """
    return _gradient(_kernels.args_grad, _args_range, gradients, inputs, min, max, num_bits,
                     narrow_range, out)


def fake_quant_with_min_max_vars(inputs: npt.ArrayLike, min: npt.ArrayLike, max: npt.ArrayLike,
                                 num_bits: int = 8, narrow_range: bool = False, *,
                                 out: Optional[np.ndarray] = None) -> np.ndarray:
    """FakeQuantWithMinMaxVars: fake-quantize `inputs` to the range held by scalars min and max.

    The range is data (TF variables, which training updates), given as two scalars.

    Parameters
    ----------
    inputs : array_like
        float32, any shape and layout (non-contiguous views are copied first). Lists are
        converted; arrays of another dtype are refused (TypeError), never cast.
    min, max : float or 0-d float32 array
        The range (TF variables). It is nudged so that 0.0 is a grid point, as TF does;
        ``min > max`` and ``min == max`` follow TF (a NaN output for ``min == max``).
    num_bits : int, default 8
        Bits of the quantization grid, 2 to 16: ``2**num_bits`` levels.
    narrow_range : bool, default False
        Use ``2**num_bits - 1`` levels, leaving out the lowest (as symmetric int8 weights do).
    out : numpy.ndarray, optional
        A writeable, aligned, C-contiguous float32 array of the inputs' shape to hold the result
        (it may be `inputs` itself); inputs are never modified otherwise.

    Returns
    -------
    numpy.ndarray
        float32, the shape of `inputs` (`out` when given): each element clamped to the nudged range
        and rounded to the nearest grid point, halves upward, as TF computes it bit for bit.

    Raises
    ------
    TypeError
        An array that is not float32, `num_bits` not an int, `narrow_range` not a bool, `out` not a
        float32 array.
    ValueError
        `num_bits` outside 2 to 16, an `out` of another shape or layout, or a `min` or `max` that
        is not a scalar (TF's ``must be rank 0`` message).

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> x = np.array([-3.0, 0.4, 0.5, 1.7, 300.0], np.float32)
    >>> fqcore.fake_quant_with_min_max_vars(x, 0.0, 255.0)
    array([  0.,   0.,   1.,   2., 255.], dtype=float32)
    >>> out = np.empty_like(x)
    >>> fqcore.fake_quant_with_min_max_vars(x, 0.0, 3.0, num_bits=2, out=out) is out
    True
    >>> out
    array([0., 0., 1., 2., 3.], dtype=float32)
    """
    return _forward(_kernels.vars_forward, _vars_range, inputs, min, max, num_bits, narrow_range,
                    out)


def fake_quant_with_min_max_vars_gradient(gradients: npt.ArrayLike, inputs: npt.ArrayLike,
                                          min: npt.ArrayLike, max: npt.ArrayLike,
                                          num_bits: int = 8, narrow_range: bool = False, *,
                                          out: Optional[np.ndarray] = None
                                          ) -> FakeQuantWithMinMaxVarsGradient:
    """FakeQuantWithMinMaxVarsGradient, fused: the input gradient and both range gradients in one
    pass.

    The range gradients are sums in a fixed order: the same bits on every ISA and thread count.

    Parameters
    ----------
    gradients : array_like
        float32, the shape of `inputs`: the gradients flowing back into the op's output.
    inputs : array_like
        float32, any shape and layout (non-contiguous views are copied first). Lists are
        converted; arrays of another dtype are refused (TypeError), never cast.
    min, max : float or 0-d float32 array
        The range (TF variables). It is nudged so that 0.0 is a grid point, as TF does;
        ``min > max`` and ``min == max`` follow TF (a NaN output for ``min == max``).
    num_bits : int, default 8
        Bits of the quantization grid, 2 to 16: ``2**num_bits`` levels.
    narrow_range : bool, default False
        Use ``2**num_bits - 1`` levels, leaving out the lowest (as symmetric int8 weights do).
    out : numpy.ndarray, optional
        A writeable, aligned, C-contiguous float32 array of the inputs' shape to hold
        `backprops_wrt_input` (it may be `inputs` itself); inputs are never modified otherwise.

    Returns
    -------
    FakeQuantWithMinMaxVarsGradient
        ``(backprops_wrt_input, backprop_wrt_min, backprop_wrt_max)``; the two sums are numpy
        float32 scalars, as TF's 0-d tensors give.

    Raises
    ------
    TypeError
        An array that is not float32, `num_bits` not an int, `narrow_range` not a bool, `out` not a
        float32 array.
    ValueError
        `num_bits` outside 2 to 16, an `out` of another shape or layout, `gradients` and `inputs`
        of different shapes, or a `min` or `max` that is not a scalar.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> x = np.array([-3.0, 0.4, 256.0, 300.0], np.float32)
    >>> dx, dmin, dmax = fqcore.fake_quant_with_min_max_vars_gradient(
    ...     np.ones(4, np.float32), x, 0.0, 255.0)
    >>> dx
    array([0., 1., 0., 0.], dtype=float32)
    >>> float(dmin), float(dmax)
    (1.0, 2.0)
    """
    return _as_tuple(FakeQuantWithMinMaxVarsGradient,
                     _gradient(_kernels.vars_grad, _vars_range, gradients, inputs, min, max,
                               num_bits, narrow_range, out))


def fake_quant_with_min_max_vars_per_channel(inputs: npt.ArrayLike, min: npt.ArrayLike,
                                             max: npt.ArrayLike, num_bits: int = 8,
                                             narrow_range: bool = False, *,
                                             out: Optional[np.ndarray] = None) -> np.ndarray:
    """FakeQuantWithMinMaxVarsPerChannel: one range per channel of the last dimension.

    For a convolution kernel ``[height, width, in, out]`` the channels are the output channels.

    Parameters
    ----------
    inputs : array_like
        float32, at least rank 1 (the last dimension holds the channels), any shape and layout
        (non-contiguous views are copied first). Lists are converted; arrays of another dtype are
        refused (TypeError), never cast.
    min, max : array_like
        float32, one value per channel of the last dimension of `inputs`: each channel's range,
        nudged as for :func:`fake_quant_with_min_max_vars`.
    num_bits : int, default 8
        Bits of the quantization grid, 2 to 16: ``2**num_bits`` levels.
    narrow_range : bool, default False
        Use ``2**num_bits - 1`` levels, leaving out the lowest (as symmetric int8 weights do).
    out : numpy.ndarray, optional
        A writeable, aligned, C-contiguous float32 array of the inputs' shape to hold the result
        (it may be `inputs` itself); inputs are never modified otherwise.

    Returns
    -------
    numpy.ndarray
        float32, the shape of `inputs` (`out` when given): each element clamped to its channel's
        nudged range and rounded to the nearest grid point, halves upward, as TF computes it bit
        for bit.

    Raises
    ------
    TypeError
        An array that is not float32, `num_bits` not an int, `narrow_range` not a bool, `out` not a
        float32 array.
    ValueError
        `num_bits` outside 2 to 16, an `out` of another shape or layout, `inputs` of rank 0, or
        `min` / `max` not of rank 1 with one value per channel (TF's messages).

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> x = np.array([[1.4, 3.1], [2.6, 9.0]], np.float32)
    >>> lo, hi = np.zeros(2, np.float32), np.array([3.0, 6.0], np.float32)
    >>> fqcore.fake_quant_with_min_max_vars_per_channel(x, lo, hi, num_bits=2)
    array([[1., 4.],
           [3., 6.]], dtype=float32)
    """
    return _forward(_kernels.channel_forward, _channel_ranges, inputs, min, max, num_bits,
                    narrow_range, out)


def fake_quant_with_min_max_vars_per_channel_gradient(
        gradients: npt.ArrayLike, inputs: npt.ArrayLike, min: npt.ArrayLike, max: npt.ArrayLike,
        num_bits: int = 8, narrow_range: bool = False, *, out: Optional[np.ndarray] = None
) -> FakeQuantWithMinMaxVarsPerChannelGradient:
    """FakeQuantWithMinMaxVarsPerChannelGradient, fused: the input gradient and each channel's
    range gradients in one pass over contiguous memory.

    The per-channel sums are taken in a fixed order: the same bits on every ISA and thread count.

    Parameters
    ----------
    gradients : array_like
        float32, the shape of `inputs`: the gradients flowing back into the op's output.
    inputs : array_like
        float32, at least rank 1 (the last dimension holds the channels), any shape and layout
        (non-contiguous views are copied first). Lists are converted; arrays of another dtype are
        refused (TypeError), never cast.
    min, max : array_like
        float32, one value per channel of the last dimension of `inputs`: each channel's range,
        nudged as for :func:`fake_quant_with_min_max_vars`.
    num_bits : int, default 8
        Bits of the quantization grid, 2 to 16: ``2**num_bits`` levels.
    narrow_range : bool, default False
        Use ``2**num_bits - 1`` levels, leaving out the lowest (as symmetric int8 weights do).
    out : numpy.ndarray, optional
        A writeable, aligned, C-contiguous float32 array of the inputs' shape to hold
        `backprops_wrt_input` (it may be `inputs` itself); inputs are never modified otherwise.

    Returns
    -------
    FakeQuantWithMinMaxVarsPerChannelGradient
        ``(backprops_wrt_input, backprop_wrt_min, backprop_wrt_max)``, the last two float32
        arrays of one value per channel.

    Raises
    ------
    TypeError
        An array that is not float32, `num_bits` not an int, `narrow_range` not a bool, `out` not a
        float32 array.
    ValueError
        `num_bits` outside 2 to 16, an `out` of another shape or layout, `gradients` and `inputs`
        of different shapes, `inputs` of rank 0, or `min` / `max` not one value per channel.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> x = np.array([[-1.0, 2.0], [9.0, 7.0]], np.float32)
    >>> lo, hi = np.zeros(2, np.float32), np.array([3.0, 6.0], np.float32)
    >>> res = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(np.ones_like(x), x, lo, hi)
    >>> res.backprop_wrt_min, res.backprop_wrt_max
    (array([1., 0.], dtype=float32), array([1., 1.], dtype=float32))
    """
    return _as_tuple(FakeQuantWithMinMaxVarsPerChannelGradient,
                     _gradient(_kernels.channel_grad, _channel_ranges, gradients, inputs, min, max,
                               num_bits, narrow_range, out))
