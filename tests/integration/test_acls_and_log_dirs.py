"""What admin tools send on connect besides topics and groups: the ACL calls, answered as a Kafka
broker without an authorizer answers them (SECURITY_DISABLED), and DescribeLogDirs with the size of
each partition's log."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType
from kafka.errors import SecurityDisabledError

from tests.integration import rawkafka as rk
from tests.integration.clients import admin, create_topic, produce_sync, producer_conf

SECURITY_DISABLED = 54
TIMEOUT = 15.0


def _kafka_python_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_describe_acls_is_security_disabled_in_every_version(broker, version: int) -> None:
    cls = rk.req_cls(29, version)
    with rk.RawClient(broker.bootstrap) as raw:
        resp = raw.request(cls(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                               principal_filter=None, host_filter=None, operation=1, permission_type=1))
    assert (int(resp.error_code), resp.error_message, resp.resources) == (
        SECURITY_DISABLED, "No Authorizer is configured on the broker", ())


def test_kafka_python_describe_acls_raises_security_disabled(broker) -> None:
    client = _kafka_python_admin(broker.bootstrap)
    try:
        with pytest.raises(SecurityDisabledError, match="No Authorizer is configured."):
            client.describe_acls(ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                                           permission_type=ACLPermissionType.ANY,
                                           resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None,
                                                                                  ACLResourcePatternType.ANY)))
    finally:
        client.close()


def test_confluent_create_and_delete_acls_fail_with_security_disabled(broker) -> None:
    a = admin(broker.bootstrap)
    bindings = [AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW) for name in ("orders", "payments")]
    created = a.create_acls(bindings, request_timeout=10)
    assert len(created) == 2
    for future in created.values():
        with pytest.raises(Exception) as info:
            future.result(timeout=TIMEOUT)
        err = info.value.args[0]
        assert (err.code(), err.str()) == (SECURITY_DISABLED, "No Authorizer is configured.")
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    (deleted,) = a.delete_acls([everything], request_timeout=10).values()
    with pytest.raises(Exception) as info:
        deleted.result(timeout=TIMEOUT)
    assert info.value.args[0].code() == SECURITY_DISABLED


def _log_dirs(bootstrap: str, topic_partitions: dict[str, list[int]] | None = None) -> list[dict]:
    client = _kafka_python_admin(bootstrap)
    try:
        (result,) = client.describe_log_dirs(topic_partitions)
    finally:
        client.close()
    return result["log_dirs"]


def test_describe_log_dirs_sizes_each_partition(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=2)
    produce_sync(Producer(producer_conf(broker.bootstrap)), topic_name,
                 [{"value": b"x" * 1000, "partition": 0} for _ in range(5)])
    (log_dir,) = _log_dirs(broker.bootstrap)
    assert log_dir["error_code"] == 0 and Path(log_dir["log_dir"]).is_absolute()
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
    (ours,) = [t for t in log_dir["topics"] if t["name"] == topic_name]
    sizes = {p["partition_index"]: p["partition_size"] for p in ours["partitions"]}
    assert sizes[1] == 0 and sizes[0] > 5 * 1000
    assert {(p["offset_lag"], p["is_future_key"]) for p in ours["partitions"]} == {(0, False)}

    # Only what is asked for; a partition that does not exist is left out, as in Kafka.
    (asked,) = _log_dirs(broker.bootstrap, {topic_name: [0, 7]})
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in asked["topics"]] == [(topic_name, [0])]
    assert asked["topics"][0]["partitions"][0]["partition_size"] == sizes[0]


def test_describe_log_dirs_size_is_the_bytes_on_disk(make_broker, topic_name) -> None:
    b = make_broker()
    create_topic(b.bootstrap, topic_name, partitions=1, config={"segment.bytes": str(1 << 20)})
    produce_sync(Producer(producer_conf(b.bootstrap)), topic_name, [{"value": b"y" * 100_000} for _ in range(25)])
    (log_dir,) = _log_dirs(b.bootstrap, {topic_name: [0]})
    assert log_dir["log_dir"] == str(Path(b.data_dir).resolve())
    on_disk = sum(f.stat().st_size for f in (Path(b.data_dir) / f"{topic_name}-0").glob("*.log"))
    assert len(list((Path(b.data_dir) / f"{topic_name}-0").glob("*.log"))) > 1  # rolled: sizes add up
    assert log_dir["topics"][0]["partitions"][0]["partition_size"] == on_disk
