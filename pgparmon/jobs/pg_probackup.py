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

Here the driver; what it reads of the command line and the catalog is
pg_probackup_catalog.py, the steps and how far each one is
pg_probackup_steps.py, the ETA pg_probackup_eta.py.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

from ..analyze.bottleneck import BUSY_CPU, HOST_CPU, Verdict
from ..analyze.eta import Eta
from ..analyze.items import Item, WorkerState
from ..cmdline import ClientArgs
from ..readers.procs import threads_of
from ..phases import Phase
from ..snapshot import Backend, ClientProc, Snapshot
from .. import units as fmt
from .backup_phases import BACKUP, BACKUP_ITEM, WAL
from .base import (
    TREE,
    Driver,
    EndContext,
    Job,
    PlanInputs,
    PlanReader,
    SessionApps,
    state_of,
)
from .grouping import cluster_job, tree_member_pids
from .pg_probackup_catalog import (
    CONTROL_KEYS,
    DONE_STATES,
    backup_dir_of,
    command_of,
    data_files,
    listed_files,
    opt,
    read_control,
    stopped,
    validations,
)
from .pg_probackup_state import ProbackupState
from .pg_probackup_waits import archiving, start_verdict, waits
from .pg_probackup_eta import eta_basis, remaining, validation_ahead
from .pg_probackup_steps import (
    advance,
    advance_sync,
    backup_files,
    control,
    data_reads,
    gone,
    io_ratio,
    phase_of,
    slot,
    slot_of,
    step_pass,
    step_total,
    streamed,
    thread_cpu,
    validates,
)
from .backup_rows import how_far, process_row, prune_rows

if TYPE_CHECKING:
    from ..analyze.progress import Tracker
    from ..client_tree import ClientPids
    from ..readers.procs import ProcInfo

PROGRAM = "pg_probackup"
# packages name the binary after the server's major version
PROGRAMS = (PROGRAM, *(f"{PROGRAM}-{v}" for v in range(9, 20)))
KEY = "pg_probackup"
INFERRED = ("inferred: user and client address of pg_probackup's WAL stream (its process is "
            "not on this host)")
# the worker row's phase in each step that reads or writes files
ROW_PHASE = {"copy": "backup", "sync": "sync", "validate": "validate"}
# the rows' phases after the copy: the files' sync, the backup's validation
SYNC = Phase("sync", 180, busy=True, tui=("black on grey70", "black on white"), fill="#adb5bd")
VALIDATE = Phase("validate", 190, busy=True, tui=("black on dark_sea_green", "black on pale_green3"),
                 fill="#95d5b2")


