"""The recognise protocol: which processes and which server sessions make
up a job of one tool kind, and what the sample reads to see them.

Its defaults describe no tool: no program, no session prefix, no job the
server runs, and the generic grouping rule (same database, the tag the job
carries, else the driver's `session_matches`). The discovery
(`discover.py`), the pickers and the live source reach a driver through
this class alone (`registry.recognisers()`, `registry.recognise_for(kind)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from .job import Job

if TYPE_CHECKING:
    from ..analyze.progress import Tracker
    from ..client_tree import ClientPids
    from ..cmdline import ClientArgs, ClientSpec
    from ..readers.db import ServerFacts
    from ..readers.procs import ProcInfo
    from ..snapshot import Backend, DbSample, Snapshot


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


class Recognise:
    """How a tool kind's jobs are found: its processes, its sessions, the
    jobs the server runs for it. `kind` is required (the registry refuses a
    driver without one); every other default claims nothing."""

    # the job kind's key (Job.kind): required
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
    # the job's sessions may use any database of the server (sampled unfiltered)
    all_databases: ClassVar[bool] = False
    # the job copies the whole cluster (a physical backup): no database of its own
    whole_cluster: ClassVar[bool] = False
    # a tool that runs with the server down (a pgBackRest restore): followed
    # from the host alone, never found through the server's sessions
    host_only: ClassVar[bool] = False
    # the job reads from another database, which --source names (the job's
    # `source` then says which)
    names_source: ClassVar[bool] = False
    # followed without its client tree, a session `belongs` accepts joins the
    # job at any sample, not only at discovery (a loader opens sessions as
    # it goes)
    joins_sessions_live: ClassVar[bool] = False
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

    def in_steps(self, job: Job) -> bool:
        """Whether this run may be one step of several that one shell runs
        one after another on the same target (a restore in sections): then,
        when it ends while that shell lives, the next step is looked for
        (steps.py) and followed as the same job."""
        return False

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


def recognise_of(tr: Tracker) -> Recognise:
    """A tracked job's driver, as the recognise protocol."""
    return tr.driver
