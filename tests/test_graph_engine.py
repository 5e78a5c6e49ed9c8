"""fqcore.graph engine semantics: names and scopes, lookups, Session.run (fetches, feeds, variables,
snapshot reads, update_state), dead cond branches, optimizers against TF's formulas, layer names."""
import collections

import numpy as np
import pytest

import fqcore.graph as G
from fqcore.graph import GraphKeys

F32 = np.float32


def _names(g):
    return [op.name for op in g.get_operations()]


# ---------------------------------------------------------------------------------------------------
# Names, scopes, order, lookups.

def test_unique_names_get_numeric_suffixes():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2], name="x")
        a, b, c = G.add(x, x), G.add(x, x), x + x
        assert (a.op.name, b.op.name, c.op.name) == ("add", "add_1", "add_2")
        assert a.name == "add:0"
        i1, i2 = G.identity(x, name="same"), G.identity(x, name="same")
        assert (i1.op.name, i2.op.name) == ("same", "same_1")
        # an explicit name that collides with a generated one is made unique too
        assert G.identity(x, name="add_1").op.name == "add_1_1"


def test_name_scopes_nest_and_reenter():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2], name="x")
        with G.name_scope("outer") as scope:
            assert scope == "outer/"
            assert G.add(x, x).op.name == "outer/add"
            with G.name_scope("inner") as inner:
                assert inner == "outer/inner/"
                assert G.identity(x).op.name == "outer/inner/Identity"
        with G.name_scope("outer") as again:
            assert again == "outer_1/"  # a second scope of the same name is made unique
            assert G.add(x, x).op.name == "outer_1/add"
        with G.name_scope("outer/") as reentered:
            assert reentered == "outer/"  # a trailing '/' re-enters it as is
            assert G.add(x, x).op.name == "outer/add_1"
        with G.name_scope("outer/inner/"):
            assert G.identity(x).op.name == "outer/inner/Identity_1"
        assert g.get_name_scope() == ""
        assert G.identity(x).op.name == "Identity"


def test_empty_name_scope_resets_to_the_root_and_taken_suffixes_are_skipped():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2], name="x")
        with G.name_scope("a"):
            with G.name_scope(""):
                assert G.identity(x).op.name == "Identity"
            assert G.identity(x).op.name == "a/Identity"
        assert G.identity(x, name="foo_1").op.name == "foo_1"
        assert G.identity(x, name="foo").op.name == "foo"
        assert G.identity(x, name="foo").op.name == "foo_2"  # foo_1 is taken
        with pytest.raises(ValueError, match="already exists"):
            g.create_op("Identity", [x], full_name="foo")


def test_binary_builder_constants_are_named_under_the_op():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2], name="x")
        y = G.multiply(x, 2.0)
    assert "mul/y" in _names(g) and y.op.name == "mul"
    assert g.get_operation_by_name("mul/y").type == "Const"


def test_lookup_errors():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2], name="x")
    assert g.get_operation_by_name("x") is x.op
    assert g.get_tensor_by_name("x:0") is x
    with pytest.raises(KeyError, match="nope"):
        g.get_operation_by_name("nope")
    with pytest.raises(KeyError, match="nope"):
        g.get_tensor_by_name("nope:0")
    with pytest.raises(ValueError, match="'x'"):
        g.get_tensor_by_name("x")  # not a tensor name
    with pytest.raises(KeyError, match="x:3"):
        g.get_tensor_by_name("x:3")


def test_run_follows_dependencies_not_creation_order():
    """After rerouting an input to an op created later, the plan still runs producers first."""
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [3], name="x")
        y = G.multiply(x, 2.0)          # created first
        z = G.add(x, 1.0)               # created after y
    y.op._update_input(0, z)            # y = (x + 1) * 2 now depends on z
    got = G.Session(g).run(y, {x: np.array([1, 2, 3], F32)})
    np.testing.assert_array_equal(got, [4, 6, 8])


def test_cycle_is_an_error():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [3], name="x")
        a = G.identity(x, name="a")
        b = G.identity(a, name="b")
    a.op._update_input(0, b)
    with pytest.raises(ValueError, match="cycle"):
        G.Session(g).run(b, {x: np.zeros(3, F32)})


def test_control_dependencies_order_writes():
    g = G.Graph()
    with g.as_default():
        v = G.variable("v", np.zeros(2, F32))
        first = g.create_op("AssignAdd", [v.op.outputs[0], G.constant(np.ones(2, F32))], name="first")
        with G.control_dependencies([first]):
            second = g.create_op("Assign", [v.op.outputs[0], G.constant(np.full(2, 5, F32))],
                                 name="second")
        third = g.create_op("AssignAdd", [v.op.outputs[0], G.constant(np.ones(2, F32))],
                            name="third", control_inputs=[second])
        init = G.global_variables_initializer()
    assert second.control_inputs == [first] and third.control_inputs == [second]
    s = G.Session(g)
    s.run(init)
    s.run(third)  # runs first, second, third in that order
    np.testing.assert_array_equal(s.variable_value("v"), [6, 6])


# ---------------------------------------------------------------------------------------------------
# Session.run: fetch structures, feeds.

@pytest.fixture
def small():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 3], name="input")
        labels = G.placeholder("int32", [2], name="labels")
        double = G.multiply(x, 2.0, name="double")
        total = G.reduce_sum(x, name="total")
        noop = G.no_op()
    return g, x, labels, double, total, noop


