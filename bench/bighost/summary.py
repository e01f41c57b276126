#!/usr/bin/env python3
"""The table of a bighost sweep's results (sweep.py's results.jsonl).

    python3 summary.py results.jsonl          a table
    python3 summary.py results.jsonl --json   the same figures as one JSON object

For the dump, the restore and the COPY load (J parallel \\copy streams of
one CSV, split -n r/J as the advice's command): per j the median measured
seconds over
the repeats (with their spread), and for each advice (static, probe, the
forced probe) its recommended j, its predicted seconds at every j with the
error against the measured median ((predicted - measured) / measured), and
its regret: the median at the recommended j over the best median. When the
recommended j's median lies within the spread of the best j's repeats
(at most the best j's slowest run) the two are a tie, scored 1.0.

Standard library only (any Python 3.8+).
"""

from __future__ import annotations

import json
import signal
import statistics
import sys
from typing import Any

KINDS = {"dump": "pg_dump -Fd -j N", "restore": "pg_restore -j N",
         "copy": "J parallel \\copy streams, split -n r/J"}
WAL_KINDS = ("restore", "copy")   # their runs record the WAL they wrote


def load(path: Any) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _first(rows: list[dict[str, Any]], op: str) -> dict[str, Any]:
    for r in rows:
        if r.get("op") == op and not r.get("skipped"):
            return r
    return {}


def measured(rows: list[dict[str, Any]], kind: str) -> dict[int, dict[str, Any]]:
    """j -> the runs that finished (rc 0): median, min, max, n (and for a
    restore or a COPY load the median WAL bytes)."""
    runs: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("op") == kind and not r.get("skipped") and r.get("rc") == 0 \
                and isinstance(r.get("jobs"), int) and _num(r.get("seconds")) is not None:
            runs.setdefault(r["jobs"], []).append(r)
    out = {}
    for j, rs in sorted(runs.items()):
        ts = [float(r["seconds"]) for r in rs]
        m: dict[str, Any] = {"median_s": round(statistics.median(ts), 3), "min_s": min(ts),
                             "max_s": max(ts), "n": len(ts), "times_s": ts}
        wal = [w for r in rs if (w := _num(r.get("wal_bytes"))) is not None]
        if wal:
            m["wal_bytes"] = int(statistics.median(wal))
        out[j] = m
    return out


def _mbs(x: Any) -> str:
    return _f((_num(x) or 0.0) / 1e6, "{:.0f}")


def _step_rate(step: Any) -> float | None:
    point = step.get("point") if isinstance(step, dict) else None
    return _num(point.get("bytes_per_s")) if isinstance(point, dict) else None


def probe_steps(probe: dict[str, Any]) -> dict[str, Any]:
    """What the advice's probe measured: its steps (streams -> bytes/s), the
    counts it skipped for its budget, its steps into logged tables (one
    stream: `logged`; its most streams: `logged_top`), its grown step and
    its WAL steps, each with its streams and rate."""
    pts = {p["streams"]: _num(p.get("bytes_per_s")) for p in probe.get("points") or []
           if isinstance(p, dict) and isinstance(p.get("streams"), int)}
    out: dict[str, Any] = {"steps": pts, "skipped": list(probe.get("skipped_streams") or [])}
    for name in ("logged", "logged_top", "grown"):
        step = probe.get(name)
        rate = _step_rate(step)
        if rate is not None:
            k = step["point"].get("streams")
            base = pts.get(k)
            out[name] = {"streams": k, "bytes_per_s": rate,
                         "of_step": round(rate / base, 3) if base else None,
                         "wal_per_byte": _num(step.get("wal_per_byte"))}
    out["wal"] = {w["streams"]: _num(w.get("bytes_per_s")) for w in probe.get("wal") or []
                  if isinstance(w, dict) and isinstance(w.get("streams"), int)}
    return out


def probe_text(st: dict[str, Any]) -> str:
    """probe_steps as one line, rates in MB/s."""
    parts = ["steps " + " ".join(f"{k}:{_mbs(x)}" for k, x in sorted(st["steps"].items()))]
    if st.get("skipped"):
        parts.append("skipped " + ",".join(str(k) for k in st["skipped"]))
    for name in ("logged", "logged_top", "grown"):
        e = st.get(name)
        if e:
            ratio = f" ({e['of_step']:.2f}x)" if e.get("of_step") else ""
            wal = f", {e['wal_per_byte']:.2f} B WAL/B" if e.get("wal_per_byte") else ""
            parts.append(f"{name}@{e['streams']} {_mbs(e['bytes_per_s'])}{ratio}{wal}")
    if st.get("wal"):
        parts.append("WAL " + " ".join(f"{k}:{_mbs(x)}" for k, x in sorted(st["wal"].items())))
    return "; ".join(parts) + " (MB/s)"


