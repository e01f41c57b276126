"""The ranges of the restore probe (`RestoreSource`): which data files each
range loads, into which temporary table, with which psql script; and the
SQL of those temporary tables and of the index build timed on one.

A data file up to twice the wanted range is loaded whole (small files
several to a range, one round trip for all), its COPY text bytes from the
gzip trailer; only a larger file gets ``| head -n N | dd`` (its first N
lines, dd counting the bytes): a range never skips into a file, which would
decompress the skipped part for nothing.  Tables with the same columns share
one temporary table per session, emptied (TRUNCATE) only once it holds
TRUNCATE_AFTER_BYTES.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...ddl import column_list, column_settings, index_shape, split_qualified
from .results import ProbeError, qualified_name
from .streams import MARK, Part, Range, Stream

# A data file up to this many times the wanted range is loaded whole (no
# pipeline but its decompressor, its size from the gzip trailer); a larger
# one gives a range of its first lines (``| head -n N | dd``).  Ranges never
# skip into a file: skipping decompresses the skipped part for nothing.
WHOLE_FILE_FACTOR = 2.0
# Small files go several to a range (one round trip for all), at most this many.
MAX_FILES_PER_RANGE = 64
# A temporary table is emptied (TRUNCATE) once it holds this many heap bytes,
# not after every load: for small files a TRUNCATE per file costs about as
# much as the load.
TRUNCATE_AFTER_BYTES = 64e6
MIN_RANGE_LINES = 100
FIRST_LINE_BYTES = 100.0  # a guess of COPY text bytes per row, until measured
TEMP_PREFIX = "pgparmon_probe_"
# The index build after the warm-up needs at least this much in its table.
INDEX_MIN_HEAP = 256 * 1024.0


@dataclass(frozen=True)
class CustomItem:
    """Where a table's data lies in a custom-format archive: its data
    block's offset, and the archive's compression and integer size
    (custom_archive.Extents)."""

    offset: int
    compression: str
    int_size: int
    length: int = 0  # its data's bytes in the archive (0: not known)


@dataclass
class DataFile:
    """A data file of the archive as the restore probe loads it."""

    table: str
    path: str
    size: float  # heap bytes (the caller's estimate)
    link: str  # its safe name in the scratch directory
    decompress: str | None  # the decompressor's path; None: plain text
    text: float | None = None  # its exact COPY text bytes when known (gzip trailer, plain)
    # a shell command that writes its COPY text (a custom archive's item);
    # None: the file, through `decompress`
    extract: str | None = None
    item: CustomItem | None = None  # where it lies in a custom archive (path)


class RestoreSource:
    """Ranges of a restore probe: whole data files (several small ones to a
    range), or the first lines of a large one, through the decompressor into
    a temporary clone of the table (COPY FROM via psql's \\copy ... FROM
    PROGRAM: the data goes straight from the decompressor into psql, as from
    pg_restore's own decompression).  Tables with the same columns share one
    temporary table per session; it is emptied only when it has grown."""

    def __init__(self, files: list[DataFile], create: dict[str, str], scratch: str,
                 text_ratio: float, logged: tuple[str, str] | None = None) -> None:
        self.files = sorted(files, key=lambda f: -f.size)
        # (schema, base name): load regular (WAL-logged) tables instead, one
        # set per stream, named base_<stream>_<n> in schema (`logged_tables`)
        self.logged = logged
        self.logged_tables: list[str] = []
        self._stream_no: dict[int, int] = {}
        self.create = create
        self.scratch = scratch
        self.text_ratio = text_ratio
        self.i = 0
        self.reused = False
        self.seq = 0
        self.bytes_seen = 0.0
        self.lines_seen = 0
        self.dd = shutil.which("dd") or "dd"
        self.head = shutil.which("head") or "head"
        self.temps: dict[str, str] = {}  # CREATE TEMP TABLE text (name X) -> name
        self.temp_sql: dict[str, str] = {}  # name -> its CREATE TEMP TABLE
        self.whole_files = 0
        self.prefix_ranges = 0

    def _line_bytes(self) -> float:
        return self.bytes_seen / self.lines_seen if self.lines_seen > 0 else FIRST_LINE_BYTES

    def temp_for(self, table: str) -> str:
        key = temp_table_sql(self.create.get(table), table, "X")
        name = self.temps.get(key)
        if name is None:
            name = f"{TEMP_PREFIX}{len(self.temps)}"
            self.temps[key] = name
            self.temp_sql[name] = temp_table_sql(self.create.get(table), table, name)
        return name

    def _next_file(self) -> DataFile:
        if self.i >= len(self.files):
            self.i = 0
            self.reused = True
        f = self.files[self.i]
        self.i += 1
        return f

    def _table_of(self, s: Stream, table: str) -> tuple[str, str]:
        """(name, its CREATE) of the table this stream loads `table` into:
        its temporary clone, or in the logged mode a regular one of its own
        (a temporary table's name is the session's; a regular table's is
        the database's)."""
        temp = self.temp_for(table)
        if self.logged is None:
            return temp, self.temp_sql[temp]
        no = self._stream_no.setdefault(id(s), len(self._stream_no))
        schema, base = self.logged
        name = qualified_name(schema, f"{base}_{no}_{temp[len(TEMP_PREFIX):]}")
        if name not in self.logged_tables:
            self.logged_tables.append(name)
        return name, temp_table_sql(self.create.get(table), table, name, temporary=False)

    def _part_script(self, s: Stream, f: DataFile, lines: int) -> tuple[Part, str]:
        temp, create = self._table_of(s, f.table)
        heap = f.size if lines == 0 else lines * self._line_bytes() / self.text_ratio
        script = ""
        truncate = False
        if temp not in s.created:
            s.created.add(temp)
            s.loaded[temp] = 0.0
            script += create + "\n"
        elif s.loaded.get(temp, 0.0) + heap > TRUNCATE_AFTER_BYTES:
            truncate = True
            s.loaded[temp] = 0.0
            script += f"TRUNCATE {temp};\n"
        s.loaded[temp] = s.loaded.get(temp, 0.0) + heap
        count: str | None = None
        if lines == 0 and f.text is not None:
            # the whole file, its size known: no pipeline at all
            src = (f"FROM PROGRAM '{f.decompress} -dc {f.link}'" if f.decompress
                   else f"FROM '{f.link}'")
        else:
            self.seq += 1
            count = os.path.join(self.scratch, f"n{self.seq}.txt")
            piped = f.extract is not None or f.decompress is not None
            cmd = (f"{f.extract} | " if f.extract is not None
                   else f"{f.decompress} -dc {f.link} | " if f.decompress else "")
            if lines:
                cmd += (f"{self.head} -n {lines} | " if piped
                        else f"{self.head} -n {lines} {f.link} | ")
            elif not piped:
                cmd = f"{self.dd} bs=65536 if={f.link} 2>n{self.seq}.txt"
            if piped or lines:
                cmd += f"{self.dd} bs=65536 2>n{self.seq}.txt"
            src = f"FROM PROGRAM '{cmd}'"
        script += f"\\copy {temp} {src}\n"
        s.table_of[temp] = f.table
        return Part(f.table, temp, f.text if count is None else None, count, lines,
                    truncate), script

    def take(self, s: Stream, want_bytes: float) -> Range:
        parts: list[Part] = []
        script = ""
        total = 0.0
        first = self._next_file()
        if first.size > WHOLE_FILE_FACTOR * want_bytes:
            # a large file: its first lines only
            lines = max(MIN_RANGE_LINES,
                        int(want_bytes * self.text_ratio / self._line_bytes()))
            part, script = self._part_script(s, first, lines)
            self.prefix_ranges += 1
            return Range(first.table, script, lines=lines, parts=[part], owner=s)
        f = first
        while True:
            part, text = self._part_script(s, f, 0)
            parts.append(part)
            script += text
            total += f.size
            self.whole_files += 1
            if (total >= want_bytes or len(parts) >= MAX_FILES_PER_RANGE
                    or self.i >= len(self.files)):
                break
            nxt = self.files[self.i]
            if total + nxt.size > WHOLE_FILE_FACTOR * want_bytes:
                break
            f = self._next_file()
        label = first.table if len(parts) == 1 else f"{first.table} and {len(parts) - 1} more"
        return Range(label, script, parts=parts, owner=s)

    def finish(self, r: Range) -> None:
        total = 0.0
        for part in r.parts:
            n = part.known if part.known is not None else _dd_bytes(part.count_path)
            if n is None:
                raise ProbeError(f"the probe could not count the bytes it fed into {r.label} "
                                 "(dd's report is missing)")
            if part.lines and n > 0:
                self.bytes_seen += n
                self.lines_seen += part.lines
            heap = n / self.text_ratio
            if r.owner is not None:
                if part.truncate:
                    r.owner.exact[part.temp] = 0.0
                r.owner.exact[part.temp] = r.owner.exact.get(part.temp, 0.0) + heap
            total += heap
        r.heap = total

    def index_script(self, s: Stream, index_sql: Mapping[str, Sequence[str]] | None,
                     timeout_s: float) -> tuple[str, str, str, float] | None:
        """(script, table, index statement, heap bytes) of the index build on
        the stream's temporary table that holds the most, or None when it
        holds too little.  The build is shaped like the table's first index in
        index_sql (rewritten onto the temporary table), else a btree on its
        first column that has a default btree operator class."""
        if not s.exact:
            return None
        temp = max(s.exact, key=lambda t: s.exact[t])
        table = s.table_of[temp]
        heap = s.exact[temp]
        if heap < INDEX_MIN_HEAP:
            return None
        stmt = None
        for cand in (index_sql or {}).get(table, ()):
            stmt = index_on_temp(cand, temp)
            if stmt is not None:
                break
        if stmt is not None:
            build = stmt + ";"
            shown = stmt
        else:
            build = (f"SELECT format('CREATE INDEX ON {temp} (%I)', a.attname) "
                     f"FROM pg_attribute a WHERE a.attrelid = '{temp}'::regclass "
                     "AND a.attnum > 0 AND NOT a.attisdropped AND EXISTS ("
                     "SELECT 1 FROM pg_opclass o JOIN pg_am m ON m.oid = o.opcmethod "
                     "WHERE m.amname = 'btree' AND o.opcdefault AND (o.opcintype = a.atttypid "
                     "OR EXISTS (SELECT 1 FROM pg_cast c WHERE c.castsource = a.atttypid "
                     "AND c.casttarget = o.opcintype AND c.castmethod = 'b'))) "
                     "ORDER BY a.attnum LIMIT 1 \\gexec")
            shown = "btree on the first column"
        ms = max(100, int(timeout_s * 1000))
        script = (
            "\\set ON_ERROR_STOP 0\n"
            f"SET statement_timeout = {ms};\n"
            "SELECT clock_timestamp() AS pgparmon_t0 \\gset\n"
            f"{build}\n"
            "SELECT round(extract(epoch FROM clock_timestamp() - :'pgparmon_t0'::timestamptz)"
            ", 6) AS pgparmon_ix_s, (SELECT count(*) FROM pg_index "
            f"WHERE indrelid = '{temp}'::regclass) AS pgparmon_ix_n \\gset\n"
            f"\\warn {MARK} index :pgparmon_ix_s :pgparmon_ix_n")
        return script, table, shown, heap


def index_on_temp(stmt: str, temp: str) -> str | None:
    """The archive's CREATE [UNIQUE] INDEX (or ALTER TABLE ... ADD [CONSTRAINT
    c] PRIMARY KEY / UNIQUE (cols)) rewritten to build the same index, with
    no name, on the temporary table `temp`; None for anything else. Never
    UNIQUE: the probe loads ranges more than once on a small archive, and a
    duplicate would fail the build; the uniqueness check costs little next
    to the sort."""
    shape = index_shape(stmt)
    return None if shape is None else f"CREATE INDEX ON {temp} {shape}"


def _dd_bytes(path: str | None) -> float | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"^(\d+) bytes", text, re.MULTILINE)
    return float(m.group(1)) if m else None


def temp_table_sql(create_sql: str | None, table: str, temp: str,
                   temporary: bool = True) -> str:
    """CREATE TEMP TABLE temp (temporary False: CREATE TABLE) with the
    columns of the archive's CREATE TABLE (its options, INHERITS and
    PARTITION BY left out) and its columns' STORAGE and COMPRESSION
    settings (a column kept EXTERNAL loads about 3x faster than one its
    clone would try to compress), or LIKE the table when there is no usable
    CREATE TABLE (the table must exist then)."""
    kind = "TEMP TABLE" if temporary else "TABLE"
    cols = column_list(create_sql) if create_sql else None
    if cols is not None and cols.strip():
        sets = column_settings(create_sql or "")
        alter = f" ALTER TABLE {temp} {', '.join(sets)};" if sets else ""
        return f"CREATE {kind} {temp} ({cols});{alter}"
    parts = split_qualified(table)
    name = qualified_name(*parts) if parts else table
    return (f"CREATE {kind} {temp} (LIKE {name} INCLUDING DEFAULTS INCLUDING GENERATED "
            "INCLUDING STORAGE);")
