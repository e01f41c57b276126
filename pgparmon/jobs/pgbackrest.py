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
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import TYPE_CHECKING, Any

from .. import units as fmt
from ..analyze.bottleneck import BUSY_CPU, HOST_CPU, Verdict
from ..analyze.items import Item, WorkerState
from ..cmdline import ClientArgs
from ..snapshot import Backend, ClientProc, Snapshot
from .backup_phases import ARCHIVE_WAIT, BACKUP, STARTING
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

if TYPE_CHECKING:
    from ..analyze.progress import Tracker
    from ..readers.procs import ProcInfo

APP = "pgBackRest"
INFERRED = ("inferred: user, client address and application_name (pgBackRest's processes "
            "are not on this host)")
COMMANDS = ("backup",)  # restore runs with the server down: not followed yet
KEY = "pgbackrest"
COPY_RATE_WINDOW_S = 30.0  # the ETA's rate: the copy's last seconds
LOCK_SUFFIX = "-backup.lock"
# its start: `pg_backup_start('pgBackRest backup started at ' || current_timestamp,
# true|false ...)` (pg_start_backup before 15): the second argument asks for a
# fast checkpoint
_START = re.compile(r"pg_(?:backup_start|start_backup)\s*\(([^,]*),\s*(true|false)?",
                    re.IGNORECASE)
# what it asks right after pg_backup_start (its databases, its tablespaces,
# a forced switch when the segment had not moved): the start is done
_AFTER_START = re.compile(r"pg_catalog\.pg_(?:database|tablespace|switch_(?:wal|xlog)|"
                          r"create_restore_point)\b", re.IGNORECASE)
_STOP = re.compile(r"pg_(?:backup_stop|stop_backup)\s*\(", re.IGNORECASE)
# the segment its stop waits for (every one up to it), in the manifest's copy
# it saves in its repository just before it looks for them
_ARCHIVE_STOP = re.compile(r'^backup-archive-stop="([0-9A-F]{24})"$', re.MULTILINE)
MANIFEST_COPY = "backup.manifest.copy"
FAST_OPTION = "--start-fast (start-fast=y in its configuration)"
TIMES_OUT = "the backup fails when its archive-timeout (60 s unless set) runs out"
ARCHIVE_TIMEOUT_S = 60.0  # archive-timeout's default


def command_of(argv: list[str] | tuple[str, ...]) -> str | None:
    """pgBackRest's command word (`backup`, `archive-push`, `backup:local`...):
    the first argument that is not an option or an option's value."""
    skip = False
    for a in list(argv)[1:]:
        if skip:
            skip = False
            continue
        if a.startswith("--"):
            skip = "=" not in a and not _is_flag(a)
            continue
        return a
    return None


def _is_flag(opt: str) -> bool:
    """Long options pgBackRest takes without a value (negations, booleans
    given bare): a value-taking option given as `--opt value` takes the next
    argument instead."""
    name = opt[2:]
    return name.startswith(("no-", "reset-")) or name in (
        "online", "start-fast", "stop-auto", "delta", "force", "archive-check",
        "archive-copy", "backup-standby", "resume", "checksum-page", "compress",
        "expire-auto", "dry-run", "set", "beta")


def option(argv: list[str] | tuple[str, ...], name: str) -> str | None:
    """A `--name=value` or `--name value` option's value."""
    args = list(argv)
    for i, a in enumerate(args):
        if a == f"--{name}" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


