"""What a pgBackRest backup waits on around its copy, with figures
(walwait): at its start pg_backup_start's checkpoint, then (archive-check)
the archiver up to the segment before the backup, and when pgBackRest looks
for it in its repository; at its stop the archiver up to the stop's
segment. The verdicts that name those waits. Works on the driver's state,
the job's command line and its session, as pg_probackup_waits.py does."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .. import units as fmt
from ..analyze.bottleneck import Verdict
from ..snapshot import Backend, Snapshot
from . import walwait
from .pgbackrest_repo import option
from .pgbackrest_state import BackrestState

if TYPE_CHECKING:
    from ..analyze.progress import Tracker

# its start: `pg_backup_start('pgBackRest backup started at ' || current_timestamp,
# true|false ...)` (pg_start_backup before 15): the second argument asks for a
# fast checkpoint
_START = re.compile(r"pg_(?:backup_start|start_backup)\s*\(([^,]*),\s*(true|false)?",
                    re.IGNORECASE)
# what it asks right after pg_backup_start (its databases, its tablespaces,
# a forced switch when the segment had not moved): the start is done
_AFTER_START = re.compile(r"pg_catalog\.pg_(?:database|tablespace|switch_(?:wal|xlog)|"
                          r"create_restore_point)\b", re.IGNORECASE)
_STOP = re.compile(r"pg_(?:backup_stop|stop_backup)\s*\(", re.IGNORECASE)
FAST_OPTION = "--start-fast (start-fast=y in its configuration)"
TIMES_OUT = "the backup fails when its archive-timeout (60 s unless set) runs out"
ARCHIVE_TIMEOUT_S = 60.0  # archive-timeout's default


def archive_check(tr: Tracker) -> bool:
    """Whether pgBackRest waits for the archive at its start and stop
    (archive-check, on unless the command line turns it off; a setting in its
    configuration file is not seen)."""
    argv = tr.job.command
    return "--no-archive-check" not in argv and \
        (option(argv, "archive-check") or "y").lower() not in ("n", "no", "false", "0")


def _session(tr: Tracker, snap: Snapshot) -> Backend | None:
    """Its session on the server (the one that starts and stops the backup)."""
    members = [b for b in tr.members(snap) if b.backend_type == "client backend"]
    return next((b for b in members if _START.search(b.query or "")), None) or \
        (members[0] if members else None)


def waits(tr: Tracker, st: BackrestState, snap: Snapshot) -> dict[str, Any] | None:
    """What the backup waits on at its start (the checkpoint of
    pg_backup_start; the archiver, up to the segment pg_backup_start switches
    out of) and at its stop (the archiver, up to the stop's segment), with
    their figures (walwait)."""
    ww = st.wal
    phase = st.phase
    checks = archive_check(tr)
    if phase == "starting":
        b = _session(tr, snap)
        m = _START.search(b.query or "") if b is not None else None
        if m or b is not None and _AFTER_START.search(b.query or ""):
            st.start_seen = True  # pg_backup_start has switched out of the segment
        ck = None
        if m and b is not None and b.state == "active":
            fast = m.group(2).lower() == "true" if m.group(2) else \
                "--start-fast" in tr.job.command
            ck = ww.checkpoint(snap, b, fast)
        arch = None
        if checks:
            seen = st.start_seen
            ww.aim("start", fixed=seen, ahead=0 if seen else 1)
            arch = looking(tr, ww, b)
        return walwait.wait_doc("start", ck, arch)
    if phase == "archive-wait" and checks:
        return walwait.wait_doc("stop", None, ww.archiving("stop"))
    return None


def aim_stop(tr: Tracker, st: BackrestState, snap: Snapshot) -> None:
    """The segment pgBackRest's stop waits for (every one up to it, each in
    turn): its manifest's backup-archive-stop once the copy of the manifest
    it saves before it looks shows it (exact; a posix repository this user
    can read); before that, once its session is seen in pg_backup_stop, the
    segment being written (the one pg_backup_stop switches out of), fixed
    once the statement has run."""
    ww = st.wal
    segno = walwait.segment_number(st.archive_stop, ww.seg_size)
    if segno is not None:
        ww.aim("stop", fixed=True, segno=segno)
        return
    b = next((b for b in tr.members(snap) if _STOP.search(b.query or "")), None)
    if b is not None:
        running = b.state == "active"
        ww.aim("stop", fixed=not running, ahead=1 if running else 0)


def _archive_timeout(tr: Tracker) -> tuple[float, bool]:
    """pgBackRest's archive-timeout in seconds, and whether its command line
    gives it (else its default: a setting in its configuration file is not
    seen)."""
    given = option(tr.job.command, "archive-timeout")
    try:
        return (float(given), True) if given else (ARCHIVE_TIMEOUT_S, False)
    except ValueError:
        return ARCHIVE_TIMEOUT_S, False


def looking(tr: Tracker, ww: walwait.WalWatch, b: Backend | None) -> dict[str, Any] | None:
    """The archiver's figures for the start's wait, and when pgBackRest sees
    the segment in its repository (`seen_in_s`). Its session goes idle after
    its last statement before it looks (the start's pg_database and
    pg_tablespace lists; a forced switch); from then it looks, then again
    after ever longer sleeps (walwait.next_look), so it sees the segment up
    to a sleep after the archiver archived it (after a minute's wait, its
    next look is 38 s later), or gives up at its archive-timeout
    (`gives_up`: the backup fails). Only at the start: at its stop it has
    closed its session, and it looks for each segment up to the stop's in
    turn, each with its sleeps from 0.1 s again; from a standby it first
    waits for the standby's replay."""
    arch = ww.archiving("start")
    if arch is None or b is None or b.state != "idle" or b.state_change is None \
            or not _AFTER_START.search(b.query or "") or _from_standby(tr):
        return arch
    limit, given = _archive_timeout(tr)
    seen = ww.polled("start", b.state_change, limit)
    arch["seen_in_s"] = round(seen, 1) if seen is not None else None
    arch["archive_timeout_s"] = limit if given else None
    arch["gives_up"] = ww.gives_up("start", b.state_change, limit)
    return arch


