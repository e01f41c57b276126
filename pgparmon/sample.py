"""The published sample, typed: `pgparmon.sample/1` (docs/json.md).

A `Sample` is what every consumer reads of a tick: the TUI, the text
views, the report and summary, the exporter; the JSON Lines writer and the
recording turn it into the document at their edge (`to_json`), and a
recording's samples come back through `from_json`. It is plain data: its
parts are frozen, and the builder (sample_doc.py) is the only maker of new
ones.

The parts: the job's standing (`JobStatus`), one row per worker
(`WorkerRow`), the host's rates (`HostLoad`, its disks `DiskLoad`), the
verdict of what limits the run (`analyze.bottleneck.Verdict`), the server
part (`ServerStatus`), the warnings (`analyze.warnings.JobWarning`) and the
notes.

What a tool kind adds to the job object (a backup's `backup`, a COPY
load's `progress_basis`, a logical sync's `tables`...) is its driver's to
say (`Driver.job_fields`, documented per kind in docs/json.md and
docs/backups.md): `JobStatus.kind_fields` holds it as the driver gave it,
in its order, and the views read the few they show through named
properties. A new driver adds fields with no change here.

Exactness: `to_json()` writes the keys in the document's order, so JSON
Lines and recordings are byte for byte what they were. A sample read back
from an older version may lack keys that came later (`job.started`,
`workers[].direction`, `warnings`...): they read as None (or empty), and
each part keeps the names it lacked (`missing`) and the keys it did not
know (`extra`), so that `from_json(x).to_json() == x`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .analyze.bottleneck import Verdict
from .analyze.warnings import JobWarning

SCHEMA = "pgparmon.sample/1"



class _NoKeys(Mapping[str, Any]):
    """An empty mapping that can be a field's default (immutable, hashable)."""

    __slots__ = ()
    __hash__ = object.__hash__

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


NOTHING: frozenset[str] = frozenset()
NO_EXTRA: Mapping[str, Any] = _NoKeys()


class SampleError(ValueError):
    """A document that is not a pgparmon.sample/1 this version can read."""


def _obj(v: Any, what: str) -> Mapping[str, Any]:
    if v is None:
        return NO_EXTRA
    if not isinstance(v, Mapping):
        raise SampleError(f"{what} is a {type(v).__name__}, not an object")
    return v


def _seq(v: Any, what: str) -> tuple[Any, ...]:
    if v is None:
        return ()
    if not isinstance(v, (list, tuple)):
        raise SampleError(f"{what} is a {type(v).__name__}, not a list")
    return tuple(v)


def _gaps(d: Mapping[str, Any], keys: frozenset[str]
          ) -> tuple[frozenset[str], Mapping[str, Any]]:
    """The keys of `keys` that d lacks, and d's keys that `keys` does not
    name, in d's order."""
    if len(d) == len(keys) and keys.issuperset(d):
        return NOTHING, NO_EXTRA
    missing = keys.difference(d)
    extra = {k: v for k, v in d.items() if k not in keys}
    return (frozenset(missing) if missing else NOTHING), (extra or NO_EXTRA)


def _finish(d: dict[str, Any], missing: frozenset[str],
            extra: Mapping[str, Any]) -> dict[str, Any]:
    for k in missing:
        d.pop(k, None)
    if extra:
        d.update(extra)
    return d


def _out(d: dict[str, Any], part: Any) -> dict[str, Any]:
    """A part's document: less the keys its source lacked, with the keys
    this version did not know."""
    return _finish(d, part.missing, part.extra) if part.missing or part.extra else d


def _read(d: Any, what: str, keys: frozenset[str]
          ) -> tuple[Mapping[str, Any], frozenset[str], Mapping[str, Any]]:
    d = _obj(d, what)
    return (d, *_gaps(d, keys))


def _list(v: tuple[Any, ...] | None) -> list[Any] | None:
    return None if v is None else list(v)


# ---- the parts ----------------------------------------------------------------

_WORKER_KEYS = ("pid", "client_pid", "phase", "direction", "relation", "item", "bytes_done",
                "tuples_done", "bytes_per_s", "tuples_per_s", "progress", "wait_event",
                "blocked_by", "client_cpu_percent", "server_cpu_percent", "state", "query",
                "waiting_for")
