"""fqcore's weight options of the rewrite: weight_symmetric (the weight quantizers' symmetric flag
alone) and weight_per_channel (per-output-channel symmetric narrow weight ranges, zero point 0 in
int8). Expected values are computed here in numpy (tests/reference.py for the fake quant)."""
import numpy as np
import pytest

import fqcore.graph as G
from fqcore import quantize as Q

import reference
from quantize_helpers import fake_quants, session

L = G.layers
F32 = np.float32
BN = {"momentum": 0.9, "epsilon": 1e-3}
REWRITES = [Q.create_training_graph, Q.create_eval_graph, Q.experimental_create_training_graph,
            Q.experimental_create_eval_graph]
# kind: (scope, weight variable, layer op type, weight shape, TFLite output channels)
KINDS = {"conv": ("conv", "weights", "Conv2D", (3, 3, 3, 4), 4),
         "depthwise": ("dw", "depthwise_weights", "DepthwiseConv2dNative", (3, 3, 3, 2), 6),
         "dense": ("fc", "weights", "MatMul", (6, 4), 4)}


# -- helpers ----------------------------------------------------------------------------------

def normal(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(F32)


def layer_net(kind, bn=False, is_training=True, activation="relu"):
    """One layer of `kind` with a bias or a batch norm, and a scalar loss."""
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [4, 6] if kind == "dense" else [4, 5, 5, 3], name="input")
        args = dict(activation=activation, use_bias=not bn, batch_norm=BN if bn else None,
                    is_training=is_training)
        if kind == "conv":
            y = L.conv2d(x, 4, scope="conv", **args)
        elif kind == "depthwise":
            y = L.depthwise_conv2d(x, depth_multiplier=2, scope="dw", **args)
        else:
            y = L.dense(x, 4, scope="fc", **args)
        loss = G.reduce_mean(G.identity(y, name="output"))
    return g, x, loss


def tflite_channels(w, kind):
    """w as [..., output channel] in TFLite's order: depthwise [kh, kw, cin, m] gives channel
    i * m + k for w[:, :, i, k], written out element by element."""
    if kind != "depthwise":
        return w
    kh, kw, cin, m = w.shape
    flat = np.empty((kh, kw, cin * m), w.dtype)
    for i in range(cin):
        for k in range(m):
            flat[:, :, i * m + k] = w[:, :, i, k]
    return flat


def from_tflite_channels(flat, kind, shape):
    if kind != "depthwise":
        return flat
    w = np.empty(shape, flat.dtype)
    for i in range(shape[2]):
        for k in range(shape[3]):
            w[:, :, i, k] = flat[:, :, i * shape[3] + k]
    return w


def channel_weights(kind, seed=1):
    """Weights whose channels differ in scale and sign: channel 0 all positive, channel 1 all
    negative (a symmetric range must still cover both signs), the rest mixed."""
    shape, channels = KINDS[kind][3], KINDS[kind][4]
    flat = tflite_channels(normal(shape, seed), kind)
    flat = flat * np.geomspace(0.05, 3.0, channels).astype(F32)
    flat[..., 0] = np.abs(flat[..., 0])
    flat[..., 1] = -np.abs(flat[..., 1])
    return from_tflite_channels(flat, kind, shape)


def names(kind, bn):
    """(weight variable, the quantizer's input tensor, the layer op) by their spec names."""
    scope, wname, op_type = KINDS[kind][:3]
    source = f"{scope}/mul_fold:0" if bn else f"{scope}/{wname}/read:0"
    return f"{scope}/{wname}", source, f"{scope}/{op_type}" + ("_Fold" if bn else "")


def set_bn(s, kind):
    """Non-trivial gamma and moving variance so that folding changes each channel's scale."""
    scope, channels = KINDS[kind][0], KINDS[kind][4]
    s.set_variable_value(f"{scope}/BatchNorm/gamma", np.linspace(0.5, 2.0, channels, dtype=F32))
    s.set_variable_value(f"{scope}/BatchNorm/moving_variance",
                         np.linspace(2.0, 0.3, channels, dtype=F32))


