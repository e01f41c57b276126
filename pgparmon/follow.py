"""Following a job: the feed a view pulls samples from (`Follower`), the
headless loop (live lines, plain lines or JSON Lines), and the choice between
that loop and the full-screen TUI."""

from __future__ import annotations

import json
import signal
import sys
import time
from array import array
from typing import TYPE_CHECKING, Any

from .exitcodes import ExitCode, Fatal, for_signal
from .feed import FeedBase
from .job_end import outcome_exit_code
from .record import Recorder, RecordingError
from .sample import Sample

if TYPE_CHECKING:
    from rich.console import Console

# Rich and the text views are imported when a screen is drawn: `--json`
# needs neither (~35 ms of start-up)


class Follower(FeedBase):
    """Drives a Monitor for a view. As a feed (tick/outcome/summary/details/
    close) it serves the TUI; run() is the headless loop: ticks on a fixed
    cadence, never overlapping (a slow tick stretches the interval)."""

    def __init__(self, mon: Any, interval: float, as_json: bool, duration: float | None,
                 console: Console | None = None, recorder: Any = None) -> None:
        self.mon = mon
        self.recorder = recorder
        self.interval = interval
        self.as_json = as_json
        self.duration = duration
        if console is None and not as_json:
            from rich.console import Console

            console = Console(highlight=False)
        self.console = console
        self.stop = False
        self.last: Sample | None = None
        self.last_json: dict[str, Any] | None = None  # last's document, when written
        self.first: Sample | None = None  # with last and times: the end summary's
        # elapsed_s of every sample (groups short items): 8 bytes a sample
        self.times = array("d")
        self.closed = False
        self.stop_signal: int | None = None  # SIGHUP / SIGTERM that stopped us

    # -- the feed protocol ---------------------------------------------------

    def tick(self) -> Sample:
        sample: Sample = self.mon.tick()
        self.last = sample
        self.first = self.first or sample
        self.times.append(float(sample.elapsed_s or 0.0))
        # the document, once, where it is written (the recording, JSON Lines)
        self.last_json = sample.to_json() if self.recorder is not None or self.as_json \
            else None
        if self.recorder is not None:
            self.recorder.event("sample", self.last_json)
        return sample

    @property
    def outcome(self) -> Any:
        return self.mon.outcome

    def summary(self) -> dict[str, Any]:
        return self.mon.summary()  # type: ignore[no-any-return]

    def details(self, pid: int) -> dict[str, Any]:
        return self.mon.details(pid)  # type: ignore[no-any-return]

    def close(self) -> dict[str, Any]:
        """Finish the recording (summary last) and the monitor; idempotent."""
        summary: dict[str, Any] = self.mon.summary()
        if not self.closed:
            self.closed = True
            if self.recorder is not None:
                self.recorder.event("summary", summary)
                self.recorder.close()
            self.mon.close()
        return summary

    def exit_code(self) -> int:
        if self.stop_signal is not None:
            return for_signal(self.stop_signal)
        return outcome_exit_code(self.mon.outcome)

    # -- headless ------------------------------------------------------------

    def run(self) -> int:
        start = time.monotonic()
        live = None
        if not self.as_json:
            from rich.live import Live

            from .views import text as render

            assert self.console is not None
            if self.console.is_terminal:
                live = Live(console=self.console, auto_refresh=False, transient=False)
        try:
            if live:
                live.start()
            nxt = time.monotonic()
            while not self.stop:
                sample = self.tick()
                if self.as_json:
                    sys.stdout.write(json.dumps(self.last_json, separators=(",", ":")) + "\n")
                    sys.stdout.flush()
                elif live is not None:
                    live.update(render.screen(sample), refresh=True)
                else:
                    assert self.console is not None
                    self.console.print(render.plain_line(sample), markup=False)
                if self.mon.outcome is not None:
                    break
                if self.duration is not None and time.monotonic() - start >= self.duration:
                    break
                nxt += self.interval
                delay = nxt - time.monotonic()
                if delay < 0:  # a slow tick: stretch instead of piling up
                    nxt = time.monotonic()
                    delay = 0
                time.sleep(delay)
        finally:
            if live:
                live.stop()
            summary = self.close()
        if self.as_json:
            sys.stdout.write(json.dumps(summary, separators=(",", ":")) + "\n")
            sys.stdout.flush()
        elif self.mon.outcome is not None:
            from .views import text as render
            from .views.summary import end_summary

            assert self.console is not None
            ends = [d for d in (self.first, self.last) if d is not None]
            self.console.print(render.summary_table(end_summary(summary, ends,
                                                                times=self.times)))
        return self.exit_code()


