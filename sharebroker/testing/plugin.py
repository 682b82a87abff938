"""The pytest plugin (entry point `pytest11: sharebroker`), active wherever sharebroker is installed.

Fixtures:
    sharebroker           session-wide broker; its bootstrap address ("127.0.0.1:PORT")
    sharebroker_factory   per-test brokers with settings: sharebroker_factory(num_partitions=3)
    sharebroker_topic     a topic name no other test uses
    sharebroker_group     a group name no other test uses

With SHAREBROKER_BOOTSTRAP=host:port set, every fixture hands out that broker instead of starting
one (a compose service, a broker started by hand): a test whose settings that broker does not have
is skipped, and so is a test that restarts, kills or reads the files or log of its broker, each
with the reason."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import pytest

from sharebroker.testing.process import BrokerProcess, unique_name

if TYPE_CHECKING:
    from sharebroker.cli.wire import Client
    from sharebroker.testing.security import BrokerSecurity

ENV_BOOTSTRAP = "SHAREBROKER_BOOTSTRAP"
MARKER = "needs_own_broker"
_FSYNC_SETTING = ("log.flush.interval.messages", "1")  # what `serve --fsync` sets
_BROKER_RESOURCE = 4


def external_bootstrap() -> str | None:
    """The address in SHAREBROKER_BOOTSTRAP, or None (then the fixtures start brokers)."""
    return os.environ.get(ENV_BOOTSTRAP, "").strip() or None


def _skip_external(what: str) -> NoReturn:
    pytest.skip(f"{what}; {ENV_BOOTSTRAP} points at an external broker")


class ExternalBroker:
    """A broker this test run did not start, with BrokerProcess's interface: what only an owner of
    the process can do (restart, kill, read its files or log) skips the calling test."""

    def __init__(self, bootstrap: str, overrides: Mapping[str, object] | None = None, *, fsync: bool = False) -> None:
        self.bootstrap = bootstrap
        first = bootstrap.split(",")[0].strip()
        host, _, port = first.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self.overrides = {name: str(value) for name, value in (overrides or {}).items()}
        if fsync:
            self.overrides.setdefault(*_FSYNC_SETTING)
        self.start_seconds = 0.0

    def start(self, timeout: float = 30.0) -> ExternalBroker:
        """Wait until it answers Metadata; skip the test if it lacks a requested setting. One
        connection serves both."""
        from sharebroker.cli.wire import Client, ToolError

        try:
            with Client(self.bootstrap, timeout_ms=int(timeout * 1000), client_id="sharebroker-pytest") as client:
                client.metadata([])
                mismatched = self._settings_mismatch(client)
        except ToolError as exc:
            raise RuntimeError(f"{ENV_BOOTSTRAP}={self.bootstrap}: {exc.message}") from None
        if mismatched:
            _skip_external(f"needs broker settings {', '.join(mismatched)}")
        return self

    def _settings_mismatch(self, client: Client) -> list[str]:
        """`name=wanted (has: actual)` for each requested setting the broker does not have."""
        if not self.overrides:
            return []
        node_id = next(iter(client.nodes))
        resp = client.request(32, {"resources": [{"resource_type": _BROKER_RESOURCE, "resource_name": str(node_id),
                                                  "configuration_keys": list(self.overrides)}],
                                   "include_synonyms": False, "include_documentation": False})
        actual = {c.name: c.value for result in resp.results for c in result.configs}
        return [f"{name}={wanted} (has: {actual.get(name, 'unknown')})"
                for name, wanted in self.overrides.items() if actual.get(name) != wanted]

    def stop(self, timeout: float = 15.0) -> int:
        return 0  # not ours to stop

    def alive(self) -> bool:
        return True

    def kill(self) -> None:
        _skip_external("kills its broker")

    def restart(self) -> ExternalBroker:
        _skip_external("restarts its broker")

    def log_text(self) -> str:
        _skip_external("reads its broker's log")

    def log_events(self, event: str) -> list[dict[str, Any]]:
        _skip_external("reads its broker's log")

    @property
    def data_dir(self) -> Path:
        _skip_external("reads its broker's data directory")

    @property
    def proc(self) -> None:
        _skip_external("needs its broker's process")


Broker = BrokerProcess | ExternalBroker


def broker_for_tests(data_dir: Path, overrides: Mapping[str, object] | None = None, *, fsync: bool = False,
                     security: BrokerSecurity | None = None) -> Broker:
    """A started broker: the external one when SHAREBROKER_BOOTSTRAP is set, else a subprocess
    with its data in `data_dir`. For fixtures of other scopes than the plugin's."""
    bootstrap = external_bootstrap()
    if bootstrap is not None:
        if security is not None:
            _skip_external("needs TLS/SASL listeners of its own")
        return ExternalBroker(bootstrap, overrides, fsync=fsync).start()
    return BrokerProcess(data_dir, overrides, fsync=fsync, security=security).start()


class BrokerFactory(Protocol):
    def __call__(self, overrides: Mapping[str, object] | None = None, /, *, fsync: bool = False,
                 name: str | None = None, security: BrokerSecurity | None = None, **settings: object) -> Broker: ...


@pytest.fixture(scope="session")
def sharebroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One broker for the whole session; its bootstrap address. Tests share it, so give topics and
    groups unique names (`sharebroker_topic`, `sharebroker_group`)."""
    broker = broker_for_tests(tmp_path_factory.mktemp("sharebroker") / "data")
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture
def sharebroker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Start brokers of this test's own: `sharebroker_factory({"log.retention.ms": 1000})` or, for
    names without underscores of their own, `sharebroker_factory(num_partitions=3)` (`_` -> `.`).
    Each has its own data directory under the test's tmp_path (`name` picks it); all are killed
    when the test ends. `security=BrokerSecurity(...)` adds TLS/SASL listeners, certificates and
    users; its confluent()/kafka_python()/aiokafka() give each client's settings."""
    started: list[Broker] = []

    def factory(overrides: Mapping[str, object] | None = None, /, *, fsync: bool = False,
                name: str | None = None, security: BrokerSecurity | None = None, **settings: object) -> Broker:
        merged = dict(overrides or {})
        merged.update({key.replace("_", "."): value for key, value in settings.items()})
        broker = broker_for_tests(tmp_path / (name or ("data" if not started else f"data-{len(started)}")), merged,
                                  fsync=fsync, security=security)
        started.append(broker)
        return broker

    yield factory
    for broker in started:
        if isinstance(broker, BrokerProcess):
            broker.kill()


@pytest.fixture
def sharebroker_topic() -> str:
    return unique_name("topic")


@pytest.fixture
def sharebroker_group() -> str:
    return unique_name("group")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(reason): the test starts or controls broker processes of its own "
                                       f"(skipped when {ENV_BOOTSTRAP} is set)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker(MARKER)
    if marker is not None and external_bootstrap() is not None:
        _skip_external(marker.args[0] if marker.args else marker.kwargs.get("reason", "starts brokers of its own"))


def pytest_report_header(config: pytest.Config) -> str | None:
    bootstrap = external_bootstrap()
    return f"sharebroker: broker fixtures use the external broker at {bootstrap} ({ENV_BOOTSTRAP})" if bootstrap else None
