"""Files are untrusted input: decompression bombs cost nothing to refuse, anything wrong with a file
is a ValueError naming the file and the entry, names never read as paths, and interrupted saves
leave no temporary files behind for good."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest

import fqcore
import fqcore.graph as G
from fqcore import atomic_file, bounded_npz
from fqcore.graph import checkpoint as C

from archive_helpers import (DEFLATED, build_zip, members, npy, npy_header_text, stored,
                             with_bomb)

MB = 1 << 20


def peak_memory(call):
    """(the ValueError `call` raised, or None; the peak of memory allocated during it, bytes)."""
    tracemalloc.start()
    try:
        call()
        error = None
    except ValueError as refused:
        error = refused
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return error, peak


def quantizer_file(tmp_path):
    q = fqcore.LastValueQuantizer(8, True, False, False)
    path = tmp_path / "q.npz"
    fqcore.save_quantizer(path, q, q.build((3,), "q", None))
    return path


def small_session():
    g = G.Graph()
    with g.as_default():
        G.variable("v", np.arange(2, dtype=np.float32))
        G.global_variables_initializer()
    session = G.Session(g)
    session.run(g.get_operation_by_name("init"))
    return g, session


def checkpoint(tmp_path, name="ck"):
    """A checkpoint of one float32[2] variable 'v': (its prefix, its variables file)."""
    _, session = small_session()
    C.save(session, tmp_path / name)
    return tmp_path / name, tmp_path / f"{name}.npz"


def replace_file(path, data):
    path.write_bytes(data)
    return path


# -- decompression bombs --------------------------------------------------------------------
def test_a_quantizer_bomb_is_refused_from_the_zip_directory(tmp_path):
    path = quantizer_file(tmp_path)
    replace_file(path, with_bomb(path, "weight/min_var.npy"))
    assert os.path.getsize(path) < 256 * 1024
    error, peak = peak_memory(lambda: fqcore.load_quantizer(path))
    assert error is not None and str(path) in str(error) and "'weight/min_var.npy'" in str(error)
    assert "out of proportion" in str(error)
    assert peak < 64 * MB, f"refusing a {os.path.getsize(path)} byte bomb took {peak} bytes"


@pytest.mark.parametrize("entry", ["v.npy", "__fqcore__.npy", "__fqcore_graph__.npy"])
def test_a_checkpoint_bomb_is_refused_from_the_zip_directory(tmp_path, entry):
    prefix, variables = checkpoint(tmp_path)
    replace_file(variables, with_bomb(variables, entry, "|u1" if entry.startswith("__") else "<f4"))
    error, peak = peak_memory(lambda: C.restore(prefix))
    assert error is not None and str(variables) in str(error) and repr(entry) in str(error)
    assert peak < 64 * MB
    error, peak = peak_memory(lambda: C.load_variables(small_session()[1], variables,
                                                       strict=False))
    assert error is not None and repr(entry) in str(error) and peak < 64 * MB


def test_an_entry_of_the_wrong_shape_is_refused_before_its_data_is_read(tmp_path):
    """Stored (ratio 1), so in proportion to the file, but not what the graph holds."""
    prefix, variables = checkpoint(tmp_path)
    big = np.zeros(2 * MB, np.float32)
    entries = [stored("v.npy", npy(npy_header_text(big.shape), big.tobytes())) if e[0] == "v.npy"
               else e for e in members(variables)]
    replace_file(variables, build_zip(entries))
    error, peak = peak_memory(lambda: C.restore(prefix))
    assert "'v': file float32[2097152], graph float32[2]" in str(error)
    assert peak < big.nbytes / 4


def test_an_npy_header_declaring_more_data_than_its_entry_holds_allocates_nothing(tmp_path):
    path = quantizer_file(tmp_path)
    huge = npy(npy_header_text((1 << 40,)), bytes(12))
    replace_file(path, build_zip([stored("weight/min_var.npy", huge) if e[0] == "weight/min_var.npy"
                                  else e for e in members(path)]))
    error, peak = peak_memory(lambda: fqcore.load_quantizer(path))
    assert "'weight/min_var'" in str(error) and "declares shape (1099511627776,)" in str(error)
    assert peak < MB


def test_ordinary_compressed_files_still_load(tmp_path):
    """np.savez_compressed of real values (ratio about 1) and of small zero arrays (ratio near
    1000, within the allowance) loads as before; a large zero array beyond it is refused."""
    g = G.Graph()
    with g.as_default():
        G.variable("w", np.zeros((64, 64), np.float32))
        G.variable("b", np.zeros(64), dtype=np.float64)
    values = {"w": np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32),
              "b": np.zeros(64)}
    np.savez_compressed(tmp_path / "plain.npz", **values)
    session = G.Session(g)
    C.load_variables(session, tmp_path / "plain.npz")
    for name, value in values.items():
        assert session.variable_value(name).tobytes() == value.tobytes()
    np.savez_compressed(tmp_path / "zeros.npz", w=np.zeros((4096, 2048), np.float32))
    assert bounded_npz.ALLOWANCE < 4096 * 2048 * 4
    with pytest.raises(ValueError, match=r"zeros.npz: entry 'w.npy' would inflate .* out of "
                                         r"proportion \(fqcore reads entries of up to 100 times"):
        C.load_variables(session, tmp_path / "zeros.npz", strict=False)


def test_good_files_give_numpy_s_own_arrays(tmp_path):
    """Dtype, byte order, shape and Fortran order exactly as np.load gives them."""
    values = {"f": np.asfortranarray(np.arange(12, dtype=">i4").reshape(3, 4)),
              "c": np.arange(6, dtype=np.complex64).reshape(1, 2, 3), "s": np.array(2.5),
              "e": np.zeros((0, 3), np.float16), "u": np.array("text")}
    np.savez(tmp_path / "a.npz", **values)
    with bounded_npz.NpzArchive(tmp_path / "a.npz") as archive, np.load(tmp_path / "a.npz") as npz:
        assert archive.names == list(npz.files)
        for name in archive.names:
            mine, theirs = archive.read(name), npz[name]
            assert (mine.dtype, mine.shape, mine.strides) == (theirs.dtype, theirs.shape,
                                                               theirs.strides)
            assert mine.tobytes() == theirs.tobytes() and archive.header(name) == (
                theirs.shape, theirs.dtype)


# -- damaged files: a ValueError naming the file and the entry, nothing else -----------------
def claim_huge_compressed_sizes(archive):
    """`archive` with each central directory record claiming 2 GiB of compressed data."""
    data, at = bytearray(archive), archive.find(b"PK\x01\x02")
    while at >= 0:
        data[at + 20:at + 24] = (1 << 31).to_bytes(4, "little")
        at = archive.find(b"PK\x01\x02", at + 1)
    return bytes(data)


@pytest.mark.parametrize("damage, message", [
    (lambda m: build_zip(m)[:200], "not a valid .npz quantizer file"),
    (lambda m: build_zip(m, flags=1), "entry 'header.npy' is encrypted"),
    (lambda m: build_zip([(n, 99, c, d, s) for n, _, c, d, s in m]),
     "entry 'header.npy' uses compression method 99"),
    (lambda m: build_zip([(n, meth, c ^ 1, d, s) for n, meth, c, d, s in m]),
     "entry 'header' is corrupt (Bad CRC-32"),
    (lambda m: build_zip([(n, DEFLATED, c, d, s) for n, _, c, d, s in m]),
     "entry 'header' is corrupt"),
    (lambda m: build_zip(m + [stored("notes.txt", b"hello")]), "entry 'notes.txt' is not an .npy"),
    (lambda m: build_zip(m + [m[0]]), "entry 'header.npy' appears twice"),
    (lambda m: build_zip([(n, meth, c, d, s + 1) for n, meth, c, d, s in m]),
     "entry 'header': its header declares"),
    (lambda m: claim_huge_compressed_sizes(build_zip(m)),
     "entry 'header.npy' claims 2147483648 compressed bytes, more than the file's"),
    (lambda m: build_zip([stored(m[0][0], npy("{'descr': '<U3', 'fortran_order': False, "
                                              "'shape': (2,), (", bytes(24)))] + m[1:]),
     "entry 'header' has a malformed .npy header (TokenError"),
    (lambda m: build_zip([stored(m[0][0], npy(npy_header_text((), "|O"), bytes(8)))] + m[1:]),
     "entry 'header' holds Python objects"),
    (lambda m: build_zip([stored(m[0][0], npy("{}", version=(3, 0)))] + m[1:]),
     ".npy format version 3.0"),
])
def test_damaged_quantizer_archives_are_value_errors(tmp_path, damage, message):
    path = quantizer_file(tmp_path)
    replace_file(path, damage(members(path)))
    with pytest.raises(ValueError, match=message.replace("(", r"\(")) as error:
        fqcore.load_quantizer(path)
    assert str(error.value).startswith(str(path))


def test_a_malformed_npy_header_in_a_checkpoint_is_a_value_error(tmp_path):
    prefix, variables = checkpoint(tmp_path)
    broken = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), (", bytes(8))
    replace_file(variables, build_zip([stored("v.npy", broken) if e[0] == "v.npy" else e
                                       for e in members(variables)]))
    for load in (lambda: C.restore(prefix), lambda: C.load_variables(small_session()[1],
                                                                     variables)):
        with pytest.raises(ValueError, match=r"ck.npz: entry 'v' has a malformed .npy header"):
            load()


def test_a_variable_without_its_shape_is_a_value_error(tmp_path):
    g, session = small_session()
    C.save_graph(g, tmp_path / "ck.graph.json")
    C.save_variables(session, tmp_path / "ck.npz")  # no graph copy: restore reads the JSON file
    doc = json.loads((tmp_path / "ck.graph.json").read_text())
    for attr in ("shape", "dtype"):
        broken = json.loads(json.dumps(doc))
        variable_op = next(op for op in broken["ops"] if op["type"] == "VariableV2")
        del variable_op["attrs"][attr]
        (tmp_path / "ck.graph.json").write_text(json.dumps(broken))
        with pytest.raises(ValueError, match=rf"ck.graph.json: op 1 \('v'\): a VariableV2 needs "
                                             rf"a '{attr}' attribute"):
            C.restore(tmp_path / "ck")


def test_an_array_attribute_of_astronomical_shape_is_a_value_error(tmp_path):
    g, _ = small_session()
    C.save_graph(g, tmp_path / "g.json")
    doc = json.loads((tmp_path / "g.json").read_text())
    const = next(op for op in doc["ops"] if op["type"] == "Const")
    const["attrs"]["value"]["ndarray"]["shape"] = [2 ** 70]
    (tmp_path / "g.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"g.json: .*array data has 8 bytes"):
        C.load_graph(tmp_path / "g.json")


def test_a_short_mt19937_state_is_a_value_error(tmp_path):
    g, _ = small_session()
    C.save_graph(g, tmp_path / "g.json")
    doc = json.loads((tmp_path / "g.json").read_text())
    doc["init_rng"] = {"bit_generator": "MT19937", "state": {"key": [1, 2, 3], "pos": 0}}
    (tmp_path / "g.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"g.json: 'init_rng' is not a valid MT19937 state"):
        C.load_graph(tmp_path / "g.json")


def test_deeply_nested_json_is_a_value_error(tmp_path):
    deep = "[" * 100000 + "]" * 100000
    with pytest.raises(ValueError, match="text is not valid JSON"):
        fqcore.from_json(deep)
    (tmp_path / "deep.json").write_text(deep)
    with pytest.raises(ValueError, match=r"deep.json is not valid JSON"):
        fqcore.load_quantizer(tmp_path / "deep.json")
    nested = '{"class_name": "NoQuantizer", "config": {"x": ' + "[" * 900 + "]" * 900 + "}}"
    with pytest.raises(ValueError, match="text nests JSON values more than 64 levels deep"):
        fqcore.from_json(nested)


def test_a_bad_config_in_a_quantizer_file_names_the_file(tmp_path):
    for suffix in (".json", ".npz"):
        path = tmp_path / f"q{suffix}"
        fqcore.save_quantizer(path, fqcore.LastValueQuantizer(8, False, False, False))
        text = json.dumps({"format": "fqcore-quantizer", "version": 1,
                           "quantizer": {"class_name": 5, "config": {}}})
        if suffix == ".json":
            path.write_text(text)
        else:
            replace_file(path, build_zip([stored("header.npy", npy(
                npy_header_text((), f"<U{len(text)}"), text.encode("utf-32-le")))]))
        with pytest.raises(ValueError, match=rf"q{suffix}: class_name must be a str, got 5"):
            fqcore.load_quantizer(path)


def test_json_weights_whose_shape_overflows_int64_are_refused_with_the_file(tmp_path):
    q = fqcore.LastValueQuantizer(8, False, False, False)
    fqcore.save_quantizer(tmp_path / "q.json", q, q.build((), "q", None))
    doc = json.loads((tmp_path / "q.json").read_text())
    doc["weights"]["min_var"] = {"shape": [2 ** 30, 2 ** 30, 16], "bits": []}
    (tmp_path / "q.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"q.json: weight 'min_var' has 0 values for shape"):
        fqcore.load_quantizer(tmp_path / "q.json")


# -- names ----------------------------------------------------------------------------------
UNSAFE = ["../../x", "..", "a/../b", "a/.", "./a", "/abs", "\\abs", "C:x", "a\\..\\b", "a\0b"]


@pytest.mark.parametrize("name", UNSAFE)
def test_unsafe_names_are_refused_when_created(name, tmp_path):
    with G.Graph().as_default(), pytest.raises(ValueError, match="invalid operation name"):
        G.variable(name, np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="invalid operation name"):
        G.Graph().create_op("NoOp", [], name=name)
    with pytest.raises(ValueError, match=r"weights key .* cannot name a saved array"):
        fqcore.save_quantizer(tmp_path / "q.npz", fqcore.NoQuantizer(),
                              {name: np.zeros(1, np.float32)})
    assert os.listdir(tmp_path) == []


def test_names_with_dots_and_slashes_inside_stay_valid(tmp_path):
    g = G.Graph()
    names = ["conv1/weights_quant/min", "a.b/c..d", ".hidden/x", "..a/b.", "x.npy"]
    with g.as_default():
        for name in names:
            G.variable(name, np.zeros(2, np.float32))
        G.global_variables_initializer()
    session = G.Session(g)
    session.run(g.get_operation_by_name("init"))
    C.save(session, tmp_path / "ck")
    assert sorted(C.restore(tmp_path / "ck")[1].variable_values()) == sorted(names)
    q = fqcore.NoQuantizer()
    fqcore.save_quantizer(tmp_path / "q.npz", q, {"conv1/kernel.min": np.zeros(1, np.float32)})
    assert list(fqcore.load_quantizer(tmp_path / "q.npz")[1]) == ["conv1/kernel.min"]


def test_unsafe_names_are_refused_when_loaded(tmp_path):
    path = quantizer_file(tmp_path)
    entries = members(path) + [stored("weight/../../x.npy", npy(npy_header_text((1,)), bytes(4)))]
    replace_file(path, build_zip(entries))
    with pytest.raises(ValueError, match=r"q.npz: entry 'weight/../../x.npy' cannot name an "
                                         r"array: it has a '.' or '..' path component"):
        fqcore.load_quantizer(path)

    fqcore.save_quantizer(tmp_path / "q.json", fqcore.NoQuantizer())
    doc = json.loads((tmp_path / "q.json").read_text())
    doc["weights"] = {"/etc/x": {"shape": [], "bits": [0]}}
    (tmp_path / "q.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"q.json: weight '/etc/x' cannot name an array: it is "
                                         r"an absolute path"):
        fqcore.load_quantizer(tmp_path / "q.json")

    _, variables = checkpoint(tmp_path)
    plain = tmp_path / "plain.npz"
    replace_file(plain, build_zip(members(variables)[:1] + [
        stored("../x.npy", npy(npy_header_text((2,)), bytes(8)))]))
    with pytest.raises(ValueError, match=r"plain.npz: entry '../x.npy' cannot name an array"):
        C.load_variables(small_session()[1], plain, strict=False)

    doc = json.loads((tmp_path / "ck.graph.json").read_text())
    doc["ops"][0]["name"] = "../x"
    (tmp_path / "g.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"g.json: op 0 \('../x'\): invalid operation name"):
        C.load_graph(tmp_path / "g.json")
    G.write_graph_json(small_session()[0], tmp_path / "plain.json")
    doc = json.loads((tmp_path / "plain.json").read_text())
    doc["node"][0]["name"] = "a/../b"
    with pytest.raises(ValueError, match=r"node 0 \('a/../b'\) field 'name': must be a string of "
                                         r"letters, .* no component \(between slashes\) that is "
                                         r"'.' or '..'"):
        G.graph_from_json(json.dumps(doc))


# -- interrupted saves ----------------------------------------------------------------------
CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import fqcore
    from fqcore import serialization

    savez = np.savez

    def write_then_wait(f, **arrays):
        savez(f, **arrays)
        f.flush()
        print("writing", flush=True)
        sys.stdin.readline()  # killed here, or told to go on

    serialization.np.savez = write_then_wait
    q = fqcore.LastValueQuantizer(8, False, False, False)
    fqcore.save_quantizer(sys.argv[1], q, q.build((), "child", None))
""")


