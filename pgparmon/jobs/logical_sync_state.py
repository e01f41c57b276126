"""What the logical sync driver keeps about one subscription's sync (its
Driver.new_state): the Tracker holds it without reading it; logical_sync.py
reads and writes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SyncState:
    # the plan: the publisher's tables (heap bytes, reltuples), its walsender
    # and slot limits and their use, and where they were read
    publisher: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    publisher_limits: dict[str, Any] | None = None
    plan_source: str | None = None
    states: dict[str, str] = field(default_factory=dict)  # item key -> srsubstate
    blocked: bool = False  # tables not ready and no sync worker copies
    sync_workers: int | None = None  # max_sync_workers_per_subscription (the subscriber)
    max_walsenders: int = 0  # the most sync walsenders seen at once (the publisher)
    sync_slots: int | None = None  # the sync slots now (the publisher, 14+; None: unknown)
    sync_errors: int | None = None  # sync_error_count (15+)
    errors_seen: int | None = None  # ... at the sample before
    failures: dict[str, int] = field(default_factory=dict)  # table -> its syncs that failed
    apply_workers: list[int] = field(default_factory=list)  # the apply worker's pid(s)
    apply_restarts: int = 0
    table_workers: dict[str, int] = field(default_factory=dict)  # table -> its sync worker