def symmetric_max(w, kind):
    """max |w| per TFLite output channel, element by element."""
    flat = tflite_channels(np.asarray(w, F32), kind)
    return np.array([np.abs(flat[..., c]).max() for c in range(flat.shape[-1])], F32)


def graph_ops(g):
    return [(op.name, op.type, [t.name for t in op.inputs]) for op in g.get_operations()]


# -- 1. defaults ------------------------------------------------------------------------------

@pytest.mark.parametrize("rewrite", REWRITES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kind, bn", [("conv", False), ("depthwise", True), ("dense", True)])
def test_explicit_defaults_build_the_same_graph(rewrite, kind, bn):
    graphs = []
    for kwargs in ({}, {"weight_symmetric": None, "weight_per_channel": False}):
        g, x, loss = layer_net(kind, bn, is_training="training" in rewrite.__name__)
        rewrite(g, **kwargs)
        graphs.append(g)
    assert graph_ops(graphs[0]) == graph_ops(graphs[1])
    fq = fake_quants(graphs[1])[f"{KINDS[kind][0]}/weights_quant"]
    assert fq.type == "FakeQuantWithMinMaxVars" and fq.inputs[1].shape == ()


# -- 2. weight_symmetric ----------------------------------------------------------------------

@pytest.mark.parametrize("symmetric, weight_symmetric", [(False, True), (True, False),
                                                         (False, None), (True, None)])
def test_weight_symmetric_sets_the_weight_ranges_alone(symmetric, weight_symmetric):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 5, 5, 3], name="input")
        y = L.conv2d(x, 4, activation="relu", scope="conv")
        loss = G.reduce_mean(L.global_avg_pool(y))
    Q.experimental_create_training_graph(g, symmetric=symmetric, weight_symmetric=weight_symmetric)
    with g.as_default():
        train = G.GradientDescentOptimizer(0.1).minimize(loss)
    s = session(g)
    s.set_variable_value("conv/weights", np.linspace(-0.5, 2.0, 108, dtype=F32).reshape(3, 3, 3, 4))
    relu = s.run([train, "conv/Relu:0"], {x: normal(x.shape, 3)})[1]
    weights = s.variable_value("conv/weights_quant/min"), s.variable_value("conv/weights_quant/max")
    act_min = s.variable_value("conv/act_quant/min")
    weights_symmetric = symmetric if weight_symmetric is None else weight_symmetric
    assert weights == ((F32(-2.0), F32(2.0)) if weights_symmetric else (F32(-0.5), F32(2.0)))
    # Activations after a ReLU: an asymmetric range starts at 0, a symmetric one below it.
    assert relu.min() == 0 and relu.max() > 0
    assert (act_min < 0) == symmetric and (act_min == 0) == (not symmetric)


@pytest.mark.parametrize("rewrite", [Q.create_training_graph, Q.experimental_create_training_graph],
                         ids=lambda f: f.__name__)
def test_weight_symmetric_in_the_plain_api(rewrite):
    g, x, loss = layer_net("dense")
    rewrite(g, weight_symmetric=True)
    s = session(g)
    w = np.linspace(-0.25, 1.5, 24, dtype=F32).reshape(6, 4)
    s.set_variable_value("fc/weights", w)
    s.run(loss, {x: normal(x.shape, 4)})
    assert (s.variable_value("fc/weights_quant/min"),
            s.variable_value("fc/weights_quant/max")) == (F32(-1.5), F32(1.5))


# -- 3. weight_per_channel: structure -----------------------------------------------------------

@pytest.mark.parametrize("rewrite", [Q.create_training_graph, Q.create_eval_graph],
                         ids=lambda f: f.__name__)
