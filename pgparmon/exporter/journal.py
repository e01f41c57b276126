"""The exporter's journal: one line on stderr per event, redacted."""

from __future__ import annotations

import sys

from ..redact import redact_text


def log(msg: str) -> None:
    """One line on stderr (the journal), redacted."""
    sys.stderr.write(f"pgparmon exporter: {' '.join(redact_text(msg).split())}\n")
    sys.stderr.flush()
