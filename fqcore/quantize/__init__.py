"""fqcore.quantize: contrib.quantize's graph rewrite (batch-norm folding, then fake-quant
insertion), with TF 1.15's function names and defaults. Each call rewrites the graph in place
and returns None; it must run before an optimizer is attached. As in contrib, folded batch norms
and quantized tensors are skipped, so rewriting a rewritten graph again changes nothing, whatever
the second call's options.

contrib's lower-level functions are here too, on any graph: Quantize, FoldBatchNorms, and
quant_ops.LastValueQuantize / MovingAvgQuantize.

fqcore extensions (keyword-only, defaults reproduce contrib): weight_symmetric (None follows
`symmetric`; a bool sets the weight quantizers' flag alone) and weight_per_channel (per-output-
channel symmetric narrow weight ranges, which int8 backends such as TFLite's require).

Nothing is skipped in silence: after each rewrite `graph.quantize_report` (a RewriteReport, as
`report(graph)` computes it) lists the layer-like ops neither folded nor quantized, with the
reason, and a logging warning on the "fqcore.quantize" logger names them."""
from typing import Any, Optional

from ..graph.core import GraphKeys, get_default_graph
from . import common, fold_batch_norms, insert
from .rewrite_report import RewriteReport, SkippedLayer, log_skipped, report

__all__ = ["create_training_graph", "create_eval_graph", "experimental_create_training_graph",
           "experimental_create_eval_graph", "Quantize", "FoldBatchNorms", "report",
           "RewriteReport", "SkippedLayer"]

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


def _check_delay(name, value):
    # The delay is compared with the int64 global step.
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or
                              not 0 <= value < 2**63):
        raise ValueError(f"{name} must be None or a non-negative int below 2**63, got {value!r}")


def _check_flag(name, value, allow_none=False):
    if not (isinstance(value, bool) or allow_none and value is None):
        raise ValueError(f"{name} must be a bool{' or None' if allow_none else ''}, got {value!r}")


def _check_graph(name, graph):
    if not hasattr(graph, "get_operations"):
        raise TypeError(f"{name} must be an fqcore.graph.Graph, got {type(graph).__name__}")


def _check_no_training_ops(graph):
    found = {op.type for op in graph.get_operations()} & _TRAINING_OPS
    if found:
        raise ValueError(f"Training op found in graph, exiting {found}")


def _finish(graph, scope=None, layers=True):
    """Attaches the rewrite's report to the graph and warns about what it skipped."""
    graph.quantize_report = report(graph, scope, layers)
    log_skipped(graph.quantize_report)


def _create_graph(input_graph, is_training, weight_bits=8, activation_bits=8, symmetric=False,
                  quant_delay=None, freeze_bn_delay=None, scope=None, weight_symmetric=None,
                  weight_per_channel=False):
    graph = input_graph if input_graph is not None else get_default_graph()
    _check_graph("input_graph", graph)
    common.check_bits("weight_bits", weight_bits)
    common.check_bits("activation_bits", activation_bits)
    _check_delay("quant_delay", quant_delay)
    _check_delay("freeze_bn_delay", freeze_bn_delay)
    _check_flag("symmetric", symmetric)
    _check_flag("weight_symmetric", weight_symmetric, allow_none=True)
    _check_flag("weight_per_channel", weight_per_channel)
    if weight_per_channel and weight_symmetric is False:
        raise ValueError("weight_symmetric=False contradicts weight_per_channel=True, whose "
                         "weight ranges are always symmetric")
    _check_scope(scope)
    _check_no_training_ops(graph)
    with graph.as_default():
        if weight_per_channel:
            # Before folding, so that a refused layer leaves the graph untouched.
            insert.check_per_channel_weights(graph, scope)
        fold_batch_norms.fold_batch_norms(graph, is_training, freeze_bn_delay)
        insert.quantize(graph, is_training, weight_bits=weight_bits,
                        activation_bits=activation_bits, symmetric=symmetric,
                        quant_delay=quant_delay, scope=scope, weight_symmetric=weight_symmetric,
                        weight_per_channel=weight_per_channel)
    _finish(graph, scope)


def _check_scope(scope):
    if scope is not None and not isinstance(scope, str):
        raise TypeError(f"scope must be a string or None, got {scope!r}")


