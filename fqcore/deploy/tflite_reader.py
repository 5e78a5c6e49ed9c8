"""read() and read_file(): the Model in a .tflite file, checked strictly, with numpy only."""
import math

import numpy as np

from . import tflite_schema as fb
from .flatbuffer_reader import FlatbufferReader
from .model import Model, Op, Quantization, Tensor
from .tflite_checks import MAX_ELEMENTS, MAX_RANK, _check_model, _shape_text, _tensor_label
from .tflite_op_names import OP_NAMES_METADATA, _unpack_names

def _read_tensor(i, t, buffers, fail):
    T = fb.Tensor
    name = t.string(T.NAME, "name") or ""
    where = _tensor_label(i, name)
    shape = t.array(T.SHAPE, np.int32, "shape")
    shape = [] if shape is None else shape.tolist()
    if len(shape) > MAX_RANK:
        fail(where, f"rank {len(shape)} is more than {MAX_RANK}")
    code = t.scalar(T.TYPE, "i8", 0, "type")
    dtype = fb.DTYPE_OF_TYPE.get(code)
    if dtype is None:
        fail(where, f"type {fb.tensor_type_name(code)}, which fqcore.deploy does not support")
    if t.scalar(T.IS_VARIABLE, "bool", False, "is_variable"):
        fail(where, "is a variable, which fqcore.deploy does not support")
    if t.field(T.SPARSITY, 4, "sparsity") is not None:
        fail(where, "is sparse, which fqcore.deploy does not support")
    if any(d < 0 for d in shape):
        fail(where, f"shape {_shape_text(shape)} has a negative dimension (unknown dimensions "
                    f"belong in shape_signature)")
    signature = t.array(T.SHAPE_SIGNATURE, np.int32, "shape_signature")
    if signature is not None and signature.size:
        signature = signature.tolist()
        if len(signature) != len(shape) or any(s != d and s != -1
                                               for s, d in zip(signature, shape)):
            fail(where, f"shape_signature {_shape_text(signature)} does not fit shape "
                        f"{_shape_text(shape)}")
        shape = [-1 if s == -1 else d for s, d in zip(signature, shape)]
    count = math.prod(1 if d == -1 else d for d in shape)
    if count > MAX_ELEMENTS:
        fail(where, f"shape {_shape_text(shape)} has {count} elements, more than {MAX_ELEMENTS}")

    quantization = None
    qt = t.table(T.QUANTIZATION, "quantization")
    if qt is not None:
        Q = fb.QuantizationParameters
        if qt.scalar(Q.DETAILS_TYPE, "u8", 0, "details_type") != 0:
            fail(where, "uses custom quantization, which fqcore.deploy does not support")
        scale = qt.array(Q.SCALE, np.float32, "scale")
        zero_point = qt.array(Q.ZERO_POINT, np.int64, "zero_point")
        axis = qt.scalar(Q.QUANTIZED_DIMENSION, "i32", 0, "quantized_dimension")
        n_scale = 0 if scale is None else scale.size
        n_zero = 0 if zero_point is None else zero_point.size
        if n_scale != n_zero:
            fail(where, f"quantization has {n_scale} scales and {n_zero} zero points")
        if n_scale:
            quantization = Quantization(scale, zero_point, axis)

    data = None
    index = t.scalar(T.BUFFER, "u32", 0, "buffer")
    if index >= max(len(buffers), 1):
        fail(where, f"buffer {index} does not exist ({len(buffers)} buffers)")
    payload = buffers[index] if index else None
    if payload is not None and len(payload):
        if -1 in shape:
            fail(where, f"a constant's shape {_shape_text(shape)} cannot have an unknown (-1) "
                        f"dimension")
        itemsize = np.dtype(dtype).itemsize
        if len(payload) != count * itemsize:
            fail(where, f"buffer holds {len(payload)} bytes, shape {_shape_text(shape)} {dtype} "
                        f"needs {count * itemsize}")
        t.r.spend(len(payload), where)      # a buffer shared by many tensors is copied for each
        data = np.frombuffer(payload, np.dtype(dtype).newbyteorder("<")).astype(dtype)
        data = data.reshape(shape)
    return Tensor(name, tuple(shape), dtype, quantization, data)


