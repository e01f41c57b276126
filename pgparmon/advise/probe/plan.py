"""The plan of a probe: which steps, how long each, within the budget.

A short warm-up at k=1 (not counted; its rate sizes the ranges), then
k = 1, 2, 4, ... up to max_streams, stopping when a doubling gains under 10%
(or throughput drops), then one point between the last two; or, when that
flat doubling waited on storage and the one before it gained little, the
step before it measured again (where the storage knee is, see `_knee_again`).  The time of
each step comes from the budget, which the whole probe keeps: a step that
would run past it is cut off (and dropped) and the probe returns what it has.

When the budget cannot hold a step at every count up to the host's cores
(`plan_counts`), the counts are thinned from the middle, never from the
top: the fewest and the most streams and, between them, as many as fit,
spread evenly over the doublings (1, 4, 16 of 1, 2, 4, 8, 16), and the
caller's work after the steps (the WAL steps) is kept to the most streams
measured.  A probe cut off after its first doublings measured how one and
two streams do, which says little of how sixteen do.
Also the checks and notes the dump and restore probes share.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...analyze.saturation import FLAT_GAIN, STORAGE_GAIN, STORAGE_IO_SHARE, doubling_gain
from ...readers.devices import device_for_path
from ... import units as fmt
from .results import ProbeError, ProbePoint, WalPoint
from .steps import STEP_OVERHEAD_S, Aborted, StepRunner
from .walstep import STEP_OVERHEAD_S as WAL_OVERHEAD_S
from .walstep import STEP_S as WAL_STEP_S
from .walstep import measure_wal, wal_reserve

# Step timing (seconds).  A step shorter than MIN_STEP_S is noise; longer than
# MAX_STEP_S adds nothing to a steady rate but time.
MIN_STEP_S = 1.5
MAX_STEP_S = 6.0
# Below this the probe cannot measure anything worth fitting.
MIN_BUDGET_S = 2.0
# Kept free at the end of the budget for removing the scratch directory.
CLEANUP_RESERVE_S = 0.25
# A step lasts its planned time plus the tail of the ranges in flight:
# ranges are sized to about 1/RANGES_PER_STEP of the step.
RANGES_PER_STEP = 6
MIN_RANGE_S = 0.15
# The warm-up's first range; each range after it is twice the one before.
WARMUP_FIRST_BYTES = 256 * 1024.0
# X(2) above this many times X(1) is superlinear: k=1 was cold, measure again
# (for k streams over one: k / 2 times this).
SUPERLINEAR = 2.2
# A thinned plan keeps the caller's per-count work after the steps (the WAL
# steps) to this many counts: the most streams measured.
THIN_AFTER_COUNTS = 1


def _gain(a: ProbePoint, b: ProbePoint) -> float:
    return doubling_gain(a.streams, a.bytes_per_s, b.streams, b.bytes_per_s)


def stream_plan(max_streams: int) -> list[int]:
    """1, 2, 4, ... up to max_streams (and max_streams itself)."""
    ks, k = [], 1
    while k <= max_streams:
        ks.append(k)
        k *= 2
    if ks[-1] != max_streams:
        ks.append(max_streams)
    return ks


def spread(counts: list[int], n: int) -> list[int]:
    """n of counts (fewest first): the first and the last, and between them
    the ones nearest to even steps along the list (counts that double: even
    in log), without repeats."""
    if n >= len(counts):
        return list(counts)
    if n <= 1:
        return counts[:1]
    last = len(counts) - 1
    return sorted({counts[round(i * last / (n - 1))] for i in range(n)})


def step_cost(stretched: bool = True) -> float:
    """What one step at its shortest (MIN_STEP_S) takes of the budget:
    stretched, with the ranges in flight at its end allowed for as
    `_Steps.step` allows for them; else as the steps take it in practice
    (1.6 to 1.9 s of wall time on a 16-core host)."""
    stretch = 1 + 2 / RANGES_PER_STEP if stretched else 1.0
    return MIN_STEP_S * stretch + STEP_OVERHEAD_S


@dataclass
class Plan:
    """The stream counts a probe measures within its budget (`plan_counts`).

    counts: the plan, fewest first (the full 1, 2, 4, ... max_streams, or,
    thinned, a spread of it up to the cores); thinned: counts were left out
    from the middle for the budget; skipped: the counts of the full plan
    not planned (thinned) or not reached (the budget ran out: filled in by
    the steps); after_s: seconds kept at the end for the caller's work per
    count (the WAL steps), after_counts of them."""

    counts: list[int]
    thinned: bool = False
    top: int = 1
    after_s: float = 0.0
    after_counts: int = 0
    skipped: list[int] = field(default_factory=list)

    def after_at(self, measured: list[int]) -> list[int]:
        """The counts the caller's after-steps work runs at: every count
        measured, or, thinned, the most streams measured."""
        ks = sorted(set(measured))
        if not self.thinned:
            return ks
        return ks[-self.after_counts:] if self.after_counts > 0 else []

    def note(self, budget_s: float, measured: list[int]) -> str | None:
        """Which counts were measured and which skipped for the budget."""
        if not self.thinned:
            return None
        got = sorted(set(measured))
        skipped = [k for k in self.skipped if k not in got]
        beyond = [k for k in skipped if k > self.top]
        inside = [k for k in skipped if k <= self.top]
        text = (f"the budget of {budget_s:g} s did not hold a step at every stream count "
                f"up to {self.top}: measured {_ks(got)} (spread up to {self.top}, thinned "
                "from the middle)")
        if inside:
            text += f", skipped {_ks(inside)}"
        if beyond:
            text += f"; {_ks(beyond)} beyond the cores not measured"
        return text


def _ks(ks: list[int]) -> str:
    return ", ".join(str(k) for k in ks) if ks else "none"


def plan_counts(max_streams: int, cores: int, avail_s: float,
                after: Callable[[int], float] | None = None) -> Plan:
    """The counts to measure in avail_s seconds (after the warm-up).

    The full plan (1, 2, 4, ... max_streams) when the doublings reach the
    cores (min(max_streams, cores), `top`) within the budget, at the pace
    steps take in practice, with the caller's per-count work after them
    (after(n): its seconds for n counts) kept for every count: as before,
    the steps then run until the budget ends.  Else the plan is thinned:
    the fewest and the most streams up to the cores and, between them, as
    many counts as fit at a step of at least MIN_STEP_S each (with room for
    the ranges in flight), spread over the doublings; the work after them
    kept to THIN_AFTER_COUNTS counts.  Never thinned below 1 and top, nor
    when only 1 and top are left to measure (1 and 2 on a 2-core host)."""
    full = stream_plan(max_streams)
    top = max(1, min(max_streams, cores))
    core = [k for k in full if k < top] + [top]
    after = after or (lambda n: 0.0)
    reserve = after(len(full))
    if len(core) <= 2 or (avail_s - reserve) >= len(core) * step_cost(stretched=False):
        return Plan(full, False, top, reserve, len(full))
    n_after = THIN_AFTER_COUNTS
    rest = avail_s - after(n_after)
    n = max(2, min(len(core) - 1, int(rest // step_cost())))
    counts = spread(core, n)
    return Plan(counts, True, top, after(n_after), n_after,
                [k for k in full if k not in counts])


def check_args(budget_s: float, max_streams: int) -> None:
    """ProbeError for a budget too short to measure or no streams."""
    if not budget_s >= MIN_BUDGET_S:
        raise ProbeError(f"a probe budget of {budget_s:g} s is too short to measure anything "
                         f"(give at least {MIN_BUDGET_S:g} s)")
    if max_streams < 1:
        raise ProbeError("max_streams must be at least 1")


def probe_device(path: str, notes: list[str]) -> str | None:
    """The block device that holds path, or None with a note saying so."""
    try:
        device = device_for_path(path)
    except OSError:
        device = None
    if device is None:
        notes.append(f"no block device found for {path}: disk metrics not measured")
    return device


def cpu_note(probe: StepRunner, points: list[ProbePoint], notes: list[str]) -> None:
    """A note when the server's CPU could not be measured."""
    if points and probe.server_cpu_missing:
        notes.append("server CPU not measured (the server is not on this host, or its "
                     "processes cannot be read)")


