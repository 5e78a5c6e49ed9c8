"""copy_graph (an independent copy a rewrite cannot reach through) and the GraphDef-like JSON
(round trips of built, rewritten and trained graphs, exact constants, atomic writes, validation
errors that name the node and the field)."""
import copy
import json
import math
import os

import numpy as np
import pytest

import fqcore.graph as G
import fqcore.quantize as Q
from fqcore import demo
from fqcore.graph import graph_json as J
from fqcore.graph import layers as L

BATCH = 4


# -- models -----------------------------------------------------------------------------------
def build_model(seed=3):
    """conv (batch norm) -> depthwise conv (batch norm) -> pool -> dense -> loss."""
    g = G.Graph()
    g.seed = seed
    with g.as_default():
        x = G.placeholder("float32", [BATCH, 8, 8, 3], name="x")
        labels = G.placeholder("int32", [BATCH], name="labels")
        h = L.conv2d(x, 4, batch_norm=True, activation="relu6", scope="conv1")
        h = L.depthwise_conv2d(h, batch_norm=True, activation="relu", scope="dw1")
        h = L.global_avg_pool(h)
        logits = L.dense(h, 5, scope="fc")
        L.sparse_softmax_cross_entropy(labels, logits)
    return g


def init(g):
    with g.as_default():
        return G.global_variables_initializer(g)


def build_stage(stage):
    """The graphs the round trips cover: built, rewritten for training, trained (optimizer
    attached), and the demo model rewritten per channel with Adam."""
    if stage == "demo-adam":
        g, _, _, _, loss = demo.build_model(training=True, width=4)
        Q.experimental_create_training_graph(g, quant_delay=1, freeze_bn_delay=2,
                                             **demo.WEIGHT_OPTIONS["per-channel"])
        with g.as_default():
            G.AdamOptimizer(0.01).minimize(loss)
        init(g)
        return g
    g = build_model()
    if stage in ("rewritten", "trained"):
        Q.experimental_create_training_graph(g, quant_delay=2, freeze_bn_delay=3)
    if stage == "trained":
        with g.as_default():
            G.MomentumOptimizer(0.1, 0.9).minimize(g.get_tensor_by_name("loss/mean:0"))
    init(g)
    return g


def images_feed(g, step):
    rng = np.random.default_rng(100 + step)
    images = g.get_operation_by_name("x" if "x" in g._ops else "images").outputs[0]
    shape = (BATCH,) + tuple(images.shape[1:])
    return {images.name: (rng.integers(0, 17, shape) / 16).astype(np.float32),
            "labels:0": rng.integers(0, 5, BATCH).astype(np.int32)}


def run_steps(g, steps=3):
    """Initializes a Session of g and runs `steps` steps (the train op and update ops when the
    graph has them): the losses and the final variable values."""
    session = G.Session(g)
    session.run(g.get_operation_by_name("init"))
    fetches = ([g.get_tensor_by_name("loss/mean:0")] + g.get_collection("train_op")
               + g.get_collection("update_ops"))
    losses = [session.run(fetches, images_feed(g, step))[0] for step in range(steps)]
    return losses, session.variable_values()


def describe(g):
    """Everything the round trips must keep, in comparable form."""
    ops = [(op.name, op.type, [t.name for t in op.inputs], [c.name for c in op.control_inputs],
            [(t.shape, t.dtype) for t in op.outputs]) for op in g.get_operations()]
    collections = {}
    for key in g.get_all_collection_keys():
        collections[key] = [
            (type(i).__name__, i.op.name, i.read.name, i.initializer.name, i.trainable)
            if isinstance(i, G.Variable) else (type(i).__name__, getattr(i, "name", i))
            for i in g.get_collection(key)]
    return ops, collections, dict(g._names_in_use), g.seed


def assert_same_attrs(a, b):
    assert len(a.get_operations()) == len(b.get_operations())
    for x, y in zip(a.get_operations(), b.get_operations()):
        assert list(x.attrs) == list(y.attrs), x.name
        for key in x.attrs:
            assert_same_value(x.attrs[key], y.attrs[key], f"{x.name} {key}")


