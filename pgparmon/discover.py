"""Find the job: process trees on this host of a program some driver
recognises that talk to the server we are connected to, and groups of
sessions whose client processes cannot be seen (remote clients, COPY loads).

Membership of sessions is decided by each driver's grouping rule (database,
application_name, and for a dump the shared snapshot's backend_xmin); the
process tree, client ports and unix socket peers, when visible, say which
tree is ours and which client process drives which session.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from typing import Any

from .cmdline import ClientArgs
from .exitcodes import ExitCode
from .jobs.base import TREE, Job
from .jobs.recognise import Recognise
from .jobs.registry import (
    client_programs,
    recognise_for,
    recognisers,
    job_titles,
    parse_argv,
    program_of,
)
from .readers import procs
from .readers.db import ServerFacts
from .redact import redact_argv
from .snapshot import Backend, DbSample


class DiscoveryError(RuntimeError):
    """`jobs`: the jobs found when there are several (SEVERAL_JOBS); `found`:
    the same with their sessions and start (pick.FoundJob), filled by the
    source that sampled them."""

    def __init__(self, message: str, code: int, jobs: list[Job] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.jobs: list[Job] = list(jobs or ())
        self.found: list[Any] = []


def _tree_talks_to_us(tree: list[procs.ProcInfo], args: ClientArgs, facts: ServerFacts,
                      db: DbSample, peers: dict[int, set[int]] | None, driver: Recognise,
                      rivals: Iterable[float] = ()) -> tuple[bool, set[int]]:
    """Whether this process tree is connected to our server, with the backend
    pids it is linked to when that can be seen. `rivals`: the start times of
    the other processes of the same program and database on this host."""
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
    # another user's process with no -p: the server's clock says whether it
    # opened a job's first session (the earliest of the sessions its driver
    # groups together: a dump's leader), which a tool does right after it
    # starts: within 5 s of this process, and with no other process of that
    # program and database started in between (that one opened it: two dumps
    # of databases of the same name on two servers of this host, seconds apart)
    if not args.dbname:
        return False, set()  # nothing to tell it from a job on another server
    return _opened_first_session(tree[0], args.dbname, driver, db, rivals), set()


def _opened_first_session(root: procs.ProcInfo, dbname: str, driver: Recognise, db: DbSample,
                          rivals: Iterable[float]) -> bool:
    firsts: dict[object, float] = {}
    for b in db.backends:
        if program_of(b.application_name) == root.name and b.backend_start \
                and b.datname == dbname:
            key = driver.session_key(b) or b.pid
            firsts[key] = min(firsts.get(key, b.backend_start), b.backend_start)
    me = root.create_time
    return any(0 <= s - me < 5 and not any(me < r <= s for r in rivals)
               for s in firsts.values())


def find_jobs(facts: ServerFacts, db: DbSample, scan_processes: bool = True,
              pid: int | None = None) -> list[Job]:
    """Every job on the server; `pid` (attach --pid): a process tree on this
    host that pid belongs to (or whose backend it is) is a job even when none
    of its sessions shows a COPY right now."""

    jobs: list[Job] = []
    claimed: set[int] = set()
    for d in recognisers():  # jobs the server runs itself (a subscription's sync)
        for job in d.server_jobs(db, facts):
            jobs.append(job)
            claimed |= job.pid_hint
    peers = procs.unix_peers() if scan_processes and os.name == "posix" else None
    if scan_processes:
        trees = procs.process_trees(procs.scan_job_processes(client_programs()))
        by_program: dict[str, list[Recognise]] = {}
        for d in recognisers():
            if not d.host_only:  # no session of its own: found by `attach --host-only`
                for p in d.programs:
                    by_program.setdefault(p, []).append(d)
        links = procs.backend_clients(facts.port, db.backends, peers)
        steps: set[int] = set()  # roots of programs running a pg_dump / pg_restore step
        parsed = {pid: parse_argv(list(tree[0].cmdline)) for pid, tree in trees.items()
                  if tree[0].name in by_program}
        for root_pid, tree in sorted(trees.items()):
            root = tree[0]
            mine = by_program.get(root.name) or []
            parent = step_of(root, links, db, mine)
            if parent is not None:
                steps.add(parent)
                continue
            args = parsed.get(root_pid) or parse_argv(list(root.cmdline))
            found = next((d for d in mine if d.from_tree(root, args)), None)
            if found is None:
                continue
            driver = found
            rivals = [t[0].create_time for p, t in trees.items() if p != root_pid
                      and t[0].name == root.name and p in parsed
                      and parsed[p].dbname == args.dbname]
            ok, linked = _tree_talks_to_us(tree, args, facts, db, peers, driver, rivals)
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
            if driver.in_steps(job):
                job = dataclasses.replace(job, step_shell=procs.step_shell(root))
            members = {b.pid for b in db.backends if driver.belongs(job, b)}
            if linked and not (members & linked) and not job.app_name:
                continue
            claimed |= members
            jobs.append(job)
        forced = pid if pid is not None and not any(j.has_pid(pid) for j in jobs) else None
        for d in recognisers():  # clients no program names (a COPY loader's tree)
            jobs.extend(d.tree_jobs(db, claimed, links, forced, steps))
    jobs.extend(_backend_only_jobs(db, claimed, facts))
    return jobs


def find_host_jobs(pid: int | None = None) -> list[Job]:
    """The jobs of tools that run with the server down (a pgBackRest
    restore), from this host's process table alone; `pid`: only the tree
    that process belongs to."""
    host_drivers = [d for d in recognisers() if d.host_only]
    programs = tuple(dict.fromkeys(p for d in host_drivers for p in d.programs))
    if not programs:
        return []
    jobs = []
    for root_pid, tree in sorted(procs.process_trees(procs.scan_job_processes(programs)).items()):
        root = tree[0]
        if pid is not None and pid not in {p.pid for p in tree}:
            continue
        args = parse_argv(list(root.cmdline))
        driver = next((d for d in host_drivers if root.name in d.programs
                       and d.from_tree(root, args)), None)
        if driver is None:
            continue
        job = Job(kind=driver.kind, database=None, client_pid=root_pid, jobs=args.jobs,
                  command=tuple(redact_argv(list(root.cmdline))), grouping=TREE,
                  client_pids=frozenset(p.pid for p in tree), args=args)
        jobs.append(driver.refine(job, []))
    return jobs


def step_of(root: procs.ProcInfo, links: dict[int, int], db: DbSample,
            owners: Iterable[Recognise]) -> int | None:
    """The job root of the program a pg_dump / pg_restore is a step of, or
    None when it is a job of its own. A migration tool runs pg_dump for the
    schema and pg_restore for the post-data while it holds a transaction
    open on the server (the snapshot it copies from): a parent process that
    is not a shell or launcher and whose own session sits idle in a
    transaction makes the pg_dump / pg_restore part of its job. A script (a
    shell, xargs...), or a program whose sessions are idle or running
    statements (one locking a table, say), leaves it a pg_dump job. Only a
    program one of whose drivers (`owners`) says it can be a step
    (Driver.runs_as_step) is ever one: a vacuumdb is its own job whatever
    its parent holds."""
    if not any(d.runs_as_step for d in owners):
        return None
    parent = procs.proc_info(root.ppid) if root.ppid > 1 else None
    if parent is None or parent.name.lstrip("-") in procs.SHELLS | procs.LAUNCHERS:
        return None
    top = procs.job_root(parent.pid)
    tree = set(procs.tree_pids(top))
    # the program's own processes only: a pg_dump / pg_restore it runs (this
    # one, or a sibling whose leader holds its own snapshot) is not the
    # program holding a transaction
    for pid in list(tree):
        info = procs.proc_info(pid)
        if pid == root.pid or (info is not None and info.name in client_programs()):
            tree -= set(procs.tree_pids(pid))
    holding = {b.pid for b in db.backends if b.state == "idle in transaction"
               and b.backend_type == "client backend"}
    if any(cp in tree for bp, cp in links.items() if bp in holding):
        return top
    return None


def _backend_only_jobs(db: DbSample, claimed: set[int], facts: ServerFacts) -> list[Job]:
    """Jobs whose client processes we cannot see: each unclaimed client
    session goes to the first driver whose grouping key accepts it."""
    groups: dict[tuple[object, ...], list[Backend]] = {}
    for b in db.backends:
        if b.pid in claimed or b.backend_type not in ("client backend", "walsender"):
            continue
        ds = recognisers()
        if any(d.stale_session(b, db.server_ts) for d in ds):
            continue  # an old session whose last statement was a COPY: no load now
        for d in ds:
            key = d.session_key(b)
            if key is not None:
                groups.setdefault(key, []).append(b)
                break
    jobs: list[Job] = []
    for key, members in groups.items():
        d = recognise_for(str(key[0]))
        jobs.extend(d.from_sessions(part) for part in d.split(members))
    return jobs


def choose_job(jobs: list[Job], pid: int | None, host_only: bool = False) -> Job:
    """The job to follow: the one `pid` names, else the only one found
    (host_only: jobs found on the host alone, the server down)."""
    if pid is not None:
        for j in jobs:
            if j.has_pid(pid):
                return j
        where = "host" if host_only else "server"
        raise DiscoveryError(f"no {job_titles(host_only)} job with pid {pid} on this {where} "
                             "(give the client process pid or one of its backend "
                             "pids)", ExitCode.NO_JOB)
    if not jobs:
        raise DiscoveryError(f"no running {job_titles()} found "
                             "on this server "
                             "(check -h/-p/-d point at the job's server; a loader whose "
                             "sessions all sit idle after a commit is found by --pid, or by "
                             "--wait once its next COPY starts)", ExitCode.NO_JOB)
    if len(jobs) > 1:
        listing = "; ".join(j.describe() for j in jobs)
        raise DiscoveryError(f"several jobs found, pick one with --pid: {listing}",
                             ExitCode.SEVERAL_JOBS, jobs)
    return jobs[0]
