"""What a dump and a restore share about an archive's data files: each
table's data is a file named for its dump id (`1234.dat`, `1234.dat.gz`),
which the worker that dumps it writes and the worker that restores it
reads, so the client process holding it open is that worker's."""

from __future__ import annotations

import os
import struct
import zlib
from typing import TYPE_CHECKING

from .. import frames
from ..analyze.items import WorkerState
from ..snapshot import Snapshot

if TYPE_CHECKING:
    from ..analyze.progress import Tracker


def data_file_client(tr: Tracker, w: WorkerState, snap: Snapshot) -> int | None:
    """Which client process drives this backend: the one holding the
    item's data file open (dump writes it, restore reads it)."""
    it = tr.items.get(w.item or "")
    if it is None:
        return w.client_pid
    want = it.key
    for c in snap.clients:
        for f in c.open_files or ():
            base = os.path.basename(f.path)
            if base.split(".")[0] == want:
                w.client_pid = c.pid
                return c.pid
    return w.client_pid


# Bytes of COPY text read from the head of a data file to estimate its rows.
ROW_SAMPLE_BYTES = 256 * 1024


def sample_rows(path: str, text_bytes: float, sample: int = ROW_SAMPLE_BYTES
                ) -> float | None:
    """Rows of one data file: newlines in its first `sample` bytes of COPY
    text (the whole file when it is shorter: then exact), scaled to its
    text size. gzip and uncompressed files, lz4 and zstd ones through their
    command (frames.py: a subprocess a file); None for files it cannot
    read. A COPY text row is one line (newlines inside
    values are escaped as \\n)."""
    try:
        with open(path, "rb") as f:
            if path.endswith(".gz"):
                dec = zlib.decompressobj(16 + zlib.MAX_WBITS)
                got = bytearray()
                while len(got) < sample and not dec.eof:
                    chunk = f.read(64 * 1024)
                    if not chunk:
                        break
                    got += dec.decompress(chunk, sample - len(got))
                    while dec.unconsumed_tail and len(got) < sample:
                        got += dec.decompress(dec.unconsumed_tail, sample - len(got))
                whole = dec.eof
                head = bytes(got)
            elif path.endswith(".dat"):
                head = f.read(sample)
                whole = len(head) < sample
            elif path.endswith((".lz4", ".zst")):
                # its command's text of the file's head (frames.py): at
                # least `sample` of it unless the file is shorter
                raw, whole = frames.file_head(path, sample)
                got = frames.inflate_head(raw, frames.SUFFIXES[os.path.splitext(path)[1]])
                if got is None:
                    return None
                head = got[:sample]
                whole = whole and len(got) <= sample
            else:
                return None
    except (OSError, zlib.error):
        return None
    if whole:
        # the end-of-data marker (\\.) and blank lines some writers add
        body = head.rstrip(b"\n")
        if body == b"\\." or body.endswith(b"\n\\."):
            body = body[:-2]
        body = body.rstrip(b"\n")
        return float(body.count(b"\n") + 1) if body else 0.0
    lines = head.count(b"\n")
    if lines <= 0:
        return max(1.0, text_bytes / max(len(head), 1))  # one row longer than the sample
    # the rows that end in the sample, over the bytes they take (a row cut
    # at the sample's end is left out of both)
    return text_bytes * lines / (head.rfind(b"\n") + 1)


# The most a gzip member can outgrow its input: deflate stores what it
# cannot shrink in blocks of up to 65535 bytes at 5 bytes each, and the
# member adds its header (10 bytes, more with a name or a comment) and its
# 8-byte trailer.
GZIP_HEAD_ROOM = 1024
DEFLATE_BLOCK = 65535


