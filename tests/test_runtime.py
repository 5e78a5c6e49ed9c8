"""ISA and thread controls: show_config, set_isa / set_num_threads, FQCORE_ISA / FQCORE_NUM_THREADS."""
import os
import subprocess
import sys

import numpy as np
import pytest

import fqcore


def _python(code, **env):
    full_env = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env)


def test_show_config_lists_everything(capsys):
    fqcore.show_config()
    text = capsys.readouterr().out
    for key in ("version", "compiled_isas", "available_isas", "active_isa", "kernel_choices",
                "num_threads", "usable_cpus", "other_cpu_load", "convolution_products", "blas",
                "blas_threads"):
        assert key in text
    assert fqcore.get_isa() in text


def test_convolution_products_follow_the_active_isa():
    from fqcore._runtime import config
    saved = fqcore.get_isa()
    try:
        for isa in fqcore.available_isas():
            fqcore.set_isa(isa)
            expected = "fqcore" if isa in ("avx512", "avx2") else "blas"
            assert config()["convolution_products"] == expected
    finally:
        fqcore.set_isa(saved)


def test_kernel_choices_follow_the_active_isa():
    from fqcore._runtime import config
    saved = fqcore.get_isa()
    try:
        for isa in fqcore.available_isas():
            fqcore.set_isa(isa)
            choices = config()["kernel_choices"]
            if isa == "scalar":
                assert choices == "scalar kernels: no choices"
            else:
                assert choices.startswith("per-channel forward: rows sharing grid loads")
                strips = "strips in L2" if isa == "avx2" else "no strips"
                assert f"; per-channel gradient: {strips}; " in choices
                assert ("; its groups in L2: loud vectors alone;" in choices
                        or "; its groups in L2: every vector if one is loud;" in choices)
                assert ("; batch-norm channels-first gradient: blocks of channels;" in choices
                        or "; batch-norm channels-first gradient: two passes;" in choices)
                # AVX-512 keeps the FMA subtractions on every CPU; AVX2 takes them on AMD's Zens.
                pipes = (("subtractions on the FMAs",) if isa == "avx512"
                         else ("plain subtractions", "subtractions on the FMAs"))
                assert choices.endswith(tuple(f"; Args forward: {p}" for p in pipes))
    finally:
        fqcore.set_isa(saved)


def test_available_isas_start_with_scalar_and_are_compiled():
    available = fqcore.available_isas()
    assert available[0] == "scalar"
    assert set(available) <= set(fqcore.compiled_isas())


def test_default_isa_is_the_best_available():
    result = _python("import fqcore; print(fqcore.get_isa(), fqcore.available_isas()[-1])", FQCORE_ISA="")
    active, best = result.stdout.split()
    assert active == best


def test_set_isa_round_trip_and_errors():
    previous = fqcore.get_isa()
    try:
        for name in fqcore.available_isas():
            fqcore.set_isa(name)
            assert fqcore.get_isa() == name
        with pytest.raises(ValueError, match="isa must be one of"):
            fqcore.set_isa("sse9")
        missing = [n for n in ("scalar", "avx2", "avx512", "neon") if n not in fqcore.available_isas()]
        for name in missing:
            with pytest.raises(ValueError, match=f"isa '{name}' is not available here"):
                fqcore.set_isa(name)
    finally:
        fqcore.set_isa(previous)


def test_environment_isa_override():
    result = _python("import fqcore; print(fqcore.get_isa())", FQCORE_ISA="scalar")
    assert result.stdout.strip() == "scalar"


@pytest.mark.parametrize("value", ["sse9", "NEON "])
def test_bad_environment_isa_is_an_import_error(value):
    result = _python("import fqcore", FQCORE_ISA=value)
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "FQCORE_ISA" in result.stderr


def test_unavailable_environment_isa_is_an_import_error():
    missing = [n for n in ("avx2", "avx512", "neon") if n not in fqcore.available_isas()]
    if not missing:
        pytest.skip("every ISA is available on this machine")
    result = _python("import fqcore", FQCORE_ISA=missing[0])
    assert result.returncode != 0 and "not available" in result.stderr


