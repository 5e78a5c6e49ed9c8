"""Variables as TF1 builds them: VariableV2, <name>/Initializer/..., <name>/Assign, <name>/read."""
from __future__ import annotations

from typing import Iterable, List, Optional, Sequence

import numpy as np
import numpy.typing as npt

from . import build
from .core import Graph, GraphKeys, Operation, get_default_graph


class Variable:
    """A graph variable, as TF1 builds it; its value lives in a Session.

    Made by :func:`variable` (or the layer builders). In expressions it stands for its ``read``
    tensor.

    Parameters
    ----------
    op : Operation
        The VariableV2 op that holds the state.
    read : Tensor
        ``<name>/read``, the tensor consumers use.
    initializer : Operation
        ``<name>/Assign``, which sets the initial value.
    trainable : bool
        Whether optimizers update it by default.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     w = G.variable("w", [1.0, 2.0])
    >>> w, w.read.name, w.initializer.name
    (<Variable 'w' shape=(2,) dtype=float32>, 'w/read:0', 'w/Assign')
    """

    def __init__(self, op, read, initializer, trainable):
        self.op = op
        self.read = read
        self.initializer = initializer
        self.trainable = trainable

    @property
    def name(self):
        return self.op.name + ":0"

    @property
    def shape(self):
        return self.op.outputs[0].shape

    @property
    def dtype(self):
        return self.op.outputs[0].dtype

    @property
    def graph(self):
        return self.op.graph

    def value(self):
        return self.read

    def __repr__(self):
        return f"<Variable {self.op.name!r} shape={self.shape} dtype={self.dtype.name}>"


def variable(name: str, initial_value: npt.ArrayLike, dtype: Optional[npt.DTypeLike] = None,
             trainable: bool = True, collections: Optional[Sequence[str]] = None,
             initializer_name: str = "Const") -> Variable:
    """Creates a variable in the current name scope, initialized to `initial_value`.

    Parameters
    ----------
    name : str
        Its name in the current name scope; it must not exist yet.
    initial_value : array_like
        The initial value (float64 becomes float32).
    dtype : str or numpy.dtype, optional
        The element type (default: from the value).
    trainable : bool, default True
        Join TRAINABLE_VARIABLES, which optimizers update.
    collections : list of str, optional
        The collections it joins (default: GLOBAL_VARIABLES, and TRAINABLE_VARIABLES when
        trainable).
    initializer_name : str, default "Const"
        The name of the Const under ``<name>/Initializer/`` (``"zeros"`` for zero fills).

    Returns
    -------
    Variable
        The new variable.

    Raises
    ------
    ValueError
        A variable of that name exists.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default(), G.name_scope("dense"):
    ...     b = G.variable("bias", [0.0, 0.0])
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> b.op.name, session.variable_value("dense/bias")
    ('dense/bias', array([0., 0.], dtype=float32))
    """
    g = get_default_graph()
    value = np.asarray(initial_value, dtype=dtype if dtype is not None else None)
    if dtype is None and value.dtype == np.float64:
        value = value.astype(np.float32)
    full = g.unique_name(name)
    if full != (f"{g.get_name_scope()}/{name}" if g.get_name_scope() else name):
        raise ValueError(f"variable {full.rsplit('_', 1)[0]!r} already exists in the graph")
    with g.name_scope(full + "/Initializer/"):
        init_value = build.constant(value, dtype=value.dtype, name=initializer_name)
    op = g.create_op("VariableV2", [], {"shape": list(value.shape), "dtype": value.dtype.name},
                     full_name=full)
    with g.name_scope(full + "/"):
        assign = g.create_op("Assign", [op.outputs[0], init_value],
                             {"validate_shape": True, "use_locking": True}, name="Assign")
        read = build.identity(op.outputs[0], name="read")
    var = Variable(op, read, assign, trainable)
    if collections is None:
        collections = [GraphKeys.GLOBAL_VARIABLES] + ([GraphKeys.TRAINABLE_VARIABLES] if trainable else [])
    for key in collections:
        g.add_to_collection(key, var)
    return var


def global_variables(graph: Optional[Graph] = None) -> List[Variable]:
    """The graph's GLOBAL_VARIABLES collection: every variable.

    Parameters
    ----------
    graph : Graph, optional
        Default: the default graph.

    Returns
    -------
    list of Variable
        In creation order.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     a = G.variable("a", 1.0)
    ...     step = G.variable("step", 0, trainable=False)
    >>> G.global_variables(g)
    [<Variable 'a' shape=() dtype=float32>, <Variable 'step' shape=() dtype=int64>]
    """
    return (graph or get_default_graph()).get_collection(GraphKeys.GLOBAL_VARIABLES)


def trainable_variables(graph: Optional[Graph] = None) -> List[Variable]:
    """The graph's TRAINABLE_VARIABLES collection: what optimizers update by default.

    Parameters
    ----------
    graph : Graph, optional
        Default: the default graph.

    Returns
    -------
    list of Variable
        In creation order.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     a = G.variable("a", 1.0)
    ...     step = G.variable("step", 0, trainable=False)
    >>> G.trainable_variables(g)
    [<Variable 'a' shape=() dtype=float32>]
    """
    return (graph or get_default_graph()).get_collection(GraphKeys.TRAINABLE_VARIABLES)


def find_variable(name: str, graph: Optional[Graph] = None) -> Optional[Variable]:
    """The variable whose op is named `name`, or None.

    Parameters
    ----------
    name : str
        The VariableV2 op's full name.
    graph : Graph, optional
        Default: the default graph.

    Returns
    -------
    Variable or None
        The variable, None when there is none of that name.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default(), G.name_scope("conv1"):
    ...     w = G.variable("weights", 1.0)
    >>> G.find_variable("conv1/weights", g) is w, G.find_variable("nothing", g)
    (True, None)
    """
    for var in global_variables(graph):
        if var.op.name == name:
            return var
    return None


def variables_initializer(var_list: Iterable[Variable], name: str = "init") -> Operation:
    """One op that runs the initializers of `var_list`.

    Parameters
    ----------
    var_list : list of Variable
        The variables to initialize.
    name : str, default "init"
        The op's name.

    Returns
    -------
    Operation
        A NoOp whose control inputs are the Assign ops.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     a = G.variable("a", 3.0)
    ...     init = G.variables_initializer([a], name="init_a")
    >>> session = G.Session(g)
    >>> session.run(init)
    >>> float(session.variable_value("a"))
    3.0
    """
    return build.group(*[v.initializer for v in var_list], name=name)


def global_variables_initializer(graph: Optional[Graph] = None) -> Operation:
    """One op that initializes every global variable of a graph.

    Parameters
    ----------
    graph : Graph, optional
        Default: the default graph.

    Returns
    -------
    Operation
        ``init``: run it once in a new session.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     a = G.variable("a", 3.0)
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> float(session.variable_value("a"))
    3.0
    """
    graph = graph or get_default_graph()
    with graph.as_default():
        return variables_initializer(global_variables(graph), name="init")
