"""Every loader on damaged files: bit flips, truncations, lying zip header fields, random .npy header
text, deep JSON nesting. Only ValueError naming the file may come out, and no call may allocate
more than a few megabytes. Seeded, so CI runs the same cases every time."""
import random
import tracemalloc

import numpy as np
import pytest

import fqcore
import fqcore.graph as G
from fqcore.graph import checkpoint as C

from archive_helpers import members
from file_mutations import (JSON_MUTATIONS, ZIP_MUTATIONS, random_npy_header,
                            without_timestamps)

CASES_PER_KIND = 200
MAX_PEAK = 32 << 20
# numpy's header parser warns about the odd text it is fed here (escapes, Python 2 headers).
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Good files of every kind: {kind: (path, bytes)}, and the graph their variables belong to."""
    directory = tmp_path_factory.mktemp("fuzz")
    q = fqcore.LastValueQuantizer(8, True, False, False)
    state = q.build((3,), "q", None)
    fqcore.save_quantizer(directory / "q.npz", q, state)
    fqcore.save_quantizer(directory / "q.json", q, state)
    g = G.Graph()
    with g.as_default():
        G.variable("v", np.arange(6, dtype=np.float32).reshape(2, 3))
        G.variable("scope/i", np.arange(3, dtype=np.int64))
        G.global_variables_initializer()
    session = G.Session(g)
    session.run(g.get_operation_by_name("init"))
    C.save(session, directory / "ck")
    G.write_graph_json(g, directory / "g.json")
    paths = {"quantizer npz": "q.npz", "quantizer json": "q.json", "variables": "ck.npz",
             "checkpoint graph": "ck.graph.json", "graph json": "g.json"}
    return {kind: (directory / name, without_timestamps((directory / name).read_bytes()))
            for kind, name in paths.items()}, g


def check(call, where):
    """`call` on damaged input: it may succeed or raise a ValueError naming `where`, nothing
    else, and may not allocate more than MAX_PEAK bytes."""
    tracemalloc.reset_peak()
    try:
        call()
    except ValueError as error:
        assert where in str(error), error
    peak = tracemalloc.get_traced_memory()[1]
    assert peak < MAX_PEAK, f"{peak} bytes"


@pytest.fixture
def traced():
    tracemalloc.start()
    yield
    tracemalloc.stop()


@pytest.mark.parametrize("kind", ["quantizer npz", "quantizer json", "variables",
                                  "checkpoint graph", "graph json"])
def test_damaged_files_are_value_errors(files, kind, tmp_path, traced):
    by_kind, graph = files
    _, good = by_kind[kind]
    load = {"quantizer npz": fqcore.load_quantizer, "quantizer json": fqcore.load_quantizer,
            "variables": lambda p: C.load_variables(G.Session(graph), p, strict=False),
            "checkpoint graph": C.load_graph, "graph json": G.read_graph_json}[kind]
    mutations = ZIP_MUTATIONS if good.startswith(b"PK") else JSON_MUTATIONS
    rng = random.Random(kind)
    path = tmp_path / "damaged"
    for _ in range(CASES_PER_KIND):
        path.write_bytes(rng.choice(mutations)(rng, good))
        check(lambda: load(path), str(path))


def test_damaged_checkpoints_are_value_errors(files, tmp_path, traced):
    by_kind, _ = files
    variables, graph = by_kind["variables"][1], by_kind["checkpoint graph"][1]
    rng = random.Random("checkpoint")
    for _ in range(CASES_PER_KIND):
        damage = rng.randrange(3)  # the variables file, the graph file, or both
        (tmp_path / "ck.npz").write_bytes(
            rng.choice(ZIP_MUTATIONS)(rng, variables) if damage != 1 else variables)
        (tmp_path / "ck.graph.json").write_bytes(
            rng.choice(JSON_MUTATIONS)(rng, graph) if damage != 0 else graph)
        check(lambda: C.restore(tmp_path / "ck"), str(tmp_path / "ck."))


@pytest.mark.parametrize("kind, name", [("quantizer npz", "weight/min_var.npy"),
                                        ("quantizer npz", "header.npy"),
                                        ("variables", "v.npy"), ("variables", "__fqcore__.npy")])
def test_random_npy_headers_are_value_errors(files, kind, name, tmp_path, traced):
    by_kind, graph = files
    path, _ = by_kind[kind]
    entries = members(path)
    load = fqcore.load_quantizer if kind == "quantizer npz" else (
        lambda p: C.load_variables(G.Session(graph), p))
    rng = random.Random(name)
    damaged = tmp_path / "damaged.npz"
    for _ in range(CASES_PER_KIND):
        damaged.write_bytes(random_npy_header(rng, entries, name))
        check(lambda: load(damaged), str(damaged))


def test_damaged_json_text_is_a_value_error(traced):
    good = fqcore.to_json(fqcore.MovingAverageQuantizer(8, True, False, False)).encode("utf-8")
    rng = random.Random("from_json")
    for _ in range(CASES_PER_KIND):
        text = rng.choice(JSON_MUTATIONS)(rng, good)
        try:
            fqcore.from_json(text)
        except (TypeError, ValueError):  # a config's own checks raise TypeError for a wrong type
            pass

