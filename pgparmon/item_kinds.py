"""The kinds of work item: one registry of what a job's items can be and
what the views call them.

The items any job's SQL sessions make (a table's data, an index or a
constraint build, a foreign key, a COPY statement no plan names), which the
Tracker follows the same way for every kind of job, are registered here. A
tool's driver that makes items of its own kind (a backup, vacuumdb's
statement on a table) lists them
(`Driver.item_kinds`) and the driver registry registers them when it loads
the drivers. The summary reads this registry (through jobs.registry's
`item_kind`, which loads the drivers first); it names no kind itself.

This module is low in the layers: it imports only pgparmon.phases (the
registries' one rule for adding definitions).
"""

from __future__ import annotations

from dataclasses import dataclass

from .phases import add_named


@dataclass(frozen=True, slots=True)
class ItemKind:
    name: str  # Item.kind
    # several of them done at one sample, as the summary's group row says it
    # ("12 small tables, done ..."); None: "<name> items"
    plural: str | None = None

    @property
    def several(self) -> str:
        return self.plural or f"{self.name or 'other'} items"


_KINDS: dict[str, ItemKind] = {}


def register(*kinds: ItemKind) -> None:
    """Add item kinds; one already registered must be registered the same
    way (drivers that share a kind share its definition)."""
    add_named(_KINDS, "item kind", kinds)


def get(name: str | None) -> ItemKind:
    """The item kind of that name; an unknown one is called "<name> items"."""
    k = _KINDS.get(name or "")
    return k if k is not None else ItemKind(name or "")


def names() -> tuple[str, ...]:
    """Every registered item kind's name."""
    return tuple(_KINDS)


# the items of any job's SQL sessions, which the Tracker follows itself
DATA = ItemKind("data", "small tables")  # a table's data (its COPY)
INDEX = ItemKind("index", "small indexes")
CONSTRAINT = ItemKind("constraint", "constraints")
FK = ItemKind("fk", "foreign keys")
# a COPY statement no plan names (a load's; and in a summary made from the
# samples alone, the rows of workers seen in the COPY phase)
COPY = ItemKind("copy", "COPY statements")
register(DATA, INDEX, CONSTRAINT, FK, COPY)
