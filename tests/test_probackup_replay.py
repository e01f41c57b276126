"""Real pg_probackup backups, replayed: tests/golden/probackup/*.rec.gz are
`pgparmon run --record` and `attach --record` of pg_probackup 2.5.15 built
from its source, backing up a 1 GB PostgreSQL 15 cluster (FULL and DELTA,
-j 2, --stream and archive mode, a backup interrupted with SIGINT, one
killed with SIGKILL). How they were made and how to make them again:
docs/backups.md ("pg_probackup"), bench/probackup_rerecord.sh.

Each recording is replayed through the Monitor with no server (connecting
fails the test) and no pg_probackup: what the driver derives from what the
real tool showed is checked (the job, its threads and sessions, its steps in
order, progress rising, the ETA, the end)."""

from __future__ import annotations

import functools
import gzip
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support import monitor_replay

from pgparmon.jobs.pg_probackup_steps import PHASES
from pgparmon.record import read_recording

GOLDEN = Path(__file__).parent / "golden" / "probackup"
SECRET = b"probackup-secret-pw"  # on the recorded pg_probackup's -d (bench/probackup_record.py)
MAX_BYTES = 120_000
# name: (how it was followed, --stream, mode, how it ends)
RUNS = {
    "full_stream_zlib_run": ("run", True, "FULL", "finished"),
    "full_archive_attach": ("attach", False, "FULL", "finished"),
    "delta_stream_attach": ("attach", True, "DELTA", "finished"),
    "delta_archive_run": ("run", False, "DELTA", "finished"),
    "error_sigint_run": ("run", True, "FULL", "failed"),
    "killed_attach": ("attach", False, "FULL", "failed"),
}
FINISHED = [n for n, r in RUNS.items() if r[3] == "finished"]


