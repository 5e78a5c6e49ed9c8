"""Quantizer objects: the spec's test vectors, per-axis ranks 1-5, state, gradients, configs, equality, repr and bad arguments."""
import json

import numpy as np
import pytest

import fqcore
import reference as ref
from fqcore.quantizers import Constant
from helpers import assert_same_bits

F32 = np.float32
LV, MA, AV = fqcore.LastValueQuantizer, fqcore.MovingAverageQuantizer, fqcore.AllValuesQuantizer
RANGE_CLASSES = (LV, MA, AV)


def f32(*rows):
    return np.array(rows if len(rows) > 1 else rows[0], F32)


def close(actual, expected):
    """The spec prints 7-8 significant digits: equal to those (bit equality is the golden tests' job)."""
    actual = np.asarray(actual)
    assert actual.dtype == F32
    np.testing.assert_allclose(actual, np.asarray(expected, np.float64), rtol=6e-7, atol=6e-8)


def state(weights):
    return float(weights["min_var"]), float(weights["max_var"])


# --- The spec's test vectors (tfmot 0.8.1 on TF 2.21)


def test_spec_last_value_sequence(isa):
    q = LV(8, False, False, False)
    w = q.build((2, 3), "act", None)
    y = q(f32([1, 2, 3], [0.5, 1.5, 2.5]), True, w)
    assert state(w) == (0, 3)
    close(y[1], [0.5058824, 1.5058824, 2.5058825])
    y = q(f32([-1, 0.25, 3], [0.1, -0.7, 2]), True, w)
    assert state(w) == (-1, 3)
    close(y, [[-1.0039216, 0.2509804, 2.9960785], [0.0941177, -0.7058824, 1.9921570]])
    q(f32([-4, -2, -1], [-3, -0.5, -0.25]), True, w)
    assert state(w) == (-4, 0)
    y = q(f32([-10, -4, -1], [0, 0.01, 5]), False, w)
    close(y, [[-4, -4, -1.0039216], [0, 0, 0]])
    assert state(w) == (-4, 0)


def test_spec_symmetric_narrow(isa):
    q = LV(8, False, True, True)
    w = q.build((4,), "w", None)
    y = q(f32(-1, 0.5, 2, 3), True, w)
    assert state(w) == (-3, 3)
    close(y, [-0.992126, 0.496063, 2.007874, 3])
    q(f32(-5, 0.5, 1, 2), True, w)
    assert state(w) == (-5, 5)
    q(f32(0.5, 1, 1.5, 2), True, w)
    assert state(w) == (-2, 2)


@pytest.mark.parametrize("num_bits,first,second", [(8, (-3.0236220, 3), (-5, 4.9609375)),
                                                   (4, (-3.4285715, 3), (-5, 4.375))])
def test_spec_symmetric_wide(num_bits, first, second, isa):
    q = LV(num_bits, False, True, False)
    w = q.build((4,), "w", None)
    q(f32(-1, 0.5, 2, 3), True, w)
    close(np.array(state(w), F32), first)
    y = q(f32(-5, 0.5, 1, 2), True, w)
    close(np.array(state(w), F32), second)
    if num_bits == 8:
        close(y, [-5, 0.5078125, 1.015625, 1.9921875])


def test_spec_per_axis_rank2(isa):
    q = LV(8, True, False, False)
    w = q.build((3, 2), "k", None)
    y = q(f32([1, -2], [3, -1], [-0.5, -4]), True, w)
    assert w["min_var"].tolist() == [-0.5, -4] and w["max_var"].tolist() == [3, 0]
    close(y, [[1.0019608, -1.992157], [3.0058823, -1.0039216], [-0.4941176, -4.0]])


def test_spec_per_axis_rank4_symmetric_narrow(isa):
    q = LV(8, True, True, True)
    w = q.build((1, 2, 1, 2), "k", None)
    q(np.array([[[[1, -2]], [[-3, 0.5]]]], F32), True, w)
    assert w["min_var"].tolist() == [-3, -2] and w["max_var"].tolist() == [3, 2]


def test_spec_per_axis_rank1(isa):
    q = LV(8, True, False, False)
    w = q.build((3,), "k", None)
    x = f32(1, -2, 0.5)
    y = q(x, True, w)
    assert w["min_var"].tolist() == [0, -2, 0] and w["max_var"].tolist() == [1, 0, 0.5]
    assert_same_bits(y, x)


