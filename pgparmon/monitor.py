"""The analysis loop: Source -> Snapshot -> Tracker -> published sample.

The Monitor orchestrates and talks to nothing itself: every reading comes
from its Source (the live server and host, or a recording), so a replay
goes through exactly this code and reaches the same verdicts anywhere.
Each tick it takes one snapshot, lets the driver plan the work once, feeds
the Tracker, and hands the rest to the modules that own it: the job's end
(job_end.py), its notes (notes.py), the published sample (sample_doc.py)
and the summary (summary_doc.py). What differs between tool kinds is asked
of the job's driver (jobs/). Opening a job (connecting, waiting for it) is
open_job.py's.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from .analyze import hostrates
from .analyze.progress import Tracker
from .client_tree import ClientPids
from .heap import HeapSettler
from .job_end import JobEnd, Outcome
from .jobs.base import Job
from .jobs.plan import plan_of
from .jobs.progress import progress_of
from .jobs.registry import driver_for
from .jobs.statements import copy_target
from .notes import Notes
from .readers.db import ServerFacts
from .sample import Sample
from .sample_doc import SampleBuilder, Tick
from .snapshot import Snapshot
from .source import Source
from .summary_doc import Summary


@dataclass(frozen=True)
class Standing:
    """A job's standing beyond its sample (Monitor.standing)."""

    started: float | None  # its start as its samples count it; None: the first sample
    bytes_done: float  # over every item, done or running
    rows_done: float
    sessions: frozenset[int]  # the server sessions it owns: every worker seen, and
    # its members at the last sample that reached the server


class Monitor:
    """The analysis of one job: feed it a Source (live, recording, replay);
    tick() takes one snapshot and returns the published sample (typed:
    sample.Sample; its to_json() is the document)."""

    settle_heap = False  # see _settle_heap

    def __init__(self, source: Source) -> None:
        self.source = source
        self.facts: ServerFacts = source.facts
        self.job: Job | None = source.job
        self.tracker: Tracker | None = None
        self.end: JobEnd | None = None  # the owner of the job's end, once discovered
        self.snaps: deque[Snapshot] = deque(maxlen=8)
        self.prev_host: Any = None
        self.host_rates: Any = None
        self.noted = Notes()
        self.samples = 0
        self._heap = HeapSettler()
        self.plan_failed = False
        self.databases: set[str] = set()  # databases the job's sessions used so far
        self.builder = SampleBuilder(self.noted)
        self._summary = Summary()
        self.noted.server(self.facts)

    @property
    def notes(self) -> list[str]:
        """The notes said so far, in order (each once)."""
        return self.noted.said

    @property
    def outcome(self) -> Outcome | None:
        """How the job ended (job_end.JobEnd); None while it runs."""
        return self.end.outcome if self.end is not None else None

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
        # one keeper of the job's client processes: the live source's (which
        # grows its live tree), else (a replay) the Tracker seeds its own
        self.tracker = Tracker(job, driver_for(job.kind), block_size=self.facts.block_size,
                               client_pids=getattr(self.source, "client_pids", None))
        self.end = JobEnd(job, self.noted.say)
        self.noted.discovered(job, self.facts, getattr(self.source, "why", None),
                              progress_of(self.tracker).data_flow)
        return job

    def discover_label(self) -> str:
        return self.job.describe() if self.job else "no job"

    def _plan(self) -> None:
        tr = self.tracker
        assert tr is not None
        plan = plan_of(tr)
        if tr.planned or not plan.plans_work or self.plan_failed:
            return
        req = plan.plan_request(tr)
        if req is None:
            return  # nothing to plan from yet
        inputs = self.source.plan_inputs(req)
        if inputs is None:
            return  # not readable yet: ask again next tick
        if inputs.error or inputs.note:
            self.noted.say(inputs.error or inputs.note or "")
        if inputs.error or not plan.plan(tr, inputs):
            self.plan_failed = True
            return
        plan.after_plan(tr, self.source, self.snaps[-1], self._running_keys())

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

    # ---- one tick -------------------------------------------------------

    def tick(self) -> Sample:
        if self.job is None or self.tracker is None or self.end is None:
            self.discover()
        tr, job, end = self.tracker, self.job, self.end
        assert tr is not None and job is not None and end is not None
        snap = self.source.snapshot()
        if snap.db is not None and snap.db.error:
            self.noted.say(snap.db.error)
        self.samples += 1
        self.noted.unreadable_clients(snap)
        prev = self.snaps[-1] if self.snaps else None
        self.snaps.append(snap)
        self._plan()
        tr.update(snap)
        if job.grouping is not None:  # a COPY job's sessions may move on to
            # another database (a migration tool reads one and loads another)
            self.databases |= {b.datname for b in tr.members(snap) if b.datname}
        self.noted.aborted(tr, snap)
        if snap.host is not None and self.prev_host is not None:
            self.host_rates = hostrates.host_rates(self.prev_host, snap.host)
        self.prev_host = snap.host
        end.check(tr, snap, self.source)
        if end.next_step is not None:
            job, end = self._follow_step(end.next_step)
        sample = self.builder.build(Tick(
            tr=tr, job=job, facts=self.facts, snap=snap, prev=prev, outcome=end.outcome,
            host_rates=self.host_rates, devices=self.devices, target_dir=self.target_dir,
            databases=self._databases()))
        self._settle_heap()
        return sample

    def _follow_step(self, step: Job) -> tuple[Job, JobEnd]:
        """The job's next step (steps.py): the same job, its processes and
        end from now on the step's, its plan made again for the step's own
        items beside those done before (unless the plan counted every step
        already, the total grows: progress may fall)."""
        tr = self.tracker
        assert tr is not None and self.job is not None
        last = self.job
        self.job = step
        self.source.follow_step(step)
        tr.job = step
        tr.client_pids = getattr(self.source, "client_pids", None) or ClientPids.of(step)
        tr.planned = False
        tr.max_fraction = 0.0
        self.plan_failed = False
        self.end = JobEnd(step, self.noted.say)
        self._plan()  # the step's own items, in this tick's sample already
        ran = f"the shell that ran step {last.step} (pid {last.client_pid})"
        by = (f"pid {step.client_pid}: {ran}, now {step.kind} itself"
              if step.client_pid == step.step_shell
              else f"pid {step.client_pid}, started by {ran}")
        self.noted.say(f"step {step.step}: {' '.join(step.command)} ({by}): the same "
                       f"{step.kind}, followed on")
        return step, self.end

    def _settle_heap(self) -> None:
        """Once the start-up is done and again once the plan is made (heap.py)."""
        if not self.settle_heap or self.samples < 2:
            return
        tr = self.tracker
        planned = (tr is None or tr.planned or self.plan_failed or not plan_of(tr).plans_work)
        self._heap.settle(planned)

    def _databases(self) -> list[str]:
        """The databases the job's sessions used; before any is seen, the one
        the job was found on or given (never only the monitor's own: `run`
        of a script without -d connects wherever PG* says)."""
        assert self.job is not None
        return sorted(self.databases) or sorted(self.job.database_list())

    def summary(self) -> dict[str, Any]:
        tr, job = self.tracker, self.job
        assert tr is not None and job is not None
        return self._summary.document(tr, job, self.outcome, self.notes, self._databases())

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

