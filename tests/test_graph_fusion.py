"""Plan-time fusion (fqcore/graph/fusion.py): which runs of ops become one kernel call, and that a
fused run gives the unfused ops' forward values bit for bit and their gradients to float32's
precision (its sums are float64, numpy's float32)."""
import itertools

import numpy as np
import pytest

import fqcore
from fqcore import _kernels
import fqcore.graph as G
from fqcore.graph import fusion, nn_numpy
from fqcore.graph.op_defs import math as math_ops


def _unfused(monkeypatch):
    """Plans built from now on keep every op as it is."""
    monkeypatch.setattr(fusion, "fuse", lambda order, *rules: list(order))


def _gradients(g, loss, xs):
    return g.create_op("Gradients", [loss] + list(xs), name="gradients").outputs


SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 6.0, -6.0, 1e-42, -1e-42, 3e38],
                   np.float32)


def _chain_graph(kind, activation, channels=8):
    """x [4, 5, 3, C] through one of the chains, then L = sum(out * w); with the gradient of L
    with respect to x and to every vector."""
    rng = np.random.default_rng(channels)
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [None, 5, 3, channels], name="x")
        vectors = [G.placeholder("float32", [channels], name=f"v{i}") for i in range(3)]
        if kind == "fold":          # contrib: post_conv_mul, correction_add, add_fold
            y = G.add(G.add(G.multiply(vectors[0], x), vectors[1]), vectors[2])
        elif kind == "scale_shift":
            y = G.add(vectors[1], G.multiply(x, vectors[0]))
        elif kind == "bias":
            y = G.bias_add(x, vectors[1])
        else:                       # two shifts, no scale
            y = G.add(G.add(x, vectors[1]), vectors[2])
        if activation == "Relu6":
            y = G.relu6(y)
        elif activation == "Relu":
            y = G.relu(y)
        w = rng.standard_normal((4, 5, 3, channels)).astype(np.float32)
        loss = G.reduce_sum(G.multiply(y, G.constant(w)), name="L")
        grads = _gradients(g, loss, [x] + vectors)
    feeds = {x: (rng.standard_normal((4, 5, 3, channels)) * 4).astype(np.float32)}
    feeds[x].flat[:len(SPECIAL)] = SPECIAL
    feeds.update({v: rng.standard_normal(channels).astype(np.float32) for v in vectors})
    return g, y, grads, feeds


def _fused_units(session):
    plan = max(session._plans.values(), key=lambda p: len(p.steps))
    return [unit for unit in plan.units if isinstance(unit, fusion.FusedChannelChain)]


@pytest.mark.parametrize("kind", ["fold", "scale_shift", "bias", "shifts"])
@pytest.mark.parametrize("activation", [None, "Relu", "Relu6"])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_fused_chain_equals_the_unfused_ops(monkeypatch, kind, activation, threads):
    if kind == "bias" and activation is None:
        pytest.skip("a BiasAdd alone is one op: nothing to fuse")
    previous = fqcore.get_num_threads()
    fqcore.set_num_threads(threads)
    try:
        g, y, grads, feeds = _chain_graph(kind, activation)
        session = G.Session(g)
        with np.errstate(invalid="ignore"):
            fused = session.run([y] + grads, feeds)
        assert len(_fused_units(session)) == 1
        _unfused(monkeypatch)
        with np.errstate(invalid="ignore"):
            plain = G.Session(g).run([y] + grads, feeds)
    finally:
        fqcore.set_num_threads(previous)
    # The forward, and dx (products, no sums): the same bits.
    np.testing.assert_array_equal(fused[0].view(np.uint32), plain[0].view(np.uint32))
    np.testing.assert_array_equal(fused[1].view(np.uint32), plain[1].view(np.uint32))
    # The vectors' gradients are sums over 60 pixels.
    for a, b in zip(fused[2:], plain[2:]):
        finite = np.isfinite(b)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_allclose(a[finite], b[finite], rtol=2e-5, atol=1e-5)


def test_the_demo_graph_fuses_each_folded_layer_and_trains_the_same(monkeypatch):
    """contrib's rewrite of the demo model: the four folded layers' chains (post_conv_mul ->
    correction_add -> add_fold -> Relu6) run as one call each; one training step gives the same
    loss and updates, to float32's precision."""
    from fqcore import demo
    from fqcore.datasets import load_digits
    data = load_digits()
    feeds_of = lambda t: {t.images: data.x_train[:64], t.labels: data.y_train[:64]}  # noqa: E731
    fused = demo.training_setup(quantized=True, learning_rate=0.01)
    loss_fused = fused.session.run([fused.train_op, fused.updates, fused.loss], feeds_of(fused))[2]
    units = _fused_units(fused.session)
    assert sorted(u.ops[0].name for u in units) == [
        "block1/dw/post_conv_mul", "block1/pw/post_conv_mul", "conv1/post_conv_mul",
        "conv2/post_conv_mul"]
    assert {tuple(op.type for op in u.ops) for u in units} <= {
        ("Mul", "AddV2", "AddV2", "Relu6"), ("Mul", "AddV2", "AddV2")}
    plan = max(fused.session._plans.values(), key=lambda p: len(p.steps))
    statistics = [u for u in plan.units if isinstance(u, fusion.BatchNormStatistics)]
    assert sorted(u.name for u in statistics) == [
        "block1/dw/BatchNorm/FusedBatchNormV3", "block1/pw/BatchNorm/FusedBatchNormV3",
        "conv1/BatchNorm/FusedBatchNormV3", "conv2/BatchNorm/FusedBatchNormV3"]
    # Every range tracker's batch min and max: the weights' (5) and activations' (6).
    ranges = [u for u in plan.units if isinstance(u, fusion.RangePair)]
    assert len(ranges) == 11 and all(u.ops[0].inputs[0] is u.ops[1].inputs[0] for u in ranges)
    _unfused(monkeypatch)
    plain = demo.training_setup(quantized=True, learning_rate=0.01)
    loss_plain = plain.session.run([plain.train_op, plain.updates, plain.loss], feeds_of(plain))[2]
    assert loss_fused == loss_plain  # the forward is bit for bit
    a, b = fused.session.variable_values(), plain.session.variable_values()
    for name in b:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_runs_that_something_else_reads_are_not_fused():
    """A fetched intermediate, a second reader, or a control edge keeps the ops apart."""
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 4], name="x")
        v = G.constant(np.ones(4, np.float32))
        scaled = G.multiply(x, v)
        out = G.relu6(G.add(scaled, v))
        other = G.relu(G.add(G.multiply(x, v), v))
        twice = G.add(G.multiply(x, v, name="read_twice"), v)
        extra = G.multiply(twice.op.inputs[0], G.constant(2.0))
        with G.control_dependencies([other.op.inputs[0].op]):
            marker = G.identity(x)
    feeds = {x: np.ones((2, 4), np.float32)}

    def fused_types(fetches):
        session = G.Session(g)
        session.run(fetches, feeds)
        return [[op.type for op in unit.ops] for unit in _fused_units(session)]
    assert fused_types([out, scaled]) == [["AddV2", "Relu6"]]   # `scaled` is fetched: not the Mul
    assert fused_types([other, marker]) == []                   # a control edge on the Add
    assert fused_types([twice, extra]) == []                    # the Mul's output has two readers
    assert fused_types(out) == [["Mul", "AddV2", "Relu6"]]


def test_float64_and_mismatched_vectors_are_not_fused():
    g = G.Graph()
    with g.as_default():
        x64 = G.placeholder("float64", [2, 4], name="x64")
        y64 = G.relu(G.add(x64, G.constant(np.ones(4))))
        x = G.placeholder("float32", [2, 4], name="x")
        y = G.relu(G.add(x, G.constant(np.ones((2, 4), np.float32))))  # not a [C] vector
    session = G.Session(g)
    session.run([y64, y], {x64: np.ones((2, 4)), x: np.ones((2, 4), np.float32)})
    assert not _fused_units(session)


@pytest.mark.parametrize("kernel, strides, padding", [((3, 3), (1, 1), "SAME"), ((3, 3), (2, 2), "SAME"),
                                                       ((1, 1), (1, 1), "VALID"), ((2, 3), (2, 1), "VALID")])
def test_convolutions_of_one_input_share_their_columns(monkeypatch, kernel, strides, padding):
    """Two Conv2Ds of the same input with the same geometry (the fold's pair) compute its windows
    once and keep them for their gradients; the second leaves its input gradient to the first,
    which makes both in one call (nn_numpy.conv2d_grad_planned with both filters: one product over
    both, one col2im). The outputs and filter gradients equal the unfused ops' bit for bit, x's
    gradient to float32 rounding (one product sums both)."""
    rng = np.random.default_rng(5)
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [3, 7, 6, 4], name="x")
        w1 = G.placeholder("float32", list(kernel) + [4, 5], name="w1")
        w2 = G.placeholder("float32", list(kernel) + [4, 6], name="w2")
        w3 = G.placeholder("float32", [1, 1, 4, 2], name="w3")  # another geometry: its own windows
        outs = [G.conv2d(x, w, strides=list(strides), padding=padding) for w in (w1, w2)]
        outs.append(G.conv2d(x, w3, strides=[1, 1], padding="SAME"))
        loss = G.add(G.add(G.reduce_sum(G.multiply(outs[0], outs[0])), G.reduce_sum(outs[1])),
                     G.reduce_sum(G.multiply(outs[2], outs[2])))
        grads = _gradients(g, loss, [x, w1, w2, w3])
    feeds = {t: rng.standard_normal([d for d in t.shape]).astype(np.float32) for t in (x, w1, w2, w3)}
    input_gradients = []  # the filters' output counts of each call that makes an input gradient
    real_grad = nn_numpy.conv2d_grad_planned

    def recorded(x, w, dy, cols, geometry, input_gradient=True, more=()):
        if input_gradient:
            input_gradients.append([f.shape[3] for f in ([w] if dy is not None else [])] +
                                   [f.shape[3] for f, _ in more])
        return real_grad(x, w, dy, cols, geometry, input_gradient, more)
    monkeypatch.setattr(nn_numpy, "conv2d_grad_planned", recorded)
    session = G.Session(g)
    fused = session.run(outs + grads, feeds)
    plan = max(session._plans.values(), key=lambda p: len(p.steps))
    convs = [unit for unit in plan.units if isinstance(unit, fusion.ColumnsConv2D)]
    assert [unit.shared for unit in convs] == [False, True, False]
    # x's gradient through the pair: one call with both filters, none with either alone.
    assert sorted(input_gradients) == [[2], [5, 6]]
    monkeypatch.undo()
    _unfused(monkeypatch)
    plain = G.Session(g).run(outs + grads, feeds)
    for a, b in zip(fused[:3] + fused[4:], plain[:3] + plain[4:]):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    np.testing.assert_allclose(fused[3], plain[3], rtol=1e-5, atol=1e-5 * np.abs(plain[3]).max())


