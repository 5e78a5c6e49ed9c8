"""Checkpoints: a graph's structure as JSON, variable values as .npz, each written atomically.

Graph file (`save_graph` / `load_graph`), UTF-8 JSON, one op per line:

    {"format": "fqcore.graph", "version": 1,
     "ops": [{"name", "type", "inputs": ["op:0", ...], "control_inputs": ["op", ...],
              "attrs": {...}, "outputs": [{"shape": [4, null] | null, "dtype": "float32" | null}]}],
     "variables": [{"op", "read": "op/read:0", "initializer": "op/Assign", "trainable"}],
     "collections": [{"key": "update_ops", "items": [{"operation": name} | {"tensor": name} |
                                                      {"variable": op name} | {"value": attr}]}],
     "names_in_use": {...}, "seed": int (optional), "init_rng": bit generator state (optional)}

Ops are listed in creation order, which is not topological after a rewrite (inputs are rerouted
to later ops), so loading creates every op first and wires inputs afterwards. Attribute values are
plain JSON when they are None, bool, int, finite float or str, and lists of those; anything else is
an object with a single tag key: {"tuple": [...]}, {"dict": {...}}, {"dtype": "<f4"},
{"ndarray": {"dtype": "<f4", "shape": [...], "data": base64 of the C-order bytes}} and
{"scalar": <the same>} for numpy scalars. Arrays (Const values) are therefore exact bit for bit in
any dtype, -0.0 and NaN payloads included; non-finite Python floats are refused (JSON has none).

Variables file (`save_variables` / `load_variables`): an .npz (zip of .npy) with one entry per
variable keyed by its op name ('/' is fine in zip member names), raw bytes, plus an entry
`__fqcore__` (uint8 JSON: format, version, variable names, and the graph's SHA-256 when written by
`save`) and, from `save`, `__fqcore_graph__` (the graph file's bytes). Op names cannot start with
'_', so those keys never name a variable.

Every file goes to a temporary file in the target directory, is flushed and fsynced, then renamed
over the target with os.replace: an interrupted save leaves the previous file as it was. A
checkpoint (`save`) is two files, and its variables file, which holds a copy of the graph, is
renamed first: that rename is the save's commit point. `restore` takes the copy when the graph
file beside it is not the one the variables were saved with (a save interrupted between its two
renames), so a checkpoint is always the previous one or the new one, whole.
"""
from __future__ import annotations

import base64
import collections
import errno
import hashlib
import json
import math
import os
import zipfile
from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple, Union

import numpy as np

from ..atomic_file import write_atomically
from ..bounded_npz import NpzArchive
from .core import Graph, Operation, Tensor
from .graph_state import check_member, decode_rng, short
from .variables import Variable

if TYPE_CHECKING:
    from .session import Session

GRAPH_FORMAT = "fqcore.graph"
GRAPH_VERSION = 1
VARIABLES_FORMAT = "fqcore.variables"
VARIABLES_VERSION = 1
GRAPH_SUFFIX = ".graph.json"
VARIABLES_SUFFIX = ".npz"
DEFAULT_BASENAME = "checkpoint"
_META_KEY = "__fqcore__"
_GRAPH_KEY = "__fqcore_graph__"
_ATTR_TAGS = ("tuple", "dict", "dtype", "ndarray", "scalar")

LoadResult = collections.namedtuple("LoadResult", "loaded missing unexpected")
LoadResult.__doc__ = """What load_variables did: the names it set, the requested variables absent
from the file, and the file's entries that are not among the requested variables."""

__all__ = ["save_graph", "load_graph", "save_variables", "load_variables", "save", "restore",
           "checkpoint_paths", "LoadResult", "GRAPH_FORMAT", "GRAPH_VERSION"]


