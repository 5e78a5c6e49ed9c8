"""`python -m fqcore demo`: the QAT demo (fqcore/demo.py). `python -m fqcore export`: a saved eval
model to .tflite / ONNX (fqcore/deploy/cli.py). `python -m fqcore` (or `check`): the
configuration, a self-check against TF-measured vectors, a speed table. `--help`: the commands."""
import sys
import time

import numpy as np

import fqcore

# FakeQuantWithMinMaxVars, min=-1, max=3, 8 bits, as TF 2.21 computes it (shared spec, vector 3).
SELF_CHECK_X = [-7, -1, -0.3, -0.01, 0, 0.004, 0.5, 1, 1.234, 2.9, 3, 10]
SELF_CHECK_Y = [-1.0039216, -1.0039216, -0.2980392, -0.0156863, 0, 0, 0.5019608, 1.0039216,
                1.2392157, 2.9019608, 2.9960785, 2.9960785]


# FusedBatchNormV3 training, NHWC, x = 0.37 * arange(24) as [2, 2, 2, 3], epsilon 1e-3, as TF 2.21
# computes it (shared spec, batch-norm vector 1): the first three y and the batch variance.
BN_SCALE, BN_OFFSET = [1, 2, -0.5], [0, 0.1, 0.2]
BN_Y = [float.fromhex(h) for h in ("-0x1.870428p+0", "-0x1.7a375cp+1", "0x1.ed6a8cp-1")]
BN_BATCH_VARIANCE = [float.fromhex(h) for h in ("0x1.d9205cp+2", "0x1.d92060p+2", "0x1.d92060p+2")]


def _within_ulps(actual, expected, ulps):
    expected = np.asarray(expected, np.float32)
    return bool(np.all(np.abs(np.asarray(actual, np.float64) - expected) <= ulps * np.abs(np.spacing(expected))))


def _batch_norm_outputs(x, dy, scale):
    forward = fqcore.fused_batch_norm(x, scale, scale, data_format="NCHW")
    grad = fqcore.fused_batch_norm_grad(dy, x, scale, forward.reserve_space_1,
                                        forward.reserve_space_2, data_format="NCHW")
    return [np.asarray(v).tobytes() for v in (*forward[:5], *grad[:3])]


def self_check():
    """True when every ISA gives TF's values and the same bits as the scalar reference."""
    x = np.array(SELF_CHECK_X, np.float32)
    rng = np.random.default_rng(0)
    big = rng.uniform(-8, 8, 100_003).astype(np.float32)
    grads = rng.standard_normal(big.size).astype(np.float32)
    previous, ok, reference = fqcore.get_isa(), True, None
    for isa in fqcore.available_isas():
        fqcore.set_isa(isa)
        y = fqcore.fake_quant_with_min_max_vars(x, -1.0, 3.0)
        matches_tf = np.allclose(y, SELF_CHECK_Y, rtol=0, atol=5e-8)
        result = fqcore.fake_quant_with_min_max_vars_gradient(grads, big, -6.0, 6.0)
        # TF's batch-norm rsqrt is approximate and its sums float32: a few ulp apart is agreement.
        bn = fqcore.fused_batch_norm((0.37 * np.arange(24, dtype=np.float32)).reshape(2, 2, 2, 3),
                                     np.array(BN_SCALE, np.float32), np.array(BN_OFFSET, np.float32),
                                     epsilon=1e-3)
        matches_tf = (matches_tf and _within_ulps(bn.y.reshape(-1)[:3], BN_Y, 4)
                      and _within_ulps(bn.batch_variance, BN_BATCH_VARIANCE, 2))
        bits = [np.asarray(v).tobytes() for v in result]
        bits += _batch_norm_outputs(big[:99_960].reshape(4, 7, 35, 102), grads[:99_960].reshape(4, 7, 35, 102),
                                    np.linspace(-1, 1, 7, dtype=np.float32))
        reference = reference or bits
        same = bits == reference
        print(f"  {isa:>7}: TF vectors {'ok' if matches_tf else 'MISMATCH'}, "
              f"equal to scalar {'ok' if same else 'MISMATCH'}")
        ok = ok and matches_tf and same
    fqcore.set_isa(previous)
    return ok


