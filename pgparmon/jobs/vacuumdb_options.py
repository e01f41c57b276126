"""vacuumdb's command line: its options (PostgreSQL 15's, and those later
clients added: -n/-N, --buffer-usage-limit, --missing-stats-only...) as a
ClientSpec, and what they ask for (VacOptions): which databases and tables,
which statement on each, in how many stages.

A positional argument is the database only when -d did not name one (-d
wins, unlike pg_dump). Table and schema names read as the server reads
them (`'...'::regclass`): unquoted parts fold to lower case.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cmdline import CONN, ClientArgs, ClientSpec, Opts, args, flags, parse_client_cmdline
from ..item_kinds import ItemKind

_OPTIONS: Opts = {
    **CONN, "a": ("all", False), "e": ("echo", False), "f": ("full", False),
    "F": ("freeze", False), "j": ("jobs", True), "n": ("schema", True),
    "N": ("exclude-schema", True), "P": ("parallel", True), "q": ("quiet", False),
    "t": ("table", True), "z": ("analyze", False), "Z": ("analyze-only", False),
    **args("jobs", "schema", "exclude-schema", "parallel", "table", "maintenance-db",
           "min-xid-age", "min-mxid-age", "buffer-usage-limit"),
    **flags("all", "echo", "full", "freeze", "quiet", "analyze", "analyze-only",
            "analyze-in-stages", "disable-page-skipping", "skip-locked", "no-index-cleanup",
            "force-index-cleanup", "no-truncate", "no-process-toast", "no-process-main",
            "missing-stats-only"),
}


def _positional(res: ClientArgs, pos: list[str], dbname: str | None) -> str | None:
    return dbname if dbname is not None else (pos[0] if pos else None)


CLIENT = ClientSpec(options=_OPTIONS, positional=_positional)

# the statement each table gets (the item's kind)
VACUUM, VACUUM_ANALYZE, ANALYZE, VACUUM_FULL = "vacuum", "vacuum-analyze", "analyze", "vacuum-full"
ITEM_KINDS = tuple(ItemKind(k) for k in (VACUUM, VACUUM_ANALYZE, ANALYZE, VACUUM_FULL))
# --analyze-in-stages: the statistics target of each stage (None: the server's
# default_statistics_target, which the last stage RESETs to)
STAGE_TARGETS: tuple[int | None, ...] = (1, 10, None)
STAGE_NAMES = ("minimal optimizer statistics (1 target)",
               "medium optimizer statistics (10 targets)",
               "default (full) optimizer statistics")


@dataclass(frozen=True)
class VacOptions:
    """What one vacuumdb command line asks for."""

    dbname: str | None = None
    all_databases: bool = False
    maintenance_db: str | None = None
    tables: tuple[str, ...] = ()  # -t as given, column lists dropped
    schemas: tuple[str, ...] = ()  # -n
    exclude_schemas: tuple[str, ...] = ()  # -N
    analyze: bool = False  # -z: VACUUM (ANALYZE)
    analyze_only: bool = False  # -Z, or --analyze-in-stages
    in_stages: bool = False
    full: bool = False
    freeze: bool = False
    skip_locked: bool = False
    no_process_toast: bool = False
    missing_stats_only: bool = False  # 18+: a filter pgparmon cannot read
    min_xid_age: int | None = None
    min_mxid_age: int | None = None
    jobs: int | None = None
    user: str | None = None

    @property
    def statement(self) -> str:
        """The item kind: what vacuumdb runs on each table."""
        if self.analyze_only:
            return ANALYZE
        if self.full:
            return VACUUM_FULL
        return VACUUM_ANALYZE if self.analyze else VACUUM

    @property
    def stages(self) -> int:
        return len(STAGE_TARGETS) if self.in_stages else 1

    def words(self) -> str:
        """The statement as vacuumdb sends it (its options in brackets)."""
        if self.analyze_only:
            return "ANALYZE"
        opts = [o for o, on in (("FULL", self.full), ("FREEZE", self.freeze),
                                ("ANALYZE", self.analyze)) if on]
        return "VACUUM" + (f" ({', '.join(opts)})" if opts else "")


def vac_options(parsed: ClientArgs) -> VacOptions:
    """VacOptions from a parsed vacuumdb command line."""
    got: dict[str, list[str | None]] = {}
    for key, value in parsed.options:
        got.setdefault(key, []).append(value)

    def last_int(key: str) -> int | None:
        vals = [v for v in got.get(key, ()) if v]
        try:
            return int(vals[-1]) if vals else None
        except ValueError:
            return None

    stages = "analyze-in-stages" in got
    return VacOptions(
        dbname=parsed.dbname, all_databases="all" in got,
        maintenance_db=next((v for v in reversed(got.get("maintenance-db", ())) if v), None),
        tables=tuple(dict.fromkeys(table_part(v) for v in got.get("table", ()) if v)),
        schemas=tuple(v for v in got.get("schema", ()) if v),
        exclude_schemas=tuple(v for v in got.get("exclude-schema", ()) if v),
        analyze="analyze" in got, analyze_only=stages or "analyze-only" in got,
        in_stages=stages, full="full" in got, freeze="freeze" in got,
        skip_locked="skip-locked" in got, no_process_toast="no-process-toast" in got,
        missing_stats_only="missing-stats-only" in got,
        min_xid_age=last_int("min-xid-age"), min_mxid_age=last_int("min-mxid-age"),
        jobs=parsed.jobs, user=parsed.user)


def options_of(command: tuple[str, ...] | list[str]) -> VacOptions:
    """VacOptions of a (redacted) vacuumdb argv, as a recording keeps it."""
    return vac_options(parse_client_cmdline(list(command), {"vacuumdb": CLIENT}))


def table_part(spec: str) -> str:
    """-t 'TABLE(COLUMNS)': the table, its column list dropped (a bracket
    inside double quotes is part of a name)."""
    quoted = False
    for i, ch in enumerate(spec):
        if ch == '"':
            quoted = not quoted
        elif ch == "(" and not quoted:
            return spec[:i].strip()
    return spec.strip()


def name_parts(name: str) -> list[str]:
    """A possibly qualified SQL name split into its parts, as the server
    reads it: quoted parts as written ("" is one quote), the others folded
    to lower case."""
    parts: list[str] = []
    cur: list[str] = []
    quoted = was_quoted = False
    i = 0
    while i < len(name):
        ch = name[i]
        if quoted:
            if ch == '"' and name[i + 1:i + 2] == '"':
                cur.append('"')
                i += 1
            elif ch == '"':
                quoted = False
            else:
                cur.append(ch)
        elif ch == '"':
            quoted = was_quoted = True
        elif ch == ".":
            parts.append("".join(cur))
            cur, was_quoted = [], False
        elif not ch.isspace() or cur:
            cur.append(ch if was_quoted else ch.lower())
        i += 1
    parts.append("".join(cur).rstrip() if not was_quoted else "".join(cur))
    return parts