def test_a_batch_norm_whose_y_is_fetched_still_normalizes():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 3, 3, 4], name="x")
        ones = G.constant(np.ones(4, np.float32))
        empty = G.constant(np.zeros(0, np.float32))
        y, mean, variance = G.fused_batch_norm(x, ones, ones, empty, empty, is_training=True)[:3]
    feeds = {x: np.random.default_rng(0).standard_normal((2, 3, 3, 4)).astype(np.float32)}

    def units_for(fetches):
        session = G.Session(g)
        values = session.run(fetches, feeds)
        plan = max(session._plans.values(), key=lambda p: len(p.steps))
        return values, [u for u in plan.units if isinstance(u, fusion.BatchNormStatistics)]
    (y_value, mean_value), units = units_for([y, mean])
    assert units == [] and y_value.shape == (2, 3, 3, 4)
    (mean_only,), units = units_for([mean])
    assert len(units) == 1
    np.testing.assert_array_equal(mean_only, mean_value)


def test_the_fold_gradient_kernel_equals_contribs_formula():
    """FoldFusedBatchNormGrad in one pass: the numpy formula's float32 steps, bit for bit (NaN,
    infinities, -0 and denormals among the inputs), on float32; other dtypes keep the formula."""
    from fqcore.graph.op_defs import nn as op_nn

    class Op:
        attrs = {}
    rng = np.random.default_rng(4)
    for shape in [(64, 8, 8, 32), (3, 5, 7), (2, 1), (0, 4)]:
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        x.flat[:min(x.size, 6)] = SPECIAL[:min(x.size, 6)]
        channels = shape[-1]
        mean = rng.standard_normal(channels).astype(np.float32)
        grad_mean, grad_var = (rng.standard_normal(channels).astype(np.float32) for _ in range(2))
        got = op_nn._fold_batch_norm_grad(Op, [x], [None, mean], [None, grad_mean, grad_var])[0]
        n = np.float32(x.size / channels)
        with np.errstate(all="ignore"):
            expected = grad_mean / n + np.float32(2) * grad_var * (x - mean) / (n - np.float32(1))
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("axis, keepdims", [(None, False), (None, True), ([0, 1, 2], False),
                                            ([0, 1, 2], True)])
def test_a_min_and_a_max_of_one_tensor_are_one_pass(monkeypatch, axis, keepdims):
    """A range tracker's Min and Max of the same tensor run as one RangePair where the earlier
    ran (here an op reads the Min before the Max exists): the same values as the two ops, and
    their gradients, which the pair takes where every reader of its outputs has given its own."""
    rng = np.random.default_rng(6)
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [4, 5, 3, 6], name="x")
        low = G.reduce_min(x, axis=axis, keepdims=keepdims)
        low_squared = G.multiply(low, low)
        high = G.reduce_max(x, axis=axis, keepdims=keepdims)
        loss = G.add(G.reduce_sum(low_squared), G.reduce_sum(G.multiply(high, G.constant(3.0))))
        grads = _gradients(g, loss, [x])
    values = (rng.standard_normal((4, 5, 3, 6)) * 4).astype(np.float32)
    values[1, 2, 0, :] = values.min() - 1  # ties: the gradient is shared among them
    feeds = {x: values}
    session = G.Session(g)
    fused = session.run([low, high, low_squared] + grads, feeds)
    plan = max(session._plans.values(), key=lambda p: len(p.steps))
    pairs = [u for u in plan.units if isinstance(u, fusion.RangePair)]
    assert [[op.type for op in u.ops] for u in pairs] == [["Min", "Max"]]
    _unfused(monkeypatch)
    plain = G.Session(g).run([low, high, low_squared] + grads, feeds)
    for a, b in zip(fused[:3], plain[:3]):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    np.testing.assert_allclose(fused[3], plain[3], rtol=1e-6)
    assert fused[0].shape == ((1, 1, 1, 6) if keepdims and axis else (1, 1, 1, 1) if keepdims
                              else (6,) if axis else ())


def test_min_and_max_of_float32_follow_tfs_cpu_kernels():
    """TF's reduce_min / reduce_max on the CPU see denormals as zeros of their sign, order -0 below
    +0, and give +inf / -inf for an empty tensor (numpy's min keeps the denormal, picks either
    zero, and refuses an empty tensor)."""
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [None], name="x")
        low, high = G.reduce_min(x), G.reduce_max(x)
    session = G.Session(g)

    def bits(values):
        return [np.float32(v).view(np.uint32) for v in
                session.run([low, high], {x: np.array(values, np.float32)})]
    assert bits([1e-42, 3.0]) == [np.float32(0.0).view(np.uint32), np.float32(3.0).view(np.uint32)]
    assert bits([-1e-42, -3.0]) == [np.float32(-3.0).view(np.uint32),
                                    np.float32(-0.0).view(np.uint32)]
    assert bits([0.0, -0.0]) == [np.float32(-0.0).view(np.uint32), np.float32(0.0).view(np.uint32)]
    assert bits([-0.0, 0.0]) == [np.float32(-0.0).view(np.uint32), np.float32(0.0).view(np.uint32)]
    assert bits([]) == [np.float32(np.inf).view(np.uint32), np.float32(-np.inf).view(np.uint32)]
    # Each op alone (no RangePair in the plan) follows the same rules.
    alone = G.Session(g)
    assert alone.run(low, {x: np.array([1e-42, 3.0], np.float32)}).view(np.uint32) == 0
    assert alone.run(high, {x: np.zeros(0, np.float32)}) == -np.inf


def test_a_convolution_of_data_skips_its_input_gradient(monkeypatch):
    """Reverse mode tells a unit which input gradients it uses: a Conv2D of the images (a
    placeholder, not differentiated) forms dw only; no product and col2im for a dx nobody reads."""
    from fqcore.graph import nn_numpy
    rng = np.random.default_rng(7)
    g = G.Graph()
    with g.as_default():
        images = G.placeholder("float32", [2, 6, 6, 3], name="images")
        w = G.placeholder("float32", [3, 3, 3, 4], name="w")
        out = G.conv2d(images, w, strides=[2, 2], padding="SAME")
        (dw,) = _gradients(g, G.reduce_sum(G.multiply(out, out)), [w])
    feeds = {t: rng.standard_normal([d for d in t.shape]).astype(np.float32) for t in (images, w)}
    calls = []  # each gradient call's input_gradient
    real_grad = nn_numpy.conv2d_grad_planned

    def recorded(x, w, dy, cols, geometry, input_gradient=True, more=()):
        calls.append(input_gradient)
        return real_grad(x, w, dy, cols, geometry, input_gradient, more)
    monkeypatch.setattr(nn_numpy, "conv2d_grad_planned", recorded)
    fused = G.Session(g).run(dw, feeds)
    assert calls == [False]
    _unfused(monkeypatch)
    plain = G.Session(g).run(dw, feeds)   # TF's Conv2D gradient forms both
    assert calls == [False, True]
    np.testing.assert_array_equal(fused.view(np.uint32), plain.view(np.uint32))


def _expand_project_graph(expand, fetch_conv=False):
    """contrib's rewrite of x [None, 5, 6, 4] -> 1x1 conv to `expand` channels (batch norm,
    ReLU6) -> 1x1 conv to 3 (batch norm): the loss, the gradients of the loss with respect to x
    and every trainable variable, the batch-norm updates, and (fetch_conv) the expansion's
    original convolution."""
    from fqcore import quantize
    L = G.layers
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [None, 5, 6, 4], name="x")
        bn = dict(momentum=0.9, epsilon=1e-3, fused=True)
        y = L.conv2d(x, expand, 1, activation="relu6", batch_norm=bn, is_training=True, scope="expand")
        y = L.conv2d(y, 3, 1, activation=None, batch_norm=bn, is_training=True, scope="project")
        target = G.constant(np.random.default_rng(6).standard_normal((2, 5, 6, 3)).astype(np.float32))
        loss = G.reduce_sum(G.multiply(y, target), name="L")
    quantize.experimental_create_training_graph(g, quant_delay=0)
    with g.as_default():
        variables = G.trainable_variables(g)
        grads = _gradients(g, loss, [x] + [v.value() for v in variables])
    fetches = [loss] + list(grads) + g.get_collection(G.GraphKeys.UPDATE_OPS)
    if fetch_conv:
        fetches.append(g.get_operation_by_name("expand/Conv2D").outputs[0])
    rng = np.random.default_rng(7)
    feeds = {x: (rng.standard_normal((2, 5, 6, 4)) + 0.5).astype(np.float32)}
    return g, fetches, feeds


