"""asv benchmarks of the six fake-quant ops: ISA and thread sweeps, per-channel layouts, per-call overhead, accuracy."""
import numpy as np

import fqcore

try:  # imported by asv, benchmarks/ is a package; run from benchmarks/, it is on sys.path
    from .placement import placed_arrays
except ImportError:
    from placement import placed_arrays

# Every ISA name, whatever this machine has: results from different machines share one parameter axis.
ISAS = ["scalar", "avx2", "avx512", "neon"]
SIZES = [4096, 65536, 1048576, 16777216]
THREADS = [1, 2]
CHANNELS = 128          # per-channel ops in the size sweeps view n elements as [n // 128, 128]
# A conv kernel, a dense one, and a dense one with few rows, whose time is mostly the per-channel
# setup (the nudge of 1024 ranges).
LAYOUTS = [(3, 3, 64, 128), (1024, 1024), (8, 1024)]
LO, HI = -6.0, 6.0


def _use_isa(isa):
    """Selects `isa`; asv skips the parameter set when this machine (or build) lacks it."""
    if isa not in fqcore.available_isas():
        raise NotImplementedError(f"ISA {isa} is not available here ({', '.join(fqcore.available_isas())})")
    fqcore.set_isa(isa)


class _Data:
    """Inputs, gradients, an out= buffer and ranges for one shape; saves and restores ISA and threads."""

    timeout = 600  # the scalar kernels on 16M elements take ~0.1 s a call

    def _data(self, shape, isa=None, threads=1, seed=20240601):
        self._saved = (fqcore.get_isa(), fqcore.get_num_threads())
        _use_isa(isa if isa is not None else fqcore.available_isas()[-1])
        fqcore.set_num_threads(threads)
        rng = np.random.default_rng(seed)
        # N(0, 2) against the range [-6, 6]: the range at 3 sigma, as a range observer settles on it
        # (0.27% clipped); benchmarks/compare.py --clip heavy times the 25%-clipped worst case.
        # Apart in a 4 KiB page, as compare.py's (placement.py): in L2, where numpy's allocator puts
        # the arrays moves a call's time (np.add's by 2x at 64K elements).
        self.x, self.g, self.out = placed_arrays(shape, 3)
        self.x[...] = rng.standard_normal(shape, dtype=np.float32) * np.float32(2)
        self.g[...] = rng.standard_normal(shape, dtype=np.float32)
        self.vmin, self.vmax = np.array(LO, np.float32), np.array(HI, np.float32)
        d = shape[-1]
        self.cmin = np.linspace(LO, -1.0, d, dtype=np.float32)
        self.cmax = np.linspace(1.0, HI, d, dtype=np.float32)
        # One untimed call pages in the output and starts the thread pool, so that even a --quick
        # run (a single sample, no warm-up) times the kernel rather than first-touch page faults.
        fqcore.fake_quant_with_min_max_args(self.x, LO, HI, out=self.out)

    def teardown(self, *params):
        saved = getattr(self, "_saved", None)
        if saved is not None:
            fqcore.set_isa(saved[0])
            fqcore.set_num_threads(saved[1])


class _ArgsOps:
    """The two ops whose range is a pair of attributes."""

    def time_args(self, *params):
        fqcore.fake_quant_with_min_max_args(self.x, LO, HI, out=self.out)

    def time_args_gradient(self, *params):
        fqcore.fake_quant_with_min_max_args_gradient(self.g, self.x, LO, HI, 8, False, out=self.out)


class _VarsOps:
    """The four ops whose range is held in arrays: per tensor and per channel."""

    def time_vars(self, *params):
        fqcore.fake_quant_with_min_max_vars(self.x, self.vmin, self.vmax, out=self.out)

    def time_vars_gradient(self, *params):
        fqcore.fake_quant_with_min_max_vars_gradient(self.g, self.x, self.vmin, self.vmax, out=self.out)

    def time_vars_per_channel(self, *params):
        fqcore.fake_quant_with_min_max_vars_per_channel(self.x, self.cmin, self.cmax, out=self.out)

    def time_vars_per_channel_gradient(self, *params):
        fqcore.fake_quant_with_min_max_vars_per_channel_gradient(
            self.g, self.x, self.cmin, self.cmax, out=self.out)


