"""The SQL of a pg_dump archive: the one parser of its DDL.

``pg_restore -v --section=S -f - ARCHIVE`` writes the archive's SQL without
a server and without reading the data (`archive_sql`).  With -v every item
is preceded by ``-- TOC entry N (class C OID O)`` and ``-- Dependencies:
...``, which links it to the listing (`pgparmon.toc`) by dump id; a
``-- Name: ...; Type: ...`` line starts each item (`script_entries`).

From that text:

* post-data targets: the table each index, constraint, trigger, rule ...
  works on, and what kind of build it is (`parse_post_data_sql`,
  `post_data_targets`), read with a small SQL tokenizer;
* the statements of tables and their indexes: CREATE TABLE text by table
  (`create_table_statements`), CREATE INDEX / ADD PRIMARY KEY / UNIQUE by
  table (`index_statements`), the column list of a CREATE TABLE
  (`column_list`), the shape of an index after its table name
  (`index_shape`), and a qualified name's parts (`split_qualified`);
* the partitions of partitioned tables (`partition_parents`), from the
  TABLE ATTACH items alone (``pg_restore -v -L LIST``);
* what a btree build's key costs a row against an int key's
  (`key_costs`: its key columns, `key_columns`, and their types in the
  table's CREATE TABLE, `column_types`, read with ``-L`` too).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .toc import TocItem, list_archive, qualify, run_pg_restore

# ------------------------------------------------------------ the script


def archive_sql(path: str | Path, section: str, pg_restore: str | None = None,
                timeout: float = 30) -> str:
    """The SQL of one section (pre-data, data, post-data) of an archive, with
    -v comments (``pg_restore -v --section=SECTION -f -``).  TocError when
    the archive cannot be read."""
    return run_pg_restore(["-v", f"--section={section}", "-f", "-"], path, pg_restore, timeout)


_NAME_LINE_RE = re.compile(
    r"^-- (?:Data for )?Name: (?P<name>.*); Type: (?P<desc>[A-Z][A-Z ]*?); "
    r"Schema: (?P<schema>.*?); Owner: (?P<owner>.*?)(?:; Tablespace: .*)?$")
_TOC_ENTRY_RE = re.compile(r"^-- TOC entry (\d+) \(class \d+ OID \d+\)")
_DEPS_RE = re.compile(r"^-- Dependencies:((?: \d+)*)\s*$")


@dataclass
class ScriptEntry:
    """One ``-- Name: ...; Type: DESC; Schema: ...`` item of a script: its
    desc, schema (None for "-"), name (the TOC tag), dump id and
    dependencies (from -v comments, else None / ()), and its SQL lines."""

    desc: str
    schema: str | None
    name: str
    dump_id: int | None
    deps: tuple[int, ...]
    body: list[str]

    @property
    def sql(self) -> str:
        """The item's SQL lines as one text, stripped."""
        return "\n".join(self.body).strip()


def _comment_meta(lines: list[str], at: int) -> tuple[int | None, tuple[int, ...]]:
    """The TOC entry / Dependencies lines just above a '-- Name:' line."""
    dump_id: int | None = None
    deps: list[int] = []
    j = at - 1
    while j >= 0 and lines[j].startswith("--") and lines[j] != "--":
        if m := _TOC_ENTRY_RE.match(lines[j]):
            dump_id = int(m.group(1))
        elif m := _DEPS_RE.match(lines[j]):
            deps = [int(x) for x in m.group(1).split()]
        j -= 1
    return dump_id, tuple(dict.fromkeys(deps))  # pg_dump repeats dependencies


_COPY_FROM_STDIN_RE = re.compile(r"^COPY .* FROM stdin;$")


def script_entries(text: str) -> list[ScriptEntry]:
    """The '-- Name:' blocks of a script with their SQL lines.  COPY data
    of a full script is skipped: a row may look like a header comment."""
    lines = [ln.rstrip("\r") for ln in text.split("\n")]
    entries: list[ScriptEntry] = []
    in_copy = False
    for i, line in enumerate(lines):
        if in_copy:
            in_copy = line != "\\."
        elif m := _NAME_LINE_RE.match(line):
            dump_id, deps = _comment_meta(lines, i)
            schema = None if m.group("schema") == "-" else m.group("schema")
            entries.append(ScriptEntry(m.group("desc"), schema, m.group("name"), dump_id, deps, []))
        elif entries and not line.startswith(("--", "\\")):
            entries[-1].body.append(line)  # comments and psql \restrict lines are not SQL
            in_copy = bool(_COPY_FROM_STDIN_RE.match(line))
    return entries


