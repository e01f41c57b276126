"""Make docs/img/tui-copy-120x36.svg and .png from a real recording of a COPY load
(and tui-backup-120x36 from one of a pg_basebackup, tui-sync-120x36 from a
logical replication's initial sync, tui-end-120x36 from the demo).

    PYTHONPATH=. python tests/docs_images.py copy        # from the repository root
    PYTHONPATH=. python tests/docs_images.py backup
    PYTHONPATH=. python tests/docs_images.py sync
    PYTHONPATH=. python tests/docs_images.py end

On a throwaway cluster (pgparmon/cluster.py) a shell script runs two
`psql \\copy` of CSV files of different sizes into two tables at once, then a
CREATE INDEX; `pgparmon run -d load --json --record FILE -- sh load.sh` follows it.
The samples up to a mid-run one (both streams copying) are kept as
tests/golden/tui/copy_mid.json, the golden the snapshot test
test_snapshot_copy renders too, and the TUI draws them at 120x36
(Textual's export_screenshot, as the snapshots); headless chromium turns the
SVG into the PNG (`./run test` installs chromium when missing).

`backup`: `pgparmon run --json --record FILE -- pg_basebackup -D DIR -c fast
-r RATE -X stream` on a throwaway cluster holding a few tables, RATE such
that streaming lasts about 8 s; the samples up to a mid-run one (streaming,
with an ETA) are kept as tests/golden/tui/backup_mid.json
(test_snapshot_backup).

`sync`: two throwaway clusters (tests/support.py publisher_and_subscriber:
the publisher with wal_level=logical), six tables of uneven sizes published
FOR ALL TABLES, four with indexes on the subscriber, where a trigger enabled
ALWAYS (it fires in the sync workers) naps 1 ms a row; a subscription with
copy_data (max_sync_workers_per_subscription = 2) followed by `pgparmon
attach -d shop --json --record FILE` on the subscriber until every table is
ready. The samples up to a mid-run one (two tables copying, tables waiting,
an ETA) are kept as tests/golden/tui/sync_mid.json (test_snapshot_sync).

`end`: `pgparmon demo --plain --record FILE` (its own throwaway cluster,
pg_dump -Fd -j 4 and pg_restore -j 4 of the sample database, a sample a
second); every sample of each job and its summary (the last doc) are kept as
tests/golden/tui/dump_end.json and restore_end.json, the end screens the
snapshot tests test_snapshot_end render at 80x24 and 120x36; the image is
the restore's end screen.

The dump and restore images (tui-dump-80x24, tui-restore-160x50) are the
snapshots of tests/golden/tui/dump_mid.json and restore_index.json, cut from
the real runs of tests/jobdocs.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from support import pgparmon_cmd, publisher_and_subscriber, read_jsonl

from pgparmon.cluster import start_cluster
from pgparmon.record import read_recording

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
GOLDEN = ROOT / "tests" / "golden" / "tui"
SIZE = (120, 36)
DB = "load"

# every 500th row naps: a load of a few MB lasts several seconds on any host
SETUP = """
CREATE FUNCTION nap() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.id % 500 = 0 THEN PERFORM pg_sleep(0.03); END IF;
  RETURN NEW;
END $$;
CREATE TABLE customers (id bigint, name text, email text);
CREATE TABLE orders (id bigint, customer_id bigint, amount numeric, note text);
CREATE TRIGGER nap BEFORE INSERT ON customers FOR EACH ROW EXECUTE FUNCTION nap();
CREATE TRIGGER nap BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION nap();
"""


def _csv(path: Path, rows: int, line: str) -> Path:
    with open(path, "w") as f:
        f.write("".join(line.format(i=i) for i in range(rows)))
    os.chmod(path, 0o644)
    return path


def record_copy_load(work: Path) -> list[dict[str, Any]]:
    """Run the load under `pgparmon run --record` on a throwaway cluster; the
    recording's samples."""
    with start_cluster(prefix="pgparmon-docimg-") as cl:
        cl.psql(f"CREATE DATABASE {DB}")
        cl.psql(SETUP, dbname=DB)
        small = _csv(work / "customers.csv", 80_000,
                     "{i},customer {i},c{i}@example.com\n")
        big = _csv(work / "orders.csv", 200_000,
                   "{i},{i},12.50,0123456789abcdef0123456789abcdef\n")
        psql = f"{cl.client('psql')} -X -q -h {cl.sockdir} -p {cl.port} -U postgres -d {DB}"
        script = work / "load.sh"
        script.write_text(
            "#!/bin/sh\n"
            f"{psql} -c \"\\copy customers FROM '{small}' CSV\" &\n"
            f"{psql} -c \"\\copy orders FROM '{big}' CSV\" &\n"
            "wait\n"
            f"{psql} -c 'CREATE INDEX ON orders (customer_id)'\n")
        rec = work / "copy.pgparmon.gz"
        res = subprocess.run(pgparmon_cmd("run", "-d", DB, "--json", "--interval", "0.5",
                                          "--record", str(rec), "--", "sh", str(script)),
                             capture_output=True, text=True, env=cl.env(), timeout=300,
                             check=False, cwd=work)
        if res.returncode != 0:
            sys.exit(f"pgparmon run failed ({res.returncode}): {res.stderr[-2000:]}")
        printed = [d for d in read_jsonl(res.stdout) if d.get("schema") == "pgparmon.sample/1"]
        samples = read_recording(str(rec)).samples
        assert samples == printed, "the recording does not hold the samples the run printed"
        return samples