def test_weight_per_channel_in_the_plain_api(rewrite):
    g, x, loss = layer_net("depthwise", bn=True, is_training=rewrite is Q.create_training_graph)
    rewrite(g, weight_per_channel=True)
    fq = fake_quants(g)
    assert fq["dw/weights_quant"].type == "FakeQuantWithMinMaxVarsPerChannel"
    assert fq["dw/act_quant"].type == "FakeQuantWithMinMaxVars"


@pytest.mark.parametrize("is_training", [True, False])
@pytest.mark.parametrize("bn", [False, True])
@pytest.mark.parametrize("kind", list(KINDS))
def test_per_channel_ops_and_names(kind, bn, is_training):
    g, x, loss = layer_net(kind, bn, is_training)
    rewrite = (Q.experimental_create_training_graph if is_training
               else Q.experimental_create_eval_graph)
    rewrite(g, weight_per_channel=True)
    scope, channels = KINDS[kind][0], KINDS[kind][4]
    q = f"{scope}/weights_quant"
    _, source, layer_name = names(kind, bn)
    fq = g.get_operation_by_name(f"{q}/FakeQuantWithMinMaxVarsPerChannel")
    assert fq.type == "FakeQuantWithMinMaxVarsPerChannel"
    assert fq.attrs["narrow_range"] is True and fq.attrs["num_bits"] == 8
    assert fake_quants(g)[q] is fq
    for end in ("min", "max"):
        var = g.get_operation_by_name(f"{q}/{end}")
        assert var.type == "VariableV2" and var.attrs["shape"] == [channels]
    s = session(g)
    np.testing.assert_array_equal(s.variable_value(f"{q}/min"), np.full(channels, -6, F32))
    np.testing.assert_array_equal(s.variable_value(f"{q}/max"), np.full(channels, 6, F32))
    if is_training:
        assert [t.name for t in fq.inputs[1:]] == [f"{q}/AssignMinLast:0", f"{q}/AssignMaxLast:0"]
        for op in ("BatchMin", "BatchMax"):
            assert g.get_operation_by_name(f"{q}/{op}").outputs[0].shape == (channels,)
    else:
        assert [t.name for t in fq.inputs[1:]] == [f"{q}/min/read:0", f"{q}/max/read:0"]
        assert not any("AssignM" in op.name or "BatchM" in op.name for op in g.get_operations())
    layer = g.get_operation_by_name(layer_name)
    if kind == "depthwise":
        shape = g.get_operation_by_name(f"{q}/Reshape")
        back = layer.inputs[1].op
        assert shape.inputs[0].name == source and fq.inputs[0] is shape.outputs[0]
        assert shape.outputs[0].shape == (3, 3, 6)
        assert back.type == "Reshape" and back.name.startswith(q + "/") and back.inputs[0].op is fq
        assert back.outputs[0].shape == (3, 3, 3, 2)
    else:
        assert fq.inputs[0].name == source and layer.inputs[1].op is fq
    # Activations stay per tensor.
    assert fake_quants(g)[f"{scope}/act_quant"].type == "FakeQuantWithMinMaxVars"


# -- 4. weight_per_channel: ranges, eval outputs, gradients -----------------------------------

