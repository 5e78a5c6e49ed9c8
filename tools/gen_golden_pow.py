"""Writes tests/data/pow_scalar.npz: TensorFlow's float32 Pow of scalars in a v1 graph, as
contrib.quantize's debiased moving averages compute (1 - decay) ** local_step every training step,
for tests/test_graph_pow.py (needs `pip install tensorflow-cpu==2.21.*`; `python tools/gen_golden_pow.py`)."""
import os
import platform
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "pow_scalar.npz"
F32 = np.float32
SEED = 5_000_005


def pairs():
    """(x, y) float32 scalars: contrib's bases 1 - d (d = float32(1 - decay) computed in double, as
    the rewrite's constant is) raised to the steps a run reaches, random pairs, special values."""
    xs, ys = [], []
    steps = np.arange(1, 2001, dtype=F32)
    for decay in (0.999, 0.99, 0.9999):
        base = F32(1) - F32(1.0 - decay)
        xs.append(np.full(steps.size, base, F32))
        ys.append(steps)
    rng = np.random.Generator(np.random.PCG64(SEED))
    xs.append(rng.uniform(0.0, 4.0, 2000).astype(F32))
    ys.append(rng.uniform(-12.0, 12.0, 2000).astype(F32))
    xs.append(-rng.integers(1, 9, 200).astype(F32))  # negative bases, integer exponents
    ys.append(rng.integers(-6, 7, 200).astype(F32))
    special = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.inf, -np.inf, np.nan, 1e-40,
                        3.4e38], F32)
    grid_x, grid_y = np.meshgrid(special, special)
    xs.append(grid_x.ravel())
    ys.append(grid_y.ravel())
    return np.concatenate(xs), np.concatenate(ys)


def main():
    assert tf.__version__.startswith("2.21"), f"the golden data is TF 2.21's, this is {tf.__version__}"
    x, y = pairs()
    graph = tf.Graph()
    with graph.as_default():
        a = tf.compat.v1.placeholder(tf.float32, [])
        b = tf.compat.v1.placeholder(tf.float32, [])
        p = tf.pow(a, b)
    with tf.compat.v1.Session(graph=graph) as session:
        z = np.array([session.run(p, {a: u, b: v}) for u, v in zip(x, y)], F32)
    np.savez_compressed(OUT, x=x.view(np.uint32), y=y.view(np.uint32), z=z.view(np.uint32),
                        tf_version=tf.__version__, libc=" ".join(platform.libc_ver()))
    print(f"wrote {OUT} ({x.size} pairs)")


if __name__ == "__main__":
    main()
