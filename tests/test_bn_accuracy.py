"""Batch norm's accuracy bar (issue 18, item 3): every output within max(1.5 x TF's error, 4 ulp) of a float64 model.

The sums add float32 runs of a few elements into float64 accumulators (src_c/batch_norm/bn_kernels.h);
this is the bar they must keep. An output's error is max |fqcore - model| / max |model| over the output
(as in tests/test_bn_golden.py), 1 ulp being 2**-23; the model is tests/reference_bn.py (float64, the
spec's formulas).

1. The committed golden set (tests/data/bn_*.npz, TF 2.21's Eigen outputs): every float32 case with
   data, training and inference, forward and gradient, ordinary and hard (bulk) cases, against
   max(1.5 x TF's error, 4 ulp).
2. Hard data generated here (channel means 1e4 with std 1, about 10**5 rows a channel, every layout,
   training, training with running averages, inference). There is no TF output, so the bar is the
   4 ulp floor alone, and it is also held channel by channel (each channel's error against its own
   largest |value|). That is justified because no channel's sum cancels: dy = 1 + 0.5 z + noise makes
   sum dy about n and sum dy (x - mean) about n / 2, well above the sqrt(n) of their noise, and the
   variance is a sum of squares about a shift near the mean. A float32 run of R = FQ_BN_SUM_RUN
   elements then loses at most (R + 2) x 2**-24 of its terms' magnitude, about the sum's own, so the
   result stays within a rounding or two of float32 (0.5 ulp each). An uncentered float32 sum of
   values near 1e4 loses thousands of ulp of the variance.

Channel by channel, a sum that cancels (a channel mean near 0 against its spread, dy summing to about
0) is not held to 4 ulp of its own small value: any float32 rounding of x - center, TF's included, is
relative to the spread, not to the result.
"""
import numpy as np
import pytest

import fqcore
import reference_bn as ref
import test_bn_golden as golden

F32 = np.float32
ULP = 2.0**-23
FLOOR = 4 * ULP
MARGIN = 1.5
FORWARD_TRAINING = ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2")
GRADIENT = ("x_backprop", "scale_backprop", "offset_backprop")


def errors(actual, model, data_format, per_channel):
    """(largest |actual - model|, largest |model|) over the finite model values: one pair for the whole
    output, or one per channel. A non-finite actual value where the model is finite is an infinite error."""
    a = np.asarray(actual).astype(np.float64)
    m = np.asarray(model, np.float64)
    if m.ndim > 1:
        a, m = ref._as_rows(a, data_format), ref._as_rows(m, data_format)
    else:
        a, m = a[None, :], m[None, :]
    if not per_channel:
        a, m = a.reshape(-1, 1), m.reshape(-1, 1)
    finite = np.isfinite(m)
    with np.errstate(invalid="ignore"):
        err = np.where(finite, np.abs(a - np.where(finite, m, 0.0)), 0.0)
    err = np.where(np.isnan(err), np.inf, err)
    return err.max(axis=0), np.where(finite, np.abs(m), 0.0).max(axis=0)


def problems_of(name, key, actual, model, data_format, tf=None, per_channel=False):
    """A message for the worst output (or channel) farther from the model than allowed; [] when none is."""
    fq_err, size = errors(actual, model, data_format, per_channel)
    allowed = FLOOR * size
    if tf is not None:
        tf_err, _ = errors(tf, model, data_format, per_channel)
        allowed = np.maximum(MARGIN * tf_err, allowed)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(fq_err == 0, 0.0, fq_err / allowed)
    c = int(np.argmax(ratio))
    if ratio[c] <= 1:
        return []
    scale = size[c] if size[c] > 0 else 1.0
    where = f"channel {c}" if per_channel else "output"
    tf_text = "" if tf is None else f", TF's {errors(tf, model, data_format, per_channel)[0][c] / scale / ULP:.3g}"
    return [f"{name} {key}: {where} is {fq_err[c] / scale / ULP:.3g} ulp of its largest |value| {size[c]:.6g} "
            f"from the float64 model, allowed {allowed[c] / scale / ULP:.3g}{tf_text}"]


# --- 1. The golden set


def golden_cases():
    cases = []
    for kind, pairs in (("cases", golden.CASES), ("bulk", golden.BULK)):
        for op, i in pairs:
            c = golden.case(op, kind, i)
            if c.dtype == "float32" and c.rows > 0 and c.channels > 0:
                cases.append((op, kind, i))
    return cases


