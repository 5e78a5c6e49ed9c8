"""numpy's BLAS thread count, read and set through the BLAS library's own C functions (OpenBLAS
under any of the symbol names numpy's and SciPy's wheels give it, MKL, BLIS), found among the
shared libraries this process has loaded (threadpoolctl's list when it is installed, else
/proc/self/maps). Without a BLAS fqcore can find, both functions report and change nothing."""
import ctypes
import os

# (get, set) C function names, by library family, in the order tried.
_API = (
    ("openblas", [("openblas_get_num_threads", "openblas_set_num_threads"),
                  ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                  ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
                  ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_")]),
    ("mkl", [("MKL_Get_Max_Threads", "MKL_Set_Num_Threads")]),
    ("blis", [("bli_thread_get_num_threads", "bli_thread_set_num_threads")]),
)

_found = None


class _Library:
    def __init__(self, path, get, set_):
        self.path = path
        self.get = get
        self.set = set_


def _candidate_paths():
    try:
        import threadpoolctl
        return [info["filepath"] for info in threadpoolctl.threadpool_info()
                if info.get("user_api") == "blas"]
    except ImportError:
        pass
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps if len(line.split()) >= 6}
    except OSError:
        return []
    return sorted(p for p in paths if ".so" in os.path.basename(p) and any(
        family in os.path.basename(p).lower() for family, _ in _API))


def _bind(path):
    try:
        library = ctypes.CDLL(path)
    except OSError:
        return None
    for _, names in _API:
        for get_name, set_name in names:
            get, set_ = getattr(library, get_name, None), getattr(library, set_name, None)
            if get is not None and set_ is not None:
                get.restype, get.argtypes = ctypes.c_int, []
                set_.restype, set_.argtypes = None, [ctypes.c_int]
                return _Library(path, get, set_)
    return None


def _libraries():
    """The BLAS libraries in this process (numpy's first: it is imported by fqcore)."""
    global _found
    if _found is None:
        _found = [lib for lib in map(_bind, _candidate_paths()) if lib is not None]
    return _found


def blas_library():
    """The path of the BLAS library whose threads fqcore controls, or None."""
    libraries = _libraries()
    return libraries[0].path if libraries else None


def get_blas_threads():
    """How many threads numpy's BLAS uses, or None when fqcore finds no BLAS to ask."""
    libraries = _libraries()
    return int(libraries[0].get()) if libraries else None


def set_blas_threads(threads):
    """Makes every BLAS found use `threads` threads (an int from 1 to 1024)."""
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024:
        raise ValueError(f"threads must be an int from 1 to 1024, got {threads!r}")
    for library in _libraries():
        library.set(threads)
