"""What a rewrite left out: every layer-like op (Conv2D, DepthwiseConv2dNative, MatMul, a fused
or unfused batch norm) that is neither folded nor quantized, with the reason. contrib skips such
layers in silence; the rewrite logs them as a warning and attaches this report to the graph."""
import logging
from typing import Any, Optional

from . import fold_fused, fold_unfused
from .common import is_variable_read
from .fold_common import LAYER_TYPES

LOGGER = logging.getLogger("fqcore.quantize")

_FAKE_QUANT_TYPES = ("FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel")
# Ops between a weight's fake quant and the layer reading it: a per-channel depthwise Reshape,
# the Switch of quant_delay's cond (its Merge has one input per branch, and is looked into
# separately), Identity.
_WEIGHT_PATH = ("Identity", "Reshape", "Switch")
# Ops between a layer and the batch norm it feeds.
_LAYER_TO_BATCH_NORM = ("Identity", "Reshape", "BatchToSpaceND")


class SkippedLayer:
    """A layer-like op a rewrite neither folded nor quantized, with the reason.

    Parameters
    ----------
    name : str
        The op's name.
    op_type : str
        The op's type (``Conv2D``, ``MatMul``, ``FusedBatchNormV3``, ...), kept as ``.type``.
    reason : str
        Why the rewrite left it out.

    Examples
    --------
    >>> from fqcore.quantize import SkippedLayer
    >>> SkippedLayer("head/MatMul", "MatMul", "outside the rewrite's scope")
    MatMul 'head/MatMul': outside the rewrite's scope
    """

    def __init__(self, name, op_type, reason):
        self.name = name
        self.type = op_type
        self.reason = reason

    def __repr__(self):
        return f"{self.type} {self.name!r}: {self.reason}"

    def __eq__(self, other):
        return isinstance(other, SkippedLayer) and (self.name, self.type, self.reason) == (
            other.name, other.type, other.reason)


class RewriteReport:
    """What a rewrite did to a graph's layer-like ops; a rewrite leaves it in
    ``graph.quantize_report``.

    Parameters
    ----------
    quantized : list of str
        Layer ops whose weights pass through a fake quant.
    folded : list of str
        Batch norms folded into their layer.
    skipped : list of SkippedLayer
        Everything else layer-like, with the reason.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> from fqcore import quantize
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 4], name="x")
    ...     y = G.layers.dense(x, 3, activation="relu6", scope="fc")
    >>> quantize.create_training_graph(g)
    >>> g.quantize_report, g.quantize_report.quantized
    (RewriteReport(1 quantized, 0 folded, 0 skipped), ['fc/MatMul'])
    """

    def __init__(self, quantized, folded, skipped):
        self.quantized = quantized
        self.folded = folded
        self.skipped = skipped

    def __repr__(self):
        return (f"RewriteReport({len(self.quantized)} quantized, {len(self.folded)} folded, "
                f"{len(self.skipped)} skipped)")


def report(graph: Any, scope: Optional[str] = None, layers: bool = True) -> RewriteReport:
    """The :class:`RewriteReport` of a graph as it is now.

    Parameters
    ----------
    graph : fqcore.graph.Graph
        A graph, rewritten or not.
    scope : str, optional
        The scope of the rewrite, which the reasons for skipped layers mention.
    layers : bool, default True
        False leaves out layer ops whose weights are not quantized (a fold-only rewrite).

    Returns
    -------
    RewriteReport
        The quantized layers, folded batch norms and skipped layer-like ops.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> from fqcore import quantize
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 4], name="x")
    ...     y = G.layers.dense(x, 3, scope="fc")
    >>> quantize.report(g).skipped
    [MatMul 'fc/MatMul': ...]
    """
    quantized, folded, skipped = [], [], []
    batch_norm_reasons = {}
    for op in graph.get_operations():
        reason = _batch_norm_reason(op)
        if reason is _FOLDED:
            folded.append(op.name)
        elif reason is not None:
            batch_norm_reasons[op] = reason
            skipped.append(SkippedLayer(op.name, _batch_norm_type(op), reason))
    for op in graph.get_operations() if layers else ():
        if op.type not in LAYER_TYPES:
            continue
        if _has_folded_twin(graph, op):
            continue
        weights = op.inputs if op.type == "MatMul" else op.inputs[1:]
        if any(_quantized_weights(t) for t in weights):
            quantized.append(op.name)
        else:
            skipped.append(SkippedLayer(op.name, op.type,
                                        _layer_reason(op, batch_norm_reasons, scope)))
    return RewriteReport(quantized, folded, skipped)


