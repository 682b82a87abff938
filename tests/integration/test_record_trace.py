"""Tracing records: `share-groups --describe --offsets FIRST-LAST` (each record's state, delivery
count and holder, read from the live broker's admin endpoint) and the structured log line per
record event that `share.record.trace.enable` switches on and off for one group at run time."""

from __future__ import annotations

import contextlib
import http.client
import json
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType

from tests.integration.clients import create_topic
from tests.integration.share_helpers import (
    FAST_SHARE_BROKER,
    commit_errors,
    new_group,
    poll_until,
    produce_values,
    set_earliest,
    set_group_configs,
    share_consumer,
)
from tests.integration.test_cli import cli, fails, ok, table_rows

TIMEOUT = 30.0


def admin_address(broker: Any) -> tuple[str, int]:
    (event,) = broker.log_events("metrics listener started")
    return "127.0.0.1", int(event["port"])


def members(addr: tuple[str, int], group: str) -> list[str]:
    conn = http.client.HTTPConnection(*addr, timeout=10)
    try:
        conn.request("GET", "/api/state")
        state = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    return next((g["members"] for g in state["share_groups"] if g["group"] == group), [])


@pytest.fixture
def tbroker(make_broker: Any) -> Any:
    broker = make_broker({**FAST_SHARE_BROKER, "metrics.listener": "127.0.0.1:0"})
    if not hasattr(broker, "log_events"):
        pytest.skip("needs the broker's log")
    return broker


def test_describe_offsets_range_prints_each_records_state_and_holder(tbroker: Any, topic_name: str) -> None:
    addr = admin_address(tbroker)
    bootstrap = tbroker.bootstrap
    create_topic(bootstrap, topic_name)
    group = new_group()
    set_earliest(bootstrap, group, **{"share.record.lock.duration.ms": "60000"})
    produce_values(bootstrap, topic_name, [b"v%d" % i for i in range(6)], **{"linger.ms": 200})
    c = share_consumer(bootstrap, group, [topic_name], explicit=True)
    try:
        held = poll_until(c, lambda got: len(got) >= 6, TIMEOUT)
        for m in held:
            if m.offset() in (2, 3, 4):
                c.acknowledge(m, AcknowledgeType.REJECT if m.offset() == 4 else AcknowledgeType.ACCEPT)
        assert all(e is None for e in commit_errors(c.commit_sync(10)).values())
        (member,) = members(addr, group)
        r = ok(cli("share-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group, "--topic",
                   topic_name, "--partition", "0", "--offsets", "0-7", "--admin-url", f"http://{addr[0]}:{addr[1]}"))
        rows = table_rows(r.stdout)
        assert rows[0] == ["TOPIC", "PARTITION", "OFFSET", "STATE", "DELIVERY-COUNT", "MEMBER", "LOCK-LEFT"]
        states = {int(row[2]): row[3:6] for row in rows[1:]}
        # offsets 6 and 7 are not produced yet: no rows
        assert states == {0: ["ACQUIRED", "1", member], 1: ["ACQUIRED", "1", member],
                          2: ["ACKNOWLEDGED", "1", "-"], 3: ["ACKNOWLEDGED", "1", "-"],
                          4: ["ARCHIVED", "1", "-"], 5: ["ACQUIRED", "1", member]}
        assert all(row[6].endswith("s") for row in rows[1:] if row[3] == "ACQUIRED")

        # the ephemeral port of the test broker cannot be found through DescribeConfigs: said plainly
        fails(cli("share-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group, "--topic",
                  topic_name, "--partition", "0", "--offsets", "0-7"), 1, "--admin-url")
        fails(cli("share-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group,
                  "--offsets", "0-7"), 2, "one [group], one [topic] and [partition]")
        fails(cli("share-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group, "--topic",
                  topic_name, "--partition", "0", "--offsets", "7-3"), 2, "Invalid offset range")
        # the plain --offsets view is unchanged
        assert table_rows(ok(cli("share-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group,
                                 "--offsets")).stdout)[0] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    finally:
        with contextlib.suppress(Exception):
            c.close()


def test_record_trace_log_lines_follow_the_group_config_at_run_time(tbroker: Any, topic_name: str) -> None:
    bootstrap = tbroker.bootstrap
    create_topic(bootstrap, topic_name)
    group, quiet = new_group(), new_group()
    for g in (group, quiet):
        set_earliest(bootstrap, g, **{"share.record.lock.duration.ms": "60000"})
    produce_values(bootstrap, topic_name, [b"a", b"b", b"c", b"d"], **{"linger.ms": 200})

    def lines(kind: str, g: str) -> list[dict[str, Any]]:
        return [e for e in tbroker.log_events(f"share record {kind}") if e.get("group") == g]

    c = share_consumer(bootstrap, group, [topic_name], explicit=True)
    q = share_consumer(bootstrap, quiet, [topic_name])
    try:
        held = poll_until(c, lambda got: len(got) >= 4, TIMEOUT)
        assert lines("acquire", group) == []  # off by default
        set_group_configs(bootstrap, group, {"share.record.trace.enable": "true"})
        c.acknowledge(held[0], AcknowledgeType.ACCEPT)
        c.acknowledge(held[1], AcknowledgeType.REJECT)
        assert all(e is None for e in commit_errors(c.commit_sync(10)).values())
        (accept,) = lines("accept", group)
        assert (accept["topic"], accept["partition"], accept["first_offset"], accept["last_offset"]) == (topic_name, 0, 0, 0)
        assert accept["member"]
        assert [(e["first_offset"], e["delivery_count"]) for e in lines("archive", group)] == [(1, 1)]
        assert len(lines("reject", group)) == 1
        # another group reading the same records logs nothing
        poll_until(q, lambda got: len(got) >= 4, TIMEOUT)
        assert lines("acquire", quiet) == [] and lines("accept", quiet) == []

        set_group_configs(bootstrap, group, {"share.record.trace.enable": "false"})
        for m in held[2:]:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        assert all(e is None for e in commit_errors(c.commit_sync(10)).values())
        assert len(lines("accept", group)) == 1
    finally:
        for consumer in (c, q):
            with contextlib.suppress(Exception):
                consumer.close()
