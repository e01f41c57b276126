"""Live advice: from what this run has shown so far, where adding workers
stopped paying off and which -j the next run should use.

One module for the TUI (fed sample by sample) and the HTML report (fed a
whole recording), so both say the same thing. Pure: no I/O, no clock.

The measure is COPY throughput against the number of workers in COPY
(streams), not against all active workers: an index or constraint build moves
no COPY bytes, and counting it would make a restore's post-data phase look
like "2 workers, 0 bytes/s". Throughput per stream count comes from
`rates.SteadyThroughput` (steady windows only, duration-weighted median);
whether the flattening is the disk comes from `analyze.saturation`, the rule
`advise` uses too. The verdict stays "not enough data yet" until two stream
counts have steady windows: one run with a fixed -j often shows only its
-j and the long tail, and pretending otherwise would be guessing.

The disk fields of a StreamPoint (await, queue depth, %util, whether it
spins) are those of the busiest watched disk in the sample docs' `host.disks`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .. import units as fmt
from ..jobs.progress import Progress
from ..jobs.registry import phase_of, progress_for
from ..sample import DiskLoad, HostLoad, Sample
from .rates import SteadyThroughput
from .saturation import MIN_SAMPLES, StreamPoint, saturation

MIN_STEADY_S = 2.0  # and 2+ seconds of them: 3 quick samples are one noisy blip
HOST_CPU_BUSY = 90.0  # % of all CPUs: more workers would only queue for CPU
TAIL_SHARE = 0.25  # a tail worth mentioning: a quarter of the run or more


@dataclass(frozen=True)
class LiveAdvice:
    status: str  # no-data | measuring | rising | flat | saturated | cpu-bound | single
    next_jobs: int | None  # the -j to use next time; None while it cannot be told
    headline: str  # one line for a status bar
    detail: str  # the evidence, one or two sentences
    by_streams: dict[int, float] = field(default_factory=dict)  # streams -> bytes/s
    steady_samples: dict[int, int] = field(default_factory=dict)  # streams -> intervals
    tail_s: float = 0.0  # time with idle workers and nothing left to start
    elapsed_s: float = 0.0


@dataclass
class _Acc:
    """Per stream count: sums over the steady intervals, for StreamPoint."""

    n: int = 0
    seconds: float = 0.0
    cpu: list[float] = field(default_factory=list)
    await_ms: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)
    util: list[float] = field(default_factory=list)
    rotational: list[bool] = field(default_factory=list)


class AdviceTracker:
    """Feed samples in order with add(); advice() any time."""

    def __init__(self) -> None:
        # throughput at each stream count, fed a sample at a time (bounded:
        # a run of a day costs what one of half an hour does)
        self.steady = SteadyThroughput()
        self._cum = 0.0
        self._last: dict[int, tuple[str | None, int] | None] = {}  # pid -> (item, bytes_done)
        self._acc: dict[int, _Acc] = {}
        self._prev_streams: int | None = None
        self._prev_t: float | None = None
        self.jobs: int | None = None
        self.kind: str | None = None
        self.ncpu: int | None = None
        self.last_item: str | None = None
        self.tail_s = 0.0
        self.elapsed_s = 0.0
        self.ended = False  # the job ended: "not enough data in this run", no "yet"
        self._started = False

    def add(self, doc: Sample) -> None:
        job = doc.job
        t = float(doc.elapsed_s or 0.0)
        if self._prev_t is not None and t < self._prev_t:
            return
        self.ended = doc.ended
        self.jobs = job.jobs or self.jobs
        self.kind = job.kind or self.kind
        self.last_item = job.last_item or self.last_item
        host = doc.host
        if host.per_cpu:
            self.ncpu = len(host.per_cpu)
        if doc.server.error:
            return  # no server part: neither bytes nor workers are known for this sample
        streams = 0
        for w in doc.workers:
            pid = int(w.pid)
            # a worker moving data on an item (a COPY stream, a backup tool's
            # process reading files): a phase that streams and is busy (the
            # phase registry's flags; a WAL stream beside the workers is not)
            ph = phase_of(w.phase)
            if not (ph.streams and ph.busy) or w.bytes_done is None:
                self._last[pid] = None
                continue
            streams += 1
            item, done = w.item, int(w.bytes_done)
            prev = self._last.get(pid)
            if not self._started:
                pass  # attached mid-run: what was done before the first sample is not a rate
            elif prev is not None and prev[0] == item and done >= prev[1]:
                self._cum += done - prev[1]
            else:
                # a new item since the last sample: all its bytes were done since then
                self._cum += done
            self._last[pid] = (item, done)
        self._started = True
        if self._prev_t is not None and self._prev_streams == streams and streams > 0 \
                and t > self._prev_t:
            self._steady_interval(self._acc.setdefault(streams, _Acc()), t, host)
        if self._prev_t is not None and (job.state or "running") == "running":
            # the long tail: workers idle while no item waits to start
            active = int(job.active_workers or 0)
            left = int(job.items_total or 0) - int(job.items_done or 0) - active
            if self.jobs and 0 < active < self.jobs and left <= 0:
                self.tail_s += t - self._prev_t
        self.steady.add(t, streams, self._cum)
        self._prev_t, self._prev_streams = t, streams
        self.elapsed_s = t

    def _steady_interval(self, acc: _Acc, t: float, host: HostLoad) -> None:
        """One more steady interval at this stream count: the host's
        readings over it."""
        assert self._prev_t is not None
        acc.n += 1
        acc.seconds += t - self._prev_t
        if host.cpu_percent is not None:
            acc.cpu.append(float(host.cpu_percent))
        disk = _busiest_disk(host.disks)
        if disk is not None:
            if disk.await_ms is not None:
                acc.await_ms.append(float(disk.await_ms))
            if disk.queue_depth is not None:
                acc.queue.append(float(disk.queue_depth))
            if disk.util_percent is not None:
                acc.util.append(float(disk.util_percent))
            if disk.rotational is not None:
                acc.rotational.append(bool(disk.rotational))

    def _driver(self) -> Progress | None:
        try:
            return progress_for(self.kind) if self.kind else None
        except KeyError:  # a recording of a kind this version does not know
            return None

    # ---- the verdict ---------------------------------------------------

    def advice(self) -> LiveAdvice:
        tp = self.steady.result()
        steady = {k: self._acc[k].n for k in tp if k in self._acc}

        driver = self._driver()

        def out(status: str, next_jobs: int | None, headline: str, detail: str) -> LiveAdvice:
            for word, own in driver.advice_terms if driver else ():  # its knob, its words
                headline, detail = headline.replace(word, own), detail.replace(word, own)
            # every verdict carries the same evidence
            return LiveAdvice(status, next_jobs, headline, detail, by_streams=tp,
                              steady_samples=steady, tail_s=round(self.tail_s, 1),
                              elapsed_s=self.elapsed_s)

        if driver is not None and driver.no_jobs_advice is not None:
            return out("single", None, *driver.no_jobs_advice)
        tail = self._tail_note()
        usable = sorted(k for k in tp if steady.get(k, 0) >= MIN_SAMPLES
                        and self._acc[k].seconds >= MIN_STEADY_S)
        if not self.steady.any_active:
            return out("no-data", None,
                       f"{self._nd()}: no COPY seen" + ("" if self.ended else " so far"),
                       "advice compares COPY throughput at different worker counts" + tail)
        if not usable:
            return out("measuring", None,
                       f"{self._nd()}: " + ("no steady stretch" if self.ended else "measuring"),
                       f"need {MIN_SAMPLES}+ samples over {MIN_STEADY_S:.0f}+ s at one "
                       "steady worker count" + tail)
        cpu = {k: _mean(self._acc[k].cpu) for k in usable}
        seen = ", ".join(f"{fmt.rate(tp[k])} at {k}" for k in usable)
        if len(usable) == 1:
            k = usable[0]
            # only at the full -j: a busy CPU during the tail says nothing about -j
            if (cpu[k] or 0) >= HOST_CPU_BUSY and self.jobs and k >= self.jobs:
                return out("cpu-bound", k,
                           f"host CPU {cpu[k]:.0f}% busy with {_workers(k)}: "
                           f"more than -j {k} would queue for CPU",
                           f"only one steady worker count seen ({seen})" + tail)
            return out("measuring", None,
                       f"{self._nd()}: only {_workers(k)} seen steadily ({fmt.rate(tp[k])})",
                       "a saturation point needs throughput at two worker counts" + tail)
        points = [StreamPoint(streams=k, throughput=tp[k],
                              await_ms=_mean(self._acc[k].await_ms),
                              queue_depth=_mean(self._acc[k].queue),
                              util_percent=_mean(self._acc[k].util),
                              rotational=_any(self._acc[k].rotational),
                              samples=steady[k]) for k in usable]
        sat = saturation(points)
        top = usable[-1]
        if sat.at_streams is not None:
            n = sat.at_streams
            return out("saturated" if sat.saturated else "flat", n,
                       f"adding workers stopped paying off at {n}: "
                       f"{fmt.rate(tp[n])} at {n}, {fmt.rate(tp[top])} at {top}; next run: -j {n}",
                       f"{sat.reason} (seen: {seen})" + tail)
        if (cpu[top] or 0) >= HOST_CPU_BUSY:
            return out("cpu-bound", top,
                       f"throughput still rose up to {_workers(top)} but host CPU was "
                       f"{cpu[top]:.0f}% busy: next run -j {top}",
                       f"{sat.reason} (seen: {seen})" + tail)
        if self.jobs and top >= self.jobs:
            nxt = top * 2 if self.ncpu is None else max(top + 1, min(top * 2, self.ncpu))
            return out("rising", nxt,
                       f"throughput still rising at {_workers(top)}: next run could try -j {nxt}",
                       f"{sat.reason} (seen: {seen})" + tail)
        return out("rising", self.jobs,
                   f"throughput still rising up to {_workers(top)}; keep -j {self.jobs or top}",
                   f"{sat.reason}; this run never kept more workers busy long enough "
                   f"to measure (seen: {seen})" + tail)

    def _nd(self) -> str:
        return "not enough data in this run" if self.ended else "not enough data yet"

    def _tail_note(self) -> str:
        if self.elapsed_s <= 0 or self.tail_s < TAIL_SHARE * self.elapsed_s:
            return ""
        last = f" ({self.last_item})" if self.last_item else ""
        return (f"; {self.tail_s:.0f}s ({100 * self.tail_s / self.elapsed_s:.0f}%) ran with "
                f"idle workers and nothing left to start: a bigger -j cannot shorten that "
                f"long tail{last}")


def advise_samples(samples: Iterable[Sample]) -> LiveAdvice:
    tr = AdviceTracker()
    for doc in samples:
        tr.add(doc)
    return tr.advice()


def _busiest_disk(disks: Mapping[str, DiskLoad]) -> DiskLoad | None:
    """The device the job loads most: its await and queue tell saturation."""
    best = None
    best_bytes = -1.0
    for d in disks.values():
        b = float(d.read_bytes_per_s or 0) + float(d.write_bytes_per_s or 0)
        if b > best_bytes:
            best, best_bytes = d, b
    return best


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _any(xs: list[bool]) -> bool | None:
    """Spinning if any steady sample's disk spun; None when never known
    (recordings made before the flag was sampled, a device sysfs hides)."""
    return any(xs) if xs else None


def _workers(k: int) -> str:
    return f"{k} worker" + ("" if k == 1 else "s")
