"""The engine: runs a graph's ops in dependency order on numpy and fqcore's kernels, holds the
variables' values, and computes gradients (reverse mode) when a Gradients op runs.

A plan, made once for a set of fetches and feeds, orders the ops and fuses what one kernel call
can do (fusion.py); a run reads the variables first, then runs the steps. After a plan's first
successful run it keeps its constant ops' values and groups its consecutive steps into compiled
programs (step_runs.py); each Gradients op's path runs as one compiled program (reverse_code.py);
both programs are _engine.pyx's loops."""
import heapq
from functools import partial
from itertools import repeat

import numpy as np

from ..array_memory import cached_memory
from . import fusion, reverse_code, step_runs
from .core import Tensor
from .op_defs.control import DEAD
from .op_registry import gradient_function, op_def
from .run_threads import RunThreads

_UNSET = object()


class Session:
    """Runs fetches of one graph (TF1's Session); the variables' values live here, not in the
    graph.

    Every variable read in a run sees the value from the start of the run; writes (Assign*,
    optimizer updates) take effect for later ops' reads in the *next* run, and are the outputs of
    the write ops in this one. Results never depend on either thread count
    (fqcore/graph/run_threads.py).

    Parameters
    ----------
    graph : Graph, optional
        The graph to run (default: the default graph).
    kernel_threads : int, optional
        Threads for fqcore's kernels during a run, put back after it: a positive int, or None (the
        default) for fqcore's own setting (:func:`fqcore.set_num_threads`, by default "auto": a
        second thread only for a call large enough, and only on a CPU other processes leave free;
        the MobileNet-v2 benchmark's step measured 2-5% faster than with 1, the demo's the same).
    threads : int or "auto", optional
        Threads for numpy's BLAS during a run: a positive int, or "auto" (as many as the cores
        other processes leave free, re-estimated as runs go); None takes ``$FQCORE_NUM_THREADS``
        when set, else "auto". BLAS keeps the count after the run.

    Raises
    ------
    TypeError
        `graph` is not a Graph.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None], name="x")
    ...     target = G.placeholder("float32", [None], name="target")
    ...     w = G.variable("w", 0.0)
    ...     error = G.subtract(G.multiply(x, w), target)
    ...     loss = G.reduce_mean(G.multiply(error, error))
    ...     train_op = G.GradientDescentOptimizer(0.1).minimize(loss)
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> _, before = session.run([train_op, loss], {x: [1.0], target: [2.0]})
    >>> float(before), round(float(session.variable_value("w")), 4)   # w -= 0.1 * 2 * (0 - 2)
    (4.0, 0.4)
    """

    def __init__(self, graph=None, kernel_threads=None, threads=None):
        from .core import Graph, get_default_graph
        self.graph = graph if graph is not None else get_default_graph()
        if not isinstance(self.graph, Graph):
            raise TypeError(f"graph must be an fqcore.graph.Graph or None, got "
                            f"{type(graph).__name__} {graph!r}")
        self._threads = RunThreads(threads, kernel_threads)
        self._store = {}
        self._plans = {}

    @property
    def threads(self):
        """The BLAS setting of this session's runs: "auto" or a thread count."""
        return self._threads.blas

    @property
    def kernel_threads(self):
        """fqcore's kernel threads during this session's runs (None: fqcore's setting)."""
        return self._threads.kernel

    # -- variable values ------------------------------------------------------------------
    def variable_value(self, name):
        """The current value of variable `name` (an op name or a Variable)."""
        name = getattr(getattr(name, "op", None), "name", name)
        try:
            return self._store[name].copy()
        except KeyError:
            self.graph.get_operation_by_name(name)  # unknown names raise KeyError there
            raise ValueError(f"variable {name!r} is not initialized") from None

    def set_variable_value(self, name, value):
        """Sets variable `name` to `value` (shape and dtype must match its definition)."""
        name = getattr(getattr(name, "op", None), "name", name)
        op = self.graph.get_operation_by_name(name)
        if op.type != "VariableV2":
            raise ValueError(f"{name!r} is a {op.type}, not a variable")
        value = np.asarray(value)
        shape, dtype = tuple(op.attrs["shape"]), np.dtype(op.attrs["dtype"])
        if value.shape != shape:
            raise ValueError(f"value for {name!r} has shape {value.shape}, the variable {shape}")
        if value.dtype != dtype and not np.can_cast(value.dtype, dtype, "same_kind"):
            raise ValueError(f"value for {name!r} has dtype {value.dtype}, the variable {dtype}")
        self._store[name] = value.astype(dtype, copy=True)

    def variable_values(self):
        """{variable name: value} for every initialized variable (copies)."""
        return {name: value.copy() for name, value in self._store.items()}

    # -- running --------------------------------------------------------------------------
    def run(self, fetches, feed_dict=None, update_state=True):
        """The values of `fetches` after one run of the ops they need.

        Parameters
        ----------
        fetches : Tensor, Operation, Variable, str, or a list, tuple or dict of them
            What to compute (names as ``"op"`` or ``"op:0"``); the result has the same structure.
        feed_dict : dict, optional
            Tensor (or its name) -> value for placeholders and any other tensor to override.
        update_state : bool, default True
            False runs without writing anything: write ops yield the stored value (evaluation of a
            training graph).

        Returns
        -------
        numpy.ndarray, None, or a list, tuple or dict of them
            Operations give None.

        Raises
        ------
        TypeError
            `feed_dict` not a dict, or an operation as a feed key.
        ValueError
            A missing or ill-shaped feed, an uninitialized variable, a fetch on a branch that did not
            run.

        Examples
        --------
        >>> import fqcore.graph as G
        >>> g = G.Graph()
        >>> with g.as_default():
        ...     x = G.placeholder("float32", [None], name="x")
        ...     target = G.placeholder("float32", [None], name="target")
        ...     w = G.variable("w", 0.0)
        ...     error = G.subtract(G.multiply(x, w), target)
        ...     loss = G.reduce_mean(G.multiply(error, error))
        >>> session = G.Session(g)
        >>> session.run(G.global_variables_initializer(g))
        >>> session.run({"loss": loss, "w": w}, {x: [1.0, 2.0], target: [1.0, 1.0]})
        {'loss': array(1., dtype=float32), 'w': array(0., dtype=float32)}
        """
        flat, rebuild = _flatten(fetches)
        elements = [self.graph.as_graph_element(f) for f in flat]
        feeds = {}
        if feed_dict is not None and not isinstance(feed_dict, dict):
            raise TypeError(f"feed_dict must be a dict of {{tensor: value}} or None, got "
                            f"{type(feed_dict).__name__}")
        for key, value in (feed_dict or {}).items():
            tensor = self.graph.as_graph_element(key)
            if not isinstance(tensor, Tensor):
                raise TypeError(f"feed_dict keys must be tensors, got operation {tensor.name!r}")
            feeds[tensor] = _feed_value(tensor, value)
        plan = self._plan(elements, feeds)
        run = _Run(self, plan, feeds, update_state)
        with cached_memory(), self._threads.applied():
            run.execute()
        results = [None] * len(elements)  # an operation gives None
        for k, tensor in plan.fetched:
            value = run.values[tensor]
            if value is DEAD:
                raise ValueError(f"fetched tensor {tensor.name!r} is on a branch that did not run")
            if isinstance(value, _Uninitialized):
                raise _not_initialized(value.name)
            # A copy: fetched arrays may be the variables' stored values, which must not change
            # behind the session's back.
            results[k] = np.array(value, copy=True)
        return rebuild(results)

    def _plan(self, elements, feeds):
        key = (tuple(map(id, elements)), frozenset(map(id, feeds)), self.graph._version)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) > 64:
                self._plans.clear()
            plan = self._plans[key] = _Plan(self.graph, elements, feeds)
        return plan