# ------------------------------------------------------- post-data targets


@dataclass(frozen=True)
class PostDataTarget:
    """A post-data item and the table it works on.  kind is one of index,
    primary key, unique, foreign key, check, exclusion, trigger, other."""

    desc: str
    schema: str | None
    name: str                          # the TOC tag, as in the listing
    table: str | None                  # "schema.table" it works on (raw names)
    references: str | None             # FK: the referenced "schema.table"
    kind: str
    dump_id: int | None = None         # from "-- TOC entry N" (pg_restore -v)
    dependencies: tuple[int, ...] = ()  # dump ids from "-- Dependencies:"
    object_name: str | None = None     # index / constraint / trigger name from the SQL
    # a btree build's key columns, in order (None for an expression); None
    # when the item is no btree index or key, or its statement was unreadable
    key: tuple[str | None, ...] | None = None


_DESC_KIND = {"INDEX": "index", "FK CONSTRAINT": "foreign key", "TRIGGER": "trigger",
              "EVENT TRIGGER": "trigger", "CHECK CONSTRAINT": "check"}
_CONSTRAINT_KIND = {"PRIMARY": "primary key", "UNIQUE": "unique", "FOREIGN": "foreign key",
                    "CHECK": "check", "EXCLUDE": "exclusion"}


@dataclass(frozen=True)
class _Tok:
    kind: str   # "word" (unquoted), "qid" (quoted identifier), "str", "op"
    text: str

    def kw(self, *words: str) -> bool:
        return self.kind == "word" and self.text.upper() in words


_TOKEN_RE = re.compile(r"""
    (?P<ws>\s+|--[^\n]*|/\*.*?\*/)
  | (?P<qid>"(?:[^"]|"")*"?)
  | (?P<str>[EeNnBbXxUu]?'(?:[^'\\]|''|\\.)*'?)
  | (?P<dollar>\$(?P<tag>[A-Za-z_]\w*)?\$.*?(?:\$(?P=tag)\$|\Z))
  | (?P<word>[A-Za-z_\u0080-\U0010ffff][\w$\u0080-\U0010ffff]*)
  | (?P<num>\d+(?:\.\d*)?)
  | (?P<op>.)
""", re.VERBOSE | re.DOTALL)


def _unquote(qid: str) -> str:
    inner = qid[1:-1] if len(qid) > 1 and qid.endswith('"') else qid[1:]
    return inner.replace('""', '"')


def _tokens(sql: str, limit: int = 400) -> list[_Tok]:
    """Tokens of the first statement (up to a top-level ';'); comments and
    whitespace dropped, dollar-quoted bodies kept as one string token."""
    toks: list[_Tok] = []
    depth = 0
    for m in _TOKEN_RE.finditer(sql):
        kind, text = m.lastgroup or "op", m.group(0)
        if kind == "ws":
            continue
        if kind == "op":
            depth += {"(": 1, ")": -1}.get(text, 0)
            if text == ";" and depth <= 0:
                break
        if kind == "qid":
            text = _unquote(text)
        toks.append(_Tok("str" if kind == "dollar" else kind, text))
        if len(toks) >= limit:
            break
    return toks


class _Cursor:
    """A read position in a token list, with the few moves the statement
    patterns need."""

    def __init__(self, toks: list[_Tok]) -> None:
        self.toks = toks
        self.i = 0

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def at(self, *words: str) -> bool:
        t = self.peek()
        return t is not None and t.kw(*words)

    def accept(self, *words: str) -> bool:
        if self.at(*words):
            self.i += 1
            return True
        return False

    def accept_seq(self, *words: str) -> bool:
        start = self.i
        for w in words:
            if not self.accept(w):
                self.i = start
                return False
        return True

    def ident(self) -> str | None:
        t = self.peek()
        if t is None or t.kind not in ("word", "qid"):
            return None
        self.i += 1
        return t.text.lower() if t.kind == "word" else t.text

    def qualified(self) -> list[str] | None:
        first = self.ident()
        if first is None:
            return None
        parts = [first]
        while (t := self.peek()) is not None and t.kind == "op" and t.text == ".":
            self.i += 1
            nxt = self.ident()
            if nxt is None:
                break
            parts.append(nxt)
        return parts

    def skip_to(self, *words: str) -> bool:
        """Move past the next top-level keyword among words."""
        depth = 0
        while (t := self.peek()) is not None:
            self.i += 1
            if t.kind == "op" and t.text in "()":
                depth += 1 if t.text == "(" else -1
            elif depth == 0 and t.kw(*words):
                return True
        return False


