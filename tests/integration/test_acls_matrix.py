"""The ACL matrix: for each API the broker serves, User:ANONYMOUS without the ACL Kafka's KafkaApis
checks gets Kafka's error and no data, and with it succeeds. Real clients where they can express
the request (confluent-kafka Producer/Consumer/ShareConsumer/AdminClient, transactions), raw
frames for the rest. The module's broker lets ANONYMOUS manage ACLs (ALTER on the cluster) and
nothing else; each test grants what it needs on its own topics and groups."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclOperation,
    AclPermissionType,
    ConfigResource,
    NewPartitions,
    ResourceType,
)

from sharebroker.testing import wait_for
from sharebroker.testing.plugin import Broker
from tests.integration import rawkafka as rk
from tests.integration.acl_helpers import (
    CLUSTER_AUTHZ,
    GROUP_AUTHZ,
    TIMEOUT,
    TOPIC_AUTHZ,
    TXN_AUTHZ,
    acl,
    admin_acls,
    all_topic_names,
    create_acls,
    delete_acls,
    metadata_error,
    start_acl_broker,
    unique,
)
from tests.integration.clients import admin, consumer_conf, produce_sync, producer_conf
from tests.integration.share_helpers import FAST_SHARE_BROKER, share_consumer

pytestmark = pytest.mark.needs_own_broker("starts a broker with an authorizer")

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.BROKER, ResourceType.TRANSACTIONAL_ID
Op = AclOperation
CLUSTER = "kafka-cluster"


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    proc = start_acl_broker(tmp_path_factory.mktemp("acl-matrix") / "data", admin_acls(), **FAST_SHARE_BROKER)
    yield proc
    proc.stop()
    assert "Traceback" not in proc.log_text(), proc.log_text()[-4000:]


def new_topic(b: str, prefix: str = "m", partitions: int = 1) -> str:
    """A topic created with CREATE granted on it alone (CreateTopics authorized per topic)."""
    name = unique(prefix)
    create_acls(b, acl(T, name, Op.CREATE))
    a = admin(b)
    from confluent_kafka.admin import NewTopic
    a.create_topics([NewTopic(name, partitions, 1)], request_timeout=10)[name].result(timeout=TIMEOUT)
    return name


def fill(b: str, topic: str, n: int = 3) -> None:
    """Produce n records with WRITE granted for the purpose, then take WRITE back."""
    write = acl(T, topic, Op.WRITE)
    create_acls(b, write)
    produce_sync(Producer(producer_conf(b)), topic, [{"value": f"v{i}".encode()} for i in range(n)])
    delete_acls(b, write)


def high_watermark(b: str, topic: str) -> int:
    """Via ListOffsets, DESCRIBE granted for the purpose."""
    describe = acl(T, topic, Op.DESCRIBE)
    create_acls(b, describe)
    try:
        with rk.RawClient(b) as raw:
            cls = rk.req_cls(2, 7)
            topic_cls = rk._nested(cls, "topics")
            part_cls = rk._nested(topic_cls, "partitions")
            resp = raw.request(cls(replica_id=-1, isolation_level=0, topics=(topic_cls(name=topic, partitions=(
                part_cls(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),)))
        return int(resp.topics[0].partitions[0].offset)
    finally:
        delete_acls(b, describe)


def group_conf(b: str, group: str, protocol: str = "classic") -> dict:
    conf = consumer_conf(b, **{"group.id": group, "group.protocol": protocol})
    if protocol == "consumer":
        del conf["session.timeout.ms"]  # set by the broker for the consumer protocol
    return conf


def consumer_error(consumer: Consumer, timeout: float = TIMEOUT) -> int:
    """The first error code the consumer reports (fails the test if none comes in time or data does)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is not None, f"a record came through: {msg.value()!r}"
        if not msg.error().retriable() or msg.error().code() in (GROUP_AUTHZ, TOPIC_AUTHZ):
            return int(msg.error().code())
    raise AssertionError("no error reported")


def consume(consumer: Consumer, n: int, timeout: float = TIMEOUT) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        assert time.monotonic() < deadline, f"got {got}"
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    return got


# -- produce, fetch, list offsets, metadata ---------------------------------------------------------


