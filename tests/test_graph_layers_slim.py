"""The TF-slim layers of fqcore.graph.layers: atrous conv2d / depthwise (SpaceToBatchND -> conv ->
BatchToSpaceND), separable_conv2d, linear layers, and batch_norm's fused / unfused graphs, forced
updates and center/scale options: op names and wiring as TF 1.15's slim builds them (what
contrib.quantize matches), numerics against plain-numpy references, and training through them."""
import numpy as np
import pytest

import fqcore.graph as G
from fqcore.graph import GraphKeys
from quantize_helpers import session

L = G.layers
F32 = np.float32
EPS = 1e-3


# -- numpy references (independent of fqcore) ----------------------------------------------------

def np_pad_for(x, kh, kw, rate, padding):
    """x zero-padded as TF pads a stride-1 conv with a dilated (k-1)*r+1 filter."""
    if padding == "VALID":
        return x
    th, tw = (kh - 1) * rate, (kw - 1) * rate
    return np.pad(x, ((0, 0), (th // 2, th - th // 2), (tw // 2, tw - tw // 2), (0, 0)))


def np_dilated_conv(x, w, rate, padding):
    """NHWC stride-1 dilated correlation, explicit loops over the output and the filter taps."""
    x, w = np.float64(x), np.float64(w)
    kh, kw, cin, cout = w.shape
    xp = np_pad_for(x, kh, kw, rate, padding)
    oh, ow = xp.shape[1] - (kh - 1) * rate, xp.shape[2] - (kw - 1) * rate
    out = np.zeros((x.shape[0], oh, ow, cout))
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    out[:, i, j, :] += xp[:, i + a * rate, j + b * rate, :] @ w[a, b]
    return out


def np_dilated_depthwise(x, w, rate, padding):
    """NHWC stride-1 dilated depthwise correlation; output channel c * m + q."""
    x, w = np.float64(x), np.float64(w)
    kh, kw, c, m = w.shape
    xp = np_pad_for(x, kh, kw, rate, padding)
    oh, ow = xp.shape[1] - (kh - 1) * rate, xp.shape[2] - (kw - 1) * rate
    out = np.zeros((x.shape[0], oh, ow, c, m))
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    out[:, i, j] += xp[:, i + a * rate, j + b * rate, :, None] * w[a, b]
    return out.reshape(x.shape[0], oh, ow, c * m)


def np_batch_norm(x, mean, var, gamma, beta, eps=EPS):
    return (np.float64(x) - mean) / np.sqrt(var + eps) * gamma + beta


def tf_paddings(size, k, r, padding):
    """TF's with_space_to_batch base paddings + required_space_to_batch_paddings for one dim."""
    total = (k - 1) * r if padding == "SAME" else 0
    start, end = total // 2, total - total // 2
    extra = (r - (size + start + end) % r) % r
    return [start, end + extra], [0, extra]


# -- helpers -------------------------------------------------------------------------------------

def rand(shape, seed, scale=1.0, shift=0.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale + shift).astype(F32)


def op(g, name):
    return g.get_operation_by_name(name)


def names(g):
    return {o.name for o in g.get_operations()}


def inputs(g, name):
    return [t.op.name for t in op(g, name).inputs]


def const(g, name):
    return np.asarray(op(g, name).get_attr("value"))


def variable_names(g):
    return {o.name for o in g.get_operations() if o.type == "VariableV2"}


# -- atrous conv2d and depthwise -----------------------------------------------------------------

# (padding, rate, (height, width), kernel): odd and even sizes, odd and even padding totals
ATROUS_CASES = [("SAME", 2, (7, 8), 3), ("SAME", 3, (9, 5), 2), ("SAME", 2, (6, 5), (2, 3)),
                ("VALID", 2, (8, 7), (3, 2)), ("VALID", 3, (10, 11), 3)]


def kernel_hw(kernel):
    return (kernel, kernel) if isinstance(kernel, int) else kernel


@pytest.mark.parametrize("padding,rate,hw,kernel", ATROUS_CASES)
def test_atrous_conv2d_builds_space_to_batch_around_a_valid_conv(padding, rate, hw, kernel):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [None, *hw, 2], name="x")
        y = L.conv2d(x, 3, kernel_size=kernel, dilation=rate, padding=padding, scope="c")
    s2b, conv, b2s = op(g, "c/Conv2D/SpaceToBatchND"), op(g, "c/Conv2D"), op(g, "c/Conv2D/BatchToSpaceND")
    assert (s2b.type, conv.type, b2s.type) == ("SpaceToBatchND", "Conv2D", "BatchToSpaceND")
    assert inputs(g, "c/Conv2D/SpaceToBatchND") == [
        "x", "c/Conv2D/SpaceToBatchND/block_shape", "c/Conv2D/SpaceToBatchND/paddings"]
    assert inputs(g, "c/Conv2D") == ["c/Conv2D/SpaceToBatchND", "c/weights/read"]
    assert inputs(g, "c/Conv2D/BatchToSpaceND") == [
        "c/Conv2D", "c/Conv2D/BatchToSpaceND/block_shape", "c/Conv2D/BatchToSpaceND/crops"]
    assert inputs(g, "c/BiasAdd") == ["c/Conv2D/BatchToSpaceND", "c/biases/read"]
    assert inputs(g, "c/Relu") == ["c/BiasAdd"]
    # the conv itself is a plain VALID stride-1 conv: no dilations attribute > 1
    assert conv.get_attr("padding") == "VALID"
    assert list(conv.get_attr("strides")) == [1, 1, 1, 1]
    assert list(conv.get_attr("dilations")) == [1, 1, 1, 1]
    pads, crops = zip(*(tf_paddings(size, k, rate, padding)
                        for size, k in zip(hw, kernel_hw(kernel))))
    np.testing.assert_array_equal(const(g, "c/Conv2D/SpaceToBatchND/block_shape"), [rate, rate])
    np.testing.assert_array_equal(const(g, "c/Conv2D/SpaceToBatchND/paddings"), pads)
    np.testing.assert_array_equal(const(g, "c/Conv2D/BatchToSpaceND/block_shape"), [rate, rate])
    np.testing.assert_array_equal(const(g, "c/Conv2D/BatchToSpaceND/crops"), crops)
    assert const(g, "c/Conv2D/SpaceToBatchND/paddings").dtype == np.int32
    expected_hw = hw if padding == "SAME" else tuple(
        size - (k - 1) * rate for size, k in zip(hw, kernel_hw(kernel)))
    assert y.shape == (None, *expected_hw, 3)


@pytest.mark.parametrize("padding,rate,hw,kernel", ATROUS_CASES)
def test_atrous_depthwise_is_named_as_nn_depthwise_conv2d(padding, rate, hw, kernel):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, *hw, 3], name="x")
        y = L.depthwise_conv2d(x, kernel, depth_multiplier=2, dilation=rate, padding=padding,
                               batch_norm=True, activation="relu6", scope="dw")
    assert op(g, "dw/depthwise").type == "DepthwiseConv2dNative"
    assert inputs(g, "dw/depthwise/SpaceToBatchND")[0] == "x"
    assert inputs(g, "dw/depthwise") == ["dw/depthwise/SpaceToBatchND", "dw/depthwise_weights/read"]
    assert inputs(g, "dw/depthwise/BatchToSpaceND")[0] == "dw/depthwise"
    assert inputs(g, "dw/BatchNorm/FusedBatchNormV3")[0] == "dw/depthwise/BatchToSpaceND"
    assert inputs(g, "dw/Relu6") == ["dw/BatchNorm/FusedBatchNormV3"]
    dw = op(g, "dw/depthwise")
    assert dw.get_attr("padding") == "VALID" and list(dw.get_attr("dilations")) == [1, 1, 1, 1]
    assert list(dw.get_attr("strides")) == [1, 1, 1, 1]
    assert "dw/DepthwiseConv2dNative" not in names(g)
    pads, crops = zip(*(tf_paddings(size, k, rate, padding)
                        for size, k in zip(hw, kernel_hw(kernel))))
    np.testing.assert_array_equal(const(g, "dw/depthwise/SpaceToBatchND/paddings"), pads)
    np.testing.assert_array_equal(const(g, "dw/depthwise/BatchToSpaceND/crops"), crops)
    assert y.shape[-1] == 6


