"""A small blocking Kafka wire client for the command-line tools: kio frames over TCP sockets.

It talks to any Kafka-compatible broker (this one or Apache Kafka): every connection starts with
ApiVersions and each request is sent at the highest version both sides (and kio) know, within the
range these tools were written for. Requests are plain dicts turned into kio entities with
`protocol.codec.build`, so one dict shape serves every version (fields a version lacks are dropped);
headers, framing and correlation ids are the sans-I/O codec's (protocol/client.py).
"""

from __future__ import annotations

import ast
import base64
import inspect
import itertools
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from kio.index import load_request_schema
from kio.schema.api_versions.v0 import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v3 import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.static.protocol import RequestPayload

from sharebroker.protocol.client import ClientCodec, ResponseFrameError
from sharebroker.protocol.codec import build
from sharebroker.protocol.errors import KafkaError

if TYPE_CHECKING:
    from sharebroker.cli.client_security import ClientSecurity

# Versions the tools speak: (lowest, highest). The request shapes below were written for them.
TOOL_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 9),     # Produce
    1: (4, 12),    # Fetch (v13+ switches to topic ids)
    2: (1, 7),     # ListOffsets
    3: (1, 12),    # Metadata (topic ids from v10)
    8: (2, 8),     # OffsetCommit
    9: (1, 8),     # OffsetFetch (v8 batches groups)
    10: (1, 4),    # FindCoordinator (v4 batches keys)
    11: (2, 7),    # JoinGroup
    12: (0, 4),    # Heartbeat
    13: (0, 4),    # LeaveGroup
    14: (0, 5),    # SyncGroup
    15: (0, 5),    # DescribeGroups
    16: (0, 5),    # ListGroups (states v4, types v5)
    17: (1, 1),    # SaslHandshake (SASL listeners, --command-config)
    18: (3, 4),    # ApiVersions (`features describe`: supported and finalized features)
    19: (2, 7),    # CreateTopics
    20: (1, 6),    # DeleteTopics
    27: (1, 2),    # WriteTxnMarkers (`transactions abort`)
    29: (1, 3),    # DescribeAcls
    30: (1, 3),    # CreateAcls
    31: (1, 3),    # DeleteAcls
    32: (1, 4),    # DescribeConfigs
    36: (0, 2),    # SaslAuthenticate
    37: (0, 3),    # CreatePartitions
    42: (0, 2),    # DeleteGroups
    44: (0, 1),    # IncrementalAlterConfigs
    47: (0, 0),    # OffsetDelete
    48: (0, 1),    # DescribeClientQuotas
    49: (0, 1),    # AlterClientQuotas
    50: (0, 0),    # DescribeUserScramCredentials
    51: (0, 0),    # AlterUserScramCredentials
    57: (1, 1),    # UpdateFeatures (`features upgrade|downgrade`)
    61: (0, 0),    # DescribeProducers
    65: (0, 0),    # DescribeTransactions
    66: (0, 2),    # ListTransactions (v1 duration filter, v2 transactional id pattern)
    69: (0, 1),    # ConsumerGroupDescribe
    74: (0, 1),    # ListConfigResources (v0 lists client metrics resources only)
    76: (1, 1),    # ShareGroupHeartbeat
    77: (1, 1),    # ShareGroupDescribe
    78: (1, 1),    # ShareFetch
    79: (1, 2),    # ShareAcknowledge (v2: RENEW, KIP-1222)
    90: (0, 1),    # DescribeShareGroupOffsets
    91: (0, 0),    # AlterShareGroupOffsets
    92: (0, 0),    # DeleteShareGroupOffsets
}


def api_display_name(key: int) -> str:
    name = api_key_map.get(key)
    return "".join(p.capitalize() for p in name.split("_")) if name else f"api {key}"


# ------------------------------------------------------------------------------------------
# Errors


