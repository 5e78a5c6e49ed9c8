"""Layer builders with TF-slim names (<scope>/weights, <scope>/Conv2D, <scope>/BatchNorm/...)."""
import numpy as np

from . import build
from .core import GraphKeys, get_default_graph
from .variables import variable

_ACTIVATIONS = {None: None, "relu": build.relu, "relu6": build.relu6, "sigmoid": build.sigmoid,
                "tanh": build.tanh}


def _rng():
    return get_default_graph().initializer_rng()


def he_normal(shape, fan_in):
    """He (Kaiming) normal, suited to ReLU networks."""
    return (_rng().standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def glorot_uniform(shape, fan_in, fan_out):
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return _rng().uniform(-limit, limit, shape).astype(np.float32)


def _activation(name):
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"activation must be one of {sorted(k for k in _ACTIVATIONS if k)} "
                         f"or None, got {name!r}") from None


def _channels(x, name):
    if x.shape is None or len(x.shape) != 4 or x.shape[3] is None:
        raise ValueError(f"{name} needs an NHWC input with a known channel count, got shape {x.shape}")
    return x.shape[3]


def _normalize(y, bn_args, is_training):
    """batch_norm(y) with the layer's `batch_norm` argument: True or a dict of arguments."""
    return batch_norm(y, is_training=is_training, **(bn_args if isinstance(bn_args, dict) else {}))


def _finish(y, use_bias, channels, bn_args, is_training, activation):
    """Bias or batch norm, then the activation: the pattern contrib.quantize matches."""
    if bn_args:
        y = _normalize(y, bn_args, is_training)
    elif use_bias:
        biases = variable("biases", np.zeros(channels, np.float32), initializer_name="zeros")
        y = build.bias_add(y, biases.read)
    fn = _activation(activation)
    return fn(y) if fn is not None else y


def conv2d(x, filters, kernel_size=3, stride=1, padding="SAME", activation="relu", use_bias=True,
           batch_norm=None, is_training=True, dilation=1, scope="Conv"):
    """Conv2D [+ BiasAdd | + BatchNorm] [+ activation] under `scope`. batch_norm: True or a
    dict of batch_norm arguments (it replaces the bias)."""
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    g = get_default_graph()
    with g.name_scope(scope):
        cin = _channels(x, "conv2d")
        weights = variable("weights", he_normal((kh, kw, cin, filters), kh * kw * cin))
        y = build.conv2d(x, weights.read, strides=stride, padding=padding, dilations=dilation)
        return _finish(y, use_bias, filters, batch_norm, is_training, activation)


def depthwise_conv2d(x, kernel_size=3, depth_multiplier=1, stride=1, padding="SAME",
                     activation="relu", use_bias=True, batch_norm=None, is_training=True,
                     scope="DepthwiseConv"):
    """DepthwiseConv2dNative [+ BiasAdd | + BatchNorm] [+ activation] under `scope`."""
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    g = get_default_graph()
    with g.name_scope(scope):
        cin = _channels(x, "depthwise_conv2d")
        weights = variable("depthwise_weights", he_normal((kh, kw, cin, depth_multiplier), kh * kw))
        y = build.depthwise_conv2d(x, weights.read, strides=stride, padding=padding)
        return _finish(y, use_bias, cin * depth_multiplier, batch_norm, is_training, activation)


def dense(x, units, activation=None, use_bias=True, batch_norm=None, is_training=True,
          scope="fully_connected"):
    """MatMul [+ BiasAdd | + BatchNorm] [+ activation] on a [batch, features] input. Batch norm
    goes through a Reshape to [batch, 1, 1, units] and back, as TF-slim's fused batch norm does
    (the pattern contrib folds)."""
    if x.shape is None or len(x.shape) != 2 or x.shape[1] is None:
        raise ValueError(f"dense needs an x of shape [batch, features], got shape {x.shape}")
    g = get_default_graph()
    with g.name_scope(scope):
        weights = variable("weights", glorot_uniform((x.shape[1], units), x.shape[1], units))
        y = build.matmul(x, weights.read)
        if batch_norm:
            y = build.reshape(y, [-1, 1, 1, units])
            y = _normalize(y, batch_norm, is_training)
            y = build.reshape(y, [-1, units])
            return _finish(y, False, units, None, is_training, activation)
        return _finish(y, use_bias, units, None, is_training, activation)


