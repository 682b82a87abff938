"""The client side of the Kafka wire protocol, sans-I/O: requests out as size-prefixed frames, a
byte stream in as responses, each matched to its request by correlation id. No sockets, no clock:
the caller moves the bytes (the command-line tools' blocking client, the tests' raw client).

Header versions follow the request's API version, as kio's schemas record them: request header v2
for flexible versions and v1 before; response header v1 for flexible versions and v0 before, except
ApiVersions, whose response header is always v0 (a client reads its correlation id and error before
it knows which versions the broker speaks)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import cast

from kio.serial import entity_reader
from kio.static.primitive import i32
from kio.static.protocol import RequestPayload, ResponsePayload

from sharebroker.protocol.api_table import api_name
from sharebroker.protocol.codec import encode_frame, response_class
from sharebroker.protocol.primitives import Reader

__all__ = ["ClientCodec", "DescribeTransactionsAnswer", "ResponseFrameError", "ResponseStream", "decode_response",
           "encode_request"]

_SIZE = struct.Struct(">i")
_CORRELATION_ID = struct.Struct(">i")  # the first field of every response header
_MAX_CORRELATION_ID = 2**31 - 1
API_VERSIONS = 18
DESCRIBE_TRANSACTIONS = 65


class ResponseFrameError(Exception):
    """A response that cannot be taken: a negative frame size, a correlation id no request waits
    for, or a body that does not decode. The connection is out of step; the caller closes it."""


def encode_request(request: RequestPayload, correlation_id: int, client_id: str | None) -> bytes:
    """One size-prefixed request frame: the header the request's version calls for, then the body."""
    cls = type(request)
    header_cls = cls.__header_schema__
    return encode_frame(header_cls(request_api_key=cls.__api_key__, request_api_version=cls.__version__,
                                   correlation_id=i32(correlation_id), client_id=client_id), request)


def _response_class(api_key: int, api_version: int) -> type[ResponsePayload]:
    return cast("type[ResponsePayload]", response_class(api_key, api_version))


@dataclass(frozen=True, slots=True)
class DescribedTopic:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    error_code: int
    transactional_id: str
    transaction_state: str
    transaction_timeout_ms: int
    transaction_start_time_ms: int  # -1: no transaction started
    producer_id: int
    producer_epoch: int
    topics: tuple[DescribedTopic, ...]


@dataclass(frozen=True, slots=True)
class DescribeTransactionsAnswer:
    """DescribeTransactions v0, read here rather than by kio: kio reads TransactionStartTimeMs as
    a datetime and refuses the -1 Kafka answers for an id with no transaction started (Empty)."""

    throttle_time_ms: int
    transaction_states: tuple[DescribedTransaction, ...]


def _describe_transactions(frame: bytes) -> tuple[int, DescribeTransactionsAnswer]:
    r = Reader(frame)
    correlation_id = r.i32()
    r.skip_tags()  # response header v1
    throttle = r.i32()
    states = []
    for _ in range(r.compact_len()):
        error_code, txn_id, state = r.i16(), r.compact_str() or "", r.compact_str() or ""
        timeout, start, pid, epoch = r.i32(), r.i64(), r.i64(), r.i16()
        topics = []
        for _ in range(r.compact_len()):
            topic = r.compact_str() or ""
            topics.append(DescribedTopic(topic, tuple(r.i32() for _ in range(r.compact_len()))))
            r.skip_tags()
        r.skip_tags()
        states.append(DescribedTransaction(error_code, txn_id, state, timeout, start, pid, epoch, tuple(topics)))
    r.skip_tags()
    return correlation_id, DescribeTransactionsAnswer(throttle, tuple(states))


