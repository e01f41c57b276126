"""pg_probackup backup (`pg_probackup backup -B DIR --instance NAME -b
FULL|DELTA|PAGE|PTRACK -j N [--stream]`), as a real pg_probackup 2.5 runs
it (docs/backups.md says how it was watched and recorded):

- one process. `-j N` makes N threads of it, not processes: they exist
  while the files are copied, and N new ones while the backup is validated;
  with `--stream` one more thread receives the WAL from the start of the
  backup to its stop. Its threads share one file table, so a file is not
  tied to a thread: the files in flight are those the process has open.
- its session: one connection with no application_name of its own (found
  through the process's sockets, idle most of the run), which runs
  `pg_backup_start($1, $2)` (the label is a parameter: the query text never
  names pg_probackup) and `pg_backup_stop`; with `--stream` a walsender
  named after the program.
- its steps, in order: start (pg_backup_start with a fast checkpoint unless
  --smooth-checkpoint, then the WAL segment it starts in, streamed or
  archived); the copy (the file list sorted by size, smallest first, each
  thread taking the next file); the stop (pg_control, pg_backup_stop, then
  the stop LSN's WAL: streamed, or archived by archive-push); the sync
  (the main thread fsyncs every file of the backup, smallest first, unless
  --no-sync); the validation (status DONE; N threads read every file of the
  backup back, smallest first, unless --no-validate); then status OK.
- its catalog: `BACKUP_PATH/backups/INSTANCE/<ID>/backup.control`, status
  RUNNING until DONE and OK, or ERROR (an error, SIGINT, SIGTERM), or
  CORRUPT (its validation found a damaged file); a process killed leaves
  RUNNING. `pgdata-bytes` (its total) appears when the copy starts,
  `stop-lsn` once the stop is over, just before the sync.

So progress is read three times over the same ordered list: every file
smaller than the smallest in flight is done, so are the ones seen in flight
and gone since, plus how far into those in flight (their read position). The
copy is the job's progress; the sync and the validation have their own, and
the ETA adds them (docs/backups.md).
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import json
import os
import re
import stat
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import units as fmt
from ..analyze.bottleneck import BUSY_CPU, HOST_CPU, Verdict
from ..analyze.items import Item, WorkerState
from ..cmdline import ClientArgs
from ..readers.procs import threads_of
from ..snapshot import Backend, ClientProc, Snapshot
from . import walwait
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
from .pgbackrest import how_far, process_row, prune_rows

if TYPE_CHECKING:
    from ..analyze.progress import Tracker
    from ..readers.procs import ProcInfo

PROGRAM = "pg_probackup"
# packages name the binary after the server's major version
PROGRAMS = (PROGRAM, *(f"{PROGRAM}-{v}" for v in range(9, 20)))
KEY = "pg_probackup"
INFERRED = ("inferred: user and client address of pg_probackup's WAL stream (its process is "
            "not on this host)")
DONE_STATES = ("DONE", "OK")
# what backup.control says that pgparmon shows (never primary_conninfo)
CONTROL_KEYS = ("status", "backup-mode", "stream", "compress-alg", "compress-level",
                "start-time", "end-time", "program-version", "pgdata-bytes", "data-bytes",
                "uncompressed-bytes", "wal-bytes", "stop-lsn")
# its steps in the order they run; the job's phase never goes back
PHASES = ("starting", "copy", "stopping", "sync", "validate")
# the worker row's phase in each step that reads or writes files
ROW_PHASE = {"copy": "backup", "sync": "sync", "validate": "validate"}
# files of the backup's database/ directory that are no copy of a data file
_OWN_FILES = ("backup_label", "tablespace_map", "database_map")
# the data directory's contents pg_probackup leaves out (its dir.c)
_SKIP_DIRS = {"pg_wal", "pg_xlog", "pg_stat_tmp", "pg_replslot", "pg_dynshmem", "pg_notify",
              "pg_serial", "pg_snapshots", "pg_subtrans"}
_SKIP_FILES = {"postgresql.auto.conf.tmp", "current_logfiles.tmp", "recovery.conf",
               "postmaster.pid", "postmaster.opts", "probackup_recovery.conf",
               "recovery.signal", "standby.signal", "backup_label", "tablespace_map"}
WINDOW_S = 30.0  # the rates of a step: its last 30 s
# a file's bytes written in backup_content.control
_WRITTEN = re.compile(r'"size":"(-?\d+)"')
# its stop's statement (it switches out of the stop LSN's segment)
_BACKUP_STOP = re.compile(r"pg_(?:backup_stop|stop_backup)\s*\(", re.IGNORECASE)
SMOOTH_WAY_OUT = "leave out --smooth-checkpoint (pg_probackup asks for a fast one by default)"
TIMES_OUT = "the backup fails when its archive_timeout (300 s unless set) runs out"
# its WAL stream sends a status message every 10 s (standby_message_timeout):
# with no WAL arriving, that is when it sees that the stop LSN was set
STATUS_INTERVAL_S = 10.0
# with no earlier validation of the instance to time: the validation of a
# byte written taken as half the copy's time for a byte read. The copy reads
# each byte and writes it (compressing it: the slow half of zlib), the
# validation only reads it back (and decompresses: the fast half)
VALIDATE_PER_COPY = 0.5
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


def data_files(pgdata: str, listed: list[str] | None = None
               ) -> tuple[dict[str, int], dict[str, str]] | None:
    """What pg_probackup copies from a data directory: the files (paths
    relative to it, tablespaces as `pg_tblspc/OID/...`) and their sizes, and
    where each of those trees really is (a tablespace's link resolved: the
    process's open files name the real path). `listed`: the files its own
    list names (those are stat'ed), else the directory is walked with its
    exclusions. None: not readable."""
    if not os.path.isdir(pgdata):
        return None
    roots = {"": os.path.realpath(pgdata)}
    tblspc = os.path.join(pgdata, "pg_tblspc")
    try:
        for oid in os.listdir(tblspc):
            roots[f"pg_tblspc/{oid}"] = os.path.realpath(os.path.join(tblspc, oid))
    except OSError:
        pass
    sizes: dict[str, int] = {}
    if listed is not None:
        for rel in listed:
            try:
                sizes[rel] = os.stat(os.path.join(pgdata, rel)).st_size
            except OSError:
                sizes[rel] = 0  # gone since it was listed: nothing to copy
        return sizes, roots
    for rel_root, real in roots.items():
        for root, dirs, files in os.walk(real):
            if root == real and not rel_root:
                dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and d != "pg_tblspc"]
            dirs[:] = [d for d in dirs if d != "pgsql_tmp"]
            sub = os.path.relpath(root, real)
            for name in files:
                if name in _SKIP_FILES or name == "pg_internal.init" or (
                        name[:1] == "t" and name[1:2].isdigit()):  # temporary relations
                    continue
                rel = os.path.normpath(os.path.join(rel_root, sub, name))
                try:
                    sizes[rel] = os.stat(os.path.join(root, name)).st_size
                except OSError:
                    continue
    return sizes, roots


def listed_files(backup_dir: str) -> list[str] | None:
    """The data directory's regular files in the order pg_probackup copies,
    syncs and validates them: its backup_content.control, written in that
    order (by size, equal sizes in the order its quicksort leaves them) as
    the copy starts, and again every minute and at the end. None: not
    written yet, or not readable."""
    out: list[str] = []
    try:
        with open(os.path.join(backup_dir, "backup_content.control"), encoding="utf-8",
                  errors="replace") as f:
            for line in f:
                try:
                    d = json.loads(line)
                    mode, ext = int(d.get("mode", 0)), str(d.get("external_dir_num", "0"))
                except (ValueError, TypeError, AttributeError):
                    continue
                if ext == "0" and stat.S_ISREG(mode) and d.get("path"):
                    out.append(str(d["path"]))
    except OSError:
        return None
    return out or None


def validations(backup_dir: str, keep: int = 5) -> list[dict[str, Any]]:
    """How long the instance's earlier backups took to sync and to
    validate, newest first. Their backup.control's end-time is written when
    the sync is over and the validation starts (status DONE), and the file
    is written again when the validation ends (status OK): its modification
    time ends it. Their backup_content.control is written last just before
    the sync: its modification time starts it; the sync fsyncs each file it
    lists with bytes written. Backups whose control file was written again
    later (a `validate`, a merge: more than an hour after) are left out."""
    root = os.path.dirname(backup_dir.rstrip("/"))
    me = os.path.basename(backup_dir.rstrip("/"))
    try:
        # backup IDs are their start time in base 36: newest last
        names = sorted((n for n in os.listdir(root) if n != me and len(n) == len(me)),
                       reverse=True)
    except OSError:
        return []
    out: list[dict[str, Any]] = []
    for name in names[:20]:
        path = os.path.join(root, name, "backup.control")
        ctl = read_control(path)
        if not ctl or ctl.get("status") != "OK" or not ctl.get("end-time"):
            continue
        try:
            end = datetime.fromisoformat(ctl["end-time"]).timestamp()
            took = os.stat(path).st_mtime - end
            data = int(ctl.get("data-bytes") or 0)
        except (OSError, ValueError):
            continue
        if 0 <= took <= 3600 and data > 0:
            out.append({"id": name, "compress": ctl.get("compress-alg") or "none",
                        "data_bytes": data, "validate_s": round(took, 2),
                        "mode": ctl.get("backup-mode"), **_sync_of(root, name, end)})
        if len(out) >= keep:
            break
    return out


def _sync_of(root: str, name: str, end: float) -> dict[str, Any]:
    """An earlier backup's sync: its seconds (from its file list's last
    write to its end-time, whole seconds) and how many files it synced."""
    path = os.path.join(root, name, "backup_content.control")
    try:
        began = os.stat(path).st_mtime
        with open(path, encoding="utf-8", errors="replace") as f:
            files = sum(1 for v in _WRITTEN.findall(f.read()) if v not in ("0", "-1"))
    except OSError:
        return {}
    took = end - began
    if not -1.0 <= took <= 3600 or not files:
        return {}
    return {"sync_s": round(max(0.0, took), 2), "synced_files": files}


class PgProbackup(Driver):
    kind = "pg_probackup"
    programs = PROGRAMS
    data_flow = "out"
    plans_work = True  # the data directory's files and sizes, once
    needs_plan = False
    fixed_workers = False
    whole_cluster = True
    all_databases = True  # its WAL stream is a walsender, with no database
    idle_sessions = True  # its session: no application_name, idle between start and stop

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

    def plan_request(self, tr: Tracker) -> dict[str, Any] | None:
        """Once its catalog is known (its own file list is read from there),
        or once it copies without one this user can read."""
        st = _state(tr)
        if st.get("backup_dir"):
            return {"backup_dir": st["backup_dir"], "wait": st.get("phase") == "starting"}
        if st.get("phase") not in (None, "starting"):
            return {}
        return None

    def read_plan(self, src: PlanReader, req: dict[str, Any]) -> PlanInputs | None:
        """The files it copies, in its order (its backup_content.control,
        written as the copy starts) with their sizes; without that list, the
        data directory's files in size order. Nothing when the server is not
        on this host."""
        pgdata = src.facts.data_directory if src.local else None
        listed = listed_files(req["backup_dir"]) if req.get("backup_dir") else None
        if listed is None and req.get("wait"):
            return None  # its list is written as the copy starts: ask again
        found = data_files(pgdata, listed) if pgdata else None
        if found is None:
            return PlanInputs(file_sizes={})
        sizes, roots = found
        return PlanInputs(file_sizes={k: float(v) for k, v in sizes.items()}, locations=roots,
                          file_order=listed)

    def plan(self, tr: Tracker, inputs: PlanInputs) -> bool:
        st = _state(tr)
        files = {k: int(v) for k, v in (inputs.file_sizes or {}).items()}
        if files:
            st["sizes"] = files
            st["total"] = sum(files.values())
            # its own order when its list was read (exact: the threads take
            # the files in it); else by size, equal sizes by path (where its
            # quicksort leaves them cannot be known: see _frontier)
            st["exact"] = bool(inputs.file_order)
            order = [r for r in inputs.file_order or () if r in files] or \
                sorted(files, key=lambda r: (files[r], r))
            prefix = [0]
            for r in order:
                prefix.append(prefix[-1] + files[r])
            st["index"] = {r: i for i, r in enumerate(order)}
            st["prefix"] = prefix
            st["sizes_in_order"] = [files[r] for r in order]
            st["empty"] = sum(1 for v in files.values() if v == 0)  # never synced
            st["files"] = len(order) - st["empty"]
            # the longest location first: a tablespace inside the data directory
            st["roots"] = sorted((inputs.locations or {}).items(), key=lambda kv: -len(kv[1]))
        tr.planned = True
        return True

    # ---- the tool's own status ------------------------------------------------

    def read_status(self, job: Job, clients: tuple[ClientProc, ...],
                    prev: dict[str, Any] | None) -> dict[str, Any] | None:
        """The backup's directory in its catalog (from the files the process
        has open, else `-B` / `--instance` and the backup whose backup.pid is
        this process), its backup.control, and the process's threads, read
        each sample."""
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
                out["control"] = {k: ctl[k] for k in CONTROL_KEYS if k in ctl}
        if out["backup_dir"]:  # its catalog's earlier backups, read once
            out["history"] = prev["history"] if "history" in prev \
                else validations(out["backup_dir"])
        if job.client_pid and any(c.pid == job.client_pid for c in clients):
            threads = threads_of(job.client_pid)
            if threads is not None:
                out["threads"] = threads
        return out if out["backup_dir"] or out.get("threads") else None

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
        if "history" in tool:
            st["history"] = tool["history"]
        if tool.get("backup_dir"):
            st["backup_dir"] = tool["backup_dir"]
            it.name = f"backup {os.path.basename(tool['backup_dir'])}"
        st["now"] = snap.ts
        walwait.watch(st).observe(snap)
        _stream_clock(tr, st, snap)
        root = next((c for c in snap.clients if c.pid == tr.job.client_pid), None)
        if root is not None:  # the process's CPU (when its threads cannot be read)
            prev = st["cpu"].get(root.pid)
            if root.cpu_s is not None:
                st["cpu"][root.pid] = (snap.ts, root.cpu_s)
            process_row(st, WorkerState(pid=root.pid), root, snap, prev, None)
            _thread_cpu(st, tool.get("threads"), snap.ts, _stream(tr, st)
                        and _control(st).get("status") not in DONE_STATES
                        and not _stopped(_control(st)))
        reading = _data_reads(st, snap)
        st["phase"] = phase = _phase(tr, st, snap, bool(reading))
        st["wait"] = _waits(tr, st, snap)
        if phase != "validate":
            st["validation_ahead"] = _validation_ahead(tr, st)
        else:
            st.setdefault("validate_began", snap.ts)
        if phase == "copy":
            st["copy_seen"] = snap.ts
        elif phase == "stopping" and "stop_began" not in st:
            # between the last sample that saw it copy and this one
            st["stop_began"] = (snap.ts + st.get("copy_seen", snap.ts)) / 2
        if _gone(snap):  # the process is gone: rows and steps stay as they were
            prune_rows(tr, st, st["rows"], set())
            return
        step = phase if phase in ROW_PHASE else None
        if step == "copy":
            inflight = reading
        elif step is not None:
            inflight = _backup_files(st, snap, "r" if step == "validate" else "w")
        else:
            inflight = {}
        if step == "copy" and root is not None:
            _io_ratio(st, root)
        self._rows(tr, st, step, inflight, snap)
        if step == "sync" and st.get("total"):
            _advance_sync(st, inflight, snap.ts)
        elif step is not None and st.get("total"):
            _advance(st, step, inflight, snap.ts)
        if not st.get("total") or it.state == "done":
            return
        if it.work != st["total"]:
            it.work = it.size = float(st["total"])
        copied = _pass(st, "copy")["done"]
        if phase in ("stopping", "sync", "validate"):
            copied = it.work  # the copy is over (pg_probackup copied pg_control last)
        it.done = max(it.done, min(0.999 * it.work, copied))
        it.bytes_done = int(it.done)

    def _rows(self, tr: Tracker, st: dict[str, Any], step: str | None,
              inflight: dict[str, tuple[int, float]], snap: Snapshot) -> None:
        """A row per file in flight (the threads share one file table: a
        file is not tied to a thread), numbered 1..N, a file keeping its
        number while it is read or written."""
        procs: dict[int, WorkerState] = st["rows"]
        if st.get("rows_step") != step:
            st["slots"] = {}
            procs.clear()
            st["rows_step"] = step
        active: set[int] = set()
        for rel in list(st["slots"]):
            if rel not in inflight:
                del st["slots"][rel]
        for rel, (pos, frac) in sorted(inflight.items(), key=lambda kv: _slot_of(st, kv[0])):
            key = _slot(st, rel)
            active.add(key)
            w = procs.setdefault(key, WorkerState(pid=key, client_pid=tr.job.client_pid))
            if w.relation != rel:  # a new file on this row: its counter starts again
                w.bytes_rate = type(w.bytes_rate)()
            w.phase, w.state, w.wait_event = ROW_PHASE[step or "copy"], "active", None
            w.item = KEY  # the backup: a span of each row's step on the timeline
            w.relation = rel
            w.progress = frac if step != "sync" else None
            w.bytes_done = pos
            w.bytes_rate.add(snap.ts, pos)
            w.last_seen = snap.ts
        prune_rows(tr, st, procs, active)

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
        """The rest of the step it is in at that step's rate (its last 30 s;
        the copy's and the validation's shared out to its threads), plus
        what is still to come: the stop's wait for its WAL stream (--stream:
        until the stream's next status message) and the validation
        (_validation_ahead). The sync is counted once it runs."""
        st = _state(tr)
        phase = st.get("phase")
        stream = _stream(tr, st)
        if phase == "starting":
            left = walwait.wait_eta(st.get("wait"))
            if left is not None:
                return left, walwait.WAIT_ONLY
            return None, walwait.wait_reason(st.get("wait")) or (
                f"starting: pg_backup_start (a checkpoint), then the WAL segment the backup "
                f"starts in ({'streamed' if stream else 'archived'})")
        if not st.get("total"):
            return None, "no total: the data directory is not on this host"
        later = _validation_ahead(tr, st)
        now = st.get("now") or 0.0
        if phase == "copy":
            left, why = _step_eta(st, "copy", _own_cores(st, tr.job.jobs))
            st["stop_ahead"] = None
            if left is not None and stream:
                left += _stream_wait(st, now + left) + 1.0
            elif left is not None:  # its stop waits for the archiver: its backlog now
                st["stop_ahead"] = walwait.watch(st).stop_ahead(left)
                left += st["stop_ahead"] or 0.0
        elif phase == "sync":
            left, why = _step_eta(st, "sync")
            if left is None:  # its first second: the validation to come only
                left, why = 0.0, None
        elif phase == "validate":
            if _control(st).get("status") == "OK":
                return 0.0, None
            left, why = _step_eta(st, "validate", _own_cores(st, tr.job.jobs))
            ahead = st.get("validation_ahead")
            if left is None and ahead is not None:  # its first second: as foreseen
                return max(0.0, ahead - (now - st.get("validate_began", now))), None
            return left, why
        else:  # stopping: pg_backup_stop, then the WAL up to its stop LSN
            began = st.get("stop_began", now)
            wait = _stream_wait(st, began) if stream else 0.0
            left, why = max(0.0, began + 1.0 + wait - now), None
            archived = (st.get("wait") or {}).get("left_s")
            if not stream and archived is not None:  # the archiver's backlog at its pace
                left = archived
        if left is None:
            return None, why
        if phase in ("copy", "stopping"):
            left += _sync_ahead(tr, st) or 0.0
        # the validation that cannot be estimated (the copy seen too briefly)
        # is left out: eta_basis says so
        return left + (later or 0.0), None

    def job_fields(self, tr: Tracker, workers: list[dict[str, Any]],
                   state: str) -> dict[str, Any]:
        st = _state(tr)
        ctl = _control(st)
        argv = tr.job.command
        mode = (ctl.get("backup-mode") or opt(argv, "-b", "backup-mode") or "").upper()
        stream = _stream(tr, st)
        wal = "streamed" if stream else "archived"
        phase = st.get("phase")
        step = _pass(st, phase) if phase in ("sync", "validate") and st.get("total") else None
        frac = min(1.0, step["done"] / (_step_total(st, phase) or 1.0)) if step else None
        pct = f" {100.0 * frac:.0f}%" if frac is not None else ""
        names = {"starting": f"starting (pg_backup_start, WAL {wal})", "copy": "copying files",
                 "stopping": f"stopping (pg_backup_stop, WAL {wal})",
                 "sync": f"syncing to disk{pct}", "validate": f"validating{pct}"}
        order = ("in pg_probackup's order (its backup_content.control: by size): those "
                 "before the first in flight" if st.get("exact") else
                 "by size (its own list not readable): those smaller than the smallest in "
                 "flight")
        basis = ("none: the data directory is not on this host" if not st.get("total") else
                 f"the data directory's files {order}, those seen done, and how far into "
                 "those in flight"
                 + ("; inferred: PAGE and PTRACK skip unchanged files"
                    if mode in ("PAGE", "PTRACK") else ""))
        threads = st.get("threads") or []
        busy = st.get("worker_cpu") or {}
        return {
            "phase": names.get(phase or "", phase) if state == "running" else None,
            "progress_basis": basis, "scope": "cluster",
            "backup": {
                "tool": "pg_probackup", "mode": mode or None,
                "instance": opt(argv, None, "instance"),
                "threads": tr.job.jobs, "threads_alive": len(threads) or None,
                "worker_threads_cpu_percent": [round(v, 1) for _, v in sorted(busy.items())],
                "files_in_flight": len(_pass(st, phase)["inflight"])
                if phase in ROW_PHASE else 0,
                "step": phase,
                "step_progress": round(frac, 4) if frac is not None else None,
                "status": ctl.get("status"), "stream": stream,
                "compression": _compression(tr, st),
                "total_bytes": st.get("total"),
                "pgdata_bytes": _int(ctl.get("pgdata-bytes")) or None,
                "data_bytes": _int(ctl.get("data-bytes")),
                "wal_bytes": _int(ctl.get("wal-bytes")),
                "backup_dir": st.get("backup_dir"),
                "backup_id": os.path.basename(st["backup_dir"]) if st.get("backup_dir")
                else None,
                "program_version": ctl.get("program-version"),
                "eta_basis": _eta_basis(tr, st),
                "wait": st.get("wait") if state == "running" else None,
            }}

    def verdict(self, tr: Tracker, snap: Snapshot, settings: dict[str, str]) -> Verdict | None:
        st = _state(tr)
        phase = st.get("phase")
        it = tr.items.get(KEY)
        if it is None or it.state == "done" or _gone(snap):
            return None
        stream = _stream(tr, st)
        if phase == "starting":
            wait = st.get("wait") or {}
            ck = wait.get("checkpoint")
            if ck is not None:
                text = walwait.checkpoint_text(ck, SMOOTH_WAY_OUT, "pg_probackup")
                arch = wait.get("archiving")
                if arch is not None and arch["segments"]:
                    text += "; then it waits for the archiver: " + walwait.archiving_text(
                        arch, "the segment the backup starts in", TIMES_OUT)
                return Verdict("checkpoint", text)
            if _waits_archived(tr, st):
                return _archiving(st, "the segment the backup starts in")
            return None
        if phase == "stopping":
            if not stream:
                return _archiving(st, "the segment of the backup's stop LSN")
            return Verdict("wal", "waiting for its WAL stream to bring the backup's stop LSN: "
                           "pg_probackup checks as WAL or a status message arrives (up to "
                           "about 10 s on an idle server)")
        if phase == "sync":
            return Verdict("disk-write", "syncing: pg_probackup fsyncs each file of the backup "
                           "in turn, and the disk writes out what the copy left in the page "
                           "cache (--no-sync skips it, at the risk of a backup lost in a crash)")
        if phase not in ("copy", "validate"):
            return None
        cpus = list((st.get("worker_cpu") or {}).values())
        threads = len(cpus)
        if cpus:
            cpu = sum(cpus) / threads
        else:  # no thread readings: the process's CPU over the files in flight
            total = (st.get("cpu_pct") or {}).get(tr.job.client_pid or -1)
            threads = max(1, len(_pass(st, phase)["inflight"]) or (tr.job.jobs or 1))
            cpu = total / threads if total is not None else None
        if cpu is None or cpu < BUSY_CPU:
            return None
        host = getattr(getattr(snap, "host", None), "cpu_percent", None)
        more = ("the host's CPUs are busy too: more threads will not help"
                if host is not None and host >= HOST_CPU else "more -j helps while cores are free")
        comp = _compression(tr, st)
        if phase == "validate":
            what = ("reading the backup back and checking each page (CRC"
                    + (f", {comp} decompression" if comp else "") + ")")
            return Verdict("client-cpu", f"pg_probackup's {threads} validation thread(s) at "
                           f"{cpu:.0f}% of a core each: {what}; {more}")
        what = (f"compression ({comp}) is the limit: a lower --compress-level, or none"
                if comp else "reading, checking and copying pages is the limit (no compression)")
        return Verdict("client-cpu", f"pg_probackup's {threads} thread(s) at {cpu:.0f}% of a "
                       f"core each: {what}; {more}")

    # ---- outcome -----------------------------------------------------------

    def settle_at_end(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> bool | None:
        st = _state(tr)
        it = tr.items.get(KEY)
        status = _control(st).get("status")
        if st.get("backup_dir"):  # the last word: its control file now
            ctl = read_control(os.path.join(st["backup_dir"], "backup.control"))
            status = (ctl or {}).get("status", status)
            st.setdefault("control", {})["status"] = status
        if it is None or it.state == "done":
            return None
        if status == "OK" or (status == "DONE" and not _validates(tr)):
            tr.finish(it, snap.wall)
            it.bytes_done = int(it.work) if st.get("total") else it.bytes_done
        return None

    def leftovers(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> list[Item]:
        it = tr.items.get(KEY)
        return [it] if it is not None and it.state != "done" else []

    def cut_short(self, tr: Tracker, snap: Snapshot) -> str | None:
        st = _state(tr)
        it = tr.items.get(KEY)
        if it is None or it.state == "done":
            return None
        status = _control(st).get("status")
        if status is None and not st.get("backup_dir"):
            return None  # nothing seen of its catalog: leftover_verdict
        if status == "DONE":
            return None  # copied and synced: leftover_verdict says what is missing
        why = {"ERROR": "pg_probackup set its status to ERROR",
               "CORRUPT": "its validation found a damaged file: status CORRUPT",
               "RUNNING": "its backup.control still says RUNNING (the process was killed)"}
        return f"the backup stopped {_how_far(tr, st)}: {why.get(status or '', status)}"

    def leftover_verdict(self, tr: Tracker, left: list[Item]) -> tuple[str, str]:
        st = _state(tr)
        if _control(st).get("status") == "DONE":
            bid = os.path.basename(st.get("backup_dir") or "") or "ID"
            return "ended", ("pg_probackup ended during the backup's validation: the backup "
                             "is copied and synced (status DONE) but not validated "
                             f"(`pg_probackup validate -i {bid}`)")
        return "ended", ("pg_probackup's process is gone; its catalog is not readable here, so "
                         "whether the backup completed cannot be seen (`pg_probackup show` says)")

    def exit_reason(self, code: int) -> str:
        return f"pg_probackup exit code {code}"


# ---- state ---------------------------------------------------------------------

def _state(tr: Tracker) -> dict[str, Any]:
    st: dict[str, Any] = tr.kind_state.setdefault("probackup", {"rows": {}, "cpu": {},
                                                                "slots": {}, "passes": {}})
    return st


def _control(st: dict[str, Any]) -> dict[str, str]:
    return st.get("control") or {}


def _pass(st: dict[str, Any], name: str | None) -> dict[str, Any]:
    """One step's reading of the ordered file list: files in flight, those
    finished since, the frontier (the smallest in flight so far), bytes done
    and their history."""
    p: dict[str, Any] = st["passes"].setdefault(name or "", {
        "inflight": [], "finished": {}, "low": 0, "done": 0.0, "hist": []})
    return p


def _gone(snap: Snapshot) -> bool:
    """Its process has ended (killed, it is a zombie until its parent
    reaps it: no files, no threads but one)."""
    return snap.root_alive is False or not snap.clients or all(
        c.status == "zombie" for c in snap.clients)


def _stopped(ctl: dict[str, str]) -> bool:
    """Whether the stop is over: backup.control holds the stop LSN (0/0
    until then)."""
    return ctl.get("stop-lsn") not in (None, "", "0/0")


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def _ours(b: Backend) -> bool:
    """A session of pg_probackup seen from anywhere: its WAL stream (a
    walsender named after the program). Its other session names nothing
    (no application_name, a parameterised pg_backup_start label)."""
    return (b.application_name or "").startswith(PROGRAM)


def _stream(tr: Tracker, st: dict[str, Any]) -> bool:
    s = _control(st).get("stream")
    return s == "true" if s is not None else "--stream" in tr.job.command


def _validates(tr: Tracker) -> bool:
    return "--no-validate" not in tr.job.command


def _compression(tr: Tracker, st: dict[str, Any]) -> str | None:
    """`zlib level 1`, or None without compression."""
    ctl = _control(st)
    alg = ctl.get("compress-alg") or opt(tr.job.command, None, "compress-algorithm")
    if not alg or alg == "none":
        return None
    level = ctl.get("compress-level") or opt(tr.job.command, None, "compress-level")
    return f"{alg} level {level}" if level else alg


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


# ---- what the process has open -------------------------------------------------

def _rel_of(st: dict[str, Any], path: str) -> str | None:
    """A data file's path relative to the data directory (a tablespace's as
    pg_tblspc/OID/...), from the real path the process has open."""
    for rel_root, real in st.get("roots") or ():
        if path.startswith(real + "/"):
            rest = path[len(real) + 1:]
            return os.path.join(rel_root, rest) if rel_root else rest
    return None


def _data_reads(st: dict[str, Any], snap: Snapshot) -> dict[str, tuple[int, float]]:
    """The data directory's files the process reads now: relative path ->
    (read position, how far into the file)."""
    sizes: dict[str, int] = st.get("sizes") or {}
    out: dict[str, tuple[int, float]] = {}
    for c in snap.clients:
        for f in c.open_files or ():
            if f.mode != "r":
                continue
            rel = _rel_of(st, f.path)
            if rel is not None and rel in sizes:
                size = sizes[rel]
                out[rel] = (f.position, min(1.0, f.position / size) if size else 1.0)
    return out


def _backup_files(st: dict[str, Any], snap: Snapshot, mode: str) -> dict[str, tuple[int, float]]:
    """The backup's own files the process has open (`w`: the sync, `r`: the
    validation), by the data file each one copies; how far into it: its
    position of the backup file's size."""
    bdir = st.get("backup_dir")
    sizes: dict[str, int] = st.get("sizes") or {}
    if not bdir:
        return {}
    prefix = os.path.join(bdir, "database") + "/"
    now = {f.path: f.size for f in snap.files}
    out: dict[str, tuple[int, float]] = {}
    for c in snap.clients:
        for f in c.open_files or ():
            if not f.path.startswith(prefix) or not f.mode.startswith(mode):
                continue
            rel = f.path[len(prefix):]
            if rel in _OWN_FILES or rel.startswith("pg_wal/") or rel not in sizes:
                continue
            size = now.get(f.path) or sizes[rel]
            out[rel] = (f.position, min(1.0, f.position / size) if size else 1.0)
    return out


