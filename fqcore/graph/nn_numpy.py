"""TensorFlow-semantics NHWC convolution and pooling, forward and gradient: im2col and a matrix
product for convolutions (fqcore's on the AVX-512 and AVX2 paths, numpy's BLAS elsewhere),
fqcore's C kernels for float32's data movement and depthwise loops, numpy for the rest."""

from collections import namedtuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import _kernels
from ..ops import _kernel_form

_PADDINGS = ("SAME", "VALID")
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
FLOAT32 = np.dtype(np.float32)


# ---------------------------------------------------------------------------------------------------
# Argument checks. Each message names the argument so a graph-level error can be traced to its node.

def _positive_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value > 0


def _pair(value, name):
    """(h, w) of a strides / dilations / ksize argument, both positive ints."""
    try:
        h, w = value
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an (h, w) pair of positive ints, got {value!r}") from None
    if not (_positive_int(h) and _positive_int(w)):
        raise ValueError(f"{name} must be an (h, w) pair of positive ints, got {value!r}")
    return int(h), int(w)


def _padding(padding):
    if not isinstance(padding, str) or padding not in _PADDINGS:
        raise ValueError(f"padding must be 'SAME' or 'VALID', got {padding!r}")
    return padding


def _input(x, name):
    """The NHWC input whose dtype (float32 or float64) every other array and the results take."""
    x = np.asarray(x)
    if x.ndim != 4:
        raise ValueError(f"{name} must be 4-dimensional (NHWC), got shape {x.shape}")
    if x.dtype not in _FLOATS:
        raise TypeError(f"{name} must be a float32 or float64 array, got dtype {x.dtype}")
    return x


def _other(value, name, dtype):
    """A further 4-d operand (w, dy, y), cast to the input's dtype as TF requires one T for all."""
    value = np.asarray(value, dtype=dtype)
    if value.ndim != 4:
        raise ValueError(f"{name} must be 4-dimensional, got shape {value.shape}")
    return value


def _filter(w, x, name="w"):
    w = _other(w, name, x.dtype)
    if w.shape[2] != x.shape[3]:
        raise ValueError(f"{name} has {w.shape[2]} input channels (shape {w.shape}) but x has "
                         f"{x.shape[3]} (shape {x.shape})")
    if min(w.shape) < 1:
        raise ValueError(f"{name} must have a positive size in every dimension, got shape {w.shape}")
    return w


def _same_shape(value, name, shape):
    if value.shape != tuple(shape):
        raise ValueError(f"{name} must have the output's shape {tuple(shape)}, got {value.shape}")


# ---------------------------------------------------------------------------------------------------
# Geometry.

def _out_pad(size, k, stride, dilation, padding, what):
    effective = (k - 1) * dilation + 1
    if padding == "VALID":
        out = -(-(size - effective + 1) // stride)  # ceil((in - (k-1)*d) / s), as TF computes it
        if out <= 0:
            raise ValueError(f"padding='VALID' needs the input {what} ({size}) to be at least the dilated "
                             f"kernel {what} ({effective}); the output {what} would be {out}")
        return out, 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + effective - size, 0)
    return out, total // 2, total - total // 2  # TF puts the odd element of padding after


def output_size_and_padding(in_size, k, stride, dilation, padding):
    """(out, pad_before, pad_after) of one spatial dimension under TF's SAME / VALID rules."""
    if not isinstance(in_size, (int, np.integer)) or isinstance(in_size, bool) or in_size < 0:
        raise ValueError(f"in_size must be a non-negative int, got {in_size!r}")
    for name, value in (("k", k), ("stride", stride), ("dilation", dilation)):
        if not _positive_int(value):
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return _out_pad(int(in_size), int(k), int(stride), int(dilation), _padding(padding), "size")


