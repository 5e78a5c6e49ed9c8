"""tools/floor_loops.py, whose table the issue notes quote for a target out of reach: it builds its
compute-only loops and reports each op against its numpy floor on every x86 SIMD ISA this CPU runs."""
import os
import re
import shutil
import sys

import pytest

import fqcore

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools import floor_loops  # noqa: E402

SIMD = [isa for isa in ("avx2", "avx512") if isa in fqcore.available_isas()]


@pytest.mark.skipif(not SIMD or shutil.which("cc") is None, reason="needs an x86 SIMD ISA and cc")
def test_every_isa_gets_both_ops_with_positive_times(capsys):
    isa, threads = fqcore.get_isa(), fqcore.get_num_threads()
    try:
        assert floor_loops.main(["--n", "4096"]) == 0
    finally:
        fqcore.set_isa(isa)
        fqcore.set_num_threads(threads)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| avx")]
    assert [row.split(" | ")[0:2] for row in rows] == [[f"| {i}", op] for i in SIMD
                                                      for op in ("args forward", "vars gradient")]
    for row in rows:
        numbers = [float(v) for v in re.findall(r"\d+\.\d+", row)]
        assert len(numbers) == 5 and all(v > 0 for v in numbers)


@pytest.mark.skipif("avx2" not in fqcore.available_isas() or shutil.which("cc") is None,
                    reason="needs AVX2 and cc")
def test_the_batch_norm_table_has_every_case_of_compare_py(capsys):
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
        (fmt, "x".join(map(str, (1,) + shape[1:]))) for fmt, shape in CASES]
    for row in rows:
        numbers = [float(v) for v in re.findall(r"\d+\.\d+", " | ".join(row[2:]))]
        assert len(numbers) == 5 and all(v > 0 for v in numbers)
        assert numbers[2] == pytest.approx(numbers[1] / numbers[0], rel=0.02)