def follow(mon: Any, interval: float, as_json: bool, duration: float | None,
           recorder: Any, plain: bool, console: Console | None = None,
           title: str = "pgparmon") -> int:
    """Show a monitored job: the TUI in a terminal, else lines or JSON."""
    follower = Follower(mon, interval, as_json, duration, console=console, recorder=recorder)
    install_signals(follower)
    use_tui = (not as_json and not plain and duration is None and sys.stdout.isatty()
               and sys.stdin.isatty())
    try:
        if use_tui:
            try:
                from .tui import run_tui
            except ImportError:
                use_tui = False
        if use_tui:
            try:
                code = run_tui(follower, interval=interval, title=title)
            finally:
                follower.close()
            return follower.exit_code() if follower.stop_signal is not None else int(code)
        return follower.run()
    except KeyboardInterrupt:
        follower.close()
        return ExitCode.INTERRUPTED


def install_signals(follower: Follower) -> None:
    def handler(signum: int, frame: Any) -> None:
        follower.stop = True
        follower.stop_signal = signum

    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError):
            pass


def open_recorder(path: str | None) -> Any:
    if not path:
        return None

    try:
        return Recorder(path)
    except RecordingError as exc:
        raise Fatal(str(exc), ExitCode.USAGE) from None


def attach_command(target: Any, pid: int | None, wait: float | None, interval: float,
                   as_json: bool, duration: float | None, record: str | None,
                   plain: bool, copy_source: Any = None, host_only: bool = False) -> int:
    """`pgparmon attach`: find the job (or the one --pid names) and follow
    it. Several jobs and no --pid: the picker in a terminal; else exit 5
    with the list in the error line (and as JSON on stdout with --json)."""
    from .connect import ConnectError, check_reachable
    from .discover import DiscoveryError
    from .open_job import wait_for_job

    try:
        check_reachable(copy_source, "--source")
    except ConnectError as exc:
        raise Fatal(str(exc), ExitCode.CONNECT) from None
    recorder = open_recorder(record)

    def follow_pid(chosen: int | None) -> int:
        try:
            mon = wait_for_job(target, chosen, wait if chosen == pid else None,
                               recorder=recorder, copy_source=copy_source,
                               host_only=host_only)
        except ConnectError as exc:
            # no server answers: a tool that runs with it down (a pgBackRest
            # restore) is still followed, from the host alone
            from .discover import find_host_jobs

            if not find_host_jobs(chosen):
                raise Fatal(str(exc), ExitCode.CONNECT) from None
            try:
                mon = wait_for_job(None, chosen, None, recorder=recorder, host_only=True,
                                   why=f"no server answers ({exc})")
            except DiscoveryError as exc2:
                raise Fatal(str(exc2), exc2.code) from None
        except DiscoveryError as exc:
            if exc.code == ExitCode.SEVERAL_JOBS and chosen is None:
                return several_jobs(exc)
            raise Fatal(str(exc), exc.code) from None
        mon.settle_heap = True  # this process follows this one job
        return follow(mon, interval, as_json, duration, recorder, plain,
                      title=f"pgparmon attach: {mon.discover_label()}")

    def several_jobs(exc: DiscoveryError) -> int:
        use_tui = (not as_json and not plain and duration is None and sys.stdout.isatty()
                   and sys.stdin.isatty())
        if use_tui:
            try:
                from .tui.picker import run_picker
            except ImportError:
                use_tui = False
        if use_tui:
            from .pick import list_jobs

            return run_picker(lambda: list_jobs(target), follow_pid, exc.found,
                              title="pgparmon attach: several jobs")
        if as_json:
            from .pick import jobs_document

            sys.stdout.write(json.dumps(jobs_document(exc.found, time.time()),
                                        separators=(",", ":")) + "\n")
            sys.stdout.flush()
        raise Fatal(str(exc), exc.code)

    return follow_pid(pid)
