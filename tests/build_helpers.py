"""Helpers of the tests that run setup.py: a copy of the sources to build in, a clean environment,
gcc's sanitizer runtimes."""
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# CI must exercise the sanitized build: there, a missing gcc or sanitizer runtime fails instead of
# skipping.
IN_CI = os.environ.get("CI", "").lower() == "true"

# The README's sanitizer recipe.
SANITIZE = "-fsanitize=address,undefined"
SANITIZED_BUILD_ENV = {
    "CC": "gcc",
    "CFLAGS": f"-O1 -g {SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer",
    "LDFLAGS": SANITIZE,
}

# Settings of the caller's shell that would change what a build or a test run does.
_NOT_INHERITED = ("CC", "CFLAGS", "CPPFLAGS", "LDFLAGS", "LDSHARED", "LD_PRELOAD", "PYTHONPATH",
                  "ASAN_OPTIONS", "UBSAN_OPTIONS", "MAKEFLAGS", "MFLAGS")


def clean_env(**settings):
    """This process's environment without fqcore's settings or compiler flags, plus `settings`."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("FQCORE_") and key not in _NOT_INHERITED}
    env.update(settings)
    return env


def copy_sources(dest):
    """setup.py, src_c and the package into `dest`, without the built extension, so that a build
    there leaves the developer's in-place one alone. The Cython output keeps its time stamp, so an
    up-to-date one is not generated again."""
    shutil.copy2(os.path.join(ROOT, "setup.py"), dest)
    shutil.copytree(os.path.join(ROOT, "src_c"), os.path.join(dest, "src_c"))
    shutil.copytree(os.path.join(ROOT, "fqcore"), os.path.join(dest, "fqcore"),
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))


def run_setup(cwd, env, timeout, *args):
    """`python setup.py build_ext <args>` in `cwd`: (exit code, output). Skips without the build
    requirements (fails in CI)."""
    missing = [name for name in ("setuptools", "Cython") if importlib.util.find_spec(name) is None]
    if missing:
        reason = f"running setup.py needs {' and '.join(missing)} (pip install -e \".[test]\")"
        if IN_CI:
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    proc = subprocess.run([sys.executable, "setup.py", "build_ext", *args], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout


def sanitizer_runtimes_or_skip():
    """gcc's ASan and UBSan runtimes, to preload into Python; skips without them (fails in CI)."""
    if shutil.which("gcc") is None:
        reason = "needs gcc on PATH"
    else:
        paths = [subprocess.run(["gcc", f"-print-file-name={lib}"], stdout=subprocess.PIPE,
                                text=True).stdout.strip() for lib in ("libasan.so", "libubsan.so")]
        # gcc prints the bare name back when it has no such library.
        missing = [os.path.basename(path) for path in paths if not os.path.isabs(path)]
        if not missing:
            return paths
        reason = f"needs gcc's {' and '.join(missing)}"
    if IN_CI:
        pytest.fail(f"CI=true: the sanitized build must be tested, but it {reason}")
    pytest.skip(f"the sanitized build {reason}")
