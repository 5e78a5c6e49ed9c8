"""batch_norm as TF 1.15's slim builds it, fused (FusedBatchNormV3) or unfused (nn.moments and
nn.batch_normalization), with its moving-average updates; contrib.quantize folds both by name."""
from __future__ import annotations

from typing import Sequence, Union

import numpy as np

from . import build
from .core import GraphKeys, Tensor, get_default_graph
from .variables import variable


def batch_norm(x: Tensor, momentum: float = 0.9, epsilon: float = 1e-3, is_training: bool = True,
               scope: str = "BatchNorm", *, center: bool = True, scale: bool = True,
               fused: bool = True,
               updates_collections: Union[str, Sequence[str], None] = GraphKeys.UPDATE_OPS
               ) -> Tensor:
    """slim's batch norm under `scope`: gamma (scale=True), beta (center=True) and moving
    statistics.

    Training normalizes with the batch statistics and updates the moving statistics as
    ``moving -= (moving - stat) * (1 - momentum)`` (stat: the batch mean and variance; the fused
    op's variance is Bessel-corrected, the unfused one's is biased, as in TF). Inference uses the
    moving statistics and adds no updates.

    Parameters
    ----------
    x : Tensor
        float32 with a known channel count (last axis): NHWC when fused, also ``[N, C]`` unfused.
    momentum : float, default 0.9
        The moving statistics' decay, 0 to 1.
    epsilon : float, default 1e-3
        Added to the variance.
    is_training : bool, default True
        Batch statistics and updates (True) or moving statistics (False).
    scope : str, default "BatchNorm"
        The name scope.
    center, scale : bool, default True
        Add beta (offset) and gamma (scale) variables.
    fused : bool, default True
        FusedBatchNormV3 (NHWC), or slim's unfused graph (``moments/...``,
        ``AssignMovingAvg{,_1}/...``, ``batchnorm_1/...``).
    updates_collections : str, list of str or None, default GraphKeys.UPDATE_OPS
        Where the moving-statistics updates go (run them with each training step); None forces
        them: the output depends on them through control dependencies, as slim does.

    Returns
    -------
    Tensor
        The normalized values, of the input's shape.

    Raises
    ------
    ValueError
        An unknown channel count, a momentum outside [0, 1].

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 4, 4, 3], name="x")
    ...     y = G.layers.batch_norm(x, scope="bn")
    >>> [v.op.name for v in G.global_variables(g)]
    ['bn/gamma', 'bn/beta', 'bn/moving_mean', 'bn/moving_variance']
    >>> len(g.get_collection(G.GraphKeys.UPDATE_OPS))
    2
    """
    g = get_default_graph()
    if x.shape is None or not x.shape or x.shape[-1] is None:
        raise ValueError(f"batch_norm needs a known channel count, got shape {x.shape}")
    channels = x.shape[-1]
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum}")
    collections = _collections(updates_collections)
    with g.name_scope(scope):
        gamma = variable("gamma", np.ones(channels, np.float32),
                         initializer_name="ones") if scale else None
        beta = variable("beta", np.zeros(channels, np.float32),
                        initializer_name="zeros") if center else None
        moving_mean = variable("moving_mean", np.zeros(channels, np.float32), trainable=False,
                               initializer_name="zeros")
        moving_variance = variable("moving_variance", np.ones(channels, np.float32),
                                   trainable=False, initializer_name="ones")
        decay = 1.0 - momentum
        if fused:
            return _fused(g, x, channels, gamma, beta, moving_mean, moving_variance, epsilon,
                          is_training, decay, updates_collections, collections)
        return _unfused(g, x, gamma, beta, moving_mean, moving_variance, epsilon, is_training,
                        decay, updates_collections, collections)


def _collections(updates_collections):
    if updates_collections is None:
        return []
    if isinstance(updates_collections, str):
        return [updates_collections]
    if isinstance(updates_collections, (list, tuple)) and all(
            isinstance(c, str) for c in updates_collections):
        return list(updates_collections)
    raise ValueError(f"updates_collections must be None, a collection name or a list of them, "
                     f"got {updates_collections!r}")


def _add_updates(g, updates, collections):
    for key in collections:
        for update in updates:
            g.add_to_collection(key, update)


