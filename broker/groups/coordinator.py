"""The group coordinator for share groups: owns every ShareGroup, their configs (durable in
`share-group-configs.json`), member session expiry, and share-partition initialization through
the persister before partitions are assigned."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.flusher import now_ms
from broker.groups import records as grec
from broker.groups.share_group import HeartbeatError, ShareGroup, ShareMember, TopicInfo, validate_heartbeat
from broker.share.partition import ShareLimits
from broker.share_state.store import PersisterError
from broker.structured_log import get_logger
from config import ConfigError, GroupConfig, group_config, validate_group_configs
from storage import write_atomic

log = get_logger("sharebroker.groups")

GROUP_CONFIGS_FILE = "share-group-configs.json"
_SWEEP_INTERVAL_S = 0.1


class ShareGroupCoordinator:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.groups: dict[str, ShareGroup] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self._config_cache: dict[str, GroupConfig] = {}
        self._path = Path(broker.log_dir) / GROUP_CONFIGS_FILE
        self._sweeper: asyncio.Task[None] | None = None
        self._persisted: dict[str, tuple] = {}
        self._persisted_members: dict[str, set[str]] = {}

    # -- lifecycle -------------------------------------------------------------------------------

    def load(self) -> None:
        """Group configs from their file; groups by replaying `__consumer_offsets`."""
        if self._path.exists():
            self.configs = {g: dict(c) for g, c in json.loads(self._path.read_text()).items()}
        self.broker.group_log.register(self._restate)
        self.broker.group_log.replay({t: self._replay for t in (grec.MEMBER_METADATA, grec.GROUP_METADATA,
                                                               grec.MEMBER_ASSIGNMENT, grec.STATE_PARTITIONS)})
        now = now_ms()
        for group in self.groups.values():
            group.restore(self._topic_infos(group.subscribed_topic_names()))
            timeout = self.config(group.group_id).share_session_timeout_ms
            for m in group.members.values():
                m.deadline_ms = now + timeout  # members that do not come back expire normally
            self._persisted[group.group_id] = group.persisted_signature()
            self._persisted_members[group.group_id] = set(group.members)
        if self.groups:
            log.info("share groups loaded", groups=len(self.groups),
                     members=sum(len(g.members) for g in self.groups.values()))

    def _replay(self, key: bytes, value: bytes | None) -> None:
        record_type, strings, fields = grec.decode(key, value)
        group_id = strings[0]
        if record_type == grec.GROUP_METADATA:
            if fields is None:
                self.groups.pop(group_id, None)
            else:
                self.groups.setdefault(group_id, ShareGroup(group_id)).epoch = fields["epoch"]
            return
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
        if record_type == grec.STATE_PARTITIONS and fields is not None:
            group.initialized = {tid: set(ps) for tid, (_, ps) in fields["initialized"].items()}
            group.known_topics = {name: tid for tid, (name, _) in fields["initialized"].items() if name}
        elif record_type in (grec.MEMBER_METADATA, grec.MEMBER_ASSIGNMENT):
            member_id = strings[1]
            if fields is None:
                group.members.pop(member_id, None)
                return
            member = group.members.setdefault(member_id, ShareMember(member_id))
            for name, value_ in fields.items():
                setattr(member, name, value_)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._sweeper = loop.create_task(self._sweep_forever(), name="share-group-expiry")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()

    # -- persistence in __consumer_offsets -------------------------------------------------------

    def _group_records(self, group: ShareGroup) -> list[tuple[bytes, bytes | None]]:
        names = {t.topic_id: t.name for t in self.broker.topics.by_name.values()}
        out: list[tuple[bytes, bytes | None]] = [grec.group_metadata(group.group_id, group.epoch),
                                                grec.state_partitions(group.group_id, group.initialized, names)]
        for m in group.members.values():
            out.append(grec.member_metadata(group.group_id, m))
            out.append(grec.member_assignment(group.group_id, m))
        return out

    def _restate(self, in_partition: Any) -> list[tuple[bytes, bytes | None]]:
        return [r for g in self.groups.values() if in_partition(g.group_id) for r in self._group_records(g)]

    async def persist(self, group: ShareGroup) -> None:
        """Write the group's records if anything persisted about it changed."""
        signature = group.persisted_signature()
        if self._persisted.get(group.group_id) == signature:
            return
        records = self._group_records(group)
        gone = self._persisted_members.get(group.group_id, set()) - set(group.members)
        for member_id in gone:
            records.extend(grec.member_tombstones(group.group_id, member_id))
        self._persisted[group.group_id] = signature
        self._persisted_members[group.group_id] = set(group.members)
        await self.broker.group_log.append(group.group_id, records)

    # -- configs ---------------------------------------------------------------------------------

    def config(self, group_id: str) -> GroupConfig:
        cached = self._config_cache.get(group_id)
        if cached is None:
            cached = group_config(self.broker.config, self.configs.get(group_id, {}))
            self._config_cache[group_id] = cached
        return cached

    def limits(self, group_id: str) -> ShareLimits:
        c = self.config(group_id)
        return ShareLimits(record_lock_duration_ms=c.share_record_lock_duration_ms,
                           delivery_count_limit=c.share_delivery_count_limit,
                           max_in_flight_records=c.share_partition_max_record_locks,
                           renew_enabled=c.share_renew_acknowledge_enable)

    def auto_offset_reset(self, group_id: str) -> Any:
        return self.config(group_id).share_auto_offset_reset_strategy

    def set_configs(self, group_id: str, overrides: dict[str, str], *, validate_only: bool) -> None:
        validate_group_configs(self.broker.config, overrides)
        if validate_only:
            return
        if overrides:
            self.configs[group_id] = dict(overrides)
        else:
            self.configs.pop(group_id, None)
        write_atomic(self._path, json.dumps(self.configs, sort_keys=True, indent=1).encode())
        self.invalidate_configs()

    def invalidate_configs(self) -> None:
        self._config_cache.clear()

    # -- heartbeat -------------------------------------------------------------------------------

    def _topic_infos(self, names: set[str]) -> dict[str, TopicInfo]:
        out = {}
        for name in names:
            topic = self.broker.topics.get(name)
            if topic is not None:
                out[name] = TopicInfo(name, topic.topic_id, len(topic.partitions))
        return out

    async def heartbeat(self, body: Any, conn: Any) -> dict[str, Any]:
        group_id, member_id, epoch = body.group_id, body.member_id, body.member_epoch
        subscribed = tuple(body.subscribed_topic_names) if body.subscribed_topic_names is not None else None
        validate_heartbeat(group_id, member_id, epoch, body.rack_id, subscribed)
        if self.broker.group_type(group_id) not in (None, "share"):
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        group = self.groups.get(group_id)
        if group is None:
            if epoch != 0:  # only a join creates a group; groups survive restarts, so this is a real miss
                raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
            group = ShareGroup(group_id)
            self.groups[group_id] = group
            log.info("share group created", group=group_id)
        cfg = self.config(group_id)
        before = group.members[member_id].assignment if member_id in group.members else None
        group.heartbeat(member_id=member_id, member_epoch=epoch, rack_id=body.rack_id,
                        subscribed=subscribed, client_id=conn.client_id or "", client_host=conn.client_host,
                        now_ms=now_ms(), session_timeout_ms=cfg.share_session_timeout_ms,
                        max_size=self.broker.config["group.share.max.size"])
        if epoch == -1:
            log.info("share group member left", group=group_id, member=member_id)
            await self.persist(group)
            return {"member_id": member_id, "member_epoch": -1, "heartbeat_interval": 0, "assignment": None}
        if before is None:
            log.info("share group member joined", group=group_id, member=member_id, subscribed=subscribed)
        await self._initialize_partitions(group)
        group.reconcile(self._topic_infos(group.subscribed_topic_names()))
        group.advance_member(member_id)
        member = group.members[member_id]
        include = epoch == 0 or subscribed is not None or member.assignment != before
        assignment = None
        if include:
            assignment = {"topic_partitions": [{"topic_id": tid, "partitions": sorted(ps)}
                                               for tid, ps in sorted(member.assignment.items(), key=lambda kv: str(kv[0]))]}
        await self.persist(group)
        return {"member_id": member_id, "member_epoch": member.epoch,
                "heartbeat_interval": cfg.share_heartbeat_interval_ms, "assignment": assignment}

    async def _initialize_partitions(self, group: ShareGroup) -> None:
        todo = group.partitions_to_initialize(self._topic_infos(group.subscribed_topic_names()))
        if not todo:
            return
        state_epoch = group.epoch
        done: dict[uuid.UUID, tuple[TopicInfo, list[int]]] = {}
        for info, index, start in todo:
            try:
                await self.broker.share_persister.initialize(group.group_id, info.topic_id, index, state_epoch, start)
            except PersisterError as exc:
                log.warning("share partition initialization failed", group=group.group_id, topic=info.name,
                            partition=index, error=exc.code.name, message=exc.message)
                continue
            done.setdefault(info.topic_id, (info, []))[1].append(index)
        for info, indexes in done.values():
            group.mark_initialized(info, indexes)
            log.info("share partitions initialized", group=group.group_id, topic=info.name, partitions=indexes)

    # -- expiry and topic changes ----------------------------------------------------------------

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_INTERVAL_S)
            now = now_ms()
            for group in list(self.groups.values()):
                for member_id in group.expired_members(now):
                    group.remove_member(member_id)
                    log.info("share group member expired", group=group.group_id, member=member_id,
                             session_timeout_ms=self.config(group.group_id).share_session_timeout_ms)
                if group.members:
                    group.reconcile(self._topic_infos(group.subscribed_topic_names()))
                await self.persist(group)

    async def topic_deleted(self, topic_id: uuid.UUID, partitions: int) -> None:
        for group in self.groups.values():
            if group.forget_topic(topic_id):
                for index in range(partitions):
                    await self.broker.share_persister.delete(group.group_id, topic_id, index)
                await self.persist(group)

    def describe_configs(self, group_id: str) -> list[Any]:
        from config import describe_group_configs
        return describe_group_configs(self.broker.config, self.configs.get(group_id, {}))

    def alter_configs(self, group_id: str, changes: list[tuple[str, int, str | None]], *, validate_only: bool,
                      incremental: bool) -> None:
        current = dict(self.configs.get(group_id, {})) if incremental else {}
        for name, op, value in changes:
            if op == 1:
                current.pop(name, None)
            elif op == 0:
                if value is None:
                    raise ConfigError(name, f"Null value not supported for group config: {name}")
                current[name] = value
            else:
                raise ConfigError(name, f"Config operation {op} is not supported for group config {name}")
        self.set_configs(group_id, current, validate_only=validate_only)
