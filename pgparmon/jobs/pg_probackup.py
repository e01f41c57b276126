"""pg_probackup backup (`pg_probackup backup -B DIR --instance NAME -b
FULL|DELTA|PAGE|PTRACK -j N [--stream]`): one process whose N threads copy
the data directory's files into its catalog; one client session (no
application_name of its own: found through the process's sockets) that
starts and stops the backup (`pg_backup_start('... with pg_probackup')`),
and with --stream a WAL stream (a walsender named after the program).

Threads share the process's file table, so the files in flight are the
data files the process has open under the data directory (their position,
where its reads move it) and its catalog's files it writes. What the host
and the catalog say:

- the backup's directory, `BACKUP_PATH/backups/INSTANCE/<ID>/` with its
  `backup.control` (status RUNNING until DONE / OK, or ERROR; a process
  killed leaves RUNNING) and `backup.pid` (the process's pid);
- its copy order: the file list sorted by size, smallest first. So every
  file smaller than the smallest in flight is done: the bytes done are those
  files, the files seen in flight before and gone since, and the positions
  of those in flight now, over the data directory's files (summed once).
  PAGE and PTRACK backups skip unchanged data files without opening them: the
  order still holds, the bytes say how far down the list it is (inferred).

pg_probackup is not packaged for every platform; this driver follows its
documented behaviour and source (see docs/backups.md).
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

from ..analyze.bottleneck import BUSY_CPU, HOST_CPU, Verdict
from ..analyze.items import Item, WorkerState
from ..cmdline import ClientArgs
from ..snapshot import Backend, ClientProc, Snapshot
from .base import (
    TREE,
    Driver,
    EndContext,
    Job,
    PlanInputs,
    PlanReader,
    cluster_job,
    tree_member_pids,
)
from .pgbackrest import data_directory_files, how_far, process_row, prune_rows, window_eta

if TYPE_CHECKING:
    from ..analyze.progress import Tracker
    from ..readers.procs import ProcInfo

PROGRAM = "pg_probackup"
# packages name the binary after the server's major version
PROGRAMS = (PROGRAM, *(f"{PROGRAM}-{v}" for v in range(9, 20)))
KEY = "pg_probackup"
LABEL_MARK = "with pg_probackup"  # its pg_backup_start label
INFERRED = ("inferred: user and client address of a session that started a backup 'with "
            "pg_probackup' (its process is not on this host)")
DONE_STATES = ("DONE", "OK")
# options that take a value (short and long), for finding the command word
_VALUED = {"-B", "-b", "-j", "-D", "-d", "-h", "-p", "-U", "-S", "--backup-path",
           "--instance", "--backup-mode", "--threads", "--pgdata", "--pgdatabase",
           "--pghost", "--pgport", "--pguser", "--slot", "--compress-algorithm",
           "--compress-level", "--remote-host", "--remote-user", "--remote-port",
           "--note", "--ttl", "--expire-time", "--external-dirs", "--log-level-console",
           "--log-level-file", "--log-directory", "--log-filename", "--retention-redundancy",
           "--retention-window", "--wal-depth"}


def command_of(argv: list[str] | tuple[str, ...]) -> str | None:
    """pg_probackup's command (`backup`, `restore`, `validate`...): the
    first argument that is neither an option nor an option's value."""
    skip = False
    for a in list(argv)[1:]:
        if skip:
            skip = False
            continue
        if a.startswith("-"):
            skip = a in _VALUED
            continue
        return a
    return None


def opt(argv: list[str] | tuple[str, ...], short: str | None, long: str) -> str | None:
    """An option's value: `-j 4`, `-j4`, `--threads=4`, `--threads 4`."""
    args = list(argv)
    for i, a in enumerate(args):
        if a == f"--{long}" or (short and a == short):
            return args[i + 1] if i + 1 < len(args) else None
        if a.startswith(f"--{long}="):
            return a.split("=", 1)[1]
        if short and a.startswith(short) and len(a) > len(short) and not a.startswith("--"):
            return a[len(short):]
    return None


