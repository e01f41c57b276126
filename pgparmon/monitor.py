"""The analysis loop: Source -> Snapshot -> Tracker -> published sample.

The Monitor talks to nothing itself: every reading comes from its Source (the
live server and host, or a recording), so a replay goes through exactly this
code and reaches the same verdicts anywhere. What differs between tool kinds
is asked of the job's driver (jobs/). tick() builds the `pgparmon.sample/1`
object from the tracker's state.
"""

from __future__ import annotations

import bisect
import gc
import os
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .analyze import bottleneck, eta, hostrates
from .analyze.progress import Tracker
from .analyze.warnings import (
    CHECKSUMS_NOTE,
    FULL_BYTES,
    BackupWal,
    Checkpoints,
    FreeSpace,
    JobWarning,
    early_foreign_keys,
    exclusive_waiters,
)
from .connect import ConnTarget
from .discover import DiscoveryError
from .exitcodes import ExitCode
from .jobs.base import Job
from .jobs.registry import driver_for_argv, phase_of
from .jobs.statements import copy_target
from .readers.db import ServerFacts
from .snapshot import Snapshot
from .source import HostSource, LiveSource, RecordingSource, Source

SCHEMA = "pgparmon.sample/1"
STALL_SAMPLES = 5
# ... and at least this long: at a short interval five samples are a second
# or so, less than a tool may spend between two reads (compressing a buffer,
# opening the next file) without being stalled
STALL_MIN_S = 5.0


@dataclass
class Outcome:
    state: str  # finished | failed | ended (outcome unknown)
    reason: str
    exit_code: int | None = None


def outcome_exit_code(outcome: Outcome | None) -> int:
    """A watcher's exit code: still running 0; the job's own exit code when
    known; else finished, failed, or ended with an outcome it cannot see
    (another OS user's pg_dump: no exit status for a process that is not our
    child, and its -Fd directory is mode 0700)."""
    if outcome is None:
        return 0
    if outcome.exit_code is not None:
        return int(outcome.exit_code)
    return {"finished": ExitCode.OK, "ended": ExitCode.ENDED_UNSEEN}.get(
        outcome.state, ExitCode.FAILED)


def _iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, tz=UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Standing:
    """A job's standing beyond its sample (Monitor.standing)."""

    started: float | None  # its start as its samples count it; None: the first sample
    bytes_done: float  # over every item, done or running
    rows_done: float
    sessions: frozenset[int]  # the server sessions it owns: every worker seen, and
    # its members at the last sample that reached the server


_HEAP_SETTLED = 0  # times a Monitor froze the heap in this process (_settle_heap)

