"""Each rule of shared/spec/graph_rewrite.md on small fqcore.graph networks: where the quantizers go
and how they start, the scope filter, quant_delay, freeze_bn_delay, eval graphs, the training-op guard
and a short end-to-end training run. Expected values are computed here in numpy."""
import numpy as np
import pytest

import fqcore.graph as G
from fqcore import quantize as Q

import reference
from quantize_helpers import FQ_TYPES, fake_quants, session

L = G.layers
F32 = np.float32
EPS = 1e-3
MOMENTUM = 0.9


# -- helpers ----------------------------------------------------------------------------------

def var_names(g):
    return {op.name for op in g.get_operations() if op.type == "VariableV2"}


def rng(seed=0):
    return np.random.default_rng(seed)


def normal(shape, seed, scale=1.0):
    return (rng(seed).standard_normal(shape) * scale).astype(F32)


def ema_first_update(value):
    """contrib's zero-debiased EMA after one update from 0 (float32 throughout)."""
    d = F32(1.0 - 0.999)
    biased = F32(0) - (F32(0) - F32(value)) * d
    return biased / (F32(1) - (F32(1) - d) ** F32(1))


def pad_same(x, kh, kw):
    ph, pw = kh - 1, kw - 1
    return np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))


def np_conv(x, w):
    """NHWC conv, stride 1, SAME, in float64."""
    kh, kw = w.shape[:2]
    xp = pad_same(x.astype(np.float64), kh, kw)
    h, wd = x.shape[1:3]
    return sum(np.einsum("nhwc,cd->nhwd", xp[:, i:i + h, j:j + wd, :], w[i, j].astype(np.float64))
               for i in range(kh) for j in range(kw))


def np_depthwise(x, w):
    """NHWC depthwise conv, stride 1, SAME, output channel c * multiplier + m, in float64."""
    kh, kw, c, m = w.shape
    xp = pad_same(x.astype(np.float64), kh, kw)
    h, wd = x.shape[1:3]
    out = sum(np.einsum("nhwc,cm->nhwcm", xp[:, i:i + h, j:j + wd, :], w[i, j].astype(np.float64))
              for i in range(kh) for j in range(kw))
    return out.reshape(out.shape[:3] + (c * m,))


def on_grid(y, lo, hi, bits, narrow):
    """True when every value of y is nudged_min + k * scale for an integer k within the grid."""
    nmin, nmax, scale = (float(v) for v in reference.nudge(lo, hi, bits, narrow)[:3])
    k = (np.asarray(y, np.float64) - nmin) / scale
    steps = (2 ** bits - 1) - (1 if narrow else 0)
    return bool(np.all(np.abs(k - np.round(k)) < 1e-3) and k.min() > -1e-3 and k.max() < steps + 1e-3)


def conv_block(kind, x, is_training=True, activation="relu", batch_norm=None, scope=None,
               use_bias=True):
    """One layer of `kind` (conv, matmul, depthwise) on x."""
    if kind == "conv":
        return L.conv2d(x, 4, activation=activation, batch_norm=batch_norm, use_bias=use_bias,
                        is_training=is_training, scope=scope or "conv")
    if kind == "depthwise":
        return L.depthwise_conv2d(x, depth_multiplier=2, activation=activation, use_bias=use_bias,
                                  batch_norm=batch_norm, is_training=is_training,
                                  scope=scope or "dw")
    return L.dense(x, 4, activation=activation, scope=scope or "fc")


def single_layer(kind, activation="relu"):
    g = G.Graph()
    with g.as_default():
        shape = [2, 5, 5, 3] if kind != "matmul" else [4, 6]
        x = G.placeholder("float32", shape, name="input")
        G.identity(conv_block(kind, x, activation=activation), name="output")
    return g, x


# -- 1. insertion rules -----------------------------------------------------------------------

WEIGHT_NAMES = {"conv": ("conv", "weights", "Conv2D"), "matmul": ("fc", "weights", "MatMul"),
                "depthwise": ("dw", "depthwise_weights", "DepthwiseConv2dNative")}


@pytest.mark.parametrize("weight_bits", [8, 4])
@pytest.mark.parametrize("kind", ["conv", "matmul", "depthwise"])
def test_weights_quant_on_the_variable_read(kind, weight_bits):
    g, x = single_layer(kind)
    Q.experimental_create_training_graph(g, weight_bits=weight_bits, activation_bits=6)
    scope, wname, layer = WEIGHT_NAMES[kind]
    fq = fake_quants(g)
    op = fq[f"{scope}/weights_quant"]
    assert op.type == "FakeQuantWithMinMaxVars"
    assert op.attrs["narrow_range"] is True and op.attrs["num_bits"] == weight_bits
    assert op.inputs[0].name == f"{scope}/{wname}/read:0"
    # LastValue: the range comes straight from Assign{Min,Max}Last on the min/max variables.
    for i, end in ((1, "Min"), (2, "Max")):
        assign = op.inputs[i].op
        assert (assign.type, assign.name) == ("Assign", f"{scope}/weights_quant/Assign{end}Last")
        assert assign.inputs[0].op.name == f"{scope}/weights_quant/{end.lower()}"
    assert g.get_operation_by_name(f"{scope}/{layer}").inputs[1] is op.outputs[0]
    assert {f"{scope}/weights_quant/min", f"{scope}/weights_quant/max"} <= var_names(g)
    assert not any("weights_quant" in n and ("biased" in n or "local_step" in n) for n in var_names(g))
    act = fq[f"{scope}/act_quant"]
    assert act.attrs["num_bits"] == 6 and act.attrs["narrow_range"] is False

    s = session(g)
    assert s.variable_value(f"{scope}/weights_quant/min") == F32(-6)
    assert s.variable_value(f"{scope}/weights_quant/max") == F32(6)
    w = s.variable_value(f"{scope}/{wname}")
    feed = {x: normal(x.shape, 1)}
    quantized = s.run(op.outputs[0], feed)
    assert s.variable_value(f"{scope}/weights_quant/min") == min(w.min(), F32(0))
    assert s.variable_value(f"{scope}/weights_quant/max") == max(w.max(), F32(0))
    expected = reference.vars(w, min(w.min(), 0), max(w.max(), 0), weight_bits, True)
    np.testing.assert_array_equal(quantized, expected)


