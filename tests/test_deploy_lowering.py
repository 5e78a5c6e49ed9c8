"""fqcore.deploy's lowering of a fake-quant eval graph into the integer model: what each range
and layer becomes, the int8/uint8 choice, and a clear error for every graph it cannot export."""
import numpy as np
import pytest

import fqcore.graph as G
from fqcore import quantize
from fqcore.deploy.lower import lower
from fqcore.deploy.quant_params import scale_and_zero_point


def _model(with_input_range=True, pool="mean", extra=None, training=False):
    """input [N, 6, 6, 2] -> conv 3x3 + BN + relu6 -> pool -> dense 4, as an eval graph."""
    g = G.Graph()
    g.seed = 3
    L = G.layers
    with g.as_default():
        images = G.placeholder("float32", [None, 6, 6, 2], name="images")
        x = images
        if with_input_range:
            x = G.fake_quant_with_min_max_args(images, min=-1.0, max=1.0, name="input_quant")
        x = L.conv2d(x, 5, 3, activation="relu6", batch_norm=dict(epsilon=1e-3),
                     is_training=training, scope="conv")
        if extra is not None:
            x = extra(x)
        x = (L.global_avg_pool(x, scope="pool") if pool == "mean"
             else L.flatten(L.avg_pool(x, 2, 2, "VALID", scope="avg")))
        logits = L.dense(x, 4, scope="fc")
    return g, images, logits


def _session(g):
    session = G.Session(g)
    session.run(G.global_variables_initializer(g))
    return session


def _eval(symmetric=False, **kwargs):
    """The eval graph with weight ranges as last-value training leaves them: each weight's
    own [min, max] widened to 0, or made symmetric."""
    g, images, logits = _model(**kwargs)
    quantize.experimental_create_eval_graph(g, symmetric=symmetric)
    session = _session(g)
    for op in g.get_operations():
        if op.type == "FakeQuantWithMinMaxVars" and op.name.endswith("weights_quant/FakeQuantWithMinMaxVars"):
            w = session.run(op.inputs[0])
            lo, hi = min(w.min(), 0.0), max(w.max(), 0.0)
            if symmetric:
                lo, hi = -max(-lo, hi), max(-lo, hi)
            scope = op.name.rsplit("/", 1)[0]
            session.set_variable_value(scope + "/min", np.float32(lo))
            session.set_variable_value(scope + "/max", np.float32(hi))
    return g, session, images, logits


def test_layers_become_one_op_each_with_ranges_as_scale_and_zero_point():
    g, session, images, logits = _eval()
    model = lower(session, images, logits)
    assert [op.kind for op in model.ops] == ["QUANTIZE", "CONV_2D", "MEAN", "FULLY_CONNECTED",
                                            "DEQUANTIZE"]
    conv = model.ops[1]
    assert conv.options["activation"] == "RELU6" and conv.options["padding"] == "SAME"
    # The act_quant range [0, 6] (not yet trained) is the conv output's scale and zero point.
    out = model.tensor(conv.outputs[0])
    assert out.name == "conv/act_quant/FakeQuantWithMinMaxVars"
    assert out.quantization.scale[0] == np.float32(6) / np.float32(255)
    assert out.quantization.zero_point[0] == 0
    # Weights: the trained float grid as integers, OHWI, reconstructing the fake-quant output.
    weights = model.tensor(conv.inputs[1])
    fq = session.run(g.get_tensor_by_name(conv.inputs[1] + ":0"))
    q = weights.quantization
    rebuilt = ((weights.data.astype(np.float64) - q.zero_point[0]) * q.scale[0]).astype(np.float32)
    assert np.array_equal(rebuilt, fq.transpose(3, 0, 1, 2))
    assert weights.dtype == "uint8" and weights.shape == (5, 3, 3, 2)
    bias = model.tensor(conv.inputs[2])
    assert bias.dtype == "int32" and bias.quantization.scale[0] == np.float32(
        np.float64(model.tensor(conv.inputs[0]).quantization.scale[0]) * np.float64(q.scale[0]))
    # The mean keeps its input's range; the input is a float placeholder behind QUANTIZE.
    assert model.tensor("pool").quantization == out.quantization
    assert model.inputs == ["images"] and model.tensor("images").dtype == "float32"
    assert model.tensor(model.outputs[0]).dtype == "float32"
    assert model.tensor("images").shape == (-1, 6, 6, 2)


def test_int8_when_every_weight_range_is_symmetric_else_uint8():
    _, session, images, logits = _eval(symmetric=False)
    assert lower(session, images, logits).tensor("fc/weights_quant/FakeQuantWithMinMaxVars").dtype == "uint8"
    g, session, images, logits = _eval(symmetric=True)
    model = lower(session, images, logits)
    weights = model.tensor("fc/weights_quant/FakeQuantWithMinMaxVars")
    assert weights.dtype == "int8" and weights.quantization.zero_point[0] == 0
    # The activations move with it: FakeQuant's unsigned grid shifted by -128.
    act = model.tensor("conv/act_quant/FakeQuantWithMinMaxVars")
    assert act.dtype == "int8" and act.quantization.zero_point[0] == -128
    assert lower(session, images, logits, dtype="uint8").tensor(act.name).dtype == "uint8"


def test_int8_on_asymmetric_weights_is_an_error_naming_them():
    g, session, images, logits = _eval(symmetric=False)
    session.set_variable_value("conv/weights_quant/min", np.float32(-1.0))
    session.set_variable_value("conv/weights_quant/max", np.float32(3.0))
    with pytest.raises(ValueError, match=r"dtype='int8' needs symmetric weight ranges.*"
                                         r"conv/weights_quant"):
        lower(session, images, logits, dtype="int8")


