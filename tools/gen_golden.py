"""Writes the TensorFlow golden data in tests/data/ (needs TF 2.21 on the CPU: `pip install tensorflow-cpu==2.21.*`, for the quantizers also `tensorflow-model-optimization==0.8.1 tf-keras==2.21.*`; then `python tools/gen_golden.py [--family fq|bn|quantizers|all]`)."""

import argparse
import hashlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Batch norm's reference is TF's Eigen kernel (gen_golden_bn.py); fake quant has no oneDNN kernel,
# so this changes nothing for it. It must be set before TensorFlow is imported.
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
# tfmot 0.8.1 (the quantizers family) needs Keras 2, chosen before TensorFlow is imported; the raw ops
# of the other families do not use Keras.
os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import golden_inputs as gi  # noqa: E402
from golden_inputs import F32, FLT_MAX, FLT_MIN, flush  # noqa: E402

FAMILIES = ("args", "vars", "per_channel")
MAX_RANK = 5
EXPLICIT_SEED = 7_000_001

# Ranges whose boundaries the explicit sweep and tie cases enumerate (the bulk samples all of RANGES).
SWEEP_RANGES = gi.RANGES[:4] + gi.RANGES[7:9]
TIE_RANGES = (gi.RANGES[1], gi.RANGES[0], gi.RANGES[3], gi.RANGES[7])


def f32(*values):
    return np.array(values, dtype=F32)


def bits_f32(*patterns):
    return np.array(patterns, dtype=np.uint32).view(F32)


# Bounds TF treats specially or that break the arithmetic: zero, equal, reversed, NaN/inf,
# overflowing, denormal, and ranges whose scale is denormal (flushed to zero). Several make the
# zero point NaN, which TF's uint16 cast turns into 0: with narrow_range, min = -inf then gives
# nudged bounds [+inf, +inf], and [0, 1e-35] at 16 bits gives [0, 0].
DEGENERATE_RANGES = [
    (0.0, 0.0), (-0.0, 0.0), (0.0, -0.0), (-0.0, -0.0), (1e-40, -1e-40), (-1e-40, 0.0), (1e-45, 1e-45),
    (1.0, 1.0), (-1.0, -1.0), (3e38, 3e38), (1e-30, 1e-30), (FLT_MIN, FLT_MIN),
    (1.0, -1.0), (0.2, -0.1), (5.0, 0.0), (0.0, -5.0), (-1.0, -2.0),
    (np.nan, 1.0), (-1.0, np.nan), (np.nan, np.nan), (-np.inf, 1.0), (-1.0, np.inf), (-np.inf, np.inf),
    (np.inf, np.inf), (-np.inf, -np.inf), (np.inf, -np.inf), (1.0, np.inf), (-np.inf, -1.0),
    (-3e38, 3e38), (-FLT_MAX, FLT_MAX), (-2e38, 2e38), (-1.7e38, 1.7e38),
    (-1e-40, 1.0), (-1.0, 1e-40), (-1e-40, 1e-40), (1e-40, 1.0), (-1.0, -1e-40),
    (-1e-36, 1e-36), (0.0, 1e-35), (-5e-38, 5e-38), (-1e-37, 1e-37), (0.0, 4 * FLT_MIN),
]
DEGENERATE_X = f32(
    -3e38, -2, -1, -0.5, -0.1, -FLT_MIN, -1e-40, -0.0, 0, 1e-40, FLT_MIN, 0.05, 0.1, 0.5, 1, 2, 3e38,
    np.nan, np.inf, -np.inf,
)
SPECIAL_X = np.concatenate([
    bits_f32(0x7FC00000, 0xFFC00000, 0x7FA00001),  # NaN, negative NaN, signalling NaN
    f32(np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, -1.1754942e-38, FLT_MIN, -FLT_MIN,
        FLT_MAX, -FLT_MAX, 3e38, -3e38, 1.0, -1.0),
])
FINITE_G = f32(1.0, -3.0, 0.5, -0.0, 0.0, 1e-40, -1e-40, 1e36)
SPECIAL_G = f32(np.nan, np.inf, -np.inf)