def Quantize(graph: Any, is_training: bool, weight_bits: int = 8, activation_bits: int = 8,
             symmetric: bool = False, ema_decay: float = 0.999, quant_delay: Optional[int] = None,
             vars_collection: str = GraphKeys.GLOBAL_VARIABLES,
             scope: Optional[str] = None) -> None:
    """contrib's quantize.Quantize: inserts the fake quant ops into `graph`, in place.

    Batch norms are not folded: call :func:`FoldBatchNorms` first. The range variables are global
    variables and also join `vars_collection`.

    Parameters
    ----------
    graph : fqcore.graph.Graph
        The graph to rewrite; it must hold no optimizer yet.
    is_training : bool
        Training graph (moving-average ranges that training updates) or eval graph (the stored
        ranges).
    weight_bits, activation_bits : int, default 8
        Bits of the weight and activation quantizers, 2 to 16.
    symmetric : bool, default False
        Symmetric ranges instead of trained minimum and maximum.
    ema_decay : float, default 0.999
        Decay of the activation ranges' moving averages, 0 to 1.
    quant_delay : int or None
        Global steps of float training before fake quantization starts (None: from the first
        step).
    vars_collection : str, default GraphKeys.GLOBAL_VARIABLES
        A collection the range variables also join.
    scope : str, optional
        Rewrite only the ops under this name scope.

    Returns
    -------
    None
        The graph is rewritten in place; ``graph.quantize_report`` (a :class:`RewriteReport`)
        lists what was folded, quantized and skipped.

    Raises
    ------
    TypeError
        `graph` not a Graph, `scope` not a str.
    ValueError
        A bit width outside 2 to 16, a delay that is not a non-negative int, a flag not a bool,
        ``weight_symmetric=False`` with ``weight_per_channel=True``, a graph that already holds
        training ops ("Training op found in graph, exiting ..."), or per-channel weights on a
        layer that cannot have them.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> from fqcore import quantize
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    ...     x = G.layers.conv2d(images, 4, 3, activation="relu6", batch_norm=True,
    ...                         is_training=True, scope="conv1")
    >>> quantize.FoldBatchNorms(g, is_training=True)
    >>> quantize.Quantize(g, is_training=True)
    >>> sorted(op.name for op in g.get_operations() if op.type.startswith("FakeQuant"))
    ['conv1/act_quant/FakeQuantWithMinMaxVars', 'conv1/weights_quant/FakeQuantWithMinMaxVars']
    """
    _check_graph("graph", graph)
    _check_flag("is_training", is_training)
    common.check_bits("weight_bits", weight_bits)
    common.check_bits("activation_bits", activation_bits)
    _check_flag("symmetric", symmetric)
    common.check_ema_decay(ema_decay)
    _check_delay("quant_delay", quant_delay)
    if not isinstance(vars_collection, str) or not vars_collection:
        raise ValueError(f"vars_collection must be a collection name, got {vars_collection!r}")
    _check_scope(scope)
    _check_no_training_ops(graph)
    with graph.as_default():
        insert.quantize(graph, is_training, weight_bits=weight_bits,
                        activation_bits=activation_bits, symmetric=symmetric,
                        ema_decay=float(ema_decay), quant_delay=quant_delay, scope=scope,
                        vars_collection=vars_collection)
    _finish(graph, scope)


def FoldBatchNorms(graph: Any, is_training: bool,
                   freeze_batch_norm_delay: Optional[int] = None) -> None:
    """contrib's fold_batch_norms.FoldBatchNorms: folds batch norms into their layers, in place.

    Every fused and unfused batch norm that follows a Conv2D, DepthwiseConv2dNative or MatMul.

    Parameters
    ----------
    graph : fqcore.graph.Graph
        The graph to rewrite; it must hold no optimizer yet.
    is_training : bool
        Training graph (batch statistics, with the correction contrib applies) or eval graph
        (moving statistics).
    freeze_batch_norm_delay : int or None, default None
        Global steps after which training uses the moving statistics (None: never).

    Returns
    -------
    None
        The graph is rewritten in place; ``graph.quantize_report`` (a :class:`RewriteReport`)
        lists what was folded, quantized and skipped.

    Raises
    ------
    TypeError
        `graph` not a Graph.
    ValueError
        A bit width outside 2 to 16, a delay that is not a non-negative int, a flag not a bool,
        ``weight_symmetric=False`` with ``weight_per_channel=True``, a graph that already holds
        training ops ("Training op found in graph, exiting ..."), or per-channel weights on a
        layer that cannot have them.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> from fqcore import quantize
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    ...     x = G.layers.conv2d(images, 4, 3, activation="relu6", batch_norm=True,
    ...                         is_training=True, scope="conv1")
    >>> quantize.FoldBatchNorms(g, is_training=True)
    >>> g.quantize_report.folded
    ['conv1/BatchNorm/FusedBatchNormV3']
    """
    _check_graph("graph", graph)
    _check_flag("is_training", is_training)
    _check_delay("freeze_batch_norm_delay", freeze_batch_norm_delay)
    _check_no_training_ops(graph)
    with graph.as_default():
        fold_batch_norms.fold_batch_norms(graph, is_training, freeze_batch_norm_delay)
    _finish(graph, layers=False)


