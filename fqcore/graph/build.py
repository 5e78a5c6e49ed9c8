"""Functions that add ops to the default graph, named and shaped as TF1's (tf.add, tf.nn.conv2d...)."""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

from .core import Operation, Tensor, get_default_graph

if TYPE_CHECKING:
    from .type_aliases import OpLike, TensorLike, Window


def _graph():
    return get_default_graph()


def _op(op_type, inputs, attrs=None, name=None, **kwargs):
    return _graph().create_op(op_type, inputs, attrs, name=name, **kwargs)


def constant(value: npt.ArrayLike, dtype: Optional[npt.DTypeLike] = None,
             name: str = "Const") -> Tensor:
    """A Const op holding `value` (read-only); Python floats become float32 and ints int32, as in
    TF.

    Parameters
    ----------
    value : array_like
        The value.
    dtype : str or numpy.dtype, optional
        The element type (default: from `value`, float64 narrowed to float32 and Python ints
        to int32).
    name : str, optional
        The op's name in the current name scope (made unique; default ``Const``).

    Returns
    -------
    Tensor
        The Const's output.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     c = G.constant([1.5, 2.0])
    >>> c.dtype, G.Session(g).run(c)
    (dtype('float32'), array([1.5, 2. ], dtype=float32))
    """
    array = np.asarray(value, dtype=dtype)
    if dtype is None:
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        elif array.dtype == np.int64 and not isinstance(value, np.ndarray):
            array = array.astype(np.int32)
    array = array.copy()
    array.setflags(write=False)
    return _op("Const", [], {"value": array, "dtype": array.dtype.name}, name=name).outputs[0]


def placeholder(dtype: npt.DTypeLike = "float32",
                shape: Optional[Sequence[Optional[int]]] = None,
                name: str = "Placeholder") -> Tensor:
    """A Placeholder: a graph input that each ``Session.run`` feeds.

    Parameters
    ----------
    dtype : str or numpy.dtype, default "float32"
        The element type of what is fed.
    shape : list of int or None, optional
        The shape, None entries for any size (None: any shape).
    name : str, optional
        The op's name in the current name scope (made unique; default ``Placeholder``).

    Returns
    -------
    Tensor
        The placeholder's output: the key of ``feed_dict``.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     images = G.placeholder("float32", [None, 8, 8, 1], name="images")
    >>> images
    <Tensor 'images:0' shape=(None, 8, 8, 1) dtype=float32>
    >>> G.Session(g).run(images, {images: [[[[1.0]] * 8] * 8]}).shape
    (1, 8, 8, 1)
    """
    attrs = {"dtype": np.dtype(dtype).name, "shape": None if shape is None else list(shape)}
    return _op("Placeholder", [], attrs, name=name).outputs[0]


def identity(x: TensorLike, name: str = "Identity") -> Tensor:
    """`x` unchanged: a Identity op.

    Parameters
    ----------
    x : Tensor
        The input.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Identity``).

    Returns
    -------
    Tensor
        The op's output, of the input's shape and dtype.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None], name="x")
    ...     y = G.identity(x)
    >>> G.Session(g).run(y, {x: [1.0, -2.0]})
    array([ 1., -2.], dtype=float32)
    """
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


def add(x: TensorLike, y: TensorLike, name: Optional[str] = None) -> Tensor:
    """``x + y``: an AddV2 op (TF's ``tf.add``).

    Parameters
    ----------
    x, y : Tensor or array_like
        The operands, broadcast as numpy does. A value that is not a tensor becomes a Const
        named ``<op>/x`` or ``<op>/y``, of the other operand's dtype.
    name : str, optional
        The op's name in the current name scope (made unique; default ``add``).

    Returns
    -------
    Tensor
        The op's output.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [2], name="x")
    ...     y = G.add(x, 1.0)
    >>> y.op.type
    'AddV2'
    >>> G.Session(g).run(y, {x: [1.0, 2.0]})
    array([2., 3.], dtype=float32)
    """
    return _binary("AddV2", "add", x, y, name)


