"""Record real pg_probackup backups with pgparmon: the replay fixtures of
tests/test_probackup_replay.py (tests/golden/probackup/*.rec.gz).

    .venv/bin/python bench/probackup_record.py --pg-probackup /path/to/pg_probackup \
        [--gb 1.3] [--out tests/golden/probackup] [--keep]

(about 6 minutes on 2 cores; bench/probackup_rerecord.sh builds pg_probackup
from its source first). It starts a throwaway cluster (pgparmon.cluster)
whose archive_command is `pg_probackup archive-push` into a fresh catalog,
fills it (--gb 1.3: a data directory of about 1 GB: one large table, six
medium ones, fifty small ones), and records, each with `--record`:

- full_stream_zlib_run: `pgparmon run`, FULL, --stream, -j 2, zlib level 1;
- full_archive_attach: `pgparmon attach`, FULL, archive mode, -j 2;
- delta_stream_attach: `pgparmon attach`, DELTA, --stream, -j 2 (after an
  UPDATE of a quarter of the large table);
- delta_archive_run: `pgparmon run`, DELTA, archive mode, -j 2;
- error_sigint_run: `pgparmon run`, FULL, --stream, -j 2, zlib: SIGINT at a
  third of the copy (status ERROR, exit 1);
- killed_attach: `pgparmon attach`, FULL, archive mode, -j 2, zlib: SIGKILL
  at a third of the copy (status left RUNNING).

pg_probackup runs as this user (root here: it reads the data directory and
writes the catalog; archive-push runs as the server's user). Its `-d` is a
conninfo with a password (ignored: the cluster trusts local connections), so
that the recordings prove the recorder masks it. `attach` is started first
and waits (`--wait`) for the backup, so that it sees the backup's start.

Each recording is checked before it is kept (readable, not cut short, its
replay through the Monitor gives exactly the samples the live run published,
the expected end, no password in its bytes, under --max-kb) and a line per
recording says its run: the steps' durations and the ETA against the real
time left at 25/50/75% of the run (the real end: the sample that saw the
process gone, so within one interval).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import archive_caught_up, as_server_user, fill_sql, pgparmon  # noqa: E402

from pgparmon.cluster import start_cluster  # noqa: E402
from pgparmon.playback import ReplayFeed  # noqa: E402
from pgparmon.record import read_recording  # noqa: E402

SECRET = "probackup-secret-pw"  # on pg_probackup's -d; must never reach a recording
INSTANCE = "main"


class Lab:
    def __init__(self, pb: str, gb: float, work: Path) -> None:
        self.pb, self.work = pb, work
        self.cat = work / "catalog"
        self.cl = start_cluster(prefix="pgparmon-probackup-", settings={
            "archive_mode": "on", "max_wal_size": "4GB",
            "archive_command": f"'{pb} archive-push -B {self.cat} --instance {INSTANCE} "
                               "--wal-file-path=%p --wal-file-name=%f'"})
        self.env = self.cl.env()
        for args in (["init", "-B", str(self.cat)],
                     ["add-instance", "-B", str(self.cat), "-D", str(self.cl.datadir),
                      "--instance", INSTANCE]):
            subprocess.run(as_server_user([pb, *args]), check=True, capture_output=True,
                           env=self.env)
        t = time.time()
        self.cl.psql(fill_sql(gb), timeout=1800)
        size = int(self.cl.psql("SELECT sum(pg_database_size(oid)) FROM pg_database").strip())
        archive_caught_up(self.cl)
        print(f"cluster: {size / 1e9:.2f} GB, filled and archived in {time.time() - t:.0f} s",
              flush=True)

    def backup(self, *opts: str) -> list[str]:
        return [self.pb, "backup", "-B", str(self.cat), "--instance", INSTANCE, "-j", "2",
                "-h", str(self.cl.sockdir), "-p", str(self.cl.port), "-U", "postgres",
                "-d", f"dbname=postgres password={SECRET}", *opts]

    def attach_args(self) -> list[str]:
        return ["-h", str(self.cl.sockdir), "-p", str(self.cl.port), "-U", "postgres",
                "-d", "postgres"]

    def stop(self) -> None:
        self.cl.stop()


def _kill_at(out: Any, pick: Any, sig: int, at: float) -> threading.Thread:
    """Send `sig` to the backup's process once the JSON lines on `out` say
    its copy is `at` done."""
    def run() -> None:
        for line in out:
            if not line.startswith("{"):
                continue
            d = json.loads(line)
            j = d.get("job") or {}
            if (j.get("backup") or {}).get("step") == "copy" and (j.get("progress") or 0) >= at:
                os.kill(pick(j), sig)
                break
        for _ in out:  # drain
            pass
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def record_run(lab: Lab, rec: Path, interval: float, opts: list[str],
               kill: int | None = None) -> int:
    """`pgparmon run --record` of a backup; `kill`: a signal for
    pg_probackup at a third of its copy."""
    cmd = pgparmon("run", "--json", "--interval", str(interval), "--record", str(rec), "--",
                   *lab.backup(*opts))
    env = dict(lab.env, PYTHONPATH=str(ROOT))
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t = _kill_at(p.stdout, lambda j: int(j["client_pid"]), kill, 0.33) if kill else None
    if t is None:
        assert p.stdout is not None
        p.stdout.read()
    p.wait(timeout=1800)
    if t is not None:
        t.join(timeout=10)
    return p.returncode


def record_attach(lab: Lab, rec: Path, interval: float, opts: list[str],
                  kill: int | None = None) -> int:
    """`pgparmon attach --wait --record`, started before the backup; `kill`:
    a signal for pg_probackup at a third of its copy."""
    env = dict(lab.env, PYTHONPATH=str(ROOT))
    att = subprocess.Popen(pgparmon("attach", "--json", "--interval", str(interval), "--wait",
                                    "60", "--record", str(rec), *lab.attach_args()),
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3.0)  # attach is up and waits: it sees the backup start
    job = subprocess.Popen(lab.backup(*opts), env=lab.env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    t = _kill_at(att.stdout, lambda j: job.pid, kill, 0.33) if kill else None
    if t is None:
        assert att.stdout is not None
        att.stdout.read()
    att.wait(timeout=1800)
    job.wait(timeout=60)
    if t is not None:
        t.join(timeout=10)
    if att.returncode not in (0, 1):
        err = att.stderr.read() if att.stderr else ""
        raise SystemExit(f"attach exited {att.returncode}: {err[-1000:]}")
    return job.returncode


def replayed(path: Path, same: bool = True) -> tuple[list[dict[str, Any]], Any]:
    """The samples of a replay through this analysis; `same`: they must be
    those the live run published (just recorded, by this code)."""
    rec = read_recording(str(path))
    if rec.truncated:
        raise SystemExit(f"{path}: recording is cut short")
    feed = ReplayFeed(rec, speed=1e9)
    out = [s.to_json() for s in feed.play_out()]  # the documents, as recorded
    if same and (out != rec.samples or feed.summary() != rec.summary):
        raise SystemExit(f"{path}: the replay does not give the recorded samples")
    return out, feed.outcome


def eta_points(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The ETA at 25/50/75% of the run against the real time left (the run:
    the first sample to the one that saw the process gone)."""
    def wall(s: dict[str, Any]) -> float:
        return float(s["elapsed_s"])
    t0, end = wall(samples[0]), wall(samples[-1])
    running = [s for s in samples if s["job"]["state"] == "running"]
    points: dict[str, Any] = {}
    for frac in (0.25, 0.5, 0.75):
        want = t0 + (end - t0) * frac
        s = min(running, key=lambda s: abs(wall(s) - want))
        real = end - wall(s)
        eta = s["job"]["eta_s"]
        points[str(frac)] = {"at_s": wall(s), "eta_s": eta, "real_remaining_s": round(real, 2),
                             "error": round(abs(eta - real) / real, 3) if eta is not None
                             and real > 0 else None, "phase": s["job"]["phase"]}
    return points


