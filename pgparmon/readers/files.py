"""Files on this host: sizes read from the server's own files (when we run on
its host), and the nearest existing directory of a path that is yet to be
made (a dump target)."""

from __future__ import annotations

import os
from typing import Any


def table_file_sizes(data_directory: str | None, tables: list[list[Any]]) -> dict[str, float]:
    """On-disk size of never-vacuumed tables (relpages 0, so the catalog does
    not know their size), from their files: no SQL, no lock. `tables` rows
    are the `tables` query's: [oid, schema, name, relkind, relpages,
    reltuples, toast relpages, relation file path]."""
    out: dict[str, float] = {}
    if not data_directory:
        return out
    for t in tables:
        if (t[4] or 0) > 0 or not t[7]:
            continue
        base = os.path.join(data_directory, t[7])
        total = 0
        for i in range(4096):  # 1 GB segments: .1, .2, ...
            try:
                total += os.stat(base if i == 0 else f"{base}.{i}").st_size
            except OSError:
                break
        if total:
            out[f"{t[1]}.{t[2]}"] = float(total)
    return out


def nearest_existing(path: str, *, dirs_only: bool = False) -> str:
    """path made absolute if it exists, else its nearest ancestor that does
    (dirs_only: that is a directory); the root when none does."""
    p = os.path.abspath(path)
    while not (os.path.isdir(p) if dirs_only else os.path.exists(p)):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p