def _geometry(x_shape, kernel, strides, dilations, padding):
    """Output height, width and the (top, bottom, left, right) padding."""
    oh, top, bottom = _out_pad(x_shape[1], kernel[0], strides[0], dilations[0], padding, "height")
    ow, left, right = _out_pad(x_shape[2], kernel[1], strides[1], dilations[1], padding, "width")
    return oh, ow, (top, bottom, left, right)


def _pad(x, pads, value):
    """x with `pads` rows / columns of `value` around it (x itself when there are none)."""
    if not any(pads):
        return x
    n, h, w, c = x.shape
    top, bottom, left, right = pads
    # One filled buffer and one copy: np.pad is several times slower on these shapes.
    out = np.full((n, h + top + bottom, w + left + right, c), value, dtype=x.dtype)
    out[:, top:top + h, left:left + w] = x
    return out


def _windows(xp, oh, ow, kernel, strides, dilations):
    """A read-only [N, OH, OW, KH, KW, C] view of every window of the padded input (no copy)."""
    n, _, _, c = xp.shape
    sn, sh, sw, sc = xp.strides
    return as_strided(xp, shape=(n, oh, ow, kernel[0], kernel[1], c),
                      strides=(sn, sh * strides[0], sw * strides[1], sh * dilations[0], sw * dilations[1], sc),
                      writeable=False)


def _tap(i, j, oh, ow, strides, dilations):
    """The slice of the padded input that kernel position (i, j) reads for all outputs."""
    r, q = i * dilations[0], j * dilations[1]
    return (slice(None), slice(r, r + (oh - 1) * strides[0] + 1, strides[0]),
            slice(q, q + (ow - 1) * strides[1] + 1, strides[1]))


def _scatter(pieces, x_shape, pads, strides, dilations, dtype):
    """col2im: add each ((i, j), piece [N, OH, OW, C]) at kernel position (i, j) of a padded zero
    buffer, then crop the padding off. Overlapping windows make this a sum, not a store."""
    n, h, w, c = x_shape
    top, bottom, left, right = pads
    dxp = np.zeros((n, h + top + bottom, w + left + right, c), dtype=dtype)
    for (i, j), piece in pieces:
        if piece.shape[1] and piece.shape[2]:  # an empty output has an empty slice to add to
            dxp[_tap(i, j, piece.shape[1], piece.shape[2], strides, dilations)] += piece
    if not any(pads):
        return dxp
    return np.ascontiguousarray(dxp[:, top:top + h, left:left + w])


def _positions(kernel):
    return [(i, j) for i in range(kernel[0]) for j in range(kernel[1])]


# ---------------------------------------------------------------------------------------------------
# Convolution: TF Conv2D / Conv2DBackpropInput / Conv2DBackpropFilter with HWIO filters, and
# DepthwiseConv2dNative. float32 (what training runs) goes to fqcore's C kernels (im2col, col2im
# and the depthwise loops, src_c/conv); float64 takes the same steps in numpy. Both sum each
# element in the same order: kernel positions row-major, then the depthwise multiplier.

def _conv_setup(x, w, strides, padding, dilations):
    x = _input(x, "x")
    w = _filter(w, x)
    strides, dilations = _pair(strides, "strides"), _pair(dilations, "dilations")
    oh, ow, pads = _geometry(x.shape, w.shape[:2], strides, dilations, _padding(padding))
    return x, w, strides, dilations, oh, ow, pads


# A convolution's checked geometry on an input of one shape: what the *_planned functions take,
# so that a caller that runs one geometry many times (a Session plan's convolution) checks its
# arguments and works out the kernels' sizes once. `sizes`: fq_conv_geometry's, in its order;
# `pointwise`: a 1x1 kernel at stride 1, which reads each pixel once, in place (its columns are x
# itself).
ConvGeometry = namedtuple("ConvGeometry",
                          ["strides", "dilations", "oh", "ow", "pads", "sizes", "pointwise"])