class Monitor:
    """The analysis of one job: feed it a Source (live, recording, replay);
    tick() takes one snapshot and returns the published sample."""

    settle_heap = False  # see _settle_heap

    def __init__(self, source: Source) -> None:
        self.source = source
        self.facts: ServerFacts = source.facts
        self.job: Job | None = source.job
        self.tracker: Tracker | None = None
        self.snaps: deque[Snapshot] = deque(maxlen=8)
        self.obs_window: deque[list[bottleneck.WorkerObs]] = deque(maxlen=5)
        self.prev_host: Any = None
        self.host_rates: Any = None
        self.outcome: Outcome | None = None
        self.notes: list[str] = []
        self.said: set[str] = set()
        self.aborted: set[int] = set()  # sessions said to have failed a statement
        self.client_pids: set[int] = set()
        self.no_members = 0
        self.samples = 0
        self._heap_settled: str | None = None  # "started", then "planned" (_settle_heap)
        self._summary: tuple[Any, dict[str, Any]] | None = None  # an ended job's, built once
        self.plan_failed = False
        self.died: set[int] = set()  # worker processes that died mid-run
        self.died_note: str | None = None
        self.free_space = FreeSpace()
        self.checkpoints = Checkpoints()
        self.early_fk_noted = False
        self.backup_wal = BackupWal()
        # when the job's step began (its first sample after a wait by design,
        # a backup's start; None: it never waited): a stall is counted from
        # then, not across the wait
        self.step_since: float | None = None
        self.waited = False
        self.databases: set[str] = set()  # databases the job's sessions used so far
        for v in self.facts.missing_views():
            self._note(f"server {self.facts.version} has no {v}: progress from that view "
                       "is not available; activity and host rates still work")
        if not self.facts.read_all_stats and not self.facts.is_superuser:
            self._note(f"role {self.facts.user} lacks pg_read_all_stats: other roles' backends "
                       "show no details (GRANT pg_monitor TO "
                       f"{self.facts.user} shows them)")

    @property
    def target_dir(self) -> str | None:
        return self.source.target_dir

    @property
    def devices(self) -> set[str]:
        return self.source.devices

    # ---- discovery ------------------------------------------------------

    def discover(self) -> Job:
        job = self.job = self.source.discover()
        self.facts = self.source.facts
        if self.facts.host_only:
            why = getattr(self.source, "why", None)
            self._note((why + ": " if why else "") + "host only, no database connection "
                       f"({job.kind} runs with the server down): followed from its processes "
                       "and files on this host")
        self.tracker = Tracker(job, block_size=self.facts.block_size)
        if self.tracker.driver.data_flow == "in" and \
                self.facts.settings.get("data_checksums") == "on":
            self._note(CHECKSUMS_NOTE)
        return job

    def discover_label(self) -> str:
        return self.job.describe() if self.job else "no job"

    def _plan(self) -> None:
        tr = self.tracker
        assert tr is not None
        if tr.planned or not tr.driver.plans_work or self.plan_failed:
            return
        req = tr.driver.plan_request(tr)
        if req is None:
            return  # nothing to plan from yet
        inputs = self.source.plan_inputs(req)
        if inputs is None:
            return  # not readable yet: ask again next tick
        if inputs.error:
            self._note(inputs.error)
        if inputs.error or not tr.driver.plan(tr, inputs):
            self.plan_failed = True
            return
        tr.driver.after_plan(tr, self.source, self.snaps[-1], self._running_keys())

    def _running_keys(self) -> set[str]:
        """Items some backend works on right now (their rows are not committed)."""
        tr = self.tracker
        assert tr is not None
        keys: set[str] = set()
        for b in tr.members(self.snaps[-1]) if self.snaps else ():
            ct = copy_target(b.query)
            if ct and ct[1] in tr.by_relation:
                keys.add(tr.by_relation[ct[1]])
        return keys

    def _aborted(self, snap: Snapshot) -> None:
        """A session of the job whose transaction failed (the server rejected
        a statement: a COPY's bad input line, a constraint): said once per
        session. The error's text is not in any view (attach sees the state;
        `run` reads the job's own output)."""
        tr = self.tracker
        assert tr is not None
        for b in tr.members(snap):
            if b.state != "idle in transaction (aborted)" or b.pid in self.aborted:
                continue
            self.aborted.add(b.pid)
            ct = copy_target(b.query)
            what = (f"its COPY {'into' if ct[0] == 'from' else 'from'} {ct[1]}" if ct
                    else f"its last statement ({(b.query or '?').split()[0]})")
            self._note(f"session {b.pid} of the job: {what} failed and its transaction is "
                       "aborted (the server's error text is in the server log and the "
                       "client's output; `pgparmon run` shows it)")

    def _note(self, msg: str) -> None:
        if msg not in self.said:
            self.said.add(msg)
            self.notes.append(msg)

    # ---- one tick -------------------------------------------------------

    def tick(self) -> dict[str, Any]:
        if self.job is None or self.tracker is None:
            self.discover()
        tr = self.tracker
        assert tr is not None and self.job is not None
        snap = self.source.snapshot()
        if snap.db is not None and snap.db.error:
            self._note(snap.db.error)
        if job_pids := ({self.job.client_pid} if self.job.client_pid else set()):
            self.client_pids |= job_pids | {c.pid for c in snap.clients}
        self.samples += 1
        unreadable = [c.pid for c in snap.clients if c.open_files is None]
        if unreadable:
            self._note(f"cannot read the open files of client process {unreadable[0]} (another "
                       "user's process): progress from the server's views only; run pgparmon "
                       "as the job's OS user or root for exact restore progress")
        prev = self.snaps[-1] if self.snaps else None
        self.snaps.append(snap)
        self._plan()
        tr.update(snap)
        if self.job.grouping is not None:  # a COPY job's sessions may move on to
            # another database (a migration tool reads one and loads another)
            self.databases |= {b.datname for b in tr.members(snap) if b.datname}
        self._aborted(snap)
        if snap.host is not None and self.prev_host is not None:
            self.host_rates = hostrates.host_rates(self.prev_host, snap.host)
        self.prev_host = snap.host
        self._check_end(snap)
        doc = self._sample_doc(snap, prev)
        self._settle_heap()
        return doc

    def _settle_heap(self) -> None:
        """Python's full garbage collections walk every object that ever
        survived one: the imports, the screen's widgets, a plan of thousands
        of items. Measured in the TUI on a small dump, a full collection cost
        38 ms every ~15 s, 15% of its CPU; at 100,000 items far more. Once the
        start-up is done (the second sample) and again once the plan is made,
        what lives then is collected once and frozen (gc.freeze: kept out of
        later collections; freed by reference counts as before). Garbage is
        collected first, so none is kept for good. Only where one process
        follows one job (attach, run, replay: `settle_heap` set by them, and
        at most twice a process); not in the exporter, whose monitors come
        and go."""
        global _HEAP_SETTLED
        if not self.settle_heap or self.samples < 2 or self._heap_settled == "planned" \
                or _HEAP_SETTLED >= 2:
            return
        tr = self.tracker
        planned = (tr is None or tr.planned or self.plan_failed or not tr.driver.plans_work)
        if self._heap_settled == "started" and not planned:
            return
        gc.collect()
        gc.freeze()
        _HEAP_SETTLED += 1
        self._heap_settled = "planned" if planned else "started"

    # ---- end of the job -------------------------------------------------

    def _check_end(self, snap: Snapshot) -> None:
        tr, job = self.tracker, self.job
        assert tr is not None and job is not None
        if self.outcome is not None:
            return
        if job.client_pid:
            root_alive = bool(snap.root_alive)
            live = {c.pid for c in snap.clients}
            died = {p for p in self.client_pids if p != job.client_pid and p not in live}
            # workers exit before the leader at a normal end, all together: a
            # worker gone while another still works and items still wait to
            # start is one that died (items that ran between two samples are
            # never seen running, so "pending" alone proves nothing)
            waiting = tr.driver.fixed_workers and any(i.state == "pending"
                                                      for i in tr.items.values())
            others = live - died - {job.client_pid}
            if root_alive and died and waiting and others and not died <= self.died:
                self.died |= died
                self.died_note = f"worker process {', '.join(map(str, sorted(died)))} died"
                self._note(self.died_note)
            if root_alive:
                return
            code = snap.exit_code
        else:
            members = tr.members(snap) if snap.db and not snap.db.error else None
            # a job the server runs may be working with no session (its
            # workers wait for a free slot): its driver says
            if members is not None and tr.driver.still_working(job, members, snap):
                self.no_members = 0
                return
            if members is None:
                return  # server unreachable: cannot tell yet
            self.no_members += 1
            if self.no_members < 3:
                return
            code = None
        self.outcome = self._verdict_at_end(snap, code)

    def _verdict_at_end(self, snap: Snapshot, code: int | None) -> Outcome:
        tr = self.tracker
        assert tr is not None
        driver = tr.driver
        # the last items may have finished between two samples
        readable = driver.settle_at_end(tr, self.source, snap)
        full = (" (the target filesystem is full)" if snap.free_bytes is not None
                and snap.free_bytes < FULL_BYTES else "")
        cut = driver.cut_short(tr, snap) if code != 0 else None
        if code is not None:
            if code == 0:
                tr.finish_all(snap.wall)
                return Outcome("finished", "exit code 0", code)
            said = "; ".join(x for x in (snap.exit_error, cut) if x)
            return Outcome("failed", driver.exit_reason(code) + full
                           + (f": {said}" if said else ""), code)
        if cut:
            return Outcome("failed", cut + full)
        left = driver.leftovers(tr, self.source, snap)
        if self.died_note:
            # a worker gone while another still worked and items looked
            # unstarted: a suspicion, settled here. Items that ran between
            # two samples look unstarted, and at a restore's end the workers
            # do not all exit in the same sample: every item done means the
            # job finished
            if left or not tr.planned:
                return Outcome("failed", self.died_note + full)
            pids = ", ".join(map(str, sorted(self.died)))
            self._note(f"(worker process {pids} had exited before the others at the job's end: "
                       "every item is done)")
        if left and tr.planned and readable is False and not full:
            return Outcome("ended", f"the job's processes are gone, but its outcome cannot be "
                                    f"seen: {self.target_dir} is not readable by this user and "
                                    "its exit status is not ours to read (run pgparmon as the "
                                    "job's OS user, or with `pgparmon run`)")
        if left and tr.planned:
            state, why = driver.leftover_verdict(tr, left)
            return Outcome(state, why + full)
        tr.finish_all(snap.wall)
        return Outcome("finished", "all items done")

    # ---- the published sample ----------------------------------------------

    def _cpu_percent(self, pid: int, snap: Snapshot, prev: Snapshot | None,
                     os_side: bool = False) -> float | None:
        if prev is None:
            return None
        cur_list = snap.backends_os if os_side else snap.clients
        prev_list = prev.backends_os if os_side else prev.clients
        a = next((c for c in prev_list if c.pid == pid), None)
        b = next((c for c in cur_list if c.pid == pid), None)
        if a is None or b is None or a.cpu_s is None or b.cpu_s is None:
            return None
        dt = snap.ts - prev.ts
        return max(0.0, (b.cpu_s - a.cpu_s) / dt * 100) if dt > 0 else None

    def _client_of(self, w: Any, snap: Snapshot) -> int | None:
        """Which client process drives this backend: the one holding the
        item's data file open (dump writes it, restore reads it)."""
        tr = self.tracker
        assert tr is not None
        it = tr.items.get(w.item or "")
        if it is None:
            return w.client_pid
        want = it.key
        for c in snap.clients:
            for f in c.open_files or ():
                base = os.path.basename(f.path)
                if base.split(".")[0] == want:
                    w.client_pid = c.pid
                    return c.pid
        return w.client_pid

    def _sample_doc(self, snap: Snapshot, prev: Snapshot | None) -> dict[str, Any]:
        tr, job = self.tracker, self.job
        assert tr is not None and job is not None
        workers = []
        obs = []
        bps_by_dir: dict[str | None, float] = {}
        tps_by_dir: dict[str | None, float] = {}
        links = dict(snap.links or ())
        for w in sorted(tr.workers.values(), key=lambda w: w.pid):
            if w.is_leader and w.phase in ("idle", "other"):
                continue  # the dump leader holds locks and waits
            streaming = phase_of(w.phase).streams
            bps = w.bytes_rate.recent(5.0) if streaming else 0.0
            tps = w.tuples_rate.recent(5.0) if w.phase == "copy" else 0.0
            cpid = links.get(w.pid) or self._client_of(w, snap)
            ccpu = self._cpu_percent(cpid, snap, prev) if cpid else None
            scpu = self._cpu_percent(w.pid, snap, prev, os_side=True)
            progress = w.progress
            if progress is None and w.phase == "copy" and cpid:
                progress = tr.input_fraction(cpid)  # a stream from a file the server can't see
            direction = None
            if w.phase == "copy":
                ct = copy_target(w.query)
                direction = ct[0] if ct else None
            elif streaming:  # a backup: the server sends
                direction = "to" if tr.driver.data_flow == "out" else "from"
            bps_by_dir[direction] = bps_by_dir.get(direction, 0.0) + (bps or 0.0)
            tps_by_dir[direction] = tps_by_dir.get(direction, 0.0) + (tps or 0.0)
            obs.append(bottleneck.WorkerObs(w.phase, w.wait_event, ccpu, scpu, direction))
            workers.append({
                "pid": w.pid, "client_pid": cpid, "phase": w.phase, "direction": direction,
                "relation": w.relation,
                "item": tr.items[w.item].name if w.item in tr.items else None,
                "bytes_done": w.bytes_done if streaming else None,
                "tuples_done": w.tuples_done if w.phase == "copy" else None,
                "bytes_per_s": round(bps, 1) if bps is not None else None,
                "tuples_per_s": round(tps, 1) if tps is not None else None,
                "progress": round(progress, 4) if progress is not None else None,
                "wait_event": w.wait_event, "blocked_by": list(w.blocked_by),
                "client_cpu_percent": _r(ccpu), "server_cpu_percent": _r(scpu),
                "state": w.state, "query": w.query,
                "waiting_for": list(w.waiting_for) if w.waiting_for else None,
            })
        total_bps, total_tps = _throughput(bps_by_dir), _throughput(tps_by_dir)
        self.obs_window.append(obs)
        stopped = sum(1 for c in snap.clients if c.status == "stopped")
        stalled = self._stalled()
        pending = tr.count("pending")
        running = [(i.name, i.fraction) for i in tr.running()]
        hr = self.host_rates
        disks = {n: d for n, d in (hr.disks.items() if hr else ()) if d is not None
                 and (not self.devices or n in self.devices)}
        # a job with no plan (a COPY load) knows no items left to start and
        # its `jobs` counts sessions, not streams: no "one table left" tail
        verdict = (None if stalled or stopped else tr.driver.verdict(
            tr, snap, self.facts.settings if self.facts else {})) or \
            bottleneck.judge(list(self.obs_window), flow=tr.driver.data_flow,
                                   tool=job.kind, pending=pending,
                                   jobs=tr.driver.streams(tr),
                                   running_items=running, host=hr, devices=disks,
                                   stalled=stalled, stopped_clients=stopped)
        est = eta.estimate(tr, stalled=stalled or stopped > 0)
        state = self.outcome.state if self.outcome else "running"
        if state == "running":
            warns = self._warnings(snap, est.seconds)
        else:
            # a job that died on a full target: say so on its last sample too
            # (a fast job can fill the disk between two samples)
            warns = [w for w in self.free_space.check(snap.free_bytes, None)
                     if w.code == "disk-full"]
            for jw in warns:
                self._note(jw.message)
        progress = tr.fraction()
        if self.outcome and self.outcome.state == "finished" and progress is not None:
            progress = 1.0
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "ts": _iso(snap.wall),
            "elapsed_s": round(snap.wall - (tr.started or snap.wall), 3),
            "job": {
                "kind": job.kind, "state": state, "client_pid": job.client_pid,
                "started": _iso(tr.started) if tr.started else None,
                "started_from": tr.started_from,
                "jobs": job.jobs, "format": job.format, "target": self.target_dir,
                "database": job.database, "command": list(job.command),
                "progress": round(progress, 4) if progress is not None else None,
                "eta_s": round(est.seconds, 1) if est.seconds is not None and state == "running"
                else (0.0 if state == "finished" else None),
                "eta_reason": est.reason, "last_item": est.last_item,
                "bytes_per_s": round(total_bps, 1), "tuples_per_s": round(total_tps, 1),
                "items_total": len(tr.items),
                "items_done": tr.count("done"),
                "active_workers": sum(1 for w in workers if w["phase"] not in ("idle",)),
                "grouping": job.grouping,
                "databases": self._databases(),
                "client_pids": sorted({c.pid for c in snap.clients}
                                      | ({job.client_pid} if job.client_pid else set())),
                **tr.driver.job_fields(tr, workers, state),
            },
            "workers": workers,
            "host": _host_doc(hr, disks),
            "bottleneck": {"kind": verdict.kind, "detail": verdict.detail},
            "server": {"latency_ms": _r(snap.db.latency_ms) if snap.db else None,
                       "error": snap.db.error if snap.db else None,
                       "version": self.facts.version},
            "free_bytes": snap.free_bytes,
            "warnings": [{"code": w.code, "message": w.message} for w in warns],
            "notes": list(self.notes),
        }
        if self.outcome:
            doc["job"]["outcome"] = self.outcome.reason
            doc["job"]["exit_code"] = self.outcome.exit_code
        return doc

    def _warnings(self, snap: Snapshot, eta_s: float | None) -> list[JobWarning]:
        tr, job = self.tracker, self.job
        assert tr is not None and job is not None
        self.free_space.add(snap.ts, snap.free_bytes)
        out = self.free_space.check(snap.free_bytes, eta_s)
        if snap.db is not None and not snap.db.error and tr.driver.fails_on_lock_queue:
            members = {b.pid for b in tr.members(snap)}
            pending = {i.relation for i in tr.items.values() if i.state != "done" and i.relation}
            out += exclusive_waiters(snap.db.backends, members, pending)
        if snap.db is not None and tr.driver.data_flow == "in":
            self.checkpoints.add(snap.ts, snap.db.checkpoints)
            ck = self.checkpoints.check(self.facts.settings if self.facts else {})
            if ck and not self.checkpoints.noted:
                self.checkpoints.noted = True
                self._note(ck[0].message)  # the first time; the warning keeps counting
            out += ck
        if tr.driver.warns_early_foreign_keys:
            early = early_foreign_keys(tr.items, tr.keys_of("fk"))
            if early and not self.early_fk_noted:
                self.early_fk_noted = True
                self._note(early[0].message)  # once: the warning lasts while loads wait
            out += early
        if snap.db is not None and not snap.db.error and tr.driver.whole_cluster:
            out += self.backup_wal.check(snap.db.archiver, snap.db.slots)
        for w in out:
            # figures change every tick (or noted once above)
            if w.code not in ("disk-full-soon", "checkpoints", "archive-failing",
                              "slot-retains-wal", "fk-before-partitions"):
                self._note(w.message)
        return out

    def _stalled(self) -> bool:
        tr = self.tracker
        assert tr is not None
        h = tr.history
        if tr.driver.between_steps(tr):
            self.waited = True  # a stall is counted from the next step's first sample
            return False
        if self.waited and h:
            self.waited, self.step_since = False, h[-1][0]
        if self.step_since is not None:
            h = h[bisect.bisect_left(h, self.step_since, key=lambda x: x[0]):]
        if len(h) < STALL_SAMPLES or self.outcome is not None:
            return False
        n = STALL_SAMPLES
        while n < len(h) and h[-1][0] - h[-n][0] < STALL_MIN_S:
            n += 1
        if h[-1][0] - h[-n][0] < STALL_MIN_S:
            return False  # not watched long enough to call it stalled
        last = h[-n:]
        active = any(a > 0 for _, a, _ in last)
        if not (active and last[-1][2] <= last[0][2] and all(
                (w.bytes_rate.rate(STALL_MIN_S) or 0) == 0 for w in tr.workers.values())):
            return False
        # no measurable progress, but the job's own sessions work on something
        # no view measures (a statement between a copy and its index builds),
        # or wait for a lock another of its sessions holds: not stalled
        mine = set(tr.workers)
        for w in tr.workers.values():
            if w.phase == "other" and w.state == "active" and not (
                    w.wait_event or "").startswith("Client"):
                return False
            if w.phase == "lock-wait" and w.blocked_by and set(w.blocked_by) <= mine:
                return False
            if phase_of(w.phase).waits:
                return False
        return True

    def _databases(self) -> list[str]:
        """The databases the job's sessions used; before any is seen, the one
        the job was found on or given (never only the monitor's own: `run`
        of a script without -d connects wherever PG* says)."""
        assert self.job is not None
        return sorted(self.databases) or sorted(self.job.database_list())

    def summary(self) -> dict[str, Any]:
        tr, job = self.tracker, self.job
        assert tr is not None and job is not None
        # an ended job's summary is asked for twice (the end screen, then the
        # recording and the exit): built once; a dict an item, 4.5 MB at
        # 10,000 items, two at once were the TUI's peak
        key = (id(self.outcome), len(self.notes), tr.last_wall, tr.version, tr.count("done"))
        if self.outcome is not None and self._summary is not None and self._summary[0] == key:
            return self._summary[1]
        doc = self._build_summary(tr, job)
        self._summary = (key, doc) if self.outcome is not None else None
        return doc

    def _build_summary(self, tr: Tracker, job: Job) -> dict[str, Any]:
        items = []
        for it in sorted(tr.items.values(), key=lambda i: (i.started or 0, i.key)):
            items.append({
                "key": it.key, "kind": it.kind, "name": it.name, "relation": it.relation,
                "worker": it.worker,
                "state": it.state, "started": _iso(it.started) if it.started else None,
                "duration_s": round(it.duration, 3) if it.duration is not None else None,
                "bytes": it.bytes_done or None, "tuples": it.tuples_done or None,
                "work": it.work,
            })
        wall = (tr.last_wall or 0) - (tr.started or 0)
        return {"schema": "pgparmon.summary/1", "kind": job.kind, "database": job.database,
                "jobs": job.jobs, "grouping": job.grouping,
                "databases": self._databases(),
                "started": _iso(tr.started) if tr.started else None,
                "started_from": tr.started_from,
                "first_sample": _iso(tr.first_wall) if tr.first_wall else None,
                "state": self.outcome.state if self.outcome else "running",
                "reason": self.outcome.reason if self.outcome else None,
                "exit_code": self.outcome.exit_code if self.outcome else None,
                "wall_s": round(wall, 3), "items": items, "notes": list(self.notes)}

    def details(self, pid: int) -> dict[str, Any]:
        """On demand (a key press, not every tick): one worker's full query,
        the locks it holds and awaits, and its client process."""
        tr = self.tracker
        w = tr.workers.get(pid) if tr else None
        out: dict[str, Any] = self.source.details(pid, w.client_pid if w else None)
        out["query"] = w.query if w else None
        return out

    def standing(self) -> Standing | None:
        """What one who follows many jobs at once (the exporter) needs
        beyond the sample; None before the job is discovered."""
        tr = self.tracker
        if tr is None:
            return None
        snap = self.snaps[-1] if self.snaps else None
        sessions = set(tr.workers)
        if snap is not None and snap.db is not None and not snap.db.error:
            sessions |= {m.pid for m in tr.members(snap)}
        return Standing(
            started=tr.started if tr.started_from != "first sample" else None,
            bytes_done=float(sum(i.bytes_done for i in tr.items.values())),
            rows_done=float(sum(i.tuples_done for i in tr.items.values())),
            sessions=frozenset(sessions))

    def close(self) -> None:
        self.source.close()


