"""fqcore's float32 matrix product (fq_f32_matmul through _kernels.matmul) and the graph's
convolutions on it (_kernels.conv2d_forward / conv2d_grad, through nn_numpy): within the error bound of a sum of fused multiply-adds
against float64, the same bits on every ISA, thread count and operand layout, NaN and infinities
as IEEE arithmetic gives them, and clear errors for bad arguments."""
import numpy as np
import pytest

import fqcore
from fqcore import _kernels
from fqcore.graph import nn_numpy

SHAPES = [(1, 1, 1), (5, 9, 3), (12, 256, 32), (13, 257, 33), (25, 300, 64), (100, 37, 17),
          (4096, 9, 32), (64, 64, 10)]


def _product(a, b):
    c = np.empty((a.shape[0], b.shape[1]), np.float32)
    _kernels.matmul(a, b, c)
    return c


def _layouts(x):
    """x in the layouts the kernel reads differently: rows contiguous, transposed (columns
    contiguous), strided both ways (every other row and column of a larger array), and reversed
    both ways (negative strides)."""
    rows, columns = x.shape
    strided = np.zeros((2 * rows, 2 * columns), np.float32)
    strided[::2, ::2] = x
    return {"rows": np.ascontiguousarray(x), "columns": np.asfortranarray(x),
            "strided": strided[::2, ::2], "reversed": np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1]}


@pytest.mark.parametrize("m,depth,n", SHAPES)
def test_within_the_bound_of_fused_sums(isa, m, depth, n):
    """|c - a @ b| <= depth * 2^-24 * (|a| @ |b|) elementwise, against float64."""
    rng = np.random.default_rng(m * 1000 + depth + n)
    a = rng.standard_normal((m, depth)).astype(np.float32)
    b = rng.standard_normal((depth, n)).astype(np.float32)
    c = _product(a, b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = depth * 2.0 ** -24 * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    assert np.all(np.abs(c - exact) <= bound)


def test_small_integers_are_exact(isa):
    rng = np.random.default_rng(3)
    a = rng.integers(-8, 9, (37, 70)).astype(np.float32)
    b = rng.integers(-8, 9, (70, 45)).astype(np.float32)
    np.testing.assert_array_equal(_product(a, b), (a.astype(np.int64) @ b.astype(np.int64)))


def test_each_term_is_a_fused_multiply_add(isa):
    """-1 - 2^-11 + (1 + 2^-12)^2 is 2^-24 exactly; a rounded square first would give 0."""
    a = np.array([[-1 - 2.0 ** -11, 1 + 2.0 ** -12]], np.float32)
    b = np.array([[1], [1 + 2.0 ** -12]], np.float32)
    assert _product(a, b)[0, 0] == np.float32(2.0 ** -24)


def test_same_bits_on_every_isa_thread_count_and_layout():
    rng = np.random.default_rng(7)
    cases = [(m, depth, n, rng.standard_normal((m, depth)).astype(np.float32),
              rng.standard_normal((depth, n)).astype(np.float32)) for m, depth, n in SHAPES]
    previous_isa, previous_threads = fqcore.get_isa(), fqcore.get_num_threads()
    expected = {}
    try:
        for isa in fqcore.available_isas():
            fqcore.set_isa(isa)
            for threads in (1, 2, 3):
                fqcore.set_num_threads(threads)
                for m, depth, n, a, b in cases:
                    for a_name, a_view in _layouts(a).items():
                        for b_name, b_view in _layouts(b).items():
                            c = _product(a_view, b_view).view(np.uint32)
                            key = (m, depth, n)
                            if key not in expected:
                                expected[key] = c
                            assert np.array_equal(c, expected[key]), (isa, threads, key, a_name, b_name)
    finally:
        fqcore.set_isa(previous_isa)
        fqcore.set_num_threads(previous_threads)


def test_nan_and_infinities(isa):
    a = np.ones((3, 4), np.float32)
    b = np.ones((4, 2), np.float32)
    a[0, 1] = np.nan
    a[1, 2] = np.inf
    b[2, 1] = 0.0
    c = _product(a, b)
    assert np.isnan(c[0]).all()
    assert c[1, 0] == np.inf and np.isnan(c[1, 1])  # inf * 0 is NaN
    np.testing.assert_array_equal(c[2], [4.0, 3.0])


def test_subnormals_are_flushed(isa):
    """As TF's CPU kernels run: subnormal operands count as zero."""
    a = np.array([[1e-40, 1.0]], np.float32)
    b = np.array([[1.0], [0.0]], np.float32)
    assert _product(a, b)[0, 0] == 0.0


def test_empty_operands():
    np.testing.assert_array_equal(_product(np.ones((3, 0), np.float32), np.ones((0, 2), np.float32)),
                                  np.zeros((3, 2), np.float32))
    assert _product(np.ones((0, 4), np.float32), np.ones((4, 5), np.float32)).shape == (0, 5)


@pytest.mark.parametrize("a,b,c,error,pattern", [
    (np.ones((2, 3), np.float32), np.ones((4, 2), np.float32), np.empty((2, 2), np.float32),
     ValueError, "b must have 3 rows"),
    (np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), np.empty((3, 2), np.float32),
     ValueError, r"c must be \[2, 2\]"),
    (np.ones((2, 3), np.float64), np.ones((3, 2), np.float32), np.empty((2, 2), np.float32),
     ValueError, "dtype"),
    (np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), np.empty((2, 2), np.float32).T,
     ValueError, "contiguous"),
    (np.frombuffer(bytes(26), np.float32, 6, 1).reshape(2, 3), np.ones((3, 2), np.float32),
     np.empty((2, 2), np.float32), None, None),
])
def test_bad_arguments(a, b, c, error, pattern):
    if error is None:  # unaligned data with whole-element strides is read as it is
        _kernels.matmul(a, b, c)
        np.testing.assert_array_equal(c, a.astype(np.float64) @ b)
        return
    with pytest.raises(error, match=pattern):
        _kernels.matmul(a, b, c)


