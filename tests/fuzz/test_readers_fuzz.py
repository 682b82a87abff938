"""Mutation fuzzing of the other readers of untrusted bytes (issue 11): the record-batch header
parser, the in-place Produce decoder and the `__share_group_state` / `__consumer_offsets` record
readers either succeed or raise ValueError (their error type), never anything else."""

from __future__ import annotations

import os
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharebroker.broker.groups import records as grec
from sharebroker.broker.share_state import records as srec
from sharebroker.broker.share_state.store import SnapshotValue, StateBatch, StateRecord, UpdateValue
from sharebroker.protocol.produce_request import decode_produce_body
from sharebroker.protocol.record_batch import encode_batch, parse_batches
from tests.fuzz.test_decode_fuzz import mutated as _mutated_request

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "1000")) // 3
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 1000,
                    suppress_health_check=[HealthCheck.too_slow])
# What a reader may raise for bad bytes: ValueError (struct.error, UnicodeDecodeError and the
# project's own errors are ValueErrors or handled as such), IndexError/EOF from a short buffer.
ALLOWED = (ValueError, IndexError, EOFError, KeyError)

BATCH = bytes(encode_batch([(b"k", b"v1"), (None, b"v2" * 30)], timestamp_ms=1))
KEY = ("g", uuid.UUID(int=7), 3)
STATE = [srec.encode_record(StateRecord(KEY, srec.SNAPSHOT, SnapshotValue(1, 2, 3, 40, 5, 6, 7, [StateBatch(40, 49, 2, 1)]))),
         srec.encode_record(StateRecord(KEY, srec.UPDATE, UpdateValue(1, 3, 41, 2, [StateBatch(41, 41, 0, 2)])))]


def _mutate(data: bytes, draw) -> bytes:
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        if not buf:
            break
        pos = draw(st.integers(0, len(buf) - 1))
        op = draw(st.sampled_from(("set", "truncate", "insert")))
        if op == "set":
            buf[pos] = draw(st.integers(0, 255))
        elif op == "truncate":
            del buf[pos:]
        else:
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=4))
    return bytes(buf)


@SETTINGS
@given(data=st.data())
def test_record_batch_parser(data):
    try:
        parse_batches(_mutate(BATCH + BATCH, data.draw), verify_crc=True)
    except ALLOWED:
        pass


@SETTINGS
@given(data=st.data())
def test_share_state_record_reader(data):
    key, value = data.draw(st.sampled_from(STATE))
    try:
        srec.decode_record(_mutate(key, data.draw), _mutate(value, data.draw))
    except ALLOWED:
        pass


@SETTINGS
@given(data=st.data())
def test_group_record_reader(data):
    key, value = grec.group_metadata("g", 5)
    try:
        grec.decode(_mutate(key, data.draw), _mutate(value, data.draw))
    except ALLOWED:
        pass


@SETTINGS
@given(frame=_mutated_request())
def test_in_place_produce_decoder(frame):
    if len(frame) < 8 or frame[:2] != b"\x00\x00":
        return
    version = int.from_bytes(frame[2:4], "big")
    if not 3 <= version <= 13:
        return
    from sharebroker.protocol.bounds import MalformedLengths, check_body, check_header
    from sharebroker.protocol.codec import request_class
    view = memoryview(bytearray(frame))
    cls = request_class(0, version)
    try:
        used = check_header(cls.__header_schema__, view)
        check_body(cls, view, used)  # the decoder runs only on frames that pass this, as in the broker
    except MalformedLengths:
        return
    try:
        decode_produce_body(view, used, version)
    except ALLOWED:
        pass