def score_advice(row: dict[str, Any], meas: dict[int, dict[str, Any]]) -> dict[str, Any]:
    doc = row.get("advice") if isinstance(row.get("advice"), dict) else None
    s: dict[str, Any] = {"mode": row.get("mode"), "rc": row.get("rc"),
                         "seconds": row.get("seconds"), "error": row.get("error")}
    if doc is None:
        return s
    probe = doc.get("probe") if isinstance(doc.get("probe"), dict) else {}
    s.update(basis=doc.get("basis"), confidence=doc.get("confidence"),
             recommended_jobs=doc.get("recommended_jobs"),
             predicted_wall_s=_num(doc.get("predicted_wall_s")),
             probe_s=_num(probe.get("seconds")), probe_budget_s=_num(probe.get("budget_s")),
             warnings=[w.get("code") for w in doc.get("warnings") or [] if isinstance(w, dict)])
    if probe.get("points"):
        s["probe_steps"] = probe_steps(probe)
    per_j: dict[int, dict[str, Any]] = {}
    for p in doc.get("predictions") or []:
        if not isinstance(p, dict) or not isinstance(p.get("jobs"), int):
            continue
        pred = _num(p.get("wall_s"))
        e: dict[str, Any] = {"predicted_s": pred, "extrapolated": bool(p.get("extrapolated"))}
        m = meas.get(p["jobs"])
        if m and pred is not None:
            e["error"] = round((pred - m["median_s"]) / m["median_s"], 4)
        per_j[p["jobs"]] = e
    s["per_j"] = per_j
    rec = s["recommended_jobs"]
    if meas and isinstance(rec, int):
        best = min(meas, key=lambda j: meas[j]["median_s"])
        s["best_jobs"] = best
        if rec in meas:
            regret = meas[rec]["median_s"] / meas[best]["median_s"]
            tie = rec == best or meas[rec]["median_s"] <= meas[best]["max_s"]
            s.update(measured_at_rec_s=meas[rec]["median_s"], regret=round(regret, 4), tie=tie,
                     regret_scored=1.0 if tie else round(regret, 4))
            pred = per_j.get(rec, {}).get("predicted_s")
            if pred is None:
                pred = s["predicted_wall_s"]
            if pred is not None:
                s["error_at_rec"] = round((pred - meas[rec]["median_s"]) / meas[rec]["median_s"], 4)
        else:
            s["note"] = f"recommended -j {rec} was not measured"
    return s


