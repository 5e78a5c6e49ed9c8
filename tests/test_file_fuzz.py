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

from archive_helpers import build_zip, members, npy, stored

CASES_PER_KIND = 200
MAX_PEAK = 32 << 20
# numpy's header parser warns about the odd text it is fed here (escapes, Python 2 headers).
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
# (signature, {field offset: field width}) of the zip records whose fields the mutator edits.
ZIP_FIELDS = [
    (b"PK\x03\x04", {4: 2, 6: 2, 8: 2, 14: 4, 18: 4, 22: 4, 26: 2, 28: 2}),
    (b"PK\x01\x02", {8: 2, 10: 2, 16: 4, 20: 4, 24: 4, 28: 2, 30: 2, 32: 2, 34: 2, 42: 4}),
    (b"PK\x05\x06", {4: 2, 6: 2, 8: 2, 10: 2, 12: 4, 16: 4, 20: 2}),
    (b"PK\x06\x06", {24: 8, 32: 8, 40: 8, 48: 8}),
]
HEADER_TOKENS = ["{", "}", "(", ")", "[", "]", ",", ":", "'descr'", "'shape'", "'fortran_order'",
                 "True", "False", "None", "'<f4'", "'|O'", "'<U3'", "'>f8'", "'V8'", "3L", "-1",
                 "0", "10**9", "1e9", "2**64", "'a'", "b'x'", "[('a', '<f4')]", "('<f4', (2,))",
                 "('<f4', (10**9, 10**9))", "lambda", "\\", "#", "\n", "'", '"', "{}", "..."]
GOOD_HEADER = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"


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


def without_timestamps(data):
    """`data` with the zip records' modification times zeroed, so that every run mutates the
    same bytes."""
    data = bytearray(data)
    for signature, at in ((b"PK\x03\x04", 10), (b"PK\x01\x02", 12)):
        start = data.find(signature)
        while start >= 0:
            data[start + at:start + at + 4] = bytes(4)
            start = data.find(signature, start + 1)
    return bytes(data)


def flip_bits(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)


def truncate(rng, data):
    return data[:rng.randrange(len(data))]


def edit_zip_field(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        signature, fields = rng.choice(ZIP_FIELDS)
        places = [i for i in range(len(data)) if data.startswith(signature, i)]
        if not places:
            continue
        offset, width = rng.choice(list(fields.items()))
        at = rng.choice(places) + offset
        old = int.from_bytes(data[at:at + width], "little")
        new = rng.choice([0, 1, old + 1, old - 1, old * 1000, (1 << 8 * width) - 1,
                          rng.randrange(1 << 8 * width)]) % (1 << 8 * width)
        data[at:at + width] = new.to_bytes(width, "little")[:len(data) - at]
    return bytes(data)


def nest_deeply(rng, data):
    """A JSON value nested thousands deep in place of some value of the document."""
    text = data.decode("utf-8")
    at = rng.choice([i for i, c in enumerate(text) if c in ":[,"]) + 1
    depth = rng.choice([70, 1000, 100000])
    opening, closing = rng.choice([("[", "]"), ('{"a":', "}")])
    return (text[:at] + opening * depth + "0" + closing * depth + text[at:]).encode("utf-8")


def random_npy_header(rng, entries, name):
    """The archive with entry `name` holding random header text (and random data)."""
    if rng.random() < 0.5:
        text = "".join(rng.choice(HEADER_TOKENS) + rng.choice(["", " "])
                       for _ in range(rng.randint(1, 15)))
    else:
        parts = list(GOOD_HEADER)
        for _ in range(rng.randint(1, 4)):
            parts.insert(rng.randrange(len(parts) + 1), rng.choice(HEADER_TOKENS))
        text = "".join(parts)
    body = bytes(rng.randrange(256) for _ in range(rng.choice([0, 4, 12, 24])))
    entry = stored(name, npy(text, body, rng.choice([(1, 0), (2, 0)])))
    return build_zip([entry if e[0] == name else e for e in entries])


ZIP_MUTATIONS = [flip_bits, truncate, edit_zip_field]
JSON_MUTATIONS = [flip_bits, truncate, nest_deeply]


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

