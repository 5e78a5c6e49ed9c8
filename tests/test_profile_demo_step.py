"""tools/profile_demo_step.py --bytecodes, whose count the README quotes for the interpreter's work
in the demo's training step."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools import profile_demo_step  # noqa: E402


def test_the_bytecode_count_is_the_sum_over_functions_and_sees_the_compiled_programs_calls(capsys):
    profile_demo_step.count_bytecodes(batch=8, top=10000)
    lines = capsys.readouterr().out.splitlines()
    total, calls = map(int, re.search(r"executes (\d+) Python bytecodes in (\d+) calls",
                                      lines[0]).groups())
    rows = [re.match(r"\s+(\d+)\s+(\d+)\s+(.+)$", line).groups() for line in lines[2:]]
    assert total == sum(int(n) for n, _, _ in rows) and 0 < calls <= total
    # The fused units' forwards and gradients, which the engine's compiled programs call (a
    # tracer that missed calls from C would miss them), and the session's own run.
    functions = {re.sub(r":\d+", "", where) for _, _, where in rows}
    assert functions >= {"fusion.py forward", "fusion.py gradient", "session.py run"}
    assert sum(int(c) for _, c, _ in rows) == calls


def test_perf_samples_count_for_the_first_library_past_libc_and_the_engine_counts_outside():
    """classify: the main thread's samples inside the window, each for the first library on its
    chain (innermost out) that is not libc, the loader or the kernel; the engine's own class."""
    def sample(tid, time, *dsos):
        return [f"  100/{tid}  {time}:"] + [f"\t    7f00 ({dso})" for dso in dsos] + [""]
    script = "\n".join(
        sample(100, "2.0", "/usr/lib/libc.so.6", "/x/numpy/_core/_multiarray_umath.so")
        + sample(100, "2.1", "[kernel.kallsyms]", "/x/fqcore/_kernels.cpython-311.so")
        + sample(100, "2.2", "/x/fqcore/graph/_engine.cpython-311.so", "/x/libpython3.11.so")
        + sample(100, "2.3", "/x/libpython3.11.so.1.0")
        + sample(101, "2.4", "/x/libscipy_openblas64_.so")  # another thread
        + sample(100, "9.0", "/x/libscipy_openblas64_.so"))  # after the window
    counts = profile_demo_step.classify(script, 1.0, 3.0)
    assert counts == {"numpy": 1, "fqcore kernels": 1, "fqcore engine": 1,
                      "Python interpreter": 1}
    assert "fqcore engine" not in profile_demo_step.INSIDE
