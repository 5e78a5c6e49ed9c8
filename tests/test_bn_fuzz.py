"""Batch-norm fuzzing: random shapes, formats, element types, modes and values never crash; bad
arguments are Python exceptions; finite inputs give finite, sane results."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fqcore

EXPECTED_ERRORS = (ValueError, TypeError)
FORMATS = ["NHWC", "NCHW", "NDHWC", "NCDHW", "bogus"]
element_dtypes = st.sampled_from([np.float32, np.float32, np.float16, np.float64, np.int32])
shapes = hnp.array_shapes(min_dims=3, max_dims=6, min_side=0, max_side=9)
values = st.one_of(st.floats(-1e6, 1e6, width=32), st.sampled_from([np.nan, np.inf, -np.inf, 1e-40, -0.0]))


@st.composite
def element_arrays(draw, shape=None):
    dtype = np.dtype(draw(element_dtypes))
    shape = draw(shapes) if shape is None else shape
    data = draw(hnp.arrays(np.float64, shape, elements=values))
    with np.errstate(all="ignore"):
        array = data.astype(dtype)
    if array.ndim >= 2 and draw(st.booleans()):
        array = array.swapaxes(0, -1)  # a non-contiguous view
    return array


@st.composite
def vectors(draw, length):
    if draw(st.integers(0, 9)) == 0:  # sometimes a wrong length or None
        return draw(st.one_of(st.none(), hnp.arrays(np.float32, st.integers(0, 12), elements=values)))
    return draw(hnp.arrays(np.float32, length, elements=values))


def _channels(x, data_format):
    if x.ndim < 2:
        return 1
    return x.shape[-1] if data_format.endswith("C") else x.shape[1]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_no_crash(data):
    x = data.draw(element_arrays())
    data_format = data.draw(st.sampled_from(FORMATS))
    channels = _channels(x, data_format)
    scale, offset, mean, variance = (data.draw(vectors(channels)) for _ in range(4))
    dy = x if data.draw(st.booleans()) else data.draw(element_arrays(shape=x.shape))
    kwargs = dict(data_format=data_format, is_training=data.draw(st.booleans()),
                  epsilon=data.draw(st.floats(0, 1)))
    factor = data.draw(st.sampled_from([1.0, 0.5, 0.0]))
    try:
        result = fqcore.fused_batch_norm(x, scale, offset, mean, variance,
                                         exponential_avg_factor=factor, **kwargs)
        assert result.y.shape == x.shape and result.y.dtype == x.dtype
        assert result.batch_mean.shape == (channels,)
    except EXPECTED_ERRORS:
        pass
    try:
        result = fqcore.fused_batch_norm_grad(dy, x, scale, mean, variance, **kwargs)
        assert result.x_backprop.shape == x.shape and result.x_backprop.dtype == x.dtype
        assert result.reserve_space_4.shape == (0,)
    except EXPECTED_ERRORS:
        pass


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_finite_inputs_give_normalized_outputs(data):
    """A float64 computation of the same formulas, loosely: catches gross errors (a wrong channel,
    a lost element) on random shapes; the golden tests check the last bits."""
    data_format = data.draw(st.sampled_from(FORMATS[:4]))
    rank = 4 if data_format in ("NHWC", "NCHW") else 5
    shape = data.draw(hnp.array_shapes(min_dims=rank, max_dims=rank, min_side=1, max_side=7))
    # Denormals are excluded: fqcore, as TF's CPU threads, treats them as zero.
    x = data.draw(hnp.arrays(np.float32, shape, elements=st.floats(-100, 100, width=32, allow_subnormal=False)))
    channel_axis = rank - 1 if data_format.endswith("C") else 1
    channels = shape[channel_axis]
    scale = data.draw(hnp.arrays(np.float32, channels, elements=st.floats(-2, 2, width=32)))
    offset = data.draw(hnp.arrays(np.float32, channels, elements=st.floats(-2, 2, width=32)))
    result = fqcore.fused_batch_norm(x, scale, offset, epsilon=1e-3, data_format=data_format)
    xc = np.moveaxis(x.astype(np.float64), channel_axis, -1).reshape(-1, channels)
    mean, var = xc.mean(0), xc.var(0)
    y = (xc - mean) / np.sqrt(var + np.float32(1e-3)) * scale + offset
    # Statistics below float32's smallest normal come out as zero, as TF's flush-to-zero threads
    # round them (a mean of FLT_MIN and 0 is a denormal).
    tiny = np.finfo(np.float32).tiny
    mean, var = np.where(np.abs(mean) < tiny, 0.0, mean), np.where(var < tiny, 0.0, var)
    actual = np.moveaxis(result.y, channel_axis, -1).reshape(-1, channels)
    assert np.allclose(result.reserve_space_1, mean, rtol=1e-6, atol=1e-6 * np.abs(xc).max())
    assert np.allclose(result.reserve_space_2, var, rtol=1e-5, atol=1e-6 * np.abs(xc).max() ** 2)
    assert np.allclose(actual, y, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(y).max()))
