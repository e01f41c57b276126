"""Where each item's data lies in a custom-format archive (`pg_dump -Fc`).

`pg_restore -l` shows no sizes, and a custom archive keeps every table's
data in one file. Its TOC, at the file's head, gives each entry's data
offset (when pg_dump could seek back to write them: a dump to a pipe has
none), and the data blocks follow in TOC order, so an item's data length
is the distance to the next item's offset (the last one's, to the end of
the file). pg_restore -j computes the same lengths (pg_backup_custom.c,
_PrepParallelRestore) and hands its data items out by them, largest first:
the lengths are both the items' sizes (compressed bytes, as a directory
archive's files) and pg_restore's order.

The layout read here is the archive's header and TOC as pg_dump writes them
in archive versions 1.12 (PostgreSQL 9.0) to 1.16 (17 and 18): integers as
a sign byte and `intSize` little-endian bytes, strings as an integer length
(-1: none) and their bytes, an offset as a flag byte and `offSize` bytes.
Anything else (an older or newer version, a truncated file) gives None: the
plan then sizes the items as before, equally.
"""

from __future__ import annotations

import io
import os
import zlib
from collections.abc import Collection
from dataclasses import dataclass

from . import frames
from .custom_blocks import BlockError, chunks

MAGIC = b"PGDMP"
FORMAT_CUSTOM = 1  # archFormat's archCustom
OLDEST = (1, 12)
NEWEST = (1, 16)
POS_SET = 2  # K_OFFSET_POS_SET: the entry has data at a known offset
# a TOC larger than this is not read (a million large objects before 17 is
# a million entries of ~150 bytes: 150 MB)
MAX_TOC_BYTES = 1 << 30


class _Short(Exception):
    """The file ended inside the header or the TOC."""


@dataclass(frozen=True)
class Extents:
    """dump id -> (offset, length) of each item with data at a known
    offset; `version` the archive's (major, minor); `compression` its data
    blocks': "none", "gzip", "lz4" or "zstd" (the header's algorithm from
    1.15, before it a level: 0 none, else gzip)."""

    by_id: dict[int, tuple[int, int]]
    version: tuple[int, int]
    compression: str
    int_size: int = 4

    @property
    def compressed(self) -> bool:
        return self.compression != "none"


# the header's compression algorithm from archive version 1.15 (PostgreSQL's
# pg_compress_algorithm)
ALGORITHMS = {0: "none", 1: "gzip", 2: "lz4", 3: "zstd"}


class _Reader:
    def __init__(self, f: io.BufferedReader, limit: int = MAX_TOC_BYTES) -> None:
        self.f = f
        self.int_size = 4
        self.off_size = 8
        self.read_bytes = 0
        self.limit = limit  # the most it reads: a corrupt length reads no further

    def raw(self, n: int) -> bytes:
        if n < 0 or self.read_bytes + n > self.limit:
            raise _Short()
        b = self.f.read(n)
        if len(b) < n:
            raise _Short()
        self.read_bytes += n
        return b

    def byte(self) -> int:
        return self.raw(1)[0]

    def int(self) -> int:
        b = self.raw(1 + self.int_size)
        v = int.from_bytes(b[1:], "little")
        return -v if b[0] else v

    def str(self) -> bytes | None:
        n = self.int()
        return None if n < 0 else self.raw(n)

    def skip_str(self) -> bool:
        """Skip a string; False when it was none (the end of a list)."""
        n = self.int()
        if n < 0:
            return False
        self.raw(n)
        return True

    def offset(self) -> tuple[int, int]:
        b = self.raw(1 + self.off_size)
        return b[0], int.from_bytes(b[1:], "little")


def data_extents(path: str) -> Extents | None:
    """The data extents of a custom archive's items, as pg_restore -j
    computes them; None when `path` is no custom archive of a version
    read here, cannot be read, or holds no data offsets (written to a
    pipe)."""
    try:
        with open(path, "rb") as f:
            end = os.fstat(f.fileno()).st_size
            return _read(_Reader(f), end)
    except (OSError, _Short, ValueError):
        return None


