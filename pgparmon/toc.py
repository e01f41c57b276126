"""The table of contents of a pg_dump archive.

Sources, all read without touching the data:

* ``pg_restore -l ARCHIVE``: one line per TOC item, ``3349; 0 16385 TABLE DATA
  public big postgres`` (dump id; catalog oid, object oid; desc, schema, tag,
  owner).  Names are printed raw (no quoting, newlines turned into spaces), so
  a schema, tag or owner with a space in it makes the line ambiguous: we
  split using the known desc list, the schema names that the listing itself
  declares (``SCHEMA - my schema postgres``) and optional caller-supplied
  schema and owner names.
* The files of a directory-format archive (``NNNN.dat[.gz|.lz4|.zst]``).

Also here: finding and running pg_restore (and the other client programs of
its release).  The archive's SQL (``pg_restore -f -``: post-data targets,
CREATE TABLE / CREATE INDEX text) is read by `pgparmon.ddl`.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

# ---------------------------------------------------------------- errors


class TocError(ValueError):
    """Text or file that is not a pg_dump archive / listing.  The message is
    one line, fit to show to a user."""


def _one_line(s: str, limit: int = 200) -> str:
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


# ------------------------------------------------------------ data model

# Every desc pg_dump 9.x..18 writes.  Matched longest first, because several
# are prefixes of others (TABLE / TABLE DATA / TABLE ATTACH, ...).
KNOWN_DESCS: tuple[str, ...] = tuple(sorted({
    "ACCESS METHOD", "ACL", "AGGREGATE", "BLOB", "BLOB METADATA", "BLOBS", "CAST",
    "CHECK CONSTRAINT", "COLLATION", "COMMENT", "CONSTRAINT", "CONVERSION", "DATABASE",
    "DATABASE PROPERTIES", "DEFAULT", "DEFAULT ACL", "DOMAIN", "ENCODING", "EVENT TRIGGER",
    "EXTENSION", "FK CONSTRAINT", "FOREIGN DATA WRAPPER", "FOREIGN SERVER", "FOREIGN TABLE",
    "FUNCTION", "INDEX", "INDEX ATTACH", "LARGE OBJECT", "LARGE OBJECTS", "MATERIALIZED VIEW",
    "MATERIALIZED VIEW DATA", "OPERATOR", "OPERATOR CLASS", "OPERATOR FAMILY", "POLICY",
    "PROCEDURAL LANGUAGE", "PROCEDURE", "PUBLICATION", "PUBLICATION TABLE",
    "PUBLICATION TABLES IN SCHEMA", "ROW SECURITY", "RULE", "SCHEMA", "SEARCHPATH",
    "SECURITY LABEL", "SEQUENCE", "SEQUENCE OWNED BY", "SEQUENCE SET", "SERVER", "SHELL TYPE",
    "STATISTICS", "STATISTICS DATA", "STDSTRINGS", "SUBSCRIPTION", "SUBSCRIPTION TABLE",
    "TABLE", "TABLE ATTACH", "TABLE DATA", "TEXT SEARCH CONFIGURATION",
    "TEXT SEARCH DICTIONARY", "TEXT SEARCH PARSER", "TEXT SEARCH TEMPLATE", "TRANSFORM",
    "TRIGGER", "TYPE", "USER MAPPING", "VIEW",
}, key=lambda d: (-len(d), d)))

# Catalog (tableoid) each desc is written with, where fixed.  Used to settle
# "TABLE DATA x ..." (data, catalog 0) against a TABLE in a schema named DATA
# (catalog 1259 = pg_class).
_DESC_CATALOG: dict[str, int] = {
    "TABLE": 1259, "VIEW": 1259, "SEQUENCE": 1259, "INDEX": 1259, "FOREIGN TABLE": 1259,
    "MATERIALIZED VIEW": 1259, "TABLE DATA": 0, "MATERIALIZED VIEW DATA": 0,
    "SEQUENCE SET": 0, "SEQUENCE OWNED BY": 0, "INDEX ATTACH": 0, "TABLE ATTACH": 0,
    "BLOBS": 0, "DEFAULT": 2604, "DEFAULT ACL": 826, "PUBLICATION": 6104,
    "PUBLICATION TABLE": 6106, "PUBLICATION TABLES IN SCHEMA": 6237, "OPERATOR": 2617,
    "OPERATOR CLASS": 2616, "OPERATOR FAMILY": 2753, "STATISTICS": 3381, "BLOB": 2613,
}

# the known descs by their first word, longest first as above: a line's desc
# is looked for among those of its first word alone (a TOC of a million
# large objects is a million lines: every desc tried on each took 25 us a
# line, 2.5 s the 100,000)
_DESCS_BY_WORD: dict[str, tuple[str, ...]] = {}
for _d in KNOWN_DESCS:
    _w = _d.split(" ", 1)[0]
    _DESCS_BY_WORD[_w] = _DESCS_BY_WORD.get(_w, ()) + (_d,)
del _d, _w

# Items whose restore copies data out of the archive.  MATERIALIZED VIEW DATA
# is a REFRESH (a query run on the server) and SEQUENCE SET a setval(): both
# are cheap or unrelated to archive bytes, so they do not count.
DATA_DESCS: frozenset[str] = frozenset({"TABLE DATA", "BLOBS", "LARGE OBJECTS"})
# Items whose tag names a relation in their schema.
_RELATION_DESCS = frozenset({"TABLE", "TABLE DATA", "FOREIGN TABLE", "MATERIALIZED VIEW",
                             "MATERIALIZED VIEW DATA"})


def qualify(schema: str | None, name: str) -> str:
    """"schema.name" with raw (unquoted) names, the form shared by
    TocItem.relation and ddl.PostDataTarget.table / references."""
    return f"{schema}.{name}" if schema else name


@dataclass(frozen=True, slots=True)
class TocItem:
    dump_id: int
    catalog_oid: int
    oid: int
    desc: str
    schema: str | None
    tag: str
    owner: str | None

    @property
    def relation(self) -> str | None:
        """"schema.table" for TABLE / TABLE DATA (and foreign tables and
        materialized views), else None."""
        return qualify(self.schema, self.tag) if self.desc in _RELATION_DESCS else None

    @property
    def is_data(self) -> bool:
        """True for items that move archive data: TABLE DATA, BLOBS and
        LARGE OBJECTS (see DATA_DESCS for why not MATERIALIZED VIEW DATA)."""
        return self.desc in DATA_DESCS


@dataclass(frozen=True)
class TocHeader:
    dbname: str | None = None
    format: str | None = None          # "directory" | "custom" | "tar" (lower-cased)
    compression: str | None = None     # as printed: "-1", "0", "9" (<=15) or "gzip", "lz4"...
    dumped_from: str | None = None     # server version string
    dumped_by: str | None = None       # pg_dump version string
    toc_entries: int | None = None     # entries in the archive (not only those listed)
    created_at: str | None = None
    archive_version: str | None = None  # "Dump Version: 1.14-0"
    malformed_lines: int = 0           # item lines skipped because they did not parse


# --------------------------------------------------------------- listing

_ITEM_RE = re.compile(r"^\s*(\d+);\s*(\d+)\s+(\d+)\s(.*)$")
_HEADER_RE = re.compile(r"^;\s+([A-Za-z][\w ]*?):\s?(.*)$")
_CREATED_RE = re.compile(r"^;\s*Archive created at (.*)$")
_UPPER_WORD_RE = re.compile(r"^[A-Z]+$")
_HEADER_KEYS = {
    "dbname": "dbname", "TOC Entries": "toc_entries", "Compression": "compression",
    "Dump Version": "archive_version", "Format": "format",
    "Dumped from database version": "dumped_from", "Dumped by pg_dump version": "dumped_by",
}


def _split_desc(rest: str, catalog: int) -> tuple[str, str] | None:
    """(desc, remainder) using the known descs, the catalog oid to settle
    prefixes, and upper-case words for descs newer than this list."""
    fallback: tuple[str, str] | None = None
    for desc in _DESCS_BY_WORD.get(rest.split(" ", 1)[0], ()):
        if rest.startswith(desc + " "):
            cand = (desc, rest[len(desc) + 1:])
            expected = _DESC_CATALOG.get(desc)
            if expected is None or expected == catalog:
                return cand
            fallback = fallback or cand
    if fallback:
        return fallback
    words = rest.split(" ")
    n = 0
    while n < len(words) - 2 and _UPPER_WORD_RE.match(words[n]):
        n += 1
    return (" ".join(words[:n]), " ".join(words[n:])) if n else None


def _split_owner(rest: str, owners: Iterable[str]) -> tuple[str, str | None] | None:
    for owner in owners:
        if rest.endswith(" " + owner):
            return rest[: -len(owner) - 1], owner
    if " " not in rest:
        return None
    body, _, owner = rest.rpartition(" ")
    return body, (owner or None)  # "BLOBS - BLOBS " has an empty owner


def _split_schema(body: str, schemas: Iterable[str]) -> tuple[str | None, str] | None:
    if body.startswith("- "):
        return None, body[2:]
    for schema in schemas:
        if body.startswith(schema + " "):
            return schema, body[len(schema) + 1:]
    schema, sep, tag = body.partition(" ")
    return (schema, tag) if sep else None


def _by_length(names: Iterable[str]) -> list[str]:
    return sorted({n for n in names if n}, key=len, reverse=True)


def _parse_item(line: str, schemas: list[str], owners: list[str]) -> TocItem | None:
    m = _ITEM_RE.match(line)
    if not m:
        return None
    catalog = int(m.group(2))
    split = _split_desc(m.group(4), catalog)
    if not split:
        return None
    desc, rest = split
    own = _split_owner(rest, owners)
    sch = own and _split_schema(own[0], schemas)
    if not own or not sch:
        return None
    # schema and owner names repeat on every line: one string each (a plan
    # of 100,000 entries keeps its items)
    schema = sys.intern(sch[0]) if sch[0] is not None else None
    owner = sys.intern(own[1]) if own[1] is not None else None
    return TocItem(int(m.group(1)), catalog, int(m.group(3)), sys.intern(desc), schema, sch[1],
                   owner)


def _declared_schemas(lines: list[str], owners: list[str]) -> list[str]:
    """Names of the SCHEMA items: they settle schema names with spaces."""
    found: list[str] = []
    for line in lines:
        m = _ITEM_RE.match(line)
        if m and m.group(4).startswith("SCHEMA - "):
            own = _split_owner(m.group(4)[len("SCHEMA - "):], owners)
            if own:
                found.append(own[0])
    return found


def _header_fields(lines: list[str]) -> tuple[dict[str, str], bool]:
    """Raw header values by TocHeader field name, and whether any header
    line was seen at all."""
    fields: dict[str, str] = {}
    seen = False
    for line in lines:
        if m := _CREATED_RE.match(line):
            fields["created_at"], seen = m.group(1).strip(), True
        elif line.startswith(";") and (m := _HEADER_RE.match(line)):
            key = _HEADER_KEYS.get(m.group(1).strip())
            if key:
                fields[key], seen = m.group(2).strip(), True
        elif line.startswith("; Selected TOC Entries"):
            seen = True
    return fields, seen


def _make_header(raw: dict[str, str], malformed: int) -> TocHeader:
    fmt = raw.get("format")
    return TocHeader(
        dbname=raw.get("dbname"), format=fmt.lower() if fmt else None,
        compression=raw.get("compression"), dumped_from=raw.get("dumped_from"),
        dumped_by=raw.get("dumped_by"), toc_entries=_int_or_none(raw.get("toc_entries")),
        created_at=raw.get("created_at"), archive_version=raw.get("archive_version"),
        malformed_lines=malformed)


def _int_or_none(s: str | None) -> int | None:
    try:
        return int(s) if s is not None else None
    except ValueError:
        return None


def _check_is_text(text: str) -> list[str]:
    if "\x00" in text:
        raise TocError("not a pg_restore -l listing: binary data")
    # split on \n only: str.splitlines() would also break names that contain
    # \f, \x1c or U+2028 (pg_dump only turns \n and \r into spaces)
    lines = [ln.rstrip("\r") for ln in text.split("\n")]
    first = next((ln for ln in lines if ln.strip()), None)
    if first is None:
        raise TocError("not a pg_restore -l listing: empty text")
    if first.lstrip().startswith(("pg_restore:", "pg_dump:")):
        raise TocError(f"not a pg_restore -l listing: {_clean_tool_message(first)}")
    return lines


def _kind_marks(descs: Collection[str] | None) -> tuple[str, ...] | None:
    """What a listing line of one of these kinds holds (" TABLE DATA "):
    the cheap test run before a line is parsed."""
    return None if descs is None else tuple(f" {d} " for d in descs)


def parse_archive_listing(text: str, *, schemas: Iterable[str] = (),
                          owners: Iterable[str] = (), descs: Collection[str] | None = None
                          ) -> tuple[TocHeader, list[TocItem]]:
    """Parse ``pg_restore -l`` output into its header and items.

    schemas / owners: names known to exist (from the database), used to split
    lines whose names contain spaces.  Malformed item lines are skipped and
    counted in TocHeader.malformed_lines.  Raises TocError for text that is
    not a listing at all."""
    lines = _check_is_text(text)
    owner_list = _by_length(owners)
    schema_list = _by_length([*schemas, *_declared_schemas(lines, owner_list)])
    items: list[TocItem] = []
    bad = 0
    wanted = _kind_marks(descs)
    for line in lines:
        if not line.strip() or line.lstrip().startswith(";"):
            continue
        if wanted is not None and not any(w in line for w in wanted):
            continue  # not a kind asked for (checked again once parsed)
        item = _parse_item(line, schema_list, owner_list)
        if item is None:
            bad += 1
        elif descs is None or item.desc in descs:
            items.append(item)
    raw, has_header = _header_fields(lines)
    if not has_header and bad >= len(items):
        first = next(ln for ln in lines if ln.strip())
        raise TocError(f"not a pg_restore -l listing: {_one_line(first, 80)!r}")
    return _make_header(raw, bad), items


def parse_listing(text: str, *, schemas: Iterable[str] = (),
                  owners: Iterable[str] = ()) -> list[TocItem]:
    """The items of a ``pg_restore -l`` listing (see parse_archive_listing)."""
    return parse_archive_listing(text, schemas=schemas, owners=owners)[1]


# ------------------------------------------------------------ pg_restore


def _version_key(path: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in Path(path).parent.parent.name.split("."))
    except ValueError:
        return (0,)


def find_pg_restore(preferred: str | None = None) -> str:
    """pg_restore to run: the one given, $PGPARMON_PGBIN, PATH, else the
    newest /usr/lib/postgresql/*/bin (a newer pg_restore reads older
    archives, not the other way round)."""
    if preferred:
        return preferred
    pgbin = os.environ.get("PGPARMON_PGBIN")
    if pgbin and os.access(os.path.join(pgbin, "pg_restore"), os.X_OK):
        return os.path.join(pgbin, "pg_restore")
    on_path = shutil.which("pg_restore")
    if on_path:
        return on_path
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_restore"), key=_version_key)
    if found:
        return found[-1]
    raise TocError("pg_restore not found: install the PostgreSQL client programs or put "
                   "their bin directory on PATH")


def client_program(name: str) -> str | None:
    """Another client program (psql, pg_dump) of the same release as the
    pg_restore we use, else the one on PATH, else None."""
    try:
        cand = os.path.join(os.path.dirname(find_pg_restore()), name)
    except TocError:
        cand = ""
    if cand and os.access(cand, os.X_OK):
        return cand
    return shutil.which(name)


def program_major(path: str) -> int | None:
    """The major version a client program reports with --version."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10,
                             stdin=subprocess.DEVNULL, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d+)(?:\.\d+)?", out)
    return int(m.group(1)) if m else None


def _client_env() -> dict[str, str]:
    # -l and --section=post-data -f - never connect: no password is needed,
    # and the C locale keeps messages and headers in English for parsing.
    env = {k: v for k, v in os.environ.items() if "PASSWORD" not in k.upper()}
    env.update(LC_ALL="C", LANG="C")
    env.pop("LANGUAGE", None)
    return env


def _clean_tool_message(line: str) -> str:
    line = re.sub(r"^\s*(?:pg_restore|pg_dump)(?:\.exe)?:\s*", "", line)
    line = re.sub(r"^(?:error|fatal|FATAL|ERROR):\s*", "", line)
    return _one_line(line)


def run_pg_restore(args: list[str], path: str | Path, pg_restore: str | None,
                   timeout: float, keep: Callable[[str], bool] | None = None) -> str:
    """The standard output of ``pg_restore ARGS path`` (no server: -l or -f -),
    run in the C locale without passwords in its environment.  TocError (one
    line) when the archive is missing, pg_restore fails or says nothing.
    keep: read the output line by line and keep only the lines it accepts
    (and the first non-blank one, which tells a listing from an error)."""
    p = Path(path)
    if not p.exists():
        raise TocError(f"{p}: no such file or directory")
    cmd = [find_pg_restore(pg_restore), *args, str(p)]
    try:
        if keep is None:
            proc = subprocess.run(cmd, capture_output=True, timeout=timeout, env=_client_env(),
                                  stdin=subprocess.DEVNULL)
            out = proc.stdout.decode("utf-8", errors="replace")
            returncode, err_bytes = proc.returncode, proc.stderr
        else:
            out, returncode, err_bytes = _filtered_output(cmd, timeout, keep)
    except subprocess.TimeoutExpired as exc:
        raise TocError(f"{p}: pg_restore took longer than {timeout:g} s") from exc
    except OSError as exc:
        raise TocError(f"cannot run {cmd[0]}: {exc.strerror or exc}") from exc
    if returncode != 0 or not out.strip():
        err = err_bytes.decode("utf-8", errors="replace").strip().splitlines()
        why = _clean_tool_message(err[0]) if err else f"pg_restore exited with {returncode}"
        raise TocError(f"{p}: not a readable pg_dump archive: {why}")
    return out


def _filtered_output(cmd: list[str], timeout: float,
                     keep: Callable[[str], bool]) -> tuple[str, int, bytes]:
    """Run cmd; its stdout's lines that keep() accepts (the first non-blank
    line always), its exit status and stderr (spooled to a file: a pipe
    nobody reads could fill and stall it). Killed after timeout."""
    with tempfile.TemporaryFile() as errf, subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL,
            env=_client_env()) as proc:
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            proc.kill()

        timer = threading.Timer(timeout, expire)
        timer.start()
        kept: list[str] = []
        first = True
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                if first and line.strip():
                    first = False
                    kept.append(line)
                elif keep(line) or "\x00" in line:  # binary data: kept to be refused
                    kept.append(line)
            returncode = proc.wait()
        finally:
            timer.cancel()
        if fired.is_set():
            raise subprocess.TimeoutExpired(cmd, timeout)
        errf.seek(0)
        return "\n".join(kept) + "\n", returncode, errf.read()


def list_archive(path: str | Path, pg_restore: str | None = None, timeout: float = 30, *,
                 schemas: Iterable[str] = (), owners: Iterable[str] = (),
                 descs: Collection[str] | None = None) -> tuple[TocHeader, list[TocItem]]:
    """Header and items of an archive (``pg_restore -l path``); descs: only
    items of these kinds ("TABLE DATA", ...). The listing is read line by
    line and only the lines that can matter are kept (the header, schemas,
    the kinds asked for): a catalog of 10,000 tables lists 70,000 entries,
    ~14 MB of text and line strings at once where the plan keeps 10,000."""
    wanted = _kind_marks(descs)

    def keep(line: str) -> bool:
        assert wanted is not None
        return line.startswith(";") or " SCHEMA - " in line or any(w in line for w in wanted)

    # every kind asked for: the whole listing is kept anyway, read at once
    text = run_pg_restore(["-l"], path, pg_restore, timeout,
                          keep=None if wanted is None else keep)
    return parse_archive_listing(text, schemas=schemas, owners=owners, descs=descs)


# --------------------------------------------------------- archive files

_DATA_SUFFIXES = (".dat", ".dat.gz", ".dat.lz4", ".dat.zst")
_DATA_FILE_RE = re.compile(r"^(\d+)\.dat(?:\.gz|\.lz4|\.zst)?$")


def data_file(archive_dir: str | Path, dump_id: int) -> Path | None:
    """The data file of an item of a directory-format archive, if present."""
    base = Path(archive_dir)
    for suffix in _DATA_SUFFIXES:
        p = base / f"{dump_id}{suffix}"
        if p.is_file():
            return p
    return None


def data_file_id(path: str | Path) -> int | None:
    """"3349.dat.gz" -> 3349; toc.dat, blobs.toc, blobs_NNN.toc,
    blob_NNN.dat and anything else -> None."""
    return _file_id(os.path.basename(os.fspath(path)))


@functools.lru_cache(maxsize=1 << 17)
def _file_id(name: str) -> int | None:
    # called for every file of a dump directory every sample: the names
    # repeat, so each is parsed once
    m = _DATA_FILE_RE.match(name)
    return int(m.group(1)) if m else None


_TEXT_DUMP_HEADERS = (b"--\n-- PostgreSQL database dump", b"--\r\n-- PostgreSQL database dump",
                      b"--\n-- PostgreSQL database cluster dump")


def archive_format(path: str | Path) -> str | None:
    """"directory" (a directory with toc.dat), "custom" (PGDMP magic),
    "tar" (ustar magic at offset 257), "plain" (pg_dump's SQL header), else
    None (missing, unreadable or something else)."""
    p = Path(path)
    try:
        if p.is_dir():
            return "directory" if (p / "toc.dat").is_file() else None
        with open(p, "rb") as f:
            head = f.read(512)
    except OSError:
        return None
    if head.startswith(b"PGDMP"):
        return "custom"
    if head[257:262] == b"ustar":
        return "tar"
    if head.startswith(_TEXT_DUMP_HEADERS):
        return "plain"
    return None