def test_fetch_structures(small):
    g, x, _, double, total, noop = small
    s = G.Session(g)
    xv = np.arange(6, dtype=F32).reshape(2, 3)
    feed = {x: xv}
    single = s.run(double, feed)
    assert isinstance(single, np.ndarray)
    np.testing.assert_array_equal(single, 2 * xv)
    as_list = s.run([double, total], feed)
    assert isinstance(as_list, list) and len(as_list) == 2 and float(as_list[1]) == 15.0
    as_tuple = s.run((total, double), feed)
    assert isinstance(as_tuple, tuple) and float(as_tuple[0]) == 15.0
    as_dict = s.run({"d": double, "t": total}, feed)
    assert set(as_dict) == {"d", "t"} and float(as_dict["t"]) == 15.0
    nested = s.run([total, {"a": (double, total), "b": [noop]}], feed)
    assert float(nested[0]) == 15.0
    assert isinstance(nested[1]["a"], tuple)
    np.testing.assert_array_equal(nested[1]["a"][0], 2 * xv)
    assert nested[1]["b"] == [None]
    assert s.run(noop) is None
    assert float(s.run("total:0", {"input:0": xv})) == 15.0  # names work for fetches and feeds
    assert s.run([]) == []



def test_fetch_namedtuples_keep_their_type_and_fields(small):
    """A namedtuple of fetches comes back as that namedtuple, flat or holding nested fetches,
    as in TF's Session.run."""
    g, x, _, double, total, _ = small
    s = G.Session(g)
    xv = np.arange(6, dtype=F32).reshape(2, 3)
    Pair = collections.namedtuple("Pair", "doubled summed")
    flat = s.run(Pair(double, total), {x: xv})
    assert type(flat) is Pair
    np.testing.assert_array_equal(flat.doubled, 2 * xv)
    assert float(flat.summed) == 15.0
    nested = s.run([Pair(double, [total]), Pair(total, {"t": total})], {x: xv})
    assert [type(p) for p in nested] == [Pair, Pair]
    assert isinstance(nested[0].summed, list) and float(nested[0].summed[0]) == 15.0
    assert float(nested[1].doubled) == 15.0 and float(nested[1].summed["t"]) == 15.0

def test_feed_validation_names_the_tensor(small):
    g, x, labels, double, _, _ = small
    s = G.Session(g)
    with pytest.raises(ValueError, match=r"input:0.*\(2, 3\)|\(3, 2\).*input:0"):
        s.run(double, {x: np.zeros((3, 2), F32)})
    with pytest.raises(ValueError, match="input:0"):
        s.run(double, {x: np.zeros(6, F32)})
    with pytest.raises(TypeError, match="labels:0"):
        s.run(labels, {labels: np.zeros(2, F32)})  # float into int32
    with pytest.raises(TypeError, match="input:0"):
        s.run(double, {x: np.array([["a", "b", "c"]] * 2)})
    with pytest.raises(TypeError, match="double"):
        s.run(double, {double.op: np.zeros((2, 3), F32)})  # keys must be tensors
    # an int value into a float placeholder is converted, as TF does
    np.testing.assert_array_equal(s.run(double, {x: np.ones((2, 3), np.int32)}), np.full((2, 3), 2))
    # a wider int converts only when every value fits: no silent wrap-around
    np.testing.assert_array_equal(s.run(labels, {labels: np.array([1, 2], np.int64)}), [1, 2])
    with pytest.raises(ValueError, match=r"int64 value 4294967297 to 'labels:0' \(int32\): out of its range"):
        s.run(labels, {labels: np.array([1, 2**32 + 1], np.int64)})
    with pytest.raises(TypeError, match="feed_dict must be a dict"):
        s.run(double, [(x, np.zeros((2, 3), F32))])
    with pytest.raises(TypeError, match="graph must be an fqcore.graph.Graph or None, got str"):
        G.Session("x")


def test_unfed_placeholder_is_an_error_naming_it(small):
    g, _, _, double, _, _ = small
    with pytest.raises(ValueError, match="input"):
        G.Session(g).run(double)


def test_feeding_an_intermediate_tensor_skips_its_producer():
    g2 = G.Graph()
    with g2.as_default():
        p = G.placeholder("float32", [2], name="p")
        q = G.reshape(p, [5, 7])  # would fail if it ran
        r = G.add(q, 1.0)
    got = G.Session(g2).run(r, {q: np.zeros((5, 7), F32)})
    np.testing.assert_array_equal(got, np.ones((5, 7)))


# ---------------------------------------------------------------------------------------------------
# Variables: initialization, snapshot reads, update_state=False.

def _counter_graph():
    g = G.Graph()
    with g.as_default():
        v = G.variable("v", np.array([1.0, 2.0], F32))
        w = G.variable("w", np.array(10.0, F32))
        init = G.global_variables_initializer()
    return g, v, w, init


def test_uninitialized_variable_use_is_an_error():
    g, v, w, init = _counter_graph()
    with g.as_default():
        y = G.multiply(v.read, 2.0)
    s = G.Session(g)
    with pytest.raises(ValueError, match="'v'.*initializ"):
        s.run(y)
    with pytest.raises(ValueError, match="'v'.*not initialized"):
        s.variable_value("v")
    s.run(init)
    np.testing.assert_array_equal(s.run(y), [2, 4])


def test_fetching_an_uninitialized_variable_read_raises():
    g, v, _, _ = _counter_graph()
    with pytest.raises(ValueError, match="'v'"):
        G.Session(g).run(v.read)


