"""A recording answering a Monitor's readings: the Source of a replay.

ReplaySource gives back, in recorded order, what RecordingSource wrote as
the live run read it (snapshots, the plan's inputs, the catalog's done
list, the target's files at the end, the looks for a job's next step), so
a replay goes through the very same analysis and reaches the same samples
on any host.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .jobs.base import Job, PlanInputs
from .readers.db import ServerFacts
from .snapshot import FileSize, Snapshot
from .jobs.job import StepLook


class EndOfRecording(Exception):
    pass


class ReplayError(RuntimeError):
    pass


def facts_from_dict(d: dict[str, Any]) -> ServerFacts:
    names = {f.name for f in dataclasses.fields(ServerFacts)}
    return ServerFacts(**{k: v for k, v in d.items() if k in names})


class ReplaySource:
    """Answers a Monitor's readings from a recording, in recorded order."""

    local = False

    def __init__(self, header: dict[str, Any], events: list[tuple[str, Any]]) -> None:
        self.facts = facts_from_dict(header["facts"])
        self.job: Job | None = Job.from_dict(header["job"])
        self.target_dir = header.get("target_dir")
        self.devices = set(header.get("devices") or ())
        self._events = [e for e in events
                        if e[0] in ("snapshot", "plan", "done", "files", "step")]
        self._pos = 0

    def discover(self) -> Job:
        assert self.job is not None
        return self.job

    def _next(self, kind: str) -> Any:
        if self._pos >= len(self._events):
            raise EndOfRecording()
        k, v = self._events[self._pos]
        if k != kind:
            raise ReplayError(f"recording out of step: expected {kind}, found {k}")
        self._pos += 1
        return v

    def may_ask_again(self, kind: str) -> bool:
        """The live run asked again only if the recording says so."""
        return self._pos < len(self._events) and self._events[self._pos][0] == kind

    def pause(self, seconds: float) -> None:
        pass  # a replay does not wait for the server's statistics

    def snapshot(self) -> Snapshot:
        return Snapshot.from_dict(self._next("snapshot"))

    def plan_inputs(self, req: dict[str, Any] | None = None) -> PlanInputs | None:
        if not self.may_ask_again("plan"):
            return PlanInputs()  # recorded before this kind of job planned: no plan
        v = self._next("plan")
        return None if v is None else PlanInputs.from_dict(v)

    def catalog_done(self, database: str | None = None) -> dict[str, Any]:
        v: dict[str, Any] = self._next("done")
        return v

    def final_files(self) -> tuple[FileSize, ...] | None:
        v = self._next("files")
        return None if v is None else tuple(FileSize(**f) for f in v)

    def next_step(self, job: Job) -> StepLook:
        if not self.may_ask_again("step"):
            return StepLook()  # recorded before jobs ran in steps
        return StepLook.from_dict(self._next("step"))

    def follow_step(self, job: Job) -> None:
        self.job = job

    def details(self, pid: int, client_pid: int | None) -> dict[str, Any]:
        return {"pid": pid, "locks": [], "client": None,
                "error": "not in the recording (details are read live, on demand)"}

    def close(self) -> None:
        pass