def _no_server(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a replay must not connect to a server")


@functools.lru_cache(maxsize=None)
def replay(name: str) -> tuple[list[dict[str, Any]], dict[str, Any], Any]:
    """Every sample the Monitor derives from the recording, its summary and
    its outcome (replayed once per test session)."""
    assert not read_recording(str(GOLDEN / f"{name}.rec.gz")).truncated
    saved = psycopg.connect
    psycopg.connect = _no_server  # type: ignore[assignment]
    try:
        samples, summary, mon = monitor_replay(GOLDEN / f"{name}.rec.gz")
        return samples, summary, mon.outcome
    finally:
        psycopg.connect = saved  # type: ignore[assignment]


def _steps(samples: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for s in samples:
        step = (s["job"].get("backup") or {}).get("step")
        if step and (not out or out[-1] != step):
            out.append(step)
    return out


def _in(samples: list[dict[str, Any]], step: str) -> list[dict[str, Any]]:
    return [s for s in samples if s["job"]["state"] == "running"
            and (s["job"].get("backup") or {}).get("step") == step]


def test_there_are_recordings() -> None:
    assert {p.name[: -len(".rec.gz")] for p in GOLDEN.glob("*.rec.gz")} == set(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_job_its_threads_and_sessions(name: str) -> None:
    how, stream, mode, _ = RUNS[name]
    samples, summary, _ = replay(name)
    assert {s["job"]["kind"] for s in samples} == {"pg_probackup"}
    assert summary["kind"] == "pg_probackup" and summary["grouping"] == "process tree"
    job = samples[-1]["job"]
    b = job["backup"]
    assert job["scope"] == "cluster" and job["jobs"] == 2 and b["threads"] == 2
    assert b["mode"] == mode and b["stream"] is stream and b["program_version"] == "2.5.15"
    assert re.fullmatch(r"[0-9A-Z]{6}", b["backup_id"])
    copying = _in(samples, "copy")
    assert copying
    # -j 2: two threads copy, besides the main thread and (--stream) the WAL
    # stream's (a DELTA's copy is soon down to its last, largest file: one)
    alive = max(s["job"]["backup"]["threads_alive"] for s in copying)
    assert alive == 2 + 1 + stream if mode == "FULL" else 1 + 1 + stream <= alive <= 2 + 1 + stream
    assert all(len(s["job"]["backup"]["worker_threads_cpu_percent"]) <= 2 for s in copying)
    rows = [w for s in copying for w in s["workers"] if w["phase"] == "backup"]
    assert rows and all(w["pid"] in (1, 2) and w["relation"] for w in rows)
    assert all(sum(w["phase"] == "backup" for w in s["workers"]) <= 2 for s in copying)
    phases = {w["phase"] for s in samples for w in s["workers"]}
    # its session (no application_name of its own, idle between its start and
    # stop: found through its sockets under attach) and, with --stream, its WAL stream
    assert "idle" in phases
    assert ("wal" in phases) is stream


@pytest.mark.parametrize("name", sorted(RUNS))
def test_steps_in_order_and_progress_rising(name: str) -> None:
    samples, _, outcome = replay(name)
    steps = _steps(samples)
    assert steps == sorted(steps, key=PHASES.index), steps
    if outcome.state == "failed":
        assert steps[-1] == "copy", steps
    elif RUNS[name][2] == "FULL":
        assert steps[-4:] == ["copy", "stopping", "sync", "validate"], steps
    else:  # a DELTA of a quiet cluster syncs and validates little: maybe between samples
        assert steps[steps.index("copy"):][:2] == ["copy", "stopping"], steps
    progress = [s["job"]["progress"] for s in samples if s["job"]["progress"] is not None]
    assert progress == sorted(progress)
    copy = [s["job"]["progress"] for s in _in(samples, "copy")
            if s["job"]["progress"] is not None]
    assert len(set(copy)) >= 3 and copy[-1] > copy[0]
    if outcome.state == "finished":
        assert progress[-1] == 1.0
        for step in ("sync", "validate"):
            done = [s["job"]["backup"]["step_progress"] for s in _in(samples, step)]
            assert done == sorted(done) and all(0 <= x <= 1 for x in done)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_end(name: str) -> None:
    how, _, _, end = RUNS[name]
    samples, summary, outcome = replay(name)
    assert outcome.state == end == summary["state"] == samples[-1]["job"]["state"]
    status = samples[-1]["job"]["backup"]["status"]
    if name == "error_sigint_run":  # pg_probackup catches SIGINT: status ERROR, exit 1
        assert outcome.exit_code == 1 and status == "ERROR"
        assert "set its status to ERROR" in outcome.reason and "phase copy" in outcome.reason
    elif name == "killed_attach":  # SIGKILL: backup.control is left RUNNING
        assert outcome.exit_code is None and status == "RUNNING"
        assert "still says RUNNING (the process was killed)" in outcome.reason
        assert re.search(r"stopped at \d+\.\d% \(.+ of .+\), phase copy", outcome.reason)
    else:
        assert status == "OK" and samples[-1]["job"]["progress"] == 1.0
        assert outcome.exit_code == (0 if how == "run" else None)
        assert summary["items"][0]["state"] == "done"


@pytest.mark.parametrize("name", FINISHED)
def test_eta(name: str) -> None:
    """An ETA through the copy (its rest plus the validation to come) and
    the validation; at half the run, near the time really left (the real
    end: the sample that saw the process gone)."""
    samples, _, _ = replay(name)
    copying = [s for s in _in(samples, "copy") if s["job"]["progress"] is not None]
    # a second of the copy measures its rate; then its rest and what follows
    # it (a DELTA of a quiet cluster copies for a second or two: an ETA from
    # its last copy samples on)
    timed = [s for s in copying if s["elapsed_s"] - copying[0]["elapsed_s"] >= 1.5]
    assert all(s["job"]["eta_s"] is not None for s in timed)
    after = [s for s in samples if s["job"]["state"] == "running"
             and s["elapsed_s"] >= copying[-1]["elapsed_s"]]
    assert all(s["job"]["eta_s"] is not None for s in after), [
        (s["elapsed_s"], s["job"]["eta_reason"]) for s in after]
    if copying[-1]["elapsed_s"] - copying[0]["elapsed_s"] >= 3.0:
        assert timed
    validating = [s["job"]["eta_s"] for s in _in(samples, "validate")
                  if s["job"]["eta_s"] is not None]
    if len(validating) >= 3:
        assert validating[-1] < validating[0]
    end = samples[-1]["elapsed_s"]
    if end >= 30.0:  # long enough for the ETA to mean something at half (1 s samples)
        half = min((s for s in samples if s["job"]["state"] == "running"),
                   key=lambda s: abs(s["elapsed_s"] - end / 2))
        real = end - half["elapsed_s"]
        assert half["job"]["eta_s"] is not None
        # 40% off on the recorded 46 s backup (docs/backups.md says why)
        assert abs(half["job"]["eta_s"] - real) <= 0.5 * real, (half["job"]["eta_s"], real)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_what_limits_it(name: str) -> None:
    samples, _, _ = replay(name)
    kinds = {step: {s["bottleneck"]["kind"] for s in _in(samples, step)} for step in PHASES}
    stream = RUNS[name][1]
    if kinds["stopping"]:  # the wait for the stop LSN's WAL
        assert kinds["stopping"] == ({"wal"} if stream else {"archiving"})
    assert kinds["sync"] <= {"disk-write"}
    assert "stalled" not in {k for v in kinds.values() for k in v}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_recording_is_small_and_has_no_password(name: str) -> None:
    path = GOLDEN / f"{name}.rec.gz"
    assert path.stat().st_size <= MAX_BYTES
    raw = gzip.decompress(path.read_bytes())
    assert SECRET not in raw
    assert b"password=********" in raw  # its -d conninfo, masked on its command line
    assert not re.search(rb"password=(?!\*{8})", raw, re.IGNORECASE)
