"""ETA accuracy on a dump whose run time one table dominates.

Runs `pgparmon run --json -- pg_dump -Fd -j N` several times on a database
with one dominant table and some smaller ones; for the sample nearest to
half the elapsed run (also 25% and 75%) compares the ETA given then with
the real remaining time (the job's end measured outside pgparmon).
Target: within 20% at half the run.

    .venv/bin/python bench/eta_accuracy.py [--runs 3] [--jobs 2] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

from common import machine, median, pgparmon, start_cluster, write_json


def dominant_sql(scale: float) -> str:
    big = int(2_400_000 * scale)
    parts = [f"CREATE TABLE dominant AS SELECT g AS id, md5(g::text) AS a, md5((g*7)::text) AS b "
             f"FROM generate_series(1, {big}) g;"]
    for i in range(8):
        n = int(big * 0.03 * (1 + i % 3))
        parts.append(f"CREATE TABLE side_{i} AS SELECT g AS id, md5(g::text) AS a "
                     f"FROM generate_series(1, {n}) g;")
    parts.append("ANALYZE;")
    return "\n".join(parts)


def one_run(cl, jobs: int, out: Path) -> dict[str, object]:  # type: ignore[no-untyped-def]
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.time()
    res = subprocess.run(pgparmon("run", "--json", "--interval", "0.5", "--",
                                  cl.client("pg_dump"), "-Fd", "-j", str(jobs), "-f", str(out),
                                  "eta"), capture_output=True, text=True, env=cl.env())
    t_end = time.time()
    if res.returncode != 0:
        raise SystemExit(res.stderr)
    samples = [json.loads(x) for x in res.stdout.splitlines()
               if x.startswith("{") and '"pgparmon.sample/1"' in x]
    # the job's own end: the summary's wall_s is pgparmon's view; use the
    # outside clock, minus the monitor's exit latency (< one interval)
    last_running = max(datetime.fromisoformat(s["ts"]).timestamp() for s in samples)
    end = min(t_end, last_running + 0.5)
    total = end - t0
    points = {}
    for frac in (0.25, 0.5, 0.75):
        want = t0 + total * frac
        s = min((s for s in samples if s["job"]["eta_s"] is not None and
                 s["job"]["state"] == "running"),
                key=lambda s: abs(datetime.fromisoformat(s["ts"]).timestamp() - want))
        ts = datetime.fromisoformat(s["ts"]).timestamp()
        real = end - ts
        points[str(frac)] = {"at_s": round(ts - t0, 2), "eta_s": s["job"]["eta_s"],
                             "real_remaining_s": round(real, 2),
                             "error": round(abs(s["job"]["eta_s"] - real) / real, 4),
                             "progress": s["job"]["progress"]}
    return {"total_s": round(total, 2), "points": points}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" /
                                         "bench" / "eta_accuracy.json"))
    a = ap.parse_args()
    cl = start_cluster(prefix="pgparmon-bench-")
    work = Path(tempfile.mkdtemp(prefix="pgparmon-bench-out-"))
    if os.geteuid() == 0:
        shutil.chown(work, "postgres")
    try:
        cl.psql("CREATE DATABASE eta")
        cl.psql(dominant_sql(a.scale), dbname="eta")
        runs = []
        for i in range(a.runs):
            r = one_run(cl, a.jobs, work / "d")
            runs.append(r)
            half = r["points"]["0.5"]  # type: ignore[index]
            print(f"run {i + 1}: {r['total_s']}s; at half: ETA {half['eta_s']}s, real "
                  f"{half['real_remaining_s']}s, error {half['error']:.1%}", flush=True)
        errs = {f: median([r["points"][f]["error"] for r in runs])  # type: ignore[index]
                for f in ("0.25", "0.5", "0.75")}
        doc = {"benchmark": "eta_accuracy", "machine": machine(), "jobs": a.jobs,
               "scale": a.scale, "runs": runs, "median_error": errs, "target": "<= 0.20 at 0.5"}
        write_json(Path(a.out), doc)
        print("median relative ETA error: " +
              ", ".join(f"at {float(f):.0%}: {e:.1%}" for f, e in errs.items()))
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
