"""build() keeps "one dict shape serves every version" (a key of another version of the response,
at the same place, is dropped) but refuses a key that no version has there: a misspelling would
otherwise go out as a zero value."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from sharebroker.protocol.codec import build, encode_response, response_class
from sharebroker.protocol.errors import KafkaError


def fetch(partition: dict[str, object], **top: object) -> dict[str, object]:
    return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0,
            "responses": [{"topic": "t", "topic_id": uuid.UUID(int=7), "partitions": [partition]}], **top}


PARTITION = {"partition_index": 0, "error_code": ErrorCode.none, "high_watermark": 5, "last_stable_offset": 5,
             "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1, "records": b"abc"}


def test_a_misspelt_key_raises_naming_the_key_the_entity_and_the_api():
    with pytest.raises(KafkaError) as caught:
        build(response_class(12, 4), {"throttle_time": 0, "eror_code": ErrorCode.none})
    exc = caught.value
    assert exc.code == ErrorCode.unknown_server_error
    assert "'eror_code'" in exc.message and "HeartbeatResponse" in exc.message and "Heartbeat response" in exc.message
    assert "did you mean 'error_code'" in exc.message


def test_a_misspelt_nested_key_raises():
    with pytest.raises(KafkaError, match=r"'recrods' .*PartitionData.*Fetch response"):
        build(response_class(1, 18), fetch({**{k: v for k, v in PARTITION.items() if k != "records"},
                                            "recrods": b"abc"}))


@pytest.mark.parametrize("version", [4, 5, 11, 12, 13, 16, 18])
def test_keys_of_other_versions_are_dropped_as_before(version):
    """The handler's one shape: topic and topic_id, log_start_offset (v5+), preferred_read_replica
    (v11+), node_endpoints (v16+)."""
    cls = response_class(1, version)
    built = build(cls, fetch(PARTITION, node_endpoints=()))
    assert encode_response(1, built)
    if version < 13:
        assert built.responses[0].topic == "t"
    else:
        assert built.responses[0].topic_id == uuid.UUID(int=7)


def test_a_field_of_another_place_is_not_a_field_here():
    with pytest.raises(KafkaError, match="'records'"):
        build(response_class(1, 18), fetch(PARTITION, records=b""))


def test_every_served_version_of_every_response_accepts_its_own_fields():
    from sharebroker.protocol.api_table import API_VERSIONS

    for key, (lo, hi) in API_VERSIONS.items():
        for version in range(lo, hi + 1):
            cls = response_class(key, version)
            build(cls, {f.name: None for f in dataclasses.fields(cls)})


def test_requests_are_not_checked():
    """The tools and tests build requests from one body shared by several APIs."""
    req = build(load_request_schema(12, 4), {"group_id": "g", "generation_id": 1, "member_id": "m", "acks": -1})
    assert req.group_id == "g"
