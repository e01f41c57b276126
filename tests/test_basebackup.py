"""pg_basebackup followed for real: `run` and `attach`, throttled with
--max-rate so that the phases are seen; the checkpoint wait, a stopped and a
killed backup; and the grouping rules and command line, without a server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support import (
    ArchiveGate,
    archive_caught_up,
    archive_wait,
    pgparmon_cmd,
    queued_segments,
    read_jsonl,
    resume,
    stop,
    tick_until,
    tree,
)

from pgparmon import units as fmt
from pgparmon.client_tree import ClientPids
from pgparmon.cluster import Cluster, start_cluster
from pgparmon.cmdline import max_rate_bytes
from pgparmon.jobs.registry import parse_argv as parse_client_cmdline
from pgparmon.connect import ConnTarget
from pgparmon.jobs.base import TREE
from pgparmon.jobs.pg_basebackup import INFERRED, PgBasebackup, command_options
from pgparmon.jobs.walwait import WAIT_ONLY
from pgparmon.monitor import Monitor
from pgparmon.open_job import wait_for_job
from pgparmon.snapshot import Backend, DbSample, Snapshot


def _cluster_bytes(cluster: Cluster) -> int:
    return int(cluster.psql("SELECT sum(pg_database_size(oid)) FROM pg_database").strip())


def _rate_for(cluster: Cluster, seconds: float) -> str:
    """A --max-rate that makes the backup stream for about `seconds`."""
    kb = max(64, int(_cluster_bytes(cluster) / 1024 / seconds))
    return f"{kb}k"


def _samples(out: str) -> list[dict[str, Any]]:
    return [d for d in read_jsonl(out) if d.get("schema") == "pgparmon.sample/1"]


@pytest.mark.integration
def test_run_follows_a_throttled_basebackup(workdir: Path) -> None:
    # a cluster of its own (~25 MB): streamed in ~5 s, its --max-rate is far
    # below what this machine streams even with both cores busy (~35 MB/s),
    # so the backup surely sleeps to keep to it. The session's cluster, grown
    # by the tests before this one, needed about that rate to last 5 s: on a
    # busy machine the backup never reached it, and the verdict rightly named
    # what held it instead
    with start_cluster(prefix="pgparmon-bb-") as cl:
        rate = _rate_for(cl, 5.0)
        rec = workdir / "bb.pgparmon.gz"
        res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.4", "--record",
                                          str(rec), "--", cl.client("pg_basebackup"), "-D",
                                          str(workdir / "bb"), "-c", "fast", "-r", rate, "-X",
                                          "stream"),
                             capture_output=True, text=True, timeout=300, env=cl.env())
    assert res.returncode == 0, res.stderr
    samples = _samples(res.stdout)
    jobs = [s["job"] for s in samples]
    assert {j["kind"] for j in jobs} == {"pg_basebackup"}
    assert jobs[-1]["state"] == "finished" and jobs[-1]["exit_code"] == 0
    assert jobs[-1]["scope"] == "cluster" and jobs[-1]["database"] is None
    prog = [j["progress"] for j in jobs if j["progress"] is not None]
    assert prog and all(b >= a for a, b in zip(prog, prog[1:])), prog
    assert prog[-1] == 1.0
    mid = [j for j in jobs if j["progress"] is not None and 0.2 <= j["progress"] <= 0.8]
    assert mid and any(j["eta_s"] is not None and j["eta_s"] > 0 for j in mid), mid
    streaming = [s for s in samples if s["job"]["phase"] == "streaming database files"]
    assert streaming
    b = streaming[-1]["job"]["backup"]
    assert b["total_is_estimate"] is True and b["total_bytes"] > 0
    assert b["max_rate_bytes_per_s"] == max_rate_bytes(rate)
    assert b["fast_checkpoint"] is True and b["wal_method"] == "stream"
    phases = {w["phase"] for s in samples for w in s["workers"]}
    assert {"backup", "wal"} <= phases, phases
    # the backup sleeps to keep to its --max-rate: that is the limit it names
    assert any(s["bottleneck"]["kind"] == "throttled" for s in streaming), \
        [s["bottleneck"] for s in streaming]
    assert any(s["job"]["bytes_per_s"] > 0 for s in streaming)
    assert (workdir / "bb" / "backup_manifest").is_file()
    # the recording tells the same story in a report
    rep = subprocess.run(pgparmon_cmd("report", str(rec)), capture_output=True, text=True,
                         timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert "pg_basebackup" in rep.stdout and "finished" in rep.stdout
    assert "base backup" in rep.stdout


def _start_basebackup(cluster: Cluster, target: Path, *extra: str,
                      tcp: bool = True) -> subprocess.Popen[bytes]:
    # --no-sync: the throwaway clusters run with fsync off; syncing the
    # session's cluster (~1 GB late in a run) on a slow disk took longer
    # than the whole backup
    proc = subprocess.Popen([cluster.client("pg_basebackup"), "-D", str(target), "--no-sync",
                             *extra],
                            env=cluster.env(tcp=tcp), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if cluster.psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                        "'walsender' AND application_name = 'pg_basebackup'").strip() != "0":
            return proc
        assert proc.poll() is None, "pg_basebackup exited before its session was seen"
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("pg_basebackup never connected")


def _until_end(mon: Monitor, ticks: int) -> dict[str, Any]:
    """Samples every 0.3 s until the job is no longer running."""
    return tick_until(mon, lambda d: d["job"]["state"] != "running", ticks, 0.3)[-1]


def _clean_up(proc: subprocess.Popen[bytes], mon: Monitor | None) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if mon is not None:
        mon.close()


def _target(cluster: Cluster) -> ConnTarget:
    return ConnTarget(host=str(cluster.sockdir), port=str(cluster.port), user="postgres",
                      dbname="postgres")


@pytest.mark.integration
def test_attach_finds_a_basebackup_and_sees_it_stop_and_die(cluster: Cluster, sample_db: str,
                                                            workdir: Path) -> None:
    # no size estimate: progress has no total, and says so
    proc = _start_basebackup(cluster, workdir / "bb", "-c", "fast", "-r", "256k",
                             "--no-estimate-size")
    mon = None
    try:
        mon = wait_for_job(_target(cluster), pid=None, wait_s=10, interval=0.3)
        assert mon.job is not None
        assert mon.job.kind == "pg_basebackup" and mon.job.client_pid == proc.pid
        assert mon.job.grouping == TREE
        # streaming, bytes counted, and its WAL stream seen (two workers)
        docs = tick_until(mon, lambda d: d["job"]["phase"] == "streaming database files"
                      and (d["job"]["backup"] or {}).get("streamed_bytes")
                      and len(d["workers"]) == 2, ticks=200)
        running = [d for d in docs if d["job"]["phase"] == "streaming database files"]
        last = running[-1]["job"]
        assert last["progress"] is None and last["eta_s"] is None
        assert "estimate" in (last["eta_reason"] or ""), last["eta_reason"]
        assert last["backup"]["total_bytes"] is None and last["backup"]["streamed_bytes"] > 0
        pids = {w["pid"] for w in running[-1]["workers"]}
        assert len(pids) == 2  # the base backup and its WAL stream
        assert {w["client_pid"] for w in running[-1]["workers"]} <= \
            set(running[-1]["job"]["client_pids"])
        # stopped: said so, not mistaken for a finished or a failed run
        held = stop(tree(proc.pid))
        stopped = tick_until(mon, lambda d: d["bottleneck"]["kind"] == "stalled", ticks=20)
        assert all(d["job"]["state"] == "running" for d in stopped)
        resume(held)
        # killed mid-stream: failed, with how far it got
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        end = _until_end(mon, 20)
        assert end["job"]["state"] == "failed", end["job"]
        assert "stopped at" in end["job"]["outcome"], end["job"]["outcome"]
    finally:
        _clean_up(proc, mon)


@pytest.mark.integration
def test_checkpoint_wait_is_explained_and_not_a_stall(cluster: Cluster, sample_db: str,
                                                      workdir: Path) -> None:
    # thousands of dirty buffers: a spread checkpoint paces their writes over
    # checkpoint_completion_target x checkpoint_timeout (minutes)
    cluster.psql("DROP TABLE IF EXISTS bb_dirty; CREATE TABLE bb_dirty AS "
                 "SELECT g, repeat('d', 200) AS pad FROM generate_series(1, 150000) g")
    # throttled to stream the cluster in ~2 s once the checkpoint is done (the
    # session's cluster grows with the tests run before this one)
    proc = _start_basebackup(cluster, workdir / "bb", "-r", _rate_for(cluster, 2.0))
    mon = None
    try:
        mon = wait_for_job(_target(cluster), pid=None, wait_s=10, interval=0.3)
        phase = "waiting for checkpoint to finish"
        docs = tick_until(mon, lambda d: d["job"]["phase"] == phase, ticks=100, pause=0.4)
        for _ in range(5):  # and stays there: the spread checkpoint lasts minutes
            time.sleep(0.4)
            docs.append(mon.tick().to_json())
        waiting = docs[-6:]
        assert all(d["job"]["phase"] == phase for d in waiting), [d["job"]["phase"] for d in docs]
        v = waiting[-1]["bottleneck"]
        # its bound (the cluster's settings: 0.9 x 5 min), the time left, the way out
        assert v["kind"] == "checkpoint" and "--checkpoint=fast" in v["detail"], v
        assert "up to 4 min 30 s (checkpoint_completion_target 0.9 x checkpoint_timeout " \
            "5 min 00 s), about" in v["detail"] and "left" in v["detail"], v
        assert "CHECKPOINT now" in v["detail"], v
        ck = waiting[-1]["job"]["backup"]["wait"]["checkpoint"]
        assert ck["fast"] is False and ck["bound_s"] == 270.0, ck
        assert 0 <= ck["waited_s"] <= 270.0 and abs(ck["left_s"] + ck["waited_s"] - 270.0) <= 0.11
        # the ETA counts the wait (its bound less what has passed), and says
        # it leaves out the copy to come
        job = waiting[-1]["job"]
        assert job["eta_s"] == job["backup"]["wait"]["left_s"] == ck["left_s"], job
        assert job["eta_reason"] == WAIT_ONLY
        assert "copy not counted" in job["backup"]["eta_basis"]
        lefts = [d["job"]["eta_s"] for d in waiting]
        assert lefts == sorted(lefts, reverse=True), lefts
        assert [w["phase"] for w in waiting[-1]["workers"]] == ["checkpoint"]
        # what the verdict offers: CHECKPOINT now, and the backup goes on
        cluster.psql("CHECKPOINT")
        end = _until_end(mon, 200)
        assert end["job"]["state"] == "finished", end["job"]
        assert proc.wait(timeout=60) == 0
    finally:
        _clean_up(proc, mon)
        cluster.psql("DROP TABLE IF EXISTS bb_dirty")


@pytest.mark.integration
def test_the_end_waits_behind_the_archivers_backlog(workdir: Path) -> None:
    """-X none right after a bulk load, archive_command behind it (held,
    then a segment at a time behind a pause): at its end the server waits
    for the backup's last segment to be archived, behind the load's. pgparmon
    says how many segments (and bytes) stand before it, archive_command's
    pace once it moves and the time left, which is the job's ETA."""
    from pgparmon.cluster import start_cluster

    gate = ArchiveGate(workdir)
    (workdir / "archive").mkdir()
    os.chmod(workdir / "archive", 0o777)
    settings = {"archive_mode": "on", "wal_level": "replica",
                "archive_command": gate.command(f"cp %p {workdir}/archive/%f")}
    with start_cluster(prefix="pgparmon-bbarch-", settings=settings,
                       initdb_args=("--wal-segsize=1",)) as cl:
        archive_caught_up(cl)
        gate.hold()
        proc = None
        mon = None
        try:
            cl.psql("CREATE TABLE bulk AS SELECT g, repeat('b', 200) AS pad "
                    "FROM generate_series(1, 120000) g")
            assert queued_segments(cl) >= 25  # ~30 MB of WAL in 1 MB segments, held
            proc = _start_basebackup(cl, workdir / "bb", "-c", "fast", "-X", "none")
            mon = wait_for_job(_target(cl), pid=None, wait_s=10, interval=0.3)
            held = tick_until(mon, lambda d: (archive_wait(d).get("segments") or 0) >= 20)
            gate.release()
            docs = held + tick_until(mon, lambda d: d["job"]["state"] != "running")
        finally:
            gate.release()
            if proc is not None:
                _clean_up(proc, mon)
    assert proc.returncode == 0, proc.returncode
    end = docs[-1]["job"]
    assert end["state"] == "finished" and end["progress"] == 1.0, end
    h = held[-1]
    arch = h["job"]["backup"]["wait"]["archiving"]
    # held: the backlog before the backup's last segment, no pace yet
    assert h["job"]["phase"] == "waiting for wal archiving to finish"
    assert [w["phase"] for w in h["workers"]] == ["archive-wait"]
    assert arch["bytes"] == arch["segments"] << 20 and arch["pace"] in ("measuring", "stuck")
    assert arch["wal"] and arch["last_archived_wal"] < arch["wal"], arch
    assert h["bottleneck"]["kind"] == "archiving"
    assert h["bottleneck"]["detail"].startswith(
        f"archiving: {arch['segments']} segment(s) ({fmt.size(arch['bytes'])}) queued up to "
        f"the backup's last segment ({arch['wal']})"), h["bottleneck"]
    assert h["job"]["eta_s"] is None and "archiv" in h["job"]["eta_reason"], h["job"]
    # let go: archive_command's pace, the time left: the job's ETA
    waiting = [d for d in docs[len(held):] if d["job"]["state"] == "running" and archive_wait(d)]
    timed = [d for d in waiting if archive_wait(d)["pace"] == "measured"
             and archive_wait(d)["segments"]]
    assert timed, [archive_wait(d) for d in waiting]
    for d in timed:
        a, job = archive_wait(d), d["job"]
        assert a["segments_per_s"] > 0 and a["wal"] == arch["wal"]
        assert a["left_s"] == pytest.approx(a["segments"] / a["segments_per_s"], rel=0.01,
                                            abs=0.2)
        assert job["eta_s"] == job["backup"]["wait"]["left_s"] == a["left_s"], job
        assert job["eta_reason"] is None and "archiver's backlog" in \
            job["backup"]["eta_basis"]
        assert "segments/s" in d["bottleneck"]["detail"] and "about" in \
            d["bottleneck"]["detail"], d["bottleneck"]
    left = [archive_wait(d)["segments"] for d in waiting]
    assert left == sorted(left, reverse=True), left
    assert all(d["bottleneck"]["kind"] != "stalled" for d in docs)


