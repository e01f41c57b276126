"""COPY jobs grouped by their client: real psql scripts and a real
multiprocessing loader, found as ONE job each (the process tree), followed
through the idle gaps between batches, ended when the processes exit."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from support import Lines, attach_while_held, pgparmon_cmd, read_jsonl, wait_for_monitor

from pgparmon.analyze import eta
from pgparmon.analyze.advice_live import AdviceTracker
from pgparmon.cluster import Cluster
from pgparmon.discover import find_jobs
from pgparmon.jobs.base import Job, PlanInputs
from pgparmon.jobs.copy import IDLE_GRACE_S, INFERRED, TREE
from pgparmon.monitor import Monitor
from pgparmon.playback import ReplayFeed
from pgparmon.readers import procs
from pgparmon.readers.db import ServerFacts
from pgparmon.record import read_recording
from pgparmon.snapshot import (
    Backend,
    ClientProc,
    CopyProgress,
    DbSample,
    FileSize,
    OpenFile,
    Snapshot,
)

integration = pytest.mark.integration

DB = "copyjobs"
ROWS = 60_000  # ~3 MB of CSV per stream

# every 1000th row naps: a load of a few MB lasts a few seconds
SLOW = """
CREATE OR REPLACE FUNCTION nap() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.id % 1000 = 0 THEN PERFORM pg_sleep(0.06); END IF;
  RETURN NEW;
END $$;
-- an index build that lasts: the expression naps every 1000th row
CREATE OR REPLACE FUNCTION slowkey(i bigint) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF i % 1000 = 0 THEN PERFORM pg_sleep(0.04); END IF;
  RETURN i;
END $$;
"""


@pytest.fixture(scope="module")
def copydb(cluster: Cluster) -> str:
    cluster.psql(f"DROP DATABASE IF EXISTS {DB}")
    cluster.psql(f"CREATE DATABASE {DB}")
    cluster.psql(SLOW, dbname=DB)
    for t in ("t1", "t2", "b"):
        cluster.psql(f"CREATE TABLE {t} (id bigint, v text, w text)", dbname=DB)
        cluster.psql(f"CREATE TRIGGER nap BEFORE INSERT ON {t} FOR EACH ROW "
                     "EXECUTE FUNCTION nap()", dbname=DB)
    return DB


def _csv(path: Path, rows: int = ROWS) -> Path:
    line = "%d,0123456789abcdef0123456789abcdef,fedcba9876543210\n"
    with open(path, "w") as f:
        f.write("".join(line % i for i in range(rows)))
    os.chmod(path, 0o644)
    return path


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def _conn_args(cluster: Cluster) -> list[str]:
    return ["-h", str(cluster.sockdir), "-p", str(cluster.port), "-U", "postgres", "-d", DB]


def _attach(cluster: Cluster, *extra: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(pgparmon_cmd("attach", *_conn_args(cluster), "--json", "--interval",
                                       "0.3", *extra),
                          capture_output=True, text=True, timeout=timeout, env=_env())


def _docs(out: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    docs = read_jsonl(out)
    samples = [d for d in docs if d.get("schema") == "pgparmon.sample/1"]
    summary = [d for d in docs if d.get("schema") == "pgparmon.summary/1"]
    assert samples, out
    return samples, summary[0] if summary else None  # type: ignore[return-value]


def _psql_script(cluster: Cluster, workdir: Path, exit_code: int = 0,
                 indexes: bool = False) -> Path:
    """Two `psql \\copy` streams at once, then (indexes) two index builds at
    once: a migration tool's shape."""
    psql = cluster.client("psql")
    f1, f2 = _csv(workdir / "one.csv"), _csv(workdir / "two.csv")
    conn = " ".join(_conn_args(cluster))
    run = f"{psql} -X -q {conn} -c"
    script = workdir / "load.sh"
    build = "".join(f"{run} 'CREATE INDEX ON {t} (slowkey(id))' &\n" for t in ("t1", "t2"))
    script.write_text(
        "#!/bin/sh\n"
        f"{run} \"\\copy t1 FROM '{f1}' CSV\" &\n"
        f"{run} \"\\copy t2 FROM '{f2}' CSV\" &\n"
        "wait\n"
        + (build + "wait\n" if indexes else "")
        + f"exit {exit_code}\n")
    return script


def _wait_sql(cluster: Cluster, sql: str, n: int, timeout: float = 30.0,
              proc: subprocess.Popen[Any] | None = None) -> list[int]:
    deadline = time.monotonic() + timeout
    with psycopg.connect(cluster.conninfo(DB), autocommit=True) as conn:
        while time.monotonic() < deadline:
            pids = [r[0] for r in conn.execute(sql).fetchall()]
            if len(pids) >= n:
                return pids
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"the job exited early with {proc.returncode}")
            time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {sql}")


