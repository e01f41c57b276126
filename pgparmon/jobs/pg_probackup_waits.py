"""What pg_probackup waits on around its copy, with figures (walwait): at
its start pg_backup_start's checkpoint, then in archive mode (and for a
PAGE backup in either mode) the archiver, up to the segment of its start
LSN; at its stop in archive mode the archiver, up to the stop LSN's
segment. Works on the driver's state and the job's command line, as
pg_probackup_steps.py."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..analyze.bottleneck import Verdict
from ..snapshot import Backend, Snapshot
from . import walwait
from .pg_probackup_catalog import opt, stopped
from .pg_probackup_state import ProbackupState
from .pg_probackup_steps import control, streamed

# its stop's statement (it switches out of the stop LSN's segment)
_BACKUP_STOP = re.compile(r"pg_(?:backup_stop|stop_backup)\s*\(", re.IGNORECASE)
SMOOTH_WAY_OUT = "leave out --smooth-checkpoint (pg_probackup asks for a fast one by default)"
TIMES_OUT = "the backup fails when its archive_timeout (300 s unless set) runs out"


def archiving(st: ProbackupState, waits_for: str) -> Verdict:
    """A wait for archive_command (archive-push): the backlog before the
    segment, the archiver's pace, and whether it fails now."""
    arch = (st.wait or {}).get("archiving")
    text = walwait.archiving_text(arch, waits_for, TIMES_OUT)
    failing = st.wal.failing()
    if arch is None and failing:  # no WAL position read (an older recording)
        text += f", and {failing}: fix archive_command (the server log says why), or {TIMES_OUT}"
    return Verdict("archiving", text)


def waits_archived(st: ProbackupState, command: Sequence[str]) -> bool:
    """Whether its start waits for the archiver: in archive mode, and for a
    PAGE backup in either mode (pg_probackup's backup.c)."""
    mode = (control(st).get("backup-mode") or opt(command, "-b", "backup-mode") or "").upper()
    return not streamed(st, command) or mode == "PAGE"


def waits(st: ProbackupState, command: Sequence[str], session: Backend | None,
          snap: Snapshot) -> dict[str, Any] | None:
    """What the backup waits on now (`session`: its client backend), with
    the figures: at its start pg_backup_start's checkpoint and, where it
    waits for the archiver, the segment of its start LSN (which it switches
    out of with pg_switch_wal once pg_backup_start returns); at its stop in
    archive mode the stop LSN's segment (pg_backup_stop switches out of it)."""
    ww = st.wal
    phase = st.phase
    query = (session.query or "") if session is not None else ""
    if phase == "starting":
        # its session works in the start only in pg_backup_start (its other
        # statements there take no time): the checkpoint
        in_start = session is not None and session.state == "active"
        ck = ww.checkpoint(snap, session, "--smooth-checkpoint" not in command) \
            if in_start else None
        arch = None
        if waits_archived(st, command):
            ww.aim("start", fixed=not in_start, ahead=1 if in_start else 0)
            arch = ww.archiving("start")
        return walwait.wait_doc("start", ck, arch)
    if phase == "stopping" and not streamed(st, command):
        done = bool(_BACKUP_STOP.search(query)) or stopped(control(st))
        ww.aim("stop", fixed=done, ahead=0 if done else 1)
        return walwait.wait_doc("stop", None, ww.archiving("stop"))
    return None


def start_verdict(st: ProbackupState, command: Sequence[str]) -> Verdict | None:
    """The start's limit: the checkpoint (then the archiver), or the archiver."""
    wait = st.wait or {}
    ck = wait.get("checkpoint")
    if ck is not None:
        text = walwait.checkpoint_text(ck, SMOOTH_WAY_OUT, "pg_probackup")
        arch = wait.get("archiving")
        if arch is not None and arch["segments"]:
            text += "; then it waits for the archiver: " + walwait.archiving_text(
                arch, "the segment the backup starts in", TIMES_OUT)
        return Verdict("checkpoint", text)
    if waits_archived(st, command):
        return archiving(st, "the segment the backup starts in")
    return None
