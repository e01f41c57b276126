"""attach and run against real pg_dump / pg_restore / COPY jobs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
from support import (
    attach_while_held,
    dump_held_at_start,
    end_jobs,
    in_terminal,
    pgparmon_cmd,
    read_jsonl,
    wait_for_backends,
)

from pgparmon import units as fmt
from pgparmon.analyze.timeline import build
from pgparmon.cluster import Cluster
from pgparmon.record import read_recording
from pgparmon.sample import read_samples
from pgparmon.views.summary import end_summary

pytestmark = pytest.mark.integration


def _attach_argv(cluster: Cluster, *extra: str, tcp: bool = False,
                 db: str = "sample") -> list[str]:
    host = "127.0.0.1" if tcp else str(cluster.sockdir)
    return pgparmon_cmd("attach", "-h", host, "-p", str(cluster.port), "-U", "postgres", "-d",
                        db, "--json", "--interval", "0.3", *extra)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def _attach(cluster: Cluster, *extra: str, tcp: bool = False, timeout: float = 120,
            db: str = "sample") -> subprocess.CompletedProcess[str]:
    return subprocess.run(_attach_argv(cluster, *extra, tcp=tcp, db=db), capture_output=True,
                          text=True, timeout=timeout, env=_env())


def _attach_to(cluster: Cluster, job: subprocess.Popen[Any], *extra: str, tcp: bool = False,
               db: str = "sample") -> tuple[int, list[dict[str, Any]], dict[str, Any], str]:
    """attach (no --pid) to a job that runs, followed to its end: started
    while the job is held, so that it is found mid-run however long attach
    takes to start. Its exit code, samples, summary and stderr."""
    att = attach_while_held(job.pid, _attach_argv(cluster, *extra, tcp=tcp, db=db), _env())
    samples, summary, err = att.finish(timeout=120)
    return att.proc.returncode, samples, summary, err


def _samples(out: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    docs = read_jsonl(out)
    samples = [d for d in docs if d.get("schema") == "pgparmon.sample/1"]
    summary = [d for d in docs if d.get("schema") == "pgparmon.summary/1"]
    assert samples, out
    assert len(summary) == 1
    return samples, summary[0]  # type: ignore[return-value]


def _check_progress(samples: list[dict[str, Any]]) -> None:
    prog = [s["job"]["progress"] for s in samples if s["job"]["progress"] is not None]
    assert prog, "no progress reported"
    assert all(b >= a for a, b in zip(prog, prog[1:])), f"progress went backwards: {prog}"
    assert prog[-1] == 1.0
    assert 0 <= prog[0] < 1.0


@pytest.mark.parametrize("tcp", [True, False], ids=["tcp", "unix"])
def test_attach_follows_parallel_dump(cluster: Cluster, sample_db: str, workdir: Path,
                                      tcp: bool) -> None:
    env = cluster.env(tcp=tcp)
    dump = subprocess.Popen([cluster.client("pg_dump"), "-Fd", "-j", "2", "-f",
                             str(workdir / "d"), sample_db], env=env)
    wait_for_backends(cluster, sample_db, "pg_dump", proc=dump)
    code, samples, summary, err = _attach_to(cluster, dump, tcp=tcp)
    assert dump.wait() == 0
    assert code == 0, err
    first = samples[0]
    assert first["job"]["kind"] == "pg_dump"
    assert first["job"]["client_pid"] == dump.pid
    assert first["job"]["jobs"] == 2
    assert first["job"]["database"] == sample_db
    assert first["job"]["target"] == str(workdir / "d")
    assert samples[-1]["job"]["state"] == "finished"
    _check_progress(samples)
    workers = {w["pid"] for s in samples for w in s["workers"]}
    assert 1 <= len(workers) <= 2, workers
    tables = {w["relation"] for s in samples for w in s["workers"] if w["phase"] == "copy"}
    assert "public.orders" in tables
    # per-worker client pid found (TCP port, socket peer or the open data file)
    linked = {w["client_pid"] for s in samples for w in s["workers"] if w["phase"] == "copy"}
    kids = {c for c in linked if c and c != dump.pid}
    assert kids, "no worker was linked to its pg_dump process"
    assert any(s["job"]["bytes_per_s"] > 0 for s in samples)
    assert summary["state"] == "finished"
    done = {i["name"] for i in summary["items"] if i["state"] == "done"}
    assert "public.orders" in done and "public.lookup_01" in done
    assert all(i["state"] == "done" for i in summary["items"])
    assert any(s["job"]["eta_s"] is not None for s in samples)


def test_attach_late_counts_from_the_jobs_start(cluster: Cluster, sample_db: str,
                                              workdir: Path) -> None:
    """A dump that began before the monitor attached: its elapsed time, the
    summary's wall time, the item start times, the timeline and the report
    count from the dump's own start (its process), not from the monitor's
    first sample."""
    rec = workdir / "late.pgparmon.gz"
    with dump_held_at_start(cluster, sample_db, workdir / "d") as dump:
        time.sleep(2)  # the dump has been running a while when we attach
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        att = subprocess.Popen(pgparmon_cmd("attach", "-h", str(cluster.sockdir), "-p",
                                            str(cluster.port), "-U", "postgres", "-d", sample_db,
                                            "--json", "--interval", "0.3", "--record", str(rec)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert att.stdout is not None
        first_line = att.stdout.readline()  # the first sample: now let the dump run
        dump.release()
        rest, err = att.communicate(timeout=120)
        assert dump.proc.wait() == 0
    assert att.returncode == 0, err
    samples, summary = _samples(first_line + rest)
    first = samples[0]
    job_start = datetime.fromisoformat(first["job"]["started"]).timestamp()
    assert first["job"]["started_from"] == "client process"
    # the dump's process began between these two readings of the clock (the
    # kernel's start time has clock-tick granularity: 10 ms)
    assert dump.before - 0.02 <= job_start <= dump.after + 0.02
    seen = datetime.fromisoformat(first["ts"]).timestamp()
    assert seen - dump.after >= 2.0  # attached that much later ...
    assert first["elapsed_s"] >= seen - dump.after - 0.02  # ... and its elapsed says so
    assert summary["started"] == first["job"]["started"]
    assert summary["first_sample"] == first["ts"]
    last = datetime.fromisoformat(samples[-1]["ts"]).timestamp()
    assert summary["wall_s"] == pytest.approx(last - job_start, abs=0.002)
    assert samples[-1]["elapsed_s"] == pytest.approx(summary["wall_s"], abs=0.002)
    # no item ran longer than the job
    assert max(i["duration_s"] or 0 for i in summary["items"]) <= summary["wall_s"]

    # the views: the end summary, the timeline and the report of the recording
    r = read_recording(str(rec))
    es = end_summary(r.summary, read_samples(r.samples))
    assert es.facts.started == first["job"]["started"]
    assert es.facts.wall_s == summary["wall_s"]
    assert all(row.start_s is not None and row.start_s >= first["elapsed_s"] - 0.35
               for row in es.items)
    tl = build(read_samples(r.samples))
    assert tl.t_first == first["elapsed_s"] and tl.t_end == summary["wall_s"]
    rep = subprocess.run(pgparmon_cmd("report", str(rec)), capture_output=True, text=True,
                         timeout=60, env={**os.environ, "COLUMNS": "120"})
    assert rep.returncode == 0, rep.stderr
    head = rep.stdout.splitlines()[0]
    assert "finished" in head and f" in {fmt.duration(summary['wall_s'])};" in head, head


def test_attach_follows_parallel_restore(cluster: Cluster, dump_archive: Path) -> None:
    cluster.psql("DROP DATABASE IF EXISTS restored_a")
    cluster.psql("CREATE DATABASE restored_a")
    rest = subprocess.Popen([cluster.client("pg_restore"), "-j", "2", "-d", "restored_a",
                             str(dump_archive)], env=cluster.env())
    wait_for_backends(cluster, "restored_a", "pg_restore", proc=rest)
    code, samples, summary, err = _attach_to(cluster, rest, db="restored_a")
    assert rest.wait() == 0
    assert code == 0, err
    assert samples[0]["job"]["kind"] == "pg_restore"
    assert samples[0]["job"]["jobs"] == 2
    assert samples[-1]["job"]["state"] == "finished"
    _check_progress(samples)
    phases = {w["phase"] for s in samples for w in s["workers"]}
    assert "copy" in phases
    kinds = {i["kind"] for i in summary["items"]}
    assert {"data", "index", "constraint"} <= kinds
    # the restore holds AccessExclusiveLock on tables it loads: we still saw them
    assert any(w["relation"] == "public.orders" for s in samples for w in s["workers"])
    lat = [s["server"]["latency_ms"] for s in samples if s["server"]["latency_ms"]]
    assert max(lat) < 2000


def test_run_passes_exit_code_and_tags_connections(cluster: Cluster, sample_db: str,
                                                   workdir: Path) -> None:
    env = {**cluster.env(), "PGPASSWORD": "hunter2-secret"}
    res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.3", "--",
                                      cluster.client("pg_dump"), "-Fd", "-j", "2", "-f",
                                      str(workdir / "r"),
                                      f"dbname={sample_db} password=s3cr3t-pass"),
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "s3cr3t-pass" not in res.stdout + res.stderr
    assert "hunter2-secret" not in res.stdout + res.stderr
    samples, summary = _samples(res.stdout)
    assert summary["state"] == "finished" and summary["exit_code"] == 0
    assert samples[-1]["job"]["progress"] == 1.0
    assert any("********" in a for a in samples[0]["job"]["command"])
    bad = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.3", "--",
                                      cluster.client("pg_dump"), "-Fd", "-j", "2", "-f",
                                      str(workdir / "r2"), "no_such_db"),
                         capture_output=True, text=True, env=cluster.env(), timeout=60)
    assert bad.returncode != 0
    assert "Traceback" not in bad.stderr


def test_a_worker_that_exits_first_at_a_restores_end_is_not_a_death(
        cluster: Cluster, dump_archive: Path, workdir: Path) -> None:
    """At a restore's end its workers do not all exit in the same sample, and
    items that ran between samples look unstarted: a worker seen gone while
    another works is only a suspicion, settled at the end. A real `attach
    --record` of a pg_restore -j 2, replayed with one worker missing from a
    sample while items still waited (early in the run, where they surely
    do): the death is suspected, the catalog at the end shows every item
    done, the job finished."""
    import copy

    from pgparmon.playback import ReplayFeed
    from pgparmon.record import Recording, read_recording

    cluster.psql("DROP DATABASE IF EXISTS restored_d")
    cluster.psql("CREATE DATABASE restored_d")
    rest = subprocess.Popen([cluster.client("pg_restore"), "-j", "2", "-d", "restored_d",
                             str(dump_archive)], env=cluster.env())
    wait_for_backends(cluster, "restored_d", "pg_restore", proc=rest)
    os.chmod(workdir, 0o777)
    rec = workdir / "attach-restore.gz"
    code, _, _, err = _attach_to(cluster, rest, "--record", str(rec), db="restored_d")
    assert rest.wait() == 0 and code == 0, err
    r = read_recording(str(rec))
    root = r.header["job"]["client_pid"]
    events = copy.deepcopy([(k, v) for k, v in r.events if k != "summary"])
    snaps = [v for k, v in events if k == "snapshot"]
    def workers(snap: dict[str, Any]) -> list[int]:
        return sorted(c["pid"] for c in snap["clients"] if c["pid"] != root)

    # the first sample with two workers that were both seen in the one before
    at = next(i for i in range(1, len(snaps)) if snaps[i]["root_alive"]
              and len(workers(snaps[i])) >= 2
              and set(workers(snaps[i])) <= set(workers(snaps[i - 1])))
    gone = workers(snaps[at])[0]
    snaps[at]["clients"] = [c for c in snaps[at]["clients"] if c["pid"] != gone]
    feed = ReplayFeed(Recording(r.path, r.header, events), speed=1e6)
    while not feed.ended and feed.outcome is None:
        feed.tick()
    summary = feed.summary()
    assert f"worker process {gone} died" in summary["notes"]  # suspected
    assert feed.outcome is not None and feed.outcome.state == "finished", summary["notes"]
    assert any("had exited before the others" in n for n in summary["notes"])


def test_killed_worker_fails_the_job(cluster: Cluster, sample_db: str, workdir: Path) -> None:
    dump = subprocess.Popen([cluster.client("pg_dump"), "-Fd", "-j", "2", "-Z", "9", "-f",
                             str(workdir / "k"), sample_db], env=cluster.env(),
                            stderr=subprocess.DEVNULL)
    wait_for_backends(cluster, sample_db, "pg_dump", proc=dump)
    attach = subprocess.Popen(pgparmon_cmd("attach", "-h", str(cluster.sockdir), "-p",
                                           str(cluster.port), "-d", sample_db, "-U", "postgres",
                                           "--json", "--interval", "0.3"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert attach.stdout is not None
    first = attach.stdout.readline()  # attached and sampling
    assert first.startswith("{"), attach.stderr.read() if attach.stderr else ""
    kids = psutil.Process(dump.pid).children()
    assert kids
    os.kill(kids[0].pid, signal.SIGKILL)
    out, err = attach.communicate(timeout=60)
    out = first + out
    dump.wait()
    assert attach.returncode == 1, err
    samples, summary = _samples(out)
    assert summary["state"] == "failed"
    assert samples[-1]["job"]["state"] == "failed"


LOADER = """
import sys, time, psycopg
conninfo, seconds = sys.argv[1], float(sys.argv[2])
row = b"%d,0123456789abcdef0123456789abcdef,fedcba9876543210fedcba9876543210\\n"
with psycopg.connect(conninfo, application_name="loader") as conn:
    with conn.cursor().copy("COPY facts FROM STDIN (FORMAT csv)") as cp:
        end, n = time.monotonic() + seconds, 0
        while time.monotonic() < end:  # a paced feed: a loader that reads slowly
            cp.write(b"".join(row % (n + i) for i in range(2000)))
            n += 2000
            time.sleep(0.01)
