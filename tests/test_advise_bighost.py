"""The advice on a 16-core host, from what its probes measured there
(tests/data/16-cores: the probe points of `advise --probe` and the real
sweeps of pg_dump -Fd -j and pg_restore -j on the same database).  No
server: the recorded points go through the fit, the resource bounds, the
schedule and the choice, as `advise` does with a probe's result.

The target (docs/advise.md, "How accurate"): the recommended -j within 10%
of the best measured time, every measured -j predicted within 15%.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pgparmon.advise import evidence, predict
from pgparmon.advise.probe.loggedtop import as_logged_load
from pgparmon.advise.probe.results import LoggedStep, ProbeResult
from pgparmon.advise.probe.walstep import WAL_PER_HEAP
from pgparmon.analyze.schedule import WorkItem

DATA = Path(__file__).parent / "data" / "16-cores"
CORES = 16
SWEEPS = json.loads((DATA / "sweeps.json").read_text())
MEASURED = {"dump": {int(j): s for j, s in SWEEPS["pg_dump_Fd"].items()},
            "restore": {int(j): s for j, s in SWEEPS["pg_restore"].items()}}


def _load(name: str) -> tuple[dict[str, Any], ProbeResult]:
    doc = json.loads((DATA / name).read_text())
    return doc, ProbeResult.from_json(doc["probe"])


def _items(doc: dict[str, Any], res: ProbeResult, ev: predict.Evidence) -> list[WorkItem]:
    """The run's items as the inventory plans them: 16 equal tables; for a
    restore each with its primary key built after its data, costed from the
    probe's timed build (the same table shape: one row width)."""
    inv = doc["inventory"]
    n = int(inv["tables"])
    size = float(inv["data_bytes"]) / n
    data = [WorkItem(f"t{i}", size, size, table=f"t{i}") for i in range(n)]
    if doc["kind"] == "dump":
        return data
    factor = float(res.build_s_per_byte or 0.0) * ev.throughput(1)
    keys = [WorkItem(f"t{i}_pkey", size * factor, size, table=f"t{i}", exclusive=True,
                     deps=frozenset({f"t{i}"})) for i in range(n)]
    return data + keys


def _advise(doc: dict[str, Any], res: ProbeResult, cores: int = CORES
            ) -> tuple[predict.Evidence, list[predict.Prediction], predict.Choice]:
    res, _ = as_logged_load(res)
    pts = res.fit_points()
    cpu = {int(p.streams): v for p in res.points
           if (v := res.cpu_s_per_gb(p.streams)) is not None}
    ev = predict.points_evidence("probe", pts, limit="a shared resource", cpu_per_gb=cpu)
    ev = evidence.bounded(ev, res, cores, WAL_PER_HEAP)
    jobs = list(range(1, cores + 1))
    if not ev.extend:
        jobs = [j for j in jobs if j <= ev.fit.limit_n]
    preds = predict.predict(ev, _items(doc, res, ev), jobs)
    return ev, preds, predict.choose(preds, ev.cpu_per_gb, {}, extrapolated_ok=ev.extend)


def _regret(kind: str, j: int) -> float:
    measured = MEASURED[kind]
    assert j in measured, f"-j {j} recommended, not among the measured {sorted(measured)}"
    return measured[j] / min(measured.values())


def _errors(kind: str, preds: list[predict.Prediction],
            measured: dict[str, dict[int, float]] | None = None) -> dict[int, float]:
    by = {p.jobs: p.wall_s for p in preds}
    return {j: by[j] / s - 1 for j, s in (measured or MEASURED)[kind].items() if j in by}


@pytest.mark.parametrize("name", ["dump_probe10.json", "dump_probe30.json",
                                  "restore_probe10.json", "restore_probe30.json"])
def test_the_recommendation_is_within_10_percent_of_the_best(name: str) -> None:
    doc, res = _load(name)
    _, preds, choice = _advise(doc, res)
    assert _regret(doc["kind"], choice.recommended) <= 1.10
    # the re-read steps count (their fresh steps never waited on storage)
    if doc["kind"] == "dump":
        assert res.rereads_kept() and len(res.fit_points()) == len(res.points)


def test_the_30s_dump_probe_predicts_every_measured_j_within_15_percent() -> None:
    doc, res = _load("dump_probe30.json")
    _, preds, _ = _advise(doc, res)
    errs = _errors("dump", preds)
    assert set(errs) == set(MEASURED["dump"])
    assert all(abs(e) <= 0.15 for e in errs.values()), errs


