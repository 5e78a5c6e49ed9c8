"""benchmarks/ops_loop_threads.py measures what its README figure says: its "awake" steps run with
fqcore's workers held awake and its "plain" steps without, and the report has a row per variant
and process."""
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks",
                      "ops_loop_threads.py")


@pytest.mark.parametrize("variant,held", [("plain", 0), ("awake", 1)])
def test_each_variant_holds_the_workers_as_it_says(variant, held):
    out = subprocess.run([sys.executable, SCRIPT, "--variant", variant], check=True,
                         capture_output=True, text=True, timeout=300).stdout.split()
    assert out[0] == variant and len(out) == 4
    best, median = float(out[1]), float(out[2])
    assert 0 < best <= median
    assert int(out[3]) == held


def test_the_report_has_a_row_per_variant_and_process():
    out = subprocess.run([sys.executable, SCRIPT, "--repeats", "1"], check=True,
                         capture_output=True, text=True, timeout=600).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and "ms/step" not in line]
    assert [row.split("|")[1].strip() for row in rows] == ["plain", "awake"]
    assert out.startswith("CPU: ")