def _follow_to_end(cluster: Cluster, proc: subprocess.Popen[Any], *extra: str,
                   hold: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """attach (no --pid) until the job ends: it is the process tree of `proc`,
    and attach returns only once that tree has exited. hold: the job runs
    already, and is held while attach starts (found mid-run however long
    attach takes to start on a busy machine)."""
    try:
        if hold:
            att = attach_while_held(proc.pid, pgparmon_cmd(
                "attach", *_conn_args(cluster), "--json", "--interval", "0.3", *extra), _env())
            samples, summary, err = att.finish(timeout=90)
            code = att.proc.returncode
        else:
            res = _attach(cluster, *extra)
            code, err = res.returncode, res.stderr
            samples, summary = _docs(res.stdout)
        assert proc.poll() is not None, "attach returned while the job still ran"
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == 0
    assert code == 0, err
    first = samples[0]["job"]
    assert first["kind"] == "copy" and first["grouping"] == "process tree"
    assert first["client_pid"] == proc.pid
    return samples, summary


COPYING = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
           "AND state = 'active' AND query ILIKE 'copy%'")


@integration
def test_psql_script_is_one_job_with_file_progress(cluster: Cluster, copydb: str,
                                                   workdir: Path) -> None:
    script = _psql_script(cluster, workdir, indexes=True)
    job = subprocess.Popen(["sh", str(script)], env=_env())
    _wait_sql(cluster, COPYING, 2, proc=job)
    # no --pid: both psql streams, one job
    samples, summary = _follow_to_end(cluster, job, hold=True)
    streams = {w["pid"] for s in samples for w in s["workers"] if w["phase"] == "copy"}
    assert len(streams) == 2
    clients = {w["client_pid"] for s in samples for w in s["workers"] if w["phase"] == "copy"}
    assert len(clients) == 2 and None not in clients  # each stream linked to its psql
    assert {w["relation"] for s in samples for w in s["workers"]} >= {"public.t1", "public.t2"}
    prog = [s["job"]["progress"] for s in samples[:-1] if s["job"]["progress"] is not None]
    assert prog and 0 < min(prog) < 1.0, prog  # read positions over the files' sizes
    assert all(b >= a for a, b in zip(prog, prog[1:])), prog
    assert all(s["job"]["progress_basis"] == "client input files" for s in samples[1:])
    assert any(s["job"]["eta_s"] is not None for s in samples)
    assert all(s["job"]["state"] == "running" for s in samples[:-1])
    # the index builds after the load: the same job, its sessions building
    builds = [s for s in samples if s["job"]["phase"] == "index build"]
    assert builds and all(s["job"]["client_pid"] == job.pid for s in builds)
    assert {w["phase"] for s in builds for w in s["workers"]} >= {"index"}
    assert samples[-1]["job"]["state"] == "finished" and samples[-1]["job"]["progress"] == 1.0
    assert summary is not None and summary["state"] == "finished"
    assert summary["grouping"] == "process tree" and summary["databases"] == [DB]


LOADER = r"""
import multiprocessing, sys, time
import psycopg

conninfo, batches, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ROW = b"%d,0123456789abcdef0123456789abcdef,fedcba9876543210\n"


def work(n):
    with psycopg.connect(conninfo, application_name="batchload") as conn:
        for k in range(batches):
            base = (n * batches + k) * 15000  # a batch naps 15 times: ~1 s of COPY
            with conn.cursor().copy("COPY b FROM STDIN (FORMAT csv)") as cp:
                for i in range(0, 15000, 500):
                    cp.write(b"".join(ROW % (base + j) for j in range(i, i + 500)))
            time.sleep(gap / 2)  # idle in transaction, its COPY done
            conn.commit()
            time.sleep(gap / 2)  # idle: parsing the next batch


if __name__ == "__main__":
    multiprocessing.set_start_method("fork")
    procs = [multiprocessing.Process(target=work, args=(n,)) for n in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    sys.exit(max(p.exitcode or 0 for p in procs))
"""


def _loader(cluster: Cluster, workdir: Path, batches: int, gap: float) -> subprocess.Popen[Any]:
    path = workdir / "loader.py"
    path.write_text(LOADER)
    return subprocess.Popen([sys.executable, str(path), cluster.conninfo(DB), str(batches),
                             str(gap)], env=_env())


