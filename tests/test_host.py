"""The host readings and what is made of them: pgparmon.readers.host
(diskstats parsing against golden files, raw samples), readers.devices (which
device holds a path, whether it spins), analyze.hostrates (rates between
samples), the I/O saturation rule, and the spinning-disk flag's way from the
readings to the live advice."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgparmon.analyze.advice_live import advise_samples
from pgparmon.analyze.hostrates import CpuPercent, DiskRates, HostRates, host_rates
from pgparmon.analyze.saturation import Saturation, StreamPoint, saturation
from pgparmon.sample import read_samples
from pgparmon.sample_doc import host_load
from pgparmon.readers import devices
from pgparmon.readers.devices import device_for_path, rotational, rotational_of, whole_disk
from pgparmon.readers.host import (
    CpuTimes,
    DiskCounters,
    HostSample,
    parse_diskstats,
    read_host,
)
from pgparmon.snapshot import Snapshot

GOLDEN = Path(__file__).parent / "golden" / "host"
GOLDEN_NAMES = ["real", "kernel4_14field", "kernel5_18field", "kernel6_20field",
                "truncated", "garbage"]


def _golden(name: str) -> str:
    # errors="replace": the garbage file holds bytes that are not ASCII, as
    # the live reader (which decodes the same way) could meet.
    return (GOLDEN / f"{name}.diskstats").read_text(encoding="utf-8", errors="replace")


def _expected(name: str) -> dict[str, DiskCounters]:
    raw = json.loads((GOLDEN / f"{name}.expected.json").read_text())
    return {k: DiskCounters.from_dict(v) for k, v in raw.items()}


def _proc_diskstats() -> dict[str, DiskCounters]:
    with open("/proc/diskstats") as f:
        return parse_diskstats(f.read())


# ---- parse_diskstats ---------------------------------------------------------


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_golden_parse(name: str) -> None:
    assert parse_diskstats(_golden(name)) == _expected(name)


def test_golden_real_is_this_kernels_layout() -> None:
    # The real copy has every line complete: nothing dropped.
    text = _golden("real")
    assert len(parse_diskstats(text)) == len(text.splitlines())


@pytest.mark.parametrize("name", ["real", "kernel4_14field", "kernel5_18field",
                                  "kernel6_20field"])
def test_every_prefix_is_a_subset(name: str) -> None:
    # A read cut at any byte never raises, never invents a device and never
    # gives a device other counters than the full text does.
    text = _golden(name)
    full = parse_diskstats(text)
    for cut in range(len(text) + 1):
        part = parse_diskstats(text[:cut])
        for dev, c in part.items():
            assert full[dev] == c, (cut, dev)


def test_unterminated_last_line() -> None:
    # No final newline: the text was cut. A 14-field line may have lost
    # digits of weighted_ms, so it goes; with a 15th field it is whole.
    assert parse_diskstats("8 0 sda 1 2 3 4 5 6 7 8 9 10 11") == {}
    assert parse_diskstats("8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n") == {
        "sda": DiskCounters(reads=1, read_sectors=3, read_ms=4, writes=5, write_sectors=7,
                            write_ms=8, in_flight=9, io_ms=10, weighted_ms=11)}
    cut20 = parse_diskstats("8 0 sda 1 2 3 4 5 6 7 8 9 10 11 12 1")
    assert cut20["sda"].weighted_ms == 11
    text = _golden("kernel6_20field") + "   8      16 sdc 1 2 3 4 5 6 7 8 9 10 11"
    assert "sdc" not in parse_diskstats(text)


@pytest.mark.parametrize("text", ["", "\n", "   \n\n", "\x00", "8 0 sda", "8 0 sda\n" * 3])
def test_empty_and_tiny_inputs(text: str) -> None:
    assert parse_diskstats(text) == {}


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789 \n\tsdax-_.", max_size=400))
def test_parse_never_raises(text: str) -> None:
    for c in parse_diskstats(text).values():
        assert all(isinstance(v, int) and v >= 0 for v in dataclasses.astuple(c))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_real_lines_never_raise(data: st.DataObject) -> None:
    lines = _golden("real").splitlines()
    i = data.draw(st.integers(0, len(lines) - 1))
    toks = lines[i].split()
    j = data.draw(st.integers(0, len(toks) - 1))
    toks[j] = data.draw(st.text(max_size=6))
    lines[i] = " ".join(toks)
    parse_diskstats("\n".join(lines) + "\n")


# ---- dataclasses round-trip ----------------------------------------------------


def _cpu(user: float = 0, nice: float = 0, system: float = 0, idle: float = 0,
         iowait: float = 0, irq: float = 0, softirq: float = 0, steal: float = 0) -> CpuTimes:
    return CpuTimes(user=user, nice=nice, system=system, idle=idle, iowait=iowait, irq=irq,
                    softirq=softirq, steal=steal)


def _disk(reads: int = 0, read_sectors: int = 0, read_ms: int = 0, writes: int = 0,
          write_sectors: int = 0, write_ms: int = 0, in_flight: int = 0, io_ms: int = 0,
          weighted_ms: int = 0) -> DiskCounters:
    return DiskCounters(reads=reads, read_sectors=read_sectors, read_ms=read_ms, writes=writes,
                        write_sectors=write_sectors, write_ms=write_ms, in_flight=in_flight,
                        io_ms=io_ms, weighted_ms=weighted_ms)


def _sample(ts: float, cpus: list[CpuTimes], disks: dict[str, DiskCounters],
            mem_total: int = 1000, mem_available: int = 250) -> HostSample:
    return HostSample(ts=ts, wall=1_700_000_000.0 + ts, cpus=tuple(cpus), disks=disks,
                      mem_total=mem_total, mem_available=mem_available, load1=0.5)


def _json_roundtrip(obj: Any) -> Any:
    return json.loads(json.dumps(dataclasses.asdict(obj)))


def test_host_sample_roundtrip() -> None:
    s = _sample(12.5, [_cpu(1.5, 0, 2, 100, 0.25)], {"sda": _disk(1, 2, 3, 4, 5, 6, 7, 8, 9)})
    assert HostSample.from_dict(dataclasses.asdict(s)) == s
    assert HostSample.from_dict(_json_roundtrip(s)) == s
    real = read_host()
    assert HostSample.from_dict(_json_roundtrip(real)) == real
    spun = dataclasses.replace(s, rotational={"sda": True})
    assert HostSample.from_dict(_json_roundtrip(spun)) == spun


def test_recording_without_rotational_still_reads() -> None:
    # Recordings made before the flag was sampled: nothing known, nothing breaks.
    d = _json_roundtrip(_sample(1.0, [_cpu(1)], {"sda": _disk(1)}))
    del d["rotational"]
    assert HostSample.from_dict(d).rotational == {}
    r = _json_roundtrip(DiskRates(1, 2, 3, 4, 5, None, 0.5, 1))
    del r["rotational"]
    assert DiskRates.from_dict(r).rotational is None


def test_from_dict_ignores_unknown_keys() -> None:
    d = _json_roundtrip(_sample(1.0, [_cpu(1)], {"sda": _disk(1)}))
    d["future"] = 1
    d["cpus"][0]["guest"] = 3.0
    d["disks"]["sda"]["discards"] = 5
    assert HostSample.from_dict(d) == _sample(1.0, [_cpu(1)], {"sda": _disk(1)})


def test_rates_and_other_roundtrips() -> None:
    r = HostRates(cpu_percent=25.0, per_cpu=(CpuPercent(1, 2, 3, 4),), iowait_percent=5.0,
                  mem_used_percent=None,
                  disks={"sda": DiskRates(1, 2, 3, 4, 5, None, 0.5, 1), "sdb": None},
                  elapsed_s=1.0)
    assert HostRates.from_dict(_json_roundtrip(r)) == r
    spun = dataclasses.replace(r, disks={"sda": DiskRates(1, 2, 3, 4, 5, 6, 0.5, 1, True)})
    assert HostRates.from_dict(_json_roundtrip(spun)) == spun
    sp = StreamPoint(4, 1e8, 2.0, None, 50.0, True, None, 5)
    assert StreamPoint.from_dict(_json_roundtrip(sp)) == sp
    sat = Saturation(True, 4, "x")
    assert Saturation.from_dict(_json_roundtrip(sat)) == sat


# ---- host_rates ----------------------------------------------------------------


def _pair() -> tuple[HostSample, HostSample]:
    prev = _sample(100.0, [_cpu(10, 0, 5, 80, 5), _cpu(20, 1, 5, 70, 4)],
                   {"sda": _disk(100, 1000, 50, 200, 4000, 100, 0, 1000, 2000)})
    cur = _sample(102.0,
                  # CPU0: +2 user +1 nice +1 system +0.5 irq +0.5 softirq +4 idle +1 iowait
                  [_cpu(12, 1, 6, 84, 6, 0.5, 0.5), _cpu(20, 1, 5, 80, 4)],  # CPU1: +10 idle
                  {"sda": _disk(140, 3048, 130, 260, 8096, 320, 4, 1500, 5000)})
    return prev, cur


def test_host_rates_exact() -> None:
    prev, cur = _pair()
    r = host_rates(prev, cur)
    assert r.elapsed_s == pytest.approx(2.0)
    # user includes nice; system includes irq and softirq.
    assert dataclasses.astuple(r.per_cpu[0]) == pytest.approx((30.0, 20.0, 10.0, 50.0))
    assert r.per_cpu[1] == CpuPercent(0.0, 0.0, 0.0, 0.0)
    assert r.cpu_percent == pytest.approx(25.0)  # 5 busy of 20 CPU-seconds
    assert r.iowait_percent == pytest.approx(5.0)
    assert r.mem_used_percent == pytest.approx(75.0)
    d = r.disks["sda"]
    assert d is not None
    assert d.read_bytes_per_s == pytest.approx(2048 * 512 / 2)  # 1 MiB in 2 s
    assert d.write_bytes_per_s == pytest.approx(4096 * 512 / 2)
    assert d.read_iops == pytest.approx(20.0)
    assert d.write_iops == pytest.approx(30.0)
    assert d.util_percent == pytest.approx(25.0)  # 500 ms busy of 2000
    assert d.await_ms == pytest.approx(3.0)  # (80 + 220) ms / 100 I/Os
    assert d.queue_depth == pytest.approx(1.5)  # 3000 ms weighted / 2000 ms
    assert d.in_flight == 4


def test_util_is_capped_and_await_none_without_io() -> None:
    prev = _sample(0.0, [_cpu(idle=1)], {"sda": _disk(io_ms=0), "sdb": _disk(5, 5, 5, 5, 5, 5)})
    cur = _sample(1.0, [_cpu(idle=2)], {"sda": _disk(io_ms=1050),
                                        "sdb": _disk(5, 5, 5, 5, 5, 5, in_flight=1)})
    r = host_rates(prev, cur)
    assert r.disks["sda"] is not None and r.disks["sda"].util_percent == 100.0
    sdb = r.disks["sdb"]
    assert sdb == DiskRates(0.0, 0.0, 0.0, 0.0, 0.0, None, 0.0, 1)


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(DiskCounters)
                                   if f.name != "in_flight"])
def test_counter_going_backwards_gives_none(field: str) -> None:
    base = _disk(100, 100, 100, 100, 100, 100, 0, 100, 100)
    back = dataclasses.replace(base, **{field: 5})
    ok = dataclasses.replace(base, reads=110)
    r = host_rates(_sample(0, [_cpu(idle=1)], {"sda": base, "sdb": base}),
                   _sample(1, [_cpu(idle=2)], {"sda": back, "sdb": ok}))
    assert r.disks["sda"] is None
    assert r.disks["sdb"] is not None and r.disks["sdb"].read_iops == pytest.approx(10.0)


def test_in_flight_dropping_is_not_a_reset() -> None:
    r = host_rates(_sample(0, [], {"sda": _disk(in_flight=30)}),
                   _sample(1, [], {"sda": _disk(in_flight=0)}))
    assert r.disks["sda"] is not None


def test_device_vanishing_and_appearing() -> None:
    r = host_rates(_sample(0, [_cpu(idle=1)], {"sda": _disk(1), "sdb": _disk(1)}),
                   _sample(1, [_cpu(idle=2)], {"sda": _disk(2), "sdc": _disk(1)}))
    assert r.disks["sdb"] is None  # vanished
    assert r.disks["sdc"] is None  # appeared
    assert r.disks["sda"] is not None


def test_no_time_elapsed() -> None:
    s = _sample(5.0, [_cpu(1, idle=1)], {"sda": _disk(1)})
    r = host_rates(s, s)
    assert r.disks == {"sda": None}
    assert r.cpu_percent is None and r.iowait_percent is None and r.per_cpu == ()


def test_cpu_count_change_and_iowait_going_backwards() -> None:
    r = host_rates(_sample(0, [_cpu(idle=1)], {}), _sample(1, [_cpu(idle=2), _cpu(idle=2)], {}))
    assert r.cpu_percent is None and r.per_cpu == ()
    # Linux's iowait may decrease: clamp, keep the rest.
    r = host_rates(_sample(0, [_cpu(user=1, idle=10, iowait=5)], {}),
                   _sample(1, [_cpu(user=2, idle=11, iowait=4)], {}))
    assert r.cpu_percent == pytest.approx(50.0)
    assert r.iowait_percent == 0.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**40), min_size=18, max_size=18),
       st.floats(0.001, 100), st.lists(st.floats(0, 1e6), min_size=16, max_size=16))
def test_rates_are_never_negative_or_over_100(c: list[int], dt: float, t: list[float]) -> None:
    prev = _sample(0.0, [_cpu(*t[:8])], {"d": _disk(*c[:9])})
    cur = _sample(dt, [_cpu(*t[8:])], {"d": _disk(*c[9:])})
    r = host_rates(prev, cur)
    for v in (r.cpu_percent, r.iowait_percent):
        assert v is None or 0.0 <= v <= 100.0
    for pc in r.per_cpu:
        assert all(0.0 <= x <= 100.0 for x in dataclasses.astuple(pc))
    d = r.disks["d"]
    if d is not None:
        assert 0.0 <= d.util_percent <= 100.0
        assert min(d.read_bytes_per_s, d.write_bytes_per_s, d.read_iops, d.write_iops,
                   d.queue_depth) >= 0.0
        assert d.await_ms is None or d.await_ms >= 0.0


# ---- the real machine -----------------------------------------------------------


def test_read_host_real_twice() -> None:
    a = read_host()
    tmp = tempfile.mkdtemp(prefix="pgparmon-host-")
    try:
        # Some real I/O between the samples, so the rates are not all zero.
        with open(os.path.join(tmp, "f"), "wb") as f:
            f.write(os.urandom(1 << 20))
            f.flush()
            os.fsync(f.fileno())
        time.sleep(0.2)
        b = read_host()
        dev = device_for_path(tmp)
    finally:
        os.unlink(os.path.join(tmp, "f"))
        os.rmdir(tmp)
    for s in (a, b):
        assert len(s.cpus) == psutil.cpu_count()
        assert 0 < s.mem_available <= s.mem_total
        assert s.load1 >= 0.0
        assert abs(s.wall - time.time()) < 60
        for c in s.disks.values():
            assert c.reads or c.writes or c.in_flight  # None: only devices with I/O
    assert b.ts > a.ts
    r = host_rates(a, b)
    assert r.cpu_percent is not None and 0.0 <= r.cpu_percent <= 100.0
    assert r.iowait_percent is not None and 0.0 <= r.iowait_percent <= 100.0
    assert r.mem_used_percent is not None and 0.0 < r.mem_used_percent <= 100.0
    assert len(r.per_cpu) == len(b.cpus)
    for d in r.disks.values():
        if d is not None:
            assert 0.0 <= d.util_percent <= 100.0
            assert d.read_bytes_per_s >= 0 and d.write_bytes_per_s >= 0
    if dev is not None and dev in a.disks and dev in b.disks:
        # Not rates: another process may share the device, only "some" can be said.
        assert b.disks[dev].write_sectors > a.disks[dev].write_sectors


def test_read_host_device_filter() -> None:
    every = _proc_diskstats()
    name = next(iter(every))
    assert set(read_host([name]).disks) == {name}
    assert read_host(["no-such-device"]).disks == {}
    assert read_host([]).disks == {}
    # The flags given are kept for the disks the sample holds.
    got = read_host([name], {name: True, "no-such-device": False})
    assert got.rotational == {name: True}
    assert read_host([name]).rotational == {}


def test_rates_carry_the_later_samples_rotational_flag() -> None:
    prev, cur = _pair()
    assert host_rates(prev, cur).disks["sda"].rotational is None  # type: ignore[union-attr]
    cur = dataclasses.replace(cur, rotational={"sda": True})
    assert host_rates(prev, cur).disks["sda"].rotational is True  # type: ignore[union-attr]


def test_device_for_root_and_tmp() -> None:
    names = _proc_diskstats()
    for p in ("/", tempfile.gettempdir()):
        d = device_for_path(p)
        assert d is None or d in names, (p, d)


def test_device_for_pseudo_filesystems() -> None:
    assert device_for_path("/proc") is None
    mounts = devices._parse_mountinfo(open("/proc/self/mountinfo").read())
    for m in mounts:
        if m.fstype == "tmpfs" and os.path.isdir(m.mountpoint) and m.mountpoint.startswith("/dev"):
            assert device_for_path(m.mountpoint) is None
            break


def test_device_for_missing_path_raises() -> None:
    with pytest.raises(OSError):
        device_for_path("/no/such/path/pgparmon")


def test_whole_disk_and_rotational_real() -> None:
    d = device_for_path("/")
    if d is None:
        pytest.skip("root is not on a block device here")
    w = whole_disk(d)
    assert w is not None
    assert w in _proc_diskstats()
    rot = rotational(d)
    try:
        want: bool | None = open(f"/sys/block/{w}/queue/rotational").read().strip() == "1"
    except OSError:
        want = None
    assert rot is want


# ---- fake sysfs and mount tables --------------------------------------------------


@pytest.fixture()
def fake_sys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sysfs with sda (spinning) + sda1, nvme0n1 + nvme0n1p2 and dm-0."""
    sysroot = tmp_path / "sys"
    devs = sysroot / "devices" / "pci0000:00"
    layout = {"sda": ("8:0", "1", ["sda1:8:1"]), "nvme0n1": ("259:0", "0", ["nvme0n1p2:259:2"])}
    for disk, (mm, rot, parts) in layout.items():
        dd = devs / "block" / disk
        (dd / "queue").mkdir(parents=True)
        (dd / "queue" / "rotational").write_text(rot + "\n")
        for part in parts:
            pname, pmm = part.split(":", 1)
            (dd / pname).mkdir()
            (dd / pname / "partition").write_text("1\n")
            _link(sysroot / "class" / "block" / pname, dd / pname)
            _link(sysroot / "dev" / "block" / pmm, dd / pname)
        _link(sysroot / "class" / "block" / disk, dd)
        _link(sysroot / "block" / disk, dd)
        _link(sysroot / "dev" / "block" / mm, dd)
    dm = sysroot / "devices" / "virtual" / "block" / "dm-0"
    (dm / "dm").mkdir(parents=True)
    (dm / "dm" / "name").write_text("vg-root\n")
    (dm / "queue").mkdir()
    (dm / "queue" / "rotational").write_text("0\n")
    _link(sysroot / "class" / "block" / "dm-0", dm)
    _link(sysroot / "block" / "dm-0", dm)
    _link(sysroot / "dev" / "block" / "253:0", dm)
    monkeypatch.setattr(devices, "_SYS", str(sysroot))
    return sysroot


