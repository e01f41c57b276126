"""Helpers several drivers share to group sessions into a job (none of
them is one driver's to lend another): a whole-cluster job found by its
sessions alone, and a process-tree job's sessions this tick."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .job import TREE, Job

if TYPE_CHECKING:
    from ..client_tree import ClientPids
    from ..snapshot import Backend, Snapshot


def cluster_job(kind: str, members: list[Backend], grouping: str) -> Job:
    """A whole-cluster job (a physical backup) found by its sessions alone:
    their user, client address and application_name."""
    b0 = members[0]
    return Job(kind=kind, database=None, usename=b0.usename, client_addr=b0.client_addr,
               app_name=b0.application_name, pid_hint=frozenset(b.pid for b in members),
               grouping=grouping)


def tree_member_pids(job: Job, snap: Snapshot, clients: ClientPids) -> set[int] | None:
    """A process-tree job's sessions: those whose client process is in the
    tree this tick (`ClientPids.in_tree`; None when the links could not be
    read: decide by belongs())."""
    if job.grouping != TREE or snap.links is None:
        return None
    tree = clients.in_tree(snap)
    return {bp for bp, cp in snap.links if cp in tree}
