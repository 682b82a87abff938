"""Config changes are written before they take effect: a dynamic broker config or a group
config whose write fails (a full disk; here its temp file's path is taken by a directory) is
refused with the OSError and changes nothing. In-process Broker on a temp dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharebroker.broker.groups.coordinator import GROUP_CONFIGS_FILE
from sharebroker.storage import METADATA_FILE
from tests.unit.test_group_log import running_broker


async def test_a_dynamic_broker_config_whose_write_fails_changes_nothing(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b:
        before = b.config["log.retention.ms"]
        blocker = tmp_path / (METADATA_FILE + ".tmp")
        blocker.mkdir()
        with pytest.raises(OSError):
            b.alter_broker_configs([("log.retention.ms", 0, "1234")], per_broker=False, incremental=True,
                                   validate_only=False)
        assert b.config["log.retention.ms"] == before and b.config.dynamic_values() == {}
        blocker.rmdir()
        b.alter_broker_configs([("log.retention.ms", 0, "1234")], per_broker=False, incremental=True,
                               validate_only=False)
        assert b.config["log.retention.ms"] == 1234


async def test_a_group_config_whose_write_fails_changes_nothing(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b:
        groups = b.share_groups
        before = groups.config("g").share_record_lock_duration_ms
        blocker = tmp_path / (GROUP_CONFIGS_FILE + ".tmp")
        blocker.mkdir()
        with pytest.raises(OSError):
            groups.set_configs("g", {"share.record.lock.duration.ms": "45000"}, validate_only=False)
        assert groups.configs == {} and groups.config("g").share_record_lock_duration_ms == before
        blocker.rmdir()
        groups.set_configs("g", {"share.record.lock.duration.ms": "45000"}, validate_only=False)
        assert groups.config("g").share_record_lock_duration_ms == 45000
