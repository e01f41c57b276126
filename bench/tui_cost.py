"""What the full-screen TUI costs on the database host (issue "cost of
watching"): its own CPU per second of wall time in a real terminal.

A real `pg_dump -Fd -j 2` of the demo database is recorded once (`pgparmon
run --record --json`, 1 s interval); then the recording is replayed at its
own speed (`pgparmon replay --speed 1`) in a real terminal, a detached tmux
window of 160x50, so the TUI draws exactly what it would draw live, without
the monitor's sampling. The replay's process CPU (user + system, psutil) is
read every second; the figure is CPU milliseconds per wall second over the
steady part (after the first 3 s: imports, the first paint; up to the
last reading before the end screen: the job's end, its summary built and
drawn, is reported apart as `end_cpu_s`): the mean over
the window per repeat (the headline: the median of those), and the median
of the per-second readings (coarse: CPU time moves in 10 ms clock ticks).
The replay re-runs the analysis of each recorded sample in its worker
thread, as a live attach does (a plain `replay` without a terminal costs
~7 ms a second of that); only the sampling (queries, psutil) is left out.

With --profile, one more replay runs under cProfile (in the same terminal)
and its top entries by cumulative and own time are printed.

    .venv/bin/python bench/tui_cost.py                     # ~2 min
    .venv/bin/python bench/tui_cost.py --repeats 3 --profile

Raw results: docs/bench/tui_cost.json.
"""

from __future__ import annotations

import argparse
import os
import pstats
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from common import machine, start_cluster, write_json

from pgparmon.demo import sample_sql

REPO = Path(__file__).resolve().parent.parent
PY = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv/bin/python").exists() \
    else sys.executable
SESSION = f"pgparmon-tui-cost-{os.getpid()}"


