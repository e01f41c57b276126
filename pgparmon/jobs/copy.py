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

from ..analyze.items import Item
from ..analyze.rates import WindowRate
from ..readers.files import table_file_sizes
from ..readers.procs import is_input_file
from ..redact import redact_argv
from ..snapshot import Backend, CopyProgress, DbSample, IndexProgress, MaintProgress, Snapshot
from .base import TREE, Driver, EndContext, Job, PlanInputs, PlanReader, tree_member_pids
from .copy_tree import IDLE_GRACE_S, IDLE_STATES, copy_tree_jobs, idle_for
from .psql_options import PSQL
from .statements import copy_target, norm_rel
from .tables import DEFAULT_FK_FACTOR, plan_tables, table_progress

if TYPE_CHECKING:
    from ..analyze.progress import Tracker

INFERRED = "inferred: application_name, client address, user"
# remote sessions of one key that started further apart are separate jobs
START_GAP_S = 600.0
IDLE_PHASE = "idle between batches"
# bytes a reader may still take at its end beyond its measured reach (its
# stdio buffer, a last burst)
READ_SLACK = 256 * 1024
BUILD_UNMEASURED = ("a step after the copy runs (an index or constraint build, a VACUUM or "
                    "ANALYZE) that no progress view measures yet: no ETA until it does")
POST_LOAD = ("index", "constraint", "fk", "vacuum", "analyze")


class CopyLoad(Driver):
    kind = "copy"
    client_specs = {"psql": PSQL}  # a load run as psql -c "\\copy ..." or -f script
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

    def member_pids(self, job: Job, snap: Snapshot) -> set[int] | None:
        return tree_member_pids(job, snap)

    def still_working(self, job: Job, members: list[Backend], snap: Snapshot) -> bool:
        now = snap.db.server_ts if snap.db else None
        return any(idle_for(b, now) <= IDLE_GRACE_S for b in members)

    # ---- plan --------------------------------------------------------------

    def plan_request(self, tr: Tracker) -> dict[str, Any] | None:
        # a database the job reads with COPY TO and never loads: a copy's source
        # or the source server given with --source, once the job loads
        sources = tr.copy_reads - tr.copy_writes
        if tr.copy_writes and sources:
            return {"source": sorted(sources)[0]}
        if tr.copy_writes and tr.job.source:
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
        tr.plan_source = inputs.source
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
            (tr.copy_reads if ct[0] == "to" else tr.copy_writes).add(b.datname)
        if tr.planned:
            key = _planned_key(tr, rel)
            if key is not None:
                return key
        if ct is not None and ct[0] == "to":
            return None
        key = f"copy:{b.pid}:{b.query_start or 0:.3f}"
        if key not in tr.items:
            tr.add(Item(key=key, kind="copy", relation=rel, name=rel or "?", size=1.0, work=1.0))
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
        """A local loader's input files: read position over size. A file its
        process closed was read to its end; one whose process is gone keeps
        its last position (cut_short judges it at the end)."""
        sizes = {f.path: f.size for f in snap.files}
        tables = _tables_of_clients(snap)
        if tables:
            tr.kind_state["copy_from_seen"] = True
        if not tr.kind_state.get("copy_from_seen"):
            # files a process reads while none of the job's sessions has run a
            # COPY FROM are not a load's input (a backup tool reading the data
            # directory, a script reading its own data): no percentage from them
            return
        open_now: set[str] = set()
        for c in snap.clients:
            for f in c.open_files or ():
                if f.path not in sizes or not is_input_file(f):
                    continue
                key = f"{c.pid}:{f.path}"
                # where this reader was first seen in the file: a loader that
                # cuts a file into ranges starts its readers mid-file
                tr.kind_state.setdefault("input_start", {}).setdefault(
                    key, float(f.position))
                ent = tr.inputs.setdefault(key, [float(sizes[f.path]), 0.0])
                ent[0] = max(ent[0], float(sizes[f.path]))
                pos = max(ent[1], min(float(f.position), ent[0]))
                last = tr.input_seen.get(key)
                rate = last[2] if last else 0.0
                if last and snap.ts > last[0]:
                    rate = max(rate, (pos - last[1]) / (snap.ts - last[0]))
                table = tables.get(c.pid) or (last[3] if last else None)
                tr.input_seen[key] = (snap.ts, pos, rate, table)
                ent[1] = pos
                tr.input_rates.setdefault(key, WindowRate()).add(snap.ts, pos)
                open_now.add(key)
        tr.inputs_open = open_now
        alive = {c.pid for c in snap.clients if c.status != "zombie"}
        if all(c.open_files is not None for c in snap.clients):
            for key, ent in tr.inputs.items():
                if key not in open_now and int(key.split(":", 1)[0]) in alive:
                    ent[1] = ent[0]
        if tr.inputs:
            tr.input_rate.add(snap.ts, sum(e[1] for e in tr.inputs.values()))

    def cut_short(self, tr: Tracker, snap: Snapshot) -> str | None:
        """Why the load was cut short, when its processes are gone: an input
        file left further from its end than its reader could have read
        between the last sample that saw it open and now (a loader reading
        to the end and exiting normally is always within that reach)."""
        alive = {c.pid for c in snap.clients if c.status != "zombie"}

        def reached_end(key: str) -> bool:
            ts, pos, rate, _ = tr.input_seen[key]
            size = tr.inputs[key][0]
            reach = 2.0 * rate * max(snap.ts - ts, 0.0) + READ_SLACK
            return pos >= size or (int(key.split(":", 1)[0]) not in alive
                                   and size - pos <= reach)

        # a file whose readers cut it into ranges: one of them read to its end
        ended = {key.split(":", 1)[1] for key in tr.input_seen if reached_end(key)}
        cuts = []
        for key, (_ts, pos, _rate, table) in sorted(tr.input_seen.items()):
            pid, path = key.split(":", 1)
            size = tr.inputs[key][0]
            if int(pid) in alive or path in ended:
                continue
            into = f" into {table}" if table else ""
            cuts.append(f"{path}{into} read to {pos / size:.0%} ({int(pos)} of {int(size)} "
                        "bytes)")
        if not cuts:
            return None
        return "the loader stopped mid-file: " + "; ".join(cuts)

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
        if tr.inputs:
            total, done = input_files(tr)
            return min(1.0, done / total) if total else None
        items = [i for i in tr.items.values() if i.kind == "copy"]
        if items and all(i.server_total for i in items):
            total = sum(i.work for i in items)
            return min(1.0, sum(i.done for i in items) / total) if total else None
        return None

    def has_total(self, tr: Tracker) -> bool:
        return tr.planned or bool(tr.inputs) or any(it.server_total for it in tr.items.values())

    def own_eta(self, tr: Tracker) -> tuple[float | None, str | None] | None:
        if tr.planned:
            return None  # the schedule simulation over the source's tables
        builds = _running_builds(tr)
        if tr.inputs:
            total, done = input_files(tr)
            left = total - done
            rate = tr.input_rate.rate(15.0)
            files: float | None = 0.0
            if left > 0:
                if not rate or rate <= 0:
                    return None, "measuring the input files' read rate"
                # the job's rate over its window counts readers that have
                # since finished: with files of different sizes the end is one
                # reader alone, so the job ends no sooner than its slowest
                # open reader at its own rate (the job's rate stays the floor:
                # a file whose reader is gone still counts in what is left)
                files = max(left / rate, self._slowest_reader(tr))
            if builds is None:
                return None, BUILD_UNMEASURED
            return max(files or 0.0, builds), None
        if builds is None:
            return None, BUILD_UNMEASURED
        if not self.has_total(tr):
            if builds > 0:  # the loader's index builds after its copy
                return builds, None
            return None, "total unknown (COPY FROM STDIN, no input file seen): rates only"
        return None

    @staticmethod
    def _slowest_reader(tr: Tracker) -> float:
        """Seconds until the last file open now is read to its end, each at
        its own recent read rate (0 when none can be said)."""
        worst = 0.0
        for key in tr.inputs_open:
            size, pos = tr.inputs[key]
            wr = tr.input_rates.get(key)
            r = wr.rate(15.0) if wr else None
            if size > pos and r and r > 0:
                worst = max(worst, (size - pos) / r)
        return worst

    def job_fields(self, tr: Tracker, workers: list[dict[str, Any]],
                   state: str) -> dict[str, Any]:
        phases = {w["phase"] for w in workers}
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
            basis = f"source catalog ({tr.plan_source})"
        elif tr.inputs:
            basis = "client input files"
        elif any(it.server_total for it in tr.items.values()):
            basis = "server bytes_total"
        else:
            basis = "unknown"
        return {"phase": phase, "progress_basis": basis, "source": tr.job.source,
                "copies_done": sum(1 for i in tr.items.values()
                                   if i.kind in ("copy", "data") and i.state == "done")}


