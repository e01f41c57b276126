"""vacuumdb -j N: the parallel VACUUM / ANALYZE a DBA runs after a restore
(`vacuumdb -j 8 --analyze-in-stages`, `-z`, `-Z`, `-a`). One client
process with N connections, each running one statement on one table at a
time, the largest table first (jobs/vacuumdb_plan.py: its rounds and
items; jobs/vacuumdb_options.py: its command line).

Recognised from its process (vacuumdb) and its sessions (application_name
vacuumdb): one job for the process and every session it opens, in any
database (`-a`) and any stage (it reconnects for each). Progress per table
comes from pg_stat_progress_vacuum (heap blocks scanned) and
pg_stat_progress_analyze (sample blocks), both in the sample already
(Snapshot.maint); a table is done when its session moves on, or by the
evidence jobs/vacuumdb_rounds.py reads for those no sample saw. The ETA is
the schedule simulation at -j, round by round (a round waits for its last
table before the next begins). The job ends when the process is gone.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from .. import units as fmt
from ..analyze.bottleneck import Verdict
from ..analyze.eta import Eta, per_stream_rate
from ..analyze.schedule import Schedule, WorkItem, simulate
from ..phases import Phase
from ..readers.files import table_file_sizes
from ..redact import redact_text
from ..snapshot import Backend, CopyProgress, IndexProgress, MaintProgress, Snapshot
from .base import (
    TREE,
    Driver,
    EndContext,
    Job,
    PlanInputs,
    PlanReader,
    SessionApps,
    state_of,
)
from .grouping import tree_member_pids
from .statements import maint_target
from .vacuumdb_options import CLIENT, ITEM_KINDS, VacOptions, options_of, vac_options
from .vacuumdb_plan import HEAP, SAMPLE, Parts, VacState, build, inferred_options
from .vacuumdb_rounds import (
    VacHolder,
    leftover_verdict,
    locate,
    saw,
    settle_at_end,
    settle_by_order,
    settle_from_part,
    stage_words,
)
from .vacuumdb_rounds import state as vac_state

if TYPE_CHECKING:
    from ..analyze.items import Item, WorkerState
    from ..analyze.progress import Tracker
    from ..client_tree import ClientPids

INFERRED = ("inferred: user, client address and application_name (vacuumdb's process is not "
            "on this host)")
# the workers' phases beyond the SQL sessions' vacuum / analyze: while a
# progress row says what the statement reads (its bytes are the job's
# throughput), and while it does what no view measures (a job in those is
# not stalled); short, as the workers table shows them
HEAP_SCAN = Phase("heap-scan", 52, busy=True, streams=True, legend="vacuum/analyze",
                  tui=("white on magenta", "black on bright_magenta"), fill="#9b5de5")
SAMPLING = Phase("sampling", 53, busy=True, streams=True, legend="vacuum/analyze",
                 tui=("white on magenta", "black on bright_magenta"), fill="#9b5de5")
VAC_INDEX = Phase("vac-index", 54, busy=True, waits=True,
                  tui=("white on purple4", "black on medium_purple"), fill="#6a4c93")
VAC_FULL = Phase("vac-full", 55, busy=True, waits=True,
                 tui=("white on dark_magenta", "black on orchid"), fill="#b5179e")
# this kind's part of every sample: what the followed vacuumdb finished since
# its round began (sql/vacuumdb_done_*.sql; nothing unless it is followed)
PART = "vacuumdb_done"
# past this many tables waiting in a round, the smaller ones are simulated
# in batches (as analyze/eta.py does for a long work list)
MAX_SIMULATED = 1200


class VacuumDb(Driver):
    kind = "vacuumdb"
    programs = ("vacuumdb",)
    title = "vacuumdb"
    # its idle connections are found by idle_sessions; its text, VACUUM or
    # ANALYZE, is kept as the followed job's
    session_apps = SessionApps(("vacuumdb",))
    client_specs = {"vacuumdb": CLIENT}
    data_flow = "out"  # it reads the tables (and writes their hint bits and maps)
    fixed_workers = True  # its -j connections live until the end
    all_databases = True  # -a: its sessions move from database to database
    # a connection idle while the round waits for its last tables is still
    # one of its workers: its process's sessions are looked up from the
    # client side of their sockets, so that the sample keeps them while idle
    idle_sessions = True
    follow_parts = (PART,)  # read only while a vacuumdb is followed
    phases = (HEAP_SCAN, SAMPLING, VAC_INDEX, VAC_FULL)
    item_kinds = ITEM_KINDS  # the statement each table gets
    verdicts = ("locks", "throttled")  # its verdict hook's kinds
    # the live advice compares COPY throughput at each worker count: none here
    no_jobs_advice = ("no -j advice for vacuumdb yet",
                      "the advice compares COPY throughput at different worker counts, and "
                      "vacuumdb copies nothing: the limit line (disk, CPU, locks, one table "
                      "left) and the timeline's idle share say whether more connections "
                      "would help")

    def new_state(self) -> VacHolder:
        return VacHolder()

    # ---- recognise ---------------------------------------------------------

    def refine(self, job: Job, linked: list[Backend]) -> Job:
        # one process: every session it opens is linked to it
        return dataclasses.replace(job, grouping=TREE) if job.client_pid else job

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        if b.backend_type != "client backend" or not self.names_app(b.application_name):
            return None
        return (self.kind, b.usename, b.client_addr, b.application_name)

    def from_sessions(self, members: list[Backend]) -> Job:
        b0 = members[0]
        return Job(kind=self.kind, database=b0.datname, usename=b0.usename,
                   client_addr=b0.client_addr, jobs=len(members),
                   pid_hint=frozenset(b.pid for b in members), grouping=INFERRED)

    def belongs(self, job: Job, b: Backend) -> bool:
        # any database: -a moves on from one to the next
        if b.backend_type != "client backend":
            return False
        if job.app_name:
            return b.application_name == job.app_name  # we tagged its sessions
        if job.grouping == TREE and job.pid_hint:  # links unread this tick: those seen linked
            return b.pid in job.pid_hint
        return self.session_matches(job, b)

    def session_matches(self, job: Job, b: Backend) -> bool:
        return (self.names_app(b.application_name)
                and (job.usename is None or b.usename == job.usename)
                and (job.grouping == TREE or b.client_addr == job.client_addr))

    def member_pids(self, job: Job, snap: Snapshot, clients: ClientPids) -> set[int] | None:
        # its sessions linked to its process this sample; none linked (another
        # OS user's process, whose sockets this user cannot read): belongs()
        return tree_member_pids(job, snap, clients) or None

    # ---- plan --------------------------------------------------------------

    def plan_request(self, tr: Tracker) -> dict[str, Any] | None:
        job = tr.job
        if job.client_pid or job.command:
            opts = job_options(job)
            return {"options": dataclasses.asdict(opts), "all": opts.all_databases,
                    "database": job.database}
        # a remote client: its statements say what it runs (wait for one)
        q = next((w.query for w in tr.workers.values() if maint_target(w.query)), None)
        if q is None:
            return None
        return {"options": dataclasses.asdict(inferred_options(q)), "all": False,
                "database": job.database, "inferred": True}

    def read_plan(self, src: PlanReader, req: dict[str, Any]) -> PlanInputs | None:
        names = (src.query_json("vacuumdb_databases") or [] if req.get("all")
                 else [req.get("database") or src.facts.database])
        ddir = src.facts.data_directory if src.local else None
        dbs: list[dict[str, Any]] = []
        for name in names:
            try:
                doc = (src.query_json("vacuumdb_tables") if name == src.facts.database
                       else src.query_json_on(name, "vacuumdb_tables")) or {}
            except psycopg.Error as exc:
                lines = str(exc).strip().splitlines()
                dbs.append({"name": name, "tables": [],
                            "error": redact_text(lines[0] if lines else type(exc).__name__)})
                continue
            rows = doc.get("tables") or []
            dbs.append({"name": name, "target": doc.get("target"), "tables": rows,
                        "sizes": table_file_sizes(ddir, rows)})
        return PlanInputs(extra={"request": req, "dbs": dbs})

    def plan(self, tr: Tracker, inputs: PlanInputs) -> bool:
        extra = inputs.extra or {}
        req = extra.get("request") or {}
        names = {f.name for f in dataclasses.fields(VacOptions)}
        opts = VacOptions(**{k: tuple(v) if isinstance(v, list) else v
                             for k, v in (req.get("options") or {}).items() if k in names})
        st = VacState(opts=opts, inferred=bool(req.get("inferred")))
        build(tr, st, extra.get("dbs") or [])
        state_of(tr, VacHolder).st = st
        return bool(st.rounds)

    def streams(self, tr: Tracker) -> int | None:
        st = vac_state(tr)
        return tr.job.jobs or (st.max_sessions if st is not None else 0) or 1

    # ---- observe -----------------------------------------------------------

    def maint_item(self, tr: Tracker, b: Backend, kind: str, rel: str | None,
                   mp: MaintProgress | None) -> str | None:
        st = vac_state(tr)
        return locate(tr, st, b, rel, mp) if st is not None else None

    def progress(self, tr: Tracker, it: Item, cp: CopyProgress | None,
                 ip: IndexProgress | None, snap: Snapshot) -> None:
        st = vac_state(tr)
        p = st.parts.get(it.key) if st is not None else None
        if st is None or p is None:
            return
        w = tr.workers.get(it.worker) if it.worker is not None else None
        mp = next((m for m in snap.db.maint if m.pid == it.worker), None) if snap.db else None
        phase: Phase | None = None
        if mp is not None:
            f = mp.fraction or 0.0
            ph = (mp.phase or "").lower()
            if mp.command == "VACUUM":
                toast = p.toast_oid is not None and mp.relid == p.toast_oid
                done = p.heap + f * p.toast if toast else f * p.heap
                phase = HEAP_SCAN if "scanning heap" in ph else VAC_INDEX
            else:
                p = _server_sample(tr, st, it, p, mp)
                done = p.heap + p.toast + f * p.sample
                phase = SAMPLING if "acquiring" in ph else None
            it.done = max(it.done, min(0.99 * it.work, done))
        elif st.opts.full and w is not None and w.phase == "vacuum":
            phase = VAC_FULL  # pg_stat_progress_cluster's, which the sample does not read
        st.rates.observe(it.key, snap.wall, it.done, HEAP if phase is HEAP_SCAN
                         else SAMPLE if phase is SAMPLING else None)
        if w is None or phase is None or w.phase not in ("vacuum", "analyze"):
            return
        w.phase = phase.name
        if phase.streams:
            w.bytes_done = int(it.done)
            w.bytes_rate.add(snap.ts, it.done)

    def on_finish(self, tr: Tracker, it: Item) -> None:
        st = vac_state(tr)
        p = st.parts.get(it.key) if st is not None else None
        if st is not None and p is not None:
            st.rates.finished(it.key, it.finished, p.heap + p.toast, it.work)

    def file_evidence(self, tr: Tracker, snap: Snapshot, running_now: dict[str, int]) -> None:
        st = vac_state(tr)
        if st is None:
            return
        settle_from_part(tr, st, (snap.db.parts or {}).get(PART) if snap.db else None)
        settle_by_order(tr, st)
        saw(tr, st, snap.db.server_ts if snap.db is not None else None)

    def own_eta(self, tr: Tracker) -> Eta | None:
        """The schedule simulation, round after round: each round's tables
        at -j, largest first, the next round once its last table is done.
        Each table's work in seconds of one session: its heap at the heap
        scans' measured rate, its sample at the samples' (they differ by
        an order of magnitude under the cost-based delay); a part not yet
        measured at the job's rate. The job's rate at k sessions scales them.
        The last round's last table is the run's last item, and that
        round's tail (fewer than -j tables left) the run's."""
        st = vac_state(tr)
        if st is None or not tr.planned:
            return None
        rate = per_stream_rate(tr)
        if rate is None:
            return Eta(None, reason="measuring")
        workers = self.streams(tr) or 1
        base = rate(workers)
        per = {HEAP: st.rates.rate(HEAP) or base, SAMPLE: st.rates.rate(SAMPLE) or base}

        def scaled(k: int) -> float:
            return rate(k) / base

        each = _overhead(tr, st, per, workers, scaled)
        total = 0.0
        last: Schedule | None = None
        for r in range(st.cur or 0, len(st.rounds)):
            items = [tr.items[k] for k in st.rounds[r].keys]
            running = [WorkItem(key=i.key, work=_seconds(st.parts[i.key], i.done, per),
                                size=i.size) for i in items if i.state == "running"]
            pending = _batched([WorkItem(key=i.key, work=each + _seconds(st.parts[i.key], 0.0,
                                                                         per),
                                         size=i.size) for i in items if i.state == "pending"])
            if running or pending:
                last = simulate(pending, workers, scaled, running=running)
                total += last.makespan
        if last is None:
            return Eta(total)
        it = tr.items.get(last.last_item or "")  # a batch of small tables names none
        return Eta(total, it.name if it else None, last.tail_s)

    def verdict(self, tr: Tracker, snap: Snapshot, settings: dict[str, str]) -> Verdict | None:
        active = [w for w in tr.workers.values() if w.phase != "idle"]
        mine = set(tr.workers)
        waiting = [w for w in active if w.phase == "lock-wait" and w.blocked_by
                   and not set(w.blocked_by) <= mine]
        if waiting:
            st = vac_state(tr)
            skip = st is None or not st.opts.skip_locked
            return Verdict("locks", lock_words(waiting[0], snap, len(active), skip))
        delayed = [w for w in active if w.wait_event == "Timeout:VacuumDelay"]
        if delayed and 2 * len(delayed) >= len(active):
            return Verdict("throttled", (
                f"{len(delayed)} of {len(active)} workers sleep on the cost-based vacuum delay "
                "(VacuumDelay): vacuum_cost_delay is set for vacuumdb's sessions (a manual "
                "VACUUM's default is 0); unset it for the role or database, or raise "
                "vacuum_cost_limit, for a faster run"))
        return None

    def job_fields(self, tr: Tracker, workers: list[dict[str, Any]],
                   state: str) -> dict[str, Any]:
        st = vac_state(tr)
        opts = st.opts if st is not None else job_options(tr.job)
        out: dict[str, Any] = {"progress_basis": "catalog sizes" if tr.planned else "unknown",
                               "statement": opts.words()}
        if st is None:
            return out
        counts = {"waiting": 0, "running": 0, "done": 0}
        for key in st.rounds[st.cur].keys if st.cur is not None else ():
            s = tr.items[key].state
            counts["waiting" if s == "pending" else "done" if s == "done" else "running"] += 1
        return {**out, **stage_words(st), "tables": counts,
                "unread_databases": list(st.unread) or None}

    # ---- outcome -----------------------------------------------------------

    def settle_at_end(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> bool | None:
        st = vac_state(tr)
        if st is None or snap.exit_code is not None:
            return None  # its exit status says
        return settle_at_end(tr, st, ctx)

    def leftover_verdict(self, tr: Tracker, left: list[Item]) -> tuple[str, str]:
        st = vac_state(tr)
        return leftover_verdict(st, left) if st is not None else super().leftover_verdict(tr, left)

    def exit_reason(self, code: int) -> str:
        return f"exit code {code}" + (" (vacuumdb stops at the first table that fails)"
                                      if code == 1 else "")


def job_options(job: Job) -> VacOptions:
    """What the job's command line asks for (its parsed argv when found
    live, else the redacted argv a recording keeps)."""
    if job.args is not None and job.args.program == "vacuumdb":
        return vac_options(job.args)
    return _options_of(job.command)


@lru_cache(maxsize=64)
def _options_of(command: tuple[str, ...]) -> VacOptions:
    return options_of(command)


def lock_words(w: WorkerState, snap: Snapshot, active: int, skip: bool) -> str:
    """A worker queued for its table's lock: the table, the lock, who holds it."""
    what = (maint_target(w.query) or ("vacuum", None))[0].upper()
    wf = w.waiting_for or ()
    rel = wf[2] if len(wf) > 2 and wf[2] else (w.relation or "its table")
    mode = f" ({wf[1]})" if len(wf) > 1 and wf[1] else ""
    backends = {b.pid: b for b in (snap.db.backends if snap.db else ())}
    now = snap.db.server_ts if snap.db else None
    holders = []
    for pid in w.blocked_by[:3]:
        b = backends.get(pid)
        if b is None:
            holders.append(f"pid {pid}")
            continue
        since = (f" for {fmt.duration(now - b.xact_start)}" if now and b.xact_start else "")
        holders.append(f"pid {pid} ({b.application_name or b.backend_type or '?'}, "
                       f"{b.state or 'active'}{since})")
    text = f"{what} of {rel} waits for its lock{mode}, held by {', '.join(holders)}"
    text += ": the table waits until that transaction ends"
    if active > 1:
        text += ", the other workers go on"
    return text + ("; vacuumdb --skip-locked skips a table it cannot lock at once" if skip else "")


