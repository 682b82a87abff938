"""Helpers for the share-group integration tests: ShareConsumer configs and polling with deadlines,
share-group configs through the AdminClient, and raw kio builders for ShareGroupHeartbeat (76),
ShareGroupDescribe (77), ShareFetch (78) and ShareAcknowledge (79)."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Self

from confluent_kafka import KafkaError, Producer, ShareConsumer
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from tests.integration import rawkafka as rk
from tests.integration.clients import admin, produce_sync, producer_conf
from sharebroker.testing import wait_for

TIMEOUT = 15.0

# Broker settings that make share-group tests fast: short heartbeats and member session timeout,
# and bounds low enough that a group may choose a short acquisition lock.
FAST_SHARE_BROKER = {
    "group.share.min.session.timeout.ms": "1000",
    "group.share.session.timeout.ms": "3000",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.assignment.interval.ms": "0",
}

# Acknowledge types on the wire
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4


def new_group(prefix: str = "sg") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------------------------
# Group configs through the AdminClient (IncrementalAlterConfigs / DescribeConfigs, GROUP = 32)


def set_group_configs(bootstrap: str, group: str, configs: Mapping[str, str]) -> None:
    a = admin(bootstrap)  # keep the handle alive until the future resolves
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    (fut,) = a.incremental_alter_configs([res], request_timeout=10).values()
    fut.result(timeout=TIMEOUT)


def set_earliest(bootstrap: str, group: str, **more: str) -> None:
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest",
                                         **{k.replace("_", "."): v for k, v in more.items()}})


def describe_group_configs(bootstrap: str, group: str) -> dict[str, Any]:
    a = admin(bootstrap)
    (fut,) = a.describe_configs([ConfigResource(ResourceType.GROUP, group)], request_timeout=10).values()
    return fut.result(timeout=TIMEOUT)


# --------------------------------------------------------------------------------------------
# ShareConsumer


def share_conf(bootstrap: str, group: str, *, explicit: bool = False, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, "socket.timeout.ms": 5000,
                            "log_level": 3}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    conf.update(extra)
    return conf


def share_consumer(bootstrap: str, group: str, topics: Sequence[str], *, explicit: bool = False,
                   **extra: Any) -> ShareConsumer:
    c = ShareConsumer(share_conf(bootstrap, group, explicit=explicit, **extra))
    c.subscribe(list(topics))
    return c


def poll_once(consumer: ShareConsumer, timeout: float = 0.5) -> list[Any]:
    """One poll; any error message fails the test."""
    msgs = list(consumer.poll(timeout))
    errors = [m.error() for m in msgs if m.error() is not None]
    assert not errors, f"share consumer errors: {errors}"
    return msgs


def poll_until(consumer: ShareConsumer, done: Callable[[list[Any]], bool], timeout: float = TIMEOUT,
               on_batch: Callable[[list[Any]], None] | None = None, what: str = "records") -> list[Any]:
    """Poll until `done(all received so far)` or the deadline (which fails the test)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while not done(got):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; received "
                                 f"{[(m.partition(), m.offset(), m.value()) for m in got][:50]}")
        batch = poll_once(consumer, 0.3)
        if batch and on_batch is not None:
            on_batch(batch)
        got.extend(batch)
    return got


def poll_for(consumer: ShareConsumer, seconds: float, on_batch: Callable[[list[Any]], None] | None = None) -> list[Any]:
    """Everything polled during `seconds` (used to show that something is NOT delivered)."""
    got: list[Any] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch = poll_once(consumer, min(0.3, max(0.01, deadline - time.monotonic())))
        if batch and on_batch is not None:
            on_batch(batch)
        got.extend(batch)
    return got


def values(msgs: Iterable[Any]) -> list[bytes]:
    return [m.value() for m in msgs]


def commit_errors(result: Mapping[Any, Any]) -> dict[tuple[str, int], int | None]:
    """commit_sync() result as {(topic, partition): error code or None}."""
    out: dict[tuple[str, int], int | None] = {}
    for tp, exc in result.items():
        if exc is None:
            code = tp.error.code() if getattr(tp, "error", None) is not None else None
        else:
            err = exc.args[0] if exc.args else exc
            code = err.code() if isinstance(err, KafkaError) else -999
        out[(tp.topic, tp.partition)] = code
    return out