def test_reads_see_the_start_of_run_value_even_after_an_assign_in_the_same_run():
    g, v, w, init = _counter_graph()
    with g.as_default():
        assign = g.create_op("Assign", [v.op.outputs[0], G.constant(np.array([7.0, 8.0], F32))],
                             name="assign")
        before = G.multiply(v.read, 1.0, name="before")
        # created after the assign and ordered after it by a control dependency: still the snapshot
        with G.control_dependencies([assign]):
            after = G.multiply(v.read, 1.0, name="after")
            late_read = G.identity(v.read, name="late_read")
    s = G.Session(g)
    s.run(init)
    new, b, a, r = s.run([assign.outputs[0], before, after, late_read])
    np.testing.assert_array_equal(new, [7, 8])          # the write op yields the new value
    np.testing.assert_array_equal(b, [1, 2])
    np.testing.assert_array_equal(a, [1, 2])
    np.testing.assert_array_equal(r, [1, 2])
    np.testing.assert_array_equal(s.variable_value("v"), [7, 8])   # the write landed in the store
    np.testing.assert_array_equal(s.run(after), [7, 8])            # ...and the next run sees it
    # The reads are made before the steps: the variable and its `read` take no step; the
    # Identity under a control edge keeps its own.
    plan = s._plan([assign.outputs[0], before, after, late_read], {})
    assert [t.op.name for t in plan.variable_reads[0]] == ["v", "v/read"]


def test_update_state_false_leaves_every_variable_unchanged():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [4, 2, 2, 3], name="x")
        y = G.placeholder("int32", [4], name="y")
        h = G.layers.conv2d(x, 2, kernel_size=2, batch_norm=True, activation="relu6", scope="c")
        logits = G.layers.dense(G.layers.flatten(h), 3, scope="fc")
        loss = G.layers.sparse_softmax_cross_entropy(y, logits)
        train = G.AdamOptimizer(0.1).minimize(loss)
        updates = g.get_collection(GraphKeys.UPDATE_OPS)
        init = G.global_variables_initializer()
    s = G.Session(g)
    s.run(init)
    rng = np.random.default_rng(0)
    feed = {x: rng.standard_normal((4, 2, 2, 3)).astype(F32), y: np.array([0, 1, 2, 1], np.int32)}
    before = s.variable_values()
    assert len(before) >= 10
    l1 = s.run([train, updates, loss], feed, update_state=False)[2]
    after = s.variable_values()
    assert set(after) == set(before)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    l2 = s.run([train, updates, loss], feed)[2]   # a real step does change them
    assert l1 == l2
    changed = [n for n in before if not np.array_equal(s.variable_value(n), before[n])]
    assert "c/weights" in changed and "c/BatchNorm/moving_mean" in changed
    assert "beta1_power" in changed and "fc/weights/Adam" in changed


def test_fetched_values_do_not_alias_variable_state():
    g, v, _, init = _counter_graph()
    s = G.Session(g)
    s.run(init)
    fetched = s.run(v.read)
    fetched[...] = 99.0
    np.testing.assert_array_equal(s.variable_value("v"), [1, 2])


def test_set_variable_value_validates():
    g, v, _, init = _counter_graph()
    s = G.Session(g)
    s.set_variable_value("v", [3.0, 4.0])
    np.testing.assert_array_equal(s.run(v.read), [3, 4])
    with pytest.raises(ValueError, match="'v'.*shape"):
        s.set_variable_value("v", np.zeros(3, F32))
    with pytest.raises(ValueError, match="v/read"):
        s.set_variable_value("v/read", np.zeros(2, F32))


# ---------------------------------------------------------------------------------------------------
# cond: dead branches.

def _cond_graph():
    g = G.Graph()
    with g.as_default():
        pred = G.placeholder("bool", [], name="pred")
        x = G.placeholder("float32", [6], name="x")
        out = G.cond(pred, lambda: G.reshape(x, [5, 7]) * 1.0, lambda: x * 2.0)  # true: impossible
    return g, pred, x, out


def test_untaken_branch_does_not_run():
    g, pred, x, out = _cond_graph()
    s = G.Session(g)
    xv = np.arange(6, dtype=F32)
    np.testing.assert_array_equal(s.run(out, {pred: False, x: xv}), 2 * xv)
    with pytest.raises(ValueError, match="reshape"):  # the same branch does fail when taken
        s.run(out, {pred: True, x: xv})


def test_untaken_branch_has_no_side_effects():
    g = G.Graph()
    with g.as_default():
        pred = G.placeholder("bool", [], name="pred")
        v = G.variable("v", np.array(0.0, F32))

        def bump():
            return g.create_op("AssignAdd", [v.op.outputs[0], G.constant(F32(1))]).outputs[0]
        out = G.cond(pred, bump, lambda: G.identity(v.read))
        init = G.global_variables_initializer()
    s = G.Session(g)
    s.run(init)
    s.run(out, {pred: False})
    assert float(s.variable_value("v")) == 0.0
    s.run(out, {pred: True})
    assert float(s.variable_value("v")) == 1.0


def test_cond_names_follow_tf():
    g, _, _, _ = _cond_graph()
    names = _names(g)
    for name in ("cond/Switch", "cond/switch_t", "cond/switch_f", "cond/pred_id", "cond/Merge"):
        assert name in names
    assert g.get_operation_by_name("cond/Merge").type == "Merge"


def test_fetching_a_dead_tensor_is_an_error():
    g = G.Graph()
    with g.as_default():
        pred = G.placeholder("bool", [], name="pred")
        x = G.placeholder("float32", [2], name="x")
        inside = []

        def true_fn():
            inside.append(x * 3.0)
            return inside[0]
        G.cond(pred, true_fn, lambda: x)
    with pytest.raises(ValueError, match="did not run"):
        G.Session(g).run(inside[0], {pred: False, x: np.ones(2, F32)})


