"""A graph as plain, documented, GraphDef-like JSON: graph_to_json / graph_from_json and files.

The format is meant to be written by hand or by a converter from a TensorFlow GraphDef (the
checkpoint format of fqcore.graph.checkpoint is the exact one for saving training state).

The document (UTF-8 JSON; the writer puts one node per line)::

    {"format": "fqcore-graph",                       required, exactly this string
     "version": 1,                                   required, exactly 1
     "node": [                                       required, the ops in creation order
       {"name": "conv1/Conv2D",                      required, unique; letters, digits, . _ - /
                                                     (no '.' or '..' between slashes)
        "op": "Conv2D",                              required, a registered fqcore op type
        "input": ["images", "conv1/weights/read",    optional (default []), see below
                  "^init"],
        "attr": {"strides": [1, 1, 1, 1], ...},      optional (default {}), see below
        "device": ""},                               optional, ignored (TF writes it)
       ...],
     "collections": {                                optional (default {})
       "variables": [{"variable": {"variable_name": "conv1/weights:0",
                                   "initializer_name": "conv1/weights/Assign",
                                   "snapshot_name": "conv1/weights/read:0",
                                   "trainable": true}}, ...],
       "update_ops": [{"operation": "conv1/BatchNorm/AssignMovingAvg"}, ...],
       "serving_outputs": [{"tensor": "logits/BiasAdd:0"}],
       "anything": [{"value": <an attr value>}]},
     "names_in_use": {"conv1": 1, "add": 3, ...},     optional: the unique-name counters
     "seed": 0,                                      optional: Graph.seed (int)
     "init_rng": {"bit_generator": "PCG64", ...}}    optional: the initializer stream's state

No other fields are allowed, at the top level or in a node.

Nodes. `node` lists the ops in creation order, which need not be topological (a rewrite reroutes
inputs to ops created later): the reader wires inputs after creating every op, and the session
runs ops that are ready at the same time in this order, so keep it when converting. Inputs follow
TF's GraphDef convention: "name" is output 0 of node `name`, "name:k" its output k ("name:0" is
accepted too), "^name" a control input (the node runs after `name`); control inputs come after
all data inputs. Output shapes and dtypes are not stored: the reader rebuilds them with each op
type's shape inference from the registry (fqcore.graph.op_registry), in dependency order, so a
node's attributes must be what its op type reads (see fqcore/graph/op_defs and build.py: e.g.
Conv2D needs "strides": [1, h, w, 1], "padding": "SAME" | "VALID"; Placeholder "dtype" and
"shape" (null, or a list of ints and nulls for unknown dimensions; TF's -1 must become null);
VariableV2 "dtype" and "shape"; Const "value" (an array) and "dtype"; Cast "DstT").

Attribute values (and collection "value" items):
    null, true/false, JSON integers (any size, exact), strings, finite numbers (Python floats:
    the shortest repr round-trips exactly), and lists of these (nested to any depth);
    {"float": "nan" | "inf" | "-inf"}            a non-finite Python float;
    {"dtype": "float32", "shape": [2, 3], "data": [...]}   a numpy array (Const values, hence
    variables' initial values), `data` flat in C order with shape-product elements; dtypes:
    bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64.
    Booleans are true/false; integers are JSON integers, exact at any width (int64 included);
    floats are JSON numbers, written as the float64 value of each element (exact for float16,
    float32 and float64: reading converts back without loss, -0.0 included) or the strings
    "nan", "inf", "-inf" (NaN sign and payload are not kept). A 0-d array has shape [] and one
    element. Arrays read back are read-only, as build.constant makes them.
Dtype-valued attributes ("dtype", "DstT", "SrcT", "T") are numpy dtype names from the list above
(TF's DT_FLOAT is "float32", DT_INT32 "int32", DT_INT64 "int64", DT_BOOL "bool"). Python tuples,
dicts, numpy scalars and other objects are not attribute values here: graph_to_json refuses them
(TypeError naming the op and the attribute); fqcore.graph.checkpoint's format keeps them.

Collections map a key to a list of items: {"operation": node name}, {"tensor": "name:k"} (TF's
tensor names; "name" alone means output 0), {"variable": {...}} with TF's VariableDef fields
(variable_name: the VariableV2 node's tensor, snapshot_name: the tensor consumers read,
initializer_name: the op that sets the initial value or null, trainable: bool; the same
variable in several collections must have the same definition and is one Variable object), or
{"value": an attribute value}.

names_in_use: TF's counters that make names unique (lower-cased name -> count). When absent they
are rebuilt from the node names and their scopes, which gives the same next names for any graph
built through name scopes; graph_to_json always writes them.

Reading a document validates everything and raises ValueError naming the node (index and name) and
the field, never anything else: unknown format or version, unknown fields, unknown op types,
missing or out-of-range inputs, duplicate names, bad dtypes, malformed arrays, attributes an op's
shape inference cannot use, data-input cycles, bad collections. read_graph_json prefixes its errors
with the path. write_graph_json replaces its file atomically (fqcore.atomic_file): an error or an
interrupt midway leaves the previous file as it was.
"""
from __future__ import annotations

