"""A listener's accept loop, run by the broker rather than by the event loop's server.

libuv (under uvloop) answers EMFILE on accept by accepting and closing every pending connection,
and uvloop closes the whole server if that fails: at the open-file limit every new client would be
dropped at once, or the listener would be gone for good. Here accepting pauses instead: pending
connections wait in the kernel's backlog until a descriptor frees (the broker calls `resume` when
it closes a connection or deletes partitions) or a back-off timer tries again; nothing spins."""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from collections.abc import Callable

from sharebroker.broker.structured_log import get_logger

log = get_logger("sharebroker.acceptor")

_BACKLOG = 100  # asyncio's create_server default, which the broker used before
_BATCH = 64  # connections accepted per readiness callback, so one listener cannot hog the loop
_RETRY_FIRST_S = 0.05
_RETRY_MAX_S = 1.0
# Out of descriptors (process, system) or of kernel memory for the socket: wait, do not spin.
_PAUSE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def bind(host: str | None, port: int) -> list[socket.socket]:
    """Listening sockets for `host` (every interface when None), as asyncio's create_server binds
    them; with port 0 every address gets the port the first one was given."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    seen: set[tuple[int, object]] = set()
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(socks) > 1:
                address = (address[0], socks[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(_BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


class Acceptor:
    """Accepts connections on `sockets` and hands each (non-blocking) to `on_connection`."""

    def __init__(self, name: str, sockets: list[socket.socket], on_connection: Callable[[socket.socket], None]) -> None:
        self.name = name
        self.sockets = sockets
        self._on_connection = on_connection
        self._loop: asyncio.AbstractEventLoop | None = None
        # Monotonic time of the first refused accept, until an accept finds the backlog empty
        # (Linux refuses an accept at the limit even with nothing queued).
        self._paused_since: float | None = None
        self._retry_s = _RETRY_FIRST_S
        self._retry: asyncio.TimerHandle | None = None
        self._closed = False

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._watch()

    def _watch(self) -> None:
        assert self._loop is not None
        for sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _unwatch(self) -> None:
        assert self._loop is not None
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(_BATCH):
            try:
                conn, _addr = sock.accept()
            except BlockingIOError:
                if self._paused_since is not None:  # the backlog is drained with descriptors to spare
                    log.info("accepting connections again", listener=self.name,
                             paused_ms=round((time.monotonic() - self._paused_since) * 1000))
                    self._paused_since = None
                    self._retry_s = _RETRY_FIRST_S
                return
            except InterruptedError:
                return
            except ConnectionAbortedError:  # the client gave up while queued: nothing to serve
                continue
            except OSError as exc:
                if exc.errno in _PAUSE_ERRNOS:
                    self._pause(exc)
                else:
                    log.warning("accept failed", listener=self.name, error=exc.strerror or str(exc))
                return
            conn.setblocking(False)
            self._on_connection(conn)

    def _pause(self, exc: OSError) -> None:
        assert self._loop is not None
        self._unwatch()
        if self._paused_since is None:
            self._paused_since = time.monotonic()
            log.warning("accepting paused", listener=self.name,
                        error=exc.strerror or str(exc),
                        detail="new connections wait in the listen backlog until one can be accepted again")
        else:
            self._retry_s = min(self._retry_s * 2, _RETRY_MAX_S)
        # Descriptors this broker does not track (a client library's, a finished write's) free
        # too: try again after a while even if nobody calls resume().
        self._retry = self._loop.call_later(self._retry_s, self.resume)

    def resume(self) -> None:
        """A descriptor was freed: accept what waits in the backlog (no-op unless paused)."""
        if self._retry is None or self._closed:
            return
        self._retry.cancel()
        self._retry = None
        self._watch()
        # Try at once rather than wait for readiness: with nothing queued, this is what tells
        # whether descriptors are free again (an accept at the limit fails even then).
        for sock in self.sockets:
            if self._retry is not None:  # paused again
                break
            self._accept(sock)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        elif self._loop is not None:
            self._unwatch()
        for sock in self.sockets:
            sock.close()


__all__ = ["Acceptor", "bind"]
