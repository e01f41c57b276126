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

import bisect
import math
import os
import re
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analyze.bottleneck import Verdict
from ..item_kinds import ItemKind
from ..phases import Phase
from .archive_files import text_bytes

if TYPE_CHECKING:
    from ..analyze.items import WorkerState
    from ..analyze.progress import Tracker

LO_BATCH = 1000  # pg_dump 17+: the most objects an archive item holds
BATCHED_SINCE = 17
# bench/large_objects.py, on this project's VM (pg_dump -Fd with gzip,
# pg_restore): an object's fixed cost and a byte's, in bytes of a table's data
DUMP_OBJECT_BYTES = 49e3
DUMP_BYTE_FACTOR = 0.98
RESTORE_OBJECT_BYTES = 57e3
RESTORE_BYTE_FACTOR = 1.28
# of which pg_restore spends in its pre-data, where it creates each object
# (lo_create, its owner) one statement after another before any worker
# starts: 365 us of 812 us an object (bench/large_objects.py, its restore in
# two runs; docs/bench/large_objects_split.json)
RESTORE_PRE_DATA_SHARE = 0.45
RESTORE_PRE_DATA_S = 365e-6  # seconds an object, the same runs
DATA_DESCS = ("BLOBS", "LARGE OBJECTS")
LO_ITEM = ItemKind("large objects", "large-object items")
# a restore's pre-data part of them: every object's metadata
LO_META_ITEM = ItemKind("large-object metadata", "large-object metadata")
# a session that moves large objects: between fastpath calls it reads as
# idle (in its transaction), and its row would say so
LO_PHASE = Phase("large-objects", 60, busy=True, tui=("white on dark_goldenrod",
                                                      "black on light_goldenrod2"),
                 fill="#c9a227")
# what such a session shows: libpq looks up the large-object functions once
# a connection (the last query it sends), then calls them by the fastpath;
# pg_dump before 17 fetches the objects' OIDs through a cursor
LO_LOOKUP = "select proname, oid from pg_catalog.pg_proc where proname in ('lo_open'"
# a -Fd archive's file of one object (compressed as the dump: .gz, .lz4,
# .zst): a database of many has hundreds of thousands of them, and the
# sample counts them in one entry (source.dir_sizes): this name, its `size`
# how many there are (their bytes would cost a stat each)
LO_FILE = re.compile(r"blob_[0-9]+\.dat(\.gz|\.lz4|\.zst)?$")
LO_FILES = "blob_*"
# an item's list of its objects (list_files: blobs.toc, blobs_<id>.toc from 17)
LO_LIST = re.compile(r"blobs(_[0-9]+)?\.toc$")


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


def verdict(tr: Tracker, what: str, tool: str) -> Verdict | None:
    """While only large objects are worked on (no worker copies a table or
    builds): what they are, not "every session is idle" (their sessions sit
    between the fastpath calls that move them). `what`: what the tool does
    with each one."""
    keys = tr.keys_of(LO_ITEM.name)
    running = [tr.items[k] for k in keys if tr.items[k].state == "running"]
    if not running or any(w.phase in ("copy", "index", "constraint")
                          for w in tr.workers.values()):
        return None
    objects = sum(int(tr.items[k].reltuples or 0) for k in keys)
    done = sum(int((it.reltuples or 0) * it.fraction) for it in (tr.items[k] for k in keys))
    one = (f"one worker does them all ({tool} before 17 puts them in one item)"
           if len(keys) == 1 else f"{len(running)} of their {len(keys)} items at once")
    return Verdict("large-objects", f"large objects: {tool} {what}, about {done} of "
                                    f"{objects} done; {one}")


def moves_objects(w: WorkerState, also: tuple[str, ...] = ()) -> bool:
    """A session in an item of large objects: in a fastpath call, or idle
    in its transaction after libpq's lookup of the functions or one of the
    tool's own statements `also` (lower case)."""
    if w.state == "fastpath function call":
        return True
    q = (w.query or "").lstrip().lower()
    return w.state == "idle in transaction" and (q.startswith(LO_LOOKUP)
                                                 or any(q.startswith(a) for a in also))


def label_workers(tr: Tracker, also: tuple[str, ...] = ()) -> int:
    """While a large-object item runs, its sessions' rows say so (phase
    `large-objects`, not idle): the sessions on no other item that move
    objects (`moves_objects`). Returns how many."""
    if not any(tr.items[k].state == "running" for k in tr.keys_of(LO_ITEM.name)):
        return 0
    n = 0
    for w in tr.workers.values():
        if w.item is None and moves_objects(w, also):
            w.phase = LO_PHASE.name
            n += 1
    return n


def list_files(dump_id: str, single: bool) -> tuple[str, ...]:
    """The names a large-object item's list of objects may have in the
    dump's directory: `blobs_<id>.toc` (pg_dump 17+), and `blobs.toc`
    before 17, when the dump has one such item (`single`)."""
    return (f"blobs_{dump_id}.toc", "blobs.toc") if single else (f"blobs_{dump_id}.toc",)


