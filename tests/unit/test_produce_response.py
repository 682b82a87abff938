"""The direct Produce response encoder writes exactly what kio's writer writes for the same
content, for every served version, and its throttle position is where ThrottleTimeMs is."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from sharebroker.protocol.api_table import API_VERSIONS
from sharebroker.protocol.codec import build, encode_response, response_class
from sharebroker.protocol.produce_response import (
    ProducePartitionResponse,
    ProduceTopicResponse,
    encode_produce_response,
    throttle_position,
)

PRODUCE = range(API_VERSIONS[0][0], API_VERSIONS[0][1] + 1)

i32 = st.integers(-(2**31), 2**31 - 1)
offsets = st.integers(-1, 2**62)
codes = st.sampled_from(list(ErrorCode))
text = st.text(max_size=20)
partition = st.builds(ProducePartitionResponse, i32, codes, offsets, st.just(-1) | st.integers(0, 2**42), offsets,
                      st.none() | text)
topics = st.lists(st.builds(ProduceTopicResponse, text, st.none() | st.uuids(),
                            st.lists(partition, max_size=4) | st.lists(partition, min_size=130, max_size=140)),
                  max_size=3)


def produce_dict(ts: list[ProduceTopicResponse], throttle: int) -> dict[str, Any]:
    """The content as the handler's dicts of before, built by codec.build into kio's entity."""
    return {"throttle_time": throttle, "responses": [
        {"name": t.name, "topic_id": t.topic_id, "partition_responses": [
            {"index": p.index, "error_code": p.error_code, "base_offset": p.base_offset,
             **({"log_append_time": p.log_append_time_ms} if p.log_append_time_ms != -1 else {}),
             "log_start_offset": p.log_start_offset, "record_errors": (), "error_message": p.error_message}
            for p in t.partitions]} for t in ts]}


@pytest.mark.parametrize("version", PRODUCE)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ts=topics, throttle=st.integers(0, 2**31 - 1), correlation_id=i32)
def test_produce_response_matches_kio(version, ts, throttle, correlation_id):
    if version >= 13:
        ts = [ProduceTopicResponse(None, t.topic_id, t.partitions) for t in ts]
    expected = encode_response(correlation_id, build(response_class(0, version), produce_dict(ts, throttle)))
    frame = encode_produce_response(correlation_id, version, ts, throttle_time_ms=throttle)
    assert bytes(frame) == expected
    assert struct.unpack_from(">i", frame, throttle_position(frame, version))[0] == throttle