def test_spec_moving_average(isa):
    q = MA(8, False, False, False)
    w = q.build((4,), "act", None)
    expected = [(-5.995, 5.997), (-5.990005, 5.9940033), (-5.984015, 5.9900093)]
    for i, (x, want) in enumerate(zip([f32(-1, 0.5, 2, 3), f32(-1, 0.5, 2, 3), f32(0.5, 1, 1.5, 2)], expected)):
        y = q(x, True, w)
        close(np.array(state(w), F32), want)
        if i == 0:
            close(y, [-0.9875765, 0.5173020, 2.0221806, 3.0097570])
    close(q(f32(-7, -1, 1, 7), False, w), [-5.9635334, -0.9860961, 0.9860961, 6.0104904])


def test_spec_moving_average_decay_arithmetic():
    """d = float32(1.0 - 0.999) with the subtraction in double: 0.0010000000474974513."""
    q = MA(8, False, False, False)
    w = q.build((), "act", None)
    q(f32(-1, 0.5, 2, 3), True, w)
    d = F32(1.0 - 0.999)
    assert float(d) == 0.0010000000474974513
    assert_same_bits(w["min_var"], np.array(F32(-6) - (F32(-6) - F32(-1)) * d, F32))
    assert_same_bits(w["max_var"], np.array(F32(6) - (F32(6) - F32(3)) * d, F32))
    # 1 - 0.999 in float32 gives different bits: the spec's warning is real.
    assert F32(1) - F32(0.999) != d


def test_spec_all_values(isa):
    q = AV(8, False, False, False)
    w = q.build((3,), "act", None)
    assert state(w) == (0, 0)
    assert_same_bits(q(f32(0.5, 1, 2), False, w), np.zeros(3, F32))  # before any training step
    for x, want in [(f32(0.5, 1, 2), (0, 2)), (f32(-1, 0.5, 1), (-1, 2)), (f32(-0.5, 0.25, 4), (-1, 4))]:
        q(x, True, w)
        assert state(w) == want
    close(q(f32(-2, 0.3, 5), False, w), [-1, 0.2941177, 4])


def test_spec_config():
    q = LV(8, False, True, False)
    assert q.get_config() == {"num_bits": 8, "per_axis": False, "symmetric": True, "narrow_range": False}
    assert LV.from_config(q.get_config()) == q
    assert LV(8, False, True, False) != MA(8, False, True, False)
    assert not LV(8, False, True, False) == MA(8, False, True, False)


# --- Per axis: ranks 1-5 against numpy's reductions and the numpy model of the per-channel op


def expected_range(x, symmetric, narrow_range, num_bits):
    """The spec's range rule, by numpy's own reductions (denormal-free data, no ties at zero)."""
    if x.ndim == 1:
        bmin, bmax = x.copy(), x.copy()
    else:
        flat = x.reshape(-1, x.shape[-1])
        bmin, bmax = flat.min(axis=0), flat.max(axis=0)
    if symmetric:
        r = F32(-1) if narrow_range else F32(-((1 << num_bits) - 2) / (1 << num_bits))
        return np.minimum(bmin, bmax / r), np.maximum(bmax, bmin * r)
    return np.minimum(bmin, F32(0)), np.maximum(bmax, F32(0))


@pytest.mark.parametrize("shape", [(6,), (5, 3), (2, 3, 4), (2, 3, 2, 5), (1, 2, 2, 3, 3)],
                         ids=lambda s: f"rank{len(s)}")
@pytest.mark.parametrize("cls", [LV, MA])
@pytest.mark.parametrize("symmetric,narrow_range", [(False, False), (True, False), (True, True)])
def test_per_axis_ranks(shape, cls, symmetric, narrow_range, isa):
    rng = np.random.default_rng(len(shape))
    q = cls(8, True, symmetric, narrow_range)
    w = q.build(shape, "k", None)
    assert w["min_var"].shape == w["max_var"].shape == (shape[-1],)
    lo, hi = np.full(shape[-1], -6, F32), np.full(shape[-1], 6, F32)
    for step in range(3):
        x = (rng.standard_normal(shape) * (1 + step) + 0.5 * step).astype(F32)
        y = q(x, True, w)
        rmin, rmax = expected_range(x, symmetric, narrow_range, 8)
        if cls is LV:
            lo, hi = rmin, rmax
        else:
            d = F32(1.0 - 0.999)
            lo, hi = (lo - (lo - rmin) * d).astype(F32), (hi - (hi - rmax) * d).astype(F32)
        assert_same_bits(w["min_var"], lo)
        assert_same_bits(w["max_var"], hi)
        assert_same_bits(y, ref.per_channel(x, lo, hi, 8, narrow_range))


