"""`pgparmon advise`: check the options, build the request, print the advice
(text, or one pgparmon.advice/1 JSON object)."""

from __future__ import annotations

import json
import os
import sys

from ..connect import ConnectError, ConnTarget
from ..exitcodes import ExitCode, Fatal
from .advice import advise as run_advise
from .advice import parse_timings
from .kinds import COPY, DUMP, RESTORE, SUBSCRIPTION
from .predict import Compression
from .request import AdviseError, Request


def advise_command(*, conn: ConnTarget, dbname: str | None, target: str | None,
                   archive: str | None, probe: bool, probe_seconds: float | None,
                   history: list[str], from_timings: str | None, compress: str,
                   max_jobs: int | None, as_json: bool, copy: str | None = None,
                   table: str | None = None, copy_format: str = "csv",
                   header: bool = False, subscription: str | None = None,
                   publications: list[str] | None = None,
                   source: ConnTarget | None = None) -> int:
    if subscription is not None or publications:
        return _subscription(conn=conn, dbname=dbname, target=target, archive=archive,
                             copy=copy, history=history, from_timings=from_timings,
                             probe=probe, probe_seconds=probe_seconds, max_jobs=max_jobs,
                             as_json=as_json, subscription=subscription,
                             publications=list(publications or []), source=source)
    if source is not None:
        raise Fatal("--source names a subscription's publisher: give --subscription NAME",
                    ExitCode.USAGE)
    if copy is not None or table is not None:
        return _copy(conn=conn, dbname=dbname, target=target, archive=archive, probe=probe,
                     probe_seconds=probe_seconds, history=history, from_timings=from_timings,
                     max_jobs=max_jobs, as_json=as_json, copy=copy, table=table,
                     copy_format=copy_format, header=header)
    if target and archive:
        raise Fatal("give --target (advise a dump) or --archive (advise a restore), not both",
                    ExitCode.USAGE)
    try:
        comp = Compression.parse(compress)
    except ValueError as exc:
        raise Fatal(f"--compress: {exc}", ExitCode.USAGE) from None
    try:
        timings = parse_timings(from_timings) if from_timings is not None else None
    except AdviseError as exc:
        raise Fatal(str(exc), exc.code) from None
    kind = RESTORE if archive else DUMP
    if not target and not archive and not timings:
        raise Fatal("what to advise: --target DIR (a dump of -d DB), --archive PATH (a restore "
                    "into -d DB) or --from-timings \"1=70,2=44\"", ExitCode.USAGE)
    has_db = bool(dbname or os.environ.get("PGDATABASE"))
    if (target or (archive and not timings) or probe) and not has_db:
        raise Fatal(f"give the database with -d DB (the one to {kind.database_role})",
                    ExitCode.USAGE)
    # timings alone need no server; any connection option asks for one
    wants_server = has_db or conn.host or conn.port
    req = Request(kind=kind.name, conn=conn if wants_server else None, target_dir=target,
                  archive=archive, probe=probe, probe_seconds=probe_seconds, history=history,
                  timings=timings, compression=comp, max_jobs=max_jobs,
                  dbname_for_command=dbname, host=conn.host,
                  port=None if conn.port is None else str(conn.port), user=conn.user)
    return _print(req, as_json)


def _copy(*, conn: ConnTarget, dbname: str | None, target: str | None, archive: str | None,
          probe: bool, probe_seconds: float | None, history: list[str],
          from_timings: str | None, max_jobs: int | None, as_json: bool, copy: str | None,
          table: str | None, copy_format: str, header: bool) -> int:
    """advise --copy FILE --table T: a COPY load (docs/advise.md, "COPY loads")."""
    if not copy or not table:
        raise Fatal("a COPY load needs both --copy FILE and --table T", ExitCode.USAGE)
    if target or archive or history or from_timings:
        raise Fatal("--copy advises a COPY load: leave out --target, --archive, --history and "
                    "--from-timings", ExitCode.USAGE)
    fmt_ = copy_format.strip().lower()
    if fmt_ not in ("csv", "text"):
        raise Fatal(f"--format {copy_format}: use csv or text", ExitCode.USAGE)
    if not (dbname or os.environ.get("PGDATABASE")):
        raise Fatal(f"give the database with -d DB (the one to {COPY.database_role})",
                    ExitCode.USAGE)
    req = Request(kind=COPY.name, conn=conn, probe=probe, probe_seconds=probe_seconds,
                  max_jobs=max_jobs, dbname_for_command=dbname, host=conn.host,
                  port=None if conn.port is None else str(conn.port), user=conn.user,
                  copy_file=copy, copy_table=table, copy_format=fmt_, copy_header=header)
    return _print(req, as_json)


def _subscription(*, conn: ConnTarget, dbname: str | None, target: str | None,
                  archive: str | None, copy: str | None, history: list[str],
                  from_timings: str | None, probe: bool, probe_seconds: float | None,
                  max_jobs: int | None, as_json: bool, subscription: str | None,
                  publications: list[str], source: ConnTarget | None) -> int:
    """advise --subscription NAME [--publication P --source CONNINFO]: a
    subscription's initial sync (docs/advise.md, "A subscription's initial
    sync")."""
    if target or archive or copy or history or from_timings:
        raise Fatal("--subscription advises a subscription's initial sync: leave out "
                    "--target, --archive, --copy, --history and --from-timings",
                    ExitCode.USAGE)
    if not subscription:
        raise Fatal("--publication needs --subscription NAME (the subscription to create)",
                    ExitCode.USAGE)
    if not (dbname or os.environ.get("PGDATABASE")):
        raise Fatal(f"give the subscriber's database with -d DB (the one to "
                    f"{SUBSCRIPTION.database_role})", ExitCode.USAGE)
    req = Request(kind=SUBSCRIPTION.name, conn=conn, probe=probe, probe_seconds=probe_seconds,
                  max_jobs=max_jobs, dbname_for_command=dbname, host=conn.host,
                  port=None if conn.port is None else str(conn.port), user=conn.user,
                  subscription=subscription, publications=publications, source=source)
    return _print(req, as_json)


def _print(req: Request, as_json: bool) -> int:
    try:
        advice = run_advise(req)
    except ConnectError as exc:
        raise Fatal(str(exc), ExitCode.CONNECT) from None
    except AdviseError as exc:
        raise Fatal(str(exc), exc.code) from None
    if as_json:
        sys.stdout.write(json.dumps(advice.to_json()) + "\n")
    else:
        from .view import print_advice

        print_advice(advice)
    return ExitCode.OK
