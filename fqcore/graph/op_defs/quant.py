"""FakeQuantWithMinMaxVars / PerChannel / Args on fqcore's kernels, with their fused gradients."""
from ... import _kernels, ops as _fq
from ..op_registry import register
from ._infer import like_input


def _bits(op):
    """(num_bits, narrow_range): positional, as the ops take them after the range (no keyword
    dict a call)."""
    attrs = op.attrs
    return attrs.get("num_bits", 8), attrs.get("narrow_range", False)


# Each op hands its arguments to the kernel binding as they are (the graph's values are in the
# kernels' form); where the binding does not take them (None) or the range is refused (False), the
# public op converts, copies or words TF's error. Two Python frames fewer a call than the public op.

def _vars_grad(op, inputs, outputs, grads):
    g, (x, low, high) = grads[0], inputs[:3]
    result = _kernels.vars_grad(g, x, low, high, *_bits(op), None)
    if result is None:
        result = _fq.fake_quant_with_min_max_vars_gradient(g, x, low, high, *_bits(op))
    return list(result)


@register("FakeQuantWithMinMaxVars", like_input(), gradient=_vars_grad)
def fake_quant_with_min_max_vars(op, inputs, ctx):
    x, low, high = inputs[:3]
    y = _kernels.vars_forward(x, low, high, *_bits(op), None)
    if y is None or y is False:
        y = _fq.fake_quant_with_min_max_vars(x, low, high, *_bits(op))
    return (y,)


def _channel_grad(op, inputs, outputs, grads):
    g, (x, low, high) = grads[0], inputs[:3]
    result = _kernels.channel_grad(g, x, low, high, *_bits(op), None)
    if result is None:
        result = _fq.fake_quant_with_min_max_vars_per_channel_gradient(g, x, low, high, *_bits(op))
    return list(result)


@register("FakeQuantWithMinMaxVarsPerChannel", like_input(), gradient=_channel_grad)
def fake_quant_with_min_max_vars_per_channel(op, inputs, ctx):
    x, low, high = inputs[:3]
    y = _kernels.channel_forward(x, low, high, *_bits(op), None)
    if y is None or y is False:
        y = _fq.fake_quant_with_min_max_vars_per_channel(x, low, high, *_bits(op))
    return (y,)


def _range(op):
    """(min, max, num_bits, narrow_range) of an Args op."""
    return op.attrs.get("min", -6.0), op.attrs.get("max", 6.0), *_bits(op)


@register("FakeQuantWithMinMaxArgs", like_input(), gradient=lambda op, x, y, g: [
    _fq.fake_quant_with_min_max_args_gradient(g[0], x[0], *_range(op))])
def fake_quant_with_min_max_args(op, inputs, ctx):
    return (_fq.fake_quant_with_min_max_args(inputs[0], *_range(op)),)