@pytest.mark.parametrize("symmetric,narrow_range", [(False, False), (True, False), (True, True)])
def test_observed_ranges_take_tfs_scalar_rules(symmetric, narrow_range, isa):
    """The range a training call observes (one binding, fqcore._kernels.observed_range), per
    tensor and per channel, against tf.minimum / tf.maximum on the batch extremes written as
    scalar rules (fqcore.quantizers' _scalar_min, _scalar_max, _mirror, _ftz: what AllValues
    still uses): a -0 minimum or maximum stays -0, a product below FLT_MIN is flushed to a zero of
    its sign (wide ratios), NaN where a value is."""
    from fqcore.observe import batch_range
    from fqcore.quantizers import _ftz, _mirror, _scalar_max, _scalar_min
    tiny = np.finfo(F32).tiny
    columns = [[-0.0, 1.0, 2.0], [0.0, -3.0, -1.0], [tiny * 1.5, 4.0, 1.0], [-tiny * 1.25, 0.0, 0.0],
               [-tiny, 0.0, 0.0], [-4.0, 5.0, np.nan], [0.0, 0.0, 0.0], [-0.0, -0.0, 0.0],
               [-0.0, -1.0, -0.0], [-6.5, 1e-3, 2.0]]
    x = np.array(columns, F32).T.copy()  # [3, channels]: channel c holds columns[c]
    per_axis = LV(8, True, symmetric, narrow_range)
    w = per_axis.build(x.shape, "k", None)
    per_axis(x, True, w)
    r = per_axis._ratio
    for c, column in enumerate(columns):
        bmin, bmax = (v[()] for v in batch_range(np.array(column, F32)))
        if symmetric:
            want = _scalar_min(bmin, _mirror(bmax, r)), _scalar_max(bmax, _ftz(bmin * r))
        else:
            want = _scalar_min(bmin, F32(0)), _scalar_max(bmax, F32(0))
        per_tensor = LV(8, False, symmetric, narrow_range)
        v = per_tensor.build((3,), "k", None)
        per_tensor(np.array(column, F32), True, v)
        for got in ((w["min_var"][c], w["max_var"][c]), (v["min_var"], v["max_var"])):
            assert_same_bits(np.array(got, F32), np.array(want, F32))


def test_all_values_ignores_per_axis(isa):
    """tfmot's AllValues ignores per_axis: one range for the tensor; the config keeps the flag."""
    x = np.arange(-6, 6, dtype=F32).reshape(3, 4)
    results = []
    for per_axis in (False, True):
        q = AV(8, per_axis, False, False)
        w = q.build(x.shape, "a", None)
        assert w["min_var"].shape == ()
        results.append((q(x, True, w), state(w)))
        assert q.get_config()["per_axis"] is per_axis
    assert_same_bits(results[0][0], results[1][0])
    assert results[0][1] == results[1][1] == (-6, 5)


def test_per_axis_state_shape_from_build():
    assert LV(8, True, False, False).build((3, 3, 16, 32), "k", None)["min_var"].shape == (32,)
    assert MA(8, True, False, False).build((10, 7), "k", None)["max_var"].shape == (7,)
    assert LV(8, True, False, False).build(None, "k", None)["min_var"].shape == ()  # shape unknown
    assert LV(8, True, False, False).build((4, None), "k", None)["min_var"].shape == ()
    assert LV(8, False, False, False).build((3, 32), "k", None)["min_var"].shape == ()
    for cls in RANGE_CLASSES:
        w = cls(8, False, False, False).build((2, 2), "k", None)
        assert all(v.dtype == F32 and v.shape == () for v in w.values())
    with pytest.raises(ValueError, match="rank 1 or higher"):
        LV(8, True, False, False).build((), "k", None)