def test_dilation_one_builds_what_it_always_built():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [1, 5, 5, 2], name="x")
        L.conv2d(x, 3, dilation=1, scope="c")
        L.depthwise_conv2d(x, dilation=1, scope="dw")
    assert not any(o.type in ("SpaceToBatchND", "BatchToSpaceND") for o in g.get_operations())
    assert inputs(g, "c/Conv2D") == ["x", "c/weights/read"]
    assert inputs(g, "c/BiasAdd")[0] == "c/Conv2D"
    assert inputs(g, "dw/DepthwiseConv2dNative") == ["x", "dw/depthwise_weights/read"]
    assert "dw/depthwise" not in names(g)


@pytest.mark.parametrize("padding,rate,hw,kernel", ATROUS_CASES)
def test_atrous_conv2d_and_depthwise_match_numpy_and_native_dilations(padding, rate, hw, kernel):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, *hw, 3], name="x")
        conv = L.conv2d(x, 4, kernel, dilation=rate, padding=padding, activation=None,
                        use_bias=False, scope="c")
        dw = L.depthwise_conv2d(x, kernel, depth_multiplier=2, dilation=rate, padding=padding,
                                activation=None, use_bias=False, scope="dw")
        wc = G.find_variable("c/weights")
        wd = G.find_variable("dw/depthwise_weights")
        native_conv = G.conv2d(x, wc.read, padding=padding, dilations=rate, name="native_conv")
        native_dw = G.depthwise_conv2d(x, wd.read, padding=padding, dilations=rate,
                                       name="native_dw")
    s = session(g)
    xv = rand((2, *hw, 3), 1)
    yc, yd, nc, nd = s.run([conv, dw, native_conv, native_dw], {x: xv})
    ref_c = np_dilated_conv(xv, s.variable_value("c/weights"), rate, padding)
    ref_d = np_dilated_depthwise(xv, s.variable_value("dw/depthwise_weights"), rate, padding)
    assert yc.shape == ref_c.shape and yd.shape == ref_d.shape
    np.testing.assert_allclose(yc, ref_c, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(yd, ref_d, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(yc, nc, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(yd, nd, rtol=1e-5, atol=1e-5)


def test_dilation_with_stride_or_unknown_spatial_dims_is_refused():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [1, 8, 8, 2], name="x")
        with pytest.raises(ValueError, match=r"conv2d: stride 2 with dilation .*stride 1"):
            L.conv2d(x, 3, stride=2, dilation=2, scope="c")
        with pytest.raises(ValueError, match=r"depthwise_conv2d: stride"):
            L.depthwise_conv2d(x, stride=(1, 2), dilation=2, scope="d")
        with pytest.raises(ValueError, match=r"separable_conv2d: stride"):
            L.separable_conv2d(x, 4, stride=2, dilation=3, scope="s")
        unknown = G.placeholder("float32", [1, None, 8, 2], name="unknown")
        with pytest.raises(ValueError, match=r"conv2d 'c2'.*known height and width.*None, 8, 2"):
            L.conv2d(unknown, 3, dilation=2, scope="c2")
        with pytest.raises(ValueError, match=r"depthwise_conv2d 'd2'.*known height"):
            L.depthwise_conv2d(unknown, dilation=2, scope="d2")
        with pytest.raises(ValueError, match=r"separable_conv2d 's2'.*known height"):
            L.separable_conv2d(unknown, 4, dilation=2, scope="s2")
        with pytest.raises(ValueError, match=r"dilation must be a positive int"):
            L.conv2d(x, 3, dilation=0, scope="c3")
        with pytest.raises(ValueError, match=r"VALID.*dilated kernel size \(9\)"):
            L.conv2d(x, 3, dilation=4, padding="VALID", scope="c4")


# -- separable_conv2d ----------------------------------------------------------------------------

def test_separable_conv2d_names_follow_slim():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 6, 6, 3], name="x")
        y = L.separable_conv2d(x, 5, depth_multiplier=2, scope="sep")
        z = L.separable_conv2d(x, None, depth_multiplier=2, stride=2, scope="dw_only")
    assert variable_names(g) == {"sep/depthwise_weights", "sep/pointwise_weights", "sep/biases",
                                 "dw_only/depthwise_weights", "dw_only/biases"}
    assert G.find_variable("sep/depthwise_weights", g).shape == (3, 3, 3, 2)
    assert G.find_variable("sep/pointwise_weights", g).shape == (1, 1, 6, 5)
    assert op(g, "sep/separable_conv2d/depthwise").type == "DepthwiseConv2dNative"
    assert inputs(g, "sep/separable_conv2d/depthwise") == ["x", "sep/depthwise_weights/read"]
    pointwise = op(g, "sep/separable_conv2d")
    assert pointwise.type == "Conv2D"
    assert inputs(g, "sep/separable_conv2d") == ["sep/separable_conv2d/depthwise",
                                                 "sep/pointwise_weights/read"]
    assert pointwise.get_attr("padding") == "VALID"
    assert list(pointwise.get_attr("strides")) == [1, 1, 1, 1]
    assert inputs(g, "sep/BiasAdd") == ["sep/separable_conv2d", "sep/biases/read"]
    assert inputs(g, "sep/Relu") == ["sep/BiasAdd"] and y.op.name == "sep/Relu"
    assert y.shape == (2, 6, 6, 5)
    assert op(g, "dw_only/depthwise").type == "DepthwiseConv2dNative"
    assert list(op(g, "dw_only/depthwise").get_attr("strides")) == [1, 2, 2, 1]
    assert inputs(g, "dw_only/BiasAdd") == ["dw_only/depthwise", "dw_only/biases/read"]
    assert z.shape == (2, 3, 3, 6)


