"""Cluster-level describe calls of admin tools (kafbat's statistics and quota pages,
kafka-metadata-quorum.sh, kafka-configs.sh, Redpanda Console's users page), answered as a single
combined Kafka 4.2 node without security answers them: DescribeQuorum with this node as the only
voter, no client quotas, no SCRAM users, and no delegation tokens on a listener without security."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaException
from kafka.admin import KafkaAdminClient

from tests.integration import rawkafka as rk
from tests.integration.clients import admin

NONE, UNKNOWN_TOPIC_OR_PARTITION, UNSUPPORTED_VERSION, INVALID_REQUEST = 0, 3, 35, 42
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE = 64, 91, 92
TIMEOUT = 15.0
NO_SUCH_USER = "Attempt to describe a user credential that does not exist: "
DUPLICATE_USER = "Cannot describe SCRAM credentials for the same user twice in a single request: "


def _request(bootstrap: str, api_key: int, version: int, **fields: object) -> object:
    cls = rk.req_cls(api_key, version)
    with rk.RawClient(bootstrap) as raw:
        return raw.request(cls(**rk._fit(cls, fields)))


def _kafka_python_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)


def _this_node(bootstrap: str) -> tuple[int, str, int]:
    meta = _request(bootstrap, 3, 12, topics=(), allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False)
    (b,) = meta.brokers
    return b.node_id, b.host, b.port


def _listener_name(bootstrap: str, node_id: int, port: int) -> str:
    """The name of the listener clients reach on `port`: PLAINTEXT for a broker of the tests' own
    (one listener, on an ephemeral port), INTERNAL for the compose broker (several)."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    client = admin(bootstrap)
    resource = ConfigResource(ResourceType.BROKER, str(node_id))
    configs = client.describe_configs([resource])[resource].result(timeout=TIMEOUT)
    listeners = [item.strip().partition("://") for item in (configs["listeners"].value or "").split(",")]
    if len(listeners) == 1:
        return listeners[0][0]
    for name, _, address in listeners:
        if address.rpartition(":")[2] == str(port):
            return name
    raise AssertionError(f"no listener of node {node_id} on port {port}: {configs['listeners'].value}")


def test_api_versions_advertises_exactly_these_ranges(broker) -> None:
    with rk.RawClient(broker.bootstrap) as raw:
        resp = raw.request(rk.api_versions_request(3))
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert {key: keys.get(key) for key in (41, 48, 49, 50, 55)} == {
        41: (1, 3), 48: (0, 1), 49: (0, 1), 50: (0, 0), 55: (0, 2)}


# -- DescribeQuorum (55) -------------------------------------------------------------------------


def _quorum_request(version: int, topics: list[tuple[str, list[int]]]) -> dict[str, object]:
    cls = rk.req_cls(55, version)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    return {"topics": tuple(tcls(topic_name=name, partitions=tuple(pcls(partition_index=i) for i in parts))
                            for name, parts in topics)}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_quorum_has_this_node_as_leader_and_only_voter(broker, version: int) -> None:
    node_id, host, port = _this_node(broker.bootstrap)
    before = int(time.time() * 1000)
    resp = _request(broker.bootstrap, 55, version, **_quorum_request(version, [("__cluster_metadata", [0])]))
    after = int(time.time() * 1000)
    assert int(resp.error_code) == NONE
    (topic,) = resp.topics
    (p,) = topic.partitions
    assert (topic.topic_name, p.partition_index, int(p.error_code)) == ("__cluster_metadata", 0, NONE)
    assert (p.leader_id, p.leader_epoch, p.high_watermark) == (node_id, 1, 0)
    (voter,) = p.current_voters
    assert (voter.replica_id, voter.log_end_offset) == (node_id, p.high_watermark)
    assert p.observers == ()
    if version >= 1:  # the leader reports itself fetched and caught up now
        assert before <= voter.last_fetch_timestamp == voter.last_caught_up_timestamp <= after
    if version >= 2:
        assert (resp.error_message, p.error_message) == ("", "")
        assert voter.replica_directory_id in (None, uuid.UUID(int=0))  # static quorum: none
        (node,) = resp.nodes
        assert node.node_id == node_id
        listener = _listener_name(broker.bootstrap, node_id, port)
        assert [(li.name, li.host, li.port) for li in node.listeners] == [(listener, host, port)]


@pytest.mark.parametrize("version", [0, 2])
@pytest.mark.parametrize("topics", [
    [("__cluster_metadata", [1])],
    [("orders", [0])],
    [("__cluster_metadata", [0, 1])],
    [("__cluster_metadata", [0]), ("orders", [3])],
    [],
])
def test_describe_quorum_of_anything_else_is_unknown_topic_or_partition(broker, version, topics) -> None:
    resp = _request(broker.bootstrap, 55, version, **_quorum_request(version, topics))
    assert int(resp.error_code) == NONE
    assert [(t.topic_name, [(p.partition_index, int(p.error_code), p.leader_id, p.leader_epoch, p.high_watermark,
                             p.current_voters, p.observers) for p in t.partitions]) for t in resp.topics] == [
        (name, [(i, UNKNOWN_TOPIC_OR_PARTITION, 0, 0, 0, (), ()) for i in parts]) for name, parts in topics]
    if version >= 2:
        assert resp.nodes == ()
        assert {p.error_message for t in resp.topics for p in t.partitions} <= {
            "This server does not host this topic-partition."}


