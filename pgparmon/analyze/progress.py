"""Follow one job through the snapshot stream: which items ran where, how far
each got, and the overall progress.

Work is counted in the unit each kind can measure best: a dump in heap bytes
(what pg_dump sorts by), a restore in archive data-file bytes (read positions
are exact), a COPY load in input bytes. Post-data items of a restore (index
and constraint builds) get a work estimate in the same unit, from the size of
their table's data, corrected by what finished builds took in this run.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..client_tree import ClientPids
from ..item_kinds import COPY as COPY_ITEM
from ..jobs.job import Job
from ..jobs.statements import build_target, copy_target, maint_target, norm_rel
from ..snapshot import Backend, CopyProgress, IndexProgress, MaintProgress, Snapshot
from .items import Item, WorkerState
from .rates import WindowRate

# A freshly created index costs roughly half of loading its table's data
# (sort + write); learned per run once builds finish.
DEFAULT_INDEX_FACTOR = 0.5
# COPY TO text bytes per heap byte, until a finished table says otherwise.
DEFAULT_TEXT_RATIO = 0.85


class TrackedDriver(Protocol):
    """What the Tracker asks of its job's driver; the Tracker is handed the
    driver and knows no tool. The drivers sit above the Tracker (they
    import it), so it names its questions here: each is a member of the
    driver's Recognise or Progress protocol (jobs/recognise.py,
    jobs/progress.py; tests/test_driver_protocols.py checks it)."""

    has_leader: bool
    host_only: bool

    def new_state(self) -> object: ...
    def member_pids(self, job: Job, snap: Snapshot,
                    clients: ClientPids) -> set[int] | None: ...
    def belongs(self, job: Job, b: Backend) -> bool: ...
    def file_evidence(self, tr: Tracker, snap: Snapshot, running_now: dict[str, int]) -> None: ...
    def copy_item(self, tr: Tracker, b: Backend, rel: str | None) -> str | None: ...
    def build_item(self, tr: Tracker, b: Backend, kind: str, name: str,
                   ip: IndexProgress | None) -> str | None: ...
    def maint_item(self, tr: Tracker, b: Backend, kind: str, rel: str | None,
                   mp: MaintProgress | None) -> str | None: ...
    def other_work(self, tr: Tracker, w: WorkerState, b: Backend,
                   snap: Snapshot) -> tuple[str, str | None] | None: ...
    def progress(self, tr: Tracker, it: Item, cp: CopyProgress | None,
                 ip: IndexProgress | None, snap: Snapshot) -> None: ...
    def done_when_unseen(self, tr: Tracker, it: Item, snap: Snapshot,
                         sessions: set[int]) -> bool: ...
    def on_finish(self, tr: Tracker, it: Item) -> None: ...
    def fraction(self, tr: Tracker) -> float | None: ...


class Tracker:
    """Stateful follower of one job; feed it snapshots in order."""

    def __init__(self, job: Job, driver: TrackedDriver, block_size: int = 8192,
                 client_pids: ClientPids | None = None) -> None:
        self.job = job
        # the keeper of the job's client processes (client_tree.py): the
        # live source's, else one seeded from the job (a replay, a test)
        self.client_pids = client_pids or ClientPids.of(job)
        # the job's driver, whole: the Tracker asks it TrackedDriver's
        # questions; the core modules that hold the Tracker ask theirs
        # through one protocol each (jobs' plan_of, progress_of, end_of...)
        self.driver: Any = driver
        self.block_size = block_size
        self.items: dict[str, Item] = {}
        self.by_relation: dict[str, str] = {}  # relation -> data item key
        self.by_name: dict[str, str] = {}  # index / constraint name -> item key
        self.workers: dict[int, WorkerState] = {}
        self.text_ratio = DEFAULT_TEXT_RATIO
        self.index_factor = DEFAULT_INDEX_FACTOR
        self.planned = False
        self.first_wall: float | None = None
        self.last_wall: float | None = None
        # when the job began (wall clock), and from what: its client process,
        # else its sessions; the first sample until either is seen
        self.started: float | None = None
        self.started_from = "first sample"
        self.max_fraction = 0.0
        self.work_done_rate = WindowRate()
        self.history: list[tuple[float, int, float]] = []  # (t, active streams, work done)
        self.leader_pid: int | None = None
        self.gone_workers: set[int] = set()
        self.build_spw: list[float] = []
        # what the driver keeps about this job, of a type of its own
        # (Driver.new_state): held for it, never read here
        self.driver_state: object = driver.new_state()
        self.left_pending: list[str] = []  # items' keys as they left "pending" (set_state)
        # items running or finishing, in the order they started (set_state)
        self.in_flight: dict[str, None] = {}
        self.counts: dict[str, int] = {}  # items by state (set_state)
        self.version = 0  # moves when an item is added or removed
        self._of_kind: dict[str, tuple[int, list[str]]] = {}
        self._ticks = 0
        self._sums: tuple[tuple[Any, ...], float, float] | None = None  # work done, total
        self._ratio: tuple[tuple[int, int], float] | None = None  # restore_ratio, its key

    # ---- planning -------------------------------------------------------

    def add(self, item: Item) -> None:
        """Track an item (one of the same key is replaced). A planned data
        item takes over the stand-in of its table, seen loading before the
        plan came (add_data_item), whatever its key: the table is one item."""
        if item.kind == "data" and item.relation and not item.stand_in:
            held = self.items.get(self.by_relation.get(item.relation, ""))
            if held is not None and held.stand_in:
                _take_over(item, held)
                if held.key != item.key:
                    self.remove(held.key)
        old = self.items.get(item.key)
        if old is not None:
            self.counts[old.state] -= 1
            self.in_flight.pop(old.key, None)
        self.items[item.key] = item
        self.counts[item.state] = self.counts.get(item.state, 0) + 1
        self.version += 1
        if item.state in ("running", "finishing"):
            self.in_flight[item.key] = None
        if item.kind == "data" and item.relation:
            self.by_relation[item.relation] = item.key
        elif item.kind in ("index", "constraint", "fk"):
            self.by_name[item.name] = item.key

    def remove(self, key: str) -> None:
        """Drop an item (a COPY's stand-in once the plan names its table)."""
        it = self.items.pop(key)
        self.version += 1
        self.counts[it.state] -= 1
        self.in_flight.pop(key, None)
        if self.by_relation.get(it.relation or "") == key:
            del self.by_relation[it.relation or ""]

    def add_data_item(self, rel: str) -> None:
        """A table seen in a COPY but in no plan: an item of unknown size
        (a stand-in until a plan names the table)."""
        self.add(Item(key=rel, kind="data", relation=rel, name=rel, size=1.0, work=1.0,
                      stand_in=True))

    # ---- what a driver changes --------------------------------------------
    # Beside add, remove, add_data_item, set_state and finish, a driver
    # changes the Tracker through these alone; what it keeps of its own is
    # in driver_state.

    def mark_planned(self) -> None:
        """The work list is made (a plan, or the one item a backup is):
        overall progress never goes back from here."""
        self.planned = True

    def alias(self, name: str, key: str) -> None:
        """Another name a build of the item runs under (a constraint built
        with ALTER TABLE ... ADD CONSTRAINT on its index); a name already
        given keeps its item."""
        self.by_name.setdefault(name, key)

    def restart_rates(self) -> None:
        """The work done was counted in another unit until now (a COPY's
        bytes before the plan's heap bytes): its history and rate start over."""
        self.history.clear()
        self.work_done_rate = WindowRate()

    def set_text_ratio(self, ratio: float) -> None:
        """COPY TO text bytes per heap byte, as this run's finished tables
        show it (for the tables still to come)."""
        self.text_ratio = ratio

    def add_worker(self, w: WorkerState) -> None:
        """A row of the driver's own (a tool's process, a file in flight)
        beside the sessions' rows. update() drops the rows of pids that no
        session of the job has when it reads the server: a driver adds its
        rows again each tick (file_evidence runs after that)."""
        self.workers[w.pid] = w

    def drop_worker(self, pid: int) -> None:
        """A row of the driver's own that ended."""
        self.workers.pop(pid, None)

    # ---- following ------------------------------------------------------

    def members(self, snap: Snapshot) -> list[Backend]:
        if snap.db is None or snap.db.error:
            return []
        pids = self.driver.member_pids(self.job, snap, self.client_pids)
        if pids is not None:
            return [b for b in snap.db.backends if b.pid in pids]
        out = [b for b in snap.db.backends if self.driver.belongs(self.job, b)]
        if self.client_pids.all_gone(snap) and (self.workers or self.gone_workers):
            # the job's client processes are gone: a session never seen before
            # was opened by another client (the next dump of the same idle
            # database shares this one's snapshot xmin), not by this job
            out = [b for b in out if b.pid in self.workers or b.pid in self.gone_workers]
        return out

    def update(self, snap: Snapshot) -> None:
        self._ticks += 1
        if self.first_wall is None:
            self.first_wall = snap.wall
        self.last_wall = snap.wall
        if self.started_from == "first sample":
            self._job_start(snap, None)
        if self.driver.host_only:  # no server at all: the host's evidence only
            self.driver.file_evidence(self, snap, {})
            self._record(snap)
            return
        if snap.db is None or snap.db.error:
            return  # no server view this tick: keep what we knew
        # rows of other roles' backends come with NULL counters without
        # pg_read_all_stats: nothing to learn from them
        copies = {c.pid: c for c in snap.db.copies or () if c.bytes_processed is not None
                  and c.tuples_processed is not None}
        indexes = {i.pid: i for i in snap.db.indexes or () if i.blocks_done is not None}
        maints = {m.pid: m for m in snap.db.maint or ()}
        members = self.members(snap)
        if self.started_from == "first sample":
            self._job_start(snap, members)
        running_now: dict[str, int] = {}
        seen: set[int] = set()
        if self.driver.has_leader and self.leader_pid is None and members:
            firsts = sorted(members, key=lambda b: b.backend_start or 0)
            self.leader_pid = firsts[0].pid
        for b in members:
            seen.add(b.pid)
            w = self.workers.setdefault(b.pid, WorkerState(pid=b.pid))
            w.last_seen = snap.ts
            w.is_leader = b.pid == self.leader_pid
            key = self._observe(w, b, copies.get(b.pid), indexes.get(b.pid), snap,
                                maints.get(b.pid))
            if key is not None:
                running_now[key] = b.pid
        for pid in list(self.workers):
            if pid not in seen:
                self.gone_workers.add(pid)
                del self.workers[pid]
        self._settle(running_now, snap, seen)
        self.driver.file_evidence(self, snap, running_now)
        self._record(snap)

    def _job_start(self, snap: Snapshot, members: list[Backend] | None) -> None:
        """When the job began, settled at the first sample that shows it:
        its client process's start where this host shows the process, else
        the earliest start of its sessions (the server's clock, moved onto
        ours by the sample's server time). A monitor attached late counts
        the job's time from there, not from its own first sample; never
        later than that sample."""
        assert self.first_wall is not None
        start, source = None, "first sample"
        root = self.client_pids.root
        proc = next((c for c in snap.clients if root and c.pid == root), None)
        if proc is not None and proc.create_time:
            start, source = proc.create_time, "client process"
        elif members:
            starts = [b.backend_start for b in members if b.backend_start]
            if starts:
                shift = (snap.wall - snap.db.server_ts
                         if snap.db is not None and snap.db.server_ts is not None else 0.0)
                start, source = min(starts) + shift, "sessions"
        if start is None:
            self.started = self.first_wall
            return
        self.started, self.started_from = min(start, self.first_wall), source

    def _observe(self, w: WorkerState, b: Backend, cp: CopyProgress | None,
                 ip: IndexProgress | None, snap: Snapshot,
                 mp: MaintProgress | None = None) -> str | None:
        w.wait_event, w.blocked_by, w.waiting_for = b.wait, b.blocked_by, b.waiting_for
        w.query, w.state = b.query, b.state
        # a background worker (no client: a subscription's sync worker)
        # reports no state; it works while it exists
        active = b.state == "active" or (b.state is None and b.backend_type not in (
            None, "client backend", "walsender", "parallel worker"))
        ct = copy_target(b.query) if active else None
        key: str | None = None
        w.progress = None
        w.relation = None  # an idle worker works on nothing
        build = build_target(b.query) if active and ct is None else None
        maint = maint_target(b.query) if active and ct is None and build is None else None
        if active and (cp is not None or ct is not None):
            rel = norm_rel(cp.relation if cp and cp.relation else (ct[1] if ct else None))
            key = self.driver.copy_item(self, b, rel)
            w.phase = "copy"
            # a COPY statement no plan names: its item is named after the table
            it = self.items.get(key) if key is not None else None
            w.relation = rel if it is None or it.kind != COPY_ITEM.name else None
        elif build is not None:
            key = self.driver.build_item(self, b, build[0], build[1], ip)
            w.phase = build[0]
            if build[0] == "index":
                w.relation = ip.relation if ip else None
        elif maint is not None:
            key = self.driver.maint_item(self, b, maint[0], maint[1], mp)
            w.phase = "analyze" if mp is not None and mp.command == "ANALYZE" else maint[0]
            w.relation = norm_rel(mp.relation) if mp and mp.relation else maint[1]
        elif b.state in ("idle", "idle in transaction"):
            w.phase = "idle"
            self._idle_evidence(b)
        elif active and (other := self.driver.other_work(self, w, b, snap)) is not None:
            w.phase, key = other
        else:
            w.phase = "other"
        if b.wait_event_type == "Lock":
            w.phase = "lock-wait"
        w.item = key
        if cp is not None:
            w.bytes_done, w.tuples_done = cp.bytes_processed, cp.tuples_processed
            w.bytes_rate.add(snap.ts, cp.bytes_processed)
            w.tuples_rate.add(snap.ts, cp.tuples_processed)
        if key is not None and key in self.items:
            it = self.items[key]
            if it.state != "running":
                self.set_state(it, "running")
                # the statement began before the sample that first shows it
                lag = (snap.db.server_ts - b.query_start
                       if snap.db and snap.db.server_ts and b.query_start else 0.0)
                it.started = it.started or snap.wall - min(max(0.0, lag), 3600.0)
            it.seen_running = True
            it.worker = b.pid
            if w.relation is None:
                w.relation = it.relation
            if mp is not None and it.kind in ("vacuum", "analyze") and it.relation:
                f = mp.fraction  # one table's VACUUM / ANALYZE (a whole database's:
                if f is not None:  # one table at a time, no overall measure)
                    it.done = max(it.done, min(0.99, f) * it.work)
            self._progress(it, cp, ip, snap)
            # a COPY FROM STDIN has no total on the server (its work is the bytes
            # seen so far): its fraction would read 100% mid-stream
            w.progress = (it.fraction if it.kind != "copy" or (cp is not None and cp.bytes_total)
                          else None)
        return key

    def _progress(self, it: Item, cp: CopyProgress | None, ip: IndexProgress | None,
                  snap: Snapshot) -> None:
        if cp is not None and it.kind in ("data", "copy"):
            it.bytes_done, it.tuples_done = cp.bytes_processed, cp.tuples_processed
        self.driver.progress(self, it, cp, ip, snap)

    def restore_ratio(self) -> float:
        """Uncompressed COPY bytes per work unit, from finished data items
        (counted again only when an item finished)."""
        key = (self.count("done"), self.version)
        if self._ratio is not None and self._ratio[0] == key:
            return self._ratio[1]
        num = sum(i.bytes_done for i in self.items.values()
                  if i.kind == "data" and i.state == "done" and i.bytes_done > 0)
        den = sum(i.work for i in self.items.values()
                  if i.kind == "data" and i.state == "done" and i.bytes_done > 0)
        ratio = num / den if den > 0 and num > 0 else 1.0
        self._ratio = (key, ratio)
        return ratio

    def file_position(self, it: Item, snap: Snapshot) -> float | None:
        """Where a client process reads or writes the item's file."""
        if not it.file:
            return None
        for c in snap.clients:
            for f in c.open_files or ():
                if f.path == it.file:
                    return float(f.position)
        return None

    def _idle_evidence(self, b: Backend) -> None:
        """A worker idle between items still shows its last statement: that item is done."""
        if not b.query:
            return
        ct = copy_target(b.query)
        key = None
        if ct is not None:
            key = self.by_relation.get(norm_rel(ct[1]) or "")
        elif (build := build_target(b.query)) is not None:
            key = self.by_name.get(build[1])
        if key is not None and key in self.items and self.items[key].state != "done":
            self.set_state(self.items[key], "finishing")

    def _settle(self, running_now: dict[str, int], snap: Snapshot, seen: set[int]) -> None:
        for key in list(self.in_flight):
            it = self.items[key]
            if key not in running_now and self.driver.done_when_unseen(self, it, snap, seen):
                self.finish(it, self._ended(it, snap))

    @staticmethod
    def _ended(it: Item, snap: Snapshot) -> float:
        """When an item that its session ran and no longer runs ended: this
        sample's time, or earlier where that session shows it: idle since
        (state_change: its last statement's end) or on a later statement
        (query_start), either no earlier than this item's end; the server's
        clock moved onto ours (as a start is), never before the item's
        start. A build timed to the sample that no longer shows it counted
        up to an interval too long (0.5 s on builds of 1-3 s)."""
        wall = snap.wall
        db = snap.db
        if it.worker is None or db is None or db.error or not db.server_ts:
            return wall
        b = next((m for m in db.backends if m.pid == it.worker), None)
        if b is None:
            return wall
        t = b.state_change if b.state in ("idle", "idle in transaction") else b.query_start
        if t is None:
            return wall
        end = wall - min(max(0.0, db.server_ts - t), 3600.0)
        return max(end, it.started) if it.started is not None else end

    def set_state(self, it: Item, state: str) -> None:
        """Every change of an item's state goes through here: the keys that
        left "pending" are listed in order (the ETA keeps its sums of the
        waiting work from them instead of a pass over every item a sample)."""
        if it.state == "pending" and state != "pending":
            self.left_pending.append(it.key)
        self.counts[it.state] = self.counts.get(it.state, 0) - 1
        self.counts[state] = self.counts.get(state, 0) + 1
        it.state = state
        if state in ("running", "finishing"):
            self.in_flight[it.key] = None
        else:
            self.in_flight.pop(it.key, None)

    def finish(self, it: Item, wall: float | None) -> None:
        """The item is done (seen ending, or settled by a file or the catalog)."""
        self.set_state(it, "done")
        it.finished = wall
        if it.started is None:
            it.started = wall
        self.driver.on_finish(self, it)
        if (it.kind in ("index", "constraint") and it.seen_running and it.size > 64 * 1024
                and it.work > 0 and it.duration and it.duration > 0.5):
            # seconds per unit of a build's planned work (its table's bytes,
            # per row where the rows are known), for the builds still to come
            self.build_spw.append(it.duration / it.work)
        it.done = it.work

    def build_seconds_per_work(self) -> float | None:
        """What this run's finished index/constraint builds took per unit of
        their planned work (median), once one has been timed: a build's work
        follows its table's rows where the plan knows them, so a narrow
        table's build times a wide one's."""
        if not self.build_spw:
            return None
        return sorted(self.build_spw)[len(self.build_spw) // 2]

    def _record(self, snap: Snapshot) -> None:
        done = self.work_done()
        active = self.count("running")
        self.work_done_rate.add(snap.ts, done)
        self.history.append((snap.ts, active, done))
        if len(self.history) > 20000:
            del self.history[: len(self.history) - 20000]

    # ---- derived --------------------------------------------------------

    def count(self, state: str) -> int:
        """How many items are in this state."""
        return self.counts.get(state, 0)

    def keys_of(self, kind: str) -> list[str]:
        """The keys of the items of one kind (kept while the list is the same)."""
        got = self._of_kind.get(kind)
        if got is None or got[0] != self.version:
            got = self._of_kind[kind] = (self.version, [k for k, it in self.items.items()
                                                         if it.kind == kind])
        return got[1]

    def running(self) -> list[Item]:
        return [it for it in map(self.items.__getitem__, self.in_flight) if it.state == "running"]

    def _work_sums(self) -> tuple[float, float]:
        # one pass for both; a long work list's once a sample (its items
        # change only in update() and when they finish)
        key = (self._ticks, self.count("done"), self.version)
        if self._sums is None or self._sums[0] != key or len(self.items) < 2000:
            done = total = 0.0
            for it in self.items.values():
                total += it.work
                done += it.work if it.state == "done" else it.done
            self._sums = (key, done, total)
        return self._sums[1], self._sums[2]

    def work_done(self) -> float:
        return self._work_sums()[0]

    def work_total(self) -> float:
        return self._work_sums()[1]

    def fraction(self) -> float | None:
        """Overall progress; for a planned job it never goes back."""
        f = self.driver.fraction(self)
        if f is None or not self.planned:
            return f
        self.max_fraction = max(self.max_fraction, f)
        return self.max_fraction

    def finish_all(self, wall: float) -> None:
        for it in self.items.values():
            if it.state != "done":
                self.finish(it, wall)

    def unfinished(self) -> list[Item]:
        return [it for it in self.items.values() if it.state != "done"]


def _take_over(item: Item, held: Item) -> None:
    """What the samples saw of a table before the plan came, onto the plan's
    item for it: its state and times, its worker, the COPY's counts, and as
    much of the item's work done as the stand-in had of its own."""
    item.state, item.started, item.finished = held.state, held.started, held.finished
    item.worker, item.seen_running = held.worker, held.seen_running
    item.bytes_done, item.tuples_done = held.bytes_done, held.tuples_done
    item.server_total = held.server_total
    item.done = max(item.done, held.fraction * item.work)
