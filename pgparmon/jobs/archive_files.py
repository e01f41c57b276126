"""What a dump and a restore share about an archive's data files: each
table's data is a file named for its dump id (`1234.dat`, `1234.dat.gz`),
which the worker that dumps it writes and the worker that restores it
reads, so the client process holding it open is that worker's."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..analyze.items import WorkerState
from ..snapshot import Snapshot

if TYPE_CHECKING:
    from ..analyze.progress import Tracker


def data_file_client(tr: Tracker, w: WorkerState, snap: Snapshot) -> int | None:
    """Which client process drives this backend: the one holding the
    item's data file open (dump writes it, restore reads it)."""
    it = tr.items.get(w.item or "")
    if it is None:
        return w.client_pid
    want = it.key
    for c in snap.clients:
        for f in c.open_files or ():
            base = os.path.basename(f.path)
            if base.split(".")[0] == want:
                w.client_pid = c.pid
                return c.pid
    return w.client_pid
