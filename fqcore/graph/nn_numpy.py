"""TensorFlow-semantics NHWC convolution and pooling, forward and gradient, in plain numpy (im2col + BLAS)."""
import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

_PADDINGS = ("SAME", "VALID")
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


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
# Convolution: TF Conv2D / Conv2DBackpropInput / Conv2DBackpropFilter with HWIO filters.

def _conv_setup(x, w, strides, padding, dilations):
    x = _input(x, "x")
    w = _filter(w, x)
    strides, dilations = _pair(strides, "strides"), _pair(dilations, "dilations")
    oh, ow, pads = _geometry(x.shape, w.shape[:2], strides, dilations, _padding(padding))
    return x, w, strides, dilations, oh, ow, pads


def _im2col(x, w_shape, oh, ow, pads, strides, dilations):
    """[N*OH*OW, KH*KW*C]: row p holds output pixel p's window, in the (kh, kw, c) order of an HWIO
    filter flattened to [KH*KW*C, O] so that one matmul is the whole convolution."""
    windows = _windows(_pad(x, pads, 0), oh, ow, w_shape[:2], strides, dilations)
    return np.ascontiguousarray(windows).reshape(-1, w_shape[0] * w_shape[1] * w_shape[2])


def conv2d(x, w, strides=(1, 1), padding="SAME", dilations=(1, 1)):
    """TF Conv2D, NHWC: x [N, H, W, C], w [KH, KW, C, O] -> y [N, OH, OW, O]."""
    x, w, strides, dilations, oh, ow, pads = _conv_setup(x, w, strides, padding, dilations)
    cols = _im2col(x, w.shape, oh, ow, pads, strides, dilations)
    y = np.matmul(cols, w.reshape(-1, w.shape[3]))
    return y.reshape(x.shape[0], oh, ow, w.shape[3])


def conv2d_grad(x, w, dy, strides=(1, 1), padding="SAME", dilations=(1, 1)):
    """(dx, dw) of conv2d given dy = dL/dy [N, OH, OW, O]."""
    x, w, strides, dilations, oh, ow, pads = _conv_setup(x, w, strides, padding, dilations)
    kh, kw, c, o = w.shape
    dy = _other(dy, "dy", x.dtype)
    _same_shape(dy, "dy", (x.shape[0], oh, ow, o))
    dy2 = dy.reshape(-1, o)
    cols = _im2col(x, w.shape, oh, ow, pads, strides, dilations)
    dw = np.matmul(cols.T, dy2).reshape(w.shape)
    del cols
    # One [N*OH*OW, O] @ [O, C] per kernel position rather than one big dy2 @ w2d.T: each product
    # is then contiguous, which makes the col2im add twice as fast, and the matmuls cost the same.
    pieces = (((i, j), np.matmul(dy2, w[i, j].T).reshape(x.shape[0], oh, ow, c)) for i, j in _positions((kh, kw)))
    dx = _scatter(pieces, x.shape, pads, strides, dilations, x.dtype)
    return dx, dw


# ---------------------------------------------------------------------------------------------------
# Depthwise convolution: TF DepthwiseConv2dNative, w [KH, KW, C, M], output channel c*M + m.
# No matmul fits (each channel has its own tiny filter). Instead x is copied once into a padded
# buffer with its channels repeated M times (channel c*M + m holds x[..., c], so one filter value per
# buffer channel and M needs no inner axis of its own), and with the columns split by phase mod
# the column stride, so that each output row reads one contiguous run of OW*C*M values per kernel
# position. One einsum over an [KH, KW', N, OH, OW*C*M] strided view then does every multiply-add
# in a single pass, with inner loops OW*C*M long: on x [64, 8, 8, 32], w [3, 3, 32, 1] the forward
# went from 0.78 ms (a multiply and an add per kernel position over [N, OH, OW, C] windows, inner
# loops C long) to 0.28 ms; a multiply and an add per position over the same contiguous runs took
# 0.49. The gradient uses the same views for dw, and for dx the forward again on dy (0.61 ms, was
# 1.4-2.9). M = 2 and stride 2 gain less (the copies and the multiplier sum are a larger share).

