"""The direct Fetch and ShareFetch encoders write, joined, exactly what kio's entity_writer writes
for the same content, for every served version; and they pass the record bytes through as the
very objects they were given."""

from __future__ import annotations

import asyncio
import io
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from sharebroker.protocol.api_table import API_VERSIONS
from sharebroker.protocol.codec import build, response_class
from sharebroker.protocol.fetch_responses import (
    AcquiredRecords,
    FetchPartition,
    FetchTopic,
    NodeEndpoint,
    ShareFetchPartition,
    ShareFetchTopic,
    encode_fetch_response,
    encode_share_fetch_response,
    frame_size,
)

FETCH = range(API_VERSIONS[1][0], API_VERSIONS[1][1] + 1)
SHARE_FETCH = range(API_VERSIONS[78][0], API_VERSIONS[78][1] + 1)

i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
ms = st.integers(0, 2**31 - 1)
codes = st.sampled_from(list(ErrorCode))
text = st.text(max_size=20)
# Records: mostly small, some past a one-byte length, as bytes or as a view into a larger buffer.
_BYTES = bytes(range(256)) * 300
payload = st.one_of(st.binary(max_size=64), st.integers(0, 70_000).map(lambda n: _BYTES[:n]))
records = st.one_of(payload, payload.map(lambda b: memoryview(b"<" + b + b">")[1:-1]))
unset = st.just((-1, -1))
endpoints = st.lists(st.builds(NodeEndpoint, i32, text, i32, st.none() | text), max_size=3)

fetch_partition = st.builds(
    FetchPartition, i32, codes, i64, i64, i64,
    st.none() | st.lists(st.tuples(i64, i64), max_size=3), i32, st.none() | records,
    unset | st.tuples(i32, i64), unset | st.tuples(i32, i32), unset | st.tuples(i64, i32))
fetch_topics = st.lists(st.builds(FetchTopic, text, st.none() | st.uuids(),
                                  st.lists(fetch_partition, max_size=4) | st.lists(fetch_partition, min_size=40,
                                                                                   max_size=60)),
                        max_size=3)

share_partition = st.builds(
    ShareFetchPartition, i32, codes, st.none() | text, i16, st.none() | text, st.tuples(i32, i32), records,
    st.lists(st.builds(AcquiredRecords, i64, i64, i16), max_size=4))
share_topics = st.lists(st.builds(ShareFetchTopic, st.none() | st.uuids(),
                                  st.lists(share_partition, max_size=4) | st.lists(share_partition, min_size=40,
                                                                                   max_size=60)),
                        max_size=3)

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.data_too_large])


def kio_frame(cls: Any, correlation_id: int, entity: Any) -> bytes:
    """kio's own writers, header and body, behind the size prefix."""
    out = io.BytesIO()
    header = cls.__header_schema__
    entity_writer(header)(out, header(correlation_id=correlation_id))
    entity_writer(cls)(out, entity)
    body = out.getvalue()
    return struct.pack(">i", len(body)) + body


def as_bytes(data: Any) -> Any:
    return bytes(data) if isinstance(data, memoryview) else data


def endpoint_dicts(nodes: list[NodeEndpoint]) -> list[dict[str, Any]]:
    return [{"node_id": n.node_id, "host": n.host, "port": n.port, "rack": n.rack} for n in nodes]


def fetch_dict(topics: list[FetchTopic], throttle: int, code: ErrorCode, session_id: int,
               nodes: list[NodeEndpoint]) -> dict[str, Any]:
    return {"throttle_time": throttle, "error_code": code, "session_id": session_id,
            "node_endpoints": endpoint_dicts(nodes),
            "responses": [{"topic": t.topic, "topic_id": t.topic_id, "partitions": [
                {"partition_index": p.partition_index, "error_code": p.error_code, "high_watermark": p.high_watermark,
                 "last_stable_offset": p.last_stable_offset, "log_start_offset": p.log_start_offset,
                 "aborted_transactions": None if p.aborted_transactions is None else [
                     {"producer_id": a, "first_offset": b} for a, b in p.aborted_transactions],
                 "preferred_read_replica": p.preferred_read_replica, "records": as_bytes(p.records),
                 "diverging_epoch": {"epoch": p.diverging_epoch[0], "end_offset": p.diverging_epoch[1]},
                 "current_leader": {"leader_id": p.current_leader[0], "leader_epoch": p.current_leader[1]},
                 "snapshot_id": {"end_offset": p.snapshot_id[0], "epoch": p.snapshot_id[1]}}
                for p in t.partitions]} for t in topics]}


def share_fetch_dict(topics: list[ShareFetchTopic], throttle: int, code: ErrorCode, message: str | None,
                     lock_ms: int, nodes: list[NodeEndpoint]) -> dict[str, Any]:
    return {"throttle_time": throttle, "error_code": code, "error_message": message,
            "acquisition_lock_timeout": lock_ms, "node_endpoints": endpoint_dicts(nodes),
            "responses": [{"topic_id": t.topic_id, "partitions": [
                {"partition_index": p.partition_index, "error_code": p.error_code, "error_message": p.error_message,
                 "acknowledge_error_code": p.acknowledge_error_code,
                 "acknowledge_error_message": p.acknowledge_error_message,
                 "current_leader": {"leader_id": p.current_leader[0], "leader_epoch": p.current_leader[1]},
                 "records": as_bytes(p.records),
                 "acquired_records": [{"first_offset": r.first_offset, "last_offset": r.last_offset,
                                       "delivery_count": r.delivery_count} for r in p.acquired_records]}
                for p in t.partitions]} for t in topics]}


