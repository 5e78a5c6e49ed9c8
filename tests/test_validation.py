"""The spec's validation table: each bad input raises the right exception, naming argument and value."""
import numpy as np
import pytest

import fqcore

X = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
G = np.ones_like(X)
LO, HI = np.full(3, -1, np.float32), np.ones(3, np.float32)

ALL_OPS = [
    lambda **k: fqcore.fake_quant_with_min_max_args(X, **k),
    lambda **k: fqcore.fake_quant_with_min_max_args_gradient(G, X, **k),
    lambda **k: fqcore.fake_quant_with_min_max_vars(X, -1.0, 1.0, **k),
    lambda **k: fqcore.fake_quant_with_min_max_vars_gradient(G, X, -1.0, 1.0, **k),
    lambda **k: fqcore.fake_quant_with_min_max_vars_per_channel(X, LO, HI, **k),
    lambda **k: fqcore.fake_quant_with_min_max_vars_per_channel_gradient(G, X, LO, HI, **k),
]


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("bits", [0, 1, 17, 32, -8])
def test_num_bits_out_of_range(op, bits):
    with pytest.raises(ValueError, match=f"num_bits must be between 2 and 16, inclusive, got {bits}"):
        op(num_bits=bits)


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("bits", [8.0, "8", None, True])
def test_num_bits_not_an_int(op, bits):
    with pytest.raises(TypeError, match="num_bits"):
        op(num_bits=bits)


@pytest.mark.parametrize("op", ALL_OPS)
def test_narrow_range_not_a_bool(op):
    with pytest.raises(TypeError, match="narrow_range must be a bool, got 1"):
        op(narrow_range=1)


@pytest.mark.parametrize("lo, hi, shown", [(2.0, 1.0, "2 >= 1"), (1.0, 1.0, "1 >= 1"),
                                            (-1e-38, 1e-38, "-0 >= 0"), (float("nan"), 1.0, "nan >= 1")])
def test_args_min_not_below_max(lo, hi, shown):
    for op in (lambda: fqcore.fake_quant_with_min_max_args(X, lo, hi),
               lambda: fqcore.fake_quant_with_min_max_args_gradient(G, X, lo, hi)):
        with pytest.raises(ValueError, match=f"min has to be smaller than max, was: {shown}"):
            op()


@pytest.mark.parametrize("op", [
    lambda: fqcore.fake_quant_with_min_max_args_gradient(G[:1], X),
    lambda: fqcore.fake_quant_with_min_max_vars_gradient(G.T, X, -1.0, 1.0),
    lambda: fqcore.fake_quant_with_min_max_vars_per_channel_gradient(G.reshape(-1), X, LO, HI),
])
def test_gradient_shape_mismatch_names_both(op):
    with pytest.raises(ValueError, match=r"gradients \(.*\) and inputs \(2, 3\)"):
        op()


@pytest.mark.parametrize("name", ["min", "max"])
def test_vars_range_must_be_rank_0(name):
    bad = {"min": np.float32(-1), "max": np.float32(1), name: np.zeros(1, np.float32)}
    with pytest.raises(ValueError, match=f"`{name}` must be rank 0 but is rank 1"):
        fqcore.fake_quant_with_min_max_vars(X, bad["min"], bad["max"])
    with pytest.raises(ValueError, match=f"`{name}` must be rank 0 but is rank 1"):
        fqcore.fake_quant_with_min_max_vars_gradient(G, X, bad["min"], bad["max"])


def test_vars_range_as_0d_array_and_python_float_agree():
    a = fqcore.fake_quant_with_min_max_vars(X, np.array(-0.7, np.float32), np.array(0.9, np.float32))
    b = fqcore.fake_quant_with_min_max_vars(X, -0.7, 0.9)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("lo, hi, message", [
    (np.zeros(2, np.float32), HI, "min has incorrect size, expected 3 was 2"),
    (LO, np.zeros(4, np.float32), "max has incorrect size, expected 3 was 4"),
    (np.zeros((1, 3), np.float32), HI, "min must be rank 1 but is rank 2"),
    (np.float32(0), HI, "min must be rank 1 but is rank 0"),
])
def test_per_channel_range_shape(lo, hi, message):
    with pytest.raises(ValueError, match=message):
        fqcore.fake_quant_with_min_max_vars_per_channel(X, lo, hi)
    with pytest.raises(ValueError, match=message):
        fqcore.fake_quant_with_min_max_vars_per_channel_gradient(G, X, lo, hi)


def test_per_channel_rank_0_input():
    x = np.array(1.0, np.float32)
    with pytest.raises(ValueError, match=r"inputs must be at least rank 1, got shape \(\)"):
        fqcore.fake_quant_with_min_max_vars_per_channel(x, LO[:1], HI[:1])
    with pytest.raises(ValueError, match=r"inputs must be at least rank 1, got shape \(\)"):
        fqcore.fake_quant_with_min_max_vars_per_channel_gradient(x, x, LO[:1], HI[:1])


@pytest.mark.parametrize("bad", [X.astype(np.float64), X.astype(np.float16), X.astype(np.int32),
                                 X.astype(">f4"), np.array(["a", "b"]), "text", None,
                                 np.array([True, False])])
def test_non_float32_inputs(bad):
    with pytest.raises(TypeError, match="float32"):
        fqcore.fake_quant_with_min_max_args(bad)
    with pytest.raises(TypeError, match="float32"):
        fqcore.fake_quant_with_min_max_vars_gradient(bad, bad, -1.0, 1.0)