def create_training_graph(input_graph: Any = None, quant_delay: Optional[int] = 0, *,
                          weight_symmetric: Optional[bool] = None,
                          weight_per_channel: bool = False) -> None:
    """Rewrites a training graph for quantization-aware training at 8 bits, in place.

    Batch norms are folded into their layers (never frozen), then fake quant ops are inserted on
    weights and activations. Call it before attaching the optimizer.

    Parameters
    ----------
    input_graph : fqcore.graph.Graph, optional
        The graph to rewrite in place (default: the default graph). It must hold no optimizer
        yet.
    quant_delay : int or None, default 0
        Global steps of float training before fake quantization starts (None: from the first
        step).
    weight_symmetric : bool or None, default None
        fqcore extension: None follows `symmetric`; a bool sets the weight quantizers' flag alone.
    weight_per_channel : bool, default False
        fqcore extension: a symmetric, narrow weight range per output channel, which int8
        backends such as TFLite's require.

    Returns
    -------
    None
        The graph is rewritten in place; ``graph.quantize_report`` (a :class:`RewriteReport`)
        lists what was folded, quantized and skipped.

    Raises
    ------
    TypeError
        `input_graph` not a Graph, `scope` not a str.
    ValueError
        A bit width outside 2 to 16, a delay that is not a non-negative int, a flag not a bool,
        ``weight_symmetric=False`` with ``weight_per_channel=True``, a graph that already holds
        training ops ("Training op found in graph, exiting ..."), or per-channel weights on a
        layer that cannot have them.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> from fqcore import quantize
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    ...     x = G.layers.conv2d(images, 4, 3, activation="relu6", batch_norm=True,
    ...                         is_training=True, scope="conv1")
    >>> quantize.create_training_graph(g, quant_delay=100)
    >>> sorted(op.name for op in g.get_operations() if op.type.startswith("FakeQuant"))
    ['conv1/act_quant/FakeQuantWithMinMaxVars', 'conv1/weights_quant/FakeQuantWithMinMaxVars']
    """
    _create_graph(input_graph, True, quant_delay=quant_delay, weight_symmetric=weight_symmetric,
                  weight_per_channel=weight_per_channel)


def create_eval_graph(input_graph: Any = None, *, weight_symmetric: Optional[bool] = None,
                      weight_per_channel: bool = False) -> None:
    """Rewrites an inference graph (batch norm on moving statistics) to simulate 8-bit inference.

    Build the inference graph again (``is_training=False``), rewrite it, then load the trained
    variables by name (:func:`fqcore.graph.load_variables` with ``strict=False``).

    Parameters
    ----------
    input_graph : fqcore.graph.Graph, optional
        The graph to rewrite in place (default: the default graph). It must hold no optimizer
        yet.
    weight_symmetric : bool or None, default None
        fqcore extension: None follows `symmetric`; a bool sets the weight quantizers' flag alone.
    weight_per_channel : bool, default False
        fqcore extension: a symmetric, narrow weight range per output channel, which int8
        backends such as TFLite's require.

    Returns
    -------
    None
        The graph is rewritten in place; ``graph.quantize_report`` (a :class:`RewriteReport`)
        lists what was folded, quantized and skipped.

    Raises
    ------
    TypeError
        `input_graph` not a Graph, `scope` not a str.
    ValueError
        A bit width outside 2 to 16, a delay that is not a non-negative int, a flag not a bool,
        ``weight_symmetric=False`` with ``weight_per_channel=True``, a graph that already holds
        training ops ("Training op found in graph, exiting ..."), or per-channel weights on a
        layer that cannot have them.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> from fqcore import quantize
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    ...     x = G.layers.conv2d(images, 4, 3, activation="relu6", batch_norm=True,
    ...                         is_training=False, scope="conv1")
    >>> quantize.create_eval_graph(g)
    >>> sorted(op.name for op in g.get_operations() if op.type.startswith("FakeQuant"))
    ['conv1/act_quant/FakeQuantWithMinMaxVars', 'conv1/weights_quant/FakeQuantWithMinMaxVars']
    """
    _create_graph(input_graph, False, weight_symmetric=weight_symmetric,
                  weight_per_channel=weight_per_channel)


