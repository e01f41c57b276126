"""Rates between two host samples: CPU shares, memory use, and per device
throughput, IOPS, %util, await and queue depth. Pure: a recording's samples
give the same rates as the live run did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..readers.host import (
    SECTOR_BYTES,
    CpuTimes,
    DiskCounters,
    HostSample,
    _known,
    _opt_float,
)


@dataclass(frozen=True)
class CpuPercent:
    """Share of one CPU's time between two samples, 0..100. user includes
    nice; system includes irq and softirq; busy is everything but idle and
    iowait (so steal counts as busy: the CPU was not ours to use)."""

    user: float
    system: float
    iowait: float
    busy: float

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CpuPercent:
        return cls(**{k: float(v) for k, v in _known(cls, d).items()})


@dataclass(frozen=True)
class DiskRates:
    read_bytes_per_s: float
    write_bytes_per_s: float
    read_iops: float
    write_iops: float
    util_percent: float  # io_ms delta / elapsed, capped at 100
    await_ms: float | None  # mean time per completed I/O; None without I/O
    queue_depth: float  # weighted_ms delta / elapsed ms: mean I/Os in flight
    in_flight: int  # at the later sample
    rotational: bool | None = None  # the disk spins (HostSample.rotational); None: unknown

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DiskRates:
        k = _known(cls, d)
        rot = k.get("rotational")
        return cls(read_bytes_per_s=float(k["read_bytes_per_s"]),
                   write_bytes_per_s=float(k["write_bytes_per_s"]),
                   read_iops=float(k["read_iops"]), write_iops=float(k["write_iops"]),
                   util_percent=float(k["util_percent"]), await_ms=_opt_float(k.get("await_ms")),
                   queue_depth=float(k["queue_depth"]), in_flight=int(k["in_flight"]),
                   rotational=None if rot is None else bool(rot))


@dataclass(frozen=True)
class HostRates:
    """Rates between two HostSamples. A None disk entry means that device's
    counters cannot be compared (one went backwards, or the device appeared
    or vanished between the samples)."""

    cpu_percent: float | None  # busy share of all CPUs together, 0..100
    per_cpu: tuple[CpuPercent, ...]
    iowait_percent: float | None
    mem_used_percent: float | None  # at the later sample
    disks: dict[str, DiskRates | None]
    elapsed_s: float

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostRates:
        return cls(cpu_percent=_opt_float(d.get("cpu_percent")),
                   per_cpu=tuple(CpuPercent.from_dict(c) for c in d.get("per_cpu") or ()),
                   iowait_percent=_opt_float(d.get("iowait_percent")),
                   mem_used_percent=_opt_float(d.get("mem_used_percent")),
                   disks={str(n): (DiskRates.from_dict(r) if r is not None else None)
                          for n, r in (d.get("disks") or {}).items()},
                   elapsed_s=float(d.get("elapsed_s") or 0.0))


_CPU_FIELDS = tuple(f.name for f in fields(CpuTimes))
_DISK_CUMULATIVE = tuple(f.name for f in fields(DiskCounters) if f.name != "in_flight")


def _cpu_deltas(a: CpuTimes, b: CpuTimes) -> dict[str, float]:
    # Negative deltas are clamped to 0, not treated as a reset: Linux's iowait
    # can decrease (proc(5) says so) and per-CPU counters jitter on some
    # virtual machines; psutil's cpu_times_percent clamps the same way.
    return {f: max(0.0, getattr(b, f) - getattr(a, f)) for f in _CPU_FIELDS}


def _clamp_pct(x: float) -> float:
    return min(100.0, max(0.0, x))


def _cpu_percent(d: Mapping[str, float]) -> CpuPercent | None:
    total = sum(d.values())
    if total <= 0:
        return None
    return CpuPercent(user=_clamp_pct(100.0 * (d["user"] + d["nice"]) / total),
                      system=_clamp_pct(100.0 * (d["system"] + d["irq"] + d["softirq"]) / total),
                      iowait=_clamp_pct(100.0 * d["iowait"] / total),
                      busy=_clamp_pct(100.0 * (total - d["idle"] - d["iowait"]) / total))


def _disk_rates(a: DiskCounters, b: DiskCounters, elapsed: float,
                rotational: bool | None) -> DiskRates | None:
    deltas = {f: getattr(b, f) - getattr(a, f) for f in _DISK_CUMULATIVE}
    # A counter going backwards is a wrap (32-bit kernels), a device removed
    # and re-added under the same name, or a driver reset: no honest rate.
    if any(v < 0 for v in deltas.values()):
        return None
    ms = elapsed * 1000.0
    ios = deltas["reads"] + deltas["writes"]
    return DiskRates(
        read_bytes_per_s=deltas["read_sectors"] * SECTOR_BYTES / elapsed,
        write_bytes_per_s=deltas["write_sectors"] * SECTOR_BYTES / elapsed,
        read_iops=deltas["reads"] / elapsed, write_iops=deltas["writes"] / elapsed,
        # io_ms can run slightly ahead of our clock (the kernel updates it
        # when I/Os complete), so the quotient is capped.
        util_percent=min(100.0, 100.0 * deltas["io_ms"] / ms),
        await_ms=(deltas["read_ms"] + deltas["write_ms"]) / ios if ios else None,
        queue_depth=deltas["weighted_ms"] / ms,
        in_flight=b.in_flight, rotational=rotational)


def host_rates(prev: HostSample, cur: HostSample) -> HostRates:
    """Rates between two samples of the same host, prev taken before cur.
    A disk's rotational flag is the later sample's."""
    elapsed = cur.ts - prev.ts
    per_cpu: tuple[CpuPercent, ...] = ()
    cpu_pct = iowait_pct = None
    # CPUs listed differently (one went offline, or samples from different
    # hosts) cannot be paired; the list from /proc/stat holds online CPUs only.
    if len(prev.cpus) == len(cur.cpus) and cur.cpus:
        deltas = [_cpu_deltas(a, b) for a, b in zip(prev.cpus, cur.cpus)]
        allcpu = _cpu_percent({f: sum(d[f] for d in deltas) for f in _CPU_FIELDS})
        if allcpu is not None:
            cpu_pct, iowait_pct = allcpu.busy, allcpu.iowait
            # A CPU that saw no ticks at all (sampled twice within its tick)
            # is shown idle rather than leaving a hole in the per-core list.
            per_cpu = tuple(_cpu_percent(d) or CpuPercent(0.0, 0.0, 0.0, 0.0) for d in deltas)
    mem = (_clamp_pct(100.0 * (cur.mem_total - cur.mem_available) / cur.mem_total)
           if cur.mem_total > 0 else None)
    disks: dict[str, DiskRates | None] = {}
    for name in sorted(prev.disks.keys() | cur.disks.keys()):
        a, b = prev.disks.get(name), cur.disks.get(name)
        disks[name] = (_disk_rates(a, b, elapsed, cur.rotational.get(name))
                       if a and b and elapsed > 0 else None)
    return HostRates(cpu_percent=cpu_pct, per_cpu=per_cpu, iowait_percent=iowait_pct,
                     mem_used_percent=mem, disks=disks, elapsed_s=elapsed)
