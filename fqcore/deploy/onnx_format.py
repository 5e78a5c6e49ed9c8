"""The ONNX (QDQ) form of the integer Model: write() builds it with the onnx package, in the shape
ONNX Runtime fuses into its integer kernels (QLinearConv, QGemm, QLinearAdd, ...); read() parses a
file write() produced back into a Model.

The graph is NCHW inside, with a Transpose at each 4-D graph input and output, so it takes and
returns arrays in the Model's NHWC layout (ONNX Runtime turns its convolutions back to NHWC and
cancels the Transposes). Every value without "::" in its name is the Model tensor of that name;
the graph's helpers are named after the tensor or op they serve, "<name>::<role>".

Each op reads DequantizeLinear outputs (one per consumer) and ends in a QuantizeLinear onto its
output's grid:
  CONV_2D            Conv, weights [O, KH, KW, I] as OIHW, explicit pads (TFLite's SAME puts
                     the odd one after), per-channel scales on axis 0, int32 bias through a
                     DequantizeLinear of scale s_in * s_w
  DEPTHWISE_CONV_2D  Conv with group = C, weights [1, KH, KW, C * M] as [C * M, 1, KH, KW]
  FULLY_CONNECTED    Gemm with transB = 1 on the weights [O, I], per-channel scales on axis 0
  ADD                Add (equal shapes, or a one-element input)
  AVERAGE_POOL_2D    AveragePool, explicit pads, count_include_pad = 0
  MEAN               GlobalAveragePool (over height and width only), then for keep_dims False a
                     Flatten between a QuantizeLinear and a DequantizeLinear on the output grid
  RESHAPE            Reshape (of NHWC data: Transposes around it for 4-D tensors)
  SOFTMAX            Softmax along the last axis (beta 1)
  QUANTIZE           QuantizeLinear;  DEQUANTIZE  DequantizeLinear
A node's doc_string (JSON) keeps what the graph cannot tell apart: SAME or VALID where neither
pads, a depthwise convolution of one channel, MEAN's axes constant.

Deviations from the plainest QDQ form, each so that ONNX Runtime computes the Model exactly:
  - an int8 Model is stored as uint8, every value + 128 and every zero point + 128 (the metadata
    entry "fqcore_integer_type" says "int8"). Weights: on x86 without VNNI, MLAS's u8 x s8
    kernels add pairs of products with int16 saturation, u8 x u8 ones do not. Activations:
    ONNX Runtime rewrites int8 QuantizeLinear / DequantizeLinear pairs to uint8 on x86 itself,
    but only where a QuantizeLinear feeds one DequantizeLinear, so a tensor read by two ops would
    stay int8 and its ops unfused. Integer arithmetic is the same either way;
  - an int8 graph input or output keeps its type at the graph's edge and passes through a uint8
    twin inside ("<name>::uint8", DequantizeLinear -> QuantizeLinear, exact);
  - a fused RELU / RELU6 that the output grid already implies is a Relu / Clip right before the
    QuantizeLinear, which ONNX Runtime drops; any other is applied to the quantized output
    (QuantizeLinear -> DequantizeLinear -> Relu / Clip -> QuantizeLinear on the same grid), exact
    because every grid value survives the float round trip.
"""
import json
import math

import numpy as np

from .model import ACTIVATIONS, PADDINGS, Model, Op, Quantization, Tensor

# 13 brings per-axis QuantizeLinear; 21 is the newest opset the tests run in ONNX Runtime.
MIN_OPSET, MAX_OPSET = 13, 21
PRODUCER = "fqcore"
_SEP = "::"
_INT_RANGES = {"int8": (-128, 127), "uint8": (0, 255)}
# ONNX TensorProto data types by numpy dtype name, and back.
_ONNX_TYPES = {"float32": 1, "uint8": 2, "int8": 3, "int32": 6, "int64": 7}
_NUMPY_TYPES = {v: k for k, v in _ONNX_TYPES.items()}
_TO_NCHW, _TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)
# The model metadata entry naming the Model's integer type (the graph stores int8 as uint8).
INTEGER_TYPE_KEY = "fqcore_integer_type"
_SHIFT = {"int8": 128, "uint8": 0}


def _need_onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError("ONNX export needs the onnx package: pip install fqcore[deploy]") \
            from None
    return onnx