class _Plan:
    """The ops a set of fetches needs, in a fixed topological order (creation order among
    ready ops, so reads and writes happen in the order the graph was built), with the runs of
    ops one kernel call can do fused into single steps (fusion.py)."""

    def __init__(self, graph, elements, feeds):
        needed = set()
        stack = [e.op if isinstance(e, Tensor) else e for e in elements]
        fed_ops = {t.op for t in feeds}
        while stack:
            op = stack.pop()
            if op in needed:
                continue
            needed.add(op)
            for t in op.inputs:
                if t not in feeds:
                    stack.append(t.op)
            stack.extend(op.control_inputs)
        needed -= {op for op in fed_ops if all(t in feeds for t in op.outputs)}
        waiting = {op: 0 for op in needed}
        dependents = {op: [] for op in needed}
        for op in needed:
            for dep in {t.op for t in op.inputs if t not in feeds} | set(op.control_inputs):
                if dep in needed:
                    waiting[op] += 1
                    dependents[dep].append(op)
        ready = [(op._index, op) for op, n in waiting.items() if n == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, op = heapq.heappop(ready)
            order.append(op)
            for dependent in dependents[op]:
                waiting[dependent] -= 1
                if waiting[dependent] == 0:
                    heapq.heappush(ready, (dependent._index, dependent))
        if len(order) != len(needed):
            cycle = sorted(op.name for op, n in waiting.items() if n > 0)[:5]
            raise ValueError(f"the graph has a cycle through {cycle}")
        self.order = order
        # Only ops downstream of a Switch (through data or control edges) can see a dead value;
        # the others skip the check.
        can_die = set()
        for op in order:
            if op.type == "Switch" or any(t.op in can_die for t in op.inputs) or any(
                    c in can_die for c in op.control_inputs):
                can_die.add(op)
        self.can_die = can_die
        fusable = _fusable(order, can_die)
        self.foldable = _foldable(order, fusable, feeds)
        self.position = {op: i for i, op in enumerate(order)}
        # The fetched tensors, with their places among the fetches (the others are operations).
        self.fetched = [(k, e) for k, e in enumerate(elements) if isinstance(e, Tensor)]
        # The tensors read outside the steps: fetched, or fed.
        self.pinned = {e for _, e in self.fetched} | set(feeds)
        rules = _rules(order, self.pinned, fusable, self.foldable, self.position, can_die)
        self.units = units = fusion.fuse(order, rules)
        self.member_of = {op: unit for unit in units if isinstance(unit, fusion.Unit)
                          for op in unit.ops}
        reads = _variable_reads(order, rules.fusable)
        # (the tensors, the variables' names), in two tuples for the run to read them at once.
        self.variable_reads = tuple(t for t, _ in reads), tuple(name for _, name in reads)
        read_ops = {t.op for t in self.variable_reads[0]}
        steps = [(unit, unit.forward, unit.inputs, unit.outputs, (), False)
                 if isinstance(unit, fusion.Unit) else
                 (unit, op_def(unit.type).forward, unit.inputs, unit.outputs,
                  unit.control_inputs, unit in can_die and unit.type != "Merge")
                 for unit in units if unit not in read_ops]
        self.backprop_paths = {}
        self.reverse_codes = {}
        # (the steps, the foldable ops' outputs once a run has computed them, else None): one
        # attribute, so a run that starts while another folds sees both before or both after.
        self.stage = (steps, None)

    @property
    def steps(self):
        return self.stage[0]

    def fold(self, values):
        """After a run that succeeded: keeps the foldable ops' outputs (`values`) as constants of
        the plan and drops their steps, so later runs start from them; the steps left run in
        groups (step_runs.py)."""
        constants = {t: values[t] for op in self.foldable for t in op.outputs}
        self.stage = (step_runs.group([step for step in self.stage[0]
                                       if step[0] not in self.foldable]), constants)

    def backprop_path(self, gradients_op):
        """The differentiable ops between the Gradients op's xs and its y, in reverse execution
        order: (op, gradient function, the positions and tensors of the op's inputs whose
        gradient reverse mode sums: float tensors that depend on an x, and the Hidden values
        that carry a unit's input gradient back to another unit of the path; for a unit, the
        `needed` its gradient takes, else None)."""
        path = self.backprop_paths.get(gradients_op)
        if path is None:
            y, xs = gradients_op.inputs[0], gradients_op.inputs[1:]
            ancestors = set()
            stack = [y.op]
            while stack:
                op = stack.pop()
                if op in ancestors or op not in self.position:
                    continue
                ancestors.add(op)
                if gradient_function(op) is not None:  # else no gradient flows to its inputs
                    stack.extend(t.op for t in op.inputs)
            # The ops a gradient can reach an x through: a chain of differentiable ops (an
            # Assign or a StopGradient on the way ends it, as in TF).
            reached = {x.op for x in xs}
            for op in self.order:
                if (op in ancestors and op not in reached and any(t.op in reached for t in op.inputs)
                        and gradient_function(op) is not None):
                    reached.add(op)

            # In reverse execution order: each op, or each unit where it runs (every reader of
            # its outputs has given its gradient by then).
            on_path = []
            for op in reversed(self.order):
                unit = self.member_of.get(op)
                if unit is None:
                    if op in reached and op in ancestors and gradient_function(op) is not None:
                        on_path.append(op)
                elif op is unit.runs_at and any(m in reached and m in ancestors for m in unit.ops):
                    on_path.append(unit)
            units_on_path = set(on_path)

            def needs_gradient(t):
                """Whether reverse mode sums a gradient for the input t: a float tensor that
                depends on an x, or a Hidden link back to a unit that takes its gradient."""
                if isinstance(t, fusion.Hidden):
                    return t.producer in units_on_path
                return getattr(t, "op", None) in reached and np.dtype(t.dtype).kind == "f"

            path = []
            for step in on_path:
                summed = tuple((k, t) for k, t in enumerate(step.inputs) if needs_gradient(t))
                if isinstance(step, fusion.Unit):
                    needed = tuple(needs_gradient(t) for t in step.inputs)
                    path.append((step, step.gradient, summed, needed))
                else:
                    path.append((step, gradient_function(step), summed, None))
            self.backprop_paths[gradients_op] = path
        return path

    def reverse_mode(self, gradients_op):
        """The path of backprop_path as one function (reverse_code.py), made once."""
        code = self.reverse_codes.get(gradients_op)
        if code is None:
            y, xs = gradients_op.inputs[0], gradients_op.inputs[1:]
            code = self.reverse_codes[gradients_op] = reverse_code.compile_path(
                self.backprop_path(gradients_op), self.can_die, given=(y,), wanted=set(xs),
                read_later=self.read_after_path(gradients_op))
        return code

    def read_after_path(self, gradients_op):
        """The tensors whose values a run still reads once the reverse path of `gradients_op`
        is done: the pinned ones, the Gradients op's own inputs (_Run.backprop reads them), the
        foldable ops' outputs (fold keeps them after the first run), the inputs of every step
        after the Gradients op, and what the path of a later Gradients op reads."""
        later = set(self.pinned) | set(gradients_op.inputs)
        later.update(t for op in self.foldable for t in op.outputs)
        steps = self.stage[0]
        after = [op for op, *_ in steps].index(gradients_op) + 1
        for step in steps[after:]:
            later.update(step[2])
            if step[0].type == "Gradients":
                for op, _, _, _ in self.backprop_path(step[0]):
                    later.update(op.inputs)
                    later.update(op.outputs)
        return later


def _variable_reads(order, movable):
    """(tensor, variable name) for the reads a run makes before its steps, as every read of a run
    sees the value the variable had when the run started: each VariableV2's output, and an
    Identity of one (TF's `<variable>/read`); only `movable` ops (no control edge touches them, no
    dead branch reaches them: the plan rules' fusable)."""
    variables = {}
    for op in order:
        if not movable(op):
            continue
        if op.type == "VariableV2":
            variables[op] = op.name
        elif op.type == "Identity" and op.inputs[0].op in variables:
            variables[op] = variables[op.inputs[0].op]
    return [(op.outputs[0], name) for op, name in variables.items()]


# What a plan cannot fold however constant its inputs: control flow, reverse mode, and ops
# without inputs that are not Const (a Placeholder must be fed; a NoOp groups control edges).
_NOT_FOLDED = {"Switch", "Merge", "Gradients", "Placeholder", "NoOp"}


def _foldable(order, movable, feeds):
    """The ops whose outputs are the same in every run: Consts, and stateless ops that read only
    their outputs; only `movable` ops (as _variable_reads), none that a feed replaces."""
    fed_ops = {t.op for t in feeds}
    foldable = set()
    for op in order:
        if (not movable(op) or op in fed_ops or op.type in _NOT_FOLDED
                or op_def(op.type).stateful):
            continue
        if op.type == "Const" or (op.inputs and all(t.op in foldable for t in op.inputs)):
            foldable.add(op)
    return foldable


def _fusable(order, can_die):
    """fusable(op): whether `op` may join a unit or move, as no dead branch (Switch) can reach
    it and no control edge touches it."""
    controlling = {c for op in order for c in op.control_inputs}

    def fusable(op):
        return op not in can_die and not op.control_inputs and op not in controlling
    return fusable


def _rules(order, pinned, fusable, foldable, place, can_die):
    """What fusion may do with this plan (fusion.PlanRules). The tensors `pinned` (fetched or
    fed) are read outside the plan; `fusable` says which ops may join a unit; `foldable` holds
    the ops whose outputs are the same in every run; `place` maps each op of `order` to its
    index; `can_die` holds the ops a dead branch (Switch) can reach."""
    readers = {}
    for op in order:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)

    def sole_consumer(tensor):
        ops = readers.get(tensor, ())
        return ops[0] if len(ops) == 1 and tensor not in pinned else None

    def unread(tensor):
        return tensor not in readers and tensor not in pinned

    def readers_of(tensor):
        return readers.get(tensor, [])

    def is_pinned(tensor):
        return tensor in pinned

    def constant(tensor):
        return tensor.op in foldable

    def position(op):
        return place.get(op, -1)

    def live(op):
        return op not in can_die

    def following(op):
        for k in range(place.get(op, len(order)) + 1, len(order)):
            # A Const and a variable's read give the same wherever they run.
            if order[k] not in foldable and order[k].type != "VariableV2":
                return order[k]
        return None
    return fusion.PlanRules(sole_consumer, unread, readers_of, is_pinned, fusable, constant,
                            position, live, following)


