"""The graph IR: operations, tensors, name scopes, collections and the default graph (TF1's shape)."""
import contextlib
import re
import threading
from typing import ContextManager, Sequence, Union

import numpy as np

from ..safe_names import path_problem

_NAME_PATTERN = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\-/]*")
NAME_RULE = ("letters, digits and . _ - /, not starting with _ - or /, with no component "
             "(between slashes) that is '.' or '..'")


def is_valid_name(name):
    """TF's op-name rule (without its '>'), less the '.' and '..' components TF accepts: op
    names become entry names in checkpoint archives, where those would read as paths."""
    return isinstance(name, str) and bool(_NAME_PATTERN.fullmatch(name)) and \
        path_problem(name) is None


class GraphKeys:
    """Collection names, as TF1 spells them (rewrites and optimizers look these up).

    GLOBAL_VARIABLES (``"variables"``) and TRAINABLE_VARIABLES hold Variables; UPDATE_OPS the
    ops a training step must also run (batch norms' moving statistics); TRAIN_OP the train op.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     w = G.variable("w", 1.0)
    >>> g.get_collection(G.GraphKeys.TRAINABLE_VARIABLES)
    [<Variable 'w' shape=() dtype=float32>]
    """
    GLOBAL_VARIABLES = "variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    UPDATE_OPS = "update_ops"
    TRAIN_OP = "train_op"


class Tensor:
    """Output `index` of an operation, named ``<op>:<index>`` as in TF.

    Tensors are made by the functions that add ops; ``+``, ``-``, ``*`` and ``/`` add the
    matching op.

    Parameters
    ----------
    op : Operation
        The operation whose output it is.
    index : int
        Which output.
    shape : tuple or None
        The static shape, None entries for unknown sizes (None: unknown rank).
    dtype : numpy.dtype
        The element type.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 3], name="x")
    ...     y = x * 2.0
    >>> x.name, x.shape, x.dtype, y.op.type
    ('x:0', (None, 3), dtype('float32'), 'Mul')
    """
    __slots__ = ("op", "index", "shape", "dtype")

    def __init__(self, op, index, shape, dtype):
        self.op = op
        self.index = index
        self.shape = shape
        self.dtype = dtype

    @property
    def name(self):
        return f"{self.op.name}:{self.index}"

    @property
    def graph(self):
        return self.op.graph

    def consumers(self):
        """The operations that read this tensor, in creation order."""
        return [op for op in self.op.graph.get_operations()
                if any(t is self for t in op.inputs)]

    def __repr__(self):
        return f"<Tensor {self.name!r} shape={self.shape} dtype={self.dtype}>"

    # Operators build ops with TF's default names (add, sub, mul, truediv), as TF1's rewrite does.
    def __add__(self, other):
        from . import build
        return build.add(self, other)

    def __radd__(self, other):
        from . import build
        return build.add(other, self)

    def __sub__(self, other):
        from . import build
        return build.subtract(self, other)

    def __rsub__(self, other):
        from . import build
        return build.subtract(other, self)

    def __mul__(self, other):
        from . import build
        return build.multiply(self, other)

    def __rmul__(self, other):
        from . import build
        return build.multiply(other, self)

    def __truediv__(self, other):
        from . import build
        return build.divide(self, other)

    def __rtruediv__(self, other):
        from . import build
        return build.divide(other, self)


class Operation:
    """A node: unique name, TF op type, input tensors, control inputs, attributes, outputs.

    Operations are made by the functions that add ops (or ``Graph.create_op``).

    Parameters
    ----------
    graph : Graph
        The graph it belongs to.
    name : str
        Its unique name.
    op_type : str
        The TF op type (``Conv2D``, ``MatMul``, ...), kept as ``.type``.
    inputs : list of Tensor
        The input tensors.
    attrs : dict
        The op's attributes (``get_attr`` reads one).
    output_specs : list of (shape, dtype)
        One per output tensor.
    control_inputs : sequence of Operation, default ()
        Ops that must run first.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     y = G.matmul(G.constant([[1.0]]), G.constant([[2.0]]), transpose_b=True)
    >>> y.op, y.op.get_attr("transpose_b"), [t.name for t in y.op.inputs]
    (<Operation 'MatMul' type=MatMul>, True, ['Const:0', 'Const_1:0'])
    """

    def __init__(self, graph, name, op_type, inputs, attrs, output_specs, control_inputs=()):
        self.graph = graph
        self.name = name
        self.type = op_type
        self.inputs = list(inputs)
        self.control_inputs = list(control_inputs)
        self.attrs = dict(attrs)
        self.outputs = [Tensor(self, i, shape, dtype) for i, (shape, dtype) in enumerate(output_specs)]

    def __repr__(self):
        return f"<Operation {self.name!r} type={self.type}>"

    def get_attr(self, key):
        try:
            return self.attrs[key]
        except KeyError:
            raise ValueError(f"operation {self.name!r} has no attribute {key!r}") from None

    def _update_input(self, index, tensor):
        """Reroutes input `index` to `tensor` (the rewrite's tool); known shapes must agree."""
        if tensor.graph is not self.graph:
            raise ValueError(f"tensor {tensor.name!r} is from another graph than {self.name!r}")
        old = self.inputs[index].shape
        new = tensor.shape
        if old is not None and new is not None and (len(old) != len(new) or any(
                a is not None and b is not None and a != b for a, b in zip(old, new))):
            raise ValueError(f"cannot reroute input {index} of {self.name!r} (shape {old}) to "
                             f"{tensor.name!r} (shape {new})")
        self.inputs[index] = tensor
        self.graph._version += 1


