"""A COPY load: sessions of any client program running COPY ... FROM into
one table, grouped by database, user, application_name, client address and
target table. No plan: each session's COPY is an item of its own, with the
total the server knows (bytes_total, set for COPY FROM a file) or none."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analyze.items import Item
from ..snapshot import Backend, CopyProgress, IndexProgress, Snapshot
from .base import Driver, Job
from .statements import copy_target

if TYPE_CHECKING:
    from ..analyze.progress import Tracker


class CopyLoad(Driver):
    kind = "copy"
    plans_work = False

    # ---- recognise ---------------------------------------------------------

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        ct = copy_target(b.query)
        if ct is None or ct[0] != "from" or b.state != "active":
            return None
        return (self.kind, b.datname, b.usename, b.application_name, b.client_addr, ct[1])

    def from_sessions(self, members: list[Backend]) -> Job:
        ct = copy_target(members[0].query)
        return Job(kind=self.kind, database=members[0].datname, usename=members[0].usename,
                   client_addr=members[0].client_addr, relation=ct[1] if ct else None,
                   jobs=len(members), pid_hint=frozenset(b.pid for b in members))

    def session_matches(self, job: Job, b: Backend) -> bool:
        ct = copy_target(b.query)
        return (ct is not None and ct[0] == "from" and b.usename == job.usename
                and b.client_addr == job.client_addr and _same_rel(ct[1], job.relation))

    # ---- observe -----------------------------------------------------------

    def copy_item(self, tr: Tracker, b: Backend, rel: str | None) -> str | None:
        key = f"copy:{b.pid}"
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

    def fraction(self, tr: Tracker) -> float | None:
        items = [i for i in tr.items.values() if i.kind == "copy"]
        if items and all(i.work > 1 and i.work > i.bytes_done for i in items):
            total = sum(i.work for i in items)
            return min(1.0, sum(i.done for i in items) / total) if total else None
        return None

    def has_total(self, tr: Tracker) -> bool:
        return any(it.work > it.bytes_done for it in tr.items.values())


def _same_rel(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return a == b
    return a == b or a.split(".")[-1] == b.split(".")[-1]
