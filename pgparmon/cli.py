"""pgparmon's command line: typer wiring only. Each command parses its
options and calls the module that does the work; exit codes are
`exitcodes.ExitCode` (docs/exit-codes.md)."""

from __future__ import annotations

import inspect
import sys

import typer

from .connect import ConnTarget
from .exitcodes import ExitCode, Fatal
from .redact import redact_text

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


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("pgparmon")
        except PackageNotFoundError:  # run from a checkout that was never installed
            v = "unknown (not installed)"
        sys.stdout.write(f"pgparmon {v}\n")
        raise typer.Exit(0)


@app.callback()
def options(show_version: bool = typer.Option(False, "--version", is_eager=True,
                                              callback=_version,
                                              help="print pgparmon's version and exit")
            ) -> None:
    """Watch parallel pg_dump, pg_restore and COPY loads; advise the job count."""


def fail(msg: str, code: int) -> None:
    """One line on stderr (never wrapped: scripts grep it), then exit:
    main() prints it."""
    raise Fatal(msg, code)


def _target(host: str | None, port: str | None, user: str | None, dbname: str | None,
            statement_timeout_ms: int = 2000) -> ConnTarget:
    return ConnTarget(dbname=dbname, host=host, port=port, user=user,
                      statement_timeout_ms=statement_timeout_ms)


RecordOpt = typer.Option(None, "--record", help="write every sample to this recording "
                         "(gzip JSON Lines; replay/report read it)")
PlainOpt = typer.Option(False, "--plain", help="no full-screen TUI: a compact live view")
SourceOpt = typer.Option(None, "--source", help="a COPY job's source server (conninfo, URI, "
                         "service=NAME, or a database name on the watched server): the copy "
                         "is planned from its catalog (tables, indexes)")


def _source(target: ConnTarget | None, source: str | None) -> ConnTarget | None:
    """--source: a conninfo or URI stands alone; a bare name is a database
    of the watched server."""
    if not source:
        return None
    if "=" in source or source.startswith(("postgresql://", "postgres://")):
        return ConnTarget(dbname=source)
    return (target or ConnTarget()).with_dbname(source)


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
           source: str | None = SourceOpt,
           host_only: bool = typer.Option(False, "--host-only", help="no database "
                                          "connection: follow a tool that runs with the "
                                          "server down (a pgBackRest restore) from this "
                                          "host's processes and files"),
           ) -> None:
    """Attach to a running parallel pg_dump, pg_restore, COPY load or backup and follow it."""
    from .follow import attach_command

    target = _target(host, port, username, dbname)
    raise typer.Exit(attach_command(target, pid, wait, interval, as_json, duration, record,
                                    plain, copy_source=_source(target, source),
                                    host_only=host_only))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(ctx: typer.Context, host: str | None = HostOpt, port: str | None = PortOpt,
        username: str | None = UserOpt, dbname: str | None = DbOpt,
        interval: float = IntervalOpt, as_json: bool = JsonOpt,
        duration: float | None = DurationOpt, record: str | None = RecordOpt,
        plain: bool = PlainOpt, source: str | None = SourceOpt) -> None:
    """Start a command (after --: pg_dump, pg_restore, a loader, a script) and follow it; exits
    with its exit code."""
    argv = list(ctx.args)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        fail("nothing to run: pgparmon run -- pg_dump -Fd -j 4 -f DIR DB", ExitCode.USAGE)
    target = None
    if host or port or username or dbname:
        target = _target(host, port, username, dbname)
    from .launch import run_job

    raise typer.Exit(run_job(argv, target, interval, as_json, duration, record=record,
                             plain=plain, copy_source=_source(target, source)))


@app.command()
def demo(jobs: int = typer.Option(4, "-j", "--jobs", help="parallel jobs for the demo"),
         scale: float = typer.Option(1.0, "--scale", help="size of the sample database"),
         interval: float = IntervalOpt, as_json: bool = JsonOpt,
         keep: bool = typer.Option(False, "--keep", help="keep the cluster's files"),
         record: str | None = typer.Option(None, "--record", help="record the dump to "
                                           "FILE and the restore to FILE's '.restore' "
                                           "sibling (default: both in a new directory "
                                           "$TMPDIR/pgparmon-demo-rec-*, kept)"),
         plain: bool = PlainOpt) -> None:
    """Start a throwaway cluster, dump and restore a skewed sample database, attached and
    recorded."""
    from .demo import run_demo

    raise typer.Exit(run_demo(jobs=jobs, scale=scale, interval=interval, as_json=as_json,
                              keep=keep, record=record, plain=plain))


@app.command()
def replay(path: str = typer.Argument(..., help="a recording written with --record"),
           speed: float = typer.Option(1.0, "--speed", help="replay speed (2 = twice as "
                                       "fast)")) -> None:
    """Replay a recording through the same analysis and screen (pause, step, seek)."""
    from .playback import replay_command

    raise typer.Exit(replay_command(path, speed))


