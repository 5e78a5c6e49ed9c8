"""FakeQuantWithMinMaxVars / PerChannel / Args on fqcore's kernels, with their fused gradients."""
from ... import _kernels, ops as _fq
from ..op_registry import register
from ._infer import like_input


def _bits(op):
    """(num_bits, narrow_range): positional, as the ops take them after the range (no keyword
    dict a call)."""
    attrs = op.attrs
    return attrs.get("num_bits", 8), attrs.get("narrow_range", False)


def _kernel_first(binding, public, op, operands):
    """The op's result on `operands` ((x, min, max), a gradient's with g first) from the kernel
    binding, which takes the graph's values as they are (they are in the kernels' form); where it
    does not take them (None) or refuses the range (False), from the public op, which converts,
    copies or words TF's error. A frame fewer a call than the public op alone."""
    result = binding(*operands, *_bits(op), None)
    if result is None or result is False:
        result = public(*operands, *_bits(op))
    return result


def _vars_grad(op, inputs, outputs, grads):
    return list(_kernel_first(_kernels.vars_grad, _fq.fake_quant_with_min_max_vars_gradient, op,
                              (grads[0], *inputs[:3])))


@register("FakeQuantWithMinMaxVars", like_input(), gradient=_vars_grad)
def fake_quant_with_min_max_vars(op, inputs, ctx):
    return (_kernel_first(_kernels.vars_forward, _fq.fake_quant_with_min_max_vars, op,
                          inputs[:3]),)


def _channel_grad(op, inputs, outputs, grads):
    return list(_kernel_first(_kernels.channel_grad,
                              _fq.fake_quant_with_min_max_vars_per_channel_gradient, op,
                              (grads[0], *inputs[:3])))


@register("FakeQuantWithMinMaxVarsPerChannel", like_input(), gradient=_channel_grad)
def fake_quant_with_min_max_vars_per_channel(op, inputs, ctx):
    return (_kernel_first(_kernels.channel_forward, _fq.fake_quant_with_min_max_vars_per_channel,
                          op, inputs[:3]),)


def _range(op):
    """(min, max, num_bits, narrow_range) of an Args op."""
    return op.attrs.get("min", -6.0), op.attrs.get("max", 6.0), *_bits(op)


@register("FakeQuantWithMinMaxArgs", like_input(), gradient=lambda op, x, y, g: [
    _fq.fake_quant_with_min_max_args_gradient(g[0], x[0], *_range(op))])
def fake_quant_with_min_max_args(op, inputs, ctx):
    return (_fq.fake_quant_with_min_max_args(inputs[0], *_range(op)),)
