"""ETA accuracy and cost while following a logical replication initial sync.

A publisher (wal_level=logical) holds ~--gb GB of heap in tables of uneven
sizes (bench/common.py's fill_sql: one table of half the data, six of a
twelfth each, fifty small ones); a subscriber has the same tables, empty,
each of the seven large ones with a pre-created index on a random text
column (the sync's COPY maintains it, as a subscriber whose schema came
with its indexes does), and max_sync_workers_per_subscription at its default
(2). Each run creates the
subscription (copy_data) and follows it with
``pgparmon attach -d DST --json --interval 1`` on the subscriber, which sizes
the tables from the publisher's catalog through the subscription's own
connection string. The real end is read independently: the bench polls
pg_subscription_rel every 0.5 s until every table is ready.

1. ETA: for the sample nearest 25%, 50% and 75% of the run's wall time, the
   end it predicts (sample time + eta_s) against the real end, as a fraction
   of the real time left.
2. Cost: the attach process's own CPU (user + system, wait4 at its exit)
   per sample and per minute, start-up included; its steady CPU, ms per
   second of wall time from 5 s after its start (psutil every second); and
   its RSS (peak and last, psutil every second). Its server session's CPU is the subscriber's, read
   from /proc by application_name.

Between runs the subscription is dropped (its slot on the publisher with it)
and the subscriber's tables truncated.

    .venv/bin/python bench/logical_sync_eta.py [--gb 1.3] [--runs 3]   # ~5 min
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import psutil
from common import (
    Cluster,
    eta_point,
    fill_sql,
    machine,
    median,
    pgparmon,
    start_cluster,
    write_json,
)

OUT = Path(__file__).resolve().parent.parent / "docs" / "bench" / "logical_sync_eta.json"
SRC, DST = "syncsrc", "syncdst"
FRACS = ("0.25", "0.5", "0.75")
STEADY_AFTER_S = 5.0


def setup(pub: Cluster, sub: Cluster, gb: float) -> dict[str, object]:
    pub.psql(f"CREATE DATABASE {SRC}")
    sub.psql(f"CREATE DATABASE {DST}")
    t0 = time.time()
    pub.psql(fill_sql(gb) + "\nANALYZE; CREATE PUBLICATION pb FOR ALL TABLES;", dbname=SRC,
             timeout=1800)
    schema = subprocess.run([pub.client("pg_dump"), "-s", "-O", "-x", "--no-publications",
                             SRC], env=pub.env(), check=True, capture_output=True,
                            text=True).stdout
    subprocess.run([sub.client("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", DST],
                   input=schema, env=sub.env(), check=True, capture_output=True, text=True)
    sub.psql("CREATE INDEX ON big (a);" + "".join(f"CREATE INDEX ON mid_{i} (a);"
                                                  for i in range(6)), dbname=DST)
    heap = int(pub.psql("SELECT sum(pg_table_size(c.oid))::int8 FROM pg_class c JOIN "
                        "pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r' "
                        "AND n.nspname = 'public'", dbname=SRC))
    tables = int(pub.psql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
                          dbname=SRC))
    return {"fill_s": round(time.time() - t0, 1), "publisher_bytes": heap, "tables": tables}


class Watch(threading.Thread):
    """The attach process's CPU and RSS every second while it runs, and its
    server session's CPU (found by application_name on the subscriber)."""

    def __init__(self, proc: psutil.Process, sub: Cluster) -> None:
        super().__init__(daemon=True)
        self.proc, self.sub = proc, sub
        self.rss: list[int] = []
        self.cpu: list[tuple[float, float]] = []  # (wall, user + system)
        self.backend_cpu: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        backend = None
        while not self.stop.is_set():
            try:
                ct = self.proc.cpu_times()
                self.cpu.append((time.time(), ct.user + ct.system))
                self.rss.append(self.proc.memory_info().rss)
            except psutil.Error:
                return
            try:
                if backend is None:
                    pid = self.sub.psql("SELECT pid FROM pg_stat_activity WHERE "
                                        "application_name = 'pgparmon' LIMIT 1").strip()
                    backend = psutil.Process(int(pid)) if pid else None
                if backend is not None:
                    bt = backend.cpu_times()
                    self.backend_cpu = bt.user + bt.system
            except (psutil.Error, subprocess.SubprocessError, ValueError):
                pass
            self.stop.wait(1.0)


