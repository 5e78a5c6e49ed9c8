"""Arrays placed so that no two of a benchmark's operands start at the same offset in a 4 KiB page.

A load whose address matches a store still in flight in its low 12 bits waits for that store on
x86 ("4K aliasing"), whether or not the two addresses are the same. numpy's allocator puts arrays
allocated one after another at offsets a few bytes apart (glibc's 16-byte headers), and then
np.add(a, b, out=c) on 64K floats takes twice its time: Intel Xeon (Sapphire Rapids class), one
thread, 13.3 us with the operands 16 bytes apart against 6.6-7.1 us with them 1 KiB apart (or all
at the same offset); np.multiply 7.5 against 5.7-6.1 us. Which of the two a run got depended on
what had been allocated before, so the memory floor of benchmarks/compare.py's table 1 moved by
2x from one run to the next. Spread evenly over the page, every candidate (numpy, fqcore) meets
the same placement, one that costs neither."""
import numpy as np

PAGE = 4096


def spread_over_page(count):
    """Byte offsets past a 4 KiB boundary for `count` operands, evenly apart and 64-byte aligned."""
    step = PAGE // count // 64 * 64
    return [k * step for k in range(count)]


def placed_arrays(shape, count, dtype=np.float32):
    """`count` zeroed C-contiguous arrays of `shape` and `dtype`, the k-th starting at the k-th
    offset of spread_over_page(count)."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape))
    arrays = []
    for offset in spread_over_page(count):
        buffer = np.zeros(size * dtype.itemsize + 2 * PAGE, np.uint8)
        start = (-buffer.ctypes.data) % PAGE + offset
        arrays.append(buffer[start:start + size * dtype.itemsize].view(dtype).reshape(shape))
    return arrays
