"""Batch norm refuses bad arguments with an exception that names the argument and the value."""
import numpy as np
import pytest

import fqcore

F32 = np.float32


def ones(*shape):
    return np.ones(shape, F32)


def forward(x=None, scale=None, offset=None, **kwargs):
    x = ones(2, 3, 3, 4) if x is None else x
    return fqcore.fused_batch_norm(x, ones(4) if scale is None else scale,
                                   ones(4) if offset is None else offset, **kwargs)


def grad(dy=None, x=None, scale=None, rs1=None, rs2=None, **kwargs):
    x = ones(2, 3, 3, 4) if x is None else x
    return fqcore.fused_batch_norm_grad(x if dy is None else dy, x, ones(4) if scale is None else scale,
                                        ones(4) if rs1 is None else rs1, ones(4) if rs2 is None else rs2,
                                        **kwargs)


@pytest.mark.parametrize("shape", [(4,), (2, 4), (2, 3, 4), (1, 2, 3, 4, 5, 6)])
def test_rank_other_than_4_or_5(shape):
    with pytest.raises(ValueError, match=r"input must be 4 or 5-dimensional, got shape \(" + ", ".join(map(str, shape))):
        forward(x=ones(*shape))
    with pytest.raises(ValueError, match="input must be 4 or 5-dimensional"):
        grad(x=ones(*shape))


def test_rank_must_match_data_format():
    with pytest.raises(ValueError, match=r"data_format NDHWC needs a 5-dimensional input, got shape \(2, 3, 3, 4\)"):
        forward(data_format="NDHWC")
    with pytest.raises(ValueError, match="data_format NCHW needs a 4-dimensional input"):
        forward(x=ones(1, 4, 2, 2, 2), data_format="NCHW")


@pytest.mark.parametrize("bad", ["NWHC", "nhwc", "", None, 4, ["NHWC"], {"NHWC": 1}])
def test_unknown_data_format_lists_the_allowed_ones(bad):
    with pytest.raises(ValueError, match="data_format must be one of NHWC, NCHW, NDHWC, NCDHW"):
        forward(data_format=bad)
    with pytest.raises(ValueError, match="data_format must be one of"):
        grad(data_format=bad)


@pytest.mark.parametrize("name", ["scale", "offset"])
def test_per_channel_length_must_match_channels(name):
    with pytest.raises(ValueError, match=f"{name} must have the same number of elements as the channels of x, got 2 and 4"):
        forward(**{name: ones(2)})


def test_per_channel_values_must_be_vectors():
    with pytest.raises(ValueError, match=r"scale must have the same number of elements as the channels of x, got \(2, 2\) and 4"):
        forward(scale=ones(2, 2))
    with pytest.raises(ValueError, match="channels of x, got 1 and 3"):
        forward(x=ones(1, 3, 2, 2), scale=ones(1), offset=ones(3), data_format="NCHW")


def test_channels_first_counts_channels_on_axis_1():
    result = forward(x=ones(2, 4, 3, 3), data_format="NCHW")
    assert result.batch_mean.shape == (4,)
    with pytest.raises(ValueError, match="got 4 and 3"):
        forward(x=ones(2, 3, 3, 4), data_format="NCHW")


@pytest.mark.parametrize("kwargs", [dict(exponential_avg_factor=0.5), dict(is_training=False)])
@pytest.mark.parametrize("missing", ["mean", "variance"])
def test_statistics_required_for_running_averages_and_inference(kwargs, missing):
    given = {"mean": ones(4), "variance": ones(4)}
    del given[missing]
    with pytest.raises(ValueError, match=f"{missing} is required: expected 4 values, one per channel"):
        forward(**given, **kwargs)


def test_statistics_ignored_when_factor_is_one():
    assert forward(mean=None, variance=None).y.shape == (2, 3, 3, 4)
    # Ignored means not read, so not checked either (TF checks them only where it uses them).
    reference = forward(mean=None, variance=None)
    ignored = forward(mean=ones(2), variance=np.zeros(7))
    np.testing.assert_array_equal(ignored.y, reference.y)
    # The factor is a float32 attribute: one that rounds to 1 is 1; one just below 1 is not.
    np.testing.assert_array_equal(forward(exponential_avg_factor=1 + 2.0 ** -30).y, reference.y)
    with pytest.raises(ValueError, match="mean is required"):
        forward(exponential_avg_factor=1 - 2.0 ** -20)


def test_attribute_ints_too_large_for_a_float_are_named():
    for name in ("epsilon", "exponential_avg_factor"):
        with pytest.raises(ValueError, match=f"{name} is an int too large for a float"):
            forward(**{name: 10**400})


def test_statistics_of_wrong_length():
    with pytest.raises(ValueError, match="When is_training=false, mean must have the same number of elements as the channels of x, got 3 and 4"):
        forward(mean=ones(3), variance=ones(4), is_training=False)
    with pytest.raises(ValueError, match="reserve_space_2 must have the same number of elements as the channels of x, got 5 and 4"):
        grad(rs2=ones(5))


def test_x_and_y_backprop_shapes_must_match():
    with pytest.raises(ValueError, match=r"x and y_backprop must have same shape, but x has shape \[2,3,3,4\] and y_backprop has shape "
                                         r"\[2,3,4,4\]: got x \(2, 3, 3, 4\) and y_backprop \(2, 3, 4, 4\)"):
        grad(dy=ones(2, 3, 4, 4))


