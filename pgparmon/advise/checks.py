"""What would bite: the checks and warnings of `pgparmon advise` (the dump
target, connections, memory, WAL, disk space, compression) and the caps the
server puts on -j (docs/advise.md)."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from typing import Any

from ..readers.db import ServerFacts
from ..readers.files import nearest_existing
from ..redact import redact_text
from ..toc import client_program, program_major
from .. import units as fmt
from . import predict
from .inventory import Inventory, available_memory, setting_bytes, setting_int, setting_str
from .predict import Evidence
from .request import AdviseError, Request


@dataclass
class Caution:
    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": redact_text(self.message)}


# ---------------------------------------------------------- the target


def check_target(path: str) -> list[Caution]:
    """pg_dump -Fd creates the directory (or fills an empty one): its
    nearest existing ancestor must be a writable directory."""
    out: list[Caution] = []
    ap = os.path.abspath(path)
    if os.path.isfile(ap):
        raise AdviseError(f"--target {path} is a file: a parallel dump (-Fd -j) writes a "
                          "directory; give a new or empty directory")
    if os.path.isdir(ap):
        if not os.access(ap, os.W_OK | os.X_OK):
            raise AdviseError(f"--target {path} is not writable by this user: give a "
                              "directory you can write")
        try:
            if any(os.scandir(ap)):
                out.append(Caution("target_not_empty",
                                   f"{path} is not empty: pg_dump -Fd refuses an existing "
                                   "non-empty directory; give a new one or empty it"))
        except OSError:
            pass
    else:
        anc = nearest_existing(ap)
        if not os.path.isdir(anc) or not os.access(anc, os.W_OK | os.X_OK):
            raise AdviseError(f"--target {path}: cannot create it ({anc} is not a writable "
                              "directory): give a directory you can write")
    if re.search(r"\.(dump|sql|backup|bak|tar|gz|custom|pgdump)$", ap, re.IGNORECASE):
        out.append(Caution("directory_format",
                           f"{path} looks like a file name: a parallel dump needs the "
                           "directory format (-Fd); -Fc and -Fp cannot use -j"))
    return out


# ---------------------------------------------------------- the server


def server_facts(facts: ServerFacts, afacts: dict[str, Any], local: bool) -> dict[str, Any]:
    s = afacts.get("settings") or {}
    return {"version": facts.version, "database": facts.database, "local": local,
            "max_connections": setting_int(s, "max_connections"),
            "connections_in_use": afacts.get("connections_in_use"),
            "maintenance_work_mem_bytes": setting_bytes(s, "maintenance_work_mem"),
            "max_wal_size_bytes": setting_bytes(s, "max_wal_size"),
            "archive_mode": setting_str(s, "archive_mode"),
            "lock_table_entries": lt.size if (lt := lock_table(afacts)) else None,
            "locks_in_use": afacts.get("locks_in_use"),
            "lockable_tables": afacts.get("lockable_tables")}


def free_connections(afacts: dict[str, Any]) -> tuple[int, str] | None:
    s = afacts.get("settings") or {}
    maxc = setting_int(s, "max_connections")
    if maxc is None:
        return None
    reserved = (setting_int(s, "superuser_reserved_connections") or 0) + \
        (setting_int(s, "reserved_connections") or 0)
    # our own advise connection is counted in use; it is the monitor's slot
    in_use = max(0, int(afacts.get("connections_in_use") or 0) - 1)
    free = maxc - reserved - in_use
    return free, (f"max_connections {maxc}, {reserved} reserved, {in_use} in use")


def connections_needed(kind: str, j: int) -> int:
    # a dump's leader holds a connection besides its j workers; the monitor one more
    return j + (1 if kind == "dump" else 0) + 1


def connection_cap(kind: str, afacts: dict[str, Any]) -> dict[str, int]:
    """The largest j whose connections (need) fit in the free ones."""
    fc = free_connections(afacts)
    if fc is None:
        return {}
    free, _ = fc
    return {"connections": max(1, free - connections_needed(kind, 0))}


def connection_warnings(kind: str, afacts: dict[str, Any], choice: predict.Choice
                        ) -> list[Caution]:
    fc = free_connections(afacts)
    if fc is None:
        return []
    free, detail = fc
    want = max(choice.knee, choice.recommended)
    need = connections_needed(kind, want)
    if need <= free:
        return []
    lead = " (j workers + the leader + pgparmon)" if kind == "dump" else \
        " (j workers + pgparmon)"
    return [Caution("connections",
                    f"-j {want} needs {need} connections{lead} but only {free} are free "
                    f"({detail}): the advice is capped at -j {choice.recommended}; raise "
                    "max_connections or close idle sessions")]


@dataclass(frozen=True)
class LockTable:
    per: int  # max_locks_per_transaction
    slots: int  # server processes + prepared transactions
    used: int  # entries in use now

    @property
    def size(self) -> int:
        return self.per * self.slots

    @property
    def free(self) -> int:
        return self.size - self.used

    @property
    def how(self) -> str:
        return (f"max_locks_per_transaction {self.per} x {self.slots} server processes and "
                "prepared transactions")

    def setting_for(self, entries: int) -> int:
        """max_locks_per_transaction that holds `entries` more, with a quarter spare."""
        return max(self.per, -(-int(1.25 * (entries + self.used)) // max(1, self.slots)))


def lock_table(afacts: dict[str, Any]) -> LockTable | None:
    """The shared lock table: its size and the entries in use now.
    PostgreSQL sizes it max_locks_per_transaction x (server processes +
    prepared transactions); server processes are max_connections,
    the autovacuum workers and launcher, max_worker_processes and
    max_wal_senders. The table may borrow a little spare shared memory beyond
    that size: the estimate errs on the safe side."""
    s = afacts.get("settings") or {}
    per = setting_int(s, "max_locks_per_transaction")
    maxc = setting_int(s, "max_connections")
    if not per or not maxc:
        return None
    av = setting_int(s, "autovacuum_worker_slots") or setting_int(s, "autovacuum_max_workers")
    procs = (maxc + (av or 3) + 1 + (setting_int(s, "max_worker_processes") or 8)
             + (setting_int(s, "max_wal_senders") or 0))
    slots = procs + (setting_int(s, "max_prepared_transactions") or 0)
    return LockTable(per, slots, int(afacts.get("locks_in_use") or 0))


# The lock table borrows spare shared memory beyond its computed size:
# measured on PostgreSQL 15, a dump needing 14% more entries than the size
# worked, one needing 43% more failed. Beyond this factor it fails; between
# the size and it, it may.
LOCK_SLACK = 1.2


def locks_needed(kind: str, tables: int, j: int) -> int:
    """Lock table entries a dump takes: its leader locks every table for the
    whole run; with -j each worker also locks, until the end, every table it
    dumps (so the tables twice). A restore's items each commit on their own."""
    if kind != "dump":
        return 0
    return tables * (2 if j >= 2 else 1)


