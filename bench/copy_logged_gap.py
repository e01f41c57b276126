"""The per-stream cost of a logged COPY target against an unlogged one.

One `\\copy` stream of a CSV (bench/common.make_csv, --mb MB) into a table
`(id int, name text, amount numeric, note text)` with a btree on name,
created LOGGED or UNLOGGED, TRUNCATE and CHECKPOINT before each load,
--repeats times interleaved; the WAL each load wrote is read from
pg_current_wal_insert_lsn().  Run on a throwaway cluster twice: with the
test clusters' settings (fsync off, full_page_writes off: what
bench/advise_copy_accuracy.py ran with) and with fsync and full_page_writes
on (a production server's).  Prints a markdown table; raw to
docs/bench/copy_logged_gap.json.

    .venv/bin/python bench/copy_logged_gap.py --mb 20 --repeats 3   # ~1 min on 2 cores
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from common import machine, make_csv, median, start_cluster, write_json

OUT = Path(__file__).resolve().parent.parent / "docs" / "bench" / "copy_logged_gap.json"
DB = "gapbench"
SETUPS = {
    "fsync off, fpw off (test clusters)": {},
    "fsync on, fpw on": {"fsync": "on", "full_page_writes": "on"},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pgparmon-bench-gap-"))
    path = tmp / "items.csv"
    make_csv(path, a.mb)
    size = path.stat().st_size
    out: dict[str, dict[str, object]] = {}
    try:
        for setup, settings in SETUPS.items():
            cl = start_cluster(prefix="pgparmon-bench-gap-", settings=settings)
            try:
                cl.psql(f"CREATE DATABASE {DB}")
                for kind in ("logged", "unlogged"):
                    u = "UNLOGGED " if kind == "unlogged" else ""
                    cl.psql(f"CREATE {u}TABLE t_{kind} (id int, name text, amount numeric, "
                            f"note text); CREATE INDEX ON t_{kind} (name)", dbname=DB)
                secs: dict[str, list[float]] = {"logged": [], "unlogged": []}
                wal: dict[str, list[float]] = {"logged": [], "unlogged": []}
                for rep in range(a.repeats):
                    kinds = ["logged", "unlogged"] if rep % 2 == 0 else ["unlogged", "logged"]
                    for kind in kinds:
                        cl.psql(f"TRUNCATE t_{kind}; CHECKPOINT", dbname=DB)
                        l0 = float(cl.psql("SELECT pg_current_wal_insert_lsn() - '0/0'",
                                           dbname=DB))
                        t0 = time.perf_counter()
                        subprocess.run([cl.client("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
                                        "-d", DB, "-c", f"\\copy t_{kind} FROM '{path}' "
                                        "WITH (FORMAT csv, HEADER)"], check=True,
                                       env=cl.env(), stdout=subprocess.DEVNULL)
                        secs[kind].append(time.perf_counter() - t0)
                        l1 = float(cl.psql("SELECT pg_current_wal_insert_lsn() - '0/0'",
                                           dbname=DB))
                        wal[kind].append((l1 - l0) / size)
                out[setup] = {"seconds": secs, "wal_per_file_byte": wal}
            finally:
                cl.stop()
    finally:
        path.unlink()
        tmp.rmdir()
    write_json(OUT, {"machine": machine(), "mb": a.mb, "bytes": size, "repeats": a.repeats,
                     "load_average": os.getloadavg(), "results": out})
    print(f"{a.mb:g} MB CSV, one \\copy stream, one index, {machine()}, load average "
          f"{os.getloadavg()[0]:.2f}")
    print("| settings | unlogged s | logged s | logged / unlogged | WAL B per file byte |")
    print("|---|---|---|---|---|")
    for setup, r in out.items():
        s, w = r["seconds"], r["wal_per_file_byte"]
        lu, ll = median(s["unlogged"]), median(s["logged"])  # type: ignore[index]
        print(f"| {setup} | {lu:.2f} | {ll:.2f} | {ll / lu:.2f} | "
              f"{median(w['logged']):.2f} |")  # type: ignore[index]


if __name__ == "__main__":
    main()
