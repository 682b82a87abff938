"""Raw Kafka wire access for integration tests: kio request/response frames over a plain socket,
and a small record-batch v2 encoder/decoder (exact millisecond timestamps, all codecs).

Written for the tests; it trusts nothing the broker says and checks CRCs itself."""

from __future__ import annotations

import datetime
import gzip
import socket
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import crc32c
from kio.index import load_request_schema

from sharebroker.protocol.client import ResponseStream, decode_response
from sharebroker.protocol.client import encode_request as _encode_request

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


# --------------------------------------------------------------------------------------------
# Frames: headers, sizes and correlation ids are protocol/client.py's (decode_response too)


def encode_request(req: Any, correlation_id: int, client_id: str | None = "rawkafka") -> bytes:
    """Size-prefixed request frame for a kio request entity."""
    return _encode_request(req, correlation_id, client_id)


class ConnectionClosed(Exception):
    pass


class RawClient:
    """One TCP connection speaking raw Kafka frames; blocking, with a timeout on every read."""

    def __init__(self, bootstrap: str, timeout: float = 5.0, client_id: str | None = "rawkafka") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.client_id = client_id
        self._corr = 0  # tests that pipeline their own frames take ids from here
        self._responses = ResponseStream()

    # -- identity, as the broker sees it
    @property
    def local_port(self) -> int:
        return self.sock.getsockname()[1]

    @property
    def peer_text(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"{host}:{port}"

    # -- bytes
    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self, timeout: float | None = None) -> bytes:
        """The next response frame without its size prefix."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while (frame := self._responses.next_frame()) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out reading a frame (got {self._responses.buffered} bytes of it)")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionClosed(f"connection closed after {self._responses.buffered} bytes of a frame")
            self._responses.feed(chunk)
        return frame

    def wait_closed(self, timeout: float = 5.0) -> bool:
        """True once the peer has closed (recv returns b"" or the connection is reset)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except (socket.timeout, TimeoutError):
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not data:
                return True

    # -- kio entities
    def send(self, req: Any) -> int:
        self._corr += 1
        self.send_bytes(encode_request(req, self._corr, self.client_id))
        return self._corr

    def receive(self, req_cls: type, correlation_id: int, timeout: float | None = None) -> Any:
        frame = self.recv_frame(timeout)
        corr, body = decode_response(frame, req_cls.__api_key__, req_cls.__version__)
        if corr != correlation_id:
            raise AssertionError(f"correlation id {corr} != expected {correlation_id}")
        return body

    def request(self, req: Any, timeout: float | None = None) -> Any:
        corr = self.send(req)
        return self.receive(type(req), corr, timeout)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# Request builders (plain ints are accepted by kio's writers)