def _table_name(parts: list[str] | None, schema: str | None) -> str | None:
    if not parts:
        return None
    # pg_dump (10+) always schema-qualifies; older archives rely on search_path
    return qualify(parts[-2], parts[-1]) if len(parts) >= 2 else qualify(schema, parts[0])


@dataclass
class _Found:
    table: str | None = None
    references: str | None = None
    kind: str | None = None
    object_name: str | None = None


def _parse_create_index(c: _Cursor, schema: str | None) -> _Found:
    c.accept("CONCURRENTLY")
    c.accept_seq("IF", "NOT", "EXISTS")
    name = None if c.at("ON") else c.ident()
    if not c.accept("ON"):
        return _Found(kind="index", object_name=name)
    c.accept("ONLY")
    return _Found(_table_name(c.qualified(), schema), None, "index", name)


def _parse_alter_table(c: _Cursor, schema: str | None) -> _Found:
    c.accept_seq("IF", "EXISTS")
    c.accept("ONLY")
    table = _table_name(c.qualified(), schema)
    if not c.accept_seq("ADD", "CONSTRAINT"):
        return _Found(table=table, kind="other")
    name = c.ident()
    t = c.peek()
    kind = _CONSTRAINT_KIND.get(t.text.upper(), "other") if t and t.kind == "word" else "other"
    refs = None
    if kind == "foreign key" and c.skip_to("REFERENCES"):
        refs = _table_name(c.qualified(), schema)
    return _Found(table, refs, kind, name)


def _parse_create_trigger(c: _Cursor, schema: str | None) -> _Found:
    name = c.ident()
    if not c.skip_to("ON"):
        return _Found(kind="trigger", object_name=name)
    return _Found(_table_name(c.qualified(), schema), None, "trigger", name)


def _parse_rule(c: _Cursor, schema: str | None) -> _Found:
    name = c.ident()
    if c.skip_to("TO"):
        return _Found(_table_name(c.qualified(), schema), None, "other", name)
    return _Found(kind="other", object_name=name)


def _parse_policy(c: _Cursor, schema: str | None) -> _Found:
    name = c.ident()
    c.skip_to("ON")
    return _Found(_table_name(c.qualified(), schema), None, "other", name)


def _parse_statistics(c: _Cursor, schema: str | None) -> _Found:
    c.accept_seq("IF", "NOT", "EXISTS")
    parts = c.qualified()
    c.skip_to("FROM")
    return _Found(_table_name(c.qualified(), schema), None, "other", parts[-1] if parts else None)


def _parse_create(c: _Cursor, schema: str | None) -> _Found:
    c.accept_seq("OR", "REPLACE")
    c.accept("UNIQUE")
    if c.accept("INDEX"):
        return _parse_create_index(c, schema)
    if c.accept_seq("EVENT", "TRIGGER"):
        return _Found(kind="trigger", object_name=c.ident())
    c.accept("CONSTRAINT")
    if c.accept("TRIGGER"):
        return _parse_create_trigger(c, schema)
    if c.accept("RULE"):
        return _parse_rule(c, schema)
    if c.accept("POLICY"):
        return _parse_policy(c, schema)
    if c.accept("STATISTICS"):
        return _parse_statistics(c, schema)
    return _Found()


def _parse_statement(sql: str, schema: str | None) -> _Found:
    """What a post-data statement works on, from its first statement."""
    c = _Cursor(_tokens(sql))
    if c.accept("CREATE"):
        return _parse_create(c, schema)
    if c.accept_seq("ALTER", "TABLE"):
        return _parse_alter_table(c, schema)
    if c.accept_seq("REFRESH", "MATERIALIZED", "VIEW"):
        c.accept("CONCURRENTLY")
        return _Found(_table_name(c.qualified(), schema), None, "other")
    if c.accept_seq("ALTER", "PUBLICATION"):
        c.ident()
        if c.accept_seq("ADD", "TABLE"):
            c.accept("ONLY")
            return _Found(_table_name(c.qualified(), schema), None, "other")
    return _Found()


