"""How fast `pgparmon attach --json` gets going, and what that costs: the
wall time from launch to its first sample on stdout, and its CPU (user +
system) by then (imports, discovery, the plan, the first sample), attached
to a real `pg_dump -Fd -j 2` of the demo database, repeated.

    .venv/bin/python bench/attach_startup.py                     # ~1 min
    .venv/bin/python bench/attach_startup.py --repeats 7 --profile

--profile runs one more attach under cProfile and prints its top entries
(cumulative) up to the first sample. Raw results: docs/bench/attach_startup.json.
"""

from __future__ import annotations

import argparse
import os
import pstats
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

from pgparmon.demo import sample_sql

REPO = Path(__file__).resolve().parent.parent
PY = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv/bin/python").exists() \
    else sys.executable


def once(cl: Any, out: Path, profile: Path | None = None) -> dict[str, float]:
    shutil.rmtree(out, ignore_errors=True)
    dump = subprocess.Popen([cl.client("pg_dump"), "-Fd", "-j", "2", "-f", str(out), "demo"],
                            env=cl.env())
    # the dump's sessions are up: attach as a DBA would, a moment after it started
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        n = cl.psql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg_dump' "
                    "AND state = 'active'").strip()
        if n.isdigit() and int(n) >= 2:
            break
        time.sleep(0.05)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    prof = ["-m", "cProfile", "-o", str(profile)] if profile else []
    t0 = time.perf_counter()
    mon = subprocess.Popen([PY, *prof, "-m", "pgparmon", "attach", "-h", str(cl.sockdir), "-p",
                            str(cl.port), "-U", "postgres", "-d", "demo", "--json",
                            "--interval", "1"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, env=env, text=True)
    assert mon.stdout is not None
    line = mon.stdout.readline()
    first = time.perf_counter() - t0
    c = psutil.Process(mon.pid).cpu_times()
    cpu = c.user + c.system
    mon.terminate() if profile is None else mon.send_signal(2)
    mon.wait(30)
    dump.wait()
    if not line.startswith("{"):
        raise SystemExit(f"attach gave no sample: {line!r}")
    return {"first_sample_s": round(first, 3), "cpu_s": round(cpu, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", type=Path, default=REPO / "docs/bench/attach_startup.json")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pgparmon-startup-"))
    if os.geteuid() == 0:
        shutil.chown(work, "postgres")
    runs = []
    try:
        with start_cluster(prefix="pgparmon-bench-") as cl:
            cl.psql("CREATE DATABASE demo")
            cl.psql(sample_sql(a.scale), dbname="demo")
            for i in range(a.repeats):
                r = once(cl, work / "d")
                runs.append(r)
                print(f"run {i + 1}: first sample {r['first_sample_s']} s, CPU by then "
                      f"{r['cpu_s']} s", file=sys.stderr)
            if a.profile:
                prof = work / "attach.prof"
                once(cl, work / "d", profile=prof)
                pstats.Stats(str(prof)).sort_stats("cumulative").print_stats(40)
                if os.environ.get("KEEP_PROFILE"):
                    shutil.copy(prof, os.environ["KEEP_PROFILE"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc = {"benchmark": "attach_startup", "machine": machine(), "scale": a.scale, "runs": runs,
           "first_sample_s_median": statistics.median(r["first_sample_s"] for r in runs),
           "cpu_s_median": statistics.median(r["cpu_s"] for r in runs)}
    write_json(a.out, doc)
    print(f"first sample after {doc['first_sample_s_median']} s, CPU by then "
          f"{doc['cpu_s_median']} s (medians of {len(runs)}); raw: {a.out}")


if __name__ == "__main__":
    main()
