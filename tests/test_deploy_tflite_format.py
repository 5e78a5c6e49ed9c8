"""fqcore.deploy.tflite_format: round trips, LiteRT running what write() makes, bad files."""
# Round trips of hand-built Models, LiteRT loading and running what write() makes, the op
# versions and metadata in the file, and read() on damaged and foreign files.
import random
import struct

import numpy as np
import pytest

from fqcore.deploy import tflite_schema as fb
from fqcore.deploy.model import Model, Op, Quantization, Tensor
from fqcore.deploy.tflite_format import read, read_file, write

RNG_SEED = 20240611


def q(scale, zero_point, axis=0):
    return Quantization(scale, zero_point, axis)


def qtype_zp(dtype, zp):
    """A zero point near zp valid for dtype (uint8's range sits 128 higher)."""
    return zp + 128 if dtype == "uint8" else zp


def weights(rng, shape, dtype):
    lo, hi = {"int8": (-127, 128), "uint8": (0, 256)}[dtype]
    return rng.integers(lo, hi, size=shape).astype(dtype)


# --------------------------------------------------------------------------------------------
# A catalogue of small models: every op kind, its options, float32/int8/uint8, per-channel and
# per-tensor weights, and a -1 batch. Each entry: (model, expected op versions by kind).

def conv_model(dtype, per_channel=False, batch=-1, padding="SAME", stride=2, activation="RELU",
               grouped=False):
    rng = np.random.default_rng(1)
    cin = 4
    # Grouped: two groups of 2 input channels, 2 filters each.
    cout, fin = (4, 2) if grouped else (3, cin)
    t = {}
    if dtype == "float32":
        t["x:0"] = Tensor("x:0", (batch, 5, 5, cin), "float32")
        t["w"] = Tensor("w", (cout, 3, 3, fin), "float32",
                        data=rng.standard_normal((cout, 3, 3, fin)))
        t["b"] = Tensor("b", (cout,), "float32", data=rng.standard_normal(cout))
        out_q = None
    else:
        in_s = 0.05
        w_s = np.array([0.01, 0.02, 0.03])[:cout] if per_channel else np.array([0.02])
        t["x:0"] = Tensor("x:0", (batch, 5, 5, cin), dtype, q(in_s, qtype_zp(dtype, -3)))
        w_zp = np.zeros(w_s.size, np.int64) + (128 if dtype == "uint8" else 0)
        t["w"] = Tensor("w", (cout, 3, 3, fin), dtype, q(w_s, w_zp),
                        data=weights(rng, (cout, 3, 3, fin), dtype))
        b_s = in_s * w_s
        t["b"] = Tensor("b", (cout,), "int32", q(b_s, np.zeros(b_s.size, np.int64)),
                        data=rng.integers(-500, 500, cout))
        out_q = q(0.1, qtype_zp(dtype, 5))
    out_hw = 3 if (stride == 2 or padding == "VALID") else 5
    t["y"] = Tensor("y", (batch, out_hw, out_hw, cout), dtype, out_q)
    op = Op("CONV_2D", ["x:0", "w", "b"], ["y"],
            {"padding": padding, "stride_h": stride, "stride_w": stride, "dilation_h": 1,
             "dilation_w": 1, "activation": activation})
    return Model(t, [op], ["x:0"], ["y"], description=f"conv {dtype}")


def depthwise_model(dtype, per_channel=False, batch=-1, dilation=1, activation="RELU6"):
    rng = np.random.default_rng(2)
    cin, mult = 2, 2
    cout = cin * mult
    t = {}
    if dtype == "float32":
        t["x"] = Tensor("x", (batch, 6, 6, cin), "float32")
        t["w"] = Tensor("w", (1, 3, 3, cout), "float32", data=rng.standard_normal((1, 3, 3, cout)))
        t["b"] = Tensor("b", (cout,), "float32", data=rng.standard_normal(cout))
        out_q = None
    else:
        in_s = 0.04
        w_s = np.linspace(0.01, 0.04, cout) if per_channel else np.array([0.03])
        t["x"] = Tensor("x", (batch, 6, 6, cin), dtype, q(in_s, qtype_zp(dtype, 1)))
        w_zp = np.zeros(w_s.size, np.int64) + (128 if dtype == "uint8" else 0)
        t["w"] = Tensor("w", (1, 3, 3, cout), dtype, q(w_s, w_zp, axis=3),
                        data=weights(rng, (1, 3, 3, cout), dtype))
        b_s = in_s * w_s
        t["b"] = Tensor("b", (cout,), "int32", q(b_s, np.zeros(b_s.size, np.int64)),
                        data=rng.integers(-300, 300, cout))
        out_q = q(0.08, qtype_zp(dtype, -2))
    t["y"] = Tensor("y", (batch, 6, 6, cout), dtype, out_q)
    op = Op("DEPTHWISE_CONV_2D", ["x", "w", "b"], ["y"],
            {"padding": "SAME", "stride_h": 1, "stride_w": 1, "dilation_h": dilation,
             "dilation_w": dilation, "depth_multiplier": mult, "activation": activation})
    return Model(t, [op], ["x"], ["y"])


