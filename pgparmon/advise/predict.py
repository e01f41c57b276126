"""From evidence to advice: predicted wall time at each -j, what limits it,
and the choice of docs/advise.md (the fastest j, the knee within 10% of it, the
efficient j whose CPU per GB stays within 1.25x of one job's, then the caps).

Evidence becomes a throughput curve X(k) (usl.fit); r(k) = X(k)/k drives the
same LPT/restore simulation the live ETA uses (analyze.schedule.simulate).
Timings of whole runs are the exception: they already include the run's tail,
so their fitted curve predicts wall time directly (1/X) instead of being fed
through the schedule a second time.

Pure functions, no I/O.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..analyze.saturation import FLAT_GAIN
from ..analyze.schedule import Helpers, Schedule, WorkItem, lower_bound, simulate
from .. import units as fmt
from . import usl
from .kinds import kind_named

# docs/advise.md: the knee is the smallest j within 10% of the fastest, and the
# efficient j keeps CPU-seconds per GB within 1.25x of one job's.
KNEE = 1.10
EFFICIENCY = 1.25
# The largest item alone takes at least this share of the predicted time:
# it, not the job count, sets the wall time.
DOMINANT_SHARE = 0.85

# Static guesses, heap bytes per second of one core (advice from these is
# labelled a guess): the server's COPY TO / FROM (each kind's StaticModel,
# kinds.py), and the client's compressor.
CLIENT_RATE = {"gzip": 45e6, "lz4": 400e6, "zstd": 160e6, "none": 600e6}
GZIP_LEVEL_RATE = {0: 600e6, 1: 110e6, 2: 100e6, 3: 85e6, 4: 70e6, 5: 55e6, 6: 45e6,
                   7: 35e6, 8: 18e6, 9: 12e6}


@dataclass(frozen=True)
class Compression:
    method: str  # gzip | lz4 | zstd | none
    level: int | None = None

    @property
    def spec(self) -> str:
        return self.method if self.level is None else f"{self.method}:{self.level}"

    def dump_args(self, pg_dump_major: int | None) -> list[str]:
        """pg_dump's -Z for this compression (16+ takes METHOD[:LEVEL]),
        nothing for pg_dump's own default (gzip at its default level)."""
        if self.method == "gzip" and self.level in (None, 6):
            return []
        if self.method == "gzip" or self.method == "none":
            lvl = 0 if self.method == "none" else self.level
            return [f"-Z{lvl}"]
        return [f"--compress={self.spec}"]

    @staticmethod
    def parse(spec: str) -> Compression:
        """pg_dump -Z syntax: a level 0-9 (gzip, 0 = none), or
        METHOD[:LEVEL] with gzip, lz4, zstd or none."""
        s = spec.strip().lower()
        if s.isdigit():
            n = int(s)
            if not 0 <= n <= 9:
                raise ValueError(f"compression level {n} is out of range 0-9")
            return Compression("none") if n == 0 else Compression("gzip", n)
        method, _, lvl = s.partition(":")
        method = method.strip()
        if method not in ("gzip", "lz4", "zstd", "none"):
            raise ValueError(f"unknown compression {spec!r}: use 0-9, gzip[:N], lz4[:N], "
                             "zstd[:N] or none")
        if lvl.strip().startswith("level="):
            lvl = lvl.strip()[len("level="):]
        level: int | None = None
        if lvl.strip():
            try:
                level = int(lvl)
            except ValueError:
                raise ValueError(f"bad compression level in {spec!r}") from None
        return Compression(method, level)

    def client_rate(self) -> float:
        if self.method == "gzip":
            return GZIP_LEVEL_RATE.get(self.level if self.level is not None else 6, 45e6)
        return CLIENT_RATE[self.method]

    def ratio_guess(self) -> float:
        """Archive bytes per heap byte, on the high side (for a space check)."""
        return {"gzip": 0.45, "lz4": 0.6, "zstd": 0.4, "none": 0.9}[self.method]


