"""The throughput model (pgparmon/advise/usl.py): synthetic curves with known
parameters, and the published sweeps quoted in docs/advise.md
("Evidence the published runs give")."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgparmon.advise import usl


def usl_x(n: float, lam: float, sigma: float, kappa: float) -> float:
    return lam * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))


def rel(a: float, b: float) -> float:
    return abs(a / b - 1.0)


# ---- synthetic curves ------------------------------------------------------


@pytest.mark.parametrize("lam, sigma, kappa, ns", [
    (100.0, 0.05, 0.002, list(range(1, 17))),       # peak at 21.8, past the data
    (100.0, 0.10, 0.01, [1, 2, 4, 8, 16]),          # peak at 9.5, retrograde seen
    (50.0, 0.02, 0.0005, [1, 2, 4, 8, 16, 32]),
    (3.2e8, 0.0, 0.02, list(range(1, 13))),         # bytes/s scale, pure coherency
    (0.014, 0.2, 0.04, [1, 2, 3, 4, 5, 6]),         # runs/s scale, peak at 4.5
])
def test_exact_usl_recovers_its_parameters(lam: float, sigma: float, kappa: float,
                                           ns: list[int]) -> None:
    f = usl.fit([(n, usl_x(n, lam, sigma, kappa)) for n in ns])
    assert f.model == "usl", f.note
    assert f.note.startswith("USL: contention (kappa) shows")
    assert rel(f.lam, lam) < 0.01
    assert abs(f.sigma - sigma) < 0.005
    assert abs(f.kappa - kappa) < max(1e-5, 0.02 * kappa)
    assert f.peak_n is not None
    assert rel(f.peak_n, math.sqrt((1 - sigma) / kappa)) < 0.02
    assert f.rms_rel < 1e-3
    assert f.n_points == len(ns) and f.max_n == max(ns)
    for n in ns:
        assert rel(f.throughput(n), usl_x(n, lam, sigma, kappa)) < 0.005


def test_kappa_too_small_to_see_is_left_out() -> None:
    """kappa = 0.001 over 1..6 streams (peak at 26) changes X by 0.15%:
    within noise, so fit() takes the curve without kappa; fit_usl still
    finds it."""
    pts = [(n, usl_x(n, 0.014, 0.3, 0.001)) for n in range(1, 7)]
    f = usl.fit(pts)
    assert f.model == "usl" and f.kappa == 0.0 and f.peak_n is None
    assert f.rms_rel < 0.005
    g = usl.fit_usl(pts)
    assert abs(g.sigma - 0.3) < 0.005 and abs(g.kappa - 0.001) < 2e-5
    assert g.peak_n == pytest.approx(math.sqrt(0.7 / 0.001), rel=0.02)


def test_exact_amdahl_has_no_peak() -> None:
    """kappa = 0: a gradual bend with no retrograde; sigma recovered."""
    f = usl.fit([(n, usl_x(n, 10.0, 0.3, 0.0)) for n in range(1, 9)])
    assert f.model == "usl"
    assert f.kappa == 0.0 and f.peak_n is None
    assert abs(f.sigma - 0.3) < 0.005 and rel(f.lam, 10.0) < 0.01


@pytest.mark.parametrize("lam, x_max, ns", [
    (10.0, 45.0, list(range(1, 11))),
    (10.0, 35.0, [1, 2, 3, 4, 6, 8]),
    (2.5e8, 6.0e8, [1, 2, 3, 4, 6, 8, 12]),
])
def test_exact_plateau_is_the_plateau(lam: float, x_max: float, ns: list[int]) -> None:
    """min(lambda*N, X_max) exactly: the plateau fits it with no error, so no
    USL with an invented peak may win (it did before the fix: 5% error)."""
    f = usl.fit([(n, min(lam * n, x_max)) for n in ns])
    assert f.model == "plateau", f.note
    assert rel(f.lam, lam) < 1e-6
    assert f.x_max is not None and rel(f.x_max, x_max) < 1e-6
    assert f.peak_n is not None and rel(f.peak_n, x_max / lam) < 1e-6
    assert f.rms_rel < 1e-9
    for n in range(1, f.limit_n + 5):
        assert rel(f.throughput(n), min(lam * n, x_max)) < 1e-6


@pytest.mark.parametrize("slope", [7.0, 10.0, 0.1, 3.3e8])
@pytest.mark.parametrize("ns", [[1, 2, 4, 8], [1, 2, 3, 4], list(range(1, 9)), [1, 2]])
def test_linear_scaling_has_no_ceiling(ns: list[int], slope: float) -> None:
    """A ceiling at the last point's height, when that point lies on the
    line, is no ceiling (10*4 vs 39.99999999999999 used to make one)."""
    f = usl.fit([(n, slope * n) for n in ns])
    assert f.peak_n is None
    assert f.x_max is None
    assert f.sigma == 0.0 and f.kappa == 0.0
    top = f.limit_n
    assert top == 2 * max(ns)
    assert rel(f.throughput(top), slope * top) < 1e-9
    assert rel(f.rate(3), slope) < 1e-9


NOISY_CASES = [
    ("usl, peak past the data", lambda n: usl_x(n, 100.0, 0.05, 0.002), list(range(1, 17))),
    ("usl, retrograde", lambda n: usl_x(n, 100.0, 0.1, 0.01), [1, 2, 3, 4, 6, 8, 12, 16]),
    ("usl, doublings", lambda n: usl_x(n, 100.0, 0.02, 0.0005), [1, 2, 4, 8, 16, 32]),
    ("amdahl", lambda n: usl_x(n, 100.0, 0.3, 0.0), list(range(1, 9))),
    ("plateau", lambda n: min(10.0 * n, 45.0), list(range(1, 11))),
    ("plateau, doublings", lambda n: min(10.0 * n, 60.0), [1, 2, 4, 8, 16]),
    ("linear", lambda n: 7.0 * n, [1, 2, 4, 8]),
]


@pytest.mark.parametrize("name, true_x, ns", NOISY_CASES, ids=[c[0] for c in NOISY_CASES])
def test_five_percent_noise_predicts_within_ten_percent(name: str, true_x: object,
                                                        ns: list[int]) -> None:
    """Each point off by up to 5% (multiplicative, fixed seeds): the model
    stays within 10% of the true curve at every measured stream count. (Seeds
    15 and 22 of the first and third cases used to pick a plateau missing the
    points by 9% while a USL fitted them within 4%.)"""
    fn = true_x
    assert callable(fn)
    for seed in range(25):
        rng = random.Random(seed)
        pts = [(n, fn(n) * (1.0 + rng.uniform(-0.05, 0.05))) for n in ns]
        f = usl.fit(pts)
        worst = max(rel(f.throughput(n), fn(n)) for n in ns)
        assert worst < 0.10, (seed, f)


def test_fewer_than_four_points_use_the_plateau() -> None:
    exact = [(n, usl_x(n, 100.0, 0.1, 0.01)) for n in (1, 2, 4)]
    f = usl.fit(exact)
    assert f.model == "plateau"
    assert f.n_points == 3 and "USL needs 4" in f.note
    # repeats of a stream count are one measured count, not more points
    f = usl.fit(exact + [(1, 100.0), (2, 180.0), (4, 300.0)])
    assert f.model == "plateau" and f.n_points == 3
    one = usl.fit([(2, 50.0)])
    assert one.model == "plateau" and one.x_max is None
    assert one.throughput(2) == pytest.approx(50.0)
    assert one.limit_n == 4 and one.throughput(10) == pytest.approx(100.0)


@pytest.mark.parametrize("f", [
    usl.fit([(n, 10.0 * n) for n in (1, 2, 3, 4)]),
    usl.fit_usl([(n, usl_x(n, 100.0, 0.2, 0.0)) for n in (1, 2, 3, 4)]),
], ids=["plateau", "usl"])
def test_no_extrapolation_beyond_twice_the_largest_measured(f: usl.Fit) -> None:
    """Throughput still grows at the limit, yet stays flat beyond it: the
    curve is not trusted past 2x the largest measured stream count."""
    assert f.limit_n == 8
    x8 = f.throughput(8)
    assert x8 > f.throughput(7) * 1.01
    for n in (8.5, 9, 10, 16, 60, 1000):
        assert f.throughput(n) == x8
    assert f.rate(16) == pytest.approx(x8 / 16)
    assert f.throughput(0) == 0.0 and f.throughput(-1) == 0.0
    assert f.to_json()["valid_up_to_jobs"] == 8


def test_bad_points() -> None:
    with pytest.raises(ValueError, match="no usable"):
        usl.fit([])
    with pytest.raises(ValueError, match="no usable"):
        usl.fit([(0, 5.0), (2, 0.0), (3, -1.0), (4, math.nan), (math.inf, 2.0)])
    # the usable ones are kept
    f = usl.fit([(0, 5.0), (1, 10.0), (2, math.nan), (2, 20.0)])
    assert f.n_points == 2 and f.throughput(2) == pytest.approx(20.0)


def test_throughput_falling_from_the_first_stream() -> None:
    """Half the throughput at 2 streams and no better after: sigma hits its
    bound of 1 and the USL peak sqrt((1-sigma)/kappa) is 0, which made
    retrograde() divide 0 by 0 (found by the property test below)."""
    f = usl.fit([(1, 2.0), (2, 1.0), (3, 1.0), (4, 1.0)])
    assert f.peak_n is None or f.peak_n >= 1.0
    assert f.throughput(1) > f.throughput(2)
    u = usl.fit_usl([(1, 2.0), (2, 1.0), (3, 1.0), (4, 1.0)])
    assert u.sigma == 1.0 and u.kappa > 0 and u.peak_n == 1.0
    assert usl.retrograde(u) > 0


def test_two_streams_slower_than_one() -> None:
    """A recording from a busy machine: its two streams together did less
    than one alone (the load beside it changed). The plateau's ceiling is
    the two streams' rate, and one stream is predicted between the two
    rates (advise --history's one-job time, tests/test_history.py)."""
    f = usl.fit([(1, 100.0), (2, 88.0)])
    assert f.model == "plateau"
    assert 88.0 <= f.throughput(1) <= 100.0
    assert f.throughput(2) == pytest.approx(88.0)


def test_from_timings() -> None:
    pts = usl.from_timings({4: 20.0, 1: 80.0, 2: 0.0, 3: -1.0})
    assert pts == [(1.0, 1 / 80.0), (4.0, 1 / 20.0)]


# ---- the published sweeps (docs/advise.md) ------------------------------------

# Seed 002: 10 equal tables of 20M rows, i7-2600 (4 cores, 8 threads), a 7.2k rpm
# SATA disk over USB3; `time pg_dump -Fd -j N` real times. "After 6 concurrent
# jobs it had no difference": 60 jobs took 30.522 s.
SEED_002 = {1: 70.280, 2: 43.596, 3: 38.801, 4: 33.708, 5: 31.040, 6: 30.501}
SEED_002_J60 = 30.522

# Seed 000: 16 tables of ~200MB, 16 cores, five runs per job count. The post's
# "Avg" column says 6.27 for 8 jobs, but its five runs average 7.27: a typo.
SEED_000_RUNS = {
    1: [56.714, 54.385, 54.242, 59.300, 57.705],
    2: [27.023, 26.207, 27.211, 26.112, 25.206],
    4: [12.641, 12.797, 12.484, 12.604, 12.486],
    8: [7.641, 7.013, 7.913, 7.081, 6.702],
    16: [5.086, 5.045, 5.079, 5.216, 5.054],
}
SEED_000 = {j: sum(v) / len(v) for j, v in SEED_000_RUNS.items()}


def predicted_s(f: usl.Fit, j: int) -> float:
    return 1.0 / f.throughput(j)  # from_timings: throughput in runs per second


def test_seed_000_mean_of_eight_jobs_is_7_27() -> None:
    assert SEED_000[8] == pytest.approx(7.27, abs=0.005)
    assert SEED_000[1] == pytest.approx(56.47, abs=0.005)


def test_seed_002_fits_the_sweep_and_sees_the_plateau() -> None:
    f = usl.fit(usl.from_timings(SEED_002))
    for j, t in SEED_002.items():
        assert rel(predicted_s(f, j), t) < 0.10, (j, predicted_s(f, j), t)
    # time keeps falling with j (no retrograde within the data) ...
    times = [predicted_s(f, j) for j in range(1, 7)]
    assert all(b < a for a, b in itertools.pairwise(times))
    # ... but no big gain past 6 anywhere, however many jobs (60 measured the
    # same as 6); within 15%: the smooth fit still gains 13% by 12 jobs
    t6 = predicted_s(f, 6)
    for j in (7, 8, 10, 12, 20, 60):
        assert predicted_s(f, j) >= 0.85 * t6, j
        assert predicted_s(f, j) >= 0.85 * SEED_002[6], j
    assert predicted_s(f, 60) >= 0.85 * SEED_002_J60
    assert f.limit_n == 12 and predicted_s(f, 60) == predicted_s(f, 12)


def test_seed_002_with_sixty_jobs() -> None:
    """The 60-job run in the fit: contention (kappa) shows, and every
    measured time, the 60-job one included, is predicted within 10%."""
    f = usl.fit(usl.from_timings({**SEED_002, 60: SEED_002_J60}))
    assert f.model == "usl" and f.kappa > 0, f.note
    for j, t in {**SEED_002, 60: SEED_002_J60}.items():
        assert rel(predicted_s(f, j), t) < 0.10, (j, predicted_s(f, j), t)
    t6 = predicted_s(f, 6)
    assert min(predicted_s(f, j) for j in range(7, 61)) >= 0.85 * t6
    # 1 -> 6 more than halves the time (70 s -> 30 s)
    assert predicted_s(f, 1) / t6 > 2.0


@pytest.mark.parametrize("use_runs", [False, True], ids=["averages", "every-run"])
def test_seed_000_near_linear_to_four_then_shrinking_gains(use_runs: bool) -> None:
    if use_runs:
        pts = [(float(j), 1.0 / t) for j, ts in SEED_000_RUNS.items() for t in ts]
    else:
        pts = usl.from_timings(SEED_000)
    f = usl.fit(pts)
    assert f.n_points == 5
    for j, t in SEED_000.items():
        assert rel(predicted_s(f, j), t) < 0.10, (j, predicted_s(f, j), t)
    x = {j: f.throughput(j) for j in (1, 2, 4, 8, 16)}
    # near-linear to 4 jobs
    assert x[2] / x[1] > 1.8
    assert x[4] / x[1] > 3.4
    # then every doubling gains less than the one before
    gains = [x[2] / x[1], x[4] / x[2], x[8] / x[4], x[16] / x[8]]
    assert all(b < a for a, b in itertools.pairwise(gains)), gains
    # 8 -> 16 jobs gains far less than 1 -> 2
    assert x[16] / x[8] - 1.0 < 0.5 * (x[2] / x[1] - 1.0)


# ---- properties -------------------------------------------------------------

points_st = st.lists(
    st.tuples(st.integers(min_value=1, max_value=64),
              st.floats(min_value=1e-4, max_value=1e10, allow_nan=False)),
    min_size=1, max_size=10)


@settings(max_examples=120, deadline=None)
@given(points=points_st)
def test_any_points_give_a_sane_fit(points: list[tuple[int, float]]) -> None:
    f = usl.fit(points)
    assert f.model in ("usl", "plateau")
    assert 0.0 <= f.sigma <= 1.0
    assert f.kappa >= 0.0
    assert f.lam > 0 and math.isfinite(f.lam)
    assert f.x_max is None or f.x_max > 0
    assert math.isfinite(f.rms_rel) and f.rms_rel >= 0
    assert f.max_n == max(n for n, _ in points)
    assert f.limit_n == int(2 * f.max_n)
    for k in range(1, f.limit_n + 3):
        x = f.throughput(k)
        assert x > 0 and math.isfinite(x), (k, f)
        assert f.rate(k) == pytest.approx(x / k)
    assert f.throughput(f.limit_n + 7) == f.throughput(f.limit_n)
    peak = f.peak_n
    assert peak is None or peak >= 1.0


@settings(max_examples=25, deadline=None)
@given(lam=st.floats(min_value=1e-3, max_value=1e9),
       sigma=st.floats(min_value=0.0, max_value=0.6),
       kappa=st.one_of(st.just(0.0), st.floats(min_value=1e-5, max_value=0.05)),
       top=st.integers(min_value=4, max_value=16))
def test_exact_usl_curves_are_fitted_exactly(lam: float, sigma: float, kappa: float,
                                             top: int) -> None:
    """The search (grid, then pattern search) finds the curve through exact
    USL points whatever the parameters: no local minimum keeps it off."""
    ns = sorted({1, 2, *range(2, top + 1, max(1, top // 5)), top})
    f = usl.fit_usl([(n, usl_x(n, lam, sigma, kappa)) for n in ns])
    assert f.rms_rel < 2e-3, f
    for n in ns:
        assert rel(f.throughput(n), usl_x(n, lam, sigma, kappa)) < 5e-3


# ---- steps under the line between their neighbours --------------------------


def test_a_step_under_its_neighbours_line_is_left_out() -> None:
    # 1, 2, 4 on a line of 28 a stream, 16 at 327; 8 measured 163 where the
    # line from 4 to 16 passes 181 (10% more): the fit leaves 8 out
    pts = [(1, 28.5), (2, 55.3), (4, 108.0), (8, 163.2), (16, 326.7)]
    assert usl.under_hull(pts) == {8.0}
    f = usl.fit(pts)
    assert f.left_out == (8.0,) and f.n_points == 4
    assert f.throughput(1) == pytest.approx(27.7, rel=0.01)
    assert f.to_json()["left_out_jobs"] == [8.0]


def test_a_curve_that_bends_down_or_falls_keeps_every_step() -> None:
    for pts in ([(1, 10), (2, 19), (4, 30), (8, 33)],       # a plateau
                [(1, 10), (2, 18), (4, 24), (6, 22), (8, 18)],  # past a peak
                [(1, 2.0), (2, 1.0), (3, 1.0), (4, 1.0)],       # falling, convex
                [(1, 10), (2, 18), (4, 20), (8, 9), (16, 8.5)],  # USL-like fall
                [(1, 10), (2, 20), (3, 30), (4, 40)]):      # a line
        assert usl.under_hull(pts) == set()
        assert usl.fit(pts).left_out == ()


def test_a_dip_within_the_noise_stays() -> None:
    # 4 is 3% under the line from 2 to 8: within the 5% noise
    pts = [(1, 10), (2, 20), (4, 38.8), (8, 80)]
    assert usl.under_hull(pts) == set()
    assert usl.under_hull(pts, noise=0.01) == {4.0}


def test_the_first_and_last_steps_are_never_left_out() -> None:
    # a low first step or a low last one bounds the curve, it is no dip
    assert usl.under_hull([(1, 5), (2, 20), (4, 40)]) == set()
    assert usl.under_hull([(1, 10), (2, 20), (4, 5)]) == set()


def test_two_counts_still_rising() -> None:
    """Two counts, the second 1.49x the first: the plateau puts its knee at
    1.49 jobs; `rising` says no knee was seen and `fit_rising` draws the
    curve through both (Amdahl's law) and keeps rising past them.  1.2x is
    flat enough for the plateau, and three counts show their own shape."""
    pts = [(1.0, 76.6), (2.0, 114.3)]
    plateau = usl.fit(pts)
    assert plateau.model == "plateau" and plateau.peak_n == pytest.approx(1.49, abs=0.01)
    assert usl.rising(plateau, pts)
    f = usl.fit_rising(pts)
    assert f.model == "usl" and f.kappa == 0
    assert f.unbounded(1) == pytest.approx(76.6, rel=1e-3)
    assert f.unbounded(2) == pytest.approx(114.3, rel=1e-3)
    assert f.unbounded(8) > 1.5 * 114.3 and f.unbounded(16) < 76.6 / f.sigma
    assert "still rising (+49% a doubling from 1 to 2)" in f.note
    assert not usl.rising(usl.fit([(1.0, 100.0), (2.0, 120.0)]), [(1.0, 100.0), (2.0, 120.0)])
    three = [(1.0, 30.0), (2.0, 45.0), (4.0, 60.0)]
    assert not usl.rising(usl.fit(three), three)
    # counts far apart: the gain is per doubling (1 -> 16 at 8x: +68% a doubling)
    assert usl.last_gain([(1.0, 1.0), (16.0, 8.0)]) == pytest.approx((1.0, 16.0, 8 ** 0.25 - 1))
