"""contrib's lower-level functions (Quantize, FoldBatchNorms, quant_ops.LastValueQuantize /
MovingAvgQuantize, with the signatures of TF 1.15's tensorflow/contrib/quantize/python/
quantize.py, fold_batch_norms.py and quant_ops.py) on graphs that are not the default one;
activations of unknown rank; Add and AddV2 matched alike."""
import numpy as np
import pytest

import fqcore.graph as G
import fqcore.quantize as Q
from fqcore.graph import layers as L
from fqcore.quantize import quant_ops

from quantize_helpers import fake_quants, session

F32 = np.float32


def _conv_net(add_type="AddV2", x_shape=(2, 6, 6, 3)):
    """conv -> bias add -> bypass add -> Relu, the adds of type `add_type`, plus a
    conv + batch norm layer when x's shape is known; in a graph that is not the default one."""
    g = G.Graph()
    g.seed = 4
    with g.as_default():
        x = G.placeholder("float32", x_shape, name="x")
        with G.name_scope("conv"):
            w = G.variable("weights", np.random.default_rng(0).normal(0, 0.3, (3, 3, 3, 3))
                           .astype(F32))
            b = G.variable("biases", np.zeros(3, F32))
            y = G.conv2d(x, w.read, padding="SAME")
            y = g.create_op(add_type, [y, b.read], name="add").outputs[0]
        y = g.create_op(add_type, [y, x], name="bypass").outputs[0]
        y = G.relu(y, name="relu")
        # A batch-norm layer needs a known channel count.
        out = y if x_shape is None else L.conv2d(y, 4, 3, batch_norm=True, scope="bn_conv")
    return g, x, out


def test_quantize_and_fold_batch_norms_on_a_graph_that_is_not_the_default():
    g, x, out = _conv_net()
    other = G.get_default_graph()
    before = len(other.get_operations())
    Q.FoldBatchNorms(g, is_training=True, freeze_batch_norm_delay=10)
    assert g.get_operation_by_name("bn_conv/Conv2D_Fold").type == "Conv2D"
    Q.Quantize(g, is_training=True, weight_bits=4, activation_bits=6, quant_delay=3,
               vars_collection="quant_ranges", scope=None)
    assert len(other.get_operations()) == before
    quants = fake_quants(g)
    assert {"conv/weights_quant", "conv/conv_quant", "act_quant", "bn_conv/weights_quant",
            "bn_conv/act_quant"} <= set(quants)
    assert quants["conv/weights_quant"].attrs["num_bits"] == 4
    assert quants["act_quant"].attrs["num_bits"] == 6
    ranges = {v.op.name for v in g.get_collection("quant_ranges")}
    assert "conv/weights_quant/min" in ranges and "act_quant/max" in ranges
    assert ranges <= {v.op.name for v in G.global_variables(g)}
    assert g.quantize_report.skipped == []
    s = session(g)
    x_value = np.random.default_rng(1).normal(size=x.shape).astype(F32)
    assert np.isfinite(s.run(out, {x: x_value})).all()


@pytest.mark.parametrize("rewrite", ["create", "lower_level"])
def test_add_and_addv2_graphs_are_rewritten_alike(rewrite):
    results = []
    for add_type in ("Add", "AddV2"):
        g, x, out = _conv_net(add_type)
        if rewrite == "create":
            Q.create_training_graph(g)
        else:
            Q.FoldBatchNorms(g, is_training=True)
            Q.Quantize(g, is_training=True)
        ops = [(op.name, op.type.replace("AddV2", "Add")) for op in g.get_operations()]
        s = session(g)
        x_value = np.random.default_rng(2).normal(size=x.shape).astype(F32)
        results.append((ops, s.run(out, {x: x_value})))
    assert results[0][0] == results[1][0]
    np.testing.assert_array_equal(results[0][1], results[1][1])


@pytest.mark.parametrize("is_training", [True, False])
def test_activations_of_unknown_rank_are_quantized(is_training):
    """contrib's MovingAvgQuantize reduces over all axes, whatever the rank: an activation of
    unknown rank gets its act_quant (fqcore used to refuse at build time)."""
    g, x, out = _conv_net(x_shape=None)
    assert g.get_operation_by_name("relu").outputs[0].shape is None
    (Q.experimental_create_training_graph if is_training
     else Q.experimental_create_eval_graph)(g)
    quants = fake_quants(g)
    assert quants["act_quant"].inputs[0].op.name == "relu"
    s = session(g)
    x_value = np.random.default_rng(3).normal(size=(2, 6, 6, 3)).astype(F32)
    y = s.run(g.get_operation_by_name("relu").outputs[0], {x: x_value})
    quantized = s.run(quants["act_quant"].outputs[0], {x: x_value})
    assert quantized.shape == y.shape
    if is_training:
        # First step: the EMA is debiased, so the range is this batch's [0, max].
        step = y.max() / 255
        assert np.abs(quantized - y).max() <= step / 2 + 1e-5


def test_a_network_with_unknown_rank_activations_trains():
    g, x, out = _conv_net(x_shape=None)
    Q.experimental_create_training_graph(g, quant_delay=0)
    with g.as_default():
        loss = G.reduce_mean(G.multiply(out, out))
        train = G.GradientDescentOptimizer(0.05).minimize(loss)
    s = session(g)
    x_value = np.random.default_rng(4).normal(size=(2, 6, 6, 3)).astype(F32)
    losses = [float(s.run([loss, train], {x: x_value})[0]) for _ in range(6)]
    assert losses[-1] < 0.9 * losses[0], losses


