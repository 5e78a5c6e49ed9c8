"""The integer reference interpreter: runs a Model (or a .tflite / .onnx file) on numpy arrays
with the arithmetic of one rounding mode, vectorized over the batch. Everything the kernels assume
is checked when it is built, so a bad model is a ValueError naming the op and tensor."""
import math
import numbers
import os

import numpy as np

from .kernels import MODES, integer
from .kernels.tflite_reference import add_multipliers, softmax_multiplier
from .model import ACTIVATIONS, OP_OPTIONS, PADDINGS, QUANTIZED_RANGES, Model

# The bias check of GetQuantizedConvolutionMultipler: |s_in * s_w - s_bias| / s_out at most this.
_BIAS_SCALE_TOLERANCE = 0.02
# (fewest, most) inputs of each op kind; every op has one output.
# TFLite's CONV_2D insists on a bias; the others treat a missing one as zeros.
_ARITY = {"CONV_2D": (3, 3), "DEPTHWISE_CONV_2D": (2, 3), "FULLY_CONNECTED": (2, 3),
          "ADD": (2, 2), "AVERAGE_POOL_2D": (1, 1), "MEAN": (2, 2), "RESHAPE": (2, 2),
          "SOFTMAX": (1, 1), "QUANTIZE": (1, 1), "DEQUANTIZE": (1, 1)}


class Interpreter:
    """The integer reference interpreter: runs an integer model on numpy arrays.

    Everything the kernels assume is checked when it is built, so a bad model is a ValueError
    naming the op and tensor. Feeds are a dict name -> array, or one array for a one-input
    model, with the inputs' dtypes and shapes (-1, the batch, takes any size).

    Parameters
    ----------
    model : Model, bytes, ExportedModel, str or os.PathLike
        A Model, the bytes of a ``.tflite`` file, or the path of a ``.tflite`` or ``.onnx`` file.
    rounding : {"tflite_reference", "single", "float32_half_even"}, default "tflite_reference"
        The arithmetic: TFLite's reference kernels, one rounding per step, or float32 with
        half-to-even rounding (``fqcore.deploy.kernels.MODES``).

    Raises
    ------
    ValueError
        An unknown `rounding`, or a model the kernels cannot run (naming the file, op and
        tensor).

    Examples
    --------
    >>> import numpy as np
    >>> import fqcore.graph as G
    >>> from fqcore import deploy, quantize
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 4], name="x")
    ...     scaled = G.fake_quant_with_min_max_args(x, min=-1.0, max=1.0, name="x_quant")
    ...     logits = G.layers.dense(scaled, 3, scope="fc")
    >>> quantize.create_eval_graph(g, weight_per_channel=True)
    >>> session = G.Session(g)
    >>> session.run(G.global_variables_initializer(g))
    >>> output = g.get_tensor_by_name("fc/act_quant/FakeQuantWithMinMaxVars:0")
    >>> interpreter = deploy.Interpreter(deploy.to_tflite(session, [x], [output]))
    >>> outputs = interpreter.run(np.full((2, 4), 0.5, np.float32))
    >>> [(name, value.shape) for name, value in outputs.items()]
    [('fc/act_quant/FakeQuantWithMinMaxVars/dequantize', (2, 3))]
    """

    def __init__(self, model, rounding="tflite_reference"):
        if rounding not in MODES:
            raise ValueError(f"rounding must be one of {sorted(MODES)}, got {rounding!r}")
        self.rounding = rounding
        self.model, source = _load(model)
        try:
            self._steps = _Planner(self.model, MODES[rounding]).steps
        except ValueError as error:
            if source is None:
                raise
            raise ValueError(f"{source}: {error}") from None

    def run(self, feeds):
        """Runs the model.

        Parameters
        ----------
        feeds : dict or numpy.ndarray
            Input name -> array, or one array for a one-input model.

        Returns
        -------
        dict
            The model's outputs, name -> array (float32 outputs as the model dequantizes them,
            integer outputs raw).
        """
        values = self._execute(feeds)
        return {name: values[name] for name in self.model.outputs}

    def tensors(self, feeds):
        """Every graph input and op output, name -> array, in execution order."""
        values = self._execute(feeds)
        return {name: value for name, value in values.items()
                if self.model.tensors[name].data is None}

    def _execute(self, feeds):
        values = _check_feeds(self.model, feeds)
        for name, tensor in self.model.tensors.items():
            if tensor.data is not None:
                values.setdefault(name, tensor.data)
        for label, output, inputs, run in self._steps:
            try:
                values[output] = run(*(values[name] for name in inputs))
            except ValueError as error:
                raise ValueError(f"{label}: {error}") from None
        return values


