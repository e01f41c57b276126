"""Which of an archive's items one pg_restore run restores.

pg_restore's own rule (pg_backup_archiver.c, `_tocEntryRequired`), for the
items the live monitor plans (a table's data; an index, key or foreign key
built after it) and the tables they belong to:

- `--section` (repeatable; all three when none): a table's data is in the
  data section, its definition in pre-data, builds in post-data;
- `-L FILE`: only the listed dump ids (jobs.restore_list reads the file);
- `-n SCHEMA` (only those schemas) and `-N SCHEMA` (not those);
- `-t`, `-I`, `-P`, `-T` name the kinds restored at all: with any of them,
  tables (definition and data) only with `-t` (and then only the tables it
  names, by name without schema), indexes only with `-I` (those named), and
  no key and no foreign key, which no option selects;
- `-a` / `--data-only` (and pg_restore 18's `--no-schema`) restores data
  alone, `-s` / `--schema-only` (and `--no-data`) no data,
  `--statistics-only` neither.

A step of a restore run in sections (`--section=data`, then
`--section=post-data`) so plans only its own items: the data step ends
with its loads, not with the index builds the next step runs. A build is
sized by its table's data in the archive, loaded by this run or by an
earlier one, except where this run creates the table and loads no data
into it (`-s`): the table is empty then, and so is the build.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..cmdline import ClientArgs
from ..toc import DATA_DESCS, TocItem

SECTIONS = ("pre-data", "data", "post-data")
# the kinds the plan tracks, and the section each is in
BUILD_DESCS = frozenset({"INDEX", "CONSTRAINT", "FK CONSTRAINT"})
# -t selects these kinds (by their tag, the object's name)
_TABLE_LIKE = frozenset({"TABLE", "TABLE DATA", "VIEW", "FOREIGN TABLE", "MATERIALIZED VIEW",
                         "MATERIALIZED VIEW DATA", "SEQUENCE", "SEQUENCE SET"})
_DATA_KINDS = DATA_DESCS | {"SEQUENCE SET", "MATERIALIZED VIEW DATA"}


def section_of(desc: str) -> str:
    """The section pg_dump puts an item of this kind in (of those the plan
    reads: data, builds, tables). A materialized view's data is refreshed
    after the indexes it may use: post-data, though data to -a and -s."""
    if desc in BUILD_DESCS or desc == "MATERIALIZED VIEW DATA":
        return "post-data"
    if desc in _DATA_KINDS:
        return "data"
    return "pre-data"


@dataclass(frozen=True)
class Selection:
    """What one pg_restore command line restores (see the module's rule)."""

    sections: frozenset[str] = frozenset(SECTIONS)
    listed: frozenset[int] | None = None  # -L: the dump ids listed
    schemas: frozenset[str] = frozenset()
    exclude_schemas: frozenset[str] = frozenset()
    by_kind: bool = False  # -t, -I, -P or -T given
    tables: frozenset[str] | None = None  # -t names (None: -t not given)
    indexes: frozenset[str] | None = None  # -I names
    data: bool = True
    schema: bool = True

    @classmethod
    def of(cls, args: ClientArgs | None, listed: frozenset[int] | None = None) -> Selection:
        if args is None:
            return cls(listed=listed)
        opts = args.options

        def named(key: str) -> frozenset[str] | None:
            vals = [v for k, v in opts if k == key and v is not None]
            return frozenset(vals) if vals else None

        keys = {k for k, _ in opts}
        sections = frozenset(s for s in args.sections if s in SECTIONS) or frozenset(SECTIONS)
        stats_only = "statistics-only" in keys
        return cls(
            sections=sections, listed=listed,
            schemas=named("schema") or frozenset(),
            exclude_schemas=named("exclude-schema") or frozenset(),
            by_kind=bool(keys & {"table", "index", "function", "trigger"}),
            tables=named("table"), indexes=named("index"),
            data=not (args.schema_only or "no-data" in keys or stats_only),
            schema=not (args.data_only or "no-schema" in keys or stats_only))

    @property
    def everything(self) -> bool:
        """No option narrows the restore."""
        return self == Selection()

    def wants(self, it: TocItem) -> bool:
        """Whether this run restores the item."""
        if section_of(it.desc) not in self.sections:
            return False
        if self.listed is not None and it.dump_id not in self.listed:
            return False
        if self.schemas and (it.schema is None or it.schema not in self.schemas):
            return False
        if it.schema is not None and it.schema in self.exclude_schemas:
            return False
        if self.by_kind and not self._kind_named(it):
            return False
        return self.data if it.desc in _DATA_KINDS else self.schema

    def _kind_named(self, it: TocItem) -> bool:
        if it.desc in _TABLE_LIKE:
            return self.tables is not None and (not self.tables or it.tag in self.tables)
        if it.desc == "INDEX":
            return self.indexes is not None and (not self.indexes or it.tag in self.indexes)
        return False  # keys, foreign keys: no option selects them

    def restored(self, toc: Iterable[TocItem]) -> tuple[set[int], set[str]]:
        """The dump ids of the data and builds this run restores, and the
        tables it creates without loading (their builds are on empty
        tables)."""
        return restored_by([self], toc)

    def describe(self, args: ClientArgs | None) -> str:
        """The options that narrow the restore, as the command line gave
        them (for a note)."""
        if args is None:
            return ""
        shown = []
        for k, v in args.options:
            if k in ("section", "use-list", "schema", "exclude-schema", "table", "index",
                     "function", "trigger"):
                shown.append(f"--{k}={v}" if v is not None else f"--{k}")
            elif k in ("data-only", "schema-only", "no-data", "no-schema", "statistics-only"):
                shown.append(f"--{k}")
        return " ".join(shown)


def restored_by(sels: Iterable[Selection], toc: Iterable[TocItem]) -> tuple[set[int], set[str]]:
    """The dump ids of the data and builds some of these runs restore (the
    steps of one restore), and the tables one of them creates that none
    loads (their builds are on empty tables)."""
    sels, toc = list(sels), list(toc)

    def any_wants(t: TocItem) -> bool:
        return any(sel.wants(t) for sel in sels)

    ids = {t.dump_id for t in toc if (t.desc in DATA_DESCS or t.desc in BUILD_DESCS)
           and any_wants(t)}
    created = {t.relation for t in toc if t.desc == "TABLE" and t.relation and any_wants(t)}
    loaded = {t.relation for t in toc if t.desc == "TABLE DATA" and t.relation and any_wants(t)}
    return ids, {r for r in created - loaded if r}


def step_parts(sels: list[Selection], current: int, toc: Iterable[TocItem]) -> dict[int, int]:
    """The steps of one restore, in order, the one running now at
    `current`: the dump ids of the data and builds a later step restores,
    each with how many steps after this one it runs (1: the next). An item
    this step or an earlier one restores is in none (this step's work, or
    done before it); pg_restore starts a step only when the one before has
    ended, so a later step's builds never run beside this step's loads."""
    out: dict[int, int] = {}
    for t in toc:
        if t.desc not in DATA_DESCS and t.desc not in BUILD_DESCS:
            continue
        if any(sel.wants(t) for sel in sels[:current + 1]):
            continue
        k = next((i for i in range(current + 1, len(sels)) if sels[i].wants(t)), None)
        if k is not None:
            out[t.dump_id] = k - current
    return out
