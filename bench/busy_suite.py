"""The test suite on a busy machine: CI's `.ci/run` on a fresh clone while
CPU-bound processes keep the machine's cores busy, optionally with a slow
disk, repeated, pass/fail and time recorded.

CI runs on a shared 2-core machine where other work runs beside the suite:
a test that races the tool it starts (attaches before the tool connected,
reads a sample before a worker shows) passes alone and fails there. This
runs the suite the way CI does, under that load, N times in a row:

- `--burners N` (default: one per core) processes spinning in a busy loop
  at normal priority, started before each run and stopped after it;
- `--clone REPO --branch B`: each run in a fresh `git clone` (its own
  `.venv` bootstrapped by `./run`, as CI's first run is); default: this
  checkout's repository and branch;
- `--io-mbps M` (root, cgroup v1 blkio or cgroup v2 io): the whole run
  (pytest, the test clusters it starts, the tools, the monitor) in a cgroup
  whose reads and writes of the temp directory's disk are capped at M MB/s
  and `--io-iops` operations a second. Cgroup v1 throttles only I/O a
  process issues itself (reads missing the page cache, direct and sync
  writes), not the kernel's writeback of buffered writes; the bytes the
  throttle saw are recorded. Without root or the controller the run goes
  on unthrottled and says so;
- `--runs N` (default 3): stops at the first failing run unless
  `--keep-going` (the check is N passing runs in a row);
- `-- ARGS`: `./run test ARGS` instead of `.ci/run` (a focused repeat,
  e.g. `-- tests/test_tui.py -q`).

Each run's summary line, failures, wall time and the load average seen are
printed and appended to `--out` (JSON Lines, default
docs/bench/busy_suite.jsonl); the full logs stay under `--workdir`
(runK.log).

    .venv/bin/python bench/busy_suite.py                       # 3 busy runs, ~20 min each
    .venv/bin/python bench/busy_suite.py --runs 1 --io-mbps 20 # one with a slow disk too
    .venv/bin/python bench/busy_suite.py --runs 5 -- tests/test_pg_dump_plan.py -q
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BLKIO_V1 = Path("/sys/fs/cgroup/blkio")
UNIFIED = [Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")]
SUMMARY = re.compile(r"^(?:=+ )?(.*\b(?:passed|failed|error|errors)\b.*) in ([\d.]+)s")
FAILED = re.compile(r"^(FAILED|ERROR) (\S+)")


# ---- load ------------------------------------------------------------------------


class Burners:
    """N processes each spinning one core, at normal priority."""

    def __init__(self, n: int) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                       stdin=subprocess.DEVNULL, start_new_session=True)
                      for _ in range(n)]

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def disk_of(path: Path) -> tuple[int, int]:
    """major, minor of the whole disk holding path (a throttle takes a disk,
    not a partition)."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    sysdev = Path(f"/sys/dev/block/{major}:{minor}")
    if (sysdev / "partition").exists():
        parent = (sysdev.resolve().parent / "dev").read_text().strip()
        major, minor = (int(x) for x in parent.split(":"))
    return major, minor