@pytest.mark.parametrize("activation", ["Relu", "Relu6", "Identity"])
def test_act_quant_after_each_activation_type(activation):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 5, 5, 3], name="input")
        y = L.conv2d(x, 4, activation=None, scope="conv")
        with g.name_scope("conv/"):
            y = {"Relu": G.relu, "Relu6": G.relu6, "Identity": G.identity}[activation](y)
        pooled = L.global_avg_pool(y)
    Q.experimental_create_training_graph(g)
    fq = fake_quants(g)
    assert sorted(fq) == ["conv/act_quant", "conv/weights_quant"]
    act = fq["conv/act_quant"]
    assert act.inputs[0].name == f"conv/{activation}:0"
    assert act.attrs == {"num_bits": 8, "narrow_range": False}
    assert [t.op.name for t in act.inputs[1:]] == ["conv/act_quant/AssignMinEma",
                                                  "conv/act_quant/AssignMaxEma"]
    assert pooled.op.inputs[0] is act.outputs[0]
    names = var_names(g)
    assert {"conv/act_quant/min", "conv/act_quant/max"} <= names
    for end in ("min", "max"):
        assert {f"conv/act_quant/conv/act_quant/{end}/biased",
                f"conv/act_quant/conv/act_quant/{end}/local_step"} <= names

    s = session(g)
    assert (s.variable_value("conv/act_quant/min"), s.variable_value("conv/act_quant/max")) == (0, 6)
    feed = {x: normal(x.shape, 2)}
    pre, out = s.run([act.inputs[0], act.outputs[0]], feed)
    lo, hi = min(pre.min(), F32(0)), max(pre.max(), F32(0))
    got = s.variable_value("conv/act_quant/min"), s.variable_value("conv/act_quant/max")
    np.testing.assert_allclose(got, [ema_first_update(lo), ema_first_update(hi)], rtol=1e-6)
    assert hi * F32(1.00001) < got[1] < hi * F32(1.00002)  # contrib's float32 debias artefact
    np.testing.assert_array_equal(out, reference.vars(pre, got[0], got[1], 8, False))


@pytest.mark.parametrize("kind", ["matmul", "conv"])
def test_final_layer_bias_add_gets_act_quant(kind):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 5, 5, 3] if kind == "conv" else [3, 6], name="input")
        y = conv_block(kind, x, activation=None)
        consumer = G.reduce_sum(y, name="total")
    Q.experimental_create_training_graph(g)
    scope = "conv" if kind == "conv" else "fc"
    fq = fake_quants(g)
    assert sorted(fq) == [f"{scope}/act_quant", f"{scope}/weights_quant"]
    act = fq[f"{scope}/act_quant"]
    assert act.inputs[0].name == f"{scope}/BiasAdd:0"
    assert consumer.op.inputs[0] is act.outputs[0]
    s = session(g)
    assert s.variable_value(f"{scope}/act_quant/min") == 0
    assert s.variable_value(f"{scope}/act_quant/max") == 6


def residual_graph(scoped=True, activation="relu", bn=False):
    """conv (no activation) -> [BN | bias] -> AddV2(., input) -> activation, in `block1` or at the
    top level."""
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 5, 5, 4], name="input")
        outer = "block1/" if scoped else ""
        with g.name_scope(outer or None):
            y = L.conv2d(x, 4, activation=None, batch_norm=bn or None, scope="conv")
        with g.name_scope(outer or None):
            s = G.add(y, x, name="add")
            if activation:
                s = {"relu": G.relu, "relu6": G.relu6}[activation](s)
        L.global_avg_pool(s)
    return g, x


@pytest.mark.parametrize("scoped", [True, False])
@pytest.mark.parametrize("bn", [False, True])
def test_bypass_before_the_activation(scoped, bn):
    g, x = residual_graph(scoped=scoped, bn=bn)
    Q.experimental_create_training_graph(g)
    outer = "block1/" if scoped else ""
    fq = fake_quants(g)
    # act_quant takes the layer's parent scope; conv_quant sits on the (folded) bias add.
    act = fq[f"{outer}act_quant"]
    assert act.inputs[0].name == f"{outer}Relu:0"
    conv_q = fq[f"{outer}conv/conv_quant"]
    assert conv_q.inputs[0].name == f"{outer}conv/" + ("add_fold:0" if bn else "BiasAdd:0")
    assert [c.name for c in conv_q.outputs[0].consumers()] == [f"{outer}add"]
    assert conv_q.attrs == {"num_bits": 8, "narrow_range": False}
    assert f"{outer}conv/weights_quant" in fq
    assert f"{outer}conv/act_quant" not in fq and f"{outer}add_quant" not in fq
    s = session(g)
    for q, lo in (("act_quant", 0), ("conv/conv_quant", -6)):
        assert s.variable_value(f"{outer}{q}/min") == lo and s.variable_value(f"{outer}{q}/max") == 6


@pytest.mark.parametrize("activation", ["relu", "relu6"])
def test_bypass_followed_by_relu_gets_no_quant_between_add_and_relu(activation):
    """contrib's _CheckIfQuantizableOp skips an Add/Mul whose only consumer is a Relu/Relu6 (the
    ReLU is fused into the add at inference)."""
    g, x = residual_graph(activation=activation)
    Q.experimental_create_training_graph(g)
    relu = [op for op in g.get_operations() if op.type in ("Relu", "Relu6")][0]
    assert relu.inputs[0].name == "block1/add:0"
    assert sorted(fake_quants(g)) == ["block1/act_quant", "block1/conv/conv_quant",
                                      "block1/conv/weights_quant"]