def produce_values(bootstrap: str, topic: str, vals: Sequence[bytes], partition: int | None = None,
                   producer: Producer | None = None, **pconf: Any) -> list[Any]:
    p = producer or Producer(producer_conf(bootstrap, **pconf))
    items = [{"value": v, **({"partition": partition} if partition is not None else {})} for v in vals]
    return produce_sync(p, topic, items)


# --------------------------------------------------------------------------------------------
# Raw share RPCs (kio)


def topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    with rk.RawClient(bootstrap) as raw:
        resp = raw.request(rk.metadata_request([topic], version=12))
    (t,) = resp.topics
    assert int(t.error_code) == 0, t
    assert t.topic_id is not None and t.topic_id.int != 0, t
    return t.topic_id


def heartbeat_request(group: str, member: str, epoch: int, topics: Sequence[str] | None = None,
                      rack: str | None = None) -> Any:
    cls = rk.req_cls(76, 1)
    return cls(group_id=group, member_id=member, member_epoch=epoch, rack_id=rack,
               subscribed_topic_names=None if topics is None else tuple(topics))


def describe_request(groups: Sequence[str]) -> Any:
    return rk.req_cls(77, 1)(group_ids=tuple(groups), include_authorized_operations=False)


def describe_share_group(bootstrap: str, group: str) -> Any:
    with rk.RawClient(bootstrap) as raw:
        resp = raw.request(describe_request([group]))
    (g,) = resp.groups
    return g


def list_groups(bootstrap: str) -> list[Any]:
    with rk.RawClient(bootstrap) as raw:
        resp = raw.request(rk.req_cls(16, 5)(states_filter=(), types_filter=()))
    assert int(resp.error_code) == 0, resp
    return list(resp.groups)


AckMap = Mapping[tuple[uuid.UUID, int], Sequence[tuple[int, int, Sequence[int]]]]


def share_fetch_request(group: str | None, member: str | None, epoch: int, *,
                        partitions: Iterable[tuple[uuid.UUID, int]] = (), acks: AckMap | None = None,
                        forgotten: Iterable[tuple[uuid.UUID, int]] = (), version: int = 2, max_wait_ms: int = 0,
                        min_bytes: int = 1, max_bytes: int = 1 << 20, max_records: int = 500,
                        batch_size: int = 500, acquire_mode: int = 0, is_renew: bool = False) -> Any:
    cls = rk.req_cls(78, version)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    bcls = rk._nested(pcls, "acknowledgement_batches")
    fcls = rk._nested(cls, "forgotten_topics_data")
    entries: dict[tuple[uuid.UUID, int], list[Any]] = {k: [] for k in partitions}
    for key, batches in (acks or {}).items():
        entries.setdefault(key, []).extend(
            bcls(first_offset=f, last_offset=l, acknowledge_types=tuple(t)) for f, l, t in batches)
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for (tid, index), batches in entries.items():
        by_topic.setdefault(tid, []).append(pcls(partition_index=index, acknowledgement_batches=tuple(batches)))
    forgot: dict[uuid.UUID, list[int]] = {}
    for tid, index in forgotten:
        forgot.setdefault(tid, []).append(index)
    kwargs: dict[str, Any] = {
        "group_id": group, "member_id": member, "share_session_epoch": epoch,
        "max_wait": datetime.timedelta(milliseconds=max_wait_ms), "min_bytes": min_bytes, "max_bytes": max_bytes,
        "max_records": max_records, "batch_size": batch_size,
        "topics": tuple(tcls(topic_id=tid, partitions=tuple(ps)) for tid, ps in by_topic.items()),
        "forgotten_topics_data": tuple(fcls(topic_id=tid, partitions=tuple(ps)) for tid, ps in forgot.items())}
    if version >= 2:
        kwargs.update(share_acquire_mode=acquire_mode, is_renew_ack=is_renew)
    return cls(**kwargs)


def share_ack_request(group: str | None, member: str | None, epoch: int, acks: AckMap, *, version: int = 2,
                      is_renew: bool = False) -> Any:
    cls = rk.req_cls(79, version)
    tcls = rk._nested(cls, "topics")
    pcls = rk._nested(tcls, "partitions")
    bcls = rk._nested(pcls, "acknowledgement_batches")
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for (tid, index), batches in acks.items():
        by_topic.setdefault(tid, []).append(pcls(partition_index=index, acknowledgement_batches=tuple(
            bcls(first_offset=f, last_offset=l, acknowledge_types=tuple(t)) for f, l, t in batches)))
    kwargs: dict[str, Any] = {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                                  "topics": tuple(tcls(topic_id=tid, partitions=tuple(ps)) for tid, ps in by_topic.items())}
    if version >= 2:
        kwargs["is_renew_ack"] = is_renew
    return cls(**kwargs)


