"""The live view on the metrics.listener endpoint, in a real headless browser (Debian's chromium and
chromium-driver through Selenium) while a real confluent-kafka ShareConsumer acquires and
acknowledges; and its write actions over plain HTTP."""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, TopicPartition

from sharebroker.testing.plugin import Broker
from tests.integration.clients import create_topic
from tests.integration.share_helpers import (
    FAST_SHARE_BROKER,
    commit_errors,
    poll_until,
    produce_values,
    set_earliest,
    share_consumer,
)

TIMEOUT = 30.0
# Screenshots of the view land here (git-ignored), for a person to look at after a run.
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
XSS = b'<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'


def view_address(broker: Any) -> tuple[str, int]:
    (event,) = broker.log_events("metrics listener started")
    return "127.0.0.1", int(event["port"])


def request(address: tuple[str, int], method: str, path: str,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection(*address, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def wait(what: str, check: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def vbroker(make_broker: Any) -> Iterator[Broker]:
    broker = make_broker({**FAST_SHARE_BROKER, "metrics.listener": "127.0.0.1:0"})
    if not hasattr(broker, "log_events"):
        pytest.skip("needs the broker's log to find its metrics port")
    yield broker


@pytest.fixture
def browser() -> Iterator[Any]:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed "
                    "(apt-get install chromium chromium-driver, or run .ci/browser-env)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1100", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # The driver from the Debian package: Selenium Manager never downloads one.
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def strip(driver: Any, group: str, topic: str, partition: int = 0) -> list[tuple[str, int, int, str]]:
    """(state, first, last, member) of the ranges drawn in the partition's in-flight strip."""
    rows = driver.execute_script(
        "const sp = Array.from(document.querySelectorAll('div.sp')).find(d => d.getAttribute('data-group') === "
        "arguments[0] && d.getAttribute('data-topic') === arguments[1] && d.getAttribute('data-partition') === "
        "arguments[2]);"
        "if (!sp) return null;"
        "return Array.from(sp.querySelectorAll('rect.seg')).map(r => [r.getAttribute('data-state'), "
        "r.getAttribute('data-first'), r.getAttribute('data-last'), r.getAttribute('data-owner')]);",
        group, topic, str(partition))
    return [(s, int(f), int(last), o) for s, f, last, o in rows] if rows is not None else []


def console_errors(driver: Any) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def test_the_view_follows_a_share_consumer_in_a_browser(vbroker: Any, browser: Any, topic_name: str) -> None:
    addr = view_address(vbroker)
    bootstrap = vbroker.bootstrap
    create_topic(bootstrap, topic_name)
    # The group id and a payload are markup: the page must show them as text, never run them.
    group = f'sg-<i>"{uuid.uuid4().hex[:8]}</i>'
    set_earliest(bootstrap, group, **{"share.record.lock.duration.ms": "60000"})
    produce_values(bootstrap, topic_name, [XSS if i == 5 else b"record-%d" % i for i in range(10)],
                   **{"linger.ms": 200})

    browser.get(f"http://{addr[0]}:{addr[1]}/")
    assert browser.title == "sharebroker"
    assert topic_name in browser.find_element("id", "topics").text

    c = share_consumer(bootstrap, group, [topic_name], explicit=True)
    busy_consumers: list[Any] = []
    try:
        held = poll_until(c, lambda got: len(got) >= 10, TIMEOUT, what="ten records")
        members = wait("the member in /api/state", lambda: [
            g["members"] for g in request(addr, "GET", "/api/state")[1]["share_groups"] if g["group"] == group
            and g["members"]])
        (member,) = members[0]

        # -- acquired: all ten held by the one member
        ranges = wait("the strip to show the ten records acquired", lambda: [
            r for r in strip(browser, group, topic_name) if r[0] == "acquired" and r[1] == 0 and r[2] == 9])
        assert ranges == [("acquired", 0, 9, member)]

        # -- acknowledge all but offset 0: accept, and reject the markup record (it becomes poison)
        for m in held:
            if m.offset() != 0:
                c.acknowledge(m, AcknowledgeType.REJECT if m.offset() == 5 else AcknowledgeType.ACCEPT)
        assert all(e is None for e in commit_errors(c.commit_sync(10)).values())
        expected = [("acquired", 0, 0, member), ("acknowledged", 1, 4, ""), ("archived", 5, 5, ""),
                    ("acknowledged", 6, 9, "")]
        wait("the strip to show acquired, acknowledged and archived ranges",
             lambda: strip(browser, group, topic_name) == expected)

        # -- the poison record: its payload as text, its history, nothing of it run
        row = wait("the poison row of offset 5", lambda: browser.find_elements("css selector", '#poison tr[data-offset="5"]'))
        text = row[0].text
        assert "<script>window.__xss=1</script>" in text and "reject" in text and "acquire" in text
        assert group in browser.find_element("id", "share-groups").text
        assert browser.execute_script("return window.__xss === undefined")
        assert not browser.find_elements("css selector", "main script, main img, main i")

        # -- a busy group for the screenshot: three partitions, two members holding records, one of
        # them releasing some; and a classic group's committed offsets
        busy_topic, busy = f"{topic_name}-busy", f"busy-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, busy_topic, 3)
        set_earliest(bootstrap, busy, **{"share.record.lock.duration.ms": "60000"})
        for p in range(3):
            produce_values(bootstrap, busy_topic, [b"job-%d-%d" % (p, i) for i in range(40 + 30 * p)], partition=p,
                           **{"linger.ms": 50})
        for i in range(2):
            member = share_consumer(bootstrap, busy, [busy_topic], explicit=True, **{"max.poll.records": 25})
            busy_consumers.append(member)
            got = poll_until(member, lambda got: len(got) >= 1, TIMEOUT, what=f"records for busy member {i}")
            for m in got[: len(got) // 3]:
                member.acknowledge(m, AcknowledgeType.RELEASE if m.offset() % 2 else AcknowledgeType.ACCEPT)
            member.commit_sync(10)
        classic = Consumer({"bootstrap.servers": bootstrap, "group.id": f"readers-{uuid.uuid4().hex[:6]}"})
        classic.commit(offsets=[TopicPartition(busy_topic, p, 10 * p) for p in range(3)], asynchronous=False)
        classic.close()
        wait("the busy group's strips", lambda: browser.execute_script(
            "return Array.from(document.querySelectorAll('div.sp')).filter(d => d.getAttribute('data-group') === "
            "arguments[0]).length", busy) >= 2)

        wait("two lag samples of the group", lambda: browser.execute_script(
            "return Array.from(document.querySelectorAll('svg.lag')).some(s => +s.getAttribute('data-samples') >= 2)"),
            timeout=20)
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1400, min(max(height + 140, 1100), 6000))  # the whole page in one shot
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "admin-view-busy-group.png"
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000

        # -- the last acknowledgement: nothing acquired any more
        c.acknowledge(held[0], AcknowledgeType.ACCEPT)
        assert all(e is None for e in commit_errors(c.commit_sync(10)).values())
        wait("the strip to show nothing acquired", lambda: all(
            r[0] != "acquired" for r in strip(browser, group, topic_name)))
    finally:
        for consumer in (c, *busy_consumers):
            with contextlib.suppress(Exception):
                consumer.close()
    assert console_errors(browser) == []


def test_write_actions_need_the_flag_and_follow_the_cli_rules(make_broker: Any, topic_name: str) -> None:
    readonly = make_broker({**FAST_SHARE_BROKER, "metrics.listener": "127.0.0.1:0"})
    if not hasattr(readonly, "log_events"):
        pytest.skip("needs the broker's log to find its metrics port")
    status, body = request(view_address(readonly), "POST", "/api/groups/share/g/delete", {"X-Sharebroker-Write": "1"})
    assert (status, body["error"]) == (403, "CLUSTER_AUTHORIZATION_FAILED")

    broker = make_broker({**FAST_SHARE_BROKER, "metrics.listener": "127.0.0.1:0", "admin.ui.write.enable": "true"})
    addr = view_address(broker)
    create_topic(broker.bootstrap, topic_name)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    set_earliest(broker.bootstrap, group)
    produce_values(broker.bootstrap, topic_name, [b"a", b"b", b"c"])
    write = {"X-Sharebroker-Write": "1"}
    # without the header (what a cross-site form could send) nothing happens
    assert request(addr, "POST", f"/api/groups/share/{group}/delete")[0] == 405
    c = share_consumer(broker.bootstrap, group, [topic_name])
    try:
        poll_until(c, lambda got: len(got) >= 3, TIMEOUT)
        status, body = request(addr, "POST", f"/api/groups/share/{group}/reset?to=earliest", write)
        assert (status, body["error"]) == (409, "NON_EMPTY_GROUP")
        status, body = request(addr, "POST", f"/api/groups/share/{group}/delete", write)
        assert (status, body["error"]) == (409, "NON_EMPTY_GROUP")
    finally:
        c.close()
    wait("the group to be empty", lambda: any(
        g["group"] == group and not g["members"] for g in request(addr, "GET", "/api/state")[1]["share_groups"]))
    status, body = request(addr, "POST", f"/api/groups/share/{group}/reset?to=earliest", write)
    assert (status, body["error"]) == (200, "NONE")
    c = share_consumer(broker.bootstrap, group, [topic_name])
    try:  # reset to earliest: the three records are delivered again
        assert len(poll_until(c, lambda got: len(got) >= 3, TIMEOUT)) == 3
    finally:
        c.close()
    wait("the group to be empty", lambda: any(
        g["group"] == group and not g["members"] for g in request(addr, "GET", "/api/state")[1]["share_groups"]))
    status, body = request(addr, "POST", f"/api/groups/share/{group}/delete", write)
    assert (status, body["error"]) == (200, "NONE")
    assert all(g["group"] != group for g in request(addr, "GET", "/api/state")[1]["share_groups"])
    status, body = request(addr, "POST", "/api/groups/consumer/no-such-group/delete", write)
    assert (status, body["error"]) == (409, "GROUP_ID_NOT_FOUND")