# the extensions of an object's file in a -Fd archive (compressed as the dump)
DATA_EXTS = ("", ".gz", ".lz4", ".zst")
# the object files an archive's reading sizes, spread over all its lists
# together: a database of a million objects has a million files (a stat and
# a trailer read each), in a thousand lists from pg_dump 17
LIST_SAMPLE = 2000
# OIDs a list keeps at evenly spaced places, to tell from the object a
# worker has open how far through the list it is (pg_restore holds an
# object's file open while it writes the object only when it is larger
# than its 16 kB buffer: the small ones it reads whole, closes, then writes)
MARKS = 64
# how far ahead of the objects it writes pg_restore reads their list: a
# stdio buffer (the file system's block size, 4 kB on ext4, or glibc's 8 kB)
LIST_READ_AHEAD = 8192


@dataclass(frozen=True)
class Listing:
    """One archive item's large objects: its key (dump id), how many, their
    bytes of data and the pages (pg_largeobject rows, a quarter block each)
    they fill (None: unknown, a custom archive's), `marks`: (place in
    the list, OID) at evenly spaced places of a list in OID order (empty
    when the list is in no such order, or unknown), and the list file's
    bytes (0: none)."""

    key: str
    count: int
    bytes: float | None = None
    pages: float | None = None
    marks: tuple[tuple[int, int], ...] = ()
    list_bytes: int = 0

    def read_to(self, position: float) -> float:
        """How many objects are surely done when the worker's read position
        in the list file is `position`: pg_restore reads the list through
        a buffer (LIST_READ_AHEAD), one line an object, and starts on a
        buffer's objects only once it has read it, so up to a buffer's
        worth of lines ahead of the objects written."""
        if self.list_bytes <= 0:
            return 0.0
        return self.count * max(0.0, position - LIST_READ_AHEAD) / self.list_bytes

    def place(self, oid: int) -> float | None:
        """How many of the list's objects come before `oid` (interpolated
        between the marks), None when the marks cannot tell."""
        if len(self.marks) < 2:
            return None
        oids = [m[1] for m in self.marks]
        if oid < oids[0] or oid > oids[-1]:
            return None
        i = bisect.bisect_right(oids, oid) - 1
        if i >= len(oids) - 1:
            return float(self.marks[-1][0])
        (p0, o0), (p1, o1) = self.marks[i], self.marks[i + 1]
        return p0 + (p1 - p0) * (oid - o0) / max(1, o1 - o0)


@dataclass
class _List:
    """One list file as read: its objects' OIDs in list order, the names of
    those whose file is not blob_OID.dat (by place), its bytes (-1: the
    list could not be read)."""

    key: str
    oids: array[int]
    names: dict[int, str]
    list_bytes: int


def _read_list(listing: str, key: str) -> _List:
    oids: array[int] = array("I")
    names: dict[int, str] = {}
    try:
        list_bytes = os.stat(listing).st_size
        with open(listing, encoding="utf-8", errors="replace") as f:
            for ln in f:
                parts = ln.split()
                if len(parts) < 2 or not parts[0].isdigit():
                    continue
                oid = int(parts[0])
                oids.append(oid)
                if parts[1] != f"blob_{oid}.dat":
                    names[len(oids) - 1] = parts[1]
    except (OSError, OverflowError):
        return _List(key, array("I"), {}, -1)
    return _List(key, oids, names, list_bytes)


def _marks(oids: array[int]) -> tuple[tuple[int, int], ...]:
    count = len(oids)
    if count == 0 or any(oids[i] >= oids[i + 1] for i in range(count - 1)):
        return ()
    places = sorted({round(k * (count - 1) / MARKS) for k in range(MARKS + 1)})
    return tuple((p, oids[p]) for p in places)


# how many sampled objects' worth the archive's mean per object weighs in a
# list's own estimate, where the sample is spread over many lists and gives
# each only a few of its objects (pg_dump 17's items of 1000)
LIST_PRIOR = 10


