"""The hand-written ShareGroupHeartbeatResponse v1 encoder writes exactly what kio writes."""

from __future__ import annotations

import uuid

import pytest

from sharebroker.broker.apis.share_group_heartbeat import encode_response
from sharebroker.protocol.client import decode_response
from sharebroker.protocol.codec import build, encode_response as kio_encode_response, response_class

T1, T2 = uuid.uuid4(), uuid.uuid4()


@pytest.mark.parametrize("code, message, member, epoch, interval, assignment", [
    (0, None, "m1", 5, 5000, None),                                   # a steady heartbeat: nothing sent
    (0, None, "m1", 5, 5000, []),                                     # an empty assignment is not null
    (0, None, "membré", 7, 500, [(T1, [0, 3, 200000]), (T2, [])]),
    (0, None, "x" * 200, 2**31 - 1, 15000, [(T1, list(range(300)))]),  # varint lengths past one byte
    (110, "The share group member has an invalid epoch 3; ë", None, 0, 0, None),
])
def test_same_bytes_as_kio(code, message, member, epoch, interval, assignment) -> None:
    data = {"throttle_time": 0, "error_code": code, "error_message": message, "member_id": member,
            "member_epoch": epoch, "heartbeat_interval": interval,
            "assignment": None if assignment is None else
            {"topic_partitions": [{"topic_id": t, "partitions": p} for t, p in assignment]}}
    expected = kio_encode_response(42, build(response_class(76, 1), data))
    frame = encode_response(42, code, message, member, epoch, interval, assignment)
    assert bytes(frame) == expected
    corr, resp = decode_response(bytes(frame)[4:], 76, 1)
    assert corr == 42 and resp.member_epoch == epoch