def test_produce_needs_write(acl_broker) -> None:
    b = acl_broker.bootstrap
    topic = new_topic(b)
    with rk.RawClient(b) as raw:
        part = rk.produce(raw, topic, 0, rk.encode_batch([rk.Rec(b"k", b"v")]))
        assert int(part.error_code) == TOPIC_AUTHZ
    p = Producer(producer_conf(b))
    errors: list[int] = []
    p.produce(topic, b"refused", on_delivery=lambda err, msg: errors.append(err.code() if err else 0))
    p.flush(TIMEOUT)
    assert errors == [TOPIC_AUTHZ]
    assert high_watermark(b, topic) == 0  # nothing was written
    create_acls(b, acl(T, topic, Op.WRITE))
    produce_sync(Producer(producer_conf(b)), topic, [{"value": b"ok"}])
    assert high_watermark(b, topic) == 1


def test_fetch_and_list_offsets_need_read_and_describe(acl_broker) -> None:
    b = acl_broker.bootstrap
    topic = new_topic(b)
    fill(b, topic)
    with rk.RawClient(b) as raw:
        part = rk.fetch(raw, topic, 0, 0)
        assert int(part.error_code) == TOPIC_AUTHZ and not part.records
    assert metadata_error(b, topic) == TOPIC_AUTHZ
    create_acls(b, acl(T, topic, Op.READ))
    with rk.RawClient(b) as raw:
        batches = rk.fetch_all_batches(raw, topic, 0)
    assert [r.value for batch in batches for r in batch.records()] == [b"v0", b"v1", b"v2"]


def test_metadata_hides_topics_and_auto_create_needs_create(acl_broker) -> None:
    b = acl_broker.bootstrap
    hidden, shown = new_topic(b), new_topic(b)
    create_acls(b, acl(T, shown, Op.DESCRIBE))
    names = all_topic_names(b)
    assert shown in names and hidden not in names
    assert metadata_error(b, hidden) == TOPIC_AUTHZ
    # auto-creation: DESCRIBE lets the client learn the topic is missing; creating needs CREATE
    auto = unique("auto")
    create_acls(b, acl(T, auto, Op.DESCRIBE))
    assert metadata_error(b, auto, allow_auto=True) == TOPIC_AUTHZ
    assert auto not in all_topic_names(b)
    create_acls(b, acl(T, auto, Op.CREATE))
    # created after the answer (UNKNOWN_TOPIC_OR_PARTITION), as Kafka's KRaft auto-creation does
    assert metadata_error(b, auto, allow_auto=True) == 3
    wait_for(lambda: auto in all_topic_names(b), message="auto-created topic")


# -- classic and consumer groups ---------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consumer_group_needs_group_read(acl_broker, protocol: str) -> None:
    b = acl_broker.bootstrap
    topic = new_topic(b, "cg")
    fill(b, topic)
    group = unique("grp")
    create_acls(b, acl(T, topic, Op.READ))
    c = Consumer(group_conf(b, group, protocol))
    try:
        c.subscribe([topic])
        assert consumer_error(c) == GROUP_AUTHZ
    finally:
        c.close()
    create_acls(b, acl(G, group, Op.READ))
    c = Consumer(group_conf(b, group, protocol))
    try:
        c.subscribe([topic])
        assert consume(c, 3) == [b"v0", b"v1", b"v2"]
        c.commit(asynchronous=False)
        (committed,) = c.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)
        assert committed.offset == 3
    finally:
        c.close()


