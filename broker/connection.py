"""One client TCP connection: read size-prefixed frames, process them in arrival order, write
responses. A frame that cannot be served (unknown API, unsupported version, garbage, oversize)
closes this connection only, after one structured log line."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import errno
import ipaddress
import itertools
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import HANDLERS, CloseConnection, error_response
from sharebroker.broker.frames import MIN_FRAME, FrameEnd, FrameProtocol
from sharebroker.broker.metrics import FOLD_AT, Recorder, RequestSlot, ShareFacts, count_errors, error_name
from sharebroker.broker.quotas import FETCH, PRODUCE, REQUEST, ClientQuotas
from sharebroker.broker.security.principal import ANONYMOUS, KafkaPrincipal
from sharebroker.broker.security.sasl import ListenerSecurity, SaslSession
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.api_table import API_VERSIONS, api_name
from sharebroker.protocol.codec import (
    DecodedRequest,
    FrameError,
    UnsupportedVersion,
    build,
    decode_request,
    encode_response,
    has_field,
    peek_header,
    response_class,
)
from sharebroker.protocol.fetch_responses import Buffer, encode_fetch_response
from sharebroker.protocol.produce_response import throttle_position

if TYPE_CHECKING:
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.connection")
_ids = itertools.count(1)
# How long a request waits for a file descriptor to load its schema before the connection closes.
_DESCRIPTOR_WAIT_S = 10.0
_NO_ERROR = {"NONE": 1}  # a response without error codes (or none at all: acks=0)
# Requests no quota applies to, as Kafka exempts them (a client must always learn the versions).
_QUOTA_EXEMPT = frozenset((17, 18, 36))
_THROTTLE_FIELD = struct.Struct(">i")


def java_host_address(ip: str) -> str:
    """An IP address as Java's InetAddress.getHostAddress() writes it, which is what Kafka's ACL
    hosts are matched against: IPv6 in full without leading zeros (0:0:0:0:0:0:0:1), an
    IPv4-mapped IPv6 address as IPv4."""
    address, sep, scope = ip.partition("%")
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return ip
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return ":".join(f"{int(group, 16):x}" for group in parsed.exploded.split(":")) + sep + scope
    return address


class Connection:
    def __init__(self, broker: Broker, frames: FrameProtocol, listener: str,
                 security: ListenerSecurity | None = None) -> None:
        self.broker = broker
        self.listener = listener  # the name of the listener it came in on
        self.id = next(_ids)
        self._frames = frames
        peer = frames.peername()
        self.peer = f"{peer[0]}:{peer[1]}"
        # As Java's InetAddress.toString(): ACL hosts match the part after the slash.
        self.client_host = f"/{java_host_address(peer[0])}"
        self.client_id: str | None = None
        # Who the client authenticated as (ANONYMOUS on PLAINTEXT); ACL checks ask about it.
        self.principal: KafkaPrincipal = ANONYMOUS
        # SASL listeners: the exchange every frame passes until authenticated (None elsewhere).
        self._sasl: SaslSession | None = None
        self._max_frame = frames.max_frame
        self._secured = security is not None
        if security is not None:
            if security.ssl_context is not None and not security.sasl:
                self.principal = security.ssl_principal(frames.ssl_object())
            if security.sasl:
                self._sasl = SaslSession(security, self.id, self.peer, self._authenticated)
                # Before authentication Kafka takes frames of any size up to sasl.server.max.receive.size.
                frames.min_frame = 0
                frames.max_frame = security.max_receive
        self.closed = False
        self._on_close: list[Callable[[Connection], Any]] = []
        # With metrics on: the error codes (by name) of the response a handler encodes itself
        # (Fetch, ShareFetch), which it sets here; those of kio responses are counted below.
        self.response_errors: dict[str, int] | None = None
        # With metrics on: the topics a ShareFetch or ShareAcknowledge asked of, which its handler
        # sets here to be counted with the request.
        self.share_facts: ShareFacts | None = None
        self._counting = broker.metrics.enabled  # else nothing below is touched per request
        self._slot: RequestSlot | None = None  # where the request just handled is noted
        self._errors: dict[str, int] | None = None
        self.mute_ms = 0  # a quota's throttle: how long to stop reading after the response

    @property
    def sasl_authenticated(self) -> bool:
        """Whether the client authenticated with SASL (SASL_PLAINTEXT, SASL_SSL listeners)."""
        return self._sasl is not None and self._sasl.authenticated

    def _authenticated(self, principal: KafkaPrincipal) -> None:
        self.principal = principal
        self._frames.min_frame = MIN_FRAME
        self._frames.max_frame = self._max_frame

    def on_close(self, callback: Callable[[Connection], Any]) -> None:
        """Run `callback(connection)` once when the connection ends (share sessions use it)."""
        self._on_close.append(callback)

    async def serve(self) -> None:
        if self._secured:
            log.info("connection opened", conn=self.id, peer=self.peer, listener=self.listener,
                     principal=str(self.principal))
        else:
            log.info("connection opened", conn=self.id, peer=self.peer)
        reason = "client closed"
        frames = self._frames
        metrics = self.broker.metrics
        perf_counter = time.perf_counter
        try:
            while True:
                frame = await frames.read_frame()
                if isinstance(frame, FrameEnd):
                    reason = frame.reason
                    if frame.event is not None:
                        log.warning(frame.event, conn=self.id, peer=self.peer, **frame.fields)
                    break
                sasl = self._sasl
                if sasl is not None:
                    try:
                        outcome = sasl.check(frame) if sasl.authenticated else sasl.handle(frame)
                    except Exception:  # a bug must cost this connection only
                        log.exception("SASL exchange failed", conn=self.id, peer=self.peer)
                        reason = "authentication failed"
                        break
                    if not outcome.passthrough:
                        frames.recycle(frame)
                        if outcome.response:
                            frames.write(outcome.response)
                            await frames.drain()
                        if outcome.close:
                            reason = outcome.reason
                            break
                        continue
                if metrics.enabled:
                    started = perf_counter()
                    response = await self._process(frame)
                    elapsed_ms = (perf_counter() - started) * 1000
                    slot = self._slot
                    if slot is not None:  # MetricsRecorder.request, inline
                        times = slot.times
                        times.append(elapsed_ms)
                        slot.errors.append(self.response_errors or self._errors or _NO_ERROR)
                        if self.share_facts is not None:
                            slot.facts.append(self.share_facts)
                            self.share_facts = None
                        if len(times) >= FOLD_AT:
                            metrics.fold()
                        self._slot = self._errors = self.response_errors = None
                    else:
                        self._refused(metrics, frame, response, elapsed_ms)
                else:
                    response = await self._process(frame)
                frames.recycle(frame)
                if response is None:
                    reason = "unservable request"
                    break
                if isinstance(response, list):
                    frames.writelines(response)
                    await frames.drain()
                elif response:
                    frames.write(response)
                    await frames.drain()
                if self.mute_ms:
                    # KIP-219: answered at once with the throttle time, then nothing more is
                    # read from this client until the throttle has passed
                    mute_s, self.mute_ms = self.mute_ms / 1000, 0
                    await asyncio.sleep(mute_s)
        except asyncio.CancelledError:
            reason = "broker shutting down"
            raise
        finally:
            await self._close(reason)

    async def _decode_waiting_for_a_descriptor(self, frame: bytes | memoryview, first: OSError) -> DecodedRequest:
        """decode_request again while the first use of an API version cannot import its schema
        for want of a file descriptor (the broker at its open-file limit: descriptors come back
        as connections close or topics go); a FrameError when none comes back in time."""
        delay = 0.01
        deadline = asyncio.get_running_loop().time() + _DESCRIPTOR_WAIT_S
        exc = first
        while exc.errno in (errno.EMFILE, errno.ENFILE) and asyncio.get_running_loop().time() <= deadline:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
            try:
                return decode_request(frame)
            except OSError as again:
                exc = again
        api_key, api_version, correlation_id = peek_header(frame)
        raise FrameError(f"cannot load the schema of the request: {exc}", api_key=api_key,
                         api_version=api_version, correlation_id=correlation_id) from None

    async def _process(self, frame: bytes | memoryview) -> bytes | list[Buffer] | None:
        """The encoded response frame (a list of buffers from a handler that encodes its own), b""
        for no response (acks=0), None to close the connection."""
        try:
            try:
                req = decode_request(frame)
            except OSError as exc:  # not the request's fault: its schema could not be imported
                req = await self._decode_waiting_for_a_descriptor(frame, exc)
        except UnsupportedVersion as exc:
            if exc.api_key == 18:
                return self._api_versions_unsupported(exc.correlation_id or 0, exc.api_version)
            self._log_frame_error(exc)
            return None
        except FrameError as exc:
            self._log_frame_error(exc)
            return None
        if self._counting:
            self._slot = self.broker.metrics.slot(req.api_key, req.api_version)
        if self.client_id is None and req.client_id is not None:
            self.client_id = req.client_id
        workers = self.broker.workers
        if workers is not None:  # worker.processes > 1: forwarded, refused or not this worker's
            try:
                answered = await workers.gate(req, frame)
            except CloseConnection:
                return None
            if answered is not None:
                return answered
        handler = HANDLERS[req.api_key]
        quotas = self.broker.quotas
        throttled = quotas.active and req.api_key not in _QUOTA_EXEMPT
        started = time.perf_counter() if throttled else 0.0
        try:
            resp = await handler(self.broker, self, req)
        except CloseConnection:
            return None
        except Exception as exc:  # a bug or a disk error must not take the connection down
            from sharebroker.protocol.errors import error_code_for

            code, message = error_code_for(exc)
            if self._counting:
                self._errors = {error_name(code): 1}  # until an error response counts each entry
            fields = dict(conn=self.id, api=api_name(req.api_key), version=req.api_version,
                          correlation_id=req.correlation_id, error=code.name, message=message)
            if code == ErrorCode.unknown_server_error:
                log.exception("request handler failed", **fields)
            else:  # a known condition (full disk, coordinator write refused): no traceback
                log.warning("request failed", **fields)
            try:
                resp = error_response(req, code, message)
            except Exception:
                log.exception("cannot build an error response", conn=self.id, api=api_name(req.api_key))
                resp = None
            if resp is None:
                return None
        if throttled:
            resp = self._throttle(quotas, req, len(frame), resp, time.perf_counter() - started)
        if resp is None:
            return b""
        if isinstance(resp, list):
            return resp  # Fetch, ShareFetch and Produce encode their own frames (Fetch's records uncopied)
        if self._counting:
            self._errors = {}
            count_errors(resp, self._errors)
        return encode_response(req.correlation_id, resp)

    def _throttle(self, quotas: ClientQuotas, req: DecodedRequest, request_bytes: int, resp: Any,
                  elapsed_s: float) -> Any:
        """Record the request against the client's quotas (Kafka's produce, fetch and request
        quota managers); the response carries the longest throttle they ask for (or one a handler
        set: controller mutations) and the connection is not read from for that long (KIP-219)."""
        user, client_id = self.principal.name, self.client_id or ""
        throttle = quotas.record(REQUEST, user, client_id, elapsed_s * 100)  # percent of one thread
        if req.api_key == 0:
            throttle = max(throttle, quotas.record(PRODUCE, user, client_id, request_bytes))
        elif req.api_key == 1 and isinstance(resp, list):
            size = sum(memoryview(b).nbytes for b in resp)
            fetch_throttle = quotas.record(FETCH, user, client_id, size)
            if fetch_throttle and getattr(req.body, "session_epoch", -1) == -1:
                # As Kafka: a throttled Fetch is answered empty and its bytes are not counted; the
                # client fetches them again after the throttle. (A fetch session keeps its answer:
                # the session already recorded what it sent.)
                quotas.record(FETCH, user, client_id, -size)
                resp = encode_fetch_response(req.correlation_id, req.api_version, ())
            throttle = max(throttle, fetch_throttle)
        if isinstance(resp, list) and req.api_key == 0:
            # Produce: throttle_time_ms is the body's last field (the frame is one bytearray)
            if throttle > 0:
                _THROTTLE_FIELD.pack_into(resp[0], throttle_position(resp[0], req.api_version), throttle)
        elif isinstance(resp, list):
            # Fetch, ShareFetch, ShareGroupHeartbeat, Metadata (v3+): throttle_time_ms is the body's
            # first field, after the correlation id and, in a flexible version, the header's empty tag buffer
            flexible = {1: 12, 3: 9, 76: 0, 78: 0}.get(req.api_key, 1 << 16) <= req.api_version
            if throttle > 0 and (req.api_key != 3 or req.api_version >= 3):
                _THROTTLE_FIELD.pack_into(resp[0], 9 if flexible else 8, throttle)
        elif resp is not None and has_field(type(resp), "throttle_time"):
            current = int(resp.throttle_time.total_seconds() * 1000)
            if throttle > current:
                resp = dataclasses.replace(resp, throttle_time=datetime.timedelta(milliseconds=throttle))
            else:
                throttle = current
        if throttle > 0:
            self.mute_ms = throttle
            log.debug("client throttled", conn=self.id, user=user, client_id=client_id, api=api_name(req.api_key),
                      throttle_ms=throttle)
        return resp

    def _refused(self, metrics: Recorder, frame: bytes | memoryview, response: object, elapsed_ms: float) -> None:
        """Count a request refused before a handler ran (unsupported version, bad frame). The
        others are counted in serve: API and version, time, and the error codes of the response as
        Kafka's errorCounts has them (top level, topics, partitions; NONE included)."""
        try:
            api_key, api_version, _ = peek_header(frame)
        except Exception:
            return
        self._errors = self.response_errors = None
        metrics.request((api_key, api_version), elapsed_ms, {"UNSUPPORTED_VERSION" if response else "INVALID_REQUEST": 1})

    def _log_frame_error(self, exc: FrameError) -> None:
        log.warning("unservable request, closing connection", conn=self.id, peer=self.peer,
                    reason=exc.reason, api_key=exc.api_key,
                    api=api_name(exc.api_key) if exc.api_key is not None else None,
                    version=exc.api_version, correlation_id=exc.correlation_id)

    def _api_versions_unsupported(self, correlation_id: int, version: int | None) -> bytes:
        # Kafka answers an ApiVersions version it does not know with a v0 body carrying
        # UNSUPPORTED_VERSION and its own ApiVersions range, so the client can retry lower.
        lo, hi = API_VERSIONS[18]
        log.info("unsupported ApiVersions version, answering with v0", conn=self.id, version=version)
        cls = response_class(18, 0)
        resp = build(cls, {"error_code": ErrorCode.unsupported_version,
                           "api_keys": [{"api_key": 18, "min_version": lo, "max_version": hi}]})
        return encode_response(correlation_id, resp)

    async def _close(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        for callback in self._on_close:
            try:
                result = callback(self)
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("connection close callback failed", conn=self.id)
        self._frames.close()
        log.info("connection closed", conn=self.id, peer=self.peer, reason=reason, client_id=self.client_id)


__all__ = ["CloseConnection", "Connection", "DecodedRequest"]
