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
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
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
)

from pgparmon import units as fmt
from pgparmon.analyze.items import Item
from pgparmon.cluster import Cluster, start_cluster
from pgparmon.connect import ConnTarget
from pgparmon.jobs import walwait
from pgparmon.jobs.base import TREE
from pgparmon.jobs.pgbackrest import _how_far
from pgparmon.jobs.pgbackrest_repo import archive_stop, command_of, data_path, option
from pgparmon.jobs.pgbackrest_state import BackrestState
from pgparmon.jobs import pgbackrest_waits
from pgparmon.jobs.pgbackrest_waits import wait_verdict
from pgparmon.jobs.walwait import WAIT_ONLY
from pgparmon.monitor import Monitor
from pgparmon.open_job import wait_for_job
from pgparmon.snapshot import Backend, DbSample, Snapshot

STANZA = "demo"
SEG = 16 << 20


class Repo:
    def __init__(self, cluster: Cluster, base: Path, binary: str) -> None:
        self.cluster, self.base, self.binary = cluster, base, binary
        self.conf = base / "pgbackrest.conf"
        self.gate: ArchiveGate | None = None  # its archive_command, held by the test

    def argv(self, *args: str) -> list[str]:
        return [self.binary, f"--config={self.conf}", f"--stanza={STANZA}", *args]

    def as_server_user(self, argv: list[str]) -> list[str]:
        """The cluster runs as `postgres` when the tests run as root: so do
        the repository's files."""
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextlib.contextmanager
def _repository(pgbackrest: str, prefix: str, rows: int, gated: bool = False,
                initdb_args: tuple[str, ...] = (), conf: str = "") -> Iterator[Repo]:
    """A throwaway cluster archiving through `pgbackrest archive-push` into
    a local posix repository (`gated`: behind an ArchiveGate, `repo.gate`),
    with one table of `rows` rows, its stanza created."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(base, 0o777)
    conf_file = base / "pgbackrest.conf"
    push = f"{pgbackrest} --config={conf_file} --stanza={STANZA} archive-push"
    gate = ArchiveGate(base) if gated else None
    cl = start_cluster(prefix=prefix, initdb_args=initdb_args, settings={
        "archive_mode": "on",
        "archive_command": gate.command(f"{push} %p") if gate else f"'{push} %p'"})
    try:
        for d in ("repo", "log", "lock"):
            (base / d).mkdir()
            os.chmod(base / d, 0o777)
        conf_file.write_text(
            "[global]\n"
            f"repo1-path={base}/repo\nlog-path={base}/log\nlock-path={base}/lock\n"
            "log-level-console=info\nlog-level-file=off\nstart-fast=y\n"
            f"compress-type=gz\ncompress-level=6\nrepo1-retention-full=9\n{conf}\n"
            f"[{STANZA}]\npg1-path={cl.datadir}\npg1-port={cl.port}\n"
            f"pg1-socket-path={cl.sockdir}\npg1-user=postgres\n")
        os.chmod(conf_file, 0o644)
        cl.psql("CREATE TABLE big AS SELECT g, md5(g::text) || repeat('x', 100) AS pad "
                f"FROM generate_series(1, {rows}) g")
        r = Repo(cl, base, pgbackrest)
        r.gate = gate
        res = subprocess.run(r.as_server_user(r.argv("stanza-create")), capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        archive_caught_up(cl)
        yield r
    finally:
        if gate is not None:
            gate.release()
        cl.stop()
        subprocess.run(["rm", "-rf", str(base)], check=False)


@pytest.fixture(scope="module")
def repo(pgbackrest: str) -> Iterator[Repo]:
    # one table of ~130 MB: its file takes the copy a few seconds
    with _repository(pgbackrest, "pgparmon-pbr-", 800000) as r:
        yield r


def _target(cl: Cluster) -> ConnTarget:
    return ConnTarget(host=str(cl.sockdir), port=str(cl.port), user="postgres",
                      dbname="postgres")


def _start(repo: Repo, *extra: str, caught_up: bool = True) -> subprocess.Popen[bytes]:
    if caught_up:
        archive_caught_up(repo.cluster)
    return subprocess.Popen(repo.as_server_user(repo.argv("--process-max=2", "--type=full",
                                                          *extra, "backup")),
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
    """Ends a test's backup. Once the monitor saw it end, its launcher
    (`runuser` above pgBackRest, as root) is given time to exit on its own:
    on a busy machine it reaps its child and exits a while after pgBackRest
    did, and a kill then would read as the backup's failure."""
    if mon is not None and mon.outcome is not None:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
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


