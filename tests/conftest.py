"""Brokers for the suite come from sharebroker's own pytest plugin (sharebroker.testing.plugin), so
every run tests it. With SHAREBROKER_BOOTSTRAP set they are that external broker (see the plugin)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sharebroker.testing import unique_name
from sharebroker.testing.plugin import Broker, BrokerFactory
from tests.brokers import module_broker


# Spark test modules whose tests start Spark in subprocesses of their own, not the session's.
OWN_SPARK = {"tests/spark/test_pipeline_cli.py"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With pytest-xdist (`make test` runs `-n 3 --dist loadgroup`): a module's tests stay on one
    worker, so its module-scoped broker starts once, and every Spark test that uses the test run's
    Spark session goes to one worker, so one local[2] session serves them all (the pipeline
    command's tests start Spark in their own processes: they are a group of their own, or that one
    worker would take as long as the rest of the suite). Most of a test's time is spent waiting on
    brokers and clients, so three workers on two cores finish the suite sooner."""
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        shares_spark = module.startswith("tests/spark/") and module not in OWN_SPARK
        item.add_marker(pytest.mark.xdist_group("spark" if shares_spark else module))
    # The Spark groups take minutes each, far longer than any other: handed out first, so that the
    # other workers fill the time beside them instead of the run ending on a Spark group alone.
    items.sort(key=lambda item: not item.nodeid.startswith("tests/spark/"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker per test module; tests use their own topic names."""
    yield from module_broker(tmp_path_factory, "broker")


@pytest.fixture
def make_broker(sharebroker_factory: BrokerFactory) -> BrokerFactory:
    """Brokers a test controls itself (restart, kill, special settings): the plugin's factory."""
    return sharebroker_factory


@pytest.fixture
def topic_name() -> str:
    return unique_name("t")
