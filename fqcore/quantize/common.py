"""What the rewrite shares: the fake_quantization_step counter, rerouting, name contexts, the
variable-read test and the argument checks of the public functions."""
import re

import numpy as np

from ..graph import build
from ..graph.variables import variable

QUANTIZATION_STEP = "fake_quantization_step"


def quantization_step(graph):
    """The step counter's incremented value (`fake_quantization_step/Identity:0`), created on
    first use: an int64 variable, AssignAdd 1 each time it is read, so a training run sees 1, 2..."""
    try:
        return graph.get_tensor_by_name(QUANTIZATION_STEP + "/Identity:0")
    except KeyError:
        pass
    with graph.as_default(), graph.name_scope(""):
        step = variable(QUANTIZATION_STEP, np.int64(0), trainable=False, initializer_name="zeros")
        with graph.name_scope(QUANTIZATION_STEP + "/"):
            with graph.name_scope("AssignAdd") as scope:
                one = build.constant(np.int64(1), name="value")
                incremented = graph.create_op("AssignAdd", [step.op.outputs[0], one],
                                              {"use_locking": False}, full_name=scope[:-1])
            return build.identity(incremented.outputs[0], name="Identity")


def reroute(new, old, can_modify=None):
    """Makes the consumers of `old` (only those in `can_modify` when given) read `new`;
    returns how many inputs changed."""
    count = 0
    for op in old.consumers() if can_modify is None else can_modify:
        for index, tensor in enumerate(op.inputs):
            if tensor is old and op is not new.op:
                op._update_input(index, new)
                count += 1
    return count


def context_of(name):
    """The scope of an op name ('conv1/Conv2D' -> 'conv1'; '' at the top level)."""
    match = re.search(r"^(.*)/([^/]+)", name)
    return match.group(1) if match else ""


def add_context(context, name):
    return f"{context}/{name}" if context else name


def is_variable_read(tensor):
    """A variable's value as consumers read it (`<var>/read`, an Identity of a VariableV2)."""
    op = tensor.op
    return op.type == "Identity" and bool(op.inputs) and op.inputs[0].op.type in (
        "Variable", "VariableV2")


def check_bits(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= 16:
        raise ValueError(f"{name} must be an int in [2, 16], got {value!r}")


def check_ema_decay(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"ema_decay must be a number in [0, 1], got {value!r}")
