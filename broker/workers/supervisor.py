"""The supervisor of `worker.processes` > 1 (experimental): binds one listening socket per worker
(worker i on the first listener's port + i, or a free port when that is 0), holds the data
directory's lock and its clean-shutdown marker, and forks the workers from itself once the broker's
modules are imported (a worker starts without importing anything again, and shares those pages
until it writes them), each with its socket and its identity (SHAREBROKER_WORKER).
All start at once; the others open the data directory once worker 0 serves (it creates the
internal topics they then find). SIGTERM or SIGINT
stops every worker; a worker that dies stops the others and the supervisor exits 1: there is no
half-alive broker. A plain blocking process: it serves no request itself."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

from sharebroker.broker.acceptor import bind
from sharebroker.broker.structured_log import get_logger
from sharebroker.broker.workers import ENV, WorkerIdentity
from sharebroker.config import BrokerConfig, ConfigError
from sharebroker.storage.files import LogDirLock, fsync_dir, write_atomic
from sharebroker.storage.log_manager import CLEAN_SHUTDOWN_FILE

log = get_logger("sharebroker.workers")

_STOP_TIMEOUT_S = 30.0
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _check(config: BrokerConfig) -> None:
    if len(config.listeners) != 1 or config.listeners[0].security_protocol != "PLAINTEXT":
        raise ConfigError("worker.processes", "worker.processes > 1 needs exactly one PLAINTEXT listener")
    if config["metrics.listener"]:
        raise ConfigError("worker.processes", "worker.processes > 1 does not serve metrics.listener")
    if config["authorizer.class.name"]:
        raise ConfigError("worker.processes", "worker.processes > 1 does not support authorizer.class.name")


class _Worker:
    """A forked worker process, waited for like a subprocess."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker {self.pid} still running")
            signal.sigtimedwait({signal.SIGCHLD}, 0.05)
        return code


def _fork_worker(config: BrokerConfig, identity: WorkerIdentity, ready: Path,
                 others: list[socket.socket]) -> _Worker:
    supervisor = os.getpid()
    pid = os.fork()
    if pid:
        return _Worker(pid)
    code = 1
    try:  # the worker: never returns into the supervisor
        _unblock_signals()
        if os.getppid() != supervisor:  # it died before the death signal was armed
            os._exit(1)
        for sock in others:
            sock.close()
        os.environ[ENV] = identity.to_env()
        import uvloop

        from sharebroker.broker.server import run

        uvloop.run(run(config, ready_file=ready))
        code = 0
    except BaseException:  # noqa: BLE001 - said, then the supervisor sees the exit code
        log.exception("worker failed", worker=identity.index)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def supervise(config: BrokerConfig, ready_file: Path | None) -> int:
    """Run the workers until SIGTERM/SIGINT (exit 0) or until one dies (exit 1)."""
    _check(config)
    t0 = time.perf_counter()
    import uvloop  # noqa: F401 - imported once here, for every worker forked below

    import sharebroker.broker.server  # noqa: F401
    count = config["worker.processes"]
    listener = config.listeners[0]
    advertised = {adv.name: adv for adv in config.advertised_listeners}.get(listener.name, listener)
    sockets = [bind(listener.host or None, listener.port + i if listener.port else 0) for i in range(count)]
    bound = [socks[0].getsockname()[1] for socks in sockets]
    host = advertised.host or listener.host or "127.0.0.1"
    ports = tuple(advertised.port + i if advertised.port else port for i, port in enumerate(bound))
    node_ids = tuple(config.node_id + i for i in range(count))
    config.log_dir.mkdir(parents=True, exist_ok=True)
    lock = LogDirLock(config.log_dir)
    lock.acquire()
    marker = config.log_dir / CLEAN_SHUTDOWN_FILE
    clean = marker.exists()
    if clean:  # gone for good before any worker writes: a crash from here on is recovered
        marker.unlink()
        fsync_dir(config.log_dir)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD})
    scratch = Path(tempfile.mkdtemp(prefix="sharebroker-workers-"))
    procs: list[_Worker] = []
    stopping = False
    try:
        ready = {i: scratch / f"worker-{i}.ready" for i in range(count)}
        for i in range(count):
            identity = WorkerIdentity(i, count, node_ids, host, ports, tuple(s.fileno() for s in sockets[i]), clean,
                                      after="" if i == 0 else str(ready[0]))
            others = [sock for j, socks in enumerate(sockets) if j != i for sock in socks]
            procs.append(_fork_worker(config, identity, ready[i], others))
        started = _wait_ready(procs, ready)
        if started is not True:  # a worker died (failed) or SIGTERM/SIGINT came while starting
            stopping = started == "stopped"
            return _stop(procs, lock, marker, failed=not stopping)
        for socks in sockets:  # the workers hold them now
            for sock in socks:
                sock.close()
        log.info("workers started", workers=count, pids=[p.pid for p in procs], ports=list(ports),
                 node_ids=list(node_ids), startup_ms=round((time.perf_counter() - t0) * 1000, 1))
        if ready_file is not None:
            tmp = ready_file.with_suffix(".tmp")
            tmp.write_text(f"{host}:{bound[0]}\n")
            os.replace(tmp, ready_file)
        while True:
            info = signal.sigtimedwait({signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}, 1.0)
            if info is not None and info.si_signo in (signal.SIGTERM, signal.SIGINT):
                stopping = True
                return _stop(procs, lock, marker, failed=False)
            dead = [(i, p.returncode) for i, p in enumerate(procs) if p.poll() is not None]
            if dead:
                log.error("a worker exited; stopping the others", workers=[i for i, _ in dead],
                          exit_codes=[rc for _, rc in dead])
                return _stop(procs, lock, marker, failed=True)
    finally:
        if not stopping:
            for p in procs:
                p.send_signal(signal.SIGKILL)
        for f in scratch.iterdir():
            f.unlink()
        scratch.rmdir()


def _unblock_signals() -> None:
    """In the worker: default signals, and SIGTERM when the supervisor dies (even by
    SIGKILL), so no worker outlives it."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD})
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _wait_ready(procs: list[_Worker], ready: dict[int, Path]) -> bool | str:
    """True once every worker serves; False when one exits first; "stopped" on SIGTERM/SIGINT.
    No deadline: recovering a large directory after an unclean stop takes as long as it takes,
    as for a single broker."""
    while not all(path.exists() for path in ready.values()):
        if any(p.poll() is not None for p in procs):
            log.error("a worker exited while starting", exit_codes=[p.returncode for p in procs])
            return False
        info = signal.sigtimedwait({signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}, 0.01)
        if info is not None and info.si_signo in (signal.SIGTERM, signal.SIGINT):
            log.info("stopping while the workers start", signal=signal.Signals(info.si_signo).name)
            return "stopped"
    return True


def _stop(procs: list[_Worker], lock: LogDirLock, marker: Path, *, failed: bool) -> int:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    codes = []
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    for p in procs:
        try:
            codes.append(p.wait(max(0.1, deadline - time.monotonic())))
        except TimeoutError:
            p.send_signal(signal.SIGKILL)
            codes.append(p.wait(_STOP_TIMEOUT_S))
    if not failed and all(code == 0 for code in codes):  # every worker closed its logs cleanly
        write_atomic(marker, b'{"version":0,"brokerEpoch":-1}')
    lock.release()
    log.info("workers stopped", exit_codes=codes)
    return 1 if failed or any(codes) else 0
