"""Kafka wire primitives for coordinator records: big-endian integers, unsigned varints, legacy
(int16/int32-length) and compact (varint length + 1) strings and bytes, uuids and tagged fields.
Pure: bytes in, values out."""

from __future__ import annotations

import struct
import uuid

__all__ = ["Reader", "Writer", "write_compact_str", "write_uvarint"]

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


def write_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def write_compact_str(out: bytearray, s: str | None) -> None:
    """Compact nullable string: unsigned varint length + 1 (0 for null) and UTF-8 bytes."""
    if s is None:
        out.append(0)
        return
    data = s.encode()
    write_uvarint(out, len(data) + 1)
    out += data


class Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def i8(self, v: int) -> None:
        self.out += _I8.pack(v)

    def i16(self, v: int) -> None:
        self.out += _I16.pack(v)

    def i32(self, v: int) -> None:
        self.out += _I32.pack(v)

    def i64(self, v: int) -> None:
        self.out += _I64.pack(v)

    def uvarint(self, n: int) -> None:
        write_uvarint(self.out, n)

    def string(self, s: str | None) -> None:
        """Legacy nullable string: int16 length (-1 for null) and UTF-8 bytes."""
        if s is None:
            self.i16(-1)
            return
        b = s.encode()
        self.i16(len(b))
        self.out += b

    def bytes_(self, b: bytes | None) -> None:
        """Legacy nullable bytes: int32 length (-1 for null) and the bytes."""
        if b is None:
            self.i32(-1)
            return
        self.i32(len(b))
        self.out += b

    def compact_str(self, s: str | None) -> None:
        write_compact_str(self.out, s)

    def compact_len(self, n: int) -> None:
        self.uvarint(n + 1)

    def uuid(self, u: uuid.UUID) -> None:
        self.out += u.bytes

    def no_tags(self) -> None:
        self.out.append(0)

    def getvalue(self) -> bytes:
        return bytes(self.out)


class Reader:
    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0) -> None:
        # A memoryview is read in place (see `view`); other buffers are copied once.
        self.data = data if isinstance(data, (bytes, memoryview)) else bytes(data)
        self.pos = pos

    def _take(self, s: struct.Struct) -> int:
        v: int
        try:
            (v,) = s.unpack_from(self.data, self.pos)
        except struct.error:
            raise ValueError("truncated record") from None
        self.pos += s.size
        return v

    def i8(self) -> int:
        return self._take(_I8)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data):
                raise ValueError("truncated varint")
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7

    def raw(self, n: int) -> bytes:
        return bytes(self.view(n))

    def view(self, n: int) -> bytes | memoryview:
        """The next `n` bytes: a slice of the data, so a view (no copy) when reading a memoryview."""
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("truncated record")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def string(self, flexible: bool = False) -> str | None:
        """Nullable string: compact when `flexible`, else int16-length."""
        n = self.uvarint() - 1 if flexible else self.i16()
        return None if n < 0 else self.raw(n).decode()

    def bytes_(self, flexible: bool = False) -> bytes | None:
        n = self.uvarint() - 1 if flexible else self.i32()
        return None if n < 0 else self.raw(n)

    def compact_str(self) -> str | None:
        return self.string(flexible=True)

    def compact_len(self) -> int:
        return self.uvarint() - 1

    def array_len(self, flexible: bool = False) -> int:
        return self.compact_len() if flexible else self.i32()

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.raw(16))

    def tags(self) -> list[tuple[int, bytes]]:
        """The tagged fields: (tag, raw value) in wire order."""
        return [(self.uvarint(), self.raw(self.uvarint())) for _ in range(self.uvarint())]

    def skip_tags(self) -> None:
        self.tags()