_WORKER_SET = frozenset(_WORKER_KEYS)


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One worker backend (`workers[]`)."""

    pid: int
    client_pid: int | None
    phase: str  # a registered phase (pgparmon.phases)
    direction: str | None  # a COPY's: from | to; a backup's streams: to
    relation: str | None
    item: str | None  # the work item's name
    bytes_done: int | None
    tuples_done: int | None
    bytes_per_s: float | None
    tuples_per_s: float | None
    progress: float | None  # of the current item, 0..1
    wait_event: str | None  # Type:Event; None: on CPU
    blocked_by: tuple[int, ...]
    client_cpu_percent: float | None
    server_cpu_percent: float | None
    state: str | None  # pg_stat_activity.state
    query: str | None
    waiting_for: tuple[Any, ...] | None
    missing: frozenset[str] = NOTHING
    extra: Mapping[str, Any] = field(default=NO_EXTRA)

    def to_json(self) -> dict[str, Any]:
        d = {"pid": self.pid, "client_pid": self.client_pid, "phase": self.phase,
             "direction": self.direction, "relation": self.relation, "item": self.item,
             "bytes_done": self.bytes_done, "tuples_done": self.tuples_done,
             "bytes_per_s": self.bytes_per_s, "tuples_per_s": self.tuples_per_s,
             "progress": self.progress, "wait_event": self.wait_event,
             "blocked_by": list(self.blocked_by),
             "client_cpu_percent": self.client_cpu_percent,
             "server_cpu_percent": self.server_cpu_percent, "state": self.state,
             "query": self.query, "waiting_for": _list(self.waiting_for)}
        return _out(d, self)

    @classmethod
    def from_json(cls, d: Any) -> WorkerRow:
        d, missing, extra = _read(d, "a worker", _WORKER_SET)
        if "pid" not in d:
            raise SampleError("a worker has no pid")
        g = d.get
        wf = g("waiting_for")
        return cls(g("pid"), g("client_pid"), g("phase"), g("direction"), g("relation"),
                   g("item"), g("bytes_done"), g("tuples_done"), g("bytes_per_s"),
                   g("tuples_per_s"), g("progress"), g("wait_event"),
                   _seq(g("blocked_by"), "workers[].blocked_by"), g("client_cpu_percent"),
                   g("server_cpu_percent"), g("state"), g("query"),
                   None if wf is None else _seq(wf, "workers[].waiting_for"), missing, extra)


_DISK_KEYS = frozenset(("read_bytes_per_s", "write_bytes_per_s", "util_percent", "await_ms",
                        "queue_depth", "rotational"))


@dataclass(frozen=True, slots=True)
class DiskLoad:
    """One of the job's block devices (`host.disks{name}`)."""

    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    util_percent: float | None
    await_ms: float | None
    queue_depth: float | None
    rotational: bool | None
    missing: frozenset[str] = NOTHING
    extra: Mapping[str, Any] = field(default=NO_EXTRA)

    def to_json(self) -> dict[str, Any]:
        d = {"read_bytes_per_s": self.read_bytes_per_s,
             "write_bytes_per_s": self.write_bytes_per_s, "util_percent": self.util_percent,
             "await_ms": self.await_ms, "queue_depth": self.queue_depth,
             "rotational": self.rotational}
        return _out(d, self)

    @classmethod
    def from_json(cls, d: Any) -> DiskLoad:
        d, missing, extra = _read(d, "a disk", _DISK_KEYS)
        g = d.get
        return cls(g("read_bytes_per_s"), g("write_bytes_per_s"), g("util_percent"),
                   g("await_ms"), g("queue_depth"), g("rotational"), missing, extra)


_HOST_KEYS = frozenset(("cpu_percent", "per_cpu", "iowait_percent", "mem_used_percent",
                        "disks"))
NO_MEMORY = frozenset(("mem_used_percent",))


@dataclass(frozen=True, slots=True)
class HostLoad:
    """The host between the last two samples (`host`)."""

    cpu_percent: float | None
    per_cpu: tuple[float | None, ...]
    iowait_percent: float | None
    mem_used_percent: float | None
    disks: Mapping[str, DiskLoad]
    missing: frozenset[str] = NOTHING
    extra: Mapping[str, Any] = field(default=NO_EXTRA)

    def to_json(self) -> dict[str, Any]:
        d = {"cpu_percent": self.cpu_percent, "per_cpu": list(self.per_cpu),
             "iowait_percent": self.iowait_percent, "mem_used_percent": self.mem_used_percent,
             "disks": {n: x.to_json() for n, x in self.disks.items()}}
        return _out(d, self)

    @classmethod
    def from_json(cls, d: Any) -> HostLoad:
        d, missing, extra = _read(d, "host", _HOST_KEYS)
        g = d.get
        disks = {str(n): DiskLoad.from_json(x)
                 for n, x in _obj(g("disks"), "host.disks").items()}
        return cls(g("cpu_percent"), _seq(g("per_cpu"), "host.per_cpu"), g("iowait_percent"),
                   g("mem_used_percent"), disks, missing, extra)


