"""What a dump or a restore will have to move, before it runs.

The same inventory the live monitor plans with (the drivers'
plan_tables / plan_archive), so that the advice and the ETA of the run it
advised never disagree about the items: a dump's items are its tables, sized
by pg_class.relpages (heap + TOAST, what pg_dump orders by); a restore's are
the archive's data files and the index and constraint builds that depend on
them (docs/signals.md). The work unit is the heap byte: a restore's data files are
converted from COPY text bytes (the uncompressed size, read from the gzip
trailer without decompressing) with the text/heap ratio.

Catalog only: no pg_relation_size() or any other function that takes a lock
on a user table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import psutil
import psycopg

from .. import sql
from ..analyze.progress import DEFAULT_INDEX_FACTOR, DEFAULT_TEXT_RATIO, Tracker
from ..analyze.schedule import WorkItem
from ..custom_archive import USUAL_RATIO, data_extents, item_texts
from ..custom_archive import row_widths as custom_row_widths
from ..ddl import key_costs, partition_parents, post_data_targets
from ..jobs.base import Job
from ..jobs.tables import plan_tables
from ..jobs.archive_files import ROW_WIDTH_FILES, sample_rows, text_bytes
from ..jobs.pg_restore import INDEX_REF_ROW_BYTES, partitions_under, plan_archive
from ..jobs.registry import driver_for
from ..readers import procs
from ..readers.db import ServerFacts
from ..readers.files import table_file_sizes
from ..toc import TocError, archive_format, list_archive
from .kinds import DUMP, RESTORE
from .large_objects import (
    RESTORE_BYTE_FACTOR,
    RESTORE_OBJECT_BYTES,
    RESTORE_PRE_DATA_SHARE,
    archive_batches,
)
from .large_objects import work_items as lo_work_items


class InventoryError(ValueError):
    """The archive or database cannot be inventoried: one line, what to do."""


@dataclass(frozen=True)
class TableSize:
    name: str  # schema.table, as pg_dump's TOC names it
    schema: str
    relname: str
    relpages: int  # heap + TOAST pages (pg_dump's ordering key)
    heap_bytes: float
    reltuples: float | None = None
    toast_pages: int = 0  # of relpages: its TOAST table's


@dataclass
class Inventory:
    kind: str  # the Kind's name (kinds.py): a dump's or a restore's
    items: list[WorkItem]
    tables: list[TableSize]  # the data items, largest first
    block_size: int = 8192
    archive_format: str | None = None  # restore: directory | custom | tar | plain
    archive_bytes: float | None = None  # restore: the archive's size on disk
    archive_compression: str | None = None  # restore: gzip | lz4 | zstd | none
    notes: list[str] = field(default_factory=list)
    # restore: what the items were planned from (TOC, data files, post-data
    # targets), kept so a measured build cost re-plans without re-reading
    plan_inputs: tuple[Any, ...] | None = field(default=None, repr=False)
    # restore: rows of each table ("schema.table"), estimated from the head of
    # its data file (sample_rows); tables missing: unknown
    rows: dict[str, float] = field(default_factory=dict)
    # restore: foreign keys on partitioned tables that the archive lets
    # pg_restore -j add before their partitions' data ("name on
    # schema.table"; see `fk_before_partitions`)
    early_fks: list[str] = field(default_factory=list)
    early_fk_ids: list[int] = field(default_factory=list)  # their dump ids
    # restore: a btree build's cost a row against an int key's, by dump id
    # (ddl.key_costs; missing: 1)
    key_costs: dict[int, float] = field(default_factory=dict)
    # the large objects' items (large_objects.py), kept apart from the
    # tables' so that a re-plan adds them again
    lo_items: list[WorkItem] = field(default_factory=list)

    def with_index_factor(self, index_factor: float, measured_on: str | None = None
                          ) -> Inventory:
        """The same restore, its builds costed at index_factor x their
        table's load work for a table of rows as wide as `measured_on`'s
        (the table a probe timed its build on; None: INDEX_REF_ROW_BYTES)."""
        if self.plan_inputs is None:  # a dump's: no archive to plan
            return self
        toc, archive_files, post, parents = self.plan_inputs
        ref = self.row_bytes(measured_on) if measured_on else None
        if measured_on:  # the timed build's key: a text key's build teaches an int key's
            index_factor /= self.timed_key_cost(measured_on)
        items, tables = _plan_restore(toc, archive_files, post, index_factor, self.rows,
                                      ref or INDEX_REF_ROW_BYTES, parents, self.key_costs)
        return replace(self, items=items + self.lo_items, tables=tables,
                       notes=list(self.notes))

    def timed_key_cost(self, table: str) -> float:
        """The key cost (`key_costs`) of the build a restore probe times on
        `table`: the first index or primary / unique key on it in the
        archive's script (the one it rebuilds on its temporary table); 1
        when it has none (a btree on its first column) or it is unknown."""
        if self.plan_inputs is None:
            return 1.0
        for dump_id, t in self.plan_inputs[2].items():
            if t.table == table and t.kind in ("index", "primary key", "unique"):
                return self.key_costs.get(dump_id, 1.0)
        return 1.0

    def parallel_builds(self) -> dict[str, tuple[float, float]]:
        """The restore's btree builds on plain columns (ddl.key_columns: no
        expression, no other access method), item key -> the heap bytes of
        the table it builds on and its key cost (`key_costs`): the builds
        the server may give parallel workers (build_workers.py)."""
        if self.plan_inputs is None:
            return {}
        heap = {t.name: t.heap_bytes for t in self.tables}
        items = {it.key for it in self.items}
        out: dict[str, tuple[float, float]] = {}
        for dump_id, t in self.plan_inputs[2].items():
            if not (t.table and t.key and all(t.key)) or str(dump_id) not in items:
                continue
            if heap.get(t.table):
                out[str(dump_id)] = (heap[t.table], self.key_costs.get(dump_id, 1.0))
        return out

    def row_bytes(self, table: str) -> float | None:
        """Heap bytes a row of `table` ("schema.table"), from the rows
        estimated in its data file; None when unknown."""
        rows = self.rows.get(table)
        work = next((t.heap_bytes for t in self.tables if t.name == table), None)
        if not rows or work is None:
            return None
        return work / rows

    @property
    def data_bytes(self) -> float:
        return sum(t.heap_bytes for t in self.tables)

    @property
    def total_work(self) -> float:
        return sum(it.work for it in self.items)

    @property
    def largest(self) -> WorkItem | None:
        return max(self.items, key=lambda it: it.work, default=None)

    def label(self, key: str | None) -> str:
        for it in self.items:
            if it.key == key:
                return it.label or it.key
        return key or "?"

    def to_json(self) -> dict[str, Any]:
        big = self.largest
        return {"kind": self.kind, "items": len(self.items), "tables": len(self.tables),
                "data_bytes": round(self.data_bytes), "work_bytes": round(self.total_work),
                "largest_item": big.label if big else None,
                "largest_item_bytes": round(big.work) if big else None,
                "archive_format": self.archive_format,
                "archive_bytes": None if self.archive_bytes is None else round(self.archive_bytes),
                "archive_compression": self.archive_compression}


def _work_items(tr: Tracker) -> list[WorkItem]:
    return [it.work_item(it.work) for it in tr.items.values()]


def server_is_local(facts: ServerFacts) -> bool:
    """The server runs on this host: its files, memory and disks are ours."""
    return procs.server_is_local(facts.backend_pid)


def dump_inventory(conn: psycopg.Connection[Any], facts: ServerFacts,
                   local: bool) -> Inventory:
    row = conn.execute(sql.load("tables", facts.version_num)).fetchone()
    tables: list[list[Any]] = (row[0] if row else None) or []
    tr = Tracker(Job(kind=DUMP.tool, database=facts.database), driver_for(DUMP.tool),
                 block_size=facts.block_size)
    sizes = table_file_sizes(facts.data_directory if local else None, tables)
    plan_tables(tr, None, tables, sizes)
    info = {f"{t[1]}.{t[2]}": t for t in tables}
    out: list[TableSize] = []
    unsized = 0
    for it in tr.items.values():
        t = info.get(it.relation or "")
        relpages = int((t[4] or 0) + (t[6] or 0)) if t else 0
        if relpages <= 0 and (it.relation or "") not in sizes:
            unsized += 1
        out.append(TableSize(name=it.relation or it.key, schema=str(t[1]) if t else "",
                             relname=str(t[2]) if t else it.key, relpages=relpages,
                             heap_bytes=it.work, reltuples=it.reltuples,
                             toast_pages=int(t[6] or 0) if t else 0))
    out.sort(key=lambda t: -t.heap_bytes)
    inv = Inventory(DUMP.name, _work_items(tr), out, block_size=facts.block_size)
    if unsized:
        inv.notes.append(f"{unsized} table(s) were never vacuumed or analyzed (relpages 0): "
                         "their size is unknown to the catalog; run ANALYZE for better advice")
    return inv


def _archive_files(archive: str, toc: list[Any]
                   ) -> tuple[dict[str, tuple[str | None, float]], str | None, float,
                              dict[str, float]]:
    files: dict[str, tuple[str | None, float]] = {}
    rows: dict[str, float] = {}
    kinds: set[str] = set()
    on_disk = 0.0
    framed: list[tuple[int, str, float, str]] = []  # lz4 / zstd: (size, path, text, table)
    for it in toc:
        if it.desc != "TABLE DATA":
            continue
        for ext in (".dat", ".dat.gz", ".dat.lz4", ".dat.zst"):
            p = os.path.join(archive, f"{it.dump_id}{ext}")
            try:
                size = os.stat(p).st_size
            except OSError:
                continue
            text, comp = text_bytes(p, size)
            kinds.add(comp)
            on_disk += size
            # the work unit is the heap byte: COPY text is ~DEFAULT_TEXT_RATIO of it
            files[str(it.dump_id)] = (p, max(text / DEFAULT_TEXT_RATIO, 1.0))
            if it.schema is not None and comp in ("lz4", "zstd"):
                framed.append((size, p, text, f"{it.schema}.{it.tag}"))
                break
            n = sample_rows(p, text) if it.schema is not None else None
            if n:
                rows[f"{it.schema}.{it.tag}"] = n
            break
    # an lz4 or zstd file's rows cost a subprocess: the largest files' only
    # (a build on a small table is short whatever its rows)
    for _, p, text, rel in sorted(framed, reverse=True)[:ROW_WIDTH_FILES]:
        n = sample_rows(p, text)
        if n:
            rows[rel] = n
    compression = kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else None)
    return files, compression, on_disk, rows


# A foreign key's check reads the rows of its table and, for each partition
# of it (or the table itself), hashes the keys of the referenced table: about
# 0.3 us per row of each on this project's VM (bench/restore_row_cost.py: a
# self-referencing int key on 2.56M rows, 1.63 s; a partitioned table's key
# over 1.2M rows into 8 x 600k, 1.4 s), which is 0.64x the load of a row
# INDEX_REF_ROW_BYTES wide.
FK_ROW_FACTOR = 0.64


def _rows_under(table: str, rows: dict[str, float],
               parents: dict[str, str] | None) -> tuple[float, int] | None:
    """(rows, tables holding them) of a table or, partitioned, of all its
    partitions; None when a table's rows are unknown."""
    if table in rows:
        return rows[table], 1
    parts = [r for r in partitions_under(table, parents or {}) if r in rows]
    if not parts:
        return None
    return sum(rows[r] for r in parts), len(parts)