def fc_model(dtype, per_channel=False, batch=-1, bias=True, activation="NONE"):
    rng = np.random.default_rng(3)
    n_in, n_out = 6, 3
    t = {}
    if dtype == "float32":
        t["x"] = Tensor("x", (batch, n_in), "float32")
        t["w"] = Tensor("w", (n_out, n_in), "float32", data=rng.standard_normal((n_out, n_in)))
        t["b"] = Tensor("b", (n_out,), "float32", data=rng.standard_normal(n_out))
        out_q = None
    else:
        in_s = 0.1
        w_s = np.array([0.01, 0.015, 0.02]) if per_channel else np.array([0.02])
        t["x"] = Tensor("x", (batch, n_in), dtype, q(in_s, qtype_zp(dtype, 0)))
        w_zp = np.zeros(w_s.size, np.int64) + (128 if dtype == "uint8" else 0)
        t["w"] = Tensor("w", (n_out, n_in), dtype, q(w_s, w_zp),
                        data=weights(rng, (n_out, n_in), dtype))
        b_s = in_s * w_s
        t["b"] = Tensor("b", (n_out,), "int32", q(b_s, np.zeros(b_s.size, np.int64)),
                        data=rng.integers(-100, 100, n_out))
        out_q = q(0.3, qtype_zp(dtype, 4))
    t["y"] = Tensor("y", (batch, n_out), dtype, out_q)
    if not bias:
        del t["b"]
    op = Op("FULLY_CONNECTED", ["x", "w", "b"] if bias else ["x", "w"], ["y"],
            {"activation": activation})
    return Model(t, [op], ["x"], ["y"])


def add_model(dtype, batch=-1, activation="NONE"):
    quant = dtype != "float32"
    t = {"a": Tensor("a", (batch, 4), dtype, q(0.1, qtype_zp(dtype, 2)) if quant else None),
         "b": Tensor("b", (batch, 4), dtype, q(0.2, qtype_zp(dtype, -1)) if quant else None),
         "y": Tensor("y", (batch, 4), dtype, q(0.25, qtype_zp(dtype, 0)) if quant else None)}
    op = Op("ADD", ["a", "b"], ["y"], {"activation": activation})
    return Model(t, [op], ["a", "b"], ["y"])


def pool_model(dtype, batch=-1, padding="VALID"):
    quant = q(0.07, qtype_zp(dtype, 3)) if dtype != "float32" else None
    out_hw = 2 if padding == "VALID" else 3
    t = {"x": Tensor("x", (batch, 5, 5, 2), dtype, quant),
         "y": Tensor("y", (batch, out_hw, out_hw, 2), dtype, quant)}
    op = Op("AVERAGE_POOL_2D", ["x"], ["y"],
            {"padding": padding, "stride_h": 2, "stride_w": 2, "filter_h": 2, "filter_w": 3,
             "activation": "NONE"})
    return Model(t, [op], ["x"], ["y"])


def mean_model(dtype, batch=-1, keep_dims=True):
    quant = q(0.07, qtype_zp(dtype, 3)) if dtype != "float32" else None
    t = {"x": Tensor("x", (batch, 4, 4, 2), dtype, quant),
         "axes": Tensor("axes", (2,), "int32", data=[1, 2]),
         "y": Tensor("y", (batch, 1, 1, 2) if keep_dims else (batch, 2), dtype, quant)}
    op = Op("MEAN", ["x", "axes"], ["y"], {"keep_dims": keep_dims})
    return Model(t, [op], ["x"], ["y"])


def reshape_model(dtype, batch=-1):
    quant = q(0.5, qtype_zp(dtype, -7)) if dtype != "float32" else None
    t = {"x": Tensor("x", (batch, 2, 3), dtype, quant),
         "shape": Tensor("shape", (2,), "int32", data=[-1, 6]),
         "y": Tensor("y", (batch, 6), dtype, quant)}
    return Model(t, [Op("RESHAPE", ["x", "shape"], ["y"])], ["x"], ["y"])


def softmax_model(dtype, batch=-1, beta=1.0):
    quant = dtype != "float32"
    out_zp = -128 if dtype == "int8" else 0
    t = {"x": Tensor("x", (batch, 5), dtype, q(0.1, qtype_zp(dtype, 0)) if quant else None),
         "y": Tensor("y", (batch, 5), dtype, q(1 / 256, out_zp) if quant else None)}
    return Model(t, [Op("SOFTMAX", ["x"], ["y"], {"beta": beta})], ["x"], ["y"])


def quant_dequant_model(dtype, batch=-1, per_channel=False):
    quant = (q([0.05, 0.1, 0.2, 0.4], [qtype_zp(dtype, k) for k in (0, 1, -2, 3)], axis=1)
             if per_channel else q(0.05, qtype_zp(dtype, 3)))
    t = {"x": Tensor("x", (batch, 4), "float32"),
         "xq": Tensor("xq", (batch, 4), dtype, quant),
         "y": Tensor("y", (batch, 4), "float32")}
    ops = [Op("QUANTIZE", ["x"], ["xq"]), Op("DEQUANTIZE", ["xq"], ["y"])]
    return Model(t, ops, ["x"], ["y"])


