"""fqcore.graph's SpaceToBatchND, BatchToSpaceND, Squeeze, StopGradient, SquaredDifference, Rank
and Range, and reductions over every axis of a tensor of unknown rank: values against loop models
written from TF's documentation, static shapes, names, gradients and the errors."""
import re

import numpy as np
import pytest

import fqcore.graph as G
from fqcore.graph import build
from test_graph_gradients import _distinct, _rng, finite_differences, gradients, weighted_sum

F64 = np.float64


# ---------------------------------------------------------------------------------------------------
# Loop models of TF's definitions. The block dims go in front of the batch, so output batch entry
# b_out holds input batch b_out % batch at the block offset unravel(b_out // batch, block_shape);
# output position i of block dim k reads padded position i * block[k] + offset[k].

def space_to_batch_model(x, block, paddings):
    m, batch = len(block), x.shape[0]
    spatial = [(x.shape[1 + k] + sum(paddings[k])) // block[k] for k in range(m)]
    out = np.zeros([batch * int(np.prod(block))] + spatial + list(x.shape[1 + m:]), x.dtype)
    for b_out in range(out.shape[0]):
        offset, b_in = divmod(b_out, batch)
        offsets = np.unravel_index(offset, block)
        for pos in np.ndindex(*spatial):
            src = [pos[k] * block[k] + offsets[k] - paddings[k][0] for k in range(m)]
            if all(0 <= src[k] < x.shape[1 + k] for k in range(m)):
                out[(b_out,) + pos] = x[(b_in,) + tuple(src)]
    return out


def batch_to_space_model(x, block, crops):
    m = len(block)
    batch = x.shape[0] // int(np.prod(block))
    spatial = [x.shape[1 + k] * block[k] - sum(crops[k]) for k in range(m)]
    out = np.zeros([batch] + spatial + list(x.shape[1 + m:]), x.dtype)
    for b_in in range(x.shape[0]):
        offset, b_out = divmod(b_in, batch)
        offsets = np.unravel_index(offset, block)
        for pos in np.ndindex(*x.shape[1:1 + m]):
            dst = [pos[k] * block[k] + offsets[k] - crops[k][0] for k in range(m)]
            if all(0 <= dst[k] < spatial[k] for k in range(m)):
                out[(b_out,) + tuple(dst)] = x[(b_in,) + pos]
    return out


def run(out, feeds=None, g=None):
    return G.Session(g or out.graph).run(out, feeds or {})


# ---------------------------------------------------------------------------------------------------
# The examples of TF's docs for tf.space_to_batch_nd and tf.batch_to_space_nd, written out:
# (space, block_shape, paddings = crops, batch).

DOC_EXAMPLES = [
    ([[[[1], [2]], [[3], [4]]]], [2, 2], [[0, 0], [0, 0]],
     [[[[1]]], [[[2]]], [[[3]]], [[[4]]]]),
    ([[[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]]]], [2, 2], [[0, 0], [0, 0]],
     [[[[1, 2, 3]]], [[[4, 5, 6]]], [[[7, 8, 9]]], [[[10, 11, 12]]]]),
    ([[[[1], [2], [3], [4]], [[5], [6], [7], [8]], [[9], [10], [11], [12]],
       [[13], [14], [15], [16]]]], [2, 2], [[0, 0], [0, 0]],
     [[[[1], [3]], [[9], [11]]], [[[2], [4]], [[10], [12]]],
      [[[5], [7]], [[13], [15]]], [[[6], [8]], [[14], [16]]]]),
    ([[[[1], [2], [3], [4]], [[5], [6], [7], [8]]],
      [[[9], [10], [11], [12]], [[13], [14], [15], [16]]]], [2, 2], [[0, 0], [2, 0]],
     [[[[0], [1], [3]]], [[[0], [9], [11]]], [[[0], [2], [4]]], [[[0], [10], [12]]],
      [[[0], [5], [7]]], [[[0], [13], [15]]], [[[0], [6], [8]]], [[[0], [14], [16]]]]),
]


