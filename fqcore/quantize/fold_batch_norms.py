"""Batch-norm folding (contrib's _FoldFusedBatchNorms): a layer op followed by FusedBatchNormV3
becomes <L>/<Op>_Fold on weights scaled by gamma/sigma, with training-time corrections. A MatMul
reaches the batch norm through a Reshape to [N, 1, 1, C] and comes back through another."""
import numpy as np

from ..graph import build
from . import common

_LAYER_TYPES = ("Conv2D", "DepthwiseConv2dNative")


class _Match:
    """One layer + batch-norm pair and the tensors the fold needs."""

    def __init__(self, layer_op, bn_op, output):
        self.layer_op = layer_op
        self.bn_op = bn_op
        self.input_tensor = layer_op.inputs[0]
        self.weight_tensor = layer_op.inputs[1]
        self.gamma = bn_op.inputs[1]
        self.beta = bn_op.inputs[2]
        self.output = output
        self.epsilon = bn_op.attrs.get("epsilon", 1e-3)
        self.training = bn_op.attrs.get("is_training", True)
        self.moving_mean = self.moving_variance = None
        self.decay_mean = self.decay_variance = None


def _is_variable_read(tensor):
    op = tensor.op
    return op.type == "Identity" and op.inputs and op.inputs[0].op.type == "VariableV2"


def _find(graph):
    """Layer ops feeding a FusedBatchNormV3, weights read from a variable: Conv2D and depthwise
    directly, MatMul through Reshape -> batch norm -> Reshape (the output is then the second
    Reshape's)."""
    matches = []
    for bn_op in graph.get_operations():
        if bn_op.type != "FusedBatchNormV3":
            continue
        layer_op, output = bn_op.inputs[0].op, bn_op.outputs[0]
        if layer_op.type == "Reshape" and layer_op.inputs[0].op.type == "MatMul":
            consumers = output.consumers()
            if len(consumers) != 1 or consumers[0].type != "Reshape":
                continue
            layer_op, output = layer_op.inputs[0].op, consumers[0].outputs[0]
            if layer_op.attrs.get("transpose_a") or layer_op.attrs.get("transpose_b"):
                continue
        elif layer_op.type not in _LAYER_TYPES:
            continue
        # A batch norm whose output nothing reads has nothing to reroute: it was folded already
        # (a graph rewritten twice), or it ends the graph. contrib's reroute leaves it alone too.
        if not _is_variable_read(layer_op.inputs[1]) or not output.consumers():
            continue
        match = _Match(layer_op, bn_op, output)
        if match.training:
            _find_moving_average_updates(match)
        else:
            match.moving_mean, match.moving_variance = bn_op.inputs[3], bn_op.inputs[4]
        matches.append(match)
    return matches


def _find_moving_average_updates(match):
    """The AssignMovingAvg sub/mul pairs fed by the batch statistics: their moving value and
    decay tensors (the freeze logic reroutes the decay)."""
    for index in (1, 2):
        statistic = match.bn_op.outputs[index]
        for sub in statistic.consumers():
            if sub.type != "Sub" or sub.inputs[1] is not statistic:
                continue
            muls = [c for c in sub.outputs[0].consumers() if c.type == "Mul"]
            if not muls:
                continue
            mul = muls[0]
            decay = mul.inputs[1] if mul.inputs[0] is sub.outputs[0] else mul.inputs[0]
            if index == 1:
                match.moving_mean, match.decay_mean = sub.inputs[0], decay
            else:
                match.moving_variance, match.decay_variance = sub.inputs[0], decay
    if match.moving_mean is None or match.moving_variance is None:
        raise ValueError(f"batch norm {match.bn_op.name!r} is in training mode but has no "
                         f"moving-average updates to fold")


