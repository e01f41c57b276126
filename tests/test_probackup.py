"""pg_probackup's driver on what the host shows of a backup, fed through the
same tracker a live run uses: the cases its real recordings
(tests/test_probackup_replay.py) do not hold (a tablespace, no readable
file list, equal sizes, a status CORRUPT, --no-validate, a process gone
during its validation), its command lines, its catalog's files and the
threads of a process."""

from __future__ import annotations

import dataclasses
import json
import os
import site
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from support import pgparmon_cmd, read_jsonl

from pgparmon.cluster import Cluster

from pgparmon.analyze.progress import Tracker
from pgparmon.jobs.base import TREE, Job, PlanInputs, state_of
from pgparmon.jobs.pg_probackup import PROGRAMS, PgProbackup
from pgparmon.jobs.pg_probackup_state import ProbackupState
from pgparmon.jobs.pg_probackup_catalog import (
    command_of,
    data_files,
    listed_files,
    opt,
    read_control,
)
from pgparmon.jobs.registry import driver_for_argv
from pgparmon.readers.procs import threads_of
from pgparmon.jobs.walwait import WAIT_ONLY
from pgparmon.snapshot import Backend, ClientProc, DbSample, FileSize, OpenFile, Snapshot

ARGV = ["pg_probackup-15", "backup", "-B", "/b", "--instance", "main", "-b", "DELTA", "-j", "2",
        "--stream", "--compress-algorithm=zlib"]
PID = 4242


def _seconds_why(eta: Any) -> tuple[float | None, str | None] | None:
    """A driver's own ETA as (seconds, reason), what these tests compare."""
    return None if eta is None else (eta.seconds, eta.reason)


def test_command_lines() -> None:
    assert command_of(ARGV) == "backup"
    assert command_of(["pg_probackup", "-B", "/b", "restore", "--instance", "x"]) == "restore"
    assert opt(ARGV, "-j", "threads") == "2" and opt(ARGV, "-b", "backup-mode") == "DELTA"
    assert opt(["pg_probackup", "backup", "-j4"], "-j", "threads") == "4"
    assert opt(["pg_probackup", "backup", "--threads=8"], "-j", "threads") == "8"
    assert opt(ARGV, None, "compress-algorithm") == "zlib"
    assert "pg_probackup-15" in PROGRAMS and "pg_probackup" in PROGRAMS
    assert driver_for_argv(ARGV).kind == "pg_probackup"  # type: ignore[union-attr]
    assert not PgProbackup().from_tree(_proc_info(["pg_probackup", "validate", "-B", "/b"]),
                                       None)  # type: ignore[arg-type]


def _proc_info(argv: list[str]) -> Any:
    from pgparmon.readers.procs import ProcInfo

    return ProcInfo(1, 0, argv[0], tuple(argv), 0.0, None)


def test_control_file(tmp_path: Path) -> None:
    ctl = tmp_path / "backup.control"
    ctl.write_text("#Configuration\nbackup-mode = DELTA\nstream = true\n"
                   "compress-alg = zlib\nstart-time = '2026-11-26 01:00:00+00'\n"
                   "stop-lsn = 0/0\nstatus = RUNNING\nprogram-version = 2.5.15\n")
    got = read_control(str(ctl))
    assert got is not None and got["status"] == "RUNNING" and got["stop-lsn"] == "0/0"
    assert got["start-time"] == "2026-11-26 01:00:00+00" and got["backup-mode"] == "DELTA"
    assert read_control(str(tmp_path / "none")) is None


def test_its_file_list_in_its_order(tmp_path: Path) -> None:
    """backup_content.control as pg_probackup 2.5 writes it when its copy
    starts: a JSON object a line, in its copy order, directories and
    external directories' files among them, every size still 0."""
    rows = [{"path": "base/5/3000", "size": "0", "mode": "33152", "external_dir_num": "0"},
            {"path": "base", "size": "0", "mode": "16832", "external_dir_num": "0"},
            {"path": "x/notes.txt", "size": "0", "mode": "33152", "external_dir_num": "1"},
            {"path": "base/5/1259", "size": "0", "mode": "33152", "external_dir_num": "0"}]
    (tmp_path / "backup_content.control").write_text(
        "".join(json.dumps(r) + "\n" for r in rows) + '{"path": "cut')
    assert listed_files(str(tmp_path)) == ["base/5/3000", "base/5/1259"]
    assert listed_files(str(tmp_path / "none")) is None