def _checked_geometry(x_shape, kernel, strides, dilations, oh, ow, pads):
    """The ConvGeometry of a kernel of `kernel` (KH, KW) on an x of `x_shape`, as checked."""
    return ConvGeometry(strides, dilations, oh, ow, pads,
                        (*x_shape, *kernel, oh, ow, *strides, *dilations, pads[0], pads[2]),
                        tuple(kernel) == (1, 1) and strides == (1, 1))


def _im2col(x, w_shape, g):
    """[N*OH*OW, KH*KW*C]: row p holds output pixel p's window, in the (kh, kw, c) order of an HWIO
    filter flattened to [KH*KW*C, O] so that one matmul is the whole convolution."""
    columns = w_shape[0] * w_shape[1] * w_shape[2]
    if g.pointwise:
        return np.ascontiguousarray(x).reshape(-1, columns)
    if x.dtype == FLOAT32:
        cols = np.empty((x.shape[0] * g.oh * g.ow, columns), FLOAT32)
        _kernels.im2col(_kernel_form(x), g.sizes, cols)
        return cols
    windows = _windows(_pad(x, g.pads, 0), g.oh, g.ow, w_shape[:2], g.strides, g.dilations)
    return np.ascontiguousarray(windows).reshape(-1, columns)


def _col2im(dcols, x_shape, kernel, g, dtype):
    """dx [N, H, W, C]: the adjoint of _im2col, each element the sum of its window entries in
    kernel-position order."""
    if g.pointwise:
        return dcols.reshape(x_shape)
    if dtype == FLOAT32:
        dx = np.empty(x_shape, FLOAT32)
        _kernels.col2im(_kernel_form(dcols), g.sizes, dx)
        return dx
    n, _, _, c = x_shape
    oh, ow = g.oh, g.ow
    pieces = (((i, j), dcols[:, (i * kernel[1] + j) * c:(i * kernel[1] + j + 1) * c].reshape(n, oh, ow, c))
              for i, j in _positions(kernel))
    return _scatter(pieces, x_shape, g.pads, g.strides, g.dilations, dtype)


def conv_geometry(x, w, strides=(1, 1), padding="SAME", dilations=(1, 1)):
    """The geometry of conv2d(x, w, ...) after checking its arguments (ValueError, TypeError)."""
    x, w, strides, dilations, oh, ow, pads = _conv_setup(x, w, strides, padding, dilations)
    return _checked_geometry(x.shape, w.shape[:2], strides, dilations, oh, ow, pads)


def conv2d_columns(x, kernel_shape, strides=(1, 1), padding="SAME", dilations=(1, 1)):
    """The [N*OH*OW, KH*KW*C] windows conv2d multiplies with a filter of `kernel_shape` (KH, KW,
    C, O): computed once, they can serve several filters on the same input and their gradients
    (the `cols` argument of conv2d and conv2d_grad)."""
    x = _input(x, "x")
    kernel_shape = tuple(int(d) for d in kernel_shape)
    strides, dilations = _pair(strides, "strides"), _pair(dilations, "dilations")
    oh, ow, pads = _geometry(x.shape, kernel_shape[:2], strides, dilations, _padding(padding))
    return columns_planned(x, kernel_shape, _checked_geometry(x.shape, kernel_shape[:2], strides,
                                                              dilations, oh, ow, pads))


def columns_planned(x, kernel_shape, g):
    """conv2d_columns for an x and a filter shape that conv_geometry checked as `g`."""
    return _im2col(x, kernel_shape, g)


def _checked_cols(cols, x, w, oh, ow):
    if cols.shape != (x.shape[0] * oh * ow, w.shape[0] * w.shape[1] * w.shape[2]) or \
            cols.dtype != x.dtype:
        raise ValueError(f"cols must be conv2d_columns of x for this filter, got {cols.dtype} "
                         f"{cols.shape}")
    return cols


