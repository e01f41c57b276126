"""A job: what the DBA started (one tool's client process tree, when it runs
on this host, and every server session it opened), or what the server runs
itself. Plain data, below the drivers and the Tracker: the Tracker follows
a Job with the driver it is handed, and the drivers make Jobs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..cmdline import ClientArgs


def _no_cluster(kind: str) -> bool:
    return False


# Whether a kind copies the whole cluster (its driver's `whole_cluster`),
# for describe(): the driver registry, which sits above this module, answers
# it once it is imported (set_kind_lookup)
_whole_cluster: Callable[[str], bool] = _no_cluster


def set_kind_lookup(whole_cluster: Callable[[str], bool]) -> None:
    global _whole_cluster
    _whole_cluster = whole_cluster


# Job.grouping of a job whose sessions were linked to its client processes
# (one process tree on this host); other groupings say what they inferred from
TREE = "process tree"


@dataclass(frozen=True)
class Job:
    kind: str  # a registered driver's kind: "pg_dump" | "pg_restore" | "copy"
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
    # how the job's sessions were grouped: "process tree" (its client processes
    # on this host), or "inferred: ..." (the keys a remote client's sessions share)
    grouping: str | None = None
    databases: tuple[str, ...] = ()  # every database its sessions use (a COPY job)
    # the tree at discovery, as recorded; a followed job's processes are
    # asked of client_tree.ClientPids (its `at_discovery`)
    client_pids: frozenset[int] = field(default_factory=frozenset)
    # a COPY job's source server as given with --source (redacted): the copy
    # is planned from its catalog
    source: str | None = None
    # what the server calls a job it runs itself, with no client of its own
    # (a subscription's name)
    subject: str | None = None
    # a run that may be one step of several a shell runs one after another
    # (`pg_restore --section=pre-data ... && pg_restore -j 4 --section=data
    # ...`): the shell's pid, and which step of them this one is (1: the
    # first followed). steps.py finds the next one when this one ends
    step_shell: int | None = None
    step: int = 1

    def describe(self) -> str:
        who = (f"pid {self.client_pid}" if self.client_pid
               else "run by the server" if self.subject else "remote client")
        if self.grouping:
            who += f"; {self.grouping}"
        if self.step > 1:
            who += f"; step {self.step}"
        j = f" -j {self.jobs}" if self.jobs else ""
        tgt = f" {self.target}" if self.target else ""
        rel = f" into {self.relation}" if self.relation else ""
        if _whole_cluster(self.kind):
            where = "the whole cluster"
        elif len(self.databases) > 1:
            where = f"databases {', '.join(self.databases)}"
        else:
            where = f"database {self.database or '?'}"
        src = f" from {self.source}" if self.source else ""
        subj = f" of {self.subject}" if self.subject else ""
        return f"{self.kind}{subj}{j}{tgt}{rel}{src} on {where} ({who})"

    def database_list(self) -> list[str]:
        """Every database of the job (one for a dump or a restore)."""
        return list(self.databases) or ([self.database] if self.database else [])

    def has_pid(self, pid: int) -> bool:
        """`--pid`: a process of the job's tree or one of its backends."""
        return pid == self.client_pid or pid in self.pid_hint or pid in self.client_pids

    def to_dict(self) -> dict[str, Any]:
        """The job as a recording's header holds it (no parsed argv)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "args"}
        d["pid_hint"] = sorted(self.pid_hint)
        d["client_pids"] = sorted(self.client_pids)
        d["command"] = list(self.command)
        d["databases"] = list(self.databases)
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Job:
        names = {f.name for f in dataclasses.fields(Job)} - {"args"}
        kw = {k: v for k, v in d.items() if k in names}
        kw["pid_hint"] = frozenset(kw.get("pid_hint") or ())
        kw["client_pids"] = frozenset(kw.get("client_pids") or ())
        kw["command"] = tuple(kw.get("command") or ())
        kw["databases"] = tuple(kw.get("databases") or ())
        return Job(**kw)


@dataclass(frozen=True)
class StepLook:
    """One look for the next step: the step found (its job), whether the
    shell that runs the steps still does (alive, and still a shell or the
    tool itself), and whether its command line names a step still to come
    after the one that ended (a `-c` string's; an interactive shell's names
    none)."""

    job: Job | None = None
    shell_alive: bool = False
    more: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job.to_dict() if self.job else None, "shell_alive": self.shell_alive,
                "more": self.more}

    @staticmethod
    def from_dict(d: dict[str, Any] | None) -> StepLook:
        d = d or {}
        return StepLook(Job.from_dict(d["job"]) if d.get("job") else None,
                        bool(d.get("shell_alive")), bool(d.get("more")))
