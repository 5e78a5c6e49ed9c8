"""Builds fqcore._kernels: the C kernels (each ISA file with its own flags) and the Cython wrapper."""
import glob
import json
import logging
import os
import shlex
import shutil
import subprocess
import tempfile

import numpy

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import PlatformError

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = "src_c"

# Flags fqcore insists on for its own C. They come after the user's CFLAGS on each compile line, so
# they win: -ffp-contract=off (no FMA contraction) and -fno-fast-math (IEEE NaN, inf and -0.0, no
# reassociation) make the scalar reference and every SIMD path round identically, TF's way;
# -fno-strict-aliasing because the kernels read buffers through pointers of other types (float16 and
# bfloat16 data as uint16_t); -std=gnu11 is the dialect of src_c, held to warnings as errors.
OWN_C_FLAGS = ["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-fno-fast-math", "-ffp-contract=off",
               "-fno-strict-aliasing"]
# The optimization level is the user's when their CFLAGS choose one (-O0 -g to debug, -O1 under
# sanitizers); results do not depend on it.
DEFAULT_OPTIMIZATION = "-O3"
# Debug information, in every file of the extension, only when CFLAGS ask for it (-g...): Python's
# own compile flags carry -g, which made the extension 5 MB where 0.9 MB of it is code and data.
NO_DEBUG_INFO = "-g0"

X86_AVX2 = ["-mavx2", "-mfma", "-mf16c"]
X86_AVX512 = X86_AVX2 + ["-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl"]

# Sources built for every ISA, then each ISA's kernel files.
COMMON_SOURCES = [
    "dispatch.c",
    "common/fpenv.c",
    "common/cpu_budget.c",
    "common/parallel.c",
    "common/kernel_choices.c",
    "common/block_cache.c",
    "fake_quant/fq_api.c",
    "fake_quant/fq_nudge.c",
    "fake_quant/fq_scalar.c",
    "batch_norm/bn_api.c",
    "batch_norm/bn_walk.c",
    "batch_norm/bn_scalar.c",
    "range/range_api.c",
    "range/range_scalar.c",
    "conv/conv_api.c",
    "conv/conv_products.c",
    "conv/conv_scalar.c",
    "channel/channel_api.c",
    "channel/channel_scalar.c",
    "matmul/matmul_api.c",
    "matmul/matmul_scalar.c",
    "elementwise/pow.c",
    "elementwise/vector_program.c",
    "elementwise/filter_scaling.c",
    "elementwise/debiased_average.c",
    "optimizer/momentum.c",
]
ISA_SOURCES = {
    "AVX2": ["fake_quant/fq_avx2.c", "batch_norm/bn_avx2.c", "range/range_avx2.c",
             "conv/conv_avx2.c", "channel/channel_avx2.c",
             "matmul/matmul_avx2.c"],
    "AVX512": ["fake_quant/fq_avx512.c", "batch_norm/bn_avx512.c", "range/range_avx512.c",
               "conv/conv_avx512.c", "channel/channel_avx512.c",
               "matmul/matmul_avx512.c"],
    "NEON": ["fake_quant/fq_neon.c", "batch_norm/bn_neon.c", "range/range_neon.c",
             "conv/conv_neon.c", "channel/channel_neon.c",
             "matmul/matmul_neon.c"],
}
# Per ISA: the target its kernel files are for, a probe using their intrinsics, their flags.
PROBES = {
    "AVX2": ("x86-64", "#include <immintrin.h>\nint fq_probe(void){__m256 a=_mm256_set1_ps(1.f);"
                       "a=_mm256_fmadd_ps(a,a,a);return (int)_mm256_cvtss_f32(a);}\n", X86_AVX2),
    "AVX512": ("x86-64", "#include <immintrin.h>\nint fq_probe(void){__m512 a=_mm512_set1_ps(1.f);"
                         "__mmask16 m=_mm512_fpclass_ps_mask(a,0x99);a=_mm512_roundscale_ps(a,1);"
                         "return (int)m+(int)_mm512_reduce_add_ps(a);}\n", X86_AVX512),
    "NEON": ("aarch64", "#include <arm_neon.h>\nint fq_probe(void){float32x4_t a=vdupq_n_f32(1.f);"
                        "a=vrndmq_f32(a);return (int)vgetq_lane_f32(a,0);}\n", []),
}
# Checked before an ISA's own probe, so that the reason for leaving it out reads plainly.
TARGET_MACROS = {"x86-64": "__x86_64__", "aarch64": "__aarch64__"}
CYTHON_OUTPUT = os.path.join("fqcore", "_kernels.c")


