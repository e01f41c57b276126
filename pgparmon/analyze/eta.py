"""The ETA: simulate the rest of the run with the scheduler's own rules.

Remaining bytes / N lies at the end of every parallel run, where one big item
runs alone. So the remaining items go through the same LPT / restore-queue
simulation the advisor uses, at per-stream rates learned from this run.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping

from ..jobs.plan import plan_of
from ..jobs.progress import LaterSteps, progress_of
from .eta_value import Eta
from .items import Item
from .progress import Tracker
from .rates import throughput_by_active
from .schedule import Schedule, WorkItem, simulate

MIN_HISTORY_S = 3.0


def per_stream_rate(tr: Tracker, window_s: float = 15.0) -> Callable[[int], float] | None:
    """r(k): work units per second per stream with k streams active, from
    what this run did at k streams, else from its recent average."""
    hist = tr.history
    if len(hist) < 3 or hist[-1][0] - hist[0][0] < MIN_HISTORY_S:
        return None
    t_end = hist[-1][0]
    recent = [h for h in hist if h[0] >= t_end - window_s]
    if len(recent) < 2:
        recent = hist[-2:]
    dt = recent[-1][0] - recent[0][0]
    dw = recent[-1][2] - recent[0][2]
    mean_active = sum(h[1] for h in recent) / len(recent)
    if dt <= 0 or dw <= 0 or mean_active <= 0:
        return None
    base = dw / dt / mean_active
    by_k = throughput_by_active(hist[-600:])

    def rate(k: int) -> float:
        x = by_k.get(k)
        if x and x > 0:
            return x / k
        return base

    return rate


def estimate(tr: Tracker, stalled: bool = False) -> Eta:
    if stalled:
        return Eta(None, None, None, "stalled: no progress")
    plan, obs = plan_of(tr), progress_of(tr)
    if not tr.planned and plan.plans_work and plan.needs_plan:
        return Eta(None, None, None, "no work list yet")
    own_eta = obs.own_eta(tr)
    if own_eta is not None:
        return own_eta
    rate = per_stream_rate(tr)
    if rate is None:
        return Eta(None, None, None, "measuring")
    own = _own_rates(tr)
    active = tr.running()
    r1 = rate(max(1, len(active)))
    # a build's seconds per unit of its work: timed on this run's finished
    # ones, else the plan's default (seconds per byte of its table: a build's
    # work is index_factor x that)
    spw = tr.build_seconds_per_work() or (
        plan.build_spb_default / tr.index_factor
        if plan.build_spb_default is not None and tr.index_factor > 0 else None)

    def left(it: Item) -> float:
        if spw is not None and it.kind in BUILDS and it.work > 0:
            # builds run at their own pace, timed on this run's finished ones:
            # express their time left in the streams' work units
            return (1.0 - it.fraction) * it.work * spw * r1
        return max(0.0, it.work - it.done)

    running: list[WorkItem] = []
    for it in active:
        remaining = left(it)
        # a running item's own pace says more than the average stream's
        r_own = own.get(it.key)
        if r_own and r_own > 0:
            remaining = remaining * r1 / r_own
        running.append(it.work_item(remaining, frozenset()))
    later = obs.later_steps(tr)
    tail = _Tail.of(tr, later.part_of if later is not None else None)
    if tail is not None and tail.waiting() > MAX_SIMULATED:
        pending = tail.work(left, spw * r1 if spw is not None else None)
    else:
        order = tail.order if tail is not None else sorted(tr.items.values(),
                                                             key=lambda it: -it.size)
        pending = [it.work_item(left(it)) for it in order
                   if it.state != "done" and it.state != "running"]
    if not obs.has_total(tr):
        return Eta(None, None, None, "no total known for this job")
    workers = obs.streams(tr) or max(1, len(running))
    if later is None:
        sched: Schedule = simulate(pending, workers, rate, running=running)
        last = tr.items.get(sched.last_item or "")
        return Eta(sched.makespan, last.name if last else None, sched.tail_s, None)
    return _in_steps(tr, pending, running, workers, rate, later, tail)


def _in_steps(tr: Tracker, pending: list[WorkItem], running: list[WorkItem], workers: int,
              rate: Callable[[int], float], later: LaterSteps, tail: _Tail | None) -> Eta:
    """The rest of a job in steps: this step's schedule, then each later
    step's own, one after another (a step starts when the one before has
    ended: its builds never fill the idle streams of this step's tail), each
    at its own -j."""
    parts: dict[int, list[WorkItem]] = {}
    for w in pending:
        k = tail.part.get(w.key) if tail is not None and w.key in tail.part else None
        parts.setdefault(later.part_of.get(w.key, 0) if k is None else k, []).append(w)
    sched = simulate(parts.pop(0, []), workers, rate, running=running)
    total, end = sched.makespan, sched
    for k in sorted(parts):
        n = later.streams[k - 1] if k - 1 < len(later.streams) else None
        step = simulate(parts[k], n or workers, rate)
        total += step.makespan
        if step.spans:
            end = step
    last = tr.items.get(end.last_item or "")
    return Eta(total, last.name if last else None, end.tail_s, None)


# Above this many items waiting, the smaller ones are simulated in batches
# (about MAX_SIMULATED simulated items in all): a restore of 100,000
# archive entries would otherwise simulate every one of them every sample.
MAX_SIMULATED = 1200
BUILDS = ("index", "constraint")
# each tracker's batches, kept here from one sample to the next (gone with
# the tracker)
_TAILS: weakref.WeakKeyDictionary[Tracker, _Tail] = weakref.WeakKeyDictionary()


class _Tail:
    """A large work list's small items in batches, with each batch's waiting
    work kept between samples. Items in the plan's largest-first order
    (ties in plan order, as both schedulers take them): the largest
    MAX_SIMULATED/2 stay single; the rest go in batches of neighbours in
    that order, items that wait on others apart (their batch waits on the
    batches holding what they wait on; items in longer chains of
    dependencies stay single). A batch runs its items back to back on one
    stream, so the ETA can err by about one batch's work at the end (each
    holds about 1/(MAX_SIMULATED/2) of the small items); once no more than
    MAX_SIMULATED items wait, every item is simulated again.

    Per sample it reads only the items that left "pending" since the last
    (Tracker.left_pending) and the single ones; every REFRESH samples it
    counts again from the items (an estimate of a waiting item may change)."""

    REFRESH = 60

    def __init__(self, tr: Tracker, part_of: Mapping[str, int] | None = None) -> None:
        items = tr.items
        self.version = tr.version
        # a job in steps: which later step runs each item (a batch holds
        # the items of one step only: `part`, each batch's)
        self.part_of = part_of
        steps = part_of or {}
        self.order = sorted(items.values(), key=lambda it: -it.size)
        keep = MAX_SIMULATED // 2
        self.singles = self.order[:keep]
        classes: dict[tuple[int, int], list[Item]] = {}
        for it in self.order[keep:]:
            lv = 0
            for d in it.deps:
                di = items.get(d)
                if di is None:
                    continue
                lv = 1
                if any(x in items for x in di.deps):
                    lv = 2
                    break
            if lv == 2:
                self.singles.append(it)
            else:
                classes.setdefault((steps.get(it.key, 0), lv), []).append(it)
        batched = sum(len(m) for m in classes.values())
        per = max(1, -(-batched // (MAX_SIMULATED - keep)))
        self.batch_of: dict[str, int] = {}
        self.keys: list[str] = []
        self.sizes: list[float] = []
        self.part: dict[str, int] = {}
        for (part, lv), members in sorted(classes.items()):
            for i in range(0, len(members), per):
                group = members[i:i + per]
                for it in group:
                    self.batch_of[it.key] = len(self.keys)
                key = f"batch:{lv}:{i // per}" if not part else f"batch:{part}:{lv}:{i // per}"
                self.keys.append(key)
                self.part[key] = part
                self.sizes.append(group[0].size)

        def key_of(k: str) -> str:
            b = self.batch_of.get(k)
            return k if b is None else self.keys[b]

        deps: list[set[str]] = [set() for _ in self.keys]
        for it in (it for (_, lv), members in classes.items() if lv == 1 for it in members):
            b = self.batch_of[it.key]
            deps[b].update(key_of(d) for d in it.deps if d in items)
        self.deps = [frozenset(d - {k}) for d, k in zip(deps, self.keys)]
        self.single_deps = {it.key: frozenset(key_of(d) for d in it.deps)
                            for it in self.singles
                            if any(d in self.batch_of for d in it.deps)}
        self.samples = 0
        self.recount(tr)

    @staticmethod
    def of(tr: Tracker, part_of: Mapping[str, int] | None = None) -> _Tail | None:
        """The tracker's tail, made again when its work list or its steps
        changed; None for a list small enough to simulate whole."""
        if len(tr.items) <= MAX_SIMULATED:
            return None
        tail = _TAILS.get(tr)
        if tail is None or tail.version != tr.version or tail.part_of is not part_of:
            tail = _TAILS[tr] = _Tail(tr, part_of)
        else:
            tail.samples += 1
            if tail.samples % _Tail.REFRESH == 0:
                tail.recount(tr)
            else:
                tail.consume(tr)
        return tail

    def recount(self, tr: Tracker) -> None:
        n = len(self.keys)
        # per batch: items waiting, builds' planned work, builds' work left,
        # other work left
        self.count, self.bfull = [0] * n, [0.0] * n
        self.bwork, self.other = [0.0] * n, [0.0] * n
        for key, b in self.batch_of.items():
            it = tr.items[key]
            if it.state == "pending":
                self._add(b, it, 1)
        self.seen = len(tr.left_pending)

    def _add(self, b: int, it: Item, sign: int) -> None:
        self.count[b] += sign
        w = max(0.0, it.work - it.done)
        if it.kind in BUILDS and it.work > 0:
            self.bfull[b] += sign * it.work
            self.bwork[b] += sign * w
        else:
            self.other[b] += sign * w

    def consume(self, tr: Tracker) -> None:
        for key in tr.left_pending[self.seen:]:
            b = self.batch_of.get(key)
            if b is not None:
                self._add(b, tr.items[key], -1)
        self.seen = len(tr.left_pending)

    def waiting(self) -> int:
        return sum(self.count) + sum(1 for it in self.singles
                                     if it.state != "done" and it.state != "running")

    def work(self, left: Callable[[Item], float], build_per_work: float | None
             ) -> list[WorkItem]:
        """The waiting work: single items, then batches (build_per_work: a
        build's stream work units per unit of its planned work, timed, else
        their own estimate)."""
        out = [it.work_item(left(it), self.single_deps.get(it.key, it.deps))
               for it in self.singles if it.state != "done" and it.state != "running"]
        for b, key in enumerate(self.keys):
            if self.count[b] <= 0:
                continue
            builds = (self.bfull[b] * build_per_work if build_per_work is not None
                      else self.bwork[b])
            out.append(WorkItem(key=key, work=max(0.0, builds + self.other[b]),
                                size=self.sizes[b], deps=self.deps[b],
                                label=f"{self.count[b]} small items"))
        return out


def _own_rates(tr: Tracker) -> dict[str, float]:
    """Work units per second of each running item over its recent samples."""
    out: dict[str, float] = {}
    for w in tr.workers.values():
        if not w.item or w.item not in tr.items:
            continue
        it = tr.items[w.item]
        if it.kind != "data" or not it.bytes_done:
            continue
        br = w.bytes_rate.rate(10.0)
        if br is None or br <= 0:
            continue
        # convert COPY bytes/s into this item's work units/s
        out[it.key] = br * (it.done / it.bytes_done) if it.done > 0 else 0.0
    return out
