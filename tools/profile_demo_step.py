"""Profiles the demo's training step: where the main thread's time goes, by the code that is
running (Python interpreter vs numpy, BLAS and fqcore's kernels), sampled with Linux perf.

    python tools/profile_demo_step.py               # ms per step only
    python tools/profile_demo_step.py --perf        # re-runs itself under `perf record`
    python tools/profile_demo_step.py --bytecodes   # the Python bytecodes one step executes
    python tools/profile_demo_step.py --kernels-only [--perf]   # the step's kernel calls alone

Only the samples taken during the timed steps count (after ten untimed runs), and only the main
thread's. A sample counts for the first library on its call chain, from the innermost frame out,
that is not libc, the dynamic loader or the kernel (those serve whoever called them: OpenBLAS
zeroes its output with libc's memset, numpy copies with memmove). perf unwinds the chains from
DWARF call frame information, as libc's string functions keep no frame pointer; a chain it still
cannot follow past libc or the kernel is reported apart and counted as outside.

A second split applies the same rule to Python's C API: a libpython function that is not the
bytecode loop (_PyEval_EvalFrameDefault) serves whoever called it. numpy allocates each array
object with PyObject_Malloc and looks up its callers' attributes with PyObject_GetAttr, and the
kernels' bindings parse their arguments with Python's functions: the first split counts that
time as the interpreter's, the second as numpy's and fqcore's. A libpython function called from
the bytecode loop stays the interpreter's in both.

--kernels-only times (or, with --perf, profiles) the floor under the step's Python: one step's
calls into fqcore's kernels (fqcore._kernels), recorded with their arguments, then replayed as a
plain loop, each call with the arrays the step gave it. That is the Python any engine pays that
calls the kernels one Python call at a time and keeps its buffers from step to step, with no op
logic, no values to look up and no numpy work between the calls.

--bytecodes counts, with sys.settrace, the bytecodes one step (after the same untimed runs)
executes in each Python function: a measure of the interpreter's work that the machine's speed
does not move."""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time


CLASSES = (("BLAS", ("openblas", "libblas", "mkl")),
           ("numpy", ("_multiarray_umath", "numpy", "libm.", "libmvec")),
           ("fqcore kernels", ("_kernels", "libgomp")),
           # The engine's compiled loops (fqcore/graph/_engine.pyx) are no kernel: they count
           # outside, as the Python they replaced did.
           ("fqcore engine", ("_engine",)),
           ("Python interpreter", ("libpython", "python3")))
INTERPRETER = "Python interpreter"
BYTECODE_LOOP = "_PyEval_EvalFrameDefault"
SERVICE = ("[kernel", "libc.", "libc-", "ld-linux", "libgcc", "libstdc++", "libpthread")
INSIDE = {"BLAS", "numpy", "fqcore kernels"}
WINDOW = "timed steps (CLOCK_MONOTONIC, s):"


def prepared_step(batch):
    """(the demo's graph, a function running training step k), after ten untimed steps."""
    from fqcore import demo
    from fqcore.datasets import load_digits
    data = load_digits()
    g, session, images, labels, _, loss, train_op, updates, _ = demo.training_setup(
        learning_rate=0.01)
    batches = [slice(i, i + batch) for i in range(0, len(data.x_train) - batch + 1, batch)]
    feeds = [{images: data.x_train[s], labels: data.y_train[s]} for s in batches]

    def step(k):
        session.run([train_op, updates, loss], feeds[k % len(feeds)])
    for k in range(10):  # the plan's first runs (planning, constants) are not steps
        step(k)
    return g, step


def kernel_tape(step, k):
    """The calls training step k makes into fqcore's kernels, in order, as (function, args,
    kwargs): the step runs with the `_kernels` name of every fqcore module that holds the kernel
    module replaced by a recorder."""
    from fqcore import _kernels
    tape = []

    class Recorder:
        def __getattr__(self, name):
            function = getattr(_kernels, name)
            if not callable(function):
                return function

            def recorded(*args, **kwargs):
                tape.append((function, args, kwargs))
                return function(*args, **kwargs)
            return recorded
    holders = [m for name, m in list(sys.modules.items())
               if name.startswith("fqcore") and getattr(m, "_kernels", None) is _kernels]
    for module in holders:
        module._kernels = Recorder()
    try:
        step(k)
    finally:
        for module in holders:
            module._kernels = _kernels
    return tape


def replay(tape):
    """Makes the calls of a kernel_tape again, in order."""
    for function, args, kwargs in tape:
        function(*args, **kwargs)