def test_data_directory_as_it_copies_it(tmp_path: Path) -> None:
    """Its exclusions (pg_wal, runtime files, temporary relations) and a
    tablespace, named as pg_tblspc/OID/... and found by its real path."""
    pgdata, space = tmp_path / "data", tmp_path / "space"
    for rel, size in {"PG_VERSION": 3, "base/5/1259": 8192, "base/5/t3_16400": 8192,
                      "base/5/pg_internal.init": 100, "pg_wal/000000010000000000000001": 64,
                      "postmaster.pid": 10, "base/pgsql_tmp/pgsql_tmp1.0": 5}.items():
        p = pgdata / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * size)
    (space / "PG_15_1" / "5").mkdir(parents=True)
    (space / "PG_15_1" / "5" / "16500").write_bytes(b"y" * 16384)
    (pgdata / "pg_tblspc").mkdir()
    os.symlink(space, pgdata / "pg_tblspc" / "16499")
    found = data_files(str(pgdata))
    assert found is not None
    sizes, roots = found
    assert sizes == {"PG_VERSION": 3, "base/5/1259": 8192,
                     "pg_tblspc/16499/PG_15_1/5/16500": 16384}
    assert roots["pg_tblspc/16499"] == os.path.realpath(space)
    listed = data_files(str(pgdata), ["base/5/1259", "pg_tblspc/16499/PG_15_1/5/16500", "gone"])
    assert listed is not None and listed[0] == {"base/5/1259": 8192, "gone": 0,
                                                "pg_tblspc/16499/PG_15_1/5/16500": 16384}
    assert data_files(str(tmp_path / "none")) is None


def test_threads_of_a_process() -> None:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        got = threads_of(os.getpid())
        assert got is not None and len(got) >= 2
        # the main thread first, then in the order they were made (not by id:
        # ids wrap around with the pids)
        assert got[0][0] == os.getpid() and got[-1][0] == t.native_id
        assert all(isinstance(cpu, float) and state.isalpha() for _, state, cpu in got)
    finally:
        stop.set()
        t.join()
    assert threads_of(2 ** 22 + 7) is None  # no such process


