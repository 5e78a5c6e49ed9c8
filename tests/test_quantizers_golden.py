"""fqcore's quantizers against tfmot 0.8.1's recorded sequences (tests/data/quantizers_*, made by tools/gen_golden_quantizers.py), on every ISA.

Every training and inference call of every sequence: outputs, state after the call, and the gradient
(dx, and the sums for min and max) bit for bit. Two documented exceptions, both about the sign of a
zero in the state, never its value or the outputs:
- per-axis state: TF's tf.minimum/maximum keep the second operand of equal values in its 8-lane
  packets and the first in its scalar tail, so TF's sign depends on the channel's position; fqcore
  keeps the first everywhere (TF's per-tensor rule);
- a batch whose extreme is +0 against -0 (denormals count as zeros): TF's reduce_min/max return
  whichever its reduction order meets last; fqcore's batch_range orders -0 below +0.
"""
import functools
import json
from pathlib import Path

import numpy as np
import pytest

import fqcore
from helpers import describe, mismatch_indices

DATA = Path(__file__).resolve().parent / "data"
F32 = np.float32
TINY = np.finfo(F32).tiny


@functools.lru_cache(maxsize=None)
def load():
    with np.load(DATA / "quantizers_sequences.npz") as npz:
        data = {key: npz[key] for key in npz.files}
    return data, json.loads(str(data["sequences"]))


@functools.lru_cache(maxsize=None)
def interop():
    return json.loads((DATA / "quantizers_interop.json").read_text())


def bits_view(key, part, shape=None):
    value = load()[0][key][part].view(F32).copy()
    return value if shape is None else value.reshape(shape)


def problems_of(name, actual, expected, zero_sign_free=None):
    """A message per differing element (`zero_sign_free`: a mask where +0 and -0 count as equal)."""
    actual = np.asarray(actual)
    if actual.dtype != F32 or actual.shape != expected.shape:
        return [f"{name}: got {actual.dtype} {actual.shape}, expected float32 {expected.shape}"]
    bad = mismatch_indices(actual, expected)
    if zero_sign_free is not None and bad.size:
        a, e, free = actual.reshape(-1), expected.reshape(-1), np.broadcast_to(zero_sign_free, actual.shape).reshape(-1)
        bad = bad[~(free[bad] & (a[bad] == 0) & (e[bad] == 0))]
    a, e = actual.reshape(-1), expected.reshape(-1)
    return [f"{name}[{i}]: fqcore {describe(a[i])}, tfmot {describe(e[i])}" for i in bad[:4]]


def mixed_zero_extremes(x, per_axis):
    """Where the batch (denormals as zeros) holds both -0 and +0 among its minima or maxima."""
    flushed = np.where(np.abs(x) < TINY, np.copysign(F32(0), x), x)
    if per_axis and x.ndim == 1:
        return np.zeros(x.shape, bool)
    rows = flushed.reshape(-1, x.shape[-1]) if per_axis else flushed.reshape(-1, 1)
    zero = rows == 0
    neg, pos = (zero & np.signbit(rows)).any(axis=0), (zero & ~np.signbit(rows)).any(axis=0)
    mixed = neg & pos
    return mixed if per_axis else bool(mixed.any())