def one_run(pub: Cluster, sub: Cluster) -> dict[str, object]:
    sub.psql(f"CREATE SUBSCRIPTION sb CONNECTION '{pub.conninfo(SRC)}' PUBLICATION pb",
             dbname=DST)
    t0 = time.time()
    log = tempfile.TemporaryFile()  # noqa: SIM115 - read once attach has exited, then closed
    mon = subprocess.Popen(pgparmon("attach", "-h", str(sub.sockdir), "-p", str(sub.port),
                                    "-U", sub.superuser, "-d", DST, "--interval", "1", "--json",
                                    "--wait", "30"),
                           stdout=log, stderr=subprocess.PIPE,
                           env={k: v for k, v in os.environ.items() if not k.startswith("PG")})
    watch = Watch(psutil.Process(mon.pid), sub)
    watch.start()
    # the real end: every table ready (pg_subscription_rel), polled
    while True:
        left = sub.psql("SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'",
                        dbname=DST).strip()
        if left == "0":
            end = time.time()
            break
        if time.time() - t0 > 1800:
            mon.kill()
            raise SystemExit("the sync did not end in 30 minutes")
        time.sleep(0.5)
    try:
        _, status, ru = os.wait4(mon.pid, 0)
    finally:
        watch.stop.set()
        watch.join()
    mon.returncode = os.waitstatus_to_exitcode(status)
    err = mon.stderr.read().decode() if mon.stderr else ""
    log.seek(0)
    docs = [json.loads(x) for x in log.read().decode().splitlines() if x.startswith("{")]
    log.close()
    samples = [d for d in docs if d.get("schema") == "pgparmon.sample/1"]
    if mon.returncode != 0 or not samples:
        raise SystemExit(f"attach exited {mon.returncode}: {err[-2000:]}")
    total = end - t0
    running = [s for s in samples if s["job"]["state"] == "running"]
    points = {}
    for frac in FRACS:
        s, ts, points[frac] = eta_point(running, t0, end, float(frac))
        eta = s["job"]["eta_s"]
        points[frac].update(predicted_end_s=None if eta is None else round(ts + eta - t0, 2),
                            tables=s["job"].get("tables"))
    cpu_s = ru.ru_utime + ru.ru_stime
    wall = watch.cpu[-1][0] - watch.cpu[0][0] if len(watch.cpu) > 1 else total
    # past its start-up (imports, discovery, the plan): the readings from
    # STEADY_AFTER_S on, CPU over wall time
    steady = [c for c in watch.cpu if c[0] - watch.cpu[0][0] >= STEADY_AFTER_S]
    steady_ms = (round((steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0]) * 1000, 2)
                 if len(steady) > 1 and steady[-1][0] > steady[0][0] else None)
    last = samples[-1]["job"]
    return {"total_s": round(total, 2), "samples": len(samples),
            "final_state": last["state"], "progress_basis": last.get("progress_basis"),
            "sync_workers": last.get("sync_workers"), "points": points,
            "monitor_cpu_s": round(cpu_s, 3),
            "monitor_cpu_ms_per_sample": round(cpu_s / len(samples) * 1000, 2),
            "monitor_cpu_s_per_minute": round(cpu_s / (wall / 60), 3) if wall > 0 else None,
            "monitor_steady_cpu_ms_per_s": steady_ms,
            "monitor_rss_peak_mb": round(max(watch.rss) / 2**20, 1) if watch.rss else None,
            "monitor_rss_last_mb": round(watch.rss[-1] / 2**20, 1) if watch.rss else None,
            "monitor_backend_cpu_s": (round(watch.backend_cpu, 3)
                                      if watch.backend_cpu is not None else None),
            "eta_trace": [[round(datetime.fromisoformat(s["ts"]).timestamp() - t0, 1),
                           s["job"]["eta_s"], s["job"]["progress"]] for s in running]}


