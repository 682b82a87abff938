"""error_response: a request a handler failed on (a full disk, a failed fsync, a bug) is answered
with the error in every partition (or group, or topic) for the APIs that carry errors there, so
the connection stays open; error_code_for maps the exception to Kafka's code."""

from __future__ import annotations

import dataclasses
import ast
import errno
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import error_response
from sharebroker.protocol.errors import KafkaError, error_code_for
from sharebroker.protocol.api_table import API_VERSIONS
from sharebroker.protocol.codec import DecodedRequest, build, encode_response
from sharebroker.protocol.record_batch import InvalidRecordError, parse_produce_records
from sharebroker.storage import CorruptLogError
from sharebroker.storage.partition_log import LogClosedError, OffsetOutOfRange

ROOT = Path(__file__).resolve().parents[2]

# One request body for every API: build() takes the fields each schema has and zeroes the rest.
BODY = {
    "acks": -1,
    "topic_data": [{"name": "t", "partition_data": [{"index": 0}, {"index": 1}]}],
    "topics": [{"name": "t", "topic": "t", "partitions": [{"partition": 0, "partition_index": 0},
                                                          {"partition": 1, "partition_index": 1}]}],
    "topic_names": ["t"],
    "groups_names": ["g1", "g2"],
}
PER_ENTRY = [0, 1, 2, 3, 8, 19, 20, 21, 37, 42]


def codes(entity: Any) -> list[ErrorCode]:
    """Every error_code in a response, nested ones included."""
    out = []
    if dataclasses.is_dataclass(entity):
        for f in dataclasses.fields(entity):
            value = getattr(entity, f.name)
            if f.name == "error_code":
                out.append(value)
            else:
                out += codes(value)
    elif isinstance(entity, tuple):
        for item in entity:
            out += codes(item)
    return out


@pytest.mark.parametrize("api_key", PER_ENTRY)
def test_every_version_answers_every_entry(api_key):
    lo, hi = API_VERSIONS[api_key]
    for version in range(lo, hi + 1):
        body = build(load_request_schema(api_key, version), BODY)
        req = DecodedRequest(api_key, version, 7, "c", body)
        resp = error_response(req, ErrorCode.kafka_storage_error, "Disk error: No space left on device")
        assert resp is not None, (api_key, version)
        found = codes(resp)
        entries = [c for c in found if c != ErrorCode.none]
        assert entries and all(c == ErrorCode.kafka_storage_error for c in entries), (api_key, version, found)
        if api_key in (1,) and version >= 13:
            assert len(entries) == 1  # Fetch v13+: the top-level error only, as Kafka
        elif api_key not in (3, 19, 20, 37):  # those answer per topic: one here
            assert len(entries) >= 2, (api_key, version, found)  # both partitions (or groups)
        assert encode_response(7, resp)


def test_produce_acks_zero_has_no_answer():
    body = build(load_request_schema(0, 9), dict(BODY, acks=0))
    assert error_response(DecodedRequest(0, 9, 1, None, body), ErrorCode.unknown_server_error, "x") is None


def test_top_level_error_apis_still_answer():
    body = build(load_request_schema(76, 1), {"group_id": "g", "member_id": "m", "member_epoch": 0})
    resp = error_response(DecodedRequest(76, 1, 1, None, body), ErrorCode.not_coordinator, "x")
    assert resp.error_code == ErrorCode.not_coordinator and resp.error_message == "x"


def test_error_code_for():
    assert error_code_for(OSError(errno.ENOSPC, "No space left on device"))[0] == ErrorCode.kafka_storage_error
    code, message = error_code_for(OSError(errno.EIO, "Input/output error", "/data/t-0/0.log"))
    assert code == ErrorCode.kafka_storage_error and "/data/t-0/0.log" in message
    assert error_code_for(KafkaError(ErrorCode.not_coordinator, "no space"))[0] == ErrorCode.not_coordinator
    assert error_code_for(CorruptLogError("bad", path="p", position=3))[0] == ErrorCode.corrupt_message
    code, message = error_code_for(KeyError("oops"))
    assert code == ErrorCode.unknown_server_error and message.startswith("KeyError")


def test_every_layer_raises_the_one_kafka_error_type():
    """Storage, protocol and broker errors a client hears about are KafkaErrors with kio's ErrorCode."""
    errors = [OffsetOutOfRange("x", offset=9, log_start_offset=0, log_end_offset=5), LogClosedError("x"),
              CorruptLogError("x", path="p", position=3)]
    with pytest.raises(InvalidRecordError) as invalid:
        parse_produce_records(b"\x00" * 70, api_version=9, max_message_bytes=1000)
    errors.append(invalid.value)
    for exc in errors:
        assert isinstance(exc, KafkaError) and isinstance(exc.code, ErrorCode), exc
    assert [e.code for e in errors] == [ErrorCode.offset_out_of_range, ErrorCode.unknown_topic_or_partition,
                                        ErrorCode.corrupt_message, ErrorCode.corrupt_message]
    assert repr(KafkaError(ErrorCode.invalid_request, "bad")) == "KafkaError(invalid_request, 'bad')"


def test_no_module_defines_an_error_type_of_its_own_with_a_code():
    """One error type: no exception class besides KafkaError sets a `code` of its own."""
    offenders = []
    for room in ("broker", "protocol", "storage", "config", "pipeline", "cli"):
        for path in (ROOT / room).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and node.name != "KafkaError":
                    sets_code = any(isinstance(t, ast.Attribute) and t.attr == "code" or isinstance(t, ast.Name) and t.id == "code"
                                    for n in ast.walk(node) if isinstance(n, (ast.Assign, ast.AnnAssign))
                                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))
                    based = [ast.unparse(b) for b in node.bases]
                    if sets_code and any(b.endswith(("Exception", "Error")) for b in based):
                        offenders.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert not offenders, offenders
