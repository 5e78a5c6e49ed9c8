"""The reference interpreter given damaged or foreign model files: a ValueError naming the file, or
a model that runs; never another exception, a crash or a hang."""
import time

import numpy as np
import pytest

import fqcore.graph as G
from fqcore import demo, quantize
from fqcore.deploy import Interpreter, to_onnx, to_tflite


@pytest.fixture(scope="module")
def exported():
    g, images, _, logits, _ = demo.build_model(training=False, width=8)
    quantize.experimental_create_eval_graph(g, **demo.WEIGHT_OPTIONS["per-channel"])
    session = G.Session(g)
    session.run(G.global_variables_initializer(g))
    files = {"tflite": bytes(to_tflite(session, images, logits))}
    try:
        files["onnx"] = bytes(to_onnx(session, images, logits))
    except ImportError:
        pass
    return files


def _outcome(data, path):
    """'refused' (ValueError naming the file), or 'ran'; anything else fails the test."""
    path.write_bytes(data)
    try:
        interpreter = Interpreter(str(path))
    except ValueError as error:
        assert str(path) in str(error) or path.name in str(error), error
        return "refused"
    x = np.zeros((2, 8, 8, 1), np.float32)
    try:
        interpreter.run(x)
    except ValueError:
        return "refused"
    return "ran"


@pytest.mark.parametrize("file_format", ["tflite", "onnx"])
def test_corrupted_files_are_refused_or_run(exported, file_format, tmp_path):
    if file_format not in exported:
        pytest.skip("onnx is not installed")
    data = exported[file_format]
    rng = np.random.default_rng(7)
    path = tmp_path / f"model.{file_format}"
    outcomes = []
    start = time.perf_counter()
    for trial in range(150):
        damaged = bytearray(data)
        for position in rng.integers(0, len(data), size=1 + trial % 4):
            damaged[position] = rng.integers(0, 256)
        outcomes.append(_outcome(bytes(damaged), path))
    for cut in range(0, len(data), max(1, len(data) // 60)):
        outcomes.append(_outcome(data[:cut], path))
    assert "refused" in outcomes
    assert time.perf_counter() - start < 120


def test_foreign_files_are_refused_naming_them(tmp_path):
    for name, data in (("model.tflite", b"\x00" * 64), ("model.onnx", b"not a protobuf"),
                       ("picture.png", b"\x89PNG\r\n\x1a\n")):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(ValueError, match=name.replace(".", r"\.")):
            Interpreter(str(path))
