"""pg_probackup (not packaged for this machine: its behaviour as its source
and documentation give it, see docs/backups.md): its command lines, its
catalog's control file, and the driver fed with what the host shows of a
backup (its threads' open files, the catalog's backup.control) through the
same tracker a live run uses."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pgparmon.analyze.progress import Tracker
from pgparmon.jobs.base import TREE, Job, PlanInputs
from pgparmon.jobs.pg_probackup import (
    PROGRAMS,
    PgProbackup,
    command_of,
    opt,
    read_control,
)
from pgparmon.jobs.registry import driver_for_argv
from pgparmon.snapshot import ClientProc, DbSample, OpenFile, Snapshot

ARGV = ["pg_probackup-15", "backup", "-B", "/b", "--instance", "main", "-b", "DELTA", "-j", "2",
        "--stream", "--compress-algorithm=zlib"]


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
                   "status = RUNNING\nprogram-version = 2.5.15\n")
    got = read_control(str(ctl))
    assert got is not None and got["status"] == "RUNNING"
    assert got["start-time"] == "2026-11-26 01:00:00+00" and got["backup-mode"] == "DELTA"
    assert read_control(str(tmp_path / "none")) is None


class Host:
    """What the host shows of a pg_probackup backup: a data directory, the
    catalog's backup directory, and the process's open files."""

    def __init__(self, tmp: Path) -> None:
        self.pgdata = tmp / "data"
        self.sizes = {"PG_VERSION": 3, "global/pg_control": 8192, "base/5/1259": 16384,
                      "base/5/2000": 4 << 20, "base/5/3000": 8 << 20, "base/5/4000": 8 << 20,
                      "base/5/5000": 32 << 20}
        for rel, size in self.sizes.items():
            p = self.pgdata / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "wb") as f:
                f.truncate(size)
        self.bdir = tmp / "cat" / "backups" / "main" / "T2Z4AB"
        (self.bdir / "database").mkdir(parents=True)
        (self.bdir / "backup.pid").write_text("4242\n")
        self.status("RUNNING")
        self.driver = PgProbackup()
        job = Job(kind="pg_probackup", database=None, client_pid=4242,
                  command=("pg_probackup", "backup", "-B", str(tmp / "cat"), "--instance",
                           "main", "-b", "FULL", "-j", "2"), client_pids=frozenset({4242}))
        self.job = self.driver.refine(job, [])
        self.tr = Tracker(self.job)
        files = {str(self.pgdata / k): float(v) for k, v in self.sizes.items()}
        assert self.driver.plan(self.tr, PlanInputs(file_sizes=files))
        self.tool: dict[str, Any] | None = None
        self.t = 0.0
        self.cpu = 0.0

    def status(self, s: str) -> None:
        (self.bdir / "backup.control").write_text(f"backup-mode = FULL\nstatus = {s}\n")

    def tick(self, reading: dict[str, int], cpu_per_s: float = 0.5,
             alive: bool = True) -> dict[str, Any]:
        """One sample: the files read now (relative path -> position)."""
        self.t += 1.0
        self.cpu += cpu_per_s
        files = tuple(OpenFile(str(self.pgdata / r), pos, "r") for r, pos in reading.items())
        files += tuple(OpenFile(str(self.bdir / "database" / r), 0, "w") for r in reading)
        clients = (ClientProc(4242, 1, "pg_probackup", 0.0, "running", self.cpu, 0.0,
                              None, None, files),) if alive else ()
        self.tool = self.driver.read_status(self.job, clients, self.tool) or self.tool
        snap = Snapshot(ts=self.t, wall=1e9 + self.t, db=DbSample(), host=None,
                        clients=clients, root_alive=alive, links=(), tool=self.tool)
        self.tr.update(snap)
        self.snap = snap
        st = self.tr.kind_state["probackup"]
        return {"phase": st["phase"], "fraction": self.driver.fraction(self.tr),
                "rows": sorted((w.pid, w.relation, w.progress)
                               for w in self.tr.workers.values()),
                "eta": self.driver.own_eta(self.tr),
                "verdict": self.driver.verdict(self.tr, snap, {})}


def test_progress_rows_and_end(tmp_path: Path) -> None:
    h = Host(tmp_path)
    total = sum(h.sizes.values())
    first = h.tick({})
    assert first["phase"] == "starting" and first["fraction"] == 0.0
    assert first["eta"][0] is None and "starting" in first["eta"][1]
    # smallest first: the two smallest files are in flight
    s = h.tick({"PG_VERSION": 0, "global/pg_control": 4096})
    assert s["phase"] == "copy" and [r[0] for r in s["rows"]] == [1, 2]
    assert {r[1] for r in s["rows"]} == {"PG_VERSION", "global/pg_control"}
    # the 4 MB file half read: everything smaller is done
    s = h.tick({"base/5/2000": 2 << 20}, cpu_per_s=1.9)
    done = 3 + 8192 + 16384 + (2 << 20)
    assert abs(s["fraction"] - done / total) < 1e-6, s
    (row,) = s["rows"]
    assert row[0] == 1 and row[1] == "base/5/2000" and row[2] == 0.5
    assert s["verdict"] is not None and s["verdict"].kind == "client-cpu"  # 190% of 2 threads
    # two 8 MB files, equal size: each counted once it is seen done
    s = h.tick({"base/5/3000": 8 << 20, "base/5/4000": 1 << 20})
    s = h.tick({"base/5/4000": 6 << 20, "base/5/5000": 0})
    done = 3 + 8192 + 16384 + (4 << 20) + (8 << 20) + (6 << 20)
    assert abs(s["fraction"] - done / total) < 1e-6, s
    s = h.tick({"base/5/5000": 16 << 20})
    assert s["eta"][0] is not None and s["eta"][0] > 0
    prog = [h.tick({"base/5/5000": p << 20})["fraction"] for p in (20, 24, 28)]
    assert prog == sorted(prog)
    s = h.tick({})  # the copy is over: pg_backup_stop, the WAL
    assert s["phase"] == "stopping" and s["rows"] == []
    h.status("DONE")
    assert h.tick({})["phase"] == "validating"
    h.status("OK")
    h.tick({}, alive=False)
    h.driver.settle_at_end(h.tr, None, h.snap)  # type: ignore[arg-type]
    assert h.tr.items["pg_probackup"].state == "done"
    assert h.driver.fraction(h.tr) == 1.0


def test_killed_backup_says_how_far(tmp_path: Path) -> None:
    h = Host(tmp_path)
    h.tick({"base/5/3000": 4 << 20})
    h.tick({"base/5/3000": 6 << 20}, alive=False)  # SIGKILL: backup.control says RUNNING
    h.driver.settle_at_end(h.tr, None, h.snap)  # type: ignore[arg-type]
    why = h.driver.cut_short(h.tr, h.snap)
    assert why is not None and "still says RUNNING" in why and "phase copy" in why, why
    h.status("ERROR")
    h.driver.settle_at_end(h.tr, None, h.snap)  # type: ignore[arg-type]
    assert "status to ERROR" in (h.driver.cut_short(h.tr, h.snap) or "")


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
