"""pg_probackup's steps and how far each one is: the step it is in (from
its backup.control, the files it reads and its threads), the bytes or files
each step has done over the ordered file list, the files in flight (those
the process has open) and the thread each one is on, and its threads' CPU.
It works on the driver's state (pg_probackup_state.ProbackupState) and the
job's command line: nothing here knows the Tracker."""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence
from typing import Any

from ..snapshot import ClientProc, Snapshot
from .pg_probackup_catalog import DONE_STATES, OWN_FILES, stopped
from .pg_probackup_state import ProbackupState, StepPass

# its steps in the order they run; the job's phase never goes back
PHASES = ("starting", "copy", "stopping", "sync", "validate")
WINDOW_S = 30.0  # the rates of a step: its last 30 s


def control(st: ProbackupState) -> dict[str, Any]:
    return st.control


def step_pass(st: ProbackupState, name: str | None) -> StepPass:
    """One step's reading of the ordered file list: files in flight, those
    finished since, the frontier (the smallest in flight so far), bytes done
    and their history."""
    return st.passes.setdefault(name or "", StepPass())


def gone(snap: Snapshot) -> bool:
    """Its process has ended (killed, it is a zombie until its parent
    reaps it: no files, no threads but one)."""
    return snap.root_alive is False or not snap.clients or all(
        c.status == "zombie" for c in snap.clients)


def streamed(st: ProbackupState, command: Sequence[str]) -> bool:
    s = control(st).get("stream")
    return s == "true" if s is not None else "--stream" in command


def validates(command: Sequence[str]) -> bool:
    return "--no-validate" not in command


def _rel_of(st: ProbackupState, path: str) -> str | None:
    """A data file's path relative to the data directory (a tablespace's as
    pg_tblspc/OID/...), from the real path the process has open."""
    for rel_root, real in st.roots:
        if path.startswith(real + "/"):
            rest = path[len(real) + 1:]
            return os.path.join(rel_root, rest) if rel_root else rest
    return None


def data_reads(st: ProbackupState, snap: Snapshot) -> dict[str, tuple[int, float]]:
    """The data directory's files the process reads now: relative path ->
    (read position, how far into the file)."""
    sizes: dict[str, int] = st.sizes
    out: dict[str, tuple[int, float]] = {}
    for c in snap.clients:
        for f in c.open_files or ():
            if f.mode != "r":
                continue
            rel = _rel_of(st, f.path)
            if rel is not None and rel in sizes:
                size = sizes[rel]
                out[rel] = (f.position, min(1.0, f.position / size) if size else 1.0)
    return out


def backup_files(st: ProbackupState, snap: Snapshot, mode: str) -> dict[str, tuple[int, float]]:
    """The backup's own files the process has open (`w`: the sync, `r`: the
    validation), by the data file each one copies; how far into it: its
    position of the backup file's size."""
    bdir = st.backup_dir
    sizes: dict[str, int] = st.sizes
    if not bdir:
        return {}
    prefix = os.path.join(bdir, "database") + "/"
    now = {f.path: f.size for f in snap.files}
    out: dict[str, tuple[int, float]] = {}
    for c in snap.clients:
        for f in c.open_files or ():
            if not f.path.startswith(prefix) or not f.mode.startswith(mode):
                continue
            rel = f.path[len(prefix):]
            if rel in OWN_FILES or rel.startswith("pg_wal/") or rel not in sizes:
                continue
            size = now.get(f.path) or sizes[rel]
            out[rel] = (f.position, min(1.0, f.position / size) if size else 1.0)
    return out


def phase_of(st: ProbackupState, snap: Snapshot, reading: bool) -> str:
    """The step it is in: from backup.control (pgdata-bytes once the copy
    starts, stop-lsn once the stop is over, status DONE during the
    validation), the data files it reads and its threads. Never back to an
    earlier step."""
    prev = st.phase
    if gone(snap) and prev:
        return str(prev)  # the process is gone: the step it ended in
    ctl = control(st)
    status = ctl.get("status")
    if status in DONE_STATES:
        now = "validate"
    elif stopped(ctl) and status == "RUNNING":
        now = "sync"
    elif reading or st.workers_alive:
        now = "copy"
    elif st.copied or prev in ("copy", "stopping"):
        now = "stopping"
    else:
        now = "starting"
    if now == "copy":
        st.copied = True
    if prev in PHASES and PHASES.index(now) < PHASES.index(str(prev)):
        return str(prev)
    return now


