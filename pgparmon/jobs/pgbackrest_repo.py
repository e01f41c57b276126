"""What pgBackRest says outside the server: its command line (the command
word, an option's value), its backup lock file (the percentage its main
process writes), the backup's directory in a posix repository (whether
backup.info lists it, the segment its stop waits for, from the copy of its
manifest) and the data directory's files a backup reads. Shared by the
backup and the restore drivers; reads files, never the Tracker."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ..cmdline import command_word
from ..snapshot import ClientProc

LOCK_SUFFIX = "-backup.lock"
# the segment its stop waits for (every one up to it), in the manifest's copy
# it saves in its repository just before it looks for them
_ARCHIVE_STOP = re.compile(r'^backup-archive-stop="([0-9A-F]{24})"$', re.MULTILINE)
MANIFEST_COPY = "backup.manifest.copy"


def command_of(argv: list[str] | tuple[str, ...]) -> str | None:
    """pgBackRest's command word (`backup`, `archive-push`, `backup:local`...):
    the first argument that is not an option or an option's value."""
    return command_word(argv, lambda a: a.startswith("--"),
                        lambda a: "=" not in a and not _is_flag(a))


def _is_flag(opt: str) -> bool:
    """Long options pgBackRest takes without a value (negations, booleans
    given bare): a value-taking option given as `--opt value` takes the next
    argument instead."""
    name = opt[2:]
    return name.startswith(("no-", "reset-")) or name in (
        "online", "start-fast", "stop-auto", "delta", "force", "archive-check",
        "archive-copy", "backup-standby", "resume", "checksum-page", "compress",
        "expire-auto", "dry-run", "set", "beta")


def option(argv: list[str] | tuple[str, ...], name: str) -> str | None:
    """A `--name=value` or `--name value` option's value."""
    args = list(argv)
    for i, a in enumerate(args):
        if a == f"--{name}" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def read_lock(clients: tuple[ClientProc, ...], prev: dict[str, Any] | None) -> dict[str, Any] | None:
    """pgBackRest's backup lock file, found open in its processes: its
    JSON (the percentage done), read each sample; the backup's directory
    in a posix repository (the files its processes write), and, once no
    process copies, whether the stanza's backup.info lists it (the
    backup completed) and the segment its stop waits for."""
    prev = prev or {}
    out: dict[str, Any] = {"lock_file": prev.get("lock_file"), "lock": {},
                           "backup_dir": prev.get("backup_dir")}
    opened = [f.path for c in clients for f in c.open_files or ()]
    paths = sorted({p for p in opened if p.endswith(LOCK_SUFFIX)})
    for path in paths or ([out["lock_file"]] if out["lock_file"] else []):
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read(4096)
        except OSError:
            continue
        try:
            data = json.loads(text) if text.strip() else {}
        except ValueError:
            data = {}  # being rewritten: the next sample reads it
        out.update(lock_file=path, lock=data if isinstance(data, dict) else {})
        break
    copying = False
    for p in opened:
        i = p.find("/pg_data/")
        if i > 0 and "/backup/" in p[:i]:
            out["backup_dir"] = p[:i]
            copying = True
    if out["backup_dir"] and not copying:
        out["completed"] = listed(out["backup_dir"])
        out["archive_stop"] = prev.get("archive_stop") or archive_stop(out["backup_dir"])
    return out if out["lock_file"] or out["backup_dir"] else None


def listed(backup_dir: str) -> bool | None:
    """Whether the stanza's backup.info lists this backup (written when it
    completes); None: it cannot be read here."""
    label = os.path.basename(backup_dir.rstrip("/"))
    try:
        with open(os.path.join(os.path.dirname(backup_dir.rstrip("/")), "backup.info"),
                  encoding="utf-8", errors="replace") as f:
            return any(line.startswith(label + "=") for line in f)
    except OSError:
        return None


def archive_stop(backup_dir: str) -> str | None:
    """The segment the backup's stop waits for, from the copy of its
    manifest in the repository (its [backup] section, at the top; None: not
    written yet, encrypted, or not readable here)."""
    try:
        with open(os.path.join(backup_dir, MANIFEST_COPY), encoding="utf-8",
                  errors="replace") as f:
            head = f.read(16384)
    except OSError:
        return None
    m = _ARCHIVE_STOP.search(head)
    return m.group(1) if m else None


def backup_type(argv: list[str] | tuple[str, ...]) -> str:
    """full | diff | incr (pgBackRest's default: incr, full when there is none yet)."""
    return option(argv, "type") or "incr"


def data_directory_bytes(pgdata: str) -> int | None:
    """The size of the files a full backup copies from the data directory
    (pg_wal's segments and the server's runtime files are not copied)."""
    files = data_directory_files(pgdata)
    return sum(files.values()) or None if files is not None else None


def data_directory_files(pgdata: str) -> dict[str, int] | None:
    """The files a backup copies from the data directory (paths relative to
    it) and their sizes; None when it cannot be read."""
    skip = {"pg_wal", "pg_xlog", "pg_replslot", "pg_stat_tmp", "pg_dynshmem", "pg_notify",
            "pg_serial", "pg_snapshots", "pg_subtrans"}
    out: dict[str, int] = {}
    try:
        for root, dirs, files in os.walk(pgdata):
            if root == pgdata:
                dirs[:] = [d for d in dirs if d not in skip]
            for name in files:
                path = os.path.join(root, name)
                try:
                    out[os.path.relpath(path, pgdata)] = os.stat(path).st_size
                except OSError:
                    continue
    except OSError:
        return None
    return out


# The data directory's sub-directories a backup reads files from
# (pg_wal and the server's runtime directories are not copied)
_DATA_DIRS = ("base", "global", "pg_tblspc", "pg_xact", "pg_clog", "pg_multixact",
              "pg_commit_ts", "pg_logical", "pg_twophase", "pg_stat", "pg_replslot")


def data_path(path: str) -> str:
    """A data file's path relative to the data directory (as pgBackRest
    names it: base/16384/16397, pg_xact/0000); a file at the directory's top
    (PG_VERSION, postgresql.auto.conf) by its name. The last such directory
    in the path counts: the data directory's own path may hold one."""
    best = -1
    for d in _DATA_DIRS:
        best = max(best, path.rfind(f"/{d}/"))
    return path[best + 1:] if best >= 0 else os.path.basename(path)
