"""`pgparmon run -- sh -c 'pg_dump ... && pg_restore ...'`: a shell string
that runs two tools one after another is each tool's job in turn (it was
one COPY job of the shell's tree, with no plan, no items and no ETA)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from support import monitor_replay, pgparmon_cmd, table_lock_held

from pgparmon.cluster import Cluster
from pgparmon.launch import _job_target, _nth_recording
from pgparmon.steps import tool_groups, tool_steps


def test_a_shell_string_of_two_tools_is_two_jobs_in_turn() -> None:
    """Commands of one kind in a row are one job (in steps where several);
    `pg_restore -l` and other commands are none."""
    cmd = ("pg_dump -Fd -j 4 -f /d src && pg_restore -l /d > list && "
           "pg_restore --section=pre-data -d new /d && pg_restore -j 4 --section=data -d new /d"
           " && rm -r /d")
    groups = tool_groups(["sh", "-c", cmd])
    assert groups is not None
    assert [(k, [w[1] for w in ws]) for k, ws in groups] == [
        ("pg_dump", ["-Fd"]), ("pg_restore", ["--section=pre-data", "-j"])]
    assert tool_steps(["sh", "-c", cmd]) is None  # two programs: no steps of one
    assert tool_groups(["sh", "-c", "cd /x && ./load.sh"]) is None
    again = tool_groups(["sh", "-c", "pg_restore -d a /d; pg_dump -Fd -f /e a; "
                                     "pg_restore -d b /e"])
    assert again is not None and [k for k, _ in again] == ["pg_restore", "pg_dump", "pg_restore"]
    # two tools side by side (a pipe, the background) are no turns: the
    # shell's tree is one command, its COPY load; a pipe after the last
    # tool (its output to tee) runs no tool beside it
    for side in ("pg_dump -Fc src | pg_restore -d new", "pg_dump -Fd -f /d a & "
                 "pg_dump -Fd -f /e b; wait", "pg_dump -Fc a |& pg_restore -d b"):
        assert tool_groups(["sh", "-c", side]) is None, side
    piped = tool_groups(["bash", "-c", "pg_dump -Fd -f /d a && pg_restore -d b /d 2>&1 | tee l"])
    assert piped is not None and [k for k, _ in piped] == ["pg_dump", "pg_restore"]
    # where each job records: FILE, then its siblings
    assert [_nth_recording("/r/x.pgparmon.gz", n) for n in (1, 2, 3)] == [
        "/r/x.pgparmon.gz", "/r/x.pgparmon.2.gz", "/r/x.pgparmon.3.gz"]
    assert _nth_recording("/r/x.rec", 2) == "/r/x.rec.2" and _nth_recording(None, 2) is None
    # the server each job is watched on: pgparmon's -h/-p/-U (or conninfo)
    # on the job's own database; else the job's own command line's
    from pgparmon.cmdline import parse_client_cmdline
    from pgparmon.connect import ConnTarget
    from pgparmon.jobs.base import Job
    from pgparmon.jobs.pg_restore import PgRestore

    words = ["pg_restore", "-h", "/s", "-p", "5444", "-d", "dst", "/d"]
    job = Job(kind="pg_restore", database="dst", command=tuple(words),
              args=parse_client_cmdline(words, PgRestore.client_specs))
    assert _job_target(ConnTarget(dbname="src", host="/h"), job, {}) == \
        ConnTarget(dbname="dst", host="/h")
    got = _job_target(ConnTarget(dbname="host=/h port=5433 dbname=src"), job, {})
    assert got.dbname is not None and "dbname=dst" in got.dbname and "port=5433" in got.dbname
    assert _job_target(None, job, {"PGUSER": "me"}) == \
        ConnTarget(dbname="dst", host="/s", port=5444, user="me")


def _run(cluster: Cluster, script: str, rec: Path, wrapper: str = "sh"
         ) -> tuple[subprocess.CompletedProcess[str], list[dict], list[dict]]:
    env = {**cluster.env(), "PGHOST": str(cluster.sockdir)}
    argv = ["su", "postgres", "-c", script] if wrapper == "su" else ["sh", "-c", script]
    res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.3", "--record", str(rec),
                                      "--", *argv),
                         capture_output=True, text=True, env=env, timeout=300)
    docs = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    samples = [d for d in docs if d.get("schema") == "pgparmon.sample/1"]
    summaries = [d for d in docs if d.get("schema") == "pgparmon.summary/1"]
    return res, samples, summaries


@pytest.mark.integration
@pytest.mark.parametrize("wrapper", ["sh", "su"])
def test_a_dump_then_its_restore_in_steps_are_followed_in_turn(cluster: Cluster,
                                                                sample_db: str,
                                                                wrapper: str) -> None:
    """pg_dump -Fd -j 2, then the restore of its archive in three steps
    (pre-data, -j 2 data, -j 2 post-data), from one shell string (`sh -c`,
    or su's -c: the shell su runs it with): the dump's job, then the
    restore's (one job in steps), each with its plan, its items all done,
    its summary and its recording (the second FILE's `.2` sibling, private
    like the first); the exit code is the shell's."""
    if wrapper == "su" and os.geteuid() != 0:
        pytest.skip("su to the cluster's user needs root")
    work = Path(tempfile.mkdtemp(prefix="pgparmon-inturn-"))
    os.chmod(work, 0o777)
    arch = work / "a.dump"
    cluster.psql("DROP DATABASE IF EXISTS inturn")
    cluster.psql("CREATE DATABASE inturn")
    dump, restore = cluster.client("pg_dump"), cluster.client("pg_restore")
    q = shlex.quote
    script = (f"{q(dump)} -Fd -j 2 -f {q(str(arch))} {sample_db} && "
              f"{q(restore)} --section=pre-data -d inturn {q(str(arch))} && "
              f"{q(restore)} -j 2 --section=data -d inturn {q(str(arch))} && "
              f"{q(restore)} -j 2 --section=post-data -d inturn {q(str(arch))}")
    rec = work / "run.pgparmon.gz"
    res, samples, summaries = _run(cluster, script, rec, wrapper)
    assert res.returncode == 0, res.stderr
    kinds = [s["job"]["kind"] for s in samples]
    assert kinds[0] == "pg_dump" and kinds[-1] == "pg_restore"
    assert kinds == sorted(kinds, key=lambda k: k != "pg_dump")  # the dump's, then the restore's
    assert [s["kind"] for s in summaries] == ["pg_dump", "pg_restore"]
    for s in summaries:
        assert s["state"] == "finished", s
        assert s["items"] and all(i["state"] == "done" for i in s["items"]), s["items"]
    assert {"data", "index", "constraint"} <= {i["kind"] for i in summaries[1]["items"]}
    # each job's last sample: finished, its ETA 0 with no reason beside it
    # (the "measuring" of its last seconds showed as "ETA >= 0 ms")
    for kind in ("pg_dump", "pg_restore"):
        last = [s for s in samples if s["job"]["kind"] == kind][-1]["job"]
        assert (last["state"], last["eta_s"], last["eta_reason"]) == ("finished", 0.0, None)
    assert max(s["job"].get("step") or 1 for s in samples if s["job"]["kind"] == "pg_restore") \
        >= 2
    assert "1/2 pg_dump" in res.stderr and "2/2 pg_restore" in res.stderr
    second = Path(_nth_recording(str(rec), 2) or "")
    for path, kind in ((rec, "pg_dump"), (second, "pg_restore")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        replayed, summary, _ = monitor_replay(path)
        assert summary["kind"] == kind and summary["state"] == "finished"
    cluster.psql("DROP DATABASE inturn")


@pytest.mark.integration
def test_a_failed_dump_starts_no_restore(cluster: Cluster, sample_db: str) -> None:
    """The dump fails (a lock it cannot get within --lock-wait-timeout): its
    job ends failed, the shell never starts the restore, and run exits with
    the shell's status and says the second job never started."""
    work = Path(tempfile.mkdtemp(prefix="pgparmon-inturn-"))
    os.chmod(work, 0o777)
    q = shlex.quote
    script = (f"{q(cluster.client('pg_dump'))} -Fd -j 2 --lock-wait-timeout=2s "
              f"-f {q(str(work / 'd'))} {sample_db} && "
              f"{q(cluster.client('pg_restore'))} -j 2 -d postgres {q(str(work / 'd'))}")
    with table_lock_held(cluster, sample_db, "orders"):
        res, samples, summaries = _run(cluster, script, work / "r.gz")
    assert res.returncode == 1, res.stderr
    assert "the shell ended before job 2 of 2 (pg_restore) started" in res.stderr
    assert samples and all(s["job"]["kind"] == "pg_dump" for s in samples)
    assert [s["state"] for s in summaries] == ["failed"]
    assert not Path(_nth_recording(str(work / "r.gz"), 2) or "").exists()


@pytest.mark.integration
def test_the_shell_that_becomes_its_last_tool_is_that_job(cluster: Cluster,
                                                          sample_db: str) -> None:
    """`pg_dump ...; exec pg_restore ...`: the restore runs in the shell's
    own process (as a shell may run its last command); it is found there,
    followed as the second job, and its exit status is its own."""
    work = Path(tempfile.mkdtemp(prefix="pgparmon-inturn-"))
    os.chmod(work, 0o777)
    arch = work / "a.dump"
    cluster.psql("DROP DATABASE IF EXISTS inturn_exec")
    cluster.psql("CREATE DATABASE inturn_exec")
    q = shlex.quote
    script = (f"{q(cluster.client('pg_dump'))} -Fd -j 2 -f {q(str(arch))} {sample_db}; "
              f"exec {q(cluster.client('pg_restore'))} -j 2 -d inturn_exec {q(str(arch))}")
    res, samples, summaries = _run(cluster, script, work / "r.gz")
    assert res.returncode == 0, res.stderr
    assert [(s["kind"], s["state"]) for s in summaries] == [("pg_dump", "finished"),
                                                            ("pg_restore", "finished")]
    assert summaries[1]["exit_code"] == 0  # the shell's process was the restore's
    cluster.psql("DROP DATABASE inturn_exec")
