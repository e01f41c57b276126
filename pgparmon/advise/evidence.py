"""The evidence behind `pgparmon advise`, best first (docs/advise.md): a
calibration probe on the real system, recordings of earlier runs; and the
static model's shape scaled to a single measured job count."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..analyze.saturation import STORAGE_GAIN, STORAGE_IO_SHARE, doubling_gain
from .. import units as fmt
from . import predict, usl
from .checks import Caution
from .kinds import kind_named
from .predict import Ceiling, Evidence
from .probe.plan import plan_seconds, usable_cores
from .probe.loggedtop import as_logged_load
from .probe.results import ProbeError
from .probe.walstep import WAL_PER_HEAP
from .request import AdviseError, Request

# docs/advise.md: a probe costs 3% of the predicted run at -j 1, at least what
# its plan of steps needs and at most a minute; it is not run when its plan
# alone takes longer than that run.
PROBE_SHARE = 0.03
PROBE_MAX_S = 60.0
PROBE_RUN_SHARE = 1.0
MAX_PROBE_STREAMS = 64
# the last doubling the probe measured gained at least this much (of the
# ideal 100%): the curve is still close to linear there, and may be followed
# past the fit's range up to a measured resource bound
LINEAR_GAIN = 0.7


# ---------------------------------------------------------- recordings


def history_evidence(req: Request, notes: list[str]) -> Evidence | None:
    from .history import HistoryError, history_points, load_history

    try:
        runs = load_history(req.history)
    except HistoryError as exc:
        raise AdviseError(str(exc)) from None
    kind = kind_named(req.kind).tool
    pts = history_points(runs, kind)
    if not pts:
        notes.append(f"the recordings hold no steady {kind} throughput to learn from")
        return None
    return predict.points_evidence("history", pts, limit="a shared resource (from past runs)",
                                   note=f"{len(runs)} recording(s), {len(pts)} job counts seen")


# ----------------------------------------------------------- the probe


def probe_budget(req: Request, guess_j1: float, need_s: float) -> tuple[float, str | None]:
    """(seconds, why not): --probe-seconds as given; else 3% of the predicted
    run at -j 1, at least what the probe's plan needs (need_s) and at most a
    minute.  Not run (why not: a sentence) when the plan alone would take
    longer than that run: probing would cost more than running it (run it
    at a few -j and give --from-timings instead)."""
    if req.probe_seconds is not None:
        return float(req.probe_seconds), None
    if need_s > PROBE_RUN_SHARE * guess_j1:
        return 0.0, (f"the whole {req.kind} at -j 1 is predicted at about "
                     f"{fmt.duration(guess_j1)}: the probe's steps would take about "
                     f"{need_s:.0f} s, longer than that; give --probe-seconds N to probe "
                     "anyway, or time a few real runs and give --from-timings")
    return min(PROBE_MAX_S, max(PROBE_SHARE * guess_j1, need_s)), None


def probe_streams(max_jobs: int) -> int:
    """The most streams a probe tries: up to --max-jobs, twice the cores, and
    MAX_PROBE_STREAMS."""
    return max(1, min(max_jobs, 2 * usable_cores(), MAX_PROBE_STREAMS))


def probe_evidence(strategy: Any, s: Any, static: Evidence, max_jobs: int
                   ) -> tuple[Evidence | None, dict[str, Any] | None]:
    """The probe's evidence for a dump or a restore (`strategy` runs its
    probe, strategies.py), and its JSON; (None, ...) with a warning or a note
    in the Situation `s` when it did not run or measured nothing."""
    req, inv = s.req, s.inv
    if req.conn is None or s.facts is None or inv is None:
        raise AdviseError("--probe needs the server: give -d DB (and -h/-p/-U as for psql)")
    if not inv.tables:
        s.notes.append("nothing to probe: no table data")
        return None, None
    streams = probe_streams(max_jobs)
    guess = predict.predict(static, inv.items, [1])[0].wall_s
    budget, skip = probe_budget(req, guess,
                                plan_seconds(streams, strategy.probe_wal_steps(streams))
                                + strategy.probe_extra_s(streams))
    refusal = (Caution("probe_skipped", skip) if skip is not None
               else strategy.probe_refusal(inv))
    if refusal is not None:
        s.warnings.append(refusal)
        return None, None
    try:
        res = strategy.run_probe(s, budget, streams)
    except ProbeError as exc:
        s.warnings.append(Caution("probe_failed", f"the probe did not run: {exc}"))
        return None, None
    if res is None:
        return None, None
    return _probe_fit(res, budget, s.warnings)


def _probe_fit(res: Any, budget: float, warnings: list[Caution]
               ) -> tuple[Evidence | None, dict[str, Any]]:
    """The probe's points fitted, named and bounded (by the host's CPU and the
    WAL it measured, and the storage's knee); a restore probe's as loads
    into logged tables run them (`loggedtop.as_logged_load`), its JSON as
    measured."""
    pj = res.to_json()
    res, logged_limit = as_logged_load(res)
    pts = res.fit_points()
    pj.setdefault("seconds", res.seconds)
    pj.setdefault("budget_s", budget)
    if not pts:
        warnings.append(Caution("probe_failed", "the probe measured nothing within its "
                                                "budget"))
        return None, pj
    cpu = {int(p.streams): v for p in res.points
           if (v := res.cpu_s_per_gb(p.streams)) is not None}
    limit, per_stream = probe_limits(res, usable_cores())
    bound = storage_bound(res.first_reads())
    if bound is not None:
        k, detail = bound
        limit = f"storage reads ({detail})"
        pj["storage_bound_at"] = k
        pj["storage_detail"] = detail
    elif logged_limit is not None:
        limit = logged_limit
    ev = predict.points_evidence("probe", pts, limit=limit, per_stream_limit=per_stream,
                                 cpu_per_gb=cpu, detail={"probe": pj})
    return skipped_note(bounded(ev, res, usable_cores(), WAL_PER_HEAP), res), pj


def skipped_note(ev: Evidence, res: Any) -> Evidence:
    """The evidence's note, with the stream counts the probe measured and
    those it skipped for its budget (`ProbeResult.skipped`), if any."""
    if not res.skipped:
        return ev
    measured = ", ".join(str(k) for k in sorted({int(p.streams) for p in res.points}))
    skipped = ", ".join(str(k) for k in sorted(res.skipped))
    return dataclasses.replace(ev, note=f"{ev.note}; streams measured: {measured}; skipped "
                                        f"for the budget: {skipped}")


def storage_bound(points: list[Any]) -> tuple[int, str] | None:
    """(k, why) when the storage is saturated at k streams: the next step
    with more streams mostly waited on I/O (IO:DataFileRead and friends)
    and gained under STORAGE_GAIN per doubling. None otherwise."""
    pts = sorted(points, key=lambda p: p.streams)
    for a, b in zip(pts, pts[1:], strict=False):
        share = b.io_wait_share
        if share is None or share < STORAGE_IO_SHARE:
            continue
        gain = doubling_gain(a.streams, a.bytes_per_s, b.streams, b.bytes_per_s)
        if gain < STORAGE_GAIN:
            return a.streams, (f"at {b.streams} streams the probe's sessions waited on I/O "
                               f"{share:.0%} of the time and read {gain:+.0%} per doubling "
                               f"of streams over {a.streams}: storage-bound at {a.streams}")
    return None


def probe_limits(res: Any, cores: int) -> tuple[str, str | None]:
    """Name what saturates and what bounds one stream, from the probe's
    per-step CPU and disk readings (docs/advise.md, "When is I/O saturated")."""
    pts = sorted(res.points, key=lambda p: p.streams)
    first, last = pts[0], pts[-1]
    per_stream = None
    c1 = first.client_cpu_s / first.elapsed_s if first.elapsed_s > 0 else 0.0
    s1 = (first.server_cpu_s or 0.0) / first.elapsed_s if first.elapsed_s > 0 else 0.0
    if c1 >= 0.75 and c1 >= s1:
        per_stream = "compression CPU" if res.compression != "none" else "client CPU"
    elif s1 >= 0.75:
        per_stream = "the server's COPY (CPU)"
    cpu_last = (last.client_cpu_s + (last.server_cpu_s or 0.0)) / max(last.elapsed_s, 1e-9)
    disk_sat = (last.disk_util is not None and last.disk_util >= 90.0 and
                first.disk_await_ms is not None and last.disk_await_ms is not None and
                last.disk_await_ms >= 2 * max(first.disk_await_ms, 0.1))
    if disk_sat:
        return "disk (the target device)", per_stream
    if cpu_last >= 0.85 * cores:
        client_share = last.client_cpu_s / max(last.client_cpu_s + (last.server_cpu_s or 0), 1e-9)
        what = "compression" if client_share >= 0.5 and res.compression != "none" else "server"
        return f"host CPU ({cores} cores, mostly {what})", per_stream
    busy = busy_host(last, cpu_last, cores)
    if busy:
        return busy, per_stream
    return "the server or the disk (no CPU limit seen)", per_stream


def busy_host(last: Any, cpu_last: float, cores: int) -> str | None:
    """The host's CPUs were full in the last step, but not of the probe's
    own work (cpu_last cores of it): other processes held them."""
    host = getattr(last, "host_cpu_percent", None)
    if host is None or host < 85.0:
        return None
    own = 100.0 * cpu_last / cores
    return (f"host CPU ({cores} cores {host:.0f}% busy, {own:.0f}% of it the probe's: "
            "other work on this host)")


# ----------------------------------------------------------- one point


def calibrated_static(ev: Evidence, static: Evidence) -> Evidence:
    """One job count measured says how fast a stream is here, not how the
    streams scale: the static model's shape, scaled to the measurement."""
    k0, x0 = max(ev.points, key=lambda p: p[0])
    scale = x0 / static.fit.throughput(k0)
    f = static.fit
    fit = usl.Fit(f.model, f.lam * scale, f.sigma, f.kappa,
                  None if f.x_max is None else f.x_max * scale, ev.fit.rms_rel, f.max_n,
                  1, note=f"one job count measured ({k0:g}): its rate, with the static "
                          "model's scaling")
    return Evidence(ev.basis, fit, ev.points, cpu_per_gb=ev.cpu_per_gb, limit=static.limit,
                    per_stream_limit=ev.per_stream_limit or static.per_stream_limit,
                    note=f"only {k0:g} concurrent job(s) seen: the rate is measured, the "
                         "scaling with -j is the static guess", detail=ev.detail)


