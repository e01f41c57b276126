"""ETA accuracy following `vacuumdb -j 2`, its ANALYZE part above all.

A database of ~--mb MB of heap (bench/common.py's fill_sql: one table of half
the data, six of a twelfth each, fifty small ones), freshly loaded, its
vacuumdb sessions throttled by the cost-based delay (`ALTER ROLE ... SET
vacuum_cost_delay`, as a DBA leaves it set for a role). Each mode runs
``pgparmon run --json --interval 0.5 -- vacuumdb -j 2 ...`` on a freshly
loaded copy (a template clone, its pages not yet hinted, analyzed first so
that relpages holds) and compares, for every sample, the end it predicts
(sample time + eta_s) against the real end (the run's last sample), as a
fraction of the real time left:

- `-Z`: ANALYZE only;
- `-z`: VACUUM (ANALYZE): a heap scan then the sample, the samples in the
  ETA's last part;
- `--analyze-in-stages`: three ANALYZE rounds at targets 1, 10 and the default.

Reported per mode: the ETA at 25/50/75% of the run's wall time, the median
and worst absolute error over the samples of the run's second half (where
the ANALYZE part is), and the run's wall time.

    .venv/bin/python bench/vacuumdb_eta.py [--mb 280] [--delay 2ms] [--runs 2]   # ~3 min
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from datetime import datetime
from pathlib import Path

from common import Cluster, eta_point, fill_sql, machine, median, pgparmon, start_cluster, \
    write_json

OUT = Path(__file__).resolve().parent.parent / "docs" / "bench" / "vacuumdb_eta.json"
MODES = {"analyze-only": ["-Z"], "vacuum-analyze": ["-z"],
         "in-stages": ["--analyze-in-stages"]}
TEMPLATE = "vactpl"


def setup(cl: Cluster, mb: float, delay: str) -> None:
    cl.psql(f"CREATE DATABASE {TEMPLATE}")
    cl.psql(fill_sql(mb / 1000) + " ANALYZE;", dbname=TEMPLATE)
    cl.psql(f"ALTER ROLE {cl.superuser} SET vacuum_cost_delay = '{delay}'")


def one_run(cl: Cluster, mode: str, n: int) -> dict[str, object]:
    db = f"vac{n}"
    cl.psql(f"DROP DATABASE IF EXISTS {db}")
    cl.psql(f"CREATE DATABASE {db} TEMPLATE {TEMPLATE}")
    cl.psql("CHECKPOINT")
    t0 = time.time()
    proc = subprocess.run(pgparmon("run", "--json", "--interval", "0.5", "--",
                                   cl.client("vacuumdb"), "-j", "2", *MODES[mode], "-d", db),
                          env=cl.env(), capture_output=True, text=True, timeout=1800)
    wall = time.time() - t0
    samples = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    samples = [s for s in samples if "job" in s and "ts" in s]
    running = [s for s in samples if s["job"].get("state") == "running"]
    if proc.returncode != 0 or not running:
        raise SystemExit(f"{mode}: rc {proc.returncode}: {proc.stderr[-1500:]}")
    start = datetime.fromisoformat(running[0]["ts"]).timestamp()
    end = datetime.fromisoformat(samples[-1]["ts"]).timestamp()
    points = {f: eta_point(running, start, end, f)[2] for f in (0.25, 0.5, 0.75)}
    errs, trace = [], []
    for s in running:
        ts = datetime.fromisoformat(s["ts"]).timestamp()
        real, eta = end - ts, s["job"]["eta_s"]
        phases = sorted({w["phase"] for w in s["workers"]})
        trace.append([round(ts - start, 2), eta, round(real, 2), s["job"]["progress"],
                      s["job"].get("round"), phases])
        if eta is not None and ts - start >= (end - start) / 2 and real > 1.0:
            errs.append((eta - real) / real)
    return {"mode": mode, "wall_s": round(wall, 2), "job_s": round(end - start, 2),
            "samples": len(running), "eta_at": points,
            "second_half_median_error": round(median([abs(e) for e in errs]), 4) if errs
            else None,
            "second_half_median_signed": round(median(errs), 4) if errs else None,
            "second_half_worst": round(max(errs, key=abs), 4) if errs else None,
            "trace": trace}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=280.0)
    ap.add_argument("--delay", default="2ms")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", type=Path, default=OUT)
    ns = ap.parse_args()
    # autovacuum off: the template stays as a load leaves it (no hint bits, no
    # visibility map), as vacuumdb finds a database just restored
    cl = start_cluster(settings={"fsync": "off", "shared_buffers": "128MB", "autovacuum": "off"})
    runs = []
    try:
        setup(cl, ns.mb, ns.delay)
        n = 0
        for _ in range(ns.runs):
            for mode in ns.modes.split(","):
                n += 1
                r = one_run(cl, mode, n)
                print(json.dumps({k: v for k, v in r.items() if k != "trace"}), flush=True)
                runs.append(r)
    finally:
        cl.stop()
    write_json(ns.out, {"machine": machine(), "mb": ns.mb, "delay": ns.delay,
                        "when": datetime.now().isoformat(timespec="seconds"), "runs": runs})


if __name__ == "__main__":
    main()