class Graph:
    """A TF1-style dataflow graph: build with name scopes, look up, reroute, insert.

    Ops are added to the default graph: the innermost ``with graph.as_default():``. A graph holds
    no values: a :class:`Session` runs it. It takes no arguments.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None], name="x")
    ...     with g.name_scope("block"):
    ...         y = G.relu(x)
    >>> [op.name for op in g.get_operations()]
    ['x', 'block/Relu']
    >>> g.get_tensor_by_name("block/Relu:0") is y
    True
    """

    def __init__(self):
        self._ops = {}
        self._order = []
        self._names_in_use = {}
        self._scope = ""
        self._collections = {}
        self._control_stack = []
        self._version = 0
        self.seed = 0
        self._init_rng = None
        # What the last quantization rewrite left out (fqcore.quantize.RewriteReport).
        self.quantize_report = None

    def initializer_rng(self):
        """The stream layers draw initial weights from: PCG64(graph.seed), made on first use, so
        set `graph.seed` before building."""
        if self._init_rng is None:
            self._init_rng = np.random.Generator(np.random.PCG64(self.seed))
        return self._init_rng

    # -- building -------------------------------------------------------------------------
    @contextlib.contextmanager
    def as_default(self):
        """Makes this the graph that builders and layers add to, for the `with` block."""
        _default.stack.append(self)
        try:
            yield self
        finally:
            _default.stack.pop()

    @contextlib.contextmanager
    def name_scope(self, name):
        """Nested scope: `name` is made unique, like TF's (a trailing '/' re-enters it as is)."""
        old = self._scope
        if name is None or name == "":
            self._scope = "" if name == "" else old
        elif name.endswith("/"):
            self._scope = name[:-1]
        else:
            self._scope = self.unique_name(name)
        try:
            yield self._scope + "/" if self._scope else ""
        finally:
            self._scope = old

    def get_name_scope(self):
        return self._scope

    def unique_name(self, name, mark_as_used=True):
        """`scope/name`, with `_1`, `_2`, ... appended when taken (TF's rule)."""
        full = f"{self._scope}/{name}" if self._scope else name
        key = full.lower()
        count = self._names_in_use.get(key, 0)
        if mark_as_used:
            self._names_in_use[key] = count + 1
        if count > 0:
            base = full
            while True:
                full = f"{base}_{count}"
                if full.lower() not in self._names_in_use:
                    break
                count += 1
            if mark_as_used:
                self._names_in_use[full.lower()] = 1
        return full

    @contextlib.contextmanager
    def control_dependencies(self, ops):
        """Operations created in the block run after `ops`."""
        self._control_stack.append([_as_operation(o) for o in ops])
        try:
            yield
        finally:
            self._control_stack.pop()

    def create_op(self, op_type, inputs, attrs=None, name=None, output_specs=None,
                  control_inputs=(), full_name=None):
        """Adds an operation named `name` (made unique in the current scope), or exactly
        `full_name` when the caller reserved it (an op named after the scope it opened)."""
        from .op_registry import op_def
        definition = op_def(op_type)
        inputs = [_as_tensor(t, self) for t in inputs]
        attrs = dict(attrs or {})
        if full_name is not None:
            if full_name in self._ops:
                raise ValueError(f"an operation named {full_name!r} already exists")
            self._names_in_use.setdefault(full_name.lower(), 1)
            unique = full_name
        else:
            unique = self.unique_name(name or op_type)
        if not is_valid_name(unique):
            raise ValueError(f"invalid operation name {unique!r}: use {NAME_RULE}")
        controls = [op for frame in self._control_stack for op in frame] + [
            _as_operation(o) for o in control_inputs]
        if output_specs is None:
            output_specs = definition.infer(inputs, attrs)
        op = Operation(self, unique, op_type, inputs, attrs, output_specs, controls)
        op._index = len(self._order)
        self._ops[unique] = op
        self._order.append(op)
        self._version += 1
        return op

    # -- looking up -----------------------------------------------------------------------
    def get_operations(self):
        return list(self._order)

    def get_operation_by_name(self, name):
        try:
            return self._ops[name]
        except KeyError:
            raise KeyError(f"no operation named {name!r} in the graph") from None

    def get_tensor_by_name(self, name):
        op_name, sep, index = name.rpartition(":")
        if not sep or not index.isdigit():
            raise ValueError(f"tensor names look like 'op:0', got {name!r}")
        op = self.get_operation_by_name(op_name)
        if int(index) >= len(op.outputs):
            raise KeyError(f"operation {op_name!r} has {len(op.outputs)} outputs, no {name!r}")
        return op.outputs[int(index)]

    def as_graph_element(self, obj):
        """A Tensor or Operation from either itself or its name."""
        if isinstance(obj, (Tensor, Operation)):
            if obj.graph is not self:
                raise ValueError(f"{obj!r} belongs to another graph")
            return obj
        if hasattr(obj, "op") and hasattr(obj, "read"):  # a Variable: its value
            return obj.read
        if isinstance(obj, str):
            return self.get_tensor_by_name(obj) if ":" in obj else self.get_operation_by_name(obj)
        raise TypeError(f"expected a Tensor, an Operation or a name, got {type(obj).__name__}")

    # -- collections ----------------------------------------------------------------------
    def add_to_collection(self, key, value):
        self._collections.setdefault(key, []).append(value)

    def get_collection(self, key):
        return list(self._collections.get(key, []))

    def get_all_collection_keys(self):
        return list(self._collections)


