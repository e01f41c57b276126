"""Client processes on this host: find pg_dump / pg_restore trees, read what
each process does (CPU, file positions), and link processes to backends."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from ..snapshot import ClientProc, OpenFile


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    name: str
    cmdline: tuple[str, ...]
    create_time: float
    username: str | None


def scan_job_processes(programs: Iterable[str]) -> list[ProcInfo]:
    """Every process of these client programs visible on this host."""
    progs = set(programs)
    out = []
    for p in psutil.process_iter(["pid", "ppid", "name", "cmdline", "create_time", "username"]):
        info = p.info  # type: ignore[attr-defined]
        name = info.get("name") or ""
        cmd = info.get("cmdline") or []
        base = os.path.basename(cmd[0]) if cmd else name
        if name in progs or base in progs:
            out.append(ProcInfo(info["pid"], info.get("ppid") or 0, base if base in progs else name,
                                tuple(cmd), info.get("create_time") or 0.0,
                                info.get("username")))
    return out


def process_trees(procs: list[ProcInfo]) -> dict[int, list[ProcInfo]]:
    """Group job processes into trees: root pid -> [root, workers...]. A worker
    is a process of the same program whose parent is in the set."""
    by_pid = {p.pid: p for p in procs}
    roots: dict[int, list[ProcInfo]] = {}
    for p in procs:
        parent = by_pid.get(p.ppid)
        if parent is not None and parent.name == p.name:
            continue
        roots[p.pid] = [p]
    for p in procs:
        if p.pid in roots:
            continue
        q = p
        seen = 0
        while q.ppid in by_pid and q.pid not in roots and seen < 8:
            q = by_pid[q.ppid]
            seen += 1
        if q.pid in roots:
            roots[q.pid].append(p)
    return roots


def tcp_ports(pid: int, server_port: int) -> tuple[set[int], bool]:
    """Local ports of this process's TCP connections to `server_port`, and
    whether its sockets could be read at all."""
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return set(), False
    except psutil.NoSuchProcess:
        return set(), True
    return {c.laddr.port for c in conns if c.raddr and c.raddr.port == server_port}, True


_SS_LINE = re.compile(r"^u_\w+\s+\S+\s+\d+\s+\d+\s+(.*?)\s+(\d+)\s+(\S+)\s+(\d+)(?:\s+(users:.*))?$")
_SS_USER = re.compile(r"pid=(\d+)")


def unix_peers() -> dict[int, set[int]] | None:
    """pid -> pids at the other end of its unix stream sockets, from `ss -xpn`
    (socket diagnostics; the only way to pair unix sockets). None when ss is
    missing. Only sockets of processes we may inspect show their owners."""
    try:
        out = subprocess.run(["ss", "-xpn"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    owners: dict[int, set[int]] = {}
    peer_of: dict[int, int] = {}
    for line in out.splitlines()[1:]:
        m = _SS_LINE.match(line.strip())
        if not m:
            continue
        inode, peer = int(m.group(2)), int(m.group(4))
        peer_of[inode] = peer
        if m.group(5):
            owners[inode] = {int(x) for x in _SS_USER.findall(m.group(5))}
    result: dict[int, set[int]] = {}
    for inode, pids in owners.items():
        other = owners.get(peer_of.get(inode, -1), set())
        for pid in pids:
            result.setdefault(pid, set()).update(other - {pid})
    return result


def read_procs(pids: Iterable[int], files_under: str | None = None) -> tuple[ClientProc, ...]:
    """CPU, I/O and open files of each process. Another user's process gives
    what it can (None for the unreadable fields), a vanished one is left out."""
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            with p.oneshot():
                name = p.name()
                ppid = p.ppid()
                ctime = p.create_time()
                status = p.status()
                try:
                    ct = p.cpu_times()
                    cu, cs = ct.user, ct.system
                except psutil.AccessDenied:
                    cu = cs = None
                try:
                    io = p.io_counters()
                    rc, wc = io.read_chars, io.write_chars
                except (psutil.AccessDenied, AttributeError):
                    rc = wc = None
                files: tuple[OpenFile, ...] | None
                if files_under is None:
                    files = ()
                else:
                    try:
                        files = tuple(OpenFile(f.path, f.position, f.mode) for f in p.open_files()
                                      if f.path.startswith(files_under))
                    except psutil.AccessDenied:
                        files = None
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        except psutil.AccessDenied:
            out.append(ClientProc(pid, None, "?", None, None, None, None, None, None, None))
            continue
        out.append(ClientProc(pid, ppid, name, ctime, status, cu, cs, rc, wc, files))
    return tuple(out)


def children(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def postmaster_of(backend_pid: int) -> int | None:
    """The postmaster of a local server (the parent of our own backend), or
    None when the server is not on this host or not visible."""
    try:
        p = psutil.Process(backend_pid)
        parent = p.parent()
    except psutil.Error:
        return None
    if parent is None:
        return None
    try:
        if "postgres" in parent.name() or "postmaster" in parent.name():
            return parent.pid
    except psutil.Error:
        return None
    return None


def server_is_local(backend_pid: int) -> bool:
    """The server runs on this host (our own backend is a child of a
    postmaster we can see): then its data directory, memory and disks are
    ours to read."""
    try:
        return postmaster_of(backend_pid) is not None
    except Exception:  # noqa: BLE001 - /proc unreadable: treat as remote
        return False


def environ_port(pid: int) -> tuple[int | None, bool]:
    """PGPORT in the process's environment, and whether it could be read at
    all (another user's environment cannot)."""
    try:
        env = psutil.Process(pid).environ()
    except psutil.Error:
        return None, False
    try:
        return (int(env["PGPORT"]) if "PGPORT" in env else None), True
    except ValueError:
        return None, True


def environ_appname(pid: int) -> str | None:
    try:
        return psutil.Process(pid).environ().get("PGAPPNAME")
    except psutil.Error:
        return None