def _run_once(g, fetches, feeds):
    session = G.Session(g)
    session.run(G.global_variables_initializer(g))
    values = session.run(fetches, feeds)
    plan = max(session._plans.values(), key=lambda p: len(p.steps))
    return values, session.variable_values(), plan


def test_a_pointwise_expansion_takes_its_statistics_from_its_input(monkeypatch):
    """contrib's fold keeps a layer's convolution only for its batch norm's statistics: for a 1x1
    expansion (fewer input than output channels) they come from the input's moments, with the
    convolution's Size reader, and the loss, the gradients and the batch-norm updates equal the
    unfused ops' to float32 rounding; the projection (more input than output channels) keeps
    its convolution."""
    g, fetches, feeds = _expand_project_graph(expand=12)
    fused, fused_state, plan = _run_once(g, fetches, feeds)
    units = [u for u in plan.units if isinstance(u, fusion.ConvStatistics)]
    assert [[op.type for op in u.ops] for u in units] == [["Conv2D", "FusedBatchNormV3", "Size"]]
    assert units[0].ops[0].name == "expand/Conv2D"
    assert {u.name for u in plan.units if isinstance(u, fusion.BatchNormStatistics)} == {
        "project/BatchNorm/FusedBatchNormV3"}
    _unfused(monkeypatch)
    plain, plain_state, _ = _run_once(g, fetches, feeds)
    for a, b in zip(fused, plain):
        if isinstance(b, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5 * np.abs(b).max())
    assert fused_state.keys() == plain_state.keys()
    for name in plain_state:
        np.testing.assert_allclose(fused_state[name], plain_state[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)


@pytest.mark.parametrize("expand, fetch_conv", [(4, False), (3, False), (12, True)])
def test_an_expansion_keeps_its_convolution_when_it_is_read_or_not_wider(expand, fetch_conv):
    """As many output as input channels (or fewer), or the convolution's output fetched: the
    convolution runs."""
    g, fetches, feeds = _expand_project_graph(expand, fetch_conv)
    _, _, plan = _run_once(g, fetches, feeds)
    assert not [u for u in plan.units if isinstance(u, fusion.ConvStatistics)]


def test_the_moments_follow_the_batch_norm_on_degenerate_batches():
    """No rows: NaN statistics, as the batch norm gives; one row: the variance is 0 and the
    gradient is not finite, as contrib's formula divides by P - 1 = 0."""
    from fqcore.graph import conv_statistics
    w = np.ones((2, 3), np.float32)
    mean, variance, saved_mean, saved_variance, kept = conv_statistics.moments(
        np.zeros((0, 2), np.float32), w)
    assert np.isnan(mean).all() and np.isnan(variance).all()
    x = np.array([[1.0, 2.0]], np.float32)
    mean, variance, _, saved_variance, kept = conv_statistics.moments(x, w)
    np.testing.assert_array_equal(mean, [3, 3, 3])
    np.testing.assert_array_equal(variance, [0, 0, 0])
    dx, dw = conv_statistics.gradient(x, w, mean, kept, np.ones(3, np.float32),
                                      np.ones(3, np.float32), True, True)
    assert not np.isfinite(dx).any() and not np.isfinite(dw).any()


@pytest.mark.parametrize("strides, multiplier", [((1, 1), 1), ((2, 2), 1), ((1, 1), 2)])
def test_two_depthwise_convolutions_of_one_input_make_its_gradient_in_one_pass(monkeypatch, strides,
                                                                               multiplier):
    """The fold's pair of depthwise convolutions: the second leaves its input gradient to the
    first, which makes both in one call (fq_f32_depthwise_grad_input_sum); every value equals
    the unfused ops' bit for bit. With only the second on the loss's path, it makes its own."""
    rng = np.random.default_rng(8)
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [3, 7, 6, 4], name="x")
        w1, w2 = (G.placeholder("float32", [3, 3, 4, multiplier], name=f"w{i}") for i in (1, 2))
        outs = [G.depthwise_conv2d(x, w, strides=[1, *strides, 1], padding="SAME") for w in (w1, w2)]
        loss = G.add(G.reduce_sum(G.multiply(outs[0], outs[0])), G.reduce_sum(outs[1]))
        grads = _gradients(g, loss, [x, w1, w2])
        second_only = _gradients(g, G.reduce_sum(G.multiply(outs[1], outs[1])), [x, w2])
    feeds = {t: rng.standard_normal([d for d in t.shape]).astype(np.float32) for t in (x, w1, w2)}
    calls = []
    real = _kernels.depthwise_grad_input_sum
    monkeypatch.setattr(_kernels, "depthwise_grad_input_sum", lambda *a: calls.append(a) or real(*a))
    session = G.Session(g)
    fused = session.run(outs + grads, feeds)
    fused_second = session.run(second_only, feeds)
    plan = max(session._plans.values(), key=lambda p: len(p.steps))
    pairs = [unit for unit in plan.units if isinstance(unit, fusion.PairedDepthwise)]
    assert [unit.shared for unit in pairs] == [False, True] and len(calls) == 1
    monkeypatch.undo()
    _unfused(monkeypatch)
    plain = G.Session(g).run(outs + grads, feeds)
    plain_second = G.Session(g).run(second_only, feeds)
    for a, b in zip(fused + fused_second, plain + plain_second):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize("case", ["chain only", "gradient of z", "z read twice", "zero range",
                                  "range gradients"])
