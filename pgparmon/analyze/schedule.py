"""One model of how pg_dump -j and pg_restore -j hand out work.

Both the live ETA and the advice before a run use this simulation, so that
the two never disagree about the shape of a run: pg_dump hands the largest
remaining table (by relpages) to the next free worker (LPT); pg_restore keeps a
ready list of items whose dependencies are done, sorted by data length, and
skips items whose exclusive locks would conflict with a running item. The end
of a run is slow because one big item runs alone; dividing remaining work by N
hides that, simulating the queue shows it.

Rates: every active stream progresses at r(k) work units per second, k being
the number of streams active at that moment (r(k) = X(k)/k, see docs/advise.md).
Because all active items share one rate, the simulation tracks a single
"per-stream progress" clock P (work units one stream has done since t = 0): an
item started at P0 with work w finishes when P reaches P0 + w. That keeps each
event O(log n) (a heap of finish points) however many items are active, and
it makes items of equal work started together finish in exactly the same
event instead of one float rounding apart. An item that takes helpers when
it starts (`Helpers`: the server's parallel index build workers, fixed for
the build's life) runs a fixed multiple of that rate: its work is divided
by it at its start, and the one clock holds.

Pure functions, no I/O.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

RateFn = Callable[[int], float]
"""Per-stream rate (work units per second) when k streams are active."""

# Items whose finish points lie within this relative distance of the next
# event finish in that event: sums of floats that are equal on paper differ
# in the last bits, and splitting them would add zero-length events and
# spurious steps in the busy profile.
_REL_TOL = 1e-12


@dataclass(frozen=True)
class WorkItem:
    """One unit the scheduler hands to a worker: a table's data, an index, a
    constraint, ..."""

    key: str
    work: float  # remaining work units, >= 0
    size: float  # ordering key: pg_dump relpages, pg_restore data length; largest first
    table: str | None = None
    # Needs an exclusive lock on `table` (pg_restore: every post-data item
    # except INDEX). Two exclusive items on one table never run together.
    exclusive: bool = False
    # Keys that must finish first; a key that is not among the pending or
    # running items counts as already done.
    deps: frozenset[str] = frozenset()
    label: str = ""
    # Tables this item locks that the scheduler does not see (pg_restore: a
    # foreign key on a partitioned table, or referencing one, locks every
    # partition; the archive names only the parents). The scheduler starts
    # it beside an item on one of them anyway, and the later of the two waits
    # for the other to end: it holds its worker and makes no progress.
    holds: frozenset[str] = frozenset()
    # The tables the item's archive entry depends on (pg_restore: a
    # post-data entry's TABLE and TABLE DATA dependencies: its table, and a
    # foreign key's referenced table too). Given, pg_restore's own rule
    # holds: an exclusive item locks all of them, and never runs beside any
    # item that names one of them (a key's build waits for the index builds
    # on its table, and they for it). Left empty, an exclusive item locks its
    # `table` against other exclusive items only.
    tables: frozenset[str] = frozenset()
    # the tables it takes in the scheduler's lock rule (`tables`, else its
    # `table` when exclusive); set from the fields above
    lock_tables: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Fail here, where the bad number is made, not deep in the heap where
        # a NaN silently breaks the ordering.
        if not (math.isfinite(self.work) and self.work >= 0):
            raise ValueError(f"WorkItem {self.key!r}: work must be finite and >= 0, "
                             f"got {self.work!r}")
        if math.isnan(self.size):
            raise ValueError(f"WorkItem {self.key!r}: size is NaN")
        if not isinstance(self.deps, frozenset):
            # Callers pass sets or lists; keep the item hashable and immutable.
            object.__setattr__(self, "deps", frozenset(self.deps))
        if not isinstance(self.holds, frozenset):
            object.__setattr__(self, "holds", frozenset(self.holds))
        if not isinstance(self.tables, frozenset):
            object.__setattr__(self, "tables", frozenset(self.tables))
        locks = self.tables or (frozenset((self.table,)) if self.exclusive and
                                self.table is not None else frozenset())
        object.__setattr__(self, "lock_tables", locks)


@dataclass(frozen=True)
class Span:
    """When and on which worker one item ran (absolute times: `now` + offset)."""

    key: str
    worker: int
    start: float
    end: float
    label: str = ""


@dataclass(frozen=True)
class Schedule:
    makespan: float  # seconds from `now` until the last item finishes
    spans: tuple[Span, ...]  # sorted by start, then worker
    last_item: str | None  # key of the item finishing last
    # Seconds at the end during which fewer than `workers` streams were busy
    # while nothing was left to start: the long tail of the run.
    tail_s: float
    unschedulable: tuple[str, ...]  # pending keys that could never start (cycles, ...)
    # (absolute time, active streams) steps; each holds until the next one;
    # the last step is (now + makespan, 0) when anything ran.
    busy_profile: tuple[tuple[float, int], ...]


class _Rates:
    """Caches r(k) and checks it once per k: r may be a fitted model that is
    costly to evaluate, and a non-positive rate would never finish anything."""

    def __init__(self, rate: RateFn) -> None:
        self._rate = rate
        self._cache: dict[int, float] = {}

    def __call__(self, k: int) -> float:
        v = self._cache.get(k)
        if v is None:
            v = float(self._rate(k))
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"rate({k}) must be a positive finite number, got {v!r}")
            self._cache[k] = v
        return v


@dataclass(frozen=True)
class Helpers:
    """Processes an item may take beside its own at its start: the server's
    parallel workers of an index build (PostgreSQL launches them when the
    build starts and keeps that many to its end). An item asks for
    `wants[key]` and gets what is free then: of the server's `pool` (those
    lent to other running items apart), and of the host's `cores` (one a
    stream, one a helper lent). With n processes in all it runs
    `speedup(key, n)` (at least 1) times a stream's rate. Items not in
    `wants` take none."""

    wants: Mapping[str, int]
    pool: int
    cores: int
    speedup: Callable[[str, int], float]

    def lend(self, key: str, busy: int, lent: int) -> int:
        """What the item `key` gets when `busy` streams run beside it and
        `lent` helpers are out."""
        want = self.wants.get(key, 0)
        if want <= 0:
            return 0
        return max(0, min(want, self.pool - lent, self.cores - busy - lent - 1))

    def best(self, key: str) -> float:
        """The item's speed-up with every helper it asks for (a lower bound's)."""
        n = max(0, min(self.wants.get(key, 0), self.pool, self.cores - 1))
        return max(1.0, self.speedup(key, 1 + n)) if n else 1.0


def simulate(pending: Sequence[WorkItem], workers: int, rate: RateFn,
             running: Sequence[WorkItem] = (), now: float = 0.0,
             helpers: Helpers | None = None) -> Schedule:
    """Simulate the scheduler from `now` until everything that can run has run.

    `running` items occupy workers 0.. from the start (all of them run even if
    there are more than `workers`; no new item starts until fewer than
    `workers` are active). A free worker takes the ready item (dependencies
    done, no exclusive-lock conflict with a running item) of largest `size`,
    ties going to the earlier item in `pending`. An item that meets a lock the
    scheduler does not see (`WorkItem.holds`) waits on its worker, making no
    progress and counting in no stream's rate, until that item has ended.
    `helpers`: processes some items take beside their own when they start
    (the server's parallel index builds); none when None.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    r = _Rates(rate)
    items: list[WorkItem] = [*running, *pending]
    sim = _Sim(items, workers, *_dependencies(items, len(running)), helpers=helpers)
    sim.set_off(len(running))
    while sim.active:
        sim.next_event(r)
    assert not sim.waiting  # a wait is for a running item: none is left waiting
    return sim.schedule(len(running), now)


def _dependencies(items: Sequence[WorkItem], n_run: int) -> tuple[list[int], list[list[int]]]:
    """(unfinished dependencies per item, who waits on each item). Running
    items (the first n_run) have started, so their own dependencies no longer
    matter; a dependency on a key that is not among the items is done."""
    n = len(items)
    index: dict[str, int] = {}
    for i, it in enumerate(items):
        if it.key in index:
            # Dependencies name items by key; a duplicate would make them ambiguous.
            raise ValueError(f"duplicate work item key {it.key!r}")
        index[it.key] = i
    missing = [0] * n
    dependents: list[list[int]] = [[] for _ in range(n)]
    for i in range(n_run, n):
        for d in items[i].deps:
            j = index.get(d)
            if j is None:
                continue  # not pending nor running: done before `now`
            missing[i] += 1  # a self-dependency never clears: reported unschedulable
            dependents[j].append(i)
    return missing, dependents


class _Sim:
    """The state of one simulation: which items wait, run and are done, the
    workers, the table locks, and the two clocks (t: seconds since `now`; p:
    the per-stream progress clock, see the module's docstring)."""

    __slots__ = ("items", "workers", "missing", "dependents", "start", "end", "worker_of",
                 "ready", "locked", "used", "blocked", "active", "free", "t", "p", "profile",
                 "waiting", "hidden", "helpers", "lent", "out")

    def __init__(self, items: list[WorkItem], workers: int, missing: list[int],
                 dependents: list[list[int]], helpers: Helpers | None = None) -> None:
        n = len(items)
        self.items = items
        self.workers = workers
        self.missing = missing
        self.dependents = dependents
        self.start: list[float | None] = [None] * n
        self.end: list[float | None] = [None] * n
        self.worker_of = [-1] * n
        # (-size, input index): largest first, then input order
        self.ready: list[tuple[float, int]] = []
        self.locked: dict[str, int] = {}  # table -> running exclusive items on it
        self.used: dict[str, int] = {}  # table -> running items that name it (lock_tables)
        self.blocked: dict[str, list[int]] = {}  # table -> ready items waiting for its lock
        self.active: list[tuple[float, int]] = []  # (finish point on the progress clock, index)
        self.free: list[int] = []  # idle worker ids below `workers`, lowest first
        self.t = 0.0  # seconds since `now`
        self.p = 0.0  # per-stream progress clock (work units)
        self.profile: list[tuple[float, int]] = []  # (t, active streams) steps
        # dispatched items waiting for a lock the scheduler does not see, in
        # the order they were dispatched (they hold a worker, not a stream)
        self.waiting: list[int] = []
        self.hidden = any(it.holds for it in items)
        self.helpers = helpers if helpers is not None and helpers.wants else None
        self.lent = [0] * n  # helpers each running item took at its start
        self.out = 0  # helpers lent now

    def set_off(self, n_run: int) -> None:
        """t = 0: the running items on workers 0.., the rest of the workers
        take what is ready."""
        for i in range(n_run):
            self._begin(i, i)  # ids >= workers only in the over-full case; never reused
        self.free = [w for w in range(n_run, self.workers)]
        heapq.heapify(self.free)
        for i in range(n_run, len(self.items)):
            if self.missing[i] == 0:
                heapq.heappush(self.ready, (-self.items[i].size, i))
        self._fill()
        self._record()

    def next_event(self, r: _Rates) -> None:
        """On to the next finish point: the items ending there end (their
        workers free, their locks released, their dependents one dependency
        nearer to ready), idle workers take what is ready."""
        active, end, worker_of, workers = self.active, self.end, self.worker_of, self.workers
        f_next = active[0][0]
        self.t = t = self.t + (f_next - self.p) / r(len(active))
        self.p = f_next
        # relative: works may be bytes or fractions of a page
        limit = f_next + _REL_TOL * abs(f_next)
        while active and active[0][0] <= limit:
            _, i = heapq.heappop(active)
            end[i] = t
            if self.lent[i]:
                self.out -= self.lent[i]
            if worker_of[i] < workers:
                heapq.heappush(self.free, worker_of[i])
            self._unlock(self.items[i])
            self._release(self.dependents[i])
        if self.waiting:
            self._wake()
        self._fill()
        self._record()

    def _begin(self, i: int, w: int) -> None:
        """Item i starts now on worker w (and takes its table's lock); it
        waits there while a running item holds a lock it needs."""
        it = self.items[i]
        self.start[i] = self.t
        self.worker_of[i] = w
        for table in it.lock_tables:
            self.used[table] = self.used.get(table, 0) + 1
            if it.exclusive:
                self.locked[table] = self.locked.get(table, 0) + 1
        if self.hidden and self._meets_hidden_lock(i):
            self.waiting.append(i)
            return
        self._run(i)

    def _run(self, i: int) -> None:
        """Item i makes progress from now: its finish point on the progress
        clock, shortened by the helpers it gets now (`Helpers`)."""
        it, work, h = self.items[i], self.items[i].work, self.helpers
        if h is not None:
            n = h.lend(it.key, len(self.active), self.out)
            if n:
                self.lent[i] = n
                self.out += n
                work /= max(1.0, h.speedup(it.key, 1 + n))
        heapq.heappush(self.active, (self.p + work, i))

    def _meets_hidden_lock(self, i: int) -> bool:
        """A running item and item i lock a table in common that the
        scheduler did not see (one holds the other's table, or both hold it)."""
        a = self.items[i]
        mine = a.holds | {a.table} if a.table is not None else a.holds
        for _, k in self.active:
            b = self.items[k]
            if not (a.holds or b.holds):
                continue
            if b.table is not None and b.table in a.holds or not mine.isdisjoint(b.holds):
                return True
        return False

    def _wake(self) -> None:
        """Waiting items whose locks are free now run (in the order they were
        dispatched; each one that runs may hold a lock a later one needs)."""
        still: list[int] = []
        for i in self.waiting:
            if self._meets_hidden_lock(i):
                still.append(i)
            else:
                self._run(i)
        self.waiting = still

    def _release(self, dependents: list[int]) -> None:
        """An item these wait on ended: those waiting on nothing more are ready."""
        missing = self.missing
        for dep in dependents:
            missing[dep] -= 1
            if missing[dep] == 0:
                heapq.heappush(self.ready, (-self.items[dep].size, dep))

    def _unlock(self, it: WorkItem) -> None:
        """An item ended: its tables' counts drop, and the items parked on a
        table whose lock (all exclusive items) or use (all items) is over are
        ready again (each is checked again when a worker takes it)."""
        for table in it.lock_tables:
            free = self._drop(self.used, table)
            if it.exclusive:
                free = self._drop(self.locked, table) or free
            if free:
                for b in self.blocked.pop(table, ()):
                    heapq.heappush(self.ready, (-self.items[b].size, b))

    @staticmethod
    def _drop(counts: dict[str, int], table: str) -> bool:
        """One fewer on `table`; whether that was the last."""
        left = counts[table] - 1
        if left:
            counts[table] = left
            return False
        del counts[table]
        return True

    def _conflict(self, it: WorkItem) -> str | None:
        """A table of `it` that a running item keeps it from (pg_restore's
        rule: an exclusive item and any other item naming a table it locks
        never run together), else None."""
        counts = self.used if it.exclusive else self.locked
        for table in it.lock_tables:
            if counts.get(table):
                return table
        return None

    def _fill(self) -> None:
        # Hand ready items to idle workers. An item whose lock conflicts is
        # parked under its table and comes back when the lock is released, so
        # it is not re-examined at every event.
        active, ready, waiting = self.active, self.ready, self.waiting
        while len(active) + len(waiting) < self.workers and ready:
            _, i = heapq.heappop(ready)
            table = self._conflict(self.items[i])
            if table is not None:
                self.blocked.setdefault(table, []).append(i)
                continue
            self._begin(i, heapq.heappop(self.free))

    def _record(self) -> None:
        """The busy profile's step for now: how many streams are active."""
        profile, t, k = self.profile, self.t, len(self.active)
        if profile and profile[-1][0] == t:
            profile.pop()  # several events at one instant: only the last state lasts
        if profile and profile[-1][1] == k:
            return
        profile.append((t, k))

    def schedule(self, n_run: int, now: float) -> Schedule:
        """The Schedule of a finished simulation, its times made absolute."""
        items, start, end, worker_of = self.items, self.start, self.end, self.worker_of
        n = len(items)
        done = [i for i in range(n) if end[i] is not None]
        makespan = self.t if done else 0.0
        unschedulable = tuple(items[i].key for i in range(n_run, n) if start[i] is None)

        last_item: str | None = None
        if done:
            # Among items ending together, name the biggest: it is what the wait is for.
            last = max(done, key=lambda i: (end[i], items[i].work, -i))
            last_item = items[last].key

        tail_s = _tail(self.profile, self.workers, makespan,
                       [s for i, s in enumerate(start) if s is not None and items[i].work > 0])

        spans = tuple(
            Span(items[i].key, worker_of[i], now + _f(start[i]), now + _f(end[i]),
                 items[i].label)
            for i in sorted(done, key=lambda i: (_f(start[i]), worker_of[i], i)))
        busy = tuple((now + ts, k) for ts, k in self.profile) if done else ()
        return Schedule(makespan=makespan, spans=spans, last_item=last_item, tail_s=tail_s,
                        unschedulable=unschedulable, busy_profile=busy)


def _f(x: float | None) -> float:
    assert x is not None
    return x


def _tail(profile: Sequence[tuple[float, int]], workers: int, makespan: float,
          starts: Sequence[float]) -> float:
    """Time at the end with fewer than `workers` busy after the last start.

    Zero-work items are left out of "the last start": an instantaneous item
    (an ACL, say) released at the very end would otherwise hide a tail that
    one long item ran alone.
    """
    if not starts:
        return 0.0
    last_start = max(starts)
    for idx, (ts, k) in enumerate(profile):
        nxt = profile[idx + 1][0] if idx + 1 < len(profile) else math.inf
        if nxt <= last_start:
            continue  # this step ended before the last start
        # After the last start the active count only falls, so the first
        # under-full step from there on (or the one holding at the last
        # start) begins the tail.
        if k < workers:
            return max(0.0, makespan - max(ts, last_start))
    return 0.0


def lower_bound(items: Sequence[WorkItem], workers: int, rate: RateFn,
                helpers: Helpers | None = None) -> float:
    """No schedule beats this: the largest item alone at r(1), or all the work
    spread over min(workers, len(items)) streams at their total throughput
    (with `helpers`, each item's work at its best speed-up)."""
    if not items:
        return 0.0
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    r = _Rates(rate)
    w_eff = min(workers, len(items))
    works = [it.work / helpers.best(it.key) if helpers is not None else it.work
             for it in items]
    longest = max(works) / r(1)
    spread = sum(works) / (w_eff * r(w_eff))
    return max(longest, spread)
