"""fqcore.graph.nn_numpy: forwards against slow loop references, gradients against finite differences,
TF's tie / padding / divisor rules, dtypes and argument validation."""
import itertools
import math
import zlib

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import fqcore.graph.nn_numpy as nn


# ---------------------------------------------------------------------------------------------------
# References: explicit loops over output pixels and kernel positions, straight from TF's definitions.

def ref_geometry(size, k, stride, dilation, padding):
    """(out, pad_before) from the TF formulas; out <= 0 means VALID cannot run."""
    effective = (k - 1) * dilation + 1
    if padding == "VALID":
        return math.ceil((size - effective + 1) / stride), 0
    out = math.ceil(size / stride)
    return out, max((out - 1) * stride + effective - size, 0) // 2


def ref_taps(x_shape, kernel, strides, padding, dilations):
    """out shape, and for each output pixel (r, q) the in-bounds input pixels of its window in
    row-major kernel order."""
    _, h, w, _ = x_shape
    oh, top = ref_geometry(h, kernel[0], strides[0], dilations[0], padding)
    ow, left = ref_geometry(w, kernel[1], strides[1], dilations[1], padding)
    taps = {}
    for r in range(oh):
        for q in range(ow):
            taps[r, q] = []
            for i in range(kernel[0]):
                for j in range(kernel[1]):
                    ih = r * strides[0] - top + i * dilations[0]
                    iw = q * strides[1] - left + j * dilations[1]
                    if 0 <= ih < h and 0 <= iw < w:
                        taps[r, q].append((i, j, ih, iw))
    return (oh, ow), taps


def ref_conv2d(x, w, strides, padding, dilations):
    (oh, ow), taps = ref_taps(x.shape, w.shape[:2], strides, padding, dilations)
    y = np.zeros((x.shape[0], oh, ow, w.shape[3]))
    for (r, q), window in taps.items():
        for i, j, ih, iw in window:
            y[:, r, q, :] += x[:, ih, iw, :] @ w[i, j]
    return y


def ref_depthwise(x, w, strides, padding, dilations):
    n, _, _, c = x.shape
    m = w.shape[3]
    (oh, ow), taps = ref_taps(x.shape, w.shape[:2], strides, padding, dilations)
    y = np.zeros((n, oh, ow, c * m))
    for (r, q), window in taps.items():
        for i, j, ih, iw in window:
            for ch in range(c):
                for k in range(m):
                    y[:, r, q, ch * m + k] += x[:, ih, iw, ch] * w[i, j, ch, k]
    return y


def ref_max_pool(x, ksize, strides, padding):
    (oh, ow), taps = ref_taps(x.shape, ksize, strides, padding, (1, 1))
    y = np.zeros((x.shape[0], oh, ow, x.shape[3]))
    for (r, q), window in taps.items():
        y[:, r, q, :] = np.max([x[:, ih, iw, :] for _, _, ih, iw in window], axis=0)
    return y


def ref_max_pool_grad(x, dy, ksize, strides, padding):
    """dy of each window to its first maximum (np.argmax returns the first occurrence)."""
    _, taps = ref_taps(x.shape, ksize, strides, padding, (1, 1))
    dx = np.zeros(x.shape)
    for (r, q), window in taps.items():
        first = np.argmax([x[:, ih, iw, :] for _, _, ih, iw in window], axis=0)
        for k, (_, _, ih, iw) in enumerate(window):
            dx[:, ih, iw, :] += np.where(first == k, dy[:, r, q, :], 0.0)
    return dx


def ref_avg_pool(x, ksize, strides, padding):
    (oh, ow), taps = ref_taps(x.shape, ksize, strides, padding, (1, 1))
    y = np.zeros((x.shape[0], oh, ow, x.shape[3]))
    for (r, q), window in taps.items():
        y[:, r, q, :] = np.mean([x[:, ih, iw, :] for _, _, ih, iw in window], axis=0)
    return y


def ref_avg_pool_grad(x_shape, dy, ksize, strides, padding):
    _, taps = ref_taps(x_shape, ksize, strides, padding, (1, 1))
    dx = np.zeros(x_shape)
    for (r, q), window in taps.items():
        for _, _, ih, iw in window:
            dx[:, ih, iw, :] += dy[:, r, q, :] / len(window)
    return dx


