"""What a foreign key's check costs before and after the referencing side's keys.

pg_restore -j adds a foreign key as soon as its archive dependencies are
done. On a partitioned table those are the referenced key and the parent
(no rows), not the partitions' own keys, so at few jobs the check can run
before the referencing partitions' primary keys are built, and at more
jobs after them. This measures the check both ways on partitioned-fk's
tables (bench/advise_accuracy.py's shape: orders and order lines, 8
partitions each, the lines' key on (order_id, placed, line) leading with
the foreign key's columns):

- the archive (pg_dump -Fd) restored with --section=pre-data and
  --section=data, the orders' key added;
- before: ``ALTER TABLE order_lines ADD FOREIGN KEY (order_id, placed)
  REFERENCES orders (id, placed)`` at once;
- after: the lines' primary key first, then the same key;
- a scan of order_lines before the key (count(*): the hint bits a first
  reader sets), to tell the plan from the first read.

It prints the median seconds of each, and the plan one partition's check
ran both ways (auto_explain).

    .venv/bin/python bench/fk_check_order.py              # ~1 min
    .venv/bin/python bench/fk_check_order.py --repeats 5

Raw results: docs/bench/fk_check_order.json.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import advise_accuracy as shapes
from common import machine, median, server_tmpdir, start_cluster, write_json

REPO = Path(__file__).resolve().parent.parent
FK = ("ALTER TABLE order_lines ADD CONSTRAINT lines_fk FOREIGN KEY (order_id, placed) "
      "REFERENCES orders (id, placed)")
LINES_PKEY = "ALTER TABLE order_lines ADD PRIMARY KEY (order_id, placed, line)"
# the plan each partition's check ran (auto_explain, the statements nested
# in the ALTER TABLE: the check sets its own work_mem, so an EXPLAIN of the
# same query in a plain session plans another join)
AUTO_EXPLAIN = ("LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; "
                "SET auto_explain.log_nested_statements = on; "
                "SET auto_explain.log_level = notice; ")
WAYS = ("before", "after", "scanned")


def timed(cl: Any, sql: str, db: str) -> float:
    t0 = time.perf_counter()
    cl.psql(sql, dbname=db)
    return time.perf_counter() - t0


def loaded(cl: Any, archive: Path, db: str) -> None:
    """db holds the archive's pre-data and data, and the orders' key."""
    cl.psql(f"DROP DATABASE IF EXISTS {db}")
    cl.psql(f"CREATE DATABASE {db}")
    for section in ("pre-data", "data"):
        subprocess.run([cl.client("pg_restore"), f"--section={section}", "-d", db,
                        str(archive)], env=cl.env(), check=True)
    cl.psql("ALTER TABLE orders ADD PRIMARY KEY (id, placed)", dbname=db)


def one(cl: Any, archive: Path, way: str) -> dict[str, float]:
    db = f"fk_{way}"
    loaded(cl, archive, db)
    out: dict[str, float] = {}
    if way == "after":
        out["lines_pkey_s"] = timed(cl, LINES_PKEY, db)
    if way == "scanned":
        out["scan_s"] = timed(cl, "SELECT count(*) FROM order_lines", db)
    out["fk_s"] = timed(cl, FK, db)
    cl.psql(f"DROP DATABASE {db}")
    return out


def plans(cl: Any, archive: Path) -> dict[str, str]:
    """The first partition's check as it ran, each way (auto_explain's
    notice for order_lines_q0)."""
    out = {}
    for way in ("before", "after"):
        db = f"fk_plan_{way}"
        loaded(cl, archive, db)
        if way == "after":
            cl.psql(LINES_PKEY, dbname=db)
        res = subprocess.run([cl.client("psql"), "-X", "-d", db, "-c", AUTO_EXPLAIN + FK],
                             env=cl.env(), capture_output=True, text=True, check=True)
        notices = res.stderr.split("NOTICE:")
        first = next((n for n in notices if "order_lines_q0" in n), "")
        out[way] = "\n".join(ln for ln in first.strip().splitlines()
                              if ln.strip() and not ln.startswith("Query Text"))
        cl.psql(f"DROP DATABASE {db}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="partitioned-fk's data factor")
    ap.add_argument("--out", default=str(REPO / "docs" / "bench" / "fk_check_order.json"))
    a = ap.parse_args()
    cl = start_cluster(prefix="pgparmon-fkorder-")
    work = server_tmpdir("pgparmon-fkorder-")
    try:
        info, archive = shapes.shape_archive(cl, "partitioned-fk", a.scale, work)
        runs: list[dict[str, Any]] = []
        for r in range(a.repeats):
            for way in (WAYS if r % 2 == 0 else WAYS[::-1]):
                res = one(cl, archive, way)
                runs.append({"repeat": r, "way": way, **{k: round(v, 3) for k, v in res.items()}})
                print(f"  {way:8s} " + "  ".join(f"{k} {v:.3f}" for k, v in res.items()),
                      flush=True)
        plan = plans(cl, archive)
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)
    med = {w: median([x["fk_s"] for x in runs if x["way"] == w]) for w in WAYS}
    print(f"the key's check, median of {a.repeats}: before the lines' keys {med['before']:.3f} s, "
          f"after them {med['after']:.3f} s ({med['before'] / med['after']:.2f}x), after a "
          f"scan only {med['scanned']:.3f} s")
    for way, text in plan.items():
        print(f"-- one partition's check, {way} the lines' keys:\n{text}")
    write_json(Path(a.out), {"benchmark": "fk_check_order", "machine": machine(),
                             "started": datetime.now(UTC).isoformat(timespec="seconds"),
                             "settings": {"repeats": a.repeats, "scale": a.scale},
                             "database": info, "runs": runs, "median_fk_s": med,
                             "plans": plan})


if __name__ == "__main__":
    main()
