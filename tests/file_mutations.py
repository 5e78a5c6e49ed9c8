"""Mutations of good fqcore files for the file fuzzers (tests/test_file_fuzz.py, tools/fuzz_files.py):
bit flips, byte edits, truncations, lying zip header fields (local, central, end, zip64), random
.npy header text, huge declared shapes, hostile entry names, deep JSON nesting and random JSON
values in random places. Each takes a random.Random and the good bytes and returns new bytes."""
import io
import json
import struct
import zipfile
import zlib

from archive_helpers import DEFLATED, build_zip, npy, npy_header_text, stored

# (signature, {field offset: field width}) of the zip records whose fields the mutator edits.
ZIP_FIELDS = [
    (b"PK\x03\x04", {4: 2, 6: 2, 8: 2, 14: 4, 18: 4, 22: 4, 26: 2, 28: 2}),
    (b"PK\x01\x02", {8: 2, 10: 2, 16: 4, 20: 4, 24: 4, 28: 2, 30: 2, 32: 2, 34: 2, 42: 4}),
    (b"PK\x05\x06", {4: 2, 6: 2, 8: 2, 10: 2, 12: 4, 16: 4, 20: 2}),
    (b"PK\x06\x06", {24: 8, 32: 8, 40: 8, 48: 8}),
]
# The zip64 end-of-central-directory record and its locator, all of their fields.
ZIP64_FIELDS = [
    (b"PK\x06\x06", {4: 8, 12: 2, 14: 2, 16: 4, 20: 4, 24: 8, 32: 8, 40: 8, 48: 8}),
    (b"PK\x06\x07", {4: 4, 8: 8, 16: 4}),
]
HEADER_TOKENS = ["{", "}", "(", ")", "[", "]", ",", ":", "'descr'", "'shape'", "'fortran_order'",
                 "True", "False", "None", "'<f4'", "'|O'", "'<U3'", "'>f8'", "'V8'", "3L", "-1",
                 "0", "10**9", "1e9", "2**64", "'a'", "b'x'", "[('a', '<f4')]", "('<f4', (2,))",
                 "('<f4', (10**9, 10**9))", "lambda", "\\", "#", "\n", "'", '"', "{}", "..."]
GOOD_HEADER = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"
HUGE_SHAPES = [(1 << 40,), (10 ** 9, 10 ** 9), (1 << 62, 4), (0, 1 << 63), (1 << 31, 1 << 31),
               (1 << 63,), (2, 1 << 62), (3, 0, 1 << 70), (1 << 28,), (65536, 65536, 2)]
HUGE_DESCRS = ["<f4", "<f8", "|u1", "<U1000000", "|S0", "|V0", "<c16", "<M8[ns]", "|b1", ">i8"]
HOSTILE_NAMES = ["..", "../x", "a/../../b", "/etc/passwd", "/abs", "a\0b", "\0", "", ".", "./a",
                 "a/./b", "a//b", "a/", "C:\\x", "..\\x", "x" * 5000, "\u00e9\u4e2d", "\ud800",
                 "weight/..", "weight/../header", "__fqcore__", "__fqcore_graph__", "v", "v/"]
INTERESTING_INTS = [0, 1, -1, 2, 255, 256, 65535, 65536, (1 << 31) - 1, 1 << 31, (1 << 32) - 1,
                    1 << 32, (1 << 63) - 1, 1 << 63, 1 << 64, -(1 << 63), 10 ** 30, 10 ** 400]


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


def _edit_fields(rng, data, records):
    data = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        signature, fields = rng.choice(records)
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


def edit_zip_field(rng, data):
    return _edit_fields(rng, data, ZIP_FIELDS)


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


# --- More mutations, for tools/fuzz_files.py (the seeded test keeps the lists above) ------------

def edit_bytes(rng, data):
    """A few bytes set to random or boundary values, or a 4-byte word set to an interesting int
    (offsets and sizes of flatbuffers and zip records)."""
    data = bytearray(data)
    if not data:
        return bytes(data)
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(data))
        if rng.random() < 0.5:
            data[at] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        else:
            at -= at % 4
            value = rng.choice([0, 1, 4, 8, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, len(data),
                                len(data) - 4, len(data) + 4, rng.randrange(len(data) + 1),
                                rng.randrange(1 << 32)]) % (1 << 32)
            data[at:at + 4] = value.to_bytes(4, "little")[:len(data) - at]
    return bytes(data)


def splice(rng, data):
    """A slice of the file removed, duplicated or moved."""
    if len(data) < 2:
        return data + data
    a, b = sorted(rng.randrange(len(data) + 1) for _ in range(2))
    c = rng.randrange(len(data) + 1)
    choice = rng.randrange(3)
    if choice == 0:
        return data[:a] + data[b:]
    if choice == 1:
        return data[:c] + data[a:b] + data[c:]
    return data[:a] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))) + data[b:]


