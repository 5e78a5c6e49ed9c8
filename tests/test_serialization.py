"""Quantizer serialization: Keras-2 dicts, tf_keras 2.21 dicts, the registry, JSON text, and files of config plus state."""
import json
import re
import os
import stat
import threading

import numpy as np
import pytest

import fqcore
from fqcore import serialization
from helpers import assert_same_bits

F32 = np.float32
TFMOT_MODULE = "tensorflow_model_optimization.python.core.quantization.keras.quantizers"

QUANTIZERS = [
    fqcore.LastValueQuantizer(8, True, False, False), fqcore.LastValueQuantizer(2, False, True, True),
    fqcore.MovingAverageQuantizer(8, False, True, False),
    fqcore.MovingAverageQuantizer(16, True, False, True, ema_decay=0.75),
    fqcore.AllValuesQuantizer(4, True, True, False), fqcore.FixedQuantizer(8, -6.0, 6.0, True),
    fqcore.FixedQuantizer(3, -1, 2, False), fqcore.NoQuantizer(),
]


@pytest.mark.parametrize("q", QUANTIZERS, ids=repr)
def test_dict_and_json_round_trips(q):
    d = fqcore.serialize(q)
    assert d == {"class_name": type(q).__name__, "config": q.get_config()}
    assert fqcore.deserialize(d) == q
    text = fqcore.to_json(q)
    assert json.loads(text) == d
    again = fqcore.from_json(text)
    assert again == q and fqcore.to_json(again) == text
    assert fqcore.from_json(text.encode()) == q


def test_serialize_matches_tfmot_keras2_shape():
    """The exact dict tfmot's legacy serialize_keras_object gives (tests/data/quantizers_interop.json has tfmot's own)."""
    assert fqcore.serialize(fqcore.LastValueQuantizer(8, False, True, False)) == {
        "class_name": "LastValueQuantizer",
        "config": {"num_bits": 8, "per_axis": False, "symmetric": True, "narrow_range": False}}
    assert fqcore.serialize(fqcore.NoQuantizer()) == {"class_name": "NoQuantizer", "config": {}}


def test_deserialize_tf_keras_shape():
    d = {"module": TFMOT_MODULE, "class_name": "MovingAverageQuantizer",
         "config": {"num_bits": 4, "per_axis": False, "symmetric": True, "narrow_range": True},
         "registered_name": "MovingAverageQuantizer"}
    assert fqcore.deserialize(d) == fqcore.MovingAverageQuantizer(4, False, True, True)
    assert fqcore.deserialize(dict(d, module=None, registered_name=None)) == fqcore.MovingAverageQuantizer(4, False, True, True)


def test_unknown_class_lists_known_names():
    with pytest.raises(ValueError) as info:
        fqcore.deserialize({"class_name": "MyQuantizer", "config": {}})
    message = str(info.value)
    assert "'MyQuantizer'" in message
    for name in ("AllValuesQuantizer", "FixedQuantizer", "LastValueQuantizer", "MovingAverageQuantizer", "NoQuantizer"):
        assert name in message


def test_bad_dicts():
    with pytest.raises(TypeError, match="dict with 'class_name' and 'config'"):
        fqcore.deserialize("LastValueQuantizer")
    with pytest.raises(ValueError, match="no 'config' key"):
        fqcore.deserialize({"class_name": "NoQuantizer"})
    with pytest.raises(ValueError, match="unknown key 'shared_object_id'"):
        fqcore.deserialize({"class_name": "NoQuantizer", "config": {}, "shared_object_id": 3})
    with pytest.raises(TypeError, match="class_name must be a str"):
        fqcore.deserialize({"class_name": 3, "config": {}})
    with pytest.raises(TypeError, match="unknown key 'bits'"):
        fqcore.deserialize({"class_name": "LastValueQuantizer",
                            "config": {"bits": 8, "per_axis": False, "symmetric": False, "narrow_range": False}})
    with pytest.raises(ValueError, match="num_bits must be between 2 and 16, inclusive, got 1"):
        fqcore.from_json('{"class_name": "LastValueQuantizer", "config": {"num_bits": 1, "per_axis": false, '
                         '"symmetric": false, "narrow_range": false}}')
    with pytest.raises(TypeError, match="per_axis must be a bool, got 0"):
        fqcore.from_json('{"class_name": "LastValueQuantizer", "config": {"num_bits": 8, "per_axis": 0, '
                         '"symmetric": false, "narrow_range": false}}')
    with pytest.raises(TypeError, match="serialize takes a Quantizer"):
        fqcore.serialize({"class_name": "NoQuantizer"})
    with pytest.raises(TypeError, match="JSON text"):
        fqcore.from_json({"class_name": "NoQuantizer", "config": {}})
    for key, value in (("module", 5), ("registered_name", ["x"])):
        with pytest.raises(TypeError, match=re.escape(f"{key} must be a str or None, got {value!r}")):
            fqcore.deserialize({"class_name": "NoQuantizer", "config": {}, key: value})
    with pytest.raises(TypeError, match="allow_nan cannot be passed"):
        fqcore.to_json(fqcore.NoQuantizer(), allow_nan=True)


