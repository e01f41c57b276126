"""A database's large objects as a dump's items (the live plan and the advice).

pg_dump writes large objects in archive items of their own ("BLOBS" in the
TOC): one for all of them before pg_dump 17, one for each batch of up to
1000 (`LO_BATCH`) from 17. In a -Fd archive each object is a file
(`blob_OID.dat`, compressed as the dump), and each item's list of its
objects is `blobs.toc` (before 17) or `blobs_<dump id>.toc`, written as the
objects are. An object costs far more than its bytes (docs/advise.md,
"Large objects"; `bench/large_objects.py`): its work is one object's worth
plus its bytes, in a table's data bytes (the dump's work unit).

The live view follows such an item by its list file: open in a worker, it
runs; closed, it is done; and how far by the object files written (the
sample counts them in one entry, `LO_FILES`, source.dir_sizes).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..item_kinds import ItemKind

LO_BATCH = 1000  # pg_dump 17+: the most objects an archive item holds
BATCHED_SINCE = 17
# bench/large_objects.py, on this project's VM (pg_dump -Fd with gzip,
# pg_restore): an object's fixed cost and a byte's, in bytes of a table's data
DUMP_OBJECT_BYTES = 49e3
DUMP_BYTE_FACTOR = 0.98
RESTORE_OBJECT_BYTES = 57e3
RESTORE_BYTE_FACTOR = 1.28
DATA_DESCS = ("BLOBS", "LARGE OBJECTS")
LO_ITEM = ItemKind("large objects", "large-object items")
# a -Fd archive's file of one object (compressed as the dump: .gz, .lz4,
# .zst): a database of many has hundreds of thousands of them, and the
# sample counts them in one entry (source.dir_sizes): this name, its `size`
# how many there are (their bytes would cost a stat each)
LO_FILE = re.compile(r"blob_[0-9]+\.dat(\.gz|\.lz4|\.zst)?$")
LO_FILES = "blob_*"


def object_work(count: float, data_bytes: float | None, object_bytes: float,
                byte_factor: float) -> float:
    """The work of `count` objects of `data_bytes` (None: unknown): one
    object's worth each and their bytes at the byte factor."""
    return max(1.0, count * object_bytes + (data_bytes or 0.0) * byte_factor)


def dump_work(count: float, data_bytes: float | None) -> float:
    """A dump's work for `count` objects of `data_bytes` (None: unknown)."""
    return object_work(count, data_bytes, DUMP_OBJECT_BYTES, DUMP_BYTE_FACTOR)


def oid_span(tag: str | None) -> int | None:
    """How many objects a pg_dump 17+ entry's tag "FIRST..LAST" (an OID
    range of up to LO_BATCH objects; sparse OIDs: fewer) can hold; None
    when the tag is no range."""
    lo, _, hi = (tag or "").partition("..")
    if not (lo.isdigit() and hi.isdigit()):
        return None
    return max(1, min(LO_BATCH, int(hi) - int(lo) + 1))


def batch_counts(entries: Sequence[Any], total: int) -> list[int]:
    """How many objects each of a dump's large-object TOC entries holds:
    one entry holds them all; several (pg_dump 17+, tags "FIRST..LAST" OID
    ranges of up to LO_BATCH objects) by their ranges, scaled to `total`."""
    if not entries:
        return []
    if len(entries) == 1:
        return [total]
    spans = [oid_span(getattr(t, "tag", None)) or LO_BATCH for t in entries]
    whole = sum(spans)
    if total <= 0 or whole <= 0:
        return spans
    return [max(1, round(s * total / whole)) for s in spans]


def list_files(dump_id: str, single: bool) -> tuple[str, ...]:
    """The names a large-object item's list of objects may have in the
    dump's directory: `blobs_<id>.toc` (pg_dump 17+), and `blobs.toc`
    before 17, when the dump has one such item (`single`)."""
    return (f"blobs_{dump_id}.toc", "blobs.toc") if single else (f"blobs_{dump_id}.toc",)
