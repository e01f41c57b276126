"""The streams of the probe: one long psql session each, fed its script on
stdin, range after range.

Why one long session per stream: a psql per range would add a connection
(and a fork on the server) per range and would hide the backend's CPU (the
process is gone before it can be read).  After each range the script says
``\\warn pgparmon-probe done N`` on stderr (`DONE_RE`), which tells us the
range is finished and lets us hand the stream its next range right away,
or stop it when the step's time is up.  ``\\warn`` needs psql 13+.

Also here: what a range is (`Range`, and `Part` for the restore's loads),
where ranges come from (`RangeSource`), and the CPU and fsync helpers the
steps use.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Protocol

import psutil

from .compress import Compressor
from .psql import error_line, psql_argv
from .results import ProbeError

MARK = "pgparmon-probe"
PID_RE = re.compile(rf"^{MARK} pid (\d+)$")
DONE_RE = re.compile(rf"^{MARK} done (\d+)$")
INDEX_RE = re.compile(rf"^{MARK} index ([0-9.eE+-]+) (\d+)$")


@dataclass
class Range:
    """One piece of work for a stream: the psql script that does it."""

    label: str  # the table, for messages
    script: str
    heap: float = 0.0  # heap bytes, known up front (dump) or from count_path (restore)
    count_path: str | None = None
    lines: int = 0
    parts: list[Part] = field(default_factory=list)  # restore: the files it loads
    owner: Stream | None = None
    t0: float = 0.0
    t1: float | None = None


@dataclass
class Part:
    """Restore: one file (or its first `lines` lines) into one temporary table."""

    table: str
    temp: str
    known: float | None  # COPY text bytes, known up front; else counted by dd
    count_path: str | None
    lines: int = 0  # a prefix of the file; 0: the whole file
    truncate: bool = False  # the temporary table is emptied before this load


class RangeSource(Protocol):
    """Where a step's streams get their ranges: the dump's block ranges
    (`dump.DumpSource`) or the restore's data files
    (`restore_ranges.RestoreSource`)."""

    @property
    def reused(self) -> bool:
        """Whether the work ran out and ranges were handed out again."""
        ...

    def take(self, s: Stream, want_bytes: float) -> Range:
        """The next range for stream s, about want_bytes heap bytes."""
        ...

    def finish(self, r: Range) -> None:
        """Called when r is done (the restore counts its bytes here)."""
        ...


class Stream:
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
        self.ranges: list[Range] = []
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
                  f"\\warn {MARK} pid :pgparmon_pid\n")

    @property
    def current(self) -> Range | None:
        return self.ranges[-1] if self.ranges and self.ranges[-1].t1 is None else None

    def send(self, text: str) -> bool:
        assert self.psql is not None and self.psql.stdin is not None
        try:
            self.psql.stdin.write(text.encode("utf-8"))
            self.psql.stdin.flush()
        except (BrokenPipeError, ValueError):
            return False
        return True

    def start_range(self, r: Range, now: float) -> bool:
        r.t0 = now
        self.ranges.append(r)
        n = len(self.ranges)
        return self.send(f"{r.script}\n\\warn {MARK} done {n}\n")

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
        return error_line(lines)

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


def cpu_of(pid: int | None) -> float | None:
    """CPU seconds (user + system) of a process; None when unreadable."""
    if pid is None:
        return None
    try:
        ct = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return None
    return float(ct.user + ct.system)


def looks_like_backend(pid: int) -> bool:
    """Whether pid is a PostgreSQL server process (by its name)."""
    try:
        p = psutil.Process(pid)
        name = p.name()
    except (psutil.Error, OSError):
        return False
    return name.startswith(("postgres", "postmaster"))


def children_cpu() -> float:
    """CPU seconds of our child processes that have ended (psql, compressors)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return float(ru.ru_utime + ru.ru_stime)


def fsync_path(path: str, directory: bool = False) -> None:
    """fsync a file, or (directory=True) a directory's entries."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