@pytest.fixture
def clean_registry():
    saved = dict(serialization._REGISTRY)
    yield
    serialization._REGISTRY.clear()
    serialization._REGISTRY.update(saved)


def test_register_user_quantizer(clean_registry):
    @fqcore.register_quantizer
    class ClipQuantizer(fqcore.Quantizer):
        def __init__(self, limit):
            self.limit = float(limit)

        def build(self, tensor_shape, name, layer):
            return {}

        def __call__(self, inputs, training, weights, **kwargs):
            return np.clip(inputs, -self.limit, self.limit)

        def get_config(self):
            return {"limit": self.limit}

    q = ClipQuantizer(2.5)
    assert fqcore.serialize(q) == {"class_name": "ClipQuantizer", "config": {"limit": 2.5}}
    assert fqcore.from_json(fqcore.to_json(q)) == q
    assert "ClipQuantizer" in serialization.registered_quantizers()
    with pytest.raises(TypeError, match="unknown key 'limits'"):
        fqcore.deserialize({"class_name": "ClipQuantizer", "config": {"limits": 1}})

    @fqcore.register_quantizer(name="MyPackage>Clip2")
    class Clip2(ClipQuantizer):
        pass

    # tf_keras writes registered_name "package>Class" for Keras-registered classes; it wins over class_name.
    d = {"module": "mypackage", "class_name": "Clip2", "config": {"limit": 1.0}, "registered_name": "MyPackage>Clip2"}
    assert type(fqcore.deserialize(d)) is Clip2
    assert fqcore.serialize(Clip2(1.0)) == {"class_name": "MyPackage>Clip2", "config": {"limit": 1.0}}


def test_register_errors(clean_registry):
    with pytest.raises(TypeError, match="Quantizer subclass"):
        fqcore.register_quantizer(dict)

    class LastValueQuantizer(fqcore.LastValueQuantizer):
        pass

    with pytest.raises(ValueError, match="already registered"):
        fqcore.register_quantizer(LastValueQuantizer)
    fqcore.register_quantizer(fqcore.LastValueQuantizer)  # the same class again: fine
    fqcore.register_quantizer(LastValueQuantizer, override=True)
    assert type(fqcore.deserialize(fqcore.serialize(LastValueQuantizer(8, False, False, False)))) is LastValueQuantizer

    class Unregistered(fqcore.NoQuantizer):
        pass

    with pytest.raises(ValueError, match="not registered"):
        fqcore.serialize(Unregistered())
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        fqcore.register_quantizer(name="")


# --- Files: config and state together


def trained(q, shape=(4, 3)):
    """A quantizer with state after a few training calls, NaN-free but with -0.0 somewhere when possible."""
    w = q.build(shape, "q", None)
    rng = np.random.default_rng(5)
    for _ in range(3):
        q(rng.standard_normal(shape).astype(F32), True, w)
    return w


@pytest.mark.parametrize("suffix", [".npz", ".json"])
@pytest.mark.parametrize("q", QUANTIZERS, ids=repr)
def test_state_round_trips_exactly(q, suffix, tmp_path):
    weights = trained(q)
    if weights:
        # Bits that a decimal round trip could lose: -0.0, a denormal, a NaN with a payload, inf.
        special = np.array([-0.0, 1e-45, np.inf], F32)
        weights["min_var"].reshape(-1)[: min(3, weights["min_var"].size)] = special[: weights["min_var"].size]
        weights["max_var"].reshape(-1)[:1] = np.array([0x7FC01234], np.uint32).view(F32)
    path = tmp_path / f"q{suffix}"
    fqcore.save_quantizer(path, q, weights)
    loaded, state = fqcore.load_quantizer(path)
    assert loaded == q and type(loaded) is type(q)
    assert sorted(state) == sorted(weights)
    for key, value in weights.items():
        assert state[key].dtype == F32 and state[key].shape == value.shape
        assert state[key].tobytes() == value.tobytes(), key  # NaN payload included
    # The loaded state drives the quantizer exactly as the saved one.
    x = np.linspace(-3, 3, 12, dtype=F32).reshape(4, 3)
    assert_same_bits(loaded(x, False, state) if state or not weights else loaded(x, False, {}), q(x, False, weights))