def _fused(g, x, channels, gamma, beta, moving_mean, moving_variance, epsilon, is_training, decay,
           updates_collections, collections):
    # slim's _fused_batch_norm: without center/scale, beta/gamma are constants (beta first).
    offset = beta.read if beta is not None else build.constant(
        np.zeros(channels, np.float32), name="Const")
    gain = gamma.read if gamma is not None else build.constant(
        np.ones(channels, np.float32), name="Const")
    if not is_training:
        return build.fused_batch_norm(x, gain, offset, moving_mean.read, moving_variance.read,
                                      epsilon=epsilon, is_training=False)[0]
    empty = np.zeros(0, np.float32)
    outputs = build.fused_batch_norm(x, gain, offset, build.constant(empty),
                                     build.constant(empty), epsilon=epsilon, is_training=True)
    updates = [_moving_average_update(g, var, stat, decay)
               for var, stat in ((moving_mean, outputs[1]), (moving_variance, outputs[2]))]
    if updates_collections is None:
        with g.control_dependencies(updates):
            return build.identity(outputs[0], name="Identity")
    _add_updates(g, updates, collections)
    return outputs[0]


def _unfused(g, x, gamma, beta, moving_mean, moving_variance, epsilon, is_training, decay,
             updates_collections, collections):
    """TF 1.15 slim's unfused batch norm. With the default updates_collections (UPDATE_OPS) slim
    hands the work to the core BatchNormalization layer, whose normalization scope is
    `batchnorm_1`; otherwise (None: forced updates, or another collection) slim calls nn.moments
    and nn.batch_normalization itself, in scope `batchnorm`. contrib.quantize's unfused folding
    (fold_batch_norms.py: _FoldUnfusedBatchNorms, _GetBatchNormParams) looks for
    BatchNorm/moments/Squeeze{,_1}, BatchNorm/AssignMovingAvg{,_1}/decay and
    BatchNorm/batchnorm_1/{add/y,Rsqrt,mul,mul_1,add_1}."""
    if len(x.shape) < 2:
        raise ValueError(f"batch_norm needs an input of rank >= 2, got shape {x.shape}")
    core_layer = updates_collections == GraphKeys.UPDATE_OPS
    if is_training:
        axes = list(range(len(x.shape) - 1))
        mean, variance = _moments(g, x, axes)
        updates = [_moving_average_update(g, moving_mean, mean, decay),
                   _moving_average_update(g, moving_variance, variance, decay)]
        if updates_collections is None:
            with g.control_dependencies(updates):
                mean = build.identity(mean, name="Identity")
                variance = build.identity(variance, name="Identity")
        else:
            _add_updates(g, updates, collections)
    else:
        mean, variance = moving_mean.read, moving_variance.read
    with g.name_scope("batchnorm_1" if core_layer else "batchnorm"):
        return _batch_normalization(g, x, mean, variance, None if beta is None else beta.read,
                                    None if gamma is None else gamma.read, epsilon)


def _moments(g, x, axes):
    """TF's nn.moments(x, axes) (keep_dims=False): mean, StopGradient, SquaredDifference,
    variance (biased), then Squeeze and Squeeze_1 to [C]."""
    with g.name_scope("moments"):
        mean = build.reduce_mean(x, axes, keepdims=True, name="mean")
        deviation = build.squared_difference(x, build.stop_gradient(mean))
        variance = build.reduce_mean(deviation, axes, keepdims=True, name="variance")
        return build.squeeze(mean, axes), build.squeeze(variance, axes)


def _batch_normalization(g, x, mean, variance, offset, scale, epsilon):
    """TF's nn.batch_normalization, op for op (contrib.quantize depends on this order):
        inv = rsqrt(variance + epsilon); inv *= scale
        x * inv + (offset - mean * inv if offset is not None else -mean * inv)
    Python reads `-mean * inv` as (-mean) * inv, so without offset a Neg of the mean comes
    before the multiplication."""
    inv = build.rsqrt(build.add(variance, np.float32(epsilon)))
    if scale is not None:
        inv = build.multiply(inv, scale)
    scaled = build.multiply(x, inv)
    if offset is not None:
        shift = build.subtract(offset, build.multiply(mean, inv))
    else:
        shift = build.multiply(g.create_op("Neg", [mean], name="Neg").outputs[0], inv)
    return build.add(scaled, shift)


def _moving_average_update(g, var, stat, decay):
    """TF's assign_moving_average without debias: AssignMovingAvg{,_k}/{decay,sub,mul} + AssignSub."""
    with g.name_scope("AssignMovingAvg") as scope:
        decay_t = build.constant(np.float32(decay), name="decay")
        delta = build.multiply(build.subtract(var.read, stat, name="sub"), decay_t, name="mul")
        return g.create_op("AssignSub", [var.op.outputs[0], delta], {"use_locking": False},
                           full_name=scope[:-1])
