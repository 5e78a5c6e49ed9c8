"""Lowers a trained fake-quant eval graph into the integer Model: every FakeQuant's range becomes
its tensor's scale and zero point, layers with their bias and activation become one op each (an
atrous SpaceToBatchND -> conv -> BatchToSpaceND one dilated conv, as TFLite's converter makes it),
weights go onto the integer grid they were trained on and biases to int32."""
import numpy as np

from .model import QUANTIZED_RANGES, Model, Op, Quantization, Tensor
from .quant_params import grid_bounds, integer_grid, scale_and_zero_point

WEIGHT_DTYPES = tuple(QUANTIZED_RANGES)
_FAKE_QUANTS = ("FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxArgs",
                "FakeQuantWithMinMaxVarsPerChannel")
_LAYERS = {"Conv2D": "CONV_2D", "DepthwiseConv2dNative": "DEPTHWISE_CONV_2D",
           "MatMul": "FULLY_CONNECTED"}
_CONVOLUTIONS = ("Conv2D", "DepthwiseConv2dNative")
_ACTIVATIONS = {"Relu": "RELU", "Relu6": "RELU6"}
# Ops that only training graphs have: the rewrite's range updates, delayed-quant conds, optimizers.
_TRAINING_ONLY = ("Assign", "AssignAdd", "AssignSub", "Switch", "Merge", "Gradients")


class _Quantized:
    """A graph tensor that is an integer tensor of the model."""

    def __init__(self, name):
        self.name = name


class _FloatInput:
    """A float graph input, until a FakeQuant gives it a range."""

    def __init__(self, name):
        self.name = name


class _Pending:
    """An op whose output range is not known yet: the FakeQuant after it (through its bias add
    and activation) gives it, or `default` (averages keep their input's range)."""

    def __init__(self, kind, inputs, options, graph_op, default=None):
        self.kind, self.inputs, self.options = kind, inputs, options
        self.graph_op = graph_op
        self.default = default
        self.bias = None
        self.weights = None
        self.emitted = None
        # An atrous layer's _SpaceToBatch; `open` until its BatchToSpaceND fixes the padding;
        # the (quantization, FakeQuant op) of a FakeQuant read before that BatchToSpaceND.
        self.atrous = None
        self.open = False
        self.deferred = None


class _SpaceToBatch:
    """SpaceToBatchND's output: no tensor of the model, only the start of an atrous convolution
    (a VALID stride-1 conv reads it, a BatchToSpaceND ends it) on the integer tensor `source`."""

    def __init__(self, op, source, block, paddings):
        self.op, self.source = op, source
        self.block, self.paddings = block, paddings


class _Batched:
    """A graph tensor of an atrous layer still in the space-to-batch layout: a FakeQuant's output
    read before the BatchToSpaceND (the depthwise half of a separable conv: the range is known,
    the layer is emitted at the BatchToSpaceND), or, once that has run, any tensor between the
    conv and it. Only the BatchToSpaceND may read one."""

    def __init__(self, pending):
        self.pending = pending


