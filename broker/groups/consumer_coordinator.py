"""The group coordinator for consumer groups of the KIP-848 protocol: owns every ConsumerGroup,
serves ConsumerGroupHeartbeat and ConsumerGroupDescribe, fences members whose session or
rebalance timeout passes, follows topic changes (creation, deletion, new partitions) and persists
the groups in `__consumer_offsets` with Kafka's record types, rebuilt at start-up by replay.

It also runs Kafka's online migration (`group.consumer.migration.policy`): a consumer member
joining a non-empty classic group upgrades it, its classic members staying on as members of the
classic protocol (served here through JoinGroup, SyncGroup, Heartbeat and LeaveGroup); when the
last member of the consumer protocol leaves and classic members remain, the group is downgraded
back to a classic group, which rebalances.

Committed offsets are not kept here: the classic coordinator's offset store holds them for every
kind of group; this coordinator only validates a member's commit (member id and epoch)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.clock import ExpiryHold
from sharebroker.broker.metrics import NULL_RECORDER, Recorder
from sharebroker.broker.groups import consumer_records as rec
from sharebroker.broker.groups.assignment_timers import AssignmentTimers, assignment_time, assignment_timestamp
from sharebroker.broker.groups.assignors import assignor_name
from sharebroker.broker.security.acl_store import AclOperation, ResourceType
from sharebroker.broker.groups.classic_group import ClassicGroup, ClassicMember, JoinResult, SyncResult
from sharebroker.broker.groups.consumer_group import (
    LEAVE_EPOCH,
    STABLE,
    ClassicJoin,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    ConsumerSettings,
    CurrentAssignment,
    Heartbeat,
    validate_heartbeat,
)
from sharebroker.broker.groups.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    decode_assignment_with_user_data,
    decode_subscription,
    encode_assignment,
)
from sharebroker.broker.groups.share_group import Assignment, TopicInfo
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.clock import Clock
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.groups.classic_coordinator import ClassicGroupCoordinator
    from sharebroker.broker.groups.directory import GroupDirectory
    from sharebroker.broker.groups.group_log import GroupLog
    from sharebroker.broker.topics import Topics
    from sharebroker.config import BrokerConfig, GroupConfig

log = get_logger("sharebroker.groups")

_SWEEP_INTERVAL_MS = 100
Record = tuple[bytes, bytes | None]


@dataclass(slots=True)
class _Persisted:
    """What the log holds of one group, to write only what changed."""
    epoch: int = -1
    assignment_epoch: int = -1
    members: dict[str, tuple] = field(default_factory=dict)
    targets: dict[str, tuple] = field(default_factory=dict)
    currents: dict[str, tuple] = field(default_factory=dict)
    regexes: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _random_member_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): 16 random bytes in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _epoch_mismatch(member: ConsumerMember, member_epoch: int) -> tuple[ErrorCode, str] | None:
    """Kafka's ConsumerGroup.validateMemberEpoch: ILLEGAL_GENERATION for a member of the classic
    protocol, STALE_MEMBER_EPOCH for one of the consumer protocol."""
    if member_epoch == member.epoch:
        return None
    if member.classic is not None:
        return ErrorCode.illegal_generation, (f"The received generation id {member_epoch} does not match the "
                                              f"expected member epoch {member.epoch}.")
    return ErrorCode.stale_member_epoch, (f"The received member epoch {member_epoch} does not match the expected "
                                          f"member epoch {member.epoch}.")


def _assignment_key(a: Assignment) -> tuple:
    return tuple(sorted((str(t), tuple(sorted(ps))) for t, ps in a.items() if ps))


def _current_key(c: CurrentAssignment) -> tuple:
    return (c.epoch, c.previous_epoch, c.state, _assignment_key(c.assigned), _assignment_key(c.pending_revocation))


class ConsumerGroupCoordinator:
    metrics: Recorder = NULL_RECORDER  # counts rebalances; the broker sets its recorder

    def __init__(self, config: BrokerConfig, clock: Clock, topics: Topics, group_log: GroupLog,
                 groups: GroupDirectory, group_configs: Callable[[str], GroupConfig],
                 classic: ClassicGroupCoordinator) -> None:
        self.broker_config = config
        self.clock = clock
        self.topics = topics
        self.group_log = group_log
        self.directory = groups
        self.group_configs = group_configs
        self.classic = classic  # holds the committed offsets of every group, and classic groups we take over
        classic.retention_hooks.append(self.expire_offsets)
        self.groups: dict[str, ConsumerGroup] = {}
        self._persisted: dict[str, _Persisted] = {}
        self._unwritten: dict[str, list[Record]] = {}  # a taken-over classic group's tombstone, until appended
        self._locks: dict[str, asyncio.Lock] = {}
        self._lock_users: dict[str, int] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._topics_seen = -1  # the Topics.version the groups' metadata last followed
        self._regex_version = 0
        # Pending target computations (consumer.assignment.interval.ms): group id -> (due, timer)
        self._assignment_timers = AssignmentTimers(clock, self._assign, "consumer-group-assignment")

    # -- configuration ---------------------------------------------------------------------------

    def assignors(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(assignor_name(a) for a in self.broker_config["group.consumer.assignors"]))

    def settings(self, group_id: str) -> ConsumerSettings:
        cfg = self.group_configs(group_id)
        return ConsumerSettings(session_timeout_ms=cfg.consumer_session_timeout_ms,
                                max_size=self.broker_config["group.consumer.max.size"], assignors=self.assignors(),
                                assignment_interval_ms=cfg.consumer_assignment_interval_ms)

    def _migration_policy(self) -> str:
        return str(self.broker_config["group.consumer.migration.policy"]).lower()

    def _migration(self, direction: str) -> bool:
        return self._migration_policy() in (direction, "bidirectional")

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.group_configs(group_id).consumer_heartbeat_interval_ms

    def _topic_names(self) -> dict[uuid.UUID, str]:
        return {t.topic_id: name for name, t in self.topics.by_name.items()}

    def _all_topics(self) -> dict[str, TopicInfo]:
        return {name: TopicInfo(name, t.topic_id, len(t.partitions)) for name, t in self.topics.by_name.items()}

    # -- lifecycle -------------------------------------------------------------------------------

    def begin_load(self) -> dict[int, Callable[[bytes, bytes | None], None]]:
        """The handlers of this coordinator's record types for the broker's replay of `__consumer_offsets`."""
        self.group_log.register(self._restate)
        return {t: self._replay for t in rec.RECORD_TYPES}

    def finish_load(self) -> None:
        now = self.clock.monotonic_ms()
        topics = self._all_topics()
        for group in self.groups.values():
            settings = self.settings(group.group_id)
            for m in list(group.members.values()):
                group.add_member(m)  # rebuilds the static-member map and partition owners
                m.session_deadline_ms = now + m.session_timeout_ms(settings)
                if m.current.state == 1:  # UNREVOKED_PARTITIONS: the rebalance timeout runs again
                    m.revocation_deadline = (now + max(m.rebalance_timeout_ms, 0), m.current.epoch)
            group.resolve_regexes(topics)
            group.metadata_signature = group._signature(topics)
            self._persisted[group.group_id] = self._snapshot(group)
        self._topics_seen = self.topics.version
        if self.groups:
            log.info("consumer groups loaded", groups=len(self.groups),
                     members=sum(len(g.members) for g in self.groups.values()))

    def _replay(self, k: bytes, value: bytes | None) -> None:
        d = rec.decode(k, value)
        group = self.groups.get(d.group_id)
        if d.fields is None:
            if group is None:
                return
            if d.record_type == rec.GROUP_METADATA:
                del self.groups[d.group_id]
            elif d.record_type == rec.MEMBER_METADATA and d.second is not None:
                group.members.pop(d.second, None)
            elif d.record_type == rec.TARGET_MEMBER and d.second is not None:
                group.target.pop(d.second, None)
            elif d.record_type == rec.REGULAR_EXPRESSION and d.second is not None:
                group.resolved.pop(d.second, None)
            return
        if group is None:
            group = self.groups[d.group_id] = ConsumerGroup(d.group_id)
        f = d.fields
        if d.record_type == rec.GROUP_METADATA:
            group.epoch = int(f["epoch"])  # type: ignore[call-overload]
        elif d.record_type == rec.TARGET_METADATA:
            group.assignment_epoch = int(f["assignment_epoch"])  # type: ignore[call-overload]
            group.assignment_time_ms = assignment_time(self.clock, int(f["assignment_timestamp_ms"]))  # type: ignore[call-overload]
        elif d.record_type == rec.TARGET_MEMBER and d.second is not None:
            group.target[d.second] = f["assignment"]  # type: ignore[assignment]
        elif d.record_type == rec.REGULAR_EXPRESSION and d.second is not None:
            group.resolved[d.second] = f["topics"]  # type: ignore[assignment]
        elif d.record_type in (rec.MEMBER_METADATA, rec.CURRENT_ASSIGNMENT) and d.second is not None:
            member = group.members.setdefault(d.second, ConsumerMember(d.second))
            if d.record_type == rec.CURRENT_ASSIGNMENT:
                member.current = CurrentAssignment(**f)  # type: ignore[arg-type]
            else:
                for name, v in f.items():
                    setattr(member, name, v)

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever(), name="consumer-group-expiry")
        for group in self.groups.values():  # a bump the log has without its target
            self._settle_target(group)

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        await self._assignment_timers.stop()  # a target being computed and written too: not after the stop

    def configs_changed(self) -> None:
        """Group configs or broker defaults changed: a pending target waits for the interval in
        force now, which may have become shorter."""
        for group_id in self._assignment_timers.pending():
            group = self.groups.get(group_id)
            if group is not None:
                self._settle_target(group)

    # -- persistence -----------------------------------------------------------------------------

    def _snapshot(self, group: ConsumerGroup) -> _Persisted:
        return _Persisted(group.epoch, group.assignment_epoch,
                          {m.member_id: m.metadata_signature() for m in group.members.values()},
                          {mid: _assignment_key(a) for mid, a in group.target.items()},
                          {m.member_id: _current_key(m.current) for m in group.members.values()},
                          dict(group.resolved))

    def _group_records(self, group: ConsumerGroup) -> list[Record]:
        gid = group.group_id
        out: list[Record] = [rec.member_metadata(gid, m) for m in group.members.values()]
        out.append(rec.group_metadata(gid, group.epoch))
        out += [rec.regular_expression(gid, r, ts, 0, 0) for r, ts in group.resolved.items()]
        out += [rec.target_member(gid, mid, a) for mid, a in group.target.items()]
        out.append(self._target_metadata(group))
        out += [rec.current_assignment(gid, m.member_id, m.current) for m in group.members.values()]
        return out

    def _target_metadata(self, group: ConsumerGroup) -> Record:
        return rec.target_metadata(group.group_id, group.assignment_epoch,
                                   assignment_timestamp(self.clock, group.assignment_time_ms))

    def _restate(self, in_partition: Callable[[str], bool]) -> list[Record]:
        return [r for g in self.groups.values() if in_partition(g.group_id) for r in self._group_records(g)]

    async def persist(self, group: ConsumerGroup, first: list[Record] | None = None) -> None:
        """Append the records of what changed since the last write, in Kafka's order, after
        `first` (a replaced classic group's tombstone) in the same batch. What a failed append did
        not write is written by the next one (`first` included)."""
        gid = group.group_id
        if first:
            self._unwritten.setdefault(gid, []).extend(first)
        old = self._persisted.get(gid) or _Persisted()
        new = self._snapshot(group)
        records: list[Record] = list(self._unwritten.get(gid, ()))
        for mid in old.members.keys() - new.members.keys():
            records += rec.member_tombstones(gid, mid)
        records += [rec.member_metadata(gid, group.members[mid]) for mid, sig in new.members.items()
                    if old.members.get(mid) != sig]
        if new.epoch != old.epoch:
            records.append(rec.group_metadata(gid, group.epoch))
        for regex in old.regexes.keys() - new.regexes.keys():
            records.append((rec.key(rec.REGULAR_EXPRESSION, gid, regex), None))
        for regex, resolved in new.regexes.items():
            if old.regexes.get(regex) != resolved:
                self._regex_version += 1
                records.append(rec.regular_expression(gid, regex, resolved, self._regex_version,
                                                      int(time.time() * 1000)))
        records += [rec.target_member(gid, mid, group.target[mid]) for mid, sig in new.targets.items()
                    if old.targets.get(mid) != sig and mid in group.members]
        if new.assignment_epoch != old.assignment_epoch:
            records.append(self._target_metadata(group))
        records += [rec.current_assignment(gid, mid, group.members[mid].current) for mid, sig in new.currents.items()
                    if old.currents.get(mid) != sig]
        if not records:
            return
        await self.group_log.append(gid, records)
        self._persisted[gid] = new
        self._unwritten.pop(gid, None)
        if new.epoch != old.epoch:
            self.metrics.rebalance("consumer")

    # -- serialization per group -----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _serialized(self, group_id: str) -> AsyncIterator[None]:
        """One operation at a time per group, as Kafka's coordinator runtime runs them in order."""
        lock = self._locks.get(group_id)
        if lock is None:
            lock = self._locks[group_id] = asyncio.Lock()
        self._lock_users[group_id] = self._lock_users.get(group_id, 0) + 1
        try:
            async with lock:
                yield
        finally:
            left = self._lock_users[group_id] - 1
            if left:
                self._lock_users[group_id] = left
            else:
                del self._lock_users[group_id]
                del self._locks[group_id]

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------------

    async def heartbeat(self, body: Any, version: int, conn: Connection) -> dict[str, Any]:
        rebalance = body.rebalance_timeout
        hb = Heartbeat(
            member_id=body.member_id, member_epoch=body.member_epoch, instance_id=body.instance_id,
            rack_id=body.rack_id,
            rebalance_timeout_ms=int(rebalance.total_seconds() * 1000) if hasattr(rebalance, "total_seconds") else int(rebalance),
            subscribed_names=tuple(body.subscribed_topic_names) if body.subscribed_topic_names is not None else None,
            subscribed_regex=getattr(body, "subscribed_topic_regex", None),
            server_assignor=body.server_assignor,
            owned=(tuple((tp.topic_id, tuple(tp.partitions)) for tp in body.topic_partitions)
                   if body.topic_partitions is not None else None),
            client_id=conn.client_id or "", client_host=conn.client_host)
        validate_heartbeat(hb, version, body.group_id, self.assignors())
        if version == 0 and hb.member_epoch == 0 and hb.member_id == "":
            hb = replace(hb, member_id=_random_member_id())
        regex_filter = None
        az = conn.broker.authorizer
        if az is not None and hb.subscribed_regex is not None:
            principal, host = str(conn.principal), conn.client_host[1:]

            def regex_filter(name: str) -> bool:
                return az.authorize(principal, host, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        async with self._serialized(body.group_id):
            return await self._heartbeat(body.group_id, hb, regex_filter)

    def _require_consumer_group(self, group_id: str, *, create: bool) -> ConsumerGroup:
        kind = self.directory.group_type(group_id)
        group = self.groups.get(group_id)
        if kind not in (None, "consumer"):
            if kind == "classic" and create and self.classic.is_empty_group(group_id):
                return ConsumerGroup(group_id)  # Kafka replaces an empty classic group by the new consumer group
            if kind == "classic" and create:
                self._check_upgrade(group_id)
                return self._upgraded(group_id)
            raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if group is None:
            if not create:
                raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
            group = ConsumerGroup(group_id)
        return group

    async def _heartbeat(self, group_id: str, hb: Heartbeat,
                         regex_filter: Callable[[str], bool] | None = None) -> dict[str, Any]:
        group = self._require_consumer_group(group_id, create=hb.member_epoch == 0)
        if regex_filter is not None:
            group.regex_topic_filter = regex_filter
        created = group_id not in self.groups
        settings = self.settings(group_id)
        now = self.clock.monotonic_ms()
        if hb.member_epoch == LEAVE_EPOCH and not created:
            leaving = hb.member_id if hb.instance_id is None else group.static_members.get(hb.instance_id)
            if leaving == hb.member_id and await self._maybe_downgrade(group, hb.member_id):
                return {"member_id": hb.member_id, "member_epoch": hb.member_epoch, "heartbeat_interval": 0,
                        "assignment": None}
        reply = group.heartbeat(hb, self._all_topics(), now, settings)
        group.arm_revocation_timers(now)
        first: list[Record] = []
        if created:
            if self.directory.group_type(group_id) == "classic":
                upgraded = bool(self.classic.groups[group_id].members)
                first = self.classic.take_over(group_id)
                log.info("classic group upgraded to a consumer group" if upgraded
                         else "empty classic group replaced by a consumer group", group=group_id,
                         classic_members=group.classic_member_count())
            self.groups[group_id] = group
            log.info("consumer group created", group=group_id)
        if hb.member_epoch == 0:
            log.info("consumer group member joined", group=group_id, member=reply.member_id,
                     instance=hb.instance_id, epoch=reply.member_epoch, group_epoch=group.epoch)
        elif hb.member_epoch < 0:
            log.info("consumer group member left", group=group_id, member=hb.member_id, epoch=hb.member_epoch)
        await self.persist(group, first)
        self._restart_session(group, reply.member_id, settings.session_timeout_ms)
        self._settle_target(group)
        assignment = None
        if reply.assignment is not None:
            assignment = {"topic_partitions": [{"topic_id": tid, "partitions": sorted(ps)}
                                               for tid, ps in sorted(reply.assignment.items(), key=lambda kv: str(kv[0]))
                                               if ps]}
        interval = 0 if hb.member_epoch < 0 else self.heartbeat_interval_ms(group_id)
        return {"member_id": reply.member_id, "member_epoch": reply.member_epoch, "heartbeat_interval": interval,
                "assignment": assignment}

    def _restart_session(self, group: ConsumerGroup, member_id: str, session_timeout_ms: int) -> None:
        """The session runs from the answer: the group's write (the first one creates
        `__consumer_offsets`) may have held the request past the deadline it set."""
        member = group.members.get(member_id)
        if member is not None and self.groups.get(group.group_id) is group:
            member.session_deadline_ms = self.clock.monotonic_ms() + session_timeout_ms

    # -- timers and topic changes ----------------------------------------------------------------

    async def _sweep_forever(self) -> None:
        hold = ExpiryHold()
        while True:
            due = self.clock.monotonic_ms() + _SWEEP_INTERVAL_MS
            await asyncio.sleep(_SWEEP_INTERVAL_MS / 1000)
            if hold.holds(due, self.clock.monotonic_ms()):
                continue  # after a stall, serve the heartbeats that arrived meanwhile first
            try:
                await self.sweep()
            except Exception:
                log.exception("consumer group sweep failed")

    async def sweep(self) -> None:
        now = self.clock.monotonic_ms()
        version = self.topics.version
        topics_changed = version != self._topics_seen
        self._topics_seen = version
        topics = self._all_topics() if topics_changed else None
        for group_id in list(self.groups):
            group = self.groups.get(group_id)
            if group is None:
                continue
            expired = group.expired(now)
            if not expired and not topics_changed:
                continue
            async with self._serialized(group_id):
                if self.groups.get(group_id) is not group:
                    continue
                current = topics if topics is not None else self._all_topics()
                default = self.assignors()[0]
                interval = self.settings(group_id).assignment_interval_ms
                downgraded = False
                for member_id, reason in group.expired(now):
                    log.info("consumer group member fenced", group=group_id, member=member_id, reason=reason)
                    if await self._maybe_downgrade(group, member_id):
                        downgraded = True
                        break
                    group.fence(member_id, current, default, now, interval)
                if downgraded:
                    continue
                if topics_changed and group.refresh(current, default, now_ms=now, interval_ms=interval):
                    log.info("consumer group metadata changed", group=group_id, epoch=group.epoch)
                group.arm_revocation_timers(now)
                try:
                    await self.persist(group)
                except Exception as exc:  # noqa: BLE001 - retried at the next change
                    log.warning("consumer group record write failed", group=group_id, error=str(exc))
                self._settle_target(group)

    # -- the assignment interval -----------------------------------------------------------------

    def _settle_target(self, group: ConsumerGroup) -> None:
        """Have a timer compute the pending target assignment once Kafka's assignment interval has
        passed: until then membership and subscription changes only bump the group epoch, and
        heartbeats are answered from the last target (the operation that bumped it computed the
        target itself when the interval allowed)."""
        group_id = group.group_id
        if not group.assignment_pending() or not group.members:
            return
        interval = self.settings(group_id).assignment_interval_ms
        due = group.next_assignment_ms(interval)
        if due is None:
            due = self.clock.monotonic_ms()
        self._assignment_timers.schedule(group_id, due)

    async def _assign(self, group_id: str) -> None:
        async with self._serialized(group_id):
            group = self.groups.get(group_id)
            if group is None or not group.assignment_pending():
                return
            now = self.clock.monotonic_ms()
            settings = self.settings(group_id)
            started = time.perf_counter()
            if group.refresh(self._all_topics(), settings.assignors[0], now_ms=now,
                             interval_ms=settings.assignment_interval_ms) and not group.assignment_pending():
                log.info("consumer group target assignment computed", group=group_id, epoch=group.assignment_epoch,
                         members=len(group.members), ms=round((time.perf_counter() - started) * 1000, 2))
            try:
                await self.persist(group)
            except Exception as exc:  # noqa: BLE001 - written with the group's next change
                log.warning("consumer group record write failed", group=group_id, error=str(exc))
            self._settle_target(group)

    # -- online migration between classic and consumer groups -----------------------------------

    def _check_upgrade(self, group_id: str) -> None:
        """Kafka's validateOnlineUpgrade, for a classic group with members: GROUP_ID_NOT_FOUND
        saying why it cannot become a consumer group."""
        classic = self.classic.groups[group_id]
        why = None
        if not self._migration("upgrade"):
            why = "online upgrade is disabled"
        elif classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            why = "the group does not use the consumer embedded protocol"
        elif len(classic.members) > self.broker_config["group.consumer.max.size"]:
            why = "the group size exceeds the consumer group maximum size"
        if why is not None:
            log.info("classic group not upgraded", group=group_id, reason=why)
            raise KafkaError(ErrorCode.group_id_not_found,
                             f"Cannot upgrade classic group {group_id} to consumer group because {why}.")

    def _upgraded(self, group_id: str) -> ConsumerGroup:
        """Kafka's ConsumerGroup.fromClassicGroup: every classic member becomes a member of the
        classic protocol at the classic generation, Stable, its last assignment as its target."""
        classic: ClassicGroup = self.classic.groups[group_id]
        topics = self._all_topics()
        now = self.clock.monotonic_ms()
        group = ConsumerGroup(group_id)
        group.epoch = group.assignment_epoch = classic.generation_id
        for cm in classic.members.values():
            try:
                metadata = cm.metadata(classic.protocol_name) if classic.protocol_name else cm.protocols[0][1]
                subscription = decode_subscription(metadata)
                owned, user_data = decode_assignment_with_user_data(cm.assignment)
            except (ValueError, IndexError):
                raise KafkaError(ErrorCode.group_id_not_found, f"Cannot upgrade the classic group {group_id} to "
                                 "consumer group because the embedded consumer protocol is malformed.") from None
            if user_data:  # a custom assignor's state: the server-side assignors would drop it
                raise KafkaError(ErrorCode.unsupported_version, "userData from a custom assignor would be lost")
            assigned = {topics[name].topic_id: frozenset(parts) for name, parts in owned if name in topics and parts}
            member = ConsumerMember(
                cm.member_id, instance_id=cm.group_instance_id, rack_id=subscription.rack_id, client_id=cm.client_id,
                client_host=cm.client_host, rebalance_timeout_ms=cm.rebalance_timeout_ms,
                subscribed_names=subscription.topics,
                current=CurrentAssignment(classic.generation_id, classic.generation_id, STABLE, assigned, {}),
                classic=ClassicMetadata(cm.session_timeout_ms, cm.protocols))
            member.session_deadline_ms = now + cm.session_timeout_ms
            group.target[cm.member_id] = dict(assigned)
            group.add_member(member)
        group.resolve_regexes(topics)
        group.metadata_signature = group._signature(topics)
        return group

    def _downgrade_allowed(self, group: ConsumerGroup, members_after: int) -> bool:
        if not self._migration("downgrade"):
            log.info("consumer group not downgraded", group=group.group_id, reason="the online downgrade is disabled")
            return False
        if members_after > self.broker_config["group.max.size"]:
            log.info("consumer group not downgraded", group=group.group_id,
                     reason="its size is greater than the classic group max size")
            return False
        return True

    async def _maybe_downgrade(self, group: ConsumerGroup, leaving: str | set[str]) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember(s): when the last members of the
        consumer protocol go (leave or are fenced) and classic members remain, the group becomes
        a classic group again and rebalances. True if it did."""
        if isinstance(leaving, str):
            if not group.all_classic_except(leaving) or len(group.members) <= 1:
                return False
            leaving = {leaving}
        elif not group.classic_only_without(leaving) or len(group.members) - len(leaving) <= 0:
            return False
        if not self._downgrade_allowed(group, len(group.members) - len(leaving)):
            return False
        await self._convert_to_classic(group, leaving, rebalance=True)
        return True

    async def _convert_to_classic(self, group: ConsumerGroup, leaving: set[str], *, rebalance: bool) -> None:
        """Kafka's convertToClassicGroup: a classic group Stable at the group epoch, every remaining
        member with its target assignment in the protocol they all support; the consumer group's
        tombstones and the classic group's record go in one append."""
        remaining = [m for m in group.members.values() if m.member_id not in leaving and m.classic is not None]
        names = self._topic_names()
        members = [ClassicMember(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                 m.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, m.classic.protocols)
                   for m in remaining if m.classic is not None]
        assigned = {m.member_id: [(names[tid], ps) for tid, ps in group.target.get(m.member_id, {}).items()
                                  if tid in names] for m in remaining}
        gid = group.group_id
        persisted = self._persisted.get(gid)
        records = self._tombstones(gid)
        # Out of this coordinator and into the classic one in the same step as the append.
        del self.groups[gid]
        self._persisted.pop(gid, None)
        records += self.classic.adopt(gid, group.epoch, members, assigned)
        if rebalance:  # before the append's wait: a SyncGroup meanwhile must not see the group Stable
            self.classic.rebalance(gid)
        try:
            await self.group_log.append(gid, records)
        except Exception:
            # Not in the log: the group stays the consumer group the log has.
            self.classic.take_over(gid)
            self.groups[gid] = group
            if persisted is not None:
                self._persisted[gid] = persisted
            raise
        self._unwritten.pop(gid, None)
        self._assignment_timers.cancel(gid)
        log.info("consumer group downgraded to a classic group", group=gid, leaving=sorted(leaving),
                 members=len(remaining), protocol=self.classic.groups[gid].protocol_name, generation=group.epoch)

    # -- members of the classic protocol ---------------------------------------------------------

    async def classic_join(self, *, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                           client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                           protocols: tuple[tuple[str, bytes], ...], version: int) -> JoinResult:
        """JoinGroup to a consumer group. An empty consumer group is deleted and the join goes to
        the classic coordinator (Kafka replaces it by a classic group)."""
        if not self.classic.session_timeout_allowed(session_timeout_ms):
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        async with self._serialized(group_id):
            group = self.groups.get(group_id)
            if group is not None and group.members:
                return await self._classic_join(group, ClassicJoin(
                    member_id or _random_member_id(), group_instance_id, protocol_type, protocols, session_timeout_ms,
                    rebalance_timeout_ms, client_id, client_host, unknown_member=not member_id), version)
            if group is not None:
                await self._delete(group)
                log.info("empty consumer group replaced by a classic group", group=group_id)
        return await self.classic.join(group_id=group_id, member_id=member_id, group_instance_id=group_instance_id,
                                       client_id=client_id, client_host=client_host,
                                       session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
                                       protocol_type=protocol_type, protocols=protocols, version=version)

    async def _classic_join(self, group: ConsumerGroup, req: ClassicJoin, version: int) -> JoinResult:
        settings = self.settings(group.group_id)
        now = self.clock.monotonic_ms()
        epoch_before = group.epoch
        try:
            if self._migration_policy() == "disabled":
                raise KafkaError(ErrorCode.inconsistent_group_protocol, f"Cannot join the consumer group "
                                 f"{group.group_id} with the classic protocol because the group migration is disabled.")
            if req.unknown_member and req.instance_id is None and version >= 4:
                group.check_classic_join(req, settings)
                return JoinResult(ErrorCode.member_id_required, req.member_id)  # rejoin with this id
            # Kafka's validateOnlineDowngradeWithReplacedMemberId: a classic static member taking
            # over the last member of the consumer protocol turns the group back into a classic one.
            replaced = group.static_members.get(req.instance_id) if req.instance_id is not None else None
            downgrade = (replaced is not None and req.unknown_member and group.all_classic_except(replaced)
                         and self._downgrade_allowed(group, len(group.members)))
            member = group.classic_join(req, self._all_topics(), now, settings)
        except KafkaError as exc:
            log.info("join group refused", group=group.group_id, member=req.member_id, error=exc.code.name,
                     message=exc.message)
            return JoinResult(exc.code, "" if req.unknown_member else req.member_id)
        group.arm_revocation_timers(now)
        log.info("consumer group classic member joined", group=group.group_id, member=member.member_id,
                 instance=member.instance_id, epoch=member.epoch, group_epoch=group.epoch)
        if downgrade:
            # A changed subscription, or a target the assignment interval still holds back, makes the
            # assignment stale: the classic group rebalances then.
            await self._convert_to_classic(group, set(), rebalance=group.epoch != epoch_before
                                           or group.assignment_pending())
        else:
            await self.persist(group)
            self._restart_session(group, member.member_id, req.session_timeout_ms)
            self._settle_target(group)
        assert member.classic is not None
        return JoinResult(ErrorCode.none, member.member_id, member.epoch, CONSUMER_PROTOCOL_TYPE,
                          member.classic.protocol_name)

    async def classic_sync(self, *, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                           protocol_type: str | None, protocol_name: str | None,
                           assignments: dict[str, bytes]) -> SyncResult:
        """SyncGroup from a member of the classic protocol: its current assignment, encoded in its
        subscription's version (nothing persisted). A group downgraded while this waited for its
        turn is a classic group now: the classic coordinator answers."""
        async with self._serialized(group_id):
            group = self.groups.get(group_id)
            if group is not None:
                return self._classic_sync(group, member_id, group_instance_id, generation_id, protocol_type,
                                          protocol_name)
        return await self.classic.sync(group_id=group_id, member_id=member_id, group_instance_id=group_instance_id,
                                       generation_id=generation_id, protocol_type=protocol_type,
                                       protocol_name=protocol_name, assignments=assignments)

    def _classic_sync(self, group: ConsumerGroup, member_id: str, group_instance_id: str | None, generation_id: int,
                      protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        try:
            member = group.classic_sync(member_id, group_instance_id, generation_id, protocol_type, protocol_name,
                                        self.clock.monotonic_ms())
        except KafkaError as exc:
            return SyncResult(exc.code)
        assert member.classic is not None
        names = self._topic_names()
        assignment = encode_assignment(((names[tid], ps) for tid, ps in member.current.assigned.items()
                                        if tid in names), member.classic.assignment_version())
        return SyncResult(ErrorCode.none, protocol_type, protocol_name, assignment)

    def classic_heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                          generation_id: int) -> ErrorCode:
        """Heartbeat from a member of the classic protocol (its session; REBALANCE_IN_PROGRESS to rejoin)."""
        group = self.groups.get(group_id)
        if group is None:  # downgraded meanwhile
            return self.classic.heartbeat(group_id=group_id, member_id=member_id, group_instance_id=group_instance_id,
                                          generation_id=generation_id)
        try:
            return group.classic_heartbeat(member_id, group_instance_id, generation_id, self.clock.monotonic_ms())
        except KafkaError as exc:
            return exc.code

    async def classic_leave(self, group_id: str, identities: list[tuple[str, str | None]]
                            ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """LeaveGroup for members of the classic protocol of a consumer group (of the classic group
        it became, if it was downgraded while this waited for its turn)."""
        async with self._serialized(group_id):
            group = self.groups.get(group_id)
            if group is not None:
                results, leaving = group.leaving_members(identities)
                for member_id in sorted(leaving):
                    log.info("consumer group member left through LeaveGroup", group=group_id, member=member_id,
                             classic=group.members[member_id].classic is not None)
                if leaving and await self._maybe_downgrade(group, leaving):
                    return ErrorCode.none, results
                group.remove_members(leaving, self._all_topics(), self.assignors()[0], self.clock.monotonic_ms(),
                                     self.settings(group_id).assignment_interval_ms)
                await self.persist(group)
                self._settle_target(group)
                return ErrorCode.none, results
        return self.classic.leave(group_id, identities)

    # -- offsets (validation only; the offset store is shared with classic groups) ----------------

    def validate_offset_commit(self, group_id: str, member_id: str, instance_id: str | None, member_epoch: int,
                               version: int, *, transactional: bool = False) -> tuple[ErrorCode, str | None] | None:
        """Kafka's ConsumerGroup.validateOffsetCommit: None when the commit may proceed."""
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}."
        if not transactional and version < 9 and member.classic is None:
            return ErrorCode.unsupported_version, ("OffsetCommit version 9 or above must be used by members using "
                                                   "the modern group protocol")
        return _epoch_mismatch(member, member_epoch)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> tuple[ErrorCode, str] | None:
        """Kafka's ConsumerGroup.validateOffsetFetch: None when the fetch may proceed."""
        group = self.groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}."
        return _epoch_mismatch(member, member_epoch)

    # -- describe, list, delete ------------------------------------------------------------------

    def describe(self, group_id: str) -> dict[str, Any]:
        """A ConsumerGroupDescribe DescribedGroup (without authorized operations)."""
        group = self.groups.get(group_id)
        if group is None:
            kind = self.directory.group_type(group_id)
            message = f"Group {group_id} is not a consumer group." if kind else f"Group {group_id} not found."
            return {"error_code": ErrorCode.group_id_not_found, "error_message": message, "group_id": group_id,
                    "group_state": "Dead", "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "",
                    "members": []}
        names = self._topic_names()

        def topic_partitions(a: Assignment) -> dict[str, Any]:
            return {"topic_partitions": [{"topic_id": tid, "topic_name": names.get(tid, ""), "partitions": sorted(ps)}
                                         for tid, ps in sorted(a.items(), key=lambda kv: names.get(kv[0], "")) if ps]}
        return {"error_code": ErrorCode.none, "error_message": None, "group_id": group_id,
                "group_state": group.state, "group_epoch": group.epoch, "assignment_epoch": group.assignment_epoch,
                "assignor_name": group.preferred_assignor(self.assignors()[0]),
                "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                             "member_epoch": m.epoch, "client_id": m.client_id, "client_host": m.client_host,
                             "subscribed_topic_names": list(m.subscribed_names),
                             "subscribed_topic_regex": m.subscribed_regex,
                             "assignment": topic_partitions(m.current.assigned),
                             "target_assignment": topic_partitions(group.target.get(m.member_id, {})),
                             "member_type": 0 if m.classic is not None else 1}  # 0 = classic, 1 = consumer protocol
                            for m in group.members.values()]}

    def listing(self) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, "consumer") for ListGroups."""
        return [(g.group_id, "consumer", g.state, "consumer") for g in self.groups.values()]

    async def delete_group(self, group_id: str) -> tuple[ErrorCode, str | None]:
        async with self._serialized(group_id):
            group = self.groups.get(group_id)
            if group is None:
                return ErrorCode.group_id_not_found, f"Group {group_id} not found."
            if group.members:
                return ErrorCode.non_empty_group, f"Group {group_id} is not empty."
            await self._delete(group)
            log.info("consumer group deleted", group=group_id)
            return ErrorCode.none, None

    def _tombstones(self, group_id: str, first: list[Record] | None = None) -> list[Record]:
        """What a group's going appends: anything not yet written, `first`, then the tombstones of
        everything the log holds of it."""
        persisted = self._persisted.get(group_id) or _Persisted()
        return [*self._unwritten.get(group_id, ()), *(first or ()),
                *rec.group_tombstones(group_id, sorted(persisted.members), sorted(persisted.regexes))]

    async def _delete(self, group: ConsumerGroup, first: list[Record] | None = None) -> None:
        """Tombstone an empty group (after `first`, e.g. its expired offsets) and forget it."""
        group_id = group.group_id
        records = self._tombstones(group_id, first)
        del self.groups[group_id]  # gone in the same step as the tombstones, for compaction
        try:
            await self.group_log.append(group_id, records)
        except Exception:
            self.groups[group_id] = group
            raise
        self._persisted.pop(group_id, None)
        self._unwritten.pop(group_id, None)
        self._assignment_timers.cancel(group_id)

    async def expire_offsets(self, now_wall_ms: int) -> None:
        """Kafka's offset expiry for consumer groups: committed offsets of topics no member
        subscribes to expire `offsets.retention.minutes` after their commit; an empty group left
        without offsets is deleted (GroupCoordinatorShard.cleanupGroupMetadata)."""
        for group_id in list(self.groups):
            async with self._serialized(group_id):
                group = self.groups.get(group_id)
                if group is None:
                    continue
                subscribed = group.subscribed_topic_names()
                records, all_expired = self.classic.expire_unsubscribed(
                    group_id, subscribed.__contains__, lambda c: c.commit_timestamp_ms, now_wall_ms)
                if records:
                    log.info("consumer group offsets expired", group=group_id, partitions=len(records))
                if all_expired and not group.members:
                    self.classic.offsets.pop(group_id, None)
                    await self._delete(group, records)
                    log.info("consumer group expired", group=group_id)
                elif records:
                    await self.group_log.append(group_id, records)

    async def topic_deleted(self) -> None:
        """Recompute at once rather than at the next sweep."""
        await self.sweep()
