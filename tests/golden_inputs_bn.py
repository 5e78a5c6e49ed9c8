"""Batch-norm golden data: deterministic input recipes, the hard-data (bulk) configs and their output codec.

Shared by tools/gen_golden_bn.py (which runs TensorFlow on these inputs) and tests/test_bn_golden.py
(which regenerates the bulk inputs instead of storing them). Everything here uses only
`PCG64(seed).random_raw()` words and IEEE-exact float64/float32 arithmetic (+, -, *, /, sqrt), so any
numpy version on any machine regenerates the same bits.
"""
from dataclasses import dataclass, field

import numpy as np

F32 = np.float32
FORMATS = ("NHWC", "NCHW", "NDHWC", "NCDHW")
SQRT3 = np.sqrt(3.0)


def channel_axis(data_format):
    return data_format.index("C")


def uniform(seed, count):
    """count float64 values in [0, 1), exact multiples of 2**-53."""
    raw = np.random.Generator(np.random.PCG64(seed)).bit_generator.random_raw(count)
    return (raw >> np.uint64(11)).astype(np.float64) * 2.0**-53


def bell(seed, count):
    """count values with mean 0 and variance 1 (Irwin-Hall of 4 uniforms, so |z| < 2*sqrt(3)); float64."""
    u = uniform(seed, 4 * count).reshape(count, 4)
    return (((u[:, 0] + u[:, 1]) + u[:, 2]) + u[:, 3] - 2.0) * SQRT3


def per_channel_view(values, shape, data_format):
    """values of length C reshaped to broadcast against an array of shape in data_format."""
    view = [1] * len(shape)
    view[channel_axis(data_format)] = len(values)
    return np.asarray(values).reshape(view)


def channel_data(seed, shape, data_format, means, stds):
    """float32 array of shape whose channel c is means[c] + stds[c] * bell, rounded once to float32."""
    z = bell(seed, int(np.prod(shape))).reshape(shape)
    mean = per_channel_view(np.asarray(means, np.float64), shape, data_format)
    std = per_channel_view(np.asarray(stds, np.float64), shape, data_format)
    return (mean + std * z).astype(F32), z


def between(seed, count, lo, hi):
    """count float32 values in [lo, hi)."""
    return (lo + (hi - lo) * uniform(seed, count)).astype(F32)


@dataclass(frozen=True)
class Recipe:
    """How one case's inputs are drawn. Per-channel statistics of x: means/stds, or random when None.

    dy = dy_corr * z_x + dy_noise * bell (z_x: x's own standard variate), so dy_corr != 0 makes the
    gradient's two terms cancel, as for a loss that pulls y toward a target.
    """

    seed: int
    shape: tuple
    data_format: str = "NHWC"
    means: tuple = None
    stds: tuple = None
    dy_corr: float = 0.0
    dy_noise: float = 1.0


def make_inputs(r):
    """x, dy, scale, offset, mean_in, variance_in (all float32) for a recipe."""
    c = r.shape[channel_axis(r.data_format)]
    means = r.means if r.means is not None else between(r.seed + 1, c, -3.0, 3.0).astype(np.float64)
    stds = r.stds if r.stds is not None else between(r.seed + 2, c, 0.1, 3.0).astype(np.float64)
    x, z = channel_data(r.seed, r.shape, r.data_format, means, stds)
    noise = bell(r.seed + 3, x.size).reshape(r.shape)
    dy = (r.dy_corr * z + r.dy_noise * noise).astype(F32)
    # Scale bounded away from zero, of both signs; population statistics near the batch's.
    sign = np.where(uniform(r.seed + 4, c) < 0.5, -1.0, 1.0)
    scale = (sign * (0.25 + 1.75 * uniform(r.seed + 5, c))).astype(F32)
    offset = between(r.seed + 6, c, -1.0, 1.0)
    mean_in = (np.asarray(means) + 0.1 * np.asarray(stds) * bell(r.seed + 7, c)).astype(F32)
    variance_in = (np.asarray(stds) ** 2 * (0.8 + 0.4 * uniform(r.seed + 8, c))).astype(F32)
    return dict(x=x, dy=dy, scale=scale, offset=offset, mean_in=mean_in, variance_in=variance_in)


# --- Hard data: channel means far from zero at n = 10**5 rows per channel, where float32 sums show
# their error. Inputs are regenerated from these configs; only TF's outputs are stored (bn_bulk_*.npz).


@dataclass(frozen=True)
class BulkConfig:
    name: str
    op: str  # "forward" or "grad"
    is_training: bool
    recipe: Recipe
    epsilon: float = 1e-4
    factor: float = 1.0
    extra: dict = field(default_factory=dict)