# ---- steps ---------------------------------------------------------------------------

def _phase(tr: Tracker, st: dict[str, Any], snap: Snapshot, reading: bool) -> str:
    """The step it is in: from backup.control (pgdata-bytes once the copy
    starts, stop-lsn once the stop is over, status DONE during the
    validation), the data files it reads and its threads. Never back to an
    earlier step."""
    prev = st.get("phase")
    if _gone(snap) and prev:
        return str(prev)  # the process is gone: the step it ended in
    ctl = _control(st)
    status = ctl.get("status")
    if status in DONE_STATES:
        now = "validate"
    elif _stopped(ctl) and status == "RUNNING":
        now = "sync"
    elif reading or st.get("workers_alive"):
        now = "copy"
    elif st.get("copied") or prev in ("copy", "stopping"):
        now = "stopping"
    else:
        now = "starting"
    if now == "copy":
        st["copied"] = True
    if prev in PHASES and PHASES.index(now) < PHASES.index(str(prev)):
        return str(prev)
    return now


def _advance(st: dict[str, Any], step: str, inflight: dict[str, tuple[int, float]],
             ts: float) -> None:
    """Bytes done in one step over the ordered file list: every file before
    the first one in flight, those seen in flight and gone since, and how
    far into those in flight."""
    sizes: dict[str, int] = st["sizes"]
    index: dict[str, int] = st["index"]
    p = _pass(st, step)
    fin: dict[str, int] = p["finished"]
    for rel in set(p["inflight"]) - set(inflight):
        fin[rel] = sizes.get(rel, 0)
    p["inflight"] = sorted(inflight)
    if inflight:
        p["low"] = max(p["low"], _frontier(st, inflight))
    low = p["low"]
    for rel in [r for r in fin if index[r] < low]:
        del fin[rel]  # counted with everything before the frontier
    part = sum(frac * sizes[r] for r, (_, frac) in inflight.items() if r not in fin)
    done = min(float(st["total"]), st["prefix"][low] + sum(fin.values()) + part)
    _count(st, p, done, ts)
    p["left"] = {r: (1.0 - frac) * sizes[r] for r, (_, frac) in inflight.items()}
    busy = p.setdefault("busy", [])
    busy.append((ts, len(inflight)))
    while len(busy) > 2 and ts - busy[0][0] > WINDOW_S:
        del busy[0]
    if step == "copy":
        st.setdefault("copy_first", (ts, p["done"]))
        st["copy_last"] = (ts, p["done"])