def _read_buffers(root, fail):
    """The payload (a memoryview, or None when empty) of every buffer."""
    B = fb.Buffer
    payloads = []
    for i, bt in enumerate(root.tables(fb.Model.BUFFERS, "buffers", "buffer")):
        if bt.scalar(B.OFFSET, "u64", 0, "offset") > 1:
            fail(f"buffer {i}", "is stored outside the flatbuffer (a model over 2 GB), which "
                                "fqcore.deploy does not read")
        payload = bt.byte_view(B.DATA, "data")
        payloads.append(payload if payload is not None and len(payload) else None)
    if payloads and payloads[0] is not None:
        fail("buffer 0", f"holds {len(payloads[0])} bytes; the first buffer must be empty")
    return payloads


def _read_op_codes(root):
    C = fb.OperatorCode
    codes = []
    for ct in root.tables(fb.Model.OPERATOR_CODES, "operator_codes", "operator code"):
        deprecated = ct.scalar(C.DEPRECATED_BUILTIN_CODE, "i8", 0, "deprecated_builtin_code")
        code = ct.scalar(C.BUILTIN_CODE, "i32", 0, "builtin_code")
        # TFLite's GetBuiltinCode: the larger of the two, so files from before builtin_code
        # existed (only the byte) and after (byte capped at 127) both resolve.
        code = max(code, deprecated)
        custom = ct.string(C.CUSTOM_CODE, "custom_code") if code == fb.CUSTOM else None
        codes.append((code, custom))
    return codes


def _activation(where, table, slot, fail):
    code = table.scalar(slot, "i8", 0, "fused_activation_function") if table else 0
    for name, value in fb.ACTIVATION_CODES.items():
        if value == code:
            return name
    name = fb.ACTIVATION_NAMES[code] if 0 <= code < len(fb.ACTIVATION_NAMES) else f"code {code}"
    fail(where, f"fused activation {name}, which fqcore.deploy does not run")


def _padding(where, table, slot, fail):
    code = table.scalar(slot, "i8", 0, "padding") if table else 0
    for name, value in fb.PADDING_CODES.items():
        if value == code:
            return name
    fail(where, f"padding code {code} is neither SAME nor VALID")


