"""Functions that add ops to the default graph, named and shaped as TF1's (tf.add, tf.nn.conv2d...)."""
import operator

import numpy as np

from .core import Tensor, get_default_graph


def _graph():
    return get_default_graph()


def _op(op_type, inputs, attrs=None, name=None, **kwargs):
    return _graph().create_op(op_type, inputs, attrs, name=name, **kwargs)


def constant(value, dtype=None, name="Const"):
    """A Const op. Python floats become float32 and ints int32, as in TF."""
    array = np.asarray(value, dtype=dtype)
    if dtype is None:
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        elif array.dtype == np.int64 and not isinstance(value, np.ndarray):
            array = array.astype(np.int32)
    array = array.copy()
    array.setflags(write=False)
    return _op("Const", [], {"value": array, "dtype": array.dtype.name}, name=name).outputs[0]


def placeholder(dtype="float32", shape=None, name="Placeholder"):
    attrs = {"dtype": np.dtype(dtype).name, "shape": None if shape is None else list(shape)}
    return _op("Placeholder", [], attrs, name=name).outputs[0]


def identity(x, name="Identity"):
    return _op("Identity", [x], name=name).outputs[0]


def stop_gradient(x, name="StopGradient"):
    """x, through which no gradient flows back."""
    return _op("StopGradient", [x], name=name).outputs[0]


def _binary(op_type, default_name, x, y, name):
    """A binary op; non-tensor operands become Consts named `<op>/x` and `<op>/y` (TF's names)."""
    g = _graph()
    with g.name_scope(name or default_name) as scope:
        dtype = None
        for operand in (x, y):
            if isinstance(operand, Tensor):
                dtype = operand.dtype
        x = x if isinstance(x, Tensor) or hasattr(x, "read") else constant(x, dtype, name="x")
        y = y if isinstance(y, Tensor) or hasattr(y, "read") else constant(y, dtype, name="y")
        return g.create_op(op_type, [x, y], full_name=scope[:-1]).outputs[0]


def add(x, y, name=None):
    return _binary("AddV2", "add", x, y, name)


def subtract(x, y, name=None):
    return _binary("Sub", "sub", x, y, name)


def multiply(x, y, name=None):
    return _binary("Mul", "mul", x, y, name)


def divide(x, y, name=None):
    return _binary("RealDiv", "truediv", x, y, name)


def pow(x, y, name=None):
    return _binary("Pow", "Pow", x, y, name)


def minimum(x, y, name=None):
    return _binary("Minimum", "Minimum", x, y, name)


def maximum(x, y, name=None):
    return _binary("Maximum", "Maximum", x, y, name)


def greater_equal(x, y, name=None):
    return _binary("GreaterEqual", "GreaterEqual", x, y, name)


def squared_difference(x, y, name="SquaredDifference"):
    return _binary("SquaredDifference", "SquaredDifference", x, y, name)


def reciprocal(x, name="Reciprocal"):
    return _op("Reciprocal", [x], name=name).outputs[0]


def rsqrt(x, name="Rsqrt"):
    return _op("Rsqrt", [x], name=name).outputs[0]


def cast(x, dtype, name="Cast"):
    return _op("Cast", [x], {"DstT": np.dtype(dtype).name}, name=name).outputs[0]


def size(x, name="Size"):
    return _op("Size", [x], name=name).outputs[0]


def rank(x, name="Rank"):
    return _op("Rank", [x], name=name).outputs[0]


_RANGE_DTYPES = [np.dtype(t) for t in ("int32", "int64", "float32", "float64")]


def range(start, limit=None, delta=1, name="range"):
    """TF's tf.range: Range(start, limit, delta), (0, start, delta) when limit is None. Values
    that are not tensors become Consts `<name>/start`, `limit`, `delta`; all three are cast to
    the widest of their dtypes (int32 < int64 < float32 < float64), as TF does."""
    if limit is None:
        start, limit = 0, start
    g = _graph()
    with g.name_scope(name) as scope:
        operands = [value if isinstance(value, Tensor) else constant(value, name=label)
                    for value, label in ((start, "start"), (limit, "limit"), (delta, "delta"))]
        for t in operands:
            if t.dtype not in _RANGE_DTYPES:
                raise ValueError(f"{scope[:-1]}: operands must be int32, int64, float32 or "
                                 f"float64, got {t.name} of dtype {t.dtype}")
        dtype = max((t.dtype for t in operands), key=_RANGE_DTYPES.index)
        operands = [t if t.dtype == dtype else cast(t, dtype) for t in operands]
        return g.create_op("Range", operands, {"Tidx": dtype.name},
                           full_name=scope[:-1]).outputs[0]


def reshape(x, shape, name="Reshape"):
    g = _graph()
    with g.name_scope(name) as scope:
        target = constant(np.asarray(shape, np.int32), name="shape")
        return g.create_op("Reshape", [x, target], full_name=scope[:-1]).outputs[0]


