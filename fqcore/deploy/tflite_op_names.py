"""The op names of a .tflite file, packed into and unpacked from a metadata entry of our own."""
import struct

# TFLite has no field for op names: they travel in a metadata entry of our own, which TFLite
# ignores, as each name's UTF-8 length (uint32, little-endian) and bytes, in op order.
OP_NAMES_METADATA = "fqcore_op_names"


def _pack_names(names):
    parts = []
    for name in names:
        raw = name.encode("utf-8")
        parts += [struct.pack("<I", len(raw)), raw]
    return b"".join(parts)


def _unpack_names(payload, n_ops, fail):
    where = f"metadata {OP_NAMES_METADATA!r}"
    data = bytes(payload) if payload is not None else b""
    names, pos = [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            fail(where, f"ends inside the length of name {len(names)}")
        n = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        if n > len(data) - pos:
            fail(where, f"name {len(names)} of {n} bytes runs past its {len(data)}-byte buffer")
        try:
            names.append(data[pos:pos + n].decode("utf-8"))
        except UnicodeDecodeError as e:
            fail(where, f"name {len(names)} is not UTF-8 ({e.reason})")
        pos += n
    if len(names) != n_ops:
        fail(where, f"holds {len(names)} names for {n_ops} ops")
    return names