def _read_options(where, kind, ot, fail):
    """The model.py options of `kind` from its options table ot (None: the schema's defaults)."""
    def get(slot, kind_, default, name):
        return ot.scalar(slot, kind_, default, name) if ot is not None else default

    def no_bias_type(slot):
        if get(slot, "i8", 0, "quantized_bias_type") != 0:
            fail(where, "sets quantized_bias_type, which fqcore.deploy does not support")

    if kind == "CONV_2D":
        C = fb.Conv2DOptions
        no_bias_type(C.QUANTIZED_BIAS_TYPE)
        return {"padding": _padding(where, ot, C.PADDING, fail),
                "stride_h": get(C.STRIDE_H, "i32", 0, "stride_h"),
                "stride_w": get(C.STRIDE_W, "i32", 0, "stride_w"),
                "dilation_h": get(C.DILATION_H_FACTOR, "i32", C.DILATION_DEFAULT,
                                  "dilation_h_factor"),
                "dilation_w": get(C.DILATION_W_FACTOR, "i32", C.DILATION_DEFAULT,
                                  "dilation_w_factor"),
                "activation": _activation(where, ot, C.FUSED_ACTIVATION_FUNCTION, fail)}
    if kind == "DEPTHWISE_CONV_2D":
        D = fb.DepthwiseConv2DOptions
        return {"padding": _padding(where, ot, D.PADDING, fail),
                "stride_h": get(D.STRIDE_H, "i32", 0, "stride_h"),
                "stride_w": get(D.STRIDE_W, "i32", 0, "stride_w"),
                "dilation_h": get(D.DILATION_H_FACTOR, "i32", D.DILATION_DEFAULT,
                                  "dilation_h_factor"),
                "dilation_w": get(D.DILATION_W_FACTOR, "i32", D.DILATION_DEFAULT,
                                  "dilation_w_factor"),
                "depth_multiplier": get(D.DEPTH_MULTIPLIER, "i32", 0, "depth_multiplier"),
                "activation": _activation(where, ot, D.FUSED_ACTIVATION_FUNCTION, fail)}
    if kind == "AVERAGE_POOL_2D":
        P = fb.Pool2DOptions
        return {"padding": _padding(where, ot, P.PADDING, fail),
                "stride_h": get(P.STRIDE_H, "i32", 0, "stride_h"),
                "stride_w": get(P.STRIDE_W, "i32", 0, "stride_w"),
                "filter_h": get(P.FILTER_HEIGHT, "i32", 0, "filter_height"),
                "filter_w": get(P.FILTER_WIDTH, "i32", 0, "filter_width"),
                "activation": _activation(where, ot, P.FUSED_ACTIVATION_FUNCTION, fail)}
    if kind == "FULLY_CONNECTED":
        F = fb.FullyConnectedOptions
        if get(F.WEIGHTS_FORMAT, "i8", 0, "weights_format") != 0:
            fail(where, "has shuffled weights, which fqcore.deploy does not support")
        if get(F.KEEP_NUM_DIMS, "bool", False, "keep_num_dims"):
            fail(where, "sets keep_num_dims, which fqcore.deploy does not support")
        no_bias_type(F.QUANTIZED_BIAS_TYPE)
        return {"activation": _activation(where, ot, F.FUSED_ACTIVATION_FUNCTION, fail)}
    if kind == "ADD":
        return {"activation": _activation(where, ot, fb.AddOptions.FUSED_ACTIVATION_FUNCTION,
                                          fail)}
    if kind == "MEAN":
        return {"keep_dims": get(fb.ReducerOptions.KEEP_DIMS, "bool", False, "keep_dims")}
    if kind == "SOFTMAX":
        return {"beta": float(get(fb.SoftmaxOptions.BETA, "f32", 0.0, "beta"))}
    if kind == "RESHAPE" and ot is not None:
        ot.array(fb.ReshapeOptions.NEW_SHAPE, np.int32, "new_shape")   # checked, then unused:
    return {}                                                           # the shape input rules


def _read_op(i, ot, codes, names, fail):
    O = fb.Operator
    index = ot.scalar(O.OPCODE_INDEX, "u32", 0, "opcode_index")
    if index >= len(codes):
        fail(f"op {i}", f"operator code {index} does not exist ({len(codes)} codes)")
    code, custom = codes[index]
    if code == fb.CUSTOM:
        fail(f"op {i} is the custom op {custom!r}, which fqcore.deploy does not run")
    kind = fb.KIND_OF_CODE.get(code)
    if kind is None:
        fail(f"op {i} is {fb.builtin_name(code)}, which fqcore.deploy does not run")
    where = f"op {i} ({kind})"

    def tensor_names(slot, what):
        indices = ot.array(slot, np.int32, what)
        indices = [] if indices is None else indices.tolist()
        # An omitted optional input is -1; only trailing ones (a missing bias) mean anything
        # to our kinds, and they are simply left off.
        while what == "inputs" and indices and indices[-1] == -1:
            indices.pop()
        for k in indices:
            if not 0 <= k < len(names):
                fail(where, f"{what} refer to tensor {k}; there are {len(names)}")
        return [names[k] for k in indices]

    inputs = tensor_names(O.INPUTS, "inputs")
    outputs = tensor_names(O.OUTPUTS, "outputs")
    options_type = ot.scalar(O.BUILTIN_OPTIONS_TYPE, "u8", 0, "builtin_options_type")
    expected = fb.OPTIONS_TYPE[kind]
    if options_type not in (fb.BuiltinOptions.NONE, expected):
        fail(where, f"carries options of union type {options_type}, not {expected}")
    options = None
    if options_type != fb.BuiltinOptions.NONE:
        options = ot.table(O.BUILTIN_OPTIONS, "builtin_options")
    return Op(kind, inputs, outputs, _read_options(where, kind, options, fail))


