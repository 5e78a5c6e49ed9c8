"""A Model as a .tflite file: write() as TF's converter does, read() strictly with numpy only."""
# write() needs the optional flatbuffers package; read() does not, so the reference interpreter
# runs on numpy alone.
import math
import operator
import struct

import numpy as np

from . import tflite_schema as fb
from .flatbuffer_reader import FlatbufferReader
from .model import ACTIVATIONS, OP_OPTIONS, PADDINGS, Model, Op, Quantization, Tensor
from .tflite_versions import min_runtime_version, op_version

# Ranks beyond this no TFLite kernel of ours takes; a bound keeps absurd shapes cheap to reject.
MAX_RANK = 8
# TFLite indexes elements with int32 in its kernels.
MAX_ELEMENTS = 2 ** 31 - 1
INT32_MAX = 2 ** 31 - 1

SIGNATURE_KEY = "serving_default"
MIN_RUNTIME_METADATA = "min_runtime_version"
MIN_RUNTIME_BUFFER_SIZE = 16     # the converter's fixed-size buffer, zero-padded
# TFLite has no field for op names: they travel in a metadata entry of our own, which TFLite
# ignores, as each name's UTF-8 length (uint32, little-endian) and bytes, in op order.
OP_NAMES_METADATA = "fqcore_op_names"
SUBGRAPH_NAME = "main"

# Inputs each kind takes (min, max): a missing bias is an omitted last input.
_INPUT_COUNTS = {
    "CONV_2D": (2, 3), "DEPTHWISE_CONV_2D": (2, 3), "FULLY_CONNECTED": (2, 3), "ADD": (2, 2),
    "AVERAGE_POOL_2D": (1, 1), "MEAN": (2, 2), "RESHAPE": (2, 2), "SOFTMAX": (1, 1),
    "QUANTIZE": (1, 1), "DEQUANTIZE": (1, 1),
}
_POSITIVE_INT_OPTIONS = ("stride_h", "stride_w", "dilation_h", "dilation_w", "filter_h",
                         "filter_w", "depth_multiplier")
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_QUANT_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-2 ** 31, 2 ** 31 - 1)}


def _raiser(source):
    def fail(where, what):
        raise ValueError(f"{source}: {where}: {what}")
    return fail


def _tensor_label(i, name):
    return f"tensor {i} ({name!r})"


def _shape_text(shape):
    if len(shape) <= MAX_RANK:
        return "[" + ", ".join(map(str, shape)) + "]"
    # A damaged file's "shape" can be thousands long: the message shows its start.
    return "[" + ", ".join(map(str, shape[:MAX_RANK])) + f", ...] (rank {len(shape)})"


# --------------------------------------------------------------------------------------------
# What a Model must satisfy to be written, and what a file read must give: one check for both,
# so write() never produces a file read() refuses.