def test_environment_threads():
    assert _python("import fqcore; print(fqcore.get_num_threads())", FQCORE_NUM_THREADS="3").stdout.strip() == "3"
    for auto in ("auto", ""):
        assert _python("import fqcore; print(fqcore.get_num_threads())",
                       FQCORE_NUM_THREADS=auto).stdout.strip() == "auto"
    bad = _python("import fqcore", FQCORE_NUM_THREADS="zero")
    assert bad.returncode != 0 and "FQCORE_NUM_THREADS" in bad.stderr


@pytest.mark.parametrize("value", [0, -1, 1025, 2.0, "2", "automatic", True, None])
def test_set_num_threads_rejects(value):
    with pytest.raises(ValueError, match="num_threads must be 'auto' or an int from 1 to 1024"):
        fqcore.set_num_threads(value)


def test_set_num_threads_round_trip():
    previous = fqcore.get_num_threads()
    try:
        fqcore.set_num_threads(3)
        assert fqcore.get_num_threads() == 3
        fqcore.set_num_threads(np.int64(2))  # numpy ints, as num_bits takes them
        assert fqcore.get_num_threads() == 2
        fqcore.set_num_threads("auto")
        assert fqcore.get_num_threads() == "auto"
        fqcore.set_num_threads(" AUTO ")
        assert fqcore.get_num_threads() == "auto"
    finally:
        fqcore.set_num_threads(previous)


def test_workers_awake_holds_the_pool_for_its_region():
    """Each region holds fqcore's idle workers awake (fq_keep_workers_awake, whose effect on the
    pool tests/c/test_threads.c checks) from its start to its end, also when it raises; regions
    nest; one region cannot be entered twice at once."""
    from fqcore import _kernels
    before = _kernels.workers_kept_awake()
    outer, inner = fqcore.workers_awake(), fqcore.workers_awake()
    with outer as entered:
        assert entered is outer and _kernels.workers_kept_awake() == before + 1
        with inner:
            assert _kernels.workers_kept_awake() == before + 2
        with pytest.raises(RuntimeError, match="already entered"):
            with outer:
                pass
        assert _kernels.workers_kept_awake() == before + 1
    assert _kernels.workers_kept_awake() == before
    with pytest.raises(ZeroDivisionError):
        with fqcore.workers_awake():
            1 / 0
    assert _kernels.workers_kept_awake() == before
    with outer:  # a region that ended can be entered again
        assert _kernels.workers_kept_awake() == before + 1
    assert _kernels.workers_kept_awake() == before


def test_the_default_is_auto():
    assert _python("import fqcore; print(fqcore.get_num_threads())",
                   FQCORE_NUM_THREADS="").stdout.strip() == "auto"


# Under an address-space limit, a fixed count the system cannot give is a Python exception that
# keeps the previous setting, and calls still give the right results (on fewer threads).
_THREADS_UNDER_LIMIT = """
import resource, numpy as np, fqcore
x = np.random.default_rng(0).normal(size=1 << 20).astype(np.float32)
expected = fqcore.fake_quant_with_min_max_vars(x, -3.0, 3.0)
outs = [np.empty_like(x) for _ in range(3)]
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
def threads():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("Threads:"))
before = threads()
resource.setrlimit(resource.RLIMIT_AS, (used + (64 << 20), hard))
try:
    fqcore.set_num_threads(1024)
    outcome = "set"
except RuntimeError as error:
    outcome = "refused: " + str(error)
for out in outs:
    fqcore.fake_quant_with_min_max_vars(x, -3.0, 3.0, out=out)
print(outcome)
print(threads() - before)
print("same" if all(np.array_equal(out, expected) for out in outs) else "different")
print(fqcore.get_num_threads())
"""


def test_a_thousand_threads_under_an_address_space_limit_is_an_exception_not_an_exit():
    if not os.path.exists("/proc/self/statm"):
        pytest.skip("reads this process's size from /proc/self/statm (Linux)")
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("AddressSanitizer cannot start under an address-space limit")
    result = _python(_THREADS_UNDER_LIMIT)
    assert result.returncode == 0, result.stderr
    outcome, extra_threads, same, setting = result.stdout.splitlines()
    assert outcome.startswith("refused: set_num_threads(1024): the system refused"), outcome
    assert "the setting stays 'auto'" in outcome
    assert extra_threads == "0"  # the workers started for the refused count have retired
    assert same == "same" and setting == "auto"
