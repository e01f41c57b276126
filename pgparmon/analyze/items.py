"""A job's work items and the sessions that work on them, as the Tracker
follows them (drivers build and advance them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .rates import WindowRate
from .schedule import WorkItem


@dataclass(slots=True)
class Item:
    key: str
    kind: str  # an item kind's name (pgparmon.item_kinds: "data", "index"... and the drivers')
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
    # tables it locks that the tool's scheduler does not see (WorkItem.holds)
    holds: frozenset[str] = frozenset()
    # the tables its archive entry depends on (WorkItem.tables)
    tables: frozenset[str] = frozenset()
    seen_running: bool = False
    server_total: bool = False  # a COPY whose total the server knows (bytes_total)
    # a table's COPY seen before any plan (Tracker.add_data_item): the plan's
    # item for that table takes it over (Tracker.add)
    stand_in: bool = False

    def work_item(self, work: float, deps: frozenset[str] | None = None) -> WorkItem:
        """The item as the scheduler takes it, with `work` left and `deps`
        (its own when None)."""
        return WorkItem(key=self.key, work=work, size=self.size, table=self.relation,
                        exclusive=self.exclusive, holds=self.holds, tables=self.tables,
                        deps=self.deps if deps is None else deps, label=self.name)

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
