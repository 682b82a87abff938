"""The real broker as a subprocess on an ephemeral port, for integration and recovery tests."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class BrokerProcess:
    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None, *, fsync: bool = False) -> None:
        self.data_dir = Path(data_dir)
        self.overrides = dict(overrides or {})
        self.fsync = fsync
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self.ready_file = self.data_dir.parent / f"{self.data_dir.name}-ready"
        self.start_seconds = 0.0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> "BrokerProcess":
        if self.ready_file.exists():
            self.ready_file.unlink()
        args = [sys.executable, "-m", "sharebroker", "serve",
                "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}",
                "--data-dir", str(self.data_dir), "--ready-file", str(self.ready_file),
                "--log-format", "json"]
        if self.fsync:
            args.append("--fsync")
        for name, value in self.overrides.items():
            args += ["--override", f"{name}={value}"]
        log = open(self.log_path, "ab")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.data_dir.parent)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready_file.exists():
                text = self.ready_file.read_text().strip()
                if text:
                    self.port = int(text.rsplit(":", 1)[1])
                    self.start_seconds = time.perf_counter() - t0
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_text()[-4000:]}")
            time.sleep(0.01)
        self.kill()
        raise RuntimeError(f"broker did not become ready in {timeout}s:\n{self.log_text()[-4000:]}")

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
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def restart(self) -> "BrokerProcess":
        self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def wait_for(condition, timeout: float = 10.0, interval: float = 0.02, message: str = "condition"):
    """Poll `condition()` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)
