"""A strict, bounds-checked flatbuffer reader over bytes, with struct and numpy only."""
# Every offset, vtable, vector and string is checked against the buffer before it is used, and
# anything wrong is a ValueError naming the file and the entry. It follows only forward offsets
# and never recurses, so no file can make it loop; a budget on the bytes it hands out stops
# files whose tables share one big vector many times from costing more than a small multiple
# of their size.
import struct

import numpy as np

_U8 = struct.Struct("<B")
_I8 = struct.Struct("<b")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_F32 = struct.Struct("<f")
_SCALARS = {"u8": _U8, "i8": _I8, "bool": _U8, "u16": _U16, "i32": _I32, "u32": _U32,
            "i64": _I64, "u64": _U64, "f32": _F32}


class FlatbufferReader:
    """The buffer, its name for messages, and what is left of the read budget."""

    def __init__(self, data, source, budget_factor=4, budget_floor=1 << 16):
        self.data = data
        self.size = len(data)
        self.source = source
        self.budget = budget_factor * self.size + budget_floor

    def fail(self, where, what=None):
        raise ValueError(f"{self.source}: {where}: {what}" if what else f"{self.source}: {where}")

    def spend(self, nbytes, where):
        """Charges nbytes against the budget (vectors, strings and copies of them)."""
        self.budget -= nbytes
        if self.budget < 0:
            self.fail(where, f"the file refers to far more data than its {self.size} bytes hold "
                             f"(tables sharing vectors?)")

    def need(self, pos, nbytes, where):
        if pos < 0 or nbytes < 0 or pos + nbytes > self.size:
            self.fail(where, f"{nbytes} bytes at offset {pos} run past the end of the "
                             f"{self.size}-byte file")

    def scalar(self, kind, pos, where):
        s = _SCALARS[kind]
        if pos < 0 or pos + s.size > self.size:     # unpack_from would count pos < 0 from the end
            self.need(pos, s.size, where)
        return s.unpack_from(self.data, pos)[0]

    def deref(self, pos, where):
        """The position a uoffset at pos points to (uoffsets are unsigned: forward only)."""
        target = pos + self.scalar("u32", pos, where)
        if target >= self.size:
            self.fail(where, f"offset at {pos} points to {target}, past the end of the "
                             f"{self.size}-byte file")
        return target

    def root(self, identifier, where="root"):
        if self.size < 8:
            self.fail(where, f"{self.size} bytes is too short for a flatbuffer")
        found = bytes(self.data[4:8])
        if identifier is not None and found != identifier:
            self.fail(where, f"file identifier is {found!r}, not {identifier!r}")
        return self.table(self.deref(0, where), where)

    def table(self, pos, where):
        return Table(self, pos, where)


class Table:
    """A table at pos, its vtable checked: fields are looked up by slot (field id)."""
    __slots__ = ("r", "pos", "vt", "vt_len", "obj_len", "where")

    def __init__(self, reader, pos, where):
        r = reader
        self.r, self.pos, self.where = r, pos, where
        vt = pos - r.scalar("i32", pos, where)
        if vt < 0 or vt + 4 > r.size:
            r.fail(where, f"the vtable of the table at {pos} would be at {vt}, outside the file")
        vt_len = r.scalar("u16", vt, where)
        obj_len = r.scalar("u16", vt + 2, where)
        if vt_len < 4 or vt_len % 2:
            r.fail(where, f"the vtable at {vt} has a length of {vt_len} bytes")
        r.need(vt, vt_len, where + " (vtable)")
        if obj_len < 4:
            r.fail(where, f"the table at {pos} claims {obj_len} bytes, less than its own header")
        r.need(pos, obj_len, where)
        self.vt, self.vt_len, self.obj_len = vt, vt_len, obj_len

    def field(self, slot, nbytes, name):
        """The position of field `slot` (nbytes wide), or None when it is absent."""
        entry = 4 + 2 * slot
        if entry + 2 > self.vt_len:
            return None
        off = self.r.scalar("u16", self.vt + entry, self.where)
        if off == 0:
            return None
        if off < 4 or off + nbytes > self.obj_len:
            self.r.fail(f"{self.where}, {name}",
                        f"field at {off} does not fit in its {self.obj_len}-byte table")
        return self.pos + off

    def scalar(self, slot, kind, default, name):
        pos = self.field(slot, _SCALARS[kind].size, name)
        if pos is None:
            return default
        value = self.r.scalar(kind, pos, f"{self.where}, {name}")
        return bool(value) if kind == "bool" else value

    def table(self, slot, name):
        """The sub-table in field `slot`, or None."""
        pos = self.field(slot, 4, name)
        if pos is None:
            return None
        where = f"{self.where}, {name}"
        return Table(self.r, self.r.deref(pos, where), where)

    def _vector(self, slot, elem_size, name):
        """(where, element count, position of the first element) of a vector field, or None."""
        pos = self.field(slot, 4, name)
        if pos is None:
            return None
        where = f"{self.where}, {name}"
        vec = self.r.deref(pos, where)
        count = self.r.scalar("u32", vec, where)
        if vec + 4 + count * elem_size > self.r.size:
            self.r.fail(where, f"{count} elements of {elem_size} bytes at offset {vec + 4} run "
                               f"past the end of the {self.r.size}-byte file")
        self.r.spend(count * elem_size, where)
        return where, count, vec + 4

    def array(self, slot, dtype, name):
        """A vector of scalars as a new numpy array of dtype (little-endian in the file), or
        None when absent."""
        dtype = np.dtype(dtype)
        found = self._vector(slot, dtype.itemsize, name)
        if found is None:
            return None
        _, count, start = found
        return np.frombuffer(self.r.data, dtype.newbyteorder("<"), count, start).astype(dtype)

    def byte_view(self, slot, name):
        """A vector of ubyte as a read-only memoryview into the buffer, or None."""
        found = self._vector(slot, 1, name)
        if found is None:
            return None
        _, count, start = found
        return memoryview(self.r.data)[start:start + count]

    def string(self, slot, name):
        """A string field (UTF-8, zero-terminated in the file), or None."""
        found = self._vector(slot, 1, name)
        if found is None:
            return None
        where, count, start = found
        self.r.need(start + count, 1, where + " (terminator)")
        if self.r.data[start + count] != 0:
            self.r.fail(where, "string is not zero-terminated")
        try:
            return bytes(self.r.data[start:start + count]).decode("utf-8")
        except UnicodeDecodeError as e:
            self.r.fail(where, f"string is not UTF-8 ({e.reason} at byte {e.start})")

    def tables(self, slot, name, item=None):
        """A vector of tables, each checked, [] when absent; table i is called f"{item} {i}" in
        messages (or name[i])."""
        found = self._vector(slot, 4, name)
        if found is None:
            return []
        where, count, start = found
        out = []
        for i in range(count):
            label = f"{item} {i}" if item else f"{where}[{i}]"
            out.append(Table(self.r, self.r.deref(start + 4 * i, label), label))
        return out
