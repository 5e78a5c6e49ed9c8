"""read(): parses an ONNX file that onnx_writer.write() produced back into a Model."""
import json
import math

import numpy as np

from .model import QUANTIZED_RANGES, Model, Op, Quantization, Tensor
from .onnx_common import (INTEGER_TYPE_KEY, MAX_OPSET, MIN_OPSET, _NUMPY_TYPES, _SEP,
                          _TO_NCHW, _TO_NHWC, _need_onnx, _same_padding)

# Bounds that keep an absurd file cheap to reject before anything is allocated.
_MAX_ELEMENTS = 1 << 31
_MAX_RANK = 8
_ITEM_SIZES = {"float32": 4, "uint8": 1, "int8": 1, "int32": 4, "int64": 8}
_KINDS_WITH_ACTIVATION = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD",
                          "AVERAGE_POOL_2D")
# The op types write() emits (each has a _Reader.node_<lower-case name>).
_NODE_TYPES = ("QuantizeLinear", "DequantizeLinear", "Transpose", "Conv", "Gemm", "Add",
               "AveragePool", "GlobalAveragePool", "Reshape", "Softmax", "Relu", "Clip", "Flatten")


def _base(name, suffix):
    """`name` without `suffix` ("::uint8", ...), or None when it does not end so."""
    return name[:-len(suffix)] if name.endswith(suffix) and len(name) > len(suffix) else None


class _Pending:
    """An op whose float result waits for its QuantizeLinear."""

    def __init__(self, kind, inputs, options, name):
        self.kind, self.inputs, self.options, self.name = kind, inputs, options, name
        self.emitted = False
        self.activation = "NONE"
        self.grid = None          # (scale, zero point, dtype) of a pre-activation or pooled Q
        self.nchw_result = False  # RESHAPE to a 4-D shape, transposed back to NCHW


