"""Playing a recording back: the feed that re-derives its samples through
the same analysis (`ReplayFeed`), and `pgparmon replay` and `pgparmon
report` as plain functions whose return value is the exit code.

Exit codes follow docs/exit-codes.md: 2 for a file that cannot be read as a
recording (bad input), else replay passes on what the recorded job did (0
finished, 1 failed, or its own exit code), as `run` would have.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime
from typing import Any

from rich.console import Console

from .exitcodes import ExitCode
from .feed import FeedBase
from .monitor import Monitor
from .private import open_private
from .record import Recording, RecordingError, read_recording
from .replay_source import EndOfRecording, ReplaySource
from .sample import Sample, SampleError, read_samples


def derive_all(path: str) -> tuple[list[Sample], Monitor]:
    """Every sample a Monitor derives from a recording, at once (no
    waiting), and the Monitor (its outcome, its summary): what the tests
    and the benchmarks read a recording back with."""
    rec = read_recording(path)
    mon = Monitor(ReplaySource(rec.header, rec.events))
    mon.discover()
    samples: list[Sample] = []
    while mon.outcome is None:
        try:
            samples.append(mon.tick())
        except EndOfRecording:
            break
    return samples, mon


class ReplayFeed(FeedBase):
    """Drives the same analysis as a live run from a recording (the feed the
    TUI and `pgparmon replay` use): tick() re-derives the next sample from the
    recorded readings, sleeping as the recording did, divided by speed."""

    def __init__(self, recording: Recording, speed: float = 1.0) -> None:
        self.recording = recording
        self.speed = speed if speed > 0 else 1.0
        self._restart()
        self.total_samples = sum(1 for k, _ in recording.events if k == "snapshot")

    def _restart(self) -> None:
        self.source = ReplaySource(self.recording.header, self.recording.events)
        self.mon = Monitor(self.source)
        self.mon.settle_heap = True  # a replay follows one recorded job
        self.mon.discover()
        self.position = 0
        self._last_wall: float | None = None
        self.last: Sample | None = None
        self.ended = False

    @property
    def outcome(self) -> Any:
        # a recording cut before the job ended has no outcome: `ended` says
        # there is nothing more to show
        return self.mon.outcome

    def _advance(self) -> Sample | None:
        try:
            doc = self.mon.tick()
        except EndOfRecording:
            self.ended = True
            return None
        self.position += 1
        self.last = doc
        return doc

    def tick(self) -> Sample:
        if self.ended or self.mon.outcome is not None:
            if self.last is None:
                raise RecordingError("the recording holds no samples")
            return self.last
        doc = self._advance()
        if doc is None:
            if self.last is None:
                raise RecordingError("the recording holds no samples")
            return self.last
        wall = _wall(doc)
        if wall is not None and self._last_wall is not None:
            time.sleep(max(0.0, min(5.0, (wall - self._last_wall) / self.speed)))
        self._last_wall = wall
        return doc

    def play_out(self) -> list[Sample]:
        """Every sample left, at once (no waiting): the whole replay through
        this analysis, for the tools that check recordings."""
        out = []
        while not self.ended and self.mon.outcome is None:
            doc = self._advance()
            if doc is None:
                break
            out.append(doc)
        return out

    seekable = True

    @property
    def replay_position(self) -> tuple[int, int] | None:
        return (self.position, self.total_samples)

    def step(self) -> Sample | None:
        """One sample forward, without waiting."""
        if self.ended or self.mon.outcome is not None:
            return self.last
        self._last_wall = None
        return self._advance() or self.last

    def seek(self, index: int) -> Sample | None:
        """Jump to sample `index` (0-based) by re-deriving from the start:
        the analysis is cheap, and the state then matches a live run's."""
        index = max(0, min(index, self.total_samples - 1))
        if index < self.position - 1 or self.position == 0:
            self._restart()
        while self.position <= index and not self.ended and self.mon.outcome is None:
            if self._advance() is None:
                break
        self._last_wall = None
        return self.last

    def summary(self) -> dict[str, Any]:
        return self.mon.summary()

    def details(self, pid: int) -> dict[str, Any]:
        return self.mon.details(pid)

    def close(self) -> None:
        pass


def _wall(sample: Sample) -> float | None:
    """When the sample was taken (its `ts`, to the ms): the pace to replay at."""
    try:
        return datetime.fromisoformat(sample.ts).timestamp() if sample.ts else None
    except ValueError:
        return None


def _err(msg: str) -> int:
    sys.stderr.write(f"pgparmon: {' '.join(msg.split())}\n")
    return ExitCode.USAGE


def replay_command(path: str, speed: float) -> int:
    """Replay a recording through the same analysis and the TUI (plain lines
    when stdout is not a terminal). speed: 2.0 plays twice as fast."""
    from .tui.app import run_tui

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


def _replay_plain(feed: ReplayFeed) -> int:
    from .tui.app import exit_code
    from .views.summary import end_summary
    from .views.text import plain_line, summary_table

    console = Console(highlight=False)
    last = None
    seen: list[Sample] = []
    while True:
        doc = feed.tick()
        if doc is last:  # the recording ran out before the job ended
            break
        last = doc
        seen.append(doc)
        console.print(plain_line(doc), markup=False, soft_wrap=True)
        if feed.outcome is not None or feed.ended:
            break
    console.print(summary_table(end_summary(feed.summary(), seen)))
    return exit_code(feed)


def report_command(path: str, html: str | None) -> int:
    """The run in a recording: text on the terminal, or with html a
    self-contained HTML file ("-" writes it to stdout)."""
    from .views.report import build_html, render_summary_text

    try:
        rec = read_recording(path)
    except RecordingError as exc:
        return _err(str(exc))
    except OSError as exc:
        return _err(f"cannot read {path}: {exc.strerror or exc}")
    try:
        samples = read_samples(rec.samples)
    except SampleError as exc:
        return _err(f"{path}: {exc}: not a recording this version can report on")
    if not samples:
        return _err(f"{path} holds no samples: nothing to report")
    summary = rec.summary
    if html is None:
        console = Console(highlight=False)
        if rec.truncated:
            console.print("[yellow]the recording ends early (still being written, or cut "
                          "off): this covers what it holds[/]")
        console.print(render_summary_text(samples, summary))
        return ExitCode.OK
    page = build_html(samples, summary, rec.header)
    if html == "-":
        sys.stdout.write(page)
        return ExitCode.OK
    try:
        with open_private(html, text=True) as f:  # the recording's facts: 0600, as it is
            f.write(page)
    except OSError as exc:
        return _err(f"cannot write {html}: {exc.strerror or exc}")
    Console(stderr=True, highlight=False).print(f"wrote {html}", markup=False)
    return ExitCode.OK
