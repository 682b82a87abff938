"""Metadata (3) v0–13: this node as the only broker, controller and leader of every partition;
topics by name or by topic id (v10+); auto topic creation. Encoded directly
(protocol/metadata_responses.py): Metadata(all) lists every partition."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.topics_admin import auto_create
from sharebroker.broker.security.acl_store import CLUSTER_NAME, AclOperation, ResourceType
from sharebroker.broker.structured_log import get_logger
from sharebroker.broker.topics import Topic
from sharebroker.protocol.errors import KafkaError, error_code_for
from sharebroker.protocol.metadata_responses import (
    INT32_MIN,
    MetadataBroker,
    MetadataTopic,
    encode_metadata_response,
)
from sharebroker.protocol.topic_names import validate_topic_name
from sharebroker.protocol.codec import DecodedRequest

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.metadata")
ZERO_UUID = uuid.UUID(int=0)
# AclOperation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
# CREATE 5, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


def topic_entry(topic: Topic, include_ops: bool, conn: Connection) -> MetadataTopic:
    ops = INT32_MIN
    if include_ops:
        az = conn.broker.authorizer
        ops = TOPIC_OPERATIONS if az is None else az.operations_bits(conn, ResourceType.TOPIC, topic.name)
    return MetadataTopic(ErrorCode.none.value, topic.name, topic.topic_id, topic.internal, topic.partitions, ops)


def _error_topic(name: str | None, topic_id: uuid.UUID | None, code: ErrorCode) -> MetadataTopic:
    return MetadataTopic(code.value, name, topic_id, False, ())


async def _missing_topic(broker: Broker, name: str, conn: Connection, allow_auto: bool) -> ErrorCode:
    """The error for a topic that does not exist: INVALID_TOPIC_EXCEPTION for an illegal name
    whether or not the request may create topics (Kafka's getTopicMetadata validates the name; the
    Java share consumer asks without auto-creation), else auto_create's answer, with a failure (a
    full disk, a bug) answered in this topic's entry only."""
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return exc.code
    if not allow_auto:
        return ErrorCode.unknown_topic_or_partition
    try:
        return await auto_create(broker, name)
    except Exception as exc:
        code, message = error_code_for(exc)
        log.error("auto topic creation failed", topic=name, error=code.name, message=message, conn=conn.id,
                  exc_info=exc if code == ErrorCode.unknown_server_error else None)
        return code


def _topic_id(item: Any) -> uuid.UUID | None:
    """The entry's topic id, None when absent or zero (kio reads the zero id as None)."""
    topic_id: uuid.UUID | None = getattr(item, "topic_id", None)
    return None if topic_id == ZERO_UUID else topic_id


async def _requested_topics(broker: Broker, conn: Connection, v: int, requested: Any, allow_auto: bool,
                            include_ops: bool) -> list[MetadataTopic]:
    """Entries for a request naming topics. As Kafka's handleTopicMetadataRequest: as soon as one
    entry carries a non-zero topic id the request is by id, and names are ignored (Java clients send
    name "" beside the id); unknown ids come first with UNKNOWN_TOPIC_ID."""
    ids = list(dict.fromkeys(t for t in map(_topic_id, requested) if t is not None))
    if v < 12:
        if any(item.name is None for item in requested):
            raise KafkaError(ErrorCode.invalid_request, f"Topic name can not be null for version {v}")
        if ids:
            raise KafkaError(ErrorCode.invalid_request, f"Topic IDs are not supported in requests for version {v}")
    topics = broker.topics
    az = broker.authorizer
    if ids:
        found = [(topic_id, topics.get_by_id(topic_id)) for topic_id in ids]
        described = (None if az is None else
                     az.filter(conn, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for _, t in found if t is not None)))
        # as Kafka: topic ids are not secret, so a refused one is answered by id
        return ([_error_topic(None, topic_id, ErrorCode.unknown_topic_id) for topic_id, topic in found if topic is None]
                + [topic_entry(topic, include_ops, conn) for _, topic in found
                   if topic is not None and (described is None or topic.name in described)]
                + [_error_topic(None, topic.topic_id, ErrorCode.topic_authorization_failed) for _, topic in found
                   if topic is not None and described is not None and topic.name not in described])
    names = list(dict.fromkeys(item.name for item in requested if item.name is not None))
    refused: list[MetadataTopic] = []
    if az is not None:
        # Kafka hides whether a topic the principal may not describe exists; one it may describe but
        # not create is not auto-created (CREATE on the cluster or on the topic is needed)
        described = az.filter(conn, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        refused = [_error_topic(n, None, ErrorCode.topic_authorization_failed) for n in names if n not in described]
        names = [n for n in names if n in described]
        missing = [n for n in names if topics.get(n) is None]
        if (missing and allow_auto and broker.config["auto.create.topics.enable"]
                and not az.allows_cluster(conn, AclOperation.CREATE, log_denied=False)):
            creatable = az.filter(conn, AclOperation.CREATE, ResourceType.TOPIC, missing)
            refused = [_error_topic(n, None, ErrorCode.topic_authorization_failed)
                       for n in missing if n not in creatable] + refused
            names = [n for n in names if n in creatable or n not in missing]
    entries = []
    for name in names:
        topic = topics.get(name)
        if topic is None:
            code = await _missing_topic(broker, name, conn, allow_auto)
            topic = topics.get(name)
            if topic is None:
                entries.append(_error_topic(name, None, code))
                continue
        entries.append(topic_entry(topic, include_ops, conn))
    return entries + refused


@api(3)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    include_ops = bool(getattr(body, "include_topic_authorized_operations", False))
    # v0: an empty list means all topics; v1+: null means all topics.
    requested = body.topics
    all_topics = requested is None or (v == 0 and len(requested) == 0)
    allow_auto = getattr(body, "allow_auto_topic_creation", True)
    az = broker.authorizer
    if all_topics:
        known = sorted(broker.topics.by_name.values(), key=lambda t: t.name)
        if az is not None:  # topics the principal may not describe are left out, as Kafka does
            described = az.filter(conn, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in known),
                                  log_denied=False)
            known = [t for t in known if t.name in described]
        entries = [topic_entry(t, include_ops, conn) for t in known]
    else:
        entries = await _requested_topics(broker, conn, v, requested, allow_auto, include_ops)
    workers = broker.workers
    if workers is None:
        host, port = broker.endpoint(conn.listener)
        brokers = [MetadataBroker(broker.node_id, host, port, broker.config["broker.rack"])]
    else:  # every worker is a broker; each partition is led by its owner
        brokers = [MetadataBroker(node, host, port, broker.config["broker.rack"]) for node, host, port in workers.brokers()]
    cluster_ops = INT32_MIN
    if getattr(body, "include_cluster_authorized_operations", False):
        if az is None:
            cluster_ops = CLUSTER_OPERATIONS
        elif az.allows_cluster(conn, AclOperation.DESCRIBE):
            cluster_ops = az.operations_bits(conn, ResourceType.CLUSTER, CLUSTER_NAME)
        else:
            cluster_ops = 0
    return encode_metadata_response(req.correlation_id, v, brokers=brokers, cluster_id=broker.cluster_id,
                                    controller_id=brokers[0].node_id, topics=entries, node_id=broker.node_id,
                                    cluster_authorized_operations=cluster_ops,
                                    leader_of=None if workers is None else workers.leader_of)
