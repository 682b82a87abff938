"""The direct Metadata encoder writes, for every served version, the bytes kio writes for the
same response (an error topic, an internal one, a topic of several partitions, brokers with and
without a rack, authorized operations)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from sharebroker.protocol.codec import build, encode_response, response_class
from sharebroker.protocol.metadata_responses import (
    INT32_MIN,
    MetadataBroker,
    MetadataPartition,
    MetadataTopic,
    encode_metadata_response,
)

NODE = 1
TOPICS = [
    MetadataTopic(0, "orders", uuid.UUID(int=0x1234), False, [MetadataPartition(i, i % 3) for i in range(5)], 3320),
    MetadataTopic(0, "__consumer_offsets", uuid.UUID(int=0x99), True, [MetadataPartition(0, 7)]),
    MetadataTopic(3, "missing", None, False, ()),
]
BROKERS = [MetadataBroker(NODE, "localhost", 9092, None), MetadataBroker(2, "other", 19092, "rack-b")]


def kio_bytes(version: int, cluster_ops: int) -> bytes:
    topics: list[dict[str, Any]] = []
    for t in TOPICS:
        topics.append({"error_code": ErrorCode(t.error_code), "name": t.name, "topic_id": t.topic_id,
                       "is_internal": t.is_internal, "topic_authorized_operations": t.authorized_operations,
                       "partitions": [{"error_code": ErrorCode.none, "partition_index": p.index, "leader_id": NODE,
                                       "leader_epoch": p.leader_epoch, "replica_nodes": (NODE,),
                                       "isr_nodes": (NODE,), "offline_replicas": ()} for p in t.partitions]})
    data = {"throttle_time": 0, "cluster_id": "cid", "controller_id": NODE, "topics": topics,
            "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack} for b in BROKERS],
            "error_code": ErrorCode.none, "cluster_authorized_operations": cluster_ops}
    return encode_response(42, build(response_class(3, version), data))


@pytest.mark.parametrize("version", range(14))
def test_every_version_matches_kio(version: int) -> None:
    for cluster_ops in (INT32_MIN, 0x1FA0):
        ours = encode_metadata_response(42, version, brokers=BROKERS, cluster_id="cid", controller_id=NODE,
                                        topics=TOPICS, node_id=NODE, cluster_authorized_operations=cluster_ops)
        assert b"".join(ours) == kio_bytes(version, cluster_ops)