def _check_signatures(root, n_tensors, fail):
    S, M = fb.SignatureDef, fb.TensorMap
    for sig in root.tables(fb.Model.SIGNATURE_DEFS, "signature_defs", "signature"):
        sig.string(S.SIGNATURE_KEY, "signature_key")
        if sig.scalar(S.SUBGRAPH_INDEX, "u32", 0, "subgraph_index") != 0:
            fail(sig.where, "refers to a subgraph other than 0")
        for slot, what in ((S.INPUTS, "inputs"), (S.OUTPUTS, "outputs")):
            for tm in sig.tables(slot, what):
                tm.string(M.NAME, "name")
                k = tm.scalar(M.TENSOR_INDEX, "u32", 0, "tensor_index")
                if k >= n_tensors:
                    fail(tm.where, f"refers to tensor {k}; there are {n_tensors}")


def _read_metadata(root, n_buffers, fail):
    """The buffer index of each metadata entry, by name (the first of a name)."""
    found = {}
    for meta in root.tables(fb.Model.METADATA, "metadata", "metadata"):
        name = meta.string(fb.Metadata.NAME, "name")
        k = meta.scalar(fb.Metadata.BUFFER, "u32", 0, "buffer")
        if k >= n_buffers:
            fail(meta.where, f"refers to buffer {k}; there are {n_buffers}")
        found.setdefault(name, k)
    root.array(fb.Model.METADATA_BUFFER, np.int32, "metadata_buffer")
    return found


def read(data, source="<bytes>") -> Model:
    """The Model in the bytes of a .tflite file. Anything wrong with them, or beyond what
    fqcore.deploy runs, is a ValueError naming `source` and the entry."""
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise TypeError(f"read() takes bytes, got {type(data).__name__}")
    r = FlatbufferReader(data, source)
    fail = r.fail
    root = r.root(fb.FILE_IDENTIFIER, "model")
    version = root.scalar(fb.Model.VERSION, "u32", 0, "version")
    if version != fb.SCHEMA_VERSION:
        fail("model", f"schema version {version}; fqcore.deploy reads version "
                      f"{fb.SCHEMA_VERSION}")
    codes = _read_op_codes(root)
    subgraphs = root.tables(fb.Model.SUBGRAPHS, "subgraphs", "subgraph")
    if len(subgraphs) != 1:
        fail("model", f"has {len(subgraphs)} subgraphs; fqcore.deploy reads models with one")
    buffers = _read_buffers(root, fail)
    description = root.string(fb.Model.DESCRIPTION, "description") or ""
    metadata = _read_metadata(root, len(buffers), fail)

    G = fb.SubGraph
    sg = subgraphs[0]
    tensors, names = {}, []
    for i, tt in enumerate(sg.tables(G.TENSORS, "tensors", "tensor")):
        tensor = _read_tensor(i, tt, buffers, fail)
        if tensor.name in tensors:
            fail(_tensor_label(i, tensor.name),
                 f"has the name of tensor {names.index(tensor.name)}")
        tensors[tensor.name] = tensor
        names.append(tensor.name)

    def graph_ends(slot, what):
        indices = sg.array(slot, np.int32, what)
        indices = [] if indices is None else indices.tolist()
        for k in indices:
            if not 0 <= k < len(names):
                fail(f"subgraph 0 {what}", f"refer to tensor {k}; there are {len(names)}")
        return [names[k] for k in indices]

    inputs = graph_ends(G.INPUTS, "inputs")
    outputs = graph_ends(G.OUTPUTS, "outputs")
    ops = [_read_op(i, ot, codes, names, fail)
           for i, ot in enumerate(sg.tables(G.OPERATORS, "operators", "op"))]
    if OP_NAMES_METADATA in metadata:
        op_names = _unpack_names(buffers[metadata[OP_NAMES_METADATA]], len(ops), fail)
        for op, name in zip(ops, op_names):
            op.name = name
    _check_signatures(root, len(names), fail)
    model = Model(tensors, ops, inputs, outputs, description)
    _check_model(model, fail)
    return model


def read_file(path) -> Model:
    """read() of the file at path, naming it in errors (OSError, FileNotFoundError among them,
    passes through)."""
    with open(path, "rb") as f:
        data = f.read()
    return read(data, source=str(path))