@pytest.fixture(scope="module")
def gated(pgbackrest: str) -> Iterator[tuple[Repo, ArchiveGate]]:
    """A cluster of 1 MB WAL segments (a bulk load of a few tens of MB makes
    a backlog of tens of segments) whose archive_command the test holds and
    lets go, archive-push behind a pause; archive-timeout raised so that
    pgBackRest waits out the backlog."""
    with _repository(pgbackrest, "pgparmon-pbr-gate-", 100000, gated=True,
                     initdb_args=("--wal-segsize=1",), conf="archive-timeout=600") as r:
        assert r.gate is not None
        yield r, r.gate


def _no_generic_start(docs: list[dict[str, Any]]) -> None:
    """Its start always says what it waits on, never the generic words."""
    generic = [(d["job"]["phase"], d["workers"]) for d in docs if d["job"]["state"] == "running"
               and d["bottleneck"]["detail"] == "waiting for workers to start"]
    assert not generic, generic


@pytest.mark.integration
def test_a_backup_behind_the_archivers_backlog_says_how_long(
        gated: tuple[Repo, ArchiveGate]) -> None:
    """A full backup (--start-fast) right after a bulk load, archive_command
    behind: pgBackRest waits at its start for the segment before its own to
    reach the repository. pgparmon says how many segments (and bytes) stand
    before it, measures archive_command's pace once it moves, and counts the
    time left in the ETA, then follows the copy to its end."""
    repo, gate = gated
    cl = repo.cluster
    archive_caught_up(cl)
    gate.hold()
    proc = None
    mon = None
    try:
        cl.psql("DROP TABLE IF EXISTS bulk; CREATE TABLE bulk AS SELECT g, repeat('b', 200) AS "
                "pad FROM generate_series(1, 120000) g")
        queued = queued_segments(cl)
        assert queued >= 25, queued  # ~30 MB of WAL in 1 MB segments, held
        proc = _start(repo, caught_up=False)
        mon = wait_for_job(_target(cl), pid=None, wait_s=20, interval=0.2)
        # held until pgparmon shows the backlog before the backup's segment,
        # its fast checkpoint over (a loaded machine takes a while to write
        # out the load's buffers: the limit is the checkpoint until then)
        held = tick_until(mon, lambda d: (archive_wait(d).get("segments") or 0) >= 20
                          and archive_wait(d).get("wal") is not None
                          and d["job"]["backup"]["wait"]["on"] == "archiving")
        gate.release()
        docs = held + tick_until(mon, lambda d: d["job"]["state"] != "running")
    finally:
        gate.release()
        if proc is not None:
            _stop(proc, mon)
    end = docs[-1]["job"]
    assert proc.returncode == 0 and end["state"] == "finished", \
        (proc.returncode, end["state"], end.get("outcome"), end["phase"], end["client_pids"])
    h = held[-1]
    arch = h["job"]["backup"]["wait"]["archiving"]
    # held: the backlog, in segments and bytes, and no pace yet
    assert h["job"]["phase"] == "starting (checkpoint, archive check)"
    assert arch["bytes"] == arch["segments"] << 20 and arch["pace"] in ("measuring", "stuck")
    assert arch["wal"] and arch["last_archived_wal"] < arch["wal"], arch
    assert h["bottleneck"]["kind"] == "archiving", h["bottleneck"]
    assert f"archiving: {arch['segments']} segment(s) ({fmt.size(arch['bytes'])}) queued up " \
        f"to the segment before the backup's start ({arch['wal']})" in h["bottleneck"]["detail"]
    assert h["job"]["eta_s"] is None and "archiv" in h["job"]["eta_reason"], h["job"]
    # let go: its pace, the time left, and an ETA that counts it
    waiting = [d for d in docs[len(held):] if d["job"]["state"] == "running"
               and (d["job"]["backup"].get("wait") or {}).get("step") == "start"
               and archive_wait(d)]
    timed = [d for d in waiting if d["job"]["backup"]["wait"]["archiving"]["pace"] == "measured"
             and d["job"]["backup"]["wait"]["archiving"]["segments"]]
    assert timed, [(d["job"]["backup"]["wait"]["archiving"]) for d in waiting]
    for d in timed:
        a, job = d["job"]["backup"]["wait"]["archiving"], d["job"]
        assert a["segments_per_s"] > 0 and a["bytes_per_s"] == pytest.approx(
            a["segments_per_s"] * (1 << 20), rel=1e-3)
        assert a["left_s"] == pytest.approx(a["segments"] / a["segments_per_s"], rel=0.01,
                                            abs=0.2)
        # the ETA covers the wait (the copy to come is not measured yet: said)
        assert job["eta_s"] is not None and job["eta_s"] >= a["left_s"], job
        assert job["eta_reason"] == WAIT_ONLY and "copy not counted" in \
            job["backup"]["eta_basis"]
        assert d["bottleneck"]["kind"] == "archiving"
        assert "segments/s" in d["bottleneck"]["detail"] and "about" in \
            d["bottleneck"]["detail"], d["bottleneck"]
    # it looks for the segment from its session's last statement, after ever
    # longer sleeps: when it sees it is counted (in the ETA too), never sooner
    # than the archiver's time left
    for d in timed:
        a, w = d["job"]["backup"]["wait"]["archiving"], d["job"]["backup"]["wait"]
        assert a["seen_in_s"] is not None and not a["gives_up"], a
        assert a["seen_in_s"] >= a["left_s"] - 0.05 and w["left_s"] == a["seen_in_s"], w
        assert d["job"]["eta_s"] >= a["seen_in_s"], d["job"]
        if a["seen_in_s"] > 0:
            assert f"it sees it in about {fmt.about(a['seen_in_s'])}" in \
                d["bottleneck"]["detail"], d["bottleneck"]
    left = [d["job"]["backup"]["wait"]["archiving"]["segments"] for d in waiting]
    assert left == sorted(left, reverse=True), left  # the backlog only shrinks
    assert any(d["job"]["phase"] == "copying files" for d in docs)
    _no_generic_start(docs)
    assert all(d["bottleneck"]["kind"] != "stalled" for d in docs)