class ToolError(Exception):
    """A failure to report on stderr; `exit_code` is the process exit status."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class KafkaApiError(KafkaError, ToolError):
    """An error code in a response: the one Kafka error type (its `code`), reported as a tool
    error with what the tool was doing as context."""

    def __init__(self, code: int, message: str | None = None, context: str = "") -> None:
        text = error_message(code, message)
        super().__init__(ErrorCode(int(code)), f"{context}{text}" if context else text)  # then ToolError's
        self.broker_message = message

    @property
    def name(self) -> str:
        return self.code.name.upper()


class UnreachableError(ToolError):
    reason = ""


_ERROR_DOCS: dict[str, str] | None = None


def _error_docs() -> dict[str, str]:
    """Kafka's text for each error code (kio keeps it as attribute docstrings of ErrorCode)."""
    global _ERROR_DOCS
    if _ERROR_DOCS is None:
        docs: dict[str, str] = {}
        try:
            import kio.schema.errors as mod

            tree = ast.parse(inspect.getsource(mod))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name == "ErrorCode":
                    body = node.body
                    for a, b in itertools.pairwise(body):
                        if (isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
                                and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)
                                and isinstance(b.value.value, str)):
                            docs[a.targets[0].id] = " ".join(b.value.value.split())
        except (OSError, SyntaxError, TypeError):
            pass
        _ERROR_DOCS = docs
    return _ERROR_DOCS


def error_message(code: int, message: str | None = None) -> str:
    """The broker's message if it sent one, else Kafka's description of the code."""
    if message:
        return message
    try:
        ec = ErrorCode(int(code))
    except ValueError:
        return f"Unknown error code {code}."
    return _error_docs().get(ec.name) or ec.name.upper()


def code_of(value: Any) -> int:
    return int(value) if value is not None else 0


EXCEPTION_NAMES = {
    ErrorCode.non_empty_group: "GroupNotEmptyException",
    ErrorCode.group_id_not_found: "GroupIdNotFoundException",
    ErrorCode.invalid_group_id: "InvalidGroupIdException",
    ErrorCode.group_authorization_failed: "GroupAuthorizationException",
    ErrorCode.unknown_topic_or_partition: "UnknownTopicOrPartitionException",
    ErrorCode.topic_authorization_failed: "TopicAuthorizationException",
    ErrorCode.cluster_authorization_failed: "ClusterAuthorizationException",
    ErrorCode.invalid_config: "InvalidConfigurationException",
    ErrorCode.invalid_topic_exception: "InvalidTopicException",
    ErrorCode.unknown_server_error: "UnknownServerException",
}


def exception_text(code: int, message: str | None) -> str:
    """How Kafka's tools print a failed future: ExceptionClass: message."""
    try:
        ec = ErrorCode(int(code))
        name = EXCEPTION_NAMES.get(ec) or "".join(w.capitalize() for w in ec.name.split("_")) + "Exception"
    except ValueError:
        name = "KafkaException"
    return f"{name}: {error_message(code, message)}"


# ------------------------------------------------------------------------------------------
# Ids


def topic_id_text(tid: uuid.UUID | None) -> str:
    """Kafka's printed form of a topic id: url-safe base64 without padding."""
    if tid is None:
        return "AAAAAAAAAAAAAAAAAAAAAA"
    return base64.urlsafe_b64encode(tid.bytes).decode().rstrip("=")


def new_member_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


# ------------------------------------------------------------------------------------------
# Connections


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    out = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ToolError(f"Invalid bootstrap server address '{item}': expected host:port", 2)
        out.append((host.strip("[]") or "localhost", int(port)))
    if not out:
        raise ToolError("--bootstrap-server must name at least one host:port", 2)
    return out


