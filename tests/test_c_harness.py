"""Builds and runs the C test binaries of tests/c (fake quantization: test_kernels; batch norm:
test_batch_norm; range observer: test_range; thread pool and CPU budget: test_threads; convolution helpers:
test_conv; a convolution as matrix products: test_conv_products; per-channel chains: test_channel;
matrix product: test_matmul; pow and the momentum update: test_elementwise; memory blocks for
arrays: test_block_cache): natively, under ASan + UBSan, and for aarch64 (NEON) under qemu-user."""
import os
import shutil
import subprocess

import pytest

HARNESS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "c")
BUILD_TIMEOUT = 600
RUN_TIMEOUT = 1800  # the aarch64 run is emulated

# CI must exercise NEON: there, missing cross tools fail the aarch64 test instead of skipping it.
IN_CI = os.environ.get("CI", "").lower() == "true"

# One binary per family; `make native` (aarch64, sanitized) builds all of them.
BINARIES = ["test_kernels", "test_batch_norm", "test_range", "test_threads", "test_conv",
            "test_conv_products", "test_channel", "test_matmul", "test_elementwise",
            "test_block_cache"]


def _missing(*tools):
    return [tool for tool in tools if shutil.which(tool) is None]


def _run(command, timeout):
    """Runs `command` in tests/c with a clean fqcore environment; returns (exit code, output). The
    binaries link their own sanitizer runtimes: a preloaded one (the suite run under a sanitized
    build of the extension) is not passed on."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("FQCORE_ISA", "FQCORE_NUM_THREADS", "MAKEFLAGS", "MFLAGS", "LD_PRELOAD")}
    try:
        proc = subprocess.run(command, cwd=HARNESS_DIR, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace")
        pytest.fail(f"{' '.join(command)} timed out after {timeout} s; output so far:\n{output}")
    return proc.returncode, proc.stdout


def _make_jobs():
    """make's parallel jobs: one per CPU this process may use (the native and sanitized builds took
    234 s as one job, 118 s as two; AMD EPYC, 2 CPUs)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _build_and_run(target, run_command):
    code, output = _run(["make", f"-j{_make_jobs()}", target], BUILD_TIMEOUT)
    assert code == 0, f"`make {target}` in tests/c failed (exit {code}):\n{output}"
    code, output = _run(run_command, RUN_TIMEOUT)
    summary = [line for line in output.splitlines() if line.endswith(" failed") and " passed, " in line]
    assert code == 0, (f"{' '.join(run_command)} exited with {code} "
                       f"({summary[-1] if summary else 'no summary line'}):\n{output}")
    assert summary and summary[-1].endswith(" 0 failed"), f"no clean summary line:\n{output}"
    return output


@pytest.mark.parametrize("binary", BINARIES)
def test_native_kernels_match_scalar(binary):
    missing = _missing("make", "gcc")
    if missing:
        pytest.skip(f"the native C harness needs {', '.join(missing)} on PATH")
    _build_and_run("native", [os.path.join("build", binary)])


@pytest.mark.parametrize("binary", BINARIES)
def test_native_kernels_under_address_and_undefined_behavior_sanitizers(binary):
    """Every ISA of this machine, every size and misaligned start of the harness: no read or write
    out of bounds, no undefined behaviour (both abort the run)."""
    missing = _missing("make", "gcc")
    if missing:
        pytest.skip(f"the sanitized C harness needs {', '.join(missing)} on PATH")
    _build_and_run("sanitized", ["env", "ASAN_OPTIONS=detect_leaks=0",
                                 os.path.join("build", binary + "_sanitized")])


THREADSAN_BINARIES = ["test_threads", "test_range", "test_conv", "test_conv_products",
                      "test_matmul", "test_block_cache"]


@pytest.mark.parametrize("binary", THREADSAN_BINARIES)
def test_thread_pool_has_no_data_race_under_thread_sanitizer(binary):
    """The pool's handover of calls between threads, and the range walk's, the convolution
    helpers' and the matrix product's sharing of work over it, and concurrent callers of the
    memory blocks, under ThreadSanitizer: any data race aborts the run."""
    missing = _missing("make", "gcc")
    if missing:
        pytest.skip(f"the ThreadSanitizer harness needs {', '.join(missing)} on PATH")
    _build_and_run("threadsan", ["env", "TSAN_OPTIONS=halt_on_error=1",
                                 os.path.join("build", binary + "_threadsan")])


@pytest.mark.parametrize("binary", BINARIES)
def test_aarch64_neon_kernels_match_scalar_under_qemu(binary):
    missing = _missing("make", "aarch64-linux-gnu-gcc", "qemu-aarch64")
    if missing:
        reason = (f"the aarch64 C harness needs {', '.join(missing)} on PATH "
                  "(apt-get install gcc-aarch64-linux-gnu qemu-user)")
        if IN_CI:
            pytest.fail(f"CI=true: NEON must be tested, but {reason}")
        pytest.skip(reason)
    # qemu-user cannot fork a multi-threaded process (test_threads.c skips that section).
    output = _build_and_run("aarch64", ["env", "FQ_TEST_NO_FORK=1", "qemu-aarch64",
                                        os.path.join("build", binary + "_aarch64")])
    assert "available: scalar neon" in output, f"NEON was not available under qemu:\n{output}"
