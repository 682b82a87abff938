"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44) for TOPIC, BROKER and
GROUP resources, and ListConfigResources (74). Values are validated by config/ with Kafka's names,
ranges and messages."""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import (
    CLUSTER_DENIED,
    GROUP_DENIED,
    TOPIC_DENIED,
    Op,
    Res,
    allows,
    refuse_cluster,
)
from sharebroker.broker.security.acl_store import CLUSTER_NAME, AclOperation
from sharebroker.broker.structured_log import get_logger
from sharebroker.config import (
    ConfigError,
    describe_broker_configs,
    describe_topic_configs,
    validate_topic_overrides,
)
from sharebroker.protocol.codec import DecodedRequest, build, response_class
from sharebroker.protocol.errors import KafkaError
from sharebroker.protocol.topic_names import validate_topic_name

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.configs")

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _check_broker_name(broker: Broker, name: str, *, altering: bool) -> None:
    """A BROKER resource is "" (the cluster default) or this node's id, parsed as Java's toInt
    parses it ("01" is node 1); the words are ConfigHelper's for DescribeConfigs and
    ConfigAdminManager's for the alters."""
    if name == "":
        return
    if not re.fullmatch(r"[+-]?[0-9]+", name) or not -2**31 <= int(name) < 2**31:
        raise KafkaError(ErrorCode.invalid_request, f"{'Node' if altering else 'Broker'} id must be an integer, "
                                                    f"but it is: {name}")
    if int(name) != broker.node_id:
        expected = f"{broker.node_id}," if altering else f"{broker.node_id} or empty string,"
        raise KafkaError(ErrorCode.invalid_request, f"Unexpected broker id, expected {expected} but received {name}")


def _check_group_name(name: str) -> None:
    if not name:
        raise KafkaError(ErrorCode.invalid_request, "Group name can't be empty.")


def _described(broker: Broker, resource_type: int, name: str) -> list[Any]:
    if resource_type == TOPIC:
        validate_topic_name(name)
        topic = broker.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition)  # Kafka's ConfigHelper sends no message
        return describe_topic_configs(broker.config, topic.overrides)
    if resource_type == BROKER:
        _check_broker_name(broker, name, altering=False)
        return describe_broker_configs(broker.config, per_broker=name != "")
    if resource_type == GROUP:
        _check_group_name(name)
        return broker.share_groups.describe_configs(name)
    raise KafkaError(ErrorCode.invalid_request, f"Unsupported resource type {resource_type} for DescribeConfigs.")


def _check_access(broker: Broker, conn: Connection, resource_type: int, name: str, op: AclOperation) -> None:
    """As Kafka's ConfigHelper/ControllerApis: DESCRIBE_CONFIGS or ALTER_CONFIGS on the cluster for
    broker-wide resources, on the topic or group for theirs, refused with that resource's error."""
    if broker.authorizer is None:
        return
    if resource_type == TOPIC:
        if not allows(broker, conn, op, Res.TOPIC, name):
            raise KafkaError(ErrorCode.topic_authorization_failed, TOPIC_DENIED)
    elif resource_type == GROUP:
        if not allows(broker, conn, op, Res.GROUP, name):
            raise KafkaError(ErrorCode.group_authorization_failed, GROUP_DENIED)
    elif not allows(broker, conn, op, Res.CLUSTER, CLUSTER_NAME):
        raise KafkaError(ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)