def run_sequence(meta):
    """Every step of one sequence; returns the problems found."""
    data = load()[0]
    q = fqcore.deserialize({"class_name": meta["class_name"], "config": meta["config"]})
    weights = q.build(meta["build_shape"], "q", None)
    problems = []
    if meta["state_shape"] is not None:
        for key, initial in (("min_var", "initial_min"), ("max_var", "initial_max")):
            expected = np.array(meta[initial], np.uint32).view(F32).reshape(meta["state_shape"])
            if meta["initial_from_build"]:
                problems += problems_of(f"build {key}", weights[key], expected)
            else:  # a sequence that starts from a given state (tfmot's quant_ops with set variables)
                weights[key][...] = expected
    else:
        assert weights == {}
    per_axis_state = bool(meta["config"].get("per_axis")) and meta["class_name"] != "AllValuesQuantizer"
    for k in range(meta["first_step"], meta["first_step"] + meta["steps"]):
        training = bool(data["training"][k])
        shape = tuple(int(s) for s in data["shape"][k, : data["ndim"][k]])
        elems, states = slice(*data["elem_off"][k : k + 2]), slice(*data["state_off"][k : k + 2])
        x, g = bits_view("x", elems, shape), bits_view("g", elems, shape)
        x_before = x.tobytes()
        step = f"step {k - meta['first_step']} ({'training' if training else 'inference'}, x shape {shape})"
        state_before = {key: value.copy() for key, value in weights.items()}
        found = problems_of("y", q(x, training, weights), bits_view("y", elems, shape))
        if training and x.size == 0 and weights:
            # fqcore's documented divergence: an empty batch leaves the state as it was (tfmot's
            # state becomes [0, 0], or NaN for symmetric ranges). The sequence then goes on from
            # tfmot's state, so that later steps are still compared with it.
            for name in weights:
                found += problems_of(f"state {name} (empty batch: unchanged)", weights[name], state_before[name])
                weights[name][...] = bits_view(name[:3], states, weights[name].shape)
        gradient = q.gradient(g, x, weights)
        if weights:
            dx, dmin, dmax = gradient
            found += problems_of("dmin", dmin, bits_view("dmin", states, weights["min_var"].shape))
            found += problems_of("dmax", dmax, bits_view("dmax", states, weights["max_var"].shape))
            if per_axis_state:
                free = np.ones(weights["min_var"].shape, bool)
            elif training:
                free = np.array(mixed_zero_extremes(x, False))
            else:
                free = None
            for key, name in (("min", "min_var"), ("max", "max_var")):
                found += problems_of(f"state {name}", weights[name], bits_view(key, states, weights[name].shape), free)
        else:
            dx = gradient
        found += problems_of("dx", dx, bits_view("dx", elems, shape))
        if x.tobytes() != x_before:
            found.append("inputs were modified")
        problems += [f"{step}: {p}" for p in found]
    return problems


def sequence_ids():
    return [m["name"] for m in load()[1]]


@pytest.mark.parametrize("index", range(len(load()[1])), ids=sequence_ids())
def test_sequence(index, isa):
    meta = load()[1][index]
    problems = run_sequence(meta)
    assert not problems, f"{meta['name']} ({meta['source']}) on {isa}:\n" + "\n".join(problems[:12])


def test_data_covers_the_issue():
    """Every quantizer, num_bits 2/4/8/16, symmetric and narrow_range both ways, per-axis ranks 1-5."""
    data, meta = load()
    assert str(data["tfmot_version"]) == "0.8.1" and str(data["tf_version"]).startswith("2.21")
    classes = {m["class_name"] for m in meta}
    assert classes == {"LastValueQuantizer", "MovingAverageQuantizer", "AllValuesQuantizer", "FixedQuantizer",
                       "NoQuantizer"}
    for cls in ("LastValueQuantizer", "MovingAverageQuantizer", "AllValuesQuantizer"):
        combos = {(m["config"]["num_bits"], m["config"]["symmetric"], m["config"]["narrow_range"])
                  for m in meta if m["class_name"] == cls}
        assert combos >= {(b, s, n) for b in (2, 4, 8, 16) for s in (False, True) for n in (False, True)}, cls
    ranks = {len(m["build_shape"]) for m in meta if m["class_name"] == "LastValueQuantizer" and m["config"]["per_axis"]}
    assert ranks == {1, 2, 3, 4, 5}
    assert sum(len(m) for m in meta) and int(data["training"].sum()) > 1000 and int((~data["training"]).sum()) > 300