def _load(model):
    """(the Model, the file it came from: a path, '<bytes>', or None for a Model)."""
    if isinstance(model, Model):
        return model, None
    if isinstance(model, (bytes, bytearray, memoryview)):
        from . import tflite_format
        return tflite_format.read(bytes(model), "<bytes>"), "<bytes>"
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        extension = os.path.splitext(path)[1].lower()
        if extension not in (".tflite", ".onnx"):
            raise ValueError(f"model file {path!r}: expected a .tflite or .onnx file")
        with open(path, "rb") as f:
            data = f.read()
        if extension == ".tflite":
            from . import tflite_format
            return tflite_format.read(data, path), path
        from . import onnx_format
        return onnx_format.read(data, path), path
    raise TypeError(f"model must be a Model, .tflite bytes or a file path, got "
                    f"{type(model).__name__}")


def _check_feeds(model, feeds):
    names = list(model.inputs)
    if not isinstance(feeds, dict):
        if len(names) != 1:
            raise ValueError(f"the model has {len(names)} inputs {names}: pass a dict of arrays")
        feeds = {names[0]: feeds}
    unknown = [name for name in feeds if name not in names]
    if unknown:
        raise ValueError(f"the model has no input {unknown[0]!r} (its inputs are {names})")
    values, batch = {}, None
    for name in names:
        if name not in feeds:
            raise ValueError(f"input {name!r} is missing from the feeds")
        tensor, x = model.tensors[name], np.asarray(feeds[name])
        if x.dtype != np.dtype(tensor.dtype):
            raise ValueError(f"input {name!r}: dtype {x.dtype}, the model takes {tensor.dtype}")
        if x.ndim != len(tensor.shape) or 0 in x.shape or any(
                d not in (-1, n) for d, n in zip(tensor.shape, x.shape)):
            raise ValueError(f"input {name!r}: shape {x.shape}, the model takes "
                             f"{tensor.shape} (-1: any batch)")
        if tensor.shape and tensor.shape[0] == -1:
            if batch is not None and x.shape[0] != batch:
                raise ValueError(f"input {name!r}: batch {x.shape[0]}, another input has "
                                 f"batch {batch}")
            batch = x.shape[0]
        values[name] = x
    return values


