"""Variables and the ops that write them (Assign, AssignAdd, AssignSub)."""
import numpy as np

from ..op_registry import register


def _variable_infer(inputs, attrs):
    return [(tuple(attrs["shape"]), np.dtype(attrs["dtype"]))]


@register("VariableV2", _variable_infer, stateful=True)
def variable(op, inputs, ctx):
    """The value the variable held when the run started (every read in a run sees the same)."""
    return (ctx.read_variable(op.name),)


def _write_infer(inputs, attrs):
    return [(inputs[0].shape, inputs[0].dtype)]


def _writer(update):
    """A write op: computes the new value from (current, value) and stores it, unless the run
    does not update state, in which case it yields the stored value unchanged."""
    def forward(op, inputs, ctx):
        name = op.inputs[0].op.name
        if not ctx.update_state:
            return (ctx.current_variable(name),)
        new = update(op, ctx, name, inputs[1])
        ctx.write_variable(name, new)
        return (new,)
    return forward


def _assign(op, ctx, name, value):
    shape = tuple(op.inputs[0].op.attrs["shape"])
    value = np.asarray(value, dtype=op.inputs[0].op.attrs["dtype"])
    if op.attrs.get("validate_shape", True) and value.shape != shape:
        raise ValueError(f"{op.name}: cannot assign a value of shape {value.shape} to variable "
                         f"{name!r} of shape {shape}")
    return value.copy()


def _assign_add(op, ctx, name, value):
    current = ctx.current_variable(name)
    return np.add(current, np.asarray(value, current.dtype))


def _assign_sub(op, ctx, name, value):
    current = ctx.current_variable(name)
    return np.subtract(current, np.asarray(value, current.dtype))


register("Assign", _write_infer, ref_inputs=(0,), stateful=True)(_writer(_assign))
register("AssignAdd", _write_infer, ref_inputs=(0,), stateful=True)(_writer(_assign_add))
register("AssignSub", _write_infer, ref_inputs=(0,), stateful=True)(_writer(_assign_sub))
