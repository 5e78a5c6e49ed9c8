"""Element-wise arithmetic, comparisons, reductions, MatMul and BiasAdd, with TF's gradients."""
import math

import numpy as np

from ... import _kernels
from ..op_registry import register
from ._infer import FLOAT32, binary, comparison, constant_value, like_input, unbroadcast


def _shape(value):
    """np.shape(value), without its Python-level dispatch for the arrays and numpy scalars the
    engine's values are."""
    shape = getattr(value, "shape", None)
    return shape if shape is not None else np.shape(value)


def _binary_grad(dx, dy):
    """A gradient from formulas for each operand, summed back to the operand's shape."""
    def gradient(op, inputs, outputs, grads):
        x, y = inputs
        g = grads[0]
        return [unbroadcast(np.asarray(dx(g, x, y, outputs[0])), _shape(x)),
                unbroadcast(np.asarray(dy(g, x, y, outputs[0])), _shape(y))]
    return gradient


_add_grad = _binary_grad(lambda g, x, y, z: g, lambda g, x, y, z: g)


@register("AddV2", binary, gradient=_add_grad)
def add_v2(op, inputs, ctx):
    return (np.add(inputs[0], inputs[1]),)


@register("Add", binary, gradient=_add_grad)
def add(op, inputs, ctx):
    return (np.add(inputs[0], inputs[1]),)


@register("Sub", binary, gradient=_binary_grad(lambda g, x, y, z: g, lambda g, x, y, z: -g))
def sub(op, inputs, ctx):
    return (np.subtract(inputs[0], inputs[1]),)


@register("Mul", binary, gradient=_binary_grad(lambda g, x, y, z: g * y, lambda g, x, y, z: x * g))
def mul(op, inputs, ctx):
    return (np.multiply(inputs[0], inputs[1]),)


@register("RealDiv", binary, gradient=_binary_grad(
    lambda g, x, y, z: g / y, lambda g, x, y, z: g * ((-x / y) / y)))
def real_div(op, inputs, ctx):
    return (np.divide(inputs[0], inputs[1]),)