def run_steps(probe: StepRunner, scratch: str, notes: list[str], t_start: float,
              budget_s: float, max_streams: int, finale: Any = None) -> list[ProbePoint]:
    """The steps (see the module's docstring), then the scratch directory
    removed whatever happened.  finale: see StepRunner.run_step."""
    return measure_steps(probe, scratch, notes, t_start, budget_s, max_streams, finale)[0]


def measure_steps(probe: StepRunner, scratch: str, notes: list[str], t_start: float,
                  budget_s: float, max_streams: int, finale: Any = None,
                  after: Callable[[int], float] | None = None, cores: int | None = None
                  ) -> tuple[list[ProbePoint], Plan]:
    """`run_steps`, with the time the caller needs after the steps kept free
    (after(n): seconds for n stream counts, the WAL steps) and the plan
    they followed (`plan_counts`: which counts, which skipped, where the
    work after them runs).  cores: the host's (default: this process's)."""
    points: dict[int, ProbePoint] = {}
    plan = Plan(stream_plan(max_streams))
    try:
        try:
            plan = _measure(probe, points, notes, t_start, budget_s, max_streams, finale,
                            after, usable_cores() if cores is None else cores)
        except OSError as exc:
            raise ProbeError(f"the probe failed: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    measured = sorted(points)
    plan.skipped = [k for k in plan.skipped if k not in points]  # a midpoint may fill one
    note = plan.note(budget_s, measured)
    if note:
        notes.append(note)
    return [points[k] for k in measured], plan


def plan_seconds(max_streams: int, wal_counts: int = 0) -> float:
    """What a probe of up to max_streams streams needs at the least: its
    warm-up and each planned step (1, 2, 4, ... and a point between two) at
    its shortest, and the WAL steps (restore and COPY probes)."""
    steps = len(stream_plan(max_streams)) + (1 if max_streams >= 3 else 0)
    step_s = MIN_STEP_S * (1 + 2 / RANGES_PER_STEP) + STEP_OVERHEAD_S
    return 1.0 + steps * step_s + wal_counts * (WAL_STEP_S + WAL_OVERHEAD_S)


def steps_and_wal(probe: StepRunner, scratch: str, notes: list[str], t_start: float,
                  budget_s: float, max_streams: int, target: Any, max_wal_size: float | None,
                  finale: Any = None, wal: bool = True, reserve_s: float = 0.0,
                  between: Callable[[list[ProbePoint], float, float], None] | None = None
                  ) -> tuple[list[ProbePoint], list[WalPoint], Plan]:
    """The restore and COPY probes' steps, then `between` (given the points,
    its deadline (reserve_s seconds of the budget are kept for it) and the
    probe's end, which a step there may run into at the WAL steps' cost),
    then (wal: the job writes WAL) the WAL's ceiling
    (`walstep.measure_wal`) at the counts the plan keeps for it, in the
    time kept for it (`walstep.wal_reserve`)."""
    steps_s = budget_s - reserve_s
    after = (lambda n: wal_reserve(steps_s, n)) if wal else None
    points, plan = measure_steps(probe, scratch, notes, t_start, steps_s, max_streams, finale,
                                 after)
    at = plan.after_at([p.streams for p in points])
    keep = wal_reserve(steps_s, len(at)) if wal and at else 0.0
    end = t_start + budget_s - CLEANUP_RESERVE_S
    if between is not None:
        between(points, end - keep, end)
    walpts = (measure_wal(target, at, end, max_wal_size, notes) if keep > 0 else [])
    return points, walpts, plan


def usable_cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _measure(probe: StepRunner, points: dict[int, ProbePoint], notes: list[str], t_start: float,
             budget_s: float, max_streams: int, finale: Any, after: Callable[[int], float] | None,
             cores: int) -> Plan:
    """The warm-up, the doublings (as planned: `plan_counts`), then one more
    step: the storage knee's (`_knee_again`) or the point between the last
    two doublings."""
    end = t_start + budget_s - CLEANUP_RESERVE_S
    full = stream_plan(max_streams)
    reserve = after(len(full)) if after is not None else 0.0
    per_stream = _warm_up(probe, end - reserve, budget_s - reserve, notes, finale)
    if per_stream is None:
        return Plan(full, False, min(max_streams, cores), reserve, len(full), list(full))
    plan = plan_counts(max_streams, cores, end - time.monotonic(), after)
    steps = _Steps(probe, points, notes, end - plan.after_s, per_stream)
    measured = _doublings(steps, budget_s, max_streams, plan)
    if measured is None:
        return plan
    doubling, stopped = measured
    if stopped and _knee_again(points, doubling, notes, steps.step):
        return plan
    if stopped or not plan.thinned:  # a thinned plan's time went to its counts
        _between_last_two(steps, doubling, stopped)
    return plan


def _warm_up(probe: StepRunner, deadline: float, budget_s: float, notes: list[str],
             finale: Any) -> float | None:
    """Warm-up: one stream, ranges growing from a few blocks, about 5% of the
    budget; it also finds a missing table or a lock before anything counts.
    The heap bytes per second of one stream it estimates; None (with a
    note) when the budget ran out during it."""
    warm_s = min(1.0, max(0.2, 0.05 * budget_s))
    try:
        warm = probe.run_step(1, warm_s, WARMUP_FIRST_BYTES, deadline, grow=True,
                              finale=finale)
    except Aborted:
        notes.append("the budget ran out during the warm-up: nothing measured")
        return None
    return max(warm.bytes_per_s, 1e6)


@dataclass
class _Steps:
    """The measured steps of one probe (into `points`, with `notes`) and the
    one-stream rate the next step's ranges are sized by."""

    probe: StepRunner
    points: dict[int, ProbePoint]
    notes: list[str]
    deadline: float
    per_stream: float  # heap bytes/s of one stream, estimated

    def step(self, k: int, ks_left: list[int]) -> ProbePoint | None:
        """k streams; ks_left: the stream counts still planned, this one
        first.  None when no step fits in the budget's time left, or (with a
        note) the step ran into the deadline."""
        t_step = step_seconds(self.deadline - time.monotonic(), len(ks_left))
        if t_step is None:
            return None
        t_step = _fresh_step(t_step, fresh_bytes(self.probe), self.per_stream, ks_left)
        range_s = max(MIN_RANGE_S, t_step / RANGES_PER_STEP)
        try:
            p = self.probe.run_step(k, t_step, self.per_stream * range_s, self.deadline)
        except Aborted:
            self.notes.append(f"the step with {k} streams ran into the budget and was dropped")
            return None
        if p.bytes_per_s > 0:
            self.per_stream = p.bytes_per_s / k
        return p


def step_seconds(avail: float, n_left: int) -> float | None:
    """A step's time when avail seconds are left for n_left steps (this one
    included): an even share, at most MAX_STEP_S; at least MIN_STEP_S while
    that fits (fewer steps will), down to MIN_STEP_S / 2; None below."""
    # a step lasts its time plus the ranges in flight at its end (a range is
    # about 1/RANGES_PER_STEP of it; allow for two)
    stretch = 1 + 2 / RANGES_PER_STEP
    t_step = min(MAX_STEP_S, (avail / max(1, n_left) - STEP_OVERHEAD_S) / stretch)
    if t_step < MIN_STEP_S:
        # fewer steps will fit: each still long enough to be steady
        t_step = min(MIN_STEP_S, (avail - STEP_OVERHEAD_S) / stretch)
    return None if t_step < MIN_STEP_S / 2 else t_step


def _doublings(steps: _Steps, budget_s: float, max_streams: int, plan: Plan
               ) -> tuple[list[int], bool] | None:
    """The plan's counts (1, 2, 4, ... up to max_streams, or thinned), each
    measured: (the stream counts measured, whether a step gained under
    FLAT_GAIN a doubling over the one before, where they stopped); None
    (with a note) when the budget ran out first."""
    points, notes = steps.points, steps.notes
    ks = plan.counts
    doubling: list[int] = []  # measured stream counts of the plan
    repeated_one = False
    # room for a point between two doublings (a thinned plan keeps none: a
    # count measured counts more)
    extra = 1 if max_streams >= 3 and not plan.thinned else 0
    for i, k in enumerate(ks):
        if doubling and _gives_way(steps, ks[i:], plan.top):
            # a count below the cores gives way to the most streams: time
            # went elsewhere (one stream measured again after a cold start)
            plan.skipped.append(k)
            plan.thinned = True
            continue
        # steps still planned: this one, the rest of the doublings, a midpoint
        p = steps.step(k, ks[i:] + midpoint(ks, i, extra))
        if p is None:
            if not doubling or k > doubling[-1]:
                plan.skipped += [j for j in ks[i:] if j not in plan.skipped]
                if not plan.thinned:
                    notes.append(f"the budget of {budget_s:g} s allowed up to "
                                 f"{max(doubling) if doubling else 0} of {max_streams} streams")
            return None
        points[k] = p
        if not doubling:
            doubling.append(k)
            continue
        prev = points[doubling[-1]]
        if (not repeated_one and doubling[-1] == 1
                and p.bytes_per_s > SUPERLINEAR * k / 2 * prev.bytes_per_s):
            # superlinear: k=1 was cold; measure it again, then go on
            repeated_one = True
            again = steps.step(1, [1, *ks[i:], *midpoint(ks, i, extra)])
            if again is not None:
                notes.append(f"1 stream measured again: {fmt.rate(prev.bytes_per_s)} the "
                             f"first time, then {fmt.rate(again.bytes_per_s)} (cold start)")
                points[1] = again
                prev = again
        doubling.append(k)
        if _gain(prev, p) < FLAT_GAIN:
            return doubling, True
    return doubling, False


def _gives_way(steps: _Steps, left: list[int], top: int) -> bool:
    """Whether the first of the counts left, one below `top` (the cores),
    is to be skipped so that `top` is measured: the time left does not
    hold a step, at the pace steps take, for each count left up to top."""
    k = left[0]
    needed = [j for j in left if j <= top]
    if k >= top or top not in needed:
        return False
    return steps.deadline - time.monotonic() < len(needed) * step_cost(stretched=False)


def _between_last_two(steps: _Steps, doubling: list[int], stopped: bool) -> None:
    """One point between the last two doublings, when it tells where the
    knee is (the curve flattened: stopped) or the fit needs it (fewer than 4
    points)."""
    if len(doubling) < 2:
        return
    a, b = doubling[-2], doubling[-1]
    mid = (a + b) // 2
    if a < mid < b and mid not in steps.points and (stopped or len(steps.points) < 4):
        p = steps.step(mid, [mid])
        if p is not None:
            steps.points[mid] = p
        elif not any("ran into the budget" in n for n in steps.notes):
            steps.notes.append(f"no time left in the budget for the point at {mid} streams")


def midpoint(plan: list[int], i: int, extra: int) -> list[int]:
    """The point between the last two doublings the plan may still add (its
    stream count as planned from step i on), or nothing."""
    if not extra or len(plan) < 2:
        return []
    return [(plan[-2] + plan[-1]) // 2]


def fresh_bytes(probe: StepRunner) -> float | None:
    """Work units the probe's source has not read yet (None: not known, or
    it ran out already)."""
    v = getattr(getattr(probe, "source", None), "fresh_bytes", None)
    return None if v is None else float(v)


def _fresh_step(t_step: float, fresh: float | None, per_stream: float,
                ks_left: list[int]) -> float:
    """The step's time, shortened (to MIN_STEP_S at the least) so that the
    steps still planned read pages no step has read yet: the steps with the
    most streams read the most, and a step that re-reads the probe's own
    pages measures the cache.  Unchanged when the data cannot last anyway."""
    if fresh is None or per_stream <= 0 or not ks_left:
        return t_step
    t_fit = fresh / (per_stream * sum(ks_left) * (1 + 2 / RANGES_PER_STEP))
    return min(t_step, max(MIN_STEP_S, t_fit))


def _knee_again(points: dict[int, ProbePoint], doubling: list[int], notes: list[str],
                step: Any) -> bool:
    """The storage saturated at a (a -> 2a was flat while the sessions waited
    on I/O) and a/2 -> a gained only a little more than the storage rule
    allows: the knee is a or a/2, and one slow step at a/2 (other I/O on the
    device, a cold start) decides which.  A point between a and 2a cannot
    tell; measuring a/2 again can.  A disturbed step only reads slower than
    the storage allows, so the faster of the two measurements stands.  A
    measurement that had to re-read the probe's own pages (the cache, not
    the disk) is not taken.  True when the step ran (in place of the
    midpoint)."""
    if len(doubling) < 3:
        return False
    lo, a, b = doubling[-3], doubling[-2], doubling[-1]
    pa, pb, plo = points[a], points[b], points[lo]
    if pb.io_wait_share is None or pb.io_wait_share < STORAGE_IO_SHARE or pb.reread:
        return False
    if not STORAGE_GAIN <= _gain(plo, pa) < 2 * STORAGE_GAIN or plo.reread:
        return False
    again = step(lo, [lo])
    if again is None:
        return True  # no time left: nor for a midpoint
    what = f"{lo} stream{'s' if lo > 1 else ''}"
    if again.reread:
        notes.append(f"{what} not measured again: the probe had read all the data (a bigger "
                     "--probe-seconds needs bigger tables)")
        return True
    first, then = fmt.rate(plo.bytes_per_s), fmt.rate(again.bytes_per_s)
    if again.bytes_per_s > plo.bytes_per_s:
        notes.append(f"{what} measured again, where the storage knee is: {first} the first "
                     f"time, then {then} (the faster stands)")
        points[lo] = again
    else:
        notes.append(f"{what} measured again, where the storage knee is: {first}, then {then}")
    return True