def test_regex_subscription_resolves_only_to_describable_topics(acl_broker) -> None:
    from tests.integration.share_helpers import topic_id
    from tests.integration.test_consumer_protocol import hb_request
    b = acl_broker.bootstrap
    prefix = unique("rx")
    visible, hidden = new_topic(b, f"{prefix}-a"), new_topic(b, f"{prefix}-b")
    group, member = unique("grp"), uuid.uuid4().hex[:22]
    create_acls(b, acl(G, group, Op.READ), acl(T, visible, Op.READ))
    with rk.RawClient(b) as raw:
        # the regex matches both topics; the one the member's principal may not describe is left out
        resp = raw.request(hb_request(group, member, 0, regex=f"{prefix}-.*", rebalance_ms=5000, owned=()))
        assert int(resp.error_code) == 0, resp
        assert {tp.topic_id for tp in resp.assignment.topic_partitions} == {topic_id(b, visible)}
        # once it may describe it (and again after a heartbeat with the regex), it is assigned too,
        # at a later heartbeat when the assignment interval (1 s by default) holds the target back
        create_acls(b, acl(T, hidden, Op.DESCRIBE))
        state = {"epoch": resp.member_epoch, "owned": tuple((tp.topic_id, tuple(tp.partitions))
                                                           for tp in resp.assignment.topic_partitions)}

        def both_assigned() -> bool:
            r = raw.request(hb_request(group, member, state["epoch"], regex=f"{prefix}-.*", owned=state["owned"]))
            assert int(r.error_code) == 0, r
            state["epoch"] = r.member_epoch
            if r.assignment is not None:
                state["owned"] = tuple((tp.topic_id, tuple(tp.partitions)) for tp in r.assignment.topic_partitions)
            return {tid for tid, _ in state["owned"]} == {topic_id(b, visible), topic_id(b, hidden)}
        wait_for(both_assigned, 15.0, interval=0.2, message="the newly describable topic assigned")


def test_consumer_without_topic_read_gets_topic_authorization_failed(acl_broker) -> None:
    b = acl_broker.bootstrap
    topic = new_topic(b, "cg")
    fill(b, topic)
    group = unique("grp")
    create_acls(b, acl(G, group, Op.READ), acl(T, topic, Op.DESCRIBE))
    c = Consumer(consumer_conf(b, **{"group.id": group}))
    try:
        c.subscribe([topic])
        assert consumer_error(c) == TOPIC_AUTHZ
    finally:
        c.close()


def test_group_apis_by_raw_frames(acl_broker) -> None:
    b = acl_broker.bootstrap
    group, topic = unique("grp"), new_topic(b)
    with rk.RawClient(b) as raw:
        find = raw.request(rk.req_cls(10, 4)(key_type=0, coordinator_keys=(group,)))
        assert int(find.coordinators[0].error_code) == GROUP_AUTHZ
        cls = rk.req_cls(9, 8)
        g_cls = rk._nested(cls, "groups")
        fetch = raw.request(cls(groups=(g_cls(group_id=group, topics=None),), require_stable=False))
        assert int(fetch.groups[0].error_code) == GROUP_AUTHZ
        cls = rk.req_cls(15, 5)
        described = raw.request(cls(groups=(group,), include_authorized_operations=True))
        assert int(described.groups[0].error_code) == GROUP_AUTHZ
        deleted = raw.request(rk.req_cls(42, 2)(groups_names=(group,)))
        assert int(deleted.results[0].error_code) == GROUP_AUTHZ
        cls = rk.req_cls(8, 8)
        t_cls = rk._nested(cls, "topics")
        p_cls = rk._nested(t_cls, "partitions")
        commit = raw.request(cls(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                 group_instance_id=None, topics=(t_cls(name=topic, partitions=(
                                     p_cls(partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                                           committed_metadata=""),)),)))
        assert int(commit.topics[0].partitions[0].error_code) == GROUP_AUTHZ
    # READ on the group but not on the topic: the commit is refused per topic
    create_acls(b, acl(G, group, Op.READ))
    with rk.RawClient(b) as raw:
        commit = raw.request(cls(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                 group_instance_id=None, topics=(t_cls(name=topic, partitions=(
                                     p_cls(partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                                           committed_metadata=""),)),)))
        assert int(commit.topics[0].partitions[0].error_code) == TOPIC_AUTHZ
        find = raw.request(rk.req_cls(10, 4)(key_type=0, coordinator_keys=(group,)))
        assert int(find.coordinators[0].error_code) == 0  # READ implies DESCRIBE
        described = raw.request(rk.req_cls(15, 5)(groups=(group,), include_authorized_operations=True))
        # READ and the DESCRIBE it implies, nothing else
        assert described.groups[0].authorized_operations == (1 << 3) | (1 << 8)


