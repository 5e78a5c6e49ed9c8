"""How many threads a Session run gives numpy's BLAS (the convolutions' products where fqcore's own
kernel does not, and matmuls) and fqcore's kernels. With "auto", the default, BLAS runs on one
thread where fqcore's kernel does the convolutions (RunThreads.blas_threads says why), else on as
many CPUs as other processes leave free (fqcore's own estimate, fqcore.free_cpus(), re-estimated
as runs go): its threads spin and wait for each other, so a thread that shares its core with
another process stalls the whole call (on 2 cores with two busy processes, the demo's step took
689 ms with 2 BLAS threads, 33 ms with 1); on a quiet machine the extra threads pay for larger
layers. A number in $FQCORE_NUM_THREADS, fqcore's own thread setting, fixes the BLAS count too.
fqcore's kernels follow fqcore's own setting inside a run unless Session's kernel_threads fixes a
count."""
import contextlib
import os

from .. import _runtime, blas_threads

ENVIRONMENT = "FQCORE_NUM_THREADS"


def parse(value, name):
    """`value` as the BLAS setting: "auto" or a positive int; ValueError naming `name`."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return "auto"
        if text.isdigit() and int(text) >= 1:
            return int(text)
    elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(f"{name} must be 'auto' or a positive int, got {value!r}")


class RunThreads:
    """The thread counts of one Session's runs: `threads` for BLAS (None: $FQCORE_NUM_THREADS,
    else "auto"), `kernel_threads` for fqcore's kernels (None: fqcore's own setting)."""

    def __init__(self, threads, kernel_threads):
        if threads is None:
            env = os.environ.get(ENVIRONMENT)
            threads = "auto" if env is None else parse(env, f"${ENVIRONMENT}")
        self.blas = parse(threads, "threads")
        if kernel_threads is not None and (isinstance(kernel_threads, bool) or
                                           not isinstance(kernel_threads, int) or kernel_threads < 1):
            raise ValueError(f"kernel_threads must be None or a positive int, got {kernel_threads!r}")
        self.kernel = kernel_threads

    def blas_threads(self):
        """BLAS threads for the next run: the fixed count; for "auto", one where fqcore's own
        kernel does the convolutions' products (_runtime.own_matrix_products), else the CPUs others
        leave free. BLAS is then left the dense layers' MatMuls, and a second BLAS thread, which
        spins for about 0.1 s after each call, competed with
        fqcore's pool and the main thread for the other core: AMD Zen 5, 2 cores, ms per step,
        one thread against free CPUs, separate processes, 3 pairs: the demo 3.7-3.8 against
        4.9-5.4, MobileNet-v2 23.0-26.3 against 24.9-29.1. The AVX2 path, with the same kernel,
        one BLAS thread: the demo 4.6-4.9 against 5.9-6.9 with BLAS doing the convolutions on
        free CPUs, MobileNet-v2 34.1-38.0 against 44.6-47.4."""
        if self.blas != "auto":
            return self.blas
        return 1 if _runtime.own_matrix_products() else _runtime.free_cpus()

    @contextlib.contextmanager
    def applied(self):
        """Sets both counts for the block. fqcore's kernel count is put back after it; BLAS
        keeps its count until a run needs another: the count that suits the machine now suits
        numpy's own calls between runs too, and BLAS is not reconfigured twice a run."""
        previous_kernel = _runtime.get_num_threads()
        if self.kernel is not None and self.kernel != previous_kernel:
            _runtime.set_num_threads(self.kernel)
        blas = self.blas_threads()
        current = blas_threads.get_blas_threads()
        if current is not None and blas != current:
            blas_threads.set_blas_threads(blas)
        # With BLAS on one thread no other pool runs between the kernels' calls: fqcore's idle
        # workers wait awake for the next one. Woken from sleep 6.5 times a step, the demo's step
        # took 22-27% longer (Intel Xeon, 2 cores, batch 64).
        awake = (_runtime.workers_awake() if blas == 1 and current is not None
                 else contextlib.nullcontext())
        try:
            with awake:
                yield
        finally:
            if self.kernel is not None and self.kernel != previous_kernel:
                _runtime.set_num_threads(previous_kernel)
