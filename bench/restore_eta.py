"""ETA accuracy of a restore, on two shapes that test what the ETA knows
of a restore's builds.

- `--shape steps`: a restore in steps from one shell (`pg_restore
  --section=pre-data ... && pg_restore -j N --section=data ... &&
  pg_restore -j N --section=post-data ...`) of one big table with no
  index and four of a quarter of it, each with a primary key and an index
  on a text column. The post-data step starts when the data step has
  ended: the smaller tables' builds cannot run in the idle streams of the
  big load's tail.
- `--shape widths`: `pg_restore -j N` of two tables, one of narrow rows
  (a primary key and an index on an int column) and one of 4 kB rows
  stored out of line, twice its bytes (a primary key): a build sorts rows,
  so the wide table's key costs a few hundredths of its load, not the
  share of it a narrow table's build costs.
- `--shape many-small`: `pg_restore -j N` of 400 tables of 20,000 rows
  (x scale) each, no index: each loads in tens of milliseconds, most of
  them between two samples.
- `--shape large-objects`: `pg_restore -j N` of a table of narrow rows
  with a primary key and 20,000 large objects of 2 kB (x scale), which
  pg_restore writes one by one in one worker (one archive item before
  pg_dump 17): their time is the run's tail, apart from the table's.

Each run is `pgparmon run --json --record -- ...`; for the samples nearest
to 25%, 50% and 75% of the run's wall time (measured outside pgparmon),
the ETA shown then is compared with the real time left.  Each run's
recording is kept (`--keep DIR`), with its start and end; then `--replay
DIR` scores the same runs again through the code at hand (the samples a
Monitor derives from each recording), so that two versions of the ETA are
compared on the same runs.

    .venv/bin/python bench/restore_eta.py --shape steps --runs 3 --scale 3 --keep /tmp/se
    .venv/bin/python bench/restore_eta.py --replay /tmp/se

`--format c` restores a custom-format archive (one file, `pg_dump -Fc`)
of the shape instead (results in `restore_eta_SHAPE_custom.json`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from common import machine, median, pgparmon, start_cluster, write_json

FRACTIONS = (0.25, 0.5, 0.75)


def widths_sql(scale: float) -> str:
    narrow = int(1_500_000 * scale)
    wide = int(50_000 * scale)
    return "\n".join([
        f"CREATE TABLE narrow AS SELECT g AS id, ((g::bigint * 7919) % 100003)::int AS b, "
        f"md5(g::text) AS a "
        f"FROM generate_series(1, {narrow}) g;",
        "ALTER TABLE narrow ADD PRIMARY KEY (id);",
        "CREATE INDEX narrow_b ON narrow (b);",
        "CREATE TABLE wide (id int, t text);",
        "ALTER TABLE wide ALTER COLUMN t SET STORAGE EXTERNAL;",
        f"INSERT INTO wide SELECT g, (SELECT string_agg(md5((g * 131 + k)::text), '') "
        f"FROM generate_series(1, 120) k) FROM generate_series(1, {wide}) g;",
        "ALTER TABLE wide ADD PRIMARY KEY (id);",
        "ANALYZE;"])


def large_objects_sql(scale: float) -> str:
    rows = int(1_000_000 * scale)
    objects = int(20_000 * scale)
    return "\n".join([
        f"CREATE TABLE narrow AS SELECT g AS id, md5(g::text) AS a "
        f"FROM generate_series(1, {rows}) g;",
        "ALTER TABLE narrow ADD PRIMARY KEY (id);",
        f"SELECT count(lo_from_bytea(0, convert_to(repeat(md5(g::text), 64), 'UTF8'))) "
        f"FROM generate_series(1, {objects}) g;",
        "ANALYZE;"])


def many_small_sql(scale: float) -> str:
    rows = int(20_000 * scale)
    return "\n".join([f"CREATE TABLE t{i} AS SELECT g AS id, md5(g::text) AS v "
                      f"FROM generate_series(1, {rows}) g;" for i in range(400)] + ["ANALYZE;"])


def steps_sql(scale: float) -> str:
    big = int(2_000_000 * scale)
    side = big // 4
    parts = [f"CREATE TABLE big AS SELECT g AS id, md5(g::text) AS a, md5((g*7)::text) AS b "
             f"FROM generate_series(1, {big}) g;"]
    for i in range(4):
        parts.append(f"CREATE TABLE side_{i} AS SELECT g AS id, md5((g*{i + 3})::text) AS a "
                     f"FROM generate_series(1, {side}) g;")
        parts.append(f"ALTER TABLE side_{i} ADD PRIMARY KEY (id);")
        parts.append(f"CREATE INDEX side_{i}_a ON side_{i} (a);")
    parts.append("ANALYZE;")
    return "\n".join(parts)


def _ts(s: dict[str, Any]) -> float:
    return datetime.fromisoformat(s["ts"]).timestamp()


def score(samples: list[dict[str, Any]], t0: float, end: float) -> dict[str, Any]:
    """The ETA shown at the samples nearest to each fraction of the run,
    against the real time left."""
    total = end - t0
    shown = [s for s in samples if s["job"]["eta_s"] is not None
             and s["job"]["state"] == "running"]
    points = {}
    for frac in FRACTIONS:
        want = t0 + total * frac
        s = min(shown, key=lambda s: abs(_ts(s) - want))
        real = end - _ts(s)
        points[str(frac)] = {"at_s": round(_ts(s) - t0, 2), "step": s["job"].get("step"),
                             "eta_s": s["job"]["eta_s"], "real_remaining_s": round(real, 2),
                             "error": round((s["job"]["eta_s"] - real) / real, 4)}
    return {"total_s": round(total, 2), "points": points}


def one_run(cl: Any, archive: Path, jobs: int, rec: Path, shape: str) -> dict[str, Any]:
    cl.psql("DROP DATABASE IF EXISTS restore_r")
    cl.psql("CREATE DATABASE restore_r")
    pgr = shlex.quote(cl.client("pg_restore"))
    tail = f"-d restore_r {shlex.quote(str(archive))}"
    if shape == "steps":
        cmd = ["sh", "-c", f"{pgr} --section=pre-data {tail} && "
                           f"{pgr} -j {jobs} --section=data {tail} && "
                           f"{pgr} -j {jobs} --section=post-data {tail}"]
    else:
        cmd = [cl.client("pg_restore"), "-j", str(jobs), "-d", "restore_r", str(archive)]
    t0 = time.time()
    res = subprocess.run(pgparmon("run", "--json", "--interval", "0.5", "--record", str(rec),
                                  "--", *cmd),
                         capture_output=True, text=True, env=cl.env())
    t_end = time.time()
    if res.returncode != 0:
        raise SystemExit(res.stderr[-2000:])
    samples = [json.loads(x) for x in res.stdout.splitlines()
               if x.startswith("{") and '"pgparmon.sample/1"' in x]
    # the job's own end: the outside clock, less the monitor's exit
    # latency (under one interval)
    end = min(t_end, max(_ts(s) for s in samples) + 0.5)
    steps = sorted({s["job"].get("step") or 1 for s in samples})
    return {"t0": t0, "end": end, "steps_seen": steps, **score(samples, t0, end)}


def replayed(rec: Path) -> list[dict[str, Any]]:
    """Every sample the code at hand derives from a recording."""
    from pgparmon.playback import derive_all

    return [s.to_json() for s in derive_all(str(rec))[0]]


def summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {f: median([abs(r["points"][f]["error"]) for r in runs])
            for f in (str(x) for x in FRACTIONS)}


def replay_dir(d: Path, out: Path | None) -> None:
    kept = json.loads((d / "runs.json").read_text())
    runs = []
    for i, r in enumerate(kept["runs"]):
        runs.append({**score(replayed(d / f"run{i + 1}.rec"), r["t0"], r["end"])})
        pts = runs[-1]["points"]
        print(f"run {i + 1}: " + ", ".join(f"at {float(f):.0%}: ETA {p['eta_s']} s, real "
                                           f"{p['real_remaining_s']} s ({p['error']:+.1%})"
                                           for f, p in pts.items()), flush=True)
    errs = summary(runs)
    print("median |error| (replayed): " +
          ", ".join(f"at {float(f):.0%}: {e:.1%}" for f, e in errs.items()))
    if out is not None:
        write_json(out, {"benchmark": "restore_eta (replay)", "machine": machine(),
                         "recordings": str(d), "runs": runs, "median_abs_error": errs})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=("steps", "widths", "large-objects", "many-small"),
                    default="steps")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--keep", help="a folder to keep each run's recording in")
    ap.add_argument("--replay", help="score the recordings kept in this folder again")
    ap.add_argument("--format", choices=("d", "c"), default="d",
                    help="the archive's: -Fd (pg_dump -j 2) or -Fc (one file)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.replay:
        replay_dir(Path(a.replay), Path(a.out) if a.out else None)
        return
    out = Path(a.out or Path(__file__).resolve().parent.parent / "docs" / "bench" /
               f"restore_eta_{a.shape}{'_custom' if a.format == 'c' else ''}.json")
    keep = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="pgparmon-steps-eta-"))
    keep.mkdir(parents=True, exist_ok=True)
    cl = start_cluster(prefix="pgparmon-bench-")
    work = Path(tempfile.mkdtemp(prefix="pgparmon-bench-out-"))
    if os.geteuid() == 0:
        shutil.chown(work, "postgres")
    try:
        cl.psql("CREATE DATABASE steps")
        sql = {"steps": steps_sql, "widths": widths_sql, "many-small": many_small_sql,
               "large-objects": large_objects_sql}[a.shape]
        cl.psql(sql(a.scale), dbname="steps")
        archive = work / "a"
        how = ["-Fd", "-j", "2"] if a.format == "d" else ["-Fc"]
        subprocess.run([cl.client("pg_dump"), *how, "-f", str(archive), "steps"],
                       env=cl.env(), check=True)
        runs = []
        for i in range(a.runs):
            r = one_run(cl, archive, a.jobs, keep / f"run{i + 1}.rec", a.shape)
            runs.append(r)
            pts = r["points"]
            print(f"run {i + 1}: {r['total_s']} s, steps {r['steps_seen']}; " +
                  ", ".join(f"at {float(f):.0%}: ETA {p['eta_s']} s, real "
                            f"{p['real_remaining_s']} s ({p['error']:+.1%})"
                            for f, p in pts.items()), flush=True)
        write_json(keep / "runs.json", {"runs": runs})
        errs = summary(runs)
        write_json(out, {"benchmark": "restore_eta", "shape": a.shape, "machine": machine(),
                         "jobs": a.jobs, "format": a.format,
                         "scale": a.scale, "runs": runs, "median_abs_error": errs})
        print("median |error|: " + ", ".join(f"at {float(f):.0%}: {e:.1%}"
                                             for f, e in errs.items()))
        print(f"recordings kept in {keep}")
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