@dataclass(frozen=True)
class Ceiling:
    """A resource's bound on the total throughput (work units per second),
    from what the probe measured: the host's CPU (its cores over the CPU a
    stream spends per byte), the WAL (what the server's WAL took with k
    writers, over the WAL a byte of the job writes).  points: (k, bound) as
    measured; linear between them, the nearest end's value outside."""

    name: str  # what a DBA would call it: "host CPU", "WAL writes and flushes"
    points: tuple[tuple[int, float], ...]
    detail: str  # how it was found, with its figures

    def at(self, k: float) -> float:
        pts = sorted(self.points)
        if k <= pts[0][0]:
            return pts[0][1]
        for (a, xa), (b, xb) in itertools.pairwise(pts):
            if a <= k <= b:
                return xa + (xb - xa) * (k - a) / (b - a)
        return pts[-1][1]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "detail": self.detail,
                "points": [{"jobs": k, "bytes_per_s": round(x)} for k, x in sorted(self.points)]}


@dataclass
class Evidence:
    """A throughput curve and where it came from.

    ceilings bound the curve everywhere; extend: the curve was still nearly
    linear at the largest count measured and a ceiling is known, so beyond
    the fit's own range (twice that count) the curve is followed up to the
    ceilings instead of being held flat (predictions there stay marked
    extrapolated, and a recommendation that rests on one says so)."""

    basis: str  # probe | history | timings | static
    fit: usl.Fit
    points: list[tuple[float, float]]  # what was fitted: (k, X)
    # CPU-seconds per GB at measured k (probe only): the efficiency rule
    cpu_per_gb: dict[int, float] = field(default_factory=dict)
    # what saturates when the curve flattens: a name a DBA knows
    limit: str = "a shared resource"
    per_stream_limit: str | None = None  # what bounds one stream (compression CPU, ...)
    timings: dict[int, float] | None = None  # basis "timings": measured wall times
    note: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    ceilings: list[Ceiling] = field(default_factory=list)
    extend: bool = False

    def throughput(self, k: float) -> float:
        """X(k): the fitted curve (followed past its range when `extend`),
        under every ceiling that applies at k."""
        if k <= 0:
            return 0.0
        x = self.fit.unbounded(k) if self.extend else self.fit.throughput(k)
        for c in self.ceilings:
            x = min(x, c.at(k))
        return x

    def rate(self, k: int) -> float:
        return self.throughput(k) / k

    def binding(self, k: int) -> Ceiling | None:
        """The ceiling that sets X(k), if one does (within 1%)."""
        raw = self.fit.unbounded(k) if self.extend else self.fit.throughput(k)
        bound = [(c.at(k), c.name, c) for c in self.ceilings if c.at(k) <= raw * 1.01]
        return min(bound)[2] if bound else None

    @property
    def limit_n(self) -> int | None:
        """The largest j the evidence speaks for: the fit's range, or no limit
        of its own when it is followed up to the ceilings (None)."""
        return None if self.extend else self.fit.limit_n


@dataclass(frozen=True)
class Prediction:
    jobs: int
    wall_s: float
    bottleneck: str
    lower_bound_s: float | None = None
    tail_s: float | None = None
    last_item: str | None = None
    measured_s: float | None = None  # basis "timings": what the user measured
    extrapolated: bool = False  # beyond the evidence (capped at 2x the largest measured j)
    serial_s: float = 0.0  # of wall_s: the serial per-object phase no -j shortens

    def to_json(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "wall_s": round(self.wall_s, 2),
                "serial_s": round(self.serial_s, 2),
                "bottleneck": self.bottleneck,
                "lower_bound_s": (None if self.lower_bound_s is None
                                  else round(self.lower_bound_s, 2)),
                "tail_s": None if self.tail_s is None else round(self.tail_s, 2),
                "last_item": self.last_item, "measured_s": self.measured_s,
                "extrapolated": self.extrapolated}


