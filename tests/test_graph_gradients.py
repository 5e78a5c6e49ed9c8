"""fqcore.graph gradients: every op registered with a gradient, checked through the engine's Gradients op
against central finite differences (float64) or, for the float32-only kernels, the TF gradient formula."""
import zlib
from dataclasses import dataclass, field

import numpy as np
import pytest

import fqcore
import fqcore.graph as G
from fqcore.graph import op_registry

F64 = np.float64
F32 = np.float32


# ---------------------------------------------------------------------------------------------------
# Helpers. L = sum(output * fixed random weights); the engine's dL/dx comes from a Gradients op.

def _rng(key):
    return np.random.default_rng(zlib.crc32(key.encode()))


def weighted_sum(out, w):
    """L = sum(out * w) with w a constant of out's dtype."""
    return G.reduce_sum(G.multiply(out, G.constant(w, dtype=w.dtype), name="weighted"), name="L")


def gradients(g, loss, xs):
    return g.create_op("Gradients", [loss] + list(xs), name="gradients").outputs


def finite_differences(session, loss, feeds, tensor, eps):
    """Central differences of the scalar `loss` with respect to the fed `tensor`, in float64."""
    base = feeds[tensor]
    numeric = np.zeros(base.shape, F64)
    for index in np.ndindex(base.shape):
        values = []
        for step in (eps, -eps):
            moved = base.copy()
            moved[index] += step
            values.append(float(session.run(loss, {**feeds, tensor: moved})))
        numeric[index] = (values[0] - values[1]) / (2 * eps)
    return numeric


def assert_present(g, op_types):
    present = {op.type for op in g.get_operations()}
    missing = set(op_types) - present
    assert not missing, f"the test graph has no {sorted(missing)} op"


# ---------------------------------------------------------------------------------------------------
# Float64 cases: one table, each entry checked against finite differences.

@dataclass
class Case:
    id: str
    ops: tuple                      # op types the case exercises (must appear in its graph)
    inputs: dict                    # placeholder name -> float64 array (all differentiated)
    build: object                   # build(placeholders: dict) -> output tensor
    extra: dict = field(default_factory=dict)   # placeholder name -> non-differentiated array


def _arrays(key, **shapes):
    rng = _rng(key)
    return {name: rng.standard_normal(shape) for name, shape in shapes.items()}


def _away_from(values, kinks, margin=0.05):
    """values moved so no element is within `margin` of a kink (keeps finite differences off the
    points where the op is not differentiable)."""
    values = np.array(values, F64)
    for k in kinks:
        close = np.abs(values - k) < margin
        values[close] = k + np.where(values[close] >= k, margin, -margin) * 2
    return values


def _distinct(key, shape, low=-2.0, high=2.0):
    """Values well apart (no ties, so Min/Max/MaxPool/Minimum/Maximum are differentiable)."""
    n = int(np.prod(shape))
    values = np.linspace(low, high, n)
    return _rng(key).permutation(values).reshape(shape)


CASES = []


def _binary_builder(op_type, builder):
    def build(p):
        if builder is None:
            return G.get_default_graph().create_op(op_type, [p["x"], p["y"]]).outputs[0]
        return builder(p["x"], p["y"])
    return build


_BINARY = {
    "AddV2": G.add, "Add": None, "Sub": G.subtract, "Mul": G.multiply, "RealDiv": G.divide,
    "Pow": G.build.pow, "Minimum": G.minimum, "Maximum": G.maximum,
    "SquaredDifference": G.build.squared_difference,
}
_SHAPES = {"same": ((2, 3), (2, 3)), "col_row": ((3, 1), (1, 4)), "scalar_matrix": ((), (3, 4)),
           "matrix_scalar": ((3, 4), ()), "row_matrix": ((4,), (3, 4))}

for _op, _builder in _BINARY.items():
    for _shape_id, (_xs, _ys) in _SHAPES.items():
        _key = f"{_op}-{_shape_id}"
        _rg = _rng(_key)
        _x = _rg.standard_normal(_xs)
        _y = _rg.standard_normal(_ys)
        if _op == "RealDiv":
            _y = np.sign(_y) * (np.abs(_y) + 0.5)
        if _op == "Pow":
            _x = np.abs(_x) + 0.5
            _y = _y * 1.5
        if _op in ("Minimum", "Maximum"):
            # no ties between x and y after broadcasting
            _x = _distinct(_key + "x", _xs, -2.0, 2.0) + 0.013
            _y = _distinct(_key + "y", _ys, -1.9, 1.9)
            _x = np.asarray(_x)
        CASES.append(Case(_key, (_op,), {"x": np.asarray(_x, F64), "y": np.asarray(_y, F64)},
                          _binary_builder(_op, _builder)))


def _unary(op_type, builder=None):
    def build(p):
        if builder is None:
            return G.get_default_graph().create_op(op_type, [p["x"]]).outputs[0]
        return builder(p["x"])
    return build


