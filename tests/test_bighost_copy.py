"""The COPY part of bench/bighost: the load's command (bench/copysplit.py,
run here through the real tail and GNU split with a stand-in client) and
summary.py's scoring of `advise --copy` against the measured loads (the
rows sweep.py writes to results.jsonl). No server."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


copysplit = _load("copysplit", BENCH / "copysplit.py")
summary = _load("bighost_summary", BENCH / "bighost" / "summary.py")


# ---------------------------------------------------------------- the command


@pytest.mark.parametrize("jobs", [1, 3])
def test_split_copy_cmd_feeds_every_record_once(tmp_path: Path, jobs: int) -> None:
    """Each stream gets its share of the records (the header dropped) and
    prints `COPY n` as psql does; copied_rows adds them up."""
    src = tmp_path / "it's data.csv"           # a quote in the path: the command quotes it
    with open(src, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "b"])
        for i in range(1000):
            w.writerow([i, f"customer {i}, order"])
    got = tmp_path / "got"
    got.mkdir()
    # a stand-in for psql: keeps its stdin, answers like \copy; the -c and
    # the \copy text the command appends land in its $1 and $2
    client = ["sh", "-c", f'f=$(mktemp -p {got}); cat > "$f"; echo "COPY $(wc -l < "$f")"; '
                          'test "$1" = -c && case "$2" in *"copy items FROM STDIN WITH (FORMAT '
                          'csv)"*) ;; *) exit 3 ;; esac', "psql"]
    cmd = copysplit.split_copy_cmd(client, str(src), jobs, "items")
    assert cmd.startswith("tail -n +2 ") and f"split -n r/{jobs} " in cmd
    res = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert copysplit.copied_rows(res.stdout) == 1000
    parts = sorted(p.read_text() for p in got.iterdir())
    assert len(parts) == jobs
    lines = sorted(ln for p in parts for ln in p.splitlines())
    assert lines == sorted(src.read_text().splitlines()[1:])
    assert all(abs(len(p.splitlines()) - 1000 / jobs) <= 1 for p in parts)


def test_split_copy_cmd_without_header_reads_the_file(tmp_path: Path) -> None:
    cmd = copysplit.split_copy_cmd(["psql", "-d", "db"], "/x/a.txt", 2, "t", fmt="text",
                                   header=False)
    assert "tail" not in cmd and cmd.endswith(" /x/a.txt") and "FORMAT text" in cmd


def test_copied_rows_counts_only_copy_tags() -> None:
    assert copysplit.copied_rows("COPY 10\nCOPY 5\nSET\nxCOPY 7\n") == 15
    assert copysplit.copied_rows("") == 0


# ---------------------------------------------------------------- the scoring


def _advice(mode: str, rec: int, preds: dict[int, float], probe_s: float | None = None,
            rc: int = 0) -> dict[str, Any]:
    doc = {"kind": "copy", "recommended_jobs": rec, "predicted_wall_s": preds[rec],
           "basis": "probe" if probe_s else "static", "confidence": "medium",
           "predictions": [{"jobs": j, "wall_s": s} for j, s in sorted(preds.items())],
           "probe": {"seconds": probe_s, "budget_s": probe_s} if probe_s else None,
           "warnings": [{"code": "wal"}]}
    return {"op": "advise", "kind": "copy", "mode": mode, "rc": rc, "seconds": 1.0,
            "error": None, "advice": doc}


def _rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"op": "csv", "kind": "copy", "ok": True, "bytes": 128_000_000, "rows": 900_000,
         "seconds": 3.2},
        _advice("static", 1, {1: 10.0, 2: 6.0, 4: 5.0}),
        _advice("probe", 4, {1: 12.0, 2: 6.5, 4: 4.0}, probe_s=4.0),
        {"op": "advise", "kind": "copy", "mode": "probe-30", "skipped": True,
         "reason": "budget: estimate 50 s"},
    ]
    for j, secs in ((1, [12.0, 12.4]), (2, [6.0, 6.6]), (4, [5.0, 5.2])):
        for r, s in enumerate(secs):
            rows.append({"op": "copy", "jobs": j, "repeat": r, "seconds": s, "rc": 0,
                         "wal_bytes": 300_000_000 + r})
    rows.append({"op": "copy", "jobs": 8, "repeat": 0, "seconds": 1.0, "rc": 1,
                 "stderr": "psql: error: too many clients"})
    return rows


def test_copy_scores_regret_and_error_per_j() -> None:
    sc = summary.scores(_rows())["copy"]
    meas = sc["measured"]
    assert sorted(meas) == [1, 2, 4]              # the failed J=8 is not a measurement
    assert meas[4]["median_s"] == 5.1 and meas[1]["wal_bytes"] == 300_000_000
    static, probe = sc["advice"]
    assert static["recommended_jobs"] == 1 and static["best_jobs"] == 4
    assert static["regret"] == round(12.2 / 5.1, 4) and not static["tie"]
    assert static["error_at_rec"] == round((10.0 - 12.2) / 12.2, 4)
    assert static["per_j"][2]["error"] == round((6.0 - 6.3) / 6.3, 4)
    assert probe["recommended_jobs"] == 4 and probe["regret"] == 1.0 and probe["tie"]
    assert probe["per_j"][4]["error"] == round((4.0 - 5.1) / 5.1, 4)
    assert probe["probe_s"] == 4.0
    assert [s["mode"] for s in sc["skipped"]] == ["probe-30"]


def test_copy_tie_within_the_best_spread() -> None:
    """A recommended J whose median lies within the best J's repeats is a tie."""
    rows = [r for r in _rows() if r.get("op") != "copy"]
    for j, secs in ((2, [5.0, 5.6]), (4, [4.9, 5.5])):
        rows += [{"op": "copy", "jobs": j, "repeat": r, "seconds": s, "rc": 0}
                 for r, s in enumerate(secs)]
    rows[1] = _advice("static", 2, {1: 10.0, 2: 6.0, 4: 5.0})
    static = summary.scores(rows)["copy"]["advice"][0]
    assert static["best_jobs"] == 4 and static["regret"] == round(5.3 / 5.2, 4)
    assert static["tie"] and static["regret_scored"] == 1.0