class Host:
    """What the host shows of a pg_probackup backup: a data directory, the
    catalog's backup directory with its control file, and the process's
    open files and threads."""

    SIZES = {"PG_VERSION": 3, "global/pg_control": 8192, "base/5/1259": 16384,
             "base/5/2000": 4 << 20, "base/5/3000": 8 << 20, "base/5/4000": 8 << 20,
             "base/5/5000": 32 << 20}

    def __init__(self, tmp: Path, argv: tuple[str, ...] = (), order: list[str] | None = None,
                 stream: bool = False) -> None:
        self.pgdata = tmp / "data"
        self.bdir = tmp / "cat" / "backups" / "main" / "T2Z4AB"
        (self.bdir / "database").mkdir(parents=True)
        (self.bdir / "backup.pid").write_text(f"{PID}\n")
        self.stream = stream
        self.control("RUNNING")
        self.driver = PgProbackup()
        job = Job(kind="pg_probackup", database=None, client_pid=PID,
                  command=("pg_probackup", "backup", "-B", str(tmp / "cat"), "--instance",
                           "main", "-b", "FULL", "-j", "2", *argv),
                  client_pids=frozenset({PID}))
        self.job = self.driver.refine(job, [])
        self.tr = Tracker(self.job, self.driver)
        assert self.driver.plan(self.tr, PlanInputs(
            file_sizes={k: float(v) for k, v in self.SIZES.items()},
            locations={"": str(self.pgdata)}, file_order=order))
        self.tool: dict[str, Any] | None = None
        self.t = 0.0
        self.cpu = 0.0

    def control(self, status: str, stop_lsn: str = "0/0") -> None:
        (self.bdir / "backup.control").write_text(
            f"backup-mode = FULL\nstream = {str(self.stream).lower()}\ncompress-alg = none\n"
            f"stop-lsn = {stop_lsn}\nstatus = {status}\n")

    def tick(self, files: dict[str, int], mode: str = "r", workers: int = 0,
             worker_cpu_s: float = 0.5, alive: bool = True,
             server: Server | None = None) -> dict[str, Any]:
        """One sample: the files open now (relative path -> position), in
        the data directory (`r`, the copy) or the backup's (`w` the sync,
        `r` the validation: `mode`), and `workers` threads besides the main
        one (and the WAL stream's)."""
        self.t += 1.0
        self.cpu += worker_cpu_s
        if mode == "copy":
            opened = tuple(OpenFile(str(self.pgdata / r), pos, "r") for r, pos in files.items())
            opened += tuple(OpenFile(str(self.bdir / "database" / r), pos, "w")
                            for r, pos in files.items())
        else:
            opened = tuple(OpenFile(str(self.bdir / "database" / r), pos, mode)
                           for r, pos in files.items())
        clients = (ClientProc(PID, 1, "pg_probackup", 0.0, "running", self.cpu, 0.0,
                              10 * int(self.t) << 20, 10 * int(self.t) << 20, opened),) \
            if alive else ()
        self.tool = self.driver.read_status(self.job, clients, self.tool) or self.tool
        tool = dict(self.tool or {})
        base = [[PID, "S", 0.1]] + ([[PID + 1, "S", 0.1]] if self.stream else [])
        tool["threads"] = base + [[PID + 10 + i, "R", self.cpu] for i in range(workers)]
        sizes = tuple(FileSize(str(self.bdir / "database" / r), self.SIZES[r])
                      for r in files if mode == "r")
        db, links = server.sample(self.t) if server is not None else (DbSample(), ())
        snap = Snapshot(ts=self.t, wall=1e9 + self.t, db=db, host=None,
                        clients=clients, files=sizes, root_alive=alive, links=links, tool=tool)
        self.tr.update(snap)
        self.snap = snap
        st = state_of(self.tr, ProbackupState)
        fields = self.driver.job_fields(self.tr, [], "running")
        return {"phase": st.phase, "fraction": self.driver.fraction(self.tr),
                "rows": sorted((w.pid, w.phase, w.relation, w.progress)
                               for w in self.tr.workers.values()),
                "eta": _seconds_why(self.driver.own_eta(self.tr)), "backup": fields["backup"],
                "verdict": self.driver.verdict(self.tr, snap, {})}

    def copy(self, files: dict[str, int], workers: int = 2, **kw: Any) -> dict[str, Any]:
        return self.tick(files, "copy", workers, **kw)


SEG = 16 << 20


class Server:
    """What the sample shows of the server around a backup in archive mode:
    its session (its statement, active or idle, since when), the archiver
    (segments archived, the last one) and where WAL is written."""

    def __init__(self) -> None:
        self.archived = 0  # archived_count
        self.last = 0x10  # the last segment archived
        self.written = 0x50  # the segment being written
        self.query, self.state, self.since = "SELECT 1", "idle", 0.0

    def sample(self, t: float) -> tuple[DbSample, tuple[tuple[int, int], ...]]:
        now = 5000.0 + t
        session = Backend(pid=777, datname="postgres", usename="backup",
                          application_name="", client_addr=None, client_port=None,
                          backend_start=4000.0, xact_start=None,
                          query_start=now - self.since, state=self.state,
                          wait_event_type=None, wait_event=None,
                          backend_type="client backend", backend_xmin=None, leader_pid=None,
                          query=self.query)
        name = f"00000001000000000000{self.last:04X}"
        db = DbSample(server_ts=now, backends=(session,),
                      archiver=(self.archived, 0, None, None, now - 1.0, name),
                      wal=(self.written * SEG + 4096, SEG, 300.0, 0.9))
        return db, ((777, PID),)

    def archive(self, n: int) -> None:
        self.archived += n
        self.last += n


