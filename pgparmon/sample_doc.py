"""The published sample (`pgparmon.sample/1`, docs/json.md), built from
one tick's snapshot and the Tracker's state.

`SampleBuilder.build` is the whole of it: a row per worker (its rates, its
client's and its backend's CPU), the job's throughput, the verdict of what
limits the run, the ETA, the warnings, the host's rates and the job's
standing, as a typed `sample.Sample` (the document is its `to_json()`). It
keeps what spans samples: the bottleneck's window of worker observations
and the job's warnings' state. The Monitor hands it the tick's readings; it
reads nothing else.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .analyze import bottleneck, eta
from .analyze.job_warnings import JobWarnings
from .analyze.stall import Stall
from .jobs.progress import progress_of
from .jobs.registry import phase_of
from .jobs.statements import copy_target
from .sample import NO_HOST, DiskLoad, Ending, HostLoad, JobStatus, Sample, ServerStatus, \
    WorkerRow

if TYPE_CHECKING:
    from .analyze.progress import Tracker
    from .jobs.base import Job
    from .job_end import Outcome
    from .notes import Notes
    from .readers.db import ServerFacts
    from .snapshot import Snapshot

OBS_WINDOW = 5  # samples of worker observations the bottleneck judge reads


def iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, tz=UTC).isoformat(timespec="milliseconds")


def throughput(by_direction: dict[str | None, float]) -> float:
    """The job's COPY throughput. A job copying both ways at once relays
    data (a migration tool reads the source with COPY TO and writes the
    target with COPY FROM): each byte crosses twice, count the load side."""
    if "from" in by_direction and "to" in by_direction:
        return by_direction["from"]
    return sum(by_direction.values(), 0.0)


def _r(x: float | None) -> float | None:
    return round(x, 1) if x is not None else None


def host_load(hr: Any, disks: dict[str, Any]) -> HostLoad:
    """The sample's host part from the host rates between the last two host
    samples (hostrates.HostRates; None: no two yet) and the job's disks."""
    if hr is None:
        return NO_HOST
    return HostLoad(
        _r(hr.cpu_percent), tuple(_r(c.busy) for c in hr.per_cpu), _r(hr.iowait_percent),
        _r(getattr(hr, "mem_used_percent", None)),
        {n: DiskLoad(_r(d.read_bytes_per_s), _r(d.write_bytes_per_s), _r(d.util_percent),
                     _r(d.await_ms), _r(d.queue_depth), d.rotational)
         for n, d in disks.items()})


def cpu_percent(pid: int, snap: Snapshot, prev: Snapshot | None,
                os_side: bool = False) -> float | None:
    """A client process's (or with os_side, a backend's) CPU % between the
    previous snapshot and this one."""
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


@dataclass
class WorkerRows:
    """The sample's worker rows and what the job's figures sum from them."""

    rows: list[WorkerRow] = field(default_factory=list)
    obs: list[bottleneck.WorkerObs] = field(default_factory=list)
    bps_by_dir: dict[str | None, float] = field(default_factory=dict)
    tps_by_dir: dict[str | None, float] = field(default_factory=dict)


def worker_rows(tr: Tracker, snap: Snapshot, prev: Snapshot | None) -> WorkerRows:
    out = WorkerRows()
    links = dict(snap.links or ())
    for w in sorted(tr.workers.values(), key=lambda w: w.pid):
        if w.is_leader and w.phase in ("idle", "other"):
            continue  # the dump leader holds locks and waits
        streaming = phase_of(w.phase).streams
        bps = w.bytes_rate.recent(5.0) if streaming else 0.0
        tps = w.tuples_rate.recent(5.0) if w.phase == "copy" else 0.0
        cpid = links.get(w.pid) or progress_of(tr).client_of(tr, w, snap)
        ccpu = cpu_percent(cpid, snap, prev) if cpid else None
        scpu = cpu_percent(w.pid, snap, prev, os_side=True)
        progress = w.progress
        if progress is None and w.phase == "copy" and cpid:
            progress = progress_of(tr).client_progress(tr, cpid)  # a file the server can't see
        direction = None
        if w.phase == "copy":
            ct = copy_target(w.query)
            direction = ct[0] if ct else None
        elif streaming:  # a backup: the server sends
            direction = "to" if progress_of(tr).data_flow == "out" else "from"
        out.bps_by_dir[direction] = out.bps_by_dir.get(direction, 0.0) + (bps or 0.0)
        out.tps_by_dir[direction] = out.tps_by_dir.get(direction, 0.0) + (tps or 0.0)
        out.obs.append(bottleneck.WorkerObs(w.phase, w.wait_event, ccpu, scpu, direction))
        out.rows.append(WorkerRow(
            pid=w.pid, client_pid=cpid, phase=w.phase, direction=direction,
            relation=w.relation,
            item=tr.items[w.item].name if w.item in tr.items else None,
            bytes_done=w.bytes_done if streaming else None,
            tuples_done=w.tuples_done if w.phase == "copy" else None,
            bytes_per_s=round(bps, 1) if bps is not None else None,
            tuples_per_s=round(tps, 1) if tps is not None else None,
            progress=round(progress, 4) if progress is not None else None,
            wait_event=w.wait_event, blocked_by=tuple(w.blocked_by),
            client_cpu_percent=_r(ccpu), server_cpu_percent=_r(scpu),
            state=w.state, query=w.query,
            waiting_for=tuple(w.waiting_for) if w.waiting_for else None))
    return out