def power(x, y):
    """x ** y, broadcast; float32 as TF's CPU Pow computes a scalar, with the C library's powf per
    element (numpy's float32 power differs from it in the last bit on AVX-512 machines)."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype != FLOAT32 or y.dtype != FLOAT32:
        return np.power(x, y)
    if x.shape != y.shape:
        x, y = np.broadcast_arrays(x, y)
    out = np.empty(x.shape, FLOAT32)
    _kernels.pow(np.ascontiguousarray(x).reshape(-1), np.ascontiguousarray(y).reshape(-1),
                 out.reshape(-1))
    return out


@register("Pow", binary, gradient=_binary_grad(
    lambda g, x, y, z: g * y * power(x, y - np.ones_like(y)),
    lambda g, x, y, z: g * z * np.log(np.where(x > 0, x, np.ones_like(x)))))
def pow_(op, inputs, ctx):
    return (power(inputs[0], inputs[1]),)


def _squared_difference_grad(op, inputs, outputs, grads):
    """TF's: (2 g) (x - y) for x, its negation for y, each summed back to its operand's shape."""
    x, y = inputs
    g = grads[0]
    dx = np.asarray((np.asarray(2, np.result_type(g)) * g) * np.subtract(x, y))
    return [unbroadcast(dx, np.shape(x)), -unbroadcast(dx, np.shape(y))]


@register("SquaredDifference", binary, gradient=_squared_difference_grad)
def squared_difference(op, inputs, ctx):
    difference = np.subtract(inputs[0], inputs[1])
    return (np.multiply(difference, difference),)


def _select_grad(pick_x):
    def gradient(op, inputs, outputs, grads):
        x, y = inputs
        mask = pick_x(x, y)
        g = grads[0]
        zero = np.zeros_like(g)
        return [unbroadcast(np.where(mask, g, zero), np.shape(x)),
                unbroadcast(np.where(mask, zero, g), np.shape(y))]
    return gradient


@register("Minimum", binary, gradient=_select_grad(lambda x, y: x <= y))
def minimum(op, inputs, ctx):
    return (np.minimum(inputs[0], inputs[1]),)


@register("Maximum", binary, gradient=_select_grad(lambda x, y: x >= y))
def maximum(op, inputs, ctx):
    return (np.maximum(inputs[0], inputs[1]),)


@register("GreaterEqual", comparison)
def greater_equal(op, inputs, ctx):
    return (np.greater_equal(inputs[0], inputs[1]),)


@register("Neg", like_input(), gradient=lambda op, x, y, g: [-g[0]])
def neg(op, inputs, ctx):
    return (np.negative(inputs[0]),)


@register("Reciprocal", like_input(), gradient=lambda op, x, y, g: [-g[0] * y[0] * y[0]])
def reciprocal(op, inputs, ctx):
    return (np.reciprocal(inputs[0]),)


def _rsqrt_grad(op, inputs, outputs, grads):
    y = outputs[0]
    return [np.float32(-0.5) * (grads[0] * y) * (y * y)]


@register("Rsqrt", like_input(), gradient=_rsqrt_grad)
def rsqrt(op, inputs, ctx):
    return (np.reciprocal(np.sqrt(inputs[0])),)


@register("Square", like_input(), gradient=lambda op, x, y, g: [g[0] * (np.float32(2) * x[0])])
def square(op, inputs, ctx):
    return (np.square(inputs[0]),)


# -- reductions ---------------------------------------------------------------------------

def _axes(op, x, axes):
    axes = np.asarray(axes).reshape(-1).tolist()  # Python ints: cheaper to compare than numpy's
    rank = len(_shape(x))
    reduced = []
    for a in axes:
        if not -rank <= a < rank:
            raise ValueError(f"{op.name}: reduction axis {int(a)} out of range for rank {rank}")
        reduced.append(int(a) % rank)
    return tuple(sorted(reduced))


def _reduce_infer(inputs, attrs):
    shape = inputs[0].shape
    axes = constant_value(inputs[1])
    if shape is None or axes is None:
        return [(None, inputs[0].dtype)]
    axes = {int(a) % len(shape) for a in np.asarray(axes).reshape(-1)} if shape else set()
    keep = attrs.get("keep_dims", False)
    out = tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)
    return [(out, inputs[0].dtype)]


def _spread(op, x, reduced, grad):
    """The gradient of a sum over `reduced`: `grad` copied back over x's shape."""
    grad = np.asarray(grad)
    spread = np.empty(_shape(x), grad.dtype)
    np.copyto(spread, _kept_axes(op, x, reduced, grad))
    return spread


def _sum_grad(op, inputs, outputs, grads):
    x, axes = inputs
    return [_spread(op, x, _axes(op, x, axes), grads[0]), None]


def _mean_grad(op, inputs, outputs, grads):
    x, axes = inputs
    reduced = _axes(op, x, axes)
    count = math.prod(_shape(x)[a] for a in reduced)
    g = grads[0]
    return [_spread(op, x, reduced, g / np.asarray(count, np.result_type(g))), None]


def _kept_axes(op, x, reduced, grad):
    if op.attrs.get("keep_dims", False):
        return grad
    shape = list(_shape(x))
    for a in reduced:
        shape[a] = 1
    return np.asarray(grad).reshape(shape)


def _extreme_grad(op, inputs, outputs, grads):
    """TF's Min/Max gradient: shared equally among the elements equal to the extreme."""
    x, axes = inputs
    reduced = _axes(op, x, axes)
    y = _kept_axes(op, x, reduced, outputs[0])
    g = _kept_axes(op, x, reduced, grads[0])
    hits = (x == y).astype(g.dtype)
    return [hits * (g / hits.sum(axis=reduced, keepdims=True)), None]


def _reduction(reduce, in_input_dtype):
    """The forward of a reduction op: `reduce` over the op's axes (accumulating in the input's
    dtype when asked, as TF's float32 reductions do)."""
    def forward(op, inputs, ctx):
        x, axes = inputs
        extra = {"dtype": x.dtype} if in_input_dtype else {}
        return (np.asarray(reduce(x, axis=_axes(op, x, axes),
                                  keepdims=op.attrs.get("keep_dims", False), **extra)),)
    return forward


