"""The integer model every part of fqcore.deploy shares: tensors with their quantization, and ops
in TFLite's vocabulary, in execution order. The exporters lower a graph into it, the file formats
write and read it, and the reference interpreter runs it."""
from dataclasses import dataclass, field

import numpy as np

# Op kinds (TFLite's builtin names) and the options each one carries. Inputs, as TFLite orders
# and lays them out:
#   CONV_2D            input NHWC, filter [O, KH, KW, I] (per-channel axis 0), bias int32 [O]
#   DEPTHWISE_CONV_2D  input NHWC, filter [1, KH, KW, I * depth_multiplier] (axis 3), bias int32
#   FULLY_CONNECTED    input [N, I], weights [O, I] (axis 0), bias int32 [O]
#   ADD                two inputs of one shape (or one broadcast by numpy's rules)
#   AVERAGE_POOL_2D    input NHWC (the output keeps the input's scale and zero point)
#   MEAN               input, axes int32 1-D constant
#   RESHAPE            input, new shape int32 1-D constant
#   SOFTMAX            input (the output scale is 1/256, zero point -128 int8 / 0 uint8)
#   QUANTIZE           float32 input -> int8/uint8;  DEQUANTIZE  int8/uint8 -> float32
# Biases are int32 with scale input_scale * filter_scale[c] and zero point 0.
OP_OPTIONS = {
    "CONV_2D": ("padding", "stride_h", "stride_w", "dilation_h", "dilation_w", "activation"),
    "DEPTHWISE_CONV_2D": ("padding", "stride_h", "stride_w", "dilation_h", "dilation_w",
                          "depth_multiplier", "activation"),
    "FULLY_CONNECTED": ("activation",),
    "ADD": ("activation",),
    "AVERAGE_POOL_2D": ("padding", "stride_h", "stride_w", "filter_h", "filter_w", "activation"),
    "MEAN": ("keep_dims",),
    "RESHAPE": (),
    "SOFTMAX": ("beta",),
    "QUANTIZE": (),
    "DEQUANTIZE": (),
}
PADDINGS = ("SAME", "VALID")
ACTIVATIONS = ("NONE", "RELU", "RELU6")
DTYPES = ("float32", "int8", "uint8", "int32")
# The quantized types (activations, weights) and the values each holds.
QUANTIZED_RANGES = {"int8": (-128, 127), "uint8": (0, 255)}


@dataclass
class Quantization:
    """Affine quantization real = scale * (q - zero_point), per tensor (one entry) or per channel
    along `axis`. scale float32, zero_point int64 arrays of the same length."""
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int = 0

    def __post_init__(self):
        self.scale = np.asarray(self.scale, np.float32).reshape(-1)
        self.zero_point = np.asarray(self.zero_point, np.int64).reshape(-1)
        if self.scale.shape != self.zero_point.shape or self.scale.size == 0:
            raise ValueError(f"quantization needs as many scales as zero points (at least one), "
                             f"got {self.scale.size} and {self.zero_point.size}")

    @property
    def per_channel(self):
        return self.scale.size > 1

    def __eq__(self, other):
        return (isinstance(other, Quantization) and self.axis == other.axis
                and np.array_equal(self.scale.view(np.uint32), other.scale.view(np.uint32))
                and np.array_equal(self.zero_point, other.zero_point))


@dataclass
class Tensor:
    """A tensor of the model. shape: ints, -1 for a dimension fixed only at run time (the batch);
    data: the constant's value (weights, biases, shapes), None for activations."""
    name: str
    shape: tuple
    dtype: str
    quantization: Quantization = None
    data: np.ndarray = None

    def __post_init__(self):
        self.shape = tuple(int(d) for d in self.shape)
        if self.dtype not in DTYPES:
            raise ValueError(f"tensor {self.name!r}: dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.data is not None:
            self.data = np.ascontiguousarray(self.data, dtype=self.dtype)

    def __eq__(self, other):
        # The generated __eq__ would compare the arrays with ==, which has no truth value; the
        # data compares bit for bit, as Quantization's scales do.
        if not isinstance(other, Tensor):
            return NotImplemented
        if (self.name, self.shape, self.dtype, self.quantization) != (
                other.name, other.shape, other.dtype, other.quantization):
            return False
        if self.data is None or other.data is None:
            return self.data is None and other.data is None
        return (self.data.dtype == other.data.dtype and self.data.shape == other.data.shape
                and self.data.tobytes() == other.data.tobytes())


@dataclass
class Op:
    """One op: its kind (a key of OP_OPTIONS), input and output tensor names, and options."""
    kind: str
    inputs: list
    outputs: list
    options: dict = field(default_factory=dict)
    name: str = ""

    def __post_init__(self):
        if self.kind not in OP_OPTIONS:
            raise ValueError(f"op {self.name!r}: unknown kind {self.kind!r}")


@dataclass
class Model:
    """Tensors by name (in file order), ops in execution order, the graph's inputs and outputs,
    and what the exporter says of itself (description, the weight dtype it chose)."""
    tensors: dict
    ops: list
    inputs: list
    outputs: list
    description: str = "fqcore"

    @property
    def integer_dtype(self):
        """'int8' or 'uint8', the type of the model's quantized tensors (None if it has none)."""
        return next((t.dtype for t in self.tensors.values() if t.dtype in QUANTIZED_RANGES), None)

    def tensor(self, name):
        try:
            return self.tensors[name]
        except KeyError:
            raise ValueError(f"the model has no tensor {name!r}") from None
