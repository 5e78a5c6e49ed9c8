"""Runs of consecutive plan steps as one call. A training step is hundreds of small ops (a range
tracker's moving average, the fold's per-channel factors, the optimizer's updates), and the
engine's loop costs more per step than most of those ops' numpy work. A run of consecutive steps
that cannot see a dead value becomes one compiled program (_engine.StepProgram), made once per
plan, that calls each step's forward with its operands held in slots and returns every output:
the same calls in the same order, so the same values, without the loop's lookups and stores
between them.
"""
from ._engine import StepProgram

# A run shorter than this stays as its steps: one call buys nothing.
MIN_STEPS = 2
# Ops whose forward reads the run's values beyond its operands (reverse mode reads every value
# on its path), which a run holds in its slots until it returns: each runs as its own step.
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
    """The run's forward(op, args, ctx) (_engine.StepProgram): each member's forward on its
    operands, in order, with the run's inputs in the first slots and each member's outputs in
    the slots after."""
    slot = {t: k for k, t in enumerate(inputs)}
    operand_slots, output_counts = [], []
    for _, _, member_inputs, member_outputs, _, _ in steps:
        operand_slots.append([slot[t] for t in member_inputs])
        output_counts.append(len(member_outputs))
        for t in member_outputs:
            slot[t] = len(slot)
    return StepProgram([step[1] for step in steps], members, operand_slots, output_counts,
                       len(inputs))
