"""The running broker: lifecycle (start, serve, graceful stop), the listener, and the background
timers (retention, time-based flush, producer-id expiry)."""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import signal
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from sharebroker.broker.acceptor import Acceptor, bind
from sharebroker.broker.connection import Connection
from sharebroker.broker.features import FeatureLevels
from sharebroker.broker.fetch_sessions import FetchSessionCache
from sharebroker.broker.flusher import Flusher, now_ms
from sharebroker.broker.log_cleaner import LogCleaner
from sharebroker.broker.frames import FrameProtocol, RequestMemory
from sharebroker.broker.groups.classic_coordinator import ClassicGroupCoordinator
from sharebroker.broker.groups.consumer_coordinator import ConsumerGroupCoordinator
from sharebroker.broker.groups.coordinator import ShareGroupCoordinator
from sharebroker.broker.groups.directory import GroupType
from sharebroker.broker.groups.group_log import GroupLog
from sharebroker.broker.internal_topics import InternalTopics
from sharebroker.broker.memory import trim_heap, tune_allocator
from sharebroker.broker.metrics import NULL_RECORDER, MetricsRecorder, Recorder
from sharebroker.broker.open_files import raise_limit
from sharebroker.broker.quotas import ClientQuotas, QuotaStore
from sharebroker.broker.clock import Clock, LoopClock
from sharebroker.broker.security.oauthbearer import JwksValidator
from sharebroker.broker.security.sasl import ListenerSecurity, listener_security
from sharebroker.broker.security.scram import ScramCredentials
from sharebroker.broker.security.tls import NoMatchingRule
from sharebroker.storage.files import LogDirLock
from sharebroker.broker.security.acl_store import AclStore
from sharebroker.broker.security.authorizer import Authorizer, parse_super_users
from sharebroker.storage import METADATA_FILE
from sharebroker.broker.share.dead_letters import DeadLetters
from sharebroker.broker.share.partitions import SharePartitions
from sharebroker.broker.share_state.coordinator import ShareCoordinator
from sharebroker.broker.structured_log import get_logger
from sharebroker.broker.topics import Partition, Topics, in_slices, is_remote
from sharebroker.broker.transactions.coordinator import TransactionCoordinator
from sharebroker.broker.workers import WorkerIdentity
from sharebroker.broker.workers.cluster import WorkerCluster
from sharebroker.config import BrokerConfig
from sharebroker.protocol.errors import ErrorCode, KafkaError

log = get_logger("sharebroker.server")

_PRODUCER_ID_BLOCK = 1000
_MAX = 2**63 - 1


