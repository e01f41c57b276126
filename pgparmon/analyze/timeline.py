"""What each worker did when, rebuilt from the published samples.

The TUI and the HTML report both draw a Gantt chart (worker -> items over
time) and a throughput chart from the `pgparmon.sample/1` stream. Both read
it through this module so a live run, a replay and a report show the same
thing. Pure: no I/O, no clock; samples carry their own `elapsed_s`.

A span runs from the first sample that shows the worker on an item to the
first sample that no longer does (or the last sample seen): samples are all
we know, so a span is accurate to one sampling interval. Time counts from
the job's start; a monitor attached late saw nothing before its first
sample (`t_first`): the charts leave that stretch blank and the idle shares
count from there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..jobs.registry import phase_of
from ..sample import DiskLoad, Sample

SERIES_CAP = 4096  # chart points kept: past it the older ones are thinned



@dataclass(frozen=True, slots=True)
class Span:
    item: str
    phase: str  # copy | index | constraint | lock-wait
    start: float  # elapsed_s
    end: float  # elapsed_s
    open: bool  # still running at the last sample seen


@dataclass(frozen=True, slots=True)
class Event:
    """A worker started or finished an item (as far as samples tell)."""

    t: float
    pid: int
    what: str  # start | end
    item: str
    phase: str
    duration: float | None  # for an end


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """One sample as the time charts need it."""

    t: float  # elapsed_s
    bytes_per_s: float
    tuples_per_s: float
    active_workers: int
    copy_streams: int  # workers in COPY: the ones that move bytes
    cpu_percent: float | None
    iowait_percent: float | None
    disks: Mapping[str, DiskLoad]
    server_error: str | None


class TimelineBuilder:
    """Incremental: feed samples in order with add(); read spans() / series
    at any time (the TUI does it after every tick)."""

    def __init__(self) -> None:
        self._closed: dict[int, list[Span]] = {}
        self._open: dict[int, tuple[str, str, float]] = {}  # pid -> (item, phase, start)
        self._present: set[int] = set()  # pids in the latest sample
        self.order: list[int] = []  # pids in the order first seen: stable rows
        self.series: list[SeriesPoint] = []
        self.events: list[Event] = []
        self.t_end = 0.0
        self.t_first: float | None = None  # the first sample's time: seen from there on
        self.phases: set[str] = set()  # the phases of every span so far
        self._busy: dict[int, float] = {}  # pid -> seconds of its closed spans

    def add(self, doc: Sample) -> None:
        t = float(doc.elapsed_s or 0.0)
        if self.series and t < self.series[-1].t:
            return  # out of order (a replay seeking back restarts the builder instead)
        self.t_end = t
        if self.t_first is None:
            self.t_first = t
        seen: set[int] = set()
        for w in doc.workers:
            pid = int(w.pid)
            seen.add(pid)
            if pid not in self._closed:
                self._closed[pid] = []
                self.order.append(pid)
            item = w.item or w.relation
            phase = str(w.phase or "other")
            cur = self._open.get(pid)
            # a busy phase (pgparmon.phases) works on an item; idle and other are gaps
            busy = phase_of(phase).busy and item is not None
            if cur is not None and (not busy or (cur[0], cur[1]) != (item, phase)):
                self._close(pid, t)
                cur = None
            if busy and cur is None:
                self._open[pid] = (str(item), phase, t)
                self.phases.add(phase)
                self.events.append(Event(t, pid, "start", str(item), phase, None))
        for pid in list(self._open):
            if pid not in seen:  # the worker left the sample (a dump leader, an exit)
                self._close(pid, t)
        self._present = seen
        if doc.ended:
            for pid in list(self._open):
                self._close(pid, t)
        self.series.append(_series_point(doc, t))
        if len(self.series) > SERIES_CAP:
            # a long run: the older half at every other point (the charts
            # draw at most a screen's width of them anyway)
            keep = SERIES_CAP // 2
            self.series = self.series[:-keep:2] + self.series[-keep:]

    def _close(self, pid: int, t: float) -> None:
        item, phase, start = self._open.pop(pid)
        self._closed[pid].append(Span(item, phase, start, t, False))
        self._busy[pid] = self._busy.get(pid, 0.0) + max(0.0, t - max(start, self.t_first or 0.0))
        self.events.append(Event(t, pid, "end", item, phase, t - start))

    def spans(self) -> dict[int, list[Span]]:
        """worker pid -> spans in time order, the running ones included
        (ending at the last sample, open=True). A backend that never worked
        on an item and is gone (a leader seen once at the start) is left
        out; one still there stays, idle gaps and all."""
        out: dict[int, list[Span]] = {}
        for pid in self.order:
            lst = list(self._closed.get(pid, ()))
            if pid in self._open:
                item, phase, start = self._open[pid]
                lst.append(Span(item, phase, start, self.t_end, True))
            if lst or pid in self._present:
                out[pid] = lst
        return out


    def idle(self) -> dict[int, float]:
        """idle_share(self.spans(), self.t_first, self.t_end) from sums kept
        as spans close: a sample's cost does not grow with the items of the
        run."""
        total = self.t_end - (self.t_first or 0.0)
        out = {}
        for pid in self.order:
            if not (self._closed.get(pid) or pid in self._open or pid in self._present):
                continue  # as spans() leaves it out
            if total <= 0:
                out[pid] = 0.0
                continue
            busy = self._busy.get(pid, 0.0)
            if pid in self._open:
                busy += max(0.0, self.t_end - max(self._open[pid][2], self.t_first or 0.0))
            out[pid] = max(0.0, 1.0 - busy / total)
        return out


def _series_point(doc: Sample, t: float) -> SeriesPoint:
    job, host = doc.job, doc.host
    return SeriesPoint(
        t=t,
        bytes_per_s=float(job.bytes_per_s or 0.0),
        tuples_per_s=float(job.tuples_per_s or 0.0),
        active_workers=int(job.active_workers or 0),
        copy_streams=sum(1 for w in doc.workers if phase_of(w.phase).streams),
        cpu_percent=_opt(host.cpu_percent),
        iowait_percent=_opt(host.iowait_percent),
        disks=host.disks,
        server_error=doc.server.error,
    )


def _opt(x: float | None) -> float | None:
    return None if x is None else float(x)


def build(samples: Iterable[Sample]) -> TimelineBuilder:
    tl = TimelineBuilder()
    for doc in samples:
        tl.add(doc)
    return tl


def idle_share(spans: Mapping[int, Sequence[Span]], t0: float, t1: float) -> dict[int, float]:
    """Per worker, the share of [t0, t1] it spent on no item: the idle gaps
    a Gantt chart shows, as a number (t0: the first sample, where what the
    workers did is known from)."""
    total = t1 - t0
    if total <= 0:
        return {pid: 0.0 for pid in spans}
    out = {}
    for pid, lst in spans.items():
        busy = sum(max(0.0, min(s.end, t1) - max(s.start, t0)) for s in lst)
        out[pid] = max(0.0, 1.0 - busy / total)
    return out
