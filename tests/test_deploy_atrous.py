"""Atrous (dilated) convolutions exported: the SpaceToBatchND -> conv -> BatchToSpaceND that
fqcore.graph.layers builds (and the quantize rewrite folds) becomes one dilated CONV_2D /
DEPTHWISE_CONV_2D, as TFLite's converter makes it; the integer model stays within a step of the
fake-quant graph where a plain conv does, equals LiteRT's reference kernels and ONNX Runtime bit
for bit, and a SpaceToBatchND that is not exactly a dilation is refused, naming the ops."""
import functools
import itertools
from types import SimpleNamespace

import numpy as np
import pytest

import fqcore.graph as G
from fqcore import quantize
from fqcore.deploy import Interpreter, compare, runtimes, tflite_format, to_onnx, to_tflite
from fqcore.deploy.lower import lower
from fqcore.graph import build
from fqcore.graph.variables import variable

KINDS = ("conv2d", "depthwise", "separable", "separable_none")
NORMS = ("bias", "fused", "unfused")
# int8: per-channel symmetric weights; uint8: contrib's asymmetric per-tensor ones.
WEIGHTS = ("int8", "uint8")
CASES = list(itertools.product(KINDS, (2, 3), ("SAME", "VALID"), (12, 13), NORMS, WEIGHTS))
# The same layers without dilation: the bounds the atrous ones are held to are theirs.
CONTROLS = list(itertools.product(KINDS, (1,), ("SAME", "VALID"), (12, 13), NORMS, WEIGHTS))
ROUNDINGS = ("tflite_reference", "single", "float32_half_even")
_FAKE_QUANTS = ("FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel")


def _case_id(case):
    kind, rate, padding, size, norm, weights = case
    return f"{kind}-r{rate}-{padding}-{size}-{norm}-{weights}"


def _need(module):
    pytest.importorskip(module)


# -- building and calibrating --------------------------------------------------------------------
def _graph(kind, rate, padding, size, norm):
    """input [N, size, size, 3] -> the layer under test (relu) -> mean -> dense 4."""
    g = G.Graph()
    g.seed = 5
    L = G.layers
    with g.as_default():
        images = G.placeholder("float32", [None, size, size, 3], name="images")
        x = G.fake_quant_with_min_max_args(images, min=-1.0, max=1.0, name="input_quant")
        options = dict(dilation=rate, padding=padding, is_training=False, scope="atrous")
        if norm != "bias":
            options["batch_norm"] = True if norm == "fused" else dict(fused=False)
        if kind == "conv2d":
            y = L.conv2d(x, 6, 3, **options)
        elif kind == "depthwise":
            y = L.depthwise_conv2d(x, 3, depth_multiplier=2, **options)
        elif kind == "separable":
            y = L.separable_conv2d(x, 5, 3, depth_multiplier=2, **options)
        else:
            y = L.separable_conv2d(x, None, 3, **options)
        logits = L.dense(L.global_avg_pool(y, scope="pool"), 4, scope="fc")
    return g, images, y, logits


def _calibrate(g, session, images, data, symmetric, seed):
    """Trained-looking variables: random batch-norm statistics and biases; each weight range its
    weights' own [min, max] widened to 0 (symmetric for int8), as test_deploy_lowering sets them;
    each activation range the [min, max] (widened to 0) it sees on `data`."""
    rng = np.random.default_rng(seed)
    for op in g.get_operations():
        if op.type != "VariableV2":
            continue
        name, shape = op.name, op.outputs[0].shape
        if name.endswith("BatchNorm/gamma"):
            value = rng.uniform(0.5, 1.5, shape)
        elif name.endswith(("BatchNorm/beta", "/biases", "BatchNorm/moving_mean")):
            value = rng.standard_normal(shape) * 0.2
        elif name.endswith("BatchNorm/moving_variance"):
            value = rng.uniform(0.5, 2.0, shape)
        else:
            continue
        session.set_variable_value(name, value.astype(np.float32))
    fake_quants = [op for op in g.get_operations() if op.type in _FAKE_QUANTS]
    for op in fake_quants:
        if "weights_quant" not in op.name:
            continue
        w = session.run(op.inputs[0])
        axes = tuple(range(w.ndim - 1)) if op.type.endswith("PerChannel") else None
        lo, hi = np.minimum(w.min(axis=axes), 0), np.maximum(w.max(axis=axes), 0)
        if symmetric:
            hi = np.maximum(-lo, hi)
            lo = -hi
        scope = op.name.rsplit("/", 1)[0]
        session.set_variable_value(scope + "/min", np.asarray(lo, np.float32))
        session.set_variable_value(scope + "/max", np.asarray(hi, np.float32))
    for _ in range(2):      # the second pass sees the ranges the first set upstream
        for op in fake_quants:
            if "weights_quant" in op.name:
                continue
            v = session.run(op.inputs[0], {images: data})
            scope = op.name.rsplit("/", 1)[0]
            session.set_variable_value(scope + "/min", np.float32(min(v.min(), 0.0)))
            session.set_variable_value(scope + "/max", np.float32(max(v.max(), 0.0)))