def valid_too_small(x_shape, kernel, strides, padding, dilations):
    return any(ref_geometry(x_shape[1 + a], kernel[a], strides[a], dilations[a], padding)[0] <= 0
               for a in (0, 1))


# ---------------------------------------------------------------------------------------------------
# Geometry.

@pytest.mark.parametrize("args, expected", [
    ((5, 3, 2, 1, "SAME"), (3, 1, 1)),
    ((4, 3, 2, 1, "SAME"), (2, 0, 1)),     # odd total padding: the extra row goes after
    ((4, 2, 2, 1, "SAME"), (2, 0, 0)),
    ((7, 3, 1, 2, "SAME"), (7, 2, 2)),     # dilated kernel spans 5
    ((2, 5, 1, 1, "SAME"), (2, 2, 2)),     # kernel larger than the input
    ((3, 5, 2, 1, "SAME"), (2, 2, 2)),
    ((6, 1, 3, 1, "SAME"), (2, 0, 0)),
    ((5, 3, 2, 1, "VALID"), (2, 0, 0)),
    ((7, 3, 1, 2, "VALID"), (3, 0, 0)),
    ((10, 4, 3, 1, "VALID"), (3, 0, 0)),
    ((4, 4, 5, 1, "VALID"), (1, 0, 0)),
])
def test_output_size_and_padding(args, expected):
    assert nn.output_size_and_padding(*args) == expected


def test_output_size_valid_too_small():
    with pytest.raises(ValueError, match="VALID"):
        nn.output_size_and_padding(4, 3, 2, 2, "VALID")


# ---------------------------------------------------------------------------------------------------
# Forwards against the references.

STRIDES = [(1, 1), (2, 2), (3, 3), (2, 1), (1, 3)]
DILATIONS = [(1, 1), (2, 2), (1, 2)]
SHAPES = [(2, 7, 7, 3), (1, 8, 6, 2), (1, 5, 9, 1)]   # odd, even, non-square
KERNELS = [(3, 3), (2, 4), (1, 1), (4, 4)]