def _first_error(output):
    """The first error the compiler or linker printed, without the temporary file's name."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    line = next((line for line in lines if "error" in line.lower()),
                lines[0] if lines else "failed without a message")
    message = line.split("error: ", 1)[-1]
    return message[len("#error "):] if message.startswith("#error ") else message


def _probe(compiler, source, compile_flags, link_flags=None):
    """None when `source` builds as the extension's files do, else the first error.

    It is compiled by the extension's compiler command (CC, CFLAGS) with `compile_flags` and, unless
    `link_flags` is None, linked into a shared object by the extension's linker command (LDSHARED,
    LDFLAGS). Not as an executable: setuptools links those with the bare CC, without CFLAGS or
    LDFLAGS, so with CFLAGS=-fsanitize=address the sanitizer's runtime was missing and every ISA
    was left out without a word."""
    tmp = tempfile.mkdtemp(prefix="fqcore-probe-")
    try:
        src, obj, lib = (os.path.join(tmp, name) for name in ("probe.c", "probe.o", "probe.so"))
        with open(src, "w") as f:
            f.write(source)
        commands = [compiler.compiler_so + ["-c", src, "-o", obj] + list(compile_flags)]
        if link_flags is not None:
            commands.append(compiler.linker_so + [obj, "-o", lib] + list(link_flags))
        for command in commands:
            result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, errors="replace")
            if result.returncode != 0:
                return _first_error(result.stdout)
        return None
    except OSError as error:  # no such compiler
        return str(error)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _why_not_built(compiler, isa, compile_flags, link_flags):
    """None when this build can have `isa`'s kernel files, else why not."""
    if os.environ.get("FQCORE_DISABLE_" + isa) == "1":
        return f"FQCORE_DISABLE_{isa}=1"
    target, probe, isa_flags = PROBES[isa]
    check = (f"#ifndef {TARGET_MACROS[target]}\n#error not an {target} target\n#endif\n"
             "int fq_probe;\n")
    return (_probe(compiler, check, compile_flags)
            or _probe(compiler, probe, list(compile_flags) + isa_flags, link_flags))


def _cflags_choose(prefix):
    """Whether the user's CFLAGS have a flag starting with `prefix` (-O: a level, -g: debug info)."""
    return any(flag.startswith(prefix) for flag in shlex.split(os.environ.get("CFLAGS", "")))


def _own_c_flags():
    """The flags our C files get after the user's: the optimization level unless CFLAGS has one."""
    return ([] if _cflags_choose("-O") else [DEFAULT_OPTIMIZATION]) + OWN_C_FLAGS


def _required_isas():
    """FQCORE_REQUIRE_ISA=avx2,avx512 (for packagers): ISAs whose absence must fail the build."""
    value = os.environ.get("FQCORE_REQUIRE_ISA", "")
    names = [name.strip().lower() for name in value.split(",") if name.strip()]
    known = ["scalar"] + [isa.lower() for isa in PROBES]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise PlatformError(f"FQCORE_REQUIRE_ISA={value!r} names {', '.join(unknown)}; "
                            f"known ISAs: {', '.join(known)}")
    return [name for name in names if name != "scalar"]