@functools.lru_cache(maxsize=None)
def _exported(case):
    """The calibrated eval graph of `case` and its exports, outputs the layer and the logits."""
    kind, rate, padding, size, norm, weights = case
    g, images, y, logits = _graph(kind, rate, padding, size, norm)
    if weights == "int8":
        quantize.create_eval_graph(g, weight_per_channel=True)
    else:
        quantize.create_eval_graph(g)
    session = G.Session(g)
    session.run(G.global_variables_initializer(g))
    seed = CASES.index(case) if case in CASES else 1000 + CONTROLS.index(case)
    data = np.random.default_rng(seed).uniform(-1.2, 1.2, (16, size, size, 3)).astype(np.float32)
    _calibrate(g, session, images, data, weights == "int8", seed)
    tflite = to_tflite(session, images, [y, logits])
    assert tflite.dtype == weights
    return SimpleNamespace(session=session, images=images, outputs=[y, logits], data=data,
                           tflite=tflite)


def _onnx(case):
    _need("onnx")
    found = _exported(case)
    if not hasattr(found, "onnx"):
        found.onnx = to_onnx(found.session, found.images, found.outputs)
    return found.onnx


def _dilated_layer(model):
    """The model's one dilated layer (the depthwise half of a separable conv)."""
    layers = [op for op in model.ops if op.kind in ("CONV_2D", "DEPTHWISE_CONV_2D")]
    return layers[0], layers[1:]


# -- the model's structure -----------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_an_atrous_layer_becomes_one_dilated_conv(case):
    kind, rate, padding, size, norm, weights = case
    model = _exported(case).tflite.model
    kinds = [op.kind for op in model.ops]
    layer_kind = "CONV_2D" if kind == "conv2d" else "DEPTHWISE_CONV_2D"
    pointwise = ["CONV_2D"] if kind == "separable" else []
    assert kinds == (["QUANTIZE", layer_kind] + pointwise
                     + ["MEAN", "DEQUANTIZE", "FULLY_CONNECTED", "DEQUANTIZE"])
    assert "SPACE_TO_BATCH_ND" not in kinds and "BATCH_TO_SPACE_ND" not in kinds
    layer, rest = _dilated_layer(model)
    assert {k: layer.options[k] for k in ("padding", "stride_h", "stride_w", "dilation_h",
                                          "dilation_w")} == dict(
        padding=padding, stride_h=1, stride_w=1, dilation_h=rate, dilation_w=rate)
    # The layer reads the input itself, not a space-to-batch copy, and writes the image's grid.
    assert layer.inputs[0] == "input_quant"
    out_size = size if padding == "SAME" else size - 2 * rate
    assert model.tensor(layer.outputs[0]).shape[1:3] == (out_size, out_size)
    assert layer.options["activation"] == ("NONE" if kind == "separable" else "RELU")
    for op in rest:     # the separable conv's 1x1 pointwise conv
        assert op.options["dilation_h"] == op.options["dilation_w"] == 1
        assert op.options["activation"] == "RELU"
    # The file holds the same model, dilation factors included.
    assert tflite_format.read(bytes(_exported(case).tflite)) == model


