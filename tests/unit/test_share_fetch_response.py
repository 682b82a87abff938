"""The direct ShareFetch response encoder gives exactly kio's bytes."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from sharebroker.protocol.codec import build, encode_response, response_class
from sharebroker.protocol.share_fetch_response import encode_share_fetch_response


def _partition(i: int, records: bytes, acquired: list[tuple[int, int, int]], **kw) -> dict:
    p = {"partition_index": i, "error_code": ErrorCode.none, "error_message": None,
         "acknowledge_error_code": 0, "acknowledge_error_message": None,
         "current_leader": {"leader_id": 1, "leader_epoch": 7}, "records": records,
         "acquired_records": [{"first_offset": a, "last_offset": b, "delivery_count": c} for a, b, c in acquired]}
    p.update(kw)
    return p


CASES = [
    ([], 0, None),
    ([(uuid.uuid4(), [_partition(0, b"x" * 300, [(0, 4, 1), (7, 9, 3)])])], 0, None),
    ([(uuid.uuid4(), [_partition(0, b"", []), _partition(3, b"abc", [(5, 5, 2)],
                                                         error_code=ErrorCode.unknown_topic_id,
                                                         error_message="gone é",
                                                         acknowledge_error_code=121,
                                                         acknowledge_error_message="bad ack")]),
      (uuid.uuid4(), [_partition(1, b"r" * 70_000, [(0, 999, 1)])])], 0, None),
    ([], int(ErrorCode.invalid_request), "MaxBytes must be 0"),
]


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("topics,code,message", CASES)
def test_matches_kio(version, topics, code, message):
    cls = response_class(78, version)
    expected = encode_response(42, build(cls, {
        "throttle_time": 0, "error_code": code, "error_message": message, "acquisition_lock_timeout": 30_000,
        "responses": [{"topic_id": t, "partitions": ps} for t, ps in topics], "node_endpoints": ()}))
    got = encode_share_fetch_response(42, error_code=code, error_message=message, acquisition_lock_timeout_ms=30_000,
                                      topics=topics)
    assert got == expected
