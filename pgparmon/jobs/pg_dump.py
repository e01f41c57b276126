"""pg_dump -Fd -j N: a leader session that holds every table's lock in a
shared snapshot, and N worker sessions that COPY tables out, largest first.

Work is counted in heap bytes (what pg_dump sorts by); a running table's
progress is its rows sent over pg_class.reltuples (or its COPY bytes over its
heap size times the text/heap ratio learned from finished tables); a table
whose data file exists and is no longer open is done.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analyze.bottleneck import Verdict
from ..analyze.items import Item, WorkerState
from ..readers.files import table_file_sizes
from ..snapshot import Backend, CopyProgress, IndexProgress, Snapshot
from ..toc import TocError, TocItem, data_file_id, list_archive
from .archive_files import data_file_client
from ..cmdline import ClientArgs, ClientSpec, Opts, args, choices, flags
from .base import Driver, EndContext, Job, PlanInputs, PlanReader, SessionApps, state_of
from .dump_options import DUMP_FORMATS, DUMP_RESTORE_COMMON
from .large_objects import DATA_DESCS as LO_DESCS
from .large_objects import (
    LO_FILES,
    LO_ITEM,
    LO_PHASE,
    batch_counts,
    dump_work,
    label_workers,
    list_files,
)
from .large_objects import verdict as lo_verdict
from .tables import plan_tables, table_progress

if TYPE_CHECKING:
    from ..analyze.progress import Tracker

# tables bigger than this teach the text/heap ratio
_RATIO_MIN_HEAP = 64 * 1024

_OPTIONS: Opts = {
    **DUMP_RESTORE_COMMON, "Z": ("compress", True), "E": ("encoding", True),
    "e": ("extension", True), "T": ("exclude-table", True), "b": ("blobs", False),
    "B": ("no-blobs", False),
    **args("compress", "encoding", "extension", "exclude-table", "exclude-table-data",
           "exclude-extension", "lock-wait-timeout", "snapshot", "rows-per-insert",
           "include-foreign-data", "extra-float-digits", "exclude-table-and-children",
           "exclude-table-data-and-children", "table-and-children", "sync-method"),
    **flags("blobs", "large-objects", "no-blobs", "no-large-objects", "binary-upgrade",
            "column-inserts", "attribute-inserts", "disable-dollar-quoting", "inserts",
            "load-via-partition-root", "no-toast-compression", "no-unlogged-table-data",
            "on-conflict-do-nothing", "quote-all-identifiers", "serializable-deferrable",
            "no-sync", "no-synchronized-snapshots", "with-data", "with-schema",
            "with-statistics", "sequence-data"),
}


def _positional(res: ClientArgs, pos: list[str], dbname: str | None) -> str | None:
    return pos[0] if pos else dbname  # the positional dbname overrides -d


CLIENT = ClientSpec(options=_OPTIONS, values={"format": choices(DUMP_FORMATS)},
                    positional=_positional)


@dataclass
class DumpState:
    """What the driver keeps about one dump (its new_state)."""

    # its directory held toc.dat at its end (None: the directory was not read)
    toc_written: bool | None = None


class PgDump(Driver):
    kind = "pg_dump"
    programs = ("pg_dump",)
    item_kinds = (LO_ITEM,)
    verdicts = ("large-objects",)
    phases = (LO_PHASE,)
    title = "pg_dump"
    session_apps = SessionApps(("pg_dump",), query_text=True, idle=True)
    client_specs = {"pg_dump": CLIENT}
    data_flow = "out"
    fixed_workers = True  # its workers live until the end: one gone early died
    has_leader = True
    fails_on_lock_queue = True
    writes_target_files = True
    runs_as_step = True  # a migration tool's schema or post-data step

    def new_state(self) -> DumpState:
        return DumpState()

    # ---- recognise ---------------------------------------------------------

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        if not self.names_app(b.application_name):
            return None
        return (self.kind, b.datname, b.backend_xmin)

    def from_sessions(self, members: list[Backend]) -> Job:
        return Job(kind=self.kind, database=members[0].datname, xmin=members[0].backend_xmin,
                   jobs=max(1, len(members) - 1) if len(members) > 1 else None,
                   pid_hint=frozenset(b.pid for b in members))

    def refine(self, job: Job, linked: list[Backend]) -> Job:
        # every session of one dump shares the leader's exported snapshot
        xmins = {b.backend_xmin for b in linked if b.backend_xmin}
        if len(xmins) == 1:
            return dataclasses.replace(job, xmin=xmins.pop())
        return job

    def session_matches(self, job: Job, b: Backend) -> bool:
        if not self.names_app(b.application_name):
            return False
        return not (job.xmin and b.backend_xmin and b.backend_xmin != job.xmin)

    # ---- plan --------------------------------------------------------------

    def read_plan(self, src: PlanReader, req: dict[str, Any]) -> PlanInputs | None:
        toc: list[TocItem] | None = None
        tdir = src.target_dir
        if tdir and os.path.exists(os.path.join(tdir, "toc.dat")):
            try:
                toc = list_archive(tdir, pg_restore=src.client_binary("pg_restore"),
                                   descs=("TABLE DATA", *LO_DESCS))[1]
            except TocError:
                return None  # still being written
        elif tdir and (src.snapshots_taken < 3 or _reading_catalog(tdir)):
            # pg_dump writes toc.dat once its leader has read the catalog,
            # before any data file: seconds for thousands of tables (5.7 s for
            # 10,000 here). A plan from pg_class instead would key its items by
            # table, and the data files, named by dump id, could never finish
            # them: a dump that succeeded would end "failed"
            return None
        tables = src.query_json("tables") or []
        sizes = table_file_sizes(src.facts.data_directory if src.local else None, tables)
        # only TABLE DATA entries make items (`plan_tables`): of a catalog of
        # thousands of tables, the other entries (sequences, keys, defaults:
        # six of seven) are kept neither in memory nor in the recording
        # the large objects' items (their TOC entries): how many objects and
        # the pages they fill, read only when the dump has some
        extra = None
        if toc is not None and any(t.desc in LO_DESCS for t in toc):
            extra = {"large_objects": src.query_json("large_objects") or {}}
        return PlanInputs(toc=[_toc_dict(t) for t in toc] if toc is not None else None,
                          tables=tables, file_sizes=sizes, extra=extra)

    def plan(self, tr: Tracker, inputs: PlanInputs) -> bool:
        if inputs.tables is None:
            return False
        toc = inputs.toc_items() if inputs.toc is not None else None
        plan_tables(tr, toc, inputs.tables, inputs.file_sizes)
        if toc is not None:
            _plan_large_objects(tr, toc, (inputs.extra or {}).get("large_objects") or {})
        return True

    # ---- observe -----------------------------------------------------------

    def client_of(self, tr: Tracker, w: WorkerState, snap: Snapshot) -> int | None:
        return data_file_client(tr, w, snap)

    def progress(self, tr: Tracker, it: Item, cp: CopyProgress | None,
                 ip: IndexProgress | None, snap: Snapshot) -> None:
        if it.kind == "data" and cp is not None:
            table_progress(tr, it, cp)
            return
        super().progress(tr, it, cp, ip, snap)

    def verdict(self, tr: Tracker, snap: Snapshot, settings: dict[str, str]) -> Verdict | None:
        return lo_verdict(tr, "reads each one and writes it to a file of its own", "pg_dump")

    def done_when_unseen(self, tr: Tracker, it: Item, snap: Snapshot, sessions: set[int]) -> bool:
        # a large-object item runs in fastpath calls its session shows idle
        # between: its list file says when it ends (file_evidence)
        return it.kind != LO_ITEM.name

    def on_finish(self, tr: Tracker, it: Item) -> None:
        if it.kind == "data" and it.heap_bytes and it.bytes_done:
            ratios = [i.bytes_done / i.heap_bytes for i in tr.items.values()
                      if i.kind == "data" and i.state == "done" and i.heap_bytes
                      and i.bytes_done and i.heap_bytes > _RATIO_MIN_HEAP]
            if ratios:
                tr.set_text_ratio(sorted(ratios)[len(ratios) // 2])

    def file_evidence(self, tr: Tracker, snap: Snapshot, running_now: dict[str, int]) -> None:
        """pg_dump writes each item's file from start to end: a data file that
        exists and no worker holds open belongs to a finished item."""
        if not snap.files:
            return
        if any(c.open_files is None for c in snap.clients):
            return  # cannot tell open from closed
        open_paths = {f.path for c in snap.clients for f in c.open_files or ()}
        for fs in snap.files:
            did = data_file_id(fs.path)
            if did is None:
                continue
            it = tr.items.get(str(did))
            if it is None or it.state == "done" or it.key in running_now:
                continue
            if fs.path in open_paths:
                if it.state == "pending":
                    tr.set_state(it, "running")
                    it.started = snap.wall
                continue
            tr.finish(it, snap.wall)
        _large_objects_evidence(tr, snap, open_paths)
        # pg_dump before 17 fetches the objects' OIDs through a cursor
        label_workers(tr, ("fetch 1000 in bloboid",))

    # ---- outcome -----------------------------------------------------------

    def settle_at_end(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> bool | None:
        """The last items may have finished between two samples: the files
        say. Returns whether the dump's directory could be read at all."""
        if not ctx.target_dir:
            return None
        files = ctx.final_files()
        if files is None:
            return False
        state_of(tr, DumpState).toc_written = any(os.path.basename(f.path) == "toc.dat"
                                                  for f in files)
        tr.update(dataclasses.replace(snap, files=files, clients=()))
        return True

    def cut_short(self, tr: Tracker, snap: Snapshot) -> str | None:
        """Gone before its plan: a readable dump directory without toc.dat
        is a dump that never got past reading the catalog."""
        if tr.planned or state_of(tr, DumpState).toc_written is not False:
            return None
        return ("the dump ended before writing its table of contents (toc.dat), which "
                "pg_dump writes once its leader has read the catalog: it did not complete")


