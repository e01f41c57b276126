"""The exporter's recordings directory: names, sizes, and retention by age
and total size (oldest finished recordings first; never one being written,
and never the newest finished one, so that the last run can always be
reported)."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

SUFFIX = ".pgparmon.gz"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def recording_name(started: float, server: str, kind: str, database: str | None,
                   pid: int | None) -> str:
    """A file name that sorts by start and says what was recorded (a pid in
    a file name is fine: it is not a metric label)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    parts = [stamp, server, kind, database or "cluster", str(pid or 0)]
    return "-".join(_UNSAFE.sub("_", p).strip("_") or "_" for p in parts) + SUFFIX


@dataclass(frozen=True)
class DirUsage:
    files: int
    bytes: int


def _recordings(directory: str) -> list[tuple[float, str, int]]:
    """(mtime, path, size) of every recording in the directory, oldest first."""
    out = []
    try:
        with os.scandir(directory) as it:
            for e in it:
                if not e.name.endswith(SUFFIX) or not e.is_file(follow_symlinks=False):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                out.append((st.st_mtime, e.path, st.st_size))
    except OSError:
        return []
    out.sort()
    return out


def usage(directory: str) -> DirUsage:
    recs = _recordings(directory)
    return DirUsage(len(recs), sum(r[2] for r in recs))


def prune(directory: str, max_age_s: float | None, max_bytes: int | None,
          open_paths: set[str], now: float | None = None) -> tuple[int, int]:
    """Delete finished recordings older than max_age_s, then the oldest ones
    until the directory's recordings total at most max_bytes. Returns
    (deleted, failed deletions)."""
    now = time.time() if now is None else now
    recs = _recordings(directory)
    finished = [r for r in recs if os.path.abspath(r[1]) not in open_paths]
    keep_last = finished[-1][1] if finished else None
    total = sum(r[2] for r in recs)
    deleted = failed = 0
    for mtime, path, size in finished:
        if path == keep_last:
            break
        too_old = max_age_s is not None and now - mtime > max_age_s
        too_big = max_bytes is not None and total > max_bytes
        if not (too_old or too_big):
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:
            failed += 1
            continue
        deleted += 1
        total -= size
    return deleted, failed


def parse_size(text: str) -> int:
    """'500M', '2G', '64k', '1000' (bytes; binary multiples)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)i?[bB]?\s*", text)
    if not m:
        raise ValueError(f"not a size: {text!r} (e.g. 500M, 2G)")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


def parse_age(text: str) -> float:
    """'14d', '36h', '90m', '3600' (seconds)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if not m:
        raise ValueError(f"not an age: {text!r} (e.g. 14d, 36h)")
    mult = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}[m.group(2)]
    return float(m.group(1)) * mult
