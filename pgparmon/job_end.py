"""A job's end: the one place that decides a job has ended, and how.

`JobEnd.check` is asked once per sample, after the Tracker has read it. It
is the only reader of a snapshot's end evidence (`root_alive`, `exit_code`,
`exit_error`), and tells the keeper of the job's client processes
(client_tree.ClientPids, the Tracker's) which ones each sample showed
(`seen`); what a tool kind adds comes from its driver's hooks:

- whether the job still runs: its client processes (`root_alive`, read by
  the live source's `ClientTree`), or for a job of sessions alone, its
  sessions (3 samples with none), unless `Driver.still_working` says the
  server still works for it;
- a job in steps (steps.py): when a step's processes are gone, the next
  step its shell started (`next_step`, which the Monitor then follows as
  the same job), waited for while the shell lives: as long as its command
  line names a step to come, else STEP_GAP_S at most;
- a worker process that died while the others worked (`fixed_workers`);
- once it ended: the last readings (`settle_at_end`), evidence it stopped
  short (`cut_short`), its exit status (`exit_reason`), the items not done
  (`leftovers`, `leftover_verdict`).

The outcome it reaches is the Monitor's `outcome`, the sample's job state
and the summary's. The Tracker asks the same keeper (`all_gone`, so that
the analysis below needs nothing from here) whether a session never seen
before may still join the job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .analyze.warnings import FULL_BYTES
from .exitcodes import ExitCode
from .jobs.end import end_of
from .steps import STEP_GAP_S

if TYPE_CHECKING:
    from .analyze.progress import Tracker
    from .jobs.end import EndContext
    from .jobs.job import Job
    from .snapshot import Snapshot


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


# samples in a row with none of its sessions before a job of sessions alone
# (no client process to watch) is taken to have ended
NO_MEMBERS_SAMPLES = 3


class JobEnd:
    """Follows one job towards its end and reaches its outcome once."""

    def __init__(self, job: Job, note: Callable[[str], None]) -> None:
        self.job = job
        self.note = note  # says a note once (Notes.say)
        self.outcome: Outcome | None = None
        self.no_members = 0  # samples in a row without a session (no client process)
        self.died: set[int] = set()  # worker processes that died mid-run
        self.died_note: str | None = None
        # a job in steps (steps.py): its next step, found when this one
        # ended (the Monitor follows it), and since when one is waited for
        self.next_step: Job | None = None
        self.gap_since: float | None = None

    def check(self, tr: Tracker, snap: Snapshot, ctx: EndContext) -> Outcome | None:
        """After the Tracker read `snap`: the outcome once the job ended
        (settled then, kept after), else None."""
        job = self.job
        # the processes its samples showed: one gone while the root runs is
        # a worker that exited
        tr.client_pids.saw(snap)
        if self.outcome is not None:
            return self.outcome
        if job.client_pid:
            if self._clients_run(tr, snap):
                return None
            if job.step_shell and self._next_step(snap, ctx):
                return None
            code = snap.exit_code
        else:
            members = tr.members(snap) if snap.db and not snap.db.error else None
            # a job the server runs may be working with no session (its
            # workers wait for a free slot): its driver says
            if members is not None and end_of(tr).still_working(job, members, snap):
                self.no_members = 0
                return None
            if members is None:
                return None  # server unreachable: cannot tell yet
            self.no_members += 1
            if self.no_members < NO_MEMBERS_SAMPLES:
                return None
            code = None
        self.outcome = self._verdict(tr, snap, ctx, code)
        return self.outcome

    def _next_step(self, snap: Snapshot, ctx: EndContext) -> bool:
        """A step of a job in steps ended: whether the job goes on (its next
        step found, in `next_step`; or its shell alive, and a step still to
        come in its command line or STEP_GAP_S not yet passed since the step
        was seen gone)."""
        look = ctx.next_step(self.job)
        if look.job is not None:
            self.next_step = look.job
            return True
        if not look.shell_alive:
            return False
        if look.more:
            return True  # the shell's command line names a step still to come
        if self.gap_since is None:
            self.gap_since = snap.wall
        return snap.wall - self.gap_since < STEP_GAP_S

    def _clients_run(self, tr: Tracker, snap: Snapshot) -> bool:
        """Whether the job's client processes still run; a worker gone
        while they do is noted once as died."""
        job = self.job
        root_alive = bool(snap.root_alive)
        live = {c.pid for c in snap.clients}
        died = tr.client_pids.gone(snap)
        # workers exit before the leader at a normal end, all together: a
        # worker gone while another still works and items still wait to
        # start is one that died (items that ran between two samples are
        # never seen running, so "pending" alone proves nothing)
        waiting = end_of(tr).fixed_workers and any(i.state == "pending"
                                                   for i in tr.items.values())
        others = live - died - {job.client_pid}
        if root_alive and died and waiting and others and not died <= self.died:
            self.died |= died
            self.died_note = f"worker process {', '.join(map(str, sorted(died)))} died"
            self.note(self.died_note)
        return root_alive

    def _verdict(self, tr: Tracker, snap: Snapshot, ctx: EndContext,
                 code: int | None) -> Outcome:
        driver = end_of(tr)
        # the last items may have finished between two samples
        readable = driver.settle_at_end(tr, ctx, snap)
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
        left = driver.leftovers(tr, ctx, snap)
        # its output is not this user's to read and its exit status is not
        # ours: items that ran between two samples look unstarted, and
        # workers that left in different samples look dead; neither says
        # it failed
        unseen = bool(left and tr.planned and readable is False and not full)
        if self.died_note and not unseen:
            # a worker gone while another still worked and items looked
            # unstarted: a suspicion, settled here. Items that ran between
            # two samples look unstarted, and at a restore's end the workers
            # do not all exit in the same sample: every item done means the
            # job finished
            if left or not tr.planned:
                return Outcome("failed", self.died_note + full)
            pids = ", ".join(map(str, sorted(self.died)))
            self.note(f"(worker process {pids} had exited before the others at the job's "
                      "end: every item is done)")
        if unseen:
            return Outcome("ended", f"the job's processes are gone, but its outcome cannot be "
                                    f"seen: {ctx.target_dir} is not readable by this user and "
                                    "its exit status is not ours to read (run pgparmon as the "
                                    "job's OS user, or with `pgparmon run`)")
        if left and tr.planned:
            state, why = driver.leftover_verdict(tr, left)
            return Outcome(state, why + full)
        tr.finish_all(snap.wall)
        return Outcome("finished", "all items done")