class TimeFakeQuantIsa(_Data, _ArgsOps, _VarsOps):
    """Every op on every ISA, one thread."""

    params = [SIZES, ISAS]
    param_names = ["n", "isa"]

    def setup(self, n, isa):
        self._data((n // CHANNELS, CHANNELS), isa=isa, threads=1)


class TimeFakeQuantThreads(_Data, _ArgsOps, _VarsOps):
    """Every op on the best ISA, one and two threads."""

    params = [SIZES, THREADS]
    param_names = ["n", "threads"]

    def setup(self, n, threads):
        self._data((n // CHANNELS, CHANNELS), threads=threads)


class TimeFakeQuantLayout(_Data, _VarsOps):
    """Per-channel against per-tensor (Vars) at the same element count, conv and dense shapes, one thread."""

    params = [LAYOUTS]
    param_names = ["shape"]

    def setup(self, shape):
        self._data(shape, threads=1)


class TimeFakeQuantSmallCall(_Data, _ArgsOps, _VarsOps):
    """Per-call overhead: 16 elements (Python validation, Cython, dispatch), beside numpy's own."""

    def setup(self):
        self._data((16,), threads=1)

    def time_numpy_multiply(self):
        """The floor any numpy-level forward op pays on 16 elements."""
        np.multiply(self.x, 2.0, out=self.out)

    def time_numpy_add(self):
        """The floor any numpy-level gradient op pays on 16 elements."""
        np.add(self.g, self.x, out=self.out)


class TimeNumpyBaseline:
    """numpy's memory-bound ufuncs on the same sizes: forward ops move as many bytes as
    np.multiply(a, 2.0, out=c), gradient ops as many as np.add(a, b, out=c)."""

    params = [SIZES]
    param_names = ["n"]

    def setup(self, n):
        rng = np.random.default_rng(7)
        self.a, self.b, self.c = placed_arrays((n,), 3)  # as _Data places the fake-quant operands
        self.a[...] = rng.random(n, dtype=np.float32)
        self.b[...] = rng.random(n, dtype=np.float32)

    def time_multiply(self, n):
        np.multiply(self.a, 2.0, out=self.c)

    def time_add(self, n):
        np.add(self.a, self.b, out=self.c)


def _reduction_case(n, channels, seed=99):
    """Positive gradients (no cancellation to hide behind) and inputs half outside [-6, 6]:
    the sums grow like n/4, where float32 running sums lose digits fastest."""
    rng = np.random.default_rng(seed)
    x = (rng.random((n // channels, channels), dtype=np.float32) * 24.0 - 12.0).astype(np.float32)
    g = rng.random((n // channels, channels), dtype=np.float32)
    return x, g


class TrackReductionAccuracy:
    """Absolute error of backprop_wrt_min / backprop_wrt_max against a float64 sum of the same terms."""

    params = [[65536, 1048576, 16777216]]
    param_names = ["n"]
    unit = "abs error"
    timeout = 600

    def setup(self, n):
        self.x, self.g = _reduction_case(n, CHANNELS)
        self.vmin, self.vmax = np.array(LO, np.float32), np.array(HI, np.float32)
        self.cmin = np.full(CHANNELS, LO, np.float32)
        self.cmax = np.full(CHANNELS, HI, np.float32)
        # Inside the nudged range exactly where the Args gradient passes g (its mask is checked bit
        # for bit against TF by the tests); the range holds 0, so the sign tells below from above.
        inside = fqcore.fake_quant_with_min_max_args_gradient(np.ones_like(self.x), self.x, LO, HI) == 1
        g64 = self.g.astype(np.float64)
        self.below = ~inside & (self.x < 0)
        self.above = ~inside & (self.x > 0)
        self.exact_min = np.where(self.below, g64, 0.0).sum(axis=0)   # per channel, float64
        self.exact_max = np.where(self.above, g64, 0.0).sum(axis=0)

    def track_vars_gradient_dmin_error(self, n):
        r = fqcore.fake_quant_with_min_max_vars_gradient(self.g, self.x, self.vmin, self.vmax)
        return abs(float(r.backprop_wrt_min) - float(self.exact_min.sum()))

    def track_vars_gradient_dmax_error(self, n):
        r = fqcore.fake_quant_with_min_max_vars_gradient(self.g, self.x, self.vmin, self.vmax)
        return abs(float(r.backprop_wrt_max) - float(self.exact_max.sum()))

    def track_per_channel_gradient_dmin_max_error(self, n):
        r = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(self.g, self.x, self.cmin, self.cmax)
        return float(np.max(np.abs(r.backprop_wrt_min.astype(np.float64) - self.exact_min)))

    def track_per_channel_gradient_dmax_max_error(self, n):
        r = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(self.g, self.x, self.cmin, self.cmax)
        return float(np.max(np.abs(r.backprop_wrt_max.astype(np.float64) - self.exact_max)))

    def track_numpy_float32_sum_dmin_error(self, n):
        """For scale: numpy's own float32 (pairwise) sum of the same terms."""
        s = np.where(self.below, self.g, np.float32(0.0)).reshape(-1).sum(dtype=np.float32)
        return abs(float(s) - float(self.exact_min.sum()))


class TrackIsaAgreement:
    """Elements (forward and dx) or sums that differ from the scalar kernel, bitwise: 0 is the contract."""

    params = [ISAS]
    param_names = ["isa"]
    unit = "mismatches"
    timeout = 300

    def setup(self, isa):
        available = fqcore.available_isas()
        if isa not in available:
            raise NotImplementedError(f"ISA {isa} is not available here ({', '.join(available)})")
        self._saved = (fqcore.get_isa(), fqcore.get_num_threads())
        rng = np.random.default_rng(5)
        n = 1 << 20
        # Mostly values near grid points and the nudged bounds, where a wrong rounding shows.
        x = (rng.integers(-300, 300, n) * np.float32(6.0 / 127.5)).astype(np.float32)
        x += rng.standard_normal(n, dtype=np.float32) * np.float32(1e-3)
        self.x = x.reshape(-1, CHANNELS)
        self.g = rng.standard_normal(self.x.shape, dtype=np.float32)
        self.vmin, self.vmax = np.array(-0.1, np.float32), np.array(0.2, np.float32)
        self.cmin = np.linspace(-6.0, -0.1, CHANNELS, dtype=np.float32)
        self.cmax = np.linspace(0.2, 6.0, CHANNELS, dtype=np.float32)
        self.isa = isa

    def teardown(self, isa):
        saved = getattr(self, "_saved", None)
        if saved is not None:
            fqcore.set_isa(saved[0])
            fqcore.set_num_threads(saved[1])

    def _all_outputs(self, isa, threads):
        fqcore.set_isa(isa)
        fqcore.set_num_threads(threads)
        x, g = self.x, self.g
        outs = [
            fqcore.fake_quant_with_min_max_args(x, -0.1, 0.2),
            fqcore.fake_quant_with_min_max_args_gradient(g, x, -0.1, 0.2, 8, False),
            fqcore.fake_quant_with_min_max_vars(x, self.vmin, self.vmax),
            fqcore.fake_quant_with_min_max_vars_per_channel(x, self.cmin, self.cmax),
        ]
        outs.extend(fqcore.fake_quant_with_min_max_vars_gradient(g, x, self.vmin, self.vmax))
        outs.extend(fqcore.fake_quant_with_min_max_vars_per_channel_gradient(g, x, self.cmin, self.cmax))
        return [np.asarray(o).view(np.uint32).reshape(-1) for o in outs]

    def _mismatches(self, threads):
        reference = self._all_outputs("scalar", 1)
        candidate = self._all_outputs(self.isa, threads)
        return int(sum(np.count_nonzero(a != b) for a, b in zip(reference, candidate)))

    def track_mismatches_vs_scalar_1_thread(self, isa):
        return self._mismatches(1)

    def track_mismatches_vs_scalar_2_threads(self, isa):
        return self._mismatches(2)


class TrackReductionUlps(TrackReductionAccuracy):
    """The same errors in units in the last place of the float32 result: 0.5 means correctly rounded."""

    unit = "ulps"

    @staticmethod
    def _ulps(value, exact):
        return abs(float(value) - float(exact)) / float(np.spacing(np.abs(np.float32(exact))))

    def track_vars_gradient_dmin_error(self, n):
        r = fqcore.fake_quant_with_min_max_vars_gradient(self.g, self.x, self.vmin, self.vmax)
        return self._ulps(r.backprop_wrt_min, self.exact_min.sum())

    def track_vars_gradient_dmax_error(self, n):
        r = fqcore.fake_quant_with_min_max_vars_gradient(self.g, self.x, self.vmin, self.vmax)
        return self._ulps(r.backprop_wrt_max, self.exact_max.sum())

    def track_per_channel_gradient_dmin_max_error(self, n):
        r = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(self.g, self.x, self.cmin, self.cmax)
        return max(self._ulps(v, e) for v, e in zip(r.backprop_wrt_min, self.exact_min))

    def track_per_channel_gradient_dmax_max_error(self, n):
        r = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(self.g, self.x, self.cmin, self.cmax)
        return max(self._ulps(v, e) for v, e in zip(r.backprop_wrt_max, self.exact_max))

    def track_numpy_float32_sum_dmin_error(self, n):
        """For scale: numpy's own float32 (pairwise) sum of the same terms."""
        s = np.where(self.below, self.g, np.float32(0.0)).reshape(-1).sum(dtype=np.float32)
        return self._ulps(s, self.exact_min.sum())
