"""Rates from cumulative counters (bytes_processed, tuples_processed, work done).

The progress views give cumulative counters that restart whenever a new COPY
begins or a process restarts, and samples arrive at irregular intervals (a
slow query, a busy host). Everything here is therefore reset-aware and
weighs by elapsed time rather than by sample count.

Pure computations, no I/O.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence


def counter_delta(prev: float | None, cur: float | None) -> float | None:
    """Increase of a cumulative counter between two readings.

    None when either reading is missing or the counter went backwards: a
    reset (a new COPY, a restarted process) says nothing about how much was
    done in between, and a negative rate would be nonsense.
    """
    if prev is None or cur is None:
        return None
    if not (math.isfinite(prev) and math.isfinite(cur)) or cur < prev:
        return None
    return cur - prev


class WindowRate:
    """Rate of one cumulative counter over a recent time window.

    A reading lower than the previous one starts a new segment: the counter
    is taken to have restarted from zero (as Prometheus' rate() does), and the
    previous segment's last value is carried as an offset, so the accumulated
    series stays monotonic and the rate stays continuous across resets.
    """

    def __init__(self, max_age_s: float = 600.0, max_points: int = 10_000) -> None:
        # Bounded so a monitor left running for days does not grow without limit.
        self.max_age_s = max_age_s
        self._pts: deque[tuple[float, float]] = deque(maxlen=max(2, max_points))
        self._offset = 0.0
        self._last_raw: float | None = None
        self.resets = 0

    def add(self, t: float, value: float | None) -> None:
        """Record a reading taken at time t. Missing readings and readings
        older than the last one (out of order) are ignored."""
        if value is None or not (math.isfinite(t) and math.isfinite(value)):
            return
        if self._pts and t < self._pts[-1][0]:
            return
        if self._last_raw is not None and value < self._last_raw:
            self._offset += self._last_raw
            self.resets += 1
        self._last_raw = value
        acc = self._offset + value
        if self._pts and self._pts[-1][0] == t:
            self._pts[-1] = (t, acc)  # a newer reading of the same instant wins
        else:
            self._pts.append((t, acc))
        cutoff = t - self.max_age_s
        while len(self._pts) > 2 and self._pts[0][0] < cutoff:
            self._pts.popleft()

    def rate(self, window_s: float = 10.0) -> float | None:
        """Units per second between the first and last readings within the
        last window_s seconds (counted back from the latest reading). None
        with fewer than 2 such readings or no elapsed time."""
        if len(self._pts) < 2:
            return None
        t_end, v_end = self._pts[-1]
        cutoff = t_end - window_s
        first: tuple[float, float] | None = None
        count = 0
        # the window is near the end: walk back only as far as needed
        for pt in reversed(self._pts):
            if pt[0] < cutoff:
                break
            first = pt
            count += 1
        if first is None or count < 2:
            return None
        elapsed = t_end - first[0]
        if elapsed <= 0:
            return None
        return (v_end - first[1]) / elapsed

    def recent(self, window_s: float = 5.0) -> float | None:
        """rate(window_s), but 0 as soon as the counter stood still between
        its last two readings: a stopped job shows 0 at once, not a fading
        average."""
        if len(self._pts) >= 2 and self._pts[-1][1] == self._pts[-2][1]:
            return 0.0
        return self.rate(window_s)

    @property
    def total(self) -> float:
        """The counter's value with every reset folded in (0 before any reading)."""
        return self._pts[-1][1] if self._pts else 0.0


class Ewma:
    """Exponentially weighted moving average for irregular sampling.

    The weight of a new sample grows with the time since the previous one
    (1 - 2^(-dt/half_life)), so a burst of quick samples does not swamp the
    average and a long gap lets the new value count for more. A sample at
    the same instant as the previous one carries no time and leaves the
    average unchanged.
    """

    def __init__(self, half_life_s: float) -> None:
        if not (half_life_s > 0 and math.isfinite(half_life_s)):
            raise ValueError(f"half_life_s must be positive, got {half_life_s!r}")
        self.half_life_s = half_life_s
        self._t: float | None = None
        self._v: float | None = None

    def update(self, t: float, x: float) -> float:
        if self._v is None or self._t is None:
            self._t, self._v = t, x
            return x
        dt = t - self._t
        if dt > 0:
            alpha = 1.0 - math.pow(2.0, -dt / self.half_life_s)
            self._v += alpha * (x - self._v)
            self._t = t  # never move the clock back on an out-of-order sample
        return self._v

    @property
    def value(self) -> float | None:
        return self._v


def throughput_by_active(samples: Iterable[tuple[float, int, float]]) -> dict[int, float]:
    """Total throughput (work units/s) seen at each number of active streams.

    samples: (t, active streams, cumulative work done), in time order. Only
    intervals whose two ends show the same active count are used (steady
    windows): across a change we cannot tell how much was done at which
    count. Intervals with no elapsed time, a missing or backwards counter, or
    no active stream are skipped. Each count gets the duration-weighted
    median of its intervals' throughputs: the median shrugs off a stall or a
    burst, and weighing by duration stops a few very short intervals (noisy
    rates) from outvoting long ones under irregular sampling.
    """
    by_k: defaultdict[int, list[tuple[float, float]]] = defaultdict(list)
    prev: tuple[float, int, float] | None = None
    for cur in samples:
        if prev is not None:
            t0, a0, w0 = prev
            t1, a1, w1 = cur
            dt = t1 - t0
            dw = counter_delta(w0, w1)
            if a0 == a1 and a0 > 0 and dt > 0 and dw is not None:
                by_k[a0].append((dw / dt, dt))
        prev = cur
    return {k: _weighted_median(v) for k, v in sorted(by_k.items())}


class SteadyThroughput:
    """throughput_by_active fed one sample at a time, in bounded memory and
    time: each active count keeps its steady intervals, and past `cap` of
    them neighbours in time are merged pairwise (their duration-weighted
    mean rate over their summed duration): a long run is then seen at a
    coarser step, as if sampled less often. Until then the result is
    exactly throughput_by_active's over the same samples."""

    def __init__(self, cap: int = 2048) -> None:
        self.cap = max(4, cap)
        self.by_k: defaultdict[int, list[tuple[float, float]]] = defaultdict(list)
        self.prev: tuple[float, int, float] | None = None
        self.any_active = False
        self._result: dict[int, float] | None = None

    def add(self, t: float, active: int, work: float) -> None:
        if self.prev is not None:
            t0, a0, w0 = self.prev
            dt = t - t0
            dw = counter_delta(w0, work)
            if a0 == active and a0 > 0 and dt > 0 and dw is not None:
                lst = self.by_k[a0]
                lst.append((dw / dt, dt))
                if len(lst) > self.cap:
                    lst[:] = [_merge(lst[i], lst[i + 1]) if i + 1 < len(lst) else lst[i]
                              for i in range(0, len(lst), 2)]
                self._result = None
        self.any_active = self.any_active or active > 0
        self.prev = (t, active, work)

    def result(self) -> dict[int, float]:
        if self._result is None:
            self._result = {k: _weighted_median(v) for k, v in sorted(self.by_k.items())}
        return dict(self._result)


def _merge(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    dt = a[1] + b[1]
    return ((a[0] * a[1] + b[0] * b[1]) / dt, dt)


def _weighted_median(vals: Sequence[tuple[float, float]]) -> float:
    """Median of (value, weight) pairs; with equal weights the same as
    statistics.median (the two middle values averaged for an even count)."""
    pts = sorted(vals)
    total = sum(w for _, w in pts)
    half = total / 2.0
    acc = 0.0
    for i, (v, w) in enumerate(pts):
        acc += w
        if math.isclose(acc, half, rel_tol=1e-12, abs_tol=0.0) and i + 1 < len(pts):
            return (v + pts[i + 1][0]) / 2.0
        if acc > half:
            return v
    return pts[-1][0]
