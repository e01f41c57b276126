"""Throughput against active workers from recordings of earlier runs
(pgparmon/advise/history.py): synthetic recordings with known rates, a real
recorded pg_dump, and files that are not recordings."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import pgparmon_cmd

from pgparmon.advise import history, usl
from pgparmon.advise.history import HistoryError, HistoryRun, history_points, load_history
from pgparmon.analyze.progress import DEFAULT_TEXT_RATIO
from pgparmon.analyze.rates import throughput_by_active
from pgparmon.cluster import Cluster
from pgparmon.playback import ReplayFeed
from pgparmon.record import Recorder, read_recording

BLOCK = 8192

# ---- synthetic recordings ------------------------------------------------------

# (active workers, samples at that count, heap bytes/s once steady): a -j 4
# dump whose tail runs down to one table; a 2-sample dip to 3 workers is too
# short to count (1 steady interval).
DUMP_SEGMENTS = [(4, 10, 200e6), (3, 2, 170e6), (4, 5, 200e6), (2, 6, 130e6), (1, 8, 70e6)]
WARM_RATE = 0.3  # the rate of the intervals around a change of k: to be left out


def doc(kind: str, t: float, k: int, progress: float | None, *, jobs: int | None = 4,
        state: str = "running", bps: float = 0.0, phases: list[str] | None = None,
        error: str | None = None) -> dict[str, Any]:
    phases = ["copy"] * k if phases is None else phases
    return {"schema": "pgparmon.sample/1", "elapsed_s": round(t, 3),
            "job": {"kind": kind, "state": state, "jobs": jobs,
                    "progress": None if progress is None else round(progress, 4),
                    "bytes_per_s": round(bps, 1), "active_workers": k},
            "workers": [{"pid": 100 + i, "phase": ph} for i, ph in enumerate(phases)],
            "server": {"error": error}}


def progress_samples(kind: str, segments: list[tuple[int, int, float]], total: float,
                     dt: float = 1.0, start_k: int = 0, start_progress: float | None = None,
                     finish: bool = True, jobs: int | None = 4) -> list[dict[str, Any]]:
    """Samples every dt seconds: a first one at start_k, then each segment's
    samples. After a change of k, the interval into the segment and its first
    one run at WARM_RATE of the steady rate (the change, then warm-up)."""
    work = (start_progress or 0.0) * total
    t = 0.0
    out = [doc(kind, t, start_k, start_progress, jobs=jobs)]
    prev = start_k
    for k, n, x in segments:
        for i in range(n):
            t += dt
            work += (WARM_RATE * x if i < 2 and k != prev else x) * dt
            out.append(doc(kind, t, k, min(1.0, work / total), jobs=jobs))
        prev = k
    if finish:
        out.append(doc(kind, t + dt, 0, 1.0, jobs=jobs, state="finished"))
    return out


def expected(segments: list[tuple[int, int, float]], dt: float = 1.0
             ) -> dict[int, tuple[float, float]]:
    """k -> (X, seconds) over the steady intervals: n - 2 per segment."""
    acc: dict[int, list[float]] = {}
    for k, n, x in segments:
        a = acc.setdefault(k, [0.0, 0.0, 0])
        a[0] += x * (n - 2) * dt
        a[1] += (n - 2) * dt
        a[2] += n - 2
    return {k: (w / s, s) for k, (w, s, c) in acc.items() if c >= history.MIN_STEADY}


def write(path: Path, kind: str, samples: list[dict[str, Any]], *, jobs: int | None = 4,
          summary: dict[str, Any] | None = None, plan: Any = None) -> str:
    rec = Recorder(str(path))
    rec.header({"job": {"kind": kind, "database": "db", "jobs": jobs, "command": [kind]},
                "facts": {"block_size": BLOCK}, "target_dir": None, "devices": []})
    for i, s in enumerate(samples):
        rec.event("snapshot", {})  # the raw readings: not what history reads
        if i == 0 and plan is not None:
            rec.event("plan", plan)
        rec.event("sample", s)
    if summary is not None:
        rec.event("summary", summary)
    rec.close()
    return str(path)


def dump_summary(total: float, state: str = "finished", n: int = 4) -> dict[str, Any]:
    return {"schema": "pgparmon.summary/1", "kind": "pg_dump", "state": state, "wall_s": 1.0,
            "items": [{"key": str(i), "kind": "data", "state": "done", "bytes": 1,
                       "work": total / n} for i in range(n)]}


def check_points(run: HistoryRun, segments: list[tuple[int, int, float]],
                 tol: float = 2e-3) -> None:
    want = expected(segments)
    assert [k for k, _, _ in run.points] == sorted(want)
    for k, x, s in run.points:
        assert x == pytest.approx(want[k][0], rel=tol), k
        assert s == pytest.approx(want[k][1], abs=1e-6), k


TOTAL = 4.2e9


def test_a_dump_gives_x_per_active_count(tmp_path: Path) -> None:
    samples = progress_samples("pg_dump", DUMP_SEGMENTS, TOTAL)
    p = write(tmp_path / "d.gz", "pg_dump", samples, summary=dump_summary(TOTAL))
    (run,) = load_history([p])
    assert run.path == p and run.kind == "pg_dump" and run.jobs == 4
    assert run.unit == "heap bytes" and run.note == ""
    assert run.wall_s == pytest.approx(samples[-1]["elapsed_s"])
    check_points(run, DUMP_SEGMENTS)
    assert 3 not in {k for k, _, _ in run.points}  # 1 steady interval: not enough
    assert history_points([run], "pg_dump") == [(float(k), x) for k, x, _ in run.points]
    assert history_points([run], "pg_restore") == []


def test_without_a_summary_the_plan_gives_the_total(tmp_path: Path) -> None:
    """A recording cut before its summary: the total work comes from the
    recorded plan (relpages * block_size of heap and TOAST, as pg_dump sorts)."""
    pages = [300_000, 150_000, 60_000, 2_000]
    toast = [12_000, 0, 0, 0]
    total = float(sum(pages) + sum(toast)) * BLOCK
    tables = [[16384 + i, "public", f"t{i}", "r", pages[i], 1000.0, toast[i], f"base/1/{i}"]
              for i in range(4)]
    plan: dict[str, Any] = {"toc": None, "tables": tables, "file_sizes": {}}
    samples = progress_samples("pg_dump", DUMP_SEGMENTS, total, finish=False)
    p = write(tmp_path / "cut.gz", "pg_dump", samples, plan=plan)
    (run,) = load_history([p])
    check_points(run, DUMP_SEGMENTS)
    assert run.wall_s is None  # never seen to finish
    # the same, cut mid-file: a readable prefix gives the points of that prefix
    data = Path(p).read_bytes()
    cut = tmp_path / "cut2.gz"
    cut.write_bytes(data[: len(data) * 3 // 5])
    assert read_recording(str(cut)).truncated
    (part,) = load_history([str(cut)])
    n = len(read_recording(str(cut)).samples)
    assert 0 < n < len(samples)
    for k, x, _ in part.points:
        assert x == pytest.approx({kk: xx for kk, xx, _ in run.points}[k], rel=0.02)


def test_gaps_and_samples_without_the_server_are_not_steady(tmp_path: Path) -> None:
    segs = [(2, 12, 100e6)]
    samples = progress_samples("pg_dump", segs, 2e9)
    base = load_history([write(tmp_path / "a.gz", "pg_dump", samples,
                               summary=dump_summary(2e9))])[0]
    assert base.points == [(2, pytest.approx(100e6, rel=2e-3), pytest.approx(10.0))]
    # a sample without the server (its progress did not move): the intervals
    # on either side are out, and the warm-up starts again after it
    bad = [dict(s) for s in samples]
    bad[6] = doc("pg_dump", samples[6]["elapsed_s"], 2, samples[5]["job"]["progress"],
                 error="canceling statement due to statement timeout")
    run = load_history([write(tmp_path / "b.gz", "pg_dump", bad,
                              summary=dump_summary(2e9))])[0]
    assert run.points == [(2, pytest.approx(100e6, rel=2e-3), pytest.approx(7.0))]
    # a gap (a sample 20 s late): not steady either
    late = [dict(s) for s in samples]
    for s in late[7:]:
        s["elapsed_s"] += 20.0
    run = load_history([write(tmp_path / "c.gz", "pg_dump", late,
                              summary=dump_summary(2e9))])[0]
    assert run.points == [(2, pytest.approx(100e6, rel=2e-3), pytest.approx(8.0))]


def test_attached_mid_run_has_no_wall_time(tmp_path: Path) -> None:
    segs = [(4, 8, 200e6), (1, 6, 60e6)]
    samples = progress_samples("pg_dump", segs, 4e9, start_k=4, start_progress=0.4)
    run = load_history([write(tmp_path / "m.gz", "pg_dump", samples,
                              summary=dump_summary(4e9))])[0]
    assert run.wall_s is None
    # ... unless its samples count from the job's own start (its process
    # began 30 s before the first sample): then the wall time is known
    known = [{**s, "elapsed_s": s["elapsed_s"] + 30.0,
              "job": {**s["job"], "started_from": "client process"}} for s in samples]
    run2 = load_history([write(tmp_path / "k.gz", "pg_dump", known,
                               summary=dump_summary(4e9))])[0]
    assert run2.wall_s == pytest.approx(known[-1]["elapsed_s"])
    assert run2.points == run.points
    # the first stretch began before the recording: its first interval is
    # warm-up all the same (8 intervals at k=4, 7 steady)
    assert run.points == [(1, pytest.approx(60e6, rel=2e-3), pytest.approx(4.0)),
                          (4, pytest.approx(200e6, rel=2e-3), pytest.approx(7.0))]
    # attached as it began (a few % done): the wall time is the run's
    samples = progress_samples("pg_dump", segs, 3e9, start_k=4, start_progress=0.01)
    run = load_history([write(tmp_path / "s.gz", "pg_dump", samples,
                              summary=dump_summary(3e9))])[0]
    assert run.wall_s == pytest.approx(samples[-1]["elapsed_s"])


def test_a_copy_pool_uses_its_copy_rate(tmp_path: Path) -> None:
    """COPY loaders: job.bytes_per_s (COPY bytes); the monitor's 5 s rate
    window still holds the previous count for 5 s after a change."""
    samples = [doc("copy", 0.0, 0, None, jobs=3)]
    t = 0.0
    for k, n, x in [(3, 12, 90e6), (2, 9, 70e6)]:
        for i in range(n):
            t += 1.0
            # the window mixes the counts until it lies wholly after the change
            samples.append(doc("copy", t, k, None, jobs=3, bps=x if i >= 5 else 123.0))
    samples.append(doc("copy", t + 1, 0, None, jobs=3, state="finished"))
    run = load_history([write(tmp_path / "c.gz", "copy", samples, jobs=None)])[0]
    assert run.kind == "copy" and run.unit == "COPY bytes" and run.jobs == 3
    assert run.points == [(2, pytest.approx(70e6), pytest.approx(4.0)),
                          (3, pytest.approx(90e6), pytest.approx(7.0))]
    assert history_points([run], "copy") == [(2.0, pytest.approx(70e6)),
                                             (3.0, pytest.approx(90e6))]


def test_a_dump_without_progress_estimates_heap_from_copy_bytes(tmp_path: Path) -> None:
    """The plan failed (no TOC, no sizes): COPY text bytes / DEFAULT_TEXT_RATIO,
    only where every active worker runs COPY."""
    samples = [doc("pg_dump", 0.0, 0, None, jobs=2)]
    for i in range(1, 15):
        phases = ["copy", "other"] if 8 <= i <= 9 else None
        samples.append(doc("pg_dump", float(i), 2, None, jobs=2, bps=85e6, phases=phases))
    run = load_history([write(tmp_path / "n.gz", "pg_dump", samples, jobs=2)])[0]
    assert "estimated" in run.note and run.unit == "heap bytes"
    (k, x, s), = run.points
    assert k == 2 and x == pytest.approx(85e6 / DEFAULT_TEXT_RATIO)
    # intervals 1-2 .. 4-5 warm up (the 5 s window), 7-8 .. 9-10 have a worker
    # not in COPY at one end
    assert s == pytest.approx(6.0)


def restore_summary(ratio: float) -> dict[str, Any]:
    items = [{"key": str(i), "kind": "data", "state": "done", "bytes": ratio * w, "work": w}
             for i, w in enumerate([2e8, 1e8, 5e7])]
    items += [{"key": "9", "kind": "index", "state": "done", "bytes": None, "work": 1e8}]
    return {"schema": "pgparmon.summary/1", "kind": "pg_restore", "state": "finished",
            "wall_s": 1.0, "items": items}


def test_a_restore_is_converted_to_heap_bytes(tmp_path: Path) -> None:
    """The tracker counts a restore in archive bytes (gzip-compressed here);
    the advice in heap bytes estimated from the COPY text: the summary's
    finished data items give text per archive byte (3.0), / DEFAULT_TEXT_RATIO."""
    segs = [(2, 8, 40e6), (1, 6, 25e6)]  # archive bytes/s
    total = 4.5e8
    samples = progress_samples("pg_restore", segs, total, jobs=2)
    run = load_history([write(tmp_path / "r.gz", "pg_restore", samples, jobs=2,
                              summary=restore_summary(3.0))])[0]
    scale = 3.0 / DEFAULT_TEXT_RATIO
    check_points(run, [(k, n, x * scale) for k, n, x in segs])
    assert run.unit == "heap bytes" and run.note == ""
    # cut before the summary: the plan's data files say gzip; assumed 1/0.3
    toc = [{"dump_id": i, "catalog_oid": 0, "oid": 16384 + i, "desc": "TABLE DATA",
            "schema": "public", "tag": f"t{i}", "owner": "postgres"} for i in (1, 2)]
    plan = {"toc": toc, "targets": {}, "archive_files": {
        "1": [str(tmp_path / "1.dat.gz"), 3e8], "2": [str(tmp_path / "2.dat.gz"), 1.5e8]}}
    samples = progress_samples("pg_restore", segs, total, jobs=2, finish=False)
    run = load_history([write(tmp_path / "r2.gz", "pg_restore", samples, jobs=2,
                              plan=plan)])[0]
    check_points(run, [(k, n, x / 0.3 / DEFAULT_TEXT_RATIO) for k, n, x in segs])
    assert "assumed 3.33" in run.note


def test_a_custom_format_restore_falls_back_to_copy_bytes(tmp_path: Path) -> None:
    """A -Fc archive's data items have no size (work 1 each): progress counts
    items, not bytes; the COPY rate / DEFAULT_TEXT_RATIO stands in."""
    samples = [doc("pg_restore", 0.0, 0, 0.0, jobs=2)]
    for i in range(1, 13):
        samples.append(doc("pg_restore", float(i), 2, min(1.0, i / 20), jobs=2, bps=51e6))
    samples.append(doc("pg_restore", 13.0, 0, 1.0, jobs=2, state="finished"))
    summary = {"schema": "pgparmon.summary/1", "kind": "pg_restore", "state": "finished",
               "wall_s": 13.0, "items": [{"key": str(i), "kind": "data", "state": "done",
                                          "bytes": 5e7, "work": 1.0} for i in range(3)]}
    run = load_history([write(tmp_path / "c.gz", "pg_restore", samples, jobs=2,
                              summary=summary)])[0]
    assert "estimated" in run.note
    assert run.points == [(2, pytest.approx(51e6 / DEFAULT_TEXT_RATIO), pytest.approx(7.0))]
    assert run.wall_s == pytest.approx(13.0)


def test_history_points_merge_runs_time_weighted() -> None:
    runs = [
        HistoryRun("a", "pg_dump", 2, 100.0, [(1, 100.0, 10.0), (2, 180.0, 5.0)]),
        HistoryRun("b", "pg_dump", 4, None, [(2, 150.0, 15.0), (4, 300.0, 4.0)]),
        HistoryRun("c", "pg_restore", 2, 50.0, [(1, 50.0, 10.0)]),
        HistoryRun("d", "pg_dump", 2, None, [(1, 9e9, 100.0)], unit="COPY bytes"),
        HistoryRun("e", "pg_dump", 2, None, []),
    ]
    assert history_points(runs, "pg_dump") == [
        (1.0, 100.0), (2.0, pytest.approx((180 * 5 + 150 * 15) / 20)), (4.0, 300.0)]
    assert history_points(runs, "pg_restore") == [(1.0, 50.0)]
    assert history_points(runs, "copy") == []
    assert history_points([], "pg_dump") == []


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 4), st.floats(0.05, 5.0),
                                st.floats(0.0, 1e9), st.booleans()), max_size=40))
def test_steady_work_never_counts_more_than_was_done(
        steps: list[tuple[int, float, float, bool]]) -> None:
    obs = [history._Obs(0.0, 0, True, 0.0, None)]
    for k, dt, dw, ok in steps:
        last = obs[-1]
        obs.append(history._Obs(last.t + dt, k, ok, (last.work or 0.0) + dw, None))
    acc = history.steady_work(obs)
    assert all(k >= 1 for k in acc)
    assert sum(w for w, _, _ in acc.values()) <= obs[-1].work + 1e-6  # type: ignore[operator]
    assert sum(s for _, s, _ in acc.values()) <= obs[-1].t - obs[0].t + 1e-9
    assert all(w >= 0 and s > 0 and n >= 1 for w, s, n in acc.values())


# ---- files that are not history ---------------------------------------------------


def _header_only(kind: str, *more: bytes) -> bytes:
    return gzip.compress(b'{"t":"header","v":{"schema":"pgparmon.recording/1","job":{"kind":"'
                         + kind.encode() + b'"},"facts":{}}}\n' + b"".join(more))


@pytest.mark.parametrize("name, content, needle", [
    ("missing.gz", None, "cannot read"),
    ("empty.gz", b"", "empty"),
    ("text.gz", b"1=70.3,2=43.6\n", "not a pgparmon recording"),
    ("garbage.gz", gzip.compress(b"garbage\n"), "not a pgparmon recording"),
    ("newer.gz", gzip.compress(b'{"t":"header","v":{"schema":"pgparmon.recording/9"}}\n'),
     "newer"),
    ("nosamples.gz", _header_only("pg_dump"), "holds no samples"),
    ("nokind.gz", _header_only("vacuum"), "names no pg_dump"),
    ("badsample.gz", _header_only("pg_dump", b'{"t":"sample","v":{"job":{"active_workers":1}}}\n'),
     "not a pgparmon.sample/1"),
], ids=lambda v: v if isinstance(v, str) and v.endswith(".gz") else "")
def test_bad_files_are_one_line_errors(tmp_path: Path, name: str, content: bytes | None,
                                       needle: str) -> None:
    p = tmp_path / name
    if content is not None:
        p.write_bytes(content)
    good = write(tmp_path / "good.gz", "pg_dump", progress_samples("pg_dump", DUMP_SEGMENTS,
                                                                   TOTAL))
    with pytest.raises(HistoryError) as ei:
        load_history([good, str(p)])
    msg = str(ei.value)
    assert needle in msg, msg
    assert str(p) in msg and "\n" not in msg


def test_a_directory_is_not_a_recording(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="cannot read"):
        load_history([str(tmp_path)])


# ---- a real recorded pg_dump --------------------------------------------------------


# One big table and four small ones: with -j 2 the big one runs alone at
# the end (the tail gives k=1). Smaller than the shared sample database, so
# this file stays quick when run alone.
HISTORY_DB_SQL = """
CREATE TABLE big (id int, note text);
INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 1000000) g;
""" + "".join(f"""
CREATE TABLE small_{i} (id int, note text);
INSERT INTO small_{i} SELECT g, md5(g::text) FROM generate_series(1, 50000) g;
""" for i in range(1, 5)) + "ANALYZE;"


@pytest.fixture(scope="module")
def recorded_dump(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cluster.psql("DROP DATABASE IF EXISTS history_src")
    cluster.psql("CREATE DATABASE history_src")
    cluster.psql(HISTORY_DB_SQL, dbname="history_src")
    d = tmp_path_factory.mktemp("hist")
    os.chmod(d, 0o777)
    rec = d / "dump.pgparmon.gz"
    res = subprocess.run(pgparmon_cmd("run", "--interval", "0.1", "--record", str(rec),
                                      "--json", "--", cluster.client("pg_dump"), "-Fd", "-j",
                                      "2", "-f", str(d / "out"), "history_src"),
                         capture_output=True, text=True, env=cluster.env(), timeout=120,
                         check=False)
    assert res.returncode == 0, res.stderr
    return rec


@pytest.mark.integration
def test_a_recorded_dump(recorded_dump: Path) -> None:
    (run,) = load_history([str(recorded_dump)])
    rec = read_recording(str(recorded_dump))
    summ = rec.summary
    assert summ is not None and summ["state"] == "finished"
    assert run.kind == "pg_dump" and run.jobs == 2 and run.unit == "heap bytes"
    assert run.wall_s == pytest.approx(summ["wall_s"], abs=0.05)
    ks = [k for k, _, _ in run.points]
    assert set(ks) <= {1, 2}
    # the big table runs alone at the end
    assert 1 in ks, run
    total = sum(it["work"] for it in summ["items"])
    assert sum(x * s for _, x, s in run.points) <= total * 1.01
    for _, x, s in run.points:
        assert x > 0 and 0 < s <= run.wall_s  # type: ignore[operator]
    # the same heap rate the live analysis saw: replay the recording through
    # the tracker (heap bytes done, exactly) and compare at one stream
    feed = ReplayFeed(rec, speed=1e9)
    while not feed.ended and feed.outcome is None:
        feed.step()
    tracker = feed.mon.tracker
    assert tracker is not None
    seen = throughput_by_active(tracker.history)
    x1 = {k: x for k, x, _ in run.points}[1]
    assert x1 == pytest.approx(seen[1], rel=0.25)
    pts = history_points([run], "pg_dump")
    assert pts and pts[0][0] == 1.0


@pytest.mark.integration
def test_advise_from_a_recording(cluster: Cluster, recorded_dump: Path, tmp_path: Path) -> None:
    """`advise --history`: the recording's rates become the evidence."""
    res = subprocess.run(pgparmon_cmd("advise", "-d", "history_src", "--target",
                                      str(tmp_path / "next"), "--history", str(recorded_dump),
                                      "--history", str(recorded_dump), "--json"),
                         capture_output=True, text=True, env=cluster.env(), timeout=120,
                         check=False)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["basis"] == "history"
    (run,) = load_history([str(recorded_dump)])
    x = {k: v for k, v, _ in run.points}
    # one job: the whole data at the fitted one-stream rate of the recorded
    # points, plus the serial per-object part. The fit goes through the
    # recorded one-stream rate unless the run's two streams did more than
    # twice as much (a real run's tables differ): then one stream's rate lies
    # between the two, and so does the prediction. On a busy machine the two
    # streams together may have done less than one did alone (the load beside
    # the run changed): the plateau's ceiling is then the two streams' rate,
    # and one job's time lies between the two rates' times
    one = doc["predictions"][0]
    assert one["jobs"] == 1
    work = doc["inventory"]["work_bytes"]
    f = usl.fit(history_points([run, run], "pg_dump"))
    data_s = one["wall_s"] - one["serial_s"]
    assert data_s == pytest.approx(work / f.throughput(1), rel=0.02, abs=0.02)
    per_stream = [v / k for k, v in x.items()]
    assert work / max(per_stream) * 0.98 - 0.02 <= data_s <= work / min(per_stream) * 1.02 + 0.02
    if 2 not in x or x[1] <= x[2] <= 2 * x[1]:
        assert data_s == pytest.approx(work / x[1], rel=0.02, abs=0.02)
    elif x[2] < x[1]:
        assert work / x[1] * 0.98 - 0.02 <= data_s <= work / x[2] * 1.02 + 0.02, (x, data_s)
    assert "guess" not in {w["code"] for w in doc["warnings"]}
    # a broken recording is a one-line error, exit 2
    bad = tmp_path / "bad.gz"
    bad.write_bytes(b"not gzip")
    res = subprocess.run(pgparmon_cmd("advise", "-d", "history_src", "--target",
                                      str(tmp_path / "next"), "--history", str(bad)),
                         capture_output=True, text=True, env=cluster.env(), timeout=60,
                         check=False)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert str(bad) in res.stderr
