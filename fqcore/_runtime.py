"""ISA and thread controls of the C library: show_config, available_isas, get/set_isa, threads."""
import json
import numbers
import os
from typing import Any, Dict, List, Union

from . import _kernels, blas_threads

_ISA_NAMES = _kernels.ISA_NAMES
_BUILD = json.loads(_kernels.BUILD_INFO)


def compiled_isas() -> List[str]:
    """The ISAs this build has kernels for, best last.

    Returns
    -------
    list of str
        Names from ``scalar``, ``avx2``, ``avx512``, ``neon``; ``scalar`` always first.

    Examples
    --------
    >>> import fqcore
    >>> fqcore.compiled_isas()[0]
    'scalar'
    """
    return [name for i, name in enumerate(_ISA_NAMES) if _kernels.isa_compiled(i)]


def available_isas() -> List[str]:
    """The ISAs compiled in and supported by this CPU and OS, best last.

    Returns
    -------
    list of str
        A subset of :func:`compiled_isas`, ``scalar`` first.

    Examples
    --------
    >>> import fqcore
    >>> isas = fqcore.available_isas()
    >>> isas[0], set(isas) <= set(fqcore.compiled_isas())
    ('scalar', True)
    """
    return [name for i, name in enumerate(_ISA_NAMES) if _kernels.isa_available(i)]


def get_isa() -> str:
    """The ISA every kernel runs on now.

    At import it is the best available one, or ``FQCORE_ISA``'s.

    Returns
    -------
    str
        One of :func:`available_isas`.

    Examples
    --------
    >>> import fqcore
    >>> fqcore.get_isa() in fqcore.available_isas()
    True
    """
    return _ISA_NAMES[_kernels.get_isa()]


def set_isa(name: str) -> None:
    """Runs every kernel on one ISA from now on (for tests and benchmarks).

    Results are the same bits on every ISA; only the speed differs.

    Parameters
    ----------
    name : str
        One of :func:`available_isas`.

    Raises
    ------
    ValueError
        An unknown ISA name, or one this build or CPU lacks (never a silent fallback).

    Examples
    --------
    >>> import fqcore
    >>> previous = fqcore.get_isa()
    >>> fqcore.set_isa("scalar")
    >>> fqcore.get_isa()
    'scalar'
    >>> fqcore.set_isa(previous)
    """
    if name not in _ISA_NAMES:
        raise ValueError(f"isa must be one of {', '.join(_ISA_NAMES)}, got {name!r}")
    if name not in available_isas():
        raise ValueError(f"isa {name!r} is not available here; available: {', '.join(available_isas())}")
    _kernels.set_isa(_ISA_NAMES.index(name))


def get_num_threads() -> Union[str, int]:
    """The thread setting of kernel calls.

    Returns
    -------
    str or int
        ``"auto"`` (the default) or the fixed count set; ``set_num_threads(get_num_threads())``
        restores a setting.

    Examples
    --------
    >>> import fqcore
    >>> setting = fqcore.get_num_threads()
    >>> setting == "auto" or setting >= 1
    True
    """
    threads = _kernels.get_num_threads()
    return "auto" if threads == 0 else threads