# no host reading yet (the first sample, or a sample with no host part)
NO_HOST = HostLoad(None, (), None, None, {}, missing=NO_MEMORY)

_SERVER_KEYS = frozenset(("latency_ms", "error", "version"))


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """The server part of a sample (`server`)."""

    latency_ms: float | None
    error: str | None  # why this sample has no server part
    version: str | None
    missing: frozenset[str] = NOTHING
    extra: Mapping[str, Any] = field(default=NO_EXTRA)

    def to_json(self) -> dict[str, Any]:
        d = {"latency_ms": self.latency_ms, "error": self.error, "version": self.version}
        return _out(d, self)

    @classmethod
    def from_json(cls, d: Any) -> ServerStatus:
        d, missing, extra = _read(d, "server", _SERVER_KEYS)
        return cls(d.get("latency_ms"), d.get("error"), d.get("version"), missing, extra)


@dataclass(frozen=True, slots=True)
class Ending:
    """How the job ended, once it did (`job.outcome`, `job.exit_code`)."""

    outcome: str | None
    exit_code: int | None


_JOB_KEYS = ("kind", "state", "client_pid", "started", "started_from", "jobs", "format",
             "target", "database", "command", "progress", "eta_s", "eta_reason", "last_item",
             "bytes_per_s", "tuples_per_s", "items_total", "items_done", "active_workers",
             "grouping", "databases", "client_pids")
_JOB_SET = frozenset(_JOB_KEYS)
_END_KEYS = frozenset(("outcome", "exit_code"))
_JOB_KNOWN = _JOB_SET | _END_KEYS


@dataclass(frozen=True, slots=True)
class JobStatus:
    """The job's standing at this sample (`job`): what it is, how far it
    got, its rates; its kind's own fields; how it ended, once it did."""

    kind: str
    state: str  # running | finished | failed | ended
    client_pid: int | None
    started: str | None  # ISO 8601
    started_from: str | None  # client process | sessions | first sample
    jobs: int | None
    format: str | None
    target: str | None
    database: str | None
    command: tuple[str, ...]
    progress: float | None
    eta_s: float | None
    eta_reason: str | None
    last_item: str | None
    bytes_per_s: float
    tuples_per_s: float
    items_total: int
    items_done: int
    active_workers: int
    grouping: str | None
    databases: tuple[str, ...]
    client_pids: tuple[int, ...]
    kind_fields: Mapping[str, Any] = field(default=NO_EXTRA)  # its driver's (job_fields)
    ending: Ending | None = None  # once ended: job.outcome and job.exit_code
    missing: frozenset[str] = NOTHING

    # the kind fields the views show (docs/json.md; None where the kind has none)
    @property
    def phase(self) -> str | None:
        return self.kind_fields.get("phase")

    @property
    def progress_basis(self) -> str | None:
        return self.kind_fields.get("progress_basis")

    @property
    def scope(self) -> str | None:
        return self.kind_fields.get("scope")  # "cluster": a physical backup

    @property
    def host_only(self) -> bool:
        return bool(self.kind_fields.get("host_only"))

    @property
    def backup(self) -> Mapping[str, Any] | None:
        return self.kind_fields.get("backup")  # a physical backup's own figures

    @property
    def tables(self) -> Mapping[str, Any] | None:
        return self.kind_fields.get("tables")  # tables by state (a logical sync)

    @property
    def outcome(self) -> str | None:
        return self.ending.outcome if self.ending is not None else None

    @property
    def exit_code(self) -> int | None:
        return self.ending.exit_code if self.ending is not None else None

    @property
    def running(self) -> bool:
        return self.state == "running"

    def to_json(self) -> dict[str, Any]:
        d = {"kind": self.kind, "state": self.state, "client_pid": self.client_pid,
             "started": self.started, "started_from": self.started_from, "jobs": self.jobs,
             "format": self.format, "target": self.target, "database": self.database,
             "command": list(self.command), "progress": self.progress, "eta_s": self.eta_s,
             "eta_reason": self.eta_reason, "last_item": self.last_item,
             "bytes_per_s": self.bytes_per_s, "tuples_per_s": self.tuples_per_s,
             "items_total": self.items_total, "items_done": self.items_done,
             "active_workers": self.active_workers, "grouping": self.grouping,
             "databases": list(self.databases), "client_pids": list(self.client_pids)}
        if self.kind_fields:
            d.update(self.kind_fields)
        if self.ending is not None:
            d["outcome"] = self.ending.outcome
            d["exit_code"] = self.ending.exit_code
        return _finish(d, self.missing, NO_EXTRA) if self.missing else d

    @classmethod
    def from_json(cls, d: Any) -> JobStatus:
        d = _obj(d, "job")
        g = d.get
        missing = _JOB_SET.difference(d)
        own = {k: v for k, v in d.items() if k not in _JOB_KNOWN}
        ending = None
        if "outcome" in d or "exit_code" in d:
            ending = Ending(g("outcome"), g("exit_code"))
            missing |= _END_KEYS.difference(d)
        return cls(g("kind"), g("state"), g("client_pid"), g("started"), g("started_from"),
                   g("jobs"), g("format"), g("target"), g("database"),
                   _seq(g("command"), "job.command"), g("progress"), g("eta_s"),
                   g("eta_reason"), g("last_item"), g("bytes_per_s"), g("tuples_per_s"),
                   g("items_total"), g("items_done"), g("active_workers"), g("grouping"),
                   _seq(g("databases"), "job.databases"),
                   _seq(g("client_pids"), "job.client_pids"), own or NO_EXTRA, ending,
                   frozenset(missing) if missing else NOTHING)