def test_a_fake_quant_of_a_chain_clips_inside_the_chains_gradient(monkeypatch, case):
    """FakeQuantWithMinMaxVars of a fused chain's output z (a range tracker's activation quant):
    when its range takes no gradient, its clip happens in the chain's gradient pass and its own
    pass over z is not made; every gradient equals the unfused ops' (x's bit for bit, the
    vectors' to float32 rounding: their sums run in another order). A gradient of z asked for,
    or summed with another, is made as the op makes it."""
    rng = np.random.default_rng(9)
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [4, 5, 3, 8], name="x")
        scale, shift = (G.placeholder("float32", [8], name=n) for n in ("scale", "shift"))
        low, high = (G.placeholder("float32", [], name=n) for n in ("low", "high"))
        z = G.relu6(G.add(G.multiply(x, scale), shift))
        q = G.fake_quant_with_min_max_vars(z, low, high, num_bits=5)
        w = G.constant(rng.standard_normal((4, 5, 3, 8)).astype(np.float32))
        loss = G.reduce_sum(G.multiply(q, w))
        if case == "z read twice":
            loss = G.add(loss, G.reduce_sum(G.multiply(z, z)))
        xs = [x, scale, shift] + {"gradient of z": [z], "range gradients": [low, high]}.get(case, [])
        grads = _gradients(g, loss, xs)
    feeds = {x: (rng.standard_normal((4, 5, 3, 8)) * 3).astype(np.float32),
             scale: rng.standard_normal(8).astype(np.float32),
             shift: rng.standard_normal(8).astype(np.float32),
             low: np.float32(0.0 if case == "zero range" else -0.5),
             high: np.float32(0.0 if case == "zero range" else 4.25)}
    feeds[x].flat[:len(SPECIAL)] = SPECIAL
    calls = []
    real = _kernels.vars_grad
    monkeypatch.setattr(_kernels, "vars_grad", lambda *a: calls.append(a) or real(*a))
    session = G.Session(g)
    fused = session.run(grads, feeds)
    plan = max(session._plans.values(), key=lambda p: len(p.steps))
    assert [type(u).__name__ for u in plan.units if isinstance(u, fusion.ClippedFakeQuant)] == [
        "ClippedFakeQuant"]
    assert len(calls) == (0 if case in ("chain only", "zero range") else 1)
    monkeypatch.undo()
    _unfused(monkeypatch)
    plain = G.Session(g).run(grads, feeds)
    np.testing.assert_array_equal(fused[0].view(np.uint32), plain[0].view(np.uint32))
    for a, b in zip(fused[1:], plain[1:]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _residual_graph(activation, add_type="AddV2", shapes=((4, 5, 3, 8), (4, 5, 3, 8))):
    """a and b (a residual connection's branches), the activation of their sum, then
    L = sum(out * w) + sum(a * a) (a's gradient takes a second term); with L's gradients with
    respect to a and b."""
    g = G.Graph()
    with g.as_default():
        a, b = (G.placeholder("float32", shape, name=name) for shape, name in zip(shapes, "ab"))
        total = g.create_op(add_type, [a, b], name="add").outputs[0]
        out = (G.relu6 if activation == "Relu6" else G.relu)(total)
        w = G.constant(np.random.default_rng(3).standard_normal((4, 5, 3, 8)).astype(np.float32))
        loss = G.add(G.reduce_sum(G.multiply(out, w)), G.reduce_sum(G.multiply(a, a)), name="L")
        grads = _gradients(g, loss, [a, b])
    return g, total, out, grads


def _residual_feeds(g, shapes=((4, 5, 3, 8), (4, 5, 3, 8))):
    rng = np.random.default_rng(11)
    feeds = {}
    for shape, name in zip(shapes, "ab"):
        value = (rng.standard_normal(shape) * 4).astype(np.float32)
        value.flat[:len(SPECIAL)] = SPECIAL[rng.permutation(len(SPECIAL))]
        feeds[g.get_tensor_by_name(f"{name}:0")] = value
    return feeds


def _units_of(session, kind):
    plan = max(session._plans.values(), key=lambda p: len(p.steps))
    return [unit for unit in plan.units if isinstance(unit, kind)]


@pytest.mark.filterwarnings("ignore:invalid value encountered", "ignore:overflow encountered")
@pytest.mark.parametrize("activation", ["Relu", "Relu6"])
@pytest.mark.parametrize("add_type", ["AddV2", "Add"])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_residual_sum_and_its_activation_are_one_call_with_the_ops_bits(monkeypatch, activation,
                                                                         add_type, threads):
    """add(a, b) then Relu / Relu6 (a residual connection): one AddActivation call each way, the
    forward and both gradients bit for bit as the two ops give them (NaN, infinities, -0, 6 and
    denormals among the operands), but the sign of a NaN made from two: numpy 2.0's vector add
    gives the second operand's, later versions and the kernel the first's."""
    previous = fqcore.get_num_threads()
    fqcore.set_num_threads(threads)
    try:
        g, _, out, grads = _residual_graph(activation, add_type)
        feeds = _residual_feeds(g)
        session = G.Session(g)
        fused = session.run([out] + grads, feeds)
        assert [[op.type for op in u.ops] for u in _units_of(session, fusion.AddActivation)] == [
            [add_type, activation]]
        _unfused(monkeypatch)
        plain = G.Session(g).run([out] + grads, feeds)
    finally:
        fqcore.set_num_threads(previous)
    for got, want in zip(fused, plain):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        numbers = ~np.isnan(want)
        np.testing.assert_array_equal(got[numbers].view(np.uint32), want[numbers].view(np.uint32))


def test_a_residual_sum_that_is_read_or_broadcast_or_float64_is_not_fused():
    """A fetched or twice-read sum keeps the add and the activation apart, as do operands of
    different static shapes (numpy broadcasts them) and float64."""
    g = G.Graph()
    with g.as_default():
        a, b = (G.placeholder("float32", [None, 4], name=n) for n in "ab")
        total = G.add(a, b)
        out = G.relu6(total)
        twice = G.add(a, b, name="twice")
        read_twice = [G.relu(twice), G.multiply(twice, twice)]
        vector = G.relu(G.add(a, G.placeholder("float32", [4], name="vector")))
        x64 = G.placeholder("float64", [2, 4], name="x64")
        out64 = G.relu(G.add(x64, x64))
        rows = G.relu(G.add(G.placeholder("float32", [2, 4], name="full"),
                            G.placeholder("float32", [1, 4], name="row")))
    feeds = {a: np.ones((2, 4), np.float32), b: np.ones((2, 4), np.float32),
             g.get_tensor_by_name("vector:0"): np.ones(4, np.float32),
             g.get_tensor_by_name("full:0"): np.ones((2, 4), np.float32),
             g.get_tensor_by_name("row:0"): np.ones((1, 4), np.float32), x64: np.ones((2, 4))}

    def fused(fetches):
        session = G.Session(g)
        session.run(fetches, feeds)
        return [u.name for u in _units_of(session, fusion.AddActivation)]
    assert fused(out) == [out.op.name]
    assert fused([out, total]) == []
    assert fused(read_twice) == []
    assert fused(vector) == []
    assert fused(rows) == []
    assert fused(out64) == []


@pytest.mark.filterwarnings("ignore:invalid value encountered", "ignore:overflow encountered")
def test_a_residual_sum_broadcast_at_run_time_takes_the_ops_functions(monkeypatch):
    """Operands whose open batch dimension is fed as 1 for one and 4 for the other (numpy
    broadcasts): the AddActivation gives the two ops' values and gradients (b's summed over the
    batch)."""
    shapes = ((None, 5, 3, 8), (None, 5, 3, 8))
    g, _, out, grads = _residual_graph("Relu6", shapes=shapes)
    feeds = _residual_feeds(g, shapes=((4, 5, 3, 8), (1, 5, 3, 8)))
    session = G.Session(g)
    fused = session.run([out] + grads, feeds)
    assert len(_units_of(session, fusion.AddActivation)) == 1
    _unfused(monkeypatch)
    plain = G.Session(g).run([out] + grads, feeds)
    assert fused[2].shape == (1, 5, 3, 8)
    for got, want in zip(fused, plain):
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.filterwarnings("ignore:invalid value encountered", "ignore:overflow encountered")
@pytest.mark.parametrize("activation", ["Relu", "Relu6"])
def test_a_fake_quant_of_a_residual_sum_clips_inside_its_gradient(monkeypatch, activation):
    """A FakeQuantWithMinMaxVars of an AddActivation's output (the activation quant after a
    residual connection): its clip runs in the unit's gradient pass, its own pass is not made,
    and both gradients are the unfused ops' bits."""
    g = G.Graph()
    with g.as_default():
        a, b = (G.placeholder("float32", [4, 5, 3, 8], name=n) for n in "ab")
        out = (G.relu6 if activation == "Relu6" else G.relu)(G.add(a, b))
        q = G.fake_quant_with_min_max_vars(out, G.constant(-0.5), G.constant(4.25), num_bits=5)
        w = G.constant(np.random.default_rng(5).standard_normal((4, 5, 3, 8)).astype(np.float32))
        grads = _gradients(g, G.reduce_sum(G.multiply(q, w)), [a, b])
    feeds = _residual_feeds(g)
    calls = []
    real = _kernels.vars_grad
    monkeypatch.setattr(_kernels, "vars_grad", lambda *args: calls.append(args) or real(*args))
    session = G.Session(g)
    fused = session.run(grads, feeds)
    assert len(_units_of(session, fusion.ClippedFakeQuant)) == 1 and not calls
    monkeypatch.undo()
    _unfused(monkeypatch)
    plain = G.Session(g).run(grads, feeds)
    for got, want in zip(fused, plain):
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _demo_steps(steps, update_state=True, fetch_extra=(), batch_sizes=(64,)):
    """The demo's QAT graph after `steps` training steps on fixed batches (of the sizes in turn):
    (every variable's value, the losses, the training plan's units, the extra fetches of the
    last run)."""
    from fqcore import demo
    from fqcore.datasets import load_digits
    data = load_digits()
    t = demo.training_setup(quantized=True, learning_rate=0.01)
    g = t.session.graph
    extra = [g.as_graph_element(name) for name in fetch_extra]
    losses, fetched = [], None
    for k in range(steps):
        batch = batch_sizes[k % len(batch_sizes)]
        feeds = {t.images: data.x_train[64 * k:64 * k + batch],
                 t.labels: data.y_train[64 * k:64 * k + batch]}
        results = t.session.run([t.train_op, t.updates] + extra + [t.loss], feeds)
        fetched = results[2:-1]
        losses.append(results[-1])
    if not update_state:
        losses.append(t.session.run(t.loss, feeds, update_state=False))
    plan = max(t.session._plans.values(), key=lambda p: len(p.steps))
    return t.session.variable_values(), losses, plan.units, fetched


def _averages(units):
    """The plan's DebiasedMovingAverages: units of their own and those a RangePair runs."""
    return [u for u in units if isinstance(u, fusion.DebiasedMovingAverage)] + [
        a for u in units if isinstance(u, fusion.RangePair) for a in u.averages if a is not None]


def _bits(value):
    return np.asarray(value, np.float32).view(np.uint32)


def _without_tracker_units(monkeypatch):
    """Plans built from now on run the range trackers' clamps, moving averages and stores, the
    batch norms' moving averages and Bessel factors op by op (the other fusions as before)."""
    monkeypatch.setattr(fusion, "_debiased_average", lambda op, rules: None)
    monkeypatch.setattr(fusion, "_stored_tail", lambda extreme, rules: ())
    monkeypatch.setattr(fusion, "_moving_average", lambda op, rules: None)
    monkeypatch.setattr(fusion, "_shape_function", lambda op, rules: None)


def test_range_trackers_run_as_few_steps_with_the_same_bits(monkeypatch):
    """contrib's range trackers in the demo: the weights' five store their batch range (clamp and
    Assign) in their RangePair; the activations' six each make two zero-debiased moving averages
    with the clamp before each, which their RangePair runs in the same call as the range. The
    four batch norms' moving averages run in their BatchNormStatistics, their Bessel factors
    once per batch size. Four training steps (batches of 64, 32, 64, 32)
    leave every variable with the bits of the plan that runs those ops one by one, the other
    fusions being the same."""
    fused, fused_losses, units, _ = _demo_steps(4, batch_sizes=(64, 32))
    statistics = [u for u in units if isinstance(u, fusion.BatchNormStatistics)]
    assert not any(isinstance(u, fusion.MovingAverage) for u in units) and len(statistics) == 4
    assert all([a.ops[0].inputs[1] for a in u.averages] == u.ops[0].outputs[1:3]
               and u.runs_at is u.ops[-1] for u in statistics)
    factors = [u for u in units if isinstance(u, fusion.ShapeFunction)]
    assert len(factors) == 4 and all(len(u.values) == 2 for u in factors)
    assert {tuple(op.type for op in u.ops) for u in factors} == {
        ("Size", "Cast", "RealDiv", "Cast", "Sub", "RealDiv")}
    averages = _averages(units)
    assert len(averages) == 12
    pairs = [u for u in units if isinstance(u, fusion.RangePair) and u.one_call]
    assert len(pairs) == 6
    assert not any(isinstance(u, fusion.DebiasedMovingAverage) for u in units)
    assert all(u.runs_at is u.averages[1].ops[-1] for u in pairs)  # the later Assign
    assert {tuple(op.type for op in u.ops) for u in averages} == {
        (clamp, "Sub", "Mul", "AssignSub", "AssignAdd", "Pow", "Sub", "RealDiv", "Assign")
        for clamp in ("Minimum", "Maximum")}
    # block1's tracker: its step counter's ops run before its Sub, and join the unit there.
    assert "block1/act_quant/AssignMinEma" in {u.name for u in averages}
    tails = sorted(tuple(op.type for op in tail) for u in units
                   if isinstance(u, fusion.RangePair) for tail in u.tails)
    assert tails == [()] * 12 + [("Maximum", "Assign")] * 5 + [("Minimum", "Assign")] * 5
    # The weights' pairs: range, clamps and stored values in one clamped_range call.
    assert sum(u.clamped_stores for u in units if isinstance(u, fusion.RangePair)) == 5
    _without_tracker_units(monkeypatch)
    plain, plain_losses, units, _ = _demo_steps(4, batch_sizes=(64, 32))
    assert _averages(units) == [] and all(
        tail == () for u in units if isinstance(u, fusion.RangePair) for tail in u.tails)
    assert not any(isinstance(u, (fusion.MovingAverage, fusion.ShapeFunction)) for u in units)
    assert not any(u.averages for u in units if isinstance(u, fusion.BatchNormStatistics))
    assert [_bits(v) for v in fused_losses] == [_bits(v) for v in plain_losses]
    assert fused.keys() == plain.keys()
    for name in plain:
        np.testing.assert_array_equal(_bits(fused[name]), _bits(plain[name]), err_msg=name)
    assert plain["block1/act_quant/block1/act_quant/min/local_step"] == 4.0


def test_debiased_moving_average_without_state_updates_and_with_a_fetched_step(monkeypatch):
    """A run that does not update state leaves the trackers' variables as they were; a fetched
    intermediate (a Pow) keeps that tracker's ops apart, a fetched clamp keeps it out of its
    average, and the values stay the same."""
    before, _, _, _ = _demo_steps(1)
    after, losses, _, _ = _demo_steps(1, update_state=False)
    for name in before:
        np.testing.assert_array_equal(_bits(after[name]), _bits(before[name]), err_msg=name)
    with pytest.MonkeyPatch.context() as op_by_op:
        _without_tracker_units(op_by_op)
        _, plain_losses, _, _ = _demo_steps(1, update_state=False)
    assert _bits(losses[-1]) == _bits(plain_losses[-1])  # the stored ranges, not the batch's
    # A fetched clamp leaves its tracker's average without it (a step of its own, the clamp
    # run as an op), and the pair's other average apart too (the pair's min is read before it).
    pow_name, clamp_name = "conv1/act_quant/AssignMinEma/Pow:0", "conv1/act_quant/Minimum:0"
    values, _, units, fetched = _demo_steps(2, fetch_extra=[pow_name])
    averages = _averages(units)
    assert len(averages) == 11 and "conv1/act_quant/AssignMinEma" not in {u.name for u in averages}
    clamp_values, _, units, clamp_fetched = _demo_steps(2, fetch_extra=[clamp_name])
    alone = [u for u in units if isinstance(u, fusion.DebiasedMovingAverage)]
    assert sorted((u.name, u.clamp, len(u.ops)) for u in alone) == [
        ("conv1/act_quant/AssignMaxEma", 2, 9), ("conv1/act_quant/AssignMinEma", 0, 8)]
    _without_tracker_units(monkeypatch)
    plain, _, _, plain_fetched = _demo_steps(2, fetch_extra=[pow_name])
    assert _bits(fetched[0]) == _bits(plain_fetched[0])
    plain_clamp, _, _, plain_clamp_fetched = _demo_steps(2, fetch_extra=[clamp_name])
    assert _bits(clamp_fetched[0]) == _bits(plain_clamp_fetched[0])
    for name in plain:
        np.testing.assert_array_equal(_bits(values[name]), _bits(plain[name]), err_msg=name)
        np.testing.assert_array_equal(_bits(clamp_values[name]), _bits(plain_clamp[name]),
                                      err_msg=name)


def test_the_folds_per_channel_arithmetic_is_one_program_each_way(monkeypatch):
    """Each folded layer of the demo: the factors, the correction and the bias (the Bessel undo,
    the adds of epsilon, the Rsqrts, the products, the division, the reciprocal, the reshapes of
    a depthwise layer) run as one vector program forward and one for the gradient. Four training
    steps leave every variable with the bits of the plan that runs those ops one by one."""
    fused, fused_losses, units, _ = _demo_steps(4, batch_sizes=(64, 32))
    programs = [u for u in units if isinstance(u, fusion.VectorProgram)]
    assert sorted(u.ops[-1].name.split("/")[0] for u in programs) == [
        "block1", "block1", "conv1", "conv2"]
    kinds = {op.type for u in programs for op in u.ops}
    assert kinds == {"Mul", "AddV2", "Rsqrt", "Sub", "RealDiv", "Identity", "Reciprocal",
                     "Reshape"}
    # The weights' products ([C] times a filter) and the moving averages are not theirs.
    assert all(len(op.outputs[0].shape) <= 2 for u in programs for op in u.ops)
    assert all(len(u.gradients) == 1 and next(iter(u.gradients.values()))[0].possible
               for u in programs)
    _trains_the_same_without(monkeypatch, "_vector_program", fusion.VectorProgram, fused,
                             fused_losses)


def _trains_the_same_without(monkeypatch, finder, unit_class, fused, fused_losses):
    """The demo's four steps of _demo_steps(4, batch_sizes=(64, 32)) again with fusion's `finder`
    finding nothing: no `unit_class` in the plan, the same losses and variables bit for bit."""
    monkeypatch.setattr(fusion, finder, lambda op, rules: None)
    plain, plain_losses, units, _ = _demo_steps(4, batch_sizes=(64, 32))
    assert not any(isinstance(u, unit_class) for u in units)
    assert [_bits(v) for v in fused_losses] == [_bits(v) for v in plain_losses]
    for name in plain:
        np.testing.assert_array_equal(_bits(fused[name]), _bits(plain[name]), err_msg=name)


def _vector_graph(with_scalar_gradient):
    """Every op a vector program runs, on [6] vectors a and b and a scalar c, read by ops on a
    [None, 6] batch; the gradients of the loss with respect to a and b (and c)."""
    g = G.Graph()
    with g.as_default():
        a = G.placeholder("float32", [6], name="a")
        b = G.placeholder("float32", [6], name="b")
        c = G.placeholder("float32", [], name="c")
        batch = G.placeholder("float32", [None, 6], name="batch")

        def op(kind, *inputs):
            return g.create_op(kind, list(inputs), name=kind.lower()).outputs[0]
        s = op("Rsqrt", G.add(op("Square", a), G.constant(np.float32(1e-3))))
        r = op("Reciprocal", G.subtract(b, s))
        q = G.identity(G.divide(op("Neg", G.multiply(a, c)), r))
        column = G.reshape(G.multiply(q, s), [6, 1])
        out = G.reshape(G.add(column, column), [6])
        loss = G.add(G.reduce_sum(G.multiply(batch, out)), G.reduce_sum(G.multiply(batch, s)))
        xs = [a, b, c] if with_scalar_gradient else [a, b]
        grads = _gradients(g, loss, xs)
    rng = np.random.default_rng(6)
    feeds = {a: rng.standard_normal(12).astype(np.float32)[::2],  # not contiguous
             b: np.array([0.5, np.inf, -0.0, 1e-40, 2.0, -3.0], np.float32),
             c: np.float32(1.7), batch: rng.standard_normal((5, 6)).astype(np.float32)}
    return g, [s, out, loss] + grads, feeds


@pytest.mark.parametrize("with_scalar_gradient", [False, True])
def test_a_vector_program_equals_the_ops_on_every_opcode(monkeypatch, with_scalar_gradient):
    """Add, Sub, Mul by a vector and by a scalar, RealDiv, Neg, Reciprocal, Rsqrt, Square,
    Identity and Reshape to a column and back, with an infinity, a negative zero and a subnormal
    among the values: one program with the ops' bits, forward and gradient. A scalar whose
    gradient is asked for (a sum over the vector) takes the ops' own gradient functions."""
    g, fetches, feeds = _vector_graph(with_scalar_gradient)
    calls = []
    real = _kernels.vector_program
    monkeypatch.setattr(_kernels, "vector_program", lambda *a: calls.append(a) or real(*a))
    session = G.Session(g)
    with np.errstate(all="ignore"):
        fused = session.run(fetches, feeds)
    plan = max(session._plans.values(), key=lambda p: len(p.steps))
    programs = [u for u in plan.units if isinstance(u, fusion.VectorProgram)]
    assert len(programs) == 1 and len(programs[0].ops) == 13
    # The forward and the gradient, each refused for the strided a, then on a copy; no gradient
    # program where c takes a gradient.
    assert len(calls) == (2 if with_scalar_gradient else 4)
    monkeypatch.setattr(fusion, "_vector_program", lambda op, rules: None)
    with np.errstate(all="ignore"):
        plain = G.Session(g).run(fetches, feeds)
    for got, want in zip(fused, plain):
        np.testing.assert_array_equal(_bits(got), _bits(want))
    assert np.isinf(fused[0]).sum() == 0 and np.isnan(fused[3]).any()


def test_vector_programs_refuse_bad_operands():
    """The binding names what is wrong; a refused program writes nothing."""
    from fqcore.graph.vector_program import NEGATE
    code = np.array([[NEGATE, 1, 0, 0]], np.int32)
    none = np.empty((0, 3), np.float32)
    registers = np.full((1, 3), 7.0, np.float32)
    with pytest.raises(ValueError, match="source 0 must have 3 elements or 1, got 2"):
        _kernels.vector_program(code, none, (np.ones(2, np.float32),), registers)
    with pytest.raises(ValueError, match="source 0 must be a C-contiguous float32 array"):
        _kernels.vector_program(code, none, (np.ones(3),), registers)
    with pytest.raises(ValueError, match="unknown opcode or a row it may not use"):
        _kernels.vector_program(np.array([[1, 0, 0, 0]], np.int32), none,
                                (np.ones(3, np.float32),), registers)
    with pytest.raises(ValueError, match=r"code must be \[instructions, 4\]"):
        _kernels.vector_program(np.zeros((1, 3), np.int32), none, (np.ones(3, np.float32),),
                                registers)
    assert (registers == 7.0).all()
    _kernels.vector_program(code, none, (np.arange(3, dtype=np.float32),), registers)
    np.testing.assert_array_equal(registers, [[-0.0, -1.0, -2.0]])


def test_vector_programs_take_numpy_float32_scalars():
    """A 0-d value as numpy's operations return it (a numpy float32 scalar) is a broadcast source,
    as a one-element array is; a numpy scalar of another type is refused, named."""
    from fqcore.graph.vector_program import ADD
    code = np.array([[ADD, 2, 0, 1]], np.int32)
    none = np.empty((0, 3), np.float32)
    x = np.array([1.5, -2.0, 3.25], np.float32)
    scalar, as_array = np.empty((1, 3), np.float32), np.empty((1, 3), np.float32)
    _kernels.vector_program(code, none, (x, np.float32(0.75)), scalar)
    _kernels.vector_program(code, none, (x, np.array([0.75], np.float32)), as_array)
    np.testing.assert_array_equal(scalar, [[2.25, -1.25, 4.0]])
    np.testing.assert_array_equal(scalar, as_array)
    with pytest.raises(ValueError, match="source 1 must be a C-contiguous float32 array, got "
                                         "float64"):
        _kernels.vector_program(code, none, (x, np.float64(0.75)), scalar)


def test_the_folds_filter_products_are_one_pass_each_way(monkeypatch):
    """Each folded layer's filter times contrib's correction, then times the scale (a depthwise
    layer's vectors reshaped to [C, 1]): one FilterScaling forward and one gradient pass; four
    training steps give every variable the bits of the two Muls op by op."""
    fused, fused_losses, units, _ = _demo_steps(4, batch_sizes=(64, 32))
    scalings = [u for u in units if isinstance(u, fusion.FilterScaling)]
    assert sorted((u.shape, tuple(tuple(v.shape) for v in u.inputs[1:])) for u in scalings) == [
        ((1, 1, 32, 32), ((32,), (32,))), ((3, 3, 1, 32), ((32,), (32,))),
        ((3, 3, 32, 1), ((32, 1), (32, 1))), ((3, 3, 32, 64), ((64,), (64,)))]
    assert all([op.name.split("/")[-1] for op in u.ops] == ["correction_mult", "mul_fold"]
               for u in scalings)
    _trains_the_same_without(monkeypatch, "_filter_scaling", fusion.FilterScaling, fused,
                             fused_losses)


@pytest.mark.parametrize("filter_shape, vector_shape, count", [
    ((3, 3, 5, 7), (7,), 2), ((3, 3, 6, 1), (6, 1), 2), ((1, 1, 4, 2), (2,), 3),
    ((40, 3), (3,), 1), ((2, 3, 4), (3, 4), 2)])
def test_a_filter_scaling_equals_the_muls(monkeypatch, filter_shape, vector_shape, count):
    """Muls of a filter by vectors repeated down its rows, with NaN, infinities, signed zeros and
    subnormals among the values, the filter's gradient asked for or not: the forward and every
    gradient have the Muls' bits (their sums down the rows included)."""
    rng = np.random.default_rng(sum(filter_shape) + count)
    g = G.Graph()
    with g.as_default():
        f = G.placeholder("float32", list(filter_shape), name="f")
        vectors = [G.placeholder("float32", list(vector_shape), name=f"v{k}") for k in range(count)]
        batch = G.placeholder("float32", [None] + list(filter_shape), name="batch")
        running = f
        for k, v in enumerate(vectors):  # the vector first or second, as the fold writes them
            running = G.multiply(v, running) if k % 2 == 0 else G.multiply(running, v)
        loss = G.reduce_sum(G.multiply(batch, running))
    feeds = {f: (rng.standard_normal(filter_shape) * 3).astype(np.float32),
             batch: rng.standard_normal((2,) + filter_shape).astype(np.float32)}
    feeds[f].flat[:len(SPECIAL)] = SPECIAL[:feeds[f].size]
    feeds[f].flat[-1] = -0.0
    for v in vectors:
        feeds[v] = np.exp(rng.standard_normal(vector_shape)).astype(np.float32)
    feeds[vectors[0]].flat[0] = 1e-30  # subnormal products
    for xs in ([f] + vectors, vectors):
        with g.as_default():
            grads = _gradients(g, loss, xs) if xs is vectors else g.create_op(
                "Gradients", [loss] + xs, name="all").outputs
        session = G.Session(g)
        with np.errstate(all="ignore"):
            fused = session.run([running] + list(grads), feeds)
        plan = max(session._plans.values(), key=lambda p: len(p.steps))
        assert [len(u.ops) for u in plan.units if isinstance(u, fusion.FilterScaling)] == [count]
        with pytest.MonkeyPatch.context() as op_by_op:
            op_by_op.setattr(fusion, "_filter_scaling", lambda op, rules: None)
            with np.errstate(all="ignore"):
                plain = G.Session(g).run([running] + list(grads), feeds)
        for got, want in zip(fused, plain):
            np.testing.assert_array_equal(_bits(got), _bits(want))


def test_filter_scaling_refuses_bad_operands():
    f, v = np.ones((4, 3), np.float32), np.ones(3, np.float32)
    out = np.empty((1, 12), np.float32)
    with pytest.raises(ValueError, match=r"the vectors' element count \(5\) must divide"):
        _kernels.filter_scaling(f, (np.ones(5, np.float32),), out)
    with pytest.raises(ValueError, match="vector 1 must have 3 elements"):
        _kernels.filter_scaling(f, (v, np.ones(4, np.float32)), np.empty((2, 12), np.float32))
    with pytest.raises(ValueError, match="out must have 24 elements"):
        _kernels.filter_scaling(f, (v, v), out)
    with pytest.raises(ValueError, match="takes 1 to 8 vectors, got 9"):
        _kernels.filter_scaling(f, (v,) * 9, np.empty((9, 12), np.float32))
    with pytest.raises(ValueError, match="filter 0 must be a C-contiguous float32 array"):
        _kernels.filter_scaling_grad((f.T,), (v,), f, None, (None,))
    frozen = np.empty(3, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="dvector 0 must be writeable"):
        _kernels.filter_scaling_grad((f,), (v,), f, None, (frozen,))


def test_the_optimizers_updates_are_one_call(monkeypatch):
    """The demo's fourteen ApplyMomentum ops (one per trainable variable) run as one
    MomentumUpdates; four training steps leave every variable with the bits of the ops run one
    by one."""
    fused, fused_losses, units, _ = _demo_steps(4, batch_sizes=(64, 32))
    updates = [u for u in units if isinstance(u, fusion.MomentumUpdates)]
    assert len(updates) == 1 and len(updates[0].ops) == 14
    assert {op.type for op in updates[0].ops} == {"ApplyMomentum"}
    assert not any(getattr(u, "type", None) == "ApplyMomentum" for u in units)
    _trains_the_same_without(monkeypatch, "_momentum_updates", fusion.MomentumUpdates, fused,
                             fused_losses)


def _momentum_model(updates, nesterov):
    """A least-squares model of two variables (a matrix and a vector) trained by ApplyMomentum
    ops with a fed learning rate, one after another: `updates` lists (variable, accumulator)
    indices into [w, b] and into three accumulators, so a variable may be updated twice."""
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [5, 3], name="x")
        lr = G.placeholder("float32", [], name="lr")
        w = G.variable("w", np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))
        b = G.variable("b", np.array([0.5, -0.25], np.float32))
        accumulators = [G.variable(f"accum{k}", np.full(v.shape, 0.1 * k, np.float32))
                        for k, v in enumerate([w, b, w])]
        y = G.add(G.matmul(x, w.read), b.read)
        loss = G.reduce_mean(G.multiply(y, y))
        grads = _gradients(g, loss, [w.op.outputs[0], b.op.outputs[0]])
        momentum = G.constant(np.float32(0.9))
        applies = [g.create_op("ApplyMomentum", [[w, b][v].op.outputs[0],
                                                 accumulators[a].op.outputs[0], lr, grads[v],
                                                 momentum], {"use_nesterov": nesterov}).outputs[0]
                   for v, a in updates]
        train = G.group(*applies)
        init = G.global_variables_initializer()
    session = G.Session(g)
    session.run(init)
    rng = np.random.default_rng(3)
    feeds = [{"x:0": rng.standard_normal((5, 3)).astype(np.float32),
              "lr:0": np.float32(0.05 * (k + 1))} for k in range(3)]
    return session, train, loss, feeds