@pytest.mark.parametrize("case", CASES[::7], ids=_case_id)
def test_the_tflite_file_has_the_dilation_and_tflites_op_versions(case):
    _need("ai_edge_litert")
    from ai_edge_litert import schema_py_generated as schema
    kind, rate, _, _, _, weights = case
    data = bytes(_exported(case).tflite)
    fm = schema.Model.GetRootAsModel(data, 0)
    codes = [fm.OperatorCodes(i) for i in range(fm.OperatorCodesLength())]
    graph = fm.Subgraphs(0)
    layer = next(graph.Operators(i) for i in range(graph.OperatorsLength())
                 if codes[graph.Operators(i).OpcodeIndex()].BuiltinCode() in (
                     schema.BuiltinOperator.CONV_2D, schema.BuiltinOperator.DEPTHWISE_CONV_2D))
    code = codes[layer.OpcodeIndex()]
    table = layer.BuiltinOptions()
    if kind == "conv2d":
        options = schema.Conv2DOptions()
        assert code.BuiltinCode() == schema.BuiltinOperator.CONV_2D
    else:
        options = schema.DepthwiseConv2DOptions()
        assert code.BuiltinCode() == schema.BuiltinOperator.DEPTHWISE_CONV_2D
    options.Init(table.Bytes, table.Pos)
    assert (options.DilationHFactor(), options.DilationWFactor()) == (rate, rate)
    assert (options.StrideH(), options.StrideW()) == (1, 1)
    # op_version.cc: int8 layers are version 3 whatever their dilation; a uint8 DEPTHWISE_CONV_2D
    # with dilation is version 2; a uint8 CONV_2D has no dilation rule and stays 1.
    if weights == "int8":
        assert code.Version() == 3
    else:
        assert code.Version() == (1 if kind == "conv2d" else 2)


# -- the integer model against the fake-quant graph ----------------------------------------------
def _check_close_to_graph(case):
    found = _exported(case)
    for rounding in ROUNDINGS:
        report = compare(found.session, found.tflite, {"images": found.data}, rounding=rounding)
        layers = [layer for layer in report.layers
                  if layer.name not in ("input_quant", "pool")
                  and not layer.name.startswith("fc/")]
        assert len(layers) == (2 if case[0] == "separable" else 1), report
        # The layer reading the exact input with exact weights: one step, on a few elements.
        first = layers[0]
        assert first.max_steps <= 1 and first.differing < 0.05, (rounding, str(report))
        # The pointwise conv after it reads inputs already a step off here and there (the
        # non-dilated controls reach 2 steps, the dilated cases 3, on under 1% of elements).
        for layer in layers[1:]:
            assert layer.max_steps <= 3 and layer.differing < 0.05, (rounding, str(report))


@pytest.mark.parametrize("case", CASES + CONTROLS, ids=_case_id)
def test_integer_model_within_a_step_of_the_fake_quant_graph(case):
    _check_close_to_graph(case)


# -- the runtimes ----------------------------------------------------------------------------------
def _same_bits(ours, theirs):
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    different = ours.view(np.int32) != theirs.view(np.int32)
    assert not different.any(), (
        f"{np.count_nonzero(different)} of {ours.size} outputs differ; first at "
        f"{np.argwhere(different)[0].tolist()}: ours {ours[different][0]}, theirs "
        f"{theirs[different][0]}")


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_reference_interpreter_equals_litert_reference_kernels(case):
    _need("ai_edge_litert")
    found = _exported(case)
    model = found.tflite
    ours = Interpreter(model, rounding="tflite_reference").run(found.data)
    theirs = runtimes.run_litert(model, [found.data], resolver="reference")
    for name, value in zip(model.model.outputs, theirs):
        _same_bits(ours[name], value)


