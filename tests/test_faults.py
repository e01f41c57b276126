"""The monitor under faults, weak privileges and other users' processes:
each case a real server and a real job."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support import Lines, end_jobs, pgparmon_cmd, read_jsonl, resume, stop, tree, wait_for_backends

from pgparmon.cluster import Cluster
from pgparmon.connect import ConnTarget
from pgparmon.readers.db import DbSampler
from pgparmon.record import read_recording

pytestmark = pytest.mark.integration


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def _attach_proc(cluster: Cluster, db: str, *extra: str, user: str = "postgres",
                 preexec: Any = None, python: str | None = None,
                 env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    cmd = pgparmon_cmd("attach", "-h", str(cluster.sockdir), "-p", str(cluster.port), "-U",
                       user, "-d", db, "--json", "--interval", "0.3", *extra)
    if python:
        cmd[0] = python
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**_clean_env(), **(env or {})}, preexec_fn=preexec)


def _first_sample(p: subprocess.Popen[str]) -> str:
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.startswith("{"), p.stderr.read() if p.stderr else ""
    return line


def _finish(p: subprocess.Popen[str], first: str, timeout: float = 90
            ) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    out, err = p.communicate(timeout=timeout)
    docs = read_jsonl(first + out)
    samples = [d for d in docs if d.get("schema") == "pgparmon.sample/1"]
    summary = [d for d in docs if d.get("schema") == "pgparmon.summary/1"]
    assert samples and summary, err
    return samples, summary[-1], err  # type: ignore[return-value]


@pytest.fixture()
def slow_dump(cluster: Cluster, sample_db: str, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A dump slowed by gzip -9 so that faults can be injected mid-run."""
    p = subprocess.Popen([cluster.client("pg_dump"), "-Fd", "-j", "2", "-Z", "9", "-f",
                          str(workdir / "d"), sample_db], env=cluster.env(),
                         stderr=subprocess.DEVNULL)
    wait_for_backends(cluster, sample_db, "pg_dump", proc=p)
    try:
        yield p
    finally:
        end_jobs(cluster, sample_db, [p.pid])
        p.wait()


def test_stopped_client_reads_as_stalled(cluster: Cluster, sample_db: str,
                                         slow_dump: subprocess.Popen[bytes]) -> None:
    att = Lines(_attach_proc(cluster, sample_db))
    att.wait_for(lambda s: True, "a first sample")
    held = stop(tree(slow_dump.pid))
    try:  # held until three samples said so
        for _ in range(3):
            att.wait_for(lambda s: s["bottleneck"]["kind"] == "stalled", "a stalled sample")
    finally:
        resume(held)
    samples, summary, err = att.finish()
    stalled = [s for s in samples if s["bottleneck"]["kind"] == "stalled"]
    assert len(stalled) >= 3
    assert stalled, [s["bottleneck"] for s in samples]
    assert all(s["job"]["eta_s"] is None for s in stalled)  # no ETA rather than a lie
    assert all(s["job"]["bytes_per_s"] == 0 for s in stalled[2:])
    assert summary["state"] == "finished"
    after = samples[samples.index(stalled[-1]) + 1:]
    assert any(s["job"]["bytes_per_s"] > 0 for s in after) or len(after) <= 2  # resumed


def test_exclusive_lock_waiter_behind_a_dump_is_warned(cluster: Cluster, sample_db: str,
                                                       slow_dump: subprocess.Popen[bytes]
                                                       ) -> None:
    att = _attach_proc(cluster, sample_db)
    first = _first_sample(att)
    # the smallest table is dumped last: a session queues for it behind the dump
    waiter = psycopg.connect(cluster.conninfo(sample_db), autocommit=True)

    def lock() -> None:
        try:
            waiter.execute("BEGIN")
            waiter.execute("LOCK TABLE public.lookup_01 IN ACCESS EXCLUSIVE MODE")
        except psycopg.Error:
            pass

    t = threading.Thread(target=lock, daemon=True)
    t.start()
    try:
        samples, summary, _ = _finish(att, first)
    finally:
        waiter.cancel()
        t.join(10)
        waiter.close()
    warned = [w for s in samples for w in s.get("warnings", [])
              if w["code"] == "exclusive-lock-waiter"]
    assert warned, "no warning about the AccessExclusiveLock waiter"
    assert "public.lookup_01" in warned[0]["message"]
    assert any("public.lookup_01" in n for n in summary["notes"])


