"""ETA accuracy and cost of watching physical backups of a database a few GB
in size: a pg_basebackup (tar, gzip in the client, WAL streamed), a
pgBackRest full backup with process-max 2 and a pgBackRest restore of it
(the server down: followed from the host alone).

Each job is started on its own and `pgparmon attach --json` follows it as a
separate process (`--wait`; a restore `--host-only`), so its CPU and memory
are its own (wait4). For the sample nearest to 25%, 50% and 75% of the job's
run (its start and end measured outside pgparmon) the ETA given then is
compared with the real remaining time. Target: within 15% at half the run.

    .venv/bin/python bench/backup_eta.py [--gb 3] [--runs 1]
    .venv/bin/python bench/backup_eta.py --gb 1.3 --pg-probackup PATH --tools pg_probackup \
        --out docs/bench/backup_eta_probackup.json

pgBackRest comes from the machine's packages (apt-get install pgbackrest);
pg_probackup is built from its source (bench/probackup_rerecord.sh), given
with --pg-probackup: a FULL backup with -j 2 and --stream, compressed (zlib
level 1) and not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from common import (
    archive_caught_up,
    as_server_user,
    fill_sql,
    machine,
    median,
    pgparmon,
    start_cluster,
    write_json,
)

STANZA = "bench"


RECORD_DIR: list[str] = []  # --record-dir: where attach records each job


def follow(job_argv: list[str], attach_args: list[str], env: dict[str, str],
           interval: float) -> dict[str, Any]:
    """Start the job, attach to it in a second process, and measure both."""
    recording = None
    if RECORD_DIR:
        recording = os.path.join(RECORD_DIR[0], f"job{len(os.listdir(RECORD_DIR[0])):02d}.rec.gz")
        attach_args = [*attach_args, "--record", recording]
    t0 = time.time()
    job = subprocess.Popen(job_argv, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    ends: dict[str, float] = {}

    def watch() -> None:
        job.wait()
        ends["job"] = time.time()

    threading.Thread(target=watch, daemon=True).start()
    out_path = Path(tempfile.mkstemp(prefix="pgparmon-bench-", suffix=".jsonl")[1])
    with open(out_path, "w", encoding="utf-8") as out:
        attach = subprocess.Popen(pgparmon("attach", "--json", "--interval", str(interval),
                                           "--wait", "60", *attach_args),
                                  env=env, stdout=out, stderr=subprocess.PIPE, text=True)
        _, status, ru = os.wait4(attach.pid, 0)
        attach.returncode = os.waitstatus_to_exitcode(status)
    job.wait()
    while "job" not in ends:
        time.sleep(0.01)
    samples = [json.loads(x) for x in out_path.read_text().splitlines()
               if x.startswith("{") and '"pgparmon.sample/1"' in x]
    out_path.unlink()
    if job.returncode != 0 or not samples:
        raise SystemExit(f"job exit {job.returncode}, attach exit {attach.returncode}: "
                         f"{(job.stderr.read() if job.stderr else '')[-500:]} "
                         f"{(attach.stderr.read() if attach.stderr else '')[-500:]}")
    end = ends["job"]
    total = end - t0
    first = datetime.fromisoformat(samples[0]["ts"]).timestamp()
    points = {}
    running = [s for s in samples if s["job"]["state"] == "running"]
    for frac in (0.25, 0.5, 0.75):
        want = t0 + total * frac
        with_eta = [s for s in running if s["job"]["eta_s"] is not None]
        if not with_eta:
            points[str(frac)] = None
            continue
        s = min(with_eta, key=lambda s: abs(datetime.fromisoformat(s["ts"]).timestamp() - want))
        ts = datetime.fromisoformat(s["ts"]).timestamp()
        real = end - ts
        points[str(frac)] = {"at_s": round(ts - t0, 2), "eta_s": s["job"]["eta_s"],
                             "real_remaining_s": round(real, 2),
                             "error": round(abs(s["job"]["eta_s"] - real) / real, 4),
                             "progress": s["job"]["progress"]}
    attach_wall = (datetime.fromisoformat(samples[-1]["ts"]).timestamp() - first) or 1.0
    cpu_s = ru.ru_utime + ru.ru_stime
    return {
        "total_s": round(total, 2), "points": points, "samples": len(samples),
        "final_state": samples[-1]["job"]["state"],
        "limits": sorted({s["bottleneck"]["kind"] for s in running}),
        "attach_cpu_s": round(cpu_s, 3),
        "attach_cpu_percent_of_core": round(100.0 * cpu_s / max(total, attach_wall), 2),
        "attach_cpu_ms_per_sample": round(1000.0 * cpu_s / len(samples), 2),
        "attach_max_rss_mb": round(ru.ru_maxrss / 1024.0, 1),
        "found_after_s": round(first - t0, 2),
        "recording": recording,
    }


TOOLS = ("pg_basebackup", "pgbackrest", "pg_probackup")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=3.0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--pg-probackup", help="a pg_probackup binary: its backups too")
    ap.add_argument("--tools", default=",".join(TOOLS),
                    help="which of pg_basebackup,pgbackrest,pg_probackup (default: all; "
                         "pg_probackup with --pg-probackup)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" /
                                         "bench" / "backup_eta.json"))
    ap.add_argument("--record-dir", help="keep attach's recording of each job there")
    a = ap.parse_args()
    if a.record_dir:
        os.makedirs(a.record_dir, exist_ok=True)
        RECORD_DIR.append(os.path.abspath(a.record_dir))
    tools = [t for t in a.tools.split(",") if t]
    if set(tools) - set(TOOLS):
        raise SystemExit(f"--tools: one of {', '.join(TOOLS)}")
    if not a.pg_probackup and "pg_probackup" in tools:
        tools.remove("pg_probackup")
    pb = shutil.which("pgbackrest")
    if pb is None and "pgbackrest" in tools:
        raise SystemExit("pgbackrest is not installed (apt-get install pgbackrest)")
    base = Path(tempfile.mkdtemp(prefix="pgparmon-bench-bk-"))
    os.chmod(base, 0o777)
    conf = base / "pgbackrest.conf"
    settings = {"max_wal_size": "4GB"}
    if "pgbackrest" in tools:
        settings.update(archive_mode="on", archive_command=(
            f"'{pb} --config={conf} --stanza={STANZA} archive-push %p'"))
    cl = start_cluster(prefix="pgparmon-bench-bk-", settings=settings)
    try:
        for d in ("repo", "log", "lock", "out"):
            (base / d).mkdir()
            os.chmod(base / d, 0o777)
        conf.write_text(
            "[global]\n"
            f"repo1-path={base}/repo\nlog-path={base}/log\nlock-path={base}/lock\n"
            "log-level-console=warn\nlog-level-file=off\nstart-fast=y\n"
            "compress-type=gz\ncompress-level=1\nrepo1-retention-full=99\n\n"
            f"[{STANZA}]\npg1-path={cl.datadir}\npg1-port={cl.port}\n"
            f"pg1-socket-path={cl.sockdir}\npg1-user=postgres\n")
        os.chmod(conf, 0o644)
        t = time.time()
        cl.psql(fill_sql(a.gb))
        size = int(cl.psql("SELECT sum(pg_database_size(oid)) FROM pg_database").strip())
        print(f"cluster: {size / 1e9:.2f} GB in {time.time() - t:.0f} s", flush=True)
        pbr = [pb or "pgbackrest", f"--config={conf}", f"--stanza={STANZA}"]
        if "pgbackrest" in tools:
            subprocess.run(as_server_user([*pbr, "stanza-create"]), check=True,
                           capture_output=True)
            print(f"archived the load's WAL in {archive_caught_up(cl):.0f} s", flush=True)
        pbk: list[str] = []
        if "pg_probackup" in tools:
            cat = base / "probackup"
            for args in (["init", "-B", str(cat)], ["add-instance", "-B", str(cat), "-D",
                                                    str(cl.datadir), "--instance", STANZA]):
                subprocess.run(as_server_user([a.pg_probackup, *args]), check=True,
                               capture_output=True)
            pbk = [a.pg_probackup, "backup", "-B", str(cat), "--instance", STANZA, "-b", "FULL",
                   "-j", "2", "--stream", "-h", str(cl.sockdir), "-p", str(cl.port), "-U",
                   "postgres", "-d", "postgres"]
        env = cl.env()
        attach_db = ["-h", str(cl.sockdir), "-p", str(cl.port), "-U", "postgres",
                     "-d", "postgres"]
        results: dict[str, list[dict[str, Any]]] = {}
        for i in range(a.runs):
            if "pg_basebackup" in tools:
                archive_caught_up(cl)
                target = base / "out" / f"base{i}"
                r = follow(as_server_user([cl.client("pg_basebackup"), "-D", str(target), "-Ft",
                                           "-Z", "1", "-X", "stream", "-c", "fast"]),
                           attach_db, env, a.interval)
                results.setdefault("pg_basebackup", []).append(r)
                _say("pg_basebackup -Ft -Z 1", r)
                shutil.rmtree(target, ignore_errors=True)
            if "pgbackrest" in tools:
                archive_caught_up(cl)
                r = follow(as_server_user([*pbr, "--process-max=2", "--type=full", "backup"]),
                           attach_db, env, a.interval)
                results.setdefault("pgbackrest", []).append(r)
                _say("pgbackrest backup, process-max 2, gz level 1", r)
                target = base / "out" / f"restore{i}"
                r = follow(as_server_user([*pbr, f"--pg1-path={target}", "--process-max=2",
                                           "restore"]), ["--host-only"], env, a.interval)
                results.setdefault("pgbackrest-restore", []).append(r)
                _say("pgbackrest restore (host only), process-max 2", r)
                subprocess.run(["rm", "-rf", str(target)], check=False)
            if pbk:
                for key, extra in (("pg_probackup", []), ("pg_probackup zlib",
                                   ["--compress-algorithm=zlib", "--compress-level=1"])):
                    r = follow(as_server_user([*pbk, *extra]), attach_db, env, a.interval)
                    results.setdefault(key, []).append(r)
                    _say(f"pg_probackup FULL -j 2 --stream {' '.join(extra)}".strip(), r)
        med = {k: {f: median([r["points"][f]["error"] for r in v if r["points"].get(f)])
                   for f in ("0.25", "0.5", "0.75")
                   if any(r["points"].get(f) for r in v)} for k, v in results.items()}
        doc = {"benchmark": "backup_eta", "machine": machine(), "cluster_bytes": size,
               "interval_s": a.interval, "runs": results, "median_error": med,
               "target": "<= 0.15 at 0.5"}
        if pbk:
            doc["pg_probackup"] = subprocess.run([a.pg_probackup, "--version"],
                                                 capture_output=True, text=True).stdout.strip()
        write_json(Path(a.out), doc)
        for k, v in med.items():
            print(f"{k}: median ETA error " +
                  ", ".join(f"at {float(f):.0%}: {e:.1%}" for f, e in v.items()))
    finally:
        cl.stop()
        subprocess.run(["rm", "-rf", str(base)], check=False)


def _say(what: str, r: dict[str, Any]) -> None:
    half = r["points"].get("0.5") or {}
    print(f"{what}: {r['total_s']} s, {r['samples']} samples, {r['final_state']}; at half: "
          f"ETA {half.get('eta_s')} s, real {half.get('real_remaining_s')} s, error "
          f"{half.get('error', float('nan')):.1%}; attach {r['attach_cpu_percent_of_core']}% "
          f"of a core, {r['attach_cpu_ms_per_sample']} ms/sample, "
          f"{r['attach_max_rss_mb']} MB RSS; limits {r['limits']}", flush=True)


if __name__ == "__main__":
    main()