def chain_model():
    """Several kinds in one int8 graph, as a lowered classifier looks: quantize, conv, pool,
    reshape, fully connected, softmax, dequantize."""
    m = conv_model("int8", per_channel=True, batch=-1)
    t = dict(m.tensors)
    t["in"] = Tensor("in", (-1, 5, 5, 4), "float32")
    t["p"] = Tensor("p", (-1, 1, 1, 3), "int8", q(0.1, 5))
    t["shape"] = Tensor("shape", (2,), "int32", data=[-1, 3])
    t["r"] = Tensor("r", (-1, 3), "int8", q(0.1, 5))
    t["fw"] = Tensor("fw", (2, 3), "int8", q([0.02, 0.03], [0, 0]), data=[[1, -2, 3], [4, 5, -6]])
    t["fb"] = Tensor("fb", (2,), "int32", q([0.002, 0.003], [0, 0]), data=[10, -10])
    t["f"] = Tensor("f", (-1, 2), "int8", q(0.2, -1))
    t["s"] = Tensor("s", (-1, 2), "int8", q(1 / 256, -128))
    t["out"] = Tensor("out", (-1, 2), "float32")
    m.ops[0].name = "conv/Conv2D"
    ops = [Op("QUANTIZE", ["in"], ["x:0"], name="input/quantize")] + m.ops + [
        Op("AVERAGE_POOL_2D", ["y"], ["p"], {"padding": "VALID", "stride_h": 1, "stride_w": 1,
                                             "filter_h": 3, "filter_w": 3, "activation": "NONE"},
           name="pool"),
        Op("RESHAPE", ["p", "shape"], ["r"]),          # one op without a name
        Op("FULLY_CONNECTED", ["r", "fw", "fb"], ["f"], {"activation": "NONE"}, name="fc/MatMul"),
        Op("SOFTMAX", ["f"], ["s"], {"beta": 1.0}, name="probabilités"),
        Op("DEQUANTIZE", ["s"], ["out"], name="out/dequantize"),
    ]
    return Model(t, ops, ["in"], ["out"], description="a chain")


CATALOGUE = {
    "conv_f32": (lambda: conv_model("float32"), {"CONV_2D": 1}),
    "conv_f32_valid_s1": (lambda: conv_model("float32", padding="VALID", stride=1,
                                             activation="RELU6"), {"CONV_2D": 1}),
    "conv_f32_grouped": (lambda: conv_model("float32", grouped=True, batch=1), {"CONV_2D": 6}),
    "conv_i8_pc": (lambda: conv_model("int8", per_channel=True), {"CONV_2D": 3}),
    "conv_i8_pt": (lambda: conv_model("int8", batch=2, activation="NONE"), {"CONV_2D": 3}),
    "conv_u8": (lambda: conv_model("uint8"), {"CONV_2D": 1}),
    "dw_f32": (lambda: depthwise_model("float32"), {"DEPTHWISE_CONV_2D": 1}),
    "dw_f32_dilated": (lambda: depthwise_model("float32", dilation=2, activation="NONE"),
                       {"DEPTHWISE_CONV_2D": 2}),
    "dw_i8_pc": (lambda: depthwise_model("int8", per_channel=True), {"DEPTHWISE_CONV_2D": 3}),
    "dw_i8_dilated": (lambda: depthwise_model("int8", per_channel=True, dilation=2),
                      {"DEPTHWISE_CONV_2D": 3}),
    "dw_u8": (lambda: depthwise_model("uint8", activation="RELU"), {"DEPTHWISE_CONV_2D": 1}),
    "fc_f32": (lambda: fc_model("float32", activation="RELU"), {"FULLY_CONNECTED": 1}),
    "fc_i8_pc": (lambda: fc_model("int8", per_channel=True), {"FULLY_CONNECTED": 4}),
    "fc_i8_pt": (lambda: fc_model("int8", batch=3, activation="RELU6"), {"FULLY_CONNECTED": 4}),
    "fc_i8_no_bias": (lambda: fc_model("int8", bias=False), {"FULLY_CONNECTED": 6}),
    "fc_u8": (lambda: fc_model("uint8"), {"FULLY_CONNECTED": 1}),
    "add_f32": (lambda: add_model("float32", activation="RELU"), {"ADD": 1}),
    "add_i8": (lambda: add_model("int8"), {"ADD": 2}),
    "add_u8": (lambda: add_model("uint8", activation="RELU6"), {"ADD": 1}),
    "pool_f32": (lambda: pool_model("float32", padding="SAME"), {"AVERAGE_POOL_2D": 1}),
    "pool_i8": (lambda: pool_model("int8"), {"AVERAGE_POOL_2D": 2}),
    "pool_u8": (lambda: pool_model("uint8", padding="SAME"), {"AVERAGE_POOL_2D": 1}),
    "mean_f32": (lambda: mean_model("float32", keep_dims=False), {"MEAN": 1}),
    "mean_i8": (lambda: mean_model("int8"), {"MEAN": 2}),
    "mean_u8": (lambda: mean_model("uint8", keep_dims=False), {"MEAN": 1}),
    "reshape_f32": (lambda: reshape_model("float32"), {"RESHAPE": 1}),
    "reshape_i8": (lambda: reshape_model("int8"), {"RESHAPE": 1}),
    "reshape_u8": (lambda: reshape_model("uint8", batch=2), {"RESHAPE": 1}),
    "softmax_f32": (lambda: softmax_model("float32", beta=0.5), {"SOFTMAX": 1}),
    "softmax_i8": (lambda: softmax_model("int8"), {"SOFTMAX": 2}),
    "softmax_u8": (lambda: softmax_model("uint8"), {"SOFTMAX": 1}),
    "qdq_i8": (lambda: quant_dequant_model("int8"), {"QUANTIZE": 1, "DEQUANTIZE": 2}),
    "qdq_u8": (lambda: quant_dequant_model("uint8", batch=3), {"QUANTIZE": 1, "DEQUANTIZE": 1}),
    "qdq_i8_pc": (lambda: quant_dequant_model("int8", per_channel=True),
                  {"QUANTIZE": 3, "DEQUANTIZE": 5}),
    "qdq_u8_pc": (lambda: quant_dequant_model("uint8", per_channel=True),
                  {"QUANTIZE": 3, "DEQUANTIZE": 1}),
    "chain": (chain_model, {"QUANTIZE": 1, "CONV_2D": 3, "AVERAGE_POOL_2D": 2, "RESHAPE": 1,
                            "FULLY_CONNECTED": 4, "SOFTMAX": 2, "DEQUANTIZE": 2}),
}

