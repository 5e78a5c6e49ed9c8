"""Batch norm: every SIMD path equals the scalar kernels bit for bit, for every element type and
layout, and every output is the same for 1 to 4 threads."""
import numpy as np
import pytest

import fqcore
from helpers import run_on

try:
    import ml_dtypes
    DTYPES = (np.float32, np.float16, ml_dtypes.bfloat16)
except ImportError:  # bfloat16 is optional; its kernels are also checked by the C harness
    DTYPES = (np.float32, np.float16)

SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, 65504.0, 65520.0, 6e-8, -3e-5]
# (shape, data_format): channel counts around the vector widths and the padded periods, spatial
# sizes with and without a whole number of 16-lane vectors, [N, C, 1] (walked as channels-last).
CASES = [
    ((2, 3, 5, 1), "NHWC"), ((3, 5, 7, 19), "NHWC"), ((2, 4, 4, 4, 64), "NDHWC"),
    ((1, 17, 17, 48), "NHWC"), ((300, 4, 4, 3), "NHWC"), ((5, 1, 1, 1000), "NHWC"),
    ((2, 2, 3, 1030), "NHWC"), ((4, 7, 3, 33), "NHWC"), ((1, 1, 1, 16), "NHWC"),
    ((2, 3, 5, 7), "NCHW"), ((2, 64, 4, 4, 3), "NCDHW"), ((7, 3, 1, 1), "NCHW"),
    ((2, 33, 9, 9), "NCHW"), ((3, 16, 4, 4), "NCHW"), ((2, 5, 17, 1), "NCHW"),
    ((1, 1, 1, 1), "NHWC"), ((0, 3, 4, 5), "NCHW"), ((2, 0, 3, 3), "NHWC"),
]
# (2, 256, 32, 32) NCHW has enough blocks of channels (bn_walk.c) for two threads to take the blocks'
# sums and passes together, and too few for three or four (those split the sums and the pass apart).
# The last two: float32 arrays together over 16 MiB (bn_walk.c's BN_BEYOND_CACHES_BYTES) take the
# sums' walks for data from memory: channels-last gradient sums of 150 positions in memory order (a
# short last vector), channels-first sums of 150 channels a few batches side by side.
LARGE_CASES = [((4, 24, 24, 64), "NHWC"), ((4, 64, 24, 24), "NCHW"), ((2, 10, 10, 1000), "NHWC"),
               ((3, 5, 8, 8, 120), "NDHWC"), ((2, 256, 32, 32), "NCHW"),
               ((3, 50, 100, 150), "NHWC"), ((3, 150, 50, 100), "NCHW"), ((2, 100, 100, 97), "NHWC")]


def channels_of(shape, data_format):
    return shape[-1] if data_format.endswith("C") else shape[1]


def make_inputs(shape, data_format, dtype, seed, specials=True):
    rng = np.random.default_rng(seed)
    channels = channels_of(shape, data_format)
    x = rng.normal(3, 2, shape).astype(np.float32)
    dy = rng.normal(0, 1, shape).astype(np.float32)
    if specials and x.size > 20:
        x.reshape(-1)[rng.integers(0, x.size, 3)] = rng.choice(SPECIAL, 3)
        dy.reshape(-1)[rng.integers(0, x.size, 3)] = rng.choice(SPECIAL, 3)
    per_channel = [rng.normal(0, 1, channels).astype(np.float32) for _ in range(3)]
    variance = rng.uniform(0.1, 2, channels).astype(np.float32)
    with np.errstate(over="ignore"):  # 65520 and beyond become inf in float16: wanted
        return x.astype(dtype), dy.astype(dtype), per_channel, variance


