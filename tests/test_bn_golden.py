"""fqcore's batch norm against TensorFlow 2.21's golden data (tests/data/bn_*.npz) and a float64 model, on every ISA.

The criterion (the issue's): measured against the float64 model of the spec's formulas
(tests/reference_bn.py), every output's relative error, max |error| / max |value|, is at most
max(1.5 x TF's, 4 ulp) where 1 ulp = 2**-23; TF's error is its committed output's, against the same
model. NaN and inf sit where TF has them. float16/bfloat16 results are fqcore's own float32 results
on the upcast inputs, rounded once. Inference statistics are copies of the inputs (the spec).
"""
import functools
import hashlib
from pathlib import Path

import numpy as np
import pytest

import fqcore
import golden_inputs_bn as gb
import reference_bn as ref

DATA = Path(__file__).resolve().parent / "data"
F32 = np.float32
ULP = 2.0**-23
FLOOR = 4 * ULP
MARGIN = 1.5
# Unit roundoff of the low-precision outputs: rounding a value once moves it by at most this relative
# to its own magnitude, so at most this relative to the largest one.
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
FWD_OUT = ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2", "reserve_space_3")
GRAD_OUT = ("x_backprop", "scale_backprop", "offset_backprop", "reserve_space_4", "reserve_space_5")


def api(name):
    """fqcore's batch-norm function; a clear failure (not an AttributeError deep in a helper) without it."""
    fn = getattr(fqcore, name, None)
    assert fn is not None, f"fqcore.{name} is missing (shared/spec/batch_norm.md)"
    return fn


def low_dtype(name):
    if name == "float16":
        return np.float16
    return pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes").bfloat16


@functools.lru_cache(maxsize=None)
def load(op, kind):
    with np.load(DATA / f"bn_{op}_{kind}.npz") as npz:
        return {key: npz[key] for key in npz.files}


def rel_err(actual, model):
    """max |actual - model| / max |model| over the model's finite values; 0/0 counts as 0, x/0 as inf."""
    actual = np.asarray(actual).astype(np.float64).reshape(-1)
    model = np.asarray(model, np.float64).reshape(-1)
    finite = np.isfinite(model)
    if not finite.any():
        return 0.0
    with np.errstate(invalid="ignore"):
        err = np.abs(actual[finite] - model[finite]).max()
    size = np.abs(model[finite]).max()
    if np.isnan(err):
        return np.inf
    return 0.0 if err == 0 else (np.inf if size == 0 else err / size)


