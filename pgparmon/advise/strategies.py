"""One strategy per kind of advice (a dump, a restore, a COPY load, a
subscription's initial sync): what `advise` asks by kind, answered once, by
the strategy chosen from the request (`strategy_for`).

A dump's and a restore's advice run the same steps (advice.py): each
strategy says what it reads before the server (the target's checks, the
archive's inventory), what it reads from the server, how its probe runs,
which ceilings and warnings apply to it and how its command line reads. A
COPY load's advice has steps of its own (copyadvice.py), and so has a
subscription's initial sync (subscription.py); their strategies run them.
The kinds' facts as data are in kinds.py; with this module they are the
only places in advise/ that tell one kind from another.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from ..analyze.schedule import Helpers
from ..connect import ConnectError
from ..jobs.pg_restore import section_steps
from ..jobs.restore_list import id_pattern
from ..readers.db import ServerFacts
from ..redact import redact_text
from .. import units as fmt
from . import predict
from .build_workers import BuildWorkers
from .checks import (
    Caution,
    check_target,
    checkpoint_warnings,
    client_major,
    restore_warnings,
    space_warning,
)
from .copyadvice import advise_copy
from .document import Advice, conn_args
from .inventory import (
    Inventory,
    InventoryError,
    available_memory,
    dump_inventory,
    restore_inventory,
    setting_bytes,
)
from .kinds import COPY, DUMP, RESTORE, SUBSCRIPTION, Kind
from .large_objects import DATA_DESCS as LO_DATA_DESCS
from .large_objects import DUMP_BYTE_FACTOR, DUMP_OBJECT_BYTES, dump_batches
from .large_objects import RESTORE_PRE_DATA_S, metadata_listing
from .large_objects import work_items as lo_work_items
from .predict import Evidence
from .probe import ProbeResult, ProbeTable, run_probe, run_restore_probe
from .probe.loggedtop import logged_top_need, unmeasured
from .probe.plan import stream_plan
from .request import AdviseError, Request
from .snapshots import check_snapshots, verdict
from .subscription import advise_subscription

# A restore probe loads whole files up to its range size: with no data file
# of at least this many heap bytes, each file's fixed cost in the probe (one
# decompressor process and one \copy, ~2 ms) outweighs its data (1 MB loads
# in ~10 ms), and what it measures is not a data rate.
SMALL_FILE_HEAP = 1e6
# TOC entries a restore's leader runs itself, one after another (pre-data):
# everything but the data, the post-data builds and what comes with them
NOT_PRE_DATA = {"TABLE DATA", "INDEX", "CONSTRAINT", "FK CONSTRAINT", "TRIGGER", "RULE",
                "POLICY", "INDEX ATTACH", "STATISTICS", "SEQUENCE SET", "BLOBS", "BLOB",
                "LARGE OBJECT", "ACL", "COMMENT", "MATERIALIZED VIEW DATA"}


@dataclass
class Situation:
    """What a dump's or restore's advice has gathered so far: the request,
    the inventory, the server's facts, and the warnings and notes to say."""

    req: Request
    inv: Inventory | None = None
    facts: ServerFacts | None = None
    afacts: dict[str, Any] = field(default_factory=dict)
    local: bool = False
    warnings: list[Caution] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def settings(self) -> dict[str, Any]:
        return self.afacts.get("settings") or {}


Shared = Callable[[Request, "ArchiveStrategy"], Advice]


