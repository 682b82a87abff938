"""FrameProtocol: size-prefixed frames cut from arbitrary socket reads, in order, with large frames
filled in place, buffer reuse that never overwrites a frame still in use, flow control and the
reasons a stream ends."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from sharebroker.broker.frames import _LARGE, _MAX_QUEUED, _MAX_QUEUED_BYTES, _MAX_SPARES, FrameEnd, FrameProtocol


class FakeTransport:
    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0
        self.written: list[bytes] = []
        self.closed = False

    def set_write_buffer_limits(self, high: int) -> None:
        self.high = high

    def get_extra_info(self, name: str, default=None):
        return {"peername": ("127.0.0.1", 5555)}.get(name, default)

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.closed

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def payload(i: int, size: int) -> bytes:
    head = struct.pack(">hhi", 0, 9, i)
    return head + bytes((i + k) % 251 for k in range(size - len(head)))


def make() -> tuple[FrameProtocol, FakeTransport, list[FrameProtocol]]:
    opened: list[FrameProtocol] = []
    proto = FrameProtocol(100 << 20, opened.append)
    transport = FakeTransport()
    proto.connection_made(transport)  # type: ignore[arg-type]
    return proto, transport, opened


def feed(proto: FrameProtocol, data: bytes, chunks: list[int]) -> None:
    """Deliver `data` as the socket would: each read fills at most what get_buffer offers."""
    pos = 0
    i = 0
    while pos < len(data):
        want = chunks[i % len(chunks)]
        i += 1
        buf = proto.get_buffer(-1)
        n = min(want, len(buf), len(data) - pos)
        assert n > 0, "get_buffer offered no room"
        buf[:n] = data[pos:pos + n]
        proto.buffer_updated(n)
        pos += n


async def drain(proto: FrameProtocol, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        got = await proto.read_frame()
        assert not isinstance(got, FrameEnd), got
        out.append(bytes(got))
        proto.recycle(got)
    return out


@pytest.mark.parametrize("chunks", [[1], [3, 7], [4096], [65536 + 13], [1 << 20], [5, 70_000, 11, 300_000]])
async def test_frames_come_out_whole_and_in_order_whatever_the_reads(chunks):
    rnd = random.Random(sum(chunks))
    sizes = [8, 9, 100, _LARGE, _LARGE + 1, 300_000, 12, 1_500_000, 50_000, 8, 64 * 1024 - 3]
    if min(chunks) < 100:  # byte-sized reads: keep the run short, still crossing every boundary
        sizes = [8, 9, 100, _LARGE + 1, 12, 70_000, 8]
    rnd.shuffle(sizes)
    payloads = [payload(i, s) for i, s in enumerate(sizes)]
    proto, _, opened = make()
    assert opened == [proto]
    stream = b"".join(frame(p) for p in payloads)
    got: list[bytes] = []
    # feed in slices so the queue bound (and reading pause) is exercised without deadlock
    for p in payloads:
        feed(proto, frame(p), chunks)
        got += await drain(proto, 1)
    assert got == payloads
    # and the whole stream at once, split at arbitrary places
    proto, _, _ = make()
    cuts = sorted(rnd.sample(range(1, len(stream)), 40))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    result: list[bytes] = []
    for piece in pieces:
        feed(proto, piece, chunks)
        while proto._frames:
            result += await drain(proto, 1)
    assert result == payloads


async def test_a_large_frame_still_in_use_is_never_overwritten():
    proto, _, _ = make()
    first, second = payload(1, 200_000), payload(2, 200_000)
    feed(proto, frame(first), [65536])
    held = await proto.read_frame()
    assert isinstance(held, memoryview)
    # not recycled: the next large frame must land in another buffer
    feed(proto, frame(second), [65536])
    assert bytes(held) == first
    assert bytes(await proto.read_frame()) == second
    # once recycled, the buffer is reused for the next one
    owner = held.obj
    proto.recycle(held)
    third = payload(3, 150_000)
    feed(proto, frame(third), [65536])
    got = await proto.read_frame()
    assert got.obj is owner and bytes(got) == third


async def test_recycle_keeps_a_buffer_someone_still_views():
    proto, _, _ = make()
    feed(proto, frame(payload(1, 100_000)), [65536])
    held = await proto.read_frame()
    inner = held[10:20]  # an export of the frame outlives the request
    proto.recycle(held)
    assert proto._spares == []
    inner.release()


async def test_buffers_kept_for_reuse_stop_growing_under_frames_of_every_size():
    """A producer's requests differ in size from one to the next. The buffers a connection keeps
    for its large frames must settle (issue 24: the soak's broker kept a new one for each larger
    request it saw, 16 of them and climbing after ten minutes): at most _MAX_SPARES, and after a
    warm-up every frame lands in a kept buffer, none is allocated."""
    rnd = random.Random(24)
    proto, _, _ = make()
    allocated = []
    largest = 250_000  # frames of 20 KB to 250 KB: buffers of 32 KiB to 256 KiB
    for _ in range(400):
        depth = rnd.randint(1, _MAX_SPARES)  # frames in flight at once (pipelining)
        kept = {id(b) for b in proto._spares}
        sizes = [rnd.randint(20_000, largest) for _ in range(depth)]  # above the staging buffer
        for i, size in enumerate(sizes):
            feed(proto, frame(struct.pack(">hhi", 0, 9, i) + bytes(size - 8)), [65536])
        held = [await proto.read_frame() for _ in sizes]
        assert [len(h) for h in held] == sizes
        allocated.append(sum(id(h.obj) not in kept for h in held))
        for h in held:
            proto.recycle(h)
        assert len(proto._spares) <= _MAX_SPARES
        assert sum(len(b) for b in proto._spares) <= _MAX_SPARES * 2 * largest
    assert sum(allocated[200:]) == 0, [i for i, n in enumerate(allocated) if n]


async def test_frames_above_the_first_chunk_reuse_a_kept_buffer_without_copying():
    """A frame larger than the first chunk (1 MiB) grows its buffer as bytes arrive. A kept buffer
    that already holds the whole frame is used as it is: the second and later such frames of a
    connection allocate nothing (before, each grew into a new buffer and copied 1 MiB)."""
    proto, _, _ = make()
    allocated = []
    for i, size in enumerate([1_500_000, 1_400_000, 1_500_000, 1_200_000, 1_499_000]):
        kept = {id(b) for b in proto._spares}
        feed(proto, frame(struct.pack(">hhi", 0, 9, i) + bytes(size - 8)), [65536])
        held = await proto.read_frame()
        assert len(held) == size
        allocated.append(id(held.obj) not in kept)
        proto.recycle(held)
    assert allocated == [True, False, False, False, False]


async def test_reading_pauses_while_frames_queue_up_and_resumes_as_they_are_taken():
    proto, transport, _ = make()
    feed(proto, b"".join(frame(payload(i, 20)) for i in range(_MAX_QUEUED)), [1 << 16])
    assert transport.paused
    await drain(proto, _MAX_QUEUED // 2 + 1)
    assert not transport.paused


async def test_reading_pauses_on_queued_bytes_too():
    proto, transport, _ = make()
    big = payload(1, _MAX_QUEUED_BYTES // 3 + 1)
    for _ in range(2):
        feed(proto, frame(big), [1 << 20])
    assert not transport.paused
    feed(proto, frame(big), [1 << 20])
    assert transport.paused  # three frames, but more bytes than allowed
    await drain(proto, 2)
    assert not transport.paused


@pytest.mark.parametrize("size", [-5, 0, 7, (100 << 20) + 1])
async def test_invalid_size_ends_the_stream_after_the_frames_before_it(size):
    proto, transport, _ = make()
    good = payload(1, 30)
    feed(proto, frame(good) + struct.pack(">i", size) + b"\0" * 16, [1 << 16])
    feed(proto, frame(payload(2, 30)), [1 << 16])  # arriving before the pause took effect
    assert await drain(proto, 1) == [good]
    end = await proto.read_frame()
    assert isinstance(end, FrameEnd) and end.reason == "invalid frame size"
    assert end.event and end.fields["size"] == size and end.fields["setting"] == "socket.request.max.bytes"
    assert transport.paused


@pytest.mark.parametrize("tail, reason, fields", [
    (b"", "client closed", None),
    (b"\0\0", "client closed", {"got_bytes": 2}),
    (struct.pack(">i", 100) + b"\0" * 10, "truncated frame", {"expected_bytes": 100, "got_bytes": 10}),
    (struct.pack(">i", 500_000) + b"\0" * 70_000, "truncated frame", {"expected_bytes": 500_000, "got_bytes": 70_000}),
])
async def test_eof_reports_a_truncated_tail(tail, reason, fields):
    proto, _, _ = make()
    good = payload(1, 30)
    feed(proto, frame(good) + tail, [1 << 16])
    assert proto.eof_received() is True  # half-open: queued frames are still answered
    assert await drain(proto, 1) == [good]
    end = await proto.read_frame()
    assert isinstance(end, FrameEnd) and end.reason == reason
    if fields is None:
        assert end.event is None
    else:
        assert end.event == "truncated frame" and end.fields == fields


async def test_drain_waits_for_resume_writing_and_connection_loss_wakes_everyone():
    proto, _, _ = make()
    proto.pause_writing()
    waiter = asyncio.ensure_future(proto.drain())
    await asyncio.sleep(0)
    assert not waiter.done()
    proto.resume_writing()
    await asyncio.wait_for(waiter, 1)
    proto.pause_writing()
    waiter = asyncio.ensure_future(proto.drain())
    reader = asyncio.ensure_future(proto.read_frame())
    await asyncio.sleep(0)
    proto.connection_lost(ConnectionResetError("reset by peer"))
    await asyncio.wait_for(waiter, 1)
    end = await asyncio.wait_for(reader, 1)
    assert isinstance(end, FrameEnd) and "reset by peer" in end.reason


async def test_pipelined_answers_leave_in_one_send_and_a_lone_answer_at_once():
    proto, transport, _ = make()
    # Three requests arrive in one read: the answers to the first two wait while the third is
    # still to be answered, and leave with it, in one send at the end of the loop's turn.
    feed(proto, b"".join(frame(payload(i, 20)) for i in range(3)), [1 << 16])
    await proto.read_frame()
    proto.write(b"one")
    await proto.read_frame()
    proto.write(b"two")
    assert transport.written == []
    await proto.read_frame()
    proto.write(b"three")
    await asyncio.sleep(0)
    assert transport.written == [b"onetwothree"]
    # Nothing else received: an answer leaves at once, without waiting for the loop's turn.
    feed(proto, frame(payload(4, 20)), [1 << 16])
    await proto.read_frame()
    proto.write(b"four")
    assert transport.written == [b"onetwothree", b"four"]


async def test_close_flushes_answers_still_waiting():
    proto, transport, _ = make()
    feed(proto, b"".join(frame(payload(i, 20)) for i in range(2)), [1 << 16])
    await proto.read_frame()
    proto.write(b"one")
    assert transport.written == []
    proto.close()
    assert transport.written == [b"one"] and transport.closed


async def test_an_idle_connection_holds_no_staging_buffer() -> None:
    """Whole frames read: the staging buffer goes back to the pool, so 10,000 idle connections do
    not each keep 16 KB; a partial frame keeps it (its bytes live there) until it completes."""
    proto, _, _ = make()
    assert proto._staging is None  # nothing read yet
    first = frame(payload(1, 40))
    feed(proto, first, [len(first)])
    assert await drain(proto, 1) == [first[4:]]
    assert proto._staging is None
    second = frame(payload(2, 40))
    feed(proto, second[:10], [10])
    assert proto._staging is not None  # the partial frame waits in it
    feed(proto, second[10:], [len(second)])
    assert await drain(proto, 1) == [second[4:]]
    assert proto._staging is None
