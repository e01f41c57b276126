"""The COPY input file, checked before anything runs (`check_copy_file`):
it exists, is not binary, its first records split the way the table has
columns; and a slice of it cut on record boundaries (`record_end`: quoted
newlines in CSV kept inside their record)."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from typing import Any

from .results import ProbeError

# The head of the file that is checked (and its records counted) up front.
CHECK_BYTES = 1 << 20
CHECK_RECORDS = 1000
_READ = 1 << 16
_QUOTE = b'"'


class CopyInputError(ProbeError):
    """The file cannot be loaded into the table as given: bad input (exit 2)."""


@dataclass(frozen=True)
class CopyFile:
    """A checked input file.  data_start: the first byte after the header
    line (0 without --header); records: records in the checked head;
    columns: their column count."""

    path: str
    fmt: str  # csv | text
    header: bool
    size: int
    data_start: int
    records: int
    columns: int
    multiline: bool = False  # a checked record spans lines (quoted newlines)

    @property
    def data_bytes(self) -> int:
        return self.size - self.data_start

    @property
    def record_bytes(self) -> float:
        """A record's mean bytes in the checked head (its whole when the file
        is smaller)."""
        return max(1.0, (min(self.size, CHECK_BYTES) - self.data_start) / max(1, self.records))


def check_copy_file(path: str, fmt: str, header: bool, columns: int | None) -> CopyFile:
    """The file, checked: it exists, is not binary, and its first records
    (up to CHECK_RECORDS, within CHECK_BYTES) have `columns` columns each.
    CopyInputError (one line) otherwise."""
    if fmt not in ("csv", "text"):
        raise CopyInputError(f"--format {fmt}: use csv or text")
    if not os.path.exists(path):
        raise CopyInputError(f"{path}: no such file")
    if not os.path.isfile(path):
        raise CopyInputError(f"{path}: not a regular file")
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(CHECK_BYTES)
    except OSError as exc:
        raise CopyInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if head.startswith(b"PGCOPY\n\xff"):
        raise CopyInputError(f"{path} is in COPY BINARY format: advice covers csv and text "
                             "files only")
    if b"\x00" in head:
        raise CopyInputError(f"{path} is not a {fmt} file (it holds NUL bytes: binary data)")
    whole = len(head) >= size
    multi: list[bool] = []
    records = _records(head, fmt, whole, path, multi)
    data_start = 0
    if header:
        if not records:
            raise CopyInputError(f"{path}: no header line")
        data_start = records[0][0]
        records = records[1:]
    if not records:
        raise CopyInputError(f"{path}: no rows to load")
    counts = [n for _, n in records[:CHECK_RECORDS]]
    first = counts[0]
    if columns is not None:
        for i, n in enumerate(counts):
            if n != columns:
                raise CopyInputError(
                    f"{path}: record {i + 1 + int(header)} has {n} column(s), the table has "
                    f"{columns}: not a {fmt} file for this table (check --format, --header)")
    elif any(n != first for n in counts):
        raise CopyInputError(f"{path}: records with different column counts: not a {fmt} file")
    return CopyFile(path, fmt, header, size, data_start, len(records), first, bool(multi))


def _records(head: bytes, fmt: str, whole: bool, path: str,
             multi: list[bool]) -> list[tuple[int, int]]:
    """(end offset, column count) of each complete record in head."""
    out: list[tuple[int, int]] = []
    if fmt == "text":
        pos = 0
        while True:
            j = head.find(b"\n", pos)
            if j < 0:
                if whole and pos < len(head):
                    out.append((len(head), head[pos:].count(b"\t") + 1))
                break
            line = head[pos:j].rstrip(b"\r")
            if line != b"\\.":
                out.append((j + 1, line.count(b"\t") + 1))
            pos = j + 1
        return out
    # csv: the csv module reads lines; a record ends where it says so.  A
    # line starts a record exactly when the quotes before it are balanced
    # (record_end relies on that).
    # Lines are cut on b"\n" in the bytes (offsets stay exact whatever the
    # encoding), then decoded for the csv module.
    raw = [ln + b"\n" for ln in head.split(b"\n")]
    raw[-1] = raw[-1][:-1]
    if not raw[-1] or not whole:
        raw.pop()  # nothing after the last newline, or a line cut by the head's end
    ends: list[int] = []
    off = 0
    for ln in raw:
        off += len(ln)
        ends.append(off)
    reader = csv.reader((ln.decode("utf-8", errors="replace") for ln in raw), strict=True)
    try:
        seen = 0
        for row in reader:
            if reader.line_num - seen > 1 and row:
                multi.append(True)
            seen = reader.line_num
            if not row:
                continue  # a blank line
            out.append((ends[reader.line_num - 1], len(row)))
    except csv.Error as exc:
        if whole or len(out) == 0:
            raise CopyInputError(f"{path}: not a CSV file the probe can split on record "
                                 f"boundaries (csv: {exc})") from None
        # the head ended inside a quoted field: the records before it stand
    return out


def record_end(f: Any, start: int, want: int, size: int, csv_mode: bool) -> int:
    """The first record boundary at or after start + want (or the end of the
    file).  start is a record boundary.  In a CSV file a newline ends a
    record when the quotes since start are balanced (QUOTE and ESCAPE '"',
    PostgreSQL's default and the csv module's)."""
    target = start + max(1, want)
    if target >= size:
        return size
    odd = 0
    f.seek(start)
    if csv_mode:
        left = target - start
        while left > 0:
            chunk = f.read(min(left, 1 << 22))
            if not chunk:
                break
            odd ^= chunk.count(_QUOTE) & 1
            left -= len(chunk)
    else:
        f.seek(target)
    pos = target
    while pos < size:
        chunk = f.read(_READ)
        if not chunk:
            break
        i = 0
        while True:
            j = chunk.find(b"\n", i)
            if j < 0:
                if csv_mode:
                    odd ^= chunk.count(_QUOTE, i) & 1
                break
            if csv_mode:
                odd ^= chunk.count(_QUOTE, i, j) & 1
            if not odd:
                return pos + j + 1
            i = j + 1
        pos += len(chunk)
    if odd:
        raise CopyInputError(f"the file ends inside a quoted field (after byte {start}): not a "
                             "CSV file the probe can split on record boundaries")
    return size
