"""What ShareFetch (78) and ShareAcknowledge (79) share: request validation, session handling on
the connection, and applying acknowledgement batches partition by partition."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.share.partition import validate_acknowledgement_batches
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.server import Broker

MAX_MEMBER_ID_LENGTH = 36


def check_ids(group_id: str | None, member_id: str | None) -> None:
    if group_id is None:
        raise KafkaError(ErrorCode.invalid_request, "Invalid group id in the request.")
    if not member_id or len(member_id) > MAX_MEMBER_ID_LENGTH:
        raise KafkaError(ErrorCode.invalid_request, "Invalid member id in the request.")


def merge_topics(topics: Any) -> dict[tuple[Any, int], Any]:
    """(topic id, partition) → the request's partition entry; clients may split one topic's
    partitions across several topic entries, so merge by topic id."""
    out: dict[tuple[Any, int], Any] = {}
    for t in topics:
        for p in t.partitions:
            out[(t.topic_id, p.partition_index)] = p
    return out


def resolve_partition(broker: Broker, topic_id: Any, index: int) -> tuple[Any, ErrorCode | None, str | None]:
    topic = broker.topics.get_by_id(topic_id)
    if topic is None:
        return None, ErrorCode.unknown_topic_id, f"Topic id {topic_id} is not known."
    if not 0 <= index < len(topic.partitions):
        return None, ErrorCode.unknown_topic_or_partition, f"Partition {index} of topic {topic.name} does not exist."
    return topic.partitions[index], None, None


async def apply_acknowledgements(broker: Broker, group_id: str, member_id: str, topic_id: Any, index: int,
                                 batches: Any, *, version: int, is_renew: bool,
                                 topics: dict[str, bool] | None = None) -> tuple[ErrorCode, str | None]:
    """Acknowledge one partition's batches; the (error code, message) for its response entry.
    With metrics on, `topics` collects the request's topics (name -> whether a partition failed)."""
    if not batches:
        return ErrorCode.none, None
    code, message, partition = await _acknowledge(broker, group_id, member_id, topic_id, index, batches, version,
                                                  is_renew)
    if topics is not None and partition is not None:
        name = partition.topic.name
        topics[name] = topics.get(name, False) or bool(code)  # ErrorCode.none is 0
    return code, message


async def _acknowledge(broker: Broker, group_id: str, member_id: str, topic_id: Any, index: int, batches: Any,
                       version: int, is_renew: bool) -> tuple[ErrorCode, str | None, Any]:
    """(error code, message, the partition when it exists)."""
    acks = [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in batches]
    problem = validate_acknowledgement_batches(acks, version=version, is_renew=is_renew)
    if problem is not None:
        return ErrorCode.invalid_request, problem, None
    partition, code, message = resolve_partition(broker, topic_id, index)
    if partition is None:
        return code, message, None  # type: ignore[return-value]
    leader = broker.share.existing_leader(group_id, topic_id, index)
    if leader is None:
        return ErrorCode.unknown_topic_or_partition, "The share partition is not loaded on this broker.", partition
    try:
        await leader.acknowledge(member_id, acks, is_renew=is_renew)
    except KafkaError as exc:
        return exc.code, exc.message, partition
    if broker.metrics.enabled:
        broker.metrics.share_acknowledged(acks)
    return ErrorCode.none, None, partition


def current_leader(broker: Broker, partition: Any) -> dict[str, int]:
    if partition is None:
        return {"leader_id": -1, "leader_epoch": -1}
    return {"leader_id": broker.node_id, "leader_epoch": partition.leader_epoch}