ORDER = ["PG_VERSION", "global/pg_control", "base/5/1259", "base/5/2000", "base/5/4000",
         "base/5/3000", "base/5/5000"]


def test_its_order_its_steps_and_its_end(tmp_path: Path) -> None:
    """Its own file list gives the order (the two 8 MB files in its order,
    4000 before 3000); the steps follow its control file; the sync counts
    files, the validation bytes."""
    h = Host(tmp_path, order=ORDER)
    total = sum(h.SIZES.values())
    first = h.tick({})
    assert first["phase"] == "starting" and first["fraction"] == 0.0
    assert first["eta"][0] is None and "starting" in first["eta"][1]
    s = h.copy({"PG_VERSION": 0, "global/pg_control": 4096})
    assert s["phase"] == "copy" and [r[:2] for r in s["rows"]] == [(1, "backup"), (2, "backup")]
    s = h.copy({"base/5/2000": 2 << 20}, worker_cpu_s=1.9)
    done = 3 + 8192 + 16384 + (2 << 20)
    assert abs(s["fraction"] - done / total) < 1e-6, s
    assert s["rows"] == [(1, "backup", "base/5/2000", 0.5)]
    assert s["verdict"] is not None and s["verdict"].kind == "client-cpu"  # 190% each
    # 4000 comes first in its list: 3000 in flight counts 4000 whole once seen gone
    s = h.copy({"base/5/4000": 1 << 20, "base/5/3000": 0})
    s = h.copy({"base/5/3000": 6 << 20, "base/5/5000": 0})
    done = 3 + 8192 + 16384 + (4 << 20) + (8 << 20) + (6 << 20)
    assert abs(s["fraction"] - done / total) < 1e-6, s
    s = h.copy({"base/5/5000": 16 << 20}, workers=1)
    assert s["eta"][0] is not None and s["eta"][0] > 0
    assert "validation" in s["backup"]["eta_basis"]
    prog = [h.copy({"base/5/5000": p << 20}, workers=1)["fraction"] for p in (20, 24, 28)]
    assert prog == sorted(prog) and prog[0] < prog[-1]
    s = h.tick({})  # the copy threads are gone: pg_backup_stop, the WAL
    assert s["phase"] == "stopping" and s["rows"] == []
    assert s["eta"][0] is not None  # the validation to come
    h.control("RUNNING", stop_lsn="0/5000060")
    syncs = [h.tick({r: 0}, "w") for r in ("base/5/1259", "base/5/2000", "base/5/4000")]
    assert [s["phase"] for s in syncs] == ["sync"] * 3
    assert [s["backup"]["step_progress"] for s in syncs] == [round(n / 7, 4) for n in (2, 3, 4)]
    assert syncs[-1]["rows"] == [(1, "sync", "base/5/4000", None)]
    assert syncs[-1]["verdict"].kind == "disk-write"
    h.control("DONE", stop_lsn="0/5000060")
    s = h.tick({"base/5/2000": 1 << 20}, "r", workers=2)
    assert s["phase"] == "validate" and s["rows"] == [(1, "validate", "base/5/2000", 0.25)]
    h.tick({"base/5/3000": 4 << 20}, "r", workers=2)
    s = h.tick({"base/5/5000": 8 << 20}, "r", workers=1)
    assert s["eta"][0] is not None and 0 < s["backup"]["step_progress"] < 1
    h.control("OK", stop_lsn="0/5000060")
    h.tick({}, alive=False)
    h.driver.settle_at_end(h.tr, None, h.snap)  # type: ignore[arg-type]
    assert h.tr.items["pg_probackup"].state == "done"
    assert h.driver.fraction(h.tr) == 1.0


