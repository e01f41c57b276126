"""Shared set-up for the benchmarks: a throwaway cluster with a sample DB."""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pgparmon.cluster import Cluster, start_cluster  # noqa: E402


def pgparmon(*args: str) -> list[str]:
    return [sys.executable, "-m", "pgparmon", *args]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def write_json(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def make_csv(path: Path, mb: float, seed: int = 11, header: bool = True) -> int:
    """A CSV file of about `mb` MB of single-line records (id, name, amount,
    note; the note holds a quoted comma) for COPY loads; returns its rows."""
    rnd = random.Random(seed)
    rows = 0
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        if header:
            w.writerow(["id", "name", "amount", "note"])
        while f.tell() < mb * 1e6:
            for _ in range(10_000):
                w.writerow([rows, f"name{rnd.randrange(10**7)}", f"{rnd.random() * 1e4:.2f}",
                            f"a note, {rnd.random():.8f}"])
                rows += 1
    return rows


def fill_sql(gb: float) -> str:
    """Tables of several sizes, ~`gb` GB of heap in all (rows of ~130 bytes
    on disk): one large one, a few medium ones, many small ones."""
    rows = int(gb * 1e9 / 130)
    parts = [f"CREATE TABLE big AS SELECT g AS id, md5(g::text) AS a, md5((g*7)::text) AS b "
             f"FROM generate_series(1, {rows // 2}) g;"]
    for i in range(6):
        parts.append(f"CREATE TABLE mid_{i} AS SELECT g AS id, md5(g::text) AS a, "
                     f"md5((g*3)::text) AS b FROM generate_series(1, {rows // 12}) g;")
    for i in range(50):
        parts.append(f"CREATE TABLE small_{i} AS SELECT g AS id, md5(g::text) AS a "
                     f"FROM generate_series(1, 2000) g;")
    parts.append("CHECKPOINT;")
    return "\n".join(parts)


def archive_caught_up(cl: Cluster, limit_s: float = 900.0) -> float:
    """Wait until archive_command has archived the WAL written so far (no
    segment left `.ready`): a backup started during the load's archiving
    competes with it for the CPU. Returns the seconds waited."""
    t0 = time.time()
    while time.time() - t0 < limit_s:
        n = cl.psql("SELECT count(*) FROM pg_ls_dir('pg_wal/archive_status') f "
                    "WHERE f LIKE '%.ready'").strip()
        if n == "0":
            return time.time() - t0
        time.sleep(1.0)
    raise SystemExit("archive_command did not catch up")


def eta_point(running: list[dict], t0: float, end: float,
              frac: float) -> tuple[dict, float, dict[str, object]]:
    """The running sample nearest `frac` of the run's wall time (t0 to the
    real end): (the sample, its time, the ETA it gave against the real time
    left: absolute and signed error, a fraction of the real time left)."""
    from datetime import datetime

    want = t0 + (end - t0) * frac
    s = min(running, key=lambda s: abs(datetime.fromisoformat(s["ts"]).timestamp() - want))
    ts = datetime.fromisoformat(s["ts"]).timestamp()
    real = end - ts
    eta = s["job"]["eta_s"]
    return s, ts, {"at_s": round(ts - t0, 2), "eta_s": eta,
                   "eta_reason": s["job"].get("eta_reason"),
                   "real_remaining_s": round(real, 2),
                   "error": None if eta is None else round(abs(eta - real) / real, 4),
                   "signed_error": None if eta is None else round((eta - real) / real, 4),
                   "progress": s["job"]["progress"]}


def as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def server_tmpdir(prefix: str) -> Path:
    """A fresh temporary folder the server's user can write (pg_dump -Fd
    run as postgres when we are root)."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(work, "postgres")
    return work


def machine() -> str:
    return f"{os.cpu_count()} cores, {os.uname().sysname} {os.uname().release}"


__all__ = ["Cluster", "start_cluster", "pgparmon", "timed", "median", "write_json", "make_csv",
           "machine", "fill_sql", "archive_caught_up", "as_server_user", "eta_point",
           "server_tmpdir", "run_ok", "fit2"]


def run_ok(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds of a command that must succeed (else the bench stops, saying
    why, from its stderr)."""
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:2])} failed: {res.stderr.strip()[-300:]}")
    return time.perf_counter() - t0


def fit2(xs: list[tuple[float, float]], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a*x0 + b*x1 (no intercept), relative errors
    weighted equally (each equation divided by y)."""
    s00 = s01 = s11 = t0 = t1 = 0.0
    for (x0, x1), y in zip(xs, ys, strict=True):
        w = 1.0 / (y * y)
        s00 += w * x0 * x0
        s01 += w * x0 * x1
        s11 += w * x1 * x1
        t0 += w * x0 * y
        t1 += w * x1 * y
    det = s00 * s11 - s01 * s01
    return (t0 * s11 - t1 * s01) / det, (s00 * t1 - s01 * t0) / det
