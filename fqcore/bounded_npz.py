"""Reading .npz archives (zips of .npy arrays) from untrusted files: every size is checked before
anything is decompressed or allocated, and anything wrong is a ValueError naming the file and the
entry.

Limits (documented in the README):
- an entry may inflate to at most MAX_RATIO times its compressed size; beyond that, the entries of
  one file may together inflate by at most ALLOWANCE more bytes (so that a small, very regular
  array saved with np.savez_compressed still loads). fqcore's own files are stored uncompressed
  (ratio 1); a deflate bomb (ratio about 1000) is refused from the zip directory alone;
- the compressed sizes the directory claims must fit in the file;
- an .npy header is at most MAX_HEADER bytes (numpy's own default) and must declare exactly the
  data its entry holds: shape x itemsize = the entry's size less the header, so the array
  allocated for it is never larger than the entry;
- entries are stored or deflated, not encrypted, named `<name>.npy` with a safe name
  (fqcore.safe_names), each name once; arrays hold no Python objects (allow_pickle=False) and
  have plain dtypes (no fields or subarrays).
"""
import io
import math
import os
import struct
import tokenize
import zipfile
import zlib

import numpy as np

from .safe_names import path_problem

MAX_RATIO = 100
ALLOWANCE = 16 << 20
MAX_HEADER = 10000
_CHUNK = 1 << 20
_NPY_MAGIC = b"\x93NUMPY"
_END_RECORD, _END_RECORD_SIZE = b"PK\x05\x06", 22
_ZIP64_LOCATOR, _ZIP64_LOCATOR_SIZE = b"PK\x06\x07", 20
_ZIP64_END_RECORD, _ZIP64_END_RECORD_SIZE = b"PK\x06\x06", 56
_DIRECTORY_RECORD, _DIRECTORY_RECORD_SIZE = b"PK\x01\x02", 46
_HEADER_READERS = {(1, 0): (2, np.lib.format.read_array_header_1_0),
                   (2, 0): (4, np.lib.format.read_array_header_2_0)}
# What zipfile and zlib raise on a damaged archive or member.
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError,
               RuntimeError, ValueError, OverflowError, struct.error)
# What numpy's parser of the header text (ast.literal_eval, its Python 2 filter and
# descr_to_dtype) raises on malformed text.
_HEADER_ERRORS = (ValueError, TypeError, SyntaxError, tokenize.TokenError, RecursionError)


