"""Thread counts inside Session.run: the BLAS setting (threads=, $FQCORE_NUM_THREADS, "auto":
one thread where fqcore's kernel does the convolutions, else the cores other processes leave
free) and fqcore's kernel threads."""
import os

import numpy as np
import pytest

import fqcore
import fqcore.graph as G
from fqcore import _kernels, blas_threads
from fqcore.graph import run_threads


def test_the_blas_numpy_uses_is_found_and_controlled():
    if blas_threads.blas_library() is None:
        pytest.skip("no BLAS library with a thread API in this process")
    before = blas_threads.get_blas_threads()
    try:
        blas_threads.set_blas_threads(1)
        assert blas_threads.get_blas_threads() == 1
        a = np.ones((64, 64), np.float32)
        assert float((a @ a)[0, 0]) == 64.0
    finally:
        blas_threads.set_blas_threads(before)
    assert blas_threads.get_blas_threads() == before


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "two", None])
def test_set_blas_threads_checks_its_argument(value):
    with pytest.raises(ValueError, match="threads must be an int from 1 to 1024"):
        blas_threads.set_blas_threads(value)


@pytest.mark.parametrize("value,expected", [("auto", "auto"), (" AUTO ", "auto"), ("3", 3),
                                            (2, 2)])
def test_thread_settings_parse(value, expected):
    assert run_threads.parse(value, "threads") == expected


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "", "many", 0, True, 2.0])
def test_bad_thread_settings_are_refused_by_name(value):
    with pytest.raises(ValueError, match=r"threads must be 'auto' or a positive int"):
        G.Session(G.Graph(), threads=value)


def test_the_environment_sets_the_default(monkeypatch):
    monkeypatch.setenv("FQCORE_NUM_THREADS", "3")
    assert G.Session(G.Graph()).threads == 3
    monkeypatch.setenv("FQCORE_NUM_THREADS", "lots")
    with pytest.raises(ValueError, match=r"\$FQCORE_NUM_THREADS must be 'auto' or a positive "
                                         r"int, got 'lots'"):
        G.Session(G.Graph())
    monkeypatch.delenv("FQCORE_NUM_THREADS")
    assert G.Session(G.Graph()).threads == "auto"
    assert G.Session(G.Graph(), threads=2).threads == 2


@pytest.mark.parametrize("free", [1, 2, 5])
def test_auto_gives_blas_the_cpus_others_leave_free(monkeypatch, isa, free):
    """Where BLAS does the convolutions, the count comes from fqcore's CPU budget (its
    arithmetic: tests/c/test_threads.c); where fqcore's own kernel does them (AVX-512, AVX2), BLAS
    keeps one thread. A fixed count is the count either way."""
    monkeypatch.setattr(fqcore._runtime, "free_cpus", lambda: free)
    own = isa in ("avx512", "avx2")
    expected = 1 if own else free
    assert fqcore._runtime.own_matrix_products() == own
    assert run_threads.RunThreads("auto", 1).blas_threads() == expected
    assert run_threads.RunThreads(3, 1).blas_threads() == 3


def test_free_cpus_is_within_the_usable_cpus():
    assert 1 <= fqcore.free_cpus() <= fqcore.usable_cpus()
    assert 0.0 <= fqcore.other_cpu_load() <= (os.cpu_count() or 1)


def _tiny_session(**kwargs):
    g = G.Graph()
    with g.as_default():
        x = G.placeholder("float32", [4, 4], name="x")
        y = G.matmul(x, x)
    return G.Session(g, **kwargs), x, y


