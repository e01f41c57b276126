"""Throughput against the number of streams: the Universal Scalability Law,
and the plateau model for when the data cannot support it (docs/advise.md, "The model").

    X(N) = lambda*N / (1 + sigma*(N-1) + kappa*N*(N-1))      peak at sqrt((1-sigma)/kappa)
    X(N) = min(lambda*N, X_max)                              the operational bound

Fitted by least squares on *relative* error: a probe's points span a factor
of ten in throughput, and an absolute fit would let the largest point decide
everything. sigma is bounded to [0, 1], kappa to >= 0, lambda is free; for a
given (sigma, kappa) the best lambda has a closed form, so the search is
two-dimensional (a grid, then a pattern search). Pure Python: the project
has no numpy/scipy and a 3-parameter fit on a handful of points does not
need them.

Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# A fitted curve is used up to this many times the largest measured stream
# count and no further: beyond it the fit is a guess (docs/advise.md).
EXTRAPOLATE = 2.0
# Below this many distinct stream counts a 3-parameter fit has no residual
# degrees of freedom worth the name: use the plateau model.
MIN_USL_POINTS = 4
# Relative noise assumed for one throughput measurement when the caller
# does not know better (repeats on a quiet machine agree within a few %).
DEFAULT_NOISE = 0.05
# The smooth USL curve replaces the plateau only when it fits clearly better
# than the plateau's sharp knee: a gradual bend (seed 002 of docs/advise.md,
# "The published sweeps": 70 s, 44 s, 39 s, 34 s, 31 s) is badly described by
# a line and a ceiling.
SMOOTH_BETTER = 2.0
# Two counts measured, and the second gained this much a doubling of streams
# over the first: no knee seen.  The plateau would put one at the last count
# (1.49 jobs from 1 and 2 streams at 1.49x); where those counts stop short of
# the host's cores, the smooth curve through the two is kept instead
# (`fit_rising`: Amdahl's law, the USL without kappa), and what lies past
# them is extrapolated up to the resource bounds the probe measured
# (evidence.bounded).  From three counts on the points show a shape of their
# own.
RISING_GAIN = 0.3
RISING_COUNTS = 2

Point = tuple[float, float]  # (streams, total throughput)


@dataclass(frozen=True)
class Fit:
    """A throughput model. model: "usl" or "plateau". For "plateau",
    x_max None means no ceiling was seen (throughput rose at every point)."""

    model: str
    lam: float
    sigma: float = 0.0
    kappa: float = 0.0
    x_max: float | None = None
    rms_rel: float = 0.0  # RMS relative residual over the points
    max_n: float = 1.0  # largest measured stream count
    n_points: int = 0  # distinct stream counts measured
    note: str = ""  # why this model was chosen
    # stream counts whose points were left out of the fit: under the line
    # between their neighbours (`under_hull`)
    left_out: tuple[float, ...] = ()

    def unbounded(self, n: float) -> float:
        """X(n) from the curve itself, however far n lies beyond the points
        (`throughput` holds it flat past limit_n; the advice follows it further
        only up to a measured resource bound, see predict.Evidence)."""
        return self._raw(n)

    def _raw(self, n: float) -> float:
        if self.model == "usl":
            return self.lam * n / (1.0 + self.sigma * (n - 1.0) + self.kappa * n * (n - 1.0))
        x = self.lam * n
        return x if self.x_max is None else min(x, self.x_max)

    @property
    def limit_n(self) -> int:
        """The largest stream count the fit may be used for."""
        return max(1, math.floor(EXTRAPOLATE * self.max_n + 1e-9))

    def throughput(self, n: float) -> float:
        """X(n), total work units per second with n streams; flat beyond
        limit_n rather than extrapolated."""
        if n <= 0:
            return 0.0
        return self._raw(min(float(n), float(self.limit_n)))

    def rate(self, k: int) -> float:
        """r(k) = X(k)/k: what each of k active streams gets (schedule.RateFn)."""
        return self.throughput(k) / k

    @property
    def peak_n(self) -> float | None:
        """N* where X peaks: sqrt((1-sigma)/kappa) for the USL, the knee
        X_max/lambda for the plateau; None when there is no peak (throughput
        grows without bound in the model). At least 1: a curve that falls or
        stays flat from the first stream on peaks at 1 (the USL's formula
        gives 0 when sigma is 1, the plateau's a knee below 1)."""
        if self.model == "usl":
            if self.kappa <= 0:
                return None
            return max(1.0, math.sqrt((1.0 - self.sigma) / self.kappa))
        return max(1.0, self.x_max / self.lam) if self.x_max is not None else None

    def to_json(self) -> dict[str, object]:
        peak = self.peak_n
        return {"model": self.model, "lambda": self.lam, "sigma": self.sigma,
                "kappa": self.kappa, "x_max": self.x_max,
                "peak_jobs": None if peak is None else round(peak, 2),
                "rms_rel_error": round(self.rms_rel, 4), "max_measured_jobs": self.max_n,
                "valid_up_to_jobs": self.limit_n, "note": self.note,
                "left_out_jobs": list(self.left_out)}


def _clean(points: Iterable[Point]) -> list[Point]:
    out = [(float(n), float(x)) for n, x in points
           if math.isfinite(n) and math.isfinite(x) and n >= 1 and x > 0]
    if not out:
        raise ValueError("no usable (streams, throughput) point: need streams >= 1 and "
                         "throughput > 0")
    return out


def _usl_shape(n: float, sigma: float, kappa: float) -> float:
    return n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))


