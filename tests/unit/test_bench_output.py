"""The bench commands leave the committed figures (bench/results) alone unless told to refresh them
(--save, full runs only), write ad-hoc results to an ignored folder, and skip charts quietly
without matplotlib."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "bench" / "results"


def fingerprint() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(COMMITTED.iterdir()) if p.is_file()}


def test_an_ad_hoc_run_writes_outside_the_committed_results(tmp_path, capsys):
    from bench import run

    before = fingerprint()
    run.main(["--quick", "--only", "no-such-workload", "--out", str(tmp_path)])
    assert fingerprint() == before
    assert (tmp_path / "latest.json").exists() and (tmp_path / "latest.md").exists()


def test_default_output_is_ignored_by_git_and_save_is_explicit():
    from bench import run

    ap = run.build_parser()
    default = run.output_dir(ap, ap.parse_args([]))
    assert default != COMMITTED and default.resolve().is_relative_to(ROOT)
    ignored = subprocess.run(["git", "check-ignore", "-q", str(default / "latest.json")], cwd=ROOT)
    assert ignored.returncode == 0, f"{default} is not ignored by git"
    assert run.output_dir(ap, ap.parse_args(["--quick"])) == default
    assert run.output_dir(ap, ap.parse_args(["--save"])) == COMMITTED
    for refused in (["--save", "--quick"], ["--save", "--only", "w3_produce"], ["--save", "--out", "x"]):
        with pytest.raises(SystemExit):
            run.output_dir(ap, ap.parse_args(refused))


def test_profile_output_is_ignored_by_git():
    from bench import profile

    assert profile.RESULTS != COMMITTED
    ignored = subprocess.run(["git", "check-ignore", "-q", str(profile.RESULTS / "profile-produce.txt")], cwd=ROOT)
    assert ignored.returncode == 0


def test_charts_are_skipped_with_one_note_without_matplotlib(tmp_path, monkeypatch, capsys):
    from bench import report

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the bench extra were not installed
    res = {"mode": "quick", "runs": 3, "started": "now", "host": {"cpus": 2, "python": "3", "platform": "x"},
           "workloads": {}, "errors": {}, "wall_seconds": 1.0}
    report.write(res, tmp_path)
    out = capsys.readouterr().out
    assert "charts failed" not in out and "No module named" not in out
    assert out.count("matplotlib") == 1 and "charts skipped" in out
    assert "charts" not in res["errors"]