def case(name, num_bits, narrow_range, lo, hi, x, g=None, seed=None):
    """One explicit case; g defaults to random values of x's shape."""
    x = np.asarray(x, dtype=F32)
    if g is None:
        rng = np.random.Generator(np.random.PCG64(EXPLICIT_SEED + (seed or 0)))
        g = (rng.random(x.shape, dtype=F32) * F32(2) - F32(1)).astype(F32)
    return dict(
        name=name, num_bits=num_bits, narrow_range=narrow_range,
        min=np.atleast_1d(np.asarray(lo, dtype=F32)), max=np.atleast_1d(np.asarray(hi, dtype=F32)),
        x=x, g=np.broadcast_to(np.asarray(g, dtype=F32), x.shape).copy(),
    )


def settings_name(num_bits, narrow_range, lo=None, hi=None):
    """Like b8-narrow-[-0.1,0.2]; %g keeps the sign of zero."""
    bounds = "" if lo is None else f"-[{float(lo):g},{float(hi):g}]"
    return f"b{num_bits}{'-narrow' if narrow_range else ''}{bounds}"


def steps_of(num_bits, narrow_range):
    return (1 << num_bits) - (2 if narrow_range else 1)


def neighbours(values, ulps):
    """Each value moved by -ulps..+ulps float32 ulps."""
    values = np.asarray(values, dtype=F32)
    out = [values]
    down, up = values, values
    with np.errstate(over="ignore"):
        for _ in range(ulps):
            down, up = np.nextafter(down, F32(-np.inf)), np.nextafter(up, F32(np.inf))
            out += [down, up]
    return np.concatenate(out)


def spec_vector_cases():
    """The spec's test vectors 1-5 and 7 and its worked examples (vector 6 is per-channel)."""
    nn_min, nn_max, _, _ = gi.nudge(F32(-0.1), F32(0.2), 8, False)
    x1 = f32(np.nextafter(nn_min, F32(-1)), nn_min, np.nextafter(nn_min, F32(1)), 0,
             np.nextafter(nn_max, F32(-1)), nn_max, np.nextafter(nn_max, F32(1)), -0.1, 0.2, np.nan, np.inf, -np.inf)
    x5 = f32(-0.2, -0.1, -0.05, 0, 0.05, 0.1, 0.2, 0.3)
    cases = [
        case("spec1", 8, False, -0.1, 0.2, x1, np.arange(1, 13, dtype=F32)),
        case("spec2", 8, False, -0.1, 0.2, f32(0, 0.05, -5, 5, 0.1), f32(np.inf, np.nan, -3, -np.inf, -2)),
        case("spec3", 8, False, -1.0, 3.0, f32(-7, -1, -0.3, -0.01, 0, 0.004, 0.5, 1, 1.234, 2.9, 3, 10),
             np.arange(1, 13, dtype=F32)),
        case("spec4", 8, False, -6.0, 6.0, f32(-0.0236, -0.0235, 6.5), f32(1, 1, 1)),
        case("spec5-pos", 8, False, 1.0, 1.0, x5, np.ones(8, F32)),
        case("spec5-neg", 8, False, -1.0, -1.0, x5, np.ones(8, F32)),
        case("spec7", 8, True, -0.1, 0.2, f32(float.fromhex("-0x1.d06d80p-10")), f32(1)),
        case("spec-vars-vs-args", 8, False, -0.1, 0.2, f32(float.fromhex("0x1.99999ap-5")), f32(1)),
        case("spec-zp-half-away", 3, False, -2.5, 4.5, f32(-10, -3, 0, 4, 10), np.arange(1, 6, dtype=F32)),
        case("spec-min-above-zero", 8, False, 0.5, 1.0, f32(-1, 0, 0.25, 0.5, 0.75, 1, 2), np.ones(7, F32)),
        case("spec-min-gt-max", 8, False, 1.0, -1.0, f32(-2, -1, 0, 0.5, 1, 2), np.arange(1, 7, dtype=F32)),
        case("spec-denormal-x", 8, False, 0.0, 1.0, f32(-1e-40, 1e-40, -1e-30), f32(1, 2, 4)),
    ]
    return cases