def test_merge_gradient_goes_to_the_taken_branch():
    g = G.Graph()
    with g.as_default():
        pred = G.placeholder("bool", [], name="pred")
        x = G.placeholder("float32", [3], name="x")
        out = G.cond(pred, lambda: x * 3.0, lambda: x * x)
        loss = G.reduce_sum(out)
        (dx,) = g.create_op("Gradients", [loss, x], name="gradients").outputs
    s = G.Session(g)
    xv = np.array([1.0, -2.0, 0.5], F32)
    np.testing.assert_array_equal(s.run(dx, {pred: True, x: xv}), [3, 3, 3])
    np.testing.assert_array_equal(s.run(dx, {pred: False, x: xv}), 2 * xv)


def test_nested_cond_runs_only_the_taken_path():
    g = G.Graph()
    with g.as_default():
        p = G.placeholder("bool", [], name="p")
        q = G.placeholder("bool", [], name="q")
        x = G.placeholder("float32", [2], name="x")
        out = G.cond(p, lambda: G.cond(q, lambda: x * 2.0, lambda: G.reshape(x, [3]) * 3.0),
                     lambda: x * 5.0)
        (dx,) = g.create_op("Gradients", [G.reduce_sum(out), x], name="gradients").outputs
    s = G.Session(g)
    ones = np.ones(2, F32)
    for pv, qv, factor in ((True, True, 2), (False, True, 5), (False, False, 5)):
        value, grad = s.run([out, dx], {p: pv, q: qv, x: ones})
        np.testing.assert_array_equal(value, factor * ones)
        np.testing.assert_array_equal(grad, factor * ones)
    with pytest.raises(ValueError, match="reshape"):
        s.run(out, {p: True, q: False, x: ones})


def test_python_bool_picks_the_branch_at_build_time():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2], name="x")
        out = G.cond(True, lambda: x * 3.0, lambda: x * 5.0)
    assert "Merge" not in {op.type for op in g.get_operations()}
    np.testing.assert_array_equal(G.Session(g).run(out, {x: np.ones(2, F32)}), [3, 3])


# ---------------------------------------------------------------------------------------------------
# Optimizers, against TF's formulas computed independently in float64.

X_LS = np.random.default_rng(1).standard_normal((6, 3))
T_LS = np.random.default_rng(2).standard_normal((6, 2))
W0 = np.array([[0.5, -1.0], [1.5, 0.25], [-0.75, 2.0]])


def _least_squares(optimizer):
    """loss = mean((x @ w - t)^2) with w a float32 variable."""
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [6, 3], name="x")
        t = G.placeholder("float32", [6, 2], name="t")
        w = G.variable("w", W0.astype(F32))
        r = G.subtract(G.matmul(x, w.read), t)
        loss = G.reduce_mean(G.multiply(r, r))
        train = optimizer.minimize(loss)
        init = G.global_variables_initializer()
    s = G.Session(g)
    s.run(init)
    return g, s, train, loss, {x: X_LS.astype(F32), t: T_LS.astype(F32)}


def _grad_ls(w):
    x, t = np.float64(X_LS.astype(F32)), np.float64(T_LS.astype(F32))
    return 2.0 * x.T @ (x @ w - t) / t.size


