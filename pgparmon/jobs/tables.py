"""Tables as work items, shared by the drivers that move whole tables (a
dump, a COPY copy between databases planned from the source's catalog, a
subscription's sync): the plan of a table list sized from pg_class, a
table's progress under one COPY, and the cost of a foreign key's
validation beside loading its table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..analyze.items import Item
from ..snapshot import CopyProgress
from ..toc import TocItem

if TYPE_CHECKING:
    from ..analyze.progress import Tracker

# A foreign key's validation costs about this share of loading its table
DEFAULT_FK_FACTOR = 0.15


def table_progress(tr: Tracker, it: Item, cp: CopyProgress) -> None:
    """A table item sized from pg_class, advanced by one COPY of it: rows
    over reltuples, else COPY bytes over its heap size times the text/heap
    ratio learned from finished tables."""
    if it.reltuples:
        frac = cp.tuples_processed / it.reltuples
    else:
        frac = cp.bytes_processed / max(1.0, (it.heap_bytes or 1.0) * tr.text_ratio)
    it.done = max(it.done, min(0.99, frac) * it.work)


def plan_tables(tr: Tracker, toc: list[TocItem] | None, tables: list[list[Any]],
                file_sizes: dict[str, float] | None = None) -> None:
    """Items of a dump: its TOC's TABLE DATA entries (or, when the TOC is not
    readable, every user table), sized from pg_class like pg_dump does;
    tables never vacuumed (relpages 0) by their files' size when known."""
    info: dict[str, list[Any]] = {f"{t[1]}.{t[2]}": t for t in tables}
    sizes = file_sizes or {}
    wanted: list[tuple[str, str]] = []
    if toc is not None:
        for it in toc:
            if it.desc == "TABLE DATA" and it.schema is not None:
                wanted.append((str(it.dump_id), f"{it.schema}.{it.tag}"))
    else:
        wanted = [(rel, rel) for rel, t in info.items() if t[3] in ("r", "m")]
    for key, rel in wanted:
        t = info.get(rel)
        relpages = (t[4] or 0) + (t[6] or 0) if t else 0
        heap = float(relpages * tr.block_size) if relpages > 0 else None
        heap = heap or sizes.get(rel) or float(tr.block_size)
        reltuples = float(t[5]) if t and t[5] is not None and t[5] > 0 else None
        tr.add(Item(key=key, kind="data", relation=rel, name=rel, size=relpages or heap,
                    work=heap, reltuples=reltuples, heap_bytes=heap))
    tr.mark_planned()