def _depthwise_buffer(x, m, pads, sw, rows, cols):
    """[N, rows, SW, cols // SW, C*M] zeros holding x at padded position (top + r, left + q):
    column p of the padded row at phase p % SW, index p // SW; each channel repeated M times."""
    n, h, w, c = x.shape
    top, left = pads[0], pads[2]
    wq = -(-cols // sw)
    buf = np.zeros((n, rows, sw, wq, c, m), dtype=x.dtype)
    for b in range(sw):
        first = (b - left) % sw  # the first x column whose padded column has phase b (maybe none)
        q0 = (first + left) // sw
        count = len(range(first, w, sw))
        for k in range(m):
            buf[:, top:top + h, b, q0:q0 + count, :, k] = x[:, :, first::sw]
    return buf.reshape(n, rows, sw, wq, c * m)


def _depthwise_groups(kw, sw, dw):
    """(j0, step, phase, index) of each group of kernel columns j0, j0 + step, ... that read the
    same column phase, at buffer column indices index, index + dw * step // sw, ..."""
    step = sw // math.gcd(sw, dw)
    return [(j0, step, (j0 * dw) % sw, (j0 * dw) // sw) for j0 in range(min(step, kw))]


def _depthwise_view(buf, kh, j0, step, phase, index, kw, oh, ow, sh, dh, dw):
    """[KH, KW', N, OH, OW*C'] read-only view: kernel position (i, j0 + step * j') of output row r
    of image n is the run of OW*C' buffer values that position multiplies (no copy)."""
    n, _, sw, wq, cc = buf.shape
    it = buf.itemsize
    row = sw * wq * cc * it
    start = buf[:, :, phase, index:]  # keeps buf's data; the strides below address buf itself
    return as_strided(start, shape=(kh, len(range(j0, kw, step)), n, oh, ow * cc),
                      strides=(dh * row, (dw * step // sw) * cc * it, buf.strides[0], sh * row, it),
                      writeable=False)


def _depthwise_sum(buf, wc, oh, ow, sh, sw, dh, dw):
    """[N, OH, OW*C'] sum over kernel positions of buffer runs times wc [KH, KW, C'] (one filter
    value per buffer channel), the buffer read with strides (sh, sw) and dilations (dh, dw)."""
    kh, kw, cc = wc.shape
    y = None
    for j0, step, phase, index in _depthwise_groups(kw, sw, dw):
        view = _depthwise_view(buf, kh, j0, step, phase, index, kw, oh, ow, sh, dh, dw)
        part = np.einsum("ijnhr,ijr->nhr", view, np.tile(wc[:, j0::step], (1, 1, ow)))
        y = part if y is None else np.add(y, part, out=y)
    return y


def _sum_multipliers(a, m):
    """a [..., C*M] -> [..., C]: the sum over each channel's M copies (M > 1)."""
    out = np.add(a[..., 0::m], a[..., 1::m])
    for k in range(2, m):
        out += a[..., k::m]
    return out


def _depthwise_setup(x, w, strides, padding, dilations):
    """_conv_setup's checked arguments and geometry, plus x's buffer for _depthwise_view."""
    x, w, strides, dilations, oh, ow, pads = _conv_setup(x, w, strides, padding, dilations)
    top, bottom, left, right = pads
    rows, cols = x.shape[1] + top + bottom, x.shape[2] + left + right
    buf = _depthwise_buffer(x, w.shape[3], pads, strides[1], rows, cols)
    return x, w, strides, dilations, oh, ow, pads, buf


def depthwise_conv2d(x, w, strides=(1, 1), padding="SAME", dilations=(1, 1)):
    """TF DepthwiseConv2dNative, NHWC: x [N, H, W, C], w [KH, KW, C, M] -> y [N, OH, OW, C*M]."""
    x, w, strides, dilations, oh, ow, pads, buf = _depthwise_setup(x, w, strides, padding, dilations)
    kh, kw, c, m = w.shape
    if not (x.shape[0] and oh and ow):
        return np.zeros((x.shape[0], oh, ow, c * m), dtype=x.dtype)
    y = _depthwise_sum(buf, w.reshape(kh, kw, c * m), oh, ow, strides[0], strides[1], *dilations)
    return y.reshape(x.shape[0], oh, ow, c * m)


def depthwise_conv2d_grad(x, w, dy, strides=(1, 1), padding="SAME", dilations=(1, 1)):
    """(dx, dw) of depthwise_conv2d given dy = dL/dy [N, OH, OW, C*M]."""
    x, w, strides, dilations, oh, ow, pads, buf = _depthwise_setup(x, w, strides, padding, dilations)
    n, h, wd, c = x.shape
    kh, kw, _, m = w.shape
    (sh, sw), (dh, dw_) = strides, dilations
    cc = c * m
    dy = _other(dy, "dy", x.dtype)
    _same_shape(dy, "dy", (n, oh, ow, cc))
    if not dy.size:
        return np.zeros_like(x), np.zeros_like(w)
    dy3 = np.ascontiguousarray(dy).reshape(n, oh, ow * cc)
    wc = w.reshape(kh, kw, cc)

    # dw: the same views as the forward, each run times dy's, summed over images, rows and columns.
    dwc = np.empty_like(wc)
    for j0, step, phase, index in _depthwise_groups(kw, sw, dw_):
        view = _depthwise_view(buf, kh, j0, step, phase, index, kw, oh, ow, sh, dh, dw_)
        runs = np.einsum("ijnhr,nhr->ijr", view, dy3)
        dwc[:, j0::step] = runs.reshape(kh, -1, ow, cc).sum(axis=2)
    # Let go of x's buffer before allocating dy's: with both (and the result) alive, the ~2 MB freed
    # at once on [64, 8, 8, 32] went back to the OS on every call (glibc's trim threshold) and the
    # page faults of reallocating it took the gradient from 0.61 to 1.6 ms.
    del buf, view

    # dx is dy, spread out by the strides and padded to [N, H + (KH-1)*dh, W + (KW-1)*dw], correlated
    # with the flipped filter: the forward again with stride 1, one einsum for all kernel positions.
    top, left = pads[0], pads[2]
    before = ((kh - 1) * dh - top, (kw - 1) * dw_ - left)
    dbuf = np.zeros((n, h + (kh - 1) * dh, 1, wd + (kw - 1) * dw_, cc), dtype=x.dtype)
    dbuf[:, before[0]:before[0] + (oh - 1) * sh + 1:sh, 0, before[1]:before[1] + (ow - 1) * sw + 1:sw] = dy
    full = _depthwise_sum(dbuf, wc[::-1, ::-1], h, wd, 1, 1, dh, dw_).reshape(n, h, wd, cc)
    return (full if m == 1 else _sum_multipliers(full, m)), dwc.reshape(w.shape)


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
