"""The transport side of a client connection: size-prefixed Kafka frames read with
`asyncio.BufferedProtocol`, so bytes go from the socket straight into the buffer a frame is decoded
from. Small frames are cut out of one staging buffer; a large frame (a produce request's batches)
gets its own bytearray that the socket fills directly, with no stream-buffer copies on the way.

Frames are queued in arrival order for the connection's task; reading pauses while too many wait,
and writing follows the transport's flow control."""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from sharebroker.protocol.fetch_responses import Buffer

MIN_FRAME = 8  # api key, api version, correlation id
_STAGING = 16 * 1024  # the staging buffer a read lands in; lent while bytes wait in it
_POOLED_STAGING = 64  # staging buffers kept for the next reads (of any connection)
_LARGE = 8 * 1024  # frames above this get a buffer of their own...
_FIRST_CHUNK = 1 << 20  # ...sized to what arrived, at most this at first, doubled as bytes come
_MAX_QUEUED = 16  # frames waiting for the connection task before reading pauses...
_MAX_QUEUED_BYTES = 8 << 20  # ...or bytes of them
_MAX_SPARE_BYTES = 8 << 20  # frame buffers kept for reuse, per connection...
# ...and at most this many: a pipelining client has a few large frames in flight at once (Java's
# max.in.flight.requests.per.connection is 5), one being handled and the next arriving.
_MAX_SPARES = 4
_WRITE_HIGH_WATER = 1 << 20