def _best_lambda(a: Sequence[float]) -> float:
    # minimise sum((lam*a_i - 1)^2): lam = sum(a) / sum(a^2)
    return sum(a) / sum(x * x for x in a)


def _sse_rel(points: Sequence[Point], model: Fit) -> float:
    return sum((model._raw(n) / x - 1.0) ** 2 for n, x in points)


def _usl_objective(points: Sequence[Point], sigma: float, kappa: float) -> tuple[float, float]:
    a = [_usl_shape(n, sigma, kappa) / x for n, x in points]
    lam = _best_lambda(a)
    return sum((lam * v - 1.0) ** 2 for v in a), lam


_KAPPA_FLOOR = -12.0  # log10(kappa) at or below this means kappa = 0


def _kappa(u: float) -> float:
    return 0.0 if u <= _KAPPA_FLOOR else 10.0 ** u


def fit_usl(points: Iterable[Point], with_kappa: bool = True) -> Fit:
    """Bounded least squares on relative error: sigma in [0, 1], kappa >= 0
    (kappa held at 0 when with_kappa is False: Amdahl's law)."""
    pts = _clean(points)
    sigmas = sorted({0.0, 1.0, *(10.0 ** (e / 8.0) for e in range(-32, 1)),
                     *(i / 20.0 for i in range(21))})
    us = [_KAPPA_FLOOR]  # kappa 0, and 1e-10 .. 100
    if with_kappa:
        us += [e / 4.0 for e in range(-40, 9)]
    best = (math.inf, 0.0, _KAPPA_FLOOR)
    for s in sigmas:
        for u in us:
            f, _ = _usl_objective(pts, s, _kappa(u))
            if f < best[0]:
                best = (f, s, u)
    # Pattern search from the best grid point; the bounds are enforced by
    # clamping, the kappa = 0 boundary by the floor of its log.
    f, s, u = best
    ds, du = 0.05, (0.25 if with_kappa else 0.0)
    while ds > 1e-7 or du > 1e-6:
        if not with_kappa:
            du = 0.0
        moved = False
        for cs, cu in ((s + ds, u), (s - ds, u), (s, u + du), (s, u - du)):
            cs = min(1.0, max(0.0, cs))
            cu = min(3.0, max(_KAPPA_FLOOR, cu)) if with_kappa else _KAPPA_FLOOR
            cf, _ = _usl_objective(pts, cs, _kappa(cu))
            if cf < f - 1e-15:
                f, s, u, moved = cf, cs, cu, True
                break
        if not moved:
            ds, du = ds / 2.0, du / 2.0
    kappa = _kappa(u)
    _, lam = _usl_objective(pts, s, kappa)
    ns = {n for n, _ in pts}
    return Fit("usl", lam, s, kappa, None, math.sqrt(f / len(pts)), max(ns), len(ns))