def _read(r: _Reader, end: int) -> Extents | None:
    if r.raw(5) != MAGIC:
        return None
    version = (r.byte(), r.byte())
    r.byte()  # revision
    if not OLDEST <= version <= NEWEST:
        return None
    r.int_size, r.off_size = r.byte(), r.byte()
    if not 1 <= r.int_size <= 32 or not 1 <= r.off_size <= 16:
        return None
    if r.byte() != FORMAT_CUSTOM:
        return None
    if version >= (1, 15):
        algorithm = r.byte()
        if algorithm not in ALGORITHMS:
            return None
        compression = ALGORITHMS[algorithm]
    else:  # a level: 0 is none, -1 the default (gzip's)
        compression = "none" if r.int() == 0 else "gzip"
    for _ in range(7):  # the creation time
        r.int()
    r.skip_str()  # database name
    r.skip_str()  # server version
    r.skip_str()  # pg_dump version
    count = r.int()
    if count < 0:
        return None
    placed: list[tuple[int, int]] = []  # (offset, dump id), in TOC order
    for _ in range(count):
        dump_id = r.int()
        r.int()  # had a dumper
        r.skip_str()  # table oid
        r.skip_str()  # oid
        r.skip_str()  # tag
        r.skip_str()  # desc
        r.int()  # section
        r.skip_str()  # definition
        r.skip_str()  # drop statement
        r.skip_str()  # copy statement
        r.skip_str()  # namespace
        r.skip_str()  # tablespace
        if version >= (1, 14):
            r.skip_str()  # table access method
        if version >= (1, 16):
            r.int()  # relkind
        r.skip_str()  # owner
        r.skip_str()  # "false" (WITH OIDS)
        while r.skip_str():  # dependencies, to a none
            pass
        flag, pos = r.offset()
        if flag == POS_SET:
            placed.append((pos, dump_id))
    if not placed:
        return None
    by_id: dict[int, tuple[int, int]] = {}
    # pg_restore's rule: the data follows in TOC order, each item's length
    # the step to the next offset, the last one's to the end of the file
    for (pos, dump_id), nxt in zip(placed, placed[1:] + [(end, 0)]):
        if nxt[0] > pos:
            by_id[dump_id] = (pos, nxt[0] - pos)
    return Extents(by_id, version, compression, r.int_size)


# what text_ratios reads: the start of the largest items' data, this much
# of each (a few ms of inflating in all)
RATIO_ITEMS = 5
RATIO_BYTES = 1 << 16


def text_ratios(path: str, ext: Extents, tables: Collection[int], items: int = RATIO_ITEMS,
                budget: int = RATIO_BYTES) -> dict[int, float]:
    """The archive's bytes a byte of the COPY text they hold, by dump id, for
    the largest `items` tables, from the start of each one's data (up to
    `budget` bytes): an item's data is a block header (a type byte and its
    dump id) and chunks, each an integer length and its bytes, to a zero
    length; compressed with gzip, the chunks are one zlib stream (inflated
    here); uncompressed, each row is a chunk of its own, and the lengths are
    the overhead. `tables`: the dump ids of the TABLE DATA items (a large
    objects' block is laid out otherwise); with lz4 or zstd, the chunks are
    one frame, whose first 1 MB its command inflates (frames.py). Empty
    when nothing could be read (for lz4 and zstd: the command missing)."""
    return {key: a / t for key, (a, t, _) in _read_largest(path, ext, tables, items, budget,
                                                          None).items() if a > 0 and t > 0}


# the archive's bytes a byte of COPY text, by algorithm, on typical table
# data: what an item not measured is taken at (a directory archive's files
# say their own: jobs/archive_files.text_bytes, whose guesses these are)
USUAL_RATIO = {"gzip": 0.3, "zstd": 0.3, "lz4": 0.5, "none": 1.0}


def item_texts(path: str, ext: Extents, tables: Collection[int]
               ) -> tuple[dict[int, float], dict[int, float]]:
    """(each item's COPY text bytes, the ratios measured): text_of over the
    ratios read from the largest of `tables` (text_ratios), the others at
    their measured mean, else at the algorithm's usual ratio."""
    measured = text_ratios(path, ext, tables)
    usual = USUAL_RATIO.get(ext.compression, USUAL_RATIO["gzip"])
    return text_of(ext, measured, usual), measured