class PgBackRest(Driver):
    kind = "pgbackrest"
    programs = ("pgbackrest",)
    data_flow = "out"
    has_leader = True  # its one session: the backup's start and stop
    plans_work = True  # the data directory's size, once (a full backup's total)
    needs_plan = False
    fixed_workers = False  # local processes start after the backup's start
    whole_cluster = True
    phases = (STARTING, BACKUP, ARCHIVE_WAIT)
    advice_terms = (("-j ", "process-max "), ("COPY", "file copy"))

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

    def member_pids(self, job: Job, snap: Snapshot) -> set[int] | None:
        return tree_member_pids(job, snap)

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
            tr.kind_state.setdefault("backrest", {"procs": {}, "cpu": {}})["pgdata"] = size
        tr.planned = True  # the work list: this one backup
        return True

    # ---- the tool's own status (live) ----------------------------------------

    def read_status(self, job: Job, clients: tuple[ClientProc, ...],
                    prev: dict[str, Any] | None) -> dict[str, Any] | None:
        """pgBackRest's backup lock file, found open in its processes: its
        JSON (the percentage done), read each sample; the backup's directory
        in a posix repository (the files its processes write), and, once no
        process copies, whether the stanza's backup.info lists it (the
        backup completed)."""
        prev = prev or {}
        out: dict[str, Any] = {"lock_file": prev.get("lock_file"), "lock": {},
                               "backup_dir": prev.get("backup_dir")}
        opened = [f.path for c in clients for f in c.open_files or ()]
        paths = sorted({p for p in opened if p.endswith(LOCK_SUFFIX)})
        for path in paths or ([out["lock_file"]] if out["lock_file"] else []):
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read(4096)
            except OSError:
                continue
            try:
                data = json.loads(text) if text.strip() else {}
            except ValueError:
                data = {}  # being rewritten: the next sample reads it
            out.update(lock_file=path, lock=data if isinstance(data, dict) else {})
            break
        copying = False
        for p in opened:
            i = p.find("/pg_data/")
            if i > 0 and "/backup/" in p[:i]:
                out["backup_dir"] = p[:i]
                copying = True
        if out["backup_dir"] and not copying:
            out["completed"] = _listed(out["backup_dir"])
            out["archive_stop"] = prev.get("archive_stop") or _archive_stop(out["backup_dir"])
        return out if out["lock_file"] or out["backup_dir"] else None

    # ---- observe -----------------------------------------------------------

    def file_evidence(self, tr: Tracker, snap: Snapshot, running_now: dict[str, int]) -> None:
        st = tr.kind_state.setdefault("backrest", {"procs": {}, "cpu": {}})
        it = tr.items.get(KEY)
        if it is None:
            it = Item(key=KEY, kind="backup", relation=None, name=f"{_type(tr)} backup",
                      size=1.0, work=1.0, state="running", started=snap.wall)
            tr.add(it)
        walwait.watch(st).observe(snap)
        lock = (snap.tool or {}).get("lock") or {}
        pct = lock.get("pctCplt")
        if isinstance(pct, (int, float)):
            st["pct"] = max(float(pct), st.get("pct") or 0.0)
        for k in ("sz", "szCplt"):
            if isinstance(lock.get(k), (int, float)):
                st[k] = int(lock[k])
        for k in ("lock_file", "backup_dir"):
            if snap.tool and snap.tool.get(k):
                st[k] = snap.tool[k]
        if snap.tool and "completed" in snap.tool:
            st["completed"] = snap.tool["completed"]
        if snap.tool and snap.tool.get("archive_stop"):
            st["archive_stop"] = snap.tool["archive_stop"]
        inflight = self._local_processes(tr, st, snap)
        _aim_stop(tr, st, snap)
        st["phase"] = _phase(tr, st, snap)
        st["wait"] = _waits(tr, st, snap)
        if it.state == "done":
            return
        # pgBackRest counts a file when it is finished: one large file read
        # for minutes moves its percentage by nothing. In bytes (a full
        # backup's total: the data directory; 2.48+: its own), add how far
        # the local processes are into the files they read now.
        total = st.get("sz") or (st.get("pgdata") if _type(tr) == "full" else None)
        if total:
            done = (st.get("pct") or 0.0) / 10000.0 * total + inflight
            if it.work != total:
                it.work = it.size = float(total)
                it.done = 0.0
            st["unit"] = "bytes"
        elif st.get("pct") is not None:
            done, it.work, st["unit"] = st["pct"], 10000.0, "percent"
        else:
            return
        it.done = max(it.done, min(0.999 * it.work, done))
        if st["unit"] == "bytes":
            it.bytes_done = int(it.done)
        if st["phase"] == "copy":  # the copy's own pace, not the start's wait
            hist = st.setdefault("hist", [])
            hist.append((snap.ts, it.done, it.work))
            while len(hist) > 2 and hist[-1][0] - hist[0][0] > COPY_RATE_WINDOW_S:
                del hist[0]

    def _local_processes(self, tr: Tracker, st: dict[str, Any], snap: Snapshot) -> float:
        """Each local process that reads a data file now is a worker row: the
        file, how far in, the process's read rate and CPU. Returns the bytes
        read so far of the files being read now."""
        inflight = 0.0
        sizes = {f.path: f.size for f in snap.files}
        procs: dict[int, WorkerState] = st["procs"]
        root = tr.job.client_pid
        active: set[int] = set()
        for c in snap.clients:
            if c.pid == root:
                continue
            reading = [f for f in c.open_files or () if f.path in sizes]
            prev_cpu = st["cpu"].get(c.pid)
            if c.cpu_s is not None:
                st["cpu"][c.pid] = (snap.ts, c.cpu_s)
            if not reading:
                continue
            active.add(c.pid)
            w = procs.setdefault(c.pid, WorkerState(pid=c.pid, client_pid=c.pid))
            f = max(reading, key=lambda f: sizes[f.path])
            inflight += sum(min(r.position, sizes[r.path]) for r in reading)
            w.phase = "backup"
            w.relation = _data_path(f.path, tr)
            w.progress = min(1.0, f.position / sizes[f.path]) if sizes[f.path] else None
            w.wait_event = None
            w.state = "active"
            process_row(st, w, c, snap, prev_cpu, c.read_chars)
        # rows of their own beside the server sessions
        prune_rows(tr, st, procs, active)
        return inflight

    def done_when_unseen(self, tr: Tracker, it: Item, snap: Snapshot, sessions: set[int]) -> bool:
        return it.key != KEY  # the backup is not a statement: its end is the processes'

    def between_steps(self, tr: Tracker) -> bool:
        # the start (checkpoint, archive check), the stop, the manifest
        return (tr.kind_state.get("backrest") or {}).get("phase") != "copy"

    def fraction(self, tr: Tracker) -> float | None:
        st = tr.kind_state.get("backrest") or {}
        it = tr.items.get(KEY)
        if it is None or st.get("unit") is None and it.state != "done":
            return None
        return it.fraction

    def has_total(self, tr: Tracker) -> bool:
        return (tr.kind_state.get("backrest") or {}).get("unit") is not None

    def streams(self, tr: Tracker) -> int | None:
        return None  # a queue of files, not of items: no "one item left" tail

    def own_eta(self, tr: Tracker) -> tuple[float | None, str | None] | None:
        st = tr.kind_state.get("backrest") or {}
        phase = st.get("phase")
        wait = st.get("wait")
        if phase == "starting":
            left = walwait.wait_eta(wait)
            if left is not None:
                return left, walwait.WAIT_ONLY
            arch = (wait or {}).get("archiving")
            if arch and arch["segments"] == 0:
                return None, ("starting: the segment before the backup's is archived; "
                              "pgBackRest checks its repository, builds its manifest and "
                              "starts its processes")
            return None, walwait.wait_reason(wait) or ("starting: the checkpoint, then the WAL "
                                                       "before the backup archived")
        if phase == "archive-wait":
            if wait is not None and wait["left_s"] is not None:
                return wait["left_s"], None
            return None, walwait.wait_reason(wait) or "waiting for the backup's WAL to be archived"
        if phase == "finishing":
            return None, "finishing (the manifest)"
        if st.get("pct") is None and st.get("unit") != "bytes":
            return None, ("no percentage from pgBackRest yet (2.38+ writes it to its lock "
                          "file)" if st.get("lock_file") or tr.job.client_pid else
                          "pgBackRest's processes are not on this host: no progress")
        left, why = window_eta(tr.items.get(KEY), st.get("hist") or ())
        st["stop_ahead"] = None
        if left is not None and phase == "copy" and _archive_check(tr):
            # the stop waits for the archiver: the backlog now, beyond the copy's rest
            st["stop_ahead"] = walwait.watch(st).stop_ahead(left)
            left += st["stop_ahead"] or 0.0
        return left, why

    def job_fields(self, tr: Tracker, workers: list[dict[str, Any]],
                   state: str) -> dict[str, Any]:
        st = tr.kind_state.get("backrest") or {}
        argv = tr.job.command
        names = {"starting": "starting (checkpoint, archive check)", "copy": "copying files",
                 "archive-wait": "stopping (waiting for WAL archiving)",
                 "finishing": "finishing (manifest)"}
        if st.get("unit") == "bytes":
            basis = ("pgBackRest's files done (its lock file) + the files its processes "
                     "read now, of " + ("its total" if st.get("sz") else "the data directory"))
        elif st.get("pct") is not None:
            basis = "pgBackRest's own percentage (its lock file)"
        elif tr.job.client_pid:
            basis = "none yet: pgBackRest has written no percentage"
        else:
            basis = "none: pgBackRest's processes are not on this host"
        return {
            "phase": names.get(st.get("phase") or "", st.get("phase")) if state == "running"
            else None,
            "progress_basis": basis, "scope": "cluster",
            "backup": {
                "tool": "pgbackrest", "type": option(argv, "type") or "incr",
                "stanza": option(argv, "stanza"),
                "process_max": tr.job.jobs,
                "processes_copying": len(st.get("active") or ()),
                "percent_done": round(st["pct"] / 100.0, 2) if st.get("pct") is not None
                else None,
                "total_bytes": st.get("sz") or (st.get("pgdata") if _type(tr) == "full"
                                                else None),
                "done_bytes": st.get("szCplt"),
                "lock_file": st.get("lock_file"), "backup_dir": st.get("backup_dir"),
                "compression": option(argv, "compress-type"),
                "wait": st.get("wait") if state == "running" else None,
                "eta_basis": _eta_basis(tr, st) if state == "running" else None,
            }}

    def verdict(self, tr: Tracker, snap: Snapshot, settings: dict[str, str]) -> Verdict | None:
        st = tr.kind_state.get("backrest") or {}
        phase = st.get("phase")
        if phase in ("starting", "archive-wait"):
            return _wait_verdict(st.get("wait"), phase, walwait.watch(st).failing())
        if phase == "finishing":
            return Verdict("nothing", "pgBackRest finishes the backup (pg_backup_stop, its "
                           "manifest): no file is copied now")
        if phase != "copy":
            return None
        if not st.get("active"):  # its local processes, none reading a data file yet
            return Verdict("starting", f"pgBackRest's local processes are starting (process-max "
                           f"{tr.job.jobs or 1}): none reads a data file yet")
        cpus = list((st.get("cpu_pct") or {}).values())
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
        st = tr.kind_state.get("backrest") or {}
        it = tr.items.get(KEY)
        if it is not None and it.state != "done" and st.get("completed"):
            tr.finish(it, snap.wall)
            if st.get("unit") == "bytes":
                it.bytes_done = int(it.work)
        return None

    def leftover_verdict(self, tr: Tracker, left: list[Item]) -> tuple[str, str]:
        st = tr.kind_state.get("backrest") or {}
        return "ended", (f"pgBackRest's processes are gone after the copy "
                         f"({_how_far(st, tr.items.get(KEY))}); "
                         "whether the backup completed cannot be seen here (its repository's "
                         "backup.info is not readable by this user; `pgbackrest info` says)")

    def cut_short(self, tr: Tracker, snap: Snapshot) -> str | None:
        st = tr.kind_state.get("backrest") or {}
        it = tr.items.get(KEY)
        if it is None or it.state == "done":
            return None
        if st.get("copied") and st.get("backup_dir") and st.get("completed") is None:
            return None  # after the copy, a repository we cannot read: leftover_verdict
        return f"the backup stopped {_how_far(st, it)}"

    def exit_reason(self, code: int) -> str:
        return f"pgbackrest exit code {code}"


