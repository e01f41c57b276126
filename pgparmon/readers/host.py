"""The host side of a sample: CPU, memory and block-device counters.

A `HostSample` is raw and cumulative (CPU seconds, diskstats counters) so a
recording replays through the same `host_rates` as a live run. It costs one
psutil pass (/proc/stat, /proc/meminfo) and one read of /proc/diskstats: cheap
enough for every tick. Queue depth and await need the in-flight and weighted
I/O time columns that psutil does not expose, which is why diskstats is parsed
here instead of using psutil.disk_io_counters.

Also here: which block device holds a path (`device_for_path`, `whole_disk`,
`rotational`). The I/O-saturation rule lives in `analyze.saturation`.
"""

from __future__ import annotations

import glob
import os
import re
import stat
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import psutil

# /proc/diskstats counts sectors of 512 bytes whatever the device's real
# sector size (see the kernel's Documentation/admin-guide/iostats.rst).
SECTOR_BYTES = 512

# Roots of the kernel's pseudo file systems; module-level so that tests can
# point them at a fake tree.
_PROC = "/proc"
_SYS = "/sys"

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

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostSample:
        return cls(ts=float(d["ts"]), wall=float(d["wall"]),
                   cpus=tuple(CpuTimes.from_dict(c) for c in d.get("cpus") or ()),
                   disks={str(k): DiskCounters.from_dict(v)
                          for k, v in (d.get("disks") or {}).items()},
                   mem_total=int(d["mem_total"]), mem_available=int(d["mem_available"]),
                   load1=float(d["load1"]))


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


def read_host(devices: Collection[str] | None = None) -> HostSample:
    """One raw host sample. devices None: every disk and partition that has
    had I/O (idle loop / ram / zram devices would only add noise); given
    names: only those (a name not in /proc/diskstats is simply absent)."""
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
                      mem_available=int(vm.available), load1=float(load1))


# ---- rates -----------------------------------------------------------------


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

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DiskRates:
        k = _known(cls, d)
        return cls(read_bytes_per_s=float(k["read_bytes_per_s"]),
                   write_bytes_per_s=float(k["write_bytes_per_s"]),
                   read_iops=float(k["read_iops"]), write_iops=float(k["write_iops"]),
                   util_percent=float(k["util_percent"]), await_ms=_opt_float(k.get("await_ms")),
                   queue_depth=float(k["queue_depth"]), in_flight=int(k["in_flight"]))


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


def _disk_rates(a: DiskCounters, b: DiskCounters, elapsed: float) -> DiskRates | None:
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
        in_flight=b.in_flight)


def host_rates(prev: HostSample, cur: HostSample) -> HostRates:
    """Rates between two samples of the same host, prev taken before cur."""
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
        disks[name] = _disk_rates(a, b, elapsed) if a and b and elapsed > 0 else None
    return HostRates(cpu_percent=cpu_pct, per_cpu=per_cpu, iowait_percent=iowait_pct,
                     mem_used_percent=mem, disks=disks, elapsed_s=elapsed)


# ---- which device holds a path ---------------------------------------------


@dataclass(frozen=True)
class _Mount:
    majmin: str
    mountpoint: str
    fstype: str
    source: str
    superopts: str


_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(s: str) -> str:
    # mountinfo writes space, tab, newline and backslash as \ooo.
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), s)


def _parse_mountinfo(text: str) -> list[_Mount]:
    out = []
    for line in text.splitlines():
        toks = line.split()
        # id parent maj:min root mountpoint opts [optional...] - fstype source superopts
        try:
            sep = toks.index("-", 6)
        except ValueError:
            continue
        if len(toks) < sep + 3:
            continue
        out.append(_Mount(majmin=toks[2], mountpoint=_unescape(toks[4]),
                          fstype=toks[sep + 1], source=_unescape(toks[sep + 2]),
                          superopts=toks[sep + 3] if len(toks) > sep + 3 else ""))
    return out


def _under(path: str, mountpoint: str) -> bool:
    return mountpoint == "/" or path == mountpoint or path.startswith(mountpoint.rstrip("/") + "/")


def _mount_for(path: str, majmin: str, mounts: Sequence[_Mount]) -> _Mount | None:
    """The mount that holds path: among the entries with its device number
    the one with the longest mount point above path (bind mounts repeat a
    device); failing that, the longest mount point above path. The latter
    covers btrfs, where every subvolume has its own anonymous device number
    that mountinfo does not list. Later entries win ties: they are mounted
    over earlier ones."""
    best: _Mount | None = None
    for pool in ([m for m in mounts if m.majmin == majmin], list(mounts)):
        for m in pool:
            if _under(path, m.mountpoint) and (best is None
                                               or len(m.mountpoint) >= len(best.mountpoint)):
                best = m
        if best is not None:
            return best
    return None