@integration
def test_batch_loader_stays_running_through_idle_gaps(cluster: Cluster, copydb: str,
                                                      workdir: Path) -> None:
    loader = _loader(cluster, workdir, batches=3, gap=2.0)
    samples, summary = _follow_to_end(cluster, loader, "--wait", "20")
    assert len({w["pid"] for s in samples for w in s["workers"]}) == 2
    assert all(s["job"]["state"] == "running" for s in samples[:-1])
    idle = [s for s in samples if s["job"]["phase"] == "idle between batches"]
    assert idle and all(s["job"]["state"] == "running" for s in idle)
    assert any(s["job"]["phase"] == "copy" for s in samples)
    assert any(s["job"]["bytes_per_s"] > 0 for s in samples)
    # STDIN and no input file: rates only, and no made-up percentage
    assert all(s["job"]["progress"] is None for s in samples[:-1])
    assert all(s["job"]["progress_basis"] == "unknown" for s in samples)
    assert "total unknown" in (samples[-2]["job"]["eta_reason"] or "")
    assert samples[-1]["job"]["state"] == "finished"
    assert samples[-1]["job"]["copies_done"] >= 4
    assert summary is not None and summary["state"] == "finished"


@integration
def test_pid_picks_the_tree_by_root_or_backend(cluster: Cluster, copydb: str,
                                               workdir: Path) -> None:
    loader = _loader(cluster, workdir, batches=20, gap=0.5)
    try:
        backends = _wait_sql(cluster, "SELECT pid FROM pg_stat_activity WHERE "
                             "application_name = 'batchload'", 2, proc=loader)
        for pid in (loader.pid, backends[1]):
            res = _attach(cluster, "--pid", str(pid), "--duration", "1")
            assert res.returncode == 0, res.stderr
            samples, _ = _docs(res.stdout)
            assert samples[0]["job"]["client_pid"] == loader.pid
            assert samples[-1]["job"]["state"] == "running"
        res = _attach(cluster, "--pid", "1", "--duration", "1")
        assert res.returncode == 4 and "no " in res.stderr
    finally:
        _kill_tree(loader)


def _gated_loader(cluster: Cluster, workdir: Path, name: str) -> tuple[subprocess.Popen[Any],
                                                                        Path]:
    """A load script that reads its orders from a FIFO before it connects
    (a loader reading its input first): "load" makes it `psql \\copy` a CSV
    into b, anything else makes it exit without a session."""
    gate = workdir / f"{name}.gate"
    os.mkfifo(gate)
    csv = _csv(workdir / f"{name}.csv", rows=20_000)
    script = workdir / f"{name}.sh"
    script.write_text(f"#!/bin/sh\nread order < {gate}\n[ \"$order\" = load ] || exit 0\n"
                      f"{cluster.client('psql')} -X -q {' '.join(_conn_args(cluster))} "
                      f"-v ON_ERROR_STOP=1 -c \"\\copy b FROM '{csv}' CSV\"\n")
    return subprocess.Popen(["sh", str(script)], env=_env()), gate