def all_outputs(x, dy, per_channel, variance, data_format):
    """Every output of every mode, as byte strings (so NaN payloads and signed zeros count)."""
    scale, offset, mean = per_channel
    forward = fqcore.fused_batch_norm(x, scale, offset, data_format=data_format)
    running = fqcore.fused_batch_norm(x, scale, offset, mean, variance, epsilon=1e-3,
                                      exponential_avg_factor=0.3, data_format=data_format)
    inference = fqcore.fused_batch_norm(x, scale, offset, mean, variance, data_format=data_format,
                                        is_training=False)
    grad = fqcore.fused_batch_norm_grad(dy, x, scale, forward.reserve_space_1,
                                        forward.reserve_space_2, data_format=data_format)
    grad_inference = fqcore.fused_batch_norm_grad(dy, x, scale, mean, variance,
                                                  data_format=data_format, is_training=False)
    arrays = [*forward[:5], *running[:5], inference.y, *grad[:3], *grad_inference[:3]]
    return [np.ascontiguousarray(a).tobytes() for a in arrays]


def assert_all_equal(actual, expected, what):
    names = ["y", "batch_mean", "batch_variance", "rs1", "rs2"] * 2 + ["y inference"] + \
        ["x_backprop", "scale_backprop", "offset_backprop"] + ["x_backprop inf", "scale_bp inf", "offset_bp inf"]
    differing = [names[i] for i, (a, e) in enumerate(zip(actual, expected)) if a != e]
    assert not differing, f"{what}: outputs differ from scalar: {differing}"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,data_format", CASES, ids=lambda v: str(v))
def test_simd_equals_scalar(isa, shape, data_format, dtype):
    x, dy, per_channel, variance = make_inputs(shape, data_format, dtype, seed=len(shape) + sum(shape))
    expected = run_on("scalar", lambda: all_outputs(x, dy, per_channel, variance, data_format), 1)
    actual = run_on(isa, lambda: all_outputs(x, dy, per_channel, variance, data_format), 1)
    assert_all_equal(actual, expected, f"{isa} {shape} {data_format}")


@pytest.mark.parametrize("dtype", DTYPES[:2], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,data_format", LARGE_CASES, ids=lambda v: str(v))
def test_threads_and_isas_agree_on_large_inputs(shape, data_format, dtype):
    x, dy, per_channel, variance = make_inputs(shape, data_format, dtype, seed=sum(shape))
    expected = run_on("scalar", lambda: all_outputs(x, dy, per_channel, variance, data_format), 1)
    for isa_name in fqcore.available_isas():
        for threads in (1, 2, 3, 4):
            actual = run_on(isa_name, lambda: all_outputs(x, dy, per_channel, variance, data_format), threads)
            assert_all_equal(actual, expected, f"{isa_name} with {threads} threads")


def test_misaligned_and_strided_inputs_match_contiguous_copies(isa):
    buffer = np.random.default_rng(5).normal(size=4 * 6 * 6 * 19 + 1).astype(np.float32)
    x = buffer[1:].reshape(4, 6, 6, 19)  # 4-byte offset from the allocation's alignment
    scale, offset = np.ones(19, np.float32), np.zeros(19, np.float32)
    expected = fqcore.fused_batch_norm(x.copy(), scale, offset)
    for view in (x, np.asfortranarray(x), x.transpose(0, 2, 1, 3).copy().transpose(0, 2, 1, 3)):
        actual = fqcore.fused_batch_norm(view, scale, offset)
        for a, e in zip(actual, expected):
            assert np.array_equal(a, e, equal_nan=True)


def test_unaligned_buffers_are_copied_not_read_misaligned(isa):
    """A float32 array one byte off its alignment (np.frombuffer at an odd offset) is copied before C
    reads it; the results equal those of an aligned copy."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=(2, 3, 3, 5)).astype(np.float32)
    scale = rng.normal(size=5).astype(np.float32)
    raw = bytearray(x.nbytes + scale.nbytes + 2)
    odd_x = np.frombuffer(raw, np.float32, x.size, offset=1).reshape(x.shape)
    odd_scale = np.frombuffer(raw, np.float32, 5, offset=1 + x.nbytes)
    odd_x[...] = x
    odd_scale[...] = scale
    assert not odd_x.flags.aligned and not odd_scale.flags.aligned
    expected = fqcore.fused_batch_norm(x, scale, scale)
    actual = fqcore.fused_batch_norm(odd_x, odd_scale, odd_scale)
    for a, e in zip(actual, expected):
        assert np.array_equal(a, e)
