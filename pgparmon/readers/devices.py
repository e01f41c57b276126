"""Which block device holds a path, the whole disk of a partition, and
whether a disk spins: the /proc/diskstats names a host sample is asked to
read, and what is known about them once (it does not change while we run).
"""

from __future__ import annotations

import functools
import glob
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .host import _diskstats_entries, _read_text

# Roots of the kernel's pseudo file systems; module-level so that tests can
# point them at a fake tree.
_PROC = "/proc"
_SYS = "/sys"


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


@functools.cache
def _rotational_once(sys_root: str, name: str) -> bool | None:
    # sys_root is only part of the key: tests point _SYS at fake trees.
    return rotational(name)


def rotational_of(names: Iterable[str]) -> dict[str, bool]:
    """rotational() of each name that has an answer (unknown names are left
    out), for `read_host`. Read once per name for the life of the process: a
    disk does not start or stop spinning, and this is asked every tick."""
    out: dict[str, bool] = {}
    for n in sorted(names):
        v = _rotational_once(_SYS, n)
        if v is not None:
            out[n] = v
    return out
