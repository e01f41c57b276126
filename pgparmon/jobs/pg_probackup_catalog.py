"""What pg_probackup says on its command line and writes in its catalog,
read for its driver (pg_probackup.py): its command word and options, a
backup's backup.control and backup_content.control (its file list, in the
order it copies), the data directory's files it copies, the backup whose
backup.pid names a process, and how long the instance's earlier backups took
to sync and validate. Plain file reading: nothing here knows the Tracker."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..cmdline import command_word

DONE_STATES = ("DONE", "OK")
# what backup.control says that pgparmon shows (never primary_conninfo)
CONTROL_KEYS = ("status", "backup-mode", "stream", "compress-alg", "compress-level",
                "start-time", "end-time", "program-version", "pgdata-bytes", "data-bytes",
                "uncompressed-bytes", "wal-bytes", "stop-lsn")
# files of the backup's database/ directory that are no copy of a data file
OWN_FILES = ("backup_label", "tablespace_map", "database_map")
# the data directory's contents pg_probackup leaves out (its dir.c)
_SKIP_DIRS = {"pg_wal", "pg_xlog", "pg_stat_tmp", "pg_replslot", "pg_dynshmem", "pg_notify",
              "pg_serial", "pg_snapshots", "pg_subtrans"}
_SKIP_FILES = {"postgresql.auto.conf.tmp", "current_logfiles.tmp", "recovery.conf",
               "postmaster.pid", "postmaster.opts", "probackup_recovery.conf",
               "recovery.signal", "standby.signal", "backup_label", "tablespace_map"}
# a file's bytes written in backup_content.control
_WRITTEN = re.compile(r'"size":"(-?\d+)"')
# options that take a value (short and long), for finding the command word
_VALUED = {"-B", "-b", "-j", "-D", "-d", "-h", "-p", "-U", "-S", "--backup-path",
           "--instance", "--backup-mode", "--threads", "--pgdata", "--pgdatabase",
           "--pghost", "--pgport", "--pguser", "--slot", "--compress-algorithm",
           "--compress-level", "--remote-host", "--remote-user", "--remote-port",
           "--note", "--ttl", "--expire-time", "--external-dirs", "--log-level-console",
           "--log-level-file", "--log-directory", "--log-filename", "--retention-redundancy",
           "--retention-window", "--wal-depth"}


def command_of(argv: list[str] | tuple[str, ...]) -> str | None:
    """pg_probackup's command (`backup`, `restore`, `validate`...): the
    first argument that is neither an option nor an option's value."""
    return command_word(argv, lambda a: a.startswith("-"), lambda a: a in _VALUED)


def opt(argv: list[str] | tuple[str, ...], short: str | None, long: str) -> str | None:
    """An option's value: `-j 4`, `-j4`, `--threads=4`, `--threads 4`."""
    args = list(argv)
    for i, a in enumerate(args):
        if a == f"--{long}" or (short and a == short):
            return args[i + 1] if i + 1 < len(args) else None
        if a.startswith(f"--{long}="):
            return a.split("=", 1)[1]
        if short and a.startswith(short) and len(a) > len(short) and not a.startswith("--"):
            return a[len(short):]
    return None


def read_control(path: str) -> dict[str, str] | None:
    """A backup.control file (`key = value` lines, values maybe quoted)."""
    out: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if "=" in line and not line.lstrip().startswith("#"):
                    k, _, v = line.partition("=")
                    out[k.strip()] = v.strip().strip("'\"")
    except OSError:
        return None
    return out


def data_files(pgdata: str, listed: list[str] | None = None
               ) -> tuple[dict[str, int], dict[str, str]] | None:
    """What pg_probackup copies from a data directory: the files (paths
    relative to it, tablespaces as `pg_tblspc/OID/...`) and their sizes, and
    where each of those trees really is (a tablespace's link resolved: the
    process's open files name the real path). `listed`: the files its own
    list names (those are stat'ed), else the directory is walked with its
    exclusions. None: not readable."""
    if not os.path.isdir(pgdata):
        return None
    roots = {"": os.path.realpath(pgdata)}
    tblspc = os.path.join(pgdata, "pg_tblspc")
    try:
        for oid in os.listdir(tblspc):
            roots[f"pg_tblspc/{oid}"] = os.path.realpath(os.path.join(tblspc, oid))
    except OSError:
        pass
    sizes: dict[str, int] = {}
    if listed is not None:
        for rel in listed:
            try:
                sizes[rel] = os.stat(os.path.join(pgdata, rel)).st_size
            except OSError:
                sizes[rel] = 0  # gone since it was listed: nothing to copy
        return sizes, roots
    for rel_root, real in roots.items():
        for root, dirs, files in os.walk(real):
            if root == real and not rel_root:
                dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and d != "pg_tblspc"]
            dirs[:] = [d for d in dirs if d != "pgsql_tmp"]
            sub = os.path.relpath(root, real)
            for name in files:
                if name in _SKIP_FILES or name == "pg_internal.init" or (
                        name[:1] == "t" and name[1:2].isdigit()):  # temporary relations
                    continue
                rel = os.path.normpath(os.path.join(rel_root, sub, name))
                try:
                    sizes[rel] = os.stat(os.path.join(root, name)).st_size
                except OSError:
                    continue
    return sizes, roots


