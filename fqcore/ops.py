"""The numpy API with TensorFlow's op names: validation, dtypes, shapes, out= buffers, named tuples."""
import math
import numbers
from collections import namedtuple

import numpy as np

from . import _kernels

FakeQuantWithMinMaxVarsGradient = namedtuple(
    "FakeQuantWithMinMaxVarsGradient",
    ["backprops_wrt_input", "backprop_wrt_min", "backprop_wrt_max"])
FakeQuantWithMinMaxVarsPerChannelGradient = namedtuple(
    "FakeQuantWithMinMaxVarsPerChannelGradient",
    ["backprops_wrt_input", "backprop_wrt_min", "backprop_wrt_max"])

_FLOAT32 = np.dtype(np.float32)
# A named tuple from a plain one without the generated __new__'s argument parsing (~0.1 us less).
_as_tuple = tuple.__new__
_SMALLEST_NORMAL = float(np.finfo(np.float32).tiny)


def _array(value, name):
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


def _kernel_form(array):
    """`array` when C-contiguous and aligned, else a copy that is. A misaligned buffer is copied: C
    compilers may assume float pointers are 4-byte aligned."""
    flags = array.flags
    if flags.c_contiguous and flags.aligned:
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
    if type(value) is float:
        return value
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
    if type(value) is float:
        return value
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


def _gradient_inputs(gradients, inputs):
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


def fake_quant_with_min_max_args(inputs, min=-6.0, max=6.0, num_bits=8, narrow_range=False, *,
                                 out=None):
    """FakeQuantWithMinMaxArgs: fake-quantize `inputs` to the grid of the fixed range [min, max]."""
    return _forward(_kernels.args_forward, _args_range, inputs, min, max, num_bits, narrow_range,
                    out)


def fake_quant_with_min_max_args_gradient(gradients, inputs, min=-6.0, max=6.0, num_bits=8,
                                          narrow_range=False, *, out=None):
    """FakeQuantWithMinMaxArgsGradient: `gradients` where inputs lie on the nudged range, else 0."""
    return _gradient(_kernels.args_grad, _args_range, gradients, inputs, min, max, num_bits,
                     narrow_range, out)


def fake_quant_with_min_max_vars(inputs, min, max, num_bits=8, narrow_range=False, *, out=None):
    """FakeQuantWithMinMaxVars: fake-quantize `inputs` to the range held by scalars min and max."""
    return _forward(_kernels.vars_forward, _vars_range, inputs, min, max, num_bits, narrow_range,
                    out)


def fake_quant_with_min_max_vars_gradient(gradients, inputs, min, max, num_bits=8,
                                          narrow_range=False, *, out=None):
    """FakeQuantWithMinMaxVarsGradient, fused: (backprops_wrt_input, backprop_wrt_min,
    backprop_wrt_max); the two sums are numpy float32 scalars, as TF's 0-d tensors give."""
    return _as_tuple(FakeQuantWithMinMaxVarsGradient,
                     _gradient(_kernels.vars_grad, _vars_range, gradients, inputs, min, max,
                               num_bits, narrow_range, out))


def fake_quant_with_min_max_vars_per_channel(inputs, min, max, num_bits=8, narrow_range=False, *,
                                             out=None):
    """FakeQuantWithMinMaxVarsPerChannel: one range per channel of the last dimension."""
    return _forward(_kernels.channel_forward, _channel_ranges, inputs, min, max, num_bits,
                    narrow_range, out)


def fake_quant_with_min_max_vars_per_channel_gradient(gradients, inputs, min, max, num_bits=8,
                                                      narrow_range=False, *, out=None):
    """FakeQuantWithMinMaxVarsPerChannelGradient, fused, one pass over contiguous memory:
    (backprops_wrt_input, backprop_wrt_min[d], backprop_wrt_max[d])."""
    return _as_tuple(FakeQuantWithMinMaxVarsPerChannelGradient,
                     _gradient(_kernels.channel_grad, _channel_ranges, gradients, inputs, min, max,
                               num_bits, narrow_range, out))