def test_lock_timeout_skips_a_sample_instead_of_blocking(cluster: Cluster) -> None:
    sampler = DbSampler(ConnTarget(host=str(cluster.sockdir), port=cluster.port,
                                   user="postgres", dbname="postgres"))
    sampler.open()
    holder = psycopg.connect(cluster.conninfo())
    try:
        assert sampler.sample().error is None
        holder.execute("LOCK TABLE pg_catalog.pg_namespace IN ACCESS EXCLUSIVE MODE")
        # it returns while the lock is still held: the session's lock_timeout
        # ended the wait (no timing asserted: a busy machine is slow anyway)
        s = sampler.sample()
        assert s.error and "lock_timeout" in s.error, s.error
        holder.rollback()
        assert sampler.sample().error is None  # and the next sample works
    finally:
        holder.close()
        sampler.close()


def test_statement_timeout_skips_a_sample(cluster: Cluster) -> None:
    sampler = DbSampler(ConnTarget(host=str(cluster.sockdir), port=cluster.port,
                                   user="postgres", dbname="postgres"))
    sampler.open()
    assert sampler.conn is not None
    sampler.conn.execute("SET statement_timeout = 1")  # a server too slow for our budget
    try:
        holder = psycopg.connect(cluster.conninfo(), autocommit=True)
        # many backends make the sample query slower than 1 ms
        others = [psycopg.connect(cluster.conninfo(), autocommit=True) for _ in range(8)]
        for o in others:
            o.execute("SELECT 1")
        errors = [sampler.sample().error for _ in range(5)]
        assert any(e and "statement_timeout" in e for e in errors), errors
        for o in [holder, *others]:
            o.close()
    finally:
        sampler.close()


def test_server_restart_mid_run(cluster: Cluster, sample_db: str,
                                slow_dump: subprocess.Popen[bytes], tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o777)
    rec = tmp_path / "restart.gz"
    att = _attach_proc(cluster, sample_db, "--record", str(rec))
    first = _first_sample(att)
    cluster.restart("fast")
    samples, summary, err = _finish(att, first)
    assert slow_dump.wait() != 0  # its connections died
    assert summary["state"] == "failed"
    lost = [s for s in samples if s["server"]["error"]]
    assert lost or any("connection" in n for n in summary["notes"]), samples[-1]
    r = read_recording(str(rec))
    assert r.summary is not None and r.summary["state"] == "failed"
    assert len(r.samples) == len(samples)


def test_sampler_reconnects_after_restart(cluster: Cluster) -> None:
    sampler = DbSampler(ConnTarget(host=str(cluster.sockdir), port=cluster.port,
                                   user="postgres", dbname="postgres"))
    sampler.open()
    try:
        assert sampler.sample().error is None
        cluster.restart("fast")
        first = sampler.sample()
        assert first.error and "connection" in first.error
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            s = sampler.sample()
            if s.error is None:
                break
            time.sleep(0.2)
        assert s.error is None and sampler.reconnects >= 1
    finally:
        sampler.close()


def test_sighup_keeps_the_recording(cluster: Cluster, sample_db: str,
                                    slow_dump: subprocess.Popen[bytes], tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o777)
    rec = tmp_path / "hup.gz"
    att = _attach_proc(cluster, sample_db, "--record", str(rec))
    first = _first_sample(att)
    assert att.stdout is not None
    att.stdout.readline()
    att.send_signal(signal.SIGHUP)
    att.communicate(timeout=30)
    assert att.returncode == 128 + signal.SIGHUP
    r = read_recording(str(rec))
    assert not r.truncated
    assert len(r.samples) >= 2
    assert r.summary is not None and r.summary["state"] == "running"
    del first


def _tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs",
                           str(path)], capture_output=True).returncode == 0


def test_target_filesystem_fills_up(cluster: Cluster, sample_db: str, tmp_path: Path) -> None:
    mnt = tmp_path / "small"
    if not _tmpfs(mnt, "40m"):
        pytest.skip("cannot mount a tmpfs here (needs root): no small filesystem to fill")
    try:
        res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.2", "--",
                                          cluster.client("pg_dump"), "-Fd", "-j", "2", "-Z", "0",
                                          "-f", str(mnt / "d"), sample_db),
                             capture_output=True, text=True, env=cluster.env(), timeout=120)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
    assert res.returncode != 0
    docs = read_jsonl(res.stdout)
    samples = [d for d in docs if d.get("schema") == "pgparmon.sample/1"]
    warned = [w for s in samples for w in s.get("warnings", [])
              if w["code"] in ("disk-full-soon", "disk-full")]
    assert warned, [s.get("free_bytes") for s in samples]
    assert samples[-1]["job"]["state"] == "failed"
    assert "filesystem is full" in samples[-1]["job"]["outcome"]
    assert "No space left" in res.stderr  # the job's own words, passed on


