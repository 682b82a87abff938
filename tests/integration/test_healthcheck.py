"""`sharebroker healthcheck`, the image's HEALTHCHECK: exit 0 once a Metadata request is answered, 1
with the reason otherwise; without --bootstrap-server it checks the configured first listener."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest


def healthcheck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "sharebroker", "healthcheck", *args], capture_output=True, text=True,
                          env=full_env, timeout=30)


def test_a_running_broker_is_healthy(broker) -> None:
    r = healthcheck("--bootstrap-server", broker.bootstrap)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"healthy: {broker.bootstrap} answered Metadata in "), r.stdout
    assert f"broker 1 at {broker.host}:{broker.port}" in r.stdout, r.stdout
    assert healthcheck("--bootstrap-server", broker.bootstrap, "--quiet").stdout == ""


@pytest.mark.needs_own_broker("reaches its broker through the local listener configuration")
def test_without_an_address_it_checks_the_configured_first_listener(broker) -> None:
    # The broker listens on 127.0.0.1; a wildcard host in the configuration means loopback.
    r = healthcheck(env={"KAFKA_LISTENERS": f"PLAINTEXT://0.0.0.0:{broker.port}"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"healthy: 127.0.0.1:{broker.port} answered Metadata"), r.stdout


def test_nothing_listening_is_unhealthy() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        r = healthcheck("--bootstrap-server", f"127.0.0.1:{port}", "--timeout", "1000")
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.startswith("unhealthy: Cannot reach any broker within 1000 ms"), r.stderr
    assert "Connection refused" in r.stderr, r.stderr


def test_a_listener_with_an_ephemeral_port_needs_an_address() -> None:
    r = healthcheck(env={"KAFKA_LISTENERS": "PLAINTEXT://127.0.0.1:0"})
    assert r.returncode == 1
    assert "ephemeral port; pass --bootstrap-server" in r.stderr, r.stderr
