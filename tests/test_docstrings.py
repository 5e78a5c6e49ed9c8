"""The public API's documentation: every public function and class has a numpydoc docstring with
Parameters (when it takes any) and Examples, the examples run and give what they show, and every
public function carries complete type hints."""
import doctest
import inspect
import re

import numpy as np
import pytest

import fqcore
import fqcore.deploy
import fqcore.graph
import fqcore.quantize
from fqcore import serialization
from fqcore.graph import layers

# What users call: the packages' __all__ (modules they re-export are namespaces, not entries)
# and the layer builders the README uses through fqcore.graph.layers.
NAMESPACES = [("fqcore", fqcore, fqcore.__all__),
              ("fqcore.graph", fqcore.graph, fqcore.graph.__all__),
              ("fqcore.graph.layers", layers, layers.__all__),
              ("fqcore.quantize", fqcore.quantize, fqcore.quantize.__all__),
              ("fqcore.deploy", fqcore.deploy, fqcore.deploy.__all__)]

PUBLIC = {f"{prefix}.{name}": getattr(module, name)
          for prefix, module, names in NAMESPACES for name in names
          if not inspect.ismodule(getattr(module, name))}

# Every public function has complete type hints (which mypy checks in CI).
TYPED = sorted(name for name, obj in PUBLIC.items() if inspect.isfunction(obj))


def _section(doc, title):
    """The body of a numpydoc section (`title` underlined with dashes), or None."""
    match = re.search(rf"^\s*{title}\n\s*-{{{len(title)}}}\n(.*?)(?=^\s*\w[\w ]*\n\s*-{{3,}}\n|\Z)",
                      doc, re.M | re.S)
    return match.group(1) if match else None


def _parameters(obj):
    """The names a caller passes: the signature's, less self, cls, and a NamedTuple's fields
    (which its Attributes section describes)."""
    if inspect.isclass(obj) and issubclass(obj, tuple):
        return []
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    return [p.name for p in signature.parameters.values() if p.name not in ("self", "cls")]


def _problems(obj):
    doc = inspect.getdoc(obj) or ""
    problems = []
    if not doc:
        return ["no docstring"]
    if _section(doc, "Examples") is None:
        problems.append("no Examples section")
    names = _parameters(obj)
    if names:
        section = _section(doc, "Parameters")
        if section is None:
            problems.append("no Parameters section")
        else:
            # Entries are the least indented lines: "name : type", "*args", "min, max : float".
            lines = [line for line in section.splitlines() if line.strip()]
            indent = min(len(line) - len(line.lstrip()) for line in lines)
            described = {word for line in lines if len(line) - len(line.lstrip()) == indent
                         for word in re.findall(r"\w+", line.split(" : ")[0])}
            missing = [name for name in names if name not in described]
            if missing:
                problems.append(f"Parameters does not describe {', '.join(missing)}")
    return problems


def test_public_names_are_found():
    assert len(PUBLIC) > 100
    assert "fqcore.fake_quant_with_min_max_vars" in PUBLIC and "fqcore.graph.Session" in PUBLIC


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_name_has_a_numpydoc_docstring(name):
    assert _problems(PUBLIC[name]) == [], name


def test_the_checker_finds_what_is_missing():
    def bare(x, y):
        """One line."""

    def partial(x, y):
        """One line.

        Parameters
        ----------
        x : int
            A number, not
            y itself.

        Examples
        --------
        >>> partial(1, 2)
        """

    assert _problems(bare) == ["no Examples section", "no Parameters section"]
    assert _problems(partial) == ["Parameters does not describe y"]


@pytest.mark.parametrize("name", TYPED)
def test_public_function_is_fully_annotated(name):
    signature = inspect.signature(PUBLIC[name])
    unannotated = [p.name for p in signature.parameters.values()
                   if p.annotation is inspect.Parameter.empty]
    assert not unannotated, f"{name}: {unannotated}"
    assert signature.return_annotation is not inspect.Signature.empty, name


def _examples():
    finder = doctest.DocTestFinder(recurse=False)
    found = {}
    for name, obj in PUBLIC.items():
        for test in finder.find(obj, name, globs={}):
            if test.examples:
                found[name] = test
        if inspect.isclass(obj):  # documented methods of public classes
            for attribute, member in vars(obj).items():
                if (inspect.isfunction(member) and not attribute.startswith("_")
                        or attribute == "__call__"):
                    for test in finder.find(member, f"{name}.{attribute}", globs={}):
                        if test.examples:
                            found[f"{name}.{attribute}"] = test
    return found


EXAMPLES = _examples()


def test_examples_are_found():
    assert "fqcore.fake_quant_with_min_max_vars" in EXAMPLES
    assert set(PUBLIC) <= set(EXAMPLES)


# Examples that export need the writers of the deploy extra.
WRITERS = {"deploy.to_tflite": "flatbuffers", "deploy.to_onnx": "onnx"}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs_as_shown(name, tmp_path, monkeypatch):
    for call, package in WRITERS.items():
        if any(call in example.source for example in EXAMPLES[name].examples):
            pytest.importorskip(package)
    monkeypatch.chdir(tmp_path)  # examples may write files
    registry = dict(serialization._REGISTRY)
    previous = (fqcore.get_isa(), fqcore.get_num_threads())
    output = []
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    try:
        with np.printoptions(legacy=False):
            result = runner.run(EXAMPLES[name], out=output.append, clear_globs=True)
    finally:
        serialization._REGISTRY.clear()
        serialization._REGISTRY.update(registry)
        fqcore.set_isa(previous[0])
        fqcore.set_num_threads(previous[1])
        fqcore.graph.reset_default_graph()
    assert result.failed == 0, "".join(output)
