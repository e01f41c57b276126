"""`pgparmon advise`: gather the inventory and the best evidence at hand,
predict each -j, choose, and say what would bite.

Evidence, best first (docs/advise.md): a calibration probe on the real system,
recordings of earlier runs, wall times the user gives, static facts (a
guess, and the advice says so).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from typing import Any

import psycopg

from ..connect import ConnTarget, connect
from ..exitcodes import ExitCode
from ..readers.db import ServerFacts, read_facts
from ..readers.files import nearest_existing as _existing_ancestor
from ..redact import redact_text
from ..toc import client_program, program_major
from . import predict, usl
from .inventory import (
    Inventory,
    InventoryError,
    available_memory,
    dump_inventory,
    read_advise_facts,
    restore_inventory,
    server_is_local,
    setting_bytes,
    setting_int,
    setting_str,
)
from .predict import Compression, Evidence, Prediction

SCHEMA = "pgparmon.advice/1"
# docs/advise.md: a probe costs at most 3% of the predicted run, and never more
# than a minute; under this many seconds it cannot measure a curve.
PROBE_SHARE = 0.03
PROBE_MAX_S = 60.0
PROBE_MIN_S = 4.0


class AdviseError(Exception):
    """Bad input: one line, what to do. `code` is the exit code."""

    def __init__(self, msg: str, code: int = ExitCode.USAGE) -> None:
        super().__init__(msg)
        self.code = code


@dataclass
class Request:
    kind: str  # dump | restore
    conn: ConnTarget | None  # None: no server (timings alone)
    target_dir: str | None = None
    archive: str | None = None
    probe: bool = False
    probe_seconds: float | None = None
    history: list[str] = field(default_factory=list)
    timings: dict[int, float] | None = None
    compression: Compression = field(default_factory=lambda: Compression("gzip"))
    max_jobs: int | None = None
    dbname_for_command: str | None = None  # as the user gave -d (redacted when shown)
    host: str | None = None
    port: str | None = None
    user: str | None = None


@dataclass
class Warning_:
    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": redact_text(self.message)}


@dataclass
class Advice:
    kind: str
    recommended: int
    fastest: int
    predictions: list[Prediction]
    lower_bound_s: float | None
    basis: str
    confidence: str
    warnings: list[Warning_]
    command: str
    evidence: Evidence
    choice: predict.Choice
    inventory: Inventory | None
    dominant: dict[str, Any] | None
    probe: dict[str, Any] | None = None
    why: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    server: dict[str, Any] | None = None

    def prediction(self, j: int) -> Prediction | None:
        return next((p for p in self.predictions if p.jobs == j), None)

    def to_json(self) -> dict[str, Any]:
        rec = self.prediction(self.recommended)
        return {
            "schema": SCHEMA,
            "kind": self.kind,
            "recommended_jobs": self.recommended,
            "fastest_jobs": self.fastest,
            "knee_jobs": self.choice.knee,
            "efficient_jobs": self.choice.efficient,
            "capped_by": self.choice.capped_by,
            "predicted_wall_s": round(rec.wall_s, 2) if rec else None,
            "predictions": [p.to_json() for p in self.predictions],
            "lower_bound_s": None if self.lower_bound_s is None else round(self.lower_bound_s, 2),
            "dominant": self.dominant,
            "basis": self.basis,
            "confidence": self.confidence,
            "fit": self.evidence.fit.to_json(),
            "evidence_note": self.evidence.note,
            "probe": _redacted_probe(self.probe),
            "inventory": self.inventory.to_json() if self.inventory else None,
            "server": self.server,
            "warnings": [w.to_json() for w in self.warnings],
            "why": [redact_text(s) for s in self.why],
            "notes": [redact_text(s) for s in self.notes],
            "command": redact_text(self.command),
        }


def _redacted_probe(probe: dict[str, Any] | None) -> dict[str, Any] | None:
    """The probe's notes quote psql's errors: through the redactor, like
    every other message."""
    if probe is None:
        return None
    return {**probe, "notes": [redact_text(str(n)) for n in probe.get("notes") or []]}


# ------------------------------------------------------------------ input


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


def check_target(path: str) -> list[Warning_]:
    """pg_dump -Fd creates the directory (or fills an empty one): its
    nearest existing ancestor must be a writable directory."""
    out: list[Warning_] = []
    ap = os.path.abspath(path)
    if os.path.isfile(ap):
        raise AdviseError(f"--target {path} is a file: a parallel dump (-Fd -j) writes a "
                          "directory; give a new or empty directory")
    if os.path.isdir(ap):
        if not os.access(ap, os.W_OK | os.X_OK):
            raise AdviseError(f"--target {path} is not writable by this user: give a "
                              "directory you can write")
        try:
            if any(os.scandir(ap)):
                out.append(Warning_("target_not_empty",
                                    f"{path} is not empty: pg_dump -Fd refuses an existing "
                                    "non-empty directory; give a new one or empty it"))
        except OSError:
            pass
    else:
        anc = _existing_ancestor(ap)
        if not os.path.isdir(anc) or not os.access(anc, os.W_OK | os.X_OK):
            raise AdviseError(f"--target {path}: cannot create it ({anc} is not a writable "
                              "directory): give a directory you can write")
    if re.search(r"\.(dump|sql|backup|bak|tar|gz|custom|pgdump)$", ap, re.IGNORECASE):
        out.append(Warning_("directory_format",
                            f"{path} looks like a file name: a parallel dump needs the "
                            "directory format (-Fd); -Fc and -Fp cannot use -j"))
    return out


# ---------------------------------------------------------------- helpers


def client_major(name: str) -> int | None:
    b = client_program(name)
    return program_major(b) if b else None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ------------------------------------------------------------------ advise


def advise(req: Request) -> Advice:
    warnings: list[Warning_] = []
    notes: list[str] = []
    if req.kind == "dump" and req.target_dir:
        warnings += check_target(req.target_dir)

    inv: Inventory | None = None
    if req.kind == "restore" and req.archive:
        try:
            inv = restore_inventory(req.archive)
        except InventoryError as exc:
            raise AdviseError(str(exc)) from None
        notes += inv.notes

    facts: ServerFacts | None = None
    afacts: dict[str, Any] = {}
    local = False
    conn = None
    if req.conn is not None:
        try:
            conn = connect(req.conn)
            facts = read_facts(conn)
            afacts = read_advise_facts(conn, facts)
            local = server_is_local(facts)
            if req.kind == "dump":
                inv = dump_inventory(conn, facts, local)
                notes += inv.notes
        except psycopg.Error as exc:
            raise AdviseError(f"the server refused the catalog queries: "
                              f"{redact_text(str(exc).strip().splitlines()[0])}", ExitCode.CONNECT) from None
        finally:
            if conn is not None:
                conn.close()

    cores = _cores()
    max_jobs = req.max_jobs or max(4, cores)
    settings = afacts.get("settings") or {}

    # ---- evidence, best first
    ev: Evidence | None = None
    probe_json: dict[str, Any] | None = None
    static = predict.static_evidence(req.kind, cores, req.compression, local or req.conn is None)
    if req.probe:
        ev, probe_json = _probe(req, inv, facts, static, max_jobs, notes, warnings)
    if ev is None and req.history:
        ev = _history(req, notes)
    if ev is None and req.timings:
        try:
            ev = predict.timings_evidence(req.timings)
        except ValueError as exc:
            raise AdviseError(f"--from-timings: {exc}") from None
    if ev is None:
        if inv is None:
            raise AdviseError("nothing to advise from: give -d DB with --target DIR (dump) or "
                              "--archive PATH (restore), or --from-timings \"1=70,2=44\"")
        ev = static
        warnings.append(Warning_("guess", "no measurement behind this advice: it is a guess "
                                          f"from {cores} cores and typical rates; --probe "
                                          "measures this system within a minute"))

    spb = (probe_json or {}).get("build_s_per_byte")
    if req.kind == "restore" and inv is not None and ev.basis == "probe" and spb:
        # the probe timed an index build: express builds in the streams' work
        # units (seconds per byte x bytes per second of one stream)
        factor = float(spb) * ev.fit.throughput(1)
        inv = inv.with_index_factor(factor)
        notes.append(f"index builds from the probe: {factor:.2f} x their table's load work")

    if ev.basis in ("probe", "history") and ev.fit.n_points < 2:
        ev = _calibrated_static(ev, static)
        notes.append(ev.note)

    # ---- predict
    if ev.basis == "static":
        limit = max_jobs
    elif ev.basis == "timings" and req.max_jobs is None:
        # measured elsewhere, perhaps on a bigger machine: the sweep's own range
        limit = ev.fit.limit_n
    else:
        limit = min(max_jobs, ev.fit.limit_n)
    jobs = list(range(1, max(1, limit) + 1))
    items = inv.items if inv is not None and inv.items else None
    labels = {it.key: it.label or it.key for it in items} if items else {}
    preds = predict.predict(ev, items, jobs, labels)

    # ---- caps
    caps: dict[str, int] = {}
    server: dict[str, Any] | None = None
    if facts is not None:
        server = _server_facts(facts, afacts, local)
        caps.update(_connection_cap(req.kind, afacts))
    if inv is not None and inv.tables and req.kind == "dump":
        caps["tables"] = max(1, len(inv.tables))
    if req.kind == "restore" and facts is not None and local:
        mwm = setting_bytes(settings, "maintenance_work_mem")
        if mwm:
            caps["memory"] = max(1, int(0.5 * available_memory() // mwm))
    if inv is not None and inv.archive_format in ("plain", "tar"):
        caps["archive format"] = 1

    choice = predict.choose(preds, ev.cpu_per_gb, caps)
    rec = choice.recommended
    rec_pred = next(p for p in preds if p.jobs == rec)
    dom = predict.dominant(items or [], ev, rec_pred, labels) if items else None

    # ---- warnings that would bite
    if facts is not None:
        warnings += _connection_warnings(req.kind, afacts, choice)
    if req.kind == "restore":
        warnings += _restore_warnings(inv, settings, choice, local)
    if req.kind == "dump" and req.target_dir and inv is not None:
        warnings += _space_warning(req, inv, probe_json)
    if "tables" in choice.capped_by:
        warnings.append(Warning_("few_tables", f"only {caps['tables']} table(s) to dump: more "
                                              "jobs than tables sit idle"))
    warnings += _compression_warning(req, ev, choice)
    if dom:
        warnings.append(Warning_("dominant_table", dom["message"]))
    if inv is not None and not inv.items and req.kind == "dump":
        warnings.append(Warning_("empty", "the database has no user tables: there is nothing "
                                          "for -j to share"))

    why = _why(ev, choice, preds, dom)
    lb = rec_pred.lower_bound_s
    confidence = _confidence(ev)
    command = _command(req, rec)
    return Advice(kind=req.kind, recommended=rec, fastest=choice.fastest, predictions=preds,
                  lower_bound_s=lb, basis=ev.basis, confidence=confidence, warnings=warnings,
                  command=command, evidence=ev, choice=choice, inventory=inv, dominant=dom,
                  probe=probe_json, why=why, notes=notes, server=server)


def _calibrated_static(ev: Evidence, static: Evidence) -> Evidence:
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


def _server_facts(facts: ServerFacts, afacts: dict[str, Any], local: bool) -> dict[str, Any]:
    s = afacts.get("settings") or {}
    return {"version": facts.version, "database": facts.database, "local": local,
            "max_connections": setting_int(s, "max_connections"),
            "connections_in_use": afacts.get("connections_in_use"),
            "maintenance_work_mem_bytes": setting_bytes(s, "maintenance_work_mem"),
            "max_wal_size_bytes": setting_bytes(s, "max_wal_size"),
            "archive_mode": setting_str(s, "archive_mode")}


def _free_connections(afacts: dict[str, Any]) -> tuple[int, str] | None:
    s = afacts.get("settings") or {}
    maxc = setting_int(s, "max_connections")
    if maxc is None:
        return None
    reserved = (setting_int(s, "superuser_reserved_connections") or 0) + \
        (setting_int(s, "reserved_connections") or 0)
    # our own advise connection is counted in use; it is the monitor's slot
    in_use = max(0, int(afacts.get("connections_in_use") or 0) - 1)
    free = maxc - reserved - in_use
    return free, (f"max_connections {maxc}, {reserved} reserved, {in_use} in use")


def _need(kind: str, j: int) -> int:
    # a dump's leader holds a connection besides its j workers; the monitor one more
    return j + (1 if kind == "dump" else 0) + 1


def _connection_cap(kind: str, afacts: dict[str, Any]) -> dict[str, int]:
    """The largest j whose connections (_need) fit in the free ones."""
    fc = _free_connections(afacts)
    if fc is None:
        return {}
    free, _ = fc
    return {"connections": max(1, free - _need(kind, 0))}


def _connection_warnings(kind: str, afacts: dict[str, Any], choice: predict.Choice
                         ) -> list[Warning_]:
    fc = _free_connections(afacts)
    if fc is None:
        return []
    free, detail = fc
    want = max(choice.knee, choice.recommended)
    need = _need(kind, want)
    if need <= free:
        return []
    lead = " (j workers + the leader + pgparmon)" if kind == "dump" else \
        " (j workers + pgparmon)"
    return [Warning_("connections",
                     f"-j {want} needs {need} connections{lead} but only {free} are free "
                     f"({detail}): the advice is capped at -j {choice.recommended}; raise "
                     "max_connections or close idle sessions")]


def _restore_warnings(inv: Inventory | None, settings: dict[str, Any], choice: predict.Choice,
                      local: bool) -> list[Warning_]:
    out: list[Warning_] = []
    if inv is not None and inv.archive_format == "plain":
        out.append(Warning_("restore_format", "a plain SQL dump restores with psql, one "
                                              "session: pg_restore -j needs a custom (-Fc) or "
                                              "directory (-Fd) archive; dump with -Fd -j next "
                                              "time"))
    elif inv is not None and inv.archive_format == "tar":
        out.append(Warning_("restore_format", "pg_restore -j cannot read a tar archive in "
                                              "parallel: it needs -Fc or -Fd"))
    mwm = setting_bytes(settings, "maintenance_work_mem")
    if mwm and local:
        free = available_memory()
        j = max(choice.knee, choice.recommended)
        if j * mwm > 0.5 * free:
            out.append(Warning_("memory",
                                f"-j {j} index builds may use {j} x maintenance_work_mem = "
                                f"{predict.human_bytes(j * mwm)}, more than half of the "
                                f"{predict.human_bytes(free)} free memory: the advice is capped "
                                f"at -j {choice.recommended}; lower maintenance_work_mem for "
                                "the restore or add memory"))
    wal = setting_bytes(settings, "max_wal_size")
    if wal and inv is not None and inv.data_bytes > wal:
        out.append(Warning_("max_wal_size",
                            f"the restore writes about {predict.human_bytes(inv.data_bytes)} of "
                            f"WAL and max_wal_size is {predict.human_bytes(wal)}: checkpoints "
                            "will interrupt the load; raise max_wal_size for the restore"))
    if (setting_str(settings, "archive_mode") or "off") not in ("off", ""):
        out.append(Warning_("wal_archiving", "WAL archiving is on: every loaded byte is "
                                             "archived too; turn it off for a large restore "
                                             "(PostgreSQL docs, Populating a Database)"))
    return out


def _space_warning(req: Request, inv: Inventory, probe_json: dict[str, Any] | None
                   ) -> list[Warning_]:
    assert req.target_dir
    ratio = None
    how = f"{req.compression.spec}, typical ratio"
    if probe_json and probe_json.get("ratio"):
        ratio = float(probe_json["ratio"]) * 1.1
        how = "ratio measured by the probe"
    if ratio is None:
        ratio = req.compression.ratio_guess()
    est = inv.data_bytes * ratio
    try:
        free = float(shutil.disk_usage(_existing_ancestor(req.target_dir)).free)
    except OSError:
        return []
    if free >= est:
        return []
    return [Warning_("disk_space", f"the dump needs about {predict.human_bytes(est)} ({how}) "
                                   f"but {req.target_dir} has {predict.human_bytes(free)} free: "
                                   "free space or choose another target")]


def _compression_warning(req: Request, ev: Evidence, choice: predict.Choice) -> list[Warning_]:
    if req.kind != "dump" or req.compression.method != "gzip":
        return []
    if (req.compression.level or 6) <= 1:
        return []
    per_stream = ev.per_stream_limit or ""
    if "compression" not in per_stream and "compression" not in ev.limit:
        return []
    major = client_major("pg_dump")
    alt = ("--compress=lz4 (or zstd)" if major is not None and major >= 16
           else "-Z 1 (pg_dump 16+ also offers --compress=lz4 or zstd)")
    return [Warning_("compression_cpu",
                     f"compression is the limit: each pg_dump worker spends its time in "
                     f"gzip; {alt} moves several times more data per core, at a larger dump")]


def _confidence(ev: Evidence) -> str:
    if ev.basis == "static":
        return "low"
    good = ev.fit.rms_rel <= 0.05
    if ev.fit.n_points < 2:
        return "low"
    if ev.basis == "probe":
        return "high" if good and ev.fit.n_points >= 3 else "medium"
    if ev.basis in ("history", "timings"):
        return "medium" if good and ev.fit.n_points >= 3 else "low"
    return "low"


def _why(ev: Evidence, choice: predict.Choice, preds: list[Prediction],
         dom: dict[str, Any] | None) -> list[str]:
    by = {p.jobs: p for p in preds}
    fast = by[choice.fastest]
    out = [f"fastest predicted: -j {choice.fastest} ({predict.human_s(fast.wall_s)})"]
    if choice.knee != choice.fastest:
        k = by[choice.knee]
        out.append(f"-j {choice.knee} is within {100 * (predict.KNEE - 1):.0f}% of that "
                   f"({predict.human_s(k.wall_s)}): more jobs buy little")
    if choice.efficient is not None and choice.efficient < choice.knee:
        out.append(f"beyond -j {choice.efficient} the CPU per GB grows more than "
                   f"{100 * (predict.EFFICIENCY - 1):.0f}%: the extra jobs mostly burn CPU")
    for why in choice.capped_by:
        out.append(f"capped by {why}")
    if dom:
        out.append(f"one table sets the wall time: {dom['item']}")
    return out


def _command(req: Request, j: int) -> str:
    conn_args: list[str] = []
    if req.host:
        conn_args += ["-h", req.host]
    if req.port:
        conn_args += ["-p", str(req.port)]
    if req.user:
        conn_args += ["-U", req.user]
    db = req.dbname_for_command or "DBNAME"
    if req.kind == "dump":
        comp = req.compression.dump_args(client_major("pg_dump"))
        argv = ["pg_dump", "-Fd", "-j", str(j), *comp, *conn_args, "-f",
                req.target_dir or "DIR", db]
    else:
        if req.archive and os.path.isfile(req.archive) and j == 1:
            argv = ["pg_restore", *conn_args, "-d", db, req.archive]
        else:
            argv = ["pg_restore", "-j", str(j), *conn_args, "-d", db, req.archive or "ARCHIVE"]
    return redact_text(shlex.join(argv))


# ------------------------------------------------------------- evidence


def _history(req: Request, notes: list[str]) -> Evidence | None:
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


def probe_budget(req: Request, static_pred: float) -> tuple[float, bool]:
    """(seconds, forced): --probe-seconds, else 3% of the predicted run capped
    at a minute."""
    if req.probe_seconds is not None:
        return float(req.probe_seconds), True
    return min(PROBE_MAX_S, PROBE_SHARE * static_pred), False


def _probe(req: Request, inv: Inventory | None, facts: ServerFacts | None, static: Evidence,
           max_jobs: int, notes: list[str], warnings: list[Warning_]
           ) -> tuple[Evidence | None, dict[str, Any] | None]:
    if req.conn is None or facts is None or inv is None:
        raise AdviseError("--probe needs the server: give -d DB (and -h/-p/-U as for psql)")
    if not inv.tables:
        notes.append("nothing to probe: no table data")
        return None, None
    items = inv.items
    guess = predict.predict(static, items, [max(1, min(max_jobs, _cores()))])[0].wall_s
    budget, forced = probe_budget(req, guess)
    if budget < PROBE_MIN_S and not forced:
        warnings.append(Warning_("probe_skipped",
                                 f"the whole {req.kind} is predicted at about "
                                 f"{predict.human_s(guess)}: a probe within 3% of that "
                                 f"({budget:.1f} s) cannot measure anything; give "
                                 "--probe-seconds N to probe anyway"))
        return None, None
    from . import probe as probe_mod

    streams = max(1, min(max_jobs, 2 * _cores(), 16))
    try:
        if req.kind == "dump":
            assert req.target_dir
            tables = [probe_mod.ProbeTable(name=t.name, schema=t.schema, relname=t.relname,
                                           relpages=t.relpages)
                      for t in inv.tables if t.relpages > 0][:8]
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
                warnings.append(Warning_("probe_unavailable", "a restore probe is not "
                                                              "available yet: advice from "
                                                              "the other evidence"))
                return None, None
            assert req.archive
            res = runner(req.conn, req.archive, budget_s=budget, max_streams=streams,
                         server_version_num=facts.version_num)
    except probe_mod.ProbeError as exc:
        warnings.append(Warning_("probe_failed", f"the probe did not run: {exc}"))
        return None, None
    pts = res.fit_points()
    pj = res.to_json()
    pj.setdefault("seconds", res.seconds)
    pj.setdefault("budget_s", budget)
    if not pts:
        warnings.append(Warning_("probe_failed", "the probe measured nothing within its "
                                                 "budget"))
        return None, pj
    cpu = {int(p.streams): v for p in res.points
           if (v := res.cpu_s_per_gb(p.streams)) is not None}
    limit, per_stream = _probe_limits(res, _cores())
    ev = predict.points_evidence("probe", pts, limit=limit, per_stream_limit=per_stream,
                               cpu_per_gb=cpu, detail={"probe": pj})
    return ev, pj


def _probe_limits(res: Any, cores: int) -> tuple[str, str | None]:
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
