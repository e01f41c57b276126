"""What the server's parallel maintenance workers give a restore's index build.

pg_restore's CREATE INDEX and ADD PRIMARY KEY / UNIQUE run on regular
tables, so PostgreSQL 11+ may give each btree build parallel workers
(max_parallel_maintenance_workers, the table's size and
maintenance_work_mem decide how many; docs/advise.md). The advice's probe
times its build on a temporary table, which never gets any: it is the
serial build. This times one build with 0, 1, ... workers (p = 1, 2, ...
participants, up to the cores: more would measure the cores, not the
build) on a table that has the cores to itself, for three keys: an int in
the table's order (a serial key, as a restore loads it), an int in random
order and an md5 text. For each it reports its time alone against the
in-order int's (the key's cost), its speed-up with p participants, and the
share that stayed serial, f in time(p) = time(1) x (f + (1 - f) / p),
also in in-order int builds' units (f x its cost). The workers launched are
read from the server's own trace of the sort (trace_sort).

    .venv/bin/python bench/parallel_build.py                    # ~1 min on 2 cores
    .venv/bin/python bench/parallel_build.py --mb 600 --repeats 5

Raw results: docs/bench/parallel_build.json.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from common import machine, median, start_cluster, write_json

REPO = Path(__file__).resolve().parent.parent
# an int key in the table's order (a serial key), an int key in random order,
# and a text key (md5, random order)
KEYS = {"int": "id", "int_random": "r", "text": "t"}


def timed_build(conn: Any, column: str, workers: int) -> tuple[float, int]:
    """Seconds of one CREATE INDEX allowed `workers` parallel workers, and
    the workers the server launched (its trace_sort lines: one "begin index
    sort" a worker, and two from the leader when the build is parallel)."""
    lines: list[str] = []
    def handler(d: Any) -> None:
        lines.append(d.message_primary or "")

    conn.add_notice_handler(handler)
    conn.execute(f"SET max_parallel_maintenance_workers = {workers}")
    conn.execute("SET trace_sort = on")
    conn.execute("SET client_min_messages = log")
    t0 = time.perf_counter()
    conn.execute(f"CREATE INDEX pb_ix ON pb ({column})")
    secs = time.perf_counter() - t0
    conn.execute("RESET client_min_messages")
    conn.execute("DROP INDEX pb_ix")
    conn.remove_notice_handler(handler)
    begins = sum(1 for x in lines if x.startswith("begin index sort"))
    return secs, max(0, begins - 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=300.0, help="heap of the table (MB)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "docs/bench/parallel_build.json")
    a = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    ps = list(range(1, max(1, cores) + 1))
    started = datetime.now(UTC).isoformat(timespec="seconds")
    rows = int(a.mb * 1e6 / 83)  # two ints and a 33-byte text, about 83 bytes a row on disk
    results: dict[str, dict[int, list[float]]] = {k: {p: [] for p in ps} for k in KEYS}
    launched: dict[str, dict[int, int]] = {k: {p: 0 for p in ps} for k in KEYS}
    with start_cluster(settings={"max_wal_size": "4GB", "maintenance_work_mem": "1GB",
                                 "max_worker_processes": "16",
                                 "max_parallel_workers": "16"}) as cl:
        cl.psql(f"CREATE TABLE pb AS SELECT g AS id, (hashint4(g)::bigint << 20) + g AS r, "
                f"md5((g * 7)::text) AS t FROM generate_series(1, {rows}) g")
        cl.psql("VACUUM ANALYZE pb")
        cl.psql("CHECKPOINT")
        heap = int(cl.psql("SELECT pg_relation_size('pb')").strip())
        conn = psycopg.connect(cl.conninfo(), autocommit=True)
        for key, col in KEYS.items():
            timed_build(conn, col, 0)  # a first build warms the table's pages
            for r in range(a.repeats):
                # the order turns each repeat: a drift of the machine's speed
                # falls on every p alike
                order = ps if r % 2 == 0 else list(reversed(ps))
                for p in order:
                    secs, seen = timed_build(conn, col, p - 1)
                    results[key][p].append(secs)
                    launched[key][p] = max(launched[key][p], seen)
                    print(f"{key:4s} p={p} {secs:6.3f} s ({seen} workers seen)", flush=True)
    doc: dict[str, Any] = {"benchmark": "parallel_build", "machine": machine(),
                           "started": started, "heap_bytes": heap, "rows": rows,
                           "cores": cores, "repeats": a.repeats, "keys": {}}
    base = median(results["int"][1])
    for key in KEYS:
        t1 = median(results[key][1])
        per: dict[str, Any] = {"cost_vs_int": round(t1 / base, 3)}
        for p in ps:
            tp = median(results[key][p])
            # tp / t1 = f + (1 - f) / p  ->  f = (p * tp / t1 - 1) / (p - 1)
            f = (p * tp / t1 - 1) / (p - 1) if p > 1 else None
            per[str(p)] = {"seconds": round(tp, 3), "runs": [round(x, 3) for x in
                                                           results[key][p]],
                           "speedup": round(t1 / tp, 3),
                           "workers_seen": launched[key][p],
                           "serial_share": round(f, 3) if f is not None else None,
                           # the serial part in in-order int builds' units
                           "serial_int_units": round(f * t1 / base, 3)
                           if f is not None else None}
        doc["keys"][key] = per
        print(f"{key:10s} {t1 / base:4.2f}x the int build: " + ", ".join(
            f"p={p} {per[str(p)]['seconds']:.2f} s ({per[str(p)]['speedup']:.2f}x, serial "
            f"{per[str(p)]['serial_share']}, {per[str(p)]['serial_int_units']} int units)"
            for p in ps))
    write_json(a.out, doc)


if __name__ == "__main__":
    main()
