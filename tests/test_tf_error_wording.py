"""Messages users search for carry TensorFlow's exact words first, then fqcore's detail, from the
public functions and from a session.run of the fqcore.graph op."""
import re

import numpy as np
import pytest

import fqcore
import fqcore.graph as G

F32 = np.float32
RANK_1 = "must be at least rank 1"


def ones(*shape):
    return np.ones(shape, F32)


def tf_words(words):
    return re.escape(words)


# -- FakeQuantWithMinMaxVarsPerChannel (and its gradient) on a 0-d input ---------------------------

@pytest.mark.parametrize("call", [
    lambda x: fqcore.fake_quant_with_min_max_vars_per_channel(x, ones(1), ones(1)),
    lambda x: fqcore.fake_quant_with_min_max_vars_per_channel_gradient(x, x, ones(1), ones(1)),
])
@pytest.mark.parametrize("x", [np.array(0.5, F32), np.float32(0.5), 0.5])
def test_per_channel_rank_0_input(call, x):
    with pytest.raises(ValueError, match=tf_words(RANK_1)) as info:
        call(x)
    message = str(info.value)
    assert message.startswith("inputs must be at least rank 1"), message
    assert "got shape ()" in message  # fqcore's detail: which array, its shape, after TF's words


def test_per_channel_rank_0_input_in_a_session():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [], name="x")
        y = G.fake_quant_with_min_max_vars_per_channel(x, G.constant(-ones(1)), G.constant(ones(1)))
    with pytest.raises(ValueError, match=tf_words("inputs " + RANK_1 + ", got shape ()")) as info:
        G.Session(g).run(y, {x: np.array(0.5, F32)})
    assert "FakeQuantWithMinMaxVarsPerChannel" in str(info.value)


# -- FusedBatchNormV3: the running statistics ------------------------------------------------------

INFERENCE = "When is_training=false, {} must have the same number of elements as the channels of x, got {} and 4"
AVERAGING = "When exponential_avg_factor != 1, {} must have the same number of elements as the channels of x, got {} and 4"


def forward(**kwargs):
    return fqcore.fused_batch_norm(ones(2, 3, 3, 4), ones(4), ones(4), **kwargs)


@pytest.mark.parametrize("kwargs, words", [
    (dict(is_training=False), INFERENCE),
    (dict(is_training=False, exponential_avg_factor=0.5), INFERENCE),  # TF: inference's words win
    (dict(exponential_avg_factor=0.5), AVERAGING),
    (dict(exponential_avg_factor=0.0), AVERAGING),
])
@pytest.mark.parametrize("name", ["mean", "variance"])
@pytest.mark.parametrize("length", [0, 3, 5])
def test_statistics_of_the_wrong_length(kwargs, words, name, length):
    given = {"mean": ones(4), "variance": ones(4), name: ones(length)}
    with pytest.raises(ValueError, match="^" + tf_words(words.format(name, length)) + "$"):
        forward(**given, **kwargs)


@pytest.mark.parametrize("kwargs, words", [(dict(is_training=False), INFERENCE),
                                           (dict(exponential_avg_factor=0.25), AVERAGING)])
@pytest.mark.parametrize("name", ["mean", "variance"])
def test_missing_statistics_count_as_empty_like_tf_and_say_they_are_required(kwargs, words, name):
    given = {"mean": ones(4), "variance": ones(4), name: None}
    with pytest.raises(ValueError, match="^" + tf_words(words.format(name, 0))) as info:
        forward(**given, **kwargs)
    assert f"{name} is required: expected 4 values, one per channel, got None" in str(info.value)


def test_mean_is_checked_before_variance_as_in_tf():
    with pytest.raises(ValueError, match=tf_words(INFERENCE.format("mean", 2))):
        forward(mean=ones(2), variance=ones(3), is_training=False)


def test_channels_first_names_the_channels_of_x():
    x = ones(2, 4, 3, 3)
    with pytest.raises(ValueError, match=tf_words(INFERENCE.format("variance", 3))):
        fqcore.fused_batch_norm(x, ones(4), ones(4), ones(4), ones(3), data_format="NCHW",
                                is_training=False)


def _bn_graph(mean, variance, **kwargs):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 3, 3, 4], name="x")
        outputs = G.fused_batch_norm(x, G.constant(ones(4)), G.constant(np.zeros(4, F32)),
                                     G.constant(mean), G.constant(variance), **kwargs)
    return g, x, outputs


@pytest.mark.parametrize("kwargs, words", [(dict(is_training=False), INFERENCE),
                                           (dict(exponential_avg_factor=0.5), AVERAGING)])
@pytest.mark.parametrize("length", [0, 3])
def test_statistics_of_the_wrong_length_in_a_session(kwargs, words, length):
    g, x, outputs = _bn_graph(ones(4), ones(length), **kwargs)
    with pytest.raises(ValueError, match=tf_words(words.format("variance", length))) as info:
        G.Session(g).run(outputs[0], {x: ones(2, 3, 3, 4)})
    assert "FusedBatchNormV3" in str(info.value)


def test_statistics_are_not_read_in_training_with_factor_1_in_a_session():
    g, x, outputs = _bn_graph(np.zeros(0, F32), np.zeros(0, F32))
    assert G.Session(g).run(outputs[0], {x: ones(2, 3, 3, 4)}).shape == (2, 3, 3, 4)


# -- FusedBatchNormGradV3: x and y_backprop ---------------------------------------------------------

@pytest.mark.parametrize("x_shape, dy_shape, tf_x, tf_dy", [
    ((2, 3, 3, 4), (2, 3, 4, 4), "[2,3,3,4]", "[2,3,4,4]"),
    ((2, 3, 3, 4), (2, 3, 3, 4, 1), "[2,3,3,4]", "[2,3,3,4,1]"),
    ((1, 2, 2, 2, 3), (1, 2, 2, 2, 2), "[1,2,2,2,3]", "[1,2,2,2,2]"),
])
def test_x_and_y_backprop_shapes(x_shape, dy_shape, tf_x, tf_dy):
    words = f"x and y_backprop must have same shape, but x has shape {tf_x} and y_backprop has shape {tf_dy}"
    x = ones(*x_shape)
    with pytest.raises(ValueError, match="^" + tf_words(words)) as info:
        fqcore.fused_batch_norm_grad(ones(*dy_shape), x, ones(x_shape[-1]), ones(x_shape[-1]),
                                     ones(x_shape[-1]), data_format="NHWC" if len(x_shape) == 4 else "NDHWC")
    assert f"got x {x_shape} and y_backprop {dy_shape}" in str(info.value)  # fqcore's detail, after


def test_x_and_y_backprop_shapes_are_checked_before_the_kernel_runs_for_any_dtype():
    for dtype in (np.float32, np.float16):
        x = np.ones((2, 3, 3, 4), dtype)
        with pytest.raises(ValueError, match=tf_words("x and y_backprop must have same shape")):
            fqcore.fused_batch_norm_grad(np.ones((2, 3, 3, 5), dtype), x, ones(4), ones(4), ones(4))
