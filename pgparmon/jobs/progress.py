"""The progress protocol: what a job's sessions and files say of its work,
item by item, and what the analysis says of it in the tool's words.

Its defaults describe no tool: no data flow declared (`data_flow` None:
the analysis assumes neither direction), no state beyond the Tracker's, the
readings of any job's SQL sessions (a COPY's relation, an index build's
fraction) and the work list's own totals. The Tracker names what it asks
of it in `TrackedDriver`; the rest of the core reaches a tracked job's
driver through this class (`progress_of(tracker)`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..item_kinds import ItemKind
from ..phases import Phase

if TYPE_CHECKING:
    from ..analyze.bottleneck import Verdict
    from ..analyze.eta_value import Eta
    from ..analyze.items import Item, WorkerState
    from ..analyze.progress import Tracker
    from ..sample import WorkerRow
    from ..snapshot import Backend, ClientProc, CopyProgress, IndexProgress, MaintProgress, \
        Snapshot
    from .job import Job

DATA_FLOWS = (None, "in", "out")


@dataclass(frozen=True)
class LaterSteps:
    """The steps after the one running now of a job in steps: each
    item's key a later step runs, with how many steps on (1: the next), and
    each later step's streams (None: as this one's)."""

    part_of: Mapping[str, int]
    streams: Sequence[int | None]


class Progress:
    """How a tool kind's progress is read."""

    # "out": the server sends the data to the client (a dump); "in": the
    # client feeds the server (a restore, a load); None: not declared
    data_flow: ClassVar[str | None] = None
    # the first session holds the job's locks and waits while workers work
    has_leader: ClassVar[bool] = False
    # a session queued for an exclusive lock behind the job makes it fail
    fails_on_lock_queue: ClassVar[bool] = False
    # the client writes its output files into the target directory
    writes_target_files: ClassVar[bool] = False
    # the words of the -j advice (analyze/advice_live.py) in the tool's own
    # terms: (word, the tool's word) pairs, e.g. its option for the job count
    advice_terms: ClassVar[tuple[tuple[str, str], ...]] = ()
    # the tool has no job count to choose: the advice (headline, detail)
    # instead of one
    no_jobs_advice: ClassVar[tuple[str, str] | None] = None
    # its data loads and foreign keys run in an order of its own: a foreign
    # key built before its tables' data is loaded is warned about
    warns_early_foreign_keys: ClassVar[bool] = False
    # the worker phases the driver sets on its rows beyond those of any job's
    # SQL sessions (pgparmon.phases): the driver registry registers them
    phases: ClassVar[tuple[Phase, ...]] = ()
    # the kinds of item the driver makes beyond those of any job's SQL
    # sessions (pgparmon.item_kinds: a table's data, an index...): the driver
    # registry registers them, and the summary names them from there
    item_kinds: ClassVar[tuple[ItemKind, ...]] = ()
    # the verdict kinds `verdict` returns, those the core's judge gives among
    # them (pgparmon.verdicts): the driver registry registers them, so that
    # the exporter has a series for each before it happens
    verdicts: ClassVar[tuple[str, ...]] = ()

    def new_state(self) -> object:
        """What this driver keeps about one job (made once per Tracker, held
        in its `driver_state`, which the Tracker never reads): a dataclass
        of the driver's own, read back with state_of. None: nothing beyond
        the Tracker's items and workers."""
        return None

    def copy_item(self, tr: Tracker, b: Backend, rel: str | None) -> str | None:
        """The item a session's COPY of `rel` works on (its key)."""
        key = tr.by_relation.get(rel or "")
        if key is None and rel and not tr.planned:
            key = rel
            tr.add_data_item(rel)
        return key

    def build_item(self, tr: Tracker, b: Backend, kind: str, name: str,
                   ip: IndexProgress | None) -> str | None:
        """The item an index or constraint build works on (its key)."""
        return tr.by_name.get(name)

    def maint_item(self, tr: Tracker, b: Backend, kind: str, rel: str | None,
                   mp: MaintProgress | None) -> str | None:
        """The item a session's VACUUM or ANALYZE works on (None: not an item
        of this kind of job)."""
        return None

    def read_status(self, job: Job, clients: tuple[ClientProc, ...],
                    prev: dict[str, Any] | None) -> dict[str, Any] | None:
        """Live only: what the tool itself says of its progress (a file it
        writes), JSON-able; it travels in the snapshot (`Snapshot.tool`), so
        a recording replays it (`prev`: the last one read). None: nothing."""
        return None

    def client_of(self, tr: Tracker, w: WorkerState, snap: Snapshot) -> int | None:
        """The client process that drives a worker's session when the
        readings link none to it (a dump's or a restore's: the process
        holding its item's data file open)."""
        return w.client_pid

    def client_progress(self, tr: Tracker, client_pid: int) -> float | None:
        """How far one client process is through its own input where its
        session's COPY has no total (a loader's files, read from the host),
        0..1; None: not known."""
        return None

    def other_work(self, tr: Tracker, w: WorkerState, b: Backend,
                   snap: Snapshot) -> tuple[str, str | None] | None:
        """An active session doing work that is no COPY, build or
        maintenance statement (a base backup's replication connection):
        (its phase, the item it works on) with the worker's byte counters
        set, or None: phase "other"."""
        return None

    def progress(self, tr: Tracker, it: Item, cp: CopyProgress | None,
                 ip: IndexProgress | None, snap: Snapshot) -> None:
        """Advance a running item from this tick's readings."""
        if it.kind in ("index", "constraint") and ip is not None:
            f = ip.fraction
            if f is not None:
                it.done = max(it.done, min(0.99, f) * it.work)

    def done_when_unseen(self, tr: Tracker, it: Item, snap: Snapshot, sessions: set[int]) -> bool:
        """A running item no session works on any more is done (its
        statement ended); False: not by that alone (`sessions`: the job's
        sessions this tick)."""
        return True

    def on_finish(self, tr: Tracker, it: Item) -> None:
        """Learn from a finished item (ratios used for the items to come)."""

    def file_evidence(self, tr: Tracker, snap: Snapshot, running_now: dict[str, int]) -> None:
        """Items settled by the files the job writes or reads."""

    def between_steps(self, tr: Tracker) -> bool:
        """The job is in a step that makes no measurable progress by design
        (a backup's start or stop): not "stalled"."""
        return False

    def fraction(self, tr: Tracker) -> float | None:
        """Overall progress, 0..1, or None when no total is known."""
        total = tr.work_total()
        if not tr.planned or total <= 0:
            return None
        return min(1.0, tr.work_done() / total)

    def streams(self, tr: Tracker) -> int | None:
        """How many items run at once in the rest of the run (the ETA's
        workers): the tool's -j when known."""
        return tr.job.jobs

    def later_steps(self, tr: Tracker) -> LaterSteps | None:
        """A job in steps whose later steps are known: which items each
        runs (they start only when the steps before have ended) and its
        streams. None: the rest of the run is one schedule."""
        return None

    def has_total(self, tr: Tracker) -> bool:
        """Whether the items' work adds up to a known total (an ETA needs one)."""
        return True

    def own_eta(self, tr: Tracker) -> Eta | None:
        """The ETA when this kind estimates it itself (from its input files'
        read rate, its rounds, its tool's percentage), else None: the
        schedule simulation. Its seconds or the reason there are none
        (`Eta.reason`), and where the kind can say them, like the
        simulation does, the item expected to finish last (`last_item`, an
        item's name as the views show it) and the tail (`tail_s`)."""
        return None

    def verdict(self, tr: Tracker, snap: Snapshot, settings: dict[str, str]) -> Verdict | None:
        """What limits the run now when this kind knows better than the
        wait events (a backup waiting for a checkpoint); None: judge them."""
        return None

    def job_fields(self, tr: Tracker, workers: Sequence[WorkerRow],
                   state: str) -> dict[str, Any]:
        """Fields of the published job object this kind adds (the phase,
        where progress comes from), in the order the document shows them
        (the sample's `JobStatus.kind_fields`); `workers`: the sample's
        worker rows."""
        return {}


def progress_of(tr: Tracker) -> Progress:
    """A tracked job's driver, as the progress protocol."""
    return tr.driver
