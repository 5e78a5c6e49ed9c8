"""contrib 1.15's batch-norm folding cases, as its tests build them, on fqcore's graphs.

The expectations are written from TF 1.15's tensorflow/contrib/quantize/python/
fold_batch_norms_test.py (_TestFoldConv2d, _TestFoldFullyConnectedLayer,
_TestFoldDepthwiseConv2d, _TestFoldAtrousConv2d, _TestCompareFoldAndUnfolded, its parameter list,
_BatchNormMultiplierName, _BathNormBiasName, _AssertMovingAveragesAreFrozen) and from
fold_batch_norms.py (_FoldFusedBatchNorms / _CloneWithNewOperands for the fused names,
_CreateFoldedOp for the unfused ones). Differences, on purpose: inputs are 16x16 (not 128x128)
and a placeholder (not zeros), and add_fold is AddV2 where contrib's tests, written under TF's
2019 forward-compatibility window, expect Add (TF 1.15 itself emits AddV2)."""
import numpy as np
import pytest

import fqcore.graph as G
import fqcore.quantize as Q
from fqcore.graph import layers as L

from quantize_helpers import session

F32 = np.float32

# contrib's _RunTestOverParameters: (relu, with_bypass, has_scaling, fused, freeze delay,
# identity between layer and batch norm).
PARAMETERS = [
    ("relu6", False, False, False, 100, False),
    ("relu", False, False, False, None, False),
    ("relu6", True, False, False, 100, False),
    ("relu", True, False, False, None, False),
    ("relu6", False, True, False, 100, False),
    ("relu", False, True, False, None, False),
    ("relu6", True, True, False, 100, False),
    ("relu", True, True, False, None, False),
    ("relu6", False, True, True, None, False),
    ("relu", False, True, True, 100, False),
    ("relu6", True, True, True, None, False),
    ("relu", True, True, True, 100, False),
    ("relu6", False, True, True, None, True),
    ("relu", False, True, True, 100, True),
    ("relu6", True, True, True, None, True),
    ("relu", True, True, True, 100, True),
]
RELU_OP = {"relu": "Relu", "relu6": "Relu6"}
KINDS = ("conv2d", "fully_connected", "depthwise", "atrous")
# The op each kind folds, and what contrib names its layer scope when the layer is built
# inside `with name_scope(name)` (the identity case).
LAYER_OP = {"conv2d": "Conv2D", "fully_connected": "MatMul", "depthwise": "depthwise",
            "atrous": "depthwise"}
DEFAULT_SCOPE = {"conv2d": "Conv", "fully_connected": "fully_connected",
                 "depthwise": "SeparableConv2d", "atrous": "SeparableConv2d"}
SIZE = 16


def _relu(name):
    return {"relu": G.relu, "relu6": G.relu6}[name]


def _layer(kind, x, out_depth, stride, activation, batch_norm, is_training, scope):
    if kind == "conv2d":
        return L.conv2d(x, out_depth, 5, stride=stride, activation=activation,
                        batch_norm=batch_norm, is_training=is_training, use_bias=False,
                        scope=scope)
    if kind == "fully_connected":
        return L.dense(x, out_depth, activation=activation, batch_norm=batch_norm,
                       is_training=is_training, use_bias=False, scope=scope)
    if kind == "depthwise":
        return L.separable_conv2d(x, None, 5, stride=stride, activation=activation,
                                  batch_norm=batch_norm, is_training=is_training,
                                  use_bias=False, scope=scope)
    return L.separable_conv2d(x, None, 3, dilation=2, activation=activation,
                              batch_norm=batch_norm, is_training=is_training, use_bias=False,
                              scope=scope)


