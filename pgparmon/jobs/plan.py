"""The plan protocol: what a job's work list is read from (live, once, and
recorded) and how it is built.

Its defaults describe no plan: a driver plans when it has a `plan` of its
own (`plans_work` follows from that unless the driver declares it), and
reads nothing. The Monitor and the ETA reach a tracked job's driver
through this class (`plan_of(tracker)`), the live source through
`registry.plan_for(kind)`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..ddl import PostDataTarget
from ..toc import TocItem

if TYPE_CHECKING:
    from ..analyze.progress import Tracker
    from ..readers.db import ServerFacts
    from ..snapshot import Snapshot
    from .end import EndContext


@dataclass(frozen=True)
class PlanInputs:
    """What a job's work list is built from, as read once from the live
    system and kept in recordings (the "plan" event) so that a replay plans
    the same work. Each driver fills the fields it needs."""

    toc: list[dict[str, Any]] | None = None  # archive TOC entries (toc.TocItem as dicts)
    tables: list[list[Any]] | None = None  # the catalog's tables (sql/tables_*.sql rows)
    file_sizes: dict[str, float] | None = None  # never-vacuumed tables' on-disk bytes
    targets: dict[str, Any] | None = None  # post-data items' tables (ddl.PostDataTarget)
    archive_files: dict[str, Any] | None = None  # dump id -> (path, bytes) of data files
    # a copy's source database: its name and its post-data objects
    # (sql/postdata_*.sql: indexes with the constraints they back, foreign keys)
    source: str | None = None
    postdata: dict[str, Any] | None = None
    error: str | None = None  # why there is no plan (said once to the user)
    note: str | None = None  # what the plan inferred (said once; the plan stands)
    partitions: dict[str, str] | None = None  # a restore's partitions: child -> parent
    # where the trees of file_sizes' relative paths really are (pg_probackup:
    # the data directory "" and each tablespace "pg_tblspc/OID")
    locations: dict[str, str] | None = None
    # file_sizes' paths in the order the tool works through them, as the tool
    # wrote it (pg_probackup's backup_content.control)
    file_order: list[str] | None = None
    # what else a driver read with its plan, as JSON values (a logical
    # sync's publisher limits: its slot and walsender settings and use)
    extra: dict[str, Any] | None = None

    _KEYS: ClassVar[tuple[str, ...]] = ("toc", "tables", "file_sizes", "targets",
                                        "archive_files", "source", "postdata", "error",
                                        "partitions", "locations", "file_order", "extra",
                                        "note")

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._KEYS if getattr(self, k) is not None} \
            or {"error": None}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> PlanInputs:
        return PlanInputs(**{k: d.get(k) for k in PlanInputs._KEYS})

    def toc_items(self) -> list[TocItem]:
        names = {f.name for f in dataclasses.fields(TocItem)}
        return [TocItem(**{k: v for k, v in r.items() if k in names}) for r in self.toc or ()]

    def post_targets(self) -> dict[int, PostDataTarget]:
        names = {f.name for f in dataclasses.fields(PostDataTarget)}
        out = {}
        for k, v in (self.targets or {}).items():
            kw = {kk: vv for kk, vv in v.items() if kk in names}
            kw["dependencies"] = tuple(kw.get("dependencies") or ())
            if kw.get("key") is not None:
                kw["key"] = tuple(kw["key"])
            out[int(k)] = PostDataTarget(**kw)
        return out



class PlanReader(Protocol):
    """What a driver may read while planning (a live source)."""

    facts: ServerFacts
    target_dir: str | None
    local: bool
    snapshots_taken: int

    def query_json(self, name: str) -> Any: ...

    def query_json_on(self, database: str, name: str) -> Any:
        """A catalog query on another database of the same server."""
        ...

    def source_catalog(self, database: str | None) -> tuple[Any, Any, str | None]:
        """A copy's source: (tables, post-data objects, its data directory
        when that server runs on this host) from another database of this
        server, or (None) from the server given with --source."""
        ...

    def client_binary(self, name: str) -> str | None: ...


class Plan:
    """How a tool kind's work list is made. A driver that plans overrides
    `plan` (and `read_plan`, what it reads); one that says nothing of
    `plans_work` plans exactly when it does."""

    # the work list comes from a plan (False: items appear as sessions work);
    # not declared: whether the driver has a `plan` of its own
    plans_work: ClassVar[bool] = False
    # without its plan the job has no ETA ("no work list yet"); False: a plan
    # is made only for some jobs of the kind (a copy between databases).
    # Read only where the driver plans at all.
    needs_plan: ClassVar[bool] = True
    # seconds per byte of table data an index build takes until one of this
    # run's builds is timed (None: a build costs index_factor of its table's
    # load, at the streams' rate: a restore's builds and loads share a pace)
    build_spb_default: ClassVar[float | None] = None

    _plans_declared: ClassVar[bool] = False

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "plans_work" in cls.__dict__:  # said in its class body (or a base's)
            cls._plans_declared = True
        elif not cls._plans_declared:
            cls.plans_work = cls.plan is not Plan.plan

    def plan_request(self, tr: Tracker) -> dict[str, Any] | None:
        """What to read the plan from, as this job's sessions have shown it
        so far (a copy's source database); None: nothing to plan from yet
        (asked again next tick, nothing is read)."""
        return {}

    def read_plan(self, src: PlanReader, req: dict[str, Any]) -> PlanInputs | None:
        """Read what the work list is built from; None: not available yet."""
        return PlanInputs()

    def plan(self, tr: Tracker, inputs: PlanInputs) -> bool:
        """Build the work list into the tracker; False when the inputs cannot
        make one (the job is then followed from its sessions alone)."""
        return False

    def after_plan(self, tr: Tracker, ctx: EndContext, snap: Snapshot,
                   running: set[str]) -> None:
        """Once planned: settle what finished before the monitor attached
        (`running`: keys of items some session works on right now)."""


def plan_of(tr: Tracker) -> Plan:
    """A tracked job's driver, as the plan protocol."""
    return tr.driver
