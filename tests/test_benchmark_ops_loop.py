"""benchmarks/ops_loop_memory.py measures what its README figure says: a loop of fqcore calls whose
steps run in fqcore.cached_memory regions takes no page fault once warm, and the report has a row
per variant and process."""
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks",
                      "ops_loop_memory.py")


def _child(variant):
    out = subprocess.run([sys.executable, SCRIPT, "--variant", variant], check=True,
                         capture_output=True, text=True, timeout=300).stdout.split()
    assert out[0] == variant and len(out) == 4
    return float(out[1]), float(out[2]), float(out[3])


def test_steps_in_cached_regions_take_no_page_faults():
    best, median, faults = _child("cached")
    assert 0 < best <= median
    assert faults < 10, f"{faults} page faults a step inside cached_memory regions"
