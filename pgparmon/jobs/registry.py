"""The tool kinds pgparmon knows, in the order they claim sessions: a
session goes to the first driver whose `session_key` accepts it (tools that
name themselves before the catch-all COPY load).

A driver is checked as it is registered (`base.undeclared`: its kind, its
data flow, a plan for a driver that plans, the grouping rule of one that
claims sessions), the built-in ones as they load. The core asks the
drivers through the narrow protocols, which the look-ups here hand out
typed so: `recognisers()` and `recognise_for(kind)` (discovery, the
pickers, the live source), `plan_for(kind)` (the live source's plan
reading), `progress_for(kind)` (the live advice's words). `driver_for`
gives the whole driver, for the Tracker alone."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from .. import item_kinds, phases, verdicts
from ..cmdline import ClientArgs, ClientSpec, parse_client_cmdline
from .base import Driver, Job, undeclared
from .job import set_kind_lookup

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .plan import Plan
    from .progress import Progress
    from .recognise import Recognise

_DRIVERS: list[Driver] = []
_APPS: dict[str, str | None] = {}  # sample_apps(), built once per set of drivers


def _load() -> list[Driver]:
    if not _DRIVERS:
        from .copy import CopyLoad
        from .logical_sync import LogicalSync
        from .pg_basebackup import PgBasebackup
        from .pg_dump import PgDump
        from .pg_probackup import PgProbackup
        from .pg_restore import PgRestore
        from .pgbackrest import PgBackRest
        from .pgbackrest_restore import PgBackRestRestore
        from .vacuumdb import VacuumDb

        # one line per tool kind
        _DRIVERS.extend([PgDump(), PgRestore(), PgBasebackup(), PgBackRest(),
                         PgBackRestRestore(), PgProbackup(), LogicalSync(), VacuumDb(),
                         CopyLoad()])
        for d in _DRIVERS:
            _check(d)
            _register_vocabulary(d)
    return _DRIVERS


class DriverError(ValueError):
    """A driver that leaves out what it must declare."""


def _check(d: Driver) -> None:
    missing = undeclared(d)
    if missing:
        raise DriverError(f"the driver {type(d).__name__} ({d.kind or 'no kind'}) cannot be "
                          f"registered: {'; '.join(missing)}")


def _register_vocabulary(d: Driver) -> None:
    """The worker phases, item kinds and verdict kinds a driver adds."""
    phases.register(*d.phases)
    item_kinds.register(*d.item_kinds)
    verdicts.register_verdicts(*d.verdicts)


def drivers() -> list[Driver]:
    return _load()


def register(driver: Driver, first: bool = False) -> None:
    """Add a tool kind (a plug-in, or a test's); first: it claims sessions
    before the built-in kinds."""
    _load()
    _check(driver)
    if any(d.kind == driver.kind for d in _DRIVERS):
        raise ValueError(f"a driver for {driver.kind!r} is registered already")
    _register_vocabulary(driver)
    _DRIVERS.insert(0, driver) if first else _DRIVERS.append(driver)
    _APPS.clear()


def unregister(kind: str) -> None:
    _DRIVERS[:] = [d for d in _load() if d.kind != kind]
    _APPS.clear()


def phase_of(name: str | None) -> phases.Phase:
    """A worker phase (pgparmon.phases): those of any job's SQL sessions and
    those the drivers register."""
    _load()
    return phases.get(name)


def all_phases() -> list[phases.Phase]:
    """Every worker phase, the drivers' among them, in display order."""
    _load()
    return phases.ordered()


def item_kind(name: str | None) -> item_kinds.ItemKind:
    """A kind of work item (pgparmon.item_kinds): those of any job's SQL
    sessions and those the drivers register."""
    _load()
    return item_kinds.get(name)


def all_verdicts() -> tuple[str, ...]:
    """Every verdict kind a sample's bottleneck can have: the core's
    judge's, then the drivers' own."""
    from ..analyze import bottleneck  # noqa: F401 - registers the judge's kinds

    _load()
    return verdicts.verdict_kinds()


def all_warnings() -> tuple[str, ...]:
    """Every warning code a sample can carry."""
    from ..analyze import warnings  # noqa: F401 - registers the core's codes

    _load()
    return verdicts.warning_codes()


def job_titles(host_only: bool = False) -> str:
    """The kinds of job found through a server's sessions (host_only: those
    followed on a host with the server down), by their titles, as messages
    list them: "pg_dump, pg_restore, ... or COPY load"."""
    names = list(dict.fromkeys(d.title or d.kind for d in _load() if d.host_only == host_only))
    return " or ".join(filter(None, (", ".join(names[:-1]), names[-1]))) if names else ""


def driver_for(kind: str) -> Driver:
    """The whole driver of a kind: what a Tracker is handed. The rest of
    the core asks through one protocol (the look-ups below)."""
    for d in _load():
        if d.kind == kind:
            return d
    raise KeyError(f"no driver for job kind {kind!r}")


def recognisers() -> list[Recognise]:
    """Every driver, as the recognise protocol, in the order they claim
    sessions."""
    return list(_load())


def recognise_for(kind: str) -> Recognise:
    return driver_for(kind)


def plan_for(kind: str) -> Plan:
    return driver_for(kind)


def progress_for(kind: str) -> Progress:
    return driver_for(kind)


def driver_for_argv(argv: list[str] | tuple[str, ...]) -> Recognise | None:
    """The driver of a command line: of those for its program, the first
    whose tool it is (pgBackRest's backup and restore are two kinds)."""
    from ..readers.procs import ProcInfo

    prog = os.path.basename(argv[0]) if argv else ""
    mine: list[Recognise] = [d for d in _load() if prog in d.programs]
    root = ProcInfo(0, 0, prog, tuple(argv), 0.0, None)
    args = parse_argv(argv)
    return next((d for d in mine if d.from_tree(root, args)), mine[0] if mine else None)


def command_job(pid: int, argv: list[str], dbname: str | None) -> Job:
    """The job of a command `pgparmon run` started whose program no driver
    recognises: the first driver's that answers (`Driver.command_job`)."""
    for d in _load():
        job = d.command_job(pid, argv, dbname)
        if job is not None:
            return job
    raise LookupError(f"no driver follows {os.path.basename(argv[0]) if argv else 'a command'}")


def _whole_cluster(kind: str) -> bool:
    return driver_for(kind).whole_cluster


set_kind_lookup(_whole_cluster)  # Job.describe's question, answered by the kind's driver


def sample_extras() -> dict[str, tuple[str, ...]]:
    """What a sample reads for the drivers while jobs are looked for (a
    DbSampler's keywords): every driver's parts and the server process types
    that work for their jobs (discovery, the exporter's watch for new jobs)."""
    return _extras(_load())


def job_extras(kind: str) -> dict[str, tuple[str, ...]]:
    """What a sample reads for one known job: its driver's parts (those it
    reads while following among them) and server process types alone (a
    pg_dump's sample runs no subscription query)."""
    return _extras([driver_for(kind)], following=True)


def _extras(ds: list[Driver], following: bool = False) -> dict[str, Any]:
    parts = (p for d in ds for p in (*d.sample_parts, *(d.follow_parts if following else ())))
    # the sessions the tools name (every driver's, a followed job's or not:
    # a lock another tool's session holds is shown with its text)
    return {"parts": tuple(dict.fromkeys(parts)),
            "server_types": tuple(dict.fromkeys(t for d in ds for t in d.backend_types)),
            "apps": sample_apps()}


def sample_apps() -> dict[str, str | None]:
    """The sample's application_name regexes (sql/sample_*.sql's bound
    parameters), from the drivers' SessionApps: `app_text`, the sessions
    whose query text is kept; `app_idle`, those kept while idle;
    `app_repl`, the walsenders sampled. None where no driver names one (the
    query's `~ NULL` then matches nothing)."""
    if not _APPS:
        ds = _load()
        for key, flag in (("app_text", "query_text"), ("app_idle", "idle"),
                          ("app_repl", "replication")):
            _APPS[key] = prefix_regex(p for d in ds if getattr(d.session_apps, flag)
                                      for p in d.session_apps.prefixes)
    return dict(_APPS)


def prefix_regex(prefixes: Iterable[str]) -> str | None:
    """`^(a|b)`: a PostgreSQL regex (ARE) for text that starts with one of
    the prefixes, each taken literally (re.escape escapes no letter, digit
    or underscore: in an ARE a backslash before any other character makes
    it literal)."""
    alts = [re.escape(p) for p in dict.fromkeys(prefixes) if p]
    return f"^({'|'.join(alts)})" if alts else None


def client_specs() -> dict[str, ClientSpec]:
    """What each client program's command line means, from the drivers
    that follow it (pg_dump, pg_restore, psql, pg_basebackup...)."""
    return {prog: spec for d in _load() for prog, spec in d.client_specs.items()}


def parse_argv(argv: list[str] | tuple[str, ...]) -> ClientArgs:
    """A client command line read by its program's spec (never raises)."""
    return parse_client_cmdline(argv, client_specs())


def client_programs() -> tuple[str, ...]:
    """Every client program some driver recognises in the process table."""
    return tuple(dict.fromkeys(p for d in _load() for p in d.programs))


def program_of(app: str | None) -> str | None:
    """The client program an application_name names (pg_dump falls back to
    its own name; a tag like 'pg_dump/pgparmon-1a2b' starts with it)."""
    if not app:
        return None
    for prog in client_programs():
        if app.startswith(prog):
            return prog
    return None