@pytest.mark.parametrize("bn", [False, True])
@pytest.mark.parametrize("kind", list(KINDS))
def test_per_channel_ranges_after_a_training_step_and_the_eval_graph(kind, bn):
    wvar, source, layer_name = names(kind, bn)
    q = f"{KINDS[kind][0]}/weights_quant"
    g, x, loss = layer_net(kind, bn)
    Q.experimental_create_training_graph(g, weight_per_channel=True)
    with g.as_default():
        train = G.GradientDescentOptimizer(0.1).minimize(loss)
    s = session(g)
    s.set_variable_value(wvar, channel_weights(kind))
    if bn:
        set_bn(s, kind)
    feed = {x: normal(x.shape, 5)}
    _, w_in, w_out = s.run([train, source, g.get_operation_by_name(layer_name).inputs[1]], feed)
    m = symmetric_max(w_in, kind)
    lo, hi = s.variable_value(f"{q}/min"), s.variable_value(f"{q}/max")
    np.testing.assert_array_equal(hi, m)
    np.testing.assert_array_equal(lo, -m)
    assert len(set(m.tolist())) == len(m)  # the channels really differ
    expected = from_tflite_channels(
        reference.per_channel(tflite_channels(w_in, kind), -m, m, 8, True), kind, w_in.shape)
    np.testing.assert_array_equal(w_out, expected)
    if bn:
        # The quantizer reads the folded weights W * gamma / sqrt(moving variance + eps).
        scale = (np.linspace(0.5, 2.0, KINDS[kind][4]) /
                 np.sqrt(np.linspace(2.0, 0.3, KINDS[kind][4]).astype(F32) + F32(1e-3)))
        np.testing.assert_allclose(tflite_channels(w_in, kind),
                                   tflite_channels(channel_weights(kind), kind) * scale, rtol=2e-6)

    # The eval graph, with the trained variables: fake quant with the stored ranges.
    eg, ex, _ = layer_net(kind, bn, is_training=False)
    Q.experimental_create_eval_graph(eg, weight_per_channel=True)
    es = session(eg)
    for op in eg.get_operations():
        if op.type == "VariableV2":
            es.set_variable_value(op.name, s.variable_value(op.name))
    e_in, e_out = es.run([source, eg.get_operation_by_name(layer_name).inputs[1]], {ex: feed[x]})
    assert not np.array_equal(e_in, w_in)  # the step moved the weights; ranges are the step's
    expected = from_tflite_channels(
        reference.per_channel(tflite_channels(e_in, kind), -m, m, 8, True), kind, e_in.shape)
    np.testing.assert_array_equal(e_out, expected)
    # int8: each channel's grid is k * scale, k in [-127, 127], zero point 0.
    flat = tflite_channels(e_out, kind)
    for c in range(len(m)):
        nmin, nmax, scale, _, zero = reference.nudge(-m[c], m[c], 8, True)
        assert zero == 127 and nmin == -nmax  # quant_min 1 + 127 = 128: int8 0
        k = flat[..., c].astype(np.float64) / float(scale)
        np.testing.assert_allclose(k, np.round(k), atol=1e-3)
        assert np.abs(np.round(k)).max() <= 127


@pytest.mark.parametrize("kind", list(KINDS))
def test_per_channel_gradient_clips_each_channel_with_its_own_range(kind):
    """Gradients through the weight quantizer: the incoming gradient where the weight lies in its
    channel's nudged range, 0 outside (ranges set narrower than the weights on purpose)."""
    wvar, source, layer_name = names(kind, bn=False)
    q = f"{KINDS[kind][0]}/weights_quant"
    g, x, loss = layer_net(kind, is_training=False, activation=None)
    Q.experimental_create_eval_graph(g, weight_per_channel=True)
    quantized = g.get_operation_by_name(layer_name).inputs[1]
    with g.as_default():
        grads = g.create_op("Gradients", [loss, g.get_operation_by_name(wvar).outputs[0],
                                          quantized], name="grads").outputs
    s = session(g)
    w = channel_weights(kind)
    s.set_variable_value(wvar, w)
    m = symmetric_max(w, kind) * np.linspace(0.3, 0.9, KINDS[kind][4]).astype(F32)
    s.set_variable_value(f"{q}/min", -m)
    s.set_variable_value(f"{q}/max", m)
    # A wide output range, so that the output quantizer passes every gradient on.
    s.set_variable_value(f"{KINDS[kind][0]}/act_quant/min", F32(-50))
    s.set_variable_value(f"{KINDS[kind][0]}/act_quant/max", F32(50))
    dw, dq = s.run(list(grads), {x: normal(x.shape, 6)})
    assert np.count_nonzero(dq) == dq.size
    expected = reference.per_channel_grad(tflite_channels(dq, kind), tflite_channels(w, kind),
                                          -m, m, 8, True)[0]
    expected = from_tflite_channels(expected, kind, w.shape)
    assert 0 < np.count_nonzero(expected) < np.count_nonzero(dq)
    np.testing.assert_array_equal(dw, expected)


