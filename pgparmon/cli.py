"""pgparmon's command line.

Exit codes (also in docs/exit-codes.md):
  0  the job finished (run: the job's own exit code is passed through)
  1  the job failed
  2  bad usage or input
  3  cannot connect to the server
  4  no job found
  5  several jobs found: pick one with --pid
  130 interrupted (Ctrl-C)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Optional

import typer
from rich.console import Console
from rich.live import Live

from .connect import ConnectError, ConnTarget
from .discover import DiscoveryError
from .redact import redact_text

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CONNECT, EXIT_NO_JOB, EXIT_SEVERAL = 0, 1, 2, 3, 4, 5
EXIT_INTERRUPTED = 130

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  context_settings={"help_option_names": ["--help"]},
                  help="Watch parallel pg_dump, pg_restore and COPY loads; advise the job count.")

HostOpt = typer.Option(None, "-h", "--host", help="server host or socket directory (as psql)")
PortOpt = typer.Option(None, "-p", "--port", help="server port (as psql)")
UserOpt = typer.Option(None, "-U", "--username", help="user name (as psql)")
DbOpt = typer.Option(None, "-d", "--dbname",
                     help="database name, conninfo string or URI (as psql)")
IntervalOpt = typer.Option(1.0, "--interval", min=0.1, help="seconds between samples")
JsonOpt = typer.Option(False, "--json", help="write JSON Lines (pgparmon.sample/1) to stdout")
DurationOpt = typer.Option(None, "--duration", help="stop following after this many seconds")


def fail(msg: str, code: int) -> None:
    """One line on stderr (never wrapped: scripts grep it), then exit."""
    line = " ".join(redact_text(msg).split())
    sys.stderr.write(f"pgparmon: {line}\n")
    raise typer.Exit(code)


class Follower:
    """Drives a Monitor: ticks on a fixed cadence (never overlapping; a slow
    tick stretches the interval), and writes to the chosen view."""

    def __init__(self, mon: Any, interval: float, as_json: bool, duration: float | None,
                 console: Console | None = None) -> None:
        self.mon = mon
        self.interval = interval
        self.as_json = as_json
        self.duration = duration
        self.console = console or Console(highlight=False)
        self.stop = False
        self.last: dict[str, Any] | None = None

    def emit(self, doc: dict[str, Any], live: Live | None) -> None:
        from . import render

        self.last = doc
        if self.as_json:
            sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
            sys.stdout.flush()
        elif live is not None:
            live.update(render.screen(doc))
        else:
            self.console.print(render.plain_line(doc), markup=False)

    def run(self) -> int:
        from . import render

        start = time.monotonic()
        use_live = not self.as_json and self.console.is_terminal
        live = Live(console=self.console, auto_refresh=False, transient=False) if use_live \
            else None
        try:
            if live:
                live.start()
            nxt = time.monotonic()
            while not self.stop:
                doc = self.mon.tick()
                self.emit(doc, live)
                if live:
                    live.refresh()
                if self.mon.outcome is not None:
                    break
                if self.duration is not None and time.monotonic() - start >= self.duration:
                    break
                nxt += self.interval
                delay = nxt - time.monotonic()
                if delay < 0:  # a slow tick: stretch instead of piling up
                    nxt = time.monotonic()
                    delay = 0
                time.sleep(delay)
        finally:
            if live:
                live.stop()
        summary = self.mon.summary()
        if self.as_json:
            if self.mon.outcome is not None and self.last is not None:
                pass  # the last sample already carries the final state
            sys.stdout.write(json.dumps(summary, separators=(",", ":")) + "\n")
            sys.stdout.flush()
        elif self.mon.outcome is not None:
            self.console.print(render.summary_table(summary))
        if self.mon.outcome is None:
            return EXIT_OK
        if self.mon.outcome.exit_code is not None:
            return int(self.mon.outcome.exit_code)
        return EXIT_OK if self.mon.outcome.state == "finished" else EXIT_FAILED


def _target(host: str | None, port: str | None, user: str | None, dbname: str | None,
            statement_timeout_ms: int = 2000) -> ConnTarget:
    return ConnTarget(dbname=dbname, host=host, port=port, user=user,
                      statement_timeout_ms=statement_timeout_ms)


def _install_signals(follower: Follower) -> None:
    def handler(signum: int, frame: Any) -> None:
        follower.stop = True

    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError):
            pass


@app.command()
def attach(host: Optional[str] = HostOpt, port: Optional[str] = PortOpt,
           username: Optional[str] = UserOpt, dbname: Optional[str] = DbOpt,
           pid: Optional[int] = typer.Option(None, "--pid", help="the job's client pid or one "
                                             "of its backend pids"),
           interval: float = IntervalOpt, as_json: bool = JsonOpt,
           duration: Optional[float] = DurationOpt,
           wait: Optional[float] = typer.Option(None, "--wait", help="wait up to this many "
                                                "seconds for a job to start"),
           ) -> None:
    """Attach to a running parallel pg_dump, pg_restore or COPY load and follow it."""
    from .monitor import wait_for_job

    try:
        mon = wait_for_job(_target(host, port, username, dbname), pid, wait)
    except ConnectError as exc:
        fail(str(exc), EXIT_CONNECT)
    except DiscoveryError as exc:
        fail(str(exc), exc.code)
    follower = Follower(mon, interval, as_json, duration)
    _install_signals(follower)
    try:
        code = follower.run()
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    finally:
        mon.close()
    raise typer.Exit(code)


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
            console: Console | None = None) -> int:
    from .cmdline import parse_client_cmdline
    from .monitor import Monitor, job_for_process

    prog = os.path.basename(argv[0]) if argv else ""
    if prog not in ("pg_dump", "pg_restore"):
        fail(f"run wraps pg_dump or pg_restore, not {prog or 'nothing'}: "
             "pgparmon run -- pg_dump -Fd -j 4 -f DIR DB", EXIT_USAGE)
    args = parse_client_cmdline(argv)
    if target is None:  # watch the server the job talks to, found the way libpq finds it
        e = os.environ if env is None else env
        target = ConnTarget(dbname=args.dbname or e.get("PGDATABASE"),
                            host=args.host or e.get("PGHOST"),
                            port=args.port or e.get("PGPORT"), user=args.user or e.get("PGUSER"))
    proc, tag, log = start_job(argv, env)
    job = job_for_process(prog, proc.pid, argv, tag)
    try:
        mon = Monitor(target, job=job, process=proc)
        mon.discover()
    except (ConnectError, DiscoveryError) as exc:
        code = proc.wait()
        fail(f"{exc} (the job ran unmonitored and exited with {code})", EXIT_CONNECT)
    follower = Follower(mon, interval, as_json, duration, console=console)
    _install_signals(follower)
    try:
        code = follower.run()
    except KeyboardInterrupt:
        proc.terminate()
        code = EXIT_INTERRUPTED
    finally:
        mon.close()
    if code not in (0, EXIT_INTERRUPTED):
        tail = _log_tail(log)
        if tail:
            Console(stderr=True, highlight=False).print(redact_text(tail), markup=False)
    try:
        os.unlink(log)
    except OSError:
        pass
    return code


def _log_tail(path: str, lines: int = 5) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(ctx: typer.Context, host: Optional[str] = HostOpt, port: Optional[str] = PortOpt,
        username: Optional[str] = UserOpt, dbname: Optional[str] = DbOpt,
        interval: float = IntervalOpt, as_json: bool = JsonOpt,
        duration: Optional[float] = DurationOpt) -> None:
    """Start pg_dump or pg_restore (after --) and follow it; exits with its exit code."""
    argv = list(ctx.args)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        fail("nothing to run: pgparmon run -- pg_dump -Fd -j 4 -f DIR DB", EXIT_USAGE)
    target = None
    if host or port or username or dbname:
        target = _target(host, port, username, dbname)
    raise typer.Exit(run_job(argv, target, interval, as_json, duration))


@app.command()
def demo(jobs: int = typer.Option(4, "-j", "--jobs", help="parallel jobs for the demo"),
         scale: float = typer.Option(1.0, "--scale", help="size of the sample database"),
         interval: float = IntervalOpt, as_json: bool = JsonOpt,
         keep: bool = typer.Option(False, "--keep", help="keep the cluster's files")) -> None:
    """Start a throwaway cluster, dump and restore a skewed sample database, attached."""
    from .demo import run_demo

    raise typer.Exit(run_demo(jobs=jobs, scale=scale, interval=interval, as_json=as_json,
                              keep=keep))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