def _rng(*key):
    """A generator seeded by the test case, the same in every run (hash() of str is salted)."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


@pytest.mark.parametrize("strides, padding, dilations",
                         list(itertools.product(STRIDES, ["SAME", "VALID"], DILATIONS)))
def test_conv2d_matches_reference(strides, padding, dilations):
    rng = _rng("conv", strides, padding, dilations)
    checked = 0
    for x_shape, kernel in itertools.product(SHAPES, KERNELS):
        x = rng.standard_normal(x_shape)
        w = rng.standard_normal(kernel + (x_shape[3], 3))
        if valid_too_small(x_shape, kernel, strides, padding, dilations):
            with pytest.raises(ValueError, match="VALID"):
                nn.conv2d(x, w, strides, padding, dilations)
            continue
        y = nn.conv2d(x, w, strides, padding, dilations)
        np.testing.assert_allclose(y, ref_conv2d(x, w, strides, padding, dilations), rtol=1e-12, atol=1e-12)
        checked += 1
    assert checked >= 4


@pytest.mark.parametrize("strides, padding, dilations",
                         list(itertools.product(STRIDES, ["SAME", "VALID"], DILATIONS)))
@pytest.mark.parametrize("m", [1, 2])
def test_depthwise_matches_reference(strides, padding, dilations, m):
    rng = _rng("depthwise", strides, padding, dilations, m)
    checked = 0
    for x_shape, kernel in itertools.product(SHAPES, KERNELS):
        x = rng.standard_normal(x_shape)
        w = rng.standard_normal(kernel + (x_shape[3], m))
        if valid_too_small(x_shape, kernel, strides, padding, dilations):
            with pytest.raises(ValueError, match="VALID"):
                nn.depthwise_conv2d(x, w, strides, padding, dilations)
            continue
        y = nn.depthwise_conv2d(x, w, strides, padding, dilations)
        np.testing.assert_allclose(y, ref_depthwise(x, w, strides, padding, dilations), rtol=1e-12, atol=1e-12)
        checked += 1
    assert checked >= 4


POOL_KSIZES = [(2, 2), (3, 3), (2, 3), (1, 1), (5, 4)]


@pytest.mark.parametrize("strides, padding", list(itertools.product(STRIDES + [(4, 4)], ["SAME", "VALID"])))
def test_pools_match_reference(strides, padding):
    rng = _rng("pool", strides, padding)
    checked = 0
    for x_shape, ksize in itertools.product(SHAPES, POOL_KSIZES):
        x = rng.standard_normal(x_shape)
        if valid_too_small(x_shape, ksize, strides, padding, (1, 1)):
            for pool in (nn.max_pool, nn.avg_pool):
                with pytest.raises(ValueError, match="VALID"):
                    pool(x, ksize, strides, padding)
            continue
        np.testing.assert_array_equal(nn.max_pool(x, ksize, strides, padding),
                                      ref_max_pool(x, ksize, strides, padding))
        np.testing.assert_allclose(nn.avg_pool(x, ksize, strides, padding),
                                   ref_avg_pool(x, ksize, strides, padding), rtol=1e-12, atol=1e-12)
        # Small integers make ties common, so this also checks the first-maximum rule.
        xi = rng.integers(0, 3, size=x_shape).astype(np.float64)
        y = nn.max_pool(xi, ksize, strides, padding)
        dy = rng.standard_normal(y.shape)
        np.testing.assert_allclose(nn.max_pool_grad(xi, y, dy, ksize, strides, padding),
                                   ref_max_pool_grad(xi, dy, ksize, strides, padding), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(nn.avg_pool_grad(x_shape, dy, ksize, strides, padding),
                                   ref_avg_pool_grad(x_shape, dy, ksize, strides, padding), rtol=1e-12, atol=1e-12)
        checked += 1
    assert checked >= 4


@pytest.mark.parametrize("x_shape, kernel, strides", [
    ((1, 3, 2, 2), (5, 4), (1, 1)),    # kernel larger than the input, SAME
    ((2, 3, 2, 2), (5, 4), (2, 3)),
    ((1, 1, 1, 3), (3, 3), (1, 1)),    # a single pixel
    ((1, 2, 5, 1), (7, 2), (4, 1)),
])
def test_kernel_larger_than_input_same(x_shape, kernel, strides):
    rng = _rng("big", x_shape, kernel, strides)
    x = rng.standard_normal(x_shape)
    w = rng.standard_normal(kernel + (x_shape[3], 2))
    np.testing.assert_allclose(nn.conv2d(x, w, strides, "SAME"),
                               ref_conv2d(x, w, strides, "SAME", (1, 1)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(nn.depthwise_conv2d(x, w, strides, "SAME"),
                               ref_depthwise(x, w, strides, "SAME", (1, 1)), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(nn.max_pool(x, kernel, strides, "SAME"),
                                  ref_max_pool(x, kernel, strides, "SAME"))
    np.testing.assert_allclose(nn.avg_pool(x, kernel, strides, "SAME"),
                               ref_avg_pool(x, kernel, strides, "SAME"), rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 2), h=st.integers(1, 9), w=st.integers(1, 9), c=st.integers(1, 3),
       o=st.integers(1, 3), kh=st.integers(1, 4), kw=st.integers(1, 4), sh=st.integers(1, 3),
       sw=st.integers(1, 3), dh=st.integers(1, 2), dw=st.integers(1, 2),
       padding=st.sampled_from(["SAME", "VALID"]), seed=st.integers(0, 2**32 - 1))
def test_conv_and_depthwise_random_configs(n, h, w, c, o, kh, kw, sh, sw, dh, dw, padding, seed):
    x_shape, kernel, strides, dilations = (n, h, w, c), (kh, kw), (sh, sw), (dh, dw)
    assume(not valid_too_small(x_shape, kernel, strides, padding, dilations))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape)
    filt = rng.standard_normal(kernel + (c, o))
    np.testing.assert_allclose(nn.conv2d(x, filt, strides, padding, dilations),
                               ref_conv2d(x, filt, strides, padding, dilations), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(nn.depthwise_conv2d(x, filt, strides, padding, dilations),
                               ref_depthwise(x, filt, strides, padding, dilations), rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 2), h=st.integers(1, 9), w=st.integers(1, 9), c=st.integers(1, 5),
       o=st.integers(1, 3), kh=st.integers(1, 4), kw=st.integers(1, 4), sh=st.integers(1, 3),
       sw=st.integers(1, 3), dh=st.integers(1, 2), dw=st.integers(1, 2),
       padding=st.sampled_from(["SAME", "VALID"]), seed=st.integers(0, 2**32 - 1))
def test_float32_c_kernels_match_float64(n, h, w, c, o, kh, kw, sh, sw, dh, dw, padding, seed):
    """float32 runs fqcore's C kernels (im2col, col2im, depthwise), float64 the numpy path: the
    same results to float32's precision, forward and gradients, every geometry."""
    x_shape, kernel, strides, dilations = (n, h, w, c), (kh, kw), (sh, sw), (dh, dw)
    assume(not valid_too_small(x_shape, kernel, strides, padding, dilations))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape)
    filt = rng.standard_normal(kernel + (c, o))
    args = (strides, padding, dilations)
    y = nn.conv2d(x, filt, *args)
    yd = nn.depthwise_conv2d(x, filt, *args)
    g, gd = rng.standard_normal(y.shape), rng.standard_normal(yd.shape)
    wide = [y, *nn.conv2d_grad(x, filt, g, *args), yd, *nn.depthwise_conv2d_grad(x, filt, gd, *args)]
    x32, f32, g32, gd32 = (a.astype(np.float32) for a in (x, filt, g, gd))
    narrow = [nn.conv2d(x32, f32, *args), *nn.conv2d_grad(x32, f32, g32, *args),
              nn.depthwise_conv2d(x32, f32, *args), *nn.depthwise_conv2d_grad(x32, f32, gd32, *args)]
    for r64, r32 in zip(wide, narrow):
        assert r32.dtype == np.float32 and r32.shape == r64.shape
        scale = np.abs(r64).max(initial=1.0)
        np.testing.assert_allclose(r32, r64, rtol=1e-5, atol=2e-6 * scale * kh * kw * max(n * h * w, 1))


