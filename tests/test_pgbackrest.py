"""pgBackRest backups followed for real: a throwaway cluster archiving
through `pgbackrest archive-push` into a local posix repository, full
backups with process-max 2 (gz compression keeps the copy a few seconds
long on two cores), followed by `attach` and by `run`; a local process killed
mid-copy fails the backup. Command lines without a server."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from support import pgparmon_cmd, read_jsonl

from pgparmon.cluster import Cluster, start_cluster
from pgparmon.connect import ConnTarget
from pgparmon.jobs.base import TREE
from pgparmon.jobs.pgbackrest import command_of, option
from pgparmon.monitor import Monitor, wait_for_job

STANZA = "demo"


class Repo:
    def __init__(self, cluster: Cluster, base: Path, binary: str) -> None:
        self.cluster, self.base, self.binary = cluster, base, binary
        self.conf = base / "pgbackrest.conf"

    def argv(self, *args: str) -> list[str]:
        return [self.binary, f"--config={self.conf}", f"--stanza={STANZA}", *args]

    def as_server_user(self, argv: list[str]) -> list[str]:
        """The cluster runs as `postgres` when the tests run as root: so do
        the repository's files."""
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@pytest.fixture(scope="module")
def repo(pgbackrest: str) -> Iterator[Repo]:
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="pgparmon-pbr-"))
    os.chmod(base, 0o777)
    conf = base / "pgbackrest.conf"
    cl = start_cluster(prefix="pgparmon-pbr-", settings={
        "archive_mode": "on",
        "archive_command": f"'{pgbackrest} --config={conf} --stanza={STANZA} archive-push %p'"})
    try:
        for d in ("repo", "log", "lock"):
            (base / d).mkdir()
            os.chmod(base / d, 0o777)
        conf.write_text(
            "[global]\n"
            f"repo1-path={base}/repo\nlog-path={base}/log\nlock-path={base}/lock\n"
            "log-level-console=info\nlog-level-file=off\nstart-fast=y\n"
            "compress-type=gz\ncompress-level=6\nrepo1-retention-full=9\n\n"
            f"[{STANZA}]\npg1-path={cl.datadir}\npg1-port={cl.port}\n"
            f"pg1-socket-path={cl.sockdir}\npg1-user=postgres\n")
        os.chmod(conf, 0o644)
        # one table of ~130 MB: its file takes the copy a few seconds
        cl.psql("CREATE TABLE big AS SELECT g, md5(g::text) || repeat('x', 100) AS pad "
                "FROM generate_series(1, 800000) g")
        r = Repo(cl, base, pgbackrest)
        res = subprocess.run(r.as_server_user(r.argv("stanza-create")), capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        _archive_caught_up(cl)
        yield r
    finally:
        cl.stop()
        subprocess.run(["rm", "-rf", str(base)], check=False)


def _archive_caught_up(cl: Cluster) -> None:
    """The WAL written so far archived (no segment left `.ready`): a
    backup's start then waits for no backlog of archive-push."""
    cl.psql("SELECT pg_switch_wal()")
    ready = ("SELECT count(*) FROM pg_ls_dir('pg_wal/archive_status') f "
             "WHERE f LIKE '%.ready'")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if cl.psql(ready).strip() == "0":
            return
        time.sleep(0.3)
    raise AssertionError("archive_command did not catch up: " + cl.psql(
        "SELECT archived_count, last_archived_wal, failed_count, last_failed_wal "
        "FROM pg_stat_archiver"))


def _target(cl: Cluster) -> ConnTarget:
    return ConnTarget(host=str(cl.sockdir), port=str(cl.port), user="postgres",
                      dbname="postgres")


def _start(repo: Repo) -> subprocess.Popen[bytes]:
    _archive_caught_up(repo.cluster)
    return subprocess.Popen(repo.as_server_user(repo.argv("--process-max=2", "--type=full",
                                                          "backup")),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _follow(mon: Monitor, until: Any, ticks: int = 400) -> list[dict[str, Any]]:
    docs = []
    for _ in range(ticks):
        docs.append(mon.tick())
        if until(docs[-1]):
            return docs
        time.sleep(0.25)
    raise AssertionError(f"gave up after {ticks} samples: {docs[-1]['job']}")


def _local_pids(root: int) -> list[int]:
    """pgBackRest's local processes (children of the main one)."""
    main = [p for p in psutil.Process(root).children(recursive=True)
            if p.name() == "pgbackrest" and "backup:local" not in " ".join(p.cmdline())]
    if not main:
        return []
    return [p.pid for p in main[0].children() if "backup:local" in " ".join(p.cmdline())]


def _stop(proc: subprocess.Popen[bytes], mon: Monitor | None) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if mon is not None:
        mon.close()


@pytest.mark.integration
def test_attach_follows_a_backup_and_its_local_processes(repo: Repo) -> None:
    proc = _start(repo)
    mon = None
    try:
        mon = wait_for_job(_target(repo.cluster), pid=None, wait_s=20, interval=0.2)
        assert mon.job is not None and mon.job.kind == "pgbackrest"
        assert mon.job.jobs == 2 and mon.job.grouping == TREE
        docs = _follow(mon, lambda d: d["job"]["state"] != "running")
    finally:
        _stop(proc, mon)
    assert proc.returncode == 0
    end = docs[-1]["job"]
    assert end["state"] == "finished", end
    copying = [d for d in docs if d["job"]["phase"] == "copying files"]
    assert copying, [d["job"]["phase"] for d in docs]
    rows = [w for d in copying for w in d["workers"] if w["phase"] == "backup"]
    # process-max 2: up to two readers (the one with the small files may finish
    # them between two samples while the other reads the big table)
    assert 1 <= len({w["pid"] for w in rows}) <= 2, rows
    assert mon.job is not None and mon.job.client_pid not in {w["pid"] for w in rows}
    assert all(w["relation"] and "/" in w["relation"] for w in rows)
    assert any((w["bytes_per_s"] or 0) > 0 for w in rows)
    prog = [d["job"]["progress"] for d in docs if d["job"]["progress"] is not None]
    assert prog and all(b >= a for a, b in zip(prog, prog[1:])) and prog[-1] == 1.0, prog
    assert any(d["job"]["eta_s"] is not None and 0.2 <= (d["job"]["progress"] or 0) <= 0.9
               for d in copying), [(d["job"]["progress"], d["job"]["eta_s"]) for d in copying]
    b = copying[-1]["job"]["backup"]
    assert b["type"] == "full" and b["stanza"] == STANZA and b["process_max"] == 2
    assert b["lock_file"].endswith(f"{STANZA}-backup.lock")
    assert b["total_bytes"] and b["total_bytes"] > 100e6
    # never "stalled" while it waits for its start (checkpoint, archive check)
    assert all(d["bottleneck"]["kind"] != "stalled" for d in docs), \
        [(d["job"]["phase"], d["bottleneck"]) for d in docs if d["bottleneck"]["kind"] == "stalled"]


@pytest.mark.integration
def test_a_killed_local_process_fails_the_backup(repo: Repo) -> None:
    proc = _start(repo)
    mon = None
    try:
        mon = wait_for_job(_target(repo.cluster), pid=None, wait_s=20, interval=0.2)
        _follow(mon, lambda d: d["job"]["phase"] == "copying files")
        locals_ = _local_pids(proc.pid)
        assert locals_, "no local process to kill"
        os.kill(locals_[0], signal.SIGKILL)
        docs = _follow(mon, lambda d: d["job"]["state"] != "running", ticks=200)
    finally:
        _stop(proc, mon)
    assert proc.returncode != 0
    end = docs[-1]["job"]
    assert end["state"] == "failed", end
    assert "stopped at" in end["outcome"], end["outcome"]


@pytest.mark.integration
def test_run_follows_pgbackrest_to_its_exit_code(repo: Repo, tmp_path: Path) -> None:
    # last in this module: as root this backup writes the repository as root
    _archive_caught_up(repo.cluster)
    res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.3", "--",
                                      *repo.argv("--process-max=2", "--type=full", "backup")),
                         capture_output=True, text=True, timeout=300,
                         env=repo.cluster.env())
    assert res.returncode == 0, res.stderr
    samples = [d for d in read_jsonl(res.stdout) if d.get("schema") == "pgparmon.sample/1"]
    assert {s["job"]["kind"] for s in samples} == {"pgbackrest"}
    end = samples[-1]["job"]
    assert end["state"] == "finished" and end["exit_code"] == 0 and end["progress"] == 1.0
    assert end["scope"] == "cluster" and end["jobs"] == 2


def test_pgbackrest_command_lines() -> None:
    argv = ["pgbackrest", "--config=/etc/pb.conf", "--stanza", "main", "--process-max=4",
            "--type=diff", "--no-online", "backup"]
    assert command_of(argv) == "backup"
    assert option(argv, "stanza") == "main" and option(argv, "type") == "diff"
    assert option(argv, "process-max") == "4" and option(argv, "repo1-path") is None
    local = ["pgbackrest", "--exec-id=1-a", "--process=1", "--remote-type=pg", "backup:local"]
    assert command_of(local) == "backup:local"
    assert command_of(["pgbackrest", "--stanza=x", "archive-push", "pg_wal/0001"]) == \
        "archive-push"
