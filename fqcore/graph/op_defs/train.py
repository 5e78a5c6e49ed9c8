"""Gradients (reverse mode over the current run) and the optimizers' apply ops."""
import numpy as np

from ... import _kernels
from ..op_registry import register
from ._infer import FLOAT32


def _gradients_infer(inputs, attrs):
    return [(t.shape, t.dtype) for t in inputs[1:]]


@register("Gradients", _gradients_infer)
def gradients(op, inputs, ctx):
    """d inputs[0] / d inputs[1:], from the values this run has computed."""
    return ctx.backprop(op)


def _apply_infer(inputs, attrs):
    return [(inputs[0].shape, inputs[0].dtype)]


def _applier(update):
    """An optimizer op: updates its variable (and slots) in float32, as TF's kernels do."""
    def forward(op, inputs, ctx):
        name = op.inputs[0].op.name
        if not ctx.update_state:
            return (ctx.current_variable(name),)
        slot_names, hyper = [], []  # the slot variables, and the other operands in float32
        for t, value in zip(op.inputs[1:], inputs[1:]):
            if t.op.type == "VariableV2":
                slot_names.append(t.op.name)
            else:
                hyper.append(np.asarray(value, np.float32))
        new, new_slots = update(op, ctx.current_variable(name),
                                [ctx.current_variable(n) for n in slot_names], *hyper)
        for slot_name, value in zip(slot_names, new_slots):
            ctx.write_variable(slot_name, value)
        ctx.write_variable(name, new)
        return (new,)
    return forward


def _gradient_descent(op, var, slots, lr, grad):
    return var - grad * lr, []


def _momentum(op, var, slots, lr, grad, momentum):
    nesterov = op.attrs.get("use_nesterov", False)
    accum = slots[0]
    if (var.dtype == accum.dtype == grad.dtype == FLOAT32 and var.shape == accum.shape == grad.shape
            and lr.ndim == momentum.ndim == 0):
        # One pass (fq_f32_momentum), the same float32 operations in the same order.
        (new_var,), (new_accum,) = _kernels.momentum_group((var,), (accum,), (grad,), (lr,),
                                                           (momentum,), (nesterov,))
        return new_var, [new_accum]
    accum = accum * momentum + grad
    if nesterov:
        return var - (grad * lr + accum * momentum * lr), [accum]
    return var - accum * lr, [accum]


def _adam(op, var, slots, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad):
    one = np.float32(1)
    m, v = slots
    alpha = lr * np.sqrt(one - beta2_power) / (one - beta1_power)
    m = m + (grad - m) * (one - beta1)
    v = v + (grad * grad - v) * (one - beta2)
    return var - (m * alpha) / (np.sqrt(v) + epsilon), [m, v]


register("ApplyGradientDescent", _apply_infer, ref_inputs=(0,), stateful=True)(
    _applier(_gradient_descent))
register("ApplyMomentum", _apply_infer, ref_inputs=(0, 1), stateful=True)(_applier(_momentum))
register("ApplyAdam", _apply_infer, ref_inputs=(0, 1, 2), stateful=True)(_applier(_adam))