def test_initial_state():
    for cls, (lo, hi) in ((LV, (-6, 6)), (MA, (-6, 6)), (AV, (0, 0))):
        w = cls(4, False, True, True).build((3,), "q", None)
        assert sorted(w) == ["max_var", "min_var"]
        assert state(w) == (lo, hi)


# --- Training vs inference, state in place, out= buffers


def test_state_updated_in_place_and_inference_leaves_it():
    q = LV(8, False, False, False)
    w = q.build((3,), "q", None)
    lo, hi = w["min_var"], w["max_var"]
    q(f32(-1, 2, 3), True, w)
    assert w["min_var"] is lo and w["max_var"] is hi and state(w) == (-1, 3)
    q(f32(-10, 20, 30), False, w)
    assert state(w) == (-1, 3)


@pytest.mark.parametrize("cls", [LV, MA, AV])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("per_axis", [False, True])
def test_empty_training_batch_leaves_the_state(cls, symmetric, per_axis, isa):
    """Nothing to observe: the state stays (tfmot's becomes [0, 0], or NaN for symmetric ranges)."""
    q = cls(8, per_axis, symmetric, False)
    w = q.build((None, 4), "q", None)
    q(np.linspace(-2, 3, 32, dtype=np.float32).reshape(8, 4), True, w)
    before = {key: value.copy() for key, value in w.items()}
    for empty in (np.zeros((0, 4), np.float32), np.zeros((2, 0, 4), np.float32)):
        y = q(empty, True, w)
        assert y.shape == empty.shape
        for key in w:
            assert_same_bits(w[key], before[key])
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    assert np.isfinite(q(x, False, w)).all()


def test_training_quantizes_with_updated_state(isa):
    """Step 3 of the spec's order: the fake quant uses the state just written."""
    q = MA(8, False, False, False)
    w = q.build((4,), "q", None)
    x = f32(-1, 0.5, 2, 3)
    y = q(x, True, w)
    assert_same_bits(y, ref.vars(x, w["min_var"], w["max_var"], 8, False))


def test_out_buffer_and_in_place(isa):
    x = np.linspace(-3, 3, 64, dtype=F32).reshape(8, 8)
    for q in (LV(8, True, False, False), MA(4, False, True, False), AV(8, False, False, True),
              fqcore.FixedQuantizer(8, -1.0, 1.0, False), fqcore.NoQuantizer()):
        expected = q(x.copy(), True, q.build(x.shape, "q", None))
        out = np.empty_like(x)
        assert q(x, True, q.build(x.shape, "q", None), out=out) is out
        assert_same_bits(out, expected)
        inplace = x.copy()
        assert q(inplace, True, q.build(x.shape, "q", None), out=inplace) is inplace
        assert_same_bits(inplace, expected)


def test_inputs_left_alone(isa):
    x = np.linspace(-3, 3, 30, dtype=F32).reshape(5, 6)
    before = x.tobytes()
    for q in (LV(8, True, True, False), MA(8, False, False, False), AV(8, False, True, True)):
        w = q.build(x.shape, "q", None)
        q(x, True, w)
        q.gradient(np.ones_like(x), x, w)
    assert x.tobytes() == before


def test_non_contiguous_and_list_inputs(isa):
    x = np.linspace(-3, 3, 60, dtype=F32).reshape(6, 10)
    q = LV(8, True, False, False)
    w1, w2 = q.build((6, 5), "a", None), q.build((6, 5), "b", None)
    view = x[:, ::2]
    assert_same_bits(q(view, True, w1), q(np.ascontiguousarray(view), True, w2))
    assert_same_bits(w1["min_var"], w2["min_var"])
    w = LV(8, False, False, False).build(None, "c", None)
    LV(8, False, False, False)([[-1, 2], [3, 0.5]], True, w)
    assert state(w) == (-1, 3)