def test_known_tie_rule_differences_are_only_signs_of_zero():
    """The exceptions in this module's docstring occur in the data (so the rule is not vacuous) and
    only as zeros of opposite sign. Channel 0 of 17 (+0 data, symmetric range) sits in one of TF's
    packets: min(+0, +0 / r = -0) keeps the second operand, -0; fqcore (and TF's tail) keep +0."""
    data, meta = load()
    m = {m["name"]: m for m in meta}["special-LastValue-per-axis-zero-channels-c17-sym"]
    k = m["first_step"]
    shape = tuple(int(s) for s in data["shape"][k, : data["ndim"][k]])
    x = bits_view("x", slice(*data["elem_off"][k : k + 2]), shape)
    q = fqcore.deserialize({"class_name": m["class_name"], "config": m["config"]})
    w = q.build(m["build_shape"], "q", None)
    q(x, True, w)
    tf_min = bits_view("min", slice(*data["state_off"][k : k + 2]))
    differ = mismatch_indices(w["min_var"], tf_min)
    assert differ.tolist() == [0]
    assert w["min_var"][0] == tf_min[0] == 0 and not np.signbit(w["min_var"][0]) and np.signbit(tf_min[0])


# --- Serialization interop with tfmot (recorded by the generator)


def test_tfmot_configs_deserialize_to_equal_quantizers():
    for entry in interop()["serialized"]:
        expected = getattr(fqcore, entry["class_name"])(**entry["args"])
        for key in ("keras2", "tf_keras", "quantize_layer"):
            got = fqcore.deserialize(entry[key])
            assert got == expected, (key, entry[key])
        # fqcore writes exactly tfmot's Keras-2 dict, key order included: configs round-trip unchanged.
        assert fqcore.serialize(expected) == entry["keras2"]
        assert json.dumps(fqcore.serialize(expected)) == json.dumps(entry["keras2"])


def test_tf_keras_shape_carries_module_and_registered_name():
    entry = interop()["serialized"][0]["tf_keras"]
    assert set(entry) == {"module", "class_name", "config", "registered_name"}
    assert entry["module"] == "tensorflow_model_optimization.python.core.quantization.keras.quantizers"


def test_tfmot_accepts_fqcore_serialize_output():
    """The generator showed tfmot the dicts fqcore's rules give; fqcore must still give exactly those,
    and tfmot accepted every one (inside quantize_scope) as an equal quantizer, except a moving average
    with a non-default ema_decay, an fqcore extension tfmot's constructor has no argument for."""
    report = interop()
    assert report["accepts"], "no interop records"
    for entry in report["accepts"]:
        d = entry["fqcore_dict"]
        made = fqcore.serialize(fqcore.deserialize(d))
        assert made == d and list(made["config"]) == list(d["config"]), (made, d)
        if "ema_decay" in d["config"]:
            assert not entry["accepted"] and "ema_decay" in entry["error"], entry
        else:
            assert entry["accepted"] and entry["equal"], entry
            assert entry["result_class"] == d["class_name"] and entry["result_config"] == d["config"]
    methods = {e["method"] for e in report["accepts"]}
    assert methods == {"tf_keras.utils.deserialize_keras_object", "tf_keras.utils.legacy.deserialize_keras_object",
                       "QuantizeLayer.from_config"}


def test_tfmot_rejections_are_fqcore_extensions():
    """What tfmot itself fails on and fqcore supports: per-axis ranks 3 and 5, per-axis moving averages."""
    for entry in interop()["rejected_by_tfmot"]:
        assert entry["error"], entry
        q = getattr(fqcore, entry["class_name"])(8, entry["per_axis"], False, False)
        shape = tuple(entry["shape"])
        if not shape:
            with pytest.raises(ValueError, match="rank 1 or higher"):
                q.build(shape, "q", None)
            continue
        w = q.build(shape, "q", None)
        q(np.ones(shape, F32), True, w)
        assert w["min_var"].shape == w["max_var"].shape == (shape[-1],)
        if entry["class_name"] == "LastValueQuantizer":
            assert w["min_var"].tolist() == [0] * shape[-1] and w["max_var"].tolist() == [1] * shape[-1]
        else:
            d = F32(1.0 - 0.999)
            assert w["min_var"].tolist() == [F32(-6) - F32(-6) * d] * shape[-1]
            assert w["max_var"].tolist() == [F32(6) - F32(5) * d] * shape[-1]