def test_the_10s_dump_probe_predicts_every_measured_j_within_15_percent() -> None:
    """Its 8-stream step read 20 MB/s a stream where the real -j 8 read 27
    (its 8 files were fsynced one after another at a 46 ms await): under the
    line from its 4- to its 16-stream step. Fitted with it, the one-stream
    rate came out 13% low and -j 1 was predicted 20% long; the fit leaves
    it out and says so."""
    doc, res = _load("dump_probe10.json")
    ev, preds, _ = _advise(doc, res)
    assert ev.fit.left_out == (8.0,)
    assert "step at 8 jobs measured under the line" in ev.note
    errs = _errors("dump", preds)
    assert set(errs) == set(MEASURED["dump"])
    assert all(abs(e) <= 0.15 for e in errs.values()), errs


@pytest.mark.xfail(strict=True, reason=(
    "these restore probes measured no WAL: the real restore flattened from -j 8 to -j 16 "
    "(5.8 and 5.4 s) writing about 1.85 GB of WAL, and with the COPY steps alone the "
    "model keeps scaling; the probe now loads logged tables at its most streams "
    "(probe.loggedtop), which these recordings predate"))
@pytest.mark.parametrize("name", ["restore_probe10.json", "restore_probe30.json"])
def test_the_restore_probes_predict_every_measured_j_within_15_percent(name: str) -> None:
    doc, res = _load(name)
    _, preds, _ = _advise(doc, res)
    errs = _errors("restore", preds)
    assert all(abs(e) <= 0.15 for e in errs.values()), errs


def test_a_probe_cut_short_is_followed_to_the_cpu_bound() -> None:
    """The 30 s probe's steps at 1, 2 and 4 streams alone (as a probe whose
    budget ended there): the curve is still linear at 4 and the host's CPU
    (its 16 cores over the CPU a stream spent per byte) bounds it, so the
    advice goes past twice the largest count measured, says so, and still
    lands within the targets."""
    doc, res = _load("dump_probe30.json")
    short = dataclasses.replace(res, points=[p for p in res.points if p.streams <= 4])
    ev, preds, choice = _advise(doc, short)
    assert ev.extend and ev.fit.max_n == 4
    assert [c.name for c in ev.ceilings] == ["host CPU"]
    rec = next(p for p in preds if p.jobs == choice.recommended)
    assert rec.extrapolated and choice.recommended > 8
    assert _regret("dump", choice.recommended) <= 1.10
    errs = _errors("dump", preds)
    assert all(abs(e) <= 0.15 for e in errs.values()), errs
    # past the CPU bound no job count gains: the bound names the limit
    assert "host CPU" in next(p for p in preds if p.jobs == CORES).bottleneck


def test_without_the_servers_cpu_the_curve_stops_at_twice_the_last_count() -> None:
    """A server on another host: the probe reads no backend's CPU, the
    host's CPU bounds only the client, and nothing is followed past the
    fit's range (held flat there, never recommended)."""
    doc, res = _load("dump_probe30.json")
    remote = dataclasses.replace(res, points=[dataclasses.replace(p, server_cpu_s=None)
                                              for p in res.points if p.streams <= 4])
    ev, preds, choice = _advise(doc, remote)
    assert not ev.extend and ev.limit_n == 8
    assert max(p.jobs for p in preds) == 8 and choice.recommended <= 4


# The bundle's run on a lent 16-core host (tests/data/16-cores/live): the
# advice of commit 07d22d2 with its probe's newer steps (all 16 tables,
# fresh pages, files fsynced at once, the WAL step), then the real runs.
LIVE = json.loads((DATA / "live" / "sweeps.json").read_text())
MEASURED_LIVE = {"dump": {int(j): s for j, s in LIVE["pg_dump_Fd"].items()},
                 "restore": {int(j): s for j, s in LIVE["pg_restore"].items()}}


def _live(name: str) -> tuple[dict[str, Any], list[predict.Prediction], predict.Choice]:
    doc, res = _load(f"live/{name}")
    _, preds, choice = _advise(doc, res)
    return doc, preds, choice


@pytest.mark.parametrize("name", ["dump_probe.json", "dump_probe10.json", "restore_probe.json"])
def test_the_live_probes_recommend_within_10_percent_of_the_best(name: str) -> None:
    """The default dump probe recommended -j 13 there (8.58 s, 1.57x the
    best): its CPU per GB grew 29% from 1 to 16 streams while the run got
    9.5x faster, and -j 13 takes two rounds of 16 equal tables like -j 8."""
    doc, preds, choice = _live(name)
    measured = MEASURED_LIVE[doc["kind"]]
    assert choice.recommended in measured
    assert measured[choice.recommended] / min(measured.values()) <= 1.10


