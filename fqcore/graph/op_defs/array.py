"""Placeholder, Const, Identity, Reshape, Cast, Size, Shape."""
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


@register("Identity", like_input(), gradient=lambda op, x, y, g: [g[0]])
def identity(op, inputs, ctx):
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
