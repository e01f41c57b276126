"""The ETA: simulate the rest of the run with the scheduler's own rules.

Remaining bytes / N lies at the end of every parallel run, where one big item
runs alone. So the remaining items go through the same LPT / restore-queue
simulation the advisor uses, at per-stream rates learned from this run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .progress import Tracker
from .rates import throughput_by_active
from .schedule import Schedule, WorkItem, simulate

MIN_HISTORY_S = 3.0


@dataclass(frozen=True)
class Eta:
    seconds: float | None
    last_item: str | None  # the item expected to finish last
    tail_s: float | None  # part of the rest where fewer than -j streams will run
    reason: str | None  # why there is no ETA


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
    if not tr.planned and tr.driver.plans_work and tr.driver.needs_plan:
        return Eta(None, None, None, "no work list yet")
    own_eta = tr.driver.own_eta(tr)
    if own_eta is not None:
        return Eta(own_eta[0], None, None, own_eta[1])
    rate = per_stream_rate(tr)
    if rate is None:
        return Eta(None, None, None, "measuring")
    pending: list[WorkItem] = []
    running: list[WorkItem] = []
    own = _own_rates(tr)
    r1 = rate(max(1, sum(1 for it in tr.items.values() if it.state == "running")))
    spb = tr.build_seconds_per_byte() or tr.driver.build_spb_default
    for it in tr.items.values():
        if it.state == "done":
            continue
        remaining = max(0.0, it.work - it.done)
        if spb is not None and it.kind in ("index", "constraint") and it.size > 0:
            # builds run at their own pace, timed on this run's finished ones:
            # express their time left in the streams' work units
            remaining = (1.0 - it.fraction) * it.size * spb * r1
        if it.state == "running":
            # a running item's own pace says more than the average stream's
            r_own = own.get(it.key)
            if r_own and r_own > 0:
                remaining = remaining * r1 / r_own
            running.append(WorkItem(key=it.key, work=remaining, size=it.size, table=it.relation,
                                    exclusive=it.exclusive, deps=frozenset(), label=it.name))
        else:
            pending.append(WorkItem(key=it.key, work=remaining, size=it.size, table=it.relation,
                                    exclusive=it.exclusive, deps=it.deps, label=it.name))
    if not tr.driver.has_total(tr):
        return Eta(None, None, None, "no total known for this COPY")
    workers = tr.driver.streams(tr) or max(1, len(running))
    sched: Schedule = simulate(pending, workers, rate, running=running)
    last = tr.items.get(sched.last_item or "")
    return Eta(sched.makespan, last.name if last else None, sched.tail_s, None)


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
