"""A COPY load's rate over time: what a growing index costs it (issue 26).

One `\\copy` stream of a CSV shaped like bench/bighost/sweep.py's COPY
file (`id,a,b,c`, b a text key 'customer N order <hex> status ... region
...': inserts land all over its btree) into `items (id bigint, a float8,
b text, c timestamptz)`:

  logged+index   logged, a btree on b, `psql -c "\\copy items FROM 'file' csv header"`
  logged+index (split)   the same through advise's command shape,
                 `tail -n +2 file | split -n r/1 --filter='psql -c "\\copy items FROM STDIN"'`
  logged         logged, no index
  unlogged+index unlogged, the btree on b

TRUNCATE and CHECKPOINT before each load; pg_stat_progress_copy's
bytes_processed is read every 0.5 s.  For each load: the rate over the
first and the last --window MB of the file and the average; --repeats
rounds, interleaved.  The cluster runs with fsync and full_page_writes on,
shared_buffers 1GB (table and index stay in memory), max_wal_size 16GB
(no checkpoint during a load), as the 16-core hosts' runs.  Raw samples
to docs/bench/copy_index_growth.json.

    .venv/bin/python bench/copy_index_growth.py --mb 450 --repeats 2   # ~5 min on 2 cores
    .venv/bin/python bench/copy_index_growth.py --loads "" --advise-jobs 1,2 \
        --out docs/bench/copy_index_growth_advise.json    # the probe against real loads
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psycopg
from common import machine, median, pgparmon, start_cluster, write_json
from copysplit import split_copy_cmd

OUT = Path(__file__).resolve().parent.parent / "docs" / "bench" / "copy_index_growth.json"
DB = "growbench"
SETTINGS = {"fsync": "on", "full_page_writes": "on", "synchronous_commit": "off",
            "shared_buffers": "1GB", "max_wal_size": "16GB", "checkpoint_timeout": "30min"}
BYTES_PER_ROW = 116.0  # sweep.py's CSV: 521 MB, 4.4 M rows
LOADS = {
    "logged+index": ("", True, "file"),
    "logged+index (split)": ("", True, "split"),
    "logged": ("", False, "file"),
    "unlogged+index": ("UNLOGGED ", True, "file"),
}


def make_csv(cl: object, path: Path, mb: float) -> int:
    """About mb MB of rows shaped like sweep.py's seeded tables, written by
    the server's COPY TO STDOUT through psql; returns the rows."""
    rows = int(mb * 1e6 / BYTES_PER_ROW)
    sql = ("COPY (SELECT g AS id, round((random() * 10000)::numeric, 2)::float8 AS a, "
           "'customer ' || (g % 5000) || ' order ' || substr(md5(g::text), 1, 20) "
           "|| ' status ' || (ARRAY['open','closed','pending','shipped','returned'])[1 + g % 5] "
           "|| ' region ' || (ARRAY['north','south','east','west'])[1 + (g / 7) % 4] "
           "|| ' ' || substr(md5((g % 1000)::text), 1, 12) AS b, "
           "timestamptz '2024-01-01 00:00:00+00' + g * interval '7 seconds' AS c "
           f"FROM generate_series(1, {rows}) g) TO STDOUT WITH (FORMAT csv, HEADER)")
    with open(path, "wb") as f:
        subprocess.run([cl.client("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", DB,  # type: ignore[attr-defined]
                        "-c", sql], check=True, env=cl.env(), stdout=f)  # type: ignore[attr-defined]
        f.flush()
        os.fsync(f.fileno())
    return rows


def sample(conninfo: str, t0: float, stop: threading.Event,
           out: list[tuple[float, int, int]]) -> None:
    """(seconds since t0, bytes_processed, tuples_processed) of the running
    COPY every 0.5 s."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute("SELECT bytes_processed, tuples_processed FROM "
                               "pg_stat_progress_copy WHERE command = 'COPY FROM'").fetchone()
            if row is not None:
                out.append((time.perf_counter() - t0, int(row[0]), int(row[1])))
            stop.wait(0.5)


def rate_between(samples: list[tuple[float, int, int]], lo: float, hi: float) -> float | None:
    """Bytes/s from the last sample at or before lo bytes (else the first)
    to the first at or past hi: a window at least lo..hi (a fast load passes
    40 MB between two samples)."""
    a = next((s for s in reversed(samples) if s[1] <= lo), samples[0] if samples else None)
    b = next((s for s in samples if s[1] >= hi), samples[-1] if samples else None)
    if a is None or b is None or b[0] <= a[0]:
        return None
    return (b[1] - a[1]) / (b[0] - a[0])


def load(cl: object, name: str, path: Path, size: int) -> dict[str, object]:
    unlogged, index, how = LOADS[name]
    table = "items_" + "".join(c if c.isalnum() else "_" for c in name)
    cl.psql(f"DROP TABLE IF EXISTS {table}; CREATE {unlogged}TABLE {table} (id bigint, "  # type: ignore[attr-defined]
            "a float8, b text, c timestamptz)" + (f"; CREATE INDEX ON {table} (b)" if index else ""),
            dbname=DB)
    cl.psql("CHECKPOINT", dbname=DB)  # type: ignore[attr-defined]
    psql = [cl.client("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", DB]  # type: ignore[attr-defined]
    if how == "split":
        cmd = ["/bin/sh", "-c", split_copy_cmd(psql, str(path), 1, table)]
    else:
        cmd = [*psql, "-c", f"\\copy {table} FROM {shlex.quote(str(path))} WITH (FORMAT csv, HEADER)"]
    samples: list[tuple[float, int, int]] = [(0.0, 0, 0)]  # the command's start
    stop = threading.Event()
    t0 = time.perf_counter()
    th = threading.Thread(target=sample, args=(cl.conninfo(DB), t0, stop, samples))  # type: ignore[attr-defined]
    th.start()
    subprocess.run(cmd, check=True, env=cl.env(), stdout=subprocess.DEVNULL)  # type: ignore[attr-defined]
    secs = time.perf_counter() - t0
    stop.set()
    th.join()
    # the end: the whole file (the header line aside) at the command's end
    samples.append((secs, size, samples[-1][2] if samples else 0))
    rel = cl.psql(f"SELECT pg_relation_size('{table}'), coalesce(pg_indexes_size('{table}'), 0)",  # type: ignore[attr-defined]
                  dbname=DB)
    heap, idx = (int(x) for x in rel.split("|"))
    cl.psql(f"DROP TABLE {table}", dbname=DB)  # type: ignore[attr-defined]
    return {"seconds": secs, "avg": size / secs, "heap_bytes": heap, "index_bytes": idx,
            "samples": samples}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=450.0)
    ap.add_argument("--window", type=float, default=40.0, help="MB at each end")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--loads", default=",".join(LOADS))
    ap.add_argument("--summary", metavar="JSON", help="print the table of a saved run")
    ap.add_argument("--advise-jobs", default="",
                    help="also: `advise --copy --probe-seconds S` into the logged, indexed "
                         "table, then real loads at these J (advise's command), e.g. 1,2")
    ap.add_argument("--probe-seconds", type=float, default=15.0)
    ap.add_argument("--out", default=str(OUT), help="the raw JSON's path")
    a = ap.parse_args()
    if a.summary:
        summary(json.loads(Path(a.summary).read_text()))
        return
    names = [n for n in a.loads.split(",") if n]
    adv_jobs = [int(j) for j in a.advise_jobs.split(",") if j]
    advised: dict[str, object] = {}
    tmp = Path(tempfile.mkdtemp(prefix="pgparmon-bench-grow-"))
    path = tmp / "items.csv"
    cl = start_cluster(prefix="pgparmon-bench-grow-", settings=SETTINGS)
    runs: dict[str, list[dict[str, object]]] = {n: [] for n in names}
    try:
        cl.psql(f"CREATE DATABASE {DB}")
        rows = make_csv(cl, path, a.mb)
        size = path.stat().st_size
        print(f"CSV {size / 1e6:.0f} MB, {rows} rows")
        w = a.window * 1e6
        for rep in range(a.repeats):
            for name in (names if rep % 2 == 0 else names[::-1]):
                r = load(cl, name, path, size)
                r["first"] = rate_between(r["samples"], 0, w)  # type: ignore[arg-type]
                r["last"] = rate_between(r["samples"], size - w, size)  # type: ignore[arg-type]
                runs[name].append(r)
                print(f"{name}: {r['seconds']:.1f} s, avg {r['avg'] / 1e6:.1f} MB/s, first "
                      f"{(r['first'] or 0) / 1e6:.1f}, last {(r['last'] or 0) / 1e6:.1f} MB/s, "
                      f"index {r['index_bytes'] / 1e6:.0f} MB, load {os.getloadavg()[0]:.2f}",  # type: ignore[operator]
                      flush=True)
        if adv_jobs:
            advised = advise_and_load(cl, path, size, adv_jobs, a.repeats, a.probe_seconds)
    finally:
        cl.stop()
        path.unlink(missing_ok=True)
        tmp.rmdir()
    doc = {"machine": machine(), "mb": a.mb, "bytes": size, "rows": rows,
           "window_mb": a.window, "settings": SETTINGS, "repeats": a.repeats,
           "load_average": os.getloadavg(), "runs": runs, "advise": advised}
    write_json(Path(a.out), doc)
    summary(doc)


def advise_and_load(cl: object, path: Path, size: int, jobs: list[int], repeats: int,
                    probe_s: float) -> dict[str, object]:
    """`advise --copy --probe-seconds probe_s` of the file into a logged
    table with the btree on b, then real loads at each J by advise's
    command; the predictions with the grown step and without it (the same
    probe, its grown step dropped) against the loads' medians."""
    from pgparmon.advise.copyadvice import copy_predictions, copy_probe_evidence
    from pgparmon.advise.probe.results import ProbeResult

    cl.psql("DROP TABLE IF EXISTS items; CREATE TABLE items (id bigint, a float8, b text, "  # type: ignore[attr-defined]
            "c timestamptz); CREATE INDEX ON items (b)", dbname=DB)
    conn = ["-h", str(cl.sockdir), "-p", str(cl.port), "-U", cl.superuser, "-d", DB]  # type: ignore[attr-defined]
    r = subprocess.run(pgparmon("advise", *conn, "--copy", str(path), "--table", "items",
                                "--header", "--max-jobs", str(max(jobs)), "--probe-seconds",
                                f"{probe_s:g}", "--json"),
                       capture_output=True, text=True, check=True)
    adv = json.loads(r.stdout)
    res = ProbeResult.from_json(adv["probe"])
    data = float(adv["copy"]["data_bytes"])
    without = copy_probe_evidence(dataclasses.replace(res, grown=None), os.cpu_count() or 1, 1)
    before = {p.jobs: p.wall_s for p in copy_predictions(without, data, jobs)} \
        if without is not None else {}
    with_g = {int(p["jobs"]): float(p["wall_s"]) for p in adv["predictions"]}
    psql = [cl.client("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", *conn]  # type: ignore[attr-defined]
    times: dict[int, list[float]] = {j: [] for j in jobs}
    for rep in range(repeats):
        for j in (jobs if rep % 2 == 0 else jobs[::-1]):
            cl.psql("TRUNCATE items; CHECKPOINT", dbname=DB)  # type: ignore[attr-defined]
            t0 = time.perf_counter()
            subprocess.run(["/bin/sh", "-c", split_copy_cmd(psql, str(path), j, "items")],
                           check=True, env=cl.env(), stdout=subprocess.DEVNULL)  # type: ignore[attr-defined]
            times[j].append(time.perf_counter() - t0)
    med = {j: median(v) for j, v in times.items()}
    print(f"\nadvise --probe-seconds {probe_s:g}: {adv['copy'].get('index_growth')}")
    for n in adv["probe"]["notes"]:
        print(f"  note: {n}")
    print("| J | measured s | predicted, grown step | error | without it | error |")
    print("|---|---|---|---|---|---|")
    for j in jobs:
        b = before.get(j)
        print(f"| {j} | {med[j]:.2f} | {with_g[j]:.2f} | {with_g[j] / med[j] - 1:+.0%} | "
              + (f"{b:.2f} | {b / med[j] - 1:+.0%} |" if b else "- | - |"))
    return {"advice": adv, "times": times, "median_s": med, "with_growth_s": with_g,
            "without_growth_s": before, "bytes": size}


def summary(doc: dict) -> None:  # type: ignore[type-arg]
    """The markdown table of a run's JSON (first and last windows again from
    its samples)."""
    size, w = float(doc["bytes"]), float(doc["window_mb"]) * 1e6
    print(f"\n{size / 1e6:.0f} MB CSV ({doc['rows']} rows), one stream, {doc['machine']}; "
          f"medians of {doc['repeats']}, MB/s of file")
    print(f"| load | first {w / 1e6:g} MB | last {w / 1e6:g} MB | last / first | average |")
    print("|---|---|---|---|---|")
    for name, rs in doc["runs"].items():
        f = median([rate_between(r["samples"], 0, w) or 0.0 for r in rs]) / 1e6
        la = median([rate_between(r["samples"], size - w, size) or 0.0 for r in rs]) / 1e6
        av = median([float(r["avg"]) for r in rs]) / 1e6
        print(f"| {name} | {f:.1f} | {la:.1f} | {la / f if f else 0:.2f} | {av:.1f} |")


if __name__ == "__main__":
    main()