class IoThrottle:
    """A cgroup capping read and write bytes (and operations) a second on
    one disk; a process written to its cgroup.procs (and all it starts
later) is throttled."""

    def __init__(self, disk: tuple[int, int], bps: int, iops: int | None) -> None:
        self.cg: Path | None = None
        self.version = 0
        self.why = ""
        dev = f"{disk[0]}:{disk[1]}"
        name = f"pgparmon-busy-{os.getpid()}"
        if os.geteuid() != 0:
            self.why = "not root: no I/O throttle"
            return
        try:
            if (BLKIO_V1 / "cgroup.procs").exists():
                cg = BLKIO_V1 / name
                cg.mkdir(exist_ok=True)
                self.cg, self.version = cg, 1
                for rw in ("read", "write"):
                    (cg / f"blkio.throttle.{rw}_bps_device").write_text(f"{dev} {bps}")
                    if iops:
                        (cg / f"blkio.throttle.{rw}_iops_device").write_text(f"{dev} {iops}")
                return
            for root in UNIFIED:
                if "io" in (root / "cgroup.controllers").read_text().split() \
                        if (root / "cgroup.controllers").exists() else False:
                    cg = root / name
                    cg.mkdir(exist_ok=True)
                    self.cg, self.version = cg, 2
                    limit = f"{dev} rbps={bps} wbps={bps}"
                    if iops:
                        limit += f" riops={iops} wiops={iops}"
                    (cg / "io.max").write_text(limit)
                    return
            self.why = "no blkio (cgroup v1) or io (cgroup v2) controller: no I/O throttle"
        except OSError as exc:
            self.close()
            self.why = f"cannot set an I/O throttle: {exc}"

    def seen(self) -> dict[str, int]:
        """Bytes and operations that went through the throttle."""
        out: dict[str, int] = {}
        if self.cg is None:
            return out
        try:
            if self.version == 1:
                for key, fname in (("bytes", "blkio.throttle.io_service_bytes"),
                                   ("ios", "blkio.throttle.io_serviced")):
                    for line in (self.cg / fname).read_text().splitlines():
                        parts = line.split()
                        if len(parts) == 3 and parts[1] in ("Read", "Write"):
                            k = f"{parts[1].lower()}_{key}"
                            out[k] = out.get(k, 0) + int(parts[2])
            else:
                for line in (self.cg / "io.stat").read_text().splitlines():
                    for kv in line.split()[1:]:
                        k, _, v = kv.partition("=")
                        if k in ("rbytes", "wbytes", "rios", "wios"):
                            out[k] = out.get(k, 0) + int(v)
        except OSError:
            pass
        return out

    def close(self) -> None:
        if self.cg is None or not self.cg.exists():
            return
        parent = self.cg.parent
        try:
            for pid in (self.cg / "cgroup.procs").read_text().split():
                try:
                    (parent / "cgroup.procs").write_text(pid)
                except OSError:
                    pass
            self.cg.rmdir()
        except OSError:
            pass
        self.cg = None