def fit_plateau(points: Iterable[Point]) -> Fit:
    """X = min(lambda*N, X_max): the points up to some stream count lie on
    the line, the rest on the ceiling; every split is tried and the one with
    the least relative error kept (each part has a closed-form best value)."""
    pts = sorted(_clean(points))
    ns = sorted({n for n, _ in pts})
    best: Fit | None = None
    best_sse = math.inf
    for cut in range(1, len(ns) + 1):
        lin = [(n, x) for n, x in pts if n <= ns[cut - 1]]
        flat = [(n, x) for n, x in pts if n > ns[cut - 1]]
        lam = _best_lambda([n / x for n, x in lin])
        x_max = None
        if flat:
            inv = [1.0 / x for _, x in flat]
            # minimise sum((c/x_i - 1)^2): c = sum(1/x) / sum(1/x^2)
            x_max = sum(inv) / sum(v * v for v in inv)
            if x_max >= lam * ns[-1] * (1.0 - 1e-9):  # rounding: 10*4 vs 39.999...
                x_max = None  # the "ceiling" is above every point: no ceiling seen
        cand = Fit("plateau", lam, x_max=x_max, max_n=ns[-1], n_points=len(ns))
        sse = _sse_rel(pts, cand)
        if sse < best_sse - 1e-15:
            best, best_sse = cand, sse
    assert best is not None
    return Fit("plateau", best.lam, x_max=best.x_max, rms_rel=math.sqrt(best_sse / len(pts)),
               max_n=best.max_n, n_points=best.n_points)


def retrograde(f: Fit) -> float:
    """How much the USL curve falls from its peak to the largest measured
    stream count (0 when the peak lies beyond it): kappa's visible effect."""
    peak = f.peak_n
    if f.model != "usl" or peak is None or peak >= f.max_n:
        return 0.0
    return f._raw(peak) / f._raw(f.max_n) - 1.0


def fit(points: Iterable[Point], noise: float = DEFAULT_NOISE) -> Fit:
    """The model docs/advise.md describes.

    - fewer than MIN_USL_POINTS distinct stream counts: the plateau;
    - kappa visible: the curve falls past its peak within the measured range
      by more than the noise, or kappa cuts the fit's error by more than half
      the noise (seed 002: 60 jobs no faster than 6), and the USL fits
      better than the plateau: the USL;
    - kappa within noise: the plateau, unless the smooth curve without kappa
      (Amdahl) fits clearly better than the plateau's sharp knee (a gradual
      bend such as 70 s, 44 s, 39 s, 34 s, 31 s), or the plateau misses by
      more than the noise and the USL fits clearly better.
    """
    pts = _clean(points)
    low = under_hull(pts, noise)
    if low:
        kept = [(n, x) for n, x in pts if n not in low]
        f = _fit_clean(kept, noise)
        return _with_note(f, f.note, tuple(sorted(low)))
    return _fit_clean(pts, noise)


def under_hull(pts: Sequence[Point], noise: float = DEFAULT_NOISE) -> set[float]:
    """Stream counts, up to the one that measured the most, measured under
    the straight line between two other such counts, one below and one
    above, by more than the noise. Up to its peak a throughput curve only
    bends down (the plateau and the USL rise concave: each stream adds no
    more than the one before), so such a point measured less than the run
    would do: a step whose start-up took a large part of it, or whose files
    were flushed one after another. Past the peak the USL falls convex, so
    the counts there are not judged."""
    best: dict[float, float] = {}
    for n, x in pts:
        best[n] = max(x, best.get(n, 0.0))
    ns = sorted(best)
    top = max(ns, key=lambda n: (best[n], n))
    ns = [n for n in ns if n <= top]
    low: set[float] = set()
    for i in range(1, len(ns) - 1):
        n = ns[i]
        chord = max(best[a] + (best[b] - best[a]) * (n - a) / (b - a)
                    for a in ns[:i] for b in ns[i + 1:])
        if best[n] < (1.0 - noise) * chord:
            low.add(n)
    return low


def last_gain(pts: Sequence[Point]) -> tuple[float, float, float] | None:
    """(a, b, gain): the two largest stream counts measured and what the
    step from a to b gained, scaled to one doubling of streams (the best
    measurement of each count); None with fewer than two counts."""
    best: dict[float, float] = {}
    for n, x in pts:
        best[n] = max(x, best.get(n, 0.0))
    ns = sorted(best)
    if len(ns) < 2:
        return None
    a, b = ns[-2], ns[-1]
    g = (math.log(best[b]) - math.log(best[a])) / math.log2(b / a)
    return a, b, math.exp(min(g, 700.0)) - 1.0