def count_bytecodes(batch, top=15):
    """Prints the Python bytecodes one training step executes: the total, then by function."""
    g, step = prepared_step(batch)
    counts, calls = collections.Counter(), collections.Counter()

    def trace(frame, event, arg):
        frame.f_trace_opcodes = True
        code = frame.f_code
        where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno} {code.co_name}"
        if event == "call":
            calls[where] += 1
        elif event == "opcode":
            counts[where] += 1
        return trace
    sys.settrace(trace)
    try:
        step(10)
    finally:
        sys.settrace(None)
    print(f"demo model, batch {batch}: {len(g.get_operations())} graph ops; one training step "
          f"executes {sum(counts.values())} Python bytecodes in {sum(calls.values())} calls")
    print("  bytecodes  calls  function")
    for where, n in counts.most_common(top):
        print(f"  {n:9d}  {calls[where]:5d}  {where}")


def run_steps(steps, batch, kernels_only=False):
    g, step = prepared_step(batch)
    what = "training step"
    if kernels_only:
        tape = kernel_tape(step, 10)
        what = f"replay of a step's {len(tape)} kernel calls"
        for _ in range(10):
            replay(tape)

        def step(k):
            replay(tape)
    start = time.clock_gettime(time.CLOCK_MONOTONIC)
    for k in range(steps):
        step(k)
    end = time.clock_gettime(time.CLOCK_MONOTONIC)
    print(f"demo model, batch {batch}: {len(g.get_operations())} graph ops, "
          f"{(end - start) / steps * 1e3:.2f} ms per {what} ({steps} steps)")
    print(f"{WINDOW} {start:.6f} {end:.6f}")


def classify(script_output, start, end, c_api_serves=False):
    """{class: samples} for the main thread (pid == tid) between CLOCK_MONOTONIC times start and
    end, from `perf script -F pid,tid,time,ip,sym,dso` of a record made with -k CLOCK_MONOTONIC;
    with `c_api_serves`, by the second split (the module's docstring)."""
    counts = collections.Counter()
    main, chain = False, []
    for line in script_output.splitlines() + [""]:
        line = line.rstrip()
        header = re.match(r"^\s*(\d+)/(\d+)\s+([\d.]+):\s*$", line)
        if header:
            main = header.group(1) == header.group(2) and start <= float(header.group(3)) <= end
            chain = []
        elif line:
            frame = re.match(r"^\s*[0-9a-f]+\s+(.*?)\s*\(([^()]*)\)\s*$", line)
            if frame:
                chain.append((frame.group(1), frame.group(2)))
        elif main and chain:
            counts[_class_of(chain, c_api_serves)] += 1
            main, chain = False, []
    return counts


def _class_of(chain, c_api_serves):
    """The class of a sample's (symbol, library) frames, innermost first."""
    served = False  # a C API frame was passed over: its caller was not found
    for symbol, dso in chain:
        base = os.path.basename(dso) if not dso.startswith("[") else dso
        if base.startswith(SERVICE) or dso == "inlined":  # "inlined": a frame within the next
            continue
        name = next((name for name, markers in CLASSES
                     if any(m in base for m in markers)
                     or any(m in dso for m in markers if m == "numpy")), None)
        if name is None:
            return "other: " + base
        if c_api_serves and name == INTERPRETER and not symbol.startswith(BYTECODE_LOOP):
            served = True
            continue
        return name
    return INTERPRETER if served else "unwound no further than libc/kernel"


def profile_with_perf(steps, batch, kernels_only=False):
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        steps_output = subprocess.run(
            ["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-F", "999", "--call-graph", "dwarf,16384",
             "-o", data, "--",
             sys.executable, os.path.abspath(__file__), "--steps", str(steps), "--batch",
             str(batch)] + (["--kernels-only"] if kernels_only else []),
            check=True, capture_output=True, text=True).stdout
        script = subprocess.run(["perf", "script", "-i", data, "-F", "pid,tid,time,ip,sym,dso"],
                                check=True, capture_output=True, text=True).stdout
    print(steps_output.splitlines()[0])
    start, end = (float(v) for v in steps_output.split(WINDOW)[1].split())
    for c_api_serves in (False, True):
        counts = classify(script, start, end, c_api_serves)
        total = sum(counts.values())
        inside = sum(v for k, v in counts.items() if k in INSIDE)
        print(f"main thread, {total} samples during the timed steps"
              + (", Python's C API counted for its caller:" if c_api_serves else ":"))
        for name, n in counts.most_common():
            print(f"  {n / total:6.1%}  {name}")
        print(f"inside numpy/BLAS/fqcore kernels: {inside / total:.1%}; "
              f"outside: {1 - inside / total:.1%}")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--perf", action="store_true", help="sample with perf and classify")
    parser.add_argument("--bytecodes", action="store_true",
                        help="count the Python bytecodes of one step, by function")
    parser.add_argument("--kernels-only", action="store_true",
                        help="replay one step's kernel calls alone (the floor under its Python)")
    args = parser.parse_args()
    if args.bytecodes:
        count_bytecodes(args.batch)
    elif args.perf:
        profile_with_perf(args.steps, args.batch, args.kernels_only)
    else:
        run_steps(args.steps, args.batch, args.kernels_only)


if __name__ == "__main__":
    main()