import json
import math
import os
from typing import Union

import numpy as np

from ..atomic_file import write_atomically
from .core import NAME_RULE, is_valid_name
from .core import Graph, Operation, Tensor
from .graph_state import check_member, decode_rng, short
from .op_registry import op_def
from .variables import Variable

__all__ = ["graph_to_json", "graph_from_json", "write_graph_json", "read_graph_json",
           "encode_value", "decode_value", "FORMAT", "VERSION", "DTYPES"]

FORMAT = "fqcore-graph"
VERSION = 1
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64")
_DTYPE_ATTRS = ("dtype", "DstT", "SrcT", "T")
_TOP_FIELDS = ("format", "version", "node", "collections", "names_in_use", "seed", "init_rng")
_NODE_FIELDS = ("name", "op", "input", "attr", "device")
_ARRAY_KEYS = frozenset(("dtype", "shape", "data"))
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


# -- writing --------------------------------------------------------------------------------
def graph_to_json(graph: Graph) -> str:
    """The JSON document of a graph (see the module docstring for the format), as a str.

    Deterministic: the same graph always gives the same text.

    Parameters
    ----------
    graph : Graph
        The graph.

    Returns
    -------
    str
        The document, one node per line.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     y = G.relu(G.placeholder("float32", [None], name="x"))
    >>> print(G.graph_to_json(g).splitlines()[0])
    {"format": "fqcore-graph", "version": 1,
    """
    return "".join(_lines(graph))


def write_graph_json(graph: Graph, path: Union[str, os.PathLike[str]]
                     ) -> Union[str, os.PathLike[str]]:
    """Writes ``graph_to_json(graph)`` to a file, atomically (UTF-8).

    Parameters
    ----------
    graph : Graph
        The graph.
    path : str or os.PathLike
        The file to write.

    Returns
    -------
    str or os.PathLike
        `path`, as given.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     y = G.relu(G.placeholder("float32", [None], name="x"))
    >>> import os, tempfile
    >>> path = G.write_graph_json(g, os.path.join(tempfile.mkdtemp(), "g.json"))
    >>> [op.name for op in G.read_graph_json(path).get_operations()]
    ['x', 'Relu']
    """
    path = _output_path(path)
    lines = _lines(graph)
    first = next(lines)  # the graph argument is checked before any file is created

    def write(f):
        f.write(first.encode("utf-8"))
        for line in lines:
            f.write(line.encode("utf-8"))
    write_atomically(path, write)
    return path


def _lines(graph):
    """The document in pieces (a generator: the atomic writer streams them)."""
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be an fqcore.graph.Graph, got {type(graph).__name__} "
                        f"{graph!r}")
    yield f'{{"format": {_dumps(FORMAT)}, "version": {VERSION},\n "node": [\n'
    ops = graph.get_operations()
    for i, op in enumerate(ops):
        yield f"  {_dumps(_encode_node(graph, op))}{',' if i + 1 < len(ops) else ''}\n"
    yield " ],\n"
    collections = _encode_collections(graph)
    yield ' "collections": {' + ("\n" if collections else "")
    for i, (key, items) in enumerate(collections):
        yield f"  {_dumps(key)}: {_dumps(items)}{',' if i + 1 < len(collections) else ''}\n"
    yield (" },\n" if collections else "},\n")
    yield f' "names_in_use": {_dumps(graph._names_in_use)}'
    seed = graph.seed
    if seed is not None:
        if type(seed) is not int:
            raise TypeError(f"graph.seed must be an int or None to be written, got {seed!r}")
        yield f',\n "seed": {seed}'
    if graph._init_rng is not None:
        if not isinstance(graph._init_rng, np.random.Generator):
            raise TypeError(f"the graph's initializer stream is a {type(graph._init_rng).__name__}"
                            f", not a numpy Generator")
        yield f',\n "init_rng": {_dumps(_plain(graph._init_rng.bit_generator.state))}'
    yield "\n}\n"