class Case:
    """One golden case: inputs (float32 arrays; low-precision values upcast exactly) and TF's outputs."""

    def __init__(self, op, kind, i):
        d = self.data = load(op, kind)
        self.op, self.kind, self.i = op, kind, i
        self.name = str(d["name"][i])
        self.data_format = str(d["data_format"][i])
        self.is_training = bool(d["is_training"][i])
        self.dtype = str(d["dtype"][i])
        self.epsilon = float(d["epsilon"][i].view(F32))
        self.shape = tuple(int(s) for s in d["shape"][i, : d["ndim"][i]])
        self.elems = slice(*d["elem_off"][i : i + 2])
        self.chans = slice(*d["ch_off"][i : i + 2])
        self.channels = self.chans.stop - self.chans.start
        self.rows = int(np.prod(self.shape)) // self.channels if self.channels else 0
        if op == "forward":
            self.factor = float(d["factor"][i].view(F32))
            self.has_stats = bool(d["has_stats"][i])
            self.rs_defined = bool(d["rs_defined"][i])
        else:
            self.tf_transposed = bool(d["tf_transposed"][i])
        self.inputs, self.tf = self._arrays()

    def chan(self, key):
        return self.data[key][self.chans].view(F32).copy()

    def elem(self, key):
        return self.data[key][self.elems].view(F32).reshape(self.shape).copy()

    def _arrays(self):
        keys = ("scale", "offset", "mean_in", "variance_in") if self.op == "forward" else ("scale", "rs1_in", "rs2_in")
        inputs = {k: self.chan(k) for k in keys}
        outs = FWD_OUT[1:5] if self.op == "forward" else GRAD_OUT[1:3]
        tf = {k: self.chan(k) for k in outs}
        if self.kind == "cases":
            for k in ("x",) if self.op == "forward" else ("x", "dy"):
                inputs[k] = self.elem(k)
            key = "y" if self.op == "forward" else "x_backprop"
            tf[key] = self.elem(key)
            return inputs, tf
        x, dy = bulk_inputs(self.op, self.i)
        inputs.update(x=x, dy=dy)
        h = {k: self.chan(k) for k in self.data if k.startswith("hint_")}
        if self.op == "forward":
            mean = tf["reserve_space_1"] if self.is_training else inputs["mean_in"]
            predicted = gb.predict_forward(x, mean, h["hint_s"], inputs["offset"], self.data_format)
            tf["y"] = gb.decode(self.data["y_residual"][self.elems], predicted).reshape(self.shape)
        else:
            predicted = gb.predict_grad(dy, x, inputs["rs1_in"], h["hint_a"], h["hint_mu"], h["hint_b"],
                                        self.data_format)
            tf["x_backprop"] = gb.decode(self.data["x_backprop_residual"][self.elems], predicted).reshape(self.shape)
        return inputs, tf

    def call_args(self, dtype=None):
        """(args, kwargs) for fqcore; x and dy in the case's dtype, or in dtype when given."""
        dtype = dtype or self.dtype
        cast = (lambda a: a.copy()) if dtype == "float32" else (lambda a: a.astype(low_dtype(dtype)))
        kw = dict(epsilon=self.epsilon, data_format=self.data_format, is_training=self.is_training)
        p = self.inputs
        if self.op == "forward":
            stats = (p["mean_in"], p["variance_in"]) if self.has_stats else (None, None)
            return (cast(p["x"]), p["scale"], p["offset"], *stats), dict(kw, exponential_avg_factor=self.factor)
        return (cast(p["dy"]), cast(p["x"]), p["scale"], p["rs1_in"], p["rs2_in"], np.zeros((), F32)), kw

    def run(self, dtype=None):
        """fqcore's result, checking that it leaves its inputs alone."""
        args, kw = self.call_args(dtype)
        before = [a.tobytes() if isinstance(a, np.ndarray) else a for a in args]
        fn = api("fused_batch_norm" if self.op == "forward" else "fused_batch_norm_grad")
        result = fn(*args, **kw)
        after = [a.tobytes() if isinstance(a, np.ndarray) else a for a in args]
        assert before == after, f"{self.name}: fqcore modified its inputs"
        return result


@functools.lru_cache(maxsize=None)
def bulk_inputs(op, i):
    """A bulk case's regenerated (x, dy), checked against the stored recipe digest."""
    data = load(op, "bulk")
    configs = [c for c in gb.bulk_configs() if c.op == op]
    assert [c.name for c in configs] == list(data["name"]), "golden_inputs_bn.bulk_configs drifted from the data"
    cfg = configs[i]
    assert cfg.recipe.seed == data["seed"][i], f"{cfg.name}: seed drifted"
    inputs = gb.make_inputs(cfg.recipe)
    digest = hashlib.sha256(inputs["x"].tobytes() + inputs["dy"].tobytes()).digest()
    assert digest == data["inputs_sha256"][i].tobytes(), f"{cfg.name}: regenerated inputs differ from TF's"
    for key in ("scale", "offset", "mean_in", "variance_in") if op == "forward" else ("scale",):
        stored = data[key][slice(*data["ch_off"][i : i + 2])]
        assert inputs[key].view(np.uint32).tobytes() == stored.tobytes(), f"{cfg.name}: {key} drifted"
    return inputs["x"], inputs["dy"]


@functools.lru_cache(maxsize=None)
def case(op, kind, i):
    return Case(op, kind, i)