def test_pg_monitor_role_sees_everything(cluster: Cluster, sample_db: str,
                                         slow_dump: subprocess.Popen[bytes]) -> None:
    cluster.psql("DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='watcher') "
                 "THEN CREATE ROLE watcher LOGIN IN ROLE pg_monitor; END IF; END$$")
    att = _attach_proc(cluster, sample_db, "--duration", "2", user="watcher")
    first = _first_sample(att)
    samples, summary, err = _finish(att, first)
    assert att.returncode == 0, err
    assert samples[0]["job"]["kind"] == "pg_dump"
    assert any(w["relation"] for s in samples for w in s["workers"])
    assert not any("pg_read_all_stats" in n for n in samples[-1]["notes"])


def test_role_without_pg_monitor_degrades_and_says_so(cluster: Cluster, sample_db: str,
                                                      slow_dump: subprocess.Popen[bytes]) -> None:
    cluster.psql("DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='nobody_much') "
                 "THEN CREATE ROLE nobody_much LOGIN; END IF; END$$")
    att = _attach_proc(cluster, sample_db, "--duration", "2", user="nobody_much")
    first = _first_sample(att)
    samples, summary, err = _finish(att, first)
    assert att.returncode == 0, err
    assert "Traceback" not in err
    assert samples[0]["job"]["kind"] == "pg_dump"
    notes = samples[-1]["notes"]
    assert sum("pg_read_all_stats" in n for n in notes) == 1  # said once, not every tick
    assert any("pg_monitor" in n for n in notes)
    assert len(samples) >= 4  # kept sampling


def _as_postgres() -> Any:
    pw = pwd.getpwnam("postgres")

    def demote() -> None:
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)

    return demote


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the monitor as another user")
def test_another_users_processes(cluster: Cluster, sample_db: str,
                                 slow_dump: subprocess.Popen[bytes]) -> None:
    """The dump runs as root; the monitor as the postgres OS user cannot read
    its open files, environment or sockets: it falls back and says so once."""
    # the venv's interpreter lives under /root, out of the postgres user's
    # reach: run the same code with the system's Python of the same version
    system = Path("/usr/bin/python3.%d" % sys.version_info.minor)
    if not system.exists():
        pytest.skip(f"no {system} to run the monitor as another user")
    site = next(Path(sys.prefix).glob("lib/python3.*/site-packages"))
    repo = Path(__file__).resolve().parent.parent
    att = _attach_proc(cluster, sample_db, "--duration", "1.5", preexec=_as_postgres(),
                       python=str(system), env={"PYTHONPATH": f"{site}:{repo}"})
    first = _first_sample(att)
    samples, summary, err = _finish(att, first)
    assert att.returncode == 0, (err, samples[-1]["job"], summary, slow_dump.poll())
    assert samples[0]["job"]["client_pid"] == slow_dump.pid
    notes = samples[-1]["notes"]
    assert sum("another user's process" in n for n in notes) == 1
    assert any(w["phase"] == "copy" for s in samples for w in s["workers"])
    assert json.dumps(samples)  # well-formed


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the monitor as another user")
def test_another_users_dump_ends_with_an_outcome_it_cannot_see(
        cluster: Cluster, sample_db: str, slow_dump: subprocess.Popen[bytes]) -> None:
    """Followed to its end, another user's dump (exit status not ours, -Fd
    directory mode 0700) is "ended", exit 6: never called failed (nor
    finished) on evidence the monitor does not have."""
    system = Path("/usr/bin/python3.%d" % sys.version_info.minor)
    if not system.exists():
        pytest.skip(f"no {system} to run the monitor as another user")
    site = next(Path(sys.prefix).glob("lib/python3.*/site-packages"))
    repo = Path(__file__).resolve().parent.parent
    att = _attach_proc(cluster, sample_db, preexec=_as_postgres(), python=str(system),
                       env={"PYTHONPATH": f"{site}:{repo}"})
    first = _first_sample(att)
    samples, summary, err = _finish(att, first)
    assert slow_dump.wait(timeout=60) == 0  # the dump itself succeeded
    assert att.returncode == 6, (err, samples[-1]["job"].get("outcome"), samples[-1]["notes"])
    assert samples[-1]["job"]["state"] == "ended" and summary["state"] == "ended"
    assert "cannot be seen" in summary["reason"]
