"""FakeQuantWithMinMaxVars / PerChannel / Args on fqcore's kernels, with their fused gradients."""
from ... import ops as _fq
from ..op_registry import register
from ._infer import like_input


def _bits(op):
    return dict(num_bits=op.attrs.get("num_bits", 8), narrow_range=op.attrs.get("narrow_range", False))


def _vars_grad(op, inputs, outputs, grads):
    attrs = op.attrs
    result = _fq.fake_quant_with_min_max_vars_gradient(
        grads[0], inputs[0], inputs[1], inputs[2], attrs.get("num_bits", 8),
        attrs.get("narrow_range", False))
    return list(result)


@register("FakeQuantWithMinMaxVars", like_input(), gradient=_vars_grad)
def fake_quant_with_min_max_vars(op, inputs, ctx):
    attrs = op.attrs
    return (_fq.fake_quant_with_min_max_vars(inputs[0], inputs[1], inputs[2],
                                             attrs.get("num_bits", 8),
                                             attrs.get("narrow_range", False)),)


def _channel_grad(op, inputs, outputs, grads):
    result = _fq.fake_quant_with_min_max_vars_per_channel_gradient(
        grads[0], inputs[0], inputs[1], inputs[2], **_bits(op))
    return list(result)


@register("FakeQuantWithMinMaxVarsPerChannel", like_input(), gradient=_channel_grad)
def fake_quant_with_min_max_vars_per_channel(op, inputs, ctx):
    return (_fq.fake_quant_with_min_max_vars_per_channel(inputs[0], inputs[1], inputs[2],
                                                         **_bits(op)),)


def _range(op):
    return dict(min=op.attrs.get("min", -6.0), max=op.attrs.get("max", 6.0), **_bits(op))


@register("FakeQuantWithMinMaxArgs", like_input(), gradient=lambda op, x, y, g: [
    _fq.fake_quant_with_min_max_args_gradient(g[0], x[0], **_range(op))])
def fake_quant_with_min_max_args(op, inputs, ctx):
    return (_fq.fake_quant_with_min_max_args(inputs[0], **_range(op)),)