def test_copy_report_table() -> None:
    text = summary.report(_rows())
    part = text[text.index("copy (J parallel \\copy streams"):]
    assert "a CSV of 128.0 MB, 900000 rows" in text
    assert "WAL MB" in part and "300.0" in part
    line4 = next(ln for ln in part.splitlines() if ln.strip().startswith("4 "))
    assert "5.10 [5.00-5.20] n=2 best" in line4 and "4.00 -22% <rec" in line4
    assert "skipped: advise mode=probe-30" in part
    assert "FAILED: copy -j 8 repeat 0: rc 1" in part
    static = next(ln for ln in part.splitlines() if ln.strip().startswith("static "))
    assert "2.392" in static and "-18%" in static


def test_summary_cli_json_has_copy(tmp_path: Path) -> None:
    p = tmp_path / "results.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    res = subprocess.run([sys.executable, str(BENCH / "bighost" / "summary.py"), str(p), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["copy"]["advice"][1]["recommended_jobs"] == 4
    assert doc["dump"]["measured"] == {} and doc["restore"]["advice"] == []


def test_report_names_the_parts_not_run() -> None:
    rows = [{"op": "sysinfo", "nproc": 16, "knobs": {"PARTS": ["copy"]}}, *_rows()]
    text = summary.report(rows)
    assert "dump: not run (PARTS)" in text and "restore: not run (PARTS)" in text
    assert "dump: nothing measured" in summary.report(_rows())


def test_the_report_shows_what_each_probe_measured() -> None:
    """Per advice, the probe's steps, the counts it skipped, its steps into
    logged tables and its WAL steps (the second 16-core run's results)."""
    rows = summary.load(Path(__file__).parents[1] / "docs" / "bench" / "bighost"
                        / "2026-11-27b_results.jsonl")
    text = summary.report(rows)
    assert "probe-10: probe steps 1:34 2:70 4:124 8:244; skipped 16 (MB/s)" in text
    assert "logged@1 22 (0.93x), 2.90 B WAL/B; WAL 1:817" in text
    copy = summary.scores(rows)["copy"]["advice"]
    steps = next(a["probe_steps"] for a in copy if a["mode"] == "probe-10")
    assert steps["skipped"] == [2, 4, 8] and sorted(steps["steps"]) == [1, 16]
    assert steps["logged"]["streams"] == 1 and steps["logged"]["of_step"] == 0.847
    assert "logged_top" not in steps


def test_the_report_shows_the_builds_against_one_alone() -> None:
    """The builds part (sweep.py's build rows): each set of builds at once,
    its heap rate, and that rate against one build alone with the same
    parallel workers setting; a skipped set says why."""
    rows = [{"op": "build", "streams": 1, "parallel_workers": "default", "seconds": 1.0,
             "heap_bytes": 100e6, "wal_bytes": 30e6, "ok": True},
            {"op": "build", "streams": 16, "parallel_workers": "default", "seconds": 4.0,
             "heap_bytes": 1600e6, "wal_bytes": 480e6, "ok": True},
            {"op": "build", "streams": 1, "parallel_workers": "0", "seconds": 2.0,
             "heap_bytes": 100e6, "wal_bytes": 30e6, "ok": True},
            {"op": "build", "skipped": True, "streams": 16, "parallel_workers": 0,
             "reason": "budget: estimate 9 s + reserve 25 s > 20 s left"}]
    text = summary.report(rows)
    part = text[text.index("builds (CREATE INDEX"):].splitlines()
    assert "1 at once, parallel workers default: 1.00 s, 100 MB/s, WAL 30 MB" in part[1]
    assert "16 at once, parallel workers default: 4.00 s, 400 MB/s, x4.0 one" in part[2]
    assert "1 at once, parallel workers 0: 2.00 s, 50 MB/s" in part[3]
    assert "16 at once, parallel workers 0: skipped: budget" in part[4]
    # one build alone, with the server's workers against none
    assert "one build alone: 2.00x faster with the server's default parallel workers" in part[5]
    assert "builds (" not in summary.report(_rows())
