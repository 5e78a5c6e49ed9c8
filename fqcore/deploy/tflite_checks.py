"""The checks of a Model shared by .tflite write() and read(), and the limits they apply."""
import math
import operator

import numpy as np

from .model import ACTIVATIONS, OP_OPTIONS, PADDINGS, QUANTIZED_RANGES, Model, Op, Quantization, Tensor

# Ranks beyond this no TFLite kernel of ours takes; a bound keeps absurd shapes cheap to reject.
MAX_RANK = 8
# TFLite indexes elements with int32 in its kernels.
MAX_ELEMENTS = 2 ** 31 - 1
INT32_MAX = 2 ** 31 - 1

# Inputs each kind takes (min, max): a missing bias is an omitted last input.
_INPUT_COUNTS = {
    "CONV_2D": (2, 3), "DEPTHWISE_CONV_2D": (2, 3), "FULLY_CONNECTED": (2, 3), "ADD": (2, 2),
    "AVERAGE_POOL_2D": (1, 1), "MEAN": (2, 2), "RESHAPE": (2, 2), "SOFTMAX": (1, 1),
    "QUANTIZE": (1, 1), "DEQUANTIZE": (1, 1),
}
_POSITIVE_INT_OPTIONS = ("stride_h", "stride_w", "dilation_h", "dilation_w", "filter_h",
                         "filter_w", "depth_multiplier")
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_QUANT_RANGES = {**QUANTIZED_RANGES, "int32": (-2 ** 31, 2 ** 31 - 1)}


def _raiser(source):
    def fail(where, what):
        raise ValueError(f"{source}: {where}: {what}")
    return fail


def _tensor_label(i, name):
    return f"tensor {i} ({name!r})"


def _shape_text(shape):
    if len(shape) <= MAX_RANK:
        return "[" + ", ".join(map(str, shape)) + "]"
    # A damaged file's "shape" can be thousands long: the message shows its start.
    return "[" + ", ".join(map(str, shape[:MAX_RANK])) + f", ...] (rank {len(shape)})"


# --------------------------------------------------------------------------------------------
# What a Model must satisfy to be written, and what a file read must give: one check for both,
# so write() never produces a file read() refuses.

def _check_tensor(i, tensor, fail):
    where = _tensor_label(i, tensor.name)
    shape = tensor.shape
    if len(shape) > MAX_RANK:
        fail(where, f"rank {len(shape)} is more than {MAX_RANK}")
    for d in shape:
        if d < -1 or d > INT32_MAX:
            fail(where, f"shape {_shape_text(shape)} has a dimension outside [-1, 2**31)")
    count = math.prod(1 if d == -1 else d for d in shape)
    if count > MAX_ELEMENTS:
        fail(where, f"shape {_shape_text(shape)} has {count} elements, more than {MAX_ELEMENTS}")
    if tensor.data is not None:
        data = tensor.data
        if not isinstance(data, np.ndarray) or data.dtype != np.dtype(tensor.dtype):
            fail(where, f"data must be a {tensor.dtype} array")
        if -1 in shape:
            fail(where, f"a constant's shape {_shape_text(shape)} cannot have an unknown (-1) "
                        f"dimension")
        if data.shape != shape:
            fail(where, f"data has shape {_shape_text(data.shape)}, the tensor "
                        f"{_shape_text(shape)}")
        if data.size == 0:
            # TFLite reads an empty buffer as "no data": the constant would come back an input.
            fail(where, "a constant with no elements cannot be told apart from an activation")
    q = tensor.quantization
    if q is None:
        return
    if not isinstance(q, Quantization):
        fail(where, f"quantization must be a Quantization, got {type(q).__name__}")
    if q.scale.shape != q.zero_point.shape or q.scale.size == 0:
        fail(where, f"quantization has {q.scale.size} scales and {q.zero_point.size} zero points")
    if not (np.all(np.isfinite(q.scale)) and np.all(q.scale > 0)):
        fail(where, "quantization scales must be finite and positive")
    if tensor.dtype in _QUANT_RANGES:
        lo, hi = _QUANT_RANGES[tensor.dtype]
        if q.zero_point.min() < lo or q.zero_point.max() > hi:
            fail(where, f"zero points must lie in [{lo}, {hi}] for {tensor.dtype}")
    rank = len(shape)
    if not 0 <= q.axis < max(rank, 1):
        fail(where, f"quantized dimension {q.axis} is not a dimension of shape "
                    f"{_shape_text(shape)}")
    if q.per_channel and q.scale.size != shape[q.axis]:
        fail(where, f"{q.scale.size} scales along dimension {q.axis} of shape "
                    f"{_shape_text(shape)}")