def test_bypass_without_activation_is_quantized_as_contrib_does():
    """contrib only matches a bypass in front of an activation, which then consumes it, so its
    add_quant branch never fires: a bypass with no activation behind it leaves the bias add to the
    final-layer rule (act_quant) and the AddV2 to the leftover rule."""
    g, x = residual_graph(activation=None)
    Q.experimental_create_training_graph(g)
    fq = fake_quants(g)
    assert sorted(fq) == ["block1/add/activation_AddV2_quant", "block1/conv/act_quant",
                          "block1/conv/weights_quant"]
    assert fq["block1/conv/act_quant"].inputs[0].name == "block1/conv/BiasAdd:0"
    assert fq["block1/add/activation_AddV2_quant"].inputs[0].name == "block1/add:0"
    leftover = fq["block1/add/activation_AddV2_quant"]
    assert g.get_operation_by_name("pool").inputs[0] is leftover.outputs[0]
    s = session(g)
    assert s.variable_value("block1/add/activation_AddV2_quant/min") == -6
    assert s.variable_value("block1/add/activation_AddV2_quant/max") == 6


def post_bypass_graph(follow):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 5, 5, 4], name="input")
        with g.name_scope("block1"):
            y = L.conv2d(x, 4, activation="relu6", scope="conv")
        with g.name_scope("block1/"):
            s = G.add(x, y, name="add")
            if follow:
                s = {"Relu": G.relu, "Relu6": G.relu6, "Identity": G.identity}[follow](s)
        L.global_avg_pool(s)
    return g


@pytest.mark.parametrize("follow", [None, "Identity"])
def test_post_activation_bypass_quant(follow):
    g = post_bypass_graph(follow)
    Q.experimental_create_training_graph(g)
    fq = fake_quants(g)
    assert sorted(fq) == ["block1/conv/act_quant", "block1/conv/weights_quant",
                          "block1/post_activation_bypass_quant"]
    assert fq["block1/conv/act_quant"].inputs[0].name == "block1/conv/Relu6:0"
    post = fq["block1/post_activation_bypass_quant"]
    assert post.inputs[0].name == "block1/add:0"
    assert post.attrs == {"num_bits": 8, "narrow_range": False}
    s = session(g)
    assert s.variable_value("block1/post_activation_bypass_quant/min") == -6
    assert s.variable_value("block1/post_activation_bypass_quant/max") == 6


@pytest.mark.parametrize("follow", ["Relu", "Relu6"])
def test_post_activation_bypass_followed_by_relu_has_no_bypass_quant(follow):
    g = post_bypass_graph(follow)
    Q.experimental_create_training_graph(g)
    fq = fake_quants(g)
    assert "block1/post_activation_bypass_quant" not in fq
    assert {"block1/conv/act_quant", "block1/conv/weights_quant"} <= set(fq)


@pytest.mark.parametrize("follow", ["Relu", "Relu6"])
def test_post_activation_bypass_followed_by_relu_is_not_quantized_at_all(follow):
    """Neither post_activation_bypass_quant nor the leftover rule (the add's only consumer is a
    ReLU) quantizes the add."""
    g = post_bypass_graph(follow)
    Q.experimental_create_training_graph(g)
    assert sorted(fake_quants(g)) == ["block1/conv/act_quant", "block1/conv/weights_quant"]
    assert g.get_operation_by_name(f"block1/{follow}").inputs[0].name == "block1/add:0"


def test_leftover_add_and_mul_after_quantized_tensors():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 4, 4, 3], name="input")
        y = L.conv2d(x, 4, activation="relu", scope="conv")
        scaled = G.multiply(y, F32(2.0), name="mul")
        flat = G.reshape(y, [2, 64], name="flat")
        shifted = G.add(flat, F32(1.0), name="add")
        other = G.add(G.placeholder("float32", [2], name="free"), F32(1.0), name="unquantized")
        for i, t in enumerate((scaled, shifted, other), 1):
            G.reduce_sum(t, name=f"s{i}")
    Q.experimental_create_training_graph(g)
    fq = fake_quants(g)
    assert sorted(fq) == ["add/activation_AddV2_quant", "conv/act_quant", "conv/weights_quant",
                          "mul/activation_Mul_quant"]
    for name, producer, consumer in (("mul/activation_Mul_quant", "mul", "s1"),
                                     ("add/activation_AddV2_quant", "add", "s2")):
        assert fq[name].inputs[0].name == producer + ":0"
        assert g.get_operation_by_name(consumer).inputs[0] is fq[name].outputs[0]
        assert fq[name].attrs == {"num_bits": 8, "narrow_range": False}
    assert g.get_operation_by_name("s3").inputs[0].name == "unquantized:0"
    s = session(g)
    for name in ("mul/activation_Mul_quant", "add/activation_AddV2_quant"):
        assert (s.variable_value(name + "/min"), s.variable_value(name + "/max")) == (-6, 6)


def test_leftover_quantizers_stay_asymmetric_with_symmetric_true():
    """contrib passes `symmetric` to the layer quantizers only: a leftover Mul after a ReLU keeps
    min = 0, where a symmetric range would mirror its max."""
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 4, 4, 3], name="input")
        y = L.conv2d(x, 4, activation="relu", scope="conv")
        G.reduce_sum(G.multiply(y, F32(2.0), name="mul"), name="s")
    Q.experimental_create_training_graph(g, symmetric=True)
    s = session(g)
    s.run("s:0", {"input:0": normal((2, 4, 4, 3), 31)})
    assert s.variable_value("mul/activation_Mul_quant/min") == 0
    assert s.variable_value("mul/activation_Mul_quant/max") > 0
    assert s.variable_value("conv/act_quant/min") < 0      # symmetric: mirrored from the max


def test_unmatched_ops_are_left_alone():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 8, 8, 3], name="input")
        y = L.conv2d(x, 4, activation="relu", scope="conv1")
        y = L.max_pool(y)
        y = L.conv2d(y, 4, activation="tanh", scope="conv2")
        y = L.avg_pool(y)
        y = L.conv2d(y, 4, activation="sigmoid", scope="conv3")
        L.flatten(y)
    Q.experimental_create_training_graph(g)
    fq = fake_quants(g)
    assert sorted(fq) == sorted(f"conv{i}/{q}" for i in (1, 2, 3)
                                for q in ("weights_quant", "act_quant"))
    # Tanh and Sigmoid are no activations to contrib: their layers end at the bias add.
    assert fq["conv2/act_quant"].inputs[0].name == "conv2/BiasAdd:0"
    assert fq["conv3/act_quant"].inputs[0].name == "conv3/BiasAdd:0"
    for name in ("MaxPool", "AvgPool", "conv2/Tanh", "conv3/Sigmoid"):
        consumers = g.get_operation_by_name(name).outputs[0].consumers()
        assert consumers and not any(c.type in FQ_TYPES for c in consumers), name


