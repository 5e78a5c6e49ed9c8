"""Switch / Merge (TF1's cond, with dead branches), NoOp."""
import numpy as np

from ..op_registry import register

# A value on the branch a Switch did not take: ops that read it do not run (TF's dead tensors).
DEAD = type("Dead", (), {"__repr__": lambda self: "<dead>"})()


def _switch_infer(inputs, attrs):
    return [(inputs[0].shape, inputs[0].dtype)] * 2


def _switch_grad(op, inputs, outputs, grads):
    live = [g for g in grads if g is not None]
    return [live[0] if live else None, None]


@register("Switch", _switch_infer, gradient=_switch_grad)
def switch(op, inputs, ctx):
    data, pred = inputs
    return (DEAD, data) if bool(pred) else (data, DEAD)


def _merge_infer(inputs, attrs):
    return [(inputs[0].shape, inputs[0].dtype), ((), np.dtype(np.int32))]


def _merge_grad(op, inputs, outputs, grads):
    taken = int(outputs[1])
    return [grads[0] if i == taken else None for i in range(len(inputs))]


@register("Merge", _merge_infer, gradient=_merge_grad)
def merge(op, inputs, ctx):
    for index, value in enumerate(inputs):
        if value is not DEAD:
            return (value, np.int32(index))
    return (DEAD, DEAD)


@register("NoOp", lambda inputs, attrs: [])
def no_op(op, inputs, ctx):
    return ()
