"""Client processes on this host: find pg_dump / pg_restore trees, read what
each process does (CPU, file positions), and link processes to backends."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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


_SS_LINE = re.compile(
    r"^u_\w+\s+\S+\s+\d+\s+\d+\s+(.*?)\s+(\d+)\s+(\S+)\s+(\d+)(?:\s+(users:.*))?$")
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


# psutil's process objects of the pids read each sample, with the start time
# (clock ticks after boot, from /proc/PID/stat) of the process they were made
# for: making one reads and parses /proc/PID/stat (~30 us); reading the start
# time again is one small read, and a pid that names another process now
# (reused) gets a new object.
_KEPT: dict[int, tuple[bytes, psutil.Process]] = {}
_KEPT_MAX = 4096


def _start_ticks(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    return fields[19] if len(fields) > 19 else None  # field 22: starttime


_BOOTED: list[float] = []  # the boot time (unix), to the microsecond: read once


def started_at(p: psutil.Process) -> float:
    """When the process began (unix time), to the kernel's clock tick: its
    start in ticks since boot, after the boot time that the wall and boot
    clocks give now. psutil's create_time adds it to the boot time in whole
    seconds (/proc/stat `btime`), up to a second early: too coarse for a
    job's elapsed time."""
    ticks = _start_ticks(p.pid)
    if ticks is None or not hasattr(time, "CLOCK_BOOTTIME"):
        return float(p.create_time())
    if not _BOOTED:
        _BOOTED.append(time.time() - time.clock_gettime(time.CLOCK_BOOTTIME))
    return _BOOTED[0] + int(ticks) / os.sysconf("SC_CLK_TCK")


def _process(pid: int) -> psutil.Process:
    """A psutil.Process for pid, the one made at an earlier sample while pid
    still names the same process (raises as psutil.Process does)."""
    start = _start_ticks(pid)
    kept = _KEPT.get(pid)
    if kept is not None and start is not None and kept[0] == start:
        return kept[1]
    p = psutil.Process(pid)
    if start is None:
        _KEPT.pop(pid, None)
        return p
    if len(_KEPT) >= _KEPT_MAX:
        _KEPT.clear()
    _KEPT[pid] = (start, p)
    return p


def read_procs(pids: Iterable[int], files_under: str | None = None) -> tuple[ClientProc, ...]:
    """CPU, I/O and open files of each process. Another user's process gives
    what it can (None for the unreadable fields), a vanished one is left out."""
    out = []
    for pid in pids:
        try:
            p = _process(pid)
            with p.oneshot():
                name = p.name()
                ppid = p.ppid()
                ctime = started_at(p)
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
            _KEPT.pop(pid, None)
            continue
        except psutil.AccessDenied:
            out.append(ClientProc(pid, None, "?", None, None, None, None, None, None, None))
            continue
        out.append(ClientProc(pid, ppid, name, ctime, status, cu, cs, rc, wc, files))
    return tuple(out)


