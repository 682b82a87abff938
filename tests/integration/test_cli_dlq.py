"""The tools around share-group DLQs and KIP-1323: `sharebroker features` (kafka-features.sh:
describe, upgrade, downgrade share.version), the DLQ-RECORDS column of `share-groups --describe`,
and `share-groups --reset-offsets --from-consumer-group` (dry run by default)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.clients import create_topic
from tests.integration.share_helpers import FAST_SHARE_BROKER, new_group
from tests.integration.test_cli import cli, fails, ok, table_dicts
from tests.integration.test_share_dlq import produce, read_dlq, reject_all, setup


@pytest.mark.needs_own_broker("changes share.version")
def test_features_describe_upgrade_downgrade(make_broker: Any) -> None:
    b = make_broker().bootstrap
    f = ["features", "--bootstrap-server", b]
    lines = ok(cli(*f, "describe")).stdout.splitlines()
    (share,) = [ln for ln in lines if ln.startswith("Feature: share.version")]
    assert share.split() == ["Feature:", "share.version", "SupportedMinVersion:", "0", "SupportedMaxVersion:", "2",
                             "FinalizedVersionLevel:", "2", "Epoch:", "1"]
    r = fails(cli(*f, "upgrade", "--feature", "share.version=3"), 1)
    assert ("Could not upgrade share.version to 3. Invalid update version 3 for feature share.version. "
            "Local controller 1 only supports versions 0-2") in r.stdout
    r = fails(cli(*f, "upgrade", "--feature", "share.version=1"), 1)
    assert "Can't downgrade the version of this feature without setting the upgrade type" in r.stdout
    assert ok(cli(*f, "downgrade", "--feature", "share.version=1", "--dry-run")).stdout.strip() == \
        "share.version can be downgraded to 1."
    assert "FinalizedVersionLevel: 2" in ok(cli(*f, "describe")).stdout
    assert ok(cli(*f, "downgrade", "--feature", "share.version=1")).stdout.strip() == "share.version was downgraded to 1."
    (share,) = [ln for ln in ok(cli(*f, "describe")).stdout.splitlines() if ln.startswith("Feature: share.version")]
    assert share.split()[7] == "1" and share.split()[9] == "2"
    assert ok(cli(*f, "upgrade", "--feature", "share.version=2")).stdout.strip() == "share.version was upgraded to 2."


@pytest.fixture(scope="module")
def sbroker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.brokers import module_broker
    yield from module_broker(tmp_path_factory, "cli-dlq-broker", FAST_SHARE_BROKER)


def test_describe_shows_dlq_records_per_partition(sbroker: Any) -> None:
    bs = sbroker.bootstrap
    group, source, dlq = setup(bs, source_partitions=2)
    produce(bs, source, 3, partition=0)
    produce(bs, source, 2, partition=1)
    reject_all(bs, group, source, 5)
    read_dlq(bs, dlq, 5)
    rows = table_dicts(ok(cli("share-groups", "--bootstrap-server", bs, "--describe", "--group", group)).stdout)
    assert [(r["PARTITION"], r["START-OFFSET"], r["DLQ-RECORDS"]) for r in rows] == [("0", "3", "3"), ("1", "2", "2")]
    rows = table_dicts(ok(cli("share-groups", "--bootstrap-server", bs, "--describe", "--group", group,
                              "--verbose")).stdout)
    assert "DLQ-RECORDS" in rows[0] and "LEADER-EPOCH" in rows[0]


def test_reset_offsets_from_consumer_group(sbroker: Any) -> None:
    bs = sbroker.bootstrap
    topic = new_group("seed")
    create_topic(bs, topic, 2)
    produce(bs, topic, 5, partition=0)
    produce(bs, topic, 4, partition=1)
    classic = new_group("classic")
    c = Consumer({"bootstrap.servers": bs, "group.id": classic, "log_level": 3})
    c.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 1)], asynchronous=False)
    c.close()
    share = new_group("seeded")
    sg = ["share-groups", "--bootstrap-server", bs, "--reset-offsets", "--group", share]
    r = ok(cli(*sg, "--from-consumer-group", classic))  # a dry run by default
    assert "No action will be performed as the --execute option is missing" in r.stderr
    assert [(d["PARTITION"], d["NEW-OFFSET"]) for d in table_dicts(r.stdout)] == [("0", "3"), ("1", "1")]
    assert share not in ok(cli("share-groups", "--bootstrap-server", bs, "--list")).stdout.split()
    r = ok(cli(*sg, "--from-consumer-group", classic, "--topic", f"{topic}:1", "--execute"))
    assert [(d["PARTITION"], d["NEW-OFFSET"]) for d in table_dicts(r.stdout)] == [("1", "1")]
    r = ok(cli(*sg, "--from-consumer-group", classic, "--execute"))
    rows = table_dicts(ok(cli("share-groups", "--bootstrap-server", bs, "--describe", "--group", share)).stdout)
    assert [(d["PARTITION"], d["START-OFFSET"], d["LAG"]) for d in rows] == [("0", "3", "2"), ("1", "1", "3")]
    fails(cli(*sg, "--from-consumer-group", new_group("nobody")), 1, "has no committed offsets")
    fails(cli(*sg, "--from-consumer-group", classic, "--to-earliest", "--topic", topic), 2,
          "requires exactly one of these scenarios")