def _link(at: Path, to: Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(os.path.relpath(to, at.parent))


def test_whole_disk_fake(fake_sys: Path) -> None:
    assert whole_disk("sda1") == "sda"
    assert whole_disk("nvme0n1p2") == "nvme0n1"
    assert whole_disk("sda") == "sda"
    assert whole_disk("dm-0") == "dm-0"
    assert whole_disk("sdq") is None


def test_rotational_fake(fake_sys: Path) -> None:
    assert rotational("sda1") is True
    assert rotational("sda") is True
    assert rotational("nvme0n1p2") is False
    assert rotational("dm-0") is False
    assert rotational("sdq") is None


def test_rotational_of_is_read_once(fake_sys: Path) -> None:
    names = ["sda1", "sda", "nvme0n1p2", "sdq"]
    assert rotational_of(names) == {"sda": True, "sda1": True, "nvme0n1p2": False}
    # Asked every tick but read once: a disk does not start or stop spinning.
    (fake_sys / "block" / "sda" / "queue" / "rotational").write_text("0\n")
    assert rotational("sda") is False
    assert rotational_of(["sda"]) == {"sda": True}
    assert rotational_of([]) == {}


def test_names_from_majmin_and_source(fake_sys: Path) -> None:
    assert devices._name_for_majmin(8, 1) == "sda1"
    assert devices._name_for_majmin(253, 0) == "dm-0"
    # Device nodes missing from this /dev: matched by name, dm by its dm name.
    assert devices._name_for_source("/dev/nvme0n1p2") == "nvme0n1p2"
    assert devices._name_for_source("/dev/mapper/vg-root") == "dm-0"
    assert devices._name_for_source("/dev/mapper/vg-other") is None


MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 27 0:45 / /srv/data rw,relatime shared:7 master:2 - btrfs /dev/nvme0n1p2 rw,subvol=/data
41 27 0:46 / /var/lib/docker/overlay2/abc/merged rw - overlay overlay \
rw,lowerdir=/l1:/l2,upperdir={upper},workdir=/w
42 27 0:47 / /run/my\\040dir rw - tmpfs tmpfs rw,size=10k
43 27 0:48 / /mnt/nfs rw - nfs4 server:/export rw
44 27 8:1 /backup /srv/data/bind rw - ext4 /dev/sda1 rw
"""


def test_parse_mountinfo() -> None:
    ms = devices._parse_mountinfo(MOUNTINFO.format(upper="/u") + "garbage line\n\n")
    assert len(ms) == 7
    assert ms[2].majmin == "0:45" and ms[2].fstype == "btrfs"
    assert ms[2].source == "/dev/nvme0n1p2" and ms[2].mountpoint == "/srv/data"
    assert ms[4].mountpoint == "/run/my dir"  # \040 unescaped


def test_mount_for() -> None:
    ms = devices._parse_mountinfo(MOUNTINFO.format(upper="/u"))

    def at(path: str, majmin: str) -> str:
        m = devices._mount_for(path, majmin, ms)
        assert m is not None
        return m.mountpoint

    # By device number, then the longest mount point above the path.
    assert at("/srv/data/x", "0:45") == "/srv/data"
    # A btrfs subvolume has its own anonymous number mountinfo does not list.
    assert at("/srv/data/snap/x", "0:99") == "/srv/data"
    assert at("/srv/data/bind/f", "8:1") == "/srv/data/bind"
    assert at("/srv/database", "0:99") == "/"
    assert at("/run/my dir/f", "0:47") == "/run/my dir"


def test_device_for_mount(fake_sys: Path, tmp_path: Path) -> None:
    upper = tmp_path / "upper dir"
    upper.mkdir()
    ms = {m.mountpoint: m for m in devices._parse_mountinfo(
        MOUNTINFO.format(upper=str(upper).replace(" ", "\\040")))}
    assert devices._device_for_mount(ms["/srv/data"], 0) == "nvme0n1p2"  # btrfs via its source
    assert devices._device_for_mount(ms["/run/my dir"], 0) is None  # tmpfs
    assert devices._device_for_mount(ms["/mnt/nfs"], 0) is None  # NFS
    assert devices._device_for_mount(ms["/proc"], 0) is None
    # Overlay: the upper dir's device. Real stat of tmp_path, fake sysfs, so
    # compare with device_for_path under the same fake tree.
    over = ms["/var/lib/docker/overlay2/abc/merged"]
    assert devices._device_for_mount(over, 0) == device_for_path(str(upper))
    gone = dataclasses.replace(over, superopts="rw,lowerdir=/l,upperdir=/no/such/upper")
    assert devices._device_for_mount(gone, 0) is None
    no_upper = dataclasses.replace(over, superopts="ro,lowerdir=/l")
    assert devices._device_for_mount(no_upper, 0) is None


def test_overlay_upper_on_real_machine(tmp_path: Path) -> None:
    line = (f"41 27 0:46 / /merged rw - overlay overlay "
            f"rw,lowerdir=/l,upperdir={tmp_path},workdir=/w\n")
    m = devices._parse_mountinfo(line)[0]
    assert devices._device_for_mount(m, 0) == device_for_path(str(tmp_path))


# ---- saturation -------------------------------------------------------------------

MB = 1e6


def _pt(k: int, mbs: float, **kw: Any) -> StreamPoint:
    return StreamPoint(streams=k, throughput=mbs * MB, **kw)


def test_saturated_by_await() -> None:
    pts = [_pt(1, 100, await_ms=1.0, queue_depth=1.0), _pt(2, 180, await_ms=1.2, queue_depth=2.1),
           _pt(4, 260, await_ms=2.6, queue_depth=5.0), _pt(8, 265, await_ms=5.0, queue_depth=10)]
    assert saturation(pts) == Saturation(
        True, 4, "disk saturated at about 4 streams: await 2.6x the single-stream value "
                 "while queue depth grows")
    shuffled = pts[:]
    random.Random(1).shuffle(shuffled)
    assert saturation(shuffled) == saturation(pts)


def test_await_sign_found_beyond_the_knee() -> None:
    pts = [_pt(1, 100, await_ms=1.0, queue_depth=1.0), _pt(2, 180, await_ms=1.2, queue_depth=2),
           _pt(4, 300, await_ms=1.6, queue_depth=3.5), _pt(8, 310, await_ms=2.6, queue_depth=7)]
    s = saturation(pts)
    assert s.saturated and s.at_streams == 4
    assert s.reason.endswith("(at 8 streams)")


def test_await_without_queue_growth_is_no_sign() -> None:
    pts = [_pt(1, 100, await_ms=1.0, queue_depth=2.0), _pt(2, 190, await_ms=1.2, queue_depth=2.0),
           _pt(4, 200, await_ms=3.0, queue_depth=2.1)]
    s = saturation(pts)
    assert not s.saturated and s.at_streams == 2
    assert "with no disk sign: look at CPU" in s.reason


def test_still_rising_even_with_disk_signs() -> None:
    pts = [_pt(1, 100, await_ms=1.0, queue_depth=1.0), _pt(2, 195, await_ms=2.5, queue_depth=3),
           _pt(4, 380, await_ms=3.0, queue_depth=6, util_percent=100, rotational=True)]
    s = saturation(pts)
    assert s == Saturation(False, None, s.reason)
    assert s.reason.startswith("throughput still rising: 380.0 MB/s at 4 streams")


def test_ssd_at_full_util_is_not_saturated() -> None:
    # %util 100 means little on SSD / NVMe: flat and no real sign = look elsewhere.
    pts = [_pt(k, mbs, util_percent=100.0, rotational=False, await_ms=0.2, queue_depth=1.0)
           for k, mbs in ((1, 100), (2, 104), (4, 105))]
    s = saturation(pts)
    assert not s.saturated and s.at_streams == 1
    assert "flat" in s.reason and "no disk sign: look at CPU" in s.reason


def test_rotational_busy() -> None:
    pts = [_pt(1, 100, util_percent=60, rotational=True),
           _pt(2, 150, util_percent=85, rotational=True),
           _pt(4, 155, util_percent=95, rotational=True)]
    s = saturation(pts)
    assert s.saturated and s.at_streams == 2
    assert "rotational disk 95% busy (at 4 streams)" in s.reason
    unknown = [dataclasses.replace(p, rotational=None) for p in pts]
    assert not saturation(unknown).saturated


def test_ceiling() -> None:
    pts = [_pt(k, mbs, ceiling_bytes_per_s=500 * MB) for k, mbs in
           ((1, 200), (2, 380), (4, 450), (8, 460))]
    s = saturation(pts)
    assert s.saturated and s.at_streams == 4
    assert "90% of the measured ceiling of 500.0 MB/s" in s.reason


def test_throughput_dropping_past_the_knee() -> None:
    pts = [_pt(1, 100, await_ms=1, queue_depth=1), _pt(2, 190, await_ms=1.1, queue_depth=2),
           _pt(4, 250, await_ms=2.5, queue_depth=4), _pt(8, 200, await_ms=6, queue_depth=8)]
    s = saturation(pts)
    assert s.saturated and s.at_streams == 4


def test_gain_is_judged_per_doubling() -> None:
    # +9% from 4 to 5 streams is most of the ideal +25%: still rising.
    rising = [_pt(1, 100), _pt(2, 200), _pt(4, 400), _pt(5, 436)]
    assert saturation(rising).at_streams is None
    # +9% from 4 to 8 is flat.
    flat = [_pt(1, 100), _pt(2, 200), _pt(4, 400), _pt(8, 436)]
    assert saturation(flat).at_streams == 4


def test_noisy_dip_in_a_rising_series() -> None:
    pts = [_pt(1, 100), _pt(2, 190), _pt(4, 185), _pt(8, 370)]
    s = saturation(pts)
    assert s.at_streams is None and "still rising" in s.reason


def test_baseline_other_than_one_stream() -> None:
    pts = [_pt(2, 200, await_ms=1.0, queue_depth=2), _pt(4, 300, await_ms=1.5, queue_depth=3),
           _pt(8, 310, await_ms=3.0, queue_depth=8)]
    s = saturation(pts)
    assert s.saturated and s.at_streams == 4
    assert "the 2-stream value" in s.reason


def test_short_windows_and_too_few_points() -> None:
    assert "not enough steady windows" in saturation([]).reason
    assert saturation([_pt(1, 100)]) == Saturation(False, None, saturation([]).reason)
    pts = [_pt(1, 100, samples=5), _pt(2, 105, samples=2)]  # 2 samples: not steady
    assert saturation(pts).at_streams is None
    assert "not enough" in saturation(pts).reason
    assert saturation([_pt(1, 0), _pt(2, 0)]) == Saturation(
        False, None, "no throughput in the steady windows")


def test_duplicates_are_averaged() -> None:
    pts = [_pt(1, 100), _pt(2, 150), _pt(2, 250), _pt(4, 205)]  # 2 streams: mean 200
    assert saturation(pts).at_streams == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.builds(
    StreamPoint, streams=st.integers(-1, 64),
    throughput=st.floats(allow_nan=True, allow_infinity=True, min_value=None),
    await_ms=st.none() | st.floats(0, 1e4), queue_depth=st.none() | st.floats(0, 1e3),
    util_percent=st.none() | st.floats(0, 100), rotational=st.none() | st.booleans(),
    ceiling_bytes_per_s=st.none() | st.floats(0, 1e12),
    samples=st.none() | st.integers(0, 10)), max_size=8))
def test_saturation_total(points: list[StreamPoint]) -> None:
    s = saturation(points)
    assert s.reason
    if s.saturated:
        assert s.at_streams is not None
    if s.at_streams is not None:
        assert s.at_streams in {p.streams for p in points}


# ---- a spinning disk, from the readings to the live advice ---------------------


def _busy_run(rot: dict[str, bool]) -> list[dict[str, Any]]:
    """Sample docs as the monitor makes them, 1 s apart, for 6 s at each of
    1, 2 and 4 streams copying 100, 150 and 155 MB/s (flat from 2 on) onto a
    disk 60%, 85% and 95% busy with steady await and queue depth: host
    samples through a recording's round trip, then host_rates and the
    monitor's host part of a doc, as a live run or a replay does."""
    docs: list[dict[str, Any]] = []
    done: dict[int, int] = {}
    counters = _disk()
    prev: HostSample | None = None
    t = 0
    for streams, mbs, util in ((1, 100, 60), (2, 150, 85), (4, 155, 95)):
        for _ in range(6):
            counters = dataclasses.replace(
                counters, writes=counters.writes + 100, write_ms=counters.write_ms + 200,
                write_sectors=counters.write_sectors + int(mbs * MB / 512),
                io_ms=counters.io_ms + util * 10, weighted_ms=counters.weighted_ms + 200)
            sample = dataclasses.replace(
                _sample(float(t), [_cpu(user=t, idle=3 * t)], {"sda1": counters}),
                rotational=rot)
            snap = Snapshot(ts=float(t), wall=sample.wall, db=None, host=sample)
            host = Snapshot.from_dict(json.loads(json.dumps(snap.to_dict()))).host
            hr = host_rates(prev, host) if prev is not None else None
            prev = host
            disks = {n: d for n, d in (hr.disks.items() if hr else ()) if d is not None}
            workers = []
            for pid in range(1, streams + 1):
                done[pid] = done.get(pid, 0) + int(mbs * MB / streams)
                workers.append({"pid": pid, "phase": "copy", "item": f"t{pid}",
                                "bytes_done": done[pid]})
            docs.append({"elapsed_s": float(t),
                         "job": {"jobs": 4, "state": "running", "active_workers": streams,
                                 "items_total": 100, "items_done": 0},
                         "workers": workers, "server": {"error": None},
                         "host": host_load(hr, disks).to_json()})
            t += 1
    return docs


def test_spinning_disk_busy_and_flat_is_saturated_live(fake_sys: Path) -> None:
    # The flag as a live source reads it: once, from sysfs (sda1 is on the
    # spinning sda of the fake tree).
    rot = rotational_of(["sda1"])
    assert rot == {"sda1": True}
    docs = _busy_run(rot)
    assert docs[-1]["host"]["disks"]["sda1"]["rotational"] is True
    a = advise_samples(read_samples(docs))
    assert a.status == "saturated" and a.next_jobs == 2
    assert "rotational disk 95% busy (at 4 streams)" in a.detail
    # Not known to spin (an SSD, or a recording made before the flag): %util
    # alone is no sign, so the same run is only "flat".
    for unknown in ({}, {"sda1": False}):
        b = advise_samples(read_samples(_busy_run(unknown)))
        assert b.status == "flat" and b.next_jobs == 2 and "no disk sign" in b.detail


def test_children_from_proc_match_a_scan_of_the_process_table() -> None:
    """The job's children are read every sample from /proc/PID/task/*/
    children (what each of its threads forked), not by scanning every
    process; the answer is the one psutil's scan gives, a child forked by a
    second thread included, and a whole tree level by level."""
    import subprocess
    import sys

    import psutil

    from pgparmon.readers import procs

    code = ("import subprocess, sys, threading, time\n"
            "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])]\n"
            "def more():\n"
            "    kids.append(subprocess.Popen(['sleep', '30']))\n"
            "t = threading.Thread(target=more); t.start(); t.join()\n"
            "sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(30)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline() == "ready\n"
        scanned = sorted(c.pid for c in psutil.Process(parent.pid).children())
        assert len(scanned) == 2
        assert procs._proc_children(parent.pid) == scanned  # /proc answered
        assert procs.children(parent.pid) == scanned
        tree = procs.tree_pids(parent.pid)
        assert tree[0] == parent.pid and sorted(tree[1:]) == scanned
        assert procs.children(2 ** 22 + 12345) == [] and procs.tree_pids(2 ** 22 + 12345) == []
    finally:
        for c in psutil.Process(parent.pid).children(recursive=True):
            c.kill()
        parent.kill()
        parent.wait()


def test_process_objects_are_kept_while_the_pid_names_the_same_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """read_procs keeps psutil's object of a pid between samples (making
    one parses /proc/PID/stat), and makes a new one when the pid's start
    time says it names another process now (pid reuse)."""
    import subprocess
    import sys

    from pgparmon.readers import procs

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        a = procs.read_procs([child.pid])
        kept = procs._KEPT[child.pid][1]
        b = procs.read_procs([child.pid])
        assert procs._KEPT[child.pid][1] is kept
        assert a[0].pid == b[0].pid == child.pid and b[0].create_time == a[0].create_time
        assert b[0].cpu_user is not None
        # the same pid, another start time: another process
        real = procs._start_ticks
        monkeypatch.setattr(procs, "_start_ticks", lambda pid: b"1" + (real(pid) or b""))
        procs.read_procs([child.pid])
        assert procs._KEPT[child.pid][1] is not kept
    finally:
        child.kill()
        child.wait()
    monkeypatch.undo()
    assert procs.read_procs([child.pid]) == ()
    assert child.pid not in procs._KEPT