class RequestMemory:
    """Kafka's `queued.max.request.bytes`: the bytes all connections' large requests, from their
    first bytes until handled, may claim together (-1: no bound). As in Kafka's memory pool, a
    request claims its declared size when it starts and is granted while the pool has any room
    (so one larger than the pool still passes alone); a connection refused stops reading until
    memory comes back. What a request claims is only counted: its buffer still grows with the
    bytes that actually arrive."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._blocked: deque[FrameProtocol] = deque()

    def take(self, n: int, who: FrameProtocol) -> bool:
        if self.limit >= 0 and self.used >= self.limit:
            self._blocked.append(who)
            return False
        self.used += n
        return True

    def give(self, n: int) -> None:
        self.used -= n
        while self._blocked and (self.limit < 0 or self.used < self.limit):
            self._blocked.popleft().memory_available()


UNBOUNDED = RequestMemory(-1)


@dataclass(slots=True)
class FrameEnd:
    """Why no more frames will come: `reason` for the close line; `event` and `fields` describe a
    client error worth a warning line of its own (None for an orderly close)."""

    reason: str
    event: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)


# Staging buffers not lent to any connection. A connection holds one only while unparsed bytes sit
# in it (a partial frame), so an idle connection holds none: 10,000 of them cost no 160 MB.
_staging_pool: list[tuple[bytearray, memoryview]] = []


def _lend_staging() -> tuple[bytearray, memoryview]:
    if _staging_pool:
        return _staging_pool.pop()
    buf = bytearray(_STAGING)
    return buf, memoryview(buf)


class FrameProtocol(asyncio.BufferedProtocol):
    def __init__(self, max_frame: int, on_open: Callable[[FrameProtocol], None],
                 memory: RequestMemory = UNBOUNDED) -> None:
        self.max_frame = max_frame
        self.min_frame = MIN_FRAME  # 0 while SASL tokens may come as raw frames (handshake v0)
        self._on_open = on_open
        self._memory = memory
        self._held = 0  # bytes of this connection's large frames counted in `memory`
        self._memory_wait = False
        self.transport: asyncio.Transport | None = None
        self._staging: bytearray | None = None  # lent by get_buffer, given back once empty
        self._view: memoryview | None = None
        self._start = 0  # unparsed bytes are staging[_start:_end]
        self._end = 0
        # A large frame being filled from the socket: its buffer grows with the bytes that
        # arrive, so a frame that declares 100 MiB and stalls holds what it sent, not 100 MiB.
        self._large: memoryview | None = None
        self._large_got = 0
        self._large_size = 0
        self.last_active = time.monotonic()
        # Large frames' buffers, handed back once decoded: reusing them spares allocating and
        # zero-filling (and page-faulting) a fresh megabyte for every produce request. A client
        # that pipelines has the next frame arriving before the last is handed back, so several.
        self._spares: list[bytearray] = []
        self._frames: deque[bytes | memoryview] = deque()
        self._queued_bytes = 0
        self._end_state: FrameEnd | None = None
        self._frame_waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._out: list[Buffer] = []
        # The loop, once known: asyncio.get_running_loop() costs a getpid() system call each time
        # (its check against a fork), and a request would pay two.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gather = False  # _out holds buffers that must reach the transport uncopied

    # -- asyncio callbacks -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)  # uvloop's TCPTransport is not a subclass, but is one
        self.transport = tcp
        tcp.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self._on_open(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        large = self._large
        if large is not None:
            return large[self._large_got:]
        view = self._view
        if view is None:
            self._staging, self._view = _lend_staging()
            view = self._view
        return view[self._end:]

    def _grow_large(self) -> None:
        """Double the large frame's buffer (up to its declared size), keeping what arrived; a
        buffer with room beyond the view (a reused spare, a power of two) is used in place."""
        old = self._large
        assert old is not None
        held = old.obj
        assert isinstance(held, bytearray)
        if len(held) > len(old):
            frame = memoryview(held)[:min(self._large_size, len(held))]
            old.release()
            self._large = frame
            return
        size = min(self._large_size, 2 * len(old))
        spare = self._spare_for(size)
        if len(spare) >= self._large_size:
            size = self._large_size
        frame = memoryview(spare)[:size]
        frame[:self._large_got] = old[:self._large_got]
        old.release()
        self._large = frame

    def _reserve(self, n: int) -> bool:
        if self._memory.take(n, self):
            self._held += n
            return True
        self._memory_wait = True
        if self.transport is not None and not self._reading_paused:
            self.transport.pause_reading()
        return False

    def memory_available(self) -> None:
        """The request memory has room again: go on where the frame waited."""
        if not self._memory_wait or self._end_state is not None:
            return
        self._memory_wait = False
        self._cut_frames()
        if not self._memory_wait and not self._reading_paused and self.transport is not None:
            self.transport.resume_reading()

    def _release(self, n: int) -> None:
        n = min(n, self._held)
        if n:
            self._held -= n
            self._memory.give(n)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        if self._end_state is not None:  # after an invalid size nothing more is framed
            return
        if self._large is not None:
            self._large_got += nbytes
            if self._large_got == self._large_size:
                self._push(self._large)  # writable: a Produce request's offsets are stamped in place
                self._large = None
            elif self._large_got == len(self._large):
                self._grow_large()
            return
        self._end += nbytes
        self._cut_frames()

    def eof_received(self) -> bool:
        # Stay half-open: frames already received are still answered before the close (TLS cannot:
        # asyncio closes it and warns about a True here).
        self._finish(self._truncation() or FrameEnd("client closed"))
        return self.transport is None or self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._release(self._held)  # what it held (a partial frame, queued ones) is free again
        self._finish(FrameEnd(f"{type(exc).__name__}: {exc}" if exc else "client closed"))
        self._writing_paused = False
        self._wake_drain()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake_drain()

    # -- framing -----------------------------------------------------------------------------------

    def _cut_frames(self) -> None:
        buf, view = self._staging, self._view
        if buf is None or view is None:
            return
        start, end = self._start, self._end
        while end - start >= 4:
            size = int.from_bytes(buf[start:start + 4], "big", signed=True)
            if size < self.min_frame or size > self.max_frame:
                self._start = self._end = 0
                self._finish(FrameEnd("invalid frame size", "invalid frame size, closing connection",
                                      {"size": size, "max_size": self.max_frame,
                                       "setting": "socket.request.max.bytes"}))
                if self.transport is not None:
                    self.transport.pause_reading()
                return
            have = end - start - 4
            if have >= size:
                self._push(bytes(view[start + 4:start + 4 + size]))
                start += 4 + size
                continue
            if size > _LARGE:
                if not self._reserve(size):
                    break  # the partial frame waits in staging until memory comes back
                first = min(size, max(_FIRST_CHUNK, have))
                spare = self._spare_for(first)
                frame = memoryview(spare)[:size if len(spare) >= size else first]
                frame[:have] = view[start + 4:end]
                self._large, self._large_got, self._large_size = frame, have, size
                start = end
            break
        if start == end:
            start = end = 0
            if len(_staging_pool) < _POOLED_STAGING:  # nothing waits in it: back until the next read
                _staging_pool.append((buf, view))
            self._staging = self._view = None
        elif len(buf) - start < _LARGE + 4:
            # Move the partial frame to the front so the rest of it fits behind it.
            buf[:end - start] = view[start:end]
            start, end = 0, end - start
        self._start, self._end = start, end

    def _spare_for(self, size: int) -> bytearray:
        """The smallest spare that holds `size` bytes, else a new buffer of the next power of two
        (up to _FIRST_CHUNK; larger ones grow by doubling anyway): buffers of exactly each frame's
        size rarely fit the next, larger frame, so a connection went on allocating and, up to
        _MAX_SPARE_BYTES, keeping buffers of every size it had seen."""
        spares = self._spares
        best = -1
        for i, spare in enumerate(spares):
            if len(spare) >= size and (best < 0 or len(spare) < len(spares[best])):
                best = i
        if best >= 0:
            return spares.pop(best)
        return bytearray(1 << (size - 1).bit_length() if size <= _FIRST_CHUNK else size)

    def _truncation(self) -> FrameEnd | None:
        if self._large is not None:
            return FrameEnd("truncated frame", "truncated frame",
                            {"expected_bytes": self._large_size, "got_bytes": self._large_got})
        pending = self._end - self._start
        if pending == 0:
            return None
        if pending < 4:
            return FrameEnd("client closed", "truncated frame", {"got_bytes": pending})
        assert self._staging is not None  # it holds the pending bytes
        size = int.from_bytes(self._staging[self._start:self._start + 4], "big", signed=True)
        return FrameEnd("truncated frame", "truncated frame", {"expected_bytes": size, "got_bytes": pending - 4})

    def _push(self, frame: bytes | memoryview) -> None:
        self._frames.append(frame)
        self._queued_bytes += len(frame)
        if ((len(self._frames) >= _MAX_QUEUED or self._queued_bytes >= _MAX_QUEUED_BYTES)
                and not self._reading_paused and self.transport is not None):
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def _finish(self, end: FrameEnd) -> None:
        if self._end_state is None:
            self._end_state = end
        self._wake_reader()

    def _wake_reader(self) -> None:
        waiter = self._frame_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_drain(self) -> None:
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the connection task's side ----------------------------------------------------------------

    async def read_frame(self) -> bytes | memoryview | FrameEnd:
        """The next frame in arrival order, or why there are no more."""
        while not self._frames:
            if self._end_state is not None:
                return self._end_state
            self._frame_waiter = self._event_loop().create_future()
            try:
                await self._frame_waiter
            finally:
                self._frame_waiter = None
        frame = self._frames.popleft()
        self._queued_bytes -= len(frame)
        if (self._reading_paused and len(self._frames) < _MAX_QUEUED // 2
                and self._queued_bytes < _MAX_QUEUED_BYTES // 2 and self._end_state is None
                and not self._memory_wait):
            self._reading_paused = False
            assert self.transport is not None
            self.transport.resume_reading()
        return frame

    def recycle(self, frame: bytes | memoryview) -> None:
        """The connection is done with `frame` (decoding copies what it keeps): its buffer may be
        reused for the next large frame."""
        if isinstance(frame, memoryview):
            self._release(len(frame))
            owner = frame.obj
            try:
                frame.release()
            except BufferError:  # a view made from this very view is alive
                return
            if not isinstance(owner, bytearray):
                return
            try:
                # A bytearray refuses to resize while any view of it is alive (a slice kept by a
                # handler, say): then it is never reused. Shrinking by one byte and growing back
                # stays inside its allocation, so the check costs no copy.
                del owner[-1:]
            except BufferError:
                return
            owner.append(0)
            if len(owner) > _MAX_SPARE_BYTES:
                return
            spares = self._spares
            spares.append(owner)
            # Over the bounds the smallest go: the larger serve every frame the smaller would.
            while len(spares) > _MAX_SPARES or sum(len(b) for b in spares) > _MAX_SPARE_BYTES:
                del spares[min(range(len(spares)), key=lambda i: len(spares[i]))]

    def write(self, data: bytes) -> None:
        """Queue a response. While frames received are still waiting for their answers (a
        pipelining client), the answers wait too and leave together in one send at the end of the
        event loop's turn; the last answer, with nothing left waiting, leaves at once (not a turn
        of the loop and an epoll call later)."""
        self.last_active = time.monotonic()
        self._out.append(data)
        if len(self._out) == 1:
            self._send_or_defer()

    def writelines(self, parts: list[Buffer]) -> None:
        """Queue a response given as buffers (record bytes from storage among them): they go to
        the transport's writelines as they are, gathered by the kernel rather than copied here."""
        self.last_active = time.monotonic()
        first = not self._out
        self._out += parts
        self._gather = True
        if first:
            self._send_or_defer()

    def _send_or_defer(self) -> None:
        if self._frames:  # more answers to come from this turn: one send for all of them
            self._event_loop().call_soon(self._flush)
        else:
            self._flush()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def _flush(self) -> None:
        out, self._out = self._out, []
        gather, self._gather = self._gather, False
        transport = self.transport
        if transport is None or transport.is_closing() or not out:
            return
        if len(out) == 1:
            transport.write(out[0])
        elif gather:
            transport.writelines(out)
        else:  # small answers: one join costs less than a buffer each
            transport.write(b"".join(out))

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        while self._writing_paused and self.transport is not None and not self.transport.is_closing():
            self._drain_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._drain_waiter
            finally:
                self._drain_waiter = None

    def ssl_object(self) -> object | None:
        """The TLS session's SSLObject (None on a plaintext connection)."""
        return self.transport.get_extra_info("ssl_object") if self.transport is not None else None

    def peername(self) -> tuple[str, int]:
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return peer or ("?", 0)

    def close(self) -> None:
        if self._out:
            self._flush()  # answers already given still go out before the close
        if self.transport is not None:
            self.transport.close()
