"""write(): a Model as the QDQ ONNX graph that onnx_format's docstring describes."""
import json
import math

import numpy as np

from .model import ACTIVATIONS, PADDINGS, QUANTIZED_RANGES, Model
from .onnx_common import (INTEGER_TYPE_KEY, MAX_OPSET, MIN_OPSET, _ONNX_TYPES, _SEP,
                          _TO_NCHW, _TO_NHWC, _need_onnx, _same_padding)

PRODUCER = "fqcore"
_SHIFT = {"int8": 128, "uint8": 0}


def _rhe(x):
    """Round half to even in float32, as MLAS's cvtps2dq and rint do."""
    return np.rint(np.float32(x))


def activation_is_redundant(activation, quantization, dtype):
    """True when the output grid already clamps as RELU / RELU6 would: zero point at the bottom
    of the range and, for RELU6, 6 at or past the top (ONNX Runtime's test, rint(6 / scale) in
    float32). ONNX Runtime then drops the Relu / Clip and fuses the op."""
    if activation == "NONE":
        return True
    qmin, qmax = QUANTIZED_RANGES[dtype]
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
            # The clamp applies to the quantized values (see onnx_format's docstring).
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
        types = {t.dtype for t in model.tensors.values() if t.dtype in QUANTIZED_RANGES}
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
                stored = "uint8" if tensor.dtype in QUANTIZED_RANGES else tensor.dtype
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
        if tensor.dtype not in QUANTIZED_RANGES or tensor.data is not None:
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
        """The weights as a uint8 initializer in ONNX's layout (int8 + 128, see
        onnx_format's docstring) and their DequantizeLinear, per axis 0 when per channel."""
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
    see onnx_format's docstring for its shape."""
    onnx = _need_onnx()
    if not isinstance(model, Model):
        raise TypeError(f"model must be a Model, got {type(model).__name__}")
    if isinstance(opset, bool) or not isinstance(opset, int) \
            or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"opset must be an int from {MIN_OPSET} to {MAX_OPSET}, got {opset!r}")
    proto = _Writer(onnx, model, opset).build()
    return proto.SerializeToString()