def parse_post_data_sql(text: str) -> list[PostDataTarget]:
    """Items of a pg_dump SQL script (typically ``pg_restore [-v]
    --section=post-data -f -``): for each ``-- Name: ...; Type: ...`` block,
    the table its statement works on and what kind of build it is.
    dump_id / dependencies are filled only when the script was made with -v."""
    return [entry_target(e) for e in script_entries(text)]


def entry_target(e: ScriptEntry) -> PostDataTarget:
    """The table a script item's statement works on, and its kind."""
    found = _parse_statement("\n".join(e.body), e.schema)
    # the statement decides (CONSTRAINT -> primary key / unique ...);
    # the desc is the fallback when it could not be read
    stated = found.kind if found.kind not in (None, "other") else None
    kind = stated or _DESC_KIND.get(e.desc, "other")
    key = key_columns(e.sql) if kind in ("index", "primary key", "unique") else None
    return PostDataTarget(e.desc, e.schema, e.name, found.table, found.references,
                          kind, e.dump_id, e.deps, found.object_name, key)


def link_targets(targets: Iterable[PostDataTarget], items: Iterable[TocItem]
                 ) -> dict[int, PostDataTarget]:
    """Key post-data targets by dump id: their own (from -v output) or, when
    missing, the listing item with the same (desc, schema, tag)."""
    by_name: dict[tuple[str, str | None, str], int] = {}
    for it in items:
        by_name.setdefault((it.desc, it.schema, it.tag), it.dump_id)
    linked: dict[int, PostDataTarget] = {}
    for t in targets:
        dump_id = t.dump_id if t.dump_id is not None else by_name.get((t.desc, t.schema, t.name))
        if dump_id is not None:
            linked[dump_id] = t
    return linked


def post_data_targets(path: str | Path, pg_restore: str | None = None, timeout: float = 30
                      ) -> dict[int, PostDataTarget]:
    """For each post-data item of an archive (INDEX, CONSTRAINT, FK
    CONSTRAINT, TRIGGER, RULE, ...), keyed by dump id: the table it works
    on.  Reads only the TOC (``pg_restore -v --section=post-data -f -``)."""
    text = archive_sql(path, "post-data", pg_restore, timeout)
    targets = parse_post_data_sql(text)
    if all(t.dump_id is not None for t in targets):
        return link_targets(targets, ())
    _, items = list_archive(path, pg_restore, timeout)
    return link_targets(targets, items)


def partition_parents(path: str | Path, items: Iterable[TocItem], pg_restore: str | None = None,
                      timeout: float = 30) -> dict[str, str]:
    """Each partition's parent ("schema.table" -> "schema.table", raw names
    as the TOC lists them), from the archive's TABLE ATTACH items: pg_dump
    writes one per partition, and its -v Dependencies name the partition's
    TABLE and its parent's. Only those items are read (``pg_restore -v -L``
    a list of them), so a schema of thousands of tables costs nothing here;
    {} when there are none. TocError when the archive cannot be read."""
    items = list(items)
    attach = [it for it in items if it.desc == "TABLE ATTACH"]
    if not attach:
        return {}
    tables = {it.dump_id: qualify(it.schema, it.tag) for it in items if it.desc == "TABLE"}
    text = listed_sql(path, [it.dump_id for it in attach], pg_restore, timeout)
    out: dict[str, str] = {}
    for e in script_entries(text):
        if e.desc != "TABLE ATTACH":
            continue
        child = qualify(e.schema, e.name)
        parents = {tables[d] for d in e.deps if d in tables and tables[d] != child}
        if len(parents) == 1:
            out[child] = parents.pop()
    return out


def listed_sql(path: str | Path, dump_ids: Iterable[int], pg_restore: str | None = None,
               timeout: float = 30) -> str:
    """The SQL of these items alone (``pg_restore -v -L LIST -f -``): a few
    items of an archive of thousands cost what they hold, not the schema."""
    fd, listing = tempfile.mkstemp(prefix="pgparmon-items-", suffix=".list")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("".join(f"{i};\n" for i in dump_ids))
        return run_pg_restore(["-v", "-L", listing, "-f", "-"], path, pg_restore, timeout)
    finally:
        os.unlink(listing)


