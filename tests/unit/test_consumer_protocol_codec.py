"""The embedded consumer protocol of classic groups: ConsumerProtocolSubscription (v0–v3, newer
versions read as v3) and ConsumerProtocolAssignment, checked against bytes built by hand."""

from __future__ import annotations

import struct

import pytest

from sharebroker.broker.groups.consumer_protocol import (
    HIGHEST_VERSION,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    version_of,
)


def s(text: str | None) -> bytes:
    """A non-flexible (int16-length) nullable string."""
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def b(data: bytes | None) -> bytes:
    """Non-flexible (int32-length) nullable bytes."""
    if data is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(data)) + data


def topics_array(topics: tuple[str, ...]) -> bytes:
    return struct.pack(">i", len(topics)) + b"".join(s(t) for t in topics)


def partitions_array(rows: tuple[tuple[str, tuple[int, ...]], ...]) -> bytes:
    out = struct.pack(">i", len(rows))
    for topic, parts in rows:
        out += s(topic) + struct.pack(">i", len(parts)) + b"".join(struct.pack(">i", p) for p in parts)
    return out


OWNED = (("a", (0, 2)), ("b", (1,)))


def v0(topics: tuple[str, ...] = ("a", "b"), user_data: bytes | None = None) -> bytes:
    return struct.pack(">h", 0) + topics_array(topics) + b(user_data)


def v3(version: int = 3, rack: str | None = "rack-1") -> bytes:
    return (struct.pack(">h", version) + topics_array(("a", "b")) + b(b"ud") + partitions_array(OWNED)
            + struct.pack(">i", 7) + s(rack))


# -- subscriptions -------------------------------------------------------------------------------


def test_v0_with_null_user_data() -> None:
    sub = decode_subscription(v0())
    assert sub == Subscription(0, ("a", "b"), None, (), -1, None)


def test_v0_with_user_data_and_no_topics() -> None:
    assert decode_subscription(v0(("t",), b"\x01\x02")) == Subscription(0, ("t",), b"\x01\x02")
    assert decode_subscription(v0((), b"")) == Subscription(0, (), b"")


def test_v1_reads_owned_partitions() -> None:
    data = struct.pack(">h", 1) + topics_array(("a", "b")) + b(None) + partitions_array(OWNED)
    sub = decode_subscription(data)
    assert sub.version == 1
    assert sub.topics == ("a", "b")
    assert sub.user_data is None
    assert sub.owned_partitions == OWNED
    assert (sub.generation_id, sub.rack_id) == (-1, None)


def test_v1_with_no_owned_partitions() -> None:
    data = struct.pack(">h", 1) + topics_array(("a",)) + b(None) + partitions_array(())
    assert decode_subscription(data) == Subscription(1, ("a",), None, (), -1, None)


def test_v2_reads_generation() -> None:
    data = struct.pack(">h", 2) + topics_array(("a",)) + b(None) + partitions_array(OWNED) + struct.pack(">i", 12)
    sub = decode_subscription(data)
    assert (sub.owned_partitions, sub.generation_id, sub.rack_id) == (OWNED, 12, None)


def test_v3_reads_generation_and_rack() -> None:
    sub = decode_subscription(v3())
    assert sub == Subscription(3, ("a", "b"), b"ud", OWNED, 7, "rack-1")


def test_v3_with_null_rack() -> None:
    sub = decode_subscription(v3(rack=None))
    assert (sub.generation_id, sub.rack_id) == (7, None)


def test_newer_version_is_read_as_v3_ignoring_trailing_fields() -> None:
    data = v3(version=4) + struct.pack(">i", 99) + s("some future field") + b"\x00\x01\x02"
    sub = decode_subscription(data)
    expected = decode_subscription(v3())
    assert (sub.topics, sub.user_data, sub.owned_partitions, sub.generation_id, sub.rack_id) == (
        expected.topics, expected.user_data, expected.owned_partitions, expected.generation_id, expected.rack_id)
    assert (sub.topics, sub.owned_partitions, sub.generation_id, sub.rack_id) == (("a", "b"), OWNED, 7, "rack-1")


