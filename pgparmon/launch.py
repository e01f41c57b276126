"""`pgparmon run`: start a job with its connections tagged, follow it, and
exit with its exit code."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid

from rich.console import Console

from .cmdline import parse_client_cmdline
from .connect import ConnectError, ConnTarget
from .discover import DiscoveryError
from .exitcodes import ExitCode, Fatal
from .follow import follow, open_recorder
from .jobs.registry import client_programs
from .monitor import Monitor, job_for_process
from .redact import redact_text
from .source import LiveSource, RecordingSource


def start_job(argv: list[str], env: dict[str, str] | None = None,
              log_dir: str | None = None) -> tuple[subprocess.Popen[bytes], str, str]:
    """Start pg_dump / pg_restore with its connections tagged, its stderr
    kept in a log file (not on the live screen)."""
    prog = os.path.basename(argv[0])
    tag = f"{prog}/pgparmon-{uuid.uuid4().hex[:8]}"
    e = dict(os.environ if env is None else env)
    e["PGAPPNAME"] = tag
    fd, log = tempfile.mkstemp(prefix="pgparmon-job-", suffix=".log", dir=log_dir)
    proc = subprocess.Popen(argv, env=e, stdout=fd, stderr=fd, stdin=subprocess.DEVNULL)
    os.close(fd)
    return proc, tag, log


def run_job(argv: list[str], target: ConnTarget | None, interval: float, as_json: bool,
            duration: float | None, env: dict[str, str] | None = None,
            console: Console | None = None, record: str | None = None,
            plain: bool = False) -> int:
    prog = os.path.basename(argv[0]) if argv else ""
    if prog not in client_programs():
        raise Fatal(f"run wraps {' or '.join(client_programs())}, not {prog or 'nothing'}: "
                    "pgparmon run -- pg_dump -Fd -j 4 -f DIR DB", ExitCode.USAGE)
    args = parse_client_cmdline(argv)
    if target is None:  # watch the server the job talks to, found the way libpq finds it
        e = os.environ if env is None else env
        target = ConnTarget(dbname=args.dbname or e.get("PGDATABASE"),
                            host=args.host or e.get("PGHOST"),
                            port=args.port or e.get("PGPORT"), user=args.user or e.get("PGUSER"))
    recorder = open_recorder(record)
    proc, tag, log = start_job(argv, env)
    job = job_for_process(proc.pid, argv, tag)
    code: int = ExitCode.INTERRUPTED
    try:
        try:
            live = LiveSource(target, job=job, process=proc)
            mon = Monitor(RecordingSource(live, recorder) if recorder else live)
            mon.discover()
        except (ConnectError, DiscoveryError) as exc:
            code = proc.wait()
            _print_log_tail(log)
            raise Fatal(f"{exc} (the job ran unmonitored and exited with {code})",
                        ExitCode.CONNECT) from None
        try:
            code = follow(mon, interval, as_json, duration, recorder, plain, console=console,
                          title=f"pgparmon run: {job.describe()}")
        finally:
            if proc.poll() is None and code == ExitCode.INTERRUPTED:
                proc.terminate()
        if code not in (0, ExitCode.INTERRUPTED):
            _print_log_tail(log)
    finally:
        try:
            os.unlink(log)
        except OSError:
            pass
    return code


def _print_log_tail(log: str) -> None:
    tail = _log_tail(log)
    if tail:
        sys.stderr.write(redact_text(tail) + "\n")


def _log_tail(path: str, lines: int = 5) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""
