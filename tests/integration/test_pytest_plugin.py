"""sharebroker's pytest plugin as a user meets it: an application with its own `config` and `storage`
packages runs its own pytest suite, which gets real brokers from the `sharebroker` fixtures without
importing anything from us; with SHAREBROKER_BOOTSTRAP set the same suite uses that broker instead.
And the plain context manager, for code that does not use pytest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sharebroker.testing import BrokerProcess, running_broker

APP_TESTS = '''
import config, storage
from confluent_kafka import Consumer, Producer


def round_trip(bootstrap, topic, group):
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, b"hello")
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        for _ in range(100):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                return m.value()
    finally:
        c.close()


def test_session_broker(sharebroker, sharebroker_topic, sharebroker_group):
    assert (config.OWNER, storage.OWNER) == ("app config", "app storage")
    assert sharebroker_topic != sharebroker_group
    assert round_trip(sharebroker, sharebroker_topic, sharebroker_group) == b"hello"
    print(f"SESSION-BROKER {sharebroker}")


def test_factory_with_settings(sharebroker_factory, sharebroker_topic, sharebroker_group):
    broker = sharebroker_factory(num_partitions=3)
    from confluent_kafka.admin import AdminClient
    assert round_trip(broker.bootstrap, sharebroker_topic, sharebroker_group) == b"hello"
    meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(sharebroker_topic, timeout=10)
    assert len(meta.topics[sharebroker_topic].partitions) == 3


def test_factory_restart(sharebroker_factory, sharebroker_topic, sharebroker_group):
    broker = sharebroker_factory()
    assert round_trip(broker.bootstrap, sharebroker_topic, sharebroker_group) == b"hello"
    broker.restart()
    assert round_trip(broker.bootstrap, sharebroker_topic, sharebroker_group + "-2") == b"hello"
'''


def _application(tmp_path: Path) -> Path:
    app = tmp_path / "app"
    for name in ("config", "storage"):
        (app / name).mkdir(parents=True)
        (app / name / "__init__.py").write_text(f"OWNER = 'app {name}'\n")
    (app / "tests").mkdir()
    (app / "tests" / "test_app.py").write_text(APP_TESTS)
    return app


def _run_pytest(app: Path, env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SHAREBROKER_BOOTSTRAP")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-m", "pytest", "-rs", "-s", "-p", "no:cacheprovider", "tests"],
                          cwd=app, env=env, capture_output=True, text=True, timeout=100)


def _outcomes(out: str) -> dict[str, int]:
    return {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|error)", out)}


@pytest.mark.needs_own_broker("starts brokers for an application's suite")
def test_an_applications_suite_gets_brokers_from_the_plugin(tmp_path: Path) -> None:
    app = _application(tmp_path)
    result = _run_pytest(app, {})
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert _outcomes(out) == {"passed": 3}, out
    assert re.search(r"SESSION-BROKER 127\.0\.0\.1:\d+", out), out


@pytest.mark.needs_own_broker("points an application's suite at a broker of its own")
def test_the_same_suite_against_an_external_broker(tmp_path: Path) -> None:
    app = _application(tmp_path)
    external = BrokerProcess(tmp_path / "external").start()
    try:
        result = _run_pytest(app, {"SHAREBROKER_BOOTSTRAP": external.bootstrap})
    finally:
        external.stop()
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    # the session fixture is the external broker; the factory's broker lacks num.partitions=3 and
    # the restart cannot be done to a broker the run does not own: both skip, saying why
    assert f"SESSION-BROKER {external.bootstrap}" in out, out
    assert f"broker fixtures use the external broker at {external.bootstrap}" in out, out
    assert _outcomes(out) == {"passed": 1, "skipped": 2}, out
    assert "needs broker settings num.partitions=3 (has: 1); SHAREBROKER_BOOTSTRAP points at an external broker" in out, out
    assert "restarts its broker; SHAREBROKER_BOOTSTRAP points at an external broker" in out, out


def test_the_context_manager_outside_pytest(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import sys
        from pathlib import Path
        from confluent_kafka.admin import AdminClient
        from sharebroker.testing import running_broker

        with running_broker({"num.partitions": 2}) as broker:
            meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
            assert meta.brokers, meta
            data_dir = broker.data_dir
            assert data_dir.is_dir()
        assert not broker.alive() and not data_dir.exists()
        assert "pytest" not in sys.modules
        print("ok", broker.bootstrap)
    """))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok 127.0.0.1:"), result.stdout


def test_running_broker_keeps_a_given_data_dir(tmp_path: Path) -> None:
    with running_broker(data_dir=tmp_path / "kept") as broker:
        assert broker.alive()
    assert (tmp_path / "kept").is_dir() and not broker.alive()


def test_a_broker_process_does_not_load_hypothesis(tmp_path: Path) -> None:
    """kio registers hypothesis strategies whenever hypothesis is importable; in a broker process
    that cost 1.3 s per start in a fresh directory (hypothesis building its Unicode table into
    ./.hypothesis). The broker's process keeps it out; the test process here has it installed."""
    import hypothesis  # noqa: F401 - installed, as in any suite that uses it

    with running_broker(data_dir=tmp_path / "data") as broker:
        assert broker.alive()
    assert not (tmp_path / ".hypothesis").exists()
