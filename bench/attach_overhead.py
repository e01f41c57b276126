"""What attaching costs the job: wall time of the same pg_dump -Fd -j N with
and without `pgparmon attach --interval 1` beside it, in paired runs (the
order inside each pair alternates), median ratio reported. Target < 1.01.

    .venv/bin/python bench/attach_overhead.py [--pairs 7] [--scale 1.0] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from common import machine, median, pgparmon, start_cluster, write_json

from pgparmon.demo import sample_sql


def dump_once(cl, dbname: str, jobs: int, out: Path, attach: bool) -> float:  # type: ignore[no-untyped-def]
    env = cl.env()
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    dump = subprocess.Popen([cl.client("pg_dump"), "-Fd", "-j", str(jobs), "-f", str(out),
                             dbname], env=env)
    mon = None
    if attach:
        mon = subprocess.Popen(pgparmon("attach", "-h", str(cl.sockdir), "-p", str(cl.port),
                                        "-U", "postgres", "-d", dbname, "--interval", "1",
                                        "--json", "--wait", "10"),
                               stdout=(log := tempfile.TemporaryFile()),
                               stderr=subprocess.DEVNULL,
                               env={k: v for k, v in os.environ.items()
                                    if not k.startswith("PG")})
    if dump.wait() != 0:
        raise SystemExit("pg_dump failed")
    wall = time.perf_counter() - t0
    if mon is not None:
        # the monitor's own CPU: what attaching can take from the job at most
        _, _, ru = os.wait4(mon.pid, 0)
        log.seek(0)
        out = log.read()
        log.close()
        samples = out.count(b'"pgparmon.sample/1"')
        CPU.append((ru.ru_utime + ru.ru_stime, samples))
    return wall


CPU: list[tuple[float, int]] = []


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" /
                                         "bench" / "attach_overhead.json"))
    a = ap.parse_args()
    # byte-compile the package as an installed wheel would be (this machine
    # sets PYTHONDONTWRITEBYTECODE, which would make every start compile it)
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "pgparmon"), quiet=1)
    cl = start_cluster(prefix="pgparmon-bench-")
    work = Path(tempfile.mkdtemp(prefix="pgparmon-bench-out-"))
    try:
        cl.psql("CREATE DATABASE bench")
        cl.psql(sample_sql(a.scale), dbname="bench")
        dump_once(cl, "bench", a.jobs, work / "warm", attach=False)  # warm the cache
        pairs = []
        for i in range(a.pairs):
            order = [False, True] if i % 2 == 0 else [True, False]
            res = {}
            for att in order:
                res[att] = dump_once(cl, "bench", a.jobs, work / "d", attach=att)
            pairs.append({"without_s": round(res[False], 3), "with_s": round(res[True], 3),
                          "ratio": round(res[True] / res[False], 4)})
            print(f"pair {i + 1}: without {res[False]:.2f}s with {res[True]:.2f}s "
                  f"ratio {res[True] / res[False]:.3f}", flush=True)
        ratio = median([p["ratio"] for p in pairs])
        cpu_s = median([c for c, _ in CPU])
        per_sample_ms = median([c / n * 1000 for c, n in CPU if n])
        doc = {"benchmark": "attach_overhead", "machine": machine(), "jobs": a.jobs,
               "scale": a.scale, "pairs": pairs, "median_ratio": round(ratio, 4),
               "median_without_s": round(median([p["without_s"] for p in pairs]), 3),
               "median_with_s": round(median([p["with_s"] for p in pairs]), 3),
               "monitor_cpu_s_median": round(cpu_s, 3),
               "monitor_cpu_ms_per_sample_median": round(per_sample_ms, 2),
               "target": "< 1.01"}
        write_json(Path(a.out), doc)
        print(f"median ratio with/without attach: {ratio:.4f} (target < 1.01); monitor CPU "
              f"{cpu_s:.2f} s per run, {per_sample_ms:.1f} ms per sample (start-up included)")
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
