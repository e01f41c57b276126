"""`pgparmon advise`: gather the inventory and the best evidence at hand,
predict each -j, choose, and say what would bite.

Evidence, best first (docs/advise.md): a calibration probe on the real system,
recordings of earlier runs, wall times the user gives, static facts (a
guess, and the advice says so). The evidence is gathered in evidence.py, the
checks and warnings live in checks.py; this module orchestrates.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from typing import Any

import psycopg

from ..connect import ConnectError, connect
from ..exitcodes import ExitCode
from ..readers.db import ServerFacts, read_facts
from ..redact import redact_text
from .. import units as fmt
from . import predict
from .checks import (
    Caution,
    check_target,
    checkpoint_warnings,
    client_major,
    compression_warning,
    connection_cap,
    connection_warnings,
    lock_cap,
    lock_warnings,
    restore_warnings,
    server_facts,
    space_warning,
)
from .evidence import calibrated_static, history_evidence, probe_evidence, usable_cores
from .inventory import (
    Inventory,
    InventoryError,
    available_memory,
    dump_inventory,
    read_advise_facts,
    restore_inventory,
    server_is_local,
    setting_bytes,
    setting_str,
)
from .predict import Evidence
from .request import AdviseError, Request
from .document import Advice, confidence, conn_args, why_lines
from .snapshots import check_snapshots, verdict

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
    if req.kind == "copy":
        from .copyadvice import advise_copy

        return advise_copy(req)
    warnings: list[Caution] = []
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
        except ConnectError as exc:
            if req.kind == "dump" and "pooler" in str(exc):
                # what pg_dump -j would meet through the same pooler
                chk = check_snapshots(req.conn, 2)
                raise ConnectError(f"{exc}; {verdict(chk)}") from None
            raise
        try:
            facts = read_facts(conn)
            afacts = read_advise_facts(conn, facts)
            local = server_is_local(facts)
            if req.kind == "dump":
                inv = dump_inventory(conn, facts, local)
                notes += inv.notes
        except psycopg.Error as exc:
            first = str(exc).strip().splitlines()[0]
            raise AdviseError(f"the server refused the catalog queries: {redact_text(first)}",
                              ExitCode.CONNECT) from None
        finally:
            if conn is not None:
                conn.close()

    cores = usable_cores()
    max_jobs = req.max_jobs or max(4, cores)
    settings = afacts.get("settings") or {}

    # ---- evidence, best first
    ev: Evidence | None = None
    probe_json: dict[str, Any] | None = None
    static = predict.static_evidence(req.kind, cores, req.compression, local or req.conn is None)
    if req.probe:
        ev, probe_json = probe_evidence(req, inv, facts, static, max_jobs, notes, warnings,
                                        settings)
    if ev is None and req.history:
        ev = history_evidence(req, notes)
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
        warnings.append(Caution("guess", "no measurement behind this advice: it is a guess "
                                         f"from {cores} cores and typical rates; --probe "
                                         "measures this system within a minute"))

    spb = (probe_json or {}).get("build_s_per_byte")
    if req.kind == "restore" and inv is not None and ev.basis == "probe" and spb:
        # the probe timed an index build: express builds in the streams' work
        # units (seconds per byte x bytes per second of one stream)
        factor = float(spb) * ev.throughput(1)
        on = ((probe_json or {}).get("build") or {}).get("table")
        inv = inv.with_index_factor(factor, on)
        per_row = " at its rows' width (builds follow rows)" if on and inv.rows.get(on) else ""
        notes.append(f"index builds from the probe: {factor:.2f} x their table's load work"
                     + per_row)

    if ev.basis in ("probe", "history") and ev.fit.n_points < 2:
        ev = calibrated_static(ev, static)
        notes.append(ev.note)

    # ---- predict
    if ev.basis == "static":
        limit = max_jobs
    elif ev.basis == "timings" and req.max_jobs is None:
        # measured elsewhere, perhaps on a bigger machine: the sweep's own range
        limit = ev.fit.limit_n
    else:
        limit = min(max_jobs, ev.limit_n or max_jobs)
    jobs = list(range(1, max(1, limit) + 1))
    items = inv.items if inv is not None and inv.items else None
    labels = {it.key: it.label or it.key for it in items} if items else {}
    cost = _object_cost(req.kind, inv, afacts)
    checksums = (req.kind == "restore" and ev.basis != "timings"
                 and setting_str(settings, "data_checksums") == "on")
    preds = predict.predict(ev, items, jobs, labels, cost,
                            predict.CHECKSUM_WRITE_FACTOR if checksums else 1.0)
    if checksums:
        warnings.append(Caution(
            "data_checksums", "the target cluster has data checksums on: every page the "
            f"restore writes is checksummed (measured ~{CHECKSUM_PCT}% slower on writes): the "
            f"predictions include +{CHECKSUM_PCT}% on the load and the builds"))

    # ---- caps
    caps: dict[str, int] = {}
    server: dict[str, Any] | None = None
    if facts is not None:
        server = server_facts(facts, afacts, local)
        caps.update(connection_cap(req.kind, afacts))
        caps.update(lock_cap(req.kind, afacts))
    if inv is not None and inv.tables and req.kind == "dump":
        caps["tables"] = max(1, len(inv.tables))
    if req.kind == "restore" and facts is not None and local:
        mwm = setting_bytes(settings, "maintenance_work_mem")
        if mwm:
            caps["memory"] = max(1, int(0.5 * available_memory() // mwm))
    if inv is not None and inv.archive_format in ("plain", "tar"):
        caps["archive format"] = 1
    pinfo = probe_json or {}
    bound_at = pinfo.get("storage_bound_at")
    if bound_at:
        caps["storage"] = int(bound_at)
        # past the knee the storage is what limits, whatever the fitted curve says
        preds = [dataclasses.replace(p, bottleneck=ev.limit) if p.jobs > int(bound_at) else p
                 for p in preds]
        warnings.append(Caution(
            "storage_bound", f"the storage is the limit: {pinfo.get('storage_detail')} "
            "(IO:DataFileRead and friends): more jobs will not read faster; the knee is "
            f"-j {bound_at}"))
    if req.kind == "dump" and facts is not None and req.conn is not None:
        # the sessions pg_dump -j will hold, tried the way it holds them
        try_j = min([max(jobs), *caps.values()])
        if try_j >= 2:
            chk = check_snapshots(req.conn, try_j)
            if not chk.ok:
                caps["snapshot"] = max(1, chk.max_jobs)
                warnings.append(Caution(
                    "snapshot", verdict(chk) + ": connect pg_dump to the server itself (not "
                    "through a pooler or proxy), or give it no more jobs than "
                    f"{max(1, chk.max_jobs)}"))

    choice = predict.choose(preds, ev.cpu_per_gb, caps, extrapolated_ok=ev.extend)
    rec = choice.recommended
    rec_pred = next(p for p in preds if p.jobs == rec)
    dom = predict.dominant(items or [], ev, rec_pred, labels) if items else None

    # ---- warnings that would bite
    if facts is not None:
        warnings += connection_warnings(req.kind, afacts, choice)
        warnings += lock_warnings(req.kind, afacts, choice)
    if req.kind == "restore":
        warnings += restore_warnings(inv, settings, choice, local)
        warnings += checkpoint_warnings(afacts)
    in_sections = bool(req.kind == "restore" and rec >= 2 and inv is not None
                       and inv.early_fks)
    if in_sections:
        assert inv is not None
        fks = inv.early_fks
        more = f" (and {len(fks) - 2} more)" if len(fks) > 2 else ""
        warnings.append(Caution(
            "fk_before_partitions",
            f"pg_restore -j {rec} can add the foreign "
            f"{'keys' if len(fks) > 1 else 'key'} {' and '.join(fks[:2])}{more} "
            "before the partitions' data is loaded (the archive makes "
            f"{'each' if len(fks) > 1 else 'it'} wait only for the partitioned table, which "
            "holds no rows): every row loaded after it is then checked one at a time "
            "(measured: -j 2 slower than -j 1). Restore in three "
            "steps, pre-data, then data and post-data with -j (the command below): the "
            "predictions are for that"))
    if req.kind == "dump" and req.target_dir and inv is not None:
        warnings += space_warning(req, inv, probe_json)
    if "tables" in choice.capped_by:
        warnings.append(Caution("few_tables", f"only {caps['tables']} table(s) to dump: more "
                                             "jobs than tables sit idle"))
    warnings += compression_warning(req, ev, choice)
    if cost is not None and rec_pred.serial_s >= SERIAL_WARN * rec_pred.wall_s:
        who = ("the leader's catalog reads, locks and schema" if req.kind == "dump"
               else "pg_restore's pre-data DDL, one statement after another")
        warnings.append(Caution(
            "serial_phase", f"about {fmt.duration(rec_pred.serial_s)} of the "
            f"{fmt.duration(rec_pred.wall_s)} is {who} for {cost.objects} objects: more jobs "
            "cannot shorten it; fewer objects per run can (split the run with -n / -t, or "
            "drop unused objects)"))
    if dom:
        warnings.append(Caution("dominant_table", dom["message"]))
    if inv is not None and not inv.items and req.kind == "dump":
        warnings.append(Caution("empty", "the database has no user tables: there is nothing "
                                         "for -j to share"))

    why = why_lines(ev, choice, preds, dom)
    lb = rec_pred.lower_bound_s
    conf = confidence(ev)
    if rec_pred.extrapolated and conf == "high":
        conf = "medium"  # the recommendation rests on extrapolation (`why` says so)
    command = _command(req, rec, sections=in_sections)
    return Advice(kind=req.kind, recommended=rec, fastest=choice.fastest, predictions=preds,
                  lower_bound_s=lb, basis=ev.basis, confidence=conf, warnings=warnings,
                  command=command, evidence=ev, choice=choice, inventory=inv, dominant=dom,
                  probe=probe_json, why=why, notes=notes, server=server)


CHECKSUM_PCT = round(100 * (predict.CHECKSUM_WRITE_FACTOR - 1))
# the serial phase is worth a warning from this share of the predicted time
SERIAL_WARN = 0.4
# TOC entries a restore's leader runs itself, one after another (pre-data):
# everything but the data, the post-data builds and what comes with them
_NOT_PRE_DATA = {"TABLE DATA", "INDEX", "CONSTRAINT", "FK CONSTRAINT", "TRIGGER", "RULE",
                 "POLICY", "INDEX ATTACH", "STATISTICS", "SEQUENCE SET", "BLOBS", "BLOB",
                 "LARGE OBJECT", "ACL", "COMMENT", "MATERIALIZED VIEW DATA"}


def _object_cost(kind: str, inv: Inventory | None,
                 afacts: dict[str, Any]) -> predict.ObjectCost | None:
    """The per-object part of the run, from the catalog's object counts (a
    dump) or the archive's TOC (a restore)."""
    if inv is None or not inv.items:
        return None
    if kind == "dump":
        objects = int(afacts.get("objects") or 0)
        return predict.object_cost("dump", objects, len(inv.items)) if objects else None
    if kind == "restore" and inv.plan_inputs is not None:
        toc = inv.plan_inputs[0]
        objects = sum(1 for t in toc if t.desc not in _NOT_PRE_DATA)
        return predict.object_cost("restore", objects, len(inv.items))
    return None


def _command(req: Request, j: int, sections: bool = False) -> str:
    """The command line to run; sections: a restore in three steps
    (pre-data alone, then data and post-data with -j), each its own
    pg_restore, joined with &&."""
    conn_args_ = conn_args(req)
    db = req.dbname_for_command or "DBNAME"
    if sections:
        arch = req.archive or "ARCHIVE"
        steps = [["pg_restore", "--section=pre-data", *conn_args_, "-d", db, arch]]
        steps += [["pg_restore", "-j", str(j), f"--section={s}", *conn_args_, "-d", db, arch]
                  for s in ("data", "post-data")]
        return redact_text(" && ".join(shlex.join(a) for a in steps))
    if req.kind == "dump":
        comp = req.compression.dump_args(client_major("pg_dump"))
        argv = ["pg_dump", "-Fd", "-j", str(j), *comp, *conn_args_, "-f",
                req.target_dir or "DIR", db]
    else:
        if req.archive and os.path.isfile(req.archive) and j == 1:
            argv = ["pg_restore", *conn_args_, "-d", db, req.archive]
        else:
            argv = ["pg_restore", "-j", str(j), *conn_args_, "-d", db, req.archive or "ARCHIVE"]
    return redact_text(shlex.join(argv))
