from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker per test module; tests use their own topic names."""
    proc = BrokerProcess(tmp_path_factory.mktemp("broker") / "data").start()
    yield proc
    proc.stop()
    assert "Traceback" not in proc.log_text(), proc.log_text()[-4000:]


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator:
    """Factory for brokers a test controls itself (restart, kill, special settings)."""
    started: list[BrokerProcess] = []

    def factory(overrides: dict[str, str] | None = None, *, fsync: bool = False, name: str = "data") -> BrokerProcess:
        proc = BrokerProcess(tmp_path / name, overrides, fsync=fsync)
        started.append(proc)
        return proc.start()

    yield factory
    for proc in started:
        proc.kill()


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
