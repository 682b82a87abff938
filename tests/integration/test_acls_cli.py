"""`sharebroker acls` (kafka-acls.sh) as a subprocess against a live broker with ACLs on: add, list
(all, per resource, per principal, --resource-pattern-type match), remove with --force, the
--producer/--consumer shortcuts, Kafka's usage errors, and the effect of what it adds on a client."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from sharebroker.testing.plugin import Broker
from tests.integration.acl_helpers import TOPIC_AUTHZ, admin_acls, metadata_error, start_acl_broker, unique

pytestmark = pytest.mark.needs_own_broker("starts a broker with an authorizer")


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    proc = start_acl_broker(tmp_path_factory.mktemp("acl-cli") / "data", admin_acls(create=True))
    yield proc
    proc.stop()


def acls(bootstrap: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sharebroker", "acls", "--bootstrap-server", bootstrap, *args],
                          check=False, capture_output=True, text=True, timeout=60, input=stdin)


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, (r.stdout, r.stderr)
    return r.stdout


def test_add_list_remove(acl_broker) -> None:
    b = acl_broker.bootstrap
    topic = unique("cli")
    out = ok(acls(b, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
                  "--topic", topic))
    pattern = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    assert f"Adding ACLs for resource `{pattern}`: \n" in out
    assert f"Current ACLs for resource `{pattern}`:\n" \
           "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n" \
           "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n" in out

    out = ok(acls(b, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic))
    assert "already exists." in out and "Adding ACLs" not in out

    ok(acls(b, "--add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.9", "--group", "pay-",
            "--resource-pattern-type", "prefixed"))
    listed = ok(acls(b, "--list"))
    assert pattern in listed
    assert "ResourcePattern(resourceType=GROUP, name=pay-, patternType=PREFIXED)" in listed
    assert "(principal=User:bob, host=10.0.0.9, operation=ALL, permissionType=DENY)" in listed
    # MATCH: every ACL that applies to the named group
    matched = ok(acls(b, "--list", "--group", "pay-eu", "--resource-pattern-type", "match"))
    assert "name=pay-, patternType=PREFIXED" in matched
    only_bob = ok(acls(b, "--list", "--principal", "User:bob"))
    assert only_bob.startswith("ACLs for principal `User:bob`") and "User:alice" not in only_bob

    # without --force the tool asks; "n" keeps them
    r = acls(b, "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic, stdin="n\n")
    assert "Are you sure you want to remove ACLs: \n \t(principal=User:alice, host=*, operation=READ, " \
           "permissionType=ALLOW)\n from resource filter " in ok(r)
    assert "operation=READ" in ok(acls(b, "--list", "--topic", topic))
    ok(acls(b, "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic, "--force"))
    left = ok(acls(b, "--list", "--topic", topic))
    assert "operation=READ" not in left and "operation=DESCRIBE" in left
    ok(acls(b, "--remove", "--topic", topic, "--force"))
    assert ok(acls(b, "--list", "--topic", topic)) == ""


def test_producer_and_consumer_shortcuts_take_effect(acl_broker) -> None:
    b = acl_broker.bootstrap
    topic, group = unique("cli"), unique("grp")
    from tests.integration.clients import create_topic
    create_topic(b, topic)
    assert metadata_error(b, topic) == TOPIC_AUTHZ
    out = ok(acls(b, "--add", "--allow-principal", "User:ANONYMOUS", "--consumer", "--topic", topic, "--group", group))
    assert "operation=READ" in out and "resourceType=GROUP" in out
    assert metadata_error(b, topic) == 0  # READ and DESCRIBE on the topic now
    out = ok(acls(b, "--add", "--allow-principal", "User:ANONYMOUS", "--producer", "--idempotent", "--topic", topic))
    assert "operation=IDEMPOTENT_WRITE" in out and "operation=CREATE" in out


@pytest.mark.parametrize("args, message", [
    (("--list", "--add"), "not allowed with argument"),
    (("--topic", "t"), "Command must include exactly one action: --list, --add, --remove."),
    (("--add", "--topic", "t"), "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."),
    (("--add", "--allow-principal", "User:a"), "You must provide at least one resource"),
    (("--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"),
     "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls."),
    (("--add", "--allow-principal", "User:a", "--group", "g", "--operation", "Write"),
     "ResourceType GROUP only supports operations"),
    (("--add", "--producer", "--allow-principal", "User:a"), "With --producer you must specify a --topic"),
])
def test_usage_errors(acl_broker, args: tuple[str, ...], message: str) -> None:
    r = acls(acl_broker.bootstrap, *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_refused_by_the_broker(tmp_path) -> None:
    from sharebroker.testing.plugin import broker_for_tests

    from tests.integration.acl_helpers import AUTHORIZER
    proc = broker_for_tests(tmp_path / "data", AUTHORIZER)  # nobody may change ACLs
    try:
        r = acls(proc.bootstrap, "--add", "--allow-principal", "User:a", "--topic", "t")
        assert r.returncode == 1
        assert "Error while executing ACL command: ClusterAuthorizationException" in r.stderr
    finally:
        proc.stop()
