"""How good is `pgparmon advise --copy`? Its advice against a real sweep.

A CSV file (single-line records, a header) of --mb MB is loaded into a
logged table with one index by J parallel COPY streams, the way the advice's
command does it (``tail -n +2 FILE | split -n r/J --filter='psql -c "\\copy
... FROM STDIN"'``), for J in --jobs, --repeats times with the order of J
interleaved; the table is truncated and a CHECKPOINT taken before each load.
The advice is asked static (no probe) and probed (--probe-seconds, 8 by
default).

- regret: measured time at the recommended J / the best measured time;
- prediction error: |predicted - measured| / measured at the recommended J;
  `errors` in the JSON: (predicted - measured) / measured at every J.

Raw timings go to docs/bench/advise_copy.json; a markdown table is printed.

    .venv/bin/python bench/advise_copy_accuracy.py                 # ~2 min on 2 cores
    .venv/bin/python bench/advise_copy_accuracy.py --mb 10 --repeats 1   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from common import Cluster, machine, make_csv, median, pgparmon, start_cluster, write_json
from copysplit import split_copy_cmd

OUT = Path(__file__).resolve().parent.parent / "docs" / "bench" / "advise_copy.json"
DB = "copybench"


def load_cmd(c: Cluster, path: Path, j: int) -> str:
    return split_copy_cmd([str(c.client("psql")), "-X", "-q", "-v", "ON_ERROR_STOP=1",
                           "-h", str(c.sockdir), "-p", str(c.port), "-U", c.superuser, "-d", DB],
                          str(path), j, "items")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=40.0)
    ap.add_argument("--jobs", default=",".join(str(j) for j in range(1, (os.cpu_count() or 2)
                                                                        + 2)))
    ap.add_argument("--repeats", type=int, default=2)
    # 8 s: the plan's first two steps and the step into a logged table
    # (docs/advise.md, "COPY loads"); 6 s was too short for the latter
    ap.add_argument("--probe-seconds", type=float, default=8.0)
    a = ap.parse_args()
    jobs = [int(x) for x in a.jobs.split(",")]
    cl = start_cluster(prefix="pgparmon-bench-copy-")
    tmp = Path(tempfile.mkdtemp(prefix="pgparmon-bench-copy-"))
    try:
        cl.psql(f"CREATE DATABASE {DB}")
        cl.psql("CREATE TABLE items (id int, name text, amount numeric, note text); "
                "CREATE INDEX ON items (name)", dbname=DB)
        path = tmp / "items.csv"
        rows = make_csv(path, a.mb)
        base = ["-h", str(cl.sockdir), "-p", str(cl.port), "-U", cl.superuser, "-d", DB,
                "--copy", str(path), "--table", "items", "--header",
                "--max-jobs", str(max(jobs)), "--json"]
        advice: dict[str, dict[str, object]] = {}
        for mode, extra in (("static", []), ("probe", ["--probe-seconds",
                                                       str(a.probe_seconds)])):
            r = subprocess.run(pgparmon("advise", *base, *extra), capture_output=True,
                               text=True, check=True)
            advice[mode] = json.loads(r.stdout)
        times: dict[int, list[float]] = {j: [] for j in jobs}
        for rep in range(a.repeats):
            order = jobs if rep % 2 == 0 else list(reversed(jobs))
            for j in order:
                cl.psql("TRUNCATE items; CHECKPOINT", dbname=DB)
                t0 = time.perf_counter()
                subprocess.run(load_cmd(cl, path, j), shell=True, check=True,
                               stdout=subprocess.DEVNULL)
                times[j].append(time.perf_counter() - t0)
        n = cl.psql("SELECT count(*) FROM items", dbname=DB).strip()
        assert int(n) == rows, (n, rows)
        med = {j: median(v) for j, v in times.items()}
        best = min(med.values())
        results = {}
        for mode, doc in advice.items():
            rec = int(doc["recommended_jobs"])  # type: ignore[call-overload]
            pred = float(doc["predicted_wall_s"])  # type: ignore[arg-type]
            m = med.get(rec)
            preds = {int(p["jobs"]): float(p["wall_s"])  # type: ignore[index]
                     for p in doc["predictions"]}  # type: ignore[union-attr]
            results[mode] = {
                "recommended": rec, "predicted_s": pred, "measured_s": m,
                "errors": {j: round(preds[j] / med[j] - 1, 3) for j in jobs if j in preds},
                "regret": None if m is None else round(m / best, 3),
                "prediction_error": None if m is None else round(abs(pred - m) / m, 3),
                "probe_s": (doc.get("probe") or {}).get("seconds"),  # type: ignore[union-attr]
            }
        doc_out = {"machine": machine(), "mb": a.mb, "rows": rows, "jobs": jobs,
                   "repeats": a.repeats, "measured_s": times, "median_s": med,
                   "load_average": os.getloadavg(), "results": results,
                   "advice": advice}
        write_json(OUT, doc_out)
        print(f"{a.mb:g} MB CSV, {rows} rows, one index, {machine()}, load average "
              f"{os.getloadavg()[0]:.2f}")
        print("| J | " + " | ".join(str(j) for j in jobs) + " |")
        print("|---|" + "---|" * len(jobs))
        print("| median s | " + " | ".join(f"{med[j]:.2f}" for j in jobs) + " |")
        print()
        print("| advice | recommended | predicted | measured | regret | prediction error | "
              "error at each J |")
        print("|---|---|---|---|---|---|---|")
        for mode, r in results.items():
            errs = " ".join(f"J={j}: {e:+.0%}" for j, e in r["errors"].items())
            print(f"| {mode} | {r['recommended']} | {r['predicted_s']:.2f} s | "
                  f"{r['measured_s'] if r['measured_s'] is None else round(r['measured_s'], 2)}"
                  f" s | {r['regret']} | {r['prediction_error']} | {errs} |")
    finally:
        cl.stop()
        for p in tmp.iterdir():
            p.unlink()
        tmp.rmdir()


if __name__ == "__main__":
    main()