def build(kind, relu, with_bypass, has_scaling, fused, identity, is_training=True, seed=1234,
          center=True):
    """contrib's test network: inputs -> layer with batch norm (decay 0.997) -> Relu*, or with a
    bypass: -> Add(inputs, .) -> Relu* under `test/`. Returns (graph, inputs, relu output, the
    layer scope, the batch norm scope)."""
    g = G.Graph()
    g.seed = seed
    with g.as_default():
        if kind == "fully_connected":
            inputs = G.placeholder("float32", [5, 32], name="inputs")
            out_depth = 32 if with_bypass else 16
        else:
            inputs = G.placeholder("float32", [5, SIZE, SIZE, 3], name="inputs")
            out_depth = 3 if with_bypass else 8
        stride = 1 if with_bypass or kind == "atrous" else 2
        activation = None if with_bypass else relu
        name = "test/test2" if with_bypass else "test"
        bn = dict(momentum=0.997, scale=has_scaling, center=center, fused=fused)
        if identity:
            with g.name_scope(name):
                node = _layer(kind, inputs, out_depth, stride, None, None, is_training,
                              DEFAULT_SCOPE[kind])
                node = G.identity(node, name="layer_out")
                if kind == "fully_connected":
                    node = G.reshape(node, [-1, 1, 1, out_depth])
                node = L.batch_norm(node, is_training=is_training, **bn)
                if kind == "fully_connected":
                    node = G.reshape(node, [-1, out_depth])
                if activation is not None:
                    node = _relu(activation)(node)
            layer_scope = f"{name}/{DEFAULT_SCOPE[kind]}"
        else:
            node = _layer(kind, inputs, out_depth, stride, activation, bn, is_training, name)
            layer_scope = name
        out = node
        if with_bypass:
            node = G.add(inputs, node, name="test/Add")
            out = _relu(relu)(node, name=f"test/{RELU_OP[relu]}")
    return g, inputs, out, layer_scope, name


def _inputs(op):
    return sorted(t.name for t in op.inputs)


def _goes_to(g, op, name):
    return op.outputs[0] in g.get_operation_by_name(name).inputs


def _multiplier_name(scope, has_scaling, fused):
    if has_scaling:
        return f"{scope}/BatchNorm_Fold/mul" if fused else f"{scope}/BatchNorm/batchnorm_1/mul"
    return f"{scope}/BatchNorm/batchnorm_1/Rsqrt"


def _bias_name(scope, fused):
    return f"{scope}/BatchNorm_Fold/bias" if fused else f"{scope}/BatchNorm/batchnorm_1/sub"


def _cases():
    for kind in KINDS:
        for params in PARAMETERS:
            relu, bypass, scaling, fused, delay, identity = params
            if kind == "fully_connected" and identity != fused:
                # contrib's FC test sets insert_identity_node = fused_batch_norm.
                continue
            yield pytest.param(kind, *params, id=f"{kind}-{relu}-bypass{int(bypass)}-scale"
                               f"{int(scaling)}-fused{int(fused)}-delay{delay}-id{int(identity)}")


@pytest.mark.parametrize("kind,relu,with_bypass,has_scaling,fused,delay,identity", list(_cases()))
def test_fold_names_types_and_wiring_as_contrib(kind, relu, with_bypass, has_scaling, fused,
                                                delay, identity):
    g, inputs, _, scope, name = build(kind, relu, with_bypass, has_scaling, fused, identity)
    Q.FoldBatchNorms(g, is_training=True, freeze_batch_norm_delay=delay)
    # With the identity, the unfused names live in the batch norm's scope (contrib's context).
    ctx = name if (identity and not fused) else scope
    mul_fold = g.get_operation_by_name(f"{ctx}/mul_fold")
    assert mul_fold.type == "Mul"
    layer_fold = g.get_operation_by_name(f"{scope}/{LAYER_OP[kind]}_Fold")
    assert _goes_to(g, mul_fold, layer_fold.name)
    # _CloneWithNewOperands keeps the layer's attributes (strides, padding, transposes).
    layer = g.get_operation_by_name(f"{scope}/{LAYER_OP[kind]}")
    assert layer_fold.attrs == layer.attrs
    if kind in ("depthwise", "atrous"):
        reshape = (f"{scope}/BatchNorm_Fold/scale_reshape" if fused
                   else f"{ctx}/scale_reshape")
        assert _inputs(mul_fold) == sorted([f"{ctx}/correction_mult:0", f"{reshape}:0"])
        scale_reshape = g.get_operation_by_name(reshape)
        assert scale_reshape.type == "Reshape"
        assert _inputs(scale_reshape) == sorted(
            [f"{_multiplier_name(ctx, has_scaling, fused)}:0", f"{reshape}/shape:0"])
        assert layer_fold.type == "DepthwiseConv2dNative"
    else:
        assert _inputs(mul_fold) == sorted(
            [f"{ctx}/correction_mult:0", f"{_multiplier_name(ctx, has_scaling, fused)}:0"])
        assert layer_fold.type == {"conv2d": "Conv2D", "fully_connected": "MatMul"}[kind]
    if kind == "atrous":
        assert _inputs(layer_fold) == sorted(
            [f"{ctx}/mul_fold:0", f"{scope}/depthwise/SpaceToBatchND:0"])
        batch_to_space = (f"{scope}/BatchToSpaceND_Fold" if fused
                          else f"{scope}/depthwise/BatchToSpaceND_Fold")
        assert g.get_operation_by_name(batch_to_space).type == "BatchToSpaceND"
        assert _goes_to(g, layer_fold, batch_to_space)
    else:
        assert _inputs(layer_fold) == sorted([f"{ctx}/mul_fold:0", inputs.name])
        assert _goes_to(g, layer_fold, f"{ctx}/post_conv_mul")
    add_fold = g.get_operation_by_name(f"{ctx}/add_fold")
    assert add_fold.type == "AddV2"
    assert _inputs(add_fold) == sorted([f"{ctx}/correction_add:0",
                                        f"{_bias_name(ctx, fused)}:0"])
    consumer = "test/Add" if with_bypass else f"test/{RELU_OP[relu]}"
    assert _goes_to(g, add_fold, consumer)
    if delay is not None:
        for suffix, cond in (("AssignMovingAvg/mul", "freeze_moving_mean/Merge"),
                             ("AssignMovingAvg_1/mul", "freeze_moving_var/Merge")):
            mul = g.get_operation_by_name(f"{name}/BatchNorm/{suffix}")
            assert cond in mul.inputs[1].name
    assert not any("//" in op.name for op in g.get_operations())
    assert g.quantize_report.skipped == []


