"""The live web view on the admin endpoint (`metrics.listener`): topics, groups, the in-flight window
of every loaded share partition, poison records and each group's lag over the last minutes.

The page is rendered here, on the broker's loop, from the broker's own state (one consistent view,
nothing locked); `view.js` polls `/api/view` and swaps in the sections that changed. Every string
that reaches the page goes through `esc` (record payloads, member ids and topic names are anyone's
input), and the endpoint sends a Content-Security-Policy without inline script or style, so even
a missed escape could not run script. In-flight windows are drawn from the state ranges (DESIGN
principle 4), never record by record, and capped; payload previews are read for a capped number of
poison records. Lag is sampled every LAG_SAMPLE_S while the endpoint runs (it is off otherwise)."""

from __future__ import annotations

import asyncio
import html
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sharebroker.broker.share.inflight import RecordState
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.errors import KafkaError
from sharebroker.protocol.record_batch import decode_records, iter_batch_headers

if TYPE_CHECKING:
    from sharebroker.broker.server import Broker
    from sharebroker.broker.share.leader import SharePartitionLeader

log = get_logger("sharebroker.admin_view")

LAG_SAMPLE_S = 5.0
LAG_SAMPLES = 72  # six minutes at LAG_SAMPLE_S
STRIP_SEGMENTS = 120  # ranges drawn per in-flight strip; the rest as one "more" segment
STRIP_WIDTH = 1000
STRIP_MIN = 4  # viewBox units every drawn range gets at least, so a one-record range stays visible
POISON_PER_PARTITION = 10
POISON_TOTAL = 50
PREVIEW_BYTES = 120
TABLE_ROWS = 200  # rows of the topics table before "N more"
STRIPS = 100  # in-flight strips drawn (share partitions with the most records in flight first)

STATE_NAMES = {RecordState.AVAILABLE: "available", RecordState.ACQUIRED: "acquired",
               RecordState.ACKNOWLEDGED: "acknowledged", RecordState.ARCHIVING: "archiving",
               RecordState.ARCHIVED: "archived"}


def esc(value: object) -> str:
    """HTML-escape anything shown on the page (attributes included: quotes too)."""
    return html.escape(str(value), quote=True)


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def preview(data: bytes | None) -> str:
    """A payload's first bytes as text (undecodable bytes escaped), for the poison table."""
    if data is None:
        return "(null)"
    head = data[:PREVIEW_BYTES].decode("utf-8", errors="backslashreplace")
    return head + ("…" if len(data) > PREVIEW_BYTES else "")


@dataclass(frozen=True, slots=True)
class Segment:
    first: int
    last: int
    state: str  # available, acquired, acknowledged, archiving, archived, unread, more
    count: int  # delivery count (-1 where not cached)
    owner: str
    lock_left_ms: int | None


