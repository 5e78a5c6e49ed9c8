"""The README's Python examples run as written against the installed package."""
import os
import re

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
BLOCKS = re.findall(r"```python\n(.*?)```", open(README).read(), re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, capsys, tmp_path, monkeypatch):
    import fqcore

    monkeypatch.chdir(tmp_path)  # examples may write files (a saved quantizer)
    previous = (fqcore.get_isa(), fqcore.get_num_threads())
    try:
        exec(compile(BLOCKS[index], f"README.md python block {index}", "exec"), {})
    finally:
        fqcore.set_isa(previous[0])
        fqcore.set_num_threads(previous[1])
