"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37) and auto topic creation."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, Res, allows
from sharebroker.broker.quotas import MutationQuota
from sharebroker.broker.flusher import now_ms
from sharebroker.broker.structured_log import get_logger
from sharebroker.broker.topics import INTERNAL_TOPICS, check_partition_count
from sharebroker.config import ConfigError, describe_topic_configs, validate_topic_overrides
from sharebroker.protocol.codec import DecodedRequest, build, response_class
from sharebroker.protocol.errors import KafkaError
from sharebroker.protocol.topic_names import validate_topic_name

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.admin")


def _check_replication(broker: Broker, replication_factor: int) -> None:
    if replication_factor == -1:
        replication_factor = broker.config["default.replication.factor"]
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         "Replication factor must be larger than 0, or -1 to use the default value.")
    if replication_factor > 1:
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         f"Unable to replicate the partition {replication_factor} time(s): The target replication "
                         f"factor of {replication_factor} cannot be reached because only 1 broker(s) are registered.")


def check_manual_assignment(broker: Broker, broker_ids: Any) -> None:
    """A replica list given by hand (CreateTopics, CreatePartitions, AlterPartitionReassignments),
    checked as Kafka's controller checks it, with its messages."""
    ids = sorted(broker_ids or ())
    if not ids:
        raise KafkaError(ErrorCode.invalid_replica_assignment, "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker_id in ids:
        if broker_id != broker.node_id:
            raise KafkaError(ErrorCode.invalid_replica_assignment, f"The manual partition assignment includes broker "
                                                                  f"{broker_id}, but no such broker is registered.")
        if broker_id == previous:
            raise KafkaError(ErrorCode.invalid_replica_assignment, f"The manual partition assignment includes the broker "
                                                                  f"{broker_id} more than once.")
        previous = broker_id


def _validate_new_topic(broker: Broker, name: str) -> None:
    validate_topic_name(name)
    if broker.topics.get(name) is not None or name in broker.topics.creating:
        raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    other = broker.topics.collision(name)
    if other is not None:
        raise KafkaError(ErrorCode.invalid_topic_exception,
                         f"Topic '{name}' collides with existing topic: {other}")


async def auto_create(broker: Broker, name: str) -> ErrorCode:
    """Metadata-triggered creation of a valid name (auto.create.topics.enable), as Kafka's AutoTopicCreationManager
    does in KRaft: the Metadata request that triggers it is answered UNKNOWN_TOPIC_OR_PARTITION at
    once and the topic is created after it, as a CreateTopics with num.partitions and
    default.replication.factor sent to the controller would be; while that creation is pending,
    further requests get the same answer and no second creation. The client sees the topic (with a
    new topic id, if a deleted one is re-created) at its next metadata refresh."""
    if not broker.config["auto.create.topics.enable"]:
        return ErrorCode.unknown_topic_or_partition
    if name in INTERNAL_TOPICS:
        # Their coordinators create them on first use with their own partition counts and
        # settings; num.partitions would break the group-to-partition mapping.
        return ErrorCode.unknown_topic_or_partition
    pending = broker.topics.auto_creating
    if name not in pending and name not in broker.topics.creating:
        pending.add(name)
        if broker.workers is not None and not broker.topics.writable:  # worker 0 creates topics
            broker.workers.auto_create(name)
        else:
            broker.spawn(_create_auto(broker, name))
    return ErrorCode.unknown_topic_or_partition


async def _create_auto(broker: Broker, name: str) -> None:
    """The deferred half of auto_create, validated like any CreateTopics: if an explicit CreateTopics
    created the topic first, this one fails (as Kafka's does with TOPIC_ALREADY_EXISTS) and changes
    nothing."""
    broker.topics.auto_creating.discard(name)
    try:
        _validate_new_topic(broker, name)
        _check_replication(broker, -1)
        await broker.topics.create_async(name, broker.config["num.partitions"], {}, now_ms())
    except KafkaError as exc:
        level = log.info if exc.code == ErrorCode.topic_already_exists else log.warning
        level("auto topic creation refused", topic=name, error=exc.code.name, message=exc.message)
    except Exception:  # noqa: BLE001 - a failure (a full disk, a bug) is logged, the client retries
        log.exception("auto topic creation failed", topic=name)


def _config_entries(broker: Broker, overrides: dict[str, str]) -> list[dict[str, Any]]:
    return [{"name": d.name, "value": d.value, "read_only": d.read_only, "config_source": d.source,
             "is_sensitive": d.is_sensitive} for d in describe_topic_configs(broker.config, overrides)]


def _mutation_quota(broker: Broker, conn: Connection, *, strict: bool) -> MutationQuota | None:
    """controller_mutation_rate for this request (None without quotas): from the version Kafka
    made it strict, a topic is refused THROTTLING_QUOTA_EXCEEDED once the quota is used up;
    before, the mutations are only counted and the response throttled."""
    if not broker.quotas.active:
        return None
    return broker.quotas.mutation(conn.principal.name, conn.client_id or "", strict=strict)


def _throttle_ms(mutations: MutationQuota | None) -> int:
    return 0 if mutations is None else mutations.throttle_ms()


@api(19)
async def create_topics(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    counts = Counter(t.name for t in body.topics)
    results = []
    az = broker.authorizer
    # as Kafka: CREATE on the cluster creates any topic, else CREATE on each topic is needed; the
    # configs are returned only with DESCRIBE_CONFIGS on the topic
    creatable = (None if az is None or az.allows_cluster(conn, Op.CREATE, log_denied=False)
                 else az.filter(conn, Op.CREATE, Res.TOPIC, counts))
    mutations = _mutation_quota(broker, conn, strict=req.api_version >= 6)
    for t in body.topics:
        entry: dict[str, Any] = {"name": t.name, "error_code": ErrorCode.none, "error_message": None,
                                 "num_partitions": -1, "replication_factor": -1, "configs": None,
                                 "topic_config_error_code": 0}
        try:
            if counts[t.name] > 1:
                raise KafkaError(ErrorCode.invalid_request,
                                 f"Create topics request from client `{conn.client_id}` contains multiple entries "
                                 f"for the following topics: {t.name}")
            if creatable is not None and t.name not in creatable:
                raise KafkaError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            _validate_new_topic(broker, t.name)
            if t.assignments:
                if t.num_partitions != -1 or t.replication_factor != -1:
                    raise KafkaError(ErrorCode.invalid_request,
                                     "Both numPartitions or replicationFactor and replicasAssignments were set. "
                                     "Both cannot be used at the same time.")
                indexes = sorted(a.partition_index for a in t.assignments)
                if indexes != list(range(len(indexes))):
                    raise KafkaError(ErrorCode.invalid_replica_assignment,
                                     "Partitions should be a consecutive 0-based integer sequence")
                for a in t.assignments:
                    check_manual_assignment(broker, a.broker_ids)
                partitions = len(indexes)
            else:
                partitions = t.num_partitions
                if partitions == -1:
                    partitions = broker.config["num.partitions"]
                if partitions <= 0:
                    raise KafkaError(ErrorCode.invalid_partitions,
                                     "Number of partitions was set to an invalid non-positive value.")
                _check_replication(broker, t.replication_factor)
            try:
                overrides = validate_topic_overrides({c.name: c.value for c in t.configs})
            except ConfigError as exc:
                raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
            if mutations is not None:
                mutations.check()
            if not body.validate_only:
                topic = await broker.topics.create_async(t.name, partitions, overrides, now_ms())
                entry["topic_id"] = topic.topic_id
                if mutations is not None:
                    mutations.record(partitions)
            entry.update(num_partitions=partitions, replication_factor=1,
                         configs=_config_entries(broker, overrides))
            if az is not None and not az.allows(conn, Op.DESCRIBE_CONFIGS, Res.TOPIC, t.name, log_denied=False):
                entry.update(configs=None, topic_config_error_code=ErrorCode.topic_authorization_failed)
        except KafkaError as exc:
            entry.update(error_code=exc.code, error_message=exc.message)
            log.warning("create topic refused", topic=t.name, error=exc.code.name, message=exc.message)
        results.append(entry)
    return build(response_class(19, req.api_version), {"throttle_time": _throttle_ms(mutations), "topics": results})


@api(20)
async def delete_topics(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    v = req.api_version
    if v >= 6:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    name_counts = Counter(n for n, _ in wanted if n is not None)
    az = broker.authorizer
    any_topic = az is None or az.allows_cluster(conn, Op.DELETE, log_denied=False)
    mutations = _mutation_quota(broker, conn, strict=v >= 5)
    responses = []
    for name, topic_id in wanted:
        entry: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_code": ErrorCode.none, "error_message": None}
        try:
            if name is not None and topic_id is not None:
                raise KafkaError(ErrorCode.invalid_request, "Only one of topic name or topic id may be given.")
            if name is not None and name_counts[name] > 1:
                raise KafkaError(ErrorCode.invalid_request, "Duplicate topic name.")
            topic = broker.topics.get(name) if name is not None else broker.topics.get_by_id(topic_id)
            target = name if name is not None else getattr(topic, "name", None)
            if not any_topic and az is not None and target is not None \
                    and not az.allows(conn, Op.DELETE, Res.TOPIC, target):
                if name is None:
                    entry.update(name=None)
                raise KafkaError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            if topic is None:
                if name is None:
                    raise KafkaError(ErrorCode.unknown_topic_id, f"Topic id {topic_id} does not exist.")
                raise KafkaError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
            entry.update(name=topic.name, topic_id=topic.topic_id)
            if not broker.config["delete.topic.enable"]:
                raise KafkaError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled.")
            if topic.internal:
                raise KafkaError(ErrorCode.invalid_request, f"Cannot delete internal topic {topic.name}.")
            if mutations is not None:
                mutations.check()
            await broker.delete_topic(topic.name)
            if mutations is not None:
                mutations.record(len(topic.partitions))
        except KafkaError as exc:
            entry.update(error_code=exc.code, error_message=exc.message)
        responses.append(entry)
    return build(response_class(20, v), {"throttle_time": _throttle_ms(mutations), "responses": responses})


@api(37)
async def create_partitions(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    counts = Counter(t.name for t in body.topics)
    results = []
    mutations = _mutation_quota(broker, conn, strict=req.api_version >= 3)
    for t in body.topics:
        entry: dict[str, Any] = {"name": t.name, "error_code": ErrorCode.none, "error_message": None}
        try:
            if counts[t.name] > 1:
                raise KafkaError(ErrorCode.invalid_request, "Duplicate topic in request.")
            if not allows(broker, conn, Op.ALTER, Res.TOPIC, t.name):
                raise KafkaError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            topic = broker.topics.get(t.name)
            if topic is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"The topic '{t.name}' does not exist.")
            current = len(topic.partitions)
            check_partition_count(current, t.count)
            if t.assignments is not None:
                if len(t.assignments) != t.count - current:
                    raise KafkaError(ErrorCode.invalid_replica_assignment,
                                     f"Attempted to add {t.count - current} additional partition(s), but only "
                                     f"{len(t.assignments)} assignment(s) were specified.")
                for a in t.assignments:
                    check_manual_assignment(broker, a.broker_ids)
            if mutations is not None:
                mutations.check()
            if not body.validate_only:
                current = await broker.add_partitions(t.name, t.count)
                if mutations is not None:
                    mutations.record(t.count - current)
        except KafkaError as exc:
            entry.update(error_code=exc.code, error_message=exc.message)
        results.append(entry)
    return build(response_class(37, req.api_version), {"throttle_time": _throttle_ms(mutations), "results": results})
