"""The verdict kinds and warning codes: one registry of what a sample's
`bottleneck.kind` and its `warnings[].code` can be.

The core registers those it makes where it makes them: the judge's verdicts
over the wait events and the host (analyze/bottleneck.py), the warnings of
any job (analyze/warnings.py). A tool's driver lists the verdict kinds its
own `verdict` hook returns (`Driver.verdicts`: a backup waiting for its
checkpoint, a subscription's sync failing) and the driver registry
registers them when it loads the drivers. The exporter reads the registry
(through jobs.registry's `all_verdicts` and `all_warnings`, which load the
drivers and the core's analysis first) for its one-hot series, so that each
value has a series at 0 before it first happens; it lists none itself.

Registering a value again is no change: drivers share verdict kinds (a
backup's `checkpoint`, `archiving`) with each other and with the core.

This module is low in the layers: it imports nothing of pgparmon.
"""

from __future__ import annotations

# insertion-ordered sets: the registration order is the series' order
_VERDICTS: dict[str, None] = {}
_WARNINGS: dict[str, None] = {}


def register_verdicts(*kinds: str) -> tuple[str, ...]:
    """Add verdict kinds (a sample's `bottleneck.kind`); returns them."""
    for k in kinds:
        _VERDICTS.setdefault(_checked(k), None)
    return kinds


def register_warnings(*codes: str) -> tuple[str, ...]:
    """Add warning codes (a sample's `warnings[].code`); returns them."""
    for c in codes:
        _WARNINGS.setdefault(_checked(c), None)
    return codes


def verdict_kinds() -> tuple[str, ...]:
    """Every registered verdict kind, in registration order."""
    return tuple(_VERDICTS)


def warning_codes() -> tuple[str, ...]:
    """Every registered warning code, in registration order."""
    return tuple(_WARNINGS)


def _checked(name: str) -> str:
    # a label value of the exporter's series: a short word, never a sentence
    if not name or len(name) > 40 or not all(ch.isalnum() or ch == "-" for ch in name):
        raise ValueError(f"{name!r} is not a verdict kind or warning code (a-z, 0-9, -)")
    return name