# ------------------------------------------------------ resource bounds


def stream_plan_of(max_streams: int) -> list[int]:
    from .probe.plan import stream_plan

    return stream_plan(max_streams)


def cpu_ceiling(res: Any, cores: int) -> tuple[Ceiling | None, bool]:
    """(the host's CPU as a bound on throughput, whether the server's CPU
    is in it).  From the step with the fewest streams (one stream alone,
    nothing contending): its client CPU per work unit (the real tool's when
    the probe's own client differs: `ProbeResult.client_s_per_byte`) plus
    its backends' when the server is on this host; the cores divided by
    that.  At least what a step measured: a measurement beats the bound."""
    pts = sorted((p for p in res.points if p.heap_bytes > 0), key=lambda p: p.streams)
    if not pts:
        return None, False
    p = pts[0]
    client = res.client_s_per_byte if res.client_s_per_byte else p.client_cpu_s / p.heap_bytes
    server = None if p.server_cpu_s is None else p.server_cpu_s / p.heap_bytes
    per = client + (server or 0.0)
    if per <= 0:
        return None, False
    best = max(q.bytes_per_s for q in res.points)
    x = max(cores / per, best)
    if server is None:
        detail = (f"{cores} cores / {per * GB_S:.1f} s of the client's CPU per GB; "
                  "the server's CPU not measured")
        return Ceiling("this host's CPU (the client's)", ((1, x),), detail), False
    detail = (f"{cores} cores / {per * GB_S:.1f} s of CPU per GB (client "
              f"{client * GB_S:.1f}, server {server * GB_S:.1f}) = {fmt.rate(x)}")
    return Ceiling("host CPU", ((1, x),), detail), True


