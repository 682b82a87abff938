"""Finalized feature levels of this one-node cluster (what a KRaft controller keeps in its
FeatureLevelRecords), durable in the data directory.

A new data directory is finalized at the levels of a Kafka 4.4 cluster formatted with its default
release (share.version 2: share groups with dead-letter queues, KIP-1191). A directory written before
this file existed keeps the level it ran at (share.version 1) until UpdateFeatures (57) or
``sharebroker features --upgrade`` raises it; a downgrade to 1 turns the DLQ off."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sharebroker.protocol.errors import ErrorCode, KafkaError
from sharebroker.storage.files import write_atomic

FEATURES_FILE = "sharebroker-features.json"

# name -> (lowest, highest) level this broker supports
SUPPORTED: dict[str, tuple[int, int]] = {
    "metadata.version": (1, 27),
    "group.version": (0, 1),
    "share.version": (0, 2),
}
# What a new directory is finalized at, and what a directory from before this file is taken to run.
_NEW_DIRECTORY = {"metadata.version": 27, "group.version": 1, "share.version": 2}
_EXISTING_DIRECTORY = {"metadata.version": 27, "group.version": 1, "share.version": 1}

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    feature: str
    level: int
    upgrade_type: int = UPGRADE


class FeatureLevels:
    def __init__(self, log_dir: Path, node_id: int) -> None:
        self._path = Path(log_dir) / FEATURES_FILE
        self._node_id = node_id
        self.levels: dict[str, int] = dict(_NEW_DIRECTORY)
        self.epoch = 0

    def load(self, *, new_directory: bool) -> None:
        if self._path.exists():
            doc = json.loads(self._path.read_text())
            self.levels = {str(k): int(v) for k, v in doc["levels"].items()}
            self.epoch = int(doc.get("epoch", 0))
            return
        self.levels = dict(_NEW_DIRECTORY if new_directory else _EXISTING_DIRECTORY)
        self.epoch = 1
        self._save(self.levels, self.epoch)

    def level(self, feature: str) -> int:
        return self.levels.get(feature, 0)

    @property
    def share_dlq_supported(self) -> bool:
        """share.version >= 2 (KIP-1191)."""
        return self.level("share.version") >= 2

    def supported(self) -> list[dict[str, int | str]]:
        return [{"name": n, "min_version": lo, "max_version": hi} for n, (lo, hi) in SUPPORTED.items()]

    def finalized(self) -> list[dict[str, int | str]]:
        return [{"name": n, "min_version_level": v, "max_version_level": v}
                for n, v in self.levels.items() if v > 0]

    def check(self, update: FeatureUpdate) -> None:
        """Raise KafkaError(INVALID_UPDATE_VERSION) with the controller's message when refused."""
        name, level = update.feature, update.level
        if update.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
            raise _invalid(name, level, "The controller does not support the given upgrade type.")
        if level < 0:
            raise _invalid(name, level, "A feature version cannot be less than 0.")
        supported = SUPPORTED.get(name)
        what = f"Local controller {self._node_id}"
        if supported is None:
            if level > 0:
                raise _invalid(name, level, f"{what} does not support this feature.")
        elif not supported[0] <= level <= supported[1]:
            lo, hi = supported
            raise _invalid(name, level, f"{what} only supports versions {lo if lo == hi else f'{lo}-{hi}'}")
        current = self.level(name)
        if level < current and update.upgrade_type == UPGRADE:
            raise _invalid(name, level, "Can't downgrade the version of this feature without setting the "
                                        "upgrade type to either safe or unsafe downgrade.")
        if level > current and update.upgrade_type != UPGRADE:
            raise _invalid(name, level, "Can't downgrade to a newer version.")
        if name == "metadata.version" and level != current:
            raise _invalid(name, level, "sharebroker runs metadata.version 27 only.")

    def apply(self, updates: list[FeatureUpdate]) -> None:
        """Apply checked updates together (one durable write, one epoch)."""
        levels = dict(self.levels)
        for u in updates:
            if u.level == 0:
                levels.pop(u.feature, None)
            else:
                levels[u.feature] = u.level
        if levels == self.levels:
            return
        self._save(levels, self.epoch + 1)  # written before it takes effect
        self.levels = levels
        self.epoch += 1

    def _save(self, levels: dict[str, int], epoch: int) -> None:
        write_atomic(self._path, json.dumps({"epoch": epoch, "levels": levels}, sort_keys=True).encode())


def _invalid(feature: str, level: int, message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_update_version,
                      f"Invalid update version {level} for feature {feature}. {message}")


__all__ = ["FEATURES_FILE", "FeatureLevels", "FeatureUpdate", "SUPPORTED", "UPGRADE", "SAFE_DOWNGRADE",
           "UNSAFE_DOWNGRADE"]
