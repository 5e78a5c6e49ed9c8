"""write(): a Model as the bytes of a .tflite file, as TF's converter writes it."""
# write() needs the optional flatbuffers package; read() does not, so the reference interpreter
# runs on numpy alone.
import numpy as np

from . import tflite_schema as fb
from .model import Model
from .tflite_checks import _check_model, _raiser
from .tflite_op_names import OP_NAMES_METADATA, _pack_names
from .tflite_versions import min_runtime_version, op_version

SIGNATURE_KEY = "serving_default"
MIN_RUNTIME_METADATA = "min_runtime_version"
MIN_RUNTIME_BUFFER_SIZE = 16     # the converter's fixed-size buffer, zero-padded
SUBGRAPH_NAME = "main"


def _signature_name(name):
    # TF's converter names a signature's tensors after the SavedModel's, without the ":0".
    return name[:-2] if name.endswith(":0") else name



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