@pytest.mark.parametrize("data", [
    pytest.param(b"", id="empty"),
    pytest.param(b"\x00", id="one-byte"),
    pytest.param(v0()[:-2], id="truncated-user-data-length"),
    pytest.param(v0(("topic",))[:9], id="truncated-topic-string"),
    pytest.param(struct.pack(">hi", 0, 3) + s("a"), id="fewer-topics-than-count"),
    pytest.param(struct.pack(">hi", 0, -1) + b(None), id="negative-topic-count"),
    pytest.param(struct.pack(">hi", 0, 2**31 - 1) + b(None), id="huge-topic-count"),
    pytest.param(struct.pack(">h", 1) + topics_array(("a",)) + b(None) + struct.pack(">i", -5), id="negative-owned-count"),
    pytest.param(struct.pack(">h", 1) + topics_array(("a",)) + b(None) + struct.pack(">i", 1) + s("a")
                 + struct.pack(">i", 10**9), id="huge-partition-count"),
    pytest.param(struct.pack(">h", 0) + struct.pack(">i", 1) + s(None) + b(None), id="null-topic"),
    pytest.param(struct.pack(">h", 0) + struct.pack(">i", 1) + struct.pack(">h", 2) + b"\xff\xfe" + b(None),
                 id="bad-utf8"),
    pytest.param(struct.pack(">h", -1) + topics_array(("a",)) + b(None), id="negative-version"),
    pytest.param(v3()[:-3], id="truncated-rack"),
])
def test_malformed_subscriptions_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_subscription(data)


# -- assignments ---------------------------------------------------------------------------------


def test_assignment_bytes_are_kafkas_layout() -> None:
    data = encode_assignment([("t", [1, 0])], 1, b"ud")
    assert data == struct.pack(">h", 1) + partitions_array((("t", (0, 1)),)) + b(b"ud")
    assert encode_assignment([], 0) == struct.pack(">hi", 0, 0) + b(None)


def test_assignment_round_trip_sorts_and_drops_empty_topics() -> None:
    data = encode_assignment([("b", [2, 0]), ("a", {3, 1}), ("c", []), ("d", (5,))], 2)
    assert decode_assignment(data) == (("a", (1, 3)), ("b", (0, 2)), ("d", (5,)))
    assert version_of(data) == 2
    # The same partitions in any input order encode to the same bytes.
    assert data == encode_assignment([("d", [5]), ("a", [1, 3]), ("b", [0, 2])], 2)


@pytest.mark.parametrize(("asked", "written"), [(0, 0), (1, 1), (3, 3), (4, 3), (7, 3), (-1, 0), (-5, 0)])
def test_assignment_version_is_clamped(asked: int, written: int) -> None:
    data = encode_assignment([("a", [0])], asked)
    assert version_of(data) == written
    assert written <= HIGHEST_VERSION
    assert decode_assignment(data) == (("a", (0,)),)


def test_empty_assignment_bytes_mean_no_partitions() -> None:
    assert decode_assignment(b"") == ()


def test_assignment_with_user_data_round_trips() -> None:
    data = encode_assignment([("a", [4])], 3, b"\x00\x01")
    assert decode_assignment(data) == (("a", (4,)),)
    assert data.endswith(b(b"\x00\x01"))


@pytest.mark.parametrize("data", [
    pytest.param(b"\x00", id="one-byte"),
    pytest.param(struct.pack(">hi", 0, 5), id="count-without-rows"),
    pytest.param(struct.pack(">hi", 0, -1), id="negative-count"),
    pytest.param(struct.pack(">hi", 0, 1) + s("a") + struct.pack(">i", 2**31 - 1), id="huge-partition-count"),
])
def test_malformed_assignments_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_assignment(data)


def test_version_of() -> None:
    assert version_of(v0()) == 0
    assert version_of(v3()) == 3
    assert version_of(v3(version=9)) == 9
    assert version_of(b"\x00\x02") == 2
    assert version_of(b"\xff\xff") == -1
    for short in (b"", b"\x00"):
        with pytest.raises(ValueError):
            version_of(short)