# ---- without a server ------------------------------------------------------------


def _wal(pid: int, start: float, query: str, addr: str = "10.0.0.7",
         app: str = "pg_basebackup") -> Backend:
    return Backend(pid=pid, datname=None, usename="backup", application_name=app,
                   client_addr=addr, client_port=40000 + pid, backend_start=start,
                   xact_start=None, query_start=start, state="active", wait_event_type=None,
                   wait_event=None, backend_type="walsender", backend_xmin=None,
                   leader_pid=None, query=query)


BASE = "BASE_BACKUP ( LABEL 'pg_basebackup base backup',  PROGRESS,  MAX_RATE 8192)"
STREAM = 'START_REPLICATION SLOT "pg_basebackup_{}" 0/7000000 TIMELINE 1'


def test_remote_basebackups_are_one_job_each_with_their_wal_stream() -> None:
    d = PgBasebackup()
    sessions = [_wal(10, 100.0, BASE), _wal(11, 101.0, STREAM.format(11)),
                _wal(20, 200.0, BASE), _wal(21, 201.5, STREAM.format(21)),
                _wal(30, 150.0, BASE, addr="10.0.0.8"),
                _wal(40, 50.0, "IDENTIFY_SYSTEM", app="walreceiver")]
    assert d.session_key(sessions[-1]) is None  # a standby's stream is no backup
    keyed: dict[Any, list[Backend]] = {}
    for b in sessions:
        if (k := d.session_key(b)) is not None:
            keyed.setdefault(k, []).append(b)
    jobs = [d.from_sessions(p) for ms in keyed.values() for p in d.split(ms)]
    assert sorted(sorted(j.pid_hint) for j in jobs) == [[10, 11], [20, 21], [30]]
    assert all(j.grouping == INFERRED and j.database is None for j in jobs)
    # a WAL stream that starts after discovery joins the backup before it
    first = next(j for j in jobs if 10 in j.pid_hint)
    late = [*sessions, _wal(12, 102.0, STREAM.format(12))]
    snap = Snapshot(ts=0.0, wall=0.0, db=DbSample(backends=tuple(late)), host=None)
    assert d.member_pids(first, snap, ClientPids.of(first)) == {10, 11, 12}
    third = next(j for j in jobs if 30 in j.pid_hint)
    assert d.member_pids(third, snap, ClientPids.of(third)) == {30}