_SAMPLE_SET = frozenset(("schema", "ts", "elapsed_s", "job", "workers", "host", "bottleneck",
                         "server", "free_bytes", "warnings", "notes"))
NO_VERDICT = Verdict("", "")  # a document read back without one


@dataclass(frozen=True, slots=True)
class Sample:
    """One published sample (pgparmon.sample/1)."""

    ts: str  # ISO 8601, UTC, ms
    elapsed_s: float  # since the job started
    job: JobStatus
    workers: tuple[WorkerRow, ...]
    host: HostLoad
    bottleneck: Verdict  # what limits the run now
    server: ServerStatus
    free_bytes: int | None  # free space where the job writes
    warnings: tuple[JobWarning, ...]
    notes: tuple[str, ...]  # said once, kept, in the order said
    schema: str = SCHEMA
    missing: frozenset[str] = NOTHING
    extra: Mapping[str, Any] = field(default=NO_EXTRA)

    @property
    def ended(self) -> bool:
        return self.job.state in ("finished", "failed", "ended")

    def has(self, part: str) -> bool:
        """Whether the document held this part (a partial or older one may not)."""
        return part not in self.missing

    def worker(self, pid: int) -> WorkerRow | None:
        return next((w for w in self.workers if w.pid == pid), None)

    def to_json(self) -> dict[str, Any]:
        """The document, keys in its order (docs/json.md)."""
        d = {"schema": self.schema, "ts": self.ts, "elapsed_s": self.elapsed_s,
             "job": self.job.to_json(), "workers": [w.to_json() for w in self.workers],
             "host": self.host.to_json(),
             "bottleneck": {"kind": self.bottleneck.kind, "detail": self.bottleneck.detail},
             "server": self.server.to_json(), "free_bytes": self.free_bytes,
             "warnings": [{"code": w.code, "message": w.message} for w in self.warnings],
             "notes": list(self.notes)}
        return _out(d, self)

    @classmethod
    def from_json(cls, d: Any) -> Sample:
        """A document read back (a recording, JSON Lines, an older version's
        sample): SampleError when it is not one."""
        if not isinstance(d, Mapping):
            raise SampleError(f"a sample is a {type(d).__name__}, not an object")
        schema = d.get("schema", SCHEMA)
        if schema != SCHEMA:
            raise SampleError(f"a sample of schema {schema!r}, not {SCHEMA}")
        missing, extra = _gaps(d, _SAMPLE_SET)
        g = d.get
        b = _obj(g("bottleneck"), "bottleneck")
        warns = []
        for w in _seq(g("warnings"), "warnings"):
            w = _obj(w, "a warning")
            warns.append(JobWarning(w.get("code"), w.get("message")))  # type: ignore[arg-type]
        return cls(g("ts"), g("elapsed_s"), JobStatus.from_json(g("job")),
                   tuple(WorkerRow.from_json(w) for w in _seq(g("workers"), "workers")),
                   HostLoad.from_json(g("host")),
                   Verdict(b.get("kind"), b.get("detail")) if b else NO_VERDICT,
                   ServerStatus.from_json(g("server")), g("free_bytes"), tuple(warns),
                   _seq(g("notes"), "notes"), schema, missing, extra)


def read_samples(docs: Iterable[Any]) -> list[Sample]:
    """Documents read back (a recording's samples, JSON Lines) as samples."""
    return [Sample.from_json(d) for d in docs]