def _rhe(x):
    """Round half to even in float32, as MLAS's cvtps2dq and rint do."""
    return np.rint(np.float32(x))


def activation_is_redundant(activation, quantization, dtype):
    """True when the output grid already clamps as RELU / RELU6 would: zero point at the bottom
    of the range and, for RELU6, 6 at or past the top (ONNX Runtime's test, rint(6 / scale) in
    float32). ONNX Runtime then drops the Relu / Clip and fuses the op."""
    if activation == "NONE":
        return True
    qmin, qmax = _INT_RANGES[dtype]
    zero_point = int(quantization.zero_point[0])
    if zero_point != qmin:
        return False
    if activation == "RELU":
        return True
    with np.errstate(over="ignore"):
        top = _rhe(np.float32(6.0) / np.float32(quantization.scale[0]))
    return bool(top + zero_point >= qmax)


def _onnx_shape(shape):
    """A Model shape in the ONNX graph's layout: 4-D NHWC becomes NCHW."""
    shape = tuple(shape)
    return tuple(shape[i] for i in _TO_NCHW) if len(shape) == 4 else shape


def _same_padding(size, kernel, stride, dilation):
    """TFLite's SAME padding as ONNX pads (before, after): the total a full output grid needs,
    the odd one after."""
    effective = (kernel - 1) * dilation + 1
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


