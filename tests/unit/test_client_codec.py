"""The sans-I/O client codec (protocol/client.py): requests encoded with the header their version
calls for and read back by kio and by the broker's own decoder; responses written by kio decoded
to equal entities and matched to their requests by correlation id, from a stream cut anywhere."""

from __future__ import annotations

import datetime
import io
import struct
import uuid
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from sharebroker.protocol.client import ClientCodec, ResponseFrameError, ResponseStream, decode_response, encode_request
from sharebroker.protocol.codec import build, decode_request

TOPIC_ID = uuid.UUID(int=0x1234_5678_9ABC_DEF0_1122_3344_5566_7788)

# (api key, version, request body, response body): flexible and non-flexible versions of a few APIs.
CASES: list[tuple[int, int, dict[str, Any], dict[str, Any]]] = [
    (18, 0, {}, {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 13}]}),
    (18, 3, {"client_software_name": "codec-test", "client_software_version": "1.0"},
     {"error_code": 0, "api_keys": [{"api_key": 78, "min_version": 1, "max_version": 2}], "throttle_time": 5}),
    (3, 8, {"topics": [{"name": "orders"}], "allow_auto_topic_creation": False},
     {"brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}], "cluster_id": "c", "controller_id": 1,
      "topics": [{"error_code": 0, "name": "orders", "is_internal": False,
                  "partitions": [{"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
                                  "replica_nodes": (1,), "isr_nodes": (1,), "offline_replicas": ()}]}]}),
    (3, 12, {"topics": [{"name": "orders", "topic_id": None}], "allow_auto_topic_creation": True},
     {"brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}], "cluster_id": "c", "controller_id": 1,
      "topics": [{"error_code": 3, "name": "orders", "topic_id": TOPIC_ID, "is_internal": False, "partitions": []}]}),
    (0, 9, {"transactional_id": None, "acks": -1, "timeout": datetime.timedelta(seconds=5),
            "topic_data": [{"name": "orders", "partition_data": [{"index": 0, "records": b"\x00" * 70}]}]},
     {"responses": [{"name": "orders", "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 42,
                                                                  "log_append_time": None, "log_start_offset": 0}]}]}),
    (12, 3, {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None},
     {"error_code": ErrorCode.rebalance_in_progress}),
]
IDS = [f"{load_request_schema(k, v).__name__}-v{v}" for k, v, _, _ in CASES]


def _request(api_key: int, version: int, body: dict[str, Any]) -> Any:
    return build(load_request_schema(api_key, version), body)


def _response(api_key: int, version: int, body: dict[str, Any]) -> Any:
    return build(load_response_schema(api_key, version), body)


def _response_frame(correlation_id: int, response: Any) -> bytes:
    """A size-prefixed response frame written by kio alone, with the header kio's schema names."""
    out = io.BytesIO()
    header_cls = type(response).__header_schema__
    entity_writer(header_cls)(out, header_cls(correlation_id=correlation_id))
    entity_writer(type(response))(out, response)
    body = out.getvalue()
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize("api_key, version, body, _", CASES, ids=IDS)
def test_request_reads_back_with_kio_and_the_broker_decoder(api_key, version, body, _):
    req = _request(api_key, version, body)
    frame = encode_request(req, 1234, "codec-test")
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    cls = type(req)
    header, used = entity_reader(cls.__header_schema__)(frame[4:], 0)
    assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == \
        (api_key, version, 1234, "codec-test")
    assert entity_reader(cls)(frame[4:], used) == (req, size - used)  # (entity, bytes read)
    decoded = decode_request(frame[4:])
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id, decoded.client_id, decoded.body) == \
        (api_key, version, 1234, "codec-test", req)


def test_request_header_is_v2_for_flexible_versions_and_v1_before():
    def header(api_key: int, version: int, body: dict[str, Any]) -> bytes:
        frame = encode_request(_request(api_key, version, body), 7, "ab")
        return frame[4:4 + 2 + 2 + 4 + 2 + 2 + 1]

    # key, version, correlation id, client id as a legacy (int16-length) string in both; v2 adds
    # an empty tagged-field section, v1 goes straight on to the body.
    assert header(3, 12, {"topics": None}) == struct.pack(">hhih", 3, 12, 7, 2) + b"ab" + b"\x00"
    v1 = header(3, 8, {"topics": None})
    assert v1[:12] == struct.pack(">hhih", 3, 8, 7, 2) + b"ab" and v1[12:] == b"\xff"  # null topics array
    assert encode_request(_request(18, 3, CASES[1][2]), 7, None)[4:14] == struct.pack(">hhih", 18, 3, 7, -1)


@pytest.mark.parametrize("api_key, version, _, body", CASES, ids=IDS)
def test_response_written_by_kio_decodes_to_an_equal_entity(api_key, version, _, body):
    response = _response(api_key, version, body)
    frame = _response_frame(99, response)
    assert decode_response(frame[4:], api_key, version) == (99, response)


def test_api_versions_response_header_is_v0_even_when_flexible():
    """A flexible response header carries a tagged-field byte after the correlation id; the
    ApiVersions one never does, so a v3 body starts right after the id."""
    response = _response(18, 3, CASES[1][3])
    frame = _response_frame(5, response)
    assert frame[8:10] == b"\x00\x00"  # error code, at once
    assert decode_response(frame[4:], 18, 3) == (5, response)
    flexible = _response_frame(5, _response(3, 12, CASES[3][3]))
    assert flexible[8] == 0  # empty tagged fields of response header v1
    assert decode_response(flexible[4:], 3, 12)[0] == 5