class ArchiveStrategy:
    """The questions the shared steps (advice.py) ask a dump or a restore;
    the defaults answer "nothing of that kind"."""

    kind: Kind
    # who runs the serial per-object phase (the serial_phase warning)
    serial_who: str = ""

    def advise(self, req: Request, shared: Shared) -> Advice:
        return shared(req, self)

    def before_server(self, s: Situation) -> None:
        """What can be read before connecting (into s)."""

    def refused(self, req: Request, exc: ConnectError) -> ConnectError:
        """The error to raise when the server refuses the connection."""
        return exc

    def read_server(self, s: Situation, conn: psycopg.Connection[Any]) -> None:
        """What is read from the server besides its facts (into s)."""

    def static_evidence(self, cores: int, req: Request, local: bool) -> Evidence:
        return predict.static_evidence(self.kind.name, cores, req.compression, local)

    # ---- the probe

    def probe_wal_steps(self, streams: int) -> int:
        """How many WAL steps the probe adds to its stream steps."""
        return 0

    def probe_extra_s(self, streams: int) -> float:
        """Seconds the probe of up to `streams` streams adds to its steps
        beside the WAL steps."""
        return 0.0

    def probe_refusal(self, inv: Inventory) -> Caution | None:
        """Why a probe would not measure a data rate here (then none runs)."""
        return None

    def run_probe(self, s: Situation, budget: float, streams: int) -> ProbeResult | None:
        """The probe's result; None (with a note) when there is nothing to probe."""
        raise NotImplementedError

    def with_probe_builds(self, s: Situation, ev: Evidence,
                          probe_json: dict[str, Any] | None) -> None:
        """The inventory re-costed from what the probe measured (into s)."""

    # ---- predictions, caps and warnings

    def object_cost(self, s: Situation) -> predict.ObjectCost | None:
        return None

    def caps(self, s: Situation) -> dict[str, int]:
        """The ceilings on -j that this kind's inventory and host set."""
        return {}

    def session_cap(self, s: Situation, try_j: int) -> dict[str, int]:
        """Ceilings found by trying the sessions the tool will hold at try_j
        jobs (warnings into s)."""
        return {}

    def in_sections(self, s: Situation, rec: int) -> bool:
        """The command runs in sections (a restore's pre-data apart)."""
        return False

    def steps(self, s: Situation) -> predict.StepsFn | None:
        """The items as the commands at -j run them (None: all in one)."""
        return None

    def helpers(self, s: Situation, cores: int) -> Helpers | None:
        """Processes the server adds to some items when they start (a
        restore's parallel index builds), None when none."""
        return None

    def run_warnings(self, s: Situation, choice: predict.Choice, rec: int, sections: bool,
                     probe_json: dict[str, Any] | None) -> list[Caution]:
        """What would bite in this kind's run at the choice."""
        return []

    def last_warnings(self, s: Situation) -> list[Caution]:
        return []

    def command(self, req: Request, j: int, sections: bool = False,
                s: Situation | None = None) -> str:
        raise NotImplementedError