@pytest.mark.parametrize("updates, nesterov, grouped", [
    (((0, 0), (1, 1)), False, [2]), (((1, 1), (0, 0)), True, [2]),
    (((0, 0), (1, 1), (0, 2)), False, [2]), (((0, 0), (0, 2), (1, 1)), True, [2]),
    (((0, 0), (1, 1), (1, 1)), False, [2])])
def test_momentum_updates_equal_the_ops(monkeypatch, updates, nesterov, grouped):
    """Updates with a fed learning rate, with and without Nesterov, a variable or an accumulator
    written twice (a group stops before the second write, which then reads the first's result):
    the variables and accumulators have the ops' bits after three steps; a run that does not
    update state changes nothing."""
    session, train, loss, feeds = _momentum_model(updates, nesterov)
    for feed in feeds:
        session.run(train, feed)
    plan = max(session._plans.values(), key=lambda p: len(p.steps))
    assert [len(u.ops) for u in plan.units if isinstance(u, fusion.MomentumUpdates)] == grouped
    values = session.variable_values()
    session.run([train, loss], feeds[0], update_state=False)
    after = session.variable_values()
    for name in values:
        np.testing.assert_array_equal(_bits(after[name]), _bits(values[name]), err_msg=name)
    monkeypatch.setattr(fusion, "_momentum_updates", lambda op, rules: None)
    plain_session, plain_train, _, _ = _momentum_model(updates, nesterov)
    for feed in feeds:
        plain_session.run(plain_train, feed)
    plain = plain_session.variable_values()
    assert sorted(plain) == sorted(values) == ["accum0", "accum1", "accum2", "b", "w"]
    for name in plain:
        np.testing.assert_array_equal(_bits(values[name]), _bits(plain[name]), err_msg=name)
    assert not np.array_equal(plain["w"], np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))


