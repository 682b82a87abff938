"""The real broker as a subprocess on an ephemeral port: for test suites (this project's and its
users') and for scripts. Nothing here imports pytest."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from sharebroker.testing.security import BrokerSecurity

T = TypeVar("T")

__all__ = ["BrokerProcess", "running_broker", "unique_name", "wait_for"]


class BrokerProcess:
    """`sharebroker serve` on 127.0.0.1 with a port the OS picks, data in `data_dir`, its log next
    to it (`<data_dir>-broker.log`). `overrides` are Kafka setting names and values, as `-o`.
    `open_files` (soft, hard) sets the process's RLIMIT_NOFILE, for tests of running out of
    descriptors; it may be changed between restarts. `security` adds TLS/SASL listeners next to
    the PLAINTEXT one (see sharebroker.testing.security); `ports` then maps each listener to its port."""

    def __init__(self, data_dir: Path | str, overrides: Mapping[str, object] | None = None, *, fsync: bool = False,
                 open_files: tuple[int, int] | None = None, security: BrokerSecurity | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.overrides = {name: str(value) for name, value in (overrides or {}).items()}
        self.fsync = fsync
        self.open_files = open_files
        self.proc: subprocess.Popen[bytes] | None = None
        self.host = "127.0.0.1"
        self.port = 0
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self.ready_file = self.data_dir.parent / f"{self.data_dir.name}-ready"
        self.start_seconds = 0.0
        self.security = security
        self.ports: dict[str, int] = {}  # listener name -> bound port
        self._set_up = False  # the users and ACLs of an authorizing `security` exist

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def listener_bootstrap(self, listener: str) -> str:
        """host:port of the listener named `listener` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."""
        return f"{self.host}:{self.ports[listener] if listener != 'PLAINTEXT' else self.port}"

    def _listeners(self) -> str:
        names = ["PLAINTEXT", *(self.security.listeners if self.security is not None else ())]
        ports = {"PLAINTEXT": self.port, **self.ports}
        return ",".join(f"{name}://{self.host}:{ports.get(name, 0)}" for name in names)

    def start(self, timeout: float = 20.0) -> BrokerProcess:
        """Start and wait until the broker listens (it writes the ready file then). A restart keeps
        the port it had. With a `security` that authorizes (ACLs, super users), its users and ACLs
        are created once by a set-up run first, in which User:ANONYMOUS is a super user."""
        if self.security is not None:
            self.security.prepare(self.data_dir.parent)
        if self.security is not None and self.security.authorizing and not self._set_up:
            self._launch(timeout, self.security.set_up_overrides(), set_up=True)
            self.stop()
            self._set_up = True
            return self._launch(timeout, self.security.overrides(), set_up=False)
        return self._launch(timeout, self.security.overrides() if self.security is not None else {},
                            set_up=self.security is not None and not self.security.authorizing)

    def _launch(self, timeout: float, security_overrides: dict[str, str], *, set_up: bool) -> BrokerProcess:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.ready_file.unlink(missing_ok=True)
        overrides = dict(self.overrides)
        if self.security is not None:
            overrides = {**security_overrides, **overrides}
        args = [sys.executable, "-m", "sharebroker", "serve",
                "--listeners", self._listeners(),
                "--data-dir", str(self.data_dir), "--ready-file", str(self.ready_file),
                "--log-format", "json"]
        if self.fsync:
            args.append("--fsync")
        for name, value in overrides.items():
            args += ["--override", f"{name}={value}"]
        started = time.perf_counter()
        with open(self.log_path, "ab") as log:
            # cwd outside any checkout: the broker must start from the installed namespace alone
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.data_dir.parent,
                                         preexec_fn=self._limit_open_files if self.open_files else None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready_file.exists():
                text = self.ready_file.read_text().strip()
                if text:
                    self.port = int(text.rsplit(":", 1)[1])
                    self.start_seconds = time.perf_counter() - started
                    if self.security is not None:
                        try:
                            self._read_ports()
                            if set_up:
                                self.security.after_start(self)
                        except BaseException:
                            self.kill()  # a caller that gets no broker cannot stop it
                            raise
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_text()[-4000:]}")
            time.sleep(0.005)
        self.kill()
        raise RuntimeError(f"broker did not become ready in {timeout}s:\n{self.log_text()[-4000:]}")

    def _read_ports(self) -> None:
        # The ready file names the first listener; the others' ports are in the start-up line.
        started = self.log_events("broker started")[-1]
        for endpoint in str(started["listeners"]).split(", "):
            name, _, address = endpoint.partition("://")
            self.ports[name] = int(address.rsplit(":", 1)[1])

    def _limit_open_files(self) -> None:
        import resource  # POSIX only, and only tests that ask for a limit need it

        assert self.open_files is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, self.open_files)

    def stop(self, timeout: float = 15.0) -> int:
        """Graceful stop with SIGTERM; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("broker did not stop on SIGTERM") from None

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is flushed beyond what the flush policy already wrote."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_events(self, event: str) -> list[dict[str, Any]]:
        """The broker's structured log lines (JSON) whose event is `event`, oldest first."""
        out = []
        for line in self.log_text().splitlines():
            if f'"{event}"' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == event:
                out.append(record)
        return out


@contextmanager
def running_broker(overrides: Mapping[str, object] | None = None, *, data_dir: Path | str | None = None,
                   fsync: bool = False) -> Iterator[BrokerProcess]:
    """A started broker for a `with` block; stopped (SIGTERM) at the end. Without `data_dir` the
    data lives in a temporary directory that is removed afterwards.

        with running_broker({"num.partitions": 3}) as broker:
            Producer({"bootstrap.servers": broker.bootstrap})...
    """
    with tempfile.TemporaryDirectory(prefix="sharebroker-") as tmp:
        broker = BrokerProcess(Path(data_dir) if data_dir is not None else Path(tmp) / "data", overrides, fsync=fsync)
        broker.start()
        try:
            yield broker
        finally:
            try:
                broker.stop()
            finally:
                broker.kill()


def unique_name(prefix: str = "t") -> str:
    """A topic or group name no other test uses: `<prefix>-<10 hex digits>`."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, message: str = "condition") -> T:
    """Poll `condition()` until it returns a truthy value (returned) or the deadline passes
    (AssertionError naming `message`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)