def test_float32_half_even_within_a_step_of_xnnpack():
    """LiteRT's default resolver (XNNPACK) against rounding="float32_half_even" on the dilated
    layer's output (the pointwise conv's, for a separable one) of every case: at most one step
    apart, on at most 0.5% of the outputs, the bound of the per-op XNNPACK test. (The logits are
    left out: the default resolver's MEAN is not the reference one, and a step of the mean is
    several of the narrow logits grid.)"""
    _need("ai_edge_litert")
    differing, reference_differing, total, worst = 0, 0, 0, 0
    for case in CASES:
        found = _exported(case)
        model = found.tflite
        ours = Interpreter(model, rounding="float32_half_even").run(found.data)
        reference = Interpreter(model).run(found.data)
        theirs = runtimes.run_litert(model, [found.data], resolver="default")
        for name, value in zip(model.model.outputs[:1], theirs[:1]):
            dequantize = next(op for op in model.model.ops if op.outputs[0] == name)
            scale = np.float64(model.model.tensor(dequantize.inputs[0]).quantization.scale[0])
            steps = np.rint(np.abs(ours[name].astype(np.float64) - value) / scale)
            differing += np.count_nonzero(steps)
            worst = max(worst, int(steps.max()))
            reference_differing += np.count_nonzero(reference[name] != value)
            total += value.size
    print(f"\nvs XNNPACK, of {total} outputs: float32_half_even differs in {differing} (by at "
          f"most {worst}), tflite_reference in {reference_differing}")
    assert reference_differing > 0, "XNNPACK did not run: the comparison would prove nothing"
    assert worst <= 1 and differing <= 0.005 * total, (differing, total, worst)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_onnxruntime_equals_float32_half_even(case):
    _need("onnxruntime")
    import onnx
    data = _onnx(case)
    found = _exported(case)
    # The Conv node carries the dilation (and TFLite's SAME padding as explicit pads).
    graph = onnx.load_from_string(bytes(data)).graph
    conv = next(node for node in graph.node if node.op_type == "Conv")
    attributes = {a.name: list(a.ints) for a in conv.attribute if a.ints}
    kind, rate, padding = case[:3]
    assert attributes["dilations"] == [rate, rate]
    pad = rate if padding == "SAME" else 0
    assert attributes["pads"] == [pad] * 4
    ours = Interpreter(data.model, rounding="float32_half_even").run(found.data)
    theirs = runtimes.run_onnxruntime(data, [found.data])
    for name, value in zip(data.model.outputs, theirs):
        _same_bits(ours[name], value)


# -- what is refused -------------------------------------------------------------------------------
def _hand_built(paddings, crops, block=(2, 2), crop_block=None, size=12, stride=1):
    """SpaceToBatchND(paddings) -> 3x3 VALID Conv2D -> BatchToSpaceND(crops) -> BiasAdd -> Relu,
    built op by op, quantized and calibrated."""
    g = G.Graph()
    with g.as_default():
        images = G.placeholder("float32", [None, size, size, 3], name="images")
        x = G.fake_quant_with_min_max_args(images, min=-1.0, max=1.0, name="input_quant")
        with g.name_scope("odd"):
            rng = np.random.default_rng(0)
            w = variable("weights", rng.standard_normal((3, 3, 3, 4)).astype(np.float32) * 0.3)
            b = variable("biases", np.zeros(4, np.float32))
            with g.name_scope("odd/Conv2D/"):
                y = build.space_to_batch_nd(x, list(block), paddings)
            y = build.conv2d(y, w.read, strides=stride, padding="VALID")
            with g.name_scope("odd/Conv2D/"):
                y = build.batch_to_space_nd(y, list(crop_block or block), crops)
            y = build.relu(build.bias_add(y, b.read))
    quantize.create_eval_graph(g)
    session = G.Session(g)
    session.run(G.global_variables_initializer(g))
    return g, session, images, y


@pytest.mark.parametrize("paddings, crops", [
    ([[1, 3], [2, 2]], [[0, 0], [0, 0]]),      # shifted: [1, 3] where SAME pads [2, 2]
    ([[2, 2], [0, 0]], [[0, 0], [0, 0]]),      # SAME along H, VALID along W
    ([[2, 4], [2, 2]], [[0, 0], [0, 0]]),      # two rows too many
    ([[2, 2], [2, 2]], [[1, 1], [0, 0]]),      # cropped into the image
])
def test_a_space_to_batch_that_is_not_a_pure_dilation_is_refused(paddings, crops):
    _, session, images, y = _hand_built(paddings, crops)
    explicit = [[p[0] - c[0], p[1] - c[1]] for p, c in zip(paddings, crops)]
    with pytest.raises(ValueError) as error:
        lower(session, images, y)
    message = str(error.value)
    assert message.startswith("SpaceToBatchND 'odd/Conv2D/SpaceToBatchND' -> 'odd/Conv2D' -> "
                              "BatchToSpaceND 'odd/Conv2D/BatchToSpaceND' is not a dilated "
                              "convolution with SAME or VALID padding")
    assert f"paddings {paddings} and crops {crops}" in message
    assert f"by {explicit}" in message and "SAME would be [[2, 2], [2, 2]]" in message