def test_without_its_list_equal_sizes_wait_until_passed(tmp_path: Path) -> None:
    """No readable backup_content.control: by size, and the files of the
    size in flight are counted only once seen done (where its quicksort put
    equal sizes cannot be known)."""
    h = Host(tmp_path)
    total = sum(h.SIZES.values())
    h.copy({"base/5/3000": 1 << 20})
    s = h.copy({"base/5/3000": 2 << 20})
    below = 3 + 8192 + 16384 + (4 << 20)
    assert abs(s["fraction"] - (below + (2 << 20)) / total) < 1e-6
    s = h.copy({"base/5/4000": 1 << 20, "base/5/5000": 0})  # 3000 seen gone
    assert abs(s["fraction"] - (below + (8 << 20) + (1 << 20)) / total) < 1e-6


def test_killed_backup_says_how_far(tmp_path: Path) -> None:
    h = Host(tmp_path, order=ORDER)
    h.copy({"base/5/3000": 4 << 20})
    h.copy({"base/5/3000": 6 << 20}, alive=False)  # SIGKILL: backup.control says RUNNING
    h.driver.settle_at_end(h.tr, None, h.snap)  # type: ignore[arg-type]
    why = h.driver.cut_short(h.tr, h.snap)
    assert why is not None and "still says RUNNING" in why and "phase copy" in why, why
    h.control("ERROR")
    h.driver.settle_at_end(h.tr, None, h.snap)  # type: ignore[arg-type]
    assert "status to ERROR" in (h.driver.cut_short(h.tr, h.snap) or "")


def test_corrupt_and_a_validation_cut_short(tmp_path: Path) -> None:
    h = Host(tmp_path, order=ORDER)
    h.copy({"base/5/5000": 16 << 20})
    h.control("DONE", stop_lsn="0/5000060")
    h.tick({"base/5/5000": 1 << 20}, "r", workers=1)
    h.tick({}, alive=False)  # gone while it validated: the backup is DONE, not validated
    h.driver.settle_at_end(h.tr, None, h.snap)  # type: ignore[arg-type]
    assert h.tr.items["pg_probackup"].state != "done"
    assert h.driver.cut_short(h.tr, h.snap) is None
    state, why = h.driver.leftover_verdict(h.tr, [])
    assert state == "ended" and "not validated" in why and "validate -i T2Z4AB" in why
    h.control("CORRUPT", stop_lsn="0/5000060")
    h.driver.settle_at_end(h.tr, None, h.snap)  # type: ignore[arg-type]
    why2 = h.driver.cut_short(h.tr, h.snap) or ""
    assert "damaged file" in why2 and "phase validate" in why2, why2


def test_no_validate_finishes_at_done_and_adds_no_validation(tmp_path: Path) -> None:
    h = Host(tmp_path, argv=("--no-validate",), order=ORDER)
    for p in (4, 8, 12):
        s = h.copy({"base/5/5000": p << 20}, workers=1)
    assert s["eta"][0] is not None and "no validation" in s["backup"]["eta_basis"]
    with_validation = Host(tmp_path / "v", order=ORDER)
    for p in (4, 8, 12):
        v = with_validation.copy({"base/5/5000": p << 20}, workers=1)
    assert v["eta"][0] > s["eta"][0]  # the same copy, plus the validation to come
    h.control("DONE", stop_lsn="0/5000060")
    h.tick({}, alive=False)
    h.driver.settle_at_end(h.tr, None, h.snap)  # type: ignore[arg-type]
    assert h.tr.items["pg_probackup"].state == "done"


def test_worker_threads_leave_out_the_wal_streams(tmp_path: Path) -> None:
    h = Host(tmp_path, order=ORDER, stream=True)
    s = h.tick({})
    assert s["phase"] == "starting" and s["backup"]["threads_alive"] == 2
    s = h.copy({"base/5/5000": 1 << 20}, workers=2)
    s = h.copy({"base/5/5000": 2 << 20}, workers=2, worker_cpu_s=1.0)
    assert s["backup"]["threads_alive"] == 4
    assert s["backup"]["worker_threads_cpu_percent"] == [100.0, 100.0]
    s = h.tick({}, workers=0)
    assert s["phase"] == "stopping" and s["verdict"].kind == "wal"


