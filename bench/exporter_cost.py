"""What `pgparmon exporter` costs the host: its CPU (% of one core) and RSS
over ~30 s idle (no job on the server) and over ~30 s following pg_dump -Fd
-j 2 runs back to back, and the median latency of a /metrics scrape (one
every 5 s, as Prometheus would with scrape_interval 5s). One run; CPU is
the exporter's own user+system time over each window, RSS and scrape
latency are medians of the window's readings. Targets: idle < 0.2% of a
core, RSS < 60 MB, scrape < 50 ms.

    .venv/bin/python bench/exporter_cost.py [--seconds 30] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
from common import machine, median, pgparmon, start_cluster, write_json

from pgparmon.cluster import free_port
from pgparmon.demo import sample_sql

SCRAPE_EVERY_S = 5.0


def scrape(port: int) -> float:
    t0 = time.perf_counter()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                 headers={"Accept": "application/openmetrics-text; "
                                          "version=1.0.0"})
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()
    return (time.perf_counter() - t0) * 1000


def window(proc: psutil.Process, port: int, seconds: float,
           busy: subprocess.Popen[bytes] | None = None,
           again: list[str] | None = None, env: dict[str, str] | None = None,
           psql: list[str] | None = None) -> dict[str, float]:
    """CPU % of a core over the window, RSS and scrape latency medians; with
    `again`, that command is restarted whenever it ends (dumps back to back)."""
    cpu0 = sum(proc.cpu_times()[:2])
    t0 = time.monotonic()
    rss: list[float] = []
    lat: list[float] = []
    next_scrape = t0
    runs = 0
    while time.monotonic() - t0 < seconds:
        if again is not None and (busy is None or busy.poll() is not None):
            if busy is not None and busy.returncode != 0:
                raise SystemExit("pg_dump failed")
            # each run its own directory (the last run's stays, as a nightly
            # dump's would); a transaction id between two runs, so that the
            # next dump's snapshot (backend_xmin) differs on this idle database
            # (docs/benchmarks.md: two dumps with the same xmin are one job)
            cmd = [f"{x}.{runs}" if i and again[i - 1] == "-f" else x
                   for i, x in enumerate(again)]
            if psql:
                subprocess.run([*psql, "-c", "SELECT txid_current()"], env=env, check=True,
                               stdout=subprocess.DEVNULL)
            busy = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
            runs += 1
        rss.append(proc.memory_info().rss / 1e6)
        if time.monotonic() >= next_scrape:
            lat.append(scrape(port))
            next_scrape += SCRAPE_EVERY_S
        time.sleep(0.5)
    elapsed = time.monotonic() - t0
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    if busy is not None:
        busy.wait()
    return {"seconds": round(elapsed, 1), "cpu_s": round(cpu, 3),
            "cpu_percent_of_core": round(cpu / elapsed * 100, 3),
            "rss_mb_median": round(median(rss), 1), "scrape_ms_median": round(median(lat), 2),
            "scrapes": len(lat), "dumps_started": runs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" /
                                         "bench" / "exporter_cost.json"))
    a = ap.parse_args()
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "pgparmon"), quiet=1)
    cl = start_cluster(prefix="pgparmon-bench-")
    work = Path(tempfile.mkdtemp(prefix="pgparmon-bench-exp-"))
    exp = None
    try:
        cl.psql("CREATE DATABASE bench")
        cl.psql(sample_sql(a.scale), dbname="bench")
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        exp = subprocess.Popen(pgparmon("exporter", "-h", str(cl.sockdir), "-p", str(cl.port),
                                        "-U", "postgres", "-d", "postgres", "--listen",
                                        f"127.0.0.1:{port}", "--interval", "1",
                                        "--record-dir", str(work / "rec")),
                               env=env, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                scrape(port)
                break
            except OSError:
                if exp.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the exporter did not start") from None
                time.sleep(0.1)
        proc = psutil.Process(exp.pid)
        time.sleep(3)  # past its start-up
        idle = window(proc, port, a.seconds)
        print(f"idle: {idle}", flush=True)
        dump = [cl.client("pg_dump"), "-Fd", "-j", "2", "-f", str(work / "d"), "bench"]
        busy = window(proc, port, a.seconds, again=dump, env=cl.env(),
                      psql=[cl.client("psql"), "-X", "-q", "-d", "bench"])
        print(f"pg_dump -j 2: {busy}", flush=True)
        from pgparmon.record import read_recording

        time.sleep(3)  # the last run's end, judged and recorded

        recs = sorted(p for p in (work / "rec").iterdir() if p.name.endswith(".pgparmon.gz"))
        states = [str((read_recording(str(p)).summary or {}).get("state")) for p in recs]
        doc = {"benchmark": "exporter_cost", "machine": machine(), "scale": a.scale,
               "interval_s": 1.0, "scrape_every_s": SCRAPE_EVERY_S, "idle": idle,
               "pg_dump_j2": busy, "recordings": len(recs), "recorded_states": states,
               "targets": {"idle_cpu_percent_of_core": "< 0.2", "rss_mb": "< 60",
                           "scrape_ms": "< 50"}}
        write_json(Path(a.out), doc)
        print(f"idle: {idle['cpu_percent_of_core']:.3f}% of a core, RSS "
              f"{idle['rss_mb_median']:.1f} MB, scrape {idle['scrape_ms_median']:.1f} ms | "
              f"following pg_dump -j 2: {busy['cpu_percent_of_core']:.2f}% of a core, RSS "
              f"{busy['rss_mb_median']:.1f} MB, scrape {busy['scrape_ms_median']:.1f} ms "
              f"({busy['dumps_started']} dumps, {len(recs)} recordings: {', '.join(states)})")
    finally:
        if exp is not None and exp.poll() is None:
            exp.terminate()
            exp.wait(timeout=30)
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