def conv2d(x, w, strides=(1, 1), padding="SAME", dilations=(1, 1), cols=None):
    """TF Conv2D, NHWC: x [N, H, W, C], w [KH, KW, C, O] -> y [N, OH, OW, O]; `cols`, when given,
    are conv2d_columns(x, w.shape, ...), which this call then does not compute again."""
    x, w, strides, dilations, oh, ow, pads = _conv_setup(x, w, strides, padding, dilations)
    g = _checked_geometry(x.shape, w.shape[:2], strides, dilations, oh, ow, pads)
    cols = None if cols is None else _checked_cols(cols, x, w, oh, ow)
    return conv2d_planned(x, w, cols, g)[0]


# A float32 convolution multiplies on fqcore's kernel (fq_f32_matmul, its sums in a fixed order: the
# same bits on every thread count), in one call for its forward and one for its gradients
# (_kernels.conv2d_forward / conv2d_grad, src_c/conv/conv_products.c), on the AVX-512 and AVX2 paths
# (_runtime.own_matrix_products): inside a Session run, where BLAS then has one thread
# (run_threads), the kernel took 0.5-1.0x BLAS's time at the benchmark models' products and
# 0.6-1.4x at their 8-column ones (AMD Zen 5, AVX-512); on the AVX2 path 0.76-0.95x the time of two
# BLAS threads at the same products, and the training steps took 0.72-0.78x (demo) and 0.75-0.85x
# (MobileNet-v2) their time on BLAS. Made one at a time from Python (im2col, the products, col2im),
# the same calls took the demo's step about 0.1 ms longer (Intel Xeon: 3.55-3.60 against 3.43-3.50
# ms, processes alternating). Elsewhere, and for float64, numpy's BLAS multiplies the same columns.

def conv2d_planned(x, w, cols, g):
    """(y, cols): conv2d of arrays that conv_geometry checked as `g`, and the columns it multiplied
    (`cols` when given, else made here)."""
    made = _kernels.conv2d_forward(x, w, g.sizes, cols)
    if made is None and x.dtype == FLOAT32 and _kernels.own_matrix_products():  # strided operands
        made = _kernels.conv2d_forward(_kernel_form(x), _kernel_form(w), g.sizes,
                                       None if cols is None else _kernel_form(cols))
    if made is not None:
        return made
    if cols is None:
        cols = _im2col(x, w.shape, g)
    y = np.matmul(cols, w.reshape(-1, w.shape[3]))
    return y.reshape(x.shape[0], g.oh, g.ow, w.shape[3]), cols


def conv2d_grad(x, w, dy, strides=(1, 1), padding="SAME", dilations=(1, 1), cols=None,
                input_gradient=True):
    """(dx, dw) of conv2d given dy = dL/dy [N, OH, OW, O] (and, when given, its `cols`); dx is
    None with input_gradient=False (x is data: nothing to learn upstream of it)."""
    x, w, strides, dilations, oh, ow, pads = _conv_setup(x, w, strides, padding, dilations)
    g = _checked_geometry(x.shape, w.shape[:2], strides, dilations, oh, ow, pads)
    dy = _other(dy, "dy", x.dtype)
    cols = columns_planned(x, w.shape, g) if cols is None else _checked_cols(cols, x, w, oh, ow)
    return conv2d_grad_planned(x, w, dy, cols, g, input_gradient)


def _filter_gradient(cols, dy):
    """cols' dy ([window, O]) on numpy's BLAS, or (dy' cols)' where that runs faster: OpenBLAS does
    with the longer side of the result as its rows (2 cores, Intel Xeon: 0.23 against 0.38 ms at
    [8192, 16] x [8192, 96], 0.22 against 0.29 at [512, 32] x [512, 1280]; the same or slower the
    other way round)."""
    return np.matmul(dy.T, cols).T if cols.shape[1] < dy.shape[1] else np.matmul(cols.T, dy)


