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

This module offers both; the code is in onnx_writer.py (write), onnx_reader.py (read) and
onnx_common.py (what both use).
"""
from .onnx_common import INTEGER_TYPE_KEY, MAX_OPSET, MIN_OPSET
from .onnx_reader import read
from .onnx_writer import PRODUCER, activation_is_redundant, write

__all__ = ["INTEGER_TYPE_KEY", "MAX_OPSET", "MIN_OPSET", "PRODUCER", "activation_is_redundant",
           "read", "write"]
