"""Parity of the reference interpreter with LiteRT: each op alone, in many configurations, written
with tflite_format.write and run by LiteRT's reference kernels (OpResolverType.BUILTIN_REF); the
interpreter's rounding="tflite_reference" must equal them bit for bit. CONV_2D and
FULLY_CONNECTED are also compared, in rounding="float32_half_even", with the default resolver
(XNNPACK)."""
import itertools

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")
pytest.importorskip("flatbuffers")

from fqcore.deploy import tflite_format  # noqa: E402
from fqcore.deploy.interpreter import Interpreter  # noqa: E402
from fqcore.deploy.kernels.integer import output_size  # noqa: E402
from fqcore.deploy.model import QUANTIZED_RANGES, Model, Op, Quantization, Tensor  # noqa: E402
from fqcore.deploy.runtimes import run_litert  # noqa: E402

ACTIVATIONS = ("NONE", "RELU", "RELU6")
# Zero points at both ends of each range and one inside.
ZERO_POINTS = {"int8": (-128, 127, 5), "uint8": (0, 255, 131)}
# Weights: int8 per channel (zero point 0), int8 per tensor, uint8 per tensor (asymmetric).
WEIGHTS = (("int8", True), ("int8", False), ("uint8", False))


def _q(scale, zero_point):
    return Quantization([scale], [zero_point])


def _ints(rng, dtype, shape):
    lo, hi = QUANTIZED_RANGES[dtype]
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def _model(tensors, kind, inputs, options, graph_inputs=("x",)):
    tensors = {t.name: t for t in tensors}
    return Model(tensors, [Op(kind, list(inputs), ["y"], options, name=kind.lower())],
                 list(graph_inputs), ["y"])


def _run_both(model, feeds, rounding="tflite_reference", resolver="reference"):
    ours = Interpreter(model, rounding).run(feeds)["y"]
    theirs = run_litert(tflite_format.write(model), [feeds[n] for n in model.inputs],
                        resolver=resolver)[0]
    return ours, theirs


def _assert_same(model, feeds):
    ours, theirs = _run_both(model, feeds)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    different = ours != theirs if ours.dtype.kind != "f" else ours.view(np.int32) != theirs.view(
        np.int32)
    assert not different.any(), (
        f"{np.count_nonzero(different)} of {ours.size} outputs differ; first at "
        f"{np.argwhere(different)[0].tolist()}: ours {ours[different][0]}, LiteRT's "
        f"{theirs[different][0]}")


# -- layers ------------------------------------------------------------------------------------
def _layer(kind, weights, x_shape, w_shape, zp_in, seed, out_scale=1.0):
    """A one-layer model's input, weights (random, per-channel scales spread over a decade) and
    bias; and an output scale that leaves a part of the outputs saturated, times out_scale."""
    dtype, per_channel = weights
    rng = np.random.default_rng(seed)
    axis = 3 if kind == "DEPTHWISE_CONV_2D" else 0
    channels = w_shape[axis]
    s_in = np.float32(rng.uniform(0.005, 0.05))
    if per_channel:
        s_w = rng.uniform(0.001, 0.01, channels).astype(np.float32)
        w_q = Quantization(s_w, np.zeros(channels), axis)
    else:
        s_w = np.float32(rng.uniform(0.001, 0.01))
        w_zp = 0 if dtype == "int8" else int(rng.integers(1, 255))
        w_q = _q(s_w, w_zp)
    depth = int(np.prod(w_shape)) // channels
    # About the spread of a random accumulation: a third of the outputs or so saturate.
    s_out = np.float32(s_in * np.mean(s_w) * 100 * np.sqrt(depth) / 60 * out_scale)
    bias_scale = (np.float64(s_in) * np.atleast_1d(s_w).astype(np.float64)).astype(np.float32)
    tensors = [Tensor("x", x_shape, dtype, _q(s_in, zp_in)),
               Tensor("w", w_shape, dtype, w_q, _ints(rng, dtype, w_shape)),
               Tensor("b", (channels,), "int32",
                      Quantization(bias_scale, np.zeros(bias_scale.size), 0),
                      rng.integers(-20000, 20000, channels).astype(np.int32))]
    return tensors, s_out, rng


def _window_out(x_shape, kh, kw, options):
    oh = output_size(options["padding"], x_shape[1], kh, options["stride_h"],
                     options.get("dilation_h", 1))
    ow = output_size(options["padding"], x_shape[2], kw, options["stride_w"],
                     options.get("dilation_w", 1))
    return oh, ow


