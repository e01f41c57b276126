#!/usr/bin/env python3
"""pgparmon advise against real parallel pg_dump / pg_restore / COPY runs on a bare host.

    OUT=/root/bighost-out python3 bundle/sweep.py        (as root)

Runs from the bundle make_bundle.sh builds (this file's folder): a
relocatable PostgreSQL 15 (pg15.tar.gz), the wheels of pgparmon and its
dependencies (wheels/), and summary.py. The host needs Python 3.11 or 3.12
(the versions the bundle has wheels for), root, and nothing else: no
PostgreSQL, no network.

It extracts PostgreSQL, installs pgparmon into a virtual environment,
creates an OS user to run a throwaway server (Unix socket only), seeds a
database of NTAB equal tables, then for a dump and for a restore asks
`pgparmon advise --json` (static, --probe, --probe --probe-seconds PROBE_S)
and times the real pg_dump -Fd -j N / pg_restore -j N over the JOBS list;
then writes a CSV of COPY_MB from the seeded tables, asks `pgparmon advise
--copy` the same three ways and times real loads of it by J parallel \\copy
streams (split -n r/J, the advice's command) over COPY_JOBS.
Each step is a JSON line in $OUT/results.jsonl; the console goes to
$OUT/log.txt too. A step that would not fit in BUDGET is recorded as
skipped. README.md (next to this file) lists the knobs.

Standard library only.
"""

from __future__ import annotations

import grp
import json
import os
import platform
import pwd
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# copysplit.py (the load's command): next to this file in the bundle, in
# bench/ in the repository
sys.path[:0] = [str(HERE), str(HERE.parent)]
from copysplit import copied_rows, split_copy_cmd  # noqa: E402

T0 = time.monotonic()
END_RESERVE = 25.0        # seconds kept for stopping the server, cleanup, the summary
STATIC_EST = 20.0         # a static advice before one was timed
DB = "bench"              # the seeded database
ADV_DB = "r_adv"          # the restore advice's empty target
RUN_DB = "r_run"          # each timed restore's fresh target
COPY_DB = "c_load"        # the COPY part's target database
COPY_TABLE = "items"      # its logged target table (one index), loaded by every J
PARTS = ("dump", "restore", "builds", "copy")


class Fatal(Exception):
    """A setup problem: one line, the run goes to its end."""


class Interrupted(BaseException):
    pass


# --------------------------------------------------------------------------
# knobs


def _die(msg: str) -> None:
    print(f"sweep.py: {msg}", file=sys.stderr)
    sys.exit(2)


def _int(name: str, default: int, lo: int, hi: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        v = int(raw)
    except ValueError:
        _die(f"{name}={raw!r} is not a whole number")
    if not lo <= v <= hi:
        _die(f"{name}={v} is outside {lo}..{hi}")
    return v


def _jobs(name: str, default: list[int]) -> list[int]:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        js = sorted({int(x) for x in re.split(r"[\s,]+", raw) if x})
    except ValueError:
        _die(f"{name}={raw!r}: give job counts like \"1 2 4 8\"")
    if not js or js[0] < 1 or js[-1] > 512:
        _die(f"{name}={raw!r}: job counts must be 1..512")
    return js


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def mem_kb(field: str = "MemTotal") -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def default_copy_mb(n: int) -> int:
    """The CSV of the COPY part: 64 MB a core (1 GB on 16 cores, 128 MB on
    2), 64 MB to 4 GB."""
    return max(64, min(4096, 64 * n))


def _parts(raw: str) -> list[str]:
    names = [x for x in re.split(r"[\s,]+", raw.strip().lower()) if x]
    bad = [x for x in names if x not in PARTS]
    if bad or not names:
        _die(f"PARTS={raw!r}: name some of {' '.join(PARTS)}")
    if "restore" in names and "dump" not in names:
        _die("PARTS: the restore part restores the dump part's dump: add dump")
    return [x for x in PARTS if x in names]


def default_jobs(n: int) -> list[int]:
    """1 2 4 8, every power of two up to the cores, and the cores."""
    js = {1, 2, 4, 8, n}
    p = 1
    while p <= n:
        js.add(p)
        p *= 2
    return sorted(js)


@dataclass
class Knobs:
    out: Path
    work: Path
    scale: int
    ntab: int
    budget: float
    jobs: list[int]
    restore_jobs: list[int]
    copy_jobs: list[int]
    copy_mb: int
    parts: list[str]
    repeats: int
    add_rec: bool
    probe_s: float
    shared_buffers: str
    port: int
    osuser: str
    keep: bool
    install: str

    @classmethod
    def from_env(cls) -> "Knobs":
        n = cores()
        jobs = _jobs("JOBS", default_jobs(n))
        sb = os.environ.get("SHARED_BUFFERS", "").strip()
        if not sb:
            sb = f"{max(128, min(8192, mem_kb() // 4 // 1024))}MB"
        elif not re.fullmatch(r"\d+\s*(kB|MB|GB|TB)?", sb):
            _die(f"SHARED_BUFFERS={sb!r}: give a size like 8GB or 2048MB")
        user = os.environ.get("PGOSUSER", "pgsweep").strip()
        if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,30}", user):
            _die(f"PGOSUSER={user!r} is not a plain user name")
        install = os.environ.get("INSTALL", "auto").strip() or "auto"
        if install not in ("auto", "venv", "nopip", "target"):
            _die(f"INSTALL={install!r}: one of auto, venv, nopip, target")
        try:
            probe_s = float(os.environ.get("PROBE_S", "30"))
        except ValueError:
            _die("PROBE_S must be a number of seconds")
        if not 1 <= probe_s <= 600:
            _die("PROBE_S must be 1..600 seconds")
        return cls(
            out=Path(os.environ.get("OUT") or "bighost-out").resolve(),
            work=Path(os.environ.get("WORK") or "/var/tmp/pgparmon-bighost").resolve(),
            scale=_int("SCALE", 850_000, 1, 10**9),
            ntab=_int("NTAB", 16, 1, 1000),
            budget=float(_int("BUDGET", 900, 60, 7 * 86400)),
            jobs=jobs,
            restore_jobs=_jobs("RESTORE_JOBS", jobs),
            copy_jobs=_jobs("COPY_JOBS", jobs),
            copy_mb=_int("COPY_MB", default_copy_mb(n), 1, 1_000_000),
            parts=_parts(os.environ.get("PARTS") or " ".join(PARTS)),
            repeats=_int("REPEATS", 1, 1, 50),
            add_rec=_int("ADD_REC", 1, 0, 1) == 1,
            probe_s=probe_s,
            shared_buffers=sb.replace(" ", ""),
            port=_int("PORT", 55499, 1024, 65535),
            osuser=user,
            keep=_int("KEEP", 0, 0, 1) == 1,
            install=install,
        )


# --------------------------------------------------------------------------
# small helpers


