"""Find the job: pg_dump / pg_restore process trees on this host that talk to
the server we are connected to, and COPY pools seen only on the server.

Membership of backends is decided by the server-side grouping rule (database,
application_name, and for a dump the shared snapshot's backend_xmin); the
process tree, client ports and unix socket peers, when visible, say which
tree is ours and which client process drives which backend.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace

from .cmdline import ClientArgs, parse_client_cmdline
from .exitcodes import ExitCode
from .readers import procs
from .readers.db import ServerFacts
from .redact import redact_argv
from .snapshot import Backend, DbSample

COPY_FROM = re.compile(r"^\s*copy\s+(.+?)\s*(\(.*\))?\s+from\s", re.IGNORECASE | re.DOTALL)
COPY_TO = re.compile(r"^\s*copy\s+(.+?)\s*(\(.*\))?\s+to\s", re.IGNORECASE | re.DOTALL)


class DiscoveryError(RuntimeError):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Job:
    kind: str  # "pg_dump" | "pg_restore" | "copy"
    database: str | None
    client_pid: int | None = None
    jobs: int | None = None
    format: str | None = None
    target: str | None = None  # dump directory / archive path
    command: tuple[str, ...] = ()  # redacted
    app_name: str | None = None  # exact application_name when we tagged the job
    xmin: str | None = None  # a dump's shared snapshot
    usename: str | None = None
    client_addr: str | None = None
    relation: str | None = None  # a COPY pool's target table
    pid_hint: frozenset[int] = field(default_factory=frozenset)  # backends seen at discovery
    args: ClientArgs | None = None

    def describe(self) -> str:
        who = f"pid {self.client_pid}" if self.client_pid else "remote client"
        j = f" -j {self.jobs}" if self.jobs else ""
        tgt = f" {self.target}" if self.target else ""
        rel = f" into {self.relation}" if self.relation else ""
        return f"{self.kind}{j}{tgt}{rel} on database {self.database or '?'} ({who})"


def copy_target(query: str | None) -> tuple[str, str] | None:
    """('from'|'to', table) of a COPY statement, or None."""
    if not query:
        return None
    m = COPY_FROM.match(query)
    if m:
        return "from", _unquote_rel(m.group(1))
    m = COPY_TO.match(query)
    if m:
        return "to", _unquote_rel(m.group(1))
    return None


def _unquote_rel(s: str) -> str:
    s = s.strip()
    if s.upper().startswith("ONLY "):
        s = s[5:].strip()
    parts = re.findall(r'"((?:[^"]|"")*)"|([^."\s]+)', s)
    names = [q.replace('""', '"') if q else u for q, u in parts]
    return ".".join(names[-2:]) if names else s


def program_of(app: str | None) -> str | None:
    if not app:
        return None
    for prog in procs.JOB_PROGRAMS:
        if app.startswith(prog):
            return prog
    return None


def belongs(job: Job, b: Backend) -> bool:
    """The grouping rule: does this backend belong to this job?"""
    if b.backend_type == "parallel worker":
        return False  # counted through its leader
    if job.database and b.datname != job.database:
        return False
    if job.app_name:
        return b.application_name == job.app_name
    if job.kind in ("pg_dump", "pg_restore"):
        if program_of(b.application_name) != job.kind:
            return False
        if job.kind == "pg_dump" and job.xmin and b.backend_xmin and b.backend_xmin != job.xmin:
            return False
        return True
    ct = copy_target(b.query)
    return (ct is not None and ct[0] == "from" and b.usename == job.usename
            and b.application_name == (job.app_name or b.application_name)
            and b.client_addr == job.client_addr and _same_rel(ct[1], job.relation))


def _same_rel(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return a == b
    return a == b or a.split(".")[-1] == b.split(".")[-1]


def _is_local_server(facts: ServerFacts) -> bool:
    return procs.postmaster_of(facts.backend_pid) is not None


def _tree_talks_to_us(tree: list[procs.ProcInfo], args: ClientArgs, facts: ServerFacts,
                      db: DbSample, peers: dict[int, set[int]] | None) -> tuple[bool, set[int]]:
    """Whether this process tree is connected to our server, with the backend
    pids it is linked to when that can be seen."""
    backend_pids = {b.pid for b in db.backends}
    by_port = {b.client_port: b.pid for b in db.backends if b.client_port and b.client_port > 0}
    linked: set[int] = set()
    readable = False
    for p in tree:
        ports, ok = procs.tcp_ports(p.pid, facts.port)
        readable |= ok
        linked |= {by_port[pt] for pt in ports if pt in by_port}
        if peers is not None:
            linked |= peers.get(p.pid, set()) & backend_pids
    if linked:
        return True, linked
    # Not linkable (another user's process, or between connections as a
    # restore leader is): compare its port and database with ours.
    env_port, env_readable = procs.environ_port(tree[0].pid)
    port = args.port or env_port
    if port is not None or env_readable:
        return (port or 5432) == facts.port, set()
    # another user's process with no -p: the server's clock says whether one
    # of its backends of that program and database started with this process
    if not args.dbname:
        return False, set()  # nothing to tell it from a job on another server
    starts = [b.backend_start for b in db.backends
              if program_of(b.application_name) == tree[0].name and b.backend_start
              and b.datname == args.dbname]
    return any(0 <= s - tree[0].create_time < 5 for s in starts), set()


def find_jobs(facts: ServerFacts, db: DbSample, scan_processes: bool = True) -> list[Job]:
    jobs: list[Job] = []
    claimed: set[int] = set()
    peers = procs.unix_peers() if scan_processes and os.name == "posix" else None
    if scan_processes:
        trees = procs.process_trees(procs.scan_job_processes())
        for root_pid, tree in sorted(trees.items()):
            root = tree[0]
            args = parse_client_cmdline(list(root.cmdline))
            if args.list_only or (root.name == "pg_restore" and not args.dbname):
                continue  # pg_restore -l, or writing SQL to a file: no server work
            ok, linked = _tree_talks_to_us(tree, args, facts, db, peers)
            if not ok:
                continue
            appname = procs.environ_appname(root_pid)
            tagged = appname if appname and "pgparmon-" in appname else None
            dbname = args.dbname
            if linked:
                dbs = {b.datname for b in db.backends if b.pid in linked}
                if len(dbs) == 1:
                    dbname = dbs.pop()
            if dbname is None:
                dbname = facts.database if root.name == "pg_restore" else (
                    os.environ.get("PGDATABASE") or None)
            job = Job(kind=root.name, database=dbname, client_pid=root_pid, jobs=args.jobs,
                      format=args.format, target=args.file, command=tuple(redact_argv(list(root.cmdline))),
                      app_name=tagged, pid_hint=frozenset(linked), args=args)
            if job.kind == "pg_dump":
                xmins = {b.backend_xmin for b in db.backends
                         if b.pid in linked and b.backend_xmin} if linked else set()
                if len(xmins) == 1:
                    job = replace(job, xmin=xmins.pop())
            members = {b.pid for b in db.backends if belongs(job, b)}
            if linked and not (members & linked) and not job.app_name:
                continue
            claimed |= members
            jobs.append(job)
    jobs.extend(_backend_only_jobs(db, claimed, facts))
    return jobs


def _backend_only_jobs(db: DbSample, claimed: set[int], facts: ServerFacts) -> list[Job]:
    """Jobs whose client processes we cannot see: remote pg_dump / pg_restore,
    and COPY pools (any client program)."""
    out: list[Job] = []
    groups: dict[tuple[object, ...], list[Backend]] = {}
    for b in db.backends:
        if b.pid in claimed or b.backend_type != "client backend":
            continue
        prog = program_of(b.application_name)
        if prog == "pg_dump":
            key: tuple[object, ...] = (prog, b.datname, b.backend_xmin)
        elif prog == "pg_restore":
            key = (prog, b.datname, b.usename, b.client_addr)
        else:
            ct = copy_target(b.query)
            if ct is None or ct[0] != "from" or b.state != "active":
                continue
            key = ("copy", b.datname, b.usename, b.application_name, b.client_addr, ct[1])
        groups.setdefault(key, []).append(b)
    for key, members in groups.items():
        kind = str(key[0])
        if kind == "pg_dump":
            out.append(Job(kind=kind, database=members[0].datname, xmin=members[0].backend_xmin,
                           jobs=max(1, len(members) - 1) if len(members) > 1 else None,
                           pid_hint=frozenset(b.pid for b in members)))
        elif kind == "pg_restore":
            out.append(Job(kind=kind, database=members[0].datname, usename=members[0].usename,
                           client_addr=members[0].client_addr,
                           pid_hint=frozenset(b.pid for b in members)))
        else:
            out.append(Job(kind="copy", database=members[0].datname, usename=members[0].usename,
                           client_addr=members[0].client_addr, relation=str(key[5]),
                           jobs=len(members), pid_hint=frozenset(b.pid for b in members)))
    return out


def choose_job(jobs: list[Job], pid: int | None) -> Job:
    if pid is not None:
        for j in jobs:
            if j.client_pid == pid or pid in j.pid_hint:
                return j
        raise DiscoveryError(f"no pg_dump, pg_restore or COPY job with pid {pid} on this server "
                             "(give the client process pid or one of its backend pids)", ExitCode.NO_JOB)
    if not jobs:
        raise DiscoveryError("no running pg_dump, pg_restore or COPY load found on this server "
                             "(check -h/-p/-d point at the job's server, or use --wait)", ExitCode.NO_JOB)
    if len(jobs) > 1:
        listing = "; ".join(j.describe() for j in jobs)
        raise DiscoveryError(f"several jobs found, pick one with --pid: {listing}", ExitCode.SEVERAL_JOBS)
    return jobs[0]
