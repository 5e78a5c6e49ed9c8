"""tools/floor_loops.py, whose table the issue notes quote for a target out of reach: it builds its
compute-only loops and reports each op against its numpy floor on every x86 SIMD ISA this CPU runs."""
import os
import re
import shutil
import sys
import tempfile

import pytest

import fqcore

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools import floor_loops  # noqa: E402

SIMD = [isa for isa in ("avx2", "avx512") if isa in fqcore.available_isas()]


@pytest.mark.skipif(not SIMD or shutil.which("cc") is None, reason="needs an x86 SIMD ISA and cc")
def test_every_isa_gets_both_ops_with_positive_times(capsys):
    isa, threads = fqcore.get_isa(), fqcore.get_num_threads()
    try:
        # Large enough that each loop takes well over the ctypes call subtracted from it.
        assert floor_loops.main(["--n", "32768"]) == 0
    finally:
        fqcore.set_isa(isa)
        fqcore.set_num_threads(threads)
    compute, rest = capsys.readouterr().out.split("\nVars gradient, one thread")
    walks, channel = rest.split("Per-channel (Vars) gradient")
    rows = [line for line in compute.splitlines() if line.startswith("| avx")]
    assert [row.split(" | ")[0:2] for row in rows] == [[f"| {i}", op] for i in SIMD
                                                      for op in ("args forward", "vars gradient")]
    for row in rows:
        numbers = [float(v) for v in re.findall(r"\d+\.\d+", row)]
        assert len(numbers) == 7 and all(v > 0 for v in numbers)
        for time in (1, 3, 5):  # each time beside its ratio to the memory floor
            assert numbers[time + 1] == pytest.approx(numbers[time] / numbers[0], rel=0.02)
    for table in (walks, channel):
        rows = [line for line in table.splitlines() if line.startswith("| avx")]
        assert [row.split(" | ")[0] for row in rows] == [f"| {i}" for i in SIMD]
        for row in rows:
            numbers = [float(v) for v in re.findall(r"\d+\.\d+", row)]
            assert len(numbers) == 9 and all(v > 0 for v in numbers)
            for time in (1, 3, 5, 7):  # each time beside its ratio to np.add
                assert numbers[time + 1] == pytest.approx(numbers[time] / numbers[0], rel=0.02)


@pytest.mark.skipif(not SIMD or shutil.which("cc") is None, reason="needs an x86 SIMD ISA and cc")
def test_the_per_channel_streams_loop_writes_the_gradient_it_times():
    """The floor is only one if the loop does the work: dx = g where x is in [-6, 6], else 0, on
    every position of every strip (a strip skipped or a row cut short leaves other values), with
    its groups' tests or without."""
    import numpy as np
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(16 * floor_loops.CHANNEL_PERIOD) * 4).astype(np.float32)
    g = rng.standard_normal(x.size).astype(np.float32)
    lo = np.full(floor_loops.CHANNEL_PERIOD, -6.0, np.float32)
    hi = np.full(floor_loops.CHANNEL_PERIOD, 6.0, np.float32)
    with tempfile.TemporaryDirectory() as directory:
        lib = floor_loops.build_library(directory)
        for name in (f"channel_grad_streams_{kind}{isa}" for isa in SIMD for kind in ("", "tested_")):
            dx = np.full_like(x, np.nan)
            floor_loops.channel_streams(lib, name)(x.ctypes.data, g.ctypes.data, dx.ctypes.data,
                                                   x.size, lo.ctypes.data, hi.ctypes.data,
                                                   floor_loops.CHANNEL_PERIOD)
            np.testing.assert_array_equal(dx, g * ((x >= -6.0) & (x <= 6.0)), err_msg=name)


@pytest.mark.skipif(not SIMD or shutil.which("cc") is None, reason="needs an x86 SIMD ISA and cc")
def test_the_args_forward_loop_with_memory_writes_what_it_times():
    """Its loads and stores are only the kernel's if every vector is read and written, through the
    eight operations (a step skipped or an operation left out writes other values)."""
    import numpy as np
    x = (np.random.default_rng(4).standard_normal(4096) * 4).astype(np.float32)
    with tempfile.TemporaryDirectory() as directory:
        lib = floor_loops.build_library(directory)
        for isa in SIMD:
            out = np.full_like(x, np.nan)
            floor_loops.args_streams(lib, isa)(x.ctypes.data, out.ctypes.data, x.size)
            np.testing.assert_array_equal(out, floor_loops.args_forward_model(x), err_msg=isa)