def sweep_cases():
    """Every num_bits and narrow_range on a few ranges: bounds, first/last ties and levels, +-ulps."""
    cases = []
    for num_bits in range(2, 17):
        for narrow in (False, True):
            steps = steps_of(num_bits, narrow)
            for lo, hi in SWEEP_RANGES:
                nmin, nmax, scale, _ = gi.nudge(lo, hi, num_bits, narrow)
                ks = f32(0, 1, steps - 2, steps - 1)
                ties = nmin + (ks + F32(0.5)) * scale
                levels = nmin + f32(1, steps - 1) * scale
                x = np.concatenate([
                    neighbours(f32(nmin, nmax, lo, hi), 2), neighbours(ties, 1), neighbours(levels, 1), f32(0, -0.0),
                ])
                cases.append(case(f"sweep-{settings_name(num_bits, narrow, lo, hi)}", num_bits, narrow, lo, hi, x,
                                  seed=len(cases)))
    return cases


def tie_cases():
    """Every rounding tie nudged_min + (k + 0.5) * scale and its neighbours, and every level."""
    cases = []
    for lo, hi in TIE_RANGES:
        for num_bits in (2, 3, 4, 8):
            for narrow in (False, True):
                steps = steps_of(num_bits, narrow)
                nmin, _, scale, _ = gi.nudge(lo, hi, num_bits, narrow)
                k = np.arange(steps + 1, dtype=F32)
                x = np.concatenate([neighbours(nmin + (k[:-1] + F32(0.5)) * scale, 1), nmin + k * scale])
                cases.append(case(f"ties-{settings_name(num_bits, narrow, lo, hi)}", num_bits, narrow, lo, hi, x,
                                  seed=1000 + len(cases)))
    return cases


def special_value_cases():
    """NaN, infinities, signed zeros, denormals and extremes as x, crossed with finite and special g."""
    cases = []
    for lo, hi, num_bits, narrow in [(-0.1, 0.2, 8, False), (-6.0, 6.0, 8, True), (0.0, 1.0, 16, False),
                                     (-2.0, -0.25, 4, True)]:
        nmin, nmax, _, _ = gi.nudge(f32(lo), f32(hi), num_bits, narrow)
        xs = np.concatenate([SPECIAL_X, nmin, nmax])
        for label, gs in (("finite-g", FINITE_G), ("special-g", SPECIAL_G)):
            x = np.repeat(xs, len(gs))
            g = np.tile(gs, len(xs))
            cases.append(case(f"special-x-{label}-{settings_name(num_bits, narrow, lo, hi)}",
                              num_bits, narrow, lo, hi, x, g))
    return cases


def degenerate_cases():
    """The spec's special bounds at 2, 8 and 16 bits, with and without narrow_range."""
    cases = []
    for lo, hi in DEGENERATE_RANGES:
        lo, hi = f32(lo)[0], f32(hi)[0]
        bounds = f32(lo, hi)
        x = np.concatenate([DEGENERATE_X, neighbours(bounds[np.isfinite(bounds)], 1)])
        for num_bits in (2, 8, 16):
            for narrow in (False, True):
                cases.append(case(f"degenerate-{settings_name(num_bits, narrow, lo, hi)}", num_bits, narrow, lo, hi, x,
                                  seed=2000 + len(cases)))
    for lo, hi in [(0.0, 0.0), (-0.0, 0.0), (1e-40, -1e-40)]:
        # TF copies g for a zero range: NaN, infinite and denormal g must come through unchanged.
        g = f32(np.nan, np.inf, -np.inf, 1e-40, -1e-40, -0.0, 0.0, -3.0)
        x = f32(-1, 0, 1, np.nan, 0.5, -0.5, np.inf, 2)
        cases.append(case(f"zero-range-special-g-{settings_name(8, False, lo, hi)}", 8, False, lo, hi, x, g))
    return cases


def shape_cases():
    """Empty, 0-d and higher-rank inputs (Args and Vars only: TF aborts on 0-d per-channel input)."""
    cases = []
    for shape in [(), (0,), (2, 0, 3), (3, 4, 5), (1, 1, 2, 1, 7)]:
        x, g = gi.sample_inputs(EXPLICIT_SEED + 3000 + len(cases), shape, f32(-0.1), f32(0.2), 8, False)
        cases.append(case(f"shape-{'x'.join(map(str, shape)) or '0d'}", 8, False, -0.1, 0.2, x, g))
    return cases