def test_padding_moved_into_the_crops_is_still_a_dilation():
    # Three rows before, one cropped off: the dilated conv's SAME padding of two.
    g, session, images, y = _hand_built([[3, 3], [2, 2]], [[1, 1], [0, 0]])
    data = np.random.default_rng(2).uniform(-1, 1, (8, 12, 12, 3)).astype(np.float32)
    _calibrate(g, session, images, data, False, 3)
    model = to_tflite(session, images, y)
    conv = model.model.ops[1]
    assert (conv.kind, conv.options["padding"], conv.options["dilation_h"]) == ("CONV_2D",
                                                                               "SAME", 2)
    report = compare(session, model, {"images": data})
    assert report.layers[1].max_steps <= 1 and report.layers[1].differing < 0.05, report
    if runtimes.litert_available():
        ours = Interpreter(model).run(data)[model.model.outputs[0]]
        _same_bits(ours, runtimes.run_litert(model, [data])[0])


@pytest.mark.parametrize("build_it, message", [
    (lambda: _hand_built([[2, 2], [2, 2]], [[0, 0], [0, 0]], crop_block=(2, 1)),
     r"BatchToSpaceND 'odd/Conv2D/BatchToSpaceND' has block_shape \[2, 1\], SpaceToBatchND "
     r"'odd/Conv2D/SpaceToBatchND' has \[2, 2\]"),
    (lambda: _hand_built([[2, 2], [2, 2]], [[0, 0], [0, 0]], stride=2),
     r"layer 'odd/Conv2D' reads SpaceToBatchND 'odd/Conv2D/SpaceToBatchND': an atrous "
     r"convolution needs padding VALID, strides 1"),
])
def test_other_broken_atrous_patterns_are_named(build_it, message):
    _, session, images, y = build_it()
    with pytest.raises(ValueError, match=message):
        lower(session, images, y)


@pytest.mark.parametrize("norm", NORMS)
def test_a_conv_output_read_before_its_batch_to_space_is_named(norm):
    # Another reader of the conv's space-to-batch output: that layout has no model tensor.
    g, images, y, _ = _graph("conv2d", 2, "SAME", 12, norm)
    quantize.create_eval_graph(g)
    conv = "atrous/Conv2D" if norm == "bias" else "atrous/Conv2D_Fold"
    with g.as_default():
        peek = G.fake_quant_with_min_max_args(
            build.reduce_mean(g.get_tensor_by_name(conv + ":0"), axis=[3], name="peek"),
            min=-1.0, max=1.0)
    session = G.Session(g)
    session.run(G.global_variables_initializer(g))
    assert to_tflite(session, images, y)
    with pytest.raises(ValueError, match=f"^op 'peek' reads '{conv}:0' of atrous layer "
                                         f"'{conv}' \\(from SpaceToBatchND "
                                         f"'atrous/Conv2D/SpaceToBatchND'\\) before its "
                                         f"BatchToSpaceND"):
        lower(session, images, [y, peek])


def test_space_to_batch_and_batch_to_space_alone_are_named():
    g = G.Graph()
    with g.as_default():
        images = G.placeholder("float32", [None, 4, 4, 2], name="images")
        x = G.fake_quant_with_min_max_args(images, min=-1.0, max=1.0, name="input_quant")
        s2b = build.space_to_batch_nd(x, [2, 2], [[0, 0], [0, 0]], name="s2b")
        spread = G.fake_quant_with_min_max_args(build.relu(s2b, name="r"), min=0.0, max=1.0)
        flat = G.fake_quant_with_min_max_args(build.reshape(s2b, [-1, 8], name="flat"),
                                              min=-1.0, max=1.0)
        back = build.batch_to_space_nd(x, [2, 2], [[0, 0], [0, 0]], name="b2s")
    session = G.Session(g)
    only_as_atrous = ("fqcore.deploy exports SpaceToBatchND only as the start of an atrous "
                      "convolution")
    with pytest.raises(ValueError, match=r"^op 'r' reads 's2b:0', the output of SpaceToBatchND "
                                         r"'s2b': " + only_as_atrous):
        lower(session, images, spread)
    with pytest.raises(ValueError, match=r"^op 'flat' reads 's2b:0', the output of "
                                         r"SpaceToBatchND 's2b': " + only_as_atrous):
        lower(session, images, flat)
    with pytest.raises(ValueError, match=r"BatchToSpaceND 'b2s': its input 'input_quant:0' "
                                         r"is not an atrous convolution"):
        lower(session, images, back)