def _frontier(st: dict[str, Any], inflight: dict[str, tuple[int, float]]) -> int:
    """How many files of the ordered list are behind the work now: those
    before the first file in flight (the threads take the files in their
    order). Without its own list, the order of equal sizes is its
    quicksort's: only the files smaller than the smallest in flight."""
    first = min(st["index"][r] for r in inflight)
    if st.get("exact"):
        return first
    return bisect.bisect_left(st["sizes_in_order"], st["sizes_in_order"][first])


def _count(st: dict[str, Any], p: dict[str, Any], done: float, ts: float) -> None:
    p["done"] = max(p["done"], done)
    hist = p["hist"]
    hist.append((ts, p["done"]))
    while len(hist) > 2 and hist[-1][0] - hist[0][0] > WINDOW_S:
        del hist[0]


def _advance_sync(st: dict[str, Any], inflight: dict[str, tuple[int, float]],
                  ts: float) -> None:
    """The sync in files: it fsyncs them one at a time in the copy's order,
    and each costs the disk's flush whatever its size (what the copy left
    in the page cache was mostly written out while it copied): every file
    before the one it syncs now is done."""
    p = _pass(st, "sync")
    p["inflight"] = sorted(inflight)
    done = p["done"]
    if inflight:
        # the empty files come first in the order and are never synced
        done = max(0, _frontier(st, inflight) - st["empty"])
    _count(st, p, float(done), ts)


