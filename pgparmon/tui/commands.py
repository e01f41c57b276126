"""`pgparmon replay` and `pgparmon report` as plain functions: cli.py wires
them to typer (options, help) and passes their return value as the exit code.

Exit codes follow docs/exit-codes.md: 2 for a file that cannot be read as a
recording (bad input), else replay passes on what the recorded job did (0
finished, 1 failed, or its own exit code), as `run` would have.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console

EXIT_OK, EXIT_USAGE = 0, 2


def _err(msg: str) -> int:
    sys.stderr.write(f"pgparmon: {' '.join(msg.split())}\n")
    return EXIT_USAGE


def replay_command(path: str, speed: float) -> int:
    """Replay a recording through the same analysis and the TUI (plain lines
    when stdout is not a terminal). speed: 2.0 plays twice as fast."""
    from ..record import RecordingError, ReplayFeed, read_recording
    from .app import run_tui

    if not speed > 0:
        return _err(f"--speed must be above 0, not {speed}")
    try:
        rec = read_recording(path)
        feed = ReplayFeed(rec, speed=speed)
    except RecordingError as exc:
        return _err(str(exc))
    except OSError as exc:
        return _err(f"cannot read {path}: {exc.strerror or exc}")
    if not sys.stdout.isatty():
        return _replay_plain(feed)
    # the feed sleeps between samples as the recording did: no extra interval
    title = f"pgparmon replay {os.path.basename(path)}" + (f" ×{speed:g}" if speed != 1 else "")
    return run_tui(feed, interval=0.0, title=title)


def _replay_plain(feed: Any) -> int:
    from ..render import plain_line, summary_table
    from .app import exit_code

    console = Console(highlight=False)
    last = None
    while True:
        doc = feed.tick()
        if doc is last:  # the recording ran out before the job ended
            break
        last = doc
        console.print(plain_line(doc), markup=False, soft_wrap=True)
        if feed.outcome is not None or getattr(feed, "ended", False):
            break
    console.print(summary_table(feed.summary()))
    return exit_code(feed)


def report_command(path: str, html: str | None) -> int:
    """The run in a recording: text on the terminal, or with html a
    self-contained HTML file ("-" writes it to stdout)."""
    from ..record import RecordingError, read_recording
    from ..report import build_html, render_summary_text

    try:
        rec = read_recording(path)
    except RecordingError as exc:
        return _err(str(exc))
    except OSError as exc:
        return _err(f"cannot read {path}: {exc.strerror or exc}")
    samples = list(rec.samples)
    if not samples:
        return _err(f"{path} holds no samples: nothing to report")
    summary = rec.summary
    if html is None:
        console = Console(highlight=False)
        if getattr(rec, "truncated", False):
            console.print("[yellow]the recording ends early (still being written, or cut "
                          "off): this covers what it holds[/]")
        console.print(render_summary_text(samples, summary))
        return EXIT_OK
    page = build_html(samples, summary, rec.header)
    if html == "-":
        sys.stdout.write(page)
        return EXIT_OK
    try:
        with open(html, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as exc:
        return _err(f"cannot write {html}: {exc.strerror or exc}")
    Console(stderr=True, highlight=False).print(f"wrote {html}", markup=False)
    return EXIT_OK