def test_gradient_descent_one_step():
    _, s, train, _, feed = _least_squares(G.GradientDescentOptimizer(0.1))
    s.run(train, feed)
    w0 = np.float64(W0.astype(F32))
    np.testing.assert_allclose(s.variable_value("w"), w0 - 0.1 * _grad_ls(w0), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_three_steps(nesterov):
    lr, momentum = 0.05, 0.9
    g, s, train, _, feed = _least_squares(G.MomentumOptimizer(lr, momentum, use_nesterov=nesterov))
    w = np.float64(W0.astype(F32))
    accum = np.zeros_like(w)
    for _ in range(3):
        s.run(train, feed)
        grad = _grad_ls(w)
        accum = accum * momentum + grad
        w = w - (lr * grad + lr * momentum * accum if nesterov else lr * accum)
        np.testing.assert_allclose(s.variable_value("w"), w, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(s.variable_value("w/Momentum"), accum, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_update_has_the_float32_formula_bits(nesterov):
    """ApplyMomentum's one-pass kernel gives the bits of TF's formula in float32 numpy, each
    operation rounded in turn (no fused multiply-add), NaN, infinities and subnormals included;
    a variable of another shape than its gradient is refused as the formula refuses it."""
    from fqcore.graph.op_defs import train
    rng = np.random.default_rng(7)
    var = rng.standard_normal(1000).astype(F32)
    accum = rng.standard_normal(1000).astype(F32)
    grad = rng.standard_normal(1000).astype(F32)
    special = np.array([np.nan, np.inf, -np.inf, 1e-40, -1e-40, 0.0, -0.0, 3e38], F32)
    var[:8], accum[8:16], grad[16:24] = special, special, special
    lr, momentum = F32(0.0123), F32(0.9)
    op = type("Op", (), {"attrs": {"use_nesterov": nesterov}})()
    new_var, (new_accum,) = train._momentum(op, var, [accum], np.asarray(lr), grad,
                                            np.asarray(momentum))
    expect_accum = accum * momentum + grad
    expect_var = (var - (grad * lr + expect_accum * momentum * lr) if nesterov
                  else var - expect_accum * lr)
    np.testing.assert_array_equal(new_accum.view(np.uint32), expect_accum.view(np.uint32))
    np.testing.assert_array_equal(new_var.view(np.uint32), expect_var.view(np.uint32))
    assert new_var.shape == var.shape and new_var is not var and new_accum is not accum
    with pytest.raises(ValueError, match="broadcast"):
        train._momentum(op, var, [accum], np.asarray(lr), grad[:10], np.asarray(momentum))
    # A filter-shaped variable, and a gradient that is a strided view.
    wide = np.repeat(grad, 2).reshape(25, 80)[:, ::2]
    new_var2, (new_accum2,) = train._momentum(op, var.reshape(25, 40), [accum.reshape(25, 40)],
                                              np.asarray(lr), wide, np.asarray(momentum))
    assert new_var2.shape == (25, 40)
    np.testing.assert_array_equal(new_var2.reshape(-1).view(np.uint32), expect_var.view(np.uint32))
    np.testing.assert_array_equal(new_accum2.reshape(-1).view(np.uint32),
                                  expect_accum.view(np.uint32))


def test_adam_three_steps():
    lr, beta1, beta2, eps = 0.1, 0.8, 0.95, 1e-7
    g, s, train, _, feed = _least_squares(G.AdamOptimizer(lr, beta1, beta2, eps))
    w = np.float64(W0.astype(F32))
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t in range(1, 4):
        s.run(train, feed)
        grad = _grad_ls(w)
        lr_t = lr * np.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
        m = m + (grad - m) * (1 - beta1)
        v = v + (grad * grad - v) * (1 - beta2)
        w = w - lr_t * m / (np.sqrt(v) + eps)
        np.testing.assert_allclose(s.variable_value("w"), w, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(s.variable_value("w/Adam"), m, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(s.variable_value("w/Adam_1"), v, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(s.variable_value("beta1_power"), beta1 ** (t + 1), rtol=1e-6)
        np.testing.assert_allclose(s.variable_value("beta2_power"), beta2 ** (t + 1), rtol=1e-6)


def test_optimizer_slot_names_and_collections():
    g, _, train, _, _ = _least_squares(G.MomentumOptimizer(0.1))
    names = _names(g)
    assert "w/Momentum" in names and g.get_operation_by_name("w/Momentum").type == "VariableV2"
    assert g.get_collection(GraphKeys.TRAIN_OP) == [train]
    assert "w/Momentum" not in [v.op.name for v in G.trainable_variables(g)]
    assert "w/Momentum" in [v.op.name for v in G.global_variables(g)]
    assert train.name == "Momentum"
    assert {op.type for op in g.get_operations()} >= {"Gradients", "ApplyMomentum"}

    g, _, train, _, _ = _least_squares(G.AdamOptimizer())
    names = _names(g)
    for name in ("w/Adam", "w/Adam_1", "beta1_power", "beta2_power"):
        assert name in names and g.get_operation_by_name(name).type == "VariableV2", name
    assert train.name == "Adam" and "ApplyAdam" in {op.type for op in g.get_operations()}
    trainable = [v.op.name for v in G.trainable_variables(g)]
    assert trainable == ["w"]

    g, _, train, _, _ = _least_squares(G.GradientDescentOptimizer(0.1))
    assert train.name == "GradientDescent"
    assert "GradientDescent/update_w/ApplyGradientDescent" in _names(g)


def test_optimizer_argument_validation():
    with pytest.raises(ValueError, match="learning_rate"):
        G.GradientDescentOptimizer(0.0)
    with pytest.raises(ValueError, match="momentum"):
        G.MomentumOptimizer(0.1, momentum=1.5)
    with pytest.raises(ValueError, match="beta1"):
        G.AdamOptimizer(0.1, beta1=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        G.AdamOptimizer(0.1, epsilon=0.0)
    g = G.Graph()
    with g.as_default():
        G.variable("w", np.ones(2, F32))
        x = G.placeholder("float32", [2], name="x")
        with pytest.raises(ValueError, match="scalar"):
            G.GradientDescentOptimizer(0.1).minimize(x)


def test_example_mlp_training_reduces_the_loss():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((16, 10)).astype(F32)
    Y = rng.integers(0, 3, 16).astype(np.int32)
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [16, 10], name="input")
        y = G.placeholder("int32", [16], name="labels")
        h = G.layers.dense(x, 12, activation="relu", scope="fc1")
        logits = G.layers.dense(h, 3, scope="fc2")
        loss = G.layers.sparse_softmax_cross_entropy(y, logits)
        train = G.GradientDescentOptimizer(0.05).minimize(loss)
        init = G.global_variables_initializer()
    s = G.Session(g)
    s.run(init)
    first = float(s.run(loss, {x: X, y: Y}))
    for _ in range(20):
        _, l = s.run([train, loss], {x: X, y: Y})
    last = float(s.run(loss, {x: X, y: Y}))
    assert last < first * 0.9, (first, last)
    # the loss value itself is the mean cross-entropy of the logits (independent numpy check)
    z = np.float64(s.run(logits, {x: X}))
    z -= z.max(axis=1, keepdims=True)
    xent = np.log(np.exp(z).sum(axis=1)) - z[np.arange(16), Y]
    np.testing.assert_allclose(last, xent.mean(), rtol=1e-5)


# ---------------------------------------------------------------------------------------------------
# Layers: TF-slim names, batch norm's moving statistics.

def test_layer_names_follow_tf_slim():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 6, 6, 3], name="input")
        h = G.layers.conv2d(x, 4, activation="relu6", scope="conv1")
        h = G.layers.conv2d(h, 4, batch_norm=True, activation="relu6", scope="conv2")
        h = G.layers.depthwise_conv2d(h, depth_multiplier=2, scope="dw")
        h = G.layers.global_avg_pool(h)
        logits = G.layers.dense(h, 3, scope="logits")
    names = set(_names(g))
    expected = {
        "conv1/weights", "conv1/weights/read", "conv1/weights/Assign",
        "conv1/weights/Initializer/Const", "conv1/Conv2D", "conv1/biases", "conv1/biases/read",
        "conv1/BiasAdd", "conv1/Relu6",
        "conv2/weights", "conv2/Conv2D", "conv2/BatchNorm/gamma", "conv2/BatchNorm/beta",
        "conv2/BatchNorm/moving_mean", "conv2/BatchNorm/moving_variance",
        "conv2/BatchNorm/FusedBatchNormV3", "conv2/BatchNorm/AssignMovingAvg",
        "conv2/BatchNorm/AssignMovingAvg_1", "conv2/Relu6",
        "dw/depthwise_weights", "dw/DepthwiseConv2dNative", "dw/BiasAdd", "dw/Relu",
        "logits/weights", "logits/MatMul", "logits/biases", "logits/BiasAdd",
    }
    assert not expected - names, sorted(expected - names)
    assert "conv2/biases" not in names and "conv2/BiasAdd" not in names  # batch norm replaces bias
    assert g.get_operation_by_name("conv1/Conv2D").type == "Conv2D"
    assert g.get_operation_by_name("conv1/Relu6").type == "Relu6"
    assert g.get_operation_by_name("conv2/BatchNorm/AssignMovingAvg").type == "AssignSub"
    assert g.get_operation_by_name("conv1/weights").type == "VariableV2"
    assert g.get_operation_by_name("conv1/weights/read").type == "Identity"
    assert logits.shape == (2, 3) and h.shape == (2, 8)
    trainable = [v.op.name for v in G.trainable_variables(g)]
    assert "conv2/BatchNorm/gamma" in trainable and "conv2/BatchNorm/moving_mean" not in trainable
    assert len(g.get_collection(GraphKeys.UPDATE_OPS)) == 2


def test_batch_norm_moving_statistics_update():
    momentum = 0.8
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [3, 2, 2, 2], name="x")
        y = G.layers.batch_norm(x, momentum=momentum, scope="bn")
        updates = g.get_collection(GraphKeys.UPDATE_OPS)
        init = G.global_variables_initializer()
    s = G.Session(g)
    s.run(init)
    rng = np.random.default_rng(4)
    mm, mv = np.zeros(2), np.ones(2)
    for step in range(2):
        xv = (rng.standard_normal((3, 2, 2, 2)) * 2 + 1).astype(F32)
        out = s.run([y] + updates, {x: xv})[0]
        x64 = np.float64(xv)
        mean, var = x64.mean(axis=(0, 1, 2)), x64.var(axis=(0, 1, 2), ddof=1)
        mm = mm - (mm - mean) * (1 - momentum)
        mv = mv - (mv - var) * (1 - momentum)
        np.testing.assert_allclose(s.variable_value("bn/moving_mean"), mm, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s.variable_value("bn/moving_variance"), mv, rtol=1e-5)
        # y is normalised with the batch statistics (biased variance), gamma 1, beta 0
        np.testing.assert_allclose(out, (x64 - mean) / np.sqrt(x64.var(axis=(0, 1, 2)) + 1e-3),
                                   rtol=1e-4, atol=1e-5)


def test_batch_norm_inference_uses_moving_statistics():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 1, 1, 2], name="x")
        y = G.layers.batch_norm(x, is_training=False, scope="bn")
        init = G.global_variables_initializer()
    s = G.Session(g)
    s.run(init)
    s.set_variable_value("bn/moving_mean", np.array([1.0, -1.0], F32))
    s.set_variable_value("bn/moving_variance", np.array([4.0, 0.25], F32))
    xv = np.array([[[[3.0, 0.0]]], [[[1.0, -1.5]]]], F32)
    expected = (np.float64(xv) - [1.0, -1.0]) / np.sqrt(np.array([4.0, 0.25]) + 1e-3)
    np.testing.assert_allclose(s.run(y, {x: xv}), expected, rtol=1e-5)
    assert not g.get_collection(GraphKeys.UPDATE_OPS)


def test_builder_validation_errors_name_the_argument():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [1, 4, 4, 2], name="x")
        w = G.constant(np.ones((3, 3, 2, 2), F32))
        with pytest.raises(ValueError, match="padding"):
            G.conv2d(x, w, padding="same")
        with pytest.raises(ValueError, match="strides"):
            G.conv2d(x, w, strides=0)
        with pytest.raises(ValueError, match="strides"):
            G.max_pool(x, 2, (1, 2, 3))
        with pytest.raises(ValueError, match="dilations"):
            G.conv2d(x, w, dilations=(1, -1))
        with pytest.raises(ValueError, match="ksize"):
            G.avg_pool(x, 0, 1)
        with pytest.raises(ValueError, match="padding"):
            G.layers.max_pool(x, padding="FULL")
        with pytest.raises(ValueError, match=r"dense.*\[batch, features\]"):
            G.layers.dense(x, 3)
        with pytest.raises(ValueError, match="activation"):
            G.layers.conv2d(x, 2, activation="swish")
        with pytest.raises(ValueError, match="momentum"):
            G.layers.batch_norm(x, momentum=2.0)
        with pytest.raises(ValueError, match="conv2d.*NHWC"):
            G.layers.conv2d(G.placeholder("float32", [3, 4], name="flat"), 2)