@pytest.mark.integration
def test_a_spread_checkpoint_at_the_start_says_its_bound(gated: tuple[Repo, ArchiveGate]) -> None:
    """--no-start-fast with dirty buffers: pg_backup_start waits for a
    spread checkpoint. pgparmon gives its bound (0.9 x 5 min), the time left
    (in the ETA) and the ways out; a CHECKPOINT ends it and the backup goes
    on."""
    repo, _ = gated
    cl = repo.cluster
    cl.psql("DROP TABLE IF EXISTS dirty; CREATE TABLE dirty AS SELECT g, repeat('d', 200) AS pad "
            "FROM generate_series(1, 20000) g")
    proc = _start(repo, "--no-start-fast")
    mon = None
    try:
        mon = wait_for_job(_target(cl), pid=None, wait_s=20, interval=0.2)
        waiting = tick_until(mon, lambda d: (d["job"]["backup"].get("wait") or {}).get(
            "checkpoint") is not None, ticks=200)
        for _ in range(4):  # a few more samples of the wait
            time.sleep(0.25)
            waiting.append(mon.tick().to_json())
        cl.psql("CHECKPOINT")
        docs = waiting + tick_until(mon, lambda d: d["job"]["state"] != "running")
    finally:
        _stop(proc, mon)
    assert proc.returncode == 0 and docs[-1]["job"]["state"] == "finished", docs[-1]["job"]
    in_ck = [d for d in waiting if (d["job"]["backup"].get("wait") or {}).get("checkpoint")]
    assert len(in_ck) >= 4, [d["job"]["backup"].get("wait") for d in waiting]
    for d in in_ck:
        ck, job = d["job"]["backup"]["wait"]["checkpoint"], d["job"]
        assert ck["fast"] is False and ck["bound_s"] == 270.0 and not ck["past_bound"], ck
        assert 0 < ck["left_s"] <= 270.0
        assert job["eta_s"] is not None and job["eta_s"] >= ck["left_s"], job
        assert job["eta_reason"] == WAIT_ONLY
        v = d["bottleneck"]
        assert v["kind"] == "checkpoint", v
        assert "up to 4 min 30 s (checkpoint_completion_target 0.9 x checkpoint_timeout " \
            "5 min 00 s)" in v["detail"] and "left" in v["detail"], v
        assert "--start-fast" in v["detail"] and "CHECKPOINT now" in v["detail"], v
    etas = [d["job"]["eta_s"] for d in in_ck]
    assert etas == sorted(etas, reverse=True), etas
    _no_generic_start(docs)


