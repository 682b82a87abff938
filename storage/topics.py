"""Durable cluster metadata: cluster id, topics (id, partition count, config overrides), the
next producer-id block, dynamic broker configs (AlterConfigs) and the security sections (ACLs,
client quotas), in one JSON file `<log dir>/sharebroker-metadata.json`. Every mutation
writes a new file atomically (temp file, fsync, rename, fsync directory) before it returns, and
only then changes the in-memory view, so memory never runs ahead of disk.

Ids follow Kafka: the cluster id is a random UUID written as 22 URL-safe base64 characters; topic
ids are UUIDs (never the reserved zero/metadata ids, never one whose base64 form starts with '-').
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sharebroker.storage.files import write_atomic

METADATA_FILE = "sharebroker-metadata.json"
_FORMAT_VERSION = 1
SECTIONS = ("acls", "client_quotas")
_RESERVED = {uuid.UUID(int=0), uuid.UUID(int=1)}  # Kafka's ZERO_UUID and METADATA_TOPIC_ID


def random_kafka_uuid() -> uuid.UUID:
    """Kafka's Uuid.randomUuid(): not reserved, and its base64 form does not start with '-'."""
    while True:
        u = uuid.uuid4()
        if u not in _RESERVED and not _b64(u).startswith("-"):
            return u


def _b64(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


class MetadataError(Exception):
    """The metadata file exists but cannot be read; the broker must not guess."""


@dataclass(slots=True)
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def topic_id_base64(self) -> str:
        return _b64(self.topic_id)

    def to_json(self) -> dict[str, Any]:
        return {"topic_id": str(self.topic_id), "partitions": self.partitions, "configs": dict(self.configs)}


class TopicStore:
    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / METADATA_FILE
        self.cluster_id: str = ""
        self.next_producer_id_block = 0
        # AlterConfigs on the broker resource: {"cluster": {name: value}, "broker": {name: value}}
        self.dynamic_broker_configs: dict[str, dict[str, str]] = {}
        # Whole-document sections other owners keep here ("acls", "client_quotas"): durable alike.
        self.sections: dict[str, Any] = {}
        self._topics: dict[str, TopicMeta] = {}
        self._by_id: dict[uuid.UUID, TopicMeta] = {}

    @property
    def topics(self) -> Mapping[str, TopicMeta]:
        return MappingProxyType(self._topics)

    @property
    def by_id(self) -> Mapping[uuid.UUID, TopicMeta]:
        return MappingProxyType(self._by_id)

    def load(self) -> None:
        """Read the file; on first start create it with a new cluster id."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.cluster_id = _b64(random_kafka_uuid())
            self._persist(self._topics, self.next_producer_id_block)
            return
        try:
            doc = json.loads(raw)
            if doc.get("version") != _FORMAT_VERSION:
                raise MetadataError(f"{self.path}: unsupported version {doc.get('version')!r}")
            topics = {name: TopicMeta(name, uuid.UUID(t["topic_id"]), int(t["partitions"]),
                                      {str(k): str(v) for k, v in t.get("configs", {}).items()})
                      for name, t in doc["topics"].items()}
            cluster_id = str(doc["cluster_id"])
            next_block = int(doc["next_producer_id_block"])
            dynamic = {str(scope): {str(k): str(v) for k, v in values.items()}
                       for scope, values in doc.get("dynamic_broker_configs", {}).items()}
            sections = {name: doc[name] for name in SECTIONS if name in doc}
        except MetadataError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MetadataError(f"{self.path} is unreadable: {exc}") from exc
        self.cluster_id = cluster_id
        self.next_producer_id_block = next_block
        self.dynamic_broker_configs = dynamic
        self.sections = sections
        self._set(topics)

    def _set(self, topics: dict[str, TopicMeta]) -> None:
        self._topics = topics
        self._by_id = {t.topic_id: t for t in topics.values()}

    def _persist(self, topics: Mapping[str, TopicMeta], next_block: int,
                 dynamic: Mapping[str, Mapping[str, str]] | None = None,
                 sections: Mapping[str, Any] | None = None) -> None:
        doc: dict[str, Any] = {
            "version": _FORMAT_VERSION,
            "cluster_id": self.cluster_id,
            "next_producer_id_block": next_block,
            "dynamic_broker_configs": dict(self.dynamic_broker_configs if dynamic is None else dynamic),
            "topics": {name: t.to_json() for name, t in sorted(topics.items())},
        }
        doc.update(self.sections if sections is None else sections)
        write_atomic(self.path, json.dumps(doc, indent=1).encode("utf-8"))

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str] | None = None,
                     *, topic_id: uuid.UUID | None = None) -> TopicMeta:
        if name in self._topics:
            raise ValueError(f"topic {name} already exists")
        if partitions < 1:
            raise ValueError(f"topic {name} needs at least one partition, not {partitions}")
        tid = topic_id or random_kafka_uuid()
        while topic_id is None and tid in self._by_id:
            tid = random_kafka_uuid()
        meta = TopicMeta(name, tid, partitions, dict(configs or {}))
        topics = dict(self._topics)
        topics[name] = meta
        self._persist(topics, self.next_producer_id_block)
        self._set(topics)
        return meta

    def delete_topic(self, name: str) -> TopicMeta:
        if name not in self._topics:
            raise KeyError(name)
        topics = dict(self._topics)
        meta = topics.pop(name)
        self._persist(topics, self.next_producer_id_block)
        self._set(topics)
        return meta

    def set_partitions(self, name: str, partitions: int) -> TopicMeta:
        old = self._topics[name]
        if partitions < old.partitions:
            raise ValueError(f"topic {name} has {old.partitions} partitions; the count cannot go down")
        return self._replace(TopicMeta(name, old.topic_id, partitions, dict(old.configs)))

    def set_configs(self, name: str, configs: Mapping[str, str]) -> TopicMeta:
        """Replace the topic's config overrides with `configs`."""
        old = self._topics[name]
        return self._replace(TopicMeta(name, old.topic_id, old.partitions, {str(k): str(v) for k, v in configs.items()}))

    def _replace(self, meta: TopicMeta) -> TopicMeta:
        topics = dict(self._topics)
        topics[meta.name] = meta
        self._persist(topics, self.next_producer_id_block)
        self._set(topics)
        return meta

    def set_dynamic_broker_configs(self, configs: Mapping[str, Mapping[str, str | None]]) -> None:
        """Replace the dynamic broker configs: {"cluster": {...}, "broker": {...}}; None values and
        empty scopes are dropped."""
        dynamic = {str(scope): {str(k): str(v) for k, v in values.items() if v is not None}
                   for scope, values in configs.items()}
        dynamic = {scope: values for scope, values in dynamic.items() if values}
        self._persist(self._topics, self.next_producer_id_block, dynamic)
        self.dynamic_broker_configs = dynamic

    def set_section(self, name: str, value: Any) -> None:
        """Replace one security section (JSON-serialisable), durable before it returns."""
        if name not in SECTIONS:
            raise ValueError(f"unknown metadata section {name}")
        sections = {**self.sections, name: value}
        self._persist(self._topics, self.next_producer_id_block, sections=sections)
        self.sections = sections

    def reserve_producer_ids(self, block: int = 1000) -> range:
        """A block of producer ids nobody got before, durable before it is handed out."""
        if block < 1:
            raise ValueError("block must be positive")
        start = self.next_producer_id_block
        self._persist(self._topics, start + block)
        self.next_producer_id_block = start + block
        return range(start, start + block)


__all__ = ["METADATA_FILE", "MetadataError", "TopicMeta", "TopicStore", "random_kafka_uuid"]
