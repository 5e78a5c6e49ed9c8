"""fqcore against TensorFlow 2.21's golden outputs in tests/data/ (format: tests/data/README.md), on every ISA."""

import functools
import hashlib
from pathlib import Path

import numpy as np
import pytest

import fqcore
import golden_inputs
from helpers import describe, mismatch_indices

DATA = Path(__file__).resolve().parent / "data"
FAMILIES = ("args", "vars", "per_channel")


@functools.lru_cache(maxsize=None)
def load(kind, family):
    with np.load(DATA / f"{kind}_{family}.npz") as npz:
        return {key: npz[key] for key in npz.files}


class Case:
    """One stored case or bulk config; array accessors return float32 views of the stored bits."""

    def __init__(self, data, i):
        self.data, self.i = data, i
        self.name = str(data["name"][i])
        self.num_bits = int(data["num_bits"][i])
        self.narrow_range = bool(data["narrow_range"][i])
        self.shape = tuple(int(s) for s in data["shape"][i, : data["ndim"][i]])
        self.elems = slice(*data["elem_off"][i : i + 2])
        self.channels = slice(*data["mm_off"][i : i + 2])
        self.min = self.per_channel("min")
        self.max = self.per_channel("max")

    def elementwise(self, key):
        return self.data[key][self.elems].view(np.float32).reshape(self.shape)

    def per_channel(self, key):
        return self.data[key][self.channels].view(np.float32)


def run_fqcore(family, case, x, g):
    """fqcore's forward output, dx, and (not for Args) dmin and dmax."""
    attrs = dict(num_bits=case.num_bits, narrow_range=case.narrow_range)
    if family == "args":
        bounds = dict(min=float(case.min[0]), max=float(case.max[0]))
        y = fqcore.fake_quant_with_min_max_args(x, **bounds, **attrs)
        dx = fqcore.fake_quant_with_min_max_args_gradient(g, x, **bounds, **attrs)
        return y, dx, None, None
    if family == "vars":
        # 0-d float32 bounds carry -0.0 and denormals exactly.
        bounds = dict(min=case.min.reshape(()).copy(), max=case.max.reshape(()).copy())
        y = fqcore.fake_quant_with_min_max_vars(x, **bounds, **attrs)
        grads = fqcore.fake_quant_with_min_max_vars_gradient(g, x, **bounds, **attrs)
    else:
        bounds = dict(min=case.min.copy(), max=case.max.copy())
        y = fqcore.fake_quant_with_min_max_vars_per_channel(x, **bounds, **attrs)
        grads = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(g, x, **bounds, **attrs)
    return y, grads.backprops_wrt_input, grads.backprop_wrt_min, grads.backprop_wrt_max


def elementwise_problem(op, actual, expected, x, g):
    """None, or what differs from TF, with the inputs at the first mismatches."""
    actual = np.asarray(actual)
    if actual.dtype != np.float32 or actual.shape != expected.shape:
        return f"{op}: got {actual.dtype} {actual.shape}, TF gives float32 {expected.shape}"
    bad = mismatch_indices(actual, expected)
    if not bad.size:
        return None
    a, e, xs, gs = (v.reshape(-1) for v in (actual, expected, x, g))
    lines = [f"{op}: {bad.size} of {actual.size} elements differ from TF"]
    lines += [
        f"    [{i}] x={describe(xs[i])} g={describe(gs[i])}: fqcore {describe(a[i])}, TF {describe(e[i])}"
        for i in bad[:5]
    ]
    return "\n".join(lines)


def reduction_problem(op, actual, tf_sums, ref, magnitude, expected_shape):
    """None, or how fqcore's sum is less accurate than TF's against the float64 sum.

    TF's sum order depends on its thread pool, so its last bits are not a contract; fqcore must be
    NaN/inf exactly where TF is, and otherwise no further from the float64 sum than TF, give or
    take one float32 rounding of the sum of the magnitudes.
    """
    actual = np.asarray(actual)
    if actual.dtype != np.float32 or actual.shape != expected_shape:
        return f"{op}: got {actual.dtype} {actual.shape}, TF gives float32 {expected_shape}"
    actual = actual.reshape(-1)
    lines = []
    for c, (a, t, r, m) in enumerate(zip(actual.astype(np.float64), tf_sums.astype(np.float64), ref, magnitude)):
        if np.isnan(t):
            ok = np.isnan(a)
        elif np.isinf(t):
            ok = a == t
        else:
            ok = np.isfinite(a) and abs(a - r) <= abs(t - r) + 2.0**-24 * m
        if not ok:
            lines.append(f"    channel {c}: fqcore {describe(a)}, TF {describe(t)}, float64 sum {r!r}")
    return f"{op}: less accurate than TF\n" + "\n".join(lines[:5]) if lines else None