def _step_total(st: dict[str, Any], step: str | None) -> float:
    """A step's total: files for the sync, bytes otherwise."""
    return float(st.get("files") or 0) if step == "sync" else float(st.get("total") or 0)


def _step_eta(st: dict[str, Any], step: str,
              threads: int | None = None) -> tuple[float | None, str | None]:
    """The rest of a step at its rate over its last 30 s; `threads`: the
    step's files shared out to that many threads (_schedule)."""
    p = _pass(st, step)
    hist = p["hist"]
    if len(hist) < 2 or hist[-1][0] - hist[0][0] < 1.0:
        return None, "measuring"
    rate = (hist[-1][1] - hist[0][1]) / (hist[-1][0] - hist[0][0])
    if rate <= 0:
        return None, "measuring"
    if threads and p.get("busy"):
        busy = [n for t, n in p["busy"] if t >= hist[0][0]]
        per_thread = rate / max(1.0, sum(busy) / max(1, len(busy)))
        return _schedule(st, p, threads) / per_thread, None
    return max(0.0, _step_total(st, step) - p["done"]) / rate, None


def _own_cores(st: dict[str, Any], jobs: int | None) -> int | None:
    """-j when its worker threads each keep a core busy (compression with
    cores to spare): then each thread goes at its own pace and the last file
    alone goes at one thread's. Otherwise they share what limits them (the
    disk, a host whose CPUs are busy with other work: one thread alone then
    gets what two shared), and the rest goes at the process's rate: None."""
    cpu = list((st.get("worker_cpu") or {}).values())
    if not jobs or not cpu or sum(cpu) / len(cpu) < BUSY_CPU:
        return None
    return jobs