def elapsed() -> float:
    return time.monotonic() - T0


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def orders(jobs: list[int], repeats: int) -> list[list[int]]:
    """The order of j in each repeat: ascending, descending, then both again
    rotated by one, ... so that no j always runs first, last or after the
    same neighbour."""
    out = []
    for r in range(repeats):
        k = (r // 2) % len(jobs)
        o = jobs[k:] + jobs[:k]
        out.append(o[::-1] if r % 2 else o)
    return out


def dir_bytes(p: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(p):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def tail(text: str, n: int = 2000) -> str:
    text = text.strip()
    return text[-n:] if len(text) > n else text


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


@dataclass
class Res:
    rc: int
    out: str
    err: str
    secs: float
    timed_out: bool


def run(cmd: list[str], *, env: dict[str, str], timeout: float, user: tuple[int, int] | None = None,
        stdin: str | None = None, cwd: str | None = None, stdout_to: Path | None = None) -> Res:
    """One command, its own process group (killed whole on the timeout: rc
    124), output captured (stdout into the file stdout_to when given)."""
    kw: dict[str, Any] = {}
    if user is not None:
        kw.update(user=user[0], group=user[1], extra_groups=[])
    t0 = time.monotonic()
    try:
        with open(stdout_to, "wb") if stdout_to else open(os.devnull, "rb") as sink:
            p = subprocess.Popen(cmd,
                                 stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                 stdout=sink if stdout_to else subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env, cwd=cwd,
                                 start_new_session=True, **kw)
    except OSError as exc:
        return Res(127, "", f"cannot run {cmd[0]}: {exc.strerror or exc}", 0.0, False)
    try:
        out, err = p.communicate(stdin.encode() if stdin is not None else None,
                                 timeout=max(1.0, timeout))
        rc, timed_out = p.returncode, False
    except subprocess.TimeoutExpired:
        _killpg(p)
        out, err = p.communicate()
        rc, timed_out = 124, True
    except BaseException:
        _killpg(p)
        p.wait()
        raise
    return Res(rc, (out or b"").decode(errors="replace"), err.decode(errors="replace"),
               time.monotonic() - t0, timed_out)


def _killpg(p: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(p.pid, sig)
        except OSError:
            return
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# --------------------------------------------------------------------------
# the sweep


class Sweep:
    def __init__(self, k: Knobs) -> None:
        self.k = k
        self.ncores = cores()
        self.manifest = self._manifest()
        self.pgtree = k.work / "pg15"
        self.wbin = self.pgtree / "bin"
        self.pghome = k.work / "pg"
        self.data = self.pghome / "data"
        self.sock = self.pghome / "sock"
        self.slog = self.pghome / "server.log"
        self.dumps = k.work / "dumps"
        self.venv = k.work / "venv"
        self.site = k.work / "site"
        self.py: list[str] = []
        self.py_env: dict[str, str] = {}
        self.uid_gid: tuple[int, int] | None = None
        self.user_created = ""          # "", "useradd" or "manual"
        self.tz = "UTC"
        self.server_up = False
        self.seeded = False
        self.heap_bytes = 0
        self.times: dict[str, dict[int, list[float]]] = {p: {} for p in PARTS}
        self.advices: dict[str, dict[str, dict[str, Any]]] = {p: {} for p in PARTS}
        self.csv: Path | None = None    # the COPY part's file, once written
        self.csv_rows = 0
        self.copy_done = False          # the COPY part ran (or gave up): nothing to reserve
        self.advise_secs: list[float] = []
        self.kept: tuple[int, Path] | None = None
        self.skipped = 0
        self.status = "ok"
        k.out.mkdir(parents=True, exist_ok=True)
        self.results = k.out / "results.jsonl"
        self.logf = open(k.out / "log.txt", "a", encoding="utf-8")

    # -------------------------------------------------------------- output
    def log(self, msg: str, console: bool = True) -> None:
        line = f"[{elapsed():7.1f}s] {msg}"
        if console:
            print(line, flush=True)
        self.logf.write(line + "\n")
        self.logf.flush()

    def rec(self, op: str, **fields: Any) -> None:
        row = {"op": op, "at_s": round(elapsed(), 3), **fields}
        with open(self.results, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=str) + "\n")

    # -------------------------------------------------------------- budget
    def remaining(self) -> float:
        return self.k.budget - elapsed()

    def fits(self, est: float, reserve: float) -> bool:
        return self.remaining() - est >= reserve

    def tmo(self) -> float:
        """A command's timeout: what is left of the budget less the end's share."""
        return max(5.0, self.remaining() - END_RESERVE)

    def skip(self, op: str, est: float, reserve: float, **fields: Any) -> None:
        reason = (f"budget: estimate {est:.0f} s + reserve {reserve:.0f} s > "
                  f"{max(0.0, self.remaining()):.0f} s left")
        self.skipped += 1
        self.log(f"{op} {' '.join(f'{k}={v}' for k, v in fields.items())} SKIPPED ({reason})")
        self.rec(op, skipped=True, reason=reason, estimate_s=round(est, 1), **fields)

    # -------------------------------------------------------------- environments
    def _manifest(self) -> dict[str, str]:
        out = {}
        try:
            for line in (HERE / "MANIFEST").read_text().splitlines():
                k, _, v = line.partition("=")
                if k:
                    out[k.strip()] = v.strip()
        except OSError:
            pass
        return out

    def base_env(self) -> dict[str, str]:
        """The host's environment less anything that would point a program at
        another server, other libraries or other Python packages; the bundle's
        wrappers first on PATH."""
        drop = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV",
                "PGPARMON_PGBIN")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PG", "PIP_")) and k not in drop}
        path = env.get("PATH") or "/usr/local/bin:/usr/bin:/bin"
        for extra in ("/usr/sbin", "/sbin"):
            if extra not in path.split(":"):
                path += ":" + extra
        env["PATH"] = f"{self.wbin}:{path}"
        env["PGHOST"] = str(self.sock)
        env["PGPORT"] = str(self.k.port)
        env["PGUSER"] = self.k.osuser
        env["PGCONNECT_TIMEOUT"] = "20"
        env["PGPARMON_PGBIN"] = str(self.wbin)
        return env

    def server_env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "HOME": str(self.pghome), "TZ": self.tz, "LC_ALL": "C"}

    def pg(self, name: str) -> str:
        return str(self.wbin / name)

    def as_user(self, cmd: list[str], timeout: float = 120.0) -> Res:
        return run(cmd, env=self.server_env(), timeout=timeout, user=self.uid_gid,
                   cwd=str(self.pghome))

    def psql(self, sql: str, db: str = "postgres", timeout: float | None = None) -> str:
        res = run([self.pg("psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql],
                  env=self.base_env(), timeout=timeout or min(self.tmo(), 600.0))
        if res.rc != 0:
            raise Fatal(f"psql failed ({sql[:60]}): {last_line(res.err) or res.rc}")
        return res.out.strip()

    # -------------------------------------------------------------- sysinfo
    def sysinfo(self) -> None:
        cpu = ""
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        cpu = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        osname = ""
        try:
            for line in Path("/etc/os-release").read_text().splitlines():
                if line.startswith("PRETTY_NAME="):
                    osname = line.split("=", 1)[1].strip('"')
        except OSError:
            pass
        cpu_max = None
        try:
            cpu_max = Path("/sys/fs/cgroup/cpu.max").read_text().strip()
        except OSError:
            pass
        probe = self.k.work
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        du = shutil.disk_usage(probe)
        shm = None
        try:
            shm = shutil.disk_usage("/dev/shm").free
        except OSError:
            pass
        info = {
            "nproc": self.ncores, "cpu_count": os.cpu_count(), "cgroup_cpu_max": cpu_max,
            "mem_total_kb": mem_kb(), "mem_available_kb": mem_kb("MemAvailable"),
            "cpu_model": cpu, "kernel": platform.release(), "uname": " ".join(platform.uname()),
            "os": osname, "glibc": os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None,
            "python": platform.python_version(), "python_executable": sys.executable,
            "work": str(self.k.work), "work_fs": self.fs_of(probe), "work_free_bytes": du.free,
            "dev_shm_free_bytes": shm, "host_tools": {t: shutil.which(t) for t in
                                                      ("gzip", "dd", "head", "tail", "split",
                                                       "useradd")},
            "bundle": self.manifest,
            "knobs": {"SCALE": self.k.scale, "NTAB": self.k.ntab, "BUDGET": self.k.budget,
                      "JOBS": self.k.jobs, "RESTORE_JOBS": self.k.restore_jobs,
                      "COPY_JOBS": self.k.copy_jobs, "COPY_MB": self.k.copy_mb,
                      "PARTS": self.k.parts,
                      "REPEATS": self.k.repeats, "ADD_REC": int(self.k.add_rec),
                      "PROBE_S": self.k.probe_s, "SHARED_BUFFERS": self.k.shared_buffers,
                      "PORT": self.k.port, "PGOSUSER": self.k.osuser, "WORK": str(self.k.work),
                      "KEEP": int(self.k.keep), "INSTALL": self.k.install},
        }
        self.log(f"host: {self.ncores} cores ({cpu}), {mem_kb() / 1048576:.1f} GiB, "
                 f"{osname}, kernel {platform.release()}, Python {platform.python_version()}, "
                 f"{info['glibc']}")
        self.log(f"work dir {self.k.work} on {info['work_fs']}, {du.free / 1e9:.1f} GB free")
        est_heap = 150 * self.k.scale * self.k.ntab
        need = 6 * est_heap + (4e6 * self.k.copy_mb if "copy" in self.k.parts else 0)
        if du.free < need:
            self.log(f"warning: about {need / 1e9:.1f} GB may be needed in {probe} "
                     "(database, a restored copy, a dump, WAL, the CSV and its loaded table)")
        self.rec("sysinfo", **info)

    @staticmethod
    def fs_of(path: Path) -> str:
        best, fs = "", "?"
        try:
            with open("/proc/mounts") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 3:
                        mnt = parts[1]
                        p = str(path)
                        if (p == mnt or p.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                            best, fs = mnt, f"{parts[2]} ({parts[0]} on {mnt})"
        except OSError:
            pass
        return fs

    # -------------------------------------------------------------- setup
    def setup(self) -> None:
        t0 = time.monotonic()
        info: dict[str, Any] = {}
        for f in ("pg15.tar.gz", "pgparmon.commit", "wheels/pip.txt"):
            if not (HERE / f).is_file():
                raise Fatal(f"{HERE / f} is missing: sweep.py runs from a bundle built by "
                            "make_bundle.sh")
        pyver = f"cp{sys.version_info[0]}{sys.version_info[1]}"
        wheel_list = HERE / "wheels" / f"{pyver}.txt"
        if not wheel_list.is_file():
            have = " ".join(sorted(p.stem for p in (HERE / "wheels").glob("cp*.txt")))
            raise Fatal(f"this bundle has wheels for {have or 'no Python'}, not for "
                        f"Python {platform.python_version()}: run sweep.py with one of those")
        self.stop_leftover()
        self.k.work.mkdir(parents=True, exist_ok=True)
        os.chmod(self.k.work, 0o755)
        for p in (self.pgtree, self.pghome, self.dumps, self.venv, self.site):
            shutil.rmtree(p, ignore_errors=True)

        self.log(f"extract PostgreSQL into {self.pgtree}")
        with tarfile.open(HERE / "pg15.tar.gz") as tf:
            if hasattr(tarfile, "data_filter"):
                tf.extractall(self.k.work, filter="data")
            else:
                tf.extractall(self.k.work)
        res = run([self.pg("postgres"), "--version"], env=self.base_env(), timeout=30)
        if res.rc != 0:
            raise Fatal(f"the bundled postgres does not start: {last_line(res.err or res.out)}")
        info["postgres_version"] = res.out.strip()

        self.install_python(wheel_list, info)
        self.create_user(info)
        self.init_server(info)
        self.check_programs(info)
        info["seconds"] = round(time.monotonic() - t0, 3)
        info["pgparmon_commit"] = (HERE / "pgparmon.commit").read_text().strip()
        self.rec("setup", ok=True, **info)
        self.log(f"setup done in {info['seconds']:.1f} s")

    def install_python(self, wheel_list: Path, info: dict[str, Any]) -> None:
        """A venv with pip; a venv without pip and the bundled pip wheel; or,
        where even venv is missing, pip --target and PYTHONPATH."""
        wheels = [str(HERE / "wheels" / w) for w in wheel_list.read_text().split()]
        pipwhl = HERE / "wheels" / (HERE / "wheels" / "pip.txt").read_text().strip()
        env = {k: v for k, v in self.base_env().items() if not k.startswith("PG")}
        env["PIP_CONFIG_FILE"] = os.devnull
        quiet = ["--no-index", "--no-deps", "--no-cache-dir", "--disable-pip-version-check", "-q"]
        vpy = str(self.venv / "bin" / "python")
        tiers = ["venv", "venv --without-pip + bundled pip", "pip --target + PYTHONPATH"]
        start = {"auto": 0, "venv": 0, "nopip": 1, "target": 2}[self.k.install]
        mode, pip = "", []
        for mode in tiers[start:]:
            shutil.rmtree(self.venv, ignore_errors=True)
            if mode == "venv":
                res = run([sys.executable, "-m", "venv", str(self.venv)], env=env, timeout=300)
                pip = [vpy, "-m", "pip"]
            elif mode.startswith("venv --without-pip"):
                res = run([sys.executable, "-m", "venv", "--without-pip", str(self.venv)], env=env,
                          timeout=300)
                pip = [vpy, f"{pipwhl}/pip"]
            else:
                pip = [sys.executable, f"{pipwhl}/pip"]
                break
            if res.rc == 0:
                break
            if self.k.install == "venv":
                raise Fatal(f"python -m venv failed: {last_line(res.err)}")
            self.log(f"{sys.executable} -m {mode} failed ({last_line(res.err)}); next: "
                     f"{tiers[tiers.index(mode) + 1]}")
        self.log(f"install pgparmon and {len(wheels) - 1} wheels ({mode})")
        if mode == tiers[2]:
            res = run([*pip, "install", *quiet, "--target", str(self.site), *wheels], env=env,
                      timeout=600)
            self.py = [sys.executable]
            self.py_env = {"PYTHONPATH": str(self.site)}
        else:
            res = run([*pip, "install", *quiet, *wheels], env=env, timeout=600)
            self.py = [vpy]
        if res.rc != 0:
            raise Fatal(f"pip install failed: {last_line(res.err or res.out)}")
        if mode != tiers[2]:
            chk = run([*pip, "check"], env=env, timeout=120)
            info["pip_check"] = last_line(chk.out or chk.err)
            if chk.rc != 0:
                raise Fatal(f"pip check: {last_line(chk.out or chk.err)}")
        res = run([*self.py, "-c",
                   "import pgparmon, psycopg, textual, rich, typer, psutil, importlib.metadata as m\n"
                   "print(' '.join(f'{d}={m.version(d)}' for d in ('pgparmon', 'psycopg', "
                   "'psycopg-binary', 'textual', 'rich', 'typer', 'psutil')), "
                   "'libpq', psycopg.pq.version(), psycopg.pq.__impl__)"],
                  env=self.pgparmon_env(), timeout=120)
        if res.rc != 0:
            raise Fatal(f"pgparmon does not import: {last_line(res.err)}")
        info.update(install_mode=mode, python_packages=res.out.strip(),
                    wheels=[os.path.basename(w) for w in wheels])
        self.log(f"python: {res.out.strip()}")

    def pgparmon_env(self) -> dict[str, str]:
        env = self.base_env()
        env.update(self.py_env)
        return env

    def create_user(self, info: dict[str, Any]) -> None:
        name = self.k.osuser
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            pw = None
        if pw is None:
            shell = next((s for s in ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")
                          if os.path.exists(s)), "/bin/false")
            useradd = shutil.which("useradd", path=self.base_env()["PATH"])
            if useradd:
                res = run([useradd, "--system", "--no-create-home", "--user-group", "--home-dir",
                           str(self.pghome), "--shell", shell, name], env=self.base_env(), timeout=60)
                if res.rc == 0:
                    self.user_created = "useradd"
                else:
                    self.log(f"useradd failed: {last_line(res.err)}")
            if not self.user_created:
                self.add_user_by_hand(name, shell)
            try:
                pw = pwd.getpwnam(name)
            except KeyError:
                raise Fatal(f"could not create the OS user {name}") from None
            self.log(f"created OS user {name} (uid {pw.pw_uid}, {self.user_created})")
        if pw.pw_uid == 0:
            raise Fatal(f"PGOSUSER={name} is root: the server needs an unprivileged user")
        self.uid_gid = (pw.pw_uid, pw.pw_gid)
        info["os_user"] = {"name": name, "uid": pw.pw_uid, "created": self.user_created or None}

    def add_user_by_hand(self, name: str, shell: str) -> None:
        used_uids = {p.pw_uid for p in pwd.getpwall()}
        used_gids = {g.gr_gid for g in grp.getgrall()}
        uid = next(i for i in range(990, 60000) if i not in used_uids and i not in used_gids)
        with open("/etc/group", "a") as f:
            f.write(f"{name}:x:{uid}:\n")
        with open("/etc/passwd", "a") as f:
            f.write(f"{name}:x:{uid}:{uid}:pgparmon bighost sweep:{self.pghome}:{shell}\n")
        self.user_created = "manual"

    def remove_user(self) -> None:
        name = self.k.osuser
        if self.user_created == "useradd":
            userdel = shutil.which("userdel", path=self.base_env()["PATH"])
            if userdel:
                res = run([userdel, name], env=self.base_env(), timeout=60)
                if res.rc != 0:
                    self.log(f"userdel {name}: {last_line(res.err)}")
                    return
            self.log(f"removed OS user {name}")
        elif self.user_created == "manual":
            for path in ("/etc/passwd", "/etc/group"):
                lines = Path(path).read_text().splitlines(keepends=True)
                Path(path).write_text("".join(ln for ln in lines if not ln.startswith(name + ":")))
            self.log(f"removed OS user {name} (by hand)")

    def init_server(self, info: dict[str, Any]) -> None:
        assert self.uid_gid is not None
        sockfile = self.sock / f".s.PGSQL.{self.k.port}"
        if len(str(sockfile)) > 100:
            raise Fatal(f"the socket path {sockfile} is too long: choose a shorter WORK")
        self.sock.mkdir(parents=True)
        for p in (self.pghome, self.sock):
            os.chown(p, *self.uid_gid)
        os.chmod(self.pghome, 0o700)
        self.dumps.mkdir(parents=True)
        # GMT is built into PostgreSQL; UTC comes from the host's tzdata
        self.tz = "UTC" if os.path.exists("/usr/share/zoneinfo/UTC") else "GMT"
        res = self.as_user([self.pg("postgres"), "--version"], timeout=30)
        if res.rc != 0:
            raise Fatal(f"the OS user {self.k.osuser} cannot run {self.pg('postgres')} "
                        f"({last_line(res.err)}): choose a WORK every user can reach")
        self.log("initdb")
        res = self.as_user([self.pg("initdb"), "-D", str(self.data), "-A", "trust", "-E", "UTF8",
                            "--locale=C", "-U", self.k.osuser], timeout=300)
        if res.rc != 0:
            raise Fatal(f"initdb failed: {last_line(res.err or res.out)}")
        dsm = "mmap"
        try:
            if shutil.disk_usage("/dev/shm").free > 2 * 1024**3 and os.access("/dev/shm", os.W_OK):
                dsm = "posix"
        except OSError:
            pass
        maxj = max(self.k.jobs + self.k.restore_jobs + self.k.copy_jobs)
        settings = {
            "listen_addresses": "''",
            "port": str(self.k.port),
            "unix_socket_directories": f"'{self.sock}'",
            "max_connections": str(max(200, 2 * maxj + 20)),
            "shared_buffers": self.k.shared_buffers,
            "fsync": "on",
            "synchronous_commit": "off",
            "max_wal_size": "16GB",
            "checkpoint_timeout": "30min",
            "maintenance_work_mem": "1GB",
            "max_worker_processes": str(2 * self.ncores),
            "dynamic_shared_memory_type": dsm,
            "jit": "off",
            "timezone": f"'{self.tz}'",
            "log_timezone": f"'{self.tz}'",
            "log_checkpoints": "on",
        }
        with open(self.data / "postgresql.conf", "a") as f:
            f.write("\n# --- bench/bighost/sweep.py\n")
            for k, v in settings.items():
                f.write(f"{k} = {v}\n")
        self.log("start the server")
        res = self.as_user([self.pg("pg_ctl"), "-D", str(self.data), "-l", str(self.slog), "-w",
                            "-t", "180", "start"], timeout=240)
        if res.rc != 0:
            raise Fatal(f"the server did not start: {last_line(res.err or res.out)}; "
                        f"{self.server_log_tail(1)}")
        self.server_up = True
        info["server_version"] = self.psql("SELECT version()")
        names = ("shared_buffers", "max_connections", "fsync", "synchronous_commit", "max_wal_size",
                 "checkpoint_timeout", "max_worker_processes", "maintenance_work_mem",
                 "dynamic_shared_memory_type", "huge_pages", "wal_level", "jit", "TimeZone",
                 "max_parallel_workers", "max_parallel_maintenance_workers", "data_checksums")
        rows = self.psql("SELECT name || '=' || setting || coalesce(unit, '') FROM pg_settings "
                         "WHERE name IN (" + ", ".join(f"'{n}'" for n in names) + ") ORDER BY 1")
        info["settings"] = dict(r.split("=", 1) for r in rows.splitlines())
        self.log("settings: " + " ".join(f"{k}={v}" for k, v in info["settings"].items()))

    def check_programs(self, info: dict[str, Any]) -> None:
        """The server's compiled-in directories, the postmaster's executable
        and loaded libraries, and the programs pgparmon picks: all the
        bundle's."""
        tree = str(self.pgtree.resolve())
        dirs = dict(r.split("=", 1) for r in self.psql(
            "SELECT name || '=' || setting FROM pg_config "
            "WHERE name IN ('BINDIR', 'SHAREDIR', 'PKGLIBDIR')").splitlines())
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        exe = os.readlink(f"/proc/{pid}/exe")
        libs = set()
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and ".so" in parts[5]:
                    libs.add(parts[5])
        foreign = sorted(p for p in libs if not p.startswith(tree + "/"))
        res = run([*self.py, "-c", "from pgparmon.toc import find_pg_restore, client_program\n"
                   "print(find_pg_restore()); print(client_program('psql'));"
                   "print(client_program('pg_dump'))"], env=self.pgparmon_env(), timeout=60)
        picked = res.out.split()
        info.update(server_dirs=dirs, postmaster_exe=exe, postmaster_libs_outside_bundle=foreign,
                    pgparmon_programs=picked, tz=self.tz)
        self.log(f"server dirs: {' '.join(f'{k}={v}' for k, v in sorted(dirs.items()))}")
        self.log(f"postmaster {exe}; libraries from outside the bundle: {' '.join(foreign)}")
        self.log(f"pgparmon runs: {' '.join(picked) or last_line(res.err)}")
        bad = [f"{k}={v}" for k, v in dirs.items() if not v.startswith(tree + "/")]
        if not exe.startswith(tree + "/"):
            bad.append(f"postmaster {exe}")
        bad += [p for p in foreign if "postgresql" in p]
        wbin = str(self.wbin)
        if len(picked) != 3 or any(os.path.dirname(p) != wbin for p in picked):
            bad.append(f"pgparmon's programs {picked}")
        if bad:
            raise Fatal("the bundle's PostgreSQL is not the one in use: " + "; ".join(bad))
        for tool in ("gzip", "dd", "head"):
            if not shutil.which(tool, path=self.base_env()["PATH"]):
                self.log(f"warning: no {tool} on this host: the restore probe needs it")

    def stop_leftover(self) -> None:
        """A server left running by an earlier run of this script (KEEP=1 or a
        kill -9): stop it before its files are replaced."""
        if not (self.data / "postmaster.pid").exists() or not (self.wbin / "pg_ctl").exists():
            return
        try:
            pw = pwd.getpwnam(self.k.osuser)
        except KeyError:
            return
        self.log("stopping a server left by an earlier run")
        run([self.pg("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
            env={"PATH": "/usr/bin:/bin"}, timeout=60, user=(pw.pw_uid, pw.pw_gid),
            cwd="/")

    # -------------------------------------------------------------- seed
    def seed(self) -> None:
        k = self.k
        t0 = time.monotonic()
        self.log(f"seed: database {DB}, {k.ntab} tables x {k.scale} rows, {k.ntab} sessions")
        self.psql(f"DROP DATABASE IF EXISTS {DB}")
        self.psql(f"CREATE DATABASE {DB}")
        procs = []
        env = self.base_env()
        deadline = time.monotonic() + self.tmo()
        for i in range(1, k.ntab + 1):
            sql = f"""
SELECT setseed({i} / {k.ntab + 1}.0);
CREATE TABLE t{i} (id bigint NOT NULL, a float8, b text, c timestamptz);
INSERT INTO t{i}
SELECT g,
       round((random() * 10000)::numeric, 2)::float8,
       'customer ' || (g % 5000) || ' order ' || substr(md5((g + {i}::bigint * 1000000000)::text), 1, 20)
         || ' status ' || (ARRAY['open','closed','pending','shipped','returned'])[1 + g % 5]
         || ' region ' || (ARRAY['north','south','east','west'])[1 + (g / 7) % 4]
         || ' ' || substr(md5(((g % 1000) + {i})::text), 1, 12),
       timestamptz '2024-01-01 00:00:00+00' + g * interval '7 seconds'
FROM generate_series(1, {k.scale}) g;
ALTER TABLE t{i} ADD PRIMARY KEY (id);
VACUUM ANALYZE t{i};
"""
            script = self.dumps / f"seed_t{i}.sql"
            script.write_text(sql)
            outf = open(self.dumps / f"seed_t{i}.out", "wb")
            p = subprocess.Popen([self.pg("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", DB,
                                  "-f", str(script)], stdin=subprocess.DEVNULL, stdout=outf,
                                 stderr=subprocess.STDOUT, env=env, start_new_session=True)
            outf.close()
            procs.append(p)
        failed = []
        for i, p in enumerate(procs, 1):
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _killpg(p)
                failed.append(f"t{i}: timed out (budget)")
                continue
            if p.returncode != 0:
                out = (self.dumps / f"seed_t{i}.out").read_text(errors="replace")
                failed.append(f"t{i}: {last_line(out)}")
        load_s = time.monotonic() - t0
        self.log(f"seed load {load_s:.1f} s, {len(failed)} failed; CHECKPOINT")
        for f in failed:
            self.log(f"  {f}")
        c0 = time.monotonic()
        self.psql("CHECKPOINT", db=DB)
        ck = time.monotonic() - c0
        row = self.psql(
            "SELECT coalesce(sum(c.relpages) FILTER (WHERE c.relkind = 'r'), 0) * "
            "current_setting('block_size')::bigint, "
            "coalesce(sum(c.relpages) FILTER (WHERE c.relkind = 'i'), 0) * "
            "current_setting('block_size')::bigint, "
            "coalesce(sum(c.reltuples) FILTER (WHERE c.relkind = 'r'), 0)::bigint, "
            "count(*) FILTER (WHERE c.relkind = 'r' AND c.reltuples > 0), "
            f"pg_database_size('{DB}') "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public'", db=DB)
        heap, index, rows, tables, dbsize = (int(x) for x in row.split("|"))
        self.heap_bytes = heap
        self.seeded = not failed and tables == k.ntab
        self.log(f"seed: heap {heap / 1e6:.1f} MB, indexes {index / 1e6:.1f} MB, "
                 f"{rows} rows in {tables} tables, database {dbsize / 1e6:.1f} MB "
                 f"({time.monotonic() - t0:.1f} s)")
        self.rec("seed", ok=self.seeded, seconds=round(time.monotonic() - t0, 3),
                 load_s=round(load_s, 3), checkpoint_s=round(ck, 3), heap_bytes=heap,
                 index_bytes=index, rows=rows, tables=tables, db_bytes=dbsize,
                 rows_per_table=k.scale, ntab=k.ntab, failed=failed)
        if not self.seeded:
            raise Fatal("the seed failed: " + "; ".join(failed[:3]))

    # -------------------------------------------------------------- estimates
    def prediction(self, kind: str, j: int, modes: tuple[str, ...] = ()) -> float | None:
        """The advice's predicted wall time at j: the forced probe's first,
        then the default probe's, then the static one's (or those of modes)."""
        for mode in modes or (self.probe_mode, "probe", "static"):
            doc = (self.advices[kind].get(mode) or {}).get("advice")
            if not isinstance(doc, dict):
                continue
            for p in doc.get("predictions") or []:
                if isinstance(p, dict) and p.get("jobs") == j and isinstance(p.get("wall_s"),
                                                                              (int, float)):
                    return float(p["wall_s"])
        return None

    @property
    def csv_bytes(self) -> float:
        """The COPY part's file: its size once written, else the size asked."""
        if self.csv is not None and self.csv.exists():
            return float(self.csv.stat().st_size)
        return self.k.copy_mb * 1e6

    def csv_estimate(self) -> float:
        """Writing the CSV: COPY TO STDOUT of the seeded tables, fsynced."""
        return self.csv_bytes / 60e6 * 1.5 + 5.0

    def estimate(self, kind: str, j: int) -> float:
        """Seconds a dump or restore at j should take, with margin: measured,
        else the advice calibrated on what was measured, else a rough rate."""
        times = self.times[kind]
        # a restore also creates, checkpoints, drops; a load truncates and checkpoints
        over = {"dump": 3.0, "restore": 8.0}.get(kind, 5.0 + self.csv_bytes / 200e6)
        if times.get(j):
            return max(times[j]) * 1.15 + over
        ratios = [median(ts) / p for jj, ts in times.items()
                  if ts and (p := self.prediction(kind, jj))]
        pred = self.prediction(kind, j)
        if pred is not None:
            return pred * (median(ratios) if ratios else 1.5) * 1.2 + over
        if times:
            jj = min(times, key=lambda x: abs(x - j))
            return median(times[jj]) * max(1.0, jj / j) * 1.2 + over
        if kind == "restore":
            return 2.5 * self.estimate("dump", j) + over
        if kind == "copy":
            # file bytes/s, a guess: 40 MB/s a stream over 1 + 1.5 for the index,
            # scaling to half the cores (the static advice's ceiling)
            return self.csv_bytes / (16e6 * min(j, max(1, self.ncores // 2))) * 1.5 + over
        rate = 20e6 * min(j, self.k.ntab, self.ncores)   # heap bytes/s, a guess
        return self.heap_bytes / rate * 1.5 + over

    def advise_estimate(self, kind: str, mode: str) -> float:
        static = max(self.advise_secs) * 1.5 + 5 if self.advise_secs else STATIC_EST
        if mode == "static":
            return static
        if mode == self.probe_mode:
            return self.k.probe_s * 1.3 + static
        # the default probe: 3% of the predicted run (a COPY's: at one stream),
        # at most 60 s, none under 4 s
        doc = (self.advices[kind].get("static") or {}).get("advice") or {}
        pred = doc.get("predicted_wall_s") if isinstance(doc, dict) else None
        if kind == "copy":
            pred = self.prediction("copy", 1, ("static",))
        if not isinstance(pred, (int, float)):
            jobs = {"dump": self.k.jobs, "restore": self.k.restore_jobs}.get(kind, self.k.copy_jobs)
            pred = min(self.estimate(kind, j) for j in jobs) if kind != "copy" \
                else self.estimate(kind, 1)
        budget = min(60.0, 0.03 * pred)
        return (budget * 1.3 if budget >= 4 else 0) + static

    @property
    def probe_mode(self) -> str:
        return f"probe-{self.k.probe_s:g}"

    def restore_reserve(self, full: bool) -> float:
        """What the restore part needs, kept free by the dump part: its static
        advice and one restore at the largest j; with full, every advice and
        the first repeat of every j."""
        if "restore" not in self.k.parts:
            return 0.0
        jobs = self.restore_sweep_jobs()
        if not full:
            return self.advise_estimate("restore", "static") + self.estimate("restore", max(jobs))
        adv = sum(self.advise_estimate("restore", m) for m in ("static", "probe", self.probe_mode))
        return adv + sum(self.estimate("restore", j) for j in jobs)

    def copy_reserve(self, full: bool) -> float:
        """What the COPY part needs, kept free by the parts before it: the
        CSV, its static advice and one load at the largest J; with full,
        every advice and the first load of every J."""
        if "copy" not in self.k.parts or self.copy_done:
            return 0.0
        csv = 0.0 if self.csv else self.csv_estimate()
        jobs = self.sweep_jobs("copy", self.k.copy_jobs)
        if not full:
            return csv + self.advise_estimate("copy", "static") + self.estimate("copy", max(jobs))
        adv = sum(self.advise_estimate("copy", m) for m in ("static", "probe", self.probe_mode))
        return csv + adv + sum(self.estimate("copy", j) for j in jobs)

    def restore_sweep_jobs(self) -> list[int]:
        return self.sweep_jobs("restore", self.k.restore_jobs)

    def sweep_jobs(self, kind: str, base: list[int]) -> list[int]:
        """The JOBS list, plus (ADD_REC) each advice's recommended j, so that
        its measured time is known."""
        js = set(base)
        if self.k.add_rec:
            top = max(base)
            for rec in self.advices[kind].values():
                doc = rec.get("advice")
                j = doc.get("recommended_jobs") if isinstance(doc, dict) else None
                if isinstance(j, int) and 1 <= j <= max(top, 4 * self.ncores):
                    js.add(j)
        return sorted(js)

    # -------------------------------------------------------------- advise
    def advise(self, kind: str, mode: str, reserve: float) -> None:
        est = self.advise_estimate(kind, mode)
        if not self.fits(est, reserve):
            self.skip("advise", est, reserve, kind=kind, mode=mode)
            return
        target = self.dumps / "advise_target"
        shutil.rmtree(target, ignore_errors=True)
        if kind == "dump":
            args = ["-d", DB, "--target", str(target), "--max-jobs", str(max(self.k.jobs))]
        elif kind == "copy":
            assert self.csv is not None
            args = ["-d", COPY_DB, "--copy", str(self.csv), "--table", COPY_TABLE, "--header",
                    "--max-jobs", str(max(self.k.copy_jobs))]
        else:
            assert self.kept is not None
            self.psql(f"DROP DATABASE IF EXISTS {ADV_DB}")
            self.psql(f"CREATE DATABASE {ADV_DB}")
            args = ["-d", ADV_DB, "--archive", str(self.kept[1]), "--max-jobs",
                    str(max(self.k.restore_jobs))]
        if mode != "static":
            args.append("--probe")
        if mode == self.probe_mode:
            args += ["--probe-seconds", f"{self.k.probe_s:g}"]
        self.log(f"advise {kind} {mode}: pgparmon advise {' '.join(args)} --json")
        res = run([*self.py, "-m", "pgparmon", "advise", *args, "--json"],
                  env=self.pgparmon_env(), timeout=self.tmo())
        doc: Any = None
        error = None
        try:
            doc = json.loads(res.out)
        except ValueError:
            error = last_line(res.err) or last_line(res.out) or f"exit {res.rc}, no output"
        if res.rc != 0 and error is None:
            error = last_line(res.err) or f"exit {res.rc}"
        extra: dict[str, Any] = {}
        if kind == "dump":
            left = sorted(str(p.relative_to(target)) for p in target.rglob("*")) \
                if target.exists() else []
            extra["target_left"] = left[:20]
            shutil.rmtree(target, ignore_errors=True)
        elif kind == "copy":
            # the probe's scratch tables are dropped and the table never written
            extra["relations_left"] = int(self.psql(
                "SELECT count(*) FROM pg_class WHERE relname LIKE 'pgparmon\\_probe%'", db=COPY_DB))
            extra["target_rows"] = int(self.psql(f"SELECT count(*) FROM {COPY_TABLE}", db=COPY_DB))
        else:
            try:
                extra["relations_left"] = int(self.psql(
                    "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') "
                    "AND n.nspname NOT LIKE 'pg\\_temp%' AND n.nspname NOT LIKE 'pg\\_toast\\_temp%'",
                    db=ADV_DB))
            finally:
                self.psql(f"DROP DATABASE IF EXISTS {ADV_DB}")
        if mode == "static":
            self.advise_secs.append(res.secs)
        row = {"kind": kind, "mode": mode, "args": args, "rc": res.rc,
               "seconds": round(res.secs, 3), "timed_out": res.timed_out, "error": error,
               "stderr": tail(res.err), **extra, "advice": doc}
        self.advices[kind][mode] = row
        self.rec("advise", **row)
        if isinstance(doc, dict):
            probe = doc.get("probe") if isinstance(doc.get("probe"), dict) else {}
            codes = [w.get("code") for w in doc.get("warnings") or [] if isinstance(w, dict)]
            self.log(f"advise {kind} {mode}: rc={res.rc} {res.secs:.1f} s, "
                     f"recommended -j {doc.get('recommended_jobs')}, predicted "
                     f"{doc.get('predicted_wall_s')} s, basis {doc.get('basis')}, confidence "
                     f"{doc.get('confidence')}, probe {probe.get('seconds')} s, warnings {codes}")
        else:
            self.log(f"advise {kind} {mode}: rc={res.rc} {res.secs:.1f} s, no advice: {error}")
        if extra.get("target_left") or extra.get("relations_left") or extra.get("target_rows"):
            self.log(f"  left behind: {extra}")

    def advise_modes(self, kind: str, jobs: list[int], later: Any) -> None:
        """The three advices; the probes leave room for one run at the largest
        j and what later() says the parts after this one need."""
        for mode in ("static", "probe", self.probe_mode):
            reserve = END_RESERVE + (0 if mode == "static" else
                                     self.estimate(kind, max(jobs)) + later())
            self.advise(kind, mode, reserve)

    # -------------------------------------------------------------- dumps
    def dump_part(self) -> None:
        self.advise_modes("dump", self.k.jobs,
                          lambda: self.restore_reserve(False) + self.copy_reserve(False))
        jobs = self.sweep_jobs("dump", self.k.jobs)
        if jobs != self.k.jobs:
            self.log(f"dump sweep over -j {jobs} (JOBS plus the recommended j)")
        for r, order in enumerate(orders(jobs, self.k.repeats)):
            for j in order:
                reserve = END_RESERVE + self.restore_reserve(full=r > 0) \
                    + self.copy_reserve(full=r > 0)
                self.dump(j, r, reserve)
        if self.kept:
            self.log(f"the restore part uses the -j {self.kept[0]} dump {self.kept[1]}")

    def dump(self, j: int, r: int, reserve: float) -> None:
        est = self.estimate("dump", j)
        if not self.fits(est, reserve):
            self.skip("dump", est, reserve, jobs=j, repeat=r)
            return
        out = self.dumps / f"d{j}_r{r}"
        shutil.rmtree(out, ignore_errors=True)
        self.log(f"pg_dump -Fd -j {j} (repeat {r + 1}), estimate {est:.0f} s")
        res = run([self.pg("pg_dump"), "-Fd", "-j", str(j), "-f", str(out), DB],
                  env=self.base_env(), timeout=self.tmo())
        size = dir_bytes(out) if out.exists() else 0
        nfiles = len(os.listdir(out)) if out.exists() else 0
        self.log(f"dump -j {j} repeat {r + 1}: {res.secs:.2f} s rc={res.rc}, {size / 1e6:.1f} MB"
                 + (f": {last_line(res.err)}" if res.rc else ""))
        self.rec("dump", jobs=j, repeat=r, seconds=round(res.secs, 3), rc=res.rc,
                 timed_out=res.timed_out, bytes=size, files=nfiles,
                 stderr=tail(res.err) if res.rc else "")
        if res.rc == 0:
            self.times["dump"].setdefault(j, []).append(res.secs)
            if self.kept is None or j >= self.kept[0]:
                if self.kept is not None and self.kept[1] != out:
                    shutil.rmtree(self.kept[1], ignore_errors=True)
                self.kept = (j, out)
                return
        shutil.rmtree(out, ignore_errors=True)

    # -------------------------------------------------------------- restores
    def restore_part(self) -> None:
        if self.kept is None:
            self.log("no dump to restore: the restore part is skipped")
            self.rec("restore", skipped=True, reason="no successful dump")
            self.skipped += 1
            return
        self.rec("archive", jobs=self.kept[0], path=str(self.kept[1]),
                 bytes=dir_bytes(self.kept[1]))
        self.advise_modes("restore", self.k.restore_jobs, lambda: self.copy_reserve(False))
        jobs = self.restore_sweep_jobs()
        if jobs != self.k.restore_jobs:
            self.log(f"restore sweep over -j {jobs} (RESTORE_JOBS plus the recommended j)")
        for r, order in enumerate(orders(jobs, self.k.repeats)):
            for j in order:
                self.restore(j, r, END_RESERVE + self.copy_reserve(full=r > 0))

    def restore(self, j: int, r: int, reserve: float) -> None:
        assert self.kept is not None
        est = self.estimate("restore", j)
        if not self.fits(est, reserve):
            self.skip("restore", est, reserve, jobs=j, repeat=r)
            return
        self.psql(f"DROP DATABASE IF EXISTS {RUN_DB}")
        self.psql(f"CREATE DATABASE {RUN_DB}")
        c0 = time.monotonic()
        self.psql("CHECKPOINT")
        ck = time.monotonic() - c0
        lsn0 = self.psql("SELECT pg_current_wal_lsn()")
        self.log(f"pg_restore -j {j} (repeat {r + 1}) into a fresh {RUN_DB}, checkpoint "
                 f"{ck:.1f} s, estimate {est:.0f} s")
        res = run([self.pg("pg_restore"), "-j", str(j), "-d", RUN_DB, str(self.kept[1])],
                  env=self.base_env(), timeout=self.tmo())
        wal = int(self.psql(f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{lsn0}')::bigint"))
        size = int(self.psql(f"SELECT pg_database_size('{RUN_DB}')"))
        self.psql(f"DROP DATABASE IF EXISTS {RUN_DB}")
        self.log(f"restore -j {j} repeat {r + 1}: {res.secs:.2f} s rc={res.rc}, WAL "
                 f"{wal / 1e6:.1f} MB, database {size / 1e6:.1f} MB"
                 + (f": {last_line(res.err)}" if res.rc else ""))
        self.rec("restore", jobs=j, repeat=r, seconds=round(res.secs, 3), rc=res.rc,
                 timed_out=res.timed_out, checkpoint_s=round(ck, 3), wal_bytes=wal,
                 db_bytes=size, stderr=tail(res.err) if res.rc else "")
        if res.rc == 0:
            self.times["restore"].setdefault(j, []).append(res.secs)

    # -------------------------------------------------------------- index builds
    def builds_part(self) -> None:
        """Index builds on the seeded tables' text column: one table alone,
        then one a table at once (NTAB streams), each with the server's
        parallel maintenance workers (its default) and without (0). How a
        restore's builds scale over the cores apart from its loads (the
        advice's schedule runs them on the loads' curve), and what the
        parallel workers give a build that has the cores to itself."""
        per_mb = 0.03   # seconds a MB of heap for one build, a guess until one is timed
        for workers in (None, 0):
            for n in sorted({1, self.k.ntab}):
                heap = self.heap_bytes / max(1, self.k.ntab) * n
                est = heap / 1e6 * per_mb / min(n, self.ncores) * 1.5 + 3.0
                reserve = END_RESERVE + self.copy_reserve(False)
                if not self.fits(est, reserve):
                    self.skip("build", est, reserve, streams=n,
                              parallel_workers="default" if workers is None else workers)
                    continue
                secs = self.build(n, workers, heap)
                if secs is not None and n == 1 and workers == 0:
                    per_mb = secs / (heap / 1e6)
        # foreign keys' checks: what one costs a row against the builds (the
        # advice's rule, docs/advise.md "Index builds follow rows"), alone
        # and one a table at once
        per_unit = 0.5e-6  # seconds a unit (a row of the table and one referenced), a guess
        for n in sorted({1, self.k.ntab}):
            est = 2 * self.k.scale * n * per_unit / min(n, self.ncores) * 1.5 + 3.0
            reserve = END_RESERVE + self.copy_reserve(False)
            if not self.fits(est, reserve):
                self.skip("fk_check", est, reserve, streams=n)
                continue
            secs = self.fk_check(n)
            if secs is not None and n == 1:
                per_unit = secs / (2 * self.k.scale)

    def build(self, n: int, workers: int | None, heap: float) -> float | None:
        """n sessions at once, each CREATE INDEX on the text column of its own
        table; the indexes dropped after. Wall seconds, or None on a failure."""
        setting = "" if workers is None else f"SET max_parallel_maintenance_workers = {workers}; "
        tables = [f"t{i}" for i in range(1, n + 1)]
        lsn0 = self.psql("SELECT pg_current_wal_lsn()")
        each, wall, errors = self.at_once(
            [f"{setting}CREATE INDEX pgsweep_b_{t} ON {t} (b)" for t in tables])
        wal = int(self.psql(f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{lsn0}')::bigint"))
        size = int(self.psql("SELECT coalesce(sum(pg_relation_size(oid)), 0) FROM pg_class "
                             "WHERE relname LIKE 'pgsweep_b_%'", db=DB))
        self.psql("; ".join(f"DROP INDEX IF EXISTS pgsweep_b_{t}" for t in tables), db=DB)
        label = "default" if workers is None else str(workers)
        self.log(f"build: {n} CREATE INDEX at once (parallel maintenance workers {label}) "
                 f"{wall:.2f} s, each {min(each):.2f}-{max(each):.2f} s, heap "
                 f"{heap / 1e6:.0f} MB, indexes {size / 1e6:.0f} MB, WAL {wal / 1e6:.0f} MB"
                 + (f": {errors[0]}" if errors else ""))
        self.rec("build", streams=n, parallel_workers=label, seconds=round(wall, 3),
                 each_s=[round(x, 3) for x in each], heap_bytes=round(heap),
                 index_bytes=size, wal_bytes=wal, ok=not errors, error=errors[:1])
        return None if errors else wall

    def at_once(self, statements: list[str]) -> tuple[list[float], float, list[str]]:
        """Each statement in a session of its own, all at once: (each one's
        seconds, the wall seconds, the errors)."""
        t0 = time.monotonic()
        errors: list[str] = []

        def one(sql: str) -> float:
            t1 = time.monotonic()
            try:
                self.psql(sql, db=DB)
            except Fatal as exc:
                errors.append(str(exc))
            return time.monotonic() - t1

        with ThreadPoolExecutor(max_workers=len(statements)) as ex:
            each = list(ex.map(one, statements))
        return each, time.monotonic() - t0, errors

    def fk_check(self, n: int) -> float | None:
        """n sessions at once, each adding a foreign key from its own table's
        id to the same table's primary key (a check of every row against
        the key: no lock shared between the sessions, as the row cost
        bench's self-referencing key); the keys dropped after. Wall seconds,
        or None on a failure."""
        tables = [f"t{i}" for i in range(1, n + 1)]
        each, wall, errors = self.at_once(
            [f"ALTER TABLE {t} ADD CONSTRAINT pgsweep_f_{t} FOREIGN KEY (id) REFERENCES {t} (id)"
             for t in tables])
        self.psql("; ".join(f"ALTER TABLE {t} DROP CONSTRAINT IF EXISTS pgsweep_f_{t}"
                            for t in tables), db=DB)
        units = 2 * self.k.scale * n
        us = sorted(each)[len(each) // 2] / (2 * self.k.scale) * 1e6
        self.log(f"fk check: {n} ADD FOREIGN KEY (a table's id to its own key) at once "
                 f"{wall:.2f} s, each {min(each):.2f}-{max(each):.2f} s, {us:.3f} us a unit "
                 f"(a row and its referenced row) for the median one"
                 + (f": {errors[0]}" if errors else ""))
        self.rec("fk_check", streams=n, seconds=round(wall, 3), each_s=[round(x, 3) for x in each],
                 rows=self.k.scale * n, units=units, us_a_unit_median=round(us, 4),
                 ok=not errors, error=errors[:1])
        return None if errors else wall

    # -------------------------------------------------------------- COPY loads
    def copy_part(self) -> None:
        try:
            est = self.csv_estimate()
            reserve = END_RESERVE + self.advise_estimate("copy", "static") \
                + self.estimate("copy", max(self.k.copy_jobs))
            if not self.fits(est, reserve):
                self.skip("csv", est, reserve, kind="copy")
                return
            if not self.write_csv():
                return
            self.psql(f"DROP DATABASE IF EXISTS {COPY_DB}")
            self.psql(f"CREATE DATABASE {COPY_DB}")
            # logged, one btree index on a text column (as bench/advise_copy_accuracy.py)
            self.psql(f"CREATE TABLE {COPY_TABLE} (id bigint, a float8, b text, c timestamptz); "
                      f"CREATE INDEX ON {COPY_TABLE} (b)", db=COPY_DB)
            self.advise_modes("copy", self.k.copy_jobs, lambda: 0.0)
            jobs = self.sweep_jobs("copy", self.k.copy_jobs)
            if jobs != self.k.copy_jobs:
                self.log(f"COPY sweep over J {jobs} (COPY_JOBS plus the recommended J)")
            for r, order in enumerate(orders(jobs, self.k.repeats)):
                for j in order:
                    self.copy_load(j, r)
        finally:
            self.copy_done = True

    def write_csv(self) -> bool:
        """COPY_MB of CSV (a header, then single-line records) from the seeded
        tables t1..tN in turn, again from t1 when they hold less; fsynced, on
        WORK's disk."""
        t0 = time.monotonic()
        sample = run([self.pg("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", DB, "-c",
                      "COPY (SELECT * FROM t1 LIMIT 5000) TO STDOUT WITH (FORMAT csv)"],
                     env=self.base_env(), timeout=min(self.tmo(), 120.0))
        n = sample.out.count("\n")
        if sample.rc != 0 or not n:
            raise Fatal(f"cannot sample t1 for the CSV: {last_line(sample.err) or sample.rc}")
        per_row = len(sample.out.encode()) / n
        want = max(1, int(self.k.copy_mb * 1e6 / per_row))
        passes = -(-want // (self.k.ntab * self.k.scale))
        union = " UNION ALL ".join(f"SELECT * FROM t{i}" for _ in range(passes)
                                   for i in range(1, self.k.ntab + 1))
        path = self.dumps / "copy.csv"
        self.log(f"CSV: {want} rows (about {self.k.copy_mb} MB at {per_row:.0f} bytes a row, "
                 f"{passes} pass(es) over the {self.k.ntab} tables) into {path}")
        res = run([self.pg("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", DB, "-c",
                   f"COPY (SELECT * FROM ({union}) u LIMIT {want}) TO STDOUT "
                   "WITH (FORMAT csv, HEADER)"],
                  env=self.base_env(), timeout=self.tmo(), stdout_to=path)
        lines = 0
        if res.rc == 0:
            with open(path, "rb+") as f:
                while chunk := f.read(1 << 24):
                    lines += chunk.count(b"\n")
                os.fsync(f.fileno())
        size = path.stat().st_size if path.exists() else 0
        secs = time.monotonic() - t0
        ok = res.rc == 0 and lines - 1 == want
        self.rec("csv", kind="copy", ok=ok, rc=res.rc, timed_out=res.timed_out, path=str(path),
                 bytes=size, rows=max(0, lines - 1), rows_asked=want, bytes_per_row=round(per_row, 1),
                 passes=passes, seconds=round(secs, 3), stderr=tail(res.err) if res.rc else "")
        self.log(f"CSV: {size / 1e6:.1f} MB, {max(0, lines - 1)} rows in {secs:.1f} s rc={res.rc}"
                 + (f": {last_line(res.err)}" if res.rc else ""))
        if not ok:
            self.log("no CSV: the COPY part is skipped")
            self.skipped += 1
            path.unlink(missing_ok=True)
            return False
        self.csv, self.csv_rows = path, lines - 1
        return True

    def copy_load(self, j: int, r: int) -> None:
        """TRUNCATE, CHECKPOINT, then the advice's command shape at J streams."""
        assert self.csv is not None
        est = self.estimate("copy", j)
        if not self.fits(est, END_RESERVE):
            self.skip("copy", est, END_RESERVE, jobs=j, repeat=r)
            return
        self.psql(f"TRUNCATE {COPY_TABLE}", db=COPY_DB)
        c0 = time.monotonic()
        self.psql("CHECKPOINT")
        ck = time.monotonic() - c0
        lsn0 = self.psql("SELECT pg_current_wal_lsn()")
        cmd = split_copy_cmd([self.pg("psql"), "-X", "-v", "ON_ERROR_STOP=1", "-d", COPY_DB],
                             str(self.csv), j, COPY_TABLE)
        self.log(f"COPY J={j} (repeat {r + 1}), checkpoint {ck:.1f} s, estimate {est:.0f} s")
        res = run(["/bin/sh", "-c", cmd], env=self.base_env(), timeout=self.tmo())
        rows = copied_rows(res.out)
        wal = int(self.psql(f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{lsn0}')::bigint"))
        size = int(self.psql(f"SELECT pg_total_relation_size('{COPY_TABLE}')", db=COPY_DB))
        ok = res.rc == 0 and rows == self.csv_rows
        rc = res.rc if res.rc or ok else 1   # a stream that loaded less fails the run
        self.log(f"COPY J={j} repeat {r + 1}: {res.secs:.2f} s rc={res.rc}, {rows} rows"
                 f"{'' if rows == self.csv_rows else f' of {self.csv_rows}'}, WAL "
                 f"{wal / 1e6:.1f} MB, table and index {size / 1e6:.1f} MB"
                 + (f": {last_line(res.err)}" if res.rc else ""))
        self.rec("copy", jobs=j, repeat=r, seconds=round(res.secs, 3), rc=rc,
                 timed_out=res.timed_out, rows=rows, checkpoint_s=round(ck, 3), wal_bytes=wal,
                 table_bytes=size, command=cmd, stderr=tail(res.err) if not ok else "")
        if ok:
            self.times["copy"].setdefault(j, []).append(res.secs)

    # -------------------------------------------------------------- end
    def server_log_tail(self, n: int) -> str:
        try:
            lines = self.slog.read_text(errors="replace").splitlines()
        except OSError:
            return "(no server log)"
        return "\n".join(lines[-n:])

    def finish(self) -> None:
        if self.server_up and not self.k.keep:
            res = self.as_user([self.pg("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                                "-t", "60", "stop"], timeout=90)
            if res.rc != 0:
                self.as_user([self.pg("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                              "stop"], timeout=60)
            self.server_up = False
            self.log("server stopped")
        self.log(f"server log ({self.slog}), last 300 lines: in log.txt")
        self.logf.write("----- server log tail\n" + self.server_log_tail(300) + "\n-----\n")
        self.logf.flush()
        if self.k.keep:
            self.log(f"KEEP=1: the server ({self.sock}, port {self.k.port}), {self.k.work} and "
                     f"the OS user {self.k.osuser} are left as they are")
        else:
            took = []
            for p in (self.pgtree, self.pghome, self.dumps, self.venv, self.site):
                if p.exists():
                    t0 = time.monotonic()
                    shutil.rmtree(p, ignore_errors=True)
                    took.append(f"{p.name} {time.monotonic() - t0:.1f} s")
            try:
                self.k.work.rmdir()   # only when nothing else is in it
            except OSError:
                pass
            self.log(f"removed the server, the dumps and the venv from {self.k.work} "
                     f"({', '.join(took)})")
            self.remove_user()
        self.rec("end", status=self.status, seconds=round(elapsed(), 3), steps_skipped=self.skipped,
                 budget_s=self.k.budget)
        self.log(f"sweep done in {elapsed():.1f} s ({self.status}); {self.skipped} steps skipped")
        try:
            sys.path.insert(0, str(HERE))
            import summary
            text = summary.report(summary.load(self.results))
        except Exception as exc:   # the results are written: a summary bug must not hide them
            text = f"(summary failed: {exc!r}; run summary.py on results.jsonl)"
        print(text, flush=True)
        self.logf.write(text + "\n")
        self.logf.close()

    # -------------------------------------------------------------- main
    def main(self) -> None:
        self.log(f"sweep.py: OUT={self.k.out} WORK={self.k.work} SCALE={self.k.scale} "
                 f"NTAB={self.k.ntab} BUDGET={self.k.budget:.0f} JOBS={self.k.jobs} "
                 f"RESTORE_JOBS={self.k.restore_jobs} COPY_JOBS={self.k.copy_jobs} "
                 f"COPY_MB={self.k.copy_mb} PARTS={','.join(self.k.parts)} REPEATS={self.k.repeats} "
                 f"PROBE_S={self.k.probe_s:g} pgparmon {self.manifest.get('pgparmon_commit', '?')}")
        try:
            self.sysinfo()
            try:
                self.setup()
            except Fatal as exc:
                self.status = "setup failed"
                self.log(f"SETUP FAILED: {exc}")
                self.rec("setup", ok=False, error=str(exc))
                return
            try:
                self.seed()
                if "dump" in self.k.parts:
                    self.dump_part()
                if "restore" in self.k.parts:
                    self.restore_part()
                if "builds" in self.k.parts:
                    self.builds_part()
                if "copy" in self.k.parts:
                    self.copy_part()
            except Fatal as exc:
                self.status = "failed"
                self.log(f"FAILED: {exc}")
                self.rec("error", error=str(exc))
        except Interrupted:
            self.status = "interrupted"
            self.log("interrupted")
            self.rec("error", error="interrupted by a signal")
        except Exception as exc:
            self.status = "error"
            self.log(f"ERROR: {exc!r} (traceback in log.txt)")
            self.logf.write(traceback.format_exc())
            self.rec("error", error=repr(exc))
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self.finish()


def _on_signal(signum: int, _frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


def main() -> int:
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        _die("this bundle runs on x86-64 Linux only")
    if sys.version_info < (3, 9):
        _die(f"Python {platform.python_version()} is too old: run with Python 3.11 or 3.12")
    if os.geteuid() != 0:
        _die("run as root: it creates an OS user that runs the throwaway server")
    k = Knobs.from_env()
    if (k.out / "results.jsonl").exists():
        _die(f"{k.out}/results.jsonl exists: move it away or set OUT to a new folder")
    if k.work == Path("/") or str(k.work).startswith(str(HERE)):
        _die(f"WORK={k.work}: choose a folder of its own outside the bundle")
    os.umask(0o022)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _on_signal)
    sw = Sweep(k)
    sw.main()
    return 0 if sw.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