def lock_cap(kind: str, afacts: dict[str, Any]) -> dict[str, int]:
    """-j 1 when the tables cannot be locked twice (a parallel dump would die
    with "out of shared memory")."""
    lt = lock_table(afacts)
    tables = int(afacts.get("lockable_tables") or 0)
    if lt is None or kind != "dump" or not tables:
        return {}
    if locks_needed(kind, tables, 2) > LOCK_SLACK * lt.free:
        return {"lock table": 1}
    return {}


def lock_warnings(kind: str, afacts: dict[str, Any], choice: predict.Choice) -> list[Caution]:
    lt = lock_table(afacts)
    tables = int(afacts.get("lockable_tables") or 0)
    if lt is None or kind != "dump" or not tables:
        return []
    size, used, how, free = lt.size, lt.used, lt.how, lt.free
    j = choice.recommended
    need = locks_needed(kind, tables, j)
    want = max(choice.knee, choice.fastest, 2)
    fix = lt.setting_for(locks_needed(kind, tables, want))
    if locks_needed(kind, tables, 1) > LOCK_SLACK * free:
        return [Caution("lock_table",
                        f"pg_dump locks each of the {tables} tables in one transaction: "
                        f"{tables} lock entries, but the shared lock table holds about {size} "
                        f"({how}) and {used} are in use: the dump would fail with \"out of "
                        f"shared memory\" even at -j 1; set max_locks_per_transaction = {fix} "
                        "(a restart), or dump fewer tables at a time (-n / -t)")]
    if locks_needed(kind, tables, 2) > LOCK_SLACK * free:  # any parallel dump: capped, or
        return [Caution("lock_table",  # the knee was -j 1 anyway
                        f"pg_dump -j {want} locks each of the {tables} tables twice (the "
                        f"leader holds them all, each worker the ones it dumps): "
                        f"{locks_needed(kind, tables, want)} lock entries, but the shared lock "
                        f"table holds about {size} ({how}) and {used} are in use: -j {want} "
                        "would fail with \"out of shared memory\", so the advice is -j 1; "
                        f"for a parallel dump set max_locks_per_transaction = {fix} (a restart)")]
    if need > free:
        return [Caution("lock_table",
                        f"-j {j} takes {need} lock entries, more than the shared lock table's "
                        f"{free} free ones ({how}; {used} in use): it borrows spare shared "
                        "memory and may hold them, or the dump may fail with \"out of shared "
                        f"memory\"; max_locks_per_transaction = {fix} makes it safe")]
    if need > 0.8 * free:
        return [Caution("lock_table",
                        f"-j {j} takes {need} of the shared lock table's {free} free entries "
                        f"({how}; {used} in use): other sessions' locks during the dump could "
                        f"make it fail; max_locks_per_transaction = {fix} leaves room")]
    return []