# -- 5. weight_per_channel: training, quant_delay, rewriting twice -----------------------------

def tiny_cnn(**rewrite_kwargs):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [16, 8, 8, 3], name="input")
        labels = G.placeholder("int32", [16], name="labels")
        h = L.conv2d(x, 8, activation="relu6", batch_norm=BN, scope="conv1")
        h = L.depthwise_conv2d(h, depth_multiplier=2, activation="relu6", batch_norm=BN, scope="dw")
        h = L.conv2d(h, 8, kernel_size=1, activation="relu6", scope="project")
        logits = L.dense(L.global_avg_pool(h), 4, scope="fc")
        loss = L.sparse_softmax_cross_entropy(labels, logits)
    Q.experimental_create_training_graph(g, weight_per_channel=True, **rewrite_kwargs)
    return g, x, labels, loss


def test_tiny_cnn_trains_with_per_channel_weights():
    g, x, labels, loss = tiny_cnn(quant_delay=2, freeze_bn_delay=6)
    fq = {q: op for q, op in fake_quants(g).items() if q.endswith("weights_quant")}
    assert sorted(fq) == ["conv1/weights_quant", "dw/weights_quant", "fc/weights_quant",
                          "project/weights_quant"]
    assert {op.type for op in fq.values()} == {"FakeQuantWithMinMaxVarsPerChannel"}
    with g.as_default():
        train = G.MomentumOptimizer(0.05, 0.9).minimize(loss)
    s = session(g)
    feed = {x: normal(x.shape, 60), labels: np.random.default_rng(61).integers(0, 4, 16)}
    probes = {q: [op.outputs[0]] + list(op.inputs) for q, op in fq.items()}
    start = {name: s.variable_value(name) for name in ("conv1/weights", "dw/depthwise_weights")}
    losses = []
    for step in range(1, 13):
        _, value, probed = s.run([train, loss, probes], feed)
        assert np.isfinite(value), step
        losses.append(float(value))
        for q, (y, w, lo, hi) in probed.items():
            np.testing.assert_array_equal(lo, -hi)
            np.testing.assert_array_equal(hi, np.abs(w).max(axis=tuple(range(w.ndim - 1))))
            np.testing.assert_array_equal(y, reference.per_channel(w, lo, hi, 8, True))
    assert losses[-1] < losses[0] * 0.9, losses
    for name, value in start.items():
        assert not np.array_equal(s.variable_value(name), value), name


def test_quant_delay_with_per_channel_weights():
    wvar, source, layer_name = names("depthwise", bn=True)
    g, x, loss = layer_net("depthwise", bn=True)
    Q.experimental_create_training_graph(g, weight_per_channel=True, quant_delay=3)
    with g.as_default():
        train = G.GradientDescentOptimizer(0.1).minimize(loss)
    s = session(g)
    quantized = g.get_operation_by_name(layer_name).inputs[1]
    assert quantized.name == "dw/weights_quant/delayed_quant/Merge:0"
    for step in range(1, 6):
        _, w_in, w_out = s.run([train, source, quantized], {x: normal(x.shape, 30 + step)})
        m = symmetric_max(w_in, "depthwise")
        # Ranges track the weights through the delay; quantization starts at step 3.
        np.testing.assert_array_equal(s.variable_value("dw/weights_quant/max"), m)
        expected = from_tflite_channels(reference.per_channel(
            tflite_channels(w_in, "depthwise"), -m, m, 8, True), "depthwise", w_in.shape)
        if step < 3:
            np.testing.assert_array_equal(w_out, w_in)
        else:
            assert not np.array_equal(w_out, w_in)
            np.testing.assert_array_equal(w_out, expected)


