"""Files that pgparmon writes are its owner's alone.

A recording holds the job's statements, table names and the host's facts; a
report's HTML the same. They are created 0600, and the directories pgparmon
creates for them 0700, whatever the umask (PostgreSQL writes its own logs
0600). A directory that already exists keeps its mode: the caller may warn
when others can read it (`open_to_others`).
"""

from __future__ import annotations

import os
import stat
from typing import IO, Any

FILE_MODE = 0o600
DIR_MODE = 0o700


def open_private(path: str, text: bool = False) -> IO[Any]:
    """Open `path` for writing (created or truncated), mode 0600. An existing
    regular file is set to 0600 too before anything is written to it (its
    old content is gone: what it holds now is ours); a device or a pipe
    (`/dev/stdout`) is written as it is. OSError as open() would raise."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, FILE_MODE)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != FILE_MODE:
            # the umask may have taken bits away (0400), or the file existed
            try:
                os.fchmod(fd, FILE_MODE)
            except PermissionError:  # another user's file that we may write: keep its mode
                pass
        if text:
            return os.fdopen(fd, "w", encoding="utf-8")
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def make_private_dirs(path: str) -> list[str]:
    """Create `path` and its missing parents, each 0700 whatever the umask;
    an existing directory is left as it is. Returns the directories created.
    OSError as os.makedirs would raise (FileExistsError when `path` is a
    file)."""
    missing: list[str] = []
    p = os.path.abspath(path)
    while not os.path.lexists(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    made: list[str] = []
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:  # made meanwhile by someone else: theirs
            continue
        os.chmod(d, DIR_MODE)
        made.append(d)
    if not os.path.isdir(path):
        raise NotADirectoryError(20, "Not a directory", path)
    return made


def open_to_others(path: str) -> int | None:
    """The permission bits of `path` when every user may read it (o+r: a
    directory's listing, the recordings' names), else None (also when it
    cannot be read)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None
    return mode if mode & stat.S_IROTH else None