def decode_response(frame: bytes, api_key: int,
                    api_version: int) -> tuple[int, ResponsePayload | DescribeTransactionsAnswer]:
    """(correlation id, response) from one frame without its size prefix, for a request of
    `api_key` at `api_version`: a kio entity, or for DescribeTransactions a
    DescribeTransactionsAnswer. Bytes after the body are ignored."""
    what = f"{api_name(api_key)} v{api_version} response"
    if api_key == DESCRIBE_TRANSACTIONS:
        try:
            return _describe_transactions(frame)
        except (IndexError, ValueError, struct.error, UnicodeDecodeError) as exc:
            raise ResponseFrameError(f"{what}: undecodable: {type(exc).__name__}: {exc}") from None
    cls = _response_class(api_key, api_version)
    try:
        header, used = entity_reader(cls.__header_schema__)(frame, 0)
    except Exception as exc:  # kio's native reader raises its own types on short buffers
        raise ResponseFrameError(f"{what}: undecodable header: {type(exc).__name__}: {exc}") from None
    try:
        body, _ = entity_reader(cls)(frame, used)
    except Exception as exc:
        if api_key != API_VERSIONS or api_version == 0:
            raise ResponseFrameError(f"{what}: undecodable body: {type(exc).__name__}: {exc}") from None
        # A broker that does not know this ApiVersions version answers UNSUPPORTED_VERSION in
        # the v0 shape, so that any client can read it (Kafka's clients fall back the same way).
        try:
            body, _ = entity_reader(_response_class(API_VERSIONS, 0))(frame, used)
        except Exception as exc0:
            raise ResponseFrameError(f"{what}: undecodable body, also as v0: {type(exc0).__name__}: {exc0}") from None
    return int(header.correlation_id), body


class ResponseStream:
    """Splits the bytes a connection receives into size-prefixed frames, however they are cut."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as a frame (part of the next one)."""
        return len(self._buffer)

    def next_frame(self) -> bytes | None:
        """The next complete frame without its size prefix, or None until more bytes arrive."""
        buffer = self._buffer
        if len(buffer) < _SIZE.size:
            return None
        (size,) = _SIZE.unpack_from(buffer, 0)
        if size < 0:
            raise ResponseFrameError(f"response frame of negative size {size}")
        end = _SIZE.size + size
        if len(buffer) < end:
            return None
        frame = bytes(buffer[_SIZE.size:end])
        del buffer[:end]
        return frame


class ClientCodec:
    """One connection's requests and responses: assigns correlation ids, remembers which request
    each awaited response answers, and turns received bytes into decoded responses. Requests may
    be pipelined; each response is matched to its request by correlation id."""

    def __init__(self, client_id: str | None, *, first_correlation_id: int = 1) -> None:
        self.client_id = client_id
        self._next_correlation_id = first_correlation_id
        self._pending: dict[int, tuple[int, int]] = {}  # correlation id: (api key, api version)
        self._stream = ResponseStream()

    def encode(self, request: RequestPayload, *, expect_response: bool = True) -> tuple[int, bytes]:
        """(correlation id, frame to send). `expect_response=False` for a request the broker does
        not answer (Produce with acks=0): no response is awaited for it."""
        correlation_id = self._next_correlation_id
        # Wrap before the int32 runs out, as Kafka's clients do.
        self._next_correlation_id = correlation_id + 1 if correlation_id < _MAX_CORRELATION_ID else 0
        frame = encode_request(request, correlation_id, self.client_id)
        if expect_response:
            self._pending[correlation_id] = (int(request.__api_key__), int(request.__version__))
        return correlation_id, frame

    def receive(self, data: bytes) -> None:
        """Bytes read from the connection, cut anywhere."""
        self._stream.feed(data)

    def next_response(self) -> tuple[int, ResponsePayload | DescribeTransactionsAnswer] | None:
        """(correlation id, response) of the next complete response frame, or None until more bytes
        arrive. A response that answers no pending request is a ResponseFrameError."""
        frame = self._stream.next_frame()
        if frame is None:
            return None
        if len(frame) < _CORRELATION_ID.size:
            raise ResponseFrameError(f"response frame of {len(frame)} bytes is shorter than a response header")
        (correlation_id,) = _CORRELATION_ID.unpack_from(frame, 0)
        request = self._pending.pop(correlation_id, None)
        if request is None:
            raise ResponseFrameError(f"response with correlation id {correlation_id} answers no pending request"
                                     f" (pending: {sorted(self._pending) or 'none'})")
        return decode_response(frame, *request)

    @property
    def in_flight(self) -> int:
        """Requests sent whose responses have not arrived."""
        return len(self._pending)
