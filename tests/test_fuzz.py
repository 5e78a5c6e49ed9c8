"""Fuzzing: random shapes, dtypes, layouts, ranges and values never crash; errors are Python exceptions."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fqcore

EXPECTED_ERRORS = (ValueError, TypeError)
dtypes = st.sampled_from([np.float32, np.float32, np.float32, np.float64, np.float16, np.int32, ">f4"])
any_float = st.floats(allow_nan=True, allow_infinity=True, width=64)
shapes = hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=7)


@st.composite
def arrays(draw):
    dtype = np.dtype(draw(dtypes))
    shape = draw(shapes)
    values = draw(hnp.arrays(np.float64, shape, elements=st.one_of(st.floats(-1e39, 1e39), st.sampled_from([np.nan, np.inf, -np.inf, 1e-40]))))
    with np.errstate(all="ignore"):
        array = values.astype(dtype)
    if array.ndim >= 2 and draw(st.booleans()):
        array = array.swapaxes(0, -1)  # a non-contiguous view
    if array.ndim >= 1 and array.shape[0] > 1 and draw(st.booleans()):
        array = array[::2]
    return array


def _call(fn, *args, **kwargs):
    try:
        result = fn(*args, **kwargs)
    except EXPECTED_ERRORS:
        return None
    return result


@settings(max_examples=400, deadline=None)
@given(arrays(), arrays(), any_float, any_float, st.integers(-2, 20), st.booleans(),
       st.one_of(st.none(), arrays()), st.one_of(st.none(), arrays()))
def test_no_crash(x, g, lo, hi, bits, narrow, cmin, cmax):
    r = _call(fqcore.fake_quant_with_min_max_args, x, lo, hi, bits, narrow)
    if r is not None:
        assert r.shape == x.shape and r.dtype == np.float32
    _call(fqcore.fake_quant_with_min_max_args_gradient, g, x, lo, hi, bits, narrow)
    _call(fqcore.fake_quant_with_min_max_vars, x, lo, hi, bits, narrow)
    r = _call(fqcore.fake_quant_with_min_max_vars_gradient, g, x, lo, hi, bits, narrow)
    if r is not None:
        assert r.backprops_wrt_input.shape == x.shape
    _call(fqcore.fake_quant_with_min_max_vars_per_channel, x, cmin, cmax, bits, narrow)
    r = _call(fqcore.fake_quant_with_min_max_vars_per_channel_gradient, g, x, cmin, cmax, bits, narrow)
    if r is not None:
        assert r.backprop_wrt_min.shape == (x.shape[-1],)