def read_control(path: str) -> dict[str, str] | None:
    """A backup.control file (`key = value` lines, values maybe quoted)."""
    out: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if "=" in line and not line.lstrip().startswith("#"):
                    k, _, v = line.partition("=")
                    out[k.strip()] = v.strip().strip("'\"")
    except OSError:
        return None
    return out


class PgProbackup(Driver):
    kind = "pg_probackup"
    programs = PROGRAMS
    data_flow = "out"
    plans_work = True  # the data directory's files and sizes, once
    needs_plan = False
    fixed_workers = False
    whole_cluster = True
    all_databases = True  # its WAL stream is a walsender, with no database
    waiting_phases = ("starting", "stopping", "validating")

    # ---- recognise ---------------------------------------------------------

    def from_tree(self, root: ProcInfo, args: ClientArgs) -> bool:
        return command_of(root.cmdline) == "backup"

    def refine(self, job: Job, linked: list[Backend]) -> Job:
        threads = opt(job.command, "-j", "threads")
        return dataclasses.replace(job, database=None, grouping=TREE, target=None,
                                   jobs=int(threads) if threads and threads.isdigit() else 1)

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        if not _ours(b):
            return None
        return (self.kind, b.usename, b.client_addr)

    def from_sessions(self, members: list[Backend]) -> Job:
        return cluster_job(self.kind, members, INFERRED)

    def belongs(self, job: Job, b: Backend) -> bool:
        if job.grouping == TREE:
            return b.pid in job.pid_hint
        return _ours(b) and b.usename == job.usename and b.client_addr == job.client_addr

    def member_pids(self, job: Job, snap: Snapshot) -> set[int] | None:
        return tree_member_pids(job, snap)

    def other_work(self, tr: Tracker, w: WorkerState, b: Backend,
                   snap: Snapshot) -> tuple[str, str | None] | None:
        """Its WAL stream (--stream): a walsender, WAL bytes sent since it
        began."""
        if b.backend_type != "walsender" or snap.db is None:
            return None
        sent = next((s.sent for s in snap.db.senders if s.pid == b.pid), None)
        if sent is not None:
            first = tr.kind_state.setdefault("wal_start", {}).setdefault(b.pid, sent)
            w.bytes_done = sent - first
            w.bytes_rate.add(snap.ts, w.bytes_done)
        return "wal", None

    # ---- plan --------------------------------------------------------------

    def read_plan(self, src: PlanReader, req: dict[str, Any]) -> PlanInputs | None:
        """The data directory's files and their sizes (what a FULL or DELTA
        backup reads), once; nothing when the server is not on this host."""
        pgdata = src.facts.data_directory if src.local else None
        files = data_directory_files(pgdata) if pgdata else None
        # by absolute path: the files the process has open are matched as they are
        return PlanInputs(file_sizes={os.path.join(pgdata or "", k): float(v)
                                      for k, v in (files or {}).items()})

    def plan(self, tr: Tracker, inputs: PlanInputs) -> bool:
        st = _state(tr)
        files = {k: int(v) for k, v in (inputs.file_sizes or {}).items()}
        if files:
            st["sizes"] = files
            st["total"] = sum(files.values())
        tr.planned = True
        return True

    # ---- the tool's own status ------------------------------------------------

    def read_status(self, job: Job, clients: tuple[ClientProc, ...],
                    prev: dict[str, Any] | None) -> dict[str, Any] | None:
        """The backup's directory in its catalog (from the files the process
        writes, else `-B` / `--instance` and the backup whose backup.pid is
        this process) and its backup.control, read each sample."""
        prev = prev or {}
        out: dict[str, Any] = {"backup_dir": prev.get("backup_dir")}
        for c in clients:
            for f in c.open_files or ():
                i = f.path.find("/database/")
                if i > 0 and "/backups/" in f.path[:i]:
                    out["backup_dir"] = f.path[:i]
        if not out["backup_dir"] and job.client_pid:
            out["backup_dir"] = _dir_of_pid(job, job.client_pid)
        if out["backup_dir"]:
            ctl = read_control(os.path.join(out["backup_dir"], "backup.control"))
            if ctl is not None:
                out["control"] = {k: ctl[k] for k in (
                    "status", "backup-mode", "stream", "compress-alg", "compress-level",
                    "data-bytes", "start-time", "program-version") if k in ctl}
        return out if out["backup_dir"] else None

    # ---- observe -----------------------------------------------------------

    def file_evidence(self, tr: Tracker, snap: Snapshot, running_now: dict[str, int]) -> None:
        st = _state(tr)
        it = tr.items.get(KEY)
        if it is None:
            it = Item(key=KEY, kind="backup", relation=None, name="backup", size=1.0,
                      work=1.0, state="running", started=snap.wall)
            tr.add(it)
        tool = snap.tool or {}
        if tool.get("control"):
            st["control"] = tool["control"]
        if tool.get("backup_dir"):
            st["backup_dir"] = tool["backup_dir"]
            it.name = f"backup {os.path.basename(tool['backup_dir'])}"
        inflight = self._threads(tr, st, snap)
        st["phase"] = _phase(tr, st, snap)
        if it.state == "done" or not st.get("total"):
            return
        if it.work != st["total"]:
            it.work = it.size = float(st["total"])
        done = _order_done(st) + inflight
        it.done = max(it.done, min(0.999 * it.work, done))
        it.bytes_done = int(it.done)
        if st["phase"] == "copy":
            hist = st.setdefault("hist", [])
            hist.append((snap.ts, it.done, it.work))
            while len(hist) > 2 and hist[-1][0] - hist[0][0] > 30.0:
                del hist[0]

    def _threads(self, tr: Tracker, st: dict[str, Any], snap: Snapshot) -> float:
        """The data files in flight (one per busy thread): rows, and the
        bytes read of them so far."""
        sizes: dict[str, int] = st.get("sizes") or {}
        procs: dict[int, WorkerState] = st["rows"]
        if not snap.clients:  # the process is gone: what it was reading stays as it was
            prune_rows(tr, st, procs, set())
            return float(st.get("inflight_bytes") or 0.0)
        active: set[int] = set()
        inflight = 0.0
        reading = [(c, f) for c in snap.clients for f in c.open_files or () if f.path in sizes]
        now = {f.path for _, f in reading}
        for rel in set(st.get("inflight") or ()) - now:
            st.setdefault("finished", {})[rel] = sizes.get(rel, 0)
            st["slots"].pop(rel, None)
        st["inflight"] = sorted(now)
        root = next((c for c in snap.clients if c.pid == tr.job.client_pid), None)
        for c, f in reading:
            rel = f.path
            # a row per file in flight (the threads share one file table,
            # so a file is not tied to a thread): numbered 1..N, a file
            # keeping its number while it is read
            key = _slot(st, rel)
            active.add(key)
            w = procs.setdefault(key, WorkerState(pid=key, client_pid=c.pid))
            w.phase, w.state, w.wait_event = "backup", "active", None
            w.relation = _data_path(rel)
            size = sizes[rel]
            w.progress = min(1.0, f.position / size) if size and f.position else None
            inflight += min(f.position, size)
            w.bytes_done = f.position
            w.bytes_rate.add(snap.ts, f.position)
            w.last_seen = snap.ts
        st["inflight_bytes"] = inflight
        if root is not None:  # the process's CPU, shared by its threads
            prev = st["cpu"].get(root.pid)
            if root.cpu_s is not None:
                st["cpu"][root.pid] = (snap.ts, root.cpu_s)
            process_row(st, WorkerState(pid=root.pid), root, snap, prev, None)
        prune_rows(tr, st, procs, active)
        return inflight

    def done_when_unseen(self, tr: Tracker, it: Item, snap: Snapshot, sessions: set[int]) -> bool:
        return it.key != KEY

    def between_steps(self, tr: Tracker) -> bool:
        return _state(tr).get("phase") != "copy"

    def fraction(self, tr: Tracker) -> float | None:
        it = tr.items.get(KEY)
        if it is None or (not _state(tr).get("total") and it.state != "done"):
            return None
        return it.fraction

    def has_total(self, tr: Tracker) -> bool:
        return bool(_state(tr).get("total"))

    def streams(self, tr: Tracker) -> int | None:
        return None

    def own_eta(self, tr: Tracker) -> tuple[float | None, str | None] | None:
        st = _state(tr)
        phase = st.get("phase")
        if phase == "starting":
            return None, "starting: pg_backup_start (a checkpoint), the file list"
        if phase == "stopping":
            return None, "stopping: pg_backup_stop, the WAL it needs"
        if phase == "validating":
            return None, "validating the backup (its automatic check)"
        if not st.get("total"):
            return None, "no total: the data directory is not on this host"
        return window_eta(tr.items.get(KEY), st.get("hist") or ())

    def job_fields(self, tr: Tracker, workers: list[dict[str, Any]],
                   state: str) -> dict[str, Any]:
        st = _state(tr)
        ctl = st.get("control") or {}
        mode = (ctl.get("backup-mode") or opt(tr.job.command, "-b", "backup-mode") or "").upper()
        names = {"starting": "starting (pg_backup_start, file list)", "copy": "copying files",
                 "stopping": "stopping (pg_backup_stop)", "validating": "validating"}
        basis = ("none: the data directory is not on this host" if not st.get("total") else
                 "the data directory's files, smallest first (pg_probackup's order): those "
                 "smaller than the ones in flight, and how far into those"
                 + ("; inferred: PAGE and PTRACK skip unchanged files"
                    if mode in ("PAGE", "PTRACK") else ""))
        return {
            "phase": names.get(st.get("phase") or "", st.get("phase")) if state == "running"
            else None,
            "progress_basis": basis, "scope": "cluster",
            "backup": {
                "tool": "pg_probackup", "mode": mode or None,
                "instance": opt(tr.job.command, None, "instance"),
                "threads": tr.job.jobs, "files_in_flight": len(st.get("inflight") or ()),
                "status": ctl.get("status"), "stream": ctl.get("stream"),
                "compression": ctl.get("compress-alg") or
                opt(tr.job.command, None, "compress-algorithm"),
                "total_bytes": st.get("total"), "backup_dir": st.get("backup_dir"),
                "program_version": ctl.get("program-version"),
            }}

    def verdict(self, tr: Tracker, snap: Snapshot, settings: dict[str, str]) -> Verdict | None:
        st = _state(tr)
        if st.get("phase") != "copy":
            return None
        cpu = (st.get("cpu_pct") or {}).get(tr.job.client_pid or -1)
        threads = max(1, len(st.get("inflight") or ()) or (tr.job.jobs or 1))
        if cpu is None or cpu / threads < BUSY_CPU:
            return None
        host = getattr(getattr(snap, "host", None), "cpu_percent", None)
        more = ("the host's CPUs are busy too: more threads will not help"
                if host is not None and host >= HOST_CPU else "more -j helps while cores are free")
        return Verdict("client-cpu", f"pg_probackup at {cpu:.0f}% CPU over {threads} "
                       f"thread(s): compression is the limit (--compress-level 1, or no "
                       f"compression); {more}")

    # ---- outcome -----------------------------------------------------------

    def settle_at_end(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> bool | None:
        st = _state(tr)
        it = tr.items.get(KEY)
        status = (st.get("control") or {}).get("status")
        if st.get("backup_dir"):  # the last word: its control file now
            ctl = read_control(os.path.join(st["backup_dir"], "backup.control"))
            status = (ctl or {}).get("status", status)
            st.setdefault("control", {})["status"] = status
        if it is not None and it.state != "done" and status in DONE_STATES:
            tr.finish(it, snap.wall)
            it.bytes_done = int(it.work) if st.get("total") else it.bytes_done
        return None

    def cut_short(self, tr: Tracker, snap: Snapshot) -> str | None:
        st = _state(tr)
        it = tr.items.get(KEY)
        if it is None or it.state == "done":
            return None
        status = (st.get("control") or {}).get("status")
        if status is None and not st.get("backup_dir"):
            return None  # nothing seen of its catalog: leftover_verdict
        why = {"ERROR": "pg_probackup set its status to ERROR",
               "RUNNING": "its backup.control still says RUNNING (the process was killed)"}
        return f"the backup stopped {_how_far(tr, st)}: {why.get(status or '', status)}"

    def leftover_verdict(self, tr: Tracker, left: list[Item]) -> tuple[str, str]:
        return "ended", ("pg_probackup's process is gone; its catalog is not readable here, so "
                         "whether the backup completed cannot be seen (`pg_probackup show` says)")

    def exit_reason(self, code: int) -> str:
        return f"pg_probackup exit code {code}"


def _state(tr: Tracker) -> dict[str, Any]:
    st: dict[str, Any] = tr.kind_state.setdefault("probackup", {"rows": {}, "cpu": {},
                                                                "slots": {}})
    return st


def _ours(b: Backend) -> bool:
    """A session of pg_probackup: its WAL stream (a walsender named after the
    program) or the session that runs its pg_backup_start label."""
    app = b.application_name or ""
    return app.startswith(PROGRAM) or LABEL_MARK in (b.query or "")


def _dir_of_pid(job: Job, pid: int) -> str | None:
    """The backup (under -B / BACKUP_PATH and --instance) whose backup.pid
    holds this process's pid."""
    path = opt(job.command, "-B", "backup-path")
    instance = opt(job.command, None, "instance")
    if not path or not instance:
        return None
    root = os.path.join(path, "backups", instance)
    try:
        names = sorted(os.listdir(root), reverse=True)  # newest id first (base36 time)
    except OSError:
        return None
    for name in names[:20]:
        try:
            with open(os.path.join(root, name, "backup.pid"), encoding="utf-8") as f:
                if f.read().strip().split()[0] == str(pid):
                    return os.path.join(root, name)
        except (OSError, IndexError):
            continue
    return None


def _slot(st: dict[str, Any], path: str) -> int:
    """The row number of a file in flight: its own while it is read, else
    the lowest one free."""
    slots: dict[str, int] = st["slots"]
    if path not in slots:
        used = set(slots.values())
        slots[path] = next(i for i in range(1, len(used) + 2) if i not in used)
    return slots[path]


def _data_path(path: str) -> str:
    """A data file's path as the cluster names it (base/16384/16397)."""
    for marker in ("/base/", "/global/", "/pg_tblspc/"):
        i = path.find(marker)
        if i >= 0:
            return path[i + 1:]
    return os.path.basename(path)


def _order_done(st: dict[str, Any]) -> float:
    """Smallest first: every file smaller than the smallest in flight is
    done, and so are the ones seen in flight and gone since."""
    sizes: dict[str, int] = st.get("sizes") or {}
    inflight = st.get("inflight") or ()
    finished: dict[str, int] = st.get("finished") or {}
    if not inflight:
        return float(sum(finished.values()))
    low = min(sizes.get(r, 0) for r in inflight)
    below = sum(s for r, s in sizes.items() if s < low and r not in finished)
    return float(below + sum(finished.values()))


def _phase(tr: Tracker, st: dict[str, Any], snap: Snapshot) -> str:
    if not snap.clients and st.get("phase"):
        return str(st["phase"])  # the process is gone: the phase it died in
    status = (st.get("control") or {}).get("status")
    if status in DONE_STATES:
        return "validating"
    if st.get("inflight"):
        st["copied"] = True
        return "copy"
    query = " ".join((b.query or "") for b in tr.members(snap)).lower()
    if "backup_stop" in query or "stop_backup" in query or st.get("copied"):
        return "stopping"
    return "starting"


def _how_far(tr: Tracker, st: dict[str, Any]) -> str:
    return how_far(tr.items.get(KEY), bool(st.get("total")), st.get("phase"))