def test_api_versions_error_in_the_v0_shape_decodes_for_a_newer_request():
    """A broker that does not know the ApiVersions version asked answers UNSUPPORTED_VERSION in the
    v0 shape; the codec reads it rather than failing."""
    codec = ClientCodec("c")
    corr, _ = codec.encode(_request(18, 3, CASES[1][2]))
    old = _response(18, 0, {"error_code": ErrorCode.unsupported_version,
                             "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}]})
    codec.receive(_response_frame(corr, old))
    got, body = codec.next_response()
    assert got == corr and body.error_code == ErrorCode.unsupported_version
    assert [(k.api_key, k.max_version) for k in body.api_keys] == [(18, 2)]


def _pipelined(codec: ClientCodec) -> tuple[bytes, list[tuple[int, Any]]]:
    """Every case sent on one codec; the stream of their responses, in order."""
    stream = b""
    expected = []
    for api_key, version, req_body, resp_body in CASES:
        corr, _ = codec.encode(_request(api_key, version, req_body))
        response = _response(api_key, version, resp_body)
        stream += _response_frame(corr, response)
        expected.append((corr, response))
    return stream, expected


def _drain(codec: ClientCodec) -> list[tuple[int, Any]]:
    out = []
    while (r := codec.next_response()) is not None:
        out.append(r)
    return out


def test_stream_cut_at_every_byte_yields_every_response_in_order():
    stream, expected = _pipelined(ClientCodec("c"))
    for cut in range(len(stream) + 1):
        codec = ClientCodec("c")
        _pipelined(codec)  # the same requests, so the same correlation ids are pending
        codec.receive(stream[:cut])
        got = _drain(codec)
        codec.receive(stream[cut:])
        got += _drain(codec)
        assert got == expected, cut
        assert codec.in_flight == 0 and codec.next_response() is None


def test_stream_fed_one_byte_at_a_time():
    codec = ClientCodec("c")
    stream, expected = _pipelined(codec)
    got = []
    for i in range(len(stream)):
        codec.receive(stream[i:i + 1])
        got += _drain(codec)
    assert got == expected


def test_responses_are_matched_by_correlation_id_not_arrival():
    codec = ClientCodec("c", first_correlation_id=40)
    meta, _ = codec.encode(_request(3, 12, {"topics": None}))
    beat, _ = codec.encode(_request(12, 3, CASES[5][2]))
    assert (meta, beat, codec.in_flight) == (40, 41, 2)
    codec.receive(_response_frame(beat, _response(12, 3, CASES[5][3])))
    codec.receive(_response_frame(meta, _response(3, 12, CASES[3][3])))
    (c1, r1), (c2, r2) = _drain(codec)
    assert (c1, type(r1).__name__, c2, type(r2).__name__) == (beat, "HeartbeatResponse", meta, "MetadataResponse")


def test_unknown_correlation_id_is_an_error():
    codec = ClientCodec("c")
    corr, _ = codec.encode(_request(12, 3, CASES[5][2]))
    codec.receive(_response_frame(corr + 1, _response(12, 3, CASES[5][3])))
    with pytest.raises(ResponseFrameError, match=f"correlation id {corr + 1} answers no pending request"):
        codec.next_response()


def test_a_response_is_taken_once():
    codec = ClientCodec("c")
    corr, _ = codec.encode(_request(12, 3, CASES[5][2]))
    frame = _response_frame(corr, _response(12, 3, CASES[5][3]))
    codec.receive(frame + frame)
    assert codec.next_response()[0] == corr
    with pytest.raises(ResponseFrameError):
        codec.next_response()


def test_request_without_response_is_not_awaited():
    """Produce with acks=0 is not answered: nothing is pending for it."""
    codec = ClientCodec("c")
    corr, frame = codec.encode(_request(0, 9, {**CASES[4][2], "acks": 0}), expect_response=False)
    assert codec.in_flight == 0 and decode_request(frame[4:]).correlation_id == corr
    codec.receive(_response_frame(corr, _response(0, 9, CASES[4][3])))
    with pytest.raises(ResponseFrameError):
        codec.next_response()


def test_correlation_ids_wrap_before_int32_runs_out():
    codec = ClientCodec("c", first_correlation_id=2**31 - 1)
    ids = [codec.encode(_request(12, 3, CASES[5][2]))[0] for _ in range(3)]
    assert ids == [2**31 - 1, 0, 1]


def test_malformed_frames_are_errors():
    stream = ResponseStream()
    stream.feed(struct.pack(">i", -1))
    with pytest.raises(ResponseFrameError, match="negative size"):
        stream.next_frame()
    codec = ClientCodec("c")
    codec.encode(_request(12, 3, CASES[5][2]))
    codec.receive(struct.pack(">i", 2) + b"\x00\x01")
    with pytest.raises(ResponseFrameError, match="shorter than a response header"):
        codec.next_response()
    with pytest.raises(ResponseFrameError, match="Metadata v12 response: undecodable body"):
        decode_response(struct.pack(">i", 1) + b"\x00\x05", 3, 12)


def test_stream_keeps_the_part_of_a_frame_received_so_far():
    stream = ResponseStream()
    stream.feed(struct.pack(">i", 3) + b"ab")
    assert stream.next_frame() is None and stream.buffered == 6
    stream.feed(b"c" + struct.pack(">i", 0))
    assert [stream.next_frame(), stream.next_frame(), stream.next_frame()] == [b"abc", b"", None]
    assert stream.buffered == 0
