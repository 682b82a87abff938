"""Java arithmetic that Kafka's on-disk layout depends on. Kafka places the keys of its internal
topics (`__consumer_offsets`, `__transaction_state`, `__share_group_state`) on a partition with
`Utils.abs(key.hashCode()) % numPartitions`; computing it the same way keeps a data directory laid
out as Kafka lays it out, and iteration orders that follow java.util.HashMap in Kafka's order."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["partition_for_key", "string_hash", "utils_abs"]

_INT_MIN = -(1 << 31)


def string_hash(text: str) -> int:
    """java.lang.String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over the UTF-16 code units (a
    character outside the BMP counts as its two surrogates), as a signed 32-bit int."""
    if text.isascii():  # one code unit per character: the common case, without re-encoding
        units: Iterable[int] = text.encode("ascii")
    else:
        data = text.encode("utf-16-be", "surrogatepass")
        units = (data[i] << 8 | data[i + 1] for i in range(0, len(data), 2))
    h = 0
    if len(text) <= 64:
        for unit in units:
            h = 31 * h + unit  # exact; reduced to 32 bits once at the end, as Java's overflow would
    else:  # a long key: reduce as it goes, or the exact value would grow with every character
        for unit in units:
            h = (31 * h + unit) & 0xFFFFFFFF
    h &= 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def utils_abs(n: int) -> int:
    """org.apache.kafka.common.utils.Utils.abs: 0 for Integer.MIN_VALUE (whose Math.abs is itself,
    negative), Math.abs otherwise."""
    return 0 if n == _INT_MIN else abs(n)


def partition_for_key(key: str, num_partitions: int) -> int:
    """The partition of an internal topic that Kafka places `key` on:
    Utils.abs(key.hashCode()) % numPartitions."""
    return utils_abs(string_hash(key)) % num_partitions
