"""CI: what the sdist and the wheel ship, checked against what belongs in each; prints their sizes.

Usage: python .ci/check_dists.py SDIST WHEEL (from the source tree, with git and readelf).
"""
import email.parser
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The sdist builds the extension from these, besides every C source under src_c.
SDIST_NEEDS = ["LICENSE", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in",
               "fqcore/_kernels.pyx", "fqcore/_kernels.pxd", "fqcore/graph/_engine.pyx",
               "fqcore/datasets/digits.npz"]
# What Cython generates: each build makes it again.
GENERATED_C = ("fqcore/_kernels.c", "fqcore/graph/_engine.c")
# The compiled extensions, one library each in a wheel.
EXTENSIONS = ("fqcore/_kernels.", "fqcore/graph/_engine.")
# Build inputs and leftovers that a wheel must not carry.
NOT_IN_WHEEL = (".c", ".h", ".pyx", ".pxd", ".o")
URL_LABELS = ["Homepage", "Source", "Issues", "Documentation"]


def _tracked(prefix):
    """Files git tracks under `prefix`."""
    out = subprocess.run(["git", "ls-files", prefix], cwd=ROOT, check=True, text=True,
                         stdout=subprocess.PIPE).stdout
    return out.split()


def check_sdist(path):
    with tarfile.open(path) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    problems = [f"missing {name}" for name in SDIST_NEEDS + _tracked("src_c") if name not in names]
    problems += [f"ships {name}" for name in sorted(names)
                 if name.startswith("tests/") or name in GENERATED_C]
    return problems


def _debug_sections(library_bytes):
    """Names of the ELF debug sections of a shared library (readelf)."""
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(library_bytes)
        f.flush()
        out = subprocess.run(["readelf", "-S", "-W", f.name], check=True, text=True,
                             stdout=subprocess.PIPE).stdout
    return sorted({word for word in out.split() if word.startswith(".debug")})


def check_wheel(path):
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        metadata_name = next(name for name in names if name.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
        problems = [f"ships {name}" for name in names if name.endswith(NOT_IN_WHEEL)]
        libraries = []
        for extension in EXTENSIONS:
            found = [name for name in names if name.startswith(extension) and name.endswith(".so")]
            if len(found) != 1:
                problems.append(f"has {len(found)} {extension}*.so: {found}")
            libraries += found
        for library in libraries:
            debug = _debug_sections(archive.read(library))
            if debug:
                problems.append(f"{library} is not stripped: {', '.join(debug)}")
    if not any(name.endswith(".dist-info/licenses/LICENSE") for name in names):
        problems.append("has no .dist-info/licenses/LICENSE")
    if metadata["License-Expression"] != "Apache-2.0":
        problems.append(f"License-Expression is {metadata['License-Expression']!r}")
    labels = [url.split(",", 1)[0] for url in metadata.get_all("Project-URL", [])]
    problems += [f"no {label} URL" for label in URL_LABELS if label not in labels]
    for field in ("Author", "Keywords", "Classifier", "Requires-Python"):
        if not metadata.get_all(field):
            problems.append(f"no {field}")
    return problems


def main(sdist, wheel):
    problems = [f"{os.path.basename(sdist)}: {p}" for p in check_sdist(sdist)]
    problems += [f"{os.path.basename(wheel)}: {p}" for p in check_wheel(wheel)]
    for path in (sdist, wheel):
        print(f"{os.path.basename(path)}: {os.path.getsize(path) / 1e3:.0f} kB")
    if problems:
        sys.exit("\n".join(problems))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
