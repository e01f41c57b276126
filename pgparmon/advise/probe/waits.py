"""What the probe's sessions wait on, sampled from pg_stat_activity while a
step runs: the share of samples in which an active session of the step
waits on I/O (wait_event_type 'IO': DataFileRead, DataFilePrefetch, ...).
A step whose sessions mostly wait on storage, and which reads little more
than the step before it with half the streams, says the storage is the
limit (docs/advise.md, "When is I/O saturated").

One monitor connection for the whole probe (read-only, timeouts, as every
pgparmon connection), polled from a thread every SAMPLE_S seconds.
"""

from __future__ import annotations

import threading
from typing import Any

from ...connect import ConnectError, ConnTarget, connect

SAMPLE_S = 0.1
QUERY = ("SELECT count(*) FILTER (WHERE wait_event_type = 'IO'), count(*) "
         "FROM pg_stat_activity WHERE pid = ANY(%s) AND state = 'active'")


class WaitSampler:
    def __init__(self, target: ConnTarget) -> None:
        self.conn: Any = connect(target)  # ConnectError: the caller notes it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.io = 0
        self.total = 0
        self.failed = False

    @staticmethod
    def open(target: ConnTarget, notes: list[str]) -> WaitSampler | None:
        try:
            return WaitSampler(target)
        except ConnectError as exc:
            notes.append(f"the sessions' wait events were not sampled: {exc}")
            return None

    def start(self, pids: list[int]) -> None:
        self.io = self.total = 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(list(pids),), daemon=True)
        self._thread.start()

    def _run(self, pids: list[int]) -> None:
        while not self._stop.is_set():
            try:
                row = self.conn.execute(QUERY, (pids,)).fetchone()
            except Exception:  # noqa: BLE001 - sampling is best effort
                self.failed = True
                return
            if row:
                self.io += int(row[0] or 0)
                self.total += int(row[1] or 0)
            self._stop.wait(SAMPLE_S)

    def stop(self) -> float | None:
        """The step's share of active session samples waiting on I/O (None:
        nothing sampled)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        return self.io / self.total if self.total else None

    def close(self) -> None:
        self._stop.set()
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001
            pass