_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def threads_of(pid: int) -> list[list[Any]] | None:
    """The threads of one process in the order they were made, the main
    thread first: [tid, state (R, S, D...), CPU seconds] each, from
    /proc/PID/task/*/stat (readable for any user's process); None when the
    process is gone or /proc cannot be read. A tool that works with threads
    (pg_probackup -j N) shows them here, not as processes. Thread ids do not
    say the order: they wrap around with the pids."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return None
    found: list[tuple[tuple[bool, int, int], list[Any]]] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # a thread that ended between the listing and the read
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) < 20:
            continue
        # fields 3, 14, 15 and 22 of stat: state, utime, stime (clock
        # ticks), its start (clock ticks after boot)
        found.append(((tid != pid, int(fields[19]), tid),
                      [tid, fields[0].decode("ascii", "replace"),
                       round((int(fields[11]) + int(fields[12])) / _HZ, 2)]))
    return [t for _, t in sorted(found)]


def children(pid: int) -> list[int]:
    """The direct children of a process, from /proc/PID/task/*/children
    (one small read per thread of it; any thread may have forked them);
    psutil's scan of the whole process table when the kernel has no such
    file or it cannot be read. Called every sample for the job's client."""
    found = _proc_children(pid)
    if found is not None:
        return found
    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def _proc_children(pid: int) -> list[int] | None:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    out: set[int] = set()
    read_one = False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                out.update(int(x) for x in f.read().split())
            read_one = True
        except FileNotFoundError:
            continue  # that thread ended (or no such file: the fallback below)
        except (OSError, ValueError):
            return None
    return sorted(out) if read_one else None


def alive(pid: int) -> bool:
    """The process exists and is not a zombie: one read of /proc/PID/stat
    (called for the job's processes every sample), psutil elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    except OSError:
        stat = b""
    if stat:
        # "pid (comm) S ...": the state follows the last ')' (comm may hold any)
        return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] not in (b"Z", b"X", b"")
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


# ---- any client program: link sessions to processes, find the job's tree ----

# shells: a shell running a script is the job's launcher; an interactive one
# (no script argument, or a session leader) is where a job's tree stops
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "fish"})
# programs that start a command and wait for it: part of the job's tree
LAUNCHERS = frozenset({"xargs", "parallel", "timeout", "env", "nice", "ionice", "nohup",
                       "make", "flock", "chrt", "taskset", "stdbuf"})
# interpreters: the same name runs unrelated programs, so a worker of the same
# program has the same command line (fork) or is multiprocessing's child
INTERPRETERS = ("python", "perl", "ruby", "node", "java", "php", "Rscript", *SHELLS)


def backend_clients(server_port: int, backends: Iterable[Any],
                    peers: dict[int, set[int]] | None) -> dict[int, int]:
    """backend pid -> the local process at the other end of its connection:
    TCP by the client's port (and address), unix sockets by their peer (ss).
    Only what this user may see: other users' sockets show no owner."""
    bl = list(backends)
    bpids = {b.pid for b in bl}
    by_port = {b.client_port: b for b in bl if b.client_port and b.client_port > 0}
    out: dict[int, int] = {}
    if by_port:
        try:
            conns = psutil.net_connections(kind="tcp")
        except (psutil.AccessDenied, OSError):
            conns = []
        for c in conns:
            if not c.pid or c.pid in bpids or not c.raddr or c.raddr.port != server_port:
                continue
            b = by_port.get(c.laddr.port)
            if b is not None and _same_addr(b.client_addr, c.laddr.ip):
                out[b.pid] = c.pid
    for cpid, others in sorted((peers or {}).items()):
        if cpid in bpids:
            continue
        for bp in others & bpids:
            out.setdefault(bp, cpid)
    return out


def _same_addr(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return False
    return a.removeprefix("::ffff:") == b.removeprefix("::ffff:")


def _info(pid: int) -> ProcInfo | None:
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            cmd = tuple(p.cmdline())
            name = p.name()
            base = os.path.basename(cmd[0]) if cmd else name
            return ProcInfo(pid, p.ppid(), base or name, cmd, p.create_time(), None)
    except psutil.Error:
        return None


def proc_info(pid: int) -> ProcInfo | None:
    return _info(pid)


def _same_program(child: ProcInfo, parent: ProcInfo) -> bool:
    """A worker of the same program (pg_dump's workers, a multiprocessing pool)."""
    if child.name != parent.name:
        return False
    if child.cmdline == parent.cmdline:
        return True
    if any(child.name.startswith(i) for i in INTERPRETERS):
        # fork copies the command line; spawn / forkserver name multiprocessing;
        # a tool starting itself again runs the same script
        if any(a == "--multiprocessing-fork" or a.startswith("from multiprocessing.")
               for a in child.cmdline):
            return True
        script = _script(child.cmdline)
        return script is not None and script == _script(parent.cmdline)
    return True


def _script(cmdline: tuple[str, ...]) -> str | None:
    """The script an interpreter runs (its first argument that is not an
    option); None for -c / -m code."""
    for a in cmdline[1:]:
        if a in ("-c", "-m", "-e"):
            return None
        if not a.startswith("-"):
            return a
    return None


def _is_session_leader(pid: int) -> bool:
    try:
        return os.getsid(pid) == pid
    except OSError:
        return True


def _launches_jobs(p: ProcInfo) -> bool:
    """A process whose children are the job (a shell running a script, xargs,
    GNU parallel...), not a boundary (an interactive shell, sshd, init, a
    terminal multiplexer, the session leader)."""
    if p.pid <= 1 or _is_session_leader(p.pid):
        return False
    name = p.name.lstrip("-")
    if name in LAUNCHERS:
        return True
    if name in SHELLS:
        args = p.cmdline[1:]
        return any(a == "-c" or not a.startswith("-") for a in args)
    return False


def step_shell(root: ProcInfo) -> int | None:
    """The shell a tool's process was started by (an interactive one, or
    one running a script or a `-c` string), which may start the next step
    of the same work when this one ends; None: another parent."""
    parent = _info(root.ppid) if root.ppid > 1 else None
    if parent is None or parent.name.lstrip("-") not in SHELLS:
        return None
    return parent.pid


def own_ancestors() -> frozenset[int]:
    """This process (the monitor) and every process above it."""
    out: set[int] = set()
    pid = os.getpid()
    while pid > 1 and pid not in out and len(out) < 64:
        out.add(pid)
        try:
            pid = psutil.Process(pid).ppid()
        except psutil.Error:
            break
    return frozenset(out)


def job_root(pid: int, stop_at: frozenset[int] | None = None) -> int:
    """The root of the job a client process belongs to: up through workers
    of the same program, then up through the scripts and launchers that
    started it, stopping below an interactive shell, the session leader,
    sshd, init or systemd (anything else that is not a launcher), and below
    the monitor's own ancestors (`stop_at`, default `own_ancestors()`): a
    script that starts a loader in the background and then `pgparmon attach`
    lives as long as the monitor does, so it cannot be the job's root (the
    job would end only with the monitor)."""
    cur = _info(pid)
    if cur is None:
        return pid
    mine = own_ancestors() if stop_at is None else stop_at
    seen = 0
    while seen < 32:
        seen += 1
        parent = _info(cur.ppid) if cur.ppid > 1 else None
        if parent is None or parent.pid in mine:
            break
        if _same_program(cur, parent) and (parent.name not in SHELLS
                                           or _launches_jobs(parent)):
            cur = parent  # a worker's parent (a service's may be a session leader)
            continue
        if _launches_jobs(parent):
            cur = parent
            continue
        break
    return cur.pid


def tree_pids(root: int) -> list[int]:
    """The root and every descendant that is alive now (children() level by
    level: no scan of the whole process table while /proc says)."""
    if not alive(root):
        return []
    out, todo, seen = [root], [root], {root}
    while todo:
        for c in children(todo.pop()):
            if c not in seen:
                seen.add(c)
                out.append(c)
                todo.append(c)
    return out


_NOT_INPUT = ("/proc/", "/sys/", "/dev/", "/usr/", "/lib", "/etc/", "/bin/", "/sbin/",
              "/opt/", "/snap/", "/var/lib/")
_NOT_INPUT_EXT = (".py", ".pyc", ".so", ".log", ".pth", ".sh", ".sql")


def is_input_file(f: OpenFile) -> bool:
    """A regular file a loader reads its data from: opened read-only, not
    the program's own code, libraries or the system's files."""
    if f.mode != "r" or any(f.path.startswith(p) for p in _NOT_INPUT):
        return False
    if f.path.endswith(_NOT_INPUT_EXT) or ".so." in f.path:
        return False
    if "/." in f.path:  # ~/.pgpass, ~/.psqlrc, ~/.postgresql/ certificates: settings
        return False
    return "/site-packages/" not in f.path and "/__pycache__/" not in f.path


def tree_backends(tree: Iterable[int], server_port: int,
                  peers: dict[int, set[int]] | None) -> set[int]:
    """Pids at the server end of the tree's connections (backends, as far as
    this user may see them): unix socket peers, and for TCP the processes
    listening on the server's port whose peer port is one of the tree's."""
    tree = set(tree)
    out: set[int] = set()
    for p in tree:
        out |= (peers or {}).get(p, set()) - tree
    ports: set[int] = set()
    for p in tree:
        ports |= tcp_ports(p, server_port)[0]
    if ports:
        try:
            conns = psutil.net_connections(kind="tcp")
        except (psutil.AccessDenied, OSError):
            conns = []
        out |= {c.pid for c in conns if c.pid and c.laddr.port == server_port and c.raddr
                and c.raddr.port in ports}
    return out


def client_of_backend(pid: int, server_port: int,
                      peers: dict[int, set[int]] | None) -> int | None:
    """The local client process of a backend, found from the server's side."""
    for cpid, others in sorted((peers or {}).items()):
        if pid in others and cpid != pid and not _is_postgres(cpid):
            return cpid
    try:
        mine = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return None
    rports = {c.raddr.port for c in mine if c.raddr and c.laddr.port == server_port}
    if not rports:
        return None
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return None
    for c in conns:
        if c.pid and c.pid != pid and c.laddr.port in rports and c.raddr \
                and c.raddr.port == server_port:
            return int(c.pid)
    return None


def _is_postgres(pid: int) -> bool:
    try:
        n = psutil.Process(pid).name()
    except psutil.Error:
        return False
    return n.startswith("postgres") or n.startswith("postmaster")


def job_backends_of(pid: int, server_port: int) -> set[int]:
    """`--pid` given before the job is known: the backends of the process tree
    that pid belongs to (pid a client process or one of its backends), so that
    a first sample sees them even when they are idle between batches."""
    peers = unix_peers()
    client = pid
    if _is_postgres(pid):
        c = client_of_backend(pid, server_port, peers)
        if c is None:
            return {pid}
        client = c
    return {pid} | tree_backends(tree_pids(job_root(client)), server_port, peers)
