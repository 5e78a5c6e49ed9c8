"""Sphinx configuration of fqcore's documentation: the API reference from the numpydoc
docstrings (autodoc + napoleon) and the README's guides (MyST). Build it with warnings as errors,
as CI does: python -m sphinx -W --keep-going -b html docs docs/_build/html"""
import re

import fqcore

project = "fqcore"
author = "fqcore developers"
release = fqcore.__version__
version = release

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]

# The docstrings are numpydoc; napoleon renders their sections.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_member_order = "bysource"
# Signatures carry the type hints; the Parameters sections say the rest in words.
autodoc_typehints = "signature"
# numpy.typing.ArrayLike and fqcore.graph's aliases are long Unions: shown by their names.
autodoc_type_aliases = {"npt.ArrayLike": "numpy.typing.ArrayLike",
                        "TensorLike": "fqcore.graph.type_aliases.TensorLike",
                        "Window": "fqcore.graph.type_aliases.Window",
                        "OpLike": "fqcore.graph.type_aliases.OpLike"}

# The README links to its own sections (#isa-and-threads): MyST makes anchors of headings.
myst_heading_anchors = 3

html_theme = "alabaster"
html_title = f"fqcore {release}"


def _alias_names(app, what, name, obj, options, signature, return_annotation):
    """Sphinx prints an alias inside Optional[...] as TypeAliasForwardRef('name'): the name."""
    def named(text):
        return None if text is None else re.sub(r"TypeAliasForwardRef\('([\w.]+)'\)", r"\1", text)
    return named(signature), named(return_annotation)


def setup(app):
    app.connect("autodoc-process-signature", _alias_names)