def subtract(x: TensorLike, y: TensorLike, name: Optional[str] = None) -> Tensor:
    """``x - y``: a Sub op (TF's ``tf.subtract``).

    Parameters
    ----------
    x, y : Tensor or array_like
        The operands, broadcast as numpy does. A value that is not a tensor becomes a Const
        named ``<op>/x`` or ``<op>/y``, of the other operand's dtype.
    name : str, optional
        The op's name in the current name scope (made unique; default ``sub``).

    Returns
    -------
    Tensor
        The op's output.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [2], name="x")
    ...     y = G.subtract(x, 1.0)
    >>> y.op.type
    'Sub'
    >>> G.Session(g).run(y, {x: [1.0, 2.0]})
    array([0., 1.], dtype=float32)
    """
    return _binary("Sub", "sub", x, y, name)


def multiply(x: TensorLike, y: TensorLike, name: Optional[str] = None) -> Tensor:
    """``x * y``: a Mul op (TF's ``tf.multiply``).

    Parameters
    ----------
    x, y : Tensor or array_like
        The operands, broadcast as numpy does. A value that is not a tensor becomes a Const
        named ``<op>/x`` or ``<op>/y``, of the other operand's dtype.
    name : str, optional
        The op's name in the current name scope (made unique; default ``mul``).

    Returns
    -------
    Tensor
        The op's output.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [2], name="x")
    ...     y = G.multiply(x, 3.0)
    >>> y.op.type
    'Mul'
    >>> G.Session(g).run(y, {x: [1.0, 2.0]})
    array([3., 6.], dtype=float32)
    """
    return _binary("Mul", "mul", x, y, name)


def divide(x: TensorLike, y: TensorLike, name: Optional[str] = None) -> Tensor:
    """``x / y``: a RealDiv op (TF's ``tf.divide``).

    Parameters
    ----------
    x, y : Tensor or array_like
        The operands, broadcast as numpy does. A value that is not a tensor becomes a Const
        named ``<op>/x`` or ``<op>/y``, of the other operand's dtype.
    name : str, optional
        The op's name in the current name scope (made unique; default ``truediv``).

    Returns
    -------
    Tensor
        The op's output.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [2], name="x")
    ...     y = G.divide(x, 4.0)
    >>> y.op.type
    'RealDiv'
    >>> G.Session(g).run(y, {x: [1.0, 2.0]})
    array([0.25, 0.5 ], dtype=float32)
    """
    return _binary("RealDiv", "truediv", x, y, name)


def pow(x, y, name=None):
    return _binary("Pow", "Pow", x, y, name)


def minimum(x: TensorLike, y: TensorLike, name: Optional[str] = None) -> Tensor:
    """``min(x, y)``: a Minimum op (TF's ``tf.minimum``).

    Parameters
    ----------
    x, y : Tensor or array_like
        The operands, broadcast as numpy does. A value that is not a tensor becomes a Const
        named ``<op>/x`` or ``<op>/y``, of the other operand's dtype.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Minimum``).

    Returns
    -------
    Tensor
        The op's output.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [2], name="x")
    ...     y = G.minimum(x, 1.5)
    >>> y.op.type
    'Minimum'
    >>> G.Session(g).run(y, {x: [1.0, 2.0]})
    array([1. , 1.5], dtype=float32)
    """
    return _binary("Minimum", "Minimum", x, y, name)


def maximum(x: TensorLike, y: TensorLike, name: Optional[str] = None) -> Tensor:
    """``max(x, y)``: a Maximum op (TF's ``tf.maximum``).

    Parameters
    ----------
    x, y : Tensor or array_like
        The operands, broadcast as numpy does. A value that is not a tensor becomes a Const
        named ``<op>/x`` or ``<op>/y``, of the other operand's dtype.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Maximum``).

    Returns
    -------
    Tensor
        The op's output.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [2], name="x")
    ...     y = G.maximum(x, 1.5)
    >>> y.op.type
    'Maximum'
    >>> G.Session(g).run(y, {x: [1.0, 2.0]})
    array([1.5, 2. ], dtype=float32)
    """
    return _binary("Maximum", "Maximum", x, y, name)


def greater_equal(x, y, name=None):
    return _binary("GreaterEqual", "GreaterEqual", x, y, name)


def squared_difference(x, y, name="SquaredDifference"):
    return _binary("SquaredDifference", "SquaredDifference", x, y, name)


def reciprocal(x, name="Reciprocal"):
    return _op("Reciprocal", [x], name=name).outputs[0]


