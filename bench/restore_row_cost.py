"""What a restore's time depends on besides bytes: the per-row cost.

`pgparmon advise` sizes a restore from the archive's data files. A load's
time is not proportional to its bytes alone: COPY FROM pays for every row
(a tuple formed, a heap slot found, WAL written per record) and for every
byte (parsing, copying, TOAST), and an index build pays per row (a sort of
its keys), not per byte of the table. This measures both on tables of one
shape at several row widths, restored with the real pg_dump / pg_restore:

- data: `pg_restore -j 1 --section=data` of one table (gzip, pg_dump's
  default) into a database that holds its pre-data;
- build: `pg_restore --section=post-data` (a primary key on an int column),
  and for the narrower rows a btree on the text column itself;
- a foreign key's check: ``ALTER TABLE t ADD FOREIGN KEY (id) REFERENCES t
  (id)`` (every row looked up in the primary key's table, as a restore's
  FK CONSTRAINT item does).

It fits seconds = rows x a + text bytes x b for the data, and
seconds = rows x c for the build, and prints them with the rate each
width gets. The widths are spread from narrow rows to rows stored out of
line (TOAST); the tables are not any shape of bench/advise_accuracy.py.

    .venv/bin/python bench/restore_row_cost.py                      # ~3 min
    .venv/bin/python bench/restore_row_cost.py --mb 60 --repeats 3

Raw results: docs/bench/restore_row_cost.json.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import fit2, machine, median, run_ok as run, start_cluster, write_json

REPO = Path(__file__).resolve().parent.parent
# text bytes a row, roughly: an int and k md5 strings (33 bytes each in COPY text)
WIDTHS = {"narrow": 1, "medium": 4, "wide": 18, "toast": 64, "large": 240}


def table_sql(name: str, k: int, rows: int) -> str:
    body = " || ".join(["md5((g * 7 + %d)::text)" % i for i in range(k)])
    return (f"CREATE TABLE {name} (id int, t text); "
            f"INSERT INTO {name} SELECT g, {body} FROM generate_series(1, {rows}) g; "
            f"ALTER TABLE {name} ADD PRIMARY KEY (id)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=100.0, help="COPY text per table (MB)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "docs/bench/restore_row_cost.json")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pgparmon-rowcost-"))
    results: list[dict[str, Any]] = []
    started = datetime.now(UTC).isoformat(timespec="seconds")
    with start_cluster(settings={"max_wal_size": "4GB"}) as cl:
        env = cl.env()
        for label, k in WIDTHS.items():
            width = 6 + 33 * k  # COPY text of one row, roughly
            rows = max(1000, int(a.mb * 1e6 / width))
            db = f"w_{label}"
            cl.psql(f"CREATE DATABASE {db}")
            cl.psql(table_sql("t", k, rows), dbname=db)
            arch = work / db
            run([cl.client("pg_dump"), "-Fd", "-f", str(arch), db], env)
            text = 0
            for f in arch.glob("*.dat.gz"):
                out = subprocess.run(["gzip", "-dc", str(f)], capture_output=True, check=True)
                text += len(out.stdout)
            data_t: list[float] = []
            build_t: list[float] = []
            text_ix_t: list[float] = []
            fk_t: list[float] = []
            for _ in range(a.repeats):
                tgt = f"{db}_r"
                cl.psql(f"DROP DATABASE IF EXISTS {tgt}")
                cl.psql(f"CREATE DATABASE {tgt}")
                base = [cl.client("pg_restore"), "-d", tgt]
                run(base + ["--section=pre-data", str(arch)], env)
                cl.psql("CHECKPOINT")
                data_t.append(run(base + ["-j", "1", "--section=data", str(arch)], env))
                build_t.append(run(base + ["--section=post-data", str(arch)], env))
                t0 = time.perf_counter()  # a foreign key's check: every row looked up
                cl.psql("ALTER TABLE t ADD FOREIGN KEY (id) REFERENCES t (id)", dbname=tgt)
                fk_t.append(time.perf_counter() - t0)
                if k <= 4:  # a btree on the text itself (wider keys exceed btree's limit)
                    t0 = time.perf_counter()
                    cl.psql("CREATE INDEX ON t (t)", dbname=tgt)
                    text_ix_t.append(time.perf_counter() - t0)
                cl.psql(f"DROP DATABASE {tgt}")
            cl.psql(f"DROP DATABASE {db}")
            shutil.rmtree(arch, ignore_errors=True)
            r = {"label": label, "rows": rows, "text_bytes": text,
                 "bytes_per_row": round(text / rows, 1),
                 "data_s": round(median(data_t), 3), "build_s": round(median(build_t), 3),
                 "data_runs": data_t, "build_runs": build_t,
                 "text_index_s": round(median(text_ix_t), 3) if text_ix_t else None,
                 "fk_s": round(median(fk_t), 3),
                 "text_mb_per_s": round(text / median(data_t) / 1e6, 1)}
            print(f"{label:7s} {r['bytes_per_row']:8.0f} B/row {rows:9d} rows  "
                  f"data {r['data_s']:6.2f} s ({r['text_mb_per_s']:6.1f} MB/s text)  "
                  f"build {r['build_s']:6.2f} s", flush=True)
            results.append(r)
    shutil.rmtree(work, ignore_errors=True)
    a_row, b_byte = fit2([(r["rows"], r["text_bytes"]) for r in results],
                         [r["data_s"] for r in results])
    c_row = median([r["build_s"] / r["rows"] for r in results])
    for r in results:
        r["data_fit_s"] = round(r["rows"] * a_row + r["text_bytes"] * b_byte, 3)
        r["build_per_row_us"] = round(r["build_s"] / r["rows"] * 1e6, 3)
        r["fk_per_row_us"] = round(r["fk_s"] / r["rows"] * 1e6, 3)
        r["fk_over_data"] = round(r["fk_s"] / r["data_s"], 3)
    doc = {"benchmark": "restore_row_cost", "machine": machine(), "started": started,
           "mb_per_table": a.mb, "repeats": a.repeats, "results": results,
           "fit": {"data_s_per_row": a_row, "data_s_per_text_byte": b_byte,
                   "build_s_per_row": c_row}}
    write_json(a.out, doc)
    print(f"data: {a_row * 1e6:.3f} us a row + {b_byte * 1e9:.3f} ns a text byte; "
          f"build: {c_row * 1e6:.3f} us a row (median)")
    for r in results:
        print(f"  {r['label']:7s} measured {r['data_s']:6.2f} s  fitted {r['data_fit_s']:6.2f} s"
              f"  build {r['build_per_row_us']:.3f} us/row  fk {r['fk_s']:.2f} s "
              f"({r['fk_per_row_us']:.3f} us/row, {r['fk_over_data']:.3f} x data)")


if __name__ == "__main__":
    main()
