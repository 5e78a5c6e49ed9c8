"""Runs of consecutive plan steps as one call. A training step is hundreds of small ops (a range
tracker's moving average, the fold's per-channel factors, the optimizer's updates), and the
engine's loop costs more per step than most of those ops' numpy work. A run of consecutive steps
that cannot see a dead value becomes one function, generated once per plan, that calls each
step's forward with its operands held in local variables and returns every output: the same
calls in the same order, so the same values, without the loop's lookups and stores between them.
"""
from itertools import count

# A run shorter than this stays as its steps: one call buys nothing.
MIN_STEPS = 2
# Ops whose forward reads the run's values beyond its operands (reverse mode reads every value
# on its path), which a run holds in locals until it returns: each runs as its own step.
_READS_RUN_VALUES = {"Gradients"}


class StepRun:
    """Consecutive steps of a plan as one step: its inputs are what its members read from
    earlier steps, its outputs every member's outputs, in order."""

    type = "StepRun"
    control_inputs = ()

    def __init__(self, steps):
        self.members = [step[0] for step in steps]
        self.name = f"steps {self.members[0].name} .. {self.members[-1].name}"
        produced, inputs = set(), []
        for _, _, member_inputs, member_outputs, _, _ in steps:
            for t in member_inputs:
                if t not in produced and t not in inputs:
                    inputs.append(t)
            produced.update(member_outputs)
        self.inputs = inputs
        self.outputs = [t for _, _, _, member_outputs, _, _ in steps for t in member_outputs]
        self.forward = _compile(steps, inputs, self.members)


def group(steps):
    """`steps` (a plan's (op, forward, inputs, outputs, controls, can_die) tuples) with each run
    of MIN_STEPS or more consecutive steps that cannot die (nor read other values than their
    operands) replaced by one StepRun step."""
    grouped, pending = [], []

    def flush():
        if len(pending) >= MIN_STEPS:
            run = StepRun(pending)
            grouped.append((run, run.forward, run.inputs, run.outputs, (), False))
        else:
            grouped.extend(pending)
        pending.clear()
    for step in steps:
        if step[5] or step[0].type in _READS_RUN_VALUES:  # can die: the engine checks it
            flush()
            grouped.append(step)
        else:
            pending.append(step)
    flush()
    return grouped


def _compile(steps, inputs, members):
    """forward(op, args, ctx) for the run: each member's forward on its operands, in order; a
    ValueError or TypeError leaves the failing member in ctx.failing_op for the engine's
    message. The source names only generated locals; ops and functions come in by closure."""
    names, fresh = {}, count()
    for t in inputs:
        names[t] = f"v{next(fresh)}"
    scope = {"members": members}
    lines = ["def forward(op, args, ctx):"]
    if inputs:
        lines.append(f"    ({''.join(names[t] + ', ' for t in inputs)}) = args")
    lines.append("    k = 0")
    lines.append("    try:")
    for k, (op, forward, member_inputs, member_outputs, _, _) in enumerate(steps):
        scope[f"f{k}"], scope[f"m{k}"] = forward, op
        operands = ", ".join(names[t] for t in member_inputs)
        lines.append(f"        k = {k}")
        lines.append(f"        r = f{k}(m{k}, [{operands}], ctx)")
        for index, t in enumerate(member_outputs):
            names[t] = f"v{next(fresh)}"
            lines.append(f"        {names[t]} = r[{index}]")
    lines.append("    except (ValueError, TypeError):")
    lines.append("        ctx.failing_op = members[k]")
    lines.append("        raise")
    outputs = [names[t] for _, _, _, member_outputs, _, _ in steps for t in member_outputs]
    lines.append(f"    return ({''.join(name + ', ' for name in outputs)})")
    exec("\n".join(lines), scope)  # noqa: S102 (generated from indices only)
    return scope["forward"]
