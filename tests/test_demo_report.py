"""What the demo and `python -m fqcore` tell the user: help, the run's header, the exit status,
the files it lists as saved, and a legible plot."""
import contextlib
import io
import json
import os
import re
import subprocess
import sys

import pytest

from fqcore import demo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(argv):
    """Runs the demo in this process; returns (exit status, what it printed)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = demo.main(argv)
    return code, printed.getvalue()


def _module(*argv, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, "-m", "fqcore", *argv], capture_output=True,
                          text=True, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """Two epochs with the default phases (which both lie beyond them) and batch-norm statistics
    frozen after the first epoch."""
    out = tmp_path_factory.mktemp("short") / "run"
    code, printed = _run(["--epochs", "2", "--freeze-bn-epochs", "1", "--out", str(out)])
    return code, printed, out


def _epochs_named(text):
    return [int(n) for n in re.findall(r"\bepochs? (\d+)", text)]


def test_header_describes_only_the_phases_the_run_has(short_run):
    _, printed, _ = short_run
    header = printed.split("\n  ")[0]
    assert "then fake-quantized" not in header, header
    assert all(n <= 2 for n in _epochs_named(header)), header
    assert "frozen from epoch 2" in header


def test_header_counts_one_epoch_in_the_singular(tmp_path):
    _, printed = _run(["--epochs", "1", "--out", str(tmp_path / "run")])
    header = printed.split("\n  ")[0]
    assert re.search(r"\b1 epoch\b", header) and not re.search(r"\b1 epochs\b", header), header


def test_history_numbers_epochs_as_the_screen_does(short_run):
    _, printed, out = short_run
    history = json.loads((out / "history.json").read_text())
    assert history["bn_frozen_from_epoch"] == 2 and history["quantized_from_epoch"] is None
    assert f"frozen from epoch {history['bn_frozen_from_epoch']}" in printed


def test_every_written_file_is_listed_as_saved(short_run):
    _, printed, out = short_run
    saved = [line for line in printed.splitlines() if line.startswith("saved:")]
    assert len(saved) == 1
    written = sorted(os.listdir(out))
    assert "history.json" in written
    for name in written:
        assert str(out / name) in saved[0], name


def test_plot_has_a_legend_no_clipped_text_and_axes_fitted_to_the_run(tmp_path, monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot")
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    epochs = 3
    history = {"loss": [2.0, 1.0, 0.5], "train_accuracy": [0.5, 0.8, 0.9],
               "test_accuracy": [0.45, 0.75, 0.85], "epochs": epochs,
               "quantized_from_epoch": 2, "bn_frozen_from_epoch": None,
               # what history.json held before the epochs were numbered as on screen
               "quant_delay_epochs": 1, "freeze_bn_epochs": 9}
    assert demo.plot_history(history, str(tmp_path / "curves.png")) is not None
    assert (tmp_path / "curves.png").stat().st_size > 0
    (figure,) = figures
    figure.canvas.draw()
    # Everything drawn (titles, labels, tick labels, legends), in inches, lies on the page.
    drawn = figure.get_tightbbox(figure.canvas.get_renderer())
    width, height = figure.get_size_inches()
    slack = 0.01
    assert (drawn.x0 >= -slack and drawn.y0 >= -slack and drawn.x1 <= width + slack
            and drawn.y1 <= height + slack), (drawn, width, height)
    for axes in figure.axes:
        low, high = axes.get_xlim()
        assert 0 <= low <= 1 and epochs <= high <= epochs + 1, (low, high)
        legend = axes.get_legend()
        assert legend is not None
        labels = [t.get_text() for t in legend.get_texts()]
        # The dashed line marking the start of fake quantization is in the legend, and the
        # freeze, which this run never reaches, is neither drawn nor listed.
        assert any("fake-quantized" in label and "epoch 2" in label for label in labels), labels
        assert not any("frozen" in label for label in labels), labels


def test_diverged_training_is_reported_with_a_non_zero_exit(tmp_path):
    code, printed = _run(["--epochs", "2", "--learning-rate", "50", "--out", str(tmp_path)])
    assert code == 3 and "diverged" in printed, printed
    assert "of float" not in printed


def test_help_shows_every_option_with_help_text_default_and_exit_status(tmp_path):
    result = _module("demo", "--help", cwd=tmp_path)
    assert result.returncode == 0
    # argparse heads the option list "options:" (Python 3.10+) or "optional arguments:".
    listing = re.split(r"\n(?:options|optional arguments):\n", result.stdout)[1]
    options = re.findall(r"\n  (--[a-z-]+)", "\n" + listing)
    text = " ".join(listing.split())
    assert {"--epochs", "--batch", "--learning-rate", "--seed", "--out"} <= set(options)
    for option, following in zip(options, options[1:] + [None]):
        entry = text[text.index(option + " "):text.index(following + " ") if following else None]
        assert "default" in entry, entry
    assert "exit status" in text
    for code in ("0", "1", "2", "3"):
        assert re.search(rf"\b{code}\b[^.]*", text.split("exit status", 1)[1]), code


@pytest.mark.parametrize("option, value, expected", [
    ("--epochs", "two", "--epochs: expected a positive integer, got 'two'"),
    ("--batch", "0", "--batch: expected a positive integer, got '0'"),
    ("--seed", "-3", "--seed: expected a non-negative integer, got '-3'"),
    ("--learning-rate", "fast", "--learning-rate: expected a positive finite number, got 'fast'"),
    ("--quant-delay-epochs", "x", "--quant-delay-epochs: expected a non-negative integer, got 'x'"),
])
def test_bad_option_values_are_named_with_what_was_expected(option, value, expected, tmp_path,
                                                            capsys):
    with pytest.raises(SystemExit) as exit:
        demo.main([option, value, "--out", str(tmp_path / "unused")])
    assert exit.value.code == 2
    assert expected in capsys.readouterr().err


def test_module_help_lists_the_commands(tmp_path):
    result = _module("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for command in ("check", "demo", "export"):
        assert re.search(rf"^\s+{command}\s+\S", result.stdout, re.M), command
    assert not os.listdir(tmp_path)


def test_readme_documents_the_demo_exit_status():
    readme = open(os.path.join(ROOT, "README.md")).read()
    section = readme[readme.index("## The two commands"):readme.index("## Example")]
    assert "exit status" in section and "diverged" in section


def test_check_times_each_op_against_its_numpy_floor(capsys):
    """`python -m fqcore check`'s speed table: the Vars forward divides as TF does, so its floor is
    np.divide (issue 18), the gradients' and batch norm's np.add; each row names its floor."""
    from fqcore import __main__ as cli
    cli.speed_table()
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if re.match(r"\s+\d+\s", line)]
    floors = {" ".join(row[1:-4]): row[-1] for row in rows}
    assert floors == {"vars forward": "np.divide", "vars gradient": "np.add",
                      "batch norm NHWC": "np.add", "gradient NHWC": "np.add",
                      "batch norm NCHW": "np.add", "gradient NCHW": "np.add"}
    assert all(float(row[-2]) > 0 for row in rows)