"""


def test_copy_pool_is_found_and_grouped(cluster: Cluster, workdir: Path) -> None:
    cluster.psql("DROP DATABASE IF EXISTS loads")
    cluster.psql("CREATE DATABASE loads")
    cluster.psql("CREATE TABLE facts (id bigint, v text, w text)", dbname="loads")
    conninfo = cluster.conninfo("loads", tcp=True)
    script = workdir / "loader.py"
    script.write_text(LOADER)
    # one script starting three loaders: one job, its process tree (TCP links)
    pool = subprocess.Popen(["sh", "-c", 'for i in 1 2 3; do "$0" "$@" & done; wait',
                             sys.executable, str(script), conninfo, "6"])
    wait_for_backends(cluster, "loads", "loader", n=3)
    res = _attach(cluster, db="loads", tcp=True)
    assert pool.wait() == 0
    assert res.returncode == 0, res.stderr
    samples, summary = _samples(res.stdout)
    job = samples[0]["job"]
    assert job["kind"] == "copy"
    assert job["client_pid"] == pool.pid and job["grouping"] == "process tree"
    assert job["jobs"] == 3
    # a loader's session is idle (no table) between connecting and its COPY, and after it
    rels = {w["relation"] for s in samples for w in s["workers"] if w["phase"] == "copy"}
    assert rels == {"public.facts"}
    assert {w["phase"] for s in samples for w in s["workers"]
            if w["relation"] is None} <= {"idle", "other"}
    assert summary["state"] == "finished"
    assert any(s["job"]["bytes_per_s"] > 0 for s in samples)
    assert all(s["job"]["progress"] is None for s in samples[:-1])  # STDIN: no total known


def test_errors_are_one_line(cluster: Cluster) -> None:
    env = _env()
    res = subprocess.run(pgparmon_cmd("attach", "-h", "127.0.0.1", "-p", "1", "-d", "x"),
                         capture_output=True, text=True, env=env, timeout=30)
    assert res.returncode == 3
    assert res.stderr.strip().count("\n") == 0 and "cannot connect" in res.stderr
    res = subprocess.run(pgparmon_cmd("attach", "-h", str(cluster.sockdir), "-p",
                                      str(cluster.port), "-U", "postgres", "-d", "postgres"),
                         capture_output=True, text=True, env=env, timeout=30)
    assert res.returncode == 4, res.stderr
    assert "no running" in res.stderr and "Traceback" not in res.stderr
    res = subprocess.run(pgparmon_cmd("attach", "-h", str(cluster.sockdir), "-p",
                                      str(cluster.port), "-U", "postgres", "-d",
                                      "postgresql://postgres:topsecretpw@/nodb?host="
                                      + str(cluster.sockdir)),
                         capture_output=True, text=True, env=env, timeout=30)
    assert res.returncode == 3
    assert "topsecretpw" not in res.stderr
    # a --source that cannot be reached: said at start, one line, redacted,
    # before any job is looked for or started
    for cmd in ("attach", "run"):
        extra = ["--", "true"] if cmd == "run" else []
        res = subprocess.run(pgparmon_cmd(cmd, "-h", str(cluster.sockdir), "-p",
                                          str(cluster.port), "-U", "postgres", "-d", "postgres",
                                          "--source", "postgresql://u:topsecretpw@127.0.0.1:1/x",
                                          *extra),
                             capture_output=True, text=True, env=env, timeout=30)
        assert res.returncode == 3, (cmd, res.stderr)
        assert res.stderr.startswith("pgparmon: --source: "), res.stderr
        assert res.stderr.strip().count("\n") == 0 and "topsecretpw" not in res.stderr


def test_several_jobs_need_a_pid(cluster: Cluster, sample_db: str, workdir: Path) -> None:
    env = cluster.env()
    dumps = [subprocess.Popen([cluster.client("pg_dump"), "-Fd", "-j", "2", "-Z", "9", "-f",
                               str(workdir / f"s{i}"), sample_db], env=env) for i in range(2)]
    try:
        wait_for_backends(cluster, sample_db, "pg_dump", n=2)
        res = _attach(cluster, "--duration", "1")
        assert res.returncode == 5, res.stderr
        assert "--pid" in res.stderr and str(dumps[0].pid) in res.stderr
        res = _attach(cluster, "--duration", "1", "--pid", str(dumps[1].pid))
        assert res.returncode == 0, res.stderr
        samples = [d for d in read_jsonl(res.stdout) if d.get("schema") == "pgparmon.sample/1"]
        assert samples[0]["job"]["client_pid"] == dumps[1].pid
    finally:
        end_jobs(cluster, sample_db, [d.pid for d in dumps])
        for d in dumps:
            d.wait()


@contextlib.contextmanager
def _two_held_dumps(cluster: Cluster, sample_db: str, workdir: Path) -> Iterator[list[int]]:
    """Two pg_dump -j 2 of the sample database, held where they are once
    their workers copy (SIGSTOP): two running jobs for as long as a test
    looks. Yields their pids; resumes and ends them after."""
    dumps = [subprocess.Popen([cluster.client("pg_dump"), "-Fd", "-j", "2", "-Z", "9", "-f",
                               str(workdir / f"p{i}"), sample_db], env=cluster.env())
             for i in range(2)]
    try:
        deadline = time.monotonic() + 30
        while any(len(psutil.Process(d.pid).children()) < 2 for d in dumps):
            assert time.monotonic() < deadline, "the dumps did not start their workers"
            time.sleep(0.05)
        wait_for_backends(cluster, sample_db, "pg_dump", n=2)
        for d in dumps:
            for p in (psutil.Process(d.pid), *psutil.Process(d.pid).children()):
                p.suspend()
        yield [d.pid for d in dumps]
    finally:
        end_jobs(cluster, sample_db, [d.pid for d in dumps])
        for d in dumps:
            d.wait()


def test_several_jobs_listed_as_json_and_in_the_picker(cluster: Cluster, sample_db: str,
                                                       workdir: Path) -> None:
    """Two dumps at once: `attach --json` exits 5 and prints both as one
    pgparmon.jobs/1 object; --plain exits 5 with both in the error line; the
    picker, over the real discovery, lists both and returns the chosen pid."""
    from textual.widgets import DataTable

    from pgparmon.connect import ConnTarget
    from pgparmon.pick import list_jobs
    from pgparmon.tui.picker import PickerApp

    with _two_held_dumps(cluster, sample_db, workdir) as pids:
        res = _attach(cluster)
        assert res.returncode == 5, res.stderr
        assert res.stderr.count("\n") == 1 and "several jobs found" in res.stderr
        doc = json.loads(res.stdout)  # one object, nothing else
        assert doc["schema"] == "pgparmon.jobs/1"
        by_pid = {j["client_pid"]: j for j in doc["jobs"]}
        assert set(by_pid) == set(pids), doc
        for i, pid in enumerate(pids):
            j = by_pid[pid]
            assert (j["kind"], j["database"], j["databases"], j["jobs"], j["pid"]) == \
                ("pg_dump", sample_db, [sample_db], 2, pid)
            assert j["sessions"] == 3  # the leader and two workers
            assert j["grouping"] == "process tree"
            assert j["target"] == str(workdir / f"p{i}") and "-j" in j["command"]
            assert j["started"] and 0 <= j["running_s"] < 120
        env = _env()
        plain = subprocess.run(pgparmon_cmd("attach", "-h", str(cluster.sockdir), "-p",
                                            str(cluster.port), "-U", "postgres", "-d",
                                            sample_db, "--plain"),
                               capture_output=True, text=True, timeout=60, env=env)
        assert plain.returncode == 5 and plain.stdout == ""
        assert all(str(pid) in plain.stderr for pid in pids), plain.stderr

        target = ConnTarget(dbname=sample_db, host=str(cluster.sockdir),
                            port=str(cluster.port), user="postgres")
        app = PickerApp(lambda: list_jobs(target))
        listed: list[str] = []

        async def choose_second() -> None:
            async with app.run_test(size=(120, 30)) as pilot:
                deadline = time.monotonic() + 30
                while app.refreshes < 1:
                    assert time.monotonic() < deadline, "the picker found nothing"
                    await pilot.pause(0.05)
                table = app.query_one("#picker-jobs", DataTable)
                listed.extend(str(table.get_row_at(i)[3]) for i in range(table.row_count))
                await pilot.press("down", "enter")

        asyncio.run(choose_second())
        assert app.error is None
        assert sorted(listed) == sorted(str(pid) for pid in pids)
        assert app.return_value == int(listed[1])


def test_picker_in_a_terminal_follows_the_chosen_job(cluster: Cluster, sample_db: str,
                                                     workdir: Path) -> None:
    """`attach` in a real pseudo-terminal with two jobs: the picker shows
    both, enter opens the live screen on the highlighted one, q exits 0."""
    with _two_held_dumps(cluster, sample_db, workdir) as pids:
        argv = pgparmon_cmd("attach", "-h", str(cluster.sockdir), "-p", str(cluster.port),
                            "-U", "postgres", "-d", sample_db, "--interval", "0.3")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("PG")},
               "TERM": "xterm-256color"}
        steps: list[int] = []  # where the output was when each key was typed

        def choose_then_quit(out: bytes, pid: int) -> bytes | None:
            if not steps and b"2 jobs found" in out:
                steps.append(len(out))
                return b"\r"  # follow the first row
            if len(steps) == 1 and b"workers (" in out[steps[0]:]:
                steps.append(len(out))
                return b"q"
            return None

        out, code = in_terminal(argv, env, choose_then_quit, size=(30, 120), timeout=90)
        text, live = out.decode("utf-8", "replace"), out[steps[0]:].decode("utf-8", "replace")
        assert len(steps) == 2, text[-3000:]
        assert all(str(p) in text for p in pids)  # both listed
        assert code == 0  # quit while it runs
        # the first row (discovery lists process trees by pid) is the one followed
        first = workdir / f"p{pids.index(min(pids))}"
        other = workdir / f"p{pids.index(max(pids))}"
        assert str(first) in live and str(other) not in live, live[-3000:]
