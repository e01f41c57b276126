"""Logical replication's initial sync as the publisher sees it (the side
jobs/logical_sync.py's driver follows with `attach -d PUBDB` there): one
job per subscription, found from its sync walsenders, and when it ends.

Each table's sync worker connects a walsender named after its slot and
creates that slot first (14+: `pg_<subscription oid>_sync_<subscriber
relid>_<subscriber system id>`, before 14 `<subscription>_<oid>_sync_<relid>`),
copies the table (COPY ... TO STDOUT: the only statement the sample keeps a
walsender for), catches up if it must (START_REPLICATION: out of the sample)
and drops the slot last. From 14 the slot is permanent: a sync that failed
keeps it until its retry (after the subscriber's wal_retrieve_retry_interval,
5 s by default), while no walsender of its is left. Before 14 it is
temporary and goes with its walsender.

So the job still runs while one of its sync walsenders is sampled or one of
its sync slots exists (the followed job's own part, sql/logical_slots_*.sql);
once neither is left, for the hand-over only: the apply worker starts the
next table's sync worker as the last one exits, or within its 1 s cycle,
and that worker's first act is its slot. Where the slots cannot say (before
14, or a recording made before they were read) the job waits
PUBLISHER_GRACE_S, which covers a failed sync's retry too.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..snapshot import Backend, DbSample, Snapshot
from .base import Job, state_of
from .logical_sync_state import SyncState

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..analyze.progress import Tracker
    from ..sample import WorkerRow

SLOTS_PART = "logical_slots"
# a sync walsender's application_name, its slot's name (see above)
SYNC_SLOT = re.compile(r"^(?:pg_(\d+)_sync_\d+_(\d+)|.+_(\d+)_sync_\d+)$")
PUBLISHER = "sync walsenders"  # the grouping of a job found on the publisher
# neither a sync walsender nor a sync slot of the job's left: how long the
# next table's sync worker may take to start and create its slot. The apply
# worker's cycle is 1 s (up to 1.0 s measured between two tables, one sync
# worker, an idle 2-core host); but when the launch finds no free logical
# replication worker slot (the one the last table's worker held not yet
# released), the table's next launch waits wal_retrieve_retry_interval (5 s
# by default), which the publisher cannot read (a subscriber's setting):
# its default, the apply worker's cycle and the slot's creation
HANDOVER_S = 7.5
# where the slots cannot say: also a failed sync's retry, after
# wal_retrieve_retry_interval (5 s by default)
PUBLISHER_GRACE_S = 10.0


def on_publisher(job: Job) -> bool:
    """Whether the job was found on the publisher (from its sync walsenders)."""
    return (job.grouping or "").startswith(PUBLISHER)


def session_key(kind: str, b: Backend) -> tuple[object, ...] | None:
    """A sync walsender's key: the database, the subscription's oid and the
    subscriber's system id (empty before 14)."""
    m = SYNC_SLOT.match(b.application_name or "") if b.backend_type == "walsender" else None
    if m is None or not b.datname:
        return None
    return (kind, b.datname, m.group(1) or m.group(3), m.group(2) or "")


def grouping(key: tuple[object, ...]) -> str:
    _kind, _db, suboid, sysid = key
    return f"{PUBLISHER} pg_{suboid}_sync_*" + (f"_{sysid}" if sysid else "")


def sync_slots(db: DbSample | None, job: Job) -> list[str] | None:
    """The job's sync slots in this sample; None: not read (a recording
    made before they were)."""
    names = (db.parts or {}).get(SLOTS_PART) if db is not None else None
    if names is None:
        return None
    return [n for n in names if _slot_key(n) == _job_key(job)]


def keeps_slots(job: Job) -> bool:
    """Whether its sync slots outlive a failed sync (14+ names: permanent
    slots, the subscriber's system id in them)."""
    return not (job.grouping or "").endswith("*")


class PublisherEnd:
    """When a job found on the publisher is over (see the module's doc)."""

    def __init__(self) -> None:
        # when each job's last walsender or slot was seen (the sample's
        # clock), by its database and grouping
        self._last_seen: dict[tuple[str | None, str | None], float] = {}

    def still_working(self, job: Job, members: list[Backend], snap: Snapshot) -> bool:
        key = (job.database, job.grouping)
        slots = sync_slots(snap.db, job)
        if members or slots:
            self._last_seen[key] = snap.wall
            return True
        last = self._last_seen.get(key)
        grace = HANDOVER_S if slots is not None and keeps_slots(job) else PUBLISHER_GRACE_S
        return last is not None and snap.wall - last < grace


def publisher_fields(tr: Tracker, workers: Sequence[WorkerRow],
                     state: str) -> dict[str, Any]:
    """The job as the publisher sees it: the tables its sync walsenders
    copy now (COPY TO: bytes and rows sent, against this server's own
    sizes) and those they have sent; the rest only the subscriber knows."""
    st = state_of(tr, SyncState)
    copying = [it for it in tr.items.values() if it.state == "running"]
    tables = [{"table": it.name, "state": "copying", "failures": 0,
               "bytes": it.bytes_done or None, "rows": it.tuples_done or None,
               "size": it.heap_bytes,
               "progress": round(it.fraction, 4) if tr.planned and it.heap_bytes else None}
              for it in copying]
    sent = sum(1 for it in tr.items.values() if it.state == "done")
    return {"phase": ("copy" if any(w.phase == "copy" for w in workers) else None)
            if state == "running" else None,
            "subscription": tr.job.subject, "side": "publisher",
            "progress_basis": (f"publisher catalog ({st.plan_source})" if tr.planned
                               else "unknown"),
            "sync_workers": max(st.max_walsenders, len(copying)) or None,
            "sync_slots": st.sync_slots,
            "tables": {"waiting": None, "copying": len(copying), "catching_up": None,
                       "ready": None, "sent": sent},
            "tables_not_ready": tables, "sync_errors": None}


def _slot_key(name: str) -> tuple[str, str] | None:
    m = SYNC_SLOT.match(name)
    return (m.group(1) or m.group(3), m.group(2) or "") if m else None


def _job_key(job: Job) -> tuple[str, str] | None:
    m = re.match(rf"^{PUBLISHER} pg_(\d+)_sync_\*(?:_(\d+))?$", job.grouping or "")
    return (m.group(1), m.group(2) or "") if m else None