def _c_string(text):
    """`text` as a C string literal, for a -D argument (no shell in between)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class BuildWithIsaFlags(build_ext):
    """Adds each ISA file only when the compiler can build it, with flags for that file alone, and
    compiles into the extension what it built with, what it left out and why (show_config)."""

    def build_extensions(self):
        compiler = self.compiler
        required = _required_isas()
        # The C kernels' extension; the engine's (fqcore.graph._engine) is Cython alone.
        ext = next(e for e in self.extensions if e.name == "fqcore._kernels")
        # The thread pool is POSIX threads (src_c/common/parallel.c).
        ext.extra_compile_args.append("-pthread")
        ext.extra_link_args.append("-pthread")
        if not _cflags_choose("-g"):  # a wheel's libraries ship without debug sections
            for each in self.extensions:
                each.extra_compile_args.append(NO_DEBUG_INFO)
        own_flags = _own_c_flags()
        kernel_flags = ext.extra_compile_args + own_flags

        not_built, per_file = {}, {}
        for isa, (_, _, flags) in PROBES.items():
            reason = _why_not_built(compiler, isa, kernel_flags, ext.extra_link_args)
            if reason:
                not_built[isa.lower()] = reason
                continue
            for rel in ISA_SOURCES[isa]:
                path = os.path.join(SRC, rel)
                ext.sources.append(path)
                per_file[os.path.normpath(path)] = flags
            ext.define_macros.append(("FQ_BUILD_" + isa, "1"))

        info = {"isas_not_built": not_built, "compiler": shlex.join(compiler.compiler_so),
                "kernel_flags": shlex.join(kernel_flags),
                "linker": shlex.join(compiler.linker_so + ext.extra_link_args)}
        built = ["scalar"] + [isa.lower() for isa in PROBES if isa.lower() not in not_built]
        # At warning level, so that setup.py prints it at every verbosity. pip shows a build's
        # output only with -v, or when the build fails (as it does for FQCORE_REQUIRE_ISA).
        left_out = "; ".join(f"{isa} ({why})" for isa, why in not_built.items()) or "none"
        self.announce(f"fqcore: kernels for {' '.join(built)}; not built: {left_out}\n"
                      f"fqcore: compiler: {info['compiler']}\n"
                      f"fqcore: kernel flags: {info['kernel_flags']}", level=logging.WARNING)
        missing = [isa for isa in required if isa in not_built]
        if missing:
            raise PlatformError("FQCORE_REQUIRE_ISA=%s, but %s" % (
                os.environ["FQCORE_REQUIRE_ISA"],
                "; ".join(f"{isa} was not built: {not_built[isa]}" for isa in missing)))

        original_compile = compiler._compile

        def compile_one(obj, src, src_ext, cc_args, extra_postargs, pp_opts):
            rel = os.path.normpath(os.path.relpath(src, HERE)) if os.path.isabs(src) else os.path.normpath(src)
            flags = list(extra_postargs)
            if rel.startswith(SRC + os.sep):
                flags += own_flags + per_file.get(rel, [])
            elif rel == CYTHON_OUTPUT:
                # Read by _kernels.pyx: a string in the binary cannot disagree with it.
                flags.append("-DFQ_BUILD_INFO=" + _c_string(json.dumps(info)))
            return original_compile(obj, src, src_ext, cc_args, flags, pp_opts)

        compiler._compile = compile_one
        super().build_extensions()


def _cython_directives():
    checks = os.environ.get("FQCORE_CYTHON_CHECKS") == "1"
    return {"language_level": 3, "boundscheck": checks, "wraparound": checks,
            "initializedcheck": checks, "cdivision": True, "embedsignature": True}



extension = Extension(
    "fqcore._kernels",
    sources=["fqcore/_kernels.pyx"] + [os.path.join(SRC, s) for s in COMMON_SOURCES],
    # numpy's C API: the fake-quant bindings read array headers directly (a call costs ~1 us).
    include_dirs=[os.path.join(SRC, "include"), SRC, numpy.get_include()],
    # NPY_TARGET_VERSION: numpy 2.0, the oldest the package runs on. numpy's headers otherwise
    # target an older API (numpy 2.0's: 1.19), which lacks the allocator hook (PyDataMem_SetHandler).
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"),
                   ("NPY_TARGET_VERSION", "NPY_2_0_API_VERSION")],
    # Headers hold kernel code too (inline element functions, tuning constants): a change rebuilds.
    depends=sorted(glob.glob(os.path.join(SRC, "**", "*.h"), recursive=True)),
)

# The engine's compiled loops (a run of plan steps, reverse mode): Cython without C sources.
engine = Extension("fqcore.graph._engine", sources=["fqcore/graph/_engine.pyx"])

setup(
    ext_modules=cythonize([extension, engine], compiler_directives=_cython_directives()),
    cmdclass={"build_ext": BuildWithIsaFlags},
)
