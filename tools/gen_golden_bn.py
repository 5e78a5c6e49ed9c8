"""Writes TensorFlow 2.21's batch-norm golden data, tests/data/bn_*.npz (`python tools/gen_golden_bn.py`)."""

import hashlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The spec's reference is the Eigen kernel; the default oneDNN kernel differs in last bits and shapes.
# Must be set before TensorFlow is imported (gen_golden.py sets it too, as it imports TF first).
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import golden_inputs_bn as gb  # noqa: E402
import reference_bn as ref  # noqa: E402
from golden_inputs_bn import F32, FORMATS, Recipe  # noqa: E402

assert tf.__version__.startswith("2.21"), f"the golden data is TF 2.21's, this is {tf.__version__}"

CHANNELS = (1, 3, 7, 8, 16, 19, 64, 256)
EPSILONS = (1e-4, 1e-3, 1e-5, 0.1, 0.0)
FACTORS = (1.0, 0.25, 1.0, 0.1, 1.0, 0.0)  # a period prime to EPSILONS'
LOW = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
SPATIAL = {4: [(1, 1), (3, 5), (2, 7), (4, 4), (1, 17), (5, 13), (1, 33), (7, 9), (2, 2), (3, 3)],
           5: [(1, 1, 1), (2, 3, 5), (1, 2, 7), (2, 2, 4), (3, 1, 6), (1, 1, 17), (3, 11, 1), (2, 3, 3),
               (1, 2, 2), (5, 1, 7)]}
MAX_ELEMS = 3000
ULP = 2.0**-23
OUT_FWD = ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2")
OUT_GRAD = ("x_backprop", "scale_backprop", "offset_backprop")
QUIRKS = []  # TF behaviour the data works around, printed at the end


def f32(*values):
    return np.array(values, dtype=F32)


def layout(data_format, n, spatial, c):
    """The array shape in data_format for batch n, spatial extent and channels c."""
    return (n, c, *spatial) if data_format[1] == "C" else (n, *spatial, c)


def grid_shape(data_format, c, i):
    """A shape for the i-th grid case with c channels: cycling spatial extents, capped at MAX_ELEMS.

    At least 3 rows: with 2, x_backprop is 0 up to epsilon (the two normalized values are +-1 whatever
    x is), so its relative error measures rounding noise only (the edge cases have n = 1)."""
    rank = len(data_format)
    options = SPATIAL[rank]
    for k in range(len(options)):
        spatial = options[(i + k) % len(options)]
        n = 1 + (i + k) % 3
        rows = n * int(np.prod(spatial))
        if rows >= 3 and rows * c <= MAX_ELEMS:
            return layout(data_format, n, spatial, c)
    return layout(data_format, 3, (1,) * (rank - 2), c)


def case(name, op, data_format, is_training, shape=None, dtype="float32", epsilon=1e-4, factor=1.0,
         has_stats=True, seed=0, **arrays):
    """One explicit case: its inputs from the recipe, replaced by any arrays given."""
    inputs = gb.make_inputs(Recipe(seed=seed, shape=shape, data_format=data_format)) if shape else {}
    inputs.update(arrays)
    if dtype != "float32":  # the stored inputs are the low-precision values, upcast exactly
        for key in ("x", "dy"):
            inputs[key] = inputs[key].astype(LOW[dtype]).astype(F32)
    return dict(name=name, op=op, data_format=data_format, is_training=is_training, dtype=dtype,
                epsilon=F32(epsilon), factor=F32(factor), has_stats=has_stats or factor != 1 or not is_training,
                **inputs)


def grid_cases(op):
    cases, seed = [], 8_000_000 if op == "forward" else 8_500_000
    for j, fmt in enumerate(FORMATS):
        for training in (True, False):
            for k, c in enumerate(CHANNELS):
                i = len(cases)
                factor = FACTORS[i % len(FACTORS)] if training and op == "forward" else 1.0
                mode = "train" if training else "infer"
                cases.append(case(f"{op}-{fmt}-{mode}-c{c}", op, fmt, training, grid_shape(fmt, c, i),
                                  epsilon=EPSILONS[i % len(EPSILONS)], factor=factor, has_stats=i // 2 % 2 == 0,
                                  seed=seed + 10 * i))
    for dtype in LOW:
        for j, fmt in enumerate(FORMATS):
            for training in (True, False):
                for c in ((3, 19) if j % 2 == 0 else (8, 64)):
                    i = len(cases)
                    mode = "train" if training else "infer"
                    factor = 0.25 if training and op == "forward" and c in (19, 64) else 1.0
                    cases.append(case(f"{op}-{fmt}-{mode}-c{c}-{dtype}", op, fmt, training,
                                      grid_shape(fmt, c, i), dtype=dtype, factor=factor, seed=seed + 10 * i))
    return cases