def _server_sample(tr: Tracker, st: VacState, it: Item, p: Parts, mp: MaintProgress) -> Parts:
    """The item's sample as its ANALYZE reads it (sample_blks_total, once
    its own rows are sampled: not an inherited sample's child): the plan's
    came from relpages and the targets, which may be stale."""
    if mp.relid != p.oid or not p.oid or not mp.blocks_total \
            or "acquiring sample rows" not in (mp.phase or "").lower():
        return p
    sample = float(mp.blocks_total) * tr.block_size
    if sample == p.sample:
        return p
    p = st.parts[it.key] = dataclasses.replace(p, sample=sample)
    it.work = p.heap + p.toast + p.sample
    # what it had done was measured against the plan's sample
    it.done = min(it.done, p.heap + p.toast + (mp.fraction or 0.0) * p.sample)
    return p


def _seconds(p: Parts, done: float, per: dict[str, float]) -> float:
    """What is left of an item past `done`, in seconds of one session: its
    heap and TOAST scans, then its sample, each part at its own rate."""
    heap = p.heap + p.toast
    scan = max(0.0, heap - done)
    sample = max(0.0, p.sample - max(0.0, done - heap))
    return scan / per[HEAP] + sample / per[SAMPLE]


def _overhead(tr: Tracker, st: VacState, per: dict[str, float], workers: int,
              rate: Callable[[int], float]) -> float:
    """Seconds one session spends on a table beyond what it reads (the
    statement's own catalog work, vacuumdb's round trip; under the
    cost-based delay the catalog writes are throttled too): what the rounds
    done took beyond their simulation without it, per table a session
    handled. Nothing until a round is done (a round of many small tables,
    --analyze-in-stages' first, is mostly this)."""
    extra, tables = 0.0, 0.0
    for r in range(st.cur or 0):
        rd, nxt = st.rounds[r], st.rounds[r + 1]
        if rd.start is None or nxt.start is None or not rd.keys:
            continue
        k = min(workers, len(rd.keys))
        sim = simulate([WorkItem(key=key, work=_seconds(st.parts[key], 0.0, per),
                                 size=tr.items[key].size) for key in rd.keys], k, rate).makespan
        extra += max(0.0, nxt.start - rd.start - sim) * k
        tables += len(rd.keys)
    return extra / tables if tables else 0.0


def _batched(pending: list[WorkItem]) -> list[WorkItem]:
    """A round's waiting tables, largest first; past MAX_SIMULATED, the
    smaller ones in batches of neighbours (one stream runs a batch's back to
    back: the ETA errs by about one batch at the end)."""
    if len(pending) <= MAX_SIMULATED:
        return pending
    keep = MAX_SIMULATED // 2
    rest = pending[keep:]
    per = -(-len(rest) // keep)
    batches = [WorkItem(key=f"batch:{i}", work=sum(x.work for x in rest[i:i + per]),
                        size=rest[i].size) for i in range(0, len(rest), per)]
    return pending[:keep] + batches