def _throughput(by_direction: dict[str | None, float]) -> float:
    """The job's COPY throughput. A job copying both ways at once relays
    data (a migration tool reads the source with COPY TO and writes the
    target with COPY FROM): each byte crosses twice, count the load side."""
    if "from" in by_direction and "to" in by_direction:
        return by_direction["from"]
    return sum(by_direction.values(), 0.0)


def _r(x: float | None) -> float | None:
    return round(x, 1) if x is not None else None


def _host_doc(hr: Any, disks: dict[str, Any]) -> dict[str, Any]:
    if hr is None:
        return {"cpu_percent": None, "per_cpu": [], "iowait_percent": None, "disks": {}}
    return {
        "cpu_percent": _r(hr.cpu_percent),
        "per_cpu": [_r(c.busy) for c in hr.per_cpu],
        "iowait_percent": _r(hr.iowait_percent),
        "mem_used_percent": _r(getattr(hr, "mem_used_percent", None)),
        "disks": {n: {"read_bytes_per_s": _r(d.read_bytes_per_s),
                      "write_bytes_per_s": _r(d.write_bytes_per_s),
                      "util_percent": _r(d.util_percent), "await_ms": _r(d.await_ms),
                      "queue_depth": _r(d.queue_depth), "rotational": d.rotational}
                  for n, d in disks.items()},
    }