def test_variable_names_must_be_unique():
    g = G.Graph()
    with g.as_default():
        G.variable("v", np.zeros(2, F32))
        with pytest.raises(ValueError, match="'v' already exists"):
            G.variable("v", np.zeros(2, F32))


def test_gradient_of_a_disconnected_tensor_is_zeros_and_int_paths_are_cut():
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [2, 2], name="x")
        z = G.placeholder("float64", [3], name="z")
        k = G.cast(G.cast(x, "int32"), "float32")  # no gradient through an integer
        loss = G.reduce_sum(G.multiply(x, 3.0)) + G.reduce_sum(k)
        dx, dz = g.create_op("Gradients", [loss, x, z], name="gradients").outputs
    gx, gz = G.Session(g).run([dx, dz], {x: np.ones((2, 2), F32), z: np.ones(3)})
    np.testing.assert_array_equal(gx, np.full((2, 2), 3.0))
    assert gx.dtype == F32
    np.testing.assert_array_equal(gz, np.zeros(3))
    assert gz.dtype == np.float64


def test_convolutions_check_ranks_and_channels_when_built():
    g = G.Graph()
    with g.as_default():
        flat = G.placeholder("float32", [None, 4], name="flat")
        images = G.placeholder("float32", [None, 8, 8, 3], name="images")
        with pytest.raises(ValueError, match=r"Conv2D: input 'flat:0' must be rank 4"):
            G.conv2d(flat, G.constant(np.zeros((3, 3, 3, 4), np.float32)))
        with pytest.raises(ValueError, match=r"has 3 channels but filter .* expects 5"):
            G.conv2d(images, G.constant(np.zeros((3, 3, 5, 4), np.float32)))
        with pytest.raises(ValueError, match=r"DepthwiseConv2dNative: .* expects 2"):
            G.depthwise_conv2d(images, G.constant(np.zeros((3, 3, 2, 1), np.float32)))
        with pytest.raises(ValueError, match=r"MaxPool: input 'flat:0' must be rank 4"):
            G.max_pool(flat, 2, 2)
        assert G.conv2d(images, G.constant(np.zeros((3, 3, 3, 4), np.float32)), strides=2).shape == (
            None, 4, 4, 4)


