"""pgBackRest backups followed for real: a throwaway cluster archiving
through `pgbackrest archive-push` into a local posix repository, full
backups with process-max 2 (gz compression keeps the copy a few seconds
long on two cores), followed by `attach` and by `run`; a local process killed
mid-copy fails the backup. Restores of a bzip2 backup (its decompression keeps
them a few seconds long) into new data directories, with no server: followed
from the host alone. Command lines without a server."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from support import pgparmon_cmd, read_jsonl, tick_until

from pgparmon.analyze.items import Item
from pgparmon.cluster import Cluster, start_cluster
from pgparmon.connect import ConnTarget
from pgparmon.jobs.base import TREE
from pgparmon.jobs.pgbackrest import _data_path, _how_far, command_of, option
from pgparmon.monitor import Monitor
from pgparmon.open_job import wait_for_job

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
        docs = tick_until(mon, lambda d: d["job"]["state"] != "running")
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
    # each file by its path in the data directory (base/16384/16397, or a
    # file at its top such as PG_VERSION)
    datadir = Path(repo.cluster.datadir)
    assert all(w["relation"] and not w["relation"].startswith("/") for w in rows), rows
    assert all((datadir / w["relation"]).exists() for w in rows
               if not w["relation"].startswith("pg_stat/")), rows
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
        # killed mid-copy: once the copy has moved (CI once killed it at the
        # first copying sample, before any byte was counted)
        tick_until(mon, lambda d: d["job"]["phase"] == "copying files"
                and (d["job"]["progress"] or 0) > 0)
        locals_ = _local_pids(proc.pid)
        assert locals_, "no local process to kill"
        os.kill(locals_[0], signal.SIGKILL)
        docs = tick_until(mon, lambda d: d["job"]["state"] != "running", ticks=200)
    finally:
        _stop(proc, mon)
    assert proc.returncode != 0
    end = docs[-1]["job"]
    assert end["state"] == "failed", end
    assert "stopped at" in end["outcome"], end["outcome"]
    assert "finishing" not in end["outcome"], end["outcome"]


def test_how_far_a_cut_short_backup_got() -> None:
    """The bytes its local processes were seen to read count ahead of
    pgBackRest's own percentage (which moves only when a file is done); a
    copy whose local processes ended early is not "finishing"."""
    it = Item(key="backup", kind="backup", relation=None, name="full backup", size=1e9,
              work=1e9, state="running", started=0.0)
    it.done = 2.5e8
    st = {"unit": "bytes", "phase": "finishing"}
    got = _how_far(st, it)
    assert got.startswith("at 25.0% by the bytes read") and "none yet" in got, got
    assert "phase: copy (its local processes ended" in got
    st["pct"] = 1000.0  # 10.00%
    assert "pgBackRest's own count: 10.0%" in _how_far(st, it)
    st.update(pct=9995.0, phase="finishing")
    it.done = 9.99e8
    assert _how_far(st, it).endswith("phase: finishing")
    assert _how_far({"phase": "starting"}, None) == "before any progress, phase: starting"


@pytest.fixture(scope="module")
def restorable(repo: Repo) -> str:
    """A full backup to restore: bzip2 (its decompression is slow enough for
    a restore of ~160 MB to last a few seconds on two cores)."""
    _archive_caught_up(repo.cluster)
    res = subprocess.run(repo.as_server_user(repo.argv(
        "--type=full", "--compress-type=bz2", "--compress-level=1", "backup")),
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    latest = repo.base / "repo" / "backup" / STANZA / "latest"
    return os.path.basename(os.path.realpath(latest))


def _restore(repo: Repo, label: str, name: str) -> tuple[subprocess.Popen[bytes], Path, int]:
    """A restore into a new data directory (no server runs on it), once its
    pgbackrest process runs (runuser forks it after Popen returns): the
    Popen, the target and that process's pid, which the tests follow by
    --pid (another suite on this host may be restoring too, and attach
    then rightly finds several jobs)."""
    target = repo.base / name
    argv = repo.argv(f"--pg1-path={target}", "--process-max=2", f"--set={label}", "restore")
    proc = subprocess.Popen(repo.as_server_user(argv), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)

    def main_pid() -> int | None:
        with contextlib.suppress(psutil.Error):
            top = psutil.Process(proc.pid)
            for p in (top, *top.children(recursive=True)):
                with contextlib.suppress(psutil.Error):
                    if p.name() == "pgbackrest" and "restore" in p.cmdline():
                        return p.pid
        return None

    deadline = time.monotonic() + 60
    while (pid := main_pid()) is None:
        assert proc.poll() is None, f"the restore exited with {proc.returncode}"
        assert time.monotonic() < deadline, "the restore's pgbackrest never started"
        time.sleep(0.05)
    return proc, target, pid


def _restore_locals(root: int) -> list[int]:
    return [p.pid for p in psutil.Process(root).children(recursive=True)
            if "restore:local" in " ".join(p.cmdline())]


@pytest.mark.integration
def test_attach_host_only_follows_a_restore(repo: Repo, restorable: str) -> None:
    proc, target, pid = _restore(repo, restorable, "r1")
    mon = None
    try:
        mon = wait_for_job(None, pid=pid, wait_s=20, interval=0.1, host_only=True)
        assert mon.job is not None and mon.job.kind == "pgbackrest-restore"
        assert mon.job.jobs == 2 and mon.job.target == str(target)
        docs = tick_until(mon, lambda d: d["job"]["state"] != "running", ticks=600, pause=0.1)
    finally:
        _stop(proc, mon)
    assert proc.returncode == 0
    end = docs[-1]["job"]
    assert end["state"] == "finished" and end["progress"] == 1.0, end
    assert end["host_only"] and docs[-1]["server"]["version"] == "none (host only)"
    assert any("host only" in n for n in docs[-1]["notes"])
    b = end["backup"]
    assert b["command"] == "restore" and b["set"] == restorable and b["process_max"] == 2
    assert b["total_bytes"] > 100e6 and b["files_total"] > 100 and b["pg_control_written"]
    # the manifest's total is what the data directory holds at the end
    assert abs(b["written_bytes"] - b["total_bytes"]) < 0.01 * b["total_bytes"], b
    copying = [d for d in docs if d["job"]["phase"] == "restoring files"]
    assert copying, [d["job"]["phase"] for d in docs]
    rows = [w for d in copying for w in d["workers"]]
    assert rows and all(w["phase"] == "restore" and w["relation"] for w in rows)
    assert mon.job.client_pid not in {w["pid"] for w in rows}
    assert any(w["relation"].startswith("base/") and 0 < (w["progress"] or 0) < 1
               for w in rows)
    assert any((w["bytes_per_s"] or 0) > 0 for w in rows)
    prog = [d["job"]["progress"] for d in docs if d["job"]["progress"] is not None]
    assert all(b >= a for a, b in zip(prog, prog[1:])), prog
    assert any(d["job"]["eta_s"] is not None and 0.2 <= (d["job"]["progress"] or 0) <= 0.9
               for d in copying), [(d["job"]["progress"], d["job"]["eta_s"]) for d in copying]


@pytest.mark.integration
def test_a_stopped_then_killed_restore(repo: Repo, restorable: str) -> None:
    proc, target, pid = _restore(repo, restorable, "r2")
    mon = None
    try:
        mon = wait_for_job(None, pid=pid, wait_s=20, interval=0.1, host_only=True)
        tick_until(mon, lambda d: d["job"]["phase"] == "restoring files", pause=0.05)
        locals_ = _restore_locals(proc.pid)
        assert locals_, "no local process"
        for lp in locals_:
            os.kill(lp, signal.SIGSTOP)
        stalled = tick_until(mon, lambda d: d["bottleneck"]["kind"] == "stalled", ticks=50)
        assert stalled[-1]["job"]["state"] == "running"
        os.kill(locals_[0], signal.SIGKILL)
        for lp in locals_[1:]:
            os.kill(lp, signal.SIGCONT)
        docs = tick_until(mon, lambda d: d["job"]["state"] != "running", ticks=300)
    finally:
        _stop(proc, mon)
    assert proc.returncode != 0
    end = docs[-1]["job"]
    assert end["state"] == "failed", end
    assert "pg_control was not written" in end["outcome"], end["outcome"]
    assert not (target / "global" / "pg_control").exists()


@pytest.mark.integration
def test_attach_with_no_server_follows_the_restore(repo: Repo, restorable: str,
                                                   tmp_path: Path) -> None:
    nothing = tmp_path / "no-server"  # a socket directory where no server listens
    nothing.mkdir()
    proc, _, pid = _restore(repo, restorable, "r3")
    try:
        res = subprocess.run(pgparmon_cmd("attach", "-h", str(nothing), "-p", "5999",
                                          "-d", "postgres", "--json", "--interval", "0.1",
                                          "--pid", str(pid)),
                             capture_output=True, text=True, timeout=120)
    finally:
        _stop(proc, None)
    assert res.returncode == 0, res.stderr
    samples = [d for d in read_jsonl(res.stdout) if d.get("schema") == "pgparmon.sample/1"]
    assert {s["job"]["kind"] for s in samples} == {"pgbackrest-restore"}
    assert samples[-1]["job"]["state"] == "finished"
    assert any("no server answers" in n for n in samples[-1]["notes"]), samples[-1]["notes"]


@pytest.mark.integration
def test_run_follows_a_restore_with_the_server_down(repo: Repo, restorable: str,
                                                    tmp_path: Path) -> None:
    target = tmp_path / "pgdata"
    target.mkdir(mode=0o700)  # as root, pgBackRest restores into an existing directory
    env = {**repo.cluster.env(), "PGHOST": str(tmp_path), "PGPORT": "5999"}  # no server
    res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.2", "--",
                                      *repo.argv(f"--pg1-path={target}", "--process-max=2",
                                                 f"--set={restorable}", "restore")),
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    samples = [d for d in read_jsonl(res.stdout) if d.get("schema") == "pgparmon.sample/1"]
    end = samples[-1]["job"]
    assert end["kind"] == "pgbackrest-restore" and end["state"] == "finished"
    assert end["exit_code"] == 0 and end["progress"] == 1.0
    assert (target / "global" / "pg_control").exists()


@pytest.mark.integration
def test_the_exporter_follows_a_restore_of_its_stopped_server(repo: Repo, restorable: str,
                                                              tmp_path: Path) -> None:
    """A fleet's night: the exporter watches a server; the server is
    stopped and its data directory restored from the backup. The exporter
    follows the restore from the host alone and its series say so."""
    import test_exporter as tex

    cl = start_cluster(prefix="pgparmon-pbr-x-")
    try:
        with tex.exporter(cl, "--record-dir", str(tmp_path)) as exp:
            exp.wait_for("pgparmon_server_up", server=exp.server)
            cl.stop(cleanup=False)
            exp.wait_for("pgparmon_server_up", want=0.0, server=exp.server)
            subprocess.run(["rm", "-rf", str(cl.datadir)], check=True)
            cl.datadir.mkdir(mode=0o700)
            if os.geteuid() == 0:
                os.chown(cl.datadir, *cl._owner)
            proc = subprocess.Popen(repo.as_server_user(repo.argv(
                f"--pg1-path={cl.datadir}", "--process-max=2", f"--set={restorable}",
                "restore")), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            labels = {"server": exp.server, "kind": "pgbackrest-restore",
                      "tool": "pgbackrest"}
            exp.wait_for("pgparmon_job_state", state="running", timeout=20, **labels)
            assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
            exp.wait_for("pgparmon_job_state", state="finished", timeout=30, **labels)
            assert exp.value("pgparmon_job_progress_ratio", **labels) == 1.0
            assert exp.value("pgparmon_last_success_time_seconds", server=exp.server,
                             kind="pgbackrest-restore")
            code, err = exp.stop()
        assert code == 0, err
        (rec,) = [p for p in tmp_path.iterdir() if "pgbackrest-restore" in p.name]
        from pgparmon.record import read_recording

        r = read_recording(str(rec))
        assert r.summary is not None and r.summary["state"] == "finished"
        assert any("host only" in n for n in r.samples[-1]["notes"])
    finally:
        cl.stop()


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="su / runuser to the cluster's user need root")
def test_run_through_su_or_runuser_is_the_backup_not_a_copy(repo: Repo) -> None:
    """`pgparmon run -- su postgres -c 'pgbackrest ... backup'` once showed a
    COPY job ("client input files" 84%: the data files pgBackRest read),
    then "finished" with no items: the kind comes from the tool inside."""
    import shlex

    inner = repo.argv("--process-max=2", "--type=full", "backup")
    for how, wrapped in (("su", ["su", "postgres", "-c", shlex.join(inner)]),
                         ("runuser", ["runuser", "-u", "postgres", "--", *inner])):
        _archive_caught_up(repo.cluster)
        res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.3", "--",
                                          *wrapped),
                             capture_output=True, text=True, timeout=300,
                             env=repo.cluster.env())
        assert res.returncode == 0, (how, res.stderr)
        samples = [d for d in read_jsonl(res.stdout) if d.get("schema") == "pgparmon.sample/1"]
        assert {s["job"]["kind"] for s in samples} == {"pgbackrest"}, how
        assert not any(s["job"].get("progress_basis") == "client input files"
                       for s in samples), how
        prog = [s["job"]["progress"] for s in samples if s["job"]["progress"] is not None]
        assert all(b >= a for a, b in zip(prog, prog[1:], strict=False)), (how, prog)
        end = samples[-1]["job"]
        assert end["state"] == "finished" and end["exit_code"] == 0, how
        assert end["progress"] == 1.0 and end["jobs"] == 2, how
        assert samples[0]["job"]["command"][0] == how


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


def test_a_read_file_is_named_by_its_path_in_the_data_directory() -> None:
    tr: Any = None  # the path alone decides
    assert _data_path("/var/lib/postgresql/15/main/base/16384/16397", tr) == "base/16384/16397"
    assert _data_path("/srv/pg/main/pg_xact/0000", tr) == "pg_xact/0000"
    assert _data_path("/srv/pg/main/pg_multixact/members/0000", tr) == \
        "pg_multixact/members/0000"
    assert _data_path("/srv/pg/main/global/pg_control", tr) == "global/pg_control"
    assert _data_path("/srv/pg/main/PG_VERSION", tr) == "PG_VERSION"
    # a data directory whose own path holds such a name
    assert _data_path("/mnt/base/data/base/1/1259", tr) == "base/1/1259"
    assert _data_path("/mnt/global/data/pg_xact/0000", tr) == "pg_xact/0000"


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


def test_restore_options_manifest_and_queue(tmp_path: Path) -> None:
    from pgparmon.jobs.pgbackrest_restore import _queue_done, read_manifest, setting
    from pgparmon.jobs.registry import driver_for_argv

    conf = tmp_path / "pb.conf"
    conf.write_text("[global]\nrepo1-path=/var/lib/pgbackrest\nprocess-max=2\n"
                    "[global:restore]\nprocess-max=6\n"
                    "[main]\npg1-path=/srv/pg/main\n[main:restore]\ndelta=y\n")
    argv = ["pgbackrest", f"--config={conf}", "--stanza=main", "restore"]
    assert setting(argv, "pg1-path", None, environ={}) == "/srv/pg/main"
    assert setting(argv, "process-max", None, environ={}) == "6"  # global:restore
    assert setting(argv, "delta", "n", environ={}) == "y"
    assert setting(argv, "repo1-path", None, environ={}) == "/var/lib/pgbackrest"
    assert setting([*argv[:-1], "--process-max=3", "restore"], "process-max", None,
                   environ={}) == "3"  # the command line first
    assert setting(argv, "process-max", None,
                   environ={"PGBACKREST_PROCESS_MAX": "4"}) == "4"  # then the environment
    assert driver_for_argv(argv).kind == "pgbackrest-restore"  # type: ignore[union-attr]
    assert driver_for_argv(["pgbackrest", "--stanza=main", "backup"]).kind == "pgbackrest"  # type: ignore[union-attr]
    manifest = tmp_path / "backup.manifest"
    manifest.write_text(
        "[backup]\nbackup-label=\"20261126-003526F\"\n\n[target:file]\n"
        'pg_data/PG_VERSION={"checksum":"a","size":3,"timestamp":1}\n'
        'pg_data/base/5/16384={"checksum":"b","reference":"x","size":1073741824}\n'
        'pg_data/base/5/16384.1={"checksum":"c","size":1073741824}\n'
        'pg_data/base/5/1259={"size":8192}\n\n[target:path]\npg_data={}\n')
    files = read_manifest(str(manifest))
    assert files == {"pg_data/PG_VERSION": 3, "pg_data/base/5/16384": 1073741824,
                     "pg_data/base/5/16384.1": 1073741824, "pg_data/base/5/1259": 8192}
    assert read_manifest(str(tmp_path / "none")) is None
    # largest first, then by name, last first: with 16384.1 in flight, 16384 is
    # still ahead of it in the queue; with 1259 in flight, both segments are done
    assert _queue_done(files, [(1073741824, "pg_data/base/5/16384.1")]) == 0
    assert _queue_done(files, [(8192, "pg_data/base/5/1259")]) == 2 * 1073741824


def test_host_only_with_nothing_to_follow_is_one_line() -> None:
    # --pid 1: another suite on this host may be restoring right now
    res = subprocess.run(pgparmon_cmd("attach", "--host-only", "--json", "--pid", "1"),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 4, res.stderr  # no job (docs/exit-codes.md)
    line = res.stderr.strip()
    assert "\n" not in line and "no pgBackRest restore running on this host" in line, line
    assert "Traceback" not in res.stderr
