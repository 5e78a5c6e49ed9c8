"""The demo's progress bar: redrawn in place on a terminal, one plain line per epoch elsewhere."""
import io
import re

from fqcore import demo
from fqcore.datasets import load_digits


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _small_digits():
    data = load_digits()
    return data._replace(x_train=data.x_train[:200], y_train=data.y_train[:200])


def _train(stream, epochs=3, batch=64):
    demo.train(_small_digits(), epochs, batch, 1, epochs, 0.05, 0, stream)
    return stream.getvalue(), -(-200 // batch)


def test_not_a_terminal_prints_one_line_per_epoch():
    text, steps_per_epoch = _train(io.StringIO())
    assert "\r" not in text
    lines = text.splitlines()
    assert text.endswith("\n") and len(lines) == 3
    for k, line in enumerate(lines, 1):
        match = re.fullmatch(r"  epoch (\d+)/3 \((float|8-bit)\): steps (\d+)/(\d+), "
                             r"loss (\d+\.\d{3}), (\d+\.\d) steps/s", line)
        assert match, line
        assert int(match[1]) == k and match[2] == ("float" if k == 1 else "8-bit")
        assert int(match[3]) == k * steps_per_epoch and int(match[4]) == 3 * steps_per_epoch
        assert float(match[6]) > 0


def test_terminal_redraws_in_place():
    text, steps_per_epoch = _train(Terminal())
    total = 3 * steps_per_epoch
    # One redraw per step, no line break until the end.
    assert text.count("\r") == total and text.count("\n") == 1 and text.endswith("\n")
    last = text.rstrip("\n").rsplit("\r", 1)[1]
    assert re.fullmatch(rf"  \[#{{28}}\] {total}/{total} epoch  3 \(8-bit\) loss \d+\.\d{{3}} "
                        r" *\d+\.\d steps/s", last), last


def test_streams_without_isatty_get_plain_lines():
    class Log:
        def __init__(self):
            self.parts = []

        def write(self, text):
            self.parts.append(text)

        def flush(self):
            pass

    log = Log()
    bar = demo.ProgressBar(4, 2, stream=log)
    for done in (1, 2, 3, 4):
        bar.update(done, (done + 1) // 2, "float", 1.0)
        if done % 2 == 0:
            bar.end_epoch(done, done // 2, "float", 1.0)
    bar.close()
    text = "".join(log.parts)
    assert "\r" not in text and len(text.splitlines()) == 2
    assert text.startswith("  epoch 1/2 (float): steps 2/4, loss 1.000, ")