@pytest.mark.parametrize("quant_delay", [0, 2])
def test_rewriting_twice_adds_nothing(quant_delay):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 5, 5, 3], name="input")
        y = L.conv2d(x, 4, activation="relu6", scope="conv")
        y = L.global_avg_pool(G.multiply(y, F32(0.5), name="mul"))
        L.dense(y, 3, scope="fc")
    Q.experimental_create_training_graph(g, quant_delay=quant_delay)
    first = [op.name for op in g.get_operations()]
    assert sorted(fake_quants(g)) == ["conv/act_quant", "conv/weights_quant", "fc/act_quant",
                                      "fc/weights_quant", "mul/activation_Mul_quant"]
    Q.experimental_create_training_graph(g, quant_delay=quant_delay)
    assert [op.name for op in g.get_operations()] == first


@pytest.mark.parametrize("kind", ["conv", "depthwise"])
@pytest.mark.parametrize("first, second", [
    (Q.experimental_create_training_graph, Q.experimental_create_training_graph),
    (Q.experimental_create_eval_graph, Q.experimental_create_training_graph)])
def test_rewriting_a_folded_graph_again_adds_nothing(kind, first, second):
    """Its batch norms are folded already (their outputs have no consumers left) and its tensors
    quantized: a second rewrite, whatever its options, leaves the graph as it is."""
    g, x = bn_net(kind, rewrite=False)
    first(g)
    names = [op.name for op in g.get_operations()]
    second(g, weight_bits=4)
    assert [op.name for op in g.get_operations()] == names


def test_tensor_already_followed_by_a_fake_quant_is_skipped():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 5, 5, 3], name="input")
        y = L.conv2d(x, 4, activation="relu", scope="conv")
        manual = G.fake_quant_with_min_max_vars(G.identity(y, name="pass"), F32(0), F32(4),
                                                name="manual")
        L.global_avg_pool(manual)
    Q.experimental_create_training_graph(g)
    assert sorted(fake_quants(g)) == ["conv/weights_quant", "manual"]
    assert g.get_operation_by_name("pass").inputs[0].name == "conv/Relu:0"


def test_symmetric_ranges_after_one_training_step():
    w = np.linspace(-0.5, 2.0, 3 * 3 * 3 * 4, dtype=F32).reshape(3, 3, 3, 4)
    for symmetric in (False, True):
        g = G.Graph()
        with g.as_default():
            x = G.placeholder("float32", [2, 5, 5, 3], name="input")
            y = L.conv2d(x, 4, activation="relu", scope="conv")
            loss = G.reduce_mean(L.global_avg_pool(y))
        Q.experimental_create_training_graph(g, symmetric=symmetric)
        with g.as_default():
            train = G.GradientDescentOptimizer(0.1).minimize(loss)
        s = session(g)
        s.set_variable_value("conv/weights", w)
        pre = s.run([train, "conv/Relu:0"], {x: normal(x.shape, 3)})[1]
        wr = s.variable_value("conv/weights_quant/min"), s.variable_value("conv/weights_quant/max")
        ar = s.variable_value("conv/act_quant/min"), s.variable_value("conv/act_quant/max")
        bmin, bmax = pre.min(), pre.max()
        if symmetric:
            # weights: narrow range, r = -1; activations: wide 8 bits, r = -(2^8 - 2) / 2^8.
            assert wr == (F32(-2.0), F32(2.0))
            r = F32(-254 / 256)
            lo, hi = min(bmin, bmax / r), max(bmax, bmin * r)
        else:
            assert wr == (F32(-0.5), F32(2.0))
            lo, hi = min(bmin, F32(0)), max(bmax, F32(0))
        np.testing.assert_allclose(ar, [ema_first_update(lo), ema_first_update(hi)], rtol=1e-6)
        assert g.get_operation_by_name("conv/weights_quant/FakeQuantWithMinMaxVars").attrs[
            "narrow_range"] is True


# -- 2. scope ---------------------------------------------------------------------------------

def scoped_net():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [4, 6, 6, 3], name="input")
        with g.name_scope("block1"):
            y = L.conv2d(x, 4, activation="relu", scope="conv")
        with g.name_scope("block2"):
            y = L.conv2d(y, 4, activation="relu", batch_norm=True, scope="conv")
        with g.name_scope("block10"):
            y = L.conv2d(y, 4, activation="relu", scope="conv")
        L.dense(L.global_avg_pool(y), 3, scope="fc")
    return g


@pytest.mark.parametrize("scope", ["block1", "block1/"])
def test_scope_quantizes_only_layers_inside_it(scope):
    g = scoped_net()
    Q.experimental_create_training_graph(g, scope=scope)
    assert sorted(fake_quants(g)) == ["block1/conv/act_quant", "block1/conv/weights_quant"]
    # Folding ignores the scope.
    names = {op.name for op in g.get_operations()}
    assert {"block2/conv/Conv2D_Fold", "block2/conv/mul_fold", "block2/conv/add_fold"} <= names
    assert g.get_operation_by_name("block2/conv/Relu").inputs[0].name == "block2/conv/add_fold:0"


def test_scope_none_quantizes_every_layer():
    g = scoped_net()
    Q.experimental_create_training_graph(g)
    assert sorted(fake_quants(g)) == sorted(f"{s}/{q}" for s in ("block1/conv", "block2/conv",
                                                                 "block10/conv", "fc")
                                            for q in ("weights_quant", "act_quant"))