def edge_cases(op):
    """n = 1, empty inputs, epsilon 0 with n = 1, NaN and inf, the spec's vectors."""
    cases, seed = [], 8_900_000 if op == "forward" else 8_950_000
    for fmt, c, dtype in [("NHWC", 3, "float32"), ("NCHW", 8, "float32"), ("NDHWC", 19, "float32"),
                          ("NCDHW", 7, "float32"), ("NHWC", 5, "float16"), ("NCHW", 4, "bfloat16")]:
        for training in (True, False):
            shape = layout(fmt, 1, (1,) * (len(fmt) - 2), c)
            mode = "train" if training else "infer"
            cases.append(case(f"{op}-n1-{fmt}-{mode}-c{c}-{dtype}", op, fmt, training, shape, dtype=dtype,
                              seed=seed + 10 * len(cases)))
    # epsilon 0 with n = 1: var + epsilon = 0, rsqrt = inf, y = 0 * inf + offset = NaN.
    cases.append(case(f"{op}-n1-eps0-NHWC-train", op, "NHWC", True, (1, 1, 1, 3), epsilon=0.0, seed=seed + 500))
    empties = [("NHWC", (0, 2, 2, 3), True, 1.0, "float32"), ("NCHW", (2, 3, 0, 2), True, 1.0, "float32"),
               ("NDHWC", (1, 0, 2, 2, 5), True, 0.25, "float32"), ("NCDHW", (2, 4, 1, 0, 3), False, 1.0, "float32"),
               ("NHWC", (0, 1, 1, 4), False, 1.0, "float32"), ("NCHW", (0, 3, 2, 2), True, 1.0, "float16"),
               ("NHWC", (2, 2, 2, 0), True, 1.0, "float32"), ("NCHW", (2, 0, 3, 3), False, 1.0, "float32")]
    for fmt, shape, training, factor, dtype in empties:
        if op == "grad" and factor != 1:
            continue
        mode = "train" if training else "infer"
        label = "x".join(map(str, shape))
        cases.append(case(f"{op}-empty-{fmt}-{mode}-{label}-{dtype}" + (f"-f{factor:g}" if factor != 1 else ""),
                          op, fmt, training, shape, dtype=dtype, factor=factor, seed=seed + 10 * len(cases)))
    # NaN in channel 0's input, +inf in channel 1's, -0.0 in channel 2's; channel 3 is ordinary.
    for fmt in ("NHWC", "NCHW"):
        for training in (True, False):
            c = case(f"{op}-special-{fmt}-{'train' if training else 'infer'}", op, fmt, training,
                     layout(fmt, 2, (2, 3), 4), seed=seed + 10 * len(cases))
            key = "x" if op == "forward" else "dy"
            values = np.moveaxis(c[key], gb.channel_axis(fmt), -1)  # a view: writes go to c[key]
            values[0, 1, 2, 0] = np.nan
            values[1, 0, 1, 1] = np.inf
            values[0, 0, 0, 2] = -0.0
            cases.append(c)
    if op == "forward":
        x1 = (0.37 * np.arange(24)).astype(F32).reshape(2, 2, 2, 3)  # float64 product, rounded once
        base = dict(x=x1, scale=f32(1, 2, -0.5), offset=f32(0, 0.1, 0.2), mean_in=f32(1, 2, 3),
                    variance_in=f32(4, 5, 6))
        cases.append(case("spec1", op, "NHWC", True, epsilon=1e-3, has_stats=False, **base))
        cases.append(case("spec2", op, "NHWC", True, epsilon=1e-3, factor=0.25, **base))
    else:
        x3 = (0.37 * np.arange(36)).astype(F32).reshape(2, 3, 2, 3)
        dy3 = (F32(0.5) * (np.arange(36) % 7 - 3).astype(F32)).reshape(2, 3, 2, 3)
        cases.append(case("spec3", op, "NHWC", True, epsilon=1e-3, x=x3, dy=dy3, scale=f32(1.5, -0.75, 0.2),
                          offset=f32(0, 0, 0), mean_in=f32(0, 0, 0), variance_in=f32(1, 1, 1)))
    return cases


