"""One worker's view of the others (worker.processes > 1): who leads what, the request gate that
runs before every handler, and the refresh of what worker 0 writes (topics, group configs).

The gate, per request:
  - topic and config changes are made by worker 0 only (it alone writes the metadata and group
    config files): another worker forwards the client's request frame to it unchanged and relays
    the answer, then re-reads the files so the client's next request here sees the change;
  - a group request that reached a worker not coordinating the group is answered NOT_COORDINATOR,
    as a broker that is not the coordinator answers (the client looks the coordinator up again);
  - what multi-worker mode does not do (transactions, ACL and quota changes, deleting topics,
    records or groups, adding partitions, broker config changes) is refused with INVALID_REQUEST
    and a message that says so, instead of acting on one worker's share of the state."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import CloseConnection, error_response
from sharebroker.broker.flusher import now_ms
from sharebroker.broker.groups.group_log import OFFSETS_TOPIC
from sharebroker.broker.share.leader import OffsetReset
from sharebroker.broker.share.partition import ShareLimits
from sharebroker.broker.share.partitions import GroupShareSettings
from sharebroker.broker.share_state.coordinator import STATE_TOPIC, ShareCoordinator
from sharebroker.broker.share_state import records as rec
from sharebroker.broker.structured_log import get_logger
from sharebroker.broker.workers import WorkerIdentity, owner_index
from sharebroker.broker.workers.peer import Peer
from sharebroker.broker.workers.persister import RoutingPersister
from sharebroker.protocol.codec import DecodedRequest, encode_response
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.workers")

UNSUPPORTED = "is not supported with worker.processes > 1 (experimental multi-worker mode)"
_REFUSED = {
    20: "DeleteTopics", 21: "DeleteRecords", 37: "CreatePartitions", 24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers", 28: "TxnOffsetCommit", 30: "CreateAcls",
    31: "DeleteAcls", 42: "DeleteGroups", 49: "AlterClientQuotas", 51: "AlterUserScramCredentials",
    57: "UpdateFeatures", 91: "AlterShareGroupOffsets", 92: "DeleteShareGroupOffsets",
}
_FORWARDED = frozenset({19, 22, 33, 44})  # CreateTopics, InitProducerId, AlterConfigs, IncrementalAlterConfigs
_BROKER_RESOURCES = frozenset({4, 8})  # BROKER, BROKER_LOGGER: one worker's settings only
_GROUP_RESOURCE = 32
DLQ_TOPIC = "errors.deadletterqueue.topic.name"
# Requests after which this worker should see what worker 0 wrote (one stat of each file otherwise).
# Metadata, JoinGroup, ConsumerGroupHeartbeat, ShareGroupHeartbeat; and the share-state RPCs that
# start a share partition (Initialize, Read, ReadSummary), which may name a topic created a moment ago.
_REFRESH = frozenset({3, 11, 68, 76, 83, 84, 87})
# API key -> the group ids of a request (the coordinator must own each of them)
_GROUP_IDS: dict[int, Any] = {
    8: lambda b, v: [b.group_id], 11: lambda b, v: [b.group_id], 12: lambda b, v: [b.group_id],
    13: lambda b, v: [b.group_id], 14: lambda b, v: [b.group_id], 47: lambda b, v: [b.group_id],
    68: lambda b, v: [b.group_id], 76: lambda b, v: [b.group_id],
    9: lambda b, v: [g.group_id for g in b.groups] if v >= 8 else [b.group_id],
    15: lambda b, v: list(b.groups), 69: lambda b, v: list(b.group_ids), 77: lambda b, v: list(b.group_ids),
    90: lambda b, v: [g.group_id for g in b.groups],
}


# The longest a ShareFetch waits for records when the member's topic has partitions on another
# worker (a topic of two or more partitions always has: consecutive partitions go to different
# workers). librdkafka's ShareConsumer sends its record-fetching ShareFetch to one broker at a time
# and picks the next broker only once that one is answered, so a fetch that waited out MaxWaitMs
# (fetch.wait.max.ms, 500 ms by default) on a worker with nothing to acquire kept the records
# acquirable on the other worker waiting just as long. An idle member asks again this often.
SHARE_FETCH_WAIT_MS = 50


class WorkerCluster:
    def __init__(self, broker: Broker, identity: WorkerIdentity) -> None:
        self.broker = broker
        self.identity = identity
        self.share_fetch_wait_ms = SHARE_FETCH_WAIT_MS
        self.peers = {i: Peer(*identity.endpoint(i), identity.node_ids[i], f"sharebroker-worker-{identity.index}")
                      for i in range(identity.count) if i != identity.index}
        self._group_configs_seen: tuple[int, int, int] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def attach(self, local: ShareCoordinator) -> Any:
        """Set this worker's share of the data directory up, before anything of it is opened; the
        persister the share-partition leaders and the group coordinator use from then on."""
        topics = self.broker.topics
        topics.owns = self.identity.owns
        topics.leader_of = self.identity.owner_node
        topics.writable = self.identity.index == 0
        topics.logs.shared_clean = self.identity.clean
        return RoutingPersister(local, self.identity, self.peers)

    async def wait_for_worker_0(self) -> None:
        """Workers other than 0 open the data directory once worker 0 serves: by then the
        internal topics are in the metadata file. No deadline: worker 0's recovery takes what it
        takes, and the supervisor stops everyone if it dies."""
        if not self.identity.after:
            return
        while not os.path.exists(self.identity.after):
            await asyncio.sleep(0.01)

    async def ensure_internal_topics(self) -> None:
        """Worker 0 creates the coordinators' topics before the others start (they only read the
        metadata file), so every worker has its partitions of them from the start."""
        if self.identity.index == 0:
            await self.broker.group_log._topic()
            await self.broker.share_persister._topic()
        elif self.broker.topics.get(OFFSETS_TOPIC) is None or self.broker.topics.get(STATE_TOPIC) is None:
            raise RuntimeError("worker 0 did not create the internal topics")

    def listening_sockets(self) -> list[socket.socket]:
        socks = [socket.socket(fileno=fd) for fd in self.identity.listen_fds]
        for sock in socks:
            sock.setblocking(False)
        return socks

    def fresh_settings(self, settings: GroupShareSettings) -> GroupShareSettings:
        """The group settings this worker's share-partition leaders read, with the group configs
        worker 0 wrote taken first when a leader starts (auto-offset-reset decides where it begins)."""
        return _FreshSettings(settings, self)

    # -- who leads and coordinates what -----------------------------------------------------------

    def group_coordinator(self, group_id: str) -> int:
        return owner_index(OFFSETS_TOPIC, self.broker.group_log.partition_of(group_id), self.identity.count)

    def share_coordinator(self, group_id: str, topic_id: Any, partition: int) -> int:
        index = rec.state_partition(group_id, topic_id, partition, self.broker.share_persister.num_partitions)
        return owner_index(STATE_TOPIC, index, self.identity.count)

    def coordinator_node(self, key: str, key_type: int) -> tuple[ErrorCode, str | None, int, str, int]:
        """FindCoordinator's answer for a key already checked: the worker owning the key's partition
        of `__consumer_offsets` (groups) or `__share_group_state` (share keys "group:topic id:partition")."""
        from sharebroker.broker.apis.find_coordinator import _SHARE_KEY, SHARE, TRANSACTION, share_key_topic_id

        if key_type == TRANSACTION:
            return ErrorCode.invalid_request, f"Transactions {UNSUPPORTED}.", -1, "", -1
        if key_type == SHARE:
            m = _SHARE_KEY.match(key)
            assert m is not None  # checked by the caller
            owner = self.share_coordinator(m.group(1), share_key_topic_id(m.group(2)), int(m.group(3)))
        else:
            owner = self.group_coordinator(key)
        return (ErrorCode.none, None, *self.node(owner))

    def leader_of(self, topic: str | None, partition: int) -> int:
        return self.identity.owner_node(topic or "", partition)

    def brokers(self) -> list[tuple[int, str, int]]:
        return [(self.identity.node_ids[i], *self.identity.endpoint(i)) for i in range(self.identity.count)]

    def node(self, index: int) -> tuple[int, str, int]:
        return self.brokers()[index]

    # -- what worker 0 writes -----------------------------------------------------------------------

    def refresh(self) -> None:
        """Take topics and group configs worker 0 wrote since the last look (a stat of each file)."""
        if self.identity.index == 0:
            return
        broker = self.broker
        broker.topics.reload(now_ms())
        path = broker.share_groups._path
        try:
            st = os.stat(path)
        except OSError:
            return
        seen = (st.st_mtime_ns, st.st_size, st.st_ino)
        if seen != self._group_configs_seen:
            self._group_configs_seen = seen
            broker.share_groups.configs = {g: dict(c) for g, c in json.loads(path.read_text()).items()}
            broker.share_groups.invalidate_configs()

    def auto_create(self, name: str) -> None:
        """Metadata-triggered creation on a worker other than 0: a CreateTopics to worker 0 with
        the defaults, as Kafka's brokers send one to the controller; answered in the background."""
        task = asyncio.get_running_loop().create_task(self._auto_create(name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _auto_create(self, name: str) -> None:
        try:
            resp = await self.peers[0].request(19, 5, {"topics": [{
                "name": name, "num_partitions": -1, "replication_factor": -1, "assignments": [], "configs": []}],
                "timeout_ms": 30000, "validate_only": False})
            result = resp.topics[0]
            if result.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                log.warning("auto topic creation refused", topic=name, error=result.error_code.name,
                            message=result.error_message)
            self.refresh()
        except Exception as exc:  # noqa: BLE001 - the client asks again at its next metadata refresh
            log.warning("auto topic creation failed", topic=name, error=str(exc))
        finally:
            self.broker.topics.auto_creating.discard(name)

    # -- the gate ----------------------------------------------------------------------------------

    async def gate(self, req: DecodedRequest, frame: bytes | memoryview) -> bytes | None:
        """The response frame for a request this worker does not serve itself, or None to serve it."""
        key = req.api_key
        if key in _REFRESH:
            self.refresh()
        extract = _GROUP_IDS.get(key)
        if extract is not None:
            for group_id in extract(req.body, req.api_version):
                owner = self.group_coordinator(group_id)
                if owner != self.identity.index:
                    return self._error(req, ErrorCode.not_coordinator,
                                       f"Group {group_id} is coordinated by node {self.identity.node_ids[owner]}.")
            return None
        name = _REFUSED.get(key)
        if name is not None:
            return self._error(req, ErrorCode.invalid_request, f"{name} {UNSUPPORTED}.")
        if key in _FORWARDED:
            if key == 22 and req.body.transactional_id:
                return self._error(req, ErrorCode.invalid_request, f"Transactions {UNSUPPORTED}.")
            if key in (33, 44) and any(int(r.resource_type) in _BROKER_RESOURCES for r in req.body.resources):
                return self._error(req, ErrorCode.invalid_request, f"Changing broker configs {UNSUPPORTED}.")
            if key in (33, 44) and any(c.name == DLQ_TOPIC and c.value for r in req.body.resources
                                       if int(r.resource_type) == _GROUP_RESOURCE for c in r.configs):
                # A dead-letter topic's partitions may be led by another worker, and appends do not
                # cross workers: refused rather than archived silently.
                return self._error(req, ErrorCode.invalid_request, f"Setting {DLQ_TOPIC} (a share-group dead-letter queue) {UNSUPPORTED}.")
            if self.identity.index != 0:
                try:
                    answer = await self.peers[0].forward(bytes(frame))  # copied: the buffer is reused
                except KafkaError as exc:  # worker 0 unreachable (stopping): the client retries
                    return self._error(req, exc.code, exc.message)
                self.refresh()
                return answer
        return None

    def _error(self, req: DecodedRequest, code: ErrorCode, message: str) -> bytes:
        log.info("request refused in multi-worker mode", api_key=req.api_key, error=code.name, message=message)
        resp = error_response(req, code, message)
        if resp is None:  # an API with nowhere to put an error: the connection is closed
            raise CloseConnection(message)
        return encode_response(req.correlation_id, resp)

    def close(self) -> None:
        for peer in self.peers.values():
            peer.close()


class _FreshSettings:
    def __init__(self, settings: GroupShareSettings, cluster: WorkerCluster) -> None:
        self._settings = settings
        self._cluster = cluster

    def limits(self, group_id: str) -> ShareLimits:
        return self._settings.limits(group_id)

    def auto_offset_reset(self, group_id: str) -> OffsetReset:
        self._cluster.refresh()
        return self._settings.auto_offset_reset(group_id)