# -- graph ----------------------------------------------------------------------------------
def save_graph(graph: Graph, path: Union[str, os.PathLike[str]]) -> str:
    """Writes a graph (ops, attributes, collections, variables) to a JSON file, atomically.

    Parameters
    ----------
    graph : Graph
        The graph.
    path : str or os.PathLike
        The file to write.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    TypeError
        `graph` is not a Graph.
    OSError
        The file cannot be written.

    Examples
    --------
    >>> import os, tempfile
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 2], name="x")
    ...     y = G.layers.dense(x, 1, scope="fc")
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> folder = tempfile.mkdtemp()
    >>> path = G.save_graph(g, os.path.join(folder, "model.graph.json"))
    >>> [op.name for op in G.load_graph(path).get_operations()] == [op.name for op in g.get_operations()]
    True
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be an fqcore.graph.Graph, got {type(graph).__name__}")
    path = _output_path(path, "path")
    data = _dump_graph(graph)
    write_atomically(path, lambda f: f.write(data))
    return path


def load_graph(path: Union[str, os.PathLike[str]]) -> Graph:
    """The Graph saved in a JSON file by :func:`save_graph`.

    Same op names, types, wiring, attributes, output shapes, collections and Variable objects.

    Parameters
    ----------
    path : str or os.PathLike
        The file.

    Returns
    -------
    Graph
        A new graph.

    Raises
    ------
    ValueError
        Anything wrong with the file's content, naming the file and the entry (files are untrusted
        input).
    OSError
        The file cannot be read.

    Examples
    --------
    >>> import os, tempfile
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 2], name="x")
    ...     y = G.layers.dense(x, 1, scope="fc")
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> folder = tempfile.mkdtemp()
    >>> loaded = G.load_graph(G.save_graph(g, os.path.join(folder, "model.graph.json")))
    >>> loaded.get_tensor_by_name("fc/BiasAdd:0").shape
    (None, 1)
    """
    return _read_graph(_input_path(path, "path", "graph"))[0]


def _dump_graph(graph):
    """The graph file's bytes (deterministic: the same graph always gives the same bytes)."""
    ops = graph.get_operations()
    for op in ops:
        for t in op.inputs:
            check_member(graph, t.op, f"input {t.name!r} of operation {op.name!r}")
        for c in op.control_inputs:
            check_member(graph, c, f"control input {c.name!r} of operation {op.name!r}")
    variables = {}
    collection_entries = []
    for key in graph.get_all_collection_keys():
        if not isinstance(key, str):
            raise TypeError(f"collection key {key!r} is not a string; only str keys can be saved")
        items = [_encode_item(graph, key, i, item, variables)
                 for i, item in enumerate(graph.get_collection(key))]
        collection_entries.append({"key": key, "items": items})
    sections = [
        ("format", GRAPH_FORMAT), ("version", GRAPH_VERSION),
        ("ops", [_encode_op(op) for op in ops]),
        ("variables", list(variables.values())),
        ("collections", collection_entries),
        ("names_in_use", dict(getattr(graph, "_names_in_use", {}))),
    ]
    seed = getattr(graph, "seed", None)
    if seed is not None:
        if type(seed) is not int:
            raise TypeError(f"graph.seed must be an int to be saved, got {seed!r}")
        sections.append(("seed", seed))
    rng = getattr(graph, "_init_rng", None)
    if isinstance(rng, np.random.Generator):
        sections.append(("init_rng", rng.bit_generator.state))
    lines = ["{"]
    for i, (key, value) in enumerate(sections):
        comma = "," if i + 1 < len(sections) else ""
        if isinstance(value, list):  # one element per line: readable, diffable
            lines.append(f" {json.dumps(key)}: [")
            lines.extend(f"  {_json(v)}{',' if j + 1 < len(value) else ''}"
                         for j, v in enumerate(value))
            lines.append(f" ]{comma}")
        else:
            lines.append(f" {json.dumps(key)}: {_json(value)}{comma}")
    lines.append("}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def _json(value):
    return json.dumps(value, allow_nan=False, ensure_ascii=True)


def _encode_op(op):
    attrs = {}
    for key, value in op.attrs.items():
        if not isinstance(key, str):
            raise TypeError(f"operation {op.name!r} has a non-string attribute key {key!r}")
        attrs[key] = _encode_value(value, f"operation {op.name!r} attribute {key!r}")
    return {"name": op.name, "type": op.type,
            "inputs": [t.name for t in op.inputs],
            "control_inputs": [c.name for c in op.control_inputs],
            "attrs": attrs,
            "outputs": [{"shape": _encode_shape(t.shape, f"output {t.name!r}"),
                         "dtype": _encode_dtype(t.dtype)} for t in op.outputs]}


def _encode_shape(shape, where):
    if shape is None:
        return None
    out = []
    for d in shape:
        if d is None:
            out.append(None)
        elif isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)):
            out.append(int(d))
        else:
            raise TypeError(f"{where} has a shape with a {type(d).__name__} dimension: {shape!r}")
    return out


