"""Hypothesis: fqcore equals the numpy model of the spec (tests/reference.py) on generated inputs."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fqcore
import reference
from helpers import assert_same_bits

floats32 = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)
finite32 = st.floats(-1e4, 1e4, width=32)
arrays = hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=40), elements=floats32)
num_bits = st.integers(2, 16)


def _sum_ok(actual, exact, products):
    """A float32 sum within a few float32 roundings of the float64 sum of the same products."""
    if np.isnan(exact):
        return np.isnan(actual)
    if np.isinf(exact):
        return actual == exact
    bound = 4 * np.finfo(np.float32).eps * np.sum(np.abs(products), dtype=np.float64) + np.finfo(np.float32).tiny
    return abs(float(actual) - exact) <= bound or np.isinf(actual)


@settings(max_examples=300, deadline=None)
@given(arrays, finite32, finite32, num_bits, st.booleans())
def test_vars_and_args_match_model(x, a, b, bits, narrow):
    lo, hi = (a, b) if a < b else (b, a + 1.0)
    assert_same_bits(fqcore.fake_quant_with_min_max_vars(x, np.float32(lo), np.float32(hi), bits, narrow),
                     reference.vars(x, lo, hi, bits, narrow))
    lo32, hi32 = float(np.float32(lo)), float(np.float32(hi))
    if reference.ftz(lo32) < reference.ftz(hi32):
        assert_same_bits(fqcore.fake_quant_with_min_max_args(x, lo32, hi32, bits, narrow),
                         reference.args(x, lo, hi, bits, narrow))
    else:  # denormal bounds flush to zero, and Args refuses a range that is then empty
        with pytest.raises(ValueError, match="min has to be smaller than max"):
            fqcore.fake_quant_with_min_max_args(x, lo32, hi32, bits, narrow)


@settings(max_examples=300, deadline=None)
@given(arrays, floats32, floats32, num_bits, st.booleans(), st.integers(0, 2**32 - 1))
def test_vars_gradient_matches_model(x, lo, hi, bits, narrow, seed):
    g = np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32)
    dx, dmin, dmax = fqcore.fake_quant_with_min_max_vars_gradient(g, x, np.float32(lo), np.float32(hi), bits, narrow)
    ref_dx, ref_min, ref_max = reference.vars_grad(g, x, lo, hi, bits, narrow)
    assert_same_bits(dx, ref_dx)
    assert _sum_ok(dmin, ref_min, g) and _sum_ok(dmax, ref_max, g), (dmin, ref_min, dmax, ref_max)


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=5, max_side=9), elements=floats32),
       num_bits, st.booleans(), st.integers(0, 2**32 - 1))
def test_per_channel_matches_model(x, bits, narrow, seed):
    rng = np.random.default_rng(seed)
    channels = x.shape[-1]
    lo = rng.uniform(-5, 1, channels).astype(np.float32)
    hi = (lo + rng.uniform(-0.5, 6, channels)).astype(np.float32)
    lo[rng.random(channels) < 0.2] = 0
    hi[lo == 0] = 0
    g = rng.standard_normal(x.shape).astype(np.float32)
    assert_same_bits(fqcore.fake_quant_with_min_max_vars_per_channel(x, lo, hi, bits, narrow),
                     reference.per_channel(x, lo, hi, bits, narrow))
    dx, dmin, dmax = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(g, x, lo, hi, bits, narrow)
    ref_dx, ref_min, ref_max = reference.per_channel_grad(g, x, lo, hi, bits, narrow)
    assert_same_bits(dx, ref_dx)
    for c in range(channels):
        assert _sum_ok(dmin[c], ref_min[c], g[..., c]) and _sum_ok(dmax[c], ref_max[c], g[..., c])
