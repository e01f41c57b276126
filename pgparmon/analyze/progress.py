"""Follow one job through the snapshot stream: which items ran where, how far
each got, and the overall progress.

Work is counted in the unit each kind can measure best: a dump in heap bytes
(what pg_dump sorts by), a restore in archive data-file bytes (read positions
are exact), a COPY load in input bytes. Post-data items of a restore (index
and constraint builds) get a work estimate in the same unit, from the size of
their table's data, corrected by what finished builds took in this run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..discover import Job, belongs, copy_target
from ..snapshot import Backend, CopyProgress, IndexProgress, Snapshot
from ..toc import PostDataTarget, TocItem, data_file_id
from .rates import WindowRate

# A freshly created index costs roughly half of loading its table's data
# (sort + write); learned per run once builds finish.
DEFAULT_INDEX_FACTOR = 0.5
DEFAULT_FK_FACTOR = 0.15
# COPY TO text bytes per heap byte, until a finished table says otherwise.
DEFAULT_TEXT_RATIO = 0.85

CREATE_INDEX = re.compile(r"^\s*create\s+(?:unique\s+)?index\s+(?:concurrently\s+)?"
                          r"(?:if\s+not\s+exists\s+)?(\"(?:[^\"]|\"\")+\"|\S+)\s+on\s", re.IGNORECASE)
ADD_CONSTRAINT = re.compile(r"add\s+constraint\s+(\"(?:[^\"]|\"\")+\"|\S+)", re.IGNORECASE)


def _ident(s: str) -> str:
    s = s.strip()
    if s.startswith('"') and s.endswith('"'):
        return s[1:-1].replace('""', '"')
    return s.split(".")[-1]


@dataclass
class Item:
    key: str
    kind: str  # "data" | "index" | "constraint" | "fk" | "copy"
    relation: str | None  # schema.table the item works on
    name: str
    size: float  # the scheduler's ordering key
    work: float  # total work units (estimate)
    done: float = 0.0
    state: str = "pending"  # pending | running | done
    started: float | None = None  # wall time
    finished: float | None = None
    worker: int | None = None  # backend pid
    file: str | None = None  # restore/dump data file
    reltuples: float | None = None
    heap_bytes: float | None = None
    bytes_done: int = 0  # COPY bytes (uncompressed text)
    tuples_done: int = 0
    deps: frozenset[str] = frozenset()
    exclusive: bool = False
    seen_running: bool = False

    @property
    def fraction(self) -> float:
        if self.state == "done":
            return 1.0
        return min(1.0, self.done / self.work) if self.work > 0 else 0.0

    @property
    def duration(self) -> float | None:
        if self.started is None:
            return None
        return (self.finished or self.started) - self.started


@dataclass
class WorkerState:
    pid: int  # backend pid
    client_pid: int | None = None
    phase: str = "other"  # copy | index | constraint | idle | lock-wait | other
    item: str | None = None
    relation: str | None = None
    wait_event: str | None = None
    blocked_by: tuple[int, ...] = ()
    waiting_for: tuple[str, ...] | None = None
    bytes_done: int = 0
    tuples_done: int = 0
    progress: float | None = None
    query: str | None = None
    state: str | None = None
    is_leader: bool = False
    bytes_rate: WindowRate = field(default_factory=WindowRate)
    tuples_rate: WindowRate = field(default_factory=WindowRate)
    last_seen: float = 0.0


def _norm_rel(rel: str | None) -> str | None:
    if rel is None:
        return None
    parts = rel.split(".")
    return ".".join(p.strip('"') for p in parts)


class Tracker:
    """Stateful follower of one job; feed it snapshots in order."""

    def __init__(self, job: Job, block_size: int = 8192) -> None:
        self.job = job
        self.block_size = block_size
        self.items: dict[str, Item] = {}
        self.by_relation: dict[str, str] = {}  # relation -> data item key
        self.by_name: dict[str, str] = {}  # index / constraint name -> item key
        self.workers: dict[int, WorkerState] = {}
        self.text_ratio = DEFAULT_TEXT_RATIO
        self.index_factor = DEFAULT_INDEX_FACTOR
        self.planned = False
        self.first_wall: float | None = None
        self.last_wall: float | None = None
        self.max_fraction = 0.0
        self.work_done_rate = WindowRate()
        self.history: list[tuple[float, int, float]] = []  # (t, active streams, work done)
        self.copy_bytes_total = WindowRate()
        self.leader_pid: int | None = None
        self.gone_workers: set[int] = set()
        self.notes: list[str] = []
        self.build_spb: list[float] = []

    # ---- planning -------------------------------------------------------

    def plan_dump(self, toc: list[TocItem] | None, tables: list[list[Any]],
                  file_sizes: dict[str, float] | None = None) -> None:
        """Items of a dump: its TOC's TABLE DATA entries (or, when the TOC is not
        readable, every user table), sized from pg_class like pg_dump does;
        tables never vacuumed (relpages 0) by their files' size when known."""
        info: dict[str, list[Any]] = {f"{t[1]}.{t[2]}": t for t in tables}
        sizes = file_sizes or {}
        wanted: list[tuple[str, str]] = []
        if toc is not None:
            for it in toc:
                if it.desc == "TABLE DATA" and it.schema is not None:
                    wanted.append((str(it.dump_id), f"{it.schema}.{it.tag}"))
        else:
            wanted = [(rel, rel) for rel, t in info.items() if t[3] in ("r", "m")]
        for key, rel in wanted:
            t = info.get(rel)
            relpages = (t[4] or 0) + (t[6] or 0) if t else 0
            heap = float(relpages * self.block_size) if relpages > 0 else None
            heap = heap or sizes.get(rel) or float(self.block_size)
            reltuples = float(t[5]) if t and t[5] is not None and t[5] > 0 else None
            self._add(Item(key=key, kind="data", relation=rel, name=rel, size=relpages or heap,
                           work=heap, reltuples=reltuples, heap_bytes=heap))
        self.planned = True

    def plan_restore(self, toc: list[TocItem], archive_files: dict[str, Any],
                     targets: dict[int, PostDataTarget]) -> None:
        """Items of a restore: data files (sized by the file) and post-data
        builds, which depend on their table's data and, except INDEX, lock it."""
        data_size: dict[str, float] = {}
        for it in toc:
            if it.desc != "TABLE DATA" or it.schema is None:
                continue
            rel = f"{it.schema}.{it.tag}"
            path, size = archive_files.get(str(it.dump_id)) or (None, 1.0)
            data_size[rel] = size
            self._add(Item(key=str(it.dump_id), kind="data", relation=rel, name=rel, size=size,
                           work=max(size, 1.0), file=path))
        for it in toc:
            kind = {"INDEX": "index", "CONSTRAINT": "constraint",
                    "FK CONSTRAINT": "fk"}.get(it.desc)
            if kind is None:
                continue
            tgt = targets.get(it.dump_id)
            rel = tgt.table if tgt else None  # type: ignore[assignment]
            name = (tgt.object_name or tgt.name.split(" ")[-1]) if tgt else it.tag.split(" ")[-1]
            base = data_size.get(rel or "", 0.0)
            factor = DEFAULT_FK_FACTOR if kind == "fk" else self.index_factor
            deps = {self.by_relation[r] for r in (rel, tgt.references if tgt else None)
                    if r and r in self.by_relation}
            self._add(Item(key=str(it.dump_id), kind=kind, relation=rel, name=name, size=base,
                           work=max(base * factor, 1.0), deps=frozenset(deps),
                           exclusive=kind != "index"))
        self.planned = True

    def _add(self, item: Item) -> None:
        self.items[item.key] = item
        if item.kind == "data" and item.relation:
            self.by_relation[item.relation] = item.key
        elif item.kind in ("index", "constraint", "fk"):
            self.by_name[item.name] = item.key

    # ---- following ------------------------------------------------------

    def members(self, snap: Snapshot) -> list[Backend]:
        if snap.db is None or snap.db.error:
            return []
        return [b for b in snap.db.backends if belongs(self.job, b)]

    def update(self, snap: Snapshot) -> None:
        if self.first_wall is None:
            self.first_wall = snap.wall
        self.last_wall = snap.wall
        if snap.db is None or snap.db.error:
            return  # no server view this tick: keep what we knew
        # rows of other roles' backends come with NULL counters without
        # pg_read_all_stats: nothing to learn from them
        copies = {c.pid: c for c in snap.db.copies or () if c.bytes_processed is not None
                  and c.tuples_processed is not None}
        indexes = {i.pid: i for i in snap.db.indexes or () if i.blocks_done is not None}
        members = self.members(snap)
        running_now: dict[str, int] = {}
        seen: set[int] = set()
        if self.job.kind == "pg_dump" and self.leader_pid is None and members:
            firsts = sorted(members, key=lambda b: b.backend_start or 0)
            self.leader_pid = firsts[0].pid
        for b in members:
            seen.add(b.pid)
            w = self.workers.setdefault(b.pid, WorkerState(pid=b.pid))
            w.last_seen = snap.ts
            w.is_leader = b.pid == self.leader_pid
            key = self._observe(w, b, copies.get(b.pid), indexes.get(b.pid), snap)
            if key is not None:
                running_now[key] = b.pid
        for pid in list(self.workers):
            if pid not in seen:
                self.gone_workers.add(pid)
                del self.workers[pid]
        self._settle(running_now, snap)
        self._file_evidence(snap, running_now)
        self._record(snap)

    def _observe(self, w: WorkerState, b: Backend, cp: CopyProgress | None,
                 ip: IndexProgress | None, snap: Snapshot) -> str | None:
        w.wait_event, w.blocked_by, w.waiting_for = b.wait, b.blocked_by, b.waiting_for
        w.query, w.state = b.query, b.state
        active = b.state == "active"
        ct = copy_target(b.query) if active else None
        key: str | None = None
        w.progress = None
        w.relation = None  # an idle worker works on nothing
        if self.job.kind == "copy" and active and (cp is not None or ct is not None):
            key = self._copy_item(b, cp, ct, snap)
            w.phase = "copy"
        elif active and (cp is not None or ct is not None):
            rel = _norm_rel(cp.relation if cp and cp.relation else (ct[1] if ct else None))
            key = self.by_relation.get(rel or "")
            if key is None and rel and not self.planned:
                key = rel
                self._add(Item(key=rel, kind="data", relation=rel, name=rel, size=1.0, work=1.0))
            w.phase = "copy"
            w.relation = rel
        elif active and b.query and CREATE_INDEX.match(b.query):
            m = CREATE_INDEX.match(b.query)
            assert m
            key = self.by_name.get(_ident(m.group(1)))
            w.phase = "index"
            w.relation = ip.relation if ip else None
        elif active and b.query and ADD_CONSTRAINT.search(b.query):
            m = ADD_CONSTRAINT.search(b.query)
            assert m
            key = self.by_name.get(_ident(m.group(1)))
            w.phase = "constraint"
        elif b.state in ("idle", "idle in transaction"):
            w.phase = "idle"
            self._idle_evidence(b)
        else:
            w.phase = "other"
        if b.wait_event_type == "Lock":
            w.phase = "lock-wait"
        w.item = key
        if cp is not None:
            w.bytes_done, w.tuples_done = cp.bytes_processed, cp.tuples_processed
            w.bytes_rate.add(snap.ts, cp.bytes_processed)
            w.tuples_rate.add(snap.ts, cp.tuples_processed)
        if key is not None and key in self.items:
            it = self.items[key]
            if it.state != "running":
                it.state = "running"
                it.started = it.started or snap.wall
            it.seen_running = True
            it.worker = b.pid
            if w.relation is None:
                w.relation = it.relation
            self._progress(it, cp, ip, snap)
            w.progress = it.fraction if it.kind != "copy" or it.work > 1 else None
        return key

    def _copy_item(self, b: Backend, cp: CopyProgress | None, ct: tuple[str, str] | None,
                   snap: Snapshot) -> str:
        key = f"copy:{b.pid}"
        if key not in self.items:
            rel = _norm_rel(cp.relation if cp and cp.relation else (ct[1] if ct else None))
            self._add(Item(key=key, kind="copy", relation=rel, name=rel or "?", size=1.0, work=1.0))
        return key

    def _progress(self, it: Item, cp: CopyProgress | None, ip: IndexProgress | None,
                  snap: Snapshot) -> None:
        if it.kind == "copy":
            if cp is not None:
                it.bytes_done, it.tuples_done = cp.bytes_processed, cp.tuples_processed
                if cp.bytes_total:
                    it.work = float(cp.bytes_total)
                    it.done = float(cp.bytes_processed)
                else:  # COPY FROM STDIN: the server knows no total
                    it.done = float(cp.bytes_processed)
                    it.work = max(it.work, it.done)
            return
        if it.kind == "data" and cp is not None:
            it.bytes_done, it.tuples_done = cp.bytes_processed, cp.tuples_processed
            if self.job.kind == "pg_dump":
                if it.reltuples:
                    frac = cp.tuples_processed / it.reltuples
                else:
                    frac = cp.bytes_processed / max(1.0, (it.heap_bytes or 1.0) * self.text_ratio)
                it.done = max(it.done, min(0.99, frac) * it.work)
            else:
                pos = self._file_position(it, snap)
                if pos is not None:
                    it.done = max(it.done, min(pos, 0.99 * it.work))
                else:
                    frac = cp.bytes_processed / max(1.0, it.work * self._restore_ratio())
                    it.done = max(it.done, min(0.99, frac) * it.work)
        elif it.kind == "data" and self.job.kind == "pg_restore":
            pos = self._file_position(it, snap)
            if pos is not None:
                it.done = max(it.done, min(pos, 0.99 * it.work))
        elif it.kind in ("index", "constraint") and ip is not None:
            f = ip.fraction
            if f is not None:
                it.done = max(it.done, min(0.99, f) * it.work)

    def _restore_ratio(self) -> float:
        """Uncompressed COPY bytes per archive-file byte, from finished items."""
        num = sum(i.bytes_done for i in self.items.values()
                  if i.kind == "data" and i.state == "done" and i.bytes_done > 0)
        den = sum(i.work for i in self.items.values()
                  if i.kind == "data" and i.state == "done" and i.bytes_done > 0)
        return num / den if den > 0 and num > 0 else 1.0

    def _file_position(self, it: Item, snap: Snapshot) -> float | None:
        if not it.file:
            return None
        for c in snap.clients:
            for f in c.open_files or ():
                if f.path == it.file:
                    return float(f.position)
        return None

    def _idle_evidence(self, b: Backend) -> None:
        """A worker idle between items still shows its last statement: that item is done."""
        if not b.query:
            return
        ct = copy_target(b.query)
        key = None
        if ct is not None:
            key = self.by_relation.get(_norm_rel(ct[1]) or "")
        else:
            m = CREATE_INDEX.match(b.query) or ADD_CONSTRAINT.search(b.query)
            if m:
                key = self.by_name.get(_ident(m.group(1)))
        if key is not None and key in self.items and self.items[key].state != "done":
            self.items[key].state = "finishing"

    def _settle(self, running_now: dict[str, int], snap: Snapshot) -> None:
        for key, it in self.items.items():
            if it.state == "done" or key in running_now:
                continue
            if it.state in ("running", "finishing"):
                self._finish(it, snap.wall)

    def _finish(self, it: Item, wall: float | None) -> None:
        it.state = "done"
        it.finished = wall
        if it.started is None:
            it.started = wall
        if it.kind == "data" and self.job.kind == "pg_dump" and it.heap_bytes and it.bytes_done:
            ratios = [i.bytes_done / i.heap_bytes for i in self.items.values()
                      if i.kind == "data" and i.state == "done" and i.heap_bytes
                      and i.bytes_done and i.heap_bytes > 64 * 1024]
            if ratios:
                self.text_ratio = sorted(ratios)[len(ratios) // 2]
        if (it.kind in ("index", "constraint") and it.seen_running and it.size > 64 * 1024
                and it.duration and it.duration > 0.5):
            # seconds per byte of table data, for the builds still to come
            self.build_spb.append(it.duration / it.size)
        it.done = it.work

    def build_seconds_per_byte(self) -> float | None:
        """What this run's finished index/constraint builds took per byte of
        their table's data (median), once one has been timed."""
        if not self.build_spb:
            return None
        return sorted(self.build_spb)[len(self.build_spb) // 2]

    def _file_evidence(self, snap: Snapshot, running_now: dict[str, int]) -> None:
        """A dump writes each item's file from start to end: a data file that
        exists and no worker holds open belongs to a finished item."""
        if self.job.kind != "pg_dump" or not snap.files:
            return
        if any(c.open_files is None for c in snap.clients):
            return  # cannot tell open from closed
        open_paths = {f.path for c in snap.clients for f in c.open_files or ()}
        for fs in snap.files:
            did = data_file_id(fs.path)
            if did is None:
                continue
            it = self.items.get(str(did))
            if it is None or it.state == "done" or it.key in running_now:
                continue
            if fs.path in open_paths:
                if it.state == "pending":
                    it.state = "running"
                    it.started = snap.wall
                continue
            self._finish(it, snap.wall)

    def _record(self, snap: Snapshot) -> None:
        done = self.work_done()
        active = sum(1 for it in self.items.values() if it.state == "running")
        self.work_done_rate.add(snap.ts, done)
        self.history.append((snap.ts, active, done))
        if len(self.history) > 20000:
            del self.history[: len(self.history) - 20000]

    # ---- derived --------------------------------------------------------

    def work_done(self) -> float:
        return sum(it.work if it.state == "done" else it.done for it in self.items.values())

    def work_total(self) -> float:
        return sum(it.work for it in self.items.values())

    def fraction(self) -> float | None:
        if not self.planned or self.job.kind == "copy":
            if self.job.kind == "copy":
                items = [i for i in self.items.values() if i.kind == "copy"]
                if items and all(i.work > 1 and i.work > i.bytes_done for i in items):
                    total = sum(i.work for i in items)
                    return min(1.0, sum(i.done for i in items) / total) if total else None
            return None
        total = self.work_total()
        if total <= 0:
            return None
        f = min(1.0, self.work_done() / total)
        self.max_fraction = max(self.max_fraction, f)
        return self.max_fraction

    def finish_all(self, wall: float) -> None:
        for it in self.items.values():
            if it.state != "done":
                self._finish(it, wall)

    def unfinished(self) -> list[Item]:
        return [it for it in self.items.values() if it.state != "done"]