def test_atrous_separable_conv2d_wraps_the_depthwise_part():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 7, 6, 3], name="x")
        L.separable_conv2d(x, 4, dilation=2, batch_norm=True, scope="sep")
        L.separable_conv2d(x, None, dilation=3, scope="dw_only")
    assert inputs(g, "sep/separable_conv2d/SpaceToBatchND")[0] == "x"
    assert inputs(g, "sep/separable_conv2d/depthwise") == [
        "sep/separable_conv2d/SpaceToBatchND", "sep/depthwise_weights/read"]
    assert inputs(g, "sep/separable_conv2d/BatchToSpaceND")[0] == "sep/separable_conv2d/depthwise"
    assert inputs(g, "sep/separable_conv2d") == ["sep/separable_conv2d/BatchToSpaceND",
                                                 "sep/pointwise_weights/read"]
    assert inputs(g, "sep/BatchNorm/FusedBatchNormV3")[0] == "sep/separable_conv2d"
    assert "sep/biases" not in names(g)
    assert inputs(g, "dw_only/depthwise/SpaceToBatchND")[0] == "x"
    assert inputs(g, "dw_only/depthwise")[0] == "dw_only/depthwise/SpaceToBatchND"
    assert inputs(g, "dw_only/depthwise/BatchToSpaceND")[0] == "dw_only/depthwise"
    assert inputs(g, "dw_only/BiasAdd")[0] == "dw_only/depthwise/BatchToSpaceND"
    np.testing.assert_array_equal(const(g, "dw_only/depthwise/SpaceToBatchND/paddings"),
                                  [tf_paddings(7, 3, 3, "SAME")[0], tf_paddings(6, 3, 3, "SAME")[0]])


