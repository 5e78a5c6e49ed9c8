"""A 1x1 convolution that only feeds batch statistics, as moments of its input. contrib's fold
keeps a layer's original convolution y = x w for one thing: the batch mean and variance of y,
per output channel, which the folded weights are scaled by (its batch norm's y is never read;
its gradient, FoldFusedBatchNormGrad, flows through the mean and variance only). For a 1x1
convolution those moments follow from the input's: with mu the mean of x's rows and C their
covariance, mean_c = mu . w_c and var_c = w_c' C w_c; and the gradient comes back the same way.
Where the input has fewer channels than the output (an inverted residual block's expansion, a
head's widening), that costs P K^2 where the convolution costs P K N and writes, reads and
differentiates a tensor N/K times larger than its input.

The moments are float64 sums of the input's exact products, where the batch norm sums the
convolution's float32-rounded outputs: the values agree to float32 rounding (the same tolerance
as the convolution's own sums, which depend on the BLAS)."""
from collections import namedtuple

import numpy as np

FLOAT32 = np.dtype(np.float32)

# What the forward keeps for the gradient: the input's row sum (K) and the products of its
# centered rows with the weights, sum_p (x_p - mu)(x_p - mu)' w (K x N), in float64; and the
# float64 means (N).
Moments = namedtuple("Moments", ["row_sum", "centered_products", "mean"])


def moments(x, w):
    """(batch_mean, batch_variance, saved_mean, saved_variance, Moments) of y = x w over its
    rows, as a training FusedBatchNormV3 with exponential_avg_factor 1 gives them for y: the
    variance is biased in saved_variance and Bessel-corrected in batch_variance. x: [P, K]
    float32, w: [K, N] float32."""
    rows, channels = x.shape
    # The uncentered products x' x and the sums 1' x, each one BLAS call on x in float64 (a
    # product with an appended column of ones took 1.5-2x as long at [8192, 16]: a copy more,
    # and a width BLAS blocks less well).
    x64 = x.astype(np.float64)
    products = x64.T @ x64
    row_sum = np.ones(rows) @ x64
    w64 = w.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # no rows: NaN, as the batch norm's
        row_mean = row_sum / rows
        centered_products = (products - np.outer(row_sum, row_mean)) @ w64
        mean = row_mean @ w64
        variance = np.maximum(np.einsum("kc,kc->c", centered_products, w64) / rows, 0.0)
    bessel = rows / (rows - 1) if rows > 1 else 1.0
    return (mean.astype(FLOAT32), (variance * bessel).astype(FLOAT32), mean.astype(FLOAT32),
            variance.astype(FLOAT32), Moments(row_sum, centered_products, mean))


def gradient(x, w, batch_mean, kept, grad_mean, grad_variance, input_gradient, weights_gradient):
    """(dx, dw) of the loss through `moments`, as FoldFusedBatchNormGrad gives the convolution's
    output gradient dy = grad_mean / P + 2 grad_variance (y - batch_mean) / (P - 1) and the
    convolution turns it into dx = dy w' and dw = x' dy; either may be skipped (None). `kept` is
    the forward's Moments; a missing grad_* is zero."""
    rows, channels = x.shape[0], w.shape[1]
    zeros = np.zeros(channels)
    w64 = w.astype(np.float64)
    m = batch_mean.astype(np.float64)
    dx = dw = None
    # One row: P - 1 = 0, and the result is not finite, as the op's.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = (zeros if grad_mean is None else grad_mean.astype(np.float64)) / rows
        b = (zeros if grad_variance is None else 2.0 * grad_variance.astype(np.float64)) / (rows - 1)
        if input_gradient:
            # dy w' = x (w diag(b) w') + 1 (w (a - b m))'
            dx = np.matmul(x, ((w64 * b) @ w64.T).astype(FLOAT32))
            dx += (w64 @ (a - b * m)).astype(FLOAT32)
        if weights_gradient:
            # x' dy = s a' + (x' x w - s m') diag(b), where x' x w - s m' is the centered
            # products plus s (mean - m)': b the centered products, plus s (a + b (mean - m))'.
            dw = kept.centered_products * b
            dw += np.outer(kept.row_sum, a + b * (kept.mean - m))
            dw = dw.astype(FLOAT32)
    return dx, dw
