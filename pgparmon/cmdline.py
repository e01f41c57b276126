"""What a client process (pg_dump, pg_restore, psql...) was asked to do, from its argv.

The monitor reads command lines of processes it did not start (psutil), so
the parser must accept anything: it never raises, keeps what it does not
understand, and never keeps a password (see redact.py).  Each program's
options come from the driver that follows it (a ClientSpec); this module
holds the getopt rules and libpq's connection options.  Option handling
follows the clients' getopt_long: attached or separate values (-j4, -j 4,
--jobs=4, --jobs 4), bundled flags (-vj4), unambiguous long-option prefixes
(--jo=4), arguments anywhere (GNU permutation) and ``--``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from collections.abc import Callable, Mapping
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from pgparmon.redact import redact_argv, redact_text

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
    # every option the program's spec knows, as given and in order: (key,
    # value or None), values redacted. What no field above holds (vacuumdb's
    # -t, -z, --analyze-in-stages) its driver reads here
    options: tuple[tuple[str, str | None], ...] = ()


# Options: name -> (key, takes_argument).  Short names are one letter.
Opts = dict[str, tuple[str, bool]]

# libpq's connection options, which every PostgreSQL client takes
CONN: Opts = {
    "d": ("dbname", True), "h": ("host", True), "p": ("port", True), "U": ("user", True),
    "w": ("no-password", False), "W": ("password-prompt", False), "?": ("help", False),
    "V": ("version", False), "v": ("verbose", False),
    "dbname": ("dbname", True), "host": ("host", True), "port": ("port", True),
    "username": ("user", True), "no-password": ("no-password", False),
    "password": ("password-prompt", False), "help": ("help", False),
    "version": ("version", False), "verbose": ("verbose", False), "role": ("role", True),
}


def flags(*names: str) -> Opts:
    """Long options that take no value, each its own key."""
    return {n: (n, False) for n in names}


def args(*names: str) -> Opts:
    """Long options that take a value, each its own key."""
    return {n: (n, True) for n in names}


Positional = Callable[[ClientArgs, list[str], "str | None"], "str | None"]


@dataclass(frozen=True)
class ClientSpec:
    """What one client program's command line means: its options, how some
    option values read (a format's letters), which field an option fills
    where it is not the option's own (pg_restore's -f is its output), and
    what its positional arguments are.  The drivers declare these for the
    programs they follow (Driver.client_specs); this module knows none."""

    options: Opts
    values: Mapping[str, Callable[[str], str | None]] = field(default_factory=dict)
    fields: Mapping[str, str] = field(default_factory=dict)
    lists: bool = False  # its --list only lists (no server work)
    positional: Positional | None = None


def choices(table: Mapping[str, str], first_letter: bool = False,
            keep_unknown: bool = False) -> Callable[[str], str | None]:
    """A value read through a table, case-insensitively (by its first letter
    where the program looks at no more); an unknown value is None unless kept."""
    def read(value: str) -> str | None:
        key = value[:1].lower() if first_letter else value.lower()
        return table.get(key, value if keep_unknown else None)
    return read


# ------------------------------------------------------------- tokenizer


@dataclass
class _Parsed:
    options: list[tuple[str, str | None]] = field(default_factory=list)
    positional: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def _long_option(name: str, spec: Opts) -> tuple[str, bool] | None:
    """Exact long name, else a unique prefix (getopt_long accepts those)."""
    if len(name) > 1 and name in spec:
        return spec[name]
    hits = {spec[n] for n in spec if len(n) > 1 and n.startswith(name)}
    return hits.pop() if len(hits) == 1 else None


def _take_long(argv: list[str], i: int, spec: Opts, out: _Parsed) -> int:
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


def _take_short(argv: list[str], i: int, spec: Opts, out: _Parsed) -> int:
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


def _tokenize(argv: list[str], spec: Opts) -> _Parsed:
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


def _program(argv: list[str], known: Mapping[str, ClientSpec]) -> tuple[str, list[str]]:
    """(program, its arguments); looks through `perl /usr/bin/pg_dump ...`
    (Debian's pg_wrapper) and similar interpreter launches."""
    if not argv:
        return "", []
    name = _basename(argv[0])
    if name.startswith(_INTERPRETERS) and len(argv) > 1 and _basename(argv[1]) in known:
        return _basename(argv[1]), argv[2:]
    return name, argv[1:]


def _basename(path: str) -> str:
    name = os.path.basename(path.replace("\\", "/"))
    return name[:-4] if name.lower().endswith(".exe") else name


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


def _apply_option(res: ClientArgs, spec: ClientSpec, key: str,
                  value: str | None) -> str | None:
    """Set the field an option maps to; returns a dbname value to expand last."""
    read = spec.values.get(key)
    if read is not None and value:
        value = read(value)
    if key == "jobs":
        res.jobs = _positive_int(value)
    elif key == "format":
        res.format = value or None
    elif key in ("file", "output"):
        setattr(res, spec.fields.get(key, key), value)
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
        res.wal_method = value
    elif key == "checkpoint" and value:
        res.checkpoint = value.lower()
    elif key == "no-estimate-size":
        res.no_estimate = True
    elif key == "section" and value is not None:
        res.sections += (value,)
    elif key == "command" and value is not None:
        res.commands += (redact_text(value),)
    elif key in ("list", "data-only", "schema-only", "verbose"):
        _apply_flag(res, spec, key)
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


def _apply_flag(res: ClientArgs, spec: ClientSpec, key: str) -> None:
    if key == "list":
        res.list_only = spec.lists
    elif key == "data-only":
        res.data_only = True
    elif key == "schema-only":
        res.schema_only = True
    elif key == "verbose":
        res.verbose = True


def parse_client_cmdline(argv: list[str] | tuple[str, ...], specs: Mapping[str, ClientSpec]) -> ClientArgs:
    """Parse a client's command line (argv[0] included) by its program's
    spec.  Never raises; a program without one gets only program,
    positional, unknown options and redacted_argv."""
    try:
        return _parse(list(argv), specs)
    except Exception:  # belt and braces: a monitor must not die on odd argv
        return ClientArgs(program="", redacted_argv=_safe_redact(argv))


def _safe_redact(argv: Any) -> list[str]:
    try:
        return redact_argv(str(a) for a in argv)
    except Exception:
        return []


_NO_SPEC = ClientSpec(options={})


def _parse(argv: list[str], specs: Mapping[str, ClientSpec]) -> ClientArgs:
    program, rest = _program(argv, specs)
    spec = specs.get(program, _NO_SPEC)
    res = ClientArgs(program=program, redacted_argv=redact_argv(argv))
    parsed = _tokenize(rest, spec.options)
    dbname: str | None = None
    for key, value in parsed.options:
        dbname = _apply_option(res, spec, key, value) or dbname
    if spec.positional is not None:
        dbname = spec.positional(res, parsed.positional, dbname)
    _apply_dbname(res, dbname)
    res.options = tuple((k, redact_text(v) if v is not None else None) for k, v in parsed.options)
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