def entries_of(data):
    """The members of a good archive's bytes, each stored: [(name, method, crc, bytes, size)]."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [stored(info.filename, archive.read(info)) for info in archive.infolist()]


def deflated(entries, level=6):
    out = []
    for name, _, crc, data, size in entries:
        c = zlib.compressobj(level, zlib.DEFLATED, -15)
        out.append((name, DEFLATED, crc, c.compress(data) + c.flush(), size))
    return out


def build_zip64(entries, flags=0):
    """build_zip with every size and offset in zip64 extra fields (0xFFFFFFFF in the records) and
    a zip64 end record and locator."""
    out, central = bytearray(), bytearray()
    for name, method, crc, data, size in entries:
        raw = name.encode("utf-8", "surrogatepass")
        offset = len(out)
        local_extra = struct.pack("<2H2Q", 1, 16, size, len(data))
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 45, flags, method, 0, 0, crc, 0xFFFFFFFF,
                           0xFFFFFFFF, len(raw), len(local_extra)) + raw + local_extra + data
        extra = struct.pack("<2H3Q", 1, 24, size, len(data), offset)
        central += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 45, 45, flags, method, 0, 0, crc,
                               0xFFFFFFFF, 0xFFFFFFFF, len(raw), len(extra), 0, 0, 0, 0,
                               0xFFFFFFFF) + raw + extra
    end64_at = len(out) + len(central)
    end64 = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, len(entries), len(entries),
                        len(central), len(out))
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, end64_at, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return bytes(out + central + end64 + locator + end)


def edit_zip64(rng, data):
    """The archive rewritten in zip64 form (stored or deflated), then its zip64 end record, its
    locator, or the sizes and offsets in an entry's zip64 extra field edited."""
    entries = entries_of(data)
    if rng.random() < 0.3:
        entries = deflated(entries)
    data = bytearray(build_zip64(entries))
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.5:
            data = bytearray(_edit_fields(rng, bytes(data), ZIP64_FIELDS))
            continue
        places = [i for i in range(len(data)) if data.startswith(b"PK\x01\x02", i)]
        at = rng.choice(places)
        name_length = int.from_bytes(data[at + 28:at + 30], "little")
        field = at + 46 + name_length + 4 + 8 * rng.randrange(3)
        value = rng.choice([0, 1, (1 << 64) - 1, 1 << 63, 1 << 40, len(data), len(data) * 1000,
                            rng.randrange(1 << 64)])
        data[field:field + 8] = value.to_bytes(8, "little")
    return bytes(data)


def deflate_then(rng, data):
    """The archive with its entries deflated (a real inflate path), then a zip mutation."""
    entries = deflated(entries_of(data), rng.choice([0, 1, 6, 9]))
    return rng.choice(ZIP_MUTATIONS)(rng, build_zip(entries))


def huge_shape(rng, data):
    """An entry's .npy header declaring a huge shape (or odd dtype), with a few bytes of data, and
    sometimes a directory that claims the matching size (deflated, so the ratio check sees it)."""
    entries = entries_of(data)
    i = rng.randrange(len(entries))
    name = entries[i][0]
    shape = rng.choice(HUGE_SHAPES)
    descr = rng.choice(HUGE_DESCRS)
    text = npy_header_text(shape, descr, rng.random() < 0.2)
    body = bytes(rng.choice([0, 4, 64]))
    entry = stored(name, npy(text, body, rng.choice([(1, 0), (2, 0)])))
    if rng.random() < 0.4:
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        payload = entry[3]
        claimed = rng.choice([len(payload) * 100, len(payload) * 1000, 1 << 31, (1 << 32) - 1])
        entry = (name, DEFLATED, entry[2], c.compress(payload) + c.flush(), claimed)
    entries[i] = entry
    return build_zip64(entries) if rng.random() < 0.3 else build_zip(entries)


def hostile_entry_name(rng, data):
    """An entry renamed to a hostile or duplicate name (in both the local and central records)."""
    entries = entries_of(data)
    i = rng.randrange(len(entries))
    if rng.random() < 0.2:
        name = rng.choice(entries)[0]  # a duplicate
    else:
        name = rng.choice([n for n in HOSTILE_NAMES if n != "\ud800"])  # zip names are UTF-8
        prefix = entries[i][0].rsplit("/", 1)[0] + "/" if "/" in entries[i][0] else ""
        name = rng.choice(["", prefix]) + name + rng.choice([".npy", ".npy", "", ".npz"])
    entries[i] = (name,) + entries[i][1:]
    if rng.random() < 0.3:
        entries.append(entries[i])
    return build_zip(entries)


