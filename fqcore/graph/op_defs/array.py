"""Placeholder, Const, Identity, StopGradient, Reshape, Squeeze, Cast, Size, Shape, Rank, Range."""
import operator

import numpy as np

from ..op_registry import register
from ._infer import constant_value, like_input


def _placeholder_infer(inputs, attrs):
    shape = attrs.get("shape")
    return [(None if shape is None else tuple(shape), np.dtype(attrs.get("dtype", "float32")))]


@register("Placeholder", _placeholder_infer)
def placeholder(op, inputs, ctx):
    raise ValueError(f"placeholder {op.name!r} must be fed (feed_dict={{'{op.name}:0': ...}})")


def _const_infer(inputs, attrs):
    value = attrs["value"]
    return [(value.shape, value.dtype)]


@register("Const", _const_infer)
def const(op, inputs, ctx):
    return (op.attrs["value"],)


def pass_gradient(op, inputs, outputs, grads):
    """The gradient of an op whose output is its input (reverse mode inlines it)."""
    return [grads[0]]


@register("Identity", like_input(), gradient=pass_gradient)
def identity(op, inputs, ctx):
    return (inputs[0],)


# TF's NotDifferentiable: no gradient flows back through it.
@register("StopGradient", like_input())
def stop_gradient(op, inputs, ctx):
    return (inputs[0],)


def _reshape_infer(inputs, attrs):
    target = constant_value(inputs[1])
    if target is None:
        return [(None, inputs[0].dtype)]
    target = [int(d) for d in target]
    known = inputs[0].shape
    if -1 in target and known is not None and all(d is not None for d in known):
        rest = int(np.prod([d for d in target if d != -1]))
        target[target.index(-1)] = int(np.prod(known)) // rest if rest else 0
    return [(tuple(None if d == -1 else d for d in target), inputs[0].dtype)]


def _reshape_grad(op, inputs, outputs, grads):
    return [grads[0].reshape(inputs[0].shape), None]


@register("Reshape", _reshape_infer, gradient=_reshape_grad)
def reshape(op, inputs, ctx):
    x, shape = inputs
    try:
        return (x.reshape(tuple(int(d) for d in shape)),)
    except ValueError:
        raise ValueError(f"{op.name}: cannot reshape {x.shape} into {tuple(shape)}") from None


def _squeezed(label, shape, squeeze_dims):
    """Squeeze's output shape (None: unknown): the dims in squeeze_dims, which must be 1 (or
    unknown, taken to be 1), or when it is empty every dim of size 1."""
    rank = len(shape)
    wrapped = set()
    for d in squeeze_dims:
        if not -rank <= d < rank:
            raise ValueError(f"{label}: squeeze dim {d} is out of range for rank {rank}")
        wrapped.add(d % rank)
    out = []
    for i, size in enumerate(shape):
        if i in wrapped:
            if size is not None and size != 1:
                raise ValueError(f"{label}: cannot squeeze dim {i} of shape {tuple(shape)}, "
                                 f"its size is {size}, not 1")
        elif not wrapped and size is None:
            return None  # it may or may not be 1: TF gives up on the whole shape too
        elif wrapped or size != 1:
            out.append(size)
    return tuple(out)


def _squeeze_infer(inputs, attrs):
    shape = inputs[0].shape
    if shape is not None:
        shape = _squeezed("Squeeze", shape, attrs.get("squeeze_dims", []))
    return [(shape, inputs[0].dtype)]


def _squeeze_grad(op, inputs, outputs, grads):
    return [np.reshape(grads[0], np.shape(inputs[0]))]


@register("Squeeze", _squeeze_infer, gradient=_squeeze_grad)
def squeeze(op, inputs, ctx):
    x = np.asarray(inputs[0])
    return (x.reshape(_squeezed(op.name, x.shape, op.attrs.get("squeeze_dims", []))),)


def _cast_infer(inputs, attrs):
    return [(inputs[0].shape, np.dtype(attrs["DstT"]))]


def _cast_grad(op, inputs, outputs, grads):
    if inputs[0].dtype.kind == "f" and outputs[0].dtype.kind == "f":
        return [grads[0].astype(inputs[0].dtype)]
    return [None]


@register("Cast", _cast_infer, gradient=_cast_grad)
def cast(op, inputs, ctx):
    return (inputs[0].astype(op.attrs["DstT"]),)


@register("Size", lambda inputs, attrs: [((), np.dtype(np.int32))])
def size(op, inputs, ctx):
    return (np.int32(inputs[0].size),)


def _shape_infer(inputs, attrs):
    rank = None if inputs[0].shape is None else len(inputs[0].shape)
    return [((rank,), np.dtype(np.int32))]


@register("Shape", _shape_infer)
def shape(op, inputs, ctx):
    return (np.array(inputs[0].shape, np.int32),)


@register("Rank", lambda inputs, attrs: [((), np.dtype(np.int32))])
def rank(op, inputs, ctx):
    return (np.int32(np.ndim(inputs[0])),)


def _range_size(label, start, limit, delta):
    """The length of TF's Range(start, limit, delta), after its checks."""
    for name, value in (("start", start), ("limit", limit), ("delta", delta)):
        if np.ndim(value) != 0:
            raise ValueError(f"{label}: {name} must be a scalar, got shape {np.shape(value)}")
    if delta == 0:
        raise ValueError(f"{label}: delta must not be 0")
    if delta > 0 and start > limit:
        raise ValueError(f"{label}: start {start} > limit {limit} with delta {delta} > 0")
    if delta < 0 and start < limit:
        raise ValueError(f"{label}: start {start} < limit {limit} with delta {delta} < 0")
    if np.asarray(start).dtype.kind in "iu":
        start, limit, delta = (operator.index(v) for v in (start, limit, delta))
        return (abs(limit - start) + abs(delta) - 1) // abs(delta)
    size = np.ceil(abs((limit - start) / delta))
    if not np.isfinite(size):
        raise ValueError(f"{label}: start {start}, limit {limit} and delta {delta} give no finite "
                         f"length")
    return int(size)


def _range_infer(inputs, attrs):
    values = [constant_value(t) for t in inputs]
    size = None if any(v is None for v in values) else _range_size("Range", *values)
    return [((size,), inputs[0].dtype)]


@register("Range", _range_infer)
def range_(op, inputs, ctx):
    start, limit, delta = inputs
    dtype = np.asarray(start).dtype
    size = _range_size(op.name, start, limit, delta)
    # TF's kernel adds delta once per element; accumulate does the same additions in order.
    steps = np.full(size, delta, dtype)
    if size:
        steps[0] = start
    return (np.add.accumulate(steps, dtype=dtype),)
