"""Calls release the GIL: Python threads calling at once get the same bits as calls made in turn."""
import threading

import numpy as np

import fqcore
from helpers import assert_same_bits


def _work(seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-8, 8, (300, 1000)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    lim = np.full(1000, 6.0, np.float32)
    images = x.reshape(3, 10, 10, 1000)
    scale = rng.standard_normal(1000).astype(np.float32)
    forward = fqcore.fused_batch_norm(images, scale, scale)
    return [np.asarray(v) for v in (
        fqcore.fake_quant_with_min_max_args(x),
        *fqcore.fake_quant_with_min_max_vars_gradient(g, x, -6.0, 6.0),
        *fqcore.fake_quant_with_min_max_vars_per_channel_gradient(g, x, -lim, lim),
        *forward[:5],
        *fqcore.fused_batch_norm_grad(g.reshape(images.shape), images, scale, forward.reserve_space_1,
                                      forward.reserve_space_2)[:3],
    )]


def test_concurrent_calls_match_serial_calls():
    seeds = range(6)
    expected = {seed: _work(seed) for seed in seeds}
    actual, errors = {}, []

    def run(seed):
        try:
            for _ in range(5):
                actual[seed] = _work(seed)
        except Exception as error:  # reported below, with the seed
            errors.append((seed, error))

    threads = [threading.Thread(target=run, args=(seed,)) for seed in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for seed in seeds:
        for a, e in zip(actual[seed], expected[seed]):
            assert_same_bits(a, e)