def reset(pub: Cluster, sub: Cluster) -> None:
    sub.psql("DROP SUBSCRIPTION sb", dbname=DST)
    tables = sub.psql("SELECT string_agg(quote_ident(tablename), ', ') FROM pg_tables "
                      "WHERE schemaname = 'public'", dbname=DST).strip()
    sub.psql(f"TRUNCATE {tables}; CHECKPOINT", dbname=DST)
    pub.psql("CHECKPOINT")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.3, help="fill_sql's size: 1.3 is ~1.03 GB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args()
    import compileall  # as an installed wheel is (this machine sets PYTHONDONTWRITEBYTECODE)

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "pgparmon"), quiet=1)
    pub = start_cluster(settings={"wal_level": "logical"}, prefix="pgparmon-bench-syncpub-")
    try:
        sub = start_cluster(prefix="pgparmon-bench-syncsub-")
    except BaseException:
        pub.stop()
        raise
    try:
        data = setup(pub, sub, a.gb)
        print(f"publisher: {data['tables']} tables, {data['publisher_bytes'] / 1e9:.2f} GB "
              f"(filled in {data['fill_s']} s)", flush=True)
        load_avg = [os.getloadavg()]
        runs = []
        for i in range(a.runs):
            if i:
                reset(pub, sub)
            r = one_run(pub, sub)
            runs.append(r)
            h = r["points"]["0.5"]  # type: ignore[index]
            print(f"run {i + 1}: {r['total_s']} s, {r['samples']} samples; at half "
                  f"({h['at_s']} s): ETA {h['eta_s']} s, real {h['real_remaining_s']} s, "
                  f"error {h['signed_error']}; monitor {r['monitor_cpu_ms_per_sample']} ms CPU "
                  f"a sample, {r['monitor_cpu_s_per_minute']} s a minute (steady "
                  f"{r['monitor_steady_cpu_ms_per_s']} ms/s), RSS peak "
                  f"{r['monitor_rss_peak_mb']} MB", flush=True)
        load_avg.append(os.getloadavg())

        def med(key: str) -> float | None:
            xs = [float(r[key]) for r in runs if r.get(key) is not None]  # type: ignore[arg-type]
            return round(median(xs), 3) if xs else None

        got = {f: [r["points"][f]["error"] for r in runs  # type: ignore[index]
                   if r["points"][f]["error"] is not None] for f in FRACS}  # type: ignore[index]
        doc = {"benchmark": "logical_sync_eta", "machine": machine(),
               "note": "publisher, subscriber and monitor on the same 2-core machine, shared "
                       "with other work (noisy)",
               "date": datetime.now().isoformat(timespec="seconds"), "gb": a.gb, **data,
               "load_average_before_after": load_avg, "runs": runs,
               "median_error": {f: round(median(v), 4) if v else None for f, v in got.items()},
               "points_without_eta": {f: a.runs - len(v) for f, v in got.items()},
               "median_total_s": med("total_s"),
               "monitor_cpu_ms_per_sample_median": med("monitor_cpu_ms_per_sample"),
               "monitor_cpu_s_per_minute_median": med("monitor_cpu_s_per_minute"),
               "monitor_steady_cpu_ms_per_s_median": med("monitor_steady_cpu_ms_per_s"),
               "monitor_rss_peak_mb_median": med("monitor_rss_peak_mb"),
               "monitor_backend_cpu_s_median": med("monitor_backend_cpu_s")}
        write_json(Path(a.out), doc)
        print("median relative ETA error: " + ", ".join(
            f"at {float(f):.0%}: " + ("no ETA" if e is None else f"{e:.1%}")
            for f, e in doc["median_error"].items()))  # type: ignore[attr-defined]
    finally:
        sub.stop()
        pub.stop()


if __name__ == "__main__":
    main()
