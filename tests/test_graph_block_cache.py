"""Session.run's arrays take their memory from fqcore's block cache (src_c/common/block_cache.c,
NEP 49's numpy handler): a training step reuses the blocks the previous one freed, and numpy's
handler outside a run stays what it was, a run that fails included."""
import numpy as np
import pytest
from numpy._core.multiarray import get_handler_name

import fqcore.graph as G
from fqcore import _kernels

F32 = np.float32


def _training_graph():
    """A dense layer and a squared error on a batch of 64 x 512: arrays of 128 KiB, far above the
    cache's 16 KiB limit."""
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [None, 512], name="x")
        w = G.variable("w", np.full((512, 512), 0.01, F32))
        error = G.subtract(G.matmul(x, w.read), x)
        loss = G.reduce_mean(G.multiply(error, error))
        train_op = G.GradientDescentOptimizer(0.01).minimize(loss)
        init = G.global_variables_initializer()
    return g, x, w, loss, train_op, init


def test_training_steps_reuse_the_blocks_of_the_step_before():
    g, x, _, loss, train_op, init = _training_graph()
    session = G.Session(g)
    session.run(init)
    batch = np.random.default_rng(0).standard_normal((64, 512)).astype(F32)
    G.release_cached_memory()  # blocks other tests left could serve the first steps' arrays
    for _ in range(3):  # the plan's first runs, then a step whose freed blocks the next ones find
        session.run([train_op, loss], {x: batch})
    before = _kernels.block_cache_stats()
    for _ in range(5):
        session.run([train_op, loss], {x: batch})
    after = _kernels.block_cache_stats()
    assert after["misses"] == before["misses"], "a training step allocated fresh large blocks"
    assert after["hits"] - before["hits"] >= 5 * 4, "the steps' large arrays did not come from the cache"


def test_variables_written_by_a_run_live_in_cache_blocks_and_numpy_is_left_as_it_was():
    g, x, w, loss, train_op, init = _training_graph()
    session = G.Session(g)
    session.run(init)
    assert get_handler_name() == "default_allocator"
    session.run(train_op, {x: np.ones((64, 512), F32)})
    assert get_handler_name() == "default_allocator"
    # The updated weights were made inside the run; the fetched copy outside it.
    assert get_handler_name(session._store[w.op.name]) == "fqcore_block_cache"
    assert get_handler_name(session.run(loss, {x: np.ones((64, 512), F32)})) == "default_allocator"


def test_a_failing_run_puts_numpy_s_handler_back():
    g, x, _, loss, _, _ = _training_graph()
    session = G.Session(g)
    with pytest.raises(ValueError, match="'w'.*initializ"):
        session.run(loss, {x: np.ones((64, 512), F32)})  # fails inside the run: w not initialized
    assert get_handler_name() == "default_allocator"
    assert get_handler_name(np.empty(1 << 16, F32)) == "default_allocator"


def test_released_memory_leaves_the_cache_empty_and_training_goes_on():
    g, x, w, loss, train_op, init = _training_graph()
    session = G.Session(g)
    session.run(init)
    batch = np.ones((64, 512), F32)
    session.run(train_op, {x: batch})
    first = session.run(loss, {x: batch})
    kept = _kernels.block_cache_stats()["cached_bytes"]
    assert kept > 0
    assert G.release_cached_memory() == kept
    assert _kernels.block_cache_stats()["cached_bytes"] == 0
    session.run(train_op, {x: batch})
    assert session.run(loss, {x: batch}) < first