def _attach_looking(cluster: Cluster, *args: str) -> subprocess.Popen[str]:
    """`attach --json ARGS`, returned once it has connected and sampled the
    server once (its session idle after the sample statement): it looked,
    and found no job of that pid yet."""
    attach = subprocess.Popen(pgparmon_cmd("attach", *_conn_args(cluster), "--json",
                                           "--interval", "0.3", *args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env())
    wait_for_monitor(cluster, attach, DB)
    return attach


def _say(gate: Path, order: str) -> None:
    with open(gate, "w") as f:
        f.write(order + "\n")


@integration
def test_pid_of_a_loader_that_has_not_connected_yet_is_waited_for(
        cluster: Cluster, copydb: str, workdir: Path) -> None:
    """`attach --pid` (no --wait) on a load script that has opened no
    session yet: a process this young is given until 10 s after its start
    to show one (PID_GRACE_S), and the job is followed once it does."""
    loader, gate = _gated_loader(cluster, workdir, "late")
    # its COPY waits for this lock until attach has seen it: a load of a
    # second could start and end between two of attach's looks on a busy
    # machine (it then exits 4, "ended before a job of it was seen")
    holder = psycopg.connect(cluster.conninfo(DB))
    try:
        holder.execute("LOCK TABLE b IN ACCESS EXCLUSIVE MODE")
        attach = Lines(_attach_looking(cluster, "--pid", str(loader.pid)))
        _say(gate, "load")
        attach.wait_for(lambda s: s["job"]["client_pid"] == loader.pid, "the load followed")
        holder.rollback()
        samples, summary, err = attach.finish(timeout=120)
    finally:
        holder.close()
        if loader.poll() is None:
            _kill_tree(loader)
    assert attach.proc.returncode == 0, err
    assert samples[0]["job"]["kind"] == "copy"
    assert samples[0]["job"]["client_pid"] == loader.pid
    # the table as the statement names it: its COPY was first seen waiting for
    # the lock, before the server's progress view named it public.b
    assert any(w["phase"] == "copy" and w["relation"] in ("b", "public.b")
               for s in samples for w in s["workers"])
    assert summary is not None and summary["state"] == "finished"


@integration
def test_pid_that_never_shows_a_session_is_one_line_exit_4(cluster: Cluster, copydb: str,
                                                           workdir: Path) -> None:
    """The process waited for ends without a session: exit 4 at once, saying
    so; one that stays without a session past --wait: exit 4 saying how
    long it waited. One line each, no traceback."""
    loader, gate = _gated_loader(cluster, workdir, "never")
    try:
        attach = _attach_looking(cluster, "--pid", str(loader.pid))
        _say(gate, "stop")
        assert loader.wait(timeout=30) == 0
        _, err = attach.communicate(timeout=60)
    finally:
        if loader.poll() is None:
            _kill_tree(loader)
    assert attach.returncode == 4, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"process {loader.pid} (sh) ended before a job of it was seen" in err, err

    loader, gate = _gated_loader(cluster, workdir, "silent")
    try:
        res = _attach(cluster, "--pid", str(loader.pid), "--wait", "1")
        _say(gate, "stop")
        assert loader.wait(timeout=30) == 0
    finally:
        if loader.poll() is None:
            _kill_tree(loader)
    assert res.returncode == 4, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert f"no job of process {loader.pid} (sh) on this server after waiting 1 s" \
        in res.stderr, res.stderr


IDLE_IN_TX = r"""
import sys, time
import psycopg

with psycopg.connect(sys.argv[1], application_name="idler") as conn:
    with conn.cursor().copy("COPY b FROM STDIN (FORMAT csv)") as cp:
        cp.write(b"1,a,b\n")
    time.sleep(float(sys.argv[2]))  # idle in transaction after its COPY
"""


def _kill_tree(proc: subprocess.Popen[Any]) -> None:
    for p in [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]:
        try:
            p.kill()
        except psutil.Error:
            pass
    proc.wait(timeout=30)


@integration
def test_a_load_idle_after_its_copy_is_found(cluster: Cluster, copydb: str) -> None:
    idler = subprocess.Popen([sys.executable, "-c", IDLE_IN_TX, cluster.conninfo(DB), "30"],
                             env=_env())
    try:
        _wait_sql(cluster, "SELECT pid FROM pg_stat_activity WHERE application_name = 'idler' "
                  "AND state = 'idle in transaction'", 1, proc=idler)
        res = _attach(cluster, "--duration", "1")
        assert res.returncode == 0, res.stderr
        samples, _ = _docs(res.stdout)
        job = samples[-1]["job"]
        assert job["client_pid"] == idler.pid and job["state"] == "running"
        assert job["phase"] == "idle between batches"
    finally:
        _kill_tree(idler)


@pytest.mark.parametrize("code", [0, 3])
@integration
def test_run_any_command_exits_with_its_code(cluster: Cluster, copydb: str, workdir: Path,
                                             code: int) -> None:
    script = _psql_script(cluster, workdir, exit_code=code)
    rec = workdir / "copy.pgparmon.gz"
    # without -d (code 3) pgparmon's own session is on "postgres": the job's
    # databases are still only those its sessions use
    conn = _conn_args(cluster) if code == 0 else _conn_args(cluster)[:-2]
    res = subprocess.run(pgparmon_cmd("run", *conn, "--json", "--interval",
                                      "0.3", "--record", str(rec), "--", "sh", str(script),
                                      "dbname=x password=s3cr3t-pass"),
                         capture_output=True, text=True, timeout=90, env=_env())
    assert res.returncode == code, res.stderr
    # the links and file positions are in the recording: the replay agrees
    r = read_recording(str(rec))
    assert r.header["job"]["grouping"] == "process tree"
    feed = ReplayFeed(r, speed=1000.0)
    replayed = []
    while not feed.ended and feed.outcome is None:
        replayed.append(feed.tick())
    assert [s.to_json() for s in replayed] == r.samples and feed.summary() == r.summary
    assert "s3cr3t-pass" not in res.stdout + res.stderr  # the command shown is redacted
    samples, summary = _docs(res.stdout)
    assert samples[0]["job"]["kind"] == "copy"
    assert samples[0]["job"]["grouping"] == "process tree"
    assert samples[-1]["job"]["state"] == ("finished" if code == 0 else "failed")
    assert summary["databases"] == [DB]
    assert any(w["phase"] == "copy" for s in samples for w in s["workers"])
    res = subprocess.run(pgparmon_cmd("run", *_conn_args(cluster), "--", "no-such-cmd-x"),
                         capture_output=True, text=True, timeout=30, env=_env())
    assert res.returncode == 2 and res.stderr.count("\n") == 1


# ---- without a server: grouping, idle gaps, replay -------------------------

FACTS = ServerFacts(version_num=150000, version="15.0", database="a", user="postgres",
                    backend_pid=1, backend_start=None, postmaster_start=None,
                    settings={"block_size": "8192"}, is_superuser=True, read_all_stats=True,
                    has_copy_progress=True, has_index_progress=True)


def _b(pid: int, db: str = "a", table: str = "t", state: str = "active", app: str = "mig",
       since: float = 0.0, start: float = 0.0, query: str | None = None) -> Backend:
    return Backend(pid=pid, datname=db, usename="u", application_name=app,
                   client_addr="10.0.0.9", client_port=40000 + pid, backend_start=start,
                   xact_start=None, query_start=since, state=state, wait_event_type=None,
                   wait_event=None, backend_type="client backend", backend_xmin=None,
                   leader_pid=None, query=query or f"COPY {table} FROM STDIN",
                   state_change=since)


def test_remote_sessions_group_by_client_not_table() -> None:
    db = DbSample(server_ts=100.0, backends=(
        _b(1, "a", "t1"), _b(2, "b", "t2"), _b(3, "a", "t3", state="idle in transaction",
                                              since=90.0),
        _b(4, app="other"),  # another client: another job
        _b(5, state="idle", since=100.0 - IDLE_GRACE_S - 5, app="stale"),  # no load now
        _b(6, start=100.0 + 3600, app="mig")))  # the same key, an hour later: another run
    jobs = find_jobs(FACTS, db, scan_processes=False)
    assert sorted(len(j.pid_hint) for j in jobs) == [1, 1, 3]
    mig = next(j for j in jobs if j.pid_hint == {1, 2, 3})
    assert mig.grouping == INFERRED and mig.client_pid is None and mig.databases == ("a", "b")
    assert "inferred" in mig.describe() and "databases a, b" in mig.describe()
    assert Job.from_dict(mig.to_dict()) == mig


class Scripted:
    """A Source playing snapshots from a list (a replay does the same)."""

    def __init__(self, job: Job, snaps: list[Snapshot], plan: PlanInputs | None = None) -> None:
        self.facts, self.job, self.snaps = FACTS, job, iter(snaps)
        self.target_dir, self.devices = None, set()
        self.plan: PlanInputs | None = plan  # what a copy's source catalog says
        self.plan_asks: list[dict[str, Any]] = []
        self.done: dict[str, Any] = {}  # what the target's catalog holds
        self.done_asks: list[str | None] = []

    def discover(self) -> Job:
        return self.job

    def snapshot(self) -> Snapshot:
        return next(self.snaps)

    def may_ask_again(self, kind: str) -> bool:
        return False

    def pause(self, seconds: float) -> None:
        pass

    def plan_inputs(self, req: dict[str, Any] | None = None) -> PlanInputs | None:
        self.plan_asks.append(req or {})
        return self.plan

    def catalog_done(self, database: str | None = None) -> dict[str, Any]:
        self.done_asks.append(database)
        return self.done

    def close(self) -> None:
        pass


def _snap(t: float, backends: tuple[Backend, ...], copies: tuple[CopyProgress, ...] = (),
          **kw: Any) -> Snapshot:
    return Snapshot(ts=t, wall=1000.0 + t, host=None,
                    db=DbSample(server_ts=t, backends=backends, copies=copies), **kw)


def _cp(pid: int, done: int) -> CopyProgress:
    return CopyProgress(pid, "a", None, "public.t", "COPY FROM", "PIPE", done, 0, done // 50, 0)


def test_remote_job_runs_through_idle_gaps_and_ends_after_the_grace() -> None:
    job = Job(kind="copy", database="a", usename="u", client_addr="10.0.0.9", app_name="mig",
              grouping=INFERRED, pid_hint=frozenset({1}))
    snaps = [_snap(t, (_b(1, since=t - 0.5),), (_cp(1, 1000 * t),)) for t in range(1, 4)]
    snaps += [_snap(t, (_b(1, state="idle", since=3.5),)) for t in range(4, 40)]
    snaps += [_snap(t, (_b(1, state="idle", since=3.5),)) for t in range(70, 80)]
    mon = Monitor(Scripted(job, snaps))
    mon.discover()
    docs = [mon.tick().to_json() for _ in range(len(snaps)) if mon.outcome is None]
    gap = [d for d in docs if d["job"]["phase"] == "idle between batches"]
    assert len(gap) >= 30 and all(d["job"]["state"] == "running" for d in gap)
    assert docs[-1]["job"]["state"] == "finished" and docs[-1]["elapsed_s"] >= 70 - 1
    assert docs[2]["job"]["progress"] is None and docs[2]["job"]["progress_basis"] == "unknown"
    # COPY FROM STDIN with no input file to read: the stream's progress is not
    # known either (not 100%: its bytes so far are no total)
    assert docs[2]["workers"][0]["progress"] is None
    assert "total unknown" in docs[5]["job"]["eta_reason"]


def test_tree_job_members_and_file_progress_come_from_the_snapshot() -> None:
    """Links and file positions are readings in the snapshot: a replay (the
    snapshot's JSON round trip) reaches the same members and progress."""
    job = Job(kind="copy", database="a", client_pid=50, client_pids=frozenset({50, 51, 52}),
              grouping=TREE, pid_hint=frozenset({1, 2}))
    stranger = _b(9, app="psql")  # a COPY of another process: not this job
    snaps = []
    for t in range(1, 6):
        files = tuple(ClientProc(p, 50, "psql", 0.0, "running", 0.1, 0.1, 0, 0,
                                 (OpenFile(f"/data/{p}.csv", 200 * t, "r"),))
                      for p in (51, 52))
        snaps.append(_snap(t, (_b(1, since=0.5), _b(2, "b", since=0.5), stranger),
                           (_cp(1, 100 * t), _cp(2, 100 * t), _cp(9, 5)),
                           clients=(ClientProc(50, 1, "sh", 0.0, "sleeping", 0, 0, 0, 0, ()),
                                    *files), root_alive=True,
                           files=(FileSize("/data/51.csv", 2000), FileSize("/data/52.csv", 2000)),
                           links=((1, 51), (2, 52), (9, 77))))
    replayed = [Snapshot.from_dict(json.loads(json.dumps(s.to_dict()))) for s in snaps]
    for source in (snaps, replayed):
        mon = Monitor(Scripted(job, list(source)))
        mon.discover()
        docs = [mon.tick().to_json() for _ in source]
        last = docs[-1]["job"]
        assert {w["pid"] for w in docs[-1]["workers"]} == {1, 2}
        assert {w["client_pid"] for w in docs[-1]["workers"]} == {51, 52}
        assert last["progress"] == 0.5 and last["progress_basis"] == "client input files"
        # each stream: its own client's input file
        assert [w["progress"] for w in docs[-1]["workers"]] == [0.5, 0.5]
        assert [w["progress"] for w in docs[0]["workers"]] == [0.1, 0.1]
        assert last["state"] == "running" and last["phase"] == "copy"
        assert last["eta_s"] is not None and last["databases"] == ["a", "b"]  # 2 is on b


def test_eta_waits_for_the_slowest_reader_not_the_job_rate() -> None:
    """Two readers, 1 MB and 3 MB, each reading 100 kB/s: the small one ends
    at 10 s, then the big one reads alone. At 15 s the job's read rate over
    its window (2.5 MB in 15 s) would give 1.5 MB / 167 kB/s = 9 s; the job
    ends when the big file's reader does, 15 s later."""
    job = Job(kind="copy", database="a", client_pid=50, client_pids=frozenset({50, 51, 52}),
              grouping=TREE, pid_hint=frozenset({1, 2}))
    sizes = {51: 1_000_000, 52: 3_000_000}
    snaps = []
    for t in range(1, 16):
        readers = [p for p in (51, 52) if 100_000 * (t - 1) < sizes[p]]  # 51 exits after 10 s
        clients = tuple(ClientProc(p, 50, "psql", 0.0, "running", 0.1, 0.1, 0, 0,
                                   (OpenFile(f"/data/{p}.csv", min(100_000 * t, sizes[p]),
                                             "r"),))
                        for p in readers)
        snaps.append(_snap(t, tuple(_b(p - 50, since=0.5) for p in readers),
                           tuple(dataclasses.replace(_cp(p - 50, 100_000 * t),
                                                     relation=f"public.t{p - 50}")
                                 for p in readers),
                           clients=(ClientProc(50, 1, "sh", 0.0, "sleeping", 0, 0, 0, 0, ()),
                                    *clients), root_alive=True,
                           files=tuple(FileSize(f"/data/{p}.csv", n) for p, n in sizes.items()),
                           links=tuple((p - 50, p) for p in readers)))
    mon = Monitor(Scripted(job, snaps))
    mon.discover()
    samples = [mon.tick() for _ in snaps]
    last = samples[-1].to_json()["job"]
    assert last["progress"] == 0.625 and last["state"] == "running"
    assert last["eta_s"] == pytest.approx(15.0, rel=0.1)
    # the big file's table is the last item the views read (from the driver's
    # own ETA, as the simulation's would name it); while both read, the
    # small file's reader ends first and the big one's rest is the tail
    assert samples[-1].job.last_item == samples[3].job.last_item == "public.t2"
    est = eta.estimate(mon.tracker)  # type: ignore[arg-type]
    assert est.last_item == "public.t2" and est.tail_s == pytest.approx(est.seconds)
    advice = AdviceTracker()
    for s in samples:
        advice.add(s)
    assert advice.last_item == "public.t2"


POOL = """
import multiprocessing, sys, time
if __name__ == "__main__":
    multiprocessing.set_start_method(sys.argv[1])
    ps = [multiprocessing.Process(target=time.sleep, args=(30,)) for _ in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
"""


def _children(pid: int, n: int) -> list[int]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        kids = psutil.Process(pid).children()
        if len(kids) >= n:
            return [k.pid for k in kids]
        time.sleep(0.05)
    raise AssertionError("children did not start")


def test_job_root_climbs_workers_and_scripts_not_the_caller() -> None:
    """A script's commands and a multiprocessing pool's workers lead to the
    script / the pool's parent; the test runner that started them is not
    part of the job (it is not a launcher)."""
    script = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    pools = [subprocess.Popen([sys.executable, "-c", POOL, m]) for m in ("fork", "spawn")]
    try:
        for proc in (script, *pools):
            kids = _children(proc.pid, 2)
            assert {procs.job_root(k) for k in kids} == {proc.pid}
            assert procs.job_root(proc.pid) == proc.pid
            assert set(kids) <= set(procs.tree_pids(proc.pid))
    finally:
        for proc in (script, *pools):
            _kill_tree(proc)


def test_input_files_are_data_not_code_or_settings() -> None:
    def inp(path: str, mode: str = "r") -> bool:
        return procs.is_input_file(OpenFile(path, 0, mode))

    assert inp("/srv/load/part-1.csv") and inp("/tmp/x/a.tsv.gz")
    assert not inp("/srv/load/part-1.csv", "w")  # written, not read
    for path in ("/root/.pgpass", "/home/u/.postgresql/root.crt", "/usr/lib/libpq.so.5",
                 "/srv/app/loader.py", "/proc/1/stat", "/venv/lib/site-packages/x/data.csv"):
        assert not inp(path), path


def test_a_loaders_index_build_is_an_item_with_its_own_eta() -> None:
    """A load (COPY FROM STDIN, no total) then the loader's CREATE INDEX: the
    build is an item of the job (worker row, timeline, summary), its ETA is
    its own pace (elapsed x (1 - f) / f); an ADD CONSTRAINT FOREIGN KEY,
    which no view measures, gets no ETA and says why."""
    from pgparmon.snapshot import IndexProgress

    job = Job(kind="copy", database="a", usename="u", client_addr="10.0.0.9", app_name="mig",
              grouping=INFERRED, pid_hint=frozenset({1}))
    snaps = [_snap(t, (_b(1, since=0.5),), (_cp(1, 1000 * t),)) for t in range(1, 4)]
    for t in range(4, 14):  # the build scans the heap: 10% of it per second
        ip = IndexProgress(1, "a", None, "public.t", None, "t_v", "CREATE INDEX",
                           "building index: scanning table", 100, 10 * (t - 3), 0, 0)
        snaps.append(Snapshot(ts=t, wall=1000.0 + t, host=None, db=DbSample(
            server_ts=t, backends=(_b(1, query="CREATE INDEX t_v ON t (v)", since=3.5),),
            copies=(), indexes=(ip,))))
    for t in range(14, 17):
        snaps.append(_snap(t, (_b(1, query="ALTER TABLE t ADD CONSTRAINT t_fk FOREIGN KEY "
                                           "(r) REFERENCES r (id)", since=13.5),)))
    snaps += [_snap(t, ()) for t in range(17, 21)]
    mon = Monitor(Scripted(job, snaps))
    mon.discover()
    docs = [mon.tick().to_json() for _ in range(len(snaps)) if mon.outcome is None]
    loading = docs[1]
    assert loading["job"]["eta_s"] is None and "total unknown" in loading["job"]["eta_reason"]
    # t=8: 4.5 s into the build (it began at 3.5), 50% of the heap scanned (f = 0.3):
    # 4.5 x 0.7 / 0.3 = 10.5 s
    build = next(d for d in docs if d["elapsed_s"] == 7.0)
    (w,) = build["workers"]
    assert w["phase"] == "index" and w["item"] == "t_v" and w["relation"] == "public.t"
    assert build["job"]["phase"] == "index build"
    assert build["job"]["eta_s"] == pytest.approx(4.5 * 0.7 / 0.3, rel=0.05), build["job"]
    fk = next(d for d in docs if d["elapsed_s"] == 14.0)
    assert fk["workers"][0]["phase"] == "constraint" and fk["job"]["eta_s"] is None
    assert "no progress view" in fk["job"]["eta_reason"]
    items = {i["name"]: i for i in mon.summary()["items"]}
    assert items["t_v"]["kind"] == "index" and items["t_v"]["state"] == "done"
    assert items["t_fk"]["kind"] == "constraint"
    assert items["t_v"]["duration_s"] == pytest.approx(10.0, abs=1.01)


def test_a_loaders_vacuum_analyze_is_an_item_with_its_progress() -> None:
    """VACUUM (ANALYZE) after a load: one item of the job, the worker's phase
    `vacuum` then `analyze` as the server's progress views say, the job's
    phase `vacuum / analyze`, progress from the heap blocks scanned."""
    from pgparmon.snapshot import MaintProgress

    job = Job(kind="copy", database="a", usename="u", client_addr="10.0.0.9", app_name="mig",
              grouping=INFERRED, pid_hint=frozenset({1}))
    snaps = [_snap(t, (_b(1, since=0.5),), (_cp(1, 1000 * t),)) for t in range(1, 4)]
    for t in range(4, 12):
        mp = (MaintProgress(1, "a", 5, "public.t", "VACUUM", "scanning heap", 100, 20 * (t - 3))
              if t < 9 else
              MaintProgress(1, "a", 5, "public.t", "ANALYZE", "acquiring sample rows", 50, 10))
        snaps.append(Snapshot(ts=t, wall=1000.0 + t, host=None, db=DbSample(
            server_ts=t, backends=(_b(1, query="VACUUM (ANALYZE) t", since=3.5),),
            copies=(), maint=(mp,))))
    snaps += [_snap(t, ()) for t in range(12, 16)]
    mon = Monitor(Scripted(job, snaps))
    mon.discover()
    docs = [mon.tick().to_json() for _ in range(len(snaps)) if mon.outcome is None]
    vac = next(d for d in docs if d["elapsed_s"] == 4.0)  # t=5: 40% of the heap scanned
    (w,) = vac["workers"]
    assert w["phase"] == "vacuum" and w["item"] == "VACUUM public.t"
    assert w["relation"] == "public.t" and w["progress"] == pytest.approx(0.9 * 0.4, abs=0.01)
    assert vac["job"]["phase"] == "vacuum / analyze" and vac["job"]["eta_s"] is not None
    ana = next(d for d in docs if d["elapsed_s"] == 9.0)
    assert ana["workers"][0]["phase"] == "analyze"
    items = {i["name"]: i for i in mon.summary()["items"]}
    assert items["VACUUM public.t"]["kind"] == "vacuum"
    assert items["VACUUM public.t"]["state"] == "done"


def test_a_session_whose_copy_failed_is_said_once() -> None:
    """A loader's COPY rejected by the server (a bad input line) leaves its
    session idle in an aborted transaction: attach cannot read the error's
    text, but says which session and which COPY failed, once."""
    job = Job(kind="copy", database="a", usename="u", client_addr="10.0.0.9", app_name="mig",
              grouping=INFERRED, pid_hint=frozenset({1, 2}))
    snaps = [_snap(t, (_b(1, since=0.5), _b(2, table="u", since=0.5)),
                   (_cp(1, 1000 * t), _cp(2, 1000 * t))) for t in range(1, 4)]
    snaps += [_snap(t, (_b(1, since=0.5), _b(2, table="u", state="idle in transaction (aborted)",
                                             since=3.5)), (_cp(1, 1000 * t),))
              for t in range(4, 8)]
    mon = Monitor(Scripted(job, snaps))
    mon.discover()
    docs = [mon.tick().to_json() for _ in snaps]
    assert not any("aborted" in n for n in docs[2]["notes"])
    said = [n for n in docs[-1]["notes"] if "aborted" in n]
    assert said == [said[0]] and "session 2" in said[0] and "COPY into u" in said[0], said
    assert docs[-1]["job"]["state"] == "running"  # the other stream still loads
