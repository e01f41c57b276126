"""The live terminal UI (Textual): `run_tui(feed, interval, title)`."""

from .app import Feed, PgParMonApp, exit_code, run_tui

__all__ = ["Feed", "PgParMonApp", "exit_code", "run_tui"]
