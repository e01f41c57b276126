"""Is the storage what stops a job from going faster? The rule of
docs/advise.md ("When is I/O saturated"), applied to throughput against the
number of active streams: from a live run's steady windows, from recordings,
or from the probe's steps. Pure: the same points give the same answer.

FLAT_GAIN and `doubling_gain` are the one definition of "adding streams no
longer helps" that the live view, the probe and the advice model share.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..readers.host import _known, _opt_float, _opt_int
from .. import units as fmt


@dataclass(frozen=True)
class StreamPoint:
    """Aggregate of the steady windows with `streams` streams active.
    throughput is the total bytes/s of all streams; the disk fields describe
    the device the streams load (None when not measured). samples: how many
    samples the windows hold; None means the caller already kept steady
    windows only."""

    streams: int
    throughput: float
    await_ms: float | None = None
    queue_depth: float | None = None
    util_percent: float | None = None
    rotational: bool | None = None
    ceiling_bytes_per_s: float | None = None
    samples: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StreamPoint:
        k = _known(cls, d)
        rot = k.get("rotational")
        return cls(streams=int(k["streams"]), throughput=float(k["throughput"]),
                   await_ms=_opt_float(k.get("await_ms")),
                   queue_depth=_opt_float(k.get("queue_depth")),
                   util_percent=_opt_float(k.get("util_percent")),
                   rotational=None if rot is None else bool(rot),
                   ceiling_bytes_per_s=_opt_float(k.get("ceiling_bytes_per_s")),
                   samples=_opt_int(k.get("samples")))


@dataclass(frozen=True)
class Saturation:
    """saturated: the disk is what stops throughput from growing.
    at_streams: where throughput stops gaining (the fewest streams after which
    more streams add under FLAT_GAIN per doubling); set also when the limit is
    not the disk (saturated False), None while throughput still rises or the
    data cannot tell. reason: one sentence for a human."""

    saturated: bool
    at_streams: int | None
    reason: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Saturation:
        a = d.get("at_streams")
        return cls(saturated=bool(d["saturated"]), at_streams=None if a is None else int(a),
                   reason=str(d["reason"]))


# Thresholds of the "When is I/O saturated" rule (docs/advise.md).
MIN_SAMPLES = 3  # a steady window: 3+ samples after warm-up
FLAT_GAIN = 0.10  # adding streams gains under 10% (per doubling of streams)
AWAIT_FACTOR = 2.0  # await at least 2x its single-stream value...
QUEUE_GROWTH = 1.2  # ...while queue depth grows (20%: beyond sampling noise)
CEILING_SHARE = 0.85  # throughput at 85%+ of a measured device ceiling
ROTATIONAL_UTIL = 90.0  # a spinning disk 90%+ busy (one head: %util means something)
# The probe's storage knee: a doubling of streams that reads less than
# STORAGE_GAIN more while its sessions wait on I/O (IO:DataFileRead and
# friends) at least STORAGE_IO_SHARE of the time finds the storage saturated.
STORAGE_GAIN = 0.25
STORAGE_IO_SHARE = 0.5


def _mean(xs: Iterable[float | None]) -> float | None:
    v = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(v) / len(v) if v else None


def _merge(points: Sequence[StreamPoint]) -> StreamPoint:
    """Several aggregates for one stream count (repeated probes, recordings
    of several runs): average them."""
    if len(points) == 1:
        return points[0]
    rots = [p.rotational for p in points if p.rotational is not None]
    samples = [p.samples for p in points if p.samples is not None]
    return StreamPoint(streams=points[0].streams,
                       throughput=_mean(p.throughput for p in points) or 0.0,
                       await_ms=_mean(p.await_ms for p in points),
                       queue_depth=_mean(p.queue_depth for p in points),
                       util_percent=_mean(p.util_percent for p in points),
                       rotational=any(rots) if rots else None,
                       ceiling_bytes_per_s=_mean(p.ceiling_bytes_per_s for p in points),
                       samples=sum(samples) if samples else None)


def doubling_gain(streams_a: int, rate_a: float, streams_b: int, rate_b: float) -> float:
    """Throughput gain from a to b (more streams) scaled to one doubling of
    streams: 4 -> 5 streams with +9% is not "flat" (the ideal is +25%),
    4 -> 8 with +9% is. The probe steps by doublings, recordings by one."""
    if rate_a <= 0 or rate_b <= 0:
        return -1.0
    # In log space (logs taken apart): a plain power or quotient overflows or
    # underflows for extreme ratios.
    g = (math.log(rate_b) - math.log(rate_a)) / math.log2(streams_b / streams_a)
    return math.inf if g > 700 else math.exp(g) - 1.0


def _gain(a: StreamPoint, b: StreamPoint) -> float:
    return doubling_gain(a.streams, a.throughput, b.streams, b.throughput)


def _plural(n: int) -> str:
    return f"{n} stream" if n == 1 else f"{n} streams"


def _disk_sign(p: StreamPoint, base: StreamPoint) -> str | None:
    """Why p shows a saturated disk, or None."""
    if (p is not base and p.await_ms is not None and base.await_ms is not None
            and base.await_ms > 0 and p.await_ms >= AWAIT_FACTOR * base.await_ms
            and p.queue_depth is not None and base.queue_depth is not None
            and p.queue_depth > 0 and p.queue_depth >= QUEUE_GROWTH * base.queue_depth):
        which = "single-stream" if base.streams == 1 else f"{base.streams}-stream"
        return (f"await {p.await_ms / base.await_ms:.1f}x the {which} value "
                f"while queue depth grows")
    if (p.ceiling_bytes_per_s is not None and p.ceiling_bytes_per_s > 0
            and p.throughput >= CEILING_SHARE * p.ceiling_bytes_per_s):
        return (f"throughput {100 * p.throughput / p.ceiling_bytes_per_s:.0f}% of the "
                f"measured ceiling of {fmt.rate(p.ceiling_bytes_per_s)}")
    if p.rotational and p.util_percent is not None and p.util_percent >= ROTATIONAL_UTIL:
        return f"rotational disk {p.util_percent:.0f}% busy"
    return None


def saturation(points: Sequence[StreamPoint]) -> Saturation:
    """The rule: saturated when adding streams gains under 10% AND
    one disk sign shows (await 2x+ the single-stream value while queue depth
    grows; throughput 85%+ of a measured ceiling; a rotational disk 90%+
    busy). %util alone is no sign: SSD / NVMe / RAID serve I/Os in parallel.
    Pure: the same points give the same answer."""
    steady = [p for p in points
              if p.streams >= 1 and math.isfinite(p.throughput) and p.throughput >= 0
              and (p.samples is None or p.samples >= MIN_SAMPLES)]
    by_k: dict[int, list[StreamPoint]] = {}
    for p in steady:
        by_k.setdefault(p.streams, []).append(p)
    series = [_merge(by_k[k]) for k in sorted(by_k)]
    if len(series) < 2:
        return Saturation(False, None, "not enough steady windows: need two stream counts "
                                       f"with {MIN_SAMPLES}+ samples each")
    if max(p.throughput for p in series) <= 0:
        return Saturation(False, None, "no throughput in the steady windows")
    # The baseline for await is the fewest-streams window (ideally one stream).
    base = series[0]
    for i, cand in enumerate(series[:-1]):
        if cand.throughput <= 0:
            continue
        later = series[i + 1:]
        # Flat from cand on: no later window gains FLAT_GAIN per doubling or
        # more. Checking every later window, not just the next, keeps a noisy
        # dip in a rising series from passing for a plateau.
        gains = [_gain(cand, q) for q in later]
        if max(gains) >= FLAT_GAIN:
            continue
        for q in (cand, *later):
            sign = _disk_sign(q, base)
            if sign is not None:
                where = "" if q is cand else f" (at {_plural(q.streams)})"
                return Saturation(True, cand.streams,
                                  f"disk saturated at about {_plural(cand.streams)}: {sign}{where}")
        return Saturation(False, cand.streams,
                          f"throughput flat from about {_plural(cand.streams)} "
                          f"({100 * max(gains):+.0f}% per doubling) with no disk sign: "
                          "look at CPU (client compression, host CPU), then lock or WAL "
                          "contention, or the network")
    last, prev = series[-1], series[-2]
    if prev.throughput > 0:
        tail = f", {100 * _gain(prev, last):+.0f}% per doubling from {prev.streams}"
    else:
        tail = ""
    return Saturation(False, None, f"throughput still rising: {fmt.rate(last.throughput)} at "
                                   f"{_plural(last.streams)}{tail}")
