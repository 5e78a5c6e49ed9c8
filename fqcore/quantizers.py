"""Quantizer objects with tfmot 0.8.1's interface (build, __call__, get_config), running on fqcore's kernels.

The objects follow numcodecs' Codec contract: arguments are validated in ``__init__`` (a constructed
quantizer is always valid and its settings are read-only), ``get_config`` / ``from_config`` round-trip,
``repr`` evaluates back to an equal object, and ``fqcore.serialization`` keeps the registry.

State (the quantization range) lives in float32 numpy arrays held in the ``weights`` dict that
``build`` returns; a training call updates them in place. A training call is two passes over the
input: the fused batch min/max with the range's widening (``fqcore._kernels.observed_range``, or
``fqcore.observe.batch_range`` for AllValues) and one fake-quant pass.
"""
from __future__ import annotations

import abc
import inspect
import math
import numbers
from collections.abc import Mapping
from typing import Any, Dict, Optional, Tuple

import numpy as np
import numpy.typing as npt

from . import _kernels, ops
from .observe import batch_range

__all__ = ["Quantizer", "LastValueQuantizer", "MovingAverageQuantizer", "AllValuesQuantizer",
           "FixedQuantizer", "NoQuantizer", "Constant"]

_F32 = np.dtype(np.float32)
_ZERO = np.float32(0.0)
_EMA_DECAY = 0.999


class Constant:
    """A Keras-style initializer for ``layer.add_weight``: ``Constant(v)(shape, dtype)`` is a float32
    array of ``shape`` filled with ``v``."""

    def __init__(self, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"value must be a real number, got {value!r}")
        self.value = float(value)

    def __call__(self, shape, dtype=None, **kwargs):
        return np.full(shape, self.value, _F32)

    def get_config(self):
        return {"value": self.value}

    def __eq__(self, other):
        return type(other) is Constant and _same_float(self.value, other.value)

    def __hash__(self):
        return hash((Constant, self.value))

    def __repr__(self):
        return f"Constant({self.value!r})"


def _same_float(a, b):
    return a == b or (a != a and b != b)


def _training(value):
    return ops._flag(value, "training")


def _tensor_shape(tensor_shape):
    """`tensor_shape` as a tuple of ints and Nones (None: the shape is unknown)."""
    if tensor_shape is None:
        return None
    if isinstance(tensor_shape, (str, bytes)) or not hasattr(tensor_shape, "__iter__"):
        raise TypeError(f"tensor_shape must be a sequence of dimensions or None, got {tensor_shape!r}")
    dims = []
    for dim in tensor_shape:
        dim = getattr(dim, "value", dim)  # TF1-style Dimension objects
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 0):
            raise ValueError(f"tensor_shape must hold non-negative ints or None, got {tuple(tensor_shape)!r}")
        dims.append(None if dim is None else int(dim))
    return tuple(dims)


def _name(name):
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {name!r}")
    return name


def _new_weight(layer, name, shape, value):
    """A float32 state array: created here, or by `layer.add_weight` (which must return a float32
    ndarray of `shape`, since the quantizer updates it in place)."""
    if layer is None:
        return np.full(shape, value, _F32)
    add_weight = getattr(layer, "add_weight", None)
    if add_weight is None:
        raise TypeError(f"layer must be None or have an add_weight method, got {type(layer).__name__}")
    weight = add_weight(**_add_weight_arguments(add_weight, name, shape, value))
    if not isinstance(weight, np.ndarray) or weight.dtype != _F32 or weight.shape != shape:
        raise TypeError(f"layer.add_weight({name!r}) must return a float32 numpy array of shape {shape}, "
                        f"got {_describe(weight)}")
    if not weight.flags.writeable:
        raise ValueError(f"layer.add_weight({name!r}) returned a read-only array; the state is updated in place")
    return weight


