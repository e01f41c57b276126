"""The calibration probe: total throughput X(k) with k parallel streams, on
the real system, the way ``pg_dump -Fd -j k`` moves data (docs/advise.md,
"Evidence sources" 1).

Each stream is one ``psql`` session that runs, one after the other,
``COPY (SELECT * FROM t WHERE ctid >= '(a,0)'::tid AND ctid < '(b,0)'::tid)
TO STDOUT`` (a TID range scan, PostgreSQL 14+) over disjoint block ranges of
the largest tables, piped into the compressor CLI (gzip / lz4 / zstd, or
straight into the file for "none") writing a file in a scratch directory
inside the dump target.  The files are fsynced before the clock stops, and
the scratch directory is always removed (errors and Ctrl-C included).

Why one long session per stream, fed on stdin: a psql per range would add a
connection (and a fork on the server) per range and would hide the backend's
CPU (the process is gone before it can be read).  After each COPY the script
says ``\\warn pgparmon-probe done N`` on stderr, which tells us the range is
finished and lets us hand the stream its next range right away, or stop it
when the step's time is up.  ``\\warn`` needs psql 13+.

Plan: a short warm-up at k=1 (not counted; its rate sizes the ranges), then
k = 1, 2, 4, ... up to max_streams, stopping when a doubling gains under 10%
(or throughput drops), then one point between the last two.  The time of
each step comes from the budget, which the whole probe keeps: a step that
would run past it is cut off (and dropped) and the probe returns what it has.

Work unit: heap bytes, (b - a) * block_size for a range (main fork blocks:
TOAST read on the way is not counted, so a TOAST-heavy table looks slower
per heap byte than it is).

The restore probe (`run_restore_probe`) uses the same streams the other
way round: ``\\copy tmp FROM PROGRAM 'gzip -dc NNNN.dat.gz'`` into a
temporary clone of the table (read-write session, temporary tables only).
A data file up to twice the wanted range is loaded whole (small files
several to a range, one round trip for all), its COPY text bytes from the
gzip trailer; only a larger file gets ``| head -n N | dd`` (its first N
lines, dd counting the bytes): a range never skips into a file, which would
decompress the skipped part for nothing.  Tables with the same columns share
one temporary table per session, emptied (TRUNCATE) only once it holds
TRUNCATE_AFTER_BYTES.  After the warm-up, its session times one index build
on what it loaded (`ProbeResult.build_s_per_byte`).  temp_buffers is left at
the server's default: 128MB measured no faster here (a bigger local buffer
pool makes each TRUNCATE and the first use dearer).

Connections: psql gets everything through PG* environment variables built
from `pgparmon.connect.build_conninfo` (read-only session, statement_timeout
long enough for the probe, a short lock_timeout, application_name
``pgparmon-probe``); nothing of the connection is on its command line.
"""

from __future__ import annotations

import os
import re
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import IO, Any

import psutil
import psycopg
from psycopg import conninfo as pgconninfo

from ..analyze.hostrates import host_rates
from ..analyze.progress import DEFAULT_TEXT_RATIO
from ..analyze.saturation import FLAT_GAIN, doubling_gain
from ..connect import ConnTarget, build_conninfo
from ..ddl import (
    archive_sql,
    column_list,
    create_table_statements,
    index_shape,
    index_statements,
    split_qualified,
)
from ..readers.devices import device_for_path
from ..readers.host import HostSample, read_host
from ..redact import redact_text
from ..toc import TocError, archive_format, data_file, list_archive, program_major

APP_NAME = "pgparmon-probe"
MIN_SERVER_VERSION = 140000  # TID range scans

# Step timing (seconds).  A step shorter than MIN_STEP_S is noise; longer than
# MAX_STEP_S adds nothing to a steady rate but time.
MIN_STEP_S = 1.5
MAX_STEP_S = 6.0
# Below this the probe cannot measure anything worth fitting.
MIN_BUDGET_S = 2.0
# Kept free at the end of the budget for removing the scratch directory.
CLEANUP_RESERVE_S = 0.25
# Fixed costs of one step besides its timed part: connecting k sessions,
# closing them, fsync.
STEP_OVERHEAD_S = 0.25
# A step lasts its planned time plus the tail of the ranges in flight:
# ranges are sized to about 1/RANGES_PER_STEP of the step.
RANGES_PER_STEP = 6
MIN_RANGE_S = 0.15
MIN_RANGE_PAGES = 8
WARMUP_FIRST_BYTES = 256 * 1024.0
# X(2) above this many times X(1) is superlinear: k=1 was cold, measure again.
SUPERLINEAR = 2.2
GB = 1e9


class ProbeError(Exception):
    """The probe could not run or measure: a one-line, user-facing message."""


# ------------------------------------------------------------------ results


@dataclass(frozen=True)
class ProbeTable:
    """A table the probe may read.  name: the qualified name for messages
    (the SQL is built from schema and relname, quoted here).  relpages: from
    pg_class (never pg_relation_size)."""

    name: str
    schema: str
    relname: str
    relpages: int

    @classmethod
    def of(cls, schema: str, relname: str, relpages: int) -> ProbeTable:
        return cls(qualified_name(schema, relname), schema, relname, int(relpages))


@dataclass(frozen=True)
class ProbePoint:
    """One step: `streams` streams for elapsed_s seconds.

    heap_bytes: heap bytes of the ranges copied; out_bytes: bytes written
    (compressed); elapsed_s: the step's time as throughput sees it (from the
    first COPY to the files fsynced, with the ragged end, where some streams
    had already finished their last range, counted at its average);
    bytes_per_s = heap_bytes / elapsed_s, the total of all streams.
    client_cpu_s: CPU of psql and the compressors; server_cpu_s: of the
    backends (None when the server is not local or not readable).
    disk_*: the target's device over the step (util in percent, 0..100);
    None when no block device holds the target.  wall_s: the step's plain
    wall time; host_cpu_percent: busy share of all CPUs over the step."""

    streams: int
    heap_bytes: float
    out_bytes: int
    elapsed_s: float
    bytes_per_s: float
    client_cpu_s: float
    server_cpu_s: float | None
    disk_util: float | None
    disk_await_ms: float | None
    disk_queue: float | None
    wall_s: float = 0.0
    host_cpu_percent: float | None = None
    ranges: int = 0


@dataclass
class ProbeResult:
    points: list[ProbePoint]
    seconds: float  # the whole probe: warm-up, steps, cleanup
    budget_s: float
    compression: str  # "gzip:6", "lz4:1", "zstd:3", "none"
    ratio: float | None  # out bytes / heap bytes over the counted steps
    device: str | None  # the target's block device (diskstats name)
    notes: list[str] = field(default_factory=list)
    # restore probe: seconds of one index build per heap byte of its table
    # (one session, nothing else running); None when not measured
    build_s_per_byte: float | None = None
    build: dict[str, Any] | None = None  # what was built: table, index, heap_bytes, seconds

    def fit_points(self) -> list[tuple[float, float]]:
        """(streams, total heap bytes/s), fewest streams first: usl.fit's input."""
        return [(float(p.streams), p.bytes_per_s)
                for p in sorted(self.points, key=lambda p: p.streams)]

    def point(self, k: int) -> ProbePoint | None:
        for p in self.points:
            if p.streams == k:
                return p
        return None

    def cpu_s_per_gb(self, k: int) -> float | None:
        """CPU seconds per GB (1e9 bytes) of heap at k streams: the client's,
        plus the server's when measured.  None when k was not measured."""
        p = self.point(k)
        if p is None or p.heap_bytes <= 0:
            return None
        cpu = p.client_cpu_s + (p.server_cpu_s or 0.0)
        return cpu / (p.heap_bytes / GB)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "pgparmon.probe/1",
            "compression": self.compression,
            "budget_s": round(self.budget_s, 3),
            "seconds": round(self.seconds, 3),
            "ratio": None if self.ratio is None else round(self.ratio, 4),
            "device": self.device,
            "notes": list(self.notes),
            "build_s_per_byte": self.build_s_per_byte,
            "build": None if self.build is None else dict(self.build),
            "points": [{k: (round(v, 4) if isinstance(v, float) else v)
                        for k, v in asdict(p).items()}
                       for p in sorted(self.points, key=lambda p: p.streams)],
        }


