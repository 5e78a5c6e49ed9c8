"""asv benchmarks of the quantizer objects: a training call (observe + fake-quantize) and its gradient, against np.add on the same n.

Issue 4's target: the training call costs at most 1.5 x np.add(a, b, out=c) on the same n, at n = 1M
and 16M, per tensor and per axis ([n // 128, 128]). The ``track_*_vs_add`` benchmarks report that
ratio directly, from interleaved best-of-k timings in one process, so a loaded machine moves both
sides alike. `python benchmarks/bench_quantizers.py [threads]` prints the table (default: one thread).
"""
import time

import numpy as np

import fqcore

ISAS = ["scalar", "avx2", "avx512", "neon"]
SIZES = [1048576, 16777216]
LAYOUTS = ["tensor", "axis128"]  # per tensor over [n // 128, 128]; per axis over its 128 channels
QUANTIZERS = ["LastValue", "MovingAverage", "AllValues", "Fixed"]
CHANNELS = 128


def _use_isa(isa):
    """Selects `isa`; asv skips the parameter set when this machine (or build) lacks it."""
    if isa not in fqcore.available_isas():
        raise NotImplementedError(f"ISA {isa} is not available here ({', '.join(fqcore.available_isas())})")
    fqcore.set_isa(isa)


def _quantizer(name, per_axis):
    if name == "Fixed":
        return fqcore.FixedQuantizer(8, -6.0, 6.0, False)
    return getattr(fqcore, name + "Quantizer")(8, per_axis, False, False)


def _best(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


class _Quantizers:
    """A quantizer built for [n // 128, 128] data (N(0, 2): the range settles inside [-6, 6]), its
    gradient input, out= buffers, and np.add's operands of the same n."""

    timeout = 900

    def _setup(self, n, layout, quantizer, isa=None, threads=1):
        self._saved = (fqcore.get_isa(), fqcore.get_num_threads())
        _use_isa(isa if isa is not None else fqcore.available_isas()[-1])
        fqcore.set_num_threads(threads)
        rng = np.random.default_rng(20240601)
        shape = (n // CHANNELS, CHANNELS)
        self.x = rng.standard_normal(shape, dtype=np.float32) * np.float32(2)
        self.g = rng.standard_normal(shape, dtype=np.float32)
        self.out = np.empty(shape, np.float32)
        self.q = _quantizer(quantizer, layout != "tensor")
        self.weights = self.q.build(shape, "bench", None)
        # np.add on the very buffers the quantizer reads and writes: page placement (huge pages or
        # not) moves a 4 MB kernel by over 1.5x on its own, so both sides must share it.
        self.a, self.b, self.c = self.x.reshape(-1), self.g.reshape(-1), self.out.reshape(-1)
        # Untimed calls page in the buffers and start the thread pool: a --quick run times the work.
        self.train()
        self.gradient()
        self.add()

    def teardown(self, *params):
        saved = getattr(self, "_saved", None)
        if saved is not None:
            fqcore.set_isa(saved[0])
            fqcore.set_num_threads(saved[1])

    def train(self):
        self.q(self.x, True, self.weights, out=self.out)

    def gradient(self):
        self.q.gradient(self.g, self.x, self.weights, out=self.out)

    def add(self):
        np.add(self.a, self.b, out=self.c)


class TimeQuantizer(_Quantizers):
    """Training call, inference call and gradient of each quantizer on the best ISA, 1 and 2 threads."""

    params = [SIZES, LAYOUTS, QUANTIZERS, [1, 2]]
    param_names = ["n", "layout", "quantizer", "threads"]

    def setup(self, n, layout, quantizer, threads):
        if quantizer == "Fixed" and layout != "tensor":
            raise NotImplementedError("FixedQuantizer has no per-axis form")
        self._setup(n, layout, quantizer, threads=threads)

    def time_training_call(self, *params):
        self.train()

    def time_inference_call(self, *params):
        self.q(self.x, False, self.weights, out=self.out)

    def time_gradient(self, *params):
        self.gradient()


class TimeQuantizerIsa(_Quantizers):
    """The training call per ISA (one thread), LastValue: the observe pass plus the fake-quant pass."""

    params = [SIZES, LAYOUTS, ISAS]
    param_names = ["n", "layout", "isa"]

    def setup(self, n, layout, isa):
        self._setup(n, layout, "LastValue", isa=isa)

    def time_training_call(self, *params):
        self.train()


class TrackQuantizerVsAdd(_Quantizers):
    """The issue's ratios on one thread, best ISA: training call / np.add and gradient / np.add
    (target for the training call: <= 1.5)."""

    params = [SIZES, LAYOUTS, QUANTIZERS]
    param_names = ["n", "layout", "quantizer"]
    unit = "ratio to np.add"
    repeats = {1048576: 40, 16777216: 8}

    def setup(self, n, layout, quantizer):
        if quantizer == "Fixed" and layout != "tensor":
            raise NotImplementedError("FixedQuantizer has no per-axis form")
        self._setup(n, layout, quantizer, threads=1)

    def _ratio(self, fn, n):
        # Interleaved rounds, best of each: drift on a shared machine hits both sides.
        fqcore_best = add_best = float("inf")
        for _ in range(3):
            fqcore_best = min(fqcore_best, _best(fn, self.repeats[n]))
            add_best = min(add_best, _best(self.add, self.repeats[n]))
        return fqcore_best / add_best

    def track_training_call_vs_add(self, n, layout, quantizer):
        return self._ratio(self.train, n)

    def track_gradient_vs_add(self, n, layout, quantizer):
        return self._ratio(self.gradient, n)


def main(threads=1):
    """The table for the issue's closing note: milliseconds and ratios, best ISA (np.add: one thread)."""
    print(f"fqcore {fqcore.__version__}, ISA {fqcore.available_isas()[-1]}, {threads} thread(s); "
          f"times are best-of-k, ms")
    print(f"{'n':>9} {'layout':8} {'quantizer':14} {'np.add':>8} {'train':>8} {'ratio':>6} {'grad':>8} {'ratio':>6}")
    for n in SIZES:
        for layout in LAYOUTS:
            for quantizer in QUANTIZERS:
                if quantizer == "Fixed" and layout != "tensor":
                    continue
                bench = TrackQuantizerVsAdd()
                bench.setup(n, layout, quantizer)
                fqcore.set_num_threads(threads)
                try:
                    reps = bench.repeats[n]
                    add = min(_best(bench.add, reps) for _ in range(3))
                    train = min(_best(bench.train, reps) for _ in range(3))
                    grad = min(_best(bench.gradient, reps) for _ in range(3))
                    add = min(add, _best(bench.add, reps))
                finally:
                    bench.teardown()
                print(f"{n:>9} {layout:8} {quantizer:14} {add * 1e3:8.3f} {train * 1e3:8.3f} {train / add:6.2f} "
                      f"{grad * 1e3:8.3f} {grad / add:6.2f}")


if __name__ == "__main__":
    import sys

    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