def _dumps(value):
    return json.dumps(value, allow_nan=False, ensure_ascii=True)


def _encode_node(graph, op):
    inputs = []
    for i, t in enumerate(op.inputs):
        check_member(graph, getattr(t, "op", None), f"input {i} ({t!r}) of operation {op.name!r}")
        inputs.append(_input_name(t))
    for i, c in enumerate(op.control_inputs):
        check_member(graph, c, f"control input {i} ({c!r}) of operation {op.name!r}")
        inputs.append("^" + c.name)
    attrs = {}
    for key, value in op.attrs.items():
        if not isinstance(key, str):
            raise TypeError(f"operation {op.name!r} has a non-string attribute key {key!r}")
        where = f"operation {op.name!r} attribute {key!r}"
        if key in _DTYPE_ATTRS and value not in DTYPES:  # what the reader would refuse
            raise TypeError(f"{where} is {short(value)}; dtype attributes must be one of "
                            f"{', '.join(DTYPES)}")
        attrs[key] = encode_value(value, where)
    node = {"name": op.name, "op": op.type}
    if inputs:
        node["input"] = inputs
    if attrs:
        node["attr"] = attrs
    return node


def _input_name(tensor):
    """A tensor as a GraphDef input: "name" for output 0, "name:k" for output k."""
    return tensor.op.name if tensor.index == 0 else f"{tensor.op.name}:{tensor.index}"


def encode_value(value, where="value"):
    """An attribute value as JSON (see the module docstring); TypeError naming `where` for a
    type the format has no encoding for."""
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        if math.isnan(value):
            return {"float": "nan"}
        if math.isinf(value):
            return {"float": "inf" if value > 0 else "-inf"}
        return value
    if type(value) is list:
        return [encode_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, np.ndarray):
        return _encode_array(value, where)
    raise TypeError(f"{where} is a {type(value).__name__} ({short(value)}), which this JSON "
                    f"format cannot hold: attribute values are None, bool, int, float, str, "
                    f"numpy arrays of {', '.join(DTYPES)}, or lists of those")


def _encode_array(array, where):
    name = array.dtype.name
    if name not in DTYPES:
        raise TypeError(f"{where} is an array of dtype {array.dtype}; this JSON format holds "
                        f"{', '.join(DTYPES)}")
    flat = np.ascontiguousarray(array).reshape(-1)
    if array.dtype.kind == "f":
        data = flat.astype(np.float64).tolist()
        if not np.isfinite(flat).all():
            data = [v if math.isfinite(v) else ("nan" if math.isnan(v) else
                                                "inf" if v > 0 else "-inf") for v in data]
    else:
        data = flat.tolist()
    return {"dtype": name, "shape": [int(d) for d in array.shape], "data": data}


def _encode_collections(graph):
    out = []
    for key in graph.get_all_collection_keys():
        if not isinstance(key, str):
            raise TypeError(f"collection key {key!r} is not a string; only str keys can be "
                            f"written")
        items = []
        for index, item in enumerate(graph.get_collection(key)):
            where = f"collection {key!r} item {index}"
            if isinstance(item, Variable):
                check_member(graph, item.op, f"{where} (variable {item.op.name!r})")
                check_member(graph, getattr(item.read, "op", None),
                              f"{where}: the read tensor of variable {item.op.name!r}")
                if item.initializer is not None:
                    check_member(graph, item.initializer,
                                  f"{where}: the initializer of variable {item.op.name!r}")
                items.append({"variable": {
                    "variable_name": item.op.outputs[0].name,
                    "initializer_name": (None if item.initializer is None
                                         else item.initializer.name),
                    "snapshot_name": item.read.name,
                    "trainable": bool(item.trainable)}})
            elif isinstance(item, Operation):
                check_member(graph, item, where)
                items.append({"operation": item.name})
            elif isinstance(item, Tensor):
                check_member(graph, item.op, where)
                items.append({"tensor": item.name})
            else:
                items.append({"value": encode_value(item, where)})
        out.append((key, items))
    return out