# runtime_version.cc's entries for the versions above (the max over a model's ops is written).
EXPECTED_RUNTIME = {
    ("CONV_2D", 1): "1.5.0", ("CONV_2D", 3): "1.14.0", ("CONV_2D", 6): "2.9.0",
    ("DEPTHWISE_CONV_2D", 1): "1.5.0", ("DEPTHWISE_CONV_2D", 2): "1.12.0",
    ("DEPTHWISE_CONV_2D", 3): "1.14.0",
    ("FULLY_CONNECTED", 1): "1.5.0", ("FULLY_CONNECTED", 4): "1.14.0",
    ("FULLY_CONNECTED", 6): "2.1.0",
    ("ADD", 1): "1.5.0", ("ADD", 2): "1.14.0",
    ("AVERAGE_POOL_2D", 1): "1.5.0", ("AVERAGE_POOL_2D", 2): "1.14.0",
    ("MEAN", 1): "1.6.0", ("MEAN", 2): "1.14.0", ("RESHAPE", 1): "1.5.0",
    ("SOFTMAX", 1): "1.5.0", ("SOFTMAX", 2): "1.14.0",
    ("QUANTIZE", 1): "1.14.0", ("QUANTIZE", 3): "2.7.0",
    ("DEQUANTIZE", 1): "1.13.1", ("DEQUANTIZE", 2): "1.14.0", ("DEQUANTIZE", 5): "2.7.0",
}


def _version_key(v):
    return tuple(int(p) for p in v.split("."))


@pytest.fixture(params=sorted(CATALOGUE))
def entry(request):
    build, versions = CATALOGUE[request.param]
    return build(), versions


def test_catalogue_covers_every_kind_option_and_type():
    kinds, dtypes = set(), set()
    for build, _ in CATALOGUE.values():
        m = build()
        kinds.update(op.kind for op in m.ops)
        dtypes.update(t.dtype for t in m.tensors.values())
    assert kinds == set(fb.BUILTIN_CODES)
    assert dtypes == {"float32", "int8", "uint8", "int32"}


# --------------------------------------------------------------------------------------------
# Round trips

def test_round_trip(entry):
    m, _ = entry
    back = read(write(m), source="m.tflite")
    assert back == m
    assert list(back.tensors) == list(m.tensors)      # file order is kept
    assert back.description == m.description


def test_write_is_deterministic(entry):
    m, _ = entry
    assert write(m) == write(m)


def test_round_trip_keeps_per_channel_axis_and_batch():
    m = depthwise_model("int8", per_channel=True)
    back = read(write(m))
    assert back.tensors["w"].quantization.axis == 3
    assert back.tensors["w"].quantization.scale.size == 4
    assert back.tensors["x"].shape == (-1, 6, 6, 2)
    assert back.tensors["w"].data.dtype == np.int8


def test_op_names_travel_in_metadata_only_when_there_are_some():
    schema = _litert_schema()
    m = chain_model()
    back = read(write(m))
    assert [op.name for op in back.ops] == [op.name for op in m.ops]
    assert back.ops[3].name == ""

    def metadata_names(model):
        fm = schema.Model.GetRootAsModel(write(model), 0)
        return [fm.Metadata(i).Name().decode() for i in range(fm.MetadataLength())]
    assert metadata_names(m) == ["min_runtime_version", "fqcore_op_names"]
    assert metadata_names(add_model("int8")) == ["min_runtime_version"]


def test_read_file(tmp_path):
    path = tmp_path / "model.tflite"
    path.write_bytes(write(chain_model()))
    assert read_file(path) == chain_model()
    path.write_bytes(b"TFL3" * 3)
    with pytest.raises(ValueError, match="model.tflite"):
        read_file(path)
    with pytest.raises(FileNotFoundError, match="missing.tflite"):
        read_file(tmp_path / "missing.tflite")


# --------------------------------------------------------------------------------------------
# The file's contents, seen through LiteRT's own generated schema reader (not ours).

def _litert_schema():
    pytest.importorskip("ai_edge_litert")
    from ai_edge_litert import schema_py_generated as schema
    return schema


def test_op_versions_and_min_runtime(entry):
    schema = _litert_schema()
    m, versions = entry
    data = write(m)
    assert data[4:8] == b"TFL3"
    fm = schema.Model.GetRootAsModel(data, 0)
    assert fm.Version() == 3
    assert fm.Description().decode() == m.description
    codes = [fm.OperatorCodes(i) for i in range(fm.OperatorCodesLength())]
    found = {}
    for c in codes:
        code = c.BuiltinCode()
        assert c.DeprecatedBuiltinCode() == min(code, 127)
        found[fb.BUILTIN_OPERATOR_NAMES[code]] = c.Version()
    assert found == versions
    want = max((EXPECTED_RUNTIME[k] for k in versions.items()), key=_version_key)
    metadata = {fm.Metadata(i).Name().decode(): fm.Metadata(i).Buffer()
                for i in range(fm.MetadataLength())}
    raw = fm.Buffers(metadata["min_runtime_version"]).DataAsNumpy().tobytes()
    assert raw == want.encode().ljust(16, b"\0")
    assert fm.Buffers(0).DataLength() == 0


