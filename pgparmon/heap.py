"""Settling the heap of a process that follows one job.

Python's full garbage collections walk every object that ever survived
one: the imports, the screen's widgets, a plan of thousands of items.
Measured in the TUI on a small dump, a full collection cost 38 ms every
~15 s, 15% of its CPU; at 100,000 items far more. Once the start-up is done
(the second sample) and again once the plan is made, what lives then is
collected once and frozen (gc.freeze: kept out of later collections; freed
by reference counts as before). Garbage is collected first, so none is
kept for good. Only where one process follows one job (attach, run,
replay: `Monitor.settle_heap` set by them, and at most twice a process);
not in the exporter, whose monitors come and go.
"""

from __future__ import annotations

import gc

SETTLED = 0  # times a Monitor froze the heap in this process (at most twice)


class HeapSettler:
    """One Monitor's settling: "started" after its start-up, then "planned"
    once its work list is made (or it has none to make)."""

    def __init__(self) -> None:
        self.state: str | None = None

    def settle(self, planned: bool) -> None:
        global SETTLED
        if self.state == "planned" or SETTLED >= 2:
            return
        if self.state == "started" and not planned:
            return
        gc.collect()
        gc.freeze()
        SETTLED += 1
        self.state = "planned" if planned else "started"