def per_channel_cases(scalar_cases):
    """Ranks 1..5 and many channel counts, zero-range channels mixed in, degenerate channels, vector 6."""
    cases = []
    for rank in range(1, MAX_RANK + 1):
        for channels in (1, 3, 7, 16, 17, 64):
            i = len(cases)
            shape = [(), (5,), (2, 3), (2, 1, 3), (1, 2, 2, 2)][rank - 1] + (channels,)
            num_bits, narrow = 2 + i % 15, i % 2 == 1
            bounds = [gi.RANGES[(c + i) % len(gi.RANGES)] for c in range(channels)]
            for c in range(2, channels, 5):
                bounds[c] = (F32(-0.0) if c % 2 else F32(0.0), F32(0.0))
            lo, hi = f32(*[b[0] for b in bounds]), f32(*[b[1] for b in bounds])
            x, g = gi.sample_inputs(EXPLICIT_SEED + 4000 + i, shape, lo, hi, num_bits, narrow)
            cases.append(case(f"pc-rank{rank}-c{channels}-{settings_name(num_bits, narrow)}", num_bits,
                              narrow, lo, hi, x, g))
    degenerate = DEGENERATE_RANGES + [(-0.1, 0.2), (-6.0, 6.0), (0.5, 1.0)]
    lo, hi = f32(*[b[0] for b in degenerate]), f32(*[b[1] for b in degenerate])
    for num_bits in (2, 8, 16):
        for narrow in (False, True):
            sampled, g = gi.sample_inputs(EXPLICIT_SEED + 5000 + len(cases), (40, len(lo)), lo, hi, num_bits, narrow)
            x = np.concatenate([np.repeat(DEGENERATE_X[:, None], len(lo), axis=1), sampled])
            g = np.concatenate([np.ones((len(DEGENERATE_X), len(lo)), F32), g])
            cases.append(case(f"pc-degenerate-channels-{settings_name(num_bits, narrow)}", num_bits, narrow,
                              lo, hi, x, g))
    for shape in [(0, 3), (3, 0), (2, 0, 5)]:
        c = shape[-1]
        cases.append(case(f"pc-empty-{'x'.join(map(str, shape))}", 8, False, np.full(c, -1, F32), np.full(c, 1, F32),
                          np.zeros(shape, F32)))
    x6 = f32(-1, 0.5, 5, 0, 0, 5, 2, 0, 5, 0.5, 0.5, 5).reshape(1, 2, 2, 3)
    cases.append(case("spec6", 8, False, f32(-0.5, -0.1, 0), f32(1, 0.2, 0), x6, np.arange(1, 13, dtype=F32).reshape(x6.shape)))
    for c in scalar_cases:
        if c["x"].ndim:
            cases.append(dict(c, name="as-pc-" + c["name"], x=c["x"].reshape(-1, 1), g=c["g"].reshape(-1, 1)))
    return cases


def explicit_cases():
    scalar = spec_vector_cases() + sweep_cases() + tie_cases() + special_value_cases() + degenerate_cases() + shape_cases()
    return {"args": scalar, "vars": scalar, "per_channel": per_channel_cases(scalar)}


def run_tf(family, c):
    """TF's outputs as float32 arrays (dmin/dmax as [channels]); None where TF rejects the input."""
    ops = tf.raw_ops
    x, g = tf.constant(c["x"]), tf.constant(c["g"])
    attrs = dict(num_bits=c["num_bits"], narrow_range=c["narrow_range"])
    with tf.device("/CPU:0"):
        if family == "args":
            bounds = dict(min=float(c["min"][0]), max=float(c["max"][0]))
            try:
                y = ops.FakeQuantWithMinMaxArgs(inputs=x, **bounds, **attrs)
            except tf.errors.InvalidArgumentError:
                return None
            dx = ops.FakeQuantWithMinMaxArgsGradient(gradients=g, inputs=x, **bounds, **attrs)
            return dict(y=y.numpy(), dx=dx.numpy())
        if family == "vars":
            bounds = dict(min=tf.constant(c["min"][0]), max=tf.constant(c["max"][0]))
            y = ops.FakeQuantWithMinMaxVars(inputs=x, **bounds, **attrs)
            grads = ops.FakeQuantWithMinMaxVarsGradient(gradients=g, inputs=x, **bounds, **attrs)
        else:
            bounds = dict(min=tf.constant(c["min"]), max=tf.constant(c["max"]))
            y = ops.FakeQuantWithMinMaxVarsPerChannel(inputs=x, **bounds, **attrs)
            grads = ops.FakeQuantWithMinMaxVarsPerChannelGradient(gradients=g, inputs=x, **bounds, **attrs)
    return dict(
        y=y.numpy(), dx=grads.backprops_wrt_input.numpy(),
        dmin=grads.backprop_wrt_min.numpy().reshape(-1), dmax=grads.backprop_wrt_max.numpy().reshape(-1),
    )


