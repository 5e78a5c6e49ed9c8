"""The whole rewrite (fold, then fake quants) on the patterns contrib 1.15 quantizes and on
MobileNet-style networks: where each quantizer goes (names from TF 1.15's
tensorflow/contrib/quantize/python/quantize.py: _InsertQuantOp's `<context>/<name>` prefixes,
add_context for bypasses, the skipped add_quant before an activation), what training does, and
that nothing is skipped in silence."""
import logging

import numpy as np
import pytest

import fqcore.graph as G
import fqcore.quantize as Q
from fqcore.graph import layers as L

from quantize_helpers import fake_quants, session
from test_quantize_contrib_patterns import KINDS, build

F32 = np.float32


def _rewrite(g, is_training, quant_delay, freeze_bn_delay=None):
    if is_training:
        Q.experimental_create_training_graph(g, quant_delay=quant_delay,
                                             freeze_bn_delay=freeze_bn_delay)
    else:
        Q.experimental_create_eval_graph(g, quant_delay=quant_delay)


def _reads(tensor, op):
    """Whether `tensor` is `op`'s output, or quant_delay's Merge of it (through its Switch)."""
    if tensor.op.type == "Merge":
        return any(t.op.type == "Switch" and t.op.inputs[0].op is op for t in tensor.op.inputs)
    return tensor.op is op


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("with_bypass", [False, True])
@pytest.mark.parametrize("is_training,quant_delay", [(True, None), (True, 5), (False, None)])
def test_quantizers_where_contrib_puts_them(kind, fused, with_bypass, is_training, quant_delay):
    g, _, _, scope, _ = build(kind, "relu6", with_bypass, True, fused, False,
                              is_training=is_training)
    _rewrite(g, is_training, quant_delay, freeze_bn_delay=3 if is_training else None)
    quants = fake_quants(g)
    layer_fold = next(op for op in g.get_operations()
                      if op.name.startswith(scope + "/") and op.name.endswith("_Fold")
                      and op.type in ("Conv2D", "MatMul", "DepthwiseConv2dNative"))
    weights = quants[f"{scope}/weights_quant"]
    assert weights.inputs[0].op.name == f"{scope}/mul_fold"
    # _InsertQuantOp: weights narrow range, activations full range, 8 bits by default.
    assert (weights.attrs["num_bits"], weights.attrs["narrow_range"]) == (8, True)
    for prefix, quant in quants.items():
        if not prefix.endswith("weights_quant"):
            assert (quant.attrs["num_bits"], quant.attrs["narrow_range"]) == (8, False)
    assert _reads(layer_fold.inputs[1], weights)
    has_last = any(op.name == f"{scope}/weights_quant/AssignMinLast" for op in g.get_operations())
    assert has_last == is_training
    if with_bypass:
        # contrib: conv_quant after the folded bias add, act_quant after the activation in the
        # bypass's scope, no add_quant (the Add is followed by its Relu6).
        conv_quant = quants[f"{scope}/conv_quant"]
        assert conv_quant.inputs[0].op.name == f"{scope}/add_fold"
        assert quants["test/act_quant"].inputs[0].op.name == "test/Relu6"
        assert "test/add_quant" not in quants and f"{scope}/add_quant" not in quants
    else:
        assert quants[f"{scope}/act_quant"].inputs[0].op.name == "test/Relu6"
    assert (f"{scope}/weights_quant/activate_quant" in {op.name for op in g.get_operations()}) \
        == bool(quant_delay)
    report = g.quantize_report
    assert report.skipped == [] and report.quantized == [layer_fold.name]
    assert len(report.folded) == 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fused", [True, False])
def test_training_the_rewritten_pattern_lowers_the_loss(kind, fused):
    g, inputs, out, _, _ = build(kind, "relu", False, True, fused, False)
    _rewrite(g, True, quant_delay=2, freeze_bn_delay=4)
    with g.as_default():
        target = G.constant(np.random.default_rng(5).uniform(0, 1, out.shape).astype(F32))
        loss = G.reduce_mean(G.multiply(G.subtract(out, target), G.subtract(out, target)))
        train = G.GradientDescentOptimizer(0.1).minimize(loss)
        updates = g.get_collection(G.GraphKeys.UPDATE_OPS)
    s = session(g)
    x = np.random.default_rng(6).uniform(-1, 1, inputs.shape).astype(F32)
    losses = [float(s.run([loss, train] + updates, {inputs: x})[0]) for _ in range(8)]
    assert all(np.isfinite(losses)) and losses[-1] < 0.9 * losses[0], losses


