"""The demo's trained model, exported: the reference interpreter equals LiteRT's reference kernels
bit for bit and ONNX Runtime in float32_half_even mode, on the whole test set, for the int8
(per-channel symmetric weights) and the uint8 (contrib's weights) model; the integer model keeps
the fake-quantized graph's accuracy."""
import io

import numpy as np
import pytest

import fqcore.graph as G
from fqcore import demo
from fqcore.datasets import load_digits
from fqcore.deploy import Interpreter, compare, runtimes, to_onnx, to_tflite

DATA = load_digits()
# The demo's defaults (python -m fqcore demo).
EPOCHS, BATCH, QUANT_DELAY, FREEZE_BN, RATE = 12, 64, 4, 9, 0.05


@pytest.fixture(scope="module", params=["per-channel", "contrib"])
def trained(request, tmp_path_factory):
    """(weights option, fake-quant accuracy, eval session, serving input and output)."""
    weights = request.param
    _, session, _ = demo.train(DATA, EPOCHS, BATCH, QUANT_DELAY, FREEZE_BN, RATE, 0,
                               io.StringIO(), weights)
    _, variables = G.save(session, str(tmp_path_factory.mktemp(weights) / "training"))
    accuracy, graph, eval_session = demo.evaluate(variables, DATA, quantized=True,
                                                  weights=weights)
    inputs = graph.get_collection("serving_inputs")
    outputs = graph.get_collection("serving_outputs")
    return weights, accuracy, eval_session, inputs, outputs


def _steps(a, b, scale):
    return np.rint(np.abs(a.astype(np.float64) - b) / scale)


def _output_scale(model):
    dequantize = model.model.ops[-1]
    assert dequantize.kind == "DEQUANTIZE"
    return np.float64(model.model.tensors[dequantize.inputs[0]].quantization.scale[0])


def test_int8_for_per_channel_weights_uint8_for_contribs(trained):
    weights, _, session, inputs, outputs = trained
    model = to_tflite(session, inputs, outputs)
    assert model.dtype == ("int8" if weights == "per-channel" else "uint8")


def _litert_and_interpreter(trained, resolver, rounding):
    """(LiteRT's logits with `resolver`, the interpreter's with `rounding`, the .tflite) on the
    whole test set."""
    pytest.importorskip("ai_edge_litert")
    _, _, session, inputs, outputs = trained
    model = to_tflite(session, inputs, outputs)
    ours = Interpreter(model, rounding=rounding).run(DATA.x_test)[model.model.outputs[0]]
    return runtimes.run_litert(model, [DATA.x_test], resolver)[0], ours, model


def test_litert_reference_kernels_equal_the_reference_interpreter(trained):
    theirs, ours, _ = _litert_and_interpreter(trained, "reference", "tflite_reference")
    assert ours.dtype == theirs.dtype == np.float32
    assert np.array_equal(ours, theirs)


def test_litert_xnnpack_within_a_step_of_float32_half_even(trained):
    theirs, ours, model = _litert_and_interpreter(trained, "default", "float32_half_even")
    steps = _steps(ours, theirs, _output_scale(model))
    assert steps.max() <= 1
    assert np.mean(steps > 0) <= 0.005


def test_onnxruntime_equals_float32_half_even(trained):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    _, _, session, inputs, outputs = trained
    model = to_onnx(session, inputs, outputs)
    ours = Interpreter(model.model, rounding="float32_half_even").run(DATA.x_test)
    theirs = runtimes.run_onnxruntime(model, [DATA.x_test])[0]
    assert np.array_equal(ours[model.model.outputs[0]], theirs)


def test_integer_accuracy_within_0_3_points_of_the_fake_quant_graph(trained):
    _, accuracy, session, inputs, outputs = trained
    model = to_tflite(session, inputs, outputs)
    report = compare(session, model, {"images": DATA.x_test}, DATA.y_test)
    assert report.graph_accuracy == accuracy
    assert abs(report.model_accuracy - accuracy) <= 0.003
    # The first layer sees exact inputs and weights: only the int32 bias and the requantization
    # rounding separate it from the fake-quant graph, by at most one step.
    first = report.layers[1]
    assert first.name == "conv1/act_quant/FakeQuantWithMinMaxVars"
    assert first.max_steps <= 1 and first.differing < 0.05
