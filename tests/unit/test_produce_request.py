"""The zero-copy Produce body decoder agrees with kio on every served version, hands out records as
views into the frame (writable when the frame is), and turns malformed bodies into FrameError."""

from __future__ import annotations

import datetime
import random
import struct
import uuid

import pytest
from kio.index import load_request_schema
from kio.serial import entity_reader

from sharebroker.protocol.codec import FrameError, decode_request
from sharebroker.protocol.produce_request import decode_produce_body
from tests.integration import rawkafka as rk

VERSIONS = range(3, 14)


def _request(version: int, rnd: random.Random):
    cls = load_request_schema(0, version)
    tcls = rk._nested(cls, "topic_data")
    pcls = rk._nested(tcls, "partition_data")
    topics = []
    for t in range(rnd.randint(0, 3)):
        parts = []
        for _ in range(rnd.randint(0, 3)):
            records = None if rnd.random() < 0.2 else bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 1, 61, 300])))
            parts.append(pcls(index=rnd.randint(0, 2**31 - 1), records=records))
        ident = {"topic_id": uuid.UUID(int=rnd.getrandbits(128))} if version >= 13 else {"name": f"topic-é-{t}"}
        topics.append(tcls(**ident, partition_data=tuple(parts)))
    values = {"transactional_id": rnd.choice([None, "", "tx-1"]), "acks": rnd.choice([-1, 0, 1]),
              "timeout": datetime.timedelta(milliseconds=rnd.randint(0, 2**31 - 1)), "topic_data": tuple(topics)}
    return cls(**rk._fit(cls, values))


def _frame(req) -> bytes:
    return rk.encode_request(req, 7)[4:]


@pytest.mark.parametrize("version", VERSIONS)
def test_matches_kio_on_random_requests(version):
    rnd = random.Random(version)
    cls = load_request_schema(0, version)
    for _ in range(60):
        frame = _frame(_request(version, rnd))
        _, used = entity_reader(cls.__header_schema__)(frame, 0)
        want, _ = entity_reader(cls)(frame, used)
        got = decode_produce_body(memoryview(bytearray(frame)), used, version)
        assert got.transactional_id == want.transactional_id
        assert got.acks == want.acks
        assert got.timeout_ms == want.timeout // datetime.timedelta(milliseconds=1)
        assert len(got.topic_data) == len(want.topic_data)
        for g, w in zip(got.topic_data, want.topic_data):
            if version >= 13:
                assert (g.name, g.topic_id) == (None, w.topic_id)
            else:
                assert (g.name, g.topic_id) == (w.name, None)
            assert [(p.index, None if p.records is None else bytes(p.records)) for p in g.partition_data] == \
                   [(p.index, p.records) for p in w.partition_data]


def test_records_are_writable_views_into_the_frame():
    batch = rk.encode_batch([rk.Rec(b"x" * 1000)])
    req = rk.produce_request("t", 0, batch, version=9)
    buf = bytearray(_frame(req))
    decoded = decode_request(memoryview(buf))
    (records,) = [p.records for t in decoded.body.topic_data for p in t.partition_data]
    assert isinstance(records, memoryview) and not records.readonly and records.obj is buf
    records[0:8] = struct.pack(">q", 42)  # what offset assignment does
    assert struct.pack(">q", 42) in buf
    # a small frame arrives as bytes and goes through kio: records come back as bytes
    small = decode_request(_frame(req))
    assert small.body.topic_data[0].partition_data[0].records == batch


@pytest.mark.parametrize("version", [3, 8, 9, 13])
def test_every_truncation_is_a_frame_error(version):
    frame = _frame(_request(version, random.Random(99)) if version != 9 else
                   rk.produce_request("t", 1, rk.encode_batch([rk.Rec(b"v")]), version=9))
    cls = load_request_schema(0, version)
    _, used = entity_reader(cls.__header_schema__)(frame, 0)
    for cut in range(used, len(frame)):
        with pytest.raises(FrameError):
            decode_request(memoryview(bytearray(frame[:cut])))


def test_negative_array_length_is_a_frame_error():
    req = rk.produce_request("t", 0, b"", version=8)
    frame = bytearray(_frame(req))
    cls = load_request_schema(0, 8)
    _, used = entity_reader(cls.__header_schema__)(bytes(frame), 0)
    # transactional_id (int16 -1), acks, timeout, then the topic count
    struct.pack_into(">i", frame, used + 2 + 2 + 4, -1)
    with pytest.raises(FrameError):  # as Kafka: a null non-nullable array is a malformed request
        decode_request(memoryview(frame))