def record_basebackup(work: Path) -> list[dict[str, Any]]:
    """A throttled pg_basebackup under `pgparmon run --record`; the samples."""
    with start_cluster(prefix="pgparmon-docimg-") as cl:
        cl.psql("CREATE TABLE orders AS SELECT g AS id, repeat('o', 150) AS note "
                "FROM generate_series(1, 200000) g")
        size = int(cl.psql("SELECT sum(pg_database_size(oid)) FROM pg_database").strip())
        rate = f"{max(64, size // 1024 // 8)}k"
        rec = work / "backup.pgparmon.gz"
        res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.5", "--record",
                                          str(rec), "--", cl.client("pg_basebackup"), "-D",
                                          str(work / "base"), "-c", "fast", "-r", rate,
                                          "-X", "stream"),
                             capture_output=True, text=True, env=cl.env(), timeout=300,
                             check=False, cwd=work)
        if res.returncode != 0:
            sys.exit(f"pgparmon run failed ({res.returncode}): {res.stderr[-2000:]}")
        return read_recording(str(rec)).samples


# logical replication's initial sync: tables of uneven sizes (rows), some
# with indexes to maintain on the subscriber; every row naps there (the
# trigger is enabled ALWAYS, so it fires in the sync workers), 1 ms a row
SYNC_TABLES = {
    "orders": (9000, "id int PRIMARY KEY, customer_id int, note text"),
    "order_items": (7000, "id int PRIMARY KEY, order_id int, note text"),
    "customers": (4000, "id int, customer_id int, note text"),
    "invoices": (2500, "id int UNIQUE, customer_id int, note text"),
    "products": (800, "id int, customer_id int, note text"),
    "regions": (40, "id int, customer_id int, note text"),
}
SYNC_INDEXES = "CREATE INDEX ON order_items (order_id); CREATE INDEX ON customers (customer_id);"
SYNC_NAP = ("CREATE FUNCTION nap() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN PERFORM pg_sleep(0.001); RETURN NEW; END$$;")
SYNC_DB, SUBSCRIPTION = "shop", "shop_sub"


def record_logical_sync(work: Path) -> list[dict[str, Any]]:
    """A subscription's initial sync (two sync workers, six tables) under
    `pgparmon attach --record` on the subscriber; the samples."""
    with publisher_and_subscriber(sub_settings={"max_sync_workers_per_subscription": "2"}) \
            as (pub, sub):
        schema = "".join(f"CREATE TABLE {t} ({cols});" for t, (_n, cols) in SYNC_TABLES.items())
        for cl in (pub, sub):
            cl.psql(f"CREATE DATABASE {SYNC_DB}")
        pub.psql(schema + "".join(
            f"INSERT INTO {t} SELECT g, g % 997, repeat('x', 120) "
            f"FROM generate_series(1, {n}) g;" for t, (n, _c) in SYNC_TABLES.items())
            + "ANALYZE; CREATE PUBLICATION shop_pub FOR ALL TABLES;", dbname=SYNC_DB)
        sub.psql(schema + SYNC_INDEXES + SYNC_NAP + "".join(
            f"CREATE TRIGGER nap BEFORE INSERT ON {t} FOR EACH ROW EXECUTE FUNCTION nap();"
            f"ALTER TABLE {t} ENABLE ALWAYS TRIGGER nap;" for t in SYNC_TABLES), dbname=SYNC_DB)
        sub.psql(f"CREATE SUBSCRIPTION {SUBSCRIPTION} CONNECTION '{pub.conninfo(SYNC_DB)}' "
                 "PUBLICATION shop_pub", dbname=SYNC_DB)
        rec = work / "sync.pgparmon.gz"
        res = subprocess.run(pgparmon_cmd("attach", "-d", SYNC_DB, "--json", "--interval", "0.5",
                                          "--record", str(rec)),
                             capture_output=True, text=True, env=sub.env(), timeout=300,
                             check=False, cwd=work)
        if res.returncode != 0:
            sys.exit(f"pgparmon attach failed ({res.returncode}): {res.stderr[-2000:]}")
        samples = read_recording(str(rec)).samples
        if samples[-1]["job"]["state"] != "finished":
            sys.exit(f"the sync did not finish: {samples[-1]['job'].get('outcome')}")
        return samples


