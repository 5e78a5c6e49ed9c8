"""tools/profile_demo_step.py --bytecodes, whose count the README quotes for the interpreter's work
in the demo's training step."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools import profile_demo_step  # noqa: E402


def test_the_bytecode_count_is_the_sum_over_functions_and_sees_the_generated_code(capsys):
    profile_demo_step.count_bytecodes(batch=8, top=10000)
    lines = capsys.readouterr().out.splitlines()
    total, calls = map(int, re.search(r"executes (\d+) Python bytecodes in (\d+) calls",
                                      lines[0]).groups())
    rows = [re.match(r"\s+(\d+)\s+(\d+)\s+(.+)$", line).groups() for line in lines[2:]]
    assert total == sum(int(n) for n, _, _ in rows) and 0 < calls <= total
    # The plan's generated reverse mode and grouped steps run as code of their own.
    assert {where for _, _, where in rows} >= {"<string>:1 run", "<string>:1 forward"}
    assert sum(int(c) for _, c, _ in rows) == calls
