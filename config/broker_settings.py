"""The broker settings (``BROKER_CONFIGS``): node and listeners, logs, groups and offsets, producers,
share groups and the share coordinator, with Apache Kafka 4.2's names, types, defaults and ranges."""

from __future__ import annotations

from sharebroker.config.definitions import INT_MAX, LONG_MAX, AtLeast, Between, ConfigDef, ConfigError, ListOf, OneOf
from sharebroker.config.listeners import parse_listeners, parse_protocol_map
from sharebroker.config.security_settings import security_defs
from sharebroker.config.topic_settings import CLEANUP_POLICIES, COMPRESSION_TYPES, GZIP_LEVEL, TIMESTAMP_TYPES

__all__ = ["BROKER_CONFIGS", "BROKER_SYNONYM_GROUPS", "parse_metrics_listener"]

_SIMPLE_ASSIGNOR_NAMES = ("simple", "org.apache.kafka.coordinator.group.assignor.SimpleAssignor")
_COMPAT = " Accepted for compatibility with Kafka configuration files; sharebroker is a single process and ignores it."


def _listeners_syntax(name: str, value: str) -> None:
    parse_listeners(value, name)


def _metrics_listener_syntax(name: str, value: str | None) -> None:
    if value:  # empty is unset, so KAFKA_METRICS_LISTENER= in a compose file leaves metrics off
        parse_metrics_listener(value, name)


def parse_metrics_listener(value: str, name: str = "metrics.listener") -> tuple[str, int]:
    """HOST:PORT (an empty host binds all interfaces, port 0 picks a free port) -> (host, port)."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError.invalid(name, value, "Expected HOST:PORT, e.g. 127.0.0.1:9404")
    return host.strip("[]"), int(port)


def _protocol_map_syntax(name: str, value: str) -> None:
    parse_protocol_map(value, name)


def _non_empty_entries(name: str, value: tuple[str, ...]) -> None:
    if any(item == "" for item in value):
        raise ConfigError.invalid(name, value, "Empty directory names are not allowed")


def _share_assignors(name: str, value: tuple[str, ...]) -> None:
    for item in value:
        if item not in _SIMPLE_ASSIGNOR_NAMES:
            raise ConfigError.invalid(name, item, "sharebroker supports only the built-in share group assignor: simple")


_GROUP_TYPES = ("classic", "consumer", "share", "streams")
_DEFAULT_PERSISTER = "org.apache.kafka.server.share.persister.DefaultStatePersister"


def _rebalance_protocols(name: str, value: tuple[str, ...]) -> None:
    """Kafka's KafkaConfig.groupCoordinatorRebalanceProtocols: known group types, classic always on."""
    for item in value:
        if item.lower() not in _GROUP_TYPES:
            raise ConfigError.invalid(name, item, f"String must be one of: {', '.join(_GROUP_TYPES)}")
    if "classic" not in (item.lower() for item in value):
        raise ConfigError(name, "Disabling the 'classic' protocol is not supported.")


def _share_persister(name: str, value: str | None) -> None:
    # "" is Kafka's no-op persister, used by some of Kafka's own tests; share state here is always
    # written to __share_group_state, which such a test cannot tell apart.
    if value not in ("", _DEFAULT_PERSISTER):
        raise ConfigError.invalid(name, value, f"sharebroker keeps share-group state with {_DEFAULT_PERSISTER} only")


_STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _authorizer_class(name: str, value: str | None) -> None:
    # Kafka 4 has only the KRaft StandardAuthorizer; the ZooKeeper-based AclAuthorizer is gone and
    # a 4.x broker fails to start with it (class not found): say what to use instead.
    if value and value.strip() != _STANDARD_AUTHORIZER:
        raise ConfigError.invalid(name, value, f"Class {value} cannot be found; sharebroker implements Kafka's "
                                  f"{_STANDARD_AUTHORIZER} (AclAuthorizer was removed with ZooKeeper in Kafka 4.0)")