# --- Running TensorFlow


def tf_input(values, dtype):
    return tf.constant(values.astype(LOW[dtype]) if dtype != "float32" else values)


def run_forward(c):
    """TF's forward outputs as float32 arrays (low-precision y upcast exactly), and reserve_space_3."""
    stats = dict(mean=c["mean_in"], variance=c["variance_in"]) if c["has_stats"] else dict(
        mean=np.zeros(0, F32), variance=np.zeros(0, F32))
    with tf.device("/CPU:0"):
        out = tf.raw_ops.FusedBatchNormV3(
            x=tf_input(c["x"], c["dtype"]), scale=c["scale"], offset=c["offset"], **stats,
            epsilon=float(c["epsilon"]), exponential_avg_factor=float(c["factor"]),
            data_format=c["data_format"], is_training=c["is_training"])
    out = [np.asarray(t.numpy()) for t in out]
    assert out[0].dtype == (LOW[c["dtype"]] if c["dtype"] != "float32" else F32), out[0].dtype
    assert all(o.dtype == F32 for o in out[1:]), [o.dtype for o in out]
    result = dict(zip(OUT_FWD, (o.astype(F32) for o in out[:5])))
    result["reserve_space_3"] = out[5]
    # TF leaves reserve_space_1/2 uninitialised in inference and for empty x; store NaN there.
    result["rs_defined"] = c["is_training"] and c["x"].size > 0
    if not result["rs_defined"]:
        for key in ("reserve_space_1", "reserve_space_2"):
            result[key] = np.full(result[key].shape, np.nan, F32)
    return result


def run_grad(c):
    """TF's gradient outputs. Inference NCHW/NCDHW, which the raw op rejects, goes through NHWC/NDHWC
    transposes as TF's Python layer does (tf.compat.v1.nn.fused_batch_norm's gradient)."""
    fmt = c["data_format"]
    transposed = not c["is_training"] and fmt[1] == "C"
    x, dy = c["x"], c["dy"]
    if transposed:
        perm = (0, *range(2, x.ndim), 1)
        x, dy, fmt = x.transpose(perm), dy.transpose(perm), fmt[0] + fmt[2:] + "C"
    with tf.device("/CPU:0"):
        out = tf.raw_ops.FusedBatchNormGradV3(
            y_backprop=tf_input(dy, c["dtype"]), x=tf_input(x, c["dtype"]), scale=c["scale"],
            reserve_space_1=c["rs1_in"], reserve_space_2=c["rs2_in"], reserve_space_3=tf.zeros(0, tf.float32),
            epsilon=float(c["epsilon"]), data_format=fmt, is_training=c["is_training"])
    out = [np.asarray(t.numpy()) for t in out]
    if out[0].size == 0 and out[0].shape != x.shape:
        # TF returns an empty 5-D input's x_backprop with its internal 4-D shape; the data keeps x's.
        QUIRKS.append(f"{c['name']}: TF's x_backprop has shape {out[0].shape} for x of shape {x.shape}")
        out[0] = np.zeros(x.shape, out[0].dtype)
    if transposed:
        out[0] = out[0].transpose(np.argsort(perm))
    result = dict(zip(OUT_GRAD, (o.astype(F32) for o in out[:3])))
    assert out[3].dtype == out[4].dtype == F32 and out[3].shape == out[4].shape == (0,), (out[3], out[4])
    result["tf_transposed"] = transposed
    return result


def with_reserve_spaces(c):
    """A gradient case's rs1/rs2 inputs: TF's forward batch statistics (training) or the population ones."""
    if c["is_training"]:
        fwd = run_forward(dict(c, op="forward", factor=F32(1), has_stats=False))
        if c["x"].size:
            return dict(c, rs1_in=fwd["reserve_space_1"], rs2_in=fwd["reserve_space_2"])
        # Empty x: TF's reserve spaces are uninitialised; feed the population statistics instead.
    return dict(c, rs1_in=c["mean_in"], rs2_in=c["variance_in"])


# --- Checking TF against the float64 model, and the facts the tests rely on


def rel_err(actual, model):
    """max |actual - model| / max |model| over the model's finite values (0 where both are all-zero)."""
    actual, model = np.asarray(actual, np.float64).reshape(-1), np.asarray(model, np.float64).reshape(-1)
    finite = np.isfinite(model)
    if not finite.any():
        return 0.0
    err, size = np.abs(actual[finite] - model[finite]).max(), np.abs(model[finite]).max()
    return 0.0 if err == 0 else (np.inf if size == 0 else err / size)


