"""The asv suite stays runnable: `asv check -E existing` finds every benchmark importable and valid."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_asv_check():
    asv = shutil.which("asv")
    if asv is None:
        if os.environ.get("CI") == "true":
            pytest.fail("asv is not installed; CI must check the benchmarks (pip install -e '.[test]')")
        pytest.skip("asv is not installed")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    subprocess.run([asv, "machine", "--yes"], cwd=ROOT, env=env, capture_output=True, text=True)
    result = subprocess.run([asv, "check", "-E", "existing:" + sys.executable], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