def squeeze(x, axis=None, name="Squeeze"):
    """x without its size-1 dims `axis` (an int or a list of ints; None: every size-1 dim)."""
    axis = [] if axis is None else [axis] if np.isscalar(axis) else list(axis)
    try:
        dims = [operator.index(a) for a in axis]
    except TypeError:
        raise ValueError(f"{name}: axis must be None, an int or a list of ints, "
                         f"got {axis!r}") from None
    return _op("Squeeze", [x], {"squeeze_dims": dims}, name=name).outputs[0]


def _int32_operand(value, name, op_name):
    """A Tensor as given; a list or array as an int32 Const named `name` in the current scope."""
    if isinstance(value, Tensor):
        return value
    array = np.asarray(value)
    if array.size and array.dtype.kind not in "iu":
        raise ValueError(f"{op_name}: {name} must be integers, got {array.dtype} {array.tolist()}")
    return constant(array.astype(np.int32), name=name)


def space_to_batch_nd(x, block_shape, paddings, name="SpaceToBatchND"):
    """TF's SpaceToBatchND: the M dims after the batch zero-padded by paddings [M, 2], then cut
    into blocks of block_shape [M] that are stacked into the batch."""
    g = _graph()
    with g.name_scope(name) as scope:
        block_shape = _int32_operand(block_shape, "block_shape", scope[:-1])
        paddings = _int32_operand(paddings, "paddings", scope[:-1])
        return g.create_op("SpaceToBatchND", [x, block_shape, paddings],
                           full_name=scope[:-1]).outputs[0]


def batch_to_space_nd(x, block_shape, crops, name="BatchToSpaceND"):
    """TF's BatchToSpaceND, the inverse of SpaceToBatchND: the batch's blocks of block_shape [M]
    put back in place in the M dims after the batch, then cropped by crops [M, 2]."""
    g = _graph()
    with g.name_scope(name) as scope:
        block_shape = _int32_operand(block_shape, "block_shape", scope[:-1])
        crops = _int32_operand(crops, "crops", scope[:-1])
        return g.create_op("BatchToSpaceND", [x, block_shape, crops],
                           full_name=scope[:-1]).outputs[0]


def _reduce(op_type, default_name, x, axis, keepdims, name):
    """A reduction. axis=None reduces every axis, as TF's _ReductionDims builds them in the
    current scope: a Const named `Const` when x's rank is known, else range(0, rank(x)) at run
    time. An explicit axis goes through `<name>/reduction_indices` (as TF names it)."""
    g = _graph()
    if axis is None:
        if x.shape is None:
            axes = range(0, rank(x))
        else:
            axes = constant(np.arange(len(x.shape), dtype=np.int32), name="Const")
        out = g.create_op(op_type, [x, axes], {"keep_dims": bool(keepdims)},
                          name=name or default_name).outputs[0]
        if out.shape is None and not keepdims:
            out.shape = ()  # reducing every axis gives a scalar (TF's _may_reduce_to_scalar)
        return out
    with g.name_scope(name or default_name) as scope:
        axes = constant(np.asarray(axis, np.int32), name="reduction_indices")
        return g.create_op(op_type, [x, axes], {"keep_dims": bool(keepdims)},
                           full_name=scope[:-1]).outputs[0]


def reduce_mean(x, axis=None, keepdims=False, name=None):
    return _reduce("Mean", "Mean", x, axis, keepdims, name)


def reduce_sum(x, axis=None, keepdims=False, name=None):
    return _reduce("Sum", "Sum", x, axis, keepdims, name)


def reduce_min(x, axis=None, keepdims=False, name=None):
    return _reduce("Min", "Min", x, axis, keepdims, name)


def reduce_max(x, axis=None, keepdims=False, name=None):
    return _reduce("Max", "Max", x, axis, keepdims, name)


def matmul(a, b, transpose_a=False, transpose_b=False, name="MatMul"):
    return _op("MatMul", [a, b], {"transpose_a": bool(transpose_a),
                                  "transpose_b": bool(transpose_b)}, name=name).outputs[0]


def bias_add(x, bias, name="BiasAdd"):
    return _op("BiasAdd", [x, bias], {"data_format": "NHWC"}, name=name).outputs[0]


def _four(value, name):
    """(h, w) or an int as TF's [1, h, w, 1]."""
    if isinstance(value, int):
        value = (value, value)
    value = list(value)
    if len(value) == 2:
        value = [1] + value + [1]
    if len(value) != 4 or any(not isinstance(v, (int, np.integer)) or v < 1 for v in value):
        raise ValueError(f"{name} must be a positive int, an (h, w) pair or [1, h, w, 1], got {value}")
    return [int(v) for v in value]


def _padding(padding):
    if padding not in ("SAME", "VALID"):
        raise ValueError(f"padding must be 'SAME' or 'VALID', got {padding!r}")
    return padding


def conv2d(x, filters, strides=1, padding="SAME", dilations=1, name="Conv2D"):
    attrs = {"strides": _four(strides, "strides"), "padding": _padding(padding),
             "dilations": _four(dilations, "dilations"), "data_format": "NHWC"}
    return _op("Conv2D", [x, filters], attrs, name=name).outputs[0]