class _DefaultGraphStack(threading.local):
    def __init__(self):
        self.stack = []
        self.global_default = None


_default = _DefaultGraphStack()


def get_default_graph() -> Graph:
    """The graph ops are added to: that of the innermost ``with g.as_default():``, else one
    global graph.

    Returns
    -------
    Graph
        The default graph.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     G.get_default_graph() is g
    True
    """
    if _default.stack:
        return _default.stack[-1]
    if _default.global_default is None:
        _default.global_default = Graph()
    return _default.global_default


def reset_default_graph() -> None:
    """Replaces the global default graph with an empty one.

    Raises
    ------
    RuntimeError
        Inside a ``with graph.as_default():`` block.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> before = G.get_default_graph()
    >>> G.reset_default_graph()
    >>> G.get_default_graph() is before
    False
    """
    if _default.stack:
        raise RuntimeError("reset_default_graph() inside a `with graph.as_default():` block")
    _default.global_default = Graph()


def name_scope(name: str) -> ContextManager[str]:
    """A context in which the default graph's new ops are named ``<name>/...`` (TF's
    ``tf.name_scope``).

    Parameters
    ----------
    name : str
        The scope's name, nested in the current scope (a name ending with ``/`` is taken as a full
        scope).

    Returns
    -------
    context manager
        Entering it gives the scope's prefix, ``"<scope>/"``.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default(), G.name_scope("conv1") as scope:
    ...     w = G.constant(1.0, name="weights")
    >>> scope, w.name
    ('conv1/', 'conv1/weights:0')
    """
    return get_default_graph().name_scope(name)


def control_dependencies(ops: Sequence[Union[Operation, Tensor]]) -> ContextManager[None]:
    """A context in which the default graph's new ops run only after `ops` (TF's
    ``tf.control_dependencies``).

    Parameters
    ----------
    ops : list of Operation or Tensor
        What must run first.

    Returns
    -------
    context manager
        Adds `ops` to the control inputs of every op made inside it.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     first = G.no_op(name="first")
    ...     with G.control_dependencies([first]):
    ...         second = G.no_op(name="second")
    >>> second.control_inputs
    [<Operation 'first' type=NoOp>]
    """
    return get_default_graph().control_dependencies(ops)


def _as_operation(obj):
    if isinstance(obj, Operation):
        return obj
    if isinstance(obj, Tensor):
        return obj.op
    if hasattr(obj, "op") and hasattr(obj, "read"):
        return obj.op
    raise TypeError(f"expected an Operation or Tensor, got {type(obj).__name__}")


def _as_tensor(value, graph):
    """Tensors pass through; variables give their read tensor; values become Const ops."""
    if isinstance(value, Tensor):
        if value.graph is not graph:
            raise ValueError(f"tensor {value.name!r} belongs to another graph")
        return value
    if hasattr(value, "read") and hasattr(value, "op"):
        return value.read
    from . import build
    return build.constant(value)