class DumpStrategy(ArchiveStrategy):
    kind = DUMP
    serial_who = "the leader's catalog reads, locks and schema"

    def before_server(self, s: Situation) -> None:
        if s.req.target_dir:
            s.warnings += check_target(s.req.target_dir)

    def refused(self, req: Request, exc: ConnectError) -> ConnectError:
        if "pooler" in str(exc) and req.conn is not None:
            # what pg_dump -j would meet through the same pooler
            chk = check_snapshots(req.conn, 2)
            return ConnectError(f"{exc}; {verdict(chk)}")
        return exc

    def read_server(self, s: Situation, conn: psycopg.Connection[Any]) -> None:
        assert s.facts is not None
        s.inv = dump_inventory(conn, s.facts, s.local)
        batches, notes = dump_batches(s.afacts.get("large_objects"), s.facts.block_size,
                                      client_major(self.kind.tool))
        s.inv.items += lo_work_items(batches, DUMP_OBJECT_BYTES, DUMP_BYTE_FACTOR)
        s.notes += s.inv.notes + notes

    def run_probe(self, s: Situation, budget: float, streams: int) -> ProbeResult | None:
        req, inv = s.req, s.inv
        assert req.target_dir and req.conn is not None and inv is not None
        assert s.facts is not None
        tables = [ProbeTable(name=t.name, schema=t.schema, relname=t.relname,
                             relpages=t.relpages - t.toast_pages, toast_pages=t.toast_pages)
                  for t in inv.tables if t.relpages - t.toast_pages > 0]
        if not tables:
            s.notes.append("no table with pages to probe (run ANALYZE)")
            return None
        return run_probe(req.conn, tables, req.target_dir, budget_s=budget,
                         max_streams=streams, compression=req.compression.method,
                         level=req.compression.level, block_size=inv.block_size,
                         server_version_num=s.facts.version_num)

    def object_cost(self, s: Situation) -> predict.ObjectCost | None:
        """The leader's part, from the catalog's object counts."""
        if s.inv is None or not s.inv.items:
            return None
        objects = int(s.afacts.get("objects") or 0)
        return predict.object_cost(self.kind.name, objects, len(s.inv.items)) if objects \
            else None

    def caps(self, s: Situation) -> dict[str, int]:
        if s.inv is not None and s.inv.tables:
            return {"tables": max(1, len(s.inv.tables))}
        return {}

    def session_cap(self, s: Situation, try_j: int) -> dict[str, int]:
        """The sessions pg_dump -j will hold, tried the way it holds them
        (workers importing the leader's snapshot)."""
        if s.facts is None or s.req.conn is None or try_j < 2:
            return {}
        chk = check_snapshots(s.req.conn, try_j)
        if chk.ok:
            return {}
        s.warnings.append(Caution(
            "snapshot", verdict(chk) + ": connect pg_dump to the server itself (not "
            "through a pooler or proxy), or give it no more jobs than "
            f"{max(1, chk.max_jobs)}"))
        return {"snapshot": max(1, chk.max_jobs)}

    def run_warnings(self, s: Situation, choice: predict.Choice, rec: int, sections: bool,
                     probe_json: dict[str, Any] | None) -> list[Caution]:
        if s.req.target_dir and s.inv is not None:
            return space_warning(s.req, s.inv, probe_json)
        return []

    def last_warnings(self, s: Situation) -> list[Caution]:
        if s.inv is not None and not s.inv.items:
            return [Caution("empty", "the database has no user tables: there is nothing "
                                     "for -j to share")]
        return []

    def command(self, req: Request, j: int, sections: bool = False,
                s: Situation | None = None) -> str:
        comp = req.compression.dump_args(client_major(self.kind.tool))
        argv = [self.kind.tool, "-Fd", "-j", str(j), *comp, *conn_args(req), "-f",
                req.target_dir or "DIR", req.dbname_for_command or "DBNAME"]
        return redact_text(shlex.join(argv))