class Connection:
    """One TCP connection with its ApiVersions table; requests are strictly sequential. With
    `security`, TLS and SASL as its protocol says (authenticated before the constructor returns)."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout: float, node_id: int | None = None,
                 security: ClientSecurity | None = None) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self.client_id = client_id
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if security is not None:
            self.sock = security.wrap(self.sock, host)
        self.codec = ClientCodec(client_id)
        self.versions: dict[int, tuple[int, int]] = {}
        try:
            self._handshake()
            if security is not None:
                security.authenticate(self.request)
        except BaseException:
            self.close()
            raise

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- framing (the codec does it; this moves the bytes)
    def _roundtrip(self, req: RequestPayload, timeout: float | None, expect_response: bool = True) -> Any:
        corr, frame = self.codec.encode(req, expect_response=expect_response)
        wait = self.timeout if timeout is None else timeout
        self.sock.settimeout(wait)
        self.sock.sendall(frame)
        if not expect_response:
            return None
        deadline = time.monotonic() + wait
        try:
            while (response := self.codec.next_response()) is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"timed out waiting for a response from {self.address}")
                self.sock.settimeout(remaining)
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    raise ConnectionError(f"connection to {self.address} closed by the broker")
                self.codec.receive(chunk)
        except ResponseFrameError as exc:
            raise ConnectionError(f"{exc} from {self.address}") from None
        got, body = response
        if got != corr:  # requests are sequential: an earlier one's response would be out of step
            raise ConnectionError(f"correlation id {got} from {self.address}, expected {corr}")
        return body

    def _handshake(self) -> None:
        # The codec reads an old broker's UNSUPPORTED_VERSION answer in the v0 shape.
        resp = self._roundtrip(ApiVersionsRequestV3(client_software_name="sharebroker-cli",
                                                    client_software_version="1.0"), None)
        if int(resp.error_code) != 0:
            # An old broker: ask again with v0 on this connection.
            resp = self._roundtrip(ApiVersionsRequestV0(), None)
            if int(resp.error_code) != 0:
                raise KafkaApiError(resp.error_code, None, f"ApiVersions to {self.address} failed: ")
        self.versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}

    # -- versioned requests
    def version_for(self, key: int, max_version: int | None = None, min_version: int | None = None) -> int:
        lo, hi = TOOL_VERSIONS[key]
        if max_version is not None:
            hi = min(hi, max_version)
        if min_version is not None:
            lo = max(lo, min_version)
        broker = self.versions.get(key)
        if broker is None:
            raise ToolError(f"The broker at {self.address} does not support {api_display_name(key)} "
                            f"(API key {key}).")
        kio_versions = sorted(schema_name_map[api_key_map[key]])
        hi = min(hi, broker[1], kio_versions[-1])
        lo = max(lo, broker[0], kio_versions[0])
        if lo > hi:
            need = TOOL_VERSIONS[key]
            raise ToolError(f"The broker at {self.address} supports {api_display_name(key)} versions "
                            f"{broker[0]}-{broker[1]}; these tools need {need[0]}-{need[1]}.")
        return hi

    def supports(self, key: int, min_version: int = 0) -> bool:
        try:
            return self.version_for(key, min_version=min_version) >= min_version
        except ToolError:
            return False

    def request(self, key: int, data: dict[str, Any], *, timeout: float | None = None,
                max_version: int | None = None, min_version: int | None = None, expect_response: bool = True) -> Any:
        version = self.version_for(key, max_version, min_version)
        req = build(load_request_schema(key, version), data)
        return self._roundtrip(req, timeout, expect_response)

    def request_v(self, key: int, data: dict[str, Any], **kwargs: Any) -> tuple[int, Any]:
        """Like request, also returning the version used."""
        version = self.version_for(key, kwargs.get("max_version"), kwargs.get("min_version"))
        req = build(load_request_schema(key, version), data)
        return version, self._roundtrip(req, kwargs.get("timeout"))


# ------------------------------------------------------------------------------------------
# Cluster view


@dataclass
class PartitionInfo:
    index: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    error: int


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID | None
    internal: bool
    error: int
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


@dataclass
class Node:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class Client:
    """Bootstrap, metadata, and a connection per broker. `timeout_ms` bounds connecting to the
    cluster and every request."""

    def __init__(self, bootstrap: str, *, timeout_ms: int = 30000, client_id: str = "sharebroker-cli",
                 security: ClientSecurity | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.security = security
        self.timeout = max(0.001, timeout_ms / 1000.0)
        self.timeout_ms = timeout_ms
        self.client_id = client_id
        self.nodes: dict[int, Node] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        self._boot: Connection | None = None
        self._conns: dict[int, Connection] = {}

    # -- connections
    def _connect(self, host: str, port: int, node_id: int | None, deadline: float) -> Connection:
        delay = 0.05
        last: Exception | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                return Connection(host, port, client_id=self.client_id, timeout=min(self.timeout, max(remaining, 0.05)),
                                  node_id=node_id, security=self.security)
            except KafkaApiError:
                raise
            except (TimeoutError, OSError, ConnectionError) as exc:
                last = exc
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 1.0)
        unreachable = UnreachableError(f"Cannot reach broker {host}:{port} within {self.timeout_ms} ms"
                                       + (f" ({_os_reason(last)})." if last else "."))
        unreachable.reason = _os_reason(last)
        raise unreachable

    def boot(self) -> Connection:
        if self._boot is None:
            deadline = time.monotonic() + self.timeout
            reasons: dict[str, str] = {}
            # Try every bootstrap address in turn until one answers or the deadline passes.
            while self._boot is None:
                for host, port in self.bootstrap:
                    share = max(0.2, (deadline - time.monotonic()) / len(self.bootstrap))
                    try:
                        self._boot = self._connect(host, port, None, min(deadline, time.monotonic() + share))
                        break
                    except UnreachableError as exc:
                        reasons[f"{host}:{port}"] = exc.reason
                if self._boot is None and time.monotonic() >= deadline:
                    detail = "; ".join(f"{a}: {r}" if r else a for a, r in reasons.items())
                    raise UnreachableError(f"Cannot reach any broker within {self.timeout_ms} ms ({detail}).")
        return self._boot

    def conn(self, node_id: int) -> Connection:
        c = self._conns.get(node_id)
        if c is not None:
            return c
        node = self.nodes.get(node_id)
        if node is None:
            self.metadata([])
            node = self.nodes.get(node_id)
            if node is None:
                raise ToolError(f"Broker {node_id} is not in the cluster metadata.")
        b = self.boot()
        if b.node_id is None and (b.host, b.port) == (node.host, node.port):
            b.node_id = node_id
        if b.node_id == node_id:
            self._conns[node_id] = b
            return b
        c = self._connect(node.host, node.port, node_id, time.monotonic() + self.timeout)
        self._conns[node_id] = c
        return c

    def conn_to(self, node: Node) -> Connection:
        self.nodes.setdefault(node.node_id, node)
        return self.conn(node.node_id)

    def drop(self, node_id: int) -> None:
        c = self._conns.pop(node_id, None)
        if c is not None:
            if c is self._boot:
                self._boot = None
            c.close()

    def close(self) -> None:
        for c in list(self._conns.values()):
            c.close()
        if self._boot is not None:
            self._boot.close()
        self._conns.clear()
        self._boot = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, key: int, data: dict[str, Any], **kwargs: Any) -> Any:
        """A request to any broker (the bootstrap connection)."""
        return self.boot().request(key, data, **kwargs)

    # -- metadata
    def metadata(self, topics: list[str] | None, *, allow_auto: bool = False) -> dict[str, TopicInfo]:
        """Metadata for `topics` (None = all topics). Updates the broker list."""
        conn = self.boot()
        data = {"topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
                "allow_auto_topic_creation": allow_auto, "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}
        resp = conn.request(3, data)
        self.nodes = {int(b.node_id): Node(int(b.node_id), b.host, int(b.port)) for b in resp.brokers}
        if conn.node_id is None:
            for n in self.nodes.values():
                if (n.host, n.port) == (conn.host, conn.port):
                    conn.node_id = n.node_id
                    self._conns.setdefault(n.node_id, conn)
        self.controller_id = int(getattr(resp, "controller_id", -1))
        self.cluster_id = getattr(resp, "cluster_id", None)
        out: dict[str, TopicInfo] = {}
        for t in resp.topics:
            info = TopicInfo(t.name, getattr(t, "topic_id", None), bool(getattr(t, "is_internal", False)),
                             code_of(t.error_code))
            for p in t.partitions:
                info.partitions[int(p.partition_index)] = PartitionInfo(
                    int(p.partition_index), int(p.leader_id), int(getattr(p, "leader_epoch", -1)),
                    [int(r) for r in p.replica_nodes], [int(r) for r in p.isr_nodes], code_of(p.error_code))
            out[t.name] = info
        return out

    def topic(self, name: str, *, allow_auto: bool = False) -> TopicInfo:
        """Metadata of one existing topic, or ToolError "Topic 'x' does not exist"."""
        deadline = time.monotonic() + self.timeout
        while True:
            info = self.metadata([name], allow_auto=allow_auto).get(name)
            code = info.error if info is not None else ErrorCode.unknown_topic_or_partition
            if code == 0 and info is not None and info.partitions:
                return info
            if code in (ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition) and allow_auto \
                    and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            if code in (ErrorCode.unknown_topic_or_partition, 0):
                raise ToolError(f"Topic '{name}' does not exist.")
            if code == ErrorCode.invalid_topic_exception:
                raise ToolError(f"Topic name '{name}' is not valid.")
            raise KafkaApiError(code, None, f"Cannot get metadata for topic '{name}': ")

    # -- groups
    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None) -> list[tuple[Connection, int, Any]]:
        """ListGroups on every broker, as Admin.listGroups asks each one: (connection, version,
        response) per broker, each without a top-level error."""
        self.metadata([])
        answers = []
        for node_id in sorted(self.nodes):
            conn = self.conn(node_id)
            version, resp = conn.request_v(16, {"states_filter": states or [], "types_filter": types or []})
            if code_of(resp.error_code):
                raise KafkaApiError(resp.error_code, None, "ListGroups failed: ")
            answers.append((conn, version, resp))
        return answers

    # -- coordinators
    def find_coordinator(self, key: str, key_type: int = 0) -> Node:
        """The coordinator of a group (key_type 0); retries while it is not available."""
        deadline = time.monotonic() + self.timeout
        while True:
            conn = self.boot()
            version, resp = conn.request_v(10, {"key": key, "key_type": key_type, "coordinator_keys": [key]})
            if version >= 4:
                (c,) = resp.coordinators
                code, msg, node = code_of(c.error_code), c.error_message, Node(int(c.node_id), c.host, int(c.port))
            else:
                code, msg = code_of(resp.error_code), getattr(resp, "error_message", None)
                node = Node(int(resp.node_id), resp.host, int(resp.port))
            if code == 0:
                self.nodes.setdefault(node.node_id, node)
                return node
            if code in (ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
                        ErrorCode.not_coordinator) and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            raise KafkaApiError(code, msg, f"Cannot find the coordinator of group '{key}': ")

    def coordinator_conn(self, group: str) -> tuple[Node, Connection]:
        node = self.find_coordinator(group)
        return node, self.conn_to(node)

    # -- offsets
    def list_offsets(self, partitions: dict[str, list[int]], timestamp: int, topics: dict[str, TopicInfo] | None = None
                     ) -> dict[tuple[str, int], tuple[int, int]]:
        """{(topic, partition): (error code, offset)} for a ListOffsets timestamp (-2 earliest,
        -1 latest, or milliseconds), each partition asked of its leader."""
        if topics is None:
            topics = self.metadata(sorted(partitions))
        by_leader: dict[int, dict[str, list[int]]] = {}
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for name, parts in partitions.items():
            info = topics.get(name)
            for p in parts:
                pinfo = info.partitions.get(p) if info else None
                if pinfo is None:
                    out[(name, p)] = (int(ErrorCode.unknown_topic_or_partition), -1)
                elif pinfo.leader < 0:
                    out[(name, p)] = (int(ErrorCode.leader_not_available), -1)
                else:
                    by_leader.setdefault(pinfo.leader, {}).setdefault(name, []).append(p)
        for leader, tparts in by_leader.items():
            resp = self.conn(leader).request(2, {
                "replica_id": -1, "isolation_level": 0,
                "topics": [{"name": n, "partitions": [{"partition_index": p, "timestamp": timestamp,
                                                       "current_leader_epoch": -1, "max_num_offsets": 1}
                                                      for p in ps]} for n, ps in tparts.items()]})
            for t in resp.topics:
                for p in t.partitions:
                    offset = int(getattr(p, "offset", -1))
                    out[(t.name, int(p.partition_index))] = (code_of(p.error_code), offset)
        return out


def _os_reason(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
