"""The demo's training time on a quiet machine and with other processes keeping the CPUs busy.

    python tools/busy_machine.py                     # 2 busy processes, 2 epochs, default threads
    python tools/busy_machine.py --busy 1 --threads 2 --epochs 3

Each measurement runs `python -m fqcore demo --epochs N` in a fresh process (its own timer: the
training part of its output) with the environment as given, except FQCORE_NUM_THREADS when
--threads sets it; the busy processes are `python -c "while True: pass"`, started before and
killed after. Prints quiet seconds, busy seconds and their ratio, with the CPU model and load."""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
from machine import busy_processes, cpu_model  # noqa: E402


def train_seconds(epochs, threads):
    env = dict(os.environ)
    if threads is not None:
        env["FQCORE_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "fqcore", "demo", "--epochs", str(epochs),
                                 "--out", out], env=env, capture_output=True, text=True,
                                check=True)
        wall = time.perf_counter() - start
    match = re.search(r"trained in ([0-9.]+) s", result.stdout)
    return float(match.group(1)) if match else wall


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="busy processes (default 2)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", default=None,
                        help="FQCORE_NUM_THREADS for the demo (default: unset, i.e. auto)")
    args = parser.parse_args(argv)
    quiet = train_seconds(args.epochs, args.threads)
    with busy_processes(args.busy) as load:
        busy = train_seconds(args.epochs, args.threads)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; threads: "
          f"{args.threads or 'default (auto)'}; {args.epochs} epochs")
    print(f"quiet: {quiet:.1f} s; with {args.busy} busy processes (load {load:.1f}): "
          f"{busy:.1f} s; ratio {busy / quiet:.2f}")


if __name__ == "__main__":
    main()
