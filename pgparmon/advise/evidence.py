"""The evidence behind `pgparmon advise`, best first (docs/advise.md): a
calibration probe on the real system, recordings of earlier runs; and the
static model's shape scaled to a single measured job count."""

from __future__ import annotations

import os
from typing import Any

from ..analyze.saturation import STORAGE_GAIN, STORAGE_IO_SHARE, doubling_gain
from ..readers.db import ServerFacts
from ..views import fmt
from . import predict, usl
from .checks import Caution
from .inventory import Inventory
from .predict import Evidence
from .request import AdviseError, Request

# docs/advise.md: a probe costs at most 3% of the predicted run, and never more
# than a minute; under this many seconds it cannot measure a curve.
PROBE_SHARE = 0.03
PROBE_MAX_S = 60.0
PROBE_MIN_S = 4.0


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ---------------------------------------------------------- recordings


def history_evidence(req: Request, notes: list[str]) -> Evidence | None:
    from .history import HistoryError, history_points, load_history

    try:
        runs = load_history(req.history)
    except HistoryError as exc:
        raise AdviseError(str(exc)) from None
    kind = "pg_dump" if req.kind == "dump" else "pg_restore"
    pts = history_points(runs, kind)
    if not pts:
        notes.append(f"the recordings hold no steady {kind} throughput to learn from")
        return None
    return predict.points_evidence("history", pts, limit="a shared resource (from past runs)",
                                   note=f"{len(runs)} recording(s), {len(pts)} job counts seen")


# ----------------------------------------------------------- the probe


def probe_budget(req: Request, static_pred: float) -> tuple[float, bool]:
    """(seconds, forced): --probe-seconds, else 3% of the predicted run capped
    at a minute."""
    if req.probe_seconds is not None:
        return float(req.probe_seconds), True
    return min(PROBE_MAX_S, PROBE_SHARE * static_pred), False


def probe_evidence(req: Request, inv: Inventory | None, facts: ServerFacts | None,
                   static: Evidence, max_jobs: int, notes: list[str], warnings: list[Caution]
                   ) -> tuple[Evidence | None, dict[str, Any] | None]:
    if req.conn is None or facts is None or inv is None:
        raise AdviseError("--probe needs the server: give -d DB (and -h/-p/-U as for psql)")
    if not inv.tables:
        notes.append("nothing to probe: no table data")
        return None, None
    items = inv.items
    guess = predict.predict(static, items, [max(1, min(max_jobs, usable_cores()))])[0].wall_s
    budget, forced = probe_budget(req, guess)
    if budget < PROBE_MIN_S and not forced:
        warnings.append(Caution("probe_skipped",
                                f"the whole {req.kind} is predicted at about "
                                f"{fmt.duration(guess)}: a probe within 3% of that "
                                f"({budget:.1f} s) cannot measure anything; give "
                                "--probe-seconds N to probe anyway"))
        return None, None
    biggest = max((t.heap_bytes for t in inv.tables), default=0.0)
    if req.kind == "restore" and biggest < SMALL_FILE_HEAP:
        warnings.append(Caution(
            "probe_small_files",
            f"the archive's largest data file holds {fmt.size(biggest)}: a restore probe "
            "would time its own start-up per file (a decompressor and a \\copy each), not "
            "a data rate; pg_restore's cost per item is in the per-object model instead: "
            "advice from the other evidence"))
        return None, None
    from . import probe as probe_mod

    streams = max(1, min(max_jobs, 2 * usable_cores(), 16))
    try:
        if req.kind == "dump":
            assert req.target_dir
            tables = [probe_mod.ProbeTable(name=t.name, schema=t.schema, relname=t.relname,
                                           relpages=t.relpages - t.toast_pages,
                                           toast_pages=t.toast_pages)
                      for t in inv.tables if t.relpages - t.toast_pages > 0][:8]
            if not tables:
                notes.append("no table with pages to probe (run ANALYZE)")
                return None, None
            res = probe_mod.run_probe(req.conn, tables, req.target_dir,
                                      budget_s=budget, max_streams=streams,
                                      compression=req.compression.method,
                                      level=req.compression.level, block_size=inv.block_size,
                                      server_version_num=facts.version_num)
        else:
            runner = getattr(probe_mod, "run_restore_probe", None)
            if runner is None:
                warnings.append(Caution("probe_unavailable", "a restore probe is not "
                                                             "available yet: advice from "
                                                             "the other evidence"))
                return None, None
            assert req.archive
            res = runner(req.conn, req.archive, budget_s=budget, max_streams=streams,
                         server_version_num=facts.version_num)
    except probe_mod.ProbeError as exc:
        warnings.append(Caution("probe_failed", f"the probe did not run: {exc}"))
        return None, None
    pts = res.fit_points()
    pj = res.to_json()
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
    ev = predict.points_evidence("probe", pts, limit=limit, per_stream_limit=per_stream,
                                 cpu_per_gb=cpu, detail={"probe": pj})
    return ev, pj


# A restore probe loads whole files up to its range size: with no data file
# of at least this many heap bytes, each file's fixed cost in the probe (one
# decompressor process and one \copy, ~2 ms) outweighs its data (1 MB loads
# in ~10 ms), and what it measures is not a data rate.
SMALL_FILE_HEAP = 1e6


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
    return "the server or the disk (no CPU limit seen)", per_stream


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
