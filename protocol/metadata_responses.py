"""A direct encoder for Metadata (3) responses v0-13.

Metadata(all topics) lists every partition: with kio's build and generic writer that cost about
10 µs per partition (100 ms at 10,000 partitions). Here each partition is one struct pack of the
layout of MetadataResponse.json, its replica lists being this one node. Joined, the buffers are
byte for byte what kio writes for the same content (tests/unit/test_metadata_encoder.py checks
every version). A field a version lacks is left out, as codec.build does."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sharebroker.protocol.primitives import write_compact_str, write_uvarint

__all__ = ["INT32_MIN", "MetadataBroker", "MetadataPartition", "MetadataTopic", "PartitionLike",
           "encode_metadata_response"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">ii")  # size (patched last), correlation id
_ZERO_UUID = bytes(16)
_FLEXIBLE = 9
INT32_MIN = -(2**31)


@dataclass(slots=True)
class MetadataBroker:
    node_id: int
    host: str
    port: int
    rack: str | None


class PartitionLike(Protocol):
    """A partition led by this node: the broker's own Partition objects are passed as they are."""

    @property
    def index(self) -> int: ...

    @property
    def leader_epoch(self) -> int: ...


@dataclass(slots=True)
class MetadataPartition:
    index: int
    leader_epoch: int


@dataclass(slots=True)
class MetadataTopic:
    error_code: int
    name: str | None
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: Sequence[PartitionLike]
    authorized_operations: int = INT32_MIN


def _str(out: bytearray, s: str | None, flexible: bool, nullable: bool) -> None:
    if flexible:
        write_compact_str(out, s)
        return
    if s is None:
        if not nullable:
            raise TypeError("null string in a field that is not nullable in this version")
        out += _I16.pack(-1)
        return
    data = s.encode()
    out += _I16.pack(len(data))
    out += data


def _count(out: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        write_uvarint(out, n + 1)
    else:
        out += _I32.pack(n)


def _partition_struct(version: int) -> struct.Struct:
    """error, index, leader, [epoch], replicas [node], isr [node], [offline []], [tags]: the node
    lists are the one leader."""
    if version >= _FLEXIBLE:
        return struct.Struct(">hiiibibibb")  # compact arrays: length + 1, then no tags
    layout = ">hii" + ("i" if version >= 7 else "") + "iiii" + ("i" if version >= 5 else "")
    return struct.Struct(layout)


def _led_partition(pack: Callable[..., bytes], version: int, p: PartitionLike, node: int) -> bytes:
    if version >= _FLEXIBLE:
        return pack(0, p.index, node, p.leader_epoch, 2, node, 2, node, 1, 0)
    if version >= 7:
        return pack(0, p.index, node, p.leader_epoch, 1, node, 1, node, 0)
    if version >= 5:
        return pack(0, p.index, node, 1, node, 1, node, 0)
    return pack(0, p.index, node, 1, node, 1, node)


def encode_metadata_response(correlation_id: int, version: int, *, brokers: Sequence[MetadataBroker],
                             cluster_id: str | None, controller_id: int, topics: Sequence[MetadataTopic],
                             node_id: int, cluster_authorized_operations: int = INT32_MIN,
                             error_code: int = 0, throttle_time_ms: int = 0,
                             leader_of: Callable[[str | None, int], int] | None = None) -> list[bytearray]:
    """The whole response frame (size, header, body) as one buffer in a list (what a handler
    returns to be written as is). Partitions are led by `node_id`, the only replica, and carry no
    error. With `leader_of` (several worker processes), each partition is led by the node it names.
    """
    flexible = version >= _FLEXIBLE
    out = bytearray(_HEAD.pack(0, correlation_id))
    if flexible:
        out.append(0)  # response header v1: no tags
    if version >= 3:
        out += _I32.pack(throttle_time_ms)
    _count(out, len(brokers), flexible)
    for b in brokers:
        out += _I32.pack(b.node_id)
        _str(out, b.host, flexible, False)
        out += _I32.pack(b.port)
        if version >= 1:
            _str(out, b.rack, flexible, True)
        if flexible:
            out.append(0)
    if version >= 2:
        _str(out, cluster_id, flexible, True)
    if version >= 1:
        out += _I32.pack(controller_id)
    _count(out, len(topics), flexible)
    part = _partition_struct(version)
    pack = part.pack
    with_epoch = version >= 7
    for t in topics:
        out += _I16.pack(t.error_code)
        _str(out, t.name, flexible, version >= 12)
        if version >= 10:
            out += t.topic_id.bytes if t.topic_id is not None else _ZERO_UUID
        if version >= 1:
            out.append(1 if t.is_internal else 0)
        _count(out, len(t.partitions), flexible)
        if leader_of is not None:
            out += b"".join([_led_partition(pack, version, p, leader_of(t.name, p.index)) for p in t.partitions])
        elif flexible:
            out += b"".join([pack(0, p.index, node_id, p.leader_epoch, 2, node_id, 2, node_id, 1, 0)
                             for p in t.partitions])
        elif version >= 5:
            if with_epoch:
                out += b"".join([pack(0, p.index, node_id, p.leader_epoch, 1, node_id, 1, node_id, 0)
                                 for p in t.partitions])
            else:
                out += b"".join([pack(0, p.index, node_id, 1, node_id, 1, node_id, 0)
                                 for p in t.partitions])
        else:
            out += b"".join([pack(0, p.index, node_id, 1, node_id, 1, node_id) for p in t.partitions])
        if version >= 8:
            out += _I32.pack(t.authorized_operations)
        if flexible:
            out.append(0)
    if 8 <= version <= 10:
        out += _I32.pack(cluster_authorized_operations)
    if version >= 13:
        out += _I16.pack(error_code)
    if flexible:
        out.append(0)
    _I32.pack_into(out, 0, len(out) - 4)
    return [out]
