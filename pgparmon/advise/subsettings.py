"""What a subscription's initial sync needs of both servers (docs/advise.md,
"A subscription's initial sync"): each sync worker is a logical replication
worker and a background worker on the subscriber (with a replication origin
there), and holds a walsender and a slot on the publisher during its COPY;
the subscription's apply worker holds one of each too. `limits` reads the
settings and what other work holds now into Limits; a Limit says how many
sync workers it leaves room for and what to set to allow more. The
recommendation is capped by the smallest room (never a count the servers
cannot start), and `changes` words the settings to change as commands.

Pure functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# PostgreSQL 18 counts the subscriber's replication origins against
# max_active_replication_origins; before, against max_replication_slots.
ORIGINS_SETTING_VERSION = 180000


@dataclass(frozen=True)
class Limit:
    """One setting that bounds the sync workers: `value` now, `in_use` by
    other work, `fixed` held by this subscription besides its sync workers
    (its apply worker, its slot); each sync worker takes one more."""

    setting: str
    side: str  # subscriber | publisher
    value: int
    in_use: int
    fixed: int
    what: str  # what one sync worker takes of it

    @property
    def room(self) -> int:
        """Sync workers this setting leaves room for (0 or less: none)."""
        return self.value - self.in_use - self.fixed

    def needed(self, workers: int) -> int:
        """The value that starts `workers` sync workers beside the rest."""
        return self.in_use + self.fixed + workers

    def label(self) -> str:
        return (f"{self.setting} on the {self.side} ({self.value}: {self.in_use} held by "
                f"other work, {self.fixed} by the subscription itself)")


@dataclass(frozen=True)
class Change:
    """A setting to change, on which side, and whether it needs a restart
    (else a reload); `required`: the recommendation needs it (else it only
    allows more sync workers)."""

    side: str
    setting: str
    now: str | None
    value: str
    restart: bool
    required: bool
    why: str
    for_jobs: int  # the sync workers it allows


    @property
    def command(self) -> str:
        # ALTER SYSTEM quotes a string value; numbers go as they are
        val = self.value if self.value.isdigit() else f"'{self.value}'"
        step = "restart the server" if self.restart else "SELECT pg_reload_conf();"
        return f"ALTER SYSTEM SET {self.setting} = {val}; -- then {step}"

    def to_json(self) -> dict[str, Any]:
        return {"side": self.side, "setting": self.setting, "now": self.now,
                "set_to": self.value, "restart": self.restart, "required": self.required,
                "command": self.command, "why": self.why, "for_jobs": self.for_jobs}


# settings whose change needs a server restart (the others a reload)
RESTART = {"max_worker_processes", "max_logical_replication_workers", "max_wal_senders",
           "max_replication_slots", "max_active_replication_origins", "wal_level"}


def _int(settings: dict[str, Any], name: str) -> int | None:
    v = settings.get(name)
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def limits(sub: dict[str, Any], pub: dict[str, Any] | None) -> list[Limit]:
    """The Limits of the subscriber (`sub`) and the publisher (`pub`, None
    when unknown), as read by subscription.py: settings (name -> value) and
    what other work holds (`others`: workers, bgworkers, walsenders,
    slots); a running subscription's own workers, walsenders and slots are
    not in `others` (its fixed part and its sync workers are counted apart)."""
    out: list[Limit] = []
    s, held = sub.get("settings") or {}, sub.get("others") or {}
    origins = ("max_active_replication_origins"
               if int(sub.get("version_num") or 0) >= ORIGINS_SETTING_VERSION
               else "max_replication_slots")
    for name, key, what in (
            ("max_logical_replication_workers", "workers", "a logical replication worker"),
            ("max_worker_processes", "bgworkers", "a background worker process"),
            (origins, "workers", "a replication origin")):
        v = _int(s, name)
        if v is not None:
            out.append(Limit(name, "subscriber", v, int(held.get(key) or 0), 1, what))
    if pub is not None:
        p, held = pub.get("settings") or {}, pub.get("others") or {}
        for name, key, what in (("max_wal_senders", "walsenders", "a walsender"),
                                ("max_replication_slots", "slots", "a replication slot")):
            v = _int(p, name)
            if v is not None:
                out.append(Limit(name, "publisher", v, int(held.get(key) or 0), 1, what))
    return out


def room(lims: list[Limit]) -> tuple[int, Limit | None]:
    """The sync workers every Limit leaves room for, and the Limit that
    sets it (None: none binds)."""
    if not lims:
        return 1 << 30, None
    tight = min(lims, key=lambda x: (x.room, x.side, x.setting))
    return tight.room, tight


def caps(lims: list[Limit]) -> dict[str, int]:
    """predict.choose's caps: each Limit by its wording, at least 1 (a
    Limit with no room makes the advice say the sync cannot start)."""
    return {lim.label(): max(1, lim.room) for lim in lims}


def changes(lims: list[Limit], rec: int, best: int, current_sync: int | None,
            pub_wal_level: str | None) -> list[Change]:
    """The settings to change: those `rec` sync workers need (required:
    wal_level on the publisher, a Limit with no room), those `best` would
    need (to allow more than the servers do now), and the subscriber's
    max_sync_workers_per_subscription itself (a reload)."""
    out: list[Change] = []
    if pub_wal_level is not None and pub_wal_level != "logical":
        out.append(Change("publisher", "wal_level", pub_wal_level, "logical", True, True,
                          "logical replication decodes the publisher's WAL", rec))
    for lim in lims:
        want = max(rec, best)
        if lim.needed(want) <= lim.value:
            continue
        out.append(Change(
            lim.side, lim.setting, str(lim.value), str(lim.needed(want)), lim.setting in RESTART,
            lim.needed(rec) > lim.value,
            f"{want} sync worker(s) take {lim.what} each, beside {lim.in_use} held by other "
            f"work and {lim.fixed} by the subscription's apply worker or slot", want))
    if current_sync != rec:
        out.append(Change("subscriber", "max_sync_workers_per_subscription",
                          None if current_sync is None else str(current_sync), str(rec), False,
                          True, "the sync workers the subscription runs at a time", rec))
    return out


def startable(lims: list[Limit]) -> bool:
    """Every Limit leaves room for one sync worker at least."""
    return all(lim.room >= 1 for lim in lims)
