"""Scale and zero point of a FakeQuant range: the float32 nudge the kernels trained with, or the
double-precision one of TF's converter; and the integer grid of a fake-quantized constant."""
import numpy as np

from .kernels.integer import round_half_away

F32 = np.float32
ZERO_POINT_RULES = ("training", "converter")


def grid_bounds(num_bits, narrow_range):
    """(qmin, qmax) of FakeQuant's unsigned grid."""
    return (1 if narrow_range else 0), (1 << num_bits) - 1


def scale_and_zero_point(min, max, num_bits=8, narrow_range=False, rule="training"):
    """Arrays (scale float32, zero point int64 on the unsigned grid [qmin, qmax]) of one range or
    of per-channel ranges. "training": shared/spec/fake_quant.md's float32 nudge, one rounding per
    operation, the grid the model was trained on. "converter": TF's converter, which does the same
    in double precision and keeps the float32 scale; its zero point differs by one where the
    float32 quotient min / scale lands on the other side of a half (symmetric activation ranges
    such as [-1, 1])."""
    if rule not in ZERO_POINT_RULES:
        raise ValueError(f"zero_point_rule must be one of {ZERO_POINT_RULES}, got {rule!r}")
    qmin, qmax = grid_bounds(num_bits, narrow_range)
    lo = np.atleast_1d(np.asarray(min, F32))
    hi = np.atleast_1d(np.asarray(max, F32))
    with np.errstate(all="ignore"):
        scale = (hi - lo) / F32(qmax - qmin)
        if rule == "training":
            zpf = F32(qmin) - lo / scale
        else:
            zpf = qmin - lo.astype(np.float64) / ((hi.astype(np.float64) - lo) / (qmax - qmin))
    zero_point = np.clip(round_half_away(zpf), qmin, qmax).astype(np.int64)
    return scale.astype(F32), zero_point


def integer_grid(values, scale, zero_point, qmin, qmax, axis=None):
    """The grid indices q (qmin..qmax) of fake-quantized values (value = (q - zp) * scale, as the
    FakeQuant kernels compute it), per channel along `axis` when scale has several entries.
    Values off the grid mean the constant was not fake-quantized with this range: ValueError."""
    values = np.asarray(values, F32)
    if scale.size > 1:
        shape = [1] * values.ndim
        shape[axis] = scale.size
        scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
    steps = np.rint(values.astype(np.float64) / scale.astype(np.float64))
    q = steps + zero_point
    # k * scale is exact in float64 (8 + 24 significant bits), so a grid value rounds back to itself.
    on_grid = np.array_equal((steps * scale).astype(F32), values)
    if not on_grid or q.size and (q.min() < qmin or q.max() > qmax):
        raise ValueError("values are not on the fake-quant grid of their range")
    return q.astype(np.int64)
