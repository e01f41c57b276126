"""The driver interface: each tool kind is a driver (the Job itself, plain
data, is in job.py, below the Tracker; it is imported from here too).

A driver answers four questions, and the Monitor and the views never ask
which tool a job is:

- recognise: which processes (`programs`, `from_tree`, `tree_jobs`) and
  which server sessions (`session_key`, `from_sessions`, `belongs`) make
  up a job;
- plan: what the work list is built from (`read_plan`, live only: it reads
  the archive, the catalog, files) and the work list itself (`plan`, pure);
- observe: how an item's progress follows from the readings (`progress`,
  `on_finish`, `file_evidence`, `fraction`), pure;
- outcome: how the end is judged (`settle_at_end`, `leftovers`,
  `exit_reason`).

What a driver keeps about one job beyond the Tracker's items and workers is
a state object of its own (`new_state`, a dataclass the driver declares),
which the Tracker holds in `driver_state` and never reads; the driver reads
it back with `state_of`. What a driver changes of the Tracker itself goes
through its named methods (progress.Tracker: add, set_state, finish,
mark_planned, restart_rates, add_worker...).

Adding a tool kind is one module with a Driver subclass and a line in
`registry.py`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from ..cmdline import ClientArgs, ClientSpec
from ..ddl import PostDataTarget
from ..item_kinds import ItemKind
from ..phases import Phase
from ..snapshot import (
    Backend,
    ClientProc,
    CopyProgress,
    DbSample,
    IndexProgress,
    MaintProgress,
    Snapshot,
)
from ..toc import TocItem
from .job import TREE, Job  # the job model: drivers and the core import it from here too

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..analyze.bottleneck import Verdict
    from ..analyze.eta import Eta
    from ..analyze.items import Item, WorkerState
    from ..analyze.progress import Tracker
    from ..client_tree import ClientPids
    from ..readers.db import ServerFacts
    from ..readers.procs import ProcInfo
    from ..sample import WorkerRow


S = TypeVar("S")


def state_of(tr: Tracker, kind: type[S]) -> S:
    """The state a job's driver keeps (Driver.new_state), as its own type."""
    st = tr.driver_state
    if not isinstance(st, kind):
        raise TypeError(f"the {tr.job.kind} job's driver state is a {type(st).__name__}, "
                        f"not a {kind.__name__}")
    return st


@dataclass(frozen=True)
class PlanInputs:
    """What a job's work list is built from, as read once from the live
    system and kept in recordings (the "plan" event) so that a replay plans
    the same work. Each driver fills the fields it needs."""

    toc: list[dict[str, Any]] | None = None  # archive TOC entries (toc.TocItem as dicts)
    tables: list[list[Any]] | None = None  # the catalog's tables (sql/tables_*.sql rows)
    file_sizes: dict[str, float] | None = None  # never-vacuumed tables' on-disk bytes
    targets: dict[str, Any] | None = None  # post-data items' tables (ddl.PostDataTarget)
    archive_files: dict[str, Any] | None = None  # dump id -> (path, bytes) of data files
    # a copy's source database: its name and its post-data objects
    # (sql/postdata_*.sql: indexes with the constraints they back, foreign keys)
    source: str | None = None
    postdata: dict[str, Any] | None = None
    error: str | None = None  # why there is no plan (said once to the user)
    partitions: dict[str, str] | None = None  # a restore's partitions: child -> parent
    # where the trees of file_sizes' relative paths really are (pg_probackup:
    # the data directory "" and each tablespace "pg_tblspc/OID")
    locations: dict[str, str] | None = None
    # file_sizes' paths in the order the tool works through them, as the tool
    # wrote it (pg_probackup's backup_content.control)
    file_order: list[str] | None = None
    # what else a driver read with its plan, as JSON values (a logical
    # sync's publisher limits: its slot and walsender settings and use)
    extra: dict[str, Any] | None = None

    _KEYS: ClassVar[tuple[str, ...]] = ("toc", "tables", "file_sizes", "targets",
                                        "archive_files", "source", "postdata", "error",
                                        "partitions", "locations", "file_order", "extra")

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._KEYS if getattr(self, k) is not None} \
            or {"error": None}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> PlanInputs:
        return PlanInputs(**{k: d.get(k) for k in PlanInputs._KEYS})

    def toc_items(self) -> list[TocItem]:
        names = {f.name for f in dataclasses.fields(TocItem)}
        return [TocItem(**{k: v for k, v in r.items() if k in names}) for r in self.toc or ()]

    def post_targets(self) -> dict[int, PostDataTarget]:
        names = {f.name for f in dataclasses.fields(PostDataTarget)}
        out = {}
        for k, v in (self.targets or {}).items():
            kw = {kk: vv for kk, vv in v.items() if kk in names}
            kw["dependencies"] = tuple(kw.get("dependencies") or ())
            out[int(k)] = PostDataTarget(**kw)
        return out