def test_n_must_be_a_multiple_of_the_channel_period(capsys):
    with pytest.raises(SystemExit):
        floor_loops.main(["--n", "100"])
    assert "--n must be a positive multiple of 128, got 100" in capsys.readouterr().err


@pytest.mark.skipif(not SIMD or shutil.which("cc") is None, reason="needs an x86 SIMD ISA and cc")
def test_the_batch_norm_table_has_every_channels_last_case_of_compare_py(capsys):
    from benchmarks.compare_batch_norm import CASES
    isa, threads = fqcore.get_isa(), fqcore.get_num_threads()
    try:
        assert floor_loops.main(["--n", "4096", "--batch-norm", "--bn-batch", "1"]) == 0
    finally:
        fqcore.set_isa(isa)
        fqcore.set_num_threads(threads)
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()
            if line.startswith(("| NHWC", "| NCHW", "| NDHWC", "| NCDHW"))]
    assert [(row[0][2:], row[1]) for row in rows] == [
        (fmt, "x".join(map(str, (1,) + shape[1:]))) for fmt, shape in CASES if fmt.endswith("C")]
    for row in rows:
        add, pass_1, plain, streamed, passes_ratio, kernel, kernel_ratio, kernel_passes = (
            float(v) for v in re.findall(r"\d+(?:\.\d+)?", " | ".join(row[2:9])))
        assert min(add, pass_1, plain, streamed, kernel) > 0
        passes = min(plain, streamed)
        # Times print to 0.1 us: at batch 1 (5 us and more) ratios of them agree to 3%.
        assert passes_ratio == pytest.approx(passes / add, rel=0.03)
        assert kernel_ratio == pytest.approx(kernel / add, rel=0.03)
        assert kernel_passes == pytest.approx(kernel / passes, rel=0.03)


@pytest.mark.skipif(not SIMD or shutil.which("cc") is None, reason="needs an x86 SIMD ISA and cc")
def test_the_batch_norm_loops_sum_and_write_what_they_time():
    """Pass 1 sums dy and dy * x per channel over every row; the two passes write
    dx = dy * sum(dy) + x * sum(dy * x) on every element of every item, last item first, with
    plain or streamed stores (an item, a row or a channel skipped leaves NaN or other values)."""
    import numpy as np
    rng = np.random.default_rng(5)
    rows, channels, item_rows = 37, 48, 8  # a short last item
    x = rng.standard_normal((rows, channels)).astype(np.float32)
    dy = rng.standard_normal((rows, channels)).astype(np.float32)
    sum_dy, sum_dy_x = dy.astype(np.float64).sum(0), (dy.astype(np.float64) * x).sum(0)
    with tempfile.TemporaryDirectory() as directory:
        lib = floor_loops.build_library(directory)
        for isa in SIMD:
            sums_loop, passes_loop = floor_loops.batch_norm_loops(lib, isa)
            sums = np.full(4 * channels, np.nan, np.float32)
            sums_loop(x.ctypes.data, dy.ctypes.data, rows, channels, sums.ctypes.data)
            np.testing.assert_allclose(sums[:channels], sum_dy, rtol=1e-5, atol=1e-4, err_msg=isa)
            np.testing.assert_allclose(sums[channels:2 * channels], sum_dy_x, rtol=1e-5, atol=1e-4,
                                       err_msg=isa)
            for stream in (0, 1):
                dx = floor_loops.placed_arrays((rows, channels), 1)[0]  # aligned for streaming
                dx[...] = np.nan
                passes_loop(x.ctypes.data, dy.ctypes.data, dx.ctypes.data, rows, channels,
                            sums.ctypes.data, item_rows, stream)
                np.testing.assert_allclose(dx, dy * sum_dy + x * sum_dy_x, rtol=1e-4, atol=1e-3,
                                           err_msg=f"{isa}, stream={stream}")