@pytest.mark.parametrize("space,block,pairs,batch", DOC_EXAMPLES)
def test_tf_documentation_examples(space, block, pairs, batch):
    space, batch = np.array(space, np.float32), np.array(batch, np.float32)
    g = G.Graph()
    with g.as_default():
        to_batch = build.space_to_batch_nd(G.constant(space), block, pairs)
        to_space = build.batch_to_space_nd(G.constant(batch), block, pairs)
    assert to_batch.shape == batch.shape and to_space.shape == space.shape
    s = G.Session(g)
    np.testing.assert_array_equal(s.run(to_batch), batch)
    np.testing.assert_array_equal(s.run(to_space), space)
    np.testing.assert_array_equal(space_to_batch_model(space, block, pairs), batch)
    np.testing.assert_array_equal(batch_to_space_model(batch, block, pairs), space)


# (input shape, block_shape, paddings): one, two and three block dims, trailing dims, blocks of 1.
LAYOUTS = [
    ((2, 6, 3), [3], [[0, 0]]),
    ((1, 5, 2), [2], [[2, 1]]),
    ((2, 3, 5, 2), [2, 3], [[1, 0], [0, 1]]),
    ((3, 4, 4, 1), [1, 2], [[0, 0], [1, 1]]),
    ((1, 2, 3, 2, 2), [2, 1, 2], [[0, 2], [0, 0], [1, 1]]),
    ((2, 3, 2), [], np.zeros((0, 2), np.int32)),
]


@pytest.mark.parametrize("shape,block,paddings", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_values_match_the_loop_models(shape, block, paddings, dtype):
    x = (_rng(f"{shape}{block}").standard_normal(shape) * 10).astype(dtype)
    g = G.Graph()
    with g.as_default():
        px = G.placeholder(dtype, shape, name="x")
        to_batch = build.space_to_batch_nd(px, block, paddings)
        back = build.batch_to_space_nd(to_batch, block, paddings)
    expected = space_to_batch_model(x, block, np.asarray(paddings).tolist())
    s = G.Session(g)
    got, round_trip = s.run([to_batch, back], {px: x})
    assert to_batch.shape == expected.shape and got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(round_trip, x)
    np.testing.assert_array_equal(batch_to_space_model(expected, block, np.asarray(
        paddings).tolist()), x)


@pytest.mark.parametrize("shape,block,crops", [((6, 2, 3), [3], [[1, 2]]),
                                               ((8, 2, 3, 1), [2, 2], [[0, 1], [2, 3]]),
                                               ((4, 1, 1, 2), [2, 2], [[1, 1], [0, 2]])])
def test_batch_to_space_crops_match_the_loop_model(shape, block, crops):
    x = _rng(f"b2s{shape}").standard_normal(shape)
    g = G.Graph()
    with g.as_default():
        out = build.batch_to_space_nd(G.constant(x, dtype="float64"), block, crops)
    expected = batch_to_space_model(x, block, crops)
    assert out.shape == expected.shape
    np.testing.assert_array_equal(run(out), expected)


def test_kernels_read_block_shape_and_paddings_at_run_time():
    x = np.arange(2 * 4 * 6 * 3, dtype=np.float32).reshape(2, 4, 6, 3)
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float32", [None, 4, None, 3], name="x")
        block = G.placeholder("int32", [2], name="block")
        pairs = G.placeholder("int32", [2, 2], name="pairs")
        to_batch = build.space_to_batch_nd(px, block, pairs)
        to_space = build.batch_to_space_nd(to_batch, block, pairs)
    assert [op.type for op in g.get_operations()].count("Const") == 0
    assert to_batch.shape == (None, None, None, 3) and to_space.shape == (None, None, None, 3)
    s = G.Session(g)
    for b, p in (([2, 3], [[0, 0], [0, 0]]), ([1, 2], [[1, 1], [2, 0]])):
        feeds = {px: x, block: np.array(b, np.int32), pairs: np.array(p, np.int32)}
        got, back = s.run([to_batch, to_space], feeds)
        np.testing.assert_array_equal(got, space_to_batch_model(x, b, p))
        np.testing.assert_array_equal(back, x)


def test_static_shapes_with_unknown_dims_and_rank():
    g = G.Graph()
    with g.as_default():
        partial = G.placeholder("float32", [None, 4, None, 3], name="partial")
        to_batch = build.space_to_batch_nd(partial, [2, 2], [[0, 0], [1, 0]])
        assert to_batch.shape == (None, 2, None, 3)
        to_space = build.batch_to_space_nd(partial, [2, 2], [[1, 0], [0, 0]])
        assert to_space.shape == (None, 7, None, 3)
        known_batch = G.placeholder("float32", [8, None, 2], name="known_batch")
        assert build.space_to_batch_nd(known_batch, [2], [[0, 0]]).shape == (16, None, 2)
        assert build.batch_to_space_nd(known_batch, [2], [[0, 0]]).shape == (4, None, 2)
        unknown = G.placeholder("float32", None, name="unknown")
        assert build.space_to_batch_nd(unknown, [2, 2], [[0, 0], [0, 0]]).shape is None
        assert build.batch_to_space_nd(unknown, [2, 2], [[0, 0], [0, 0]]).shape is None
        block_of_unknown_length = G.placeholder("int32", [None], name="block")
        pairs = G.placeholder("int32", None, name="pairs")
        assert build.space_to_batch_nd(partial, block_of_unknown_length, pairs).shape == (None,) * 4


def test_names_follow_tf():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [1, 4, 4, 1], name="x")
        build.space_to_batch_nd(x, [2, 2], [[0, 0], [0, 0]])
        build.space_to_batch_nd(x, np.array([2, 2]), np.zeros((2, 2), np.int64))
        build.batch_to_space_nd(x, [1, 1], [[0, 0], [0, 0]], name="b2s")
    names = [(op.name, op.type) for op in g.get_operations()][1:]
    assert names == [
        ("SpaceToBatchND/block_shape", "Const"), ("SpaceToBatchND/paddings", "Const"),
        ("SpaceToBatchND", "SpaceToBatchND"),
        ("SpaceToBatchND_1/block_shape", "Const"), ("SpaceToBatchND_1/paddings", "Const"),
        ("SpaceToBatchND_1", "SpaceToBatchND"),
        ("b2s/block_shape", "Const"), ("b2s/crops", "Const"), ("b2s", "BatchToSpaceND")]
    for op in g.get_operations():
        if op.type == "Const":
            assert op.attrs["value"].dtype == np.int32, op.name


