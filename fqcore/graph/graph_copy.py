"""copy_graph: an independent copy of a Graph, which a rewrite can change without the original.

The copy has the ops, wiring, attributes, collections, name counters and initializer stream."""
import copy

import numpy as np

from .core import Graph, Operation, Tensor
from .graph_state import check_member
from .variables import Variable

__all__ = ["copy_graph"]


def copy_graph(graph: Graph) -> Graph:
    """A new Graph equal to `graph` and sharing nothing mutable with it.

    The copy has the same ops in the same creation order (names, types, inputs in order, control
    inputs, output shapes and dtypes), deep copies of their attributes (read-only arrays stay
    read-only), the same collections with every Variable, Operation and Tensor replaced by the
    copy's own (one new Variable per original Variable object, so a variable listed in several
    collections is still one object), the same unique-name counters (a new op named like an
    existing one gets the same `_k` suffix in both graphs), `seed`, and an independent copy of the
    initializer stream in its current state (both graphs draw the same next initial weights).

    The copy starts at the top-level name scope with no control dependencies, whatever `with`
    blocks of the original are open. Variable values live in Sessions, not graphs: run the copy's
    initializer (or load values) in a Session of the copy.

    Parameters
    ----------
    graph : Graph
        The graph to copy.

    Returns
    -------
    Graph
        The copy.

    Raises
    ------
    TypeError
        `graph` is not a Graph.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     y = G.relu(G.placeholder("float32", [None], name="x"))
    >>> copy = G.copy_graph(g)
    >>> [op.name for op in copy.get_operations()], copy.get_operations()[0] is g.get_operations()[0]
    (['x', 'Relu'], False)
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be an fqcore.graph.Graph, got {type(graph).__name__} "
                        f"{graph!r}")
    ops = graph.get_operations()
    for op in ops:
        for i, t in enumerate(op.inputs):
            _check_member(graph, getattr(t, "op", None), f"input {i} ({t!r}) of operation "
                                                         f"{op.name!r}")
        for i, c in enumerate(op.control_inputs):
            _check_member(graph, c, f"control input {i} ({c!r}) of operation {op.name!r}")

    new = Graph()
    # deepcopy's memo maps every element of the original to the copy's, so that anything a
    # collection item or Variable refers to lands in the copy instead of dragging the original
    # (and its whole graph) along.
    memo = {id(graph): new}
    clones = {}
    for op in ops:
        specs = [(t.shape, t.dtype) for t in op.outputs]
        clone = new.create_op(op.type, [], _copy_value(op.attrs, memo), output_specs=specs,
                              full_name=op.name)
        clones[op] = clone
        memo[id(op)] = clone
        for t, ct in zip(op.outputs, clone.outputs):
            memo[id(t)] = ct
    for op in ops:
        clone = clones[op]
        clone.inputs = [clones[t.op].outputs[t.index] for t in op.inputs]
        clone.control_inputs = [clones[c] for c in op.control_inputs]
    new._names_in_use = dict(graph._names_in_use)
    new.seed = copy.deepcopy(graph.seed)
    if graph._init_rng is not None:
        new._init_rng = copy.deepcopy(graph._init_rng)

    for key in graph.get_all_collection_keys():
        for index, item in enumerate(graph.get_collection(key)):
            where = f"collection {key!r} item {index}"
            if isinstance(item, Variable):
                for part, element in (("op", item.op), ("read", getattr(item.read, "op", None)),
                                      ("initializer", item.initializer)):
                    if part != "initializer" or element is not None:
                        _check_member(graph, element, f"{where} (variable {item!r}, its {part})")
            elif isinstance(item, Operation):
                _check_member(graph, item, where)
            elif isinstance(item, Tensor):
                _check_member(graph, item.op, where)
            try:
                new.add_to_collection(copy.deepcopy(key, memo), _copy_value(item, memo))
            except Exception as error:  # an arbitrary user object that cannot be copied
                raise TypeError(f"{where} ({type(item).__name__}) cannot be copied: "
                                f"{error}") from error
    new._version += 1
    return new


def _check_member(graph, op, what):
    check_member(graph, op, f"cannot copy the graph: {what}")


def _copy_value(value, memo):
    """A deep copy in which numpy arrays keep their read-only flag (Const values are read-only)."""
    if isinstance(value, np.ndarray):
        key = id(value)
        if key not in memo:
            clone = np.array(value, copy=True)
            if not value.flags.writeable:
                clone.setflags(write=False)
            memo[key] = clone
        return memo[key]
    if type(value) is dict:
        return {copy.deepcopy(k, memo): _copy_value(v, memo) for k, v in value.items()}
    if type(value) is list:
        return [_copy_value(v, memo) for v in value]
    if type(value) is tuple:
        return tuple(_copy_value(v, memo) for v in value)
    return copy.deepcopy(value, memo)
