"""The warnings one job's samples carry, and what they count between
samples: the free space's trend, the checkpoints its WAL forces, the
archiver and slots of a physical backup. The checks themselves are in
warnings.py; this says which apply to the job, and which are also noted
(said once, kept in the sample's notes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..jobs.progress import progress_of
from ..jobs.recognise import recognise_of
from .warnings import (
    BackupWal,
    Checkpoints,
    FreeSpace,
    JobWarning,
    early_foreign_keys,
    exclusive_waiters,
)

if TYPE_CHECKING:
    from ..snapshot import Snapshot
    from .progress import Tracker

# warnings whose figures change every sample (or that are noted once
# apart, the first time): not copied into the notes
UNNOTED = ("disk-full-soon", "checkpoints", "archive-failing", "slot-retains-wal",
           "fk-before-partitions")


class JobWarnings:
    """One job's warnings, sample by sample."""

    def __init__(self, note: Callable[[str], None]) -> None:
        self.note = note  # says a note once (Notes.say)
        self.free_space = FreeSpace()
        self.checkpoints = Checkpoints()
        self.early_fk_noted = False
        self.backup_wal = BackupWal()

    def running(self, tr: Tracker, snap: Snapshot, settings: dict[str, str],
                eta_s: float | None) -> list[JobWarning]:
        """The warnings of a sample of a job that still runs."""
        self.free_space.add(snap.ts, snap.free_bytes)
        out = self.free_space.check(snap.free_bytes, eta_s)
        if snap.db is not None and not snap.db.error and progress_of(tr).fails_on_lock_queue:
            members = {b.pid for b in tr.members(snap)}
            pending = {i.relation for i in tr.items.values() if i.state != "done" and i.relation}
            out += exclusive_waiters(snap.db.backends, members, pending)
        if snap.db is not None and progress_of(tr).data_flow == "in":
            self.checkpoints.add(snap.ts, snap.db.checkpoints)
            ck = self.checkpoints.check(settings)
            if ck and not self.checkpoints.noted:
                self.checkpoints.noted = True
                self.note(ck[0].message)  # the first time; the warning keeps counting
            out += ck
        if progress_of(tr).warns_early_foreign_keys:
            early = early_foreign_keys(tr.items, tr.keys_of("fk"))
            if early and not self.early_fk_noted:
                self.early_fk_noted = True
                self.note(early[0].message)  # once: the warning lasts while loads wait
            out += early
        if snap.db is not None and not snap.db.error and recognise_of(tr).whole_cluster:
            out += self.backup_wal.check(snap.db.archiver, snap.db.slots)
        for w in out:
            if w.code not in UNNOTED:
                self.note(w.message)
        return out

    def ended(self, snap: Snapshot) -> list[JobWarning]:
        """A job that died on a full target: said on its last sample too (a
        fast job can fill the disk between two samples)."""
        warns = [w for w in self.free_space.check(snap.free_bytes, None)
                 if w.code == "disk-full"]
        for jw in warns:
            self.note(jw.message)
        return warns