def _plan_large_objects(tr: Tracker, toc: list[TocItem], facts: dict[str, Any]) -> None:
    """The dump's large-object items (jobs/large_objects.py): one a TOC
    entry, its objects from the database's count (spread over the entries
    by their OID ranges), its bytes from pg_largeobject's pages; no size
    (before 17 pg_dump hands them out after the tables). Nothing when the count
    was not read (no item is better than one of no work)."""
    entries = [t for t in toc if t.desc in LO_DESCS]
    count = int(facts.get("count") or 0)
    if not entries or count <= 0:
        return
    pages = int(facts.get("pages") or 0)
    total = float(pages * tr.block_size) if pages > 0 else None
    counts = batch_counts(entries, count)
    whole = sum(counts)
    for t, n in zip(entries, counts, strict=True):
        data = total * n / whole if total is not None else None
        tr.add(Item(key=str(t.dump_id), kind=LO_ITEM.name, relation=None,
                    name=f"large objects ({n})", size=0.0, work=dump_work(n, data),
                    reltuples=float(n)))


def _large_objects_evidence(tr: Tracker, snap: Snapshot, open_paths: set[str]) -> None:
    """A large-object item runs while a worker holds its list file
    (blobs.toc, or blobs_<id>.toc from pg_dump 17) open, and is done once
    the file is there and closed; how far the running ones are, from the
    object files written (the sample's one `LO_FILES` entry counts them)
    beyond the objects of the items already done."""
    keys = tr.keys_of(LO_ITEM.name)
    if not keys:
        return
    # by name: the files are the dump directory's, the open ones its clients'
    sizes = {os.path.basename(f.path): f.size for f in snap.files}
    held = {os.path.basename(p) for p in open_paths}
    written = sizes.get(LO_FILES, 0)
    single = len(keys) == 1
    running: list[Item] = []
    for key in keys:
        it = tr.items[key]
        if it.state == "done":
            continue
        name = next((n for n in list_files(key, single) if n in sizes), None)
        if name is None:
            continue
        if name in held:
            if it.state == "pending":
                tr.set_state(it, "running")
                it.started = snap.wall
            running.append(it)
            continue
        tr.finish(it, snap.wall)
    if not running:
        return
    done_objects = sum((tr.items[k].reltuples or 0.0) for k in keys
                       if tr.items[k].state == "done")
    left = max(0.0, written - done_objects)
    for it in running:
        objects = it.reltuples or 1.0
        share = min(objects, left / len(running))
        it.done = max(it.done, min(0.99, share / objects) * it.work)


def _reading_catalog(tdir: str) -> bool:
    """The dump's directory is readable and holds neither toc.dat nor any
    data file yet: its leader is still reading the catalog."""
    try:
        names = os.listdir(tdir)
    except OSError:
        return False  # not ours to read (or not made yet): plan from pg_class
    return not any(data_file_id(n) is not None for n in names)


def _toc_dict(t: TocItem) -> dict[str, Any]:
    return {f.name: getattr(t, f.name) for f in dataclasses.fields(t)}
