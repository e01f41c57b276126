"""What reading a restore's archive costs the live plan (and `advise
--archive`) when the archive holds many large objects: the TOC's listing
(`pg_restore -l` and its parsing: before pg_dump 17 one BLOB entry an
object), the objects' lists and the sizes of their files
(jobs/large_objects.archive_listings: from 17 one list an item of 1000),
and the metadata's list. The plan is made in the sample loop: while it
reads, no sample is taken. And what a followed dump's sample pays for the
directory of that many files: a full listing (source.dir_sizes), and a
sample between two listings (source.DirWatch: the files known stat'ed, the
objects counted from their list), medians of 5.

One throwaway cluster (the machine's PostgreSQL), a database of N small
objects, dumped `-Fd` by pg_dump 15 and by pg_dump 17; each reading timed
in a fresh interpreter (cold imports apart), 3 times, medians; with
`--before DIR` the same readings by the code of another checkout (a git
worktree of an older commit), in the same run.

    .venv/bin/python bench/archive_plan_scale.py                 # ~2 min
    .venv/bin/python bench/archive_plan_scale.py --before /work/wtbench --keep /tmp/aps

Raw results: docs/bench/archive_plan_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import machine, start_cluster, write_json

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from pgversions import bindir_for  # noqa: E402

# the reading, in a fresh interpreter of the code under test
READ = r"""
import json, sys, time
from pgparmon import toc
from pgparmon.jobs import large_objects as lo
arch, pg_restore = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
hdr, items = toc.list_archive(arch, pg_restore, timeout=600)
t1 = time.perf_counter()
lists = lo.archive_listings(arch, items)
t2 = time.perf_counter()
meta = lo.metadata_listing(items, "m")
t3 = time.perf_counter()
print(json.dumps({"toc_s": t1 - t0, "listings_s": t2 - t1, "metadata_s": t3 - t2,
                  "total_s": t3 - t0, "entries": len(items), "lists": len(lists),
                  "objects": sum(li.count for li in lists),
                  "bytes": sum(li.bytes or 0 for li in lists),
                  "meta_count": meta.count if meta else 0}))
"""


# a dump's sample of its directory: a full listing, then one between two
LISTING = r"""
import json, sys, time
from pgparmon.source import DirWatch, dir_sizes
arch = sys.argv[1]
full, light = [], []
for _ in range(5):
    t = time.perf_counter(); dir_sizes(arch); full.append(time.perf_counter() - t)
w = DirWatch(arch)
w.read()
for _ in range(5):
    w.cost = 1e9
    t = time.perf_counter(); w.read(); light.append(time.perf_counter() - t)
full.sort(); light.sort()
print(json.dumps({"listing_s": full[2], "between_s": light[2]}))
"""


def listing_once(arch: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", LISTING, str(arch)], check=True,
                         capture_output=True, text=True, cwd=str(REPO),
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    return json.loads(out.strip().splitlines()[-1])


def read_once(code: Path, arch: Path, pg_restore: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run([sys.executable, "-c", READ, str(arch), pg_restore], env=env,
                         check=True, capture_output=True, text=True, cwd=str(code)).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", type=Path, help="another checkout to time beside this one")
    ap.add_argument("--keep", type=Path, help="build the archives here (reused when present)")
    ap.add_argument("--out", type=Path, default=REPO / "docs/bench/archive_plan_scale.json")
    a = ap.parse_args()
    work = a.keep or Path(tempfile.mkdtemp(prefix="pgparmon-aps-"))
    work.mkdir(parents=True, exist_ok=True)
    dumps = {15: bindir_for(15), 17: bindir_for(17)}
    archives = {m: work / f"pg_dump{m}_{a.objects}" for m in dumps}
    build_s: dict[int, float] = {}
    if not all((p / "toc.dat").exists() for p in archives.values()):
        cl = start_cluster()
        try:
            cl.psql("CREATE DATABASE lots")
            cl.psql("SELECT lo_from_bytea(0, convert_to(repeat(md5(g::text), 4), 'UTF8')) "
                    f"FROM generate_series(1, {a.objects}) g", dbname="lots")
            for major, bindir in dumps.items():
                shutil.rmtree(archives[major], ignore_errors=True)
                t0 = time.perf_counter()
                subprocess.run([str(bindir / "pg_dump"), "-Fd", "-f", str(archives[major]),
                                "lots"], env=cl.env(), check=True)
                build_s[major] = time.perf_counter() - t0
                subprocess.run(["chmod", "-R", "a+rX", str(archives[major])], check=True)
        finally:
            cl.stop()
    codes = {"now": REPO} | ({"before": a.before} if a.before else {})
    results: dict[str, dict] = {}
    for major, arch in archives.items():
        pg_restore = str(dumps[major] / "pg_restore")
        for name, code in codes.items():
            runs = [read_once(code, arch, pg_restore) for _ in range(a.repeats)]
            med = {k: statistics.median(r[k] for r in runs)
                   for k in ("toc_s", "listings_s", "metadata_s", "total_s")}
            results[f"pg_dump{major}/{name}"] = {**med, "runs": runs}
            print(f"pg_dump {major} archive, {name:6}: TOC {med['toc_s']:.2f} s, lists "
                  f"{med['listings_s']:.2f} s, metadata {med['metadata_s']:.3f} s, all "
                  f"{med['total_s']:.2f} s ({runs[0]['entries']} entries, "
                  f"{runs[0]['lists']} lists, {runs[0]['objects']} objects)", flush=True)
    # what a dump's sample pays for its directory of that many object files
    listing = listing_once(archives[15])
    print(f"a sample of the pg_dump 15 directory: a listing {listing['listing_s'] * 1e3:.0f} "
          f"ms, between two listings {listing['between_s'] * 1e3:.2f} ms", flush=True)
    write_json(a.out, {"machine": machine(), "listing": listing,
                       "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "objects": a.objects, "repeats": a.repeats, "build_s": build_s,
                       "before": str(a.before) if a.before else None, "results": results})
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