def _check_options(where, op, fail):
    names = OP_OPTIONS[op.kind]
    options = op.options
    if not isinstance(options, dict) or set(options) != set(names):
        got = sorted(options) if isinstance(options, dict) else type(options).__name__
        fail(where, f"options must be exactly {list(names)}, got {got}")
    for key in names:
        value = options[key]
        if key in _POSITIVE_INT_OPTIONS:
            if isinstance(value, (bool, np.bool_)):
                fail(where, f"{key} must be an int, got {value!r}")
            try:
                value = operator.index(value)
            except TypeError:
                fail(where, f"{key} must be an int, got {value!r}")
            if not 1 <= value <= INT32_MAX:
                fail(where, f"{key} must be at least 1, got {value}")
        elif key == "padding":
            if value not in PADDINGS:
                fail(where, f"padding must be one of {PADDINGS}, got {value!r}")
        elif key == "activation":
            if value not in ACTIVATIONS:
                fail(where, f"activation must be one of {ACTIVATIONS}, got {value!r}")
        elif key == "keep_dims":
            if not isinstance(value, (bool, np.bool_)):
                fail(where, f"keep_dims must be a bool, got {value!r}")
        elif key == "beta":
            number = isinstance(value, (int, float, np.integer, np.floating))
            if not number or isinstance(value, (bool, np.bool_)):
                fail(where, f"beta must be a number, got {value!r}")
            if not math.isfinite(value) or abs(value) > _FLOAT32_MAX:
                fail(where, f"beta must be finite in float32, got {value!r}")


def _check_layout(where, op, ins, out, fail):
    """The input layouts model.py states for each kind, as far as ranks and constants go."""
    kind = op.kind

    def rank(t, n, what):
        if len(t.shape) != n:
            fail(where, f"{what} {t.name!r} has shape {_shape_text(t.shape)}, not rank {n}")

    def int32_constant(t, what, ranks):
        if t.data is None or t.dtype != "int32" or len(t.shape) not in ranks:
            fail(where, f"{what} {t.name!r} must be an int32 constant of rank "
                        f"{' or '.join(map(str, ranks))}")

    if kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        rank(ins[0], 4, "input")
        rank(ins[1], 4, "filter")
        rank(out, 4, "output")
        channels = ins[1].shape[0] if kind == "CONV_2D" else ins[1].shape[3]
        if kind == "DEPTHWISE_CONV_2D" and ins[1].shape[0] != 1:
            fail(where, f"filter {ins[1].name!r} has shape {_shape_text(ins[1].shape)}, "
                        f"not [1, KH, KW, C]")
        if len(ins) == 3:
            rank(ins[2], 1, "bias")
            if ins[2].shape[0] != channels:
                fail(where, f"bias {ins[2].name!r} has {ins[2].shape[0]} entries for "
                            f"{channels} output channels")
    elif kind == "FULLY_CONNECTED":
        rank(ins[1], 2, "weights")
        if len(ins) == 3:
            rank(ins[2], 1, "bias")
            if ins[2].shape[0] != ins[1].shape[0]:
                fail(where, f"bias {ins[2].name!r} has {ins[2].shape[0]} entries for "
                            f"{ins[1].shape[0]} outputs")
    elif kind == "AVERAGE_POOL_2D":
        rank(ins[0], 4, "input")
        rank(out, 4, "output")
    elif kind == "MEAN":
        int32_constant(ins[1], "axes", (0, 1))
        r = len(ins[0].shape)
        if np.any(ins[1].data < -r) or np.any(ins[1].data >= max(r, 1)):
            fail(where, f"axes {ins[1].data.tolist()} are not axes of rank {r}")
    elif kind == "RESHAPE":
        int32_constant(ins[1], "shape", (1,))
        new = ins[1].data
        if np.any(new < -1) or np.count_nonzero(new == -1) > 1:
            fail(where, f"new shape {new.tolist()} is not a shape (one -1 at most)")
    elif kind == "QUANTIZE":
        if ins[0].dtype not in ("float32", "int8", "uint8") or out.dtype not in ("int8",
                                                                                  "uint8"):
            fail(where, f"quantizes {ins[0].dtype} to {out.dtype}; it takes float32 (or a "
                        f"quantized type) to int8 or uint8")
    elif kind == "DEQUANTIZE":
        if ins[0].dtype not in QUANTIZED_RANGES or out.dtype != "float32":
            fail(where, f"dequantizes {ins[0].dtype} to {out.dtype}; it takes int8 or uint8 to "
                        f"float32")
    for t in ins + [out]:
        if t.dtype in QUANTIZED_RANGES and t.quantization is None:
            fail(where, f"{t.dtype} tensor {t.name!r} has no quantization")