@dataclass
class Tick:
    """What the Monitor hands the builder each tick."""

    tr: Tracker
    job: Job
    facts: ServerFacts
    snap: Snapshot
    prev: Snapshot | None
    outcome: Outcome | None
    host_rates: Any  # hostrates.HostRates between the last two host samples, or None
    devices: set[str]  # the job's block devices (empty: every disk)
    target_dir: str | None
    databases: list[str]


class SampleBuilder:
    """Builds each tick's published sample."""

    def __init__(self, notes: Notes) -> None:
        self.notes = notes
        self.obs_window: deque[list[bottleneck.WorkerObs]] = deque(maxlen=OBS_WINDOW)
        self.warnings = JobWarnings(notes.say)
        self.stall = Stall()

    def build(self, t: Tick) -> Sample:
        tr, job, snap = t.tr, t.job, t.snap
        rows = worker_rows(tr, snap, t.prev)
        self.obs_window.append(rows.obs)
        stopped = sum(1 for c in snap.clients if c.status == "stopped")
        stuck = self.stall.stalled(tr, ended=t.outcome is not None)
        hr = t.host_rates
        disks = {n: d for n, d in (hr.disks.items() if hr else ()) if d is not None
                 and (not t.devices or n in t.devices)}
        verdict = self._verdict(t, disks, stuck, stopped)
        est = eta.estimate(tr, stalled=stuck or stopped > 0)
        state = t.outcome.state if t.outcome else "running"
        if state == "running":
            warns = self.warnings.running(tr, snap, t.facts.settings, est.seconds)
        else:
            warns = self.warnings.ended(snap)
        return Sample(
            ts=iso(snap.wall),
            elapsed_s=round(snap.wall - (tr.started or snap.wall), 3),
            job=self._job_part(t, rows, est, state),
            workers=tuple(rows.rows),
            host=host_load(hr, disks),
            bottleneck=verdict,
            server=ServerStatus(_r(snap.db.latency_ms) if snap.db else None,
                                snap.db.error if snap.db else None, t.facts.version),
            free_bytes=snap.free_bytes,
            warnings=tuple(warns),
            notes=tuple(self.notes.said))

    def _verdict(self, t: Tick, disks: dict[str, Any], stuck: bool,
                 stopped: int) -> bottleneck.Verdict:
        """What limits the run now: the driver's own verdict where it knows
        better, else the judge over the window. A job with no plan (a COPY
        load) knows no items left to start and its `jobs` counts sessions,
        not streams: no "one table left" tail."""
        tr = t.tr
        pending = tr.count("pending")
        running = [(i.name, i.fraction) for i in tr.running()]
        own = None if stopped else progress_of(tr).verdict(tr, t.snap, t.facts.settings)
        # a stall replaces the driver's reason unless that names what its
        # workers wait on (bottleneck.against_stall, the judge's rule too)
        own = bottleneck.against_stall(own, stuck)
        return own or bottleneck.judge(
            list(self.obs_window), flow=progress_of(tr).data_flow, tool=t.job.kind,
            pending=pending, jobs=progress_of(tr).streams(tr), running_items=running,
            host=t.host_rates, devices=disks, stalled=stuck, stopped_clients=stopped)

    def _job_part(self, t: Tick, rows: WorkerRows, est: eta.Eta,
                  state: str) -> JobStatus:
        tr, job, outcome = t.tr, t.job, t.outcome
        progress = tr.fraction()
        if outcome and outcome.state == "finished" and progress is not None:
            progress = 1.0
        return JobStatus(
            kind=job.kind, state=state, client_pid=job.client_pid,
            started=iso(tr.started) if tr.started else None,
            started_from=tr.started_from,
            jobs=job.jobs, format=job.format, target=t.target_dir,
            database=job.database, command=tuple(job.command),
            progress=round(progress, 4) if progress is not None else None,
            eta_s=round(est.seconds, 1) if est.seconds is not None and state == "running"
            else (0.0 if state == "finished" else None),
            # an ended job's ETA is no estimate: no reason beside it (a finished
            # job's 0 read "≥ 0 ms" beside the "measuring" of its last seconds)
            eta_reason=est.reason if state == "running" else None, last_item=est.last_item,
            bytes_per_s=round(throughput(rows.bps_by_dir), 1),
            tuples_per_s=round(throughput(rows.tps_by_dir), 1),
            items_total=len(tr.items),
            items_done=tr.count("done"),
            active_workers=sum(1 for w in rows.rows if w.phase != "idle"),
            grouping=job.grouping,
            databases=tuple(t.databases),
            client_pids=tuple(sorted(tr.client_pids.now(t.snap))),
            kind_fields=progress_of(tr).job_fields(tr, rows.rows, state),
            ending=Ending(outcome.reason, outcome.exit_code) if outcome else None)
