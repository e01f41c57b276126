"""The monitor's memory while it follows a dump of many tables (issue "cost
of watching": peak RSS following a 10,000-table dump, target < 60 MB).

A database of N small tables (one row each, a serial primary key: 4N
objects) is dumped with a real `pg_dump -Fd -j 2`, followed by
`pgparmon attach --json` (the sampling path, no screen) and, in a second
run, by the full-screen TUI in a detached tmux window of 160x50; the
process's RSS is read (psutil) every 0.2 s and its peak kept, with the
RSS after the first sample (imports and plan) beside it. Repeated;
medians. Raw results: docs/bench/rss_many_tables.json.

    .venv/bin/python bench/rss_many_tables.py [--tables 10000] [--repeats 2]   # ~5 min
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from common import machine, start_cluster, write_json

REPO = Path(__file__).resolve().parent.parent
PY = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv/bin/python").exists() \
    else sys.executable
SESSION = f"pgparmon-rss-{os.getpid()}"


def fill(cl: Any, n: int) -> None:
    cl.psql("CREATE DATABASE many")
    step = 500
    for lo in range(0, n, step):
        body = "".join(f"CREATE TABLE t{i} (id serial PRIMARY KEY, v text); "
                       f"INSERT INTO t{i} (v) VALUES ('x');"
                       for i in range(lo, min(n, lo + step)))
        cl.psql("BEGIN; " + body + " COMMIT;", dbname="many")


class Peak(threading.Thread):
    """RSS of pid every 0.2 s until it exits: the peak and the first reading
    after `mark` is set."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.peak = 0
        self.at_mark: int | None = None
        self.mark = threading.Event()
        self.series: list[tuple[float, float]] = []  # (s since start, MB) once a second

    def run(self) -> None:
        t0 = time.monotonic()
        while True:
            try:
                rss = self.proc.memory_info().rss
            except psutil.Error:
                return
            self.peak = max(self.peak, rss)
            t = time.monotonic() - t0
            if not self.series or t - self.series[-1][0] >= 1.0:
                self.series.append((round(t, 1), round(rss / 2**20, 1)))
            if self.mark.is_set() and self.at_mark is None:
                self.at_mark = rss
            time.sleep(0.2)


def follow_json(cl: Any, out: Path, extra: dict[str, str]) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    dump = subprocess.Popen([cl.client("pg_dump"), "-Fd", "-j", "2", "-f", str(out), "many"],
                            env=cl.env())
    time.sleep(0.3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | extra
    mon = subprocess.Popen([PY, "-m", "pgparmon", "attach", "-h", str(cl.sockdir), "-p",
                            str(cl.port), "-U", "postgres", "-d", "many", "--json",
                            "--pid", str(dump.pid)], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, env=env, text=True)
    peak = Peak(mon.pid)
    peak.start()
    assert mon.stdout is not None
    samples = 0
    for line in mon.stdout:
        if '"pgparmon.sample/1"' in line:
            samples += 1
            peak.mark.set()
    mon.wait()
    dump.wait()
    peak.join(1.0)
    return {"samples": samples, "peak_rss_mb": round(peak.peak / 2**20, 1),
            "first_sample_rss_mb": round((peak.at_mark or 0) / 2**20, 1), "series": peak.series}


def tmux(*args: str) -> None:
    subprocess.run(["tmux", *args], capture_output=True, check=False)


def follow_tui(cl: Any, out: Path, extra: dict[str, str]) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    dump = subprocess.Popen([cl.client("pg_dump"), "-Fd", "-j", "2", "-f", str(out), "many"],
                            env=cl.env())
    time.sleep(0.3)
    pidfile = Path(tempfile.mkstemp(prefix="pgparmon-rss-pid-")[1])
    sets = "".join(f"{k}={shlex.quote(v)} " for k, v in extra.items())
    cmd = (f"echo $$ > {pidfile}; exec env {sets}TERM=xterm-256color COLORTERM=truecolor "
           f"{PY} -m pgparmon attach -h {cl.sockdir} -p {cl.port} -U postgres -d many "
           f"--pid {dump.pid}")
    tmux("kill-session", "-t", SESSION)
    tmux("new-session", "-d", "-s", SESSION, "-x", "160", "-y", "50", cmd)
    pid = None
    for _ in range(100):
        txt = pidfile.read_text().strip()
        if txt:
            pid = int(txt)
            break
        time.sleep(0.05)
    assert pid is not None, "the TUI did not start"
    peak = Peak(pid)
    peak.start()
    peak.mark.set()
    dump.wait()
    before_end = peak.peak  # the peak while the dump ran
    time.sleep(2.0)  # its last samples and the end screen
    tmux("send-keys", "-t", SESSION, "q")
    peak.join(10.0)
    tmux("kill-session", "-t", SESSION)
    pidfile.unlink(missing_ok=True)
    return {"peak_rss_mb": round(peak.peak / 2**20, 1),
            "peak_while_running_mb": round(before_end / 2**20, 1), "series": peak.series}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-tui", action="store_true")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="set in the monitor's environment (e.g. MALLOC_ARENA_MAX=2)")
    ap.add_argument("--out", default=str(REPO / "docs" / "bench" / "rss_many_tables.json"))
    a = ap.parse_args()
    extra = dict(kv.split("=", 1) for kv in a.env)
    # pg_dump locks every table in one transaction: the lock table must hold them
    locks = max(64, 2 * a.tables // 100 + 64)
    cl = start_cluster(prefix="pgparmon-bench-rss-",
                       settings={"max_locks_per_transaction": str(locks)})
    work = Path(tempfile.mkdtemp(prefix="pgparmon-bench-rss-out-"))
    if os.geteuid() == 0:
        shutil.chown(work, "postgres")
    try:
        t0 = time.perf_counter()
        fill(cl, a.tables)
        print(f"{a.tables} tables in {time.perf_counter() - t0:.0f} s", flush=True)
        runs: dict[str, list[dict[str, Any]]] = {"json": [], "tui": []}
        for i in range(a.repeats):
            r = follow_json(cl, work / "d", extra)
            runs["json"].append(r)
            print(f"attach --json run {i + 1}: peak {r['peak_rss_mb']} MB "
                  f"(after the first sample {r['first_sample_rss_mb']} MB), "
                  f"{r['samples']} samples", flush=True)
            if not a.no_tui and shutil.which("tmux"):
                r = follow_tui(cl, work / "d", extra)
                runs["tui"].append(r)
                print(f"attach (TUI) run {i + 1}: peak {r['peak_rss_mb']} MB (while the dump "
                      f"ran {r['peak_while_running_mb']} MB)", flush=True)
        doc: dict[str, Any] = {"benchmark": "rss_many_tables", "machine": machine(),
                               "tables": a.tables, "env": extra, "runs": runs, "target_mb": 60}
        for k, rs in runs.items():
            if rs:
                doc[f"{k}_peak_rss_mb_median"] = statistics.median(r["peak_rss_mb"] for r in rs)
                print(f"{k}: median peak RSS {doc[f'{k}_peak_rss_mb_median']} MB (target < 60)")
        write_json(Path(a.out), doc)
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