def range_layout(op, x, axes):
    """How fq_f32_range computes the op's Min and Max of x over `axes`, as TF's CPU kernels do
    (denormals count as zeros, -0 below +0, NaN wins, empty: +inf and -inf): (channels, result
    shape) when x is a float32 array reduced over all its axes (the per-tensor range, channels 1)
    or all but the last (per channel); None for any other reduction."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim == 0:
        return None
    reduced = _axes(op, x, axes)
    if reduced == tuple(range(x.ndim)):
        channels = 1
    elif x.ndim >= 2 and reduced == tuple(range(x.ndim - 1)):
        channels = x.shape[-1]
    else:
        return None
    if op.attrs.get("keep_dims", False):
        return channels, (1,) * (x.ndim - 1) + (channels,)
    return channels, (() if len(reduced) == x.ndim else (channels,))


def float32_range(x, layout):
    """(min, max) of x as range_layout planned them."""
    channels, shape = layout
    low, high = np.empty(channels, np.float32), np.empty(channels, np.float32)
    _kernels.batch_range(np.ascontiguousarray(x).reshape(-1), low, high)
    return low.reshape(shape), high.reshape(shape)


def _extreme(reduce, which):
    """Min (which=0) or Max (which=1): fq_f32_range's when range_layout allows, else numpy's."""
    numpy_forward = _reduction(reduce, False)

    def forward(op, inputs, ctx):
        layout = range_layout(op, *inputs)
        return (numpy_forward(op, inputs, ctx) if layout is None else
                (float32_range(inputs[0], layout)[which],))
    return forward


register("Mean", _reduce_infer, gradient=_mean_grad)(_reduction(np.mean, True))
register("Sum", _reduce_infer, gradient=_sum_grad)(_reduction(np.sum, True))
register("Min", _reduce_infer, gradient=_extreme_grad)(_extreme(np.min, 0))
register("Max", _reduce_infer, gradient=_extreme_grad)(_extreme(np.max, 1))


# -- MatMul, BiasAdd ----------------------------------------------------------------------

def _matmul_infer(inputs, attrs):
    a, b = inputs[0].shape, inputs[1].shape
    if a is None or b is None:
        return [(None, inputs[0].dtype)]
    rows = a[1] if attrs.get("transpose_a") else a[0]
    cols = b[0] if attrs.get("transpose_b") else b[1]
    inner_a = a[0] if attrs.get("transpose_a") else a[1]
    inner_b = b[1] if attrs.get("transpose_b") else b[0]
    if None not in (inner_a, inner_b) and inner_a != inner_b:
        raise ValueError(f"MatMul inner dimensions differ: {a} and {b}")
    return [((rows, cols), inputs[0].dtype)]


def _matmul_grad(op, inputs, outputs, grads):
    a, b = inputs
    g = grads[0]
    ta, tb = op.attrs.get("transpose_a", False), op.attrs.get("transpose_b", False)
    mm = np.matmul
    if not ta and not tb:
        return [mm(g, b.T), mm(a.T, g)]
    if not ta and tb:
        return [mm(g, b), mm(g.T, a)]
    if ta and not tb:
        return [mm(b, g.T), mm(a, g)]
    return [mm(b.T, g.T), mm(g.T, a.T)]


@register("MatMul", _matmul_infer, gradient=_matmul_grad)
def matmul(op, inputs, ctx):
    a, b = inputs
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"{op.name}: MatMul needs two matrices, got shapes {a.shape} and {b.shape}")
    a = a.T if op.attrs.get("transpose_a", False) else a
    b = b.T if op.attrs.get("transpose_b", False) else b
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{op.name}: MatMul inner dimensions differ: {a.shape} @ {b.shape}")
    return (np.matmul(a, b),)


def _bias_add_grad(op, inputs, outputs, grads):
    g = grads[0]
    return [g, g.reshape(-1, g.shape[-1]).sum(axis=0, dtype=g.dtype)]


@register("BiasAdd", like_input(), gradient=_bias_add_grad)
def bias_add(op, inputs, ctx):
    x, b = inputs
    if b.ndim != 1 or x.shape[-1] != b.shape[0]:
        raise ValueError(f"{op.name}: bias of shape {b.shape} does not match the last axis of {x.shape}")
    return (np.add(x, b),)
