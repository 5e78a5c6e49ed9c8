"""asv benchmarks of fused batch norm, forward and gradient: shapes, layouts, modes, ISAs, threads, dtypes, accuracy."""
import numpy as np

import fqcore

try:  # imported by asv, benchmarks/ is a package; run from benchmarks/, it is on sys.path
    from .placement import placed_arrays
except ImportError:
    from placement import placed_arrays

try:
    import ml_dtypes
except ImportError:  # bfloat16 parameter sets are skipped
    ml_dtypes = None

# Every ISA name, whatever this machine has: results from different machines share one parameter axis.
ISAS = ["scalar", "avx2", "avx512", "neon"]
# ResNet-50 activations (stage 2 at batch 32, stage 4 at batch 64) in both layouts, and a 3-D conv's.
CASES = {
    "NHWC 32x56x56x64": ("NHWC", (32, 56, 56, 64)),
    "NCHW 32x64x56x56": ("NCHW", (32, 64, 56, 56)),
    "NHWC 64x14x14x256": ("NHWC", (64, 14, 14, 256)),
    "NCHW 64x256x14x14": ("NCHW", (64, 256, 14, 14)),
    "NDHWC 8x16x16x16x32": ("NDHWC", (8, 16, 16, 16, 32)),
}
# The ISA and dtype sweeps use the 3.2M-element pair: the scalar kernels stay well under a second.
SWEEP_CASES = ["NHWC 64x14x14x256", "NCHW 64x256x14x14"]
MODES = ["training", "inference"]
THREADS = [1, 2]
DTYPES = ["float32", "float16", "bfloat16"]
EPSILON = 1e-3
FACTOR = 0.1  # exponential_avg_factor as in training (blends the running statistics)


def _use_isa(isa):
    """Selects `isa`; asv skips the parameter set when this machine (or build) lacks it."""
    if isa not in fqcore.available_isas():
        raise NotImplementedError(f"ISA {isa} is not available here ({', '.join(fqcore.available_isas())})")
    fqcore.set_isa(isa)


def _dtype(name):
    if name == "bfloat16":
        if ml_dtypes is None:
            raise NotImplementedError("bfloat16 needs ml_dtypes, which is not installed")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _channels(data_format, shape):
    return shape[-1] if data_format.endswith("C") else shape[1]


class _Data:
    """x, y_backprop, per-channel vectors and the statistics the gradient needs, for one case;
    saves and restores ISA and threads."""

    timeout = 600

    def _data(self, case, mode="training", isa=None, threads=1, dtype="float32", seed=20240601):
        self._saved = (fqcore.get_isa(), fqcore.get_num_threads())
        _use_isa(isa if isa is not None else fqcore.available_isas()[-1])
        fqcore.set_num_threads(threads)
        fmt, shape = CASES[case]
        dt = _dtype(dtype)
        c = _channels(fmt, shape)
        rng = np.random.default_rng(seed)
        self.fmt = fmt
        self.training = mode == "training"
        self.x = (rng.standard_normal(shape, dtype=np.float32) * np.float32(2) + np.float32(0.5)).astype(dt)
        self.dy = rng.standard_normal(shape, dtype=np.float32).astype(dt)
        self.scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
        self.offset = rng.uniform(-0.5, 0.5, c).astype(np.float32)
        self.mean = np.full(c, 0.5, np.float32)
        self.variance = np.full(c, 4.0, np.float32)
        # One untimed forward: the gradient's statistics, and the thread pool started.
        r = self.forward()
        if self.training:
            self.rs1, self.rs2, self.rs3 = r.reserve_space_1, r.reserve_space_2, r.reserve_space_3
        else:
            self.rs1, self.rs2, self.rs3 = self.mean, self.variance, None

    def forward(self):
        return fqcore.fused_batch_norm(self.x, self.scale, self.offset, self.mean, self.variance, EPSILON,
                                       FACTOR if self.training else 1.0, self.fmt, self.training)

    def gradient(self):
        return fqcore.fused_batch_norm_grad(self.dy, self.x, self.scale, self.rs1, self.rs2, self.rs3,
                                            EPSILON, self.fmt, self.training)

    def teardown(self, *params):
        saved = getattr(self, "_saved", None)
        if saved is not None:
            fqcore.set_isa(saved[0])
            fqcore.set_num_threads(saved[1])


class _Ops:
    def time_forward(self, *params):
        self.forward()

    def time_gradient(self, *params):
        self.gradient()


class TimeBatchNorm(_Data, _Ops):
    """Every case in both modes, best ISA, one thread, float32."""

    params = [list(CASES), MODES]
    param_names = ["case", "mode"]

    def setup(self, case, mode):
        self._data(case, mode)


class TimeBatchNormIsa(_Data, _Ops):
    """Training on every ISA, one thread."""

    params = [SWEEP_CASES, ISAS]
    param_names = ["case", "isa"]

    def setup(self, case, isa):
        self._data(case, isa=isa)


