"""pgBackRest backup: a main process that starts and stops the backup on the
server (one client session, application_name `pgBackRest [backup]`) and,
with process-max N, N local processes (`backup:local`, its children) that read
the cluster's files from the data directory, compress them and write them to
the repository. The server sees none of that copying: its progress is read
from the host.

- pgBackRest's own percentage: the main process writes it into its backup
  lock file (`<lock-path>/<stanza>-backup.lock`, JSON; `pctCplt` in hundredths
  of a percent since 2.38, `sz` / `szCplt` in bytes since 2.48). pgparmon finds
  that file among the processes' open files and reads it each sample.
- Each local process: the data file it reads now (an open file under the data
  directory, its position and size), its read rate (bytes the process read,
  /proc io) and its CPU (compression).
- The phases around the copy: the start (pg_backup_start: a checkpoint, then
  pgBackRest waits for the WAL segment before the backup to be archived), the
  stop (pg_backup_stop, then waits for the backup's WAL to be archived), the
  manifest at the end.

Work is counted in pgBackRest's percentage (full, differential and
incremental alike: for the latter two it is of what they copy, which only
pgBackRest knows). A backup run from a repository host (its processes not on
this host) is seen by its session only: no progress, and it says so.

The driver holds the hooks; its command line, lock file and repository are
read in pgbackrest_repo.py, its waits around the copy (checkpoint,
archiver) and their verdicts are in pgbackrest_waits.py, and the rows of
its processes and the copy's windowed ETA in backup_rows.py, which the
other backup drivers share.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .. import units as fmt
from ..analyze.bottleneck import BUSY_CPU, HOST_CPU, Verdict
from ..analyze.eta import Eta
from ..analyze.items import Item, WorkerState
from ..cmdline import ClientArgs
from ..snapshot import Backend, ClientProc, Snapshot
from .backup_phases import ARCHIVE_WAIT, BACKUP, BACKUP_ITEM, STARTING
from . import walwait
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
from .backup_rows import process_row, prune_rows, window_eta
from .pgbackrest_repo import backup_type, command_of, data_directory_bytes, data_path, \
    option, read_lock
from .pgbackrest_state import BackrestState
from .pgbackrest_waits import aim_stop, archive_check, waits, wait_verdict

if TYPE_CHECKING:
    from ..analyze.progress import Tracker
    from ..client_tree import ClientPids
    from ..readers.procs import ProcInfo

APP = "pgBackRest"
INFERRED = ("inferred: user, client address and application_name (pgBackRest's processes "
            "are not on this host)")
COMMANDS = ("backup",)  # restore runs with the server down: not followed yet
KEY = "pgbackrest"
COPY_RATE_WINDOW_S = 30.0  # the ETA's rate: the copy's last seconds


class PgBackRest(Driver):
    kind = "pgbackrest"
    programs = ("pgbackrest",)
    title = "pgBackRest backup"
    session_apps = SessionApps((APP,), query_text=True, idle=True)
    data_flow = "out"
    has_leader = True  # its one session: the backup's start and stop
    plans_work = True  # the data directory's size, once (a full backup's total)
    needs_plan = False
    fixed_workers = False  # local processes start after the backup's start
    whole_cluster = True
    phases = (STARTING, BACKUP, ARCHIVE_WAIT)
    item_kinds = (BACKUP_ITEM,)
    verdicts = ("nothing", "starting", "client-cpu", "archiving", "checkpoint")
    advice_terms = (("-j ", "process-max "), ("COPY", "file copy"))

    def new_state(self) -> BackrestState:
        return BackrestState()

    # ---- recognise ---------------------------------------------------------

    def from_tree(self, root: ProcInfo, args: ClientArgs) -> bool:
        return command_of(root.cmdline) in COMMANDS

    def refine(self, job: Job, linked: list[Backend]) -> Job:
        argv = job.command
        pmax = option(argv, "process-max")
        return dataclasses.replace(
            job, database=None, grouping=TREE, target=None,
            jobs=int(pmax) if pmax and pmax.isdigit() else 1)

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        if b.backend_type != "client backend" or not (b.application_name or "").startswith(APP):
            return None
        return (self.kind, b.usename, b.client_addr, b.application_name)

    def from_sessions(self, members: list[Backend]) -> Job:
        return cluster_job(self.kind, members, INFERRED)

    def belongs(self, job: Job, b: Backend) -> bool:
        if b.backend_type != "client backend" or not (b.application_name or "").startswith(APP):
            return False
        if job.grouping == TREE:
            return b.pid in job.pid_hint or not job.pid_hint
        if job.grouping == INFERRED:
            return (b.usename == job.usename and b.client_addr == job.client_addr
                    and b.application_name == job.app_name)
        return True

    def member_pids(self, job: Job, snap: Snapshot, clients: ClientPids) -> set[int] | None:
        return tree_member_pids(job, snap, clients)

    # ---- plan --------------------------------------------------------------

    def read_plan(self, src: PlanReader, req: dict[str, Any]) -> PlanInputs | None:
        """The bytes a full backup copies: the data directory's files, as
        pgBackRest counts them (not the WAL, not the server's temporary
        files), summed once; nothing when the server is not on this host or
        its directory cannot be read."""
        pgdata = src.facts.data_directory if src.local else None
        size = data_directory_bytes(pgdata) if pgdata else None
        return PlanInputs(file_sizes={"pg_data": float(size)} if size else {})

    def plan(self, tr: Tracker, inputs: PlanInputs) -> bool:
        size = (inputs.file_sizes or {}).get("pg_data")
        if size:
            _st(tr).pgdata = size
        tr.mark_planned()  # the work list: this one backup
        return True

    # ---- the tool's own status (live) ----------------------------------------

    def read_status(self, job: Job, clients: tuple[ClientProc, ...],
                    prev: dict[str, Any] | None) -> dict[str, Any] | None:
        """pgBackRest's backup lock file, found open in its processes: its
        JSON (the percentage done), read each sample; the backup's directory
        in a posix repository (the files its processes write), and, once no
        process copies, whether the stanza's backup.info lists it (the
        backup completed)."""
        return read_lock(clients, prev)

    # ---- observe -----------------------------------------------------------

    def file_evidence(self, tr: Tracker, snap: Snapshot, running_now: dict[str, int]) -> None:
        st = _st(tr)
        it = tr.items.get(KEY)
        if it is None:
            it = Item(key=KEY, kind=BACKUP_ITEM.name, relation=None,
                      name=f"{backup_type(tr.job.command)} backup",
                      size=1.0, work=1.0, state="running", started=snap.wall)
            tr.add(it)
        st.wal.observe(snap)
        _read_tool(st, snap.tool)
        inflight = self._local_processes(tr, st, snap)
        aim_stop(tr, st, snap)
        st.phase = _phase(tr, st, snap)
        st.wait = waits(tr, st, snap)
        if it.state == "done":
            return
        # pgBackRest counts a file when it is finished: one large file read
        # for minutes moves its percentage by nothing. In bytes (a full
        # backup's total: the data directory; 2.48+: its own), add how far
        # the local processes are into the files they read now.
        total = st.size or (st.pgdata if backup_type(tr.job.command) == "full" else None)
        if total:
            done = (st.pct or 0.0) / 10000.0 * total + inflight
            if it.work != total:
                it.work = it.size = float(total)
                it.done = 0.0
            st.unit = "bytes"
        elif st.pct is not None:
            done, it.work, st.unit = st.pct, 10000.0, "percent"
        else:
            return
        it.done = max(it.done, min(0.999 * it.work, done))
        if st.unit == "bytes":
            it.bytes_done = int(it.done)
        if st.phase == "copy":  # the copy's own pace, not the start's wait
            hist = st.hist
            hist.append((snap.ts, it.done, it.work))
            while len(hist) > 2 and hist[-1][0] - hist[0][0] > COPY_RATE_WINDOW_S:
                del hist[0]

    def _local_processes(self, tr: Tracker, st: BackrestState, snap: Snapshot) -> float:
        """Each local process that reads a data file now is a worker row: the
        file, how far in, the process's read rate and CPU. Returns the bytes
        read so far of the files being read now."""
        inflight = 0.0
        sizes = {f.path: f.size for f in snap.files}
        procs = st.rows.procs
        root = tr.job.client_pid
        active: set[int] = set()
        for c in snap.clients:
            if c.pid == root:
                continue
            reading = [f for f in c.open_files or () if f.path in sizes]
            prev_cpu = st.rows.cpu.get(c.pid)
            if c.cpu_s is not None:
                st.rows.cpu[c.pid] = (snap.ts, c.cpu_s)
            if not reading:
                continue
            active.add(c.pid)
            w = procs.setdefault(c.pid, WorkerState(pid=c.pid, client_pid=c.pid))
            f = max(reading, key=lambda f: sizes[f.path])
            inflight += sum(min(r.position, sizes[r.path]) for r in reading)
            w.phase = "backup"
            w.relation = data_path(f.path)
            w.progress = min(1.0, f.position / sizes[f.path]) if sizes[f.path] else None
            w.wait_event = None
            w.state = "active"
            process_row(st.rows, w, c, snap, prev_cpu, c.read_chars)
        # rows of their own beside the server sessions
        prune_rows(tr, st.rows, active)
        return inflight

    def done_when_unseen(self, tr: Tracker, it: Item, snap: Snapshot, sessions: set[int]) -> bool:
        return it.key != KEY  # the backup is not a statement: its end is the processes'

    def between_steps(self, tr: Tracker) -> bool:
        # the start (checkpoint, archive check), the stop, the manifest
        return _st(tr).phase != "copy"

    def fraction(self, tr: Tracker) -> float | None:
        it = tr.items.get(KEY)
        if it is None or _st(tr).unit is None and it.state != "done":
            return None
        return it.fraction

    def has_total(self, tr: Tracker) -> bool:
        return _st(tr).unit is not None

    def streams(self, tr: Tracker) -> int | None:
        return None  # a queue of files, not of items: no "one item left" tail

    def own_eta(self, tr: Tracker) -> Eta | None:
        st = _st(tr)
        phase, wait = st.phase, st.wait
        if phase == "starting":
            left = walwait.wait_eta(wait)
            if left is not None:
                return Eta(left, reason=walwait.WAIT_ONLY)
            arch = (wait or {}).get("archiving")
            if arch and arch["segments"] == 0:
                return Eta(None, reason="starting: the segment before the backup's is "
                                        "archived; pgBackRest checks its repository, builds "
                                        "its manifest and starts its processes")
            return Eta(None, reason=walwait.wait_reason(wait) or (
                "starting: the checkpoint, then the WAL before the backup archived"))
        if phase == "archive-wait":
            if wait is not None and wait["left_s"] is not None:
                return Eta(wait["left_s"])
            return Eta(None, reason=walwait.wait_reason(wait)
                       or "waiting for the backup's WAL to be archived")
        if phase == "finishing":
            return Eta(None, reason="finishing (the manifest)")
        if st.pct is None and st.unit != "bytes":
            return Eta(None, reason=(
                "no percentage from pgBackRest yet (2.38+ writes it to its lock file)"
                if st.lock_file or tr.job.client_pid else
                "pgBackRest's processes are not on this host: no progress"))
        left, why = window_eta(tr.items.get(KEY), st.hist)
        st.stop_ahead = None
        if left is not None and phase == "copy" and archive_check(tr):
            # the stop waits for the archiver: the backlog now, beyond the copy's rest
            st.stop_ahead = st.wal.stop_ahead(left)
            left += st.stop_ahead or 0.0
        return Eta(left, reason=why)

    def job_fields(self, tr: Tracker, workers: list[dict[str, Any]],
                   state: str) -> dict[str, Any]:
        st = _st(tr)
        argv = tr.job.command
        names = {"starting": "starting (checkpoint, archive check)", "copy": "copying files",
                 "archive-wait": "stopping (waiting for WAL archiving)",
                 "finishing": "finishing (manifest)"}
        if st.unit == "bytes":
            basis = ("pgBackRest's files done (its lock file) + the files its processes "
                     "read now, of " + ("its total" if st.size else "the data directory"))
        elif st.pct is not None:
            basis = "pgBackRest's own percentage (its lock file)"
        elif tr.job.client_pid:
            basis = "none yet: pgBackRest has written no percentage"
        else:
            basis = "none: pgBackRest's processes are not on this host"
        return {
            "phase": names.get(st.phase or "", st.phase) if state == "running" else None,
            "progress_basis": basis, "scope": "cluster",
            "backup": {
                "tool": "pgbackrest", "type": option(argv, "type") or "incr",
                "stanza": option(argv, "stanza"),
                "process_max": tr.job.jobs,
                "processes_copying": len(st.rows.active),
                "percent_done": round(st.pct / 100.0, 2) if st.pct is not None else None,
                "total_bytes": st.size or (st.pgdata if backup_type(tr.job.command) == "full"
                                           else None),
                "done_bytes": st.size_done,
                "lock_file": st.lock_file, "backup_dir": st.backup_dir,
                "compression": option(argv, "compress-type"),
                "wait": st.wait if state == "running" else None,
                "eta_basis": _eta_basis(tr, st) if state == "running" else None,
            }}

    def verdict(self, tr: Tracker, snap: Snapshot, settings: dict[str, str]) -> Verdict | None:
        st = _st(tr)
        phase = st.phase
        if phase in ("starting", "archive-wait"):
            return wait_verdict(st.wait, phase, st.wal.failing())
        if phase == "finishing":
            return Verdict("nothing", "pgBackRest finishes the backup (pg_backup_stop, its "
                           "manifest): no file is copied now")
        if phase != "copy":
            return None
        if not st.rows.active:  # its local processes, none reading a data file yet
            return Verdict("starting", f"pgBackRest's local processes are starting (process-max "
                           f"{tr.job.jobs or 1}): none reads a data file yet")
        cpus = list(st.rows.cpu_pct.values())
        if not cpus:
            return None
        mean = sum(cpus) / len(cpus)
        host = getattr(getattr(snap, "host", None), "cpu_percent", None)
        n = len(cpus)
        if mean >= BUSY_CPU:
            more = ("the host's CPUs are busy too: more processes will not help"
                    if host is not None and host >= HOST_CPU else
                    "more process-max helps while cores are free")
            return Verdict("client-cpu", f"pgBackRest's {n} process(es) at {mean:.0f}% of a "
                           "core each: compression is the limit (a faster compress-type such "
                           f"as lz4 or zst, or a lower compress-level); {more}")
        return None

    # ---- outcome -----------------------------------------------------------

    def settle_at_end(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> bool | None:
        """Finished when its repository lists the backup (backup.info, as
        last read while its processes lived); otherwise the verdict says how
        far it got (a failed one is never listed)."""
        st = _st(tr)
        it = tr.items.get(KEY)
        if it is not None and it.state != "done" and st.completed:
            tr.finish(it, snap.wall)
            if st.unit == "bytes":
                it.bytes_done = int(it.work)
        return None

    def leftover_verdict(self, tr: Tracker, left: list[Item]) -> tuple[str, str]:
        st = _st(tr)
        return "ended", (f"pgBackRest's processes are gone after the copy "
                         f"({_how_far(st, tr.items.get(KEY))}); "
                         "whether the backup completed cannot be seen here (its repository's "
                         "backup.info is not readable by this user; `pgbackrest info` says)")

    def cut_short(self, tr: Tracker, snap: Snapshot) -> str | None:
        st = _st(tr)
        it = tr.items.get(KEY)
        if it is None or it.state == "done":
            return None
        if st.copied and st.backup_dir and st.completed is None:
            return None  # after the copy, a repository we cannot read: leftover_verdict
        return f"the backup stopped {_how_far(st, it)}"

    def exit_reason(self, code: int) -> str:
        return f"pgbackrest exit code {code}"


def _st(tr: Tracker) -> BackrestState:
    return state_of(tr, BackrestState)


def _read_tool(st: BackrestState, tool: dict[str, Any] | None) -> None:
    """What pgBackRest said this sample (read_status, recorded): its lock
    file's percentage, total and bytes done, the backup's directory, whether
    backup.info lists it, the segment its stop waits for."""
    lock = (tool or {}).get("lock") or {}
    pct = lock.get("pctCplt")
    if isinstance(pct, (int, float)):
        st.pct = max(float(pct), st.pct or 0.0)
    if isinstance(lock.get("sz"), (int, float)):
        st.size = int(lock["sz"])
    if isinstance(lock.get("szCplt"), (int, float)):
        st.size_done = int(lock["szCplt"])
    if not tool:
        return
    st.lock_file = tool.get("lock_file") or st.lock_file
    st.backup_dir = tool.get("backup_dir") or st.backup_dir
    if "completed" in tool:
        st.completed = tool["completed"]
    st.archive_stop = tool.get("archive_stop") or st.archive_stop


def _eta_basis(tr: Tracker, st: BackrestState) -> str | None:
    """What the ETA counts."""
    phase = st.phase
    if phase == "starting":
        return ("the start's wait: the longest of the spread checkpoint's bound and the "
                "archiver's backlog at its pace; the copy not counted until it runs")
    if phase == "archive-wait":
        return "the archiver's backlog up to the backup's last segment, at its pace"
    if phase == "copy":
        ahead = st.stop_ahead
        return ("the copy's rest at its rate over the last 30 s"
                + (f"; the stop's wait for the archiver beyond it ({fmt.duration(ahead)}: its "
                   "backlog now at its pace, at least)" if ahead else ""))
    return None


def _phase(tr: Tracker, st: BackrestState, snap: Snapshot) -> str:
    """starting | copy | archive-wait | finishing, from the local processes
    (children of the main one, alive while files are copied), the session's
    statement and the percentage."""
    locals_ = [c for c in snap.clients if c.pid != tr.job.client_pid]
    if locals_ and (st.pct or 0) < 9990:
        st.copied = True
        return "copy"
    query = " ".join((b.query or "") for b in tr.members(snap)).lower()
    if "pg_backup_stop" in query or "pg_stop_backup" in query:
        return "archive-wait"
    if st.copied and archive_check(tr) and st.wal.behind("stop"):
        # its session closed after pg_backup_stop: it looks in its repository
        # for every segment up to the stop's, which the archiver has not all
        # archived yet
        return "archive-wait"
    if st.copied or (st.pct or 0) > 0:
        return "finishing"
    return "starting"


def _how_far(st: BackrestState, it: Item | None = None) -> str:
    """How far the backup got: pgBackRest's percentage, or (ahead of it,
    when the total is in bytes) the bytes its local processes were seen to
    read; a copy whose local processes ended before it was done reads
    "copy", not "finishing" (they were killed or failed)."""
    pct = st.pct
    phase = st.phase or "?"
    seen: float | None = None
    if it is not None and st.unit == "bytes" and it.work > 0:
        seen = it.fraction
    if seen is not None and it is not None and seen > 0 and (
            pct is None or 100.0 * seen > pct / 100.0 + 0.05):
        own = f"{pct / 100.0:.1f}%" if pct is not None else "none yet"
        where = (f"at {100.0 * seen:.1f}% by the bytes read ({fmt.size(it.done)} of "
                 f"{fmt.size(it.work)}; pgBackRest's own count: {own})")
        size = ""
    else:
        where = f"at {pct / 100.0:.1f}%" if pct is not None else "before any progress"
        size = f" ({fmt.size(st.size_done)} of {fmt.size(st.size)})" if st.size else ""
        seen = pct / 10000.0 if pct is not None else None
    if phase == "finishing" and (seen is None or seen < 0.99):
        phase = "copy (its local processes ended before it was done)"
    return f"{where}{size}, phase: {phase}"