# Folded against unfolded (contrib's _TestCompareFoldAndUnfolded, with fqcore's float32
# tolerance instead of contrib's atol 1e-3, and also after the freeze and in inference).

def _randomize_batch_norm(s, g):
    """Non-trivial gamma, beta and moving statistics, so the fold changes every channel."""
    rng = np.random.default_rng(7)
    for var in G.global_variables(g):
        shape = var.shape
        if var.op.name.endswith(("gamma", "moving_variance")):
            s.set_variable_value(var.op.name, rng.uniform(0.5, 2.0, shape).astype(F32))
        elif var.op.name.endswith(("beta", "moving_mean")):
            s.set_variable_value(var.op.name, rng.normal(0.0, 0.5, shape).astype(F32))


def _copy_variables(source, s, g):
    for var in G.global_variables(g):
        try:
            s.set_variable_value(var.op.name, source.variable_value(var.op.name))
        except KeyError:
            pass


def _forward_and_input_gradient(g, s, inputs, out, x):
    w = np.random.default_rng(3).standard_normal(out.shape).astype(F32)
    with g.as_default():
        loss = G.reduce_sum(G.multiply(out, G.constant(w)))
        grad = g.create_op("Gradients", [loss, inputs], name="gradients").outputs[0]
    return s.run([out, grad], {inputs: x}, update_state=False)


def _input(inputs):
    return np.random.default_rng(11).uniform(-1.0, 1.0, inputs.shape).astype(F32)


def _fold_cases():
    """contrib's parameters plus center=False and (fused) scale=False, which slim builds with
    Consts for beta / gamma (fused) or a Neg in the shift (unfused)."""
    for kind in KINDS:
        for fused in (True, False):
            for scaling, center in ((True, True), (False, True), (True, False), (False, False)):
                for bypass in (False, True):
                    yield pytest.param(kind, fused, scaling, center, bypass,
                                       id=f"{kind}-fused{int(fused)}-scale{int(scaling)}-"
                                          f"center{int(center)}-bypass{int(bypass)}")


@pytest.mark.parametrize("kind,fused,has_scaling,center,with_bypass", list(_fold_cases()))
def test_folded_equals_unfolded_before_the_freeze(kind, fused, has_scaling, center,
                                                  with_bypass):
    results = []
    for fold in (False, True):
        g, inputs, out, _, _ = build(kind, "relu6", with_bypass, has_scaling, fused, False,
                                     center=center)
        if fold:
            Q.FoldBatchNorms(g, is_training=True, freeze_batch_norm_delay=100)
            assert g.quantize_report.skipped == [] and len(g.quantize_report.folded) == 1
        s = session(g)
        _randomize_batch_norm(s, g)
        results.append(_forward_and_input_gradient(g, s, inputs, out, _input(inputs)))
    (y0, dx0), (y1, dx1) = results
    np.testing.assert_allclose(y1, y0, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dx1, dx0, rtol=1e-3, atol=1e-4)
    assert np.abs(y0).max() > 0.1 and np.abs(dx0).max() > 0.1