def _plan_restore(toc: list[Any], files: dict[str, tuple[str | None, float]],
                  targets: dict[int, Any], index_factor: float | None,
                  rows: dict[str, float] | None = None,
                  ref_row_bytes: float = INDEX_REF_ROW_BYTES,
                  parents: dict[str, str] | None = None,
                  key_costs: dict[int, float] | None = None
                  ) -> tuple[list[WorkItem], list[TableSize]]:
    tr = Tracker(Job(kind=RESTORE.tool, database=None), driver_for(RESTORE.tool))
    if index_factor is not None and index_factor > 0:
        tr.index_factor = index_factor
    # index and unique/primary key builds: per row of their table
    heap = {f"{t.schema}.{t.tag}": files[str(t.dump_id)][1] for t in toc
            if t.desc == "TABLE DATA" and t.schema is not None and str(t.dump_id) in files}
    widths = {rel: heap[rel] / n for rel, n in (rows or {}).items() if n and heap.get(rel)}
    plan_archive(tr, toc, files, targets, parents, row_bytes=widths,
                 ref_row_bytes=ref_row_bytes, key_costs=key_costs)
    if rows:
        # a key's check per row follows a build per row (both are the
        # server's work on each row, not the load's per-byte parsing): at
        # the defaults FK_ROW_FACTOR x a reference row's load; with a build
        # timed by the probe, that build's cost a row, x the same ratio
        fk_row = (FK_ROW_FACTOR / DEFAULT_INDEX_FACTOR * (index_factor or DEFAULT_INDEX_FACTOR)
                  * ref_row_bytes)
        for it in tr.items.values():
            if it.kind != "fk" or not it.relation:
                continue
            tgt = targets.get(int(it.key)) if it.key.isdigit() else None
            child = _rows_under(it.relation, rows, parents)
            if child is None:
                continue
            parent = _rows_under(tgt.references, rows, parents) if tgt and tgt.references \
                else None
            it.work = max(fk_row * (child[0] + child[1] * (parent[0] if parent else 0.0)),
                          1.0)
    tables = sorted((TableSize(name=it.relation or it.key,
                               schema=(it.relation or ".").split(".")[0],
                               relname=(it.relation or it.key).split(".")[-1], relpages=0,
                               heap_bytes=it.work)
                     for it in tr.items.values() if it.kind == "data"),
                    key=lambda t: -t.heap_bytes)
    return _work_items(tr), tables


