"""`pgparmon advise`: gather the inventory and the best evidence at hand,
predict each -j, choose, and say what would bite.

Evidence, best first (docs/advise.md): a calibration probe on the real system,
recordings of earlier runs, wall times the user gives, static facts (a
guess, and the advice says so). The evidence is gathered in evidence.py, the
checks and warnings live in checks.py; this module orchestrates.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import psycopg

from ..analyze.schedule import Helpers, WorkItem
from ..connect import ConnectError, connect
from ..readers.db import read_facts
from .. import units as fmt
from . import predict
from .checks import (
    Caution,
    compression_warning,
    connection_cap,
    connection_warnings,
    lock_cap,
    lock_warnings,
    server_facts,
)
from .document import Advice, confidence, why_lines
from .evidence import calibrated_static, history_evidence, probe_evidence, usable_cores
from .inventory import read_advise_facts, server_is_local, setting_str
from .predict import Evidence
from .request import AdviseError, Request, refused_queries
from .strategies import ArchiveStrategy, Situation, strategy_for

# --------------------------------------------------------------- input


_TIMING = re.compile(r"^\s*(?:j\s*=?\s*)?(\d+)\s*[=:]\s*"
                     r"([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*s?\s*$")


def parse_timings(text: str) -> dict[int, float]:
    """"1=70.3,2=43.6,4=33.7" (also "j1=70.3", "1:70.3s", spaces or
    commas between pairs) -> {jobs: seconds}; repeats of one j are
    averaged."""
    pairs = [p for p in re.split(r"[,\s;]+", text.strip()) if p]
    if not pairs:
        raise AdviseError("--from-timings is empty: give JOBS=SECONDS pairs, e.g. "
                          "\"1=70.3,2=43.6,4=33.7\"")
    acc: dict[int, list[float]] = {}
    for p in pairs:
        m = _TIMING.match(p)
        if not m:
            raise AdviseError(f"--from-timings: cannot read {p!r}: give JOBS=SECONDS pairs, "
                              "e.g. \"1=70.3,2=43.6,4=33.7\"")
        j, s = int(m.group(1)), float(m.group(2))
        if j < 1 or s <= 0:
            raise AdviseError(f"--from-timings: {p!r}: jobs must be >= 1 and seconds > 0")
        acc.setdefault(j, []).append(s)
    return {j: sum(v) / len(v) for j, v in sorted(acc.items())}


# -------------------------------------------------------------- advise


def advise(req: Request) -> Advice:
    """The advice for the request, by the strategy of its kind (strategies.py):
    a COPY load's own steps, or the steps below for a dump or a restore."""
    return strategy_for(req.kind).advise(req, _advise_archive)


