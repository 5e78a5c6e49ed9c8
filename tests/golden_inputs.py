"""Golden-data input recipes and bulk output codec, shared by tools/gen_golden.py and tests/test_golden.py so they cannot drift."""

import math
from typing import NamedTuple

import numpy as np

F32 = np.float32
FLT_MIN = F32(np.finfo(np.float32).tiny)
FLT_MAX = F32(np.finfo(np.float32).max)

BULK_SEED = 20_210_021
# Every Args/Vars setting gets this many elements: 13 ranges x 30 settings x 2600 > 10**6.
BULK_ELEMENTS = 2600

# Typical, asymmetric, tiny and huge ranges, one with min > 0 and one with max < 0.
RANGES = tuple(
    (F32(lo), F32(hi))
    for lo, hi in [
        (-6.0, 6.0),
        (-0.1, 0.2),
        (0.0, 1.0),
        (-1.0, 3.0),
        (-0.3, 0.7),
        (-2.5, 4.5),
        (-0.01, 10.0),
        (0.5, 1.0),
        (-2.0, -0.25),
        (-3e-5, 7e-5),
        (-1e-33, 2e-33),
        (-1.5e6, 2.5e5),
        (-1e30, 3e30),
    ]
)

# Per-channel bulk shapes (channels last), ~17000 elements each, ranks 1..5 once the cycle is done.
PER_CHANNEL_SHAPES = (
    (1546, 11),
    (34, 32, 16),
    (2, 5, 100, 17),
    (1, 4, 4, 17, 64),
    (2430, 7),
    (5667, 3),
    (17000, 1),
    (4, 5, 283, 3),
)

# x values that no range produces: NaN, infinities, signed zero, denormals, near-overflow values.
SPECIAL_X = np.array(
    [np.nan, np.inf, -np.inf, -0.0, 1e-40, -1e-40, 3e38, -3e38, FLT_MIN, -FLT_MIN], dtype=F32
)


class BulkConfig(NamedTuple):
    name: str
    seed: int
    num_bits: int
    narrow_range: bool
    min: np.ndarray  # float32 [channels]; one channel for Args and Vars
    max: np.ndarray
    shape: tuple
    special_g: bool  # one NaN and one infinite gradient, so the sums turn NaN


def flush(a):
    """Flush denormals to signed zero, as TF's CPU threads do (FTZ on results, DAZ on operands)."""
    a = np.asarray(a, dtype=F32)
    return np.where(np.abs(a) < FLT_MIN, np.copysign(F32(0), a), a)


def nudge(min_, max_, num_bits, narrow_range):
    """The spec's nudge in float32, elementwise over arrays of bounds: (nudged_min, nudged_max, scale, inv_scale)."""
    qmin = 1 if narrow_range else 0
    qmax = (1 << num_bits) - 1
    qminf, qmaxf, steps = F32(qmin), F32(qmax), F32(qmax - qmin)
    with np.errstate(all="ignore"):
        mn, mx = flush(min_), flush(max_)
        width = flush(mx - mn)
        scale = flush(width / steps)
        inv_scale = flush(steps / width)
        zpf = flush(qminf - flush(mn / scale))
        # roundf (half away from zero) done exactly in float64.
        rounded = np.trunc(zpf.astype(np.float64) + np.copysign(0.5, zpf)).astype(F32)
        zp = np.where(zpf < qminf, qminf, np.where(zpf > qmaxf, qmaxf, rounded))
        # TF stores the zero point as uint16; x86 converts NaN to 0 there.
        zp = np.where(np.isnan(zp), F32(0), zp)
        nudged_min = flush((qminf - zp) * scale)
        nudged_max = flush((qmaxf - zp) * scale)
    return nudged_min, nudged_max, scale, inv_scale


def _unit(raw):
    """float32 uniform in [0, 1), exact: the top 24 bits of each raw 64-bit draw."""
    return (raw >> np.uint64(40)).astype(F32) * F32(2.0**-24)


def _below(raw, n):
    """Integers in [0, n) from the low 32 bits (the modulo bias does not matter here)."""
    return ((raw & np.uint64(0xFFFFFFFF)) % np.uint64(n)).astype(np.int64)