class PgProbackup(Driver):
    kind = "pg_probackup"
    programs = PROGRAMS
    title = "pg_probackup backup"
    # its WAL stream (a walsender); its other session names nothing (idle_sessions)
    session_apps = SessionApps((PROGRAM,), idle=True, replication=True)
    data_flow = "out"
    plans_work = True  # the data directory's files and sizes, once
    needs_plan = False
    fixed_workers = False
    whole_cluster = True
    all_databases = True  # its WAL stream is a walsender, with no database
    idle_sessions = True  # its session: no application_name, idle between start and stop
    phases = (BACKUP, SYNC, VALIDATE, WAL)
    item_kinds = (BACKUP_ITEM,)
    verdicts = ("wal", "disk-write", "client-cpu", "archiving", "checkpoint")

    def new_state(self) -> ProbackupState:
        return ProbackupState()

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

    def member_pids(self, job: Job, snap: Snapshot, clients: ClientPids) -> set[int] | None:
        return tree_member_pids(job, snap, clients)

    def other_work(self, tr: Tracker, w: WorkerState, b: Backend,
                   snap: Snapshot) -> tuple[str, str | None] | None:
        """Its WAL stream (--stream): a walsender, WAL bytes sent since it
        began."""
        if b.backend_type != "walsender" or snap.db is None:
            return None
        sent = next((s.sent for s in snap.db.senders if s.pid == b.pid), None)
        if sent is not None:
            first = _state(tr).wal_start.setdefault(b.pid, sent)
            w.bytes_done = sent - first
            w.bytes_rate.add(snap.ts, w.bytes_done)
        return "wal", None

    # ---- plan --------------------------------------------------------------

    def plan_request(self, tr: Tracker) -> dict[str, Any] | None:
        """Once its catalog is known (its own file list is read from there),
        or once it copies without one this user can read."""
        st = _state(tr)
        if st.backup_dir:
            return {"backup_dir": st.backup_dir, "wait": st.phase == "starting"}
        if st.phase not in (None, "starting"):
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
            st.sizes = files
            st.total = sum(files.values())
            # its own order when its list was read (exact: the threads take
            # the files in it); else by size, equal sizes by path (where its
            # quicksort leaves them cannot be known: see pg_probackup_steps.py)
            st.exact = bool(inputs.file_order)
            order = [r for r in inputs.file_order or () if r in files] or \
                sorted(files, key=lambda r: (files[r], r))
            prefix = [0]
            for r in order:
                prefix.append(prefix[-1] + files[r])
            st.index = {r: i for i, r in enumerate(order)}
            st.prefix = prefix
            st.sizes_in_order = [files[r] for r in order]
            st.empty = sum(1 for v in files.values() if v == 0)  # never synced
            st.files = len(order) - st.empty
            # the longest location first: a tablespace inside the data directory
            st.roots = sorted((inputs.locations or {}).items(), key=lambda kv: -len(kv[1]))
        tr.mark_planned()
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
            out["backup_dir"] = backup_dir_of(job.command, job.client_pid)
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
            it = Item(key=KEY, kind=BACKUP_ITEM.name, relation=None, name="backup", size=1.0,
                      work=1.0, state="running", started=snap.wall)
            tr.add(it)
        tool = snap.tool or {}
        if tool.get("control"):
            st.control = tool["control"]
        if "history" in tool:
            st.history = tool["history"] or []
        if tool.get("backup_dir"):
            st.backup_dir = tool["backup_dir"]
            it.name = f"backup {os.path.basename(tool['backup_dir'])}"
        st.now = snap.ts
        st.wal.observe(snap)
        _stream_clock(tr, st, snap)
        root = next((c for c in snap.clients if c.pid == tr.job.client_pid), None)
        if root is not None:  # the process's CPU (when its threads cannot be read)
            prev = st.rows.cpu.get(root.pid)
            if root.cpu_s is not None:
                st.rows.cpu[root.pid] = (snap.ts, root.cpu_s)
            process_row(st.rows, WorkerState(pid=root.pid), root, snap, prev, None)
            thread_cpu(st, tool.get("threads"), snap.ts, streamed(st, tr.job.command)
                        and control(st).get("status") not in DONE_STATES
                        and not stopped(control(st)))
        reading = data_reads(st, snap)
        st.phase = phase = phase_of(st, snap, bool(reading))
        session = next((b for b in tr.members(snap) if b.backend_type == "client backend"), None)
        st.wait = waits(st, tr.job.command, session, snap)
        if phase != "validate":
            st.validation_ahead = validation_ahead(st, tr.job.command)
        elif st.validate_began is None:
            st.validate_began = snap.ts
        if phase == "copy":
            st.copy_seen = snap.ts
        elif phase == "stopping" and st.stop_began is None:
            # between the last sample that saw it copy and this one
            seen = st.copy_seen if st.copy_seen is not None else snap.ts
            st.stop_began = (snap.ts + seen) / 2
        if gone(snap):  # the process is gone: rows and steps stay as they were
            prune_rows(tr, st.rows, set())
            return
        step = phase if phase in ROW_PHASE else None
        if step == "copy":
            inflight = reading
        elif step is not None:
            inflight = backup_files(st, snap, "r" if step == "validate" else "w")
        else:
            inflight = {}
        if step == "copy" and root is not None:
            io_ratio(st, root)
        self._rows(tr, st, step, inflight, snap)
        if step == "sync" and st.total:
            advance_sync(st, inflight, snap.ts)
        elif step is not None and st.total:
            advance(st, step, inflight, snap.ts)
        if not st.total or it.state == "done":
            return
        if it.work != st.total:
            it.work = it.size = float(st.total)
        copied = step_pass(st, "copy").done
        if phase in ("stopping", "sync", "validate"):
            copied = it.work  # the copy is over (pg_probackup copied pg_control last)
        it.done = max(it.done, min(0.999 * it.work, copied))
        it.bytes_done = int(it.done)

    def _rows(self, tr: Tracker, st: ProbackupState, step: str | None,
              inflight: dict[str, tuple[int, float]], snap: Snapshot) -> None:
        """A row per file in flight (the threads share one file table: a
        file is not tied to a thread), numbered 1..N, a file keeping its
        number while it is read or written."""
        procs = st.rows.procs
        if st.rows_step != step:
            st.slots = {}
            procs.clear()
            st.rows_step = step
        active: set[int] = set()
        for rel in list(st.slots):
            if rel not in inflight:
                del st.slots[rel]
        for rel, (pos, frac) in sorted(inflight.items(), key=lambda kv: slot_of(st, kv[0])):
            key = slot(st, rel)
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
        prune_rows(tr, st.rows, active)

    def done_when_unseen(self, tr: Tracker, it: Item, snap: Snapshot, sessions: set[int]) -> bool:
        return it.key != KEY

    def between_steps(self, tr: Tracker) -> bool:
        return _state(tr).phase != "copy"

    def fraction(self, tr: Tracker) -> float | None:
        it = tr.items.get(KEY)
        if it is None or (not _state(tr).total and it.state != "done"):
            return None
        return it.fraction

    def has_total(self, tr: Tracker) -> bool:
        return bool(_state(tr).total)

    def streams(self, tr: Tracker) -> int | None:
        return None

    def own_eta(self, tr: Tracker) -> Eta | None:
        """Each step's rest and the steps to come (pg_probackup_eta.py)."""
        left, why = remaining(_state(tr), tr.job.command, tr.job.jobs)
        return Eta(left, reason=why)

    def job_fields(self, tr: Tracker, workers: list[dict[str, Any]],
                   state: str) -> dict[str, Any]:
        st = _state(tr)
        ctl = control(st)
        argv = tr.job.command
        mode = (ctl.get("backup-mode") or opt(argv, "-b", "backup-mode") or "").upper()
        stream = streamed(st, tr.job.command)
        wal = "streamed" if stream else "archived"
        phase = st.phase
        step = step_pass(st, phase) if phase in ("sync", "validate") and st.total else None
        frac = min(1.0, step.done / (step_total(st, phase) or 1.0)) if step else None
        pct = f" {100.0 * frac:.0f}%" if frac is not None else ""
        names = {"starting": f"starting (pg_backup_start, WAL {wal})", "copy": "copying files",
                 "stopping": f"stopping (pg_backup_stop, WAL {wal})",
                 "sync": f"syncing to disk{pct}", "validate": f"validating{pct}"}
        order = ("in pg_probackup's order (its backup_content.control: by size): those "
                 "before the first in flight" if st.exact else
                 "by size (its own list not readable): those smaller than the smallest in "
                 "flight")
        basis = ("none: the data directory is not on this host" if not st.total else
                 f"the data directory's files {order}, those seen done, and how far into "
                 "those in flight"
                 + ("; inferred: PAGE and PTRACK skip unchanged files"
                    if mode in ("PAGE", "PTRACK") else ""))
        threads = st.threads or []
        busy = st.worker_cpu
        return {
            "phase": names.get(phase or "", phase) if state == "running" else None,
            "progress_basis": basis, "scope": "cluster",
            "backup": {
                "tool": "pg_probackup", "mode": mode or None,
                "instance": opt(argv, None, "instance"),
                "threads": tr.job.jobs, "threads_alive": len(threads) or None,
                "worker_threads_cpu_percent": [round(v, 1) for _, v in sorted(busy.items())],
                "files_in_flight": len(step_pass(st, phase).inflight)
                if phase in ROW_PHASE else 0,
                "step": phase,
                "step_progress": round(frac, 4) if frac is not None else None,
                "status": ctl.get("status"), "stream": stream,
                "compression": _compression(tr, st),
                "total_bytes": st.total,
                "pgdata_bytes": _int(ctl.get("pgdata-bytes")) or None,
                "data_bytes": _int(ctl.get("data-bytes")),
                "wal_bytes": _int(ctl.get("wal-bytes")),
                "backup_dir": st.backup_dir,
                "backup_id": os.path.basename(st.backup_dir) if st.backup_dir else None,
                "program_version": ctl.get("program-version"),
                "eta_basis": eta_basis(st, tr.job.command),
                "wait": st.wait if state == "running" else None,
            }}

    def verdict(self, tr: Tracker, snap: Snapshot, settings: dict[str, str]) -> Verdict | None:
        st = _state(tr)
        phase = st.phase
        it = tr.items.get(KEY)
        if it is None or it.state == "done" or gone(snap):
            return None
        stream = streamed(st, tr.job.command)
        if phase == "starting":
            return start_verdict(st, tr.job.command)
        if phase == "stopping":
            if not stream:
                return archiving(st, "the segment of the backup's stop LSN")
            return Verdict("wal", "waiting for its WAL stream to bring the backup's stop LSN: "
                           "pg_probackup checks as WAL or a status message arrives (up to "
                           "about 10 s on an idle server)")
        if phase == "sync":
            return Verdict("disk-write", "syncing: pg_probackup fsyncs each file of the backup "
                           "in turn, and the disk writes out what the copy left in the page "
                           "cache (--no-sync skips it, at the risk of a backup lost in a crash)")
        if phase not in ("copy", "validate"):
            return None
        cpus = list(st.worker_cpu.values())
        threads = len(cpus)
        if cpus:
            cpu = sum(cpus) / threads
        else:  # no thread readings: the process's CPU over the files in flight
            total = st.rows.cpu_pct.get(tr.job.client_pid or -1)
            threads = max(1, len(step_pass(st, phase).inflight) or (tr.job.jobs or 1))
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
        status = control(st).get("status")
        if st.backup_dir:  # the last word: its control file now
            ctl = read_control(os.path.join(st.backup_dir, "backup.control"))
            status = (ctl or {}).get("status", status)
            st.control["status"] = status
        if it is None or it.state == "done":
            return None
        if status == "OK" or (status == "DONE" and not validates(tr.job.command)):
            tr.finish(it, snap.wall)
            it.bytes_done = int(it.work) if st.total else it.bytes_done
        return None

    def leftovers(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> list[Item]:
        it = tr.items.get(KEY)
        return [it] if it is not None and it.state != "done" else []

    def cut_short(self, tr: Tracker, snap: Snapshot) -> str | None:
        st = _state(tr)
        it = tr.items.get(KEY)
        if it is None or it.state == "done":
            return None
        status = control(st).get("status")
        if status is None and not st.backup_dir:
            return None  # nothing seen of its catalog: leftover_verdict
        if status == "DONE":
            return None  # copied and synced: leftover_verdict says what is missing
        why = {"ERROR": "pg_probackup set its status to ERROR",
               "CORRUPT": "its validation found a damaged file: status CORRUPT",
               "RUNNING": "its backup.control still says RUNNING (the process was killed)"}
        return f"the backup stopped {_how_far(tr, st)}: {why.get(status or '', status)}"

    def leftover_verdict(self, tr: Tracker, left: list[Item]) -> tuple[str, str]:
        st = _state(tr)
        if control(st).get("status") == "DONE":
            bid = os.path.basename(st.backup_dir or "") or "ID"
            return "ended", ("pg_probackup ended during the backup's validation: the backup "
                             "is copied and synced (status DONE) but not validated "
                             f"(`pg_probackup validate -i {bid}`)")
        return "ended", ("pg_probackup's process is gone; its catalog is not readable here, so "
                         "whether the backup completed cannot be seen (`pg_probackup show` says)")

    def exit_reason(self, code: int) -> str:
        return f"pg_probackup exit code {code}"


# ---- state ---------------------------------------------------------------------

def _state(tr: Tracker) -> ProbackupState:
    return state_of(tr, ProbackupState)


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


def _compression(tr: Tracker, st: ProbackupState) -> str | None:
    """`zlib level 1`, or None without compression."""
    ctl = control(st)
    alg = ctl.get("compress-alg") or opt(tr.job.command, None, "compress-algorithm")
    if not alg or alg == "none":
        return None
    level = ctl.get("compress-level") or opt(tr.job.command, None, "compress-level")
    return f"{alg} level {level}" if level else alg


def _stream_clock(tr: Tracker, st: ProbackupState, snap: Snapshot) -> None:
    """When its WAL stream began, on the samples' clock (the walsender's
    start, by the server's clock)."""
    if snap.db is None or snap.db.server_ts is None:
        return
    for b in tr.members(snap):
        if b.backend_type == "walsender" and b.backend_start:
            st.stream_began = snap.ts - (snap.db.server_ts - b.backend_start)
            return


def _how_far(tr: Tracker, st: ProbackupState) -> str:
    phase = st.phase
    if phase in ("sync", "validate") and st.total:
        done = min(1.0, step_pass(st, phase).done / (step_total(st, phase) or 1.0))
        return (f"after its copy ({fmt.size(st.total)}), in phase {phase} at "
                f"{100.0 * done:.0f}%")
    return how_far(tr.items.get(KEY), bool(st.total), phase)