def _add_weight_arguments(add_weight, name, shape, value):
    """Keyword arguments for a Keras-like ``add_weight(name, shape, initializer or value,
    trainable)``: an ``initializer`` unless it takes only ``value``; ``dtype='float32'`` where it
    takes a dtype (Keras does; a minimal layer need not)."""
    try:
        params = inspect.signature(add_weight).parameters
    except (TypeError, ValueError):  # a signature Python cannot read: Keras's own arguments
        params = None
    takes_any = params is None or any(p.kind is p.VAR_KEYWORD for p in params.values())
    arguments = {"name": name, "shape": shape, "trainable": False}
    if not takes_any and "initializer" not in params and "value" in params:
        arguments["value"] = np.full(shape, value, _F32)
    else:
        arguments["initializer"] = Constant(value)
    if takes_any or "dtype" in params:
        arguments["dtype"] = "float32"
    return arguments


def _describe(value):
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    return type(value).__name__


# tf.minimum / tf.maximum as TF's scalar kernel computes them: NaN propagates, and of two equal values
# (+0.0 and -0.0) the first is kept. (TF's 8-lane packets keep the second, so for per-channel state
# TF's sign of a zero depends on the channel's position; fqcore keeps the scalar rule everywhere.)
# The observed range (_kernels.observed_range, per tensor and per channel) and AllValues' arrays
# rely on batch_range's NaN rule (a NaN channel has NaN min and max) for NaN.


def _scalar_min(a, b):
    """tf.minimum(a, b) on numpy float32 scalars (comparisons never warn)."""
    return b if (b < a or b != b) else a


def _scalar_max(a, b):
    return b if (b > a or b != b) else a


# TF's CPU kernels run flush-to-zero and denormals-are-zero: a denormal result of the range
# arithmetic is a zero of its sign, and a denormal state value counts as one.
_TINY = np.float32(np.finfo(np.float32).tiny)


def _ftz(v):
    """A float32 scalar flushed: denormal -> zero of its sign."""
    return v if (v >= _TINY or v <= -_TINY or v == 0 or v != v) else v * _ZERO


# Below this magnitude, float32 values can be divided by a ratio in [0.5, 1] and subtracted from one
# another without overflow, so per-tensor arithmetic skips np.errstate (a microsecond a call).
_SAFE = 1e38


def _safe(*values):
    return all(-_SAFE < v < _SAFE for v in values)


def _mirror(bmax, r):
    """bmax / r (never denormal: |r| <= 1), per tensor."""
    if _safe(bmax):
        return bmax / r
    with np.errstate(all="ignore"):
        return bmax / r