def assert_same_value(x, y, where):
    if isinstance(x, np.ndarray):
        assert isinstance(y, np.ndarray), where
        assert x.dtype == y.dtype and x.shape == y.shape, where
        same = x.tobytes() == y.tobytes()
        if not same and x.dtype.kind == "f":  # NaN payloads are not kept
            nan = np.isnan(x)
            same = np.array_equal(nan, np.isnan(y)) and x[~nan].tobytes() == y[~nan].tobytes()
        assert same, where
    elif isinstance(x, float) and math.isnan(x):
        assert isinstance(y, float) and math.isnan(y), where
    elif isinstance(x, list):
        assert isinstance(y, list) and len(x) == len(y), where
        for i, (u, v) in enumerate(zip(x, y)):
            assert_same_value(u, v, f"{where}[{i}]")
    else:
        assert type(x) is type(y) and x == y, where
        if isinstance(x, float):
            assert math.copysign(1, x) == math.copysign(1, y), where


# -- copy_graph -------------------------------------------------------------------------------
def test_copy_then_rewrite_leaves_the_original_untouched():
    g = build_model()
    init(g)
    before_json = G.graph_to_json(g)
    before = describe(g)
    copied = G.copy_graph(g)
    assert describe(copied) == before
    assert_same_attrs(g, copied)

    # Same loss on the same feed before the rewrite, from the same initial values.
    feed_values = images_feed(g, 0)
    loss_g = run_steps(g, 1)[0]
    loss_c = run_steps(copied, 1)[0]
    assert loss_g[0].tobytes() == loss_c[0].tobytes()

    Q.experimental_create_training_graph(copied, quant_delay=0, freeze_bn_delay=2)
    assert any(op.type == "FakeQuantWithMinMaxVars" for op in copied.get_operations())
    assert any(op.name.endswith("_Fold") for op in copied.get_operations())
    assert not any(op.type.startswith("FakeQuant") for op in g.get_operations())
    assert describe(g) == before
    assert G.graph_to_json(g) == before_json

    # Both still run; the original's loss is what it was.
    assert run_steps(g, 1)[0][0].tobytes() == loss_g[0].tobytes()
    with copied.as_default():
        G.global_variables_initializer(copied)  # "init_1": the rewrite added variables
    session = G.Session(copied)
    session.run(copied.get_operation_by_name("init_1"))
    loss = session.run(copied.get_tensor_by_name("loss/mean:0"), feed_values)
    assert np.isfinite(loss)


def test_copy_shares_nothing_with_the_original():
    g = build_model()
    copied = G.copy_graph(g)
    originals = set(map(id, g.get_operations()))
    for op in copied.get_operations():
        assert id(op) not in originals and op.graph is copied
        assert all(t.graph is copied for t in op.inputs)
        assert all(c.graph is copied for c in op.control_inputs)
        for key, value in op.attrs.items():
            original = g.get_operation_by_name(op.name).attrs[key]
            if isinstance(value, (list, np.ndarray)):
                assert value is not original
            if isinstance(value, np.ndarray):
                assert value.flags.writeable == original.flags.writeable
    # One Variable object per variable, in every collection that lists it, of the copy.
    trainable = {v.op.name: v for v in G.trainable_variables(copied)}
    for var in G.global_variables(copied):
        assert var.graph is copied and var.read.graph is copied and var.initializer.graph is copied
        if var.op.name in trainable:
            assert trainable[var.op.name] is var
    assert all(op.graph is copied for op in copied.get_collection(G.GraphKeys.UPDATE_OPS))
    # Changing the copy's attributes does not reach the original.
    conv = copied.get_operation_by_name("conv1/Conv2D")
    conv.attrs["strides"][1] = 2
    conv.attrs["padding"] = "VALID"
    assert g.get_operation_by_name("conv1/Conv2D").attrs["strides"] == [1, 1, 1, 1]
    assert g.get_operation_by_name("conv1/Conv2D").attrs["padding"] == "SAME"


