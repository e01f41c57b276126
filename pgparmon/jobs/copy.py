"""A COPY load: any client program feeding the server through COPY ... FROM
(a loader, a migration tool, psql \\copy in a script), grouped by its client,
not by its target table.

- Local client (a process on this host): each session is linked to its
  client process (TCP peer port, unix socket peer), the process tree is
  walked up to the job's root (readers/procs.job_root), and every session of
  that tree, on every database of the server, is one job. The job ends when
  its processes exit; sessions idle between batches still belong to it.
- Remote client (no process to see): sessions are grouped by
  application_name, client address and user (sessions that started more
  than START_GAP_S apart are separate jobs); the job says its grouping is
  inferred, and ends when all its sessions are gone or idle for longer than
  IDLE_GRACE_S.

No plan: each COPY statement is an item (a table, or a batch). Progress comes
from what is knowable: a local loader's input files (read position over
size), else the server's bytes_total (COPY FROM a server-side file), else
rates only, and "total unknown" is said plainly.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from ..analyze.items import Item
from ..analyze.rates import WindowRate
from ..readers.procs import is_input_file
from ..snapshot import Backend, CopyProgress, IndexProgress, Snapshot
from .base import TREE, Driver, Job
from .statements import copy_target, norm_rel

if TYPE_CHECKING:
    from ..analyze.progress import Tracker

INFERRED = "inferred: application_name, client address, user"
# a remote job whose sessions have all been idle this long has ended (a
# loader parsing its next batch is idle for a few seconds between COPYs)
IDLE_GRACE_S = 60.0
# remote sessions of one key that started further apart are separate jobs
START_GAP_S = 600.0
IDLE_STATES = ("idle", "idle in transaction", "idle in transaction (aborted)")
IDLE_PHASE = "idle between batches"
# bytes a reader may still take at its end beyond its measured reach (its
# stdio buffer, a last burst)
READ_SLACK = 256 * 1024


def idle_for(b: Backend, now: float | None) -> float:
    """Seconds the session has been idle (0 when active or not known)."""
    if b.state not in IDLE_STATES or now is None:
        return 0.0
    since = b.state_change or b.query_start
    return max(0.0, now - since) if since else 0.0


def copy_candidate(b: Backend, now: float | None) -> bool:
    """A session that is loading through COPY, or idle just after one (its
    last statement is a COPY: a load between batches)."""
    ct = copy_target(b.query)
    if ct is None or ct[0] != "from" or b.backend_type != "client backend":
        return False
    if b.state == "active":
        return True
    return b.state in IDLE_STATES and idle_for(b, now) <= IDLE_GRACE_S


class CopyLoad(Driver):
    kind = "copy"
    plans_work = False
    all_databases = True

    # ---- recognise ---------------------------------------------------------

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        ct = copy_target(b.query)
        if ct is None or ct[0] != "from" or b.state not in ("active", *IDLE_STATES):
            return None
        return (self.kind, b.usename, b.application_name, b.client_addr)

    def split(self, members: list[Backend]) -> list[list[Backend]]:
        groups: list[list[Backend]] = []
        last: float | None = None
        for b in sorted(members, key=lambda b: b.backend_start or 0.0):
            start = b.backend_start or 0.0
            if not groups or last is None or start - last > START_GAP_S:
                groups.append([])
            groups[-1].append(b)
            last = start
        return groups

    def from_sessions(self, members: list[Backend]) -> Job:
        b0 = members[0]
        dbs = Counter(b.datname for b in members if b.datname)
        rels = {ct[1] for b in members if (ct := copy_target(b.query))}
        return Job(kind=self.kind, database=dbs.most_common(1)[0][0] if dbs else b0.datname,
                   databases=tuple(sorted(dbs)), usename=b0.usename,
                   client_addr=b0.client_addr, app_name=b0.application_name,
                   relation=rels.pop() if len(rels) == 1 else None, jobs=len(members),
                   pid_hint=frozenset(b.pid for b in members), grouping=INFERRED)

    def belongs(self, job: Job, b: Backend) -> bool:
        if b.backend_type == "parallel worker":
            return False  # counted through its leader
        if job.grouping is None:  # a recording from before grouping by client
            ct = copy_target(b.query)
            return (b.datname == job.database and ct is not None and ct[0] == "from"
                    and b.usename == job.usename and b.client_addr == job.client_addr
                    and _same_rel(ct[1], job.relation))
        if job.grouping == TREE:
            return b.pid in job.pid_hint  # when no link could be read this tick
        return (b.usename == job.usename and b.client_addr == job.client_addr
                and b.application_name == job.app_name)

    def member_pids(self, job: Job, snap: Snapshot) -> set[int] | None:
        if job.grouping != TREE or snap.links is None:
            return None
        tree = set(job.client_pids) | {c.pid for c in snap.clients}
        if job.client_pid:
            tree.add(job.client_pid)
        return {bp for bp, cp in snap.links if cp in tree}

    def still_working(self, job: Job, members: list[Backend], snap: Snapshot) -> bool:
        now = snap.db.server_ts if snap.db else None
        return any(idle_for(b, now) <= IDLE_GRACE_S for b in members)

    # ---- observe -----------------------------------------------------------

    def copy_item(self, tr: Tracker, b: Backend, rel: str | None) -> str | None:
        # one item per COPY statement: a table, or one batch of a load. A
        # COPY TO in a load is the read side of a relay (a migration tool
        # reading the source to feed the target's COPY FROM): not an item,
        # its COPY FROM is
        ct = copy_target(b.query)
        if ct is not None and ct[0] == "to":
            return None
        key = f"copy:{b.pid}:{b.query_start or 0:.3f}"
        if key not in tr.items:
            tr.add(Item(key=key, kind="copy", relation=rel, name=rel or "?", size=1.0, work=1.0))
        return key

    def progress(self, tr: Tracker, it: Item, cp: CopyProgress | None,
                 ip: IndexProgress | None, snap: Snapshot) -> None:
        if it.kind != "copy":
            super().progress(tr, it, cp, ip, snap)
            return
        if cp is None:
            return
        it.done = float(cp.bytes_processed)
        if cp.bytes_total:
            it.work = float(cp.bytes_total)
        else:  # COPY FROM STDIN: the server knows no total
            it.work = max(it.work, it.done)

    def file_evidence(self, tr: Tracker, snap: Snapshot, running_now: dict[str, int]) -> None:
        """A local loader's input files: read position over size. A file its
        process closed was read to its end; one whose process is gone keeps
        its last position (cut_short judges it at the end)."""
        sizes = {f.path: f.size for f in snap.files}
        tables = _tables_of_clients(snap)
        open_now: set[str] = set()
        for c in snap.clients:
            for f in c.open_files or ():
                if f.path not in sizes or not is_input_file(f):
                    continue
                key = f"{c.pid}:{f.path}"
                ent = tr.inputs.setdefault(key, [float(sizes[f.path]), 0.0])
                ent[0] = max(ent[0], float(sizes[f.path]))
                pos = max(ent[1], min(float(f.position), ent[0]))
                last = tr.input_seen.get(key)
                rate = last[2] if last else 0.0
                if last and snap.ts > last[0]:
                    rate = max(rate, (pos - last[1]) / (snap.ts - last[0]))
                table = tables.get(c.pid) or (last[3] if last else None)
                tr.input_seen[key] = (snap.ts, pos, rate, table)
                ent[1] = pos
                tr.input_rates.setdefault(key, WindowRate()).add(snap.ts, pos)
                open_now.add(key)
        tr.inputs_open = open_now
        alive = {c.pid for c in snap.clients if c.status != "zombie"}
        if all(c.open_files is not None for c in snap.clients):
            for key, ent in tr.inputs.items():
                if key not in open_now and int(key.split(":", 1)[0]) in alive:
                    ent[1] = ent[0]
        if tr.inputs:
            tr.input_rate.add(snap.ts, sum(e[1] for e in tr.inputs.values()))

    def cut_short(self, tr: Tracker, snap: Snapshot) -> str | None:
        """Why the load was cut short, when its processes are gone: an input
        file left further from its end than its reader could have read
        between the last sample that saw it open and now (a loader reading
        to the end and exiting normally is always within that reach)."""
        alive = {c.pid for c in snap.clients if c.status != "zombie"}
        cuts = []
        for key, (ts, pos, rate, table) in sorted(tr.input_seen.items()):
            pid, path = key.split(":", 1)
            size = tr.inputs[key][0]
            if int(pid) in alive or pos >= size:
                continue
            reach = 2.0 * rate * max(snap.ts - ts, 0.0) + READ_SLACK
            if size - pos <= reach:
                continue
            into = f" into {table}" if table else ""
            cuts.append(f"{path}{into} read to {pos / size:.0%} ({int(pos)} of {int(size)} "
                        "bytes)")
        if not cuts:
            return None
        return "the loader stopped mid-file: " + "; ".join(cuts)

    def fraction(self, tr: Tracker) -> float | None:
        if tr.inputs:
            total = sum(e[0] for e in tr.inputs.values())
            return min(1.0, sum(e[1] for e in tr.inputs.values()) / total) if total else None
        items = [i for i in tr.items.values() if i.kind == "copy"]
        if items and all(i.work > 1 and i.work > i.bytes_done for i in items):
            total = sum(i.work for i in items)
            return min(1.0, sum(i.done for i in items) / total) if total else None
        return None

    def has_total(self, tr: Tracker) -> bool:
        return bool(tr.inputs) or any(it.work > it.bytes_done for it in tr.items.values())

    def own_eta(self, tr: Tracker) -> tuple[float | None, str | None] | None:
        if tr.inputs:
            left = sum(e[0] - e[1] for e in tr.inputs.values())
            rate = tr.input_rate.rate(15.0)
            if left <= 0:
                return 0.0, None
            if not rate or rate <= 0:
                return None, "measuring the input files' read rate"
            # the job's rate over its window counts readers that have since
            # finished: with files of different sizes the end is one reader
            # alone, so the job ends no sooner than its slowest open reader
            # at its own rate (the job's rate stays the floor: a file whose
            # reader is gone still counts in what is left)
            return max(left / rate, self._slowest_reader(tr)), None
        if not self.has_total(tr):
            return None, "total unknown (COPY FROM STDIN, no input file seen): rates only"
        return None

    @staticmethod
    def _slowest_reader(tr: Tracker) -> float:
        """Seconds until the last file open now is read to its end, each at
        its own recent read rate (0 when none can be said)."""
        worst = 0.0
        for key in tr.inputs_open:
            size, pos = tr.inputs[key]
            wr = tr.input_rates.get(key)
            r = wr.rate(15.0) if wr else None
            if size > pos and r and r > 0:
                worst = max(worst, (size - pos) / r)
        return worst

    def job_fields(self, tr: Tracker, workers: list[dict[str, Any]],
                   state: str) -> dict[str, Any]:
        phases = {w["phase"] for w in workers}
        phase: str | None = None
        if state == "running":
            if "copy" in phases:
                phase = "copy"
            elif phases & {"index", "constraint"}:
                phase = "index build"
            elif phases <= {"idle"}:
                phase = IDLE_PHASE
            else:
                phase = "other"
        if tr.inputs:
            basis = "client input files"
        elif any(it.work > it.bytes_done for it in tr.items.values()):
            basis = "server bytes_total"
        else:
            basis = "unknown"
        return {"phase": phase, "progress_basis": basis,
                "copies_done": sum(1 for i in tr.items.values()
                                   if i.kind == "copy" and i.state == "done")}


def _tables_of_clients(snap: Snapshot) -> dict[int, str]:
    """client pid -> the table its session loads now (COPY FROM)."""
    if snap.db is None or not snap.links:
        return {}
    by_pid = {b.pid: b for b in snap.db.backends}
    named = {c.pid: c.relation for c in snap.db.copies or () if c.relation}
    out: dict[int, str] = {}
    for bp, cp in snap.links:
        ct = copy_target(by_pid[bp].query) if bp in by_pid else None
        if ct is not None and ct[0] == "from" and by_pid[bp].state == "active":
            out[cp] = norm_rel(named.get(bp)) or ct[1]  # schema-qualified when known
    return out


def _same_rel(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return a == b
    return a == b or a.split(".")[-1] == b.split(".")[-1]