@pytest.mark.integration
def test_the_stop_behind_the_archivers_backlog_says_how_long(
        gated: tuple[Repo, ArchiveGate]) -> None:
    """WAL written during the copy (its local processes held meanwhile, so
    that it comes before the stop) with archive_command held: pgBackRest's
    stop waits for every segment up to the stop's, with its session closed.
    pgparmon names the segment (the manifest's backup-archive-stop in its
    repository), the backlog, archive_command's pace once it moves and the
    time left as the ETA: "stopping (waiting for WAL archiving)", never
    "finishing" while the archiver is behind."""
    repo, gate = gated
    cl = repo.cluster
    archive_caught_up(cl)
    proc = _start(repo, "--start-fast", caught_up=False)
    mon = None
    try:
        mon = wait_for_job(_target(cl), pid=None, wait_s=20, interval=0.2)
        docs = tick_until(mon, lambda d: d["job"]["phase"] == "copying files", pause=0.1)
        gate.hold()
        held_pids = stop(_local_pids(proc.pid))
        try:
            cl.psql("DROP TABLE IF EXISTS bulk2; CREATE TABLE bulk2 AS SELECT g, repeat('b', "
                    "200) AS pad FROM generate_series(1, 80000) g")
        finally:
            resume(held_pids)
        queued = queued_segments(cl)
        assert queued >= 15, queued
        stopping = "stopping (waiting for WAL archiving)"
        held = tick_until(mon, lambda d: d["job"]["phase"] == stopping
                          and (archive_wait(d).get("segments") or 0) >= 15
                          and archive_wait(d).get("wal") is not None)
        for _ in range(4):  # held: the wait goes on
            time.sleep(0.25)
            held.append(mon.tick().to_json())
        gate.release()
        docs += held + tick_until(mon, lambda d: d["job"]["state"] != "running")
    finally:
        gate.release()
        _stop(proc, mon)
    assert proc.returncode == 0 and docs[-1]["job"]["state"] == "finished", docs[-1]["job"]
    manifest = (Path(docs[-1]["job"]["backup"]["backup_dir"]) / "backup.manifest").read_text()
    stop_wal = re.search(r'^backup-archive-stop="(\w+)"', manifest, re.M)
    assert stop_wal is not None
    h = held[-1]
    arch = h["job"]["backup"]["wait"]["archiving"]
    assert h["job"]["backup"]["wait"]["step"] == "stop" and arch["wal"] == stop_wal.group(1)
    assert arch["bytes"] == arch["segments"] << 20 and arch["pace"] in ("measuring", "stuck")
    assert h["bottleneck"]["kind"] == "archiving", h["bottleneck"]
    assert f"archiving: {arch['segments']} segment(s) ({fmt.size(arch['bytes'])}) queued up " \
        f"to the backup's last segment ({arch['wal']})" in h["bottleneck"]["detail"]
    assert h["job"]["eta_s"] is None and "archiv" in h["job"]["eta_reason"], h["job"]
    after = [d for d in docs[docs.index(held[0]):] if d["job"]["state"] == "running"]
    stops = [d for d in after if d["job"]["phase"] == stopping]
    timed = [d for d in stops if archive_wait(d).get("pace") == "measured"
             and archive_wait(d).get("segments")]
    assert timed, [archive_wait(d) for d in stops]
    for d in timed:
        a, job = archive_wait(d), d["job"]
        assert a["wal"] == stop_wal.group(1) and a["segments_per_s"] > 0
        assert a["left_s"] == pytest.approx(a["segments"] / a["segments_per_s"], rel=0.01,
                                            abs=0.2)
        assert job["eta_s"] == a["left_s"] and job["eta_reason"] is None, job
        assert "segments/s" in d["bottleneck"]["detail"] and "about" in \
            d["bottleneck"]["detail"], d["bottleneck"]
    # the stop's wait lasts until the archiver has the stop's segment
    left = [archive_wait(d)["segments"] for d in stops]
    assert left == sorted(left, reverse=True) and all(left), left
    between = after[after.index(stops[0]):after.index(stops[-1])]
    assert all(d["job"]["phase"] == stopping for d in between), \
        [d["job"]["phase"] for d in after]
    assert all(d["bottleneck"]["kind"] != "stalled" for d in docs)


