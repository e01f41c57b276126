"""What the calibration probe returns (`ProbeResult`: its points and
notes), the tables it may read (`ProbeTable`), and its error (`ProbeError`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

GB = 1e9
# A step whose sessions waited on I/O in at most this share of the samples
# did not wait on the storage: its pages came as fast as the streams took them
CACHED_IO_SHARE = 0.1


class ProbeError(Exception):
    """The probe could not run or measure: a one-line, user-facing message."""


@dataclass(frozen=True)
class ProbeTable:
    """A table the probe may read.  name: the qualified name for messages
    (the SQL is built from schema and relname, quoted here).  relpages: from
    pg_class (never pg_relation_size)."""

    name: str
    schema: str
    relname: str
    relpages: int  # the main fork's pages: what ctid ranges cover
    toast_pages: int = 0  # its TOAST table's, read along with its rows

    @property
    def toast_factor(self) -> float:
        """Heap + TOAST bytes per main-fork byte: a range's rows carry their
        share of the TOAST (taken as even over the table)."""
        return (self.relpages + self.toast_pages) / self.relpages if self.relpages else 1.0

    @classmethod
    def of(cls, schema: str, relname: str, relpages: int) -> ProbeTable:
        return cls(qualified_name(schema, relname), schema, relname, int(relpages))


@dataclass(frozen=True)
class ProbePoint:
    """One step: `streams` streams for elapsed_s seconds.

    heap_bytes: heap bytes of the ranges copied; out_bytes: bytes written
    (compressed); elapsed_s: the step's time as throughput sees it (from the
    first COPY to the files fsynced, with the ragged end, where some streams
    had already finished their last range, counted at its average);
    bytes_per_s = heap_bytes / elapsed_s, the total of all streams.
    client_cpu_s: CPU of psql and the compressors; server_cpu_s: of the
    backends (None when the server is not local or not readable).
    disk_*: the target's device over the step (util in percent, 0..100);
    None when no block device holds the target.  wall_s: the step's plain
    wall time; host_cpu_percent: busy share of all CPUs over the step."""

    streams: int
    heap_bytes: float
    out_bytes: int
    elapsed_s: float
    bytes_per_s: float
    client_cpu_s: float
    server_cpu_s: float | None
    disk_util: float | None
    disk_await_ms: float | None
    disk_queue: float | None
    wall_s: float = 0.0
    host_cpu_percent: float | None = None
    ranges: int = 0
    # the step read pages this probe had read before (its ranges ran out and
    # started over): the cache served them, which a real run never sees
    reread: bool = False
    io_wait_share: float | None = None  # of its active sessions' samples: waiting on I/O
    # a restore step read as pg_restore would see it (`client_cost`): what
    # the probe measured itself, before; None when the step was not changed
    probe_bytes_per_s: float | None = None
    probe_client_cpu_s: float | None = None
    # of wall_s: the end of the step, every stream's output fsynced (at once)
    sync_s: float | None = None


@dataclass(frozen=True)
class WalPoint:
    """k sessions writing WAL: wal_bytes inserted in seconds."""

    streams: int
    wal_bytes: float
    seconds: float

    @property
    def bytes_per_s(self) -> float:
        return self.wal_bytes / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"streams": self.streams, "wal_bytes": round(self.wal_bytes),
                "seconds": round(self.seconds, 4), "bytes_per_s": round(self.bytes_per_s)}


@dataclass(frozen=True)
class LoggedStep:
    """A probe's step into LOGGED scratch tables: the COPY probe's, one
    stream (`copyload`), the restore probe's at its most streams
    (`loggedtop`): its point (heap_bytes: file bytes), the WAL insert
    position's progress from before its session started to after it ended
    (wal_bytes over seconds), and the rate at which the server wrote WAL of
    its own meanwhile, read over the unlogged steps (which write none):
    other sessions' WAL, taken out of this step's."""

    point: ProbePoint
    wal_bytes: float
    seconds: float
    background_wal_bytes_per_s: float = 0.0

    @property
    def own_wal_bytes(self) -> float:
        return max(0.0, self.wal_bytes - self.background_wal_bytes_per_s * self.seconds)

    @property
    def wal_per_byte(self) -> float | None:
        """WAL bytes the load writes per file byte; None when nothing loaded."""
        if self.point.heap_bytes <= 0:
            return None
        return self.own_wal_bytes / self.point.heap_bytes

    def to_json(self) -> dict[str, Any]:
        w = self.wal_per_byte
        return {"point": point_json(self.point),
                "wal_bytes": round(self.wal_bytes), "seconds": round(self.seconds, 4),
                "background_wal_bytes_per_s": round(self.background_wal_bytes_per_s),
                "wal_per_byte": None if w is None else round(w, 4)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LoggedStep:
        return cls(point_of(d["point"]), float(d["wal_bytes"]), float(d["seconds"]),
                   float(d.get("background_wal_bytes_per_s") or 0.0))


@dataclass(frozen=True)
class GrownStep:
    """The COPY probe's one-stream step into its scratch table while that
    still held what the last step loaded (`copyload`): its point
    (heap_bytes: file bytes) and the file bytes the table held before it
    (`before_bytes`): the index grown that far (`indexgrowth`)."""

    point: ProbePoint
    before_bytes: float

    def to_json(self) -> dict[str, Any]:
        return {"point": point_json(self.point),
                "before_bytes": round(self.before_bytes)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GrownStep:
        return cls(point_of(d["point"]), float(d["before_bytes"]))


def point_json(p: ProbePoint) -> dict[str, Any]:
    """A ProbePoint as JSON, its floats to 4 places (`point_of` reads it back)."""
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(p).items()}


def point_of(d: dict[str, Any]) -> ProbePoint:
    """A ProbePoint read back from its JSON (the fields it has)."""
    names = {f.name for f in fields(ProbePoint)}
    return ProbePoint(**{k: v for k, v in d.items() if k in names})


@dataclass
class ProbeResult:
    points: list[ProbePoint]
    seconds: float  # the whole probe: warm-up, steps, cleanup
    budget_s: float
    compression: str  # "gzip:6", "lz4:1", "zstd:3", "none"
    ratio: float | None  # out bytes / heap bytes over the counted steps
    device: str | None  # the target's block device (diskstats name)
    notes: list[str] = field(default_factory=list)
    # restore probe: seconds of one index build per heap byte of its table
    # (one session, nothing else running); None when not measured
    build_s_per_byte: float | None = None
    build: dict[str, Any] | None = None  # what was built: table, index, heap_bytes, seconds
    # the real tool's client CPU per work unit, where it differs from the
    # probe's own client (the restore probe's: pg_restore's, timed on a sample)
    client_s_per_byte: float | None = None
    wal: list[WalPoint] = field(default_factory=list)  # the WAL step: W(k)
    # stream counts of the plan (1, 2, 4, ... max) not measured for the
    # budget: left out from the middle (plan.plan_counts) or not reached
    skipped: list[int] = field(default_factory=list)
    # the COPY probe's one-stream step into a logged scratch table
    logged: LoggedStep | None = None
    # the COPY probe's one-stream step into its grown scratch table
    grown: GrownStep | None = None
    # the restore and COPY probes' step at their most streams into logged tables
    logged_top: LoggedStep | None = None

    def fit_points(self) -> list[tuple[float, float]]:
        """(streams, total heap bytes/s), fewest streams first: usl.fit's input
        (`first_reads`)."""
        pts = self.first_reads()
        return [(float(p.streams), p.bytes_per_s) for p in pts]

    def rereads_kept(self) -> bool:
        """Whether the steps that re-read the probe's own pages count: the
        steps that read fresh pages never waited on the storage (their pages
        came from the cache or as fast as the streams took them, and a real
        run on this host reads them so too).  A re-read is left out when a
        fresh step waited on I/O, or when the waits were not sampled."""
        fresh = [p for p in self.points if not p.reread]
        return bool(fresh) and all(p.io_wait_share is not None
                                   and p.io_wait_share <= CACHED_IO_SHARE for p in fresh)

    def slowed(self, rate: float, cpu: float = 1.0) -> ProbeResult:
        """Every step as it runs at `rate` times its measured speed (its
        time over rate), its backends' CPU time times `cpu`: how the COPY
        probe carries a cost its scratch table did not pay (the WAL, an
        index's growth) into all its counts."""
        return self.slowed_by(lambda _k: rate, cpu)

    def slowed_by(self, rate_of: Callable[[int], float], cpu: float = 1.0) -> ProbeResult:
        """`slowed`, each step at rate_of(its streams) times its speed."""
        def conv(p: ProbePoint) -> ProbePoint:
            rate = rate_of(p.streams)
            return dataclasses.replace(
                p, elapsed_s=p.elapsed_s / rate, wall_s=p.wall_s / rate,
                bytes_per_s=p.bytes_per_s * rate,
                server_cpu_s=None if p.server_cpu_s is None else p.server_cpu_s * cpu)

        return dataclasses.replace(self, points=[conv(p) for p in self.points])

    def first_reads(self) -> list[ProbePoint]:
        """The steps to fit: every step when re-reads count (`rereads_kept`),
        else those that read fresh pages while two remain (a real run reads
        each page once: a re-read of pages the probe itself just cached
        measures the cache, not the storage the run will read)."""
        pts = sorted(self.points, key=lambda p: p.streams)
        if self.rereads_kept():
            return pts
        fresh = [p for p in pts if not p.reread]
        return fresh if len(fresh) >= 2 else pts

    def point(self, k: int) -> ProbePoint | None:
        for p in self.points:
            if p.streams == k:
                return p
        return None

    def cpu_s_per_gb(self, k: int) -> float | None:
        """CPU seconds per GB (1e9 bytes) of heap at k streams: the client's,
        plus the server's when measured.  None when k was not measured."""
        p = self.point(k)
        if p is None or p.heap_bytes <= 0:
            return None
        cpu = p.client_cpu_s + (p.server_cpu_s or 0.0)
        return cpu / (p.heap_bytes / GB)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProbeResult:
        """A pgparmon.probe/1 document read back (an advice's `probe`): the
        fields it has, the rest at their defaults (an older document has no
        `sync_s`, `client_s_per_byte`, `wal`, `logged` or `grown`)."""
        pts = [point_of(p) for p in d.get("points") or []]
        wal = [WalPoint(int(w["streams"]), float(w["wal_bytes"]), float(w["seconds"]))
               for w in d.get("wal") or []]
        return cls(points=pts, seconds=float(d.get("seconds") or 0.0),
                   budget_s=float(d.get("budget_s") or 0.0),
                   compression=str(d.get("compression") or ""), ratio=d.get("ratio"),
                   device=d.get("device"), notes=list(d.get("notes") or []),
                   build_s_per_byte=d.get("build_s_per_byte"), build=d.get("build"),
                   client_s_per_byte=d.get("client_s_per_byte"), wal=wal,
                   skipped=[int(k) for k in d.get("skipped_streams") or []],
                   logged=LoggedStep.from_json(d["logged"]) if d.get("logged") else None,
                   grown=GrownStep.from_json(d["grown"]) if d.get("grown") else None,
                   logged_top=(LoggedStep.from_json(d["logged_top"]) if d.get("logged_top")
                               else None))

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "pgparmon.probe/1",
            "compression": self.compression,
            "budget_s": round(self.budget_s, 3),
            "seconds": round(self.seconds, 3),
            "ratio": None if self.ratio is None else round(self.ratio, 4),
            "device": self.device,
            "notes": list(self.notes),
            "build_s_per_byte": self.build_s_per_byte,
            "build": None if self.build is None else dict(self.build),
            "client_s_per_byte": self.client_s_per_byte,
            "wal": [w.to_json() for w in self.wal],
            "skipped_streams": sorted(self.skipped),
            "logged": None if self.logged is None else self.logged.to_json(),
            "grown": None if self.grown is None else self.grown.to_json(),
            "logged_top": None if self.logged_top is None else self.logged_top.to_json(),
            "points": [point_json(p) for p in sorted(self.points, key=lambda p: p.streams)],
        }


def qualified_name(schema: str, relname: str) -> str:
    """schema.relname with both quoted, for the probe's SQL."""
    return f"{_qident(schema)}.{_qident(relname)}"


def _qident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'
