"""Recordings: written while a real job runs, replayed through the same
analysis, readable when cut short."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support import pgparmon_cmd

from pgparmon.cluster import Cluster
from pgparmon.playback import ReplayFeed
from pgparmon.record import Recorder, RecordingError, read_recording


@pytest.fixture(scope="module")
def dump_recording(cluster: Cluster, sample_db: str, tmp_path_factory: pytest.TempPathFactory
                   ) -> tuple[Path, list[dict[str, object]]]:
    d = tmp_path_factory.mktemp("rec")
    os.chmod(d, 0o777)
    rec = d / "dump.pgparmon.gz"
    res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.3", "--record", str(rec),
                                      "--", cluster.client("pg_dump"), "-Fd", "-j", "2", "-f",
                                      str(d / "out"), sample_db),
                         capture_output=True, text=True, env=cluster.env(), timeout=120,
                         preexec_fn=lambda: os.umask(0))  # the most open umask: still private
    assert res.returncode == 0, res.stderr
    docs = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    return rec, docs


@pytest.mark.integration
def test_the_recording_and_its_report_are_private(
        dump_recording: tuple[Path, list[dict[str, object]]]) -> None:
    """The job's statements, tables and host facts: 0600 whatever the umask
    (`run --record`, `report --html`)."""
    rec, _ = dump_recording
    assert stat.S_IMODE(rec.stat().st_mode) == 0o600
    html = rec.parent / "report.html"
    html.write_text("an older report")
    html.chmod(0o644)
    res = subprocess.run(pgparmon_cmd("report", str(rec), "--html", str(html)),
                         capture_output=True, text=True, timeout=60,
                         preexec_fn=lambda: os.umask(0))
    assert res.returncode == 0, res.stderr
    assert stat.S_IMODE(html.stat().st_mode) == 0o600
    assert "<!DOCTYPE html>" in html.read_text()


@pytest.mark.integration
def test_replay_gives_the_same_derived_values(dump_recording: tuple[Path, list[dict[str, object]]]
                                              ) -> None:
    rec, printed = dump_recording
    r = read_recording(str(rec))
    assert not r.truncated
    assert r.header["job"]["kind"] == "pg_dump"
    printed_samples = [d for d in printed if d.get("schema") == "pgparmon.sample/1"]
    assert r.samples == printed_samples  # the recording holds what was shown
    assert r.summary == printed[-1]
    feed = ReplayFeed(r, speed=1000.0)
    replayed = []
    while not feed.ended and feed.outcome is None:
        replayed.append(feed.tick())
    assert feed.outcome is not None and feed.outcome.state == "finished"
    assert [s.to_json() for s in replayed] == r.samples
    assert feed.summary() == r.summary
    # an ended job's summary is built once (the end screen, then the exit)
    assert feed.summary() is feed.summary()


@pytest.mark.integration
def test_replay_of_a_restore_matches(cluster: Cluster, dump_archive: Path,
                                     tmp_path: Path) -> None:
    """A restore's recording also holds its catalog readings (what finished
    between samples): the replay reaches the same end."""
    os.chmod(tmp_path, 0o777)
    cluster.psql("DROP DATABASE IF EXISTS restored_rec")
    cluster.psql("CREATE DATABASE restored_rec")
    rec = tmp_path / "restore.gz"
    res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.3", "--record", str(rec),
                                      "--", cluster.client("pg_restore"), "-j", "2", "-d",
                                      "restored_rec", str(dump_archive)),
                         capture_output=True, text=True, env=cluster.env(), timeout=120)
    assert res.returncode == 0, res.stderr
    r = read_recording(str(rec))
    assert any(k == "plan" for k, _ in r.events)
    feed = ReplayFeed(r, speed=1000.0)
    replayed = []
    while not feed.ended and feed.outcome is None:
        replayed.append(feed.tick())
    assert [s.to_json() for s in replayed] == r.samples
    assert feed.summary() == r.summary and r.summary is not None
    assert r.summary["state"] == "finished"


@pytest.mark.integration
def test_seek_and_step(dump_recording: tuple[Path, list[dict[str, object]]]) -> None:
    rec, _ = dump_recording
    r = read_recording(str(rec))
    feed = ReplayFeed(r, speed=1000.0)
    n = feed.total_samples
    assert n == len(r.samples)
    mid = feed.seek(n // 2)
    assert mid is not None and mid.to_json() == r.samples[n // 2]
    assert feed.step().to_json() == r.samples[n // 2 + 1]  # type: ignore[union-attr]
    # backwards re-derives from the start
    assert feed.seek(1).to_json() == r.samples[1]  # type: ignore[union-attr]


@pytest.mark.integration
def test_a_cut_recording_is_still_readable(dump_recording: tuple[Path, list[dict[str, object]]],
                                           tmp_path: Path) -> None:
    rec, _ = dump_recording
    data = rec.read_bytes()
    cut = tmp_path / "cut.gz"
    cut.write_bytes(data[: len(data) * 2 // 3])
    r = read_recording(str(cut))
    assert r.truncated
    full = read_recording(str(rec))
    assert 0 < len(r.samples) < len(full.samples)
    assert r.samples == full.samples[: len(r.samples)]


def test_recording_is_readable_while_written(tmp_path: Path) -> None:
    path = tmp_path / "live.gz"
    w = Recorder(str(path))
    w.header({"job": {"kind": "pg_dump"}, "facts": {}})
    for i in range(5):
        w.event("sample", {"schema": "pgparmon.sample/1", "i": i})
    r = read_recording(str(path))  # not closed yet: every flushed event is there
    assert [s["i"] for s in r.samples] == list(range(5))
    w.event("sample", {"command": ["pg_dump", "dbname=x password=hunter2",
                                    "postgresql://u:hunter2@h/db"]})
    w.close()
    assert b"hunter2" not in gzip.decompress(path.read_bytes())
    # redacting must not swallow the JSON after the secret: still a recording
    back = read_recording(str(path))
    assert not back.truncated and len(back.samples) == 6
    assert back.samples[-1]["command"] == ["pg_dump", "dbname=x password=********",
                                           "postgresql://u:********@h/db"]


# (mtime=0: the same bytes, so the same test ids, in every worker of `-n`)
@pytest.mark.parametrize("content, needle", [
    (b"", "empty"),
    (b"not gzip at all", "not a pgparmon recording"),
    (gzip.compress(b'{"t":"sample","v":{}}\n', mtime=0), "no header"),
    (gzip.compress(b'{"t":"header","v":{"schema":"pgparmon.recording/9"}}\n', mtime=0),
     "newer"),
    (gzip.compress(b"garbage\n", mtime=0), "not a pgparmon recording"),
])
def test_bad_recordings_get_one_line_errors(tmp_path: Path, content: bytes, needle: str) -> None:
    p = tmp_path / "bad.gz"
    p.write_bytes(content)
    with pytest.raises(RecordingError) as ei:
        read_recording(str(p))
    assert needle in str(ei.value)
    assert "\n" not in str(ei.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(RecordingError):
        read_recording(str(tmp_path / "nope.gz"))
    shutil.rmtree(tmp_path, ignore_errors=True)


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=2000), gz=st.booleans(), cut=st.integers(min_value=0,
                                                                      max_value=4000))
def test_any_bytes_give_a_recording_or_a_clear_error(tmp_path: Path, data: bytes, gz: bool,
                                                     cut: int) -> None:
    """Fuzz: random bytes, random gzip payloads, random cuts of a valid
    recording: a Recording or a one-line RecordingError, never anything else."""
    valid = (b'{"t":"header","v":{"schema":"pgparmon.recording/1","job":{},"facts":{}}}\n'
             + data)
    blob = gzip.compress(valid)[:cut] if gz else data
    p = tmp_path / "fuzz.gz"
    p.write_bytes(blob)
    try:
        r = read_recording(str(p))
    except RecordingError as exc:
        assert "\n" not in str(exc)
        return
    assert r.header["schema"] == "pgparmon.recording/1"


SETTLE_SCRIPT = r'''
import gc, json, sys
from pgparmon import heap
from pgparmon.playback import ReplayFeed
from pgparmon.record import read_recording
feed = ReplayFeed(read_recording(sys.argv[1]), speed=1000.0)
feed.mon.settle_heap = sys.argv[2] == "1"
frozen, planned = [], []
while not feed.ended and feed.outcome is None:
    feed.tick()
    frozen.append(gc.get_freeze_count())
    planned.append(bool(feed.mon.tracker and feed.mon.tracker.planned))
print(json.dumps({"frozen": frozen, "planned": planned, "times": heap.SETTLED}))
'''


@pytest.mark.integration
def test_a_monitor_that_follows_one_job_freezes_the_heap_it_started_with(
        dump_recording: tuple[Path, list[dict[str, object]]]) -> None:
    """Cost of watching: after the second sample, and again once the plan is
    made, what lives is collected and frozen (out of later full garbage
    collections), at most twice a process, and only where asked."""
    rec, _ = dump_recording
    runs = {}
    for flag in ("1", "0"):
        res = subprocess.run([sys.executable, "-c", SETTLE_SCRIPT, str(rec), flag],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        runs[flag] = json.loads(res.stdout)
    on, off = runs["1"], runs["0"]
    assert len(on["frozen"]) >= 3
    assert on["frozen"][0] == 0 and on["frozen"][1] > 0  # from the second sample on
    assert 1 <= on["times"] <= 2
    if on["times"] == 2:  # planned after the second sample: frozen again then
        later = on["planned"].index(True)
        assert later >= 2 and on["frozen"][later] > on["frozen"][later - 1]
    else:
        assert on["planned"][1]  # planned by the second sample: one freeze did both
    assert off["times"] == 0 and set(off["frozen"]) == {0}