def _check_tensor(i, tensor, fail):
    where = _tensor_label(i, tensor.name)
    shape = tensor.shape
    if len(shape) > MAX_RANK:
        fail(where, f"rank {len(shape)} is more than {MAX_RANK}")
    for d in shape:
        if d < -1 or d > INT32_MAX:
            fail(where, f"shape {_shape_text(shape)} has a dimension outside [-1, 2**31)")
    count = math.prod(1 if d == -1 else d for d in shape)
    if count > MAX_ELEMENTS:
        fail(where, f"shape {_shape_text(shape)} has {count} elements, more than {MAX_ELEMENTS}")
    if tensor.data is not None:
        data = tensor.data
        if not isinstance(data, np.ndarray) or data.dtype != np.dtype(tensor.dtype):
            fail(where, f"data must be a {tensor.dtype} array")
        if -1 in shape:
            fail(where, f"a constant's shape {_shape_text(shape)} cannot have an unknown (-1) "
                        f"dimension")
        if data.shape != shape:
            fail(where, f"data has shape {_shape_text(data.shape)}, the tensor "
                        f"{_shape_text(shape)}")
        if data.size == 0:
            # TFLite reads an empty buffer as "no data": the constant would come back an input.
            fail(where, "a constant with no elements cannot be told apart from an activation")
    q = tensor.quantization
    if q is None:
        return
    if not isinstance(q, Quantization):
        fail(where, f"quantization must be a Quantization, got {type(q).__name__}")
    if q.scale.shape != q.zero_point.shape or q.scale.size == 0:
        fail(where, f"quantization has {q.scale.size} scales and {q.zero_point.size} zero points")
    if not (np.all(np.isfinite(q.scale)) and np.all(q.scale > 0)):
        fail(where, "quantization scales must be finite and positive")
    if tensor.dtype in _QUANT_RANGES:
        lo, hi = _QUANT_RANGES[tensor.dtype]
        if q.zero_point.min() < lo or q.zero_point.max() > hi:
            fail(where, f"zero points must lie in [{lo}, {hi}] for {tensor.dtype}")
    rank = len(shape)
    if not 0 <= q.axis < max(rank, 1):
        fail(where, f"quantized dimension {q.axis} is not a dimension of shape "
                    f"{_shape_text(shape)}")
    if q.per_channel and q.scale.size != shape[q.axis]:
        fail(where, f"{q.scale.size} scales along dimension {q.axis} of shape "
                    f"{_shape_text(shape)}")


def _check_options(where, op, fail):
    names = OP_OPTIONS[op.kind]
    options = op.options
    if not isinstance(options, dict) or set(options) != set(names):
        got = sorted(options) if isinstance(options, dict) else type(options).__name__
        fail(where, f"options must be exactly {list(names)}, got {got}")
    for key in names:
        value = options[key]
        if key in _POSITIVE_INT_OPTIONS:
            if isinstance(value, (bool, np.bool_)):
                fail(where, f"{key} must be an int, got {value!r}")
            try:
                value = operator.index(value)
            except TypeError:
                fail(where, f"{key} must be an int, got {value!r}")
            if not 1 <= value <= INT32_MAX:
                fail(where, f"{key} must be at least 1, got {value}")
        elif key == "padding":
            if value not in PADDINGS:
                fail(where, f"padding must be one of {PADDINGS}, got {value!r}")
        elif key == "activation":
            if value not in ACTIVATIONS:
                fail(where, f"activation must be one of {ACTIVATIONS}, got {value!r}")
        elif key == "keep_dims":
            if not isinstance(value, (bool, np.bool_)):
                fail(where, f"keep_dims must be a bool, got {value!r}")
        elif key == "beta":
            number = isinstance(value, (int, float, np.integer, np.floating))
            if not number or isinstance(value, (bool, np.bool_)):
                fail(where, f"beta must be a number, got {value!r}")
            if not math.isfinite(value) or abs(value) > _FLOAT32_MAX:
                fail(where, f"beta must be finite in float32, got {value!r}")


