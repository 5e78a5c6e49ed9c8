"""What the rerun of the file audit found (issue 19, tools/fuzz_files.py), one test per finding,
each the minimal form of a fuzzer reproducer; each failed before its fix (bounded_npz.py for A and
B, serialization.py for C, graph_json.py for D)."""
import struct
import warnings

import numpy as np
import pytest

import fqcore
import fqcore.graph as G
from fqcore.graph import checkpoint as C

from archive_helpers import build_zip, members, npy, npy_header_text, stored
from file_mutations import build_zip64

# numpy's header parser warns about some of these headers.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


@pytest.fixture
def quantizer_file(tmp_path):
    q = fqcore.LastValueQuantizer(8, True, False, False)
    path = tmp_path / "q.npz"
    fqcore.save_quantizer(path, q, q.build((3,), "q", None))
    return path


# Finding A: an .npy header declaring a zero-size shape that numpy cannot make an array of (a
# dimension of 2**63 or more beside a 0, or more than 64 dimensions) passes the size check
# (0 bytes declared, 0 held) and NpzArchive.read's reshape raises numpy's bare ValueError
# ("Maximum allowed dimension exceeded", "maximum supported dimension for an ndarray is
# currently 64, found 65"), which names neither the file nor the entry.
# Fuzzer cases: seed 1, cases 2210 (restore, entry __fqcore_graph__ with
# {'descr': '<U1000000', 'fortran_order': True, 'shape': (0, 2**63)}) and 9265 (variables).
@pytest.mark.parametrize("shape", [(0, 1 << 63), (1 << 63, 0), (0, 1 << 64), (0,) * 65])
@pytest.mark.parametrize("fortran_order", [False, True])
def test_finding_a_unmakeable_zero_size_shape_names_the_file(quantizer_file, tmp_path, shape,
                                                             fortran_order):
    entries = [stored(name, npy(npy_header_text(shape, "<f4", fortran_order)))
               if name == "weight/min_var.npy" else (name, *rest)
               for name, *rest in members(quantizer_file)]
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(build_zip(entries))
    with pytest.raises(ValueError, match="damaged.npz.*min_var"):
        fqcore.load_quantizer(damaged)


def test_finding_a_through_restore(tmp_path):
    g = G.Graph()
    with g.as_default():
        G.variable("v", np.arange(3, dtype=np.float32))
        G.global_variables_initializer()
    session = G.Session(g)
    session.run(g.get_operation_by_name("init"))
    C.save(session, tmp_path / "ck")
    variables = tmp_path / "ck.npz"
    entries = [stored(name, npy(npy_header_text((0, 1 << 63), "<U1000000", True)))
               if name == "__fqcore_graph__.npy" else (name, *rest)
               for name, *rest in members(variables)]
    variables.write_bytes(build_zip(entries))
    (tmp_path / "ck.graph.json").unlink()  # restore reads the graph copy in the variables file
    with pytest.raises(ValueError, match="ck.npz"):
        C.restore(tmp_path / "ck")


# Finding B: zipfile reads the central directory without checking the end record's entry count,
# so a central record whose file-comment length runs past the directory hides the records after
# it; load_quantizer then returns the quantizer with some or all of its saved weights missing,
# silently (a damaged file loading as a different state). The variables file is safe (its
# metadata lists the variables); a quantizer file has no such list.
# Fuzzer case: seed 1, case 1159 (comment length 0xFFFF in weight/min_var's central record:
# max_var vanished).
def test_finding_b_hidden_central_records_are_not_a_silent_load(quantizer_file, tmp_path):
    data = bytearray(quantizer_file.read_bytes())
    first = data.find(b"PK\x01\x02")
    name_length = struct.unpack_from("<H", data, first + 28)[0]
    assert data[first + 46:first + 46 + name_length] == b"header.npy"
    struct.pack_into("<H", data, first + 32, 0xFFFF)  # its file-comment length
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(bytes(data))
    assert set(fqcore.load_quantizer(quantizer_file)[1]) == {"min_var", "max_var"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="damaged.npz"):
            fqcore.load_quantizer(damaged)  # was (quantizer, {}), no error


