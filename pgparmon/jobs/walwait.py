"""What a physical backup waits for around its copy, with figures: the
checkpoint before it, and WAL archiving before and after it.

**The archiver's backlog.** The archiver works through the completed WAL
segments in order (the oldest `.ready` first), one archive_command each, so
what stands before the segment a backup waits for is every segment between
pg_stat_archiver.last_archived_wal and that one: the backlog, counted from
WAL positions (no privilege needed: pg_current_wal_lsn() and pg_stat_archiver
are readable by any role). Which segment each tool waits for, from their
sources:

- pgBackRest (2.37+, archive-check on, its default): at its start, the
  segment being written just before pg_backup_start (which switches out of
  it: "check archive for prior segment"); at its stop, every segment up to
  the stop's (pg_backup_stop switches out of it);
- pg_basebackup -X none: at its end the server waits for the stop's segment
  (do_pg_backup_stop switches out of it) and the backup history file;
- pg_probackup in archive mode: at its start the segment of its start LSN
  (it runs pg_switch_wal after pg_backup_start); at its stop the stop LSN's.

In each case the segment is the newest one completed once the statement
that switches out of it has run: the driver names that moment (`aim`, with
`fixed`); before it, the segment being written is the one to come (`ahead`).

**The archiver's pace** is archived_count's over the last 30 s, counting
only the intervals in which it had work (a caught-up archiver's pace says
nothing of its speed), from the first in which it archived a segment (a
command held or hung for a while, then going on: its pace is what
follows): segments/s, and bytes/s through the segment size. Before two
segments over 2 s (or 10 s with fewer) it is "measuring"; 10 s of work
with nothing archived is "stuck". The time left is the backlog at that
pace.

**A spread checkpoint** (a backup that did not ask for a fast one) lasts up
to checkpoint_completion_target x checkpoint_timeout from when the backup
asked for it (the query_start of its statement: BASE_BACKUP,
pg_backup_start): the server publishes no checkpoint progress. It may
last longer: a checkpoint already running when the backup asked is
finished first, at its own pace, and a disk slower than the pace makes it
late. A CHECKPOINT (a superuser, or pg_checkpoint from 15) ends it at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import units as fmt

if TYPE_CHECKING:
    from ..snapshot import Backend, Snapshot

RATE_WINDOW_S = 30.0  # the archiver's pace: its last 30 s of work
MIN_SPAN_S = 2.0  # a pace from two segments or more archived over this long
IDLE_S = 10.0  # ... or from this long with fewer; none archived in it: stuck
_SEGMENT = re.compile(r"[0-9A-F]{24}")


def segment_number(name: str | None, seg_size: int | None) -> int | None:
    """A WAL segment file's number (its log and segment parts; the
    timeline left out); None for anything else (a .history, .backup or
    .partial file) or without the segment size."""
    if not name or not seg_size or not _SEGMENT.fullmatch(name):
        return None
    return int(name[8:16], 16) * (0x100000000 // seg_size) + int(name[16:24], 16)


def segment_name(timeline: int, segno: int, seg_size: int) -> str:
    per = 0x100000000 // seg_size
    return f"{timeline:08X}{segno // per:08X}{segno % per:08X}"


@dataclass
class WalWatch:
    """The archiver and the WAL position as a backup's samples show them
    (one per job, a field of its driver's state)."""

    seg_size: int | None = None
    written: int | None = None  # the newest completed segment
    archived: int | None = None  # the newest segment archived (by name)
    last_archived: str | None = None
    first: tuple[Any, ...] | None = None  # pg_stat_archiver at the job's first sample
    arch: tuple[Any, ...] | None = None  # ... and now
    checkpoint_timeout: float | None = None
    completion_target: float | None = None
    # (ts, archived_count, whether it had work then)
    hist: list[tuple[float, int, bool]] = field(default_factory=list)
    # a wait's step ("start", "stop") -> its segment and whether it is settled
    waits: dict[str, dict[str, Any]] = field(default_factory=dict)
    ts: float = 0.0
    server_ts: float | None = None

    # ---- readings --------------------------------------------------------

    def observe(self, snap: Snapshot) -> None:
        """One sample's archiver and WAL position (every sample of the job)."""
        db = snap.db
        if db is None or db.error:
            return
        self.ts, self.server_ts = snap.ts, db.server_ts
        if db.wal:
            lsn, seg, timeout, target = (tuple(db.wal) + (None,) * 4)[:4]
            if seg:
                self.seg_size = int(seg)
                if lsn is not None:
                    self.written = int(lsn) // self.seg_size - 1
            self.checkpoint_timeout = float(timeout) if timeout else self.checkpoint_timeout
            self.completion_target = float(target) if target else self.completion_target
        arch = db.archiver
        if not arch:
            return
        if self.first is None:
            self.first = tuple(arch)
        self.arch = tuple(arch)
        name = arch[5] if len(arch) > 5 else None
        n = segment_number(name, self.seg_size)
        if n is not None and (self.archived is None or n > self.archived):
            self.archived, self.last_archived = n, name
        count = int(arch[0] or 0)
        if self.hist and count < self.hist[-1][1]:
            self.hist.clear()  # the statistics were reset
        busy = self.written is not None and self.archived is not None \
            and self.written > self.archived
        self.hist.append((snap.ts, count, busy))
        while len(self.hist) > 2 and snap.ts - self.hist[1][0] > RATE_WINDOW_S:
            del self.hist[0]

    def aim(self, step: str, *, fixed: bool, ahead: int = 0, segno: int | None = None) -> None:
        """The segment a wait of `step` waits for: the newest completed one
        (plus `ahead`: the segment being written, which the tool's statement
        will switch out of), followed until `fixed` (that statement has run:
        the segment no longer moves); `segno`: the tool names it (exact,
        whatever was aimed at before)."""
        w = self.waits.setdefault(step, {"began": self.ts})
        if segno is not None:
            w.update(segno=segno, fixed=True)
            return
        if w.get("fixed") or self.written is None:
            return
        w["segno"] = self.written + ahead
        w["fixed"] = fixed

    # ---- figures ---------------------------------------------------------

    def pace(self) -> tuple[float | None, str]:
        """(segments/s, "measured" | "measuring" | "stuck") over the
        archiver's last 30 s of work: the intervals it had work from their
        start, from the one in which it archived a segment first (a command
        that hung, then went on: its pace is what follows)."""
        done = span = idle = 0.0
        for (t0, c0, busy), (t1, c1, _) in zip(self.hist, self.hist[1:]):
            if not busy:  # it had no work at the start of the interval
                continue
            if done == 0 and c1 == c0:
                idle += t1 - t0  # nothing archived yet in the window
                continue
            done += c1 - c0
            span += t1 - t0
        if done >= 2 and span >= MIN_SPAN_S or span >= IDLE_S:
            return done / span, "measured"
        if done == 0 and idle >= IDLE_S:
            return 0.0, "stuck"
        return None, "measuring"

    def failing(self) -> str | None:
        """Why archive_command fails now (its last failure after its last
        success, or failures since the job began), or None."""
        arch, first = self.arch, self.first
        if not arch:
            return None
        since = arch[1] - first[1] if first else 0
        now = bool(arch[3] and (arch[4] is None or arch[3] > arch[4]))
        if since <= 0 and not now:
            return None
        many = f"{since} failure(s) since the backup began; " if since > 0 else ""
        return f"archive_command fails ({many}last failed segment {arch[2]})"

    def archiving(self, step: str) -> dict[str, Any] | None:
        """The wait of `step` for the archiver, for the JSON: the segment it
        waits for, the segments and bytes before it still to archive, the
        archiver's pace and the time left. None: nothing read (a recording
        made before these readings)."""
        w = self.waits.get(step)
        if w is None or self.seg_size is None or "segno" not in w:
            return None
        seg = self.seg_size
        left = None if self.archived is None else max(0, w["segno"] - self.archived)
        rate, how = self.pace()
        timeline = int(self.last_archived[:8], 16) if self.last_archived else 1
        failing = self.failing()
        out: dict[str, Any] = {
            "wal": segment_name(timeline, w["segno"], seg) if w.get("fixed") else None,
            "last_archived_wal": self.last_archived,
            "segments": left, "bytes": left * seg if left is not None else None,
            "segments_per_s": round(rate, 3) if rate is not None else None,
            "bytes_per_s": round(rate * seg, 1) if rate is not None else None,
            "pace": "failing" if failing else how, "failing": failing,
            "left_s": None}
        if left == 0:
            out["left_s"] = 0.0
        elif left is not None and rate and not failing:
            out["left_s"] = round(left / rate, 1)
        return out

    def behind(self, step: str) -> bool:
        """Whether the archiver has yet to archive the settled segment of
        `step` (False: archived, or not known)."""
        w = self.waits.get(step) or {}
        return bool(w.get("fixed")) and self.archived is not None and \
            self.archived < w["segno"]

    def ready_at(self, step: str) -> float | None:
        """When the segment of `step` is archived, on the server's clock:
        pg_stat_archiver's last_archived_time once it is the last archived
        (when the archiver is already past it at the first look, that look's
        time: at the latest), else now plus the time left at the archiver's
        pace. None: not known (no pace yet, a failing command)."""
        w = self.waits.get(step)
        a = self.archiving(step)
        if w is None or a is None or self.server_ts is None:
            return None
        if a["segments"] == 0:
            arch = self.arch or ()
            done = arch[4] if len(arch) > 5 and a["wal"] and arch[5] == a["wal"] and arch[4] \
                else self.server_ts
            return float(w.setdefault("ready_at", done))
        if a["left_s"] is None:
            return None
        return self.server_ts + a["left_s"]

    def polled(self, step: str, since: float | None,
               limit: float | None = None) -> float | None:
        """A tool that looks for the segment of `step` in its archive from
        `since` (the server's clock) after ever longer sleeps, giving up
        after `limit` s (pgBackRest: see next_look): the seconds from now
        until it sees it there. None: not known (the archiver's time left
        not known, no start of its looking), or it gives up first (see
        gives_up)."""
        ready = self.ready_at(step)
        if ready is None or since is None or self.server_ts is None:
            return None
        look = next_look(max(0.0, ready - since), limit)
        return None if look is None else max(0.0, since + look - self.server_ts)

    def gives_up(self, step: str, since: float | None, limit: float) -> bool:
        """Whether a tool looking from `since` gives up (after `limit` s)
        before the archiver archives the segment of `step`, as far as its
        pace says."""
        ready = self.ready_at(step)
        return ready is not None and since is not None and ready - since > limit

    def stop_ahead(self, copy_left: float) -> float | None:
        """While the copy runs: how much longer than the copy's rest the
        archiver needs for the segments completed so far (at least that
        long the stop will wait; the WAL written meanwhile adds to it).
        None: not known (no pace yet, nothing read)."""
        if self.written is None or self.archived is None:
            return None
        left = max(0, self.written - self.archived)
        if left == 0:
            return 0.0
        rate, _ = self.pace()
        if not rate or self.failing():
            return None
        return max(0.0, left / rate - copy_left)

    def checkpoint(self, snap: Snapshot, session: Backend | None, fast: bool) -> dict[str, Any]:
        """The checkpoint a backup's statement waits for: whether fast, its
        bound (spread: checkpoint_completion_target x checkpoint_timeout),
        how long it has waited (since the statement began, by the server's
        clock) and, spread, the time left to its bound (0 once past it)."""
        waited = None
        if session is not None and session.query_start and snap.db is not None \
                and snap.db.server_ts is not None:
            waited = max(0.0, snap.db.server_ts - session.query_start)
        bound = None
        if not fast and self.checkpoint_timeout:
            bound = self.checkpoint_timeout * (self.completion_target or 0.9)
        left = max(0.0, bound - waited) if bound is not None and waited is not None else None
        return {"fast": fast, "bound_s": round(bound, 1) if bound is not None else None,
                "checkpoint_timeout_s": self.checkpoint_timeout,
                "completion_target": self.completion_target,
                "waited_s": round(waited, 1) if waited is not None else None,
                "left_s": round(left, 1) if left is not None else None,
                "past_bound": bool(bound is not None and waited is not None and waited > bound)}


def next_look(t: float, limit: float | None = None, first: float = 0.1) -> float | None:
    """When a tool that looks for a file at 0 s, then again after ever
    longer sleeps, first looks at or after `t` s. pgBackRest's Wait
    (src/common/wait.c), a new one for each segment it looks for: sleeps of
    0.1, 0.1, 0.2, 0.3, 0.5, 0.8 s..., each the sum of the two before (up
    to 2.47; from 2.48 the 0.1 s is not repeated, so its looks come 0.1 s
    sooner: within the estimate's error), each cut to the time left of its
    timeout (`limit`), at which it looks a last time. None: `t` is past
    `limit` (it gives up first)."""
    if limit is not None and t > limit:
        return None
    at, prev, sleep = 0.0, 0.0, first
    while at < t:
        at += sleep if limit is None else min(sleep, limit - at)
        prev, sleep = sleep, sleep + prev
    return at


def wait_doc(step: str, ck: dict[str, Any] | None,
             arch: dict[str, Any] | None) -> dict[str, Any] | None:
    """`job.backup.wait`: what the backup waits on now (`on`), both waits'
    figures, and the time left: the longest of the two (the archiver works
    while the checkpoint runs) that is known (a fast checkpoint is not
    counted: seconds at most; the archiver's part is not known before its
    pace is measured, and lasts until the tool sees the segment where that
    is known: `seen_in_s`); None when neither is known, or when it waits on
    neither."""
    if ck is None and arch is None:
        return None
    on = "checkpoint" if ck is not None else "archiving"
    parts: list[float | None] = []
    if ck is not None and not ck["fast"]:
        parts.append(None if ck["past_bound"] else ck["left_s"])
    if arch is not None:  # until the tool sees the segment, where that is known
        parts.append(arch["seen_in_s"] if arch.get("seen_in_s") is not None
                     else arch["left_s"])
    known = [p for p in parts if p is not None]
    left = max(known) if known else None
    return {"step": step, "on": on, "left_s": left, "checkpoint": ck, "archiving": arch}


def archiving_text(arch: dict[str, Any] | None, waits_for: str,
                   unfixed: str = "the backup waits until it times out") -> str:
    """The verdict's words for a wait on the archiver: `waits_for` what
    ("the segment before the backup's start"), the backlog before it, the
    pace and the time left; a failing archive_command, and what becomes of
    the backup while it fails (`unfixed`)."""
    if arch is None:
        return f"waiting for {waits_for} to be archived (archive_command)"
    n = arch["segments"]
    wal = f" ({arch['wal']})" if arch.get("wal") else ""
    if n is None:
        head = (f"waiting for {waits_for}{wal} to be archived: the archiver's position is "
                "not known (pg_stat_archiver has no last archived segment)")
    elif n == 0:
        return (f"{waits_for}{wal} is archived (the archiver is at "
                f"{arch['last_archived_wal']}): the backup goes on once its tool sees it")
    else:
        head = (f"archiving: {fmt.count_exact(n)} segment(s) ({fmt.size(arch['bytes'])}) "
                f"queued up to {waits_for}{wal}")
    if arch.get("failing"):
        return (f"{head}, and {arch['failing']}: fix archive_command (the server log says "
                f"why), or {unfixed}")
    if n is None:
        return head
    if arch["pace"] == "measuring":
        return f"{head}; archive_command's pace: measuring"
    if arch["pace"] == "stuck":
        return (f"{head}; archive_command has archived nothing for {fmt.duration(IDLE_S)} or "
                "more: one command is slow or hangs (the server log, the archive's storage)")
    return (f"{head}, archive_command archives {_num(arch['segments_per_s'])} segments/s "
            f"({fmt.rate(arch['bytes_per_s'])}): about {fmt.about(arch['left_s'])}")


def _num(x: float) -> str:
    """A pace to two significant digits, never in exponent form."""
    return f"{x:.0f}" if x >= 10 else f"{x:.2g}"


def checkpoint_text(ck: dict[str, Any], way_out: str, who: str = "the backup") -> str:
    """The verdict's words for a checkpoint wait: a fast one writes every
    dirty buffer first; a spread one, its bound, the time left and the way
    out (`way_out`: the tool's fast option)."""
    if ck["fast"]:
        return (f"waiting for the fast checkpoint {who} asked for: the server writes out "
                "every dirty buffer first")
    if ck["bound_s"] is None:
        return (f"waiting for a spread checkpoint before copying (it lasts up to "
                f"checkpoint_completion_target x checkpoint_timeout): next time {way_out}, "
                "or run CHECKPOINT now (a superuser) if an I/O burst is acceptable")
    bound = (f"{fmt.duration(ck['bound_s'])} (checkpoint_completion_target "
             f"{ck['completion_target'] or 0.9:g} x checkpoint_timeout "
             f"{fmt.duration(ck['checkpoint_timeout_s'])})")
    if ck["past_bound"]:
        where = (f"waiting {fmt.duration(ck['waited_s'])} for a spread checkpoint, past its "
                 f"bound of {bound}: a checkpoint already running when {who} asked is "
                 "finished first, or the disk is slower than its pace")
    elif ck["left_s"] is not None:
        where = (f"waiting for a spread checkpoint before copying: it lasts up to {bound}, "
                 f"about {fmt.duration(ck['left_s'])} left")
    else:
        where = f"waiting for a spread checkpoint before copying: it lasts up to {bound}"
    return (f"{where}; next time {way_out}, or run CHECKPOINT now (a superuser) to end it "
            "at once if an I/O burst is acceptable")


# eta_reason of an ETA that counts a wait before the copy and not the copy
WAIT_ONLY = ("the wait only: the copy is not counted until it runs (its pace is not "
             "measured yet)")


def wait_eta(w: dict[str, Any] | None) -> float | None:
    """The seconds left of a wait that counts (more than nothing), else None."""
    return w["left_s"] if w and w["left_s"] is not None and w["left_s"] > 0 else None


def wait_reason(w: dict[str, Any] | None) -> str | None:
    """Why a wait's time left (or a part of it) is not known, for
    `eta_reason`; None: it is (or there is no wait)."""
    if w is None:
        return None
    ck, arch = w["checkpoint"], w["archiving"]
    if arch is not None and arch["left_s"] is None:
        n = arch["segments"]
        queued = f" ({fmt.count_exact(n)} segment(s) queued)" if n else ""
        if arch["failing"]:
            return f"waiting for WAL archiving, and {arch['failing']}"
        if arch["pace"] == "stuck":
            return f"waiting for WAL archiving: nothing archived lately{queued}"
        if n is None:
            return "waiting for WAL archiving: the archiver's position is not known"
        return f"waiting for WAL archiving: measuring archive_command's pace{queued}"
    if ck is not None and ck["past_bound"]:
        return "waiting for the checkpoint: past its bound"
    if ck is not None and (ck["fast"] or ck["left_s"] is None):
        return "waiting for the checkpoint to finish"
    return None