def _sized(archive: str, lists: Sequence[_List], page_bytes: int,
           sample: int) -> list[Listing]:
    """The lists as Listings, their objects' bytes and pages from up to
    `sample` object files spread evenly over all of them together (every
    file when there are no more): a database of a million objects in
    pg_dump 17's items of 1000 has a thousand lists, and a file's size
    costs a stat and a trailer read. Each list's figures are its own
    sample's mean, drawn towards the archive's by LIST_PRIOR objects, times
    its count; exact when every file was read."""
    total = sum(len(li.oids) for li in lists)
    step = max(1, math.ceil(total / max(1, sample)))
    ext: str | None = None
    seen: list[tuple[int, float, float]] = []  # per list: files, bytes, pages
    at = 0  # the next sampled place, in all the lists' objects together
    base = 0
    for li in lists:
        n_seen, got, pages = 0, 0.0, 0.0
        count = len(li.oids)
        while at < base + count:
            i = at - base
            at += step
            name = li.names.get(i, f"blob_{li.oids[i]}.dat")
            for e in ((ext,) if ext is not None else DATA_EXTS):
                path = os.path.join(archive, name + e)
                try:
                    size = os.stat(path).st_size
                except OSError:
                    continue
                ext = e
                text = text_bytes(path, size)[0]
                n_seen += 1
                got += text
                pages += math.ceil(text / page_bytes)
                break
        base += count
        seen.append((n_seen, got, pages))
    files = sum(s[0] for s in seen)
    mean_b = sum(s[1] for s in seen) / files if files else 0.0
    mean_p = sum(s[2] for s in seen) / files if files else 0.0
    prior = 0 if step == 1 else LIST_PRIOR
    out = []
    for li, (n_seen, got, pages) in zip(lists, seen):
        count = len(li.oids)
        if li.list_bytes < 0:
            out.append(Listing(li.key, 0))
            continue
        if count == 0:
            out.append(Listing(li.key, 0, 0.0, 0.0, (), li.list_bytes))
            continue
        if not files:
            out.append(Listing(li.key, count, None, None, _marks(li.oids), li.list_bytes))
            continue
        w = n_seen + prior
        b = count * (got + prior * mean_b) / w if w else count * mean_b
        p = count * (pages + prior * mean_p) / w if w else count * mean_p
        out.append(Listing(li.key, count, b, p, _marks(li.oids), li.list_bytes))
    return out


def read_listing(archive: str, listing: str, key: str, page_bytes: int = 2048,
                 sample: int = LIST_SAMPLE) -> Listing:
    """An item's objects from its list in a -Fd archive ("OID blob_OID.dat"
    a line): their count and OIDs, and their data's bytes and pages from up
    to `sample` of their files spread over the list (all of them when there
    are no more), scaled to the count."""
    return _sized(archive, [_read_list(listing, key)], page_bytes, sample)[0]


def metadata_listing(toc: Sequence[Any], key: str) -> Listing | None:
    """The objects whose metadata a restore's pre-data creates, from the
    TOC, as a list of places and OIDs: before 17 a BLOB entry an object (its
    tag the OID), from 17 a BLOB METADATA entry a range of up to 1000 (its
    tag "FIRST..LAST"). None when the archive has none."""
    marks: list[tuple[int, int]] = []
    count = 0
    for t in toc:
        tag = str(t.tag or "")
        if t.desc == "BLOB" and tag.isdigit():
            marks.append((count, int(tag)))
            count += 1
        elif t.desc == "BLOB METADATA" and (span := oid_span(tag)) is not None:
            lo, _, hi = tag.partition("..")
            marks += [(count, int(lo)), (count + span - 1, int(hi))]
            count += span
    if count == 0:
        return None
    if any(a[1] >= b[1] for a, b in zip(marks, marks[1:])):
        marks = []  # in no OID order: no place to tell
    elif len(marks) > 2 * MARKS:
        step = len(marks) / MARKS
        marks = sorted({marks[min(len(marks) - 1, round(k * step))] for k in range(MARKS)}
                       | {marks[-1]})
    return Listing(key, count, marks=tuple(marks))


def metadata_counts(toc: Sequence[Any]) -> dict[str, int]:
    """Objects a custom archive's metadata entries name: "" -> the BLOB
    entries (one an object, before 17); "A..B" -> a BLOB METADATA range's
    (17+: its tag is the range, and its data item's tag the same)."""
    out: dict[str, int] = {}
    for t in toc:
        if t.desc == "BLOB":
            out[""] = out.get("", 0) + 1
        elif t.desc == "BLOB METADATA":
            out[t.tag] = oid_span(t.tag) or 1
    return out


def archive_listings(archive: str, toc: Sequence[Any], page_bytes: int = 2048
                     ) -> list[Listing]:
    """The large-object data items of an archive: in a directory archive
    each one's list of objects and their files (blobs_<id>.toc from 17,
    blobs.toc before); else counted from the TOC's metadata entries, their
    bytes unknown."""
    items = [t for t in toc if t.desc in DATA_DESCS]
    if not os.path.isdir(archive):
        per = metadata_counts(toc)
        return [Listing(str(t.dump_id), per.get(t.tag, 0) or per.get("", 0)) for t in items]
    lists = []
    for t in items:
        listing = os.path.join(archive, f"blobs_{t.dump_id}.toc")
        if not os.path.exists(listing):
            listing = os.path.join(archive, "blobs.toc")
        lists.append(_read_list(listing, str(t.dump_id)))
    # one sample of the object files for all the lists together
    return _sized(archive, lists, page_bytes, LIST_SAMPLE)
