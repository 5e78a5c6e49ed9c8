# The engine's two straight-line programs, compiled: a run of plan steps (step_runs.py) and
# reverse mode over a plan's path (reverse_code.py). Both are a fixed list of calls to the ops'
# Python functions; what lies between the calls (taking operands, storing results, summing
# gradient terms) is bookkeeping, a fifth of the bytecodes of the demo's training step when it was
# generated Python (4.9K of 24.1K; the step at batch 1, nearly all overhead, ran 2-4% faster
# compiled). These loops do the same calls, in the same order, with the same arguments, and the
# same checks and sums; the Python modules decide what each program holds.
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport Py_INCREF


cdef Py_ssize_t *_indices(values) except NULL:
    """A C copy of the ints `values` (at least one slot, so that no length gives NULL)."""
    cdef Py_ssize_t k, n = len(values)
    cdef Py_ssize_t *out = <Py_ssize_t *>PyMem_Malloc(max(n, 1) * sizeof(Py_ssize_t))
    if out == NULL:
        raise MemoryError()
    for k in range(n):
        out[k] = values[k]
    return out


cdef list _taken(list slots, const Py_ssize_t *indices, Py_ssize_t n):
    """[slots[i] for i in indices[:n]]."""
    cdef list out = PyList_New(n)
    cdef Py_ssize_t j
    cdef object value
    for j in range(n):
        value = slots[indices[j]]
        Py_INCREF(value)  # PyList_SET_ITEM takes the reference
        PyList_SET_ITEM(out, j, value)
    return out


cdef class StepProgram:
    """forward(op, args, ctx) of a run of steps: each member's forward(member, operands, ctx) in
    order, its operands taken from the run's inputs (`args`) and the earlier members' outputs;
    returns every member's outputs, in order. A ValueError or TypeError leaves the failing member
    in ctx.failing_op for the engine's message; a member that gives another number of results
    than its outputs is a RuntimeError (an op definition's bug, which must not shift values).

    Built from, per member: its forward function, the member, its operands' slots and its number
    of outputs. Slots 0 .. inputs-1 hold `args`; each member's outputs take the next slots."""

    cdef list _functions, _members
    cdef Py_ssize_t _count, _inputs, _slots
    cdef Py_ssize_t *_operand_start  # member k's operands: _operands[start[k]:start[k + 1]]
    cdef Py_ssize_t *_operands
    cdef Py_ssize_t *_output_counts

    def __cinit__(self, functions, members, operand_slots, output_counts, Py_ssize_t inputs):
        self._functions, self._members = list(functions), list(members)
        self._count, self._inputs = len(self._members), inputs
        if not (len(self._functions) == len(operand_slots) == len(output_counts) == self._count):
            raise ValueError("functions, members, operand_slots and output_counts differ in length")
        if inputs < 0 or any(n < 0 for n in output_counts):
            raise ValueError(f"inputs ({inputs}) and output_counts ({list(output_counts)}) must "
                             f"not be negative")
        starts, flat = [0], []
        for k in range(self._count):
            flat.extend(operand_slots[k])
            starts.append(len(flat))
        self._slots = inputs + sum(output_counts)
        if any(not 0 <= s < self._slots for s in flat):
            raise ValueError(f"an operand slot is outside 0..{self._slots - 1}")
        self._operand_start = _indices(starts)
        self._operands = _indices(flat)
        self._output_counts = _indices(output_counts)

    def __dealloc__(self):
        PyMem_Free(self._operand_start)
        PyMem_Free(self._operands)
        PyMem_Free(self._output_counts)

    def __call__(self, op, args, ctx):
        cdef list slots
        cdef Py_ssize_t k, j, n, next_slot = self._inputs
        cdef object results
        if len(args) != self._inputs:
            raise ValueError(f"{self._inputs} operands expected, got {len(args)}")
        slots = list(args)
        slots.extend([None] * (self._slots - self._inputs))
        for k in range(self._count):
            operands = _taken(slots, self._operands + self._operand_start[k],
                              self._operand_start[k + 1] - self._operand_start[k])
            member = self._members[k]
            try:
                results = self._functions[k](member, operands, ctx)
            except (ValueError, TypeError):
                ctx.failing_op = member
                raise
            n = self._output_counts[k]
            if len(results) != n:
                raise RuntimeError(f"{member.name} ({member.type}) gave {len(results)} results "
                                   f"for its {n} outputs")
            for j in range(n):
                slots[next_slot] = results[j]
                next_slot += 1
        return slots[self._inputs:]