def model(family, c):
    """The spec's float32 model with FTZ/DAZ: outputs to cross-check TF, and the masks for the float64 sums."""
    channels = len(c["min"])
    rows = c["x"].size // channels if channels else 0
    x = flush(c["x"]).reshape(rows, channels)
    g = c["g"].reshape(rows, channels)
    nmin, nmax, scale, inv_scale = gi.nudge(c["min"], c["max"], c["num_bits"], c["narrow_range"])
    zero = (flush(c["min"]) == 0) & (flush(c["max"]) == 0) & (family != "args")
    with np.errstate(all="ignore"):
        quant_zero = np.floor(flush(flush(-nmin * inv_scale) + F32(0.5)))
        clamped = np.where(nmax < x, nmax, x)  # std::min / cwiseMin: NaN x stays, NaN bound is ignored
        clamped = np.where(clamped < nmin, nmin, clamped)
        shifted = flush(clamped - nmin)
        t = flush(shifted / scale) if family == "vars" else flush(shifted * inv_scale)
        t = flush(flush(t - quant_zero) + F32(0.5))
        y = np.where(zero, F32(0), flush(np.floor(t) * scale))
        between = (x >= nmin) & (x <= nmax)
        dx = np.where(zero, g, flush(flush(g) * between.astype(F32)))
        below = (x < nmin) & ~zero
        above = (x > nmax) & ~zero
        g64 = flush(g).astype(np.float64)
        # g * mask, as TF multiplies: NaN or infinite g at a masked-out element gives NaN.
        sums = {}
        for key, mask in (("dmin", below), ("dmax", above)):
            sums[key + "_ref"] = np.where(zero, 0.0, (g64 * mask).sum(axis=0))
            sums[key + "_abs"] = np.where(zero, 0.0, (np.abs(g64) * mask).sum(axis=0))
    return dict(y=y.reshape(c["x"].shape).astype(F32), dx=dx.reshape(c["x"].shape).astype(F32), **sums)


def bits_differ(a, b):
    """Positions where two float32 arrays differ as bit patterns (any NaN equals any NaN)."""
    a, b = np.asarray(a, F32).reshape(-1), np.asarray(b, F32).reshape(-1)
    return np.flatnonzero((a.view(np.uint32) != b.view(np.uint32)) & ~(np.isnan(a) & np.isnan(b)))


def check_against_model(family, c, out, problems):
    """TF must match the model elementwise (else the masks behind the float64 sums are wrong)."""
    expected = model(family, c)
    for key in ("y", "dx"):
        bad = bits_differ(out[key], expected[key])
        if bad.size:
            i = bad[0]
            problems.append(
                f"{family} {c['name']} {key}: {bad.size} differ from the model, first at {i}: "
                f"x={float(c['x'].reshape(-1)[i]).hex()} g={float(c['g'].reshape(-1)[i]).hex()} "
                f"tf={float(out[key].reshape(-1)[i]).hex()} model={float(expected[key].reshape(-1)[i]).hex()}"
            )
    if family == "args":
        return expected
    for key in ("dmin", "dmax"):
        tf_sum, ref, mag = out[key].astype(np.float64), expected[key + "_ref"], expected[key + "_abs"]
        with np.errstate(invalid="ignore"):
            ok = np.where(np.isnan(ref), np.isnan(tf_sum), (tf_sum == ref) | (np.abs(tf_sum - ref) <= 1e-5 * mag + 1e-30))
        if not ok.all():
            problems.append(f"{family} {c['name']} {key}: tf {out[key][~ok]} vs float64 {ref[~ok]}")
    return expected


def as_bits(a):
    return np.ascontiguousarray(a, dtype=F32).reshape(-1).view(np.uint32)