def test_copy_continues_names_and_the_initializer_stream():
    g = build_model()
    copied = G.copy_graph(g)
    assert copied.initializer_rng().bit_generator.state == g.initializer_rng().bit_generator.state
    assert copied.initializer_rng() is not g.initializer_rng()

    def extend(graph):
        with graph.as_default():
            x = graph.get_tensor_by_name("x:0")
            y = L.conv2d(x, 2, scope="conv1")  # taken: becomes conv1_1
            z = G.add(y, y)
            G.build.identity(z, name="fc/weights")  # the variable's name: fc/weights_1
            graph.create_op("NoOp", [], name="conv1/Conv2D")
        return [op.name for op in graph.get_operations()[len(g_ops):]]

    g_ops = g.get_operations()
    names_copy = extend(copied)
    names_g = extend(g)
    assert names_copy == names_g
    assert "conv1_1/Conv2D" in names_g and "fc/weights_1" in names_g and \
        "conv1/Conv2D_1" in names_g
    # The new layer drew the same initial weights from each graph's own stream.
    w = "conv1_1/weights/Initializer/Const"
    assert (copied.get_operation_by_name(w).attrs["value"].tobytes()
            == g.get_operation_by_name(w).attrs["value"].tobytes())


def test_copy_of_a_trained_graph_trains_identically():
    g = build_stage("trained")
    copied = G.copy_graph(g)
    losses_c, values_c = run_steps(copied)
    losses_g, values_g = run_steps(g)
    assert [v.tobytes() for v in losses_c] == [v.tobytes() for v in losses_g]
    assert values_c.keys() == values_g.keys()
    for name in values_g:
        assert values_c[name].tobytes() == values_g[name].tobytes(), name


def test_copy_refuses_bad_input():
    with pytest.raises(TypeError, match="graph must be an fqcore.graph.Graph"):
        G.copy_graph("graph")
    g, other = build_model(), build_model()
    g.add_to_collection("foreign", other.get_tensor_by_name("x:0"))
    with pytest.raises(ValueError, match="collection 'foreign' item 0"):
        G.copy_graph(g)


# -- JSON round trips -------------------------------------------------------------------------
STAGES = ["built", "rewritten", "trained", "demo-adam"]


@pytest.mark.parametrize("stage", STAGES)
def test_json_round_trip_keeps_the_graph(stage):
    g = build_stage(stage)
    text = G.graph_to_json(g)
    doc = json.loads(text)
    assert doc["format"] == "fqcore-graph" and doc["version"] == 1
    assert [n["name"] for n in doc["node"]] == [op.name for op in g.get_operations()]
    loaded = G.graph_from_json(text)
    # Names, types, inputs, control inputs, output shapes (rebuilt by shape inference), dtypes,
    # collections, name counters, seed.
    assert describe(loaded) == describe(g)
    assert_same_attrs(g, loaded)
    assert loaded.initializer_rng().bit_generator.state == g.initializer_rng().bit_generator.state
    assert G.graph_to_json(loaded) == text
    # Same outputs: losses step by step and every variable afterwards, bit for bit.
    losses_l, values_l = run_steps(loaded)
    losses_g, values_g = run_steps(g)
    assert [v.tobytes() for v in losses_l] == [v.tobytes() for v in losses_g]
    assert values_l.keys() == values_g.keys()
    for name in values_g:
        assert values_l[name].tobytes() == values_g[name].tobytes(), name


def test_json_uses_graphdef_input_names():
    doc = json.loads(G.graph_to_json(build_stage("rewritten")))
    nodes = {n["name"]: n for n in doc["node"]}
    inputs = [i for n in doc["node"] for i in n.get("input", [])]
    assert not any(i.endswith(":0") for i in inputs)
    assert "conv1/BatchNorm/FusedBatchNormV3:1" in inputs  # the batch mean
    assert nodes["conv1/Conv2D"]["input"] == ["x", "conv1/weights/read"]
    assert all(i.startswith("^") for i in nodes["init"]["input"])
    for node in doc["node"]:  # control inputs last
        kinds = [i.startswith("^") for i in node.get("input", [])]
        assert kinds == sorted(kinds)
    variable = doc["collections"]["variables"][0]["variable"]
    assert variable == {"variable_name": "conv1/weights:0",
                        "initializer_name": "conv1/weights/Assign",
                        "snapshot_name": "conv1/weights/read:0", "trainable": True}
    assert {"operation": "conv1/BatchNorm/AssignMovingAvg"} in doc["collections"]["update_ops"]
    assert nodes["conv1/weights/Initializer/Const"]["attr"]["value"]["dtype"] == "float32"


