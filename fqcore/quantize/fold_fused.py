"""Fused batch-norm folding (contrib's _FoldFusedBatchNorms): a layer op followed by
FusedBatchNorm(V3) becomes <L>/<Op>_Fold on weights scaled by gamma/sigma, with training-time
corrections. Between the two, contrib 1.15's patterns allow an Identity and, for atrous layers,
a BatchToSpaceND (re-created after the folded layer); a MatMul reaches the batch norm through a
Reshape to [N, 1, 1, C] and comes back through another."""
import numpy as np

from ..graph import build
from ..graph.op_defs.nn import FOLDED_GRADIENT
from . import common, fold_common

BATCH_NORM_TYPES = ("FusedBatchNorm", "FusedBatchNormV3")


class Match:
    """One layer + batch-norm pair and what the fold reads."""

    def __init__(self, bn_op, layer_op, batch_to_space_op, output):
        self.bn_op = bn_op
        self.layer_op = layer_op
        self.batch_to_space_op = batch_to_space_op
        self.output = output
        self.training = bn_op.attrs.get("is_training", True)


def match(bn_op):
    """(Match, None) when `bn_op` folds, else (None, the reason it does not)."""
    source = bn_op.inputs[0]
    reshape = None
    if source.op.type == "Reshape":
        reshape, source = source.op, source.op.inputs[0]
    if source.op.type == "Identity":
        source = source.op.inputs[0]
    batch_to_space = None
    if source.op.type == "BatchToSpaceND":
        batch_to_space, source = source.op, source.op.inputs[0]
    layer_op, output = source.op, bn_op.outputs[0]
    if layer_op.type not in fold_common.LAYER_TYPES:
        return None, (f"its input comes from {layer_op.type} {layer_op.name!r}, not from a "
                      f"{'/'.join(fold_common.LAYER_TYPES)}")
    if layer_op.type == "MatMul":
        consumers = output.consumers()
        if reshape is None or len(consumers) != 1 or consumers[0].type != "Reshape":
            return None, ("a MatMul folds only through a Reshape to [N, 1, 1, C] before the "
                          "batch norm and a Reshape back after it")
        if layer_op.attrs.get("transpose_a") or layer_op.attrs.get("transpose_b"):
            return None, f"MatMul {layer_op.name!r} transposes an input"
        output = consumers[0].outputs[0]
    elif reshape is not None:
        return None, f"a Reshape lies between {layer_op.type} {layer_op.name!r} and it"
    if bn_op.attrs.get("data_format", "NHWC") != "NHWC":
        return None, f"its data_format is {bn_op.attrs['data_format']}, not NHWC"
    found = Match(bn_op, layer_op, batch_to_space, output)
    if found.training and None in (fold_common.moving_average_update(bn_op.outputs[1])[0],
                                   fold_common.moving_average_update(bn_op.outputs[2])[0]):
        return None, ("it is in training mode without the moving-average updates "
                      "(AssignMovingAvg sub/mul) the fold freezes")
    return found, None


def fold(graph, is_training, freeze_bn_delay):
    """Folds every matching batch norm whose output is read. One whose output nothing reads has
    nothing to reroute: it was folded already (a graph rewritten twice), or it ends the graph;
    contrib leaves it alone too."""
    for op in graph.get_operations():
        if op.type not in BATCH_NORM_TYPES:
            continue
        found, _ = match(op)
        if found is not None and found.output.consumers():
            _fold(graph, found, is_training, freeze_bn_delay)


def _statistics(graph, found):
    bn_op = found.bn_op
    epsilon = np.float32(bn_op.attrs.get("epsilon", 1e-3))
    if not found.training:
        return fold_common.Statistics(bn_op.inputs[1], bn_op.inputs[3], bn_op.inputs[4], epsilon)
    stats = fold_common.Statistics(bn_op.inputs[1], bn_op.outputs[1],
                                   _undo_bessel_correction(graph, found), epsilon)
    for index in (1, 2):
        moving, decay = fold_common.moving_average_update(bn_op.outputs[index])
        if index == 1:
            stats.moving_mean, stats.decay_mean = moving, decay
        else:
            stats.moving_variance, stats.decay_variance = moving, decay
    return stats


def _fold(graph, found, is_training, freeze_bn_delay):
    layer_op, bn_op = found.layer_op, found.bn_op
    scope = common.context_of(layer_op.name)
    prefix = scope + "/" if scope else ""
    stats = _statistics(graph, found)
    weights = layer_op.inputs[1]
    with graph.name_scope(prefix or ""), graph.name_scope(prefix + "BatchNorm_Fold/"):
        multiplier = build.multiply(stats.gamma,
                                    build.rsqrt(build.add(stats.variance, stats.epsilon)))
        bias = build.subtract(bn_op.inputs[2], build.multiply(stats.mean, multiplier),
                              name="bias")
        scale = recip = offset = None
        if is_training and found.training:
            scale, recip, offset = fold_common.corrections(graph, stats, freeze_bn_delay)
        if layer_op.type == "DepthwiseConv2dNative":
            shape = fold_common.depthwise_shape(weights)
            multiplier = build.reshape(multiplier, shape, name="scale_reshape")
            if scale is not None:
                scale = build.reshape(scale, shape, name="correction_reshape")
    with graph.name_scope(prefix):
        if scale is not None:
            weights = build.multiply(scale, weights, name="correction_mult")
        folded_weights = build.multiply(weights, multiplier, name="mul_fold")
        b2s = found.batch_to_space_op
        layer = fold_common.clone_layer(
            graph, layer_op, folded_weights, b2s,
            b2s and prefix + b2s.name.rsplit("/", 1)[-1] + "_Fold")
        if recip is not None:
            layer = build.multiply(recip, layer, name="post_conv_mul")
            layer = build.add(layer, offset, name="correction_add")
        output = build.add(layer, bias, name="add_fold")
    common.reroute(output, found.output)
    if found.training:
        bn_op.attrs["_gradient_op_type"] = FOLDED_GRADIENT


def _undo_bessel_correction(graph, found):
    """FusedBatchNormV3 returns the Bessel-corrected variance; the fold needs the biased one:
    variance * (n - 1) / n, computed as TF does (n in float64, then float32). n counts the
    elements the batch norm normalizes; contrib counts the layer op's output, which for an
    atrous layer still holds the SpaceToBatchND padding, so its factor is slightly off there."""
    bn_op = found.bn_op
    bn_scope = common.context_of(bn_op.name)
    with graph.name_scope(bn_scope + "/" if bn_scope else ""):
        size = _size(bn_op.inputs[0], "Size")
        channels = _size(bn_op.outputs[1], "Size_1")
        with graph.name_scope("truediv") as scope:
            ratio = graph.create_op("RealDiv", [build.cast(size, "float64", name="Cast"),
                                                build.cast(channels, "float64", name="Cast_1")],
                                    full_name=scope[:-1]).outputs[0]
        count = build.cast(ratio, "float32", name="Cast")
        factor = build.divide(build.subtract(count, np.float32(1.0)), count)
        return build.multiply(bn_op.outputs[2], factor, name="Undo_Bessel_Correction")


def _size(tensor, name):
    """The element count: a Const when the static shape says it (as TF's array_ops.size folds
    it), else a Size op evaluated per run (an unknown batch size)."""
    shape = tensor.shape
    if shape is not None and all(d is not None for d in shape):
        return build.constant(np.int32(np.prod(shape)), name=name)
    return build.size(tensor, name=name)
