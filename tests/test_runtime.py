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
    for key in ("version", "compiled_isas", "available_isas", "active_isa", "openmp", "num_threads",
                "blas", "blas_threads"):
        assert key in text
    assert fqcore.get_isa() in text


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
    bad = _python("import fqcore", FQCORE_NUM_THREADS="zero")
    assert bad.returncode != 0 and "FQCORE_NUM_THREADS" in bad.stderr


@pytest.mark.parametrize("value", [0, -1, 1025, 2.0, "2", True])
def test_set_num_threads_rejects(value):
    with pytest.raises(ValueError, match="num_threads must be an int from 1 to 1024"):
        fqcore.set_num_threads(value)


def test_set_num_threads_round_trip():
    previous = fqcore.get_num_threads()
    try:
        fqcore.set_num_threads(3)
        assert fqcore.get_num_threads() == 3
        fqcore.set_num_threads(np.int64(2))  # numpy ints, as num_bits takes them
        assert fqcore.get_num_threads() == 2
    finally:
        fqcore.set_num_threads(previous)
