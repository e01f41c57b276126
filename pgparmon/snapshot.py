"""The snapshot stream: plain frozen values, one per tick.

A Snapshot holds raw, cumulative readings only (counters, positions, states);
rates and progress are derived downstream, so a recording replays through the
same analysis as a live run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any


def _from_dict(cls: type, d: dict[str, Any]) -> Any:
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class Backend:
    pid: int
    datname: str | None
    usename: str | None
    application_name: str | None
    client_addr: str | None
    client_port: int | None
    backend_start: float | None
    xact_start: float | None
    query_start: float | None
    state: str | None
    wait_event_type: str | None
    wait_event: str | None
    backend_type: str | None
    backend_xmin: str | None
    leader_pid: int | None
    query: str | None
    blocked_by: tuple[int, ...] = ()
    waiting_for: tuple[str, ...] | None = None  # (locktype, mode, relation)
    state_change: float | None = None  # when the session entered its state (epoch)

    @staticmethod
    def from_row(r: list[Any]) -> Backend:
        b = Backend(*r[:16])
        return replace(b, blocked_by=tuple(r[16] or ()),
                       waiting_for=tuple(r[17]) if r[17] else None,
                       state_change=r[18] if len(r) > 18 else None)

    @property
    def wait(self) -> str | None:
        if self.wait_event_type and self.wait_event:
            return f"{self.wait_event_type}:{self.wait_event}"
        return None


@dataclass(frozen=True)
class CopyProgress:
    pid: int
    datname: str | None
    relid: int | None
    relation: str | None
    command: str | None
    type: str | None
    bytes_processed: int
    bytes_total: int
    tuples_processed: int
    tuples_excluded: int


@dataclass(frozen=True)
class IndexProgress:
    pid: int
    datname: str | None
    relid: int | None
    relation: str | None
    index_relid: int | None
    index_name: str | None
    command: str | None
    phase: str | None
    blocks_total: int
    blocks_done: int
    tuples_total: int
    tuples_done: int

    @property
    def fraction(self) -> float | None:
        """Rough progress of one build: the heap scan, then the sort, then the
        tree load, weighted by what usually dominates."""
        ph = (self.phase or "").lower()
        if "scanning table" in ph or "scanning heap" in ph:
            return 0.6 * _ratio(self.blocks_done, self.blocks_total)
        if "sorting" in ph:
            return 0.65
        if "loading tuples" in ph:
            return 0.7 + 0.3 * _ratio(self.tuples_done, self.tuples_total)
        if "initializing" in ph:
            return 0.0
        if "waiting" in ph or "validat" in ph:
            return 0.95
        return None


@dataclass(frozen=True)
class MaintProgress:
    """A VACUUM (pg_stat_progress_vacuum) or ANALYZE (pg_stat_progress_analyze,
    13+) running: its heap blocks scanned, or its sample blocks."""

    pid: int
    datname: str | None
    relid: int | None
    relation: str | None
    command: str | None  # "VACUUM" | "ANALYZE"
    phase: str | None
    blocks_total: int | None
    blocks_done: int | None

    @property
    def fraction(self) -> float | None:
        """The scan's share (a VACUUM's later index and heap passes count as
        the last 10%)."""
        ph = (self.phase or "").lower()
        if not self.blocks_total:
            return None
        f = _ratio(self.blocks_done or 0, self.blocks_total)
        if self.command == "VACUUM":
            if "scanning heap" in ph:
                return 0.9 * f
            if "vacuuming" in ph or "cleaning" in ph or "truncating" in ph or "final" in ph:
                return 0.95
            return 0.9 * f
        return f


@dataclass(frozen=True)
class BackupProgress:
    """A base backup running (pg_stat_progress_basebackup, 13+): its phase,
    and bytes streamed of a total the server estimated when streaming began
    (None with --no-estimate-size)."""

    pid: int
    phase: str | None
    backup_total: int | None
    backup_streamed: int | None
    tablespaces_total: int | None
    tablespaces_streamed: int | None


@dataclass(frozen=True)
class WalSender:
    """A replication connection of a base backup (pg_stat_replication): its
    state, the WAL bytes it has sent (an LSN as a byte position) and the
    replication slot it uses."""

    pid: int
    state: str | None
    sent: int | None
    slot: str | None


def _ratio(a: float, b: float) -> float:
    return min(1.0, a / b) if b else 0.0


@dataclass(frozen=True)
class DbSample:
    """One round trip's worth of server state, or why there is none."""

    server_ts: float | None = None
    backends: tuple[Backend, ...] = ()
    copies: tuple[CopyProgress, ...] | None = ()  # None: no COPY progress view
    indexes: tuple[IndexProgress, ...] | None = ()  # None: no CREATE INDEX view
    latency_ms: float | None = None
    error: str | None = None
    maint: tuple[MaintProgress, ...] = ()  # VACUUM / ANALYZE running
    # the server's checkpoints so far: (requested, timed); None: not read
    checkpoints: tuple[int, int] | None = None
    basebackups: tuple[BackupProgress, ...] | None = ()  # None: no such view (< 13)
    senders: tuple[WalSender, ...] = ()  # base backups' replication connections
    # WAL archiving so far: (archived, failed, last failed segment, when it
    # failed, when the last one was archived, the last segment archived);
    # None: not read. Recordings before the last field have five.
    archiver: tuple[Any, ...] | None = None
    # where WAL is written (bytes from 0/0), the WAL segment size (bytes),
    # checkpoint_timeout (s), checkpoint_completion_target; None: not read
    wal: tuple[int | None, int | None, float | None, float | None] | None = None
    # replication slots: (name, type, active, wal_status, WAL bytes retained);
    # None: not read
    slots: tuple[tuple[str, str, bool, str | None, int | None], ...] | None = None
    # the drivers' own parts of the sample, by name, as the server returned
    # them (Driver.sample_parts: a subscription's per-table sync states)
    parts: dict[str, Any] | None = None

    @staticmethod
    def from_json(doc: dict[str, Any], latency_ms: float,
                  parts: dict[str, Any] | None = None) -> DbSample:
        copies = doc.get("copy")
        indexes = doc.get("index")
        ckpt = doc.get("ckpt")
        bb = doc.get("bb")
        arch = doc.get("arch")
        slots = doc.get("slots")
        wal = doc.get("wal")
        return DbSample(
            wal=tuple(wal) if wal else None,  # type: ignore[arg-type]
            slots=None if slots is None else tuple(
                (str(r[0]), str(r[1]), bool(r[2]), r[3], r[4]) for r in slots),
            basebackups=None if bb is None else tuple(BackupProgress(*r) for r in bb),
            senders=tuple(WalSender(*r) for r in doc.get("repl") or ()),
            archiver=(int(arch[0] or 0), int(arch[1] or 0), arch[2], arch[3],
                      arch[4] if len(arch) > 4 else None,
                      arch[5] if len(arch) > 5 else None) if arch else None,
            checkpoints=(int(ckpt[0]), int(ckpt[1])) if ckpt and None not in ckpt[:2] else None,
            server_ts=doc.get("now"),
            backends=tuple(Backend.from_row(r) for r in doc.get("activity") or ()),
            copies=None if copies is None else tuple(CopyProgress(*r) for r in copies),
            indexes=None if indexes is None else tuple(IndexProgress(*r) for r in indexes),
            maint=tuple(MaintProgress(*r) for r in doc.get("maint") or ()),
            latency_ms=latency_ms, parts=parts,
        )


