"""The group coordinator for share groups: owns every ShareGroup, their configs (durable in
`share-group-configs.json`), member session expiry, and share-partition initialization through
the persister before partitions are assigned."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from sharebroker.broker.clock import ExpiryHold
from sharebroker.broker.metrics import NULL_RECORDER, Recorder
from sharebroker.broker.groups import records as grec
from sharebroker.broker.groups.assignment_timers import AssignmentTimers, assignment_time, assignment_timestamp
from sharebroker.broker.groups.share_group import (
    ShareGroup,
    ShareMember,
    TopicInfo,
    validate_heartbeat,
)
from sharebroker.broker.share.partition import ShareLimits

from sharebroker.broker.structured_log import get_logger
from sharebroker.config import ConfigError, GroupConfig, group_config, validate_group_configs
from sharebroker.storage import write_atomic
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.clock import Clock
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.groups.directory import GroupDirectory
    from sharebroker.broker.groups.group_log import GroupLog
    from sharebroker.broker.share.leader import SharePartitionLeader
    from sharebroker.broker.share_state.persister import Persister
    from sharebroker.broker.topics import Topics
    from sharebroker.config import BrokerConfig

log = get_logger("sharebroker.groups")

GROUP_CONFIGS_FILE = "share-group-configs.json"
_SWEEP_INTERVAL_MS = 100
_NO_TARGET = (0, None)  # the assignment state of a new group: no target-metadata record needed yet


class HeartbeatAnswer(NamedTuple):
    """What a successful ShareGroupHeartbeat answers; `assignment` is None when it is not sent."""
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: list[tuple[uuid.UUID, list[int]]] | None


class _LockUsers:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class _GroupTurn:
    """`async with`: a group's lock, created on first use and dropped when no operation holds or
    awaits it (a plain class: an async generator context manager cost a steady heartbeat more
    than the rest of its coordinator work)."""
    __slots__ = ("_locks", "_group_id", "_entry")

    def __init__(self, locks: dict[str, _LockUsers], group_id: str) -> None:
        self._locks = locks
        self._group_id = group_id

    async def __aenter__(self) -> None:
        entry = self._locks.get(self._group_id)
        if entry is None:
            entry = self._locks[self._group_id] = _LockUsers()
        entry.users += 1
        self._entry = entry
        try:
            await entry.lock.acquire()
        except BaseException:
            self._leave()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._entry.lock.release()
        self._leave()

    def _leave(self) -> None:
        entry = self._entry
        entry.users -= 1
        if not entry.users:
            del self._locks[self._group_id]


class ShareLeaders(Protocol):
    """The share-partition leaders a deleted group or topic must unload (SharePartitions)."""

    def existing_leader(self, group_id: str, topic_id: uuid.UUID, index: int) -> SharePartitionLeader | None: ...

    def drop(self, leader: SharePartitionLeader) -> None: ...

    @property
    def traced_groups(self) -> set[str]: ...

    def set_traced(self, group_id: str, enabled: bool) -> None: ...


class ShareGroupCoordinator:
    metrics: Recorder = NULL_RECORDER  # counts rebalances; the broker sets its recorder

    def __init__(self, config: BrokerConfig, log_dir: Path, clock: Clock, topics: Topics, group_log: GroupLog,
                 persister: Persister, groups: GroupDirectory) -> None:
        self.broker_config = config
        self.clock = clock
        self.topics = topics
        self.group_log = group_log
        self.persister = persister
        self.directory = groups
        # The leaders depend on this coordinator's limits in turn: the broker sets this once both exist.
        self.leaders: ShareLeaders | None = None
        # share.version >= 2 (the broker wires its feature levels in): DLQs may be used
        self.share_dlq_supported: Callable[[], bool] = lambda: False
        self.groups: dict[str, ShareGroup] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self._config_cache: dict[str, GroupConfig] = {}
        # group -> (whether DLQs were supported, its ShareLimits): read several times per ShareFetch
        self._limits_cache: dict[str, tuple[bool, ShareLimits]] = {}
        self.config_listeners: list[Callable[[], None]] = []  # called when group configs may have changed
        self._path = Path(log_dir) / GROUP_CONFIGS_FILE
        self._sweeper: asyncio.Task[None] | None = None
        # Groups the expiry sweep visits: those with members or with changes not yet written. A
        # group enters on a heartbeat or a write and leaves once empty and written, so 10,000
        # empty groups cost the sweep nothing.
        self._sweep_due: set[str] = set()
        self._persisted_epoch: dict[str, int] = {}  # group id -> the epoch its last group record says
        self._persisted_members: dict[str, set[str]] = {}  # members with records (they need tombstones)
        # group id -> the (assignment epoch, computation time) its last target-metadata record says
        self._persisted_assignment: dict[str, tuple[int, int | None]] = {}
        self._group_locks: dict[str, _LockUsers] = {}  # the lock of each group some operation holds or awaits
        # Pending target computations, one timer per group (share.assignment.interval.ms)
        self._assignment_timers = AssignmentTimers(clock, self._assign, "share-group-assignment")

    def _leaders(self) -> ShareLeaders:
        assert self.leaders is not None, "the broker wires the share leaders in before serving"
        return self.leaders

    # -- lifecycle -------------------------------------------------------------------------------

    def begin_load(self) -> dict[int, Callable[[bytes, bytes | None], None]]:
        """Group configs from their file; the handlers of this coordinator's record types for the
        one replay of `__consumer_offsets` that the broker runs for every coordinator."""
        if self._path.exists():
            self.configs = {g: dict(c) for g, c in json.loads(self._path.read_text()).items()}
        self.group_log.register(self._restate)
        return {t: self._replay for t in grec.RECORD_TYPES}

    def finish_load(self) -> None:
        """After the replay: groups restored against today's topics, members given fresh deadlines."""
        now = self.clock.monotonic_ms()
        for group in self.groups.values():
            # the subscriptions from the members' records: the group's own count is rebuilt by restore
            group.restore(self._topic_infos({t for m in group.members.values() for t in m.subscribed}))
            timeout = self.config(group.group_id).share_session_timeout_ms
            for m in group.members.values():
                group.set_deadline(m, now + timeout)  # members that do not come back expire normally
            self._persisted_epoch[group.group_id] = group.epoch
            self._persisted_members[group.group_id] = set(group.members)
            self._persisted_assignment[group.group_id] = self._assignment_state(group)
            if group.members:
                self._sweep_due.add(group.group_id)
        if self.groups:
            log.info("share groups loaded", groups=len(self.groups),
                     members=sum(len(g.members) for g in self.groups.values()))

    def _replay(self, key: bytes, value: bytes | None) -> None:
        """Kafka's replay rules: a record with a value creates its group if needed; a tombstone only
        removes (the group, a member, the state metadata) and is ignored when its group is gone, so
        whatever order a deletion's tombstones come in, they never bring the group back."""
        record_type, strings, fields = grec.decode(key, value)
        group_id = strings[0]
        group = self.groups.get(group_id)
        if fields is None:
            if group is None:
                return
            if record_type == grec.GROUP_METADATA:
                del self.groups[group_id]
            elif record_type == grec.STATE_PARTITIONS:
                group.initialized = {}
                group.known_topics = {}
            elif record_type == grec.TARGET_METADATA:
                group.assignment_time_ms = None
            elif record_type in (grec.MEMBER_METADATA, grec.MEMBER_ASSIGNMENT):
                group.members.pop(strings[1], None)
            return
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
        if record_type == grec.GROUP_METADATA:
            group.epoch = fields["epoch"]
        elif record_type == grec.TARGET_METADATA:  # the epoch is the members' (see ShareGroup.restore)
            group.assignment_time_ms = assignment_time(self.clock, fields["assignment_timestamp_ms"])
        elif record_type == grec.STATE_PARTITIONS:
            group.initialized = {tid: set(ps) for tid, (_, ps) in fields["initialized"].items()}
            group.known_topics = {name: tid for tid, (name, _) in fields["initialized"].items() if name}
        elif record_type in (grec.MEMBER_METADATA, grec.MEMBER_ASSIGNMENT):
            member = group.members.setdefault(strings[1], ShareMember(strings[1]))
            for name, value_ in fields.items():
                setattr(member, name, value_)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.apply_trace_configs()  # the group configs loaded, the leaders wired in
        self._sweeper = loop.create_task(self._sweep_forever(), name="share-group-expiry")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        await self._assignment_timers.stop()

    # -- persistence in __consumer_offsets -------------------------------------------------------

    def _topic_names(self, group: ShareGroup) -> dict[uuid.UUID, str]:
        """The names of the topics the group has initialized partitions of (those that exist)."""
        names = {}
        for topic_id in group.initialized:
            topic = self.topics.get_by_id(topic_id)
            if topic is not None:
                names[topic_id] = topic.name
        return names

    def _state_partitions_record(self, group: ShareGroup) -> tuple[bytes, bytes | None]:
        return grec.state_partitions(group.group_id, group.initialized, self._topic_names(group))

    @staticmethod
    def _member_records(group_id: str, member: ShareMember) -> list[tuple[bytes, bytes | None]]:
        return [grec.member_metadata(group_id, member), grec.member_assignment(group_id, member)]

    @staticmethod
    def _assignment_state(group: ShareGroup) -> tuple[int, int | None]:
        return group.assignment_epoch, group.assignment_time_ms

    def _target_metadata_record(self, group: ShareGroup) -> tuple[bytes, bytes | None]:
        return grec.target_metadata(group.group_id, group.assignment_epoch,
                                    assignment_timestamp(self.clock, group.assignment_time_ms))

    def _group_records(self, group: ShareGroup) -> list[tuple[bytes, bytes | None]]:
        out = [grec.group_metadata(group.group_id, group.epoch), self._state_partitions_record(group),
               self._target_metadata_record(group)]
        for m in group.members.values():
            out += self._member_records(group.group_id, m)
        return out

    def _restate(self, in_partition: Any) -> list[tuple[bytes, bytes | None]]:
        return [r for g in self.groups.values() if in_partition(g.group_id) for r in self._group_records(g)]

    def _unwritten(self, group: ShareGroup) -> bool:
        """Whether the group holds changes its records do not say yet (a write that failed)."""
        return (group.has_changes() or self._persisted_epoch.get(group.group_id) != group.epoch
                or self._persisted_assignment.get(group.group_id, _NO_TARGET) != self._assignment_state(group))

    async def persist(self, group: ShareGroup) -> None:
        """Write what changed of the group since its last write: its epoch, its initialized
        partitions, its last target computation, the members that changed, tombstones of the
        members that left. Nothing when nothing changed (a steady heartbeat)."""
        gid = group.group_id
        self._sweep_due.add(gid)  # until the sweep sees it written (a failed write is retried there)
        changed, left, initialized = group.take_changes()
        persisted = self._persisted_members.setdefault(gid, set())
        written = sorted(m for m in changed if m in group.members)
        gone = sorted(m for m in left if m in persisted and m not in group.members)
        records: list[tuple[bytes, bytes | None]] = []
        epoch = group.epoch
        new_epoch = self._persisted_epoch.get(gid) != epoch
        if new_epoch:
            records.append(grec.group_metadata(gid, epoch))
        if initialized:
            records.append(self._state_partitions_record(group))
        assignment = self._assignment_state(group)
        if self._persisted_assignment.get(gid, _NO_TARGET) != assignment:
            records.append(self._target_metadata_record(group))
        for member_id in written:
            records += self._member_records(gid, group.members[member_id])
        for member_id in gone:
            records.extend(grec.member_tombstones(gid, member_id))
        if not records:
            return
        try:
            await self.group_log.append(gid, records)
        except BaseException:
            group.give_back_changes(changed, left, initialized)  # retried with the next write
            raise
        if new_epoch:
            self.metrics.rebalance("share")
        self._persisted_epoch[gid] = epoch
        self._persisted_assignment[gid] = assignment
        persisted.update(written)
        persisted.difference_update(gone)

    # -- configs ---------------------------------------------------------------------------------

    def config(self, group_id: str) -> GroupConfig:
        cached = self._config_cache.get(group_id)
        if cached is None:
            def capped(name: str, stored: Any, effective: Any) -> None:
                # Kafka's GroupConfigManager warns as it applies the group's configs
                log.warning("group config capped to the broker's bounds", group=group_id, config=name,
                            value=stored, effective=effective)
            cached = group_config(self.broker_config, self.configs.get(group_id, {}), capped)
            self._config_cache[group_id] = cached
        return cached

    def limits(self, group_id: str) -> ShareLimits:
        dlq_supported = self.share_dlq_supported()  # share.version may move without a config change
        cached = self._limits_cache.get(group_id)
        if cached is not None and cached[0] == dlq_supported:
            return cached[1]
        c = self.config(group_id)
        limits = ShareLimits(record_lock_duration_ms=c.share_record_lock_duration_ms,
                             delivery_count_limit=c.share_delivery_count_limit,
                             max_in_flight_records=c.share_partition_max_record_locks,
                             renew_enabled=c.share_renew_acknowledge_enable,
                             read_committed=c.share_read_committed,
                             dlq=bool(c.errors_deadletterqueue_topic_name) and dlq_supported)
        self._limits_cache[group_id] = (dlq_supported, limits)
        return limits

    def auto_offset_reset(self, group_id: str) -> Any:
        return self.config(group_id).share_auto_offset_reset_strategy

    def set_configs(self, group_id: str, overrides: dict[str, str], *, validate_only: bool) -> None:
        validate_group_configs(self.broker_config, overrides)
        if validate_only:
            return
        configs = dict(self.configs)
        if overrides:
            configs[group_id] = dict(overrides)
        else:
            configs.pop(group_id, None)
        # Written before it takes effect: a failed write (a full disk) changes nothing.
        write_atomic(self._path, json.dumps(configs, sort_keys=True, indent=1).encode())
        self.configs = configs
        self.invalidate_configs()

    def apply_trace_configs(self) -> None:
        """share.record.trace.enable of every group with overrides, to the share-partition leaders."""
        leaders = self.leaders
        if leaders is None:
            return
        for group_id in set(self.configs) | set(leaders.traced_groups):
            leaders.set_traced(group_id, self.config(group_id).share_record_trace_enable)

    def invalidate_configs(self) -> None:
        self._config_cache.clear()
        self._limits_cache.clear()
        self.apply_trace_configs()  # a broker default it follows may have changed
        # a pending target waits for the interval in force now, which may have become shorter
        for group_id in self._assignment_timers.pending():
            self._assignment_timers.run_now(group_id)
        for listener in self.config_listeners:  # others reading group configs (consumer groups)
            listener()

    # -- heartbeat -------------------------------------------------------------------------------

    def _topic_infos(self, names: set[str]) -> dict[str, TopicInfo]:
        out = {}
        for name in names:
            topic = self.topics.get(name)
            if topic is not None:
                out[name] = TopicInfo(name, topic.topic_id, len(topic.partitions))
        return out

    def _serialized(self, group_id: str) -> _GroupTurn:
        """One operation at a time per group, as Kafka's coordinator runtime runs a group's
        operations in order: a heartbeat that awaits share-partition initialization or its
        group record never interleaves with another member's heartbeat, so a partition is
        initialized once and its state epoch never moves under a loaded leader."""
        return _GroupTurn(self._group_locks, group_id)

    async def heartbeat(self, body: Any, conn: Connection) -> HeartbeatAnswer:
        group_id, member_id, epoch = body.group_id, body.member_id, body.member_epoch
        subscribed = tuple(body.subscribed_topic_names) if body.subscribed_topic_names is not None else None
        validate_heartbeat(group_id, member_id, epoch, body.rack_id, subscribed)
        async with self._serialized(group_id):
            return await self._heartbeat(body, conn, subscribed)

    async def _heartbeat(self, body: Any, conn: Connection, subscribed: tuple[str, ...] | None) -> HeartbeatAnswer:
        group_id, member_id, epoch = body.group_id, body.member_id, body.member_epoch
        if self.directory.group_type(group_id) not in (None, "share"):
            raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        group = self.groups.get(group_id)
        if group is None:
            if epoch != 0:  # only a join creates a group; groups survive restarts, so this is a real miss
                raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
            group = ShareGroup(group_id)
            self.groups[group_id] = group
            log.info("share group created", group=group_id)
        self._sweep_due.add(group_id)
        cfg = self.config(group_id)
        before = group.members[member_id].assignment if member_id in group.members else None
        group.heartbeat(member_id=member_id, member_epoch=epoch, rack_id=body.rack_id,
                        subscribed=subscribed, client_id=conn.client_id or "", client_host=conn.client_host,
                        now_ms=self.clock.monotonic_ms(), session_timeout_ms=cfg.share_session_timeout_ms,
                        max_size=self.broker_config["group.share.max.size"])
        if epoch == -1:
            log.info("share group member left", group=group_id, member=member_id)
            await self.persist(group)
            return HeartbeatAnswer(member_id, -1, 0, None)
        if before is None:
            log.info("share group member joined", group=group_id, member=member_id, subscribed=subscribed)
        if group.checked_topology != (self.topics.version, group.topology_version):
            await self._check_topology(group)
        self._settle_target(group, cfg.share_assignment_interval_ms)
        member = group.members[member_id]
        subscribed_ids = None
        if subscribed is not None and before is not None:  # a subscription change keeps only subscribed topics
            subscribed_ids = {info.topic_id for info in self._topic_infos(set(member.subscribed)).values()}
        group.advance_member(member_id, subscribed_ids, self.topics.by_id)
        # Kafka sends the assignment on a full request (a join sends its subscription) or when it
        # changed; a steady heartbeat compares one reference.
        assignment = None
        if epoch == 0 or subscribed is not None or (member.assignment is not before and member.assignment != before):
            assignment = [(tid, sorted(ps)) for tid, ps in sorted(member.assignment.items(), key=lambda kv: str(kv[0]))]
        if self._unwritten(group):
            await self.persist(group)
        if group.members.get(member_id) is member:
            # The session runs from the answer: initializing share partitions or the first write
            # (creating an internal topic) may have held this heartbeat past its deadline.
            group.set_deadline(member, self.clock.monotonic_ms() + cfg.share_session_timeout_ms)
        return HeartbeatAnswer(member_id, member.epoch, cfg.share_heartbeat_interval_ms, assignment)

    async def _check_topology(self, group: ShareGroup) -> None:
        """Initialize subscribed share partitions that are not yet, and bump the epoch if the
        subscribed topics' metadata changed. Marked checked only when nothing is left to
        initialize, so a failed initialization is retried by the next heartbeat."""
        topics_version = self.topics.version  # before the awaits: a change during them is seen next time
        complete = await self._initialize_partitions(group)
        group.refresh_metadata(self._topic_infos(group.subscribed_topic_names()))
        group.checked_topology = (topics_version, group.topology_version) if complete else None

    def _settle_target(self, group: ShareGroup, interval_ms: int) -> None:
        """Compute the pending target assignment now if Kafka's assignment interval allows it,
        else have a timer compute it once the interval has passed: heartbeats in between are
        answered from the last target and never run the assignor."""
        if not group.assignment_pending():
            return
        now = self.clock.monotonic_ms()
        due = group.next_assignment_ms(interval_ms)
        if due is None or now >= due:
            started = time.perf_counter()
            group.compute_target(self._topic_infos(group.subscribed_topic_names()), now)
            log.info("share group target assignment computed", group=group.group_id, epoch=group.assignment_epoch,
                     members=len(group.members), ms=round((time.perf_counter() - started) * 1000, 2))
            return
        if group.group_id not in self._assignment_timers:
            self._assignment_timers.schedule(group.group_id, due)

    async def _assign(self, group_id: str) -> None:
        async with self._serialized(group_id):
            group = self.groups.get(group_id)
            if group is not None and group.members:
                self._settle_target(group, self.config(group_id).share_assignment_interval_ms)
                try:  # the time of this computation, which the interval runs from after a restart
                    await self.persist(group)
                except Exception as exc:  # noqa: BLE001 - retried by the expiry sweep
                    log.warning("share group record write failed", group=group_id, error=str(exc))

    async def _initialize_partitions(self, group: ShareGroup) -> bool:
        """True if every subscribed share partition is initialized now."""
        todo = group.partitions_to_initialize(self._topic_infos(group.subscribed_topic_names()))
        if not todo:
            return True
        complete = True
        state_epoch = group.epoch
        done: dict[uuid.UUID, tuple[TopicInfo, list[int]]] = {}
        for info, index, start in todo:
            try:
                await self.persister.initialize(group.group_id, info.topic_id, index, state_epoch, start)
            except KafkaError as exc:
                log.warning("share partition initialization failed", group=group.group_id, topic=info.name,
                            partition=index, error=exc.code.name, message=exc.message)
                complete = False
                continue
            done.setdefault(info.topic_id, (info, []))[1].append(index)
        for info, indexes in done.values():
            group.mark_initialized(info, indexes)
            log.info("share partitions initialized", group=group.group_id, topic=info.name, partitions=indexes)
        return complete

    # -- expiry and topic changes ----------------------------------------------------------------

    async def _sweep_forever(self) -> None:
        hold = ExpiryHold()
        while True:
            due = self.clock.monotonic_ms() + _SWEEP_INTERVAL_MS
            await asyncio.sleep(_SWEEP_INTERVAL_MS / 1000)
            now = self.clock.monotonic_ms()  # session deadlines never follow a wall-clock step
            if hold.holds(due, now):
                continue  # after a stall, serve the heartbeats that arrived meanwhile first
            for group_id in list(self._sweep_due):
                group = self.groups.get(group_id)
                if group is None or (not group.members and not self._unwritten(group)):
                    self._sweep_due.discard(group_id)  # empty and written: nothing to expire or retry
                    continue
                async with self._serialized(group.group_id):
                    if self.groups.get(group.group_id) is not group:
                        continue  # deleted while this sweep waited for the group
                    for member_id in group.expired_members(now):
                        group.remove_member(member_id)
                        log.info("share group member expired", group=group.group_id, member=member_id,
                                 session_timeout_ms=self.config(group.group_id).share_session_timeout_ms)
                    if group.members:
                        if group.checked_topology != (self.topics.version, group.topology_version):
                            group.refresh_metadata(self._topic_infos(group.subscribed_topic_names()))
                        self._settle_target(group, self.config(group.group_id).share_assignment_interval_ms)
                    try:
                        await self.persist(group)
                    except Exception as exc:  # noqa: BLE001 - retried at the next sweep
                        log.warning("share group record write failed", group=group.group_id, error=str(exc))

    async def topic_deleted(self, topic_id: uuid.UUID, partitions: int) -> None:
        for group_id in list(self.groups):  # groups may come and go while this awaits
            async with self._serialized(group_id):
                group = self.groups.get(group_id)
                if group is None or not group.forget_topic(topic_id):
                    continue
                for index in range(partitions):
                    await self.persister.delete(group_id, topic_id, index)
                await self.persist(group)

    def describe_configs(self, group_id: str) -> list[Any]:
        from sharebroker.config import describe_group_configs
        return describe_group_configs(self.broker_config, self.configs.get(group_id, {}))

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

    # -- administration (DescribeShareGroupOffsets, Alter/DeleteShareGroupOffsets, DeleteGroups) --

    def _drop_leaders(self, group_id: str, topic_id: uuid.UUID, partitions: Any) -> None:
        """In-memory leaders of reset partitions go; the next fetch reads the new state."""
        for index in partitions:
            leader = self._leaders().existing_leader(group_id, topic_id, index)
            if leader is not None:
                self._leaders().drop(leader)

    def _require_empty_share_group(self, group_id: str, *, create: bool) -> ShareGroup:
        if not group_id:
            raise KafkaError(ErrorCode.invalid_group_id, "The group id can't be empty.")
        kind = self.directory.group_type(group_id)
        if kind not in (None, "share"):
            raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        group = self.groups.get(group_id)
        if group is None:
            if not create:
                raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
            group = self.groups[group_id] = ShareGroup(group_id)
        if group.members:
            raise KafkaError(ErrorCode.non_empty_group,
                             f"The group {group_id} has active members; stop them before this operation.")
        return group

    async def alter_offsets(self, group_id: str, offsets: dict[str, dict[int, int]]) -> dict[str, dict[int, tuple[ErrorCode, str | None]]]:
        async with self._serialized(group_id):
            return await self._alter_offsets(group_id, offsets)

    async def _alter_offsets(self, group_id: str, offsets: dict[str, dict[int, int]]) -> dict[str, dict[int, tuple[ErrorCode, str | None]]]:
        """AlterShareGroupOffsets: re-initialize the listed partitions at the given start offsets,
        discarding their in-flight state (a new state epoch fences the old one)."""
        group = self._require_empty_share_group(group_id, create=True)
        results: dict[str, dict[int, tuple[ErrorCode, str | None]]] = {}
        group.epoch += 1
        state_epoch = group.epoch
        for name, parts in offsets.items():
            topic = self.topics.get(name)
            results[name] = {}
            done = []
            for index, start in parts.items():
                if topic is None or not 0 <= index < len(topic.partitions):
                    results[name][index] = (ErrorCode.unknown_topic_or_partition,
                                            f"Topic {name} partition {index} does not exist.")
                    continue
                try:
                    await self.persister.initialize(group_id, topic.topic_id, index, state_epoch, start)
                except KafkaError as exc:
                    results[name][index] = (exc.code, exc.message)
                    continue
                self._drop_leaders(group_id, topic.topic_id, [index])
                results[name][index] = (ErrorCode.none, None)
                done.append(index)
            if topic is not None and done:
                group.mark_initialized(TopicInfo(name, topic.topic_id, len(topic.partitions)), done)
        await self.persist(group)
        log.info("share group offsets altered", group=group_id, offsets=offsets)
        return results

    async def delete_offsets(self, group_id: str, topics: list[str]) -> dict[str, tuple[ErrorCode, str | None, Any]]:
        async with self._serialized(group_id):
            return await self._delete_offsets(group_id, topics)

    async def _delete_offsets(self, group_id: str, topics: list[str]) -> dict[str, tuple[ErrorCode, str | None, Any]]:
        group = self._require_empty_share_group(group_id, create=False)
        results: dict[str, tuple[ErrorCode, str | None, Any]] = {}
        for name in topics:
            topic = self.topics.get(name)
            if topic is None:
                results[name] = (ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist.", None)
                continue
            initialized = group.initialized.get(topic.topic_id)
            if not initialized:
                results[name] = (ErrorCode.unknown_topic_or_partition, "There is no offset information to delete.",
                                 topic.topic_id)
                continue
            for index in sorted(initialized):
                await self.persister.delete(group_id, topic.topic_id, index)
            self._drop_leaders(group_id, topic.topic_id, initialized)
            group.forget_topic(topic.topic_id)
            results[name] = (ErrorCode.none, None, topic.topic_id)
        await self.persist(group)
        log.info("share group offsets deleted", group=group_id, topics=topics)
        return results

    async def delete_group(self, group_id: str) -> tuple[ErrorCode, str | None]:
        """DeleteGroups for an empty share group: delete the share state of its initialized
        partitions, then write Kafka's tombstones in Kafka's order (members, the target and the
        state-partition metadata, the group record last). Its configs stay, as in Kafka, where they
        live in the cluster metadata apart from the group and apply again if the group id is used
        again."""
        async with self._serialized(group_id):
            try:
                group = self._require_empty_share_group(group_id, create=False)
            except KafkaError as exc:
                return exc.code, exc.message
            deleting = {tid: sorted(parts) for tid, parts in group.initialized.items()}
            failure: KafkaError | None = None
            for topic_id, parts in deleting.items():
                try:
                    for index in parts:
                        await self.persister.delete(group_id, topic_id, index)
                except KafkaError as exc:
                    failure = exc
                    break
                finally:
                    self._drop_leaders(group_id, topic_id, parts)
                group.forget_topic(topic_id)  # its state is gone: initialized again if the group stays
            if failure is not None:  # Kafka keeps the group and answers the persister's error
                log.warning("share group not deleted: share state deletion failed", group=group_id,
                            error=failure.code.name, message=failure.message)
                await self.persist(group)
                return failure.code, failure.message
            records: list[tuple[bytes, bytes | None]] = []
            for member_id in sorted(self._persisted_members.get(group_id, set())):
                records.extend(grec.member_tombstones(group_id, member_id))
            records.extend(grec.group_tombstones(group_id))
            # Gone from memory in the same step as the tombstones reach the log, so that a group
            # log compaction never restates it after them; back if the write fails.
            del self.groups[group_id]
            try:
                await self.group_log.append(group_id, records)
            except Exception:
                self.groups[group_id] = group
                raise
            self._persisted_members.pop(group_id, None)
            self._persisted_epoch.pop(group_id, None)
            self._persisted_assignment.pop(group_id, None)
            log.info("share group deleted", group=group_id, topics=len(deleting))
            return ErrorCode.none, None

    async def describe_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None) -> list[dict[str, Any]]:
        """DescribeShareGroupOffsets rows: start offset from the persisted state, lag = end offset
        - start offset - records already completed (-1 when either is unknown)."""
        group = self.groups.get(group_id)
        wanted: list[tuple[str, Any, list[int]]] = []
        if topics is None:
            if group is not None:
                names = self._topic_names(group)
                for tid, initialized in sorted(group.initialized.items(), key=lambda kv: names.get(kv[0], "")):
                    if tid in names:
                        wanted.append((names[tid], tid, sorted(initialized)))
        else:
            for name, asked in topics:
                topic = self.topics.get(name)
                wanted.append((name, topic.topic_id if topic else None, list(asked)))
        out = []
        for name, tid, parts in wanted:
            rows = []
            topic = self.topics.get(name)
            for index in parts:
                row: dict[str, Any] = {"partition_index": index, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                                       "error_code": ErrorCode.none, "error_message": None}
                if tid is not None and topic is not None and 0 <= index < len(topic.partitions):
                    s = await self.persister.read_summary(group_id, tid, index)
                    row.update(start_offset=s.start_offset, leader_epoch=s.leader_epoch)
                    if s.start_offset >= 0 and s.delivery_complete_count >= 0:
                        end = topic.partitions[index].log.high_watermark
                        row["lag"] = max(0, end - s.start_offset - s.delivery_complete_count)
                rows.append(row)
            out.append({"topic_name": name, "topic_id": tid, "partitions": rows})
        return out
