"""Connections from one worker to another: Kafka requests over TCP, as Kafka's brokers talk to
each other. `request` pipelines (many in flight, matched by correlation id: share-state writes of
many partitions go out together); `forward` relays a client's request frame unchanged to worker 0
and returns its response frame unchanged (topic and config changes, which only worker 0 makes)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from kio.index import load_request_schema

from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.client import ClientCodec, ResponseFrameError
from sharebroker.protocol.codec import build
from sharebroker.protocol.errors import ErrorCode, KafkaError

log = get_logger("sharebroker.workers")

_SIZE = struct.Struct(">i")


class Peer:
    def __init__(self, host: str, port: int, node_id: int, client_id: str) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self.client_id = client_id
        self._codec: ClientCodec | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._connecting = asyncio.Lock()
        self._forward_lock = asyncio.Lock()
        self._forward_conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    def _unavailable(self, exc: BaseException) -> KafkaError:
        # Retriable for the client: the worker may be starting or stopping.
        return KafkaError(ErrorCode.coordinator_not_available,
                          f"Worker node {self.node_id} at {self.host}:{self.port} is not reachable: {exc}")

    async def _ensure(self) -> tuple[ClientCodec, asyncio.StreamWriter]:
        async with self._connecting:
            if self._writer is None or self._codec is None:
                try:
                    reader, writer = await asyncio.open_connection(self.host, self.port)
                except OSError as exc:
                    raise self._unavailable(exc) from exc
                self._codec = ClientCodec(self.client_id)
                self._writer = writer
                self._reader_task = asyncio.get_running_loop().create_task(self._read(reader, self._codec, writer))
            return self._codec, self._writer

    async def _read(self, reader: asyncio.StreamReader, codec: ClientCodec, writer: asyncio.StreamWriter) -> None:
        error: BaseException = ConnectionError("closed")
        try:
            while True:
                chunk = await reader.read(1 << 20)
                if not chunk:
                    break
                codec.receive(chunk)
                while (got := codec.next_response()) is not None:
                    fut = self._waiting.pop(got[0], None)
                    if fut is not None and not fut.done():
                        fut.set_result(got[1])
        except (OSError, ResponseFrameError) as exc:
            error = exc
        finally:
            if self._writer is writer:
                self._writer = None
                self._codec = None
            writer.close()
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(self._unavailable(error))
            self._waiting.clear()

    async def request(self, key: int, version: int, data: dict[str, Any]) -> Any:
        codec, writer = await self._ensure()
        corr, frame = codec.encode(build(load_request_schema(key, version), data))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[corr] = fut
        try:
            writer.write(frame)
            return await fut
        finally:
            self._waiting.pop(corr, None)  # answered, failed or cancelled: nothing left waiting

    async def forward(self, frame: bytes | memoryview) -> bytes:
        """Send a request frame (without its size prefix) as is; its response frame, size-prefixed."""
        async with self._forward_lock:  # one at a time: responses come back in order
            try:
                if self._forward_conn is None:
                    self._forward_conn = await asyncio.open_connection(self.host, self.port)
                reader, writer = self._forward_conn
                writer.write(_SIZE.pack(len(frame)) + bytes(frame))
                size = await reader.readexactly(4)
                body = await reader.readexactly(_SIZE.unpack(size)[0])
            except BaseException as exc:
                # Any failure, a cancellation included, may leave a response unread on the
                # connection, which the next forward would hand to another client: start afresh.
                if self._forward_conn is not None:
                    self._forward_conn[1].close()
                self._forward_conn = None
                if isinstance(exc, (OSError, asyncio.IncompleteReadError)):
                    raise self._unavailable(exc) from exc
                raise
            return size + body

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()
        if self._forward_conn is not None:
            self._forward_conn[1].close()
            self._forward_conn = None
