"""Faults of COPY loads with real clients (psql \\copy reading a CSV): a
loader killed mid-file, a loader stopped (SIGSTOP) and resumed, bad input
rejected by the server. What a DBA sees for each: docs/faults.md."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from support import Lines, pgparmon_cmd, read_jsonl, resume, stop, tree
from test_copy_jobs import SLOW, Scripted, _b, _cp, _csv, _env, _kill_tree, _snap

from pgparmon.cluster import Cluster
from pgparmon.jobs.base import Job
from pgparmon.jobs.copy import TREE
from pgparmon.monitor import Monitor
from pgparmon.snapshot import ClientProc, FileSize, OpenFile, Snapshot
from pgparmon.client_tree import error_lines

integration = pytest.mark.integration

DB = "copyfaults"


@pytest.fixture(scope="module")
def faultdb(cluster: Cluster) -> str:
    cluster.psql(f"DROP DATABASE IF EXISTS {DB}")
    cluster.psql(f"CREATE DATABASE {DB}")
    cluster.psql(SLOW, dbname=DB)
    cluster.psql("CREATE TABLE t1 (id bigint, v text, w text)", dbname=DB)
    cluster.psql("CREATE TRIGGER nap BEFORE INSERT ON t1 FOR EACH ROW EXECUTE FUNCTION nap()",
                 dbname=DB)
    return DB


def _conn(cluster: Cluster) -> list[str]:
    return ["-h", str(cluster.sockdir), "-p", str(cluster.port), "-U", "postgres", "-d", DB]


def _load(cluster: Cluster, csv: Path) -> subprocess.Popen[Any]:
    """A script loading one CSV with psql \\copy (a loader's shape)."""
    script = csv.parent / "load.sh"
    script.write_text(f"#!/bin/sh\n{cluster.client('psql')} -X -q {' '.join(_conn(cluster))} "
                      f"-v ON_ERROR_STOP=1 -c \"\\copy t1 FROM '{csv}' CSV\"\n")
    return subprocess.Popen(["sh", str(script)], env=_env())


def _attach(cluster: Cluster) -> subprocess.Popen[str]:
    return subprocess.Popen(pgparmon_cmd("attach", *_conn(cluster), "--json", "--interval",
                                         "0.3", "--wait", "20"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())


def _read_position(root: int, path: Path, at_least: float, timeout: float = 30.0) -> float:
    """Wait until a process of the tree has read `path` past this share."""
    size = path.stat().st_size
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
        except psutil.Error:
            break
        for p in procs:
            try:
                for f in p.open_files():
                    if f.path == str(path) and f.position / size >= at_least:
                        return f.position / size
            except psutil.Error:
                pass
        time.sleep(0.05)
    raise AssertionError(f"{path} was not read past {at_least:.0%}")


def _samples(out: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    docs = read_jsonl(out)
    samples = [d for d in docs if d.get("schema") == "pgparmon.sample/1"]
    summary = [d for d in docs if d.get("schema") == "pgparmon.summary/1"]
    assert samples and summary, out
    return samples, summary[0]  # type: ignore[return-value]


def _loading(cluster: Cluster, csv: Path, share: float
             ) -> tuple[subprocess.Popen[Any], Lines, float]:
    """A loader reading `csv`, attach following it, once the loader read
    `share` of it and attach has seen it reading (a sample with progress)."""
    loader = _load(cluster, _csv(csv))
    attach = Lines(_attach(cluster))
    got = _read_position(loader.pid, csv, share)
    # a sample that saw it at least that far (the samples buffered before the
    # test read the position may show less)
    attach.wait_for(lambda s: got - 0.01 <= (s["job"]["progress"] or 0) < 1,
                    f"the load read to {got:.0%}")
    return loader, attach, got


@integration
def test_loader_killed_mid_file_fails_saying_where(cluster: Cluster, faultdb: str,
                                                   workdir: Path) -> None:
    csv = workdir / "part-1.csv"
    loader, attach, got = _loading(cluster, csv, 0.2)
    try:
        _kill_tree(loader)  # SIGKILL, the script and its psql
        samples, summary, err = attach.finish(timeout=60)
    finally:
        if attach.proc.poll() is None:
            attach.proc.kill()
        if loader.poll() is None:
            _kill_tree(loader)
    assert attach.proc.returncode == 1, (attach.proc.returncode, err)  # failed
    last = samples[-1]["job"]
    assert samples[0]["job"]["client_pid"] == loader.pid
    assert last["state"] == "failed"
    why = last["outcome"]
    assert f"{csv} into public.t1 read to" in why and "bytes" in why, why
    pct = int(why.split("read to ")[1].split("%")[0])
    assert got * 100 - 1 <= pct < 100, (got, why)
    assert summary["state"] == "failed" and summary["reason"] == why
    assert 0 < samples[-2]["job"]["progress"] < 1


@integration
def test_stopped_loader_reads_as_stalled_then_finishes(cluster: Cluster, faultdb: str,
                                                       workdir: Path) -> None:
    loader, attach, _ = _loading(cluster, workdir / "part-2.csv", 0.15)
    held: list[int] = []
    try:
        held = stop(tree(loader.pid))
        for _ in range(3):  # held until three samples said so
            attach.wait_for(lambda s: s["bottleneck"]["kind"] == "stalled", "a stalled sample")
        resume(held)
        samples, summary, err = attach.finish(timeout=90)
    finally:
        resume(held)
        if attach.proc.poll() is None:
            attach.proc.kill()
        loader.wait(timeout=60)
    assert loader.returncode == 0
    assert attach.proc.returncode == 0, err
    stalled = [s for s in samples if s["bottleneck"]["kind"] == "stalled"]
    assert stalled, [s["bottleneck"] for s in samples]
    assert any("stopped" in s["bottleneck"]["detail"] for s in stalled)
    assert all(s["job"]["state"] == "running" and s["job"]["eta_s"] is None for s in stalled)
    after = samples[samples.index(stalled[-1]) + 1:]
    assert any(s["bottleneck"]["kind"] != "stalled" for s in after)  # it resumed
    assert samples[-1]["job"]["state"] == "finished" and summary["state"] == "finished"


@integration
def test_bad_input_line_fails_with_the_servers_error_redacted(cluster: Cluster, faultdb: str,
                                                              workdir: Path) -> None:
    csv = workdir / "bad.csv"
    good = "%d,0123456789abcdef,fedcba\n"
    csv.write_text("".join(good % i for i in range(1, 3001)) + "x3001,oops,bad\n")
    os.chmod(csv, 0o644)
    secret = "s3cr3t-pw-77"
    conninfo = (f"host={cluster.sockdir} port={cluster.port} user=postgres dbname={DB} "
                f"password={secret}")
    res = subprocess.run(pgparmon_cmd("run", *_conn(cluster), "--json", "--interval", "0.3",
                                      "--", cluster.client("psql"), "-X", "-v",
                                      "ON_ERROR_STOP=1", "-d", conninfo, "-c",
                                      f"\\copy t1 FROM '{csv}' CSV"),
                         capture_output=True, text=True, timeout=90, env=_env())
    assert res.returncode == 1, res.stderr  # psql's own exit code
    assert secret not in res.stdout + res.stderr
    samples, summary = _samples(res.stdout)
    last = samples[-1]["job"]
    assert last["state"] == "failed" and last["exit_code"] == 1
    why = last["outcome"]
    assert "invalid input syntax for type bigint" in why, why
    assert "COPY t1, line 3001" in why, why
    assert summary["reason"] == why
    assert "********" in " ".join(last["command"])


# ---- without a server: the rules ---------------------------------------------


def _reading(t: float, pos: int, alive: bool = True) -> Snapshot:
    """The loader (pid 51, root 50) reading /data/a.csv (1 MB) for public.t."""
    files = (OpenFile("/data/a.csv", pos, "r"),)
    clients = (ClientProc(50, 1, "sh", 0.0, "sleeping", 0, 0, 0, 0, ()),
               ClientProc(51, 50, "psql", 0.0, "running", 0, 0, 0, 0, files)) if alive else ()
    backends = (_b(1, query="COPY t FROM STDIN", since=0.5),) if alive else ()
    return _snap(t, backends, (_cp(1, pos),) if alive else (), clients=clients,
                 root_alive=alive, files=(FileSize("/data/a.csv", 1_000_000),),
                 links=((1, 51),) if alive else ())


def _end_of(positions: list[int]) -> dict[str, Any]:
    job = Job(kind="copy", database="a", client_pid=50, client_pids=frozenset({50, 51}),
              grouping=TREE, pid_hint=frozenset({1}))
    snaps = [_reading(i * 0.3, p) for i, p in enumerate(positions, 1)]
    snaps.append(_reading((len(positions) + 1) * 0.3, 0, alive=False))
    mon = Monitor(Scripted(job, snaps))
    mon.discover()
    return [mon.tick().to_json() for _ in snaps][-1]["job"]  # type: ignore[no-any-return]


def test_a_loader_gone_far_from_its_files_end_failed() -> None:
    # reading 100 kB per 0.3 s, gone at 40%: it could not have read 600 kB more
    job = _end_of([100_000, 200_000, 300_000, 400_000])
    assert job["state"] == "failed"
    assert job["outcome"] == ("the loader stopped mid-file: /data/a.csv into public.t read to "
                              "40% (400000 of 1000000 bytes)")


def test_a_loader_gone_within_reach_of_its_end_finished() -> None:
    # 250 kB per 0.3 s, last seen at 90%: the rest fits in one sample's reach
    job = _end_of([650_000, 900_000])
    assert job["state"] == "finished" and job["progress"] == 1.0


def test_error_lines_keep_the_servers_text_redacted(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("starting\npsql:3: ERROR:  invalid input syntax for type bigint: \"x\"\n"
                   "CONTEXT:  COPY t1, line 3, column id: \"x\"\n"
                   "psql: error: retry of postgresql://u:hunter2@db/x failed\n")
    text = error_lines(str(log))
    assert text is not None and "hunter2" not in text and "retry of" in text
    assert text.startswith("psql:3: ERROR:  invalid input syntax") and "COPY t1, line 3" in text
    log.write_text("something went wrong\nexit\n")
    assert error_lines(str(log)) == "something went wrong | exit"
    assert error_lines(str(tmp_path / "none.log")) is None