GB_S = 1e9  # CPU seconds per byte -> per GB


def wal_ceiling(res: Any, wal_per_unit: float) -> Ceiling | None:
    """The WAL the server wrote and flushed with k sessions (the probe's WAL
    step), over the WAL a work unit of the job writes."""
    pts = [(w.streams, w.bytes_per_s / wal_per_unit) for w in res.wal if w.bytes_per_s > 0]
    if not pts:
        return None
    top = max(res.wal, key=lambda w: w.streams)
    detail = (f"the server wrote {fmt.rate(top.bytes_per_s)} of WAL with {top.streams} "
              f"session{'s' if top.streams > 1 else ''}; about {wal_per_unit:.2f} B of WAL "
              "a byte")
    return Ceiling("WAL writes and flushes", tuple(pts), detail)


def bounded(ev: Evidence, res: Any, cores: int, wal_per_unit: float) -> Evidence:
    """The probe's curve with the resource bounds it measured: the host's
    CPU and the WAL.  The curve is followed past its fitted range (twice the
    largest count measured) when it was still nearly linear where the steps
    end (LINEAR_GAIN) and the whole host's CPU bounds it (the server's
    included: it runs here); else it is held flat there, as before."""
    ceilings: list[Ceiling] = []
    cpu, whole = cpu_ceiling(res, cores)
    if cpu is not None:
        ceilings.append(cpu)
    wal = wal_ceiling(res, wal_per_unit)
    if wal is not None:
        ceilings.append(wal)
    f = ev.fit
    top = f.max_n
    linear = (top >= 2 and f.n_points >= 2
              and doubling_gain(top / 2, f.unbounded(top / 2), top, f.unbounded(top))
              >= LINEAR_GAIN)
    # two counts short of the cores, the second still rising, or a plateau
    # whose knee is the last count of a curve still linear there
    # (usl.rising): no knee seen.  The curve through them (not a plateau at
    # the last) is followed up to the bounds the probe measured, marked
    # extrapolated
    fitted = [(n, x) for n, x in ev.points if n not in f.left_out]
    if whole and usl.rising(f, fitted, LINEAR_GAIN) and f.max_n < cores:
        f = usl.fit_rising(fitted)
        return dataclasses.replace(ev, fit=f, note=f.note, ceilings=ceilings, extend=True)
    return dataclasses.replace(ev, ceilings=ceilings, extend=bool(whole and linear))
