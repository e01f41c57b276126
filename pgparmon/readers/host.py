"""The host side of a sample: CPU, memory and block-device counters.

A `HostSample` is raw and cumulative (CPU seconds, diskstats counters) so a
recording replays through the same `analyze.hostrates.host_rates` as a live
run. It costs one psutil pass (/proc/stat, /proc/meminfo) and one read of
/proc/diskstats: cheap enough for every tick. Queue depth and await need the
in-flight and weighted I/O time columns that psutil does not expose, which is
why diskstats is parsed here instead of using psutil.disk_io_counters.

Which block device holds a path, and whether it spins, is `readers.devices`;
the rates between two samples are `analyze.hostrates`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import psutil

# /proc/diskstats counts sectors of 512 bytes whatever the device's real
# sector size (see the kernel's Documentation/admin-guide/iostats.rst).
SECTOR_BYTES = 512

# Root of the kernel's proc file system; module-level so that tests can point
# it at a fake tree.
_PROC = "/proc"


def _known(cls: type, d: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of d that are fields of cls: recordings written by a newer
    version may carry extra fields, which must not break reading them."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


# ---- raw sample ----------------------------------------------------------


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative seconds one CPU spent in each state (psutil.cpu_times).
    guest / guest_nice are left out: Linux already counts them in user / nice,
    so adding them would count that time twice."""

    user: float
    nice: float
    system: float
    idle: float
    iowait: float
    irq: float
    softirq: float
    steal: float

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CpuTimes:
        return cls(**{k: float(v) for k, v in _known(cls, d).items()})


@dataclass(frozen=True)
class DiskCounters:
    """One /proc/diskstats line. All cumulative except in_flight (I/Os the
    device has in progress right now). Sectors are 512 bytes."""

    reads: int
    read_sectors: int
    read_ms: int
    writes: int
    write_sectors: int
    write_ms: int
    in_flight: int
    io_ms: int  # time the device had at least one I/O in flight: %util
    weighted_ms: int  # sum over I/Os of their time in flight: queue depth

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DiskCounters:
        return cls(**{k: int(v) for k, v in _known(cls, d).items()})


@dataclass(frozen=True)
class HostSample:
    ts: float  # time.monotonic(): rates use it, immune to clock steps
    wall: float  # time.time(): for humans and for lining up recordings
    cpus: tuple[CpuTimes, ...]
    disks: dict[str, DiskCounters]
    mem_total: int
    mem_available: int
    load1: float
    # Which of the disks spin (/sys/block/DISK/queue/rotational), as far as
    # known: the saturation rule takes a spinning disk 90%+ busy as full.
    # Given to read_host by the caller, which reads it once (readers.devices).
    rotational: dict[str, bool] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostSample:
        return cls(ts=float(d["ts"]), wall=float(d["wall"]),
                   cpus=tuple(CpuTimes.from_dict(c) for c in d.get("cpus") or ()),
                   disks={str(k): DiskCounters.from_dict(v)
                          for k, v in (d.get("disks") or {}).items()},
                   mem_total=int(d["mem_total"]), mem_available=int(d["mem_available"]),
                   load1=float(d["load1"]),
                   # absent from recordings made before it was sampled
                   rotational={str(k): bool(v)
                               for k, v in (d.get("rotational") or {}).items()})


# ---- /proc/diskstats -------------------------------------------------------

# Field counts a kernel writes per line: 3 (major, minor, name) + 11 stats up
# to 4.17, + 4 discard stats from 4.18, + 2 flush stats from 5.5. A line with
# another count below 20 is a torn copy (the 7-field partition lines of
# kernels before 2.6.25 are also skipped: they lack the time columns).
_LAYOUTS = (14, 18, 20)


def _tokens_ok(n: int) -> bool:
    # More than 20 is accepted so that a future kernel adding columns at the
    # end still parses; the first 14 keep their meaning.
    return n in _LAYOUTS or n > _LAYOUTS[-1]


_Entry = tuple[int, int, str, DiskCounters]  # major, minor, name, counters