GOLDEN = golden_cases()


@pytest.mark.parametrize("op,kind,index", GOLDEN, ids=[golden.case(*c).name for c in GOLDEN])
def test_golden(op, kind, index, isa):
    c = golden.case(op, kind, index)
    result = c.run()
    model = golden.model(op, kind, index)
    if op == "grad":
        keys = GRADIENT
    else:
        keys = FORWARD_TRAINING if c.is_training else ("y",)  # inference statistics are copies
    problems = []
    for key in keys:
        problems += problems_of(c.name, key, getattr(result, key), model[key], c.data_format, c.tf[key])
    assert not problems, f"on {isa}:\n  " + "\n  ".join(problems)


# --- 2. Hard data: channel means 1e4, std 1, about 10**5 rows a channel

HARD_SHAPES = {"NHWC": (16, 80, 80, 4), "NCHW": (16, 4, 80, 80), "NDHWC": (4, 8, 40, 80, 3),
               "NCDHW": (4, 3, 8, 40, 80)}


def hard_inputs(data_format):
    """x (means 1e4 + a little per channel, std 1), dy, scale, offset, mean_in, variance_in; fixed seeds."""
    shape = HARD_SHAPES[data_format]
    rng = np.random.default_rng(18_003 + len(shape) * 10 + data_format.index("C"))
    channels = shape[data_format.index("C")]
    view = [1] * len(shape)
    view[data_format.index("C")] = channels
    means = (1e4 + rng.uniform(-50, 50, channels)).reshape(view)
    z = rng.standard_normal(shape)
    x = (means + z).astype(F32)
    dy = (1.0 + 0.5 * z + rng.standard_normal(shape)).astype(F32)
    scale = rng.uniform(0.5, 2.0, channels).astype(F32)
    offset = rng.uniform(-1.0, 1.0, channels).astype(F32)
    mean_in = (means.reshape(-1) + rng.uniform(-0.1, 0.1, channels)).astype(F32)
    variance_in = rng.uniform(0.8, 1.2, channels).astype(F32)
    return x, dy, scale, offset, mean_in, variance_in


def assert_near_model(label, keys, result, model, data_format, isa):
    """Every output in `keys` within the hard data's bound of the model, whole and per channel."""
    problems = []
    for key in keys:
        for per_channel in (False, True):
            problems += problems_of(label, key, getattr(result, key), model[key], data_format,
                                    per_channel=per_channel)
    assert not problems, f"on {isa}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("data_format", sorted(HARD_SHAPES))
@pytest.mark.parametrize("mode", ["training", "training-running-average", "inference"])
def test_hard_forward(data_format, mode, isa):
    x, _, scale, offset, mean_in, variance_in = hard_inputs(data_format)
    kw = dict(epsilon=1e-3, data_format=data_format, is_training=mode != "inference",
              exponential_avg_factor=0.25 if mode == "training-running-average" else 1.0)
    stats = dict(mean=mean_in, variance=variance_in) if mode != "training" else {}
    result = fqcore.fused_batch_norm(x, scale, offset, **stats, **kw)
    model = ref.forward(x, scale, offset, **stats, **kw)
    keys = FORWARD_TRAINING if mode != "inference" else ("y",)
    assert_near_model(f"{data_format} {mode}", keys, result, model, data_format, isa)


@pytest.mark.parametrize("data_format", sorted(HARD_SHAPES))
@pytest.mark.parametrize("is_training", [True, False], ids=["training", "inference"])
def test_hard_gradient(data_format, is_training, isa):
    x, dy, scale, _, mean_in, variance_in = hard_inputs(data_format)
    if is_training:  # the batch's own statistics, as the forward saves them (from the model, not fqcore)
        m = ref.forward(x, scale, np.zeros_like(scale), data_format=data_format)
        rs1, rs2 = m["reserve_space_1"].astype(F32), m["reserve_space_2"].astype(F32)
    else:
        rs1, rs2 = mean_in, variance_in
    kw = dict(epsilon=1e-3, data_format=data_format, is_training=is_training)
    result = fqcore.fused_batch_norm_grad(dy, x, scale, rs1, rs2, **kw)
    model = ref.grad(dy, x, scale, rs1, rs2, **kw)
    assert_near_model(f"{data_format} gradient", GRADIENT, result, model, data_format, isa)