def set_num_threads(num_threads: Union[str, int]) -> None:
    """Sets the threads of every later kernel call; results never depend on it.

    Parameters
    ----------
    num_threads : "auto" or int
        ``"auto"`` (the default) lets each call choose from its size and the machine: the CPUs
        this process may use that other processes leave free, one thread while workers come
        late, one below 64K elements. An int from 1 to 1024 fixes the count of every call of 64K
        elements or more; its threads start now.

    Raises
    ------
    ValueError
        Anything else.
    RuntimeError
        The system refused the threads; the previous setting is kept.

    Examples
    --------
    >>> import fqcore
    >>> previous = fqcore.get_num_threads()
    >>> fqcore.set_num_threads(1)
    >>> fqcore.get_num_threads()
    1
    >>> fqcore.set_num_threads(previous)
    """
    if isinstance(num_threads, str) and num_threads.strip().lower() == "auto":
        _kernels.set_num_threads(0)
        return
    if isinstance(num_threads, bool) or not isinstance(num_threads, numbers.Integral) or \
            not 1 <= num_threads <= 1024:
        raise ValueError(f"num_threads must be 'auto' or an int from 1 to 1024, got {num_threads!r}")
    try:
        _kernels.set_num_threads(int(num_threads))
    except RuntimeError as error:
        raise RuntimeError(f"set_num_threads({int(num_threads)}): {error}; the setting stays "
                           f"{get_num_threads()!r}") from None


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, lowered to a cgroup CPU quota.

    Returns
    -------
    int
        At least 1.

    Examples
    --------
    >>> import fqcore
    >>> fqcore.usable_cpus() >= 1
    True
    """
    return _kernels.usable_cpus()


def other_cpu_load() -> float:
    """How many of this process's CPUs other processes kept busy lately.

    Returns
    -------
    float
        In cores, from ``/proc/stat`` less this process's own time (Linux; 0.0 elsewhere).

    Examples
    --------
    >>> import fqcore
    >>> 0.0 <= fqcore.other_cpu_load() <= fqcore.usable_cpus()
    True
    """
    return _kernels.other_cpu_load()


def free_cpus() -> int:
    """The CPUs worth a thread now.

    ``"auto"`` gives kernel calls, and Session runs give BLAS, this many.

    Returns
    -------
    int
        The usable CPUs less those other processes keep at least half busy; at least 1.

    Examples
    --------
    >>> import fqcore
    >>> 1 <= fqcore.free_cpus() <= fqcore.usable_cpus()
    True
    """
    return _kernels.free_cpus()


class workers_awake:
    """A region in which fqcore's idle threads wait awake for the next kernel call.

    A call of 64K elements or more may share its work with fqcore's own worker threads. Between
    calls an idle worker looks for the next one for about twice the recent gap between calls
    (20-250 us), then sleeps, and the call after a longer gap pays for waking it: tens of
    microseconds on a virtual machine, and its first items run without the worker. Inside the
    region a worker looks for 2 ms, as it does inside ``Session.run`` when BLAS runs on one
    thread: wrap a training step of your own loop of fqcore calls in one.

    Use it only where no other thread pool of the process runs between the calls (numpy's BLAS
    on more than one thread, another framework's): a worker spinning on a core that such a pool
    needs slows it down. Regions nest, also across threads; the workers go back to the short
    wait when the last one ends, also when it raises.

    Examples
    --------
    >>> import numpy as np
    >>> import fqcore
    >>> x = np.linspace(-8.0, 8.0, 1 << 18, dtype=np.float32)
    >>> with fqcore.workers_awake():
    ...     y = fqcore.fake_quant_with_min_max_args(x, -6.0, 6.0)
    ...     dx = fqcore.fake_quant_with_min_max_args_gradient(np.ones_like(x), x, -6.0, 6.0)
    >>> float(dx.sum())
    196607.0
    """

    def __init__(self) -> None:
        self._entered = False

    def __enter__(self) -> "workers_awake":
        if self._entered:
            raise RuntimeError("this workers_awake region is already entered; make a new one for "
                               "a region inside it")
        _kernels.keep_workers_awake(True)
        self._entered = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._entered = False
        _kernels.keep_workers_awake(False)


def own_matrix_products() -> bool:
    """Whether the graph's float32 convolutions multiply on fqcore's kernel (fq_f32_matmul), not
    numpy's BLAS: on the AVX-512 and AVX2 paths, where the training steps measured faster with
    it (fqcore/graph/nn_numpy.py); the scalar kernel is a reference, and NEON's is not timed."""
    return _kernels.own_matrix_products()


def config() -> Dict[str, Any]:
    """The build and run-time configuration as a dict (what :func:`fqcore.show_config` prints)."""
    return {
        "version": _kernels.VERSION,
        "compiled_isas": compiled_isas(),
        # What setup.py's probes left out and why: a compiler without the ISA, another target,
        # FQCORE_DISABLE_<ISA>=1.
        "isas_not_built": [f"{isa} ({why})" for isa, why in _BUILD["isas_not_built"].items()],
        "available_isas": available_isas(),
        "active_isa": get_isa(),
        # Walks whose speed depends on the microarchitecture, chosen at run time for this CPU.
        "kernel_choices": _kernels.kernel_choices(),
        "num_threads": get_num_threads(),
        "usable_cpus": usable_cpus(),
        "other_cpu_load": round(other_cpu_load(), 2),
        # Who multiplies the graph's convolutions: fqcore's kernel or numpy's BLAS.
        "convolution_products": "fqcore" if own_matrix_products() else "blas",
        # numpy's BLAS (MatMul, and the convolutions' products on other paths), whose threads
        # Session runs decide.
        "blas": blas_threads.blas_library() or "none found",
        "blas_threads": blas_threads.get_blas_threads(),
        "compiler": _BUILD["compiler"],
        "kernel_flags": _BUILD["kernel_flags"],
        "linker": _BUILD["linker"],
    }


def show_config() -> None:
    """Prints the build and run-time configuration, one ``key: value`` line each.

    The version, compiled ISAs (and those not built, and why), available ISAs, the active ISA,
    the kernel walks chosen for this CPU, threads, usable CPUs and other processes' load, who
    multiplies the graph's convolutions, numpy's BLAS and its threads, and the
    compiler and flags of the build.

    Examples
    --------
    >>> import fqcore
    >>> fqcore.show_config()  # doctest: +ELLIPSIS
            version: ...
      compiled_isas: scalar...
    """
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
