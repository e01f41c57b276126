"""What reading every driver's sample parts costs a followed job's sample.

Before a job is known, a sample reads every driver's parts and server
process types (discovery: the logical-replication driver's subscription
query among them). Once it is known, its samples read its own driver's
alone (jobs.registry.job_extras). This times the sample's round trip
(DbSampler.sample: the statement, its JSON back, the DbSample built) as a
pg_dump follower runs it (filtered to its database, without the backup
bands), with every driver's extras against the pg_dump driver's (none), on
a throwaway subscriber with no subscription and with a few (each to its
own publication of a publisher, its tables synced and ready: what the
subscription query reads on a server that replicates).

Per setting: the two modes alternate in blocks of samples on one
connection each; reported are the median round trip (ms), the server's CPU
per sample (the monitor backend's utime + stime over each block, from
/proc) and the client's (this process's CPU time over each block), medians
over the blocks.

    .venv/bin/python bench/sample_parts.py [--subscriptions 0,3] [--blocks 15] [--per-block 1000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import psutil
from common import Cluster, machine, start_cluster, write_json

from pgparmon.connect import ConnTarget
from pgparmon.jobs.registry import job_extras, sample_extras
from pgparmon.readers.db import DbSampler, sample_query

DB = "bench"
TABLES_PER_SUB = 20


def _target(cl: Cluster) -> ConnTarget:
    return ConnTarget(host=str(cl.sockdir), port=cl.port, user=cl.superuser, dbname=DB)


def _subscribe(pub: Cluster, sub: Cluster, which: range) -> None:
    """Subscriptions s{i} of the subscriber's bench database, each to its own
    publication p{i} of TABLES_PER_SUB small tables; returns once every
    table is ready (replicating)."""
    for i in which:
        names = [f"t{i}_{k}" for k in range(TABLES_PER_SUB)]
        ddl = "".join(f"CREATE TABLE {t} (id int PRIMARY KEY, v text);" for t in names)
        pub.psql(ddl + "".join(f"INSERT INTO {t} SELECT g, 'x' FROM generate_series(1, 100) g;"
                               for t in names)
                 + f"CREATE PUBLICATION p{i} FOR TABLE {', '.join(names)};", dbname=DB)
        sub.psql(ddl, dbname=DB)
        sub.psql(f"CREATE SUBSCRIPTION s{i} CONNECTION '{pub.conninfo(DB)}' PUBLICATION p{i}",
                 dbname=DB)
    deadline = time.monotonic() + 300
    while sub.psql("SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'",
                   dbname=DB).strip() != "0":
        if time.monotonic() > deadline:
            raise SystemExit("the subscriptions' tables never got ready")
        time.sleep(0.5)


def _sampler(cl: Cluster, extras: dict[str, tuple[str, ...]]) -> tuple[DbSampler, psutil.Process]:
    s = DbSampler(_target(cl), **extras)
    facts = s.open()
    s.database_filter = DB  # as a pg_dump follower samples: its database,
    s.backup_bands = False  # no backup bands
    return s, psutil.Process(facts.backend_pid)


def _block(s: DbSampler, backend: psutil.Process, n: int) -> tuple[list[float], float, float]:
    """n samples: each one's round trip (ms), and the server's and the
    client's CPU per sample over the block (ms)."""
    walls = []
    srv0, cli0 = sum(backend.cpu_times()[:2]), time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        db = s.sample([])
        walls.append((time.perf_counter() - t0) * 1000)
        if db.error:
            raise SystemExit(f"sample failed: {db.error}")
    srv = (sum(backend.cpu_times()[:2]) - srv0) * 1000 / n
    cli = (time.process_time() - cli0) * 1000 / n
    return walls, srv, cli


def measure(sub: Cluster, blocks: int, per_block: int) -> dict[str, Any]:
    modes = {"all": sample_extras(), "own": job_extras("pg_dump")}
    samplers = {m: _sampler(sub, e) for m, e in modes.items()}
    try:
        for s, b in samplers.values():
            _block(s, b, 20)  # warm: plans, caches
        walls: dict[str, list[float]] = {m: [] for m in modes}
        srv: dict[str, list[float]] = {m: [] for m in modes}
        cli: dict[str, list[float]] = {m: [] for m in modes}
        for i in range(blocks):
            for m in (("all", "own") if i % 2 == 0 else ("own", "all")):
                w, sv, c = _block(*samplers[m], per_block)
                walls[m] += w
                srv[m].append(sv)
                cli[m].append(c)
        facts = samplers["all"][0].facts
        assert facts is not None
        version = facts.version_num
        out: dict[str, Any] = {}
        for m, extras in modes.items():
            out[m] = {"parts": list(extras["parts"]),
                      "server_types": list(extras["server_types"]),
                      "statement_chars": len(sample_query(version, extras["parts"])),
                      "samples": len(walls[m]),
                      "round_trip_ms_median": round(statistics.median(walls[m]), 3),
                      "round_trip_ms_p90": round(statistics.quantiles(walls[m], n=10)[-1], 3),
                      "server_cpu_ms_per_sample_median": round(statistics.median(srv[m]), 3),
                      "client_cpu_ms_per_sample_median": round(statistics.median(cli[m]), 3)}
        a, o = out["all"], out["own"]
        out["ratio_all_over_own"] = {
            k: round(a[k] / o[k], 3) if o[k] else None
            for k in ("round_trip_ms_median", "server_cpu_ms_per_sample_median",
                      "client_cpu_ms_per_sample_median")}
        return out
    finally:
        for s, _b in samplers.values():
            s.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subscriptions", default="0,3",
                    help="subscription counts to measure, in order (each adds to the last)")
    ap.add_argument("--blocks", type=int, default=15, help="blocks per mode")
    ap.add_argument("--per-block", type=int, default=1000,
                    help="samples per block (the server CPU is read in 10 ms ticks)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" /
                                         "bench" / "sample_parts.json"))
    a = ap.parse_args()
    counts = sorted({int(x) for x in a.subscriptions.split(",")})
    pub = start_cluster(settings={"wal_level": "logical"}, prefix="pgparmon-bench-pub-")
    sub = start_cluster(prefix="pgparmon-bench-sub-")
    runs = []
    try:
        for cl in (pub, sub):
            cl.psql(f"CREATE DATABASE {DB}")
        have = 0
        for n in counts:
            _subscribe(pub, sub, range(have, n))
            have = max(have, n)
            r = measure(sub, a.blocks, a.per_block)
            runs.append({"subscriptions": n, "tables_per_subscription": TABLES_PER_SUB, **r})
            print(f"{n} subscription(s): all parts {r['all']['round_trip_ms_median']:.3f} ms, "
                  f"own driver's {r['own']['round_trip_ms_median']:.3f} ms a sample; "
                  f"all/own {r['ratio_all_over_own']}", flush=True)
        write_json(Path(a.out), {"benchmark": "sample_parts", "machine": machine(),
                                 "version": sub.psql("SHOW server_version").strip(),
                                 "blocks": a.blocks, "per_block": a.per_block, "runs": runs})
    finally:
        sub.stop()
        pub.stop()


if __name__ == "__main__":
    main()