# MobileNet-style networks built with the slim layers: zero skipped layers.

def mobilenet_v1(x, is_training, fused=True, width=8):
    """Conv, then depthwise-separable blocks (slim's separable_conv2d(None) + 1x1 conv), each
    with batch norm and Relu6, one of them atrous; a logits layer."""
    bn = dict(fused=fused)
    net = L.conv2d(x, width, 3, stride=2, activation="relu6", batch_norm=bn,
                   is_training=is_training, scope="MobilenetV1/Conv2d_0")
    for i, (stride, dilation, depth) in enumerate([(1, 1, 2 * width), (2, 1, 2 * width),
                                                   (1, 2, 4 * width)], start=1):
        net = L.separable_conv2d(net, None, 3, stride=stride, dilation=dilation,
                                 activation="relu6", batch_norm=bn, is_training=is_training,
                                 scope=f"MobilenetV1/Conv2d_{i}_depthwise")
        net = L.conv2d(net, depth, 1, activation="relu6", batch_norm=bn,
                       is_training=is_training, scope=f"MobilenetV1/Conv2d_{i}_pointwise")
    net = L.global_avg_pool(net, scope="MobilenetV1/Logits/AvgPool")
    return L.dense(net, 5, scope="MobilenetV1/Logits/Conv2d_1c_1x1")


def mobilenet_v2(x, is_training, fused=True, width=8):
    """Inverted residual blocks: 1x1 expand (BN, Relu6), depthwise (BN, Relu6; atrous in the
    last block), 1x1 project (BN, linear), a residual Add where shapes allow; a separable conv
    with its pointwise part; a logits layer."""
    bn = dict(fused=fused)
    net = L.conv2d(x, width, 3, stride=2, activation="relu6", batch_norm=bn,
                   is_training=is_training, scope="MobilenetV2/Conv")
    for i, (stride, dilation) in enumerate([(1, 1), (1, 1), (1, 2)]):
        with G.name_scope(f"MobilenetV2/expanded_conv_{i}"):
            block_input = net
            y = L.conv2d(net, 4 * width, 1, activation="relu6", batch_norm=bn,
                         is_training=is_training, scope="expand")
            y = L.separable_conv2d(y, None, 3, stride=stride, dilation=dilation,
                                   activation="relu6", batch_norm=bn,
                                   is_training=is_training, scope="depthwise")
            y = L.conv2d(y, width, 1, activation=None, batch_norm=bn,
                         is_training=is_training, scope="project")
            net = G.add(y, block_input, name="add") if i else y
    net = L.separable_conv2d(net, 2 * width, 3, activation="relu6", batch_norm=bn,
                             is_training=is_training, scope="MobilenetV2/separable")
    net = L.global_avg_pool(net, scope="MobilenetV2/Logits/AvgPool")
    return L.dense(net, 5, scope="MobilenetV2/Logits/Conv2d_1c_1x1")


NETWORKS = {"mobilenet_v1": mobilenet_v1, "mobilenet_v2": mobilenet_v2}


def _network(name, is_training, fused):
    g = G.Graph()
    g.seed = 3
    with g.as_default():
        images = G.placeholder("float32", [4, 16, 16, 3], name="images")
        labels = G.placeholder("int32", [4], name="labels")
        logits = NETWORKS[name](images, is_training, fused)
        loss = L.sparse_softmax_cross_entropy(labels, logits)
    return g, images, labels, logits, loss


@pytest.mark.parametrize("name", sorted(NETWORKS))
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("is_training", [True, False])
def test_mobilenet_style_networks_report_zero_skipped_layers(name, fused, is_training, caplog):
    g = _network(name, is_training, fused)[0]
    layers = [op for op in g.get_operations()
              if op.type in ("Conv2D", "DepthwiseConv2dNative", "MatMul")]
    batch_norms = [op for op in g.get_operations() if op.type == "FusedBatchNormV3"
                   or op.name.endswith("BatchNorm/batchnorm_1/add_1")]
    with caplog.at_level(logging.WARNING, logger="fqcore.quantize"):
        _rewrite(g, is_training, quant_delay=None)
    report = g.quantize_report
    assert report.skipped == []
    assert len(report.quantized) == len(layers)
    assert sorted(report.folded) == sorted(op.name for op in batch_norms)
    assert not caplog.records


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_mobilenet_style_training_lowers_the_loss(name):
    g, images, labels, logits, loss = _network(name, True, True)
    _rewrite(g, True, quant_delay=0)
    with g.as_default():
        train = G.GradientDescentOptimizer(0.1).minimize(loss)
        updates = g.get_collection(G.GraphKeys.UPDATE_OPS)
    s = session(g)
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, images.shape).astype(F32)
    y = rng.integers(0, 5, labels.shape).astype(np.int32)
    losses = [float(s.run([loss, train] + updates, {images: x, labels: y})[0])
              for _ in range(10)]
    assert losses[-1] < 0.8 * losses[0], losses


