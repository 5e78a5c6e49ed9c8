"""to_tflite / to_onnx and `python -m fqcore export`: what they return and write (atomically), and
what they refuse, naming it."""
import os
import subprocess
import sys

import numpy as np
import pytest

import fqcore.graph as G
from fqcore import demo, quantize
from fqcore.deploy import ExportedModel, Interpreter, tflite_format, to_onnx, to_tflite


def _demo_eval(weights="per-channel"):
    g, images, _, logits, _ = demo.build_model(training=False)
    quantize.experimental_create_eval_graph(g, **demo.WEIGHT_OPTIONS[weights])
    session = G.Session(g)
    session.run(G.global_variables_initializer(g))
    return g, session, images, logits


def test_to_tflite_returns_the_file_and_says_what_it_chose(tmp_path):
    g, session, images, logits = _demo_eval()
    path = tmp_path / "model.tflite"
    model = to_tflite(session, images, logits, str(path))
    assert isinstance(model, ExportedModel) and isinstance(model, bytes)
    assert path.read_bytes() == bytes(model)
    assert model.format == "tflite" and model.dtype == "int8"
    assert tflite_format.read(bytes(model)) == model.model
    # Names work as well as tensors.
    assert to_tflite(session, "images", "logits/BiasAdd") == model


def test_to_onnx_writes_a_model_the_interpreter_reads(tmp_path):
    pytest.importorskip("onnx")
    g, session, images, logits = _demo_eval()
    path = tmp_path / "model.onnx"
    model = to_onnx(session, images, logits, str(path))
    assert model.format == "onnx" and path.read_bytes() == bytes(model)
    x = np.random.default_rng(0).integers(0, 17, (5, 8, 8, 1)).astype(np.float32) / 16
    from_file = Interpreter(str(path), rounding="float32_half_even").run(x)
    from_model = Interpreter(model.model, rounding="float32_half_even").run(x)
    assert [np.asarray(v).tobytes() for v in from_file.values()] == \
        [np.asarray(v).tobytes() for v in from_model.values()]


def test_a_refused_export_leaves_the_previous_file(tmp_path):
    g, session, images, logits = _demo_eval(weights="contrib")
    session.set_variable_value("conv1/weights_quant/min", np.float32(-1.0))
    session.set_variable_value("conv1/weights_quant/max", np.float32(2.0))
    path = tmp_path / "model.tflite"
    path.write_bytes(b"the last good model")
    with pytest.raises(ValueError, match="conv1/weights_quant"):
        to_tflite(session, images, logits, str(path), dtype="int8")
    assert path.read_bytes() == b"the last good model"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    assert to_tflite(session, images, logits, str(path)).dtype == "uint8"


def test_export_command_takes_a_saved_eval_model(tmp_path):
    g, session, images, logits = _demo_eval()
    G.save(session, str(tmp_path / "model"))
    out = tmp_path / "model.tflite"
    run = subprocess.run([sys.executable, "-m", "fqcore", "export", str(tmp_path / "model"),
                          "--format", "tflite", "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "int8 tflite model" in run.stdout
    assert out.read_bytes() == bytes(to_tflite(session, images, logits))


def test_export_command_names_what_is_wrong(tmp_path):
    def export(*argv):
        return subprocess.run([sys.executable, "-m", "fqcore", "export", *argv],
                              capture_output=True, text=True, timeout=120)
    missing = export(str(tmp_path / "nothing"), "--out", str(tmp_path / "m.tflite"))
    assert missing.returncode == 2 and "cannot read the model" in missing.stderr
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [None, 4], name="x")
        G.fake_quant_with_min_max_args(x, -1.0, 1.0, name="y")
    G.save(G.Session(g), str(tmp_path / "bare"))
    unnamed = export(str(tmp_path / "bare"), "--out", str(tmp_path / "m.tflite"))
    assert unnamed.returncode == 2 and "'serving_inputs'" in unnamed.stderr
    named = export(str(tmp_path / "bare"), "--out", str(tmp_path / "m.tflite"), "--input", "x",
                   "--output", "y", "--dtype", "int8")
    assert named.returncode == 0, named.stderr
    bad = export(str(tmp_path / "bare"), "--out", str(tmp_path / "m.tflite"), "--input", "x",
                 "--output", "nope")
    assert bad.returncode == 1 and "the graph has no tensor 'nope'" in bad.stderr


def test_export_command_without_the_writers_package_says_what_to_install(tmp_path, capsys,
                                                                         monkeypatch):
    import builtins
    from fqcore.deploy import cli
    g, session, images, logits = _demo_eval()
    G.save(session, str(tmp_path / "model"))
    real_import = builtins.__import__

    def no_onnx(name, *args, **kwargs):
        if name == "onnx" or name.startswith("onnx."):
            raise ImportError("No module named 'onnx'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_onnx)
    code = cli.main([str(tmp_path / "model"), "--format", "onnx", "--out",
                     str(tmp_path / "m.onnx")])
    assert code == 1 and "pip install fqcore[deploy]" in capsys.readouterr().err
    assert not (tmp_path / "m.onnx").exists()