def _archive_check(tr: Tracker) -> bool:
    """Whether pgBackRest waits for the archive at its start and stop
    (archive-check, on unless the command line turns it off; a setting in its
    configuration file is not seen)."""
    argv = tr.job.command
    return "--no-archive-check" not in argv and \
        (option(argv, "archive-check") or "y").lower() not in ("n", "no", "false", "0")


def _session(tr: Tracker, snap: Snapshot) -> Backend | None:
    """Its session on the server (the one that starts and stops the backup)."""
    members = [b for b in tr.members(snap) if b.backend_type == "client backend"]
    return next((b for b in members if _START.search(b.query or "")), None) or \
        (members[0] if members else None)


def _waits(tr: Tracker, st: dict[str, Any], snap: Snapshot) -> dict[str, Any] | None:
    """What the backup waits on at its start (the checkpoint of
    pg_backup_start; the archiver, up to the segment pg_backup_start switches
    out of) and at its stop (the archiver, up to the stop's segment), with
    their figures (walwait)."""
    ww = walwait.watch(st)
    phase = st.get("phase")
    checks = _archive_check(tr)
    if phase == "starting":
        b = _session(tr, snap)
        m = _START.search(b.query or "") if b is not None else None
        if m or b is not None and _AFTER_START.search(b.query or ""):
            st["start_seen"] = True  # pg_backup_start has switched out of the segment
        ck = None
        if m and b is not None and b.state == "active":
            fast = m.group(2).lower() == "true" if m.group(2) else \
                "--start-fast" in tr.job.command
            ck = ww.checkpoint(snap, b, fast)
        arch = None
        if checks:
            seen = bool(st.get("start_seen"))
            ww.aim("start", fixed=seen, ahead=0 if seen else 1)
            arch = _looking(tr, ww, b)
        return walwait.wait_doc("start", ck, arch)
    if phase == "archive-wait" and checks:
        return walwait.wait_doc("stop", None, ww.archiving("stop"))
    return None