# ---------------------------------------------------------------------------------------------------
# Errors: at build time when the shapes and Consts say so, else at run time; each names the op
# and the bad values.

STATIC_ERRORS = [
    (build.space_to_batch_nd, (1, 5, 4, 1), [2, 2], [[0, 0], [0, 0]],
     "SpaceToBatchND: padded size 5 (size 5 + paddings [0, 0]) of dimension 1 is not divisible by "
     "block_shape[0] = 2"),
    (build.space_to_batch_nd, (1, 4, 4, 1), [2, 2], [[0, 0], [-1, 1]],
     "SpaceToBatchND: paddings must be non-negative, got [[0, 0], [-1, 1]]"),
    (build.space_to_batch_nd, (1, 4, 4, 1), [2, 0], [[0, 0], [0, 0]],
     "SpaceToBatchND: block_shape values must be >= 1, got [2, 0]"),
    (build.space_to_batch_nd, (1, 4, 4, 1), [2, 2], [[0, 0]],
     "SpaceToBatchND: paddings must have shape [2, 2] (a pair per block dimension), "
     "got shape (1, 2)"),
    (build.space_to_batch_nd, (1, 4, 4, 1), [[2, 2]], [[0, 0], [0, 0]],
     "SpaceToBatchND: block_shape must be 1-D, got shape (1, 2)"),
    (build.space_to_batch_nd, (4, 4), [2, 2], [[0, 0], [0, 0]],
     "SpaceToBatchND: input needs rank >= 3 (batch and 2 block dimensions), got rank 2"),
    (build.space_to_batch_nd, (1, 4, 4, 1), [2.5, 2], [[0, 0], [0, 0]],
     "SpaceToBatchND: block_shape must be integers, got float64 [2.5, 2.0]"),
    (build.batch_to_space_nd, (6, 2, 2, 1), [2, 2], [[0, 0], [0, 0]],
     "BatchToSpaceND: batch size 6 is not divisible by prod(block_shape) = 4 (block_shape [2, 2])"),
    (build.batch_to_space_nd, (4, 2, 2, 1), [2, 2], [[0, 0], [0, -2]],
     "BatchToSpaceND: crops must be non-negative, got [[0, 0], [0, -2]]"),
    (build.batch_to_space_nd, (4, 2, 2, 1), [2, 2], [[3, 2], [0, 0]],
     "BatchToSpaceND: crops [3, 2] of dimension 1 exceed its size 2 * block_shape[0] 2 = 4"),
    (build.batch_to_space_nd, (4, 2, 2, 1), [2, 2], [0, 0],
     "BatchToSpaceND: crops must have shape [2, 2] (a pair per block dimension), got shape (2,)"),
]


