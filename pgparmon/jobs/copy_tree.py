"""Which sessions and processes make a COPY load: a session loading through
COPY (or idle just after one, between batches), and, for clients on this
host, the process tree each such session's client belongs to, walked up to
the job's root: every session of that tree, on any database, is one job.
The COPY driver answers discovery's question with it (`tree_jobs`)."""

from __future__ import annotations

from collections import Counter

from ..readers import procs
from ..redact import redact_argv
from ..snapshot import Backend, DbSample
from .job import TREE, Job
from .statements import copy_target

# a remote job whose sessions have all been idle this long has ended (a
# loader parsing its next batch is idle for a few seconds between COPYs)
IDLE_GRACE_S = 60.0
IDLE_STATES = ("idle", "idle in transaction", "idle in transaction (aborted)")


def idle_for(b: Backend, now: float | None) -> float:
    """Seconds the session has been idle (0 when active or not known)."""
    if b.state not in IDLE_STATES or now is None:
        return 0.0
    since = b.state_change or b.query_start
    return max(0.0, now - since) if since else 0.0


def copy_candidate(b: Backend, now: float | None) -> bool:
    """A session that is loading through COPY, or idle just after one (its
    last statement is a COPY: a load between batches)."""
    ct = copy_target(b.query)
    if ct is None or ct[0] != "from" or b.backend_type != "client backend":
        return False
    if b.state == "active":
        return True
    return b.state in IDLE_STATES and idle_for(b, now) <= IDLE_GRACE_S


def copy_tree_jobs(kind: str, db: DbSample, claimed: set[int], links: dict[int, int],
                   forced: int | None = None, steps: set[int] | None = None) -> list[Job]:
    """COPY loads whose client processes are on this host: each loading (or
    just loaded, idle between batches) session is linked to its client
    process, the tree is walked up to the job's root, and every session of
    that tree, on any database, is one job. `steps`: roots of programs
    running a pg_dump / pg_restore step (step_of) are jobs too."""
    roots: dict[int, set[int]] = {root: set() for root in steps or ()}
    mine = procs.own_ancestors()  # never a job's root: see procs.job_root
    for b in db.backends:
        if b.pid in claimed or b.pid not in links or not copy_candidate(b, db.server_ts):
            continue
        roots.setdefault(procs.job_root(links[b.pid], mine), set()).add(b.pid)
    if forced is not None and forced not in claimed and forced not in roots:
        client = links.get(forced, forced)  # a backend's client, or a client process
        root = procs.job_root(client, mine)
        # a job only when some session's client has that same root (not init's
        # tree, not a process with no session of its own)
        if any(procs.job_root(c, mine) == root for c in set(links.values())):
            roots.setdefault(root, set())
    jobs: list[Job] = []
    for root in sorted(roots):
        tree = set(procs.tree_pids(root)) or {root}
        members = [b for b in db.backends if b.pid not in claimed and links.get(b.pid) in tree
                   and b.backend_type == "client backend"]
        if not members:
            continue
        info = procs.proc_info(root)
        dbs = Counter(b.datname for b in members if b.datname)
        rels = {ct[1] for b in members if (ct := copy_target(b.query)) and ct[0] == "from"}
        jobs.append(Job(kind=kind, database=dbs.most_common(1)[0][0] if dbs else None,
                        databases=tuple(sorted(dbs)), client_pid=root,
                        client_pids=frozenset(tree), jobs=len(members),
                        command=tuple(redact_argv(list(info.cmdline))) if info else (),
                        usename=members[0].usename, client_addr=members[0].client_addr,
                        relation=rels.pop() if len(rels) == 1 else None,
                        pid_hint=frozenset(b.pid for b in members), grouping=TREE))
        claimed |= {b.pid for b in members}
    return jobs