def advance(st: ProbackupState, step: str, inflight: dict[str, tuple[int, float]],
             ts: float) -> None:
    """Bytes done in one step over the ordered file list: every file before
    the first one in flight, those seen in flight and gone since, and how
    far into those in flight."""
    sizes: dict[str, int] = st.sizes
    index: dict[str, int] = st.index
    p = step_pass(st, step)
    fin: dict[str, int] = p.finished
    for rel in set(p.inflight) - set(inflight):
        fin[rel] = sizes.get(rel, 0)
    p.inflight = sorted(inflight)
    if inflight:
        p.low = max(p.low, _frontier(st, inflight))
    low = p.low
    for rel in [r for r in fin if index[r] < low]:
        del fin[rel]  # counted with everything before the frontier
    part = sum(frac * sizes[r] for r, (_, frac) in inflight.items() if r not in fin)
    done = min(float(st.total), st.prefix[low] + sum(fin.values()) + part)
    _count(st, p, done, ts)
    p.left = {r: (1.0 - frac) * sizes[r] for r, (_, frac) in inflight.items()}
    busy = p.busy
    busy.append((ts, len(inflight)))
    while len(busy) > 2 and ts - busy[0][0] > WINDOW_S:
        del busy[0]
    if step == "copy":
        if st.copy_first is None:
            st.copy_first = (ts, p.done)
        st.copy_last = (ts, p.done)


def _frontier(st: ProbackupState, inflight: dict[str, tuple[int, float]]) -> int:
    """How many files of the ordered list are behind the work now: those
    before the first file in flight (the threads take the files in their
    order). Without its own list, the order of equal sizes is its
    quicksort's: only the files smaller than the smallest in flight."""
    first = min(st.index[r] for r in inflight)
    if st.exact:
        return first
    return bisect.bisect_left(st.sizes_in_order, st.sizes_in_order[first])


def _count(st: ProbackupState, p: StepPass, done: float, ts: float) -> None:
    p.done = max(p.done, done)
    hist = p.hist
    hist.append((ts, p.done))
    while len(hist) > 2 and hist[-1][0] - hist[0][0] > WINDOW_S:
        del hist[0]


def advance_sync(st: ProbackupState, inflight: dict[str, tuple[int, float]],
                  ts: float) -> None:
    """The sync in files: it fsyncs them one at a time in the copy's order,
    and each costs the disk's flush whatever its size (what the copy left
    in the page cache was mostly written out while it copied): every file
    before the one it syncs now is done."""
    p = step_pass(st, "sync")
    p.inflight = sorted(inflight)
    done = p.done
    if inflight:
        # the empty files come first in the order and are never synced
        done = max(0, _frontier(st, inflight) - st.empty)
    _count(st, p, float(done), ts)


def step_total(st: ProbackupState, step: str | None) -> float:
    """A step's total: files for the sync, bytes otherwise."""
    return float(st.files) if step == "sync" else float(st.total or 0)


def io_ratio(st: ProbackupState, root: ClientProc) -> None:
    """The bytes the copy wrote per byte it read (its own files, the WAL it
    streams): about 1 for a FULL backup, the compression ratio with
    compression, little for a DELTA of a quiet database."""
    if root.read_chars is None or root.write_chars is None:
        return
    if st.io_first is None:
        st.io_first = (root.read_chars, root.write_chars)
    first = st.io_first
    read, written = root.read_chars - first[0], root.write_chars - first[1]
    if read > (1 << 20):
        st.write_ratio = max(0.0, min(2.0, written / read))


def thread_cpu(st: ProbackupState, threads: list[list[Any]] | None, ts: float,
                streaming: bool) -> None:
    """Each worker thread's CPU since the last sample (those that copy or
    validate: neither the main thread nor the WAL stream's) and how many are
    alive. The threads come in the order they were made (threads_of): the
    main thread, the WAL stream's (--stream: made before the copy, gone once
    the stop LSN is streamed), then the workers."""
    if threads is None:
        return
    prev = st.thread_cpu
    now = {int(t[0]): (ts, float(t[2])) for t in threads}
    tids = [int(t[0]) for t in threads]
    workers = tids[2:] if streaming else tids[1:]
    cpu: dict[int, float] = {}
    for t in workers:
        if t in prev and ts > prev[t][0]:
            cpu[t] = 100.0 * (now[t][1] - prev[t][1]) / (ts - prev[t][0])
    st.thread_cpu = now
    st.threads = threads
    st.worker_cpu = cpu
    st.workers_alive = len(workers)


def slot_of(st: ProbackupState, path: str) -> int:
    return int(st.slots.get(path, 1 << 30))


def slot(st: ProbackupState, path: str) -> int:
    """The row number of a file in flight: its own while it is read, else
    the lowest one free."""
    slots: dict[str, int] = st.slots
    if path not in slots:
        used = set(slots.values())
        slots[path] = next(i for i in range(1, len(used) + 2) if i not in used)
    return slots[path]