def test_tensors_in_the_file():
    schema = _litert_schema()
    m = conv_model("int8", per_channel=True)
    fm = schema.Model.GetRootAsModel(write(m), 0)
    sg = fm.Subgraphs(0)
    x = sg.Tensors(0)
    assert x.Name().decode() == "x:0"
    assert x.ShapeAsNumpy().tolist() == [1, 5, 5, 4]            # -1 written as 1 ...
    assert x.ShapeSignatureAsNumpy().tolist() == [-1, 5, 5, 4]  # ... and kept in the signature
    w = sg.Tensors(1)
    assert w.Type() == schema.TensorType.INT8
    assert w.Quantization().ScaleAsNumpy().tolist() == m.tensors["w"].quantization.scale.tolist()
    assert w.Quantization().ZeroPointAsNumpy().dtype == np.int64
    data = fm.Buffers(w.Buffer()).DataAsNumpy()
    assert data.tobytes() == m.tensors["w"].data.tobytes()
    b = sg.Tensors(2)
    assert b.Type() == schema.TensorType.INT32
    assert fm.Buffers(b.Buffer()).DataAsNumpy().view("<i4").tolist() == \
        m.tensors["b"].data.tolist()
    op = sg.Operators(0)
    assert op.BuiltinOptionsType() == schema.BuiltinOptions.Conv2DOptions
    opts = schema.Conv2DOptions()
    opts.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    assert (opts.Padding(), opts.StrideH(), opts.StrideW(), opts.FusedActivationFunction(),
            opts.DilationHFactor(), opts.DilationWFactor()) == (
        schema.Padding.SAME, 2, 2, schema.ActivationFunctionType.RELU, 1, 1)
    sig = fm.SignatureDefs(0)
    assert sig.SignatureKey().decode() == "serving_default"
    assert sig.Inputs(0).Name().decode() == "x"
    assert sig.Inputs(0).TensorIndex() == 0
    assert sig.Outputs(0).Name().decode() == "y"


def test_reshape_options_carry_new_shape():
    schema = _litert_schema()
    fm = schema.Model.GetRootAsModel(write(reshape_model("int8")), 0)
    op = fm.Subgraphs(0).Operators(0)
    assert op.BuiltinOptionsType() == schema.BuiltinOptions.ReshapeOptions
    opts = schema.ReshapeOptions()
    opts.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    assert opts.NewShapeAsNumpy().tolist() == [-1, 6]


def test_constant_data_is_aligned():
    schema = _litert_schema()
    data = write(fc_model("float32"))
    fm = schema.Model.GetRootAsModel(data, 0)
    for i in range(1, fm.BuffersLength()):
        buf = fm.Buffers(i)
        if buf.DataLength():
            start = buf._tab.Vector(buf._tab.Offset(4))
            assert start % 16 == 0


# --------------------------------------------------------------------------------------------
# LiteRT loads and runs every written model.

def _interpreter(data):
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    return litert.Interpreter(model_content=data,
                              experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)