def _summed_product(pairs):
    """The sum of a_k @ b_k over the (a_k, b_k) of `pairs` on numpy's BLAS: the one product of the
    a_k side by side and the b_k stacked."""
    if len(pairs) == 1:
        return np.matmul(*pairs[0])
    return np.matmul(np.concatenate([a for a, _ in pairs], axis=1),
                     np.concatenate([b for _, b in pairs], axis=0))


def conv2d_grad_planned(x, w, dy, cols, g, input_gradient=True, more=()):
    """conv2d_grad of arrays that conv_geometry checked as `g`, given their columns. `more`:
    (w_k, dy_k) of other filters of this geometry on the same columns, whose input gradients join
    dx in the same product (one col2im); dy may then be None (dw is None)."""
    filters, grads = ([w], [dy]) if dy is not None else ([], [])
    for filters_k, grad in more:
        filters.append(filters_k)
        grads.append(grad)
    made = _kernels.conv2d_grad(cols, g.sizes, filters, grads, dy is not None, input_gradient)
    if made is not None:
        return made
    for filters_k, grad in zip(filters, grads):
        _same_shape(grad, "dy", (x.shape[0], g.oh, g.ow, filters_k.shape[3]))
    if x.dtype == FLOAT32 and _kernels.own_matrix_products():  # strided operands: copies
        made = _kernels.conv2d_grad(_kernel_form(cols), g.sizes, list(map(_kernel_form, filters)),
                                    list(map(_kernel_form, grads)), dy is not None, input_gradient)
        if made is not None:
            return made
    # numpy's BLAS.
    terms = [(f.reshape(-1, f.shape[3]), np.ascontiguousarray(grad).reshape(-1, f.shape[3]))
             for f, grad in zip(filters, grads)]
    dw = None if dy is None else _filter_gradient(cols, terms[0][1]).reshape(w.shape)
    if not input_gradient:
        return None, dw
    dcols = _summed_product([(grad, f.T) for f, grad in terms])
    return _col2im(dcols, x.shape, w.shape[:2], g, x.dtype), dw


def _depthwise_windows(x, w, oh, ow, pads, strides, dilations):
    """(i, j, the [N, OH, OW, C*M] inputs kernel position (i, j) reads, each channel repeated M
    times) for the numpy path."""
    xp = _pad(x, pads, 0)
    m = w.shape[3]
    for i, j in _positions(w.shape[:2]):
        window = xp[_tap(i, j, oh, ow, strides, dilations)]
        yield i, j, (window if m == 1 else np.repeat(window, m, axis=3))


def depthwise_conv2d(x, w, strides=(1, 1), padding="SAME", dilations=(1, 1)):
    """TF DepthwiseConv2dNative, NHWC: x [N, H, W, C], w [KH, KW, C, M] -> y [N, OH, OW, C*M]."""
    x, w, strides, dilations, oh, ow, pads = _conv_setup(x, w, strides, padding, dilations)
    if x.dtype == np.float32:
        return depthwise_conv2d_planned(x, w, _checked_geometry(x.shape, w.shape[:2], strides,
                                                                dilations, oh, ow, pads))
    kh, kw, c, m = w.shape
    y = np.zeros((x.shape[0], oh, ow, c * m), dtype=x.dtype)
    for i, j, window in _depthwise_windows(x, w, oh, ow, pads, strides, dilations):
        y += window * w[i, j].reshape(c * m)
    return y


def depthwise_conv2d_planned(x, w, g):
    """depthwise_conv2d of float32 arrays that conv_geometry checked as `g`."""
    m = w.shape[3]
    y = np.empty((x.shape[0], g.oh, g.ow, w.shape[2] * m), np.float32)
    try:
        _kernels.depthwise(x, w, m, g.sizes, y)
    except ValueError:  # x or w not in the kernels' form (a strided view): copies
        _kernels.depthwise(_kernel_form(x), _kernel_form(w), m, g.sizes, y)
    return y