def test_constant_subgraphs_run_once_per_plan():
    """Consts and the stateless ops that read only them give the same values every run: a plan
    keeps them after its first successful run and drops their steps; feeds still replace them,
    and a constant op that fails keeps failing (nothing is kept from a failed run)."""
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [3], name="x")
        doubled = G.multiply(G.constant(np.array([1, 2, 3], F32)), G.constant(F32(2)), name="doubled")
        y = G.add(x, doubled, name="y")
        broken = G.add(x, G.reshape(G.constant(np.arange(4, dtype=F32)), [3]), name="broken")
    s = G.Session(g)
    np.testing.assert_array_equal(s.run(y, {x: np.zeros(3, F32)}), [2, 4, 6])
    plan = max(s._plans.values(), key=lambda p: len(p.order))
    assert [step[0].type for step in plan.steps] == ["AddV2"]
    np.testing.assert_array_equal(s.run(y, {x: np.ones(3, F32)}), [3, 5, 7])
    np.testing.assert_array_equal(s.run(y, {x: np.ones(3, F32), doubled: np.full(3, 10, F32)}),
                                  [11, 11, 11])
    for _ in range(2):
        with pytest.raises(ValueError, match="reshape"):
            s.run(broken, {x: np.zeros(3, F32)})


def test_steps_run_in_groups_and_a_failure_names_its_op():
    """After a plan's first run its consecutive steps run as one compiled call (step_runs.py):
    the same values, every intermediate fetchable, and an error names the op that raised it."""
    from fqcore.graph import step_runs
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [None], name="x")
        y = G.placeholder("float32", [None], name="y")
        shifted = G.add(x, 1.0, name="shifted")
        product = G.multiply(shifted, y, name="product")
        total = G.reduce_sum(G.multiply(product, product, name="squares"), name="total")
    s = G.Session(g)
    for _ in range(2):
        got_shifted, got_total = s.run([shifted, total], {x: np.arange(4, dtype=F32),
                                                          y: np.full(4, 2, F32)})
    np.testing.assert_array_equal(got_shifted, [1, 2, 3, 4])
    assert got_total == 120
    plan = max(s._plans.values(), key=lambda p: len(p.order))
    runs = [step[0] for step in plan.steps if isinstance(step[0], step_runs.StepRun)]
    assert [[op.name for op in run.members] for run in runs] == [
        ["shifted", "product", "squares", "total"]]
    with pytest.raises(ValueError, match=r"^product \(Mul\): operands could not be broadcast"):
        s.run([shifted, total], {x: np.arange(4, dtype=F32), y: np.ones(3, F32)})


class _Member:
    def __init__(self, name):
        self.name, self.type = name, "Test"