def experimental_create_training_graph(input_graph: Any = None, weight_bits: int = 8,
                                       activation_bits: int = 8, symmetric: bool = False,
                                       quant_delay: Optional[int] = 0,
                                       freeze_bn_delay: Optional[int] = None,
                                       scope: Optional[str] = None, *,
                                       weight_symmetric: Optional[bool] = None,
                                       weight_per_channel: bool = False) -> None:
    """:func:`create_training_graph` with bit widths, symmetric ranges, a freeze step for
    batch-norm statistics and a scope filter.

    Parameters
    ----------
    input_graph : fqcore.graph.Graph, optional
        The graph to rewrite in place (default: the default graph). It must hold no optimizer
        yet.
    weight_bits, activation_bits : int, default 8
        Bits of the weight and activation quantizers, 2 to 16.
    symmetric : bool, default False
        Symmetric ranges instead of trained minimum and maximum.
    quant_delay : int or None, default 0
        Global steps of float training before fake quantization starts (None: from the first
        step).
    freeze_bn_delay : int or None, default None
        Global steps after which folded batch norms use their moving statistics instead of the
        batch's (None: never).
    scope : str, optional
        Rewrite only the ops under this name scope.
    weight_symmetric : bool or None, default None
        fqcore extension: None follows `symmetric`; a bool sets the weight quantizers' flag alone.
    weight_per_channel : bool, default False
        fqcore extension: a symmetric, narrow weight range per output channel, which int8
        backends such as TFLite's require.

    Returns
    -------
    None
        The graph is rewritten in place; ``graph.quantize_report`` (a :class:`RewriteReport`)
        lists what was folded, quantized and skipped.

    Raises
    ------
    TypeError
        `input_graph` not a Graph, `scope` not a str.
    ValueError
        A bit width outside 2 to 16, a delay that is not a non-negative int, a flag not a bool,
        ``weight_symmetric=False`` with ``weight_per_channel=True``, a graph that already holds
        training ops ("Training op found in graph, exiting ..."), or per-channel weights on a
        layer that cannot have them.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> from fqcore import quantize
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    ...     x = G.layers.conv2d(images, 4, 3, activation="relu6", batch_norm=True,
    ...                         is_training=True, scope="conv1")
    >>> quantize.experimental_create_training_graph(g, quant_delay=100, freeze_bn_delay=250,
    ...                                             weight_per_channel=True)
    >>> g.quantize_report
    RewriteReport(1 quantized, 1 folded, 0 skipped)
    >>> sorted(op.name for op in g.get_operations() if op.type.startswith("FakeQuant"))
    ['conv1/act_quant/FakeQuantWithMinMaxVars', 'conv1/weights_quant/FakeQuantWithMinMaxVarsPerChannel']
    """
    _create_graph(input_graph, True, weight_bits, activation_bits, symmetric, quant_delay,
                  freeze_bn_delay, scope, weight_symmetric, weight_per_channel)


def experimental_create_eval_graph(input_graph: Any = None, weight_bits: int = 8,
                                   activation_bits: int = 8, symmetric: bool = False,
                                   quant_delay: Optional[int] = None, scope: Optional[str] = None,
                                   *, weight_symmetric: Optional[bool] = None,
                                   weight_per_channel: bool = False) -> None:
    """:func:`create_eval_graph` with the options of
    :func:`experimental_create_training_graph`; use the same ones as the training graph.

    Parameters
    ----------
    input_graph : fqcore.graph.Graph, optional
        The graph to rewrite in place (default: the default graph). It must hold no optimizer
        yet.
    weight_bits, activation_bits : int, default 8
        Bits of the weight and activation quantizers, 2 to 16.
    symmetric : bool, default False
        Symmetric ranges instead of trained minimum and maximum.
    quant_delay : int or None, default None
        Global steps of float training before fake quantization starts (None: from the first
        step).
    scope : str, optional
        Rewrite only the ops under this name scope.
    weight_symmetric : bool or None, default None
        fqcore extension: None follows `symmetric`; a bool sets the weight quantizers' flag alone.
    weight_per_channel : bool, default False
        fqcore extension: a symmetric, narrow weight range per output channel, which int8
        backends such as TFLite's require.

    Returns
    -------
    None
        The graph is rewritten in place; ``graph.quantize_report`` (a :class:`RewriteReport`)
        lists what was folded, quantized and skipped.

    Raises
    ------
    TypeError
        `input_graph` not a Graph, `scope` not a str.
    ValueError
        A bit width outside 2 to 16, a delay that is not a non-negative int, a flag not a bool,
        ``weight_symmetric=False`` with ``weight_per_channel=True``, a graph that already holds
        training ops ("Training op found in graph, exiting ..."), or per-channel weights on a
        layer that cannot have them.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> from fqcore import quantize
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    ...     x = G.layers.conv2d(images, 4, 3, activation="relu6", batch_norm=True,
    ...                         is_training=False, scope="conv1")
    >>> quantize.experimental_create_eval_graph(g, weight_per_channel=True)
    >>> sorted(op.name for op in g.get_operations() if op.type.startswith("FakeQuant"))
    ['conv1/act_quant/FakeQuantWithMinMaxVars', 'conv1/weights_quant/FakeQuantWithMinMaxVarsPerChannel']
    """
    _create_graph(input_graph, False, weight_bits, activation_bits, symmetric, quant_delay,
                  scope=scope, weight_symmetric=weight_symmetric,
                  weight_per_channel=weight_per_channel)