def test_strides_must_be_whole_elements():
    raw = np.zeros(64, np.uint8)
    a = np.lib.stride_tricks.as_strided(raw[:4].view(np.float32), (2, 2), (6, 4))
    with pytest.raises(ValueError, match="a's strides must be whole float32 elements, got 6"):
        _kernels.matmul(a, np.ones((2, 2), np.float32), np.empty((2, 2), np.float32))


def _pointwise_geometry(pixels, window):
    """The 14 sizes of a 1x1 convolution of x [1, pixels, 1, window], whose columns are x."""
    return (1, pixels, 1, window, 1, 1, pixels, 1, 1, 1, 1, 1, 0, 0)


def test_filter_gradient_either_way_round_gives_the_same_bits(isa):
    """conv2d_grad forms cols' dy, or (dy' cols)' where fqcore's kernel runs faster that way (the
    result's columns a multiple of its vectors, else the longer side as its rows): the same bits
    both ways, a fused multiply-add not depending on its factors' order. The shapes take both."""
    rng = np.random.default_rng(11)
    for pixels, window, outputs in [(4096, 9, 32), (1024, 288, 64), (512, 96, 16), (300, 32, 96),
                                    (100, 32, 10), (64, 10, 40)]:
        cols = rng.standard_normal((pixels, window)).astype(np.float32)
        dy = rng.standard_normal((pixels, outputs)).astype(np.float32)
        made = _kernels.conv2d_grad(cols, _pointwise_geometry(pixels, window),
                                    [np.ones((1, 1, window, outputs), np.float32)],
                                    [dy.reshape(1, pixels, 1, outputs)], True, False)
        straight, flipped = _product(cols.T, dy), _product(dy.T, cols).T
        np.testing.assert_array_equal(straight, flipped)
        if isa in ("avx512", "avx2"):
            assert made[0] is None
            np.testing.assert_array_equal(made[1].reshape(window, outputs), straight)
        else:
            assert made is None