class NpzArchive:
    """An .npz file open for reading; use it in a `with` block. `names` lists its arrays (entry
    names without '.npy') in archive order; `header(name)` gives an array's (shape, dtype) from
    its .npy header alone; `read(name)` the array, as np.load would give it. `what` names the kind
    of file in the message for one that is not an .npz archive at all."""

    def __init__(self, path, what="file"):
        self.path = path
        self._file = open(path, "rb")
        try:
            start = self._file.read(len(_NPY_MAGIC))
            if start == _NPY_MAGIC:
                raise ValueError(f"{path}: not an .npz archive (a single .npy array?)")
            try:
                self._zip = zipfile.ZipFile(self._file)
            except _ZIP_ERRORS as error:
                raise ValueError(f"{path}: not a valid .npz {what} ({error})") from None
            file_size = os.fstat(self._file.fileno()).st_size
            problem = _directory_problem(self._file, file_size, len(self._zip.infolist()))
            if problem:
                raise ValueError(f"{path}: not a valid .npz {what}: {problem}")
            self._entries = self._check_directory(file_size)
        except BaseException:
            self._file.close()
            raise
        self.names = list(self._entries)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        self._zip.close()
        self._file.close()

    def _check_directory(self, file_size):
        """{name: ZipInfo}, every entry checked against the limits before any is read."""
        entries, compressed, excess = {}, 0, 0
        for info in self._zip.infolist():
            where = f"{self.path}: entry {info.filename!r}"
            if not info.filename.endswith(".npy"):
                raise ValueError(f"{where} is not an .npy array")
            name = info.filename[:-4]
            problem = path_problem(name)
            if problem:
                raise ValueError(f"{where} cannot name an array: {problem}")
            if name in entries:
                raise ValueError(f"{where} appears twice")
            if info.flag_bits & 0x1:
                raise ValueError(f"{where} is encrypted")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise ValueError(f"{where} uses compression method {info.compress_type}; .npz "
                                 f"entries are stored or deflated")
            compressed += info.compress_size
            if compressed > file_size or info.header_offset + info.compress_size > file_size:
                raise ValueError(f"{where} claims {info.compress_size} compressed bytes, more "
                                 f"than the file's {file_size} bytes hold")
            excess += max(0, info.file_size - MAX_RATIO * info.compress_size)
            if excess > ALLOWANCE:
                raise ValueError(f"{where} would inflate {info.compress_size} bytes to "
                                 f"{info.file_size}: out of proportion (fqcore reads entries of "
                                 f"up to {MAX_RATIO} times their compressed size, and "
                                 f"{ALLOWANCE} bytes more in all)")
            entries[name] = info
        return entries

    def header(self, name):
        """(shape, dtype) of array `name`."""
        with self._open(name) as stream:
            shape, _, dtype = self._read_header(name, stream)
        return shape, dtype

    def read(self, name):
        """Array `name`: the file's dtype (byte order included) and shape, Fortran order undone,
        allocated only once its size is known to match the entry's."""
        where = f"{self.path}: entry {name!r}"
        with self._open(name) as stream:
            shape, fortran_order, dtype = self._read_header(name, stream)
            try:
                # np.ndarray as numpy's reader: np.empty would widen a zero-width dtype (S0).
                array = np.ndarray(math.prod(shape), dtype)
            except ValueError as error:  # more elements than numpy indexes (a zero-size dtype)
                raise ValueError(f"{where}: {error}") from None
            data = array.view(np.uint8) if dtype.itemsize else np.empty(0, np.uint8)
            try:
                done = _read_into(stream, data)
                stream.read(1)  # the end of the entry: zipfile checks its CRC-32 there
            except _ZIP_ERRORS as error:
                raise ValueError(f"{where} is corrupt ({error})") from None
        if done < data.size:
            raise ValueError(f"{where} ends after {done} of its {data.size} data bytes")
        if fortran_order:
            return array.reshape(shape[::-1]).transpose()
        return array.reshape(shape)

    def _open(self, name):
        info = self._entries.get(name)
        if info is None:
            raise KeyError(f"{self.path} has no entry {name!r}")
        try:
            return self._zip.open(info)
        except _ZIP_ERRORS as error:
            raise ValueError(f"{self.path}: entry {name!r} is corrupt ({error})") from None

    def _read_header(self, name, stream):
        """(shape, fortran_order, dtype) from the .npy header at the start of `stream`, checked
        against the entry's size."""
        where = f"{self.path}: entry {name!r}"
        start = _read_exactly(stream, len(_NPY_MAGIC) + 2, where)
        version = tuple(start[-2:])
        if start[:-2] != _NPY_MAGIC:
            raise ValueError(f"{where} is not an .npy array (no .npy magic string)")
        if version not in _HEADER_READERS:
            raise ValueError(f"{where} has .npy format version {version[0]}.{version[1]} "
                             f"(fqcore reads 1.0 and 2.0)")
        length_size, read_array_header = _HEADER_READERS[version]
        length_bytes = _read_exactly(stream, length_size, where)
        length = int.from_bytes(length_bytes, "little")
        if length > MAX_HEADER:
            raise ValueError(f"{where} has an .npy header of {length} bytes (at most "
                             f"{MAX_HEADER})")
        text = _read_exactly(stream, length, where)
        try:
            shape, fortran_order, dtype = read_array_header(io.BytesIO(length_bytes + text),
                                                            max_header_size=MAX_HEADER)
        except _HEADER_ERRORS as error:
            raise ValueError(f"{where} has a malformed .npy header "
                             f"({type(error).__name__}: {error})") from None
        if dtype.hasobject:
            raise ValueError(f"{where} holds Python objects, which fqcore never loads "
                             f"(allow_pickle=False)")
        if dtype.fields is not None or dtype.subdtype is not None:
            raise ValueError(f"{where} has dtype {dtype}; fqcore reads arrays of plain dtypes")
        if any(type(d) is not int or d < 0 for d in shape):  # numpy's check lets bools and -1 in
            raise ValueError(f"{where} has shape {shape}")
        try:
            # A view of one byte with zero strides: no memory, but numpy's own limits on the
            # shape (at most 64 dimensions, each below 2**63), which a zero-size shape can break.
            np.ndarray(shape, np.uint8, buffer=b"\0", strides=(0,) * len(shape))
        except ValueError as error:
            raise ValueError(f"{where} has shape {shape}, which numpy cannot make: {error}") from None
        declared = math.prod(shape) * dtype.itemsize
        holds = self._entries[name].file_size - len(start) - length_size - length
        if declared != holds:
            raise ValueError(f"{where}: its header declares shape {shape} of {dtype} "
                             f"({declared} bytes), the entry holds {max(holds, 0)} data bytes")
        return shape, fortran_order, dtype