def test_no_quantizer_and_fixed():
    x = f32(-7, -1, 0.3, 2, 9)
    assert fqcore.NoQuantizer()(x, True, {}) is x
    assert fqcore.NoQuantizer().gradient(x, x, {}) is x
    # Its inputs are checked as every quantizer's are.
    with pytest.raises(TypeError, match="inputs must be a float32 array"):
        fqcore.NoQuantizer()("abc", True, {})
    with pytest.raises(TypeError, match="float32"):
        fqcore.NoQuantizer()(np.ones(3), True, {})
    with pytest.raises(ValueError, match="shape"):
        fqcore.NoQuantizer().gradient(f32(1, 2), x, {})
    assert fqcore.NoQuantizer().build((5,), "n", None) == {}
    q = fqcore.FixedQuantizer(8, -6.0, 6.0, False)
    assert q.build((5,), "f", None) == {}
    assert_same_bits(q(x, True, {}), ref.args(x, -6.0, 6.0, 8, False))
    assert_same_bits(q(x, False, {}), ref.args(x, -6.0, 6.0, 8, False))


def test_fixed_quantizes_to_8_bits_whatever_num_bits():
    """tfmot 0.8.1's FixedQuantize passes no num_bits to the op (default 8); fqcore does the same."""
    x = np.linspace(-2, 2, 101, dtype=F32)
    for bits in (2, 4, 16):
        assert_same_bits(fqcore.FixedQuantizer(bits, -1.0, 1.0, True)(x, True, {}), ref.args(x, -1.0, 1.0, 8, True))


# --- Gradients