@dataclass(frozen=True)
class OpenFile:
    path: str
    position: int
    mode: str


@dataclass(frozen=True)
class ClientProc:
    """A client process of the job (pg_dump / pg_restore leader or worker, a
    COPY loader), or a server backend process on this host."""

    pid: int
    ppid: int | None
    name: str
    create_time: float | None
    status: str | None
    cpu_user: float | None
    cpu_system: float | None
    read_chars: int | None
    write_chars: int | None
    open_files: tuple[OpenFile, ...] | None  # None: not readable (another user)

    @property
    def cpu_s(self) -> float | None:
        if self.cpu_user is None or self.cpu_system is None:
            return None
        return self.cpu_user + self.cpu_system


@dataclass(frozen=True)
class FileSize:
    path: str
    size: int


@dataclass(frozen=True)
class Snapshot:
    ts: float  # time.monotonic()
    wall: float  # time.time()
    db: DbSample | None
    host: Any | None  # sample.host.HostSample
    clients: tuple[ClientProc, ...] = ()
    backends_os: tuple[ClientProc, ...] = ()  # server backend processes (same host)
    files: tuple[FileSize, ...] = ()  # the dump directory's files, as they grow
    free_bytes: int | None = None  # free space where the job writes
    root_alive: bool | None = None  # the job's leader process (None: not visible)
    exit_code: int | None = None  # known when we started the job ourselves
    # the error lines of its output once it failed (redacted), same condition
    exit_error: str | None = None
    # (backend pid, local client pid) of the job's sessions, when the job is a
    # process tree on this host (None: not linked this tick)
    links: tuple[tuple[int, int], ...] | None = None
    # what the tool itself says (a pgBackRest lock file's JSON; jobs/ drivers'
    # read_status), as read this tick; None: nothing
    tool: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Snapshot:
        """Inverse of to_dict (a recording's JSON): rebuilds the nested values."""
        from .readers.host import HostSample

        db = d.get("db")
        dbs = None
        if db is not None:
            dbs = DbSample(
                server_ts=db.get("server_ts"),
                backends=tuple(_backend(b) for b in db.get("backends") or ()),
                copies=None if db.get("copies") is None else tuple(
                    _from_dict(CopyProgress, c) for c in db["copies"]),
                indexes=None if db.get("indexes") is None else tuple(
                    _from_dict(IndexProgress, c) for c in db["indexes"]),
                maint=tuple(_from_dict(MaintProgress, c) for c in db.get("maint") or ()),
                latency_ms=db.get("latency_ms"), error=db.get("error"),
                checkpoints=tuple(db["checkpoints"]) if db.get("checkpoints") else None,
                basebackups=None if db.get("basebackups", ()) is None else tuple(
                    _from_dict(BackupProgress, c) for c in db.get("basebackups") or ()),
                senders=tuple(_from_dict(WalSender, c) for c in db.get("senders") or ()),
                archiver=tuple(db["archiver"]) if db.get("archiver") else None,
                wal=tuple(db["wal"]) if db.get("wal") else None,  # type: ignore[arg-type]
                slots=None if db.get("slots") is None else tuple(
                    (str(r[0]), str(r[1]), bool(r[2]), r[3], r[4]) for r in db["slots"]),
                parts=db.get("parts"))
        return Snapshot(
            ts=float(d["ts"]), wall=float(d["wall"]), db=dbs,
            host=HostSample.from_dict(d["host"]) if d.get("host") else None,
            clients=tuple(_proc(c) for c in d.get("clients") or ()),
            backends_os=tuple(_proc(c) for c in d.get("backends_os") or ()),
            files=tuple(_from_dict(FileSize, f) for f in d.get("files") or ()),
            free_bytes=d.get("free_bytes"),
            root_alive=d.get("root_alive"), exit_code=d.get("exit_code"),
            exit_error=d.get("exit_error"),
            links=None if d.get("links") is None else tuple(
                (int(a), int(b)) for a, b in d["links"]),
            tool=d.get("tool"))


def _backend(d: dict[str, Any]) -> Backend:
    b: Backend = _from_dict(Backend, d)
    return replace(b, blocked_by=tuple(b.blocked_by or ()),
                   waiting_for=tuple(b.waiting_for) if b.waiting_for else None)


def _proc(d: dict[str, Any]) -> ClientProc:
    c: ClientProc = _from_dict(ClientProc, d)
    files = d.get("open_files")
    return replace(c, open_files=None if files is None else tuple(
        _from_dict(OpenFile, f) for f in files))