def test_the_momentum_group_binding_names_what_it_refuses():
    ok, f64 = np.ones((2, 3), np.float32), np.ones((2, 3))
    one = (np.float32(0.1),)
    with pytest.raises(ValueError, match=r"must have the same length, got \(1, 1, 1, 2, 1, 1\)"):
        fqcore._kernels.momentum_group((ok,), (ok,), (ok,), one * 2, one, (False,))
    with pytest.raises(ValueError, match="variable 0 must be a float32 array, got ndarray float64"):
        fqcore._kernels.momentum_group((f64,), (ok,), (ok,), one, one, (False,))
    with pytest.raises(ValueError, match=r"gradient 1 must be a float32 array of shape \(2, 3\), "
                                         r"got ndarray float32 \(3, 2\)"):
        fqcore._kernels.momentum_group((ok, ok), (ok, ok), (ok, ok.T), one * 2, one * 2,
                                       (False, False))
    with pytest.raises(ValueError, match="accumulator 0 must be a float32 array"):
        fqcore._kernels.momentum_group((ok,), ([1.0] * 6,), (ok,), one, one, (False,))
    new_variables, new_accumulators = fqcore._kernels.momentum_group((), (), (), (), (), ())
    assert new_variables == [] and new_accumulators == []


def _tracker_ops(extreme, clamp, bound, read, decay_complement, increment, base, one, biased,
                 step):
    """A range tracker's nine ops on float32 scalars as the unfused plan runs them (numpy's
    float32 scalar operations, the Pow op's power): (biased', step', average)."""
    f32 = [np.array(v, np.float32) for v in (extreme, bound, read, decay_complement, increment,
                                              base, one, biased, step)]
    extreme, bound, read, decay_complement, increment, base, one, biased, step = f32
    value = {0: extreme, 1: np.minimum(extreme, bound), 2: np.maximum(extreme, bound)}[clamp]
    new_biased = np.subtract(biased, np.multiply(np.subtract(read, value), decay_complement))
    new_step = np.add(step, increment)
    power = math_ops.power(base, new_step)
    return new_biased, new_step, np.divide(new_biased, np.subtract(one, power))