# ------------------------------------------------------------ compression


# method -> (binary, default level (pg_dump's), lowest, highest)
_COMPRESSORS: dict[str, tuple[str, int, int, int]] = {
    "gzip": ("gzip", 6, 1, 9),
    "lz4": ("lz4", 1, 1, 12),
    "zstd": ("zstd", 3, 1, 19),
}
_SUFFIX = {"gzip": ".gz", "lz4": ".lz4", "zstd": ".zst", "none": ""}


# stdin -> gzip format at level argv[1] -> stdout, with zlib (as pg_dump does).
# Unbuffered reads take what the pipe holds: waiting to fill a 1 MiB buffer
# stalls psql behind a full pipe and made the stream ~25% slower than
# pg_dump, which compresses what each network read brings.
ZLIB_FILTER = (
    "import sys, zlib\n"
    "c = zlib.compressobj(int(sys.argv[1]), zlib.DEFLATED, 31)\n"
    "r, w = sys.stdin.buffer.raw, sys.stdout.buffer\n"
    "while True:\n"
    "    b = r.read(1 << 20)\n"
    "    if not b:\n"
    "        break\n"
    "    w.write(c.compress(b))\n"
    "w.write(c.flush())\n"
    "w.flush()\n"
)


@dataclass(frozen=True)
class Compressor:
    method: str  # gzip | lz4 | zstd | none
    level: int | None
    argv: tuple[str, ...] | None  # None: psql writes the file itself

    @property
    def label(self) -> str:
        return self.method if self.level is None else f"{self.method}:{self.level}"

    @property
    def suffix(self) -> str:
        return _SUFFIX[self.method]


def compressor(compression: str, level: int | None = None) -> Compressor:
    """The CLI that compresses like pg_dump would (one thread, the same
    level).  Level 0 means: gzip none (pg_dump -Z 0), lz4/zstd their default.
    ProbeError for an unknown method, a bad level or a missing binary."""
    method = (compression or "gzip").strip().lower()
    if method in ("", "0") or (method == "gzip" and level == 0):
        method = "none"
    if method == "none":
        return Compressor("none", None, None)
    if method not in _COMPRESSORS:
        raise ProbeError(f"unknown compression {compression!r}: use gzip, lz4, zstd or none")
    binary, default, lo, hi = _COMPRESSORS[method]
    lvl = default if level is None or level == 0 else int(level)
    if not lo <= lvl <= hi:
        raise ProbeError(f"{method} level {lvl} is out of range ({lo}..{hi})")
    if method == "gzip":
        # pg_dump compresses with zlib in its own process; GNU gzip has its
        # own deflate, measurably slower (~15-20% here): a zlib filter in a
        # Python process keeps the probe's CPU per byte the same as pg_dump's.
        return Compressor(method, lvl, (sys.executable, "-I", "-c", ZLIB_FILTER, str(lvl)))
    path = shutil.which(binary)
    if path is None:
        raise ProbeError(f"the probe compresses with the {binary} command, which is not "
                         f"installed (or not on PATH): install it or choose another --compress")
    argv: tuple[str, ...]
    if method == "lz4":
        argv = (path, f"-{lvl}", "-q", "-c")
    else:
        argv = (path, f"-{lvl}", "-q", "-c", "-T1")
    return Compressor(method, lvl, argv)


# ------------------------------------------------------------------- psql


def find_psql(preferred: str | None = None) -> str:
    """psql next to the pg_restore pgparmon uses (same release), else PATH."""
    from ..toc import client_program

    found = preferred or client_program("psql")
    if found:
        return found
    raise ProbeError("psql not found: install the PostgreSQL client programs or put their bin "
                     "directory on PATH (or use --history / --from-timings)")


