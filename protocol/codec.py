"""Kafka request decoding and response encoding on top of kio. Sans-I/O: bytes in, bytes out.

Responses are built from plain dicts with `build(cls, data)`, which fills each version's fields
from one shape: keys a version lacks are dropped, fields a version has but the dict lacks get the
field's default (or the type's zero value). One builder per API then serves every version. A key
that no version of the response has at that place is a misspelling, and build() raises rather than
let the field go out as a zero.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import functools
import io
import struct
import sys
import types
import typing
import uuid
from collections.abc import Container, Mapping
from pkgutil import resolve_name
from typing import Any, NoReturn

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import schema_name_map
from kio.static.constants import EntityType
from kio.serial import entity_reader, entity_writer

from sharebroker.protocol.bounds import MalformedLengths, check_body, check_header
from sharebroker.protocol.api_table import api_name, is_supported
from sharebroker.protocol.errors import KafkaError
from sharebroker.protocol.produce_request import decode_produce_body

_HEADER_PREFIX = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
PRODUCE = 0


class FrameError(Exception):
    """The frame cannot be decoded; the connection is closed after logging."""

    def __init__(self, reason: str, *, api_key: int | None = None, api_version: int | None = None,
                 correlation_id: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class UnsupportedVersion(FrameError):
    """The API key is known but this version is not served."""


class UnknownApiKey(FrameError):
    """The API key is not served at all."""


@dataclasses.dataclass(slots=True)
class DecodedRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the fixed prefix of every request header."""
    if len(frame) < _HEADER_PREFIX.size:
        raise FrameError(f"frame of {len(frame)} bytes is shorter than a request header")
    return _HEADER_PREFIX.unpack_from(frame, 0)


def decode_request(frame: bytes | memoryview) -> DecodedRequest:
    """Decode one request frame (the bytes after the size prefix). When `frame` is a writable
    view, a Produce request's records are views into it (see protocol.produce_request); all else
    is decoded by kio."""
    api_key, api_version, correlation_id = peek_header(frame)
    ids = {"api_key": api_key, "api_version": api_version, "correlation_id": correlation_id}
    support = is_supported(api_key, api_version)
    if support == "unknown-key":
        raise UnknownApiKey(f"unknown API key {api_key}", **ids)
    if support == "unsupported-version":
        raise UnsupportedVersion(f"API key {api_key} version {api_version} is not supported", **ids)
    # Both schemas are modules imported on first use: an import refused for want of a file
    # descriptor (EMFILE) is not a malformed request, so OSError reaches the caller, which retries.
    req_cls: Any = request_class(api_key, api_version)  # a kio class: its schema is a class attribute
    response_class(api_key, api_version)
    try:
        writable = isinstance(frame, memoryview) and not frame.readonly
        # kio reads read-only buffers only
        readable = frame.toreadonly() if isinstance(frame, memoryview) and not frame.readonly else frame
        # Every declared length must fit in the frame before kio's reader trusts it.
        check_body(req_cls, readable, check_header(req_cls.__header_schema__, readable))
        header, used = entity_reader(req_cls.__header_schema__)(readable, 0)
        # Trailing bytes after the body are tolerated (librdkafka's Metadata quirk).
        if api_key == PRODUCE and writable:
            # A large frame, received into a writable buffer of its own: take its records as
            # views rather than copies. Small frames are faster through kio's native reader.
            body = decode_produce_body(frame, used, api_version)
        else:
            body, _ = entity_reader(req_cls)(readable, used)
    except MalformedLengths as exc:
        raise FrameError(f"malformed request: {exc}", **ids) from None
    except KeyError as exc:  # kio: "Unknown tagged field tag: N"
        raise FrameError(f"undecodable request: {exc}", **ids) from None
    except (ValueError, IndexError, TypeError, OverflowError, UnicodeDecodeError, RuntimeError) as exc:
        raise FrameError(f"malformed request body: {exc}", **ids) from None
    except Exception as exc:  # kio's native reader raises its own types on short buffers
        raise FrameError(f"malformed request body: {type(exc).__name__}: {exc}", **ids) from None
    return DecodedRequest(api_key, api_version, correlation_id, header.client_id, body)


# kio resolves a schema by module path on every call; these run once per request, so cache them.
@functools.cache
def request_class(api_key: int, api_version: int) -> type:
    return load_request_schema(api_key, api_version)