@pytest.mark.parametrize("rate,padding", [(1, "SAME"), (2, "SAME"), (3, "VALID")])
def test_separable_conv2d_is_depthwise_then_pointwise(rate, padding):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 9, 8, 3], name="x")
        y = L.separable_conv2d(x, 4, depth_multiplier=2, dilation=rate, padding=padding,
                               activation=None, scope="sep")
        z = L.separable_conv2d(x, None, depth_multiplier=2, dilation=rate, padding=padding,
                               activation="relu", scope="dw_only")
    s = session(g)
    s.set_variable_value("sep/biases", rand(4, 9))
    s.set_variable_value("dw_only/biases", rand(6, 10))
    xv = rand((2, 9, 8, 3), 2)
    yv, zv = s.run([y, z], {x: xv})
    depthwise = np_dilated_depthwise(xv, s.variable_value("sep/depthwise_weights"), rate, padding)
    pointwise = np.float64(s.variable_value("sep/pointwise_weights"))[0, 0]
    ref = depthwise @ pointwise + s.variable_value("sep/biases")
    np.testing.assert_allclose(yv, ref, rtol=1e-5, atol=1e-5)
    ref_z = np.maximum(np_dilated_depthwise(xv, s.variable_value("dw_only/depthwise_weights"),
                                            rate, padding) + s.variable_value("dw_only/biases"), 0)
    np.testing.assert_allclose(zv, ref_z, rtol=1e-5, atol=1e-5)


# -- activation=None -----------------------------------------------------------------------------

def test_activation_none_gives_a_linear_layer_in_every_builder():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 5, 5, 3], name="x")
        flat = G.placeholder("float32", [2, 4], name="flat")
        outs = {
            "conv": L.conv2d(x, 2, activation=None, scope="conv"),
            "dw": L.depthwise_conv2d(x, activation=None, scope="dw"),
            "sep": L.separable_conv2d(x, 2, activation=None, scope="sep"),
            "sep_dw": L.separable_conv2d(x, None, activation=None, scope="sep_dw"),
            "dense": L.dense(flat, 3, activation=None, scope="dense"),
        }
        bn = L.conv2d(x, 2, activation=None, batch_norm={"fused": False}, scope="bn")
    for scope, y in outs.items():
        assert y.op.name == f"{scope}/BiasAdd", scope
        assert not y.consumers(), scope
    assert bn.op.name == "bn/BatchNorm/batchnorm_1/add_1"
    activation_types = {"Relu", "Relu6", "Sigmoid", "Tanh"}
    assert not [o.name for o in g.get_operations() if o.type in activation_types]
    s = session(g)
    xv, fv = rand((2, 5, 5, 3), 3), rand((2, 4), 4)
    # linear: f(2x) - 2 f(x) = -bias, with a nonzero bias
    s.set_variable_value("dense/biases", np.array([1.0, -2.0, 0.5], F32))
    a, b = s.run(outs["dense"], {flat: fv}), s.run(outs["dense"], {flat: 2 * fv})
    np.testing.assert_allclose(b - 2 * a, -np.array([[1.0, -2.0, 0.5]] * 2), rtol=1e-5, atol=1e-5)
    c1, c2 = s.run(outs["conv"], {x: xv}), s.run(outs["conv"], {x: -xv})
    np.testing.assert_allclose(c1 + c2, 0, atol=1e-5)   # zero bias: odd function, negatives kept
    assert (c1 < 0).any()


