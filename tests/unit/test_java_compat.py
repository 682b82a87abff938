"""Java's String.hashCode and Kafka's Utils.abs placement of internal-topic keys, against values
printed by a JVM (String.hashCode, then Utils.abs(h) % 50 and h & 0x7fffffff % 50)."""

from __future__ import annotations

import uuid

import pytest

from sharebroker.broker.apis.cluster_admin import java_hashmap_order
from sharebroker.broker.groups.records import offsets_partition
from sharebroker.broker.java_compat import partition_for_key, string_hash, utils_abs
from sharebroker.broker.share_state.records import state_partition
from sharebroker.broker.transactions.coordinator import partition_for

INT_MIN = -(2**31)


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("polygenelubricants", INT_MIN),
    ("café", 3045921),
    ("share-group", -1035553007),
    ("abcdefg", -1206291356),
])
def test_string_hash_matches_java(text: str, expected: int) -> None:
    assert string_hash(text) == expected


def test_string_hash_counts_utf16_code_units() -> None:
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16: two units, so 31 * high + low.
    assert string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00 == 1772899
    assert string_hash("x\U0001F600") == ord("x") * 31 * 31 + 31 * 0xD83D + 0xDE00 == 1888219


def test_string_hash_is_a_signed_int32() -> None:
    for text in ("abcdefg", "x" * 100, "\U0001F600" * 7, "polygenelubricants"):
        assert INT_MIN <= string_hash(text) < 2**31


def test_utils_abs() -> None:
    assert utils_abs(0) == 0
    assert utils_abs(5) == 5
    assert utils_abs(-5) == 5
    assert utils_abs(2**31 - 1) == 2**31 - 1
    assert utils_abs(INT_MIN) == 0  # Math.abs(Integer.MIN_VALUE) is itself; Kafka maps it to 0
    assert partition_for_key("polygenelubricants", 50) == 0


def test_negative_hash_places_by_abs_not_by_sign_mask() -> None:
    h = string_hash("abcdefg")
    assert h < 0
    assert partition_for_key("abcdefg", 50) == 6  # Utils.abs(h) % 50, as the JVM gives it
    assert (h & 0x7FFFFFFF) % 50 == 42  # the old placement: a different partition
    assert partition_for_key("share-group", 50) == 7 != (string_hash("share-group") & 0x7FFFFFFF) % 50


def test_every_internal_topic_places_with_it() -> None:
    for key in ("abcdefg", "share-group", "hello", "polygenelubricants", ""):
        assert offsets_partition(key, 50) == partition_for_key(key, 50)
        assert partition_for(key, 50) == partition_for_key(key, 50)
    tid = uuid.UUID(int=0x1234)
    # SharePartitionKey.asCoordinatorKey: "group:<base64 topic id>:partition"
    assert state_partition("g", tid, 3, 50) == partition_for_key("g:AAAAAAAAAAAAAAAAAAASNA:3", 50)


def test_hashmap_order_uses_the_unsigned_hash() -> None:
    # new HashMap<String, _>() with these put in this order iterates its keySet() so (JVM output);
    # three of them have a negative hashCode.
    keys = ["abcdefg", "a", "share-group", "hello", "zz", "polygenelubricants"]
    assert java_hashmap_order(keys) == ["zz", "polygenelubricants", "a", "share-group", "hello", "abcdefg"]