def test_basebackup_command_lines_and_options() -> None:
    a = parse_client_cmdline(["pg_basebackup", "-D", "/b/x", "-Ft", "-z", "-r", "8M", "-Xs",
                              "-cfast", "--no-estimate-size", "-d",
                              "host=db1 user=rep password=s3cret"])
    assert (a.file, a.format, a.compression, a.max_rate) == ("/b/x", "tar", "gzip", 8 << 20)
    assert (a.wal_method, a.checkpoint, a.no_estimate) == ("stream", "fast", True)
    assert a.host == "db1" and a.user == "rep"
    assert "s3cret" not in json.dumps(a.redacted_argv)
    b = parse_client_cmdline(["/usr/lib/postgresql/15/bin/pg_basebackup", "--pgdata=/b/y",
                              "--max-rate=512", "--wal-method=none", "--format=plain",
                              "--compress=server-zstd:3"])
    assert (b.file, b.max_rate, b.wal_method, b.format) == ("/b/y", 512 * 1024, "none", "plain")
    assert b.compression == "server-zstd:3"
    assert max_rate_bytes("32k") == 32 * 1024 and max_rate_bytes("x") is None
    opts = command_options("BASE_BACKUP ( LABEL 'l', PROGRESS, CHECKPOINT 'fast', WAIT 0, "
                           "MAX_RATE 32768, MANIFEST 'yes', COMPRESSION 'zstd')")
    # WAIT 0: pg_basebackup gets the WAL itself (-X stream), the server does
    # not wait for it to be archived
    assert opts == {"max_rate": 32 << 20, "fast_checkpoint": True,
                    "server_compression": "zstd", "waits_for_archive": False}
    old = command_options("BASE_BACKUP LABEL 'l' PROGRESS FAST NOWAIT MAX_RATE 1024")
    assert old["fast_checkpoint"] and old["max_rate"] == 1 << 20
    assert not old["waits_for_archive"]
    # -X none: no WAIT option, the server waits for its last segment
    none = command_options("BASE_BACKUP ( LABEL 'pg_basebackup base backup', PROGRESS, "
                           "CHECKPOINT 'fast', MANIFEST 'yes', TARGET 'client')")
    assert none["waits_for_archive"] and none["fast_checkpoint"]