def _directory_problem(file, file_size, found):
    """Why the zip directory cannot be trusted to list every entry (a phrase), or None. zipfile
    finds the end record as below (the last signature in the file's tail, the zip64 record when a
    classic field is full), reads the directory record by record and never checks that the
    records it parsed are all there are: a record whose lengths are damaged hides the records
    after it, and an archive would load without them. So the records are walked again here: they
    must fill the directory exactly, and their number must be both counts the end record gives
    and the number zipfile read."""
    tail_size = min(file_size, _END_RECORD_SIZE + 0xFFFF)
    file.seek(file_size - tail_size)
    tail = file.read(tail_size)
    at = tail.rfind(_END_RECORD)
    if at < 0 or len(tail) - at < _END_RECORD_SIZE:
        return "it has no end-of-directory record"
    end = file_size - tail_size + at
    on_disk, total, size = struct.unpack_from("<HHL", tail, at + 8)
    if 0xFFFF in (on_disk, total) or size == 0xFFFFFFFF:
        file.seek(max(end - _ZIP64_LOCATOR_SIZE, 0))
        locator = file.read(_ZIP64_LOCATOR_SIZE)
        if locator[:4] != _ZIP64_LOCATOR:
            return "its zip64 end record is missing"
        end = struct.unpack_from("<Q", locator, 8)[0]
        if end + _ZIP64_END_RECORD_SIZE > file_size:
            return "its zip64 end record lies past the end of the file"
        file.seek(end)
        record = file.read(_ZIP64_END_RECORD_SIZE)
        if record[:4] != _ZIP64_END_RECORD:
            return "its zip64 end record is missing"
        on_disk, total, size = struct.unpack_from("<QQQ", record, 24)
    if size > end:
        return f"its directory of {size} bytes does not fit before its end record"
    file.seek(end - size)
    directory = file.read(size)
    count, at = 0, 0
    while at < size:
        if directory[at:at + 4] != _DIRECTORY_RECORD or at + _DIRECTORY_RECORD_SIZE > size:
            return f"its directory holds something other than entry records at byte {at}"
        name, extra, comment = struct.unpack_from("<HHH", directory, at + 28)
        at += _DIRECTORY_RECORD_SIZE + name + extra + comment
        count += 1
    if at != size or not count == on_disk == total == found:
        return (f"its directory's records ({count}), the counts its end record gives "
                f"({on_disk}, {total}) and the entries read ({found}) disagree")
    return None


def _read_exactly(stream, size, where):
    try:
        data = stream.read(size)
    except _ZIP_ERRORS as error:
        raise ValueError(f"{where} is corrupt ({error})") from None
    if len(data) != size:
        raise ValueError(f"{where} ends inside its .npy header")
    return data


def _read_into(stream, data):
    """Fills the uint8 array `data` from `stream` a chunk at a time; the number of bytes read
    (fewer than data.size when the stream ends early)."""
    done = 0
    while done < data.size:
        chunk = stream.read(min(_CHUNK, data.size - done))
        if not chunk:
            break
        data[done:done + len(chunk)] = np.frombuffer(chunk, np.uint8)
        done += len(chunk)
    return done
