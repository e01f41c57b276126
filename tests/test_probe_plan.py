"""The probe's plan of stream counts under a budget (advise/probe/plan.py,
docs/advise.md "Evidence sources" 1): when the budget cannot hold a step at
every count up to the cores, counts are dropped from the middle, never from
the top; the WAL steps after them are kept to the most streams measured.
No server: the steps are scripted and the clock is the plan's own."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest

from pgparmon.advise.probe import plan
from pgparmon.advise.probe.plan import (
    Plan,
    measure_steps,
    plan_counts,
    spread,
    step_cost,
    stream_plan,
)
from pgparmon.advise.probe.results import ProbePoint
from pgparmon.advise.probe.walstep import wal_reserve


def wal(budget_s: float) -> Any:
    return lambda n: wal_reserve(budget_s, n)


def test_spread_keeps_both_ends_and_thins_the_middle() -> None:
    ks = [1, 2, 4, 8, 16]
    assert spread(ks, 5) == ks
    assert spread(ks, 4) == [1, 2, 8, 16]
    assert spread(ks, 3) == [1, 4, 16]
    assert spread(ks, 2) == [1, 16]
    assert spread(ks, 1) == [1]
    assert spread([1, 2, 4, 8, 16, 32, 64], 4) == [1, 4, 16, 64]


def test_two_cores_keep_the_plan_whatever_the_budget() -> None:
    """On 2 cores (max 4 streams: twice the cores) the counts up to the
    cores are 1 and 2: nothing to drop from the middle, so the plan is the
    one the probes always ran (1, 2, 4; the budget decides how far)."""
    for avail in (2.0, 4.4, 9.0, 30.0):
        for after in (None, wal(10.0)):
            p = plan_counts(4, 2, avail, after)
            assert p.counts == [1, 2, 4] and not p.thinned, (avail, p)
            assert p.after_at([1, 2]) == [1, 2]


@pytest.mark.parametrize("avail,counts", [(30.0, [1, 2, 4, 8, 16]), (9.0, [1, 2, 4, 8, 16]),
                                          (8.0, [1, 4, 16]), (5.0, [1, 16]), (1.0, [1, 16])])
def test_sixteen_cores(avail: float, counts: list[int]) -> None:
    """Whole when the doublings reach 16 at the pace steps take; else the
    counts that fit at MIN_STEP_S each, spread up to 16: the top is always
    planned."""
    p = plan_counts(16, 16, avail)
    assert p.counts == counts
    assert p.thinned == (counts != stream_plan(16))
    if p.thinned:
        assert p.skipped == [k for k in stream_plan(16) if k not in counts]
        assert len(counts) == 2 or len(counts) * step_cost() <= avail


def test_sixteen_cores_with_the_wal_steps() -> None:
    """The restore probe of the 16-core host with --probe-seconds 10: about
    8.25 s left after the warm-up, of which the WAL steps at all five counts
    (1 s each) took 5 s and the steps measured 1 and 2 streams.  Thinned,
    the WAL is measured at the most streams only and the steps span 1 to 16."""
    p = plan_counts(16, 16, 8.25, wal(10.0))
    assert p.counts == [1, 4, 16] and p.thinned
    assert p.after_counts == 1 and p.after_s == pytest.approx(wal_reserve(10.0, 1))
    assert p.after_at([1, 4, 16]) == [16]
    assert p.after_at([1, 4]) == [4]  # stopped early (flat): the most measured
    # the default budget (19.5 s) holds all of them, WAL at each count
    whole = plan_counts(16, 16, 17.5, wal(19.5))
    assert whole.counts == [1, 2, 4, 8, 16] and not whole.thinned
    assert whole.after_s == pytest.approx(wal_reserve(19.5, 5))
    assert whole.after_at([1, 2, 4, 8, 16]) == [1, 2, 4, 8, 16]
    # under WAL_MIN_BUDGET_S no WAL step is planned at all
    assert plan_counts(16, 16, 5.0, wal(7.0)).after_s == 0.0


def test_sixty_four_cores() -> None:
    full = stream_plan(64)
    assert full == [1, 2, 4, 8, 16, 32, 64]
    assert plan_counts(64, 64, 30.0).counts == full
    assert plan_counts(64, 64, 10.0).counts == [1, 4, 16, 64]
    assert plan_counts(64, 64, 7.0).counts == [1, 8, 64]
    assert plan_counts(64, 64, 3.0).counts == [1, 64]
    # the WAL steps at all seven counts would leave too little: thinned,
    # with the WAL at the most streams only
    p = plan_counts(64, 64, 12.0, wal(14.0))
    assert p.counts == [1, 4, 16, 64] and p.after_counts == 1


def test_counts_beyond_the_cores_go_first() -> None:
    """Up to twice the cores may be probed (16 cores, --max-jobs 32): the
    span that must be measured ends at the cores; 32 is measured only when
    the whole plan fits, and the note says it was not."""
    p = plan_counts(32, 16, 8.0)
    assert p.counts == [1, 4, 16] and 32 in p.skipped
    note = p.note(10.0, [1, 4, 16])
    assert note is not None
    assert "measured 1, 4, 16" in note and "skipped 2, 8" in note
    assert "32 beyond the cores" in note
    assert Plan([1, 2, 4]).note(10.0, [1, 2]) is None


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


class TimedSteps:
    """Stands in for the StepRunner: each step takes its planned time plus
    the fixed costs (on the fake clock); throughput is lam * k^0.8, still
    rising at every count."""

    def __init__(self, clock: FakeClock, flat_from: int = 10**6, cold: bool = False) -> None:
        self.clock = clock
        self.flat_from = flat_from
        self.cold = cold  # the first one-stream step reads at half the rate
        self.ran: list[int] = []
        self.lengths: list[float] = []

    def run_step(self, k: int, t_step: float, want_bytes: float, deadline: float,
                 grow: bool = False, finale: Any = None) -> ProbePoint:
        self.clock.t += t_step + plan.STEP_OVERHEAD_S
        if not grow:
            self.ran.append(k)
            self.lengths.append(t_step)
        rate = 50e6 * min(k, self.flat_from) ** 0.8
        if self.cold and not grow and self.ran == [1]:
            rate /= 2
        return ProbePoint(streams=k, heap_bytes=rate * t_step, out_bytes=0, elapsed_s=t_step,
                          bytes_per_s=rate, client_cpu_s=0.1 * k, server_cpu_s=0.1 * k,
                          disk_util=None, disk_await_ms=None, disk_queue=None)


def _run(monkeypatch: pytest.MonkeyPatch, budget_s: float, max_streams: int, cores: int,
         after: Any = None, flat_from: int = 10**6, cold: bool = False
         ) -> tuple[TimedSteps, Plan, list[str]]:
    clock = FakeClock()
    monkeypatch.setattr(plan, "time", clock)
    steps = TimedSteps(clock, flat_from, cold)
    notes: list[str] = []
    pts, p = measure_steps(steps, tempfile.mkdtemp(), notes, clock.t,  # type: ignore[arg-type]
                           budget_s, max_streams, after=after, cores=cores)
    assert [q.streams for q in pts] == sorted(set(steps.ran))
    # every step ends before the time kept for the work after the steps
    assert clock.t <= 1000.0 + budget_s - plan.CLEANUP_RESERVE_S - p.after_s + 1e-6
    return steps, p, notes


def test_a_short_budget_on_sixteen_cores_spans_to_sixteen(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    steps, p, notes = _run(monkeypatch, 10.0, 16, 16, wal(10.0))
    assert steps.ran == [1, 4, 16]
    assert min(steps.lengths) >= plan.MIN_STEP_S
    assert p.after_at(steps.ran) == [16]
    assert any("measured 1, 4, 16" in n and "skipped 2, 8" in n for n in notes), notes
    # no WAL: the same budget holds every doubling (the dump probe)
    steps, p, notes = _run(monkeypatch, 10.0, 16, 16)
    assert steps.ran[:5] == [1, 2, 4, 8, 16] and not p.thinned


def test_a_cold_start_measured_again_leaves_the_top_count(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """The dump probe of --probe-seconds 10 on a 16-core host: its first
    one-stream step read cold, so 1 stream was measured again, and the
    budget then ended after 8 streams: -j 8 was advised where -j 16 was
    1.55x faster.  A count below the cores gives way to the top instead."""
    steps, p, notes = _run(monkeypatch, 10.0, 16, 16, cold=True)
    assert steps.ran[:3] == [1, 2, 1]
    assert 16 in steps.ran and p.thinned
    assert set(p.skipped) & {4, 8}
    assert any("measured 1, 2" in n and "16" in n and "skipped" in n for n in notes), notes


def test_a_thinned_plan_that_flattens_measures_between(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """1 -> 4 streams gained nothing: 16 is not measured, and the time it
    would have taken measures 2, between the flat doubling's ends."""
    steps, p, notes = _run(monkeypatch, 10.0, 16, 16, wal(10.0), flat_from=1)
    assert steps.ran == [1, 4, 2]
    assert p.skipped == [8]
    assert p.after_at(steps.ran) == [4]
    assert any("measured 1, 2, 4" in n and "skipped 8" in n for n in notes), notes


