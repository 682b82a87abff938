"""Table, JSON, Markdown and PNG charts of a benchmark run (latest.* in bench/out, or bench/results
with `python -m bench --save`). Without matplotlib the charts are skipped with one note."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _fmt(v: float, unit: str) -> str:
    if unit in ("rec/s",):
        return f"{v:,.0f}"
    if unit == "files":
        return f"{v:,.0f}"
    if unit == "ms":
        return f"{v:,.1f}"
    return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"


def rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per figure: name, unit, median/min/max, ratio to a peer, the issue's target."""
    w, out = res["workloads"], []

    def add(name: str, s: dict[str, Any], unit: str, ratio: str = "", target: str = "", ok: bool | None = None):
        out.append({"figure": name, "unit": unit, "median": s["median"], "min": s["min"], "max": s["max"],
                    "ratio": ratio, "target": target, "ok": ok})

    disk = w.get("peer_disk", {}).get("mb_per_s")
    mock = w.get("peer_mock")
    mock_produce = w.get("peer_mock_produce", {}).get("mb_per_s")
    if disk:
        add("peer: raw sequential append (1 MiB writes, 1 fsync)", disk, "MB/s")
    if mock_produce:
        add("peer: mock cluster produce 1 KB acks=all linger 5 ms (the client's ceiling)", mock_produce, "MB/s")
    if mock:
        for n, v in mock["by_backlog"].items():
            add(f"peer: mock cluster share consume, {int(n):,} backlog", v["records_per_s"], "rec/s")
            add(f"peer: mock cluster share consume, {int(n):,} backlog, incl. group join", v["records_per_s_from_start"],
                "rec/s")
    mock_best = mock["best"]["median"] if mock else None
    w1 = w.get("w1_share_backlog")
    if w1:
        backlogs = sorted(w1["by_backlog"], key=int)
        base = w1["by_backlog"][backlogs[0]]["records_per_s"]["median"]
        for n in backlogs:
            s = w1["by_backlog"][n]["records_per_s"]
            ratio = []
            if mock_best:
                ratio.append(f"{s['median'] / mock_best:.2f}x mock best")
            ratio.append(f"{s['median'] / base:.2f}x own {int(backlogs[0]):,}")
            target, ok = "", None
            if int(n) == 1_000_000:
                ok = s["median"] >= 150_000 and (not mock_best or s["median"] >= mock_best) and s["median"] >= 0.8 * base
                target = ">=150k, >=1.0x mock, >=0.8x own 10k"
            add(f"w1 share consume, {int(n):,} backlog, 4 consumers", s, "rec/s", "; ".join(ratio), target, ok)
            add(f"w1 share consume, {int(n):,} backlog, 4 consumers, incl. group join",
                w1["by_backlog"][n]["records_per_s_from_start"], "rec/s")
    w2 = w.get("w2_share_live")
    if w2:
        add("w2 share live 5k/s: p50 latency", w2["p50_ms"], "ms")
        add("w2 share live 5k/s: p99 latency", w2["p99_ms"], "ms", "", "<25 ms", w2["p99_ms"]["median"] < 25)
        add("w2 share live 5k/s: max latency", w2["max_ms"], "ms")
    w2b = w.get("w2_share_live_linger0")
    if w2b:
        for q in ("p50", "p99", "max"):
            add(f"w2 share live 5k/s, producer linger.ms=0: {q} latency", w2b[f"{q}_ms"], "ms")
    w3 = w.get("w3_produce")
    if w3:
        for mode in ("default", "fsync"):
            if mode not in w3:
                continue
            s = w3[mode]["mb_per_s"]
            ratio = "; ".join(([f"{s['median'] / disk['median']:.2f}x raw disk"] if disk else [])
                              + ([f"{s['median'] / mock_produce['median']:.2f}x mock"] if mock_produce else []))
            target, ok = ("", None)
            if mode == "default":
                target = ">=150 MB/s, >=0.5x disk"
                ok = s["median"] >= 150 and (not disk or s["median"] >= 0.5 * disk["median"])
            add(f"w3 produce 1 KB acks=all linger 5 ms ({mode})", s, "MB/s", ratio, target, ok)
            add(f"w3 produce 1 KB acks=all linger 5 ms ({mode})", w3[mode]["records_per_s"], "rec/s")
    w4 = w.get("w4_classic")
    if w4:
        add(f"w4 classic fetch by assign, {w4['records']:,} records", w4["records_per_s"], "rec/s")
    if w1:
        add("w5 broker RSS idle", w1["rss_idle_mb"], "MB", "", "<80 MB", w1["rss_idle_mb"]["median"] < 80)
        for n, s in sorted(w1["rss_after_mb"].items(), key=lambda kv: int(kv[0])):
            big = int(n) == 1_000_000
            add(f"w5 broker RSS after w1, {int(n):,} backlog", s, "MB", "",
                "<200 MB" if big else "", (s["median"] < 200) if big else None)
    w6 = w.get("w6_startup")
    if w6:
        add("w6 start-up, empty data dir", {k: w6["empty_s"][k] * 1000 for k in ("median", "min", "max")}, "ms",
            "", "<500 ms", w6["empty_s"]["median"] < 0.5)
        if "fixture_s" in w6:
            add("w6 test fixture, entered to first Metadata", {k: w6["fixture_s"][k] * 1000 for k in ("median", "min", "max")},
                "ms", "", "<500 ms", w6["fixture_s"]["median"] < 0.5)
        gb = w6["big_log_bytes"] / 1e9
        add(f"w6 start-up, {gb:.2f} GB of log + share state", {k: w6["big_log_s"][k] * 1000 for k in ("median", "min", "max")},
            "ms", "", "<2000 ms (at 1 GB)", (w6["big_log_s"]["median"] < 2) if gb >= 1 else None)
    _count_rows(w, add)
    return out