def _plain(value):
    """A bit generator's state as JSON-able values (numpy arrays and ints become lists/ints)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


# -- reading --------------------------------------------------------------------------------
def read_graph_json(path: Union[str, os.PathLike[str]]) -> Graph:
    """The Graph in a JSON file.

    Parameters
    ----------
    path : str or os.PathLike
        A file in the format of the module docstring (e.g. from :func:`write_graph_json`).

    Returns
    -------
    Graph
        A new graph.

    Raises
    ------
    ValueError
        Anything wrong in the file, naming the path, the node and the field.
    OSError
        The file cannot be read.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     y = G.relu(G.placeholder("float32", [None], name="x"))
    >>> import os, tempfile
    >>> path = G.write_graph_json(g, os.path.join(tempfile.mkdtemp(), "g.json"))
    >>> G.read_graph_json(path).get_operation_by_name("Relu").type
    'Relu'
    """
    path = _input_path(path)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error})") from None
    try:
        return graph_from_json(text)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def graph_from_json(text: Union[str, bytes]) -> Graph:
    """The Graph a JSON document describes (see the module docstring for the format).

    Parameters
    ----------
    text : str or bytes
        The document (bytes as UTF-8).

    Returns
    -------
    Graph
        A new graph.

    Raises
    ------
    ValueError
        Anything wrong in the document, naming the node and the field.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.graph_from_json('''{"format": "fqcore-graph", "version": 1, "node": [
    ...     {"name": "x", "op": "Placeholder", "attr": {"dtype": "float32", "shape": [null]}},
    ...     {"name": "y", "op": "Relu6", "input": ["x"]}]}''')
    >>> G.Session(g).run("y:0", {"x:0": [-1.0, 7.0]})
    array([0., 6.], dtype=float32)
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"text is not UTF-8 ({error})") from None
    if not isinstance(text, str):
        raise TypeError(f"text must be a str (or UTF-8 bytes) holding a JSON graph, got "
                        f"{type(text).__name__}")
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"not valid JSON ({error})") from None
    try:
        return _Reader(doc).graph
    except RecursionError:
        raise ValueError("the document is nested too deeply") from None