def test_list_groups_shows_what_may_be_described(acl_broker) -> None:
    b = acl_broker.bootstrap
    topic = new_topic(b)
    fill(b, topic, 1)
    mine, other = unique("vis"), unique("hid")
    create_acls(b, acl(T, topic, Op.READ), acl(G, mine, Op.READ), acl(G, other, Op.READ))
    for group in (mine, other):
        c = Consumer(consumer_conf(b, **{"group.id": group}))
        c.subscribe([topic])
        consume(c, 1)
        c.commit(asynchronous=False)
        c.close()
    delete_acls(b, acl(G, other, Op.READ))
    # ALTER on the cluster implies DESCRIBE there, which lists every group: deny it
    deny = acl(C, CLUSTER, Op.DESCRIBE, AclPermissionType.DENY)
    create_acls(b, deny)
    try:
        with rk.RawClient(b) as raw:
            listed = {g.group_id for g in raw.request(rk.req_cls(16, 4)(states_filter=())).groups}
            logdirs = raw.request(rk.req_cls(35, 4)(topics=None))
        assert mine in listed and other not in listed
        assert (int(logdirs.error_code), logdirs.results) == (CLUSTER_AUTHZ, ())
    finally:
        delete_acls(b, deny)
    with rk.RawClient(b) as raw:
        listed = {g.group_id for g in raw.request(rk.req_cls(16, 4)(states_filter=())).groups}
    assert {mine, other} <= listed


# -- share groups -------------------------------------------------------------------------------------


def share_error(consumer, timeout: float = TIMEOUT) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            batch = consumer.poll(0.3)
        except KafkaException as exc:  # a fatal group error is raised by poll
            return int(exc.args[0].code())
        for m in batch:
            assert m.error() is not None, f"a record came through: {m.value()!r}"
            return int(m.error().code())
    raise AssertionError("no error reported")


def test_share_consumer_needs_group_and_topic_read(acl_broker) -> None:
    b = acl_broker.bootstrap
    topic = new_topic(b, "sq")
    fill(b, topic)
    group = unique("sg")
    create_acls(b, acl(T, topic, Op.READ))
    c = share_consumer(b, group, [topic])
    try:
        assert share_error(c) == GROUP_AUTHZ
    finally:
        c.close()
    # group READ (and ALTER_CONFIGS to start from the earliest offset), topic READ: records flow
    create_acls(b, acl(G, group, Op.READ), acl(G, group, Op.ALTER_CONFIGS))
    from tests.integration.share_helpers import poll_until, set_earliest
    set_earliest(b, group)
    c = share_consumer(b, group, [topic])
    try:
        got = poll_until(c, lambda got: len(got) >= 3)
        assert sorted(m.value() for m in got) == [b"v0", b"v1", b"v2"]
    finally:
        c.close()


def test_share_consumer_without_topic_describe_is_refused(acl_broker) -> None:
    b = acl_broker.bootstrap
    topic = new_topic(b, "sq")
    fill(b, topic)
    group = unique("sg")
    create_acls(b, acl(G, group, Op.READ))
    with rk.RawClient(b) as raw:
        from tests.integration.share_helpers import heartbeat_request
        resp = raw.request(heartbeat_request(group, "", 0, topics=[topic]))
        assert int(resp.error_code) == TOPIC_AUTHZ


def test_share_fetch_and_acknowledge_need_topic_read(acl_broker) -> None:
    from tests.integration.share_helpers import ACCEPT, ShareMember, partitions_of, set_earliest, topic_id
    b = acl_broker.bootstrap
    topic = new_topic(b, "sq")
    fill(b, topic)
    group = unique("sg")
    # the group READ (and its configs), the topic DESCRIBE only: a member joins and is assigned,
    # but ShareFetch acquires nothing from the topic
    create_acls(b, acl(G, group, Op.READ), acl(G, group, Op.ALTER_CONFIGS), acl(T, topic, Op.DESCRIBE))
    set_earliest(b, group)
    tid = topic_id(b, topic)
    with ShareMember(b, group) as member:
        member.join([topic], {tid: [0]})
        resp = member.fetch([(tid, 0)], max_wait_ms=0)
        part = partitions_of(resp)[(tid, 0)]
        assert int(part.error_code) == TOPIC_AUTHZ and not part.acquired_records
        create_acls(b, acl(T, topic, Op.READ))
        resp = member.fetch([(tid, 0)], max_wait_ms=2000)
        part = partitions_of(resp)[(tid, 0)]
        assert int(part.error_code) == 0 and part.acquired_records
        # READ taken away again: the acknowledgement of what was acquired is refused for the topic
        delete_acls(b, acl(T, topic, Op.READ))
        ack = member.ack({(tid, 0): [(0, 2, [ACCEPT])]})
        (acked,) = [p for t in ack.responses for p in t.partitions]
        assert int(acked.error_code) == TOPIC_AUTHZ
        # ShareGroupDescribe: the group's authorized operations, and no view of a group whose
        # members are assigned a topic the principal may not describe
        with rk.RawClient(b) as raw:
            cls = rk.req_cls(77, 1)
            (described,) = raw.request(cls(group_ids=(group,), include_authorized_operations=True)).groups
            assert int(described.error_code) == 0 and described.members
            # READ (implying DESCRIBE) and ALTER_CONFIGS (implying DESCRIBE_CONFIGS)
            assert described.authorized_operations == (1 << 3) | (1 << 8) | (1 << 10) | (1 << 11)
            delete_acls(b, acl(T, topic, Op.DESCRIBE))
            (described,) = raw.request(cls(group_ids=(group,), include_authorized_operations=True)).groups
            assert (int(described.error_code), described.error_message, described.members) == (
                TOPIC_AUTHZ, "The group has described topic(s) that the client is not authorized to describe.", ())