def test_non_contiguous_inputs():
    """Views with odd and negative strides read the right elements (the windows come from x's own
    strides when there is no padding to copy into)."""
    rng = np.random.default_rng(7)
    base = rng.standard_normal((2, 12, 9, 6))
    x = base[:, ::2, ::-1, 1::2]
    w = rng.standard_normal((3, 2, 3, 4))[::-1]
    for padding in ("SAME", "VALID"):
        np.testing.assert_allclose(nn.conv2d(x, w, (2, 1), padding),
                                   ref_conv2d(x, w, (2, 1), padding, (1, 1)), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(nn.depthwise_conv2d(x, w, (1, 2), padding),
                                   ref_depthwise(x, w, (1, 2), padding, (1, 1)), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(nn.max_pool(x, (3, 2), (1, 2), padding),
                                      ref_max_pool(x, (3, 2), (1, 2), padding))


def test_empty_batch():
    x = np.zeros((0, 5, 5, 2))
    w = np.ones((3, 3, 2, 4))
    assert nn.conv2d(x, w).shape == (0, 5, 5, 4)
    dx, dw = nn.conv2d_grad(x, w, np.zeros((0, 5, 5, 4)))
    assert dx.shape == x.shape and not dw.any()
    assert nn.depthwise_conv2d(x, w[..., :2], (2, 2)).shape == (0, 3, 3, 4)
    assert nn.max_pool(x).shape == (0, 2, 2, 2)
    assert nn.max_pool_grad(x, np.zeros((0, 2, 2, 2)), np.zeros((0, 2, 2, 2))).shape == x.shape
    assert nn.avg_pool_grad(x.shape, np.zeros((0, 2, 2, 2))).shape == x.shape


# ---------------------------------------------------------------------------------------------------
# Gradients against central finite differences of L = sum(f(a) * g), float64.

def check_gradient(f, a, g, analytic, rng, h=1e-3, count=40):
    """Compare analytic dL/da with central differences at `count` random elements of a (all when
    a is smaller). Conv and average pooling are linear, so the differences are exact up to rounding;
    max pooling is too as long as no perturbation changes a window's winner (the callers keep
    values >= 10h apart)."""
    assert analytic.shape == a.shape and analytic.dtype == a.dtype
    flat = range(a.size) if a.size <= count else rng.choice(a.size, size=count, replace=False)
    numeric, exact = [], []
    for k in flat:
        up, down = a.copy(), a.copy()
        up.flat[k] += h
        down.flat[k] -= h
        numeric.append((np.sum(f(up) * g) - np.sum(f(down) * g)) / (2 * h))
        exact.append(analytic.flat[k])
    scale = max(np.abs(analytic).max(), 1.0)
    np.testing.assert_allclose(exact, numeric, rtol=1e-6, atol=1e-9 * scale)
    assert np.any(np.asarray(exact) != 0)  # a zero gradient would pass vacuously


GRAD_CASES = [  # x shape, kernel, strides, padding, dilations
    ((2, 5, 5, 3), (3, 3), (1, 1), "SAME", (1, 1)),
    ((2, 6, 7, 2), (2, 3), (2, 3), "SAME", (1, 1)),
    ((1, 7, 6, 2), (3, 2), (1, 2), "VALID", (2, 1)),
    ((2, 4, 4, 3), (5, 5), (2, 2), "SAME", (1, 1)),   # kernel larger than the input
    ((1, 9, 8, 2), (3, 3), (3, 3), "VALID", (2, 2)),
    ((1, 6, 6, 2), (4, 4), (2, 2), "SAME", (2, 1)),
]


@pytest.mark.parametrize("x_shape, kernel, strides, padding, dilations", GRAD_CASES)
def test_conv2d_grad_finite_differences(x_shape, kernel, strides, padding, dilations):
    rng = _rng("conv grad", x_shape, kernel, strides, padding, dilations)
    x = rng.standard_normal(x_shape)
    w = rng.standard_normal(kernel + (x_shape[3], 3))
    g = rng.standard_normal(nn.conv2d(x, w, strides, padding, dilations).shape)
    dx, dw = nn.conv2d_grad(x, w, g, strides, padding, dilations)
    check_gradient(lambda a: nn.conv2d(a, w, strides, padding, dilations), x, g, dx, rng)
    check_gradient(lambda a: nn.conv2d(x, a, strides, padding, dilations), w, g, dw, rng)


@pytest.mark.parametrize("x_shape, kernel, strides, padding, dilations", GRAD_CASES)
@pytest.mark.parametrize("m", [1, 2])
def test_depthwise_grad_finite_differences(x_shape, kernel, strides, padding, dilations, m):
    rng = _rng("depthwise grad", x_shape, kernel, strides, padding, dilations, m)
    x = rng.standard_normal(x_shape)
    w = rng.standard_normal(kernel + (x_shape[3], m))
    g = rng.standard_normal(nn.depthwise_conv2d(x, w, strides, padding, dilations).shape)
    dx, dw = nn.depthwise_conv2d_grad(x, w, g, strides, padding, dilations)
    check_gradient(lambda a: nn.depthwise_conv2d(a, w, strides, padding, dilations), x, g, dx, rng)
    check_gradient(lambda a: nn.depthwise_conv2d(x, a, strides, padding, dilations), w, g, dw, rng)


@pytest.mark.parametrize("x_shape, kernel, strides, padding, dilations, m", [
    ((2, 7, 9, 3), (3, 3), (2, 2), "SAME", (2, 2), 3),    # kernel columns sharing a column phase
    ((1, 5, 8, 2), (2, 4), (1, 4), "VALID", (1, 2), 1),
    ((2, 3, 10, 2), (1, 5), (3, 3), "SAME", (1, 1), 2),   # more phases than some rows have columns
])
def test_depthwise_grad_strided_phases(x_shape, kernel, strides, padding, dilations, m):
    rng = _rng("depthwise phases", x_shape, kernel, strides, padding, dilations, m)
    x = rng.standard_normal(x_shape)
    w = rng.standard_normal(kernel + (x_shape[3], m))
    y = nn.depthwise_conv2d(x, w, strides, padding, dilations)
    np.testing.assert_allclose(y, ref_depthwise(x, w, strides, padding, dilations), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(y.shape)
    dx, dw = nn.depthwise_conv2d_grad(x, w, g, strides, padding, dilations)
    check_gradient(lambda a: nn.depthwise_conv2d(a, w, strides, padding, dilations), x, g, dx, rng)
    check_gradient(lambda a: nn.depthwise_conv2d(x, a, strides, padding, dilations), w, g, dw, rng)


POOL_GRAD_CASES = [  # x shape, ksize, strides, padding
    ((2, 6, 6, 2), (2, 2), (2, 2), "VALID"),
    ((2, 5, 7, 2), (3, 3), (1, 1), "SAME"),    # overlapping windows: gradients add up
    ((1, 7, 5, 3), (3, 2), (2, 3), "SAME"),
    ((1, 8, 8, 1), (3, 3), (2, 2), "VALID"),
    ((1, 3, 4, 2), (5, 5), (2, 1), "SAME"),    # window larger than the input
]


@pytest.mark.parametrize("x_shape, ksize, strides, padding", POOL_GRAD_CASES)
def test_max_pool_grad_finite_differences(x_shape, ksize, strides, padding):
    rng = _rng("max grad", x_shape, ksize, strides, padding)
    # Distinct values 0.01 apart: a perturbation of 1e-3 never changes a window's maximum.
    x = rng.permutation(math.prod(x_shape)).reshape(x_shape) * 0.01
    y = nn.max_pool(x, ksize, strides, padding)
    g = rng.standard_normal(y.shape)
    dx = nn.max_pool_grad(x, y, g, ksize, strides, padding)
    check_gradient(lambda a: nn.max_pool(a, ksize, strides, padding), x, g, dx, rng)


@pytest.mark.parametrize("x_shape, ksize, strides, padding", POOL_GRAD_CASES)
def test_avg_pool_grad_finite_differences(x_shape, ksize, strides, padding):
    rng = _rng("avg grad", x_shape, ksize, strides, padding)
    x = rng.standard_normal(x_shape)
    g = rng.standard_normal(nn.avg_pool(x, ksize, strides, padding).shape)
    dx = nn.avg_pool_grad(x_shape, g, ksize, strides, padding)
    check_gradient(lambda a: nn.avg_pool(a, ksize, strides, padding), x, g, dx, rng)


# ---------------------------------------------------------------------------------------------------
# TF's rules, by hand.

def test_max_pool_grad_ties_go_to_first_element():
    x = np.ones((1, 4, 4, 1))
    dy = np.arange(1.0, 5.0).reshape(1, 2, 2, 1)
    dx = nn.max_pool_grad(x, nn.max_pool(x), dy)
    expected = np.zeros((4, 4))
    expected[0, 0], expected[0, 2], expected[2, 0], expected[2, 2] = 1, 2, 3, 4
    np.testing.assert_array_equal(dx[0, :, :, 0], expected)


@pytest.mark.parametrize("value", [1.0, -np.inf])
def test_max_pool_grad_ties_same_padding(value):
    """Constant 3x3 input, 3x3 SAME window, stride 1: each output's gradient goes to the first
    in-bounds element of its window; padding (-inf) never wins, even against -inf inputs."""
    x = np.full((1, 3, 3, 1), value)
    dy = np.arange(1.0, 10.0).reshape(1, 3, 3, 1)
    dx = nn.max_pool_grad(x, nn.max_pool(x, (3, 3), (1, 1), "SAME"), dy, (3, 3), (1, 1), "SAME")
    expected = np.array([[1 + 2 + 4 + 5, 3 + 6, 0], [7 + 8, 9, 0], [0, 0, 0]], dtype=float)
    np.testing.assert_array_equal(dx[0, :, :, 0], expected)


def test_max_pool_grad_nan_and_inf():
    """TF's CPU rule with NaN: the first in-bounds element is taken, a later one only if strictly
    greater, so a later NaN never wins; an infinite dy reaches only its winner."""
    x = np.array([1.0, np.nan, 3.0, 2.0, np.nan, 5.0, 4.0, 0.0]).reshape(1, 1, 8, 1)
    dy = np.array([10.0, np.inf]).reshape(1, 1, 2, 1)
    dx = nn.max_pool_grad(x, nn.max_pool(x, (1, 4), (1, 4)), dy, (1, 4), (1, 4))
    np.testing.assert_array_equal(dx[0, 0, :, 0], [0, 0, 10, 0, np.inf, 0, 0, 0])


def test_avg_pool_same_border_divisor():
    x = np.arange(1.0, 10.0).reshape(1, 3, 3, 1)
    # 2x2 stride 2 SAME on 3x3: one padding row / column after, so the border windows hold 2 or 1.
    y = nn.avg_pool(x, (2, 2), (2, 2), "SAME")
    np.testing.assert_allclose(y[0, :, :, 0], [[(1 + 2 + 4 + 5) / 4, (3 + 6) / 2], [(7 + 8) / 2, 9]])
    # 3x3 stride 1 SAME: corners average 4 elements, edges 6, the centre 9.
    y = nn.avg_pool(x, (3, 3), (1, 1), "SAME")
    assert y[0, 0, 0, 0] == pytest.approx((1 + 2 + 4 + 5) / 4)
    assert y[0, 0, 1, 0] == pytest.approx((1 + 2 + 3 + 4 + 5 + 6) / 6)
    assert y[0, 1, 1, 0] == pytest.approx(5.0)
    dx = nn.avg_pool_grad(x.shape, np.ones((1, 2, 2, 1)), (2, 2), (2, 2), "SAME")
    np.testing.assert_allclose(dx[0, :, :, 0], [[0.25, 0.25, 0.5], [0.25, 0.25, 0.5], [0.5, 0.5, 1.0]])


def test_depthwise_channel_order():
    """Output channel c*M + m is input channel c through multiplier m."""
    x = np.zeros((1, 1, 1, 2))
    x[..., 1] = 1.0
    w = np.arange(1.0, 7.0).reshape(1, 1, 2, 3)
    np.testing.assert_array_equal(nn.depthwise_conv2d(x, w)[0, 0, 0], [0, 0, 0, 4, 5, 6])


# ---------------------------------------------------------------------------------------------------
# float32 in, float32 out, close to float64.

def test_float32():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 7, 6, 4))
    w = rng.standard_normal((3, 3, 4, 5))
    wd = rng.standard_normal((3, 2, 4, 2))
    args = ((2, 1), "SAME", (1, 2))
    y = nn.conv2d(x, w, *args)
    yd = nn.depthwise_conv2d(x, wd, *args)
    ym = nn.max_pool(x, (3, 3), (2, 2), "SAME")
    g, gd, gm = (rng.standard_normal(a.shape) for a in (y, yd, ym))
    results64 = [y, *nn.conv2d_grad(x, w, g, *args), yd, *nn.depthwise_conv2d_grad(x, wd, gd, *args), ym,
                 nn.max_pool_grad(x, ym, gm, (3, 3), (2, 2), "SAME"), nn.avg_pool(x, (3, 3), (2, 2), "SAME"),
                 nn.avg_pool_grad(x.shape, gm, (3, 3), (2, 2), "SAME")]
    f = [a.astype(np.float32) for a in (x, w, wd, g, gd, gm)]
    x32, w32, wd32, g32, gd32, gm32 = f
    ym32 = nn.max_pool(x32, (3, 3), (2, 2), "SAME")
    results32 = [nn.conv2d(x32, w32, *args), *nn.conv2d_grad(x32, w32, g32, *args),
                 nn.depthwise_conv2d(x32, wd32, *args), *nn.depthwise_conv2d_grad(x32, wd32, gd32, *args), ym32,
                 nn.max_pool_grad(x32, ym32, gm32, (3, 3), (2, 2), "SAME"), nn.avg_pool(x32, (3, 3), (2, 2), "SAME"),
                 nn.avg_pool_grad(x.shape, gm32, (3, 3), (2, 2), "SAME")]
    for r64, r32 in zip(results64, results32, strict=True):
        assert r32.dtype == np.float32
        np.testing.assert_allclose(r32, r64, rtol=1e-4, atol=1e-4 * np.abs(r64).max())


# ---------------------------------------------------------------------------------------------------
# Validation: clear errors naming the argument.

X = np.zeros((1, 4, 4, 2))
W = np.zeros((3, 3, 2, 3))


@pytest.mark.parametrize("call, error, pattern", [
    (lambda: nn.conv2d(X[0], W), ValueError, "x must be 4-dimensional"),
    (lambda: nn.conv2d(X, W[0]), ValueError, "w must be 4-dimensional"),
    (lambda: nn.conv2d(X, np.zeros((3, 3, 3, 1))), ValueError, "w has 3 input channels"),
    (lambda: nn.depthwise_conv2d(X, np.zeros((3, 3, 1, 1))), ValueError, "w has 1 input channels"),
    (lambda: nn.conv2d(X, np.zeros((0, 3, 2, 1))), ValueError, "w must have a positive size"),
    (lambda: nn.conv2d(X, W, padding="same"), ValueError, "padding must be"),
    (lambda: nn.max_pool(X, padding=b"SAME"), ValueError, "padding must be"),
    (lambda: nn.conv2d(X, W, strides=(0, 1)), ValueError, "strides must be"),
    (lambda: nn.conv2d(X, W, strides=(1, 1, 1, 1)), ValueError, "strides must be"),
    (lambda: nn.conv2d(X, W, strides=(1.0, 1)), ValueError, "strides must be"),
    (lambda: nn.conv2d(X, W, dilations=(1, -1)), ValueError, "dilations must be"),
    (lambda: nn.depthwise_conv2d(X, W[..., :1], dilations=2), ValueError, "dilations must be"),
    (lambda: nn.max_pool(X, ksize=(0, 2)), ValueError, "ksize must be"),
    (lambda: nn.avg_pool(X, ksize=(2, 2), strides=(2, True)), ValueError, "strides must be"),
    (lambda: nn.conv2d(X, np.zeros((5, 3, 2, 1)), padding="VALID"), ValueError, "padding='VALID'.*height"),
    (lambda: nn.max_pool(X, (2, 5), (1, 1), "VALID"), ValueError, "padding='VALID'.*width"),
    (lambda: nn.conv2d_grad(X, W, np.zeros((1, 4, 4, 2))), ValueError, "dy must have the output's shape"),
    (lambda: nn.depthwise_conv2d_grad(X, W[..., :2], np.zeros((1, 4, 4, 2))), ValueError, "dy must have"),
    (lambda: nn.max_pool_grad(X, np.zeros((1, 2, 2, 1)), np.zeros((1, 2, 2, 2))), ValueError, "y must have"),
    (lambda: nn.max_pool_grad(X, np.zeros((1, 2, 2, 2)), np.zeros((1, 2, 2))), ValueError, "dy must be 4"),
    (lambda: nn.avg_pool_grad((1, 4, 4), np.zeros((1, 2, 2, 2))), ValueError, "x_shape must be"),
    (lambda: nn.avg_pool_grad((1, 4, -4, 2), np.zeros((1, 2, 2, 2))), ValueError, "x_shape must be"),
    (lambda: nn.avg_pool_grad((1, 6, 6, 2), np.zeros((1, 2, 2, 2))), ValueError, "dy must have"),
    (lambda: nn.conv2d(X.astype(np.int32), W), TypeError, "x must be a float32 or float64"),
    (lambda: nn.avg_pool_grad(X.shape, np.zeros((1, 2, 2, 2), np.int64)), TypeError, "dy must be a float32"),
    (lambda: nn.output_size_and_padding(4, 3, 0, 1, "SAME"), ValueError, "stride must be"),
    (lambda: nn.output_size_and_padding(4, 3, 1, 0, "SAME"), ValueError, "dilation must be"),
    (lambda: nn.output_size_and_padding(4, 0, 1, 1, "SAME"), ValueError, "k must be"),
    (lambda: nn.output_size_and_padding(-1, 3, 1, 1, "SAME"), ValueError, "in_size must be"),
    (lambda: nn.output_size_and_padding(4, 3, 1, 1, "FULL"), ValueError, "padding must be"),
])
def test_validation(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()
