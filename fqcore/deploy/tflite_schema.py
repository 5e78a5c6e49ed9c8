"""The parts of TFLite's schema.fbs (version 3) that fqcore.deploy writes and reads."""
# Written out by hand from schema.fbs: enum values, union type ids and each table's field slots.
FILE_IDENTIFIER = b"TFL3"
SCHEMA_VERSION = 3

# TensorType values, for the dtypes of model.DTYPES; names of the others only for messages.
TENSOR_TYPES = {"float32": 0, "int32": 2, "uint8": 3, "int8": 9}
DTYPE_OF_TYPE = {code: dtype for dtype, code in TENSOR_TYPES.items()}
TENSOR_TYPE_NAMES = (
    "FLOAT32", "FLOAT16", "INT32", "UINT8", "INT64", "STRING", "BOOL", "INT16", "COMPLEX64",
    "INT8", "FLOAT64", "COMPLEX128", "UINT64", "RESOURCE", "VARIANT", "UINT32", "UINT16", "INT4",
    "BFLOAT16")

# BuiltinOperator, in enum order (value = index), so a foreign op can be named in a message. It
# stops at 206: TensorFlow's and LiteRT's schemas give 207 and up different names.
BUILTIN_OPERATOR_NAMES = (
    "ADD", "AVERAGE_POOL_2D", "CONCATENATION", "CONV_2D", "DEPTHWISE_CONV_2D", "DEPTH_TO_SPACE",
    "DEQUANTIZE", "EMBEDDING_LOOKUP", "FLOOR", "FULLY_CONNECTED", "HASHTABLE_LOOKUP",
    "L2_NORMALIZATION", "L2_POOL_2D", "LOCAL_RESPONSE_NORMALIZATION", "LOGISTIC", "LSH_PROJECTION",
    "LSTM", "MAX_POOL_2D", "MUL", "RELU", "RELU_N1_TO_1", "RELU6", "RESHAPE", "RESIZE_BILINEAR",
    "RNN", "SOFTMAX", "SPACE_TO_DEPTH", "SVDF", "TANH", "CONCAT_EMBEDDINGS", "SKIP_GRAM", "CALL",
    "CUSTOM", "EMBEDDING_LOOKUP_SPARSE", "PAD", "UNIDIRECTIONAL_SEQUENCE_RNN", "GATHER",
    "BATCH_TO_SPACE_ND", "SPACE_TO_BATCH_ND", "TRANSPOSE", "MEAN", "SUB", "DIV", "SQUEEZE",
    "UNIDIRECTIONAL_SEQUENCE_LSTM", "STRIDED_SLICE", "BIDIRECTIONAL_SEQUENCE_RNN", "EXP",
    "TOPK_V2", "SPLIT", "LOG_SOFTMAX", "DELEGATE", "BIDIRECTIONAL_SEQUENCE_LSTM", "CAST", "PRELU",
    "MAXIMUM", "ARG_MAX", "MINIMUM", "LESS", "NEG", "PADV2", "GREATER", "GREATER_EQUAL",
    "LESS_EQUAL", "SELECT", "SLICE", "SIN", "TRANSPOSE_CONV", "SPARSE_TO_DENSE", "TILE",
    "EXPAND_DIMS", "EQUAL", "NOT_EQUAL", "LOG", "SUM", "SQRT", "RSQRT", "SHAPE", "POW", "ARG_MIN",
    "FAKE_QUANT", "REDUCE_PROD", "REDUCE_MAX", "PACK", "LOGICAL_OR", "ONE_HOT", "LOGICAL_AND",
    "LOGICAL_NOT", "UNPACK", "REDUCE_MIN", "FLOOR_DIV", "REDUCE_ANY", "SQUARE", "ZEROS_LIKE",
    "FILL", "FLOOR_MOD", "RANGE", "RESIZE_NEAREST_NEIGHBOR", "LEAKY_RELU", "SQUARED_DIFFERENCE",
    "MIRROR_PAD", "ABS", "SPLIT_V", "UNIQUE", "CEIL", "REVERSE_V2", "ADD_N", "GATHER_ND", "COS",
    "WHERE", "RANK", "ELU", "REVERSE_SEQUENCE", "MATRIX_DIAG", "QUANTIZE", "MATRIX_SET_DIAG",
    "ROUND", "HARD_SWISH", "IF", "WHILE", "NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5",
    "SCATTER_ND", "SELECT_V2", "DENSIFY", "SEGMENT_SUM", "BATCH_MATMUL",
    "PLACEHOLDER_FOR_GREATER_OP_CODES", "CUMSUM", "CALL_ONCE", "BROADCAST_TO", "RFFT2D", "CONV_3D",
    "IMAG", "REAL", "COMPLEX_ABS", "HASHTABLE", "HASHTABLE_FIND", "HASHTABLE_IMPORT",
    "HASHTABLE_SIZE", "REDUCE_ALL", "CONV_3D_TRANSPOSE", "VAR_HANDLE", "READ_VARIABLE",
    "ASSIGN_VARIABLE", "BROADCAST_ARGS", "RANDOM_STANDARD_NORMAL", "BUCKETIZE", "RANDOM_UNIFORM",
    "MULTINOMIAL", "GELU", "DYNAMIC_UPDATE_SLICE", "RELU_0_TO_1", "UNSORTED_SEGMENT_PROD",
    "UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_SUM", "ATAN2", "UNSORTED_SEGMENT_MIN", "SIGN",
    "BITCAST", "BITWISE_XOR", "RIGHT_SHIFT", "STABLEHLO_LOGISTIC", "STABLEHLO_ADD",
    "STABLEHLO_DIVIDE", "STABLEHLO_MULTIPLY", "STABLEHLO_MAXIMUM", "STABLEHLO_RESHAPE",
    "STABLEHLO_CLAMP", "STABLEHLO_CONCATENATE", "STABLEHLO_BROADCAST_IN_DIM",
    "STABLEHLO_CONVOLUTION", "STABLEHLO_SLICE", "STABLEHLO_CUSTOM_CALL", "STABLEHLO_REDUCE",
    "STABLEHLO_ABS", "STABLEHLO_AND", "STABLEHLO_COSINE", "STABLEHLO_EXPONENTIAL",
    "STABLEHLO_FLOOR", "STABLEHLO_LOG", "STABLEHLO_MINIMUM", "STABLEHLO_NEGATE", "STABLEHLO_OR",
    "STABLEHLO_POWER", "STABLEHLO_REMAINDER", "STABLEHLO_RSQRT", "STABLEHLO_SELECT",
    "STABLEHLO_SUBTRACT", "STABLEHLO_TANH", "STABLEHLO_SCATTER", "STABLEHLO_COMPARE",
    "STABLEHLO_CONVERT", "STABLEHLO_DYNAMIC_SLICE", "STABLEHLO_DYNAMIC_UPDATE_SLICE",
    "STABLEHLO_PAD", "STABLEHLO_IOTA", "STABLEHLO_DOT_GENERAL", "STABLEHLO_REDUCE_WINDOW",
    "STABLEHLO_SORT", "STABLEHLO_WHILE", "STABLEHLO_GATHER", "STABLEHLO_TRANSPOSE", "DILATE",
    "STABLEHLO_RNG_BIT_GENERATOR", "REDUCE_WINDOW", "STABLEHLO_COMPOSITE")
