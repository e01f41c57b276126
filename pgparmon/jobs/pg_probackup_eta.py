"""pg_probackup's own ETA: the rest of the step it is in at that step's
rate (the copy's and the validation's shared out to its threads), the stop's
wait for its WAL stream, the sync and the validation still to come (timed
from the instance's earlier backups when its catalog has them), and the
words that say what the ETA counts (eta_basis). Works on the driver's state
and the job's command line, as pg_probackup_steps.py."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from typing import Any

from ..analyze.bottleneck import BUSY_CPU
from .. import units as fmt
from . import walwait
from .pg_probackup_catalog import opt
from .pg_probackup_state import ProbackupState, StepPass
from .pg_probackup_steps import control, step_pass, step_total, streamed, validates

# its WAL stream sends a status message every 10 s (standby_message_timeout):
# with no WAL arriving, that is when it sees that the stop LSN was set
STATUS_INTERVAL_S = 10.0
# with no earlier validation of the instance to time: the validation of a
# byte written taken as half the copy's time for a byte read. The copy reads
# each byte and writes it (compressing it: the slow half of zlib), the
# validation only reads it back (and decompresses: the fast half)
VALIDATE_PER_COPY = 0.5


def step_eta(st: ProbackupState, step: str,
              threads: int | None = None) -> tuple[float | None, str | None]:
    """The rest of a step at its rate over its last 30 s; `threads`: the
    step's files shared out to that many threads (_schedule)."""
    p = step_pass(st, step)
    hist = p.hist
    if len(hist) < 2 or hist[-1][0] - hist[0][0] < 1.0:
        return None, "measuring"
    rate = (hist[-1][1] - hist[0][1]) / (hist[-1][0] - hist[0][0])
    if rate <= 0:
        return None, "measuring"
    if threads and p.busy:
        busy = [n for t, n in p.busy if t >= hist[0][0]]
        per_thread = rate / max(1.0, sum(busy) / max(1, len(busy)))
        return _schedule(st, p, threads) / per_thread, None
    return max(0.0, step_total(st, step) - p.done) / rate, None


def own_cores(st: ProbackupState, jobs: int | None) -> int | None:
    """-j when its worker threads each keep a core busy (compression with
    cores to spare): then each thread goes at its own pace and the last file
    alone goes at one thread's. Otherwise they share what limits them (the
    disk, a host whose CPUs are busy with other work: one thread alone then
    gets what two shared), and the rest goes at the process's rate: None."""
    cpu = list(st.worker_cpu.values())
    if not jobs or not cpu or sum(cpu) / len(cpu) < BUSY_CPU:
        return None
    return jobs