def depthwise_conv2d(x, filters, strides=1, padding="SAME", dilations=1,
                     name="DepthwiseConv2dNative"):
    attrs = {"strides": _four(strides, "strides"), "padding": _padding(padding),
             "dilations": _four(dilations, "dilations"), "data_format": "NHWC"}
    return _op("DepthwiseConv2dNative", [x, filters], attrs, name=name).outputs[0]


def max_pool(x, ksize, strides, padding="VALID", name="MaxPool"):
    attrs = {"ksize": _four(ksize, "ksize"), "strides": _four(strides, "strides"),
             "padding": _padding(padding), "data_format": "NHWC"}
    return _op("MaxPool", [x], attrs, name=name).outputs[0]


def avg_pool(x, ksize, strides, padding="VALID", name="AvgPool"):
    attrs = {"ksize": _four(ksize, "ksize"), "strides": _four(strides, "strides"),
             "padding": _padding(padding), "data_format": "NHWC"}
    return _op("AvgPool", [x], attrs, name=name).outputs[0]


def relu(x, name="Relu"):
    return _op("Relu", [x], name=name).outputs[0]


def relu6(x, name="Relu6"):
    return _op("Relu6", [x], name=name).outputs[0]


def sigmoid(x, name="Sigmoid"):
    return _op("Sigmoid", [x], name=name).outputs[0]


def tanh(x, name="Tanh"):
    return _op("Tanh", [x], name=name).outputs[0]


def softmax(logits, name="Softmax"):
    return _op("Softmax", [logits], name=name).outputs[0]


def sparse_softmax_cross_entropy_with_logits(labels, logits, name="xent"):
    return _op("SparseSoftmaxCrossEntropyWithLogits", [logits, labels],
               name=name).outputs[0]


def fused_batch_norm(x, scale, offset, mean, variance, epsilon=1e-3, is_training=True,
                     exponential_avg_factor=1.0, name="FusedBatchNormV3"):
    """FusedBatchNormV3: outputs y, batch mean, batch variance (Bessel-corrected), reserves."""
    attrs = {"epsilon": float(np.float32(epsilon)), "is_training": bool(is_training),
             "exponential_avg_factor": float(exponential_avg_factor), "data_format": "NHWC"}
    return _op("FusedBatchNormV3", [x, scale, offset, mean, variance], attrs, name=name).outputs


def fake_quant_with_min_max_vars(x, min, max, num_bits=8, narrow_range=False,
                                 name="FakeQuantWithMinMaxVars"):
    attrs = {"num_bits": int(num_bits), "narrow_range": bool(narrow_range)}
    return _op("FakeQuantWithMinMaxVars", [x, min, max], attrs, name=name).outputs[0]


def fake_quant_with_min_max_vars_per_channel(x, min, max, num_bits=8, narrow_range=False,
                                             name="FakeQuantWithMinMaxVarsPerChannel"):
    attrs = {"num_bits": int(num_bits), "narrow_range": bool(narrow_range)}
    return _op("FakeQuantWithMinMaxVarsPerChannel", [x, min, max], attrs, name=name).outputs[0]


def fake_quant_with_min_max_args(x, min=-6.0, max=6.0, num_bits=8, narrow_range=False,
                                 name="FakeQuantWithMinMaxArgs"):
    attrs = {"min": float(min), "max": float(max), "num_bits": int(num_bits),
             "narrow_range": bool(narrow_range)}
    return _op("FakeQuantWithMinMaxArgs", [x], attrs, name=name).outputs[0]


def no_op(name="NoOp", control_inputs=()):
    return _op("NoOp", [], name=name, control_inputs=control_inputs)


def group(*ops, name="group_deps"):
    """One op that runs all `ops` (TF's tf.group)."""
    return no_op(name=name, control_inputs=ops)


def cond(pred, true_fn, false_fn, name="cond"):
    """TF1's cond as Switch/Merge: only the taken branch's ops run. Returns the Merge output.
    Like contrib's smart_cond, a Python bool picks the branch at build time. Names and wiring
    follow TF: Switch, switch_t, switch_f, pred_id, a Switch_<k> per outside value, Merge."""
    if isinstance(pred, (bool, np.bool_)):
        return true_fn() if pred else false_fn()
    g = _graph()
    with g.name_scope(name):
        switch = g.create_op("Switch", [pred, pred], name="Switch")
        switch_t = identity(switch.outputs[1], name="switch_t")
        switch_f = identity(switch.outputs[0], name="switch_f")
        pred_id = identity(pred, name="pred_id")
        true_value = _branch(g, true_fn, switch_t, pred_id, taken=1)
        false_value = _branch(g, false_fn, switch_f, pred_id, taken=0)
        return g.create_op("Merge", [false_value, true_value], {"N": 2}, name="Merge").outputs[0]


def _branch(g, fn, guard, pred_id, taken):
    """Builds one branch: its new ops depend on the branch's guard; a value from outside the
    branch goes through a Switch on the predicate, so an untaken branch yields a dead value."""
    first_new = len(g._order)
    with g.control_dependencies([guard.op]):
        value = fn()
        if not isinstance(value, Tensor):
            value = constant(value, name="Const")
    if value.op not in g._order[first_new:]:
        value = g.create_op("Switch", [value, pred_id], name="Switch").outputs[taken]
    return value