class Broker:
    def __init__(self, config: BrokerConfig, *, ready_file: Path | None = None, clock: Clock | None = None) -> None:
        self.config = config
        self.node_id: int = config.node_id
        self.log_dir: Path = config.log_dir
        # Deadlines on the monotonic clock, timers on the loop (tests pass a manual clock).
        self.clock: Clock = clock if clock is not None else LoopClock()
        self._dir_lock = LogDirLock(self.log_dir)
        self.topics = Topics(config, self.log_dir)
        # worker.processes > 1 (experimental): this process is one worker of several (broker/workers).
        self.workers: WorkerCluster | None = None
        identity = WorkerIdentity.from_env() if config["worker.processes"] > 1 else None
        if identity is not None:
            self.node_id = identity.node_id
            self.workers = WorkerCluster(self, identity)
        self.scram_credentials = ScramCredentials(self.log_dir)  # SCRAM users (AlterUserScramCredentials)
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])  # KIP-227
        # The owners are built from the seams they use, not from the broker: internal topics for
        # the coordinators' logs, the persister for share state, this broker as the group directory.
        internal = self.internal_topics = InternalTopics(self.topics, self)
        self.share_persister = ShareCoordinator(config, self.topics, internal)
        if self.workers is not None:
            self.share_persister = self.workers.attach(self.share_persister)
        self.group_log = GroupLog(internal, num_partitions=config["offsets.topic.num.partitions"])
        self.share_groups = ShareGroupCoordinator(config, self.log_dir, self.clock, self.topics, self.group_log,
                                                  self.share_persister, groups=self)
        self.classic_groups = ClassicGroupCoordinator(config, self.clock, self.topics, self.group_log, groups=self)
        self.consumer_groups = ConsumerGroupCoordinator(config, self.clock, self.topics, self.group_log, groups=self,
                                                        group_configs=self.share_groups.config,
                                                        classic=self.classic_groups)
        self.share_groups.config_listeners.append(self.consumer_groups.configs_changed)
        self.transactions = TransactionCoordinator(config, self.topics, internal, self, self.next_producer_id)
        self.transactions.listeners.append(self.classic_groups)  # TxnOffsetCommit offsets end with the markers
        self.share = SharePartitions(self.share_groups, self.share_persister, self.clock,
                                     max_sessions=config["group.share.max.share.sessions"],
                                     dead_letters=DeadLetters(self))
        if self.workers is not None:
            self.share.settings = self.workers.fresh_settings(self.share_groups)
        # Multi-worker mode has no dead-letter queues (appends do not cross workers): a group's
        # DLQ setting from an earlier single-process run is ignored there, as with share.version 1.
        self.share_groups.share_dlq_supported = lambda: self.features.share_dlq_supported and self.workers is None
        self.share_groups.leaders = self.share
        # Metrics only when metrics.listener is set: otherwise every hook is the null recorder's no-op.
        self.metrics: Recorder = MetricsRecorder() if config["metrics.listener"] else NULL_RECORDER
        self._metrics_endpoint: Any = None
        for owner in (self.share, self.share_groups, self.classic_groups, self.consumer_groups):
            owner.metrics = self.metrics
        self.flusher: Flusher | None = None
        # ACLs (authorizer.class.name set): built at start, once the metadata file is read. None
        # means every request is allowed, and a handler's check costs this one attribute test.
        self.authorizer: Authorizer | None = None
        # Client quotas (AlterClientQuotas), loaded at start; inactive (one attribute test per
        # request) while none is configured.
        store = self.topics.store
        self.quotas = ClientQuotas(QuotaStore(lambda rows: store.set_section("client_quotas", rows)),
                                   samples=config["quota.window.num"], window_s=config["quota.window.size.seconds"],
                                   clock=lambda: time.monotonic() * 1000)
        self.log_cleaner = LogCleaner(config, self.topics)
        self.features = FeatureLevels(self.log_dir, self.node_id)
        self.ready_file = ready_file
        self.port = 0  # bound port of the first listener
        self._acceptors: list[Acceptor] = []
        self._bound: dict[str, tuple[str, int]] = {}  # listener name -> bound (host, port)
        self._endpoints: dict[str, tuple[str, int]] = {}  # listener name -> advertised (host, port)
        self._connections: set[asyncio.Task[None]] = set()
        self._open: dict[Connection, FrameProtocol] = {}
        self._open_per_ip: dict[str, int] = {}  # max.connections.per.ip without a scan per accept
        self._request_memory = RequestMemory(config["queued.max.request.bytes"])
        self._per_ip_limits = {ip.strip(): int(n) for ip, _, n in (
            pair.rpartition(":") for pair in config["max.connections.per.ip.overrides"].split(",") if pair.strip())}
        self._closed_since_trim = 0
        self._timers: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()  # spawn(): work no request waits for
        self._jwks: list[JwksValidator] = []  # OAUTHBEARER key sets to keep fresh
        self._producer_ids: range = range(0)
        self._producer_id_iter: Any = iter(())

    # -- identity -------------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        configured = self.config["cluster.id"]
        return configured or self.topics.cluster_id

    @property
    def features_epoch(self) -> int:
        return self.features.epoch

    def supported_features(self) -> list[dict[str, Any]]:
        return self.features.supported()

    def finalized_features(self) -> list[dict[str, Any]]:
        return self.features.finalized()

    def group_dlq_settings(self, group_id: str) -> tuple[str, bool]:
        """(errors.deadletterqueue.topic.name, errors.deadletterqueue.copy.record.enable) of a group."""
        c = self.share_groups.config(group_id)
        return c.errors_deadletterqueue_topic_name, c.errors_deadletterqueue_copy_record_enable

    def next_producer_id(self) -> int:
        pid = next(self._producer_id_iter, None)
        if pid is None:
            self._producer_ids = self.topics.store.reserve_producer_ids(_PRODUCER_ID_BLOCK)
            self._producer_id_iter = iter(self._producer_ids)
            pid = next(self._producer_id_iter)
        return pid

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        t0 = time.perf_counter()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.workers is None:
            self._dir_lock.acquire()  # before any other file of the directory is touched
        else:  # the supervisor holds the lock; worker 0 opens the directory first
            await self.workers.wait_for_worker_0()
        try:
            self.features.load(new_directory=not (self.log_dir / METADATA_FILE).exists())
            notes = self.topics.open(now_ms())
            self.authorizer = self._make_authorizer()
            self.quotas.store.load(self.topics.store.sections.get("client_quotas", []))
            for note in notes:
                log.warning("log recovery", detail=note)
            self.share_persister.load()
            # One pass over `__consumer_offsets` for the three group coordinators (their record
            # types differ); then each finishes, consumer before classic: a consumer group's
            # offsets make no simple group.
            coordinators = (self.share_groups, self.consumer_groups, self.classic_groups)
            handlers: dict[int, Callable[[bytes, bytes | None], None]] = {}
            for coordinator in coordinators:
                handlers.update(coordinator.begin_load())
            self.group_log.replay(handlers, open_transactions=self.classic_groups.replay_pending)
            for coordinator in coordinators:
                coordinator.finish_load()
            self.transactions.load()
            if self.workers is not None:
                await self.workers.ensure_internal_topics()
        except BaseException:
            # Out of descriptors half-way, typically: give them back so the caller can say what the
            # data directory needs (and so nothing of a failed start stays open in-process).
            self.topics.logs.close_files()
            if self.workers is None:
                self._dir_lock.release()
            raise
        self.flusher = Flusher()
        self.flusher.start()
        self.log_cleaner.start()
        self.share_groups.start()
        self.classic_groups.start()
        self.consumer_groups.start()
        self.group_log.start()
        self.share_persister.start()
        self.transactions.start()
        if notes:  # recovery rewrote files: make the repaired state durable before serving
            for p in self.topics.all_partitions():
                self.flusher.request(p.log)
        try:
            await self._listen()
        except BaseException:
            try:  # nothing was served: a clean stop, which also gives the descriptors back
                await self.stop()
            except Exception:
                log.exception("stopping after a failed start failed")
            raise
        self._start_timers()
        if isinstance(self.metrics, MetricsRecorder):
            await self._start_metrics(self.metrics)
        startup_ms = (time.perf_counter() - t0) * 1000
        first = self.config.listeners[0].name
        log.info("broker started", listeners=", ".join(f"{name}://{host}:{port}" for name, (host, port) in self._bound.items()),
                 advertised=", ".join(f"{name}://{host}:{port}" for name, (host, port) in self._endpoints.items()),
                 node_id=self.node_id, cluster_id=self.cluster_id, log_dir=str(self.log_dir),
                 topics=len(self.topics.by_name), startup_ms=round(startup_ms, 1))
        for unknown in getattr(self.config, "unknown", []) or []:
            log.warning("unknown configuration ignored", setting=unknown)
        if self.ready_file is not None:
            tmp = self.ready_file.with_suffix(".tmp")
            tmp.write_text(f"{self._endpoints[first][0]}:{self._bound[first][1]}\n")
            os.replace(tmp, self.ready_file)

    def _make_authorizer(self) -> Authorizer | None:
        if not self.config["authorizer.class.name"]:
            return None
        store = self.topics.store
        acls = AclStore(store.sections.get("acls", []), lambda rows: store.set_section("acls", rows))
        return Authorizer(acls, super_users=parse_super_users(self.config["super.users"]),
                          allow_if_no_acl=self.config["allow.everyone.if.no.acl.found"])

    async def _listen(self) -> None:
        """Open every listener; each connection remembers the one it came in on, because Metadata,
        FindCoordinator and DescribeCluster answer with that listener's advertised endpoint."""
        max_frame = self.config["socket.request.max.bytes"]
        advertised = {adv.name: adv for adv in self.config.advertised_listeners}
        loop = asyncio.get_running_loop()
        # A TLS handshake that stalls holds a connection no longer than an idle one would (at most a minute).
        handshake_s = min(self.config["connections.max.idle.ms"], 60_000) / 1000
        for listener in self.config.listeners:
            security = listener_security(self.config, listener, self.scram_credentials)
            if isinstance(security.oauth, JwksValidator):
                self._jwks.append(security.oauth)
            secured = security if security.protocol != "PLAINTEXT" else None

            def protocol(name: str = listener.name, secured: ListenerSecurity | None = secured) -> FrameProtocol:
                return FrameProtocol(max_frame, lambda frames: self._accept(frames, name, secured),
                                     self._request_memory)

            def connected(sock: socket.socket, protocol: Callable[[], FrameProtocol] = protocol,
                          name: str = listener.name, ctx: ssl.SSLContext | None = security.ssl_context) -> None:
                if ctx is None:
                    setup = loop.connect_accepted_socket(protocol, sock)
                else:  # the handshake runs on the loop, between other connections' reads
                    setup = loop.connect_accepted_socket(protocol, sock, ssl=ctx, ssl_handshake_timeout=handshake_s)
                task = loop.create_task(setup)
                task.add_done_callback(functools.partial(self._connect_failed, sock=sock, listener=name,
                                                         tls=ctx is not None,
                                                         peer=_peer_of(sock) if ctx is not None else "?"))

            if self.workers is not None:  # the supervisor bound it
                socks = self.workers.listening_sockets()
            else:
                socks = bind(listener.host or None, listener.port)
            acceptor = Acceptor(listener.name, socks, connected)
            self._acceptors.append(acceptor)
            port = acceptor.sockets[0].getsockname()[1]
            self._bound[listener.name] = (listener.host, port)
            adv = advertised.get(listener.name, listener)
            self._endpoints[listener.name] = (adv.host or listener.host or "127.0.0.1", adv.port or port)
            if self.workers is not None:
                self._endpoints[listener.name] = self.workers.identity.endpoint(self.workers.identity.index)
        for acceptor in self._acceptors:
            acceptor.start()
        self.port = self._bound[self.config.listeners[0].name][1]

    async def _start_metrics(self, recorder: MetricsRecorder) -> None:
        # Imported here: prometheus_client is loaded only by a broker that serves metrics.
        from sharebroker.broker.admin_view import AdminView
        from sharebroker.broker.metrics_endpoint import MetricsEndpoint, registry_for
        from sharebroker.config.broker_settings import parse_metrics_listener

        host, port = parse_metrics_listener(self.config["metrics.listener"])
        view = AdminView(self, write_enabled=self.config["admin.ui.write.enable"])
        self._metrics_endpoint = MetricsEndpoint(registry_for(self, recorder), host, port, view)
        try:
            await self._metrics_endpoint.start()
        except OSError as exc:  # the port is taken, or the host is not ours: say which setting
            await self.stop()
            raise OSError(exc.errno, f"cannot listen on metrics.listener {host}:{port}: {exc.strerror}") from None
        except BaseException:
            await self.stop()
            raise

    def open_connections(self) -> list[Connection]:
        """The client connections open now."""
        return list(self._open)

    def _connect_failed(self, task: asyncio.Task[Any], *, sock: socket.socket, listener: str, tls: bool,
                        peer: str) -> None:
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        if tls:  # a plaintext client on a TLS port, an untrusted certificate, a stalled handshake
            reason = getattr(exc, "reason", None) or type(exc).__name__
            log.warning("TLS handshake failed, closing connection", listener=listener, peer=peer, reason=reason,
                        error=str(exc) or type(exc).__name__)
        else:
            log.warning("accepted connection could not be set up", listener=listener, peer=peer, error=str(exc))
        sock.close()

    def descriptors_freed(self) -> None:
        """Something gave file descriptors back: listeners paused at the limit accept again."""
        for acceptor in self._acceptors:
            acceptor.resume()

    def endpoint(self, listener: str) -> tuple[str, int]:
        """The advertised (host, port) of a listener, as this broker describes itself to a client on it."""
        return self._endpoints[listener]

    def _accept(self, frames: FrameProtocol, listener: str, security: ListenerSecurity | None = None) -> None:
        ip = frames.peername()[0]
        refused = self._over_limit(ip)
        if refused is not None:
            # As Kafka: a connection over max.connections or max.connections.per.ip is closed at once.
            log.warning("connection refused", peer=ip, reason=refused)
            frames.close()
            return
        if self.quotas.active:
            delay_ms = self.quotas.connection_throttle(ip)
            if delay_ms:
                # As Kafka: over its ip's connection_creation_rate, a connection is not served and
                # is closed once the throttle time has passed.
                log.info("connection throttled", peer=ip, throttle_ms=delay_ms, reason="connection_creation_rate")
                asyncio.get_running_loop().call_later(delay_ms / 1000, frames.close)
                return
        try:
            conn = Connection(self, frames, listener, security)
        except NoMatchingRule as exc:  # as Kafka: a certificate no mapping rule applies to is refused
            log.warning("no principal for the client certificate, closing connection", listener=listener,
                        peer=ip, error=str(exc))
            frames.close()
            return
        task = asyncio.get_running_loop().create_task(self._serve_connection(conn, ip))
        self._connections.add(task)
        self._open[conn] = frames
        self._open_per_ip[ip] = self._open_per_ip.get(ip, 0) + 1
        task.add_done_callback(self._connections.discard)

    async def _serve_connection(self, conn: Connection, ip: str) -> None:
        try:
            await conn.serve()
        except asyncio.CancelledError:
            pass
        finally:
            if self._open.pop(conn, None) is not None:
                left = self._open_per_ip[ip] - 1
                if left:
                    self._open_per_ip[ip] = left
                else:
                    del self._open_per_ip[ip]
            self.descriptors_freed()
            self._closed_since_trim += 1
            if self._closed_since_trim == 64:  # many went: give their freed buffers back soon
                asyncio.get_running_loop().call_later(1.0, self._trim)

    def _trim(self) -> None:
        self._closed_since_trim = 0
        trim_heap()

    def _over_limit(self, ip: str) -> str | None:
        if len(self._open) >= self.config["max.connections"]:
            return f"max.connections ({self.config['max.connections']}) reached"
        limit = self._per_ip_limits.get(ip, self.config["max.connections.per.ip"])
        if self._open_per_ip.get(ip, 0) >= limit:
            return f"max.connections.per.ip ({limit}) reached for {ip}"
        return None

    def _close_idle(self) -> None:
        """connections.max.idle.ms, as Kafka enforces it: a connection with no bytes in or out for
        that long is closed."""
        idle_s = self.config["connections.max.idle.ms"] / 1000
        now = time.monotonic()
        for conn, frames in list(self._open.items()):
            if now - frames.last_active > idle_s:
                log.info("closing idle connection", conn=conn.id, peer=conn.peer,
                         idle_ms=round((now - frames.last_active) * 1000))
                frames.close()

    async def stop(self) -> None:
        log.info("broker stopping")
        if self._metrics_endpoint is not None:
            await self._metrics_endpoint.stop()
            self._metrics_endpoint = None
        for acceptor in self._acceptors:
            acceptor.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=5)
        for timer in self._timers:
            timer.cancel()
        for task in list(self._background):  # a topic being auto-created: what it made goes
            task.cancel()
        if self._background:
            await asyncio.wait(list(self._background), timeout=5)
        await self.internal_topics.stop()
        await self.share_groups.stop()
        await self.classic_groups.stop()
        await self.consumer_groups.stop()
        await self.transactions.stop()
        await self.group_log.stop()
        await self.share_persister.stop()
        self.share.close()
        await self.log_cleaner.stop()
        if self.flusher is not None:
            await self.flusher.stop()
        self.topics.close()
        if self.workers is not None:
            self.workers.close()
        else:
            self._dir_lock.release()
        log.info("broker stopped")

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` as a task of its own, cancelled when the broker stops."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- topic changes other owners must hear about ----------------------------------------------

    async def delete_topic(self, name: str) -> None:
        await self.topics.settled(name)  # partitions being added: after them
        if self.topics.get(name) is None:  # deleted by another request meanwhile
            raise KafkaError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
        topic = self.topics.delete(name)
        self.spawn(self.topics.remove_retired())  # its directories, in slices
        self.share.drop_topic(topic.topic_id)
        await self.share_groups.topic_deleted(topic.topic_id, len(topic.partitions))
        await self.classic_groups.topic_deleted(name)
        await self.consumer_groups.topic_deleted()
        self.metrics.forget_topic(name)
        self.descriptors_freed()  # its segments' files are closed

    def group_type(self, group_id: str) -> GroupType | None:
        """Which kind of group owns this id ("share", "classic"), or None if no group has it."""
        if group_id in self.share_groups.groups:
            return "share"
        if group_id in self.consumer_groups.groups:
            return "consumer"
        if group_id in self.classic_groups.groups:
            return "classic"
        return None

    def list_groups(self) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, type) of every group."""
        return ([(g.group_id, "share", g.state, "share") for g in self.share_groups.groups.values()]
                + self.classic_groups.listing() + self.consumer_groups.listing())

    async def add_partitions(self, name: str, total: int) -> int:
        """The topic's partition count before."""
        return await self.topics.add_partitions(name, total, now_ms())

    def on_log_start_moved(self, partition: Partition) -> None:
        partition.notify_append()

    def alter_broker_configs(self, changes: list[tuple[str, int, str | None]], *, per_broker: bool,
                             incremental: bool, validate_only: bool) -> None:
        """Dynamic broker configs (this node's, or the cluster default), persisted with the metadata."""
        from sharebroker.config import ConfigError

        cfg = self.config
        mapping: dict[str, str | None] = {}
        if not incremental:  # AlterConfigs replaces the whole dynamic layer
            mapping = {name: None for name in cfg.dynamic_values(per_broker)}
        for name, op, value in changes:
            if op == 0:
                mapping[name] = value
            elif op == 1:
                mapping[name] = None
            else:
                raise ConfigError(name, f"Config operation {op} is not supported for broker config {name}")
        # Plan on a copy, persist, then apply: a failed write (a full disk) changes nothing.
        planned = cfg.copy()
        planned.alter_many(mapping, per_broker=per_broker, validate_only=validate_only)
        if validate_only:
            return
        self.topics.store.set_dynamic_broker_configs(
            {"cluster": planned.dynamic_values(False), "broker": planned.dynamic_values(True)})
        cfg.alter_many(mapping, per_broker=per_broker)
        self.topics.refresh_config()
        self.share_groups.invalidate_configs()

    # -- appends --------------------------------------------------------------------------------

    def after_append(self, partition: Partition, *, wait: bool) -> Awaitable[None] | None:
        """Apply log.flush.interval.messages: crossing it forces an fsync; with `wait`, returns what
        the response must await (None when nothing is to be waited for, the common case)."""
        plog = partition.log
        partition.notify_append()
        if plog.unflushed_messages >= partition.topic.config.flush_messages:
            assert self.flusher is not None
            if wait:
                return self.flusher.sync(plog)
            self.flusher.request(plog)
        return None

    def segment_rolled(self, partition: Partition) -> None:
        """A rolled segment is complete: snapshot producer state (so a restart replays at most one
        segment) and flush it off the loop so the recovery point moves on."""
        self.topics.snapshot_producers(partition)
        if self.flusher is not None:
            self.flusher.request(partition.log)

    # -- timers ---------------------------------------------------------------------------------

    def _start_timers(self) -> None:
        loop = asyncio.get_running_loop()
        self._timers.append(loop.create_task(self._every(self.config["log.retention.check.interval.ms"], self._retention,
                                                         first_ms=self.config["log.initial.task.delay.ms"])))
        self._timers.append(loop.create_task(self._every(self._flush_check_ms(), self._time_flush)))
        self._timers.append(loop.create_task(self._every(60_000, self._expire_producers)))
        idle_ms = self.config["connections.max.idle.ms"]
        self._timers.append(loop.create_task(self._every(max(100, min(idle_ms // 4, 30_000)), self._close_idle)))
        for jwks in self._jwks:
            self._timers.append(loop.create_task(self._refresh_jwks(jwks)))
        if self.workers is not None:  # what worker 0 changed, for groups this worker coordinates
            self._timers.append(loop.create_task(self._every(250, self.workers.refresh)))

    async def _refresh_jwks(self, jwks: JwksValidator) -> None:
        """Fetch an OAUTHBEARER key set again every refresh.ms, or soon when a token named an unknown
        key; in a thread, so the loop never waits on the identity provider."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(1.0)
            due = time.monotonic() - jwks.refreshed_at >= jwks.refresh_ms / 1000
            if not (due or jwks.refresh_wanted):
                continue
            try:
                await loop.run_in_executor(None, jwks.refresh)
                log.info("JWKS refreshed", url=jwks.url, keys=len(jwks.keys))
            except Exception as exc:
                jwks.refreshed_at = time.monotonic()  # try again at the next period, not every second
                jwks.refresh_wanted = False
                log.warning("JWKS refresh failed", url=jwks.url, error=str(exc))

    def _flush_check_ms(self) -> int:
        interval = self.config["log.flush.scheduler.interval.ms"]
        return max(10, min(interval, 1000)) if interval < _MAX else 1000

    async def _every(self, interval_ms: int, fn: Callable[[], Awaitable[None] | None], *,
                     first_ms: int | None = None) -> None:
        delay_ms = interval_ms if first_ms is None else first_ms
        while True:
            await asyncio.sleep(delay_ms / 1000)
            delay_ms = interval_ms
            try:
                pending = fn()
                if pending is not None:
                    await pending
            except Exception:
                log.exception("background task failed", task=getattr(fn, "__name__", repr(fn)))

    async def _retention(self) -> None:
        """Every partition's retention, a slice at a time: an empty segment's age is a `stat`, so
        10,000 partitions held the loop 13 ms at each check (100,000 would hold it about 0.1 s)."""
        now = now_ms()
        async for p in in_slices(self.topics.all_partitions()):
            for line in p.log.apply_retention(now):
                log.info("retention", topic=p.topic.name, partition=p.index, detail=line)

    def _time_flush(self) -> None:
        """Every second: the logs due a flush by flush.ms. Only topics with a flush.ms are looked
        through (by default none), not every partition: 100,000 partitions took 20-40 ms a check."""
        assert self.flusher is not None
        now = now_ms()
        for topic in self.topics.by_name.values():
            flush_ms = topic.config.flush_ms
            if flush_ms >= _MAX:
                continue
            for p in topic.partitions:
                if not is_remote(p) and p.log.unflushed_messages and now - p.log.last_flush_ms >= flush_ms:
                    self.flusher.request(p.log)

    def _expire_producers(self) -> None:
        now = now_ms()
        expiration = self.config["producer.id.expiration.ms"]
        for p in self.topics.all_partitions():
            if p.producers.entries:
                p.producers.expire(now, expiration)


def _peer_of(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"


async def run(config: BrokerConfig, *, ready_file: Path | None = None) -> None:
    from sharebroker.broker.structured_log import install_loop_exception_handler

    # A task or future that fails with nobody awaiting it is one structured line, not asyncio's
    # multi-line "Task exception was never retrieved".
    install_loop_exception_handler(asyncio.get_running_loop())
    tune_allocator()
    # Before the broker is built: the log files' budget is derived from the raised limit.
    limits = raise_limit()
    broker = Broker(config, ready_file=ready_file)
    if limits is not None:
        log.info("open file limit", soft_before=limits[0], soft=limits[1], hard=limits[2],
                 log_files_budget=broker.topics.logs.files.capacity)
    await broker.start()
    # What start-up made (modules, kio's schema classes, loaded state) lives as long as the
    # process: keep it out of the collector's full passes, which took ~20 ms under load with it.
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await broker.stop()
