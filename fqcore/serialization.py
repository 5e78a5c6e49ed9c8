"""Quantizer configs in and out: the registry, Keras-2 dicts, JSON text, and files holding config and state.

``serialize`` writes the ``{'class_name': ..., 'config': ...}`` dict that tfmot's (legacy)
serialize_keras_object produces; ``deserialize`` also reads tf_keras 2.21's shape, which adds
``module`` and ``registered_name``. ``save_quantizer`` / ``load_quantizer`` keep a quantizer's config
together with its state arrays, bit for bit, in an .npz or .json file written atomically.
"""
import json
import math
import os
from collections.abc import Mapping
from typing import Any, Dict, Optional, Tuple, Type, Union

import numpy as np

from .atomic_file import write_atomically
from .bounded_npz import NpzArchive
from .quantizers import (AllValuesQuantizer, FixedQuantizer, LastValueQuantizer,
                         MovingAverageQuantizer, NoQuantizer, Quantizer)
from .safe_names import path_problem

__all__ = ["register_quantizer", "registered_quantizers", "serialize", "deserialize", "to_json",
           "from_json", "save_quantizer", "load_quantizer"]

_REGISTRY: Dict[str, Type[Quantizer]] = {}
_DICT_KEYS = ("class_name", "config")
_OPTIONAL_DICT_KEYS = ("module", "registered_name")
FILE_FORMAT = "fqcore-quantizer"
FILE_VERSION = 1
# A config nests a few levels; text nested deeper is refused when read, before a deeply nested
# value can exhaust the stack of whatever formats it into a message.
MAX_JSON_DEPTH = 64


def register_quantizer(cls: Optional[type] = None, *, name: Optional[str] = None,
                       override: bool = False) -> Any:
    """Adds a Quantizer subclass to the registry, so that :func:`deserialize` finds it.

    Use as ``@register_quantizer`` or ``@register_quantizer(name=...)``.

    Parameters
    ----------
    cls : type, optional
        The Quantizer subclass; omitted when used as ``@register_quantizer(name=...)``.
    name : str, optional
        The registered name (default: the class name), which configs carry as ``class_name``.
    override : bool, default False
        Replace a class already registered under `name`.

    Returns
    -------
    type or callable
        `cls` itself (so the decorator leaves the class as it is), or, without `cls`, the
        decorator.

    Raises
    ------
    TypeError
        `cls` not a Quantizer subclass, `name` not a non-empty str.
    ValueError
        `name` already taken by another class and ``override=False``.

    Examples
    --------
    >>> import numpy as np, fqcore
    >>> @fqcore.register_quantizer(name="example.Halve")
    ... class Halve(fqcore.Quantizer):
    ...     def build(self, tensor_shape, name, layer):
    ...         return {}
    ...     def __call__(self, inputs, training, weights, **kwargs):
    ...         return np.float32(0.5) * inputs
    ...     def get_config(self):
    ...         return {}
    >>> fqcore.serialize(Halve())
    {'class_name': 'example.Halve', 'config': {}}
    >>> fqcore.deserialize({'class_name': 'example.Halve', 'config': {}}) == Halve()
    True
    """
    if name is not None and not (isinstance(name, str) and name):
        raise TypeError(f"name must be a non-empty str, got {name!r}")

    def register(klass):
        if not (isinstance(klass, type) and issubclass(klass, Quantizer)):
            raise TypeError(f"register_quantizer takes a Quantizer subclass, got {klass!r}")
        key = klass.__name__ if name is None else name
        existing = _REGISTRY.get(key)
        if existing is not None and existing is not klass and not override:
            raise ValueError(f"quantizer name {key!r} is already registered to "
                             f"{existing.__module__}.{existing.__qualname__}; pass override=True to replace it")
        _REGISTRY[key] = klass
        return klass

    return register if cls is None else register(cls)


def registered_quantizers():
    """A copy of the registry: {name: class}."""
    return dict(_REGISTRY)


def _registered_name(cls):
    """The name `cls` is registered under; the class name first, as tfmot writes it."""
    if _REGISTRY.get(cls.__name__) is cls:
        return cls.__name__
    for key, klass in _REGISTRY.items():
        if klass is cls:
            return key
    raise ValueError(f"{cls.__qualname__} is not registered: decorate it with "
                     f"fqcore.register_quantizer so that it can be deserialized")


