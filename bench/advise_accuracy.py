"""How good is `pgparmon advise`? Its advice against real sweeps.

For databases of several shapes (tuned on: equal tables, one dominant table,
many small tables, wide rows that compress well, wide rows that compress
poorly; held out of every tuning, reported apart: thousands of tiny tables,
TOAST-heavy rows, a typical mixed database, many indexes per table,
partitioned tables with foreign keys) this asks `pgparmon advise --json`
for dump advice and restore advice in three modes: static (no --probe),
probe (--probe, its default budget: 3% of the predicted run, which skips
the probe on runs this short) and probe-5s (--probe --probe-seconds 5, a
forced probe). Then it sweeps the real
`pg_dump -Fd -j J` and `pg_restore -j J` over J (default 1..4) with repeats,
the order of J interleaved across repeats (a restore at J >= 2 as the
advice gives it: in three steps, pre-data then data and post-data with -j,
when the archive has a foreign key pg_restore -j may add before its
partitions' data), and compares:

- regret: measured time at the recommended j / best measured time, on the
  medians of the repeats (3 by default), and again with a recommendation
  within the repeats' spread counted as a tie (its fastest run no slower
  than the best j's slowest: `regret_ties`);
- prediction error: |predicted - measured| / measured at the recommended j;
- "never worse than j/2": measured(j) <= measured(max(1, j // 2));
- the probe's own time against its budget, and against min(3% of the
  predicted run time, 60 s);
- whether repeated advice agrees within one step of the j grid.

Targets (docs/advise.md): median regret <= 1.05, worst <= 1.10 (ties
counted), prediction error <= 15% at the recommended j.

Raw timings go to docs/bench/advise_accuracy.json; a markdown table is printed.

    .venv/bin/python bench/advise_accuracy.py                # full run
    .venv/bin/python bench/advise_accuracy.py --quick        # smoke run (~1 min)
    .venv/bin/python bench/advise_accuracy.py --shapes equal,dominant --repeats 3

Each shape is sized so that `pg_dump -Fd -j 1` takes roughly 4-10 s on the
project's 2-core VM at --scale 1 (default gzip compression).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import machine, median, start_cluster, write_json

REPO = Path(__file__).resolve().parent.parent
TARGETS = {"median_regret": 1.05, "worst_regret": 1.10, "prediction_error": 0.15}

# --------------------------------------------------------------------------
# database shapes


def _equal(scale: float) -> tuple[list[str], list[str]]:
    n = int(310_000 * scale)
    data = [f"CREATE TABLE eq_{i} AS SELECT g AS id, md5(g::text) AS a, "
            f"md5((g * 3 + {i})::text) AS b, g % 1000 AS c FROM generate_series(1, {n}) g"
            for i in range(8)]
    post = [f"ALTER TABLE eq_{i} ADD PRIMARY KEY (id)" for i in range(8)]
    post += [f"CREATE INDEX ON eq_{i} (c)" for i in range(0, 8, 2)]
    return data, post


def _dominant(scale: float) -> tuple[list[str], list[str]]:
    big = int(1_750_000 * scale)
    side = int(125_000 * scale)
    data = [(f"CREATE TABLE dominant AS SELECT g AS id, md5(g::text) AS a, "
             f"md5((g * 7)::text) AS b, g % 1000 AS c FROM generate_series(1, {big}) g")]
    data += [f"CREATE TABLE side_{i} AS SELECT g AS id, (g * 13) % {big} + 1 AS ref, "
             f"md5((g + {i})::text) AS a, md5((g * 5)::text) AS b "
             f"FROM generate_series(1, {side}) g" for i in range(6)]
    post = ["ALTER TABLE dominant ADD PRIMARY KEY (id)", "CREATE INDEX ON dominant (c)"]
    post += [f"ALTER TABLE side_{i} ADD PRIMARY KEY (id)" for i in range(6)]
    post += ["ALTER TABLE side_0 ADD FOREIGN KEY (ref) REFERENCES dominant (id)"]
    return data, post


def _many_small(scale: float) -> tuple[list[str], list[str]]:
    n = int(12_500 * scale)
    data = [f"CREATE TABLE small_{i:03d} AS SELECT g AS id, md5((g + {i})::text) AS a, "
            f"md5((g * 3)::text) AS b, g % 100 AS c "
            f"FROM generate_series(1, {n + (i % 7) * n // 10}) g" for i in range(200)]
    post = [f"ALTER TABLE small_{i:03d} ADD PRIMARY KEY (id)" for i in range(0, 200, 2)]
    return data, post


def _wide_compressible(scale: float) -> tuple[list[str], list[str]]:
    base = int(425_000 * scale)
    data = []
    for i, f in enumerate((1.3, 1.1, 0.9, 0.7)):
        # ~600 bytes a row (stays in the heap, under the TOAST threshold),
        # repetitive log-like text: gzip shrinks it ~15x and runs fast
        data.append(
            f"CREATE TABLE wc_{i} AS SELECT g AS id, g % 100 AS k, "
            f"repeat('event=login user=' || (g % 1000) || ' host=db' || (g % 17) || "
            f"' status=ok ', 8) || md5(g::text) || repeat(' lorem ipsum dolor sit amet', 6) "
            f"AS t FROM generate_series(1, {int(base * f)}) g")
    post = [f"ALTER TABLE wc_{i} ADD PRIMARY KEY (id)" for i in range(4)]
    post += ["CREATE INDEX ON wc_0 (k)", "CREATE INDEX ON wc_2 (k)"]
    return data, post


def _wide_random(scale: float) -> tuple[list[str], list[str]]:
    base = int(140_000 * scale)
    md5s = " || ".join(["md5(random()::text)"] * 8)
    raw = " || ".join(["md5(random()::text)"] * 4)
    data = []
    for i, f in enumerate((1.3, 1.1, 0.9, 0.7)):
        # ~400 bytes a row: 256 random hex chars + 64 random bytes (dumped as
        # hex): gzip gets under 2x and runs slowly
        data.append(f"CREATE TABLE wr_{i} AS SELECT g AS id, {md5s} AS t, "
                    f"decode({raw}, 'hex') AS b FROM generate_series(1, {int(base * f)}) g")
    post = [f"ALTER TABLE wr_{i} ADD PRIMARY KEY (id)" for i in range(4)]
    post += ["CREATE INDEX ON wr_0 (t)", "CREATE INDEX ON wr_1 (t)"]
    return data, post


def _thousands_small(scale: float) -> tuple[list[str], list[str]]:
    # 3000 tables of a few rows with a serial primary key: object-bound (the
    # leader's catalog and schema work, items handed out one by one)
    n = int(3000 * scale)
    data = [f"DO $$ BEGIN FOR i IN {a}..{min(n, a + 499)} LOOP EXECUTE format('CREATE TABLE "
            "ts_%s (id serial PRIMARY KEY, v text); INSERT INTO ts_%s (v) SELECT md5(g::text) "
            "FROM generate_series(1, 5) g', i, i); END LOOP; END $$"
            for a in range(1, n + 1, 500)]
    return data, []


def _toast_heavy(scale: float) -> tuple[list[str], list[str]]:
    # 4 KB of poorly compressible text a row, stored out of line (TOAST): the
    # heap's relpages hide most of the data
    base = int(30_000 * scale)
    body = " || ".join(["md5(random()::text)"] * 128)
    data = [f"CREATE TABLE th_{i} (id int PRIMARY KEY, t text)" for i in range(4)]
    data += [f"ALTER TABLE th_{i} ALTER COLUMN t SET STORAGE EXTERNAL" for i in range(4)]
    data += [f"INSERT INTO th_{i} SELECT g, {body} FROM generate_series(1, {int(base * f)}) g"
             for i, f in enumerate((1.4, 1.0, 0.8, 0.6))]
    return data, []


def _typical(scale: float) -> tuple[list[str], list[str]]:
    # one large table, eight middling ones, 200 small ones, an index
    big, mid, small = int(1_000_000 * scale), int(125_000 * scale), int(500 * scale)
    data = [f"CREATE TABLE ty_big AS SELECT g AS id, md5(g::text) AS a, g % 1000 AS c "
            f"FROM generate_series(1, {big}) g"]
    data += [f"CREATE TABLE ty_mid_{i} AS SELECT g AS id, md5((g + {i})::text) AS a "
             f"FROM generate_series(1, {mid}) g" for i in range(8)]
    data += [f"CREATE TABLE ty_small_{i:03d} AS SELECT g AS id, md5(g::text) AS a "
             f"FROM generate_series(1, {small}) g" for i in range(200)]
    post = ["ALTER TABLE ty_big ADD PRIMARY KEY (id)", "CREATE INDEX ON ty_big (c)"]
    return data, post


def _many_indexes(scale: float) -> tuple[list[str], list[str]]:
    # six tables, each with a primary key and five more indexes (ints, a
    # composite, text, a timestamp, a partial expression): the builds, not
    # the data, are most of a restore
    n = int(250_000 * scale)
    data = [f"CREATE TABLE mi_{i} AS SELECT g AS id, g % 5000 AS a, (g * 7) % 100000 AS b, "
            f"md5(g::text) AS t, timestamp '2025-01-01' - g * interval '1 minute' AS ts "
            f"FROM generate_series(1, {int(n * f)}) g"
            for i, f in enumerate((1.3, 1.1, 1.0, 0.9, 0.8, 0.7))]
    post = []
    for i in range(6):
        post += [f"ALTER TABLE mi_{i} ADD PRIMARY KEY (id)", f"CREATE INDEX ON mi_{i} (a)",
                 f"CREATE INDEX ON mi_{i} (b, a)", f"CREATE INDEX ON mi_{i} (t)",
                 f"CREATE INDEX ON mi_{i} (ts)",
                 f"CREATE INDEX ON mi_{i} (lower(t)) WHERE a < 500"]
    return data, post


def _partitioned_fk(scale: float) -> tuple[list[str], list[str]]:
    # customers, orders and order lines; orders and lines partitioned by
    # quarter (8 partitions each), foreign keys from lines to orders and from
    # orders to customers: a restore validates them at the end
    cust, orders = int(100_000 * scale), int(600_000 * scale)
    parts = []
    for t in ("orders", "order_lines"):
        for q in range(8):
            y, m = 2024 + q // 4, 1 + 3 * (q % 4)
            y2, m2 = (y, m + 3) if m < 10 else (y + 1, 1)
            parts.append(f"CREATE TABLE {t}_q{q} PARTITION OF {t} FOR VALUES FROM "
                         f"('{y}-{m:02d}-01') TO ('{y2}-{m2:02d}-01')")
    day = "date '2024-01-01' + ({o} % 730)::int"
    data = ["CREATE TABLE customers (id int PRIMARY KEY, name text, email text)",
            f"INSERT INTO customers SELECT g, 'customer ' || g, md5(g::text) || '@example.com' "
            f"FROM generate_series(1, {cust}) g",
            "CREATE TABLE orders (id bigint, customer_id int, placed date, total numeric(12,2), "
            "note text) PARTITION BY RANGE (placed)",
            "CREATE TABLE order_lines (order_id bigint, placed date, line int, sku int, qty int, "
            "price numeric(10,2)) PARTITION BY RANGE (placed)", *parts,
            f"INSERT INTO orders SELECT g, 1 + (g::bigint * 7919) % {cust}, {day.format(o='g')}, "
            f"(g % 100000) / 100.0, md5(g::text) FROM generate_series(1, {orders}) g",
            f"INSERT INTO order_lines SELECT o, {day.format(o='o')}, l, (o * 31 + l) % 50000, "
            f"1 + l, ((o + l) % 10000) / 100.0 FROM generate_series(1, {orders}) o, "
            "generate_series(1, 2) l"]
    post = ["ALTER TABLE orders ADD PRIMARY KEY (id, placed)",
            "ALTER TABLE order_lines ADD PRIMARY KEY (order_id, placed, line)",
            "CREATE INDEX ON orders (customer_id)",
            "ALTER TABLE orders ADD FOREIGN KEY (customer_id) REFERENCES customers (id)",
            "ALTER TABLE order_lines ADD FOREIGN KEY (order_id, placed) "
            "REFERENCES orders (id, placed)"]
    return data, post


SHAPES = {
    "equal": _equal,
    "dominant": _dominant,
    "many-small": _many_small,
    "wide-compressible": _wide_compressible,
    "wide-random": _wide_random,
    "thousands-small": _thousands_small,
    "toast-heavy": _toast_heavy,
    "typical": _typical,
    "many-indexes": _many_indexes,
    "partitioned-fk": _partitioned_fk,
}
# shapes no constant or rule of the advice was tuned on (report them apart)
HELD_OUT = ("thousands-small", "toast-heavy", "typical", "many-indexes", "partitioned-fk")


def dbname(shape: str) -> str:
    return "s_" + shape.replace("-", "_")


def build_shape(cl: Any, shape: str, scale: float) -> dict[str, Any]:
    db = dbname(shape)
    t0 = time.perf_counter()
    cl.psql(f"CREATE DATABASE {db}")
    data, post = SHAPES[shape](scale)
    if shape == "thousands-small":  # one transaction per 500 tables (the lock table)
        for stmt in data:
            cl.psql(stmt, dbname=db)
    else:
        cl.psql(";\n".join(data), dbname=db)
    if post:
        cl.psql(";\n".join(post), dbname=db)
    cl.psql("VACUUM ANALYZE", dbname=db)
    rows = cl.psql(
        "SELECT count(*), coalesce(sum(c.relpages), 0), "
        "coalesce(sum(coalesce(t.relpages, 0)), 0), coalesce(max(c.relpages), 0), "
        "count(*) FILTER (WHERE c.relpages = 0), current_setting('block_size') "
        "FROM pg_class c LEFT JOIN pg_class t ON t.oid = c.reltoastrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'r' AND n.nspname = 'public'", dbname=db).strip().split("|")
    tables, heap, toast, biggest, unset, bs = (int(x) for x in rows)
    if unset:
        raise SystemExit(f"{shape}: {unset} tables with relpages = 0 after VACUUM ANALYZE")
    idx = int(cl.psql("SELECT count(*) FROM pg_indexes WHERE schemaname = 'public'",
                      dbname=db).strip())
    return {"db": db, "tables": tables, "indexes": idx,
            "heap_bytes": (heap + toast) * bs, "largest_table_bytes": biggest * bs,
            "largest_share": round(biggest / max(1, heap + toast), 3),
            "build_s": round(time.perf_counter() - t0, 2)}


# --------------------------------------------------------------------------
# running things


def venv_python() -> str:
    p = REPO / ".venv" / "bin" / "python"
    return str(p) if p.exists() else sys.executable


def run_timed(cmd: list[str], env: dict[str, str], what: str) -> float:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, check=False)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SystemExit(f"{what} failed (exit {res.returncode}): {last}")
    return wall


def dir_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def fresh_dir(p: Path) -> None:
    shutil.rmtree(p, ignore_errors=True)


def orders(jobs: list[int], repeats: int) -> list[list[int]]:
    """The order of J for each repeat: ascending, then descending, then both
    again rotated by one, and so on (1234, 4321, 2341, 1432, ... for 1-4),
    so no J always runs first, last, or after the same one."""
    out = []
    for r in range(repeats):
        k = (r // 2) % len(jobs)
        o = jobs[k:] + jobs[:k]
        out.append(o[::-1] if r % 2 else o)
    return out


def shape_archive(cl: Any, shape: str, scale: float, work: Path
                  ) -> tuple[dict[str, Any], Path]:
    """A shape built in cl and dumped (-Fd -j 2, default compression) to
    work/archive: (the shape's facts, the archive)."""
    info = build_shape(cl, shape, scale)
    archive = work / "archive"
    subprocess.run(dump_cmd(cl, info["db"], 2, archive, None), env=cl.env(), check=True)
    return info, archive


def dump_cmd(cl: Any, db: str, j: int, out: Path, compress: str | None) -> list[str]:
    cmd = [cl.client("pg_dump"), "-Fd", "-j", str(j), "-f", str(out)]
    if compress is not None:
        cmd += ["-Z", compress]
    return cmd + [db]


def sweep_dump(cl: Any, db: str, jobs: list[int], repeats: int, work: Path,
               compress: str | None, log: Any) -> dict[str, Any]:
    env = cl.env()
    out = work / "sweep"
    times: dict[int, list[float]] = {j: [] for j in jobs}
    runs = []
    for r, order in enumerate(orders(jobs, repeats)):
        for j in order:
            fresh_dir(out)
            t = run_timed(dump_cmd(cl, db, j, out, compress), env, f"pg_dump -j {j} {db}")
            times[j].append(t)
            runs.append({"repeat": r, "jobs": j, "wall_s": round(t, 3)})
            log(f"    dump    j={j} rep {r + 1}: {t:6.2f} s")
    fresh_dir(out)
    return {"runs": runs, "times": {str(j): [round(t, 3) for t in ts] for j, ts in times.items()},
            "median_s": {str(j): round(median(ts), 3) for j, ts in times.items()}}


def in_sections(archive: Path) -> bool:
    """Whether the advice would give -j 2+ as four steps (pre-data, then
    with -j data, post-data but the early foreign keys, those keys): the
    archive has a foreign key that pg_restore -j may add before its
    partitions' data (docs/advise.md)."""
    from pgparmon.advise.inventory import restore_inventory
    return bool(restore_inventory(str(archive)).early_fks)


def restore_lists(cl: Any, archive: Path) -> tuple[Path, Path]:
    """The advice's two list files (every item but the early foreign keys;
    those keys), from `pg_restore -l` split as the advice's command does."""
    from pgparmon.advise.inventory import restore_inventory
    from pgparmon.jobs.restore_list import split_ids
    listing = subprocess.run([cl.client("pg_restore"), "-l", str(archive)], env=cl.env(),
                             capture_output=True, text=True, check=True).stdout
    rest, fks = split_ids(listing, restore_inventory(str(archive)).early_fk_ids)
    out = archive.parent / f"{archive.name}.rest.list", archive.parent / f"{archive.name}.fk.list"
    out[0].write_text(rest)
    out[1].write_text(fks)
    return out


def restore_cmds(cl: Any, archive: Path, target: str, j: int,
                 lists: tuple[Path, Path] | None) -> list[list[str]]:
    """The restore the advice gives at J: one pg_restore -j J, or with
    `lists` (restore_lists) at J >= 2 its four steps."""
    pr = cl.client("pg_restore")
    if lists is None or j < 2:
        return [[pr, "-j", str(j), "-d", target, str(archive)]]
    jj = ["-j", str(j)]
    return [[pr, "--section=pre-data", "-d", target, str(archive)],
            [pr, *jj, "--section=data", "-d", target, str(archive)],
            [pr, *jj, "--section=post-data", "-L", str(lists[0]), "-d", target, str(archive)],
            [pr, *jj, "-L", str(lists[1]), "-d", target, str(archive)]]


def sweep_restore(cl: Any, archive: Path, db: str, jobs: list[int], repeats: int,
                  log: Any) -> dict[str, Any]:
    """pg_restore -j J over J; at J >= 2 the command the advice gives, in
    four steps when `in_sections` (the time is the four together)."""
    sections = in_sections(archive)
    lists = restore_lists(cl, archive) if sections else None
    env = cl.env()
    times: dict[int, list[float]] = {j: [] for j in jobs}
    runs = []
    for r, order in enumerate(orders(jobs, repeats)):
        for j in order:
            target = f"{db}_r"
            cl.psql(f"DROP DATABASE IF EXISTS {target}")
            cl.psql(f"CREATE DATABASE {target}")
            try:
                t = sum(run_timed(cmd, env, f"pg_restore -j {j} into {target}")
                        for cmd in restore_cmds(cl, archive, target, j, lists))
            finally:
                cl.psql(f"DROP DATABASE IF EXISTS {target}")
            times[j].append(t)
            runs.append({"repeat": r, "jobs": j, "wall_s": round(t, 3)})
            log(f"    restore j={j} rep {r + 1}: {t:6.2f} s")
    return {"runs": runs, "sections": sections,
            "times": {str(j): [round(t, 3) for t in ts] for j, ts in times.items()},
            "median_s": {str(j): round(median(ts), 3) for j, ts in times.items()}}


# --------------------------------------------------------------------------
# the advice (everything that touches `pgparmon advise` is here)


def advise_available() -> tuple[bool, str]:
    res = subprocess.run([venv_python(), "-m", "pgparmon", "advise", "--help"],
                         capture_output=True, text=True, check=False)
    if res.returncode == 0:
        return True, ""
    last = ((res.stderr or res.stdout).strip().splitlines() or ["(no message)"])[-1]
    return False, last


def run_advise(cl: Any, args: list[str]) -> dict[str, Any]:
    """`pgparmon advise ARGS --json` against the cluster (connection settings
    through PG* variables, as a user's environment would hold them). Returns
    {argv, rc, wall_s, advice (the parsed JSON or None), error}."""
    argv = ["advise", *args, "--json"]
    t0 = time.perf_counter()
    res = subprocess.run([venv_python(), "-m", "pgparmon", *argv], capture_output=True,
                         text=True, env=cl.env(), check=False)
    wall = time.perf_counter() - t0
    rec: dict[str, Any] = {"argv": argv, "rc": res.returncode, "wall_s": round(wall, 3),
                           "advice": None, "error": None}
    try:
        rec["advice"] = json.loads(res.stdout)
    except ValueError:
        lines = (res.stderr.strip() or res.stdout.strip()).splitlines()
        rec["error"] = lines[-1] if lines else f"exit {res.returncode}, no output"
    if res.returncode != 0 and rec["error"] is None:
        rec["error"] = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
    return rec


def advise_dump(cl: Any, db: str, target: Path, mode: str,
                a: argparse.Namespace) -> dict[str, Any]:
    target.mkdir(parents=True, exist_ok=True)  # empty, as pg_dump -Fd accepts it
    args = ["-d", db, "--target", str(target), "--max-jobs", str(max(a.job_list))]
    args += _mode_args(mode, a)
    rec = run_advise(cl, args)
    left = sorted(str(p.relative_to(target)) for p in target.rglob("*"))
    rec["target_left"] = left[:20]  # what the probe left behind (should be nothing)
    fresh_dir(target)
    return rec


def advise_restore(cl: Any, archive: Path, db: str, mode: str,
                   a: argparse.Namespace) -> dict[str, Any]:
    target = f"{db}_adv"
    cl.psql(f"DROP DATABASE IF EXISTS {target}")
    cl.psql(f"CREATE DATABASE {target}")
    try:
        args = ["-d", target, "--archive", str(archive), "--max-jobs", str(max(a.job_list))]
        args += _mode_args(mode, a)
        rec = run_advise(cl, args)
        tables = cl.psql("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON "
                         "n.oid = c.relnamespace WHERE n.nspname NOT IN "
                         "('pg_catalog', 'information_schema', 'pg_toast') "
                         "AND n.nspname NOT LIKE 'pg_temp%' AND "
                         "n.nspname NOT LIKE 'pg_toast_temp%'", dbname=target).strip()
        rec["target_relations_left"] = int(tables)
    finally:
        cl.psql(f"DROP DATABASE IF EXISTS {target}")
    return rec


def modes(a: argparse.Namespace) -> list[str]:
    """static: no --probe; probe: --probe with its default budget (3% of the
    predicted run, so skipped on runs this short); probe-Ns: --probe
    --probe-seconds N, a forced probe."""
    out = ["static", "probe"]
    if a.probe_seconds:
        out.append(f"probe-{a.probe_seconds:g}s")
    return out


def _mode_args(mode: str, a: argparse.Namespace) -> list[str]:
    args = []
    if a.compress is not None:
        args += ["--compress", a.compress]
    if mode.startswith("probe"):
        args.append("--probe")
        if mode != "probe":
            args += ["--probe-seconds", f"{a.probe_seconds:g}"]
    return args


# --------------------------------------------------------------------------
# scoring


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def tied(rec_runs: list[float], best_runs: list[float]) -> bool:
    """The recommended j is as good as the best within the sweep's own
    spread: its fastest run is no slower than the best j's slowest (their
    ranges of repeats overlap).  With one run each, only equal times tie."""
    return bool(rec_runs and best_runs) and min(rec_runs) <= max(best_runs)


def score(shape: str, op: str, mode: str, recs: list[dict[str, Any]],
          med: dict[str, float], times: dict[str, list[float]] | None = None
          ) -> dict[str, Any]:
    """One scenario: the first advice of `recs` against the sweep's medians
    (and, with `times`, every run: a recommendation within the spread of
    the repeats is a tie, `regret_ties` 1.0)."""
    measured = {int(j): t for j, t in med.items()}
    runs = {int(j): list(ts) for j, ts in (times or {}).items()}
    grid = sorted(measured)
    best_j = min(grid, key=lambda j: measured[j])
    row: dict[str, Any] = {"shape": shape, "op": op, "mode": mode,
                           "best_jobs": best_j, "best_s": measured[best_j]}
    adv = recs[0]["advice"] if recs else None
    row["advise_wall_s"] = recs[0]["wall_s"] if recs else None
    if not adv:
        row["error"] = recs[0]["error"] if recs else "advise not run"
        return row
    rec_j = adv.get("recommended_jobs")
    row.update(recommended_jobs=rec_j, fastest_jobs=adv.get("fastest_jobs"),
               basis=adv.get("basis"), confidence=adv.get("confidence"),
               warnings=[w.get("code") for w in adv.get("warnings", []) if isinstance(w, dict)])
    preds = {int(p["jobs"]): _num(p.get("wall_s")) for p in adv.get("predictions", [])
             if isinstance(p, dict) and "jobs" in p}
    bott = {int(p["jobs"]): p.get("bottleneck") for p in adv.get("predictions", [])
            if isinstance(p, dict) and "jobs" in p}
    row["predictions"] = {str(j): preds[j] for j in sorted(preds)}
    row["bottleneck"] = bott.get(rec_j) if isinstance(rec_j, int) else None
    row["measured_s"] = measured.get(rec_j) if isinstance(rec_j, int) else None
    if row["measured_s"] is not None:
        row["regret"] = round(row["measured_s"] / measured[best_j], 4)
        row["tie"] = rec_j == best_j or tied(runs.get(rec_j, []), runs.get(best_j, []))
        row["regret_ties"] = 1.0 if row["tie"] else row["regret"]
        half = max(1, rec_j // 2)
        row["half_jobs"] = half
        row["not_worse_than_half"] = measured[rec_j] <= measured[half]
    else:
        row["regret"] = None
        row["note"] = f"recommended j={rec_j} outside the sweep {grid}"
    pred = preds.get(rec_j) if isinstance(rec_j, int) else None
    if pred is None:
        pred = _num(adv.get("predicted_wall_s"))
    row["predicted_s"] = pred
    if pred is not None and row["measured_s"]:
        row["prediction_error"] = round(abs(pred - row["measured_s"]) / row["measured_s"], 4)
        row["prediction_bias"] = round((pred - row["measured_s"]) / row["measured_s"], 4)
    else:
        row["prediction_error"] = None
    # prediction error at every swept j (how the whole curve fits)
    row["prediction_error_by_j"] = {
        str(j): round(abs(p - measured[j]) / measured[j], 4)
        for j in grid if (p := preds.get(j)) is not None}
    probe = adv.get("probe") if isinstance(adv.get("probe"), dict) else None
    if mode.startswith("probe"):
        secs = _num(probe.get("seconds")) if probe else None
        budget = _num(probe.get("budget_s")) if probe else None
        limit = min(0.03 * pred, 60.0) if pred is not None else 60.0
        codes = {w.get("code") for w in adv.get("warnings", []) if isinstance(w, dict)}
        status = ("ran" if secs is not None else "failed" if "probe_failed" in codes
                  else "unavailable" if "probe_unavailable" in codes
                  else "skipped" if "probe_skipped" in codes else "no probe in the JSON")
        row["probe"] = {
            "status": status, "seconds": secs, "budget_s": budget,
            "limit_3pct_or_60s": round(limit, 3),
            "within_budget": (secs <= budget) if secs is not None and budget is not None
            else None,
            "within_3pct_or_60s": (secs <= limit) if secs is not None else None,
        }
    js = [r["advice"].get("recommended_jobs") for r in recs if r.get("advice")]
    row["repeat_recommendations"] = js
    if len(js) > 1 and all(isinstance(j, int) for j in js):
        steps = sorted(set(grid) | set(js))
        idx = [steps.index(j) for j in js]
        row["repeats_agree"] = max(idx) - min(idx) <= 1
    return row


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def block(rs: list[dict[str, Any]]) -> dict[str, Any]:
        regrets = [r["regret"] for r in rs if r.get("regret") is not None]
        tied_r = [r.get("regret_ties", r["regret"]) for r in rs if r.get("regret") is not None]
        errs = [r["prediction_error"] for r in rs if r.get("prediction_error") is not None]
        halves = [r["not_worse_than_half"] for r in rs if "not_worse_than_half" in r]
        probes = [r["probe"] for r in rs if r.get("probe") and r["probe"]["seconds"] is not None]
        out: dict[str, Any] = {
            "scenarios": len(rs), "scored": len(regrets),
            "median_regret": round(median(regrets), 4) if regrets else None,
            "worst_regret": round(max(regrets), 4) if regrets else None,
            # a recommendation within the spread of the repeats counts as a tie
            "median_regret_ties": round(median(tied_r), 4) if tied_r else None,
            "worst_regret_ties": round(max(tied_r), 4) if tied_r else None,
            "median_prediction_error": round(median(errs), 4) if errs else None,
            "worst_prediction_error": round(max(errs), 4) if errs else None,
            "never_worse_than_half": all(halves) if halves else None,
            "probes_run": len(probes),
            "probes_skipped": sum(1 for r in rs if r.get("probe") and
                                  r["probe"]["seconds"] is None),
            "probes_failed": sum(1 for r in rs if r.get("probe") and
                                 r["probe"].get("status") in ("failed", "unavailable")),
            "probe_within_budget": (all(p["within_budget"] is not False for p in probes)
                                    if probes else None),
            "probe_within_3pct_or_60s": (all(p["within_3pct_or_60s"] for p in probes)
                                         if probes else None),
        }
        agree = [r["repeats_agree"] for r in rs if "repeats_agree" in r]
        out["repeats_agree"] = all(agree) if agree else None
        if regrets:
            out["meets"] = {
                "median_regret": out["median_regret_ties"] <= TARGETS["median_regret"],
                "worst_regret": out["worst_regret_ties"] <= TARGETS["worst_regret"],
                "prediction_error": (out["median_prediction_error"] is not None and
                                     out["median_prediction_error"]
                                     <= TARGETS["prediction_error"]),
            }
        return out

    # a --probe whose probe did not run gives the static advice again: count it once
    distinct = [r for r in rows if not (r["mode"] != "static" and r.get("probe") and
                                        r["probe"]["seconds"] is None)]
    s = {"all": block(distinct)}
    for k in ("probes_skipped", "probes_failed"):
        s["all"][k] = block(rows)[k]
    for mode in dict.fromkeys(r["mode"] for r in rows):
        s[mode] = block([r for r in rows if r["mode"] == mode])
    for op in ("dump", "restore"):
        s[op] = block([r for r in rows if r["op"] == op])
    held = [r for r in distinct if r["shape"] in HELD_OUT]
    if held:
        s["held_out"] = block(held)
        # the issue's target: the probe's prediction error on held-out shapes
        # (the probes that ran and measured, whatever their mode)
        measured = [r for r in held if r["mode"] != "static" and r.get("basis") == "probe"]
        if measured:
            s["held_out_probe"] = block(measured)
        s["tuned_on"] = block([r for r in distinct if r["shape"] not in HELD_OUT])
    return s


# --------------------------------------------------------------------------
# output


def _shape(r: dict[str, Any]) -> str:
    return r["shape"] + (" (held out)" if r["shape"] in HELD_OUT else "")


def _f(x: Any, fmt: str = "{:.1f}", none: str = "-") -> str:
    return none if x is None else fmt.format(x)


def markdown(rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    head = ("| shape | op | advice | rec j | t(rec) | best j | t(best) | regret (tie) | "
            "predicted | error | <= t(j/2) | probe s / budget / limit | advise s |")
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {_shape(r)} | {r['op']} | {r['mode']} | - | - | "
                         f"{r['best_jobs']} | {r['best_s']:.1f} s | - | - | - | - | - | "
                         f"{r['error']} |")
            continue
        p = r.get("probe")
        probe = "-" if not p else (f"{_f(p['seconds'], none=p.get('status', 'skipped'))} / "
                                   f"{_f(p['budget_s'])} / {_f(p['limit_3pct_or_60s'])}")
        half = r.get("not_worse_than_half")
        lines.append(
            f"| {_shape(r)} | {r['op']} | {r['mode']} ({r.get('basis')}) | "
            f"{r.get('recommended_jobs')} | {_f(r.get('measured_s'), '{:.1f} s')} | "
            f"{r['best_jobs']} | {r['best_s']:.1f} s | {_f(r.get('regret'), '{:.3f}')}"
            f"{' (tie)' if r.get('tie') and r.get('regret', 1.0) > 1.0 else ''} | "
            f"{_f(r.get('predicted_s'), '{:.1f} s')} | "
            f"{_f(r.get('prediction_error'), '{:.1%}')} | "
            f"{'-' if half is None else ('yes' if half else 'NO')} | {probe} | "
            f"{_f(r.get('advise_wall_s'))} |")
    s = summary["all"]
    t = TARGETS
    lines.append("")
    if s["scored"]:
        m = s["meets"]
        lines.append(
            f"Over {s['scored']} distinct scenarios (a --probe whose probe did not run repeats "
            f"the static advice and counts once): "
            f"median regret **{s['median_regret_ties']:.3f}** with ties within the repeats' "
            f"spread ({s['median_regret']:.3f} on medians alone; target <= "
            f"{t['median_regret']}: {'met' if m['median_regret'] else 'NOT met'}), worst "
            f"**{s['worst_regret_ties']:.3f}** ({s['worst_regret']:.3f}; target <= "
            f"{t['worst_regret']}: {'met' if m['worst_regret'] else 'NOT met'}), "
            f"median prediction error **{_f(s['median_prediction_error'], '{:.1%}')}** "
            f"(target <= {t['prediction_error']:.0%}: "
            f"{'met' if m['prediction_error'] else 'NOT met'}); never worse than j/2: "
            f"{s['never_worse_than_half']}; probes run {s['probes_run']} (not run "
            f"{s['probes_skipped']}, of which failed {s['probes_failed']}), "
            f"within their budget: {s['probe_within_budget']}, "
            f"within min(3% of the predicted run, 60 s): {s['probe_within_3pct_or_60s']}; "
            f"repeated advice agrees: {s['repeats_agree']}.")
        for k, b in summary.items():
            if k == "all":
                continue
            if b["scored"]:
                lines.append(f"- {k}: median regret {b['median_regret_ties']:.3f} "
                             f"({b['median_regret']:.3f}), worst "
                             f"{b['worst_regret_ties']:.3f} ({b['worst_regret']:.3f}), "
                             "median prediction error "
                             f"{_f(b['median_prediction_error'], '{:.1%}')} "
                             f"({b['scored']} scenarios)")
    else:
        lines.append("No advice scored (advise not available or failed).")
    return "\n".join(lines)


def sweep_table(shapes: dict[str, Any]) -> str:
    lines = ["| shape | op | " + " | ".join(f"j={j}" for j in _all_j(shapes)) + " |",
             "|---|---|" + "---|" * len(_all_j(shapes))]
    for name, s in shapes.items():
        for op in ("dump", "restore"):
            if op not in s:
                continue
            med = s[op]["median_s"]
            best = min(med.values())
            cells = []
            for j in _all_j(shapes):
                t = med.get(str(j))
                cells.append("-" if t is None else (f"**{t:.2f}**" if t == best else f"{t:.2f}"))
            lines.append(f"| {name} | {op} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _all_j(shapes: dict[str, Any]) -> list[int]:
    js: set[int] = set()
    for s in shapes.values():
        for op in ("dump", "restore"):
            if op in s:
                js |= {int(j) for j in s[op]["median_s"]}
    return sorted(js)


def parse_jobs(spec: str) -> list[int]:
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            out |= set(range(int(lo), int(hi) + 1))
        elif part:
            out.add(int(part))
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"bad job list {spec!r} (e.g. 1-4 or 1,2,4,8)")
    return sorted(out)


# --------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES),
                    help=f"comma-separated, from: {', '.join(SHAPES)} (default: all)")
    ap.add_argument("--jobs", type=parse_jobs, default=None, dest="job_list",
                    help="the j to sweep, e.g. 1-4 or 1,2,4,8 (default 1-4)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed runs per j (default 3: medians, and the spread that makes a "
                         "tie), order of j interleaved")
    ap.add_argument("--advise-repeats", type=int, default=None,
                    help="advise calls per mode, to check repeated advice agrees (default 2)")
    ap.add_argument("--scale", type=float, default=1.0, help="data size factor (default 1)")
    ap.add_argument("--compress", default=None,
                    help="pg_dump -Z / advise --compress (default: pg_dump's default, gzip)")
    ap.add_argument("--probe-seconds", type=float, default=5.0,
                    help="also ask advise --probe --probe-seconds N, a forced probe (the "
                         "default budget, 3%% of the predicted run, skips the probe on runs "
                         "this short); default 5, 0: don't")
    ap.add_argument("--no-restore", action="store_true", help="dump only")
    ap.add_argument("--no-dump", action="store_true", help="restore only")
    ap.add_argument("--archive-format", choices=("d", "c"), default="d",
                    help="the archive the restores (and their advice) read: d, the warm-up "
                         "pg_dump -Fd (default); c, a pg_dump -Fc of the same database")
    ap.add_argument("--no-advise", action="store_true", help="sweeps only")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: one shape (equal unless --shapes), j 1-2, one repeat, "
                         "one advise call per mode; writes to a temp file unless --out")
    ap.add_argument("--report", metavar="FILE", default=None,
                    help="no runs: score and print the raw results of an earlier run again")
    ap.add_argument("--out", default=None,
                    help="raw results (default docs/bench/advise_accuracy.json)")
    a = ap.parse_args()
    if a.report:
        report_again(Path(a.report))
        return
    shapes = [s.strip() for s in a.shapes.split(",") if s.strip()]
    if a.quick:
        if a.shapes == ",".join(SHAPES):
            shapes = ["equal"]
        a.job_list = a.job_list or [1, 2]
        a.repeats = a.repeats or 1
        a.advise_repeats = a.advise_repeats or 1
    a.job_list = a.job_list or [1, 2, 3, 4]
    a.repeats = a.repeats or 3
    a.advise_repeats = a.advise_repeats or 2
    bad = [s for s in shapes if s not in SHAPES]
    if bad:
        raise SystemExit(f"unknown shape(s): {', '.join(bad)} (known: {', '.join(SHAPES)})")
    if a.out is None:
        a.out = (str(Path(tempfile.gettempdir()) / "advise_accuracy.quick.json") if a.quick
                 else str(REPO / "docs" / "bench" / "advise_accuracy.json"))

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    have_advise = False
    if not a.no_advise:
        have_advise, why = advise_available()
        if not have_advise:
            log(f"advise not available ({why}): running the sweeps only")
    # byte-compile as an installed wheel would be, so advise's wall time is not
    # Python compiling the package (this machine sets PYTHONDONTWRITEBYTECODE)
    compileall.compile_dir(str(REPO / "pgparmon"), quiet=1)

    t_start = time.perf_counter()
    cl = start_cluster(prefix="pgparmon-bench-")
    work = Path(tempfile.mkdtemp(prefix="pgparmon-bench-out-"))
    if os.geteuid() == 0:
        shutil.chown(work, "postgres")
    doc: dict[str, Any] = {
        "benchmark": "advise_accuracy", "machine": machine(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": {"shapes": shapes, "jobs": a.job_list, "repeats": a.repeats,
                     "advise_repeats": a.advise_repeats, "scale": a.scale,
                     "compress": a.compress, "probe_seconds": a.probe_seconds,
                     "quick": a.quick, "archive_format": a.archive_format,
                     "no_dump": a.no_dump},
        "targets": TARGETS, "shapes": {}, "scenarios": []}
    try:
        doc["server"] = cl.psql("SHOW server_version").strip()
        for shape in shapes:
            log(f"== {shape}")
            t_shape = time.perf_counter()
            info = build_shape(cl, shape, a.scale)
            db = info["db"]
            log(f"   built {info['tables']} tables, {info['heap_bytes'] / 1e6:.0f} MB heap, "
                f"largest {info['largest_share']:.0%}, in {info['build_s']} s")
            s: dict[str, Any] = {"database": info, "phases_s": {}}
            doc["shapes"][shape] = s
            # the archive the restores read: also the untimed warm-up dump
            archive = work / f"{db}.archive"
            fresh_dir(archive)
            t = run_timed(dump_cmd(cl, db, 1, archive, a.compress), cl.env(),
                          f"warm-up pg_dump {db}")
            s["warmup_dump_s"] = round(t, 3)
            s["archive_bytes"] = dir_bytes(archive)
            log(f"   warm-up dump j=1 {t:.2f} s, archive {s['archive_bytes'] / 1e6:.0f} MB")
            restore_from = archive
            if a.archive_format == "c":
                restore_from = work / f"{db}.fc"
                fc = [cl.client("pg_dump"), "-Fc", "-f", str(restore_from), db]
                if a.compress is not None:
                    fc[2:2] = ["-Z", a.compress]
                run_timed(fc, cl.env(), f"pg_dump -Fc {db}")
                s["custom_archive_bytes"] = restore_from.stat().st_size
                log(f"   the restores read a custom archive of "
                    f"{s['custom_archive_bytes'] / 1e6:.0f} MB")

            advice: dict[str, dict[str, list[dict[str, Any]]]] = {"dump": {}, "restore": {}}
            if have_advise:
                t0 = time.perf_counter()
                for mode in modes(a):
                    if not a.no_dump:
                        advice["dump"][mode] = [
                            advise_dump(cl, db, work / f"{db}.target", mode, a)
                            for _ in range(a.advise_repeats)]
                    if not a.no_restore:
                        advice["restore"][mode] = [
                            advise_restore(cl, restore_from, db, mode, a)
                            for _ in range(a.advise_repeats)]
                for op, by_mode in advice.items():
                    for mode, recs in by_mode.items():
                        r0 = recs[0]
                        got = (f"j={r0['advice'].get('recommended_jobs')} "
                               f"({r0['advice'].get('basis')})" if r0["advice"]
                               else f"error: {r0['error']}")
                        log(f"   advise {op:7} {mode:8}: {got}, {r0['wall_s']:.1f} s")
                s["phases_s"]["advise"] = round(time.perf_counter() - t0, 1)
            s["advice"] = advice

            if not a.no_dump:
                t0 = time.perf_counter()
                s["dump"] = sweep_dump(cl, db, a.job_list, a.repeats, work, a.compress, log)
                s["phases_s"]["dump_sweep"] = round(time.perf_counter() - t0, 1)
            if not a.no_restore:
                t0 = time.perf_counter()
                s["restore"] = sweep_restore(cl, restore_from, db, a.job_list, a.repeats, log)
                s["phases_s"]["restore_sweep"] = round(time.perf_counter() - t0, 1)
            fresh_dir(archive)
            if restore_from != archive:
                restore_from.unlink()
            cl.psql(f"DROP DATABASE {db}")
            s["phases_s"]["total"] = round(time.perf_counter() - t_shape, 1)

            if have_advise:
                for op in ("dump", "restore"):
                    if op not in s:
                        continue
                    for mode, recs in advice[op].items():
                        doc["scenarios"].append(score(shape, op, mode, recs,
                                                      s[op]["median_s"], s[op]["times"]))
            write_json(Path(a.out), doc)  # partial results survive an interruption
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)
    doc["summary"] = summarise(doc["scenarios"]) if doc["scenarios"] else None
    doc["total_s"] = round(time.perf_counter() - t_start, 1)
    write_json(Path(a.out), doc)
    print_report(doc)
    print(f"\n{doc['total_s']:.0f} s in all; raw results in {a.out}")


def print_report(doc: dict[str, Any]) -> None:
    st = doc["settings"]
    print(f"{doc['machine']}, PostgreSQL {doc.get('server')}, scale {st['scale']}, "
          f"{st['repeats']} repeat(s) per j, compression {st['compress'] or 'default'}\n")
    print("Measured medians (s), best in bold:\n")
    print(sweep_table(doc["shapes"]))
    if doc.get("summary"):
        print()
        print(markdown(doc["scenarios"], doc["summary"]))


def report_again(path: Path) -> None:
    """Score the raw results of an earlier run again (after a change to the
    scoring) and print the tables; the file is not rewritten."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["scenarios"] = [score(shape, op, mode, recs, s[op]["median_s"], s[op].get("times"))
                        for shape, s in doc["shapes"].items()
                        for op in ("dump", "restore") if op in s
                        for mode, recs in s.get("advice", {}).get(op, {}).items()]
    doc["summary"] = summarise(doc["scenarios"]) if doc["scenarios"] else None
    print_report(doc)


if __name__ == "__main__":
    main()
