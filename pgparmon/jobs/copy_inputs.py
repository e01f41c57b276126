"""What the COPY driver keeps about one load (CopyState, its
Driver.new_state: the Tracker holds it without reading it), and a local
loader's input files read from the host: read position over size, each
file's read rate, whether a reader stopped mid-file."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..analyze.rates import WindowRate
from ..readers.procs import is_input_file
from ..snapshot import Snapshot
from .statements import copy_target, norm_rel

# bytes a reader may still take at its end beyond its measured reach (its
# stdio buffer, a last burst)
READ_SLACK = 256 * 1024


@dataclass
class CopyState:
    # a loader's input files, by "client pid:path": [size, furthest read position]
    inputs: dict[str, list[float]] = field(default_factory=dict)
    input_rate: WindowRate = field(default_factory=WindowRate)  # bytes read of them all
    # each file's own read rate, and the keys seen open at the last reading:
    # a parallel loader ends with its slowest reader
    input_rates: dict[str, WindowRate] = field(default_factory=dict)
    inputs_open: set[str] = field(default_factory=set)
    # the same files as last seen open: key -> (ts, position, bytes/s, table)
    input_seen: dict[str, tuple[float, float, float, str | None]] = field(default_factory=dict)
    # where each reader was first seen in its file: a loader that cuts a
    # file into ranges starts its readers mid-file
    input_start: dict[str, float] = field(default_factory=dict)
    copy_from_seen: bool = False  # a session of the job has run a COPY FROM
    # databases where the job's sessions read (COPY TO) and load (COPY
    # FROM): a copy tool's source and target
    copy_reads: set[str] = field(default_factory=set)
    copy_writes: set[str] = field(default_factory=set)
    plan_source: str | None = None  # the database a copy was planned from


def read_inputs(st: CopyState, snap: Snapshot) -> None:
    """A local loader's input files: read position over size. A file its
    process closed was read to its end; one whose process is gone keeps
    its last position (cut_short judges it at the end)."""
    sizes = {f.path: f.size for f in snap.files}
    tables = _tables_of_clients(snap)
    if tables:
        st.copy_from_seen = True
    if not st.copy_from_seen:
        # files a process reads while none of the job's sessions has run a
        # COPY FROM are not a load's input (a backup tool reading the data
        # directory, a script reading its own data): no percentage from them
        return
    open_now: set[str] = set()
    for c in snap.clients:
        for f in c.open_files or ():
            if f.path not in sizes or not is_input_file(f):
                continue
            key = f"{c.pid}:{f.path}"
            st.input_start.setdefault(key, float(f.position))
            ent = st.inputs.setdefault(key, [float(sizes[f.path]), 0.0])
            ent[0] = max(ent[0], float(sizes[f.path]))
            pos = max(ent[1], min(float(f.position), ent[0]))
            last = st.input_seen.get(key)
            rate = last[2] if last else 0.0
            if last and snap.ts > last[0]:
                rate = max(rate, (pos - last[1]) / (snap.ts - last[0]))
            table = tables.get(c.pid) or (last[3] if last else None)
            st.input_seen[key] = (snap.ts, pos, rate, table)
            ent[1] = pos
            st.input_rates.setdefault(key, WindowRate()).add(snap.ts, pos)
            open_now.add(key)
    st.inputs_open = open_now
    alive = {c.pid for c in snap.clients if c.status != "zombie"}
    if all(c.open_files is not None for c in snap.clients):
        for key, ent in st.inputs.items():
            if key not in open_now and int(key.split(":", 1)[0]) in alive:
                ent[1] = ent[0]
    if st.inputs:
        st.input_rate.add(snap.ts, sum(e[1] for e in st.inputs.values()))


def input_files(st: CopyState) -> tuple[float, float]:
    """(bytes of the input files, bytes read).  A file with one reader: its
    read position.  A file several readers share (a loader that cuts it into
    ranges, one per process): each reader covers the part from where it was
    first seen to where it is now, the one first seen lowest from the file's
    start, and the file counts once."""
    by_path: dict[str, list[tuple[float, float, float]]] = {}
    for key, (size, pos) in st.inputs.items():
        by_path.setdefault(key.split(":", 1)[1], []).append(
            (st.input_start.get(key, 0.0), pos, size))
    total = done = 0.0
    for readers in by_path.values():
        size = max(r[2] for r in readers)
        if len(readers) == 1:
            total, done = total + size, done + min(readers[0][1], size)
            continue
        spans = sorted((lo, max(lo, pos)) for lo, pos, _ in readers)
        spans[0] = (0.0, spans[0][1])
        covered, end = 0.0, 0.0
        for lo, hi in spans:
            lo, hi = max(lo, end), min(hi, size)
            if hi > lo:
                covered += hi - lo
                end = hi
        total, done = total + size, done + covered
    return total, done


def client_fraction(st: CopyState, client_pid: int) -> float | None:
    """How far one client process has read its input files (a loader's
    stream: read position over size), None when it reads none."""
    ents = [e for k, e in st.inputs.items() if k.split(":", 1)[0] == str(client_pid)]
    size = sum(e[0] for e in ents)
    return min(1.0, sum(e[1] for e in ents) / size) if size > 0 else None


def reader_ends(st: CopyState) -> list[tuple[float, str]]:
    """Each file open now: the seconds until it is read to its end at its
    reader's own recent read rate, and what it loads (its table, else the
    file); soonest first. A reader whose rate cannot be said is left out."""
    ends = []
    for key in st.inputs_open:
        size, pos = st.inputs[key]
        wr = st.input_rates.get(key)
        r = wr.rate(15.0) if wr else None
        if size > pos and r and r > 0:
            seen = st.input_seen.get(key)
            ends.append(((size - pos) / r, (seen[3] if seen else None) or key.split(":", 1)[1]))
    return sorted(ends)


def readers_tail(ends: list[tuple[float, str]], streams: int) -> float:
    """The part of the readers' rest with fewer than `streams` of them
    reading: from the first time fewer read to the last one's end."""
    secs = [s for s, _ in ends]
    if not secs:
        return 0.0
    if len(secs) < streams:
        return secs[-1]
    return secs[-1] - secs[len(secs) - streams]


