"""Convolutions, pooling, activations, softmax cross-entropy and FusedBatchNormV3 (NHWC)."""
import numpy as np

from ... import _kernels
from ... import batch_norm as _bn
from ...ops import _kernel_form
from .. import nn_numpy
from ..op_registry import register, register_gradient_override
from ._infer import FLOAT32, like_input


def _pair(op, key, default=(1, 1, 1, 1)):
    """TF's 4-element NHWC strides/dilations/ksize attribute as an (h, w) pair."""
    value = list(op.attrs.get(key, default))
    if len(value) != 4 or value[0] != 1 or value[3] != 1:
        raise ValueError(f"{op.name}: {key} must be [1, h, w, 1] for NHWC, got {value}")
    return int(value[1]), int(value[2])


def _check_format(op):
    data_format = op.attrs.get("data_format", "NHWC")
    if data_format != "NHWC":
        raise ValueError(f"{op.name}: fqcore.graph runs NHWC only, got data_format={data_format!r}")


def _spatial_infer(op_type, channels_of):
    """Output shape of a windowed NHWC op; `channels_of(inputs)` gives the output channels.
    Known ranks other than 4 are refused when the op is built, as TF does."""
    def infer(inputs, attrs):
        x = inputs[0].shape
        for name, t in (("input", inputs[0]), ("filter", inputs[1] if len(inputs) > 1 else None)):
            if t is not None and t.shape is not None and len(t.shape) != 4:
                raise ValueError(f"{op_type}: {name} {t.name!r} must be rank 4, got shape "
                                 f"{tuple(t.shape)}")
        if x is None:
            return [(None, inputs[0].dtype)]
        if "ksize" in attrs:
            kh, kw = attrs["ksize"][1], attrs["ksize"][2]
        elif inputs[1].shape is None:
            return [((x[0], None, None, None), inputs[0].dtype)]
        else:
            kh, kw = inputs[1].shape[0], inputs[1].shape[1]
        dil = attrs.get("dilations", [1, 1, 1, 1])
        out = [x[0]]
        for size, k, s, d in ((x[1], kh, attrs["strides"][1], dil[1]),
                              (x[2], kw, attrs["strides"][2], dil[2])):
            out.append(None if size is None else
                       nn_numpy.output_size_and_padding(size, k, s, d, attrs["padding"])[0])
        out.append(channels_of(inputs))
        return [(tuple(out), inputs[0].dtype)]
    return infer


def _filter_channels(op_type, inputs):
    """The filter's shape after checking its input channels against x's (None: unknown)."""
    x, w = inputs[0].shape, inputs[1].shape
    if w is None:
        return None
    if x is not None and None not in (x[3], w[2]) and x[3] != w[2]:
        raise ValueError(f"{op_type}: input {inputs[0].name!r} has {x[3]} channels but filter "
                         f"{inputs[1].name!r} expects {w[2]} (shape {tuple(w)})")
    return w


def _conv_channels(inputs):
    w = _filter_channels("Conv2D", inputs)
    return None if w is None else w[3]


def _depthwise_channels(inputs):
    w = _filter_channels("DepthwiseConv2dNative", inputs)
    return None if w is None or None in (w[2], w[3]) else w[2] * w[3]


def _pool_channels(inputs):
    return inputs[0].shape[3]


def conv_args(op):
    _check_format(op)
    return dict(strides=_pair(op, "strides"), padding=op.attrs["padding"],
                dilations=_pair(op, "dilations"))


def _conv2d_grad(op, inputs, outputs, grads):
    return list(nn_numpy.conv2d_grad(inputs[0], inputs[1], grads[0], **conv_args(op)))


@register("Conv2D", _spatial_infer("Conv2D", _conv_channels), gradient=_conv2d_grad)
def conv2d(op, inputs, ctx):
    return (nn_numpy.conv2d(inputs[0], inputs[1], **conv_args(op)),)


def _depthwise_grad(op, inputs, outputs, grads):
    return list(nn_numpy.depthwise_conv2d_grad(inputs[0], inputs[1], grads[0], **conv_args(op)))


@register("DepthwiseConv2dNative", _spatial_infer("DepthwiseConv2dNative", _depthwise_channels),
          gradient=_depthwise_grad)
def depthwise_conv2d(op, inputs, ctx):
    return (nn_numpy.depthwise_conv2d(inputs[0], inputs[1], **conv_args(op)),)


def _pool_args(op):
    _check_format(op)
    return dict(ksize=_pair(op, "ksize"), strides=_pair(op, "strides"), padding=op.attrs["padding"])


@register("MaxPool", _spatial_infer("MaxPool", _pool_channels), gradient=lambda op, x, y, g: [
    nn_numpy.max_pool_grad(x[0], y[0], g[0], **_pool_args(op))])
def max_pool(op, inputs, ctx):
    return (nn_numpy.max_pool(inputs[0], **_pool_args(op)),)


@register("AvgPool", _spatial_infer("AvgPool", _pool_channels), gradient=lambda op, x, y, g: [
    nn_numpy.avg_pool_grad(x[0].shape, g[0], **_pool_args(op))])
def avg_pool(op, inputs, ctx):
    return (nn_numpy.avg_pool(inputs[0], **_pool_args(op)),)


# -- activations --------------------------------------------------------------------------

@register("Relu", like_input(), gradient=lambda op, x, y, g: [g[0] * (y[0] > 0)])
def relu(op, inputs, ctx):
    return (np.maximum(inputs[0], np.zeros((), inputs[0].dtype)),)


@register("Relu6", like_input(),
          gradient=lambda op, x, y, g: [g[0] * ((x[0] > 0) & (x[0] < 6))])
def relu6(op, inputs, ctx):
    x = inputs[0]
    return (np.clip(x, np.zeros((), x.dtype), np.asarray(6, x.dtype)),)