def _parse_line(tokens: list[str], cut: bool = False) -> _Entry | None:
    """One line's tokens; cut: the line lost its end, so only its first 14
    columns (all that is used) must be whole, whatever the layout."""
    if not (len(tokens) > 14 if cut else _tokens_ok(len(tokens))):
        return None
    name = tokens[2]
    # A name made only of digits means a column is missing and everything
    # after it has shifted.
    if name.isdigit():
        return None
    nums: list[int] = []
    for t in (tokens[0], tokens[1], *tokens[3:14]):
        # isdigit() instead of int(): int() accepts "-5", " 5", "1_000" and
        # non-ASCII digits, none of which a kernel writes.
        if not (t.isascii() and t.isdigit()):
            return None
        nums.append(int(t))
    major, minor = nums[0], nums[1]
    s = nums[2:]
    # Column order: reads, reads merged, sectors read, ms reading, writes,
    # writes merged, sectors written, ms writing, in flight, ms doing I/O,
    # weighted ms. Merges are not kept: nothing downstream uses them.
    return major, minor, name, DiskCounters(
        reads=s[0], read_sectors=s[2], read_ms=s[3], writes=s[4], write_sectors=s[6],
        write_ms=s[7], in_flight=s[8], io_ms=s[9], weighted_ms=s[10])


def _diskstats_entries(text: str) -> Iterator[_Entry]:
    lines = text.split("\n")
    # Text that does not end in a newline was cut off (a partial read, a
    # recording truncated on disk; the kernel always ends the file with one).
    # Its last line is kept only when a 15th column follows weighted_ms: then
    # the cut cannot have shortened a number we use. A cut-off weighted_ms
    # would otherwise read as a counter that went backwards.
    tail = lines.pop() if lines and lines[-1] != "" else None
    for line in lines:
        e = _parse_line(line.split())
        if e is not None:
            yield e
    if tail is not None:
        e = _parse_line(tail.split(), cut=True)
        if e is not None:
            yield e


def parse_diskstats(text: str) -> dict[str, DiskCounters]:
    """Counters per device name from /proc/diskstats text (14, 18 or 20 fields
    a line). Lines that are malformed (too few fields, non-numeric, empty, a
    cut-off last line) are skipped; this never raises. Text that does not end
    in a newline counts as cut off: its last line is kept only with more than
    14 fields, so a hand-written 14-field line needs its newline."""
    return {name: c for _maj, _min, name, c in _diskstats_entries(text)}


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def read_host(devices: Collection[str] | None = None,
              rotational: Mapping[str, bool] | None = None) -> HostSample:
    """One raw host sample. devices None: every disk and partition that has
    had I/O (idle loop / ram / zram devices would only add noise); given
    names: only those (a name not in /proc/diskstats is simply absent).
    rotational: what is known of which disks spin (`devices.rotational_of`),
    kept in the sample for the disks it holds."""
    # Timestamp right next to the diskstats read: disk rates divide by the
    # time between samples, CPU rates use the CPU counters' own clock.
    ts = time.monotonic()
    wall = time.time()
    disks = parse_diskstats(_read_text(f"{_PROC}/diskstats"))
    if devices is None:
        disks = {n: c for n, c in disks.items() if c.reads or c.writes or c.in_flight}
    else:
        wanted = set(devices)
        disks = {n: c for n, c in disks.items() if n in wanted}
    cpus = tuple(CpuTimes(user=t.user, nice=t.nice, system=t.system, idle=t.idle,
                          iowait=getattr(t, "iowait", 0.0), irq=getattr(t, "irq", 0.0),
                          softirq=getattr(t, "softirq", 0.0), steal=getattr(t, "steal", 0.0))
                 for t in psutil.cpu_times(percpu=True))
    vm = psutil.virtual_memory()
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = 0.0
    return HostSample(ts=ts, wall=wall, cpus=cpus, disks=disks, mem_total=int(vm.total),
                      mem_available=int(vm.available), load1=float(load1),
                      rotational={n: bool(v) for n, v in (rotational or {}).items()
                                  if n in disks})