_X23 = _rng("unary").standard_normal((2, 3))
CASES += [
    Case("Neg", ("Neg",), {"x": _X23}, _unary("Neg")),
    Case("Reciprocal", ("Reciprocal",), {"x": np.sign(_X23) * (np.abs(_X23) + 0.5)},
         _unary("Reciprocal", G.build.reciprocal)),
    Case("Rsqrt", ("Rsqrt",), {"x": np.abs(_X23) + 0.3}, _unary("Rsqrt", G.rsqrt)),
    Case("Square", ("Square",), {"x": _X23}, _unary("Square")),
    Case("Identity", ("Identity",), {"x": _X23}, _unary("Identity", G.identity)),
    Case("Relu", ("Relu",), {"x": _away_from(_X23, [0.0])}, _unary("Relu", G.relu)),
    Case("Relu6", ("Relu6",), {"x": _away_from(np.linspace(-2, 8, 12).reshape(3, 4) + 0.01,
                                               [0.0, 6.0])}, _unary("Relu6", G.relu6)),
    Case("Sigmoid", ("Sigmoid",), {"x": 2 * _X23}, _unary("Sigmoid", G.sigmoid)),
    Case("Tanh", ("Tanh",), {"x": _X23}, _unary("Tanh", G.tanh)),
    Case("Softmax-2d", ("Softmax",), {"x": 2 * _X23}, _unary("Softmax", G.softmax)),
    Case("Softmax-3d", ("Softmax",), {"x": _rng("sm3").standard_normal((2, 2, 3))},
         _unary("Softmax", G.softmax)),
    Case("Cast-f64-f64", ("Cast",), {"x": _X23}, lambda p: G.cast(p["x"], "float64")),
    Case("Reshape", ("Reshape",), {"x": _rng("rs").standard_normal((2, 6))},
         lambda p: G.reshape(p["x"], [3, 4])),
    Case("Reshape-minus1", ("Reshape",), {"x": _rng("rs1").standard_normal((2, 3, 2))},
         lambda p: G.reshape(p["x"], [-1, 2])),
]

for _axis in (None, 0, [-2], [0, 2]):
    CASES.append(Case(f"Squeeze-axis{_axis}".replace(" ", ""), ("Squeeze",),
                      {"x": _rng(f"sq{_axis}").standard_normal((1, 3, 1, 2))},
                      (lambda a: lambda p: G.build.squeeze(p["x"], a))(_axis)))

# SpaceToBatchND and BatchToSpaceND: (block_shape, paddings = crops, input shape of each)
_SPACE_BATCH = [
    ([2, 2], [[0, 0], [0, 0]], (1, 4, 4, 1), (4, 2, 2, 1)),
    ([2, 3], [[1, 1], [2, 1]], (2, 4, 3, 2), (12, 3, 2, 2)),
    ([3], [[2, 1]], (1, 3, 2), (3, 2, 2)),
]
for _block, _pairs, _s2b_shape, _b2s_shape in _SPACE_BATCH:
    for _op, _builder, _shape in (("SpaceToBatchND", G.build.space_to_batch_nd, _s2b_shape),
                                  ("BatchToSpaceND", G.build.batch_to_space_nd, _b2s_shape)):
        _key = f"{_op}-block{_block}-pairs{_pairs}".replace(" ", "")
        CASES.append(Case(_key, (_op,), _arrays(_key, x=_shape),
                          (lambda f, b, c: lambda p: f(p["x"], b, c))(_builder, _block, _pairs)))

_REDUCERS = {"Mean": G.reduce_mean, "Sum": G.reduce_sum, "Min": G.reduce_min, "Max": G.reduce_max}
for _op, _reduce in _REDUCERS.items():
    for _axis in (None, 0, 1, -1, [0, 2], [2, 1]):
        for _keep in (False, True):
            _key = f"{_op}-axis{_axis}-keep{_keep}".replace(" ", "")
            CASES.append(Case(
                _key, (_op,), {"x": _distinct(_key, (2, 3, 4))},
                (lambda r, a, k: lambda p: r(p["x"], axis=a, keepdims=k))(_reduce, _axis, _keep)))

for _ta in (False, True):
    for _tb in (False, True):
        _a = (4, 3) if _ta else (3, 4)
        _b = (2, 4) if _tb else (4, 2)
        _key = f"MatMul-ta{_ta}-tb{_tb}"
        CASES.append(Case(_key, ("MatMul",), _arrays(_key, a=_a, b=_b),
                          (lambda ta, tb: lambda p: G.matmul(p["a"], p["b"], transpose_a=ta,
                                                             transpose_b=tb))(_ta, _tb)))

CASES += [
    Case("BiasAdd-2d", ("BiasAdd",), _arrays("ba2", x=(3, 4), b=(4,)),
         lambda p: G.bias_add(p["x"], p["b"])),
    Case("BiasAdd-4d", ("BiasAdd",), _arrays("ba4", x=(2, 2, 3, 3), b=(3,)),
         lambda p: G.bias_add(p["x"], p["b"])),
]

# Conv2D: (strides, padding, dilations, input shape, filter shape)
_CONVS = [
    (1, "SAME", 1, (1, 5, 5, 2), (3, 3, 2, 2)),
    (2, "SAME", 1, (2, 5, 4, 2), (3, 3, 2, 3)),
    (1, "VALID", 1, (1, 5, 5, 2), (3, 3, 2, 2)),
    (2, "VALID", 1, (1, 6, 5, 1), (2, 3, 1, 2)),
    ((1, 2), "SAME", 1, (1, 4, 5, 2), (2, 2, 2, 2)),
    (1, "SAME", 2, (1, 5, 5, 1), (3, 3, 1, 2)),
    (1, "VALID", (2, 1), (1, 6, 4, 2), (2, 2, 2, 1)),
]
for _s, _pad, _d, _xshape, _wshape in _CONVS:
    _key = f"Conv2D-s{_s}-{_pad}-d{_d}".replace(" ", "")
    CASES.append(Case(_key, ("Conv2D",), _arrays(_key, x=_xshape, w=_wshape),
                      (lambda s, pad, d: lambda p: G.conv2d(p["x"], p["w"], strides=s, padding=pad,
                                                             dilations=d))(_s, _pad, _d)))