@register("Sigmoid", like_input(),
          gradient=lambda op, x, y, g: [g[0] * (y[0] * (np.ones((), y[0].dtype) - y[0]))])
def sigmoid(op, inputs, ctx):
    x = inputs[0]
    one = np.ones((), x.dtype)
    return (one / (one + np.exp(-x)),)


@register("Tanh", like_input(),
          gradient=lambda op, x, y, g: [g[0] * (np.ones((), y[0].dtype) - y[0] * y[0])])
def tanh(op, inputs, ctx):
    return (np.tanh(inputs[0]),)


def _softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True, dtype=e.dtype)


def _softmax_grad(op, inputs, outputs, grads):
    y, g = outputs[0], grads[0]
    return [(g - (g * y).sum(axis=-1, keepdims=True, dtype=g.dtype)) * y]


@register("Softmax", like_input(), gradient=_softmax_grad)
def softmax(op, inputs, ctx):
    return (_softmax(inputs[0]),)


def _xent_infer(inputs, attrs):
    logits = inputs[0].shape
    batch = None if logits is None else (logits[0],)
    return [(batch, inputs[0].dtype), (logits, inputs[0].dtype)]


def _xent_grad(op, inputs, outputs, grads):
    if grads[0] is None:
        return [None, None]
    return [grads[0][:, None] * outputs[1], None]


@register("SparseSoftmaxCrossEntropyWithLogits", _xent_infer, gradient=_xent_grad)
def sparse_softmax_cross_entropy_with_logits(op, inputs, ctx):
    logits, labels = inputs
    if logits.ndim != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"{op.name}: logits must be [batch, classes] and labels [batch], got "
                         f"{logits.shape} and {labels.shape}")
    classes = logits.shape[1]
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        bad = labels[(labels < 0) | (labels >= classes)][0]
        raise ValueError(f"{op.name}: label {int(bad)} is outside [0, {classes})")
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    total = e.sum(axis=1, keepdims=True, dtype=e.dtype)
    rows = np.arange(len(labels))
    loss = np.log(total[:, 0]) - shifted[rows, labels]
    backprop = e / total
    backprop[rows, labels] -= np.ones((), backprop.dtype)
    return (loss, backprop)


# -- FusedBatchNormV3 ---------------------------------------------------------------------

def _bn_infer(inputs, attrs):
    x = inputs[0]
    channels = None if x.shape is None else (x.shape[-1],)
    return [(x.shape, x.dtype)] + [(channels, FLOAT32)] * 4 + [((0,), FLOAT32)]


def _bn_grad(op, inputs, outputs, grads):
    """FusedBatchNormGradV3: TF uses only the gradient of y (zeros when y is unused)."""
    x, scale = inputs[0], inputs[1]
    dy = grads[0] if grads[0] is not None else np.zeros_like(x)
    training = op.attrs.get("is_training", True)
    result = _bn.fused_batch_norm_grad(
        dy, x, scale, outputs[3] if training else inputs[3], outputs[4] if training else inputs[4],
        epsilon=op.attrs.get("epsilon", 1e-4), data_format="NHWC", is_training=training)
    return [result.x_backprop, result.scale_backprop, result.offset_backprop, None, None]


def _fold_batch_norm_grad(op, inputs, outputs, grads):
    """contrib.quantize's FoldFusedBatchNormGrad: after folding, y is unused; x gets the gradient
    through the batch mean and the (Bessel-corrected) batch variance only."""
    x = inputs[0]
    channels = outputs[1].shape[0]
    grad_mean = grads[1] if grads[1] is not None else np.zeros(channels, FLOAT32)
    grad_var = grads[2] if grads[2] is not None else np.zeros(channels, FLOAT32)
    n = np.float32(x.size / channels)
    if x.dtype == FLOAT32 and grad_mean.dtype == FLOAT32 and grad_var.dtype == FLOAT32:
        # One pass doing the formula below in the same float32 steps.
        try:
            dx = _kernels.fold_batch_norm_grad(x, channels, outputs[1], grad_mean, grad_var, n)
        except ValueError:  # an operand not in the kernels' form: copies that are
            dx = _kernels.fold_batch_norm_grad(_kernel_form(x), channels, outputs[1],
                                               _kernel_form(grad_mean), _kernel_form(grad_var), n)
        return [dx, None, None, None, None]
    dmean_dx = grad_mean / n
    dvar_dx = np.float32(2) * grad_var * (x - outputs[1]) / (n - np.float32(1))
    return [dmean_dx + dvar_dx, None, None, None, None]


# The name contrib.quantize gives a folded batch norm's gradient (its gradient_override_map).
FOLDED_GRADIENT = "FoldFusedBatchNormGrad"
register_gradient_override(FOLDED_GRADIENT, _fold_batch_norm_grad)


def batch_norm_forward(op, inputs, normalize=True):
    """FusedBatchNormV3's outputs; with normalize=False (training) y is None, not computed."""
    _check_format(op)
    x, scale, offset, mean, variance = inputs
    training = op.attrs.get("is_training", True)
    result = _bn.fused_batch_norm(
        x, scale, offset, mean if mean.size or not training else None,
        variance if variance.size or not training else None,
        epsilon=op.attrs.get("epsilon", 1e-4),
        exponential_avg_factor=op.attrs.get("exponential_avg_factor", 1.0), data_format="NHWC",
        is_training=training, normalize=normalize)
    return (result.y, result.batch_mean, result.batch_variance, result.reserve_space_1,
            result.reserve_space_2, np.zeros(0, FLOAT32))


@register("FusedBatchNormV3", _bn_infer, gradient=_bn_grad)
def fused_batch_norm_v3(op, inputs, ctx):
    return batch_norm_forward(op, inputs)
