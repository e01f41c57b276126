"""The worker phases: one registry of what a worker can be doing, what each
phase means to the analysis and how the views draw it.

The Tracker sets the phases of any job's SQL sessions (a COPY, an index
build, maintenance, a lock wait, idle, other): they are registered here.
A tool's driver sets phases of its own on the rows it makes (a base backup's
checkpoint, a restore's file copy): each driver lists them (`Driver.phases`)
and the driver registry registers them when it loads the drivers. The
timeline, the monitor, the TUI, the HTML report and the exporter read this
registry (through jobs.registry's `phase` and `all_phases`, which load the
drivers first); none of them lists phases.

This module is low in the layers: it imports nothing of pgparmon.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    order: int  # display order: legends, the exporter's series
    # a worker in it works on an item: a span on the timeline, not idle time
    busy: bool = False
    # it moves data: its bytes make the job's throughput
    streams: bool = False
    # it makes no measurable progress by design (a backup waiting for its
    # checkpoint): a job with a worker in it is never called stalled
    waits: bool = False
    # set by a tool's driver, not read off the SQL sessions every job has:
    # a timeline that holds one shows only the phases it holds in its legend
    tool: bool = True
    # in the legend of a load's timeline even before it happens
    always: bool = False
    # the TUI's two shades for a block wide enough for its name; None: not
    # drawn as a phase (no legend entry)
    tui: tuple[str, str] | None = None
    # the TUI's two shades for a block too short for its name (default: the
    # backgrounds of `tui`)
    tui_block: tuple[str, str] | None = None
    # the HTML report's fill
    fill: str | None = None
    # its name in the legends (phases that share one are one entry)
    legend: str | None = None

    def __post_init__(self) -> None:
        if self.tui_block is None and self.tui is not None:
            shades = tuple(s.rsplit(" on ", 1)[-1] for s in self.tui)
            object.__setattr__(self, "tui_block", shades)

    @property
    def label(self) -> str:
        return self.legend or self.name


_PHASES: dict[str, Phase] = {}


def register(*phases: Phase) -> None:
    """Add phases; one already registered must be registered the same way
    (drivers that share a phase share its definition)."""
    add_named(_PHASES, "phase", phases)


class Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=Named)


def add_named(table: dict[str, N], what: str, things: Iterable[N]) -> None:
    """Add definitions to a registry of them by name (phases, item kinds):
    one already there must be the same definition."""
    for t in things:
        have = table.get(t.name)
        if have is not None and have != t:
            raise ValueError(f"{what} {t.name!r} is registered already, differently")
        table[t.name] = t


def get(name: str | None) -> Phase:
    """The phase of that name; an unknown one is neither busy, streaming nor
    waiting and is not drawn."""
    p = _PHASES.get(name or "")
    return p if p is not None else Phase(name or "", order=10_000)


def ordered() -> list[Phase]:
    """Every registered phase, in display order."""
    return sorted(_PHASES.values(), key=lambda p: (p.order, p.name))


# the phases of a job's SQL sessions, as the Tracker reads them
register(
    Phase("copy", 10, busy=True, streams=True, tool=False, always=True,
          tui=("black on dark_cyan", "black on cyan"), fill="#2a9d8f"),
    Phase("index", 20, busy=True, tool=False, always=True,
          tui=("white on blue", "black on bright_blue"), fill="#3a6ea5"),
    Phase("constraint", 30, busy=True, tool=False, always=True,
          tui=("black on yellow", "black on bright_yellow"), fill="#e9c46a"),
    Phase("lock-wait", 40, busy=True, tool=False, always=True,
          tui=("bold white on red", "bold white on dark_red"), tui_block=("red", "bright_red"),
          fill="#d62828"),
    Phase("vacuum", 50, busy=True, tool=False, legend="vacuum/analyze",
          tui=("white on magenta", "black on bright_magenta"), fill="#9b5de5"),
    Phase("analyze", 51, busy=True, tool=False, legend="vacuum/analyze",
          tui=("white on magenta", "black on bright_magenta"), fill="#9b5de5"),
    Phase("other", 900, tool=False),
    Phase("idle", 910, tool=False),
)