def test_archive_mode_waits_for_the_archiver_with_figures(tmp_path: Path) -> None:
    """Archive mode with --smooth-checkpoint, after a bulk load: the start
    waits for a spread checkpoint (its bound, the time left, the way out),
    then for the archiver to reach the segment of its start LSN (the backlog,
    the pace, the time left, counted in the ETA); the stop waits for the
    stop LSN's segment, counted too."""
    h = Host(tmp_path, argv=("--smooth-checkpoint",), order=ORDER)
    srv = Server()
    # pg_backup_start for 30 s: a spread checkpoint (0.9 x 5 min)
    srv.query, srv.state, srv.since = "SELECT pg_catalog.pg_backup_start($1, $2)", "active", 30.0
    s = h.tick({}, server=srv)
    assert s["phase"] == "starting" and s["verdict"].kind == "checkpoint"
    ck = s["backup"]["wait"]["checkpoint"]
    assert (ck["fast"], ck["bound_s"], ck["waited_s"], ck["left_s"]) == (False, 270.0, 30.0, 240.0)
    assert "up to 4 min 30 s" in s["verdict"].detail and "about 4 min 00 s left" in \
        s["verdict"].detail
    assert "leave out --smooth-checkpoint" in s["verdict"].detail, s["verdict"].detail
    # the segment being written (0x50) is the one it will start in: 64 behind the archiver
    assert "then it waits for the archiver: archiving: 64 segment(s) (1.1 GB)" in \
        s["verdict"].detail, s["verdict"].detail
    assert s["eta"] == (240.0, WAIT_ONLY)
    assert "copy not counted" in s["backup"]["eta_basis"]
    # pg_backup_start returned, pg_switch_wal: the start LSN's segment is 0x50
    srv.query, srv.state, srv.written = "SELECT pg_catalog.pg_switch_wal()", "idle", 0x51
    s = h.tick({}, server=srv)
    arch = s["backup"]["wait"]["archiving"]
    assert s["backup"]["wait"]["checkpoint"] is None
    assert (arch["wal"], arch["segments"], arch["bytes"], arch["pace"]) == (
        "000000010000000000000050", 64, 64 * SEG, "measuring")
    assert s["verdict"].kind == "archiving" and s["verdict"].detail == (
        "archiving: 64 segment(s) (1.1 GB) queued up to the segment the backup starts in "
        "(000000010000000000000050); archive_command's pace: measuring")
    assert s["eta"] == (None, ("waiting for WAL archiving: measuring archive_command's pace "
                               "(64 segment(s) queued)"))
    for _ in range(3):  # two segments a second
        srv.archive(2)
        s = h.tick({}, server=srv)
    arch = s["backup"]["wait"]["archiving"]
    assert (arch["segments"], arch["segments_per_s"], arch["left_s"]) == (58, 2.0, 29.0)
    assert s["eta"] == (29.0, WAIT_ONLY)
    assert s["verdict"].detail.endswith("archive_command archives 2 segments/s (33.6 MB/s): "
                                        "about 29.0 s"), s["verdict"].detail
    # the copy, the archiver caught up: nothing ahead of the stop
    srv.archive(58)
    for p in (4, 8, 12):
        s = h.copy({"base/5/5000": p << 20}, workers=1, server=srv)
    assert s["backup"]["wait"] is None and "archiver" not in s["backup"]["eta_basis"]
    copy_eta = s["eta"][0]
    # the same copy with 20 segments more written than archived: its stop
    # waits for them beyond the copy's rest (at 2 a second, 10 s)
    behind = Host(tmp_path / "b", argv=("--smooth-checkpoint",), order=ORDER)
    srv2 = Server()
    srv2.archived, srv2.last, srv2.written = 0, 0x30, 0x40  # 15 behind, then 2 a second
    behind.tick({}, server=srv2)
    for p in (4, 8, 12):
        srv2.archive(2)
        srv2.written += 1
        b = behind.copy({"base/5/5000": p << 20}, workers=1, server=srv2)
    assert "the stop's wait for the archiver beyond it" in b["backup"]["eta_basis"], \
        b["backup"]["eta_basis"]
    assert b["eta"][0] > copy_eta
    # the stop: pg_backup_stop switched out of 0x52; the archiver 2 behind
    srv.query, srv.written = "SELECT pg_catalog.pg_backup_stop(false)", 0x53
    srv.last = 0x50
    s = h.tick({}, server=srv)
    s = h.tick({}, server=srv)
    srv.archive(1)
    s = h.tick({}, server=srv)
    assert s["phase"] == "stopping" and s["verdict"].kind == "archiving"
    arch = s["backup"]["wait"]["archiving"]
    assert arch["wal"] == "000000010000000000000052" and arch["segments"] == 1
    assert "queued up to the segment of the backup's stop LSN" in s["verdict"].detail
    assert "the archiver's backlog up to the stop LSN's segment" in s["backup"]["eta_basis"]
    assert s["eta"][0] is not None and s["eta"][0] >= arch["left_s"]


