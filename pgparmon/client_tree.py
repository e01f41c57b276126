"""A job's client processes on this host, read live: the one keeper of
which processes are the job's.

The live sources (LiveSource, HostSource) hold one `ClientTree` per job:
seeded at discovery, it grows with every process found under the job's
root, keeps looking at workers that a root which exited left behind, and
says each tick which of them are alive, whether the job still runs, and,
for a process `pgparmon run` started, its exit code and the error lines of
its output. Those readings travel in the Snapshot (`clients`,
`root_alive`, `exit_code`, `exit_error`); whether they mean the job ended
is job_end.JobEnd's to say.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Any

from .readers import procs
from .redact import redact_text

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


class ClientTree:
    """The client processes of one job: its root (`Job.client_pid`) and the
    processes known to be the job's."""

    def __init__(self, root: int | None, known: set[int] | None = None,
                 process: subprocess.Popen[Any] | None = None, log: str | None = None) -> None:
        self.root = root
        self.known: set[int] = set(known or ())  # every pid seen to be the job's so far
        self.process = process  # the job's root when we started it (`run`)
        self.log = log  # where that process writes its output

    @classmethod
    def of(cls, job: Any, whole_tree: bool, process: subprocess.Popen[Any] | None = None,
           log: str | None = None) -> ClientTree:
        """Seeded at discovery: the root and its children now; with
        whole_tree, every process under the root and the tree discovery
        saw (`Job.client_pids`)."""
        root = job.client_pid
        known: set[int] = set()
        if root:
            known = {root, *procs.children(root)}
            if whole_tree:
                known |= set(procs.tree_pids(root)) | set(job.client_pids)
        return cls(root, known, process, log)

    def read(self, tree: bool) -> ClientsNow:
        """The job's client processes alive now (`known` grows). tree: the
        whole tree, and workers orphaned by a root that exited; else the
        root's children."""
        root = self.root
        if not root:
            return ClientsNow([], None)
        if tree:
            kids = procs.tree_pids(root)[1:]
            kids += [p for p in sorted(self.known - {root, *kids}) if procs.alive(p)]
        else:
            kids = procs.children(root)
        self.known |= set(kids)
        exit_code: int | None = None
        exit_error: str | None = None
        if self.process is not None:
            exit_code = self.process.poll()
            root_alive: bool | None = exit_code is None
            if exit_code and self.log:
                exit_error = error_lines(self.log)
        else:
            root_alive = procs.alive(root) or (tree and any(procs.alive(p) for p in kids))
        return ClientsNow([root, *kids], root_alive, exit_code, exit_error)
