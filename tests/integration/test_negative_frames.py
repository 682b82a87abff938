"""Bad input on one connection closes (or is refused on) that connection only: other clients keep
working, the broker keeps running, and it logs a structured line for the event."""

from __future__ import annotations

import json
import random
import socket
import struct
import threading
import uuid

import pytest
from confluent_kafka import Producer

from tests.integration import rawkafka as rk
from tests.integration.clients import consume_from_beginning, create_topic, produce_sync, producer_conf
from sharebroker.testing import wait_for

CLOSE_TIMEOUT = 5.0
WARNING_LEVELS = {"warning", "warn", "error", "critical", "fatal"}


# ---------------------------------------------------------------------------------------------
# A second client producing and fetching all the time


class Traffic:
    """Raw Produce + Fetch in a loop on its own connection; every answer is checked."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.count = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="traffic", daemon=True)

    def start(self) -> "Traffic":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with rk.RawClient(self.bootstrap) as c:
                off = 0
                while not self._stop.is_set():
                    r = rk.produce(c, self.topic, 0, rk.encode_batch([rk.Rec(b"bg-%d" % off)]))
                    assert (int(r.error_code), r.base_offset) == (0, off), r
                    p = rk.fetch(c, self.topic, 0, off)
                    got = [x.value for x in rk.records_of(rk.parse_batches(p.records)) if x.offset == off]
                    assert got == [b"bg-%d" % off], (off, got)
                    off += 1
                    self.count = off
                    self._stop.wait(0.005)  # pace the loop; 2 cores are shared with the broker
        except BaseException as exc:  # reported by assert_alive
            self.error = exc

    def assert_alive(self, more: int = 5, timeout: float = 10.0) -> None:
        start = self.count
        wait_for(lambda: self.error is not None or self.count >= start + more, timeout,
                 message=f"{more} more produce/fetch round trips of the second client")
        assert self.error is None, f"second client failed: {self.error!r}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture(scope="module")
def traffic(broker):
    topic = f"bg-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    t = Traffic(broker.bootstrap, topic).start()
    t.assert_alive()
    yield t
    t.stop()
    assert t.error is None, repr(t.error)


# ---------------------------------------------------------------------------------------------
# Broker log


def _log_lines(broker, start: int) -> list[dict]:
    out = []
    for line in broker.log_text()[start:].splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _mentions(entry: dict, peer: str, conn_ids: set) -> bool:
    values = {str(v) for v in entry.values()}
    if any(peer in v for v in values):
        return True
    return any(entry.get(k) in conn_ids for k in ("conn", "connection", "conn_id", "connection_id"))


def _conn_ids(broker, peer: str) -> set:
    ids = set()
    for entry in _log_lines(broker, 0):
        if any(peer in str(v) for v in entry.values()):
            for k in ("conn", "connection", "conn_id", "connection_id"):
                if k in entry:
                    ids.add(entry[k])
    return ids


def assert_logged(broker, start: int, peer: str, *, warning: bool = True) -> dict:
    """A structured log line after `start` that names this connection (by peer or by the
    connection id the broker gave that peer), at warning level or above if `warning`."""

    def find():
        ids = _conn_ids(broker, peer)
        for entry in _log_lines(broker, start):
            level = str(entry.get("level", entry.get("log_level", ""))).lower()
            if warning and level not in WARNING_LEVELS:
                continue
            if _mentions(entry, peer, ids):
                return entry
        return None

    try:
        return wait_for(find, 5.0, message=f"a {'warning ' if warning else ''}log line about {peer}")
    except AssertionError:
        tail = "\n".join(json.dumps(e) for e in _log_lines(broker, start)[-15:])
        raise AssertionError(f"no {'warning-level ' if warning else ''}structured log line about connection "
                             f"{peer} after the event; log since then:\n{tail}") from None


def _mark(broker) -> int:
    return len(broker.log_text())


# ---------------------------------------------------------------------------------------------
# Frames that close the connection


def _header_v1(api_key: int, version: int, corr: int, client_id: bytes = b"neg") -> bytes:
    return struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _garbage() -> bytes:
    rnd = random.Random(932)
    return _frame(b"\xde\xad\xbe\xef" + bytes(rnd.randrange(256) for _ in range(60)))


def _garbage_after_valid_header() -> bytes:
    # Metadata v12 with a body that cannot be decoded: the topics array claims 2^30 entries.
    return _frame(_header_v1(3, 12, 1) + b"\x00" + b"\xff\xff\xff\xf0" + b"\x01" * 8)


def _unknown_api_key() -> bytes:
    return _frame(_header_v1(9999, 0, 1) + b"\x00" * 8)


def _unsupported_version_of_other_api() -> bytes:
    return _frame(_header_v1(3, 999, 1) + b"\x00" * 8)


def _header_v2(api_key: int, version: int, corr: int) -> bytes:
    return _header_v1(api_key, version, corr) + b"\x00"  # + no tagged fields


def _compact_str(text: str) -> bytes:
    return bytes([len(text) + 1]) + text.encode()


# Issue 11 defect 1: a declared array length of 2^32 - 2 made kio's native reader reserve 32 GiB
# and the process abort. These exact frames must close only their connection.
_METADATA_V13_HUGE_ARRAY = bytes.fromhex("000000170003000d00000002000772646b61666b6100ffffffff0f")


def _incremental_alter_configs_v1_huge_array() -> bytes:
    return _frame(_header_v2(44, 1, 1) + b"\xff\xff\xff\xff\x0f" + b"\x00\x00")


# Issue 11 defect 4: a null where the schema has a non-nullable array crashed the handler.
def _list_offsets_v7_null_topics() -> bytes:
    return _frame(_header_v2(2, 7, 1) + struct.pack(">ib", -1, 0) + b"\x00" + b"\x00")


def _offset_fetch_v9_null_groups() -> bytes:
    return _frame(_header_v2(9, 9, 1) + b"\x00" + b"\x00" + b"\x00")


def _offset_commit_v9_null_topics() -> bytes:
    return _frame(_header_v2(8, 9, 1) + _compact_str("g") + struct.pack(">i", 1) + _compact_str("m")
                  + b"\x00" + b"\x00" + b"\x00")


CLOSING_CASES = {
    "metadata-v13-array-of-2^32": (lambda: _METADATA_V13_HUGE_ARRAY, False),
    "incremental-alter-configs-v1-array-of-2^32": (_incremental_alter_configs_v1_huge_array, False),
    "list-offsets-v7-null-topics": (_list_offsets_v7_null_topics, False),
    "offset-fetch-v9-null-groups": (_offset_fetch_v9_null_groups, False),
    "offset-commit-v9-null-topics": (_offset_commit_v9_null_topics, False),
    "garbage": (_garbage, False),
    "garbage-body": (_garbage_after_valid_header, False),
    "oversize-length": (lambda: struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 16, False),
    "negative-length": (lambda: struct.pack(">i", -5) + b"\x00" * 16, False),
    "truncated-frame": (lambda: struct.pack(">i", 100) + b"\x00\x03\x00\x0c" + b"\x00" * 6, True),
    "truncated-size-prefix": (lambda: b"\x00\x00", True),
    "unknown-api-key": (_unknown_api_key, False),
    "unsupported-metadata-version": (_unsupported_version_of_other_api, False),
}


@pytest.mark.parametrize("case", list(CLOSING_CASES))
def test_bad_frame_closes_only_that_connection(broker, traffic, case):
    make, half_close = CLOSING_CASES[case]
    start = _mark(broker)
    with rk.RawClient(broker.bootstrap) as bad:
        peer = bad.peer_text
        bad.send_bytes(make())
        if half_close:
            bad.sock.shutdown(socket.SHUT_WR)
        assert bad.wait_closed(CLOSE_TIMEOUT), f"broker kept the connection open after {case}"
    traffic.assert_alive()
    assert broker.alive()
    assert_logged(broker, start, peer)


# ---------------------------------------------------------------------------------------------
# Frames that are answered


def test_unsupported_api_versions_version_gets_v0_error_response(broker, traffic):
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    start = _mark(broker)
    with rk.RawClient(broker.bootstrap) as c:
        peer = c.peer_text
        # header v2 (flexible): key, version, correlation id, client id, empty tagged fields
        c.send_bytes(_frame(_header_v1(18, 99, 4242) + b"\x00" + b"\x00"))
        frame = c.recv_frame()
        (corr,) = struct.unpack_from(">i", frame)
        assert corr == 4242
        body, _ = entity_reader(load_response_schema(18, 0))(frame, 4)  # response header v0
        assert int(body.error_code) == 35, body  # UNSUPPORTED_VERSION
        ranges = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        assert 18 in ranges, ranges
        lo, hi = ranges[18]
        assert lo == 0 and 3 <= hi < 99, ranges
        # The client may now retry with a version it knows, on the same connection.
        ok = c.request(rk.api_versions_request(3))
        assert int(ok.error_code) == 0
    traffic.assert_alive()
    assert_logged(broker, start, peer, warning=False)


def test_produce_with_bad_crc_is_refused_and_connection_stays_usable(broker, traffic, topic_name):
    create_topic(broker.bootstrap, topic_name)
    start = _mark(broker)
    with rk.RawClient(broker.bootstrap) as c:
        peer = c.peer_text
        good = rk.encode_batch([rk.Rec(b"good-1")])
        assert int(rk.produce(c, topic_name, 0, good).error_code) == 0
        hw_before = rk.fetch(c, topic_name, 0, 0).high_watermark
        assert hw_before == 1

        batch = bytearray(rk.encode_batch([rk.Rec(b"this record will be corrupted", key=b"k")]))
        batch[-3] ^= 0xFF  # inside the records, covered by the CRC
        r = rk.produce(c, topic_name, 0, bytes(batch))
        assert int(r.error_code) == 2, r  # CORRUPT_MESSAGE
        assert rk.fetch(c, topic_name, 0, 0).high_watermark == hw_before

        # A batch whose length field disagrees with its bytes is corrupt too.
        short = bytearray(rk.encode_batch([rk.Rec(b"x" * 40)]))
        struct.pack_into(">i", short, 8, len(short))  # claims 12 bytes more than it has
        r = rk.produce(c, topic_name, 0, bytes(short))
        assert int(r.error_code) in (2, 87), r  # CORRUPT_MESSAGE or INVALID_RECORD
        assert rk.fetch(c, topic_name, 0, 0).high_watermark == hw_before

        # same connection, next request works
        r = rk.produce(c, topic_name, 0, rk.encode_batch([rk.Rec(b"good-2")]))
        assert (int(r.error_code), r.base_offset) == (0, 1), r
        values = [x.value for x in rk.records_of(rk.fetch_all_batches(c, topic_name, 0))]
        assert values == [b"good-1", b"good-2"]
    traffic.assert_alive()
    assert_logged(broker, start, peer)


def test_api_versions_v3_advertises_the_expected_ranges(broker):
    with rk.RawClient(broker.bootstrap) as c:
        resp = c.request(rk.api_versions_request(3))
    assert int(resp.error_code) == 0
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    lo, hi = ranges[0]
    assert lo <= 3 and hi >= 13, f"Produce {ranges[0]}"
    lo, hi = ranges[1]
    assert lo <= 4 <= hi, f"Fetch {ranges[1]}"
    assert ranges[3][1] == 13, f"Metadata {ranges[3]}"
    assert ranges[18][0] == 0 and ranges[18][1] >= 3, f"ApiVersions {ranges[18]}"
    # Telemetry is not served; transactions are, at transaction version 1 (EndTxn v5 is version 2).
    for absent in (71, 72):
        assert absent not in ranges, f"API key {absent} must not be advertised: {ranges.get(absent)}"
    assert ranges[24] == (0, 5) and ranges[26] == (0, 4) and ranges[28] == (0, 5), (ranges[24], ranges[26], ranges[28])
    for key, (lo, hi) in ranges.items():
        assert 0 <= lo <= hi, (key, lo, hi)


def test_real_clients_still_work_after_the_abuse(broker, traffic, topic_name):
    """Runs last in this module: a fresh confluent producer and consumer are unaffected."""
    create_topic(broker.bootstrap, topic_name)
    p = Producer(producer_conf(broker.bootstrap))
    produce_sync(p, topic_name, [{"partition": 0, "value": b"after-%d" % i} for i in range(5)])
    msgs = consume_from_beginning(broker.bootstrap, topic_name, 5)
    assert [m.value() for m in msgs] == [b"after-%d" % i for i in range(5)]
    traffic.assert_alive()
    assert "Traceback" not in broker.log_text()


# ---------------------------------------------------------------------------------------------
# A wire fuzzer: mutated real requests on many connections while the traffic client works


def test_mutated_frames_on_many_connections_leave_the_broker_and_other_clients_unharmed(broker, traffic):
    from hypothesis import HealthCheck, given, settings

    from tests.fuzz.test_decode_fuzz import mutated

    start = _mark(broker)
    frames: list[bytes] = []

    @settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(frame=mutated())
    def collect(frame: bytes) -> None:
        frames.append(frame)

    collect()
    sent = 0
    for i in range(0, len(frames), 30):  # 20 connections, 30 frames each, sent back to back
        with rk.RawClient(broker.bootstrap) as c:
            for frame in frames[i:i + 30]:
                try:
                    c.send_bytes(struct.pack(">i", len(frame)) + frame)
                    sent += 1
                except OSError:
                    break  # the broker closed this connection after a malformed frame
    assert sent >= 20
    traffic.assert_alive()
    assert broker.alive()
    log = broker.log_text()[start:]
    assert "Traceback" not in log and '"exception"' not in log, log[-3000:]
