"""The ACL checks handlers make, answering a refused request as Kafka's KafkaApis does (the
request's error response with the resource's *_AUTHORIZATION_FAILED code). Each returns None when
the request may go on: always at once when the broker has no authorizer."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import error_response
from sharebroker.broker.security.acl_store import AclOperation, ResourceType
from sharebroker.broker.security.authorizer import all_operations_bits
from sharebroker.protocol.codec import DecodedRequest, build, response_class

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

Op = AclOperation
Res = ResourceType
INT32_MIN = -(2**31)

CLUSTER_DENIED = "Cluster authorization failed."
GROUP_DENIED = "Group authorization failed."
TRANSACTIONAL_ID_DENIED = "Transactional Id authorization failed."
TOPIC_DENIED = "Topic authorization failed."


def refuse_cluster(broker: Broker, conn: Connection, req: DecodedRequest, op: AclOperation) -> Any | None:
    az = broker.authorizer
    if az is None or az.allows_cluster(conn, op):
        return None
    return error_response(req, ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)


def refuse_group(broker: Broker, conn: Connection, req: DecodedRequest, op: AclOperation, group_id: str) -> Any | None:
    az = broker.authorizer
    if az is None or az.allows(conn, op, Res.GROUP, group_id):
        return None
    return error_response(req, ErrorCode.group_authorization_failed, GROUP_DENIED)


def refuse_transactional_id(broker: Broker, conn: Connection, req: DecodedRequest, transactional_id: str,
                            op: AclOperation = Op.WRITE) -> Any | None:
    az = broker.authorizer
    if az is None or az.allows(conn, op, Res.TRANSACTIONAL_ID, transactional_id):
        return None
    return error_response(req, ErrorCode.transactional_id_authorization_failed, TRANSACTIONAL_ID_DENIED)


def allows(broker: Broker, conn: Connection, op: AclOperation, rtype: ResourceType, name: str) -> bool:
    az = broker.authorizer
    return az is None or az.allows(conn, op, rtype, name)


def topics_allowed(broker: Broker, conn: Connection, op: AclOperation, names: Any) -> set[str] | None:
    """The topic names the principal may do `op` on; None (all of them) without an authorizer."""
    az = broker.authorizer
    return None if az is None else az.filter(conn, op, Res.TOPIC, (n for n in names if n is not None))


def refuse_heartbeat(broker: Broker, conn: Connection, req: DecodedRequest) -> Any | None:
    """ConsumerGroupHeartbeat and ShareGroupHeartbeat, as Kafka: READ on the group, else
    GROUP_AUTHORIZATION_FAILED; DESCRIBE on every topic subscribed to, else
    TOPIC_AUTHORIZATION_FAILED (a member may not subscribe to topics it may not describe). Kafka's
    answer is the error code alone, with no message."""
    az = broker.authorizer
    if az is None:
        return None
    body = req.body
    code = None
    if not az.allows(conn, Op.READ, Res.GROUP, body.group_id):
        code = ErrorCode.group_authorization_failed
    elif subscribed := getattr(body, "subscribed_topic_names", None):
        described = topics_allowed(broker, conn, Op.DESCRIBE, subscribed)
        if described is not None and len(described) < len(set(subscribed)):
            code = ErrorCode.topic_authorization_failed
    if code is None:
        return None
    return build(response_class(req.api_key, req.api_version), {"throttle_time": 0, "error_code": code})


def topic_refusal(broker: Broker, conn: Connection, op: AclOperation = Op.READ) -> Callable[[Any], bool] | None:
    """For the share APIs, which name topics by id: a predicate telling whether the principal is
    refused `op` on the topic with that id (each topic checked once); None without an authorizer."""
    az = broker.authorizer
    if az is None:
        return None
    verdicts: dict[Any, bool] = {}

    def refused(topic_id: Any) -> bool:
        verdict = verdicts.get(topic_id)
        if verdict is None:
            topic = broker.topics.get_by_id(topic_id)
            # an unknown id is answered UNKNOWN_TOPIC_ID by the handler, as Kafka does
            verdict = verdicts[topic_id] = topic is not None and not az.allows(conn, op, Res.TOPIC, topic.name)
        return verdict
    return refused


def operations(broker: Broker, conn: Connection, include: bool, rtype: ResourceType, name: str) -> int:
    """authorized_operations for a describe response: INT32_MIN when not asked for."""
    if not include:
        return INT32_MIN
    az = broker.authorizer
    return all_operations_bits(rtype) if az is None else az.operations_bits(conn, rtype, name)


def hide_unauthorized_topics(broker: Broker, conn: Connection, groups: list[dict[str, Any]]) -> None:
    """ConsumerGroupDescribe/ShareGroupDescribe, as Kafka: a group whose members are assigned a
    topic the principal may not describe is answered TOPIC_AUTHORIZATION_FAILED instead."""
    az = broker.authorizer
    if az is None:
        return

    def assigned(group: dict[str, Any]) -> set[str]:
        names: set[str] = set()
        for member in group.get("members") or ():
            for key in ("assignment", "target_assignment"):
                assignment = member.get(key) if isinstance(member, dict) else None
                for tp in (assignment or {}).get("topic_partitions", ()) if isinstance(assignment, dict) else ():
                    names.add(tp["topic_name"])
        return names

    per_group = [assigned(g) for g in groups]
    wanted = set().union(*per_group)
    described = az.filter(conn, Op.DESCRIBE, Res.TOPIC, wanted) if wanted else set()
    for i, group in enumerate(groups):
        if per_group[i] - described:
            groups[i] = {**group, "error_code": ErrorCode.topic_authorization_failed, "members": (),
                         "error_message": "The group has described topic(s) that the client is not authorized to "
                                          "describe.", "authorized_operations": INT32_MIN}


__all__ = ["INT32_MIN", "Op", "Res", "allows", "hide_unauthorized_topics", "operations", "topic_refusal", "refuse_cluster", "refuse_group",
           "refuse_transactional_id", "topics_allowed"]