# ------------------------------------------------------- the keys of builds

# A btree build sorts its rows by the key, so what a row costs depends on the
# key's type: on this project's VM (bench/restore_row_cost.py, collation C)
# a btree on an md5 text column (33 bytes) took 2.0x the build of an int
# primary key on the same rows, 3.0x with 132-byte text keys; a numeric
# column in random order 1.8x (bench/key_costs.py). The key's leading
# column decides the type (it is what most comparisons compare); a type not
# named here, an expression or another access method costs as an int key
# (the reference every build rule was measured with).
KEY_COSTS = {"fixed": 1.0, "text": 2.0, "numeric": 1.8}
# Each key column past the first adds this share of the leading one's cost:
# a wider index tuple, and a compare of it on every tie of the columns
# before (bench/key_costs.py: +0% to +49% a column, +4% led by a unique
# column, +49% led by one whose values came twice; median +15%). Which keys
# tie is the data's, not in the archive: the median is taken for all.
KEY_EXTRA_COLUMN = 0.15
_FIXED_TYPES = frozenset(
    "smallint integer bigint int int2 int4 int8 serial bigserial smallserial oid date "
    "timestamp time real double float float4 float8 boolean bool money uuid interval".split())
_TEXT_TYPES = frozenset("text character varchar char bpchar name citext".split())
_NUMERIC_TYPES = frozenset(("numeric", "decimal"))
_NOT_COLUMNS = frozenset(("CONSTRAINT", "PRIMARY", "UNIQUE", "CHECK", "FOREIGN", "EXCLUDE",
                          "LIKE"))
_TYPE_ENDS = frozenset(("COLLATE", "NOT", "NULL", "DEFAULT", "CONSTRAINT", "GENERATED",
                        "CHECK", "PRIMARY", "UNIQUE", "REFERENCES", "STORAGE", "COMPRESSION"))


def _split_top(c: _Cursor) -> list[list[_Tok]] | None:
    """The comma-separated parts of the parenthesized list at c (c just
    after its '('), up to its ')'; None when it never closes."""
    parts: list[list[_Tok]] = [[]]
    depth = 0
    while (t := c.peek()) is not None:
        c.i += 1
        if t.kind == "op" and t.text == ")" and depth == 0:
            return parts
        if t.kind == "op" and t.text == "," and depth == 0:
            parts.append([])
            continue
        if t.kind == "op" and t.text in "()":
            depth += 1 if t.text == "(" else -1
        parts[-1].append(t)
    return None


def key_columns(sql: str) -> tuple[str | None, ...] | None:
    """The key columns of a btree build: CREATE [UNIQUE] INDEX ... ON t
    [USING btree] (a, lower(b) DESC, ...) or ALTER TABLE t ADD [CONSTRAINT
    c] PRIMARY KEY / UNIQUE (a, b); each a column name (None for an
    expression). None for another access method or another statement."""
    c = _Cursor(_tokens(sql, limit=2000))
    if c.accept("CREATE"):
        c.accept("UNIQUE")
        if not c.accept("INDEX"):
            return None
        c.accept("CONCURRENTLY")
        c.accept_seq("IF", "NOT", "EXISTS")
        if not c.at("ON"):
            c.ident()
        if not c.accept("ON"):
            return None
        c.accept("ONLY")
        c.qualified()
        if c.accept("USING") and c.ident() != "btree":
            return None
    elif c.accept_seq("ALTER", "TABLE"):
        c.accept_seq("IF", "EXISTS")
        c.accept("ONLY")
        c.qualified()
        if not c.accept("ADD"):
            return None
        if c.accept("CONSTRAINT"):
            c.ident()
        if not (c.accept_seq("PRIMARY", "KEY") or c.accept("UNIQUE")):
            return None
        if not c.accept_seq("NULLS", "NOT", "DISTINCT"):
            c.accept_seq("NULLS", "DISTINCT")
    else:
        return None
    t = c.peek()
    if t is None or t.kind != "op" or t.text != "(":
        return None
    c.i += 1
    parts = _split_top(c)
    if not parts or not all(parts):
        return None
    out: list[str | None] = []
    for p in parts:
        head = p[0]
        called = len(p) > 1 and p[1].kind == "op" and p[1].text in "(."
        plain = head.kind in ("word", "qid") and not called
        out.append((head.text.lower() if head.kind == "word" else head.text) if plain else None)
    return tuple(out)