@pytest.mark.parametrize("clamp", [0, 1, 2])
def test_a_tracker_step_has_the_ops_bits_on_special_values(clamp):
    """fq_f32_tracker_step (one range tracker's clamp and debiased moving average, as a RangePair
    or a DebiasedMovingAverage runs it) against the ops one by one, every extreme against every
    bound of SPECIAL (NaNs of both signs, infinities, zeros of both signs, subnormals): the
    clamp keeps numpy's choices (a NaN wins, the first of two; of equal values the second)."""
    # A read and a biased value of -0 carry the sign of the clamp's zero into biased'.
    for extreme, bound, read, biased in itertools.product(SPECIAL, SPECIAL, (0.25, -0.0),
                                                          (-0.5, -0.0)):
        operands = (clamp, bound, np.float32(read), np.float32(0.01), np.float32(1.0),
                    np.float32(0.99), np.float32(1.0), np.float32(biased), np.float32(6.0))
        got = fqcore._kernels.tracker_step(extreme, *operands)
        want = _tracker_ops(extreme, *operands)
        assert _bits(got).tolist() == _bits(want).tolist(), (extreme, bound, read, biased)
        # The same through range_trackers, x holding the extreme and a 1 (the range kernel's
        # min and max, as the Min and Max ops give them, each through its side's step).
        x = np.array([extreme, 1.0], np.float32)
        low, high = np.empty(1, np.float32), np.empty(1, np.float32)
        fqcore._kernels.batch_range(x, low, high)
        high_operands = operands[:2] + (7.0,) + operands[3:]
        pair = fqcore._kernels.range_trackers(x, (clamp, clamp), operands[1:7] + high_operands[1:7],
                                              operands[7:] + high_operands[7:])
        want_low = _tracker_ops(low[0], *operands)
        want_high = _tracker_ops(high[0], *high_operands)
        assert _bits(pair).tolist() == _bits([want_low[2], want_high[2], *want_low[:2],
                                              *want_high[:2]]).tolist(), (extreme, bound)


@pytest.mark.parametrize("clamp", [0, 1, 2])
def test_a_clamped_range_has_the_ops_bits_on_special_values(clamp):
    """clamped_range (a last-value tracker pair's batch range, clamps and stored values in one
    call) against the Min / Max and Minimum / Maximum ops, every extreme against every bound of
    SPECIAL: the range kernel's extremes, each through numpy's clamp."""
    for extreme, bound in itertools.product(SPECIAL, SPECIAL):
        x = np.array([extreme, 1.0], np.float32)
        low, high = np.empty(1, np.float32), np.empty(1, np.float32)
        fqcore._kernels.batch_range(x, low, high)
        got = fqcore._kernels.clamped_range(x, (clamp, clamp), (bound, -bound))
        want = [{0: v, 1: np.minimum(v, b), 2: np.maximum(v, b)}[clamp]
                for v, b in ((low[0], np.float32(bound)), (high[0], -np.float32(bound)))]
        assert _bits(got).tolist() == _bits(want).tolist(), (extreme, bound)
        assert all(v.shape == () and v.dtype == np.float32 for v in got)
    with pytest.raises(ValueError, match="takes 2 clamps and 2 bounds, got 2 and 1"):
        fqcore._kernels.clamped_range(x, (0, 0), (0.0,))
    with pytest.raises(ValueError, match="x must be a C-contiguous float32 array"):
        fqcore._kernels.clamped_range(np.ones((2, 3), np.float32).T, (0, 0), (0.0, 0.0))


def test_range_trackers_takes_the_range_of_the_whole_tensor_and_names_what_it_refuses():
    x = np.array([[3.0, -2.0], [0.5, 7.0]], np.float32)
    # Decay complement 1, base 0.5: biased' is the extreme, the average twice it.
    side, state = (0.0, 0.0, 1.0, 1.0, 0.5, 1.0), (0.0, 0.0, 0.0, 0.0)
    results = fqcore._kernels.range_trackers(x, (0, 0), side * 2, state)
    assert [float(r) for r in results] == [-4.0, 14.0, -2.0, 1.0, 7.0, 1.0]
    assert all(r.shape == () and r.dtype == np.float32 for r in results)
    with pytest.raises(ValueError, match="x must be a C-contiguous float32 array"):
        fqcore._kernels.range_trackers(x.T, (0, 0), side * 2, state)
    with pytest.raises(ValueError, match="x must be a C-contiguous float32 array"):
        fqcore._kernels.range_trackers(x.astype(np.float64), (0, 0), side * 2, state)
    with pytest.raises(ValueError, match="takes 2 clamps, 12 operands and 4 state values, got 2, "
                                         "11 and 4"):
        fqcore._kernels.range_trackers(x, (0, 0), (side * 2)[:11], state)
    with pytest.raises(ValueError, match="clamp must be 0 \\(none\\), 1 \\(minimum\\) or 2 "
                                         "\\(maximum\\), got 3"):
        fqcore._kernels.range_trackers(x, (0, 3), side * 2, state)
    with pytest.raises(ValueError, match="clamp must be .*, got -1"):
        fqcore._kernels.tracker_step(1.0, -1, *side, 0.0, 0.0)