@pytest.mark.integration
def test_a_failing_archive_command_is_named_while_the_backup_waits(workdir: Path) -> None:
    """-X none with archiving on: the backup waits at its end for its last
    WAL segment to be archived; an archive_command that fails makes that
    wait endless, and pgparmon says why."""
    with start_cluster(prefix="pgparmon-arch-",
                       settings={"archive_mode": "on", "archive_command": "'false'",
                                 "wal_level": "replica"}) as cl:
        proc = _start_basebackup(cl, workdir / "bb", "-c", "fast", "-X", "none")
        mon = None
        try:
            mon = wait_for_job(_target(cl), pid=None, wait_s=10, interval=0.3)
            doc = None
            for _ in range(60):
                doc = mon.tick().to_json()
                if doc["job"]["phase"] == "waiting for wal archiving to finish" and \
                        "fails" in doc["bottleneck"]["detail"] and doc["warnings"]:
                    break
                time.sleep(0.5)
            assert doc is not None and doc["bottleneck"]["kind"] == "archiving", \
                doc and (doc["job"]["phase"], doc["bottleneck"])
            assert "archive_command" in doc["bottleneck"]["detail"]
            assert doc["job"]["state"] == "running" and doc["job"]["progress"] < 1.0
            assert [w["phase"] for w in doc["workers"]] == ["archive-wait"]
            (warn,) = [w for w in doc["warnings"] if w["code"] == "archive-failing"]
            assert "last failed segment 0000" in warn["message"], warn
        finally:
            _clean_up(proc, mon)
