"""A COPY load: any client program feeding the server through COPY ... FROM
(a loader, a migration tool, psql \\copy in a script), grouped by its client,
not by its target table.

- Local client (a process on this host): each session is linked to its
  client process (TCP peer port, unix socket peer), the process tree is
  walked up to the job's root (readers/procs.job_root), and every session of
  that tree, on every database of the server, is one job. The job ends when
  its processes exit; sessions idle between batches still belong to it.
- Remote client (no process to see): sessions are grouped by
  application_name, client address and user (sessions that started more
  than START_GAP_S apart are separate jobs); the job says its grouping is
  inferred, and ends when all its sessions are gone or idle for longer than
  IDLE_GRACE_S.

A copy between two databases of this server (a migration tool reading one
with COPY TO and loading the other with COPY FROM) is planned from the
source's catalog once its first COPY TO is seen: every user table of the
source (pg_class sizes, as for a dump), and the indexes and foreign keys the
tool will rebuild on the target, with the restore's post-data model; the
ETA is the schedule simulation at the streams seen. Which tables the tool
copies is inferred (all of them); the job says so, and at its end tables
never seen copied are named, not called failed.

Otherwise no plan: each COPY statement is an item (a table, or a batch).
Progress comes from what is knowable: a local loader's input files (read
position over size), else the server's bytes_total (COPY FROM a server-side
file), else rates only, and "total unknown" is said plainly.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from ..analyze.eta import Eta
from ..analyze.items import Item
from ..item_kinds import COPY as COPY_ITEM
from ..readers.files import table_file_sizes
from ..redact import redact_argv
from ..snapshot import Backend, CopyProgress, DbSample, IndexProgress, MaintProgress, Snapshot
from .base import TREE, Driver, EndContext, Job, PlanInputs, PlanReader, state_of
from .copy_inputs import CopyState, client_fraction, cut_inputs, input_files, read_inputs, \
    reader_ends, readers_tail
from .copy_tree import IDLE_GRACE_S, IDLE_STATES, copy_tree_jobs, idle_for
from .grouping import tree_member_pids
from .psql_options import PSQL
from .statements import copy_target, norm_rel
from .tables import DEFAULT_FK_FACTOR, plan_tables, table_progress

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..analyze.progress import Tracker
    from ..client_tree import ClientPids
    from ..sample import WorkerRow

INFERRED = "inferred: application_name, client address, user"
# remote sessions of one key that started further apart are separate jobs
START_GAP_S = 600.0
IDLE_PHASE = "idle between batches"
BUILD_UNMEASURED = ("a step after the copy runs (an index or constraint build, a VACUUM or "
                    "ANALYZE) that no progress view measures yet: no ETA until it does")
POST_LOAD = ("index", "constraint", "fk", "vacuum", "analyze")


class CopyLoad(Driver):
    kind = "copy"
    title = "COPY load"
    client_specs = {"psql": PSQL}  # a load run as psql -c "\\copy ..." or -f script
    data_flow = "in"
    names_source = True  # a copy between databases: --source
    joins_sessions_live = True
    plans_work = True  # only a copy between databases: see plan_request
    needs_plan = False
    # a copy's streams run at the pace of its source (a network, a remote
    # server): its builds, on the target's CPU, do not; until one is timed,
    # a build sorts its table at ~50 MB/s
    build_spb_default = 1.0 / 50e6
    fixed_workers = False
    all_databases = True

    def new_state(self) -> CopyState:
        return CopyState()

    # ---- recognise ---------------------------------------------------------

    def tree_jobs(self, db: DbSample, claimed: set[int], links: dict[int, int],
                  forced: int | None, steps: set[int]) -> list[Job]:
        # the fallback for a local client no named program claims: the
        # process tree of each loading session's client
        return copy_tree_jobs(self.kind, db, claimed, links, forced, steps)

    def stale_session(self, b: Backend, now: float | None) -> bool:
        return b.state != "active" and copy_target(b.query) is not None \
            and idle_for(b, now) > IDLE_GRACE_S

    def command_job(self, pid: int, argv: list[str], dbname: str | None) -> Job | None:
        # any command `run` started (a loader, a script): its process tree,
        # known exactly, and every session it opens, on any database
        db = dbname if dbname and "=" not in dbname and "://" not in dbname else None
        return Job(kind=self.kind, database=db, client_pid=pid, client_pids=frozenset({pid}),
                   command=tuple(redact_argv(argv)), grouping=TREE)

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        ct = copy_target(b.query)
        if ct is None or ct[0] != "from" or b.state not in ("active", *IDLE_STATES):
            return None
        return (self.kind, b.usename, b.application_name, b.client_addr)

    def split(self, members: list[Backend]) -> list[list[Backend]]:
        groups: list[list[Backend]] = []
        last: float | None = None
        for b in sorted(members, key=lambda b: b.backend_start or 0.0):
            start = b.backend_start or 0.0
            if not groups or last is None or start - last > START_GAP_S:
                groups.append([])
            groups[-1].append(b)
            last = start
        return groups

    def from_sessions(self, members: list[Backend]) -> Job:
        b0 = members[0]
        dbs = Counter(b.datname for b in members if b.datname)
        rels = {ct[1] for b in members if (ct := copy_target(b.query))}
        return Job(kind=self.kind, database=dbs.most_common(1)[0][0] if dbs else b0.datname,
                   databases=tuple(sorted(dbs)), usename=b0.usename,
                   client_addr=b0.client_addr, app_name=b0.application_name,
                   relation=rels.pop() if len(rels) == 1 else None, jobs=len(members),
                   pid_hint=frozenset(b.pid for b in members), grouping=INFERRED)

    def belongs(self, job: Job, b: Backend) -> bool:
        if b.backend_type == "parallel worker":
            return False  # counted through its leader
        if job.grouping is None:  # a recording from before grouping by client
            ct = copy_target(b.query)
            return (b.datname == job.database and ct is not None and ct[0] == "from"
                    and b.usename == job.usename and b.client_addr == job.client_addr
                    and _same_rel(ct[1], job.relation))
        if job.grouping == TREE:
            return b.pid in job.pid_hint  # when no link could be read this tick
        return (b.usename == job.usename and b.client_addr == job.client_addr
                and b.application_name == job.app_name)

    def member_pids(self, job: Job, snap: Snapshot, clients: ClientPids) -> set[int] | None:
        return tree_member_pids(job, snap, clients)

    def still_working(self, job: Job, members: list[Backend], snap: Snapshot) -> bool:
        now = snap.db.server_ts if snap.db else None
        return any(idle_for(b, now) <= IDLE_GRACE_S for b in members)

    # ---- plan --------------------------------------------------------------

    def plan_request(self, tr: Tracker) -> dict[str, Any] | None:
        # a database the job reads with COPY TO and never loads: a copy's source
        # or the source server given with --source, once the job loads
        st = _st(tr)
        sources = st.copy_reads - st.copy_writes
        if st.copy_writes and sources:
            return {"source": sorted(sources)[0]}
        if st.copy_writes and tr.job.source:
            return {"server": tr.job.source}
        return None

    def read_plan(self, src: PlanReader, req: dict[str, Any]) -> PlanInputs | None:
        db = req.get("source")
        if not db and not req.get("server"):
            return PlanInputs()
        rows, post, ddir = src.source_catalog(db)
        tables = [t for t in rows or () if t[3] == "r"]
        # tables never vacuumed: sized by their files, as for a dump
        sizes = table_file_sizes(ddir, tables)
        return PlanInputs(tables=tables, source=db or req["server"], postdata=post or {},
                          file_sizes=sizes)

    def plan(self, tr: Tracker, inputs: PlanInputs) -> bool:
        if inputs.tables is None or not inputs.source:
            return False
        plan_tables(tr, None, inputs.tables, inputs.file_sizes)
        plan_postdata(tr, inputs.postdata or {})
        _st(tr).plan_source = inputs.source
        # the statements seen before the plan are its tables' items now
        for key in [k for k, i in tr.items.items()
                    if i.kind == "copy" and _planned_key(tr, i.relation)]:
            tr.remove(key)
        # the work done so far was counted in COPY bytes: rates start over
        # in the plan's unit (heap bytes)
        tr.restart_rates()
        return True

    def after_plan(self, tr: Tracker, ctx: EndContext, snap: Snapshot,
                   running: set[str]) -> None:
        # attached mid-copy: what the target already holds is done
        _settle_from_target(tr, ctx, snap.wall, running)

    def streams(self, tr: Tracker) -> int | None:
        # the most items seen running at once (a relay's two sessions work
        # on one item; the sessions at discovery may include other steps);
        # None unplanned: its items are statements, not a queue
        if not tr.planned:
            return None
        return max((h[1] for h in tr.history), default=0) or None

    # ---- observe -----------------------------------------------------------

    def copy_item(self, tr: Tracker, b: Backend, rel: str | None) -> str | None:
        # one item per COPY statement: a table, or one batch of a load. A
        # COPY TO in a load is the read side of a relay (a migration tool
        # reading the source to feed the target's COPY FROM): not an item,
        # its COPY FROM is. A planned copy: both sides work on the table's item
        ct = copy_target(b.query)
        if ct is not None and b.datname:
            st = _st(tr)
            (st.copy_reads if ct[0] == "to" else st.copy_writes).add(b.datname)
        if tr.planned:
            key = _planned_key(tr, rel)
            if key is not None:
                return key
        if ct is not None and ct[0] == "to":
            return None
        key = f"copy:{b.pid}:{b.query_start or 0:.3f}"
        if key not in tr.items:
            tr.add(Item(key=key, kind=COPY_ITEM.name, relation=rel, name=rel or "?", size=1.0,
                        work=1.0))
        return key

    def build_item(self, tr: Tracker, b: Backend, kind: str, name: str,
                   ip: IndexProgress | None) -> str | None:
        # a planned build, else one item per build statement (a loader's
        # CREATE INDEX / ADD CONSTRAINT after its copy), as for its COPYs
        key = tr.by_name.get(name) if name else None
        if key is not None:
            return key
        key = f"build:{b.pid}:{b.query_start or 0:.3f}"
        if key not in tr.items:
            rel = norm_rel(ip.relation) if ip and ip.relation else None
            tr.add(Item(key=key, kind=kind, relation=rel, name=name or "(unnamed index)",
                        size=0.0, work=1.0, started=None))
        it = tr.items[key]
        if it.relation is None and ip is not None and ip.relation:
            it.relation = norm_rel(ip.relation)
        return key

    def maint_item(self, tr: Tracker, b: Backend, kind: str, rel: str | None,
                   mp: MaintProgress | None) -> str | None:
        # a load's VACUUM / ANALYZE after its copy: one item per statement
        key = f"maint:{b.pid}:{b.query_start or 0:.3f}"
        rel = norm_rel(mp.relation) if mp is not None and mp.relation else rel
        it = tr.items.get(key)
        if it is None:
            it = Item(key=key, kind=kind, relation=rel, name="", size=0.0, work=1.0)
            tr.add(it)
        if it.relation is None and rel:  # a session's first sample shows no text
            it.relation = rel
        it.name = f"{kind.upper()} {it.relation}" if it.relation else f"{kind.upper()} (database)"
        return key

    def progress(self, tr: Tracker, it: Item, cp: CopyProgress | None,
                 ip: IndexProgress | None, snap: Snapshot) -> None:
        if it.kind == "data" and cp is not None:
            table_progress(tr, it, cp)  # a planned table: rows over reltuples
            return
        if it.kind != "copy":
            super().progress(tr, it, cp, ip, snap)
            return
        if cp is None:
            return
        it.done = float(cp.bytes_processed)
        if cp.bytes_total:
            it.work = float(cp.bytes_total)
            it.server_total = True
        else:  # COPY FROM STDIN: the server knows no total
            it.work = max(it.work, it.done)

    def file_evidence(self, tr: Tracker, snap: Snapshot, running_now: dict[str, int]) -> None:
        """A local loader's input files (copy_inputs.read_inputs)."""
        read_inputs(_st(tr), snap)

    def cut_short(self, tr: Tracker, snap: Snapshot) -> str | None:
        """An input file its reader left mid-way (copy_inputs.cut_inputs)."""
        return cut_inputs(_st(tr), snap)

    def client_progress(self, tr: Tracker, client_pid: int) -> float | None:
        return client_fraction(_st(tr), client_pid)

    def leftovers(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> list[Item]:
        if tr.planned and tr.unfinished():
            _settle_from_target(tr, ctx, snap.wall)
        return tr.unfinished()

    def leftover_verdict(self, tr: Tracker, left: list[Item]) -> tuple[str, str]:
        if not tr.planned:
            return super().leftover_verdict(tr, left)
        # which tables the tool copies is inferred (all of the source's): a
        # filter in the tool leaves some for good, which is no failure
        tables = [i for i in left if i.kind == "data"]
        builds = [i for i in left if i.kind != "data"]
        parts = []
        if tables:
            parts.append(f"{len(tables)} of the source's tables not seen copied: "
                         + ", ".join(i.name for i in tables[:5]))
        if builds:
            parts.append(f"{len(builds)} of its indexes/constraints not seen built on the "
                         "target: " + ", ".join(i.name for i in builds[:5]))
        return "ended", ("the copy's processes are gone; " + "; ".join(parts)
                         + " (a filter in the tool, or it stopped early: its exit status is "
                         "not ours to read; `pgparmon run` knows it)")

    def fraction(self, tr: Tracker) -> float | None:
        if tr.planned:
            return super().fraction(tr)
        if _st(tr).inputs:
            total, done = input_files(_st(tr))
            return min(1.0, done / total) if total else None
        items = [i for i in tr.items.values() if i.kind == "copy"]
        if items and all(i.server_total for i in items):
            total = sum(i.work for i in items)
            return min(1.0, sum(i.done for i in items) / total) if total else None
        return None

    def has_total(self, tr: Tracker) -> bool:
        return tr.planned or bool(_st(tr).inputs) or any(it.server_total
                                                          for it in tr.items.values())

    def own_eta(self, tr: Tracker) -> Eta | None:
        if tr.planned:
            return None  # the schedule simulation over the source's tables
        builds = _running_builds(tr)
        st = _st(tr)
        if st.inputs:
            total, done = input_files(st)
            left = total - done
            rate = st.input_rate.rate(15.0)
            files = 0.0
            last: str | None = None
            tail: float | None = None
            if left > 0:
                if not rate or rate <= 0:
                    return Eta(None, reason="measuring the input files' read rate")
                # the job's rate over its window counts readers that have
                # since finished: with files of different sizes the end is one
                # reader alone, so the job ends no sooner than its slowest
                # open reader at its own rate (the job's rate stays the floor:
                # a file whose reader is gone still counts in what is left).
                # Then that reader's table is the last item, and the tail the
                # time fewer readers read than the most seen at once
                ends = reader_ends(st)
                slowest = ends[-1][0] if ends else 0.0
                files = max(left / rate, slowest)
                if ends and slowest >= left / rate:
                    most = max((h[1] for h in tr.history), default=0) or len(ends)
                    last, tail = ends[-1][1], readers_tail(ends, most)
            if builds is None:
                return Eta(None, reason=BUILD_UNMEASURED)
            if builds > files:  # the loader's index builds end it
                return Eta(builds)
            return Eta(files, last, tail)
        if builds is None:
            return Eta(None, reason=BUILD_UNMEASURED)
        if not self.has_total(tr):
            if builds > 0:  # the loader's index builds after its copy
                return Eta(builds)
            return Eta(None, reason="total unknown (COPY FROM STDIN, no input file seen): "
                                    "rates only")
        return None

    def job_fields(self, tr: Tracker, workers: Sequence[WorkerRow],
                   state: str) -> dict[str, Any]:
        phases = {w.phase for w in workers}
        phase: str | None = None
        if state == "running":
            if "copy" in phases:
                phase = "copy"
            elif phases & {"index", "constraint"}:
                phase = "index build"
            elif phases & {"vacuum", "analyze"}:
                phase = "vacuum / analyze"
            elif phases <= {"idle"}:
                phase = IDLE_PHASE
            else:
                phase = "other"
        if tr.planned:
            basis = f"source catalog ({_st(tr).plan_source})"
        elif _st(tr).inputs:
            basis = "client input files"
        elif any(it.server_total for it in tr.items.values()):
            basis = "server bytes_total"
        else:
            basis = "unknown"
        return {"phase": phase, "progress_basis": basis, "source": tr.job.source,
                "copies_done": sum(1 for i in tr.items.values()
                                   if i.kind in ("copy", "data") and i.state == "done")}


def _running_builds(tr: Tracker) -> float | None:
    """Seconds until the index / constraint builds running now end, each at
    the pace its own progress shows so far (elapsed x (1 - f) / f); 0 when
    none runs; None when one runs that nothing measures yet (a foreign key's
    validation, a build's first seconds)."""
    worst = 0.0
    for it in tr.items.values():
        if it.kind not in POST_LOAD or it.state != "running":
            continue
        f = it.fraction
        elapsed = (tr.last_wall or 0.0) - (it.started or tr.last_wall or 0.0)
        if f < 0.02 or elapsed <= 0:
            return None
        worst = max(worst, elapsed * (1.0 - f) / f)
    return worst


def plan_postdata(tr: Tracker, post: dict[str, Any]) -> None:
    """The source's indexes (with the constraints they back) and foreign keys,
    as items the target's builds advance: each waits for its table's data,
    sized like a restore's post-data items from its table's heap."""
    for schema, table, index, conname, _contype in post.get("indexes") or ():
        rel = f"{schema}.{table}"
        dkey = tr.by_relation.get(rel)
        base = tr.items[dkey].work if dkey else 0.0
        key = f"index:{schema}.{index}"
        tr.add(Item(key=key, kind="index", relation=rel, name=index, size=base,
                    work=max(base * tr.index_factor, 1.0),
                    deps=frozenset({dkey}) if dkey else frozenset()))
        if conname and conname != index:  # built as ALTER TABLE ... ADD CONSTRAINT
            tr.alias(conname, key)
    for schema, table, conname, ref in post.get("fks") or ():
        rel = f"{schema}.{table}"
        deps = {tr.by_relation[r] for r in (rel, ref) if r in tr.by_relation}
        base = tr.items[tr.by_relation[rel]].work if rel in tr.by_relation else 0.0
        tr.add(Item(key=f"fk:{schema}.{conname}", kind="fk", relation=rel, name=conname,
                    size=base, work=max(base * DEFAULT_FK_FACTOR, 1.0), deps=frozenset(deps),
                    exclusive=True))


def _planned_key(tr: Tracker, rel: str | None) -> str | None:
    """The planned table a COPY names (schema-qualified, or by its bare name
    when only one source table has it)."""
    if not rel:
        return None
    key = tr.by_relation.get(rel)
    if key is None and "." not in rel:
        hits = [k for r, k in tr.by_relation.items() if r.split(".", 1)[1] == rel]
        key = hits[0] if len(hits) == 1 else None
    return key


def _settle_from_target(tr: Tracker, ctx: EndContext, wall: float | None,
                        running: set[str] | None = None) -> None:
    """Items the target database already holds: tables that received rows
    (statistics), indexes and constraints that exist (catalog). Copies and
    builds that ran between two samples were never seen running."""
    targets = sorted(_st(tr).copy_writes)
    if len(targets) != 1:
        return
    done = ctx.catalog_done(targets[0])
    loaded = set(done.get("loaded") or ())
    names = {n.split(".", 1)[-1] for n in (done.get("relations") or ())} | \
        {n.split(".", 1)[-1] for n in (done.get("constraints") or ())}
    for it in tr.unfinished():
        if running and it.key in running:
            continue
        if (it.kind == "data" and it.relation in loaded) or (it.kind != "data"
                                                             and it.name in names):
            tr.finish(it, wall)


def _st(tr: Tracker) -> CopyState:
    return state_of(tr, CopyState)


def _same_rel(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return a == b
    return a == b or a.split(".")[-1] == b.split(".")[-1]