# `attach --pid PID` without --wait: a process of this host that has not
# opened its session yet (a tool just started, a loader reading its input
# first) is looked for again until it has run this long
PID_GRACE_S = 10.0
PID_POLL_S = 0.25


def wait_for_job(target: ConnTarget | None, pid: int | None, wait_s: float | None,
                 interval: float = 1.0, recorder: Any = None,
                 copy_source: ConnTarget | None = None, host_only: bool = False,
                 why: str | None = None) -> Monitor:
    """Connect and find the job, waiting up to wait_s for one to appear;
    host_only: no connection, a job of this host's processes alone.

    pid: the job that process belongs to. Without wait_s, a live process of
    this host younger than PID_GRACE_S is given until that age to show a
    session (a tool attached to right after it started); a process that ends
    meanwhile ends the wait at once."""
    from .readers import procs

    live: LiveSource | HostSource
    if host_only or target is None:
        live = HostSource(pid=pid, why=why)
    else:
        live = LiveSource(target, pid=pid, copy_source=copy_source)
    source: Any = RecordingSource(live, recorder) if recorder is not None else live
    proc = procs.proc_info(pid) if pid is not None and pid > 0 else None
    grace = False
    if wait_s is None and proc is not None:
        left = PID_GRACE_S - (time.time() - proc.create_time)
        if left > 0:
            wait_s, interval, grace = left, min(interval, PID_POLL_S), True
    deadline = time.monotonic() + (wait_s or 0)
    # A job that appears while we wait is just starting, when its processes
    # and sessions change fastest: a migration tool's pg_dump seen before the
    # transaction it is a step of, a worker's session before its process. It
    # is followed once two looks a moment apart find the same job (or the
    # same several): what one look alone found may be a passing fragment.
    waited = False
    seen: object = None  # what the last look found while waiting
    while True:
        try:
            if waited:
                live.job = None
                _look_at_all_sessions(live)
                found = _signature(live.discover())
                if found != seen and time.monotonic() < deadline:
                    seen = found
                    time.sleep(min(interval, PID_POLL_S))
                    continue
            mon = Monitor(source)
            mon.discover()  # after a look that found it: that job, recorded
            return mon
        except DiscoveryError as exc:
            if exc.code == ExitCode.SEVERAL_JOBS and waited and time.monotonic() < deadline:
                found = tuple(sorted(map(_signature, exc.jobs), key=repr))
                if found != seen:
                    seen = found
                    time.sleep(min(interval, PID_POLL_S))
                    continue
            if exc.code != ExitCode.NO_JOB:
                live.close()
                raise
            seen = None
            gone = proc is not None and not procs.alive(proc.pid)
            if gone or wait_s is None or time.monotonic() >= deadline:
                live.close()
                if proc is None or not (gone or wait_s):
                    raise
                raise DiscoveryError(_pid_unseen(proc, gone, grace, wait_s or 0.0,
                                                 isinstance(live, HostSource)),
                                     ExitCode.NO_JOB) from None
            live.job = None
            waited = True
            time.sleep(interval)