def _advise_archive(req: Request, strategy: ArchiveStrategy) -> Advice:
    """A dump's or a restore's advice: gather, weigh the evidence, predict
    each -j, cap, choose, and say what would bite."""
    s = Situation(req)
    strategy.before_server(s)
    _read_server(s, strategy)
    cores = usable_cores()
    max_jobs = req.max_jobs or max(4, cores)
    static = strategy.static_evidence(cores, req, s.local or req.conn is None)
    ev, probe_json = _evidence(s, strategy, static, cores, max_jobs)
    strategy.with_probe_builds(s, ev, probe_json)
    if ev.basis in ("probe", "history") and ev.fit.n_points < 2:
        ev = calibrated_static(ev, static)
        s.notes.append(ev.note)

    jobs = list(range(1, max(1, _job_limit(req, ev, max_jobs)) + 1))
    items = s.inv.items if s.inv is not None and s.inv.items else None
    labels = {it.key: it.label or it.key for it in items} if items else {}
    cost = strategy.object_cost(s)
    helpers = strategy.helpers(s, cores) if items and ev.basis != "timings" else None
    preds = _predictions(s, strategy, ev, items, jobs, labels, cost, helpers)
    caps, preds = _caps(s, strategy, ev, preds, probe_json, max(jobs))

    choice = predict.choose(preds, ev.cpu_per_gb, caps, extrapolated_ok=ev.extend)
    rec = choice.recommended
    rec_pred = next(p for p in preds if p.jobs == rec)
    dom = predict.dominant(items or [], ev, rec_pred, labels) if items else None
    sections = strategy.in_sections(s, rec)
    s.warnings += _bites(s, strategy, ev, choice, caps, cost, rec_pred, sections, probe_json)
    if dom:
        s.warnings.append(Caution("dominant_table", dom["message"]))
    s.warnings += strategy.last_warnings(s)

    conf = confidence(ev)
    if rec_pred.extrapolated and conf == "high":
        conf = "medium"  # the recommendation rests on extrapolation (`why` says so)
    return Advice(kind=req.kind, recommended=rec, fastest=choice.fastest, predictions=preds,
                  lower_bound_s=rec_pred.lower_bound_s, basis=ev.basis, confidence=conf,
                  warnings=s.warnings, command=strategy.command(req, rec, sections=sections, s=s),
                  evidence=ev, choice=choice, inventory=s.inv, dominant=dom,
                  probe=probe_json, why=why_lines(ev, choice, preds, dom), notes=s.notes,
                  server=server_facts(s.facts, s.afacts, s.local) if s.facts else None)


def _read_server(s: Situation, strategy: ArchiveStrategy) -> None:
    """The server's facts, the settings advise reads and what the kind reads
    there (a dump's inventory), into s; nothing without a server."""
    req = s.req
    if req.conn is None:
        return
    try:
        conn = connect(req.conn)
    except ConnectError as exc:
        raise strategy.refused(req, exc) from None
    try:
        s.facts = read_facts(conn)
        s.afacts = read_advise_facts(conn, s.facts)
        s.local = server_is_local(s.facts)
        strategy.read_server(s, conn)
    except psycopg.Error as exc:
        raise refused_queries(exc) from None
    finally:
        conn.close()


def _evidence(s: Situation, strategy: ArchiveStrategy, static: Evidence, cores: int,
              max_jobs: int) -> tuple[Evidence, dict[str, Any] | None]:
    """The best evidence at hand: a probe, recordings, timings, else the
    static guess (and a warning that it is one); and the probe's JSON."""
    req = s.req
    ev: Evidence | None = None
    probe_json: dict[str, Any] | None = None
    if req.probe:
        ev, probe_json = probe_evidence(strategy, s, static, max_jobs)
    if ev is None and req.history:
        ev = history_evidence(req, s.notes)
    if ev is None and req.timings:
        try:
            ev = predict.timings_evidence(req.timings)
        except ValueError as exc:
            raise AdviseError(f"--from-timings: {exc}") from None
    if ev is None:
        if s.inv is None:
            raise AdviseError("nothing to advise from: give -d DB with --target DIR (dump) or "
                              "--archive PATH (restore), or --from-timings \"1=70,2=44\"")
        ev = static
        s.warnings.append(Caution("guess", "no measurement behind this advice: it is a guess "
                                           f"from {cores} cores and typical rates; --probe "
                                           "measures this system within a minute"))
    return ev, probe_json


def _job_limit(req: Request, ev: Evidence, max_jobs: int) -> int:
    """The largest -j to predict."""
    if ev.basis == "static":
        return max_jobs
    if ev.basis == "timings" and req.max_jobs is None:
        # measured elsewhere, perhaps on a bigger machine: the sweep's own range
        return ev.fit.limit_n
    return min(max_jobs, ev.limit_n or max_jobs)