def start_saving(path):
    """A child process that stops in the middle of save_quantizer(path), after printing a line."""
    return subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def temporaries(directory, target):
    return sorted(n for n in os.listdir(directory)
                  if n.startswith(f".{target}.") and n.endswith(".tmp"))


def age(path, seconds=3600):
    info = os.stat(path)
    os.utime(path, (info.st_atime - seconds, info.st_mtime - seconds), follow_symlinks=False)


def kill(child):
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    child.stdin.close()


def test_saves_remove_the_temporary_files_of_killed_saves_and_nothing_else(tmp_path):
    path = tmp_path / "q.npz"
    children = [start_saving(path) for _ in range(4)]
    for child in children:
        assert child.stdout.readline() == "writing\n"
        kill(child)
    *dead, young = temporaries(tmp_path, "q.npz")
    assert len(dead) == 3 and not path.exists()
    for name in dead:  # killed long ago; `young` just now, within STALE_AFTER: it stays for now
        age(tmp_path / name)
    hex32 = "0123456789abcdef" * 2
    survivors = [f".other.npz.{hex32}.tmp", ".q.npz.tmp", f"q.npz.{hex32}.tmp",
                 f".q.npz.{hex32.upper()}.tmp", f".q.npz.{hex32[:31]}.tmp",
                 f".q.npz.{hex32}.tmp.bak", f".q.npz.{hex32}.tmpx", f".q.npz.x{hex32}.tmp",
                 "user.txt"]
    for name in survivors:
        (tmp_path / name).write_bytes(b"keep")
        age(tmp_path / name)
    directory, link = f".q.npz.{'a' * 32}.tmp", f".q.npz.{'b' * 32}.tmp"
    os.mkdir(tmp_path / directory)
    os.symlink(tmp_path / "user.txt", tmp_path / link)
    age(tmp_path / directory)
    age(tmp_path / link)

    fqcore.save_quantizer(path, fqcore.NoQuantizer())
    assert set(os.listdir(tmp_path)) == set(survivors) | {young, directory, link, "q.npz"}
    assert all((tmp_path / name).read_bytes() == b"keep" for name in survivors)
    assert fqcore.load_quantizer(path) == (fqcore.NoQuantizer(), {})


def test_a_live_save_keeps_its_temporary_file_however_old(tmp_path):
    """A concurrent save that has not written for longer than STALE_AFTER still holds its file:
    another save to the same target leaves it, and it completes."""
    path = tmp_path / "q.npz"
    child = start_saving(path)
    assert child.stdout.readline() == "writing\n"
    live, = temporaries(tmp_path, "q.npz")
    age(tmp_path / live, 10 * atomic_file.STALE_AFTER)
    fqcore.save_quantizer(path, fqcore.NoQuantizer())
    assert temporaries(tmp_path, "q.npz") == [live]
    child.stdin.write("go on\n")
    child.stdin.close()
    assert child.wait() == 0
    child.stdout.close()
    assert os.listdir(tmp_path) == ["q.npz"]
    assert fqcore.load_quantizer(path)[0] == fqcore.LastValueQuantizer(8, False, False, False)
