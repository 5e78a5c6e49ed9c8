"""A float64 numpy model of shared/spec/batch_norm.md's formulas: the yardstick for fqcore's and TF's errors.

Inputs are taken as given (float32, or float16/bfloat16 upcast exactly); epsilon and
exponential_avg_factor are rounded to float32 first, as the raw op's float attributes are; everything
after that is float64, with an exact rsqrt up to float64 rounding. The results are float64 arrays, in
the same layout as fqcore's outputs.
"""
import numpy as np

F64 = np.float64


def channel_axis(data_format):
    if data_format not in ("NHWC", "NCHW", "NDHWC", "NCDHW"):
        raise ValueError(f"unknown data_format {data_format!r}")
    return data_format.index("C")


def _as_rows(a, data_format):
    """(rows, C) float64 view of a in data_format: rows over (N, spatial)."""
    a = np.asarray(a).astype(F64)
    moved = np.moveaxis(a, channel_axis(data_format), -1)
    return moved.reshape(int(np.prod(moved.shape[:-1])), moved.shape[-1])


def _from_rows(rows, shape, data_format):
    axis = channel_axis(data_format)
    moved = tuple(s for i, s in enumerate(shape) if i != axis) + (shape[axis],)
    return np.moveaxis(rows.reshape(moved), -1, axis)


def _f32(value):
    return F64(np.float32(value))


def _vec(v):
    return np.asarray(v).astype(F64).reshape(-1)


def forward(x, scale, offset, mean=None, variance=None, epsilon=1e-4, exponential_avg_factor=1.0,
            data_format="NHWC", is_training=True):
    """dict of y, batch_mean, batch_variance, reserve_space_1, reserve_space_2 (float64)."""
    rows = _as_rows(x, data_format)
    n = rows.shape[0]
    eps, f = _f32(epsilon), _f32(exponential_avg_factor)
    scale, offset = _vec(scale), _vec(offset)
    with np.errstate(all="ignore"):
        if is_training:
            m = rows.sum(axis=0) / n
            v = ((rows - m) ** 2).sum(axis=0) / n
            adjust = n / max(n - 1, 1)
            if f == 1:
                batch_mean, batch_variance = m, v * adjust
            else:
                batch_mean = (1 - f) * _vec(mean) + f * m
                batch_variance = (1 - f) * _vec(variance) + (f * adjust) * v
            rs1, rs2 = m, v
        else:
            m, v = _vec(mean), _vec(variance)
            batch_mean, batch_variance, rs1, rs2 = m, v, m, v
        y = (rows - m) * (scale / np.sqrt(v + eps)) + offset
    return dict(y=_from_rows(y, np.shape(x), data_format), batch_mean=batch_mean, batch_variance=batch_variance,
                reserve_space_1=rs1, reserve_space_2=rs2)


def grad(y_backprop, x, scale, reserve_space_1, reserve_space_2, epsilon=1e-4, data_format="NHWC",
         is_training=True):
    """dict of x_backprop, scale_backprop, offset_backprop (float64)."""
    dy, rows = _as_rows(y_backprop, data_format), _as_rows(x, data_format)
    n = rows.shape[0]
    eps = _f32(epsilon)
    scale, mean, var = _vec(scale), _vec(reserve_space_1), _vec(reserve_space_2)
    with np.errstate(all="ignore"):
        coef0 = 1 / np.sqrt(var + eps)
        xc = rows - mean
        offset_bp = dy.sum(axis=0)
        if is_training:
            scale_bp = (dy * (xc * coef0)).sum(axis=0)
            dy_mean = offset_bp / n
            m2 = (dy * xc).sum(axis=0) / n
            x_bp = scale * coef0 * ((dy - dy_mean) - xc * (coef0**2 * m2))
        else:
            scale_bp = (dy * xc).sum(axis=0) * coef0
            x_bp = dy * (coef0 * scale)
    return dict(x_backprop=_from_rows(x_bp, np.shape(x), data_format), scale_backprop=scale_bp,
                offset_backprop=offset_bp)