def listed_files(backup_dir: str) -> list[str] | None:
    """The data directory's regular files in the order pg_probackup copies,
    syncs and validates them: its backup_content.control, written in that
    order (by size, equal sizes in the order its quicksort leaves them) as
    the copy starts, and again every minute and at the end. None: not
    written yet, or not readable."""
    out: list[str] = []
    try:
        with open(os.path.join(backup_dir, "backup_content.control"), encoding="utf-8",
                  errors="replace") as f:
            for line in f:
                try:
                    d = json.loads(line)
                    mode, ext = int(d.get("mode", 0)), str(d.get("external_dir_num", "0"))
                except (ValueError, TypeError, AttributeError):
                    continue
                if ext == "0" and stat.S_ISREG(mode) and d.get("path"):
                    out.append(str(d["path"]))
    except OSError:
        return None
    return out or None


def validations(backup_dir: str, keep: int = 5) -> list[dict[str, Any]]:
    """How long the instance's earlier backups took to sync and to
    validate, newest first. Their backup.control's end-time is written when
    the sync is over and the validation starts (status DONE), and the file
    is written again when the validation ends (status OK): its modification
    time ends it. Their backup_content.control is written last just before
    the sync: its modification time starts it; the sync fsyncs each file it
    lists with bytes written. Backups whose control file was written again
    later (a `validate`, a merge: more than an hour after) are left out."""
    root = os.path.dirname(backup_dir.rstrip("/"))
    me = os.path.basename(backup_dir.rstrip("/"))
    try:
        # backup IDs are their start time in base 36: newest last
        names = sorted((n for n in os.listdir(root) if n != me and len(n) == len(me)),
                       reverse=True)
    except OSError:
        return []
    out: list[dict[str, Any]] = []
    for name in names[:20]:
        path = os.path.join(root, name, "backup.control")
        ctl = read_control(path)
        if not ctl or ctl.get("status") != "OK" or not ctl.get("end-time"):
            continue
        try:
            end = datetime.fromisoformat(ctl["end-time"]).timestamp()
            took = os.stat(path).st_mtime - end
            data = int(ctl.get("data-bytes") or 0)
        except (OSError, ValueError):
            continue
        if 0 <= took <= 3600 and data > 0:
            out.append({"id": name, "compress": ctl.get("compress-alg") or "none",
                        "data_bytes": data, "validate_s": round(took, 2),
                        "mode": ctl.get("backup-mode"), **_sync_of(root, name, end)})
        if len(out) >= keep:
            break
    return out


def _sync_of(root: str, name: str, end: float) -> dict[str, Any]:
    """An earlier backup's sync: its seconds (from its file list's last
    write to its end-time, whole seconds) and how many files it synced."""
    path = os.path.join(root, name, "backup_content.control")
    try:
        began = os.stat(path).st_mtime
        with open(path, encoding="utf-8", errors="replace") as f:
            files = sum(1 for v in _WRITTEN.findall(f.read()) if v not in ("0", "-1"))
    except OSError:
        return {}
    took = end - began
    if not -1.0 <= took <= 3600 or not files:
        return {}
    return {"sync_s": round(max(0.0, took), 2), "synced_files": files}


def backup_dir_of(command: Sequence[str], pid: int) -> str | None:
    """The backup (under -B / BACKUP_PATH and --instance) whose backup.pid
    holds this process's pid."""
    path = opt(command, "-B", "backup-path")
    instance = opt(command, None, "instance")
    if not path or not instance:
        return None
    root = os.path.join(path, "backups", instance)
    try:
        names = sorted(os.listdir(root), reverse=True)  # newest id first (base36 time)
    except OSError:
        return None
    for name in names[:20]:
        try:
            with open(os.path.join(root, name, "backup.pid"), encoding="utf-8") as f:
                if f.read().strip().split()[0] == str(pid):
                    return os.path.join(root, name)
        except (OSError, IndexError):
            continue
    return None


def stopped(ctl: dict[str, str]) -> bool:
    """Whether the stop is over: backup.control holds the stop LSN (0/0
    until then)."""
    return ctl.get("stop-lsn") not in (None, "", "0/0")
