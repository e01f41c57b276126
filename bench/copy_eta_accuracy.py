"""ETA accuracy and cost for a COPY file loader followed as a COPY job.

Two CSV files, one 3x the size of the other (so the end of the load has one
stream alone), are loaded in parallel by a shell script running one
``psql -c "\\copy t FROM 'FILE' WITH (FORMAT csv)"`` per file into a logged
table with one index; the table is truncated and a CHECKPOINT taken before
each load.

1. ETA: ``pgparmon run --json --interval 0.5 -- sh load.sh``, --runs times.
   The script writes the time each file's load ended and the time the whole
   load ended (``date +%s.%N``), so the real end is the loader's, not the
   monitor's. For the sample nearest to 25%, 50% and 75% of the wall time
   the ETA shown then is compared with the real time left. The progress shown
   is reported beside the wall fraction and beside an estimate of the bytes
   loaded (each file taken as read at a constant rate from the start to its
   own end): information only, the ETA error is the figure.
2. Cost: the same load with and without ``pgparmon attach --interval 1``
   beside it, --pairs pairs (the order inside each pair alternates), the
   median ratio of wall times, and the monitor's own CPU (user + system of
   the attach process, from wait4 when it exits; its server session's CPU
   read from /proc while the load runs).

    .venv/bin/python bench/copy_eta_accuracy.py [--runs 3] [--pairs 3] [--mb 200]
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

import psutil
from common import (
    Cluster,
    eta_point,
    machine,
    make_csv,
    median,
    pgparmon,
    start_cluster,
    write_json,
)

OUT = Path(__file__).resolve().parent.parent / "docs" / "bench" / "copy_eta_accuracy.json"
DB = "copyeta"
FRACS = ("0.25", "0.5", "0.75")


def write_script(cl: Cluster, work: Path, files: dict[str, Path]) -> Path:
    psql = shlex.join([cl.client("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
                       "-h", str(cl.sockdir), "-p", str(cl.port), "-U", cl.superuser,
                       "-d", DB])
    lines = ["#!/bin/sh", "set -e"]
    for name, path in files.items():
        copy = f"\\copy t FROM '{path}' WITH (FORMAT csv)"
        end = shlex.quote(str(work / f"{name}.end"))
        lines.append(f"( {psql} -c {shlex.quote(copy)} && date +%s.%N > {end} ) &")
    lines += ["wait", f"date +%s.%N > {shlex.quote(str(work / 'all.end'))}"]
    script = work / "load.sh"
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return script


def reset(cl: Cluster) -> None:
    cl.psql("TRUNCATE t; CHECKPOINT", dbname=DB)


def ends(work: Path, names: list[str]) -> dict[str, float]:
    return {n: float((work / f"{n}.end").read_text().strip()) for n in [*names, "all"]}


def eta_run(cl: Cluster, work: Path, script: Path, sizes: dict[str, int]) -> dict[str, object]:
    reset(cl)
    for p in work.glob("*.end"):
        p.unlink()
    t0 = time.time()
    res = subprocess.run(pgparmon("run", "--json", "--interval", "0.5", "--", "sh", str(script)),
                         capture_output=True, text=True, env=cl.env())
    if res.returncode != 0:
        raise SystemExit(f"pgparmon run exited {res.returncode}: {res.stderr}")
    samples = [json.loads(x) for x in res.stdout.splitlines()
               if x.startswith("{") and '"pgparmon.sample/1"' in x]
    e = ends(work, list(sizes))
    end = e["all"]
    total = end - t0
    total_bytes = sum(sizes.values())

    def est_loaded(ts: float) -> float:
        # each file read at a constant rate from t0 to its own end
        return sum(sz * min(1.0, max(0.0, (ts - t0) / (e[n] - t0))) for n, sz in sizes.items())

    running = [s for s in samples if s["job"]["state"] == "running"]
    points = {}
    for frac in FRACS:
        s, ts, points[frac] = eta_point(running, t0, end, float(frac))
        points[frac].update(wall_fraction=round((ts - t0) / total, 4),
                            est_bytes_fraction=round(est_loaded(ts) / total_bytes, 4))
    bases = sorted({s["job"].get("progress_basis") for s in running} - {None})
    return {"total_s": round(total, 2),
            "file_end_s": {n: round(e[n] - t0, 2) for n in sizes},
            "samples": len(samples), "progress_basis": bases, "points": points,
            "eta_trace": [[round(datetime.fromisoformat(s["ts"]).timestamp() - t0, 2),
                           s["job"]["eta_s"], s["job"]["progress"]] for s in running]}


def load_once(cl: Cluster, script: Path, attach: bool,
              cpu: list[tuple[float, int, float | None]]) -> float:
    reset(cl)
    t0 = time.perf_counter()
    load = subprocess.Popen(["sh", str(script)], env=cl.env(), stdout=subprocess.DEVNULL)
    mon = log = None
    if attach:
        log = tempfile.TemporaryFile()
        mon = subprocess.Popen(pgparmon("attach", "-h", str(cl.sockdir), "-p", str(cl.port),
                                        "-U", cl.superuser, "-d", DB, "--interval", "1",
                                        "--json", "--wait", "10"),
                               stdout=log, stderr=subprocess.DEVNULL,
                               env={k: v for k, v in os.environ.items()
                                    if not k.startswith("PG")})
    backend_cpu = None
    if mon is not None:
        # the monitor's server session: its CPU is the server's, not in the
        # monitor's rusage; found once by application_name, then read from
        # /proc until the load ends (psutil: a few microseconds a read)
        proc = None
        while proc is None and load.poll() is None:
            pid = cl.psql("SELECT pid FROM pg_stat_activity WHERE application_name = "
                          "'pgparmon' LIMIT 1").strip()
            if pid:
                proc = psutil.Process(int(pid))
            else:
                time.sleep(0.3)
        while proc is not None and load.poll() is None:
            try:
                ct = proc.cpu_times()
                backend_cpu = ct.user + ct.system
            except psutil.Error:
                break
            time.sleep(0.5)
    if load.wait() != 0:
        raise SystemExit("load failed")
    wall = time.perf_counter() - t0
    if mon is not None and log is not None:
        _, status, ru = os.wait4(mon.pid, 0)
        log.seek(0)
        n = log.read().count(b'"pgparmon.sample/1"')
        log.close()
        cpu.append((ru.ru_utime + ru.ru_stime, n, backend_cpu))
    return wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--mb", type=float, default=200.0, help="both files together")
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args()
    import compileall  # as an installed wheel is (this machine sets PYTHONDONTWRITEBYTECODE)

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "pgparmon"), quiet=1)
    cl = start_cluster(prefix="pgparmon-bench-copyeta-")
    work = Path(tempfile.mkdtemp(prefix="pgparmon-bench-copyeta-"))
    try:
        cl.psql(f"CREATE DATABASE {DB}")
        cl.psql("CREATE TABLE t (id int, name text, amount numeric, note text); "
                "CREATE INDEX ON t (name)", dbname=DB)
        files = {"small": work / "small.csv", "big": work / "big.csv"}
        rows = (make_csv(files["small"], a.mb / 4, seed=1, header=False)
                + make_csv(files["big"], a.mb * 3 / 4, seed=2, header=False))
        sizes = {n: p.stat().st_size for n, p in files.items()}
        script = write_script(cl, work, files)
        load_once(cl, script, False, [])  # warm the cache
        n = cl.psql("SELECT count(*) FROM t", dbname=DB).strip()
        assert int(n) == rows, (n, rows)
        load_avg = [os.getloadavg()]
        runs = []
        for i in range(a.runs):
            r = eta_run(cl, work, script, sizes)
            runs.append(r)
            h = r["points"]["0.5"]  # type: ignore[index]
            print(f"run {i + 1}: {r['total_s']}s (small file ends at "
                  f"{r['file_end_s']['small']}s); at half: ETA {h['eta_s']}s, real "  # type: ignore[index]
                  f"{h['real_remaining_s']}s, error {h['signed_error']}, progress "
                  f"{h['progress']} (wall {h['wall_fraction']}, est. bytes "
                  f"{h['est_bytes_fraction']})", flush=True)
        load_avg.append(os.getloadavg())
        # a point with no ETA yet (still measuring the read rate) counts as missing
        got = {f: [r["points"][f]["error"] for r in runs  # type: ignore[index]
                   if r["points"][f]["error"] is not None] for f in FRACS}  # type: ignore[index]
        errs = {f: median(v) if v else None for f, v in got.items()}
        cpu: list[tuple[float, int, float | None]] = []
        pairs = []
        for i in range(a.pairs):
            order = [False, True] if i % 2 == 0 else [True, False]
            res = {att: 0.0 for att in order}
            for att in order:
                res[att] = load_once(cl, script, att, cpu)
            pairs.append({"without_s": round(res[False], 3), "with_s": round(res[True], 3),
                          "ratio": round(res[True] / res[False], 4),
                          "monitor_cpu_s": round(cpu[-1][0], 3), "monitor_samples": cpu[-1][1],
                          "monitor_backend_cpu_s": cpu[-1][2]})
            print(f"pair {i + 1}: without {res[False]:.2f}s with {res[True]:.2f}s ratio "
                  f"{res[True] / res[False]:.3f}; monitor CPU {cpu[-1][0]:.2f}s over "
                  f"{cpu[-1][1]} samples, its server session {cpu[-1][2]}s", flush=True)
        load_avg.append(os.getloadavg())
        ratio = median([p["ratio"] for p in pairs])
        cpu_s = median([c for c, _, _ in cpu])
        be = [b for _, _, b in cpu if b is not None]
        doc = {"benchmark": "copy_eta_accuracy", "machine": machine(),
               "date": datetime.now().isoformat(timespec="seconds"),
               "mb": a.mb, "rows": rows, "file_bytes": sizes,
               "load_average_before_eta_after_eta_after_pairs": load_avg,
               "runs": runs, "median_error": errs,
               "points_without_eta": {f: a.runs - len(v) for f, v in got.items()},
               "median_total_s": median([r["total_s"] for r in runs]),  # type: ignore[misc]
               "pairs": pairs, "median_ratio": round(ratio, 4),
               "median_without_s": round(median([p["without_s"] for p in pairs]), 3),
               "median_with_s": round(median([p["with_s"] for p in pairs]), 3),
               "monitor_cpu_s_median": round(cpu_s, 3),
               "monitor_cpu_ms_per_sample_median": round(
                   median([c / n * 1000 for c, n, _ in cpu if n]), 2) if cpu else None,
               "monitor_backend_cpu_s_median": round(median(be), 3) if be else None,
               "target": "ETA within 20% at 0.5"}
        write_json(Path(a.out), doc)
        print("median relative ETA error: " +
              ", ".join(f"at {float(f):.0%}: " + ("no ETA" if e is None else f"{e:.1%}")
                        for f, e in errs.items()))
        print(f"median ratio with/without attach: {ratio:.4f}; monitor CPU {cpu_s:.2f} s per "
              f"load")
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