def text_of(ext: Extents, ratios: dict[int, float], default: float) -> dict[int, float]:
    """Each item's COPY text: its length over its own ratio where measured,
    else over the measured items' together (their bytes over their text),
    else `default`."""
    measured = [(ext.by_id[k][1], r) for k, r in ratios.items() if k in ext.by_id]
    size = sum(n for n, _ in measured)
    text = sum(n / r for n, r in measured)
    rest = size / text if size > 0 and text > 0 else default
    return {k: n / ratios.get(k, rest) for k, (_, n) in ext.by_id.items()}


def row_widths(path: str, ext: Extents, tables: dict[int, str], most: int = 100,
               sample: int = 64 * 1024) -> dict[str, float]:
    """COPY text bytes a row of the `most` largest tables (`tables`: dump id
    -> schema.table), from the newlines in the first `sample` bytes of
    each one's text (a row is a line: newlines in values are escaped), as a
    directory archive's are read from its data files
    (jobs/archive_files.row_widths). Tables missing: unknown (an lz4 or
    zstd archive's without the command)."""
    got = _read_largest(path, ext, tables, most, None, sample)
    return {tables[key]: t / rows for key, (_, t, rows) in got.items() if rows}


def _read_largest(path: str, ext: Extents, tables: Collection[int], most: int,
                  budget: int | None, text_most: int | None) -> dict[int, tuple[int, int, int]]:
    """_item_text of the `most` largest of `tables` (dump ids), each read up
    to `budget` archive bytes (None: its whole length) or `text_most` of
    text (lz4 and zstd: a head of frames.HEAD_BYTES through the command);
    those that cannot be read are left out, as is everything when the
    data is lz4 or zstd and the command is missing."""
    if ext.compression not in ("gzip", "none", *frames.TOOLS) or (
            ext.compression in frames.TOOLS and not frames.have(ext.compression)):
        return {}
    largest = sorted(((k, e) for k, e in ext.by_id.items() if k in tables),
                     key=lambda ke: -ke[1][1])[:most]
    out: dict[int, tuple[int, int, int]] = {}
    try:
        f = open(path, "rb")
    except OSError:
        return {}
    with f:
        for key, (start, length) in largest:
            try:
                if ext.compression in frames.TOOLS:
                    out[key] = _framed_text(f, start, length, ext, text_most)
                else:
                    out[key] = _item_text(f, start, min(length, budget or length), ext,
                                          text_most)
            except (OSError, BlockError, zlib.error):
                continue  # not read: the others say
    return out


def _item_text(f: io.BufferedReader, start: int, most: int, ext: Extents,
               text_most: int | None = None) -> tuple[int, int, int]:
    """(archive bytes read, text bytes they hold, rows: the newlines) from
    an item's data, up to `most` archive bytes or `text_most` of text;
    BlockError when it holds no table data."""
    inflate = zlib.decompressobj(47) if ext.compression == "gzip" else None
    read = text = rows = 0
    # a chunk past `most` by more than a buffer's worth is taken for a corrupt length
    for chunk in chunks(f, start, ext.int_size, longest=most + 64 * 1024):
        read += 1 + ext.int_size + len(chunk)
        data = inflate.decompress(chunk) if inflate else chunk
        text += len(data)
        rows += data.count(b"\n")
        if read >= most or (text_most is not None and text >= text_most):
            break
    return read, text, rows


def _framed_text(f: io.BufferedReader, start: int, length: int, ext: Extents,
                 text_most: int | None) -> tuple[int, int, int]:
    """_item_text of an lz4 or zstd item: the chunks of its first
    frames.HEAD_BYTES (a head cut shorter would leave out a block's share
    of its text: lz4's blocks hold 64 kB of text, zstd's 128 kB) through
    its command (frames.ratio); for `text_most` of text alone (rows), four
    times that is enough (the first text of any head is the same); zeros
    when it cannot be read."""
    head = frames.HEAD_BYTES if text_most is None else min(frames.HEAD_BYTES, 4 * text_most)
    raw = bytearray()
    read = 0
    whole = True
    for chunk in chunks(f, start, ext.int_size, longest=length):
        raw += chunk
        read += 1 + ext.int_size + len(chunk)
        if len(raw) >= head:
            whole = False
            break
    got = frames.ratio(bytes(raw), whole, ext.compression)
    if got is None:
        return 0, 0, 0  # not read
    text = got[1][:text_most] if text_most is not None else got[1]
    return read, len(text), text.count(b"\n")