class AdminView:
    """State for the view: lag samples per group, a small cache of payload previews, and the
    handlers of the write actions (only with admin.ui.write.enable)."""

    def __init__(self, broker: Broker, *, write_enabled: bool) -> None:
        self.broker = broker
        self.write_enabled = write_enabled
        self.lag: dict[tuple[str, str], deque[tuple[int, int]]] = {}
        self._previews: OrderedDict[tuple[str, int, int], tuple[str, str]] = OrderedDict()
        self._sampler: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self.broker.share.history = True
        for leader in self.broker.share.leaders.values():
            leader.observe(history=True, trace=leader.trace)
        self._sampler = asyncio.get_running_loop().create_task(self._sample_forever(), name="admin-view-lag")

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            try:
                await self._sampler
            except asyncio.CancelledError:
                pass
            self._sampler = None

    async def _sample_forever(self) -> None:
        while True:
            try:
                await self.sample_lag()
            except Exception:
                log.exception("lag sample failed")
            await asyncio.sleep(LAG_SAMPLE_S)

    # -- lag -------------------------------------------------------------------------------------

    async def share_lag(self, group_id: str) -> int:
        """Sum over the group's initialized partitions of end offset - SPSO - completed records
        (DescribeShareGroupOffsets' lag), from a loaded leader or else the persisted summary."""
        broker = self.broker
        group = broker.share_groups.groups.get(group_id)
        if group is None:
            return 0
        total = 0
        for topic_id, parts in list(group.initialized.items()):
            topic = broker.topics.by_id.get(topic_id)
            if topic is None:
                continue
            for index in list(parts):
                if not 0 <= index < len(topic.partitions):
                    continue
                end = topic.partitions[index].log.high_watermark
                leader = broker.share.existing_leader(group_id, topic_id, index)
                if leader is not None and leader.sp is not None:
                    start, done = leader.sp.start_offset, leader.sp.delivery_complete_count
                else:
                    try:
                        s = await broker.share_persister.read_summary(group_id, topic_id, index)
                    except KafkaError:
                        continue
                    start, done = s.start_offset, s.delivery_complete_count
                if start >= 0 and done >= 0:
                    total += max(0, end - start - done)
        return total

    def offsets_lag(self, group_id: str) -> int:
        """A classic or consumer group's lag: end offset - committed offset, summed."""
        total = 0
        for (topic_name, index), committed in list(self.broker.classic_groups.offsets.get(group_id, {}).items()):
            topic = self.broker.topics.get(topic_name)
            if topic is not None and 0 <= index < len(topic.partitions):
                total += max(0, topic.partitions[index].log.high_watermark - committed.offset)
        return total

    async def sample_lag(self) -> None:
        now = int(time.time() * 1000)
        seen: set[tuple[str, str]] = set()
        for group_id in list(self.broker.share_groups.groups):
            key = ("share", group_id)
            seen.add(key)
            self.lag.setdefault(key, deque(maxlen=LAG_SAMPLES)).append((now, await self.share_lag(group_id)))
        for group_id in list(self.broker.classic_groups.offsets):
            key = ("offsets", group_id)
            seen.add(key)
            self.lag.setdefault(key, deque(maxlen=LAG_SAMPLES)).append((now, self.offsets_lag(group_id)))
        for key in [k for k in self.lag if k not in seen]:
            del self.lag[key]

    # -- in-flight strips ------------------------------------------------------------------------

    def segments(self, leader: SharePartitionLeader) -> tuple[list[Segment], int]:
        """The ranges of a share partition's window, from its first cached offset (or SPSO) to the
        high watermark: the cached ranges, what lies between them (available, not cached) and the
        records not yet read (unread); at most STRIP_SEGMENTS, the rest merged into "more". Also
        the number of ranges left out."""
        sp = leader.sp
        assert sp is not None
        hwm = leader.partition.log.high_watermark
        now = leader.clock.monotonic_ms()
        pieces = sp.ranges()
        out: list[Segment] = []
        cursor = min(sp.start_offset, pieces[0].first) if pieces else sp.start_offset
        hidden = 0
        for p in pieces:
            if len(out) >= STRIP_SEGMENTS:
                hidden += 1
                continue
            if p.first > cursor:
                out.append(Segment(cursor, p.first - 1, "available", -1, "", None))
            lock = p.deadline - now if p.state is RecordState.ACQUIRED and p.deadline is not None else None
            out.append(Segment(p.first, p.last, STATE_NAMES[p.state], p.count, p.owner, lock))
            cursor = p.last + 1
        if hidden:
            last = pieces[-1].last
            out.append(Segment(cursor, last, "more", -1, "", None))
            cursor = last + 1
        if hwm > cursor:
            out.append(Segment(cursor, hwm - 1, "unread", 0, "", None))
        return out, hidden

    def poison(self, leader: SharePartitionLeader, limit: int) -> list[tuple[int, str, int]]:
        """(offset, state, delivery count) of records archived or at the delivery limit, the first
        POISON_PER_PARTITION of them (walking ranges, expanding only up to the cap)."""
        sp = leader.sp
        out: list[tuple[int, str, int]] = []
        if sp is None:
            return out
        for p in sp.ranges():
            if p.state is RecordState.ARCHIVED or (p.count >= limit and p.state is not RecordState.ACKNOWLEDGED):
                for offset in range(p.first, min(p.last, p.first + POISON_PER_PARTITION - len(out) - 1) + 1):
                    out.append((offset, STATE_NAMES[p.state], p.count))
                if len(out) >= POISON_PER_PARTITION:
                    break
        return out

    def payload(self, leader: SharePartitionLeader, offset: int) -> tuple[str, str]:
        """(key, value) previews of the record at offset, read from the log (cached, bounded)."""
        key = (leader.partition.topic.name, leader.partition.index, offset)
        hit = self._previews.get(key)
        if hit is not None:
            self._previews.move_to_end(key)
            return hit
        found = ("", "(not in the log)")
        try:
            plog = leader.partition.log
            read = plog.read(offset, 1, min_one_batch=True, through_offset=offset)
            data = read.records
            for h in iter_batch_headers(data):
                if h.base_offset <= offset <= h.last_offset and not h.is_control:
                    rec = next((r for r in decode_records(data[h.position:h.position + h.size]) if r.offset == offset), None)
                    if rec is not None:
                        found = (preview(rec.key) if rec.key is not None else "", preview(rec.value))
                    break
        except Exception as exc:  # deleted by retention, compacted away, an unknown codec
            found = ("", f"(unreadable: {type(exc).__name__})")
        self._previews[key] = found
        while len(self._previews) > 4 * POISON_TOTAL:
            self._previews.popitem(last=False)
        return found

    # -- rendering -------------------------------------------------------------------------------

    def sections(self) -> dict[str, str]:
        """The page's live sections by element id, each an escaped HTML fragment."""
        return {"topics": self._topics(), "share-groups": self._share_groups(),
                "inflight": self._inflight(), "poison": self._poison(), "groups": self._other_groups()}

    def page(self) -> str:
        sections = self.sections()
        write = "true" if self.write_enabled else "false"
        parts = [f'<section><h2>{esc(title)}</h2><div id="{esc(sid)}" class="live">{sections[sid]}</div></section>'
                 for sid, title in (("share-groups", "Share groups"), ("inflight", "In-flight windows"),
                                    ("poison", "Poison records"), ("groups", "Consumer and classic groups"),
                                    ("topics", "Topics"))]
        return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
                "<title>sharebroker</title><link rel=\"icon\" href=\"data:,\">"
                "<link rel=\"stylesheet\" href=\"/static/view.css\">"
                "<script src=\"/static/view.js\" defer></script></head>"
                f"<body data-write=\"{write}\"><header><h1>sharebroker</h1>"
                f"<span class=\"meta\">cluster {esc(self.broker.topics.cluster_id)} · "
                f"node {esc(self.broker.config['node.id'])} · "
                f"{'read-write' if self.write_enabled else 'read-only'} · "
                "<span id=\"updated\">live</span> · <a href=\"/metrics\">/metrics</a> · "
                "<a href=\"/api/state\">/api/state</a></span></header><main>"
                + "".join(parts) + "</main></body></html>")

    def _topics(self) -> str:
        rows = []
        every = self.broker.topics.all_partitions()
        partitions = sorted((p for p in every if not p.topic.internal), key=lambda p: (p.topic.name, p.index))
        internal: dict[str, list[int]] = {}
        for p in every:
            if p.topic.internal:
                internal.setdefault(p.topic.name, [0, 0])[0] += 1
                internal[p.topic.name][1] += p.log.size_bytes
        for p in partitions[:TABLE_ROWS]:
            plog = p.log
            rows.append(f"<tr><td>{esc(p.topic.name)}</td><td class=n>{p.index}</td>"
                        f"<td class=n>{plog.log_start_offset}</td><td class=n>{plog.high_watermark}</td>"
                        f"<td class=n>{esc(_human_bytes(plog.size_bytes))}</td><td class=n>{len(plog.segments)}</td></tr>")
        more = (f"<p class=note>{len(partitions) - TABLE_ROWS} more partitions (see /metrics or /api/state)</p>"
                if len(partitions) > TABLE_ROWS else "")
        more += "".join(f"<p class=note>Internal topic {esc(name)}: {n} partitions, {esc(_human_bytes(size))}</p>"
                        for name, (n, size) in sorted(internal.items()))
        if not rows:
            return "<p class=note>No topics.</p>" + more
        return ("<table><thead><tr><th>Topic</th><th>Partition</th><th>Log start</th><th>High watermark</th>"
                "<th>Size</th><th>Segments</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>" + more)

    def _lag_chart(self, key: tuple[str, str]) -> str:
        samples = list(self.lag.get(key, ()))
        if not samples:
            return "<span class=note>no samples yet</span>"
        n = len(samples)
        if n == 1:
            samples = samples * 2  # one sample: a flat line rather than an invisible point
        w, h = 240, 40
        top = max(v for _, v in samples) or 1
        scale = (h - 4) / top  # a little headroom above the highest sample
        points = " ".join(f"{(i * w / (len(samples) - 1)):.1f},{(h - 1 - v * scale):.1f}"
                          for i, (_, v) in enumerate(samples))
        last = samples[-1][1]
        return (f'<svg class="lag" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
                f'data-samples="{n}" data-last="{last}"><title>lag over the last {n} samples '
                f'({LAG_SAMPLE_S:g} s apart), max {top}, now {last}</title>'
                f'<polyline points="{points}"/></svg> <span class=n>{last}</span>')

    def _write_buttons(self, kind: str, group_id: str, empty: bool) -> str:
        if not self.write_enabled:
            return ""
        gid = esc(group_id)
        disabled = "" if empty else " disabled title=\"only an empty group\""
        buttons = [f'<button class="act" data-action="delete" data-kind="{kind}" data-group="{gid}"{disabled}>delete</button>']
        if kind == "share":
            for to in ("earliest", "latest"):
                buttons.append(f'<button class="act" data-action="reset" data-to="{to}" data-group="{gid}"{disabled}>'
                               f'reset to {to}</button>')
        return '<span class="actions">' + "".join(buttons) + "</span>"

    def _share_groups(self) -> str:
        broker = self.broker
        groups = sorted(broker.share_groups.groups.values(), key=lambda g: g.group_id)
        if not groups:
            return "<p class=note>No share groups.</p>"
        names = {t.topic_id: t.name for t in broker.topics.by_name.values()}
        out = ["<table><thead><tr><th>Group</th><th>State</th><th>Epoch</th><th>Members (assignment)</th>"
               "<th>Lag</th><th></th></tr></thead><tbody>"]
        for g in groups:
            members = "".join(
                f"<li><code>{esc(m.member_id)}</code> {esc(m.client_id)}@{esc(m.client_host)}: "
                + esc(", ".join(f"{names.get(tid, tid)}[{','.join(map(str, sorted(ps)))}]"
                                for tid, ps in sorted(m.assignment.items(), key=lambda kv: str(names.get(kv[0])))))
                + "</li>" for m in g.members.values())
            out.append(f'<tr data-group="{esc(g.group_id)}"><td>{esc(g.group_id)}</td><td>{esc(g.state)}</td>'
                       f"<td class=n>{g.epoch}</td><td><ul>{members or '<li class=note>none</li>'}</ul></td>"
                       f"<td>{self._lag_chart(('share', g.group_id))}</td>"
                       f"<td>{self._write_buttons('share', g.group_id, not g.members)}</td></tr>")
        out.append("</tbody></table>")
        return "".join(out)

    def _strip(self, segments: list[Segment], hidden: int) -> str:
        if not segments:
            return '<p class=note>empty window</p>'
        free = STRIP_WIDTH - STRIP_MIN * len(segments)
        total = sum(s.last - s.first + 1 for s in segments)
        x = 0.0
        rects = []
        for s in segments:
            size = s.last - s.first + 1
            width = STRIP_MIN + max(free, 0) * size / total
            tip = f"{s.first}–{s.last} {s.state}" if s.last != s.first else f"{s.first} {s.state}"
            if s.count > 0:
                tip += f", delivery count {s.count}"
            if s.owner:
                tip += f", held by {s.owner}"
            if s.lock_left_ms is not None:
                tip += f", lock {max(s.lock_left_ms, 0) / 1000:.1f} s left"
            rects.append(f'<rect class="seg s-{s.state}" x="{x:.2f}" y="0" width="{width:.2f}" height="16" '
                         f'data-state="{s.state}" data-first="{s.first}" data-last="{s.last}" data-count="{s.count}" '
                         f'data-owner="{esc(s.owner)}"><title>{esc(tip)}</title></rect>')
            x += width
        note = f"<p class=note>{hidden} more ranges not drawn</p>" if hidden else ""
        return (f'<svg class="strip" viewBox="0 0 {STRIP_WIDTH} 16" preserveAspectRatio="none" role="img">'
                + "".join(rects) + "</svg>" + note)

    def _held(self, segments: list[Segment]) -> str:
        segs = [s for s in segments if s.state == "acquired"][:20]
        if not segs:
            return ""
        rows = "".join(f"<tr><td class=n>{s.first}–{s.last}</td><td><code>{esc(s.owner)}</code></td>"
                       f"<td class=n>{s.count}</td><td class=n>{max(s.lock_left_ms or 0, 0) / 1000:.1f} s</td></tr>"
                       for s in segs)
        return ("<table class=held><thead><tr><th>Acquired</th><th>Member</th><th>Deliveries</th><th>Lock left</th>"
                "</tr></thead><tbody>" + rows + "</tbody></table>")

    def _leaders(self) -> list[SharePartitionLeader]:
        return sorted((leader for leader in list(self.broker.share.leaders.values()) if leader.sp is not None),
                      key=lambda lead: (lead.group_id, lead.partition.topic.name, lead.partition.index))

    def _inflight(self) -> str:
        leaders = self._leaders()
        if not leaders:
            return "<p class=note>No share partition is loaded (a partition loads when a member fetches it).</p>"
        shown = leaders
        if len(leaders) > STRIPS:  # the busiest windows, kept in their order
            busiest = set(map(id, sorted(leaders, key=lambda lead: -(lead.sp.in_flight_count() if lead.sp else 0))[:STRIPS]))
            shown = [lead for lead in leaders if id(lead) in busiest]
        out = ['<p class="legend"><span class="key s-available">available</span><span class="key s-acquired">acquired'
               '</span><span class="key s-acknowledged">acknowledged</span><span class="key s-archived">archived</span>'
               '<span class="key s-unread">not read yet</span></p>']
        for leader in shown:
            sp = leader.sp
            assert sp is not None
            segments, hidden = self.segments(leader)
            out.append(f'<div class="sp" data-group="{esc(leader.group_id)}" data-topic="{esc(leader.partition.topic.name)}" '
                       f'data-partition="{leader.partition.index}"><h3>{esc(leader.group_id)} · '
                       f'{esc(leader.partition.topic.name)}-{leader.partition.index}</h3>'
                       f'<p class=note>SPSO {sp.start_offset} · SPEO {sp.end_offset} · high watermark '
                       f'{leader.partition.log.high_watermark} · in flight {sp.in_flight_count()} · '
                       f'acquired {sp.acquired_count()}</p>{self._strip(segments, hidden)}{self._held(segments)}</div>')
        if len(shown) < len(leaders):
            out.append(f"<p class=note>{len(leaders) - len(shown)} more loaded share partitions with fewer records in "
                       "flight (all in /api/state)</p>")
        return "".join(out)

    def _poison(self) -> str:
        rows: list[str] = []
        for leader in self._leaders():
            limit = self.broker.share_groups.limits(leader.group_id).delivery_count_limit
            for offset, state, count in self.poison(leader, limit):
                if len(rows) >= POISON_TOTAL:
                    break
                key, value = self.payload(leader, offset)
                history = [e for e in leader.events() if e.first <= offset <= e.last]
                hist = "".join(f"<li>{esc(time.strftime('%H:%M:%S', time.gmtime(e.wall_ms / 1000)))} {esc(e.kind)}"
                               + (f" by <code>{esc(e.member)}</code>" if e.member else "")
                               + (f" (delivery {e.delivery_count})" if e.delivery_count > 0 else "") + "</li>"
                               for e in history[-12:])
                rows.append(f'<tr data-offset="{offset}"><td>{esc(leader.group_id)}</td>'
                            f"<td>{esc(leader.partition.topic.name)}-{leader.partition.index}</td><td class=n>{offset}</td>"
                            f"<td>{esc(state)}</td><td class=n>{count}</td><td><code>{esc(key)}</code></td>"
                            f"<td><code>{esc(value)}</code></td><td><ul class=hist>{hist}</ul></td></tr>")
        if not rows:
            return "<p class=note>None: no loaded share partition holds an archived record or one at its delivery limit.</p>"
        return ("<table><thead><tr><th>Group</th><th>Partition</th><th>Offset</th><th>State</th><th>Deliveries</th>"
                "<th>Key</th><th>Value</th><th>History (since the view started)</th></tr></thead><tbody>"
                + "".join(rows) + "</tbody></table>")

    def _other_groups(self) -> str:
        broker = self.broker
        out = []
        for gid in sorted(broker.consumer_groups.groups):
            d = broker.consumer_groups.describe(gid)
            members = "".join(
                f"<li><code>{esc(m['member_id'])}</code> {esc(m['client_id'])}@{esc(m['client_host'])}: "
                + esc(", ".join(f"{t['topic_name']}[{','.join(map(str, t['partitions']))}]"
                                for t in m["assignment"]["topic_partitions"])) + "</li>" for m in d["members"])
            out.append(self._group_row(gid, "consumer", d["group_state"], members, not d["members"]))
        for gid, group in sorted(broker.classic_groups.groups.items()):
            if group.state == "Dead":
                continue
            members = "".join(f"<li><code>{esc(m.member_id)}</code> {esc(m.client_id)}@{esc(m.client_host)}: "
                              f"{esc(_classic_assignment(m.assignment))}</li>" for m in group.members.values())
            out.append(self._group_row(gid, "classic", group.state, members, group.state == "Empty"))
        if not out:
            return "<p class=note>No consumer or classic groups.</p>"
        return ("<table><thead><tr><th>Group</th><th>Protocol</th><th>State</th><th>Members (assignment)</th>"
                "<th>Lag</th><th></th></tr></thead><tbody>" + "".join(out) + "</tbody></table>")

    def _group_row(self, gid: str, protocol: str, state: str, members: str, empty: bool) -> str:
        return (f'<tr data-group="{esc(gid)}"><td>{esc(gid)}</td><td>{protocol}</td><td>{esc(state)}</td>'
                f"<td><ul>{members or '<li class=note>none</li>'}</ul></td>"
                f"<td>{self._lag_chart(('offsets', gid))}</td><td>{self._write_buttons(protocol, gid, empty)}</td></tr>")

    # -- JSON ------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The machine-readable snapshot (/api/state): what the page shows, as data."""
        broker = self.broker
        share_partitions = []
        for leader in self._leaders():
            sp = leader.sp
            assert sp is not None
            segments, hidden = self.segments(leader)
            share_partitions.append({
                "group": leader.group_id, "topic": leader.partition.topic.name, "partition": leader.partition.index,
                "start_offset": sp.start_offset, "end_offset": sp.end_offset,
                "high_watermark": leader.partition.log.high_watermark, "ranges_not_shown": hidden,
                "ranges": [{"first": s.first, "last": s.last, "state": s.state, "delivery_count": s.count,
                            "member": s.owner or None, "lock_left_ms": s.lock_left_ms} for s in segments]})
        return {
            "topics": [{"topic": p.topic.name, "partition": p.index, "log_start_offset": p.log.log_start_offset,
                        "high_watermark": p.log.high_watermark, "size": p.log.size_bytes}
                       for p in sorted(broker.topics.all_partitions(), key=lambda p: (p.topic.name, p.index))],
            "share_groups": [{"group": g.group_id, "state": g.state, "epoch": g.epoch,
                              "members": sorted(g.members)} for g in broker.share_groups.groups.values()],
            "share_partitions": share_partitions,
            "lag": {f"{kind}:{gid}": list(samples) for (kind, gid), samples in self.lag.items()},
            "write_enabled": self.write_enabled,
        }

    def records(self, group_id: str, topic_name: str, index: int, first: int, last: int) -> dict[str, Any]:
        """The state of offsets first..last of a share partition, as ranges (for `share-groups
        --describe --offsets A-B`): live from a loaded leader (with holders and lock time left),
        else from the share coordinator's persisted state (no record is acquired then). Below
        the share-partition start offset records are complete (acknowledged or archived: the
        broker keeps no difference there); at or past the high watermark they do not exist yet."""
        broker = self.broker
        topic = broker.topics.get(topic_name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return {"error": "UNKNOWN_TOPIC_OR_PARTITION", "message": f"Topic {topic_name} partition {index} does not exist."}
        if broker.group_type(group_id) != "share":
            return {"error": "GROUP_ID_NOT_FOUND", "message": f"Group {group_id} is not a share group."}
        hwm = topic.partitions[index].log.high_watermark
        leader = broker.share.existing_leader(group_id, topic.topic_id, index)
        cached: list[tuple[int, int, str, int, str, int | None]] = []
        if leader is not None and leader.sp is not None:
            start, source = leader.sp.start_offset, "leader"
            now = leader.clock.monotonic_ms()
            for p in leader.sp.ranges():
                lock = p.deadline - now if p.state is RecordState.ACQUIRED and p.deadline is not None else None
                cached.append((p.first, p.last, STATE_NAMES[p.state], p.count, p.owner, lock))
        else:
            stored = getattr(getattr(broker.share_persister, "store", None), "states", {}).get(
                (group_id, topic.topic_id, index))
            if stored is None or stored.start_offset < 0:
                return {"error": "NONE", "message": None, "source": "none", "start_offset": -1, "high_watermark": hwm,
                        "ranges": []}
            start, source = stored.start_offset, "persisted"
            cached = [(b.first_offset, b.last_offset, STATE_NAMES[RecordState(b.delivery_state)], b.delivery_count, "",
                       None) for b in stored.batches]
        out: list[dict[str, Any]] = []

        def add(lo: int, hi: int, state: str, count: int, member: str = "", lock: int | None = None) -> None:
            lo, hi = max(lo, first), min(hi, last, hwm - 1)
            if lo <= hi:
                out.append({"first": lo, "last": hi, "state": state, "delivery_count": count,
                            "member": member or None, "lock_left_ms": lock})

        add(first, start - 1, "complete", -1)
        cursor = start
        for lo, hi, state, count, member, lock in cached:
            if hi < start:
                continue
            lo = max(lo, start)
            if lo > cursor:
                add(cursor, lo - 1, "available", 0)
            add(lo, hi, state, count, member, lock)
            cursor = hi + 1
        add(cursor, hwm - 1, "available", 0)
        return {"error": "NONE", "message": None, "source": source, "start_offset": start, "high_watermark": hwm,
                "ranges": out}

    # -- writes (admin.ui.write.enable) ----------------------------------------------------------

    async def delete_group(self, kind: str, group_id: str) -> tuple[str, str | None]:
        """DeleteGroups' rules: only an empty group; Kafka's error name and message otherwise."""
        broker = self.broker
        if kind == "share":
            code, message = await broker.share_groups.delete_group(group_id)
        elif kind == "consumer":
            code, message = await broker.consumer_groups.delete_group(group_id)
        else:
            code, message = await broker.classic_groups.delete_group(group_id)
        return code.name.upper(), message

    async def reset_share_group(self, group_id: str, to: str) -> tuple[str, str | None]:
        """`share-groups --reset-offsets --to-earliest|--to-latest` for every partition the
        group has initialized: AlterShareGroupOffsets' rules (an empty group only)."""
        broker = self.broker
        group = broker.share_groups.groups.get(group_id)
        if group is None:
            return "GROUP_ID_NOT_FOUND", f"Group {group_id} not found."
        offsets: dict[str, dict[int, int]] = {}
        for topic_id, parts in group.initialized.items():
            topic = broker.topics.by_id.get(topic_id)
            if topic is None:
                continue
            offsets[topic.name] = {
                i: (topic.partitions[i].log.log_start_offset if to == "earliest" else topic.partitions[i].log.high_watermark)
                for i in parts if 0 <= i < len(topic.partitions)}
        try:
            results = await broker.share_groups.alter_offsets(group_id, offsets)
        except KafkaError as exc:
            return exc.code.name.upper(), exc.message
        for outcome in results.values():
            for code, message in outcome.values():
                if code:
                    return code.name.upper(), message
        return "NONE", None


def _classic_assignment(data: bytes) -> str:
    from sharebroker.broker.groups.consumer_protocol import decode_assignment
    try:
        return ", ".join(f"{t}[{','.join(map(str, ps))}]" for t, ps in decode_assignment(data))
    except ValueError:
        return f"({len(data)} bytes)"
