"""Find the job: process trees on this host of a program some driver
recognises that talk to the server we are connected to, and groups of
sessions whose client processes cannot be seen (remote clients, COPY loads).

Membership of sessions is decided by each driver's grouping rule (database,
application_name, and for a dump the shared snapshot's backend_xmin); the
process tree, client ports and unix socket peers, when visible, say which
tree is ours and which client process drives which session.
"""

from __future__ import annotations

import os

from .cmdline import ClientArgs, parse_client_cmdline
from .exitcodes import ExitCode
from .jobs.base import Job
from .jobs.registry import client_programs, driver_for, drivers, program_of
from .readers import procs
from .readers.db import ServerFacts
from .redact import redact_argv
from .snapshot import Backend, DbSample


class DiscoveryError(RuntimeError):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


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
        trees = procs.process_trees(procs.scan_job_processes(client_programs()))
        by_program = {p: d for d in drivers() for p in d.programs}
        for root_pid, tree in sorted(trees.items()):
            root = tree[0]
            driver = by_program[root.name]
            args = parse_client_cmdline(list(root.cmdline))
            if not driver.from_tree(root, args):
                continue
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
                dbname = os.environ.get("PGDATABASE") or None
            job = Job(kind=driver.kind, database=dbname, client_pid=root_pid, jobs=args.jobs,
                      format=args.format, target=args.file,
                      command=tuple(redact_argv(list(root.cmdline))),
                      app_name=tagged, pid_hint=frozenset(linked), args=args)
            job = driver.refine(job, [b for b in db.backends if b.pid in linked])
            members = {b.pid for b in db.backends if driver.belongs(job, b)}
            if linked and not (members & linked) and not job.app_name:
                continue
            claimed |= members
            jobs.append(job)
    jobs.extend(_backend_only_jobs(db, claimed, facts))
    return jobs


def _backend_only_jobs(db: DbSample, claimed: set[int], facts: ServerFacts) -> list[Job]:
    """Jobs whose client processes we cannot see: each unclaimed client
    session goes to the first driver whose grouping key accepts it."""
    groups: dict[tuple[object, ...], list[Backend]] = {}
    for b in db.backends:
        if b.pid in claimed or b.backend_type != "client backend":
            continue
        for d in drivers():
            key = d.session_key(b)
            if key is not None:
                groups.setdefault(key, []).append(b)
                break
    return [driver_for(str(key[0])).from_sessions(members) for key, members in groups.items()]


def choose_job(jobs: list[Job], pid: int | None) -> Job:
    if pid is not None:
        for j in jobs:
            if j.client_pid == pid or pid in j.pid_hint:
                return j
        raise DiscoveryError(f"no pg_dump, pg_restore or COPY job with pid {pid} on this "
                             "server (give the client process pid or one of its backend "
                             "pids)", ExitCode.NO_JOB)
    if not jobs:
        raise DiscoveryError("no running pg_dump, pg_restore or COPY load found on this server "
                             "(check -h/-p/-d point at the job's server, or use --wait)",
                             ExitCode.NO_JOB)
    if len(jobs) > 1:
        listing = "; ".join(j.describe() for j in jobs)
        raise DiscoveryError(f"several jobs found, pick one with --pid: {listing}",
                             ExitCode.SEVERAL_JOBS)
    return jobs[0]
