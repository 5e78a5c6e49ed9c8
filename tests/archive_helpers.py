"""Hostile .npz files for the file-safety tests: zip archives written byte by byte (so any field can
lie), .npy entries with any header text, and a deflate bomb."""
import functools
import struct
import zipfile
import zlib

import numpy as np

STORED, DEFLATED = zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED


def npy(header_text, data=b"", version=(1, 0)):
    """An .npy entry's bytes: magic, `header_text` padded as numpy pads it, then `data`."""
    text = header_text.encode("latin1")
    length_size = 2 if version == (1, 0) else 4
    prefix = 6 + 2 + length_size
    header = text + b" " * (63 - (prefix + len(text)) % 64) + b"\n"
    return (b"\x93NUMPY" + bytes(version) + len(header).to_bytes(length_size, "little") + header
            + data)


def npy_header_text(shape, descr="<f4", fortran_order=False):
    return f"{{'descr': {descr!r}, 'fortran_order': {fortran_order}, 'shape': {shape!r}, }}"


def stored(name, data):
    """A member stored as is: (name, method, crc, compressed bytes, size)."""
    return (name, STORED, zlib.crc32(data), data, len(data))


def members(path):
    """The members of a good archive, each stored."""
    with zipfile.ZipFile(path) as archive:
        return [stored(info.filename, archive.read(info)) for info in archive.infolist()]


def build_zip(entries, flags=0):
    """A zip archive of `entries` ((name, method, crc, compressed bytes, size) tuples), every
    field exactly as given."""
    out, central = bytearray(), bytearray()
    for name, method, crc, data, size in entries:
        raw = name.encode("utf-8")
        offset = len(out)
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, flags, method, 0, 0, crc, len(data),
                           size, len(raw), 0) + raw + data
        central += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, flags, method, 0, 0, crc,
                               len(data), size, len(raw), 0, 0, 0, 0, 0, offset) + raw
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(central),
                      len(out), 0)
    return bytes(out + central + end)


@functools.cache
def bomb(megabytes=255, descr="<f4"):
    """(crc, deflated bytes, size) of an .npy entry of `megabytes` MiB of zeros: about 255 KiB
    for 255 MiB, deflate's best ratio."""
    itemsize = np.dtype(descr).itemsize
    head = npy(npy_header_text(((megabytes << 20) // itemsize,), descr))
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    zeros = bytes(1 << 20)
    parts, crc = [compressor.compress(head)], zlib.crc32(head)
    for _ in range(megabytes):
        parts.append(compressor.compress(zeros))
        crc = zlib.crc32(zeros, crc)
    parts.append(compressor.flush())
    return crc, b"".join(parts), len(head) + (megabytes << 20)


def with_bomb(path, name, descr="<f4"):
    """The archive at `path` with member `name` replaced by a 255 MiB bomb."""
    crc, data, size = bomb(descr=descr)
    return build_zip([(name, DEFLATED, crc, data, size) if entry[0] == name else entry
                      for entry in members(path)])
