"""The test vectors of shared/spec/batch_norm.md (TF 2.21, Eigen path), written from the spec text, on every ISA.

The vectors are TF's bits; fqcore is promised to agree to float32 rounding, not bit for bit, so each
comparison has a tolerance in float32 ulps, chosen per output from where the two can differ:
  - reserve_space_1/2 and an f != 1 batch_mean: one float32 sum (fqcore's is more accurate than TF's
    and in another order) divided by n: 1 ulp. TF's own vector 1 mean of channel 0 (0x1.f147b0p+1) is
    1 ulp above the correctly rounded 0x1.f147aep+1.
  - batch_variance: TF rounds the variance to float32 and then multiplies by float32(n / (n-1)): up to
    about 1.5 ulp from the exact product, so 2 ulp from a correctly rounded one (vector 1, channel 2:
    TF 0x1.d92060p+2, exact 0x1.d9205ca1p+2).
  - y and x_backprop: TF's rsqrt is the CPU's approximate rsqrtps plus a Newton step, a few ulps from
    1/sqrt, and it carries into every element: 4 ulp per element for y; x_backprop's elements are
    differences that may cancel, so 4 ulp of its largest magnitude (the issue's relative measure).
  - sums of multiples of 0.5 (vector 3's offset_backprop) are exact in any order: equal bits.
"""
import numpy as np

import fqcore
from golden_inputs_bn import ordered

F32 = np.float32


def f32(*values):
    return np.array(values, dtype=F32)


def hexf(*literals):
    return f32(*[float.fromhex(s) for s in literals])


def ulps_apart(actual, expected):
    """Per element, how many float32 steps separate actual from expected."""
    a = np.ascontiguousarray(actual, F32).reshape(-1).view(np.uint32)
    e = np.ascontiguousarray(expected, F32).reshape(-1).view(np.uint32)
    return np.abs(ordered(a) - ordered(e))


def assert_within_ulps(name, actual, expected, ulps):
    actual = np.asarray(actual)
    assert actual.dtype == F32 and actual.shape == np.shape(expected), f"{name}: {actual.dtype} {actual.shape}"
    apart = ulps_apart(actual, expected)
    assert apart.max(initial=0) <= ulps, (
        f"{name}: {apart.max()} ulp from TF (allowed {ulps}): fqcore "
        f"{[float(v).hex() for v in actual.reshape(-1)]} vs TF {[float(v).hex() for v in np.reshape(expected, -1)]}")


def assert_relative_ulps(name, actual, expected, ulps):
    """max |actual - expected| <= ulps * 2**-23 * max |expected|."""
    actual, expected = np.asarray(actual), np.asarray(expected, F32)
    assert actual.dtype == F32 and actual.shape == expected.shape, f"{name}: {actual.dtype} {actual.shape}"
    err = np.abs(actual.astype(np.float64) - expected).max()
    bound = ulps * 2.0**-23 * np.abs(expected.astype(np.float64)).max()
    assert err <= bound, f"{name}: max error {err!r} > {bound!r}"


# Vector 1: forward training, NHWC, x = 0.37 * arange(24) (the float64 product rounded once) as [2,2,2,3].
X1 = (0.37 * np.arange(24)).astype(F32).reshape(2, 2, 2, 3)
SCALE1, OFFSET1 = f32(1, 2, -0.5), f32(0, 0.1, 0.2)
RS1 = hexf("0x1.f147b0p+1", "0x1.1051ecp+2", "0x1.28p+2")
RS2 = hexf("0x1.9dfc50p+2", "0x1.9dfc52p+2", "0x1.9dfc52p+2")


def test_vector_1_forward_training(isa):
    r = fqcore.fused_batch_norm(X1, SCALE1, OFFSET1, epsilon=1e-3)
    assert_within_ulps("reserve_space_1", r.reserve_space_1, RS1, 1)
    assert_within_ulps("batch_mean", r.batch_mean, RS1, 1)
    assert_within_ulps("reserve_space_2", r.reserve_space_2, RS2, 1)
    assert_within_ulps("batch_variance", r.batch_variance,
                       hexf("0x1.d9205cp+2", "0x1.d92060p+2", "0x1.d92060p+2"), 2)
    assert r.y.dtype == F32 and r.y.shape == X1.shape
    assert_within_ulps("y[0:3]", r.y.reshape(-1)[:3], hexf("-0x1.870428p+0", "-0x1.7a375cp+1", "0x1.ed6a8cp-1"), 4)
    assert r.reserve_space_3.dtype == F32 and r.reserve_space_3.shape == () and r.reserve_space_3 == 0