def serialize(quantizer: Quantizer) -> Dict[str, Any]:
    """The quantizer as the Keras-2 dict tfmot's serialize_keras_object writes.

    Parameters
    ----------
    quantizer : Quantizer
        A quantizer whose class is registered (fqcore's are).

    Returns
    -------
    dict
        ``{'class_name': <registered name>, 'config': quantizer.get_config()}``.

    Raises
    ------
    TypeError
        `quantizer` is not a Quantizer.
    ValueError
        Its class is not registered (see :func:`register_quantizer`).

    Examples
    --------
    >>> import fqcore
    >>> fqcore.serialize(fqcore.LastValueQuantizer(8, True, True, True))
    {'class_name': 'LastValueQuantizer', 'config': {'num_bits': 8, 'per_axis': True, 'symmetric': True, 'narrow_range': True}}
    """
    if not isinstance(quantizer, Quantizer):
        raise TypeError(f"serialize takes a Quantizer, got {type(quantizer).__name__}")
    return {"class_name": _registered_name(type(quantizer)), "config": quantizer.get_config()}


def deserialize(config: Mapping) -> Quantizer:
    """The quantizer a serialized dict describes (fqcore's, tfmot's or tf_keras's dicts).

    Parameters
    ----------
    config : dict
        ``{'class_name': ..., 'config': {...}}``, optionally with tf_keras's ``module`` and
        ``registered_name`` (a registered_name in the registry wins over the class name).

    Returns
    -------
    Quantizer
        A new quantizer of the registered class, built with ``from_config``.

    Raises
    ------
    TypeError
        `config` not a dict, a name that is not a str, or a config with an unknown or missing key
        for the class.
    ValueError
        A missing or unknown top-level key, or an unknown class (the message lists the
        registered names).

    Examples
    --------
    >>> import fqcore
    >>> fqcore.deserialize({"class_name": "MovingAverageQuantizer",
    ...                     "config": {"num_bits": 8, "per_axis": False, "symmetric": False,
    ...                                "narrow_range": False}})
    MovingAverageQuantizer(num_bits=8, per_axis=False, symmetric=False, narrow_range=False)
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"deserialize takes a dict with 'class_name' and 'config', got {type(config).__name__}")
    missing = [key for key in _DICT_KEYS if key not in config]
    if missing:
        raise ValueError(f"serialized quantizer has no {missing[0]!r} key (got keys {sorted(config)})")
    unknown = sorted(key for key in config if key not in _DICT_KEYS + _OPTIONAL_DICT_KEYS)
    if unknown:
        raise ValueError(f"serialized quantizer has unknown key {unknown[0]!r} "
                         f"(accepted: {', '.join(_DICT_KEYS + _OPTIONAL_DICT_KEYS)})")
    class_name, registered = config["class_name"], config.get("registered_name")
    if not isinstance(class_name, str):
        raise TypeError(f"class_name must be a str, got {class_name!r}")
    for key in _OPTIONAL_DICT_KEYS:
        if config.get(key) is not None and not isinstance(config[key], str):
            raise TypeError(f"{key} must be a str or None, got {config[key]!r}")
    cls = _REGISTRY.get(registered) if isinstance(registered, str) else None
    if cls is None:
        cls = _REGISTRY.get(class_name)
    if cls is None:
        raise ValueError(f"unknown quantizer class {class_name!r}; known: {', '.join(sorted(_REGISTRY))} "
                         f"(register others with fqcore.register_quantizer)")
    return cls.from_config(config["config"])


def to_json(quantizer: Quantizer, **kwargs: Any) -> str:
    """``serialize(quantizer)`` as strict JSON text.

    Parameters
    ----------
    quantizer : Quantizer
        A quantizer of a registered class.
    **kwargs
        Passed to :func:`json.dumps` (``indent``, ``sort_keys``, ...), except ``allow_nan``: the
        text is always strict JSON (a config holds no NaN or infinity).

    Returns
    -------
    str
        The JSON text :func:`from_json` reads back.

    Raises
    ------
    TypeError
        `quantizer` is not a Quantizer, or ``allow_nan`` was passed.
    ValueError
        Its class is not registered.

    Examples
    --------
    >>> import fqcore
    >>> text = fqcore.to_json(fqcore.FixedQuantizer(8, -1.0, 1.0, False))
    >>> text
    '{"class_name": "FixedQuantizer", "config": {"num_bits": 8, "init_min": -1.0, "init_max": 1.0, "narrow_range": false}}'
    >>> fqcore.from_json(text)
    FixedQuantizer(num_bits=8, init_min=-1.0, init_max=1.0, narrow_range=False)
    """
    if "allow_nan" in kwargs:
        raise TypeError("to_json writes strict JSON: allow_nan cannot be passed")
    return json.dumps(serialize(quantizer), allow_nan=False, **kwargs)


def from_json(text: Union[str, bytes, bytearray]) -> Quantizer:
    """The quantizer that JSON text from :func:`to_json` (or tfmot) describes.

    Parameters
    ----------
    text : str, bytes or bytearray
        JSON text of a serialized quantizer dict.

    Returns
    -------
    Quantizer
        As :func:`deserialize` gives it.

    Raises
    ------
    TypeError
        `text` is not text, or as :func:`deserialize` raises.
    ValueError
        Malformed or too deeply nested JSON, or as :func:`deserialize` raises.

    Examples
    --------
    >>> import fqcore
    >>> fqcore.from_json('{"class_name": "NoQuantizer", "config": {}}')
    NoQuantizer()
    """
    if not isinstance(text, (str, bytes, bytearray)):
        raise TypeError(f"from_json takes JSON text, got {type(text).__name__}")
    return deserialize(_parse_json(text, "text"))


def _parse_json(text, where):
    """json.loads(text); malformed or too deeply nested text is a ValueError naming `where`."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"{where} is not valid JSON ({error})") from None
    level = [value]
    for _ in range(MAX_JSON_DEPTH):
        level = [child for item in level if isinstance(item, (dict, list))
                 for child in (item.values() if isinstance(item, dict) else item)]
    if any(isinstance(item, (dict, list)) for item in level):
        raise ValueError(f"{where} nests JSON values more than {MAX_JSON_DEPTH} levels deep")
    return value


