"""Reverse mode over a plan's path as one compiled program (_engine.ReversePath). The path of a
training step is a hundred or more gradient calls, most of them on vectors and scalars, where a
Python loop that looks up each op's output gradients and operands and sums its input gradients
costs more than the call. This module decides, once per path, what the program does at each op:
which input gradients it sums, which of them it can store without a lookup (the first term of a
tensor), and which ops pass their gradient on without a call (an Identity: a variable's read)."""
from ._engine import ReversePath
from .op_defs.array import pass_gradient


def compile_path(path, can_die, given=()):
    """run(values, grads, dead) for `path` (the plan's (op, gradient, summed, needed) entries, in
    reverse execution order): each entry whose outputs have a gradient and whose op did not die
    calls its gradient function on the run's values (a unit's with its `needed` too) and adds
    each input gradient it gives to `grads` (summed: the (position, tensor) pairs that take
    one). Only the ops in `can_die` (those a dead branch can reach) are looked up in `dead`.
    `grads` holds gradients of the tensors `given` when the run starts, of no others: a
    tensor's first term on the path is stored as it is, the later ones added to what is there."""
    stored = set(given)  # tensors whose gradient an earlier entry of the path may have stored
    entries = []
    for op, gradient, summed, needed in path:
        positions = [position for position, _ in summed]
        targets = [t for _, t in summed]
        first = []
        for t in targets:  # one tensor can be two inputs of an op (x * x): one term each
            first.append(t not in stored)
            stored.add(t)
        passes = gradient is pass_gradient and len(op.outputs) == 1 and positions == [0]
        entries.append((op, gradient, op.outputs, op.inputs, needed, op in can_die, passes,
                        positions, targets, first))
    return ReversePath(entries)
