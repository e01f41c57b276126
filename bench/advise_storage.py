"""`pgparmon advise` on a server whose storage is the limit.

The mission's own question, "the job count where I/O saturates": a server
whose reads are capped (a blkio cgroup v1 throttle on its postmaster and
every backend it forks, on the device of its data directory) with caches
cold before every run, and a dump with no compression (-Z 0), so that
neither compression nor the server's CPU limits it first. At each read
limit this sweeps the real `pg_dump -Fd -j J -Z 0` over J with repeats
(caches dropped before each run) and asks `advise` (static, and a forced
probe, its caches dropped first), then scores as bench/advise_accuracy.py
does, plus:

- knee: the recommended j is no larger than the smallest j whose measured
  time is within 10% of the best (where time is flat, the smallest j);
- storage verdict: the probe's `storage_bound_at` and the `storage_bound`
  warning.

Needs root and cgroup v1's blkio controller (this project's machine kind
has both). Raw results: docs/bench/advise_storage.json.

    .venv/bin/python bench/advise_storage.py --mb 480            # ~6 min
    .venv/bin/python bench/advise_storage.py --limits 20,40 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from advise_accuracy import run_advise, run_timed, score, summarise
from common import machine, median, start_cluster, write_json

REPO = Path(__file__).resolve().parent.parent
BLKIO = Path("/sys/fs/cgroup/blkio")
KNEE = 1.10


def device_of(path: Path) -> str:
    st = os.stat(path)
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


class Throttled:
    """The cluster's postmaster (and so every backend it forks) in a blkio
    cgroup that caps reads from the data directory's device."""

    def __init__(self, cl: Any, read_bps: int) -> None:
        self.cl = cl
        self.cg = BLKIO / f"pgparmon-bench-{os.getpid()}"
        self.cg.mkdir(exist_ok=True)
        (self.cg / "blkio.throttle.read_bps_device").write_text(
            f"{device_of(cl.datadir)} {read_bps}")

    def cold(self) -> None:
        """Caches cold: stop, sync, drop the page cache, start, into the
        cgroup. Twice: one round once left the first reads served from
        memory (seen in tests/test_advise.py)."""
        for _ in range(2):
            self.cl.stop(cleanup=False)
            subprocess.run(["sync"], check=True)
            Path("/proc/sys/vm/drop_caches").write_text("3")
            self.cl.start()
        pm = (self.cl.datadir / "postmaster.pid").read_text().split()[0]
        (self.cg / "cgroup.procs").write_text(pm)

    def close(self) -> None:
        if not self.cg.exists():
            return
        for pid in (self.cg / "cgroup.procs").read_text().split():
            try:
                (BLKIO / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        self.cg.rmdir()


def build(cl: Any, db: str, mb: float) -> dict[str, Any]:
    """Four tables of narrow rows (~100 bytes), mb MB of heap in all."""
    rows = int(mb * 1e6 / 4 / 105)
    cl.psql(f"CREATE DATABASE {db}")
    for i in range(4):
        cl.psql(f"CREATE TABLE t{i} AS SELECT g AS id, md5(g::text) || md5((g + {i})::text) "
                f"AS v FROM generate_series(1, {rows}) g", dbname=db)
    cl.psql("VACUUM ANALYZE", dbname=db)
    pages = int(cl.psql("SELECT sum(relpages) FROM pg_class WHERE relname ~ '^t[0-3]$'",
                        dbname=db).strip())
    return {"db": db, "tables": 4, "rows_each": rows, "heap_bytes": pages * 8192}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limits", default="20,40", help="read limits in MB/s (default 20,40)")
    ap.add_argument("--mb", type=float, default=480.0, help="heap MB to dump (default 480: "
                    "more than an 8 s probe reads at 40 MB/s)")
    ap.add_argument("--jobs", default="1,2,3,4")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--probe-seconds", type=float, default=8.0)
    ap.add_argument("--out", type=Path, default=REPO / "docs/bench/advise_storage.json")
    a = ap.parse_args()
    if os.geteuid() != 0 or not (BLKIO / "cgroup.procs").exists():
        raise SystemExit("needs root and cgroup v1's blkio controller (/sys/fs/cgroup/blkio)")
    limits = [float(x) for x in a.limits.split(",") if x.strip()]
    jobs = [int(x) for x in a.jobs.split(",") if x.strip()]
    cl = start_cluster(prefix="pgparmon-bench-", settings={"shared_buffers": "16MB"})
    work = Path(tempfile.mkdtemp(prefix="pgparmon-bench-out-"))
    shutil.chown(work, "postgres")
    doc: dict[str, Any] = {"benchmark": "advise_storage", "machine": machine(),
                           "started": datetime.now(UTC).isoformat(timespec="seconds"),
                           "settings": {"limits_mb_s": limits, "mb": a.mb, "jobs": jobs,
                                        "repeats": a.repeats, "compress": "none (-Z 0)",
                                        "probe_seconds": a.probe_seconds},
                           "limits": {}, "scenarios": []}
    t_start = time.perf_counter()
    try:
        doc["server"] = cl.psql("SHOW server_version").strip()
        info = build(cl, "storage", a.mb)
        print(f"built {info['heap_bytes'] / 1e6:.0f} MB heap", file=sys.stderr, flush=True)
        for lim in limits:
            th = Throttled(cl, int(lim * 1e6))
            try:
                key = f"{lim:g}MB/s"
                out: dict[str, Any] = {"advice": {}, "runs": []}
                for mode, extra in (("static", []),
                                    (f"probe-{a.probe_seconds:g}s",
                                     ["--probe", "--probe-seconds", f"{a.probe_seconds:g}"])):
                    th.cold()
                    tgt = work / "adv"
                    tgt.mkdir(exist_ok=True)
                    rec = run_advise(cl, ["-d", "storage", "--target", str(tgt), "-Z", "0",
                                          "--max-jobs", str(max(jobs)), *extra])
                    shutil.rmtree(tgt, ignore_errors=True)
                    out["advice"][mode] = [rec]
                    adv = rec["advice"] or {}
                    print(f"  {key} advise {mode}: j={adv.get('recommended_jobs')} "
                          f"storage_bound_at={(adv.get('probe') or {}).get('storage_bound_at')}"
                          f" {rec['error'] or ''}", file=sys.stderr, flush=True)
                times: dict[int, list[float]] = {j: [] for j in jobs}
                for r in range(a.repeats):
                    for j in (jobs if r % 2 == 0 else jobs[::-1]):
                        th.cold()
                        dest = work / "d"
                        shutil.rmtree(dest, ignore_errors=True)
                        t = run_timed([cl.client("pg_dump"), "-Fd", "-Z", "0", "-j", str(j),
                                       "-f", str(dest), "storage"], cl.env(), f"pg_dump -j {j}")
                        times[j].append(t)
                        out["runs"].append({"repeat": r, "jobs": j, "wall_s": round(t, 3)})
                        print(f"  {key} dump j={j} rep {r + 1}: {t:6.2f} s", file=sys.stderr,
                              flush=True)
                shutil.rmtree(work / "d", ignore_errors=True)
                med = {str(j): round(median(ts), 3) for j, ts in times.items()}
                out["median_s"] = med
                best = min(med.values())
                knee = min(int(j) for j, t in med.items() if t <= KNEE * best)
                out["knee_jobs"] = knee
                for mode, recs in out["advice"].items():
                    row = score(f"storage-{key}", "dump", mode, recs, med)
                    adv = recs[0]["advice"] or {}
                    rec_j = adv.get("recommended_jobs")
                    row["knee_jobs"] = knee
                    row["knee_ok"] = isinstance(rec_j, int) and rec_j <= knee
                    row["storage_bound_at"] = (adv.get("probe") or {}).get("storage_bound_at")
                    row["storage_warning"] = any(w.get("code") == "storage_bound"
                                                 for w in adv.get("warnings", []))
                    doc["scenarios"].append(row)
                doc["limits"][key] = out
                write_json(a.out, doc)
            finally:
                th.close()
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)
    doc["summary"] = summarise(doc["scenarios"])
    doc["summary"]["knee_ok"] = all(r.get("knee_ok") for r in doc["scenarios"])
    doc["total_s"] = round(time.perf_counter() - t_start, 1)
    write_json(a.out, doc)
    print("| limit | j=" + " | j=".join(str(j) for j in jobs) + " | knee |")
    print("|---" * (len(jobs) + 2) + "|")
    for key, out in doc["limits"].items():
        print(f"| {key} | " + " | ".join(f"{out['median_s'][str(j)]:.2f}" for j in jobs)
              + f" | {out['knee_jobs']} |")
    print()
    print("| limit | advice | rec j | regret | predicted | error | storage-bound at | "
          "warning | knee ok |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in doc["scenarios"]:
        pred = r.get("predicted_s")
        err = r.get("prediction_error")
        print(f"| {r['shape'][len('storage-'):]} | {r['mode']} | {r.get('recommended_jobs')} | "
              f"{r.get('regret', float('nan')):.3f} | "
              f"{'-' if pred is None else f'{pred:.1f} s'} | "
              f"{'-' if err is None else f'{100 * err:.1f}%'} | {r.get('storage_bound_at')} | "
              f"{'yes' if r.get('storage_warning') else 'no'} | "
              f"{'yes' if r.get('knee_ok') else 'NO'} |")
    print(f"\n{doc['total_s']:.0f} s in all; raw results in {a.out}")


if __name__ == "__main__":
    main()