def static_evidence(kind: str, cores: int, compression: Compression, local: bool) -> Evidence:
    """A guess from the machine alone: per-stream rate from typical per-core
    rates of the server's COPY and the client's compressor (the kind's
    StaticModel); the host's cores as the ceiling when client and server
    share it."""
    model = kind_named(kind).static
    assert model is not None, f"no static model for {kind}"
    server = model.server_rate
    if model.client_compresses:
        client = compression.client_rate()
        r1 = min(server, client)  # one process reads and compresses
        cores_per_stream = r1 / server + r1 / client
        per_stream = "compression CPU" if client < server else model.per_stream
    else:
        r1 = server
        cores_per_stream = model.cores_per_stream
        per_stream = model.per_stream
    ceiling = cores / cores_per_stream if local else None
    x_max = r1 * ceiling if ceiling is not None else None
    n_max = max(1, cores * 2)
    f = usl.Fit("plateau", r1, x_max=x_max, max_n=float(n_max), n_points=0,
                note="static guess: typical per-core rates, the host's cores as the ceiling")
    pts = [(float(k), f.throughput(k)) for k in range(1, n_max + 1)]
    return Evidence("static", f, pts, limit=f"host CPU ({cores} cores)" if local else
                    "the server or the network (not measured)", per_stream_limit=per_stream,
                    note="no measurement: per-core rates typical of PostgreSQL and "
                         f"{compression.spec}; run with --probe for advice that is not a guess")


def timings_evidence(timings: dict[int, float]) -> Evidence:
    pts = usl.from_timings(timings)
    f = usl.fit(pts)
    return Evidence("timings", f, pts, limit="a resource the timings do not name",
                    timings=dict(timings), note=_left_out(f.note, f))


def points_evidence(basis: str, points: Sequence[tuple[float, float]], *, limit: str,
                    per_stream_limit: str | None = None,
                    cpu_per_gb: dict[int, float] | None = None, note: str = "",
                    detail: dict[str, Any] | None = None) -> Evidence:
    f = usl.fit(points)
    return Evidence(basis, f, list(points), cpu_per_gb=dict(cpu_per_gb or {}), limit=limit,
                    per_stream_limit=per_stream_limit, note=_left_out(note or f.note, f),
                    detail=dict(detail or {}))


def _left_out(note: str, f: usl.Fit) -> str:
    """The note, and which steps the fit left out (usl.under_hull)."""
    if not f.left_out:
        return note
    counts = ", ".join(f"{n:g}" for n in f.left_out)
    return (f"{note}; the step at {counts} jobs measured under the line between its "
            "neighbours and is left out of the fit (throughput only bends down)")


def _flat_at(ev: Evidence, j: int) -> bool:
    """Adding the j-th stream gains less than FLAT_GAIN of one stream."""
    if j <= 1:
        return False
    x1 = ev.throughput(1)
    return ev.throughput(j) - ev.throughput(j - 1) < FLAT_GAIN * x1


@dataclass(frozen=True)
class ObjectCost:
    """The per-object part of a run (docs/advise.md, "Many objects"): a
    serial phase in the leader (a dump's catalog reads, locks and schema; a
    restore's pre-data DDL, one statement after the other) and a fixed cost
    per item that the leader pays one item after another (it hands each item
    to a worker and collects its end; at -j 1 it runs the item itself)."""

    objects: int  # what the serial phase works through
    items: int  # the items handed out
    object_s: float  # seconds per object of the serial phase
    item_s_1: float  # seconds per item at -j 1
    item_s_n: float  # seconds per item at -j 2 (handing out and collecting)
    item_s_more: float = 0.0  # and more per item for each worker beyond 2
    # serial seconds of its own kind: a restore's large objects' metadata
    # (jobs/large_objects.py, RESTORE_PRE_DATA_S an object)
    extra_s: float = 0.0

    def serial_at(self, j: int) -> float:
        per = self.item_s_1 if j == 1 else self.item_s_n + (j - 2) * self.item_s_more
        return self.objects * self.object_s + self.items * per + self.extra_s


def object_cost(kind: str, objects: int, items: int) -> ObjectCost:
    """The kind's per-object costs (kinds.py, measured) for this many objects
    and items."""
    c = kind_named(kind).object_costs
    assert c is not None, f"no per-object costs for {kind}"
    return ObjectCost(objects, items, c.object_s, c.item_s_1, c.item_s_n, c.item_s_more)