# --- Files: config and state together


def _weights(weights):
    """`weights` checked: a dict of str -> float32 ndarray (None: no state)."""
    if weights is None:
        return {}
    if not isinstance(weights, Mapping):
        raise TypeError(f"weights must be a dict of float32 arrays, got {type(weights).__name__}")
    checked = {}
    for key, value in weights.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"weights keys must be non-empty str, got {key!r}")
        problem = path_problem(key)
        if problem:
            raise ValueError(f"weights key {key!r} cannot name a saved array: {problem}")
        if not isinstance(value, np.ndarray) or value.dtype != np.float32:
            shown = f"dtype {value.dtype}" if isinstance(value, np.ndarray) else type(value).__name__
            raise TypeError(f"weights[{key!r}] must be a float32 numpy array, got {shown}")
        checked[key] = value
    return checked


def _format_of(path, format):
    if format is None:
        suffix = os.path.splitext(os.fspath(path))[1].lower()
        format = {".npz": "npz", ".json": "json"}.get(suffix)
        if format is None:
            raise ValueError(f"cannot tell the file format from {os.fspath(path)!r}: "
                             f"use a .npz or .json name, or pass format='npz' or 'json'")
    if format not in ("npz", "json"):
        raise ValueError(f"format must be 'npz' or 'json', got {format!r}")
    return format


def save_quantizer(path: Union[str, "os.PathLike[str]"], quantizer: Quantizer,
                   weights: Optional[Mapping] = None, format: Optional[str] = None) -> None:
    """Writes a quantizer's config and its state to a file, atomically.

    A temporary file in the same directory, fsync, then os.replace: readers see the old file or
    the new one, never a partial one. Both formats round-trip exactly, NaN payloads and -0.0
    included.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write.
    quantizer : Quantizer
        A quantizer of a registered class.
    weights : dict, optional
        Its state, the dict ``build`` returned (str keys, float32 arrays); None for none.
    format : {"npz", "json"}, optional
        Default: from the suffix of `path`: ``.npz`` (a numpy archive) or ``.json`` (float32
        values as uint32 bit patterns).

    Raises
    ------
    TypeError
        `quantizer` not a Quantizer, `weights` not a dict of float32 arrays.
    ValueError
        No format given and none told by the suffix, an unknown format, a weights key that cannot
        name a saved array.
    OSError
        The file cannot be written.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np, fqcore
    >>> q = fqcore.LastValueQuantizer(8, per_axis=False, symmetric=True, narrow_range=True)
    >>> state = q.build((3,), "w", None)
    >>> _ = q(np.array([-0.5, 0.25, 2.0], np.float32), True, state)
    >>> path = os.path.join(tempfile.mkdtemp(), "w.npz")
    >>> fqcore.save_quantizer(path, q, state)
    >>> loaded, loaded_state = fqcore.load_quantizer(path)
    >>> loaded == q, float(loaded_state["max_var"]) == float(state["max_var"])
    (True, True)
    """
    format = _format_of(path, format)
    header = {"format": FILE_FORMAT, "version": FILE_VERSION, "quantizer": serialize(quantizer)}
    weights = _weights(weights)
    if format == "json":
        header["weights"] = {
            key: {"shape": list(value.shape),
                  "bits": [int(b) for b in np.ascontiguousarray(value).reshape(-1).view(np.uint32)]}
            for key, value in weights.items()}
        payload = (json.dumps(header, allow_nan=False, indent=1) + "\n").encode("utf-8")
        write_atomically(path, lambda f: f.write(payload))
    else:
        arrays: Dict[str, Any] = {"header": np.array(json.dumps(header, allow_nan=False))}
        arrays.update({"weight/" + key: value for key, value in weights.items()})
        write_atomically(path, lambda f: np.savez(f, **arrays))