@api(32)
async def describe(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    include_synonyms = getattr(body, "include_synonyms", False)
    include_docs = getattr(body, "include_documentation", False)
    results = []
    for r in body.resources:
        entry: dict[str, Any] = {"error_code": ErrorCode.none, "error_message": None,
                                 "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": ()}
        try:
            _check_access(broker, conn, r.resource_type, r.resource_name, Op.DESCRIBE_CONFIGS)
            described = _described(broker, r.resource_type, r.resource_name)
            keys = set(r.configuration_keys) if r.configuration_keys is not None else None
            entry["configs"] = [
                {"name": d.name, "value": d.value, "read_only": d.read_only, "config_source": d.source,
                 "is_sensitive": d.is_sensitive, "config_type": d.config_type,
                 "documentation": d.documentation if include_docs else None,
                 "synonyms": [{"name": syn.name, "value": syn.value, "source": syn.source} for syn in d.synonyms]
                 if include_synonyms else ()}
                for d in described if keys is None or d.name in keys
            ]
        except KafkaError as exc:
            entry.update(error_code=exc.code, error_message=exc.message or None)
        results.append(entry)
    return build(response_class(32, req.api_version), {"throttle_time": 0, "results": results})


def _new_topic_overrides(current: dict[str, str], changes: list[tuple[str, int, str | None]], incremental: bool) -> dict[str, str]:
    if not incremental:
        return {name: value for name, _, value in changes if value is not None}
    result = dict(current)
    from sharebroker.config import TOPIC_CONFIGS
    for name, op, value in changes:
        if op == SET:
            if value is None:
                raise KafkaError(ErrorCode.invalid_request, f"Null value not supported for: {name}")
            result[name] = value
        elif op == DELETE:
            result.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            definition = TOPIC_CONFIGS.get(name)
            if definition is None:
                raise KafkaError(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
            if definition.type != "list":
                raise KafkaError(ErrorCode.invalid_config,
                                 f"Config value append is not allowed for config key: {name}" if op == APPEND
                                 else f"Config value subtract is not allowed for config key: {name}")
            items = [i for i in (result.get(name) or "").split(",") if i]
            extra = [i for i in (value or "").split(",") if i]
            if op == APPEND:
                items += [i for i in extra if i not in items]
            else:
                items = [i for i in items if i not in extra]
            result[name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"Unknown config operation {op} for {name}")
    return result


def _alter(broker: Broker, resource_type: int, name: str, changes: list[tuple[str, int, str | None]],
           validate_only: bool, incremental: bool) -> None:
    if any(n > 1 for n in Counter(c[0] for c in changes).values()):
        raise KafkaError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    if resource_type == TOPIC:
        topic = broker.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
        proposed = _new_topic_overrides(topic.overrides, changes, incremental)
        try:
            validated = validate_topic_overrides(proposed)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        if not validate_only:
            broker.topics.set_overrides(name, validated)
        return
    if resource_type == BROKER:
        _check_broker_name(broker, name, altering=True)
        for config_name, op, _ in changes:
            if op not in (SET, DELETE):
                raise KafkaError(ErrorCode.invalid_config,
                                 f"Config operation {op} is not supported for broker config {config_name}")
        try:
            broker.alter_broker_configs(changes, per_broker=name != "", incremental=incremental,
                                        validate_only=validate_only)
        except ConfigError as exc:
            # As Kafka's ConfigAdminManager, which answers a dynamic broker config that fails its
            # validation (a value, a setting not dynamic, a rule such as a bound) with INVALID_REQUEST
            # and the check's message (KAFKA-13609 keeps it so).
            raise KafkaError(ErrorCode.invalid_request, str(exc)) from None
        return
    if resource_type == GROUP:
        _check_group_name(name)
        try:
            broker.share_groups.alter_configs(name, changes, validate_only=validate_only, incremental=incremental)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        return
    raise KafkaError(ErrorCode.invalid_request, f"Unsupported resource type {resource_type} for altering configs.")


async def _alter_request(broker: Broker, conn: Connection, req: DecodedRequest, incremental: bool) -> Any:
    body = req.body
    key = 44 if incremental else 33
    dupes = Counter((r.resource_type, r.resource_name) for r in body.resources)
    responses = []
    for r in body.resources:
        entry: dict[str, Any] = {"error_code": ErrorCode.none, "error_message": None,
                                 "resource_type": r.resource_type, "resource_name": r.resource_name}
        try:
            if dupes[(r.resource_type, r.resource_name)] > 1:
                raise KafkaError(ErrorCode.invalid_request,
                                 f"Error due to duplicate resource {r.resource_name} of type {r.resource_type}")
            _check_access(broker, conn, r.resource_type, r.resource_name, Op.ALTER_CONFIGS)
            changes = [(c.name, getattr(c, "config_operation", SET), c.value) for c in r.configs]
            _alter(broker, r.resource_type, r.resource_name, changes, body.validate_only, incremental)
            if not body.validate_only:
                log.info("configs altered", resource_type=r.resource_type, resource=r.resource_name,
                         changes=[(n, op, v) for n, op, v in changes])
        except KafkaError as exc:
            entry.update(error_code=exc.code, error_message=exc.message)
        responses.append(entry)
    return build(response_class(key, req.api_version), {"throttle_time": 0, "responses": responses})


@api(33)
async def alter(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    return await _alter_request(broker, conn, req, incremental=False)


@api(44)
async def incremental_alter(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    return await _alter_request(broker, conn, req, incremental=True)


@api(74)
async def list_config_resources(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    """As Kafka's KafkaApis.handleListConfigResources: v0 (ListClientMetricsResources) knows only
    client-metrics resources, v1 every type it lists; no types asks for all of them, and one the
    version does not know answers UNSUPPORTED_VERSION. Groups are those with configs; there are no
    client-metrics resources here."""
    cls = response_class(74, req.api_version)
    if (denied := refuse_cluster(broker, conn, req, Op.DESCRIBE_CONFIGS)) is not None:
        return denied
    supported = (CLIENT_METRICS,) if req.api_version == 0 else (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)
    wanted = set(getattr(req.body, "resource_types", ()) or supported)
    if not wanted <= set(supported):
        return build(cls, {"throttle_time": 0, "error_code": ErrorCode.unsupported_version, "config_resources": ()})
    node = str(broker.node_id)
    found: list[tuple[str, int]] = []
    if GROUP in wanted:
        found += [(group_id, GROUP) for group_id in sorted(broker.share_groups.configs)]
    for resource_type in (BROKER_LOGGER, BROKER):
        if resource_type in wanted:
            found.append((node, resource_type))
    if TOPIC in wanted:
        found += [(name, TOPIC) for name in sorted(broker.topics.by_name)]
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none,
                       "config_resources": [{"resource_name": n, "resource_type": t} for n, t in found]})
