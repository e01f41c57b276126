"""What one sample of `pgparmon attach --json` costs in steady state: the
attach process's CPU (user + system) per sample, start-up left out, while it
follows a real `pg_dump -Fd -j 2 -Z 9` (a database with one large table and
forty small ones, ~30 s on two cores), at the default 1 s interval.

The CPU is read (psutil) when the 3rd sample arrives and again at the last
sample before the dump's end; the figure is the difference over the samples
between, per sample. Repeated; medians. Raw results: docs/bench/json_tick.json.

    .venv/bin/python bench/json_tick.py [--repeats 3]          # ~2 min
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from common import machine, start_cluster, write_json

REPO = Path(__file__).resolve().parent.parent
PY = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv/bin/python").exists() \
    else sys.executable

FILL = ["CREATE TABLE big AS SELECT g, md5(g::text) a, md5((g*3)::text) b "
        "FROM generate_series(1, 5000000) g;"] + \
       [f"CREATE TABLE t{i} AS SELECT g, md5(g::text) a FROM generate_series(1, 20000) g;"
        for i in range(40)]


def once(cl: Any, out: Path, interval: float) -> dict[str, float]:
    shutil.rmtree(out, ignore_errors=True)
    dump = subprocess.Popen([cl.client("pg_dump"), "-Fd", "-j", "2", "-Z", "9", "-f", str(out),
                             "tick"], env=cl.env())
    time.sleep(0.5)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    mon = subprocess.Popen([PY, "-m", "pgparmon", "attach", "-h", str(cl.sockdir), "-p",
                            str(cl.port), "-U", "postgres", "-d", "tick", "--json",
                            "--interval", str(interval)], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, env=env, text=True)
    assert mon.stdout is not None
    proc = psutil.Process(mon.pid)
    n = 0
    start: tuple[int, float] | None = None
    last: tuple[int, float] | None = None
    for line in mon.stdout:
        if '"pgparmon.sample/1"' not in line:
            continue
        n += 1
        c = proc.cpu_times()
        if n == 3:
            start = (n, c.user + c.system)
        elif n > 3 and '"state":"running"' in line:
            last = (n, c.user + c.system)
    mon.wait()
    dump.wait()
    assert start is not None and last is not None and last[0] > start[0], (start, last)
    per = (last[1] - start[1]) / (last[0] - start[0])
    return {"samples": n, "steady_samples": last[0] - start[0],
            "cpu_ms_per_sample": round(1000.0 * per, 2),
            "cpu_percent_of_core": round(100.0 * per / interval, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--out", default=str(REPO / "docs" / "bench" / "json_tick.json"))
    a = ap.parse_args()
    cl = start_cluster(prefix="pgparmon-bench-tick-")
    work = Path(tempfile.mkdtemp(prefix="pgparmon-bench-tick-out-"))
    if os.geteuid() == 0:
        shutil.chown(work, "postgres")
    try:
        cl.psql("CREATE DATABASE tick")
        cl.psql("\n".join(FILL), dbname="tick")
        runs = []
        for i in range(a.repeats):
            r = once(cl, work / "d", a.interval)
            runs.append(r)
            print(f"run {i + 1}: {r['cpu_ms_per_sample']} ms CPU per sample over "
                  f"{r['steady_samples']} samples ({r['cpu_percent_of_core']}% of a core)",
                  flush=True)
        med = statistics.median(r["cpu_ms_per_sample"] for r in runs)
        write_json(Path(a.out), {"benchmark": "json_tick", "machine": machine(),
                                 "interval_s": a.interval, "runs": runs,
                                 "median_cpu_ms_per_sample": med, "target_ms": 4.0})
        print(f"median: {med} ms CPU per sample (target <= 4 ms)")
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
