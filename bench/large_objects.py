"""What large objects cost a dump and a restore, against a table's rows.

pg_dump writes a database's large objects in their own archive items (one
item for all of them before pg_dump 17, items of up to 1000 from 17), each
object opened, read in chunks and closed, in a -Fd archive one file an
object; pg_restore creates and writes them back one by one. Their cost is
not a table's: a per-object part and a per-byte part. The restore runs in
two parts, its pre-data (where pg_restore creates each object's metadata,
one statement after another) and the rest, to tell the share of an
object's cost that is serial before any worker starts. This times both, with
the real pg_dump -Fd (gzip, its default) and pg_restore, on databases that
hold only large objects (many small ones, few large ones) and, for the same
bytes, a table of one bytea column (the rate the advice's model has for a
table's data), and fits seconds = objects x a + bytes x b.

    .venv/bin/python bench/large_objects.py                  # ~2 min on 2 cores
    .venv/bin/python bench/large_objects.py --mb 80 --repeats 3

Raw results: docs/bench/large_objects.json.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import fit2, machine, median, run_ok as run, start_cluster, write_json

REPO = Path(__file__).resolve().parent.parent
# object sizes (bytes): many small objects, a middle, few large ones
SIZES = {"small": 2_000, "medium": 40_000, "large": 2_000_000}


def fill(cl: Any, db: str, kind: str, n: int, size: int) -> None:
    """n objects (or rows) of `size` bytes of half-compressible data: md5
    text repeated, then cut, so gzip shrinks it as it would real data."""
    reps = size // 32 + 1
    value = f"substr(decode(repeat(md5(g::text), {reps}), 'escape'), 1, {size})"
    if kind == "lo":
        cl.psql(f"SELECT lo_from_bytea(0, {value}) FROM generate_series(1, {n}) g", dbname=db)
    else:
        cl.psql(f"CREATE TABLE b AS SELECT g AS id, {value} AS v FROM generate_series(1, {n}) g",
                dbname=db)
    cl.psql("VACUUM ANALYZE", dbname=db)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=40.0, help="bytes of each database (MB)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "docs/bench/large_objects.json")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pgparmon-lo-"))
    started = datetime.now(UTC).isoformat(timespec="seconds")
    results: list[dict[str, Any]] = []
    with start_cluster(settings={"max_wal_size": "4GB"}) as cl:
        env = cl.env()
        for label, size in SIZES.items():
            n = max(1, int(a.mb * 1e6 / size))
            for kind in ("lo", "table"):
                db = f"{kind}_{label}"
                cl.psql(f"CREATE DATABASE {db}")
                fill(cl, db, kind, n, size)
                pages = int(cl.psql(
                    "SELECT relpages FROM pg_class WHERE oid = "
                    + ("'pg_largeobject'::regclass" if kind == "lo" else "'b'::regclass"),
                    dbname=db).strip() or 0)
                dump_t: list[float] = []
                restore_t: list[float] = []
                pre_t: list[float] = []
                arch = work / db
                for _ in range(a.repeats):
                    shutil.rmtree(arch, ignore_errors=True)
                    dump_t.append(run([cl.client("pg_dump"), "-Fd", "-f", str(arch), db], env))
                    tgt = f"{db}_r"
                    cl.psql(f"DROP DATABASE IF EXISTS {tgt}")
                    cl.psql(f"CREATE DATABASE {tgt}")
                    cl.psql("CHECKPOINT")
                    # in two runs, to tell the pre-data (an object's metadata:
                    # lo_create, its owner) from the rest (its data)
                    pre_t.append(run([cl.client("pg_restore"), "--section=pre-data", "-d", tgt,
                                      str(arch)], env))
                    restore_t.append(pre_t[-1] + run([cl.client("pg_restore"), "--section=data",
                                                      "--section=post-data", "-d", tgt,
                                                      str(arch)], env))
                    cl.psql(f"DROP DATABASE {tgt}")
                files = sum(p.stat().st_size for p in arch.iterdir())
                shutil.rmtree(arch, ignore_errors=True)
                cl.psql(f"DROP DATABASE {db}")
                r = {"label": label, "kind": kind, "objects": n, "object_bytes": size,
                     "bytes": n * size, "heap_pages": pages, "archive_bytes": files,
                     "dump_s": round(median(dump_t), 3), "restore_s": round(median(restore_t), 3),
                     "restore_pre_data_s": round(median(pre_t), 3),
                     "dump_runs": dump_t, "restore_runs": restore_t, "pre_data_runs": pre_t}
                print(f"{kind:5s} {label:6s} {n:7d} x {size:8d} B  heap "
                      f"{pages * 8192 / 1e6:6.1f} MB  dump {r['dump_s']:6.2f} s  restore "
                      f"{r['restore_s']:6.2f} s", flush=True)
                results.append(r)
    shutil.rmtree(work, ignore_errors=True)
    los = [r for r in results if r["kind"] == "lo"]
    fits = {}
    for op in ("dump", "restore"):
        a_obj, b_byte = fit2([(r["objects"], r["bytes"]) for r in los], [r[f"{op}_s"] for r in los])
        tables = [r for r in results if r["kind"] == "table"]
        # the table's rate a byte (its median over the sizes): the advice's unit
        t_byte = median([r[f"{op}_s"] / r["bytes"] for r in tables])
        fits[op] = {"s_per_object": a_obj, "s_per_byte": b_byte, "table_s_per_byte": t_byte,
                    # an object's cost in bytes of a table's data, and a byte's against the table's
                    "object_in_table_bytes": a_obj / t_byte, "byte_vs_table": b_byte / t_byte}
        if op == "restore":
            # the share of an object's fixed cost pg_restore spends in its
            # pre-data (one statement after another, before any worker)
            a_pre, _ = fit2([(r["objects"], r["bytes"]) for r in los],
                            [r["restore_pre_data_s"] for r in los])
            fits[op]["pre_data_s_per_object"] = a_pre
            fits[op]["pre_data_share"] = a_pre / a_obj
            print(f"restore pre-data: {a_pre * 1e6:.1f} us an object, {a_pre / a_obj:.0%} of "
                  "its fixed cost")
        print(f"{op}: {a_obj * 1e6:.1f} us an object + {b_byte * 1e9:.2f} ns a byte; a table "
              f"{t_byte * 1e9:.2f} ns a byte: an object = {a_obj / t_byte / 1e3:.1f} kB of table, "
              f"a byte = {b_byte / t_byte:.2f}x a table's")
    write_json(a.out, {"benchmark": "large_objects", "machine": machine(), "started": started,
                       "mb": a.mb, "repeats": a.repeats, "results": results, "fit": fits})


if __name__ == "__main__":
    main()