# -- batch_norm: unfused -------------------------------------------------------------------------

def bn_graph(shape=(4, 3, 3, 2), **kwargs):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", list(shape), name="x")
        with g.name_scope("layer"):
            y = L.batch_norm(x, **kwargs)
    return g, x, y


@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize("scale", [True, False])
def test_unfused_batch_norm_builds_slims_graph(center, scale):
    g, x, y = bn_graph(fused=False, center=center, scale=scale)
    bn = "layer/BatchNorm"
    assert variable_names(g) == {f"{bn}/moving_mean", f"{bn}/moving_variance"} | (
        {f"{bn}/gamma"} if scale else set()) | ({f"{bn}/beta"} if center else set())
    assert not any(o.type == "FusedBatchNormV3" for o in g.get_operations())
    # moments
    assert inputs(g, f"{bn}/moments/mean") == ["x", f"{bn}/moments/mean/reduction_indices"]
    np.testing.assert_array_equal(const(g, f"{bn}/moments/mean/reduction_indices"), [0, 1, 2])
    assert op(g, f"{bn}/moments/mean").get_attr("keep_dims") is True
    assert inputs(g, f"{bn}/moments/StopGradient") == [f"{bn}/moments/mean"]
    assert op(g, f"{bn}/moments/StopGradient").type == "StopGradient"
    assert inputs(g, f"{bn}/moments/SquaredDifference") == ["x", f"{bn}/moments/StopGradient"]
    assert inputs(g, f"{bn}/moments/variance")[0] == f"{bn}/moments/SquaredDifference"
    assert op(g, f"{bn}/moments/variance").get_attr("keep_dims") is True
    assert inputs(g, f"{bn}/moments/Squeeze") == [f"{bn}/moments/mean"]
    assert inputs(g, f"{bn}/moments/Squeeze_1") == [f"{bn}/moments/variance"]
    assert op(g, f"{bn}/moments/Squeeze").outputs[0].shape == (2,)
    # moving averages (the biased batch variance)
    for suffix, var, stat in (("", "moving_mean", "Squeeze"), ("_1", "moving_variance", "Squeeze_1")):
        avg = f"{bn}/AssignMovingAvg{suffix}"
        assert op(g, avg).type == "AssignSub"
        assert inputs(g, avg) == [f"{bn}/{var}", f"{avg}/mul"]
        assert inputs(g, f"{avg}/mul") == [f"{avg}/sub", f"{avg}/decay"]
        assert inputs(g, f"{avg}/sub") == [f"{bn}/{var}/read", f"{bn}/moments/{stat}"]
        np.testing.assert_allclose(const(g, f"{avg}/decay"), F32(0.1))
    assert [u.name for u in g.get_collection(GraphKeys.UPDATE_OPS)] == [
        f"{bn}/AssignMovingAvg", f"{bn}/AssignMovingAvg_1"]
    # nn.batch_normalization's chain
    b = f"{bn}/batchnorm_1"
    assert inputs(g, f"{b}/add") == [f"{bn}/moments/Squeeze_1", f"{b}/add/y"]
    np.testing.assert_allclose(const(g, f"{b}/add/y"), F32(EPS))
    assert inputs(g, f"{b}/Rsqrt") == [f"{b}/add"]
    if scale:
        assert inputs(g, f"{b}/mul") == [f"{b}/Rsqrt", f"{bn}/gamma/read"]
        inv, x_inv, mean_inv = f"{b}/mul", f"{b}/mul_1", f"{b}/mul_2"
    else:
        inv, x_inv, mean_inv = f"{b}/Rsqrt", f"{b}/mul", f"{b}/mul_1"
    assert f"{b}/mul_2" in names(g) if scale else f"{b}/mul_2" not in names(g)
    assert inputs(g, x_inv) == ["x", inv]
    if center:
        assert inputs(g, mean_inv) == [f"{bn}/moments/Squeeze", inv]
        assert inputs(g, f"{b}/sub") == [f"{bn}/beta/read", mean_inv]
        assert inputs(g, f"{b}/add_1") == [x_inv, f"{b}/sub"]
        assert f"{b}/Neg" not in names(g)
    else:   # TF's `-mean * inv` is (-mean) * inv
        assert inputs(g, f"{b}/Neg") == [f"{bn}/moments/Squeeze"]
        assert op(g, f"{b}/Neg").type == "Neg"
        assert inputs(g, mean_inv) == [f"{b}/Neg", inv]
        assert inputs(g, f"{b}/add_1") == [x_inv, mean_inv]
        assert f"{b}/sub" not in names(g)
    assert y.op.name == f"{b}/add_1" and y.op.type == "AddV2" and y.shape == (4, 3, 3, 2)
    # contrib.quantize's _HasScaling: exactly one Mul reads Rsqrt iff there is a gamma
    rsqrt_muls = [o for o in op(g, f"{b}/Rsqrt").outputs[0].consumers() if o.type == "Mul"]
    assert (len(rsqrt_muls) == 1) == scale


