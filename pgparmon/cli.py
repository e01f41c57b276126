"""pgparmon's command line.

Exit codes (also in docs/exit-codes.md):
  0  the job finished (run: the job's own exit code is passed through)
  1  the job failed
  2  bad usage or input
  3  cannot connect to the server
  4  no job found
  5  several jobs found: pick one with --pid
  6  the job ended, but its outcome cannot be seen by this user
  129 / 143 stopped by SIGHUP (terminal gone) / SIGTERM; the recording is complete
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
from typing import Any

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
    """Drives a Monitor for a view. As a feed (tick/outcome/summary/details/
    close) it serves the TUI; run() is the headless loop: ticks on a fixed
    cadence, never overlapping (a slow tick stretches the interval)."""

    def __init__(self, mon: Any, interval: float, as_json: bool, duration: float | None,
                 console: Console | None = None, recorder: Any = None) -> None:
        self.mon = mon
        self.recorder = recorder
        self.interval = interval
        self.as_json = as_json
        self.duration = duration
        self.console = console or Console(highlight=False)
        self.stop = False
        self.last: dict[str, Any] | None = None
        self.closed = False
        self.stop_signal: int | None = None  # SIGHUP / SIGTERM that stopped us

    # -- the feed protocol ---------------------------------------------------

    def tick(self) -> dict[str, Any]:
        doc: dict[str, Any] = self.mon.tick()
        self.last = doc
        if self.recorder is not None:
            self.recorder.event("sample", doc)
        return doc

    @property
    def outcome(self) -> Any:
        return self.mon.outcome

    def summary(self) -> dict[str, Any]:
        return self.mon.summary()  # type: ignore[no-any-return]

    def details(self, pid: int) -> dict[str, Any]:
        return self.mon.details(pid)  # type: ignore[no-any-return]

    def close(self) -> dict[str, Any]:
        """Finish the recording (summary last) and the monitor; idempotent."""
        summary: dict[str, Any] = self.mon.summary()
        if not self.closed:
            self.closed = True
            if self.recorder is not None:
                self.recorder.event("summary", summary)
                self.recorder.close()
            self.mon.close()
        return summary

    def exit_code(self) -> int:
        if self.stop_signal is not None:
            return 128 + self.stop_signal  # the shell's convention for a signal
        from .monitor import outcome_exit_code

        return outcome_exit_code(self.mon.outcome)

    # -- headless ------------------------------------------------------------

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
                doc = self.tick()
                if self.as_json:
                    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
                    sys.stdout.flush()
                elif live is not None:
                    live.update(render.screen(doc), refresh=True)
                else:
                    self.console.print(render.plain_line(doc), markup=False)
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
            summary = self.close()
        if self.as_json:
            sys.stdout.write(json.dumps(summary, separators=(",", ":")) + "\n")
            sys.stdout.flush()
        elif self.mon.outcome is not None:
            self.console.print(render.summary_table(summary))
        return self.exit_code()


def follow(mon: Any, interval: float, as_json: bool, duration: float | None,
           recorder: Any, plain: bool, console: Console | None = None,
           title: str = "pgparmon") -> int:
    """Show a monitored job: the TUI in a terminal, else lines or JSON."""
    follower = Follower(mon, interval, as_json, duration, console=console, recorder=recorder)
    _install_signals(follower)
    use_tui = (not as_json and not plain and duration is None and sys.stdout.isatty()
               and sys.stdin.isatty())
    try:
        if use_tui:
            try:
                from .tui import run_tui
            except ImportError:
                use_tui = False
        if use_tui:
            try:
                code = run_tui(follower, interval=interval, title=title)
            finally:
                follower.close()
            return follower.exit_code() if follower.stop_signal is not None else int(code)
        return follower.run()
    except KeyboardInterrupt:
        follower.close()
        return EXIT_INTERRUPTED


def _recorder(path: str | None) -> Any:
    if not path:
        return None
    from .record import Recorder, RecordingError

    try:
        return Recorder(path)
    except RecordingError as exc:
        fail(str(exc), EXIT_USAGE)
    return None


def _target(host: str | None, port: str | None, user: str | None, dbname: str | None,
            statement_timeout_ms: int = 2000) -> ConnTarget:
    return ConnTarget(dbname=dbname, host=host, port=port, user=user,
                      statement_timeout_ms=statement_timeout_ms)


def _install_signals(follower: Follower) -> None:
    def handler(signum: int, frame: Any) -> None:
        follower.stop = True
        follower.stop_signal = signum

    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError):
            pass


RecordOpt = typer.Option(None, "--record", help="write every sample to this recording "
                         "(gzip JSON Lines; replay/report read it)")
PlainOpt = typer.Option(False, "--plain", help="no full-screen TUI: a compact live view")


@app.command()
def attach(host: str | None = HostOpt, port: str | None = PortOpt,
           username: str | None = UserOpt, dbname: str | None = DbOpt,
           pid: int | None = typer.Option(None, "--pid", help="the job's client pid or one "
                                          "of its backend pids"),
           interval: float = IntervalOpt, as_json: bool = JsonOpt,
           duration: float | None = DurationOpt,
           wait: float | None = typer.Option(None, "--wait", help="wait up to this many "
                                             "seconds for a job to start"),
           record: str | None = RecordOpt, plain: bool = PlainOpt,
           ) -> None:
    """Attach to a running parallel pg_dump, pg_restore or COPY load and follow it."""
    from .monitor import wait_for_job

    recorder = _recorder(record)
    try:
        mon = wait_for_job(_target(host, port, username, dbname), pid, wait, recorder=recorder)
    except ConnectError as exc:
        fail(str(exc), EXIT_CONNECT)
    except DiscoveryError as exc:
        fail(str(exc), exc.code)
    raise typer.Exit(follow(mon, interval, as_json, duration, recorder, plain,
                            title=f"pgparmon attach: {mon.discover_label()}"))


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
    from .cmdline import parse_client_cmdline
    from .monitor import Monitor, job_for_process
    from .source import LiveSource, RecordingSource

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
    recorder = _recorder(record)
    proc, tag, log = start_job(argv, env)
    job = job_for_process(prog, proc.pid, argv, tag)
    code = EXIT_INTERRUPTED
    try:
        try:
            live = LiveSource(target, job=job, process=proc)
            mon = Monitor(RecordingSource(live, recorder) if recorder else live)
            mon.discover()
        except (ConnectError, DiscoveryError) as exc:
            code = proc.wait()
            _print_log_tail(log)
            fail(f"{exc} (the job ran unmonitored and exited with {code})", EXIT_CONNECT)
        try:
            code = follow(mon, interval, as_json, duration, recorder, plain, console=console,
                          title=f"pgparmon run: {job.describe()}")
        finally:
            if proc.poll() is None and code == EXIT_INTERRUPTED:
                proc.terminate()
        if code not in (0, EXIT_INTERRUPTED):
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


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(ctx: typer.Context, host: str | None = HostOpt, port: str | None = PortOpt,
        username: str | None = UserOpt, dbname: str | None = DbOpt,
        interval: float = IntervalOpt, as_json: bool = JsonOpt,
        duration: float | None = DurationOpt, record: str | None = RecordOpt,
        plain: bool = PlainOpt) -> None:
    """Start pg_dump or pg_restore (after --) and follow it; exits with its exit code."""
    argv = list(ctx.args)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        fail("nothing to run: pgparmon run -- pg_dump -Fd -j 4 -f DIR DB", EXIT_USAGE)
    target = None
    if host or port or username or dbname:
        target = _target(host, port, username, dbname)
    raise typer.Exit(run_job(argv, target, interval, as_json, duration, record=record,
                             plain=plain))


@app.command()
def demo(jobs: int = typer.Option(4, "-j", "--jobs", help="parallel jobs for the demo"),
         scale: float = typer.Option(1.0, "--scale", help="size of the sample database"),
         interval: float = IntervalOpt, as_json: bool = JsonOpt,
         keep: bool = typer.Option(False, "--keep", help="keep the cluster's files"),
         record: str | None = typer.Option(None, "--record", help="record the dump to "
                                           "FILE and the restore to FILE's '.restore' "
                                           "sibling"),
         plain: bool = PlainOpt) -> None:
    """Start a throwaway cluster, dump and restore a skewed sample database, attached."""
    from .demo import run_demo

    raise typer.Exit(run_demo(jobs=jobs, scale=scale, interval=interval, as_json=as_json,
                              keep=keep, record=record, plain=plain))


@app.command()
def replay(path: str = typer.Argument(..., help="a recording written with --record"),
           speed: float = typer.Option(1.0, "--speed", help="replay speed (2 = twice as "
                                       "fast)")) -> None:
    """Replay a recording through the same analysis and screen (pause, step, seek)."""
    from .tui.commands import replay_command

    raise typer.Exit(replay_command(path, speed))


@app.command()
def report(path: str = typer.Argument(..., help="a recording written with --record"),
           html: str | None = typer.Option(None, "--html", help="also write a "
                                           "self-contained HTML report to this file")) -> None:
    """The end-of-run summary of a recording; --html writes a file to attach to a ticket."""
    from .tui.commands import report_command

    raise typer.Exit(report_command(path, html))



HistoryOpt = typer.Option(None, "--history", help="a recording of an earlier run (repeat for "
                          "several)")


@app.command()
def advise(host: str | None = HostOpt, port: str | None = PortOpt,
           username: str | None = UserOpt, dbname: str | None = DbOpt,
           target: str | None = typer.Option(None, "--target", help="advise a dump into this "
                                             "directory (pg_dump -Fd -j)"),
           archive: str | None = typer.Option(None, "--archive", help="advise a restore of "
                                              "this archive (-Fd directory or -Fc file) into "
                                              "-d DB"),
           probe: bool = typer.Option(False, "--probe", help="measure this system first: "
                                      "parallel COPY streams through the same compression "
                                      "into the target (within its budget)"),
           probe_seconds: float | None = typer.Option(None, "--probe-seconds", min=1.0,
                                                      help="the probe's time budget (default: "
                                                      "3% of the predicted run, at most 60 s)"),
           history: list[str] | None = HistoryOpt,
           from_timings: str | None = typer.Option(None, "--from-timings", help="wall times of "
                                                   "an earlier sweep, e.g. "
                                                   "\"1=70.3,2=43.6,4=33.7\""),
           compress: str = typer.Option("gzip", "--compress", "-Z", help="the compression the "
                                        "dump will use, as pg_dump -Z: 0-9, gzip[:N], lz4[:N], "
                                        "zstd[:N], none"),
           max_jobs: int | None = typer.Option(None, "--max-jobs", min=1, max=256,
                                               help="consider -j up to this (default: the "
                                               "cores, at least 4)"),
           as_json: bool = typer.Option(False, "--json", help="print one JSON object "
                                        "(pgparmon.advice/1, docs/advise.md)"),
           ) -> None:
    """Advise the job count for a dump or restore: predicted time per -j, the limit, the command."""
    from .advise.advice import AdviseError, Request, parse_timings
    from .advise.advice import advise as run_advise
    from .advise.model import Compression

    if target and archive:
        fail("give --target (advise a dump) or --archive (advise a restore), not both",
             EXIT_USAGE)
    try:
        comp = Compression.parse(compress)
    except ValueError as exc:
        fail(f"--compress: {exc}", EXIT_USAGE)
    try:
        timings = parse_timings(from_timings) if from_timings is not None else None
    except AdviseError as exc:
        fail(str(exc), exc.code)
    kind = "restore" if archive else "dump"
    if not target and not archive and not timings:
        fail("what to advise: --target DIR (a dump of -d DB), --archive PATH (a restore into "
             "-d DB) or --from-timings \"1=70,2=44\"", EXIT_USAGE)
    has_db = bool(dbname or os.environ.get("PGDATABASE"))
    if (target or (archive and not timings) or probe) and not has_db:
        what = "dump" if kind == "dump" else "restore into"
        fail(f"give the database with -d DB (the one to {what})", EXIT_USAGE)
    # timings alone need no server; any connection option asks for one
    conn = _target(host, port, username, dbname) if (has_db or host or port) else None
    req = Request(kind=kind, conn=conn, target_dir=target, archive=archive, probe=probe,
                  probe_seconds=probe_seconds, history=list(history or []), timings=timings,
                  compression=comp, max_jobs=max_jobs, dbname_for_command=dbname,
                  host=host, port=port, user=username)
    try:
        advice = run_advise(req)
    except ConnectError as exc:
        fail(str(exc), EXIT_CONNECT)
    except AdviseError as exc:
        fail(str(exc), exc.code)
    if as_json:
        sys.stdout.write(json.dumps(advice.to_json()) + "\n")
    else:
        from .advise.report import print_advice

        print_advice(advice)
    raise typer.Exit(EXIT_OK)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
