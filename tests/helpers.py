"""Shared test helpers: bit-exact float32 comparison and the fixture that runs a test on every ISA."""

import numpy as np
import pytest

ALL_ISAS = ("scalar", "avx2", "avx512", "neon")


def mismatch_indices(actual, expected):
    """Flat indices where two float32 arrays differ: bit patterns for numbers (-0.0 != +0.0), NaN-ness for NaN."""
    a = np.ascontiguousarray(actual).reshape(-1)
    e = np.ascontiguousarray(expected).reshape(-1)
    a_nan, e_nan = np.isnan(a), np.isnan(e)
    return np.flatnonzero((a_nan != e_nan) | (~a_nan & (a.view(np.uint32) != e.view(np.uint32))))


def describe(value):
    """A float32 as hex float and decimal, e.g. -0x1.818182p-5 (-0.047058824); NaN and inf as words."""
    value = np.float32(value)
    if not np.isfinite(value):
        return str(value)
    mantissa, exponent = float(value).hex().split("p")
    return f"{mantissa.rstrip('0').rstrip('.')}p{exponent} ({str(value)})"


def assert_same_bits(actual, expected):
    """Asserts two float32 arrays (or scalars) have the same shape and bits; NaN positions must match, not payloads."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == np.float32, f"actual has dtype {actual.dtype}, expected float32"
    assert expected.dtype == np.float32, f"expected has dtype {expected.dtype}, expected float32"
    assert actual.shape == expected.shape, f"shape {actual.shape} != expected {expected.shape}"
    bad = mismatch_indices(actual, expected)
    if bad.size:
        a, e = actual.reshape(-1), expected.reshape(-1)
        lines = [f"{bad.size} of {actual.size} elements differ; first ones (flat index: actual vs expected):"]
        lines += [f"  [{i}] {describe(a[i])} vs {describe(e[i])}" for i in bad[:10]]
        raise AssertionError("\n".join(lines))


def placed(array, floats_past_line):
    """A copy of `array` (float32) starting `floats_past_line` floats past a 64-byte boundary."""
    buffer = np.empty(array.size + 32, np.float32)
    start = (-(buffer.ctypes.data // 4)) % 16 + floats_past_line
    copy = buffer[start:start + array.size].reshape(array.shape)
    copy[...] = array
    return copy


def run_on(isa_name, fn, threads=None):
    """fn() with `isa_name` active (and `threads` threads when given); the settings are restored."""
    import fqcore

    previous = fqcore.get_isa(), fqcore.get_num_threads()
    fqcore.set_isa(isa_name)
    if threads is not None:
        fqcore.set_num_threads(threads)
    try:
        return fn()
    finally:
        fqcore.set_isa(previous[0])
        fqcore.set_num_threads(previous[1])


@pytest.fixture(params=ALL_ISAS)
def isa(request):
    """Makes request.param the active fqcore ISA for the test (skipped when this machine lacks it), then restores."""
    import fqcore

    if request.param not in fqcore.available_isas():
        pytest.skip(f"ISA {request.param} not available here (available: {fqcore.available_isas()})")
    previous = fqcore.get_isa()
    fqcore.set_isa(request.param)
    yield request.param
    fqcore.set_isa(previous)