def test_the_live_restore_probe_sees_the_wal_flatten_the_curve() -> None:
    """The real restore gained 4% from -j 8 to 16 (5.35 -> 5.16 s) writing
    1.89 GB of WAL; the WAL step's ceiling bounds the model there too."""
    doc, preds, _ = _live("restore_probe.json")
    by = {p.jobs: p for p in preds}
    assert by[16].wall_s >= 0.9 * by[8].wall_s
    assert "WAL" in by[16].bottleneck


@pytest.mark.xfail(strict=True, reason=(
    "the real dump gained 1.64x at -j 2 and 2.77x at -j 4 where the probe's 1.6 s steps "
    "gained 1.9x and 3.6x (one run of each j: not yet told apart from the host's noise); "
    "the restore is within 18% without the step into logged tables (probe.loggedtop), "
    "which this recording predates"))
@pytest.mark.parametrize("name", ["dump_probe.json", "restore_probe.json"])
def test_the_live_probes_predict_every_measured_j_within_15_percent(name: str) -> None:
    doc, preds, _ = _live(name)
    errs = _errors(doc["kind"], preds, MEASURED_LIVE)
    assert all(abs(e) <= 0.15 for e in errs.values()), errs


# ------------------------------------------- 2026-11-27: two counts of sixteen

WAL_DATA = DATA / "live"
WAL_SWEEPS = LIVE


def _regret_between(measured: dict[str, float], j: int) -> float:
    """The time at j, linear between the measured -j on either side, over
    the best measured."""
    ms = {int(k): v for k, v in measured.items()}
    lo = max(k for k in ms if k <= j)
    hi = min(k for k in ms if k >= j)
    t = ms[lo] if hi == lo else ms[lo] + (ms[hi] - ms[lo]) * (j - lo) / (hi - lo)
    return t / min(ms.values())


def test_two_counts_still_rising_are_no_plateau_at_two() -> None:
    """The restore probe of --probe-seconds 10 on the 16-core host measured 1
    and 2 streams (its WAL steps took half the budget), 2 at 1.49x of 1:
    the plateau put its knee at 1.49 jobs and -j 2 was advised, where -j 16
    was 2.9 times faster.  Two counts still rising, short of the cores, show
    no knee: the curve through them (Amdahl's) is followed past them up to
    what the probe measured of the host's CPU and the WAL, every j past 2
    marked extrapolated; the advice goes past 2 and lands within 10% of the
    best."""
    doc = json.loads((WAL_DATA / "restore_probe10.json").read_text())
    res = ProbeResult.from_json(doc["probe"])
    assert sorted(p.streams for p in res.points) == [1, 2]
    ev, preds, choice = _advise(doc, res)
    assert ev.fit.model == "usl" and ev.fit.kappa == 0 and ev.fit.sigma > 0
    assert "still rising" in ev.note and "past 2 jobs extrapolated" in ev.note
    assert ev.extend and {c.name for c in ev.ceilings} == {"host CPU", "WAL writes and flushes"}
    # past the two counts: rising, never above a bound the probe measured
    assert ev.throughput(4) > 1.2 * ev.throughput(2)
    for j in range(3, CORES + 1):
        assert ev.throughput(j) <= min(c.at(j) for c in ev.ceilings) + 1e-6
    assert all(p.extrapolated == (p.jobs > 2) for p in preds)
    assert choice.recommended >= 4
    assert _regret_between(WAL_SWEEPS["pg_restore"], choice.recommended) <= 1.10
    # where the server's CPU is not measured nothing bounds the curve past
    # the counts: held as before (a plateau at 2, never recommended past it)
    remote = dataclasses.replace(res, points=[dataclasses.replace(p, server_cpu_s=None)
                                              for p in res.points])
    ev, _, choice = _advise(doc, remote)
    assert ev.fit.model == "plateau" and not ev.extend and choice.recommended <= 2


def test_two_counts_at_the_cores_keep_the_plateau() -> None:
    """The same two counts on a 2-core host reached its cores: past them the
    plateau holds, as the 2-core held-out runs have always read them."""
    doc = json.loads((WAL_DATA / "restore_probe10.json").read_text())
    res = ProbeResult.from_json(doc["probe"])
    ev, _, choice = _advise(doc, res, cores=2)
    assert ev.fit.model == "plateau" and choice.recommended <= 2