@functools.lru_cache(maxsize=None)
def model(op, kind, i):
    """The float64 model's outputs for a case (computed once, shared by every ISA)."""
    c = case(op, kind, i)
    p = c.inputs
    kw = dict(epsilon=c.epsilon, data_format=c.data_format, is_training=c.is_training)
    if op == "forward":
        stats = dict(mean=p["mean_in"], variance=p["variance_in"]) if c.has_stats else {}
        return ref.forward(p["x"], p["scale"], p["offset"], **stats, exponential_avg_factor=c.factor, **kw)
    return ref.grad(p["dy"], p["x"], p["scale"], p["rs1_in"], p["rs2_in"], **kw)


# --- The checks of one case, each returning problem strings


def bits(a):
    return np.ascontiguousarray(a, F32).reshape(-1).view(np.uint32)


def same_bits(a, b):
    """Equal float32 arrays, any NaN equal to any NaN."""
    a, b = np.asarray(a, F32).reshape(-1), np.asarray(b, F32).reshape(-1)
    return a.shape == b.shape and not ((bits(a) != bits(b)) & ~(np.isnan(a) & np.isnan(b))).any()


def check_form(c, result):
    """Field names, dtypes and shapes of every output."""
    fields = FWD_OUT if c.op == "forward" else GRAD_OUT
    if tuple(getattr(result, "_fields", ())) != fields:
        return [f"result is {type(result).__name__} with fields {getattr(result, '_fields', None)}, not {fields}"]
    x_dtype = np.dtype(F32 if c.dtype == "float32" else low_dtype(c.dtype))
    expected = {fields[0]: (x_dtype, c.shape)}
    for k in fields[1:]:
        expected[k] = (np.dtype(F32), (c.channels,))
    if c.op == "forward":
        expected["reserve_space_3"] = (np.dtype(F32), ())
    else:
        expected["reserve_space_4"] = expected["reserve_space_5"] = (np.dtype(F32), (0,))
    problems = []
    for k, (dtype, shape) in expected.items():
        v = getattr(result, k)
        if not isinstance(v, np.ndarray) or v.dtype != dtype or v.shape != shape:
            got = f"{v.dtype} {v.shape}" if isinstance(v, np.ndarray) else type(v).__name__
            problems.append(f"{k}: {got}, expected {dtype} {shape}")
    if not problems and c.op == "forward" and float(result.reserve_space_3) != 0.0:
        problems.append(f"reserve_space_3 is {result.reserve_space_3!r}, TF's is 0.0")
    return problems


def accuracy_problem(c, key, actual, floor=FLOOR):
    """None or a message: NaN/inf where TF has them, relative error within max(1.5 x TF's, floor)."""
    tf, m = c.tf[key], model(c.op, c.kind, c.i)[key]
    a = np.asarray(actual).astype(np.float64)
    t = np.asarray(tf, np.float64)
    special = ~np.isfinite(t)
    same = np.where(np.isnan(t), np.isnan(a), a == t)
    if not same[special].all() or not np.isfinite(a[~special]).all():
        i = np.flatnonzero(~np.where(special, same, np.isfinite(a)).reshape(-1))[0]
        return f"{key}: fqcore {a.reshape(-1)[i]!r} at flat index {i}, TF {t.reshape(-1)[i]!r}"
    tf_err, fq_err = rel_err(t, m), rel_err(a, m)
    allowed = max(MARGIN * tf_err, floor)
    record(c, key, fq_err, tf_err, allowed)
    if fq_err > allowed:
        return (f"{key}: relative error {fq_err / ULP:.4g} ulp, allowed {allowed / ULP:.4g} "
                f"(TF's {tf_err / ULP:.4g}) against the float64 model")
    return None


