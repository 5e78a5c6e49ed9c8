"""fqcore.graph.checkpoint: graph JSON and variables .npz round trips (bit for bit, training
continues identically), atomic writes under interruption, loading into an eval graph, validation."""
import json
import os

import numpy as np
import pytest

import fqcore.graph as G
import fqcore.quantize as Q
from fqcore.graph import checkpoint as C
from fqcore.graph import layers as L

BATCH = 4


# -- models -----------------------------------------------------------------------------------
def build_model(is_training=True):
    """conv (batch norm) -> depthwise conv (batch norm) -> pool -> dense -> loss."""
    g = G.Graph()
    g.seed = 7
    with g.as_default():
        x = G.placeholder("float32", [BATCH, 8, 8, 3], name="x")
        labels = G.placeholder("int32", [BATCH], name="labels")
        h = L.conv2d(x, 4, batch_norm=True, is_training=is_training, activation="relu6",
                     scope="conv1")
        h = L.depthwise_conv2d(h, batch_norm=True, is_training=is_training, activation="relu6",
                               scope="dw1")
        h = L.global_avg_pool(h)
        logits = L.dense(h, 5, scope="fc")
        L.sparse_softmax_cross_entropy(labels, logits)
    return g


def rewrite_for_training(g):
    Q.experimental_create_training_graph(input_graph=g, quant_delay=2, freeze_bn_delay=3)


def attach_optimizer(g):
    with g.as_default():
        G.MomentumOptimizer(0.1, 0.9).minimize(g.get_tensor_by_name("loss/mean:0"))
        G.global_variables_initializer()


def build_stage(stage):
    g = build_model()
    if stage in ("rewritten", "trained"):
        rewrite_for_training(g)
    if stage == "trained":
        attach_optimizer(g)
    return g


def batch(step):
    rng = np.random.default_rng(100 + step)
    return {"x:0": rng.standard_normal((BATCH, 8, 8, 3)).astype(np.float32),
            "labels:0": rng.integers(0, 5, BATCH).astype(np.int32)}


def train_step(g, session, step):
    fetches = ([g.get_tensor_by_name("loss/mean:0"), g.get_collection("train_op")[0]]
               + g.get_collection("update_ops"))
    return session.run(fetches, batch(step))[0]


def new_session(g):
    session = G.Session(g)
    session.run(g.get_operation_by_name("init"))
    return session


@pytest.fixture(scope="module")
def trained_checkpoint(tmp_path_factory):
    """A quantized training graph after 2 steps, its session, and its variables file."""
    g = build_stage("trained")
    session = new_session(g)
    for step in range(2):
        train_step(g, session, step)
    path = str(tmp_path_factory.mktemp("trained") / "vars.npz")
    C.save_variables(session, path)
    return g, session, path


# -- comparison -------------------------------------------------------------------------------
def value_signature(v):
    if isinstance(v, np.ndarray):
        return ("ndarray", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, np.generic):
        return ("scalar", v.dtype.str, v.tobytes())
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [value_signature(x) for x in v])
    if isinstance(v, dict):
        return ("dict", [(k, value_signature(x)) for k, x in v.items()])
    return (type(v).__name__, repr(v))  # repr tells -0.0 from 0.0


def item_signature(item):
    if isinstance(item, G.Variable):
        return ("Variable", item.op.name, item.read.name, item.initializer.name, item.trainable)
    if isinstance(item, G.Operation):
        return ("Operation", item.name)
    if isinstance(item, G.Tensor):
        return ("Tensor", item.name)
    return value_signature(item)


def graph_signature(g):
    ops = [(op._index, op.name, op.type, [t.name for t in op.inputs],
            [c.name for c in op.control_inputs],
            [(k, value_signature(v)) for k, v in op.attrs.items()],
            [(type(t.shape).__name__, t.shape, None if t.dtype is None else t.dtype.str)
             for t in op.outputs])
           for op in g.get_operations()]
    collections = [(key, [item_signature(i) for i in g.get_collection(key)])
                   for key in g.get_all_collection_keys()]
    return ops, collections