def _aim_stop(tr: Tracker, st: dict[str, Any], snap: Snapshot) -> None:
    """The segment pgBackRest's stop waits for (every one up to it, each in
    turn): its manifest's backup-archive-stop once the copy of the manifest
    it saves before it looks shows it (exact; a posix repository this user
    can read); before that, once its session is seen in pg_backup_stop, the
    segment being written (the one pg_backup_stop switches out of), fixed
    once the statement has run."""
    ww = walwait.watch(st)
    segno = walwait.segment_number(st.get("archive_stop"), ww.seg_size)
    if segno is not None:
        ww.aim("stop", fixed=True, segno=segno)
        return
    b = next((b for b in tr.members(snap) if _STOP.search(b.query or "")), None)
    if b is not None:
        running = b.state == "active"
        ww.aim("stop", fixed=not running, ahead=1 if running else 0)


def _archive_timeout(tr: Tracker) -> tuple[float, bool]:
    """pgBackRest's archive-timeout in seconds, and whether its command line
    gives it (else its default: a setting in its configuration file is not
    seen)."""
    given = option(tr.job.command, "archive-timeout")
    try:
        return (float(given), True) if given else (ARCHIVE_TIMEOUT_S, False)
    except ValueError:
        return ARCHIVE_TIMEOUT_S, False