def test_unfused_batch_norm_inference_reads_the_moving_statistics():
    g, x, y = bn_graph(fused=False, is_training=False)
    bn = "layer/BatchNorm"
    assert not [o.name for o in g.get_operations() if "moments" in o.name or "AssignMovingAvg" in o.name]
    assert not g.get_collection(GraphKeys.UPDATE_OPS)
    assert inputs(g, f"{bn}/batchnorm_1/add")[0] == f"{bn}/moving_variance/read"
    assert inputs(g, f"{bn}/batchnorm_1/mul_2")[0] == f"{bn}/moving_mean/read"
    assert y.op.name == f"{bn}/batchnorm_1/add_1"


@pytest.mark.parametrize("fused", [True, False])
def test_forced_updates_make_the_output_depend_on_them(fused):
    g, x, y = bn_graph(fused=fused, updates_collections=None, momentum=0.8)
    bn = "layer/BatchNorm"
    assert not g.get_collection(GraphKeys.UPDATE_OPS)
    updates = [f"{bn}/AssignMovingAvg", f"{bn}/AssignMovingAvg_1"]
    if fused:
        identity = op(g, f"{bn}/Identity")
        assert identity.type == "Identity" and y.op is identity
        assert inputs(g, f"{bn}/Identity") == [f"{bn}/FusedBatchNormV3"]
        assert [c.name for c in identity.control_inputs] == updates
    else:
        # slim's forced path: identities of mean and variance, then nn.batch_normalization in
        # scope `batchnorm` (not the core layer's `batchnorm_1`)
        for name, stat in (("Identity", "Squeeze"), ("Identity_1", "Squeeze_1")):
            assert inputs(g, f"{bn}/{name}") == [f"{bn}/moments/{stat}"]
            assert [c.name for c in op(g, f"{bn}/{name}").control_inputs] == updates
        assert inputs(g, f"{bn}/batchnorm/add")[0] == f"{bn}/Identity_1"
        assert inputs(g, f"{bn}/batchnorm/mul_2")[0] == f"{bn}/Identity"
        assert y.op.name == f"{bn}/batchnorm/add_1"
        assert not any("batchnorm_1" in n for n in names(g))
    # running only the output updates the moving statistics
    s = session(g)
    xv = rand((4, 3, 3, 2), 5, 2.0, 1.0)
    s.run(y, {x: xv})
    x64 = np.float64(xv)
    mean = x64.mean(axis=(0, 1, 2))
    var = x64.var(axis=(0, 1, 2), ddof=1 if fused else 0)
    np.testing.assert_allclose(s.variable_value(f"{bn}/moving_mean"), 0.2 * mean, rtol=1e-5)
    np.testing.assert_allclose(s.variable_value(f"{bn}/moving_variance"), 0.8 + 0.2 * var, rtol=1e-5)


def test_updates_go_to_a_named_collection():
    g, x, y = bn_graph(fused=False, updates_collections="my_updates")
    assert not g.get_collection(GraphKeys.UPDATE_OPS)
    assert [u.name for u in g.get_collection("my_updates")] == [
        "layer/BatchNorm/AssignMovingAvg", "layer/BatchNorm/AssignMovingAvg_1"]
    assert y.op.name == "layer/BatchNorm/batchnorm/add_1"   # slim's own path, not the core layer
    g, x, y = bn_graph(fused=True, updates_collections="my_updates")
    assert len(g.get_collection("my_updates")) == 2 and not g.get_collection(GraphKeys.UPDATE_OPS)
    assert y.op.type == "FusedBatchNormV3"
    with pytest.raises(ValueError, match="updates_collections"):
        bn_graph(updates_collections=3)