CUSTOM = 32
# deprecated_builtin_code is a byte: codes from this one up live only in builtin_code.
PLACEHOLDER_FOR_GREATER_OP_CODES = 127

# The op kinds of model.OP_OPTIONS, by builtin code, with the BuiltinOptions union member that
# carries their options (0, NONE, for ops TFLite gives none).
BUILTIN_CODES = {
    "ADD": 0, "AVERAGE_POOL_2D": 1, "CONV_2D": 3, "DEPTHWISE_CONV_2D": 4, "DEQUANTIZE": 6,
    "FULLY_CONNECTED": 9, "RESHAPE": 22, "SOFTMAX": 25, "MEAN": 40, "QUANTIZE": 114,
}
KIND_OF_CODE = {code: kind for kind, code in BUILTIN_CODES.items()}


class BuiltinOptions:
    """Type ids of the BuiltinOptions union (its member order in schema.fbs, NONE = 0)."""
    NONE = 0
    Conv2DOptions = 1
    DepthwiseConv2DOptions = 2
    Pool2DOptions = 5
    FullyConnectedOptions = 8
    SoftmaxOptions = 9
    AddOptions = 11
    ReshapeOptions = 17
    ReducerOptions = 27
    DequantizeOptions = 38
    QuantizeOptions = 89


OPTIONS_TYPE = {
    "CONV_2D": BuiltinOptions.Conv2DOptions,
    "DEPTHWISE_CONV_2D": BuiltinOptions.DepthwiseConv2DOptions,
    "FULLY_CONNECTED": BuiltinOptions.FullyConnectedOptions,
    "ADD": BuiltinOptions.AddOptions,
    "AVERAGE_POOL_2D": BuiltinOptions.Pool2DOptions,
    "MEAN": BuiltinOptions.ReducerOptions,
    "RESHAPE": BuiltinOptions.ReshapeOptions,
    "SOFTMAX": BuiltinOptions.SoftmaxOptions,
    "QUANTIZE": BuiltinOptions.QuantizeOptions,
    "DEQUANTIZE": BuiltinOptions.DequantizeOptions,
}

# Padding and ActivationFunctionType; the fused activations we do not run are named for messages.
PADDING_CODES = {"SAME": 0, "VALID": 1}
ACTIVATION_CODES = {"NONE": 0, "RELU": 1, "RELU6": 3}
ACTIVATION_NAMES = ("NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGN_BIT")