def test_file_formats(tmp_path):
    q = fqcore.LastValueQuantizer(8, True, False, False)
    w = trained(q)
    fqcore.save_quantizer(tmp_path / "a.json", q, w)
    header = json.loads((tmp_path / "a.json").read_text())
    assert header["format"] == "fqcore-quantizer" and header["version"] == 1
    assert header["quantizer"] == fqcore.serialize(q)
    assert header["weights"]["min_var"]["shape"] == [3]
    fqcore.save_quantizer(tmp_path / "b.state", q, w, format="npz")
    with np.load(tmp_path / "b.state", allow_pickle=False) as npz:
        assert sorted(npz.files) == ["header", "weight/max_var", "weight/min_var"]
    assert fqcore.load_quantizer(tmp_path / "b.state")[0] == q
    fqcore.save_quantizer(str(tmp_path / "c.json"), fqcore.NoQuantizer())
    assert fqcore.load_quantizer(str(tmp_path / "c.json")) == (fqcore.NoQuantizer(), {})
    with pytest.raises(ValueError, match="cannot tell the file format"):
        fqcore.save_quantizer(tmp_path / "d.bin", q, w)
    with pytest.raises(ValueError, match="format must be 'npz' or 'json'"):
        fqcore.save_quantizer(tmp_path / "d.bin", q, w, format="pickle")
    with pytest.raises(TypeError, match=r"weights\['min_var'\] must be a float32 numpy array, got dtype float64"):
        fqcore.save_quantizer(tmp_path / "e.npz", q, {"min_var": np.zeros(3)})
    (tmp_path / "f.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not an fqcore quantizer file"):
        fqcore.load_quantizer(tmp_path / "f.json")
    (tmp_path / "g.json").write_text(json.dumps(dict(header, version=99)))
    with pytest.raises(ValueError, match="format version 99"):
        fqcore.load_quantizer(tmp_path / "g.json")


def test_malformed_json_files(tmp_path):
    """Every malformed piece of a .json file is named; no value is read from a bad one."""
    q = fqcore.LastValueQuantizer(8, True, False, False)
    fqcore.save_quantizer(tmp_path / "a.json", q, trained(q))
    header = json.loads((tmp_path / "a.json").read_text())
    good = header["weights"]["min_var"]
    cases = [
        (dict(header, version=True), "format version True"),
        (dict(header, version=1.0), "format version 1.0"),
        ({k: v for k, v in header.items() if k != "quantizer"}, "no 'quantizer' entry"),
        (dict(header, weights=[1, 2]), "'weights' must be an object"),
        (dict(header, weights={"min_var": 5}), "must hold a 'shape' list and a 'bits' list"),
        (dict(header, weights={"min_var": {"bits": good["bits"]}}), "must hold a 'shape' list"),
        (dict(header, weights={"min_var": dict(good, shape="3")}), "must hold a 'shape' list"),
        (dict(header, weights={"min_var": dict(good, shape=[-3])}), "expected non-negative ints"),
        (dict(header, weights={"min_var": dict(good, bits=[1.5, 0, 0])}), "bits that are not ints"),
        (dict(header, weights={"min_var": dict(good, bits=[2**40, 0, 0])}), "bits that are not ints"),
        (dict(header, weights={"min_var": dict(good, bits=[-1, 0, 0])}), "bits that are not ints"),
        (dict(header, weights={"min_var": dict(good, bits=[0, 0])}), "has 2 values for shape"),
    ]
    for k, (bad, message) in enumerate(cases):
        path = tmp_path / f"bad{k}.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=message):
            fqcore.load_quantizer(path)


def test_save_is_atomic(tmp_path, monkeypatch):
    """A failed write leaves the old file whole and no temporary file behind; a good one replaces it."""
    q = fqcore.MovingAverageQuantizer(8, False, False, False)
    w = trained(q)
    path = tmp_path / "q.npz"
    fqcore.save_quantizer(path, q, w)
    before = path.read_bytes()

    def failing_savez(f, **arrays):
        f.write(b"PK partial")
        raise OSError("disk full")

    monkeypatch.setattr(serialization.np, "savez", failing_savez)
    with pytest.raises(OSError, match="disk full"):
        fqcore.save_quantizer(path, fqcore.LastValueQuantizer(4, False, False, False), w)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["q.npz"]
    w["min_var"][...] = -1.5
    fqcore.save_quantizer(path, q, w)
    assert fqcore.load_quantizer(path)[1]["min_var"] == F32(-1.5)
    assert sorted(os.listdir(tmp_path)) == ["q.npz"]


def test_save_uses_fsync_and_replace(tmp_path, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(serialization.os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(serialization.os, "replace", lambda a, b: (calls.append(("replace", os.path.dirname(a) == os.path.dirname(b))), real_replace(a, b))[1])
    fqcore.save_quantizer(tmp_path / "q.json", fqcore.NoQuantizer())
    assert calls[0] == "fsync" and calls[1] == ("replace", True)  # file synced before the rename, same directory


def test_saved_file_permissions_follow_umask(tmp_path):
    old = os.umask(0o022)
    try:
        fqcore.save_quantizer(tmp_path / "q.npz", fqcore.NoQuantizer())
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "q.npz").st_mode) == 0o644


def test_concurrent_saves_leave_a_whole_file(tmp_path):
    path = tmp_path / "q.npz"
    quantizers = [fqcore.LastValueQuantizer(b, False, False, False) for b in (2, 4, 8, 16)]
    states = {q.num_bits: trained(q) for q in quantizers}

    def save(q):
        for _ in range(10):
            fqcore.save_quantizer(path, q, states[q.num_bits])

    threads = [threading.Thread(target=save, args=(q,)) for q in quantizers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    loaded, state = fqcore.load_quantizer(path)
    assert state["min_var"].tobytes() == states[loaded.num_bits]["min_var"].tobytes()
    assert os.listdir(tmp_path) == ["q.npz"]
