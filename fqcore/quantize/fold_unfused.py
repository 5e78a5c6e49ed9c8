"""Unfused batch-norm folding (contrib's _FoldUnfusedBatchNorms): TF-slim's batch_norm(fused=
False) computes x * inv + shift with tf.nn.batch_normalization's ops,

    <bn>/batchnorm_1/add    = variance + epsilon      Rsqrt = rsqrt(add)
    <bn>/batchnorm_1/mul    = Rsqrt * gamma           (scale=True; else inv is the Rsqrt)
    x * inv                 (mul_1; mul without scale) mean * inv (mul_2; mul_1 without scale)
    shift = beta - mean * inv (sub; center=True)  or  Neg(mean) * inv (center=False)
    add_1 = x * inv + shift

and the fold rebuilds it as <layer>_Fold on weights * inv, plus shift: <ctx>/mul_fold,
<ctx>/add_fold, and in training the corrections (<ctx>/batch_norm_correction, correction_mult,
post_conv_mul, correction_add) that make the weights use the moving variance.

contrib 1.15 finds the chain by name (`<ctx>BatchNorm/batchnorm_1/...`); fqcore matches its
structure under any `batchnorm` or `batchnorm_<k>` scope, so it also folds the chain slim's
updates_collections=None builds under `batchnorm` and a layer output read through an Identity,
where contrib raises."""
import re

import numpy as np

from ..graph import build
from . import common, fold_common

_ADD_TYPES = ("Add", "AddV2")
_CHAIN_NAME = re.compile(r"^(.*?)(?:BatchNorm/)?batchnorm(?:_\d+)?/add_1$")


class Match:
    """One unfused batch-norm chain and the layer it folds into."""

    def __init__(self, context, add_shift, inv, shift, mean, variance, epsilon, gamma, layer_op,
                 batch_to_space_op):
        self.context = context
        self.add_shift = add_shift
        self.inv = inv
        self.shift = shift
        self.mean = mean
        self.variance = variance
        self.epsilon = epsilon
        self.gamma = gamma
        self.layer_op = layer_op
        self.batch_to_space_op = batch_to_space_op

    @property
    def training(self):
        """Batch statistics (moments), not moving ones (a variable read)."""
        return not common.is_variable_read(self.mean)


def is_chain_end(op):
    """Whether `op` is named like the last op of an unfused batch norm (add_1)."""
    return op.type in _ADD_TYPES and _CHAIN_NAME.match(op.name) is not None


def match(add_shift):
    """(Match, None) when the chain ending at `add_shift` folds, else (None, the reason)."""
    x_times_inv, shift = (t.op for t in add_shift.inputs)
    if x_times_inv.type != "Mul":
        return None, "it is not x * inv + shift as tf.nn.batch_normalization builds it"
    inv = x_times_inv.inputs[1]
    gamma = None
    rsqrt = inv.op
    if rsqrt.type == "Mul":
        rsqrt, gamma = rsqrt.inputs[0].op, rsqrt.inputs[1]
    if rsqrt.type != "Rsqrt" or rsqrt.inputs[0].op.type not in _ADD_TYPES:
        return None, "its scale is not rsqrt(variance + epsilon) [* gamma]"
    mean = _mean(shift, inv)
    if mean is None:
        return None, "its shift is not beta - mean * inv (or -mean * inv)"
    variance, epsilon = rsqrt.inputs[0].op.inputs
    source = x_times_inv.inputs[0]
    if source.op.type == "Identity":
        source = source.op.inputs[0]
    batch_to_space = None
    if source.op.type == "BatchToSpaceND":
        batch_to_space, source = source.op, source.op.inputs[0]
    layer_op = source.op
    if layer_op.type not in fold_common.LAYER_TYPES:
        return None, (f"its input comes from {layer_op.type} {layer_op.name!r}, not from a "
                      f"{'/'.join(fold_common.LAYER_TYPES)}")
    if layer_op.type == "MatMul" and layer_op.attrs.get("transpose_b"):
        return None, f"MatMul {layer_op.name!r} transposes its weights"
    context = _CHAIN_NAME.match(add_shift.name).group(1)
    found = Match(context, add_shift, inv, shift.outputs[0], mean, variance, epsilon, gamma,
                  layer_op, batch_to_space)
    if found.training and None in (fold_common.moving_average_update(found.mean)[0],
                                   fold_common.moving_average_update(found.variance)[0]):
        return None, ("it normalizes with batch statistics but has no moving-average updates "
                      "(AssignMovingAvg sub/mul) to fold")
    return found, None


def _mean(shift, inv):
    """The mean in `shift`: beta - mean * inv (center=True), or (-mean) * inv, as Python reads
    TF's `-mean * inv` (center=False)."""
    op = shift.inputs[1].op if shift.type == "Sub" else shift
    if op.type != "Mul" or op.inputs[1] is not inv:
        return None
    mean = op.inputs[0]
    if shift.type == "Sub":
        return mean
    return mean.op.inputs[0] if mean.op.type == "Neg" else None


def fold(graph, is_training, freeze_bn_delay):
    """Folds every matching chain whose output is read."""
    for op in graph.get_operations():
        if not is_chain_end(op) or not op.outputs[0].consumers():
            continue
        found, _ = match(op)
        if found is not None:
            _fold(graph, found, is_training, freeze_bn_delay)


def _statistics(graph, found):
    if found.gamma is None:
        with graph.name_scope(""):
            gamma = build.constant(np.ones(found.mean.shape, np.float32), name="ones")
    else:
        gamma = found.gamma
    stats = fold_common.Statistics(gamma, found.mean, found.variance, found.epsilon)
    stats.moving_mean, stats.decay_mean = fold_common.moving_average_update(found.mean)
    stats.moving_variance, stats.decay_variance = fold_common.moving_average_update(found.variance)
    return stats


def _fold(graph, found, is_training, freeze_bn_delay):
    ctx, layer_op = found.context, found.layer_op
    weights, inv = layer_op.inputs[1], found.inv
    scale = recip = offset = None
    stats = _statistics(graph, found)
    if is_training and found.training:
        with graph.name_scope(ctx or ""):
            scale, recip, offset = fold_common.corrections(graph, stats, freeze_bn_delay)
    with graph.name_scope(ctx or ""):
        if layer_op.type == "DepthwiseConv2dNative":
            shape = fold_common.depthwise_shape(weights)
            inv = build.reshape(inv, shape, name="scale_reshape")
            if scale is not None:
                scale = build.reshape(scale, shape, name="correction_reshape")
        if scale is not None:
            weights = build.multiply(scale, weights, name="correction_mult")
        folded_weights = build.multiply(weights, inv, name="mul_fold")
    b2s = found.batch_to_space_op
    layer = fold_common.clone_layer(graph, layer_op, folded_weights, b2s,
                                    b2s and b2s.name + "_Fold")
    with graph.name_scope(ctx or ""):
        if recip is not None:
            layer = build.multiply(recip, layer, name="post_conv_mul")
            layer = build.add(layer, offset, name="correction_add")
        output = build.add(layer, found.shift, name="add_fold")
    common.reroute(output, found.add_shift.outputs[0])