def _best_time(fn, repeats):
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def speed_table():
    """fqcore vs the numpy ufunc that is each op's memory-bound floor, on the same arrays (one
    thread, best of several): the Vars forward divides, as TF does, so against a division; the
    gradients and batch norm against an add."""
    threads = fqcore.get_num_threads()
    fqcore.set_num_threads(1)
    print(f"  {'n':>9}  {'op':<22} {'fqcore us':>10} {'numpy us':>9} {'ratio':>6}  numpy floor")
    for n in (65536, 1 << 20):
        rng = np.random.default_rng(1)
        x = rng.standard_normal(n).astype(np.float32) * 2
        g = rng.standard_normal(n).astype(np.float32)
        out = np.empty_like(x)
        repeats = 30 if n < 1 << 20 else 10
        divide = _best_time(lambda: np.divide(x, 3.0, out=out), repeats)
        add = _best_time(lambda: np.add(x, g, out=out), repeats)
        rows = [
            ("vars forward", lambda: fqcore.fake_quant_with_min_max_vars(x, -6.0, 6.0, out=out), divide,
             "np.divide"),
            ("vars gradient", lambda: fqcore.fake_quant_with_min_max_vars_gradient(g, x, -6.0, 6.0, out=out), add,
             "np.add"),
        ]
        for name, fn, baseline, floor in rows:
            t = _best_time(fn, repeats)
            print(f"  {n:>9}  {name:<22} {t * 1e6:>10.1f} {baseline * 1e6:>9.1f} {t / baseline:>6.2f}  {floor}")
    for shape, data_format in (((8, 28, 28, 64), "NHWC"), ((8, 64, 28, 28), "NCHW")):
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        g, out = np.ones_like(x), np.empty_like(x)
        scale = np.ones(64, np.float32)
        add = _best_time(lambda: np.add(x, g, out=out), 10)
        saved = fqcore.fused_batch_norm(x, scale, scale, data_format=data_format)
        rows = [
            (f"batch norm {data_format}", lambda: fqcore.fused_batch_norm(x, scale, scale, data_format=data_format)),
            (f"  gradient {data_format}", lambda: fqcore.fused_batch_norm_grad(
                g, x, scale, saved.reserve_space_1, saved.reserve_space_2, data_format=data_format)),
        ]
        for name, fn in rows:
            t = _best_time(fn, 10)
            print(f"  {x.size:>9}  {name:<22} {t * 1e6:>10.1f} {add * 1e6:>9.1f} {t / add:>6.2f}  np.add")
    fqcore.set_num_threads(threads)
    print("  (numpy floor: np.divide(a, 3.0, out=c), np.add(a, b, out=c); batch norm in training mode)")


COMMANDS = """usage: python -m fqcore [check | demo | export] [--help]

commands:
  check   (the default) the build and run-time configuration, a self-check of every available
          ISA against TF-measured vectors and the scalar reference, a speed table against numpy
  demo    quantization-aware training of a small CNN on the bundled digits, then its 8-bit
          accuracy and export to .tflite / ONNX
  export  a saved eval model (fqcore.graph.save) to a .tflite or ONNX integer model

`python -m fqcore demo --help` and `python -m fqcore export --help` list their options."""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "demo":
        from . import demo
        return demo.main(argv[1:])
    if argv and argv[0] == "export":
        from .deploy import cli
        return cli.main(argv[1:])
    if argv in (["-h"], ["--help"], ["check", "-h"], ["check", "--help"]):
        print(COMMANDS)
        return 0
    if argv and argv != ["check"]:
        print(f"{COMMANDS}\n\npython -m fqcore: unknown command {' '.join(argv)!r}",
              file=sys.stderr)
        return 2
    print("fqcore configuration")
    fqcore.show_config()
    print("self-check")
    ok = self_check()
    print("speed")
    speed_table()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
