"""The driver: each tool kind is a driver (the Job itself, plain data, is
in job.py, below the Tracker; it is imported from here too).

A driver answers four narrow protocols, each a class of its own whose
defaults describe no tool:

- `Recognise` (recognise.py): which processes and which server sessions
  make up a job;
- `Plan` (plan.py): what the work list is read from (live, once, recorded)
  and the work list itself;
- `Progress` (progress.py): how an item's progress, the workers' phases,
  the ETA and the verdict follow from the readings;
- `End` (end.py): how the end is told and judged.

`Driver` is the four together; a tool kind subclasses it and states what
it is (its `kind`, its data flow, whether its worker processes live to the
end...). The core never takes a whole Driver: a function that only
recognises takes a `Recognise`, the Monitor's planning a `Plan`
(`plan_of(tracker)`), the job's end an `End` (`end_of(tracker)`), and the
registry hands them out typed so (`registry.recognisers()`,
`recognise_for`, `plan_for`, `progress_for`). Whoever makes a Tracker
hands it the whole driver (`Tracker(job, driver_for(kind))`).

What a driver keeps about one job beyond the Tracker's items and workers is
a state object of its own (`new_state`, a dataclass the driver declares),
which the Tracker holds in `driver_state` and never reads; the driver reads
it back with `state_of`. What a driver changes of the Tracker itself goes
through its named methods (progress.Tracker: add, set_state, finish,
mark_planned, restart_rates, add_worker...).

Adding a tool kind is one module with a Driver subclass and a line in
`registry.py`; the registry refuses a driver whose declarations are
missing or contradict each other (`undeclared`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from .end import End, EndContext
from .job import TREE, Job  # the job model: drivers and the core import it from here too
from .plan import Plan, PlanInputs, PlanReader
from .progress import DATA_FLOWS, Progress
from .recognise import Recognise, SessionApps

if TYPE_CHECKING:
    from ..analyze.progress import Tracker

__all__ = ["TREE", "Driver", "End", "EndContext", "Job", "Plan", "PlanInputs", "PlanReader",
           "Progress", "Recognise", "SessionApps", "state_of", "undeclared"]

S = TypeVar("S")


def state_of(tr: Tracker, kind: type[S]) -> S:
    """The state a job's driver keeps (Driver.new_state), as its own type."""
    st = tr.driver_state
    if not isinstance(st, kind):
        raise TypeError(f"the {tr.job.kind} job's driver state is a {type(st).__name__}, "
                        f"not a {kind.__name__}")
    return st


class Driver(Recognise, Plan, Progress, End):
    """One tool kind: the four protocols together. Nothing here describes a
    tool; a subclass states what its tool is."""


def _overrides(d: object, name: str, base: type) -> bool:
    return getattr(type(d), name) is not getattr(base, name)


def undeclared(d: Driver) -> list[str]:
    """What a driver leaves out that it must say, or says inconsistently
    (empty: it may be registered)."""
    out = []
    if not isinstance(d.kind, str) or not d.kind:
        out.append("no kind (the job kind's key)")
    if d.data_flow not in DATA_FLOWS:
        out.append(f"data_flow {d.data_flow!r} is none of {DATA_FLOWS}")
    if d.plans_work and not _overrides(d, "plan", Plan):
        out.append("plans_work without a plan of its own")
    if _overrides(d, "session_key", Recognise) and not d.host_only:
        if not _overrides(d, "from_sessions", Recognise):
            out.append("session_key without from_sessions (the job its sessions make)")
        if not (_overrides(d, "session_matches", Recognise)
                or _overrides(d, "belongs", Recognise)):
            out.append("session_key without session_matches or belongs (its grouping rule)")
    return out
