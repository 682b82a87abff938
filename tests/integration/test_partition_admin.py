"""ElectLeaders and partition reassignments answered as a single-node Kafka answers them: no
election is ever needed, the only valid reassignment is to this broker (done at once), nothing is
in progress; unknown topics and partitions and bad replica lists get Kafka's errors and messages."""

from __future__ import annotations

import datetime

import pytest
from confluent_kafka import ElectionType, TopicPartition
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError, UnknownTopicOrPartitionError

from tests.integration import rawkafka as rk
from tests.integration.clients import admin, create_topic

ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT = 84, 3, 39
NO_REASSIGNMENT_IN_PROGRESS, INVALID_REQUEST = 85, 42
TIMEOUT = 15.0


@pytest.fixture
def kp_admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    yield client
    client.close()


def test_confluent_elect_leaders_is_never_needed(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=2)
    a = admin(broker.bootstrap)  # the handle must outlive its futures
    result = a.elect_leaders(
        ElectionType.PREFERRED, [TopicPartition(topic_name, 0), TopicPartition(topic_name, 5),
                                 TopicPartition(f"{topic_name}-missing", 0)]).result(timeout=TIMEOUT)
    got = {(tp.topic, tp.partition): (err.code(), err.str()) for tp, err in result.items()}
    assert got == {
        (topic_name, 0): (ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        (topic_name, 5): (UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic_name}-5"),
        (f"{topic_name}-missing", 0): (UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic_name}-missing"),
    }
    # All partitions: those that need no election are left out, as Kafka does.
    assert a.elect_leaders(ElectionType.UNCLEAN, None).result(timeout=TIMEOUT) == {}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_every_version(broker, topic_name, version: int) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=1)
    cls = rk.req_cls(43, version)
    tp = rk._nested(cls, "topic_partitions")
    fields = {"topic_partitions": (tp(topic=topic_name, partitions=(0,)),), "timeout": datetime.timedelta(seconds=10)}
    if version >= 1:
        fields["election_type"] = 0
    with rk.RawClient(broker.bootstrap) as raw:
        resp = raw.request(cls(**fields))
    (result,) = resp.replica_election_results
    assert result.topic == topic_name
    assert [(p.partition_id, int(p.error_code)) for p in result.partition_result] == [(0, ELECTION_NOT_NEEDED)]
    assert int(getattr(resp, "error_code", 0)) == 0


def test_an_unknown_election_type_is_an_invalid_request(broker, topic_name) -> None:
    cls = rk.req_cls(43, 2)
    tp = rk._nested(cls, "topic_partitions")
    with rk.RawClient(broker.bootstrap) as raw:
        resp = raw.request(cls(election_type=7, topic_partitions=(tp(topic=topic_name, partitions=(0, 1)),),
                               timeout=datetime.timedelta(seconds=10)))
    assert int(resp.error_code) == INVALID_REQUEST
    assert [(p.partition_id, int(p.error_code), p.error_message) for p in resp.replica_election_results[0].partition_result] \
        == [(0, INVALID_REQUEST, "Unknown election type 7"), (1, INVALID_REQUEST, "Unknown election type 7")]


def test_reassignments_to_this_broker_only_and_none_in_progress(broker, kp_admin, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=2)
    result = kp_admin.alter_partition_reassignments({
        KpTopicPartition(topic_name, 0): [1],
        KpTopicPartition(topic_name, 1): [1, 2],
        KpTopicPartition(topic_name, 9): [1],
        KpTopicPartition(f"{topic_name}-missing", 0): [1],
    })
    assert result == {
        KpTopicPartition(topic_name, 0): None,
        KpTopicPartition(topic_name, 1): InvalidReplicationAssignmentError,
        KpTopicPartition(topic_name, 9): UnknownTopicOrPartitionError,
        KpTopicPartition(f"{topic_name}-missing", 0): UnknownTopicOrPartitionError,
    }
    assert kp_admin.alter_partition_reassignments({KpTopicPartition(topic_name, 0): None}) == {
        KpTopicPartition(topic_name, 0): NoReassignmentInProgressError}
    assert kp_admin.list_partition_reassignments() == {}
    assert kp_admin.list_partition_reassignments({topic_name: [0, 1]}) == {}


@pytest.mark.parametrize("replicas, message", [
    ((), "The manual partition assignment includes an empty replica list."),
    ((1, 2), "The manual partition assignment includes broker 2, but no such broker is registered."),
    ((1, 1), "The manual partition assignment includes the broker 1 more than once."),
])
def test_reassignment_messages_are_kafkas(broker, topic_name, replicas, message) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=1)
    cls = rk.req_cls(45, 1)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    with rk.RawClient(broker.bootstrap) as raw:
        resp = raw.request(cls(timeout=datetime.timedelta(seconds=10), allow_replication_factor_change=True, topics=(
            tcls(name=topic_name, partitions=(pcls(partition_index=0, replicas=replicas),)),)))
    (p,) = resp.responses[0].partitions
    assert (int(p.error_code), p.error_message) == (INVALID_REPLICA_ASSIGNMENT, message)
    assert int(resp.error_code) == 0
