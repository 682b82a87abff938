"""`sharebroker consumer-groups` on KIP-848 consumer groups (`group.protocol=consumer`) next to a
classic group: --list with --type/--state, --describe (offsets, members, state, with Kafka 4.x's
--verbose columns), --reset-offsets, --delete-offsets and --delete, against real confluent-kafka
consumers in the group. Nothing waits on a sleep, only on conditions with deadlines."""

from __future__ import annotations

import contextlib
import re
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tests.integration.clients import address_seen_by, consume_n, consumer_conf, create_topic
from tests.integration.share_helpers import new_group
from tests.integration.test_cli import cli, fails, ok, produce_lines, table_dicts, table_rows
from sharebroker.testing import wait_for

TIMEOUT = 30.0
PARTITIONS = 4
PER_PARTITION = 3
# Fast consumer-protocol heartbeats and sessions, no initial delay for the classic group.
BROKER = {"group.consumer.min.session.timeout.ms": "1000", "group.consumer.session.timeout.ms": "3000",
          "group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.heartbeat.interval.ms": "300",
          "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


def cg(b: str, *args: str) -> Any:
    return cli("consumer-groups", "--bootstrap-server", b, *args)


def protocol_consumer(b: str, group: str, topic: str, client_id: str) -> Consumer:
    conf = consumer_conf(b, **{"group.id": group, "group.protocol": "consumer", "client.id": client_id})
    conf.pop("session.timeout.ms", None)  # a broker setting under the consumer protocol
    c = Consumer(conf)
    c.subscribe([topic])
    return c


def close_all(*consumers: Consumer) -> None:
    for c in consumers:
        with contextlib.suppress(Exception):
            c.close()


def consume_in_turn(consumers: list[Consumer], topic: str) -> None:
    """Poll every consumer until the partitions are split between them (disjoint, complete, the
    same size each) and each has read its partitions to the end; then commit those positions."""
    def settled() -> bool:
        for c in consumers:
            c.poll(0.05)
        owned = [sorted(tp.partition for tp in c.assignment() if tp.topic == topic) for c in consumers]
        if not all(len(o) == PARTITIONS // len(consumers) for o in owned) or \
                sorted(p for o in owned for p in o) != list(range(PARTITIONS)):
            return False
        return all(tp.offset == PER_PARTITION
                   for c, o in zip(consumers, owned) for tp in c.position([TopicPartition(topic, p) for p in o]))

    wait_for(settled, TIMEOUT, 0.01, "partitions split between the members and read to the end")
    for c in consumers:
        c.commit(asynchronous=False)


def test_consumer_protocol_group_in_the_consumer_groups_tool(make_broker, topic_name):
    b = make_broker(BROKER).bootstrap
    create_topic(b, topic_name, partitions=PARTITIONS)
    for p in range(PARTITIONS):
        produce_lines(b, topic_name, [f"r{p}-{i}" for i in range(PER_PARTITION)], "--partition", str(p))
    total = PARTITIONS * PER_PARTITION

    # A classic group (the tool's own consumer, JoinGroup/SyncGroup), now empty.
    classic = new_group("classic")
    ok(cli("consume", "--bootstrap-server", b, "--topic", topic_name, "--group", classic, "--from-beginning",
           "--max-messages", str(total), "--timeout-ms", "10000"))

    group = new_group("kip848")
    a = protocol_consumer(b, group, topic_name, "cp-a")
    c = protocol_consumer(b, group, topic_name, "cp-b")
    try:
        consume_in_turn([a, c], topic_name)
        ids = {a.memberid(): "cp-a", c.memberid(): "cp-b"}
        host = f"/{address_seen_by(b)}"

        # -- --list: both kinds; --type adds the type column (Kafka's GroupType names) and filters.
        listed = ok(cg(b, "--list")).stdout.split()
        assert group in listed and classic in listed

        def stable_listing() -> dict[str, dict[str, str]] | None:
            r = ok(cg(b, "--list", "--type", "--state"))
            rows = {d["GROUP"]: d for d in table_dicts(r.stdout)}
            return rows if rows.get(group, {}).get("STATE") == "Stable" else None
        rows = wait_for(stable_listing, TIMEOUT, 0.1, "the consumer group Stable in --list --state")
        assert table_rows(ok(cg(b, "--list", "--type", "--state")).stdout)[0] == ["GROUP", "TYPE", "STATE"]
        assert rows[group]["TYPE"] == "Consumer" and rows[classic] == {"GROUP": classic, "TYPE": "Classic",
                                                                        "STATE": "Empty"}
        r = ok(cg(b, "--list", "--type"))
        assert r.stdout.startswith("GROUP ")
        assert {d["GROUP"]: d["TYPE"] for d in table_dicts(r.stdout)} == {group: "Consumer", classic: "Classic"}
        r = ok(cg(b, "--list", "--type", "consumer"))
        assert table_dicts(r.stdout) == [{"GROUP": group, "TYPE": "Consumer"}]
        r = ok(cg(b, "--list", "--type", "CLASSIC", "--state", "empty"))
        assert table_dicts(r.stdout) == [{"GROUP": classic, "TYPE": "Classic", "STATE": "Empty"}]
        assert table_dicts(ok(cg(b, "--list", "--type", "consumer", "--state", "Empty")).stdout) == []
        fails(cg(b, "--list", "--type", "share"), 1, "Invalid types list 'share'. Valid types are: Classic, Consumer")
        fails(cg(b, "--describe", "--group", group, "--type"), 2, "Option [type] can only be used with [list]")

        # -- --describe: the offsets view, one row per partition with its owner.
        r = ok(cg(b, "--describe", "--group", group))
        assert r.stderr == ""
        assert table_rows(r.stdout)[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                           "CONSUMER-ID", "HOST", "CLIENT-ID"]
        rows = table_dicts(r.stdout)
        assert sorted(int(d["PARTITION"]) for d in rows) == list(range(PARTITIONS))
        for d in rows:
            assert (d["GROUP"], d["TOPIC"], d["CURRENT-OFFSET"], d["LOG-END-OFFSET"], d["LAG"]) == \
                (group, topic_name, str(PER_PARTITION), str(PER_PARTITION), "0")
            assert ids[d["CONSUMER-ID"]] == d["CLIENT-ID"] and d["HOST"] == host
        owners = {int(d["PARTITION"]): d["CONSUMER-ID"] for d in rows}
        assert owners == {tp.partition: m.memberid() for m in (a, c) for tp in m.assignment()}

        r = ok(cg(b, "--describe", "--group", group, "--offsets", "--verbose"))
        assert table_rows(r.stdout)[0] == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET",
                                           "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        assert {d["CURRENT-OFFSET"] for d in table_dicts(r.stdout)} == {str(PER_PARTITION)}

        # -- --members: two members of two partitions each; --verbose adds Kafka 4.x's epochs and
        # current/target assignments ("topic:0,1").
        r = ok(cg(b, "--describe", "--group", group, "--members"))
        assert table_rows(r.stdout)[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        members = {d["CONSUMER-ID"]: d for d in table_dicts(r.stdout)}
        assert {m: (d["CLIENT-ID"], d["HOST"], d["#PARTITIONS"]) for m, d in members.items()} == \
            {m: (cid, host, str(PARTITIONS // 2)) for m, cid in ids.items()}

        r = ok(cg(b, "--describe", "--group", group, "--state", "--verbose"))
        assert table_rows(r.stdout)[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                           "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
        (state_row,) = table_rows(r.stdout)[1:]
        assert state_row[0] == group and state_row[1].endswith(":" + b.rpartition(":")[2])
        assert re.fullmatch(r"\(\d+\)", state_row[2]), state_row
        assert state_row[3] in ("uniform", "range") and state_row[4] == "Stable" and state_row[7] == "2"
        group_epoch, target_epoch = int(state_row[5]), int(state_row[6])
        assert group_epoch == target_epoch >= 2  # two joins, each a new target assignment

        r = ok(cg(b, "--describe", "--group", group, "--members", "--verbose"))
        assert table_rows(r.stdout)[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                           "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        for d in table_dicts(r.stdout):
            consumer = a if d["CONSUMER-ID"] == a.memberid() else c
            mine = f"{topic_name}:" + ",".join(str(tp.partition) for tp in sorted(
                consumer.assignment(), key=lambda tp: tp.partition))
            assert (d["CURRENT-EPOCH"], d["CURRENT-ASSIGNMENT"], d["TARGET-EPOCH"], d["TARGET-ASSIGNMENT"]) == \
                (str(target_epoch), mine, str(target_epoch), mine)

        r = ok(cg(b, "--describe", "--group", group, "--state"))
        assert table_rows(r.stdout)[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                           "#MEMBERS"]
        assert table_rows(r.stdout)[1][3:] == [state_row[3], "Stable", "2"]

        # -- an active group: no reset, no delete, no deletion of offsets of a subscribed topic.
        fails(cg(b, "--reset-offsets", "--group", group, "--topic", topic_name, "--to-earliest", "--execute"), 1,
              f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state is "
              f"Stable.")
        fails(cg(b, "--delete", "--group", group), 1,
              f"* Group '{group}' could not be deleted due to: GroupNotEmptyException")
        r = fails(cg(b, "--delete-offsets", "--group", group, "--topic", f"{topic_name}:0"), 1,
                  "Error: Encountered some partition-level error, see the follow-up details.")
        assert table_rows(r.stdout)[0] == ["TOPIC", "PARTITION", "STATUS"]
        (row,) = table_rows(r.stdout)[1:]
        assert row[:3] == [topic_name, "0", "Error:"] and row[3] == "GroupSubscribedToTopicException:"
    finally:
        close_all(a, c)

    # -- the emptied group: offsets without owners, then reset to the earliest offsets.
    def empty() -> Any:
        r = cg(b, "--describe", "--group", group)
        return r if r.returncode == 0 and "has no active members" in r.stderr else None
    r = wait_for(empty, TIMEOUT, 0.1, "the consumer group empty")
    assert f"Consumer group '{group}' has no active members." in r.stderr
    rows = table_dicts(r.stdout)
    assert [(d["PARTITION"], d["CURRENT-OFFSET"], d["LAG"], d["CONSUMER-ID"], d["HOST"], d["CLIENT-ID"])
            for d in rows] == [(str(p), str(PER_PARTITION), "0", "-", "-", "-") for p in range(PARTITIONS)]
    r = ok(cg(b, "--describe", "--group", group, "--members"))
    assert r.stdout == "" and f"Consumer group '{group}' has no active members." in r.stderr
    r = ok(cg(b, "--describe", "--group", group, "--state", "--verbose"))
    (row,) = table_rows(r.stdout)[1:]
    assert row[4] == "Empty" and row[7] == "0"
    rows = {d["GROUP"]: d for d in table_dicts(ok(cg(b, "--list", "--type", "--state")).stdout)}
    assert (rows[group]["TYPE"], rows[group]["STATE"]) == ("Consumer", "Empty")

    r = ok(cg(b, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--dry-run"))
    assert [(d["PARTITION"], d["NEW-OFFSET"]) for d in table_dicts(r.stdout)] == \
        [(str(p), "0") for p in range(PARTITIONS)]
    assert {d["CURRENT-OFFSET"] for d in table_dicts(ok(cg(b, "--describe", "--group", group)).stdout)} == \
        {str(PER_PARTITION)}  # a dry run changes nothing
    r = ok(cg(b, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute"))
    assert [(d["GROUP"], d["TOPIC"], d["PARTITION"], d["NEW-OFFSET"]) for d in table_dicts(r.stdout)] == \
        [(group, topic_name, str(p), "0") for p in range(PARTITIONS)]
    rows = table_dicts(ok(cg(b, "--describe", "--group", group)).stdout)
    assert [(d["CURRENT-OFFSET"], d["LAG"]) for d in rows] == [("0", str(PER_PARTITION))] * PARTITIONS

    # A member joining again starts from the reset offsets: it receives every record once more.
    again = protocol_consumer(b, group, topic_name, "cp-again")
    try:
        assert len(consume_n(again, total, TIMEOUT)) == total
        again.commit(asynchronous=False)
    finally:
        close_all(again)
    wait_for(empty, TIMEOUT, 0.1, "the consumer group empty again")

    # -- --delete-offsets on the empty group: the partition's offset goes; an unknown topic is a
    # failed row (exit 1) while the request itself succeeded.
    r = cg(b, "--delete-offsets", "--group", group, "--topic", f"{topic_name}:0", "--topic", "no-such-topic")
    assert r.returncode == 1 and r.stderr == "", r
    assert r.stdout.startswith(f"Request succeeded for deleting offsets from group {group}.\n")
    assert table_rows(r.stdout)[1] == ["TOPIC", "PARTITION", "STATUS"]
    statuses = {(row[0], row[1]): " ".join(row[2:]) for row in table_rows(r.stdout)[2:]}
    assert statuses[(topic_name, "0")] == "Successful"
    assert statuses[("no-such-topic", "-")].startswith("Error: UnknownTopicOrPartitionException")
    rows = table_dicts(ok(cg(b, "--describe", "--group", group)).stdout)
    assert [d["PARTITION"] for d in rows] == [str(p) for p in range(1, PARTITIONS)]
    r = ok(cg(b, "--delete-offsets", "--group", group, "--topic", topic_name))
    assert [row[:3] for row in table_rows(r.stdout)[2:]] == [[topic_name, str(p), "Successful"]
                                                            for p in range(PARTITIONS)]
    assert ok(cg(b, "--describe", "--group", group)).stdout == ""
    fails(cg(b, "--delete-offsets", "--group", "no-such-group", "--topic", topic_name), 1,
          "Error: The group id does not exist.")
    fails(cg(b, "--delete-offsets", "--group", group), 2, "Option [delete-offsets] takes the following options")
    fails(cg(b, "--delete", "--group", group, "--topic", topic_name), 2,
          "The consumer does not support topic-specific offset deletion from a consumer group.")

    # -- --delete: the consumer group goes, the classic one stays.
    r = ok(cg(b, "--delete", "--group", group))
    assert r.stdout.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    listed = ok(cg(b, "--list")).stdout.split()
    assert group not in listed and classic in listed
    fails(cg(b, "--describe", "--group", group), 1, f"Error: Consumer group '{group}' does not exist.")
    fails(cg(b, "--delete", "--group", group), 1, "could not be deleted due to: GroupIdNotFoundException")

    # The classic group still describes through DescribeGroups, with this tool's classic columns.
    r = ok(cg(b, "--describe", "--group", classic, "--state"))
    assert table_rows(r.stdout)[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    assert table_rows(r.stdout)[1][0] == classic and table_rows(r.stdout)[1][-2:] == ["Empty", "0"]


def test_members_of_both_protocols_show_upgraded_in_verbose_members(make_broker, topic_name):
    """Kafka 4.x's --members --verbose adds UPGRADED when classic and consumer-protocol members
    share a group: true for the consumer-protocol member, false for the classic one."""
    b = make_broker(BROKER).bootstrap
    create_topic(b, topic_name, partitions=PARTITIONS)
    group = new_group("mixed")
    modern = protocol_consumer(b, group, topic_name, "modern")
    classic = Consumer(consumer_conf(b, **{"group.id": group, "client.id": "classic", "session.timeout.ms": 6000,
                                           "heartbeat.interval.ms": 300}))
    classic.subscribe([topic_name])
    try:
        def both_members_own_two() -> bool:
            for c in (modern, classic):
                c.poll(0.05)
            return all(len(c.assignment()) == PARTITIONS // 2 for c in (modern, classic))
        wait_for(both_members_own_two, TIMEOUT, 0.01, "the classic member joined the consumer group")
        r = ok(cg(b, "--describe", "--group", group, "--members", "--verbose"))
        assert table_rows(r.stdout)[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                           "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                                           "TARGET-ASSIGNMENT", "UPGRADED"]
        assert {d["CLIENT-ID"]: (d["UPGRADED"], d["#PARTITIONS"]) for d in table_dicts(r.stdout)} == {
            "modern": ("true", str(PARTITIONS // 2)), "classic": ("false", str(PARTITIONS // 2))}
        # without the verbose columns nothing says which protocol a member speaks, as in Kafka
        assert "UPGRADED" not in table_rows(ok(cg(b, "--describe", "--group", group, "--members")).stdout)[0]
    finally:
        close_all(classic, modern)