class _Run:
    """The state of one Session.run: computed values, the variable snapshot, pending writes."""

    def __init__(self, session, plan, feeds, update_state):
        self.session = session
        self.plan = plan
        self.values = dict(feeds)
        self.snapshot = dict(session._store)
        self.update_state = update_state
        self.dead_ops = set()
        self.failing_op = None

    def execute(self):
        plan, values = self.plan, self.values
        steps, constants = plan.stage
        if constants is not None:
            values.update(constants)
        self.read_variables(*plan.variable_reads)
        operand = values.__getitem__
        for op, forward, inputs, outputs, controls, can_die in steps:
            args = list(map(operand, inputs))  # a step of grouped ops reads a hundred or more
            if can_die and (any(a is DEAD for a in args) or any(c in self.dead_ops for c in controls)):
                self.dead_ops.add(op)
                for t in outputs:
                    values[t] = DEAD
                continue
            # No name holds the results past the update: a reverse path that lets go of a value
            # (reverse_code.py) must be letting go of its last reference.
            values.update(zip(outputs, self._call(op, forward, args)))
        if constants is None and plan.stage[1] is None:
            plan.fold(values)

    def _call(self, op, forward, args):
        """forward(op, args, self), its ValueError or TypeError naming the op that failed."""
        try:
            return forward(op, args, self)
        except (ValueError, TypeError) as error:
            failed = self.failing_op or op  # a StepRun names its member
            message = str(error)
            if failed.name not in message:
                message = f"{failed.name} ({failed.type}): {message}"
            raise type(error)(message) from error

    def read_variables(self, tensors, names):
        """The run's values of `tensors`: the variables `names` as the run started, all at once
        (a call per read cost more than the lookups it makes)."""
        snapshot = self.snapshot
        self.values.update(zip(tensors, map(snapshot.get, names)))
        if not all(map(snapshot.__contains__, names)):  # variables not yet initialized
            for tensor, name in zip(tensors, names):
                if name not in snapshot:
                    self.values[tensor] = _Uninitialized(name)

    # Variable access for the state ops.
    def read_variable(self, name):
        value = self.snapshot.get(name, _UNSET)
        if value is _UNSET:
            return _Uninitialized(name)
        return value

    def current_variable(self, name):
        value = self.session._store.get(name, _UNSET)
        if value is _UNSET:
            raise _not_initialized(name)
        return value

    def current_variables(self, names):
        """current_variable of each of `names`, as a tuple (in one call: a tracker reads four)."""
        try:
            return tuple(map(self.session._store.__getitem__, names))
        except KeyError as missing:
            raise _not_initialized(missing.args[0]) from None

    def write_variable(self, name, value):
        self.session._store[name] = value

    def write_variables(self, names, values):
        """write_variable of each name with its value."""
        self.session._store.update(zip(names, values))

    def backprop(self, gradients_op):
        """Reverse mode from gradients_op's y to its xs over this run's values."""
        values = self.values
        y, xs = gradients_op.inputs[0], gradients_op.inputs[1:]
        grads = self.plan.reverse_mode(gradients_op)(values, {y: np.ones_like(values[y])},
                                                     self.dead_ops)
        return tuple([np.asarray(grads[x], values[x].dtype) if x in grads else
                      np.zeros_like(values[x]) for x in xs])