@pytest.mark.parametrize("builder,shape,block,pairs,message", STATIC_ERRORS)
def test_errors_at_build_time(builder, shape, block, pairs, message):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", shape, name="x")
        with pytest.raises(ValueError, match=re.escape(message)):
            builder(x, block, pairs)


@pytest.mark.parametrize("builder,shape,block,pairs,message", STATIC_ERRORS)
def test_errors_at_run_time(builder, shape, block, pairs, message):
    """The same checks in the kernels, with everything fed: the message names the op."""
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", None, name="x")
        b = G.placeholder(np.asarray(block).dtype, None, name="block")
        p = G.placeholder(np.asarray(pairs).dtype, None, name="pairs")
        out = builder(x, b, p, name="op")
    op_type = out.op.type
    with pytest.raises(ValueError, match=re.escape(message.replace(f"{op_type}:", "op:"))):
        run(out, {x: np.zeros(shape, np.float32), b: np.asarray(block), p: np.asarray(pairs)})


# ---------------------------------------------------------------------------------------------------
# Squeeze.

@pytest.mark.parametrize("axis,expected", [(None, (3, 2)), (0, (3, 1, 2)), ([-2], (1, 3, 2)),
                                           ([0, 2], (3, 2)), ([], (3, 2))])
def test_squeeze_values_and_shapes(axis, expected):
    x = np.arange(6, dtype=np.float32).reshape(1, 3, 1, 2)
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float32", x.shape, name="x")
        out = build.squeeze(px, axis)
    assert out.op.name == "Squeeze" and out.shape == expected
    np.testing.assert_array_equal(run(out, {px: x}), x.reshape(expected))


def test_squeeze_static_shapes_with_unknown_dims():
    g = G.Graph()
    with g.as_default():
        partial = G.placeholder("float32", [None, 1, 3], name="partial")
        assert build.squeeze(partial).shape is None  # the None may be 1: TF gives up too
        assert build.squeeze(partial, [1]).shape == (None, 3)
        assert build.squeeze(partial, [0, 1]).shape == (3,)
        unknown = build.squeeze(G.placeholder("float32", None, name="unknown"), 0)
        assert unknown.shape is None
        scalar = build.squeeze(G.placeholder("float32", [], name="scalar"))
        assert scalar.shape == ()
    s = G.Session(g)
    np.testing.assert_array_equal(s.run(unknown, {"unknown:0": np.ones((1, 2))}), np.ones(2))
    np.testing.assert_array_equal(s.run(scalar, {"scalar:0": 3.0}), 3.0)


@pytest.mark.parametrize("axis,message", [
    (1, "cannot squeeze dim 1 of shape (1, 3, 1), its size is 3, not 1"),
    ([3], "squeeze dim 3 is out of range for rank 3"),
    ([-4], "squeeze dim -4 is out of range for rank 3"),
])
def test_squeeze_errors(axis, message):
    g = G.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match=re.escape("Squeeze: " + message)):
            build.squeeze(G.placeholder("float32", [1, 3, 1], name="x"), axis)
        unknown = G.placeholder("float32", None, name="unknown")
        out = build.squeeze(unknown, axis, name="sq")
    with pytest.raises(ValueError, match=re.escape("sq: " + message)):
        run(out, {unknown: np.zeros((1, 3, 1), np.float32)})


def test_squeeze_axis_must_be_ints():
    with G.Graph().as_default():
        with pytest.raises(ValueError, match=re.escape(
                "Squeeze: axis must be None, an int or a list of ints, got [1.5]")):
            build.squeeze(G.placeholder("float32", [1, 1], name="x"), [1.5])


# ---------------------------------------------------------------------------------------------------
# StopGradient.

