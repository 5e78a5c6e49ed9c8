"""The main job, `python -m fqcore demo`: trains, evaluates float and 8-bit, saves what it says."""
import json
import os
import subprocess
import sys

import numpy as np

import fqcore.graph as G
from fqcore import demo
from fqcore.atomic_file import write_atomically
from fqcore.datasets import load_digits
from fqcore.deploy import Interpreter


def test_demo_trains_quantizes_and_saves(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    written = []

    def recording(path, write):  # every file the demo writes goes through write_atomically
        written.append(os.path.basename(path))
        return write_atomically(path, write)
    monkeypatch.setattr(demo, "write_atomically", recording)
    code = demo.main(["--epochs", "5", "--quant-delay-epochs", "2", "--freeze-bn-epochs", "4",
                      "--out", str(out)])
    assert "history.json" in written
    printed = capsys.readouterr().out
    history = json.loads((out / "history.json").read_text())
    assert len(history["loss"]) == 5 and history["loss"][-1] < history["loss"][0]
    assert history["float_accuracy"] > 0.85
    assert code == (0 if history["quantized_accuracy"] >= 0.95 * history["float_accuracy"] else 1)
    assert "fake-quantized 8-bit" in printed and "block1/act_quant" in printed
    # The saved model is the fake-quantized eval graph with the trained values: restoring it
    # gives the accuracy the demo printed.
    graph, session = G.restore(str(out / "model"))
    data = load_digits()
    images = graph.get_tensor_by_name("images:0")
    logits = graph.get_tensor_by_name("logits/act_quant/FakeQuantWithMinMaxVars:0")
    predicted = session.run(logits, {images: data.x_test}).argmax(axis=1)
    assert np.mean(predicted == data.y_test) == history["quantized_accuracy"]
    assert not any(op.type in ("AssignSub", "ApplyMomentum") for op in graph.get_operations())
    # The integer model it exported gives the accuracy it printed for it.
    assert "integer model (int8" in printed
    model = Interpreter(str(out / "model.tflite"))
    outputs = model.run(data.x_test)[model.model.outputs[0]]
    assert (np.mean(outputs.argmax(axis=1) == data.y_test)
            == history["integer_accuracy"]["reference interpreter"])


def test_learning_rate_schedule():
    rates = [demo.learning_rate_for(e, 0.05, 4, 9) for e in range(12)]
    assert rates[:4] == [0.05] * 4 and rates[4:9] == [0.01] * 5 and rates[9:] == [0.002] * 3


def test_demo_rejects_bad_arguments(capsys, tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for argv, option in ((["--epochs", "0"], "--epochs"),
                         (["--quant-delay-epochs", "20"], "--quant-delay-epochs"),
                         (["--freeze-bn-epochs", "-1"], "--freeze-bn-epochs"),
                         (["--learning-rate", "nan"], "--learning-rate"),
                         (["--learning-rate", "-0.05"], "--learning-rate"),
                         (["--learning-rate", "0"], "--learning-rate"),
                         (["--learning-rate", "inf"], "--learning-rate"),
                         (["--seed", "-1"], "--seed"),
                         (["--out", str(a_file)], "--out"),
                         (["--out", str(a_file / "below")], "--out")):
        try:
            demo.main(argv + (["--out", str(tmp_path / "unused")] if "--out" not in argv else []))
        except SystemExit as exit:
            assert exit.code == 2
        else:
            raise AssertionError(f"{argv} was accepted")
        captured = capsys.readouterr()
        assert option in captured.err and "trained in" not in captured.out, argv
    assert not (tmp_path / "unused").exists()


def test_short_runs_are_float_and_say_so(tmp_path, capsys):
    """The default float phase (4 epochs) shortens to fit a shorter run, which then has no
    fake-quantized epoch: the header says so instead of announcing one."""
    assert demo.main(["--epochs", "1", "--out", str(tmp_path / "run")]) in (0, 1)
    header = capsys.readouterr().out.splitlines()[0]
    assert "all float" in header and "then fake-quantized" not in header, header


def test_module_entry_point_dispatches(tmp_path):
    result = subprocess.run([sys.executable, "-m", "fqcore", "demo", "--help"], capture_output=True,
                            text=True, cwd=tmp_path)
    assert result.returncode == 0 and "--quant-delay-epochs" in result.stdout
    result = subprocess.run([sys.executable, "-m", "fqcore", "bogus"], capture_output=True,
                            text=True, cwd=tmp_path)
    assert result.returncode == 2 and "usage" in result.stderr
    assert not os.listdir(tmp_path)