@pytest.mark.parametrize("kind,fused,has_scaling,center,with_bypass", list(_fold_cases()))
def test_folded_after_the_freeze_equals_inference_on_the_moving_statistics(
        kind, fused, has_scaling, center, with_bypass):
    """freeze_batch_norm_delay=0: from the first step the folded training graph normalizes with
    the moving statistics, as the unfolded network in inference mode does."""
    g, inputs, out, _, _ = build(kind, "relu6", with_bypass, has_scaling, fused, False,
                                 center=center)
    Q.FoldBatchNorms(g, is_training=True, freeze_batch_norm_delay=0)
    s = session(g)
    _randomize_batch_norm(s, g)
    x = _input(inputs)
    folded = s.run(out, {inputs: x}, update_state=False)
    reference, ref_inputs, ref_out, _, _ = build(kind, "relu6", with_bypass, has_scaling, fused,
                                                 False, is_training=False, center=center)
    r = session(reference)
    _copy_variables(s, r, reference)
    np.testing.assert_allclose(folded, r.run(ref_out, {ref_inputs: x}), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind,fused,has_scaling,center,with_bypass", list(_fold_cases()))
def test_eval_fold_equals_unfolded_inference(kind, fused, has_scaling, center, with_bypass):
    results = []
    for fold in (False, True):
        g, inputs, out, _, _ = build(kind, "relu", with_bypass, has_scaling, fused, False,
                                     is_training=False, center=center)
        if fold:
            Q.FoldBatchNorms(g, is_training=False)
            assert g.quantize_report.skipped == [] and len(g.quantize_report.folded) == 1
        s = session(g)
        _randomize_batch_norm(s, g)
        results.append(s.run(out, {inputs: _input(inputs)}))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-4)


# Graphs contrib 1.15 cannot fold, which fqcore folds (and says so in fold_unfused.py /
# fold_fused.py): slim's forced updates (updates_collections=None), an unfused batch norm read
# through an Identity, and an atrous Conv2D (contrib re-creates the BatchToSpaceND only after
# a depthwise layer).

def _extra_graph(case, is_training):
    g = G.Graph()
    g.seed = 5
    with g.as_default():
        inputs = G.placeholder("float32", [4, 12, 12, 3], name="inputs")
        if case == "forced_updates_fused" or case == "forced_updates_unfused":
            bn = dict(fused=case.endswith("_fused"), updates_collections=None)
            out = L.conv2d(inputs, 6, 3, activation="relu", batch_norm=bn,
                           is_training=is_training, scope="conv")
        elif case == "identity_unfused":
            with g.name_scope("block"):
                y = L.conv2d(inputs, 6, 3, activation=None, use_bias=False, scope="Conv")
                y = L.batch_norm(G.identity(y, name="conv_out"), fused=False,
                                 is_training=is_training)
                out = G.relu(y)
        else:
            out = L.conv2d(inputs, 6, 3, dilation=2, activation="relu",
                           batch_norm=dict(fused=case.endswith("_fused")),
                           is_training=is_training, scope="atrous")
    return g, inputs, out


EXTRA_CASES = ["forced_updates_fused", "forced_updates_unfused", "identity_unfused",
               "atrous_conv_fused", "atrous_conv_unfused"]


@pytest.mark.parametrize("case", EXTRA_CASES)
def test_graphs_contrib_cannot_fold_fold_and_agree(case):
    outputs = {}
    for fold in (False, True):
        g, inputs, out = _extra_graph(case, True)
        if fold:
            Q.FoldBatchNorms(g, is_training=True, freeze_batch_norm_delay=50)
            assert g.quantize_report.skipped == [] and len(g.quantize_report.folded) == 1
        s = session(g)
        _randomize_batch_norm(s, g)
        outputs[fold] = _forward_and_input_gradient(g, s, inputs, out, _input(inputs))
    for unfolded, folded in zip(outputs[False], outputs[True]):
        np.testing.assert_allclose(folded, unfolded, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("case", EXTRA_CASES)
@pytest.mark.parametrize("is_training", [True, False])
def test_graphs_contrib_cannot_fold_are_quantized(case, is_training):
    g, inputs, out = _extra_graph(case, is_training)
    (Q.experimental_create_training_graph if is_training
     else Q.experimental_create_eval_graph)(g)
    report = g.quantize_report
    assert report.skipped == [] and len(report.quantized) == 1 and len(report.folded) == 1
    s = session(g)
    assert np.isfinite(s.run(out, {inputs: _input(inputs)})).all()