# DepthwiseConv2dNative: (multiplier, strides, padding, dilations, input shape, kernel)
_DEPTHWISE = [
    (1, 1, "SAME", 1, (1, 4, 4, 2), (3, 3)),
    (2, 1, "SAME", 1, (1, 4, 4, 2), (3, 3)),
    (2, 2, "VALID", 1, (2, 5, 5, 2), (2, 2)),
    (1, 2, "SAME", 1, (1, 5, 4, 3), (3, 2)),
    (2, 1, "SAME", 2, (1, 5, 5, 1), (2, 2)),
]
for _m, _s, _pad, _d, _xshape, _k in _DEPTHWISE:
    _key = f"Depthwise-m{_m}-s{_s}-{_pad}-d{_d}"
    CASES.append(Case(_key, ("DepthwiseConv2dNative",),
                      _arrays(_key, x=_xshape, w=_k + (_xshape[3], _m)),
                      (lambda s, pad, d: lambda p: G.depthwise_conv2d(
                          p["x"], p["w"], strides=s, padding=pad, dilations=d))(_s, _pad, _d)))

# Pools: (ksize, strides, padding, input shape)
_POOLS = [(2, 2, "VALID", (1, 4, 4, 2)), (3, 2, "SAME", (2, 5, 5, 1)), ((2, 3), 1, "SAME", (1, 3, 4, 2)),
          (3, 1, "VALID", (1, 4, 5, 1))]
for _pool_op, _pool in (("MaxPool", G.max_pool), ("AvgPool", G.avg_pool)):
    for _k, _s, _pad, _xshape in _POOLS:
        _key = f"{_pool_op}-k{_k}-s{_s}-{_pad}".replace(" ", "")
        CASES.append(Case(_key, (_pool_op,), {"x": _distinct(_key, _xshape)},
                          (lambda pool, k, s, pad: lambda p: pool(p["x"], k, s, pad))(
                              _pool, _k, _s, _pad)))

CASES.append(Case(
    "SparseSoftmaxCrossEntropyWithLogits", ("SparseSoftmaxCrossEntropyWithLogits",),
    {"logits": 2 * _rng("xent").standard_normal((4, 5))},
    lambda p: G.sparse_softmax_cross_entropy_with_logits(p["labels"], p["logits"]),
    extra={"labels": np.array([0, 4, 2, 2], np.int32)}))


def _cond_case(pred_value):
    """cond(pred, x*x*y, tanh(x) + z): x feeds both branches, y only the true one, z only the false
    one; finite differences see only the taken branch, so must the engine."""
    def build(p):
        return G.cond(p["pred"], lambda: p["x"] * p["x"] * p["y"], lambda: G.tanh(p["x"]) + p["z"])
    return Case(f"cond-{pred_value}", ("Switch", "Merge"), _arrays(f"cond{pred_value}", x=(2, 3),
                                                                   y=(2, 3), z=(2, 3)),
                build, extra={"pred": np.array(pred_value)})


def _cond_outside_case(pred_value):
    """A branch that returns an outside tensor unchanged goes through a Switch of its own."""
    def build(p):
        return G.cond(p["pred"], lambda: p["x"], lambda: p["y"] * 3.0)
    return Case(f"cond-outside-{pred_value}", ("Switch", "Merge"),
                _arrays(f"condo{pred_value}", x=(3,), y=(3,)), build,
                extra={"pred": np.array(pred_value)})


CASES += [_cond_case(True), _cond_case(False), _cond_outside_case(True), _cond_outside_case(False)]


def _placeholders(case):
    p = {}
    for name, value in case.inputs.items():
        p[name] = G.placeholder("float64", np.shape(value), name=name)
    for name, value in case.extra.items():
        p[name] = G.placeholder(value.dtype, value.shape, name=name)
    return p


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_gradient_matches_finite_differences(case):
    g = G.Graph()
    with g.as_default():
        p = _placeholders(case)
        out = case.build(p)
    assert_present(g, case.ops)
    feeds = {p[n]: np.array(v, F64) for n, v in case.inputs.items()}
    feeds.update({p[n]: v for n, v in case.extra.items()})
    s = G.Session(g)
    value = np.asarray(s.run(out, feeds))
    assert value.dtype == F64, f"{case.id}: output is {value.dtype}, expected float64"
    w = _rng(case.id + "w").standard_normal(value.shape)
    with g.as_default():
        loss = weighted_sum(out, w)
        wrt = [p[n] for n in case.inputs]
        grads = gradients(g, loss, wrt)
    got = s.run(list(grads), feeds)
    for t, analytic in zip(wrt, got):
        numeric = finite_differences(s, loss, feeds, t, eps=1e-6)
        assert analytic.shape == numeric.shape, f"{t.name}: shape {analytic.shape}, want {numeric.shape}"
        assert analytic.dtype == F64, f"{t.name}: gradient dtype {analytic.dtype}"
        scale = max(1.0, float(np.abs(numeric).max()))
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7 * scale,
                                   err_msg=f"{case.id}: d L / d {t.name}")


def test_cond_gradient_skips_the_untaken_branch():
    """Beyond the finite differences: a tensor used only on the untaken branch gets exactly zero."""
    for pred in (True, False):
        g = G.Graph()
        with g.as_default():
            pr = G.placeholder("bool", [], name="pred")
            x = G.placeholder("float64", [3], name="x")
            y = G.placeholder("float64", [3], name="y")
            out = G.cond(pr, lambda: x * 2.0, lambda: y * 5.0)
            loss = weighted_sum(out, np.array([1.0, -2.0, 3.0]))
            dx, dy = gradients(g, loss, [x, y])
        s = G.Session(g)
        gx, gy = s.run([dx, dy], {pr: pred, x: np.ones(3), y: np.ones(3)})
        w = np.array([1.0, -2.0, 3.0])
        np.testing.assert_array_equal(gx, 2.0 * w if pred else np.zeros(3))
        np.testing.assert_array_equal(gy, np.zeros(3) if pred else 5.0 * w)


