"""The graph's float32 Pow against TensorFlow's bits (tests/data/pow_scalar.npz, made by
tools/gen_golden_pow.py): TF's CPU Pow computes a scalar with the C library's powf, and so does
fqcore's for every element. contrib's debiased moving averages raise 1 - decay to the step count
every training step; numpy's float32 power missed TF's last bit for about one step in five on an
AVX-512 machine."""
from pathlib import Path

import numpy as np
import pytest

import fqcore.graph as G
from fqcore.graph import build
from fqcore import _kernels
from fqcore.graph.op_defs.math import power

DATA = Path(__file__).parent / "data" / "pow_scalar.npz"


@pytest.fixture(scope="module")
def golden():
    with np.load(DATA) as data:
        return (data["x"].view(np.float32), data["y"].view(np.float32),
                data["z"].view(np.float32))


def _same_bits(ours, theirs):
    """Equal bit patterns, NaN payloads aside."""
    ours, theirs = np.asarray(ours, np.float32), np.asarray(theirs, np.float32)
    both_nan = np.isnan(ours) & np.isnan(theirs)
    return np.flatnonzero(~both_nan & (ours.view(np.uint32) != theirs.view(np.uint32)))


def test_pow_op_gives_tf_bits(golden):
    x, y, z = golden
    g = G.Graph()
    with g.as_default():
        a = G.placeholder("float32", [None], name="a")
        b = G.placeholder("float32", [None], name="b")
        p = build.pow(a, b)
    ours = G.Session(g).run(p, {a: x, b: y})
    wrong = _same_bits(ours, z)
    assert wrong.size == 0, [(x[i], y[i], ours[i], z[i]) for i in wrong[:5]]


def test_pow_op_on_scalars_as_contrib_runs_it(golden):
    x, y, z = golden
    g = G.Graph()
    with g.as_default():
        a = G.placeholder("float32", [], name="a")
        b = G.placeholder("float32", [], name="b")
        p = build.pow(a, b)
    session = G.Session(g)
    picks = range(0, x.size, 37)
    ours = [session.run(p, {a: x[i], b: y[i]}) for i in picks]
    assert all(np.ndim(v) == 0 for v in ours)
    assert _same_bits(ours, z[list(picks)]).size == 0


def test_power_broadcasts_and_keeps_other_dtypes():
    base = np.float32(0.999)
    steps = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    out = power(base, steps)
    assert out.shape == (2, 3) and out.dtype == np.float32
    one_by_one = [power(base, s) for s in steps.ravel()]
    assert _same_bits(out.ravel(), one_by_one).size == 0
    assert power(np.float64(2.0), np.float64(0.5)).dtype == np.float64
    assert power(np.int32(3), np.int32(2)) == 9


def test_kernel_checks_lengths():
    with pytest.raises(ValueError, match="same length"):
        _kernels.pow(np.ones(3, np.float32), np.ones(2, np.float32), np.empty(3, np.float32))
