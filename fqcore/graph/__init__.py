"""fqcore.graph: a small TF1-style dataflow graph, its training engine and layer builders."""
from ..array_memory import release_cached_memory
from . import build, checkpoint, layers, optimizers
from .build import (add, avg_pool, bias_add, cast, cond, constant, conv2d, depthwise_conv2d,
                    divide, fake_quant_with_min_max_args, fake_quant_with_min_max_vars,
                    fake_quant_with_min_max_vars_per_channel, fused_batch_norm, group, identity,
                    matmul, max_pool, maximum, minimum, multiply, no_op, placeholder,
                    reduce_max, reduce_mean, reduce_min, reduce_sum, relu, relu6, reshape, rsqrt,
                    sigmoid, softmax, sparse_softmax_cross_entropy_with_logits, subtract, tanh)
from .checkpoint import (load_graph, load_variables, restore, save, save_graph,
                         save_variables)
from .core import (Graph, GraphKeys, Operation, Tensor, control_dependencies, get_default_graph,
                   name_scope, reset_default_graph)
from .graph_copy import copy_graph
from .graph_json import (graph_from_json, graph_to_json, read_graph_json,
                         write_graph_json)
from .optimizers import AdamOptimizer, GradientDescentOptimizer, MomentumOptimizer
from .session import Session
from .variables import (Variable, find_variable, global_variables, global_variables_initializer,
                        trainable_variables, variable, variables_initializer)

__all__ = [
    "Graph", "GraphKeys", "Operation", "Tensor", "Session", "Variable", "build", "checkpoint",
    "layers", "save", "restore", "save_graph", "load_graph", "save_variables", "load_variables",
    "optimizers", "get_default_graph", "reset_default_graph", "name_scope", "control_dependencies",
    "variable", "find_variable", "global_variables", "trainable_variables",
    "global_variables_initializer", "variables_initializer", "GradientDescentOptimizer",
    "MomentumOptimizer", "AdamOptimizer", "add", "avg_pool", "bias_add", "cast", "cond", "constant",
    "conv2d", "depthwise_conv2d", "divide", "fake_quant_with_min_max_args",
    "fake_quant_with_min_max_vars", "fake_quant_with_min_max_vars_per_channel", "fused_batch_norm",
    "group", "identity", "matmul", "max_pool", "maximum", "minimum", "multiply", "no_op",
    "placeholder", "reduce_max", "reduce_mean", "reduce_min", "reduce_sum", "relu", "relu6",
    "reshape", "rsqrt", "sigmoid", "softmax", "sparse_softmax_cross_entropy_with_logits",
    "subtract", "tanh", "copy_graph", "graph_to_json", "graph_from_json", "write_graph_json",
    "read_graph_json", "release_cached_memory",
]