def input_files(tr: Tracker) -> tuple[float, float]:
    """(bytes of the input files, bytes read).  A file with one reader: its
    read position.  A file several readers share (a loader that cuts it into
    ranges, one per process): each reader covers the part from where it was
    first seen to where it is now, the one first seen lowest from the file's
    start, and the file counts once."""
    starts: dict[str, float] = tr.kind_state.get("input_start", {})
    by_path: dict[str, list[tuple[float, float, float]]] = {}
    for key, (size, pos) in tr.inputs.items():
        by_path.setdefault(key.split(":", 1)[1], []).append(
            (starts.get(key, 0.0), pos, size))
    total = done = 0.0
    for readers in by_path.values():
        size = max(r[2] for r in readers)
        if len(readers) == 1:
            total, done = total + size, done + min(readers[0][1], size)
            continue
        spans = sorted((lo, max(lo, pos)) for lo, pos, _ in readers)
        spans[0] = (0.0, spans[0][1])
        covered, end = 0.0, 0.0
        for lo, hi in spans:
            lo, hi = max(lo, end), min(hi, size)
            if hi > lo:
                covered += hi - lo
                end = hi
        total, done = total + size, done + covered
    return total, done


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


def _tables_of_clients(snap: Snapshot) -> dict[int, str]:
    """client pid -> the table its session loads now (COPY FROM)."""
    if snap.db is None or not snap.links:
        return {}
    by_pid = {b.pid: b for b in snap.db.backends}
    named = {c.pid: c.relation for c in snap.db.copies or () if c.relation}
    out: dict[int, str] = {}
    for bp, cp in snap.links:
        ct = copy_target(by_pid[bp].query) if bp in by_pid else None
        if ct is not None and ct[0] == "from" and by_pid[bp].state == "active":
            out[cp] = norm_rel(named.get(bp)) or ct[1]  # schema-qualified when known
    return out


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
    targets = sorted(tr.copy_writes)
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


def _same_rel(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return a == b
    return a == b or a.split(".")[-1] == b.split(".")[-1]