def model_of(c):
    if c["op"] == "forward":
        stats = dict(mean=c["mean_in"], variance=c["variance_in"]) if c["has_stats"] else {}
        return ref.forward(c["x"], c["scale"], c["offset"], **stats, epsilon=c["epsilon"],
                           exponential_avg_factor=c["factor"], data_format=c["data_format"],
                           is_training=c["is_training"])
    return ref.grad(c["dy"], c["x"], c["scale"], c["rs1_in"], c["rs2_in"], epsilon=c["epsilon"],
                    data_format=c["data_format"], is_training=c["is_training"])


def check(c, out, problems, errors):
    """TF's NaN/inf positions must be the model's; collects TF's relative errors in units of 2**-23."""
    model = model_of(c)
    for key, value in model.items():
        if key.startswith("reserve_space") and not out.get("rs_defined", True):
            continue
        t, m = np.asarray(out[key], np.float64), np.asarray(value, np.float64)
        if t.shape != m.shape:
            problems.append(f"{c['name']} {key}: TF shape {t.shape}, model {m.shape}")
            continue
        special = ~np.isfinite(m)
        same = np.where(np.isnan(m), np.isnan(t), t == m)
        if not same[special].all() or (~np.isfinite(t[~special])).any():
            if c["x"].size == 0 and not c["is_training"] and key in ("batch_mean", "batch_variance"):
                QUIRKS.append(f"{c['name']}: TF's inference {key} for empty x is NaN, not the input's copy")
            else:
                problems.append(f"{c['name']} {key}: TF's NaN/inf positions differ from the model's")
        low = c["dtype"] != "float32" and key in ("y", "x_backprop")
        errors.setdefault(key + (f" ({c['dtype']})" if low else ""), []).append((rel_err(t, m) / ULP, c["name"]))
    if c["op"] == "forward" and not c["is_training"] and c["x"].size:  # the spec: copies
        for key, expected in (("batch_mean", c["mean_in"]), ("batch_variance", c["variance_in"])):
            if out[key].tobytes() != expected.tobytes():
                problems.append(f"{c['name']}: TF's inference {key} is not a copy of the input")
    if c["op"] == "forward":
        rs3 = out["reserve_space_3"]
        if rs3.shape != () or rs3.dtype != F32 or float(rs3) != 0.0:
            problems.append(f"{c['name']}: reserve_space_3 is {rs3.dtype} {rs3.shape} {rs3!r}")


def check_low_precision_rounds_once(c, out, problems):
    """TF's float16/bfloat16 outputs: its float32 result on the upcast inputs, rounded once."""
    if c["dtype"] == "float32":
        return
    c32 = dict(c, dtype="float32")
    out32 = run_forward(c32) if c["op"] == "forward" else run_grad(c32)
    key = "y" if c["op"] == "forward" else "x_backprop"
    rounded = out32[key].astype(LOW[c["dtype"]]).astype(F32)
    if bits_differ(out[key], rounded):
        problems.append(f"{c['name']}: TF's {c['dtype']} {key} is not its float32 result rounded once")
    for k, v in out32.items():
        if k != key and isinstance(v, np.ndarray) and v.dtype == F32 and bits_differ(out[k], v):
            problems.append(f"{c['name']}: TF's {k} differs between {c['dtype']} and upcast float32 inputs")


def bits_differ(a, b):
    a, b = np.asarray(a, F32).reshape(-1), np.asarray(b, F32).reshape(-1)
    return bool(((a.view(np.uint32) != b.view(np.uint32)) & ~(np.isnan(a) & np.isnan(b))).any())


# --- Hints for the bulk codec (golden_inputs_bn): TF's per-channel coefficients, found by trying the
# float32 values near their estimates and keeping the one that reproduces most of TF's elements.


def rows_of(a, data_format):
    moved = np.moveaxis(np.asarray(a), gb.channel_axis(data_format), -1)
    return moved.reshape(-1, moved.shape[-1])


def near(value, ulps):
    """The float32 values within ulps of value."""
    centre = gb.ordered(np.array([value], F32).view(np.uint32))[0]
    return gb.unordered(centre + np.arange(-ulps, ulps + 1)).view(F32)