cdef class _GradientEntry:
    """One op (or unit) of a reverse-mode path; see ReversePath."""
    cdef object op, gradient, needed
    cdef tuple outputs, inputs, positions, targets, spent_gradients, spent_values
    cdef bint may_die, passes, with_needed
    cdef tuple first


cdef class ReversePath:
    """run(values, grads, dead): reverse mode over a path. For each entry, in order: the output
    gradients are grads.get of its outputs; if one is not None and (for an entry that may die)
    its op is not in `dead`, its gradient function is called as gradient(op, [values of its
    inputs], [values of its outputs], [output gradients][, needed]) and each result at
    positions[i] that is not None is added to grads[targets[i]]: stored as it is where first[i]
    (no earlier entry can have stored one), else added to what is there. An entry that passes
    (an Identity's) adds its one output gradient to its one target without a call. After each
    entry, called or not, the gradients of its spent_gradients leave `grads` and its
    spent_values leave `values`: what no later entry, nor the run after the path, reads. Their
    arrays are then free for the arrays the rest of the path makes. Returns `grads`.

    Built from entries (op, gradient, outputs, inputs, needed or None, may_die, passes,
    positions, targets, first, spent_gradients, spent_values)."""

    cdef list _entries

    def __cinit__(self, entries):
        self._entries = []
        for (op, gradient, outputs, inputs, needed, may_die, passes, positions, targets,
             first, spent_gradients, spent_values) in entries:
            if not len(positions) == len(targets) == len(first):
                raise ValueError(f"{op.name}: positions, targets and first differ in length")
            if passes and (len(outputs) != 1 or list(positions) != [0]):
                raise ValueError(f"{op.name}: a passing entry has one output and one target")
            entry = _GradientEntry()
            entry.op, entry.gradient, entry.needed = op, gradient, needed
            entry.with_needed = needed is not None
            entry.outputs, entry.inputs = tuple(outputs), tuple(inputs)
            entry.positions, entry.targets = tuple(positions), tuple(targets)
            entry.first = tuple(bool(f) for f in first)
            entry.may_die, entry.passes = may_die, passes
            entry.spent_gradients, entry.spent_values = tuple(spent_gradients), tuple(spent_values)
            self._entries.append(entry)

    def __call__(self, dict values, dict grads, dead):
        cdef _GradientEntry entry
        cdef object tensor
        for entry in self._entries:
            _run_entry(entry, values, grads, dead)
            for tensor in entry.spent_gradients:
                grads.pop(tensor, None)
            for tensor in entry.spent_values:
                values.pop(tensor, None)
        return grads


cdef int _run_entry(_GradientEntry entry, dict values, dict grads, dead) except -1:
    """One entry of ReversePath: its call (or pass) and the sums of the terms it gives."""
    cdef Py_ssize_t j, n = len(entry.outputs)
    cdef list incoming = PyList_New(n)
    cdef bint any_gradient = False
    cdef object term, results
    for j in range(n):
        term = grads.get(entry.outputs[j])
        any_gradient = any_gradient or term is not None
        Py_INCREF(term)
        PyList_SET_ITEM(incoming, j, term)
    if not any_gradient or (entry.may_die and entry.op in dead):
        return 0
    if entry.passes:
        return _add(grads, entry.targets[0], incoming[0], entry.first[0])
    operands = [values[t] for t in entry.inputs]
    outputs = [values[t] for t in entry.outputs]
    if entry.with_needed:
        results = entry.gradient(entry.op, operands, outputs, incoming, entry.needed)
    else:
        results = entry.gradient(entry.op, operands, outputs, incoming)
    for j in range(len(entry.positions)):
        term = results[entry.positions[j]]
        if term is not None:
            _add(grads, entry.targets[j], term, entry.first[j])
    return 0


cdef inline int _add(dict grads, target, term, bint first) except -1:
    """Adds `term` to grads[target]: stored as it is if `first`, else summed with what is there."""
    if first:
        grads[target] = term
        return 0
    held = grads.get(target)
    grads[target] = term if held is None else held + term
    return 0
