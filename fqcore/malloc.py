"""Process-wide glibc malloc tuning for numpy-heavy loops (opt-in: the library never calls it)."""
import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def keep_freed_memory():
    """Has glibc keep freed memory for reuse instead of returning it to the OS. A numpy training
    loop allocates and frees the same arrays every time; with glibc's default policy many of them
    come back as fresh pages, a page fault each. Session.run needs none of it (its arrays come from
    fqcore's block cache); a loop of fqcore.ops calls does. Returns a sentence saying which policy
    is in force."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "glibc's default policy (mallopt unavailable)"
    if mallopt(_M_MMAP_MAX, 0) != 1 or mallopt(_M_TRIM_THRESHOLD, 1 << 30) != 1:
        return "glibc's default policy (mallopt refused)"
    return "glibc keeps freed memory (mallopt M_MMAP_MAX=0, M_TRIM_THRESHOLD=1 GiB): arrays reuse pages"