def random_header_in(rng, data):
    entries = entries_of(data)
    return random_npy_header(rng, entries, rng.choice(entries)[0])


NPZ_MUTATIONS = ZIP_MUTATIONS + [edit_bytes, splice, edit_zip64, deflate_then, huge_shape,
                                 hostile_entry_name, random_header_in]


# --- JSON structure -----------------------------------------------------------------------------

def random_json(rng, depth=0):
    """A random JSON value: scalars of every kind (huge ints, -0.0, 1e308, odd strings), lists and
    objects."""
    roll = rng.random()
    if depth > 4 or roll < 0.55:
        return rng.choice([
            None, True, False, 0, -1, 1, 2, 3, 8, rng.choice(INTERESTING_INTS),
            rng.randrange(-1000, 1000), -0.0, 0.5, 1e308, -1e308, 5e-324, 1.5, float(1 << 53),
            "", "a", "float32", "int64", "uint8", "float16", "bool", "object", "O", "<f4",
            "VariableV2", "Const", "Placeholder", "Conv2D", "Identity", "nan", "inf", "-inf",
            "SAME", "VALID", rng.choice(HOSTILE_NAMES), "x:0", "^x", "v", "v:0", "v/read:0",
            "PCG64", "MT19937", "\x00", "A" * rng.choice([1, 100, 10000])])
    if roll < 0.8:
        return [random_json(rng, depth + 1) for _ in range(rng.choice([0, 1, 2, 3, 5]))]
    keys = ["format", "version", "shape", "dtype", "data", "bits", "name", "op", "type",
            "input", "inputs", "attr", "attrs", "value", "class_name", "config", "num_bits",
            "per_axis", "symmetric", "narrow_range", "ndarray", "tuple", "dict", "float",
            "scalar", "variable", "tensor", "operation", "bit_generator", "state", "node",
            "ops", "collections", "outputs", "variables", "weights", "quantizer", "a"]
    return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.choice([0, 1, 2, 4]))}


def _containers(value, path=()):
    """(path, container) of every list and object in a JSON document."""
    out = []
    if isinstance(value, (dict, list)):
        out.append((path, value))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            out.extend(_containers(child, path + (key,)))
    return out


def nested(depth, rng):
    value = 0
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"a": value}
    return value


def replace_json_value(rng, data):
    """Parses the document and puts random JSON (or a value nested 62-66 or a few hundred deep)
    in place of a random value, deletes a key or item, or adds one; then writes it back."""
    doc = json.loads(data.decode("utf-8"))
    for _ in range(rng.randint(1, 3)):
        places = _containers(doc)
        _, container = rng.choice(places)
        value = random_json(rng) if rng.random() < 0.9 else nested(
            rng.choice([62, 63, 64, 65, 66, 300]), rng)
        if isinstance(container, dict):
            if container and rng.random() < 0.85:
                key = rng.choice(list(container))
                if rng.random() < 0.2:
                    del container[key]
                else:
                    container[key] = value
            else:
                container[rng.choice(["extra", "name", "shape", "dtype", "data"])] = value
        else:
            if container and rng.random() < 0.8:
                i = rng.randrange(len(container))
                if rng.random() < 0.2:
                    del container[i]
                else:
                    container[i] = value
            else:
                container.append(value)
    indent = rng.choice([None, 1])
    return json.dumps(doc, indent=indent, allow_nan=rng.random() < 0.05).encode("utf-8")


def rename_in_json(rng, data):
    """Every occurrence of one name of the document (an op, a variable, a weight) replaced by a
    hostile one, so that the references stay consistent."""
    text = data.decode("utf-8")
    names = sorted(set(s for s in _strings(json.loads(text)) if 0 < len(s) < 64))
    if not names:
        return data
    old = rng.choice(names).split(":")[0]
    new = rng.choice(HOSTILE_NAMES)
    return text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1]).encode("utf-8", "surrogatepass")


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, child in value.items():
            yield key
            yield from _strings(child)
    elif isinstance(value, list):
        for child in value:
            yield from _strings(child)


def whole_random_json(rng, data):
    return json.dumps(random_json(rng)).encode("utf-8")


JSON_STRUCTURE_MUTATIONS = JSON_MUTATIONS + [edit_bytes, splice, replace_json_value,
                                             replace_json_value, replace_json_value,
                                             rename_in_json, whole_random_json]
BINARY_MUTATIONS = [flip_bits, truncate, edit_bytes, edit_bytes, splice]