def test_zero_point_rules_differ_where_the_spec_says():
    # [-1, 1] at 8 bits: float32 min / scale lands just past the half, double precision before it.
    _, training_zp = scale_and_zero_point(-1.0, 1.0, rule="training")
    _, converter_zp = scale_and_zero_point(-1.0, 1.0, rule="converter")
    assert abs(int(training_zp[0]) - int(converter_zp[0])) == 1
    g, session, images, logits = _eval()
    trained = lower(session, images, logits).tensor("input_quant")
    converted = lower(session, images, logits, zero_point_rule="converter").tensor("input_quant")
    assert trained.quantization.scale[0] == converted.quantization.scale[0]
    assert trained.quantization.zero_point[0] == training_zp[0]
    assert converted.quantization.zero_point[0] == converter_zp[0]


def test_integer_inputs_and_outputs_on_request():
    g, session, images, logits = _eval(symmetric=True)
    model = lower(session, images, logits, input_type="int8", output_type="int8")
    assert [op.kind for op in model.ops] == ["CONV_2D", "MEAN", "FULLY_CONNECTED"]
    assert model.tensor(model.inputs[0]).dtype == "int8"
    assert model.tensor(model.outputs[0]).dtype == "int8"
    with pytest.raises(ValueError, match="input_type='uint8' does not fit the int8 model"):
        lower(session, images, logits, input_type="uint8")


def test_average_pool_keeps_its_input_range():
    g, session, images, logits = _eval(pool="avg")
    model = lower(session, images, logits)
    pool = next(op for op in model.ops if op.kind == "AVERAGE_POOL_2D")
    assert pool.options["filter_h"] == 2 and pool.options["stride_w"] == 2
    assert model.tensor(pool.outputs[0]).quantization == model.tensor(pool.inputs[0]).quantization
    assert "RESHAPE" in [op.kind for op in model.ops]


@pytest.mark.parametrize("argument, value, error, message", [
    ("dtype", "int16", ValueError, "dtype must be None, 'int8' or 'uint8'"),
    ("input_type", "float16", ValueError, "input_type must be"),
    ("output_type", 8, ValueError, "output_type must be"),
    ("zero_point_rule", "tflite", ValueError, "zero_point_rule must be one of"),
])
def test_bad_arguments_are_named(argument, value, error, message):
    _, session, images, logits = _eval()
    with pytest.raises(error, match=message):
        lower(session, images, logits, **{argument: value})


def test_bad_inputs_and_outputs_are_named():
    g, session, images, logits = _eval()
    with pytest.raises(TypeError, match="session must be an fqcore.graph.Session"):
        lower(g, images, logits)
    with pytest.raises(ValueError, match="the graph has no tensor 'nope'"):
        lower(session, "nope", logits)
    with pytest.raises(ValueError, match="'conv/Conv2D_Fold:0' is a Conv2D, not a placeholder"):
        lower(session, "conv/Conv2D_Fold", logits)
    other, _, other_logits = _model()
    with pytest.raises(ValueError, match="from another graph"):
        lower(session, images, other_logits)


def test_a_tensor_without_a_range_is_named():
    g, session, images, logits = _eval(with_input_range=False)
    with pytest.raises(ValueError, match="input 'images' .* has no quantization range"):
        lower(session, images, logits)


def test_an_op_without_an_integer_form_is_named():
    g, session, images, logits = _eval(extra=lambda x: G.tanh(x, name="squash"))
    with pytest.raises(ValueError, match=r"op 'squash' \(Tanh\) has no integer form"):
        lower(session, images, logits)


def test_a_training_graph_is_refused_naming_its_training_op():
    g, images, logits = _model(training=True)
    quantize.experimental_create_training_graph(g)
    session = _session(g)
    with pytest.raises(ValueError, match="only runs in training graphs"):
        lower(session, images, logits)


def test_an_unquantized_graph_is_refused_naming_the_layer():
    g, images, logits = _model()
    with pytest.raises(ValueError, match=r"layer 'conv/Conv2D': its weights .* are not "
                                         r"fake-quantized"):
        lower(_session(g), images, logits)


def test_a_missing_placeholder_is_named():
    g = G.Graph()
    with g.as_default():
        a = G.placeholder("float32", [None, 4], name="a")
        b = G.placeholder("float32", [None, 4], name="b")
        qa = G.fake_quant_with_min_max_args(a, -1.0, 1.0)
        qb = G.fake_quant_with_min_max_args(b, -1.0, 1.0)
        total = G.fake_quant_with_min_max_args(G.add(qa, qb, name="sum"), -2.0, 2.0)
    with pytest.raises(ValueError, match="placeholder 'b', which is not among the inputs"):
        lower(_session(g), a, total)
    model = lower(_session(g), [a, b], total)
    assert [op.kind for op in model.ops] == ["QUANTIZE", "QUANTIZE", "ADD", "DEQUANTIZE"]


def test_an_input_quantized_twice_needs_one_range():
    def graph(second_max):
        g = G.Graph()
        with g.as_default():
            a = G.placeholder("float32", [None, 4], name="a")
            one = G.fake_quant_with_min_max_args(a, -1.0, 1.0, name="one")
            two = G.fake_quant_with_min_max_args(a, -1.0, second_max, name="two")
            total = G.fake_quant_with_min_max_args(G.add(one, two, name="sum"), -2.0, 2.0)
        return g, a, total
    g, a, total = graph(1.0)
    model = lower(_session(g), a, total)
    assert [op.kind for op in model.ops] == ["QUANTIZE", "ADD", "DEQUANTIZE"]
    assert model.ops[1].inputs == ["one", "one"]
    g, a, total = graph(2.0)
    with pytest.raises(ValueError, match="FakeQuant 'two' requantizes 'a:0'"):
        lower(_session(g), a, total)