# A load into a cluster with data checksums: seed 002 measured updates ~13%
# slower with checksums on; a restore's loads and builds write every page
CHECKSUM_WRITE_FACTOR = 1.13


StepsFn = Callable[[int, list[WorkItem]], list[list[WorkItem]]]
"""The items as the commands run at -j: one list a command, run one after
the other (a restore in sections), or the items alone."""


def predict(ev: Evidence, items: Sequence[WorkItem] | None, jobs: Sequence[int],
            labels: dict[str, str] | None = None,
            cost: ObjectCost | None = None, write_factor: float = 1.0,
            steps: StepsFn | None = None, helpers: Helpers | None = None
            ) -> list[Prediction]:
    """Wall time at each j: the serial per-object part (the leader's objects
    and its handing out of items, `cost`), then the items' work through the
    scheduler (times `write_factor`: a target with data checksums); `steps`:
    the commands the items run in at j, each scheduled after the last;
    `helpers`: the server's parallel workers some items take (a restore's
    index builds, build_workers.py)."""
    labels = labels or {}
    out: list[Prediction] = []
    if ev.basis == "timings":
        cost = None  # measured wall times hold it already
    big = max(items, key=lambda it: it.work) if items else None
    for j in jobs:
        serial = cost.serial_at(j) if cost is not None else 0.0
        extrap = ev.basis != "static" and j > ev.fit.max_n + 1e-9
        if ev.basis == "timings" or not items:
            wall = 1.0 / ev.throughput(j)
            measured = (ev.timings or {}).get(j)
            neck = curve_bottleneck(ev, j)
            out.append(Prediction(j, wall, neck, None, None, None, measured, extrap))
            continue
        sched, lb = _schedule(list(items), j, ev.rate, steps, helpers)
        lb *= write_factor
        if write_factor != 1.0:
            sched = dataclasses.replace(sched, makespan=sched.makespan * write_factor,
                                        tail_s=sched.tail_s * write_factor)
        alone = big.work / ev.rate(1) if big else 0.0
        if big is not None and j > 1 and alone >= DOMINANT_SHARE * sched.makespan:
            neck = f"largest table ({labels.get(big.key, big.label or big.key)})"
        else:
            neck = curve_bottleneck(ev, j)
        if serial > 0.5 * (serial + sched.makespan) and j > 1:
            neck = "the serial per-object phase (more jobs cannot shorten it)"
        out.append(Prediction(j, serial + sched.makespan, neck, lb + serial, sched.tail_s,
                              labels.get(sched.last_item or "", sched.last_item), None, extrap,
                              serial_s=serial))
    return out


def _schedule(items: list[WorkItem], j: int, rate: Callable[[int], float],
              steps: StepsFn | None, helpers: Helpers | None = None
              ) -> tuple[Schedule, float]:
    """The run at j (its commands one after the other) and its lower bound."""
    parts = steps(j, items) if steps is not None else [items]
    scheds = [simulate(p, j, rate, helpers=helpers) for p in parts]
    lb = sum(lower_bound(p, j, rate, helpers) for p in parts)
    if len(scheds) == 1:
        return scheds[0], lb
    last = scheds[-1]
    return dataclasses.replace(last, makespan=sum(sc.makespan for sc in scheds)), lb


def curve_bottleneck(ev: Evidence, j: int) -> str:
    """What limits j streams, from the curve: a ceiling that binds, the
    contention past a peak, the resource named by the evidence where the
    curve is flat, else the job count."""
    fit = ev.fit
    peak = fit.peak_n
    ceil = ev.binding(j)
    if ceil is not None and _flat_at(ev, j):
        return f"{ceil.name} ({ceil.detail})"
    if fit.model == "usl" and fit.kappa > 0 and peak is not None and j > peak + 0.5:
        return f"contention past the peak (~{peak:.0f} jobs): {ev.limit}"
    if _flat_at(ev, j):
        return ev.limit
    if j == 1:
        return f"one job ({ev.per_stream_limit})" if ev.per_stream_limit else "one job"
    return "job count (more jobs help)"