def test_convolutions_use_the_kernel_on_avx512_and_avx2(isa):
    """On the AVX-512 and AVX2 paths a float32 convolution's product is fqcore's (its bits);
    elsewhere numpy's, to float32 rounding of the same sums."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 6, 8)).astype(np.float32)
    w = rng.standard_normal((3, 3, 8, 32)).astype(np.float32)
    y = nn_numpy.conv2d(x, w)
    cols = nn_numpy.conv2d_columns(x, w.shape)
    own = _product(cols, w.reshape(-1, 32)).reshape(y.shape)
    if isa in ("avx512", "avx2"):
        np.testing.assert_array_equal(y, own)
    else:
        np.testing.assert_allclose(y, own, rtol=1e-5, atol=1e-5)


def test_which_convolutions_the_kernel_takes(isa):
    """conv2d_forward / conv2d_grad (bindings) take native float32 arrays, C-contiguous and
    aligned, of the shapes the geometry gives, on the AVX-512 and AVX2 paths; for anything else
    they return None, and nn_numpy makes contiguous copies or multiplies on numpy's BLAS."""
    own = isa in ("avx512", "avx2")
    assert fqcore._runtime.own_matrix_products() == own
    x = np.ones((2, 5, 5, 3), np.float32)
    w = np.ones((3, 3, 3, 4), np.float32)
    g = nn_numpy.conv_geometry(x, w)
    cols = nn_numpy.conv2d_columns(x, w.shape)
    dy = np.ones((2, 5, 5, 4), np.float32)
    assert (_kernels.conv2d_forward(x, w, g.sizes, None) is not None) == own
    assert (_kernels.conv2d_grad(cols, g.sizes, [w], [dy], True, True) is not None) == own
    refused = [
        _kernels.conv2d_forward(x.astype(np.float64), w, g.sizes, None),
        _kernels.conv2d_forward(np.asfortranarray(x), w, g.sizes, None),
        _kernels.conv2d_forward(x.astype(">f4"), w, g.sizes, None),
        _kernels.conv2d_forward(x.tolist(), w, g.sizes, None),
        _kernels.conv2d_forward(x, w[:, :, :2], g.sizes, None),  # channels
        _kernels.conv2d_forward(x, w, g.sizes, cols[1:]),  # the columns of another input
        _kernels.conv2d_grad(cols, g.sizes, [w], [dy[:, 1:]], True, True),  # dy of another size
        _kernels.conv2d_grad(cols, g.sizes, [w], [dy[..., :3]], True, True),  # of other filters
        _kernels.conv2d_grad(cols, g.sizes, [w], [], True, True),  # a filter without its dy
        _kernels.conv2d_grad(cols, g.sizes, [], [], True, False),  # no term for dw
        _kernels.conv2d_grad(np.asfortranarray(cols), g.sizes, [w], [dy], True, True)]
    assert refused == [None] * len(refused)


def _conv_steps(x, w, dys, strides, padding, dilations):
    """(y, dx, dw) of a float32 convolution as its steps taken one at a time: im2col, fqcore's
    products (dx's one going on over the filters), col2im."""
    g = nn_numpy.conv_geometry(x, w[0], strides, padding, dilations)
    cols = nn_numpy.conv2d_columns(x, w[0].shape, strides, padding, dilations)
    y = _product(cols, w[0].reshape(-1, w[0].shape[3])).reshape(dys[0].shape)
    dcols = np.empty(cols.shape, np.float32)
    for k, (filters, dy) in enumerate(zip(w, dys)):
        _kernels.matmul(dy.reshape(-1, filters.shape[3]), filters.reshape(-1, filters.shape[3]).T,
                        dcols, k > 0)
    dx = nn_numpy._col2im(dcols, x.shape, w[0].shape[:2], g, np.dtype(np.float32))
    return y, dx, _product(cols.T, dys[0].reshape(-1, w[0].shape[3])).reshape(w[0].shape)


@pytest.mark.parametrize("kernel,strides,padding,dilations,outputs", [
    ((3, 3), (1, 1), "SAME", (1, 1), (32,)), ((3, 3), (2, 2), "SAME", (1, 1), (24, 8)),
    ((1, 1), (1, 1), "SAME", (1, 1), (16, 16)), ((2, 3), (2, 1), "VALID", (2, 1), (7,)),
    ((1, 1), (2, 2), "VALID", (1, 1), (5, 3))])