@app.command()
def report(path: str = typer.Argument(..., help="a recording written with --record"),
           html: str | None = typer.Option(None, "--html", help="also write a "
                                           "self-contained HTML report to this file")) -> None:
    """The end-of-run summary of a recording; --html writes a file to attach to a ticket."""
    from .playback import report_command

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
           copy: str | None = typer.Option(None, "--copy", help="advise a COPY load of this "
                                           "csv or text file into --table T of -d DB"),
           table: str | None = typer.Option(None, "--table", help="the table a --copy load "
                                            "fills (schema.table, or as search_path finds it)"),
           copy_format: str = typer.Option("csv", "--format", help="--copy: the file's "
                                            "format, csv or text"),
           header: bool = typer.Option(False, "--header", help="--copy: the file's first "
                                       "line is a header"),
           subscription: str | None = typer.Option(None, "--subscription", help="advise "
                                                   "this subscription's initial sync in -d DB "
                                                   "(running, or with --publication one to "
                                                   "create): max_sync_workers_per_subscription"),
           publication: list[str] | None = typer.Option(None, "--publication", help="a "
                                                        "publication the subscription to "
                                                        "create will subscribe (repeat for "
                                                        "several)"),
           source: str | None = typer.Option(None, "--source", help="--subscription: the "
                                             "publisher (conninfo, URI, service=NAME, or a "
                                             "database name on the same server)"),
           ) -> None:
    """Advise the job count for a dump, restore, COPY load or a subscription's initial sync:
    predicted time per -j, the limit, the command."""
    from .advise.command import advise_command

    raise typer.Exit(advise_command(
        conn=_target(host, port, username, dbname), dbname=dbname, target=target,
        archive=archive, probe=probe, probe_seconds=probe_seconds, history=list(history or []),
        from_timings=from_timings, compress=compress, max_jobs=max_jobs, as_json=as_json,
        copy=copy, table=table, copy_format=copy_format, header=header,
        subscription=subscription, publications=list(publication or []),
        source=_source(_target(host, port, username, None), source)))


@app.command()
def exporter(host: str | None = HostOpt, port: str | None = PortOpt,
             username: str | None = UserOpt, dbname: str | None = DbOpt,
             server: list[str] | None = typer.Option(None, "--server", help="another server "
                                                     "to watch: a conninfo, URI or "
                                                     "service=NAME (repeat for several)"),
             name: list[str] | None = typer.Option(None, "--name", help="the `server` label "
                                                   "of each server, in order (default "
                                                   "host:port/database)"),
             listen: str = typer.Option("127.0.0.1:9752", "--listen", help="serve /metrics "
                                        "on HOST:PORT"),
             web_config: str | None = typer.Option(None, "--web-config", help="TLS and basic "
                                                   "auth for /metrics: a web configuration "
                                                   "file of Prometheus' exporter toolkit "
                                                   "(docs/metrics.md)"),
             interval: float = IntervalOpt,
             record_dir: str | None = typer.Option(None, "--record-dir", help="record every "
                                                   "job followed into this directory"),
             retain_age: str = typer.Option("14d", "--retain-age", help="delete finished "
                                            "recordings older than this (e.g. 14d, 36h; 0: "
                                            "no age limit)"),
             retain_size: str = typer.Option("1G", "--retain-size", help="keep the "
                                             "recordings under this total (e.g. 500M, 2G; "
                                             "0: no size limit)"),
             keep_ended: float = typer.Option(600.0, "--keep-ended", min=0.0, help="seconds "
                                              "an ended job's series stay after its end"),
             ) -> None:
    """Serve Prometheus metrics of every job on one or more servers, recording each job."""
    from .exporter.daemon import Options, exporter_command, targets
    from .exporter.retention import parse_age, parse_size

    try:
        age, size = parse_age(retain_age), parse_size(retain_size)
    except ValueError as exc:
        fail(f"--retain-age / --retain-size: {exc}", ExitCode.USAGE)
    opts = Options(targets=targets(host, port, username, dbname, list(server or [])),
                   names=tuple(name or ()), listen=listen, web_config=web_config,
                   interval=interval,
                   record_dir=record_dir, retain_age_s=age or None, retain_bytes=size or None,
                   keep_ended_s=keep_ended)
    raise typer.Exit(exporter_command(opts))


def _one_line_help() -> None:
    """`pgparmon --help` lists each command with its docstring's first
    paragraph, keeping the docstring's line breaks: a sentence broken in
    the source would break mid-sentence on the screen. Each gets the
    paragraph joined into one line (the terminal wraps it)."""
    for info in app.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if info.short_help is None and doc:
            info.short_help = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


_one_line_help()


def main() -> None:
    try:
        app()
    except Fatal as exc:
        sys.stderr.write(f"pgparmon: {' '.join(redact_text(str(exc)).split())}\n")
        sys.exit(exc.code)
    except KeyboardInterrupt:
        sys.exit(ExitCode.INTERRUPTED)
