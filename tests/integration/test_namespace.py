"""The installed distribution claims one import namespace, `sharebroker`: an application with its own
`config` and `storage` packages runs the broker in its own process without either side shadowing
the other."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("broker", "protocol", "storage", "config", "pipeline", "cli")


def test_an_application_with_its_own_config_and_storage_runs_the_broker(tmp_path: Path) -> None:
    app = tmp_path / "app"
    for name in ("config", "storage", "broker"):
        (app / name).mkdir(parents=True)
        (app / name / "__init__.py").write_text(f"OWNER = 'application {name}'\n")
    (app / "main.py").write_text(textwrap.dedent(f"""
        import asyncio, sys

        import config, storage, broker
        from confluent_kafka import Consumer, Producer
        from sharebroker.broker.server import Broker
        from sharebroker.config import BrokerConfig

        async def main() -> None:
            cfg = BrokerConfig.load(None, {{}}, {{"listeners": "PLAINTEXT://127.0.0.1:0",
                                                "log.dirs": {str(tmp_path / "data")!r}}})
            server = Broker(cfg)
            await server.start()
            try:
                def round_trip() -> bytes:
                    bootstrap = f"127.0.0.1:{{server.port}}"
                    p = Producer({{"bootstrap.servers": bootstrap}})
                    p.produce("orders", b"one")
                    assert p.flush(10) == 0
                    c = Consumer({{"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"}})
                    c.subscribe(["orders"])
                    try:
                        for _ in range(100):
                            m = c.poll(0.2)
                            if m is not None and m.error() is None:
                                return m.value()
                    finally:
                        c.close()
                    raise AssertionError("no record")
                value = await asyncio.to_thread(round_trip)
            finally:
                await server.stop()
            # the application's packages are still its own after the broker ran in this process
            assert (config.OWNER, storage.OWNER, broker.OWNER) == \\
                ("application config", "application storage", "application broker")
            assert sys.modules["config"] is config
            print(value.decode())

        asyncio.run(main())
    """))
    r = subprocess.run([sys.executable, "main.py"], cwd=app, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines()[-1] == "one"  # after the broker's own log lines


def test_no_module_imports_a_room_by_its_bare_name() -> None:
    """Inside the repository the rooms are also top-level folders, so a bare `from config import`
    would work in a checkout and fail once installed: every import goes through `sharebroker.`."""
    offenders = []
    for room in ROOMS:
        for path in (ROOT / room).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
                offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ROOMS]
    assert not offenders, offenders
