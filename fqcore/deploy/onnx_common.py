"""What onnx_writer and onnx_reader share: opset bounds, naming, type and layout tables, helpers."""

# 13 brings per-axis QuantizeLinear; 21 is the newest opset the tests run in ONNX Runtime.
MIN_OPSET, MAX_OPSET = 13, 21
_SEP = "::"
# ONNX TensorProto data types by numpy dtype name, and back.
_ONNX_TYPES = {"float32": 1, "uint8": 2, "int8": 3, "int32": 6, "int64": 7}
_NUMPY_TYPES = {v: k for k, v in _ONNX_TYPES.items()}
_TO_NCHW, _TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)
# The model metadata entry naming the Model's integer type (the graph stores int8 as uint8).
INTEGER_TYPE_KEY = "fqcore_integer_type"


def _need_onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError("ONNX export needs the onnx package: pip install fqcore[deploy]") \
            from None
    return onnx


def _same_padding(size, kernel, stride, dilation):
    """TFLite's SAME padding as ONNX pads (before, after): the total a full output grid needs,
    the odd one after."""
    effective = (kernel - 1) * dilation + 1
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2