@pytest.mark.parametrize("center,scale,beta_name,gamma_name", [
    (False, True, "Const", None), (True, False, None, "Const"), (False, False, "Const", "Const_1")])
def test_fused_without_center_or_scale_uses_constants(center, scale, beta_name, gamma_name):
    g, x, y = bn_graph(center=center, scale=scale)
    bn = "layer/BatchNorm"
    assert (f"{bn}/beta" in variable_names(g)) == center
    assert (f"{bn}/gamma" in variable_names(g)) == scale
    fused_inputs = inputs(g, f"{bn}/FusedBatchNormV3")
    if beta_name:
        assert fused_inputs[2] == f"{bn}/{beta_name}"
        np.testing.assert_array_equal(const(g, f"{bn}/{beta_name}"), np.zeros(2, F32))
    else:
        assert fused_inputs[2] == f"{bn}/beta/read"
    if gamma_name:
        assert fused_inputs[1] == f"{bn}/{gamma_name}"
        np.testing.assert_array_equal(const(g, f"{bn}/{gamma_name}"), np.ones(2, F32))
    else:
        assert fused_inputs[1] == f"{bn}/gamma/read"
    trainable = {v.op.name for v in G.trainable_variables(g)}
    assert trainable == ({f"{bn}/gamma"} if scale else set()) | ({f"{bn}/beta"} if center else set())
    s = session(g)
    xv = rand((4, 3, 3, 2), 6, 1.5, -0.5)
    if scale:
        s.set_variable_value(f"{bn}/gamma", np.array([2.0, 0.5], F32))
    if center:
        s.set_variable_value(f"{bn}/beta", np.array([0.25, -1.0], F32))
    x64 = np.float64(xv)
    ref = np_batch_norm(xv, x64.mean(axis=(0, 1, 2)), x64.var(axis=(0, 1, 2)),
                        [2.0, 0.5] if scale else 1.0, [0.25, -1.0] if center else 0.0)
    np.testing.assert_allclose(s.run(y, {x: xv}), ref, rtol=1e-4, atol=1e-5)


# -- batch_norm numerics -------------------------------------------------------------------------

GAMMA, BETA = np.array([1.5, 0.5, -0.75], F32), np.array([0.2, -0.3, 1.0], F32)


def two_norms(is_training, shape=(5, 3, 4, 3), center=True, scale=True):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", list(shape), name="x")
        fused = L.batch_norm(x, momentum=0.7, is_training=is_training, center=center, scale=scale,
                             scope="fused")
        unfused = L.batch_norm(x, momentum=0.7, is_training=is_training, center=center,
                               scale=scale, fused=False, scope="unfused")
    s = session(g)
    for scope in ("fused", "unfused"):
        if scale:
            s.set_variable_value(f"{scope}/gamma", GAMMA)
        if center:
            s.set_variable_value(f"{scope}/beta", BETA)
    return g, s, x, fused, unfused


@pytest.mark.parametrize("center,scale", [(True, True), (False, True), (True, False),
                                          (False, False)])