@pytest.mark.parametrize("per_axis", [False, True])
def test_gradient_uses_the_state_the_forward_used(per_axis, isa):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((16, 4)) * 3).astype(F32)
    g = rng.standard_normal((16, 4)).astype(F32)
    q = LV(8, per_axis, False, False)
    w = q.build(x.shape, "q", None)
    q(f32(*[[-1, -1, -1, -1]] * 2), True, w)
    q(x, True, w)
    result = q.gradient(g, x, w)
    if per_axis:
        assert type(result) is fqcore.FakeQuantWithMinMaxVarsPerChannelGradient
        dx, dmin, dmax = ref.per_channel_grad(g, x, w["min_var"], w["max_var"], 8, False)
    else:
        assert type(result) is fqcore.FakeQuantWithMinMaxVarsGradient
        dx, dmin, dmax = ref.vars_grad(g, x, w["min_var"], w["max_var"], 8, False)
    assert_same_bits(result.backprops_wrt_input, dx)
    np.testing.assert_allclose(result.backprop_wrt_min, dmin, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(result.backprop_wrt_max, dmax, rtol=1e-6, atol=1e-6)


def test_gradient_moving_average_and_all_values(isa):
    x = f32(-7, -1, 0.5, 3, 9)
    g = f32(1, 2, 3, 4, 5)
    for q in (MA(8, False, False, False), AV(8, False, True, False)):
        w = q.build(x.shape, "q", None)
        q(x, True, w)
        dx, dmin, dmax = q.gradient(g, x, w)
        rdx, rmin, rmax = ref.vars_grad(g, x, w["min_var"], w["max_var"], 8, False)
        assert_same_bits(dx, rdx)
        assert float(dmin) == rmin and float(dmax) == rmax


def test_fixed_gradient_is_the_args_gradient(isa):
    x, g = f32(-7, -1, 0.5, 3, 9), f32(1, 2, 3, 4, 5)
    out = fqcore.FixedQuantizer(4, -2.0, 2.0, False).gradient(g, x, {})
    assert_same_bits(out, ref.args_grad(g, x, -2.0, 2.0, 8, False))


# --- Config, equality, hash, repr


ALL_QUANTIZERS = [
    LV(8, False, True, False), LV(2, True, False, True), LV(16, False, False, False),
    MA(8, False, False, False), MA(4, True, True, True), MA(8, False, False, False, ema_decay=0.9),
    AV(8, True, False, False), AV(3, False, True, True),
    fqcore.FixedQuantizer(8, -6.0, 6.0, False), fqcore.FixedQuantizer(4, -6, 6, True),
    fqcore.FixedQuantizer(16, -0.1, 0.2, False), fqcore.NoQuantizer(),
]


@pytest.mark.parametrize("q", ALL_QUANTIZERS, ids=repr)
def test_config_round_trips(q):
    config = q.get_config()
    assert json.loads(json.dumps(config)) == config  # JSON-safe Python types
    assert all(type(v) in (int, float, bool) for v in config.values())
    again = type(q).from_config(config)
    assert again == q and not again != q and hash(again) == hash(q)
    assert again.get_config() == config and list(again.get_config()) == list(config)
    evaluated = eval(repr(q), vars(fqcore))
    assert evaluated == q and repr(evaluated) == repr(q)


def test_config_keys():
    assert list(LV(8, True, False, True).get_config()) == ["num_bits", "per_axis", "symmetric", "narrow_range"]
    assert list(fqcore.FixedQuantizer(8, -1.0, 1.0, False).get_config()) == [
        "num_bits", "init_min", "init_max", "narrow_range"]
    assert fqcore.NoQuantizer().get_config() == {}
    assert "ema_decay" not in MA(8, False, False, False).get_config()
    assert "ema_decay" not in MA(8, False, False, False, ema_decay=0.999).get_config()
    assert MA(8, False, False, False, ema_decay=0.5).get_config()["ema_decay"] == 0.5
    assert repr(LV(8, False, True, False)) == "LastValueQuantizer(num_bits=8, per_axis=False, symmetric=True, narrow_range=False)"
    assert repr(MA(8, False, False, False, ema_decay=0.9)).endswith("narrow_range=False, ema_decay=0.9)")


def test_equality_rules():
    assert LV(8, False, False, False) == LV(8, False, False, False)
    assert LV(8, False, False, False) != LV(8, True, False, False)
    assert LV(8, False, False, False) != LV(4, False, False, False)
    for a in (LV, MA, AV):
        for b in (LV, MA, AV):
            assert (a(8, False, False, False) == b(8, False, False, False)) is (a is b)
    assert MA(8, False, False, False) != MA(8, False, False, False, ema_decay=0.99)
    assert fqcore.NoQuantizer() == fqcore.NoQuantizer()
    assert fqcore.FixedQuantizer(8, -6, 6, False) == fqcore.FixedQuantizer(8, -6.0, 6.0, False)  # as tfmot's ==
    assert LV(8, False, False, False) != "LastValueQuantizer" and LV(8, False, False, False) != None  # noqa: E711

    class Sub(LV):
        pass

    assert Sub(8, False, False, False) != LV(8, False, False, False)
    assert LV(8, False, False, False) != Sub(8, False, False, False)
    assert len({LV(8, False, False, False), LV(8, False, False, False), MA(8, False, False, False)}) == 2


def test_settings_are_read_only():
    q = LV(8, False, False, False)
    with pytest.raises(AttributeError):
        q.num_bits = 99
    assert q.num_bits == 8 and q.per_axis is False and q.symmetric is False and q.narrow_range is False


def test_numpy_scalars_become_python_types():
    q = LV(np.int64(4), np.bool_(True), np.bool_(False), False)
    config = q.get_config()
    assert type(config["num_bits"]) is int and type(config["per_axis"]) is bool
    f = fqcore.FixedQuantizer(8, np.float32(-0.5), np.float64(2.0), False)
    assert type(f.get_config()["init_min"]) is float and f.init_min == -0.5


# --- Bad arguments: clear errors that name the argument and the value


@pytest.mark.parametrize("cls", RANGE_CLASSES)
@pytest.mark.parametrize("bits,error", [(1, ValueError), (17, ValueError), (0, ValueError), (-8, ValueError),
                                        (8.0, TypeError), ("8", TypeError), (True, TypeError), (None, TypeError)])
def test_bad_num_bits(cls, bits, error):
    with pytest.raises(error, match=f"num_bits.*{bits!r}" if error is TypeError else f"num_bits.*{bits}"):
        cls(bits, False, False, False)
    with pytest.raises(error, match="num_bits"):
        fqcore.FixedQuantizer(bits, -1.0, 1.0, False)


@pytest.mark.parametrize("cls", RANGE_CLASSES)
@pytest.mark.parametrize("position,name", [(1, "per_axis"), (2, "symmetric"), (3, "narrow_range")])
@pytest.mark.parametrize("value", [1, 0, "yes", None, 1.0])
def test_non_bool_flags(cls, position, name, value):
    args = [8, False, False, False]
    args[position] = value
    with pytest.raises(TypeError, match=f"{name} must be a bool, got {value!r}"):
        cls(*args)


def test_bad_fixed_bounds():
    with pytest.raises(TypeError, match="init_min must be a float, got 'a'"):
        fqcore.FixedQuantizer(8, "a", 1.0, False)
    with pytest.raises(TypeError, match="init_max must be a float, got True"):
        fqcore.FixedQuantizer(8, -1.0, True, False)
    with pytest.raises(TypeError, match="narrow_range must be a bool, got 1"):
        fqcore.FixedQuantizer(8, -1.0, 1.0, 1)
    for lo, hi in ((1.0, 1.0), (2.0, -2.0), (0.0, 1e-40)):
        with pytest.raises(ValueError, match="init_min must be smaller than init_max"):
            fqcore.FixedQuantizer(8, lo, hi, False)
    # Not finite as float32: the op would give NaN everywhere, and JSON cannot hold the config.
    for lo, hi, bad in ((float("nan"), 1.0, "init_min"), (-1.0, float("inf"), "init_max"),
                        (-1e40, 1.0, "init_min"), (0, 10**400, "init_max")):
        with pytest.raises(ValueError, match=f"{bad} must be finite as a float32"):
            fqcore.FixedQuantizer(8, lo, hi, False)


def test_bad_ema_decay():
    for value, error in ((1.5, ValueError), (-0.1, ValueError), ("0.9", TypeError), (True, TypeError)):
        with pytest.raises(error, match="ema_decay"):
            MA(8, False, False, False, ema_decay=value)


@pytest.mark.parametrize("cls", RANGE_CLASSES)
def test_unknown_and_missing_config_keys(cls):
    config = cls(8, False, False, False).get_config()
    with pytest.raises(TypeError, match="unknown key 'bits'"):
        cls.from_config(dict(config, bits=8))
    del config["symmetric"]
    with pytest.raises(TypeError, match="missing key 'symmetric'"):
        cls.from_config(config)
    with_decay = dict(cls(8, False, False, False).get_config(), ema_decay=0.9)
    if cls is MA:
        assert cls.from_config(with_decay).ema_decay == 0.9
    else:
        with pytest.raises(TypeError, match="unknown key 'ema_decay'"):
            cls.from_config(with_decay)
    with pytest.raises(TypeError, match="config must be a dict"):
        cls.from_config([("num_bits", 8)])
    with pytest.raises(TypeError, match="unknown key 'x'"):
        fqcore.NoQuantizer.from_config({"x": 1})
    with pytest.raises(ValueError, match="num_bits must be between 2 and 16, inclusive, got 17"):
        cls.from_config({"num_bits": 17, "per_axis": False, "symmetric": False, "narrow_range": False})


def test_wrong_weight_shapes():
    q = LV(8, True, False, False)
    w = q.build((5, 4), "k", None)
    with pytest.raises(ValueError, match=r"weights\['min_var'\] has shape \(4,\), expected \(3,\)"):
        q(np.zeros((5, 3), F32), True, w)
    with pytest.raises(ValueError, match=r"weights\['min_var'\] has shape \(4,\), expected \(3,\)"):
        q.gradient(np.zeros((5, 3), F32), np.zeros((5, 3), F32), w)
    with pytest.raises(ValueError, match="rank 1 or higher"):
        q(np.zeros((), F32), True, w)
    per_tensor = LV(8, False, False, False)
    with pytest.raises(ValueError, match=r"weights\['min_var'\] has shape \(4,\), expected \(\)"):
        per_tensor(np.zeros((5, 4), F32), True, w)
    unknown = q.build(None, "u", None)  # per_axis with an unknown shape: scalar state, as tfmot
    with pytest.raises(ValueError, match=r"has shape \(\), expected \(4,\)"):
        q(np.zeros((5, 4), F32), True, unknown)


def test_wrong_weights():
    q = MA(8, False, False, False)
    good = q.build((3,), "q", None)
    with pytest.raises(TypeError, match="weights must be the dict"):
        q(np.zeros(3, F32), True, [good["min_var"], good["max_var"]])
    with pytest.raises(ValueError, match="weights has no 'max_var'"):
        q(np.zeros(3, F32), True, {"min_var": good["min_var"]})
    with pytest.raises(TypeError, match=r"weights\['max_var'\] must be a float32 numpy array, got a float64"):
        q(np.zeros(3, F32), True, {"min_var": good["min_var"], "max_var": np.array(6.0)})
    with pytest.raises(TypeError, match=r"weights\['min_var'\] must be a float32 numpy array, got float"):
        q(np.zeros(3, F32), True, {"min_var": -6.0, "max_var": good["max_var"]})
    frozen = {k: v.copy() for k, v in good.items()}
    frozen["min_var"].flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        q(np.zeros(3, F32), True, frozen)
    q(np.zeros(3, F32), False, frozen)  # inference does not write


def test_bad_call_arguments():
    q = LV(8, False, False, False)
    w = q.build((3,), "q", None)
    with pytest.raises(TypeError, match="training must be a bool, got 1"):
        q(np.zeros(3, F32), 1, w)
    with pytest.raises(TypeError, match="inputs must be a float32 array"):
        q(np.zeros(3, np.float64), True, w)
    with pytest.raises(ValueError, match="gradients and inputs must have the same shape"):
        q.gradient(np.zeros(4, F32), np.zeros(3, F32), w)
    with pytest.raises(TypeError, match="name must be a str"):
        q.build((3,), None, None)
    with pytest.raises(TypeError, match="tensor_shape"):
        q.build(3, "q", None)
    with pytest.raises(ValueError, match="tensor_shape"):
        q.build((3, -1), "q", None)


# --- Layers that own the state


class KerasLikeLayer:
    """A minimal owner with Keras's add_weight signature; it keeps what it made."""

    def __init__(self):
        self.made = []

    def add_weight(self, name=None, shape=None, dtype=None, initializer=None, trainable=None):
        value = initializer(shape, dtype)
        self.made.append((name, shape, dtype, trainable, value))
        return value


def test_layer_add_weight():
    layer = KerasLikeLayer()
    w = LV(8, True, False, False).build((3, 3, 8, 16), "conv_kernel", layer)
    assert [(m[0], m[1], m[2], m[3]) for m in layer.made] == [
        ("conv_kernel_min", (16,), "float32", False), ("conv_kernel_max", (16,), "float32", False)]
    assert w["min_var"] is layer.made[0][4] and w["max_var"] is layer.made[1][4]
    assert w["min_var"].tolist() == [-6] * 16 and w["max_var"].tolist() == [6] * 16
    layer = KerasLikeLayer()
    w = AV(8, True, False, False).build((4, 5), "act", layer)
    assert [(m[0], m[1]) for m in layer.made] == [("act_min", ()), ("act_max", ())]
    assert state(w) == (0, 0)


def test_layer_add_weight_minimal_signatures():
    """The spec's protocol, add_weight(name, shape, initializer or value, trainable): no dtype
    argument is needed, and a layer that takes only a value gets one."""
    class WithInitializer:
        def add_weight(self, name, shape, initializer, trainable):
            return initializer(shape)

    class WithValue:
        def add_weight(self, name, shape, value, trainable):
            assert trainable is False
            return np.array(value)

    for layer in (WithInitializer(), WithValue()):
        w = LV(8, True, False, False).build((2, 3), "k", layer)
        assert w["min_var"].tolist() == [-6] * 3 and w["max_var"].tolist() == [6] * 3


def test_layer_must_return_float32_arrays():
    class Bad:
        def add_weight(self, name=None, shape=None, dtype=None, initializer=None, trainable=None):
            return initializer(shape, dtype).astype(np.float64)

    with pytest.raises(TypeError, match=r"add_weight\('q_min'\) must return a float32 numpy array of shape \(\)"):
        LV(8, False, False, False).build((3,), "q", Bad())
    with pytest.raises(TypeError, match="add_weight method"):
        LV(8, False, False, False).build((3,), "q", object())


def test_constant_initializer():
    c = Constant(-6)
    assert c((2,), "float32").tolist() == [-6, -6] and c((), None).dtype == F32
    assert c.get_config() == {"value": -6.0} and eval(repr(c), {"Constant": Constant}) == c


def test_abstract_base():
    with pytest.raises(TypeError):
        fqcore.Quantizer()

    class Clip(fqcore.Quantizer):
        def build(self, tensor_shape, name, layer):
            return {}

        def __call__(self, inputs, training, weights, **kwargs):
            return np.clip(inputs, -1, 1)

        def get_config(self):
            return {}

    c = Clip()
    assert c == Clip.from_config({}) and repr(c) == "Clip()"
    with pytest.raises(NotImplementedError, match="Clip does not implement gradient"):
        c.gradient(f32(1), f32(1), {})