class _Lowering:
    def __init__(self, session, input_tensors, output_tensors, dtype, input_type, output_type,
                 zero_point_rule):
        self.session = session
        self.graph = session.graph
        self.inputs = input_tensors
        self.outputs = output_tensors
        self.requested_dtype = dtype
        self.input_type, self.output_type = input_type, output_type
        self.rule = zero_point_rule
        self.tensors, self.ops = {}, []
        self.values = {}
        self.constants = {}
        self.model_inputs, self.model_outputs = [], []

    # -- the walk ---------------------------------------------------------------------------
    def run(self):
        order = self._computation_order()
        for op in order:
            if op.type in _TRAINING_ONLY or (op.type == "FusedBatchNormV3"
                                             and op.attrs.get("is_training")):
                raise ValueError(f"op {op.name!r} ({op.type}) only runs in training graphs: "
                                 f"export the eval graph (experimental_create_eval_graph) with "
                                 f"the trained variables loaded")
        self.dtype = self._choose_dtype(order)
        for op in order:
            self._lower(op)
        for tensor in self.outputs:
            self._output(tensor)
        return Model(self.tensors, self.ops, self.model_inputs, self.model_outputs,
                     description=f"fqcore {self.dtype} model")

    def _computation_order(self):
        """The ops between the inputs and the outputs, in dependency order (the rewrite creates
        fake quants after the ops that read them, so creation order is not one)."""
        live = set()
        stack = [t.op for t in self.outputs]
        while stack:
            op = stack.pop()
            if op in live:
                continue
            live.add(op)
            stack.extend(t.op for t in op.inputs)
        input_ops = {t.op for t in self.inputs}
        dependent = self.dependent = {}

        def depends(op):
            # Iterative: graphs may be deeper than Python's recursion limit.
            pending = [op]
            while pending:
                top = pending[-1]
                if top in dependent:
                    pending.pop()
                    continue
                missing = [t.op for t in top.inputs if t.op not in dependent]
                if missing:
                    pending.extend(missing)
                    continue
                # Any placeholder counts, so that one missing from the inputs is named below.
                dependent[top] = top.type == "Placeholder" or any(dependent[t.op]
                                                                  for t in top.inputs)
                pending.pop()
            return dependent[op]

        order = []
        for op in self.graph.get_operations():
            if op in live and depends(op):
                order.append(op)
        # Creation order with each op moved after its inputs: a stable topological sort.
        placed, result = set(), []
        for op in order:
            self._place(op, dependent, placed, result)
        for op in result:
            if op.type == "Placeholder" and op not in input_ops:
                raise ValueError(f"the outputs depend on placeholder {op.name!r}, which is not "
                                 f"among the inputs")
        return result

    def _place(self, op, dependent, placed, result):
        stack = [(op, False)]
        while stack:
            top, ready = stack.pop()
            if top in placed:
                continue
            if ready:
                placed.add(top)
                result.append(top)
                continue
            stack.append((top, True))
            for t in reversed(top.inputs):
                if dependent.get(t.op) and t.op not in placed:
                    stack.append((t.op, False))

    def _is_constant(self, tensor):
        """True for a tensor no placeholder feeds (weights, biases, ranges, shapes)."""
        return not self.dependent[tensor.op]

    def _constant(self, tensor):
        if tensor.name not in self.constants:
            self.constants[tensor.name] = np.asarray(
                self.session.run(tensor, update_state=False))
        return self.constants[tensor.name]

    # -- one graph op -----------------------------------------------------------------------
    def _lower(self, op):
        kind = op.type
        if kind == "Placeholder":
            self.values[op.outputs[0]] = _FloatInput(op.name)
        elif kind in _FAKE_QUANTS:
            self._fake_quant(op)
        elif kind == "Identity":
            self.values[op.outputs[0]] = self._value(op.inputs[0], op)
        elif kind in _LAYERS:
            self._layer(op)
        elif kind in ("BiasAdd", "Add", "AddV2"):
            self._add(op)
        elif kind in _ACTIVATIONS:
            self._activation(op)
        elif kind == "Mean":
            self._mean(op)
        elif kind == "AvgPool":
            self._average_pool(op)
        elif kind == "Reshape":
            self._reshape(op)
        elif kind == "Softmax":
            self._softmax(op)
        elif kind == "SpaceToBatchND":
            self._space_to_batch(op)
        elif kind == "BatchToSpaceND":
            self._batch_to_space(op)
        else:
            raise ValueError(f"op {op.name!r} ({kind}) has no integer form in fqcore.deploy "
                             f"(it maps {', '.join(sorted(set(_LAYERS) | set(_ACTIVATIONS)))}, "
                             f"BiasAdd, AddV2, Mean, AvgPool, Reshape, Softmax and FakeQuant ops, "
                             f"and SpaceToBatchND -> conv -> BatchToSpaceND as a dilated conv)")

    def _value(self, tensor, consumer):
        try:
            return self.values[tensor]
        except KeyError:
            raise ValueError(f"op {consumer.name!r}: input {tensor.name!r} is a constant, which "
                             f"fqcore.deploy cannot use there") from None

    def _quantized(self, tensor, consumer):
        """The integer tensor for graph tensor `tensor`, emitting a pending op on its default
        range; ValueError naming the tensor when it has no range."""
        value = self._value(tensor, consumer)
        if isinstance(value, _SpaceToBatch):
            raise ValueError(f"op {consumer.name!r} reads {tensor.name!r}, the output of "
                             f"SpaceToBatchND {value.op.name!r}: fqcore.deploy exports "
                             f"SpaceToBatchND only as the start of an atrous convolution "
                             f"(SpaceToBatchND -> VALID stride-1 Conv2D or DepthwiseConv2dNative "
                             f"-> BatchToSpaceND)")
        if isinstance(value, _Batched) or (isinstance(value, _Pending) and value.open):
            layer = value.pending if isinstance(value, _Batched) else value
            raise ValueError(f"op {consumer.name!r} reads {tensor.name!r} of atrous layer "
                             f"{layer.graph_op.name!r} (from SpaceToBatchND "
                             f"{layer.atrous.op.name!r}) before its BatchToSpaceND: only a "
                             f"bias add, an activation or a FakeQuant may come between an "
                             f"atrous conv and its BatchToSpaceND, and nothing else read them")
        if isinstance(value, _Pending):
            if value.emitted is None:
                if value.default is None:
                    raise ValueError(
                        f"tensor {tensor.name!r} (read by {consumer.name!r}) has no quantization "
                        f"range: a FakeQuant must follow it (quantize the graph with "
                        f"fqcore.quantize, or add one)")
                self._emit(value, value.default, tensor)
            return self.tensors[value.emitted]
        if isinstance(value, _FloatInput):
            raise ValueError(f"input {value.name!r} (read by {consumer.name!r}) has no "
                             f"quantization range: put a FakeQuant on it (e.g. "
                             f"fake_quant_with_min_max_args with the data's range)")
        return self.tensors[value.name]

    def _fake_quant(self, op):
        x = op.inputs[0]
        if self._is_constant(x):
            return  # a weight: its layer reads it through _weights
        num_bits = op.attrs.get("num_bits", 8)
        narrow = op.attrs.get("narrow_range", False)
        if op.type == "FakeQuantWithMinMaxVarsPerChannel" or num_bits != 8:
            raise ValueError(f"FakeQuant {op.name!r} on activation {x.name!r}: the integer model "
                             f"needs 8-bit per-tensor activation ranges, got {num_bits} bits"
                             + (" per channel" if "PerChannel" in op.type else ""))
        lo, hi = self._range(op)
        quant = self._quantization(lo, hi, num_bits, narrow, op)
        value = self._value(x, op)
        if isinstance(value, _FloatInput):
            name = self._input(value, quant, op.outputs[0], x)
            # Other fake quants of the same input must agree with this range.
            self.values[x] = _Quantized(name)
        elif isinstance(value, _Pending) and value.open:
            # Quantizing commutes with BatchToSpaceND's rearranging: the layer keeps this range.
            if value.deferred is not None and value.deferred[0] != quant:
                raise ValueError(f"FakeQuant {op.name!r} requantizes {x.name!r}, which already "
                                 f"has a different range: fqcore.deploy has no requantize op")
            value.deferred = value.deferred or (quant, op)
            self.values[op.outputs[0]] = _Batched(value)
            return
        elif isinstance(value, _Pending) and value.emitted is None:
            name = self._emit(value, quant, op.outputs[0])
        else:
            existing = self._quantized(x, op)
            if existing.quantization != quant:
                raise ValueError(f"FakeQuant {op.name!r} requantizes {x.name!r}, which already "
                                 f"has a different range: fqcore.deploy has no requantize op")
            name = existing.name
        self.values[op.outputs[0]] = _Quantized(name)

    def _range(self, op):
        if op.type == "FakeQuantWithMinMaxArgs":
            return np.float32(op.attrs["min"]), np.float32(op.attrs["max"])
        lo, hi = (self._constant(t).astype(np.float32) for t in op.inputs[1:3])
        return lo, hi

    def _quantization(self, lo, hi, num_bits, narrow, op, axis=0):
        lo, hi = np.atleast_1d(lo), np.atleast_1d(hi)
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
            raise ValueError(f"FakeQuant {op.name!r}: its range [{lo.min()}, {hi.max()}] is not a "
                             f"finite range with min < max (was the graph trained and its "
                             f"variables loaded?)")
        scale, zero_point = scale_and_zero_point(lo, hi, num_bits, narrow, self.rule)
        return Quantization(scale, zero_point - self._offset(), axis)

    def _offset(self):
        """int8 stores FakeQuant's unsigned grid shifted by -128, as TF's converter does."""
        return 128 if self.dtype == "int8" else 0

    def _input(self, value, quant, fake_quant_output, graph_tensor):
        """The model input for a float graph input, quantized by QUANTIZE to `quant` (or taken
        as integers); returns the quantized tensor's name."""
        name = _tensor_name(fake_quant_output)
        shape = _shape(graph_tensor)
        if self.input_type == "float32":
            self.tensors[value.name] = Tensor(value.name, shape, "float32")
            self.tensors[name] = Tensor(name, shape, self.dtype, quant)
            self.ops.append(Op("QUANTIZE", [value.name], [name], name=name + "/quantize"))
            self.model_inputs.append(value.name)
        else:
            self.tensors[name] = Tensor(name, shape, self.dtype, quant)
            self.model_inputs.append(name)
        return name

    # -- layers -----------------------------------------------------------------------------
    def _layer(self, op):
        space_to_batch = self.values.get(op.inputs[0])
        if not isinstance(space_to_batch, _SpaceToBatch) or op.type not in _CONVOLUTIONS:
            space_to_batch = None
            x = self._quantized(op.inputs[0], op)
        else:
            x = self.tensors[space_to_batch.source]
        weights_op = _weight_fake_quant(op)
        if weights_op.type not in _FAKE_QUANTS or not self._is_constant(op.inputs[1]):
            raise ValueError(f"layer {op.name!r}: its weights {op.inputs[1].name!r} are not "
                             f"fake-quantized constants (quantize the graph with fqcore.quantize)")
        kind = _LAYERS[op.type]
        options = {"activation": "NONE"}
        if kind != "FULLY_CONNECTED":
            strides, dilations = op.attrs.get("strides", [1] * 4), op.attrs.get("dilations", [1] * 4)
            if op.attrs.get("data_format", "NHWC") != "NHWC":
                raise ValueError(f"layer {op.name!r}: only NHWC convolutions are exported")
            options.update(padding=op.attrs["padding"], stride_h=strides[1], stride_w=strides[2],
                           dilation_h=dilations[1], dilation_w=dilations[2])
            if kind == "DEPTHWISE_CONV_2D":
                options["depth_multiplier"] = int(op.inputs[1].shape[3])
        elif op.attrs.get("transpose_a") or op.attrs.get("transpose_b"):
            raise ValueError(f"layer {op.name!r}: transposed MatMuls are not exported")
        pending = _Pending(kind, [x.name], options, op)
        pending.weights = weights_op
        if space_to_batch is not None:
            if (options["padding"] != "VALID" or (options["stride_h"], options["stride_w"])
                    != (1, 1) or (options["dilation_h"], options["dilation_w"]) != (1, 1)):
                raise ValueError(
                    f"layer {op.name!r} reads SpaceToBatchND {space_to_batch.op.name!r}: an "
                    f"atrous convolution needs padding VALID, strides 1 and dilations 1 there, "
                    f"got {options['padding']}, strides {list(op.attrs.get('strides', []))}, "
                    f"dilations {list(op.attrs.get('dilations', [1] * 4))}")
            options["dilation_h"], options["dilation_w"] = space_to_batch.block
            options["padding"] = None       # the BatchToSpaceND's crops decide it
            pending.atrous, pending.open = space_to_batch, True
        self.values[op.outputs[0]] = pending

    # -- atrous convolutions ----------------------------------------------------------------
    def _space_to_batch(self, op):
        x = self._quantized(op.inputs[0], op)
        block = self._atrous_constant(op, 1, "block_shape", (2,), 1)
        paddings = self._atrous_constant(op, 2, "paddings", (2, 2), 0)
        if len(x.shape) != 4:
            raise ValueError(f"SpaceToBatchND {op.name!r}: its input {op.inputs[0].name!r} of "
                             f"shape {x.shape} is not NHWC")
        for size, r, (start, end) in zip(x.shape[1:3], block, paddings):
            if size < 1 or (size + start + end) % r:
                raise ValueError(f"SpaceToBatchND {op.name!r}: the padded size {size} + "
                                 f"{start} + {end} of input {op.inputs[0].name!r} does not "
                                 f"divide by its block size {r}")
        self.values[op.outputs[0]] = _SpaceToBatch(op, x.name, tuple(block), paddings)

    def _atrous_constant(self, op, index, what, shape, least):
        tensor = op.inputs[index]
        if not self._is_constant(tensor):
            raise ValueError(f"{op.type} {op.name!r}: its {what} {tensor.name!r} must be a "
                             f"constant to be exported")
        value = np.asarray(self._constant(tensor))
        if (value.shape != shape or not np.issubdtype(value.dtype, np.integer)
                or np.any(value < least)):
            raise ValueError(f"{op.type} {op.name!r}: {what} {value.tolist()} is not {shape} "
                             f"integers of at least {least} (a 2-D spatial {what})")
        return [int(v) for v in value] if value.ndim == 1 else [[int(a), int(b)]
                                                                  for a, b in value]

    def _batch_to_space(self, op):
        value = self.values.get(op.inputs[0])
        pending = value.pending if isinstance(value, _Batched) else value
        if not isinstance(pending, _Pending) or not pending.open:
            raise ValueError(f"BatchToSpaceND {op.name!r}: its input {op.inputs[0].name!r} is "
                             f"not an atrous convolution (SpaceToBatchND -> VALID stride-1 "
                             f"Conv2D or DepthwiseConv2dNative); fqcore.deploy exports "
                             f"BatchToSpaceND only as the end of one")
        space_to_batch = pending.atrous
        block = self._atrous_constant(op, 1, "block_shape", (2,), 1)
        crops = self._atrous_constant(op, 2, "crops", (2, 2), 0)
        if tuple(block) != space_to_batch.block:
            raise ValueError(f"BatchToSpaceND {op.name!r} has block_shape {block}, "
                             f"SpaceToBatchND {space_to_batch.op.name!r} has "
                             f"{list(space_to_batch.block)}: not one atrous convolution")
        pending.options["padding"] = self._atrous_padding(pending, crops, op)
        pending.open = False
        # What came before the BatchToSpaceND stays in the space-to-batch layout for any other
        # reader (which _quantized then refuses).
        for tensor, other in list(self.values.items()):
            if other is pending:
                self.values[tensor] = _Batched(pending)
        if isinstance(value, _Batched):
            # Emitted under BatchToSpaceND's name: the graph tensor with the model's shape.
            quant, _ = pending.deferred
            self.values[op.outputs[0]] = _Quantized(self._emit(pending, quant, op.outputs[0]))
        else:
            self.values[op.outputs[0]] = pending

    def _atrous_padding(self, pending, crops, batch_to_space):
        """SAME or VALID: the padding of the dilated conv that equals SpaceToBatchND -> the
        VALID conv -> BatchToSpaceND. The VALID conv on the space-to-batch input is the dilated
        conv on the input with explicit padding [pad_start - crop_start, pad_end - crop_end];
        TFLite's SAME at stride 1 pads (k - 1) * r, the odd one after."""
        space_to_batch = pending.atrous
        layer = pending.graph_op
        x = self.tensors[space_to_batch.source]
        kernel = [int(d) for d in layer.inputs[1].shape[:2]]
        explicit, same = [], []
        for (start, end), (crop_start, crop_end), k, r in zip(
                space_to_batch.paddings, crops, kernel, space_to_batch.block):
            explicit.append((start - crop_start, end - crop_end))
            total = (k - 1) * r
            same.append((total // 2, total - total // 2))
        fits = [name for name, pads in (("SAME", same), ("VALID", [(0, 0), (0, 0)]))
                if explicit == pads]
        if not fits:
            raise ValueError(
                f"SpaceToBatchND {space_to_batch.op.name!r} -> {layer.name!r} -> "
                f"BatchToSpaceND {batch_to_space.name!r} is not a dilated convolution with "
                f"SAME or VALID padding: paddings {space_to_batch.paddings} and crops {crops} "
                f"pad the {kernel[0]}x{kernel[1]} kernel at dilation "
                f"{list(space_to_batch.block)} by {[list(p) for p in explicit]} (before, "
                f"after per dimension), SAME would be {[list(p) for p in same]} and VALID "
                f"[[0, 0], [0, 0]]")
        padding = fits[-1]          # VALID when both fit (a 1x1 kernel): no padding either way
        out = batch_to_space.outputs[0]
        expected = [size + a + b - (k - 1) * r for size, (a, b), k, r in zip(
            x.shape[1:3], explicit, kernel, space_to_batch.block)]
        if out.shape is not None and len(out.shape) == 4 and any(
                d is not None and d != e for d, e in zip(out.shape[1:3], expected)):
            raise ValueError(f"BatchToSpaceND {batch_to_space.name!r}: output shape "
                             f"{out.shape} is not the dilated conv's {expected}")
        return padding

    def _add(self, op):
        a, b = op.inputs
        for layer, other in ((a, b), (b, a)):
            value = self.values.get(layer)
            if (isinstance(value, _Pending) and value.weights is not None and value.bias is None
                    and value.options["activation"] == "NONE" and value.emitted is None
                    and self._is_constant(other)):
                value.bias = self._constant(other).astype(np.float32)
                self.values[op.outputs[0]] = value
                return
        if op.type == "BiasAdd":
            raise ValueError(f"op {op.name!r}: a BiasAdd must follow a Conv2D, depthwise conv or "
                             f"MatMul to be exported")
        inputs = [self._quantized(t, op).name for t in (a, b)]
        self.values[op.outputs[0]] = _Pending("ADD", inputs, {"activation": "NONE"}, op)

    def _activation(self, op):
        value = self.values.get(op.inputs[0])
        if isinstance(value, (_SpaceToBatch, _Batched)):
            self._quantized(op.inputs[0], op)       # raises, naming the atrous pattern
        if (not isinstance(value, _Pending) or value.emitted is not None
                or value.options.get("activation") != "NONE"):
            raise ValueError(f"activation {op.name!r} ({op.type}) must directly follow a layer, "
                             f"its bias add, or an add, to be fused into it")
        value.options["activation"] = _ACTIVATIONS[op.type]
        self.values[op.outputs[0]] = value

    def _mean(self, op):
        x = self._quantized(op.inputs[0], op)
        axes = np.asarray(self._constant(op.inputs[1]), np.int32).reshape(-1)
        axis_name = _tensor_name(op.inputs[1])
        self.tensors[axis_name] = Tensor(axis_name, axes.shape, "int32", data=axes)
        self.values[op.outputs[0]] = _Pending(
            "MEAN", [x.name, axis_name], {"keep_dims": bool(op.attrs.get("keep_dims", False))},
            op, default=x.quantization)

    def _average_pool(self, op):
        x = self._quantized(op.inputs[0], op)
        ksize, strides = op.attrs["ksize"], op.attrs["strides"]
        options = {"padding": op.attrs["padding"], "stride_h": strides[1], "stride_w": strides[2],
                   "filter_h": ksize[1], "filter_w": ksize[2], "activation": "NONE"}
        # TFLite's AVERAGE_POOL_2D keeps its input's scale and zero point.
        self.values[op.outputs[0]] = _Pending("AVERAGE_POOL_2D", [x.name], options, op,
                                              default=x.quantization)

    def _reshape(self, op):
        x = self._quantized(op.inputs[0], op)
        shape = np.asarray(self._constant(op.inputs[1]), np.int32).reshape(-1)
        shape_name = _tensor_name(op.inputs[1])
        self.tensors[shape_name] = Tensor(shape_name, shape.shape, "int32", data=shape)
        name = _tensor_name(op.outputs[0])
        self.tensors[name] = Tensor(name, _shape(op.outputs[0]), self.dtype, x.quantization)
        self.ops.append(Op("RESHAPE", [x.name, shape_name], [name], name=op.name))
        self.values[op.outputs[0]] = _Quantized(name)

    def _softmax(self, op):
        x = self._quantized(op.inputs[0], op)
        name = _tensor_name(op.outputs[0])
        # TFLite's SOFTMAX writes probabilities on a fixed grid of 1/256.
        quant = Quantization([1.0 / 256], [-128 if self.dtype == "int8" else 0])
        self.tensors[name] = Tensor(name, _shape(op.outputs[0]), self.dtype, quant)
        self.ops.append(Op("SOFTMAX", [x.name], [name], {"beta": 1.0}, name=op.name))
        self.values[op.outputs[0]] = _Quantized(name)

    # -- emitting ---------------------------------------------------------------------------
    def _emit(self, pending, quant, graph_tensor):
        name = _tensor_name(graph_tensor)
        inputs = list(pending.inputs)
        if pending.weights is not None:
            inputs += self._weights_and_bias(pending)
        self.tensors[name] = Tensor(name, _shape(graph_tensor), self.dtype, quant)
        self.ops.append(Op(pending.kind, inputs, [name], dict(pending.options),
                           name=pending.graph_op.name))
        pending.emitted = name
        return name

    def _weights_and_bias(self, pending):
        fq = pending.weights
        values = self._constant(fq.outputs[0]).astype(np.float32)
        num_bits = fq.attrs.get("num_bits", 8)
        narrow = fq.attrs.get("narrow_range", False)
        if num_bits != 8:
            raise ValueError(f"weights {fq.name!r}: the integer model needs 8-bit weights, "
                             f"got {num_bits}")
        lo, hi = self._range(fq)
        per_channel = fq.type == "FakeQuantWithMinMaxVarsPerChannel"
        kind = pending.kind
        if kind == "CONV_2D":      # HWIO -> OHWI
            layout, axis = values.transpose(3, 0, 1, 2), 0
        elif kind == "DEPTHWISE_CONV_2D":   # [kh, kw, cin, m] -> [1, kh, kw, cin * m]
            layout, axis = values.reshape(1, values.shape[0], values.shape[1], -1), 3
        else:                      # [in, out] -> [out, in]
            layout, axis = values.T, 0
        channels = layout.shape[axis]
        quant = self._quantization(lo, hi, num_bits, narrow, fq, axis if per_channel else 0)
        if per_channel and quant.scale.size != channels:
            raise ValueError(f"weights {fq.name!r}: {quant.scale.size} per-channel ranges for "
                             f"{channels} output channels")
        if self.dtype == "uint8" and per_channel:
            raise ValueError(f"weights {fq.name!r} are per channel, which the uint8 model "
                             f"cannot hold: export with dtype='int8'")
        qmin, qmax = grid_bounds(num_bits, narrow)
        try:
            grid = integer_grid(layout, quant.scale, quant.zero_point + self._offset(), qmin,
                                qmax, axis)
        except ValueError:
            raise ValueError(f"weights {fq.name!r}: its output is not on the grid of its range "
                             f"(the range variables do not belong to these weights)") from None
        weights_name = _tensor_name(fq.outputs[0])
        self.tensors[weights_name] = Tensor(weights_name, layout.shape, self.dtype, quant,
                                            data=grid - self._offset())
        input_scale = self.tensors[pending.inputs[0]].quantization.scale[0]
        bias_scale = (np.float64(input_scale) * quant.scale.astype(np.float64)).astype(np.float32)
        bias = pending.bias if pending.bias is not None else np.zeros(channels, np.float32)
        if bias.shape != (channels,):
            raise ValueError(f"layer {pending.graph_op.name!r}: bias of shape {bias.shape} for "
                             f"{channels} output channels")
        q_bias = np.rint(bias.astype(np.float64) / np.broadcast_to(bias_scale, bias.shape))
        if np.abs(q_bias).max(initial=0) > 2**31 - 1:
            raise ValueError(f"layer {pending.graph_op.name!r}: its bias does not fit int32 at "
                             f"scale input_scale * weight_scale")
        bias_name = pending.graph_op.name + "/bias"
        self.tensors[bias_name] = Tensor(
            bias_name, (channels,), "int32",
            Quantization(np.broadcast_to(bias_scale, (quant.scale.size,)),
                         np.zeros(quant.scale.size), 0),
            data=q_bias.astype(np.int32))
        return [weights_name, bias_name]

    def _output(self, tensor):
        value = self.values.get(tensor)
        if isinstance(value, _Pending) and value.emitted is None and value.default is None:
            # An output before its fake quant (the logits a model builder returned, read by the
            # act_quant the rewrite inserted): the integer model ends on that range.
            fake_quants = [op for op in tensor.consumers() if op.type in _FAKE_QUANTS]
            if len(fake_quants) == 1:
                self._fake_quant(fake_quants[0])
        x = self._quantized(tensor, tensor.op)
        if self.output_type == "float32":
            name = _tensor_name(tensor) + "/dequantize"
            self.tensors[name] = Tensor(name, x.shape, "float32")
            self.ops.append(Op("DEQUANTIZE", [x.name], [name], name=name))
            self.model_outputs.append(name)
        else:
            self.model_outputs.append(x.name)

    # -- int8 or uint8 ----------------------------------------------------------------------
    def _choose_dtype(self, order):
        """int8 when every weight range is symmetric (zero point 0 in int8, which TFLite's int8
        kernels require), uint8 otherwise; `dtype` forces one."""
        asymmetric = []
        for op in order:
            if op.type not in _LAYERS:
                continue
            fq = _weight_fake_quant(op)
            if fq.type not in _FAKE_QUANTS:
                continue  # _layer names the problem
            lo, hi = self._range(fq)
            _, zero_point = scale_and_zero_point(lo, hi, fq.attrs.get("num_bits", 8),
                                                 fq.attrs.get("narrow_range", False), self.rule)
            if np.any(zero_point != 128):
                asymmetric.append(fq.name)
        if self.requested_dtype is None:
            dtype = "uint8" if asymmetric else "int8"
        else:
            dtype = self.requested_dtype
            if dtype == "int8" and asymmetric:
                raise ValueError(
                    f"dtype='int8' needs symmetric weight ranges (zero point 0), but "
                    f"{', '.join(repr(n) for n in asymmetric)} are asymmetric: train with "
                    f"weight_symmetric=True (or weight_per_channel=True), or export uint8")
        for name, io in (("input_type", self.input_type), ("output_type", self.output_type)):
            if io not in ("float32", dtype):
                raise ValueError(f"{name}={io!r} does not fit the {dtype} model: use 'float32' "
                                 f"or {dtype!r}")
        return dtype


def _weight_fake_quant(layer_op):
    """The op that fake-quantizes a layer's weights, seen through Identity and the Reshape back
    from a per-channel depthwise quantizer's [kh, kw, cin * multiplier] view."""
    op = layer_op.inputs[1].op
    while op.type in ("Identity", "Reshape") and op.inputs:
        op = op.inputs[0].op
    return op


def _tensor_name(tensor):
    """The graph tensor's name without ':0', the model's name for it."""
    return tensor.name[:-2] if tensor.name.endswith(":0") else tensor.name


def _shape(tensor):
    if tensor.shape is None:
        raise ValueError(f"tensor {tensor.name!r} has an unknown rank: the model needs shapes")
    return tuple(-1 if d is None else int(d) for d in tensor.shape)


def _resolve(graph, items, what):
    if items is None:
        raise ValueError(f"{what} must name at least one tensor")
    items = [items] if isinstance(items, str) or hasattr(items, "op") else list(items)
    if not items:
        raise ValueError(f"{what} must name at least one tensor")
    tensors = []
    for item in items:
        if hasattr(item, "op"):
            if item.graph is not graph:
                raise ValueError(f"{what}: tensor {item.name!r} is from another graph")
            tensors.append(item)
            continue
        if not isinstance(item, str):
            raise TypeError(f"{what} must be tensors or tensor names, got {item!r}")
        name = item if ":" in item else item + ":0"
        try:
            tensors.append(graph.get_tensor_by_name(name))
        except (KeyError, ValueError):
            raise ValueError(f"{what}: the graph has no tensor {item!r}") from None
    return tensors


def lower(session, inputs, outputs, dtype=None, input_type="float32", output_type="float32",
          zero_point_rule="training"):
    """The integer Model of `session`'s graph from `inputs` to `outputs` (tensors or names)."""
    if not hasattr(session, "graph") or not hasattr(session, "run"):
        raise TypeError(f"session must be an fqcore.graph.Session, got {type(session).__name__}")
    if dtype is not None and dtype not in WEIGHT_DTYPES:
        raise ValueError(f"dtype must be None, 'int8' or 'uint8', got {dtype!r}")
    for name, value in (("input_type", input_type), ("output_type", output_type)):
        if value not in ("float32", "int8", "uint8"):
            raise ValueError(f"{name} must be 'float32', 'int8' or 'uint8', got {value!r}")
    input_tensors = _resolve(session.graph, inputs, "inputs")
    for tensor in input_tensors:
        if tensor.op.type != "Placeholder":
            raise ValueError(f"inputs: {tensor.name!r} is a {tensor.op.type}, not a placeholder")
    output_tensors = _resolve(session.graph, outputs, "outputs")
    scale_and_zero_point(0.0, 1.0, rule=zero_point_rule)  # validates the rule up front
    return _Lowering(session, input_tensors, output_tensors, dtype, input_type, output_type,
                     zero_point_rule).run()