def _random_input(rng, tensor, shape):
    if tensor.dtype == "float32":
        return rng.uniform(-2, 2, shape).astype(np.float32)
    info = np.iinfo(tensor.dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(tensor.dtype)


def _run(m, batch=2, feeds=None, seed=0):
    """Runs m under LiteRT with the -1 batch resized to `batch`; returns (interpreter, inputs,
    outputs) with arrays by model tensor name."""
    it = _interpreter(write(m))
    rng = np.random.default_rng(seed)
    details = {d["name"]: d for d in it.get_input_details()}
    feeds = dict(feeds or {})
    for name in m.inputs:
        t = m.tensors[name]
        shape = tuple(batch if d == -1 else d for d in t.shape)
        feeds.setdefault(name, _random_input(rng, t, shape))
        if -1 in t.shape:
            it.resize_tensor_input(details[name]["index"], feeds[name].shape)
    it.allocate_tensors()
    for name in m.inputs:
        it.set_tensor(details[name]["index"], feeds[name])
    it.invoke()
    outs = {d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()}
    return it, feeds, outs


def test_litert_runs_it(entry):
    m, _ = entry
    it, _, outs = _run(m)
    assert set(outs) == set(m.outputs)
    for name, value in outs.items():
        t = m.tensors[name]
        assert value.dtype == np.dtype(t.dtype)
        assert value.shape == tuple(2 if d == -1 else d for d in t.shape)
        if t.dtype == "float32":
            assert np.all(np.isfinite(value))


def test_litert_signature(entry):
    m, _ = entry
    it = _interpreter(write(m))
    strip = [n[:-2] if n.endswith(":0") else n for n in m.inputs]
    sigs = it.get_signature_list()
    assert list(sigs) == ["serving_default"]
    assert sorted(sigs["serving_default"]["inputs"]) == sorted(strip)
    assert sorted(sigs["serving_default"]["outputs"]) == sorted(m.outputs)


def test_litert_tensor_details(entry):
    m, _ = entry
    it = _interpreter(write(m))
    details = {d["name"]: d for d in it.get_tensor_details()}
    assert set(details) == set(m.tensors)
    for name, t in m.tensors.items():
        d = details[name]
        assert d["dtype"] == np.dtype(t.dtype)
        assert d["shape_signature"].tolist() == list(t.shape)
        qp = d["quantization_parameters"]
        if t.quantization is None:
            assert qp["scales"].size == 0
        else:
            np.testing.assert_array_equal(qp["scales"], t.quantization.scale)
            np.testing.assert_array_equal(qp["zero_points"], t.quantization.zero_point)
            assert qp["quantized_dimension"] == t.quantization.axis
        if t.data is not None:
            np.testing.assert_array_equal(it.get_tensor(d["index"]), t.data)


def _quantize(x, scale, zp, dtype, axis=None):
    """TFLite's QUANTIZE: round half away from zero, then clamp."""
    info = np.iinfo(dtype)
    if axis is not None:
        shape = [1] * x.ndim
        shape[axis] = -1
        scale, zp = np.reshape(scale, shape), np.reshape(zp, shape)
    v = x / np.float32(scale)
    v = np.sign(v) * np.floor(np.abs(v) + 0.5)
    return np.clip(v + zp, info.min, info.max).astype(dtype)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_litert_quantize_dequantize_values(dtype, per_channel):
    m = quant_dequant_model(dtype, per_channel=per_channel)
    rng = np.random.default_rng(7)
    x = rng.uniform(-8, 8, (5, 4)).astype(np.float32)
    _, _, outs = _run(m, batch=5, feeds={"x": x})
    qz = m.tensors["xq"].quantization
    axis = 1 if per_channel else None
    scale = qz.scale if per_channel else qz.scale[0]
    zp = qz.zero_point if per_channel else qz.zero_point[0]
    grid = _quantize(x, scale, zp, dtype, axis)
    want = (grid.astype(np.float32) - (zp if axis is None else zp[None, :])) * np.float32(
        scale if axis is None else scale[None, :])
    np.testing.assert_allclose(outs["y"], want, rtol=1e-6, atol=1e-6)


def test_litert_reshape_values():
    m = reshape_model("int8")
    _, feeds, outs = _run(m, batch=3)
    np.testing.assert_array_equal(outs["y"], feeds["x"].reshape(3, 6))


def test_litert_float_fc_values():
    m = fc_model("float32", activation="RELU")
    _, feeds, outs = _run(m, batch=4)
    want = np.maximum(feeds["x"] @ m.tensors["w"].data.T + m.tensors["b"].data, 0)
    np.testing.assert_allclose(outs["y"], want, rtol=1e-5, atol=1e-5)


def test_litert_float_mean_and_softmax_values():
    m = mean_model("float32", keep_dims=False)
    _, feeds, outs = _run(m, batch=2)
    np.testing.assert_allclose(outs["y"], feeds["x"].mean(axis=(1, 2)), rtol=1e-5, atol=1e-6)
    m = softmax_model("float32", beta=0.5)
    _, feeds, outs = _run(m, batch=2)
    e = np.exp(0.5 * (feeds["x"] - feeds["x"].max(axis=1, keepdims=True)))
    np.testing.assert_allclose(outs["y"], e / e.sum(axis=1, keepdims=True), rtol=1e-5)


# --------------------------------------------------------------------------------------------
# write() refuses what it cannot write faithfully

def test_write_rejects_bad_models():
    m = conv_model("int8", per_channel=True)
    m.ops[0].options["stride_h"] = 0
    with pytest.raises(ValueError, match=r"op 0 \(CONV_2D\).*stride_h"):
        write(m)
    m = conv_model("int8")
    del m.ops[0].options["dilation_w"]
    with pytest.raises(ValueError, match="options must be exactly"):
        write(m)
    m = conv_model("int8")
    m.ops[0].options["activation"] = "TANH"
    with pytest.raises(ValueError, match="activation"):
        write(m)
    m = conv_model("int8")
    m.ops[0].inputs[1] = "nope"
    with pytest.raises(ValueError, match="'nope' is not a tensor"):
        write(m)
    m = conv_model("int8", per_channel=True)
    m.tensors["w"].quantization = q([0.1, 0.2], [0, 0])
    with pytest.raises(ValueError, match=r"tensor 1 \('w'\).*2 scales"):
        write(m)
    m = fc_model("int8")
    m.tensors["x"].quantization = None
    with pytest.raises(ValueError, match="int8 tensor 'x' has no quantization"):
        write(m)
    m = reshape_model("int8")
    m.ops.reverse()
    m.ops.append(Op("RESHAPE", ["y", "shape"], ["y"]))
    with pytest.raises(ValueError, match="already has a value"):
        write(m)
    m = fc_model("float32")
    m.tensors["w"].data = m.tensors["w"].data.reshape(-1)
    with pytest.raises(ValueError, match="data has shape"):
        write(m)


def test_write_rejects_colliding_signature_names():
    m = Model({"a": Tensor("a", (2,), "float32"), "a:0": Tensor("a:0", (2,), "float32"),
               "y": Tensor("y", (2,), "float32")},
              [Op("ADD", ["a", "a:0"], ["y"], {"activation": "NONE"})], ["a", "a:0"], ["y"])
    with pytest.raises(ValueError, match="signature name 'a'"):
        write(m)


# --------------------------------------------------------------------------------------------
# Foreign and damaged files. A small hand-made flatbuffer builder, independent of write(), makes
# valid TFLite files with what write() never produces.

def _foreign(ops=("TANH",), tensor_type=0, buffer_bytes=None, shape=(1, 4), scales=None,
             zero_points=None, subgraphs=1, custom=None):
    """A float32 model x -> op -> op ... -> y. buffer_bytes: give x a constant buffer instead."""
    flatbuffers = pytest.importorskip("flatbuffers")
    b = flatbuffers.Builder(256)

    def ivec(values):
        return b.CreateNumpyVector(np.asarray(values, np.int32))

    def offvec(offs):
        b.StartVector(4, len(offs), 4)
        for off in reversed(offs):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    def buffer(payload):
        data = b.CreateByteVector(payload) if payload else None
        b.StartObject(3)
        if data is not None:
            b.PrependUOffsetTRelativeSlot(0, data, 0)
        return b.EndObject()

    def tensor(name, type_, buf, quant=None):
        s, n = ivec(shape), b.CreateString(name)
        qt = None
        if quant is not None:
            sc = b.CreateNumpyVector(np.asarray(quant[0], np.float32))
            zp = b.CreateNumpyVector(np.asarray(quant[1], np.int64))
            b.StartObject(7)
            b.PrependUOffsetTRelativeSlot(2, sc, 0)
            b.PrependUOffsetTRelativeSlot(3, zp, 0)
            qt = b.EndObject()
        b.StartObject(10)
        b.PrependUOffsetTRelativeSlot(0, s, 0)
        b.PrependInt8Slot(1, type_, 0)
        b.PrependUint32Slot(2, buf, 0)
        b.PrependUOffsetTRelativeSlot(3, n, 0)
        if qt is not None:
            b.PrependUOffsetTRelativeSlot(4, qt, 0)
        return b.EndObject()

    buffers = [buffer(b""), buffer(buffer_bytes or b"")]
    quant = (scales, zero_points) if scales is not None else None
    names = ["x"] + [f"t{i}" for i in range(len(ops))]
    tensors = [tensor(names[0], tensor_type, 1 if buffer_bytes else 0, quant)]
    tensors += [tensor(n, 0, 0) for n in names[1:]]
    codes = []
    for kind in ops:
        code = fb.CUSTOM if kind == "CUSTOM" else fb.BUILTIN_OPERATOR_NAMES.index(kind)
        cc = b.CreateString(custom) if kind == "CUSTOM" else None
        b.StartObject(4)
        b.PrependInt8Slot(0, min(code, 127), 0)
        if cc is not None:
            b.PrependUOffsetTRelativeSlot(1, cc, 0)
        b.PrependInt32Slot(3, code, 0)
        codes.append(b.EndObject())
    operators = []
    for i in range(len(ops)):
        ins, outs = ivec([i]), ivec([i + 1])
        b.StartObject(13)
        b.PrependUint32Slot(0, i, 0)
        b.PrependUOffsetTRelativeSlot(1, ins, 0)
        b.PrependUOffsetTRelativeSlot(2, outs, 0)
        operators.append(b.EndObject())
    graphs = []
    for _ in range(subgraphs):
        tv, iv, ov, opv = offvec(tensors), ivec([0]), ivec([len(ops)]), offvec(operators)
        b.StartObject(5)
        b.PrependUOffsetTRelativeSlot(0, tv, 0)
        b.PrependUOffsetTRelativeSlot(1, iv, 0)
        b.PrependUOffsetTRelativeSlot(2, ov, 0)
        b.PrependUOffsetTRelativeSlot(3, opv, 0)
        graphs.append(b.EndObject())
    cv, gv, bv = offvec(codes), offvec(graphs), offvec(buffers)
    b.StartObject(8)
    b.PrependUint32Slot(0, 3, 0)
    b.PrependUOffsetTRelativeSlot(1, cv, 0)
    b.PrependUOffsetTRelativeSlot(2, gv, 0)
    b.PrependUOffsetTRelativeSlot(4, bv, 0)
    b.Finish(b.EndObject(), file_identifier=b"TFL3")
    return bytes(b.Output())


def test_foreign_model_with_an_op_we_do_not_run():
    data = _foreign(ops=("TANH",))
    it = _interpreter(data)            # a valid file: LiteRT runs it
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], np.zeros((1, 4), np.float32))
    it.invoke()
    with pytest.raises(ValueError,
                       match=r"^tanh\.tflite: op 0 is TANH, which fqcore\.deploy does not run$"):
        read(data, source="tanh.tflite")


