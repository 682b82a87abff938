"""A share group deleted with `sharebroker share-groups --delete` stays deleted across broker
restarts (its tombstones in `__consumer_offsets` never re-create it on replay), while its group
configs stay, as in Kafka, where a group's dynamic configs live in the cluster metadata apart from
the group and apply again when the group id is used again. Real clients and the real CLI against a
broker subprocess; nothing sleeps, every wait is a condition with a deadline."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

from tests.integration.clients import create_topic
from tests.integration.share_helpers import (
    FAST_SHARE_BROKER,
    TIMEOUT,
    describe_group_configs,
    new_group,
    poll_until,
    produce_values,
    set_earliest,
    share_consumer,
    values,
)
from sharebroker.testing import wait_for

ROOT = Path(__file__).resolve().parents[2]
GROUP_CONFIG_SOURCE = 8  # ConfigSource GROUP_CONFIG


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sharebroker", *args], check=False, capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def ok(r: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


def listed(bootstrap: str) -> list[str]:
    return ok(cli("share-groups", "--bootstrap-server", bootstrap, "--list")).stdout.split()


def state(bootstrap: str, group: str) -> str | None:
    r = cli("share-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group, "--state")
    if r.returncode != 0:
        return None
    (row,) = [line.split() for line in r.stdout.splitlines() if line.strip()][1:]
    return row[3]  # GROUP, host:port, (id), STATE, #MEMBERS


def consume_all(bootstrap: str, group: str, topic: str, expected: list[bytes]) -> list:
    c = share_consumer(bootstrap, group, [topic])
    try:
        got = poll_until(c, lambda g: len(g) >= len(expected), TIMEOUT, what="every record")
        c.commit_sync(10)
    finally:
        with contextlib.suppress(Exception):
            c.close()
    return got


def test_a_deleted_share_group_is_not_listed_again_after_a_restart(make_broker, topic_name):
    broker = make_broker(FAST_SHARE_BROKER)
    b = broker.bootstrap
    create_topic(b, topic_name, partitions=2)
    group = new_group()
    set_earliest(b, group)
    vals = [f"v{i}".encode() for i in range(6)]
    produce_values(b, topic_name, vals)

    # The group: initialized share partitions, members that joined and left, records in the log.
    got = consume_all(b, group, topic_name, vals)
    assert sorted(values(got)) == sorted(vals)
    wait_for(lambda: state(b, group) == "Empty", TIMEOUT, 0.1, "the member left")
    assert group in listed(b)

    r = ok(cli("share-groups", "--bootstrap-server", b, "--delete", "--group", group))
    assert r.stdout.strip() == f"Deletion of requested share groups ('{group}') was successful."
    assert group not in listed(b)

    broker.restart()
    b = broker.bootstrap
    assert group not in listed(b), "the deleted share group came back after the restart"
    r = cli("share-groups", "--bootstrap-server", b, "--describe", "--group", group)
    assert r.returncode == 1 and f"Error: Share group '{group}' does not exist." in r.stderr, r.stderr

    # A second restart replays the same log (and whatever the first one wrote): still gone.
    broker.restart()
    b = broker.bootstrap
    assert group not in listed(b)

    # Kafka keeps a deleted group's dynamic configs: they are still described as the group's ...
    entry = describe_group_configs(b, group)["share.auto.offset.reset"]
    assert (entry.value, int(entry.source)) == ("earliest", GROUP_CONFIG_SOURCE)

    # ... and apply to the group that the same id creates again: its share state was deleted with
    # the group, so it starts at the earliest offset and every record is delivered afresh.
    again = consume_all(b, group, topic_name, vals)
    assert sorted(values(again)) == sorted(vals)
    assert {m.delivery_count() for m in again} == {1}
    assert group in listed(b)
    broker.restart()
    assert group in listed(broker.bootstrap)  # the new group is persisted like any other