def load_quantizer(path: Union[str, "os.PathLike[str]"]) -> Tuple[Quantizer, Dict[str, np.ndarray]]:
    """Reads a file :func:`save_quantizer` wrote (either format, told from the content).

    Parameters
    ----------
    path : str or os.PathLike
        The file.

    Returns
    -------
    tuple
        ``(quantizer, weights)``: the quantizer deserialized, and its state as new float32
        arrays with the saved bits.

    Raises
    ------
    ValueError
        Anything wrong with the file's content, naming the file and the entry (files are
        untrusted input; see fqcore.bounded_npz for the limits on .npz files).
    OSError
        The file cannot be read.

    Examples
    --------
    >>> import os, tempfile
    >>> import fqcore
    >>> path = os.path.join(tempfile.mkdtemp(), "fixed.json")
    >>> fqcore.save_quantizer(path, fqcore.FixedQuantizer(8, -1.0, 1.0, False))
    >>> fqcore.load_quantizer(path)
    (FixedQuantizer(num_bits=8, init_min=-1.0, init_max=1.0, narrow_range=False), {})
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        start = f.read(4)
    if start.startswith(b"PK"):
        header, weights = _read_npz(path)
    else:
        with open(path, "rb") as f:
            header = _header(_parse_json(f.read(), path), path)
        weights = _json_weights(header.get("weights", {}), path)
    try:
        return deserialize(header["quantizer"]), weights
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from None


def _read_npz(path):
    """(header, weights) of an .npz quantizer file; each weight's dtype is checked before its
    data is read."""
    with NpzArchive(path, "quantizer file") as archive:
        if "header" not in archive.names:
            raise ValueError(f"{path} is not an fqcore quantizer file (no header)")
        shape, dtype = archive.header("header")
        if shape != () or dtype.kind != "U":
            raise ValueError(f"{path} is not an fqcore quantizer file (its header is a {dtype} "
                             f"array of shape {shape}, not a string)")
        header = _header(_parse_json(str(archive.read("header")), f"{path}: entry 'header'"), path)
        weights = {}
        for key in archive.names:
            if key.startswith("weight/"):
                _check_loaded_key(key[7:], path)
                dtype = archive.header(key)[1]
                if dtype != np.float32:
                    raise ValueError(f"{path}: weight {key[7:]!r} has dtype {dtype}, expected float32")
                weights[key[7:]] = archive.read(key)
            elif key != "header":
                raise ValueError(f"{path}: unexpected entry {key!r}")
    return header, weights


def _header(header, path):
    if not isinstance(header, dict) or header.get("format") != FILE_FORMAT:
        raise ValueError(f"{path} is not an fqcore quantizer file")
    version = header.get("version")
    if type(version) is not int or version != FILE_VERSION:
        raise ValueError(f"{path} has format version {version!r}; this fqcore reads {FILE_VERSION}")
    if "quantizer" not in header:
        raise ValueError(f"{path} has no 'quantizer' entry")
    return header


def _check_loaded_key(key, path):
    """A weight name read from a file follows the rule save_quantizer holds names to."""
    problem = "it is empty" if not key else path_problem(key)
    if problem:
        raise ValueError(f"{path}: weight {key!r} cannot name an array: {problem}")


def _is_int(value, low, high):
    return type(value) is int and low <= value < high


def _json_weights(entries, path):
    """The state arrays of a .json file: each entry a shape (list of non-negative ints) and the
    float32 values' bit patterns (list of ints in [0, 2**32)), checked before any is read."""
    if not isinstance(entries, dict):
        raise ValueError(f"{path}: 'weights' must be an object of named entries, got {type(entries).__name__}")
    weights = {}
    for key, entry in entries.items():
        _check_loaded_key(key, path)
        if not isinstance(entry, dict) or not isinstance(entry.get("shape"), list) or \
                not isinstance(entry.get("bits"), list):
            raise ValueError(f"{path}: weight {key!r} must hold a 'shape' list and a 'bits' list")
        shape, bits = entry["shape"], entry["bits"]
        if not all(_is_int(dim, 0, 1 << 31) for dim in shape):
            raise ValueError(f"{path}: weight {key!r} has shape {shape!r}; expected non-negative ints")
        if not all(_is_int(b, 0, 1 << 32) for b in bits):
            raise ValueError(f"{path}: weight {key!r} has bits that are not ints in [0, 2**32)")
        shape = tuple(shape)
        if len(bits) != math.prod(shape):
            raise ValueError(f"{path}: weight {key!r} has {len(bits)} values for shape {shape}")
        weights[key] = np.array(bits, dtype=np.uint32).view(np.float32).reshape(shape)
    return weights


for _cls in (LastValueQuantizer, MovingAverageQuantizer, AllValuesQuantizer, FixedQuantizer, NoQuantizer):
    register_quantizer(_cls)
del _cls
