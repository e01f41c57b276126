"""Logical replication's initial sync: the parallel COPY the subscriber's
server runs itself after CREATE SUBSCRIPTION (or ALTER SUBSCRIPTION ...
REFRESH PUBLICATION) with copy_data, one table per tablesync worker, at most
max_sync_workers_per_subscription at a time.

There is no client process and no client session: the job is one
subscription of the connected database with a table not ready, found from
this kind's sample part (sql/logical_sync_*.sql, read in the sample's round
trip): pg_subscription_rel's per-table states (i waiting, d copying, f / s
catching up, r ready), pg_stat_subscription's workers (relid set: a table's
sync worker) and pg_stat_subscription_stats' sync errors (15+). Its workers
are the sync workers (backend type "logical replication worker", 17+
"logical replication tablesync worker"); each one's COPY is in
pg_stat_progress_copy (14+: COPY FROM, type CALLBACK), by table.

Sizes come from the publisher's catalog (pg_class relpages / reltuples, as
for a dump; never a lock-taking function): from the server given with
--source, else from the subscription's own connection string where the
monitor's role may read pg_subscription.subconninfo (never shown: the
description is redacted). Without them the job says "total unknown" and
gives rates. Work is counted in the publisher's heap bytes; a table copying
advances by rows over reltuples (else COPY bytes over its heap size times
the text ratio); a table past its copy (f, s) has its copy done and waits
for the apply worker (catch-up, not measured); the job ends when every table
is ready, and never before. The ETA is the schedule simulation at the sync
worker count, the tables in the order the apply worker starts them.

The same sync found on the publisher (its sync walsenders), and when it
ends there: logical_sync_publisher.py.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import psycopg

from ..analyze.bottleneck import Verdict
from ..analyze.eta import Eta
from ..analyze.items import Item
from ..phases import Phase
from ..connect import ConnectError, ConnTarget, describe_target
from ..readers.db import DbSampler
from ..readers.files import table_file_sizes
from ..readers.procs import server_is_local
from ..redact import redact_text
from ..snapshot import Backend, CopyProgress, DbSample, IndexProgress, Snapshot
from .base import Driver, EndContext, Job, PlanInputs, PlanReader, state_of
from .logical_sync_limits import origins_short, publisher_short
from .logical_sync_publisher import (
    SLOTS_PART,
    PublisherEnd,
    grouping,
    on_publisher,
    publisher_fields,
    session_key,
    sync_slots,
)
from .logical_sync_state import SyncState
from .tables import table_progress

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..analyze.items import WorkerState
    from ..analyze.progress import Tracker
    from ..client_tree import ClientPids
    from ..readers.db import ServerFacts
    from ..sample import WorkerRow

PART = "logical_sync"
GROUPING = "subscription"
# pg_subscription_rel.srsubstate, as the job names them
STATES = {"i": "waiting", "d": "copying", "f": "catching up", "s": "catching up",
          "r": "ready"}
# a worker past its table's COPY: the apply worker and it agree on where the
# table joins replication (not measured); one before its COPY: it opens its
# slot and snapshot on the publisher
CATCH_UP = "catch-up"
STARTING = "sync-start"
# both make no measurable progress by design: a sync in them is not stalled
SYNC_PHASES = (
    Phase(STARTING, 125, busy=True, waits=True, tui=("black on grey70", "black on white"),
          fill="#adb5bd"),
    Phase(CATCH_UP, 165, busy=True, waits=True, tui=("black on cyan", "black on bright_cyan"),
          fill="#8ecae6"),
)
DEFAULT_SYNC_WORKERS = 2  # max_sync_workers_per_subscription's default


def subscription(db: DbSample | None, job: Job) -> dict[str, Any] | None:
    """The job's subscription's row of this sample's part (None: not in it:
    dropped, or the part was not read). A subscription's name is unique in
    its database only."""
    if db is None or not db.parts or job.subject is None:
        return None
    return next((s for s in db.parts.get(PART) or () if s.get("name") == job.subject
                 and s.get("datname") in (job.database, None)), None)


def sync_workers(sub: dict[str, Any]) -> int:
    """How many tables sync at once: max_sync_workers_per_subscription,
    within max_logical_replication_workers less the apply worker."""
    st = sub.get("settings") or {}
    try:
        n = int(st.get("max_sync_workers_per_subscription", DEFAULT_SYNC_WORKERS))
        cap = int(st.get("max_logical_replication_workers", n + 1)) - 1
    except ValueError:
        return DEFAULT_SYNC_WORKERS
    return max(1, min(n, cap)) if cap > 0 else max(1, n)


class LogicalSync(Driver):
    kind = "logical_sync"
    title = "subscription sync"
    data_flow = "in"
    needs_plan = False  # sized only where the publisher can be read
    fixed_workers = False
    sample_parts = (PART,)
    follow_parts = (SLOTS_PART,)  # on the publisher: when the job is over
    backend_types = ("logical replication worker", "logical replication tablesync worker")
    phases = SYNC_PHASES
    verdicts = ("worker-slots", "sync-failing")

    def __init__(self) -> None:
        self._publisher_end = PublisherEnd()  # on the publisher: when a job is over

    def new_state(self) -> SyncState:
        return SyncState()

    # ---- recognise ---------------------------------------------------------
    # On the subscriber the job is found from this kind's part (server_jobs);
    # on the publisher from its sync walsenders (session_key): one job per
    # subscription (its oid and the subscriber's system id), the tables
    # copying now each with its COPY TO's progress against this server's
    # own pg_class sizes, the tables still to come unknown (the subscriber
    # lists them).

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        return session_key(self.kind, b)

    def from_sessions(self, members: list[Backend]) -> Job:
        key = self.session_key(members[0])
        assert key is not None
        return Job(kind=self.kind, database=members[0].datname,
                   subject=f"subscription oid {key[2]}", grouping=grouping(key),
                   pid_hint=frozenset(b.pid for b in members))

    def server_jobs(self, db: DbSample, facts: ServerFacts) -> list[Job]:
        out = []
        for sub in (db.parts or {}).get(PART) or ():
            pids = frozenset(int(w[0]) for w in sub.get("workers") or () if w[1] is not None)
            # another database's subscription: its tables' states cannot be
            # read from here (not_ready NULL), a sync worker running says it syncs
            syncing = sub.get("not_ready") if sub.get("here", True) else bool(pids)
            if not syncing or not sub.get("enabled"):
                continue  # every table ready (replicating), or not running
            out.append(Job(kind=self.kind, database=sub.get("datname") or facts.database,
                           subject=sub["name"], grouping=f"{GROUPING} {sub['name']}",
                           pid_hint=pids,
                           jobs=sync_workers(sub)))
        return out

    def member_pids(self, job: Job, snap: Snapshot, clients: ClientPids) -> set[int] | None:
        if on_publisher(job):
            return None  # its sync walsenders (session_matches)
        sub = subscription(snap.db, job)
        if sub is None:
            return set()
        return {int(w[0]) for w in sub.get("workers") or () if w[1] is not None}

    def session_matches(self, job: Job, b: Backend) -> bool:
        key = self.session_key(b)  # on the subscriber, member_pids decides
        return key is not None and grouping(key) == job.grouping

    def still_working(self, job: Job, members: list[Backend], snap: Snapshot) -> bool:
        # while a table is not ready, whether or not a worker runs now (one
        # waits for a free slot, or restarts after an error); on the
        # publisher, while a sync walsender or slot of its is there
        if on_publisher(job):
            return self._publisher_end.still_working(job, members, snap)
        sub = subscription(snap.db, job)
        return sub is not None and bool(sub.get("enabled")) and bool(sub.get("not_ready"))

    # ---- plan --------------------------------------------------------------

    def plan_request(self, tr: Tracker) -> dict[str, Any] | None:
        if on_publisher(tr.job):
            return {"publisher": tr.job.database}  # this server's own catalog
        if not tr.items:
            return None  # the subscription's tables are not listed yet
        return {"subscription": tr.job.subject}

    def read_plan(self, src: PlanReader, req: dict[str, Any]) -> PlanInputs | None:
        given = getattr(src, "copy_source", None)
        try:
            if req.get("publisher"):
                tables, _post, ddir = src.source_catalog(req["publisher"])
                return _sized(tables, ddir, "this server's catalog")
            if given is not None:
                return _from_publisher(given, describe_target(given))
            return self._from_subconninfo(src, req["subscription"])
        except (psycopg.Error, ConnectError) as exc:
            return PlanInputs(error=_unsized(f"cannot read the publisher's table sizes "
                                             f"({_line(exc)})"))

    @staticmethod
    def _from_subconninfo(src: PlanReader, name: str) -> PlanInputs:
        try:
            conninfos = src.query_json("logical_conninfo") or {}
        except psycopg.errors.InsufficientPrivilege:
            return PlanInputs(error=_unsized(
                "this role may not read the subscription's connection string "
                "(pg_subscription.subconninfo)"))
        conninfo = conninfos.get(name)
        if not conninfo:
            return PlanInputs(error=_unsized("the subscription has no connection string"))
        target = ConnTarget(dbname=conninfo)
        return _from_publisher(target, "subscription's connection: " + describe_target(target))

    def plan(self, tr: Tracker, inputs: PlanInputs) -> bool:
        if inputs.tables is None:
            return False
        sizes = inputs.file_sizes or {}
        pub: dict[str, tuple[float | None, float | None]] = {}
        for t in inputs.tables:
            rel = f"{t[1]}.{t[2]}"
            pages = (t[4] or 0) + (t[6] or 0)
            heap = float(pages * tr.block_size) if pages > 0 else sizes.get(rel)
            pub[rel] = (heap, float(t[5]) if t[5] is not None and t[5] > 0 else None)
        st = _st(tr)
        st.publisher = pub
        st.publisher_limits = (inputs.extra or {}).get("publisher_limits")
        tr.mark_planned()
        st.plan_source = inputs.source
        for it in list(tr.items.values()):
            _size(tr, it)
        # work was counted in COPY bytes until now: rates start over in the
        # plan's unit (the publisher's heap bytes)
        tr.restart_rates()
        return True

    def streams(self, tr: Tracker) -> int | None:
        st = _st(tr)
        return st.sync_workers or st.max_walsenders or tr.job.jobs

    # ---- observe -----------------------------------------------------------

    def copy_item(self, tr: Tracker, b: Backend, rel: str | None) -> str | None:
        if not rel:
            return None
        return _item(tr, rel).key

    def other_work(self, tr: Tracker, w: WorkerState, b: Backend,
                   snap: Snapshot) -> tuple[str, str | None] | None:
        """A sync worker with no COPY running: opening its slot (its table
        still copying, d) or catching up (f, s, or in the apply worker's
        hands)."""
        sub = subscription(snap.db, tr.job)
        if sub is None:
            return None
        relid = next((w_[1] for w_ in sub.get("workers") or () if w_[0] == b.pid), None)
        row = next((t for t in sub.get("tables") or () if t[0] == relid), None)
        if row is None:
            return None
        it = _item(tr, row[1])
        w.relation = row[1]
        return (STARTING if row[2] in ("i", "d") else CATCH_UP), it.key

    def progress(self, tr: Tracker, it: Item, cp: CopyProgress | None,
                 ip: IndexProgress | None, snap: Snapshot) -> None:
        if cp is None:
            return
        if tr.planned and it.heap_bytes:
            table_progress(tr, it, cp)
        else:  # the publisher's size is not known: what was copied, no total
            it.done = max(it.done, float(cp.bytes_processed))
            it.work = max(it.work, it.done)

    def done_when_unseen(self, tr: Tracker, it: Item, snap: Snapshot, sessions: set[int]) -> bool:
        # the subscriber: ready when pg_subscription_rel says so
        # (file_evidence); the publisher: its COPY TO has sent the table
        return on_publisher(tr.job)

    def file_evidence(self, tr: Tracker, snap: Snapshot, running_now: dict[str, int]) -> None:
        """Each table's state, from pg_subscription_rel: ready (r) is done;
        past its copy (f, s) its copy is done; copying (d) runs; waiting (i)
        waits (again, when a failed sync starts over). On the publisher: how
        many sync walsenders copy at once (the most seen: the sync workers)."""
        st = _st(tr)
        if on_publisher(tr.job):
            now = sum(1 for it in tr.items.values() if it.state == "running")
            st.max_walsenders = max(st.max_walsenders, now)
            slots = sync_slots(snap.db, tr.job)
            st.sync_slots = len(slots) if slots is not None else None
            return
        sub = subscription(snap.db, tr.job)
        if sub is None:
            return
        if sub.get("settings"):
            st.sync_workers = sync_workers(sub)
        if sub.get("sync_errors") is not None:
            st.sync_errors = int(sub["sync_errors"])
        tables = sub.get("tables")
        if tables is None:
            if not sub.get("not_ready"):  # every table is ready
                for it in tr.unfinished():
                    tr.finish(it, snap.wall)
                st.states = {k: "r" for k in tr.items}
            return
        states: dict[str, str] = {}
        n = len(tables)
        _failures(tr, sub, tables)
        for rank, (_relid, rel, srstate, _lsn) in enumerate(tables):
            it = _item(tr, rel)
            # the apply worker starts waiting tables in this order: the
            # schedule's ordering key
            it.size = float(n - rank)
            states[it.key] = srstate
            if srstate == "r":
                if it.state != "done":
                    tr.finish(it, snap.wall)
            elif srstate in ("f", "s"):
                if it.state != "finishing":
                    tr.set_state(it, "finishing")
                    it.started = it.started or snap.wall
                it.done = it.work  # its copy is done; catch-up is not measured
            elif srstate == "d":
                if it.state != "running":
                    tr.set_state(it, "running")
                    it.started = it.started or snap.wall
            elif it.state != "pending":
                tr.set_state(it, "pending")
        st.states = states
        copying = {int(w[1]) for w in sub.get("workers") or () if w[1] is not None}
        st.blocked = not copying and any(s != "r" for s in states.values())

    def between_steps(self, tr: Tracker) -> bool:
        # no sync worker runs while tables are not ready: each waits for a
        # retry after a failure, or for a free worker slot (the verdict says)
        return _st(tr).blocked

    def verdict(self, tr: Tracker, snap: Snapshot, settings: dict[str, str]) -> Verdict | None:
        """A table whose sync keeps failing; tables waiting for a worker
        slot the settings do not leave (named, with the setting)."""
        states = _st(tr).states
        fails = {k: n for k, n in _st(tr).failures.items() if states.get(k, "r") != "r"}
        sub = subscription(snap.db, tr.job)
        short = None if sub is None else (
            publisher_short(_st(tr).publisher_limits, sub, sync_workers(sub))
            or origins_short(sub, sync_workers(sub)))
        if short and (fails or any(st == "i" for st in states.values())):
            return Verdict("worker-slots", short)
        if fails:
            worst = max(fails, key=lambda k: fails[k])
            total = _st(tr).sync_errors
            count = f" (sync_error_count {total})" if total is not None else ""
            restarts = _st(tr).apply_restarts
            why = (f"; the apply worker restarted too ({restarts} time(s)): the subscriber lost "
                   "its connection to the publisher (a restart of the publisher, the network), "
                   "the subscriber's server log says more" if restarts else
                   ": the subscriber's server log says why (a duplicate key, a missing column, "
                   "a permission, the publisher's max_wal_senders or max_replication_slots)")
            return Verdict("sync-failing", f"the sync of {worst} failed {fails[worst]} time(s) "
                           f"and starts over{count}{why}")
        waiting = sum(1 for st in states.values() if st == "i")
        if sub is None or not waiting:
            return None
        st = sub.get("settings") or {}
        running = sum(1 for w in sub.get("workers") or () if w[1] is not None)
        wanted = int(st.get("max_sync_workers_per_subscription") or DEFAULT_SYNC_WORKERS)
        if running >= wanted:
            return None
        for name in ("max_logical_replication_workers", "max_worker_processes"):
            limit = st.get(name)
            if limit is not None and int(limit) - 1 < wanted:
                return Verdict("worker-slots", f"{waiting} table(s) wait for a sync worker: "
                               f"{name} = {limit} leaves {max(0, int(limit) - 1)} beside the "
                               f"apply worker, max_sync_workers_per_subscription = {wanted} "
                               "(raise it on the subscriber: a restart)")
        return None

    def fraction(self, tr: Tracker) -> float | None:
        return super().fraction(tr) if self.has_total(tr) else None

    def has_total(self, tr: Tracker) -> bool:
        return tr.planned and not on_publisher(tr.job)

    def own_eta(self, tr: Tracker) -> Eta | None:
        if on_publisher(tr.job):
            return Eta(None, reason="total unknown on the publisher: the tables still to sync "
                                    "are listed on the subscriber only (attach -d SUBDB there); "
                                    "each copying table's progress is shown")
        if tr.planned:
            return None  # the schedule simulation at the sync worker count
        return Eta(None, reason="total unknown (the publisher's table sizes were not read; "
                                "--source CONNINFO gives them): rates only")

    def job_fields(self, tr: Tracker, workers: Sequence[WorkerRow],
                   state: str) -> dict[str, Any]:
        if on_publisher(tr.job):
            return publisher_fields(tr, workers, state)
        st = _st(tr)
        states = st.states
        counts = {"waiting": 0, "copying": 0, "catching_up": 0, "ready": 0}
        tables = []
        for key, it in tr.items.items():
            name = STATES.get(states.get(key, "r" if it.state == "done" else "i"), "waiting")
            counts[name.replace(" ", "_")] += 1
            if name != "ready":
                tables.append({"table": it.name, "state": name,
                               "failures": st.failures.get(key, 0),
                               "bytes": it.bytes_done or None, "rows": it.tuples_done or None,
                               "size": it.heap_bytes,
                               "progress": round(it.fraction, 4) if tr.planned else None})
        phases = {w.phase for w in workers}
        phase = None
        if state == "running":
            phase = ("copy" if "copy" in phases else CATCH_UP if counts["catching_up"]
                     else "waiting for a sync worker" if counts["waiting"] or counts["copying"]
                     else "all tables ready")
        return {"phase": phase, "subscription": tr.job.subject, "side": "subscriber",
                "progress_basis": (f"publisher catalog ({st.plan_source})" if tr.planned
                                   else "unknown"),
                "sync_workers": self.streams(tr), "tables": counts,
                "tables_not_ready": tables, "sync_errors": st.sync_errors,
                "apply_restarts": st.apply_restarts}

    # ---- outcome -----------------------------------------------------------

    def leftovers(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> list[Item]:
        return tr.unfinished()

    def leftover_verdict(self, tr: Tracker, left: list[Item]) -> tuple[str, str]:
        names = ", ".join(i.name for i in left[:5])
        return "ended", (f"the subscription was dropped or disabled with {len(left)} table(s) "
                         f"not ready: {names}")


def _st(tr: Tracker) -> SyncState:
    return state_of(tr, SyncState)


def _failures(tr: Tracker, sub: dict[str, Any], tables: list[list[Any]]) -> None:
    """Which tables' syncs fail: a table still copying (d) whose sync worker
    is gone or replaced since the last sample failed; the subscription's
    sync_error_count (15+) says how many times (its rise since the last
    sample, shared by the tables it may be), else each such restart counts
    once."""
    workers = {int(w[1]): int(w[0]) for w in sub.get("workers") or () if w[1] is not None}
    # the apply worker (relid null) gone or replaced: it exits on an error
    # too, and both at once is the connection to the publisher lost
    apply = {int(w[0]) for w in sub.get("workers") or () if w[1] is None}
    st = _st(tr)
    apply_before = set(st.apply_workers)
    st.apply_workers = sorted(apply)
    if apply_before and not apply_before <= apply:
        st.apply_restarts += 1
    before = st.table_workers
    now = {t[1]: workers[int(t[0])] for t in tables if int(t[0]) in workers}
    st.table_workers = now
    lost = [t[1] for t in tables if t[2] == "d" and t[1] in before
            and now.get(t[1]) != before[t[1]]]
    errors = sub.get("sync_errors")
    last = st.errors_seen
    st.errors_seen = errors
    fails = st.failures
    if errors is not None and last is not None and errors > last:
        blame = lost or [t[1] for t in tables if t[2] == "d" and t[1] not in now]
        for rel in blame:
            fails[rel] = fails.get(rel, 0) + (errors - last if len(blame) == 1 else 1)
    elif errors is None:
        for rel in lost:
            fails[rel] = fails.get(rel, 0) + 1


def _item(tr: Tracker, rel: str) -> Item:
    """The table's item, made when first seen (sized from the publisher
    once its catalog was read)."""
    it = tr.items.get(rel)
    if it is None:
        it = Item(key=rel, kind="data", relation=rel, name=rel, size=1.0, work=1.0)
        tr.add(it)
        if tr.planned:
            _size(tr, it)
    return it


def _size(tr: Tracker, it: Item) -> None:
    heap, reltuples = _st(tr).publisher.get(it.relation or "", (None, None))
    heap = heap or float(tr.block_size)
    it.work, it.heap_bytes, it.reltuples = heap, heap, reltuples
    it.done = it.work if it.state in ("done", "finishing") else 0.0


def _from_publisher(target: ConnTarget, described: str) -> PlanInputs:
    """The publisher's table sizes, and its walsender and slot limits with
    their use (one short-lived monitor connection)."""
    sampler = DbSampler(target)
    try:
        facts = sampler.open()
        tables = sampler.query_json("tables") or []
        limits = sampler.query_json("logical_publisher")
    finally:
        sampler.close()
    ddir = facts.data_directory if server_is_local(facts.backend_pid) else None
    return dataclasses.replace(_sized(tables, ddir, described),
                               extra={"publisher_limits": limits} if limits else None)


def _sized(tables: Any, ddir: str | None, described: str) -> PlanInputs:
    rows = [t for t in tables or () if t[3] in ("r", "p")]
    return PlanInputs(tables=rows, file_sizes=table_file_sizes(ddir, rows),
                      source=redact_text(described))


def _unsized(why: str) -> str:
    return (f"{why}: total unknown, rates only (give the publisher with --source CONNINFO "
            "for its table sizes)")


def _line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return redact_text(lines[0] if lines else type(exc).__name__)
