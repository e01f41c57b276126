"""Regenerate the Monitor golden recordings from a real cluster.

    cd <repo> && PYTHONPATH=. python tests/golden/monitor/make.py [--scale 1.2] [--interval 0.25]

(about a minute on 2 cores) starts a throwaway PostgreSQL cluster
(pgparmon.cluster: the newest server binaries on the machine, or
$PGPARMON_PGBIN; as root the server runs as the `postgres` user), creates a
small skewed database, and records with `pgparmon run --record` a real
`pg_dump -Fd -j 2` of it and a real `pg_restore -j 2` of that archive. The
connection strings given to pg_dump and pg_restore carry a password (ignored:
the cluster trusts local connections) so that the recordings prove the
recorder redacts it.

Each recording is checked before it is kept (readable, not cut short, the job
finished, an ETA showed before the end, the replay through the Monitor gives
exactly the samples the live run published, no password in the bytes,
small), then the expected JSON is rewritten by running tests/test_golden.py
with PGPARMON_UPDATE_GOLDEN=1. A run too short to show an ETA on a faster
machine: raise --scale.

Review the diff of the *.expected.json files before committing: new
recordings change timings, pids and paths, and so most expected values.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from pgparmon.cluster import Cluster, start_cluster  # noqa: E402
from pgparmon.demo import sample_sql  # noqa: E402
from pgparmon.playback import ReplayFeed  # noqa: E402
from pgparmon.record import read_recording  # noqa: E402

# what the pg_dump / pg_restore command lines carry; must never reach a recording
SECRET = "golden-secret-pw"
MAX_BYTES = 80_000


def record(cluster: Cluster, argv: list[str], out: Path, interval: float) -> None:
    cmd = [sys.executable, "-m", "pgparmon", "run", "--json", "--interval", str(interval),
           "--record", str(out), "--", *argv]
    env = cluster.env()
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr[-2000:]}")


def check(path: Path) -> None:
    rec = read_recording(str(path))
    if rec.truncated:
        raise SystemExit(f"{path}: recording is cut short")
    feed = ReplayFeed(rec, speed=1e9)
    replayed = feed.play_out()
    if feed.outcome is None or feed.outcome.state != "finished":
        raise SystemExit(f"{path}: the job did not finish: {feed.outcome}")
    if replayed != rec.samples or feed.summary() != rec.summary:
        raise SystemExit(f"{path}: the replay does not give the recorded samples")
    raw = gzip.decompress(path.read_bytes())
    if SECRET.encode() in raw:
        raise SystemExit(f"{path}: the password reached the recording")
    if not any(s["job"]["eta_s"] for s in rec.samples if s["job"]["state"] == "running"):
        raise SystemExit(f"{path}: the run ended before an ETA showed: raise --scale")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise SystemExit(f"{path}: {size} bytes, over {MAX_BYTES}: lower --scale")
    print(f"{path.name}: {size} bytes, {len(rec.samples)} samples, "
          f"{len(rec.summary['items']) if rec.summary else 0} items")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.2,
                    help="sample database scale (pgparmon.demo.sample_sql)")
    ap.add_argument("--interval", type=float, default=0.25, help="seconds between samples")
    ap.add_argument("--no-update", action="store_true",
                    help="keep the expected JSON as it is (the test then shows the diff)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="pgparmon-golden-"))
    work.chmod(0o777)
    cluster = start_cluster(prefix="pgparmon-golden-cluster-")
    try:
        cluster.psql("CREATE DATABASE golden")
        cluster.psql(sample_sql(args.scale, small_tables=4), dbname="golden")
        cluster.psql("CREATE DATABASE golden_restored")
        archive = work / "golden.dump"
        dump_rec, restore_rec = work / "dump.rec.gz", work / "restore.rec.gz"
        record(cluster, [cluster.client("pg_dump"), "-Fd", "-j", "2", "-f", str(archive),
                         f"dbname=golden password={SECRET}"], dump_rec, args.interval)
        record(cluster, [cluster.client("pg_restore"), "-j", "2", "-d",
                         f"dbname=golden_restored password={SECRET}", str(archive)],
               restore_rec, args.interval)
        for p in (dump_rec, restore_rec):
            check(p)
        shutil.copyfile(dump_rec, HERE / "dump_fd_j2.rec.gz")
        shutil.copyfile(restore_rec, HERE / "restore_j2.rec.gz")
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.no_update:
        return 0
    env = dict(os.environ, PGPARMON_UPDATE_GOLDEN="1", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(ROOT / "tests" / "test_golden.py")], cwd=ROOT, env=env,
                          check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
