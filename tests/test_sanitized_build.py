"""Builds fqcore._kernels with AddressSanitizer + UndefinedBehaviorSanitizer as the README's recipe
does, in a copy of the sources, and runs a fast subset of the tests against it: the build keeps
every ISA of the normal one, and no test makes a sanitizer report."""
import json
import os
import subprocess
import sys

import pytest

import fqcore
from build_helpers import (ROOT, SANITIZE, SANITIZED_BUILD_ENV, clean_env, copy_sources, run_setup,
                           sanitizer_runtimes_or_skip)

BUILD_TIMEOUT = 900
RUN_TIMEOUT = 900

# Every kernel family on every ISA of this machine, their validation, and the range observer: about
# 30 s under the sanitizers.
SUBSET = ["test_isa_equivalence.py", "test_bn_isa_equivalence.py", "test_validation.py",
          "test_range.py"]

# Any report stops the process with an error exit: no recovery, no leak reports (Python does not
# free everything at exit).
RUN_ENV = {"ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}

# Imports fqcore from the copy (a test run against the developer's build would prove nothing), then
# runs pytest in the same process, or prints the ISAs and the compiler of the build.
_RUN = """
import json, sys
import fqcore, fqcore._kernels
if not fqcore._kernels.__file__.startswith(sys.argv[1]):
    sys.exit("imported " + fqcore._kernels.__file__ + ", not the sanitized build")
if len(sys.argv) > 2:
    import pytest
    sys.exit(pytest.main(sys.argv[2:]))
print(json.dumps(fqcore.compiled_isas()))
print(fqcore._runtime.config()["compiler"])
"""


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory):
    """The copy's directory and the environment that runs Python on its sanitized build."""
    runtimes = sanitizer_runtimes_or_skip()
    dest = str(tmp_path_factory.mktemp("fqcore-sanitized"))
    copy_sources(dest)
    # A build that would leave out an ISA of the normal build fails, naming the reason.
    required = ",".join(isa for isa in fqcore.compiled_isas() if isa != "scalar")
    env = clean_env(FQCORE_REQUIRE_ISA=required, **SANITIZED_BUILD_ENV)
    code, output = run_setup(dest, env, BUILD_TIMEOUT, "--inplace",
                           f"--parallel={os.cpu_count() or 1}")
    assert code == 0, f"the sanitized build failed (exit {code}):\n{output}"
    return dest, clean_env(PYTHONPATH=dest, LD_PRELOAD=":".join(runtimes), **RUN_ENV)


def _python_on(sanitized, *pytest_args):
    dest, env = sanitized
    proc = subprocess.run([sys.executable, "-c", _RUN, dest, *pytest_args], cwd=dest, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=RUN_TIMEOUT)
    return proc.returncode, proc.stdout


def test_sanitized_build_keeps_every_isa(sanitized):
    code, output = _python_on(sanitized)
    lines = output.splitlines()
    assert lines and lines[0].startswith("["), output
    assert json.loads(lines[0]) == fqcore.compiled_isas(), output
    assert code == 0 and SANITIZE in lines[1].split(), output


def test_fast_subset_runs_clean_under_the_sanitizers(sanitized):
    paths = [os.path.join(ROOT, "tests", name) for name in SUBSET]
    code, output = _python_on(sanitized, "-q", "-p", "no:cacheprovider",
                              "--hypothesis-profile=ci", *paths)
    reports = [line for line in output.splitlines()
               if "Sanitizer" in line or "runtime error:" in line]
    assert not reports, "sanitizer reports:\n" + "\n".join(reports) + "\n\n" + output[-20000:]
    assert code == 0, f"the tests failed on the sanitized build (exit {code}):\n{output[-20000:]}"