def check_frame(frame: list[Any], expected: bytes, given_records: list[Any]) -> None:
    joined = b"".join(frame)
    assert joined == expected
    assert frame_size(frame) == len(expected)
    # Every non-empty record payload is in the frame as the object it was given: never copied.
    passed = {id(part) for part in frame}
    for data in given_records:
        if data is not None and len(data):
            assert id(data) in passed
    assert all(isinstance(part, bytearray) or any(part is r for r in given_records) for part in frame)


@pytest.mark.parametrize("version", FETCH)
@EXAMPLES
@given(topics=fetch_topics, throttle=ms, code=codes, session_id=i32, nodes=endpoints, correlation_id=i32)
def test_fetch_matches_kio(version, topics, throttle, code, session_id, nodes, correlation_id):
    cls = response_class(1, version)
    expected = kio_frame(cls, correlation_id, build(cls, fetch_dict(topics, throttle, code, session_id, nodes)))
    frame = encode_fetch_response(correlation_id, version, topics, throttle_time_ms=throttle, error_code=code,
                                  session_id=session_id, node_endpoints=nodes)
    check_frame(frame, expected, [p.records for t in topics for p in t.partitions])


@pytest.mark.parametrize("version", SHARE_FETCH)
@EXAMPLES
@given(topics=share_topics, throttle=ms, code=codes, message=st.none() | text, lock_ms=ms, nodes=endpoints,
       correlation_id=i32)
def test_share_fetch_matches_kio(version, topics, throttle, code, message, lock_ms, nodes, correlation_id):
    cls = response_class(78, version)
    expected = kio_frame(cls, correlation_id,
                         build(cls, share_fetch_dict(topics, throttle, code, message, lock_ms, nodes)))
    frame = encode_share_fetch_response(correlation_id, version, topics, throttle_time_ms=throttle, error_code=code,
                                        error_message=message, acquisition_lock_timeout_ms=lock_ms,
                                        node_endpoints=nodes)
    check_frame(frame, expected, [p.records for t in topics for p in t.partitions])


@pytest.mark.parametrize("version", FETCH)
def test_fetch_error_only_responses_match_kio(version):
    """The handler's refusals: no topics, the top-level error (v7+)."""
    cls = response_class(1, version)
    expected = kio_frame(cls, 9, build(cls, {"throttle_time": 0, "error_code": ErrorCode.fetch_session_id_not_found,
                                             "session_id": 0, "responses": ()}))
    assert b"".join(encode_fetch_response(9, version, (), error_code=ErrorCode.fetch_session_id_not_found)) == expected


def test_records_stay_the_objects_given():
    data = b"r" * 20_000
    view = memoryview(bytearray(b"x" * 30_000))[5:25_005]
    frame = encode_fetch_response(1, 18, [FetchTopic(None, uuid.uuid4(), [
        FetchPartition(0, records=data), FetchPartition(1, records=b""), FetchPartition(2, records=view)])])
    assert [part for part in frame if not isinstance(part, bytearray)] == [data, view]
    assert frame[1] is data and frame[3] is view
    assert struct.unpack_from(">i", frame[0])[0] == frame_size(frame) - 4


def test_versions_not_served_are_refused():
    with pytest.raises(ValueError):
        encode_fetch_response(1, 3, ())
    with pytest.raises(ValueError):
        encode_share_fetch_response(1, 0, ())


class GatheringTransport:
    """Records what the frame protocol hands over, write by write."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return False

    def write(self, data: Any) -> None:
        self.calls.append(("write", data))

    def writelines(self, parts: list[Any]) -> None:
        self.calls.append(("writelines", list(parts)))


async def test_the_frame_reaches_the_transport_as_its_buffers():
    from sharebroker.broker.frames import FrameProtocol

    proto = FrameProtocol(1 << 20, lambda _: None)
    transport = GatheringTransport()
    proto.connection_made(transport)  # type: ignore[arg-type]
    data = b"r" * 20_000
    frame = encode_fetch_response(1, 18, [FetchTopic(None, uuid.uuid4(), [FetchPartition(0, records=data)])])
    # Two requests received in one read: the first one's answer waits for the second's.
    requests = b"".join(struct.pack(">i", 8) + struct.pack(">hhi", 1, 18, i) for i in (1, 2))
    buf = proto.get_buffer(-1)
    buf[:len(requests)] = requests
    proto.buffer_updated(len(requests))
    await proto.read_frame()
    proto.write(b"\0\0\0\4head")
    await proto.read_frame()
    proto.writelines(frame)
    await asyncio.sleep(0)
    [(how, parts)] = transport.calls
    assert how == "writelines" and parts[0] == b"\0\0\0\4head" and parts[1:] == frame
    assert any(part is data for part in parts)
    # A lone answer goes out at once, its buffers as they are.
    proto.writelines(frame)
    assert transport.calls[1] == ("writelines", frame) and any(part is data for part in transport.calls[1][1])
