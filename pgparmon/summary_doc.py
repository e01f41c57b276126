"""The end-of-run summary (`pgparmon.summary/1`): the job, its outcome,
every item with its start, duration and work, and the notes.

Asked for while the job runs (the views) and at its end, twice or more (the
end screen, then the recording and the exit): an ended job's summary is
built once and kept while nothing it holds changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .sample_doc import iso

if TYPE_CHECKING:
    from .analyze.progress import Tracker
    from .jobs.base import Job
    from .job_end import Outcome


class Summary:
    """A job's summary document, built on demand, kept once the job ended."""

    def __init__(self) -> None:
        self._kept: tuple[Any, dict[str, Any]] | None = None

    def document(self, tr: Tracker, job: Job, outcome: Outcome | None, notes: list[str],
                 databases: list[str]) -> dict[str, Any]:
        # a dict an item, 4.5 MB at 10,000 items: two at once were the TUI's peak
        key = (id(outcome), len(notes), tr.last_wall, tr.version, tr.count("done"))
        if outcome is not None and self._kept is not None and self._kept[0] == key:
            return self._kept[1]
        doc = build_summary(tr, job, outcome, notes, databases)
        self._kept = (key, doc) if outcome is not None else None
        return doc


def build_summary(tr: Tracker, job: Job, outcome: Outcome | None, notes: list[str],
                  databases: list[str]) -> dict[str, Any]:
    items = []
    for it in sorted(tr.items.values(), key=lambda i: (i.started or 0, i.key)):
        items.append({
            "key": it.key, "kind": it.kind, "name": it.name, "relation": it.relation,
            "worker": it.worker,
            "state": it.state, "started": iso(it.started) if it.started else None,
            "duration_s": round(it.duration, 3) if it.duration is not None else None,
            "bytes": it.bytes_done or None, "tuples": it.tuples_done or None,
            "work": it.work,
        })
    wall = (tr.last_wall or 0) - (tr.started or 0)
    return {"schema": "pgparmon.summary/1", "kind": job.kind, "database": job.database,
            "jobs": job.jobs, "grouping": job.grouping,
            "databases": databases,
            "started": iso(tr.started) if tr.started else None,
            "started_from": tr.started_from,
            "first_sample": iso(tr.first_wall) if tr.first_wall else None,
            "state": outcome.state if outcome else "running",
            "reason": outcome.reason if outcome else None,
            "exit_code": outcome.exit_code if outcome else None,
            "wall_s": round(wall, 3), "items": items, "notes": list(notes)}