# ---------------------------------------------------------------------------------------------------
# Cast between float types: the gradient is the incoming gradient in the input's dtype.

@pytest.mark.parametrize("src,dst", [("float32", "float64"), ("float64", "float32")])
def test_cast_gradient_between_float_types(src, dst):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder(src, [2, 3], name="x")
        y = G.cast(x, dst)
        w = np.arange(1, 7, dtype=dst).reshape(2, 3) / 4  # exact in both dtypes
        (dx,) = gradients(g, weighted_sum(y, w), [x])
    assert_present(g, ["Cast"])
    got = G.Session(g).run(dx, {x: np.ones((2, 3), src)})
    assert got.dtype == np.dtype(src)
    np.testing.assert_array_equal(got, w.astype(src))


# ---------------------------------------------------------------------------------------------------
# FusedBatchNormV3 (float32 kernels): against a float64 numpy model of batch norm, whose own
# gradient comes from finite differences.

EPS_BN = 1e-3


def bn_model(x, scale, offset, mean=None, variance=None, epsilon=EPS_BN):
    """Float64 batch norm over N, H, W (NHWC); training when mean is None."""
    x = np.asarray(x, F64)
    if mean is None:
        mean = x.mean(axis=(0, 1, 2))
        variance = ((x - mean) ** 2).mean(axis=(0, 1, 2))
    return (x - mean) / np.sqrt(variance + np.float32(epsilon)) * scale + offset


def _fd_model(f, args, index, eps=1e-6):
    base = np.array(args[index], F64)
    numeric = np.zeros(base.shape)
    for i in np.ndindex(base.shape):
        vals = []
        for step in (eps, -eps):
            moved = list(args)
            b = base.copy()
            b[i] += step
            moved[index] = b
            vals.append(f(*moved))
        numeric[i] = (vals[0] - vals[1]) / (2 * eps)
    return numeric


def _bn_inputs(key, shape=(2, 3, 3, 2)):
    rng = _rng(key)
    c = shape[-1]
    x = (rng.standard_normal(shape) * 1.5 + 0.5).astype(F32)
    return (x, (rng.uniform(0.5, 1.5, c)).astype(F32), rng.standard_normal(c).astype(F32),
            rng.standard_normal(c).astype(F32) * 0.3, rng.uniform(0.5, 2.0, c).astype(F32))


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
def test_fused_batch_norm_gradient(training):
    x, scale, offset, mean, var = _bn_inputs(f"bn{training}")
    c = x.shape[-1]
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float32", x.shape, name="x")
        ps = G.placeholder("float32", [c], name="scale")
        po = G.placeholder("float32", [c], name="offset")
        if training:
            empty = np.zeros(0, F32)
            outs = G.fused_batch_norm(px, ps, po, G.constant(empty), G.constant(empty),
                                      epsilon=EPS_BN, is_training=True)
            wrt = [px, ps, po]
        else:
            pm = G.placeholder("float32", [c], name="mean")
            pv = G.placeholder("float32", [c], name="variance")
            outs = G.fused_batch_norm(px, ps, po, pm, pv, epsilon=EPS_BN, is_training=False)
            wrt = [px, ps, po, pm, pv]
        w = _rng(f"bnw{training}").standard_normal(x.shape).astype(F32)
        loss = weighted_sum(outs[0], w)
        grads = gradients(g, loss, wrt)
    assert_present(g, ["FusedBatchNormV3"])
    feeds = {px: x, ps: scale, po: offset}
    if not training:
        feeds.update({pm: mean, pv: var})
    s = G.Session(g)
    y, *got = s.run([outs[0]] + list(grads), feeds)

    stats = () if training else (np.float64(mean), np.float64(var))
    np.testing.assert_allclose(y, bn_model(x, scale, offset, *stats), rtol=1e-5, atol=1e-5)

    def model_loss(x_, s_, o_):
        return float((bn_model(x_, s_, o_, *stats) * w).sum())
    args = [np.float64(x), np.float64(scale), np.float64(offset)]
    for i, name in enumerate(("x", "scale", "offset")):
        numeric = _fd_model(model_loss, args, i)
        np.testing.assert_allclose(got[i], numeric, rtol=2e-4, atol=2e-4 * np.abs(numeric).max(),
                                   err_msg=f"d L / d {name}")
    if not training:
        # TF's _FusedBatchNormGrad returns None for the mean and variance inputs.
        np.testing.assert_array_equal(got[3], np.zeros(c, F32))
        np.testing.assert_array_equal(got[4], np.zeros(c, F32))


def test_fused_batch_norm_training_dx_vs_float32_finite_differences():
    """The engine's own float32 forward, differenced with a large step: loose, but independent of
    any model."""
    x, scale, offset, _, _ = _bn_inputs("bn-f32fd", shape=(2, 2, 3, 2))
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float32", x.shape, name="x")
        empty = np.zeros(0, F32)
        y = G.fused_batch_norm(px, G.constant(scale), G.constant(offset), G.constant(empty),
                               G.constant(empty), epsilon=EPS_BN, is_training=True)[0]
        w = _rng("bn-f32fd-w").standard_normal(x.shape).astype(F32)
        loss = weighted_sum(y, w)
        (dx,) = gradients(g, loss, [px])
    s = G.Session(g)
    analytic = s.run(dx, {px: x})
    eps = 1e-2
    numeric = np.zeros(x.shape)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += F32(eps)
        down[i] -= F32(eps)
        numeric[i] = (np.float64(s.run(loss, {px: up})) - np.float64(s.run(loss, {px: down}))) / (
            np.float64(up[i]) - np.float64(down[i]))
    np.testing.assert_allclose(analytic, numeric, rtol=2e-2, atol=2e-2 * np.abs(numeric).max())


