"""What a pg_dump / pg_restore / psql process was asked to do, from its argv.

The monitor reads command lines of processes it did not start (psutil), so
the parser must accept anything: it never raises, keeps what it does not
understand, and never keeps a password (see redact.py).  Option handling
follows the clients' getopt_long: attached or separate values (-j4, -j 4,
--jobs=4, --jobs 4), bundled flags (-vj4), unambiguous long-option prefixes
(--jo=4), arguments anywhere (GNU permutation) and ``--``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from pgparmon.redact import redact_argv, redact_text

CLIENTS = ("pg_dump", "pg_restore", "psql", "pg_basebackup")
_INTERPRETERS = ("perl", "python", "python3", "sh", "bash", "env")


@dataclass
class ClientArgs:
    """Parsed client command line.  None / empty means "not given on the
    command line" (e.g. pg_dump's default format is plain, but format is None
    unless -F was given)."""

    program: str                       # pg_dump | pg_restore | psql | basename of argv[0] | ""
    jobs: int | None = None
    format: str | None = None          # directory | custom | tar | plain
    file: str | None = None            # pg_dump -f target; pg_restore archive; psql -f script
    output: str | None = None          # pg_restore -f; psql -o
    dbname: str | None = None          # plain name, also when given as conninfo / URI
    host: str | None = None
    port: int | None = None
    user: str | None = None
    compression: str | None = None     # -Z value as given: "9", "gzip:9", "lz4", "zstd:3"
    list_only: bool = False            # pg_restore -l
    sections: tuple[str, ...] = ()     # --section values, in order
    data_only: bool = False
    schema_only: bool = False
    verbose: bool = False
    commands: tuple[str, ...] = ()     # psql -c, redacted
    positional: tuple[str, ...] = ()   # redacted
    unknown_options: tuple[str, ...] = ()  # redacted
    redacted_argv: list[str] = field(default_factory=list)
    # pg_basebackup: -D is `file` ("-": to standard output), -F `format`
    # (plain | tar), -Z/-z `compression`
    max_rate: int | None = None        # -r, in bytes per second
    wal_method: str | None = None      # -X: fetch | stream | none
    checkpoint: str | None = None      # -c: fast | spread
    no_estimate: bool = False          # --no-estimate-size: no total on the server


# Options: name -> (key, takes_argument).  Short names are one letter.
_Opts = dict[str, tuple[str, bool]]

_CONN: _Opts = {
    "d": ("dbname", True), "h": ("host", True), "p": ("port", True), "U": ("user", True),
    "w": ("no-password", False), "W": ("password-prompt", False), "?": ("help", False),
    "V": ("version", False), "v": ("verbose", False),
    "dbname": ("dbname", True), "host": ("host", True), "port": ("port", True),
    "username": ("user", True), "no-password": ("no-password", False),
    "password": ("password-prompt", False), "help": ("help", False),
    "version": ("version", False), "verbose": ("verbose", False), "role": ("role", True),
}


def _flags(*names: str) -> _Opts:
    return {n: (n, False) for n in names}


def _args(*names: str) -> _Opts:
    return {n: (n, True) for n in names}


_DUMP_RESTORE_COMMON: _Opts = {
    **_CONN, "f": ("file", True), "F": ("format", True), "j": ("jobs", True),
    "n": ("schema", True), "N": ("exclude-schema", True), "S": ("superuser", True),
    "t": ("table", True), "a": ("data-only", False), "s": ("schema-only", False),
    "c": ("clean", False), "C": ("create", False), "O": ("no-owner", False),
    "x": ("no-privileges", False), "R": ("no-reconnect", False),
    "file": ("file", True), "format": ("format", True), "jobs": ("jobs", True),
    "section": ("section", True), "filter": ("filter", True),
    **_args("schema", "exclude-schema", "superuser", "table", "restrict-key"),
    **_flags("data-only", "schema-only", "clean", "create", "no-owner", "no-privileges",
             "no-acl", "no-reconnect", "disable-triggers", "enable-row-security", "if-exists",
             "no-comments", "no-publications", "no-security-labels", "no-subscriptions",
             "no-table-access-method", "no-tablespaces", "strict-names",
             "use-set-session-authorization", "no-data", "no-schema", "no-statistics",
             "statistics-only", "no-policies"),
}

_PG_DUMP: _Opts = {
    **_DUMP_RESTORE_COMMON, "Z": ("compress", True), "E": ("encoding", True),
    "e": ("extension", True), "T": ("exclude-table", True), "b": ("blobs", False),
    "B": ("no-blobs", False),
    **_args("compress", "encoding", "extension", "exclude-table", "exclude-table-data",
            "exclude-extension", "lock-wait-timeout", "snapshot", "rows-per-insert",
            "include-foreign-data", "extra-float-digits", "exclude-table-and-children",
            "exclude-table-data-and-children", "table-and-children", "sync-method"),
    **_flags("blobs", "large-objects", "no-blobs", "no-large-objects", "binary-upgrade",
             "column-inserts", "attribute-inserts", "disable-dollar-quoting", "inserts",
             "load-via-partition-root", "no-toast-compression", "no-unlogged-table-data",
             "on-conflict-do-nothing", "quote-all-identifiers", "serializable-deferrable",
             "no-sync", "no-synchronized-snapshots", "with-data", "with-schema",
             "with-statistics", "sequence-data"),
}

_PG_RESTORE: _Opts = {
    **_DUMP_RESTORE_COMMON, "l": ("list", False), "L": ("use-list", True),
    "I": ("index", True), "P": ("function", True), "T": ("trigger", True),
    "e": ("exit-on-error", False), "1": ("single-transaction", False),
    **_args("use-list", "index", "function", "trigger", "transaction-size",
            "exclude-database"),
    **_flags("list", "exit-on-error", "single-transaction", "no-data-for-failed-tables",
             "globals-only"),
}

_PSQL: _Opts = {
    **_CONN, "c": ("command", True), "f": ("file", True), "o": ("output", True),
    "v": ("variable", True), "F": ("field-separator", True), "R": ("record-separator", True),
    "P": ("pset", True), "T": ("table-attr", True), "L": ("log-file", True),
    "command": ("command", True), "file": ("file", True), "output": ("output", True),
    "set": ("variable", True), "variable": ("variable", True),
    **_args("field-separator", "record-separator", "pset", "table-attr", "log-file"),
    **_flags("echo-all", "no-align", "echo-errors", "echo-queries", "echo-hidden", "html",
             "list", "no-readline", "quiet", "single-step", "single-line", "tuples-only",
             "expanded", "no-psqlrc", "field-separator-zero", "record-separator-zero",
             "single-transaction", "csv"),
    **{c: (c, False) for c in "aAbeEHlnqsStxXz01"},
}

_PG_BASEBACKUP: _Opts = {
    **_CONN, "D": ("file", True), "F": ("format", True), "r": ("max-rate", True),
    "R": ("write-recovery-conf", False), "T": ("tablespace-mapping", True),
    "X": ("wal-method", True), "z": ("gzip", False), "Z": ("compress", True),
    "c": ("checkpoint", True), "C": ("create-slot", False), "l": ("label", True),
    "n": ("no-clean", False), "N": ("no-sync", False), "P": ("progress", False),
    "S": ("slot", True), "s": ("status-interval", True), "t": ("target", True),
    "i": ("incremental", True),
    "pgdata": ("file", True), "format": ("format", True), "max-rate": ("max-rate", True),
    "wal-method": ("wal-method", True), "compress": ("compress", True),
    "checkpoint": ("checkpoint", True), "gzip": ("gzip", False),
    **_args("tablespace-mapping", "waldir", "label", "slot", "status-interval", "target",
            "incremental", "manifest-checksums", "sync-method"),
    **_flags("write-recovery-conf", "create-slot", "no-clean", "no-sync", "progress",
             "no-estimate-size", "no-manifest", "no-slot", "no-verify-checksums",
             "manifest-force-encode"),
}

_SPECS: dict[str, _Opts] = {"pg_dump": _PG_DUMP, "pg_restore": _PG_RESTORE, "psql": _PSQL,
                            "pg_basebackup": _PG_BASEBACKUP}


# ------------------------------------------------------------- tokenizer


@dataclass
class _Parsed:
    options: list[tuple[str, str | None]] = field(default_factory=list)
    positional: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def _long_option(name: str, spec: _Opts) -> tuple[str, bool] | None:
    """Exact long name, else a unique prefix (getopt_long accepts those)."""
    if len(name) > 1 and name in spec:
        return spec[name]
    hits = {spec[n] for n in spec if len(n) > 1 and n.startswith(name)}
    return hits.pop() if len(hits) == 1 else None


def _take_long(argv: list[str], i: int, spec: _Opts, out: _Parsed) -> int:
    name, eq, value = argv[i][2:].partition("=")
    opt = _long_option(name, spec) if name else None
    if opt is None:
        out.unknown.append(argv[i])
        return i + 1
    key, takes = opt
    if not takes:
        out.options.append((key, None))
        return i + 1
    if eq:
        out.options.append((key, value))
        return i + 1
    out.options.append((key, argv[i + 1] if i + 1 < len(argv) else None))
    return i + 2


def _take_short(argv: list[str], i: int, spec: _Opts, out: _Parsed) -> int:
    arg = argv[i]
    for pos in range(1, len(arg)):
        letter = arg[pos]
        opt = spec.get(letter)
        if opt is None:
            out.unknown.append("-" + letter)
            continue
        key, takes = opt
        if not takes:
            out.options.append((key, None))
            continue
        if pos + 1 < len(arg):
            out.options.append((key, arg[pos + 1:]))
            return i + 1
        out.options.append((key, argv[i + 1] if i + 1 < len(argv) else None))
        return i + 2
    return i + 1


def _tokenize(argv: list[str], spec: _Opts) -> _Parsed:
    out = _Parsed()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            out.positional.extend(argv[i + 1:])
            break
        if arg.startswith("--"):
            i = _take_long(argv, i, spec, out)
        elif arg.startswith("-") and arg != "-":
            i = _take_short(argv, i, spec, out)
        else:
            out.positional.append(arg)
            i += 1
    return out


# ------------------------------------------------------------ semantics


def _program(argv: list[str]) -> tuple[str, list[str]]:
    """(program, its arguments); looks through `perl /usr/bin/pg_dump ...`
    (Debian's pg_wrapper) and similar interpreter launches."""
    if not argv:
        return "", []
    name = _basename(argv[0])
    if name.startswith(_INTERPRETERS) and len(argv) > 1 and _basename(argv[1]) in CLIENTS:
        return _basename(argv[1]), argv[2:]
    return name, argv[1:]


def _basename(path: str) -> str:
    name = os.path.basename(path.replace("\\", "/"))
    return name[:-4] if name.lower().endswith(".exe") else name


_DUMP_FORMATS = {"c": "custom", "custom": "custom", "d": "directory", "directory": "directory",
                 "t": "tar", "tar": "tar", "p": "plain", "plain": "plain", "a": "plain",
                 "append": "plain"}
_RESTORE_FORMATS = {"c": "custom", "d": "directory", "t": "tar"}
_BASEBACKUP_FORMATS = {"p": "plain", "plain": "plain", "t": "tar", "tar": "tar"}
_WAL_METHODS = {"n": "none", "none": "none", "f": "fetch", "fetch": "fetch",
                "s": "stream", "stream": "stream"}


def _format(program: str, value: str | None) -> str | None:
    if not value:
        return None
    if program == "pg_basebackup":
        return _BASEBACKUP_FORMATS.get(value.lower())
    if program == "pg_restore":  # pg_restore looks at the first letter only
        return _RESTORE_FORMATS.get(value[0].lower())
    return _DUMP_FORMATS.get(value.lower())


def _positive_int(value: str | None, upper: int = 1 << 31) -> int | None:
    try:
        n = int(value.strip()) if value is not None else 0
    except ValueError:
        return None
    return n if 0 < n <= upper else None


def _is_conninfo(value: str) -> bool:
    # libpq's rule (recognized_connection_string): a URI prefix or any '='
    return value.startswith(("postgresql://", "postgres://")) or "=" in value


def _conninfo_fields(value: str) -> dict[str, str]:
    """dbname/host/port/user of a conninfo string or URI; never the password."""
    try:
        parsed: dict[str, Any] = conninfo_to_dict(value)
    except Exception:  # any libpq parse failure, NUL bytes, bad encodings
        return {}
    keep = ("dbname", "host", "port", "user")
    return {k: str(parsed[k]) for k in keep if parsed.get(k) not in (None, "")}


def _apply_dbname(res: ClientArgs, value: str | None) -> None:
    if value is None:
        return
    if not _is_conninfo(value):
        res.dbname = value
        return
    fields = _conninfo_fields(value)
    res.dbname = fields.get("dbname")
    # dbname is expanded after -h/-p/-U, so its fields win (libpq keyword order)
    res.host = fields.get("host", res.host)
    res.user = fields.get("user", res.user)
    if "port" in fields:
        res.port = _positive_int(fields["port"], 65535)


def _apply_option(res: ClientArgs, key: str, value: str | None) -> str | None:
    """Set the field an option maps to; returns a dbname value to expand last."""
    if key == "jobs":
        res.jobs = _positive_int(value)
    elif key == "format":
        res.format = _format(res.program, value)
    elif key in ("file", "output"):
        setattr(res, _file_field(res.program, key), value)
    elif key == "host":
        res.host = value
    elif key == "port":
        res.port = _positive_int(value, 65535)
    elif key == "user":
        res.user = value
    elif key == "compress":
        res.compression = value
    elif key == "gzip":
        res.compression = res.compression or "gzip"
    elif key == "max-rate":
        res.max_rate = max_rate_bytes(value)
    elif key == "wal-method" and value:
        res.wal_method = _WAL_METHODS.get(value.lower(), value)
    elif key == "checkpoint" and value:
        res.checkpoint = value.lower()
    elif key == "no-estimate-size":
        res.no_estimate = True
    elif key == "section" and value is not None:
        res.sections += (value,)
    elif key == "command" and value is not None:
        res.commands += (redact_text(value),)
    elif key in ("list", "data-only", "schema-only", "verbose"):
        _apply_flag(res, key)
    return value if key == "dbname" else None


def command_word(argv: list[str] | tuple[str, ...], is_option: Callable[[str], bool],
                 takes_value: Callable[[str], bool]) -> str | None:
    """A tool's command word (pgBackRest's `backup`, pg_probackup's
    `restore`...): the first argument after the program that is neither an
    option nor the value of an option that takes one as the next argument."""
    skip = False
    for a in list(argv)[1:]:
        if skip:
            skip = False
            continue
        if is_option(a):
            skip = takes_value(a)
            continue
        return a
    return None


def max_rate_bytes(value: str | None) -> int | None:
    """pg_basebackup -r: kilobytes per second, or with a k / M suffix
    (32 kB/s to 1 GB/s); None when it does not parse."""
    if not value:
        return None
    v = value.strip()
    mult = 1024
    if v[-1:] in ("k", "K"):
        v = v[:-1]
    elif v[-1:] == "M":
        v, mult = v[:-1], 1024 * 1024
    try:
        n = float(v)
    except ValueError:
        return None
    return int(n * mult) if n > 0 else None


def _apply_flag(res: ClientArgs, key: str) -> None:
    if key == "list":
        res.list_only = res.program == "pg_restore"
    elif key == "data-only":
        res.data_only = True
    elif key == "schema-only":
        res.schema_only = True
    elif key == "verbose":
        res.verbose = True


def _file_field(program: str, key: str) -> str:
    # pg_restore's -f is where the SQL goes; its input archive is positional
    return "output" if program == "pg_restore" and key == "file" else key


def _apply_positional(res: ClientArgs, pos: list[str], dbname: str | None) -> str | None:
    if res.program == "pg_dump" and pos:
        return pos[0]  # pg_dump: the positional dbname overrides -d
    if res.program == "pg_restore" and pos:
        res.file = pos[0]
    if res.program == "psql":
        if len(pos) > 1 and res.user is None:
            res.user = pos[1]
        if pos and dbname is None:
            return pos[0]
    return dbname


def parse_client_cmdline(argv: list[str]) -> ClientArgs:
    """Parse a pg_dump / pg_restore / psql command line (argv[0] included).
    Never raises; other programs get only program, positional, unknown
    options and redacted_argv."""
    try:
        return _parse(list(argv))
    except Exception:  # belt and braces: a monitor must not die on odd argv
        return ClientArgs(program="", redacted_argv=_safe_redact(argv))


def _safe_redact(argv: Any) -> list[str]:
    try:
        return redact_argv(str(a) for a in argv)
    except Exception:
        return []


def _parse(argv: list[str]) -> ClientArgs:
    program, args = _program(argv)
    res = ClientArgs(program=program, redacted_argv=redact_argv(argv))
    parsed = _tokenize(args, _SPECS.get(program, {}))
    dbname: str | None = None
    for key, value in parsed.options:
        dbname = _apply_option(res, key, value) or dbname
    dbname = _apply_positional(res, parsed.positional, dbname)
    _apply_dbname(res, dbname)
    res.positional = tuple(redact_argv(parsed.positional))
    res.unknown_options = tuple(redact_argv(parsed.unknown))
    _redact_fields(res)
    return res


def _redact_fields(res: ClientArgs) -> None:
    """A misplaced URI or conninfo (pg_restore's archive argument, -h, -f)
    must not carry a password into any field; plain paths and names are
    left unchanged by redact_text."""
    for name in ("file", "output", "dbname", "host", "user", "compression"):
        value = getattr(res, name)
        if value is not None:
            setattr(res, name, redact_text(value))
    res.sections = tuple(redact_text(v) for v in res.sections)