def test_a_short_budget_on_sixty_four_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    steps, p, _ = _run(monkeypatch, 10.0, 64, 64)
    assert steps.ran[0] == 1 and steps.ran[-1] == 64 and p.thinned
    assert len(steps.ran) >= 3 and min(steps.lengths) >= plan.MIN_STEP_S


def test_two_cores_measure_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The held-out 2-core runs: a 5 s budget measured 1 and 2 of 4
    streams, and says so as it did."""
    steps, p, notes = _run(monkeypatch, 5.0, 4, 2)
    assert steps.ran == [1, 2] and not p.thinned
    assert any("allowed up to 2 of 4 streams" in n for n in notes), notes
    steps, p, _ = _run(monkeypatch, 20.0, 4, 2)
    assert steps.ran[:3] == [1, 2, 4] and not p.thinned


def test_the_skipped_counts_are_in_the_advice() -> None:
    """ProbeResult.skipped goes to the probe's JSON (`skipped_streams`) and
    back, and into the evidence's note."""
    from pgparmon.advise import evidence, predict
    from pgparmon.advise.probe.results import ProbeResult

    def pt(k: int, x: float) -> ProbePoint:
        return ProbePoint(streams=k, heap_bytes=x * 2, out_bytes=0, elapsed_s=2.0,
                          bytes_per_s=x, client_cpu_s=0.1, server_cpu_s=0.2, disk_util=None,
                          disk_await_ms=None, disk_queue=None)

    res = ProbeResult(points=[pt(1, 50e6), pt(4, 190e6), pt(16, 600e6)], seconds=9.0,
                      budget_s=10.0, compression="none", ratio=None, device=None,
                      skipped=[2, 8])
    doc = res.to_json()
    assert doc["skipped_streams"] == [2, 8]
    assert ProbeResult.from_json(doc).skipped == [2, 8]
    assert ProbeResult.from_json({**doc, "skipped_streams": None}).skipped == []
    ev = predict.points_evidence("probe", res.fit_points(), limit="x")
    note = evidence.skipped_note(ev, res).note
    assert note.endswith("streams measured: 1, 4, 16; skipped for the budget: 2, 8")
    assert evidence.skipped_note(ev, ProbeResult.from_json({**doc, "skipped_streams": []})) is ev
