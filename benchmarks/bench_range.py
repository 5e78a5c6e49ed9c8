"""asv benchmarks of the range observer (fqcore.observe.batch_range) against np.add on the same n.

The training call of a quantizer is observe + fake-quantize; issue 4 asks for both together within
1.5x np.add(a, b, out=c), so the range pass should cost about half of np.add (one read pass).
`python benchmarks/bench_range.py` prints the ratios on one thread for every available ISA."""
import numpy as np

import fqcore
from fqcore.observe import batch_range

try:  # imported by asv, benchmarks/ is a package; run from benchmarks/, it is on sys.path
    from .placement import placed_arrays
except ImportError:
    from placement import placed_arrays

ISAS = ["scalar", "avx2", "avx512", "neon"]
SIZES = [1048576, 16777216]
LAYOUTS = ["tensor", "axis128"]  # per tensor over n elements; per axis over [n // 128, 128]
CHANNELS = 128


def _use_isa(isa):
    """Selects `isa`; asv skips the parameter set when this machine (or build) lacks it."""
    if isa not in fqcore.available_isas():
        raise NotImplementedError(f"ISA {isa} is not available here ({', '.join(fqcore.available_isas())})")
    fqcore.set_isa(isa)


class TimeRange:
    """The range pass, observe + fake-quant (the training call's two passes), and np.add, one thread."""

    params = [SIZES, LAYOUTS, ISAS]
    param_names = ["n", "layout", "isa"]
    timeout = 600

    def setup(self, n, layout, isa):
        self._saved = (fqcore.get_isa(), fqcore.get_num_threads())
        _use_isa(isa)
        fqcore.set_num_threads(1)
        rng = np.random.default_rng(20240601)
        self.per_axis = layout != "tensor"
        shape = (n // CHANNELS, CHANNELS) if self.per_axis else (n,)
        self.x = rng.standard_normal(shape, dtype=np.float32) * np.float32(2)
        self.a, self.b, self.c = placed_arrays((n,), 3)  # apart in a 4 KiB page (placement.py)
        self.a[:] = rng.random(n, dtype=np.float32)
        self.b[:] = rng.random(n, dtype=np.float32)
        self.out = np.empty(shape, np.float32)
        # Untimed calls page in the outputs, so even a --quick run times the kernels.
        np.add(self.a, self.b, out=self.c)
        self.time_observe_then_fake_quant(n, layout, isa)

    def teardown(self, *params):
        saved = getattr(self, "_saved", None)
        if saved is not None:
            fqcore.set_isa(saved[0])
            fqcore.set_num_threads(saved[1])

    def time_range(self, n, layout, isa):
        batch_range(self.x, self.per_axis)

    def time_observe_then_fake_quant(self, n, layout, isa):
        lo, hi = batch_range(self.x, self.per_axis)
        lo, hi = np.minimum(lo, np.float32(0)), np.maximum(hi, np.float32(0))
        if self.per_axis:
            fqcore.fake_quant_with_min_max_vars_per_channel(self.x, lo, hi, out=self.out)
        else:
            fqcore.fake_quant_with_min_max_vars(self.x, lo, hi, out=self.out)

    def time_numpy_add(self, n, layout, isa):
        """The reference: np.add(a, b, out=c) on n float32 elements."""
        np.add(self.a, self.b, out=self.c)


def _best(fn, seconds=1.0):
    """Best time of one call over repeated calls (at least 5 calls, about `seconds` in all)."""
    import time

    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    best = float("inf")
    for _ in range(max(5, int(seconds / max(once, 1e-9)))):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    bench = TimeRange()
    print(f"{'n':>9} {'layout':>8} {'isa':>7} {'range us':>9} {'+fq us':>9} {'add us':>9} "
          f"{'range/add':>9} {'both/add':>8}")
    for n in SIZES:
        for layout in LAYOUTS:
            for isa in fqcore.available_isas():
                bench.setup(n, layout, isa)
                try:
                    t_range = _best(lambda: bench.time_range(n, layout, isa))
                    t_both = _best(lambda: bench.time_observe_then_fake_quant(n, layout, isa))
                    t_add = _best(lambda: bench.time_numpy_add(n, layout, isa))
                finally:
                    bench.teardown()
                print(f"{n:>9} {layout:>8} {isa:>7} {t_range * 1e6:>9.1f} {t_both * 1e6:>9.1f} "
                      f"{t_add * 1e6:>9.1f} {t_range / t_add:>9.2f} {t_both / t_add:>8.2f}")


if __name__ == "__main__":
    main()
