"""Layer builders with TF-slim names (<scope>/weights, <scope>/Conv2D, <scope>/BatchNorm/...);
batch_norm lives in layers_batch_norm, the atrous (dilated) form in layers_atrous."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Union

import numpy as np

from . import build
from . import layers_atrous as atrous
from .core import get_default_graph
from .layers_batch_norm import batch_norm
from .variables import variable

if TYPE_CHECKING:
    from .core import Tensor
    from .type_aliases import TensorLike, Window

__all__ = ["conv2d", "depthwise_conv2d", "separable_conv2d", "dense", "batch_norm", "max_pool",
           "avg_pool", "global_avg_pool", "flatten", "sparse_softmax_cross_entropy", "he_normal",
           "glorot_uniform"]

_ACTIVATIONS = {None: None, "relu": build.relu, "relu6": build.relu6, "sigmoid": build.sigmoid,
                "tanh": build.tanh}


def _rng():
    return get_default_graph().initializer_rng()


def he_normal(shape: Tuple[int, ...], fan_in: int) -> np.ndarray:
    """He (Kaiming) normal initial values, suited to ReLU networks, from the graph's seeded
    generator: normal with standard deviation ``sqrt(2 / fan_in)``.

    Parameters
    ----------
    shape : tuple of int
        The array's shape.
    fan_in : int
        Inputs per output unit (kernel height * width * input channels for a convolution).

    Returns
    -------
    numpy.ndarray
        float32 values of `shape`.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     w = G.layers.he_normal((3, 3, 16, 32), 3 * 3 * 16)
    >>> w.shape, w.dtype, bool(abs(w.std() - (2 / 144) ** 0.5) < 0.01)
    ((3, 3, 16, 32), dtype('float32'), True)
    """
    return (_rng().standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def glorot_uniform(shape: Tuple[int, ...], fan_in: int, fan_out: int) -> np.ndarray:
    """Glorot (Xavier) uniform initial values from the graph's seeded generator: uniform in
    ``±sqrt(6 / (fan_in + fan_out))``.

    Parameters
    ----------
    shape : tuple of int
        The array's shape.
    fan_in, fan_out : int
        Inputs and outputs per unit.

    Returns
    -------
    numpy.ndarray
        float32 values of `shape`.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     w = G.layers.glorot_uniform((4, 2), 4, 2)
    >>> w.shape, bool(abs(w).max() <= 1.0)
    ((4, 2), True)
    """
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


def conv2d(x: Tensor, filters: int, kernel_size: Window = 3, stride: int = 1,
           padding: str = "SAME", activation: Optional[str] = "relu", use_bias: bool = True,
           batch_norm: Union[bool, Dict[str, Any], None] = None, is_training: bool = True,
           dilation: Window = 1, scope: str = "Conv") -> Tensor:
    """A slim convolution layer under `scope`: Conv2D [+ BiasAdd | + BatchNorm] [+ activation].

    Variables ``<scope>/weights`` (He normal) and ``<scope>/biases``; the ops named as slim names
    them, the pattern contrib.quantize matches. ``dilation > 1`` builds TF's atrous form
    ``<scope>/Conv2D/SpaceToBatchND -> <scope>/Conv2D (VALID, stride 1) ->
    <scope>/Conv2D/BatchToSpaceND``.

    Parameters
    ----------
    x : Tensor
        float32 NHWC with a known channel count.
    filters : int
        Output channels.
    kernel_size : int or (int, int), default 3
        The kernel's height and width.
    stride : int, default 1
        The step of the window.
    padding : {"SAME", "VALID"}, default "SAME"
        TF's padding rule.
    activation : {"relu", "relu6", "sigmoid", "tanh", None}, default "relu"
        The activation after the bias or batch norm (None: linear).
    use_bias : bool, default True
        Add a ``biases`` variable (when there is no batch norm).
    batch_norm : bool or dict, optional
        True, or a dict of :func:`batch_norm` arguments: a batch norm instead of the bias.
    is_training : bool, default True
        Passed to the batch norm.
    dilation : int or (int, int), default 1
        The spacing of the kernel taps.
    scope : str, default "Conv"
        The layer's name scope.

    Returns
    -------
    Tensor
        NHWC, `filters` channels.

    Raises
    ------
    ValueError
        An input that is not NHWC with a known channel count, an unknown activation, a stride
        above 1 with a dilation above 1.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    ...     y = G.layers.conv2d(images, 16, 3, stride=2, scope="conv1")
    >>> y.shape, y.op.name
    ((None, 4, 4, 16), 'conv1/Relu')
    >>> [v.op.name for v in G.global_variables(g)]
    ['conv1/weights', 'conv1/biases']
    """
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    rate = atrous.pair(dilation, "dilation", "conv2d")
    atrous.check_stride(stride, rate, "conv2d")
    g = get_default_graph()
    with g.name_scope(scope):
        cin = _channels(x, "conv2d")
        weights = variable("weights", he_normal((kh, kw, cin, filters), kh * kw * cin))
        if max(rate) == 1:
            y = build.conv2d(x, weights.read, strides=stride, padding=padding, dilations=dilation)
        else:
            y = atrous.with_space_to_batch(
                x, (kh, kw), rate, padding, _path(g, "Conv2D"),
                lambda t: build.conv2d(t, weights.read, strides=1, padding="VALID",
                                       name="Conv2D"), f"conv2d {g.get_name_scope()!r}")
        return _finish(y, use_bias, filters, batch_norm, is_training, activation)


def depthwise_conv2d(x: Tensor, kernel_size: Window = 3, depth_multiplier: int = 1,
                     stride: int = 1, padding: str = "SAME", activation: Optional[str] = "relu",
                     use_bias: bool = True, batch_norm: Union[bool, Dict[str, Any], None] = None,
                     is_training: bool = True, scope: str = "DepthwiseConv",
                     dilation: Window = 1) -> Tensor:
    """A depthwise convolution layer under `scope`: DepthwiseConv2dNative [+ BiasAdd |
    + BatchNorm] [+ activation].

    The variable is ``<scope>/depthwise_weights`` ``[kh, kw, in_channels, depth_multiplier]``;
    ``dilation > 1`` builds TF's nn.depthwise_conv2d atrous form.

    Parameters
    ----------
    x : Tensor
        float32 NHWC with a known channel count.
    kernel_size : int or (int, int), default 3
        The kernel's height and width.
    depth_multiplier : int, default 1
        Output channels per input channel.
    stride : int, default 1
        The step of the window.
    padding : {"SAME", "VALID"}, default "SAME"
        TF's padding rule.
    activation : {"relu", "relu6", "sigmoid", "tanh", None}, default "relu"
        The activation after the bias or batch norm (None: linear).
    use_bias : bool, default True
        Add a ``biases`` variable (when there is no batch norm).
    batch_norm : bool or dict, optional
        True, or a dict of :func:`batch_norm` arguments: a batch norm instead of the bias.
    is_training : bool, default True
        Passed to the batch norm.
    scope : str, default "DepthwiseConv"
        The layer's name scope.
    dilation : int or (int, int), default 1
        The spacing of the kernel taps.

    Returns
    -------
    Tensor
        NHWC, ``in_channels * depth_multiplier`` channels.

    Raises
    ------
    ValueError
        An input that is not NHWC with a known channel count, an unknown activation, a stride
        above 1 with a dilation above 1.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    ...     y = G.layers.depthwise_conv2d(images, 3, depth_multiplier=2, scope="dw")
    >>> y.shape
    (None, 8, 8, 2)
    >>> [v.op.name for v in G.global_variables(g)]
    ['dw/depthwise_weights', 'dw/biases']
    """
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    rate = atrous.pair(dilation, "dilation", "depthwise_conv2d")
    atrous.check_stride(stride, rate, "depthwise_conv2d")
    g = get_default_graph()
    with g.name_scope(scope):
        cin = _channels(x, "depthwise_conv2d")
        weights = variable("depthwise_weights", he_normal((kh, kw, cin, depth_multiplier), kh * kw))
        if max(rate) == 1:
            y = build.depthwise_conv2d(x, weights.read, strides=stride, padding=padding)
        else:
            y = _depthwise(g, x, weights.read, (kh, kw), stride, padding, rate,
                           f"depthwise_conv2d {g.get_name_scope()!r}")
        return _finish(y, use_bias, cin * depth_multiplier, batch_norm, is_training, activation)


def separable_conv2d(x: Tensor, filters: Optional[int], kernel_size: Window = 3,
                     depth_multiplier: int = 1, stride: int = 1, padding: str = "SAME",
                     dilation: Window = 1, activation: Optional[str] = "relu",
                     use_bias: bool = True, batch_norm: Union[bool, Dict[str, Any], None] = None,
                     is_training: bool = True, scope: str = "SeparableConv2d") -> Tensor:
    """slim's separable_conv2d: a depthwise convolution, then (unless `filters` is None) a 1x1
    pointwise one, then the bias or batch norm and the activation.

    Variables ``<scope>/depthwise_weights`` ``[kh, kw, cin, m]`` and ``<scope>/pointwise_weights``
    ``[1, 1, cin * m, filters]``. With filters=None: the depthwise conv alone,
    ``<scope>/depthwise``; otherwise ``<scope>/separable_conv2d/depthwise`` then the 1x1 VALID
    Conv2D ``<scope>/separable_conv2d``. ``dilation > 1`` wraps the depthwise conv in
    SpaceToBatchND / BatchToSpaceND.

    Parameters
    ----------
    x : Tensor
        float32 NHWC with a known channel count.
    filters : int or None
        Output channels of the pointwise convolution (None: no pointwise convolution).
    kernel_size : int or (int, int), default 3
        The depthwise kernel's height and width.
    depth_multiplier : int, default 1
        Depthwise output channels per input channel.
    stride : int, default 1
        The depthwise step.
    padding : {"SAME", "VALID"}, default "SAME"
        The depthwise padding rule.
    dilation : int or (int, int), default 1
        The spacing of the depthwise taps.
    activation : {"relu", "relu6", "sigmoid", "tanh", None}, default "relu"
        The activation after the bias or batch norm (None: linear).
    use_bias : bool, default True
        Add a ``biases`` variable (when there is no batch norm).
    batch_norm : bool or dict, optional
        True, or a dict of :func:`batch_norm` arguments: a batch norm instead of the bias.
    is_training : bool, default True
        Passed to the batch norm.
    scope : str, default "SeparableConv2d"
        The layer's name scope.

    Returns
    -------
    Tensor
        NHWC.

    Raises
    ------
    ValueError
        An input that is not NHWC with a known channel count, an unknown activation, a stride
        above 1 with a dilation above 1.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    ...     y = G.layers.separable_conv2d(images, 8, scope="sep")
    >>> y.shape
    (None, 8, 8, 8)
    >>> [v.op.name for v in G.global_variables(g)]
    ['sep/depthwise_weights', 'sep/pointwise_weights', 'sep/biases']
    """
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    rate = atrous.pair(dilation, "dilation", "separable_conv2d")
    atrous.check_stride(stride, rate, "separable_conv2d")
    g = get_default_graph()
    with g.name_scope(scope):
        layer = f"separable_conv2d {g.get_name_scope()!r}"
        cin = _channels(x, "separable_conv2d")
        depthwise = variable("depthwise_weights",
                             he_normal((kh, kw, cin, depth_multiplier), kh * kw))
        if filters is None:
            y = _depthwise(g, x, depthwise.read, (kh, kw), stride, padding, rate, layer)
            channels = cin * depth_multiplier
        else:
            pointwise = variable("pointwise_weights", he_normal(
                (1, 1, cin * depth_multiplier, filters), cin * depth_multiplier))
            # nn.separable_conv2d names its Conv2D after the scope its depthwise op is in.
            container = _path(g, "separable_conv2d")
            with g.name_scope(container + "/"):
                if max(rate) == 1:
                    y = build.depthwise_conv2d(x, depthwise.read, strides=stride, padding=padding,
                                               name="depthwise")
                else:
                    y = atrous.with_space_to_batch(
                        x, (kh, kw), rate, padding, container,
                        lambda t: build.depthwise_conv2d(t, depthwise.read, strides=1,
                                                         padding="VALID", name="depthwise"),
                        layer)
            y = build.conv2d(y, pointwise.read, strides=1, padding="VALID",
                             name="separable_conv2d")
            _check_name(y, container)
            channels = filters
        return _finish(y, use_bias, channels, batch_norm, is_training, activation)


def _path(g, name):
    """The full name `name` gets in the current scope (the scope of TF's `with name_scope(name)`
    whose op is named after the scope itself)."""
    scope = g.get_name_scope()
    return f"{scope}/{name}" if scope else name


def _check_name(tensor, expected):
    if tensor.op.name != expected:
        raise ValueError(f"{expected!r} is already taken in the graph (got {tensor.op.name!r})")


def _depthwise(g, x, weights, kernel, stride, padding, rate, layer):
    """TF's nn.depthwise_conv2d: one DepthwiseConv2dNative named `depthwise`, in its atrous form
    (<scope>/depthwise/SpaceToBatchND, BatchToSpaceND) when rate > 1."""
    if max(rate) == 1:
        y = build.depthwise_conv2d(x, weights, strides=stride, padding=padding, name="depthwise")
    else:
        y = atrous.with_space_to_batch(
            x, kernel, rate, padding, _path(g, "depthwise"),
            lambda t: build.depthwise_conv2d(t, weights, strides=1, padding="VALID",
                                             name="depthwise"), layer)
        _check_name(y.op.inputs[0], _path(g, "depthwise"))
    return y


def dense(x: Tensor, units: int, activation: Optional[str] = None, use_bias: bool = True,
          batch_norm: Union[bool, Dict[str, Any], None] = None, is_training: bool = True,
          scope: str = "fully_connected") -> Tensor:
    """A fully connected layer under `scope`: MatMul [+ BiasAdd | + BatchNorm] [+ activation].

    A fused batch norm goes through a Reshape to ``[batch, 1, 1, units]`` and back, as TF-slim's
    fused batch norm does (the pattern contrib folds); an unfused one (``batch_norm={"fused":
    False}``) takes the MatMul output as it is.

    Parameters
    ----------
    x : Tensor
        float32 ``[batch, features]`` with a known feature count.
    units : int
        Output features.
    activation : {"relu", "relu6", "sigmoid", "tanh", None}, default None
        The activation (None: linear).
    use_bias : bool, default True
        Add a ``biases`` variable (when there is no batch norm).
    batch_norm : bool or dict, optional
        True, or a dict of :func:`batch_norm` arguments: a batch norm instead of the bias.
    is_training : bool, default True
        Passed to the batch norm.
    scope : str, default "fully_connected"
        The layer's name scope.

    Returns
    -------
    Tensor
        ``[batch, units]``.

    Raises
    ------
    ValueError
        An input that is not ``[batch, features]`` with a known feature count, an unknown
        activation.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 4], name="x")
    ...     logits = G.layers.dense(x, 10, scope="logits")
    >>> logits.shape, [v.op.name for v in G.global_variables(g)]
    ((None, 10), ['logits/weights', 'logits/biases'])
    """
    if x.shape is None or len(x.shape) != 2 or x.shape[1] is None:
        raise ValueError(f"dense needs an x of shape [batch, features], got shape {x.shape}")
    g = get_default_graph()
    with g.name_scope(scope):
        weights = variable("weights", glorot_uniform((x.shape[1], units), x.shape[1], units))
        y = build.matmul(x, weights.read)
        if batch_norm:
            if isinstance(batch_norm, dict) and not batch_norm.get("fused", True):
                y = _normalize(y, batch_norm, is_training)
            else:
                y = build.reshape(y, [-1, 1, 1, units])
                y = _normalize(y, batch_norm, is_training)
                y = build.reshape(y, [-1, units])
            return _finish(y, False, units, None, is_training, activation)
        return _finish(y, use_bias, units, None, is_training, activation)


def max_pool(x: Tensor, pool_size: Window = 2, stride: Window = 2,
             padding: str = "VALID", scope: str = "MaxPool") -> Tensor:
    """slim's max_pool2d under `scope`: a MaxPool op over NHWC windows.

    Parameters
    ----------
    x : Tensor
        float32 NHWC.
    pool_size : int or (int, int), default 2
        The window.
    stride : int or (int, int), default 2
        Its step.
    padding : {"VALID", "SAME"}, default "VALID"
        TF's padding rule.
    scope : str, default "MaxPool"
        The op's name.

    Returns
    -------
    Tensor
        The pooled values.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    ...     y = G.layers.max_pool(images)
    >>> y.shape, y.op.type
    ((None, 4, 4, 1), 'MaxPool')
    """
    return build.max_pool(x, pool_size, stride, padding, name=scope)


def avg_pool(x: Tensor, pool_size: Window = 2, stride: Window = 2,
             padding: str = "VALID", scope: str = "AvgPool") -> Tensor:
    """slim's avg_pool2d under `scope`: an AvgPool op over NHWC windows.

    Parameters
    ----------
    x : Tensor
        float32 NHWC.
    pool_size : int or (int, int), default 2
        The window.
    stride : int or (int, int), default 2
        Its step.
    padding : {"VALID", "SAME"}, default "VALID"
        TF's padding rule.
    scope : str, default "AvgPool"
        The op's name.

    Returns
    -------
    Tensor
        The pooled values.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    ...     y = G.layers.avg_pool(images, 4, 4)
    >>> y.shape, y.op.type
    ((None, 2, 2, 1), 'AvgPool')
    """
    return build.avg_pool(x, pool_size, stride, padding, name=scope)


def global_avg_pool(x: Tensor, scope: str = "pool") -> Tensor:
    """The mean over height and width of an NHWC tensor: a Mean op over axes [1, 2], under
    `scope`.

    Parameters
    ----------
    x : Tensor
        float32 NHWC.
    scope : str, default "pool"
        The name scope.

    Returns
    -------
    Tensor
        ``[batch, channels]``.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    ...     y = G.layers.global_avg_pool(images)
    >>> y.shape, y.op.type
    ((None, 1), 'Mean')
    """
    return build.reduce_mean(x, axis=[1, 2], name=scope)


def flatten(x: Tensor, scope: str = "Flatten") -> Tensor:
    """Each example as one row: a Reshape to ``[batch, -1]`` under `scope`.

    Parameters
    ----------
    x : Tensor
        Any rank, the batch first.
    scope : str, default "Flatten"
        The name scope.

    Returns
    -------
    Tensor
        ``[batch, features]``.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    ...     y = G.layers.flatten(images)
    >>> y.shape
    (None, 64)
    """
    if x.shape is None or any(d is None for d in x.shape[1:]):
        raise ValueError(f"flatten needs known non-batch dimensions, got shape {x.shape}")
    return build.reshape(x, [-1, int(np.prod(x.shape[1:]))], name=scope)


def sparse_softmax_cross_entropy(labels: TensorLike, logits: TensorLike,
                                 scope: str = "loss") -> Tensor:
    """The mean cross entropy of the logits' softmax with integer labels, under `scope`: the
    scalar loss of a classifier.

    Parameters
    ----------
    labels : Tensor
        int32 ``[batch]``: class indices.
    logits : Tensor
        float32 ``[batch, classes]``.
    scope : str, default "loss"
        The name scope.

    Returns
    -------
    Tensor
        A float32 scalar.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     logits = G.placeholder("float32", [None, 2], name="logits")
    ...     labels = G.placeholder("int32", [None], name="labels")
    ...     loss = G.layers.sparse_softmax_cross_entropy(labels, logits)
    >>> round(float(G.Session(g).run(loss, {logits: [[0.0, 0.0]], labels: [0]})), 4)   # ln 2
    0.6931
    """
    g = get_default_graph()
    with g.name_scope(scope):
        with g.name_scope("xent"):
            xent = build.sparse_softmax_cross_entropy_with_logits(labels, logits, name="xent")
        return build.reduce_mean(xent, name="mean")
