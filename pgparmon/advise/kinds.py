"""The kinds of advice (a dump, a restore, a COPY load, a subscription's
initial sync) as data: what each
one is called, the job it learns from in recordings, and the facts about it
that the shared models ask (the connections and locks its leader holds, its
static per-stream model, its per-object costs, how its recordings measure
work, how the advice words its knob).

This module and `strategies.py` (the steps each kind runs) are the only
places in advise/ that name a kind; everything else asks the Kind it is
given. It imports nothing of advise/, so every module may read it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Typical per-core rates of the server's COPY (docs/advise.md, "Static
# facts"): COPY TO (a dump reads) and COPY FROM (a restore writes).
SERVER_COPY_OUT = 250e6
SERVER_COPY_IN = 80e6

# Per-object costs measured on this project's 2-core VM (PostgreSQL 15's
# pg_dump and pg_restore, fsync off, 250 to 2000 tables of one row with a
# serial primary key; docs/benchmarks.md, "Many small tables"):
# pg_dump -s of 2000 tables (8000 relations, constraints and functions)
# took 0.60 s, -Fd -j 1 1.28-1.35 s, -j 2 1.63-2.14 s and -j 4 2.51 s; 500
# tables 0.18 / 0.48 / 0.41 s. A restore's pre-data section took 0.4-0.7 ms
# per object; pg_restore of 2000 such tables (4000 items: data and primary
# keys) took 3.5 s at -j 1, 8.7 s at -j 2 and 9.9 s at -j 4: its leader hands
# out items one by one, and the cost per item at -j 2+ is about 1 ms more.
DUMP_OBJECT_S = 75e-6
DUMP_ITEM_S_1 = 0.34e-3
DUMP_ITEM_S_N = 0.55e-3
DUMP_ITEM_S_MORE = 0.1e-3
RESTORE_OBJECT_S = 0.5e-3
RESTORE_ITEM_S_1 = 0.2e-3
RESTORE_ITEM_S_N = 1.0e-3
RESTORE_ITEM_S_MORE = 0.15e-3


@dataclass(frozen=True)
class StaticModel:
    """One stream's rate with nothing measured: the server's COPY at
    `server_rate`; when `client_compresses`, one client process also
    compresses what it reads (the slower of the two sets the rate, and the
    stream costs the cores of both); else `cores_per_stream` cores."""

    server_rate: float
    per_stream: str  # what bounds one stream (the server's side)
    client_compresses: bool = False
    cores_per_stream: float = 1.0


@dataclass(frozen=True)
class ObjectCosts:
    """Seconds per object of the leader's serial phase, and per item handed
    out at -j 1, at -j 2, and more per worker beyond 2 (predict.ObjectCost)."""

    object_s: float
    item_s_1: float
    item_s_n: float
    item_s_more: float


@dataclass(frozen=True)
class HistoryMeasure:
    """How a recording of this kind's job measures work: `unit` (what X(k)
    counts); `by_progress`: the tracker's progress over its planned work
    (else the monitor's COPY rate); `archive_work`: that work is archive
    bytes, scaled to heap bytes."""

    unit: str
    by_progress: bool
    archive_work: bool = False


@dataclass(frozen=True)
class Kind:
    name: str  # the advice's `kind` (pgparmon.advice/1)
    tool: str  # the job kind its recordings name (jobs/)
    label: str  # what the advice calls the tool
    database_role: str  # the database -d names: "the one to ..."
    history: HistoryMeasure
    leader_connections: int = 0  # connections besides the j workers'
    locks_every_table: bool = False  # the leader locks every table for the run
    static: StaticModel | None = None
    object_costs: ObjectCosts | None = None
    writes_target: bool = False  # writes the target cluster's pages (checksums cost)
    jobs_heading: str = "-j"  # the column of job counts
    use_words: str = "use -j {n}"  # the headline's advice
    whole_items: bool = True  # items are scheduled whole (a lower bound is worth showing)


DUMP = Kind("dump", "pg_dump", "pg_dump", "dump", HistoryMeasure("heap bytes", True),
            leader_connections=1, locks_every_table=True,
            static=StaticModel(SERVER_COPY_OUT, "the server's COPY", client_compresses=True),
            object_costs=ObjectCosts(DUMP_OBJECT_S, DUMP_ITEM_S_1, DUMP_ITEM_S_N,
                                     DUMP_ITEM_S_MORE))
RESTORE = Kind("restore", "pg_restore", "pg_restore", "restore into",
               HistoryMeasure("heap bytes", True, archive_work=True),
               # the backend parses and writes WAL; pg_restore decompresses
               static=StaticModel(SERVER_COPY_IN, "the server's COPY FROM",
                                  cores_per_stream=1.1),
               object_costs=ObjectCosts(RESTORE_OBJECT_S, RESTORE_ITEM_S_1, RESTORE_ITEM_S_N,
                                        RESTORE_ITEM_S_MORE),
               writes_target=True)
COPY = Kind("copy", "copy", "COPY", "load into", HistoryMeasure("COPY bytes", False),
            writes_target=True, jobs_heading="streams",
            use_words="use {n} parallel stream(s)", whole_items=False)

# Logical replication's initial sync: tablesync workers on the subscriber,
# one whole table each (COPY TO on the publisher, COPY FROM here); the work
# is the publisher's heap bytes, the knob a setting of the subscriber.
SUBSCRIPTION = Kind("subscription", "logical_sync", "subscription sync", "subscribe in",
                    HistoryMeasure("heap bytes", True),
                    static=StaticModel(SERVER_COPY_IN, "the subscriber's COPY FROM (one sync "
                                                       "worker's CPU)"),
                    writes_target=True, jobs_heading="sync workers",
                    use_words="set max_sync_workers_per_subscription = {n}")

KINDS = {k.name: k for k in (DUMP, RESTORE, COPY, SUBSCRIPTION)}
BY_TOOL = {k.tool: k for k in KINDS.values()}


def kind_named(name: str) -> Kind:
    """The Kind of advice called `name` (a Request's, an Advice's kind)."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"no advice for {name!r}: {', '.join(KINDS)}") from None


def kind_of_tool(tool: str | None) -> Kind | None:
    """The Kind that learns from recordings of the job kind `tool`."""
    return BY_TOOL.get(tool or "")