@pytest.mark.parametrize("training", [True, False])
def test_the_demo_model_reports_zero_skipped_layers(training):
    from fqcore import demo
    g = demo.build_model(training)[0]
    _rewrite(g, training, quant_delay=None)
    assert g.quantize_report.skipped == []
    assert len(g.quantize_report.quantized) == 5 and len(g.quantize_report.folded) == 4


def test_an_unsupported_layer_is_reported_by_name(caplog):
    """A MatMul of two activations (no weights) and a conv whose output goes through a Tanh:
    contrib skips both in silence; fqcore names them."""
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 8, 8, 3], name="x")
        y = L.conv2d(x, 4, 3, activation="tanh", use_bias=False, scope="tanh_conv")
        flat = L.flatten(y)
        gram = G.matmul(flat, flat, transpose_b=True, name="gram")
        L.dense(G.relu(gram), 3, scope="head")
    with caplog.at_level(logging.WARNING, logger="fqcore.quantize"):
        Q.create_training_graph(g)
    skipped = {entry.name: entry for entry in g.quantize_report.skipped}
    assert set(skipped) == {"tanh_conv/Conv2D", "gram"}
    assert "Tanh" in skipped["tanh_conv/Conv2D"].reason
    assert "variable read" in skipped["gram"].reason
    assert g.quantize_report.quantized == ["head/MatMul"]
    message = " ".join(r.getMessage() for r in caplog.records)
    assert "tanh_conv/Conv2D" in message and "gram" in message


def test_a_batch_norm_that_cannot_fold_is_reported():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 4, 4, 3], name="x")
        y = L.batch_norm(G.relu(x), scope="input_bn")
        L.conv2d(y, 4, 3, scope="conv")
    Q.create_training_graph(g)
    skipped = g.quantize_report.skipped
    assert [(s.name, s.type) for s in skipped] == [("input_bn/FusedBatchNormV3",
                                                   "FusedBatchNormV3")]
    assert "Relu" in skipped[0].reason


def test_scope_filtering_is_reported_as_such():
    g = _network("mobilenet_v1", True, True)[0]
    Q.experimental_create_training_graph(g, scope="MobilenetV1/Conv2d_0")
    reasons = {s.name: s.reason for s in g.quantize_report.skipped}
    assert reasons and all("scope" in r for r in reasons.values())
    assert "MobilenetV1/Conv2d_0/Conv2D_Fold" in g.quantize_report.quantized


@pytest.mark.parametrize("is_training,quant_delay", [(True, None), (True, 4), (False, None)])
@pytest.mark.parametrize("dilation", [1, 2])
def test_separable_conv_quantizers(is_training, quant_delay, dilation):
    """slim's separable_conv2d with a pointwise part: contrib's sep_conv_pattern quantizes the
    depthwise weights and its output (the layer itself stands for the activation) in the
    depthwise op's context, then the pointwise layer as any conv + bias + Relu."""
    g = G.Graph()
    g.seed = 8
    with g.as_default():
        x = G.placeholder("float32", [2, 12, 12, 3], name="x")
        out = L.separable_conv2d(x, 8, 3, dilation=dilation, activation="relu",
                                 is_training=is_training, scope="sep")
    _rewrite(g, is_training, quant_delay)
    quants = fake_quants(g)
    assert quants["sep/separable_conv2d/weights_quant"].inputs[0].op.name == \
        "sep/depthwise_weights/read"
    # Atrous too: contrib quantizes the depthwise op's own output, before its BatchToSpaceND.
    assert quants["sep/separable_conv2d/act_quant"].inputs[0].op.name == \
        "sep/separable_conv2d/depthwise"
    assert quants["sep/weights_quant"].inputs[0].op.name == "sep/pointwise_weights/read"
    assert quants["sep/act_quant"].inputs[0].op.name == "sep/Relu"
    assert g.quantize_report.skipped == []
    assert sorted(g.quantize_report.quantized) == ["sep/separable_conv2d",
                                                   "sep/separable_conv2d/depthwise"]
    s = session(g)
    assert np.isfinite(s.run(out, {x: np.ones(x.shape, F32)})).all()