def partitions_of(resp: Any) -> dict[tuple[uuid.UUID, int], Any]:
    """{(topic id, partition): partition entry} of a ShareFetch/ShareAcknowledge response."""
    return {(t.topic_id, p.partition_index): p for t in resp.responses for p in t.partitions}


def acquired(p: Any) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]


def acquired_offsets(p: Any) -> list[int]:
    return [o for a in p.acquired_records for o in range(a.first_offset, a.last_offset + 1)]


def ms(td: datetime.timedelta) -> int:
    return round(td.total_seconds() * 1000)


def code(x: Any) -> int:
    return int(x)


class ShareMember:
    """One raw share-group member: a coordinator connection for heartbeats and a leader
    connection carrying its share session (single-node broker: both are the same node)."""

    def __init__(self, bootstrap: str, group: str, member_id: str | None = None, version: int = 2) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.member_id = member_id or uuid.uuid4().hex[:22]
        self.version = version
        self.coord = rk.RawClient(bootstrap, timeout=10)
        self.conn = rk.RawClient(bootstrap, timeout=10)
        self.member_epoch = 0
        self.session_epoch = 0
        self.assignment: dict[uuid.UUID, list[int]] = {}

    # -- group membership
    def heartbeat(self, epoch: int | None = None, topics: Sequence[str] | None = None) -> Any:
        resp = self.coord.request(heartbeat_request(self.group, self.member_id,
                                                    self.member_epoch if epoch is None else epoch, topics))
        if code(resp.error_code) == 0:
            self.member_epoch = resp.member_epoch
            if resp.assignment is not None:
                self.assignment = {tp.topic_id: sorted(tp.partitions) for tp in resp.assignment.topic_partitions}
        return resp

    def join(self, topics: Sequence[str], want: Mapping[uuid.UUID, Sequence[int]] | None = None,
             timeout: float = TIMEOUT) -> Any:
        """Join with epoch 0, then heartbeat (full) until the assignment covers `want`."""
        resp = self.heartbeat(0, topics)
        assert code(resp.error_code) == 0, resp
        assert resp.member_epoch >= 1, resp

        def assigned() -> bool:
            if want is None:
                return True
            if all(set(ps) <= set(self.assignment.get(tid, ())) for tid, ps in want.items()):
                return True
            r = self.heartbeat(None, topics)
            assert code(r.error_code) == 0, r
            return False

        wait_for(assigned, timeout, interval=0.1, message=f"assignment {want} for member {self.member_id}")
        return resp

    # -- share session
    def fetch(self, partitions: Iterable[tuple[uuid.UUID, int]] = (), *, epoch: int | None = None,
              timeout: float | None = None, bump: bool = True, **kwargs: Any) -> Any:
        e = self.session_epoch if epoch is None else epoch
        kwargs.setdefault("version", self.version)
        resp = self.conn.request(share_fetch_request(self.group, self.member_id, e, partitions=partitions, **kwargs),
                                 timeout=timeout)
        if bump and code(resp.error_code) == 0 and e >= 0:
            self.session_epoch = e + 1
        return resp

    def ack(self, acks: AckMap, *, epoch: int | None = None, bump: bool = True, **kwargs: Any) -> Any:
        e = self.session_epoch if epoch is None else epoch
        kwargs.setdefault("version", self.version)
        resp = self.conn.request(share_ack_request(self.group, self.member_id, e, acks, **kwargs))
        if bump and code(resp.error_code) == 0 and e > 0:
            self.session_epoch = e + 1
        return resp

    def close(self) -> None:
        self.coord.close()
        self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def raw_produce(bootstrap: str, topic: str, batches: Sequence[Sequence[bytes]], partition: int = 0) -> list[int]:
    """Produce each inner list as ONE record batch; returns the base offsets."""
    bases = []
    with rk.RawClient(bootstrap) as raw:
        for vals in batches:
            p = rk.produce(raw, topic, partition, rk.encode_batch([rk.Rec(v) for v in vals]))
            assert int(p.error_code) == 0, p
            bases.append(p.base_offset)
    return bases

