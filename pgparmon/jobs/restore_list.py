"""pg_restore's list files (`pg_restore -l` writes one, `-L` reads one).

A list line is ``ID; TABLEOID OID DESC SCHEMA NAME OWNER``; a line that
starts with ``;`` is a comment (pg_restore skips it, and so the item). With
`-L`, pg_restore restores only the listed items, and in parallel mode an
item whose dependency is not listed runs as if that dependency were done.

The live monitor reads the list of a `pg_restore -L FILE` it follows, to
plan only the items that run restores. The advice restores an archive whose
foreign keys can run early in four steps, those keys last, through two list
files made from `pg_restore -l` with `grep -E` and `id_pattern`; the bench
splits its lists the same way (`split_ids`).
"""

from __future__ import annotations

import os
import re
import stat

_ITEM = re.compile(r"^\s*([0-9]+)\s*;")
# a list file bigger than this is not a pg_restore list (100k items ~ 10 MB)
MAX_LIST_BYTES = 64 * 1024 * 1024


class ListError(ValueError):
    """A list file that cannot be read here, with why."""


def id_pattern(ids: list[int]) -> str:
    """The lines of `pg_restore -l` that list these dump ids, as a POSIX
    extended regular expression (grep -E and Python's re alike)."""
    return f"^({'|'.join(str(i) for i in sorted(set(ids)))});"


def split_ids(listing: str, ids: list[int]) -> tuple[str, str]:
    """`pg_restore -l` output as (every line but those of `ids`, their
    lines): the two lists of the advice's last two steps."""
    pat = re.compile(id_pattern(ids))
    lines = listing.splitlines()
    rest = [ln for ln in lines if not pat.match(ln)]
    keys = [ln for ln in lines if pat.match(ln)]
    return "\n".join(rest) + "\n", "\n".join(keys) + ("\n" if keys else "")


def listed_ids(text: str) -> frozenset[int]:
    """The dump ids a list file selects (comments and blank lines skipped)."""
    out = set()
    for line in text.splitlines():
        m = _ITEM.match(line)
        if m:
            out.add(int(m.group(1)))
    return frozenset(out)


def read_use_list(path: str) -> frozenset[int]:
    """The dump ids the list file at `path` selects. Only a regular file is
    read: `-L <(pg_restore -l ... | grep ...)` names a pipe that pg_restore
    has already drained (reading it here would wait, or take its data)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ListError(exc.strerror or type(exc).__name__) from None
    if not stat.S_ISREG(st.st_mode):
        raise ListError("not a regular file (a pipe is read once, by pg_restore)")
    if st.st_size > MAX_LIST_BYTES:
        raise ListError(f"{st.st_size} bytes: not a pg_restore list")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return listed_ids(f.read())
    except OSError as exc:
        raise ListError(exc.strerror or type(exc).__name__) from None