def _schedule(st: dict[str, Any], p: dict[str, Any], threads: int) -> float:
    """The bytes the busiest of `threads` threads still has to read, each
    finishing its file in flight, then taking the next one of the list (the
    largest last: one thread copies it alone at the end). The small files
    ahead (those under a 64th of a thread's share) go in lumps of that size:
    a few hundred units at most, whatever the number of files."""
    left: dict[str, float] = p.get("left") or {}
    loads = sorted(left.values(), reverse=True)[:threads]
    loads += [0.0] * (threads - len(loads))
    sizes_in_order: list[int] = st["sizes_in_order"]
    low = p["low"]
    skip = {st["index"][r] for r in (*left, *p["finished"])}
    rest = float(st["prefix"][-1] - st["prefix"][low]) - sum(
        st["sizes"][r] for r in (*left, *p["finished"]) if st["index"][r] >= low)
    lump = max(1.0, (rest + sum(loads)) / threads / 64.0)
    big = max(low, bisect.bisect_left(sizes_in_order, lump, lo=low))
    small = sum(sizes_in_order[i] for i in skip if low <= i < big)
    units = [lump] * int((st["prefix"][big] - st["prefix"][low] - small) // lump)
    units += [float(sizes_in_order[i]) for i in range(big, len(sizes_in_order))
              if i not in skip]
    heapq.heapify(loads)
    for u in units:
        heapq.heappush(loads, heapq.heappop(loads) + u)
    return max(loads)


def _io_ratio(st: dict[str, Any], root: ClientProc) -> None:
    """The bytes the copy wrote per byte it read (its own files, the WAL it
    streams): about 1 for a FULL backup, the compression ratio with
    compression, little for a DELTA of a quiet database."""
    if root.read_chars is None or root.write_chars is None:
        return
    first = st.setdefault("io_first", (root.read_chars, root.write_chars))
    read, written = root.read_chars - first[0], root.write_chars - first[1]
    if read > (1 << 20):
        st["write_ratio"] = max(0.0, min(2.0, written / read))


def _stream_clock(tr: Tracker, st: dict[str, Any], snap: Snapshot) -> None:
    """When its WAL stream began, on the samples' clock (the walsender's
    start, by the server's clock)."""
    if snap.db is None or snap.db.server_ts is None:
        return
    for b in tr.members(snap):
        if b.backend_type == "walsender" and b.backend_start:
            st["stream_began"] = snap.ts - (snap.db.server_ts - b.backend_start)
            return


def _stream_wait(st: dict[str, Any], stop_at: float) -> float:
    """Seconds its stop waits for its WAL stream, the stop beginning at
    `stop_at`. The stream stops once it sees the stop LSN set (about a
    second after pg_backup_stop), which it checks when WAL arrives or when
    it sends its status message: every 10 s from its start (pg_probackup's
    standby_message_timeout). WAL may arrive sooner; with none (the stop
    record is sent before the stop LSN is set) it waits for the message."""
    began = st.get("stream_began")
    if began is None:
        return 0.0
    since = stop_at + 1.0 - began
    return STATUS_INTERVAL_S - since % STATUS_INTERVAL_S


def _validation_ahead(tr: Tracker, st: dict[str, Any]) -> float | None:
    """Seconds the validation will take, before it starts: it reads back
    what the copy wrote (written per byte read, times the total), as fast
    per byte as the instance's last validation with this compression (its
    catalog), else at twice the rate the copy read the data directory
    (VALIDATE_PER_COPY). 0 without validation; None when the copy was not
    watched."""
    if not _validates(tr) or st.get("phase") == "validate":
        return 0.0
    first, last = st.get("copy_first"), st.get("copy_last")
    ratio = st.get("write_ratio")
    if ratio is None:
        return None
    earlier = _earlier_validation(tr, st)
    if earlier is not None:  # as fast as its last backup's, per byte written
        return float(st["total"]) * ratio * earlier["validate_s"] / earlier["data_bytes"]
    if not first or not last or last[0] - first[0] < 1.0:
        return None
    rate = (last[1] - first[1]) / (last[0] - first[0])
    if st.get("phase") == "copy":  # while it copies: its recent pace
        p = _pass(st, "copy")["hist"]
        if len(p) >= 2 and p[-1][0] - p[0][0] >= 1.0 and p[-1][1] > p[0][1]:
            rate = (p[-1][1] - p[0][1]) / (p[-1][0] - p[0][0])
    if rate <= 0:
        return None
    return float(st["total"]) * ratio / rate * VALIDATE_PER_COPY


def _sync_ahead(tr: Tracker, st: dict[str, Any]) -> float | None:
    """Seconds the sync will take, before it starts (a FULL backup: it
    syncs every file it copied): as long per file as the instance's last
    timed sync (100 files or more). None: no such backup, a DELTA or PAGE
    (how many files it writes is not known ahead), or --no-sync."""
    mode = (_control(st).get("backup-mode") or opt(tr.job.command, "-b", "backup-mode")
            or "").upper()
    if mode != "FULL" or "--no-sync" in tr.job.command:
        return None
    for h in st.get("history") or ():
        if h.get("synced_files", 0) >= 100 and h.get("sync_s") is not None:
            return float(st.get("files") or 0) * float(h["sync_s"]) / h["synced_files"]
    return None


def _earlier_validation(tr: Tracker, st: dict[str, Any]) -> dict[str, Any] | None:
    """The newest earlier backup of this instance with the same compression
    whose validation can be timed (64 MB or more written: its control file's
    end-time has whole seconds), its time less the half second that rounding
    adds on average."""
    comp = _control(st).get("compress-alg") or "none"
    for h in st.get("history") or ():
        if h.get("compress") == comp and h.get("data_bytes", 0) >= 64 << 20:
            return {**h, "validate_s": max(0.25, float(h["validate_s"]) - 0.5)}
    return None


def _eta_basis(tr: Tracker, st: dict[str, Any]) -> str | None:
    phase = st.get("phase")
    if phase == "starting" and walwait.wait_eta(st.get("wait")) is not None:
        return ("the start's wait: the longest of the spread checkpoint's bound and the "
                "archiver's backlog at its pace; the copy not counted until it runs")
    if not st.get("total") or phase == "starting":
        return None
    if phase == "validate":
        return "the validation's rest at its rate over the last 30 s"
    synced = _sync_ahead(tr, st) is not None
    ahead = st.get("stop_ahead")
    archived = (st.get("wait") or {}).get("left_s")
    head = {"copy": "the copy's rest at its rate over the last 30 s"
            + ("; the stop's wait for its WAL stream (its next status message, every 10 s)"
               if _stream(tr, st) else
               f"; the stop's wait for the archiver beyond it ({fmt.duration(ahead)}: its "
               "backlog now at its pace, at least)" if ahead else ""),
            "stopping": ("the wait for its WAL stream's next status message (every 10 s)"
                         if _stream(tr, st) else
                         "the archiver's backlog up to the stop LSN's segment, at its pace"
                         if archived is not None else "the wait for the WAL to be archived "
                         "is not counted (the archiver's pace or position not known yet)"),
            "sync": "the sync's files left at its rate over the last 30 s (an fsync each)"
            }.get(str(phase), "")
    if phase in ("copy", "stopping"):
        head += ("; the sync as long per file as the last timed one's" if synced else
                 "; the sync not counted until it runs")
    if not _validates(tr):
        return head + "; no validation (--no-validate)"
    if _validation_ahead(tr, st) is None:
        return head + ("; the validation that follows not counted: the copy was seen too "
                       "briefly to estimate it")
    earlier = _earlier_validation(tr, st)
    return head + (f"; then the validation, as fast per byte written as backup "
                   f"{earlier['id']}'s" if earlier else "; then the validation: the bytes the "
                   "copy wrote, read back at twice the rate the copy read (no earlier backup "
                   "with this compression to time)")


# ---- threads -------------------------------------------------------------------------

def _thread_cpu(st: dict[str, Any], threads: list[list[Any]] | None, ts: float,
                streaming: bool) -> None:
    """Each worker thread's CPU since the last sample (those that copy or
    validate: neither the main thread nor the WAL stream's) and how many are
    alive. The threads come in the order they were made (threads_of): the
    main thread, the WAL stream's (--stream: made before the copy, gone once
    the stop LSN is streamed), then the workers."""
    if threads is None:
        return
    prev: dict[int, tuple[float, float]] = st.get("thread_cpu") or {}
    now = {int(t[0]): (ts, float(t[2])) for t in threads}
    tids = [int(t[0]) for t in threads]
    workers = tids[2:] if streaming else tids[1:]
    cpu: dict[int, float] = {}
    for t in workers:
        if t in prev and ts > prev[t][0]:
            cpu[t] = 100.0 * (now[t][1] - prev[t][1]) / (ts - prev[t][0])
    st["thread_cpu"] = now
    st["threads"] = threads
    st["worker_cpu"] = cpu
    st["workers_alive"] = len(workers)


def _slot_of(st: dict[str, Any], path: str) -> int:
    return int(st["slots"].get(path, 1 << 30))


def _slot(st: dict[str, Any], path: str) -> int:
    """The row number of a file in flight: its own while it is read, else
    the lowest one free."""
    slots: dict[str, int] = st["slots"]
    if path not in slots:
        used = set(slots.values())
        slots[path] = next(i for i in range(1, len(used) + 2) if i not in used)
    return slots[path]


def _archiving(st: dict[str, Any], waits_for: str) -> Verdict:
    """A wait for archive_command (archive-push): the backlog before the
    segment, the archiver's pace, and whether it fails now."""
    arch = (st.get("wait") or {}).get("archiving")
    text = walwait.archiving_text(arch, waits_for, TIMES_OUT)
    failing = walwait.watch(st).failing()
    if arch is None and failing:  # no WAL position read (an older recording)
        text += f", and {failing}: fix archive_command (the server log says why), or {TIMES_OUT}"
    return Verdict("archiving", text)


def _waits_archived(tr: Tracker, st: dict[str, Any]) -> bool:
    """Whether its start waits for the archiver: in archive mode, and for a
    PAGE backup in either mode (pg_probackup's backup.c)."""
    mode = (_control(st).get("backup-mode") or opt(tr.job.command, "-b", "backup-mode")
            or "").upper()
    return not _stream(tr, st) or mode == "PAGE"


def _waits(tr: Tracker, st: dict[str, Any], snap: Snapshot) -> dict[str, Any] | None:
    """What the backup waits on at its start (pg_backup_start's checkpoint;
    in archive mode the archiver, up to the segment of its start LSN, which
    it switches out of with pg_switch_wal once pg_backup_start returns) and
    at its stop (archive mode: the archiver, up to the stop LSN's segment,
    which pg_backup_stop switches out of), with their figures (walwait)."""
    ww = walwait.watch(st)
    phase = st.get("phase")
    session = next((b for b in tr.members(snap) if b.backend_type == "client backend"), None)
    query = (session.query or "") if session is not None else ""
    if phase == "starting":
        # its session works in the start only in pg_backup_start (its other
        # statements there take no time): the checkpoint
        in_start = session is not None and session.state == "active"
        ck = ww.checkpoint(snap, session, "--smooth-checkpoint" not in tr.job.command) \
            if in_start else None
        arch = None
        if _waits_archived(tr, st):
            ww.aim("start", fixed=not in_start, ahead=1 if in_start else 0)
            arch = ww.archiving("start")
        return walwait.wait_doc("start", ck, arch)
    if phase == "stopping" and not _stream(tr, st):
        stopped = bool(_BACKUP_STOP.search(query)) or _stopped(_control(st))
        ww.aim("stop", fixed=stopped, ahead=0 if stopped else 1)
        return walwait.wait_doc("stop", None, ww.archiving("stop"))
    return None


def _how_far(tr: Tracker, st: dict[str, Any]) -> str:
    phase = st.get("phase")
    if phase in ("sync", "validate") and st.get("total"):
        done = min(1.0, _pass(st, phase)["done"] / (_step_total(st, phase) or 1.0))
        return (f"after its copy ({fmt.size(st['total'])}), in phase {phase} at "
                f"{100.0 * done:.0f}%")
    return how_far(tr.items.get(KEY), bool(st.get("total")), phase)