def test_json_keeps_special_constants_exactly():
    f32 = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, np.finfo(np.float32).max,
                    np.finfo(np.float32).tiny, 0.1, -3.75], np.float32)
    values = {
        "f32": f32.reshape(2, 5),
        "f64": np.array([np.pi, 1e-310, -np.inf, 2.0 ** 1023, np.nan], np.float64),
        "f16": np.array([65504, 6e-8, -0.0, np.inf], np.float16),
        "i64": np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 2 ** 53 + 1, -1],
                        np.int64),
        "u64": np.array([np.iinfo(np.uint64).max, 0], np.uint64),
        "i8": np.array([[-128, 127]], np.int8),
        "b": np.array([True, False]),
        "scalar": np.float32(-0.0),
        "empty": np.zeros((0, 3), np.int32),
    }
    g = G.Graph()
    with g.as_default():
        consts = {k: G.constant(v, dtype=np.asarray(v).dtype, name=k) for k, v in values.items()}
        g.create_op("NoOp", [], {"nan": math.nan, "inf": math.inf, "ninf": -math.inf,
                                 "negzero": -0.0, "big": 2 ** 70, "float": 0.1 + 0.2,
                                 "nested": [[1, 2.5, None], ["s", True, []]]}, name="attrs")
    loaded = G.graph_from_json(G.graph_to_json(g))
    assert_same_attrs(g, loaded)
    session = G.Session(loaded)
    results = session.run({k: loaded.get_tensor_by_name(t.name) for k, t in consts.items()})
    for key, value in values.items():
        assert_same_value(np.asarray(value), np.asarray(results[key]), key)
    assert np.signbit(results["f32"][0, 3]) and np.signbit(results["scalar"])
    assert results["i64"][2] == 2 ** 53 + 1
    # The encoding is the documented one.
    doc = json.loads(G.graph_to_json(g))
    nodes = {n["name"]: n for n in doc["node"]}
    assert nodes["f32"]["attr"]["value"] == {
        "dtype": "float32", "shape": [2, 5],
        "data": ["nan", "inf", "-inf", -0.0, 0.0] + [float(v) for v in f32[5:]]}
    assert nodes["i64"]["attr"]["value"]["data"][1] == 2 ** 63 - 1
    assert nodes["attrs"]["attr"]["nan"] == {"float": "nan"}
    assert nodes["scalar"]["attr"]["value"] == {"dtype": "float32", "shape": [], "data": [-0.0]}


def test_loaded_arrays_are_read_only():
    g = G.graph_from_json(G.graph_to_json(build_model()))
    value = g.get_operation_by_name("conv1/weights/Initializer/Const").attrs["value"]
    with pytest.raises(ValueError):
        value[...] = 0


def handwritten():
    """A graph as a converter from an old TF GraphDef could write it: Add (not AddV2), inputs
    as "name", "name:0" and "^name", no names_in_use, a device field."""
    return {
        "format": "fqcore-graph", "version": 1,
        "node": [
            {"name": "x", "op": "Placeholder", "attr": {"dtype": "float32", "shape": [None, 3]}},
            {"name": "c", "op": "Const", "device": "",
             "attr": {"dtype": "float32",
                      "value": {"dtype": "float32", "shape": [3], "data": [1, 0.5, "-inf"]}}},
            {"name": "scope/y", "op": "Add", "input": ["x", "c:0"]},
            {"name": "out", "op": "Identity", "input": ["scope/y", "^c"]},
        ],
        "collections": {"outputs": [{"tensor": "out:0"}], "notes": [{"value": "from TF"}]},
    }