def _name_for_majmin(major: int, minor: int) -> str | None:
    # /sys/dev/block/MAJ:MIN links to the device's sysfs directory whose last
    # component is the kernel name /proc/diskstats uses (sda1, nvme0n1p2,
    # dm-0, md0).
    try:
        return os.path.basename(os.readlink(f"{_SYS}/dev/block/{major}:{minor}"))
    except OSError:
        pass
    # No sysfs (some containers): /proc/diskstats lists major and minor too.
    for maj, mn, name, _c in _diskstats_entries(_read_text(f"{_PROC}/diskstats")):
        if (maj, mn) == (major, minor):
            return name
    return None


def _name_for_source(source: str) -> str | None:
    """Kernel name of the block device a mount names as its source
    (/dev/sda2, /dev/mapper/vg-root, /dev/md0)."""
    try:
        st = os.stat(source)
        if stat.S_ISBLK(st.st_mode):
            return _name_for_majmin(os.major(st.st_rdev), os.minor(st.st_rdev))
    except OSError:
        pass
    # The node may be missing from this mount namespace's /dev (containers):
    # match by name instead.
    base = os.path.basename(source)
    if base and os.path.exists(f"{_SYS}/class/block/{base}"):
        return base
    for p in sorted(glob.glob(f"{_SYS}/block/dm-*/dm/name")):
        if _read_text(p).strip() == base:
            return p.split("/")[-3]
    return None


def _device_for_mount(m: _Mount, depth: int) -> str | None:
    if m.fstype == "overlay":
        # An overlay's writes land in its upper dir, so the upper dir's device
        # is the one a dump into the overlay loads. The path is as the mounter
        # saw it: from inside a container it is usually not visible: None.
        opts = dict(o.split("=", 1) for o in m.superopts.split(",") if "=" in o)
        upper = opts.get("upperdir")
        if upper and depth < 4:
            try:
                return _device_for_path(_unescape(upper), depth + 1)
            except OSError:
                return None
        return None
    if m.source.startswith("/dev/"):
        return _name_for_source(m.source)
    # tmpfs, proc, NFS ("host:/export"), ZFS ("pool/dataset"), fuse...: no
    # block device in /proc/diskstats carries their I/O.
    return None


def _device_for_path(path: str, depth: int) -> str | None:
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    if major != 0:
        return _name_for_majmin(major, minor)
    # Major 0 is an anonymous device: tmpfs, overlay, btrfs, NFS... Ask the
    # mount table what the file system sits on.
    mounts = _parse_mountinfo(_read_text(f"{_PROC}/self/mountinfo"))
    m = _mount_for(os.path.realpath(path), f"0:{minor}", mounts)
    return _device_for_mount(m, depth) if m is not None else None


def device_for_path(path: str) -> str | None:
    """The /proc/diskstats name of the block device that holds path.

    os.stat(path).st_dev -> major:minor -> /sys/dev/block/MAJ:MIN -> name
    (falling back to the major/minor columns of /proc/diskstats without
    sysfs). Partitions give the partition (see `whole_disk`); device-mapper and
    md give their kernel name as diskstats lists it (dm-0, md0), not the LVM
    name. When st_dev has major 0 (no block device of its own), the mount that
    holds path is looked up in /proc/self/mountinfo: a btrfs mount resolves
    through its source device; an overlay through its upperdir when that path
    is visible here; tmpfs, NFS and anything else give None.
    Raises OSError when path cannot be stat'ed."""
    return _device_for_path(path, 0)


def whole_disk(name: str) -> str | None:
    """For a partition (sda1, nvme0n1p2) the disk that holds it, through the
    parent of /sys/class/block/NAME; a whole disk (or dm / md device) is its
    own whole disk; None when sysfs does not know the name."""
    p = f"{_SYS}/class/block/{name}"
    if not os.path.exists(p):
        return None
    if os.path.exists(f"{p}/partition"):
        return os.path.basename(os.path.dirname(os.path.realpath(p)))
    return name


def rotational(name: str) -> bool | None:
    """Whether the disk under name spins (/sys/block/DISK/queue/rotational),
    None when unknown. Virtual disks often claim 1 whatever backs them, so
    treat True as a hint."""
    disk = whole_disk(name) or name
    v = _read_text(f"{_SYS}/block/{disk}/queue/rotational").strip()
    return {"1": True, "0": False}.get(v)