def rising(f: Fit, pts: Sequence[Point], linear_gain: float | None = None) -> bool:
    """No knee seen: the fit rests on RISING_COUNTS counts and the last
    still rose RISING_GAIN a doubling over the first (`_fit_clean`); or
    (linear_gain given) a plateau put its knee at the last count while the
    last doubling measured still gained linear_gain: the step under the
    line through the others that set it is noise, not a knee (1, 2, 4 and
    8 streams at 34, 70, 124 and 244 MB/s)."""
    rise = last_gain(pts)
    if rise is None:
        return False
    if f.n_points == RISING_COUNTS:
        return rise[2] >= RISING_GAIN
    return (linear_gain is not None and f.model == "plateau" and f.x_max is not None
            and rise[2] >= linear_gain)


def fit_rising(points: Iterable[Point]) -> Fit:
    """The curve through two counts still rising (`rising`): Amdahl's law,
    which bends the way the USL does without inventing a knee, with a note
    that says why and that what lies past them is extrapolated."""
    pts = _clean(points)
    rise = last_gain(pts)
    f = fit_usl(pts, with_kappa=False)
    if rise is None:
        return f
    a, b, gain = rise
    return _with_note(f, f"USL without kappa (Amdahl) through the {f.n_points} job counts "
                         f"measured: still rising ({gain:+.0%} a doubling from {a:g} to "
                         f"{b:g}), no knee seen (a plateau would put one at {b:g}); past "
                         f"{b:g} jobs extrapolated")


def _fit_clean(pts: list[Point], noise: float) -> Fit:
    plateau = fit_plateau(pts)
    if plateau.n_points < MIN_USL_POINTS:
        return _with_note(plateau, f"plateau model: {plateau.n_points} job count(s) "
                                   f"measured, the USL needs {MIN_USL_POINTS}")
    usl = fit_usl(pts)
    amdahl = fit_usl(pts, with_kappa=False)
    drop = retrograde(usl)
    tol = max(noise, 2.0 * usl.rms_rel)
    # kappa counts only when the USL also beats the plateau: on an exact sharp
    # knee, min(lambda*N, X_max), a USL with an invented peak beats Amdahl
    # by far, yet the plateau fits with no error at all
    if (usl.kappa > 0 and usl.rms_rel < plateau.rms_rel
            and (drop > tol or amdahl.rms_rel > usl.rms_rel + noise / 2.0)):
        peak = usl.peak_n
        where = f"peaks at about {peak:.1f} jobs" if peak is not None else "flattens"
        return _with_note(usl, f"USL: contention (kappa) shows: throughput {where} "
                               f"(fit error {100 * usl.rms_rel:.1f}%, "
                               f"{100 * amdahl.rms_rel:.1f}% without kappa)")
    if plateau.rms_rel > noise and plateau.rms_rel > SMOOTH_BETTER * amdahl.rms_rel:
        return _with_note(amdahl, "USL without kappa: a gradual bend that the plateau's "
                                  f"sharp knee fits badly ({100 * plateau.rms_rel:.0f}% "
                                  f"error vs {100 * amdahl.rms_rel:.0f}%)")
    if plateau.rms_rel > noise and usl.kappa > 0 and plateau.rms_rel > SMOOTH_BETTER * usl.rms_rel:
        # kappa is not clearly needed, nor is Amdahl clearly better than the
        # plateau, but the plateau misses the points by more than the noise
        # and the USL does not: keep the curve that fits
        return _with_note(usl, "USL: the plateau fits badly "
                               f"({100 * plateau.rms_rel:.0f}% error vs "
                               f"{100 * usl.rms_rel:.0f}%)")
    return _with_note(plateau, "plateau model: kappa within noise")


def _with_note(f: Fit, note: str, left_out: tuple[float, ...] = ()) -> Fit:
    return Fit(f.model, f.lam, f.sigma, f.kappa, f.x_max, f.rms_rel, f.max_n, f.n_points, note,
               left_out or f.left_out)


def from_timings(timings: dict[int, float]) -> list[Point]:
    """Wall times of whole runs at several -j: throughput in runs per second
    (1/T), the same shape as work/T for any fixed amount of work."""
    return [(float(j), 1.0 / t) for j, t in sorted(timings.items()) if t > 0]
