"""A training loop of fqcore.ops calls, with and without fqcore.cached_memory: ms per step and page
faults per step (each a process of its own, as glibc's policy is process-wide).

Usage:  python benchmarks/ops_loop_memory.py [--repeats 3]

A step is what a numpy QAT loop does in three conv layers' worth of activations (NHWC, batch 32:
28x28x32, 14x14x64, 7x7x128): batch norm in training mode, a Vars fake quant of its output, then
the fake quant's and the batch norm's gradients. Each variant runs in a fresh process, alternating
(default, cached, glibc, default, ...): 5 untimed steps, then 10 timings of 20 steps, of which the best and
the median are printed, with the minor page faults of the 200 steps.

  default  glibc's default policy: large freed arrays go back to the system, each coming back as
           fresh pages
  cached   each step inside `with fqcore.cached_memory():`
  glibc    fqcore.malloc.keep_freed_memory() (glibc keeps freed memory, for the whole process)

asv times the step too (TimeOpsLoopStep: default and cached; not glibc, a process-wide policy
that would carry over into whatever asv runs next in that process)."""
import contextlib
import resource

try:
    from . import variant_processes
except ImportError:  # run as a script
    import variant_processes

VARIANTS = ("default", "cached", "glibc")
SHAPES = ((32, 28, 28, 32), (32, 14, 14, 64), (32, 7, 7, 128))


def training_step(region):
    """A function running one step of the loop (the module's docstring), inside `region()`."""
    import numpy as np

    import fqcore
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(shape, dtype=np.float32) for shape in SHAPES]
    scales = [np.ones(shape[-1], np.float32) for shape in SHAPES]
    offsets = [np.zeros(shape[-1], np.float32) for shape in SHAPES]
    low, high = np.float32(-6.0), np.float32(6.0)

    def step():
        with region():
            for x, scale, offset in zip(xs, scales, offsets):
                bn = fqcore.fused_batch_norm(x, scale, offset)
                q = fqcore.fake_quant_with_min_max_vars(bn.y, low, high)
                dy, _, _ = fqcore.fake_quant_with_min_max_vars_gradient(q, bn.y, low, high)
                fqcore.fused_batch_norm_grad(dy, x, scale, bn.reserve_space_1, bn.reserve_space_2,
                                             bn.reserve_space_3)
    return step


def _region(variant):
    import fqcore
    return fqcore.cached_memory if variant == "cached" else contextlib.nullcontext


def run_variant(variant):
    """Times the loop in this process; prints one line: variant, best, median, faults per step."""
    from fqcore.malloc import keep_freed_memory
    if variant == "glibc":
        keep_freed_memory()
    step = training_step(_region(variant))
    for _ in range(5):
        step()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    times = variant_processes.step_times(step, warmup=0)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(f"{variant} {times[0]:.2f} {times[len(times) // 2]:.2f} {faults / 200:.0f}")


class TimeOpsLoopStep:
    """asv: one step of the loop, its arrays from numpy's allocator (glibc's default policy) or in a
    fqcore.cached_memory region."""

    params = [["default", "cached"]]
    param_names = ["memory"]

    def setup(self, memory):
        self.step = training_step(_region(memory))
        for _ in range(5):
            self.step()

    def time_step(self, memory):
        self.step()


def main():
    variant_processes.main(__file__, __doc__, VARIANTS, run_variant,
                           ["variant", "best ms/step", "median ms/step", "page faults/step"])


if __name__ == "__main__":
    main()