@functools.cache
def response_class(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


def encode_response(correlation_id: int, response: Any) -> bytes:
    """Size-prefixed response frame with the header version the response class declares."""
    header_cls = type(response).__header_schema__
    return encode_frame(header_cls(correlation_id=correlation_id), response)


def encode_frame(header: Any, body: Any) -> bytes:
    """A size-prefixed frame of two kio entities, a request or response header and its body."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    entity_writer(type(header))(out, header)
    entity_writer(type(body))(out, body)
    buf = out.getbuffer()
    _SIZE.pack_into(buf, 0, len(buf) - 4)
    del buf
    return out.getvalue()


# ---------------------------------------------------------------------------------------------
# Building kio entities from plain dicts


@dataclasses.dataclass(slots=True)
class _FieldPlan:
    name: str
    kind: str  # plain | entity | entities | timedelta | datetime | error | uuid
    nested: Any  # the kio entity class of an entity field, else None


@dataclasses.dataclass(slots=True)
class _Plan:
    fields: dict[str, _FieldPlan]  # by name
    zeros: dict[str, Any]  # the value of each field without a default that a dict leaves out
    allowed: Container[str] | None = None  # the keys of other versions too; set at the first such key


_plans: dict[type, _Plan] = {}
_MISSING = dataclasses.MISSING


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return (args[0] if len(args) == 1 else tp), True
    return tp, False


def _plan(cls: type) -> _Plan:
    plan = _plans.get(cls)
    if plan is not None:
        return plan
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    fields: dict[str, _FieldPlan] = {}
    zeros: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        tp, nullable = _strip_optional(hints[f.name])
        kafka_type = f.metadata.get("kafka_type")
        nested: Any = None  # the kio entity class of a nested field
        kind = "plain"
        zero: Any = None
        if typing.get_origin(tp) is tuple:
            inner = typing.get_args(tp)[0]
            if dataclasses.is_dataclass(inner):
                kind, nested = "entities", inner
            zero = None if nullable else ()
        elif dataclasses.is_dataclass(tp):
            kind, nested = "entity", tp
        elif kafka_type in ("timedelta_i32", "timedelta_i64"):
            kind, zero = "timedelta", datetime.timedelta(0)
        elif kafka_type == "datetime_i64":
            kind = "datetime"
        elif kafka_type == "error_code":
            kind, zero = "error", ErrorCode.none
        elif kafka_type == "uuid":
            kind = "uuid"
        elif kafka_type == "bool":
            zero = False
        elif kafka_type in ("string",):
            zero = None if nullable else ""
        elif kafka_type in ("bytes", "records"):
            zero = None if nullable else b""
        elif kafka_type is not None:
            zero = 0
        fields[f.name] = _FieldPlan(f.name, kind, nested)
        if f.default is _MISSING and f.default_factory is _MISSING:
            # kio entities are frozen: one zero entity serves every build
            zeros[f.name] = build(nested, {}) if kind == "entity" else zero
    plan = _plans[cls] = _Plan(fields, zeros)
    return plan


def _ms(value: Any) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=int(value))


def build(cls: type, data: Mapping[str, Any] | Any) -> Any:
    """Make a kio entity of `cls` from a dict; nested dicts and lists are converted recursively.
    Raises KafkaError naming the key for a key that is no field of `cls` in any version."""
    if dataclasses.is_dataclass(data) and not isinstance(data, Mapping):
        return data
    plan = _plans.get(cls) or _plan(cls)
    fields = plan.fields
    kwargs = plan.zeros.copy()
    for name, value in data.items():
        p = fields.get(name)
        if p is None:  # dropped if a field of another version, else a misspelling
            allowed = plan.allowed
            if allowed is None:
                allowed = plan.allowed = _allowed_keys(cls)
            if name not in allowed:
                _misspelt(cls, data, allowed)
        elif value is None:
            kwargs[name] = None
        else:
            kind = p.kind
            if kind == "plain":
                kwargs[name] = value
            elif kind == "entities":
                nested = p.nested
                kwargs[name] = tuple(build(nested, v) for v in value)
            elif kind == "entity":
                kwargs[name] = build(p.nested, value)
            elif kind == "error":
                kwargs[name] = value if isinstance(value, ErrorCode) else ErrorCode(int(value))
            elif kind == "timedelta":
                kwargs[name] = _ms(value)
            elif kind == "datetime":
                if isinstance(value, datetime.datetime):
                    kwargs[name] = value
                else:
                    kwargs[name] = datetime.datetime.fromtimestamp(int(value) / 1000, datetime.timezone.utc)
            elif kind == "uuid":
                kwargs[name] = value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    return cls(**kwargs)


def _misspelt(cls: type, data: Mapping[str, Any], allowed: Container[str]) -> NoReturn:
    unknown = sorted(k for k in data if k not in allowed)
    known = sorted(k for k in _plan(cls).fields)
    hints = [f"{k!r} (did you mean {', '.join(map(repr, close))}?)" if (close := difflib.get_close_matches(k, known))
             else repr(k) for k in unknown]
    what = "is no field" if len(hints) == 1 else "are no fields"
    raise KafkaError(ErrorCode.unknown_server_error,
                     f"build(): {', '.join(hints)} {what} of {cls.__name__} in any version of the "
                     f"{api_name(getattr(cls, '__api_key__', -1))} response")


class _EveryKey:
    def __contains__(self, key: object) -> bool:
        return True


def _allowed_keys(cls: type) -> Container[str]:
    """The keys build() accepts for `cls`: the field names of the entities found at the same place
    (the same chain of field names from the top) in any version of the API's response. Every key
    for what is not part of a response: requests, which the tools and tests build from one body
    shared by many APIs, are not checked."""
    parts = cls.__module__.split(".")  # kio.schema.<api>.v<N>.response
    if len(parts) != 5 or parts[:2] != ["kio", "schema"] or parts[4] != "response":
        return _EveryKey()
    fields_at, paths_of = _response_shapes(parts[2])
    paths = paths_of.get(cls)
    if not paths:
        return frozenset(_plan(cls).fields)
    return frozenset().union(*(fields_at[path] for path in paths))


_Path = tuple[str, ...]


@functools.cache
def _response_shapes(api: str) -> tuple[dict[_Path, frozenset[str]], dict[type, set[_Path]]]:
    """Every version of one API's response walked once: the field names found at each path, and
    the paths where each entity class sits."""
    fields_at: dict[_Path, set[str]] = {}
    paths_of: dict[type, set[_Path]] = {}

    def walk(entity: type, path: _Path) -> None:
        fields = _plan(entity).fields
        fields_at.setdefault(path, set()).update(fields)
        paths_of.setdefault(entity, set()).add(path)
        for p in fields.values():
            if p.nested is not None:
                walk(p.nested, path + (p.name,))

    for schemas in schema_name_map[api].values():
        if EntityType.response in schemas:
            walk(resolve_name(schemas[EntityType.response]), ())
    return {path: frozenset(names) for path, names in fields_at.items()}, paths_of


def has_field(cls: type, name: str) -> bool:
    return name in _plan(cls).fields