def test_a_run_sets_both_counts_and_keeps_blas_at_its_count(monkeypatch):
    """fqcore's kernel count is put back after the run; BLAS keeps the run's count (changing it
    wakes OpenBLAS's pool, so it changes only when a run needs another)."""
    calls = []
    state = {"blas": 2}
    monkeypatch.setattr(blas_threads, "get_blas_threads", lambda: state["blas"])

    def set_blas(n):
        calls.append(("blas", n))
        state["blas"] = n
    monkeypatch.setattr(blas_threads, "set_blas_threads", set_blas)
    kernel_before = fqcore.get_num_threads()
    fqcore.set_num_threads(2)
    try:
        session, x, y = _tiny_session(threads=1, kernel_threads=1)
        seen = {}
        real_execute = G.session._Run.execute

        def execute(run):
            seen["blas"], seen["kernel"] = state["blas"], fqcore.get_num_threads()
            return real_execute(run)
        monkeypatch.setattr(G.session._Run, "execute", execute)
        out = session.run(y, {x: np.eye(4, dtype=np.float32)})
        np.testing.assert_array_equal(out, np.eye(4, dtype=np.float32))
        assert seen == {"blas": 1, "kernel": 1}
        session.run(y, {x: np.eye(4, dtype=np.float32)})
        assert calls == [("blas", 1)]
        assert state["blas"] == 1 and fqcore.get_num_threads() == 2
    finally:
        fqcore.set_num_threads(kernel_before)


@pytest.mark.parametrize("setting", ["auto", 2])
def test_by_default_kernels_follow_fqcores_setting_inside_a_run(monkeypatch, setting):
    kernel_before = fqcore.get_num_threads()
    fqcore.set_num_threads(setting)
    try:
        session, x, y = _tiny_session()
        assert session.kernel_threads is None
        seen = []
        real_execute = G.session._Run.execute

        def execute(run):
            seen.append(fqcore.get_num_threads())
            return real_execute(run)
        monkeypatch.setattr(G.session._Run, "execute", execute)
        session.run(y, {x: np.eye(4, dtype=np.float32)})
        assert seen == [setting] and fqcore.get_num_threads() == setting
    finally:
        fqcore.set_num_threads(kernel_before)


@pytest.mark.parametrize("blas,controlled,held", [(1, True, 1), (2, True, 0), (1, False, 0)])
def test_a_run_holds_fqcores_workers_awake_only_with_blas_on_one_thread(monkeypatch, blas,
                                                                        controlled, held):
    """Between a run's kernel calls no other pool runs where BLAS has one thread: fqcore's idle
    workers then wait awake (a worker that spun through a two-thread BLAS call would halve its
    speed); a BLAS fqcore cannot see or set may have more."""
    state = {"blas": blas if controlled else None}
    monkeypatch.setattr(blas_threads, "get_blas_threads", lambda: state["blas"])
    monkeypatch.setattr(blas_threads, "set_blas_threads", lambda n: state.update(blas=n))
    session, x, y = _tiny_session(threads=blas)
    seen, fail = [], []
    real_execute = G.session._Run.execute

    def execute(run):
        seen.append(_kernels.workers_kept_awake())
        if fail:
            raise ValueError("a run that fails")
        return real_execute(run)
    monkeypatch.setattr(G.session._Run, "execute", execute)
    before = _kernels.workers_kept_awake()
    session.run(y, {x: np.eye(4, dtype=np.float32)})
    assert seen == [before + held] and _kernels.workers_kept_awake() == before
    fail.append(True)
    with pytest.raises(ValueError, match="a run that fails"):
        session.run(y, {x: np.eye(4, dtype=np.float32)})
    assert seen[1] == before + held and _kernels.workers_kept_awake() == before


def test_without_a_blas_to_control_runs_still_work(monkeypatch):
    monkeypatch.setattr(blas_threads, "get_blas_threads", lambda: None)
    monkeypatch.setattr(blas_threads, "set_blas_threads",
                        lambda n: pytest.fail("set_blas_threads called without a BLAS"))
    session, x, y = _tiny_session()
    assert session.run(y, {x: np.ones((4, 4), np.float32)})[0, 0] == 4.0


def test_the_blas_is_found_without_threadpoolctl(monkeypatch):
    """/proc/self/maps stands in when threadpoolctl is not installed (fqcore does not need it)."""
    import sys
    if not sys.platform.startswith("linux"):
        pytest.skip("/proc/self/maps is Linux's")
    with_threadpoolctl = [lib.path for lib in blas_threads._libraries()]
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)
    monkeypatch.setattr(blas_threads, "_found", None)
    found = [lib.path for lib in blas_threads._libraries()]
    assert found == with_threadpoolctl
    if found:
        assert blas_threads.get_blas_threads() >= 1
