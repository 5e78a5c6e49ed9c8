"""Variables as TF1 builds them: VariableV2, <name>/Initializer/..., <name>/Assign, <name>/read."""
import numpy as np

from . import build
from .core import GraphKeys, get_default_graph


class Variable:
    """A graph variable: `op` holds the state, `read` is the tensor consumers use, `initializer`
    the Assign that sets the initial value. The value itself lives in a Session."""

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


def variable(name, initial_value, dtype=None, trainable=True, collections=None,
             initializer_name="Const"):
    """Creates a variable `name` (in the current name scope) initialised to `initial_value`.
    `initializer_name` names the Const under `<name>/Initializer/` ("zeros" for zero fills)."""
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


def global_variables(graph=None):
    return (graph or get_default_graph()).get_collection(GraphKeys.GLOBAL_VARIABLES)


def trainable_variables(graph=None):
    return (graph or get_default_graph()).get_collection(GraphKeys.TRAINABLE_VARIABLES)


def find_variable(name, graph=None):
    """The Variable whose op is named `name` (or None)."""
    for var in global_variables(graph):
        if var.op.name == name:
            return var
    return None


def variables_initializer(var_list, name="init"):
    return build.group(*[v.initializer for v in var_list], name=name)


def global_variables_initializer(graph=None):
    """One op that initializes every global variable of `graph` (default: the default graph)."""
    graph = graph or get_default_graph()
    with graph.as_default():
        return variables_initializer(global_variables(graph), name="init")