def test_how_far_a_cut_short_backup_got() -> None:
    """The bytes its local processes were seen to read count ahead of
    pgBackRest's own percentage (which moves only when a file is done); a
    copy whose local processes ended early is not "finishing"."""
    it = Item(key="backup", kind="backup", relation=None, name="full backup", size=1e9,
              work=1e9, state="running", started=0.0)
    it.done = 2.5e8
    st = BackrestState(unit="bytes", phase="finishing")
    got = _how_far(st, it)
    assert got.startswith("at 25.0% by the bytes read") and "none yet" in got, got
    assert "phase: copy (its local processes ended" in got
    st.pct = 1000.0  # 10.00%
    assert "pgBackRest's own count: 10.0%" in _how_far(st, it)
    st.pct, st.phase = 9995.0, "finishing"
    it.done = 9.99e8
    assert _how_far(st, it).endswith("phase: finishing")
    assert _how_far(BackrestState(phase="starting"), None) == \
        "before any progress, phase: starting"


@pytest.fixture(scope="module")
def restorable(repo: Repo) -> str:
    """A full backup to restore: bzip2 (its decompression is slow enough for
    a restore of ~160 MB to last a few seconds on two cores)."""
    archive_caught_up(repo.cluster)
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
        archive_caught_up(repo.cluster)
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
    archive_caught_up(repo.cluster)
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
    assert data_path("/var/lib/postgresql/15/main/base/16384/16397") == "base/16384/16397"
    assert data_path("/srv/pg/main/pg_xact/0000") == "pg_xact/0000"
    assert data_path("/srv/pg/main/pg_multixact/members/0000") == \
        "pg_multixact/members/0000"
    assert data_path("/srv/pg/main/global/pg_control") == "global/pg_control"
    assert data_path("/srv/pg/main/PG_VERSION") == "PG_VERSION"
    # a data directory whose own path holds such a name
    assert data_path("/mnt/base/data/base/1/1259") == "base/1/1259"
    assert data_path("/mnt/global/data/pg_xact/0000") == "pg_xact/0000"


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


def _idle_after(query: str, since: float) -> Backend:
    return Backend(pid=7, datname="postgres", usename="postgres",
                   application_name="pgbackrest [backup]", client_addr=None, client_port=None,
                   backend_start=900.0, xact_start=None, query_start=since - 0.01,
                   state="idle", wait_event_type="Client", wait_event="ClientRead",
                   backend_type="client backend", backend_xmin=None, leader_pid=None,
                   query=query, state_change=since)