def test_share_admin_apis(acl_broker) -> None:
    b = acl_broker.bootstrap
    topic = new_topic(b, "sq")
    group = unique("sg")
    with rk.RawClient(b) as raw:
        from tests.integration.share_helpers import describe_request
        described = raw.request(describe_request([group]))
        assert int(described.groups[0].error_code) == GROUP_AUTHZ
        cls = rk.req_cls(90, 1)
        g_cls = rk._nested(cls, "groups")
        offsets = raw.request(cls(groups=(g_cls(group_id=group, topics=None),)))
        assert int(offsets.groups[0].error_code) == GROUP_AUTHZ
        alter_cls = rk.req_cls(91, 0)
        at_cls = rk._nested(alter_cls, "topics")
        ap_cls = rk._nested(at_cls, "partitions")
        alter_req = alter_cls(group_id=group, topics=(at_cls(topic_name=topic, partitions=(
            ap_cls(partition_index=0, start_offset=0),)),))
        assert int(raw.request(alter_req).error_code) == GROUP_AUTHZ
        del_cls = rk.req_cls(92, 0)
        dt_cls = rk._nested(del_cls, "topics")
        del_req = del_cls(group_id=group, topics=(dt_cls(topic_name=topic),))
        assert int(raw.request(del_req).error_code) == GROUP_AUTHZ
    # READ on the group, not on the topic: per topic refusals
    create_acls(b, acl(G, group, Op.READ))
    with rk.RawClient(b) as raw:
        resp = raw.request(alter_req)
        assert int(resp.error_code) == 0
        assert int(resp.responses[0].partitions[0].error_code) == TOPIC_AUTHZ
        assert int(raw.request(del_req).error_code) == GROUP_AUTHZ  # DeleteShareGroupOffsets needs DELETE
        described = raw.request(describe_request([group]))
        assert int(described.groups[0].error_code) != GROUP_AUTHZ
    create_acls(b, acl(T, topic, Op.READ))
    with rk.RawClient(b) as raw:
        resp = raw.request(alter_req)
        assert int(resp.responses[0].partitions[0].error_code) == 0


def test_share_group_state_apis_need_cluster_action(acl_broker) -> None:
    b = acl_broker.bootstrap
    with rk.RawClient(b) as raw:
        cls = rk.req_cls(84, 0)
        t_cls = rk._nested(cls, "topics")
        p_cls = rk._nested(t_cls, "partitions")
        resp = raw.request(cls(group_id="g", topics=(t_cls(topic_id=uuid.uuid4(), partitions=(
            p_cls(partition=0, leader_epoch=0),)),)))
        assert int(resp.results[0].partitions[0].error_code) == CLUSTER_AUTHZ


# -- transactions -------------------------------------------------------------------------------------


def test_transactions_need_transactional_id_write(acl_broker) -> None:
    b = acl_broker.bootstrap
    topic = new_topic(b, "tx")
    txn = unique("txn")
    p = Producer(producer_conf(b, **{"transactional.id": txn, "transaction.timeout.ms": 10000}))
    with pytest.raises(KafkaException) as info:
        p.init_transactions(TIMEOUT)
    assert info.value.args[0].code() == TXN_AUTHZ
    create_acls(b, acl(X, txn, Op.WRITE), acl(T, topic, Op.WRITE))
    p = Producer(producer_conf(b, **{"transactional.id": txn, "transaction.timeout.ms": 10000}))
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, b"in-txn")
    p.commit_transaction(TIMEOUT)
    assert high_watermark(b, topic) == 2  # the record and the commit marker


