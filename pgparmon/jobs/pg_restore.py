"""pg_restore -j N: pre-data on the leader's one session, then N worker
sessions that each COPY one table's data file in and build indexes and
constraints once their table is loaded; the leader has no session meanwhile.

Work is counted in archive data-file bytes: a worker's read position in its
file (from the client process's open files) is exact. Index and constraint
builds get a work estimate from their table's data size. Items that finished
between two samples are settled from the catalog (loaded tables, built
indexes and constraints).
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analyze.bottleneck import Verdict
from ..analyze.items import Item, WorkerState
from ..analyze.schedule import WorkItem
from ..cmdline import ClientArgs, ClientSpec, Opts, args, choices, flags, parse_client_cmdline
from ..custom_archive import data_extents
from ..custom_archive import row_widths as custom_row_widths
from ..ddl import PostDataTarget, key_costs, partition_parents, post_data_targets
from ..snapshot import Backend, CopyProgress, IndexProgress, Snapshot
from ..toc import TocError, TocItem, data_file, list_archive
from .archive_files import data_file_client, row_widths, text_bytes
from .base import Driver, EndContext, Job, PlanInputs, PlanReader, SessionApps, state_of
from .dump_options import DUMP_RESTORE_COMMON, RESTORE_FORMATS
from .large_objects import (
    LO_ITEM,
    LO_META_ITEM,
    LO_PHASE,
    RESTORE_BYTE_FACTOR,
    RESTORE_OBJECT_BYTES,
    RESTORE_PRE_DATA_SHARE,
    Listing,
    archive_listings,
    label_workers,
    list_files,
    metadata_listing,
    moves_objects,
    object_work,
)
from .large_objects import verdict as lo_verdict
from .progress import LaterSteps
from .restore_list import ListError, read_use_list
from .restore_select import Selection, restored_by, step_parts
from .tables import DEFAULT_FK_FACTOR

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..analyze.progress import Tracker
    from ..readers.procs import ProcInfo
    from ..sample import WorkerRow

# a data item this small leaves no trace worth waiting for at the end
_TINY_WORK = 512
_DONE_ASKS = 4

_OPTIONS: Opts = {
    **DUMP_RESTORE_COMMON, "l": ("list", False), "L": ("use-list", True),
    "I": ("index", True), "P": ("function", True), "T": ("trigger", True),
    "e": ("exit-on-error", False), "1": ("single-transaction", False),
    **args("use-list", "index", "function", "trigger", "transaction-size",
           "exclude-database"),
    **flags("list", "exit-on-error", "single-transaction", "no-data-for-failed-tables",
            "globals-only"),
}


def _positional(res: ClientArgs, pos: list[str], dbname: str | None) -> str | None:
    if pos:
        res.file = pos[0]  # the archive
    return dbname


# -f is where the SQL goes (the output); the archive is the positional
CLIENT = ClientSpec(options=_OPTIONS, values={"format": choices(RESTORE_FORMATS, True)},
                    fields={"file": "output"}, lists=True, positional=_positional)


@dataclass
class RestoreState:
    """What the pg_restore driver keeps about one job: the largest -j the
    steps its shell's command line names give (a job in steps), for a step
    that gives none (the pre-data step runs on one connection)."""

    steps_jobs: int | None = None
    # what the steps after this one restore, and their -j (the ETA's)
    later: LaterSteps | None = None
    # the large-object items' lists, by key (jobs/large_objects.py)
    large_objects: dict[str, Listing] = dataclasses.field(default_factory=dict)
    # the objects whose metadata the pre-data creates (its item: LO_META_KEY)
    lo_metadata: Listing | None = None
    # data items finished between two samples, told from pg_restore's order:
    # how many, that order (keys; made once), and the place before which
    # every item of it is done
    inferred: int = 0
    order: list[str] | None = None
    order_of: dict[str, int] = dataclasses.field(default_factory=dict)
    order_version: int = -1  # the Tracker's item set it was made for
    done_below: int = 0
    # a custom archive's data items: where each one's data lies in it
    # (custom_archive.py), its offset and length, by key
    extents: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    archive: str | None = None  # the custom archive's file (its real path)


class PgRestore(Driver):
    kind = "pg_restore"
    programs = ("pg_restore",)
    title = "pg_restore"
    item_kinds = (LO_ITEM, LO_META_ITEM)
    verdicts = ("large-objects",)
    phases = (LO_PHASE,)
    session_apps = SessionApps(("pg_restore",), query_text=True, idle=True)
    client_specs = {"pg_restore": CLIENT}
    data_flow = "in"
    fixed_workers = True  # its workers live until the end: one gone early died
    warns_early_foreign_keys = True  # its data loads and FK builds follow the TOC
    runs_as_step = True  # a migration tool's schema or post-data step

    # ---- recognise ---------------------------------------------------------

    def from_tree(self, root: ProcInfo, args: ClientArgs) -> bool:
        # pg_restore -l, or writing SQL to a file: no server work to follow
        return not args.list_only and bool(args.dbname)

    def new_state(self) -> RestoreState:
        return RestoreState()

    def in_steps(self, job: Job) -> bool:
        # a run that restores part of the archive (a section, a list): a
        # restore in steps runs the rest next
        args = job.args
        return args is not None and (not Selection.of(args).everything
                                     or any(k == "use-list" for k, _ in args.options))

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        if not self.names_app(b.application_name):
            return None
        return (self.kind, b.datname, b.usename, b.client_addr)

    def from_sessions(self, members: list[Backend]) -> Job:
        return Job(kind=self.kind, database=members[0].datname, usename=members[0].usename,
                   client_addr=members[0].client_addr,
                   pid_hint=frozenset(b.pid for b in members))

    def session_matches(self, job: Job, b: Backend) -> bool:
        return self.names_app(b.application_name)

    # ---- plan --------------------------------------------------------------

    def plan_request(self, tr: Tracker) -> dict[str, Any] | None:
        """What this run restores (restore_select.Selection, from its
        command line) and the list file of `-L` (absolute: a relative one
        is the process's working folder's), when it has one."""
        path, why = use_list_path(tr.job.args, tr.job.client_pid)
        return {"use_list": path, "use_list_error": why, "args": tr.job.args,
                "step": tr.job.step}

    def read_plan(self, src: PlanReader, req: dict[str, Any]) -> PlanInputs | None:
        if not src.target_dir:
            return PlanInputs()
        listed, why = None, req.get("use_list_error")
        if req.get("use_list") and not why:
            try:
                listed = read_use_list(req["use_list"])
            except ListError as exc:
                why = str(exc)
        if why:
            return PlanInputs(error=f"pg_restore -L {req.get('use_list') or 'FILE'}: the list "
                                    f"cannot be read here ({why}), so which items it restores "
                                    "is unknown: progress from activity only")
        pg_restore = src.client_binary("pg_restore")
        everything = list_archive(src.target_dir, pg_restore=pg_restore)[1]
        sel = Selection.of(req.get("args"), listed)
        chain, note, step_jobs = _chain(req.get("chain"))
        steps_jobs = max((j for j in step_jobs if j), default=None)
        # every item stays in the plan's inputs (a build is sized by its
        # table's data, loaded by this run or an earlier one); `extra` says
        # which of them this run (or its job's steps) restores
        extra = None
        if not sel.everything and not any(s.everything for s in chain):
            ids, empty = restored_by([sel, *chain], everything)
            if not ids:
                return PlanInputs(error=f"pg_restore {sel.describe(req.get('args'))}: this run "
                                        "loads no table's data and builds no index or key, so "
                                        "there is no work to count: progress from activity only")
            extra = {"restores": sorted(ids), "empty_tables": sorted(empty)}
        if steps_jobs:
            extra = {**(extra or {}), "steps_jobs": steps_jobs}
        later = _later_steps(sel, chain, step_jobs, req.get("step"), everything)
        if later:
            extra = {**(extra or {}), **later}
        try:
            targets = post_data_targets(src.target_dir, pg_restore=pg_restore)
        except TocError:
            targets = {}
        try:
            parents = partition_parents(src.target_dir, everything, pg_restore=pg_restore)
        except TocError:
            parents = {}
        try:  # a text key sorts slower than an int key: what each build's key costs
            keys = key_costs(src.target_dir, targets, everything, pg_restore=pg_restore)
        except TocError:
            keys = {}
        if keys:
            extra = {**(extra or {}), "key_costs": {str(k): v for k, v in keys.items()}}
        files = {str(it.dump_id): archive_file(src.target_dir, it.dump_id)
                 for it in everything if it.desc == "TABLE DATA"}
        extents = None if os.path.isdir(src.target_dir) else data_extents(src.target_dir)
        if extents is not None:
            # a custom archive: each item's data length, as pg_restore -j
            # computes it and hands the items out by it (custom_archive.py)
            sized = {str(k): [pos, n] for k, (pos, n) in extents.by_id.items()}
            files = {k: (None, float(sized[k][1]) if k in sized else 1.0) for k in files}
            extra = {**(extra or {}), "data_extents": sized,
                     "archive_path": os.path.realpath(src.target_dir)}
        # builds follow rows: the widths of the largest tables' rows, from
        # the start of their data files, or of their data in a custom archive
        if extents is not None:
            widths = custom_row_widths(src.target_dir, extents, {
                it.dump_id: f"{it.schema}.{it.tag}" for it in everything
                if it.desc == "TABLE DATA" and it.schema is not None})
        else:
            widths = row_widths({f"{it.schema}.{it.tag}": (path, size) for it in everything
                                 if it.desc == "TABLE DATA" and it.schema is not None
                                 and (path := files[str(it.dump_id)][0]) is not None
                                 and (size := files[str(it.dump_id)][1]) > 0})
        if widths:
            extra = {**(extra or {}), "row_text_bytes": widths}
        listings = archive_listings(src.target_dir, everything)
        if listings:
            extra = {**(extra or {}), "large_objects": [dataclasses.asdict(li) for li in listings],
                     "file_per_text": file_per_text(files)}
        meta = metadata_listing(everything, LO_META_KEY)
        chosen = set((extra or {}).get("restores") or ())
        if meta is not None and ("restores" not in (extra or {}) or any(
                t.dump_id in chosen for t in everything if t.desc in ("BLOB", "BLOB METADATA"))):
            extra = {**(extra or {}), "lo_metadata": dataclasses.asdict(meta),
                     "file_per_text": (extra or {}).get("file_per_text") or file_per_text(files)}
        return PlanInputs(toc=[dataclasses.asdict(t) for t in everything],
                          targets={str(k): dataclasses.asdict(v) for k, v in targets.items()},
                          archive_files=files, partitions=parents or None, extra=extra,
                          note=note)

    def plan(self, tr: Tracker, inputs: PlanInputs) -> bool:
        if inputs.toc is None:
            return False
        extra = inputs.extra or {}
        restores = extra.get("restores")
        state = state_of(tr, RestoreState)
        state.steps_jobs = extra.get("steps_jobs")
        later = extra.get("later_steps")
        state.later = LaterSteps(dict(later), list(extra.get("later_jobs") or ())) \
            if later else None
        plan_archive(tr, inputs.toc_items(), inputs.archive_files or {}, inputs.post_targets(),
                     inputs.partitions,
                     restores=None if restores is None else {int(i) for i in restores},
                     empty_tables=frozenset(extra.get("empty_tables") or ()),
                     # heap bytes a row: the COPY text's over the text ratio
                     row_bytes={rel: w / tr.text_ratio
                                for rel, w in (extra.get("row_text_bytes") or {}).items()},
                     key_costs={int(k): float(v)
                                for k, v in (extra.get("key_costs") or {}).items()})
        state.extents = {k: (int(v[0]), int(v[1]))
                         for k, v in (extra.get("data_extents") or {}).items()}
        state.archive = extra.get("archive_path")
        _plan_large_objects(tr, extra, restores)
        return True

    def after_plan(self, tr: Tracker, ctx: EndContext, snap: Snapshot,
                   running: set[str]) -> None:
        # attached mid-run: what was restored before is in the catalog
        settle_from_catalog(tr, ctx, snap.wall, running | _lists_held(tr, snap))

    # ---- observe -----------------------------------------------------------

    def client_of(self, tr: Tracker, w: WorkerState, snap: Snapshot) -> int | None:
        return data_file_client(tr, w, snap)

    def progress(self, tr: Tracker, it: Item, cp: CopyProgress | None,
                 ip: IndexProgress | None, snap: Snapshot) -> None:
        if it.kind != "data":
            super().progress(tr, it, cp, ip, snap)
            return
        pos = tr.file_position(it, snap)
        if pos is None:
            pos = _archive_position(tr, it, snap)
        if pos is not None:
            it.done = max(it.done, min(pos, 0.99 * it.work))
        elif cp is not None:
            frac = cp.bytes_processed / max(1.0, it.work * tr.restore_ratio())
            it.done = max(it.done, min(0.99, frac) * it.work)

    def verdict(self, tr: Tracker, snap: Snapshot, settings: dict[str, str]) -> Verdict | None:
        meta = tr.items.get(LO_META_KEY)
        if meta is not None and meta.state == "running":
            n = int(meta.reltuples or 0)
            return Verdict("large-objects", f"large objects' metadata: pg_restore creates each "
                                            f"one (lo_create, its owner) in its pre-data, one "
                                            f"statement after another before any worker "
                                            f"starts, about {int(n * meta.fraction)} of {n} "
                                            "done; their data comes after")
        return lo_verdict(tr, "creates each one and writes its data from the archive",
                          "pg_restore")

    def done_when_unseen(self, tr: Tracker, it: Item, snap: Snapshot, sessions: set[int]) -> bool:
        # a large-object item runs in fastpath calls its session shows idle
        # between: its list file says when it ends (file_evidence); their
        # metadata's ends with the pre-data
        return it.kind not in (LO_ITEM.name, LO_META_ITEM.name)

    def file_evidence(self, tr: Tracker, snap: Snapshot, running_now: dict[str, int]) -> None:
        """A large-object item of a directory archive runs while a worker
        holds its list of objects open (blobs.toc, blobs_<id>.toc from 17)
        and is done once none does; how far, from where that worker reads
        the list and the object file it holds (its place in the list)."""
        _metadata_evidence(tr, snap)
        _ran_unseen(tr, snap.wall, running_now)
        lo = state_of(tr, RestoreState).large_objects
        if not lo:
            return
        if not any(li.list_bytes for li in lo.values()):
            _large_objects_from_sessions(tr, lo, snap.wall)  # a custom archive's
            for key in lo:  # how far: a worker's read position in its extent
                it = tr.items.get(key)
                pos = _archive_position(tr, it, snap) if it and it.state == "running" else None
                if it is not None and pos is not None:
                    it.done = max(it.done, min(pos, 0.99 * it.work))
            label_workers(tr, _item_begins(tr))
            return
        if any(c.open_files is None for c in snap.clients):
            return  # cannot tell open from closed
        single = len(lo) == 1
        for key, listing in lo.items():
            it = tr.items.get(key)
            if it is None or it.state == "done":
                continue
            names = list_files(key, single)
            held = next(((c, f) for c in snap.clients for f in c.open_files or ()
                         if os.path.basename(f.path) in names), None)
            if held is None:
                if it.state == "running":
                    tr.finish(it, snap.wall)
                continue
            if it.state == "pending":
                tr.set_state(it, "running")
                it.started = snap.wall
            # how far: its list read (a buffer ahead), or the object it
            # writes (the file of one larger than pg_restore's buffer)
            done = listing.read_to(held[1].position)
            for f in held[0].open_files or ():
                m = _OBJECT_FILE.match(os.path.basename(f.path))
                place = listing.place(int(m.group(1))) if m else None
                done = max(done, place or 0.0)
            if listing.count:
                it.done = max(it.done, min(0.99, done / listing.count) * it.work)
        label_workers(tr, _item_begins(tr))

    def streams(self, tr: Tracker) -> int | None:
        # a step with no -j of a restore in steps: the rest runs at the
        # steps' -j (the pre-data step's is one connection)
        return tr.job.jobs or state_of(tr, RestoreState).steps_jobs

    def later_steps(self, tr: Tracker) -> LaterSteps | None:
        return state_of(tr, RestoreState).later

    def job_fields(self, tr: Tracker, workers: Sequence[WorkerRow],
                   state: str) -> dict[str, Any]:
        # a restore in steps (steps.py): which of them runs now
        out: dict[str, Any] = {"step": tr.job.step} if tr.job.step_shell else {}
        inferred = state_of(tr, RestoreState).inferred
        if inferred:
            out["items_inferred"] = inferred
        return out

    # ---- outcome -----------------------------------------------------------

    def leftovers(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> list[Item]:
        """Items that ran between two samples left their rows, index or
        constraint behind: the catalog settles them."""
        left = tr.unfinished()
        if not left:
            return left
        for attempt in range(_DONE_ASKS):
            settle_from_catalog(tr, ctx, snap.wall)
            left = [i for i in tr.unfinished() if not (i.kind == "data" and i.work < _TINY_WORK)]
            if not left or not ctx.may_ask_again("done"):
                break
            # a worker's table statistics reach the server's shared memory
            # within about a second of its commit: ask again before calling
            # the run failed
            ctx.pause(0.5 * (attempt + 1))
        return left

    def exit_reason(self, code: int) -> str:
        return f"exit code {code}" + (" (pg_restore ignored errors)" if code == 1 else "")


def _chain(chain: dict[str, Any] | None) -> tuple[list[Selection], str | None, list[int | None]]:
    """What each step of a restore in steps restores (steps.chain_of: the
    steps its shell's command line runs), the note that says the plan
    counts them, and the -j each gives. A list file named through a
    shell variable (`-L "$L/rest.list"`, the advice's) or not readable here
    is read as every item of the step's sections: the steps' lists together
    are most often the whole archive."""
    if not chain or not chain.get("steps"):
        return [], None, []
    sels, guessed, jobs = [], 0, []
    for words in chain["steps"]:
        args = parse_client_cmdline(words, PgRestore.client_specs)
        jobs.append(args.jobs)
        listed = None
        path, why = use_list_path(args, chain.get("shell"))
        if path is not None or why:
            try:
                if path is None or "$" in path:
                    raise ListError(why or "named through a shell variable")
                listed = read_use_list(path)
            except ListError:
                guessed += 1
        sels.append(Selection.of(args, listed))
    note = (f"pg_restore in {len(sels)} steps (its shell's command line): the plan counts the "
            "items of every step, also those to come")
    if guessed:
        note += (f"; {guessed} list file(s) not readable before their step runs counted as "
                 "every item of their sections")
    return sels, note, jobs


def _later_steps(sel: Selection, chain: list[Selection], jobs: list[int | None],
                 step: int | None, toc: list[TocItem]) -> dict[str, Any] | None:
    """For the ETA of a restore in steps: the items a later step restores,
    each with how many steps after this one (restore_select.step_parts),
    and each later step's -j. This run is the step of the chain that
    restores what it does (a list file the chain could not read matches
    on its other options); where several do, the one its job's step count
    points at or the first after it. None when no step of the chain is
    this one, or none comes after it."""
    loose = dataclasses.replace(sel, listed=None)
    hits = [i for i, s in enumerate(chain) if s == sel or (s.listed is None and s == loose)]
    if not hits:
        return None
    at = max(0, (step or 1) - 1)
    cur = hits[0] if len(hits) == 1 else next((i for i in hits if i >= at), hits[-1])
    parts = step_parts([*chain[:cur], sel, *chain[cur + 1:]], cur, toc)
    if not parts:
        return None
    return {"later_steps": {str(k): v for k, v in sorted(parts.items())},
            "later_jobs": jobs[cur + 1:]}


def settle_from_catalog(tr: Tracker, ctx: EndContext, wall: float,
                        running: set[str] | None = None) -> None:
    """Finish the items the catalog shows done: indexes and constraints that
    exist, tables whose rows are in (or that have a build done: pg_restore
    builds a table's indexes only after its data)."""
    done = ctx.catalog_done()
    loaded = set(done.get("loaded") or ())
    names = set(done.get("relations") or ()) | set(done.get("constraints") or ())
    for it in tr.unfinished():
        if running and it.key in running:
            continue
        schema = (it.relation or "public").split(".")[0]
        if it.kind != "data" and f"{schema}.{it.name}" in names:
            tr.finish(it, wall)
    _settle_large_objects(tr, done.get("large_object_pages"), wall, running)
    _metadata_past(tr, wall)
    built_on = {it.relation for it in tr.items.values()
                if it.kind in ("index", "constraint") and it.state == "done" and it.relation}
    for it in tr.unfinished():
        if running and it.key in running:
            continue
        if it.kind == "data" and (it.relation in loaded or it.relation in built_on):
            tr.finish(it, wall)


# an object's file in a directory archive, its OID
_OBJECT_FILE = re.compile(r"blob_([0-9]+)\.dat")
# the item of the objects' metadata (the pre-data's), and what its session
# runs: lo_create('OID') and ALTER LARGE OBJECT OID OWNER TO (the first of a
# batch of 1000 from 17)
LO_META_KEY = "large-object-metadata"
_LO_META_QUERY = re.compile(r"lo_create\('?([0-9]+)'?\)|LARGE OBJECT ([0-9]+)")
# the share of the objects' pages in pg_largeobject at which they are all in
# (their pages are counted from a sample of their files)
LO_PAGES_IN = 0.9


def _listing(d: dict[str, Any]) -> Listing:
    return Listing(**{**d, "marks": tuple(tuple(m) for m in d.get("marks") or ())})


def _plan_large_objects(tr: Tracker, extra: dict[str, Any], restores: Any) -> None:
    """The restore's large-object items (jobs/large_objects.py): one an
    archive item, its objects from its list (a custom archive's: its
    metadata entries). Their work in the restore's unit, archive data-file
    bytes: an object's fixed cost and its bytes, as a table's heap bytes,
    through the text ratio and the tables' files' compression
    (`file_per_text`); their size is pg_restore's, which hands them out by
    it: a directory archive's list's bytes x 1024, a custom archive's its
    data's length in the archive (0 when unknown: written to a pipe).
    When this run restores the pre-data too, the objects' metadata is an
    item of its own (LO_META_KEY), the pre-data's share of an object's
    fixed cost, which every data item waits for (the pre-data runs before
    any worker)."""
    state = state_of(tr, RestoreState)
    scale = tr.text_ratio * float(extra.get("file_per_text") or 1.0)
    share = 0.0
    if extra.get("lo_metadata") and LO_META_KEY not in tr.items:
        meta = _listing(extra["lo_metadata"])
        share = RESTORE_PRE_DATA_SHARE
        state.lo_metadata = meta
        tr.add(Item(key=LO_META_KEY, kind=LO_META_ITEM.name, relation=None,
                    name=f"large-object metadata ({meta.count})", size=0.0,
                    work=max(1.0, meta.count * RESTORE_OBJECT_BYTES * share * scale),
                    reltuples=float(meta.count)))
    for d in extra.get("large_objects") or ():
        li = _listing(d)
        if li.count <= 0 or (restores is not None and li.key not in
                             {str(r) for r in restores}) or li.key in tr.items:
            continue
        state.large_objects[li.key] = li
        # pg_restore sizes a directory archive's item by its list, x 1024,
        # a custom archive's by its data's length (_PrepParallelRestore): it
        # is handed out among the largest; that length (compressed) is also
        # a floor of the objects' bytes, which a custom archive's TOC lacks
        length = state.extents[li.key][1] if li.key in state.extents else None
        size = float(length if length is not None else li.list_bytes * 1024)
        work = object_work(li.count, li.bytes if li.bytes is not None or length is None
                           else float(length), RESTORE_OBJECT_BYTES * (1 - share),
                           RESTORE_BYTE_FACTOR)
        tr.add(Item(key=li.key, kind=LO_ITEM.name, relation=None,
                    name=f"large objects ({li.count})", size=size,
                    work=max(1.0, work * scale), reltuples=float(li.count)))
    if share and tr.items[LO_META_KEY].state == "pending":
        for it in tr.items.values():
            if it.kind in ("data", LO_ITEM.name) and it.state == "pending":
                it.deps = it.deps | {LO_META_KEY}


def _archive_position(tr: Tracker, it: Item, snap: Snapshot) -> float | None:
    """How far into its data a worker reads a custom archive's item: the
    archive is one file, each worker has it open on its own, and seeks to
    an item's data before reading it, so a read position within an item's
    extent is that item's (in its unit, the archive's bytes). The furthest
    one: a worker done with the item before it in the file may rest at its
    start. Its end is not in it: pg_restore's leader rests at the file's
    end once it has sized the last item."""
    state = state_of(tr, RestoreState)
    ext, path = state.extents.get(it.key), state.archive
    if ext is None or not path:
        return None
    start, length = ext
    at = max((f.position for c in snap.clients for f in c.open_files or ()
              if start < f.position < start + length and f.path == path), default=None)
    return None if at is None else float(at - start) * it.work / max(1, length)


def _ran_unseen(tr: Tracker, wall: float, running_now: dict[str, int]) -> None:
    """Data items that ran between two samples (small tables load in
    milliseconds: seen by no sample, they read "not done" to the end).
    pg_restore -j hands its data items out in one order, known here: by
    size, largest first, ties by dump id (it sizes each from its data
    file in a directory archive, from its data's length in a custom one:
    _PrepParallelRestore; a custom archive written to a pipe has no
    lengths, and no order is known); without -j, in archive order. So
    once an item is seen running, every item before it was handed out, and
    those no worker runs now are done, but for as many of the latest as
    workers show no item (one may be between its BEGIN and its COPY).
    Counted in `items_inferred`."""
    jobs = tr.job.jobs or 1
    if not running_now or (jobs == 1 and tr.job.args is not None
                           and any(k == "use-list" for k, _ in tr.job.args.options)):
        return  # nothing seen; or one connection following a list's own order
    state = state_of(tr, RestoreState)
    if state.order is None or state.order_version != tr.version:
        data = [it for it in tr.items.values()
                if it.kind == "data" and (it.file or it.key in state.extents)]
        data.sort(key=(lambda it: (-it.size, _dump_id(it.key))) if jobs > 1
                  else (lambda it: _dump_id(it.key)))
        state.order, state.done_below = [it.key for it in data], 0
        state.order_of = {k: i for i, k in enumerate(state.order)}
        state.order_version = tr.version
    order = state.order
    at = max((state.order_of[k] for k in running_now if k in state.order_of), default=-1)
    if at < 0:
        return
    busy = len(running_now) + sum(1 for k in tr.keys_of(LO_ITEM.name)
                                  if tr.items[k].state == "running")
    before = [tr.items[k] for k in order[state.done_below:at]
              if k not in running_now and tr.items[k].state != "done"]
    for it in before[:max(0, len(before) - max(0, jobs - busy))]:
        tr.finish(it, wall)
        state.inferred += 1
    while state.done_below < at and tr.items[order[state.done_below]].state == "done":
        state.done_below += 1


def _metadata_past(tr: Tracker, wall: float) -> bool:
    """The objects' metadata is done once any other item runs or is done:
    pg_restore's workers start after its pre-data. Returns whether it is."""
    meta = tr.items.get(LO_META_KEY)
    if meta is None or meta.state == "done":
        return True
    # the Tracker's counts, not a pass over every item a tick (the pre-data
    # of 100,000 tables runs for minutes)
    others_started = len(tr.items) - tr.count("pending") - (meta.state != "pending")
    if others_started > 0:
        tr.finish(meta, wall)
        return True
    return False


def _metadata_evidence(tr: Tracker, snap: Snapshot) -> None:
    """The objects' metadata runs while a session creates them, or is idle
    after doing so (lo_create, ALTER LARGE OBJECT ... OWNER: how far, by the
    OID's place), and is done once any other item runs or is done (the
    pre-data has ended)."""
    meta = tr.items.get(LO_META_KEY)
    if meta is None or meta.state == "done" or _metadata_past(tr, snap.wall):
        return
    listing = state_of(tr, RestoreState).lo_metadata
    for w in tr.workers.values():
        # active on one, or idle after it (each runs on its own): the
        # latest object created
        m = _LO_META_QUERY.search(w.query or "")
        if m is None:
            continue
        if meta.state == "pending":
            tr.set_state(meta, "running")
            meta.started = snap.wall
        w.phase = LO_PHASE.name
        place = listing.place(int(m.group(1) or m.group(2))) if listing else None
        if place is not None and listing and listing.count:
            meta.done = max(meta.done, min(0.99, place / listing.count) * meta.work)


def _item_begins(tr: Tracker) -> tuple[str, ...]:
    """What else a session writing large objects shows: idle in the
    transaction pg_restore opens for the item, after its BEGIN (a later
    item on the same connection sends no lookup); not where the run opens
    one of its own (--single-transaction, 17's --transaction-size)."""
    own = any(k in ("single-transaction", "transaction-size")
              for k, _ in (tr.job.args.options if tr.job.args else ()))
    return () if own else ("begin",)


def _large_objects_from_sessions(tr: Tracker, lo: dict[str, Listing], wall: float) -> None:
    """A custom archive's large-object items, from the sessions (no file
    to follow): as many run as sessions write objects and copy no table,
    the first of them in archive order (pg_restore hands them out so);
    when fewer sessions write them, the longest running are done."""
    items = sorted((tr.items[k] for k in lo if k in tr.items and tr.items[k].state != "done"),
                   key=lambda it: _dump_id(it.key))
    if not items:
        return
    writing = sum(1 for w in tr.workers.values()
                  if w.item is None and moves_objects(w, _item_begins(tr)))
    running = [it for it in items if it.state == "running"]
    for it in running[:max(0, len(running) - writing)]:
        tr.finish(it, wall)
    for it in [it for it in items if it.state == "pending"][:max(0, writing - len(running))]:
        tr.set_state(it, "running")
        it.started = wall


def _lists_held(tr: Tracker, snap: Snapshot) -> set[str]:
    """The large-object items whose list a client holds open (running)."""
    lo = state_of(tr, RestoreState).large_objects
    held = {os.path.basename(f.path) for c in snap.clients for f in c.open_files or ()}
    return {k for k in lo if any(n in held for n in list_files(k, len(lo) == 1))}


def _settle_large_objects(tr: Tracker, pages: Any, wall: float,
                          running: set[str] | None) -> None:
    """Every large-object item is done once pg_largeobject holds their
    pages (its live rows, as the statistics count them: committed ones,
    read without touching the table, which only a superuser may read):
    items that ran between two samples, or before the attach. All or none:
    from 17 the items commit one by one, and rows do not say whose they are.
    An item a worker holds (running) is left to its list file."""
    lo = state_of(tr, RestoreState).large_objects
    if pages is None or not lo:
        return
    left = [tr.items[k] for k in lo if k in tr.items and tr.items[k].state != "done"]
    if not left or any(it.key in (running or ()) for it in left):
        return
    want = sum(li.pages if li.pages is not None else li.count for li in lo.values())
    if float(pages) >= LO_PAGES_IN * want:
        for it in left:
            tr.finish(it, wall)


def file_per_text(files: dict[str, Any], most: int = 20) -> float:
    """The tables' data files' bytes a byte of their COPY text (the
    archive's compression), from the `most` largest: 1.0 when none says."""
    big = sorted(((p, sz) for p, sz in files.values() if p and sz > 0),
                 key=lambda x: -x[1])[:most]
    size = sum(sz for _, sz in big)
    text = sum(text_bytes(p, int(sz))[0] for p, sz in big)
    return size / text if size > 0 and text > 0 else 1.0


def use_list_path(args: ClientArgs | None, pid: int | None) -> tuple[str | None, str | None]:
    """pg_restore's -L file as an absolute path (a relative one is in the
    process's working folder), and why it cannot be told: (None, None)
    without -L."""
    path = next((v for k, v in (args.options if args else ()) if k == "use-list" and v), None)
    if path is None or os.path.isabs(path):
        return path, None
    try:
        import psutil

        return os.path.join(psutil.Process(pid or -1).cwd(), path), None
    except Exception:  # noqa: BLE001 - another user's process, or gone
        return None, "its working folder, where the relative path points, is not ours to read"


def archive_file(archive: str, dump_id: int) -> tuple[str | None, float]:
    """An item's data file in a directory archive and its size (1 byte when
    there is none: a custom-format archive keeps data in one file)."""
    p = data_file(archive, dump_id) if os.path.isdir(archive) else None
    if p is not None:
        try:
            return str(p), float(os.stat(p).st_size)
        except OSError:
            pass
    return None, 1.0


def partitions_under(table: str, parents: dict[str, str]) -> list[str]:
    """Every partition under `table`, at any depth."""
    children: dict[str, list[str]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    out, todo, seen = [], [table], {table}
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in seen:
                seen.add(c)
                out.append(c)
                todo.append(c)
    return out


# The row width (heap bytes a row) at which a build costs the default
# index_factor x its table's load work: measured on this project's VM
# (bench/restore_row_cost.py), an int primary key took 0.54-0.61x the load of a
# table of 48-byte rows, 0.12-0.14x at 690-byte rows, 0.016-0.019x at 2.4 kB: a
# build sorts rows, so its cost follows the rows, not the table's bytes.
INDEX_REF_ROW_BYTES = 60.0
# ... within these bounds of the per-byte figure (a guess of rows is a guess)
ROW_SCALE_MIN, ROW_SCALE_MAX = 0.02, 2.0


def plan_archive(tr: Tracker, toc: list[TocItem], archive_files: dict[str, Any],
                 targets: dict[int, PostDataTarget],
                 parents: dict[str, str] | None = None, restores: set[int] | None = None,
                 empty_tables: frozenset[str] = frozenset(),
                 row_bytes: dict[str, float] | None = None,
                 ref_row_bytes: float = INDEX_REF_ROW_BYTES,
                 key_costs: dict[int, float] | None = None) -> None:
    """Items of a restore: data files (sized by the file) and post-data
    builds, which depend on their table's data and, except INDEX, lock it.
    parents: each partition's parent (ddl.partition_parents); a foreign key
    on a partitioned table checks the rows of all its partitions, so it is
    sized by, and waits for, their data (an index or key on the parent alone,
    ON ONLY, is a catalog entry: each partition builds its own).
    restores: the dump ids this run restores (restore_select; None: all);
    a build is sized by its table's data in the archive, whichever run
    loads it, but on a table of `empty_tables` (created by this run, no
    data loaded) it builds on no rows. Items already tracked (an earlier
    step's of a restore in steps) stay as they are.
    row_bytes: each table's heap bytes a row (`row_widths`; a table missing:
    unknown): an index or unique / primary key build sorts its table's
    rows, so its work is index_factor x its table's load x ref_row_bytes /
    that width (within ROW_SCALE_MIN..MAX); without it, per byte.
    key_costs: a btree build's cost a row against an int key's, by dump id
    (`ddl.key_costs`: a text key sorts slower); missing: 1."""
    data_size: dict[str, float] = {}
    for it in toc:
        if it.desc != "TABLE DATA" or it.schema is None:
            continue
        rel = f"{it.schema}.{it.tag}"
        path, size = archive_files.get(str(it.dump_id)) or (None, 1.0)
        data_size[rel] = 0.0 if rel in empty_tables else size
        if (restores is None or it.dump_id in restores) and str(it.dump_id) not in tr.items:
            tr.add(Item(key=str(it.dump_id), kind="data", relation=rel, name=rel, size=size,
                        work=max(size, 1.0), file=path))
    # pg_restore -j takes the largest ready item first, ties by dump id: a
    # table's builds share its size, so they go in dump-id order
    for it in sorted(toc, key=lambda t: t.dump_id):
        kind = {"INDEX": "index", "CONSTRAINT": "constraint",
                "FK CONSTRAINT": "fk"}.get(it.desc)
        if kind is None or (restores is not None and it.dump_id not in restores) \
                or str(it.dump_id) in tr.items:
            continue  # not this run's, or planned by an earlier step (kept as it is)
        tgt = targets.get(it.dump_id)
        table = tgt.table if tgt else None
        name = (tgt.object_name or tgt.name.split(" ")[-1]) if tgt else it.tag.split(" ")[-1]
        base = data_size.get(table or "", 0.0)
        factor = DEFAULT_FK_FACTOR if kind == "fk" else tr.index_factor
        width = (row_bytes or {}).get(table or "")
        if kind != "fk" and width and base > 0:
            # a build sorts rows: per row of its table, not per byte
            factor *= min(ROW_SCALE_MAX, max(ROW_SCALE_MIN, ref_row_bytes / width))
        if kind != "fk":
            factor *= (key_costs or {}).get(it.dump_id, 1.0)
        deps = {tr.by_relation[r] for r in (table, tgt.references if tgt else None)
                if r and r in tr.by_relation}
        holds: frozenset[str] = frozenset()
        if kind == "fk" and table and parents:
            # a key on or to a partitioned table locks each partition, which
            # pg_restore -j does not know of (the archive names the parents)
            holds = frozenset(r for t in (table, tgt.references if tgt else None) if t
                              for r in partitions_under(t, parents) if r in data_size)
        if kind == "fk" and table and table not in data_size and parents:
            parts = [r for r in partitions_under(table, parents) if r in data_size]
            base = sum(data_size[r] for r in parts)
            deps |= {tr.by_relation[r] for r in parts if r in tr.by_relation}
        # pg_restore's lock rule names the tables of the entry's dependencies
        tables = frozenset(t for t in (table, tgt.references if tgt else None) if t)
        tr.add(Item(key=str(it.dump_id), kind=kind, relation=table, name=name, size=base,
                    work=max(base * factor, 1.0), deps=frozenset(deps),
                    exclusive=kind != "index", holds=holds, tables=tables))
    for key, after in post_data_order(targets, set(tr.items)).items():
        tr.items[key].deps = tr.items[key].deps | after
    tr.mark_planned()


def post_data_order(targets: dict[int, PostDataTarget], planned: set[str]
                    ) -> dict[str, frozenset[str]]:
    """The post-data items each planned item waits for, from the archive's
    own dependencies (pg_restore -j starts an item only when they are done):
    a foreign key waits for the referenced key's build, and on a partitioned
    table for every partition's key build, through the INDEX ATTACH entries
    (not work items themselves: their dependencies are followed)."""
    out: dict[str, frozenset[str]] = {}
    for dump_id, tgt in targets.items():
        if str(dump_id) not in planned:
            continue
        found: set[str] = set()
        seen = {dump_id}
        todo = list(tgt.dependencies)
        while todo:
            d = todo.pop()
            if d in seen:
                continue
            seen.add(d)
            if str(d) in planned:
                found.add(str(d))
            elif d in targets:  # a post-data entry that is no work item
                todo.extend(targets[d].dependencies)
        if found:
            out[str(dump_id)] = frozenset(found)
    return out


def section_steps(items: list[WorkItem], data_keys: frozenset[str],
                  last_keys: frozenset[str] = frozenset()) -> list[list[WorkItem]]:
    """A restore run in sections (`--section=data -j N`, then
    `--section=post-data -j N`) as two schedules, each pg_restore's own;
    with `last_keys` (foreign keys), three: the post-data step lists every
    item but those (`-L`), and a last step lists only them.

    The data step hands out the table data, largest first. The post-data
    step restores no data, and there pg_restore orders its ready items by
    archive order (dump id: the data lengths it sorts by are those of the
    data it restores, here none; seen in `pg_restore -v`). Each TABLE DATA
    entry is still in its ready list, after the post-data entries (pg_dump
    numbers the data last), and is "skipped" only when a worker is idle and
    no post-data item is ready: the builds on a table become ready one table
    at a time, as workers go idle. Modelled as items of no work in that order.
    A foreign key on a partitioned table waits in the archive for the keys it
    references, not for its partitions' data: that dependency, which the
    one-command plan adds for the load, is dropped here. The last step's
    list holds no data entries: its keys go in dump-id order, every other
    item done."""
    data = [it for it in items if it.key in data_keys]
    post: list[WorkItem] = [
        WorkItem(key=it.key, work=0.0, size=-_dump_id(it.key), label=it.label)
        for it in data]
    last: list[WorkItem] = []
    by_key = {it.key: it for it in data}
    for it in items:
        if it.key in data_keys:
            continue
        if it.key in last_keys:
            deps = frozenset(d for d in it.deps if d in last_keys)
            last.append(dataclasses.replace(it, size=-_dump_id(it.key), deps=deps))
            continue
        deps = frozenset(d for d in it.deps
                         if d not in by_key or by_key[d].table not in it.holds)
        post.append(dataclasses.replace(it, size=-_dump_id(it.key), deps=deps))
    return [data, post, last] if last else [data, post]


def _dump_id(key: str) -> float:
    return float(key) if key.isdigit() else 0.0