def _not_initialized(name):
    """The error for variable `name` used before its initializer ran."""
    return ValueError(f"variable {name!r} is used before it is initialized (run the initializer "
                      f"first)")


class _Uninitialized:
    """The value of a variable read before initialization; any use of it is an error."""

    def __init__(self, name):
        self.name = name

    def __getattr__(self, attribute):
        raise _not_initialized(self.name)

    def __array__(self, *args, **kwargs):
        self.__getattr__("__array__")


def _feed_value(tensor, value):
    dtype = tensor.dtype
    array = np.asarray(value)
    if dtype is not None and array.dtype != dtype:
        if not np.can_cast(array.dtype, dtype, "same_kind") and not (
                array.dtype.kind in "iu" and dtype.kind == "f"):
            raise TypeError(f"cannot feed a {array.dtype} value to {tensor.name!r} ({dtype})")
        if array.dtype.kind in "iu" and dtype.kind in "iu" and array.size and not np.can_cast(
                array.dtype, dtype, "safe"):
            info = np.iinfo(dtype)
            low, high = array.min(), array.max()
            if low < info.min or high > info.max:
                bad = low if low < info.min else high
                raise ValueError(f"cannot feed {array.dtype} value {bad} to {tensor.name!r} "
                                 f"({dtype}): out of its range")
        array = array.astype(dtype)
    shape = tensor.shape
    if shape is not None and (len(shape) != array.ndim or any(
            d is not None and d != n for d, n in zip(shape, array.shape))):
        raise ValueError(f"cannot feed a value of shape {array.shape} to {tensor.name!r}, "
                         f"which has shape {tuple(shape)}")
    return array