def test_fold_fused_batch_norm_grad_override():
    """contrib.quantize's FoldFusedBatchNormGrad: dx = grad_mean/n + 2*grad_var*(x-mean)/(n-1),
    with the batch mean and the Bessel-corrected batch variance as the differentiated outputs."""
    x, scale, offset, _, _ = _bn_inputs("fold")
    c = x.shape[-1]
    n = x.size // c
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float32", x.shape, name="x")
        ps = G.placeholder("float32", [c], name="scale")
        po = G.placeholder("float32", [c], name="offset")
        empty = np.zeros(0, F32)
        outs = G.fused_batch_norm(px, ps, po, G.constant(empty), G.constant(empty),
                                  epsilon=EPS_BN, is_training=True)
        outs[0].op.attrs["_gradient_op_type"] = "FoldFusedBatchNormGrad"
        w_mean = _rng("fold-m").standard_normal(c).astype(F32)
        w_var = _rng("fold-v").standard_normal(c).astype(F32)
        loss = G.add(weighted_sum(outs[1], w_mean), weighted_sum(outs[2], w_var))
        dx, dscale, doffset = gradients(g, loss, [px, ps, po])
    s = G.Session(g)
    got_dx, got_ds, got_do, batch_var = s.run([dx, dscale, doffset, outs[2]],
                                              {px: x, ps: scale, po: offset})
    x64 = np.float64(x)
    mean = x64.mean(axis=(0, 1, 2))
    np.testing.assert_allclose(batch_var, x64.var(axis=(0, 1, 2), ddof=1), rtol=1e-5)
    expected = w_mean / n + 2 * w_var * (x64 - mean) / (n - 1)
    np.testing.assert_allclose(got_dx, expected, rtol=1e-5, atol=1e-6)

    # The formula is the true gradient of mean and Bessel variance (independent check of `expected`).
    def stats_loss(x_):
        return float((x_.mean(axis=(0, 1, 2)) * w_mean).sum()
                     + (x_.var(axis=(0, 1, 2), ddof=1) * w_var).sum())
    np.testing.assert_allclose(expected, _fd_model(stats_loss, [x64], 0), rtol=1e-5, atol=1e-8)
    # The override gives nothing to scale and offset.
    np.testing.assert_array_equal(got_ds, np.zeros(c, F32))
    np.testing.assert_array_equal(got_do, np.zeros(c, F32))


def test_fold_override_differs_from_default_gradient():
    """Without the override the same loss gives no gradient to x (TF's FusedBatchNormGrad ignores
    the statistics' gradients): the override is what changes it."""
    x, scale, offset, _, _ = _bn_inputs("fold-default")
    c = x.shape[-1]
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float32", x.shape, name="x")
        empty = np.zeros(0, F32)
        outs = G.fused_batch_norm(px, G.constant(scale), G.constant(offset), G.constant(empty),
                                  G.constant(empty), epsilon=EPS_BN, is_training=True)
        loss = weighted_sum(outs[1], np.ones(c, F32))
        (dx,) = gradients(g, loss, [px])
    np.testing.assert_array_equal(G.Session(g).run(dx, {px: x}), np.zeros_like(x))


# ---------------------------------------------------------------------------------------------------
# Fake quant (float32 kernels): the fused TF gradient formula on nudged bounds, the wiring against
# fqcore's gradient functions, and a coarse finite-difference check of the straight-through estimate.

def nudge(lo, hi, num_bits=8, narrow_range=False):
    """TF's nudged range, in float32 one rounding per operation (shared/spec/fake_quant.md)."""
    lo, hi = F32(lo), F32(hi)
    qmin = F32(1 if narrow_range else 0)
    qmax = F32(2 ** num_bits - 1)
    scale = F32(hi - lo) / F32(qmax - qmin)
    zpf = F32(qmin - F32(lo / scale))
    if zpf < qmin:
        zp = qmin
    elif zpf > qmax:
        zp = qmax
    else:
        zp = F32(np.sign(zpf) * np.floor(np.abs(zpf) + F32(0.5)))
    return F32((qmin - zp) * scale), F32((qmax - zp) * scale)


def _fq_inputs(key, lo, hi, shape, margin):
    """Values inside and outside [lo, hi], none within `margin` of the nudged bounds."""
    values = _rng(key).uniform(lo - 1.0, hi + 1.0, shape)
    for bound in (lo, hi):
        values = _away_from(values, [bound], margin)
    return values.astype(F32)


FQ_SETTINGS = [(8, False), (4, True), (3, False)]