def batch_norm(x, momentum=0.9, epsilon=1e-3, is_training=True, scope="BatchNorm"):
    """Fused batch norm with gamma, beta and moving statistics. Training normalizes with the batch
    statistics and adds the moving-average updates (moving -= (moving - stat) * (1 - momentum))
    to the UPDATE_OPS collection; inference uses the moving statistics."""
    g = get_default_graph()
    channels = x.shape[-1] if x.shape is not None else None
    if channels is None:
        raise ValueError(f"batch_norm needs a known channel count, got shape {x.shape}")
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum}")
    with g.name_scope(scope):
        gamma = variable("gamma", np.ones(channels, np.float32), initializer_name="ones")
        beta = variable("beta", np.zeros(channels, np.float32), initializer_name="zeros")
        moving_mean = variable("moving_mean", np.zeros(channels, np.float32), trainable=False,
                               initializer_name="zeros")
        moving_variance = variable("moving_variance", np.ones(channels, np.float32),
                                   trainable=False, initializer_name="ones")
        if not is_training:
            return build.fused_batch_norm(x, gamma.read, beta.read, moving_mean.read,
                                          moving_variance.read, epsilon=epsilon,
                                          is_training=False)[0]
        empty = np.zeros(0, np.float32)
        outputs = build.fused_batch_norm(x, gamma.read, beta.read, build.constant(empty),
                                         build.constant(empty), epsilon=epsilon, is_training=True)
        for var, stat in ((moving_mean, outputs[1]), (moving_variance, outputs[2])):
            update = _moving_average_update(g, var, stat, 1.0 - momentum)
            g.add_to_collection(GraphKeys.UPDATE_OPS, update)
        return outputs[0]


def _moving_average_update(g, var, stat, decay):
    """TF's assign_moving_average without debias: AssignMovingAvg{,_k}/{decay,sub,mul} + AssignSub."""
    with g.name_scope("AssignMovingAvg") as scope:
        decay_t = build.constant(np.float32(decay), name="decay")
        delta = build.multiply(build.subtract(var.read, stat, name="sub"), decay_t, name="mul")
        return g.create_op("AssignSub", [var.op.outputs[0], delta], {"use_locking": False},
                           full_name=scope[:-1])


def max_pool(x, pool_size=2, stride=2, padding="VALID", scope="MaxPool"):
    return build.max_pool(x, pool_size, stride, padding, name=scope)


def avg_pool(x, pool_size=2, stride=2, padding="VALID", scope="AvgPool"):
    return build.avg_pool(x, pool_size, stride, padding, name=scope)


def global_avg_pool(x, scope="pool"):
    """Mean over H and W: [N, H, W, C] -> [N, C]."""
    return build.reduce_mean(x, axis=[1, 2], name=scope)


def flatten(x, scope="Flatten"):
    if x.shape is None or any(d is None for d in x.shape[1:]):
        raise ValueError(f"flatten needs known non-batch dimensions, got shape {x.shape}")
    return build.reshape(x, [-1, int(np.prod(x.shape[1:]))], name=scope)


def sparse_softmax_cross_entropy(labels, logits, scope="loss"):
    """The mean softmax cross-entropy of integer labels (scope/xent/xent, scope/mean)."""
    g = get_default_graph()
    with g.name_scope(scope):
        with g.name_scope("xent"):
            xent = build.sparse_softmax_cross_entropy_with_logits(labels, logits, name="xent")
        return build.reduce_mean(xent, name="mean")