def record(scale: float, jobs: int, rec: Path) -> float:
    """A real pg_dump -Fd -j N of the demo database, recorded at 1 s."""
    with start_cluster(prefix="pgparmon-bench-") as cl:
        cl.psql("CREATE DATABASE demo")
        cl.psql(sample_sql(scale), dbname="demo")
        out = Path(tempfile.mkdtemp(prefix="pgparmon-tui-dump-"))
        shutil.chown(out, "postgres") if os.geteuid() == 0 else None
        t0 = time.perf_counter()
        subprocess.run([PY, "-m", "pgparmon", "run", "--json", "--interval", "1", "--record",
                        str(rec), "--", cl.client("pg_dump"), "-Fd", "-j", str(jobs), "-f",
                        str(out / "d"), "demo"], env=cl.env(), check=True,
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        shutil.rmtree(out, ignore_errors=True)
    return wall


def tmux(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=False)


def replay_cpu(rec: Path, width: int, height: int, warmup_s: float,
               profile: Path | None = None, tree: Path | None = None) -> dict[str, Any]:
    """Replay in a detached tmux window; CPU ms per wall second of the replay
    process, each second after warmup_s, until it ends. tree: run the
    pgparmon package of that checkout instead of this one."""
    pidfile = Path(tempfile.mkstemp(prefix="pgparmon-tui-pid-")[1])
    prof = f"-m cProfile -o {profile} " if profile else ""
    cd = f"cd {shlex.quote(str(tree.resolve()))} && " if tree else ""
    cmd = (f"echo $$ > {pidfile}; {cd}exec env TERM=xterm-256color COLORTERM=truecolor "
           f"{PY} {prof}-m pgparmon replay {rec} --speed 1")
    tmux("kill-session", "-t", SESSION)
    r = tmux("new-session", "-d", "-s", SESSION, "-x", str(width), "-y", str(height), cmd)
    if r.returncode != 0:
        raise SystemExit(f"tmux: {r.stderr.strip()}")
    deadline = time.monotonic() + 10
    pid = None
    while time.monotonic() < deadline and pid is None:
        txt = pidfile.read_text().strip() if pidfile.exists() else ""
        pid = int(txt) if txt.isdigit() else None
        time.sleep(0.05)
    if pid is None:
        raise SystemExit("the replay did not start")
    proc = psutil.Process(pid)
    t0 = time.monotonic()
    readings: list[tuple[float, float, float]] = []  # (t, cpu s, rss bytes)
    ended_at = None
    try:
        while True:
            try:
                c = proc.cpu_times()
                readings.append((time.monotonic() - t0, c.user + c.system,
                                 float(proc.memory_info().rss)))
            except psutil.NoSuchProcess:
                break
            # the replay shows the end screen and waits for q: stop there
            screen = tmux("capture-pane", "-p", "-t", SESSION).stdout
            if ended_at is None and ("finished" in screen and "items (" in screen):
                ended_at = time.monotonic() - t0
            if ended_at is not None and time.monotonic() - t0 > ended_at + 2:
                break
            if time.monotonic() - t0 > 600:
                break
            time.sleep(1.0)
    finally:
        tmux("send-keys", "-t", SESSION, "q")
        time.sleep(1.0 if profile else 0.3)
        tmux("kill-session", "-t", SESSION)
        pidfile.unlink(missing_ok=True)
    # steady: after the start-up, up to the last reading before the end
    # screen was seen (the interval that holds the job's end, its summary
    # built and drawn, is the end's cost, reported apart like the start-up's)
    steady = [(t, c) for t, c, _ in readings if t >= warmup_s and
              (ended_at is None or t < ended_at - 0.5)]
    after = [(t, c) for t, c, _ in readings if steady and t > steady[-1][0]]
    end_cpu = (after[-1][1] - steady[-1][1]) if after and steady else None
    per_s = [1000 * (c1 - c0) / (t1 - t0_) for (t0_, c0), (t1, c1) in zip(steady, steady[1:])
             if t1 > t0_]
    mean = (1000 * (steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0])
            if len(steady) >= 2 else None)
    return {"seconds": round(readings[-1][0], 1) if readings else None,
            "startup_cpu_s": round(readings[0][1], 3) if readings else None,
            "steady_ms_per_s_median": round(statistics.median(per_s), 1) if per_s else None,
            "steady_ms_per_s_mean": round(mean, 1) if mean is not None else None,
            "per_second_ms": [round(x, 1) for x in per_s],
            "peak_rss_mb": round(max(r for _, _, r in readings) / 1e6, 1) if readings else None,
            "end_screen_at_s": ended_at,
            "end_cpu_s": round(end_cpu, 3) if end_cpu is not None else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=2.0, help="demo database scale (default 2)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--size", default="160x50", help="terminal columns x rows")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--recording", type=Path, default=None,
                    help="replay this recording instead of recording a dump")
    ap.add_argument("--profile", action="store_true", help="one more replay under cProfile")
    ap.add_argument("--profile-out", type=Path, default=None,
                    help="keep the profile (pstats file) here")
    ap.add_argument("--keep-recording", type=Path, default=None,
                    help="copy the recording made here, for --recording next time")
    ap.add_argument("--compare", type=Path, default=None, metavar="TREE",
                    help="A/B: alternate each replay with one of the pgparmon package of "
                    "another checkout (e.g. a `git worktree` of the commit before a change), "
                    "order swapped every pair; prints both medians and the pairs' ratios")
    ap.add_argument("--out", type=Path, default=REPO / "docs/bench/tui_cost.json")
    a = ap.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("needs tmux (a real terminal for the TUI)")
    width, height = (int(x) for x in a.size.lower().split("x"))
    work = Path(tempfile.mkdtemp(prefix="pgparmon-tui-cost-"))
    doc: dict[str, Any] = {"benchmark": "tui_cost", "machine": machine(),
                           "settings": {"scale": a.scale, "jobs": a.jobs, "size": a.size,
                                        "warmup_s": a.warmup, "repeats": a.repeats}}
    try:
        rec = a.recording
        if rec is None:
            rec = work / "dump.pgparmon.gz"
            doc["dump_wall_s"] = round(record(a.scale, a.jobs, rec), 1)
            print(f"recorded a {doc['dump_wall_s']} s dump", file=sys.stderr)
            if a.keep_recording:
                shutil.copy(rec, a.keep_recording)
        if a.compare is not None:
            compare(doc, rec, width, height, a)
            return
        runs = []
        for i in range(a.repeats):
            r = replay_cpu(rec, width, height, a.warmup)
            runs.append(r)
            print(f"replay {i + 1}: steady {r['steady_ms_per_s_median']} ms/s (median), "
                  f"{r['steady_ms_per_s_mean']} ms/s (mean), start-up {r['startup_cpu_s']} s "
                  f"CPU, the end {r['end_cpu_s']} s CPU, peak RSS {r['peak_rss_mb']} MB",
                  file=sys.stderr)
        doc["runs"] = runs
        meds = [r["steady_ms_per_s_median"] for r in runs
                if r["steady_ms_per_s_median"] is not None]
        doc["steady_ms_per_s_median"] = statistics.median(meds) if meds else None
        means = [r["steady_ms_per_s_mean"] for r in runs if r["steady_ms_per_s_mean"] is not None]
        doc["steady_ms_per_s_mean"] = statistics.median(means) if means else None
        if a.profile:
            prof = a.profile_out or work / "replay.prof"
            replay_cpu(rec, width, height, a.warmup, profile=prof)
            deadline = time.monotonic() + 10
            while not prof.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            if prof.exists():
                st = pstats.Stats(str(prof))
                st.sort_stats("cumulative").print_stats(25)
                st.sort_stats("tottime").print_stats(25)
        write_json(a.out, doc)
        print(f"steady TUI CPU: {doc['steady_ms_per_s_mean']} ms per second (median of "
              f"{len(runs)} replays' means at {a.size}; per-second readings move in 10 ms "
              f"clock ticks); raw: {a.out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare(doc: dict[str, Any], rec: Path, width: int, height: int, a: Any) -> None:
    """Pairs of replays, this tree (A) and a.compare (B), the order swapped
    each pair: on a shared, noisy VM only figures taken side by side compare."""
    pairs = []
    for i in range(a.repeats):
        order = ("A", "B") if i % 2 == 0 else ("B", "A")
        got = {}
        for side in order:
            got[side] = replay_cpu(rec, width, height, a.warmup,
                                   tree=None if side == "A" else a.compare)
        ma, mb = got["A"]["steady_ms_per_s_mean"], got["B"]["steady_ms_per_s_mean"]
        pairs.append({"A": got["A"], "B": got["B"],
                      "ratio": round(ma / mb, 3) if ma and mb else None})
        print(f"pair {i + 1} ({'-'.join(order)}): A {ma} ms/s, B {mb} ms/s, A/B "
              f"{pairs[-1]['ratio']}", file=sys.stderr)
    doc["compare"] = {"A": str(REPO), "B": str(a.compare.resolve()), "pairs": pairs}
    for side in ("A", "B"):
        means = [p[side]["steady_ms_per_s_mean"] for p in pairs
                 if p[side]["steady_ms_per_s_mean"] is not None]
        doc["compare"][f"{side}_steady_ms_per_s_mean"] = statistics.median(means) if means else None
    ratios = [p["ratio"] for p in pairs if p["ratio"] is not None]
    doc["compare"]["ratio_median"] = statistics.median(ratios) if ratios else None
    write_json(a.out, doc)
    c = doc["compare"]
    print(f"steady TUI CPU, medians of {len(pairs)} pairs' means: A (this tree) "
          f"{c['A_steady_ms_per_s_mean']} ms/s, B ({c['B']}) {c['B_steady_ms_per_s_mean']} "
          f"ms/s; median ratio A/B {c['ratio_median']}; raw: {a.out}")


if __name__ == "__main__":
    main()