def test_x_and_y_backprop_dtypes_must_match():
    with pytest.raises(TypeError, match="x and y_backprop must have the same dtype, got float32 and float16"):
        grad(dy=np.ones((2, 3, 3, 4), np.float16))


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint16, np.complex64, ">f4", bool])
def test_unsupported_element_types(dtype):
    x = np.ones((2, 3, 3, 4), dtype)
    with pytest.raises(TypeError, match=f"x must be a float32, float16 or bfloat16 array .*got dtype {np.dtype(dtype)}"):
        forward(x=x)
    with pytest.raises(TypeError, match="y_backprop must be a float32, float16 or bfloat16 array"):
        grad(dy=x)


def test_non_arrays():
    with pytest.raises(TypeError, match="x must be a float32, float16 or bfloat16 array, got str"):
        forward(x="abc")
    with pytest.raises(TypeError, match="x must be a float32, float16 or bfloat16 array, got NoneType"):
        fqcore.fused_batch_norm(None, ones(4), ones(4))
    with pytest.raises(TypeError, match="scale must be a float32 array"):
        forward(scale="abc")


def test_nested_lists_are_float32_arrays():
    x = ones(1, 2, 2, 3).tolist()
    assert fqcore.fused_batch_norm(x, [1, 1, 1], [0, 0, 0]).y.dtype == F32


@pytest.mark.parametrize("name,value", [("epsilon", "1e-3"), ("epsilon", None), ("exponential_avg_factor", [1.0]),
                                        ("is_training", "yes"), ("is_training", 1)])
def test_attribute_types(name, value):
    with pytest.raises(TypeError, match=name):
        forward(**{name: value})


def test_per_channel_float64_is_refused_rather_than_cast():
    with pytest.raises(TypeError, match="scale must be a float32 array"):
        forward(scale=np.ones(4))


@pytest.mark.parametrize("data_format, shape", [("NHWC", (3, 5, 4, 6)), ("NCHW", (3, 6, 5, 4)),
                                                ("NDHWC", (2, 3, 2, 4, 6))])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_normalize_false_gives_the_statistics_without_y(data_format, shape, dtype):
    x = (np.random.default_rng(1).standard_normal(shape) * 3 + 5).astype(dtype)
    scale, offset = ones(6) * 2, ones(6)
    full = fqcore.fused_batch_norm(x, scale, offset, data_format=data_format)
    stats = fqcore.fused_batch_norm(x, scale, offset, data_format=data_format, normalize=False)
    assert stats.y is None
    for a, b in zip(stats[1:], full[1:]):
        np.testing.assert_array_equal(a, b)


def test_normalize_is_checked():
    with pytest.raises(ValueError, match="normalize=False needs is_training=True"):
        forward(mean=ones(4), variance=ones(4), is_training=False, normalize=False)
    with pytest.raises((TypeError, ValueError), match="normalize"):
        forward(normalize="no")


def test_the_bindings_check_every_array_against_the_shape():
    """The batch-norm bindings take arrays as they are and check each against the shape they are
    given: an internal caller's mistake is a ValueError that names the array, never a read or a
    write past its end."""
    from fqcore import _kernels
    x, v, none = np.ones((2, 3), np.float32), np.ones(3, np.float32), np.empty(0, np.float32)

    def forward(x=x, scale=v, mean=none, y=None, saved=None):
        stats = [np.empty(3, np.float32) for _ in range(3)] + [
            np.empty(3, np.float32) if saved is None else saved]
        _kernels.bn_forward_training(x, 0, True, 2, 3, 1, scale, v, 1e-3, 1.0, mean, none, y,
                                     *stats)
        return stats

    np.testing.assert_array_equal(forward()[0], [1, 1, 1])  # the running statistics may be empty
    misaligned = np.frombuffer(bytearray(25), np.float32, 6, 1).reshape(2, 3)
    read_only = np.zeros(3, np.float32)
    read_only.setflags(write=False)
    for call, words in [
            (lambda: forward(x=np.ones(5, np.float32)), "x must have 6 elements, got 5"),
            (lambda: forward(x=x.astype(np.float64)), "x must be a C-contiguous, aligned array of "
                                                      "4-byte elements"),
            (lambda: forward(x=misaligned), "x must be a C-contiguous, aligned array"),
            (lambda: forward(x=np.ones((3, 2), np.float32).T), "x must be a C-contiguous"),
            (lambda: forward(scale=v[:2]), "scale must have 3 elements, got 2"),
            (lambda: forward(scale=none), "scale must have 3 elements, got 0"),
            (lambda: forward(scale=v.astype(np.int32)), "scale must be float32"),
            (lambda: forward(scale=v.astype(">f4")), "scale must be a C-contiguous, aligned array "
                                                     "of 4-byte elements in native byte order"),
            (lambda: forward(mean=v[:2]), "mean must have 3 elements, got 2"),
            (lambda: forward(y=np.empty((2, 3), np.float32)[:, :2]), "y must be a C-contiguous"),
            (lambda: forward(saved=read_only), "saved_variance must be a C-contiguous, aligned, "
                                               "writeable array"),
            (lambda: _kernels.bn_grad(x, x, 0, True, 2, 3, 1, v, v, v, 1e-3, True,
                                      np.empty(7, np.float32), np.empty(3, np.float32),
                                      np.empty(3, np.float32)),
             "x_backprop must have 6 elements, got 7"),
            (lambda: _kernels.bn_forward_inference(x, 0, True, 2, 3, 1, v, v, none, v, 1e-3,
                                                   np.empty_like(x)),
             "mean must have 3 elements, got 0"),
            (lambda: _kernels.bn_forward_inference(x.tolist(), 0, True, 2, 3, 1, v, v, v, v, 1e-3,
                                                   np.empty_like(x)),
             "x must be an array, got list")]:
        with pytest.raises(ValueError, match=words):
            call()