def log_skipped(rewrite_report):
    if rewrite_report.skipped:
        LOGGER.warning("quantization rewrite: %d layer-like op(s) neither folded nor quantized: "
                       "%s", len(rewrite_report.skipped),
                       "; ".join(repr(s) for s in rewrite_report.skipped))


_FOLDED = object()


def _batch_norm_type(op):
    return op.type if op.type in fold_fused.BATCH_NORM_TYPES else "unfused batch norm"


def _batch_norm_reason(op):
    """_FOLDED, None (not a batch norm), or why this batch norm was not folded. A batch norm
    whose output nothing reads was folded (its statistics may still feed the fold)."""
    if op.type in fold_fused.BATCH_NORM_TYPES:
        found, reason = fold_fused.match(op)
        output = found.output if found is not None else op.outputs[0]
    elif fold_unfused.is_chain_end(op):
        found, reason = fold_unfused.match(op)
        output = op.outputs[0]
    else:
        return None
    if not output.consumers():
        return _FOLDED
    return f"its batch norm is not folded: {reason}" if reason else "it was not folded"


def _quantized_weights(tensor):
    """Whether `tensor` is weights (a variable read or folded weights) through a fake quant."""
    op = _source(tensor, _WEIGHT_PATH)
    if op.type == "Merge":
        return any(_quantized_weights(t) for t in op.inputs)
    if op.type not in _FAKE_QUANT_TYPES:
        return False
    weights = _source(op.inputs[0], ("Identity", "Reshape"))
    return weights.type == "Mul" or is_variable_read(weights.outputs[0])


def _source(tensor, through):
    """The op producing `tensor`, looking back through ops of the types `through` (to their
    first input), but not past a variable's read."""
    op = tensor.op
    while op.type in through and op.inputs and not is_variable_read(op.outputs[0]):
        op = op.inputs[0].op
    return op


def _has_folded_twin(graph, op):
    """Whether `op` is the layer of a folded batch norm: after the fold it only feeds the batch
    statistics (training) or nothing (inference); its `_Fold` clone carries the layer."""
    try:
        return graph.get_operation_by_name(op.name + "_Fold").type == op.type
    except KeyError:
        return False


def _layer_reason(op, batch_norm_reasons, scope):
    for consumer in _downstream(op.outputs[0]):
        if consumer in batch_norm_reasons:
            return f"{batch_norm_reasons[consumer]} ({consumer.name!r})"
    if scope and not op.name.startswith(scope.rstrip("/") + "/"):
        return f"it is outside the rewrite's scope {scope!r}"
    weight_like = [t for t in op.inputs if t.op.type == "Mul" or is_variable_read(t)]
    if not weight_like:
        return ("no input is a variable read or folded weights, the weights contrib's layer "
                "patterns quantize")
    following = sorted({c.type for c in op.outputs[0].consumers()}) or ["nothing"]
    return f"no contrib layer pattern matches what follows it ({', '.join(following)})"


def _downstream(tensor):
    """Consumers of `tensor`, looking through the ops between a layer and a fused batch norm;
    an unfused batch norm is reached at its chain end, past x * inv."""
    pending = list(tensor.consumers())
    while pending:
        op = pending.pop()
        yield op
        if op.type in _LAYER_TO_BATCH_NORM:
            pending.extend(op.outputs[0].consumers())
        elif op.type == "Mul":
            yield from (c for c in op.outputs[0].consumers() if fold_unfused.is_chain_end(c))