def test_handwritten_json_with_add_loads_and_runs():
    g = G.graph_from_json(json.dumps(handwritten()))
    assert g.get_operation_by_name("scope/y").type == "Add"
    out = g.get_collection("outputs")[0]
    assert out.shape == (None, 3) and out.dtype == np.float32
    assert g.get_operation_by_name("out").control_inputs == [g.get_operation_by_name("c")]
    assert g.get_collection("notes") == ["from TF"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = G.Session(g).run(out, {"x:0": x})
    np.testing.assert_array_equal(result, x + np.array([1, 0.5, -np.inf], np.float32))
    # Without names_in_use, the counters are rebuilt from the node names and their scopes.
    with g.as_default():
        assert G.identity(out, name="out").op.name == "out_1"
        with g.name_scope("scope"):
            assert G.identity(out, name="y").op.name == "scope_1/y"


def test_write_and_read_a_file(tmp_path):
    g = build_stage("rewritten")
    path = tmp_path / "model.json"
    assert G.write_graph_json(g, path) == str(path)
    assert path.read_text("utf-8") == G.graph_to_json(g)
    assert G.graph_to_json(G.read_graph_json(path)) == G.graph_to_json(g)
    assert os.listdir(tmp_path) == ["model.json"]


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "model.json"
    G.write_graph_json(build_model(), path)
    good = path.read_bytes()
    bigger = build_stage("rewritten")

    # Encoding fails midway, after part of the document went to the temporary file.
    calls, temporaries = [], []
    real = J._dumps

    def failing(value):
        calls.append(value)
        if len(calls) == 50:
            temporaries.extend(n for n in os.listdir(tmp_path) if n.endswith(".tmp"))
            raise RuntimeError("interrupted")
        return real(value)
    monkeypatch.setattr(J, "_dumps", failing)
    with pytest.raises(RuntimeError, match="interrupted"):
        G.write_graph_json(bigger, path)
    assert len(calls) == 50 and len(temporaries) == 1  # it failed while writing the file
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["model.json"]
    calls.clear()
    with pytest.raises(RuntimeError):
        G.write_graph_json(bigger, tmp_path / "new.json")
    assert os.listdir(tmp_path) == ["model.json"]
    monkeypatch.undo()

    # An attribute the format cannot hold: refused, naming the op and the attribute.
    bigger.get_operation_by_name("conv1/Conv2D").attrs["strides"] = (1, 1, 1, 1)
    with pytest.raises(TypeError, match=r"'conv1/Conv2D' attribute 'strides' is a tuple"):
        G.write_graph_json(bigger, path)
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["model.json"]
    assert G.graph_to_json(G.read_graph_json(path)) == good.decode("utf-8")


def test_write_and_read_refuse_bad_arguments(tmp_path):
    g = build_model()
    with pytest.raises(TypeError, match="graph must be an fqcore.graph.Graph"):
        G.write_graph_json("g", tmp_path / "a.json")
    with pytest.raises(TypeError, match="graph must be an fqcore.graph.Graph"):
        G.graph_to_json(None)
    with pytest.raises(IsADirectoryError, match="path"):
        G.write_graph_json(g, tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        G.write_graph_json(g, tmp_path / "missing" / "a.json")
    with pytest.raises(TypeError, match="path must be"):
        G.write_graph_json(g, 3)
    with pytest.raises(FileNotFoundError, match="no such file"):
        G.read_graph_json(tmp_path / "absent.json")
    with pytest.raises(TypeError, match="text must be a str"):
        G.graph_from_json(3)
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match=r"bad\.json: not UTF-8"):
        G.read_graph_json(bad)
    bad.write_text('{"format": "fqcore-graph", "version": 1, "node": [{"name": "x"}]}')
    with pytest.raises(ValueError, match=r"bad\.json: node 0 \('x'\) field 'op'"):
        G.read_graph_json(bad)


# -- validation -------------------------------------------------------------------------------
def _set(path, value):
    def mutate(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return mutate


_DELETE = object()
ARRAY = {"dtype": "float32", "shape": [3], "data": [1, 2, 3]}
CASES = [
    # (mutation of handwritten(), substrings of the error)
    (_set(["format"], "fqcore.graph"), ["field 'format'", "fqcore.graph"]),
    (_set(["version"], 2), ["field 'version'", "2"]),
    (_set(["version"], "1"), ["field 'version'"]),
    (_set(["version"], _DELETE), ["field 'version'"]),
    (_set(["node"], {}), ["field 'node'"]),
    (_set(["extra"], 1), ["top-level field 'extra'"]),
    (_set(["node", 2, "op"], "Frobnicate"), ["node 2 ('scope/y') field 'op'", "Frobnicate"]),
    (_set(["node", 2, "op"], _DELETE), ["node 2 ('scope/y') field 'op'"]),
    (_set(["node", 2, "input", 1], "d"), ["node 2 ('scope/y') field 'input'[1]", "'d'"]),
    (_set(["node", 3, "input", 1], "^d"), ["node 3 ('out') field 'input'[1]", "'d'"]),
    (_set(["node", 2, "input", 1], "c:1"), ["node 2 ('scope/y') field 'input'[1]",
                                            "1 output"]),
    (_set(["node", 2, "input", 1], "c:x"), ["node 2 ('scope/y') field 'input'[1]"]),
    (_set(["node", 2, "input", 1], 7), ["node 2 ('scope/y') field 'input'[1]"]),
    (_set(["node", 2, "input"], ["^c", "x"]), ["node 2 ('scope/y') field 'input'[1]",
                                              "after a control input"]),
    (_set(["node", 2, "input"], "x"), ["node 2 ('scope/y') field 'input'"]),
    (_set(["node", 1, "name"], "x"), ["node 1 ('x') field 'name'", "duplicate of node 0"]),
    (_set(["node", 1, "name"], "bad name"), ["node 1 ('bad name') field 'name'"]),
    (_set(["node", 1, "name"], _DELETE), ["node 1 field 'name'"]),
    (_set(["node", 1, "inputs"], []), ["node 1 ('c') field 'inputs'", "unknown field"]),
    (_set(["node", 1], "c"), ["node 1", "JSON object"]),
    (_set(["node", 1, "device"], 3), ["node 1 ('c') field 'device'"]),
    (_set(["node", 0, "attr", "dtype"], "float33"), ["node 0 ('x') field 'attr'['dtype']",
                                                    "float33"]),
    (_set(["node", 0, "attr", "dtype"], "DT_FLOAT"), ["node 0 ('x') field 'attr'['dtype']"]),
    (_set(["node", 0, "attr", "shape"], [-1, 3]), ["node 0 ('x') field 'attr'['shape']"]),
    (_set(["node", 0, "attr"], []), ["node 0 ('x') field 'attr'"]),
    (_set(["node", 1, "attr", "value", "dtype"], "complex64"),
     ["node 1 ('c') field 'attr'['value']['dtype']", "complex64"]),
    (_set(["node", 1, "attr", "value", "data"], [1, 2]),
     ["node 1 ('c') field 'attr'['value']['data']", "needs 3 elements"]),
    (_set(["node", 1, "attr", "value", "data"], [1, "x", 3]),
     ["node 1 ('c') field 'attr'['value']['data'][1]"]),
    (_set(["node", 1, "attr", "value", "data"], [1, 1e39, 3]),
     ["node 1 ('c') field 'attr'['value']['data'][1]", "out of range for float32"]),
    (_set(["node", 1, "attr", "value", "data"], [1, 10 ** 400, 3]),
     ["node 1 ('c') field 'attr'['value']['data'][1]", "out of range"]),
    (_set(["node", 1, "attr", "value", "shape"], [3, -1]),
     ["node 1 ('c') field 'attr'['value']['shape']"]),
    (_set(["node", 1, "attr", "value", "extra"], 1), ["node 1 ('c') field 'attr'['value']"]),
    (_set(["node", 1, "attr", "value"], 1.5), ["node 1 ('c') field 'attr'['value']",
                                               "needs an array"]),
    (_set(["node", 1, "attr", "value"], _DELETE), ["node 1 ('c') field 'attr'['value']"]),
    (_set(["node", 1, "attr", "dtype"], "int32"), ["node 1 ('c') field 'attr'['dtype']",
                                                  "differs"]),
    (_set(["node", 1, "attr", "value"], {"dtype": "int32", "shape": [2],
                                         "data": [2 ** 31, 0]}),
     ["node 1 ('c') field 'attr'['value']['data'][0]", "int32"]),
    (_set(["node", 1, "attr", "value"], {"dtype": "int64", "shape": [1], "data": [True]}),
     ["node 1 ('c') field 'attr'['value']['data'][0]"]),
    (_set(["node", 1, "attr", "value"], {"dtype": "bool", "shape": [1], "data": [1]}),
     ["node 1 ('c') field 'attr'['value']['data'][0]"]),
    (_set(["node", 2, "attr"], {"k": {"float": "NaN"}}), ["node 2 ('scope/y') field "
                                                         "'attr'['k']['float']"]),
    (_set(["node", 2, "attr"], {"k": {"tuple": [1]}}), ["node 2 ('scope/y') field 'attr'['k']"]),
    (_set(["node", 2, "attr"], {"k": [1, {"a": 2}]}), ["node 2 ('scope/y') field "
                                                      "'attr'['k'][1]"]),
    (_set(["node", 0, "attr", "shape"], [None, 4]),
     ["node 2 ('scope/y') fields 'input'/'attr'", "broadcast"]),
    (_set(["node", 2, "input"], ["x"]), ["node 2 ('scope/y') fields 'input'/'attr'"]),
    (_set(["node", 3, "input"], ["out"]), ["node 3 ('out') field 'input'", "cycle"]),
    (_set(["collections", "outputs", 0], {"tensor": "out:1"}),
     ["field 'collections'['outputs'][0]['tensor']", "out:1"]),
    (_set(["collections", "outputs", 0], {"operation": "nope"}),
     ["field 'collections'['outputs'][0]['operation']", "nope"]),
    (_set(["collections", "outputs", 0], {"thing": 1}),
     ["field 'collections'['outputs'][0]", "thing"]),
    (_set(["collections", "outputs"], {"tensor": "out:0"}), ["field 'collections'['outputs']"]),
    (_set(["collections", "outputs", 0], {"variable": {
        "variable_name": "c:0", "snapshot_name": "out:0", "initializer_name": None,
        "trainable": True}}),
     ["field 'collections'['outputs'][0]['variable'] field 'variable_name'", "Const"]),
    (_set(["names_in_use"], {"x": -1}), ["field 'names_in_use'"]),
    (_set(["seed"], "0"), ["field 'seed'"]),
    (_set(["init_rng"], {"bit_generator": "PCG64", "state": {"state": "x"}}),
     ["field 'init_rng'"]),
    (_set(["init_rng"], [1]), ["field 'init_rng'"]),
]


@pytest.mark.parametrize("mutate,expected", CASES, ids=[e[0] for _, e in CASES])
def test_validation_errors_name_the_node_and_field(mutate, expected):
    doc = handwritten()
    mutate(doc)
    with pytest.raises(ValueError) as info:
        G.graph_from_json(json.dumps(doc))
    for text in expected:
        assert text in str(info.value)


def variable_doc():
    """A variable, its initializer and a write, by hand."""
    value = {"dtype": "float32", "shape": [2], "data": [1, 2]}
    return {"format": "fqcore-graph", "version": 1, "node": [
        {"name": "v", "op": "VariableV2", "attr": {"shape": [2], "dtype": "float32"}},
        {"name": "v/Initializer/Const", "op": "Const", "attr": {"value": value,
                                                                "dtype": "float32"}},
        {"name": "v/Assign", "op": "Assign", "input": ["v", "v/Initializer/Const"]},
        {"name": "v/read", "op": "Identity", "input": ["v"]},
    ], "collections": {"variables": [{"variable": {
        "variable_name": "v:0", "snapshot_name": "v/read:0", "initializer_name": "v/Assign",
        "trainable": True}}]}}


def _conv_without_strides(doc):
    doc["node"].append({"name": "image", "op": "Placeholder",
                        "attr": {"dtype": "float32", "shape": [1, 4, 4, 1]}})
    doc["node"].append({"name": "conv", "op": "Conv2D", "input": ["image", "filter"],
                        "attr": {"padding": "SAME"}})
    doc["node"].append({"name": "filter", "op": "Reshape", "input": ["v/read", "shape"]})
    doc["node"].append({"name": "shape", "op": "Const", "attr": {"value": {
        "dtype": "int32", "shape": [4], "data": [1, 1, 1, 2]}}})


@pytest.mark.parametrize("mutate,expected", [
    (_set(["node", 2, "input", 0], "v/Initializer/Const"),
     ["node 2 ('v/Assign') field 'input'[0]", "VariableV2"]),
    (_set(["node", 0, "attr", "shape"], [2, None]), ["node 0 ('v') field 'attr'['shape']"]),
    (_set(["node", 0, "attr", "dtype"], _DELETE), ["node 0 ('v') field 'attr'['dtype']"]),
    (_set(["node", 3, "op"], "Cast"), ["node 3 ('v/read') field 'attr'['DstT']"]),
    (_conv_without_strides, ["node 5 ('conv') field 'attr'", "needs attribute 'strides'"]),
    (_set(["collections", "trainable_variables"], [{"variable": {
        "variable_name": "v:0", "snapshot_name": "v:0", "initializer_name": "v/Assign",
        "trainable": True}}]),
     ["field 'collections'['trainable_variables'][0]['variable']", "defined differently"]),
    (_set(["collections", "variables", 0, "variable", "trainable"], 1),
     ["field 'collections'['variables'][0]['variable'] field 'trainable'"]),
    (_set(["collections", "variables", 0, "variable", "snapshot_name"], _DELETE),
     ["field 'collections'['variables'][0]['variable'] field 'snapshot_name'", "missing"]),
])
def test_validation_of_variables(mutate, expected):
    doc = variable_doc()
    G.graph_from_json(json.dumps(doc))  # the unmutated document is fine
    mutate(doc)
    with pytest.raises(ValueError) as info:
        G.graph_from_json(json.dumps(doc))
    for text in expected:
        assert text in str(info.value)


def test_variable_document_runs():
    doc = variable_doc()
    doc["collections"]["trainable_variables"] = copy.deepcopy(doc["collections"]["variables"])
    g = G.graph_from_json(json.dumps(doc))
    var, = G.global_variables(g)
    assert G.trainable_variables(g)[0] is var
    session = G.Session(g)
    session.run(G.global_variables_initializer(g))
    np.testing.assert_array_equal(session.run(var), [1, 2])


@pytest.mark.parametrize("text,expected", [
    ("not json", "not valid JSON"),
    ('{"format": "fqcore-graph", "version": 1, "node": [], "x": NaN}', "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"format": "fqcore-graph", "version": 1, "node": [{"name": "a", "op": "NoOp", '
     '"attr": {"k": 1e400}}]}', "node 0 ('a') field 'attr'['k']"),
    ("[" * 100000 + "]" * 100000, "JSON"),
])
def test_malformed_documents(text, expected):
    with pytest.raises(ValueError) as info:
        G.graph_from_json(text)
    assert expected in str(info.value)


def test_damaged_documents_never_crash():
    """Random damage to a real graph's document: a Graph or a ValueError, nothing else."""
    base = json.loads(G.graph_to_json(build_stage("rewritten")))
    rng = np.random.default_rng(0)
    junk = [None, True, -1, 0, 2, 1.5, "", "x", "^x", "x:9", [], {}, [None], {"a": 1},
            {"dtype": "float32", "shape": [1], "data": ["?"]}]

    def containers(value, out):
        if isinstance(value, (dict, list)) and value:
            out.append(value)
            for child in (value.values() if isinstance(value, dict) else value):
                containers(child, out)
        return out

    outcomes = set()
    for _ in range(300):
        doc = copy.deepcopy(base)
        node = doc["node"][int(rng.integers(len(doc["node"])))]
        pool = containers(node, []) + [doc, doc["collections"]]
        target = pool[int(rng.integers(len(pool)))]
        key = (list(target)[int(rng.integers(len(target)))] if isinstance(target, dict)
               else int(rng.integers(len(target))))
        if rng.random() < 0.2 and isinstance(target, dict):
            del target[key]
        else:
            target[key] = copy.deepcopy(junk[int(rng.integers(len(junk)))])
        try:
            G.graph_from_json(json.dumps(doc))
            outcomes.add("ok")
        except ValueError:
            outcomes.add("ValueError")
    assert "ValueError" in outcomes


def test_graph_to_json_refuses_what_it_cannot_hold():
    g = G.Graph()
    with g.as_default():
        op = g.create_op("NoOp", [], {"k": np.float32(1)}, name="n")
    with pytest.raises(TypeError, match=r"operation 'n' attribute 'k' is a float32"):
        G.graph_to_json(g)
    op.attrs = {"k": np.array([1 + 2j])}
    with pytest.raises(TypeError, match=r"operation 'n' attribute 'k' is an array of dtype"):
        G.graph_to_json(g)
    op.attrs = {"dtype": "complex64"}
    with pytest.raises(TypeError, match=r"operation 'n' attribute 'dtype' is 'complex64'"):
        G.graph_to_json(g)
    op.attrs = {}
    g._init_rng = "stream"
    with pytest.raises(TypeError, match="initializer stream"):
        G.graph_to_json(g)
    g._init_rng = None
    g.add_to_collection(3, op)
    with pytest.raises(TypeError, match="collection key 3"):
        G.graph_to_json(g)