def test_foreign_second_op_and_custom_op_are_named():
    with pytest.raises(ValueError, match="op 1 is LOGISTIC, which"):
        read(_foreign(ops=("SOFTMAX", "LOGISTIC")))
    with pytest.raises(ValueError, match="op 0 is the custom op 'MyOp', which"):
        read(_foreign(ops=("CUSTOM",), custom="MyOp"))


def test_foreign_file_errors_name_the_entry():
    with pytest.raises(ValueError, match=r"^f\.tflite: tensor 0 \('x'\): type INT16, which"):
        read(_foreign(tensor_type=7), source="f.tflite")
    with pytest.raises(ValueError, match=r"tensor 0 \('x'\): buffer holds 120 bytes, shape "
                                         r"\[8, 3, 3, 1\] int8 needs 72$"):
        read(_foreign(tensor_type=9, shape=(8, 3, 3, 1), buffer_bytes=bytes(120), scales=[0.1],
                      zero_points=[0]), source="f.tflite")
    with pytest.raises(ValueError, match=r"tensor 0 \('x'\): quantization has 2 scales and 1 "
                                         r"zero points"):
        read(_foreign(scales=[0.1, 0.2], zero_points=[0]))
    with pytest.raises(ValueError, match=r"tensor 0 \('x'\): 3 scales along dimension 0"):
        read(_foreign(tensor_type=9, shape=(2, 4), scales=[0.1, 0.2, 0.3], zero_points=[0, 0, 0],
                      ops=("DEQUANTIZE",)))
    with pytest.raises(ValueError, match="has 2 subgraphs"):
        read(_foreign(subgraphs=2))