def depthwise_conv2d_grad(x, w, dy, strides=(1, 1), padding="SAME", dilations=(1, 1),
                          input_gradient=True):
    """(dx, dw) of depthwise_conv2d given dy = dL/dy [N, OH, OW, C*M]; dx is None with
    input_gradient=False."""
    x, w, strides, dilations, oh, ow, pads = _conv_setup(x, w, strides, padding, dilations)
    if x.dtype == np.float32:
        g = _checked_geometry(x.shape, w.shape[:2], strides, dilations, oh, ow, pads)
        return depthwise_conv2d_grad_planned(x, w, dy, g, input_gradient)
    n, h, wd, c = x.shape
    m = w.shape[3]
    dy = _other(dy, "dy", x.dtype)
    _same_shape(dy, "dy", (n, oh, ow, c * m))
    dw = np.empty_like(w)
    top, bottom, left, right = pads
    dxp = np.zeros((n, h + top + bottom, wd + left + right, c * m), dtype=x.dtype)
    for i, j, window in _depthwise_windows(x, w, oh, ow, pads, strides, dilations):
        dw[i, j] = (window * dy).sum(axis=(0, 1, 2)).reshape(c, m)
        dxp[_tap(i, j, oh, ow, strides, dilations)] += dy * w[i, j].reshape(c * m)
    if not input_gradient:
        return None, dw
    dx = dxp[:, top:top + h, left:left + wd].reshape(n, h, wd, c, m).sum(axis=4)
    return np.ascontiguousarray(dx), dw


def _depthwise_dy(dy, x, w, g):
    """dy of a float32 depthwise convolution, checked."""
    dy = _other(dy, "dy", x.dtype)
    _same_shape(dy, "dy", (x.shape[0], g.oh, g.ow, w.shape[2] * w.shape[3]))
    return dy


def _depthwise_gradients(x, w, dy, g, dx, dw):
    """Writes dx (unless None) and dw of a float32 depthwise convolution."""
    if dx is not None:
        _kernels.depthwise_grad_input(dy, w, w.shape[3], g.sizes, dx)
    _kernels.depthwise_grad_filter(x, dy, w.shape[3], g.sizes, dw)


def depthwise_conv2d_grad_planned(x, w, dy, g, input_gradient=True):
    """depthwise_conv2d_grad of float32 arrays that conv_geometry checked as `g` (dy is checked)."""
    dy = _depthwise_dy(dy, x, w, g)
    dx = np.empty(x.shape, np.float32) if input_gradient else None
    dw = np.empty(w.shape, np.float32)
    try:
        _depthwise_gradients(x, w, dy, g, dx, dw)
    except ValueError:  # an operand not in the kernels' form (a strided view): copies
        _depthwise_gradients(_kernel_form(x), _kernel_form(w), _kernel_form(dy), g, dx, dw)
    return dx, dw


def _added_in_order(parts):
    """The sum of `parts` added one by one in order (None for none), as reverse mode adds them."""
    total = None
    for part in parts:
        total = part if total is None else total + part
    return total


def depthwise_conv2d_input_grad_sum(x, terms, strides=(1, 1), padding="SAME", dilations=(1, 1)):
    """The sum of depthwise_conv2d_grad's dx over `terms`, (w, dy) pairs of one geometry on x,
    added in order: the same bits, and two float32 terms in one pass over dx."""
    if x.dtype != np.float32 or len(terms) != 2 or terms[0][0].shape != terms[1][0].shape:
        return _added_in_order(depthwise_conv2d_grad(x, w, dy, strides, padding, dilations)[0]
                               for w, dy in terms)
    x, w_a, strides, dilations, oh, ow, pads = _conv_setup(x, terms[0][0], strides, padding,
                                                           dilations)
    terms = [(w_a, terms[0][1]), (_filter(terms[1][0], x), terms[1][1])]
    return depthwise_conv2d_input_grad_sum_planned(
        x, terms, _checked_geometry(x.shape, w_a.shape[:2], strides, dilations, oh, ow, pads))