def test_when_pgbackrest_sees_the_segment_before_its_start() -> None:
    """Its session idle after its start's last statement (the tablespaces'
    list): it looks for the segment in its repository from then, after ever
    longer sleeps. The archiver 20 segments behind at 2 a second (archived
    at 1013, server time): looking since 998, it sees it at 1021.2, 18.2 s
    from now; with --archive-timeout=14 (or the default 60 s, looking since
    950) it gives up first. Not while its statement runs, nor from a
    standby (it first waits for the standby's replay)."""
    ww = walwait.WalWatch()
    for i in range(4):
        ww.observe(Snapshot(ts=float(i), wall=1e9 + i, host=None, db=DbSample(
            server_ts=1000.0 + i, wal=(27 * SEG, SEG, 300.0, 0.9),
            archiver=(2 * i, 0, None, None, 999.0 + i, walwait.segment_name(1, 2 * i, SEG)))))
    ww.aim("start", fixed=True)
    tablespaces = "select oid::oid, spcname::text from pg_catalog.pg_tablespace"

    def looking(argv: list[str], b: Backend) -> dict[str, Any]:
        tr = SimpleNamespace(job=SimpleNamespace(command=["pgbackrest", *argv, "backup"]))
        arch = pgbackrest_waits.looking(tr, ww, b)  # type: ignore[arg-type]
        assert arch is not None and arch["segments"] == 20 and arch["left_s"] == 10.0
        return arch

    def verdict(arch: dict[str, Any]) -> str:
        v = wait_verdict(walwait.wait_doc("start", None, arch), "starting", None)
        assert v.kind == "archiving"
        return v.detail

    a = looking(["--stanza=demo"], _idle_after(tablespaces, 998.0))
    assert (a["seen_in_s"], a["gives_up"], a["archive_timeout_s"]) == (18.2, False, None)
    assert walwait.wait_doc("start", None, a)["left_s"] == 18.2  # type: ignore[index]
    assert verdict(a).endswith("; pgBackRest looks for it in its repository after ever longer "
                               "sleeps (from 0.1 s, each the sum of the two before): it sees "
                               f"it in about {fmt.about(18.2)}"), verdict(a)
    a = looking(["--archive-timeout=14"], _idle_after(tablespaces, 998.0))
    assert (a["seen_in_s"], a["gives_up"], a["archive_timeout_s"]) == (None, True, 14.0)
    assert walwait.wait_doc("start", None, a)["left_s"] == 10.0  # type: ignore[index]
    assert f"its archive-timeout ({fmt.duration(14)}, its command line) runs out first and " \
        "the backup fails" in verdict(a)
    a = looking([], _idle_after(tablespaces, 950.0))
    assert a["gives_up"] and f"its archive-timeout ({fmt.duration(60)} unless its " \
        "configuration sets another) runs out first" in verdict(a)
    # a forced switch after pg_backup_start: looking from then too
    a = looking([], _idle_after("select pg_catalog.pg_walfile_name(pg_catalog.pg_switch_wal()"
                                ")::text", 998.0))
    assert a["seen_in_s"] == 18.2
    # not looking yet, or not known when it began
    for argv, b in (([], replace(_idle_after(tablespaces, 998.0), state="active")),
                    ([], _idle_after("select pg_catalog.pg_backup_start('x', true)", 998.0)),
                    ([], replace(_idle_after(tablespaces, 998.0), state_change=None)),
                    (["--backup-standby"], _idle_after(tablespaces, 998.0)),
                    (["--backup-standby=y"], _idle_after(tablespaces, 998.0))):
        a = looking(argv, b)
        assert "seen_in_s" not in a and "gives_up" not in a, (argv, b)
        assert "pgBackRest looks for it" not in verdict(a)


def test_the_stop_segment_from_the_manifest_copy(tmp_path: Path) -> None:
    """pgBackRest saves a copy of its manifest before it looks for the
    stop's segments: its [backup] section names the last one; none before
    the stop, or where it cannot be read."""
    d = tmp_path / "20250101-000000F"
    d.mkdir()
    assert archive_stop(str(d)) is None
    (d / "backup.manifest.copy").write_text(
        '[backrest]\nbackrest-format=5\nbackrest-version="2.45"\n\n[backup]\n'
        'backup-archive-start="000000010000000000000019"\nbackup-label="20250101-000000F"\n')
    assert archive_stop(str(d)) is None  # during the copy: no stop yet
    (d / "backup.manifest.copy").write_text(
        '[backrest]\nbackrest-format=5\n\n[backup]\n'
        'backup-archive-start="000000010000000000000019"\n'
        'backup-archive-stop="00000001000000000000002F"\nbackup-label="20250101-000000F"\n'
        '\n[target:file]\npg_data/base/1/1259={"size":8192}\n')
    assert archive_stop(str(d)) == "00000001000000000000002F"


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
