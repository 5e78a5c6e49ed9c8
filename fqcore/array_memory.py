"""Where the memory of numpy's arrays comes from during training: fqcore's block cache
(src_c/common/block_cache.c), installed as numpy's allocator (NEP 49) for a region of code.

A training step makes and frees the same arrays every time. With glibc's default policy, many of
the large ones go back to the system when freed and come back as fresh pages, a page fault per
4 KiB; the cache keeps them for the next array of their size instead. Session.run uses it for every
run; `cached_memory` gives a loop of one's own the same."""
from types import TracebackType
from typing import Optional, Type

from . import _kernels


class cached_memory:
    """A region whose new numpy arrays take their memory from fqcore's block cache.

    Inside the region, numpy (every array made there, by fqcore or by anything else) allocates from
    the cache: a freed block of 16 KiB or more is kept for the next array of its size (or of a
    size down to a quarter of it while it is among the 16 blocks freed last, still in the CPU's
    caches), up to 1 GiB in all, instead of going back to the system. Wrap each training step of a
    loop of :mod:`fqcore` calls in one, and the step reuses the blocks of the step before. Each
    region ends a round of the cache: a size that no region has used for four rounds goes back by
    itself, and :func:`release_cached_memory` gives everything back. A region inside another (a
    ``Session.run`` inside one, say) belongs to the outer one's round.

    The region applies to the thread (the context) that enters it; arrays made inside may live
    on outside it, and free their memory to the cache whenever they go. Numpy's allocator is put
    back on exit, also when the region raises.

    Examples
    --------
    >>> import numpy as np
    >>> import fqcore
    >>> x = np.linspace(-8.0, 8.0, 1 << 16, dtype=np.float32)
    >>> for step in range(3):
    ...     with fqcore.cached_memory():
    ...         y = fqcore.fake_quant_with_min_max_args(x, -6.0, 6.0)
    ...         dx = fqcore.fake_quant_with_min_max_args_gradient(np.ones_like(x), x, -6.0, 6.0)
    >>> round(float(y.max()), 4), float(dx.sum())
    (5.9765, 49151.0)
    """

    def __init__(self) -> None:
        self._previous: Optional[object] = None

    def __enter__(self) -> "cached_memory":
        if self._previous is not None:
            raise RuntimeError("this cached_memory region is already entered; make a new one "
                               "for a region inside it")
        self._previous = _kernels.begin_block_round()
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], error: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        previous, self._previous = self._previous, None
        _kernels.end_block_round(previous)


def release_cached_memory() -> int:
    """Gives back to the system the memory that training steps keep for the next ones.

    The arrays a ``Session.run`` or a :class:`cached_memory` region makes take their memory from
    fqcore's block cache: a freed block of 16 KiB or more is kept for the next array of its size
    (the next step's), up to 1 GiB in all, and a size no run or region has used for four of them
    goes back by itself. Call this when training is over and the memory is wanted elsewhere; later
    steps simply start the cache again.

    Returns
    -------
    int
        The bytes given back.

    Examples
    --------
    >>> import fqcore
    >>> fqcore.release_cached_memory() >= 0
    True
    """
    return _kernels.release_blocks()