class RestoreStrategy(ArchiveStrategy):
    kind = RESTORE
    serial_who = "pg_restore's pre-data DDL, one statement after another"

    def before_server(self, s: Situation) -> None:
        if not s.req.archive:
            return
        try:
            s.inv = restore_inventory(s.req.archive)
        except InventoryError as exc:
            raise AdviseError(str(exc)) from None
        s.notes += s.inv.notes

    def probe_wal_steps(self, streams: int) -> int:
        return len(stream_plan(streams))

    def probe_extra_s(self, streams: int) -> float:
        return logged_top_need(streams)

    def probe_refusal(self, inv: Inventory) -> Caution | None:
        biggest = max((t.heap_bytes for t in inv.tables), default=0.0)
        if biggest >= SMALL_FILE_HEAP:
            return None
        return Caution(
            "probe_small_files",
            f"the archive's largest data file holds {fmt.size(biggest)}: a restore probe "
            "would time its own start-up per file (a decompressor and a \\copy each), not "
            "a data rate; pg_restore's cost per item is in the per-object model instead: "
            "advice from the other evidence")

    def run_probe(self, s: Situation, budget: float, streams: int) -> ProbeResult | None:
        assert s.req.archive and s.req.conn is not None and s.facts is not None
        return run_restore_probe(s.req.conn, s.req.archive, budget_s=budget,
                                 max_streams=streams, server_version_num=s.facts.version_num,
                                 max_wal_size=setting_bytes(s.settings, "max_wal_size"))

    def with_probe_builds(self, s: Situation, ev: Evidence,
                          probe_json: dict[str, Any] | None) -> None:
        """The probe timed an index build: builds in the streams' work units
        (seconds per byte x bytes per second of one stream)."""
        spb = (probe_json or {}).get("build_s_per_byte")
        if s.inv is None or ev.basis != "probe" or not spb:
            return
        factor = float(spb) * ev.throughput(1)
        on = ((probe_json or {}).get("build") or {}).get("table")
        s.inv = s.inv.with_index_factor(factor, on)
        per_row = " at its rows' width (builds follow rows)" if on and s.inv.rows.get(on) else ""
        key = s.inv.timed_key_cost(on) if on else 1.0
        keyed = (f"; its key costs {key:g}x an int key's a row, so the others are costed "
                 "by their own keys") if key != 1.0 else ""
        s.notes.append(f"index builds from the probe: {factor:.2f} x their table's load work"
                       + per_row + keyed)

    def object_cost(self, s: Situation) -> predict.ObjectCost | None:
        """The leader's part, from the archive's TOC (pre-data entries)."""
        if s.inv is None or not s.inv.items or s.inv.plan_inputs is None:
            return None
        toc = s.inv.plan_inputs[0]
        objects = sum(1 for t in toc if t.desc not in NOT_PRE_DATA)
        cost = predict.object_cost(self.kind.name, objects, len(s.inv.items))
        # the large objects' metadata, created one by one in the pre-data
        # (their data items hold the rest of their cost: inventory.py)
        meta = metadata_listing(toc, "metadata")
        if meta is None:
            return cost
        return dataclasses.replace(cost, extra_s=meta.count * RESTORE_PRE_DATA_S)

    def caps(self, s: Situation) -> dict[str, int]:
        """Each build may take maintenance_work_mem: half the free memory."""
        if s.facts is None or not s.local:
            return {}
        mwm = setting_bytes(s.settings, "maintenance_work_mem")
        return {"memory": max(1, int(0.5 * available_memory() // mwm))} if mwm else {}

    def in_sections(self, s: Situation, rec: int) -> bool:
        return bool(rec >= 2 and s.inv is not None and s.inv.early_fks)

    def steps(self, s: Situation) -> predict.StepsFn | None:
        """At -j 2 and more such an archive is restored in steps (the
        command says so): the data, the post-data but the early foreign
        keys, then those keys, each its own schedule (the pre-data is the
        serial part)."""
        if s.inv is None or not s.inv.early_fks or s.inv.plan_inputs is None:
            return None
        data_keys = frozenset(str(t.dump_id) for t in s.inv.plan_inputs[0]
                              if t.desc in ("TABLE DATA", *LO_DATA_DESCS))
        last = frozenset(str(i) for i in s.inv.early_fk_ids)
        return lambda j, items: section_steps(items, data_keys, last) if j >= 2 else [items]

    def helpers(self, s: Situation, cores: int) -> Helpers | None:
        """The target server's parallel workers for the btree builds
        (build_workers.py), on this host's cores: only when the server runs
        here (another host's cores are not known; its builds are then
        counted serial, and a note says so)."""
        if s.inv is None or s.facts is None:
            return None
        bw = BuildWorkers.of(s.settings, s.facts.version_num)
        builds = s.inv.parallel_builds()
        if bw is None or not builds:
            return None
        h = bw.helpers(builds, cores)
        if h is None:
            return None
        if not s.local:
            s.notes.append("index builds counted serial: the server may give them parallel "
                           "workers, but it is not on this host and its cores are not known")
            return None
        most = max(h.wants.values())
        gain = sum(1 for k in h.wants if builds[k][1] > 1.0)
        s.notes.append(f"index builds: {len(h.wants)} may take up to {most} parallel worker(s) "
                       f"each ({bw.describe()}) where the schedule leaves cores free; "
                       f"{gain} of them sort keys that cost more than an int's and gain from "
                       "them (an int key's build is its scan and its write: no gain)")
        return h

    def run_warnings(self, s: Situation, choice: predict.Choice, rec: int, sections: bool,
                     probe_json: dict[str, Any] | None) -> list[Caution]:
        out = restore_warnings(s.inv, s.settings, choice, s.local)
        out += checkpoint_warnings(s.afacts)
        if sections:
            assert s.inv is not None
            out.append(fk_before_partitions(s.inv.early_fks, rec))
        why = unmeasured(probe_json, max(rec, choice.fastest))
        if why is not None:
            out.append(Caution("wal", why))
        return out

    def command(self, req: Request, j: int, sections: bool = False,
                s: Situation | None = None) -> str:
        """sections: in four steps, each its own pg_restore, joined with &&:
        pre-data alone, then with -j the data, the post-data but the early
        foreign keys, and those keys (`sectioned_restore`)."""
        tool, conn_args_ = self.kind.tool, conn_args(req)
        db = req.dbname_for_command or "DBNAME"
        if sections and s is not None and s.inv is not None:
            return redact_text(sectioned_restore(tool, conn_args_, db, req.archive or "ARCHIVE",
                                                 j, s.inv.early_fk_ids))
        if req.archive and os.path.isfile(req.archive) and j == 1:
            argv = [tool, *conn_args_, "-d", db, req.archive]
        else:
            argv = [tool, "-j", str(j), *conn_args_, "-d", db, req.archive or "ARCHIVE"]
        return redact_text(shlex.join(argv))


def sectioned_restore(tool: str, conn: list[str], db: str, arch: str, j: int,
                      last: list[int]) -> str:
    """The restore in four steps, for any POSIX shell: two list files in a
    private temporary folder (`pg_restore -l` split on the dump ids `last`
    by restore_list.id_pattern), then pre-data; the data with -j; the
    post-data but `last` with -j (`-L`); `last` with -j (`-L`), after every
    index and key they could use; the folder removed at the end."""
    q = shlex.quote
    lst = f"{q(tool)} -l {q(arch)}"
    pat = q(id_pattern(last))
    target = [*conn, "-d", db, arch]
    steps = [
        'L="$(mktemp -d)"',
        f'{lst} | grep -Ev {pat} > "$L/rest.list"',
        f'{lst} | grep -E {pat} > "$L/fk.list"',
        shlex.join([tool, "--section=pre-data", *target]),
        shlex.join([tool, "-j", str(j), "--section=data", *target]),
        shlex.join([tool, "-j", str(j), "--section=post-data", "-L"]) + ' "$L/rest.list" '
        + shlex.join(target),
        shlex.join([tool, "-j", str(j), "-L"]) + ' "$L/fk.list" ' + shlex.join(target),
        'rm -r "$L"',
    ]
    return " && ".join(steps)


def fk_before_partitions(fks: list[str], rec: int) -> Caution:
    more = f" (and {len(fks) - 2} more)" if len(fks) > 2 else ""
    return Caution(
        "fk_before_partitions",
        f"pg_restore -j {rec} can add the foreign "
        f"{'keys' if len(fks) > 1 else 'key'} {' and '.join(fks[:2])}{more} "
        "before the partitions' data is loaded (the archive makes "
        f"{'each' if len(fks) > 1 else 'it'} wait only for the partitioned table, which "
        "holds no rows): every row loaded after it is then checked one at a time "
        "(measured: -j 2 slower than -j 1). Restore in four steps (the command "
        "below): pre-data, then with -j the data, the post-data but these keys, and the "
        "keys, each checked after every index it can use (measured on 2 cores against "
        "three steps: -j 2 1.02-1.20x faster, -j 3 and 4 0.91-1.01x): the predictions are "
        "for that")


class CopyStrategy:
    """A COPY load: its own steps (copyadvice.py)."""

    kind = COPY

    def advise(self, req: Request, shared: Shared) -> Advice:
        return advise_copy(req)


class SubscriptionStrategy:
    """A subscription's initial sync: its own steps (subscription.py)."""

    kind = SUBSCRIPTION

    def advise(self, req: Request, shared: Shared) -> Advice:
        return advise_subscription(req)


Strategy = ArchiveStrategy | CopyStrategy | SubscriptionStrategy
STRATEGIES: dict[str, Strategy] = {
    s.kind.name: s for s in (DumpStrategy(), RestoreStrategy(), CopyStrategy(),
                             SubscriptionStrategy())}


def strategy_for(kind: str) -> Strategy:
    try:
        return STRATEGIES[kind]
    except KeyError:
        raise AdviseError(f"no advice for {kind!r}: {', '.join(STRATEGIES)}") from None
