"""fqcore.deploy.onnx_format against ONNX Runtime: every op written as ONNX and run there equals the
reference interpreter's float32_half_even mode bit for bit, the optimized graph holds the fused
integer kernels, read() gives the Model back, and damaged or foreign files are ValueErrors."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from fqcore.deploy import onnx_format  # noqa: E402
from fqcore.deploy.interpreter import Interpreter  # noqa: E402
from fqcore.deploy.model import Model, Op, Quantization, Tensor  # noqa: E402
from helpers import assert_same_bits  # noqa: E402

RANGES = {"int8": (-128, 127), "uint8": (0, 255)}
# Ops that would mean ONNX Runtime computes a layer in float instead of its integer kernels.
FLOAT_COMPUTE = {"Conv", "FusedConv", "Gemm", "MatMul", "Add", "AveragePool",
                 "GlobalAveragePool", "Softmax", "ReduceMean"}


# -- building Models -----------------------------------------------------------------------------
class Builder:
    """A Model assembled tensor by tensor; float inputs get a QUANTIZE, float outputs a
    DEQUANTIZE, so that each test can run an op with float or integer graph ends."""

    def __init__(self, rng, dtype):
        self.rng, self.dtype = rng, dtype
        self.tensors, self.ops, self.inputs, self.outputs = {}, [], [], []

    def grid(self, scale=None, zero_point=None):
        lo, hi = RANGES[self.dtype]
        if scale is None:
            scale = float(np.exp(self.rng.uniform(-5, -1)))
        if zero_point is None:
            zero_point = int(self.rng.integers(lo, hi + 1))
        return Quantization([scale], [zero_point])

    def add(self, name, shape, dtype, quantization=None, data=None):
        self.tensors[name] = Tensor(name, shape, dtype, quantization, data)
        return name

    def input(self, name, shape, quantization, integer=False):
        if integer:
            self.inputs.append(self.add(name, shape, self.dtype, quantization))
            return name
        self.inputs.append(self.add(name + "_f", shape, "float32"))
        self.add(name, shape, self.dtype, quantization)
        self.ops.append(Op("QUANTIZE", [name + "_f"], [name], name=name + "/quantize"))
        return name

    def op(self, kind, inputs, out, shape, quantization, options=None):
        self.add(out, shape, self.dtype, quantization)
        self.ops.append(Op(kind, inputs, [out], dict(options or {}), name=out + "/op"))
        return out

    def output(self, name, integer=False):
        if integer:
            self.outputs.append(name)
            return
        self.add(name + "_real", self.tensors[name].shape, "float32")
        self.ops.append(Op("DEQUANTIZE", [name], [name + "_real"], name=name + "/dequantize"))
        self.outputs.append(name + "_real")

    def weights(self, name, shape, per_channel, axis):
        lo, hi = RANGES[self.dtype]
        channels = shape[axis]
        data = self.rng.integers(lo, hi + 1, shape)
        if per_channel:
            q = Quantization(self.rng.uniform(0.002, 0.03, channels), np.zeros(channels), axis)
        elif self.dtype == "int8":
            q = Quantization([0.01], [0])
        else:
            q = Quantization([0.01], [int(self.rng.integers(0, 256))])
        return self.add(name, shape, self.dtype, q, data)

    def bias(self, name, x, w, channels):
        s_in = np.float64(self.tensors[x].quantization.scale[0])
        scale = (s_in * self.tensors[w].quantization.scale.astype(np.float64)).astype(np.float32)
        data = self.rng.integers(-3000, 3000, channels)
        return self.add(name, (channels,), "int32", Quantization(scale, np.zeros(scale.size)),
                        data)

    def model(self):
        return Model(self.tensors, self.ops, self.inputs, self.outputs)


def feeds_for(rng, model, batch=2):
    """Random feeds for each input: floats spanning past the range of the grid they are
    quantized onto (so that QuantizeLinear saturates too), integers over the whole dtype."""
    feeds = {}
    for name in model.inputs:
        t = model.tensors[name]
        shape = tuple(batch if d == -1 else d for d in t.shape)
        if t.dtype == "float32":
            grid = next(model.tensors[op.outputs[0]] for op in model.ops if op.inputs == [name])
            lo, hi = RANGES[grid.dtype]
            s, z = float(grid.quantization.scale[0]), int(grid.quantization.zero_point[0])
            feeds[name] = rng.uniform((lo - z - 8) * s, (hi - z + 8) * s, shape).astype(np.float32)
        else:
            lo, hi = RANGES[t.dtype]
            feeds[name] = rng.integers(lo, hi + 1, shape).astype(t.dtype)
    return feeds


# -- running ---------------------------------------------------------------------------------------
def session(data, optimized_path=None):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def assert_equal_outputs(actual, expected):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, \
        (actual.dtype, actual.shape, expected.dtype, expected.shape)
    if actual.dtype == np.float32:
        assert_same_bits(actual, expected)
    else:
        bad = np.flatnonzero(actual.reshape(-1) != expected.reshape(-1))
        assert not bad.size, f"{bad.size} of {actual.size} differ, first at {bad[:5]}: " \
                             f"{actual.reshape(-1)[bad[:5]]} vs {expected.reshape(-1)[bad[:5]]}"


def check_parity(model, rng, batch=2, opset=17, reread=False):
    """ONNX Runtime on write(model) equals Interpreter(model, "float32_half_even"); with
    `reread`, so does the interpreter on read() of the file."""
    data = onnx_format.write(model, opset=opset)
    feeds = feeds_for(rng, model, batch)
    got = session(data).run(None, feeds)
    expected = Interpreter(model, rounding="float32_half_even").run(feeds)
    for name, value in zip(model.outputs, got):
        assert_equal_outputs(value, expected[name])
    if reread:
        again = Interpreter(onnx_format.read(data), rounding="float32_half_even").run(feeds)
        for name in model.outputs:
            assert_equal_outputs(again[name], expected[name])
    return data


def optimized_ops(data, tmp_path):
    path = tmp_path / "optimized.onnx"
    session(data, path)
    return [node.op_type for node in onnx.load(str(path)).graph.node]


def window(size, kernel, stride, padding, dilation=1):
    effective = (kernel - 1) * dilation + 1
    return (size + stride - 1) // stride if padding == "SAME" \
        else (size - effective + stride) // stride


# -- single-op models ------------------------------------------------------------------------------
def conv_model(rng, dtype, kind="CONV_2D", per_channel=False, activation="NONE", out_zp=None,
               padding="SAME", stride=1, dilation=1, multiplier=1, hw=(6, 7), channels=3,
               integer_io=False, kernel=3, out_scale=0.1):
    b = Builder(rng, dtype)
    h, w = hw
    x = b.input("x", (-1, h, w, channels), b.grid(), integer_io)
    if kind == "CONV_2D":
        out_c = 4
        weights = b.weights("w", (out_c, kernel, kernel, channels), per_channel, 0)
    else:
        out_c = channels * multiplier
        weights = b.weights("w", (1, kernel, kernel, out_c), per_channel, 3)
    bias = b.bias("b", x, weights, out_c)
    options = {"padding": padding, "stride_h": stride, "stride_w": stride,
               "dilation_h": dilation, "dilation_w": dilation, "activation": activation}
    if kind == "DEPTHWISE_CONV_2D":
        options["depth_multiplier"] = multiplier
    shape = (-1, window(h, kernel, stride, padding, dilation),
             window(w, kernel, stride, padding, dilation), out_c)
    y = b.op(kind, [x, weights, bias], "y", shape, b.grid(out_scale, out_zp), options)
    b.output(y, integer_io)
    return b.model()


def fc_model(rng, dtype, per_channel=False, activation="NONE", bias=True, integer_io=False,
             depth=37, units=11, out_zp=None):
    b = Builder(rng, dtype)
    x = b.input("x", (-1, depth), b.grid(), integer_io)
    weights = b.weights("w", (units, depth), per_channel, 0)
    inputs = [x, weights] + ([b.bias("b", x, weights, units)] if bias else [])
    y = b.op("FULLY_CONNECTED", inputs, "y", (-1, units), b.grid(0.2, out_zp),
             {"activation": activation})
    b.output(y, integer_io)
    return b.model()


def add_model(rng, dtype, shape_a, shape_b, activation="NONE", out_zp=None):
    b = Builder(rng, dtype)
    a = b.input("a", shape_a, b.grid())
    c = b.input("c", shape_b, b.grid())
    shape = tuple(np.broadcast_shapes(tuple(abs(d) for d in shape_a),
                                      tuple(abs(d) for d in shape_b)))
    shape = (-1,) + shape[1:] if -1 in shape_a + shape_b else shape
    y = b.op("ADD", [a, c], "y", shape, b.grid(None, out_zp), {"activation": activation})
    b.output(y)
    return b.model()


def pool_model(rng, dtype, hw, kernel, stride, padding, activation="NONE", channels=3):
    b = Builder(rng, dtype)
    q = b.grid()
    x = b.input("x", (-1,) + hw + (channels,), q)
    shape = (-1, window(hw[0], kernel[0], stride[0], padding),
             window(hw[1], kernel[1], stride[1], padding), channels)
    options = {"padding": padding, "stride_h": stride[0], "stride_w": stride[1],
               "filter_h": kernel[0], "filter_w": kernel[1], "activation": activation}
    y = b.op("AVERAGE_POOL_2D", [x], "y", shape, q, options)
    b.output(y)
    return b.model()


def mean_model(rng, dtype, hw, keep_dims, axes=(1, 2), channels=5):
    b = Builder(rng, dtype)
    x = b.input("x", (-1,) + hw + (channels,), b.grid())
    b.add("axes", (len(axes),), "int32", data=np.array(axes))
    shape = (-1, 1, 1, channels) if keep_dims else (-1, channels)
    y = b.op("MEAN", [x, "axes"], "y", shape, b.grid(), {"keep_dims": keep_dims})
    b.output(y)
    return b.model()


def softmax_model(rng, dtype, shape, integer_io=False):
    b = Builder(rng, dtype)
    x = b.input("x", shape, b.grid(float(np.exp(rng.uniform(-5, 0)))), integer_io)
    y = b.op("SOFTMAX", [x], "y", shape, Quantization([1 / 256], [RANGES[dtype][0]]),
             {"beta": 1.0})
    b.output(y, integer_io)
    return b.model()


def reshape_model(rng, dtype, in_shape, new_shape):
    b = Builder(rng, dtype)
    q = b.grid()
    x = b.input("x", in_shape, q)
    b.add("shape", (len(new_shape),), "int32", data=np.array(new_shape))
    y = b.op("RESHAPE", [x, "shape"], "y", tuple(new_shape), q)
    b.output(y)
    return b.model()


def network_model(rng, dtype, per_channel, integer_io=False):
    """conv (stride 2, RELU6) -> depthwise (RELU) -> 1x1 conv, added to the depthwise output
    -> average pool -> mean -> fully connected -> softmax."""
    b = Builder(rng, dtype)
    x = b.input("image", (-1, 9, 9, 3), b.grid(0.02), integer_io)

    def conv(name, x, kind, out_c, kernel, stride, activation, zp=None):
        c_in = b.tensors[x].shape[3]
        if kind == "CONV_2D":
            w = b.weights(name + "/w", (out_c, kernel, kernel, c_in), per_channel, 0)
        else:
            w = b.weights(name + "/w", (1, kernel, kernel, out_c), per_channel, 3)
        bias = b.bias(name + "/b", x, w, out_c)
        _, h, wd, _ = b.tensors[x].shape
        options = {"padding": "SAME", "stride_h": stride, "stride_w": stride, "dilation_h": 1,
                   "dilation_w": 1, "activation": activation}
        if kind != "CONV_2D":
            options["depth_multiplier"] = out_c // c_in
        shape = (-1, window(h, kernel, stride, "SAME"), window(wd, kernel, stride, "SAME"),
                 out_c)
        return b.op(kind, [x, w, bias], name, shape, b.grid(0.05, zp), options)

    lo = RANGES[dtype][0]
    c1 = conv("conv1", x, "CONV_2D", 8, 3, 2, "RELU6", lo)
    d1 = conv("dw1", c1, "DEPTHWISE_CONV_2D", 8, 3, 1, "RELU")
    p1 = conv("pw1", d1, "CONV_2D", 8, 1, 1, "NONE")
    s1 = b.op("ADD", [p1, d1], "residual", b.tensors[d1].shape, b.grid(0.08),
              {"activation": "RELU"})
    pool_q = b.tensors[s1].quantization
    pooled = b.op("AVERAGE_POOL_2D", [s1], "pool", (-1, 3, 3, 8), pool_q,
                  {"padding": "SAME", "stride_h": 2, "stride_w": 2, "filter_h": 2,
                   "filter_w": 2, "activation": "NONE"})
    b.add("axes", (2,), "int32", data=np.array([1, 2]))
    mean = b.op("MEAN", [pooled, "axes"], "mean", (-1, 8), b.grid(0.03), {"keep_dims": False})
    w = b.weights("fc/w", (10, 8), per_channel, 0)
    logits = b.op("FULLY_CONNECTED", [mean, w, b.bias("fc/b", mean, w, 10)], "logits",
                  (-1, 10), b.grid(0.1), {"activation": "NONE"})
    probs = b.op("SOFTMAX", [logits], "probs", (-1, 10),
                 Quantization([1 / 256], [lo]), {"beta": 1.0})
    b.output(probs, integer_io)
    return b.model()


# -- parity, op by op -----------------------------------------------------------------------------
CONV_CASES = [
    ("CONV_2D", 1, "SAME", 1, 1), ("CONV_2D", 1, "SAME", 2, 1), ("CONV_2D", 1, "VALID", 2, 1),
    ("CONV_2D", 1, "SAME", 1, 2), ("DEPTHWISE_CONV_2D", 1, "SAME", 1, 1),
    ("DEPTHWISE_CONV_2D", 1, "VALID", 2, 1), ("DEPTHWISE_CONV_2D", 2, "SAME", 2, 1),
    ("DEPTHWISE_CONV_2D", 3, "VALID", 1, 2),
]


@pytest.mark.parametrize("dtype,per_channel", [("int8", True), ("int8", False),
                                               ("uint8", False)])
@pytest.mark.parametrize("kind,multiplier,padding,stride,dilation", CONV_CASES)
def test_convolutions_equal_onnxruntime(dtype, per_channel, kind, multiplier, padding, stride,
                                        dilation):
    rng = np.random.default_rng([ord(c) for c in repr((dtype, per_channel, kind, multiplier,
                                                       padding, stride, dilation))])
    lo, hi = RANGES[dtype]
    # Each activation with zero points at both ends of the range and inside it; at the bottom
    # (and, for RELU6, a grid ending at 6) ONNX Runtime drops the redundant Relu / Clip.
    for activation, out_zp, out_scale in [("NONE", None, 0.1), ("RELU", lo, 0.1),
                                          ("RELU", None, 0.1), ("RELU", hi, 0.1),
                                          ("RELU6", lo, 0.1), ("RELU6", lo, 6 / 255),
                                          ("RELU6", None, 0.03)]:
        model = conv_model(rng, dtype, kind, per_channel, activation, out_zp, padding, stride,
                           dilation, multiplier, hw=(7, 6), out_scale=out_scale)
        check_parity(model, rng, batch=3)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_odd_convolution_shapes_equal_onnxruntime(dtype):
    rng = np.random.default_rng(7)
    for hw, channels, kernel in [((1, 1), 1, 1), ((1, 9), 5, 1), ((5, 2), 2, 3), ((11, 3), 7, 5)]:
        for kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            model = conv_model(rng, dtype, kind, dtype == "int8", "RELU6", None, "SAME", 2, 1,
                               2, hw=hw, channels=channels, kernel=kernel)
            check_parity(model, rng, batch=1)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_convolution_geometry_equals_onnxruntime(data):
    draw = data.draw
    dtype = draw(st.sampled_from(["int8", "uint8"]))
    kind = draw(st.sampled_from(["CONV_2D", "DEPTHWISE_CONV_2D"]))
    kernel = draw(st.integers(1, 4))
    dilation = draw(st.integers(1, 3))
    padding = draw(st.sampled_from(["SAME", "VALID"]))
    stride = draw(st.integers(1, 3))
    smallest = (kernel - 1) * dilation + 1 if padding == "VALID" else 1
    hw = (draw(st.integers(smallest, smallest + 6)), draw(st.integers(smallest, smallest + 6)))
    lo, hi = RANGES[dtype]
    model = conv_model(np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1))), dtype, kind,
                       dtype == "int8" and draw(st.booleans()),
                       draw(st.sampled_from(["NONE", "RELU", "RELU6"])),
                       draw(st.sampled_from([None, lo, hi])), padding, stride, dilation,
                       draw(st.integers(1, 3)), hw=hw, channels=draw(st.integers(1, 5)),
                       kernel=kernel)
    check_parity(model, np.random.default_rng(0), batch=2)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_extreme_weights_and_inputs_do_not_saturate(dtype):
    """All-extreme weights and inputs, 200 products per output: MLAS's u8 x s8 kernels would
    saturate their int16 pair sums here; the uint8 weights write() stores keep them exact."""
    rng = np.random.default_rng(11)
    lo, hi = RANGES[dtype]
    for kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        model = conv_model(rng, dtype, kind, False, "NONE", None, "VALID", 1, 1, 2, hw=(5, 5),
                           channels=8, kernel=5, integer_io=True)
        w = model.tensors["w"]
        w.data = rng.choice([lo, hi], w.shape).astype(dtype)
        if dtype == "uint8":
            w.quantization = Quantization([0.01], [0])
        # Sums of 25 to 200 products of +-32640 with random signs, onto about +-100 steps.
        products = 25 * (8 if kind == "CONV_2D" else 1)
        scale = model.tensors["x"].quantization.scale[0] * 0.01 * 32640 * np.sqrt(products) / 50
        model.tensors["y"].quantization = Quantization([scale], [0 if dtype == "int8" else 128])
        data = onnx_format.write(model)
        x = rng.choice([lo, hi], (2, 5, 5, 8)).astype(dtype)
        got = session(data).run(None, {"x": x})[0]
        expected = Interpreter(model, rounding="float32_half_even").run({"x": x})["y"]
        assert_equal_outputs(got, expected)


@pytest.mark.parametrize("dtype,per_channel", [("int8", True), ("int8", False),
                                               ("uint8", False)])
def test_fully_connected_equals_onnxruntime(dtype, per_channel):
    rng = np.random.default_rng(3 + per_channel)
    lo, hi = RANGES[dtype]
    for activation, out_zp in [("NONE", None), ("RELU", lo), ("RELU", None), ("RELU6", hi)]:
        for bias in (True, False):
            model = fc_model(rng, dtype, per_channel, activation, bias,
                             depth=int(rng.integers(1, 80)), units=int(rng.integers(1, 20)),
                             out_zp=out_zp)
            check_parity(model, rng, batch=5)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_add_equals_onnxruntime(dtype):
    rng = np.random.default_rng(5)
    lo, hi = RANGES[dtype]
    shapes = [((-1, 4, 5, 3), (-1, 4, 5, 3)), ((-1, 33), (-1, 33)), ((3, 7), (1, 1)),
              ((1, 1), (3, 7)), ((1,), (1,))]
    for shape_a, shape_b in shapes:
        for activation, out_zp in [("NONE", None), ("RELU", None), ("RELU", lo),
                                   ("RELU6", None), ("RELU6", hi)]:
            check_parity(add_model(rng, dtype, shape_a, shape_b, activation, out_zp), rng)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_all_add_inputs_equal_onnxruntime(dtype):
    """Every pair of input values on random grids: the fused multiply-adds of MLAS's kernel,
    which separate roundings miss in a few of the 65536 pairs."""
    rng = np.random.default_rng(13)
    lo, hi = RANGES[dtype]
    values = np.arange(lo, hi + 1)
    for _ in range(4):
        b = Builder(rng, dtype)
        a = b.input("a", (256, 256), b.grid(), integer=True)
        c = b.input("c", (256, 256), b.grid(), integer=True)
        b.output(b.op("ADD", [a, c], "y", (256, 256), b.grid(), {"activation": "NONE"}), True)
        model = b.model()
        feeds = {"a": np.repeat(values, 256).reshape(256, 256).astype(dtype),
                 "c": np.tile(values, 256).reshape(256, 256).astype(dtype)}
        got = session(onnx_format.write(model)).run(None, feeds)[0]
        expected = Interpreter(model, rounding="float32_half_even").run(feeds)["y"]
        assert_equal_outputs(got, expected)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_average_pool_equals_onnxruntime(dtype):
    rng = np.random.default_rng(17)
    cases = [((5, 5), (3, 3), (2, 2), "SAME"), ((6, 7), (2, 3), (1, 2), "SAME"),
             ((6, 7), (3, 2), (2, 1), "VALID"), ((4, 4), (4, 4), (1, 1), "VALID"),
             ((3, 5), (3, 5), (3, 5), "SAME"), ((1, 1), (1, 1), (1, 1), "SAME"),
             ((8, 3), (5, 1), (3, 3), "SAME")]
    for hw, kernel, stride, padding in cases:
        for activation in ("NONE", "RELU", "RELU6"):
            check_parity(pool_model(rng, dtype, hw, kernel, stride, padding, activation), rng,
                         batch=3)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_mean_equals_onnxruntime(dtype):
    rng = np.random.default_rng(19)
    for hw in [(1, 1), (3, 5), (7, 7)]:
        for keep_dims, axes in [(False, (1, 2)), (True, (2, 1)), (False, (-3, -2))]:
            check_parity(mean_model(rng, dtype, hw, keep_dims, axes), rng, batch=3)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_softmax_equals_onnxruntime(dtype):
    rng = np.random.default_rng(23)
    for shape in [(-1, 1), (-1, 2), (-1, 10), (-1, 1001), (4, 3, 17), (37,)]:
        for integer_io in (False, True):
            check_parity(softmax_model(rng, dtype, shape, integer_io), rng, batch=6)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_reshape_equals_onnxruntime(dtype):
    rng = np.random.default_rng(29)
    for in_shape, new_shape in [((-1, 2, 3, 4), (-1, 24)), ((-1, 24), (-1, 2, 4, 3)),
                                ((-1, 3, 1, 2), (-1, 1, 2, 3)), ((6, 4), (4, 6))]:
        check_parity(reshape_model(rng, dtype, in_shape, new_shape), rng)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_quantize_and_dequantize_equal_onnxruntime(dtype):
    """QuantizeLinear at exact ties, one float32 step either side, past both ends, at NaN and
    infinities."""
    rng = np.random.default_rng(31)
    for _ in range(5):
        b = Builder(rng, dtype)
        q = b.grid(float(np.exp(rng.uniform(-8, 2))))
        x = b.input("x", (-1,), q)
        b.output(x)
        model = b.model()
        scale = np.float64(q.scale[0])
        ties = ((np.arange(-300, 300) + 0.5) * scale).astype(np.float32)
        values = np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)),
                                 np.nextafter(ties, np.float32(-np.inf)),
                                 np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -3e38],
                                          np.float32)])
        got = session(onnx_format.write(model)).run(None, {"x_f": values})[0]
        expected = Interpreter(model, rounding="float32_half_even").run({"x_f": values})
        assert_equal_outputs(got, expected["x_real"])


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_integer_graph_inputs_and_outputs_equal_onnxruntime(dtype, tmp_path):
    """A Model taking and returning integers: int8 ends pass through a uint8 twin, without
    which ONNX Runtime would fuse nothing next to them."""
    rng = np.random.default_rng(37)
    for model in [conv_model(rng, dtype, "CONV_2D", dtype == "int8", "RELU6", None,
                             integer_io=True),
                  fc_model(rng, dtype, dtype == "int8", "RELU", integer_io=True),
                  network_model(rng, dtype, dtype == "int8", integer_io=True)]:
        data = check_parity(model, rng, batch=3, reread=True)
        ops = set(optimized_ops(data, tmp_path))
        assert not ops & FLOAT_COMPUTE, ops


@pytest.mark.parametrize("dtype,per_channel", [("int8", True), ("uint8", False)])
def test_network_equals_onnxruntime(dtype, per_channel, tmp_path):
    rng = np.random.default_rng(41)
    model = network_model(rng, dtype, per_channel)
    data = check_parity(model, rng, batch=4, reread=True)
    ops = optimized_ops(data, tmp_path)
    for fused in ("QLinearConv", "QLinearAdd", "QLinearAveragePool", "QLinearGlobalAveragePool",
                  "QGemm", "QLinearSoftmax"):
        assert fused in ops, (fused, ops)
    assert not set(ops) & FLOAT_COMPUTE, ops
    # The interpreter also runs the file from its path.
    path = tmp_path / "network.onnx"
    path.write_bytes(data)
    feeds = feeds_for(rng, model, 2)
    from_path = Interpreter(str(path), rounding="float32_half_even").run(feeds)
    expected = session(data).run(None, feeds)
    assert_equal_outputs(from_path[model.outputs[0]], expected[0])


@pytest.mark.parametrize("opset", [13, 19, 21])
def test_other_opsets_equal_onnxruntime(opset):
    rng = np.random.default_rng(opset)
    check_parity(network_model(rng, "int8", True), rng, opset=opset)


# -- the optimized graph ---------------------------------------------------------------------------
def test_optimized_conv_graph_holds_qlinearconv(tmp_path):
    rng = np.random.default_rng(43)
    for activation, out_zp in [("NONE", None), ("RELU", -128), ("RELU6", None)]:
        data = onnx_format.write(conv_model(rng, "int8", "CONV_2D", True, activation, out_zp))
        ops = optimized_ops(data, tmp_path)
        assert "QLinearConv" in ops and not set(ops) & FLOAT_COMPUTE, ops
        if activation == "RELU":
            assert "Relu" not in ops   # the grid makes it redundant: ONNX Runtime dropped it


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_every_op_runs_on_onnxruntimes_integer_kernels(dtype, tmp_path):
    """Each op with each activation, a redundant one included (the Relu / Clip dropped) and
    one applied after the QuantizeLinear: nothing left computing in float but the clamps."""
    rng = np.random.default_rng(79)
    lo = RANGES[dtype][0]
    models = [softmax_model(rng, dtype, (-1, 10)), mean_model(rng, dtype, (3, 3), False),
              mean_model(rng, dtype, (3, 3), True), reshape_model(rng, dtype, (-1, 2, 2, 3),
                                                                  (-1, 12))]
    models.append(conv_model(rng, dtype, "CONV_2D", False, "RELU6", lo, out_scale=6 / 255))
    for activation, out_zp in [("NONE", None), ("RELU", lo), ("RELU", None), ("RELU6", None)]:
        models += [conv_model(rng, dtype, "CONV_2D", False, activation, out_zp),
                   conv_model(rng, dtype, "DEPTHWISE_CONV_2D", False, activation, out_zp,
                              multiplier=2),
                   fc_model(rng, dtype, False, activation, out_zp=out_zp),
                   add_model(rng, dtype, (-1, 3, 3, 2), (-1, 3, 3, 2), activation, out_zp),
                   pool_model(rng, dtype, (5, 5), (2, 2), (2, 2), "SAME", activation)]
    for model in models:
        op = next(op for op in model.ops if op.outputs == ["y"])
        ops = optimized_ops(onnx_format.write(model), tmp_path)
        assert not set(ops) & FLOAT_COMPUTE, (op, ops)
        redundant = onnx_format.activation_is_redundant(
            op.options.get("activation", "NONE"), model.tensors["y"].quantization, dtype)
        assert redundant == ("Relu" not in ops and "Clip" not in ops), (op, ops)


def test_optimized_fully_connected_graph_holds_qgemm(tmp_path):
    rng = np.random.default_rng(47)
    ops = optimized_ops(onnx_format.write(fc_model(rng, "int8", True)), tmp_path)
    assert ("QGemm" in ops or "QLinearMatMul" in ops) and not set(ops) & FLOAT_COMPUTE, ops


def test_int8_weights_are_stored_as_uint8():
    rng = np.random.default_rng(53)
    model = conv_model(rng, "int8", "DEPTHWISE_CONV_2D", True, multiplier=2)
    proto = onnx.load_from_string(onnx_format.write(model))
    weights = {i.name: i for i in proto.graph.initializer}
    w = onnx.numpy_helper.to_array(weights["w"])
    assert w.dtype == np.uint8 and w.shape == (6, 1, 3, 3)
    expected = np.transpose(model.tensors["w"].data.astype(np.int64) + 128, (3, 0, 1, 2))
    np.testing.assert_array_equal(w, expected)
    assert onnx.numpy_helper.to_array(weights["w::zero_point"]).tolist() == [128] * 6


# -- round trip ---------------------------------------------------------------------------------
def round_trip_models(rng):
    yield conv_model(rng, "int8", "CONV_2D", True, "RELU6", None, "VALID", 2, 1)
    yield conv_model(rng, "int8", "DEPTHWISE_CONV_2D", True, "RELU", -128, multiplier=3)
    yield conv_model(rng, "uint8", "DEPTHWISE_CONV_2D", False, "NONE", channels=1)
    yield conv_model(rng, "int8", "CONV_2D", False, "NONE", kernel=1)  # SAME padding nothing
    yield fc_model(rng, "int8", True, "RELU", bias=False, integer_io=True)
    yield fc_model(rng, "uint8", False, "RELU6")
    yield add_model(rng, "int8", (-1, 3, 3, 2), (-1, 3, 3, 2), "RELU6")
    yield pool_model(rng, "uint8", (5, 5), (1, 1), (1, 1), "SAME")
    yield mean_model(rng, "int8", (4, 4), True, (2, 1))
    yield mean_model(rng, "uint8", (4, 4), False, (-3, -2))
    yield softmax_model(rng, "int8", (-1, 10), integer_io=True)
    yield reshape_model(rng, "int8", (-1, 24), (-1, 2, 4, 3))
    yield network_model(rng, "int8", True, integer_io=True)
    yield network_model(rng, "uint8", False)


def test_read_gives_the_model_back():
    rng = np.random.default_rng(59)
    for model in round_trip_models(rng):
        model.description = "fqcore test model"
        again = onnx_format.read(onnx_format.write(model), "model.onnx")
        assert again == model


# -- damaged and foreign files ------------------------------------------------------------------
def test_truncated_files_are_value_errors():
    data = onnx_format.write(network_model(np.random.default_rng(61), "int8", True))
    for length in list(range(0, 64)) + list(range(64, len(data), 37)):
        with pytest.raises(ValueError, match="^truncated.onnx: "):
            onnx_format.read(data[:length], "truncated.onnx")


def test_corrupted_files_are_value_errors_or_models():
    """Random byte changes, seeded: either read() notices (ValueError) or the damage left a
    file it can parse; nothing else escapes."""
    rng = np.random.default_rng(67)
    data = onnx_format.write(conv_model(rng, "int8", "CONV_2D", True, "RELU6"))
    errors = 0
    for trial in range(600):
        damaged = bytearray(data)
        for _ in range(1 + trial % 4):
            position = int(rng.integers(len(damaged)))
            if trial % 3 == 0:
                damaged[position] = int(rng.integers(256))
            elif trial % 3 == 1:
                damaged[position] ^= 1 << int(rng.integers(8))
            else:
                del damaged[position:position + int(rng.integers(1, 9))]
        try:
            assert isinstance(onnx_format.read(bytes(damaged), "damaged.onnx"), Model)
        except ValueError as error:
            assert str(error).startswith("damaged.onnx: ")
            errors += 1
    assert errors > 300


def test_foreign_models_are_value_errors():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    tanh = helper.make_model(helper.make_graph([helper.make_node("Tanh", ["x"], ["y"],
                                                                 name="tanh")], "g", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match=r"^tanh.onnx: node 'tanh' \(Tanh\)"):
        onnx_format.read(tanh.SerializeToString(), "tanh.onnx")
    old = helper.make_model(helper.make_graph([], "g", [x], [x]),
                            opset_imports=[helper.make_opsetid("", 11)])
    with pytest.raises(ValueError, match="^old.onnx: model: imports opset 11"):
        onnx_format.read(old.SerializeToString(), "old.onnx")
    with pytest.raises(ValueError, match="^text: "):
        onnx_format.read(b"this is not a protobuf at all \xff\xfe", "text")


def test_a_graph_in_another_shape_names_the_node():
    rng = np.random.default_rng(71)
    proto = onnx.load_from_string(onnx_format.write(conv_model(rng, "int8", "CONV_2D", True)))
    conv = next(node for node in proto.graph.node if node.op_type == "Conv")
    conv.attribute.append(helper.make_attribute("auto_pad", "SAME_UPPER"))
    with pytest.raises(ValueError, match=r"node 'y/op' \(Conv\): uses auto_pad"):
        onnx_format.read(proto.SerializeToString())
    proto = onnx.load_from_string(onnx_format.write(conv_model(rng, "int8", "CONV_2D", True)))
    proto.graph.node.remove(next(n for n in proto.graph.node if n.name == "x_f::to_nchw"))
    with pytest.raises(ValueError, match=r"node 'x/quantize' \(QuantizeLinear\): reads "):
        onnx_format.read(proto.SerializeToString())


# -- what write() refuses -------------------------------------------------------------------------
def test_write_refuses_what_onnx_cannot_hold_exactly():
    rng = np.random.default_rng(73)
    model = softmax_model(rng, "int8", (-1, 10))
    model.ops[1].options["beta"] = 2.0
    with pytest.raises(ValueError, match="SOFTMAX op 'y/op': beta 2.0"):
        onnx_format.write(model)
    with pytest.raises(ValueError, match="MEAN op 'y/op': ONNX export takes MEAN over the "
                                         "height and width"):
        onnx_format.write(mean_model(rng, "int8", (3, 3), True, axes=(1, 3)))
    with pytest.raises(ValueError, match="ADD op 'y/op': inputs of shapes"):
        onnx_format.write(add_model(rng, "int8", (2, 3, 4), (2, 1, 4)))
    model = reshape_model(rng, "uint8", (-1, 6), (-1, 2, 3))
    model.tensors["y"].quantization = Quantization([0.5], [7])
    with pytest.raises(ValueError, match="RESHAPE op 'y/op': output 'y' must keep"):
        onnx_format.write(model)
    with pytest.raises(ValueError, match="opset must be an int from 13 to 21"):
        onnx_format.write(model, opset=22)