def test_python_lists_convert_like_tf():
    np.testing.assert_array_equal(fqcore.fake_quant_with_min_max_args([0.5, 1.0]),
                                  fqcore.fake_quant_with_min_max_args(np.array([0.5, 1.0], np.float32)))


@pytest.mark.parametrize("value", ["1", None, True])
def test_vars_range_not_numeric(value):
    with pytest.raises(TypeError, match="`min` must be a float32 scalar"):
        fqcore.fake_quant_with_min_max_vars(X, value, 1.0)


@pytest.mark.parametrize("value, rank", [([-1.0], 1), ((-1.0, 0.0), 1), ([[-1.0]], 2)])
def test_vars_range_sequences_have_a_rank_like_tf_tensors(value, rank):
    with pytest.raises(ValueError, match=f"`min` must be rank 0 but is rank {rank}"):
        fqcore.fake_quant_with_min_max_vars(X, value, 1.0)


def test_ints_too_large_for_a_float_are_named():
    for call, name in ((lambda: fqcore.fake_quant_with_min_max_args(X, min=-10**400, max=1.0), "min"),
                       (lambda: fqcore.fake_quant_with_min_max_vars(X, -1.0, 10**400), "`max`")):
        with pytest.raises(ValueError, match=f"{name} is an int too large for a float"):
            call()


def test_args_range_not_numeric():
    with pytest.raises(TypeError, match="min must be a float"):
        fqcore.fake_quant_with_min_max_args(X, "a", 1.0)


def test_out_checks():
    with pytest.raises(ValueError, match=r"out has shape \(3, 2\), expected \(2, 3\)"):
        fqcore.fake_quant_with_min_max_args(X, out=np.empty((3, 2), np.float32))
    with pytest.raises(TypeError, match="out must be a float32 ndarray"):
        fqcore.fake_quant_with_min_max_args(X, out=np.empty((2, 3)))
    with pytest.raises(ValueError, match=r"this one \(shape \(2, 3\), strides \(4, 8\)\) is not C-contiguous$"):
        fqcore.fake_quant_with_min_max_args(X, out=np.empty((3, 2), np.float32).T)
    frozen = np.empty((2, 3), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match=r"\) is not writeable$"):
        fqcore.fake_quant_with_min_max_args(X, out=frozen)


def test_out_is_filled_and_returned_and_inputs_untouched():
    x = X.copy()
    out = np.empty_like(x)
    result = fqcore.fake_quant_with_min_max_vars(x, -0.5, 0.5, out=out)
    assert result is out
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(out, fqcore.fake_quant_with_min_max_vars(X, -0.5, 0.5))


def test_in_place_and_partial_overlap():
    expected = fqcore.fake_quant_with_min_max_args(np.arange(-40, 40, dtype=np.float32) / 7)
    buf = np.arange(-40, 40, dtype=np.float32) / 7
    fqcore.fake_quant_with_min_max_args(buf, out=buf)
    np.testing.assert_array_equal(buf, expected)
    # out overlaps the input shifted by one element: the input must be read before it is written
    big = np.concatenate([[0], np.arange(-40, 40, dtype=np.float32) / 7]).astype(np.float32)
    fqcore.fake_quant_with_min_max_args(big[1:], out=big[:-1])
    np.testing.assert_array_equal(big[:-1], expected)


def test_non_contiguous_views_give_the_same_result():
    base = np.random.default_rng(0).uniform(-8, 8, (40, 30)).astype(np.float32)
    view = base[::2, 1::3]
    np.testing.assert_array_equal(fqcore.fake_quant_with_min_max_vars(view, -6.0, 6.0),
                                  fqcore.fake_quant_with_min_max_vars(view.copy(), -6.0, 6.0))
    lim = np.full(view.shape[-1], 6.0, np.float32)
    a = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(view, view, -lim, lim)
    b = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(view.copy(), view.copy(), -lim, lim)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


def test_misaligned_buffer():
    raw = np.zeros(4 * 33 + 1, np.uint8)[1:]
    x = raw.view(np.float32)
    x[:] = np.linspace(-7, 7, 33, dtype=np.float32)
    assert not x.flags.aligned
    np.testing.assert_array_equal(fqcore.fake_quant_with_min_max_vars(x, -6.0, 6.0),
                                  fqcore.fake_quant_with_min_max_vars(x.copy(), -6.0, 6.0))


def test_misaligned_per_channel_ranges():
    raw = np.zeros(4 * 3 + 1, np.uint8)[1:]
    lo = raw.view(np.float32)
    lo[:] = LO
    assert not lo.flags.aligned
    np.testing.assert_array_equal(fqcore.fake_quant_with_min_max_vars_per_channel(X, lo, HI),
                                  fqcore.fake_quant_with_min_max_vars_per_channel(X, LO, HI))


def test_empty_and_0d():
    empty = np.zeros((0, 3), np.float32)
    assert fqcore.fake_quant_with_min_max_args(empty).shape == (0, 3)
    dx, dmin, dmax = fqcore.fake_quant_with_min_max_vars_gradient(empty, empty, -1.0, 1.0)
    assert dx.shape == (0, 3) and dmin == 0 and dmax == 0
    dx, dmin, dmax = fqcore.fake_quant_with_min_max_vars_per_channel_gradient(empty, empty, LO, HI)
    assert dx.shape == (0, 3) and list(dmin) == [0, 0, 0] and list(dmax) == [0, 0, 0]
    scalar = np.array(0.3, np.float32)
    assert fqcore.fake_quant_with_min_max_vars(scalar, -1.0, 1.0).shape == ()