@pytest.mark.parametrize("num_bits,narrow", FQ_SETTINGS)
def test_fake_quant_with_min_max_vars_gradient(num_bits, narrow):
    lo, hi = -0.7, 1.3
    nmin, nmax = nudge(lo, hi, num_bits, narrow)
    x = _fq_inputs(f"fqv{num_bits}", float(nmin), float(nmax), (4, 6), 0.2)
    x.flat[:2] = [nmin, nmax]  # the pass-through mask is inclusive
    w = _rng(f"fqvw{num_bits}").standard_normal(x.shape).astype(F32)
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float32", x.shape, name="x")
        pmin = G.placeholder("float32", [], name="min")
        pmax = G.placeholder("float32", [], name="max")
        y = G.fake_quant_with_min_max_vars(px, pmin, pmax, num_bits=num_bits, narrow_range=narrow)
        loss = weighted_sum(y, w)
        grads = gradients(g, loss, [px, pmin, pmax])
    assert_present(g, ["FakeQuantWithMinMaxVars"])
    feeds = {px: x, pmin: F32(lo), pmax: F32(hi)}
    s = G.Session(g)
    dx, dmin, dmax = s.run(list(grads), feeds)

    between = (x >= nmin) & (x <= nmax)
    np.testing.assert_array_equal(dx, w * between)
    np.testing.assert_allclose(dmin, w[x < nmin].sum(dtype=F64), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dmax, w[x > nmax].sum(dtype=F64), rtol=1e-6, atol=1e-6)
    assert between.any() and (x < nmin).any() and (x > nmax).any()

    oracle = fqcore.fake_quant_with_min_max_vars_gradient(w, x, F32(lo), F32(hi), num_bits=num_bits,
                                                          narrow_range=narrow)
    np.testing.assert_array_equal(dx, oracle.backprops_wrt_input)
    np.testing.assert_array_equal(dmin, oracle.backprop_wrt_min)
    np.testing.assert_array_equal(dmax, oracle.backprop_wrt_max)

    if num_bits == 8:  # coarse differences need a fine grid
        _coarse_fd_range(s, y, x, feeds, px, pmin, pmax, lo, hi)


def _coarse_fd_range(s, y, x, feeds, px, pmin, pmax, lo, hi):
    """d y/d min and d y/d max where every element is clamped below / above: about +1 each (the
    nudged bound moves with min/max up to one grid step)."""
    eps = 0.1
    for which, p, xs in ((0, pmin, np.full(x.shape, lo - 2.0, F32)),
                         (1, pmax, np.full(x.shape, hi + 2.0, F32))):
        base = float(feeds[p])
        vals = []
        for step in (eps, -eps):
            f = {**feeds, px: xs, p: F32(base + step)}
            vals.append(s.run(y, f).astype(F64))
        slope = (vals[0] - vals[1]) / (2 * eps)
        np.testing.assert_allclose(slope, 1.0, atol=0.15, err_msg=f"d y / d {p.name}")


def test_fake_quant_coarse_finite_differences_on_x():
    """The straight-through estimate, as coarse differences of the float32 forward."""
    for op_name in ("vars", "per_channel", "args"):
        lo, hi = -1.0, 2.0
        nmin, nmax = nudge(lo, hi)
        step = (nmax - nmin) / 255
        eps = F32(0.05)
        x = _fq_inputs("fqfd" + op_name, float(nmin), float(nmax), (3, 4), 3 * float(eps))
        w = _rng("fqfdw" + op_name).standard_normal(x.shape).astype(F32)
        g = G.Graph()
        with g.as_default():
            px = G.placeholder("float32", x.shape, name="x")
            if op_name == "vars":
                y = G.fake_quant_with_min_max_vars(px, G.constant(F32(lo)), G.constant(F32(hi)))
            elif op_name == "per_channel":
                y = G.fake_quant_with_min_max_vars_per_channel(
                    px, G.constant(np.full(4, lo, F32)), G.constant(np.full(4, hi, F32)))
            else:
                y = G.fake_quant_with_min_max_args(px, min=lo, max=hi)
            loss = weighted_sum(y, w)
            (dx,) = gradients(g, loss, [px])
        s = G.Session(g)
        analytic = s.run(dx, {px: x})
        # The op is elementwise, so moving every element at once gives the Jacobian's diagonal.
        up, down = s.run(y, {px: x + eps}), s.run(y, {px: x - eps})
        slope = (up.astype(F64) - down) / (2 * float(eps))
        inside = (x >= nmin) & (x <= nmax)
        assert inside.any() and (~inside).any()
        # slope 1 inside to within one grid step over 2*eps; exactly 0 outside (both clamped)
        np.testing.assert_allclose(analytic, w * slope, rtol=0,
                                   atol=float(step) / float(eps) * float(np.abs(w).max()),
                                   err_msg=op_name)
        np.testing.assert_array_equal(slope[~inside], 0.0, err_msg=op_name)
        np.testing.assert_array_equal(analytic, w * inside)


def test_fake_quant_with_min_max_vars_per_channel_gradient():
    lo = np.array([-0.5, -1.0, 0.2, -3.0], F32)
    hi = np.array([0.5, 2.0, 1.2, -1.0], F32)  # includes an all-positive and an all-negative range
    bits, narrow = 5, True
    bounds = [nudge(a, b, bits, narrow) for a, b in zip(lo, hi)]
    nmin = np.array([b[0] for b in bounds], F32)
    nmax = np.array([b[1] for b in bounds], F32)
    rng = _rng("fqpc")
    x = (rng.uniform(lo - 1.0, hi + 1.0, (5, 4))).astype(F32)
    x[0], x[1] = nmin, nmax  # inclusive on the nudged bounds
    w = rng.standard_normal(x.shape).astype(F32)
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float32", x.shape, name="x")
        pmin = G.placeholder("float32", [4], name="min")
        pmax = G.placeholder("float32", [4], name="max")
        y = G.fake_quant_with_min_max_vars_per_channel(px, pmin, pmax, num_bits=bits,
                                                       narrow_range=narrow)
        grads = gradients(g, weighted_sum(y, w), [px, pmin, pmax])
    assert_present(g, ["FakeQuantWithMinMaxVarsPerChannel"])
    dx, dmin, dmax = G.Session(g).run(list(grads), {px: x, pmin: lo, pmax: hi})
    between = (x >= nmin) & (x <= nmax)
    np.testing.assert_array_equal(dx, w * between)
    np.testing.assert_allclose(dmin, np.where(x < nmin, w, 0).sum(axis=0, dtype=F64), rtol=1e-6,
                               atol=1e-6)
    np.testing.assert_allclose(dmax, np.where(x > nmax, w, 0).sum(axis=0, dtype=F64), rtol=1e-6,
                               atol=1e-6)
    assert dmin.shape == (4,) and dmax.shape == (4,)
    oracle = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(w, x, lo, hi, num_bits=bits,
                                                                      narrow_range=narrow)
    np.testing.assert_array_equal(dx, oracle.backprops_wrt_input)
    np.testing.assert_array_equal(dmin, oracle.backprop_wrt_min)
    np.testing.assert_array_equal(dmax, oracle.backprop_wrt_max)