def _check_layout(where, op, ins, out, fail):
    """The input layouts model.py states for each kind, as far as ranks and constants go."""
    kind = op.kind

    def rank(t, n, what):
        if len(t.shape) != n:
            fail(where, f"{what} {t.name!r} has shape {_shape_text(t.shape)}, not rank {n}")

    def int32_constant(t, what, ranks):
        if t.data is None or t.dtype != "int32" or len(t.shape) not in ranks:
            fail(where, f"{what} {t.name!r} must be an int32 constant of rank "
                        f"{' or '.join(map(str, ranks))}")

    if kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        rank(ins[0], 4, "input")
        rank(ins[1], 4, "filter")
        rank(out, 4, "output")
        channels = ins[1].shape[0] if kind == "CONV_2D" else ins[1].shape[3]
        if kind == "DEPTHWISE_CONV_2D" and ins[1].shape[0] != 1:
            fail(where, f"filter {ins[1].name!r} has shape {_shape_text(ins[1].shape)}, "
                        f"not [1, KH, KW, C]")
        if len(ins) == 3:
            rank(ins[2], 1, "bias")
            if ins[2].shape[0] != channels:
                fail(where, f"bias {ins[2].name!r} has {ins[2].shape[0]} entries for "
                            f"{channels} output channels")
    elif kind == "FULLY_CONNECTED":
        rank(ins[1], 2, "weights")
        if len(ins) == 3:
            rank(ins[2], 1, "bias")
            if ins[2].shape[0] != ins[1].shape[0]:
                fail(where, f"bias {ins[2].name!r} has {ins[2].shape[0]} entries for "
                            f"{ins[1].shape[0]} outputs")
    elif kind == "AVERAGE_POOL_2D":
        rank(ins[0], 4, "input")
        rank(out, 4, "output")
    elif kind == "MEAN":
        int32_constant(ins[1], "axes", (0, 1))
        r = len(ins[0].shape)
        if np.any(ins[1].data < -r) or np.any(ins[1].data >= max(r, 1)):
            fail(where, f"axes {ins[1].data.tolist()} are not axes of rank {r}")
    elif kind == "RESHAPE":
        int32_constant(ins[1], "shape", (1,))
        new = ins[1].data
        if np.any(new < -1) or np.count_nonzero(new == -1) > 1:
            fail(where, f"new shape {new.tolist()} is not a shape (one -1 at most)")
    elif kind == "QUANTIZE":
        if ins[0].dtype not in ("float32", "int8", "uint8") or out.dtype not in ("int8",
                                                                                  "uint8"):
            fail(where, f"quantizes {ins[0].dtype} to {out.dtype}; it takes float32 (or a "
                        f"quantized type) to int8 or uint8")
    elif kind == "DEQUANTIZE":
        if ins[0].dtype not in ("int8", "uint8") or out.dtype != "float32":
            fail(where, f"dequantizes {ins[0].dtype} to {out.dtype}; it takes int8 or uint8 to "
                        f"float32")
    for t in ins + [out]:
        if t.dtype in ("int8", "uint8") and t.quantization is None:
            fail(where, f"{t.dtype} tensor {t.name!r} has no quantization")


def _check_model(model, fail):
    if not isinstance(model, Model) or not isinstance(model.tensors, dict):
        raise TypeError(f"expected a fqcore.deploy.model.Model, got {type(model).__name__}")
    index = {}
    for i, (name, tensor) in enumerate(model.tensors.items()):
        if not isinstance(tensor, Tensor):
            fail(f"tensor {i} ({name!r})", f"is a {type(tensor).__name__}, not a Tensor")
        if tensor.name != name:
            fail(_tensor_label(i, name), f"is filed under {name!r} but named {tensor.name!r}")
        _check_tensor(i, tensor, fail)
        index[name] = i

    def lookup(where, name, what):
        if not isinstance(name, str) or name not in index:
            fail(where, f"{what} {name!r} is not a tensor of the model")
        return model.tensors[name]

    # Tensors whose value exists before op i runs: constants, graph inputs, earlier outputs.
    ready = {name for name, t in model.tensors.items() if t.data is not None}
    for name in model.inputs:
        t = lookup("inputs", name, "input")
        if t.data is not None:
            fail("inputs", f"input {name!r} is a constant")
        ready.add(name)
    for i, op in enumerate(model.ops):
        if not isinstance(op, Op):
            fail(f"op {i}", f"is a {type(op).__name__}, not an Op")
        if not isinstance(op.name, str):
            fail(f"op {i} ({op.kind})", f"name must be a str, got {type(op.name).__name__}")
        where = f"op {i} ({op.kind}{', ' + repr(op.name) if op.name else ''})"
        lo, hi = _INPUT_COUNTS[op.kind]
        if not lo <= len(op.inputs) <= hi:
            fail(where, f"has {len(op.inputs)} inputs; {op.kind} takes "
                        f"{lo if lo == hi else f'{lo} or {hi}'}")
        if len(op.outputs) != 1:
            fail(where, f"has {len(op.outputs)} outputs; {op.kind} has 1")
        ins = [lookup(where, name, "input") for name in op.inputs]
        out = lookup(where, op.outputs[0], "output")
        for name in op.inputs:
            if name not in ready:
                fail(where, f"input {name!r} has no value yet (no earlier op writes it)")
        if op.outputs[0] in ready:
            fail(where, f"output {op.outputs[0]!r} already has a value")
        ready.add(op.outputs[0])
        _check_options(where, op, fail)
        _check_layout(where, op, ins, out, fail)
    for name in model.outputs:
        lookup("outputs", name, "output")
        if name not in ready:
            fail("outputs", f"output {name!r} is never written")
    if not isinstance(model.description, str):
        fail("description", f"must be a str, got {type(model.description).__name__}")


