"""The indexes' growth over a COPY load in the model (`probe.indexgrowth`,
`copyadvice.copy_probe_evidence`, `existing_bytes`), the grown step's JSON,
and the recorded 16-core probe replayed through it."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import pytest

from pgparmon.advise.copyadvice import copy_predictions, copy_probe_evidence, existing_bytes
from pgparmon.advise.probe.copyfile import CopyFile
from pgparmon.advise.probe.copyload import TargetTable, as_logged
from pgparmon.advise.probe.indexgrowth import (
    FLOOR,
    MIN_LEVER,
    MODEL_MIN_LEVER,
    GrowthModel,
    as_grown,
    growth_model,
    growth_scale,
    lever,
    load_scale,
    mean_log,
    model_of,
)
from pgparmon.advise.probe.results import GrownStep, LoggedStep, ProbePoint, ProbeResult

PROBE16 = Path(__file__).parent / "data" / "16-cores" / "live" / "copy_probe10.json"

# The shape of t(n) this project's 2-core VM measured (bench/copy_index_growth.py,
# one stream into a logged table with a btree on random text keys): t(n) is
# proportional to A_OVER_B + ln(n + FLOOR), the median of its ten loads' fits
# (docs/benchmarks.md, "A COPY load's rate over its index's growth").
A_OVER_B = -10.2


def _vm_model(one: ProbePoint) -> GrowthModel:
    """The VM's shape of t(n) through the one-stream step's measured rate."""
    k = (1.0 / one.bytes_per_s) / GrowthModel(A_OVER_B, 1.0).mean_cost(0.0, one.heap_bytes)
    return GrowthModel(A_OVER_B * k, k)


def _point(k: int, rate: float, s: float = 2.0, server_per_byte: float = 4e-8) -> ProbePoint:
    heap = rate * s
    return ProbePoint(streams=k, heap_bytes=heap, out_bytes=0, elapsed_s=s, bytes_per_s=rate,
                      client_cpu_s=0.05 * k, server_cpu_s=heap * server_per_byte,
                      disk_util=None, disk_await_ms=None, disk_queue=None, wall_s=s)


def _res(grown: GrownStep | None = None, logged: LoggedStep | None = None) -> ProbeResult:
    pts = [_point(1, 20e6), _point(2, 38e6), _point(4, 70e6), _point(8, 120e6)]
    return ProbeResult(points=pts, seconds=12.0, budget_s=15.0, compression="none",
                       ratio=None, device=None, grown=grown, logged=logged)


def _model_points(m: GrowthModel, n0: float, n: float) -> ProbePoint:
    """A one-stream step of n bytes after n0 whose rate the model gives."""
    rate = 1.0 / m.mean_cost(n0, n0 + n)
    return _point(1, rate, s=n / rate)


def test_mean_log_is_the_mean_of_the_log() -> None:
    # against a fine numeric mean
    for n0, n1 in ((0.0, 40e6), (300e6, 340e6), (5e6, 5e9)):
        k = 20000
        num = sum(math.log(n0 + (i + 0.5) * (n1 - n0) / k + FLOOR) for i in range(k)) / k
        assert mean_log(n0, n1) == pytest.approx(num, rel=1e-6)
    assert mean_log(10e6, 10e6) == pytest.approx(math.log(10e6 + FLOOR))
    assert mean_log(0.0, 1e9) > mean_log(0.0, 1e8) > mean_log(0.0, 1e7)


def test_growth_model_recovers_a_known_slope() -> None:
    truth = GrowthModel(a=-1.0e-7, b=1.2e-8)
    first = _model_points(truth, 0.0, 30e6)
    grown = _model_points(truth, 250e6, 20e6)
    m = growth_model(first, grown, 250e6)
    assert m is not None
    assert m.a == pytest.approx(truth.a, rel=1e-6) and m.b == pytest.approx(truth.b, rel=1e-6)


def test_growth_model_needs_a_lever_and_never_makes_inserts_cheaper() -> None:
    first = _point(1, 20e6, s=1.5)  # 30 MB from an empty table
    # a "grown" table that held a tenth of the step: too short a lever
    assert lever(first.heap_bytes, 0.1 * first.heap_bytes, 10e6) < MIN_LEVER
    assert growth_model(first, _point(1, 10e6, s=1.0), 0.1 * first.heap_bytes) is None
    # as much again as the step loaded: enough
    assert lever(first.heap_bytes, first.heap_bytes, first.heap_bytes) >= MIN_LEVER
    assert growth_model(first, _point(1, 10e6, s=1.0), first.heap_bytes) is not None
    # run on that lever, the grown step loaded a tenth of what it was to on a
    # busy host (its lever 0.93): still a slope, not "not measured"
    slowed = _point(1, 3e6, s=1.0)
    assert MODEL_MIN_LEVER < lever(first.heap_bytes, first.heap_bytes, 3e6) < MIN_LEVER
    assert growth_model(first, slowed, first.heap_bytes) is not None
    assert growth_model(first, _point(1, 0.0), 10 * first.heap_bytes) is None
    # a grown step that ran faster is noise: no slope
    m = growth_model(first, _point(1, 25e6), 10 * first.heap_bytes)
    assert m is not None and m.b == 0.0
    assert growth_scale(m, first.heap_bytes, 5e9) == pytest.approx(1.0)


def test_growth_scale_falls_with_the_file_and_the_tables_rows() -> None:
    first = _point(1, 20e6, s=1.5)
    m = growth_model(first, _point(1, 12e6), 8 * first.heap_bytes)
    assert m is not None and m.b > 0
    s = [growth_scale(m, first.heap_bytes, d) for d in (50e6, 500e6, 5e9, 50e9)]
    assert all(1.0 >= a > b > 0 for a, b in itertools.pairwise(s))
    # a table that holds rows already loads slower again
    assert growth_scale(m, first.heap_bytes, 500e6, 2e9) < s[1]
    # a file no bigger than the step: never faster than measured
    assert growth_scale(m, first.heap_bytes, first.heap_bytes / 4) == 1.0
    # a bigger step (more streams) already paid more of the growth
    assert growth_scale(m, 8 * first.heap_bytes, 5e9) > growth_scale(m, first.heap_bytes, 5e9)


def test_as_grown_scales_every_step_by_the_one_stream_steps_scale() -> None:
    res = _res()
    one = res.point(1)
    assert one is not None
    grown = GrownStep(_point(1, 13e6, s=1.0), 6 * one.heap_bytes)
    res = dataclasses.replace(res, grown=grown)
    m = model_of(res)
    assert m is not None
    out = as_grown(res, m, 2e9)
    s = growth_scale(m, one.heap_bytes, 2e9)
    assert s < 1.0
    for p, q in zip(res.points, out.points, strict=True):
        assert q.bytes_per_s == pytest.approx(p.bytes_per_s * s)
        assert q.elapsed_s == pytest.approx(p.elapsed_s / s)
        assert q.server_cpu_s == pytest.approx((p.server_cpu_s or 0.0) / s)
        assert q.heap_bytes == p.heap_bytes and q.client_cpu_s == p.client_cpu_s
    assert load_scale(res, 2e9) == pytest.approx(out.points[0].bytes_per_s / 20e6)
    # no model, or nothing to load: as measured
    assert as_grown(res, None, 2e9) is res and as_grown(res, m, 0.0) is res
    assert model_of(_res()) is None and load_scale(_res(), 2e9) is None


def test_evidence_carries_the_growth_and_an_unindexed_table_is_unchanged() -> None:
    one = _res().point(1)
    assert one is not None
    grown = GrownStep(_point(1, 12e6, s=1.0), 6 * one.heap_bytes)
    logged = LoggedStep(_point(1, 15e6, s=1.5), 3.0 * 15e6 * 1.5, 1.5)
    plain = copy_probe_evidence(_res(logged=logged), 16, 1, load_bytes=2e9)
    withg = copy_probe_evidence(_res(grown, logged), 16, 1, load_bytes=2e9)
    assert plain is not None and withg is not None
    for j in (1, 2, 4, 8):
        assert withg.throughput(j) < plain.throughput(j)
    # the model is made from the raw steps, not from as_logged's: the logged
    # cost and the growth multiply
    res = _res(grown, logged)
    m = model_of(res)
    assert m is not None
    lres = as_grown(as_logged(res), m, 2e9)
    r = 15e6 / 20e6
    assert lres.points[0].bytes_per_s == pytest.approx(
        20e6 * r * growth_scale(m, res.points[0].heap_bytes, 2e9))
    # the probe of an unindexed table has no grown step: nothing changes
    assert copy_probe_evidence(_res(logged=logged), 16, 0, load_bytes=2e9).throughput(4) == \
        pytest.approx(plain.throughput(4))  # type: ignore[union-attr]


def test_existing_bytes_from_the_tables_rows() -> None:
    cf = CopyFile("/x.csv", "csv", True, 10_000_000, 20, 10_000, 4)
    assert cf.record_bytes == pytest.approx((2**20 - 20) / 10_000)
    t = TargetTable("public", "items", 4, ["CREATE INDEX ..."], True, rows=1e6)
    assert existing_bytes(t, cf) == pytest.approx(1e6 * cf.record_bytes)
    for rows in (None, -1.0, 0.0):
        assert existing_bytes(dataclasses.replace(t, rows=rows), cf) == 0.0
    small = CopyFile("/y.csv", "csv", False, 1000, 0, 10, 4)
    assert small.record_bytes == 100.0


def test_probe_json_round_trip_keeps_the_grown_step() -> None:
    one = _res().point(1)
    assert one is not None
    res = _res(GrownStep(_point(1, 13e6, s=1.0), 6 * one.heap_bytes))
    back = ProbeResult.from_json(json.loads(json.dumps(res.to_json())))
    assert back.grown is not None
    assert back.grown.before_bytes == pytest.approx(6 * one.heap_bytes)
    assert back.grown.point.bytes_per_s == pytest.approx(13e6)
    assert ProbeResult.from_json(_res().to_json()).grown is None


def test_recorded_16_core_probe_replayed_with_a_slope() -> None:
    """The 16-core hosts' recorded probe (tests/data/16-cores/live) has no
    grown step: replayed as it is the growth changes nothing.  What a replay
    can show is the model's direction only: given a grown step that ran at
    the slope this project's 2-core VM measured (docs/benchmarks.md, "A
    COPY load's rate over its index's growth": one stream's time per byte
    into the grown index against the empty one's), every prediction for
    the 521 MB file takes longer by the same factor.  Whether
    the probe's own grown step measures that slope there is for the next
    run on such a host to tell."""
    d = json.loads(PROBE16.read_text())
    data = float(d["copy"]["data_bytes"])
    res = ProbeResult.from_json(d["probe"])
    assert res.grown is None
    ev = copy_probe_evidence(res, 16, 1, load_bytes=data)
    base = copy_probe_evidence(res, 16, 1)
    assert ev is not None and base is not None
    jobs = [1, 2, 4, 8]
    before = {p.jobs: p.wall_s for p in copy_predictions(ev, data, jobs)}
    assert before == {p.jobs: p.wall_s for p in copy_predictions(base, data, jobs)}
    one = res.point(1)
    assert one is not None
    # a grown step after the 2-stream step (what it left in the table), at
    # the slope the VM measured
    before_bytes = res.point(2).heap_bytes  # type: ignore[union-attr]
    g = _model_points(_vm_model(one), before_bytes, one.heap_bytes / 2)
    grown = dataclasses.replace(res, grown=GrownStep(g, before_bytes))
    ev2 = copy_probe_evidence(grown, 16, 1, load_bytes=data)
    assert ev2 is not None
    after = {p.jobs: p.wall_s for p in copy_predictions(ev2, data, jobs)}
    for j in jobs:
        assert after[j] > before[j], j
        assert after[j] / before[j] == pytest.approx(after[1] / before[1], rel=0.02)


RESULTS_B = Path(__file__).parent.parent / "docs" / "bench" / "bighost" / \
    "2026-11-27b_results.jsonl"


def test_second_16_core_run_replayed_with_the_vms_slope_moves_toward_the_real_loads() -> None:
    """The second 16-core run's default probe (1-16 streams, a logged step;
    docs/bench/bighost/2026-11-27b_results.jsonl) had no grown step.  Given
    one after its last step (16 streams, what that step left in the table)
    at the slope of t(n) this VM measured, scaled to that probe's own
    one-stream rate, every prediction moves toward the real load at the same
    J (2, 4, 6 and 8 streams), none past it by more than 10%.  A replay shows
    the direction and the size the VM's slope gives; that host's own slope
    (its caches, its memory) is for the probe's grown step there to
    measure."""
    recs = [json.loads(line) for line in RESULTS_B.read_text().splitlines() if line.strip()]
    real = {int(r["jobs"]): float(r["seconds"]) for r in recs
            if r.get("op") == "copy" and not r.get("skipped") and r.get("rc") == 0}
    adv = next(r["advice"] for r in recs if r.get("op") == "advise"
               and r.get("kind") == "copy" and r.get("mode") == "probe")
    data = float(adv["copy"]["data_bytes"])
    res = ProbeResult.from_json(adv["probe"])
    one = res.point(1)
    assert res.grown is None and res.logged is not None and one is not None
    last = max(res.points, key=lambda p: p.streams)
    g = _model_points(_vm_model(one), last.heap_bytes, one.heap_bytes / 2)
    grown = dataclasses.replace(res, grown=GrownStep(g, last.heap_bytes))
    assert model_of(grown) is not None
    jobs = sorted(real)
    before = {p.jobs: p.wall_s
              for p in copy_predictions(copy_probe_evidence(res, 16, 1), data, jobs)}  # type: ignore[arg-type]
    ev = copy_probe_evidence(grown, 16, 1, load_bytes=data)
    assert ev is not None
    after = {p.jobs: p.wall_s for p in copy_predictions(ev, data, jobs)}
    for j in jobs:
        assert before[j] < 0.75 * real[j], (j, before[j], real[j])
        assert abs(after[j] - real[j]) < abs(before[j] - real[j]), (j, after[j], real[j])
        assert after[j] < 1.1 * real[j]