def test_a_failing_archive_command_at_the_start_is_said(tmp_path: Path) -> None:
    h = Host(tmp_path, order=ORDER)
    srv = Server()
    srv.query, srv.written = "SELECT pg_catalog.pg_switch_wal()", 0x12
    h.tick({}, server=srv)
    db, links = srv.sample(h.t + 1.0)
    arch = db.archiver
    assert arch is not None
    failing = Server()
    failing.__dict__.update(srv.__dict__)
    failing.sample = lambda t: (dataclasses.replace(  # type: ignore[method-assign]
        srv.sample(t)[0], archiver=(arch[0], 4, "000000010000000000000011", 5100.0,
                                    5000.0, arch[5])), links)
    s = h.tick({}, server=failing)
    assert s["verdict"].kind == "archiving"
    assert "archive_command fails (4 failure(s) since the backup began; last failed segment " \
        "000000010000000000000011)" in s["verdict"].detail
    assert "archive_timeout" in s["verdict"].detail
    assert s["eta"][0] is None and "fails" in s["eta"][1]


def test_backup_dir_from_backup_pid(tmp_path: Path) -> None:
    h = Host(tmp_path)
    other = h.bdir.parent / "T2Z499"
    other.mkdir()
    (other / "backup.pid").write_text("1\n")
    tool = h.driver.read_status(h.job, (), None)  # no file open yet
    assert tool is not None and tool["backup_dir"] == str(h.bdir)
    assert tool["control"]["status"] == "RUNNING"
    assert os.path.basename(tool["backup_dir"]) == "T2Z4AB"
    assert h.job.grouping == TREE and h.job.jobs == 2


def _earlier(instance: Path, name: str, status: str, comp: str, data: int, took: float,
             synced: int = 0, sync_s: float = 0.0) -> None:
    """An earlier backup in the catalog: validated in `took` s after its
    end-time; its file list (`synced` files with bytes written, and
    directories and an empty file) written `sync_s` s before its end-time."""
    d = instance / name
    d.mkdir(parents=True)
    ctl = d / "backup.control"
    ctl.write_text(f"backup-mode = FULL\ncompress-alg = {comp}\n"
                   f"end-time = '2026-11-26 15:00:00+00'\ndata-bytes = {data}\n"
                   f"status = {status}\n")
    end = 1795705200.0  # 2026-11-26 15:00:00 UTC
    os.utime(ctl, (end + took, end + took))
    if synced:
        rows = ['{"path":"base", "size":"0", "mode":"16832"}',
                '{"path":"base/5/9", "size":"0", "mode":"33152"}']
        rows += [f'{{"path":"base/5/{i}", "size":"8200", "mode":"33152"}}' for i in range(synced)]
        content = d / "backup_content.control"
        content.write_text("\n".join(rows) + "\n")
        os.utime(content, (end - sync_s, end - sync_s))


