"""pgparmon.analyze.rates: counter deltas, windowed rates across resets,
time-aware EWMA, throughput by number of active streams."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgparmon.analyze.rates import Ewma, WindowRate, counter_delta, throughput_by_active
from pgparmon.sample import Sample

# ---- counter_delta -------------------------------------------------------------


def test_counter_delta() -> None:
    assert counter_delta(10, 25) == 15
    assert counter_delta(10, 10) == 0
    assert counter_delta(None, 5) is None
    assert counter_delta(5, None) is None
    assert counter_delta(25, 10) is None  # reset: a new COPY began
    assert counter_delta(0.0, math.nan) is None


# ---- WindowRate ----------------------------------------------------------------


def test_window_rate_golden() -> None:
    w = WindowRate()
    assert w.rate() is None and w.total == 0.0
    w.add(0.0, 0)
    assert w.rate() is None  # one point
    for t, v in [(1.0, 100), (2.0, 200), (3.0, 300), (4.0, 400)]:
        w.add(t, v)
    assert w.rate(10.0) == 100.0
    assert w.total == 400.0


def test_window_rate_uses_only_the_window() -> None:
    w = WindowRate()
    # 10/s for 20 s, then 50/s for 5 s
    for t in range(21):
        w.add(float(t), 10.0 * t)
    for t in range(21, 26):
        w.add(float(t), 200.0 + 50.0 * (t - 20))
    assert w.rate(5.0) == 50.0  # points 20..25
    assert w.rate(100.0) == pytest.approx(450.0 / 25.0)
    assert w.rate(0.5) is None  # only the last point is that recent


def test_window_rate_across_a_reset() -> None:
    w = WindowRate()
    # counter 0,10,20 then a new COPY: 5, 15 (assumed restarted from 0)
    for t, v in [(0.0, 0), (1.0, 10), (2.0, 20), (3.0, 5), (4.0, 15)]:
        w.add(t, v)
    assert w.resets == 1
    assert w.total == 35.0
    assert w.rate(10.0) == pytest.approx(35.0 / 4.0)
    assert w.rate(1.0) == 10.0  # within the new segment
    assert w.rate(2.0) == pytest.approx(15.0 / 2.0)  # 20 -> 5 counts as +5


def test_window_rate_irregular_and_odd_inputs() -> None:
    w = WindowRate()
    w.add(0.0, 0.0)
    w.add(0.1, 1.0)
    w.add(3.1, 31.0)
    w.add(3.1, 32.0)  # same instant: the newer reading wins
    w.add(2.0, 999.0)  # out of order: ignored
    w.add(4.0, None)  # missing reading: ignored
    assert w.total == 32.0
    assert w.rate(10.0) == pytest.approx(32.0 / 3.1)
    z = WindowRate()
    z.add(5.0, 1.0)
    z.add(5.0, 2.0)
    assert z.rate() is None  # no elapsed time


def test_window_rate_is_bounded() -> None:
    w = WindowRate(max_age_s=60.0, max_points=50)
    for t in range(1000):
        w.add(float(t), 3.0 * t)
    assert w.total == 2997.0
    assert w.rate(10.0) == 3.0
    assert w.rate(1e9) == 3.0  # older points were dropped, the rate still holds


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.01, 5.0), min_size=1, max_size=40),
       st.floats(0.0, 1e6), st.floats(0.0, 1e4), st.floats(0.1, 100.0))
def test_rate_of_a_linear_counter_is_its_slope(gaps: list[float], a: float, b: float,
                                               window: float) -> None:
    w = WindowRate()
    t = 1000.0
    w.add(t, a + b * t)
    for g in gaps:
        t += g
        w.add(t, a + b * t)
    got = w.rate(window)
    if got is not None:
        assert got == pytest.approx(b, rel=1e-6, abs=1e-6 * (1 + a))
    if window >= t - 1000.0:
        assert got is not None  # all points in the window


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 0.49), st.integers(2, 8)), min_size=1, max_size=8),
       st.floats(1.0, 1e3))
def test_rate_stays_the_slope_across_resets(segments: list[tuple[float, int]], b: float) -> None:
    # Each segment is a COPY restarting from 0 and growing at b per second,
    # sampled every 0.5 s; the first sample of a new segment is taken
    # `first` seconds into it, so the reset interval also grew by b/s. first
    # < 0.5 keeps that reading below the previous segment's last one: a reset
    # that does not show as a drop cannot be seen by anyone.
    w = WindowRate()
    t = 0.0
    for first, n in segments:
        for j in range(n):
            tt = t + first + 0.5 * j
            w.add(tt, b * (first + 0.5 * j))
        t += first + 0.5 * (n - 1)
    got = w.rate(1e9)
    if got is not None:
        assert got == pytest.approx(b, rel=1e-9)


# ---- Ewma ----------------------------------------------------------------------


def test_ewma_half_life() -> None:
    e = Ewma(10.0)
    assert e.value is None
    assert e.update(0.0, 0.0) == 0.0
    # one half-life later the average has moved half-way to the new value
    assert e.update(10.0, 100.0) == pytest.approx(50.0)
    assert e.update(20.0, 100.0) == pytest.approx(75.0)


def test_ewma_is_time_aware() -> None:
    # one 10 s step equals ten 1 s steps of the same value
    a, b = Ewma(5.0), Ewma(5.0)
    a.update(0.0, 0.0)
    b.update(0.0, 0.0)
    a.update(10.0, 8.0)
    for t in range(1, 11):
        b.update(float(t), 8.0)
    assert a.value == pytest.approx(b.value)
    assert a.value == pytest.approx(8.0 * (1 - 0.25))
    # same instant or out of order: no weight, clock not moved back
    assert a.update(10.0, 1000.0) == pytest.approx(6.0)
    assert a.update(3.0, 1000.0) == pytest.approx(6.0)


def test_ewma_rejects_bad_half_life() -> None:
    with pytest.raises(ValueError):
        Ewma(0.0)
    with pytest.raises(ValueError):
        Ewma(-1.0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 10.0), st.floats(-1e3, 1e3)), min_size=1, max_size=30),
       st.floats(0.1, 60.0))
def test_ewma_stays_within_the_range_seen(pts: list[tuple[float, float]], hl: float) -> None:
    e = Ewma(hl)
    t = 0.0
    for dt, x in pts:
        t += dt
        v = e.update(t, x)
    xs = [x for _, x in pts]
    assert min(xs) - 1e-9 <= v <= max(xs) + 1e-9


# ---- throughput_by_active ------------------------------------------------------


def test_throughput_by_active_golden() -> None:
    samples = [
        (0.0, 1, 0.0),
        (1.0, 1, 10.0),  # k=1: 10/s
        (2.0, 1, 20.0),  # k=1: 10/s
        (3.0, 2, 40.0),  # 1 -> 2: not steady, skipped
        (4.0, 2, 58.0),  # k=2: 18/s
        (5.0, 2, 78.0),  # k=2: 20/s
        (6.0, 2, 100.0),  # k=2: 22/s
        (7.0, 3, 120.0),  # change: skipped
        (8.0, 3, 5.0),  # counter went backwards: skipped
        (9.0, 3, 29.0),  # k=3: 24/s
        (10.0, 0, 29.0),  # change: skipped
        (11.0, 0, 29.0),  # nobody active: skipped
    ]
    assert throughput_by_active(samples) == {1: 10.0, 2: 20.0, 3: 24.0}


def test_throughput_by_active_weighs_by_duration() -> None:
    # 8 s at 30/s and two 0.1 s blips at 100/s: the steady rate wins
    samples = [(0.0, 4, 0.0), (8.0, 4, 240.0), (8.1, 4, 250.0), (8.2, 4, 260.0)]
    assert throughput_by_active(samples) == {4: 30.0}
    # equal intervals, even count: the two middle values averaged
    samples = [(float(t), 2, w) for t, w in enumerate([0.0, 10.0, 30.0, 60.0, 100.0])]
    assert throughput_by_active(samples) == {2: 25.0}


def test_throughput_by_active_edge_cases() -> None:
    assert throughput_by_active([]) == {}
    assert throughput_by_active([(0.0, 2, 0.0)]) == {}
    assert throughput_by_active([(0.0, 2, 0.0), (0.0, 2, 5.0)]) == {}  # no elapsed time
    assert throughput_by_active(iter([(0.0, 2, 0.0), (2.0, 2, 5.0)])) == {2: 2.5}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 2.0), st.integers(1, 4)), min_size=2, max_size=40))
def test_throughput_by_active_recovers_a_known_curve(steps: list[tuple[float, int]]) -> None:
    # X(k) = 10 * k / (1 + 0.5 (k-1)); active count changes only at samples
    def x(k: int) -> float:
        return 10.0 * k / (1 + 0.5 * (k - 1))

    t, w = 0.0, 0.0
    samples = [(t, steps[0][1], w)]
    prev_k = steps[0][1]
    for dt, k in steps[1:]:
        # work over (t, t+dt] done at the earlier count when it holds at both ends
        t += dt
        w += x(prev_k) * dt if k == prev_k else 1e3 * dt  # junk across changes
        samples.append((t, k, w))
        prev_k = k
    got = throughput_by_active(samples)
    for k, v in got.items():
        assert v == pytest.approx(x(k), rel=1e-6)


def test_steady_throughput_matches_and_stays_bounded() -> None:
    import random

    from pgparmon.analyze.rates import SteadyThroughput

    rnd = random.Random(7)
    pts, t, w = [], 0.0, 0.0
    for i in range(3000):
        dt = rnd.uniform(0.5, 1.5)  # irregular sampling
        t += dt
        k = 1 + (i // 400) % 3
        w += k * rnd.uniform(9.0, 11.0) * 1e6 * dt  # 10 MB/s a stream, +-10%
        pts.append((t, k, w))
    small = SteadyThroughput(cap=10_000)
    for p in pts:
        small.add(*p)
    assert small.result() == throughput_by_active(pts)  # exact until the cap
    capped = SteadyThroughput(cap=64)
    for p in pts:
        capped.add(*p)
    assert all(len(v) <= 64 for v in capped.by_k.values())
    exact, approx = throughput_by_active(pts), capped.result()
    assert set(exact) == set(approx) == {1, 2, 3}
    for k in exact:  # a coarser step: the same rate within a few percent
        assert abs(approx[k] - exact[k]) / exact[k] < 0.05, (k, exact[k], approx[k])
    assert capped.any_active and not SteadyThroughput().any_active


def test_timeline_series_thins_out_past_its_cap() -> None:
    from pgparmon.analyze.timeline import SERIES_CAP, TimelineBuilder

    tl = TimelineBuilder()
    for i in range(3 * SERIES_CAP):
        tl.add(Sample.from_json({"elapsed_s": float(i),
                                 "job": {"state": "running", "bytes_per_s": 1.0},
                                 "workers": []}))
    ts = [p.t for p in tl.series]
    assert len(ts) <= SERIES_CAP and ts == sorted(ts)
    assert ts[0] == 0.0 and ts[-1] == 3 * SERIES_CAP - 1  # the whole run, thinned
    assert ts[-SERIES_CAP // 4:] == [float(i) for i in range(3 * SERIES_CAP - SERIES_CAP // 4,
                                                              3 * SERIES_CAP)]


def _timeline(seed: int, samples: int) -> object:
    import random

    from pgparmon.analyze.timeline import TimelineBuilder

    rnd = random.Random(seed)
    tl = TimelineBuilder()
    t = 0.0
    items = [None, None, "x"]
    for s in range(samples):
        t += rnd.choice([0.5, 1.0, 2.5])
        workers = []
        for pid in (11, 12, 13):
            if rnd.random() < 0.1:
                continue  # out of this sample
            item = rnd.choice(items + [f"public.t{s}_{pid}"] * 3)
            workers.append({"pid": pid, "item": item,
                            "phase": rnd.choice(["copy", "copy", "index", "idle"])})
        tl.add(Sample.from_json({"elapsed_s": t, "job": {"state": "running"},
                                 "workers": workers}))
    return tl


@pytest.mark.parametrize("seed", range(12))
def test_timeline_idle_kept_as_spans_close_equals_the_sum_over_spans(seed: int) -> None:
    """The TUI reads each worker's idle share every sample from sums the
    timeline keeps, not from a pass over every span of the run."""
    from pgparmon.analyze.timeline import TimelineBuilder, idle_share

    tl = _timeline(seed, 5 + 40 * seed)
    assert isinstance(tl, TimelineBuilder)
    spans = tl.spans()
    want = idle_share(spans, tl.t_first or 0.0, tl.t_end)  # seen from the first sample
    got = tl.idle()
    assert got.keys() == want.keys()
    for pid in want:
        assert got[pid] == pytest.approx(want[pid], abs=1e-9)
    assert tl.phases == {sp.phase for row in spans.values() for sp in row}


def test_gantt_rows_of_thousands_of_items_drawn_by_column_are_the_same() -> None:
    """A worker's row past twice the columns' count of items is drawn column
    by column (a lookup a column): the same cells as painting every item."""
    import random

    from pgparmon.analyze.timeline import Span
    from pgparmon.tui import draw

    rnd = random.Random(7)
    for _ in range(400):
        t, row = 0.0, []
        for k in range(rnd.choice([1, 5, 40, 400, 3000])):
            t += rnd.choice([0.0, 0.001, 0.5, rnd.random() * 3])
            d = rnd.choice([0.0, 0.01, 1.0, rnd.random() * 20])
            row.append(Span(f"public.t{k}", rnd.choice(["copy", "index"]), t, t + d, False))
            t += d
        t_end, cols = t + rnd.choice([0.0, 1.0, 10.0]), rnd.choice([4, 13, 57, 142])
        assert draw._row_by_column(row, t_end, cols) == draw._row_by_span(row, t_end, cols)
    # and gantt() takes that path for such a row
    many = {1: [Span(f"t{k}", "copy", float(k), k + 0.9, False) for k in range(5000)]}
    text = draw.gantt(many, 5000.0, 120, {1: 0.1}, phases={"copy"})
    assert "█" in text.plain and "idle  10%" in text.plain