def rsqrt(x: TensorLike, name: str = "Rsqrt") -> Tensor:
    """``1 / sqrt(x)``: a Rsqrt op.

    Parameters
    ----------
    x : Tensor
        The input.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Rsqrt``).

    Returns
    -------
    Tensor
        The op's output, of the input's shape and dtype.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None], name="x")
    ...     y = G.rsqrt(x)
    >>> G.Session(g).run(y, {x: [4.0, 0.25]})
    array([0.5, 2. ], dtype=float32)
    """
    return _op("Rsqrt", [x], name=name).outputs[0]


def cast(x: TensorLike, dtype: npt.DTypeLike, name: str = "Cast") -> Tensor:
    """`x` converted to `dtype`: a Cast op.

    Parameters
    ----------
    x : Tensor
        The input.
    dtype : str or numpy.dtype
        The new element type.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Cast``).

    Returns
    -------
    Tensor
        The converted values.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     labels = G.placeholder("int32", [None], name="labels")
    ...     y = G.cast(labels, "float32")
    >>> G.Session(g).run(y, {labels: [1, 2]})
    array([1., 2.], dtype=float32)
    """
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


def reshape(x: TensorLike, shape: Sequence[int], name: str = "Reshape") -> Tensor:
    """`x` with a new shape: a Reshape op (its shape a Const ``<name>/shape``).

    Parameters
    ----------
    x : Tensor
        The input.
    shape : list of int
        The new shape; one entry may be -1 (whatever is left).
    name : str, optional
        The op's name in the current name scope (made unique; default ``Reshape``).

    Returns
    -------
    Tensor
        The same values in the new shape.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 2, 2], name="x")
    ...     y = G.reshape(x, [-1, 4])
    >>> G.Session(g).run(y, {x: [[[1.0, 2.0], [3.0, 4.0]]]})
    array([[1., 2., 3., 4.]], dtype=float32)
    """
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