def _looking(tr: Tracker, ww: walwait.WalWatch, b: Backend | None) -> dict[str, Any] | None:
    """The archiver's figures for the start's wait, and when pgBackRest sees
    the segment in its repository (`seen_in_s`). Its session goes idle after
    its last statement before it looks (the start's pg_database and
    pg_tablespace lists; a forced switch); from then it looks, then again
    after ever longer sleeps (walwait.next_look), so it sees the segment up
    to a sleep after the archiver archived it (after a minute's wait, its
    next look is 38 s later), or gives up at its archive-timeout
    (`gives_up`: the backup fails). Only at the start: at its stop it has
    closed its session, and it looks for each segment up to the stop's in
    turn, each with its sleeps from 0.1 s again; from a standby it first
    waits for the standby's replay."""
    arch = ww.archiving("start")
    if arch is None or b is None or b.state != "idle" or b.state_change is None \
            or not _AFTER_START.search(b.query or "") or _from_standby(tr):
        return arch
    limit, given = _archive_timeout(tr)
    seen = ww.polled("start", b.state_change, limit)
    arch["seen_in_s"] = round(seen, 1) if seen is not None else None
    arch["archive_timeout_s"] = limit if given else None
    arch["gives_up"] = ww.gives_up("start", b.state_change, limit)
    return arch