# --------------------------------------------------------------------------------------------
# Writing

def _signature_name(name):
    # TF's converter names a signature's tensors after the SavedModel's, without the ":0".
    return name[:-2] if name.endswith(":0") else name


def _pack_names(names):
    parts = []
    for name in names:
        raw = name.encode("utf-8")
        parts += [struct.pack("<I", len(raw)), raw]
    return b"".join(parts)


def _unpack_names(payload, n_ops, fail):
    where = f"metadata {OP_NAMES_METADATA!r}"
    data = bytes(payload) if payload is not None else b""
    names, pos = [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            fail(where, f"ends inside the length of name {len(names)}")
        n = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        if n > len(data) - pos:
            fail(where, f"name {len(names)} of {n} bytes runs past its {len(data)}-byte buffer")
        try:
            names.append(data[pos:pos + n].decode("utf-8"))
        except UnicodeDecodeError as e:
            fail(where, f"name {len(names)} is not UTF-8 ({e.reason})")
        pos += n
    if len(names) != n_ops:
        fail(where, f"holds {len(names)} names for {n_ops} ops")
    return names


def _little_endian(data):
    return np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<")).tobytes()


class _Writer:
    """Builds the flatbuffer bottom up: children before the tables that point to them."""

    def __init__(self, flatbuffers, model):
        self.b = flatbuffers.Builder(1024)
        self.model = model
        self.index = {name: i for i, name in enumerate(model.tensors)}

    def offsets(self, offs):
        b = self.b
        b.StartVector(4, len(offs), 4)
        for off in reversed(offs):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    def ints(self, values, dtype=np.int32):
        return self.b.CreateNumpyVector(np.asarray(values, dtype=dtype).reshape(-1))

    def buffer(self, payload):
        b = self.b
        data = None
        if payload:
            # Aligns the data, not its length prefix, to 16 bytes (the schema's force_align).
            b.Prep(fb.Buffer.DATA_ALIGNMENT, len(payload))
            data = b.CreateByteVector(payload)
        b.StartObject(fb.Buffer.NUM_FIELDS)
        if data is not None:
            b.PrependUOffsetTRelativeSlot(fb.Buffer.DATA, data, 0)
        return b.EndObject()

    def quantization(self, q):
        b, Q = self.b, fb.QuantizationParameters
        scale = b.CreateNumpyVector(q.scale.astype("<f4"))
        zero_point = b.CreateNumpyVector(q.zero_point.astype("<i8"))
        b.StartObject(Q.NUM_FIELDS)
        b.PrependUOffsetTRelativeSlot(Q.SCALE, scale, 0)
        b.PrependUOffsetTRelativeSlot(Q.ZERO_POINT, zero_point, 0)
        b.PrependInt32Slot(Q.QUANTIZED_DIMENSION, int(q.axis), 0)
        return b.EndObject()

    def tensor(self, t, buffer_index):
        b, T = self.b, fb.Tensor
        # As TF's converter: an unknown dimension is 1 in `shape`, -1 in `shape_signature`.
        shape = self.ints([1 if d == -1 else d for d in t.shape])
        signature = self.ints(t.shape) if -1 in t.shape else None
        name = b.CreateString(t.name)
        quant = self.quantization(t.quantization) if t.quantization is not None else None
        b.StartObject(T.NUM_FIELDS)
        b.PrependUOffsetTRelativeSlot(T.SHAPE, shape, 0)
        b.PrependInt8Slot(T.TYPE, fb.TENSOR_TYPES[t.dtype], 0)
        b.PrependUint32Slot(T.BUFFER, buffer_index, 0)
        b.PrependUOffsetTRelativeSlot(T.NAME, name, 0)
        if quant is not None:
            b.PrependUOffsetTRelativeSlot(T.QUANTIZATION, quant, 0)
        if signature is not None:
            b.PrependUOffsetTRelativeSlot(T.SHAPE_SIGNATURE, signature, 0)
        b.PrependBoolSlot(T.HAS_RANK, True, False)
        return b.EndObject()

    def options(self, op):
        """(union type, table offset) of op's builtin options."""
        b, o = self.b, op.options
        kind = op.kind
        act = fb.ACTIVATION_CODES.get(o.get("activation", "NONE"))
        pad = fb.PADDING_CODES.get(o.get("padding", "SAME"))
        if kind == "CONV_2D":
            C = fb.Conv2DOptions
            b.StartObject(C.NUM_FIELDS)
            b.PrependInt8Slot(C.PADDING, pad, 0)
            b.PrependInt32Slot(C.STRIDE_W, int(o["stride_w"]), 0)
            b.PrependInt32Slot(C.STRIDE_H, int(o["stride_h"]), 0)
            b.PrependInt8Slot(C.FUSED_ACTIVATION_FUNCTION, act, 0)
            b.PrependInt32Slot(C.DILATION_W_FACTOR, int(o["dilation_w"]), C.DILATION_DEFAULT)
            b.PrependInt32Slot(C.DILATION_H_FACTOR, int(o["dilation_h"]), C.DILATION_DEFAULT)
        elif kind == "DEPTHWISE_CONV_2D":
            D = fb.DepthwiseConv2DOptions
            b.StartObject(D.NUM_FIELDS)
            b.PrependInt8Slot(D.PADDING, pad, 0)
            b.PrependInt32Slot(D.STRIDE_W, int(o["stride_w"]), 0)
            b.PrependInt32Slot(D.STRIDE_H, int(o["stride_h"]), 0)
            b.PrependInt32Slot(D.DEPTH_MULTIPLIER, int(o["depth_multiplier"]), 0)
            b.PrependInt8Slot(D.FUSED_ACTIVATION_FUNCTION, act, 0)
            b.PrependInt32Slot(D.DILATION_W_FACTOR, int(o["dilation_w"]), D.DILATION_DEFAULT)
            b.PrependInt32Slot(D.DILATION_H_FACTOR, int(o["dilation_h"]), D.DILATION_DEFAULT)
        elif kind == "AVERAGE_POOL_2D":
            P = fb.Pool2DOptions
            b.StartObject(P.NUM_FIELDS)
            b.PrependInt8Slot(P.PADDING, pad, 0)
            b.PrependInt32Slot(P.STRIDE_W, int(o["stride_w"]), 0)
            b.PrependInt32Slot(P.STRIDE_H, int(o["stride_h"]), 0)
            b.PrependInt32Slot(P.FILTER_WIDTH, int(o["filter_w"]), 0)
            b.PrependInt32Slot(P.FILTER_HEIGHT, int(o["filter_h"]), 0)
            b.PrependInt8Slot(P.FUSED_ACTIVATION_FUNCTION, act, 0)
        elif kind == "FULLY_CONNECTED":
            F = fb.FullyConnectedOptions
            b.StartObject(F.NUM_FIELDS)
            b.PrependInt8Slot(F.FUSED_ACTIVATION_FUNCTION, act, 0)
        elif kind == "ADD":
            A = fb.AddOptions
            b.StartObject(A.NUM_FIELDS)
            b.PrependInt8Slot(A.FUSED_ACTIVATION_FUNCTION, act, 0)
        elif kind == "MEAN":
            b.StartObject(fb.ReducerOptions.NUM_FIELDS)
            b.PrependBoolSlot(fb.ReducerOptions.KEEP_DIMS, bool(o["keep_dims"]), False)
        elif kind == "SOFTMAX":
            b.StartObject(fb.SoftmaxOptions.NUM_FIELDS)
            b.PrependFloat32Slot(fb.SoftmaxOptions.BETA, float(o["beta"]), 0.0)
        elif kind == "RESHAPE":
            # The shape input rules; new_shape repeats it for readers that look only here.
            new_shape = self.ints(self.model.tensors[op.inputs[1]].data)
            b.StartObject(fb.ReshapeOptions.NUM_FIELDS)
            b.PrependUOffsetTRelativeSlot(fb.ReshapeOptions.NEW_SHAPE, new_shape, 0)
        else:   # QUANTIZE, DEQUANTIZE: empty options tables
            b.StartObject(0)
        return fb.OPTIONS_TYPE[kind], b.EndObject()

    def operator(self, op, opcode_index):
        b, O = self.b, fb.Operator
        options_type, options = self.options(op)
        inputs = self.ints([self.index[n] for n in op.inputs])
        outputs = self.ints([self.index[n] for n in op.outputs])
        b.StartObject(O.NUM_FIELDS)
        b.PrependUint32Slot(O.OPCODE_INDEX, opcode_index, 0)
        b.PrependUOffsetTRelativeSlot(O.INPUTS, inputs, 0)
        b.PrependUOffsetTRelativeSlot(O.OUTPUTS, outputs, 0)
        b.PrependUint8Slot(O.BUILTIN_OPTIONS_TYPE, options_type, 0)
        b.PrependUOffsetTRelativeSlot(O.BUILTIN_OPTIONS, options, 0)
        return b.EndObject()

    def operator_code(self, kind, version):
        b, C = self.b, fb.OperatorCode
        code = fb.BUILTIN_CODES[kind]
        b.StartObject(C.NUM_FIELDS)
        b.PrependInt8Slot(C.DEPRECATED_BUILTIN_CODE,
                          min(code, fb.PLACEHOLDER_FOR_GREATER_OP_CODES), 0)
        b.PrependInt32Slot(C.VERSION, version, C.VERSION_DEFAULT)
        b.PrependInt32Slot(C.BUILTIN_CODE, code, 0)
        return b.EndObject()

    def tensor_maps(self, names):
        b, M = self.b, fb.TensorMap
        maps = []
        for name in names:
            alias = b.CreateString(_signature_name(name))
            b.StartObject(M.NUM_FIELDS)
            b.PrependUOffsetTRelativeSlot(M.NAME, alias, 0)
            b.PrependUint32Slot(M.TENSOR_INDEX, self.index[name], 0)
            maps.append(b.EndObject())
        return self.offsets(maps)

    def signature(self):
        b, S = self.b, fb.SignatureDef
        inputs = self.tensor_maps(self.model.inputs)
        outputs = self.tensor_maps(self.model.outputs)
        key = b.CreateString(SIGNATURE_KEY)
        b.StartObject(S.NUM_FIELDS)
        b.PrependUOffsetTRelativeSlot(S.INPUTS, inputs, 0)
        b.PrependUOffsetTRelativeSlot(S.OUTPUTS, outputs, 0)
        b.PrependUOffsetTRelativeSlot(S.SIGNATURE_KEY, key, 0)
        b.PrependUint32Slot(S.SUBGRAPH_INDEX, 0, 0)
        return b.EndObject()

    def build(self):
        b, model = self.b, self.model
        # Operator codes: one per (kind, version), in order of first use, as the converter does.
        codes, op_codes = {}, []
        for op in model.ops:
            key = (op.kind, op_version(op, model))
            if key not in codes:
                codes[key] = len(codes)
            op_codes.append(codes[key])
        runtime = min_runtime_version(codes).encode("ascii")

        buffers = [self.buffer(b"")]        # buffer 0: the empty sentinel
        tensors = []
        for t in model.tensors.values():
            if t.data is None:
                index = 0
            else:
                index = len(buffers)
                buffers.append(self.buffer(_little_endian(t.data)))
            tensors.append(self.tensor(t, index))
        metadata = [(MIN_RUNTIME_METADATA, len(buffers))]
        buffers.append(self.buffer(runtime.ljust(MIN_RUNTIME_BUFFER_SIZE, b"\0")))
        if any(op.name for op in model.ops):
            metadata.append((OP_NAMES_METADATA, len(buffers)))
            buffers.append(self.buffer(_pack_names([op.name for op in model.ops])))

        operators = [self.operator(op, i) for op, i in zip(model.ops, op_codes)]
        tensors_vec = self.offsets(tensors)
        inputs = self.ints([self.index[n] for n in model.inputs])
        outputs = self.ints([self.index[n] for n in model.outputs])
        operators_vec = self.offsets(operators)
        name = b.CreateString(SUBGRAPH_NAME)
        G = fb.SubGraph
        b.StartObject(G.NUM_FIELDS)
        b.PrependUOffsetTRelativeSlot(G.TENSORS, tensors_vec, 0)
        b.PrependUOffsetTRelativeSlot(G.INPUTS, inputs, 0)
        b.PrependUOffsetTRelativeSlot(G.OUTPUTS, outputs, 0)
        b.PrependUOffsetTRelativeSlot(G.OPERATORS, operators_vec, 0)
        b.PrependUOffsetTRelativeSlot(G.NAME, name, 0)
        subgraph = b.EndObject()

        metadata_tables = []
        for meta, index in metadata:
            meta_name = b.CreateString(meta)
            b.StartObject(fb.Metadata.NUM_FIELDS)
            b.PrependUOffsetTRelativeSlot(fb.Metadata.NAME, meta_name, 0)
            b.PrependUint32Slot(fb.Metadata.BUFFER, index, 0)
            metadata_tables.append(b.EndObject())

        codes_vec = self.offsets([self.operator_code(kind, version) for kind, version in codes])
        subgraphs_vec = self.offsets([subgraph])
        buffers_vec = self.offsets(buffers)
        metadata_vec = self.offsets(metadata_tables)
        signatures_vec = self.offsets([self.signature()])
        description = b.CreateString(model.description)
        M = fb.Model
        b.StartObject(M.NUM_FIELDS)
        b.PrependUint32Slot(M.VERSION, fb.SCHEMA_VERSION, 0)
        b.PrependUOffsetTRelativeSlot(M.OPERATOR_CODES, codes_vec, 0)
        b.PrependUOffsetTRelativeSlot(M.SUBGRAPHS, subgraphs_vec, 0)
        b.PrependUOffsetTRelativeSlot(M.DESCRIPTION, description, 0)
        b.PrependUOffsetTRelativeSlot(M.BUFFERS, buffers_vec, 0)
        b.PrependUOffsetTRelativeSlot(M.METADATA, metadata_vec, 0)
        b.PrependUOffsetTRelativeSlot(M.SIGNATURE_DEFS, signatures_vec, 0)
        b.Finish(b.EndObject(), file_identifier=fb.FILE_IDENTIFIER)
        return bytes(b.Output())


def write(model: Model) -> bytes:
    """model as the bytes of a .tflite file (schema 3, one subgraph, signature "serving_default",
    TFLite's op versions and min_runtime_version; op names, if any, in the metadata entry
    "fqcore_op_names"). Needs the flatbuffers package."""
    try:
        import flatbuffers
    except ImportError as e:
        raise ImportError("writing .tflite files needs the flatbuffers package: "
                          "pip install fqcore[deploy]") from e
    fail = _raiser("model")
    _check_model(model, fail)
    aliases = {}
    for name in list(model.inputs) + list(model.outputs):
        alias = _signature_name(name)
        if aliases.setdefault(alias, name) != name:
            fail("signature", f"tensors {aliases[alias]!r} and {name!r} both map to the "
                              f"signature name {alias!r}")
    return _Writer(flatbuffers, model).build()


# --------------------------------------------------------------------------------------------
# Reading

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