class _Reader:
    """Parses a ModelProto that write() produced back into a Model, node by node: each ONNX
    value gets a kind (what it holds for the Model), and each node must fit the kinds it reads."""

    def __init__(self, onnx, proto, source):
        self.onnx, self.proto, self.source = onnx, proto, source
        self.kinds = {}
        self.constants = {}
        self.declared = {}
        self.tensors = {}
        self.ops = []
        self.boundary = set()
        self.integer_type = "uint8"
        self.pending = []

    def fail(self, where, what):
        raise ValueError(f"{self.source}: {where}: {what}")

    # -- the file ---------------------------------------------------------------------------
    def model(self):
        proto = self.proto
        if not proto.HasField("graph"):
            self.fail("model", "has no graph (not an ONNX model)")
        opsets = {o.domain: o.version for o in proto.opset_import}
        version = opsets.get("", opsets.get("ai.onnx"))
        if version is None or not MIN_OPSET <= version <= MAX_OPSET:
            self.fail("model", f"imports opset {version} of the default domain; fqcore reads "
                               f"{MIN_OPSET} to {MAX_OPSET}")
        properties = {p.key: p.value for p in proto.metadata_props}
        self.integer_type = properties.get(INTEGER_TYPE_KEY, "uint8")
        if self.integer_type not in QUANTIZED_RANGES:
            self.fail("model", f"metadata {INTEGER_TYPE_KEY} is {self.integer_type!r}, not int8 "
                               f"or uint8")
        graph = proto.graph
        if len(graph.sparse_initializer):
            self.fail("graph", "has sparse initializers, which write() never produces")
        for init in graph.initializer:
            self.initializer(init)
        for info in list(graph.input) + list(graph.output) + list(graph.value_info):
            self.declare(info)
        inputs = [info.name for info in graph.input]
        outputs = [info.name for info in graph.output]
        if not inputs or not outputs:
            self.fail("graph", "needs at least one input and one output")
        self.boundary = set(inputs) | set(outputs)
        for name in inputs:
            self.graph_input(name)
        for node in graph.node:
            self.node(node)
        for name in outputs:
            kind = self.kinds.get(name)
            if kind is None or kind[0] not in ("tensor", "output") or kind[1] != name:
                self.fail(f"output {name!r}", "is not a Model tensor the graph computes")
        for name, tensor in self.tensors.items():
            if tensor.dtype in QUANTIZED_RANGES and tensor.quantization is None:
                self.fail(f"input {name!r}", "is never dequantized, so it has no quantization")
        for pending in self.pending:
            if not pending.emitted:
                self.fail(f"node {pending.name!r}", "computes a result no QuantizeLinear takes")
        return Model(self.tensors, self.ops, inputs, outputs, description=proto.doc_string)

    def initializer(self, init):
        where = f"initializer {init.name!r}"
        if not init.name or init.name in self.constants:
            self.fail(where, "has no name or a name another initializer has")
        if init.data_location == 1 or len(init.external_data):
            self.fail(where, "keeps its data in an external file, which fqcore does not open")
        dtype = _NUMPY_TYPES.get(init.data_type)
        if dtype is None:
            self.fail(where, f"has data type {init.data_type}, not one write() produces")
        dims = list(init.dims)
        if len(dims) > _MAX_RANK or any(d < 0 for d in dims):
            self.fail(where, f"has dims {dims}")
        count = math.prod(dims)
        if count > _MAX_ELEMENTS:
            self.fail(where, f"claims {count} elements")
        if init.HasField("raw_data"):
            if len(init.raw_data) != count * _ITEM_SIZES[dtype]:
                self.fail(where, f"holds {len(init.raw_data)} bytes for {count} elements of "
                                 f"{dtype}")
            array = np.frombuffer(init.raw_data, np.dtype(dtype).newbyteorder("<"))
        else:
            field = {"float32": init.float_data, "int64": init.int64_data}.get(dtype,
                                                                              init.int32_data)
            if len(field) != count:
                self.fail(where, f"holds {len(field)} values for {count} elements")
            values = np.array(field, np.float32 if dtype == "float32" else np.int64)
            if dtype in ("uint8", "int8", "int32"):
                info = np.iinfo(dtype)
                if values.size and (values.min() < info.min or values.max() > info.max):
                    self.fail(where, f"holds values outside {dtype}")
            array = values
        self.constants[init.name] = np.array(array, dtype).reshape(dims)
        self.kinds[init.name] = ("constant", init.name)

    def declare(self, info):
        where = f"value {info.name!r}"
        if not info.type.HasField("tensor_type"):
            self.fail(where, "is not a tensor")
        tensor_type = info.type.tensor_type
        dtype = _NUMPY_TYPES.get(tensor_type.elem_type)
        if dtype is None or dtype == "int64" or not tensor_type.HasField("shape"):
            self.fail(where, "needs a float32, int8, uint8 or int32 type and a shape")
        shape = []
        for dim in tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value > 0:
                shape.append(dim.dim_value)
            elif dim.HasField("dim_param") and dim.dim_param:
                shape.append(-1)
            else:
                self.fail(where, "has a dimension that is neither a size nor a name")
        if len(shape) > _MAX_RANK or -1 in shape[1:]:
            self.fail(where, f"has shape {shape}: only the first dimension may be open")
        previous = self.declared.get(info.name)
        if previous is not None and previous != (dtype, tuple(shape)):
            self.fail(where, "is declared twice, differently")
        self.declared[info.name] = (dtype, tuple(shape))

    def model_shape(self, name, where):
        """The Model shape of tensor `name`: as declared for graph inputs and outputs, NCHW back
        to NHWC for the graph's other values."""
        if name not in self.declared:
            self.fail(where, f"value {name!r} has no declared type and shape")
        dtype, shape = self.declared[name]
        if len(shape) == 4 and name not in self.boundary:
            shape = tuple(shape[i] for i in _TO_NHWC)
        return dtype, shape

    def graph_input(self, name):
        where = f"input {name!r}"
        if name in self.constants or name in self.tensors or _SEP in name:
            self.fail(where, "is an initializer, repeated, or not a Model tensor name")
        dtype, shape = self.model_shape(name, where)
        if dtype not in ("float32", "int8", "uint8"):
            self.fail(where, f"is {dtype}; inputs are float32, int8 or uint8")
        self.tensors[name] = Tensor(name, shape, dtype)
        self.kinds[name] = ("nhwc", name) if len(shape) == 4 else ("tensor", name)

    # -- nodes ------------------------------------------------------------------------------
    def node(self, node):
        where = f"node {node.name!r} ({node.op_type})"
        if node.domain not in ("", "ai.onnx"):
            self.fail(where, f"is in domain {node.domain!r}; write() uses the default domain")
        handler = getattr(self, "node_" + node.op_type.lower(), None) \
            if node.op_type in _NODE_TYPES else None
        if handler is None:
            self.fail(where, "is not an op write() produces")
        for name in node.input:
            if name and name not in self.kinds:
                self.fail(where, f"reads {name!r}, which no initializer, input or earlier node "
                                 f"gives")
        if len(node.output) != 1 or not node.output[0] or node.output[0] in self.kinds:
            self.fail(where, "must write one new value")
        try:
            attributes = {a.name: self.onnx.helper.get_attribute_value(a)
                          for a in node.attribute}
        except Exception as error:  # noqa: BLE001 - any malformed attribute is the file's fault
            self.fail(where, f"has a malformed attribute ({error})")
        note = {}
        if node.doc_string:
            try:
                note = json.loads(node.doc_string)
            except (ValueError, RecursionError):
                note = {}
            if not isinstance(note, dict):
                note = {}
        self.kinds[node.output[0]] = handler(where, node, attributes, note)

    def kind(self, node, index, *accepted, where=""):
        if index >= len(node.input) or not node.input[index]:
            self.fail(where, f"has no input {index}")
        kind = self.kinds[node.input[index]]
        if accepted and kind[0] not in accepted:
            self.fail(where, f"input {index} ({node.input[index]!r}) is {kind[0]}, the node takes "
                             f"{' or '.join(accepted)}")
        return kind

    def inputs(self, where, node, fewest, most):
        if not fewest <= len(node.input) <= most:
            self.fail(where, f"takes {fewest}-{most} inputs, has {len(node.input)}")

    def grid(self, where, node):
        """(scale, zero point, dtype) of a per-tensor QuantizeLinear / DequantizeLinear in the
        Model's terms (uint8 values of an int8 Model shift back by 128), and the type the graph
        stores."""
        self.inputs(where, node, 3, 3)
        scale = self.constant(where, node, 1)
        zero_point = self.constant(where, node, 2)
        if scale.shape != () or zero_point.shape != () or scale.dtype != np.float32 \
                or zero_point.dtype.name not in QUANTIZED_RANGES:
            self.fail(where, "needs a float32 scalar scale and an int8 / uint8 scalar zero point")
        if not (np.isfinite(scale) and scale > 0):
            self.fail(where, f"has scale {scale}")
        stored = zero_point.dtype.name
        if stored == "uint8" and self.integer_type == "int8":
            return np.float32(scale), int(zero_point) - 128, "int8", stored
        return np.float32(scale), int(zero_point), stored, stored

    def constant(self, where, node, index):
        kind = self.kind(node, index, "constant", where=where)
        return self.constants[kind[1]]

    def result(self, pending):
        """The float result of an op's node, waiting for its QuantizeLinear."""
        self.pending.append(pending)
        return ("result", pending)

    def node_transpose(self, where, node, attributes, note):
        self.inputs(where, node, 1, 1)
        kind = self.kind(node, 0, where=where)
        perm = tuple(attributes.get("perm", ()))
        out = node.output[0]
        if kind[0] == "nhwc" and perm == _TO_NCHW and out == kind[1] + _SEP + "nchw":
            return ("tensor", kind[1])
        if kind[0] == "tensor" and perm == _TO_NHWC and kind[1] == out and out in self.boundary:
            return ("output", out)
        if kind[0] == "dequantized" and perm == _TO_NHWC:
            return ("dequantized_nhwc", kind[1])
        if kind[0] == "result" and kind[1].kind == "RESHAPE" and perm == _TO_NCHW \
                and not kind[1].nchw_result:
            kind[1].nchw_result = True
            return kind
        self.fail(where, f"transposes {kind[0]} {node.input[0]!r} with perm {list(perm)}, "
                         f"which write() never does")

    def tensor_of(self, name):
        """The Model tensor an ONNX value name stands for (V(t) or t itself)."""
        base = _base(name, _SEP + "nchw")
        if base is not None and base in self.boundary:
            return base
        return None if _SEP in name else name

    def new_tensor(self, where, name, dtype, stored, scale, zero_point):
        """A Model tensor of `dtype` that the graph holds as `stored` (its uint8 twin, for an
        int8 graph input or output, is not the value declared)."""
        if name is None or name in self.tensors:
            self.fail(where, "writes a value that is no new Model tensor")
        declared_dtype, shape = self.model_shape(name, where)
        if declared_dtype != (dtype if name in self.boundary else stored):
            self.fail(where, f"writes {stored}, {name!r} is declared {declared_dtype}")
        quantization = None if scale is None else Quantization([scale], [zero_point])
        self.tensors[name] = Tensor(name, shape, dtype, quantization)
        return name

    def set_quantization(self, where, name, scale, zero_point, dtype):
        tensor = self.tensors[name]
        if tensor.dtype != dtype:
            self.fail(where, f"reads {name!r} as {dtype}, it is {tensor.dtype}")
        quantization = Quantization([scale], [zero_point])
        if tensor.quantization is None:
            tensor.quantization = quantization
        elif tensor.quantization != quantization:
            self.fail(where, f"uses another scale or zero point for {name!r} than its "
                             f"QuantizeLinear")

    def node_quantizelinear(self, where, node, attributes, note):
        scale, zero_point, dtype, stored = self.grid(where, node)
        kind = self.kind(node, 0, where=where)
        out = node.output[0]
        twin_of = _base(out, _SEP + "uint8")
        if twin_of is not None and (stored != "uint8" or dtype != "int8"):
            self.fail(where, f"writes {out!r}, which must be the uint8 twin of an int8 tensor")
        if kind[0] == "dequantized":
            name = kind[1]
            if twin_of == name or self.tensor_of(out) == name:
                self.set_quantization(where, name, scale, zero_point, dtype)
                return ("twin" if twin_of == name else "tensor", name)
        if kind[0] == "tensor" and self.tensors[kind[1]].dtype == "float32":
            target = twin_of if twin_of is not None else self.tensor_of(out)
            name = self.new_tensor(where, target, dtype, stored, scale, zero_point)
            self.ops.append(Op("QUANTIZE", [kind[1]], [name], name=node.name))
            return ("twin" if twin_of is not None else "tensor", name)
        if kind[0] in ("result", "activated", "squeezed"):
            return self.finish(where, node, kind, (scale, zero_point, dtype), stored)
        self.fail(where, f"quantizes {kind[0]} {node.input[0]!r}, which write() never does")

    def finish(self, where, node, kind, grid, stored):
        """The QuantizeLinear after an op's float result: a pre-activation or pooled grid, or
        the op's output tensor, which emits the op."""
        pending = kind[1]
        out = node.output[0]
        if kind[0] == "result":
            for suffix, role in ((_SEP + "preactivation", "preactivation"),
                                 (_SEP + "pooled", "pooled")):
                if _base(out, suffix) is not None:
                    if pending.grid is not None or (role == "pooled") != (pending.kind == "MEAN"):
                        self.fail(where, f"writes {out!r} after a {pending.kind}")
                    pending.grid = grid
                    return (role, pending)
        if kind[0] == "squeezed":
            pending.options["keep_dims"] = False
        elif pending.kind == "MEAN":
            pending.options["keep_dims"] = True
        if kind[0] == "activated":
            pending.activation = kind[2]
        if (kind[0] == "squeezed" or pending.activation != "NONE" and pending.grid) \
                and pending.grid != grid:
            self.fail(where, "quantizes onto another grid than the op's own QuantizeLinear")
        twin_of = _base(out, _SEP + "uint8")
        target = twin_of if twin_of is not None else self.tensor_of(out)
        scale, zero_point, dtype = grid
        name = self.new_tensor(where, target, dtype, stored, scale, zero_point)
        self.emit(where, pending, name)
        return ("twin" if twin_of is not None else "tensor", name)

    def emit(self, where, pending, name):
        options = dict(pending.options)
        if pending.kind in _KINDS_WITH_ACTIVATION:
            options["activation"] = pending.activation
        elif pending.activation != "NONE":
            self.fail(where, f"applies {pending.activation} to a {pending.kind}")
        out = self.tensors[name]
        if pending.kind == "RESHAPE" and pending.nchw_result != (len(out.shape) == 4):
            self.fail(where, "reshapes to a 4-D tensor without the Transpose back to NCHW, or "
                             "the other way round")
        for index in pending.inputs:
            tensor = self.tensors[index]
            if pending.kind != "QUANTIZE" and tensor.data is None \
                    and tensor.dtype in QUANTIZED_RANGES and tensor.dtype != out.dtype:
                self.fail(where, f"reads {tensor.dtype} {index!r} and writes {out.dtype}")
        self.ops.append(Op(pending.kind, list(pending.inputs), [name], options,
                           name=pending.name))
        pending.emitted = True

    def node_dequantizelinear(self, where, node, attributes, note):
        self.inputs(where, node, 3, 3)
        kind = self.kind(node, 0, where=where)
        out = node.output[0]
        if kind[0] == "constant":
            scale = self.constants[self.kind(node, 1, "constant", where=where)[1]]
            zero_point = self.constants[self.kind(node, 2, "constant", where=where)[1]]
            return ("dq_constant", kind[1], scale, zero_point, attributes.get("axis", 1))
        scale, zero_point, dtype, stored = self.grid(where, node)
        if kind[0] in ("preactivation", "pooled"):
            if kind[1].grid != (scale, zero_point, dtype):
                self.fail(where, f"dequantizes {node.input[0]!r} on another grid")
            return (kind[0] + "_dq", kind[1])
        if kind[0] not in ("tensor", "twin"):
            self.fail(where, f"dequantizes {kind[0]} {node.input[0]!r}, which write() never "
                             f"does")
        name = kind[1]
        if kind[0] == "twin" and stored != "uint8":
            self.fail(where, "reads a uint8 twin as another type")
        self.set_quantization(where, name, scale, zero_point, dtype)
        dequantized = name + _SEP + "dequantized"
        if out in (dequantized, name + _SEP + "real") or out.startswith(dequantized + _SEP):
            return ("dequantized", name)
        target = self.new_tensor(where, self.tensor_of(out), "float32", "float32", None, None)
        self.ops.append(Op("DEQUANTIZE", [name], [target], name=node.name))
        return ("tensor", target)

    def dequantized_input(self, where, node, index, rank=None):
        name = self.kind(node, index, "dequantized", where=where)[1]
        shape = self.tensors[name].shape
        if rank is not None and len(shape) != rank:
            self.fail(where, f"reads {name!r} of shape {shape}, the op takes rank {rank}")
        return name

    def layer_constants(self, where, node, x, onnx_to_model, axis_in_model, rank):
        """The weights (and bias) a Conv / Gemm reads, as Model constants."""
        kind = self.kind(node, 1, "dq_constant", where=where)
        _, name, scale, zero_point, dq_axis = kind
        data = self.constants[name]
        x_dtype = self.tensors[x].dtype
        if data.ndim != rank or data.dtype.name not in QUANTIZED_RANGES \
                or zero_point.dtype != data.dtype or scale.dtype != np.float32 \
                or scale.shape != zero_point.shape or scale.ndim > 1:
            self.fail(where, f"weights {name!r} are not {rank}-D 8-bit with a matching scale "
                             f"and zero point")
        per_channel = scale.ndim == 1
        if per_channel and (dq_axis != 0 or scale.size != data.shape[0]):
            self.fail(where, f"weights {name!r}: per-channel scales must run along axis 0")
        values = data.astype(np.int64)
        zero_points = zero_point.astype(np.int64).reshape(-1)
        if x_dtype == "int8" and data.dtype == np.uint8:
            # write() stores int8 weights as uint8 + 128.
            values, zero_points = values - 128, zero_points - 128
        elif data.dtype.name != x_dtype:
            self.fail(where, f"weights {name!r} are {data.dtype.name}, the input is {x_dtype}")
        if onnx_to_model:
            values = np.transpose(values, onnx_to_model)
        if name in self.tensors:
            self.fail(where, f"weights {name!r} serve a second layer")
        quantization = Quantization(scale.reshape(-1), zero_points,
                                    axis_in_model if per_channel else 0)
        self.tensors[name] = Tensor(name, values.shape, x_dtype, quantization, values)
        names = [name]
        if len(node.input) > 2:
            _, b_name, b_scale, b_zero, _ = self.kind(node, 2, "dq_constant", where=where)
            bias = self.constants[b_name]
            channels = values.shape[axis_in_model]
            if bias.dtype != np.int32 or bias.shape != (channels,) or b_scale.ndim > 1 \
                    or b_scale.dtype != np.float32 or b_zero.shape != b_scale.shape \
                    or np.any(b_zero != 0) or b_name in self.tensors:
                self.fail(where, f"bias {b_name!r} is not int32 [{channels}] with zero point 0")
            self.tensors[b_name] = Tensor(b_name, bias.shape, "int32",
                                          Quantization(b_scale.reshape(-1),
                                                       np.zeros(b_scale.size)), bias)
            names.append(b_name)
        return names

    def padding(self, where, attributes, note, sizes, kernel, strides, dilations):
        """SAME or VALID from the explicit pads [top, left, bottom, right]; where neither pads,
        the node's note says which the Model had."""
        if attributes.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            self.fail(where, "uses auto_pad; write() gives explicit pads")
        pads = list(attributes.get("pads", [0, 0, 0, 0]))
        same = [_same_padding(s, k, st, d) for s, k, st, d in zip(sizes, kernel, strides,
                                                                 dilations)]
        same_pads = [same[0][0], same[1][0], same[0][1], same[1][1]]
        if pads == [0, 0, 0, 0]:
            return "SAME" if note.get("padding") == "SAME" and same_pads == pads else "VALID"
        if pads == same_pads:
            return "SAME"
        self.fail(where, f"pads {pads} are neither TFLite's SAME ({same_pads}) nor VALID")

    def node_conv(self, where, node, attributes, note):
        self.inputs(where, node, 2, 3)
        x = self.dequantized_input(where, node, 0, rank=4)
        _, h, w, channels = self.tensors[x].shape
        group = attributes.get("group", 1)
        depthwise = group > 1 or note.get("kind") == "DEPTHWISE_CONV_2D"
        if group not in (1, channels) or (depthwise and group != channels):
            self.fail(where, f"has group {group} for {channels} input channels: only plain and "
                             f"depthwise convolutions are Model ops")
        if depthwise:
            names = self.layer_constants(where, node, x, (1, 2, 3, 0), 3, 4)
            kh, kw, out_channels = self.tensors[names[0]].shape[1:]
            if self.tensors[names[0]].shape[0] != 1 or out_channels % channels:
                self.fail(where, "has depthwise weights that are not [C * M, 1, KH, KW]")
        else:
            names = self.layer_constants(where, node, x, (0, 2, 3, 1), 0, 4)
            _, kh, kw, depth = self.tensors[names[0]].shape
            if depth != channels:
                self.fail(where, f"has weights for {depth} input channels, the input has "
                                 f"{channels}")
        strides = list(attributes.get("strides", [1, 1]))
        dilations = list(attributes.get("dilations", [1, 1]))
        if list(attributes.get("kernel_shape", [kh, kw])) != [kh, kw] or len(strides) != 2 \
                or len(dilations) != 2 or min(strides + dilations) < 1:
            self.fail(where, "has kernel_shape, strides or dilations that do not fit its "
                             "weights")
        options = {"padding": self.padding(where, attributes, note, (h, w), (kh, kw), strides,
                                           dilations),
                   "stride_h": strides[0], "stride_w": strides[1],
                   "dilation_h": dilations[0], "dilation_w": dilations[1]}
        kind = "CONV_2D"
        if depthwise:
            kind = "DEPTHWISE_CONV_2D"
            options["depth_multiplier"] = out_channels // channels
        return self.result(_Pending(kind, [x] + names, options, node.name))

    def node_gemm(self, where, node, attributes, note):
        self.inputs(where, node, 2, 3)
        if (attributes.get("transA", 0), attributes.get("transB", 0),
                attributes.get("alpha", 1.0), attributes.get("beta", 1.0)) != (0, 1, 1.0, 1.0):
            self.fail(where, "needs transB=1 and no transA, alpha or beta")
        x = self.dequantized_input(where, node, 0, rank=2)
        names = self.layer_constants(where, node, x, None, 0, 2)
        if self.tensors[names[0]].shape[1] != self.tensors[x].shape[1]:
            self.fail(where, "has weights that do not fit its input")
        return self.result(_Pending("FULLY_CONNECTED", [x] + names, {}, node.name))

    def node_add(self, where, node, attributes, note):
        self.inputs(where, node, 2, 2)
        inputs = [self.dequantized_input(where, node, i) for i in (0, 1)]
        return self.result(_Pending("ADD", inputs, {}, node.name))

    def node_averagepool(self, where, node, attributes, note):
        self.inputs(where, node, 1, 1)
        x = self.dequantized_input(where, node, 0, rank=4)
        kernel = list(attributes.get("kernel_shape", []))
        strides = list(attributes.get("strides", [1, 1]))
        if len(kernel) != 2 or len(strides) != 2 or min(kernel + strides) < 1 \
                or attributes.get("count_include_pad", 0) != 0 \
                or attributes.get("ceil_mode", 0) != 0 \
                or list(attributes.get("dilations", [1, 1])) != [1, 1]:
            self.fail(where, "needs a 2-D kernel, strides, count_include_pad=0 and no "
                             "ceil_mode or dilations")
        _, h, w, _ = self.tensors[x].shape
        options = {"padding": self.padding(where, attributes, note, (h, w), kernel, strides,
                                           (1, 1)),
                   "stride_h": strides[0], "stride_w": strides[1],
                   "filter_h": kernel[0], "filter_w": kernel[1]}
        return self.result(_Pending("AVERAGE_POOL_2D", [x], options, node.name))

    def node_globalaveragepool(self, where, node, attributes, note):
        self.inputs(where, node, 1, 1)
        x = self.dequantized_input(where, node, 0, rank=4)
        name = note.get("axes")
        data, shape = note.get("axes_data", [1, 2]), note.get("axes_shape", [2])
        if not isinstance(name, str) or _SEP in name:
            name = node.output[0].split(_SEP)[0] + "/axes"
        try:
            axes = np.array(data, np.int32).reshape(shape)
        except (TypeError, ValueError, OverflowError):
            self.fail(where, f"has a note with axes {data!r} of shape {shape!r}")
        if sorted({int(a) % 4 for a in axes.reshape(-1)}) != [1, 2] or axes.size != 2 \
                or name in self.tensors:
            self.fail(where, f"has a note with axes {axes.tolist()} named {name!r}, not the "
                             f"height and width")
        self.tensors[name] = Tensor(name, axes.shape, "int32", data=axes)
        return self.result(_Pending("MEAN", [x, name], {}, node.name))

    def node_reshape(self, where, node, attributes, note):
        self.inputs(where, node, 2, 2)
        kind = self.kind(node, 0, "dequantized", "dequantized_nhwc", where=where)
        x = kind[1]
        if (kind[0] == "dequantized_nhwc") != (len(self.tensors[x].shape) == 4) \
                or attributes.get("allowzero", 0) != 0:
            self.fail(where, "reshapes a 4-D input without the Transpose to NHWC, or the other "
                             "way round")
        shape_name = self.kind(node, 1, "constant", where=where)[1]
        shape = self.constants[shape_name]
        if shape.dtype != np.int64 or shape.ndim != 1 or np.any(shape == 0) \
                or np.any(np.abs(shape) > np.iinfo(np.int32).max) or shape_name in self.tensors:
            self.fail(where, f"new shape {shape_name!r} is not a 1-D int64 shape without zeros")
        self.tensors[shape_name] = Tensor(shape_name, shape.shape, "int32",
                                          data=shape.astype(np.int32))
        return self.result(_Pending("RESHAPE", [x, shape_name], {}, node.name))

    def node_softmax(self, where, node, attributes, note):
        self.inputs(where, node, 1, 1)
        x = self.dequantized_input(where, node, 0)
        rank = len(self.tensors[x].shape)
        if attributes.get("axis", -1) not in (-1, rank - 1):
            self.fail(where, "must run along the last axis")
        return self.result(_Pending("SOFTMAX", [x], {"beta": 1.0}, node.name))

    def activated(self, where, node, activation):
        kind = self.kind(node, 0, "result", "preactivation_dq", where=where)
        pending = kind[1]
        if pending.activation != "NONE" or pending.kind not in _KINDS_WITH_ACTIVATION \
                or (kind[0] == "result" and pending.grid is not None):
            self.fail(where, f"applies {activation} where write() never does")
        return ("activated", pending, activation)

    def node_relu(self, where, node, attributes, note):
        self.inputs(where, node, 1, 1)
        return self.activated(where, node, "RELU")

    def node_clip(self, where, node, attributes, note):
        self.inputs(where, node, 3, 3)
        bounds = [self.constant(where, node, i) for i in (1, 2)]
        if any(b.shape != () or b.dtype != np.float32 for b in bounds) \
                or [float(b) for b in bounds] != [0.0, 6.0]:
            self.fail(where, "clips to other bounds than [0, 6] (RELU6)")
        return self.activated(where, node, "RELU6")

    def node_flatten(self, where, node, attributes, note):
        self.inputs(where, node, 1, 1)
        kind = self.kind(node, 0, "pooled_dq", where=where)
        if attributes.get("axis", 1) != 1:
            self.fail(where, "must flatten from axis 1")
        return ("squeezed", kind[1])


def read(data, source="<bytes>") -> Model:
    """The Model of an ONNX file write() produced. A damaged file, or one in another shape, is a
    ValueError naming `source` and the part of the file that is wrong."""
    onnx = _need_onnx()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")
    try:
        proto = onnx.load_from_string(bytes(data))
    except Exception as error:  # noqa: BLE001 - protobuf's errors for damaged bytes vary
        raise ValueError(f"{source}: not an ONNX model ({type(error).__name__}: {error})") \
            from None
    try:
        return _Reader(onnx, proto, source).model()
    except ValueError:
        raise
    except (KeyError, IndexError, TypeError, AttributeError, OverflowError) as error:
        # A field a damaged file fills with something no check above expects still ends here.
        raise ValueError(f"{source}: malformed ONNX model ({type(error).__name__}: {error})") \
            from None
