"""Builds fqcore._kernels: the C kernels (each ISA file with its own flags) and the Cython wrapper."""
import glob
import os
import shutil
import tempfile

import numpy

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = "src_c"

# Our own C is held to warnings-as-errors and strict float semantics: no FMA contraction, so the
# scalar reference and every SIMD path round identically.
OWN_C_FLAGS = ["-std=gnu11", "-O3", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off",
               "-fno-strict-aliasing"]

X86_AVX2 = ["-mavx2", "-mfma", "-mf16c"]
X86_AVX512 = X86_AVX2 + ["-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl"]

# Sources built for every ISA, then per-ISA kernel files with (probe source, flags).
COMMON_SOURCES = [
    "dispatch.c",
    "common/fpenv.c",
    "common/cpu_budget.c",
    "common/parallel.c",
    "fake_quant/fq_api.c",
    "fake_quant/fq_nudge.c",
    "fake_quant/fq_scalar.c",
    "batch_norm/bn_api.c",
    "batch_norm/bn_walk.c",
    "batch_norm/bn_scalar.c",
    "range/range_api.c",
    "range/range_scalar.c",
]
ISA_SOURCES = {
    "AVX2": ["fake_quant/fq_avx2.c", "batch_norm/bn_avx2.c", "range/range_avx2.c"],
    "AVX512": ["fake_quant/fq_avx512.c", "batch_norm/bn_avx512.c", "range/range_avx512.c"],
    "NEON": ["fake_quant/fq_neon.c", "batch_norm/bn_neon.c", "range/range_neon.c"],
}
PROBES = {
    "AVX2": ("#include <immintrin.h>\nint main(void){__m256 a=_mm256_set1_ps(1.f);"
             "a=_mm256_fmadd_ps(a,a,a);return (int)_mm256_cvtss_f32(a);}\n", X86_AVX2),
    "AVX512": ("#include <immintrin.h>\nint main(void){__m512 a=_mm512_set1_ps(1.f);"
               "__mmask16 m=_mm512_fpclass_ps_mask(a,0x99);"
               "a=_mm512_roundscale_ps(a,1);return (int)m+(int)_mm512_reduce_add_ps(a);}\n",
               X86_AVX512),
    "NEON": ("#include <arm_neon.h>\n#ifndef __aarch64__\n#error aarch64 only\n#endif\n"
             "int main(void){float32x4_t a=vdupq_n_f32(1.f);a=vrndmq_f32(a);"
             "return (int)vgetq_lane_f32(a,0);}\n", []),
}


def _compiles(compiler, source, flags, link_flags=()):
    """True when `source` compiles (and links) with `flags`: decides what this build can target."""
    tmp = tempfile.mkdtemp(prefix="fqcore-probe-")
    try:
        path = os.path.join(tmp, "probe.c")
        with open(path, "w") as f:
            f.write(source)
        objects = compiler.compile([path], output_dir=tmp, extra_postargs=list(flags))
        compiler.link_executable(objects, os.path.join(tmp, "probe"), output_dir=tmp,
                                 extra_postargs=list(link_flags))
        return True
    except Exception:  # any compiler or linker failure means "not available"
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class BuildWithIsaFlags(build_ext):
    """Adds each ISA file only when the compiler can build it, with flags for that file alone."""

    def build_extensions(self):
        compiler = self.compiler
        isa_flags = {}
        for isa, (probe, flags) in PROBES.items():
            if os.environ.get("FQCORE_DISABLE_" + isa) != "1" and _compiles(compiler, probe, flags):
                isa_flags[isa] = flags
        per_file = {}
        for ext in self.extensions:
            for isa, flags in isa_flags.items():
                for rel in ISA_SOURCES[isa]:
                    path = os.path.join(SRC, rel)
                    ext.sources.append(path)
                    per_file[os.path.normpath(path)] = flags
                ext.define_macros.append(("FQ_BUILD_" + isa, "1"))
            # The thread pool is POSIX threads (src_c/common/parallel.c).
            ext.extra_compile_args.append("-pthread")
            ext.extra_link_args.append("-pthread")
        self.announce("fqcore: ISA kernels built: scalar %s"
                      % " ".join(i.lower() for i in isa_flags), level=3)

        original_compile = compiler._compile

        def compile_one(obj, src, ext, cc_args, extra_postargs, pp_opts):
            rel = os.path.normpath(os.path.relpath(src, HERE)) if os.path.isabs(src) else os.path.normpath(src)
            flags = list(extra_postargs)
            if rel.startswith(SRC + os.sep):
                flags += OWN_C_FLAGS + per_file.get(rel, [])
            return original_compile(obj, src, ext, cc_args, flags, pp_opts)

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
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    # Headers hold kernel code too (inline element functions, tuning constants): a change rebuilds.
    depends=sorted(glob.glob(os.path.join(SRC, "**", "*.h"), recursive=True)),
)

setup(
    ext_modules=cythonize([extension], compiler_directives=_cython_directives()),
    cmdclass={"build_ext": BuildWithIsaFlags},
)