def _from_standby(tr: Tracker) -> bool:
    """--backup-standby on its command line (a setting in its configuration
    file is not seen)."""
    argv = tr.job.command
    return "--backup-standby" in argv or \
        (option(argv, "backup-standby") or "n").lower() in ("y", "yes", "true", "1")


def _wait_verdict(wait: dict[str, Any] | None, phase: str, failing: str | None) -> Verdict:
    """The start's and the stop's limit: the checkpoint, then the archiver
    (`failing`: archive_command fails, as pg_stat_archiver says)."""
    what = ("the segment before the backup's start" if phase == "starting"
            else "the backup's last segment")
    ck = wait["checkpoint"] if wait else None
    arch = wait["archiving"] if wait else None
    if failing and arch is None:  # no WAL position read (an older recording)
        return Verdict("archiving", f"pgBackRest waits for WAL archiving, and {failing}: fix "
                       f"archive_command (the server log says why), or {TIMES_OUT}")
    if arch is not None and arch["failing"]:
        return Verdict("archiving", walwait.archiving_text(arch, what, TIMES_OUT))
    if ck is not None:
        text = walwait.checkpoint_text(ck, FAST_OPTION, "pgBackRest")
        if arch is not None and arch["segments"]:
            text += "; then it checks the archive: " + walwait.archiving_text(arch, what, TIMES_OUT)
        return Verdict("checkpoint", text)
    if arch is not None:
        return Verdict("archiving", walwait.archiving_text(arch, what, TIMES_OUT) +
                       _looks_text(arch))
    if phase == "starting":
        return Verdict("starting", "pgBackRest prepares the backup (its checks, "
                       "pg_backup_start): no file is copied yet")
    return Verdict("archiving", "waiting for the backup's last WAL segment to be "
                   "archived (archive_command, archive-push)")


def _looks_text(arch: dict[str, Any]) -> str:
    """When pgBackRest sees the start's segment in its repository, or that
    its archive-timeout runs out first (nothing where neither is known)."""
    if arch.get("gives_up"):
        limit = arch.get("archive_timeout_s")
        timeout = (f"its archive-timeout ({fmt.duration(limit)}, its command line)" if limit
                   else f"its archive-timeout ({fmt.duration(ARCHIVE_TIMEOUT_S)} unless its "
                   "configuration sets another)")
        return (f"; at this pace {timeout} runs out first and the backup fails: a faster "
                "archive_command, or a longer --archive-timeout")
    seen = arch.get("seen_in_s")
    if not seen:
        return ""
    return ("; pgBackRest looks for it in its repository after ever longer sleeps (from "
            f"0.1 s, each the sum of the two before): it sees it in about {fmt.about(seen)}")