@pytest.mark.parametrize("num_bits,narrow", FQ_SETTINGS)
def test_fake_quant_with_min_max_args_gradient(num_bits, narrow):
    lo, hi = -2.5, 4.5
    nmin, nmax = nudge(lo, hi, num_bits, narrow)
    x = _fq_inputs(f"fqa{num_bits}", float(nmin), float(nmax), (3, 5), 0.1)
    x.flat[:2] = [nmin, nmax]
    w = _rng(f"fqaw{num_bits}").standard_normal(x.shape).astype(F32)
    g = G.Graph()
    with g.as_default():
        px = G.placeholder("float32", x.shape, name="x")
        y = G.fake_quant_with_min_max_args(px, min=lo, max=hi, num_bits=num_bits, narrow_range=narrow)
        (dx,) = gradients(g, weighted_sum(y, w), [px])
    assert_present(g, ["FakeQuantWithMinMaxArgs"])
    got = G.Session(g).run(dx, {px: x})
    np.testing.assert_array_equal(got, w * ((x >= nmin) & (x <= nmax)))
    np.testing.assert_array_equal(got, fqcore.fake_quant_with_min_max_args_gradient(
        w, x, min=lo, max=hi, num_bits=num_bits, narrow_range=narrow))


def test_nudge_model_matches_spec_examples():
    """The test's own nudge against the spec's worked examples (so the masks above mean something)."""
    assert nudge(-2.5, 4.5, 3) == (F32(-3.0), F32(4.0))
    assert nudge(-6.0, 6.0, 8, True) == (F32(-6.0), F32(6.0))
    np.testing.assert_allclose(nudge(-6.0, 6.0, 8), (-6.023529529571533, 5.976470470428467), rtol=0)
    assert nudge(0.5, 1.0, 8) == (F32(0.0), F32(0.5))
    assert nudge(-0.1, 0.2, 8) == (F32(-float.fromhex("0x1.99999cp-4")), F32(float.fromhex("0x1.99999cp-3")))


# ---------------------------------------------------------------------------------------------------
# Coverage: every op with a gradient (and every gradient override) has a check in this file.

COVERED_ELSEWHERE = {
    "FusedBatchNormV3": "test_fused_batch_norm_gradient",
    "FakeQuantWithMinMaxVars": "test_fake_quant_with_min_max_vars_gradient",
    "FakeQuantWithMinMaxVarsPerChannel": "test_fake_quant_with_min_max_vars_per_channel_gradient",
    "FakeQuantWithMinMaxArgs": "test_fake_quant_with_min_max_args_gradient",
}
OVERRIDES_COVERED = {"FoldFusedBatchNormGrad": "test_fold_fused_batch_norm_grad_override"}


def test_every_op_with_a_gradient_has_a_check():
    op_registry._load_definitions()
    with_gradient = {name for name, d in op_registry._OPS.items() if d.gradient is not None}
    assert len(with_gradient) >= 30
    covered = {t for case in CASES for t in case.ops}
    for op_type, test_name in COVERED_ELSEWHERE.items():
        assert callable(globals().get(test_name)), f"{op_type}: no test named {test_name}"
        covered.add(op_type)
    missing = sorted(with_gradient - covered)
    assert not missing, f"ops with a gradient but no finite-difference case: {missing}"
    for name, test_name in OVERRIDES_COVERED.items():
        assert callable(globals().get(test_name))
    missing_overrides = sorted(set(op_registry._GRADIENT_OVERRIDES) - set(OVERRIDES_COVERED))
    assert not missing_overrides, f"gradient overrides without a test: {missing_overrides}"


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


# ---------------------------------------------------------------------------------------------------
# Ties, where finite differences do not apply: TF's documented choices.

def test_reduce_max_min_share_the_gradient_among_ties():
    x = np.array([[1.0, 3.0, 3.0], [-2.0, -2.0, 0.5]])
    for reduce, expected in ((G.reduce_max, [[0, 0.5, 0.5], [0, 0, 1]]),
                             (G.reduce_min, [[1, 0, 0], [0.5, 0.5, 0]])):
        g = G.Graph()
        with g.as_default():
            px = G.placeholder("float64", [2, 3], name="x")
            (dx,) = gradients(g, weighted_sum(reduce(px, axis=1), np.array([2.0, 4.0])), [px])
        got = G.Session(g).run(dx, {px: x})
        np.testing.assert_array_equal(got, np.array(expected) * np.array([[2.0], [4.0]]))


def test_maximum_minimum_ties_go_to_x():
    """TF's _MaximumMinimumGrad: x gets the gradient where x >= y (Maximum) or x <= y (Minimum)."""
    for build in (G.maximum, G.minimum):
        g = G.Graph()
        with g.as_default():
            px = G.placeholder("float64", [3], name="x")
            py = G.placeholder("float64", [3], name="y")
            dx, dy = gradients(g, weighted_sum(build(px, py), np.array([1.0, 2.0, 3.0])), [px, py])
        gx, gy = G.Session(g).run([dx, dy], {px: np.array([1.0, 2.0, 3.0]),
                                             py: np.array([1.0, 2.0, 3.0])})
        np.testing.assert_array_equal(gx, [1.0, 2.0, 3.0])
        np.testing.assert_array_equal(gy, [0.0, 0.0, 0.0])