def _signature(job: Job) -> tuple[object, ...]:
    """What tells one look's job from another's: its client process, or
    for a job of sessions alone, its sessions."""
    if job.client_pid:
        return (job.kind, job.client_pid)
    return (job.kind, job.database, job.grouping, tuple(sorted(job.pid_hint)))


def _look_at_all_sessions(live: LiveSource | HostSource) -> None:
    """Undo what a look that found a job set for following it (the sampler
    filtered to the job's database, without the bands only a backup needs)."""
    sampler = getattr(live, "sampler", None)
    if sampler is not None:
        sampler.database_filter = None
        sampler.backup_bands = True


def _pid_unseen(proc: Any, gone: bool, grace: bool, waited: float, host_only: bool) -> str:
    """Why `attach --pid` found no job of a live process it waited for."""
    what = f"process {proc.pid} ({proc.name})"
    if host_only:
        where, check = "on this host", "--host-only follows tools that run with the server down"
        why = "it is no pgBackRest restore"
    else:
        where, check = "on this server", "check that -h/-p/-d point at the job's server"
        why = ("it opened no session, or none that dumps, restores, backs up or loads with "
               "COPY")
    if gone:
        return f"{what} ended before a job of it was seen {where} ({check})"
    if grace:
        return (f"no job of {what} {where} {PID_GRACE_S:g} s after it started ({why}): "
                f"{check}; give --wait S to wait longer")
    return f"no job of {what} {where} after waiting {waited:g} s ({why}): {check}"


def job_for_process(pid: int, argv: list[str], app_name: str) -> Job:
    """The job of a client process we started ourselves (`pgparmon run`)."""
    from .cmdline import parse_client_cmdline
    from .redact import redact_argv

    args = parse_client_cmdline(argv)
    driver = driver_for_argv(argv)
    assert driver is not None
    job = Job(kind=driver.kind, database=args.dbname or os.environ.get("PGDATABASE"),
              client_pid=pid, jobs=args.jobs, format=args.format, target=args.file,
              command=tuple(redact_argv(argv)), app_name=app_name, args=args)
    return driver.refine(job, [])
