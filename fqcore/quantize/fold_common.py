"""What fused and unfused batch-norm folding share: the training-time corrections (contrib's
_ComputeBatchNormCorrections) and the clone of the layer op on folded weights."""
import numpy as np

from ..graph import build
from . import common

# Ops contrib folds a batch norm into (fold_batch_norms.py's layer_pattern).
LAYER_TYPES = ("Conv2D", "DepthwiseConv2dNative", "MatMul")


class Statistics:
    """The tensors a fold reads: gamma, the statistics it normalizes with (batch statistics in
    training, moving ones in inference), the moving statistics, epsilon, and the decay tensors
    of the moving-average updates (None in inference)."""

    def __init__(self, gamma, mean, variance, epsilon, moving_mean=None, moving_variance=None,
                 decay_mean=None, decay_variance=None):
        self.gamma = gamma
        self.mean = mean
        self.variance = variance
        self.epsilon = epsilon
        self.moving_mean = moving_mean
        self.moving_variance = moving_variance
        self.decay_mean = decay_mean
        self.decay_variance = decay_variance


def moving_average_update(statistic):
    """(moving value, decay) of the AssignMovingAvg sub/mul pair that `statistic` feeds, as TF's
    assign_moving_average builds it (moving -= (moving - statistic) * decay), or (None, None).
    With slim's forced updates the normalization reads an Identity of the statistic, whose
    source feeds the update."""
    candidates = [statistic]
    if statistic.op.type == "Identity":
        candidates.append(statistic.op.inputs[0])
    for tensor in candidates:
        for sub in tensor.consumers():
            if sub.type != "Sub" or sub.inputs[1] is not tensor:
                continue
            for mul in sub.outputs[0].consumers():
                if mul.type == "Mul":
                    decay = mul.inputs[1] if mul.inputs[0] is sub.outputs[0] else mul.inputs[0]
                    return sub.inputs[0], decay
    return None, None


def corrections(graph, stats, freeze_bn_delay):
    """contrib's _ComputeBatchNormCorrections, in the caller's name scope: scale sigma_B/sigma_MA
    onto the weights, undo it after the layer (recip) until the freeze step; from then on, the
    moving statistics (offset) and frozen moving averages (their decay rerouted to 0)."""
    with graph.name_scope("batch_norm_correction"):
        recip_sigma_mv = build.rsqrt(build.add(stats.moving_variance, stats.epsilon))
        recip_sigma = build.rsqrt(build.add(stats.variance, stats.epsilon))
        scale = build.identity(build.divide(recip_sigma_mv, recip_sigma, name="scale_compute"),
                               name="correction_scale")
        recip = build.reciprocal(scale, name="reciprocal_compute")
        offset = build.multiply(
            stats.gamma, build.subtract(build.multiply(stats.mean, recip_sigma),
                                        build.multiply(stats.moving_mean, recip_sigma_mv)),
            name="offset_compute")
        if freeze_bn_delay is not None:
            use_moving_average = build.greater_equal(common.quantization_step(graph),
                                                     np.int64(freeze_bn_delay),
                                                     name="use_moving_average")
        else:
            use_moving_average = False
        for decay, cond_name in ((stats.decay_mean, "freeze_moving_mean"),
                                 (stats.decay_variance, "freeze_moving_var")):
            consumers = decay.consumers()
            frozen = build.cond(use_moving_average, lambda: np.float32(0.0), lambda d=decay: d,
                                name=cond_name)
            common.reroute(frozen, decay, can_modify=consumers)
        channels = scale.shape
        recip = build.cond(use_moving_average,
                           lambda: build.constant(np.ones(channels, np.float32), name="ones"),
                           lambda: recip, name="correction_recip")
        offset = build.cond(use_moving_average, lambda: offset,
                            lambda: build.constant(np.zeros(channels, np.float32), name="zeros"),
                            name="correction_offset")
    return scale, recip, offset


def depthwise_shape(weights):
    """[cin, multiplier]: how a per-channel factor lines up with depthwise weights."""
    return list(weights.shape[2:4])


def create_named(graph, op_type, inputs, attrs, full_name):
    """An op named `full_name` (made unique as TF would), whatever the current scope."""
    scope, _, last = full_name.rpartition("/")
    with graph.name_scope(scope + "/" if scope else ""):
        return graph.create_op(op_type, inputs, attrs, name=last)


def clone_layer(graph, layer_op, weights, batch_to_space_op=None, batch_to_space_name=None):
    """The layer op again, `<op>_Fold` beside it, reading the folded weights; for an atrous
    layer, followed by a copy of its BatchToSpaceND named `batch_to_space_name`."""
    output = create_named(graph, layer_op.type, [layer_op.inputs[0], weights],
                          dict(layer_op.attrs), layer_op.name + "_Fold").outputs[0]
    if batch_to_space_op is not None:
        output = create_named(graph, "BatchToSpaceND",
                              [output] + list(batch_to_space_op.inputs[1:]),
                              dict(batch_to_space_op.attrs), batch_to_space_name).outputs[0]
    return output