def test_unfused_training_matches_numpy_and_fused(center, scale):
    g, s, x, fused, unfused = two_norms(True, center=center, scale=scale)
    xv = rand((5, 3, 4, 3), 7, 3.0, 2.0)
    x64 = np.float64(xv)
    mean, var = x64.mean(axis=(0, 1, 2)), x64.var(axis=(0, 1, 2))
    ref = np_batch_norm(xv, mean, var, GAMMA if scale else 1.0, BETA if center else 0.0)
    updates = g.get_collection(GraphKeys.UPDATE_OPS)
    yf, yu = s.run([fused, unfused] + updates, {x: xv})[:2]
    np.testing.assert_allclose(yu, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(yu, yf, rtol=1e-5, atol=1e-5)
    # one run of the updates: moving -= (moving - stat) * 0.3; unfused uses the biased variance
    np.testing.assert_allclose(s.variable_value("unfused/moving_mean"), 0.3 * mean, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(s.variable_value("unfused/moving_variance"), 0.7 + 0.3 * var,
                               rtol=1e-5)
    np.testing.assert_allclose(s.variable_value("fused/moving_variance"),
                               0.7 + 0.3 * x64.var(axis=(0, 1, 2), ddof=1), rtol=1e-5)


@pytest.mark.parametrize("center,scale", [(True, True), (False, False)])
def test_unfused_inference_matches_numpy_and_fused(center, scale):
    g, s, x, fused, unfused = two_norms(False, center=center, scale=scale)
    moving_mean, moving_var = np.array([0.5, -1.0, 2.0], F32), np.array([4.0, 0.25, 1.5], F32)
    for scope in ("fused", "unfused"):
        s.set_variable_value(f"{scope}/moving_mean", moving_mean)
        s.set_variable_value(f"{scope}/moving_variance", moving_var)
    xv = rand((5, 3, 4, 3), 8, 2.0)
    yf, yu = s.run([fused, unfused], {x: xv})
    ref = np_batch_norm(xv, moving_mean, moving_var, GAMMA if scale else 1.0,
                        BETA if center else 0.0)
    np.testing.assert_allclose(yu, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(yu, yf, rtol=1e-5, atol=1e-5)
    assert not g.get_collection(GraphKeys.UPDATE_OPS)


def test_dense_with_unfused_batch_norm_normalizes_the_matmul_output_directly():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [6, 4], name="x")
        y = L.dense(x, 3, activation="relu", batch_norm={"fused": False}, scope="fc")
        z = L.dense(x, 3, batch_norm=True, scope="fc_fused")
    assert not any(o.type == "Reshape" for o in g.get_operations() if o.name.startswith("fc/"))
    assert inputs(g, "fc/BatchNorm/moments/mean")[0] == "fc/MatMul"
    np.testing.assert_array_equal(const(g, "fc/BatchNorm/moments/mean/reduction_indices"), [0])
    assert inputs(g, "fc/BatchNorm/batchnorm_1/mul_1")[0] == "fc/MatMul"
    assert inputs(g, "fc/Relu") == ["fc/BatchNorm/batchnorm_1/add_1"]
    assert "fc/biases" not in names(g)
    assert inputs(g, "fc_fused/BatchNorm/FusedBatchNormV3")[0] == "fc_fused/Reshape"  # unchanged
    s = session(g)
    xv = rand((6, 4), 9)
    yv, zv = s.run([y, z], {x: xv})
    h = np.float64(xv) @ s.variable_value("fc/weights")
    ref = np.maximum(np_batch_norm(h, h.mean(axis=0), h.var(axis=0), 1.0, 0.0), 0)
    np.testing.assert_allclose(yv, ref, rtol=1e-5, atol=1e-5)
    assert zv.shape == (6, 3)


def test_batch_norm_validation():
    g = G.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match="rank >= 2"):
            L.batch_norm(G.placeholder("float32", [3], name="v"), fused=False)
        with pytest.raises(ValueError, match="known channel count"):
            L.batch_norm(G.placeholder("float32", [2, None], name="u"), fused=False)


# -- training through the new layers ---------------------------------------------------------

def test_training_an_atrous_separable_block_with_unfused_batch_norm_lowers_the_loss():
    rng = np.random.default_rng(11)
    xv = rng.standard_normal((8, 9, 9, 2)).astype(F32)
    labels = rng.integers(0, 3, 8).astype(np.int32)
    g = G.Graph()
    g.seed = 3
    with g.as_default():
        x = G.placeholder("float32", [8, 9, 9, 2], name="x")
        y = G.placeholder("int32", [8], name="labels")
        h = L.separable_conv2d(x, 6, depth_multiplier=2, dilation=2, activation="relu6",
                               batch_norm={"fused": False}, scope="sep")
        h = L.conv2d(h, 4, dilation=3, batch_norm={"fused": False, "center": False},
                     scope="atrous")
        logits = L.dense(L.global_avg_pool(h), 3, scope="logits")
        loss = L.sparse_softmax_cross_entropy(y, logits)
        train = G.GradientDescentOptimizer(0.2).minimize(loss)
        updates = g.get_collection(GraphKeys.UPDATE_OPS)
    assert len(updates) == 4
    s = session(g)
    feed = {x: xv, y: labels}
    start = {n: s.variable_value(n) for n in ("sep/depthwise_weights", "sep/pointwise_weights",
                                              "sep/BatchNorm/gamma", "atrous/weights")}
    losses = [float(s.run([train, updates, loss], feed)[2]) for _ in range(5)]
    final = float(s.run(loss, feed))
    assert final < losses[0] and all(b < a for a, b in zip(losses, losses[1:] + [final])), losses
    for name, value in start.items():   # the gradient reached every weight
        assert not np.allclose(s.variable_value(name), value), name
    assert not np.allclose(s.variable_value("sep/BatchNorm/moving_mean"), 0)