def scores(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in KINDS:
        meas = measured(rows, kind)
        advices = [score_advice(r, meas) for r in rows
                   if r.get("op") == "advise" and r.get("kind") == kind and not r.get("skipped")]
        out[kind] = {"measured": meas, "advice": advices,
                     "skipped": [r for r in rows if r.get("skipped") and
                                 (r.get("op") == kind or r.get("kind") == kind)]}
    return out


def _f(x: Any, fmt: str = "{:.1f}", none: str = "-") -> str:
    return fmt.format(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else none


def builds_text(rows: list[dict[str, Any]]) -> list[str]:
    """The builds part: each set of CREATE INDEX at once, its seconds and its
    heap MB/s against one build alone with the same workers setting."""
    builds = [r for r in rows if r.get("op") == "build"]
    if not builds:
        return []
    out = ["", "builds (CREATE INDEX on the text column, one a table, at once): seconds, "
               "heap MB/s, and x one build alone with the same parallel workers"]
    alone = {r.get("parallel_workers"): r for r in builds
             if r.get("streams") == 1 and r.get("ok") and not r.get("skipped")}
    for r in builds:
        what = f"  {r.get('streams'):>3} at once, parallel workers {r.get('parallel_workers')}:"
        if r.get("skipped"):
            out.append(f"{what} skipped: {r.get('reason')}")
            continue
        rate = (r.get("heap_bytes") or 0) / max(r.get("seconds") or 0, 1e-9)
        one = alone.get(r.get("parallel_workers"))
        x = ""
        if one and r.get("streams") != 1:
            x = f", x{rate / ((one['heap_bytes'] or 0) / max(one['seconds'], 1e-9)):.1f} one"
        out.append(f"{what} {_f(r.get('seconds'), '{:.2f}')} s, {rate / 1e6:.0f} MB/s{x}, "
                   f"WAL {_f((r.get('wal_bytes') or 0) / 1e6, '{:.0f}')} MB"
                   + ("" if r.get("ok") else f" FAILED: {r.get('error')}"))
    # what the server's workers gave one build alone (docs/advise.md, "The
    # server's parallel workers in a restore's builds": a text key's build
    # 1.5x with the default two, by the advice's rule)
    with_w, without = alone.get("default"), alone.get("0")
    if with_w and without and with_w.get("seconds") and without.get("seconds"):
        out.append(f"  one build alone: {without['seconds'] / with_w['seconds']:.2f}x faster "
                   "with the server's default parallel workers than with none")
    checks = [r for r in rows if r.get("op") == "fk_check"]
    if checks:
        out.append("  foreign keys' checks (a table's id to its own key, one a table, at once):")
    for r in checks:
        what = f"  {r.get('streams'):>3} at once:"
        if r.get("skipped"):
            out.append(f"{what} skipped: {r.get('reason')}")
            continue
        out.append(f"{what} {_f(r.get('seconds'), '{:.2f}')} s, "
                   f"{_f(r.get('us_a_unit_median'), '{:.3f}')} us a unit (a row and its "
                   "referenced row) for the median one"
                   + ("" if r.get("ok") else f" FAILED: {r.get('error')}"))
    return out


def report(rows: list[dict[str, Any]]) -> str:
    L: list[str] = []
    si, setup, seed, end = (_first(rows, op) for op in ("sysinfo", "setup", "seed", "end"))
    if si:
        L.append(f"host: {si.get('nproc')} cores ({si.get('cpu_model')}), "
                 f"{_f((si.get('mem_total_kb') or 0) / 1048576)} GiB, {si.get('os')}, kernel "
                 f"{si.get('kernel')}, Python {si.get('python')}; work dir on {si.get('work_fs')}")
    if setup.get("ok"):
        L.append(f"setup: {setup.get('server_version', '')[:60]}; pgparmon "
                 f"{str(setup.get('pgparmon_commit') or '')[:12]}; {setup.get('install_mode', '')}")
    elif setup:
        L.append(f"setup FAILED: {setup.get('error')}")
    if seed:
        L.append(f"seed: {seed.get('ntab')} tables x {seed.get('rows_per_table')} rows, heap "
                 f"{_f((seed.get('heap_bytes') or 0) / 1e6)} MB, indexes "
                 f"{_f((seed.get('index_bytes') or 0) / 1e6)} MB, loaded in "
                 f"{_f(seed.get('load_s'))} s")
    if end:
        L.append(f"end: {end.get('status')} after {_f(end.get('seconds'))} s "
                 f"(budget {_f(end.get('budget_s'), '{:.0f}')} s), {end.get('steps_skipped')} steps "
                 "skipped")
    errors = [r.get("error") for r in rows if r.get("op") == "error"]
    for e in errors:
        L.append(f"ERROR: {e}")
    sc = scores(rows)
    for kind, what in KINDS.items():
        k = sc[kind]
        meas, advs = k["measured"], k["advice"]
        L.append("")
        if not meas and not advs and not k["skipped"]:
            parts = (si.get("knobs") or {}).get("PARTS")
            ran = not isinstance(parts, list) or kind in parts
            L.append(f"{kind}: {'nothing measured' if ran else 'not run (PARTS)'}")
            continue
        csv = _first(rows, "csv") if kind == "copy" else {}
        if csv:
            L.append(f"copy: a CSV of {_f((csv.get('bytes') or 0) / 1e6)} MB, {csv.get('rows')} "
                     f"rows (written in {_f(csv.get('seconds'))} s), into a logged table with "
                     "one index; TRUNCATE and CHECKPOINT before each load"
                     + ("" if csv.get("ok") else f"; the CSV FAILED: {csv.get('stderr') or ''}"))
        L.append(f"{kind} ({what}): measured seconds, median [min-max] of the repeats; each "
                 "advice's predicted seconds and error (* = extrapolated)")
        modes = [a["mode"] for a in advs]
        js = sorted(set(meas) | {j for a in advs for j in (a.get("per_j") or {})
                                 if j in meas or j == a.get("recommended_jobs")})
        head = f"  {'j':>4}  {'measured':<32}"
        if kind in WAL_KINDS:
            head += f"{'WAL MB':>8}  "
        head += "".join(f"{m:<20}" for m in modes)
        L.append(head)
        best = min(meas, key=lambda j: meas[j]["median_s"]) if meas else None
        for j in js:
            m = meas.get(j)
            cell = (f"{m['median_s']:.2f} [{m['min_s']:.2f}-{m['max_s']:.2f}] n={m['n']}"
                    if m else "not measured")
            if j == best:
                cell += " best"
            line = f"  {j:>4}  {cell:<32}"
            if kind in WAL_KINDS:
                line += f"{_f((m or {}).get('wal_bytes', None) and m['wal_bytes'] / 1e6):>8}  "
            for a in advs:
                e = (a.get("per_j") or {}).get(j)
                if not e or e.get("predicted_s") is None:
                    txt = "-"
                else:
                    txt = f"{e['predicted_s']:.2f}{'*' if e.get('extrapolated') else ''}"
                    if "error" in e:
                        txt += f" {e['error'] * 100:+.0f}%"
                if j == a.get("recommended_jobs"):
                    txt += " <rec"
                line += f"{txt:<20}"
            L.append(line.rstrip())
        if advs:
            L.append(f"  {'advice':<10} {'rc':>3} {'took':>7}  {'basis':<8} {'conf':<7} "
                     f"{'rec j':>5} {'pred s':>8} {'meas s':>8} {'best j':>6} {'regret':>12} "
                     f"{'err@rec':>8}  probe s/budget")
            for a in advs:
                regret = "-"
                if a.get("regret") is not None:
                    regret = f"{a['regret']:.3f}" + (" tie" if a.get("tie") else "")
                elif a.get("note"):
                    regret = "not measured"
                L.append(
                    f"  {a['mode']:<10} {_f(a.get('rc'), '{:d}'):>3} {_f(a.get('seconds')):>6}s  "
                    f"{str(a.get('basis') or '-'):<8} {str(a.get('confidence') or '-'):<7} "
                    f"{_f(a.get('recommended_jobs'), '{:d}'):>5} "
                    f"{_f(a.get('predicted_wall_s'), '{:.2f}'):>8} "
                    f"{_f(a.get('measured_at_rec_s'), '{:.2f}'):>8} "
                    f"{_f(a.get('best_jobs'), '{:d}'):>6} {regret:>12} "
                    f"{_f(a.get('error_at_rec') is not None and a['error_at_rec'] * 100, '{:+.0f}%'):>8}"
                    f"  {_f(a.get('probe_s'))}/{_f(a.get('probe_budget_s'))}")
            for a in advs:
                if a.get("probe_steps"):
                    L.append(f"    {a['mode']}: probe {probe_text(a['probe_steps'])}")
            for a in advs:
                if a.get("error") or a.get("warnings"):
                    L.append(f"    {a['mode']}: warnings {a.get('warnings') or []}"
                             + (f"; error: {a['error']}" if a.get("error") else ""))
        for s in k["skipped"]:
            what_s = " ".join(f"{x}={s[x]}" for x in ("mode", "jobs", "repeat") if x in s)
            L.append(f"  skipped: {s.get('op')} {what_s}: {s.get('reason')}")
        failed = [r for r in rows if r.get("op") == kind and not r.get("skipped")
                  and r.get("rc") not in (0, None)]
        for r in failed:
            L.append(f"  FAILED: {kind} -j {r.get('jobs')} repeat {r.get('repeat')}: rc "
                     f"{r.get('rc')}{' (timed out)' if r.get('timed_out') else ''}: "
                     f"{(r.get('stderr') or '').strip().splitlines()[-1:] or ''}")
    L += builds_text(rows)
    return "\n".join(L)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)   # quiet under `| head`
    if not argv or argv[0] in ("-h", "--help") or len(argv) > 2 or \
            (len(argv) == 2 and argv[1] != "--json"):
        print("usage: summary.py results.jsonl [--json]", file=sys.stderr)
        return 2
    try:
        rows = load(argv[0])
    except OSError as exc:
        print(f"summary.py: cannot read {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if not rows:
        print(f"summary.py: {argv[0]} holds no results", file=sys.stderr)
        return 2
    if len(argv) == 2:
        print(json.dumps(scores(rows), indent=1, default=str))
    else:
        print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