def _schedule(st: ProbackupState, p: StepPass, threads: int) -> float:
    """The bytes the busiest of `threads` threads still has to read, each
    finishing its file in flight, then taking the next one of the list (the
    largest last: one thread copies it alone at the end). The small files
    ahead (those under a 64th of a thread's share) go in lumps of that size:
    a few hundred units at most, whatever the number of files."""
    left = p.left
    loads = sorted(left.values(), reverse=True)[:threads]
    loads += [0.0] * (threads - len(loads))
    sizes_in_order: list[int] = st.sizes_in_order
    low = p.low
    skip = {st.index[r] for r in (*left, *p.finished)}
    rest = float(st.prefix[-1] - st.prefix[low]) - sum(
        st.sizes[r] for r in (*left, *p.finished) if st.index[r] >= low)
    lump = max(1.0, (rest + sum(loads)) / threads / 64.0)
    big = max(low, bisect.bisect_left(sizes_in_order, lump, lo=low))
    small = sum(sizes_in_order[i] for i in skip if low <= i < big)
    units = [lump] * int((st.prefix[big] - st.prefix[low] - small) // lump)
    units += [float(sizes_in_order[i]) for i in range(big, len(sizes_in_order))
              if i not in skip]
    heapq.heapify(loads)
    for u in units:
        heapq.heappush(loads, heapq.heappop(loads) + u)
    return max(loads)


def stream_wait(st: ProbackupState, stop_at: float) -> float:
    """Seconds its stop waits for its WAL stream, the stop beginning at
    `stop_at`. The stream stops once it sees the stop LSN set (about a
    second after pg_backup_stop), which it checks when WAL arrives or when
    it sends its status message: every 10 s from its start (pg_probackup's
    standby_message_timeout). WAL may arrive sooner; with none (the stop
    record is sent before the stop LSN is set) it waits for the message."""
    began = st.stream_began
    if began is None:
        return 0.0
    since = stop_at + 1.0 - began
    return STATUS_INTERVAL_S - since % STATUS_INTERVAL_S


def validation_ahead(st: ProbackupState, command: Sequence[str]) -> float | None:
    """Seconds the validation will take, before it starts: it reads back
    what the copy wrote (written per byte read, times the total), as fast
    per byte as the instance's last validation with this compression (its
    catalog), else at twice the rate the copy read the data directory
    (VALIDATE_PER_COPY). 0 without validation; None when the copy was not
    watched."""
    if not validates(command) or st.phase == "validate":
        return 0.0
    first, last = st.copy_first, st.copy_last
    ratio = st.write_ratio
    if ratio is None:
        return None
    earlier = _earlier_validation(st)
    if earlier is not None:  # as fast as its last backup's, per byte written
        return float(st.total) * ratio * earlier["validate_s"] / earlier["data_bytes"]
    if not first or not last or last[0] - first[0] < 1.0:
        return None
    rate = (last[1] - first[1]) / (last[0] - first[0])
    if st.phase == "copy":  # while it copies: its recent pace
        p = step_pass(st, "copy").hist
        if len(p) >= 2 and p[-1][0] - p[0][0] >= 1.0 and p[-1][1] > p[0][1]:
            rate = (p[-1][1] - p[0][1]) / (p[-1][0] - p[0][0])
    if rate <= 0:
        return None
    return float(st.total) * ratio / rate * VALIDATE_PER_COPY


def sync_ahead(st: ProbackupState, command: Sequence[str]) -> float | None:
    """Seconds the sync will take, before it starts (a FULL backup: it
    syncs every file it copied): as long per file as the instance's last
    timed sync (100 files or more). None: no such backup, a DELTA or PAGE
    (how many files it writes is not known ahead), or --no-sync."""
    mode = (control(st).get("backup-mode") or opt(command, "-b", "backup-mode")
            or "").upper()
    if mode != "FULL" or "--no-sync" in command:
        return None
    for h in st.history:
        if h.get("synced_files", 0) >= 100 and h.get("sync_s") is not None:
            return float(st.files) * float(h["sync_s"]) / h["synced_files"]
    return None


def _earlier_validation(st: ProbackupState) -> dict[str, Any] | None:
    """The newest earlier backup of this instance with the same compression
    whose validation can be timed (64 MB or more written: its control file's
    end-time has whole seconds), its time less the half second that rounding
    adds on average."""
    comp = control(st).get("compress-alg") or "none"
    for h in st.history:
        if h.get("compress") == comp and h.get("data_bytes", 0) >= 64 << 20:
            return {**h, "validate_s": max(0.25, float(h["validate_s"]) - 0.5)}
    return None


def eta_basis(st: ProbackupState, command: Sequence[str]) -> str | None:
    phase = st.phase
    if phase == "starting" and walwait.wait_eta(st.wait) is not None:
        return ("the start's wait: the longest of the spread checkpoint's bound and the "
                "archiver's backlog at its pace; the copy not counted until it runs")
    if not st.total or phase == "starting":
        return None
    if phase == "validate":
        return "the validation's rest at its rate over the last 30 s"
    synced = sync_ahead(st, command) is not None
    ahead = st.stop_ahead
    archived = (st.wait or {}).get("left_s")
    head = {"copy": "the copy's rest at its rate over the last 30 s"
            + ("; the stop's wait for its WAL stream (its next status message, every 10 s)"
               if streamed(st, command) else
               f"; the stop's wait for the archiver beyond it ({fmt.duration(ahead)}: its "
               "backlog now at its pace, at least)" if ahead else ""),
            "stopping": ("the wait for its WAL stream's next status message (every 10 s)"
                         if streamed(st, command) else
                         "the archiver's backlog up to the stop LSN's segment, at its pace"
                         if archived is not None else "the wait for the WAL to be archived "
                         "is not counted (the archiver's pace or position not known yet)"),
            "sync": "the sync's files left at its rate over the last 30 s (an fsync each)"
            }.get(str(phase), "")
    if phase in ("copy", "stopping"):
        head += ("; the sync as long per file as the last timed one's" if synced else
                 "; the sync not counted until it runs")
    if not validates(command):
        return head + "; no validation (--no-validate)"
    if validation_ahead(st, command) is None:
        return head + ("; the validation that follows not counted: the copy was seen too "
                       "briefly to estimate it")
    earlier = _earlier_validation(st)
    return head + (f"; then the validation, as fast per byte written as backup "
                   f"{earlier['id']}'s" if earlier else "; then the validation: the bytes the "
                   "copy wrote, read back at twice the rate the copy read (no earlier backup "
                   "with this compression to time)")


def remaining(st: ProbackupState, command: Sequence[str],
              jobs: int | None) -> tuple[float | None, str | None]:
    """The rest of the step it is in at that step's rate (its last 30 s;
    the copy's and the validation's shared out to its threads), plus
    what is still to come: the stop's wait for its WAL stream (--stream:
    until the stream's next status message) and the validation
    (validation_ahead). The sync is counted once it runs."""
    phase = st.phase
    stream = streamed(st, command)
    if phase == "starting":
        left = walwait.wait_eta(st.wait)
        if left is not None:
            return left, walwait.WAIT_ONLY
        return None, walwait.wait_reason(st.wait) or (
            f"starting: pg_backup_start (a checkpoint), then the WAL segment the backup "
            f"starts in ({'streamed' if stream else 'archived'})")
    if not st.total:
        return None, "no total: the data directory is not on this host"
    later = validation_ahead(st, command)
    now = st.now or 0.0
    if phase == "copy":
        left, why = step_eta(st, "copy", own_cores(st, jobs))
        st.stop_ahead = None
        if left is not None and stream:
            left += stream_wait(st, now + left) + 1.0
        elif left is not None:  # its stop waits for the archiver: its backlog now
            st.stop_ahead = st.wal.stop_ahead(left)
            left += st.stop_ahead or 0.0
    elif phase == "sync":
        left, why = step_eta(st, "sync")
        if left is None:  # its first second: the validation to come only
            left, why = 0.0, None
    elif phase == "validate":
        if control(st).get("status") == "OK":
            return 0.0, None
        left, why = step_eta(st, "validate", own_cores(st, jobs))
        ahead = st.validation_ahead
        if left is None and ahead is not None:  # its first second: as foreseen
            began = st.validate_began if st.validate_began is not None else now
            return max(0.0, ahead - (now - began)), None
        return left, why
    else:  # stopping: pg_backup_stop, then the WAL up to its stop LSN
        began = st.stop_began if st.stop_began is not None else now
        wait = stream_wait(st, began) if stream else 0.0
        left, why = max(0.0, began + 1.0 + wait - now), None
        archived = (st.wait or {}).get("left_s")
        if not stream and archived is not None:  # the archiver's backlog at its pace
            left = archived
    if left is None:
        return None, why
    if phase in ("copy", "stopping"):
        left += sync_ahead(st, command) or 0.0
    # the validation that cannot be estimated (the copy seen too briefly)
    # is left out: eta_basis says so
    return left + (later or 0.0), None