def test_scope_needs_the_weight_consumer_and_the_activation_producer_inside():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 5, 5, 3], name="input")
        with g.name_scope("block1"):
            inside_w = G.variable("weights", normal((3, 3, 3, 4), 4))
        with g.name_scope("other"):
            outside_w = G.variable("weights", normal((3, 3, 4, 4), 5))
        with g.name_scope("block1/"):
            a = G.conv2d(x, inside_w.read, name="conv_a")
        with g.name_scope("post"):
            a = G.relu(a)                       # producer of the activation outside the scope
        with g.name_scope("other/"):
            b = G.relu(G.conv2d(a, outside_w.read, name="conv_b"))  # consumer outside the scope
        L.global_avg_pool(b)
    Q.experimental_create_training_graph(g, scope="block1")
    # conv_a's weights are quantized (their consumer is in block1); its Relu is in `post`, so no
    # act_quant; conv_b is outside entirely.
    assert sorted(fake_quants(g)) == ["block1/weights_quant"]
    Q.experimental_create_training_graph(g, scope="other")
    assert sorted(fake_quants(g)) == ["block1/weights_quant", "other/act_quant",
                                      "other/weights_quant"]


def test_scope_weight_read_by_a_consumer_outside_is_not_quantized():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 5, 5, 3], name="input")
        with g.name_scope("block1"):
            w = G.variable("weights", normal((3, 3, 3, 4), 6))
        with g.name_scope("other"):
            y = G.relu(G.conv2d(x, w.read))
        L.global_avg_pool(y)
    Q.experimental_create_training_graph(g, scope="block1")
    assert fake_quants(g) == {}


def test_scope_bypass_outside_the_scope_gets_no_conv_quant():
    g, x = residual_graph(scoped=False)          # conv in `conv`, add and Relu at the top level
    Q.experimental_create_training_graph(g, scope="conv")
    # weights_quant: consumer conv/Conv2D inside; act_quant: producer Relu outside;
    # conv_quant: its consumer `add` is outside.
    assert sorted(fake_quants(g)) == ["conv/weights_quant"]


# -- 3. quant_delay ---------------------------------------------------------------------------

def small_net(quant_delay=None, rewrite=True, **kwargs):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [4, 6, 6, 3], name="input")
        y = L.conv2d(x, 4, activation="relu6", scope="conv")
        logits = L.dense(L.global_avg_pool(y), 3, scope="fc")
        out = G.softmax(logits, name="output")
    if rewrite:
        Q.experimental_create_training_graph(g, quant_delay=quant_delay, **kwargs)
    return g, x, out


def copy_variables(src, dst, names):
    for name in names:
        dst.set_variable_value(name, src.variable_value(name))


def test_quant_delay_passes_through_until_the_delay_while_ranges_update():
    g, x, out = small_net(quant_delay=3)
    fg, fx, fout = small_net(rewrite=False)
    s, fs = session(g), session(fg)
    copy_variables(s, fs, var_names(fg))
    # Each quantizer's delayed output next to its float input.
    pairs = {q: (g.get_tensor_by_name(q + "/delayed_quant/Merge:0"), op.inputs[0])
             for q, op in fake_quants(g).items()}
    ranges = [q + end for q in fake_quants(g) for end in ("/min", "/max")]
    previous = {name: s.variable_value(name) for name in ranges}
    for step in range(1, 6):
        feed = normal(x.shape, 10 + step)
        counter, quantized, merged = s.run(["fake_quantization_step/Identity:0", out, pairs],
                                           {x: feed})
        float_out = fs.run(fout, {fx: feed})
        assert counter == step and s.variable_value("fake_quantization_step") == step
        assert np.array_equal(quantized, float_out) == (step < 3), step
        for q, (delayed, source) in merged.items():
            assert np.array_equal(delayed, source) == (step < 3), (q, step)
        current = {name: s.variable_value(name) for name in ranges}
        if step <= 2:
            # Statistics keep updating during the delay (weights: first step only, they are fixed).
            changed = {n for n in ranges if not np.array_equal(current[n], previous[n])}
            assert {"conv/act_quant/max", "fc/act_quant/min", "fc/act_quant/max"} <= changed, step
            if step == 1:
                assert {"conv/weights_quant/min", "conv/weights_quant/max"} <= changed
        previous = current


@pytest.mark.parametrize("quant_delay", [0, None])
def test_no_quant_delay_quantizes_from_the_first_step(quant_delay):
    g, x, out = small_net(quant_delay=quant_delay)
    names = {op.name for op in g.get_operations()}
    assert not any(n.startswith("fake_quantization_step") or "delayed_quant" in n for n in names)
    fg, fx, fout = small_net(rewrite=False)
    s, fs = session(g), session(fg)
    copy_variables(s, fs, var_names(fg))
    feed = normal(x.shape, 20)
    assert not np.array_equal(s.run(out, {x: feed}), fs.run(fout, {fx: feed}))
    assert g.get_operation_by_name("output").inputs[0].op.type == "FakeQuantWithMinMaxVars"


def test_create_training_graph_defaults_to_no_delay():
    g, x, out = small_net(rewrite=False)
    assert Q.create_training_graph(g) is None
    assert "fake_quantization_step" not in {op.name for op in g.get_operations()}
    assert len(fake_quants(g)) == 4


# -- 4. batch-norm folding and freeze_bn_delay -------------------------------------------------

def bn_net(kind, rewrite, freeze_bn_delay=None, quant_delay=10 ** 6):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [4, 5, 5, 3], name="input")
        y = conv_block(kind, x, activation="relu", use_bias=False,
                       batch_norm={"momentum": MOMENTUM, "epsilon": EPS})
        G.identity(y, name="output")
    if rewrite:
        Q.experimental_create_training_graph(g, quant_delay=quant_delay,
                                             freeze_bn_delay=freeze_bn_delay)
    return g, x


def bn_init(s, scope, kind):
    w_name = "depthwise_weights" if kind == "depthwise" else "weights"
    channels = 6 if kind == "depthwise" else 4
    s.set_variable_value(f"{scope}/{w_name}", s.variable_value(f"{scope}/{w_name}") * F32(0.5))
    s.set_variable_value(f"{scope}/BatchNorm/gamma", (0.5 + rng(7).random(channels)).astype(F32))
    s.set_variable_value(f"{scope}/BatchNorm/beta", normal(channels, 8, 0.3))
    s.set_variable_value(f"{scope}/BatchNorm/moving_mean", normal(channels, 9, 0.2))
    s.set_variable_value(f"{scope}/BatchNorm/moving_variance",
                         (0.5 + rng(10).random(channels)).astype(F32))
    return w_name