def fk_before_partitions(toc: list[Any], targets: dict[int, Any],
                         parents: dict[str, str]) -> list[tuple[int, str]]:
    """Foreign keys on a partitioned table whose archive dependencies do not
    include its partitions' data: pg_dump (14-18 measured) makes such a key
    depend on the parent, which holds no rows, and the referenced key, so
    pg_restore -j 2+ runs it as soon as the referenced key is built, often
    before the partitions load; every row loaded after it is then checked
    one at a time. (dump id, "name on schema.table"), in archive order."""
    data_ids = {f"{it.schema}.{it.tag}": it.dump_id for it in toc
                if it.desc == "TABLE DATA" and it.schema is not None}
    out = []
    for dump_id, t in targets.items():
        if t.kind != "foreign key" or not t.table:
            continue
        parts = [data_ids[p] for p in partitions_under(t.table, parents) if p in data_ids]
        if parts and not set(parts) <= set(t.dependencies):
            out.append((int(dump_id), f"{t.object_name or t.name} on {t.table}"))
    return out


def restore_inventory(archive: str, pg_restore: str | None = None,
                      index_factor: float | None = None) -> Inventory:
    """Items of `pg_restore -j` from an archive (no server needed).
    index_factor: an index or constraint build's work per byte of its
    table's data, in COPY work units (a measured one replaces the default)."""
    fmt = archive_format(archive)
    if fmt is None:
        if not os.path.exists(archive):
            raise InventoryError(f"{archive}: no such file or directory (give the dump "
                                 "directory or custom-format file with --archive)")
        raise InventoryError(f"{archive} is not a pg_dump archive (no toc.dat, no PGDMP "
                             "header): give a -Fd directory or a -Fc file with --archive")
    size = _path_size(archive)
    if fmt in ("plain", "tar"):
        inv = Inventory(RESTORE.name, [], [], archive_format=fmt, archive_bytes=size)
        return inv
    try:
        _, toc = list_archive(archive, pg_restore=pg_restore)
    except TocError as exc:
        raise InventoryError(f"cannot read the archive {archive}: {exc}") from None
    try:
        targets = post_data_targets(archive, pg_restore=pg_restore)
    except TocError:
        targets = {}
    try:
        parents = partition_parents(archive, toc, pg_restore=pg_restore)
    except TocError:
        parents = {}
    try:
        keys = key_costs(archive, targets, toc, pg_restore=pg_restore)
    except TocError:
        keys = {}
    comp: str | None
    rows: dict[str, float] = {}
    extents, measured, per_text = None, {}, 1.0
    if fmt == "directory":
        files, comp, _, rows = _archive_files(archive, toc)
    else:
        # A custom archive: each item's data length from its TOC's offsets
        # (custom_archive.py, as pg_restore -j computes it), its text the
        # length over the archive bytes a text byte, read from the start of
        # the largest items' data (gzip or none; else the algorithm's usual
        # ratio); an archive written to a pipe has no offsets: its size
        # spread evenly (the advice says so).
        data = [it for it in toc if it.desc == "TABLE DATA"]
        extents = data_extents(archive)
        comp = None
        if extents is not None:
            comp = extents.compression
            text, measured = item_texts(archive, extents, {it.dump_id for it in data})
            per_text = USUAL_RATIO.get(comp, USUAL_RATIO["gzip"])
            files = {str(it.dump_id): (None, max(text[it.dump_id] / DEFAULT_TEXT_RATIO, 1.0))
                     for it in data if it.dump_id in text}
            # rows (builds follow rows): the largest tables' text over the
            # width of their first rows, as a directory archive's files say
            names = {it.dump_id: f"{it.schema}.{it.tag}" for it in data
                     if it.schema is not None and it.dump_id in text}
            widths = custom_row_widths(archive, extents, names)
            rows = {rel: text[k] / widths[rel] for k, rel in names.items() if rel in widths}
        else:
            each = max(size / USUAL_RATIO["gzip"] / DEFAULT_TEXT_RATIO
                       / max(1, len(data)), 1.0)
            files = {str(it.dump_id): (None, each) for it in data}
    items, tables = _plan_restore(toc, files, targets, index_factor, rows,
                                  parents=parents, key_costs=keys)
    batches, lo_notes = archive_batches(archive, toc,
                                        extents.by_id if extents is not None else None)
    # the objects' metadata is the pre-data's (the serial part: strategies.py)
    lo = lo_work_items(batches, RESTORE_OBJECT_BYTES * (1 - RESTORE_PRE_DATA_SHARE),
                       RESTORE_BYTE_FACTOR)
    early = fk_before_partitions(toc, targets, parents)
    inv = Inventory(RESTORE.name, items + lo, tables, archive_format=fmt, archive_bytes=size,
                    archive_compression=comp, plan_inputs=(toc, files, targets, parents),
                    rows=rows, early_fks=[n for _, n in early],
                    early_fk_ids=[i for i, _ in early], key_costs=keys, lo_items=lo,
                    notes=lo_notes)
    if fmt == "custom" and extents is None:
        inv.notes.append("this custom-format archive has no data offsets (pg_dump wrote it "
                         "to a pipe): its tables' sizes are unknown and taken as equal, so "
                         "the largest-table bound is unknown")
    elif fmt == "custom" and extents is not None and not measured:
        inv.notes.append(f"a custom-format archive ({extents.compression}): each table's size "
                         f"is its data's length in the archive over {per_text}, "
                         f"{extents.compression}'s usual ratio on table data, not measured")
    return inv


