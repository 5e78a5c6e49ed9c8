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
import contextlib

try:
    from . import variant_processes
except ImportError:  # run as a script
    import variant_processes

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
    held = step()
    times = variant_processes.step_times(step)
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
    variant_processes.main(__file__, __doc__, VARIANTS, run_variant,
                           ["variant", "best ms/step", "median ms/step"])


if __name__ == "__main__":
    main()