def np_layer(kind, x, w):
    return np_depthwise(x, w) if kind == "depthwise" else np_conv(x, w)


@pytest.mark.parametrize("kind", ["conv", "depthwise"])
def test_freeze_bn_delay(kind):
    scope = "dw" if kind == "depthwise" else "conv"
    g, x = bn_net(kind, rewrite=True, freeze_bn_delay=2)
    pg, px = bn_net(kind, rewrite=False)
    s, ps = session(g), session(pg)
    w_name = bn_init(s, scope, kind)
    copy_variables(s, ps, var_names(pg))
    update_ops = g.get_collection(G.GraphKeys.UPDATE_OPS)
    plain_updates = pg.get_collection(G.GraphKeys.UPDATE_OPS)
    stats = [f"{scope}/BatchNorm/moving_mean", f"{scope}/BatchNorm/moving_variance"]
    w, gamma, beta = (s.variable_value(f"{scope}/{n}")
                      for n in (w_name, "BatchNorm/gamma", "BatchNorm/beta"))
    for step in range(1, 5):
        feed = normal(x.shape, 30 + step)
        before = [s.variable_value(n) for n in stats]
        folded = s.run([f"{scope}/add_fold:0", update_ops], {x: feed})[0]
        after = [s.variable_value(n) for n in stats]
        z = np_layer(kind, feed, w)
        mean, var = z.mean(axis=(0, 1, 2)), z.var(axis=(0, 1, 2))
        if step < 2:
            plain = ps.run([f"{scope}/BatchNorm/FusedBatchNormV3:0", plain_updates], {px: feed})[0]
            np.testing.assert_allclose(folded, plain, rtol=0, atol=2e-5)
            expected = (z - mean) / np.sqrt(var + EPS) * gamma + beta
            np.testing.assert_allclose(folded, expected, rtol=0, atol=2e-5)
            n = z.size // z.shape[-1]
            for value, old, stat in zip(after, before, (mean, var * n / (n - 1))):
                np.testing.assert_allclose(value, old - (old - stat) * (1 - MOMENTUM),
                                           rtol=1e-5, atol=1e-6)
            for a, b in zip(after, [ps.variable_value(n) for n in stats]):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        else:
            for a, b in zip(after, before):
                np.testing.assert_array_equal(a, b)
            mu, sigma = before[0].astype(np.float64), np.sqrt(before[1].astype(np.float64) + EPS)
            factor = gamma / sigma
            folded_w = w * (factor.reshape(w.shape[2:]) if kind == "depthwise" else factor)
            expected = np_layer(kind, feed, folded_w) + beta - mu * factor
            np.testing.assert_allclose(folded, expected, rtol=0, atol=2e-5)


@pytest.mark.parametrize("api", ["experimental", "create_training_graph"])
def test_freeze_bn_delay_none_never_freezes(api):
    g, x = bn_net("conv", rewrite=api == "experimental", freeze_bn_delay=None)
    if api == "create_training_graph":
        Q.create_training_graph(g, quant_delay=10 ** 6)
    assert not any("use_moving_average" in op.name for op in g.get_operations())
    pg, px = bn_net("conv", rewrite=False)
    s, ps = session(g), session(pg)
    bn_init(s, "conv", "conv")
    copy_variables(s, ps, var_names(pg))
    stats = ["conv/BatchNorm/moving_mean", "conv/BatchNorm/moving_variance"]
    for step in range(1, 6):
        feed = normal(x.shape, 40 + step)
        before = [s.variable_value(n) for n in stats]
        folded = s.run(["conv/add_fold:0", g.get_collection(G.GraphKeys.UPDATE_OPS)], {x: feed})[0]
        plain = ps.run(["conv/BatchNorm/FusedBatchNormV3:0", pg.get_collection(G.GraphKeys.UPDATE_OPS)],
                       {px: feed})[0]
        np.testing.assert_allclose(folded, plain, rtol=0, atol=2e-5)
        assert all(not np.array_equal(s.variable_value(n), b) for n, b in zip(stats, before)), step


def test_depthwise_fold_reshapes_the_factors_to_in_channels_by_multiplier():
    g, x = bn_net("depthwise", rewrite=True, freeze_bn_delay=2)
    for name in ("dw/BatchNorm_Fold/scale_reshape", "dw/BatchNorm_Fold/correction_reshape"):
        op = g.get_operation_by_name(name)
        assert op.type == "Reshape"
        assert list(op.inputs[1].op.attrs["value"]) == [3, 2]
        assert op.outputs[0].shape == (3, 2)
    fold = g.get_operation_by_name("dw/DepthwiseConv2dNative_Fold")
    assert fold.type == "DepthwiseConv2dNative"
    wq = fake_quants(g)["dw/weights_quant"]
    assert wq.inputs[0].name == "dw/mul_fold:0"
    assert fold.inputs[1].name == "dw/weights_quant/delayed_quant/Merge:0"  # quant_delay is set


def test_matmul_batch_norm_is_folded():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [4, 6], name="input")
        with g.name_scope("fc"):
            w = G.variable("weights", normal((6, 5), 11))
            y = G.reshape(G.matmul(x, w.read), [4, 1, 1, 5])
            y = L.batch_norm(y)
            y = G.relu(G.reshape(y, [4, 5], name="Reshape_1"))
        G.identity(y, name="output")
    Q.experimental_create_training_graph(g)
    names = {op.name for op in g.get_operations()}
    assert {"fc/MatMul_Fold", "fc/mul_fold"} <= names
    assert "fc/weights_quant" in fake_quants(g)


def dense_bn_net(training=True, freeze_bn_delay=None):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [16, 6], name="input")
        y = L.dense(x, 5, activation="relu", batch_norm={"momentum": MOMENTUM, "epsilon": EPS},
                    is_training=training, scope="fc")
        G.identity(y, name="output")
    return g


