"""The rewrite against TF 1.15's contrib.quantize (tests/data/contrib_ref): the same inserted ops,
names and wiring; the same 8 training steps and eval results within float32 tolerance."""
import numpy as np
import pytest

import fqcore.graph as G
from fqcore import quantize

from contrib_ref_model import build, evaluate, load, train

# Re-running TF with another summation order moved nothing by more than 7.2e-7 (README).
TOLERANCE = 1e-5

CASES = {
    "N1_b": (lambda g: quantize.experimental_create_training_graph(g, quant_delay=3, freeze_bn_delay=5),
             lambda g: quantize.experimental_create_eval_graph(g, weight_bits=8, activation_bits=8,
                                                               symmetric=False)),
    "N3_a": (lambda g: quantize.experimental_create_training_graph(g, weight_bits=8,
                                                                   activation_bits=8, quant_delay=0),
             lambda g: quantize.create_eval_graph(g)),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    description, data = load(request.param)
    return request.param, description, data


def _wiring(op):
    return [op.type, [t.name for t in op.inputs], ["^" + c.name for c in op.control_inputs]]


def _is_initializer(name):
    # The reference initialised batch-norm variables with Consts; fqcore's layer uses zeros/ones.
    return "/Initializer/" in name


def test_graph_before_rewrite_matches(case):
    name, description, _ = case
    ours = {op.name for op in build(description, training=True).get_operations()}
    ref = {op[0] for op in description["graph_before_rewrite"]}
    # loss/xent/Shape is an unused Const TF's cross-entropy builds.
    assert {n for n in ours ^ ref if not _is_initializer(n)} == {"loss/xent/Shape"} & ref


def test_rewrite_inserts_the_same_ops_with_the_same_wiring(case):
    name, description, _ = case
    g = build(description, training=True)
    before = {op.name for op in g.get_operations()}
    CASES[name][0](g)
    ops = g.get_operations()
    assert sorted(op.name for op in ops if op.name not in before) == sorted(description["new_op_names"])
    assert sorted(op.name for op in ops if "_quant" in op.name) == description["quant_op_names"]
    for key, tensor in description["rerouted_inputs"].items():
        op_name, index = key.split(":in")
        assert g.get_operation_by_name(op_name).inputs[int(index)].name == tensor, key
    ref = {op[0]: op for op in description["graph_after_rewrite"]}
    for op in ops:
        if op.name in ref and not _is_initializer(op.name) and not op.name.endswith("/Assign"):
            assert _wiring(op) == ref[op.name][1:4], op.name


def test_fake_quant_ops_have_the_reference_attributes(case):
    name, description, _ = case
    g = build(description, training=True)
    CASES[name][0](g)
    for ref in description["fake_quant_ops"]:
        op = g.get_operation_by_name(ref["name"])
        assert op.type == ref["type"]
        assert op.attrs["num_bits"] == ref["num_bits"]
        assert op.attrs["narrow_range"] == ref["narrow_range"]
        assert op.inputs[0].name == ref["input_tensor"]
        assert [t.op.name for t in op.inputs[1:]] == [ref["min_input"][:-2], ref["max_input"][:-2]]
        assert sorted(c.name for c in op.outputs[0].consumers()) == sorted(ref["consumers"])


@pytest.fixture(scope="module")
def trained(case):
    name, description, data = case
    return (name, description, data) + train(description, data, CASES[name][0])


def test_per_step_losses_and_logits(trained):
    name, description, data, g, steps, _ = trained
    for k, (loss, logits, logits_float) in enumerate(steps):
        assert abs(loss - data["loss_per_step"][k]) <= TOLERANCE, k
        np.testing.assert_allclose(logits, data["logits_per_step"][k], rtol=0, atol=TOLERANCE)
        np.testing.assert_allclose(logits_float, data["logits_float_per_step"][k], rtol=0,
                                   atol=TOLERANCE)


def test_variable_trajectories(trained):
    """Weights, quant ranges, EMA shadows, batch-norm statistics and the step counter after every
    step (relative to each variable's scale: ranges reach ~6)."""
    name, description, data, g, steps, trajectory = trained
    for k, values in enumerate(trajectory):
        for var in description["variables"]:
            ref = data[var["npz_traj"]][k + 1]
            ours = values[var["name"]]
            assert ours.dtype == ref.dtype, var["name"]
            if ref.dtype.kind == "i":
                assert np.array_equal(ours, ref), (var["name"], k)
                continue
            scale = max(1.0, float(np.abs(ref).max()))
            assert np.abs(ours.astype(np.float64) - ref).max() <= TOLERANCE * scale, (var["name"], k)


def test_quant_delay_and_freeze_bn_delay(trained):
    """N1_b: float logits before step 3, quantized from it; moving statistics frozen from step 5."""
    name, description, data, g, steps, trajectory = trained
    for k, info in enumerate(description["per_step"]):
        logits, logits_float = steps[k][1], steps[k][2]
        assert np.array_equal(logits, logits_float) == (not info["quant_active"]), k
        if "fake_quantization_step" in trajectory[k]:
            assert int(trajectory[k]["fake_quantization_step"]) == info["fake_quantization_step_seen"]
    if name == "N1_b":
        for stat in ("conv2/BatchNorm/moving_mean", "conv2/BatchNorm/moving_variance"):
            changed = [not np.array_equal(trajectory[k][stat], trajectory[k - 1][stat])
                       for k in range(1, len(trajectory))]
            assert changed == [True, True, True, False, False, False, False], stat


def test_eval_graph(case):
    name, description, data = case
    g, (logits, logits_float, loss), on_train = evaluate(description, data, CASES[name][1])
    ref = description["eval"]
    assert sorted(op.name for op in g.get_operations() if "_quant" in op.name) == ref["quant_op_names"]
    assert sorted(v.op.name for v in G.global_variables(g)) == sorted(ref["variables"])
    np.testing.assert_allclose(logits, data["eval_logits"], rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(logits_float, data["eval_logits_float"], rtol=0, atol=TOLERANCE)
    assert abs(loss - data["eval_loss"]) <= TOLERANCE
    np.testing.assert_allclose(on_train, data["eval_logits_on_train_batch"], rtol=0, atol=TOLERANCE)
