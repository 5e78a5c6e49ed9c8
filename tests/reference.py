"""A slow numpy model of the fake-quant ops, written straight from shared/spec/fake_quant.md.

Every float32 operation is done by numpy in float32, and its result flushed to zero when denormal,
as TF's CPU threads (flush-to-zero, denormals-are-zero) compute it. Used to check fqcore on inputs
the golden set does not hold (Hypothesis-generated)."""
import numpy as np

from golden_inputs import flush as ftz
from golden_inputs import nudge as _nudged_range

F32 = np.float32


def nudge(min, max, num_bits, narrow_range):
    """(nudged_min, nudged_max, scale, inv_scale, quant_zero) as float32 scalars; the nudge itself is
    the one the golden-data recipe uses."""
    nmin, nmax, scale, inv_scale = (v[()] for v in _nudged_range(F32(min), F32(max), num_bits, narrow_range))
    with np.errstate(all="ignore"):
        quant_zero = np.floor(ftz(ftz(-nmin * inv_scale) + F32(0.5)))[()]
    return nmin, nmax, scale, inv_scale, quant_zero


def _is_zero_range(min, max):
    return ftz(F32(min))[()] == 0 and ftz(F32(max))[()] == 0


def _forward(x, grid, divide):
    nmin, nmax, scale, inv_scale, quant_zero = grid
    with np.errstate(all="ignore"):
        x = ftz(x)
        c = np.where(nmax < x, nmax, x).astype(F32)
        c = np.where(c < nmin, nmin, c).astype(F32)
        shifted = ftz(c - nmin)
        scaled = ftz(shifted / scale) if divide else ftz(shifted * inv_scale)
        t = ftz(ftz(scaled - quant_zero) + F32(0.5))
        return ftz(np.floor(t) * scale)


def args(x, min, max, num_bits, narrow_range):
    return _forward(np.asarray(x, F32), nudge(min, max, num_bits, narrow_range), divide=False)


def vars(x, min, max, num_bits, narrow_range):
    x = np.asarray(x, F32)
    if _is_zero_range(min, max):
        return np.zeros_like(x)
    return _forward(x, nudge(min, max, num_bits, narrow_range), divide=True)


def _grad(g, x, nmin, nmax):
    """dx, and the float32 products entering the min and max sums."""
    with np.errstate(all="ignore"):
        g, x = ftz(g), ftz(x)
        between = ((x >= nmin) & (x <= nmax)).astype(F32)
        return (g * between, g * (x < nmin).astype(F32), g * (x > nmax).astype(F32))


def args_grad(g, x, min, max, num_bits, narrow_range):
    nmin, nmax = nudge(min, max, num_bits, narrow_range)[:2]
    return _grad(np.asarray(g, F32), np.asarray(x, F32), nmin, nmax)[0]


def vars_grad(g, x, min, max, num_bits, narrow_range):
    """(dx, dmin, dmax); the sums in float64 (the ground truth fqcore is held to)."""
    g, x = np.asarray(g, F32), np.asarray(x, F32)
    if _is_zero_range(min, max):
        return g.copy(), 0.0, 0.0
    nmin, nmax = nudge(min, max, num_bits, narrow_range)[:2]
    dx, to_min, to_max = _grad(g, x, nmin, nmax)
    return dx, np.sum(to_min, dtype=np.float64), np.sum(to_max, dtype=np.float64)


def per_channel(x, min, max, num_bits, narrow_range):
    x = np.asarray(x, F32)
    out = np.empty_like(x)
    for c in range(x.shape[-1]):
        if _is_zero_range(min[c], max[c]):
            out[..., c] = 0
        else:
            out[..., c] = _forward(x[..., c], nudge(min[c], max[c], num_bits, narrow_range), divide=False)
    return out


def per_channel_grad(g, x, min, max, num_bits, narrow_range):
    g, x = np.asarray(g, F32), np.asarray(x, F32)
    dx = np.empty_like(x)
    channels = x.shape[-1]
    dmin, dmax = np.zeros(channels), np.zeros(channels)
    for c in range(channels):
        if _is_zero_range(min[c], max[c]):
            dx[..., c] = g[..., c]
            continue
        nmin, nmax = nudge(min[c], max[c], num_bits, narrow_range)[:2]
        dx[..., c], to_min, to_max = _grad(g[..., c], x[..., c], nmin, nmax)
        dmin[c], dmax[c] = np.sum(to_min, dtype=np.float64), np.sum(to_max, dtype=np.float64)
    return dx, dmin, dmax