def test_dense_batch_norm_folds_numerically():
    """MatMul -> Reshape -> batch norm -> Reshape: before the freeze the folded layer equals batch
    norm with batch statistics; from the freeze step on it uses the moving statistics."""
    x = normal((16, 6), 21)
    plain = dense_bn_net()
    folded = dense_bn_net()
    Q.experimental_create_training_graph(folded, quant_delay=100, freeze_bn_delay=2)
    assert {"fc/MatMul_Fold", "fc/mul_fold", "fc/post_conv_mul", "fc/add_fold"} <= {
        op.name for op in folded.get_operations()}
    s_plain, s_folded = session(plain), session(folded)
    w = normal((6, 5), 22)
    for s in (s_plain, s_folded):
        s.set_variable_value("fc/weights", w)
        s.set_variable_value("fc/BatchNorm/gamma", np.linspace(0.5, 1.5, 5, dtype=np.float32))
        s.set_variable_value("fc/BatchNorm/beta", np.linspace(-1, 1, 5, dtype=np.float32))
    feed = {"input:0": x}
    updates = folded.get_collection(G.GraphKeys.UPDATE_OPS)
    first = s_folded.run(["output:0", updates], feed)[0]
    np.testing.assert_allclose(first, s_plain.run("output:0", feed), rtol=1e-5, atol=1e-5)
    mean = s_folded.variable_value("fc/BatchNorm/moving_mean").astype(np.float64)
    var = s_folded.variable_value("fc/BatchNorm/moving_variance").astype(np.float64)
    z = x.astype(np.float64) @ w
    np.testing.assert_allclose(mean, 0.9 * 0 + 0.1 * z.mean(axis=0), rtol=1e-5, atol=1e-6)
    frozen = s_folded.run(["output:0", updates], feed)[0]
    gamma = np.linspace(0.5, 1.5, 5)
    beta = np.linspace(-1, 1, 5)
    expected = np.maximum(z * gamma / np.sqrt(var + EPS) + beta - mean * gamma / np.sqrt(var + EPS), 0)
    np.testing.assert_allclose(frozen, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(s_folded.variable_value("fc/BatchNorm/moving_mean"), mean.astype(np.float32))


def test_dense_batch_norm_eval_graph_folds_without_corrections():
    g = dense_bn_net(training=False)
    Q.experimental_create_eval_graph(g)
    names = {op.name for op in g.get_operations()}
    assert "fc/MatMul_Fold" in names and "fc/post_conv_mul" not in names
    assert "fc/weights_quant" in fake_quants(g) and "fc/act_quant" in fake_quants(g)


# -- 5. eval graphs ---------------------------------------------------------------------------

def eval_net(is_training):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [8, 6, 6, 3], name="input")
        labels = G.placeholder("int32", [8], name="labels")
        y = L.conv2d(x, 4, activation="relu6", use_bias=False, is_training=is_training,
                     batch_norm={"momentum": MOMENTUM, "epsilon": EPS}, scope="conv")
        logits = L.dense(L.global_avg_pool(y), 3, scope="fc")
        G.identity(logits, name="output")
        loss = L.sparse_softmax_cross_entropy(labels, logits)
    return g, x, labels, loss


@pytest.fixture(scope="module")
def trained():
    """A training graph after 5 SGD steps (batch norm frozen from step 2)."""
    g, x, labels, loss = eval_net(True)
    Q.experimental_create_training_graph(g, quant_delay=0, freeze_bn_delay=2)
    with g.as_default():
        train = G.GradientDescentOptimizer(0.05).minimize(loss)
    s = session(g)
    feed = {x: normal(x.shape, 50, 0.5), labels: rng(51).integers(0, 3, 8)}
    for _ in range(5):
        s.run([train, g.get_collection(G.GraphKeys.UPDATE_OPS)], feed)
    return g, s, feed


@pytest.mark.parametrize("rewrite", [Q.create_eval_graph, Q.experimental_create_eval_graph])
def test_eval_graph_structure(rewrite):
    g, x, labels, loss = eval_net(False)
    assert rewrite(g) is None
    names = [op.name for op in g.get_operations()]
    for part in ("batch_norm_correction", "post_conv_mul", "correction_add", "fake_quantization_step",
                 "delayed_quant", "AssignMinLast", "AssignMinEma"):
        assert not any(part in n for n in names), part
    assert {"conv/Conv2D_Fold", "conv/mul_fold", "conv/add_fold"} <= set(names)
    assert not any("biased" in n or "local_step" in n for n in var_names(g))
    fq = fake_quants(g)
    assert sorted(fq) == ["conv/act_quant", "conv/weights_quant", "fc/act_quant", "fc/weights_quant"]
    for q, op in fq.items():
        assert [t.name for t in op.inputs[1:]] == [f"{q}/min/read:0", f"{q}/max/read:0"]
    assert fq["conv/weights_quant"].inputs[0].name == "conv/mul_fold:0"
    writes = [op for op in g.get_operations() if op.type in ("Assign", "AssignAdd", "AssignSub")]
    assert all(op.inputs[1].op.name.endswith(("/Initializer/Const", "/Initializer/zeros",
                                              "/Initializer/ones")) for op in writes)


def load_eval(trained):
    tg, ts, feed = trained
    g, x, labels, loss = eval_net(False)
    Q.experimental_create_eval_graph(g)
    s = session(g)
    names = var_names(g)
    assert names <= var_names(tg)
    copy_variables(ts, s, names)
    return g, s, x, {x: feed[tg.get_tensor_by_name("input:0")]}


def test_eval_graph_uses_the_stored_ranges_and_moving_statistics(trained):
    tg, ts, _ = trained
    g, s, x, feed = load_eval(trained)
    state = s.variable_values()
    fq = fake_quants(g)
    tensors = {q: (op.inputs[0], op.outputs[0]) for q, op in fq.items()}
    values = s.run(tensors, feed)
    for q, (inp, out) in values.items():
        lo, hi = s.variable_value(q + "/min"), s.variable_value(q + "/max")
        narrow = q.endswith("weights_quant")
        np.testing.assert_array_equal(out, reference.vars(inp, lo, hi, 8, narrow), err_msg=q)
    w = s.variable_value("conv/weights")
    gamma = s.variable_value("conv/BatchNorm/gamma")
    sigma = np.sqrt(s.variable_value("conv/BatchNorm/moving_variance").astype(np.float64) + EPS)
    np.testing.assert_allclose(values["conv/weights_quant"][0], w * (gamma / sigma),
                               rtol=1e-6, atol=1e-7)
    # Running the eval graph changes no state.
    after = s.variable_values()
    assert all(np.array_equal(after[k], v) for k, v in state.items())

    # A batch far outside the stored range is clipped at the stored (nudged) maximum.
    big = {x: feed[x] * F32(100)}
    out = s.run(fq["conv/act_quant"].outputs[0], big)
    lo, hi = s.variable_value("conv/act_quant/min"), s.variable_value("conv/act_quant/max")
    assert hi < 6
    assert out.max() == reference.nudge(lo, hi, 8, False)[1]