def test_last_value_quantize_as_contrib():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [4, 3], name="x")
    q1 = quant_ops.LastValueQuantize(x, per_channel=True, num_bits=4, narrow_range=True,
                                     symmetric=True, vars_collection="ranges")
    q2 = quant_ops.LastValueQuantize(x)
    assert q1.op.name == "LastValueQuant/FakeQuantWithMinMaxVarsPerChannel"
    assert q2.op.name == "LastValueQuant_1/FakeQuantWithMinMaxVars"
    assert [v.op.name for v in g.get_collection("ranges")] == ["LastValueQuant/min",
                                                              "LastValueQuant/max"]
    s = session(g)
    value = np.array([[-1.0, 0.5, 2.0], [0.25, -3.0, 1.0], [0.0, 0.1, -0.5], [0.7, 0.2, 0.3]],
                     F32)
    s.run([q1, q2], {x: value})
    # Symmetric narrow: each channel's range is [-m, m] with m its largest magnitude.
    np.testing.assert_array_equal(s.variable_value("LastValueQuant/max"), [1.0, 3.0, 2.0])
    np.testing.assert_array_equal(s.variable_value("LastValueQuant/min"), [-1.0, -3.0, -2.0])
    assert float(s.variable_value("LastValueQuant_1/min")) == -3.0
    assert float(s.variable_value("LastValueQuant_1/max")) == 2.0


def test_moving_avg_quantize_as_contrib():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [5], name="x")
    q = quant_ops.MovingAvgQuantize(x, ema_decay=0.5, per_channel=True)
    frozen = quant_ops.MovingAvgQuantize(x, is_training=False, init_min=-1.0, init_max=1.0)
    assert {v.op.name for v in g.get_collection("moving_average_variables")} == {
        "MovingAvgQuantize/min", "MovingAvgQuantize/max", "MovingAvgQuantize_1/min",
        "MovingAvgQuantize_1/max"}
    s = session(g)
    for value in (np.array([-1, 2, 3, -4, 0.5], F32), np.array([1, -2, 5, 4, 0.25], F32)):
        s.run([q, frozen], {x: value})
    # Per channel on a 1-D input, each element is its own channel: min(x, 0) and max(x, 0)
    # through the zero-debiased EMA with decay 0.5 (weights 1/3, 2/3 after two steps).
    mins = (np.minimum([-1, 2, 3, -4, 0.5], 0) * 1 + np.minimum([1, -2, 5, 4, 0.25], 0) * 2) / 3
    maxs = (np.maximum([-1, 2, 3, -4, 0.5], 0) * 1 + np.maximum([1, -2, 5, 4, 0.25], 0) * 2) / 3
    np.testing.assert_allclose(s.variable_value("MovingAvgQuantize/min"), mins, rtol=1e-6)
    np.testing.assert_allclose(s.variable_value("MovingAvgQuantize/max"), maxs, rtol=1e-6)
    assert float(s.variable_value("MovingAvgQuantize_1/max")) == 1.0


@pytest.mark.parametrize("call,match", [
    (lambda x: quant_ops.LastValueQuantize(x, num_bits=1), "num_bits must be an int in"),
    (lambda x: quant_ops.LastValueQuantize(x, reuse=True), "reuse=True is not supported"),
    (lambda x: quant_ops.MovingAvgQuantize(x, init_min=2.0, init_max=1.0),
     "init_min must not exceed init_max"),
    (lambda x: quant_ops.MovingAvgQuantize(x, ema_decay=1.5), "ema_decay must be a number"),
    (lambda x: quant_ops.MovingAvgQuantize(x, init_max=float("nan")), "init_max must be a finite number"),
    (lambda x: quant_ops.LastValueQuantize(x, per_channel=True),
     "per_channel quantization expects a 1-D, 2-D or 4-D input"),
    (lambda x: quant_ops.LastValueQuantize(np.zeros(3)), "inputs must be an fqcore.graph Tensor"),
])
def test_quantizer_arguments_are_checked(call, match):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 3, 4], name="x")
    with pytest.raises((ValueError, TypeError), match=match):
        call(x)


@pytest.mark.parametrize("call,match", [
    (lambda g: Q.Quantize(g, is_training=1), "is_training must be a bool"),
    (lambda g: Q.Quantize(g, True, ema_decay=-0.1), "ema_decay must be a number in"),
    (lambda g: Q.Quantize(g, True, vars_collection=""), "vars_collection must be"),
    (lambda g: Q.Quantize(g, True, weight_bits=17), "weight_bits must be an int"),
    (lambda g: Q.FoldBatchNorms(g, True, freeze_batch_norm_delay=-1),
     "freeze_batch_norm_delay must be None or a non-negative int"),
    (lambda g: Q.FoldBatchNorms("graph", True), "graph must be an fqcore.graph.Graph"),
])
def test_lower_level_arguments_are_checked(call, match):
    g = _conv_net()[0]
    with pytest.raises((ValueError, TypeError), match=match):
        call(g)