def _step_ulps(x, n):
    """Moves each x by n[i] float32 ulps, |n| <= 2."""
    for _ in range(2):
        x = np.where(n > 0, np.nextafter(x, F32(np.inf)), np.where(n < 0, np.nextafter(x, F32(-np.inf)), x))
        n = n - np.sign(n)
    return x


def sample_inputs(seed, shape, min_, max_, num_bits, narrow_range, special_g=False):
    """Boundary-heavy (x, g) of `shape` for per-channel bounds min_/max_ (channels = last dim, or one channel).

    Per element, from PCG64 raw draws only (their stream is fixed across numpy versions) and exact
    float32 arithmetic: 47% uniform over the range widened by 1/8 on each side, 25% exact rounding
    ties nudged_min + (k + 0.5) * scale moved by -1/0/0/+1 ulp, 9% quantization levels +-1 ulp,
    13% nudged bounds, raw bounds and zero moved by up to 2 ulps, 3% SPECIAL_X, 3% uniform over a
    range 9 times wider. g is uniform in [-1, 1), a quarter of it scaled by 2**[-20, 20], with a
    few zeros and denormals.
    """
    shape = tuple(shape)
    n = math.prod(shape)
    min_ = np.asarray(min_, dtype=F32).reshape(-1)
    max_ = np.asarray(max_, dtype=F32).reshape(-1)
    raw = np.random.Generator(np.random.PCG64(seed)).bit_generator.random_raw((7, n))
    channel = np.arange(n) % len(min_) if n else np.zeros(0, np.int64)
    nmin, nmax, scale, _ = nudge(min_, max_, num_bits, narrow_range)
    nmin, nmax, scale = nmin[channel], nmax[channel], scale[channel]
    lo, hi = min_[channel], max_[channel]
    steps = (1 << num_bits) - (2 if narrow_range else 1)

    with np.errstate(all="ignore"):
        width = np.abs(hi - lo)
        width = np.where(np.isfinite(width) & (width > 0), width, F32(1))
        u = _unit(raw[1])
        kind = _below(raw[0], 64)
        pick = _below(raw[3], 1 << 20)

        uniform = (lo - width / F32(8)) + u * (width * F32(1.25))
        tie_k = _below(raw[2], steps).astype(F32)
        tie = _step_ulps(nmin + (tie_k + F32(0.5)) * scale, np.array([-1, 0, 0, 1])[pick % 4])
        level_k = _below(raw[2], steps + 1).astype(F32)
        level = _step_ulps(nmin + level_k * scale, pick % 3 - 1)
        bounds = np.stack([nmin, nmax, lo, hi, np.zeros_like(lo)])[pick % 5, np.arange(n)]
        bound = _step_ulps(bounds, (pick // 5) % 5 - 2)
        special = SPECIAL_X[pick % len(SPECIAL_X)]
        wide = (lo - width * F32(4)) + u * (width * F32(9))

        x = np.select(
            [kind < 30, kind < 46, kind < 52, kind < 60, kind < 62],
            [uniform, tie, level, bound, special],
            wide,
        ).astype(F32)

        g = _unit(raw[4]) * F32(2) - F32(1)
        g_kind = _below(raw[5], 64)
        g = np.where(g_kind < 16, np.ldexp(g, (_below(raw[6], 41) - 20).astype(np.int32)), g)
        g = np.where(g_kind == 16, np.copysign(F32(0), g), g)
        g = np.where(g_kind == 17, np.copysign(F32(1e-40), g), g).astype(F32)
        if special_g and n >= 2:
            g[raw[6, 0] % np.uint64(n)] = np.nan
            g[raw[6, 1] % np.uint64(n)] = np.copysign(F32(np.inf), g[raw[6, 1] % np.uint64(n)])
    return x.reshape(shape), g.reshape(shape)


def bulk_configs(family):
    """The bulk settings of one family ("args", "vars" or "per_channel"), in stored order."""
    family_index = ("args", "vars", "per_channel").index(family)
    configs = []
    for num_bits in range(2, 17):
        for narrow_range in (False, True):
            if family == "per_channel":
                layouts = []
                for _ in range(2):
                    i = len(configs) + len(layouts)
                    shape = PER_CHANNEL_SHAPES[i % len(PER_CHANNEL_SHAPES)]
                    channels = shape[-1]
                    bounds = [RANGES[(c + i) % len(RANGES)] for c in range(channels)]
                    if channels >= 3 and i % 2 == 0:
                        # A zero-range channel (TF's special case) among normal ones; -0.0 every other time.
                        bounds[i % channels] = (F32(-0.0) if i % 4 else F32(0.0), F32(0.0))
                    layouts.append((shape, bounds))
            else:
                layouts = [((BULK_ELEMENTS,), [r]) for r in RANGES]
            for shape, bounds in layouts:
                i = len(configs)
                mins = np.array([b[0] for b in bounds], dtype=F32)
                maxs = np.array([b[1] for b in bounds], dtype=F32)
                if family == "per_channel":
                    where = "x".join(map(str, shape))
                else:
                    where = f"[{float(mins[0]):g},{float(maxs[0]):g}]"
                name = f"{family}-bulk{i:03d}-b{num_bits}{'-narrow' if narrow_range else ''}-{where}"
                configs.append(
                    BulkConfig(
                        name=name,
                        seed=BULK_SEED + 1_000_000 * family_index + i,
                        num_bits=num_bits,
                        narrow_range=narrow_range,
                        min=mins,
                        max=maxs,
                        shape=shape,
                        special_g=i % 8 == 7,
                    )
                )
    return configs


def bulk_inputs(config):
    """(x, g) of one bulk config, float32 arrays of config.shape."""
    return sample_inputs(
        config.seed, config.shape, config.min, config.max, config.num_bits, config.narrow_range, config.special_g
    )


# The bulk files store outputs losslessly but compactly, per config. y is an index into the config's
# table of distinct output bit patterns (sorted by value, stored as uint32 deltas), written as a
# residual against the table entry nearest to x, which is almost always right. dx is a code per
# element; the generator checks that no dx falls outside the codes.
DX_SAME_AS_G, DX_PLUS_ZERO, DX_MINUS_ZERO, DX_NAN = range(4)


def _nearest(table, x):
    """Index of the table value nearest to each x (ties go up; NaN x lands on the end, where NaN sorts)."""
    values = table.view(F32).astype(np.float64)
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    hi = np.minimum(np.searchsorted(values, x), len(values) - 1)
    lo = np.maximum(hi - 1, 0)
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(x - values[lo]) < np.abs(values[hi] - x), lo, hi)


def encode_y(y_bits, x):
    """(table_delta uint32, residual int32) for one config's output bits y_bits and its inputs x."""
    table, inverse = np.unique(y_bits, return_inverse=True)
    order = np.lexsort((table, table.view(F32)))
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    table = table[order]
    residual = rank[inverse.reshape(-1)] - _nearest(table, x)
    return np.diff(table, prepend=np.uint32(0)).astype(np.uint32), residual.astype(np.int32)


def decode_y(table_delta, residual, x):
    table = np.cumsum(table_delta, dtype=np.uint32)
    return table[_nearest(table, x) + residual]


def encode_dx(dx_bits, g_bits):
    """uint8 codes, or None when some dx is none of g, +0, -0 or NaN."""
    codes = np.select(
        [dx_bits == g_bits, dx_bits == 0, dx_bits == 0x80000000, np.isnan(dx_bits.view(F32))],
        [DX_SAME_AS_G, DX_PLUS_ZERO, DX_MINUS_ZERO, DX_NAN],
        255,
    ).astype(np.uint8)
    return None if (codes == 255).any() else codes


def decode_dx(codes, g_bits):
    """dx bits; a NaN comes back as the default quiet NaN (only NaN positions are compared)."""
    return np.choose(codes, [g_bits, np.uint32(0), np.uint32(0x80000000), np.uint32(0x7FC00000)]).astype(np.uint32)