class PlanReader(Protocol):
    """What a driver may read while planning (a live source)."""

    facts: ServerFacts
    target_dir: str | None
    local: bool
    snapshots_taken: int

    def query_json(self, name: str) -> Any: ...

    def query_json_on(self, database: str, name: str) -> Any:
        """A catalog query on another database of the same server."""
        ...

    def source_catalog(self, database: str | None) -> tuple[Any, Any, str | None]:
        """A copy's source: (tables, post-data objects, its data directory
        when that server runs on this host) from another database of this
        server, or (None) from the server given with --source."""
        ...

    def client_binary(self, name: str) -> str | None: ...


class EndContext(Protocol):
    """What a driver may consult when a job ends (the Monitor's source)."""

    target_dir: str | None

    def final_files(self) -> Any: ...

    def catalog_done(self, database: str | None = None) -> dict[str, Any]: ...

    def may_ask_again(self, kind: str) -> bool: ...

    def pause(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class SessionApps:
    """The application_name prefixes a tool's own sessions carry (its
    program names them so: pg_dump's own name, pgBackRest's `pgBackRest
    [backup]`), and what the sample keeps of them (sql/sample_*.sql reads
    regexes the registry builds from every driver's, jobs.registry's
    `sample_apps`)."""

    prefixes: tuple[str, ...] = ()
    # their query text is kept whole (the tool's own statements: a dump's
    # COPY ... TO, its catalog reads; no user's SQL, which may hold a secret)
    query_text: bool = False
    # idle, they still belong to a running job (a dump's worker between
    # tables, a backup's session between its start and stop)
    idle: bool = False
    # its replication connections (walsenders, which have no database: a
    # base backup's streams) are sampled
    replication: bool = False


def cluster_job(kind: str, members: list[Backend], grouping: str) -> Job:
    """A whole-cluster job (a physical backup) found by its sessions alone:
    their user, client address and application_name."""
    b0 = members[0]
    return Job(kind=kind, database=None, usename=b0.usename, client_addr=b0.client_addr,
               app_name=b0.application_name, pid_hint=frozenset(b.pid for b in members),
               grouping=grouping)


def tree_member_pids(job: Job, snap: Snapshot, clients: ClientPids) -> set[int] | None:
    """A process-tree job's sessions: those whose client process is in the
    tree this tick (`ClientPids.in_tree`; None when the links could not be
    read: decide by belongs())."""
    if job.grouping != TREE or snap.links is None:
        return None
    tree = clients.in_tree(snap)
    return {bp for bp, cp in snap.links if cp in tree}


class Driver:
    """One tool kind. The defaults describe a tool that loads data into the
    server through COPY, with no plan and nothing to settle at its end."""

    kind: ClassVar[str] = ""
    # client programs recognised in the process table (basename of argv[0])
    programs: ClassVar[tuple[str, ...]] = ()
    # what the user calls one of its jobs, in messages that list the kinds
    # pgparmon follows ("no running pg_dump, ... or COPY load found")
    title: ClassVar[str] = ""
    # the application_name prefixes of its sessions, and what the sample
    # keeps of them (SessionApps); names_app reads them
    session_apps: ClassVar[SessionApps] = SessionApps()
    # what the command lines of the clients it follows mean, by program
    # (cmdline.ClientSpec: options, format letters, positional arguments)
    client_specs: ClassVar[dict[str, ClientSpec]] = {}
    # "out": the server sends the data to the client (a dump); "in": the
    # client feeds the server (a restore, a load)
    data_flow: ClassVar[str] = "in"
    # the first session holds the job's locks and waits while workers work
    has_leader: ClassVar[bool] = False
    # a session queued for an exclusive lock behind the job makes it fail
    fails_on_lock_queue: ClassVar[bool] = False
    # the work list comes from a plan (False: items appear as sessions work)
    plans_work: ClassVar[bool] = True
    # seconds per byte of table data an index build takes until one of this
    # run's builds is timed (None: a build costs index_factor of its table's
    # load, at the streams' rate: a restore's builds and loads share a pace)
    build_spb_default: ClassVar[float | None] = None
    # the client's worker processes live until the end (pg_dump, pg_restore):
    # one gone early died; False: processes come and go (a copy tool's phases,
    # a script's psql per file)
    fixed_workers: ClassVar[bool] = True
    # without its plan the job has no ETA ("no work list yet"); False: a plan
    # is made only for some jobs of the kind (a copy between databases)
    needs_plan: ClassVar[bool] = True
    # the client writes its output files into the target directory
    writes_target_files: ClassVar[bool] = False
    # the job's sessions may use any database of the server (sampled unfiltered)
    all_databases: ClassVar[bool] = False
    # the job copies the whole cluster (a physical backup): no database of its own
    whole_cluster: ClassVar[bool] = False
    # a tool that runs with the server down (a pgBackRest restore): followed
    # from the host alone, never found through the server's sessions
    host_only: ClassVar[bool] = False
    # the words of the -j advice (analyze/advice_live.py) in the tool's own
    # terms: (word, the tool's word) pairs, e.g. its option for the job count
    advice_terms: ClassVar[tuple[tuple[str, str], ...]] = ()
    # the tool has no job count to choose: the advice (headline, detail)
    # instead of one
    no_jobs_advice: ClassVar[tuple[str, str] | None] = None
    # its data loads and foreign keys run in an order of its own: a foreign
    # key built before its tables' data is loaded is warned about
    warns_early_foreign_keys: ClassVar[bool] = False
    # the job reads from another database, which --source names (the job's
    # `source` then says which)
    names_source: ClassVar[bool] = False
    # followed without its client tree, a session `belongs` accepts joins the
    # job at any sample, not only at discovery (a loader opens sessions as
    # it goes)
    joins_sessions_live: ClassVar[bool] = False
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
    # the tool's own session sits idle most of the run under no
    # application_name of its own (pg_probackup's between its backup start
    # and stop): the sessions of its process tree are looked up from the
    # client's side of their sockets, so that the sample keeps them while idle
    idle_sessions: ClassVar[bool] = False
    # a job the server runs itself (a subscription's sync): queries of this
    # kind's own (sql/NAME_*.sql, one JSON value each) read in the same round
    # trip as every sample, in `DbSample.parts[NAME]`, while jobs are looked
    # for and while one is followed; and the server process types that work
    # for its jobs (background workers), sampled with the client sessions
    sample_parts: ClassVar[tuple[str, ...]] = ()
    backend_types: ClassVar[tuple[str, ...]] = ()
    # parts read only while one of its jobs is followed, not while jobs are
    # looked for (a publisher's sync slots: when a sync seen there is over)
    follow_parts: ClassVar[tuple[str, ...]] = ()
    # the tool can be a step of a larger job: a migration tool runs it (a
    # pg_dump for the schema, a pg_restore for the post-data) while it holds
    # a transaction open, and a parent whose session sits idle in a
    # transaction makes it part of the parent's job (discover.step_of).
    # False: its parent's sessions say nothing about it (a vacuumdb that a
    # program holding a transaction starts is a job of its own)
    runs_as_step: ClassVar[bool] = False

    # ---- state -------------------------------------------------------------

    def new_state(self) -> object:
        """What this driver keeps about one job (made once per Tracker, held
        in its `driver_state`, which the Tracker never reads): a dataclass
        of the driver's own, read back with state_of. None: nothing beyond
        the Tracker's items and workers."""
        return None

    # ---- recognise ---------------------------------------------------------

    def server_jobs(self, db: DbSample, facts: ServerFacts) -> list[Job]:
        """Jobs the server runs itself, found from this kind's sample parts
        (they have no client, and may have no session yet)"""
        return []

    def from_tree(self, root: ProcInfo, args: ClientArgs) -> bool:
        """Whether a process tree of one of `programs` is a job to follow."""
        return True

    def tree_jobs(self, db: DbSample, claimed: set[int], links: dict[int, int],
                  forced: int | None, steps: set[int]) -> list[Job]:
        """Jobs found from the process table and the sessions together, of
        clients no driver's `programs` name (a COPY loader: the tree of each
        loading session's client). `claimed`: sessions other jobs hold (add
        those of the jobs returned); `links`: backend pid -> client pid;
        `forced`: a pid `attach --pid` names that no job holds yet; `steps`:
        roots of programs that run a pg_dump / pg_restore as a step of
        theirs (discover.step_of). Asked of every driver, in order, once
        the named programs' trees are taken."""
        return []

    def stale_session(self, b: Backend, now: float | None) -> bool:
        """A session whose client cannot be seen and that no driver should
        group into a job (an old session whose last statement, long ago, was
        a load's COPY)."""
        return False

    def command_job(self, pid: int, argv: list[str], dbname: str | None) -> Job | None:
        """The job `pgparmon run` makes of a command it started whose
        program no driver recognises (a loader, a script); None: not this
        kind's. The first driver that answers takes it."""
        return None

    def names_app(self, app: str | None) -> bool:
        """Whether an application_name is this kind's program's (pg_dump
        falls back to its own name; a tag like 'pg_dump/pgparmon-1a2b'
        starts with it)."""
        return app is not None and app.startswith(self.session_apps.prefixes or self.programs)

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        """For sessions whose client processes cannot be seen: the key that
        groups them into one job, or None when this kind does not claim it."""
        return None

    def from_sessions(self, members: list[Backend]) -> Job:
        raise NotImplementedError

    def refine(self, job: Job, linked: list[Backend]) -> Job:
        """A job found from its processes, completed by the sessions linked
        to them (e.g. a dump's shared snapshot)."""
        return job

    def belongs(self, job: Job, b: Backend) -> bool:
        """The grouping rule: does this session belong to this job?"""
        if b.backend_type == "parallel worker":
            return False  # counted through its leader
        if job.database and b.datname != job.database:
            return False
        if job.app_name:
            return b.application_name == job.app_name  # we tagged the job's sessions
        return self.session_matches(job, b)

    def session_matches(self, job: Job, b: Backend) -> bool:
        """belongs() for an untagged job, once database and type match."""
        raise NotImplementedError

    def member_pids(self, job: Job, snap: Snapshot, clients: ClientPids) -> set[int] | None:
        """The job's sessions as this tick's readings link them to its client
        processes (a process tree: `clients`, the keeper of its processes),
        or None: decide by belongs()."""
        return None

    def split(self, members: list[Backend]) -> list[list[Backend]]:
        """Sessions that share a grouping key but are several jobs."""
        return [members]

    def still_working(self, job: Job, members: list[Backend], snap: Snapshot) -> bool:
        """A job with no client process to watch: whether its sessions still
        make it a running job (True while it has any; asked with none too: a
        job the server runs may be working while no session shows)."""
        return bool(members)

    # ---- plan --------------------------------------------------------------

    def plan_request(self, tr: Tracker) -> dict[str, Any] | None:
        """What to read the plan from, as this job's sessions have shown it
        so far (a copy's source database); None: nothing to plan from yet
        (asked again next tick, nothing is read)."""
        return {}

    def read_plan(self, src: PlanReader, req: dict[str, Any]) -> PlanInputs | None:
        """Read what the work list is built from; None: not available yet."""
        return PlanInputs()

    def plan(self, tr: Tracker, inputs: PlanInputs) -> bool:
        """Build the work list into the tracker; False when the inputs cannot
        make one (the job is then followed from its sessions alone)."""
        return False

    def after_plan(self, tr: Tracker, ctx: EndContext, snap: Snapshot,
                   running: set[str]) -> None:
        """Once planned: settle what finished before the monitor attached
        (`running`: keys of items some session works on right now)."""

    # ---- observe -----------------------------------------------------------

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

    # ---- outcome -----------------------------------------------------------

    def settle_at_end(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> bool | None:
        """Last readings before the verdict (items that finished between two
        samples). Returns whether the job's output can be seen by this user
        (None: nothing to say)."""
        return None

    def leftovers(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> list[Item]:
        """Items still not done when the processes are gone."""
        return tr.unfinished()

    def leftover_verdict(self, tr: Tracker, left: list[Item]) -> tuple[str, str]:
        """(state, reason) of a planned job whose processes are gone with
        items not done and no exit status to read."""
        names = ", ".join(i.name for i in left[:5])
        return "failed", f"the job ended with {len(left)} item(s) not done: {names}"

    def cut_short(self, tr: Tracker, snap: Snapshot) -> str | None:
        """Evidence that the job stopped before its end (its processes are
        gone): what it was doing and how far it got; None: no such evidence."""
        return None

    def exit_reason(self, code: int) -> str:
        return f"exit code {code}"
