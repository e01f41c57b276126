"""What a logical sync's sync workers need besides a worker slot, and the
setting that leaves them too few (jobs/logical_sync.py's `worker-slots`
verdict): on the publisher a walsender and a replication slot each
(max_wal_senders, max_replication_slots: read once with its table sizes,
sql/logical_publisher_*.sql), on the subscriber a replication origin each
(read with every sample, sql/logical_sync_*.sql).

The subscriber's replication origins are counted against
max_active_replication_origins from PostgreSQL 18 on, against
max_replication_slots before (the same setting as the subscriber's own
slots, but a table of its own): a sync worker that finds none free fails
("could not find free replication state slot for replication origin") and
starts over, its table waits."""

from __future__ import annotations

import re
from typing import Any

# the subscriber's origin limit: the 18+ name, and the name before 18
ORIGINS_18 = "max_active_replication_origins"
ORIGINS_BEFORE_18 = "max_replication_slots"


def publisher_short(limits: dict[str, Any] | None, sub: dict[str, Any],
                    wanted: int) -> str | None:
    """The publisher's setting that leaves fewer walsenders or slots than
    the `wanted` sync workers need (each needs one of each), as read with
    the plan (`limits`); None: enough, or not read. What this sync's own
    sync workers used then counts as free."""
    if not limits:
        return None
    mine = re.compile(rf"^pg_{int(sub['subid'])}_sync_\d+_\d+$")
    for setting, used in (("max_replication_slots", "slots"), ("max_wal_senders", "walsenders")):
        others = [n for n in limits.get(used) or () if not mine.match(n or "")]
        free = int(limits.get(setting) or 0) - len(others)
        if free < wanted:
            return (f"tables wait or fail for want of a {used[:-1]} on the publisher: its "
                    f"{setting} = {limits.get(setting)} with {len(others)} in use by others "
                    f"(the apply worker's among them) leaves {max(0, free)} for "
                    f"{wanted} sync worker(s) (as read at the sync's start): raise it on the "
                    "publisher (a restart)")
    return None


def origins_short(sub: dict[str, Any], wanted: int) -> str | None:
    """The subscriber's origin limit when the replication origins besides
    this sync's own (its apply worker's among them: sub["origins"]) leave
    fewer than the `wanted` sync workers need; None: enough, or not read
    (a server version's setting missing, a part without the count)."""
    settings = sub.get("settings") or {}
    name = ORIGINS_18 if ORIGINS_18 in settings else ORIGINS_BEFORE_18
    limit, held = settings.get(name), sub.get("origins")
    try:
        free = int(limit) - int(held)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if free >= wanted:
        return None
    counted = ("" if name == ORIGINS_18 else
               f" ({name} counts the subscriber's replication origins before PostgreSQL 18)")
    return (f"tables wait or fail for want of a replication origin on the subscriber: its "
            f"{name} = {limit}{counted} with {held} other origin(s) (the apply worker's among "
            f"them) leaves {max(0, free)} for {wanted} sync worker(s): raise it on the "
            "subscriber (a restart)")