def test_wrong_identifier_empty_and_short_input():
    data = bytearray(write(add_model("int8")))
    data[4:8] = b"TFL2"
    with pytest.raises(ValueError, match=r"^x\.tflite: model: file identifier is b'TFL2'"):
        read(bytes(data), source="x.tflite")
    for short in (b"", b"TFL3", bytes(7)):
        with pytest.raises(ValueError, match="too short"):
            read(short)
    with pytest.raises(TypeError):
        read("not bytes")


def test_absurd_sizes_are_refused_before_allocation():
    with pytest.raises(ValueError, match=r"tensor 0 \('x'\): shape \[65536, 65536\] has "
                                         r"4294967296 elements"):
        read(_foreign(shape=(65536, 65536)))
    with pytest.raises(ValueError, match=r"rank 9 is more than 8"):
        read(_foreign(shape=(1,) * 9))
    # A vector claiming 2**32 - 1 elements: found by the bounds check, nothing allocated.
    schema = _litert_schema()
    data = bytearray(_foreign())
    x = schema.Model.GetRootAsModel(data, 0).Subgraphs(0).Tensors(0)
    shape_start = x._tab.Vector(x._tab.Offset(4))
    struct.pack_into("<I", data, shape_start - 4, 0xFFFFFFFF)
    with pytest.raises(ValueError, match=r"^<bytes>: tensor 0, shape: 4294967295 elements of 4 "
                                         r"bytes at offset \d+ run past the end of the "
                                         r"\d+-byte file$"):
        read(bytes(data))


def test_wrong_schema_version():
    data = bytearray(write(add_model("int8")))
    # The root table's version field is the only 3 written as a uint32 before the tables; find
    # it through the vtable rather than guessing.
    root = struct.unpack_from("<I", data, 0)[0]
    vt = root - struct.unpack_from("<i", data, root)[0]
    field = struct.unpack_from("<H", data, vt + 4)[0]
    struct.pack_into("<I", data, root + field, 4)
    with pytest.raises(ValueError, match="schema version 4"):
        read(bytes(data))


def _read_or_value_error(data, round_trip=True):
    """read() of damaged bytes: a ValueError naming the file, or a Model that (round_trip)
    write() takes and that comes back the same: read() and write() check the same rules."""
    try:
        m = read(data, source="fuzz.tflite")
    except ValueError as e:
        assert str(e).startswith("fuzz.tflite: ")
        return None
    assert isinstance(m, Model)
    if round_trip:
        assert read(write(m)) == m
    return m


def test_every_truncation():
    data = write(chain_model())
    assert _read_or_value_error(data) is not None
    for n in range(len(data)):
        _read_or_value_error(data[:n])


def test_random_single_byte_corruptions():
    data = write(chain_model())
    rnd = random.Random(RNG_SEED)
    for i in range(3000):
        b = bytearray(data)
        b[rnd.randrange(len(b))] = rnd.randrange(256)
        # Most damage that reads back is in names; writing every one again costs more than
        # it finds, so a tenth of them are.
        _read_or_value_error(bytes(b), round_trip=i % 10 == 0)


def test_random_multi_byte_corruptions():
    data = write(chain_model())
    rnd = random.Random(RNG_SEED + 1)
    for i in range(1500):
        b = bytearray(data)
        for _ in range(rnd.randint(2, 12)):
            pos = rnd.randrange(len(b))
            if rnd.random() < 0.3:     # a plausible offset or length, to reach deeper checks
                struct.pack_into("<I", b, min(pos, len(b) - 4) & ~3,
                                 rnd.choice([0, 1, 4, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF,
                                             rnd.randrange(len(b))]))
            else:
                b[pos] = rnd.randrange(256)
        _read_or_value_error(bytes(b), round_trip=i % 10 == 0)


def test_a_vector_shared_by_many_tables_is_refused():
    """Every tensor pointing at one quantization table with long vectors: a small file that asks
    for a great deal of reading, unless the reader's budget stops it."""
    flatbuffers = pytest.importorskip("flatbuffers")
    b = flatbuffers.Builder(1024)
    n_channels, n_tensors = 20000, 3000
    scale = b.CreateNumpyVector(np.ones(n_channels, np.float32))
    zero_point = b.CreateNumpyVector(np.zeros(n_channels, np.int64))
    b.StartObject(7)
    b.PrependUOffsetTRelativeSlot(2, scale, 0)
    b.PrependUOffsetTRelativeSlot(3, zero_point, 0)
    quant = b.EndObject()
    tensors = []
    for i in range(n_tensors):
        name = b.CreateString(f"t{i}")
        b.StartObject(10)
        b.PrependUOffsetTRelativeSlot(3, name, 0)
        b.PrependUOffsetTRelativeSlot(4, quant, 0)
        tensors.append(b.EndObject())
    b.StartVector(4, n_tensors, 4)
    for t in reversed(tensors):
        b.PrependUOffsetTRelative(t)
    tensors = b.EndVector()
    b.StartObject(5)
    b.PrependUOffsetTRelativeSlot(0, tensors, 0)
    graph = b.EndObject()
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(graph)
    graphs = b.EndVector()
    b.StartObject(8)
    b.PrependUint32Slot(0, 3, 0)
    b.PrependUOffsetTRelativeSlot(2, graphs, 0)
    b.Finish(b.EndObject(), file_identifier=b"TFL3")
    with pytest.raises(ValueError, match="far more data"):
        read(bytes(b.Output()))