def assert_same_values(a, b):
    assert list(a) == list(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), name


def files_in(directory):
    return sorted(os.listdir(directory))


# -- graph round trips ------------------------------------------------------------------------
@pytest.mark.parametrize("stage", ["float", "rewritten", "trained"])
def test_graph_round_trip_is_identical(tmp_path, stage):
    g = build_stage(stage)
    path = tmp_path / "g.json"
    assert C.save_graph(g, path) == str(path)
    loaded = C.load_graph(path)
    assert graph_signature(loaded) == graph_signature(g)
    assert loaded._names_in_use == g._names_in_use
    assert loaded.seed == g.seed
    assert loaded._init_rng.bit_generator.state == g._init_rng.bit_generator.state
    # Variables are shared between collections, as in the original.
    for var in loaded.get_collection("trainable_variables"):
        assert any(var is v for v in loaded.get_collection("variables"))
        assert var.read is loaded.get_tensor_by_name(var.op.name + "/read:0")
    for op in loaded.get_operations():
        if op.type == "Const":
            assert not op.attrs["value"].flags.writeable
    C.save_graph(loaded, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()
    if stage == "rewritten":  # the rewrite reroutes inputs to ops created later
        index = {op: op._index for op in g.get_operations()}
        assert any(index[t.op] > index[op] for op in g.get_operations() for t in op.inputs)


def test_rewrite_and_optimizer_on_a_loaded_graph_match_the_original(tmp_path):
    g = build_model()
    C.save_graph(g, tmp_path / "float.json")
    loaded = C.load_graph(tmp_path / "float.json")
    for graph in (g, loaded):
        rewrite_for_training(graph)
        attach_optimizer(graph)
        with graph.as_default():
            L.dense(graph.get_tensor_by_name("pool:0"), 3, scope="fc")  # fc_1, same init draw
    assert graph_signature(loaded) == graph_signature(g)


def test_training_continues_bit_identically_after_restore(tmp_path):
    g = build_stage("trained")
    session = new_session(g)
    train_step(g, session, 0)  # fake_quantization_step = 1: before quant_delay and freeze
    graph_path, variables_path = C.save(session, tmp_path / "ck")
    assert (graph_path, variables_path) == (str(tmp_path / "ck.graph.json"),
                                            str(tmp_path / "ck.npz"))
    g2, s2 = C.restore(tmp_path / "ck")
    assert graph_signature(g2) == graph_signature(g)
    assert_same_values(s2.variable_values(), session.variable_values())
    losses, losses2 = [], []
    for step in range(1, 4):  # steps 2, 3, 4 cross quant_delay=2 and freeze_bn_delay=3
        losses.append(train_step(g, session, step))
        losses2.append(train_step(g2, s2, step))
    assert [v.tobytes() for v in losses] == [v.tobytes() for v in losses2]
    assert len({v.tobytes() for v in losses}) == 3
    assert_same_values(s2.variable_values(), session.variable_values())
    assert s2.variable_value("fake_quantization_step") == 4


# -- variables --------------------------------------------------------------------------------
def special_values_graph():
    g = G.Graph()
    with g.as_default():
        G.variable("f32", np.zeros(6, np.float32))
        G.variable("scope/i64", np.zeros(3, np.int64), trainable=False)
        G.variable("flag", np.zeros(2, bool), trainable=False)
        G.variable("f64", np.float64(0.0), dtype=np.float64)
        G.variable("a.npy", np.zeros((2, 0), np.float32))  # awkward key, empty value
        G.global_variables_initializer()
    return g


def special_values():
    f32 = np.array([-0.0, np.nan, -np.inf, 1e-45, 3.0, 0.0], np.float32)
    f32.view(np.uint32)[1] = 0x7FC0_1234  # a NaN payload
    f32.view(np.uint32)[5] = 0xFFC0_0001  # negative NaN with payload
    f64 = np.array(0.0, np.float64)
    f64.view(np.uint64)[...] = 0x7FF0_0000_0000_0001  # a signalling NaN
    return {"f32": f32, "scope/i64": np.array([np.iinfo(np.int64).min, -1, 2**62 + 1], np.int64),
            "flag": np.array([True, False]), "f64": f64, "a.npy": np.zeros((2, 0), np.float32)}


def test_variables_round_trip_bit_exactly(tmp_path):
    g = special_values_graph()
    session = new_session(g)
    for name, value in special_values().items():
        session._store[name] = value.copy()  # set_variable_value would do the same, bit for bit
    C.save_variables(session, tmp_path / "v.npz")
    fresh = G.Session(g)
    result = C.load_variables(fresh, tmp_path / "v.npz")
    assert result == C.LoadResult(list(special_values()), [], [])
    assert_same_values(fresh.variable_values(), special_values())


def test_trained_variables_round_trip_bit_exactly(trained_checkpoint):
    g, session, path = trained_checkpoint
    fresh = G.Session(g)
    C.load_variables(fresh, path)
    assert_same_values(fresh.variable_values(), session.variable_values())
    step = fresh.variable_value("fake_quantization_step")
    assert step.dtype == np.int64 and step == 2


def test_var_list_saves_and_loads_a_subset(tmp_path):
    g = special_values_graph()
    session = new_session(g)
    subset = [G.find_variable("f32", g), "flag", g.get_operation_by_name("f64")]
    C.save_variables(session, tmp_path / "v.npz", var_list=subset)
    fresh = G.Session(g)
    result = C.load_variables(fresh, tmp_path / "v.npz", var_list=["f32", "flag", "f64"])
    assert result.loaded == ["f32", "flag", "f64"]
    assert sorted(fresh.variable_values()) == ["f32", "f64", "flag"]
    with pytest.raises(ValueError, match=r"missing from the file: \['scope/i64', 'a.npy'\]"):
        C.load_variables(G.Session(g), tmp_path / "v.npz")
    result = C.load_variables(G.Session(g), tmp_path / "v.npz", strict=False)
    assert result.missing == ["scope/i64", "a.npy"] and result.unexpected == []


# -- const values and attributes --------------------------------------------------------------
def test_const_values_and_attribute_types_round_trip_exactly(tmp_path):
    values = dict(special_values())
    values.update({"u8": np.arange(5, dtype=np.uint8), "c64": np.array([1 - 2j], np.complex64),
                   "big_endian": np.array([1.5, -0.0], ">f4"), "scalar": np.float32(-0.0),
                   "fortran": np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))})
    g = G.Graph()
    with g.as_default():
        for name, value in values.items():
            G.constant(value, dtype=np.asarray(value).dtype, name=name.replace("/", "_"))
        attrs = {"none": None, "neg_zero": -0.0, "tiny": 5e-324, "big": 2**70, "text": "é\n\"",
                 "nested": [[1, 2.5], [], [True, None]], "tup": (1, (2, "a")),
                 "mapping": {"k": [np.int64(3)], "j": {"deep": 1.0}}, "np_scalar": np.float32(0.1),
                 "np_int": np.int64(-(2**63)), "dtype_obj": np.dtype("float16"),
                 "array": np.array([[np.nan]], np.float64)}
        g.create_op("NoOp", [], attrs, name="attrs_holder")
    C.save_graph(g, tmp_path / "g.json")
    loaded = C.load_graph(tmp_path / "g.json")
    assert graph_signature(loaded) == graph_signature(g)
    got = loaded.get_operation_by_name("attrs_holder").attrs
    assert type(got["np_scalar"]) is np.float32 and type(got["tup"]) is tuple
    assert type(got["big"]) is int and got["dtype_obj"] == np.dtype("float16")