def _count_rows(w: dict[str, Any], add: Any) -> None:
    """Issue 24's counts: job queue, members, groups, connections, partitions, the long run, workers."""
    for r in w.get("w7_jobs", {}).values():
        s, mock = r["jobs_per_s"], r["mock_jobs_per_s"]
        target, ok = "", None
        if r["max_poll_records"] == 1:
            target = ">=1.0x mock" + (", >=20k/s" if r["consumers"] == 8 else "")
            ok = s["median"] >= mock["median"] and (r["consumers"] != 8 or s["median"] >= 20_000)
        elif r["max_poll_records"] == 100:
            target, ok = ">=200k/s", s["median"] >= 200_000
        note = f"{s['median'] / mock['median']:.2f}x mock ({mock['median']:,.0f})"
        if "server_cpu_us_per_job" in r:  # results from before 2026-12-02 have no CPU figures
            note += (f"; CPU µs/job: broker {r['server_cpu_us_per_job']['median']:,.0f} + clients "
                     f"{r['client_cpu_us_per_job']['median']:,.0f}, mock {r['mock_server_cpu_us_per_job']['median']:,.0f}"
                     f" + clients {r['mock_client_cpu_us_per_job']['median']:,.0f}")
        add(f"w7 job queue, {r['consumers']} consumer(s), max.poll.records={r['max_poll_records']}", s, "rec/s",
            note, target, ok)
    lat = w.get("w7_job_latency")
    if lat:
        ours, mock = lat["sharebroker"]["p99_ms"], lat.get("mock", {}).get("p99_ms")

        def behind(peer: str) -> str:  # a peer that fell behind the rate: its percentiles flatter it
            acked = lat.get(peer, {}).get("acknowledged", {"min": 1.0})["min"]
            return f" (fell behind: as little as {acked:.0%} acknowledged in time)" if acked < 1 else ""

        ours_behind = behind("sharebroker")
        add(f"w7 job queue at {lat['rate']:,} jobs/s: produce-to-acknowledged p50{ours_behind}",
            lat["sharebroker"]["p50_ms"], "ms")
        add(f"w7 job queue at {lat['rate']:,} jobs/s: produce-to-acknowledged p99{ours_behind}", ours, "ms",
            f"mock {mock['median']:.1f} ms{behind('mock')}" if mock else "", "<10 ms",
            not ours_behind and ours["median"] < 10)
    for n, r in w.get("w8_members", {}).items():
        add(f"w8 share group of {int(n):,} members: settled after the join storm", r["settled_s"], "s")
        if "after_storm_s" in r:  # from the last join's answer: one heartbeat interval is the floor
            add(f"w8 share group of {int(n):,} members: settled after the last join", r["after_storm_s"], "s")
        big = int(n) >= 1000
        add(f"w8 share group of {int(n):,} members: steady heartbeat p99", r["p99_ms"], "ms", "",
            "<10 ms" if big else "", (r["p99_ms"]["median"] < 10) if big else None)
        add(f"w8 share group of {int(n):,} members: broker CPU per heartbeat", r["cpu_us_per_heartbeat"], "µs")
    for n, r in w.get("w9_groups", {}).items():
        add(f"w9 {int(n):,} idle classic + {int(n):,} idle share groups: broker idle CPU", r["idle_cpu_pct"], "%")
        add(f"w9 {int(n):,} + {int(n):,} groups: restart", r["restart_s"], "s")
        add(f"w9 {int(n):,} + {int(n):,} groups: an active share member's heartbeat p99", r["hb_p99"], "ms")
        add(f"w9 {int(n):,} + {int(n):,} groups: broker RSS", r["rss_mb"], "MB")
    for n, r in w.get("w10_connections", {}).items():
        if int(n) >= 100:  # fewer are within RSS's page-sized noise
            add(f"w10 {int(n):,} idle connections: broker memory per connection", r["kb_per_conn"], "KB", "",
                "<20 KB", r["kb_per_conn"]["median"] < 20)
        add(f"w10 {int(n):,} idle connections: active client produce p99", r["p99_ms"], "ms")
    for n, r in w.get("w11_partitions", {}).items():
        if "restart_s" in r:
            ten_k = int(n) == 10_000
            add(f"w11 {int(n):,} partitions (ulimit -n 4096): restart", r["restart_s"], "s", "",
                "<2 s" if ten_k else "", (r["restart_s"]["median"] < 2) if ten_k else None)
        if "busy_max_ms" in r:
            add(f"w11 {int(n):,} partitions: another client's slowest round trip while they were created",
                r["busy_max_ms"], "ms")
        if "metadata_p50_ms" in r:
            add(f"w11 {int(n):,} partitions: Metadata(all) p50", r["metadata_p50_ms"], "ms")
        if "metadata_p99_ms" in r:
            add(f"w11 {int(n):,} partitions: Metadata(all) p99", r["metadata_p99_ms"], "ms")
        if "after_restart_rss_mb" in r:
            add(f"w11 {int(n):,} partitions: RSS after restart", r["after_restart_rss_mb"], "MB", "", "<300 MB",
                r["after_restart_rss_mb"]["median"] < 300)
        if "after_restart_fds" in r:
            add(f"w11 {int(n):,} partitions: open files after restart", r["after_restart_fds"], "files")
    soak = w.get("w12_soak")
    if soak:
        start_min, end_min = soak["rss_mb"]["start_min"], soak["rss_mb"]["end_min"]
        for key, name, unit in (("rss_mb", "broker RSS", "MB"), ("fds", "open files", "files"),
                                ("share_state_mb", "__share_group_state on disk", "MB"),
                                ("consumer_offsets_mb", "__consumer_offsets on disk", "MB"),
                                ("p99_ms", "produce delivery p99", "ms")):
            v = soak[key]
            when, before = (("the last minute", "the first minute") if key == "p99_ms" else
                            (f"minute {end_min:.0f}", f"minute {start_min:.0f}"))
            add(f"w12 long run ({soak['minutes']:g} min, {soak['rate']} rec/s): {name}, {when}",
                {"median": v["end"], "min": v["end"], "max": v["end"]}, unit,
                f"{before}: {_fmt(v['start'], unit)}; change {v['change']:+.2f}")
    workers = w.get("w13_workers")
    if workers:
        one, two = workers["by_workers"]["1"], workers["by_workers"]["2"]
        names = {"job_queue_mpr1": "job queue, 8 consumers, max.poll.records=1",
                 "job_queue_mpr100": "job queue, 8 consumers, max.poll.records=100",
                 "share_backlog": f"share consume of {workers['sizes']['backlog']:,} records"}
        for label, name in names.items():
            for count, r in (("1 worker", one[label]), ("2 workers", two[label])):
                add(f"w13 {name}, {count}", r["rate"], "rec/s",
                    f"{r['cpu_us']['median']:.1f} µs broker CPU each" +
                    (f"; {r['rate']['median'] / one[label]['rate']['median']:.2f}x 1 worker" if count != "1 worker" else ""))
        for count, r in (("1 worker", one["start_up"]), ("2 workers", two["start_up"])):
            add(f"w13 start-up, {count}", {k: r["start_s"][k] * 1000 for k in ("median", "min", "max")}, "ms")
            add(f"w13 idle RSS summed, {count}", r["idle_rss_mb"], "MB", f"PSS {r['idle_pss_mb']['median']:.0f} MB")