def test_a_step_program_passes_each_members_outputs_to_later_members_by_slot():
    """_engine.StepProgram: operands from the run's inputs and earlier outputs, every output
    returned in order; a ValueError names its member in ctx.failing_op; a member that gives
    another number of results than its outputs is an error, not a shift of the values after."""
    from fqcore.graph._engine import StepProgram

    def add(member, operands, ctx):
        return (operands[0] + operands[1],)

    def split(member, operands, ctx):
        return operands[0] - 1, operands[0] + 1

    class Ctx:
        failing_op = None
    members = [_Member("a"), _Member("b"), _Member("c")]
    # a = in0 + in1 (slot 2); b = a - 1, a + 1 (slots 3, 4); c = b1 + in0 (slot 5)
    program = StepProgram([add, split, add], members, [[0, 1], [2], [4, 0]], [1, 2, 1], 2)
    assert program(None, [10, 5], Ctx()) == [15, 14, 16, 26]
    ctx = Ctx()
    with pytest.raises(TypeError):
        program(None, [10, "x"], ctx)
    assert ctx.failing_op is members[0]
    short = StepProgram([split, add], members[:2], [[0], [1, 0]], [1, 1], 1)
    with pytest.raises(RuntimeError, match=r"a \(Test\) gave 2 results for its 1 outputs"):
        short(None, [1], Ctx())
    with pytest.raises(ValueError, match="1 operands expected, got 2"):
        short(None, [1, 2], Ctx())
    with pytest.raises(ValueError, match="operand slot"):
        StepProgram([add], members[:1], [[0, 3]], [1], 2)
    with pytest.raises(ValueError, match=r"output_counts \(\[-1\]\) must not be negative"):
        StepProgram([add], members[:1], [[0]], [-1], 2)


def test_a_reverse_path_sums_terms_skips_dead_ops_and_passes_identities():
    """_engine.ReversePath: an op whose outputs have no gradient, or that died, is not called; a
    first term is stored, later ones added; one tensor as two inputs gets both terms; a passing
    entry hands its output gradient to its input without a call."""
    from fqcore.graph._engine import ReversePath
    calls = []

    def times_two(op, operands, outputs, incoming):
        calls.append(op.name)
        return [2 * incoming[0], 3 * incoming[0]]

    x, y, z, w, unused = "x", "y", "z", "w", "unused"
    square, dead_op, identity, idle = (_Member(n) for n in ("square", "dead", "identity", "idle"))
    entries = [
        (idle, times_two, [unused], [x, x], None, False, False, [0], [x], [True], [], []),
        (square, times_two, [z], [x, x], None, False, False, [0, 1], [x, x], [True, False], [],
         []),
        (dead_op, times_two, [z], [y], None, True, False, [0], [y], [True], [], []),
        (identity, None, [z], [w], None, False, True, [0], [w], [True], [], []),
    ]
    values = {x: 1.0, y: 2.0, z: 3.0, w: 4.0, unused: 0.0}
    grads = ReversePath(entries)(values, {z: 1.0}, {dead_op})
    assert grads == {z: 1.0, x: 5.0, w: 1.0}
    assert calls == ["square"]
    grads = ReversePath(entries)(values, {z: 1.0}, set())
    assert grads == {z: 1.0, x: 5.0, y: 2.0, w: 1.0}
    with pytest.raises(ValueError, match="square: positions, targets and first"):
        ReversePath([(square, times_two, [z], [x], None, False, False, [0], [x], [], [], [])])


def test_a_reverse_path_lets_go_of_what_it_has_spent():
    """After each entry, called or skipped (no gradient, or dead), the gradients and values it
    names as spent leave the run's dicts; the others stay, and the entries after it still read
    theirs."""
    from fqcore.graph._engine import ReversePath
    seen = []

    def double(op, operands, outputs, incoming):
        seen.append((op.name, list(operands), list(outputs)))
        return [2 * incoming[0]]

    a, b, c, d, unused = "a", "b", "c", "d", "unused"
    last, skipped, first = (_Member(n) for n in ("last", "skipped", "first"))
    # Reverse execution order of d = last(c), unused = skipped(c), c = first(b); no entry reads a.
    entries = [
        (last, double, [d], [c], None, False, False, [0], [c], [True], [d], [d]),
        (skipped, double, [unused], [c], None, False, False, [0], [c], [False], [unused],
         [unused]),
        (first, double, [c], [b], None, False, False, [0], [b], [True], [c], [c, b]),
    ]
    values = {a: 0.5, b: 1.0, c: 2.0, d: 3.0, unused: 4.0}
    grads = ReversePath(entries)(values, {d: 1.0}, set())
    assert grads == {b: 4.0}
    assert values == {a: 0.5}
    assert seen == [("last", [2.0], [3.0]), ("first", [1.0], [2.0])]


def test_a_run_that_starts_before_its_plan_folds_finishes_on_what_it_started_with(monkeypatch):
    """A plan folds its constants and groups its steps after its first successful run. A run of
    the same plan in another thread that had already started (it found no constants yet) keeps
    the steps it started with and gets the values a lone run gets."""
    import threading
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [4], name="x")
        w = G.variable("w", np.arange(4, dtype=F32))
        scale = G.multiply(G.constant(np.full(4, 0.5, F32)), G.constant(F32(3)), name="scale")
        loss = G.reduce_sum(G.multiply(G.multiply(x, w.read), scale))
        init = G.global_variables_initializer()
    feed = {x: np.array([1, -2, 3, -4], F32)}
    s = G.Session(g)
    s.run(init)
    started, folded = threading.Event(), threading.Event()
    real_read = G.session._Run.read_variables

    def read_variables(run, tensors, names):  # the early run waits here, before its steps
        if threading.current_thread().name == "early" and not started.is_set():
            started.set()
            assert folded.wait(10)
        return real_read(run, tensors, names)
    monkeypatch.setattr(G.session._Run, "read_variables", read_variables)
    results, errors = [], []

    def early_run():
        try:
            results.append(s.run(loss, feed))
        except Exception as error:  # noqa: BLE001 (asserted below)
            errors.append(error)
    early = threading.Thread(target=early_run, name="early")
    early.start()
    assert started.wait(10)
    lone = s.run(loss, feed)   # the plan's first complete run: it folds
    folded.set()
    early.join()
    assert errors == [] and results == [lone] and lone == np.float32(1.5 * (0 - 2 + 6 - 12))