def test_every_file_is_plain_json(tmp_path):
    g = build_stage("trained")
    C.save_graph(g, tmp_path / "g.json")
    doc = json.loads((tmp_path / "g.json").read_text())
    assert (doc["format"], doc["version"]) == ("fqcore.graph", 1)
    assert [op["name"] for op in doc["ops"]] == [op.name for op in g.get_operations()]
    step = next(v for v in doc["variables"] if v["op"] == "fake_quantization_step")
    assert step == {"op": "fake_quantization_step", "read": "fake_quantization_step/read:0",
                    "initializer": "fake_quantization_step/Assign", "trainable": False}


# -- atomic writes ----------------------------------------------------------------------------
class Interrupted(Exception):
    pass


def die_after_three_arrays(monkeypatch):
    """Makes the next variables write die mid-archive, after its third array."""
    original, calls = np.lib.format.write_array, []

    def write_some(*args, **kwargs):
        calls.append(1)
        if len(calls) > 3:
            raise Interrupted("midway")
        return original(*args, **kwargs)
    monkeypatch.setattr(np.lib.format, "write_array", write_some)


@pytest.mark.parametrize("where", ["fsync", "replace", "keyboard"])
def test_interrupted_graph_save_keeps_the_previous_file(tmp_path, monkeypatch, where):
    g = build_model()
    path = tmp_path / "g.json"
    C.save_graph(g, path)
    before, listing = path.read_bytes(), files_in(tmp_path)
    with g.as_default():
        G.no_op(name="changed")

    def fail(*args, **kwargs):
        raise KeyboardInterrupt if where == "keyboard" else Interrupted(where)
    monkeypatch.setattr(os, "fsync" if where == "fsync" else "replace", fail)
    with pytest.raises(KeyboardInterrupt if where == "keyboard" else Interrupted):
        C.save_graph(g, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert files_in(tmp_path) == listing


def test_interrupted_variables_save_keeps_the_previous_file(tmp_path, monkeypatch,
                                                          trained_checkpoint):
    g, session, _ = trained_checkpoint
    path = tmp_path / "v.npz"
    C.save_variables(session, path)
    before, listing = path.read_bytes(), files_in(tmp_path)
    other = G.Session(g)
    other._store = {k: v + 1 if v.dtype.kind == "f" else v
                    for k, v in session.variable_values().items()}
    die_after_three_arrays(monkeypatch)
    with pytest.raises(Interrupted):
        C.save_variables(other, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert files_in(tmp_path) == listing


def _checkpoint_then_change(tmp_path):
    """A saved checkpoint, and its graph and session changed afterwards (a new op, new values)."""
    g = build_stage("trained")
    session = new_session(g)
    C.save(session, tmp_path / "ck")
    old_values = session.variable_values()
    with g.as_default():
        G.no_op(name="changed")
    session._store = {k: v + 1 if v.dtype.kind == "f" else v for k, v in old_values.items()}
    return session, old_values


def _restored(tmp_path):
    graph, session = C.restore(tmp_path / "ck")
    names = {op.name for op in graph.get_operations()}
    return "changed" in names, session.variable_values()


def _same(values, expected):
    return values.keys() == expected.keys() and all(
        np.array_equal(values[k], expected[k], equal_nan=True) for k in values)


def test_save_interrupted_before_its_commit_point_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    """The variables file is the commit point: a save that dies writing it leaves the old pair."""
    session, old_values = _checkpoint_then_change(tmp_path)
    die_after_three_arrays(monkeypatch)
    with pytest.raises(Interrupted):
        C.save(session, tmp_path / "ck")
    monkeypatch.undo()
    changed, values = _restored(tmp_path)
    assert not changed and _same(values, old_values)


def test_save_interrupted_after_its_commit_point_gives_the_new_checkpoint(tmp_path, monkeypatch):
    """Variables in place, graph file still the old one (or absent): restore takes the copy of the
    graph inside the variables file, so the checkpoint is the new one, whole."""
    session, _ = _checkpoint_then_change(tmp_path)
    original = C.write_atomically

    def fail_on_graph(path, write):
        if str(path).endswith(C.GRAPH_SUFFIX):
            raise Interrupted("between the two files")
        return original(path, write)
    monkeypatch.setattr(C, "write_atomically", fail_on_graph)
    with pytest.raises(Interrupted):
        C.save(session, tmp_path / "ck")
    changed, values = _restored(tmp_path)
    assert changed and _same(values, session.variable_values())
    os.unlink(tmp_path / ("ck" + C.GRAPH_SUFFIX))  # a first save, cut off the same way
    changed, values = _restored(tmp_path)
    assert changed and _same(values, session.variable_values())


def test_restore_refuses_a_pair_it_cannot_reconcile(tmp_path, monkeypatch):
    """A variables file that records another graph and holds no copy of it (written before
    checkpoints carried one): the pair is refused, not mixed."""
    session, _ = _checkpoint_then_change(tmp_path)
    C.save(session, tmp_path / "ck")
    path = tmp_path / "ck.npz"
    with np.load(path) as npz:
        entries = {name: npz[name] for name in npz.files if name != C._GRAPH_KEY}
    with open(path, "wb") as f:  # the same archive without the copy
        np.savez(f, **entries)
    C.save_graph(build_stage("trained"), tmp_path / ("ck" + C.GRAPH_SUFFIX))
    with pytest.raises(ValueError, match="different graph than the one beside it, and holds no copy"):
        C.restore(tmp_path / "ck")


def test_new_files_get_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    os.umask(umask)
    C.save_graph(build_model(), tmp_path / "g.json")
    assert os.stat(tmp_path / "g.json").st_mode & 0o777 == 0o666 & ~umask


def test_save_and_restore_in_a_directory(tmp_path):
    g = build_stage("trained")
    session = new_session(g)
    target = str(tmp_path / "run1") + os.sep
    paths = C.save(session, target)
    assert paths == (target + "checkpoint.graph.json", target + "checkpoint.npz")
    g2, s2 = C.restore(tmp_path / "run1")
    assert_same_values(s2.variable_values(), session.variable_values())


# -- eval graph -------------------------------------------------------------------------------
TRAINING_ONLY = ["conv1/weights/Momentum", "conv1/BatchNorm/gamma/Momentum",
                 "conv1/act_quant/conv1/act_quant/min/biased",
                 "conv1/act_quant/conv1/act_quant/max/local_step", "fake_quantization_step",
                 "fc/biases/Momentum", "fc/act_quant/fc/act_quant/max/biased"]


def test_eval_graph_loads_trained_variables_by_name(trained_checkpoint):
    g, session, path = trained_checkpoint
    eval_graph = build_model(is_training=False)
    Q.experimental_create_eval_graph(input_graph=eval_graph)
    eval_session = G.Session(eval_graph)
    with pytest.raises(ValueError) as error:
        C.load_variables(eval_session, path)
    message = str(error.value)
    assert path in message and "strict=False" in message
    for name in TRAINING_ONLY:
        assert repr(name) in message
    assert eval_session.variable_values() == {}  # nothing set by a failed load

    result = C.load_variables(eval_session, path, strict=False)
    eval_names = {op.name for op in eval_graph.get_operations() if op.type == "VariableV2"}
    assert result.missing == [] and sorted(result.loaded) == sorted(eval_names)
    assert set(TRAINING_ONLY) <= set(result.unexpected)
    assert set(result.unexpected) == set(session.variable_values()) - eval_names
    trained = session.variable_values()
    assert_same_values(eval_session.variable_values(),
                       {name: trained[name] for name in result.loaded})
    logits = eval_session.run("fc/BiasAdd:0", {"x:0": batch(0)["x:0"]})
    assert logits.shape == (BATCH, 5) and np.all(np.isfinite(logits))


# -- validation -------------------------------------------------------------------------------
def test_path_arguments_are_checked(tmp_path):
    g = build_model()
    with pytest.raises(TypeError, match="path must be a str or os.PathLike path, got int 3"):
        C.save_graph(g, 3)
    with pytest.raises(ValueError, match="path must be a non-empty path"):
        C.save_graph(g, "")
    with pytest.raises(TypeError, match="graph must be an fqcore.graph.Graph, got str"):
        C.save_graph("g", tmp_path / "g.json")
    with pytest.raises(TypeError, match="session must be an fqcore.graph.Session"):
        C.save_variables(g, tmp_path / "v.npz")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        C.save_graph(g, tmp_path)
    with pytest.raises(FileNotFoundError, match="directory does not exist") as error:
        C.save_graph(g, tmp_path / "nowhere" / "g.json")
    assert error.value.filename == str(tmp_path / "nowhere")
    with pytest.raises(TypeError, match="directory_or_prefix must be a str"):
        C.restore(None)


def test_missing_files_raise_file_not_found_with_the_path(tmp_path):
    missing = str(tmp_path / "absent.json")
    with pytest.raises(FileNotFoundError, match="absent.json") as error:
        C.load_graph(missing)
    assert error.value.filename == missing
    with pytest.raises(FileNotFoundError, match="absent.npz"):
        C.load_variables(G.Session(build_model()), tmp_path / "absent.npz")
    with pytest.raises(FileNotFoundError, match=r"ck\.npz"):
        C.restore(tmp_path / "ck")


def _saved_doc(tmp_path):
    C.save_graph(build_model(), tmp_path / "g.json")
    return json.loads((tmp_path / "g.json").read_text())


def _write(tmp_path, doc):
    path = tmp_path / "bad.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _bad_op_type(doc):
    doc["ops"][5]["type"] = "NoSuchOp"


def _dangling_input(doc):
    doc["ops"][5]["inputs"] = ["ghost:0"]


def _short_const(doc):
    const = next(op for op in doc["ops"] if op["type"] == "Const")
    const["attrs"]["value"]["ndarray"]["data"] = "AAAA"


def _unknown_tag(doc):
    doc["ops"][0]["attrs"]["dtype"] = {"pickle": "..."}


def _missing_field(doc):
    del doc["ops"][3]["outputs"]


@pytest.mark.parametrize("corrupt, message", [
    (_bad_op_type, r"op 5 \('conv1/weights/read'\): unknown op type 'NoSuchOp'"),
    (_dangling_input, r"operation 'conv1/weights/read': no operation named 'ghost'"),
    (_short_const, r"attribute 'value': array data has 3 bytes"),
    (_unknown_tag, r"op 0 \('x'\) attribute 'dtype': unrecognised value"),
    (_missing_field, r"op 3 \('conv1/weights'\) has no 'outputs' field"),
])
def test_corrupt_graph_files_name_the_file_and_the_problem(tmp_path, corrupt, message):
    doc = _saved_doc(tmp_path)
    corrupt(doc)
    path = _write(tmp_path, doc)
    with pytest.raises(ValueError, match=message) as error:
        C.load_graph(path)
    assert str(error.value).startswith(str(path))


def test_foreign_truncated_and_future_files_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"bad.json: not a valid JSON graph file"):
        C.load_graph(_write(tmp_path, '{"format": "fqcore.graph", "ops": ['))
    with pytest.raises(ValueError, match=r"not an fqcore graph file .*found None"):
        C.load_graph(_write(tmp_path, {"nodes": []}))
    with pytest.raises(ValueError, match=r"not an fqcore graph file .*found 'list'"):
        C.load_graph(_write(tmp_path, [1, 2]))
    doc = _saved_doc(tmp_path)
    doc["version"] = 2
    with pytest.raises(ValueError, match=r"format version 2 is newer than this fqcore reads"):
        C.load_graph(_write(tmp_path, doc))
    doc["version"] = "1"
    with pytest.raises(ValueError, match=r"invalid format version '1'"):
        C.load_graph(_write(tmp_path, doc))
    with pytest.raises(ValueError, match="not a valid JSON graph file"):
        C.load_graph(_write(tmp_path, '{"format": NaN}'))
    deep = "[" * 100000 + "]" * 100000
    with pytest.raises(ValueError, match="not a valid JSON graph file"):
        C.load_graph(_write(tmp_path, deep))


def test_every_damaged_byte_of_a_variables_file_is_a_clear_error_or_harmless(tmp_path,
                                                                           trained_checkpoint):
    """Any single byte flipped, in the zip headers, the metadata or the arrays: either the file
    still loads (the byte was inside an array's data) or a ValueError names the file; never a
    zipfile, EOF, encryption or other error."""
    g, session, _ = trained_checkpoint
    path = tmp_path / "v.npz"
    C.save_variables(session, path)
    good = path.read_bytes()
    damaged = tmp_path / "damaged.npz"
    for offset in list(range(0, 160)) + list(range(len(good) - 400, len(good))):
        data = bytearray(good)
        data[offset] ^= 0x5A
        damaged.write_bytes(bytes(data))
        try:
            C.load_variables(G.Session(g), damaged)
        except ValueError as error:
            assert str(damaged) in str(error)


def test_unsavable_attributes_are_refused_before_touching_the_file(tmp_path):
    path = tmp_path / "g.json"
    for value, error, message in [
            (float("nan"), ValueError, r"operation 'odd' attribute 'rate' is nan: non-finite"),
            ([1, float("inf")], ValueError, r"attribute 'rate'\[1\] is inf"),
            (object(), TypeError, r"operation 'odd' attribute 'rate' has type object"),
            ({1: 2}, TypeError, r"attribute 'rate' is a dict with a non-string key 1"),
            (np.array([None]), TypeError, r"attribute 'rate' is an array of dtype object")]:
        g = G.Graph()
        with g.as_default():
            g.create_op("NoOp", [], {"rate": value}, name="odd")
        with pytest.raises(error, match=message):
            C.save_graph(g, path)
        assert not path.exists() and files_in(tmp_path) == []


def test_variable_loading_errors_name_the_variable(tmp_path, trained_checkpoint):
    g = special_values_graph()
    session = new_session(g)
    C.save_variables(session, tmp_path / "v.npz")
    other = G.Graph()
    with other.as_default():
        G.variable("f32", np.zeros(5, np.float32))
        G.variable("scope/i64", np.zeros(3, np.int32))
        G.variable("flag", np.zeros(2, bool))
    with pytest.raises(ValueError, match=r"'f32': file float32\[6\], graph float32\[5\]; "
                                         r"'scope/i64': file int64\[3\], graph int32\[3\]"):
        C.load_variables(G.Session(other), tmp_path / "v.npz", strict=False)
    with pytest.raises(ValueError, match=r"in the file but not among the graph's variables: "
                                         r"\['f64', 'a.npy'\]"):
        C.load_variables(G.Session(other), tmp_path / "v.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"junk.npz: not a valid .npz variables file"):
        C.load_variables(session, tmp_path / "junk.npz")
    np.save(tmp_path / "single.npy", np.zeros(3))
    with pytest.raises(ValueError, match=r"single.npy: not an .npz archive"):
        C.load_variables(session, tmp_path / "single.npy")
    with pytest.raises(TypeError, match="var_list must be a list of variables, got a single str"):
        C.load_variables(session, tmp_path / "v.npz", var_list="f32")
    with pytest.raises(ValueError, match="var_list names 'nope', which is not an operation"):
        C.save_variables(session, tmp_path / "w.npz", var_list=["nope"])
    with pytest.raises(ValueError, match="var_list item 'f32/read' is a Identity, not a var"):
        C.save_variables(session, tmp_path / "w.npz", var_list=["f32/read"])
    with pytest.raises(ValueError, match=r"not initialized in the session: \['f32', "):
        C.save_variables(G.Session(g), tmp_path / "w.npz")
    assert not (tmp_path / "w.npz").exists()


def test_plain_npz_files_load_by_key(tmp_path):
    g = special_values_graph()
    values = special_values()
    np.savez(tmp_path / "plain.npz", **values)
    fresh = G.Session(g)
    C.load_variables(fresh, tmp_path / "plain.npz")
    assert_same_values(fresh.variable_values(), values)