def column_types(create_sql: str) -> dict[str, str]:
    """column -> its type as written (lower case, ``character varying``,
    ``timestamp with time zone``, ``public.citext``, ``integer[]``) of a
    CREATE TABLE statement; {} when it has no column list we can read."""
    body = column_list(create_sql)
    if body is None:
        return {}
    c = _Cursor(_tokens(body + ")", limit=100_000))
    parts = _split_top(c) or []
    out: dict[str, str] = {}
    for p in parts:
        if not p or p[0].kind not in ("word", "qid") or p[0].kw(*_NOT_COLUMNS):
            continue
        name = p[0].text.lower() if p[0].kind == "word" else p[0].text
        words: list[str] = []
        depth = 0
        for t in p[1:]:
            if depth == 0 and t.kw(*_TYPE_ENDS):
                break
            if t.kind == "op" and t.text in "()":
                depth += 1 if t.text == "(" else -1
                continue
            if depth == 0:
                words.append(t.text.lower() if t.kind in ("word", "op") else t.text)
        typ = " ".join(words).replace(" . ", ".").replace(" [ ]", "[]").replace(" [", "[")
        if typ:
            out[name] = typ
    return out


def key_class(typ: str | None) -> str | None:
    """"fixed" (a fixed-width type compared by value: ints, dates,
    timestamps, floats, uuid), "text" (text, varchar, char, name, citext),
    "numeric" (numeric, decimal) or None (an array, anything else: not told
    apart)."""
    if not typ or "[" in typ:
        return None
    first = typ.split()[0].split("(")[0]
    first = first.rsplit(".", 1)[-1]
    if first in _FIXED_TYPES:
        return "fixed"
    if first in _TEXT_TYPES:
        return "text"
    if first in _NUMERIC_TYPES:
        return "numeric"
    return None


def key_costs(path: str | Path, targets: dict[int, PostDataTarget], items: Iterable[TocItem],
              pg_restore: str | None = None, timeout: float = 30) -> dict[int, float]:
    """A btree build's cost a row relative to an int key's, by dump id, for
    the builds whose cost differs from 1: its leading key column's type
    (KEY_COSTS, the type named by the archive's CREATE TABLE) x (1 +
    KEY_EXTRA_COLUMN a key column past the first); only the TABLE items of
    the tables such builds are on are read (``-L``). TocError when the
    archive cannot be read."""
    keyed = {dump_id: (t.table, t.key) for dump_id, t in targets.items()
             if t.table and t.key}
    on = {table for table, key in keyed.values() if key[0]}
    ids = sorted(it.dump_id for it in items if it.desc == "TABLE" and it.relation in on)
    if not keyed:
        return {}
    types: dict[str, dict[str, str]] = {}
    if ids:
        text = listed_sql(path, ids, pg_restore, timeout)
        types = {t: column_types(sql) for t, sql in create_table_statements(text).items()}
    out: dict[int, float] = {}
    for dump_id, (table, key) in keyed.items():
        cls = key_class(types.get(table, {}).get(key[0])) if key[0] else None
        cost = KEY_COSTS.get(cls or "", 1.0) * (1.0 + KEY_EXTRA_COLUMN * (len(key) - 1))
        if cost != 1.0:
            out[dump_id] = cost
    return out


# ------------------------------------------------ table and index statements


def create_table_statements(text: str) -> dict[str, str]:
    """table ("schema.table", raw names as the TOC lists them) -> the CREATE
    TABLE text of each TABLE item of a script (typically ``pg_restore -v
    --section=pre-data -f -``)."""
    return {f"{e.schema}.{e.name}": e.sql
            for e in script_entries(text) if e.desc == "TABLE" and e.schema is not None}


def index_statements(text: str) -> dict[str, list[str]]:
    """table ("schema.table") -> the CREATE INDEX and ADD PRIMARY KEY /
    UNIQUE statements on it, in script order (typically ``pg_restore -v
    --section=post-data -f -``)."""
    out: dict[str, list[str]] = {}
    for e in script_entries(text):
        t = entry_target(e)
        if t.table and t.kind in ("index", "primary key", "unique"):
            out.setdefault(t.table, []).append(e.sql)
    return out