def depthwise_conv2d_input_grad_sum_planned(x, terms, g):
    """depthwise_conv2d_input_grad_sum of float32 arrays that conv_geometry checked as `g`, with
    filters of one shape (dy is checked)."""
    if len(terms) != 2:
        return _added_in_order(depthwise_conv2d_grad_planned(x, w, dy, g)[0] for w, dy in terms)
    (w_a, dy_a), (w_b, dy_b) = terms
    dx = np.empty(x.shape, np.float32)
    operands = [_depthwise_dy(dy_a, x, w_a, g), w_a, _depthwise_dy(dy_b, x, w_b, g), w_b]
    try:
        _kernels.depthwise_grad_input_sum(*operands, w_a.shape[3], g.sizes, dx)
    except ValueError:  # an operand not in the kernels' form: contiguous copies
        _kernels.depthwise_grad_input_sum(*map(_kernel_form, operands), w_a.shape[3], g.sizes, dx)
    return dx


# ---------------------------------------------------------------------------------------------------
# Pooling: TF MaxPool / MaxPoolGrad / AvgPool / AvgPoolGrad.

def _pool_setup(x_shape, ksize, strides, padding):
    ksize, strides = _pair(ksize, "ksize"), _pair(strides, "strides")
    oh, ow, pads = _geometry(x_shape, ksize, strides, (1, 1), _padding(padding))
    return ksize, strides, oh, ow, pads


def _in_bounds(out, k, stride, before, size):
    """[k, out] booleans: does kernel row i of output row o read an input row (not padding)?"""
    rows = np.arange(out)[None, :] * stride - before + np.arange(k)[:, None]
    return (rows >= 0) & (rows < size)


def max_pool(x, ksize=(2, 2), strides=(2, 2), padding="VALID"):
    """TF MaxPool, NHWC. Padding is -inf so it never wins; a NaN in a window gives NaN."""
    x = _input(x, "x")
    ksize, strides, oh, ow, pads = _pool_setup(x.shape, ksize, strides, padding)
    windows = _windows(_pad(x, pads, -np.inf), oh, ow, ksize, strides, (1, 1))
    y = np.array(windows[:, :, :, 0, 0])
    for i, j in _positions(ksize)[1:]:
        np.maximum(y, windows[:, :, :, i, j], out=y)
    return y