def steps(samples: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds in each step, from the samples."""
    out: dict[str, float] = {}
    for a, b in zip(samples, samples[1:]):
        step = ((a["job"].get("backup") or {}).get("step")) or "?"
        out[step] = round(out.get(step, 0.0) + b["elapsed_s"] - a["elapsed_s"], 1)
    return out


def check(path: Path, want: str, max_kb: int, same: bool = True) -> dict[str, Any]:
    samples, outcome = replayed(path, same)
    if outcome is None or outcome.state != want:
        raise SystemExit(f"{path}: ended {outcome}, expected {want}")
    raw = gzip.decompress(path.read_bytes())
    if SECRET.encode() in raw:
        raise SystemExit(f"{path}: the password reached the recording")
    size = path.stat().st_size
    if size > max_kb * 1024:
        raise SystemExit(f"{path}: {size} bytes, over {max_kb} kB: raise --interval")
    last = samples[-1]["job"]
    doc = {"bytes": size, "samples": len(samples), "run_s": samples[-1]["elapsed_s"],
           "state": outcome.state, "reason": outcome.reason, "steps": steps(samples),
           "eta": eta_points(samples),
           "total_bytes": (last.get("backup") or {}).get("total_bytes")}
    half = doc["eta"]["0.5"]
    print(f"{path.name}: {size} bytes, {len(samples)} samples, {doc['run_s']} s, "
          f"{outcome.state}; steps {doc['steps']}; at half: ETA {half['eta_s']} s, real "
          f"{half['real_remaining_s']} s ({half['phase']})", flush=True)
    return doc


# name, followed by, interval (s), pg_probackup's options, a signal at a third
# of its copy, how it ends
PLAN: list[tuple[str, str, float, list[str], int | None, str]] = [
    ("full_stream_zlib_run", "run", 1.0, ["-b", "FULL", "--stream", "--compress-algorithm=zlib",
                                          "--compress-level=1"], None, "finished"),
    ("full_archive_attach", "attach", 1.0, ["-b", "FULL"], None, "finished"),
    # a DELTA reads every page (from the page cache here: seconds): sampled faster
    ("delta_stream_attach", "attach", 0.25, ["-b", "DELTA", "--stream"], None, "finished"),
    ("delta_archive_run", "run", 0.25, ["-b", "DELTA"], None, "finished"),
    ("error_sigint_run", "run", 0.5, ["-b", "FULL", "--stream", "--compress-algorithm=zlib"],
     signal.SIGINT, "failed"),
    ("killed_attach", "attach", 0.5, ["-b", "FULL", "--compress-algorithm=zlib"],
     signal.SIGKILL, "failed"),
]


def write_results(path: str, head: dict[str, Any], results: dict[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"benchmark": "probackup_record", **head,
                                      "machine": f"{os.cpu_count()} cores",
                                      "recordings": results}, indent=2) + "\n",
                          encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg-probackup", help="the pg_probackup binary")
    ap.add_argument("--gb", type=float, default=1.3,
                    help="cluster size (1.3: a backup of about 1 GB)")
    ap.add_argument("--out", default=str(ROOT / "tests" / "golden" / "probackup"))
    ap.add_argument("--results", default=str(ROOT / "docs" / "bench" / "probackup_record.json"))
    ap.add_argument("--max-kb", type=int, default=120)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--summarize", action="store_true",
                    help="record nothing: replay the recordings in --out through this "
                         "analysis and write their figures to --results (after a change "
                         "of the driver)")
    a = ap.parse_args()
    if a.summarize:
        old = json.loads(Path(a.results).read_text()) if Path(a.results).exists() else {}
        # what only the live run knew (its exit code, its wall time) is kept
        live = {name: {k: v for k, v in (old.get("recordings") or {}).get(name, {}).items()
                       if k in ("exit_code", "wall_s", "signal")} for name, *_ in PLAN}
        results = {name: {"how": how, "interval_s": interval, "options": opts,
                          **check(Path(a.out) / f"{name}.rec.gz", want, a.max_kb, same=False),
                          **live[name]}
                   for name, how, interval, opts, _, want in PLAN}
        write_results(a.results, {k: old[k] for k in ("pg_probackup", "server", "cluster_gb",
                                                      "changed") if k in old}, results)
        return 0
    if not a.pg_probackup:
        raise SystemExit("--pg-probackup PATH: the binary to record (or --summarize)")
    pb = os.path.abspath(a.pg_probackup)
    version = subprocess.run([pb, "--version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    print(version, flush=True)
    work = Path(tempfile.mkdtemp(prefix="pgparmon-probackup-"))
    os.chmod(work, 0o777)
    lab = Lab(pb, a.gb, work)
    results: dict[str, Any] = {}
    changed = None
    rec_dir = work / "rec"
    rec_dir.mkdir()
    try:
        for name, how, interval, opts, sig, want in PLAN:
            if name.startswith("delta") and changed is None:
                n = int(lab.cl.psql("SELECT max(id) FROM big").strip())
                lab.cl.psql(f"UPDATE big SET a = md5(a) WHERE id <= {n // 4}; CHECKPOINT;")
                changed = f"UPDATE of the first quarter of big ({n // 4} rows)"
            archive_caught_up(lab.cl)
            rec = rec_dir / f"{name}.rec.gz"
            t = time.time()
            code = (record_run if how == "run" else record_attach)(lab, rec, interval, opts,
                                                                   sig)
            doc = {"how": how, "interval_s": interval, "options": opts,
                   **check(rec, want, a.max_kb), "exit_code": code,
                   "wall_s": round(time.time() - t, 1),
                   "signal": signal.Signals(sig).name if sig else None}
            results[name] = doc
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, *_ in PLAN:
            shutil.copyfile(rec_dir / f"{name}.rec.gz", out / f"{name}.rec.gz")
        write_results(a.results, {"pg_probackup": version, "server": lab.cl.psql(
            "SHOW server_version").strip(), "cluster_gb": a.gb, "changed": changed}, results)
        print(f"wrote {len(PLAN)} recordings to {out}, results to {a.results}", flush=True)
    finally:
        lab.stop()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
