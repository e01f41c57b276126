"""The dump probe (`run_probe`): total throughput X(k) with k parallel
streams, the way ``pg_dump -Fd -j k`` moves data.

Each stream is one ``psql`` session that runs, one after the other,
``COPY (SELECT * FROM t WHERE ctid >= '(a,0)'::tid AND ctid < '(b,0)'::tid)
TO STDOUT`` (a TID range scan, PostgreSQL 14+) over disjoint block ranges of
the largest tables, piped into the compressor CLI (gzip / lz4 / zstd, or
straight into the file for "none") writing a file in a scratch directory
inside the dump target.  The files are fsynced before the clock stops, and
the scratch directory is always removed (errors and Ctrl-C included).

Work unit: heap bytes, as the dump's items are sized (relpages of the table
and its TOAST table): (b - a) * block_size for a range of main-fork blocks,
times the table's (main + TOAST pages) / main pages, the TOAST its rows
carry taken as even over the table.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence

from ...connect import ConnTarget
from ...readers.files import nearest_existing
from ... import units as fmt
from .compress import compressor
from .plan import check_args, cpu_note, measure_steps, probe_device
from .psql import checked_psql, is_local_host, psql_env
from .results import ProbeError, ProbeResult, ProbeTable, qualified_name
from .steps import StepRunner
from .streams import Range, Stream
from .waits import WaitSampler

MIN_SERVER_VERSION = 140000  # TID range scans
MIN_RANGE_PAGES = 8


class BlockRanges:
    """Disjoint block ranges of the tables, largest table first.  When all
    blocks have been handed out, it starts over (reused: the cache helps)."""

    def __init__(self, tables: Sequence[ProbeTable]) -> None:
        self.tables = sorted((t for t in tables if t.relpages > 0), key=lambda t: -t.relpages)
        self.pos = [0] * len(self.tables)
        self.i = 0
        self.reused = False

    @property
    def total_pages(self) -> int:
        return sum(t.relpages for t in self.tables)

    @property
    def fresh_bytes_per_block(self) -> list[tuple[int, float]]:
        """(blocks not handed out yet, work units a block) of each table."""
        return [(t.relpages - pos, t.toast_factor) for t, pos in zip(self.tables, self.pos,
                                                                         strict=True)]

    def take(self, pages: int) -> tuple[ProbeTable, int, int]:
        if self.i >= len(self.tables):
            self.i, self.pos, self.reused = 0, [0] * len(self.tables), True
        t = self.tables[self.i]
        a = self.pos[self.i]
        b = min(t.relpages, a + max(1, pages))
        # do not leave a sliver of the table for a range of its own
        if t.relpages - b < max(1, pages) // 4:
            b = t.relpages
        self.pos[self.i] = b
        if b >= t.relpages:
            self.i += 1
        return t, a, b


def copy_sql(t: ProbeTable, a: int, b: int) -> str:
    """The COPY of blocks a..b-1 of t (a TID range scan)."""
    return (f"COPY (SELECT * FROM {qualified_name(t.schema, t.relname)} "
            f"WHERE ctid >= '({a},0)'::tid AND ctid < '({b},0)'::tid) TO STDOUT;")


class DumpSource:
    """Ranges of a dump probe: COPY TO of disjoint block ranges."""

    def __init__(self, tables: Sequence[ProbeTable], block_size: int) -> None:
        self.blocks = BlockRanges(tables)
        self.block_size = block_size

    @property
    def reused(self) -> bool:
        return self.blocks.reused

    @property
    def fresh_bytes(self) -> float | None:
        """Work units not read yet (None once the ranges started over)."""
        if self.blocks.reused:
            return None
        return sum(n * self.block_size * f for n, f in self.blocks.fresh_bytes_per_block)

    def take(self, s: Stream, want_bytes: float) -> Range:
        pages = max(MIN_RANGE_PAGES, int(want_bytes / self.block_size))
        t, a, b = self.blocks.take(pages)
        # in the dump's unit (heap + TOAST bytes, as its items are sized)
        return Range(t.name, copy_sql(t, a, b),
                     heap=float((b - a) * self.block_size) * t.toast_factor)

    def finish(self, r: Range) -> None:
        pass


def run_probe(target: ConnTarget, tables: list[ProbeTable], target_dir: str, *,
              budget_s: float, max_streams: int, compression: str = "gzip",
              level: int | None = None, block_size: int = 8192,
              server_version_num: int) -> ProbeResult:
    """Measure X(k) for a dump into target_dir within budget_s seconds (see
    the module's docstring).  Raises ProbeError (one line) when the probe
    cannot run; a budget too short for some steps is no error: fewer points
    come back and the notes say why."""
    t_start = time.monotonic()
    if server_version_num < MIN_SERVER_VERSION:
        raise ProbeError("the probe needs PostgreSQL 14+ (TID range scans); "
                         "use --history or --from-timings")
    check_args(budget_s, max_streams)
    if block_size <= 0:
        raise ProbeError("block_size must be positive")
    comp = compressor(compression, level)
    source = DumpSource(tables, block_size)
    if not source.blocks.tables:
        raise ProbeError("no table with data to probe (pg_class.relpages is 0 everywhere: "
                         "are the tables empty or never vacuumed/analyzed?)")
    psql = checked_psql()
    env = psql_env(target, statement_timeout_ms=int((budget_s + 30) * 1000))
    # the dump target, or (pg_dump -Fd creates it) its nearest existing parent
    base = nearest_existing(target_dir or ".", dirs_only=True)
    notes: list[str] = []
    if os.path.abspath(target_dir) != base:
        notes.append(f"the target directory does not exist yet: probed in {base}")
    device = probe_device(base, notes)
    try:
        scratch = tempfile.mkdtemp(prefix=".pgparmon-probe-", dir=base)
    except OSError as exc:
        raise ProbeError(f"cannot write in {base}: {exc.strerror or exc}") from None

    waits = WaitSampler.open(target, notes)
    probe = StepRunner(psql=psql, comp=comp, env=env, scratch=scratch, source=source,
                       device=device, local=is_local_host(env.get("PGHOST")),
                       connect_timeout_s=float(target.connect_timeout_s), waits=waits)
    try:
        points, plan = measure_steps(probe, scratch, notes, t_start, budget_s, max_streams)
    finally:
        if waits is not None:
            waits.close()
    heap = sum(p.heap_bytes for p in points)
    ratio = sum(p.out_bytes for p in points) / heap if heap > 0 else None
    cpu_note(probe, points, notes)
    res = ProbeResult(points=points, seconds=time.monotonic() - t_start, budget_s=budget_s,
                      compression=comp.label, ratio=ratio, device=device, notes=notes,
                      skipped=plan.skipped)
    if source.reused:
        notes.append(reread_note(source, block_size, res))
    return res


def reread_note(source: DumpSource, block_size: int, res: ProbeResult) -> str:
    """What re-reading meant: how much there was to read, which steps read
    pages again, and whether they count."""
    tables = source.blocks.tables
    total = sum(t.relpages * t.toast_factor for t in tables) * block_size
    read = sum(p.heap_bytes for p in res.points)
    again = [str(p.streams) for p in res.points if p.reread]
    what = (f"the {len(tables)} table{'s' if len(tables) > 1 else ''} with pages hold "
            f"{fmt.size(total)} of heap and the probe read {fmt.size(read)}: ranges were read "
            "more than once")
    if not again:
        return what
    steps = f"the steps at {', '.join(again)} streams re-read the probe's own pages"
    if res.rereads_kept():
        return (f"{what}; {steps}: kept in the fit, the steps that read fresh pages never "
                "waited on the storage (a real run on this host reads them as fast)")
    return (f"{what}, so the cache helped; {steps}: left out of the fit while two others "
            "remain (the steps that read fresh pages waited on the storage, or their waits "
            "were not sampled)")