def cut_inputs(st: CopyState, snap: Snapshot) -> str | None:
    """Why the load was cut short, when its processes are gone: an input
    file left further from its end than its reader could have read
    between the last sample that saw it open and now (a loader reading
    to the end and exiting normally is always within that reach)."""
    alive = {c.pid for c in snap.clients if c.status != "zombie"}

    def reached_end(key: str) -> bool:
        ts, pos, rate, _ = st.input_seen[key]
        size = st.inputs[key][0]
        reach = 2.0 * rate * max(snap.ts - ts, 0.0) + READ_SLACK
        return pos >= size or (int(key.split(":", 1)[0]) not in alive
                               and size - pos <= reach)

    # a file whose readers cut it into ranges: one of them read to its end
    ended = {key.split(":", 1)[1] for key in st.input_seen if reached_end(key)}
    cuts = []
    for key, (_ts, pos, _rate, table) in sorted(st.input_seen.items()):
        pid, path = key.split(":", 1)
        size = st.inputs[key][0]
        if int(pid) in alive or path in ended:
            continue
        into = f" into {table}" if table else ""
        cuts.append(f"{path}{into} read to {pos / size:.0%} ({int(pos)} of {int(size)} "
                    "bytes)")
    if not cuts:
        return None
    return "the loader stopped mid-file: " + "; ".join(cuts)


def _tables_of_clients(snap: Snapshot) -> dict[int, str]:
    """client pid -> the table its session loads now (COPY FROM)."""
    if snap.db is None or not snap.links:
        return {}
    by_pid = {b.pid: b for b in snap.db.backends}
    named = {c.pid: c.relation for c in snap.db.copies or () if c.relation}
    out: dict[int, str] = {}
    for bp, cp in snap.links:
        ct = copy_target(by_pid[bp].query) if bp in by_pid else None
        if ct is not None and ct[0] == "from" and by_pid[bp].state == "active":
            out[cp] = norm_rel(named.get(bp)) or ct[1]  # schema-qualified when known
    return out