def test_reverse_mode_stops_where_no_gradient_flows(monkeypatch):
    """A gradient reaches an x only through differentiable ops: an Assign on the way ends the
    chain (as in TF, which registers none for it), so the ops past it (a moving average's
    debiasing, read by a fake quant's range) take no gradient function call, and x gets the
    gradient of its differentiable uses only."""
    calls = []

    def counted_div_grad(op, inputs, outputs, grads):
        calls.append(op.name)
        return op_registry.op_def("RealDiv").gradient(op, inputs, outputs, grads)
    monkeypatch.setitem(op_registry._GRADIENT_OVERRIDES, "CountedDivGrad", counted_div_grad)
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [3], name="x")
        v = G.variable("v", np.zeros(3, F32))
        assigned = g.create_op("Assign", [v.op.outputs[0], G.multiply(x, 2.0)]).outputs[0]
        debiased = G.divide(assigned, G.constant(F32(4)), name="debiased")
        debiased.op.attrs["_gradient_op_type"] = "CountedDivGrad"
        loss = G.reduce_sum(G.multiply(G.multiply(x, x), debiased))
        (dx,) = gradients(g, loss, [x])
        init = G.global_variables_initializer()
    s = G.Session(g)
    s.run(init)
    xv = np.array([1.0, -2.0, 3.0], F32)
    np.testing.assert_array_equal(s.run(dx, {x: xv}), 2 * xv * (2 * xv / 4))
    assert calls == []


def test_reverse_code_adds_to_the_gradients_the_run_starts_with():
    """compile_path stores a tensor's first term on the path as it is, unless the run's grads
    start with a gradient of that tensor (`given`): then the term is added to it."""
    from fqcore.graph import reverse_code
    from fqcore.graph.op_registry import gradient_function
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2], name="x")
        y = G.multiply(x, G.constant(np.float32(3.0)), name="y")
    values = {x: np.array([1.0, 2.0], np.float32), y.op.inputs[1]: np.float32(3.0),
              y: np.array([3.0, 6.0], np.float32)}
    path = [(y.op, gradient_function(y.op), [(0, x)], None)]
    start = np.array([10.0, 20.0], np.float32)
    for given, want in (((), [3.0, 3.0]), ((x,), [13.0, 23.0])):
        run = reverse_code.compile_path(path, set(), given=given)
        grads = run(dict(values), {y: np.ones(2, np.float32), x: start}, set())
        np.testing.assert_array_equal(grads[x], want)


def _two_layer_graph():
    """x -> pre = x @ w -> h = tanh(pre) -> loss = sum(h * h), with w and a feed of x."""
    g = G.Graph()
    rng = _rng("spent values")
    w = rng.standard_normal((3, 5)).astype(F32)
    with g.as_default():
        x = G.placeholder("float32", [4, 3], name="x")
        pre = G.matmul(x, G.constant(w, name="w"), name="pre")
        h = G.tanh(pre, name="h")
        loss = G.reduce_sum(G.multiply(h, h), name="loss")
    return g, x, pre, h, loss, w, {x: rng.standard_normal((4, 3)).astype(F32)}


def test_a_run_still_reads_what_a_reverse_path_has_spent_elsewhere():
    """A reverse path lets go of each value after its last reader on the path, but not of the
    values a later step reads (pre, times h's gradient), nor of what a second Gradients op's
    path reads, nor of what is fetched: one run of all of them gives what separate runs give."""
    g, x, pre, h, loss, w, feeds = _two_layer_graph()
    with g.as_default():
        (dh,) = gradients(g, loss, [h])
        late = G.reduce_sum(G.multiply(pre, dh), name="late")
        (dx_first,) = gradients(g, loss, [x])
        (dx_second,) = gradients(g, G.reduce_sum(h, name="plain"), [x])
    s = G.Session(g)
    fetches = (late, dx_first, dx_second, h)
    together = s.run(list(fetches), feeds)
    for got, fetch in zip(together, fetches):
        np.testing.assert_array_equal(got, s.run(fetch, feeds))
    h_value = np.tanh(feeds[x] @ w)
    np.testing.assert_allclose(together[0], np.sum(feeds[x] @ w * 2 * h_value), rtol=1e-5)
    np.testing.assert_allclose(together[2], (1 - h_value ** 2) @ w.T, rtol=1e-5)


def test_a_reverse_path_frees_the_values_it_has_spent():
    """Once the path is done the run holds, of the forward's values, only those read later:
    h's array is freed during the run, not when it ends."""
    import gc
    import weakref
    g, x, _, h, loss, _, feeds = _two_layer_graph()
    with g.as_default():
        (dx,) = gradients(g, loss, [x])
    s = G.Session(g)
    s.run(dx, feeds)  # the plan's first run folds its constants
    held = {}
    real_backprop = G.session._Run.backprop

    def backprop(run, gradients_op):
        held["h"] = weakref.ref(run.values[h])
        result = real_backprop(run, gradients_op)
        gc.collect()
        held["after"] = held["h"]() is None
        held["left"] = set(run.values)
        return result
    G.session._Run.backprop = backprop
    try:
        s.run(dx, feeds)
    finally:
        G.session._Run.backprop = real_backprop
    assert held["after"], "h's value outlived the reverse path"
    assert h not in held["left"] and x in held["left"]