def check_values(c, result):
    problems = []
    p = c.inputs
    low = c.dtype != "float32"
    first = "y" if c.op == "forward" else "x_backprop"
    floor = UNIT_ROUNDOFF[c.dtype] + FLOOR if low else FLOOR
    problems.append(accuracy_problem(c, first, getattr(result, first), floor))
    if c.op == "grad":
        for key in ("scale_backprop", "offset_backprop"):
            problems.append(accuracy_problem(c, key, getattr(result, key)))
    elif c.is_training:
        for key in ("batch_mean", "batch_variance"):
            problems.append(accuracy_problem(c, key, getattr(result, key)))
        for key in ("reserve_space_1", "reserve_space_2"):
            if c.rows == 0:  # mean and variance are 0/0 (TF leaves these uninitialised)
                if not np.isnan(getattr(result, key)).all():
                    problems.append(f"{key}: {getattr(result, key)} for empty x, expected NaN")
            else:
                problems.append(accuracy_problem(c, key, getattr(result, key)))
        if c.rows == 1 and c.epsilon > 0:  # the spec: n = 1 gives var 0 and y = offset
            offset = np.broadcast_to(gb.per_channel_view(p["offset"], c.shape, c.data_format), c.shape)
            y = np.asarray(result.y).astype(F32)
            if not same_bits(y, offset.astype(result.y.dtype).astype(F32)):
                problems.append(f"n = 1: y {y.reshape(-1)} is not offset {p['offset']}")
            if not same_bits(result.reserve_space_2, np.zeros(c.channels, F32)):
                problems.append(f"n = 1: reserve_space_2 {result.reserve_space_2} is not 0")
    else:
        copies = [("reserve_space_1", "mean_in"), ("reserve_space_2", "variance_in")]
        if c.rows:  # empty x: TF's batch statistics are NaN (test_empty_inference_batch_statistics)
            copies += [("batch_mean", "mean_in"), ("batch_variance", "variance_in")]
        for key, source in copies:
            if bits(getattr(result, key)).tobytes() != bits(p[source]).tobytes():
                problems.append(f"{key}: {getattr(result, key)} is not a copy of {source} {p[source]}")
    return [q for q in problems if q]


def check_rounded_once(c, result):
    """Low precision: the float32 path's results on the upcast inputs, the elementwise one rounded once."""
    if c.dtype == "float32":
        return []
    wide = c.run("float32")
    problems = []
    for key in result._fields:
        actual, expected = getattr(result, key), getattr(wide, key)
        if key in ("y", "x_backprop"):
            expected = expected.astype(low_dtype(c.dtype))
            if actual.dtype != expected.dtype or not same_bits(actual.astype(F32), expected.astype(F32)):
                problems.append(f"{key}: not fqcore's float32 result rounded once to {c.dtype}")
        elif not same_bits(actual, expected):
            problems.append(f"{key}: differs from fqcore's float32 result on the upcast inputs")
    return problems


def check_case(c):
    result = c.run()
    problems = check_form(c, result)
    if not problems:
        problems += check_values(c, result) + check_rounded_once(c, result)
    return problems


# --- Accuracy summary (printed by tools/bn_accuracy_report.py): per output kind, the worst ratio of
# fqcore's error to the allowed one, and TF's worst error.

SUMMARY = {}
TF_WORST = {}


def record(c, key, fq_err, tf_err, allowed):
    kind = f"{c.op} {key}" + (f" ({c.dtype})" if c.dtype != "float32" and key in ("y", "x_backprop") else "")
    kind += " [hard data]" if c.kind == "bulk" else ""
    entry = (fq_err / allowed, fq_err, tf_err, c.name)
    SUMMARY[kind] = max(SUMMARY.get(kind, entry), entry)
    TF_WORST[kind] = max(TF_WORST.get(kind, (tf_err, c.name)), (tf_err, c.name))


# --- Tests


def ids(op, kind):
    return [f"{op}:{name}" for name in load(op, kind)["name"]]


CASES = [(op, i) for op in ("forward", "grad") for i in range(len(load(op, "cases")["name"]))]
BULK = [(op, i) for op in ("forward", "grad") for i in range(len(load(op, "bulk")["name"]))]


