"""The Prometheus endpoint (`metrics.listener`): GET /metrics in the text exposition format, served on
the broker's own event loop, and the collector that builds the metric families at scrape time.

Names are Kafka's metrics as the Prometheus JMX exporter's Kafka configuration turns them into
Prometheus names (lowercased, `kafka_<domain>_<type>_<name>`, a Yammer meter `FooPerSec` as the
counter `foo_total`, a histogram as a Prometheus histogram, tags as labels), so dashboards written
for a Kafka broker find the same series here. The README lists them. Only imported when metrics are
on, so prometheus_client costs nothing at start-up otherwise."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Iterator
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR
from prometheus_client.exposition import choose_encoder
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from sharebroker.broker.admin_view import AdminView
from sharebroker.broker.metrics import ACK_TYPE_NAMES, Histogram, MetricsRecorder
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.api_table import api_name

if TYPE_CHECKING:
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.metrics")

_SHARE_STATES = ("Empty", "Stable", "Dead")
_CONSUMER_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")
_CLASSIC_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
_REQUEST_HEAD_LIMIT = 16 * 1024
_REQUEST_TIMEOUT_S = 10.0


def _counter(name: str, doc: str, labels: Iterable[str], values: Iterable[tuple[tuple[str, ...], float]]) -> Metric:
    family = CounterMetricFamily(name, doc, labels=list(labels))
    for label_values, value in values:
        family.add_metric(list(label_values), value)
    return family


def _gauge(name: str, doc: str, labels: Iterable[str], values: Iterable[tuple[tuple[str, ...], float]]) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    for label_values, value in values:
        family.add_metric(list(label_values), value)
    return family


def _histogram(name: str, doc: str, labels: list[str], items: Iterable[tuple[tuple[str, ...], Histogram]]) -> Metric:
    family = HistogramMetricFamily(name, doc, labels=labels)
    for label_values, hist in items:
        family.add_metric(list(label_values), hist.cumulative(), hist.sum)
    return family


class BrokerCollector(Collector):
    """Counters from the recorder, gauges from the broker's state, both read at scrape time on the
    event loop (so they see one consistent state, and nothing is locked)."""

    def __init__(self, broker: Broker, recorder: MetricsRecorder) -> None:
        self.broker = broker
        self.recorder = recorder

    def collect(self) -> Iterator[Metric]:
        yield from self._requests()  # the recorder folds its slots when the counts are read
        yield from self._topics()
        yield from self._logs()
        yield from self._connections()
        yield from self._groups()
        yield from self._share()

    def _requests(self) -> Iterator[Metric]:
        r = self.recorder
        yield _counter("kafka_network_requestmetrics_requests", "Requests received (RequestsPerSec).",
                       ["request", "version"],
                       (((api_name(k), str(v)), n) for (k, v), n in sorted(r.requests.items())))
        yield _histogram("kafka_network_requestmetrics_totaltimems",
                         "Time from a request's arrival to its encoded response, in ms (TotalTimeMs).", ["request"],
                         (((api_name(k),), h) for k, h in sorted(r.latency.items())))
        yield _counter("kafka_network_requestmetrics_errors",
                       "Responses by top-level error code, NONE included (ErrorsPerSec).", ["request", "error"],
                       (((api_name(k), e), n) for (k, e), n in sorted(r.errors.items())))

    def _moved(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """Per topic with any: records and bytes appended by producers, and bytes answered to
        Fetch (the recorder's) and ShareFetch (counted on the partitions)."""
        messages_in: dict[str, int] = {}
        bytes_in: dict[str, int] = {}
        bytes_out = dict(self.recorder.bytes_out)
        for p in self.broker.topics.all_partitions():
            if p.messages_in or p.bytes_out:
                name = p.topic.name
                if p.messages_in:
                    messages_in[name] = messages_in.get(name, 0) + p.messages_in
                    bytes_in[name] = bytes_in.get(name, 0) + p.bytes_in
                if p.bytes_out:
                    bytes_out[name] = bytes_out.get(name, 0) + p.bytes_out
        return messages_in, bytes_in, bytes_out

    def _topics(self) -> Iterator[Metric]:
        r = self.recorder
        def share(counts: dict[tuple[str, str], int], kind: str) -> dict[str, int]:
            return {topic: n for (k, topic), n in counts.items() if k == kind}

        messages_in, bytes_in, bytes_out = self._moved()
        for name, doc, values in (
                ("messagesin", "Records appended by producers (MessagesInPerSec).", messages_in),
                ("bytesin", "Record-batch bytes appended by producers (BytesInPerSec).", bytes_in),
                ("bytesout", "Record-batch bytes sent to Fetch and ShareFetch (BytesOutPerSec).", bytes_out),
                ("totalsharefetchrequests", "ShareFetch requests naming the topic (TotalShareFetchRequestsPerSec).",
                 share(r.share_requests_total, "fetch")),
                ("failedsharefetchrequests",
                 "ShareFetch requests with a partition of the topic answered with an error "
                 "(FailedShareFetchRequestsPerSec).", share(r.share_requests_failed, "fetch")),
                ("totalshareacknowledgementrequests",
                 "ShareFetch and ShareAcknowledge requests acknowledging records of the topic "
                 "(TotalShareAcknowledgementRequestsPerSec).", share(r.share_requests_total, "acknowledgement")),
                ("failedshareacknowledgementrequests",
                 "... of which a partition's acknowledgement failed (FailedShareAcknowledgementRequestsPerSec).",
                 share(r.share_requests_failed, "acknowledgement"))):
            yield _counter(f"kafka_server_brokertopicmetrics_{name}", doc, ["topic"],
                           (((topic,), n) for topic, n in sorted(values.items())))

    def _logs(self) -> Iterator[Metric]:
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "First offset of the partition (LogStartOffset).",
                                  labels=["topic", "partition"])
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "Offset of the next record appended (LogEndOffset).",
                                labels=["topic", "partition"])
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of the partition's segments (Size).",
                                 labels=["topic", "partition"])
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments of the partition (NumLogSegments).",
                                     labels=["topic", "partition"])
        for p in self.broker.topics.all_partitions():
            labels = [p.topic.name, str(p.index)]
            plog = p.log
            start.add_metric(labels, plog.log_start_offset)
            end.add_metric(labels, plog.log_end_offset)
            size.add_metric(labels, plog.size_bytes)
            segments.add_metric(labels, len(plog.segments))
        yield from (start, end, size, segments)

    def _connections(self) -> Iterator[Metric]:
        counts = dict.fromkeys((listener.name for listener in self.broker.config.listeners), 0)
        for conn in self.broker.open_connections():
            counts[conn.listener] = counts.get(conn.listener, 0) + 1
        yield _gauge("kafka_server_socket_server_metrics_connection_count", "Open client connections (connection-count).",
                     ["listener"], (((name,), n) for name, n in counts.items()))

    def _groups(self) -> Iterator[Metric]:
        broker = self.broker
        share: dict[str, int] = dict.fromkeys(_SHARE_STATES, 0)
        for g in broker.share_groups.groups.values():
            share[g.state] = share.get(g.state, 0) + 1
        consumer: dict[str, int] = dict.fromkeys(_CONSUMER_STATES, 0)
        for _gid, _ptype, state, _type in broker.consumer_groups.listing():
            consumer[state] = consumer.get(state, 0) + 1
        classic: dict[str, int] = dict.fromkeys(_CLASSIC_STATES, 0)
        for cg in broker.classic_groups.groups.values():
            classic[cg.state] = classic.get(cg.state, 0) + 1
        prefix = "kafka_server_group_coordinator_metrics"
        yield _gauge(f"{prefix}_group_count", "Groups by rebalance protocol (group-count).", ["protocol"],
                     ((("classic",), sum(classic.values()) - classic["Dead"]),
                      (("consumer",), sum(consumer.values()) - consumer["Dead"]),
                      (("share",), sum(share.values()) - share["Dead"])))
        yield _gauge(f"{prefix}_share_group_count", "Share groups by state (share-group-count).", ["state"],
                     (((s,), n) for s, n in share.items()))
        yield _gauge(f"{prefix}_consumer_group_count", "Consumer-protocol groups by state (consumer-group-count).",
                     ["state"], (((s,), n) for s, n in consumer.items()))
        for state, n in classic.items():
            yield _gauge(f"kafka_coordinator_group_groupmetadatamanager_numgroups{state.lower()}",
                         f"Classic groups in state {state} (NumGroups{state}).", [], [((), n)])
        yield _gauge("kafka_coordinator_group_groupmetadatamanager_numgroups", "Classic groups (NumGroups).", [],
                     [((), sum(classic.values()) - classic["Dead"])])
        rebalances = self.recorder.rebalances
        # Kafka's meters' -count attributes, exported as counters (Prometheus computes the -rate).
        yield _counter(f"{prefix}_share_group_rebalance", "Share group epoch bumps (share-group-rebalance-count).",
                       [], [((), rebalances["share"])])
        yield _counter(f"{prefix}_consumer_group_rebalance",
                       "Consumer group epoch bumps (consumer-group-rebalance-count).", [], [((), rebalances["consumer"])])
        yield _counter(f"{prefix}_group_completed_rebalance",
                       "Classic group rebalances completed (group-completed-rebalance-count).", [],
                       [((), rebalances["classic"])])

    def _share(self) -> Iterator[Metric]:
        r = self.recorder
        yield _counter("kafka_server_sharegroupmetrics_recordacknowledgements",
                       "Records acknowledged, by type (RecordAcknowledgementsPerSec).", ["ackType"],
                       (((ACK_TYPE_NAMES[t],), n) for t, n in r.record_acks.items()))
        yield _counter("kafka_server_share_group_metrics_share_acknowledgement",
                       "Acknowledgements of a topic in a request, all topics (KIP-932 share-acknowledgement-count).",
                       [], [((), sum(n for (k, _), n in r.share_requests_total.items() if k == "acknowledgement"))])
        yield _histogram("kafka_server_sharegroupmetrics_partitionloadtimems",
                         "Time to load a share partition's state, in ms (PartitionLoadTimeMs).", [],
                         [((), r.partition_load)])
        labels = ["group", "topic", "partition"]
        messages = GaugeMetricFamily("kafka_server_sharepartitionmetrics_inflightmessagecount",
                                     "Records between the share-partition start and end offsets (InFlightMessageCount).",
                                     labels=labels)
        batches = GaugeMetricFamily("kafka_server_sharepartitionmetrics_inflightbatchcount",
                                    "In-flight state ranges of the share partition (InFlightBatchCount).", labels=labels)
        acquired = GaugeMetricFamily("kafka_server_sharepartitionmetrics_acquiredrecords",
                                     "Records acquired and not yet acknowledged (sharebroker only).", labels=labels)
        start = GaugeMetricFamily("kafka_server_sharepartitionmetrics_startoffset",
                                  "The share-partition start offset, SPSO (sharebroker only).", labels=labels)
        for leader in list(self.broker.share.leaders.values()):
            sp = leader.sp
            if sp is None:
                continue
            values = [leader.group_id, leader.partition.topic.name, str(leader.partition.index)]
            messages.add_metric(values, sp.in_flight_count())
            batches.add_metric(values, sp.in_flight_batch_count())
            acquired.add_metric(values, sp.acquired_count())
            start.add_metric(values, sp.start_offset)
        yield from (messages, batches, acquired, start)
        yield _counter("kafka_server_sharepartitionmetrics_acquisitionlocktimeout",
                       "Records whose acquisition lock expired (AcquisitionLockTimeoutPerSec).", labels,
                       ((k[:2] + (str(k[2]),), n) for k, n in sorted(r.lock_timeouts.items())))
        yield _counter("kafka_server_sharepartitionmetrics_archivedatdeliverylimit",
                       "Records archived on reaching share.delivery.count.limit (sharebroker only).", labels,
                       ((k[:2] + (str(k[2]),), n) for k, n in sorted(r.at_limit.items())))