_STRUCTURES = (list, tuple, dict)


def _flatten(fetches):
    """Flattens nested fetches and returns (flat list, function rebuilding the structure)."""
    if isinstance(fetches, (list, tuple)):
        if not any(map(isinstance, fetches, repeat(_STRUCTURES))):  # no nesting: as they are
            return list(fetches), (list if isinstance(fetches, list) else
                                   partial(_same_kind_of_tuple, fetches))
        parts = [_flatten(f) for f in fetches]
        sizes = [len(p[0]) for p in parts]
        flat = [x for p in parts for x in p[0]]

        def rebuild(values):
            out, start = [], 0
            for (sub, fn), n in zip(parts, sizes):
                out.append(fn(values[start:start + n]))
                start += n
            return _same_kind_of_tuple(fetches, out) if isinstance(fetches, tuple) else out
        return flat, rebuild
    if isinstance(fetches, dict):
        keys = list(fetches)
        flat_list, fn = _flatten([fetches[k] for k in keys])
        return flat_list, lambda values: dict(zip(keys, fn(values)))
    return [fetches], lambda values: values[0]


def _same_kind_of_tuple(fetches, values):
    """`values` as a tuple of the type of `fetches`: a namedtuple takes them as its fields."""
    if hasattr(type(fetches), "_make"):
        return type(fetches)._make(values)
    return type(fetches)(values)
