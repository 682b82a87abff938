"""Module-scoped brokers for the suite, from sharebroker's pytest plugin (SHAREBROKER_BOOTSTRAP
honoured)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from sharebroker.testing import BrokerProcess
from sharebroker.testing.plugin import Broker, broker_for_tests


def module_broker(tmp_path_factory: pytest.TempPathFactory, name: str,
                  overrides: Mapping[str, object] | None = None) -> Iterator[Broker]:
    """Body of a module-scoped broker fixture: start, hand out, stop, and fail the module if the
    broker logged a traceback."""
    proc = broker_for_tests(tmp_path_factory.mktemp(name) / "data", overrides)
    yield proc
    proc.stop()
    if isinstance(proc, BrokerProcess):
        assert "Traceback" not in proc.log_text(), proc.log_text()[-4000:]