def _predictions(s: Situation, strategy: ArchiveStrategy, ev: Evidence,
                 items: list[WorkItem] | None, jobs: list[int], labels: dict[str, str],
                 cost: predict.ObjectCost | None, helpers: Helpers | None = None
                 ) -> list[predict.Prediction]:
    """Each -j's prediction; a run that writes the target's pages costs more
    where the target checksums them (and a warning says so); `helpers`: the
    server's parallel workers of the builds (strategy.helpers)."""
    checksums = (strategy.kind.writes_target and ev.basis != "timings"
                 and setting_str(s.settings, "data_checksums") == "on")
    preds = predict.predict(ev, items, jobs, labels, cost,
                            predict.CHECKSUM_WRITE_FACTOR if checksums else 1.0,
                            strategy.steps(s), helpers)
    if checksums:
        s.warnings.append(Caution(
            "data_checksums", "the target cluster has data checksums on: every page the "
            f"restore writes is checksummed (measured ~{CHECKSUM_PCT}% slower on writes): the "
            f"predictions include +{CHECKSUM_PCT}% on the load and the builds"))
    return preds


def _caps(s: Situation, strategy: ArchiveStrategy, ev: Evidence,
          preds: list[predict.Prediction], probe_json: dict[str, Any] | None, top_j: int
          ) -> tuple[dict[str, int], list[predict.Prediction]]:
    """The ceilings on -j (connections, locks, the kind's own, the archive's
    format, the storage's knee, the sessions tried), and the predictions
    past the storage's knee named by it."""
    kind = strategy.kind.name
    caps: dict[str, int] = {}
    if s.facts is not None:
        caps.update(connection_cap(kind, s.afacts))
        caps.update(lock_cap(kind, s.afacts))
    caps.update(strategy.caps(s))
    if s.inv is not None and s.inv.archive_format in ("plain", "tar"):
        caps["archive format"] = 1
    pinfo = probe_json or {}
    bound_at = pinfo.get("storage_bound_at")
    if bound_at:
        caps["storage"] = int(bound_at)
        # past the knee the storage is what limits, whatever the fitted curve says
        preds = [dataclasses.replace(p, bottleneck=ev.limit) if p.jobs > int(bound_at) else p
                 for p in preds]
        s.warnings.append(Caution(
            "storage_bound", f"the storage is the limit: {pinfo.get('storage_detail')} "
            "(IO:DataFileRead and friends): more jobs will not read faster; the knee is "
            f"-j {bound_at}"))
    caps.update(strategy.session_cap(s, min([top_j, *caps.values()])))
    return caps, preds


def _bites(s: Situation, strategy: ArchiveStrategy, ev: Evidence, choice: predict.Choice,
           caps: dict[str, int], cost: predict.ObjectCost | None,
           rec_pred: predict.Prediction, sections: bool,
           probe_json: dict[str, Any] | None) -> list[Caution]:
    """What would bite at the choice: the server's limits, the kind's own,
    idle jobs, the compression, the serial phase."""
    kind = strategy.kind.name
    out: list[Caution] = []
    if s.facts is not None:
        out += connection_warnings(kind, s.afacts, choice)
        out += lock_warnings(kind, s.afacts, choice)
    out += strategy.run_warnings(s, choice, choice.recommended, sections, probe_json)
    if "tables" in choice.capped_by:
        out.append(Caution("few_tables", f"only {caps['tables']} table(s) to dump: more "
                                         "jobs than tables sit idle"))
    out += compression_warning(s.req, ev, choice)
    if cost is not None and rec_pred.serial_s >= SERIAL_WARN * rec_pred.wall_s:
        out.append(Caution(
            "serial_phase", f"about {fmt.duration(rec_pred.serial_s)} of the "
            f"{fmt.duration(rec_pred.wall_s)} is {strategy.serial_who} for {cost.objects} "
            "objects: more jobs cannot shorten it; fewer objects per run can (split the run "
            "with -n / -t, or drop unused objects)"))
    return out


CHECKSUM_PCT = round(100 * (predict.CHECKSUM_WRITE_FACTOR - 1))
# the serial phase is worth a warning from this share of the predicted time
SERIAL_WARN = 0.4
