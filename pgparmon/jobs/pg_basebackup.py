"""pg_basebackup: a physical copy of the whole cluster over the replication
protocol. One replication connection runs BASE_BACKUP (the server reads every
data file and streams it; pg_stat_progress_basebackup, 13+, gives its phase and
bytes streamed of an estimated total); with -X stream (the default) a second
one, opened by a child process, streams the WAL written meanwhile.

Work is counted in the bytes the server streams. The total is the server's
estimate, taken when streaming begins (files grow or vanish during the copy;
the server raises the total to the bytes streamed once they pass it), and
absent with --no-estimate-size: the published job says so. Before streaming,
the backup waits for a checkpoint (spread over checkpoint_completion_target of
checkpoint_timeout unless --checkpoint=fast); at its end, with -X none and
archiving on, for its last WAL segment to be archived.

Its sessions are walsenders (no database): found by their client processes on
this host, by the application_name pgparmon gave them (`pgparmon run`), or,
for a backup taken from another host, by user, client address and
application_name, the WAL stream joined to the base backup that began before
it (inferred, and said so).
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import units as fmt
from ..analyze.bottleneck import Verdict
from ..analyze.eta import Eta
from ..analyze.items import Item, WorkerState
from ..cmdline import ClientArgs, parse_client_cmdline
from ..snapshot import Backend, BackupProgress, CopyProgress, IndexProgress, Snapshot
from ..phases import Phase
from .backup_phases import ARCHIVE_WAIT, BACKUP, BACKUP_ITEM, STARTING, WAL
from . import walwait
from .base import (
    TREE,
    Driver,
    EndContext,
    Job,
    SessionApps,
    state_of,
)
from .grouping import cluster_job, tree_member_pids
from .basebackup_options import CLIENT

if TYPE_CHECKING:
    from ..analyze.progress import Tracker
    from ..client_tree import ClientPids
    from ..readers.procs import ProcInfo

INFERRED = ("inferred: user, client address and application_name; the WAL stream joined "
            "to the base backup that began before it")

# pg_stat_progress_basebackup's phases -> the worker's phase (short, for tables)
PHASES = {
    "initializing": "starting",
    "waiting for checkpoint to finish": "checkpoint",
    "estimating backup size": "estimating",
    "streaming database files": "backup",
    "waiting for wal archiving to finish": "archive-wait",
    "transferring wal files": "wal-files",
}
# phases after the data files are all sent
_FINAL = ("archive-wait", "wal-files")
CHECKPOINT = Phase("checkpoint", 150, busy=True, waits=True,
                   tui=("black on yellow", "black on bright_yellow"), fill="#e9c46a")
ESTIMATING = Phase("estimating", 130, busy=True, waits=True,
                   tui=("black on grey70", "black on white"), fill="#adb5bd")
WAL_FILES = Phase("wal-files", 170, busy=True, streams=True,
                  tui=("black on dark_cyan", "black on cyan"), fill="#2a9d8f")

_MAX_RATE = re.compile(r"\bMAX_RATE\s+'?(\d+)'?", re.I)
_FAST = re.compile(r"\bCHECKPOINT\s+'fast'|\bFAST\b", re.I)
_SERVER_COMPRESSION = re.compile(r"\bCOMPRESSION\s+'([^']+)'", re.I)
# pg_basebackup asks the server not to wait for archiving when it gets the
# WAL itself (-X stream, -X fetch): NOWAIT, or WAIT 0 (15+)
_NOWAIT = re.compile(r"\bNOWAIT\b|\bWAIT\s+'?(?:0|false|off)'?", re.IGNORECASE)
FAST_OPTION = "--checkpoint=fast (-c fast)"
NEVER_ENDS = "the backup never ends (pg_basebackup has no timeout for it)"


def is_base_backup(b: Backend) -> bool:
    return (b.query or "").lstrip().upper().startswith("BASE_BACKUP")


def is_wal_stream(b: Backend) -> bool:
    return (b.query or "").lstrip().upper().startswith("START_REPLICATION")


def command_options(query: str | None) -> dict[str, Any]:
    """What the BASE_BACKUP command asked the server for (its own text, so a
    backup taken from another host says it too): MAX_RATE (kB/s), a fast
    checkpoint, server-side compression."""
    q = query or ""
    out: dict[str, Any] = {}
    m = _MAX_RATE.search(q)
    if m:
        out["max_rate"] = int(m.group(1)) * 1024
    out["fast_checkpoint"] = bool(_FAST.search(q))
    m = _SERVER_COMPRESSION.search(q)
    if m and m.group(1).lower() != "none":
        out["server_compression"] = m.group(1)
    # the server waits for its last WAL segment to be archived (-X none)
    out["waits_for_archive"] = not _NOWAIT.search(q)
    return out


ETA_WINDOW_S = 30.0  # the ETA's rate: the stream's last seconds


@dataclass
class BasebackupState:
    """What the driver keeps about one base backup (its new_state)."""

    wal: walwait.WalWatch = field(default_factory=walwait.WalWatch)  # from the first sample
    wal_start: dict[int, int] = field(default_factory=dict)  # WAL stream pid -> bytes sent at first
    wal_bytes: int | None = None  # what the WAL stream sent (kept once it has ended)
    key: str | None = None  # the base backup's item (None: BASE_BACKUP not seen yet)
    options: dict[str, Any] = field(default_factory=dict)  # what BASE_BACKUP asked for
    seen: float | None = None  # the last sample that showed its session
    # pg_stat_progress_basebackup: its phase, (tablespaces streamed, total),
    # the estimated total and the bytes streamed (the most seen)
    phase: str | None = None
    tablespaces: tuple[int | None, int | None] | None = None
    total: int | None = None
    streamed: int | None = None
    wait: dict[str, Any] | None = None  # what it waits on now (job.backup.wait)
    stop_ahead: float | None = None  # the end's wait for the archiver beyond the stream


class PgBasebackup(Driver):
    kind = "pg_basebackup"
    programs = ("pg_basebackup",)
    title = "pg_basebackup"
    # its connections are walsenders: the backup's and the WAL stream's
    session_apps = SessionApps(("pg_basebackup",), idle=True, replication=True)
    client_specs = {"pg_basebackup": CLIENT}
    data_flow = "out"
    plans_work = False  # one item: the backup, sized by the server's estimate
    needs_plan = False
    fixed_workers = False  # the WAL stream's process ends before the main one
    whole_cluster = True
    # the server's phases (the waits: a checkpoint, sizing the files,
    # archiving the last WAL segment) and the WAL stream
    no_jobs_advice = ("pg_basebackup copies the cluster through one connection: there is "
                      "no -j to choose",
                      "its speed is set by --max-rate, the storage it reads, the client's "
                      "compression (-z) and the network: the limit line says which")
    phases = (STARTING, CHECKPOINT, ESTIMATING, BACKUP, ARCHIVE_WAIT, WAL_FILES, WAL)
    item_kinds = (BACKUP_ITEM,)
    verdicts = ("nothing", "checkpoint", "archiving")

    def new_state(self) -> BasebackupState:
        return BasebackupState()

    # ---- recognise ---------------------------------------------------------

    def from_tree(self, root: ProcInfo, args: ClientArgs) -> bool:
        return True

    def refine(self, job: Job, linked: list[Backend]) -> Job:
        # a physical backup has no database: its sessions are the tree's
        # replication connections
        return dataclasses.replace(job, database=None, grouping=TREE,
                                   target=None if job.target == "-" else job.target)

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        if b.backend_type != "walsender" or not self.names_app(b.application_name):
            return None
        return (self.kind, b.usename, b.client_addr, b.application_name)

    def split(self, members: list[Backend]) -> list[list[Backend]]:
        """One job per base backup: each BASE_BACKUP session with the WAL
        streams that started after it (and before the next one)."""
        groups: list[list[Backend]] = []
        for b in sorted(members, key=lambda b: (b.backend_start or 0.0, b.pid)):
            if is_base_backup(b):
                groups.append([b])
            elif groups:
                groups[-1].append(b)
        return groups

    def from_sessions(self, members: list[Backend]) -> Job:
        return cluster_job(self.kind, members, INFERRED)

    def belongs(self, job: Job, b: Backend) -> bool:
        if b.backend_type != "walsender" or not self.names_app(b.application_name):
            return False
        if job.app_name and b.application_name != job.app_name:
            return False
        if job.grouping == TREE:  # when no link could be read this tick
            return b.pid in job.pid_hint or not job.pid_hint
        if job.grouping == INFERRED:
            return b.usename == job.usename and b.client_addr == job.client_addr
        return True

    def member_pids(self, job: Job, snap: Snapshot, clients: ClientPids) -> set[int] | None:
        if snap.db is None:
            return None
        if job.grouping == TREE:
            return tree_member_pids(job, snap, clients)
        if job.grouping != INFERRED:
            return None
        # sessions of one user, address and name: ours is the BASE_BACKUP we
        # were found with, and the WAL streams that began after it (before
        # the next base backup from there)
        cands = sorted((b for b in snap.db.backends if self.belongs(job, b)),
                       key=lambda b: (b.backend_start or 0.0, b.pid))
        out: set[int] = set()
        ours = False
        for b in cands:
            if is_base_backup(b):
                ours = b.pid in job.pid_hint
                if ours:
                    out.add(b.pid)
            elif ours or b.pid in job.pid_hint:
                out.add(b.pid)
        return out

    # ---- observe -----------------------------------------------------------

    def other_work(self, tr: Tracker, w: WorkerState, b: Backend,
                   snap: Snapshot) -> tuple[str, str | None] | None:
        if b.backend_type != "walsender" or snap.db is None:
            return None
        bp = _progress_of(snap, b.pid)
        if bp is not None or is_base_backup(b):
            key = f"basebackup:{b.pid}"
            st = _st(tr)
            if key not in tr.items:
                tr.add(Item(key=key, kind=BACKUP_ITEM.name, relation=None, name="base backup",
                            size=1.0, work=1.0))
                tr.mark_planned()  # the work list is this one backup
                st.key, st.options = key, command_options(b.query)
            st.seen = snap.wall
            if bp is None:  # no progress view (< 13): streaming, how far unknown
                st.phase = "streaming database files"
                return "backup", key
            st.phase = bp.phase
            st.tablespaces = (bp.tablespaces_streamed, bp.tablespaces_total)
            if bp.backup_total is not None:
                st.total = bp.backup_total
            streamed = bp.backup_streamed or 0
            st.streamed = max(streamed, st.streamed or 0)
            w.bytes_done = streamed
            phase = PHASES.get(bp.phase or "", "backup")
            if phase == "backup":  # the rate of the streaming itself, not of the wait before
                w.bytes_rate.add(snap.ts, streamed)
            return phase, key
        if is_wal_stream(b):
            sent = next((s.sent for s in snap.db.senders if s.pid == b.pid), None)
            if sent is not None:
                st = _st(tr)
                first = st.wal_start.setdefault(b.pid, sent)
                w.bytes_done = sent - first
                w.bytes_rate.add(snap.ts, w.bytes_done)
                st.wal_bytes = w.bytes_done  # kept once its stream has ended
            return "wal", None
        return None

    def file_evidence(self, tr: Tracker, snap: Snapshot, running_now: dict[str, int]) -> None:
        """The archiver and the WAL position each sample, and what the backup
        waits on now: the checkpoint before it streams, the archiver at its
        end (-X none: up to the stop's segment, which do_pg_backup_stop
        switches out of before this phase begins)."""
        st = _st(tr)
        ww = st.wal  # from the job's first sample, before its backup's
        ww.observe(snap)
        it = tr.items.get(st.key or "")
        st.wait = None
        if it is None or it.state == "done":
            return
        phase = PHASES.get(st.phase or "")
        if phase == "checkpoint":
            b = next((m for m in tr.members(snap) if m.pid == it.worker or is_base_backup(m)),
                     None)
            st.wait = walwait.wait_doc("start", ww.checkpoint(snap, b, _fast(tr)), None)
        elif phase == "archive-wait":
            ww.aim("stop", fixed=True)
            st.wait = walwait.wait_doc("stop", None, ww.archiving("stop"))

    def progress(self, tr: Tracker, it: Item, cp: CopyProgress | None,
                 ip: IndexProgress | None, snap: Snapshot) -> None:
        if it.kind != "backup":
            super().progress(tr, it, cp, ip, snap)
            return
        bp = _progress_of(snap, it.worker)
        if bp is None:
            return
        total, streamed = bp.backup_total, bp.backup_streamed or 0
        if total:
            it.work = it.size = float(max(total, streamed))
        elif streamed:
            it.work = it.size = max(it.work, float(streamed))  # no estimate: what went so far
        it.bytes_done = streamed
        phase = PHASES.get(bp.phase or "")
        if phase in _FINAL:
            it.done = 0.999 * it.work  # every data file sent; the backup is not over
        elif total:
            it.done = max(it.done, min(0.999 * it.work, float(streamed)))

    def done_when_unseen(self, tr: Tracker, it: Item, snap: Snapshot, sessions: set[int]) -> bool:
        # BASE_BACKUP ended when its session is still there (idle, or on to
        # its next command), or after every data file was sent; a session
        # gone mid-stream ended nothing (the end's verdict says how far it got)
        if it.kind != "backup":
            return True
        return PHASES.get(_st(tr).phase or "") in _FINAL or it.worker in sessions

    def fraction(self, tr: Tracker) -> float | None:
        if not self.has_total(tr):
            return None
        total = tr.work_total()
        return min(1.0, tr.work_done() / total) if total > 0 else None

    def has_total(self, tr: Tracker) -> bool:
        return bool(_st(tr).total) or any(
            i.kind == "backup" and i.state == "done" for i in tr.items.values())

    def streams(self, tr: Tracker) -> int | None:
        return 1

    def own_eta(self, tr: Tracker) -> Eta | None:
        st = _st(tr)
        if st.key is None:
            return Eta(None, reason="waiting for the base backup to start")
        it = tr.items.get(st.key)
        if it is None or it.state == "done":
            return Eta(None, reason="finishing (the WAL stream, syncing the files)")
        phase = PHASES.get(st.phase or "", "backup")
        wait = st.wait
        if phase == "checkpoint":
            left = walwait.wait_eta(wait)
            if left is not None:
                return Eta(left, reason=walwait.WAIT_ONLY)
            return Eta(None, reason=walwait.wait_reason(wait)
                       or "waiting for the checkpoint to finish")
        if phase in ("starting", "estimating"):
            return Eta(None, reason="estimating the backup size")
        if phase == "archive-wait":
            if wait is not None and wait["left_s"] is not None:
                return Eta(wait["left_s"])
            return Eta(None, reason=walwait.wait_reason(wait)
                          or "waiting for the last WAL segment to be archived")
        if phase == "wal-files":
            return Eta(None, reason="sending the WAL files")
        if not st.total:
            return Eta(None, reason="no total: the server does not estimate it "
                                    "(--no-estimate-size)")
        w = next((w for w in tr.workers.values() if w.item == it.key), None)
        # the last 30 s: a multi-GB stream's pace moves with the files it
        # reads and the host's other work; 10 s followed those moves too closely
        rate = w.bytes_rate.rate(ETA_WINDOW_S) if w is not None else None
        if not rate or rate <= 0:
            return Eta(None, reason="measuring")
        left = max(0.0, float(st.total) - float(st.streamed or 0)) / rate
        st.stop_ahead = None
        if _waits_for_archive(tr):
            # its end waits for the archiver: the backlog now, beyond the stream's rest
            st.stop_ahead = st.wal.stop_ahead(left)
            left += st.stop_ahead or 0.0
        return Eta(left)

    def job_fields(self, tr: Tracker, workers: list[dict[str, Any]],
                   state: str) -> dict[str, Any]:
        st = _st(tr)
        args = _args(tr.job)
        opts = st.options
        ts = st.tablespaces or (None, None)
        it = tr.items.get(st.key or "")
        phase = st.phase if state == "running" and it is not None and \
            it.state != "done" else None
        if state == "running" and phase is None:
            phase = "finishing" if it is not None else "starting"
        if st.phase is None and it is not None and it.state != "done":
            basis = "none: the server has no pg_stat_progress_basebackup (PostgreSQL 13+)"
        elif st.total:
            basis = "server's estimate (pg_stat_progress_basebackup)"
        else:
            basis = "none: no total (--no-estimate-size)" if it is not None else "unknown"
        max_rate = opts.get("max_rate") or args.max_rate
        return {"phase": phase, "progress_basis": basis, "scope": "cluster", "backup": {
            "phase": st.phase,
            "total_bytes": st.total, "streamed_bytes": st.streamed,
            "total_is_estimate": True,
            "tablespaces_total": ts[1], "tablespaces_streamed": ts[0],
            "wal_bytes": st.wal_bytes,
            "max_rate_bytes_per_s": max_rate,
            "fast_checkpoint": opts.get("fast_checkpoint", args.checkpoint == "fast"),
            "wal_method": args.wal_method or ("stream" if args.program else None),
            "format": args.format, "compression": opts.get("server_compression")
            or args.compression,
            "wait": st.wait if state == "running" else None,
            "eta_basis": _eta_basis(tr, st) if state == "running" else None}}

    def verdict(self, tr: Tracker, snap: Snapshot, settings: dict[str, str]) -> Verdict | None:
        """What a base backup waits for that no wait event names well: the
        checkpoint before it, WAL archiving after it, its client's last steps."""
        st = _st(tr)
        it = tr.items.get(st.key or "")
        if it is None:
            return None
        if it.state == "done":  # no more work to share out: no "more jobs" advice
            return Verdict("nothing", "every data file is sent: pg_basebackup finishes (the "
                           "rest of its WAL stream, its manifest, syncing the files)")
        phase = PHASES.get(st.phase or "")
        wait = st.wait or {}
        if phase == "checkpoint":
            ck = wait.get("checkpoint") or {
                "fast": _fast(tr), "bound_s": None, "left_s": None, "past_bound": False}
            return Verdict("checkpoint", walwait.checkpoint_text(ck, FAST_OPTION))
        if phase == "archive-wait":
            arch = wait.get("archiving")
            text = walwait.archiving_text(arch, "the backup's last segment", NEVER_ENDS)
            failing = st.wal.failing()
            if arch is None and failing:  # a recording without the WAL position
                text += f", and {failing}: fix archive_command (the server log says why), " \
                    f"or {NEVER_ENDS}"
            return Verdict("archiving", text)
        return None

    # ---- outcome -----------------------------------------------------------

    def settle_at_end(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> bool | None:
        """A backup whose data files were all sent, or whose plain-format
        target holds its final manifest, finished its base backup."""
        st = _st(tr)
        it = tr.items.get(st.key or "")
        if it is None or it.state == "done":
            return None
        phase = PHASES.get(st.phase or "")
        if phase in _FINAL or _manifest_written(ctx.target_dir):
            tr.finish(it, snap.wall)
        return None

    def leftover_verdict(self, tr: Tracker, left: list[Item]) -> tuple[str, str]:
        st = _st(tr)
        return "ended", (f"the backup's processes are gone after its last data files "
                         f"({_how_far(st)}); whether it finished cannot be seen here (no "
                         "backup_manifest in a target this user can read, and its exit status "
                         "is not ours: `pgparmon run` knows)")

    def cut_short(self, tr: Tracker, snap: Snapshot) -> str | None:
        st = _st(tr)
        it = tr.items.get(st.key or "")
        if it is None or it.state == "done":
            return None
        if _near_end(st):
            return None  # the last samples may have missed its end: leftover_verdict
        return f"the base backup stopped {_how_far(st)}"


def _st(tr: Tracker) -> BasebackupState:
    return state_of(tr, BasebackupState)


def _progress_of(snap: Snapshot, pid: int | None) -> BackupProgress | None:
    if snap.db is None or pid is None:
        return None
    return next((p for p in snap.db.basebackups or () if p.pid == pid), None)


def _args(job: Job) -> ClientArgs:
    """The command's options (a recording keeps its redacted argv only)."""
    if job.args is not None:
        return job.args
    if not job.command:
        return ClientArgs(program="")
    return parse_client_cmdline(list(job.command), PgBasebackup.client_specs)


def _fast(tr: Tracker) -> bool:
    """Whether the backup asked for a fast checkpoint (its command's text,
    else its command line)."""
    opts = _st(tr).options
    return bool(opts.get("fast_checkpoint") or _args(tr.job).checkpoint == "fast")


def _waits_for_archive(tr: Tracker) -> bool:
    """Whether the server waits at the backup's end for its last segment
    to be archived (-X none: its command does not say NOWAIT / WAIT 0)."""
    opts = _st(tr).options
    if "waits_for_archive" in opts:
        return bool(opts["waits_for_archive"])
    return _args(tr.job).wal_method == "none"


def _eta_basis(tr: Tracker, st: BasebackupState) -> str | None:
    """What the ETA counts."""
    phase = PHASES.get(st.phase or "")
    if phase == "checkpoint":
        return ("the spread checkpoint's bound less the time it has run; the copy not "
                "counted until it runs" if not _fast(tr) else None)
    if phase == "archive-wait":
        return "the archiver's backlog up to the backup's last segment, at its pace"
    if phase == "backup" and st.total:
        ahead = st.stop_ahead
        return ("the bytes left at the rate of the last 30 s"
                + (f"; the end's wait for the archiver beyond it ({fmt.duration(ahead)}: its "
                   "backlog now at its pace, at least)" if ahead else ""))
    return None


def _how_far(st: BasebackupState) -> str:
    phase = st.phase or "before it began"
    total, streamed = st.total, st.streamed
    if total and streamed is not None:
        return (f"at {fmt.size(streamed)} of {fmt.size(total)} ({streamed / total:.0%}), "
                f"phase: {phase}")
    if streamed:
        return f"at {fmt.size(streamed)}, phase: {phase}"
    return f"phase: {phase}"


def _near_end(st: BasebackupState) -> bool:
    """Last seen with (nearly) every byte of its estimate sent: the end may
    have come between two samples."""
    total, streamed = st.total, st.streamed or 0
    return total is not None and total > 0 and streamed >= 0.97 * float(total)


def _manifest_written(target: str | None) -> bool:
    """pg_basebackup renames backup_manifest.tmp to backup_manifest last."""
    return bool(target) and os.path.isfile(os.path.join(str(target), "backup_manifest"))