def test_eval_graph_matches_the_frozen_training_graph(trained):
    tg, ts, tfeed = trained
    g, s, x, feed = load_eval(trained)
    ours = s.run("output:0", feed)
    # The training graph evaluated without state updates: stored ranges, frozen statistics.
    theirs = ts.run("output:0", tfeed, update_state=False)
    scale = float(reference.nudge(s.variable_value("fc/act_quant/min"),
                                  s.variable_value("fc/act_quant/max"), 8, False)[2])
    assert np.abs(ours - theirs).max() <= scale * 1.001
    assert np.mean(ours == theirs) > 0.9


# -- 6. guard and arguments -------------------------------------------------------------------

REWRITES = [Q.create_training_graph, Q.create_eval_graph, Q.experimental_create_training_graph,
            Q.experimental_create_eval_graph]


@pytest.mark.parametrize("rewrite", REWRITES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("optimizer", [lambda: G.GradientDescentOptimizer(0.1),
                                       lambda: G.MomentumOptimizer(0.1, 0.9),
                                       lambda: G.AdamOptimizer(0.01)], ids=["sgd", "momentum", "adam"])
def test_graph_with_an_optimizer_is_refused(rewrite, optimizer):
    g, x, labels, loss = eval_net(True)
    with g.as_default():
        optimizer().minimize(loss)
    count = len(g.get_operations())
    with pytest.raises(ValueError, match=r"^Training op found in graph, exiting"):
        rewrite(g)
    assert len(g.get_operations()) == count


@pytest.mark.parametrize("kwargs, argument", [
    ({"weight_bits": 1}, "weight_bits"), ({"weight_bits": 17}, "weight_bits"),
    ({"weight_bits": "8"}, "weight_bits"), ({"activation_bits": 1}, "activation_bits"),
    ({"activation_bits": 17}, "activation_bits"), ({"activation_bits": 8.0}, "activation_bits"),
    ({"quant_delay": -1}, "quant_delay"), ({"freeze_bn_delay": -2}, "freeze_bn_delay"),
    ({"scope": 3}, "scope"), ({"scope": ["block1"]}, "scope"),
    ({"quant_delay": 2**63}, "quant_delay"), ({"freeze_bn_delay": 2**64}, "freeze_bn_delay"),
    ({"symmetric": "False"}, "symmetric"), ({"symmetric": 1}, "symmetric"),
    ({"symmetric": None}, "symmetric")])
def test_invalid_arguments_name_the_argument(kwargs, argument):
    g, x, out = small_net(rewrite=False)
    count = len(g.get_operations())
    with pytest.raises((ValueError, TypeError), match=argument):
        Q.experimental_create_training_graph(g, **kwargs)
    if "freeze_bn_delay" not in kwargs:
        with pytest.raises((ValueError, TypeError), match=argument):
            Q.experimental_create_eval_graph(g, **kwargs)
    assert len(g.get_operations()) == count


def test_create_training_graph_validates_quant_delay():
    g, x, out = small_net(rewrite=False)
    with pytest.raises(ValueError, match="quant_delay"):
        Q.create_training_graph(g, quant_delay=-5)


@pytest.mark.parametrize("rewrite", REWRITES, ids=lambda f: f.__name__)
def test_default_graph_is_used_and_none_returned(rewrite):
    g, x, out = small_net(rewrite=False)
    other = G.Graph()
    with g.as_default():
        assert rewrite() is None
    assert len(fake_quants(g)) == 4
    assert other.get_operations() == []


# -- 7. training end to end -------------------------------------------------------------------

def test_tiny_cnn_trains_and_every_fake_quant_is_on_its_grid():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [16, 8, 8, 3], name="input")
        labels = G.placeholder("int32", [16], name="labels")
        bn = {"momentum": MOMENTUM, "epsilon": EPS}
        h1 = L.conv2d(x, 8, activation="relu6", batch_norm=bn, scope="conv1")
        h2 = L.depthwise_conv2d(h1, activation="relu6", batch_norm=bn, scope="dw")
        with g.name_scope("block"):
            h3 = L.conv2d(h2, 8, kernel_size=1, activation=None, batch_norm=bn, scope="project")
        with g.name_scope("block/"):
            h = G.relu6(G.add(h3, h1, name="add"))
        logits = L.dense(L.global_avg_pool(h), 4, scope="fc")
        loss = L.sparse_softmax_cross_entropy(labels, logits)
    Q.experimental_create_training_graph(g, quant_delay=2, freeze_bn_delay=4)
    fq = fake_quants(g)
    assert {"conv1/weights_quant", "conv1/act_quant", "dw/weights_quant", "dw/act_quant",
            "block/project/weights_quant", "block/project/conv_quant", "block/act_quant",
            "fc/weights_quant", "fc/act_quant"} <= set(fq)
    with g.as_default():
        train = G.MomentumOptimizer(0.05, 0.9).minimize(loss)
    s = session(g)
    feed = {x: normal(x.shape, 60), labels: rng(61).integers(0, 4, 16)}
    probes = {q: (op.outputs[0], op.inputs[1], op.inputs[2]) for q, op in fq.items()}
    losses = []
    for step in range(1, 11):
        _, value, probed = s.run([train, loss, probes], feed)
        assert np.isfinite(value)
        losses.append(float(value))
        for q, (y, lo, hi) in probed.items():
            op = fq[q]
            assert on_grid(y, lo, hi, op.attrs["num_bits"], op.attrs["narrow_range"]), (q, step)
    assert s.variable_value("fake_quantization_step") == 10
    assert losses[-1] < losses[0] * 0.9, losses
