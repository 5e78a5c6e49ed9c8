"""fqcore.quantize: contrib.quantize's graph rewrite (batch-norm folding, then fake-quant
insertion), with TF 1.15's function names and defaults. Each call rewrites the graph in place
and returns None; it must run before an optimizer is attached. As in contrib, folded batch norms
and quantized tensors are skipped, so rewriting a rewritten graph again changes nothing, whatever
the second call's options.

fqcore extensions (keyword-only, defaults reproduce contrib): weight_symmetric (None follows
`symmetric`; a bool sets the weight quantizers' flag alone) and weight_per_channel (per-output-
channel symmetric narrow weight ranges, which int8 backends such as TFLite's require)."""
from ..graph.core import get_default_graph
from . import fold_batch_norms, insert

__all__ = ["create_training_graph", "create_eval_graph", "experimental_create_training_graph",
           "experimental_create_eval_graph"]

_TRAINING_OPS = frozenset([
    "ApplyAdagrad", "ApplyAdagradDA", "ApplyAdam", "ApplyCenteredRMSProp", "ApplyFtrl",
    "ApplyFtrlV2", "ApplyGradientDescent", "ApplyMomentum", "ApplyProximalAdagrad",
    "ApplyProximalGradientDescent", "ApplyRMSProp", "ResourceApplyAdadelta",
    "ResourceApplyAdagrad", "ResourceApplyAdagradDA", "ResourceApplyAdam",
    "ResourceApplyCenteredRMSProp", "ResourceApplyFtrl", "ResourceApplyFtrlV2",
    "ResourceApplyGradientDescent", "ResourceApplyMomentum", "ResourceApplyProximalAdagrad",
    "ResourceApplyProximalGradientDescent", "ResourceApplyRMSProp", "SparseApplyAdadelta",
    "SparseApplyAdagrad", "SparseApplyAdagradDA", "SparseApplyCenteredRMSProp", "SparseApplyFtrl",
    "SparseApplyFtrlV2", "SparseApplyMomentum", "SparseApplyProximalAdagrad",
    "SparseApplyProximalGradientDescent", "SparseApplyRMSProp"])


def _check_bits(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= 16:
        raise ValueError(f"{name} must be an int in [2, 16], got {value!r}")


def _check_delay(name, value):
    # The delay is compared with the int64 global step.
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or
                              not 0 <= value < 2**63):
        raise ValueError(f"{name} must be None or a non-negative int below 2**63, got {value!r}")


def _check_flag(name, value, allow_none=False):
    if not (isinstance(value, bool) or allow_none and value is None):
        raise ValueError(f"{name} must be a bool{' or None' if allow_none else ''}, got {value!r}")


def _create_graph(input_graph, is_training, weight_bits=8, activation_bits=8, symmetric=False,
                  quant_delay=None, freeze_bn_delay=None, scope=None, weight_symmetric=None,
                  weight_per_channel=False):
    graph = input_graph if input_graph is not None else get_default_graph()
    if not hasattr(graph, "get_operations"):
        raise TypeError(f"input_graph must be an fqcore.graph.Graph, got {type(input_graph).__name__}")
    _check_bits("weight_bits", weight_bits)
    _check_bits("activation_bits", activation_bits)
    _check_delay("quant_delay", quant_delay)
    _check_delay("freeze_bn_delay", freeze_bn_delay)
    _check_flag("symmetric", symmetric)
    _check_flag("weight_symmetric", weight_symmetric, allow_none=True)
    _check_flag("weight_per_channel", weight_per_channel)
    if weight_per_channel and weight_symmetric is False:
        raise ValueError("weight_symmetric=False contradicts weight_per_channel=True, whose "
                         "weight ranges are always symmetric")
    if scope is not None and not isinstance(scope, str):
        raise TypeError(f"scope must be a string or None, got {scope!r}")
    found = {op.type for op in graph.get_operations()} & _TRAINING_OPS
    if found:
        raise ValueError(f"Training op found in graph, exiting {found}")
    with graph.as_default():
        if weight_per_channel:
            # Before folding, so that a refused layer leaves the graph untouched.
            insert.check_per_channel_weights(graph, scope)
        fold_batch_norms.fold_batch_norms(graph, is_training, freeze_bn_delay)
        insert.quantize(graph, is_training, weight_bits=weight_bits,
                        activation_bits=activation_bits, symmetric=symmetric,
                        quant_delay=quant_delay, scope=scope, weight_symmetric=weight_symmetric,
                        weight_per_channel=weight_per_channel)


def create_training_graph(input_graph=None, quant_delay=0, *, weight_symmetric=None,
                          weight_per_channel=False):
    """Rewrites for quantization-aware training at 8 bits (batch norms never frozen)."""
    _create_graph(input_graph, True, quant_delay=quant_delay, weight_symmetric=weight_symmetric,
                  weight_per_channel=weight_per_channel)


def create_eval_graph(input_graph=None, *, weight_symmetric=None, weight_per_channel=False):
    """Rewrites an inference graph (batch norm on moving statistics) to simulate 8-bit inference."""
    _create_graph(input_graph, False, weight_symmetric=weight_symmetric,
                  weight_per_channel=weight_per_channel)


def experimental_create_training_graph(input_graph=None, weight_bits=8, activation_bits=8,
                                       symmetric=False, quant_delay=0, freeze_bn_delay=None,
                                       scope=None, *, weight_symmetric=None,
                                       weight_per_channel=False):
    """create_training_graph with bit widths, symmetric weights, a freeze step for batch-norm
    statistics and a scope filter."""
    _create_graph(input_graph, True, weight_bits, activation_bits, symmetric, quant_delay,
                  freeze_bn_delay, scope, weight_symmetric, weight_per_channel)


def experimental_create_eval_graph(input_graph=None, weight_bits=8, activation_bits=8,
                                   symmetric=False, quant_delay=None, scope=None, *,
                                   weight_symmetric=None, weight_per_channel=False):
    """create_eval_graph with the experimental options."""
    _create_graph(input_graph, False, weight_bits, activation_bits, symmetric, quant_delay,
                  scope=scope, weight_symmetric=weight_symmetric,
                  weight_per_channel=weight_per_channel)
