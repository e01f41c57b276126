"""The ETA's value, below the simulation that makes it (eta.py) and the
drivers that give their own (the progress protocol's `own_eta`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Eta:
    """An ETA: the schedule simulation's (estimate), or a driver's own
    (Progress.own_eta), which fills what it can say of the same fields."""

    seconds: float | None
    last_item: str | None = None  # the item expected to finish last (its name)
    tail_s: float | None = None  # part of the rest where fewer than -j streams will run
    reason: str | None = None  # why there is no ETA (or what it leaves out)