@pytest.mark.parametrize("op,index", CASES, ids=ids("forward", "cases") + ids("grad", "cases"))
def test_case(op, index, isa):
    c = case(op, "cases", index)
    problems = check_case(c)
    assert not problems, f"{c.name} ({c.dtype} {c.data_format} {c.shape}) on {isa}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("op,index", BULK, ids=ids("forward", "bulk") + ids("grad", "bulk"))
def test_hard_data(op, index, isa):
    c = case(op, "bulk", index)
    problems = check_case(c)
    assert not problems, f"{c.name} {c.shape} on {isa}:\n  " + "\n  ".join(problems)


EMPTY_INFERENCE = [i for i, name in enumerate(load("forward", "cases")["name"])
                   if "-empty-" in name and "-infer-" in name and case("forward", "cases", i).channels]


@pytest.mark.parametrize("index", EMPTY_INFERENCE, ids=[ids("forward", "cases")[i] for i in EMPTY_INFERENCE])
def test_empty_inference_batch_statistics_are_copies(index):
    """TF returns NaN batch_mean/batch_variance for an empty x in inference too (its early return for
    empty inputs ignores is_training). fqcore keeps the spec's inference rule for every size: the
    batch statistics are copies of mean/variance, so an empty batch leaves running statistics as
    they were instead of poisoning them."""
    c = case("forward", "cases", index)
    assert np.isnan(c.tf["batch_mean"]).all() and np.isnan(c.tf["batch_variance"]).all()
    result = c.run()
    assert np.array_equal(result.batch_mean, c.inputs["mean_in"]), c.name
    assert np.array_equal(result.batch_variance, c.inputs["variance_in"]), c.name


# --- The yardstick itself, without fqcore: TF must agree with the float64 model to float32 rounding on
# ordinary data, else the criterion above compares fqcore with a wrong model and passes vacuously.

# TF's worst on the ordinary float32 cases is ~6 ulp (y) and ~230 ulp for one ill-conditioned channel
# sum (scale_backprop of a single channel whose terms nearly cancel); a wrong formula is off by >>1e3.
TF_SANITY = {"y": 64, "batch_mean": 16, "batch_variance": 16, "reserve_space_1": 16, "reserve_space_2": 16,
             "x_backprop": 64, "scale_backprop": 1024, "offset_backprop": 64}


@pytest.mark.parametrize("op,index", CASES, ids=ids("forward", "cases") + ids("grad", "cases"))
def test_tf_agrees_with_model(op, index):
    c = case(op, "cases", index)
    m = model(op, "cases", index)
    for key, tf in c.tf.items():
        if key.startswith("reserve_space") and (c.op == "forward" and not c.rs_defined):
            continue
        if c.rows == 0 and not c.is_training and key.startswith("batch_"):
            continue  # TF: NaN, the model: the copies (test_empty_inference_batch_statistics)
        t, mv = np.asarray(tf, np.float64), np.asarray(m[key], np.float64)
        assert t.shape == mv.shape, f"{key}: TF {t.shape}, model {mv.shape}"
        assert (np.isnan(t) == np.isnan(mv)).all() and (t[np.isinf(mv)] == mv[np.isinf(mv)]).all(), key
        if c.dtype != "float32" and key in ("y", "x_backprop"):
            bound = UNIT_ROUNDOFF[c.dtype] + TF_SANITY[key] * ULP
        else:
            bound = TF_SANITY[key] * ULP
        assert rel_err(t, mv) <= bound, f"{c.name} {key}: TF is {rel_err(t, mv) / ULP:.4g} ulp from the model"


def test_hard_data_is_hard_for_tf():
    """The bulk set's point: TF's float32 sums lose accuracy there (so the bar is TF's, not 4 ulp)."""
    worst = {}
    for op, i in BULK:
        c, m = case(op, "bulk", i), model(op, "bulk", i)
        for key, tf in c.tf.items():
            worst[key] = max(worst.get(key, 0), rel_err(tf, m[key]) / ULP)
    assert worst["y"] > 1e6 and worst["batch_variance"] > 1e8 and worst["batch_mean"] > 1e3, worst
