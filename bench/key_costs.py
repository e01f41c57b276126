"""What a btree build costs a row by its key: its columns' types and count.

The advice and the live plan cost a restore's index and key builds per row
of their table, times what the key costs a row against an int key's
(`ddl.KEY_COSTS`, docs/advise.md "Index builds follow rows"). This times one
serial build (no parallel workers) of each key below on one table, whose
pages are warm and hint bits set (a first build and VACUUM before), and
reports each against the build of an int key in the table's order (a serial
key, as a restore loads it): a leading column alone of each type, and keys
of two and three columns, led by a unique column (the later columns are
compared only on ties: none) and by one with duplicates (each value twice,
or 730 dates: the later columns decide those ties). The keys' order turns
each repeat, so a drift of the machine's speed falls on every key alike.

    .venv/bin/python bench/key_costs.py                    # ~1 min on 2 cores
    .venv/bin/python bench/key_costs.py --rows 2000000 --repeats 5

Raw results: docs/bench/key_costs.json.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from common import machine, median, start_cluster, write_json

REPO = Path(__file__).resolve().parent.parent
# name -> the key's columns. id: int, unique, in the table's order; pair:
# bigint, each value twice, in order; r: int in random order; d: date, 730
# values in random order; n: numeric(12,2), random; t: md5 text (collation C)
KEYS = {
    "int": "id",
    "bigint, pairs": "pair",
    "int, random": "r",
    "date": "d",
    "numeric": "n",
    "text": "t",
    "int, date": "id, d",
    "int, date, int": "id, d, r",
    "bigint pairs, date": "pair, d",
    "bigint pairs, date, int": "pair, d, r",
    "date, bigint": "d, pair",
    "date, bigint, int": "d, pair, r",
    "numeric, int": "n, id",
    "text, int": "t, id",
}


def timed_build(conn: Any, columns: str) -> float:
    t0 = time.perf_counter()
    conn.execute(f"CREATE INDEX kc_ix ON kc ({columns})")
    secs = time.perf_counter() - t0
    conn.execute("DROP INDEX kc_ix")
    return secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "docs/bench/key_costs.json")
    a = ap.parse_args()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    results: dict[str, list[float]] = {k: [] for k in KEYS}
    with start_cluster(settings={"max_wal_size": "4GB", "maintenance_work_mem": "256MB"}) as cl:
        cl.psql("CREATE TABLE kc AS SELECT g::int AS id, ((g + 1) / 2)::bigint AS pair, "
                "hashint4(g) AS r, date '2024-01-01' + (hashint4(g * 3) & 1023) % 730 AS d, "
                "(hashint4(g * 5) % 10000000) / 100.0 AS n, md5((g * 7)::text) AS t "
                f"FROM generate_series(1, {a.rows}) g")
        cl.psql("ALTER TABLE kc ALTER n TYPE numeric(12,2)")
        cl.psql("VACUUM ANALYZE kc")
        cl.psql("CHECKPOINT")
        heap = int(cl.psql("SELECT pg_relation_size('kc')").strip())
        conn = psycopg.connect(cl.conninfo(), autocommit=True)
        conn.execute("SET max_parallel_maintenance_workers = 0")
        timed_build(conn, "id")  # a first build warms the table's pages
        names = list(KEYS)
        for r in range(a.repeats):
            for name in (names if r % 2 == 0 else list(reversed(names))):
                secs = timed_build(conn, KEYS[name])
                results[name].append(secs)
                print(f"{name:26s} {secs:6.3f} s", flush=True)
    base = median(results["int"])
    doc: dict[str, Any] = {"benchmark": "key_costs", "machine": machine(), "started": started,
                           "rows": a.rows, "heap_bytes": heap, "repeats": a.repeats,
                           "keys": {}}
    for name, cols in KEYS.items():
        t = median(results[name])
        doc["keys"][name] = {"columns": cols, "seconds": round(t, 4),
                             "runs": [round(x, 4) for x in results[name]],
                             "us_a_row": round(t / a.rows * 1e6, 4),
                             "cost_vs_int": round(t / base, 3)}
        print(f"{name:26s} ({cols}): {t:.3f} s, {t / a.rows * 1e6:.3f} us a row, "
              f"{t / base:.2f}x the int key")
    write_json(a.out, doc)


if __name__ == "__main__":
    main()