def test_a_convolution_in_one_call_gives_the_bits_of_its_steps(isa, kernel, strides, padding,
                                                                dilations, outputs):
    """nn_numpy's float32 convolution, one kernel call each way on the AVX-512 and AVX2 paths
    (pointwise ones with x as their columns), gives the bits of its steps made one at a time;
    from arrays that are not in the kernels' form (strided, Fortran order), the same bits."""
    rng = np.random.default_rng(sum(kernel) + sum(outputs))
    x = rng.standard_normal((3, 9, 8, 6)).astype(np.float32)
    w = [rng.standard_normal(kernel + (6, o)).astype(np.float32) for o in outputs]
    g = nn_numpy.conv_geometry(x, w[0], strides, padding, dilations)
    dys = [rng.standard_normal((3, g.oh, g.ow, o)).astype(np.float32) for o in outputs]
    for x_in, w_in in [(x, w), (np.asfortranarray(x), [np.asfortranarray(f) for f in w])]:
        y, cols = nn_numpy.conv2d_planned(x_in, w_in[0], None, g)
        dx, dw = nn_numpy.conv2d_grad_planned(x_in, w_in[0], dys[0], cols, g,
                                              more=list(zip(w_in[1:], dys[1:])))
        steps = _conv_steps(x, w, dys, strides, padding, dilations)
        if isa in ("avx512", "avx2"):
            for made, expected in zip((y, dx, dw), steps):
                np.testing.assert_array_equal(made.view(np.uint32), expected.view(np.uint32))
        else:
            for made, expected in zip((y, dx, dw), steps):
                np.testing.assert_allclose(made, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,depths,n", [(13, (5, 7), 33), (25, (256, 44), 64), (100, (9, 300, 1), 17),
                                        (4096, (32, 32), 32), (7, (0, 3), 5)])
def test_a_continued_product_is_the_product_of_the_concatenations(isa, m, depths, n):
    """matmul(..., continues=True) goes on with c's sums: the parts of a depth split taken one
    after the other give the bits of the whole product, in every layout of the parts."""
    rng = np.random.default_rng(m + n + sum(depths))
    a = rng.standard_normal((m, sum(depths))).astype(np.float32)
    b = rng.standard_normal((sum(depths), n)).astype(np.float32)
    whole = _product(a, b)
    bounds = np.cumsum((0,) + depths)
    for layout in ("rows", "columns", "strided", "reversed"):
        c = np.full((m, n), np.nan, np.float32)
        for k, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
            _kernels.matmul(_layouts(a[:, start:end])[layout], _layouts(b[start:end])[layout], c,
                            continues=k > 0)
        np.testing.assert_array_equal(c, whole, err_msg=layout)


def test_a_continued_product_of_no_depth_leaves_c_as_it_is():
    c = np.arange(6, dtype=np.float32).reshape(2, 3)
    _kernels.matmul(np.ones((2, 0), np.float32), np.ones((0, 3), np.float32), c, continues=True)
    np.testing.assert_array_equal(c, np.arange(6, dtype=np.float32).reshape(2, 3))


def test_a_convolution_gradient_sums_its_filters_in_one_product(isa):
    """conv2d_grad_planned's input gradient for filters sharing the columns (the fold's two
    convolutions) is the one product of their dy side by side and their filters stacked: with
    fqcore's kernel its bits, with BLAS to float32 rounding."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 6, 6, 16)).astype(np.float32)
    w1, w2 = (rng.standard_normal((3, 3, 16, 24)).astype(np.float32) for _ in range(2))
    g = nn_numpy.conv_geometry(x, w1)
    cols = nn_numpy.columns_planned(x, w1.shape, g)
    dy1, dy2 = (rng.standard_normal((4, g.oh, g.ow, 24)).astype(np.float32) for _ in range(2))
    dx, dw = nn_numpy.conv2d_grad_planned(x, w1, dy1, cols, g, more=[(w2, dy2)])
    dcols = _product(np.concatenate([dy1.reshape(-1, 24), dy2.reshape(-1, 24)], axis=1),
                     np.concatenate([w1.reshape(-1, 24), w2.reshape(-1, 24)], axis=1).T)
    expected = nn_numpy._col2im(dcols, x.shape, w1.shape[:2], g, x.dtype)
    if isa in ("avx512", "avx2"):
        np.testing.assert_array_equal(dx, expected)
    else:
        np.testing.assert_allclose(dx, expected, rtol=1e-4, atol=1e-4)
    filter_gradient = _product(cols.T, dy1.reshape(-1, 24)).reshape(w1.shape)
    if isa in ("avx512", "avx2"):
        np.testing.assert_array_equal(dw, filter_gradient)
    else:
        np.testing.assert_allclose(dw, filter_gradient, rtol=1e-4, atol=1e-4)
