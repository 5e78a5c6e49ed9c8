"""tools/profile_demo_step.py --bytecodes, whose count the README quotes for the interpreter's work
in the demo's training step; its perf classification; and --kernels-only's tape of a step's kernel
calls."""
import collections
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


def _script(*samples):
    """perf script output of (tid, time, (symbol, library) frames innermost first) samples."""
    lines = []
    for tid, time, frames in samples:
        lines.append(f"  100/{tid}  {time}:")
        lines += [f"\t    7f00 {symbol}+0x10 ({dso})" for symbol, dso in frames]
        lines.append("")
    return "\n".join(lines)


NUMPY = "/x/numpy/_core/_multiarray_umath.so"
PYTHON = "/x/libpython3.11.so.1.0"
KERNELS = "/x/fqcore/_kernels.cpython-311.so"
SAMPLES = _script(
    (100, "2.0", [("memmove", "/usr/lib/libc.so.6"), ("copy", NUMPY)]),
    (100, "2.1", [("clear_page", "[kernel.kallsyms]"), ("f", KERNELS)]),
    (100, "2.2", [("run", "/x/fqcore/graph/_engine.cpython-311.so"), ("call", PYTHON)]),
    (100, "2.3", [("_PyEval_EvalFrameDefault", PYTHON)]),
    # Python's C API, called by numpy, by a kernel's binding, and by the bytecode loop:
    (100, "2.4", [("_PyObject_Malloc", PYTHON), ("PyArray_NewFromDescr", NUMPY)]),
    (100, "2.5", [("PyObject_GetBuffer", PYTHON), ("binding", KERNELS)]),
    (100, "2.6", [("_Py_dict_lookup", PYTHON), ("_PyEval_EvalFrameDefault", PYTHON)]),
    # Unwound no further than libc: no library to count it for, in either split.
    (100, "2.65", [("memset", "/usr/lib/libc.so.6")]),
    (101, "2.7", [("dgemm", "/x/libscipy_openblas64_.so")]),  # another thread
    (100, "9.0", [("dgemm", "/x/libscipy_openblas64_.so")]))  # after the window


def test_perf_samples_count_for_the_first_library_past_libc_and_the_engine_counts_outside():
    """classify: the main thread's samples inside the window, each for the first library on its
    chain (innermost out) that is not libc, the loader or the kernel; the engine's own class."""
    counts = profile_demo_step.classify(SAMPLES, 1.0, 3.0)
    assert counts == {"numpy": 1, "fqcore kernels": 1, "fqcore engine": 1,
                      "Python interpreter": 4, "unwound no further than libc/kernel": 1}
    assert "fqcore engine" not in profile_demo_step.INSIDE


def test_the_second_split_counts_python_c_api_calls_for_their_caller():
    """With c_api_serves, a libpython function other than the bytecode loop serves its caller:
    numpy's allocation is numpy's, a binding's buffer request the kernels'; what the bytecode
    loop calls stays the interpreter's."""
    counts = profile_demo_step.classify(SAMPLES, 1.0, 3.0, c_api_serves=True)
    assert counts == {"numpy": 2, "fqcore kernels": 2, "fqcore engine": 1,
                      "Python interpreter": 2, "unwound no further than libc/kernel": 1}


def test_the_kernel_tape_holds_every_call_a_step_makes_into_the_kernels():
    """kernel_tape records each call of step k into fqcore._kernels, however the module reaches it:
    the same calls, function by function, as counting wrappers in the kernel module itself see in
    the step before; replay makes the recorded calls in order."""
    from fqcore import _kernels
    _, step = profile_demo_step.prepared_step(batch=8)
    counted = collections.Counter()
    originals = {name: f for name, f in vars(_kernels).items()
                 if callable(f) and not isinstance(f, type) and not name.startswith("_")}

    def counting(name, function):
        def call(*args, **kwargs):
            counted[name] += 1
            return function(*args, **kwargs)
        return call
    for name, function in originals.items():
        setattr(_kernels, name, counting(name, function))
    try:
        step(10)
    finally:
        for name, function in originals.items():
            setattr(_kernels, name, function)
    tape = profile_demo_step.kernel_tape(step, 11)
    assert collections.Counter(function.__name__ for function, _, _ in tape) == counted
    assert {"conv2d_grad", "range_trackers", "momentum_group"} <= set(counted)
    made = []
    profile_demo_step.replay([(lambda *a, **k: made.append((a, k)), (1, 2), {"x": 3}),
                              (lambda *a, **k: made.append(a), (4,), {})])
    assert made == [((1, 2), {"x": 3}), (4,)]
