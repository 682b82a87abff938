"""The compiled length walk (protocol.bounds._compiled_walk) against the step-by-step walk it
speeds up: on real requests of many APIs, mutated or not, and on random bytes for every request
schema served, it accepts exactly the frames the step-by-step walk accepts, ending at the same
position, and check_body's verdict and error are the step-by-step walk's."""

from __future__ import annotations

import datetime
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharebroker.protocol import bounds
from sharebroker.protocol.api_table import API_VERSIONS
from sharebroker.protocol.codec import peek_header, request_class
from tests.fuzz.test_decode_fuzz import corpus_requests
from tests.integration import rawkafka as rk
from tests.integration.share_helpers import heartbeat_request, share_ack_request, share_fetch_request

TOPIC_ID = uuid.UUID("0f0e0d0c-0b0a-0908-0706-050403020100")


def _corpus() -> list[bytes]:
    acks = {(TOPIC_ID, 0): [(5, 5, [1]), (6, 9, [1, 2, 3, 0])], (TOPIC_ID, 3): [(10, 19, [2])]}
    reqs = [
        *corpus_requests(),
        heartbeat_request("workers", "m" * 22, 0, ["jobs", "more"], rack="r1"),
        heartbeat_request("workers", "m" * 22, 3),
        share_fetch_request("workers", "m" * 22, 4, partitions=[(TOPIC_ID, 0), (TOPIC_ID, 1)], acks=acks,
                            forgotten=[(TOPIC_ID, 2)], version=1),
        share_fetch_request("workers", "m" * 22, 4, partitions=[(TOPIC_ID, 0)], acks=acks, version=2),
        share_ack_request("workers", "m" * 22, 5, acks, version=1),
        share_ack_request("workers", "m" * 22, 5, acks, version=2, is_renew=True),
    ]
    offset_commit = rk.req_cls(8, 9)
    tcls = rk._nested(offset_commit, "topics")
    pcls = rk._nested(tcls, "partitions")
    reqs.append(offset_commit(group_id="g", generation_id_or_member_epoch=1, member_id="m", group_instance_id=None,
                              topics=(tcls(name="jobs", partitions=(
                                  pcls(partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                                       committed_metadata=None),)),)))
    create = rk.req_cls(19, 7)
    ctcls = rk._nested(create, "topics")
    reqs.append(create(topics=(ctcls(name="t", num_partitions=3, replication_factor=1, assignments=(),
                                     configs=()),), timeout=datetime.timedelta(seconds=1), validate_only=False))
    return [rk.encode_request(r, 7)[4:] for r in reqs]


CORPUS = _corpus()


def _verdict(walk, buf: bytes, pos: int) -> int | None:
    """The end position, or None for a refusal."""
    try:
        return walk(buf, pos, len(buf))
    except Exception:  # noqa: BLE001 - the compiled walk refuses with any exception
        return None


def _body_start(frame: bytes) -> tuple[type, int] | None:
    try:
        api_key, version, _ = peek_header(frame)
        cls = request_class(api_key, version)
        return cls, bounds.check_header(cls.__header_schema__, frame)
    except Exception:  # noqa: BLE001 - not a request header we serve: nothing to compare
        return None


def _same(cls: type, frame: bytes, pos: int) -> None:
    slow = _verdict(bounds._entity_walk(cls), frame, pos)
    fast = _verdict(bounds._compiled_walk(cls), frame, pos)
    assert fast == slow, (cls, frame.hex(), pos)
    if slow is None:
        with pytest.raises(bounds.MalformedLengths) as compiled_error:
            bounds.check_body(cls, frame, pos)
        with pytest.raises(bounds.MalformedLengths) as step_error:
            bounds._entity_walk(cls)(frame, pos, len(frame))
        assert str(compiled_error.value) == str(step_error.value)
    else:
        bounds.check_body(cls, frame, pos)


def test_the_corpus_walks_to_the_same_end():
    for frame in CORPUS:
        started = _body_start(frame)
        assert started is not None
        cls, pos = started
        assert bounds._compiled_walk(cls)(frame, pos, len(frame)) == bounds._entity_walk(cls)(frame, pos, len(frame))


@st.composite
def mutated(draw) -> bytes:
    frame = bytearray(draw(st.sampled_from(CORPUS)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(("set", "insert", "delete", "truncate", "max", "null")))
        pos = draw(st.integers(8, max(len(frame) - 1, 8)))  # keep the api key and version
        if op == "set" and len(frame) > pos:
            frame[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            frame[pos:pos] = draw(st.binary(min_size=1, max_size=6))
        elif op == "delete":
            del frame[pos:pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del frame[pos:]
        elif op == "max" and len(frame) >= pos + 4:
            frame[pos:pos + 4] = b"\xff\xff\xff\x7f"
        elif op == "null" and len(frame) > pos:
            frame[pos] = draw(st.sampled_from((0x00, 0xFF, 0x80)))
    return bytes(frame)


@settings(max_examples=1000, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(frame=mutated())
def test_mutated_requests_get_the_same_verdict(frame):
    started = _body_start(frame)
    if started is not None:
        _same(started[0], frame, started[1])


SCHEMAS = [(key, version) for key, (lo, hi) in sorted(API_VERSIONS.items()) for version in range(lo, hi + 1)]


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(schema=st.sampled_from(SCHEMAS), body=st.binary(max_size=120),
       small=st.lists(st.integers(0, 3), max_size=40))
def test_every_request_schema_gets_the_same_verdict_on_random_bodies(schema, body, small):
    # Small bytes make short lengths and counts, so the walks get past the first field or two.
    cls = request_class(*schema)
    _same(cls, bytes(small) + body, 0)
    _same(cls, body, 0)