def psql_argv(psql: str) -> list[str]:
    """psql's command line: no connection settings (they are in the
    environment), no psqlrc, quiet, unaligned, stop at the first error, the
    script on stdin."""
    return [psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-f", "-"]


# libpq connection keywords and the environment variables that set them
# (libpq docs, "Environment Variables").
ENV_FOR_KEYWORD: dict[str, str] = {
    "host": "PGHOST", "hostaddr": "PGHOSTADDR", "port": "PGPORT", "dbname": "PGDATABASE",
    "user": "PGUSER", "password": "PGPASSWORD", "passfile": "PGPASSFILE",
    "require_auth": "PGREQUIREAUTH", "channel_binding": "PGCHANNELBINDING",
    "service": "PGSERVICE", "options": "PGOPTIONS", "application_name": "PGAPPNAME",
    "sslmode": "PGSSLMODE", "requiressl": "PGREQUIRESSL", "sslnegotiation": "PGSSLNEGOTIATION",
    "sslcompression": "PGSSLCOMPRESSION", "sslcert": "PGSSLCERT", "sslkey": "PGSSLKEY",
    "sslcertmode": "PGSSLCERTMODE", "sslrootcert": "PGSSLROOTCERT", "sslcrl": "PGSSLCRL",
    "sslcrldir": "PGSSLCRLDIR", "sslsni": "PGSSLSNI", "requirepeer": "PGREQUIREPEER",
    "ssl_min_protocol_version": "PGSSLMINPROTOCOLVERSION",
    "ssl_max_protocol_version": "PGSSLMAXPROTOCOLVERSION",
    "min_protocol_version": "PGMINPROTOCOLVERSION",
    "max_protocol_version": "PGMAXPROTOCOLVERSION",
    "gssencmode": "PGGSSENCMODE", "krbsrvname": "PGKRBSRVNAME", "gsslib": "PGGSSLIB",
    "gssdelegation": "PGGSSDELEGATION", "connect_timeout": "PGCONNECT_TIMEOUT",
    "client_encoding": "PGCLIENTENCODING", "target_session_attrs": "PGTARGETSESSIONATTRS",
    "load_balance_hosts": "PGLOADBALANCEHOSTS",
}
# Keywords without an environment variable that change nothing the probe
# measures: left out.
_DROPPABLE = frozenset({"fallback_application_name", "keepalives", "keepalives_idle",
                        "keepalives_interval", "keepalives_count", "tcp_user_timeout"})


def psql_env(target: ConnTarget, *, statement_timeout_ms: int, read_only: bool = True,
             base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for the probe's psql: `base` (default os.environ)
    plus the PG* variables of build_conninfo(target) with our statement
    timeout and application_name.  read_only False turns the session's
    default_transaction_read_only off (the restore probe's COPY FROM into
    temporary tables needs that)."""
    t = replace(target, statement_timeout_ms=int(statement_timeout_ms))
    try:
        params = pgconninfo.conninfo_to_dict(build_conninfo(t))
    except psycopg.ProgrammingError as exc:
        raise ProbeError(f"bad connection string: {redact_text(_first_line(str(exc)))}") \
            from None
    params["application_name"] = APP_NAME
    if not read_only:
        params["options"] = str(params.get("options") or "").replace(
            "default_transaction_read_only=on", "default_transaction_read_only=off")
    env = dict(os.environ if base is None else base)
    # Messages in English (we read them); the C locale does not change the
    # client encoding of a non-interactive psql.
    env.update(LC_ALL="C", LANG="C")
    env.pop("LANGUAGE", None)
    for key, value in params.items():
        if value is None:
            continue
        var = ENV_FOR_KEYWORD.get(key)
        if var is None:
            if key in _DROPPABLE:
                continue
            raise ProbeError(f"the connection option {key} has no PG* environment variable, and "
                             "the probe never passes connection settings on a command line: "
                             "drop it or use --history / --from-timings")
        env[var] = str(value)
    return env


def qualified_name(schema: str, relname: str) -> str:
    return f"{_qident(schema)}.{_qident(relname)}"


def _qident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def _first_line(s: str) -> str:
    lines = [ln.strip() for ln in s.strip().splitlines() if ln.strip()]
    return lines[0] if lines else s.strip()


def _is_local_host(host: str | None) -> bool:
    if not host:
        return True  # the default Unix socket
    names = {socket.gethostname(), "localhost", "127.0.0.1", "::1"}
    return all(h.startswith(("/", "@")) or h in names
               for h in host.split(",") if h)


# ------------------------------------------------------------------ ranges


class _Ranges:
    """Disjoint block ranges of the tables, largest table first.  When all
    blocks have been handed out, it starts over (reused: the cache helps)."""

    def __init__(self, tables: Sequence[ProbeTable]) -> None:
        self.tables = sorted((t for t in tables if t.relpages > 0), key=lambda t: -t.relpages)
        self.pos = [0] * len(self.tables)
        self.i = 0
        self.reused = False

    @property
    def total_pages(self) -> int:
        return sum(t.relpages for t in self.tables)

    def take(self, pages: int) -> tuple[ProbeTable, int, int]:
        if self.i >= len(self.tables):
            self.i, self.pos, self.reused = 0, [0] * len(self.tables), True
        t = self.tables[self.i]
        a = self.pos[self.i]
        b = min(t.relpages, a + max(1, pages))
        # do not leave a sliver of the table for a range of its own
        if t.relpages - b < max(1, pages) // 4:
            b = t.relpages
        self.pos[self.i] = b
        if b >= t.relpages:
            self.i += 1
        return t, a, b


def copy_sql(t: ProbeTable, a: int, b: int) -> str:
    return (f"COPY (SELECT * FROM {qualified_name(t.schema, t.relname)} "
            f"WHERE ctid >= '({a},0)'::tid AND ctid < '({b},0)'::tid) TO STDOUT;")


# ----------------------------------------------------------------- streams

_MARK = "pgparmon-probe"
_PID_RE = re.compile(rf"^{_MARK} pid (\d+)$")
_DONE_RE = re.compile(rf"^{_MARK} done (\d+)$")
_INDEX_RE = re.compile(rf"^{_MARK} index ([0-9.eE+-]+) (\d+)$")


@dataclass
class _Range:
    """One piece of work for a stream: the psql script that does it."""

    label: str  # the table, for messages
    script: str
    heap: float = 0.0  # heap bytes, known up front (dump) or from count_path (restore)
    count_path: str | None = None
    lines: int = 0
    parts: list[_Part] = field(default_factory=list)  # restore: the files it loads
    owner: _Stream | None = None
    t0: float = 0.0
    t1: float | None = None


class _DumpSource:
    """Ranges of a dump probe: COPY TO of disjoint block ranges."""

    def __init__(self, tables: Sequence[ProbeTable], block_size: int) -> None:
        self.blocks = _Ranges(tables)
        self.block_size = block_size

    @property
    def reused(self) -> bool:
        return self.blocks.reused

    def take(self, s: _Stream, want_bytes: float) -> _Range:
        pages = max(MIN_RANGE_PAGES, int(want_bytes / self.block_size))
        t, a, b = self.blocks.take(pages)
        return _Range(t.name, copy_sql(t, a, b), heap=float((b - a) * self.block_size))

    def finish(self, r: _Range) -> None:
        pass


class _Stream:
    """One psql session: its stdout goes through the compressor into a file
    (dump), or nowhere (restore); its script comes from us on stdin."""

    def __init__(self, psql: str, comp: Compressor | None, env: Mapping[str, str],
                 path: str | None, cwd: str | None = None) -> None:
        self.path = path
        self.comp_proc: subprocess.Popen[bytes] | None = None
        self.psql: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.cpu0: float | None = None
        self.cpu1: float | None = None
        self.ranges: list[_Range] = []
        self.t_end: float | None = None  # when its last range finished
        self.buf = b""
        self.other: list[str] = []  # stderr lines that are not our markers
        self.stderr_eof = False
        self.want = 0.0  # heap bytes to ask for in the next range
        self.created: set[str] = set()  # restore: temporary tables made in this session
        self.loaded: dict[str, float] = {}  # restore: heap bytes in each since emptied (estimate)
        self.exact: dict[str, float] = {}  # restore: the same, counted (finished ranges)
        self.table_of: dict[str, str] = {}  # restore: temp -> the table loaded into it last
        self.index_wait = False  # restore: the index build of the warm-up is running
        self.index_result: tuple[float, int] | None = None  # (seconds, indexes built)
        self.out: IO[bytes] | None = None
        if path is not None:
            self.out = open(path, "wb")  # noqa: SIM115 (closed in kill())
        comp_env = {k: v for k, v in env.items() if not k.startswith("PG")}
        try:
            sink: IO[bytes] | int = self.out if self.out is not None else subprocess.DEVNULL
            if comp is not None and comp.argv is not None and self.out is not None:
                self.comp_proc = subprocess.Popen(
                    list(comp.argv), stdin=subprocess.PIPE, stdout=self.out,
                    stderr=subprocess.PIPE, env=comp_env)
                assert self.comp_proc.stdin is not None
                sink = self.comp_proc.stdin
            self.psql = subprocess.Popen(psql_argv(psql), stdin=subprocess.PIPE, stdout=sink,
                                         stderr=subprocess.PIPE, env=dict(env), cwd=cwd)
        except OSError as exc:
            self.kill()
            raise ProbeError(f"cannot start the probe's psql / compressor: "
                             f"{exc.strerror or exc}") from None
        finally:
            # psql holds the compressor's stdin now: when psql exits the
            # compressor sees end of file.
            if self.comp_proc is not None and self.comp_proc.stdin is not None:
                self.comp_proc.stdin.close()
        self.send(f"SELECT pg_backend_pid() AS pgparmon_pid \\gset\n"
                  f"\\warn {_MARK} pid :pgparmon_pid\n")

    @property
    def current(self) -> _Range | None:
        return self.ranges[-1] if self.ranges and self.ranges[-1].t1 is None else None

    def send(self, text: str) -> bool:
        assert self.psql is not None and self.psql.stdin is not None
        try:
            self.psql.stdin.write(text.encode("utf-8"))
            self.psql.stdin.flush()
        except (BrokenPipeError, ValueError):
            return False
        return True

    def start_range(self, r: _Range, now: float) -> bool:
        r.t0 = now
        self.ranges.append(r)
        n = len(self.ranges)
        return self.send(f"{r.script}\n\\warn {_MARK} done {n}\n")

    def close_input(self) -> None:
        if self.psql is not None and self.psql.stdin is not None and not self.psql.stdin.closed:
            try:
                self.psql.stdin.close()
            except OSError:
                pass

    def feed(self, data: bytes) -> list[str]:
        """Complete stderr lines in data (a partial last line is kept)."""
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        return [ln.decode("utf-8", errors="replace").rstrip("\r") for ln in lines]

    def error_text(self) -> str:
        lines = list(self.other)
        if self.buf.strip():
            lines.append(self.buf.decode("utf-8", errors="replace"))
        if self.comp_proc is not None and self.comp_proc.stderr is not None:
            try:
                if self.comp_proc.poll() is not None:
                    lines += self.comp_proc.stderr.read().decode("utf-8", "replace").splitlines()
            except (OSError, ValueError):
                pass
        return _error_line(lines)

    def kill(self) -> None:
        for p in (self.psql, self.comp_proc):
            if p is not None and p.poll() is None:
                try:
                    p.kill()
                except OSError:
                    pass
        for p in (self.psql, self.comp_proc):
            if p is None:
                continue
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            for f in (p.stdin, p.stderr):
                if f is not None:
                    try:
                        f.close()
                    except OSError:
                        pass
        if self.out is not None and not self.out.closed:
            self.out.close()


def _error_line(lines: Iterable[str]) -> str:
    """The line that says what went wrong, without psql's location prefix."""
    cleaned = []
    for ln in lines:
        ln = re.sub(r"^psql:[^:]*:\d+:\s*", "", ln.strip())
        ln = re.sub(r"^psql: error:\s*", "", ln)
        if ln:
            cleaned.append(ln)
    for ln in cleaned:
        if re.match(r"^(ERROR|FATAL|PANIC):", ln) or "error" in ln.lower():
            return redact_text(re.sub(r"^(ERROR|FATAL|PANIC):\s*", "", ln))
    return redact_text(cleaned[0]) if cleaned else ""


def _cpu_of(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        ct = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return None
    return float(ct.user + ct.system)


def _looks_like_backend(pid: int) -> bool:
    try:
        p = psutil.Process(pid)
        name = p.name()
    except (psutil.Error, OSError):
        return False
    return name.startswith(("postgres", "postmaster"))


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return float(ru.ru_utime + ru.ru_stime)


def _fsync_path(path: str, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Aborted(Exception):
    """A step ran into the budget's deadline."""


@dataclass
class _Probe:
    psql: str
    comp: Compressor | None  # None: a restore (psql's output goes nowhere)
    env: dict[str, str]
    scratch: str
    source: _DumpSource | _RestoreSource
    device: str | None
    local: bool
    connect_timeout_s: float
    step_no: int = 0
    server_cpu_missing: bool = False

    def run_step(self, k: int, t_step: float, want_bytes: float, deadline: float,
                 grow: bool = False, finale: Any = None) -> ProbePoint:
        """k streams copying ranges of about want_bytes heap bytes until
        t_step seconds have passed (grow: the range doubles each time, for
        the warm-up).  finale(stream) -> a script (or None) the stream runs
        after its last range, outside the timed part: it must end with a
        ``\\warn pgparmon-probe index SECONDS N`` line.  Raises _Aborted at
        the deadline, ProbeError on a failure."""
        self.step_no += 1
        streams: list[_Stream] = []
        sel = selectors.DefaultSelector()
        cpu_before = _children_cpu()
        try:
            for i in range(k):
                path = (os.path.join(self.scratch,
                                     f"step{self.step_no:02d}_k{k}_{i}.dat{self.comp.suffix}")
                        if self.comp is not None else None)
                s = _Stream(self.psql, self.comp, self.env, path, cwd=self.scratch)
                s.want = want_bytes
                streams.append(s)
                assert s.psql is not None and s.psql.stderr is not None
                sel.register(s.psql.stderr, selectors.EVENT_READ, s)

            # 1. every session connected and has told its backend pid
            wait_s = self.connect_timeout_s + 5
            connect_deadline = min(deadline, time.monotonic() + wait_s)
            try:
                while any(s.pid is None for s in streams):
                    self._pump(sel, streams, connect_deadline, on_done=None)
            except _Aborted:
                if time.monotonic() < deadline:
                    raise ProbeError(f"the probe's psql sessions did not connect within "
                                     f"{wait_s:g} s") from None
                raise
            for s in streams:
                if self.local and s.pid is not None and _looks_like_backend(s.pid):
                    s.cpu0 = _cpu_of(s.pid)

            # 2. the timed part
            h0 = read_host([self.device] if self.device else [])
            t0 = time.monotonic()
            t_stop = t0 + t_step
            for s in streams:
                if not s.start_range(self.source.take(s, s.want), t0):
                    raise self._fail(sel, s)

            def on_done(s: _Stream, now: float) -> None:
                last = now - s.ranges[-1].t0
                if grow:
                    s.want *= 2
                    last *= 2
                # another range only while the step's time lasts and the
                # range (as long as the last one, with room) ends before the
                # budget's deadline: stop early rather than be cut off
                if now < t_stop and now + 1.5 * last + STEP_OVERHEAD_S < deadline:
                    if not s.start_range(self.source.take(s, s.want), now):
                        raise self._fail(sel, s)
                    return
                s.t_end = now
                if s.cpu0 is not None:
                    s.cpu1 = _cpu_of(s.pid)
                extra = finale(s) if finale is not None else None
                if extra and s.send(extra + "\n"):
                    s.index_wait = True
                s.close_input()

            while any(s.t_end is None or s.index_wait for s in streams):
                self._pump(sel, streams, deadline, on_done=on_done)

            # 3. sessions closed, compressors flushed, files on disk
            for s in streams:
                for proc in (s.psql, s.comp_proc):
                    if proc is None:
                        continue
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise _Aborted
                    try:
                        rc = proc.wait(timeout=left)
                    except subprocess.TimeoutExpired:
                        raise _Aborted from None
                    if rc != 0:
                        raise self._fail(sel, s)
                if s.out is not None:
                    s.out.close()
            for s in streams:
                if s.path is not None:
                    _fsync_path(s.path)
            _fsync_path(self.scratch, directory=True)
            t_final = time.monotonic()
            h1 = read_host([self.device] if self.device else [])
            cpu_after = _children_cpu()
        finally:
            for s in streams:
                s.kill()
            sel.close()

        return self._point(k, streams, t0, t_final, h0, h1, cpu_after - cpu_before)

    def _point(self, k: int, streams: list[_Stream], t0: float, t_final: float,
               h0: HostSample, h1: HostSample, client_cpu: float) -> ProbePoint:
        heap = float(sum(r.heap for s in streams for r in s.ranges if r.t1 is not None))
        out = 0
        for s in streams:
            try:
                out += os.path.getsize(s.path) if s.path is not None else 0
            except OSError:
                pass
        ends = [(s.t_end or t_final) - t0 for s in streams]
        close_s = max(0.0, (t_final - t0) - max(ends))
        # the ragged end (streams done at different times) at its average
        eff = max(1e-6, sum(ends) / len(ends) + close_s)
        server: float | None = None
        if all(s.cpu0 is not None and s.cpu1 is not None for s in streams):
            server = sum((s.cpu1 or 0.0) - (s.cpu0 or 0.0) for s in streams)
        else:
            self.server_cpu_missing = True
        rates = host_rates(h0, h1)
        d = rates.disks.get(self.device) if self.device else None
        return ProbePoint(
            streams=k, heap_bytes=heap, out_bytes=out, elapsed_s=eff,
            bytes_per_s=heap / eff, client_cpu_s=max(0.0, client_cpu), server_cpu_s=server,
            disk_util=d.util_percent if d else None, disk_await_ms=d.await_ms if d else None,
            disk_queue=d.queue_depth if d else None, wall_s=t_final - t0,
            host_cpu_percent=rates.cpu_percent,
            ranges=sum(1 for s in streams for r in s.ranges if r.t1 is not None))

    def _pump(self, sel: selectors.BaseSelector, streams: list[_Stream], deadline: float,
              on_done: Any) -> None:
        """Read what the sessions said on stderr for up to 50 ms."""
        now = time.monotonic()
        if now >= deadline:
            raise _Aborted
        for key, _ in sel.select(timeout=min(0.05, deadline - now)):
            s: _Stream = key.data
            try:
                data = os.read(key.fd, 65536)
            except OSError:
                data = b""
            if not data:
                sel.unregister(key.fileobj)
                s.stderr_eof = True
                continue
            now = time.monotonic()
            for line in s.feed(data):
                m = _PID_RE.match(line)
                if m:
                    s.pid = int(m.group(1))
                    continue
                m = _INDEX_RE.match(line)
                if m and s.index_wait:
                    s.index_result = (float(m.group(1)), int(m.group(2)))
                    s.index_wait = False
                    continue
                m = _DONE_RE.match(line)
                if m:
                    n = int(m.group(1))
                    if 1 <= n <= len(s.ranges) and s.ranges[n - 1].t1 is None:
                        s.ranges[n - 1].t1 = now
                        self.source.finish(s.ranges[n - 1])
                        if on_done is not None and n == len(s.ranges):
                            on_done(s, now)
                    continue
                s.other.append(line)
        for s in streams:
            # a session that exits before its work is done failed
            waiting = s.pid is None or (s.t_end is None and on_done is not None)
            if waiting and s.psql is not None and s.psql.poll() is not None:
                raise self._fail(sel, s)
            if s.index_wait and s.stderr_eof:
                s.index_wait = False  # psql ended without telling: nothing measured

    def _fail(self, sel: selectors.BaseSelector, s: _Stream) -> ProbeError:
        """The error for a stream whose psql (or compressor) failed."""
        for proc in (s.psql, s.comp_proc):
            if proc is not None:
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
        self._drain(sel, s)
        return ProbeError(self._failure(s))

    def _drain(self, sel: selectors.BaseSelector, s: _Stream) -> None:
        # only once psql has exited: a read would block while it runs
        if (s.psql is None or s.psql.stderr is None or s.stderr_eof
                or s.psql.poll() is None):
            return
        try:
            rest = s.psql.stderr.read()
        except (OSError, ValueError):
            rest = b""
        s.other += s.feed(rest + b"\n")
        s.stderr_eof = True

    def _failure(self, s: _Stream) -> str:
        """The one-line message for a stream that failed."""
        msg = s.error_text()
        cur = s.current or (s.ranges[-1] if s.ranges else None)
        table = cur.label if cur is not None else None
        low = msg.lower()
        if "lock timeout" in low:
            return (f"{table or 'a table'} is locked by another session (the probe waits "
                    "only briefly for locks): try again later or use --history / --from-timings")
        if "permission denied" in low:
            return (f"the probe cannot read {table or 'a table'}: {msg} (connect as a user "
                    "who can dump it, or use --history / --from-timings)")
        if s.pid is None and s.psql is not None and s.psql.poll() not in (None, 0, 3):
            return f"the probe's psql could not connect: {msg or 'no message'}"
        if table is not None:
            return f"the probe failed copying {table}: {msg or 'psql exited early'}"
        return f"the probe failed: {msg or 'psql exited early'}"


# -------------------------------------------------------------- the probe


def _existing_dir(target_dir: str) -> str:
    """The dump target, or (pg_dump -Fd creates it) its nearest existing parent."""
    p = os.path.abspath(target_dir or ".")
    while not os.path.isdir(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def _gain(a: ProbePoint, b: ProbePoint) -> float:
    return doubling_gain(a.streams, a.bytes_per_s, b.streams, b.bytes_per_s)


def stream_plan(max_streams: int) -> list[int]:
    """1, 2, 4, ... up to max_streams (and max_streams itself)."""
    ks, k = [], 1
    while k <= max_streams:
        ks.append(k)
        k *= 2
    if ks[-1] != max_streams:
        ks.append(max_streams)
    return ks


def _mb(x: float) -> str:
    return f"{x / 1e6:.1f} MB"


def run_probe(target: ConnTarget, tables: list[ProbeTable], target_dir: str, *,
              budget_s: float, max_streams: int, compression: str = "gzip",
              level: int | None = None, block_size: int = 8192,
              server_version_num: int) -> ProbeResult:
    """Measure X(k) for a dump into target_dir within budget_s seconds (see
    the module's docstring).  Raises ProbeError (one line) when the probe
    cannot run; a budget too short for some steps is no error: fewer points
    come back and the notes say why."""
    t_start = time.monotonic()
    if server_version_num < MIN_SERVER_VERSION:
        raise ProbeError("the probe needs PostgreSQL 14+ (TID range scans); "
                         "use --history or --from-timings")
    _check_args(budget_s, max_streams)
    if block_size <= 0:
        raise ProbeError("block_size must be positive")
    comp = compressor(compression, level)
    source = _DumpSource(tables, block_size)
    if not source.blocks.tables:
        raise ProbeError("no table with data to probe (pg_class.relpages is 0 everywhere: "
                         "are the tables empty or never vacuumed/analyzed?)")
    psql = _checked_psql()
    env = psql_env(target, statement_timeout_ms=int((budget_s + 30) * 1000))
    base = _existing_dir(target_dir)
    notes: list[str] = []
    if os.path.abspath(target_dir) != base:
        notes.append(f"the target directory does not exist yet: probed in {base}")
    device = _device(base, notes)
    try:
        scratch = tempfile.mkdtemp(prefix=".pgparmon-probe-", dir=base)
    except OSError as exc:
        raise ProbeError(f"cannot write in {base}: {exc.strerror or exc}") from None

    probe = _Probe(psql=psql, comp=comp, env=env, scratch=scratch, source=source,
                   device=device, local=_is_local_host(env.get("PGHOST")),
                   connect_timeout_s=float(target.connect_timeout_s))
    points = _run(probe, scratch, notes, t_start, budget_s, max_streams)
    heap = sum(p.heap_bytes for p in points)
    ratio = sum(p.out_bytes for p in points) / heap if heap > 0 else None
    if source.reused:
        notes.append(f"the tables hold only {_mb(source.blocks.total_pages * block_size)} of "
                     "heap: ranges were read more than once, so the cache helped and the "
                     "throughput may be optimistic")
    _cpu_note(probe, points, notes)
    return ProbeResult(points=points, seconds=time.monotonic() - t_start, budget_s=budget_s,
                       compression=comp.label, ratio=ratio, device=device, notes=notes)


def _check_args(budget_s: float, max_streams: int) -> None:
    if not budget_s >= MIN_BUDGET_S:
        raise ProbeError(f"a probe budget of {budget_s:g} s is too short to measure anything "
                         f"(give at least {MIN_BUDGET_S:g} s)")
    if max_streams < 1:
        raise ProbeError("max_streams must be at least 1")


def _checked_psql() -> str:
    psql = find_psql()
    major = program_major(psql)
    if major is not None and major < 13:
        raise ProbeError(f"the probe needs psql 13 or newer ({psql} is {major})")
    return psql


def _device(path: str, notes: list[str]) -> str | None:
    try:
        device = device_for_path(path)
    except OSError:
        device = None
    if device is None:
        notes.append(f"no block device found for {path}: disk metrics not measured")
    return device


def _cpu_note(probe: _Probe, points: list[ProbePoint], notes: list[str]) -> None:
    if points and probe.server_cpu_missing:
        notes.append("server CPU not measured (the server is not on this host, or its "
                     "processes cannot be read)")


def _run(probe: _Probe, scratch: str, notes: list[str], t_start: float, budget_s: float,
         max_streams: int, finale: Any = None) -> list[ProbePoint]:
    """The steps, then the scratch directory removed whatever happened."""
    points: dict[int, ProbePoint] = {}
    try:
        try:
            _measure(probe, points, notes, t_start, budget_s, max_streams, finale)
        except OSError as exc:
            raise ProbeError(f"the probe failed: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return sorted(points.values(), key=lambda p: p.streams)


def _measure(probe: _Probe, points: dict[int, ProbePoint], notes: list[str], t_start: float,
             budget_s: float, max_streams: int, finale: Any = None) -> None:
    deadline = t_start + budget_s - CLEANUP_RESERVE_S

    def left() -> float:
        return deadline - time.monotonic()

    # Warm-up: one stream, ranges growing from a few blocks, about 5% of the
    # budget; it also finds a missing table or a lock before anything counts.
    warm_s = min(1.0, max(0.2, 0.05 * budget_s))
    try:
        warm = probe.run_step(1, warm_s, WARMUP_FIRST_BYTES, deadline, grow=True,
                              finale=finale)
    except _Aborted:
        notes.append("the budget ran out during the warm-up: nothing measured")
        return
    per_stream = max(warm.bytes_per_s, 1e6)  # heap bytes/s of one stream, estimated

    plan = stream_plan(max_streams)
    doubling: list[int] = []  # measured stream counts of the 1, 2, 4, ... sequence
    stopped = False  # a doubling gained under FLAT_GAIN
    repeated_one = False
    extra = 1 if max_streams >= 3 else 0  # room for a point between two doublings

    def step(k: int, steps_left: int) -> ProbePoint | None:
        nonlocal per_stream
        avail = left()
        # a step lasts its time plus the ranges in flight at its end (a
        # range is about 1/RANGES_PER_STEP of it; allow for two)
        stretch = 1 + 2 / RANGES_PER_STEP
        t_step = (avail / max(1, steps_left) - STEP_OVERHEAD_S) / stretch
        t_step = min(MAX_STEP_S, t_step)
        if t_step < MIN_STEP_S:
            # fewer steps will fit: each still long enough to be steady
            t_step = min(MIN_STEP_S, (avail - STEP_OVERHEAD_S) / stretch)
        if t_step < MIN_STEP_S / 2:
            return None
        range_s = max(MIN_RANGE_S, t_step / RANGES_PER_STEP)
        try:
            p = probe.run_step(k, t_step, per_stream * range_s, deadline)
        except _Aborted:
            notes.append(f"the step with {k} streams ran into the budget and was dropped")
            return None
        if p.bytes_per_s > 0:
            per_stream = p.bytes_per_s / k
        return p

    i = 0
    while i < len(plan):
        k = plan[i]
        # steps still planned: this one, the rest of the doublings, a midpoint
        p = step(k, len(plan) - i + extra)
        if p is None:
            if not doubling or k > doubling[-1]:
                notes.append(f"the budget of {budget_s:g} s allowed up to "
                             f"{max(doubling) if doubling else 0} of {max_streams} streams")
            return
        points[k] = p
        if doubling:
            prev = points[doubling[-1]]
            if (not repeated_one and doubling[-1] == 1 and k == 2
                    and p.bytes_per_s > SUPERLINEAR * prev.bytes_per_s):
                # superlinear: k=1 was cold; measure it again, then go on
                repeated_one = True
                again = step(1, len(plan) - i + extra)
                if again is not None:
                    notes.append(f"1 stream measured again: {_mb(prev.bytes_per_s)}/s the "
                                 f"first time, then {_mb(again.bytes_per_s)}/s (cold start)")
                    points[1] = again
                    prev = again
            doubling.append(k)
            if _gain(prev, p) < FLAT_GAIN:
                stopped = True
                break
        else:
            doubling.append(k)
        i += 1

    # one point between the last two, when it tells where the knee is (the
    # curve flattened) or the fit needs it (fewer than 4 points)
    if len(doubling) >= 2:
        a, b = doubling[-2], doubling[-1]
        mid = (a + b) // 2
        if a < mid < b and mid not in points and (stopped or len(points) < 4):
            p = step(mid, 1)
            if p is not None:
                points[mid] = p
            elif not any("ran into the budget" in n for n in notes):
                notes.append(f"no time left in the budget for the point at {mid} streams")


# ------------------------------------------------------------ restore probe

# Decompressor per data file suffix (pg_dump -Fd: NNNN.dat[.gz|.lz4|.zst]).
_DECOMPRESSORS = {".gz": "gzip", ".lz4": "lz4", ".zst": "zstd"}
_SAFE_WORD = re.compile(r"^[A-Za-z0-9_./+-]+$")
# A data file up to this many times the wanted range is loaded whole (no
# pipeline but its decompressor, its size from the gzip trailer); a larger
# one gives a range of its first lines (``| head -n N | dd``).  Ranges never
# skip into a file: skipping decompresses the skipped part for nothing.
WHOLE_FILE_FACTOR = 2.0
# Small files go several to a range (one round trip for all), at most this many.
MAX_FILES_PER_RANGE = 64
# A temporary table is emptied (TRUNCATE) once it holds this many heap bytes,
# not after every load: for small files a TRUNCATE per file costs about as
# much as the load.
TRUNCATE_AFTER_BYTES = 64e6
MIN_RANGE_LINES = 100
FIRST_LINE_BYTES = 100.0  # a guess of COPY text bytes per row, until measured
TEMP_PREFIX = "pgparmon_probe_"
# The index build after the warm-up: at most this share of the budget (a
# statement_timeout), and only when this much of the budget is left.
INDEX_SHARE = 0.15
INDEX_MIN_LEFT_S = 1.5
INDEX_MIN_HEAP = 256 * 1024.0


@dataclass
class _DataFile:
    table: str
    path: str
    size: float  # heap bytes (the caller's estimate)
    link: str  # its safe name in the scratch directory
    decompress: str | None  # the decompressor's path; None: plain text
    text: float | None = None  # its exact COPY text bytes when known (gzip trailer, plain)


@dataclass
class _Part:
    """One file (or its first `lines` lines) into one temporary table."""

    table: str
    temp: str
    known: float | None  # COPY text bytes, known up front; else counted by dd
    count_path: str | None
    lines: int = 0  # a prefix of the file; 0: the whole file
    truncate: bool = False  # the temporary table is emptied before this load


class _RestoreSource:
    """Ranges of a restore probe: whole data files (several small ones to a
    range), or the first lines of a large one, through the decompressor into
    a temporary clone of the table (COPY FROM via psql's \\copy ... FROM
    PROGRAM: the data goes straight from the decompressor into psql, as from
    pg_restore's own decompression).  Tables with the same columns share one
    temporary table per session; it is emptied only when it has grown."""

    def __init__(self, files: list[_DataFile], create: dict[str, str], scratch: str,
                 text_ratio: float) -> None:
        self.files = sorted(files, key=lambda f: -f.size)
        self.create = create
        self.scratch = scratch
        self.text_ratio = text_ratio
        self.i = 0
        self.reused = False
        self.seq = 0
        self.bytes_seen = 0.0
        self.lines_seen = 0
        self.dd = shutil.which("dd") or "dd"
        self.head = shutil.which("head") or "head"
        self.temps: dict[str, str] = {}  # CREATE TEMP TABLE text (name X) -> name
        self.temp_sql: dict[str, str] = {}  # name -> its CREATE TEMP TABLE
        self.whole_files = 0
        self.prefix_ranges = 0

    def _line_bytes(self) -> float:
        return self.bytes_seen / self.lines_seen if self.lines_seen > 0 else FIRST_LINE_BYTES

    def temp_for(self, table: str) -> str:
        key = temp_table_sql(self.create.get(table), table, "X")
        name = self.temps.get(key)
        if name is None:
            name = f"{TEMP_PREFIX}{len(self.temps)}"
            self.temps[key] = name
            self.temp_sql[name] = temp_table_sql(self.create.get(table), table, name)
        return name

    def _next_file(self) -> _DataFile:
        if self.i >= len(self.files):
            self.i = 0
            self.reused = True
        f = self.files[self.i]
        self.i += 1
        return f

    def _part_script(self, s: _Stream, f: _DataFile, lines: int) -> tuple[_Part, str]:
        temp = self.temp_for(f.table)
        heap = f.size if lines == 0 else lines * self._line_bytes() / self.text_ratio
        script = ""
        truncate = False
        if temp not in s.created:
            s.created.add(temp)
            s.loaded[temp] = 0.0
            script += self.temp_sql[temp] + "\n"
        elif s.loaded.get(temp, 0.0) + heap > TRUNCATE_AFTER_BYTES:
            truncate = True
            s.loaded[temp] = 0.0
            script += f"TRUNCATE {temp};\n"
        s.loaded[temp] = s.loaded.get(temp, 0.0) + heap
        count: str | None = None
        if lines == 0 and f.text is not None:
            # the whole file, its size known: no pipeline at all
            src = (f"FROM PROGRAM '{f.decompress} -dc {f.link}'" if f.decompress
                   else f"FROM '{f.link}'")
        else:
            self.seq += 1
            count = os.path.join(self.scratch, f"n{self.seq}.txt")
            cmd = f"{f.decompress} -dc {f.link} | " if f.decompress else ""
            if lines:
                cmd += (f"{self.head} -n {lines} | " if f.decompress
                        else f"{self.head} -n {lines} {f.link} | ")
            elif not f.decompress:
                cmd = f"{self.dd} bs=65536 if={f.link} 2>n{self.seq}.txt"
            if f.decompress or lines:
                cmd += f"{self.dd} bs=65536 2>n{self.seq}.txt"
            src = f"FROM PROGRAM '{cmd}'"
        script += f"\\copy {temp} {src}\n"
        s.table_of[temp] = f.table
        return _Part(f.table, temp, f.text if count is None else None, count, lines,
                     truncate), script

    def take(self, s: _Stream, want_bytes: float) -> _Range:
        parts: list[_Part] = []
        script = ""
        total = 0.0
        first = self._next_file()
        if first.size > WHOLE_FILE_FACTOR * want_bytes:
            # a large file: its first lines only
            lines = max(MIN_RANGE_LINES,
                        int(want_bytes * self.text_ratio / self._line_bytes()))
            part, script = self._part_script(s, first, lines)
            self.prefix_ranges += 1
            return _Range(first.table, script, lines=lines, parts=[part], owner=s)
        f = first
        while True:
            part, text = self._part_script(s, f, 0)
            parts.append(part)
            script += text
            total += f.size
            self.whole_files += 1
            if (total >= want_bytes or len(parts) >= MAX_FILES_PER_RANGE
                    or self.i >= len(self.files)):
                break
            nxt = self.files[self.i]
            if total + nxt.size > WHOLE_FILE_FACTOR * want_bytes:
                break
            f = self._next_file()
        label = first.table if len(parts) == 1 else f"{first.table} and {len(parts) - 1} more"
        return _Range(label, script, parts=parts, owner=s)

    def finish(self, r: _Range) -> None:
        total = 0.0
        for part in r.parts:
            n = part.known if part.known is not None else _dd_bytes(part.count_path)
            if n is None:
                raise ProbeError(f"the probe could not count the bytes it fed into {r.label} "
                                 "(dd's report is missing)")
            if part.lines and n > 0:
                self.bytes_seen += n
                self.lines_seen += part.lines
            heap = n / self.text_ratio
            if r.owner is not None:
                if part.truncate:
                    r.owner.exact[part.temp] = 0.0
                r.owner.exact[part.temp] = r.owner.exact.get(part.temp, 0.0) + heap
            total += heap
        r.heap = total

    def index_script(self, s: _Stream, index_sql: Mapping[str, Sequence[str]] | None,
                     timeout_s: float) -> tuple[str, str, str, float] | None:
        """(script, table, index statement, heap bytes) of the index build on
        the stream's temporary table that holds the most, or None when it
        holds too little.  The build is shaped like the table's first index in
        index_sql (rewritten onto the temporary table), else a btree on its
        first column that has a default btree operator class."""
        if not s.exact:
            return None
        temp = max(s.exact, key=lambda t: s.exact[t])
        table = s.table_of[temp]
        heap = s.exact[temp]
        if heap < INDEX_MIN_HEAP:
            return None
        stmt = None
        for cand in (index_sql or {}).get(table, ()):
            stmt = index_on_temp(cand, temp)
            if stmt is not None:
                break
        if stmt is not None:
            build = stmt + ";"
            shown = stmt
        else:
            build = (f"SELECT format('CREATE INDEX ON {temp} (%I)', a.attname) "
                     f"FROM pg_attribute a WHERE a.attrelid = '{temp}'::regclass "
                     "AND a.attnum > 0 AND NOT a.attisdropped AND EXISTS ("
                     "SELECT 1 FROM pg_opclass o JOIN pg_am m ON m.oid = o.opcmethod "
                     "WHERE m.amname = 'btree' AND o.opcdefault AND (o.opcintype = a.atttypid "
                     "OR EXISTS (SELECT 1 FROM pg_cast c WHERE c.castsource = a.atttypid "
                     "AND c.casttarget = o.opcintype AND c.castmethod = 'b'))) "
                     "ORDER BY a.attnum LIMIT 1 \\gexec")
            shown = "btree on the first column"
        ms = max(100, int(timeout_s * 1000))
        script = (
            "\\set ON_ERROR_STOP 0\n"
            f"SET statement_timeout = {ms};\n"
            "SELECT clock_timestamp() AS pgparmon_t0 \\gset\n"
            f"{build}\n"
            "SELECT round(extract(epoch FROM clock_timestamp() - :'pgparmon_t0'::timestamptz)"
            ", 6) AS pgparmon_ix_s, (SELECT count(*) FROM pg_index "
            f"WHERE indrelid = '{temp}'::regclass) AS pgparmon_ix_n \\gset\n"
            f"\\warn {_MARK} index :pgparmon_ix_s :pgparmon_ix_n")
        return script, table, shown, heap


def index_on_temp(stmt: str, temp: str) -> str | None:
    """The archive's CREATE [UNIQUE] INDEX (or ALTER TABLE ... ADD [CONSTRAINT
    c] PRIMARY KEY / UNIQUE (cols)) rewritten to build the same index, with
    no name, on the temporary table `temp`; None for anything else. Never
    UNIQUE: the probe loads ranges more than once on a small archive, and a
    duplicate would fail the build; the uniqueness check costs little next
    to the sort."""
    shape = index_shape(stmt)
    return None if shape is None else f"CREATE INDEX ON {temp} {shape}"


def _dd_bytes(path: str | None) -> float | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"^(\d+) bytes", text, re.MULTILINE)
    return float(m.group(1)) if m else None


def temp_table_sql(create_sql: str | None, table: str, temp: str) -> str:
    """CREATE TEMP TABLE temp with the columns of the archive's CREATE TABLE
    (its options, INHERITS and PARTITION BY left out), or LIKE the table
    when there is no usable CREATE TABLE (the table must exist then)."""
    cols = column_list(create_sql) if create_sql else None
    if cols is not None and cols.strip():
        return f"CREATE TEMP TABLE {temp} ({cols});"
    parts = split_qualified(table)
    name = qualified_name(*parts) if parts else table
    return f"CREATE TEMP TABLE {temp} (LIKE {name} INCLUDING DEFAULTS INCLUDING GENERATED);"


def _text_size(path: str) -> float:
    """COPY text bytes of a data file: a gzip trailer's size when it is
    plausible (it is the size modulo 4 GiB), else a typical ratio."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return 0.0
    if path.endswith(".gz"):
        try:
            with open(path, "rb") as f:
                f.seek(max(0, size - 4))
                isize = int.from_bytes(f.read(4), "little")
        except OSError:
            isize = 0
        return float(isize) if isize >= size and size < 2**32 else size / 0.3
    if path.endswith((".zst", ".lz4")):
        return size / 0.4
    return float(size)


def _exact_text_size(path: str) -> float | None:
    """The COPY text bytes of a whole data file when known exactly: a plain
    file's size, a gzip file's trailer (ISIZE, when plausible); else None."""
    if path.endswith((".zst", ".lz4")):
        return None
    try:
        size = os.path.getsize(path)
    except OSError:
        return None
    if not path.endswith(".gz"):
        return float(size)
    try:
        with open(path, "rb") as f:
            if f.read(2) != b"\x1f\x8b":
                return None
            f.seek(max(0, size - 4))
            isize = int.from_bytes(f.read(4), "little")
    except OSError:
        return None
    # ISIZE is the length modulo 4 GiB: trusted below that only
    return float(isize) if size < 2**31 and isize >= size // 2 else None


def archive_index_sql(archive_dir: str, pg_restore: str | None = None) -> dict[str, list[str]]:
    """table ("schema.table") -> the archive's CREATE INDEX and ADD PRIMARY
    KEY / UNIQUE statements on it, in archive order (``pg_restore -v
    --section=post-data -f -``: the TOC only, no data read); {} when the
    archive cannot be read."""
    try:
        text = archive_sql(archive_dir, "post-data", pg_restore, 60)
    except TocError:
        return {}
    return index_statements(text)


def restore_probe_inputs(archive_dir: str, pg_restore: str | None = None,
                         text_ratio: float = DEFAULT_TEXT_RATIO
                         ) -> tuple[list[tuple[str, str, float]], dict[str, str]]:
    """(data_files, create_sql) of a directory-format archive for
    run_restore_probe: each TABLE DATA item's file with its size in heap
    bytes (COPY text / text_ratio), and each TABLE's CREATE TABLE text (from
    ``pg_restore -v --section=pre-data -f -``: no server, no data read).
    Tables are named "schema.table" with raw names, as the TOC lists them."""
    if archive_format(archive_dir) != "directory":
        raise ProbeError("the restore probe reads the data files of a directory-format "
                         "archive (pg_dump -Fd); for other formats use --history or "
                         "--from-timings")
    try:
        _, items = list_archive(archive_dir, pg_restore)
        text = archive_sql(archive_dir, "pre-data", pg_restore, 60)
    except TocError as exc:
        raise ProbeError(str(exc)) from None
    files: list[tuple[str, str, float]] = []
    for it in items:
        if it.desc != "TABLE DATA" or it.schema is None:
            continue
        path = data_file(archive_dir, it.dump_id)
        if path is not None:
            files.append((f"{it.schema}.{it.tag}", str(path),
                          max(1.0, _text_size(str(path)) / text_ratio)))
    return files, create_table_statements(text)


def run_restore_probe(target: ConnTarget, archive_dir: str,
                      data_files: list[tuple[str, str, float]] | None = None,
                      create_sql: dict[str, str] | None = None, *,
                      budget_s: float, max_streams: int, server_version_num: int,
                      text_ratio: float = DEFAULT_TEXT_RATIO,
                      index_sql: Mapping[str, Sequence[str]] | None = None) -> ProbeResult:
    """Measure X(k) of a restore's data phase within budget_s seconds: k
    sessions COPY FROM the archive's data files (through their decompressor)
    into temporary clones of the tables; and, after the warm-up, the time of
    one index build (ProbeResult.build_s_per_byte).

    data_files: (table as "schema.name", path of NNNN.dat[.gz|.lz4|.zst],
    size) with size the file's work in heap bytes (the order, and whether a
    file is loaded whole or a range of its first lines, use it). create_sql:
    table -> the archive's CREATE TABLE text (a table missing here must exist
    in the target database: LIKE is used).  Either left out (None): read from
    the archive (`restore_probe_inputs`).  Work unit: heap bytes = COPY text
    bytes / text_ratio.  index_sql: table -> the archive's CREATE INDEX (or
    ALTER TABLE ... ADD PRIMARY KEY / UNIQUE) statements for it: the index
    build after the warm-up copies the first one that `index_on_temp` can
    rewrite, on the temporary table the warm-up loaded most into; without one,
    a btree on its first column.

    build_s_per_byte: seconds of that build / heap bytes (COPY text bytes /
    text_ratio) in the temporary table, one session, on what the warm-up
    loaded (tens of MB): so a build on a table of B heap bytes takes about
    build_s_per_byte * B seconds with nothing else running.  The build runs
    outside the timed steps, under a statement_timeout of INDEX_SHARE of the
    budget, and only when INDEX_MIN_LEFT_S are left after the warm-up.

    What it does not measure: WAL and the table's own writes (temporary
    tables have neither; a real index build writes WAL); it measures parsing
    and inserting, and decompression on the client.  The session is read-write
    (temporary tables need that); nothing outside the session is touched."""
    t_start = time.monotonic()
    del server_version_num  # COPY FROM works on any version; kept for symmetry
    if not isinstance(archive_dir, (str, os.PathLike)):
        raise ProbeError("the restore probe needs the archive's directory (a path)")
    archive_dir = os.fspath(archive_dir)
    _check_args(budget_s, max_streams)
    if data_files is None or create_sql is None:
        found_files, found_create = restore_probe_inputs(archive_dir, text_ratio=text_ratio)
        data_files = found_files if data_files is None else data_files
        create_sql = found_create if create_sql is None else create_sql
    if index_sql is None:
        index_sql = archive_index_sql(archive_dir)
    if not data_files:
        raise ProbeError("the archive has no table data to probe")
    psql = _checked_psql()
    env = psql_env(target, statement_timeout_ms=int((budget_s + 30) * 1000), read_only=False)
    notes: list[str] = []
    device = _device(archive_dir, notes)
    try:
        scratch = tempfile.mkdtemp(prefix="pgparmon-restore-probe-")
    except OSError as exc:
        raise ProbeError(f"cannot make a scratch directory: {exc.strerror or exc}") from None
    try:
        files: list[_DataFile] = []
        kinds: set[str] = set()
        for n, (table, path, size) in enumerate(data_files):
            suffix = os.path.splitext(path)[1]
            dec: str | None = None
            if suffix in _DECOMPRESSORS:
                tool = _DECOMPRESSORS[suffix]
                found = shutil.which(tool)
                if found is None:
                    raise ProbeError(f"the probe decompresses {os.path.basename(path)} with the "
                                     f"{tool} command, which is not installed (or not on PATH)")
                dec = found if _SAFE_WORD.match(found) else tool
                kinds.add(tool)
            else:
                kinds.add("none")
            link = f"f{n}{suffix if suffix in _DECOMPRESSORS else '.dat'}"
            try:
                os.symlink(os.path.abspath(path), os.path.join(scratch, link))
            except OSError as exc:
                raise ProbeError(f"cannot use {path}: {exc.strerror or exc}") from None
            if not os.path.exists(os.path.join(scratch, link)):
                raise ProbeError(f"{path}: no such file")
            files.append(_DataFile(table, path, float(size), link, dec,
                                   text=_exact_text_size(path)))
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    source = _RestoreSource(files, create_sql, scratch, text_ratio)
    probe = _Probe(psql=psql, comp=None, env=env, scratch=scratch, source=source,
                   device=device, local=_is_local_host(env.get("PGHOST")),
                   connect_timeout_s=float(target.connect_timeout_s))
    built: dict[str, Any] = {}

    def finale(s: _Stream) -> str | None:
        # the index build, after the warm-up's last range, in its session
        left = t_start + budget_s - CLEANUP_RESERVE_S - time.monotonic()
        if left < INDEX_MIN_LEFT_S:
            notes.append("no time left in the budget for the index build")
            return None
        got = source.index_script(s, index_sql, min(INDEX_SHARE * budget_s, left / 4))
        if got is None:
            notes.append("the warm-up loaded too little to time an index build on")
            return None
        script, table, shown, heap = got
        built.update(stream=s, table=table, index=shown, heap_bytes=heap)
        return script

    points = _run(probe, scratch, notes, t_start, budget_s, max_streams, finale)
    build_s_per_byte = None
    build: dict[str, Any] | None = None
    s_ix = built.pop("stream", None)
    if s_ix is not None:
        res_ix = s_ix.index_result
        if res_ix is not None and res_ix[1] > 0 and built["heap_bytes"] > 0:
            build = dict(built, seconds=round(res_ix[0], 6))
            build_s_per_byte = res_ix[0] / built["heap_bytes"]
        elif res_ix is not None and res_ix[0] >= 0.9 * min(INDEX_SHARE * budget_s, 1e9):
            notes.append(f"the index build on {built['table']} took longer than the probe "
                         f"allows ({res_ix[0]:.1f} s): not measured")
        else:
            err = _error_line(s_ix.other)
            notes.append(f"the index build on {built['table']} failed"
                         + (f": {err}" if err else ""))
    if source.reused:
        notes.append("the archive's data files were read more than once (the archive is "
                     "small): the cache helped and the throughput may be optimistic")
    notes.append("restore probe: COPY into temporary tables (no WAL): parsing, inserting "
                 "and decompression only")
    if build_s_per_byte is not None and build is not None:
        notes.append(f"index build: {build['index']} on {_mb(build['heap_bytes'])} of "
                     f"{build['table']} in {build['seconds']:.3f} s "
                     f"({build_s_per_byte * GB:.2f} s/GB)")
    _cpu_note(probe, points, notes)
    label = kinds.pop() if len(kinds) == 1 else "mixed"
    return ProbeResult(points=points, seconds=time.monotonic() - t_start, budget_s=budget_s,
                       compression=label, ratio=None, device=device, notes=notes,
                       build_s_per_byte=build_s_per_byte, build=build)
