"""setup.py's ISA probes build as the extension does, so sanitizer CFLAGS and LDFLAGS keep every
ISA; FQCORE_REQUIRE_ISA turns an ISA left out into a build error that says why; show_config says
which ISAs were left out and why."""
import platform
import shutil

import pytest

import fqcore
from build_helpers import (SANITIZED_BUILD_ENV, clean_env, copy_sources, run_setup,
                           sanitizer_runtimes_or_skip)

# Per machine: the ISAs a build for it has, and one of the other target with the reason it is left
# out. The builds below stop at FQCORE_REQUIRE_ISA, after the probes: nothing else is compiled.
NATIVE = {"x86_64": (["avx2", "avx512"], "neon", "not an aarch64 target"),
          "aarch64": (["neon"], "avx2", "not an x86-64 target")}
TIMEOUT = 300


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    dest = tmp_path_factory.mktemp("fqcore-probes")
    copy_sources(str(dest))
    return str(dest)


def _native_or_skip():
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if machine not in NATIVE:
        pytest.skip(f"knows the ISAs of x86-64 and aarch64 builds, not of {machine}")
    if shutil.which("gcc") is None:
        pytest.skip("runs setup.py with CC=gcc")
    return NATIVE[machine]


def test_sanitizer_flags_keep_every_isa(sources):
    """The probes used to be linked as executables, by the bare CC without CFLAGS or LDFLAGS: with
    -fsanitize the sanitizer's runtime was missing, and every ISA was left out without a word."""
    sanitizer_runtimes_or_skip()
    kept, other, why = _native_or_skip()
    required = ",".join(kept + [other])
    env = clean_env(FQCORE_REQUIRE_ISA=required, **SANITIZED_BUILD_ENV)
    code, output = run_setup(sources, env, TIMEOUT)
    assert code != 0, f"FQCORE_REQUIRE_ISA={required} did not stop the build:\n{output}"
    assert f"FQCORE_REQUIRE_ISA={required}, but {other} was not built: {why}" in output, output
    assert f"fqcore: kernels for scalar {' '.join(kept)};" in output, output
    assert f"fqcore: compiler: gcc {SANITIZED_BUILD_ENV['CFLAGS']}" in output, output


def test_required_isa_left_out_on_request_names_the_variable(sources):
    kept, _, _ = _native_or_skip()
    isa = kept[-1]
    env = clean_env(FQCORE_REQUIRE_ISA=isa, CC="gcc", **{f"FQCORE_DISABLE_{isa.upper()}": "1"})
    code, output = run_setup(sources, env, TIMEOUT)
    assert code != 0, output
    assert f"but {isa} was not built: FQCORE_DISABLE_{isa.upper()}=1" in output, output


def test_unknown_required_isa_is_a_build_error(sources):
    code, output = run_setup(sources, clean_env(FQCORE_REQUIRE_ISA="avx2, sse9"), TIMEOUT)
    assert code != 0, output
    assert "FQCORE_REQUIRE_ISA='avx2, sse9' names sse9; known ISAs: scalar, avx2, avx512, neon" \
        in output, output


def test_config_says_which_isas_were_not_built_and_why(capsys):
    config = fqcore._runtime.config()
    not_built = dict(entry[:-1].split(" (", 1) for entry in config["isas_not_built"])
    assert sorted(config["compiled_isas"] + list(not_built)) == sorted(fqcore._kernels.ISA_NAMES)
    assert all(not_built.values()), not_built
    assert config["compiler"] and config["linker"]
    assert "-ffp-contract=off" in config["kernel_flags"].split()
    fqcore.show_config()
    shown = capsys.readouterr().out
    assert f"isas_not_built: {', '.join(config['isas_not_built'])}" in shown, shown
    for key in ("compiler", "kernel_flags", "linker"):
        assert f"{key}: {config[key]}" in shown, shown


@pytest.mark.parametrize("cflags, kernel_flags", [
    ("", "-pthread -g0 -O3 -std=gnu11"),
    ("-O0", "-pthread -g0 -std=gnu11"),
    ("-O1 -g", "-pthread -std=gnu11"),
])
def test_user_cflags_reach_the_kernels_and_choose_level_and_debug_info(sources, cflags,
                                                                        kernel_flags):
    """The user's CFLAGS are on every compile line, before fqcore's own flags; fqcore adds -O3 and
    -g0 (no debug information: the extension was 5 MB with Python's -g) only when CFLAGS choose no
    level and no debug information."""
    kept, _, _ = _native_or_skip()
    isa = kept[-1]
    settings = {"FQCORE_REQUIRE_ISA": isa, f"FQCORE_DISABLE_{isa.upper()}": "1"}
    if cflags:
        settings["CFLAGS"] = cflags
    code, output = run_setup(sources, clean_env(**settings), TIMEOUT)
    assert code != 0, output
    compiler = next(line for line in output.splitlines() if line.startswith("fqcore: compiler: "))
    if cflags:
        assert f" {cflags} " in compiler + " ", compiler
    assert f"fqcore: kernel flags: {kernel_flags} -Wall -Wextra -Werror" in output, output