def reduce_mean(x: Tensor, axis: Optional[Union[int, Sequence[int]]] = None,
                keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """The mean over `axis`: a Mean op (TF's ``tf.reduce_mean``).

    Parameters
    ----------
    x : Tensor
        The input.
    axis : int or list of int, optional
        The axes to reduce (None: every axis; when the rank is unknown, at run time through Rank
        and Range, as TF builds it).
    keepdims : bool, default False
        Keep the reduced axes with size 1.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Mean``).

    Returns
    -------
    Tensor
        The reduced values.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [2, 2], name="x")
    ...     y = G.reduce_mean(x, axis=0)
    >>> G.Session(g).run(y, {x: [[1.0, 2.0], [3.0, 6.0]]})
    array([2., 4.], dtype=float32)
    """
    return _reduce("Mean", "Mean", x, axis, keepdims, name)


def reduce_sum(x: Tensor, axis: Optional[Union[int, Sequence[int]]] = None,
               keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """The sum over `axis`: a Sum op (TF's ``tf.reduce_sum``).

    Parameters
    ----------
    x : Tensor
        The input.
    axis : int or list of int, optional
        The axes to reduce (None: every axis; when the rank is unknown, at run time through Rank
        and Range, as TF builds it).
    keepdims : bool, default False
        Keep the reduced axes with size 1.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Sum``).

    Returns
    -------
    Tensor
        The reduced values.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [2, 2], name="x")
    ...     y = G.reduce_sum(x, axis=0)
    >>> G.Session(g).run(y, {x: [[1.0, 2.0], [3.0, 6.0]]})
    array([4., 8.], dtype=float32)
    """
    return _reduce("Sum", "Sum", x, axis, keepdims, name)


def reduce_min(x: Tensor, axis: Optional[Union[int, Sequence[int]]] = None,
               keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """The minimum over `axis`: a Min op (TF's ``tf.reduce_min``).

    Parameters
    ----------
    x : Tensor
        The input.
    axis : int or list of int, optional
        The axes to reduce (None: every axis; when the rank is unknown, at run time through Rank
        and Range, as TF builds it).
    keepdims : bool, default False
        Keep the reduced axes with size 1.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Min``).

    Returns
    -------
    Tensor
        The reduced values.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [2, 2], name="x")
    ...     y = G.reduce_min(x, axis=0)
    >>> G.Session(g).run(y, {x: [[1.0, 2.0], [3.0, 6.0]]})
    array([1., 2.], dtype=float32)
    """
    return _reduce("Min", "Min", x, axis, keepdims, name)


def reduce_max(x: Tensor, axis: Optional[Union[int, Sequence[int]]] = None,
               keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """The maximum over `axis`: a Max op (TF's ``tf.reduce_max``).

    Parameters
    ----------
    x : Tensor
        The input.
    axis : int or list of int, optional
        The axes to reduce (None: every axis; when the rank is unknown, at run time through Rank
        and Range, as TF builds it).
    keepdims : bool, default False
        Keep the reduced axes with size 1.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Max``).

    Returns
    -------
    Tensor
        The reduced values.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [2, 2], name="x")
    ...     y = G.reduce_max(x, axis=0)
    >>> G.Session(g).run(y, {x: [[1.0, 2.0], [3.0, 6.0]]})
    array([3., 6.], dtype=float32)
    """
    return _reduce("Max", "Max", x, axis, keepdims, name)


def matmul(a: TensorLike, b: TensorLike, transpose_a: bool = False,
           transpose_b: bool = False, name: str = "MatMul") -> Tensor:
    """The matrix product ``a @ b``: a MatMul op (on numpy's BLAS).

    Parameters
    ----------
    a, b : Tensor
        Matrices, ``[m, k]`` and ``[k, n]`` (after the transposes).
    transpose_a, transpose_b : bool, default False
        Multiply by the transpose.
    name : str, optional
        The op's name in the current name scope (made unique; default ``MatMul``).

    Returns
    -------
    Tensor
        ``[m, n]``.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 2], name="x")
    ...     y = G.matmul(x, G.constant([[1.0], [10.0]]))
    >>> G.Session(g).run(y, {x: [[1.0, 2.0]]})
    array([[21.]], dtype=float32)
    """
    return _op("MatMul", [a, b], {"transpose_a": bool(transpose_a),
                                  "transpose_b": bool(transpose_b)}, name=name).outputs[0]


def bias_add(x: TensorLike, bias: TensorLike, name: str = "BiasAdd") -> Tensor:
    """``x + bias`` along the last axis (NHWC): a BiasAdd op.

    Parameters
    ----------
    x : Tensor
        The input, channels last.
    bias : Tensor
        One value per channel.
    name : str, optional
        The op's name in the current name scope (made unique; default ``BiasAdd``).

    Returns
    -------
    Tensor
        The shifted values.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 2], name="x")
    ...     y = G.bias_add(x, G.constant([1.0, -1.0]))
    >>> G.Session(g).run(y, {x: [[1.0, 2.0]]})
    array([[2., 1.]], dtype=float32)
    """
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


def conv2d(x: TensorLike, filters: TensorLike, strides: Window = 1, padding: str = "SAME",
           dilations: Window = 1, name: str = "Conv2D") -> Tensor:
    """A 2-D convolution: a Conv2D op (NHWC).

    Parameters
    ----------
    x : Tensor
        float32 ``[batch, height, width, in_channels]``.
    filters : Tensor
        ``[height, width, in_channels, out_channels]``.
    strides : int, (int, int) or [1, h, w, 1], default 1
        The step of the window.
    padding : {"SAME", "VALID"}, default "SAME"
        TF's padding rule.
    dilations : int, (int, int) or [1, h, w, 1], default 1
        The spacing of the filter taps.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Conv2D``).

    Returns
    -------
    Tensor
        ``[batch, out_height, out_width, out_channels]``.

    Raises
    ------
    ValueError
        A stride or dilation that is not positive, an unknown padding.

    Examples
    --------
    >>> import numpy as np
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [1, 3, 3, 1], name="x")
    ...     y = G.conv2d(x, G.constant(np.ones((3, 3, 1, 1), np.float32)), padding="VALID")
    >>> G.Session(g).run(y, {x: np.arange(9, dtype=np.float32).reshape(1, 3, 3, 1)}).ravel()
    array([36.], dtype=float32)
    """
    attrs = {"strides": _four(strides, "strides"), "padding": _padding(padding),
             "dilations": _four(dilations, "dilations"), "data_format": "NHWC"}
    return _op("Conv2D", [x, filters], attrs, name=name).outputs[0]


def depthwise_conv2d(x: TensorLike, filters: TensorLike, strides: Window = 1,
                     padding: str = "SAME", dilations: Window = 1,
                     name: str = "DepthwiseConv2dNative") -> Tensor:
    """A depthwise 2-D convolution: a DepthwiseConv2dNative op (NHWC).

    Parameters
    ----------
    x : Tensor
        float32 ``[batch, height, width, in_channels]``.
    filters : Tensor
        ``[height, width, in_channels, multiplier]``: each input channel
        convolved alone, into `multiplier` output channels.
    strides : int, (int, int) or [1, h, w, 1], default 1
        The step of the window.
    padding : {"SAME", "VALID"}, default "SAME"
        TF's padding rule.
    dilations : int, (int, int) or [1, h, w, 1], default 1
        The spacing of the filter taps.
    name : str, optional
        The op's name in the current name scope (made unique; default ``DepthwiseConv2dNative``).

    Returns
    -------
    Tensor
        ``[batch, out_height, out_width, in_channels * multiplier]``.

    Raises
    ------
    ValueError
        A stride or dilation that is not positive, an unknown padding.

    Examples
    --------
    >>> import numpy as np
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [1, 3, 3, 1], name="x")
    ...     kernel = G.constant(np.ones((3, 3, 1, 1), np.float32))
    ...     y = G.depthwise_conv2d(x, kernel, padding="VALID")
    >>> G.Session(g).run(y, {x: np.arange(9, dtype=np.float32).reshape(1, 3, 3, 1)}).ravel()
    array([36.], dtype=float32)
    """
    attrs = {"strides": _four(strides, "strides"), "padding": _padding(padding),
             "dilations": _four(dilations, "dilations"), "data_format": "NHWC"}
    return _op("DepthwiseConv2dNative", [x, filters], attrs, name=name).outputs[0]


def max_pool(x: TensorLike, ksize: Window, strides: Window, padding: str = "VALID",
             name: str = "MaxPool") -> Tensor:
    """The maximum of each window: a MaxPool op over NHWC windows.

    Parameters
    ----------
    x : Tensor
        float32 ``[batch, height, width, channels]``.
    ksize, strides : int, (int, int) or [1, h, w, 1]
        The window and its step.
    padding : {"VALID", "SAME"}, default "VALID"
        TF's padding rule.
    name : str, optional
        The op's name in the current name scope (made unique; default ``MaxPool``).

    Returns
    -------
    Tensor
        The pooled values.

    Raises
    ------
    ValueError
        A window or stride that is not positive, an unknown padding.

    Examples
    --------
    >>> import numpy as np
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [1, 2, 2, 1], name="x")
    ...     y = G.max_pool(x, ksize=2, strides=2)
    >>> G.Session(g).run(y, {x: np.array([1, 2, 3, 6], np.float32).reshape(1, 2, 2, 1)}).ravel()
    array([6.], dtype=float32)
    """
    attrs = {"ksize": _four(ksize, "ksize"), "strides": _four(strides, "strides"),
             "padding": _padding(padding), "data_format": "NHWC"}
    return _op("MaxPool", [x], attrs, name=name).outputs[0]


def avg_pool(x: TensorLike, ksize: Window, strides: Window, padding: str = "VALID",
             name: str = "AvgPool") -> Tensor:
    """The mean of each window: a AvgPool op over NHWC windows.

    Parameters
    ----------
    x : Tensor
        float32 ``[batch, height, width, channels]``.
    ksize, strides : int, (int, int) or [1, h, w, 1]
        The window and its step.
    padding : {"VALID", "SAME"}, default "VALID"
        TF's padding rule.
    name : str, optional
        The op's name in the current name scope (made unique; default ``AvgPool``).

    Returns
    -------
    Tensor
        The pooled values.

    Raises
    ------
    ValueError
        A window or stride that is not positive, an unknown padding.

    Examples
    --------
    >>> import numpy as np
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [1, 2, 2, 1], name="x")
    ...     y = G.avg_pool(x, ksize=2, strides=2)
    >>> G.Session(g).run(y, {x: np.array([1, 2, 3, 6], np.float32).reshape(1, 2, 2, 1)}).ravel()
    array([3.], dtype=float32)
    """
    attrs = {"ksize": _four(ksize, "ksize"), "strides": _four(strides, "strides"),
             "padding": _padding(padding), "data_format": "NHWC"}
    return _op("AvgPool", [x], attrs, name=name).outputs[0]


def relu(x: TensorLike, name: str = "Relu") -> Tensor:
    """``max(x, 0)``: a Relu op.

    Parameters
    ----------
    x : Tensor
        The input.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Relu``).

    Returns
    -------
    Tensor
        The op's output, of the input's shape and dtype.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None], name="x")
    ...     y = G.relu(x)
    >>> G.Session(g).run(y, {x: [-1.0, 3.0]})
    array([0., 3.], dtype=float32)
    """
    return _op("Relu", [x], name=name).outputs[0]


def relu6(x: TensorLike, name: str = "Relu6") -> Tensor:
    """``min(max(x, 0), 6)``: a Relu6 op.

    Parameters
    ----------
    x : Tensor
        The input.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Relu6``).

    Returns
    -------
    Tensor
        The op's output, of the input's shape and dtype.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None], name="x")
    ...     y = G.relu6(x)
    >>> G.Session(g).run(y, {x: [-1.0, 3.0, 9.0]})
    array([0., 3., 6.], dtype=float32)
    """
    return _op("Relu6", [x], name=name).outputs[0]


def sigmoid(x: TensorLike, name: str = "Sigmoid") -> Tensor:
    """``1 / (1 + exp(-x))``: a Sigmoid op.

    Parameters
    ----------
    x : Tensor
        The input.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Sigmoid``).

    Returns
    -------
    Tensor
        The op's output, of the input's shape and dtype.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None], name="x")
    ...     y = G.sigmoid(x)
    >>> G.Session(g).run(y, {x: [0.0]})
    array([0.5], dtype=float32)
    """
    return _op("Sigmoid", [x], name=name).outputs[0]


def tanh(x: TensorLike, name: str = "Tanh") -> Tensor:
    """The hyperbolic tangent: a Tanh op.

    Parameters
    ----------
    x : Tensor
        The input.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Tanh``).

    Returns
    -------
    Tensor
        The op's output, of the input's shape and dtype.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None], name="x")
    ...     y = G.tanh(x)
    >>> G.Session(g).run(y, {x: [0.0]})
    array([0.], dtype=float32)
    """
    return _op("Tanh", [x], name=name).outputs[0]


def softmax(logits: TensorLike, name: str = "Softmax") -> Tensor:
    """``exp(x) / sum(exp(x))`` over the last axis: a Softmax op.

    Parameters
    ----------
    logits : Tensor
        The input.
    name : str, optional
        The op's name in the current name scope (made unique; default ``Softmax``).

    Returns
    -------
    Tensor
        The op's output, of the input's shape and dtype.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 2], name="x")
    ...     y = G.softmax(x)
    >>> G.Session(g).run(y, {x: [[0.0, 0.0]]})
    array([[0.5, 0.5]], dtype=float32)
    """
    return _op("Softmax", [logits], name=name).outputs[0]


def sparse_softmax_cross_entropy_with_logits(labels: TensorLike, logits: TensorLike,
                                             name: str = "xent") -> Tensor:
    """The cross entropy of each row's softmax with its integer label: a
    SparseSoftmaxCrossEntropyWithLogits op (its gradient included).

    Parameters
    ----------
    labels : Tensor
        int32 ``[batch]``: class indices.
    logits : Tensor
        float32 ``[batch, classes]``.
    name : str, optional
        The op's name in the current name scope (made unique; default ``xent``).

    Returns
    -------
    Tensor
        float32 ``[batch]``: each row's loss.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     logits = G.placeholder("float32", [None, 2], name="logits")
    ...     labels = G.placeholder("int32", [None], name="labels")
    ...     loss = G.sparse_softmax_cross_entropy_with_logits(labels, logits)
    >>> G.Session(g).run(loss, {logits: [[0.0, 0.0]], labels: [1]}).round(4)   # ln 2
    array([0.6931], dtype=float32)
    """
    return _op("SparseSoftmaxCrossEntropyWithLogits", [logits, labels],
               name=name).outputs[0]


def fused_batch_norm(x: TensorLike, scale: TensorLike, offset: TensorLike, mean: TensorLike,
                     variance: TensorLike, epsilon: float = 1e-3, is_training: bool = True,
                     exponential_avg_factor: float = 1.0,
                     name: str = "FusedBatchNormV3") -> List[Tensor]:
    """Batch normalization, NHWC: a FusedBatchNormV3 op (on :func:`fqcore.fused_batch_norm`).

    Parameters
    ----------
    x : Tensor
        float32 ``[batch, height, width, channels]``.
    scale, offset : Tensor
        One value per channel.
    mean, variance : Tensor
        The population statistics, one per channel (read in inference, and in training when
        ``exponential_avg_factor != 1``).
    epsilon : float, default 1e-3
        Added to the variance.
    is_training : bool, default True
        Normalize with the batch's statistics.
    exponential_avg_factor : float, default 1.0
        The batch's weight in the running estimates the op outputs.
    name : str, optional
        The op's name in the current name scope (made unique; default ``FusedBatchNormV3``).

    Returns
    -------
    list of Tensor
        ``y``, batch mean, batch variance (Bessel-corrected), and the reserve spaces, as TF's op.

    Examples
    --------
    >>> import numpy as np
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [2, 1, 1, 1], name="x")
    ...     one, zero = G.constant([1.0]), G.constant([0.0])
    ...     outputs = G.fused_batch_norm(x, one, zero, zero, one)
    >>> feed = {x: np.array([1, 3], np.float32).reshape(2, 1, 1, 1)}
    >>> y, batch_mean = G.Session(g).run(outputs[:2], feed)
    >>> y.ravel().round(4), batch_mean       # (x - 2) / sqrt(1 + 1e-3)
    (array([-0.9995,  0.9995], dtype=float32), array([2.], dtype=float32))
    """
    attrs = {"epsilon": float(np.float32(epsilon)), "is_training": bool(is_training),
             "exponential_avg_factor": float(exponential_avg_factor), "data_format": "NHWC"}
    return _op("FusedBatchNormV3", [x, scale, offset, mean, variance], attrs, name=name).outputs


def fake_quant_with_min_max_vars(x: TensorLike, min: TensorLike, max: TensorLike,
                                 num_bits: int = 8, narrow_range: bool = False,
                                 name: str = "FakeQuantWithMinMaxVars") -> Tensor:
    """Fake quantization to the range held by scalar tensors: a FakeQuantWithMinMaxVars op
    (on :func:`fqcore.fake_quant_with_min_max_vars`, gradient included).

    Parameters
    ----------
    x : Tensor
        float32, any shape.
    min, max : Tensor
        float32 scalars, usually variables.
    num_bits : int, default 8
        Bits of the grid, 2 to 16.
    narrow_range : bool, default False
        Leave out the lowest grid point.
    name : str, optional
        The op's name in the current name scope (made unique; default ``FakeQuantWithMinMaxVars``).

    Returns
    -------
    Tensor
        The fake-quantized values.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None], name="x")
    ...     y = G.fake_quant_with_min_max_vars(x, G.constant(0.0), G.constant(3.0), num_bits=2)
    >>> G.Session(g).run(y, {x: [-1.0, 1.4, 7.0]})
    array([0., 1., 3.], dtype=float32)
    """
    attrs = {"num_bits": int(num_bits), "narrow_range": bool(narrow_range)}
    return _op("FakeQuantWithMinMaxVars", [x, min, max], attrs, name=name).outputs[0]


def fake_quant_with_min_max_vars_per_channel(x: TensorLike, min: TensorLike, max: TensorLike,
                                             num_bits: int = 8, narrow_range: bool = False,
                                             name: str = "FakeQuantWithMinMaxVarsPerChannel"
                                             ) -> Tensor:
    """Fake quantization with a range per channel of the last axis: a
    FakeQuantWithMinMaxVarsPerChannel op (on
    :func:`fqcore.fake_quant_with_min_max_vars_per_channel`).

    Parameters
    ----------
    x : Tensor
        float32, the channels last.
    min, max : Tensor
        float32 vectors, one value per channel.
    num_bits : int, default 8
        Bits of the grid, 2 to 16.
    narrow_range : bool, default False
        Leave out the lowest grid point.
    name : str, optional
        The op's name in the current name scope (made unique; default
        ``FakeQuantWithMinMaxVarsPerChannel``).

    Returns
    -------
    Tensor
        The fake-quantized values.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None, 2], name="x")
    ...     y = G.fake_quant_with_min_max_vars_per_channel(
    ...         x, G.constant([0.0, 0.0]), G.constant([3.0, 6.0]), num_bits=2)
    >>> G.Session(g).run(y, {x: [[1.4, 3.1]]})
    array([[1., 4.]], dtype=float32)
    """
    attrs = {"num_bits": int(num_bits), "narrow_range": bool(narrow_range)}
    return _op("FakeQuantWithMinMaxVarsPerChannel", [x, min, max], attrs, name=name).outputs[0]


def fake_quant_with_min_max_args(x: TensorLike, min: float = -6.0, max: float = 6.0,
                                 num_bits: int = 8, narrow_range: bool = False,
                                 name: str = "FakeQuantWithMinMaxArgs") -> Tensor:
    """Fake quantization to a fixed range: a FakeQuantWithMinMaxArgs op (on
    :func:`fqcore.fake_quant_with_min_max_args`). The usual way to give a model's input its range.

    Parameters
    ----------
    x : Tensor
        float32, any shape.
    min, max : float
        The range, default [-6, 6] (op attributes).
    num_bits : int, default 8
        Bits of the grid, 2 to 16.
    narrow_range : bool, default False
        Leave out the lowest grid point.
    name : str, optional
        The op's name in the current name scope (made unique; default ``FakeQuantWithMinMaxArgs``).

    Returns
    -------
    Tensor
        The fake-quantized values.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     x = G.placeholder("float32", [None], name="x")
    ...     y = G.fake_quant_with_min_max_args(x, min=0.0, max=255.0)
    >>> G.Session(g).run(y, {x: [-3.0, 0.5, 300.0]})
    array([  0.,   1., 255.], dtype=float32)
    """
    attrs = {"min": float(min), "max": float(max), "num_bits": int(num_bits),
             "narrow_range": bool(narrow_range)}
    return _op("FakeQuantWithMinMaxArgs", [x], attrs, name=name).outputs[0]


def no_op(name: str = "NoOp", control_inputs: Sequence[OpLike] = ()) -> Operation:
    """An op that does nothing but wait for its control inputs: a NoOp.

    Parameters
    ----------
    name : str, optional
        The op's name in the current name scope (made unique; default ``NoOp``).
    control_inputs : sequence of Operation or Tensor, default ()
        What must run before it.

    Returns
    -------
    Operation
        The NoOp; fetching it runs its control inputs.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     nothing = G.no_op()
    >>> nothing.type, G.Session(g).run(nothing) is None
    ('NoOp', True)
    """
    return _op("NoOp", [], name=name, control_inputs=control_inputs)


def group(*ops: OpLike, name: str = "group_deps") -> Operation:
    """One op that runs all `ops` (TF's ``tf.group``): a NoOp with them as control inputs.

    Parameters
    ----------
    *ops : Operation or Tensor
        What to run.
    name : str, default "group_deps"
        The op's name.

    Returns
    -------
    Operation
        Fetching it runs every one of `ops`.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     a = G.variable("a", 1.0)
    ...     b = G.variable("b", 2.0)
    ...     both = G.group(a.initializer, b.initializer, name="init_both")
    >>> session = G.Session(g)
    >>> session.run(both)
    >>> float(session.variable_value("a")), float(session.variable_value("b"))
    (1.0, 2.0)
    """
    return no_op(name=name, control_inputs=ops)


def cond(pred: Union[Tensor, bool], true_fn: Callable[[], Any], false_fn: Callable[[], Any],
         name: str = "cond") -> Any:
    """TF1's ``cond`` as Switch / Merge: only the taken branch's ops run.

    Like contrib's smart_cond, a Python bool picks the branch when the graph is built. Names and
    wiring follow TF: Switch, switch_t, switch_f, pred_id, a Switch_<k> per outside value, Merge.

    Parameters
    ----------
    pred : Tensor or bool
        A boolean scalar tensor, or a Python bool.
    true_fn, false_fn : callable
        Build each branch's ops and return its value (a Tensor, or a value made a Const).
    name : str, default "cond"
        The name scope of the ops.

    Returns
    -------
    Tensor
        The Merge output: the taken branch's value.

    Examples
    --------
    >>> import fqcore.graph as G
    >>> g = G.Graph()
    >>> with g.as_default():
    ...     flag = G.placeholder("bool", [], name="flag")
    ...     x = G.placeholder("float32", [None], name="x")
    ...     y = G.cond(flag, lambda: G.multiply(x, 2.0), lambda: G.identity(x))
    >>> session = G.Session(g)
    >>> session.run(y, {flag: True, x: [1.0]}), session.run(y, {flag: False, x: [1.0]})
    (array([2.], dtype=float32), array([1.], dtype=float32))
    """
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