def _encode_dtype(dtype):
    if dtype is None:
        return None
    dtype = np.dtype(dtype)
    return dtype.name if np.dtype(dtype.name) == dtype else dtype.str


def _encode_value(value, where):
    """An attribute (or collection) value as JSON; see the module docstring for the tags."""
    if value is None or type(value) in (bool, str, int):
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise ValueError(f"{where} is {value!r}: non-finite floats cannot be saved "
                             f"(use a numpy scalar or array to keep one exactly)")
        return value
    if type(value) is list:
        return [_encode_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if type(value) is tuple:
        return {"tuple": [_encode_value(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if type(value) is dict:
        for k in value:
            if not isinstance(k, str):
                raise TypeError(f"{where} is a dict with a non-string key {k!r}")
        return {"dict": {k: _encode_value(v, f"{where}[{k!r}]") for k, v in value.items()}}
    if isinstance(value, np.ndarray):
        return {"ndarray": _encode_array(value, where)}
    if isinstance(value, np.generic):
        return {"scalar": _encode_array(np.asarray(value), where)}
    if isinstance(value, np.dtype):
        return {"dtype": value.str if value.fields is None else _unsupported(value, where)}
    return _unsupported(value, where)


def _unsupported(value, where):
    raise TypeError(f"{where} has type {type(value).__name__} ({value!r}), which cannot be saved: "
                    f"attributes must be None, bool, int, finite float, str, numpy arrays, "
                    f"scalars or dtypes, or lists, tuples and str-keyed dicts of those")


def _encode_array(array, where):
    dtype = array.dtype
    if dtype.hasobject or dtype.fields is not None or dtype.kind == "V":
        raise TypeError(f"{where} is an array of dtype {dtype}, which cannot be saved exactly")
    return {"dtype": dtype.str, "shape": list(array.shape),
            "data": base64.b64encode(array.tobytes(order="C")).decode("ascii")}


def _encode_item(graph, key, index, item, variables):
    where = f"collection {key!r} item {index}"
    if isinstance(item, Variable):
        check_member(graph, item.op, f"{where} (variable {item.op.name!r})")
        entry = {"op": item.op.name, "read": item.read.name,
                 "initializer": None if item.initializer is None else item.initializer.name,
                 "trainable": bool(item.trainable)}
        check_member(graph, item.read.op, f"{where}: the read tensor {item.read.name!r}")
        if item.initializer is not None:
            check_member(graph, item.initializer, f"{where}: the initializer")
        previous = variables.setdefault(item.op.name, entry)
        if previous != entry:
            raise ValueError(f"{where}: two different Variable objects share the op "
                             f"{item.op.name!r} ({previous} and {entry})")
        return {"variable": item.op.name}
    if isinstance(item, Operation):
        check_member(graph, item, where)
        return {"operation": item.name}
    if isinstance(item, Tensor):
        check_member(graph, item.op, where)
        return {"tensor": item.name}
    return {"value": _encode_value(item, where)}


def _read_graph(path):
    """(graph, SHA-256 of the file's bytes)."""
    with _open_for_reading(path, "graph") as f:
        return _parse_graph(f.read(), path)


def _parse_graph(raw, where):
    """(graph, SHA-256 of `raw`) from a graph file's bytes; `where` names them in errors."""
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ValueError(f"{where}: not a valid JSON graph file ({error})") from None
    if not isinstance(doc, dict) or doc.get("format") != GRAPH_FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"{where}: not an fqcore graph file (expected format {GRAPH_FORMAT!r}, "
                         f"found {found!r})")
    _check_version(where, doc.get("version"), GRAPH_VERSION)
    try:
        graph = _build_graph(doc)
    except (ValueError, TypeError, KeyError, RecursionError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise ValueError(f"{where}: {message}") from None
    return graph, hashlib.sha256(raw).hexdigest()


def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def _check_version(path, version, supported):
    if type(version) is not int or version < 1:
        raise ValueError(f"{path}: invalid format version {version!r}")
    if version > supported:
        raise ValueError(f"{path}: format version {version} is newer than this fqcore reads "
                         f"(up to {supported}); upgrade fqcore to load it")


def _field(entry, key, kind, where):
    """entry[key], which must be of type `kind` (a type or tuple; bool counts only if listed)."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where} is not a JSON object")
    if key not in entry:
        raise ValueError(f"{where} has no {key!r} field")
    value = entry[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise ValueError(f"{where}: field {key!r} has the wrong type ({type(value).__name__})")
    return value


def _build_graph(doc):
    graph = Graph()
    entries = _field(doc, "ops", list, "the file")
    wiring = []
    for i, entry in enumerate(entries):
        where = f"op {i}"
        name = _field(entry, "name", str, where)
        where = f"op {i} ({name!r})"
        op_type = _field(entry, "type", str, where)
        inputs = _field(entry, "inputs", list, where)
        controls = _field(entry, "control_inputs", list, where)
        if not all(isinstance(n, str) for n in inputs + controls):
            raise ValueError(f"{where}: input names must be strings")
        attrs = {k: _decode_value(v, f"{where} attribute {k!r}")
                 for k, v in _field(entry, "attrs", dict, where).items()}
        specs = [(_decode_shape(o, where), _decode_dtype(o, where))
                 for o in _field(entry, "outputs", list, where)]
        try:
            # No inputs yet: they may name ops created later. The saved output specs stand in
            # for shape inference, which would need them.
            op = graph.create_op(op_type, [], attrs, output_specs=specs, full_name=name)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        if op_type == "VariableV2":
            _check_variable_attrs(attrs, where)
        wiring.append((op, inputs, controls))
    for op, inputs, controls in wiring:
        try:
            op.inputs = [graph.get_tensor_by_name(n) for n in inputs]
            op.control_inputs = [graph.get_operation_by_name(n) for n in controls]
        except (KeyError, ValueError) as error:
            message = error.args[0] if error.args else error
            raise ValueError(f"operation {op.name!r}: {message}") from None
    graph._version += 1

    variables = {}
    for i, entry in enumerate(_field(doc, "variables", list, "the file")):
        where = f"variable {i}"
        op = graph.get_operation_by_name(_field(entry, "op", str, where))
        if op.type != "VariableV2":
            raise ValueError(f"{where}: {op.name!r} is a {op.type}, not a VariableV2")
        read = graph.get_tensor_by_name(_field(entry, "read", str, where))
        init_name = _field(entry, "initializer", (str, type(None)), where)
        initializer = None if init_name is None else graph.get_operation_by_name(init_name)
        trainable = _field(entry, "trainable", bool, where)
        if op.name in variables:
            raise ValueError(f"{where}: variable {op.name!r} is listed twice")
        variables[op.name] = Variable(op, read, initializer, trainable)

    for i, entry in enumerate(_field(doc, "collections", list, "the file")):
        key = _field(entry, "key", str, f"collection {i}")
        for j, item in enumerate(_field(entry, "items", list, f"collection {key!r}")):
            graph.add_to_collection(key, _decode_item(graph, variables, item,
                                                      f"collection {key!r} item {j}"))

    names = doc.get("names_in_use")
    if names is not None:
        if not isinstance(names, dict) or not all(
                type(v) is int and v >= 0 for v in names.values()):
            raise ValueError("'names_in_use' must map names to non-negative ints")
        graph._names_in_use = dict(names)
    if "seed" in doc:
        graph.seed = _field(doc, "seed", int, "the file")
    if "init_rng" in doc:
        graph._init_rng = decode_rng(doc["init_rng"], "'init_rng'")
    return graph


def _check_variable_attrs(attrs, where):
    """What restore and a session take from a VariableV2 on trust: its shape (non-negative ints)
    and dtype."""
    shape = attrs.get("shape")
    if type(shape) not in (list, tuple) or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"{where}: a VariableV2 needs a 'shape' attribute of non-negative ints, "
                         f"got {short(shape)}")
    dtype = attrs.get("dtype")
    if isinstance(dtype, str):
        _parse_dtype(dtype, f"{where} attribute 'dtype'")
    elif not isinstance(dtype, np.dtype):
        raise ValueError(f"{where}: a VariableV2 needs a 'dtype' attribute, got {short(dtype)}")


def _decode_item(graph, variables, item, where):
    if not isinstance(item, dict) or len(item) != 1:
        raise ValueError(f"{where} must be an object with one key")
    (tag, value), = item.items()
    if tag == "variable":
        if value not in variables:
            raise ValueError(f"{where} names {value!r}, which is not in the 'variables' list")
        return variables[value]
    if tag == "operation" and isinstance(value, str):
        return graph.get_operation_by_name(value)
    if tag == "tensor" and isinstance(value, str):
        return graph.get_tensor_by_name(value)
    if tag == "value":
        return _decode_value(value, where)
    raise ValueError(f"{where}: unknown entry {item!r}")


def _decode_shape(output, where):
    shape = _field(output, "shape", (list, type(None)), f"{where} output")
    if shape is None:
        return None
    if not all(d is None or type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"{where}: invalid output shape {shape!r}")
    return tuple(shape)


def _decode_dtype(output, where):
    dtype = _field(output, "dtype", (str, type(None)), f"{where} output")
    return None if dtype is None else _parse_dtype(dtype, where)


def _parse_dtype(text, where):
    try:
        dtype = np.dtype(text)
    except TypeError:
        raise ValueError(f"{where}: unknown dtype {text!r}") from None
    if dtype.hasobject or dtype.fields is not None or dtype.kind == "V":
        raise ValueError(f"{where}: unsupported dtype {text!r}")
    return dtype


def _decode_value(value, where):
    if value is None or type(value) in (bool, str, int):
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise ValueError(f"{where} is not finite")
        return value
    if type(value) is list:
        return [_decode_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if type(value) is not dict or len(value) != 1 or next(iter(value)) not in _ATTR_TAGS:
        raise ValueError(f"{where}: unrecognised value {short(value)} (expected JSON scalars, "
                         f"lists, or an object with one of the keys {list(_ATTR_TAGS)})")
    (tag, body), = value.items()
    if tag == "tuple" and type(body) is list:
        return tuple(_decode_value(v, f"{where}[{i}]") for i, v in enumerate(body))
    if tag == "dict" and type(body) is dict:
        return {k: _decode_value(v, f"{where}[{k!r}]") for k, v in body.items()}
    if tag == "dtype" and type(body) is str:
        return _parse_dtype(body, where)
    if tag in ("ndarray", "scalar") and type(body) is dict:
        array = _decode_array(body, where)
        return array if tag == "ndarray" else array[()]
    raise ValueError(f"{where}: malformed {tag!r} value {short(body)}")


def _decode_array(body, where):
    dtype = _parse_dtype(_field(body, "dtype", str, where), where)
    shape = _field(body, "shape", list, where)
    if not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"{where}: invalid array shape {shape!r}")
    try:
        data = base64.b64decode(_field(body, "data", str, where), validate=True)
    except ValueError as error:
        raise ValueError(f"{where}: array data is not valid base64 ({error})") from None
    expected = math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(f"{where}: array data has {len(data)} bytes, shape {shape} of {dtype} "
                         f"needs {expected}")
    array = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    array.setflags(write=False)
    return array


# -- variables ------------------------------------------------------------------------------
def save_variables(session: Session, path: Union[str, os.PathLike[str]],
                   var_list: Optional[Sequence[Any]] = None) -> str:
    """Writes variable values from a session to an .npz file, keyed by op name, bit for bit.

    Parameters
    ----------
    session : Session
        Holds the values.
    path : str or os.PathLike
        The file to write (atomically).
    var_list : list of Variable, Operation or str, optional
        The variables (default: every variable of the session's graph).

    Returns
    -------
    str
        The path written.

    Raises
    ------
    TypeError
        `session` is not a Session.
    ValueError
        An unknown or uninitialized variable.
    OSError
        The file cannot be written.

    Examples
    --------
    >>> import os, tempfile
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 2], name="x")
    ...     y = G.layers.dense(x, 1, scope="fc")
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> folder = tempfile.mkdtemp()
    >>> path = G.save_variables(session, os.path.join(folder, "values.npz"))
    >>> os.path.basename(path)
    'values.npz'
    """
    _check_session(session)
    path = _output_path(path, "path")
    values = _collect_values(session, _variable_names(session.graph, var_list))
    _write_variables(path, values)
    return path


def _collect_values(session, names):
    values, uninitialized = {}, []
    for name in names:
        try:
            values[name] = np.asarray(session.variable_value(name))
        except ValueError:
            uninitialized.append(name)
    if uninitialized:
        raise ValueError(f"cannot save variables that are not initialized in the session: "
                         f"{uninitialized}")
    for name, value in values.items():
        if value.dtype.hasobject or value.dtype.fields is not None:
            raise TypeError(f"variable {name!r} holds a {value.dtype} value, which cannot be saved")
    return values


def _write_variables(path, values, graph_data=None):
    """The variables file; with `graph_data` (a checkpoint's graph file bytes), their SHA-256 in
    the metadata and a copy of them."""
    meta = {"format": VARIABLES_FORMAT, "version": VARIABLES_VERSION, "variables": list(values)}
    entries = []
    if graph_data is not None:
        meta["graph_sha256"] = hashlib.sha256(graph_data).hexdigest()
        entries.append((_GRAPH_KEY, np.frombuffer(graph_data, dtype=np.uint8)))
    meta_array = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    entries = [(_META_KEY, meta_array)] + entries + list(values.items())

    def write(f):
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
            for key, array in entries:
                with archive.open(key + ".npy", "w", force_zip64=True) as member:
                    if not array.flags.c_contiguous:
                        array = np.copy(array, order="C")
                    np.lib.format.write_array(member, array, allow_pickle=False)
    write_atomically(path, write)


def load_variables(session: Session, path: Union[str, os.PathLike[str]],
                   var_list: Optional[Sequence[Any]] = None, strict: bool = True) -> LoadResult:
    """Sets a session's variables from an .npz file by name.

    Nothing is set unless everything checks out; shapes and dtypes must match exactly.

    Parameters
    ----------
    session : Session
        The session to set.
    path : str or os.PathLike
        A file from :func:`save_variables` or :func:`save`.
    var_list : list of Variable, Operation or str, optional
        The variables to set (default: every variable of the session's graph).
    strict : bool, default True
        True: each of them must be in the file and every entry of the file must be one of them.
        False: load the names both have (e.g. trained weights into an eval graph, which lacks the
        optimizer slots, EMA shadows and step counter).

    Returns
    -------
    LoadResult
        ``(loaded, missing, unexpected)``: the names set, the requested variables absent from the
        file, the file's entries not requested.

    Raises
    ------
    ValueError
        A mismatch with strict=True, a shape or dtype that differs, or
        anything wrong with the file's content, naming the file and the entry (files are untrusted
        input).
    OSError
        The file cannot be read.

    Examples
    --------
    >>> import os, tempfile
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 2], name="x")
    ...     y = G.layers.dense(x, 1, scope="fc")
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> folder = tempfile.mkdtemp()
    >>> path = G.save_variables(session, os.path.join(folder, "values.npz"))
    >>> fresh = G.Session(g)
    >>> G.load_variables(fresh, path).loaded
    ['fc/weights', 'fc/biases']
    """
    _check_session(session)
    path = _input_path(path, "path", "variables")
    with NpzArchive(path, "variables file") as archive:
        _, names = _metadata(path, archive)
        return _set_variables(session, path, archive, names, var_list, strict)


def _set_variables(session, path, archive, names, var_list, strict):
    """Sets the variables from the open variables file `archive`, whose variable entries are
    `names`: each entry's .npy header is checked against the graph's shape and dtype before any
    data is read, and every value is read before any is set."""
    targets = _variable_names(session.graph, var_list)
    target_set, in_file = set(targets), set(names)
    missing = [n for n in targets if n not in in_file]
    unexpected = [n for n in names if n not in target_set]
    if strict and (missing or unexpected):
        parts = []
        if missing:
            parts.append(f"missing from the file: {missing}")
        if unexpected:
            whose = "the graph's variables" if var_list is None else "var_list"
            parts.append(f"in the file but not among {whose}: {unexpected}")
        raise ValueError(f"{path} does not match the variables to load (strict=True): "
                         + "; ".join(parts) + ". Pass strict=False to load the names both have.")
    loaded = [n for n in targets if n in in_file]
    dtypes, mismatched = {}, []
    for name in loaded:
        op = session.graph.get_operation_by_name(name)
        shape, dtype = tuple(op.attrs["shape"]), np.dtype(op.attrs["dtype"])
        file_shape, file_dtype = archive.header(name)
        # A byte-swapped copy of the graph's dtype is converted when read.
        if file_shape != shape or dtype not in (file_dtype, file_dtype.newbyteorder("=")):
            mismatched.append(f"{name!r}: file {file_dtype}{list(file_shape)}, "
                              f"graph {dtype}{list(shape)}")
        dtypes[name] = dtype
    if mismatched:
        raise ValueError(f"{path}: variables whose shape or dtype differ from the graph's: "
                         + "; ".join(mismatched))
    values = {name: archive.read(name).astype(dtypes[name], copy=False) for name in loaded}
    for name, value in values.items():
        session.set_variable_value(name, value)
    return LoadResult(loaded, missing, unexpected)


def _metadata(path, archive):
    """(metadata, variable entry names) of an open variables file; plain .npz files (no
    metadata) give ({}, every entry)."""
    meta = {}
    if _META_KEY in archive.names:
        raw = archive.read(_META_KEY).tobytes()
        try:
            meta = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as error:
            raise ValueError(f"{path}: corrupt {_META_KEY!r} entry ({error})") from None
        if not isinstance(meta, dict) or meta.get("format") != VARIABLES_FORMAT:
            raise ValueError(f"{path}: the {_META_KEY!r} entry is not fqcore variables "
                             f"metadata")
        _check_version(path, meta.get("version"), VARIABLES_VERSION)
    names = [n for n in archive.names if n not in (_META_KEY, _GRAPH_KEY)]
    listed = meta.get("variables", names)
    if not isinstance(listed, list) or not all(type(n) is str for n in listed) or \
            sorted(listed) != sorted(names):
        raise ValueError(f"{path}: the entries {names} do not match the variables the "
                         f"metadata lists ({short(listed)}); the file is corrupt")
    return meta, listed


def _variable_names(graph, var_list):
    if var_list is None:
        return [op.name for op in graph.get_operations() if op.type == "VariableV2"]
    if isinstance(var_list, (str, Variable, Operation)):
        raise TypeError(f"var_list must be a list of variables, got a single "
                        f"{type(var_list).__name__} {var_list!r}")
    names = []
    for item in var_list:
        if isinstance(item, Variable):
            op = item.op
        elif isinstance(item, Operation):
            op = item
        elif isinstance(item, str):
            try:
                op = graph.get_operation_by_name(item)
            except KeyError:
                raise ValueError(f"var_list names {item!r}, which is not an operation of the "
                                 f"session's graph") from None
        else:
            raise TypeError(f"var_list items must be Variables, VariableV2 ops or names, got "
                            f"{type(item).__name__} {item!r}")
        if op.graph is not graph or graph._ops.get(op.name) is not op:
            raise ValueError(f"var_list item {op.name!r} is not from the session's graph")
        if op.type != "VariableV2":
            raise ValueError(f"var_list item {op.name!r} is a {op.type}, not a variable")
        if op.name not in names:
            names.append(op.name)
    return names


def _check_session(session):
    from .session import Session
    if not isinstance(session, Session):
        raise TypeError(f"session must be an fqcore.graph.Session, got {type(session).__name__}")


# -- both -----------------------------------------------------------------------------------
def checkpoint_paths(directory_or_prefix):
    """(graph JSON path, variables .npz path): `<prefix>.graph.json` and `<prefix>.npz`, or
    `checkpoint.graph.json` and `checkpoint.npz` inside a directory (an existing one, or any
    path ending with a separator)."""
    path = _path_argument(directory_or_prefix, "directory_or_prefix")
    separators = tuple(s for s in (os.sep, os.altsep) if s)
    if path.endswith(separators) or os.path.isdir(path):
        path = os.path.join(path, DEFAULT_BASENAME)
    return path + GRAPH_SUFFIX, path + VARIABLES_SUFFIX


def save(session: Session, directory_or_prefix: Union[str, os.PathLike[str]]) -> Tuple[str, str]:
    """Saves a session's graph and all its variables side by side, atomically.

    The variables file goes first and holds a copy of the graph: once it is in place the save has
    happened, and :func:`restore` gives the new checkpoint even if the graph file beside it is still
    the old one.

    Parameters
    ----------
    session : Session
        The session to save.
    directory_or_prefix : str or os.PathLike
        ``<prefix>.graph.json`` and ``<prefix>.npz``, or ``checkpoint.graph.json`` and
        ``checkpoint.npz`` inside a directory (an existing one, or any path ending with a
        separator, which is created).

    Returns
    -------
    tuple of str
        ``(graph path, variables path)``.

    Raises
    ------
    TypeError
        `session` is not a Session.
    ValueError
        An uninitialized variable.
    OSError
        The files cannot be written.

    Examples
    --------
    >>> import os, tempfile
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 2], name="x")
    ...     y = G.layers.dense(x, 1, scope="fc")
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> folder = tempfile.mkdtemp()
    >>> graph_path, variables_path = G.save(session, os.path.join(folder, "run") + os.sep)
    >>> os.path.basename(graph_path), os.path.basename(variables_path)
    ('checkpoint.graph.json', 'checkpoint.npz')
    """
    _check_session(session)
    graph_path, variables_path = checkpoint_paths(directory_or_prefix)
    directory = os.path.dirname(graph_path)
    if os.fspath(directory_or_prefix).endswith(tuple(s for s in (os.sep, os.altsep) if s)):
        os.makedirs(directory, exist_ok=True)
    graph_path = _output_path(graph_path, "directory_or_prefix")
    variables_path = _output_path(variables_path, "directory_or_prefix")
    # Everything that can fail on bad content fails before the first file is replaced.
    data = _dump_graph(session.graph)
    values = _collect_values(session, _variable_names(session.graph, None))
    _write_variables(variables_path, values, data)
    write_atomically(graph_path, lambda f: f.write(data))
    return graph_path, variables_path


def restore(directory_or_prefix: Union[str, os.PathLike[str]]) -> Tuple[Graph, Session]:
    """``(graph, session)`` from a checkpoint written by :func:`save`: the graph rebuilt, a new
    Session with every variable set (strict: the files must agree).

    Parameters
    ----------
    directory_or_prefix : str or os.PathLike
        As given to :func:`save`.

    Returns
    -------
    tuple
        ``(Graph, Session)``.

    Raises
    ------
    ValueError
        Anything wrong with the file's content, naming the file and the entry (files are untrusted
        input).
    OSError
        The file cannot be read.

    Examples
    --------
    >>> import os, tempfile
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 2], name="x")
    ...     y = G.layers.dense(x, 1, scope="fc")
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> folder = tempfile.mkdtemp()
    >>> _ = G.save(session, os.path.join(folder, "model"))
    >>> graph, restored = G.restore(os.path.join(folder, "model"))
    >>> bool((restored.variable_value("fc/weights") == session.variable_value("fc/weights")).all())
    True
    """
    from .session import Session
    graph_path, variables_path = checkpoint_paths(directory_or_prefix)
    variables_path = _input_path(variables_path, "directory_or_prefix", "variables")
    with NpzArchive(variables_path, "variables file") as archive:
        meta, names = _metadata(variables_path, archive)
        has_copy = _GRAPH_KEY in archive.names
        saved_with = meta.get("graph_sha256")
        graph_data = None
        if not has_copy or os.path.isfile(graph_path):
            with _open_for_reading(_input_path(graph_path, "directory_or_prefix", "graph"),
                                   "graph") as f:
                graph_data = f.read()
        if has_copy and (graph_data is None
                         or hashlib.sha256(graph_data).hexdigest() != saved_with):
            # A save interrupted after its commit point: the graph is the copy in the variables
            # file.
            graph_copy = archive.read(_GRAPH_KEY).tobytes()
            graph, _ = _parse_graph(graph_copy, f"{variables_path} ({_GRAPH_KEY})")
        else:
            graph, digest = _parse_graph(graph_data, graph_path)
            if saved_with not in (None, digest):
                raise ValueError(f"{variables_path} was saved with a different graph than the "
                                 f"one beside it, and holds no copy of its own")
        session = Session(graph)
        _set_variables(session, variables_path, archive, names, None, True)
    return graph, session


# -- files ----------------------------------------------------------------------------------
def _path_argument(path, argument):
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"{argument} must be a str or os.PathLike path, got "
                        f"{type(path).__name__} {path!r}")
    if not path or "\0" in path:
        raise ValueError(f"{argument} must be a non-empty path without NUL characters, "
                         f"got {path!r}")
    return path


def _output_path(path, argument) -> str:
    path = _path_argument(path, argument)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"{argument} {path!r} is a directory, not a file",
                                path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(errno.ENOENT, f"{argument} {path!r}: the directory does not "
                                f"exist", directory)
    return path


def _input_path(path, argument, what):
    path = _path_argument(path, argument)
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, f"no {what} file at {argument} {path!r}", path)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"{argument} {path!r} is a directory, not a "
                                f"{what} file", path)
    return path


def _open_for_reading(path, what):
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, f"no {what} file at {path!r}", path) from None