def record_demo(work: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`pgparmon demo --plain --record`: the dump's and the restore's samples,
    each followed by its summary."""
    rec = work / "demo.pgparmon.gz"
    res = subprocess.run(pgparmon_cmd("demo", "--plain", "--record", str(rec)),
                         capture_output=True, text=True, timeout=900, check=False, cwd=work)
    if res.returncode != 0:
        sys.exit(f"pgparmon demo failed ({res.returncode}): {res.stderr[-2000:]}")
    out = []
    for path in (rec, work / "demo.pgparmon.restore.gz"):
        r = read_recording(str(path))
        if r.truncated or r.summary is None or r.summary.get("state") != "finished":
            sys.exit(f"{path}: not a finished job's recording")
        out.append([*r.samples, r.summary])
    return out[0], out[1]


def mid_backup(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples up to the middle one of those streaming with an ETA."""
    streaming = [i for i, s in enumerate(samples) if s["job"]["state"] == "running"
                 and s["job"].get("phase") == "streaming database files"
                 and s["job"].get("eta_s") is not None]
    if not streaming:
        sys.exit("no sample streaming with an ETA: the backup was too short")
    return samples[:streaming[len(streaming) // 2] + 1]


def mid_run(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples up to the middle one of those where both streams copy."""
    both = [i for i, s in enumerate(samples) if s["job"]["state"] == "running"
            and sum(w["phase"] == "copy" for w in s["workers"]) >= 2
            and s["job"].get("eta_s") is not None]
    if not both:
        sys.exit("no sample with both streams copying and an ETA: the load was too short")
    return samples[:both[len(both) // 2] + 1]


def mid_sync(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples up to the middle one of those where two sync workers
    copy, tables wait for one, and there is an ETA."""
    both = [i for i, s in enumerate(samples) if s["job"]["state"] == "running"
            and sum(w["phase"] == "copy" for w in s["workers"]) >= 2
            and (s["job"].get("tables") or {}).get("waiting")
            and s["job"].get("eta_s") is not None]
    if not both:
        sys.exit("no sample with two tables copying, tables waiting and an ETA: "
                 "the sync was too short")
    return samples[:both[len(both) // 2] + 1]


async def _svg(docs: list[dict[str, Any]], name: str, title: str) -> str:
    sys.path.insert(0, str(Path(__file__).parent))
    from test_tui import _end_app, _snapshot_app  # the snapshot tests' apps: same screens

    GOLDEN.joinpath(f"{name}.json").write_text(json.dumps(docs, indent=1) + "\n")
    app, feed_all = (_end_app if name.endswith("_end") else _snapshot_app)(name)
    async with app.run_test(size=SIZE) as pilot:
        await feed_all(pilot)
        await pilot.pause(0.2)
        return app.export_screenshot(title=title)


def png(svg: Path, out: Path, cols: int, rows: int) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("no chromium for the PNG (./run test installs it)")
    # the width of the other TUI images (12.5 px per column), the SVG's aspect
    box = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg.read_text())
    assert box, "no viewBox in the SVG"
    w = round(cols * 12.5)
    h = round(w * float(box[2]) / float(box[1]))
    page = out.with_suffix(".html")
    page.write_text("<html><body style='margin:0;background:#fff'>"
                    f"<img src='{svg.name}' style='width:{w}px'></body></html>")
    try:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--window-size={w},{h}",
                        f"--screenshot={out}", page.as_uri()],
                       check=True, capture_output=True, timeout=120)
    finally:
        page.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("which", choices=["copy", "backup", "sync", "end"])
    ap.add_argument("--from-golden", action="store_true",
                    help="redraw from the golden samples (tests/golden/tui/), no new recording")
    args = ap.parse_args()
    name = {"copy": "copy_mid", "backup": "backup_mid", "sync": "sync_mid",
            "end": "restore_end"}[args.which]
    if args.from_golden:
        docs = json.loads(GOLDEN.joinpath(f"{name}.json").read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="pgparmon-docimg-") as d:
            work = Path(d)
            work.chmod(0o777)
            if args.which == "end":
                dump, docs = record_demo(work)
                GOLDEN.joinpath("dump_end.json").write_text(json.dumps(dump, indent=1) + "\n")
            elif args.which == "sync":
                docs = mid_sync(record_logical_sync(work))
            else:
                docs = (mid_run(record_copy_load(work)) if args.which == "copy"
                        else mid_backup(record_basebackup(work)))
    title = {"copy": "pgparmon run -- sh load.sh",
             "backup": "pgparmon run -- pg_basebackup -D base -c fast -r RATE",
             "sync": f"pgparmon attach -d {SYNC_DB} (subscription {SUBSCRIPTION})",
             "end": "pgparmon demo: the restore's end"}[args.which]
    svg = IMG / f"tui-{args.which}-{SIZE[0]}x{SIZE[1]}.svg"
    svg.write_text(asyncio.run(_svg(docs, name, title)))
    png(svg, svg.with_suffix(".png"), *SIZE)
    print(f"wrote {svg} and {svg.with_suffix('.png')} ({len(docs)} samples)")


if __name__ == "__main__":
    main()