def best_pair(target, predict, a_candidates, b_candidates, sample=4096):
    """(a, b) among the candidates whose predict(a, b) matches the most of target's first rows."""
    target = target[:sample]
    best, best_hits = (a_candidates[len(a_candidates) // 2], b_candidates[len(b_candidates) // 2]), -1
    for a in a_candidates:
        with np.errstate(all="ignore"):
            hits = (predict(a, b_candidates[None, :], sample) == target[:, None]).sum(axis=0)
        if hits.max() > best_hits:
            best, best_hits = (a, b_candidates[hits.argmax()]), hits.max()
    return best


def forward_hints(c, out):
    fmt, eps = c["data_format"], c["epsilon"]
    mean, var = ((out["reserve_space_1"], out["reserve_space_2"]) if c["is_training"]
                 else (c["mean_in"], c["variance_in"]))
    xc = (rows_of(c["x"], fmt) - mean).astype(F32)
    y = rows_of(out["y"], fmt)
    hints = np.empty(len(mean), F32)
    for ch in range(len(mean)):
        s0 = (F32(1) / np.sqrt(var[ch] + eps)) * c["scale"][ch]
        off = c["offset"][ch]
        hints[ch] = best_pair(y[:, ch], lambda s, _, k: (xc[:k, ch, None] * s + off).astype(F32), near(s0, 4),
                              np.zeros(1, F32))[0]
    return dict(hint_s=hints)


def grad_hints(c, out):
    fmt, eps = c["data_format"], c["epsilon"]
    x, dy, xbp = (rows_of(c[k] if k in c else out[k], fmt) for k in ("x", "dy", "x_backprop"))
    n = x.shape[0]
    xc = (x - c["rs1_in"]).astype(F32)
    hints = {k: np.zeros(x.shape[1], F32) for k in ("hint_a", "hint_mu", "hint_b")}
    for ch in range(x.shape[1]):
        a0 = c["scale"][ch] * (F32(1) / np.sqrt(c["rs2_in"][ch] + eps))
        if c["is_training"]:
            mu = out["offset_backprop"][ch] * (F32(1) / F32(n))
            yc = (dy[:, ch] - mu).astype(F32)
            t = xbp[:, ch].astype(np.float64) / np.float64(a0)
            b0 = F32(np.sum((yc - t) * xc[:, ch]) / np.sum(xc[:, ch].astype(np.float64) ** 2))
            b_candidates = near(b0, 64)
        else:
            mu, yc, b_candidates = F32(0), dy[:, ch], np.zeros(1, F32)
        a, b = best_pair(xbp[:, ch], lambda a, b, k: (a * (yc[:k, None] - xc[:k, ch, None] * b)).astype(F32),
                         near(a0, 4), b_candidates)
        hints["hint_a"][ch], hints["hint_mu"][ch], hints["hint_b"][ch] = a, mu, b
    return hints


# --- Packing


def bits(a):
    return np.ascontiguousarray(a, dtype=F32).reshape(-1).view(np.uint32)


def pack_common(records, elementwise, per_channel):
    n = len(records)
    shape = np.zeros((n, 5), np.int64)
    for i, r in enumerate(records):
        shape[i, : r["x"].ndim] = r["x"].shape
    channels = [r["scale"].size for r in records]
    out = dict(
        tf_version=np.array(tf.__version__), numpy_version=np.array(np.__version__),
        name=np.array([r["name"] for r in records]),
        data_format=np.array([r["data_format"] for r in records]),
        is_training=np.array([r["is_training"] for r in records], bool),
        dtype=np.array([r["dtype"] for r in records]),
        epsilon=np.array([r["epsilon"] for r in records], F32).view(np.uint32),
        ndim=np.array([r["x"].ndim for r in records], np.int8), shape=shape,
        elem_off=np.concatenate([[0], np.cumsum([r["x"].size for r in records])]).astype(np.int64),
        ch_off=np.concatenate([[0], np.cumsum(channels)]).astype(np.int64),
    )
    for key in per_channel:
        out[key] = np.concatenate([bits(r[key]) for r in records])
    for key in elementwise:
        out[key] = np.concatenate([bits(r[key]) for r in records])
    return out


FWD_CHANNEL = ("scale", "offset", "mean_in", "variance_in") + OUT_FWD[1:]
GRAD_CHANNEL = ("scale", "rs1_in", "rs2_in", "scale_backprop", "offset_backprop")


def pack(op, records, bulk):
    per_channel = FWD_CHANNEL if op == "forward" else GRAD_CHANNEL
    if bulk:
        per_channel += ("hint_s",) if op == "forward" else ("hint_a", "hint_mu", "hint_b")
        elementwise = ()
    else:
        elementwise = ("x", "y") if op == "forward" else ("x", "dy", "x_backprop")
    out = pack_common(records, elementwise, per_channel)
    if op == "forward":
        out["factor"] = np.array([r["factor"] for r in records], F32).view(np.uint32)
        out["has_stats"] = np.array([r["has_stats"] for r in records], bool)
        out["rs_defined"] = np.array([r["rs_defined"] for r in records], bool)
        out["reserve_space_3"] = np.array([bits(r["reserve_space_3"])[0] for r in records], np.uint32)
        out["reserve_space_3_ndim"] = np.array([r["reserve_space_3"].ndim for r in records], np.int8)
    else:
        out["tf_transposed"] = np.array([r["tf_transposed"] for r in records], bool)
    if bulk:
        key = "y" if op == "forward" else "x_backprop"
        out["seed"] = np.array([r["seed"] for r in records], np.int64)
        out["inputs_sha256"] = np.array([list(r["inputs_sha256"]) for r in records], np.uint8)
        out[key + "_residual"] = np.concatenate([r[key + "_residual"] for r in records])
    return out


# --- Main


def explicit_records(op, problems, errors):
    records = []
    for c in grid_cases(op) + edge_cases(op):
        if op == "grad":
            c = with_reserve_spaces(c)
        out = run_forward(c) if op == "forward" else run_grad(c)
        check(c, out, problems, errors)
        check_low_precision_rounds_once(c, out, problems)
        records.append(dict(c, **out))
    names = [r["name"] for r in records]
    assert len(set(names)) == len(names), "case names must be unique"
    return records


def bulk_records(op, problems, errors):
    records = []
    for cfg in gb.bulk_configs():
        if cfg.op != op:
            continue
        inputs = gb.make_inputs(cfg.recipe)
        c = dict(name=cfg.name, op=op, data_format=cfg.recipe.data_format, is_training=cfg.is_training,
                 dtype="float32", epsilon=F32(cfg.epsilon), factor=F32(cfg.factor), has_stats=True, **inputs)
        if op == "forward":
            out = run_forward(c)
            hints = forward_hints(c, out)
            mean = out["reserve_space_1"] if cfg.is_training else c["mean_in"]
            predicted = gb.predict_forward(c["x"], mean, hints["hint_s"], c["offset"], c["data_format"])
            key = "y"
        else:
            c = with_reserve_spaces(c)
            out = run_grad(c)
            hints = grad_hints(c, out)
            predicted = gb.predict_grad(c["dy"], c["x"], c["rs1_in"], hints["hint_a"], hints["hint_mu"],
                                        hints["hint_b"], c["data_format"])
            key = "x_backprop"
        out.update(hints)
        check(c, out, problems, errors)
        residual = gb.encode(out[key], predicted)
        assert residual is not None, f"{cfg.name}: {key} not encodable"
        print(f"  {cfg.name}: {key} predicted exactly for {np.mean(residual == 0):.4f} of the elements")
        assert gb.decode(residual, predicted).tobytes() == bits(out[key]).tobytes()
        digest = hashlib.sha256(c["x"].tobytes() + c["dy"].tobytes()).digest()
        records.append(dict(c, **out, seed=cfg.recipe.seed, inputs_sha256=digest, **{key + "_residual": residual}))
    return records


def summarize(errors):
    lines = []
    for key, values in errors.items():
        worst, name = max(values)
        lines.append(f"  {key:16s} worst {worst:12.4g} ulp-relative ({name})")
    return "\n".join(lines)


def main():
    DATA.mkdir(parents=True, exist_ok=True)
    problems = []
    for op in ("forward", "grad"):
        for kind, make in (("cases", explicit_records), ("bulk", bulk_records)):
            errors = {}
            records = make(op, problems, errors)
            path = DATA / f"bn_{op}_{kind}.npz"
            np.savez_compressed(path, **pack(op, records, bulk=kind == "bulk"))
            print(f"{path.name}: {len(records)} cases, {sum(r['x'].size for r in records)} elements, "
                  f"{path.stat().st_size} bytes; TF's relative error against the float64 model:")
            print(summarize(errors))
    for q in QUIRKS:
        print("TF QUIRK:", q)
    for p in problems:
        print("PROBLEM:", p)
    if problems:
        sys.exit(f"{len(problems)} problems; the data was written but check it")


if __name__ == "__main__":
    main()