# (input H, W, C), kernel (KH, KW), stride, padding, dilation
CONV_GEOMETRIES = [((7, 5, 3), (3, 3), 1, "SAME", 1), ((7, 5, 3), (1, 1), 2, "VALID", 1),
                   ((7, 5, 2), (5, 3), 2, "SAME", 1), ((8, 8, 4), (3, 3), 1, "SAME", 2),
                   ((7, 5, 3), (3, 3), 2, "VALID", 1), ((6, 6, 8), (3, 3), 2, "SAME", 1),
                   ((9, 7, 1), (5, 3), 1, "VALID", (2, 1))]


def _conv_cases():
    cases = []
    for i, (weights, geometry, activation) in enumerate(
            itertools.product(WEIGHTS, CONV_GEOMETRIES, ACTIVATIONS)):
        zps = ZERO_POINTS[weights[0]]
        cases.append((weights, geometry, activation, zps[i % 3], zps[(i // 3 + 1) % 3], i))
    return cases


def _conv_model(weights, geometry, activation, zp_in, zp_out, seed, kind, out_per_in=None,
                out_scale=1.0):
    (h, w, c), (kh, kw), stride, padding, dilation = geometry
    dh, dw = dilation if isinstance(dilation, tuple) else (dilation, dilation)
    options = dict(padding=padding, stride_h=stride, stride_w=stride, dilation_h=dh,
                   dilation_w=dw, activation=activation)
    if kind == "CONV_2D":
        out_c = 6
        w_shape = (out_c, kh, kw, c)
    else:
        options["depth_multiplier"] = out_per_in
        out_c = c * out_per_in
        w_shape = (1, kh, kw, out_c)
    tensors, s_out, rng = _layer(kind, weights, (-1, h, w, c), w_shape, zp_in, seed, out_scale)
    oh, ow = _window_out((None, h, w), kh, kw, options)
    tensors.append(Tensor("y", (-1, oh, ow, out_c), weights[0], _q(s_out, zp_out)))
    model = _model(tensors, kind, ["x", "w", "b"], options)
    return model, {"x": _ints(rng, weights[0], (6, h, w, c))}


@pytest.mark.parametrize("weights, geometry, activation, zp_in, zp_out, seed", _conv_cases())
def test_conv_2d(weights, geometry, activation, zp_in, zp_out, seed):
    _assert_same(*_conv_model(weights, geometry, activation, zp_in, zp_out, seed, "CONV_2D"))


@pytest.mark.parametrize("multiplier", [1, 2])
@pytest.mark.parametrize("weights, geometry, activation, zp_in, zp_out, seed", _conv_cases())
def test_depthwise_conv_2d(weights, geometry, activation, zp_in, zp_out, seed, multiplier):
    _assert_same(*_conv_model(weights, geometry, activation, zp_in, zp_out, seed,
                              "DEPTHWISE_CONV_2D", multiplier))


def _fc_model(weights, depth, units, activation, zp_in, zp_out, seed, out_scale=1.0):
    tensors, s_out, rng = _layer("FULLY_CONNECTED", weights, (-1, depth), (units, depth), zp_in,
                                 seed, out_scale)
    tensors.append(Tensor("y", (-1, units), weights[0], _q(s_out, zp_out)))
    model = _model(tensors, "FULLY_CONNECTED", ["x", "w", "b"], {"activation": activation})
    return model, {"x": _ints(rng, weights[0], (40, depth))}


def _fc_cases():
    cases = []
    for i, (weights, (depth, units), activation) in enumerate(itertools.product(
            WEIGHTS, [(1, 3), (20, 7), (257, 16), (64, 10)], ACTIVATIONS)):
        zps = ZERO_POINTS[weights[0]]
        cases.append((weights, depth, units, activation, zps[i % 3], zps[(i + 1) % 3], i))
    return cases


@pytest.mark.parametrize("weights, depth, units, activation, zp_in, zp_out, seed", _fc_cases())
def test_fully_connected(weights, depth, units, activation, zp_in, zp_out, seed):
    _assert_same(*_fc_model(weights, depth, units, activation, zp_in, zp_out, seed))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_fully_connected_with_asymmetric_int8_weights_and_no_bias(dtype):
    # A per-tensor int8 FULLY_CONNECTED applies its weight zero point; no bias is zeros.
    model, feeds = _fc_model((dtype, False), 30, 5, "NONE", ZERO_POINTS[dtype][2], 0, 99)
    if dtype == "int8":
        model.tensors["w"].quantization = _q(model.tensors["w"].quantization.scale[0], -9)
    model.ops[0].inputs = ["x", "w"]
    del model.tensors["b"]
    _assert_same(model, feeds)


@pytest.mark.parametrize("kind", ["CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"])
@pytest.mark.parametrize("weights", WEIGHTS)
def test_layers_with_multipliers_above_one(weights, kind):
    # s_in * s_w / s_out around 10: a positive shift, most outputs saturated.
    zp_in, zp_out = ZERO_POINTS[weights[0]][2], ZERO_POINTS[weights[0]][2]
    if kind == "FULLY_CONNECTED":
        model, feeds = _fc_model(weights, 20, 7, "NONE", zp_in, zp_out, 7, out_scale=0.015)
    else:
        model, feeds = _conv_model(weights, ((7, 5, 3), (3, 3), 1, "SAME", 1), "NONE", zp_in,
                                   zp_out, 7, kind, out_per_in=1, out_scale=0.015)
    _assert_same(model, feeds)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_depthwise_without_bias(dtype):
    model, feeds = _conv_model((dtype, False), ((7, 5, 3), (3, 3), 2, "SAME", 1), "RELU",
                               ZERO_POINTS[dtype][2], ZERO_POINTS[dtype][0], 11,
                               "DEPTHWISE_CONV_2D", out_per_in=2)
    model.ops[0].inputs = ["x", "w"]
    del model.tensors["b"]
    _assert_same(model, feeds)


@pytest.mark.parametrize("dtype, zp", [("uint8", 0), ("int8", -128), ("int8", 20)])
def test_relu6_bound_is_a_float32_division(dtype, zp):
    # 6 / float32(6 / 6.5) is exactly 6.5 in float32: TFLite's bound is zp + 7.
    model, feeds = _conv_model((dtype, False), ((7, 5, 3), (3, 3), 1, "SAME", 1), "RELU6", zp, zp,
                               3, "CONV_2D")
    # Scales that put most outputs above 6, so that they stop at the bound.
    t = model.tensors
    t["x"].quantization = _q(0.5, zp)
    t["w"].quantization = _q(0.05, int(t["w"].quantization.zero_point[0]))
    t["b"].quantization = _q(np.float32(0.5) * np.float32(0.05), 0)
    t["y"].quantization = _q(6 / 6.5, zp)
    ours, theirs = _run_both(model, feeds)
    assert np.array_equal(ours, theirs) and ours.max() == min(zp + 7, 127 if dtype == "int8"
                                                              else 255)


# -- element-wise, pooling, reductions ---------------------------------------------------------
def _add_cases():
    cases = []
    shapes = [(-1, 4, 5, 6), (6,), (1, 1, 5, 1), (-1, 1, 1, 6)]
    for i, (dtype, activation, b_shape) in enumerate(
            itertools.product(["int8", "uint8"], ACTIVATIONS, shapes)):
        zps = ZERO_POINTS[dtype]
        cases.append((dtype, activation, b_shape, zps[i % 3], zps[(i + 1) % 3], zps[(i + 2) % 3],
                      i))
    return cases


@pytest.mark.parametrize("dtype, activation, b_shape, zp_a, zp_b, zp_out, seed", _add_cases())
def test_add(dtype, activation, b_shape, zp_a, zp_b, zp_out, seed):
    rng = np.random.default_rng(seed)
    s_a, s_b = np.float32(rng.uniform(0.01, 0.1)), np.float32(rng.uniform(0.001, 0.2))
    s_out = np.float32(rng.uniform(0.3, 1.5) * max(s_a, s_b))
    b = Tensor("b", b_shape, dtype, _q(s_b, zp_b))
    feeds = {"x": _ints(rng, dtype, (5, 4, 5, 6))}
    if b_shape[0] == -1:
        feeds["b"] = _ints(rng, dtype, (5,) + b_shape[1:])
    else:
        b.data = _ints(rng, dtype, b_shape)
    model = _model([Tensor("x", (-1, 4, 5, 6), dtype, _q(s_a, zp_a)), b,
                    Tensor("y", (-1, 4, 5, 6), dtype, _q(s_out, zp_out))],
                   "ADD", ["x", "b"], {"activation": activation}, graph_inputs=list(feeds))
    _assert_same(model, feeds)


# (input H, W), filter (FH, FW), stride (SH, SW), padding
POOL_GEOMETRIES = [((7, 5), (3, 3), (1, 1), "SAME"), ((7, 5), (2, 3), (2, 2), "VALID"),
                   ((7, 5), (3, 2), (2, 2), "SAME"), ((7, 5), (5, 5), (1, 1), "SAME"),
                   ((6, 6), (2, 2), (2, 2), "VALID"), ((8, 8), (8, 8), (1, 1), "VALID"),
                   ((5, 7), (1, 1), (3, 2), "SAME"), ((4, 4), (3, 3), (3, 3), "SAME")]


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("geometry", POOL_GEOMETRIES)
@pytest.mark.parametrize("dtype, zp", [("int8", -128), ("int8", 127), ("int8", 5), ("uint8", 0),
                                       ("uint8", 255), ("uint8", 131)])
def test_average_pool_2d(dtype, zp, geometry, activation):
    (h, w), (fh, fw), (sh, sw), padding = geometry
    options = dict(padding=padding, stride_h=sh, stride_w=sw, filter_h=fh, filter_w=fw,
                   activation=activation)
    oh, ow = _window_out((None, h, w), fh, fw, options)
    q = _q(0.04, zp)
    model = _model([Tensor("x", (-1, h, w, 5), dtype, q), Tensor("y", (-1, oh, ow, 5), dtype, q)],
                   "AVERAGE_POOL_2D", ["x"], options)
    rng = np.random.default_rng(hash((dtype, zp, geometry, activation)) % 2**32)
    _assert_same(model, {"x": _ints(rng, dtype, (4, h, w, 5))})


MEAN_AXES = [([1, 2], True), ([1, 2], False), ([2, 1], True), ([3], False), ([1], True),
             ([-1, 1], False), ([0], False), ([0, 1, 2, 3], False), ([1, 2, 1], False)]


@pytest.mark.parametrize("axes, keep_dims", MEAN_AXES)
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("same_quantization", [True, False])
def test_mean(dtype, axes, keep_dims, same_quantization):
    rng = np.random.default_rng(hash((dtype, tuple(axes), keep_dims, same_quantization)) % 2**32)
    lo, hi, mid = ZERO_POINTS[dtype]
    q_in = _q(0.05, mid)
    q_out = q_in if same_quantization else _q(np.float32(rng.uniform(0.005, 0.08)),
                                              int(rng.choice([lo, hi, mid])))
    shape = (-1, 7, 5, 6)
    reduced = {a % 4 for a in axes}
    out_shape = tuple(1 if i in reduced else d for i, d in enumerate(shape)
                      if keep_dims or i not in reduced)
    model = _model([Tensor("x", shape, dtype, q_in),
                    Tensor("axes", (len(axes),), "int32", data=np.array(axes, np.int32)),
                    Tensor("y", out_shape, dtype, q_out)],
                   "MEAN", ["x", "axes"], {"keep_dims": keep_dims})
    _assert_same(model, {"x": _ints(rng, dtype, (9, 7, 5, 6))})


def test_mean_of_a_whole_image_of_extremes():
    # Every value at one end: the sums minus zp * n reach their largest magnitudes.
    for dtype, value in [("int8", -128), ("int8", 127), ("uint8", 0), ("uint8", 255)]:
        model = _model([Tensor("x", (-1, 13, 11, 3), dtype, _q(0.1, ZERO_POINTS[dtype][1])),
                        Tensor("axes", (2,), "int32", data=np.array([1, 2], np.int32)),
                        Tensor("y", (-1, 3), dtype, _q(0.003, ZERO_POINTS[dtype][2]))],
                       "MEAN", ["x", "axes"], {"keep_dims": False})
        _assert_same(model, {"x": np.full((2, 13, 11, 3), value, dtype)})


@pytest.mark.parametrize("depth", [1, 10, 100])
@pytest.mark.parametrize("scale, beta", [(0.05, 1.0), (0.3, 1.0), (0.01, 2.0), (1.0, 1.0),
                                         (0.1, 0.5), (8.0, 1.0)])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_softmax(dtype, scale, beta, depth):
    rng = np.random.default_rng(hash((dtype, scale, beta, depth)) % 2**32)
    lowest = ZERO_POINTS[dtype][0]
    model = _model([Tensor("x", (-1, depth), dtype, _q(scale, ZERO_POINTS[dtype][2])),
                    Tensor("y", (-1, depth), dtype, _q(1 / 256, lowest))],
                   "SOFTMAX", ["x"], {"beta": beta})
    x = _ints(rng, dtype, (64, depth))
    x[0] = x[0, 0]                      # a row of equal logits
    _assert_same(model, {"x": x})


def test_softmax_on_a_4d_tensor():
    model = _model([Tensor("x", (-1, 3, 2, 7), "int8", _q(0.07, -3)),
                    Tensor("y", (-1, 3, 2, 7), "int8", _q(1 / 256, -128))],
                   "SOFTMAX", ["x"], {"beta": 1.0})
    _assert_same(model, {"x": _ints(np.random.default_rng(4), "int8", (5, 3, 2, 7))})


# -- conversions -------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", [0.05, 0.1, 0.0123, 3.0])
@pytest.mark.parametrize("dtype, zp", [("int8", -128), ("int8", 127), ("int8", 5), ("uint8", 0),
                                       ("uint8", 255), ("uint8", 131)])
def test_quantize(dtype, zp, scale):
    rng = np.random.default_rng(hash((dtype, zp, scale)) % 2**32)
    s = np.float32(scale)
    x = (rng.standard_normal((60, 10)) * 200 * s).astype(np.float32)
    x[:20] = ((rng.integers(-300, 300, (20, 10)) + 0.5) * s).astype(np.float32)   # ties
    x[20] = [1e10, -1e10, np.inf, -np.inf, np.nan, 3e9 * s, -3e9 * s, 0.0, -0.0, 1e-30]
    model = _model([Tensor("x", (-1, 10), "float32"), Tensor("y", (-1, 10), dtype, _q(s, zp))],
                   "QUANTIZE", ["x"], {})
    _assert_same(model, {"x": x})


@pytest.mark.parametrize("scale", [0.05, 1e-3, 7.3])
@pytest.mark.parametrize("dtype, zp", [("int8", -128), ("int8", 127), ("uint8", 0),
                                       ("uint8", 131)])
def test_dequantize(dtype, zp, scale):
    model = _model([Tensor("x", (-1, 2, 128), dtype, _q(scale, zp)),
                    Tensor("y", (-1, 2, 128), "float32")], "DEQUANTIZE", ["x"], {})
    x = np.arange(256).astype(np.uint8).view(dtype).reshape(1, 2, 128)
    _assert_same(model, {"x": x})


def test_reshape_between_layers():
    q = _q(0.1, 3)
    model = Model({"x": Tensor("x", (-1, 2, 3, 4), "int8", q),
                   "shape": Tensor("shape", (2,), "int32", data=np.array([-1, 24], np.int32)),
                   "y": Tensor("y", (-1, 24), "int8", q)},
                  [Op("RESHAPE", ["x", "shape"], ["y"])], ["x"], ["y"])
    _assert_same(model, {"x": _ints(np.random.default_rng(0), "int8", (3, 2, 3, 4))})


# -- a whole model -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_small_cnn_end_to_end(dtype, tmp_path):
    """QUANTIZE, CONV_2D, DEPTHWISE_CONV_2D, ADD, MEAN, FULLY_CONNECTED, SOFTMAX, DEQUANTIZE on
    a batch of 359 images, the model given as a Model, .tflite bytes and a .tflite path."""
    from test_deploy_kernels import _small_cnn
    model = _small_cnn(dtype)
    data = tflite_format.write(model)
    path = tmp_path / "cnn.tflite"
    path.write_bytes(data)
    images = np.random.default_rng(3).random((359, 8, 8, 1), np.float32)
    theirs = run_litert(data, [images])[0]
    for source in (model, data, path, str(path)):
        ours = Interpreter(source).run(images)["probabilities"]
        assert np.array_equal(ours.view(np.int32), theirs.view(np.int32))


# -- float32_half_even against XNNPACK ---------------------------------------------------------
def test_float32_half_even_against_xnnpack():
    """LiteRT's default resolver runs CONV_2D and FULLY_CONNECTED in XNNPACK, which requantizes
    in float32 with round-half-to-even. rounding="float32_half_even" (ONNX Runtime's arithmetic)
    may differ from it by one step on at most 0.5% of the outputs of the cases above; today it
    differs on none, where the reference arithmetic differs on a few dozen."""
    differing, reference_differing, total, worst = 0, 0, 0, 0
    models = [_conv_model(*case, "CONV_2D") for case in _conv_cases()]
    models += [_fc_model(*case) for case in _fc_cases()]
    for model, feeds in models:
        ours, theirs = _run_both(model, feeds, "float32_half_even", resolver="default")
        reference = Interpreter(model).run(feeds)["y"]
        diff = np.abs(ours.astype(np.int64) - theirs.astype(np.int64))
        differing += np.count_nonzero(diff)
        worst = max(worst, int(diff.max()))
        reference_differing += np.count_nonzero(reference != theirs)
        total += ours.size
    print(f"\nvs XNNPACK, of {total} outputs: float32_half_even differs in {differing} (by at "
          f"most {worst}), tflite_reference in {reference_differing}")
    assert reference_differing > 0, "XNNPACK did not run: the comparison would prove nothing"
    assert worst <= 1 and differing <= 0.005 * total, (differing, total, worst)
