"""fqcore.cached_memory: a loop of fqcore calls whose arrays take their memory from the block cache
(src_c/common/block_cache.c) for each step, as Session.run's do; numpy's handler is back after a
region, also one that raises; a region inside another belongs to the outer one's round."""
import numpy as np
import pytest
from numpy._core.multiarray import get_handler_name

import fqcore
from fqcore import _kernels

F32 = np.float32
# Arrays of 256 KiB, far above the cache's 16 KiB limit.
SHAPE = (64, 32, 32)


def _ops_step(x, g):
    y = fqcore.fake_quant_with_min_max_vars(x, F32(-6.0), F32(6.0))
    dx, _, _ = fqcore.fake_quant_with_min_max_vars_gradient(g, y, F32(-6.0), F32(6.0))
    return dx


def test_a_loop_of_ops_in_regions_reuses_the_blocks_of_the_step_before():
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal(SHAPE).astype(F32) * 3, rng.standard_normal(SHAPE).astype(F32)
    # Blocks other tests left may serve a first step (the recent ones, up to 4 times the size) and
    # make its next one take a block of its own: from an empty cache, two steps set the pattern.
    fqcore.release_cached_memory()
    for step in range(7):  # the first steps' blocks are new; the later ones find them
        if step == 2:
            before = _kernels.block_cache_stats()
        with fqcore.cached_memory():
            dx = _ops_step(x, g)
    after = _kernels.block_cache_stats()
    assert after["misses"] == before["misses"], "a step allocated fresh large blocks"
    assert after["hits"] - before["hits"] >= 5 * 2, "the steps' arrays did not come from the cache"
    assert get_handler_name(dx) == "fqcore_block_cache"
    np.testing.assert_array_equal(dx, _ops_step(x, g))  # the same values as numpy's memory gives


def test_numpy_s_handler_is_back_after_a_region_also_one_that_raises():
    assert get_handler_name() == "default_allocator"
    with fqcore.cached_memory():
        assert get_handler_name() == "fqcore_block_cache"
    assert get_handler_name() == "default_allocator"
    with pytest.raises(ValueError, match="num_bits"):
        with fqcore.cached_memory():
            fqcore.fake_quant_with_min_max_args(np.zeros(SHAPE, F32), -6.0, 6.0, num_bits=1)
    assert get_handler_name() == "default_allocator"
    assert get_handler_name(np.empty(SHAPE, F32)) == "default_allocator"


def test_a_region_inside_another_belongs_to_the_outer_round():
    """Each step enters more inner regions than the rounds a cached size outlives (4) before it
    makes its own array: if the inner regions ended rounds, the block the step before kept would
    be given back, and each step's array would be a fresh block."""
    size = 40_000 + 7  # a size no other test's arrays have
    for step in range(4):
        with fqcore.cached_memory():
            for _ in range(6):
                with fqcore.cached_memory():
                    pass
            if step == 2:
                before = _kernels.block_cache_stats()
            array = np.empty(size, F32)
            del array
    after = _kernels.block_cache_stats()
    assert after["misses"] == before["misses"], "the inner regions aged the outer one's blocks"
    assert after["hits"] - before["hits"] >= 2


def test_a_region_entered_twice_is_refused():
    region = fqcore.cached_memory()
    with region:
        with pytest.raises(RuntimeError, match="already entered"):
            region.__enter__()
        assert get_handler_name() == "fqcore_block_cache"
    assert get_handler_name() == "default_allocator"