class Quantizer(abc.ABC):
    """The interface of tfmot's Quantizer: build the state, fake-quantize, give the config.

    Subclasses set their arguments in ``__init__`` (validating them) and return them from
    ``get_config``; equality, ``repr`` and ``from_config`` are derived from the config. A subclass that
    supports the backward pass overrides ``gradient``. Register a subclass with
    :func:`fqcore.register_quantizer` so that :func:`fqcore.deserialize` finds it.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> class Clip(fqcore.Quantizer):
    ...     def __init__(self, limit):
    ...         self.limit = float(limit)
    ...     def build(self, tensor_shape, name, layer):
    ...         return {}
    ...     def __call__(self, inputs, training, weights, **kwargs):
    ...         return np.clip(inputs, -self.limit, self.limit)
    ...     def get_config(self):
    ...         return {"limit": self.limit}
    >>> Clip(2)
    Clip(limit=2.0)
    >>> Clip.from_config({"limit": 2}) == Clip(2.0)
    True
    >>> Clip(2)(np.array([-5.0, 1.0, 5.0], np.float32), True, {})
    array([-2.,  1.,  2.], dtype=float32)
    """

    @abc.abstractmethod
    def build(self, tensor_shape, name, layer):
        """Creates the state for a tensor of `tensor_shape`; returns the weights dict for ``__call__``."""

    @abc.abstractmethod
    def __call__(self, inputs, training, weights, **kwargs):
        """Fake-quantizes `inputs`; a training call may update the state in `weights` first."""

    @abc.abstractmethod
    def get_config(self):
        """The constructor arguments as a dict of JSON-safe Python values."""

    def gradient(self, gradients, inputs, weights, **kwargs):
        """The backward pass of ``__call__`` for upstream `gradients` (fqcore addition)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement gradient()")

    @classmethod
    def from_config(cls, config):
        """``cls(**config)``; an unknown or missing key raises TypeError naming it."""
        if not isinstance(config, Mapping):
            raise TypeError(f"{cls.__name__} config must be a dict, got {type(config).__name__}")
        _check_keys(cls, config)
        return cls(**config)

    def __eq__(self, other):
        """Equal when of the same class with equal configs: different classes are never equal."""
        if self is other:
            return True
        if type(other) is not type(self):
            return False
        return self.get_config() == other.get_config()

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash((type(self), tuple(sorted(self.get_config().items()))))

    def __repr__(self):
        args = ", ".join(f"{key}={value!r}" for key, value in self.get_config().items())
        return f"{type(self).__name__}({args})"


def _check_keys(cls, config):
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # a signature Python cannot read: let the call decide
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    known = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = [key for key in config if key not in known]
    if unknown:
        raise TypeError(f"{cls.__name__} config has unknown key {unknown[0]!r} "
                        f"(accepted keys: {', '.join(known) or 'none'})")
    missing = [p.name for p in params if p.name in known and p.default is p.empty and p.name not in config]
    if missing:
        raise TypeError(f"{cls.__name__} config is missing key {missing[0]!r}")


class _RangeQuantizer(Quantizer):
    """What LastValue, MovingAverage and AllValues share: the four arguments, the range state, the
    observed range (symmetric or containing zero), and the fake-quant call on the state."""

    _per_axis_state = True     # False: the state is one range whatever per_axis says (AllValues)
    _initial_range = (-6.0, 6.0)

    def __init__(self, num_bits, per_axis, symmetric, narrow_range):
        self._num_bits = ops._num_bits(num_bits)
        self._per_axis = ops._flag(per_axis, "per_axis")
        self._symmetric = ops._flag(symmetric, "symmetric")
        self._narrow_range = ops._flag(narrow_range, "narrow_range")
        # tfmot's min_max_ratio: 1 - 2**(1 - num_bits) is exact in float32 for 2..16 bits.
        self._ratio = np.float32(-1.0 if self._narrow_range
                                 else -((1 << self._num_bits) - 2) / (1 << self._num_bits))
        self._channels = self._per_axis and self._per_axis_state

    num_bits = property(lambda self: self._num_bits, doc="bits of the quantized grid, 2..16")
    per_axis = property(lambda self: self._per_axis, doc="one range per channel of the last axis")
    symmetric = property(lambda self: self._symmetric, doc="ranges symmetric about zero")
    narrow_range = property(lambda self: self._narrow_range, doc="grid [1, 2**num_bits - 1], not [0, ...]")

    def get_config(self):
        return {"num_bits": self._num_bits, "per_axis": self._per_axis, "symmetric": self._symmetric,
                "narrow_range": self._narrow_range}

    def build(self, tensor_shape: Any, name: str, layer: Any) -> Dict[str, np.ndarray]:
        """Creates the range state for a tensor of `tensor_shape`.

        Parameters
        ----------
        tensor_shape : tuple of int or None, or an object with ``as_list()``
            The quantized tensor's shape (None entries for unknown sizes).
        name : str
            Prefix of the state's names: ``<name>_min`` and ``<name>_max``.
        layer : object or None
            A Keras-style layer whose ``add_weight`` creates the state, or None for numpy arrays.

        Returns
        -------
        dict
            ``{'min_var': ..., 'max_var': ...}``: float32 arrays of shape () or, per axis,
            ``(tensor_shape[-1],)`` (() too when that is unknown), to pass to ``__call__``.

        Raises
        ------
        ValueError
            A per-axis quantizer for a tensor of rank 0, or a malformed shape or name.
        """
        shape, name = _tensor_shape(tensor_shape), _name(name)
        state_shape: Tuple[int, ...] = ()
        if self._channels and shape is not None:
            if not shape:
                raise ValueError(f"per_axis quantization needs a tensor of rank 1 or higher "
                                 f"(the channels are the last axis), got tensor_shape {shape}")
            if shape[-1] is not None:
                state_shape = (shape[-1],)
        lo, hi = self._initial_range
        return {"min_var": _new_weight(layer, name + "_min", state_shape, lo),
                "max_var": _new_weight(layer, name + "_max", state_shape, hi)}

    def _state(self, weights, inputs, writeable):
        """The validated (min, max) state arrays for `inputs`."""
        if not isinstance(weights, Mapping):
            raise TypeError(f"weights must be the dict that build() returned, got {type(weights).__name__}")
        if self._channels:
            if inputs.ndim == 0:
                raise ValueError("per_axis quantization needs inputs of rank 1 or higher "
                                 "(the channels are the last axis), got a rank-0 array")
            expected = (inputs.shape[-1],)
        else:
            expected = ()
        state = []
        for key in ("min_var", "max_var"):
            if key not in weights:
                raise ValueError(f"weights has no {key!r}: pass the dict that build() returned")
            value = weights[key]
            if type(value) is not np.ndarray or value.dtype != _F32:
                raise TypeError(f"weights[{key!r}] must be a float32 numpy array, got {_describe(value)}")
            if value.shape != expected:
                what = (f"one value per channel of the inputs' last axis, inputs shape {inputs.shape}"
                        if self._channels else "a per-tensor range")
                raise ValueError(f"weights[{key!r}] has shape {value.shape}, expected {expected} ({what})")
            if writeable and not value.flags.writeable:
                raise ValueError(f"weights[{key!r}] is read-only; a training call updates it in place")
            state.append(value)
        return state

    def _observed_range(self, inputs):
        """The batch's range: symmetric about zero, or widened to contain zero. Per tensor: numpy
        float32 scalars; per axis (inputs of rank 1 or more, as _state checked): float32 arrays.
        Per tensor is one channel: its tf.minimum / tf.maximum keep NaN as the binding's
        comparisons do, since a NaN batch has NaN for both extremes (observe.batch_range)."""
        r = self._ratio
        channels = inputs.shape[-1] if self._channels else 1
        lo, hi = np.empty(channels, _F32), np.empty(channels, _F32)
        # A wide ratio can take a float32 just above FLT_MIN below it: flushed (r != -1; with
        # r = -1 the product is a batch extreme negated, never denormal).
        _kernels.observed_range(ops._flat(inputs), lo, hi, r, self._symmetric, r != -1)
        return (lo, hi) if self._channels else (lo[0], hi[0])

    def __call__(self, inputs: npt.ArrayLike, training: bool, weights: Mapping,
                 out: Optional[np.ndarray] = None, **kwargs: Any) -> np.ndarray:
        """Fake-quantizes `inputs`; a training call first updates the range state in place.

        Parameters
        ----------
        inputs : array_like
            float32, any shape (per axis: the last axis holds the channels).
        training : bool
            True: observe the batch's range, update the state in `weights`, then quantize with the
            updated state (an empty batch leaves the state unchanged). False: quantize with the
            state as it is.
        weights : dict
            The dict :meth:`build` returned.
        out : numpy.ndarray, optional
            A float32 result buffer of the inputs' shape (it may be `inputs` itself).
        **kwargs
            Accepted, as tfmot's interface passes them, and ignored.

        Returns
        -------
        numpy.ndarray
            float32, the shape of `inputs`.

        Raises
        ------
        TypeError
            `inputs` or a state array that is not float32, `training` not a bool.
        ValueError
            A state of the wrong shape, a read-only state in a training call.
        """
        inputs = ops._array(inputs, "inputs")
        training = _training(training)
        lo, hi = self._state(weights, inputs, training)
        # An empty batch has no range to observe: the state stays as it is. (TF's reductions give
        # min +inf, max -inf there, which a symmetric range turns into a NaN state for good.)
        if training and inputs.size > 0:
            self._update(lo, hi, inputs)
        if self._channels:
            return ops.fake_quant_with_min_max_vars_per_channel(
                inputs, lo, hi, self._num_bits, self._narrow_range, out=out)
        return ops.fake_quant_with_min_max_vars(inputs, lo, hi, self._num_bits, self._narrow_range, out=out)

    def gradient(self, gradients: npt.ArrayLike, inputs: npt.ArrayLike, weights: Mapping,
                 out: Optional[np.ndarray] = None, **kwargs: Any) -> Any:
        """The backward pass of ``__call__`` at the state in `weights` (an fqcore addition).

        After a training call, the state in `weights` is the one that call quantized with.

        Parameters
        ----------
        gradients : array_like
            float32, the shape of `inputs`: the gradients flowing back into the output.
        inputs : array_like
            float32, the inputs of the forward call.
        weights : dict
            The dict :meth:`build` returned.
        out : numpy.ndarray, optional
            A float32 buffer for ``backprops_wrt_input``.
        **kwargs
            Accepted and ignored.

        Returns
        -------
        FakeQuantWithMinMaxVarsGradient or FakeQuantWithMinMaxVarsPerChannelGradient
            ``(backprops_wrt_input, backprop_wrt_min, backprop_wrt_max)``, per channel when
            per_axis.

        Raises
        ------
        TypeError, ValueError
            As for ``__call__``, and `gradients` and `inputs` of different shapes.
        """
        gradients, inputs = ops._gradient_inputs(gradients, inputs)
        lo, hi = self._state(weights, inputs, False)
        if self._channels:
            return ops.fake_quant_with_min_max_vars_per_channel_gradient(
                gradients, inputs, lo, hi, self._num_bits, self._narrow_range, out=out)
        return ops.fake_quant_with_min_max_vars_gradient(
            gradients, inputs, lo, hi, self._num_bits, self._narrow_range, out=out)

    @abc.abstractmethod
    def _update(self, lo, hi, inputs):
        """Updates the state arrays in place from a training batch."""


class LastValueQuantizer(_RangeQuantizer):
    """tfmot's LastValueQuantizer: the range of the last training batch.

    The state starts at [-6, 6]; each training call replaces it with the batch's range (widened to
    contain zero, or made symmetric).

    Parameters
    ----------
    num_bits : int
        Bits of the quantization grid, 2 to 16.
    per_axis : bool
        One range per channel of the last axis (e.g. a kernel's output channels): tfmot
        handles ranks 1 (element-wise), 2 and 4; fqcore reduces every leading axis for any
        rank >= 2.
    symmetric : bool
        Ranges symmetric about zero.
    narrow_range : bool
        A grid of ``2**num_bits - 1`` levels, leaving out the lowest.

    Raises
    ------
    TypeError
        `num_bits` not an int, a flag not a bool.
    ValueError
        `num_bits` outside 2 to 16.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> q = fqcore.LastValueQuantizer(num_bits=8, per_axis=False, symmetric=False,
    ...                               narrow_range=False)
    >>> state = q.build((4,), "kernel", None)
    >>> q(np.array([0.0, 1.4, 100.0, 255.0], np.float32), True, state)   # training
    array([  0.,   1., 100., 255.], dtype=float32)
    >>> float(state["min_var"]), float(state["max_var"])
    (0.0, 255.0)
    >>> q(np.array([300.0, -2.0], np.float32), False, state)             # inference
    array([255.,   0.], dtype=float32)
    """

    def __init__(self, num_bits: int, per_axis: bool, symmetric: bool, narrow_range: bool):
        super().__init__(num_bits, per_axis, symmetric, narrow_range)

    def _update(self, lo, hi, inputs):
        range_min, range_max = self._observed_range(inputs)
        lo[...] = range_min
        hi[...] = range_max


class MovingAverageQuantizer(_RangeQuantizer):
    """tfmot's MovingAverageQuantizer: an exponential moving average of the batch ranges, starting
    from [-6, 6] with no zero-debiasing: v = v - (v - range) * (1 - ema_decay) in float32.

    Parameters
    ----------
    num_bits : int
        Bits of the quantization grid, 2 to 16.
    per_axis : bool
        One range per channel of the last axis (e.g. a kernel's output channels): tfmot's
        build ignores it (its per_axis=True then fails); fqcore keeps one moving average per
        channel (an extension).
    symmetric : bool
        Ranges symmetric about zero.
    narrow_range : bool
        A grid of ``2**num_bits - 1`` levels, leaving out the lowest.
    ema_decay : float, default 0.999
        The moving average's decay, 0 to 1 (an fqcore argument; tfmot fixes 0.999). It appears in
        the config only when it is not 0.999, so tfmot configs round-trip unchanged.

    Raises
    ------
    TypeError
        `num_bits` not an int, a flag not a bool, `ema_decay` not a real number.
    ValueError
        `num_bits` outside 2 to 16, `ema_decay` outside 0 to 1.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> q = fqcore.MovingAverageQuantizer(8, per_axis=False, symmetric=False, narrow_range=False,
    ...                                   ema_decay=0.5)
    >>> state = q.build((3,), "act", None)          # [-6, 6]
    >>> _ = q(np.array([0.0, 5.0, 10.0], np.float32), True, state)
    >>> float(state["min_var"]), float(state["max_var"])   # halfway to [0, 10]
    (-3.0, 8.0)
    """

    def __init__(self, num_bits: int, per_axis: bool, symmetric: bool, narrow_range: bool,
                 ema_decay: float = _EMA_DECAY):
        super().__init__(num_bits, per_axis, symmetric, narrow_range)
        if isinstance(ema_decay, bool) or not isinstance(ema_decay, numbers.Real):
            raise TypeError(f"ema_decay must be a float, got {ema_decay!r}")
        ema_decay = float(ema_decay)
        if not 0.0 <= ema_decay <= 1.0:
            raise ValueError(f"ema_decay must be between 0 and 1, inclusive, got {ema_decay!r}")
        self._ema_decay = ema_decay
        # tf.__internal__.train.assign_moving_average: 1 - decay in double, then cast to float32.
        self._rate = np.float32(1.0 - ema_decay)

    ema_decay = property(lambda self: self._ema_decay, doc="the moving average's decay (tfmot: 0.999)")

    def get_config(self):
        config = super().get_config()
        if self._ema_decay != _EMA_DECAY:
            config["ema_decay"] = self._ema_decay
        return config

    def _update(self, lo, hi, inputs):
        range_min, range_max = self._observed_range(inputs)
        rate = self._rate
        if not self._channels:
            v_min, v_max = _ftz(lo[()]), _ftz(hi[()])
            # |v| < 1e38 and |range| < 2e38 (a ratio >= 0.5 from |batch| < 1e38): no overflow.
            if _safe(v_min, v_max, range_min / 2, range_max / 2):
                lo[...] = _ftz(v_min - _ftz(_ftz(v_min - range_min) * rate))
                hi[...] = _ftz(v_max - _ftz(_ftz(v_max - range_max) * rate))
                return
        # Per axis (or out-of-range per-tensor values): in C, where the float environment flushes
        # denormals as TF's threads do (numpy would need a pass per operation to find them).
        _update_moving_average(lo, range_min, rate)
        _update_moving_average(hi, range_max, rate)


def _update_moving_average(state, target, rate):
    """state -= (state - target) * rate, in place, each operation in float32 with flush to zero."""
    values = ops._flat(state)
    _kernels.moving_average(values, ops._flat(np.asarray(target, np.float32)), rate)
    if not np.shares_memory(values, state):
        state[...] = values.reshape(state.shape)


class AllValuesQuantizer(_RangeQuantizer):
    """tfmot's AllValuesQuantizer: the range of every training batch so far.

    The state starts at [0, 0] (inference before any training step gives zeros). Always one range
    for the tensor: tfmot ignores per_axis, and so does fqcore (the config still reports it).

    Parameters
    ----------
    num_bits : int
        Bits of the quantization grid, 2 to 16.
    per_axis : bool
        Ignored, as tfmot ignores it (one range for the tensor).
    symmetric : bool
        Ranges symmetric about zero.
    narrow_range : bool
        A grid of ``2**num_bits - 1`` levels, leaving out the lowest.

    Raises
    ------
    TypeError
        `num_bits` not an int, a flag not a bool.
    ValueError
        `num_bits` outside 2 to 16.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> q = fqcore.AllValuesQuantizer(8, per_axis=False, symmetric=False, narrow_range=False)
    >>> state = q.build((2,), "act", None)
    >>> _ = q(np.array([-1.0, 2.0], np.float32), True, state)
    >>> _ = q(np.array([0.0, 5.0], np.float32), True, state)
    >>> float(state["min_var"]), float(state["max_var"])
    (-1.0, 5.0)
    """

    _per_axis_state = False
    _initial_range = (0.0, 0.0)

    def __init__(self, num_bits: int, per_axis: bool, symmetric: bool, narrow_range: bool):
        super().__init__(num_bits, per_axis, symmetric, narrow_range)

    def _update(self, lo, hi, inputs):
        bmin, bmax = batch_range(inputs, per_axis=False)
        bmin, bmax = bmin[()], bmax[()]
        if self._symmetric:
            # tfmot's order: the maximum mirrors the widened minimum, not the batch's (the spec's
            # range rule mirrors the batch's; r * (max / r) can round above max).
            r = self._ratio
            bmin = _scalar_min(bmin, _mirror(bmax, r))
            bmax = _scalar_max(bmax, _ftz(bmin * r))
        lo[...] = _scalar_min(_scalar_min(_ftz(lo[()]), bmin), _ZERO)
        hi[...] = _scalar_max(_scalar_max(_ftz(hi[()]), bmax), _ZERO)


def _bound(value, name):
    """A FixedQuantizer bound: a Python int stays an int (configs keep their JSON text); any other
    real becomes a Python float. Either must be finite as a float32 (the op would give NaN on an
    infinite range, and JSON has no infinities)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {value!r}")
    value = int(value) if isinstance(value, numbers.Integral) else float(value)
    try:
        finite = math.isfinite(ops._to_float32(value, name))
    except ValueError:  # an int beyond any float
        finite = False
    if not finite:
        raise ValueError(f"{name} must be finite as a float32, got {value!r}")
    return value


class FixedQuantizer(Quantizer):
    """tfmot's FixedQuantizer: FakeQuantWithMinMaxArgs on the fixed range [init_min, init_max]; no state.

    Like tfmot 0.8.1, the quantization always uses 8 bits: tfmot's FixedQuantize passes no num_bits
    to the op, whose default is 8. num_bits is validated and kept in the config only.

    Parameters
    ----------
    num_bits : int
        2 to 16; kept in the config (the op uses 8 bits, as tfmot's does).
    init_min, init_max : float
        The range; finite as float32, ``init_min < init_max``. An int stays an int in the config.
    narrow_range : bool
        A grid of 255 levels, [1, 255], instead of 256.

    Raises
    ------
    TypeError
        `num_bits` not an int, a bound not a real number, `narrow_range` not a bool.
    ValueError
        `num_bits` outside 2 to 16, a bound not finite as float32, ``init_min >= init_max``.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> q = fqcore.FixedQuantizer(8, init_min=0.0, init_max=255.0, narrow_range=False)
    >>> q(np.array([-3.0, 0.4, 0.5, 300.0], np.float32), True, q.build((4,), "x", None))
    array([  0.,   0.,   1., 255.], dtype=float32)
    >>> q
    FixedQuantizer(num_bits=8, init_min=0.0, init_max=255.0, narrow_range=False)
    """

    _OP_NUM_BITS = 8

    def __init__(self, num_bits: int, init_min: float, init_max: float, narrow_range: bool):
        self._num_bits = ops._num_bits(num_bits)
        self._init_min = _bound(init_min, "init_min")
        self._init_max = _bound(init_max, "init_max")
        self._narrow_range = ops._flag(narrow_range, "narrow_range")
        with np.errstate(over="ignore"):
            lo = ops._flush(float(np.float32(self._init_min)))
            hi = ops._flush(float(np.float32(self._init_max)))
        if not lo < hi:
            raise ValueError(f"init_min must be smaller than init_max (as float32), got init_min="
                             f"{self._init_min!r}, init_max={self._init_max!r}")

    num_bits = property(lambda self: self._num_bits, doc="kept for the config; the op uses 8 bits")
    init_min = property(lambda self: self._init_min, doc="the range's lower end")
    init_max = property(lambda self: self._init_max, doc="the range's upper end")
    narrow_range = property(lambda self: self._narrow_range, doc="grid [1, 255], not [0, 255]")

    def get_config(self):
        return {"num_bits": self._num_bits, "init_min": self._init_min, "init_max": self._init_max,
                "narrow_range": self._narrow_range}

    def build(self, tensor_shape, name, layer):
        """No state: an empty weights dict."""
        _tensor_shape(tensor_shape)
        _name(name)
        return {}

    def __call__(self, inputs, training, weights, out=None, **kwargs):
        """Fake-quantized `inputs` on the fixed range (training and inference alike)."""
        _training(training)
        return ops.fake_quant_with_min_max_args(inputs, self._init_min, self._init_max, self._OP_NUM_BITS,
                                                self._narrow_range, out=out)

    def gradient(self, gradients, inputs, weights, out=None, **kwargs):
        """FakeQuantWithMinMaxArgsGradient's output (an array: the range is not a variable)."""
        return ops.fake_quant_with_min_max_args_gradient(gradients, inputs, self._init_min, self._init_max,
                                                         self._OP_NUM_BITS, self._narrow_range, out=out)


class NoQuantizer(Quantizer):
    """tfmot's NoQuantizer: the identity, no state. It takes no arguments.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> x = np.array([0.3, -7.0], np.float32)
    >>> q = fqcore.NoQuantizer()
    >>> q(x, True, q.build((2,), "x", None)) is x
    True
    >>> fqcore.serialize(q)
    {'class_name': 'NoQuantizer', 'config': {}}
    """

    def __init__(self):
        pass

    def get_config(self):
        return {}

    def build(self, tensor_shape, name, layer):
        """No state: an empty weights dict."""
        _tensor_shape(tensor_shape)
        _name(name)
        return {}

    def __call__(self, inputs, training, weights, out=None, **kwargs):
        """`inputs` itself, as tfmot returns it (copied into `out` when one is given); a float32
        array, or what converts to one, as for every quantizer."""
        _training(training)
        return _identity(ops._array(inputs, "inputs"), out)

    def gradient(self, gradients, inputs, weights, out=None, **kwargs):
        """`gradients` itself (copied into `out` when one is given), after the same checks as every
        quantizer's gradient (float32, the shape of `inputs`)."""
        gradients, _ = ops._gradient_inputs(gradients, inputs)
        return _identity(gradients, out)


def _identity(value, out):
    if out is None:
        return value
    result, _ = ops._output(out, value.shape, ())
    if result is not value:
        np.copyto(result, value)
    return result