# Finding C: load_quantizer (.npz) checks the safe-name rule on the entry name ('weight/<key>'),
# not on the weight key it returns, so 'weight//etc/passwd.npy' loads as weight '/etc/passwd',
# 'weight/C:x.npy' as 'C:x', 'weight/\\x.npy' as '\\x' (absolute forms) and 'weight/.npy' as ''
# (an empty name): names save_quantizer refuses (ValueError / TypeError) and the .json loader
# refuses too, except '', which the .json loader also returns.
# Fuzzer cases: seed 1, cases 5652 ('/etc/passwd'), 5333 ('').
@pytest.mark.parametrize("entry", ["weight//etc/passwd.npy", "weight/C:x.npy", "weight/\\x.npy",
                                   "weight/.npy"])
def test_finding_c_npz_weight_keys_follow_the_name_rule(quantizer_file, tmp_path, entry):
    entries = [(entry if name == "weight/min_var.npy" else name, *rest)
               for name, *rest in members(quantizer_file)]
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(build_zip(entries))
    with pytest.raises(ValueError, match="damaged.npz"):
        fqcore.load_quantizer(damaged)


def test_finding_c_json_empty_weight_key_is_refused(tmp_path):
    q = fqcore.LastValueQuantizer(8, True, False, False)
    path = tmp_path / "q.json"
    fqcore.save_quantizer(path, q, q.build((3,), "q", None))
    text = path.read_text().replace('"min_var"', '""')
    path.write_text(text)
    with pytest.raises(ValueError, match="q.json"):
        fqcore.load_quantizer(path)  # was weights {'': ..., 'max_var': ...}


# Finding D: graph JSON's decode_value looks the value of a {"float": ...} attribute up in a dict
# before checking its type, so {"float": {}} or {"float": []} raises TypeError (unhashable type),
# which escapes read_graph_json (not a ValueError naming the file) and graph_from_json.
# Fuzzer case: seed 2, case 183588 (graph json).
@pytest.mark.parametrize("value", [{}, [], {"a": 1}, [1]])
def test_finding_d_float_attribute_of_a_container_is_a_value_error(tmp_path, value):
    import json
    doc = {"format": "fqcore-graph", "version": 1,
           "node": [{"name": "c", "op": "Const",
                     "attr": {"value": {"float": value}, "dtype": "float32"}}]}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="g.json"):
        G.read_graph_json(path)
    with pytest.raises(ValueError):
        G.graph_from_json(json.dumps(doc))


# Finding B again, from the post-fix fuzz run: the damaged record's comment length hides the
# record after it, and both entry counts of the end record are edited to what zipfile then reads.
# Fuzzer case: seed 1, case 349428.
def test_finding_b_with_the_end_record_counts_edited_to_match(quantizer_file, tmp_path):
    data = bytearray(quantizer_file.read_bytes())
    second = data.find(b"PK\x01\x02", data.find(b"PK\x01\x02") + 4)
    struct.pack_into("<H", data, second + 32, 0xFFFF)
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", data, end + 8, 2, 2)
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="damaged.npz.*directory"):
            fqcore.load_quantizer(damaged)


def test_a_zip64_archive_loads_as_its_plain_form(quantizer_file, tmp_path):
    """The directory walk reads the zip64 end record's counts and size too."""
    zip64 = tmp_path / "zip64.npz"
    zip64.write_bytes(build_zip64(members(quantizer_file)))
    quantizer, weights = fqcore.load_quantizer(zip64)
    expected_quantizer, expected = fqcore.load_quantizer(quantizer_file)
    assert quantizer == expected_quantizer and set(weights) == set(expected)
    for key in weights:
        np.testing.assert_array_equal(weights[key], expected[key])