class _Planner:
    """Checks each op against what its kernel assumes, infers shapes with -1 for the batch, and
    builds `steps`: (label, output name, input names, function of the input arrays)."""

    def __init__(self, model, mode):
        self.model, self.mode = model, mode
        self.shapes = {}
        for name in model.inputs:
            tensor = model.tensor(name)
            if tensor.data is not None:
                raise ValueError(f"input {name!r} is a constant")
            shape = tensor.shape
            batch_ok = not shape or shape[0] == -1 or shape[0] >= 1
            if not batch_ok or any(d < 1 for d in shape[1:]):
                raise ValueError(f"input {name!r}: shape {tensor.shape}; dimensions are positive, "
                                 f"only the first (the batch) may be -1")
            if tensor.dtype in QUANTIZED_RANGES:
                _per_tensor(tensor, f"input {name!r}")
            self.shapes[name] = tensor.shape
        for name, tensor in model.tensors.items():
            if tensor.data is not None:
                if tensor.data.shape != tensor.shape:
                    raise ValueError(f"constant {name!r}: data of shape {tensor.data.shape}, "
                                     f"declared {tensor.shape}")
                self.shapes[name] = tensor.shape
        self.steps = [self._step(index, op) for index, op in enumerate(model.ops)]
        for name in model.outputs:
            if name not in self.shapes:
                raise ValueError(f"output {name!r} is neither an input nor computed by an op")

    def _step(self, index, op):
        label = f"{op.kind} op {op.name or index!r}"
        if op.kind not in _ARITY:
            raise ValueError(f"op {index}: unknown kind {op.kind!r}")
        fewest, most = _ARITY[op.kind]
        if not fewest <= len(op.inputs) <= most or len(op.outputs) != 1:
            raise ValueError(f"{label}: takes {fewest}-{most} inputs and one output, got "
                             f"{len(op.inputs)} and {len(op.outputs)}")
        inputs = []
        for name in op.inputs:
            tensor = self.model.tensor(name)
            if name not in self.shapes:
                raise ValueError(f"{label}: input {name!r} is computed by no earlier op")
            inputs.append(tensor)
        output = self.model.tensor(op.outputs[0])
        if output.name in self.shapes:
            raise ValueError(f"{label}: output {output.name!r} is an input, a constant or the "
                             f"output of an earlier op")
        options = _check_options(label, op)
        try:
            run, shape = getattr(self, "_" + op.kind.lower())(inputs, output, options)
        except ValueError as error:
            raise ValueError(f"{label}: {error}") from None
        if len(shape) != len(output.shape) or any(
                d != -1 and d != s for d, s in zip(output.shape, shape)):
            raise ValueError(f"{label}: output {output.name!r} is declared {output.shape}, "
                             f"the op computes {shape} (-1: the batch)")
        self.shapes[output.name] = shape
        return label, output.name, list(op.inputs), run

    # -- layers ----------------------------------------------------------------------------
    def _conv_2d(self, inputs, output, options):
        x, w, b = inputs
        in_q, out_q = self._same_type(x, output, 4)
        w_q = self._weights(x, w, 4, axis=0, zero_point_used=x.dtype == "uint8")
        o, kh, kw, channels = w.shape
        if self.shapes[x.name][3] != channels:
            raise ValueError(f"input {x.name!r} has {self.shapes[x.name][3]} channels, the "
                             f"filter {w.name!r} takes {channels}")
        self._bias(b, o, x, w, output, check_scale=x.dtype == "uint8")
        shape = self._window_shape(x, kh, kw, options, o)
        lo, hi = self._activation(options, out_q, output.dtype)
        zp_x, zp_w, mode, dtype = int(in_q.zero_point[0]), w_q.zero_point, self.mode, output.dtype

        def run(x, w, b):
            acc = integer.conv_accumulate(x, zp_x, w, zp_w, b, options)
            return mode.requantize("CONV_2D", acc, in_q, w_q, out_q, lo, hi, dtype)
        return run, shape

    def _depthwise_conv_2d(self, inputs, output, options):
        x, w = inputs[:2]
        in_q, out_q = self._same_type(x, output, 4)
        w_q = self._weights(x, w, 4, axis=3, zero_point_used=x.dtype == "uint8")
        one, kh, kw, out_channels = w.shape
        channels = self.shapes[x.name][3]
        if one != 1 or out_channels % channels:
            raise ValueError(f"filter {w.name!r} of shape {w.shape} is not [1, KH, KW, "
                             f"{channels} * depth_multiplier] for input {x.name!r}")
        if out_channels // channels != options["depth_multiplier"]:
            raise ValueError(f"depth_multiplier {options['depth_multiplier']} disagrees with "
                             f"the filter {w.name!r}: {out_channels} channels from {channels}")
        if len(inputs) == 3:
            self._bias(inputs[2], out_channels, x, w, output, check_scale=x.dtype == "uint8")
        shape = self._window_shape(x, kh, kw, options, out_channels)
        lo, hi = self._activation(options, out_q, output.dtype)
        zp_x, zp_w, mode, dtype = int(in_q.zero_point[0]), w_q.zero_point, self.mode, output.dtype

        def run(x, w, b=np.zeros(out_channels, np.int32)):
            acc = integer.depthwise_accumulate(x, zp_x, w, zp_w, b, options)
            return mode.requantize("DEPTHWISE_CONV_2D", acc, in_q, w_q, out_q, lo, hi, dtype)
        return run, shape

    def _fully_connected(self, inputs, output, options):
        x, w = inputs[:2]
        in_q, out_q = self._same_type(x, output, None)
        if w.data is None or len(w.shape) != 2:
            raise ValueError(f"weights {w.name!r} must be a constant [O, I]")
        per_tensor = w.quantization is None or not w.quantization.per_channel
        w_q = self._weights(x, w, 2, axis=0, zero_point_used=per_tensor)
        o, depth = w.shape
        in_shape = self.shapes[x.name]
        if len(in_shape) < 2 or in_shape[-1] != depth:
            raise ValueError(f"input {x.name!r} of shape {in_shape} does not end in the "
                             f"{depth} inputs of weights {w.name!r}")
        if len(inputs) == 3:
            self._bias(inputs[2], o, x, w, output, check_scale=per_tensor)
        if -1 in in_shape and any(d != 1 for d in in_shape[1:-1]):
            raise ValueError(f"input {x.name!r} of shape {in_shape}: flattening it to rows of "
                             f"{depth} would multiply the batch")
        rows = -1 if -1 in in_shape else int(np.prod(in_shape[:-1]))
        lo, hi = self._activation(options, out_q, output.dtype)
        zp_x, zp_w, mode, dtype = int(in_q.zero_point[0]), w_q.zero_point, self.mode, output.dtype

        def run(x, w, b=np.zeros(o, np.int32)):
            acc = integer.fully_connected_accumulate(x, zp_x, w, zp_w, b)
            return mode.requantize("FULLY_CONNECTED", acc, in_q, w_q, out_q, lo, hi, dtype)
        return run, (rows, o)

    # -- other ops -------------------------------------------------------------------------
    def _add(self, inputs, output, options):
        a, b = inputs
        a_q, out_q = self._same_type(a, output, None)
        b_q, _ = self._same_type(b, output, None)
        add_multipliers(a_q, b_q, out_q)
        shape = _broadcast(self.shapes[a.name], self.shapes[b.name])
        lo, hi = self._activation(options, out_q, output.dtype)
        mode, dtype = self.mode, output.dtype

        def run(x, y):
            return mode.add(x, a_q, y, b_q, out_q, lo, hi, dtype)
        return run, shape

    def _average_pool_2d(self, inputs, output, options):
        (x,) = inputs
        in_q, out_q = self._same_type(x, output, 4)
        if (in_q.zero_point[0] != out_q.zero_point[0]
                or abs(float(in_q.scale[0]) - float(out_q.scale[0])) > 1e-6):
            raise ValueError(f"output {output.name!r} must keep the quantization of input "
                             f"{x.name!r} (TFLite averages the raw values)")
        shape = self._window_shape(x, options["filter_h"], options["filter_w"], options,
                                   self.shapes[x.name][3])
        lo, hi = self._activation(options, out_q, output.dtype)
        mode, dtype = self.mode, output.dtype

        def run(x):
            return mode.average_pool_2d(x, in_q, out_q, options, lo, hi, dtype)
        return run, shape

    def _mean(self, inputs, output, options):
        x, axis = inputs
        in_q, out_q = self._same_type(x, output, None)
        in_shape = self.shapes[x.name]
        axes = _constant_ints(axis, "axes")
        rank = len(in_shape)
        if any(not -rank <= a < rank for a in axes):
            raise ValueError(f"axes {axes} out of range for input {x.name!r} of rank {rank}")
        axes = tuple(dict.fromkeys(a % rank for a in axes))
        keep = options["keep_dims"]
        shape = tuple(1 if i in axes else d for i, d in enumerate(in_shape)
                      if keep or i not in axes)
        mode, dtype = self.mode, output.dtype

        def run(x, _):
            return mode.mean(x, axes, keep, in_q, out_q, dtype)
        return run, shape

    def _reshape(self, inputs, output, options):
        x, new_shape = inputs
        if output.dtype != x.dtype or output.quantization != x.quantization:
            raise ValueError(f"output {output.name!r} must keep the dtype and quantization of "
                             f"input {x.name!r} (RESHAPE copies the bytes)")
        target = _constant_ints(new_shape, "new shape")
        in_shape = self.shapes[x.name]
        if target.count(-1) > 1 or any(d < -1 for d in target):
            raise ValueError(f"new shape {target} is not a shape (one -1 at most)")
        known = math.prod(d for d in target if d != -1)
        if -1 in in_shape:
            if target[:1] != [-1] or known != math.prod(in_shape[1:]):
                raise ValueError(f"new shape {target} for input {x.name!r} of shape "
                                 f"{in_shape}: only [-1, ...] keeping the batch is supported")
            shape = tuple(target)
        else:
            size = math.prod(in_shape)
            fits = (known > 0 and size % known == 0) if -1 in target else known == size
            if not fits:
                raise ValueError(f"new shape {target} does not hold the {size} elements of "
                                 f"input {x.name!r}")
            shape = tuple(size // known if d == -1 else d for d in target)

        def run(x, _):
            return x.reshape(target)
        return run, shape

    def _softmax(self, inputs, output, options):
        (x,) = inputs
        in_q, out_q = self._same_type(x, output, None)
        lowest = QUANTIZED_RANGES[output.dtype][0]
        if (int(out_q.zero_point[0]) != lowest
                or abs(float(out_q.scale[0]) - 1 / 256) > 0.001 / 256):
            raise ValueError(f"output {output.name!r} must have scale 1/256 and zero point "
                             f"{lowest}, got {out_q.scale[0]} and {out_q.zero_point[0]}")
        if not self.shapes[x.name]:
            raise ValueError(f"input {x.name!r} is a scalar")
        softmax_multiplier(options["beta"], in_q.scale[0])
        mode, dtype, beta = self.mode, output.dtype, options["beta"]

        def run(x):
            return mode.softmax(x, beta, in_q, out_q, dtype)
        return run, self.shapes[x.name]

    def _quantize(self, inputs, output, options):
        (x,) = inputs
        if x.dtype != "float32" or output.dtype not in QUANTIZED_RANGES:
            raise ValueError(f"takes float32 to int8/uint8, got {x.dtype} to {output.dtype}")
        out_q = _per_tensor(output, f"output {output.name!r}")
        mode, dtype = self.mode, output.dtype

        def run(x):
            return mode.quantize(x, out_q, dtype)
        return run, self.shapes[x.name]

    def _dequantize(self, inputs, output, options):
        (x,) = inputs
        if x.dtype not in QUANTIZED_RANGES or output.dtype != "float32":
            raise ValueError(f"takes int8/uint8 to float32, got {x.dtype} to {output.dtype}")
        in_q = _per_tensor(x, f"input {x.name!r}")
        mode = self.mode

        def run(x):
            return mode.dequantize(x, in_q)
        return run, self.shapes[x.name]

    # -- checks ----------------------------------------------------------------------------
    def _same_type(self, x, output, rank):
        """The per-tensor quantizations of an 8-bit input and an output of its dtype."""
        if x.dtype not in QUANTIZED_RANGES:
            raise ValueError(f"input {x.name!r} is {x.dtype}; the op takes int8 or uint8")
        if output.dtype != x.dtype:
            raise ValueError(f"output {output.name!r} is {output.dtype}, its input {x.name!r} "
                             f"is {x.dtype}")
        if rank is not None and len(self.shapes[x.name]) != rank:
            raise ValueError(f"input {x.name!r} of shape {self.shapes[x.name]} is not {rank}-D")
        return (_per_tensor(x, f"input {x.name!r}"),
                _per_tensor(output, f"output {output.name!r}"))

    def _weights(self, x, w, rank, axis, zero_point_used):
        """The filter's quantization: int8 weights with int8 inputs, per tensor or per output
        channel along `axis`, zero point 0 where TFLite's kernel ignores it or requires it;
        uint8 weights with uint8 inputs, per tensor."""
        if w.data is None or len(w.shape) != rank or 0 in w.shape:
            raise ValueError(f"filter {w.name!r} must be a {rank}-D constant, none of its "
                             f"dimensions 0")
        if w.dtype != x.dtype:
            raise ValueError(f"filter {w.name!r} is {w.dtype}, the input {x.name!r} is "
                             f"{x.dtype}")
        q = w.quantization
        role = f"filter {w.name!r}"
        if q is None:
            raise ValueError(f"{role} has no quantization")
        _check_grid(q, w.dtype, role)
        if q.per_channel:
            if w.dtype == "uint8":
                raise ValueError(f"{role}: TFLite's uint8 kernels take per-tensor weights only")
            if q.axis != axis or q.scale.size != w.shape[axis]:
                raise ValueError(f"{role}: {q.scale.size} scales along axis {q.axis}; per "
                                 f"channel needs {w.shape[axis]} along axis {axis}")
        if w.dtype == "int8" and not zero_point_used and np.any(q.zero_point != 0):
            raise ValueError(f"{role}: int8 weights need zero point 0 here (TFLite's kernel "
                             f"requires or ignores it), got {q.zero_point.tolist()}")
        return q

    def _bias(self, b, channels, x, w, output, check_scale):
        if b.data is None or b.dtype != "int32" or b.shape != (channels,):
            raise ValueError(f"bias {b.name!r} must be an int32 constant of shape ({channels},)")
        q = b.quantization
        if q is not None and np.any(q.zero_point != 0):
            raise ValueError(f"bias {b.name!r} must have zero point 0")
        if check_scale:
            # GetQuantizedConvolutionMultipler's check; a bias without quantization has scale 0.
            product = np.float64(x.quantization.scale[0]) * np.float64(w.quantization.scale[0])
            bias_scale = np.float64(q.scale[0]) if q is not None else 0.0
            if abs(product - bias_scale) / np.float64(output.quantization.scale[0]) \
                    > _BIAS_SCALE_TOLERANCE:
                raise ValueError(f"bias {b.name!r} has scale {bias_scale}, TFLite needs "
                                 f"input scale * filter scale = {product}")

    def _window_shape(self, x, kernel_h, kernel_w, options, channels):
        batch, h, w, _ = self.shapes[x.name]
        dh, dw = options.get("dilation_h", 1), options.get("dilation_w", 1)
        out_h = integer.output_size(options["padding"], h, kernel_h, options["stride_h"], dh)
        out_w = integer.output_size(options["padding"], w, kernel_w, options["stride_w"], dw)
        if out_h <= 0 or out_w <= 0:
            raise ValueError(f"a {kernel_h}x{kernel_w} window (dilation {dh}x{dw}) with "
                             f"{options['padding']} padding leaves no output of input "
                             f"{x.name!r} of shape {self.shapes[x.name]}")
        return batch, out_h, out_w, channels

    def _activation(self, options, out_q, dtype):
        return self.mode.activation_range(options["activation"], out_q, dtype)


def _per_tensor(tensor, role):
    q = tensor.quantization
    if q is None:
        raise ValueError(f"{role} is {tensor.dtype} without quantization")
    if q.per_channel:
        raise ValueError(f"{role} needs per-tensor quantization, got {q.scale.size} scales")
    _check_grid(q, tensor.dtype, role)
    return q


def _check_grid(q, dtype, role):
    lo, hi = QUANTIZED_RANGES[dtype]
    if not np.all(np.isfinite(q.scale) & (q.scale > 0)):
        raise ValueError(f"{role}: scales must be positive and finite, got {q.scale.tolist()}")
    if np.any((q.zero_point < lo) | (q.zero_point > hi)):
        raise ValueError(f"{role}: zero points {q.zero_point.tolist()} outside {dtype}")


def _constant_ints(tensor, role):
    if tensor.data is None or tensor.dtype != "int32" or tensor.data.ndim > 1:
        raise ValueError(f"{role} {tensor.name!r} must be an int32 constant, 0-D or 1-D")
    return [int(v) for v in tensor.data.reshape(-1)]


def _broadcast(a, b):
    """numpy's broadcast of two shapes, where -1 (the batch) meets only itself or 1."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            raise ValueError(f"shapes {a} and {b} do not broadcast (-1: the batch)")
    return tuple(reversed(out))


def _check_options(label, op):
    options = dict(op.options)
    missing = [key for key in OP_OPTIONS[op.kind] if key not in options]
    if missing:
        raise ValueError(f"{label}: options {missing} are missing")
    for key in OP_OPTIONS[op.kind]:
        value = options[key]
        if key == "padding" and value not in PADDINGS:
            raise ValueError(f"{label}: padding must be one of {PADDINGS}, got {value!r}")
        if key == "activation" and value not in ACTIVATIONS:
            raise ValueError(f"{label}: activation must be one of {ACTIVATIONS}, got {value!r}")
        if key in ("stride_h", "stride_w", "dilation_h", "dilation_w", "filter_h", "filter_w",
                   "depth_multiplier"):
            if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                    or value < 1):
                raise ValueError(f"{label}: {key} must be a positive integer, got {value!r}")
            options[key] = int(value)
        if key == "keep_dims" and not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{label}: keep_dims must be a bool, got {value!r}")
        if key == "beta" and not (isinstance(value, numbers.Real) and math.isfinite(value)
                                  and value > 0):
            raise ValueError(f"{label}: beta must be a positive finite number, got {value!r}")
    return options