def test_kafka_python_describe_metadata_quorum(broker) -> None:
    node_id, host, port = _this_node(broker.bootstrap)
    client = _kafka_python_admin(broker.bootstrap)
    try:
        result = client.describe_metadata_quorum()
    finally:
        client.close()
    (topic,) = result["topics"]
    (p,) = topic["partitions"]
    assert (topic["topic_name"], p["partition_index"], p["error"]) == ("__cluster_metadata", 0, None)
    assert (p["leader_id"], p["leader_epoch"], [v["replica_id"] for v in p["current_voters"]], p["observers"]) == (
        node_id, 1, [node_id], [])
    assert [(n["node_id"], [(li["name"], li["host"], li["port"]) for li in n["listeners"]])
            for n in result["nodes"]] == [(node_id, [(_listener_name(broker.bootstrap, node_id, port), host,
                                                      port)])]


# -- DescribeClientQuotas (48) -------------------------------------------------------------------


def _quotas(bootstrap: str, version: int, components: list[tuple[str, int, str | None]], strict: bool = False):
    cls = rk.req_cls(48, version)
    ccls = rk._nested(cls, "components")
    return _request(bootstrap, 48, version, strict=strict,
                    components=tuple(ccls(entity_type=t, match_type=m, match=s) for t, m, s in components))


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("components", [
    [],
    [("user", 0, "alice")],
    [("user", 1, None)],
    [("client-id", 2, None)],
    [("user", 0, "alice"), ("client-id", 1, None)],
    [("ip", 0, "10.0.0.1")],
    [("ip", 2, None)],
])
def test_describe_client_quotas_finds_none(broker, version, strict, components) -> None:
    resp = _quotas(broker.bootstrap, version, components, strict)
    assert (int(resp.error_code), resp.error_message, resp.entries) == (NONE, "", ())


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize(("components", "code", "message"), [
    ([("", 0, "x")], INVALID_REQUEST, "Invalid empty entity type."),
    ([("user", 0, "a"), ("user", 1, None)], INVALID_REQUEST, "Entity type user cannot appear more than once in the filter."),
    ([("group", 2, None)], UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([("user", 0, None)], INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", 1, "a")], INVALID_REQUEST, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("client-id", 2, "a")], INVALID_REQUEST,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("user", 7, None)], INVALID_REQUEST, "Unknown match type 7"),
    ([("ip", 2, None), ("user", 0, "a")], INVALID_REQUEST, "Invalid entity filter component combination. "
     "IP filter component should not be used with user or clientId filter component."),
])
def test_describe_client_quotas_refuses_invalid_filters(broker, version, components, code, message) -> None:
    for strict in (False, True):
        resp = _quotas(broker.bootstrap, version, components, strict)
        assert (int(resp.error_code), resp.error_message, resp.entries) == (code, message, None)


# -- DescribeUserScramCredentials (50) -----------------------------------------------------------


def _scram(bootstrap: str, users: list[str] | None):
    cls = rk.req_cls(50, 0)
    ucls = rk._nested(cls, "users")
    return _request(bootstrap, 50, 0, users=None if users is None else tuple(ucls(name=u) for u in users))


@pytest.mark.parametrize("users", [None, []])
def test_describe_scram_credentials_of_every_user_is_empty(broker, users) -> None:
    resp = _scram(broker.bootstrap, users)
    assert (int(resp.error_code), resp.error_message, resp.results) == (NONE, "", ())


def test_describe_scram_credentials_of_named_users(broker) -> None:
    resp = _scram(broker.bootstrap, ["alice", "bob", "carol", "alice"])
    assert int(resp.error_code) == NONE
    # In the order Kafka's HashMap of the names iterates them.
    assert [(r.user, int(r.error_code), r.error_message, r.credential_infos) for r in resp.results] == [
        ("carol", RESOURCE_NOT_FOUND, NO_SUCH_USER + "carol", ()),
        ("bob", RESOURCE_NOT_FOUND, NO_SUCH_USER + "bob", ()),
        ("alice", DUPLICATE_RESOURCE, DUPLICATE_USER + "alice", ()),
    ]


def test_confluent_describe_user_scram_credentials(broker) -> None:
    a = admin(broker.bootstrap)
    assert a.describe_user_scram_credentials(request_timeout=10).result(timeout=TIMEOUT) == {}
    futures = a.describe_user_scram_credentials(["alice"], request_timeout=10)
    with pytest.raises(KafkaException) as info:
        futures["alice"].result(timeout=TIMEOUT)
    err = info.value.args[0]
    # librdkafka reads the user's error message without its end (rdkafka_admin.c takes the wire
    # string's pointer as a C string), so the next bytes of the frame follow it, as with Kafka.
    assert (err.code(), err.str()[:len(NO_SUCH_USER) + 5]) == (RESOURCE_NOT_FOUND, NO_SUCH_USER + "alice")


def test_kafka_python_describe_user_scram_credentials(broker) -> None:
    client = _kafka_python_admin(broker.bootstrap)
    try:
        assert client.describe_user_scram_credentials() == {}
        assert client.describe_user_scram_credentials(["alice", "alice", "bob"]) == {
            "alice": {"error": DUPLICATE_USER + "alice", "credential_infos": []},
            "bob": {"error": NO_SUCH_USER + "bob", "credential_infos": []},
        }
    finally:
        client.close()


# -- DescribeDelegationToken (41) ----------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("owners", [None, [("User", "alice")]])
def test_describe_delegation_token_is_not_allowed_on_plaintext(broker, version, owners) -> None:
    cls = rk.req_cls(41, version)
    ocls = rk._nested(cls, "owners")
    resp = _request(broker.bootstrap, 41, version, owners=None if owners is None else tuple(
        ocls(principal_type=t, principal_name=n) for t, n in owners))
    assert (int(resp.error_code), resp.tokens) == (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, ())
