"""ISA and thread controls of the C library: show_config, available_isas, get/set_isa, threads."""
import numbers
import os

from . import _kernels, blas_threads

_ISA_NAMES = _kernels.ISA_NAMES


def compiled_isas():
    """ISAs this build has kernels for, best last."""
    return [name for i, name in enumerate(_ISA_NAMES) if _kernels.isa_compiled(i)]


def available_isas():
    """ISAs compiled in and supported by this CPU and OS, best last."""
    return [name for i, name in enumerate(_ISA_NAMES) if _kernels.isa_available(i)]


def get_isa():
    """The ISA every kernel runs on now."""
    return _ISA_NAMES[_kernels.get_isa()]


def set_isa(name):
    """Runs every kernel on `name` from now on (for tests and benchmarks); errors if unavailable."""
    if name not in _ISA_NAMES:
        raise ValueError(f"isa must be one of {', '.join(_ISA_NAMES)}, got {name!r}")
    if name not in available_isas():
        raise ValueError(f"isa {name!r} is not available here; available: {', '.join(available_isas())}")
    _kernels.set_isa(_ISA_NAMES.index(name))


def get_num_threads():
    """Threads one kernel call may use (small inputs always use one)."""
    return _kernels.get_num_threads()


def set_num_threads(num_threads):
    """Sets the thread budget of every later call; results never depend on it."""
    if isinstance(num_threads, bool) or not isinstance(num_threads, numbers.Integral) or \
            not 1 <= num_threads <= 1024:
        raise ValueError(f"num_threads must be an int from 1 to 1024, got {num_threads!r}")
    _kernels.set_num_threads(int(num_threads))


def config():
    """The build and run-time configuration as a dict."""
    return {
        "version": _kernels.VERSION,
        "compiled_isas": compiled_isas(),
        "available_isas": available_isas(),
        "active_isa": get_isa(),
        "openmp": _kernels.has_openmp(),
        "num_threads": get_num_threads(),
        # The BLAS numpy runs convolutions on, whose threads Session runs decide.
        "blas": blas_threads.blas_library() or "none found",
        "blas_threads": blas_threads.get_blas_threads(),
    }


def show_config():
    """Prints version, compiled ISAs, available ISAs, the active ISA, threads and numpy's BLAS."""
    for key, value in config().items():
        if isinstance(value, list):
            value = ", ".join(value)
        print(f"{key:>15}: {value}")


def _init_from_environment():
    try:
        _kernels.init()
    except ValueError as error:
        raise ImportError(
            f"fqcore: bad environment override FQCORE_ISA={os.environ.get('FQCORE_ISA')!r} "
            f"FQCORE_NUM_THREADS={os.environ.get('FQCORE_NUM_THREADS')!r}: {error}; "
            f"available ISAs: {', '.join(available_isas())}") from None
