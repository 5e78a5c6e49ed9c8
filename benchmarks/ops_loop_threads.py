"""A loop of fqcore calls with numpy work between them, with and without fqcore.workers_awake:
ms per step (each variant a process of its own, alternating).

Usage:  python benchmarks/ops_loop_threads.py [--repeats 3]

A step is what a user's own numpy model does in four layers at batch 32 (16x16x64 activations,
512K elements): a numpy matmul by a 64x64 weight (BLAS on one thread) and a Vars fake quant of its
result. The fake quants share their work with fqcore's worker thread; between them the worker
waits for the next call for about twice the recent gaps, at most 0.25 ms (a matmul takes ~0.6 ms
on a 2-core Intel Xeon), and then sleeps, so each call first wakes it. Each variant: 5 untimed
steps, then 10 timings of 20 steps, of which the best and the median are printed.

  plain  each step inside `with fqcore.cached_memory():`
  awake  each step inside `with fqcore.cached_memory(), fqcore.workers_awake():` (the worker
         looks for 2 ms)"""
import argparse
import contextlib
import os
import subprocess
import sys
import time

try:
    from .machine import cpu_model
except ImportError:  # run as a script
    from machine import cpu_model

VARIANTS = ("plain", "awake")
SHAPE = (32, 16, 16, 64)
LAYERS = 4


def training_step(region):
    """A function running one step of the loop (the module's docstring) inside `region()`; it
    returns fqcore's workers_kept_awake() seen inside the step."""
    import numpy as np

    import fqcore
    from fqcore import _kernels
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPE, dtype=np.float32)
    w = rng.standard_normal((SHAPE[-1], SHAPE[-1]), dtype=np.float32)
    low, high = np.float32(-6.0), np.float32(6.0)

    def step():
        with region():
            h = x
            for _ in range(LAYERS):
                h = (h.reshape(-1, SHAPE[-1]) @ w).reshape(SHAPE)
                h = fqcore.fake_quant_with_min_max_vars(h, low, high)
            return _kernels.workers_kept_awake()
    return step


@contextlib.contextmanager
def _region(variant):
    """A step's region: its arrays from fqcore's block cache (as Session.run's; without it, each
    step's page faults take more time than the threads' difference), and for "awake" the workers
    held awake."""
    import fqcore
    with fqcore.cached_memory(), (fqcore.workers_awake() if variant == "awake"
                                  else contextlib.nullcontext()):
        yield


def _one_blas_thread():
    """Puts numpy's BLAS on one thread, as Session.run does where fqcore's workers wait awake;
    returns the count it had (None: no BLAS fqcore can set)."""
    from fqcore import blas_threads
    before = blas_threads.get_blas_threads()
    if before is not None:
        blas_threads.set_blas_threads(1)
    return before


def run_variant(variant):
    """Times the loop in this process; prints one line: variant, best, median, holds seen inside
    a step."""
    _one_blas_thread()
    step = training_step(lambda: _region(variant))
    for _ in range(5):
        held = step()
    times = []
    for _ in range(10):
        start = time.perf_counter()
        for _ in range(20):
            step()
        times.append((time.perf_counter() - start) / 20 * 1e3)
    times.sort()
    print(f"{variant} {times[0]:.2f} {times[len(times) // 2]:.2f} {held}")


class TimeOpsLoopThreadsStep:
    """asv: one step of the loop, plain or with the workers held awake."""

    params = [list(VARIANTS)]
    param_names = ["workers"]

    def setup(self, workers):
        self.blas_before = _one_blas_thread()
        self.step = training_step(lambda: _region(workers))
        for _ in range(5):
            self.step()

    def teardown(self, workers):
        from fqcore import blas_threads
        if self.blas_before is not None:
            blas_threads.set_blas_threads(self.blas_before)

    def time_step(self, workers):
        self.step()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="processes per variant")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # a child's
    args = parser.parse_args()
    if args.variant:
        run_variant(args.variant)
        return
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs, "
          f"1-minute load average {os.getloadavg()[0]:.2f}")
    print("| variant | best ms/step | median ms/step |")
    print("|---|---|---|")
    for _ in range(args.repeats):
        for variant in VARIANTS:
            line = subprocess.run([sys.executable, os.path.abspath(__file__), "--variant", variant],
                                  check=True, capture_output=True, text=True).stdout.split()
            print(f"| {line[0]} | {line[1]} | {line[2]} |")


if __name__ == "__main__":
    main()
