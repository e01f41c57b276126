"""A database's large objects in a dump's or a restore's advice.

pg_dump writes large objects in archive items of their own, apart from the
tables: before pg_dump 17 one item ("BLOBS") holds all of them, so one
worker dumps (and pg_restore -j restores) every large object while the
others have nothing of them to share; from 17 an item holds at most 1000
(`LO_BATCH`), and the items spread over the workers. A dump's items
carry no size: pg_dump hands them out after the tables (pg_dump 17 was
seen handing its batches out before a small table; the advice puts them
last all the same). pg_restore sizes a directory archive's item by its
list file, x 1024, and hands it out among the largest items.

An object costs far more than its bytes: pg_dump opens, reads and closes
each one and, in a -Fd archive, writes (and at the end fsyncs) a file for
each; pg_restore creates, opens, writes and closes each one. Measured on
this project's VM (`bench/large_objects.py`, pg_dump -Fd with gzip and
pg_restore, 40 MB of objects of 2 kB, 40 kB and 2 MB against a table of
the same bytes): about 0.97 ms an object to dump and 0.75 ms to restore,
the cost of 49 kB and 57 kB of a table's data, and their bytes at 0.98x
and 1.28x a table's. So an object's work is its bytes x the byte factor
plus one object's worth, in the tables' work unit (heap bytes): 20,000
objects of 2 kB dump in the time of about 1 GB of table.

What the advice reads: for a dump, the objects' count (pg_largeobject_
metadata) and the pages pg_largeobject fills (pg_class: data the server
compressed counts compressed, and never vacuumed it counts nothing, said
in a note); for a restore, the archive's own lists of them
(`blobs.toc`, `blobs_<id>.toc` from 17) and their files' sizes, in a
directory archive (a custom archive's objects are counted from its TOC,
their bytes taken as their item's length in it: compressed, a floor).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..analyze.schedule import WorkItem
from ..jobs.large_objects import (  # noqa: F401 (re-exported for the advice)
    BATCHED_SINCE,
    DATA_DESCS,
    DUMP_BYTE_FACTOR,
    DUMP_OBJECT_BYTES,
    LO_BATCH,
    RESTORE_BYTE_FACTOR,
    RESTORE_OBJECT_BYTES,
    RESTORE_PRE_DATA_S,
    RESTORE_PRE_DATA_SHARE,
    archive_listings,
    metadata_listing,
    object_work,
    oid_span,
)
from .. import units as fmt

# the constants and the archive's reading are the live plan's too
# (jobs/large_objects.py)


@dataclass(frozen=True)
class LoBatch:
    """One archive item of large objects: its key, how many, their bytes
    (None: unknown)."""

    key: str
    count: int
    bytes: float | None
    # the size the tool hands the item out by (largest first): a dump's
    # none (last), a directory archive's restore its list's bytes x 1024
    size: float = 0.0


def work_items(batches: Sequence[LoBatch], object_bytes: float, byte_factor: float
               ) -> list[WorkItem]:
    """The batches as schedule items, at their size (LoBatch.size), their
    work in the tables' unit."""
    out = []
    for b in batches:
        label = f"large objects ({b.count}" + (f", {fmt.size(b.bytes)})" if b.bytes else ")")
        out.append(WorkItem(key=b.key, work=object_work(b.count, b.bytes, object_bytes,
                                                        byte_factor),
                            size=b.size, label=label))
    return out


def dump_batches(facts: dict[str, Any] | None, block_size: int, pg_dump_major: int | None
                 ) -> tuple[list[LoBatch], list[str]]:
    """The large objects of a database as pg_dump will itemise them (from
    advise's query: their count and pg_largeobject's pages), and notes."""
    count = int((facts or {}).get("count") or 0)
    if count <= 0:
        return [], []
    pages = int((facts or {}).get("pages") or 0)
    total = float(pages * block_size) if pages > 0 else None
    notes = []
    if total is None:
        notes.append(f"{count} large object(s), their size unknown (pg_largeobject never "
                     "vacuumed or analyzed: relpages 0): counted by their number alone")
    batched = pg_dump_major is not None and pg_dump_major >= BATCHED_SINCE
    n = math.ceil(count / LO_BATCH) if batched else 1
    out = []
    for i in range(n):
        c = min(LO_BATCH, count - i * LO_BATCH) if batched else count
        out.append(LoBatch(f"large objects {i + 1}", c,
                           total * c / count if total is not None else None))
    how = (f"in {n} item(s) of up to {LO_BATCH} (pg_dump {pg_dump_major})" if batched
           else "in one item, one worker (pg_dump before 17)")
    notes.append(f"{count} large object(s)"
                 + (f", {fmt.size(total)} in pg_largeobject" if total else "")
                 + f", dumped {how} after the tables")
    return out, notes


def archive_batches(archive: str, toc: Sequence[Any],
                    extents: dict[int, tuple[int, int]] | None = None
                    ) -> tuple[list[LoBatch], list[str]]:
    """The large-object data items of an archive (jobs.large_objects.
    archive_listings: a directory archive's lists of objects and their
    files; else counted from the TOC's metadata entries). A custom
    archive's item with an extent (`extents`: dump id -> (offset, length),
    custom_archive.data_extents) is sized by its length, as pg_restore -j
    sizes it, and its objects' bytes taken as that length (their data
    compressed: at least that much; unknown without it)."""
    # pg_restore sizes a directory archive's item by its list, x 1024, a
    # custom archive's by its data's length (_PrepParallelRestore), and
    # hands it out among the largest
    out = []
    lengths = 0
    for li in archive_listings(archive, toc):
        ext = (extents or {}).get(int(li.key)) if li.key.isdigit() else None
        if ext is not None and li.bytes is None:
            out.append(LoBatch(li.key, li.count, float(ext[1]), float(ext[1])))
            lengths += 1
        else:
            out.append(LoBatch(li.key, li.count, li.bytes, float(li.list_bytes * 1024)))
    if not out:
        return [], []
    count = sum(b.count for b in out)
    known = [b.bytes for b in out if b.bytes is not None]
    note = (f"{count} large object(s)" + (f", {fmt.size(sum(known))}," if known else "")
            + f" in {len(out)} item(s)"
            + (": one worker restores them all" if len(out) == 1 else ""))
    if lengths:
        note += (" (their bytes taken as their data's length in the archive, compressed: "
                 "at least that much)")
    elif not known:
        note += " (their bytes are not in the archive's TOC: counted by their number)"
    return out, [note]