_INDEX_HEAD = re.compile(
    r'\s*CREATE\s+(UNIQUE\s+)?INDEX\s+(?:CONCURRENTLY\s+)?(?:IF\s+NOT\s+EXISTS\s+)?'
    r'(?:(?:"(?:[^"]|"")*"|[^\s"(]+)\s+)?ON\s+(?:ONLY\s+)?'
    r'(?:"(?:[^"]|"")*"|[^\s."(]+)(?:\.(?:"(?:[^"]|"")*"|[^\s."(]+))?\s*'
    r'((?:USING\s|\().*?)\s*;?\s*$', re.IGNORECASE | re.DOTALL)
_CONSTRAINT_HEAD = re.compile(
    r'\s*ALTER\s+TABLE\s+(?:ONLY\s+)?(?:"(?:[^"]|"")*"|[^\s."(]+)'
    r'(?:\.(?:"(?:[^"]|"")*"|[^\s."(]+))?\s+ADD\s+(?:CONSTRAINT\s+(?:"(?:[^"]|"")*"|\S+)\s+)?'
    r'(?:PRIMARY\s+KEY|UNIQUE)\s*(\([^()]*\))', re.IGNORECASE | re.DOTALL)


def index_shape(stmt: str) -> str | None:
    """What a CREATE [UNIQUE] INDEX builds, from its table name on (``USING
    btree (a, b) INCLUDE (c) WHERE ...``), or the column list of ALTER TABLE
    ... ADD [CONSTRAINT c] PRIMARY KEY / UNIQUE (cols); None for anything
    else."""
    m = _INDEX_HEAD.match(stmt)
    if m:
        return m.group(2)
    m = _CONSTRAINT_HEAD.match(stmt)
    if m:
        return m.group(1)
    return None


def split_qualified(name: str) -> tuple[str, str] | None:
    """(schema, relname) of "schema.rel" / quoted forms; None if unparsable."""
    parts = re.findall(r'"((?:[^"]|"")*)"|([^."]+)', name)
    if len(parts) != 2:
        return None
    out = [q.replace('""', '"') if q else u for q, u in parts]
    return out[0], out[1]


def column_list(sql: str) -> str | None:
    """The text between the parentheses of CREATE TABLE name ( ... ), or None
    (no column list: PARTITION OF, OF type, a statement we do not know)."""
    m = re.match(r'\s*CREATE\s+(?:(?:GLOBAL|LOCAL)\s+)?(?:(?:TEMP|TEMPORARY|UNLOGGED)\s+)?'
                 r'TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?'
                 r'(?:"(?:[^"]|"")*"|[^\s."(]+)(?:\.(?:"(?:[^"]|"")*"|[^\s."(]+))?\s*\(',
                 sql, re.IGNORECASE)
    if not m:
        return None
    depth, i, n = 1, m.end(), len(sql)
    begin = i
    while i < n:
        c = sql[i]
        if c in "'\"":
            escapes = c == "'" and i > 0 and sql[i - 1] in "eE"
            i += 1
            while i < n:
                if escapes and sql[i] == "\\":
                    i += 2
                    continue
                if sql[i] == c:
                    if i + 1 < n and sql[i + 1] == c:
                        i += 2
                        continue
                    break
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return sql[begin:i]
        i += 1
    return None


_NAME = r'(?:"(?:[^"]|"")*"|[^\s."(;]+)'
_COLUMN_SET = re.compile(
    rf'ALTER\s+TABLE\s+(?:ONLY\s+)?{_NAME}(?:\.{_NAME})?\s+ALTER\s+COLUMN\s+({_NAME})\s+'
    r'SET\s+(STORAGE|COMPRESSION)\s+("?[A-Za-z0-9_]+"?)\s*;', re.IGNORECASE)


def column_settings(sql: str) -> list[str]:
    """The per-column storage settings a TABLE entry of pg_dump carries after
    its CREATE TABLE (``ALTER TABLE ONLY t ALTER COLUMN c SET STORAGE
    EXTERNAL;``, ``... SET COMPRESSION lz4;``), as ALTER TABLE actions
    (``ALTER COLUMN c SET STORAGE EXTERNAL``) for a clone of the table: they
    decide whether a load compresses its wide values, and so its speed."""
    return [f"ALTER COLUMN {m.group(1)} SET {m.group(2).upper()} {m.group(3)}"
            for m in _COLUMN_SET.finditer(sql)]