def max_pool_grad(x, y, dy, ksize=(2, 2), strides=(2, 2), padding="VALID"):
    """TF MaxPoolGrad, NHWC: each dy goes to one input, the first maximum of its window in row-major
    scan order. The winner is recomputed from x as TF's CPU kernel does (y is only shape-checked):
    the first in-bounds element is taken, then a later one only if strictly greater."""
    x = _input(x, "x")
    ksize, strides, oh, ow, pads = _pool_setup(x.shape, ksize, strides, padding)
    shape = (x.shape[0], oh, ow, x.shape[3])
    y, dy = _other(y, "y", x.dtype), _other(dy, "dy", x.dtype)
    _same_shape(y, "y", shape)
    _same_shape(dy, "dy", shape)
    positions = _positions(ksize)
    windows = _windows(_pad(x, pads, -np.inf), oh, ow, ksize, strides, (1, 1))
    # Masked stores (np.where, np.copyto(where=)) run ~15x slower than plain arithmetic on random
    # masks, so the scan uses maximum and multiplies where they give the same result as TF's rule:
    # best = maximum(best, value) unless x holds a NaN (a later NaN would take over), and
    # dy * is_winner unless dy holds an inf or NaN (0 * inf is NaN for the losers).
    nan_in_x = bool(np.isnan(x).any())
    finite_dy = bool(np.isfinite(dy).all())
    best = np.array(windows[:, :, :, 0, 0])
    # The winner's index in `positions`. Indices only grow during the scan, so "set to k where
    # better" is maximum(winner, better * k).
    winner = np.zeros(shape, dtype=np.min_scalar_type(len(positions) - 1))
    if any(pads):
        # A window whose in-bounds values are all -inf must still pick its first in-bounds element,
        # which "strictly greater than -inf" never would: track which outputs have taken one.
        rows_ok = _in_bounds(oh, ksize[0], strides[0], pads[0], x.shape[1])
        cols_ok = _in_bounds(ow, ksize[1], strides[1], pads[2], x.shape[2])
        taken = (rows_ok[0][:, None] & cols_ok[0][None, :])[None, :, :, None]
    for k, (i, j) in enumerate(positions[1:], start=1):
        value = windows[:, :, :, i, j]
        better = value > best
        if any(pads):
            valid = (rows_ok[i][:, None] & cols_ok[j][None, :])[None, :, :, None]
            better |= valid & ~taken
            taken = taken | valid
        if nan_in_x:
            np.copyto(best, value, where=better)
        else:
            np.maximum(best, value, out=best)
        np.maximum(winner, better * winner.dtype.type(k), out=winner)

    def piece(k):
        return dy * (winner == k) if finite_dy else np.where(winner == k, dy, np.zeros((), x.dtype))

    return _scatter((((i, j), piece(k)) for k, (i, j) in enumerate(positions)),
                    x.shape, pads, strides, (1, 1), x.dtype)


def _window_counts(oh, ow, ksize, strides, pads, x_shape, dtype):
    """[1, OH, OW, 1]: in-bounds elements per window, TF's SAME avg-pool divisor (k*k inside)."""
    rows = _in_bounds(oh, ksize[0], strides[0], pads[0], x_shape[1]).sum(axis=0)
    cols = _in_bounds(ow, ksize[1], strides[1], pads[2], x_shape[2]).sum(axis=0)
    return (rows[:, None] * cols[None, :]).astype(dtype)[None, :, :, None]


def avg_pool(x, ksize=(2, 2), strides=(2, 2), padding="VALID"):
    """TF AvgPool, NHWC; a SAME window at the border is averaged over its in-bounds elements only."""
    x = _input(x, "x")
    ksize, strides, oh, ow, pads = _pool_setup(x.shape, ksize, strides, padding)
    windows = _windows(_pad(x, pads, 0), oh, ow, ksize, strides, (1, 1))
    total = np.array(windows[:, :, :, 0, 0])
    for i, j in _positions(ksize)[1:]:
        total += windows[:, :, :, i, j]
    total /= _window_counts(oh, ow, ksize, strides, pads, x.shape, x.dtype)
    return total


def avg_pool_grad(x_shape, dy, ksize=(2, 2), strides=(2, 2), padding="VALID"):
    """TF AvgPoolGrad, NHWC: dx of shape x_shape; each dy is spread evenly over its window's
    in-bounds inputs. The result has dy's dtype."""
    try:
        x_shape = tuple(x_shape)
    except TypeError:
        raise ValueError(f"x_shape must be 4 non-negative ints (N, H, W, C), got {x_shape!r}") from None
    if len(x_shape) != 4 or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0
                                    for s in x_shape):
        raise ValueError(f"x_shape must be 4 non-negative ints (N, H, W, C), got {x_shape!r}")
    x_shape = tuple(int(s) for s in x_shape)
    dy = _input(dy, "dy")
    ksize, strides, oh, ow, pads = _pool_setup(x_shape, ksize, strides, padding)
    _same_shape(dy, "dy", (x_shape[0], oh, ow, x_shape[3]))
    share = dy / _window_counts(oh, ow, ksize, strides, pads, x_shape, dy.dtype)
    return _scatter((((i, j), share) for i, j in _positions(ksize)), x_shape, pads, strides, (1, 1),
                    dy.dtype)