def _path_size(path: str) -> float:
    if os.path.isdir(path):
        total = 0
        for entry in os.scandir(path):
            try:
                total += entry.stat().st_size
            except OSError:
                continue
        return float(total)
    try:
        return float(os.path.getsize(path))
    except OSError:
        return 0.0


def read_advise_facts(conn: psycopg.Connection[Any], facts: ServerFacts) -> dict[str, Any]:
    row = conn.execute(sql.load("advise", facts.version_num)).fetchone()
    return dict(row[0]) if row and row[0] else {}


def setting_bytes(settings: dict[str, Any], name: str) -> float | None:
    """A memory/size setting in bytes from pg_settings' (setting, unit)."""
    v = settings.get(name)
    if not v:
        return None
    value, unit = (v[0], v[1]) if isinstance(v, list) else (v, None)
    try:
        n = float(value)
    except (TypeError, ValueError):
        return None
    mult = {"B": 1, "kB": 1024, "8kB": 8192, "16kB": 16384, "32kB": 32768, "MB": 1024 ** 2,
            "16MB": 16 * 1024 ** 2, "GB": 1024 ** 3}.get(unit or "B")
    return None if mult is None else n * mult


def setting_int(settings: dict[str, Any], name: str) -> int | None:
    v = settings.get(name)
    if v is None:
        return None
    value = v[0] if isinstance(v, list) else v
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def setting_str(settings: dict[str, Any], name: str) -> str | None:
    v = settings.get(name)
    if v is None:
        return None
    return str(v[0] if isinstance(v, list) else v)


def available_memory() -> float:
    return float(psutil.virtual_memory().available)


__all__ = ["Inventory", "InventoryError", "TableSize", "available_memory", "dump_inventory",
           "read_advise_facts", "restore_inventory", "server_is_local", "setting_bytes",
           "setting_int", "setting_str"]