def check(family, case, x, g, y_expected, dx_expected):
    """All problems of one case: forward, dx and (not for Args) both sums."""
    y, dx, dmin, dmax = run_fqcore(family, case, x, g)
    problems = [
        elementwise_problem("forward", y, y_expected, x, g),
        elementwise_problem("gradient backprops_wrt_input", dx, dx_expected, x, g),
    ]
    if family != "args":
        data, channels = case.data, case.channels
        shape = () if family == "vars" else (channels.stop - channels.start,)
        for key, actual in (("dmin", dmin), ("dmax", dmax)):
            op = "gradient backprop_wrt_" + key[1:]
            tf_sums = data[key][channels].view(np.float32)
            problems.append(reduction_problem(op, actual, tf_sums, data[key + "_ref"][channels],
                                              data[key + "_abs"][channels], shape))
    return [p for p in problems if p]


# --- Explicit cases: special values, bounds and ties, degenerate ranges, shapes, the spec vectors.

EXPLICIT = [(family, i) for family in FAMILIES for i in range(len(load("cases", family)["name"]))]


@pytest.mark.parametrize(
    "family,index", EXPLICIT, ids=[f"{f}:{load('cases', f)['name'][i]}" for f, i in EXPLICIT]
)
def test_case(family, index, isa):
    case = Case(load("cases", family), index)
    x, g = case.elementwise("x"), case.elementwise("g")
    x_before, g_before = x.copy(), g.copy()
    problems = check(family, case, x, g, case.elementwise("y"), case.elementwise("dx"))
    assert not problems, f"{family} case {case.name} on {isa}:\n" + "\n".join(problems)
    assert x.tobytes() == x_before.tobytes() and g.tobytes() == g_before.tobytes(), "inputs were modified"


# --- Bulk: >10**6 boundary-heavy elements per op, inputs regenerated from seeds by golden_inputs.


@functools.lru_cache(maxsize=None)
def bulk_inputs(family):
    """Regenerated (x, g) per config, checked against the recorded settings and input digests."""
    data = load("bulk", family)
    configs = golden_inputs.bulk_configs(family)
    assert [c.name for c in configs] == list(data["name"]), "golden_inputs.bulk_configs drifted from the data"
    inputs = []
    for i, cfg in enumerate(configs):
        case = Case(data, i)
        assert (cfg.seed, cfg.num_bits, cfg.narrow_range, cfg.shape) == (
            data["seed"][i], case.num_bits, case.narrow_range, case.shape
        ), f"settings of {cfg.name} drifted"
        assert cfg.min.tobytes() == case.min.tobytes() and cfg.max.tobytes() == case.max.tobytes()
        x, g = golden_inputs.bulk_inputs(cfg)
        digest = hashlib.sha256(x.tobytes() + g.tobytes()).digest()
        assert digest == data["inputs_sha256"][i].tobytes(), f"regenerated inputs of {cfg.name} differ from TF's"
        inputs.append((x, g))
    return inputs


@pytest.mark.parametrize("family", FAMILIES)
def test_bulk(family, isa):
    data = load("bulk", family)
    failures = []
    for i, (x, g) in enumerate(bulk_inputs(family)):
        case = Case(data, i)
        tables = slice(*data["y_table_off"][i : i + 2])
        y = golden_inputs.decode_y(data["y_table"][tables], data["y_residual"][case.elems], x)
        dx = golden_inputs.decode_dx(data["dx_code"][case.elems], g.reshape(-1).view(np.uint32))
        expected = (e.view(np.float32).reshape(case.shape) for e in (y, dx))
        problems = check(family, case, x, g, *expected)
        if problems:
            failures.append(f"  {case.name}:\n" + "\n".join("    " + p for p in problems))
    total = len(data["name"])
    assert not failures, f"{len(failures)} of {total} {family} bulk configs differ on {isa}:\n" + "\n".join(
        failures[:10]
    )