def test_vector_2_exponential_avg_factor(isa):
    r = fqcore.fused_batch_norm(X1, SCALE1, OFFSET1, f32(1, 2, 3), f32(4, 5, 6), epsilon=1e-3,
                                exponential_avg_factor=0.25)
    assert_within_ulps("batch_mean", r.batch_mean, hexf("0x1.b8a3d8p+0", "0x1.4828f6p+1", "0x1.b4p+1"), 1)
    assert_within_ulps("batch_variance", r.batch_variance,
                       hexf("0x1.364818p+2", "0x1.664818p+2", "0x1.964818p+2"), 2)
    # rs1/rs2 are still the batch statistics, and y does not depend on the factor.
    assert_within_ulps("reserve_space_1", r.reserve_space_1, RS1, 1)
    assert_within_ulps("reserve_space_2", r.reserve_space_2, RS2, 1)
    plain = fqcore.fused_batch_norm(X1, SCALE1, OFFSET1, epsilon=1e-3)
    assert r.y.tobytes() == plain.y.tobytes()
    assert r.reserve_space_1.tobytes() == plain.reserve_space_1.tobytes()
    assert r.reserve_space_2.tobytes() == plain.reserve_space_2.tobytes()


# Vector 3: gradient, training, NHWC [2,3,2,3], generated with TF by tools/gen_golden_bn.py (case
# "spec3" of tests/data/bn_grad_cases.npz, which test_bn_golden also checks). x = 0.37 * arange(36),
# y_backprop = 0.5 * ((arange(36) mod 7) - 3), epsilon 1e-3, reserve spaces from TF's forward on x.
X3 = (0.37 * np.arange(36)).astype(F32).reshape(2, 3, 2, 3)
DY3 = (0.5 * (np.arange(36) % 7 - 3)).astype(F32).reshape(2, 3, 2, 3)
SCALE3 = f32(1.5, -0.75, 0.2)
RS1_3 = hexf("0x1.86b854p+2", "0x1.9e6668p+2", "0x1.b6147cp+2")
RS2_3 = hexf("0x1.d5d740p+3", "0x1.d5d740p+3", "0x1.d5d73cp+3")
SCALE_BP3 = hexf("0x1.6983p+1", "0x1.6983p+1", "-0x1.3b29f6p+0")
OFFSET_BP3 = f32(0.5, -0.5, -1.5)
X_BP3 = hexf(
    "-0x1.d3a98ap-2", "0x1.d3ac24p-4", "-0x1.cc72a6p-6", "0x1.a91ad4p-4", "-0x1.541a2cp-3", "0x1.a7d584p-5",
    "0x1.541b7ap-1", "0x1.e8ea5cp-3", "-0x1.a29838p-5", "-0x1.299b24p-3", "-0x1.54178ep-5", "0x1.d6ed3ap-6",
    "0x1.a922acp-2", "-0x1.497b12p-2", "-0x1.2f7b8ep-4", "-0x1.93e1d8p-2", "0x1.541cc8p-4", "0x1.78bdc8p-8",
    "0x1.541ccap-3", "-0x1.93e1d8p-3", "0x1.5e9348p-4", "-0x1.497b10p-1", "0x1.a922acp-3", "-0x1.1a8e58p-6",
    "-0x1.54178ap-4", "-0x1.299b28p-4", "0x1.0063d6p-4", "0x1.e8ea5ep-2", "0x1.541b78p-2", "-0x1.49a612p-5",
    "-0x1.541a2cp-2", "0x1.a91ad0p-5", "0x1.4468c4p-5", "0x1.d3ac2ap-3", "-0x1.d3a98ap-3", "-0x1.03027ap-4",
).reshape(2, 3, 2, 3)


def test_vector_3_is_the_committed_tf_case():
    """The literals above are the golden file's case spec3, inputs and TF outputs."""
    from pathlib import Path

    with np.load(Path(__file__).resolve().parent / "data" / "bn_grad_cases.npz") as d:
        i = list(d["name"]).index("spec3")
        e, ch = slice(*d["elem_off"][i : i + 2]), slice(*d["ch_off"][i : i + 2])
        stored = {k: d[k][e if k in ("x", "dy", "x_backprop") else ch].view(F32)
                  for k in ("x", "dy", "x_backprop", "scale", "rs1_in", "rs2_in", "scale_backprop", "offset_backprop")}
        assert d["epsilon"][i].view(F32) == F32(1e-3) and bool(d["is_training"][i])
        assert str(d["data_format"][i]) == "NHWC"
    for key, literal in [("x", X3), ("dy", DY3), ("x_backprop", X_BP3), ("scale", SCALE3), ("rs1_in", RS1_3),
                         ("rs2_in", RS2_3), ("scale_backprop", SCALE_BP3), ("offset_backprop", OFFSET_BP3)]:
        assert stored[key].tobytes() == literal.tobytes(), key


def test_vector_3_gradient_training(isa):
    r = fqcore.fused_batch_norm_grad(DY3, X3, SCALE3, RS1_3, RS2_3, np.zeros((), F32), epsilon=1e-3)
    assert_relative_ulps("x_backprop", r.x_backprop, X_BP3, 4)
    assert_within_ulps("scale_backprop", r.scale_backprop, SCALE_BP3, 4)
    assert r.offset_backprop.tobytes() == OFFSET_BP3.tobytes()
    for rs in (r.reserve_space_4, r.reserve_space_5):
        assert rs.dtype == F32 and rs.shape == (0,)