def test_stop_gradient_is_identity_with_no_gradient():
    x = _rng("sg").standard_normal((2, 3))
    w = _rng("sgw").standard_normal((2, 3))
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float64", [2, 3], name="x")
        stopped = build.stop_gradient(px)
        (through_stop_only,) = gradients(g, weighted_sum(stopped, w), [px])
        (product,) = gradients(g, weighted_sum(px * stopped, w), [px])
    assert stopped.op.name == "StopGradient" and stopped.shape == (2, 3)
    s = G.Session(g)
    np.testing.assert_array_equal(s.run(stopped, {px: x}), x)
    np.testing.assert_array_equal(s.run(through_stop_only, {px: x}), np.zeros((2, 3)))
    np.testing.assert_allclose(s.run(product, {px: x}), w * x, rtol=1e-15)  # not 2 w x


# ---------------------------------------------------------------------------------------------------
# SquaredDifference.

def test_squared_difference_values_names_and_broadcasting():
    x = _rng("sdx").standard_normal((3, 1)).astype(np.float32)
    y = _rng("sdy").standard_normal((1, 4)).astype(np.float32)
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float32", [3, 1], name="x")
        py = G.placeholder("float32", [1, 4], name="y")
        out = build.squared_difference(px, py)
        with_const = build.squared_difference(px, 2.0)
        named = build.squared_difference(px, py, name="sd")
    assert (out.op.name, out.shape) == ("SquaredDifference", (3, 4))
    assert [op.name for op in g.get_operations()][3:] == [
        "SquaredDifference_1/y", "SquaredDifference_1", "sd"]
    assert with_const.op.inputs[1].dtype == np.float32
    s = G.Session(g)
    got = s.run(out, {px: x, py: y})
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, (x - y) * (x - y))
    np.testing.assert_array_equal(s.run(with_const, {px: x}), (x - np.float32(2)) ** 2)
    np.testing.assert_array_equal(s.run(named, {px: x, py: y}), got)


# ---------------------------------------------------------------------------------------------------
# Rank and Range.

def test_rank_and_range():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", None, name="x")
        r = build.rank(x)
        to_rank = build.range(0, r)
        counted = build.range(5)
        stepped = build.range(10, 1, -3)
        floats = build.range(0.0, 1.0, 0.1)
        widened = build.range(np.int64(1), 4.5, 1)
    assert (r.op.name, r.shape, r.dtype) == ("Rank", (), np.int32)
    assert (to_rank.op.name, to_rank.shape, to_rank.dtype) == ("range", (None,), np.int32)
    assert counted.shape == (5,) and stepped.shape == (3,) and floats.shape == (10,)
    assert widened.dtype == np.float32 and widened.shape == (None,)  # Casts are not Consts
    assert [op.name for op in g.get_operations()][:6] == [
        "x", "Rank", "range/start", "range/delta", "range", "range_1/start"]
    assert {op.name for op in g.get_operations() if op.type == "Cast"} == {
        "range_4/Cast", "range_4/Cast_1"}
    s = G.Session(g)
    rank_value, range_value = s.run([r, to_rank], {x: np.zeros((2, 1, 3), np.float32)})
    assert rank_value == 3 and rank_value.dtype == np.int32
    np.testing.assert_array_equal(range_value, [0, 1, 2])
    assert s.run(to_rank, {x: np.float32(1)}).shape == (0,)
    np.testing.assert_array_equal(s.run(counted), np.arange(5, dtype=np.int32))
    np.testing.assert_array_equal(s.run(stepped), [10, 7, 4])
    expected = np.float32(0) + np.zeros(10, np.float32)
    for i in range(1, 10):  # TF's kernel: one float32 addition of delta per element
        expected[i] = expected[i - 1] + np.float32(0.1)
    np.testing.assert_array_equal(s.run(floats), expected)
    np.testing.assert_array_equal(s.run(widened), [1, 2, 3, 4])


@pytest.mark.parametrize("start,limit,delta,message", [
    (0, 5, 0, "delta must not be 0"),
    (5, 0, 1, "start 5 > limit 0 with delta 1 > 0"),
    (0, 5, -1, "start 0 < limit 5 with delta -1 < 0"),
])
def test_range_errors(start, limit, delta, message):
    g = G.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match=re.escape("Range: " + message)):
            build.range(start, limit, delta)
        fed = [G.placeholder("int32", [], name=n) for n in ("start", "limit", "delta")]
        out = build.range(*fed, name="r")
    with pytest.raises(ValueError, match=re.escape("r: " + message)):
        run(out, dict(zip(fed, (np.int32(start), np.int32(limit), np.int32(delta)))))