@dataclass
class Choice:
    recommended: int
    fastest: int
    knee: int
    efficient: int | None
    capped_by: list[str] = field(default_factory=list)  # why recommended < min(knee, eff)


def _interp(d: dict[int, float], j: int) -> float | None:
    if not d:
        return None
    ks = sorted(d)
    if j <= ks[0]:
        return d[ks[0]]
    if j >= ks[-1]:
        return d[ks[-1]]
    for a, b in itertools.pairwise(ks):
        if a <= j <= b:
            return d[a] + (d[b] - d[a]) * (j - a) / (b - a)
    return None


def _efficient(preds: Sequence[Prediction], cpu_per_gb: dict[int, float]) -> int | None:
    """The largest j whose extra CPU buys time: against every smaller j, its
    CPU-seconds per GB stay within EFFICIENCY of that j's, or grow by less
    than the run speeds up (t(i) / t(j) >= cpu(j) / cpu(i)).  None without
    CPU measurements (static advice, timings)."""
    if not _interp(cpu_per_gb, 1):
        return None
    pts = sorted((p.jobs, p.wall_s, _interp(cpu_per_gb, p.jobs) or math.inf) for p in preds)

    def worth(j: int, t: float, c: float) -> bool:
        return all(c <= EFFICIENCY * ci or ti >= t * c / ci
                   for i, ti, ci in pts if i < j and ci > 0)
    ok = [j for j, t, c in pts if worth(j, t, c)]
    return max(ok) if ok else 1


def choose(preds: Sequence[Prediction], cpu_per_gb: dict[int, float],
           caps: dict[str, int], extrapolated_ok: bool = False) -> Choice:
    """the rule of docs/advise.md: min(j_knee, j_eff), then the caps (each a reason
    and the largest j it allows), then down to the smallest j predicted as
    fast (16 equal tables take two rounds at -j 9 as at -j 8).  Extrapolated
    predictions are shown, not chosen (a j beyond the evidence is a guess
    about the one thing measured), unless extrapolated_ok: the curve was
    still linear where the measurements end and a measured resource bounds
    it (Evidence.extend)."""
    if not extrapolated_ok:
        preds = [p for p in preds if not p.extrapolated] or list(preds)
    if not preds:
        raise ValueError("no predictions to choose from")
    best = min(preds, key=lambda p: (p.wall_s, p.jobs))
    knee = min(p.jobs for p in preds if p.wall_s <= KNEE * best.wall_s)
    eff = _efficient(preds, cpu_per_gb)
    rec = min(knee, eff) if eff is not None else knee
    capped: list[str] = []
    for why, cap in sorted(caps.items(), key=lambda kv: kv[1]):
        if cap < rec:
            capped.append(why)
            rec = max(1, cap)
    at = next((p.wall_s for p in preds if p.jobs == rec), None)
    if at is not None:
        rec = min(p.jobs for p in preds if p.wall_s <= at)
    return Choice(rec, best.jobs, knee, eff, capped)


def dominant(items: Sequence[WorkItem], ev: Evidence, pred: Prediction,
             labels: dict[str, str]) -> dict[str, Any] | None:
    """When the largest item alone sets the wall time at the chosen j: what
    it is, its share, and the piece size that would let j streams share it."""
    if not items or ev.basis == "timings":
        return None
    big = max(items, key=lambda it: it.work)
    total = sum(it.work for it in items)
    alone = big.work / ev.rate(1)
    if pred.jobs < 2 or alone < DOMINANT_SHARE * pred.wall_s:
        return None
    j = pred.jobs
    return {"item": labels.get(big.key, big.label or big.key), "bytes": round(big.work),
            "share": round(big.work / total, 3) if total else None,
            "alone_s": round(alone, 2),
            "split_bytes": round(max(total / (j * 2), 1.0)),
            "message": (f"{labels.get(big.key, big.label or big.key)} is "
                        f"{100 * big.work / total:.0f}% of the data and takes about "
                        f"{fmt.duration(alone)} on one worker whatever -j is: split it into pieces "
                        f"of about {fmt.size(total / (j * 2))} (partition it, or copy it in ctid "
                        "ranges as pgcopydb does) to let the other jobs share it")}