def checkpoint_warnings(afacts: dict[str, Any]) -> list[Caution]:
    """Checkpoints mostly requested, not timed: the server's usual write load
    already fills max_wal_size between checkpoints, and a restore writes
    faster than that (a checkpoint flushes everything dirty: the load
    stalls behind it, and the first write to each page after it is a full
    page image in the WAL)."""
    cp = afacts.get("checkpoints") or {}
    req, timed = int(cp.get("requested") or 0), int(cp.get("timed") or 0)
    if req < 3 or req <= timed:
        return []
    s = afacts.get("settings") or {}
    wal = setting_bytes(s, "max_wal_size")
    since = f" since {str(cp['since'])[:16]}" if cp.get("since") else ""
    now = f" ({fmt.size(wal)})" if wal else ""
    bigger = f" (to {fmt.size(4 * wal)} or more)" if wal else ""
    return [Caution("checkpoints",
                    f"{req} of the server's {req + timed} checkpoints{since} were requested "
                    f"(WAL reached max_wal_size{now}, or a CHECKPOINT command), not timed: "
                    "checkpoints already come too often, and a restore writes faster; raise "
                    f"max_wal_size for the restore{bigger}")]


def restore_warnings(inv: Inventory | None, settings: dict[str, Any], choice: predict.Choice,
                     local: bool) -> list[Caution]:
    out: list[Caution] = []
    if inv is not None and inv.archive_format == "plain":
        out.append(Caution("restore_format", "a plain SQL dump restores with psql, one "
                                             "session: pg_restore -j needs a custom (-Fc) or "
                                             "directory (-Fd) archive; dump with -Fd -j next "
                                             "time"))
    elif inv is not None and inv.archive_format == "tar":
        out.append(Caution("restore_format", "pg_restore -j cannot read a tar archive in "
                                             "parallel: it needs -Fc or -Fd"))
    mwm = setting_bytes(settings, "maintenance_work_mem")
    if mwm and local:
        free = available_memory()
        j = max(choice.knee, choice.recommended)
        if j * mwm > 0.5 * free:
            out.append(Caution("memory",
                               f"-j {j} index builds may use {j} x maintenance_work_mem = "
                               f"{fmt.size(j * mwm)}, more than half of the "
                               f"{fmt.size(free)} free memory: the advice is capped "
                               f"at -j {choice.recommended}; lower maintenance_work_mem for "
                               "the restore or add memory"))
    wal = setting_bytes(settings, "max_wal_size")
    if wal and inv is not None and inv.data_bytes > wal:
        out.append(Caution("max_wal_size",
                           f"the restore writes about {fmt.size(inv.data_bytes)} of "
                           f"WAL and max_wal_size is {fmt.size(wal)}: checkpoints "
                           "will interrupt the load; raise max_wal_size for the restore"))
    if (setting_str(settings, "archive_mode") or "off") not in ("off", ""):
        out.append(Caution("wal_archiving", "WAL archiving is on: every loaded byte is "
                                            "archived too; turn it off for a large restore "
                                            "(PostgreSQL docs, Populating a Database)"))
    return out


# ------------------------------------------------------------- the run


def space_warning(req: Request, inv: Inventory, probe_json: dict[str, Any] | None
                  ) -> list[Caution]:
    assert req.target_dir
    ratio = None
    how = f"{req.compression.spec}, typical ratio"
    if probe_json and probe_json.get("ratio"):
        ratio = float(probe_json["ratio"]) * 1.1
        how = "ratio measured by the probe"
    if ratio is None:
        ratio = req.compression.ratio_guess()
    est = inv.data_bytes * ratio
    try:
        free = float(shutil.disk_usage(nearest_existing(req.target_dir)).free)
    except OSError:
        return []
    if free >= est:
        return []
    return [Caution("disk_space", f"the dump needs about {fmt.size(est)} ({how}) "
                                  f"but {req.target_dir} has {fmt.size(free)} free: "
                                  "free space or choose another target")]


def client_major(name: str) -> int | None:
    b = client_program(name)
    return program_major(b) if b else None


def compression_warning(req: Request, ev: Evidence, choice: predict.Choice) -> list[Caution]:
    if req.kind != "dump" or req.compression.method != "gzip":
        return []
    if (req.compression.level or 6) <= 1:
        return []
    per_stream = ev.per_stream_limit or ""
    if "compression" not in per_stream and "compression" not in ev.limit:
        return []
    major = client_major("pg_dump")
    alt = ("--compress=lz4 (or zstd)" if major is not None and major >= 16
           else "-Z 1 (pg_dump 16+ also offers --compress=lz4 or zstd)")
    return [Caution("compression_cpu",
                    f"compression is the limit: each pg_dump worker spends its time in "
                    f"gzip; {alt} moves several times more data per core, at a larger dump")]