@pytest.mark.parametrize("second", [{"weight_per_channel": True}, {}, {"weight_bits": 4}])
@pytest.mark.parametrize("first", [Q.experimental_create_training_graph,
                                   Q.experimental_create_eval_graph], ids=lambda f: f.__name__)
@pytest.mark.parametrize("kind, bn", [(k, bn) for k in KINDS for bn in (False, True)])
def test_rewriting_a_per_channel_graph_again_adds_nothing(kind, bn, first, second):
    g, x, loss = layer_net(kind, bn, is_training="training" in first.__name__)
    first(g, weight_per_channel=True, quant_delay=2)
    before = graph_ops(g)
    Q.experimental_create_training_graph(g, **second)
    assert graph_ops(g) == before
    Q.experimental_create_eval_graph(g, **second)
    assert graph_ops(g) == before


@pytest.mark.parametrize("kind, bn", [("depthwise", False), ("depthwise", True), ("dense", True)])
def test_per_tensor_graph_rewritten_again_per_channel_adds_nothing(kind, bn):
    g, x, loss = layer_net(kind, bn)
    Q.experimental_create_training_graph(g)
    before = graph_ops(g)
    Q.experimental_create_training_graph(g, weight_per_channel=True)
    assert graph_ops(g) == before


# -- 6. validation ----------------------------------------------------------------------------

@pytest.mark.parametrize("rewrite", REWRITES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kwargs, argument", [
    ({"weight_symmetric": "True"}, "weight_symmetric"),
    ({"weight_symmetric": 1}, "weight_symmetric"),
    ({"weight_symmetric": 0}, "weight_symmetric"), ({"weight_symmetric": 1.0}, "weight_symmetric"),
    ({"weight_per_channel": None}, "weight_per_channel"),
    ({"weight_per_channel": 1}, "weight_per_channel"),
    ({"weight_per_channel": "yes"}, "weight_per_channel"),
    ({"weight_per_channel": True, "weight_symmetric": False}, "weight_symmetric=False")])
def test_bad_values_raise_naming_the_argument(rewrite, kwargs, argument):
    g, x, loss = layer_net("conv")
    before = graph_ops(g)
    with pytest.raises(ValueError, match=argument):
        rewrite(g, **kwargs)
    assert graph_ops(g) == before


def transposed_net():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 5, 5, 3], name="input")
        h = L.global_avg_pool(L.conv2d(x, 4, batch_norm=BN, scope="conv"))
        with g.name_scope("fc"):
            w = G.variable("weights", normal((5, 4), 2))
            b = G.variable("biases", np.zeros(5, F32))
            y = G.bias_add(G.matmul(h, w.read, transpose_b=True), b.read)
        G.identity(y, name="output")
    return g


def test_transposed_matmul_weights_are_refused_before_anything_is_rewritten():
    g = transposed_net()
    before = graph_ops(g)
    with pytest.raises(ValueError, match=r"fc/MatMul.*transposed"):
        Q.experimental_create_training_graph(g, weight_per_channel=True)
    assert graph_ops(g) == before
    # Outside the scope it is left alone, and per tensor it is quantized as contrib does.
    Q.experimental_create_training_graph(g, weight_per_channel=True, scope="conv")
    assert fake_quants(g)["conv/weights_quant"].type == "FakeQuantWithMinMaxVarsPerChannel"
    g = transposed_net()
    Q.experimental_create_training_graph(g)
    assert fake_quants(g)["fc/weights_quant"].type == "FakeQuantWithMinMaxVars"


def test_weight_options_are_keyword_only():
    g, x, loss = layer_net("conv")
    with pytest.raises(TypeError):
        Q.experimental_create_training_graph(g, 8, 8, False, 0, None, None, True)
    with pytest.raises(TypeError):
        Q.create_eval_graph(g, True)