def gzip_max_size(raw: float) -> float:
    """The largest gzip member that `raw` bytes of input can make."""
    return raw + 5 * (raw // DEFLATE_BLOCK + 1) + GZIP_HEAD_ROOM


def _gzip_uncompressed(path: str, size: int) -> float | None:
    """ISIZE from the gzip trailer (uncompressed length mod 2^32): exact for
    members under 4 GiB; corrected upward when it plainly wrapped (a file
    larger than ISIZE bytes could ever make). An empty table's file, or a
    few rows', is larger than its text and is no wrap: 20-odd bytes."""
    try:
        with open(path, "rb") as f:
            if f.read(2) != b"\x1f\x8b":
                return None
            f.seek(-4, os.SEEK_END)
            isize = struct.unpack("<I", f.read(4))[0]
    except OSError:
        return None
    while gzip_max_size(isize) < size:
        isize += 2 ** 32
    return float(isize)


def _zstd_content_size(path: str) -> float | None:
    """The frame content size a zstd frame header may carry (pg_dump's
    streaming writer usually leaves it out: then None)."""
    try:
        with open(path, "rb") as f:
            head = f.read(18)
    except OSError:
        return None
    if len(head) < 6 or head[:4] != b"\x28\xb5\x2f\xfd":
        return None
    fhd = head[4]
    fcs_flag = fhd >> 6
    single = (fhd >> 5) & 1
    dict_flag = fhd & 3
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
    n = (0 if not single else 1, 2, 4, 8)[fcs_flag] if fcs_flag or single else 0
    if n == 0:
        return None
    raw = head[pos:pos + n]
    if len(raw) < n:
        return None
    v = int.from_bytes(raw, "little")
    return float(v + 256 if n == 2 else v)


def text_bytes(path: str, size: int) -> tuple[float, str]:
    """(uncompressed COPY text bytes, compression) of one data file: a gzip
    file's from its trailer; an lz4 or zstd file's (a zstd frame that
    carries its size aside) at the ratio its archive's largest files of the
    kind show (frame_ratio), else the kind's usual one."""
    if path.endswith(".gz"):
        v = _gzip_uncompressed(path, size)
        return (v if v is not None else size / 0.3), "gzip"
    if path.endswith(".zst"):
        v = _zstd_content_size(path)
        if v is not None:
            return v, "zstd"
        return size / (frame_ratio(os.path.dirname(path), "zstd") or 0.3), "zstd"
    if path.endswith(".lz4"):
        return size / (frame_ratio(os.path.dirname(path), "lz4") or 0.5), "lz4"
    return float(size), "none"


# how many of a directory archive's largest lz4 or zstd files its ratio is read from
FRAME_FILES = 3
# directory, method, toc.dat's mtime -> the ratio (None: not read); the
# newest FRAME_CACHE of them (an exporter that runs for days sees new
# archives every day: the oldest entries go)
_frame_ratios: dict[tuple[str, str, float], float | None] = {}
FRAME_CACHE = 32


def frame_ratio(directory: str, method: str) -> float | None:
    """A directory archive's lz4 or zstd data files' bytes a byte of their
    text, from the heads of its FRAME_FILES largest (frames.ratio: their
    command inflates them), read once an archive (while its toc.dat is
    unchanged); None when none can be read (the command missing)."""
    try:
        key = (directory, method, os.stat(os.path.join(directory, "toc.dat")).st_mtime)
    except OSError:
        key = (directory, method, 0.0)
    if key in _frame_ratios:
        return _frame_ratios[key]
    suffix = next(s for s, m in frames.SUFFIXES.items() if m == method)
    found: list[tuple[int, str]] = []
    try:
        with os.scandir(directory) as it:
            for e in it:
                if e.name.endswith(".dat" + suffix) and not e.name.startswith("blob_"):
                    try:
                        found.append((e.stat().st_size, e.path))
                    except OSError:
                        continue
    except OSError:
        found = []
    head_bytes = text = 0
    for _, path in sorted(found, reverse=True)[:FRAME_FILES]:
        try:
            head, whole = frames.file_head(path)
        except OSError:
            continue
        got = frames.ratio(head, whole, method)
        if got is not None:
            head_bytes += len(head)
            text += len(got[1])
    while len(_frame_ratios) >= FRAME_CACHE:
        del _frame_ratios[next(iter(_frame_ratios))]
    _frame_ratios[key] = ratio = head_bytes / text if head_bytes and text else None
    return ratio


# the data files whose rows a live plan counts: the largest this many (a
# build on a small table is short whatever its rows; reading the head of
# each of 100,000 files at attach would not be), from this much of each
# one's text (a width, not a count: 1600 rows of 40 bytes, 16 of 4 kB;
# about 30 ms of gunzip for all of them)
ROW_WIDTH_FILES = 100
ROW_WIDTH_SAMPLE = 64 * 1024


def row_widths(files: dict[str, tuple[str, float]], most: int = ROW_WIDTH_FILES
               ) -> dict[str, float]:
    """COPY text bytes a row of each table whose data file is among the
    `most` largest: `files` maps a table to its data file and that file's
    size on disk; its text (text_bytes) over the rows sample_rows counts
    in its first ROW_WIDTH_SAMPLE bytes. Tables missing: unknown."""
    out: dict[str, float] = {}
    for rel, (path, size) in sorted(files.items(), key=lambda kv: -kv[1][1])[:most]:
        text, _ = text_bytes(path, int(size))
        n = sample_rows(path, text, ROW_WIDTH_SAMPLE)
        if n:
            out[rel] = text / n
    return out