class LoadWatch:
    """The 1-minute load average every 15 s while a run lasts."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.done = threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self) -> None:
        while not self.done.wait(15):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> dict[str, float]:
        self.done.set()
        self.t.join()
        s = self.samples or [os.getloadavg()[0]]
        return {"mean": round(sum(s) / len(s), 2), "max": round(max(s), 2)}


# ---- one run -----------------------------------------------------------------------


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def parse_log(text: str) -> dict[str, Any]:
    summary, secs = "", None
    failures: list[str] = []
    for line in text.splitlines():
        m = SUMMARY.match(line.strip())
        if m:
            summary, secs = m.group(1), float(m.group(2))
        f = FAILED.match(line)
        if f:
            failures.append(f"{f.group(1)} {f.group(2)}")
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed"
                                                r"|xpassed|deselected)", summary)}
    return {"summary": summary, "pytest_s": secs, "counts": counts, "failures": failures}


def one_run(k: int, a: argparse.Namespace, work: Path, throttle: IoThrottle | None) -> dict[str, Any]:
    clone = work / f"run{k}"
    shutil.rmtree(clone, ignore_errors=True)
    git("clone", "--quiet", "--branch", a.branch, str(a.clone), str(clone))
    commit = git("rev-parse", "HEAD", cwd=clone)
    cmd = ["./run", "test", *a.pytest_args] if a.pytest_args else [".ci/run"]
    log = work / f"run{k}.log"
    burners = Burners(a.burners)
    watch = LoadWatch()
    t0 = time.monotonic()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    argv = cmd
    if throttle is not None and throttle.cg is not None:  # in the cgroup before it starts
        argv = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(throttle.cg / "cgroup.procs"),
                *cmd]
    timed_out = False
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=clone, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc = proc.wait(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        finally:
            wall = time.monotonic() - t0
            load = watch.stop()
            burners.stop()
    res = parse_log(log.read_text(errors="replace"))
    doc: dict[str, Any] = {
        "run": k, "started": started, "commit": commit, "command": " ".join(cmd),
        "burners": a.burners, "rc": rc, "timed_out": timed_out,
        "passed": rc == 0 and not timed_out, "wall_s": round(wall, 1),
        **res, "loadavg_1m": load, "machine": f"{os.cpu_count()} cores",
    }
    if throttle is not None:
        doc["io_throttle"] = {"mb_s": a.io_mbps, "iops": a.io_iops,
                              "cgroup": f"v{throttle.version}" if throttle.cg else None,
                              "why_not": throttle.why or None, "seen": throttle.seen()}
    if not a.keep_clones:
        shutil.rmtree(clone / ".venv", ignore_errors=True)
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--burners", type=int, default=os.cpu_count() or 2,
                    help="CPU-bound processes beside the suite (default: one per core)")
    ap.add_argument("--clone", type=Path, default=REPO, help="repository to clone each run "
                    "from (default: this checkout)")
    ap.add_argument("--branch", default=None, help="branch to clone (default: this "
                    "checkout's; commit first, uncommitted work is not in a clone)")
    ap.add_argument("--io-mbps", type=float, default=None,
                    help="cap the run's reads and writes at this many MB/s (root, cgroups)")
    ap.add_argument("--io-iops", type=int, default=None,
                    help="with --io-mbps: also cap operations a second")
    ap.add_argument("--keep-going", action="store_true",
                    help="do every run even after one fails")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds before a run is "
                    "killed (counted as failed)")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="where the clones and logs go (default: a new temp directory)")
    ap.add_argument("--keep-clones", action="store_true", help="keep each clone's .venv")
    ap.add_argument("--out", type=Path, default=REPO / "docs/bench/busy_suite.jsonl")
    ap.add_argument("pytest_args", nargs="*", help="after --: ./run test ARGS instead of .ci/run")
    a = ap.parse_args()
    a.branch = a.branch or git("rev-parse", "--abbrev-ref", "HEAD", cwd=a.clone)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="pgparmon-busy-"))
    work.mkdir(parents=True, exist_ok=True)
    throttle = None
    if a.io_mbps:
        throttle = IoThrottle(disk_of(Path(tempfile.gettempdir())), int(a.io_mbps * 1e6),
                              a.io_iops)
        if throttle.why:
            print(f"busy_suite: {throttle.why}", file=sys.stderr)
    print(f"busy_suite: {a.runs} run(s) of {a.clone} ({a.branch}), {a.burners} burner(s), "
          f"logs in {work}", file=sys.stderr, flush=True)
    in_a_row = 0
    try:
        for k in range(1, a.runs + 1):
            doc = one_run(k, a, work, throttle)
            a.out.parent.mkdir(parents=True, exist_ok=True)
            with open(a.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(doc) + "\n")
            in_a_row = in_a_row + 1 if doc["passed"] else 0
            verdict = "PASS" if doc["passed"] else f"FAIL (rc {doc['rc']})"
            print(f"run {k}: {verdict} {doc['summary'] or '(no pytest summary)'}; "
                  f"wall {doc['wall_s'] / 60:.1f} min; load avg {doc['loadavg_1m']['mean']} "
                  f"(max {doc['loadavg_1m']['max']})", flush=True)
            for f_ in doc["failures"]:
                print(f"    {f_}", flush=True)
            if not doc["passed"] and not a.keep_going:
                break
    finally:
        if throttle is not None:
            throttle.close()
    print(f"busy_suite: {in_a_row} passing run(s) in a row at the end", flush=True)
    sys.exit(0 if in_a_row == a.runs else 1)


if __name__ == "__main__":
    main()
