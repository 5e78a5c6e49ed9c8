"""Range observation for quantizers in training: the batch min and max in one fused C pass.

`batch_range` is TF's reduce_min / reduce_max over every axis (per tensor) or every axis but the
last (per axis), with these rules, exact on every ISA and thread count (src_c/include/fqcore.h):
a NaN makes its channel's min and max NaN; denormals count as zeros of their sign (TF's reduce ops
run with denormals-are-zero), so a result is never a denormal; -0 sorts below +0 (IEEE 754-2019
minimum / maximum); an empty reduction gives min = +inf, max = -inf.
"""
import numpy as np

from . import _kernels
from .ops import _flat

_FLOAT32 = np.dtype(np.float32)


def batch_range(x, per_axis=False):
    """(min, max) of float32 array `x` as float32 arrays: 0-d per tensor; per axis, shape (C,) for
    x of shape [..., C], reducing all leading axes (rank 1: element-wise, min = max = x)."""
    if isinstance(x, np.generic):
        x = np.asarray(x)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a float32 numpy array, got {type(x).__name__}")
    if x.dtype != _FLOAT32:
        raise TypeError(f"x must be a float32 array (native byte order), got dtype {x.dtype}")
    if type(x) is not np.ndarray:  # subclasses (np.matrix keeps two dimensions when raveled)
        x = np.asarray(x)
    if per_axis:
        if x.ndim == 0:
            raise ValueError("per_axis needs x of rank 1 or more (the last axis holds the channels)")
        channels = x.shape[-1]
    else:
        channels = 1
    lo = np.empty(channels, _FLOAT32)
    hi = np.empty(channels, _FLOAT32)
    _kernels.batch_range(_flat(x), lo, hi)
    if not per_axis:
        return lo.reshape(()), hi.reshape(())
    return lo, hi
