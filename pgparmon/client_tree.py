"""A job's client processes on this host: the one keeper of which
processes are the job's (`ClientPids`), and their live reading
(`ClientTree`).

`ClientPids` holds the three facts about a job's client process ids, each
under its own name: the tree discovery saw (`at_discovery`, the recorded
`Job.client_pids`), the tree the live source found so far (`live_tree`)
and the processes the samples showed (`seen`). Everyone who needs one of
them asks it: the live source (which sessions to link), the Tracker and
the drivers (which sessions are the job's this tick), the job's end (a
worker that died), the sample (the job's processes now).

The live sources (LiveSource, HostSource) hold one `ClientTree` per job:
seeded at discovery, it grows its `ClientPids.live_tree` with every
process found under the job's root, keeps looking at workers that a root
which exited left behind, and says each tick which of them are alive,
whether the job still runs, and, for a process `pgparmon run` started, its
exit code and the error lines of its output. Those readings travel in the
Snapshot (`clients`, `root_alive`, `exit_code`, `exit_error`); whether they
mean the job ended is job_end.JobEnd's to say.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .readers import procs
from .redact import redact_text

if TYPE_CHECKING:
    from .jobs.job import Job
    from .snapshot import Snapshot

ERROR_MARKS = ("ERROR:", "FATAL:", "PANIC:", "DETAIL:", "CONTEXT:", "error:", "Error:")


def error_lines(path: str, limit: int = 600) -> str | None:
    """The server's error text in a failed job's output (psql, pg_restore,
    a driver's exception print the server's ERROR / DETAIL / CONTEXT lines),
    else its last lines; redacted, one line, at most `limit` characters."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f.read().splitlines()[-200:] if ln.strip()]
    except OSError:
        return None
    picked = [ln for ln in lines if any(m in ln for m in ERROR_MARKS)][-4:] or lines[-2:]
    if not picked:
        return None
    text = redact_text(" | ".join(picked))
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass(frozen=True)
class ClientsNow:
    """One tick's reading of the job's client processes."""

    live: list[int]  # the root first, then the other processes found
    root_alive: bool | None  # None: no client process to watch
    exit_code: int | None = None  # a process we started, once it exited
    exit_error: str | None = None  # its output's error lines (redacted)


class ClientPids:
    """The client process ids of one job, three facts kept apart:

    - `root`: its root process (`Job.client_pid`); None for a job of
      sessions alone;
    - `at_discovery`: the process tree discovery saw (`Job.client_pids`, as
      the recording's header holds it);
    - `live_tree`: every process the live source found to be the job's so
      far (`ClientTree` grows it). The live source's alone: a replay has
      only discovery's, so nothing the analysis decides may read it;
    - `seen`: the processes the samples showed so far (the root with the
      first), grown by the job's end (`saw`) from each snapshot.
    """

    def __init__(self, root: int | None, at_discovery: frozenset[int] = frozenset()) -> None:
        self.root = root or None
        self.at_discovery = frozenset(at_discovery)
        self.live_tree: set[int] = set()
        self.seen: set[int] = set()

    @classmethod
    def of(cls, job: Job) -> ClientPids:
        return cls(job.client_pid, job.client_pids)

    def saw(self, snap: Snapshot) -> None:
        """A sample's processes join `seen` (a job with a root only)."""
        if self.root:
            self.seen |= {self.root} | {c.pid for c in snap.clients}

    def now(self, snap: Snapshot) -> set[int]:
        """The job's processes this sample shows, its root with them."""
        return {c.pid for c in snap.clients} | ({self.root} if self.root else set())

    def in_tree(self, snap: Snapshot) -> set[int]:
        """Whose sessions are the job's this sample: the tree discovery saw
        and the processes the sample shows."""
        return set(self.at_discovery) | self.now(snap)

    def gone(self, snap: Snapshot) -> set[int]:
        """Processes the samples showed that this one does not (the root
        apart): workers that exited."""
        live = {c.pid for c in snap.clients}
        return {p for p in self.seen if p != self.root and p not in live}

    def all_gone(self, snap: Snapshot) -> bool:
        """The snapshot shows the job's client processes gone (its root, and
        in a process tree every process of it). The Tracker asks it: a
        session never seen before is then another client's. The job's end
        itself is decided by job_end.JobEnd alone, from the same evidence."""
        return bool(self.root) and snap.root_alive is False


class ClientTree:
    """The client processes of one job, read live: its root
    (`Job.client_pid`) and the processes known to be the job's
    (`pids.live_tree`)."""

    def __init__(self, pids: ClientPids, process: subprocess.Popen[Any] | None = None,
                 log: str | None = None, steps: bool = False) -> None:
        self.pids = pids
        self.root = pids.root
        self.process = process  # the job's root when we started it (`run`)
        self.log = log  # where that process writes its output
        # `process` runs the job in steps (a shell string, steps.py): the
        # root is the step that runs now, alive on its own; the exit code
        # is the shell's, once it exited
        self.steps = steps

    @classmethod
    def of(cls, job: Job, whole_tree: bool, process: subprocess.Popen[Any] | None = None,
           log: str | None = None) -> ClientTree:
        """Seeded at discovery: the root and its children now; with
        whole_tree, every process under the root and the tree discovery
        saw (`Job.client_pids`)."""
        pids = ClientPids.of(job)
        root = pids.root
        if root:
            pids.live_tree |= {root, *procs.children(root)}
            if whole_tree:
                pids.live_tree |= set(procs.tree_pids(root)) | pids.at_discovery
        return cls(pids, process, log, steps=process is not None and job.step_shell is not None)

    def read(self, tree: bool) -> ClientsNow:
        """The job's client processes alive now (`live_tree` grows). tree: the
        whole tree, and workers orphaned by a root that exited; else the
        root's children."""
        root = self.root
        if not root:
            return ClientsNow([], None)
        if tree:
            kids = procs.tree_pids(root)[1:]
            kids += [p for p in sorted(self.pids.live_tree - {root, *kids}) if procs.alive(p)]
        else:
            kids = procs.children(root)
        self.pids.live_tree |= set(kids)
        exit_code: int | None = None
        exit_error: str | None = None
        root_alive: bool | None = None
        if self.process is not None:
            exit_code = self.process.poll()
            root_alive = exit_code is None
            if exit_code and self.log:
                exit_error = error_lines(self.log)
        if self.process is None or self.steps:
            root_alive = procs.alive(root) or (tree and any(procs.alive(p) for p in kids))
        return ClientsNow([root, *kids], root_alive, exit_code, exit_error)