def _from_standby(tr: Tracker) -> bool:
    """--backup-standby on its command line (a setting in its configuration
    file is not seen)."""
    argv = tr.job.command
    return "--backup-standby" in argv or \
        (option(argv, "backup-standby") or "n").lower() in ("y", "yes", "true", "1")


def wait_verdict(wait: dict[str, Any] | None, phase: str, failing: str | None) -> Verdict:
    """The start's and the stop's limit: the checkpoint, then the archiver
    (`failing`: archive_command fails, as pg_stat_archiver says)."""
    what = ("the segment before the backup's start" if phase == "starting"
            else "the backup's last segment")
    ck = wait["checkpoint"] if wait else None
    arch = wait["archiving"] if wait else None
    if failing and arch is None:  # no WAL position read (an older recording)
        return Verdict("archiving", f"pgBackRest waits for WAL archiving, and {failing}: fix "
                       f"archive_command (the server log says why), or {TIMES_OUT}")
    if arch is not None and arch["failing"]:
        return Verdict("archiving", walwait.archiving_text(arch, what, TIMES_OUT))
    if ck is not None:
        text = walwait.checkpoint_text(ck, FAST_OPTION, "pgBackRest")
        if arch is not None and arch["segments"]:
            text += "; then it checks the archive: " + walwait.archiving_text(arch, what, TIMES_OUT)
        return Verdict("checkpoint", text)
    if arch is not None:
        return Verdict("archiving", walwait.archiving_text(arch, what, TIMES_OUT) +
                       _looks_text(arch))
    if phase == "starting":
        return Verdict("starting", "pgBackRest prepares the backup (its checks, "
                       "pg_backup_start): no file is copied yet")
    return Verdict("archiving", "waiting for the backup's last WAL segment to be "
                   "archived (archive_command, archive-push)")


def _looks_text(arch: dict[str, Any]) -> str:
    """When pgBackRest sees the start's segment in its repository, or that
    its archive-timeout runs out first (nothing where neither is known)."""
    if arch.get("gives_up"):
        limit = arch.get("archive_timeout_s")
        timeout = (f"its archive-timeout ({fmt.duration(limit)}, its command line)" if limit
                   else f"its archive-timeout ({fmt.duration(ARCHIVE_TIMEOUT_S)} unless its "
                   "configuration sets another)")
        return (f"; at this pace {timeout} runs out first and the backup fails: a faster "
                "archive_command, or a longer --archive-timeout")
    seen = arch.get("seen_in_s")
    if not seen:
        return ""
    return ("; pgBackRest looks for it in its repository after ever longer sleeps (from "
            f"0.1 s, each the sum of the two before): it sees it in about {fmt.about(seen)}")