def pack(family, records, bulk):
    """Concatenates records into the npz layout described in tests/data/README.md."""
    n = len(records)
    shape = np.zeros((n, MAX_RANK), np.int64)
    for i, r in enumerate(records):
        shape[i, : r["x"].ndim] = r["x"].shape
    sizes = [r["x"].size for r in records]
    channels = [len(r["min"]) for r in records]
    out = dict(
        tf_version=np.array(tf.__version__),
        numpy_version=np.array(np.__version__),
        name=np.array([r["name"] for r in records]),
        num_bits=np.array([r["num_bits"] for r in records], np.int8),
        narrow_range=np.array([r["narrow_range"] for r in records], bool),
        ndim=np.array([r["x"].ndim for r in records], np.int8),
        shape=shape,
        elem_off=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        mm_off=np.concatenate([[0], np.cumsum(channels)]).astype(np.int64),
        min=np.concatenate([as_bits(r["min"]) for r in records]),
        max=np.concatenate([as_bits(r["max"]) for r in records]),
    )
    if bulk:
        out["seed"] = np.array([r["seed"] for r in records], np.int64)
        out["inputs_sha256"] = np.array([list(r["inputs_sha256"]) for r in records], np.uint8)
        tables, residuals, codes = [], [], []
        for r in records:
            x, y, g, dx = (as_bits(r[k]) for k in ("x", "y", "g", "dx"))
            table, residual = gi.encode_y(y, x.view(F32))
            code = gi.encode_dx(dx, g)
            assert code is not None, f"{r['name']}: a dx that is not g, +-0 or NaN"
            assert (gi.decode_y(table, residual, x.view(F32)) == y).all()
            assert not bits_differ(gi.decode_dx(code, g).view(F32), dx.view(F32)).size
            tables.append(table)
            residuals.append(residual)
            codes.append(code)
        out["y_table"] = np.concatenate(tables)
        out["y_table_off"] = np.concatenate([[0], np.cumsum([len(t) for t in tables])]).astype(np.int64)
        out["y_residual"] = np.concatenate(residuals)
        out["dx_code"] = np.concatenate(codes)
    else:
        for key in ("x", "g", "y", "dx"):
            out[key] = np.concatenate([as_bits(r[key]) for r in records])
    if family != "args":
        for key in ("dmin", "dmax"):
            out[key] = np.concatenate([as_bits(r[key]) for r in records])
            for suffix in ("_ref", "_abs"):
                out[key + suffix] = np.concatenate([np.asarray(r[key + suffix], np.float64) for r in records])
    return out


def record(family, c, problems):
    out = run_tf(family, c)
    if out is None:
        return None
    expected = check_against_model(family, c, out, problems)
    r = dict(c, **out)
    if family != "args":
        r.update({k: expected[k] for k in ("dmin_ref", "dmin_abs", "dmax_ref", "dmax_abs")})
    return r


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=("fq", "bn", "quantizers", "all"), default="all",
                        help="fake quant (cases_*, bulk_*), batch norm (bn_*), tfmot quantizers "
                             "(quantizers_*), or all three")
    family = parser.parse_args().family
    if family in ("fq", "all"):
        main_fake_quant()
    if family in ("bn", "all"):
        import gen_golden_bn

        gen_golden_bn.main()
    if family in ("quantizers", "all"):
        import gen_golden_quantizers

        gen_golden_quantizers.main()


def main_fake_quant():
    DATA.mkdir(parents=True, exist_ok=True)
    problems = []
    for family, cases in explicit_cases().items():
        records = [r for r in (record(family, c, problems) for c in cases) if r is not None]
        names = [r["name"] for r in records]
        assert len(set(names)) == len(names), "case names must be unique"
        np.savez_compressed(DATA / f"cases_{family}.npz", **pack(family, records, bulk=False))
        print(f"cases_{family}.npz: {len(records)} cases ({len(cases) - len(records)} rejected by TF), "
              f"{sum(r['x'].size for r in records)} elements")
    for family in FAMILIES:
        records = []
        for cfg in gi.bulk_configs(family):
            x, g = gi.bulk_inputs(cfg)
            c = case(cfg.name, cfg.num_bits, cfg.narrow_range, cfg.min, cfg.max, x, g)
            r = record(family, c, problems)
            r["seed"] = cfg.seed
            r["inputs_sha256"] = hashlib.sha256(x.tobytes() + g.tobytes()).digest()
            records.append(r)
        np.savez_compressed(DATA / f"bulk_{family}.npz", **pack(family, records, bulk=True))
        print(f"bulk_{family}.npz: {len(records)} configs, {sum(r['x'].size for r in records)} elements")
    for p in problems:
        print("MODEL MISMATCH:", p)
    if problems:
        sys.exit(f"{len(problems)} cases where TF and the spec model disagree; the data was written but check it")


if __name__ == "__main__":
    main()