# Field slots: a field's id in its table (its order in schema.fbs, from 0). A union field takes two
# ids, its type (`*_TYPE`) first. Defaults other than zero are noted where the reader needs them.
class Model:
    VERSION, OPERATOR_CODES, SUBGRAPHS, DESCRIPTION, BUFFERS, METADATA_BUFFER, METADATA, \
        SIGNATURE_DEFS = range(8)
    NUM_FIELDS = 8


class OperatorCode:
    DEPRECATED_BUILTIN_CODE, CUSTOM_CODE, VERSION, BUILTIN_CODE = range(4)
    NUM_FIELDS = 4
    VERSION_DEFAULT = 1


class SubGraph:
    TENSORS, INPUTS, OUTPUTS, OPERATORS, NAME = range(5)
    NUM_FIELDS = 5


class Buffer:
    DATA, OFFSET, SIZE = range(3)
    NUM_FIELDS = 3
    DATA_ALIGNMENT = 16     # `force_align: 16` in the schema


class Metadata:
    NAME, BUFFER = range(2)
    NUM_FIELDS = 2


class TensorMap:
    NAME, TENSOR_INDEX = range(2)
    NUM_FIELDS = 2


class SignatureDef:
    INPUTS, OUTPUTS, SIGNATURE_KEY, DEPRECATED_TAG, SUBGRAPH_INDEX = range(5)
    NUM_FIELDS = 5


class Tensor:
    SHAPE, TYPE, BUFFER, NAME, QUANTIZATION, IS_VARIABLE, SPARSITY, SHAPE_SIGNATURE, HAS_RANK, \
        VARIANT_TENSORS = range(10)
    NUM_FIELDS = 10


class QuantizationParameters:
    MIN, MAX, SCALE, ZERO_POINT, DETAILS_TYPE, DETAILS, QUANTIZED_DIMENSION = range(7)
    NUM_FIELDS = 7


class Operator:
    OPCODE_INDEX, INPUTS, OUTPUTS, BUILTIN_OPTIONS_TYPE, BUILTIN_OPTIONS, CUSTOM_OPTIONS, \
        CUSTOM_OPTIONS_FORMAT, MUTATING_VARIABLE_INPUTS, INTERMEDIATES, \
        LARGE_CUSTOM_OPTIONS_OFFSET, LARGE_CUSTOM_OPTIONS_SIZE, BUILTIN_OPTIONS_2_TYPE, \
        BUILTIN_OPTIONS_2 = range(13)
    NUM_FIELDS = 13


class Conv2DOptions:
    PADDING, STRIDE_W, STRIDE_H, FUSED_ACTIVATION_FUNCTION, DILATION_W_FACTOR, \
        DILATION_H_FACTOR, QUANTIZED_BIAS_TYPE = range(7)
    NUM_FIELDS = 7
    DILATION_DEFAULT = 1


class DepthwiseConv2DOptions:
    PADDING, STRIDE_W, STRIDE_H, DEPTH_MULTIPLIER, FUSED_ACTIVATION_FUNCTION, \
        DILATION_W_FACTOR, DILATION_H_FACTOR = range(7)
    NUM_FIELDS = 7
    DILATION_DEFAULT = 1


class Pool2DOptions:
    PADDING, STRIDE_W, STRIDE_H, FILTER_WIDTH, FILTER_HEIGHT, FUSED_ACTIVATION_FUNCTION = range(6)
    NUM_FIELDS = 6


class FullyConnectedOptions:
    FUSED_ACTIVATION_FUNCTION, WEIGHTS_FORMAT, KEEP_NUM_DIMS, ASYMMETRIC_QUANTIZE_INPUTS, \
        QUANTIZED_BIAS_TYPE = range(5)
    NUM_FIELDS = 5


class SoftmaxOptions:
    BETA = 0
    NUM_FIELDS = 1


class AddOptions:
    FUSED_ACTIVATION_FUNCTION, POT_SCALE_INT16 = range(2)
    NUM_FIELDS = 2
    POT_SCALE_INT16_DEFAULT = True


class ReducerOptions:
    KEEP_DIMS = 0
    NUM_FIELDS = 1


class ReshapeOptions:
    NEW_SHAPE = 0
    NUM_FIELDS = 1


def builtin_name(code):
    """The BuiltinOperator name of `code`, or a description of an unknown one."""
    if 0 <= code < len(BUILTIN_OPERATOR_NAMES):
        return BUILTIN_OPERATOR_NAMES[code]
    return f"builtin operator {code} (unknown to this schema)"


def tensor_type_name(code):
    """The TensorType name of `code`, or a description of an unknown one."""
    if 0 <= code < len(TENSOR_TYPE_NAMES):
        return TENSOR_TYPE_NAMES[code]
    return f"tensor type {code} (unknown to this schema)"