class _Writer:
    """Builds the GraphProto of one Model, op by op."""

    def __init__(self, onnx, model, opset):
        self.onnx, self.helper = onnx, onnx.helper
        self.model, self.opset = model, opset
        self.nodes, self.initializers, self.value_info = [], [], []
        self.names = set()
        self.dequantized = {}
        self.graph_inputs = set(model.inputs)
        self.graph_outputs = set(model.outputs)

    # -- names and values ------------------------------------------------------------------
    def fresh(self, name):
        if name in self.names:
            raise ValueError(f"the ONNX graph would hold two values named {name!r}: rename the "
                             f"Model tensor that clashes with it")
        self.names.add(name)
        return name

    def node(self, op_type, inputs, outputs, name, note=None, **attributes):
        """A node; `note` (a dict) becomes its doc_string as JSON: what the Model says that the
        graph cannot tell apart (SAME or VALID where neither pads, a depthwise convolution of
        one channel, MEAN's axes constant)."""
        doc = json.dumps(note, sort_keys=True) if note else None
        self.nodes.append(self.helper.make_node(op_type, inputs, outputs, name=name,
                                                doc_string=doc, **attributes))

    def constant(self, name, array, dtype):
        # np.asarray, not ascontiguousarray, which would make a scalar 1-D.
        array = np.asarray(array, dtype=dtype)
        proto = self.onnx.numpy_helper.from_array(array, self.fresh(name))
        self.initializers.append(proto)
        return name

    def is_boundary(self, name):
        return name in self.graph_inputs or name in self.graph_outputs

    def value(self, tensor):
        """The ONNX value of a Model tensor in the graph's layout."""
        if len(tensor.shape) == 4 and self.is_boundary(tensor.name):
            return tensor.name + _SEP + "nchw"
        return tensor.name

    def twin(self, tensor):
        """int8 graph inputs and outputs have a uint8 twin inside the graph."""
        return tensor.dtype == "int8" and self.is_boundary(tensor.name)

    def stored(self, tensor):
        """The uint8 value holding an integer Model tensor inside the graph."""
        return tensor.name + _SEP + "uint8" if self.twin(tensor) else self.value(tensor)

    def grid(self, tensor, int8=False):
        """The scale and zero point of a tensor as the graph stores it (uint8, the zero point
        shifted for int8), or with `int8` as the Model has it (an int8 twin's edge)."""
        q = tensor.quantization
        scale = tensor.name + _SEP + "scale"
        zero_point = tensor.name + _SEP + ("zero_point_int8" if int8 else "zero_point")
        if scale not in self.names:
            self.constant(scale, np.float32(q.scale[0]), np.float32)
        if zero_point not in self.names:
            shift = 0 if int8 else _SHIFT[tensor.dtype]
            self.constant(zero_point, np.int64(q.zero_point[0]) + shift,
                          "int8" if int8 else "uint8")
        return scale, zero_point

    def dequantized_value(self, tensor):
        """The float value of an integer Model tensor for one more consumer: each gets a
        DequantizeLinear of its own, which ONNX Runtime needs to convert and fuse the pairs."""
        name = tensor.name
        count = self.dequantized.get(name, 0) + 1
        self.dequantized[name] = count
        tail = "" if count == 1 else f"{_SEP}{count}"
        out = self.fresh(name + _SEP + "dequantized" + tail)
        self.node("DequantizeLinear", [self.stored(tensor), *self.grid(tensor)], [out],
                  name + _SEP + "dequantize" + tail)
        return out

    def quantize_into(self, source, tensor, name):
        """QuantizeLinear of float `source` onto `tensor`'s grid, as the graph holds it."""
        stored = self.fresh(self.stored(tensor))
        self.node("QuantizeLinear", [source, *self.grid(tensor)], [stored], name)
        if self.twin(tensor):
            # The graph's own int8 output is the uint8 twin's value, re-quantized exactly.
            real = self.fresh(tensor.name + _SEP + "real")
            self.node("DequantizeLinear", [stored, *self.grid(tensor)], [real],
                      tensor.name + _SEP + "dequantize_uint8")
            self.node("QuantizeLinear", [real, *self.grid(tensor, int8=True)],
                      [self.fresh(self.value(tensor))], tensor.name + _SEP + "quantize_int8")

    def output_of(self, op, source, tensor, activation="NONE"):
        """The op's float result `source` onto its output tensor, with its fused activation."""
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        if activation != "NONE" and not activation_is_redundant(activation,
                                                                tensor.quantization,
                                                                tensor.dtype):
            # The clamp applies to the quantized values (see the module docstring).
            grid = self.grid(tensor)
            pre = self.fresh(tensor.name + _SEP + "preactivation")
            self.node("QuantizeLinear", [source, *grid], [pre],
                      op.name + _SEP + "quantize_preactivation")
            source = self.fresh(tensor.name + _SEP + "preactivation" + _SEP + "dequantized")
            self.node("DequantizeLinear", [pre, *grid], [source],
                      op.name + _SEP + "dequantize_preactivation")
        if activation != "NONE":
            activated = self.fresh(tensor.name + _SEP + "activated")
            if activation == "RELU":
                self.node("Relu", [source], [activated], op.name + _SEP + "relu")
            else:
                low = self.clip_bound(0.0)
                high = self.clip_bound(6.0)
                self.node("Clip", [source, low, high], [activated], op.name + _SEP + "relu6")
            source = activated
        self.quantize_into(source, tensor, op.name + _SEP + "quantize")

    def clip_bound(self, value):
        name = f"{_SEP}clip{_SEP}{value:g}"
        if name not in self.names:
            self.constant(name, np.float32(value), np.float32)
        return name

    def result(self, tensor):
        return self.fresh(tensor.name + _SEP + "unquantized")

    # -- boundary --------------------------------------------------------------------------
    def declare(self, tensor):
        shape = [d if d >= 0 else "batch" for d in tensor.shape]
        return self.helper.make_tensor_value_info(tensor.name, _ONNX_TYPES[tensor.dtype], shape)

    def graph_input(self, tensor):
        if tensor.dtype not in ("float32", "int8", "uint8"):
            raise ValueError(f"input {tensor.name!r} is {tensor.dtype}; ONNX export takes "
                             f"float32, int8 or uint8 inputs")
        self.fresh(tensor.name)
        if len(tensor.shape) == 4:
            self.node("Transpose", [tensor.name], [self.fresh(self.value(tensor))],
                      tensor.name + _SEP + "to_nchw", perm=list(_TO_NCHW))
        if self.twin(tensor):
            real = self.fresh(tensor.name + _SEP + "real")
            self.node("DequantizeLinear", [self.value(tensor), *self.grid(tensor, int8=True)],
                      [real], tensor.name + _SEP + "dequantize_int8")
            self.node("QuantizeLinear", [real, *self.grid(tensor)],
                      [self.fresh(self.stored(tensor))], tensor.name + _SEP + "quantize_uint8")

    def graph_output(self, tensor):
        if len(tensor.shape) == 4:
            self.node("Transpose", [self.value(tensor)], [self.fresh(tensor.name)],
                      tensor.name + _SEP + "to_nhwc", perm=list(_TO_NHWC))

    # -- ops -------------------------------------------------------------------------------
    def build(self):
        model = self.model
        types = {t.dtype for t in model.tensors.values() if t.dtype in _INT_RANGES}
        if len(types) > 1:
            raise ValueError("ONNX export takes a Model whose integer tensors are all int8 or "
                             "all uint8, this one has both")
        for name in model.inputs:
            tensor = model.tensor(name)
            if name in self.graph_outputs:
                raise ValueError(f"input {name!r} is also an output: ONNX export needs an op "
                                 f"between them")
            self.graph_input(tensor)
        for index, op in enumerate(model.ops):
            label = f"{op.kind} op {op.name or index!r}"
            try:
                handler = getattr(self, "op_" + op.kind.lower())
                if len(op.outputs) != 1:
                    raise ValueError(f"has {len(op.outputs)} outputs, ONNX export takes one")
                handler(op, [model.tensor(n) for n in op.inputs], model.tensor(op.outputs[0]))
            except ValueError as error:
                raise ValueError(f"{label}: {error}") from None
            except KeyError as error:
                raise ValueError(f"{label}: option {error} is missing") from None
        for name in model.outputs:
            self.graph_output(model.tensor(name))
        helper = self.helper
        for tensor in model.tensors.values():
            if tensor.data is None and tensor.name not in self.graph_inputs \
                    and tensor.name not in self.graph_outputs:
                shape = [d if d >= 0 else "batch" for d in _onnx_shape(tensor.shape)]
                stored = "uint8" if tensor.dtype in _INT_RANGES else tensor.dtype
                self.value_info.append(helper.make_tensor_value_info(
                    tensor.name, _ONNX_TYPES[stored], shape))
        graph = helper.make_graph(
            self.nodes, "fqcore", [self.declare(model.tensor(n)) for n in model.inputs],
            [self.declare(model.tensor(n)) for n in model.outputs], self.initializers,
            value_info=self.value_info)
        proto = helper.make_model(graph, producer_name=PRODUCER,
                                  opset_imports=[helper.make_opsetid("", self.opset)])
        # The oldest IR version that has this opset, so that older runtimes load the file.
        proto.ir_version = helper.find_min_ir_version_for(list(proto.opset_import))
        proto.doc_string = model.description
        helper.set_model_props(proto, {INTEGER_TYPE_KEY: types.pop() if types else "uint8"})
        return proto

    def quantized(self, tensor, role):
        if tensor.dtype not in _INT_RANGES or tensor.data is not None:
            raise ValueError(f"{role} {tensor.name!r} must be an int8 or uint8 activation, got "
                             f"{'a constant ' if tensor.data is not None else ''}{tensor.dtype}")
        q = tensor.quantization
        if q is None or q.per_channel:
            raise ValueError(f"{role} {tensor.name!r} needs per-tensor quantization")
        return tensor

    def layer_output(self, op, x, out):
        self.quantized(x, "input")
        self.quantized(out, "output")
        if out.dtype != x.dtype:
            raise ValueError(f"output {out.name!r} is {out.dtype}, input {x.name!r} is {x.dtype}")

    def weights(self, w, x, onnx_layout, axis):
        """The weights as a uint8 initializer in ONNX's layout (int8 + 128, see the module
        docstring) and their DequantizeLinear, per axis 0 when per channel."""
        if w.data is None or w.dtype != x.dtype or w.quantization is None:
            raise ValueError(f"weights {w.name!r} must be a quantized {x.dtype} constant")
        q = w.quantization
        if q.per_channel and (q.axis != axis or q.scale.size != w.shape[axis]):
            raise ValueError(f"weights {w.name!r}: {q.scale.size} scales along axis {q.axis}, "
                             f"per channel needs {w.shape[axis]} along axis {axis}")
        if np.any(q.zero_point != q.zero_point[0]):
            raise ValueError(f"weights {w.name!r}: ONNX Runtime's kernels take one zero point "
                             f"for all channels, got {q.zero_point.tolist()}")
        shift = 128 if w.dtype == "int8" else 0
        data = np.transpose(w.data.astype(np.int64) + shift, onnx_layout) \
            if onnx_layout else w.data.astype(np.int64) + shift
        self.constant(w.name, data, np.uint8)
        base = w.name + _SEP
        scale = q.scale if q.per_channel else q.scale[0]
        zero_point = (q.zero_point if q.per_channel else q.zero_point[0]) + shift
        self.constant(base + "scale", scale, np.float32)
        self.constant(base + "zero_point", zero_point, np.uint8)
        out = self.fresh(base + "dequantized")
        self.node("DequantizeLinear", [w.name, base + "scale", base + "zero_point"], [out],
                  base + "dequantize", axis=0)
        return out

    def bias(self, b, channels):
        if b.data is None or b.dtype != "int32" or b.shape != (channels,):
            raise ValueError(f"bias {b.name!r} must be an int32 constant of shape ({channels},)")
        q = b.quantization
        if q is None or np.any(q.zero_point != 0) or q.scale.size not in (1, channels):
            raise ValueError(f"bias {b.name!r} needs a scale (per tensor or per channel) and "
                             f"zero point 0")
        self.constant(b.name, b.data, np.int32)
        base = b.name + _SEP
        self.constant(base + "scale", q.scale if q.per_channel else q.scale[0], np.float32)
        self.constant(base + "zero_point", q.zero_point if q.per_channel else q.zero_point[0],
                      np.int32)
        out = self.fresh(base + "dequantized")
        self.node("DequantizeLinear", [b.name, base + "scale", base + "zero_point"], [out],
                  base + "dequantize", axis=0)
        return out

    def conv(self, op, ins, out, depthwise):
        x, w = ins[0], ins[1]
        self.layer_output(op, x, out)
        if len(x.shape) != 4 or w.data is None or w.data.ndim != 4:
            raise ValueError(f"takes a 4-D input and 4-D weights, got {x.shape} and {w.shape}")
        options = op.options
        _, kh, kw, _ = w.shape
        if depthwise:
            # TFLite [1, KH, KW, C * M] is ONNX's [C * M, 1, KH, KW] with C groups.
            if w.shape[0] != 1 or w.shape[3] != x.shape[3] * options["depth_multiplier"]:
                raise ValueError(f"filter {w.name!r} of shape {w.shape} is not [1, KH, KW, "
                                 f"{x.shape[3]} * depth_multiplier]")
            weights = self.weights(w, x, (3, 0, 1, 2), 3)
            channels, group = w.shape[3], x.shape[3]
        else:
            if w.shape[3] != x.shape[3]:
                raise ValueError(f"filter {w.name!r} takes {w.shape[3]} channels, input "
                                 f"{x.name!r} has {x.shape[3]}")
            weights = self.weights(w, x, (0, 3, 1, 2), 0)
            channels, group = w.shape[0], 1
        inputs = [self.dequantized_value(x), weights]
        if len(ins) > 2:
            inputs.append(self.bias(ins[2], channels))
        stride = [options["stride_h"], options["stride_w"]]
        dilation = [options["dilation_h"], options["dilation_w"]]
        if options["padding"] not in PADDINGS:
            raise ValueError(f"padding must be one of {PADDINGS}, got {options['padding']!r}")
        if options["padding"] == "SAME":
            top, bottom = _same_padding(x.shape[1], kh, stride[0], dilation[0])
            left, right = _same_padding(x.shape[2], kw, stride[1], dilation[1])
        else:
            top = bottom = left = right = 0
        result = self.result(out)
        note = {"kind": op.kind, "padding": options["padding"]}
        self.node("Conv", inputs, [result], op.name, note, kernel_shape=[kh, kw],
                  strides=stride, dilations=dilation, pads=[top, left, bottom, right],
                  group=group)
        self.output_of(op, result, out, options["activation"])

    def op_conv_2d(self, op, ins, out):
        self.arity(op, 2, 3)
        self.conv(op, ins, out, depthwise=False)

    def op_depthwise_conv_2d(self, op, ins, out):
        self.arity(op, 2, 3)
        self.conv(op, ins, out, depthwise=True)

    def op_fully_connected(self, op, ins, out):
        self.arity(op, 2, 3)
        x, w = ins[0], ins[1]
        self.layer_output(op, x, out)
        if len(x.shape) != 2 or w.data is None or w.data.ndim != 2 or w.shape[1] != x.shape[1]:
            raise ValueError(f"takes an input [N, I] and weights [O, I], got {x.shape} and "
                             f"{w.shape}")
        inputs = [self.dequantized_value(x), self.weights(w, x, None, 0)]
        if len(ins) > 2:
            inputs.append(self.bias(ins[2], w.shape[0]))
        result = self.result(out)
        self.node("Gemm", inputs, [result], op.name, transB=1)
        self.output_of(op, result, out, op.options["activation"])

    def op_add(self, op, ins, out):
        self.arity(op, 2, 2)
        a, b = ins
        self.layer_output(op, a, out)
        self.layer_output(op, b, out)
        if tuple(a.shape) != tuple(b.shape) and 1 not in (math.prod(a.shape),
                                                           math.prod(b.shape)):
            # ONNX Runtime's QLinearAdd takes another path where one side is broadcast along
            # its innermost axis, which depends on the layout it chose.
            raise ValueError(f"inputs of shapes {a.shape} and {b.shape}: ONNX export takes "
                             f"equal shapes or a one-element input")
        if len(a.shape) != len(b.shape) and 4 in (len(a.shape), len(b.shape)):
            raise ValueError(f"inputs of ranks {len(a.shape)} and {len(b.shape)}: a 4-D add "
                             f"needs both inputs 4-D")
        result = self.result(out)
        self.node("Add", [self.dequantized_value(a), self.dequantized_value(b)], [result],
                  op.name)
        self.output_of(op, result, out, op.options["activation"])

    def op_average_pool_2d(self, op, ins, out):
        self.arity(op, 1, 1)
        (x,) = ins
        self.layer_output(op, x, out)
        if len(x.shape) != 4:
            raise ValueError(f"takes a 4-D input, got {x.shape}")
        o = op.options
        kh, kw, sh, sw = o["filter_h"], o["filter_w"], o["stride_h"], o["stride_w"]
        if o["padding"] not in PADDINGS:
            raise ValueError(f"padding must be one of {PADDINGS}, got {o['padding']!r}")
        if o["padding"] == "SAME":
            top, bottom = _same_padding(x.shape[1], kh, sh, 1)
            left, right = _same_padding(x.shape[2], kw, sw, 1)
        else:
            top = bottom = left = right = 0
        result = self.result(out)
        # TFLite averages over the window's part inside the image.
        self.node("AveragePool", [self.dequantized_value(x)], [result], op.name,
                  {"padding": o["padding"]},
                  kernel_shape=[kh, kw], strides=[sh, sw], pads=[top, left, bottom, right],
                  count_include_pad=0)
        self.output_of(op, result, out, o["activation"])

    def op_mean(self, op, ins, out):
        self.arity(op, 2, 2)
        x, axes_tensor = ins
        self.layer_output(op, x, out)
        if axes_tensor.data is None or axes_tensor.dtype != "int32":
            raise ValueError(f"axes {axes_tensor.name!r} must be an int32 constant")
        axes = sorted({int(a) % 4 for a in axes_tensor.data.reshape(-1)}) \
            if len(x.shape) == 4 else None
        if axes != [1, 2] or axes_tensor.data.size != 2:
            raise ValueError(f"ONNX export takes MEAN over the height and width of a 4-D input "
                             f"(GlobalAveragePool), got axes {axes_tensor.data.tolist()} of "
                             f"shape {x.shape}")
        keep = bool(op.options["keep_dims"])
        note = {"axes": axes_tensor.name, "axes_data": axes_tensor.data.reshape(-1).tolist(),
                "axes_shape": list(axes_tensor.shape)}
        result = self.result(out)
        self.node("GlobalAveragePool", [self.dequantized_value(x)], [result], op.name, note)
        if keep:
            self.output_of(op, result, out)
            return
        # [N, C, 1, 1] to the Model's [N, C]: a Flatten between a QuantizeLinear and a
        # DequantizeLinear on the output's grid, which ONNX Runtime runs on the integers.
        grid = self.grid(out)
        pooled = self.fresh(out.name + _SEP + "pooled")
        self.node("QuantizeLinear", [result, *grid], [pooled], op.name + _SEP + "quantize")
        pooled_real = self.fresh(pooled + _SEP + "dequantized")
        self.node("DequantizeLinear", [pooled, *grid], [pooled_real],
                  op.name + _SEP + "dequantize_pooled")
        squeezed = self.fresh(out.name + _SEP + "squeezed")
        self.node("Flatten", [pooled_real], [squeezed], op.name + _SEP + "squeeze", axis=1)
        self.quantize_into(squeezed, out, op.name + _SEP + "quantize_squeezed")

    def op_reshape(self, op, ins, out):
        self.arity(op, 2, 2)
        x, shape_tensor = ins
        self.layer_output(op, x, out)
        if out.quantization != x.quantization:
            raise ValueError(f"output {out.name!r} must keep the quantization of input "
                             f"{x.name!r} (RESHAPE copies the bytes; ONNX would requantize)")
        if shape_tensor.data is None or shape_tensor.dtype != "int32" \
                or shape_tensor.data.ndim != 1 or np.any(shape_tensor.data == 0):
            raise ValueError(f"new shape {shape_tensor.name!r} must be a 1-D int32 constant "
                             f"without zeros (ONNX reads 0 as 'copy this dimension')")
        source = self.dequantized_value(x)
        if len(x.shape) == 4:
            # The Model reshapes NHWC data.
            nhwc = self.fresh(out.name + _SEP + "input_nhwc")
            self.node("Transpose", [source], [nhwc], op.name + _SEP + "to_nhwc",
                      perm=list(_TO_NHWC))
            source = nhwc
        self.constant(shape_tensor.name, shape_tensor.data, np.int64)
        result = self.result(out)
        self.node("Reshape", [source, shape_tensor.name], [result], op.name)
        if len(out.shape) == 4:
            nchw = self.fresh(out.name + _SEP + "nchw_result")
            self.node("Transpose", [result], [nchw], op.name + _SEP + "to_nchw",
                      perm=list(_TO_NCHW))
            result = nchw
        self.output_of(op, result, out)

    def op_softmax(self, op, ins, out):
        self.arity(op, 1, 1)
        (x,) = ins
        self.layer_output(op, x, out)
        if op.options["beta"] != 1.0:
            raise ValueError(f"beta {op.options['beta']}: ONNX's Softmax has no beta, export "
                             f"takes 1.0")
        if len(x.shape) == 4 or not x.shape:
            raise ValueError(f"takes an input of rank 1 to 3 (softmax along its last axis), "
                             f"got {x.shape}")
        result = self.result(out)
        self.node("Softmax", [self.dequantized_value(x)], [result], op.name, axis=-1)
        self.output_of(op, result, out)

    def op_quantize(self, op, ins, out):
        self.arity(op, 1, 1)
        (x,) = ins
        self.quantized(out, "output")
        if x.dtype != "float32" or x.data is not None:
            raise ValueError(f"input {x.name!r} must be a float32 activation")
        if x.name not in self.graph_inputs and x.name not in self.dequantized_floats():
            raise ValueError(f"input {x.name!r} must be a graph input or a DEQUANTIZE output")
        self.quantize_into(self.value(x), out, op.name)

    def dequantized_floats(self):
        return {op.outputs[0] for op in self.model.ops if op.kind == "DEQUANTIZE"}

    def op_dequantize(self, op, ins, out):
        self.arity(op, 1, 1)
        (x,) = ins
        self.quantized(x, "input")
        if out.dtype != "float32":
            raise ValueError(f"output {out.name!r} must be float32")
        self.node("DequantizeLinear", [self.stored(x), *self.grid(x)],
                  [self.fresh(self.value(out))], op.name)

    @staticmethod
    def arity(op, fewest, most):
        if not fewest <= len(op.inputs) <= most:
            raise ValueError(f"takes {fewest}-{most} inputs, got {len(op.inputs)}")


def write(model: Model, opset=17) -> bytes:
    """The ONNX model (QDQ form, default domain opset `opset`, 13 to 21) of `model`, serialized;
    see the module docstring for its shape."""
    onnx = _need_onnx()
    if not isinstance(model, Model):
        raise TypeError(f"model must be a Model, got {type(model).__name__}")
    if isinstance(opset, bool) or not isinstance(opset, int) \
            or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"opset must be an int from {MIN_OPSET} to {MAX_OPSET}, got {opset!r}")
    proto = _Writer(onnx, model, opset).build()
    return proto.SerializeToString()


# ------------------------------------------------------------------------------------------------
# read

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
        if self.integer_type not in _INT_RANGES:
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
            if tensor.dtype in _INT_RANGES and tensor.quantization is None:
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
                or zero_point.dtype.name not in _INT_RANGES:
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
                    and tensor.dtype in _INT_RANGES and tensor.dtype != out.dtype:
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
        if data.ndim != rank or data.dtype.name not in _INT_RANGES \
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
