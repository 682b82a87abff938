"""Length checks a request must pass before kio's native reader sees it.

kio's reader trusts the lengths a frame declares: an array that claims four billion elements makes
it reserve 32 GiB, and the process aborts. Here each request schema (from kio's own dataclasses)
is compiled once into a small walk that reads only the lengths: every array, string and bytes
length must fit in the bytes that remain, and a null is allowed only where the schema says the
field is nullable (Kafka refuses the request otherwise). A frame that fails is malformed: its
connection is closed with one log line, as Kafka closes a connection whose request it cannot
parse. The walk skips fixed-size fields by their width, so its cost follows the number of
length-prefixed fields, not the frame's size."""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Callable
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

__all__ = ["MalformedLengths", "check_body", "check_header"]


class MalformedLengths(ValueError):
    """A declared length or null the frame cannot hold."""


_FIXED = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
          "float64": 8, "uuid": 16, "timedelta_i32": 4, "timedelta_i64": 8, "datetime_i64": 8}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Step = Callable[[Any, int, int], int]  # (buffer, position, end) -> new position


def _uvarint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= end:
            raise MalformedLengths("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise MalformedLengths("varint too long")


def _need(pos: int, n: int, end: int, what: str) -> int:
    if n < 0 or pos + n > end:
        raise MalformedLengths(f"{what} of {n} bytes exceeds the {end - pos} bytes left")
    return pos + n


def _length(buf: Any, pos: int, end: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A length prefix: compact (uvarint N+1, 0 = null) when flexible, else int16/int32; -1 = null."""
    if flexible:
        n, pos = _uvarint(buf, pos, end)
        return n - 1, pos
    s = _I32 if wide else _I16
    _need(pos, s.size, end, "length")
    return s.unpack_from(buf, pos)[0], pos + s.size


def _primitive_step(kind: str, flexible: bool, nullable: bool, name: str) -> Step:
    if kind in _FIXED:
        width = _FIXED[kind]
        return lambda buf, pos, end: _need(pos, width, end, name)
    if kind in ("varint", "varlong", "uvarint"):
        return lambda buf, pos, end: _uvarint(buf, pos, end)[1]
    if kind in ("string", "bytes", "records"):
        wide = kind != "string"

        def step(buf: Any, pos: int, end: int) -> int:
            n, pos = _length(buf, pos, end, flexible, wide)
            if n < 0:
                if n != -1 or not nullable:
                    raise MalformedLengths(f"{name} is null or has length {n}")
                return pos
            return _need(pos, n, end, name)
        return step
    raise MalformedLengths(f"unknown field type {kind}")  # pragma: no cover - schema bug


def _array_step(element: Step, min_size: int, flexible: bool, nullable: bool, name: str) -> Step:
    def step(buf: Any, pos: int, end: int) -> int:
        n, pos = _length(buf, pos, end, flexible, True)
        if n < 0:
            if n != -1 or not nullable:
                raise MalformedLengths(f"array {name} is null or has length {n}")
            return pos
        _need(pos, n * min_size, end, f"array {name} of {n} elements")
        for _ in range(n):
            pos = element(buf, pos, end)
        return pos
    return step


def _nullable_entity_step(walk: Step, name: str) -> Step:
    """A nullable struct: an int8 marker, -1 for null."""
    def step(buf: Any, pos: int, end: int) -> int:
        _need(pos, 1, end, name)
        marker = buf[pos]
        return pos + 1 if marker == 0xFF else walk(buf, pos + 1, end)
    return step


def _tags_step(buf: Any, pos: int, end: int) -> int:
    count, pos = _uvarint(buf, pos, end)
    _need(pos, count * 2, end, "tagged fields")
    for _ in range(count):
        _tag, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        pos = _need(pos, size, end, "tagged field")
    return pos


@functools.cache
def _entity_walk(cls: type) -> Step:
    flexible = bool(getattr(cls, "__flexible__", False))
    steps: list[Step] = []
    for f in dataclasses.fields(cls):
        if get_field_tag(f) is not None:
            continue  # tagged fields are sized; skipped below
        nullable = is_optional(f)
        fc = classify_field(f)
        if isinstance(fc, EntityTupleField):
            steps.append(_array_step(_entity_walk(fc.type_), 1, flexible, nullable, f.name))
        elif isinstance(fc, EntityField):
            steps.append(_nullable_entity_step(_entity_walk(fc.type_), f.name) if nullable
                         else _entity_walk(fc.type_))
        elif isinstance(fc, PrimitiveTupleField):
            kind = get_schema_field_type(f)
            element = _primitive_step(kind, flexible, False, f.name)
            steps.append(_array_step(element, _FIXED.get(kind, 1), flexible, nullable, f.name))
        else:
            steps.append(_primitive_step(get_schema_field_type(f), flexible, nullable, f.name))
    if flexible:
        steps.append(_tags_step)

    def walk(buf: Any, pos: int, end: int) -> int:
        for step in steps:
            pos = step(buf, pos, end)
        return pos
    return walk


def check_body(cls: type, buf: Any, pos: int) -> None:
    """Raise MalformedLengths unless every length of `cls`'s encoding at `pos` fits in `buf`.

    The schema's walk compiled into straight-line Python runs first; only a frame it refuses
    (or a bug in it) goes through the step-by-step walk, which raises the precise error, so the
    verdict is always the step-by-step walk's."""
    end = len(buf)
    try:
        _compiled_walk(cls)(buf, pos, end)
        return
    except Exception:  # noqa: BLE001 - any failure: let the precise walk judge the frame
        pass
    _entity_walk(cls)(buf, pos, end)


class _Refused(Exception):
    """The compiled walk's cheap refusal; the step-by-step walk then says why."""


def _uvarint_long(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """A varint of more than one byte (the compiled walk inlines the one-byte case)."""
    return _uvarint(buf, pos, end)


def _tags_long(buf: Any, pos: int, end: int) -> int:
    return _tags_step(buf, pos, end)


class _Source:
    """Python source of one compiled walk: a function per entity class."""

    def __init__(self) -> None:
        self.functions: dict[type, str] = {}  # class -> function name
        self.lines: list[str] = []
        self.counter = 0

    def var(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def length(self, out: list[str], indent: str, target: str, flexible: bool, wide: bool) -> None:
        """Code reading a length prefix into `target` (-1 for null), advancing pos."""
        if flexible:
            out.append(f"{indent}{target} = buf[pos]")
            out.append(f"{indent}if {target} < 128:")
            out.append(f"{indent}    pos += 1")
            out.append(f"{indent}else:")
            out.append(f"{indent}    {target}, pos = _uvarint_long(buf, pos, end)")
            out.append(f"{indent}{target} -= 1")
        else:
            unpack = "_I32" if wide else "_I16"
            out.append(f"{indent}{target} = {unpack}.unpack_from(buf, pos)[0]")
            out.append(f"{indent}pos += {4 if wide else 2}")

    def tags(self, out: list[str], indent: str) -> None:
        out.append(f"{indent}if buf[pos] == 0:")
        out.append(f"{indent}    pos += 1")
        out.append(f"{indent}else:")
        out.append(f"{indent}    pos = _tags_long(buf, pos, end)")

    def primitive(self, out: list[str], indent: str, kind: str, flexible: bool, nullable: bool) -> None:
        if kind in _FIXED:
            out.append(f"{indent}pos += {_FIXED[kind]}")
            out.append(f"{indent}if pos > end: raise _Refused")
        elif kind in ("varint", "varlong", "uvarint"):
            out.append(f"{indent}if buf[pos] < 128:")
            out.append(f"{indent}    pos += 1")
            out.append(f"{indent}else:")
            out.append(f"{indent}    pos = _uvarint_long(buf, pos, end)[1]")
        elif kind in ("string", "bytes", "records"):
            n = self.var("n")
            self.length(out, indent, n, flexible, kind != "string")
            out.append(f"{indent}if {n} < 0:")
            out.append(f"{indent}    if {n} != -1: raise _Refused" if nullable else f"{indent}    raise _Refused")
            out.append(f"{indent}else:")
            out.append(f"{indent}    pos += {n}")
            out.append(f"{indent}    if pos > end: raise _Refused")
        else:  # pragma: no cover - schema bug
            raise MalformedLengths(f"unknown field type {kind}")

    def entity(self, cls: type) -> str:
        name = self.functions.get(cls)
        if name is not None:
            return name
        name = self.functions[cls] = self.var("_walk_")
        flexible = bool(getattr(cls, "__flexible__", False))
        body: list[str] = []
        for f in dataclasses.fields(cls):
            if get_field_tag(f) is not None:
                continue
            nullable = is_optional(f)
            fc = classify_field(f)
            if isinstance(fc, EntityTupleField):
                element = self.entity(fc.type_)
                self.array(body, flexible, nullable, 1, [f"        pos = {element}(buf, pos, end)"])
            elif isinstance(fc, EntityField):
                element = self.entity(fc.type_)
                if nullable:
                    body.append("    if buf[pos] == 255:")
                    body.append("        pos += 1")
                    body.append("    else:")
                    body.append(f"        pos = {element}(buf, pos + 1, end)")
                else:
                    body.append(f"    pos = {element}(buf, pos, end)")
            elif isinstance(fc, PrimitiveTupleField):
                kind = get_schema_field_type(f)
                if kind in _FIXED:  # the length check covers the elements
                    self.array(body, flexible, nullable, _FIXED[kind], [f"        pos += n * {_FIXED[kind]}"],
                               loop=False)
                else:
                    inner: list[str] = []
                    self.primitive(inner, "        ", kind, flexible, False)
                    self.array(body, flexible, nullable, 1, inner)
            else:
                self.primitive(body, "    ", get_schema_field_type(f), flexible, nullable)
        if flexible:
            self.tags(body, "    ")
        self.lines.append(f"def {name}(buf, pos, end):")
        self.lines.extend(body)
        self.lines.append("    return pos")
        return name

    def array(self, out: list[str], flexible: bool, nullable: bool, min_size: int, element: list[str], *,
              loop: bool = True) -> None:
        self.length(out, "    ", "n", flexible, True)
        out.append("    if n < 0:")
        out.append("        if n != -1: raise _Refused" if nullable else "        raise _Refused")
        out.append("    else:")
        out.append(f"        if pos + n * {min_size} > end: raise _Refused")
        if loop:
            out.append("        for _ in range(n):")
            out.extend("    " + line for line in element)
        else:
            out.extend(element)


@functools.cache
def _compiled_walk(cls: type) -> Step:
    """`_entity_walk(cls)` as generated straight-line code: the same checks, without a call per
    field. Refuses (any exception) where the step-by-step walk raises; `check_body` then asks it."""
    source = _Source()
    top = source.entity(cls)
    namespace: dict[str, Any] = {"_Refused": _Refused, "_I16": _I16, "_I32": _I32, "_uvarint_long": _uvarint_long,
                                 "_tags_long": _tags_long}
    exec(compile("\n".join(source.lines), f"<bounds walk of {cls.__qualname__}>", "exec"), namespace)  # noqa: S102
    walk: Step = namespace[top]
    return walk


def check_header(cls: type, buf: Any) -> int:
    """Check the request header; returns where the body starts."""
    return _header_walk(cls)(buf, 0, len(buf))


@functools.cache
def _header_walk(cls: type) -> Step:
    """The header's client id keeps its int16 length even in the flexible header v2 (Kafka's one
    exception to compact strings)."""
    client_id = _primitive_step("string", False, True, "client id") \
        if any(f.name == "client_id" for f in dataclasses.fields(cls)) else None
    flexible = bool(getattr(cls, "__flexible__", False))

    def walk(buf: Any, pos: int, end: int) -> int:
        pos = _need(pos, 8, end, "request header")  # api key, api version, correlation id
        if client_id is not None:
            pos = client_id(buf, pos, end)
        return _tags_step(buf, pos, end) if flexible else pos
    return walk