class TimeBatchNormThreads(_Data, _Ops):
    """Training on the best ISA, one and two threads."""

    params = [list(CASES), THREADS]
    param_names = ["case", "threads"]

    def setup(self, case, threads):
        self._data(case, threads=threads)


class TimeBatchNormDtype(_Data, _Ops):
    """Training with float32, float16 and bfloat16 elements (computed in float32), one thread."""

    params = [SWEEP_CASES, DTYPES]
    param_names = ["case", "dtype"]

    def setup(self, case, dtype):
        self._data(case, dtype=dtype)


class TimeBatchNormNumpyBaseline:
    """numpy's memory-bound ufuncs on the same element count (float32): the gradient reads two
    arrays and writes one like np.add(a, b, out=c); inference forward reads one and writes one."""

    params = [list(CASES)]
    param_names = ["case"]

    def setup(self, case):
        n = int(np.prod(CASES[case][1]))
        rng = np.random.default_rng(7)
        # Apart in a 4 KiB page (placement.py): allocated one after another, these arrays (each a
        # multiple of 4 KiB) start a few bytes apart in it, and np.add slows by up to 1.3x.
        self.a, self.b, self.c = placed_arrays((n,), 3)
        self.a[:] = rng.random(n, dtype=np.float32)
        self.b[:] = rng.random(n, dtype=np.float32)

    def time_add(self, case):
        np.add(self.a, self.b, out=self.c)

    def time_multiply(self, case):
        np.multiply(self.a, 2.0, out=self.c)


class TrackBatchNormAccuracy:
    """Hard data, channel means far from zero (1e4 + c, std 1): the largest relative error over the
    channels of fqcore's statistics and gradient sums against float64 evaluations of the same formulas."""

    params = [["NHWC", "NCHW"]]
    param_names = ["data_format"]
    unit = "relative error"
    timeout = 300

    def setup(self, data_format):
        n, hw, c = 16, 28, 64
        rng = np.random.default_rng(11)
        x = rng.standard_normal((n, hw, hw, c)) + (1e4 + np.arange(c))
        dy = rng.standard_normal((n, hw, hw, c)) + 0.25
        axes = (0, 1, 2)
        self.fmt = data_format
        self.x = x.astype(np.float32)
        self.dy = dy.astype(np.float32)
        if data_format == "NCHW":
            self.x = np.ascontiguousarray(self.x.transpose(0, 3, 1, 2))
            self.dy = np.ascontiguousarray(self.dy.transpose(0, 3, 1, 2))
            axes = (0, 2, 3)
        self.axes = axes
        self.scale = np.linspace(0.5, 1.5, c, dtype=np.float32)
        self.offset = np.zeros(c, np.float32)
        x64 = self.x.astype(np.float64)
        self.exact_mean = x64.mean(axis=axes)
        self.exact_var = x64.var(axis=axes)   # biased, as reserve_space_2
        self.fwd = fqcore.fused_batch_norm(self.x, self.scale, self.offset, epsilon=EPSILON,
                                           data_format=data_format)
        # The gradient's sums in float64 from the same (float32) statistics the kernel receives.
        shape = [1] * 4
        shape[1 if data_format == "NCHW" else 3] = c
        mean = self.fwd.reserve_space_1.astype(np.float64)
        coef0 = 1.0 / np.sqrt(self.fwd.reserve_space_2.astype(np.float64) + np.float64(np.float32(EPSILON)))
        dy64 = self.dy.astype(np.float64)
        xc = x64 - mean.reshape(shape)
        self.exact_offset_bp = dy64.sum(axis=axes)
        self.exact_scale_bp = (dy64 * xc).sum(axis=axes) * coef0

    @staticmethod
    def _rel(value, exact):
        return float(np.max(np.abs(value.astype(np.float64) - exact) / np.abs(exact)))

    def track_batch_mean(self, data_format):
        return self._rel(self.fwd.reserve_space_1, self.exact_mean)

    def track_batch_variance(self, data_format):
        return self._rel(self.fwd.reserve_space_2, self.exact_var)

    def track_numpy_float32_variance(self, data_format):
        """For scale: numpy's own float32 np.var (two passes, pairwise sums) of the same data."""
        return self._rel(self.x.var(axis=self.axes, dtype=np.float32), self.exact_var)

    def track_scale_backprop(self, data_format):
        g = fqcore.fused_batch_norm_grad(self.dy, self.x, self.scale, self.fwd.reserve_space_1,
                                         self.fwd.reserve_space_2, epsilon=EPSILON, data_format=data_format)
        return self._rel(g.scale_backprop, self.exact_scale_bp)

    def track_offset_backprop(self, data_format):
        g = fqcore.fused_batch_norm_grad(self.dy, self.x, self.scale, self.fwd.reserve_space_1,
                                         self.fwd.reserve_space_2, epsilon=EPSILON, data_format=data_format)
        return self._rel(g.offset_backprop, self.exact_offset_bp)