def test_batch_norm_statistics_skip_the_checks_only_where_the_kernel_reads_the_inputs_as_given():
    """nhwc_float32_statistics (a BatchNormStatistics' forward): fused_batch_norm's statistics bit
    for bit on a C-contiguous float32 NHWC x with float32 [C] scale and offset; None (the unit
    then takes the checked path) for anything else."""
    from fqcore.batch_norm import nhwc_float32_statistics
    rng = np.random.default_rng(7)
    x = rng.normal(3.0, 2.0, (4, 5, 3, 8)).astype(np.float32)
    scale, offset = rng.random(8, np.float32), rng.random(8, np.float32)
    checked = fqcore.fused_batch_norm(x, scale, offset, epsilon=1e-3, normalize=False)
    got = nhwc_float32_statistics(x, scale, offset, 1e-3)
    assert [_bits(v).tolist() for v in got] == [
        _bits(v).tolist() for v in (checked.batch_mean, checked.batch_variance,
                                    checked.reserve_space_1, checked.reserve_space_2)]
    refused = [(x.astype(np.float16), scale, offset), (x[:, :, :, ::2], scale[:4], offset[:4]),
               (np.asfortranarray(x), scale, offset), (x[0], scale, offset),
               (x.tolist(), scale, offset), (x, scale[:7], offset), (x, scale, offset[::-1]),
               (x, scale.astype(np.float64), offset), (x, scale.reshape(1, 8), offset),
               (_misaligned(x), scale, offset), (x, _misaligned(scale), offset),
               (x.astype(">f4"), scale, offset), (x, scale, offset.astype(">f4"))]
    for args in refused:
        assert nhwc_float32_statistics(*args, 1e-3) is None


def _misaligned(array):
    """A C-contiguous copy of a float32 array one byte off a float's alignment (numpy: not
    aligned)."""
    raw = np.empty(array.nbytes + 1, np.uint8)
    copy = raw[1:].view(np.float32).reshape(array.shape)
    copy[...] = array
    assert copy.flags.c_contiguous and not copy.flags.aligned
    return copy


def _tracker_alike_op_by_op(monkeypatch, quantize, batches):
    """(the fused plan's units, the op-by-op plan's units) of a graph quantize(g, x) makes on a
    [None, 6] placeholder x, run on `batches` in a fresh session each: every output and variable
    the same bits in both."""
    def run():
        g = G.Graph()
        with g.as_default():
            x = G.placeholder("float32", [None, 6], name="x")
            y = quantize(g, x)
            session = G.Session(g)
            session.run(G.global_variables_initializer(g))
            outputs = [session.run(y, {x: batch}) for batch in batches]
        plan = max(session._plans.values(), key=lambda p: len(p.order))
        return outputs, session.variable_values(), plan.units
    fused, fused_values, fused_units = run()
    _without_tracker_units(monkeypatch)
    plain, plain_values, plain_units = run()
    assert [_bits(v).tolist() for v in fused] == [_bits(v).tolist() for v in plain]
    assert fused_values.keys() == plain_values.keys()
    for name in plain_values:
        np.testing.assert_array_equal(_bits(fused_values[name]), _bits(plain_values[name]),
                                      err_msg=name)
    return fused_units, plain_units


def test_a_range_tracker_whose_max_comes_first_steps_in_one_call_with_the_same_bits(monkeypatch):
    """A moving-average tracker whose BatchMax the graph makes before its BatchMin: its RangePair
    (max first) still runs the range and both averages in one call, each output and variable
    the bits of the ops one by one, over steps of different batches (a strided one and one not
    aligned too)."""
    from fqcore.graph import build
    from fqcore.quantize import quant_ops

    def max_first(x, num_bits, narrow_range, symmetric, per_channel=False):
        batch_max = build.reduce_max(x, name="BatchMax")
        batch_min = build.reduce_min(x, name="BatchMin")
        return (build.minimum(batch_min, np.float32(0.0)),
                build.maximum(batch_max, np.float32(0.0)))
    monkeypatch.setattr(quant_ops, "_range", max_first)
    rng = np.random.default_rng(3)
    batches = [rng.normal(k, 2.0 + k, (5, 6)).astype(np.float32) for k in range(4)]
    batches.append(rng.normal(1.0, 3.0, (6, 5)).astype(np.float32).T)  # strided: on a copy
    batches.append(_misaligned(batches[0]))  # not aligned: on a copy too
    units, plain_units = _tracker_alike_op_by_op(
        monkeypatch, lambda g, x: quant_ops.moving_avg_quantize(g, x, "q", True, ema_decay=0.9),
        batches)
    pairs = [u for u in units if isinstance(u, fusion.RangePair)]
    assert len(pairs) == 1 and pairs[0].picks == (1, 0) and pairs[0].one_call
    assert not any(u.averages != (None, None) for u in plain_units
                   if isinstance(u, fusion.RangePair))


def test_a_last_value_tracker_clamps_and_stores_in_one_call_with_the_same_bits(monkeypatch):
    """A last-value tracker (contrib's weights' quant) on batches wholly above and wholly below
    zero, where its Minimum and Maximum with 0 decide the stored range (and a strided one and one
    not aligned): its RangePair's one clamped_range call gives each output and variable the bits
    of the ops one by one."""
    from fqcore.quantize import quant_ops
    rng = np.random.default_rng(5)
    batches = [rng.uniform(1.0, 3.0, (5, 6)).astype(np.float32),
               rng.uniform(-3.0, -1.0, (5, 6)).astype(np.float32),
               rng.normal(0.0, 2.0, (5, 6)).astype(np.float32),
               rng.normal(0.0, 2.0, (6, 5)).astype(np.float32).T,  # strided: on a copy
               _misaligned(rng.normal(0.0, 2.0, (5, 6)).astype(np.float32))]  # on a copy too
    units, plain_units = _tracker_alike_op_by_op(
        monkeypatch, lambda g, x: quant_ops.last_value_quantize(g, x, "q", True), batches)
    pairs = [u for u in units if isinstance(u, fusion.RangePair)]
    assert len(pairs) == 1 and pairs[0].clamped_stores and pairs[0].store_clamps == (1, 2)
    assert not any(u.clamped_stores for u in plain_units if isinstance(u, fusion.RangePair))


def test_the_chain_and_depthwise_bindings_take_any_shape_and_name_what_they_refuse():
    """The per-channel chain, residual add, folded batch-norm gradient and depthwise bindings read
    float32 arrays of any shape in place (the graph passes its values as they are: the bits of
    their flat views; the chain's bindings make their outputs in x's shape) and refuse, naming
    the operand, an array that is strided, of another dtype or byte order, or not aligned."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    scale, shift = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    g = nn_numpy.conv_geometry(x, np.ones((3, 3, 5, 1), np.float32))
    w = rng.standard_normal((3, 3, 5, 1)).astype(np.float32)

    def depthwise(x):
        y = np.empty((2, 3, 4, 5), np.float32)
        _kernels.depthwise(x, w, 1, g.sizes, y)
        return y
    calls = {
        "channel_affine": lambda x: _kernels.channel_affine(x, 5, scale, shift, None, 2),
        "channel_affine_grad": lambda x: _kernels.channel_affine_grad(
            x, x, x, 5, scale, 2, True, True, True)[0],
        "add_activation": lambda x: _kernels.add_activation(x, x, 1),
        "fold_batch_norm_grad": lambda x: _kernels.fold_batch_norm_grad(x, 5, scale, shift,
                                                                      scale, 3.0),
        "depthwise": depthwise,
    }
    for name, call in calls.items():
        shaped, flat = call(x), call(x.ravel())
        assert shaped.shape == x.shape and shaped.dtype == np.float32, name
        np.testing.assert_array_equal(_bits(shaped).ravel(), _bits(flat).ravel(), err_msg=name)
        for refused in (np.asfortranarray(x), x.astype(">f4"), _misaligned(x), x.astype(np.float64)):
            operand = {"add_activation": "a", "channel_affine_grad": "y_backprop"}.get(name, "x")
            with pytest.raises(ValueError, match=f"{operand} must be a C-contiguous float32 array"):
                call(refused)
    with pytest.raises(ValueError, match="y must be a C-contiguous float32 array, got ndarray of "
                                         "float32, not aligned"):
        _kernels.depthwise(x, w, 1, g.sizes, _misaligned(x))
    with pytest.raises(ValueError, match="scale must have 5 elements, got 4"):
        _kernels.channel_affine(x, 5, scale[:4], None, None, 0)
    dx, dscale, dshift = _kernels.channel_affine_grad(x, x, x, 5, None, 0, False, False, True)
    assert dx is None and dscale is None and dshift.shape == (5,)


def test_units_take_strided_values_through_contiguous_copies():
    """A per-channel chain, a residual add and a depthwise convolution whose input is a strided
    view (a transpose's output) or is not aligned run their kernels on a copy in the kernels'
    form: the values and gradients of the same graph fed the contiguous array, bit for bit."""
    rng = np.random.default_rng(4)
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 5, 4, 3], name="x")
        w = G.placeholder("float32", [3, 3, 3, 1], name="w")
        bias = G.constant(rng.standard_normal(3).astype(np.float32))
        chain = G.relu6(G.bias_add(x, bias))
        residual = G.relu(G.add(x, chain))
        depthwise = G.depthwise_conv2d(residual, w, strides=[1, 1], padding="SAME")
        loss = G.reduce_sum(G.multiply(depthwise, depthwise))
        grads = _gradients(g, loss, [x, w])
    data = rng.standard_normal((2, 4, 5, 3)).astype(np.float32)
    strided = np.transpose(data, (0, 2, 1, 3))
    assert not strided.flags.c_contiguous
    feeds_w = rng.standard_normal((3, 3, 3, 1)).astype(np.float32)
    session = G.Session(g)
    plan_units = {type(unit).__name__ for unit in session._plan(
        [g.as_graph_element(t) for t in (depthwise, *grads)], {}).units}
    assert {"FusedChannelChain", "AddActivation"} <= plan_units
    fetches = [depthwise, *grads]
    from_copy = session.run(fetches, {x: np.ascontiguousarray(strided), w: feeds_w})
    for feed in (strided, _misaligned(strided)):
        from_view = session.run(fetches, {x: feed, w: feeds_w})
        for a, b in zip(from_view, from_copy):
            np.testing.assert_array_equal(_bits(a), _bits(b))
