"""ElectLeaders (43) v0–2, AlterPartitionReassignments (45) v0–1 and ListPartitionReassignments (46)
v0, answered as a single-node Kafka answers them: every partition already has its preferred and
only replica as leader, so an election is never needed, and the only valid reassignment is to the
replicas the partition has, which completes at once (nothing is ever in progress)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import Op, refuse_cluster
from sharebroker.broker.apis.topics_admin import check_manual_assignment
from sharebroker.protocol.codec import DecodedRequest, build, response_class
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

_PREFERRED, _UNCLEAN = 0, 1
# Kafka's default messages of these errors
_ELECTION_NOT_NEEDED = "Leader election not needed for topic partition."
_NO_REASSIGNMENT = "No partition reassignment is in progress."


def _election(broker: Broker, topic_name: str, index: int) -> tuple[ErrorCode, str | None]:
    topic = broker.topics.get(topic_name)
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, f"No such topic as {topic_name}"
    if not 0 <= index < len(topic.partitions):
        return ErrorCode.unknown_topic_or_partition, f"No such partition as {topic_name}-{index}"
    return ErrorCode.election_not_needed, _ELECTION_NOT_NEEDED


@api(43)
async def elect_leaders(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    if (denied := refuse_cluster(broker, conn, req, Op.ALTER)) is not None:
        return denied
    body = req.body
    cls = response_class(43, req.api_version)
    election_type = int(getattr(body, "election_type", _PREFERRED))
    if election_type not in (_PREFERRED, _UNCLEAN):
        message = f"Unknown election type {election_type}"
        return build(cls, {"throttle_time": 0, "error_code": ErrorCode.invalid_request, "replica_election_results": [
            {"topic": t.topic, "partition_result": [{"partition_id": p, "error_code": ErrorCode.invalid_request,
                                                     "error_message": message} for p in t.partitions]}
            for t in body.topic_partitions or ()]})
    results: list[dict[str, Any]]
    if body.topic_partitions is None:
        # Every partition; as Kafka, those that need no election are left out of their topic's results.
        results = [{"topic": name, "partition_result": []} for name in broker.topics.by_name]
    else:
        results = []
        for t in body.topic_partitions:
            partitions = []
            for index in t.partitions:
                code, error_message = _election(broker, t.topic, index)
                partitions.append({"partition_id": index, "error_code": code, "error_message": error_message})
            results.append({"topic": t.topic, "partition_result": partitions})
    return build(cls, {"throttle_time": 0, "error_code": ErrorCode.none, "replica_election_results": results})


def _reassign(broker: Broker, topic_name: str, index: int, replicas: Any) -> None:
    topic = broker.topics.get(topic_name)
    if topic is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {topic_name}.")
    if not 0 <= index < len(topic.partitions):
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Unable to find partition {topic_name}:{index}.")
    if replicas is None:  # cancel
        raise KafkaError(ErrorCode.no_reassignment_in_progress, _NO_REASSIGNMENT)
    check_manual_assignment(broker, replicas)  # valid here only as [this broker]: no change to make


@api(45)
async def alter_partition_reassignments(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    if (denied := refuse_cluster(broker, conn, req, Op.ALTER)) is not None:
        return denied
    body = req.body
    responses = []
    for t in body.topics:
        partitions = []
        for p in t.partitions:
            code, message = ErrorCode.none, None
            try:
                _reassign(broker, t.name, p.partition_index, p.replicas)
            except KafkaError as exc:
                code, message = exc.code, exc.message
            partitions.append({"partition_index": p.partition_index, "error_code": code, "error_message": message})
        responses.append({"name": t.name, "partitions": partitions})
    return build(response_class(45, req.api_version), {
        "throttle_time": 0, "allow_replication_factor_change": getattr(body, "allow_replication_factor_change", True),
        "error_code": ErrorCode.none, "error_message": None, "responses": responses})


@api(46)
async def list_partition_reassignments(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    if (denied := refuse_cluster(broker, conn, req, Op.DESCRIBE)) is not None:
        return denied
    return build(response_class(46, req.api_version), {
        "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "topics": ()})