def test_range_operands_must_be_scalars_of_a_range_dtype():
    g = G.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match="range: operands must be int32, int64, float32 or "
                                             "float64, got range/limit:0 of dtype bool"):
            build.range(0, True)
        limit = G.placeholder("int32", None, name="limit")
        out = build.range(0, limit)
    with pytest.raises(ValueError, match=re.escape("range_1: limit must be a scalar, "
                                                   "got shape (2,)")):
        run(out, {limit: np.array([1, 2], np.int32)})


# ---------------------------------------------------------------------------------------------------
# Reductions over every axis of a tensor of unknown rank: range(0, rank(x)) at run time.

REDUCERS = {"Min": (G.reduce_min, np.min), "Max": (G.reduce_max, np.max),
            "Mean": (G.reduce_mean, np.mean), "Sum": (G.reduce_sum, np.sum)}


@pytest.mark.parametrize("op_type", REDUCERS)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_all_axes_of_unknown_rank(op_type, keepdims):
    reduce, model = REDUCERS[op_type]
    x = _distinct(f"unknown-rank-{op_type}", (2, 3, 4))
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float64", None, name="x")
        with G.name_scope("scope"):
            out = reduce(px, keepdims=keepdims)
    assert [(op.name, op.type) for op in g.get_operations()][1:] == [
        ("scope/Rank", "Rank"), ("scope/range/start", "Const"), ("scope/range/delta", "Const"),
        ("scope/range", "Range"), (f"scope/{op_type}", op_type)]
    assert out.shape == (None if keepdims else ())
    s = G.Session(g)
    np.testing.assert_allclose(s.run(out, {px: x}), model(x, keepdims=keepdims), rtol=1e-15)
    np.testing.assert_allclose(s.run(out, {px: x[0]}), model(x[0], keepdims=keepdims), rtol=1e-15)
    np.testing.assert_array_equal(s.run(out, {px: np.float64(2.5)}), 2.5)


@pytest.mark.parametrize("op_type", REDUCERS)
def test_reduce_all_axes_of_unknown_rank_gradient(op_type):
    reduce = REDUCERS[op_type][0]
    x = _distinct(f"unknown-rank-grad-{op_type}", (2, 3, 4))
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float64", None, name="x")
        loss = weighted_sum(reduce(px), np.float64(1.7))
        (dx,) = gradients(g, loss, [px])
    s = G.Session(g)
    analytic = s.run(dx, {px: x})
    numeric = finite_differences(s, loss, {px: x}, px, eps=1e-6)
    assert analytic.shape == x.shape and analytic.dtype == F64
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-9)


def test_reductions_over_axes_known_only_at_run_time():
    x = _distinct("runtime-axes", (2, 3, 4))
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float64", [2, 3, 4], name="x")
        axes = G.placeholder("int32", [None], name="axes")
        outs = [g.create_op(op_type, [px, axes], {"keep_dims": False}).outputs[0]
                for op_type in REDUCERS]
        grads = [gradients(g, weighted_sum(out, np.float64(1.0)), [px])[0] for out in outs[2:]]
    assert all(out.shape is None for out in outs)
    s = G.Session(g)
    feeds = {px: x, axes: np.array([2, 0], np.int32)}
    for out, (_, model) in zip(outs, REDUCERS.values()):
        np.testing.assert_allclose(s.run(out, feeds), model(x, axis=(0, 2)), rtol=1e-15)
    mean_grad, sum_grad = s.run(grads, feeds)
    np.testing.assert_allclose(mean_grad, np.full(x.shape, 1 / 8), rtol=1e-15)
    np.testing.assert_array_equal(sum_grad, np.ones(x.shape))


def test_reduce_of_known_rank_keeps_the_const():
    g = G.Graph()
    with g.as_default():
        out = G.reduce_max(G.placeholder("float32", [2, None], name="x"))
    assert [op.name for op in g.get_operations()] == ["x", "Const", "Max"]
    np.testing.assert_array_equal(g.get_operation_by_name("Const").attrs["value"], [0, 1])
    assert out.shape == ()