def req_cls(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


def api_versions_request(version: int = 3) -> Any:
    cls = req_cls(18, version)
    kwargs: dict[str, Any] = {}
    if "client_software_name" in cls.__dataclass_fields__:
        kwargs = {"client_software_name": "rawkafka", "client_software_version": "1.0"}
    return cls(**kwargs)


def metadata_request(topics: Sequence[str] | None, version: int = 12, allow_auto: bool = False) -> Any:
    mod_cls = req_cls(3, version)
    topic_cls = _nested(mod_cls, "topics")
    tlist = None if topics is None else tuple(
        topic_cls(**_fit(topic_cls, {"topic_id": None, "name": t})) for t in topics)
    return mod_cls(**_fit(mod_cls, {"topics": tlist, "allow_auto_topic_creation": allow_auto,
                                    "include_topic_authorized_operations": False,
                                    "include_cluster_authorized_operations": False}))


def init_producer_id_request(producer_id: int = -1, producer_epoch: int = -1, version: int = 4) -> Any:
    cls = req_cls(22, version)
    return cls(**_fit(cls, {"transactional_id": None, "transaction_timeout": datetime.timedelta(seconds=60),
                            "producer_id": producer_id, "producer_epoch": producer_epoch}))


def produce_request(topic: str, partition: int, records: bytes, *, acks: int = -1, version: int = 9,
                    timeout_ms: int = 5000) -> Any:
    cls = req_cls(0, version)
    tcls = _nested(cls, "topic_data")
    pcls = _nested(tcls, "partition_data")
    part = pcls(index=partition, records=records)
    return cls(**_fit(cls, {"transactional_id": None, "acks": acks,
                            "timeout": datetime.timedelta(milliseconds=timeout_ms),
                            "topic_data": (tcls(name=topic, partition_data=(part,)),)}))


def fetch_request(topic: str, partition: int, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 1,
                  max_bytes: int = 1 << 20, version: int = 12) -> Any:
    cls = req_cls(1, version)
    tcls = _nested(cls, "topics")
    pcls = _nested(tcls, "partitions")
    p = pcls(**_fit(pcls, {"partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes,
                           "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}))
    t = tcls(**_fit(tcls, {"topic": topic, "partitions": (p,)}))
    return cls(**_fit(cls, {"max_wait": datetime.timedelta(milliseconds=max_wait_ms), "min_bytes": min_bytes,
                            "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                            "topics": (t,), "forgotten_topics_data": (), "rack_id": "", "replica_id": -1}))


def _fit(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    fields = cls.__dataclass_fields__
    return {k: v for k, v in values.items() if k in fields}


def _nested(cls: type, field_name: str) -> type:
    """The element class of a tuple-typed field, from the class's module."""
    import sys
    import typing

    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    tp = hints[field_name]
    for arg in _walk_args(tp):
        if isinstance(arg, type) and hasattr(arg, "__dataclass_fields__"):
            return arg
    raise TypeError(f"no nested entity for {cls.__name__}.{field_name}")


def _walk_args(tp: Any) -> Iterable[Any]:
    import typing

    for arg in typing.get_args(tp):
        yield arg
        yield from _walk_args(arg)


# --------------------------------------------------------------------------------------------
# Convenience calls


def produce(client: RawClient, topic: str, partition: int, records: bytes, **kwargs: Any) -> Any:
    """The partition response of a one-partition Produce."""
    resp = client.request(produce_request(topic, partition, records, **kwargs))
    (t,) = resp.responses
    (p,) = t.partition_responses
    return p


def create_topics(client: RawClient, *topics: tuple[str, int]) -> list[Any]:
    """The per-topic results of a CreateTopics v7 of (name, partitions) (a client library would
    retry or hide per-topic errors)."""
    create = req_cls(19, 7)
    topic = _nested(create, "topics")
    resp = client.request(create(topics=tuple(topic(name=name, num_partitions=n, replication_factor=1, assignments=(),
                                                    configs=()) for name, n in topics),
                                 timeout=datetime.timedelta(seconds=10), validate_only=False), timeout=30)
    return list(resp.topics)


def fetch(client: RawClient, topic: str, partition: int, offset: int, timeout: float | None = None,
          **kwargs: Any) -> Any:
    """The partition data of a one-partition Fetch."""
    resp = client.request(fetch_request(topic, partition, offset, **kwargs), timeout=timeout)
    assert int(resp.error_code) == 0, resp
    (t,) = resp.responses
    (p,) = t.partitions
    return p


def fetch_all_batches(client: RawClient, topic: str, partition: int, start: int = 0) -> list["Batch"]:
    """Every complete batch from `start` to the high watermark."""
    batches: list[Batch] = []
    offset = start
    while True:
        p = fetch(client, topic, partition, offset)
        assert int(p.error_code) == 0, p
        got = [b for b in parse_batches(p.records or b"") if b.last_offset >= offset]
        if not got:
            return batches
        batches.extend(got)
        offset = got[-1].last_offset + 1
        if offset >= p.high_watermark:
            return batches


# --------------------------------------------------------------------------------------------
# Record batch v2


@dataclass
class Rec:
    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp_ms: int | None = None


@dataclass
class DecodedRecord:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def write_varint(out: bytearray, n: int) -> None:
    z = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    z = 0
    while True:
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return (z >> 1) ^ -(z & 1), pos


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    return bytes(buf[pos:pos + n]), pos + n


def compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.compress(data)
    if codec == 2:
        import snappy

        return snappy.compress(data)
    if codec == 3:
        import lz4.frame

        return lz4.frame.compress(data)
    if codec == 4:
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(f"codec {codec}")


def decompress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.decompress(data)
    if codec == 2:
        import snappy

        if data.startswith(_XERIAL_MAGIC):
            pos, out = 16, bytearray()
            while pos < len(data):
                (n,) = struct.unpack_from(">i", data, pos)
                out += snappy.uncompress(data[pos + 4:pos + 4 + n])
                pos += 4 + n
            return bytes(out)
        return snappy.uncompress(data)
    if codec == 3:
        import lz4.frame

        return lz4.frame.decompress(data)
    if codec == 4:
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    raise ValueError(f"codec {codec}")


def encode_batch(records: Sequence[Rec], *, base_offset: int = 0, producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1, compression: int = 0, partition_leader_epoch: int = -1,
                 now_ms: int | None = None) -> bytes:
    """A record batch v2 with a correct CRC32C."""
    if not records:
        raise ValueError("need at least one record")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    stamps = [r.timestamp_ms if r.timestamp_ms is not None else now for r in records]
    base_ts = stamps[0]
    body = bytearray()
    for i, (r, ts) in enumerate(zip(records, stamps)):
        rec = bytearray()
        rec.append(0)  # record attributes
        write_varint(rec, ts - base_ts)
        write_varint(rec, i)
        _write_bytes(rec, r.key)
        _write_bytes(rec, r.value)
        write_varint(rec, len(r.headers))
        for hk, hv in r.headers:
            _write_bytes(rec, hk.encode())
            _write_bytes(rec, hv)
        write_varint(body, len(rec))
        body += rec
    payload = compress(compression, bytes(body))
    after_crc = struct.pack(">hiqqqhii", compression & 7, len(records) - 1, base_ts, max(stamps),
                            producer_id, producer_epoch, base_sequence, len(records)) + payload
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, rest
    return struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc) + after_crc


@dataclass
class Batch:
    raw: bytes
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> int:
        return self.attributes & 7

    @property
    def timestamp_type(self) -> int:
        return (self.attributes >> 3) & 1

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def crc_ok(self) -> bool:
        return crc32c.crc32c(self.raw[21:]) == self.crc

    def records(self) -> list[DecodedRecord]:
        data = decompress(self.compression, self.raw[61:])
        out: list[DecodedRecord] = []
        pos = 0
        for _ in range(self.record_count):
            length, pos = read_varint(data, pos)
            end = pos + length
            pos += 1  # attributes
            ts_delta, pos = read_varint(data, pos)
            off_delta, pos = read_varint(data, pos)
            key, pos = _read_bytes(data, pos)
            value, pos = _read_bytes(data, pos)
            nh, pos = read_varint(data, pos)
            headers = []
            for _h in range(nh):
                hk, pos = _read_bytes(data, pos)
                hv, pos = _read_bytes(data, pos)
                headers.append(((hk or b"").decode(), hv))
            assert pos == end, f"record length mismatch at offset {self.base_offset + off_delta}"
            out.append(DecodedRecord(self.base_offset + off_delta, self.base_timestamp + ts_delta, key, value, headers))
        return out


def parse_batches(data: bytes | None) -> list[Batch]:
    """Complete v2 batches in a records blob; a partial trailing batch is ignored (as clients do)."""
    data = bytes(data or b"")
    out: list[Batch] = []
    pos = 0
    while pos + 61 <= len(data):
        base_offset, batch_length = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + batch_length
        if end > len(data):
            break
        (ple, magic, crc, attrs, lod, bts, mts, pid, pepoch, bseq, count) = struct.unpack_from(
            ">ibIhiqqqhii", data, pos + 12)
        out.append(Batch(data[pos:end], base_offset, batch_length, ple, magic, crc, attrs, lod, bts, mts, pid,
                         pepoch, bseq, count))
        pos = end
    return out


def records_of(batches: Iterable[Batch]) -> list[DecodedRecord]:
    return [r for b in batches if not b.is_control for r in b.records()]