def fold_batch_norms(graph, is_training, freeze_bn_delay=None):
    """Folds every matched batch norm in place."""
    for match in _find(graph):
        scope = common.context_of(match.layer_op.name)
        prefix = scope + "/" if scope else ""
        mean, variance = match.bn_op.outputs[1], match.bn_op.outputs[2]
        if match.training:
            variance = _undo_bessel_correction(graph, match)
        else:
            mean, variance = match.moving_mean, match.moving_variance
        with graph.name_scope(prefix or ""), graph.name_scope(prefix + "BatchNorm_Fold/"):
            multiplier = build.multiply(
                match.gamma, build.rsqrt(build.add(variance, np.float32(match.epsilon))))
            bias = build.subtract(match.beta, build.multiply(mean, multiplier), name="bias")
            scale = recip = offset = None
            if is_training and match.training:
                scale, recip, offset = _corrections(graph, match, mean, variance, freeze_bn_delay)
            if match.layer_op.type == "DepthwiseConv2dNative":
                shape = list(match.weight_tensor.shape[2:4])
                multiplier = build.reshape(multiplier, shape, name="scale_reshape")
                if scale is not None:
                    scale = build.reshape(scale, shape, name="correction_reshape")
        with graph.name_scope(prefix):
            weights = match.weight_tensor
            if scale is not None:
                weights = build.multiply(scale, weights, name="correction_mult")
            folded_weights = build.multiply(weights, multiplier, name="mul_fold")
            layer = _clone_layer(graph, match.layer_op, folded_weights)
            if recip is not None:
                layer = build.multiply(recip, layer, name="post_conv_mul")
                layer = build.add(layer, offset, name="correction_add")
            output = build.add(layer, bias, name="add_fold")
        common.reroute(output, match.output)
        if match.training:
            match.bn_op.attrs["_gradient_op_type"] = "FoldFusedBatchNormGrad"


def _undo_bessel_correction(graph, match):
    """FusedBatchNormV3 returns the Bessel-corrected variance; the fold needs the biased one:
    variance * (n - 1) / n, computed as TF does (n in float64, then float32)."""
    bn_scope = common.context_of(match.bn_op.name)
    layer_output = match.layer_op.outputs[0]
    with graph.name_scope(bn_scope + "/"):
        size = _size(layer_output, "Size")
        channels = _size(match.bn_op.outputs[1], "Size_1")
        with graph.name_scope("truediv") as scope:
            ratio = graph.create_op("RealDiv", [build.cast(size, "float64", name="Cast"),
                                                build.cast(channels, "float64", name="Cast_1")],
                                    full_name=scope[:-1]).outputs[0]
        count = build.cast(ratio, "float32", name="Cast")
        factor = build.divide(build.subtract(count, np.float32(1.0)), count)
        return build.multiply(match.bn_op.outputs[2], factor, name="Undo_Bessel_Correction")


def _size(tensor, name):
    """The element count: a Const when the static shape says it (as TF's array_ops.size folds
    it), else a Size op evaluated per run (an unknown batch size)."""
    shape = tensor.shape
    if shape is not None and all(d is not None for d in shape):
        return build.constant(np.int32(np.prod(shape)), name=name)
    return build.size(tensor, name=name)


def _corrections(graph, match, mean, variance, freeze_bn_delay):
    """contrib's _ComputeBatchNormCorrections: scale sigma_B/sigma_MA onto the weights, then
    undo it after the layer (recip) until the freeze step; from then on, the moving statistics
    (offset) and frozen moving averages (decay 0)."""
    with graph.name_scope("batch_norm_correction"):
        recip_sigma_mv = build.rsqrt(build.add(match.moving_variance, np.float32(match.epsilon)))
        recip_sigma = build.rsqrt(build.add(variance, np.float32(match.epsilon)))
        scale = build.identity(build.divide(recip_sigma_mv, recip_sigma, name="scale_compute"),
                               name="correction_scale")
        recip = build.reciprocal(scale, name="reciprocal_compute")
        offset = build.multiply(
            match.gamma, build.subtract(build.multiply(mean, recip_sigma),
                                        build.multiply(match.moving_mean, recip_sigma_mv)),
            name="offset_compute")
        if freeze_bn_delay is not None:
            use_moving_average = build.greater_equal(common.quantization_step(graph),
                                                     np.int64(freeze_bn_delay),
                                                     name="use_moving_average")
        else:
            use_moving_average = False
        for decay, cond_name in ((match.decay_mean, "freeze_moving_mean"),
                                 (match.decay_variance, "freeze_moving_var")):
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


def _clone_layer(graph, layer_op, weights):
    """The layer op again, named <Op>_Fold, reading the folded weights."""
    return graph.create_op(layer_op.type, [layer_op.inputs[0], weights], dict(layer_op.attrs),
                           name=layer_op.name.rsplit("/", 1)[-1] + "_Fold").outputs[0]