def _eta_basis(tr: Tracker, st: dict[str, Any]) -> str | None:
    """What the ETA counts."""
    phase = st.get("phase")
    if phase == "starting":
        return ("the start's wait: the longest of the spread checkpoint's bound and the "
                "archiver's backlog at its pace; the copy not counted until it runs")
    if phase == "archive-wait":
        return "the archiver's backlog up to the backup's last segment, at its pace"
    if phase == "copy":
        ahead = st.get("stop_ahead")
        return ("the copy's rest at its rate over the last 30 s"
                + (f"; the stop's wait for the archiver beyond it ({fmt.duration(ahead)}: its "
                   "backlog now at its pace, at least)" if ahead else ""))
    return None


def process_row(st: dict[str, Any], w: WorkerState, c: ClientProc, snap: Snapshot,
                prev_cpu: tuple[float, float] | None, counted: int | None) -> None:
    """A pgBackRest process's row: its byte counter (read or written) and
    its CPU since the last sample."""
    if counted is not None:
        w.bytes_done = counted
        w.bytes_rate.add(snap.ts, counted)
    if prev_cpu is not None and c.cpu_s is not None and snap.ts > prev_cpu[0]:
        st.setdefault("cpu_pct", {})[c.pid] = \
            100.0 * (c.cpu_s - prev_cpu[1]) / (snap.ts - prev_cpu[0])
    w.last_seen = snap.ts


def prune_rows(tr: Tracker, st: dict[str, Any], procs: dict[int, WorkerState],
               active: set[int]) -> None:
    """The rows of the processes that copy now; those that stopped go."""
    for pid in list(procs):
        if pid not in active:
            del procs[pid]
            tr.workers.pop(pid, None)
            st.get("cpu_pct", {}).pop(pid, None)
    tr.workers.update(procs)
    st["active"] = sorted(active)


def how_far(it: Item | None, has_total: bool, phase: str | None) -> str:
    """How far a copy got, in bytes of its total, for a verdict."""
    if it is None or not has_total:
        return f"in phase {phase or '?'}"
    return (f"at {100.0 * it.fraction:.1f}% ({fmt.size(it.done)} of {fmt.size(it.work)}), "
            f"phase {phase or '?'}")


def window_eta(it: Item | None, hist: Any) -> tuple[float | None, str | None]:
    """The rest of the copy at the rate of its last seconds: hist holds
    (ts, done, work) samples, those of another total left out.  A rate needs
    a second of them, or three samples (two intervals) where the samples
    come faster: a copy that lasts a second or two at a short interval
    still gets an ETA before its end."""
    pts = [h for h in hist if it is not None and h[2] == it.work]
    if it is None or len(pts) < 2 or (len(pts) < 3 and pts[-1][0] - pts[0][0] < 1.0):
        return None, "measuring"
    rate = (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])
    if rate <= 0:
        return None, "measuring"
    return max(0.0, it.work - it.done) / rate, None


def _listed(backup_dir: str) -> bool | None:
    """Whether the stanza's backup.info lists this backup (written when it
    completes); None: it cannot be read here."""
    label = os.path.basename(backup_dir.rstrip("/"))
    try:
        with open(os.path.join(os.path.dirname(backup_dir.rstrip("/")), "backup.info"),
                  encoding="utf-8", errors="replace") as f:
            return any(line.startswith(label + "=") for line in f)
    except OSError:
        return None


def _archive_stop(backup_dir: str) -> str | None:
    """The segment the backup's stop waits for, from the copy of its
    manifest in the repository (its [backup] section, at the top; None: not
    written yet, encrypted, or not readable here)."""
    try:
        with open(os.path.join(backup_dir, MANIFEST_COPY), encoding="utf-8",
                  errors="replace") as f:
            head = f.read(16384)
    except OSError:
        return None
    m = _ARCHIVE_STOP.search(head)
    return m.group(1) if m else None


def _type(tr: Tracker) -> str:
    """full | diff | incr (pgBackRest's default: incr, full when there is none yet)."""
    return option(tr.job.command, "type") or "incr"


def data_directory_bytes(pgdata: str) -> int | None:
    """The size of the files a full backup copies from the data directory
    (pg_wal's segments and the server's runtime files are not copied)."""
    files = data_directory_files(pgdata)
    return sum(files.values()) or None if files is not None else None