def table(rs: list[dict[str, Any]]) -> list[str]:
    head = ["figure", "median", "min", "max", "unit", "ratio", "target"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    for r in rs:
        tgt = r["target"] + ("" if r["ok"] is None else (" ✅" if r["ok"] else " ❌"))
        lines.append(f"| {r['figure']} | {_fmt(r['median'], r['unit'])} | {_fmt(r['min'], r['unit'])} | "
                     f"{_fmt(r['max'], r['unit'])} | {r['unit']} | {r['ratio']} | {tgt.strip()} |")
    return lines


def charts(res: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    w = res["workloads"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plotted = False
    for key, label, marker in (("w1_share_backlog", "sharebroker share consume (4 consumers)", "o"),
                               ("peer_mock", "librdkafka mock cluster share consume (4 consumers)", "s")):
        if key not in w:
            continue
        items = sorted(w[key]["by_backlog"].items(), key=lambda kv: int(kv[0]))
        xs = [int(k) for k, _ in items]
        med = [v["records_per_s"]["median"] for _, v in items]
        lo = [m - v["records_per_s"]["min"] for m, (_, v) in zip(med, items)]
        hi = [v["records_per_s"]["max"] - m for m, (_, v) in zip(med, items)]
        ax.errorbar(xs, med, yerr=[lo, hi], marker=marker, capsize=4, label=label)
        plotted = True
    if "w4_classic" in w:
        s = w["w4_classic"]["records_per_s"]
        ax.errorbar([w["w4_classic"]["records"]], [s["median"]], yerr=[[s["median"] - s["min"]], [s["max"] - s["median"]]],
                    marker="^", capsize=4, linestyle="none", label="sharebroker classic fetch (1 consumer)")
        plotted = True
    if plotted:
        ax.set_xscale("log")
        ax.set_xlabel("backlog (records of 100 B)")
        ax.set_ylabel("records/s (median, min-max bars)")
        ax.set_title(f"Consume throughput against backlog size ({res['mode']} mode)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "throughput_vs_backlog.png", dpi=110)
        made.append("throughput_vs_backlog.png")
    plt.close(fig)

    variants = [(k, label) for k, label in (("w2_share_live", "producer linger.ms=5"),
                                              ("w2_share_live_linger0", "producer linger.ms=0")) if k in w]
    if variants:
        fig, ax = plt.subplots(figsize=(6.5, 4))
        names = ["p50", "p99", "max"]
        width = 0.8 / len(variants)
        for j, (key, label) in enumerate(variants):
            stats = [w[key][f"{q}_ms"] for q in names]
            med = [s["median"] for s in stats]
            xs = [i + (j - (len(variants) - 1) / 2) * width for i in range(len(names))]
            ax.bar(xs, med, width, yerr=[[m - s["min"] for m, s in zip(med, stats)],
                                         [s["max"] - m for m, s in zip(med, stats)]], capsize=5, label=label)
            for x, m in zip(xs, med):
                ax.text(x, m, f"{m:.1f}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(names)), names)
        ax.axhline(25, color="grey", linestyle="--", label="p99 target 25 ms")
        ax.set_ylabel("produce-to-receive latency, ms")
        rate = w[variants[0][0]]["target_rate"]
        ax.set_title(f"Share consume live at {rate:,} rec/s, 2 consumers")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "latency_percentiles.png", dpi=110)
        plt.close(fig)
        made.append("latency_percentiles.png")
    jobs = w.get("w7_jobs")
    if jobs:
        fig, ax = plt.subplots(figsize=(7, 4))
        keys = list(jobs)
        xs = list(range(len(keys)))
        for offset, field, label in ((-0.2, "jobs_per_s", "sharebroker"), (0.2, "mock_jobs_per_s", "librdkafka mock")):
            med = [jobs[k][field]["median"] for k in keys]
            ax.bar([x + offset for x in xs], med, 0.4, label=label,
                   yerr=[[m - jobs[k][field]["min"] for m, k in zip(med, keys)],
                         [jobs[k][field]["max"] - m for m, k in zip(med, keys)]], capsize=3)
            for x, m in zip(xs, med):
                ax.text(x + offset, m, f"{m / 1000:.1f}k", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(xs, [f"{jobs[k]['consumers']} cons.\nmax.poll {jobs[k]['max_poll_records']}" for k in keys],
                      fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("acknowledged jobs/s (median, min-max; log)")
        ax.set_title(f"Job queue: explicit ACCEPT per job, 1 partition, {jobs[keys[0]]['jobs']:,} jobs")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "job_queue.png", dpi=110)
        plt.close(fig)
        made.append("job_queue.png")
    made += _count_charts(w, out, plt)
    return made


def _curve(ax: Any, by_count: dict[str, Any], key: str, label: str, marker: str = "o") -> None:
    """One figure against the count: medians joined, min-max bars."""
    items = sorted(((int(n), r[key]) for n, r in by_count.items() if key in r), key=lambda kv: kv[0])
    if not items:
        return
    xs, stats = [n for n, _ in items], [v for _, v in items]
    med = [v["median"] for v in stats]
    ax.errorbar(xs, med, yerr=[[m - v["min"] for m, v in zip(med, stats)], [v["max"] - m for m, v in zip(med, stats)]],
                marker=marker, capsize=3, label=label)


def _panels(plt: Any, out: Path, name: str, title: str, xlabel: str, by_count: dict[str, Any],
            panels: list[tuple[str, list[tuple[str, str]]]], symlog: bool = False) -> str:
    """A row (or grid) of small charts sharing the count axis: each panel a y label and its curves."""
    cols = min(len(panels), 2 if len(panels) == 4 else 3)
    rows_n = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.3 * rows_n), squeeze=False)
    for ax, (ylabel, curves) in zip(axes.flat, panels):
        for i, (key, label) in enumerate(curves):
            _curve(ax, by_count, key, label, "os^"[i % 3])
        if symlog:
            ax.set_xscale("symlog", linthresh=1)
        else:
            ax.set_xscale("log")
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        if len(curves) > 1:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title + " (median, min-max bars)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def _count_charts(w: dict[str, Any], out: Path, plt: Any) -> list[str]:
    made = []
    if w.get("w11_partitions"):
        made.append(_panels(plt, out, "partitions.png", "Partitions, ulimit -n 4096", "partitions", w["w11_partitions"], [
            ("broker RSS, MB", [("rss_mb", "after creation"), ("after_restart_rss_mb", "after restart")]),
            ("open files", [("fds", "after creation"), ("after_restart_fds", "after restart")]),
            ("Metadata(all), ms", [("metadata_p50_ms", "p50"), ("metadata_p99_ms", "p99")]),
            ("seconds", [("create_s", "create all"), ("restart_s", "start-up (restart)")])]))
    if w.get("w8_members"):
        made.append(_panels(plt, out, "members.png", "One share group of N members", "members", w["w8_members"], [
            ("steady heartbeat latency, ms", [("p50_ms", "p50"), ("p99_ms", "p99")]),
            ("settle time, s", [("settled_s", "from the join storm"), ("after_storm_s", "after the last join")]),
            ("broker CPU per heartbeat, µs", [("cpu_us_per_heartbeat", "CPU/heartbeat")])]))
    if w.get("w9_groups"):
        made.append(_panels(plt, out, "groups.png", "N idle classic + N idle share groups", "groups of each kind",
                            w["w9_groups"], [
            ("broker idle CPU, %", [("idle_cpu_pct", "idle CPU")]),
            ("broker RSS, MB", [("rss_mb", "RSS")]),
            ("an active group's p99, ms", [("hb_p99", "share heartbeat"), ("commit_p99", "offset commit")]),
            ("restart, s", [("restart_s", "restart")])]))
    if w.get("w10_connections"):
        # memory per connection only from 100 up: below that it is within RSS's page-sized noise
        conns = {n: {k: v for k, v in r.items() if k != "kb_per_conn" or int(n) >= 100}
                 for n, r in w["w10_connections"].items()}
        made.append(_panels(plt, out, "connections.png", "Idle connections beside one active producer",
                            "idle connections", conns, [
            ("broker RSS, MB", [("rss_mb", "RSS")]),
            ("memory per idle connection, KB", [("kb_per_conn", "KB/connection")]),
            ("active produce latency, ms", [("p50_ms", "p50"), ("p99_ms", "p99")])], symlog=True))
    if w.get("w12_soak"):
        made.append(_soak_chart(w["w12_soak"], out, plt))
    if w.get("w13_workers"):
        made.append(_workers_chart(w["w13_workers"], out, plt))
    return made


def _soak_chart(soak: dict[str, Any], out: Path, plt: Any) -> str:
    rows = soak["rows"]
    xs = [r["min"] for r in rows]
    fig, axes = plt.subplots(2, 2, figsize=(9, 6), sharex=True)
    for ax, ylabel, curves in ((axes[0][0], "broker RSS, MB", [("rss", "RSS")]),
                               (axes[0][1], "open files", [("fds", "descriptors")]),
                               (axes[1][0], "produce delivery latency, ms", [("p50", "p50"), ("p99", "p99")]),
                               (axes[1][1], "on disk, MB", [("state", "share state (__share_group_state)"),
                                                            ("offsets", "offsets (__consumer_offsets)"),
                                                            ("index", "offset + time indexes")])):
        for key, label in curves:
            ax.plot(xs, [r[key] for r in rows], marker=".", label=label)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if len(curves) > 1:
            ax.legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("minutes", fontsize=8)
    fig.suptitle(f"The long run: {soak['rate']} records/s produced, a classic group, two share consumers "
                 f"({soak['minutes']:g} min)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "soak.png", dpi=110)
    plt.close(fig)
    return "soak.png"


def _workers_chart(res: dict[str, Any], out: Path, plt: Any) -> str:
    phases = (("job_queue_mpr1", "job queue\nmax.poll.records=1"), ("job_queue_mpr100", "job queue\nmax.poll.records=100"),
              ("share_backlog", f"share consume\n{res['sizes']['backlog']:,} backlog"))
    fig, axes = plt.subplots(2, 3, figsize=(10, 6))
    for col, (label, title) in enumerate(phases):
        for row, (field, ylabel) in enumerate((("rate", "jobs or records/s"), ("cpu_us", "broker CPU per job/record, µs"))):
            ax = axes[row][col]
            stats = [res["by_workers"][w][label][field] for w in ("1", "2")]
            med = [v["median"] for v in stats]
            ax.bar([0, 1], med, 0.6, color=["C0", "C1"], capsize=4,
                   yerr=[[m - v["min"] for m, v in zip(med, stats)], [v["max"] - m for m, v in zip(med, stats)]])
            for x, m in enumerate(med):
                ax.text(x, m, f"{m:,.0f}" if m >= 100 else f"{m:.1f}", ha="center", va="bottom", fontsize=8)
            ax.set_xticks([0, 1], ["1 worker", "2 workers"], fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            if row == 0:
                ax.set_title(title, fontsize=9)
    fig.suptitle("1 worker process against 2 (median, min-max bars)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "workers.png", dpi=110)
    plt.close(fig)
    return "workers.png"


def write(res: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rs = rows(res)
    res["table"] = rs
    lines = table(rs)
    print("\n" + "\n".join(lines))
    if res["errors"]:
        print("\nFAILED workloads:")
        for k, v in res["errors"].items():
            print(f"  {k}: {v}")
    try:
        made = charts(res, out)
    except ImportError as e:
        made = []
        if e.name is not None and e.name.split(".")[0] != "matplotlib":
            raise
        print("charts skipped: matplotlib is not installed (pip install -e '.[bench]')")
    except Exception as e:  # noqa: BLE001
        made = []
        res["errors"]["charts"] = f"{type(e).__name__}: {e}"
        print(f"charts failed: {e}")
    (out / "latest.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    md = [f"# sharebroker benchmark ({res['mode']} mode)", "",
          f"Run {res['started']} on {res['host']['cpus']} CPUs, Python {res['host']['python']}; "
          f"each figure is the median of {res['runs']} runs, min and max beside it; wall time "
          f"{res['wall_seconds']:.0f} s. Every run uses a fresh broker subprocess and confluent-kafka clients "
          "in separate processes; only the consume/produce phase is timed. Share-consume rates are from the "
          "first delivery to the last distinct record (group join excluded; the rate including the join is "
          "in latest.json as `records_per_s_from_start`).", "", *lines, ""]
    for again in res.get("rerun", ()):
        md += [f"Run again on {again['started']} and merged in (`python -m bench.report FULL --merge RERUN`): "
               f"{', '.join(again['workloads'])}. {again['why']}", ""]
    if res["errors"]:
        md += ["## Failed workloads", ""] + [f"- `{k}`: {v}" for k, v in res["errors"].items()] + [""]
    md += [f"![{m}]({m})" for m in made]
    (out / "latest.md").write_text("\n".join(md) + "\n")
    print(f"\nwrote {out / 'latest.json'}, {out / 'latest.md'}" + "".join(f", {out / m}" for m in made))


def merge(full: dict[str, Any], rerun: dict[str, Any], why: str) -> dict[str, Any]:
    """A full run with some workloads taken from a later run of just those (`--only`), for a full
    run of which a few workloads were disturbed; the report says which, when and why."""
    full["workloads"].update(rerun["workloads"])
    for name in rerun["workloads"]:
        full["errors"].pop(name, None)
    full["errors"].update(rerun["errors"])
    full.setdefault("rerun", []).append({"started": rerun["started"], "workloads": list(rerun["workloads"]), "why": why})
    return full


if __name__ == "__main__":  # re-render the table, Markdown and charts from a results JSON, beside it
    import argparse

    ap = argparse.ArgumentParser(description="Re-render a results JSON's table, Markdown and charts beside it.")
    # Default: the last ad-hoc run; the committed bench/results only when named explicitly.
    ap.add_argument("results", type=Path, nargs="?", default=Path(__file__).parent / "out" / "latest.json")
    ap.add_argument("--merge", type=Path, help="a later run's latest.json whose workloads replace the same ones")
    ap.add_argument("--why", default="", help="with --merge: why those workloads were run again")
    args = ap.parse_args()
    data = json.loads(args.results.read_text())
    data["errors"].pop("charts", None)
    if args.merge:
        data = merge(data, json.loads(args.merge.read_text()), args.why)
    write(data, args.results.parent)