def registry_for(broker: Broker, recorder: MetricsRecorder) -> CollectorRegistry:
    """The broker's collector plus prometheus_client's process, platform and GC collectors."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker, recorder))
    for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(standard)
    return registry


_STATIC_TYPES = {"view.js": "text/javascript; charset=utf-8", "view.css": "text/css; charset=utf-8"}
# No inline script or style anywhere on the page: a payload that slipped past escaping could not run.
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
# Write actions need this header: a cross-site form or image cannot send it (no CORS is granted).
WRITE_HEADER = "x-sharebroker-write"

Response = tuple[str, str, bytes]


def _static(name: str) -> bytes:
    return resources.files("sharebroker.broker").joinpath("admin_static", name).read_bytes()


def _json(status: str, data: Any) -> Response:
    return status, "application/json", json.dumps(data, separators=(",", ":")).encode()


def _text(status: str, text: str) -> Response:
    return status, "text/plain; charset=utf-8", text.encode()


class MetricsEndpoint:
    """A minimal HTTP/1.1 server on the broker's loop, one request per connection: GET (or HEAD)
    /metrics for Prometheus, and the live view (`/`, `/static/…`, `/api/view`, `/api/state`, and with
    admin.ui.write.enable the POST actions under `/api/groups/…`). Requests are rare and small, so a
    hand-written request line parser is enough and keeps an HTTP framework out of the dependencies."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, view: AdminView | None = None) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.view = view
        self._server: asyncio.Server | None = None
        self._static: dict[str, bytes] = {}

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, self.host or None, self.port,
                                                  limit=_REQUEST_HEAD_LIMIT)
        bound = self._server.sockets[0].getsockname()
        if self.view is not None:
            self.view.start()
        log.info("metrics listener started", host=self.host or "0.0.0.0", port=bound[1], path="/metrics",
                 view="/", view_writes=bool(self.view and self.view.write_enabled))
        return self.host, bound[1]

    async def stop(self) -> None:
        if self.view is not None:
            await self.view.stop()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _REQUEST_TIMEOUT_S)
            lines = head.decode("latin-1").split("\r\n")
            method, _, rest = lines[0].partition(" ")
            target = rest.split(" ", 1)[0]
            path, _, query = target.partition("?")
            headers = {name.strip().lower(): value.strip()
                       for name, sep, value in (line.partition(":") for line in lines[1:]) if sep}
            status, ctype, body = await self._route(method, path, parse_qs(query), headers)
            extra = f"Content-Security-Policy: {_CSP}\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n{extra}"
                         "Connection: close\r\n\r\n".encode("latin-1"))
            if method != "HEAD":
                writer.write(body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            pass  # a client that went away or sent no HTTP: nothing to answer
        except Exception:
            log.exception("admin endpoint request failed")
        finally:
            writer.close()

    async def _route(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str]) -> Response:
        view = self.view
        if path == "/metrics":
            if method not in ("GET", "HEAD"):
                return _text("405 Method Not Allowed", "GET /metrics\n")
            # The text format (0.0.4), or OpenMetrics when the scraper prefers it, as the library negotiates.
            encoder, ctype = choose_encoder(headers.get("accept", ""))
            return "200 OK", ctype, encoder(self.registry)
        if view is None:
            return _text("404 Not Found", "Not found: try /metrics\n")
        if path.startswith("/api/groups/"):
            return await self._write(method, path, query, headers)
        if method not in ("GET", "HEAD"):
            return _text("405 Method Not Allowed", "GET only\n")
        if path == "/":
            return "200 OK", "text/html; charset=utf-8", view.page().encode()
        if path == "/api/view":
            return _json("200 OK", {"sections": view.sections(), "now_ms": int(time.time() * 1000)})
        if path == "/api/state":
            return _json("200 OK", view.state())
        if path == "/api/records":
            try:
                args = {k: query[k][0] for k in ("group", "topic", "partition", "first", "last")}
                found = view.records(args["group"], args["topic"], int(args["partition"]), int(args["first"]),
                                     int(args["last"]))
            except (KeyError, ValueError):
                return _json("400 Bad Request", {"error": "INVALID_REQUEST",
                                                 "message": "group, topic, partition, first and last are required"})
            return _json("200 OK" if found["error"] == "NONE" else "404 Not Found", found)
        if path.startswith("/static/") and (name := path[len("/static/"):]) in _STATIC_TYPES:
            body = self._static.get(name)
            if body is None:
                body = self._static[name] = _static(name)
            return "200 OK", _STATIC_TYPES[name], body
        return _text("404 Not Found", "Not found: try / or /metrics\n")

    async def _write(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str]) -> Response:
        """POST /api/groups/{share|consumer|classic}/GROUP/delete, POST /api/groups/share/GROUP/reset?to=
        earliest|latest: with admin.ui.write.enable only, and the CLI's rules (empty groups only)."""
        view = self.view
        assert view is not None
        if not view.write_enabled:
            return _json("403 Forbidden", {"error": "CLUSTER_AUTHORIZATION_FAILED",
                                           "message": "The view is read-only: start the broker with --admin-ui-write "
                                                      "(admin.ui.write.enable=true) to allow resets and deletes."})
        if method != "POST" or headers.get(WRITE_HEADER) != "1":
            return _json("405 Method Not Allowed", {"error": "INVALID_REQUEST",
                                                    "message": f"POST with the header {WRITE_HEADER}: 1"})
        parts = path.split("/")  # "", "api", "groups", kind, group, action
        if len(parts) != 6 or parts[3] not in ("share", "consumer", "classic") or not parts[4]:
            return _json("404 Not Found", {"error": "INVALID_REQUEST", "message": "unknown action"})
        kind, group_id, action = parts[3], unquote(parts[4]), parts[5]
        to = (query.get("to") or [""])[0]
        if action == "delete":
            error, message = await view.delete_group(kind, group_id)
        elif action == "reset" and kind == "share" and to in ("earliest", "latest"):
            error, message = await view.reset_share_group(group_id, to)
        else:
            return _json("404 Not Found", {"error": "INVALID_REQUEST", "message": "unknown action"})
        log.info("admin view action", action=action, kind=kind, group=group_id, to=to or None, error=error)
        return _json("200 OK" if error == "NONE" else "409 Conflict", {"error": error, "message": message})