# -- admin --------------------------------------------------------------------------------------------


def test_topic_admin_needs_create_delete_alter(acl_broker) -> None:
    b = acl_broker.bootstrap
    a = admin(b)
    from confluent_kafka.admin import NewTopic
    name = unique("adm")
    with pytest.raises(KafkaException) as info:
        a.create_topics([NewTopic(name, 1, 1)], request_timeout=10)[name].result(timeout=TIMEOUT)
    assert info.value.args[0].code() == TOPIC_AUTHZ
    create_acls(b, acl(T, name, Op.CREATE))
    a.create_topics([NewTopic(name, 1, 1)], request_timeout=10)[name].result(timeout=TIMEOUT)

    with pytest.raises(KafkaException) as info:
        a.create_partitions([NewPartitions(name, 2)], request_timeout=10)[name].result(timeout=TIMEOUT)
    assert info.value.args[0].code() == TOPIC_AUTHZ

    res = ConfigResource(ResourceType.TOPIC, name)
    with pytest.raises(KafkaException) as info:
        a.describe_configs([res], request_timeout=10)[res].result(timeout=TIMEOUT)
    assert info.value.args[0].code() == TOPIC_AUTHZ

    create_acls(b, acl(T, name, Op.ALTER), acl(T, name, Op.ALTER_CONFIGS))
    a.create_partitions([NewPartitions(name, 2)], request_timeout=10)[name].result(timeout=TIMEOUT)
    assert "retention.ms" in a.describe_configs([res], request_timeout=10)[res].result(timeout=TIMEOUT)

    with rk.RawClient(b) as raw:
        cls = rk.req_cls(21, 2)
        t_cls = rk._nested(cls, "topics")
        p_cls = rk._nested(t_cls, "partitions")
        resp = raw.request(cls(topics=(t_cls(name=name, partitions=(p_cls(partition_index=0, offset=0),)),),
                               timeout=datetime.timedelta(seconds=5)))
        assert int(resp.topics[0].partitions[0].error_code) == TOPIC_AUTHZ

    with pytest.raises(KafkaException) as info:
        a.delete_topics([name], request_timeout=10)[name].result(timeout=TIMEOUT)
    assert info.value.args[0].code() == TOPIC_AUTHZ
    create_acls(b, acl(T, name, Op.DELETE))
    a.delete_topics([name], request_timeout=10)[name].result(timeout=TIMEOUT)


def test_broker_configs_need_cluster_describe_configs(acl_broker) -> None:
    b = acl_broker.bootstrap
    a = admin(b)
    res = ConfigResource(ResourceType.BROKER, "1")
    with pytest.raises(KafkaException) as info:
        a.describe_configs([res], request_timeout=10)[res].result(timeout=TIMEOUT)
    assert info.value.args[0].code() == CLUSTER_AUTHZ
    grant = acl(C, CLUSTER, Op.DESCRIBE_CONFIGS)
    create_acls(b, grant)
    try:
        assert "log.retention.ms" in a.describe_configs([res], request_timeout=10)[res].result(timeout=TIMEOUT)
    finally:
        delete_acls(b, grant)


def test_authorized_operations(acl_broker) -> None:
    b = acl_broker.bootstrap
    topic = new_topic(b)
    create_acls(b, acl(T, topic, Op.READ))
    with rk.RawClient(b) as raw:
        cls = rk.req_cls(3, 12)
        t_cls = rk._nested(cls, "topics")
        resp = raw.request(cls(topics=(t_cls(name=topic, topic_id=None),), allow_auto_topic_creation=False,
                               include_topic_authorized_operations=True))
        # READ, and the DESCRIBE it implies (CREATE was granted to set the topic up)
        assert resp.topics[0].topic_authorized_operations == (1 << 3) | (1 << 5) | (1 << 8)
        cluster = raw.request(rk.req_cls(60, 1)(include_cluster_authorized_operations=True, endpoint_type=1))
        # ALTER and the DESCRIBE it implies
        assert cluster.cluster_authorized_operations == (1 << 7) | (1 << 8)