def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name} (write {{\"float\": \"nan\"}} or the "
                     f"strings \"nan\", \"inf\", \"-inf\" in array data)")


class _Reader:
    """Builds the graph of one document, validating as it goes."""

    def __init__(self, doc):
        if not isinstance(doc, dict):
            raise ValueError(f"the document must be a JSON object, got {type(doc).__name__}")
        unknown = [k for k in doc if k not in _TOP_FIELDS]
        if unknown:
            raise ValueError(f"unknown top-level field {unknown[0]!r} (allowed: "
                             f"{list(_TOP_FIELDS)})")
        if doc.get("format") != FORMAT:
            raise ValueError(f"field 'format': expected {FORMAT!r}, got "
                             f"{short(doc.get('format'))}")
        version = doc.get("version")
        if type(version) is not int or version != VERSION:
            raise ValueError(f"field 'version': this fqcore reads version {VERSION}, got "
                             f"{short(version)}")
        nodes = doc.get("node")
        if not isinstance(nodes, list):
            raise ValueError(f"field 'node' must be a list of nodes, got {short(nodes)}")
        self.graph = Graph()
        parsed = [self._parse_node(i, entry) for i, entry in enumerate(nodes)]
        self._check_names(parsed)
        specs = self._infer(parsed)
        self._build(parsed, specs)
        self._collections(doc.get("collections", {}))
        self._state(doc, parsed)

    # nodes
    def _parse_node(self, index, entry):
        where = f"node {index}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: must be a JSON object, got {short(entry)}")
        name = entry.get("name")
        if isinstance(name, str):
            where = f"node {index} ({name!r})"
        unknown = [k for k in entry if k not in _NODE_FIELDS]
        if unknown:
            raise ValueError(f"{where} field {unknown[0]!r}: unknown field (allowed: "
                             f"{list(_NODE_FIELDS)})")
        if not is_valid_name(name):
            raise ValueError(f"{where} field 'name': must be a string of {NAME_RULE}, got "
                             f"{short(name)}")
        op_type = entry.get("op")
        if not isinstance(op_type, str):
            raise ValueError(f"{where} field 'op': must be a string, got {short(op_type)}")
        try:
            definition = op_def(op_type)
        except ValueError as error:
            raise ValueError(f"{where} field 'op': {error}") from None
        if not isinstance(entry.get("device", ""), str):
            raise ValueError(f"{where} field 'device': must be a string")
        raw_inputs = entry.get("input", [])
        if not isinstance(raw_inputs, list):
            raise ValueError(f"{where} field 'input': must be a list of strings, got "
                             f"{short(raw_inputs)}")
        inputs, controls = [], []
        for i, text in enumerate(raw_inputs):
            field = f"{where} field 'input'[{i}]"
            if not isinstance(text, str):
                raise ValueError(f"{field}: must be a string, got {short(text)}")
            if text.startswith("^"):
                if not is_valid_name(text[1:]):
                    raise ValueError(f"{field}: {text!r} is not '^<node name>'")
                controls.append((i, text[1:]))
                continue
            if controls:
                raise ValueError(f"{field}: data input {text!r} after a control input (control "
                                 f"inputs '^name' come last)")
            source, sep, k = text.rpartition(":")
            if not sep:
                source, k = text, "0"
            if not is_valid_name(source) or not k.isdigit() or (len(k) > 1 and k[0] == "0"):
                raise ValueError(f"{field}: {text!r} is not 'name', 'name:k' or '^name'")
            inputs.append((i, source, int(k)))
        raw_attrs = entry.get("attr", {})
        if not isinstance(raw_attrs, dict):
            raise ValueError(f"{where} field 'attr': must be an object, got {short(raw_attrs)}")
        attrs = {key: decode_value(value, f"{where} field 'attr'[{key!r}]")
                 for key, value in raw_attrs.items()}
        _check_attrs(op_type, attrs, where)
        return _Node(index, where, name, op_type, definition, inputs, controls, attrs)

    def _check_names(self, parsed):
        self.by_name = {}
        for node in parsed:
            first = self.by_name.setdefault(node.name, node)
            if first is not node:
                raise ValueError(f"{node.where} field 'name': duplicate of node {first.index}")
        for node in parsed:
            for i, source, _ in node.inputs:
                if source not in self.by_name:
                    raise ValueError(f"{node.where} field 'input'[{i}]: no node named "
                                     f"{source!r}")
            for i, source in node.controls:
                if source not in self.by_name:
                    raise ValueError(f"{node.where} field 'input'[{i}]: no node named "
                                     f"{source!r} (control input)")

    def _infer(self, parsed):
        """Output (shape, dtype) lists by shape inference, in data-dependency order, on scratch
        operations that never join the graph."""
        waiting = {node.name: len({s for _, s, _ in node.inputs}) for node in parsed}
        users = {node.name: [] for node in parsed}
        for node in parsed:
            for source in {s for _, s, _ in node.inputs}:
                users[source].append(node)
        ready = [node for node in parsed if waiting[node.name] == 0]
        scratch = {}
        while ready:
            node = ready.pop()
            scratch[node.name] = self._infer_node(node, scratch)
            for user in users[node.name]:
                waiting[user.name] -= 1
                if waiting[user.name] == 0:
                    ready.append(user)
        if len(scratch) != len(parsed):
            stuck = next(node for node in parsed if node.name not in scratch)
            raise ValueError(f"{stuck.where} field 'input': the data inputs form a cycle "
                             f"through this node")
        return {name: [(t.shape, t.dtype) for t in op.outputs] for name, op in scratch.items()}

    def _infer_node(self, node, scratch):
        inputs = []
        for i, source, k in node.inputs:
            outputs = scratch[source].outputs
            if k >= len(outputs):
                raise ValueError(f"{node.where} field 'input'[{i}]: node {source!r} "
                                 f"({scratch[source].type}) has {len(outputs)} output"
                                 f"{'' if len(outputs) == 1 else 's'}, no output {k}")
            inputs.append(outputs[k])
        for position in node.definition.ref_inputs:
            if position < len(inputs) and (inputs[position].op.type != "VariableV2" or
                                           inputs[position].index != 0):
                i = node.inputs[position][0]
                raise ValueError(f"{node.where} field 'input'[{i}]: a {node.op_type} writes "
                                 f"its input {position}, which must be a VariableV2 node, got "
                                 f"{inputs[position].op.name!r} ({inputs[position].op.type})")
        try:
            specs = node.definition.infer(inputs, node.attrs)
            return Operation(self.graph, node.name, node.op_type, inputs, node.attrs, specs)
        except KeyError as error:
            raise ValueError(f"{node.where} field 'attr': {node.op_type} needs attribute "
                             f"{error.args[0]!r}") from None
        except Exception as error:  # whatever an inference function trips over: bad input
            raise ValueError(f"{node.where} fields 'input'/'attr': {node.op_type} cannot be built "
                             f"from these inputs and attributes ({type(error).__name__}: "
                             f"{error})") from None

    def _build(self, parsed, specs):
        graph = self.graph
        ops = {}
        for node in parsed:
            ops[node.name] = graph.create_op(node.op_type, [], node.attrs,
                                             output_specs=specs[node.name], full_name=node.name)
        for node in parsed:
            op = ops[node.name]
            op.inputs = [ops[source].outputs[k] for _, source, k in node.inputs]
            op.control_inputs = [ops[source] for _, source in node.controls]
        graph._version += 1

    # collections and state
    def _collections(self, collections):
        if not isinstance(collections, dict):
            raise ValueError(f"field 'collections' must be an object of lists, got "
                             f"{short(collections)}")
        self.variables = {}
        for key, items in collections.items():
            if not isinstance(items, list):
                raise ValueError(f"field 'collections'[{key!r}]: must be a list, got "
                                 f"{short(items)}")
            for index, item in enumerate(items):
                where = f"field 'collections'[{key!r}][{index}]"
                self.graph.add_to_collection(key, self._item(item, where))

    def _item(self, item, where):
        if not isinstance(item, dict) or len(item) != 1:
            raise ValueError(f"{where}: must be an object with one of the keys 'operation', "
                             f"'tensor', 'variable', 'value', got {short(item)}")
        (kind, body), = item.items()
        if kind == "operation":
            return self._op(body, f"{where}['operation']")
        if kind == "tensor":
            return self._tensor(body, f"{where}['tensor']")
        if kind == "value":
            return decode_value(body, f"{where}['value']")
        if kind == "variable":
            return self._variable(body, f"{where}['variable']")
        raise ValueError(f"{where}: unknown item kind {kind!r} (expected 'operation', 'tensor', "
                         f"'variable' or 'value')")

    def _op(self, name, where):
        if not isinstance(name, str) or name not in self.graph._ops:
            raise ValueError(f"{where}: {short(name)} names no node")
        return self.graph._ops[name]

    def _tensor(self, name, where):
        if not isinstance(name, str):
            raise ValueError(f"{where}: must be a tensor name 'node:k', got {short(name)}")
        source, sep, k = name.rpartition(":")
        if not sep:
            source, k = name, "0"
        if source not in self.graph._ops or not k.isdigit():
            raise ValueError(f"{where}: {name!r} names no tensor of the graph")
        outputs = self.graph._ops[source].outputs
        if int(k) >= len(outputs):
            raise ValueError(f"{where}: node {source!r} has {len(outputs)} outputs, no {name!r}")
        return outputs[int(k)]

    def _variable(self, body, where):
        if not isinstance(body, dict):
            raise ValueError(f"{where}: must be an object with variable_name, snapshot_name, "
                             f"initializer_name and trainable")
        fields = ("variable_name", "snapshot_name", "initializer_name", "trainable")
        for field in fields:
            if field not in body:
                raise ValueError(f"{where} field {field!r}: missing")
        unknown = [k for k in body if k not in fields]
        if unknown:
            raise ValueError(f"{where} field {unknown[0]!r}: unknown field (allowed: "
                             f"{list(fields)})")
        state = self._tensor(body["variable_name"], f"{where} field 'variable_name'")
        if state.op.type != "VariableV2" or state.index != 0:
            raise ValueError(f"{where} field 'variable_name': {body['variable_name']!r} is not a "
                             f"VariableV2 node's output 0 (it is a {state.op.type})")
        read = self._tensor(body["snapshot_name"], f"{where} field 'snapshot_name'")
        initializer = body["initializer_name"]
        if initializer is not None:
            initializer = self._op(initializer, f"{where} field 'initializer_name'")
        trainable = body["trainable"]
        if type(trainable) is not bool:
            raise ValueError(f"{where} field 'trainable': must be true or false, got "
                             f"{short(trainable)}")
        definition = (read, initializer, trainable)
        known = self.variables.get(state.op.name)
        if known is None:
            var = Variable(state.op, read, initializer, trainable)
            self.variables[state.op.name] = (definition, var)
            return var
        if known[0] != definition:
            raise ValueError(f"{where}: variable {state.op.name!r} was defined differently in "
                             f"an earlier item")
        return known[1]

    def _state(self, doc, parsed):
        graph = self.graph
        names = doc.get("names_in_use")
        if names is None:
            for node in parsed:
                parts = node.name.split("/")
                for end in range(1, len(parts) + 1):
                    graph._names_in_use.setdefault("/".join(parts[:end]).lower(), 1)
        else:
            if not isinstance(names, dict) or not all(
                    type(v) is int and v >= 0 for v in names.values()):
                raise ValueError(f"field 'names_in_use': must map names to non-negative ints, "
                                 f"got {short(names)}")
            graph._names_in_use = dict(names)
            for node in parsed:
                graph._names_in_use.setdefault(node.name.lower(), 1)
        if "seed" in doc:
            seed = doc["seed"]
            if seed is not None and type(seed) is not int:
                raise ValueError(f"field 'seed': must be an int or null, got {short(seed)}")
            graph.seed = seed
        if "init_rng" in doc:
            graph._init_rng = decode_rng(doc["init_rng"], "field 'init_rng'")


class _Node:
    __slots__ = ("index", "where", "name", "op_type", "definition", "inputs", "controls",
                 "attrs")

    def __init__(self, index, where, name, op_type, definition, inputs, controls, attrs):
        self.index, self.where, self.name, self.op_type = index, where, name, op_type
        self.definition, self.inputs, self.controls, self.attrs = (definition, inputs, controls,
                                                                   attrs)


def _check_attrs(op_type, attrs, where):
    """What the engine reads without checking: dtype names, and the attributes of the ops
    whose shape inference takes them on trust."""
    for key in _DTYPE_ATTRS:
        if key in attrs:
            _check_dtype_name(attrs[key], f"{where} field 'attr'[{key!r}]")
    if op_type == "Const":
        value = attrs.get("value")
        if not isinstance(value, np.ndarray):
            raise ValueError(f"{where} field 'attr'['value']: a Const needs an array "
                             f"{{\"dtype\", \"shape\", \"data\"}}, got {short(value)}")
        if "dtype" in attrs and attrs["dtype"] != value.dtype.name:
            raise ValueError(f"{where} field 'attr'['dtype']: {attrs['dtype']!r} differs from "
                             f"the value's dtype {value.dtype.name!r}")
    elif op_type in ("VariableV2", "Placeholder"):
        shape = attrs.get("shape")
        unknown_allowed = op_type == "Placeholder"
        if op_type == "VariableV2" and "dtype" not in attrs:
            raise ValueError(f"{where} field 'attr'['dtype']: a VariableV2 needs a dtype")
        if shape is None and unknown_allowed:
            return
        if not isinstance(shape, list) or not all(
                (type(d) is int and d >= 0) or (unknown_allowed and d is None) for d in shape):
            need = ("null or a list of non-negative ints and nulls" if unknown_allowed else
                    "a list of non-negative ints")
            raise ValueError(f"{where} field 'attr'['shape']: must be {need}, got "
                             f"{short(shape)}")
    elif op_type == "Cast" and "DstT" not in attrs:
        raise ValueError(f"{where} field 'attr'['DstT']: a Cast needs a destination dtype")


def _check_dtype_name(value, where):
    if value not in DTYPES:
        raise ValueError(f"{where}: unknown dtype {short(value)} (one of {', '.join(DTYPES)})")


def decode_value(value, where="value"):
    """An attribute value from its JSON (see the module docstring); ValueError naming `where`."""
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        if not math.isfinite(value):  # a literal such as 1e400
            raise ValueError(f"{where}: {value!r} is out of range for a float (write "
                             f"{{\"float\": \"inf\"}} for an infinity)")
        return value
    if type(value) is list:
        return [decode_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if type(value) is dict:
        if set(value) == {"float"}:
            if type(value["float"]) is not str or value["float"] not in _NON_FINITE:
                raise ValueError(f"{where}['float']: must be 'nan', 'inf' or '-inf', got "
                                 f"{short(value['float'])}")
            return _NON_FINITE[value["float"]]
        if set(value) == _ARRAY_KEYS:
            return _decode_array(value, where)
        raise ValueError(f"{where}: an object must be an array {{\"dtype\", \"shape\", "
                         f"\"data\"}} or {{\"float\": \"nan\" | \"inf\" | \"-inf\"}}, got keys "
                         f"{sorted(value)}")
    raise ValueError(f"{where}: unsupported JSON value {short(value)}")


def _decode_array(body, where):
    _check_dtype_name(body["dtype"], f"{where}['dtype']")
    dtype = np.dtype(body["dtype"])
    shape = body["shape"]
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"{where}['shape']: must be a list of non-negative ints, got "
                         f"{short(shape)}")
    data = body["data"]
    if not isinstance(data, list):
        raise ValueError(f"{where}['data']: must be a flat list of numbers, got {short(data)}")
    count = math.prod(shape)
    if len(data) != count:
        raise ValueError(f"{where}['data']: shape {shape} needs {count} elements, got "
                         f"{len(data)}")
    if dtype.kind == "b":
        bad = next((i for i, v in enumerate(data) if type(v) is not bool), None)
        if bad is not None:
            raise ValueError(f"{where}['data'][{bad}]: a bool array holds true/false, got "
                             f"{short(data[bad])}")
        array = np.array(data, dtype=dtype)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        bad = next((i for i, v in enumerate(data)
                    if type(v) is not int or not info.min <= v <= info.max), None)
        if bad is not None:
            raise ValueError(f"{where}['data'][{bad}]: {short(data[bad])} is not a "
                             f"{dtype.name} (an integer in [{info.min}, {info.max}])")
        array = np.array(data, dtype=dtype)
    else:
        values = []
        for i, v in enumerate(data):
            number = None
            if type(v) is float:
                number = v
            elif type(v) is int:
                try:
                    number = float(v)
                except OverflowError:
                    number = math.inf
            if number is not None:
                if not math.isfinite(number):  # 1e400 or a huge integer
                    raise ValueError(f"{where}['data'][{i}]: {short(v)} is out of range for "
                                     f"{dtype.name} (write \"inf\" for an infinity)")
                values.append(number)
            elif isinstance(v, str) and v in _NON_FINITE:
                values.append(_NON_FINITE[v])
            else:
                raise ValueError(f"{where}['data'][{i}]: {short(v)} is not a number or one "
                                 f"of 'nan', 'inf', '-inf'")
        wide = np.array(values, dtype=np.float64)
        with np.errstate(over="ignore"):
            array = wide.astype(dtype)
        overflow = np.flatnonzero(np.isfinite(wide) & ~np.isfinite(array))
        if overflow.size:
            i = int(overflow[0])
            raise ValueError(f"{where}['data'][{i}]: {data[i]!r} is out of range for "
                             f"{dtype.name}")
    array = array.reshape(shape)
    array.setflags(write=False)
    return array


# -- paths ----------------------------------------------------------------------------------
def _path_argument(path):
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__} {path!r}")
    if not path or "\0" in path:
        raise ValueError(f"path must be a non-empty path without NUL characters, got {path!r}")
    return path


def _output_path(path):
    path = _path_argument(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"path {path!r} is a directory, not a file")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"path {path!r}: the directory {directory!r} does not exist")
    return path


def _input_path(path):
    path = _path_argument(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"path {path!r}: no such file")
    if os.path.isdir(path):
        raise IsADirectoryError(f"path {path!r} is a directory, not a graph JSON file")
    return path