def _check_model(model, fail):
    if not isinstance(model, Model) or not isinstance(model.tensors, dict):
        raise TypeError(f"expected a fqcore.deploy.model.Model, got {type(model).__name__}")
    index = {}
    for i, (name, tensor) in enumerate(model.tensors.items()):
        if not isinstance(tensor, Tensor):
            fail(f"tensor {i} ({name!r})", f"is a {type(tensor).__name__}, not a Tensor")
        if tensor.name != name:
            fail(_tensor_label(i, name), f"is filed under {name!r} but named {tensor.name!r}")
        _check_tensor(i, tensor, fail)
        index[name] = i

    def lookup(where, name, what):
        if not isinstance(name, str) or name not in index:
            fail(where, f"{what} {name!r} is not a tensor of the model")
        return model.tensors[name]

    # Tensors whose value exists before op i runs: constants, graph inputs, earlier outputs.
    ready = {name for name, t in model.tensors.items() if t.data is not None}
    for name in model.inputs:
        t = lookup("inputs", name, "input")
        if t.data is not None:
            fail("inputs", f"input {name!r} is a constant")
        ready.add(name)
    for i, op in enumerate(model.ops):
        if not isinstance(op, Op):
            fail(f"op {i}", f"is a {type(op).__name__}, not an Op")
        if not isinstance(op.name, str):
            fail(f"op {i} ({op.kind})", f"name must be a str, got {type(op.name).__name__}")
        where = f"op {i} ({op.kind}{', ' + repr(op.name) if op.name else ''})"
        lo, hi = _INPUT_COUNTS[op.kind]
        if not lo <= len(op.inputs) <= hi:
            fail(where, f"has {len(op.inputs)} inputs; {op.kind} takes "
                        f"{lo if lo == hi else f'{lo} or {hi}'}")
        if len(op.outputs) != 1:
            fail(where, f"has {len(op.outputs)} outputs; {op.kind} has 1")
        ins = [lookup(where, name, "input") for name in op.inputs]
        out = lookup(where, op.outputs[0], "output")
        for name in op.inputs:
            if name not in ready:
                fail(where, f"input {name!r} has no value yet (no earlier op writes it)")
        if op.outputs[0] in ready:
            fail(where, f"output {op.outputs[0]!r} already has a value")
        ready.add(op.outputs[0])
        _check_options(where, op, fail)
        _check_layout(where, op, ins, out, fail)
    for name in model.outputs:
        lookup("outputs", name, "output")
        if name not in ready:
            fail("outputs", f"output {name!r} is never written")
    if not isinstance(model.description, str):
        fail("description", f"must be a str, got {type(model.description).__name__}")

