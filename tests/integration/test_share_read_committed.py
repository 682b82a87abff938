"""Share groups with share.isolation.level=read_committed (KIP-932): acquisition stops at the last
stable offset, records of aborted transactions are archived and never delivered, and committed
transactional records are delivered once their commit marker is written."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer

from tests.integration import rawkafka as rk
from tests.integration.clients import create_topic, producer_conf
from tests.integration.test_transactions import list_offset
from tests.integration.share_helpers import (
    describe_group_configs,
    new_group,
    poll_for,
    poll_until,
    set_earliest,
    share_consumer,
    values,
)


def _txn_producer(bootstrap: str) -> Producer:
    p = Producer(producer_conf(bootstrap, **{"transactional.id": f"tx-{uuid.uuid4().hex[:8]}"}))
    p.init_transactions(10)
    return p


def _txn(p: Producer, topic: str, vals: list[bytes], *, commit: bool) -> None:
    p.begin_transaction()
    for v in vals:
        p.produce(topic, value=v, partition=0)
    p.flush(10)
    if commit:
        p.commit_transaction(10)
    else:
        p.abort_transaction(10)


def _lso(bootstrap: str, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) by ListOffsets latest for both isolation levels."""
    with rk.RawClient(bootstrap) as raw:
        return list_offset(raw, topic, 0, 1), list_offset(raw, topic, 0, 0)


def test_read_committed_share_group_gets_only_committed_records(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    group = new_group()
    set_earliest(broker.bootstrap, group, share_isolation_level="read_committed")
    assert describe_group_configs(broker.bootstrap, group)["share.isolation.level"].value == "read_committed"
    p = _txn_producer(broker.bootstrap)
    _txn(p, topic_name, [b"c1-%d" % i for i in range(5)], commit=True)
    _txn(p, topic_name, [b"a1-%d" % i for i in range(5)], commit=False)
    _txn(p, topic_name, [b"c2-%d" % i for i in range(3)], commit=True)
    want = [b"c1-%d" % i for i in range(5)] + [b"c2-%d" % i for i in range(3)]
    c = share_consumer(broker.bootstrap, group, [topic_name])
    try:
        got = poll_until(c, lambda g: len(g) >= len(want), what="committed records")
        got += poll_for(c, 1.0)  # nothing else may come: the aborted ones are archived
    finally:
        c.close()
    assert values(got) == want


def test_read_uncommitted_share_group_gets_aborted_records_too(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    group = new_group()
    set_earliest(broker.bootstrap, group)
    p = _txn_producer(broker.bootstrap)
    _txn(p, topic_name, [b"a-%d" % i for i in range(4)], commit=False)
    _txn(p, topic_name, [b"c-%d" % i for i in range(2)], commit=True)
    c = share_consumer(broker.bootstrap, group, [topic_name])
    try:
        got = poll_until(c, lambda g: len(g) >= 6, what="all records")
    finally:
        c.close()
    assert sorted(values(got)) == sorted([b"a-%d" % i for i in range(4)] + [b"c-%d" % i for i in range(2)])


def test_open_transaction_is_not_delivered_until_committed(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    group = new_group()
    set_earliest(broker.bootstrap, group, share_isolation_level="read_committed")
    plain = Producer(producer_conf(broker.bootstrap))
    plain.produce(topic_name, value=b"before", partition=0)
    plain.flush(10)
    p = _txn_producer(broker.bootstrap)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic_name, value=b"open-%d" % i, partition=0)
    p.flush(10)
    lso, hw = _lso(broker.bootstrap, topic_name)
    assert (lso, hw) == (1, 4)
    c = share_consumer(broker.bootstrap, group, [topic_name])
    try:
        got = poll_until(c, lambda g: len(g) >= 1, what="the record before the transaction")
        got += poll_for(c, 1.0)
        assert values(got) == [b"before"]  # the open transaction's records wait behind the LSO
        p.commit_transaction(10)
        more = poll_until(c, lambda g: len(g) >= 3, what="the committed records")
    finally:
        c.close()
    assert values(more) == [b"open-%d" % i for i in range(3)]
