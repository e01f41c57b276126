"""The worker phases more than one backup tool's driver sets, defined once
(each driver lists those it sets in `Driver.phases`; the registry is
pgparmon.phases), and the item kind of their one item, the backup
(`Driver.item_kinds`; the registry is pgparmon.item_kinds)."""

from __future__ import annotations

from ..item_kinds import ItemKind
from ..phases import Phase

# a backup's (or a restore's) one item: the whole copy
BACKUP_ITEM = ItemKind("backup")

# before the copy: the backup's start (a checkpoint, pg_backup_start)
STARTING = Phase("starting", 120, busy=True, waits=True,
                 tui=("black on grey70", "black on white"), fill="#adb5bd")
# the data files' copy
BACKUP = Phase("backup", 100, busy=True, streams=True,
               tui=("black on green", "black on bright_green"), fill="#52b788")
# after the copy: the last WAL segment's archiving
ARCHIVE_WAIT = Phase("archive-wait", 160, busy=True, waits=True,
                     tui=("black on yellow", "black on bright_yellow"), fill="#e9c46a")
# the WAL stream beside the backup (its bytes count; not an item of its own)
WAL = Phase("wal", 200, streams=True)