def test_the_copy_probes_two_counts_go_past_two() -> None:
    """The COPY probe of --probe-seconds 10 (1 and 2 streams, 1.75x):
    -j 2 was advised where 16 streams were 2.8 times faster."""
    from pgparmon.advise.copyadvice import copy_predictions
    from pgparmon.analyze.progress import DEFAULT_TEXT_RATIO

    doc = json.loads((WAL_DATA / "copy_probe10.json").read_text())
    res = ProbeResult.from_json(doc["probe"])
    ev = predict.points_evidence("probe", res.fit_points(), limit="x")
    ev = evidence.bounded(ev, res, CORES, WAL_PER_HEAP / DEFAULT_TEXT_RATIO)
    assert ev.extend and "still rising" in ev.note
    preds = copy_predictions(ev, float(doc["copy"]["data_bytes"]), list(range(1, CORES + 1)))
    choice = predict.choose(preds, {}, {}, extrapolated_ok=ev.extend)
    assert choice.recommended >= 4
    assert _regret_between(WAL_SWEEPS["copy"], choice.recommended) <= 1.10


# ------------------------------------- 2026-11-27, second host: a cold start

LIVE_B = json.loads((DATA / "live-b" / "sweeps.json").read_text())
MEASURED_B = {"dump": {int(j): s for j, s in LIVE_B["pg_dump_Fd"].items()},
              "restore": {int(j): s for j, s in LIVE_B["pg_restore"].items()}}


def test_a_plateau_at_the_last_count_of_a_linear_curve_is_no_knee() -> None:
    """The second host's 10 s dump probe: 1 stream measured again after a
    cold start, then 2, 4 and 8 streams at 70, 124 and 244 MB/s; 16 did not
    fit.  The plateau put its knee at 8 (4 streams read a little under the
    line) and -j 8 was advised, 1.55x the best (-j 16).  The last doubling
    gained 97%: no knee seen; the curve is followed up to the host's CPU."""
    doc, res = _load("live-b/dump_probe10.json")
    assert sorted(p.streams for p in res.points) == [1, 2, 4, 8]
    ev, preds, choice = _advise(doc, res)
    assert ev.extend and ev.fit.model == "usl" and ev.fit.kappa == 0
    assert "no knee seen" in ev.note
    assert [c.name for c in ev.ceilings] == ["host CPU"]
    assert all(p.extrapolated == (p.jobs > 8) for p in preds)
    measured = MEASURED_B["dump"]
    assert measured[choice.recommended] / min(measured.values()) <= 1.10
    # the same points on an 8-core host reach its cores: the plateau stands
    ev8, _, choice8 = _advise(doc, res, cores=8)
    assert ev8.fit.model == "plateau" and choice8.recommended <= 8


@pytest.mark.parametrize("name", ["dump_probe.json", "restore_probe.json",
                                  "restore_probe10.json"])
def test_the_second_hosts_probes_recommend_within_10_percent(name: str) -> None:
    doc, res = _load(f"live-b/{name}")
    _, _, choice = _advise(doc, res)
    measured = MEASURED_B[doc["kind"]]
    assert _regret_between({str(k): v for k, v in measured.items()},
                           choice.recommended) <= 1.10


# ------------------------------- 2026-11-27: the step into logged tables


@pytest.mark.parametrize("host", ["live", "live-b"])
@pytest.mark.parametrize("logged", [430e6, 480e6, 550e6])
def test_a_logged_step_keeps_the_restore_advice_near_the_best(host: str, logged: float
                                                               ) -> None:
    """These probes predate the step into logged tables (`loggedtop`): the
    real restores there ran their data at about 430 MB/s of heap at -j 8 and
    -j 16 alike, where the temporary tables took 550-580 and 780-810.  With
    a logged step at 16 streams reading anywhere from that to 550 MB/s, the
    steps read as logged loads keep the recommendation within 10% of the
    best measured -j, and the curve at 16 jobs names the logged load.  (A
    flat bound at the logged rate instead recommended -j 5 to 7 there: it
    takes the curve to the bound at once where the real one bends
    smoothly.)"""
    doc, res = _load(f"{host}/restore_probe.json")
    top = dataclasses.replace(res.point(16), bytes_per_s=logged)
    res = dataclasses.replace(res, logged_top=LoggedStep(top, logged * 1.5, 1.6, 0.0))
    sweeps = json.loads((DATA / host / "sweeps.json").read_text())["pg_restore"]
    ev, preds, choice = _advise(doc, res)
    assert _regret_between(sweeps, choice.recommended) <= 1.10, choice
    _, limit = as_logged_load(res)
    assert limit is not None and "WAL-logged load" in limit
