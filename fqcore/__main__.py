"""`python -m fqcore`: the configuration, a self-check against TF-measured vectors, a speed table."""
import sys
import time

import numpy as np

import fqcore

# FakeQuantWithMinMaxVars, min=-1, max=3, 8 bits, as TF 2.21 computes it (shared spec, vector 3).
SELF_CHECK_X = [-7, -1, -0.3, -0.01, 0, 0.004, 0.5, 1, 1.234, 2.9, 3, 10]
SELF_CHECK_Y = [-1.0039216, -1.0039216, -0.2980392, -0.0156863, 0, 0, 0.5019608, 1.0039216,
                1.2392157, 2.9019608, 2.9960785, 2.9960785]


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
        bits = [np.asarray(v).tobytes() for v in result]
        reference = reference or bits
        same = bits == reference
        print(f"  {isa:>7}: TF vector {'ok' if matches_tf else 'MISMATCH'}, "
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
    """fqcore vs numpy's memory-bound ufuncs on the same arrays (one thread, best of several)."""
    threads = fqcore.get_num_threads()
    fqcore.set_num_threads(1)
    print(f"  {'n':>9}  {'op':<22} {'fqcore us':>10} {'numpy us':>9} {'ratio':>6}")
    for n in (65536, 1 << 20):
        rng = np.random.default_rng(1)
        x = rng.standard_normal(n).astype(np.float32) * 2
        g = rng.standard_normal(n).astype(np.float32)
        out = np.empty_like(x)
        repeats = 30 if n < 1 << 20 else 10
        multiply = _best_time(lambda: np.multiply(x, 2.0, out=out), repeats)
        add = _best_time(lambda: np.add(x, g, out=out), repeats)
        rows = [
            ("vars forward", lambda: fqcore.fake_quant_with_min_max_vars(x, -6.0, 6.0, out=out), multiply),
            ("vars gradient", lambda: fqcore.fake_quant_with_min_max_vars_gradient(g, x, -6.0, 6.0, out=out), add),
        ]
        for name, fn, baseline in rows:
            t = _best_time(fn, repeats)
            print(f"  {n:>9}  {name:<22} {t * 1e6:>10.1f} {baseline * 1e6:>9.1f} {t / baseline:>6.2f}")
    fqcore.set_num_threads(threads)
    print("  (ratio: vs np.multiply(a, 2.0, out=c) for forwards, np.add(a, b, out=c) for gradients)")


def main():
    print("fqcore configuration")
    fqcore.show_config()
    print("self-check")
    ok = self_check()
    print("speed")
    speed_table()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