def data_directory_files(pgdata: str) -> dict[str, int] | None:
    """The files a backup copies from the data directory (paths relative to
    it) and their sizes; None when it cannot be read."""
    skip = {"pg_wal", "pg_xlog", "pg_replslot", "pg_stat_tmp", "pg_dynshmem", "pg_notify",
            "pg_serial", "pg_snapshots", "pg_subtrans"}
    out: dict[str, int] = {}
    try:
        for root, dirs, files in os.walk(pgdata):
            if root == pgdata:
                dirs[:] = [d for d in dirs if d not in skip]
            for name in files:
                path = os.path.join(root, name)
                try:
                    out[os.path.relpath(path, pgdata)] = os.stat(path).st_size
                except OSError:
                    continue
    except OSError:
        return None
    return out


def _phase(tr: Tracker, st: dict[str, Any], snap: Snapshot) -> str:
    """starting | copy | archive-wait | finishing, from the local processes
    (children of the main one, alive while files are copied), the session's
    statement and the percentage."""
    locals_ = [c for c in snap.clients if c.pid != tr.job.client_pid]
    if locals_ and (st.get("pct") or 0) < 9990:
        st["copied"] = True
        return "copy"
    query = " ".join((b.query or "") for b in tr.members(snap)).lower()
    if "pg_backup_stop" in query or "pg_stop_backup" in query:
        return "archive-wait"
    if st.get("copied") and _archive_check(tr) and walwait.watch(st).behind("stop"):
        # its session closed after pg_backup_stop: it looks in its repository
        # for every segment up to the stop's, which the archiver has not all
        # archived yet
        return "archive-wait"
    if st.get("copied") or (st.get("pct") or 0) > 0:
        return "finishing"
    return "starting"


# The data directory's sub-directories a backup reads files from
# (pg_wal and the server's runtime directories are not copied)
_DATA_DIRS = ("base", "global", "pg_tblspc", "pg_xact", "pg_clog", "pg_multixact",
              "pg_commit_ts", "pg_logical", "pg_twophase", "pg_stat", "pg_replslot")


def _data_path(path: str, tr: Tracker) -> str:
    """A data file's path relative to the data directory (as pgBackRest
    names it: base/16384/16397, pg_xact/0000); a file at the directory's top
    (PG_VERSION, postgresql.auto.conf) by its name. The last such directory
    in the path counts: the data directory's own path may hold one."""
    best = -1
    for d in _DATA_DIRS:
        best = max(best, path.rfind(f"/{d}/"))
    return path[best + 1:] if best >= 0 else os.path.basename(path)


def _how_far(st: dict[str, Any], it: Item | None = None) -> str:
    """How far the backup got: pgBackRest's percentage, or (ahead of it,
    when the total is in bytes) the bytes its local processes were seen to
    read; a copy whose local processes ended before it was done reads
    "copy", not "finishing" (they were killed or failed)."""
    pct = st.get("pct")
    phase = st.get("phase") or "?"
    seen: float | None = None
    if it is not None and st.get("unit") == "bytes" and it.work > 0:
        seen = it.fraction
    if seen is not None and it is not None and seen > 0 and (
            pct is None or 100.0 * seen > pct / 100.0 + 0.05):
        own = f"{pct / 100.0:.1f}%" if pct is not None else "none yet"
        where = (f"at {100.0 * seen:.1f}% by the bytes read ({fmt.size(it.done)} of "
                 f"{fmt.size(it.work)}; pgBackRest's own count: {own})")
        size = ""
    else:
        where = f"at {pct / 100.0:.1f}%" if pct is not None else "before any progress"
        size = f" ({fmt.size(st['szCplt'])} of {fmt.size(st['sz'])})" if st.get("sz") else ""
        seen = pct / 10000.0 if pct is not None else None
    if phase == "finishing" and (seen is None or seen < 0.99):
        phase = "copy (its local processes ended before it was done)"
    return f"{where}{size}, phase: {phase}"