def test_validation_timed_from_its_earlier_backups(tmp_path: Path) -> None:
    """The catalog's earlier backups say how fast this instance validates:
    end-time (its start) to the control file's last write (status OK)."""
    h = Host(tmp_path, order=ORDER)
    instance = h.bdir.parent
    # the newest with no compression: its sync 3 s for 300 files
    _earlier(instance, "T2Z3AA", "OK", "none", 1 << 30, 4.5, synced=300, sync_s=3.0)
    _earlier(instance, "T2Z3AB", "OK", "zlib", 1 << 30, 30.0)
    _earlier(instance, "T2Z3AC", "ERROR", "none", 1 << 30, 1.0)
    _earlier(instance, "T2Z2ZZ", "OK", "none", 1 << 30, 2 * 86400.0)  # validated again later
    _earlier(instance, "T2Z3AD", "OK", "none", 1 << 20, 0.2)  # too small to time
    got = PgProbackup().read_status(h.job, (), None)
    assert got is not None
    assert [(e["id"], e["compress"], e["validate_s"]) for e in got["history"]] == [
        ("T2Z3AD", "none", 0.2), ("T2Z3AB", "zlib", 30.0), ("T2Z3AA", "none", 4.5)]
    assert (got["history"][2]["sync_s"], got["history"][2]["synced_files"]) == (3.0, 300)
    assert "sync_s" not in got["history"][0]  # no file list
    no_history = Host(tmp_path / "first", order=ORDER)
    for host in (h, no_history):
        for p in (4, 8, 12):
            s = host.copy({"base/5/5000": p << 20}, workers=1)
        host.last = s  # type: ignore[attr-defined]
    basis = h.last["backup"]["eta_basis"]  # type: ignore[attr-defined]
    assert "as fast per byte written as backup T2Z3AA's" in basis, basis
    assert "the sync as long per file as the last timed one's" in basis, basis
    first = no_history.last  # type: ignore[attr-defined]
    assert "no earlier backup" in first["backup"]["eta_basis"]
    # the same copy; the validation of what it writes (as much as it reads)
    # at 1 GiB per 4.0 s (4.5 s less the rounding), or at twice the copy's 4
    # MiB/s; with the earlier backup, the sync of its 7 files at 10 ms each
    total = sum(Host.SIZES.values())
    with_h = h.last["eta"][0] - total * 4.0 / (1 << 30) - 7 * 0.01  # type: ignore[attr-defined]
    without = first["eta"][0] - total / (8 << 20)
    assert abs(with_h - without) < 0.01, (with_h, without)


@pytest.mark.integration
@pytest.mark.parametrize("tcp", [False, True], ids=["unix socket", "tcp"])
def test_attach_sees_its_idle_session(cluster: Cluster, tmp_path: Path, tcp: bool) -> None:
    """Its session has no application_name and sits idle from its backup's
    start to its stop, so the sample would drop it: attach finds it through
    the process's sockets. A stand-in with pg_probackup's name and command
    word opens such a session and leaves it idle."""
    (tmp_path / "bin").mkdir()
    os.symlink(sys.executable, tmp_path / "bin" / "pg_probackup")
    (tmp_path / "backup").write_text(
        "import sys, time\nimport psycopg\n"
        "c = psycopg.connect(sys.argv[1], autocommit=True)\nc.execute('SELECT 1')\n"
        "print('idle', flush=True)\ntime.sleep(120)\n")
    env = cluster.env(tcp=tcp)
    env["PYTHONPATH"] = os.pathsep.join(site.getsitepackages())
    job = subprocess.Popen([str(tmp_path / "bin" / "pg_probackup"), "backup",
                            cluster.conninfo(tcp=tcp)], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "idle"
        res = subprocess.run(pgparmon_cmd("attach", "--json", "--interval", "0.3",
                                          "--duration", "1.5", "-d", "postgres"),
                             capture_output=True, text=True, env=cluster.env(), timeout=60)
        assert res.returncode == 0, res.stderr
        samples: list[Any] = [d for d in read_jsonl(res.stdout)
                              if d.get("schema") == "pgparmon.sample/1"]
        assert samples and {s["job"]["kind"] for s in samples} == {"pg_probackup"}
        assert samples[-1]["job"]["client_pid"] == job.pid
        idle = {w["pid"] for w in samples[-1]["workers"] if w["phase"] == "idle"}
        assert len(idle) == 1, samples[-1]["workers"]
    finally:
        job.kill()
        job.wait()