HARD_STATS = {
    "mean1e4-std1": ((1e4, 1e4), (1.0, 1.0)),
    "mean-3e3-std0.01": ((-3e3, -3e3), (0.01, 0.01)),
    # Milder: TF's float32 sums are off by tens to thousands of ulps here, not by the whole result,
    # so "no less accurate than TF" is a real bar.
    "mean1e2-std1": ((1e2, 1e2), (1.0, 1.0)),
    "mean0-std1": ((0.0, 0.0), (1.0, 1.0)),
}
# 2 channels x 10**5 rows; the 5-D shapes have the same sizes. "small": 2 x 1000.
BULK_SHAPES = {"NHWC": (4, 125, 200, 2), "NCHW": (4, 2, 125, 200), "NDHWC": (4, 5, 25, 200, 2),
               "NCDHW": (4, 2, 5, 25, 200), "NHWC-small": (2, 20, 25, 2)}


def bulk_configs():
    configs = []
    plan = [  # op, is_training, format, statistics, dy correlation
        ("forward", True, "NHWC", "mean1e4-std1", 0.0),
        ("forward", True, "NCHW", "mean-3e3-std0.01", 0.0),
        ("forward", True, "NDHWC", "mean-3e3-std0.01", 0.0),
        ("forward", True, "NCDHW", "mean1e4-std1", 0.0),
        ("forward", True, "NHWC", "mean1e2-std1", 0.0),
        ("forward", True, "NCHW", "mean0-std1", 0.0),
        ("forward", True, "NHWC-small", "mean1e4-std1", 0.0),
        ("forward", False, "NCHW", "mean1e4-std1", 0.0),
        ("grad", True, "NHWC", "mean-3e3-std0.01", 0.0),
        ("grad", True, "NCHW", "mean1e4-std1", 0.9),
        ("grad", True, "NDHWC", "mean1e4-std1", 0.0),
        ("grad", True, "NHWC", "mean0-std1", 0.99),
        ("grad", True, "NCDHW", "mean1e2-std1", 0.0),
        ("grad", False, "NHWC", "mean1e4-std1", 0.0),
        ("grad", False, "NCDHW", "mean-3e3-std0.01", 0.9),
        ("grad", False, "NCHW", "mean1e2-std1", 0.0),
    ]
    for i, (op, training, shape_key, stats, corr) in enumerate(plan):
        means, stds = HARD_STATS[stats]
        fmt = shape_key.split("-")[0]
        recipe = Recipe(seed=9_100_000 + 100 * i, shape=BULK_SHAPES[shape_key], data_format=fmt, means=means,
                        stds=stds, dy_corr=corr, dy_noise=1.0 if corr == 0 else 0.05)
        mode = "train" if training else "infer"
        name = f"{op}-{mode}-{shape_key}-{stats}" + (f"-dycorr{corr:g}" if corr else "")
        configs.append(BulkConfig(name, op, training, recipe))
    return configs


# --- Codec for elementwise float32 outputs: an int32 residual, in ulps, against a float32 prediction
# from TF's own per-channel coefficients (fitted by the generator and stored as "hints"), evaluated the
# way TF's Eigen kernel evaluates it:
#     forward      y = (x - mean) * s + offset                      hint s (TF's rsqrt(var + eps) * scale)
#     gradient  x_bp = a * ((dy - mu) - (x - rs1) * b)               hints a, mu, b (inference: mu = b = 0)
# The prediction is usually exact, so the residuals compress to almost nothing; the encoding is
# lossless for every non-NaN value, -0.0 included. The hints serve the codec only, never a test.


def ordered(bits):
    """float32 bits (uint32) -> int64 that orders like the floats; -0.0 -> -1, +0.0 -> 0."""
    bits = np.asarray(bits, np.uint32).astype(np.int64)
    magnitude = bits & 0x7FFFFFFF
    return np.where(bits >> 31 == 0, magnitude, -magnitude - 1)


def unordered(values):
    values = np.asarray(values, np.int64)
    return np.where(values >= 0, values, (-values - 1) | 0x80000000).astype(np.uint32)


def encode(actual, predicted):
    """int32 residual; None if actual holds NaN or a residual overflows int32."""
    actual, predicted = (np.ascontiguousarray(a, F32).reshape(-1) for a in (actual, predicted))
    if np.isnan(actual).any() or np.isnan(predicted).any():
        return None
    residual = ordered(actual.view(np.uint32)) - ordered(predicted.view(np.uint32))
    if np.abs(residual).max(initial=0) >= 2**31:
        return None
    return residual.astype(np.int32)


def decode(residual, predicted):
    predicted = np.ascontiguousarray(predicted, F32).reshape(-1)
    return unordered(ordered(predicted.view(np.uint32)) + residual).view(F32)


def predict_forward(x, mean, s, offset, data_format):
    view = lambda v: per_channel_view(np.asarray(v, F32), x.shape, data_format)  # noqa: E731
    with np.errstate(all="ignore"):
        return ((x.astype(F32) - view(mean)) * view(s) + view(offset)).astype(F32)


def predict_grad(dy, x, rs1, a, mu, b, data_format):
    view = lambda v: per_channel_view(np.asarray(v, F32), x.shape, data_format)  # noqa: E731
    with np.errstate(all="ignore"):
        inner = (dy.astype(F32) - view(mu)) - (x.astype(F32) - view(rs1)) * view(b)
        return (view(a) * inner).astype(F32)