def _broker_defs() -> list[ConfigDef]:
    d = ConfigDef
    return [
        # -- node, cluster, listeners -------------------------------------------------------------
        d("node.id", "int", 1, "The id of this node (broker.id is accepted as a synonym). sharebroker defaults to 1.",
          AtLeast(0)),
        d("broker.id", "int", -1, "Legacy name of node.id; if set, it must equal node.id."),
        d("cluster.id", "string", None, "sharebroker only: a fixed cluster id to report. When unset the broker uses "
          "the id stored in its log directory, creating one on first start."),
        d("metrics.listener", "string", None, "sharebroker only: HOST:PORT of the HTTP endpoint serving Prometheus "
          "metrics at /metrics (an empty host binds all interfaces, port 0 picks a free port). Unset or empty (the "
          "default), no metrics are kept.", _metrics_listener_syntax),
        d("admin.ui.write.enable", "boolean", False, "sharebroker only: let the live view on the metrics.listener "
          "endpoint reset share-group offsets and delete groups (with the CLI's rules: empty groups only). Off by "
          "default: the view is read-only."),
        d("worker.processes", "int", 1, "sharebroker only, experimental: serve from this many worker processes, each "
          "a broker of its own (node.id + i, listening on the first listener's port + i) owning some partitions and "
          "group coordinators, behind one supervisor. 1 (the default): one process, as always. See README "
          "'More than one core'.", Between(1, 16)),
        d("process.roles", "list", (), "The roles of this node (broker, controller)." + _COMPAT, ListOf("broker", "controller")),
        d("controller.quorum.voters", "list", (), "KRaft controller voters." + _COMPAT),
        d("controller.quorum.bootstrap.servers", "list", (), "KRaft controller bootstrap servers." + _COMPAT),
        d("controller.listener.names", "string", None, "Comma-separated names of controller listeners; listeners with "
          "these names are not served by sharebroker (it has no separate controller)."),
        d("listeners", "string", "PLAINTEXT://127.0.0.1:9092", "Comma-separated listener URIs NAME://host:port. An empty "
          "host binds all interfaces; port 0 picks a free port. Each listener's security protocol (PLAINTEXT, SSL, "
          "SASL_PLAINTEXT, SASL_SSL) comes from listener.security.protocol.map.",
          _listeners_syntax),
        d("advertised.listeners", "string", None, "Listener URIs given to clients in metadata; defaults to listeners. "
          "An empty host or port 0 is replaced by the broker with the bound address.", _listeners_syntax),
        d("listener.security.protocol.map", "string", "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
          "Map from listener name to security protocol, NAME:PROTOCOL pairs separated by commas.", _protocol_map_syntax),
        d("inter.broker.listener.name", "string", None, "Listener used between brokers." + _COMPAT),
        d("broker.rack", "string", None, "Rack of this node, reported to clients in Metadata and DescribeCluster."),
        d("auto.leader.rebalance.enable", "boolean", True, "Move leadership back to preferred replicas." + _COMPAT),
        d("controlled.shutdown.enable", "boolean", True, "Hand leadership over before shutting down." + _COMPAT),
        d("background.threads", "int", 10, "Background task threads." + _COMPAT, AtLeast(1)),
        d("replica.socket.timeout.ms", "int", 30000, "Socket timeout of replica fetchers." + _COMPAT),
        d("controller.socket.timeout.ms", "int", 30000, "Socket timeout of controller connections." + _COMPAT),
        d("replica.selector.class", "string", None, "Selects the replica a consumer fetches from." + _COMPAT),
        d("server.max.startup.time.ms", "long", LONG_MAX, "Longest a broker waits to catch up with the metadata log at "
          "start." + _COMPAT, AtLeast(0)),
        d("metadata.log.dir", "string", None, "Directory of the KRaft metadata log." + _COMPAT),
        d("unstable.api.versions.enable", "boolean", False, "Advertise API versions still under development. sharebroker "
          "serves only released versions, so there is nothing more to advertise."),
        d("unstable.feature.versions.enable", "boolean", False, "Allow feature levels still under development. sharebroker "
          "finalizes only released feature levels."),
        d("num.network.threads", "int", 3, "Network threads." + _COMPAT, AtLeast(1)),
        d("num.io.threads", "int", 8, "Request handler threads." + _COMPAT, AtLeast(1)),
        d("socket.send.buffer.bytes", "int", 102400, "SO_SNDBUF for client sockets; -1 uses the OS default."),
        d("socket.receive.buffer.bytes", "int", 102400, "SO_RCVBUF for client sockets; -1 uses the OS default."),
        d("socket.request.max.bytes", "int", 104857600, "Largest request frame accepted.", AtLeast(1)),
        d("connections.max.idle.ms", "long", 600000, "Idle connections are closed after this many milliseconds."),
        d("queued.max.request.bytes", "long", -1, "Bytes that partly received and queued large requests of all "
          "connections may hold together before no more is read from them (-1: no bound)."),
        d("max.connections", "int", 2147483647, "Most client connections open at once; a new connection above it "
          "is closed at once.", AtLeast(0)),
        d("max.connections.per.ip", "int", 2147483647, "Most connections from one IP address; a new connection "
          "above it is closed at once.", AtLeast(0)),
        d("max.connections.per.ip.overrides", "string", "", "Per-IP (or host name) limits overriding "
          "max.connections.per.ip, as ip:limit pairs separated by commas."),
        d("fetch.max.bytes", "int", 57671680, "Most bytes returned by one Fetch or ShareFetch response.", AtLeast(1024)),
        d("max.incremental.fetch.session.cache.slots", "int", 1000, "Most incremental fetch sessions kept.", AtLeast(0)),
        # -- logs ----------------------------------------------------------------------------------
        d("log.dirs", "list", None, "Directory holding the log data (sharebroker supports exactly one). Defaults to log.dir.",
          _non_empty_entries),
        d("log.dir", "list", ("/tmp/kafka-logs",), "Log directory used when log.dirs is not set.", _non_empty_entries),
        d("num.partitions", "int", 1, "Default number of partitions for auto-created topics and for CreateTopics "
          "with NumPartitions -1.", AtLeast(1)),
        d("default.replication.factor", "int", 1, "Default replication factor (a single node stores one replica)."),
        d("auto.create.topics.enable", "boolean", True, "Create a topic when a client asks for metadata of an unknown topic."),
        d("delete.topic.enable", "boolean", True, "Allow DeleteTopics."),
        d("num.recovery.threads.per.data.dir", "int", 2, "Log recovery threads." + _COMPAT, AtLeast(1)),
        d("log.segment.bytes", "int", 1073741824, "Maximum size of one log segment file.", AtLeast(1048576), dynamic=True),
        d("log.roll.ms", "long", None, "Roll a new segment after this many milliseconds; if unset log.roll.hours is used.",
          dynamic=True),
        d("log.roll.hours", "int", 168, "Roll a new segment after this many hours (used when log.roll.ms is unset).",
          AtLeast(1), dynamic=True),
        d("log.roll.jitter.ms", "long", None, "Most jitter subtracted from the roll time; if unset log.roll.jitter.hours is used."),
        d("log.roll.jitter.hours", "int", 0, "Most jitter subtracted from the roll time, in hours.", AtLeast(0)),
        d("log.retention.ms", "long", None, "Delete segments older than this many milliseconds; -1 keeps them forever. "
          "Takes precedence over log.retention.minutes and log.retention.hours.", dynamic=True),
        d("log.retention.minutes", "int", None, "Retention in minutes, used when log.retention.ms is unset.", dynamic=True),
        d("log.retention.hours", "int", 168, "Retention in hours, used when log.retention.ms and log.retention.minutes "
          "are unset.", dynamic=True),
        d("log.retention.bytes", "long", -1, "Delete old segments once a partition is larger than this; -1 means no size limit.",
          dynamic=True),
        d("log.retention.check.interval.ms", "long", 300000, "How often retention is checked.", AtLeast(1)),
        d("log.initial.task.delay.ms", "long", 30000, "Delay after start-up before the first retention check (then every "
          "log.retention.check.interval.ms).", AtLeast(0)),
        d("log.cleanup.policy", "list", ("delete",), "Default cleanup policy: delete and/or compact.",
          ListOf(*CLEANUP_POLICIES), dynamic=True),
        d("log.index.size.max.bytes", "int", 10485760, "Maximum size of an offset index file.", AtLeast(4)),
        d("log.index.interval.bytes", "int", 4096, "Bytes of log between offset index entries.", AtLeast(0)),
        d("log.flush.interval.messages", "long", LONG_MAX, "fsync a partition after this many appended messages "
          "(1 = fsync before acknowledging every append).", AtLeast(1), dynamic=True),
        d("log.flush.interval.ms", "long", None, "fsync a partition whose oldest unflushed message is this old; if unset "
          "log.flush.scheduler.interval.ms is used.", dynamic=True),
        d("log.flush.scheduler.interval.ms", "long", LONG_MAX, "How often the time-based flush check runs; also the "
          "flush interval when log.flush.interval.ms is unset."),
        d("log.open.files.budget", "int", -1, "sharebroker only: how many segment log files the broker keeps open "
          "at once (least recently used ones are closed and reopened on the next read or append; index files are "
          "opened per write). -1: half the open-file limit, the other half being for connections. Kafka keeps every "
          "segment open.", AtLeast(-1)),
        d("log.flush.offset.checkpoint.interval.ms", "int", 60000, "How often the recovery point is checkpointed.", AtLeast(0)),
        d("log.segment.delete.delay.ms", "long", 60000, "Delay before a deleted segment's files are removed.", AtLeast(0)),
        d("log.preallocate", "boolean", False, "Preallocate segment files."),
        d("log.message.timestamp.type", "string", "CreateTime", "Use the producer's timestamp (CreateTime) or the "
          "broker's append time (LogAppendTime).", OneOf(*TIMESTAMP_TYPES)),
        d("log.message.timestamp.before.max.ms", "long", LONG_MAX, "With CreateTime, reject records whose timestamp is "
          "more than this many ms before the broker's clock.", AtLeast(0)),
        d("log.message.timestamp.after.max.ms", "long", 3600000, "With CreateTime, reject records whose timestamp is "
          "more than this many ms after the broker's clock.", AtLeast(0)),
        d("log.cleaner.delete.retention.ms", "long", 86400000, "How long delete tombstones are kept in compacted topics.",
          AtLeast(0)),
        d("log.cleaner.min.compaction.lag.ms", "long", 0, "Minimum age of a record before it may be compacted.", AtLeast(0)),
        d("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, "Maximum time a record stays ineligible for compaction.",
          AtLeast(1)),
        d("log.cleaner.min.cleanable.ratio", "double", 0.5, "Minimum dirty ratio before a log is compacted.", Between(0, 1)),
        d("message.max.bytes", "int", 1048588, "Largest record batch accepted (after compression).", AtLeast(0), dynamic=True),
        d("compression.type", "string", "producer", "Compression of stored batches; 'producer' keeps what the producer sent.",
          OneOf(*COMPRESSION_TYPES)),
        d("compression.gzip.level", "int", -1, "gzip level when compression.type is gzip.", GZIP_LEVEL),
        d("compression.lz4.level", "int", 9, "lz4 level when compression.type is lz4.", Between(1, 17)),
        d("compression.zstd.level", "int", 3, "zstd level when compression.type is zstd.", Between(-131072, 22)),
        d("min.insync.replicas", "int", 1, "Replicas that must acknowledge an acks=all produce.", AtLeast(1)),
        d("unclean.leader.election.enable", "boolean", False, "Allow out-of-sync replicas to become leader."),
        d("log.unclean.leader.election.enable", "boolean", False, "Not a Kafka setting (Kafka warns and ignores it), but "
          "Kafka's own tests pass it; accepted and ignored."),
        d("log.cleaner.enable", "boolean", True, "Run the log cleaner, which compacts topics with "
          "cleanup.policy=compact in background processes; false: nothing is compacted (deprecated in Kafka, to "
          "be removed in 5.0)."),
        d("log.cleaner.threads", "int", 1, "How many logs are cleaned at once; each has its own cleaner process (the "
          "cleaning decodes every record, CPU work kept off the broker's event loop). 0: no cleaner.", AtLeast(0)),
        d("log.cleaner.dedupe.buffer.size", "long", 134217728, "Memory of the cleaners' key maps, shared by "
          "log.cleaner.threads; a round whose dirty keys do not fit stops where the map filled (the rest is cleaned "
          "next round). A key costs about 120 bytes plus its length here (24 in Kafka)."),
        d("log.cleaner.io.buffer.load.factor", "double", 0.9, "Fraction of the dedupe buffer a cleaning round fills."),
        d("log.cleaner.io.buffer.size", "int", 524288, "Kafka's cleaner I/O buffers; sharebroker's cleaner reads 4 MiB "
          "and writes 1 MiB at a time. Accepted and ignored.", AtLeast(0)),
        d("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308, "Read and write rate limit of each "
          "cleaner (bytes/s).", dynamic=True),
        d("log.cleaner.backoff.ms", "long", 15000, "How long a cleaner waits when no log needs cleaning.", AtLeast(0),
          dynamic=True),
        # -- classic, consumer and streams groups, offsets -----------------------------------------
        d("group.coordinator.rebalance.protocols", "list", ("classic", "consumer", "streams"), "The enabled rebalance "
          "protocols. Without 'consumer', ConsumerGroupHeartbeat and ConsumerGroupDescribe are answered UNSUPPORTED_VERSION "
          "(clients with group.protocol=consumer are told to revert to classic); 'classic' cannot be disabled; 'share' is "
          "deprecated in Kafka (share groups follow the share.version feature) and changes nothing.", _rebalance_protocols),
        d("group.coordinator.threads", "int", 4, "Group coordinator threads." + _COMPAT, AtLeast(1)),
        d("group.coordinator.append.linger.ms", "int", -1, "How long group coordinator writes wait to be batched. "
          "sharebroker appends each as soon as the previous one is written; accepted and ignored.", AtLeast(-1)),
        d("group.initial.rebalance.delay.ms", "int", 3000, "Delay before the first rebalance of a new classic group."),
        d("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout a classic group member may ask for."),
        d("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout a classic group member may ask for."),
        d("group.max.size", "int", INT_MAX, "Most members in a classic group.", AtLeast(1)),
        d("group.consumer.session.timeout.ms", "int", 45000, "Session timeout of consumer-protocol group members.", AtLeast(1)),
        d("group.consumer.min.session.timeout.ms", "int", 45000, "Lower bound for consumer.session.timeout.ms.", AtLeast(1)),
        d("group.consumer.max.session.timeout.ms", "int", 60000, "Upper bound for consumer.session.timeout.ms.", AtLeast(1)),
        d("group.consumer.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of consumer-protocol group members.",
          AtLeast(1)),
        d("group.consumer.min.heartbeat.interval.ms", "int", 5000, "Lower bound for consumer.heartbeat.interval.ms.", AtLeast(1)),
        d("group.consumer.max.heartbeat.interval.ms", "int", 15000, "Upper bound for consumer.heartbeat.interval.ms.", AtLeast(1)),
        # KIP-848 consumer groups (Kafka's GroupCoordinatorConfig; assignors by short or class name)
        d("group.consumer.max.size", "int", INT_MAX, "Most members in a consumer-protocol group.", AtLeast(1)),
        d("group.consumer.assignors", "list", ("uniform", "range"), "Server-side assignors of consumer groups; the "
          "first is the default.", ListOf("uniform", "range", "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
                                          "org.apache.kafka.coordinator.group.assignor.RangeAssignor")),
        d("group.consumer.assignment.interval.ms", "int", 1000, "Minimum time between assignment updates of a consumer "
          "group; default of consumer.assignment.interval.ms.", AtLeast(0), dynamic=True),
        d("group.consumer.min.assignment.interval.ms", "int", 0, "Lower bound for consumer.assignment.interval.ms.",
          AtLeast(0)),
        d("group.consumer.max.assignment.interval.ms", "int", 15000, "Upper bound for consumer.assignment.interval.ms.",
          AtLeast(0)),
        d("group.consumer.migration.policy", "string", "bidirectional", "Whether non-empty classic groups are upgraded "
          "to consumer groups and back: disabled, downgrade, upgrade or bidirectional.",
          OneOf("disabled", "downgrade", "upgrade", "bidirectional")),
        d("group.consumer.regex.refresh.interval.ms", "int", 600000, "How often regular-expression subscriptions are "
          "resolved again. sharebroker resolves them at every group epoch and topic change, so new topics are seen at "
          "once; accepted and ignored.", AtLeast(1)),
        d("group.streams.max.size", "int", INT_MAX, "Most members in a streams group (streams groups are not served).",
          AtLeast(1)),
        d("group.streams.session.timeout.ms", "int", 45000, "Session timeout of streams group members.", AtLeast(1)),
        d("group.streams.min.session.timeout.ms", "int", 45000, "Lower bound for streams.session.timeout.ms.", AtLeast(1)),
        d("group.streams.max.session.timeout.ms", "int", 60000, "Upper bound for streams.session.timeout.ms.", AtLeast(1)),
        d("group.streams.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of streams group members.", AtLeast(1)),
        d("group.streams.min.heartbeat.interval.ms", "int", 5000, "Lower bound for streams.heartbeat.interval.ms.", AtLeast(1)),
        d("group.streams.max.heartbeat.interval.ms", "int", 15000, "Upper bound for streams.heartbeat.interval.ms.", AtLeast(1)),
        d("group.streams.num.standby.replicas", "int", 0, "Standby replicas per streams task.", AtLeast(0)),
        d("group.streams.max.standby.replicas", "int", 2, "Upper bound for streams.num.standby.replicas.", AtLeast(0)),
        d("group.streams.initial.rebalance.delay.ms", "int", 3000, "Delay before the first rebalance of a new streams group.",
          AtLeast(0)),
        d("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets.", AtLeast(1)),
        d("offsets.topic.replication.factor", "short", 3, "Replication factor of __consumer_offsets." + _COMPAT, AtLeast(1)),
        d("offsets.topic.segment.bytes", "int", 104857600, "Segment size of __consumer_offsets.", AtLeast(1)),
        d("offsets.retention.minutes", "int", 10080, "How long committed offsets of an empty group are kept.", AtLeast(1)),
        d("offsets.retention.check.interval.ms", "long", 600000, "How often stale offsets are looked for.", AtLeast(1)),
        d("offsets.load.buffer.size", "int", 5242880, "Read batch size when loading __consumer_offsets.", AtLeast(1)),
        d("offsets.topic.compression.codec", "int", 0, "Compression codec of __consumer_offsets records; sharebroker "
          "writes them uncompressed.", Between(0, 4)),
        d("offsets.commit.timeout.ms", "int", 5000, "How long a coordinator write may wait.", AtLeast(1)),
        d("offset.metadata.max.bytes", "int", 4096, "Largest metadata string of a committed offset."),
        # -- producers and transactions ------------------------------------------------------------
        d("producer.id.expiration.ms", "int", 86400000, "Forget an idle producer id's state after this long.", AtLeast(1)),
        d("transactional.id.expiration.ms", "int", 604800000, "Expire an idle transactional id after this long.", AtLeast(1)),
        d("transaction.max.timeout.ms", "int", 900000, "Largest transaction timeout a producer may ask for.", AtLeast(1)),
        d("transaction.state.log.num.partitions", "int", 50, "Partitions of __transaction_state.", AtLeast(1)),
        d("transaction.state.log.replication.factor", "short", 3, "Replication factor of __transaction_state." + _COMPAT,
          AtLeast(1)),
        d("transaction.state.log.min.isr", "int", 2, "min.insync.replicas of __transaction_state." + _COMPAT, AtLeast(1)),
        d("transaction.state.log.segment.bytes", "int", 104857600, "Segment size of __transaction_state.", AtLeast(1)),
        d("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
          "How often transactions past their timeout are looked for and aborted.", AtLeast(1)),
        d("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
          "How often transactional ids idle past transactional.id.expiration.ms are removed.", AtLeast(1)),
        d("transaction.partition.verification.enable", "boolean", True,
          "Refuse a transactional write to a partition the producer has not added to its transaction."),
        # -- share groups --------------------------------------------------------------------------
        d("group.share.enable", "boolean", False, "Kafka's internal switch for share groups, used by its tests. Share "
          "groups follow the share.version feature, finalized on every sharebroker, so they are on either way."),
        d("group.share.persister.class.name", "string", _DEFAULT_PERSISTER, "The share-group state persister: Kafka's "
          "DefaultStatePersister (or empty, Kafka's no-op persister, accepted); state is always kept in __share_group_state.",
          _share_persister),
        d("group.share.max.size", "int", 200, "Most members in one share group.", Between(1, 1000)),
        d("group.share.session.timeout.ms", "int", 45000, "Session timeout of share group members; default of "
          "share.session.timeout.ms.", AtLeast(1)),
        d("group.share.min.session.timeout.ms", "int", 45000, "Lower bound for share.session.timeout.ms.", AtLeast(1)),
        d("group.share.max.session.timeout.ms", "int", 60000, "Upper bound for share.session.timeout.ms.", AtLeast(1)),
        d("group.share.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of share group members; default of "
          "share.heartbeat.interval.ms.", AtLeast(1)),
        d("group.share.min.heartbeat.interval.ms", "int", 5000, "Lower bound for share.heartbeat.interval.ms.", AtLeast(1)),
        d("group.share.max.heartbeat.interval.ms", "int", 15000, "Upper bound for share.heartbeat.interval.ms.", AtLeast(1)),
        d("group.share.assignors", "list", ("simple",), "Server-side share group assignor; exactly one entry, and only the "
          "built-in 'simple' assignor is available.", _share_assignors),
        d("group.share.assignment.interval.ms", "int", 1000, "Minimum time between assignment updates of a share group; "
          "default of share.assignment.interval.ms.", AtLeast(0), dynamic=True),
        d("group.share.min.assignment.interval.ms", "int", 0, "Lower bound for share.assignment.interval.ms.", AtLeast(0)),
        d("group.share.max.assignment.interval.ms", "int", 15000, "Upper bound for share.assignment.interval.ms.", AtLeast(0)),
        d("group.share.initialize.retry.interval.ms", "int", 30000, "Wait before retrying a failed share-partition state "
          "initialization (at least offsets.commit.timeout.ms).", AtLeast(1)),
        d("group.share.record.lock.duration.ms", "int", 30000, "How long an acquired record stays locked to one consumer; "
          "default of share.record.lock.duration.ms.", Between(1000, 3600000)),
        d("group.share.min.record.lock.duration.ms", "int", 15000, "Lower bound for share.record.lock.duration.ms.",
          Between(1000, 30000)),
        d("group.share.max.record.lock.duration.ms", "int", 60000, "Upper bound for share.record.lock.duration.ms.",
          Between(30000, 3600000)),
        d("group.share.delivery.count.limit", "int", 5, "Deliveries after which a record is archived; default of "
          "share.delivery.count.limit.", Between(2, 10)),
        d("group.share.min.delivery.count.limit", "int", 2, "Lower bound for share.delivery.count.limit.", Between(2, 5)),
        d("group.share.max.delivery.count.limit", "int", 10, "Upper bound for share.delivery.count.limit.", Between(5, 25)),
        d("group.share.partition.max.record.locks", "int", 2000, "Most in-flight (acquired or available) records per share "
          "partition; default of share.partition.max.record.locks.", Between(100, 10000)),
        d("group.share.min.partition.max.record.locks", "int", 100, "Lower bound for share.partition.max.record.locks.",
          Between(100, 10000)),
        d("group.share.max.partition.max.record.locks", "int", 4000, "Upper bound for share.partition.max.record.locks.",
          Between(100, 10000)),
        d("errors.deadletterqueue.auto.create.topics.enable", "boolean", False, "Create a share group's dead-letter "
          "queue topic (with errors.deadletterqueue.group.enable=true) on its first write when it does not exist.",
          dynamic=True),
        d("errors.deadletterqueue.topic.name.prefix", "string", "dlq.", "The prefix every share-group dead-letter queue "
          "topic name must start with; empty means any name.", dynamic=True),
        d("group.share.max.share.sessions", "int", 2000, "Most share sessions cached by this broker.", AtLeast(1)),
        d("share.fetch.purgatory.purge.interval.requests", "int", 1000, "Purge interval (in requests) of waiting ShareFetch "
          "requests."),
        # -- share coordinator ---------------------------------------------------------------------
        d("share.coordinator.state.topic.num.partitions", "int", 50, "Partitions of __share_group_state.", AtLeast(1)),
        d("share.coordinator.state.topic.replication.factor", "short", 3, "Replication factor of __share_group_state; "
          "a single node keeps one copy whatever this says.", AtLeast(1)),
        d("share.coordinator.state.topic.min.isr", "short", 2, "min.insync.replicas of __share_group_state." + _COMPAT,
          AtLeast(1)),
        # Kafka declares at least 1, but the topic it creates must pass segment.bytes' own minimum
        # of 1 MiB; refusing it at start-up beats a state topic that can never be created.
        d("share.coordinator.state.topic.segment.bytes", "int", 104857600, "Segment size of __share_group_state "
          "(at least 1048576, the minimum of segment.bytes).", AtLeast(1048576)),
        d("share.coordinator.state.topic.compression.codec", "int", 0, "Compression codec of __share_group_state "
          "records; sharebroker writes them uncompressed.", Between(0, 4)),
        d("share.coordinator.threads", "int", 1, "Share coordinator threads." + _COMPAT, AtLeast(1)),
        d("share.coordinator.snapshot.update.records.per.snapshot", "int", 500, "Update records written for a share "
          "partition between two snapshots.", Between(0, 500)),
        d("share.coordinator.write.timeout.ms", "int", 5000, "How long a share-state write may wait.", AtLeast(1)),
        d("share.coordinator.load.buffer.size", "int", 5242880, "Read batch size when loading share state.", AtLeast(1)),
        d("share.coordinator.append.linger.ms", "int", -1, "How long share-state writes wait to be batched; -1 adapts to load.",
          AtLeast(-1)),
        d("share.coordinator.state.topic.prune.interval.ms", "int", 300000, "How often records below the latest snapshots "
          "are pruned from __share_group_state.", AtLeast(1)),
        d("share.coordinator.cold.partition.snapshot.interval.ms", "int", 300000, "Snapshot share partitions with no "
          "recent update this often, so older records can be pruned.", AtLeast(1)),
        # -- authorization and quotas ----------------------------------------------------------------
        d("authorizer.class.name", "string", "", "The authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer "
          "turns ACLs on (stored in the log directory, managed with CreateAcls/DeleteAcls). Empty (the default): "
          "every request is allowed and the ACL APIs answer SECURITY_DISABLED.", _authorizer_class),
        d("super.users", "string", None, "Principals allowed everything whatever the ACLs, separated by semicolons: "
          "User:admin;User:alice."),
        d("quota.window.num", "int", 11, "Samples kept to measure client quota rates.", AtLeast(1)),
        d("quota.window.size.seconds", "int", 1, "Time span of each client quota sample.", AtLeast(1)),
        d("allow.everyone.if.no.acl.found", "boolean", False, "With an authorizer, allow an operation on a resource "
          "no ACL mentions at all (otherwise only super users may)."),
    ]


BROKER_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in (*_broker_defs(), *security_defs())}

# Broker names that resolve together (Kafka's brokerConfigSynonyms), most specific first.
BROKER_SYNONYM_GROUPS: dict[str, tuple[str, ...]] = {
    name: group
    for group in (
        ("log.roll.ms", "log.roll.hours"),
        ("log.roll.jitter.ms", "log.roll.jitter.hours"),
        ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    )
    for name in group
}
# Only log.flush.interval.ms falls back to the scheduler interval, not the other way round.
BROKER_SYNONYM_GROUPS["log.flush.interval.ms"] = ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")
