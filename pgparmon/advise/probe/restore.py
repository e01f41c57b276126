"""The restore probe (`run_restore_probe`): X(k) of a restore's data phase.

It uses the dump probe's streams the other way round: ``\\copy tmp FROM
PROGRAM 'gzip -dc NNNN.dat.gz'`` into a temporary clone of the table
(read-write session, temporary tables only); the ranges are data files
(`restore_ranges`).  After the warm-up, its session times one index build
on what it loaded (`ProbeResult.build_s_per_byte`).  temp_buffers is left at
the server's default: 128MB measured no faster here (a bigger local buffer
pool makes each TRUNCATE and the first use dearer).

Its inputs come from the archive without a server (`restore_probe_inputs`,
`archive_index_sql`): the data files with their sizes, and the CREATE TABLE
and CREATE INDEX text read by `pgparmon.ddl`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...analyze.progress import DEFAULT_TEXT_RATIO
from ...connect import ConnTarget
from ... import custom_blocks, frames
from ...custom_archive import data_extents, item_texts
from ...ddl import archive_sql, create_table_statements, index_statements
from ...jobs.archive_files import text_bytes
from ...toc import TocError, archive_format, data_file, list_archive
from ... import units as fmt
from .client_cost import as_pg_restore, pg_restore_client_cost
from .plan import (
    CLEANUP_RESERVE_S,
    check_args,
    cpu_note,
    probe_device,
    steps_and_wal,
)
from .loggedtop import LoggedTop, logged_top_reserve, rest_needs
from .psql import checked_psql, error_line, is_local_host, psql_env
from .restore_ranges import CustomItem, DataFile, RestoreSource
from .results import GB, ProbeError, ProbePoint, ProbeResult
from .steps import StepRunner
from .streams import Stream

# Decompressor per data file suffix (pg_dump -Fd: NNNN.dat[.gz|.lz4|.zst]).
_DECOMPRESSORS = {".gz": "gzip", ".lz4": "lz4", ".zst": "zstd"}
_SAFE_WORD = re.compile(r"^[A-Za-z0-9_./+-]+$")
# The index build after the warm-up: at most this share of the budget (a
# statement_timeout), and only when this much of the budget is left.
INDEX_SHARE = 0.15
INDEX_MIN_LEFT_S = 1.5


def _text_size(path: str) -> float:
    """COPY text bytes of a data file: a gzip trailer's size when it is
    plausible (it is the size modulo 4 GiB), else a typical ratio."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return 0.0
    if path.endswith(".gz"):
        try:
            with open(path, "rb") as f:
                f.seek(max(0, size - 4))
                isize = int.from_bytes(f.read(4), "little")
        except OSError:
            isize = 0
        return float(isize) if isize >= size and size < 2**32 else size / 0.3
    if path.endswith((".zst", ".lz4")):
        return text_bytes(path, size)[0]  # at the archive's measured ratio (frames.py)
    return float(size)


def exact_text_size(path: str) -> float | None:
    """The COPY text bytes of a whole data file when known exactly: a plain
    file's size, a gzip file's trailer (ISIZE, when plausible); else None."""
    if path.endswith((".zst", ".lz4")):
        return None
    try:
        size = os.path.getsize(path)
    except OSError:
        return None
    if not path.endswith(".gz"):
        return float(size)
    try:
        with open(path, "rb") as f:
            if f.read(2) != b"\x1f\x8b":
                return None
            f.seek(max(0, size - 4))
            isize = int.from_bytes(f.read(4), "little")
    except OSError:
        return None
    # ISIZE is the length modulo 4 GiB: trusted below that only
    return float(isize) if size < 2**31 and isize >= size // 2 else None


def archive_index_sql(archive: str, pg_restore: str | None = None) -> dict[str, list[str]]:
    """table ("schema.table") -> the archive's CREATE INDEX and ADD PRIMARY
    KEY / UNIQUE statements on it, in archive order (``pg_restore -v
    --section=post-data -f -``: the TOC only, no data read); {} when the
    archive cannot be read."""
    try:
        text = archive_sql(archive, "post-data", pg_restore, 60)
    except TocError:
        return {}
    return index_statements(text)


# A data file: (table as "schema.name", its path, its work in heap bytes),
# and for an item of a custom archive (the path is the archive's) where it lies.
DataFiles = Sequence[tuple[str, str, float] | tuple[str, str, float, CustomItem]]


def restore_probe_inputs(archive: str, pg_restore: str | None = None,
                         text_ratio: float = DEFAULT_TEXT_RATIO
                         ) -> tuple[list[Any], dict[str, str]]:
    """(data_files, create_sql) of a directory-format (-Fd) or custom-format
    (-Fc) archive for run_restore_probe: each TABLE DATA item's file (a
    custom archive's: the archive, with the item's CustomItem) with its
    size in heap bytes (COPY text / text_ratio), and each TABLE's CREATE
    TABLE text (from ``pg_restore -v --section=pre-data -f -``: no server,
    no data read). Tables are named "schema.table" with raw names, as the
    TOC lists them."""
    fmt = archive_format(archive)
    if fmt not in ("directory", "custom"):
        raise ProbeError("the restore probe reads a directory-format (pg_dump -Fd) or "
                         "custom-format (-Fc) archive; for other formats use --history or "
                         "--from-timings")
    try:
        _, items = list_archive(archive, pg_restore)
        text = archive_sql(archive, "pre-data", pg_restore, 60)
    except TocError as exc:
        raise ProbeError(str(exc)) from None
    data = [it for it in items if it.desc == "TABLE DATA" and it.schema is not None]
    if fmt == "custom":
        return _custom_items(archive, data, text_ratio), create_table_statements(text)
    files: list[Any] = []
    for it in data:
        path = data_file(archive, it.dump_id)
        if path is not None:
            files.append((f"{it.schema}.{it.tag}", str(path),
                          max(1.0, _text_size(str(path)) / text_ratio)))
    return files, create_table_statements(text)


def _custom_items(archive: str, data: list[Any], text_ratio: float
                  ) -> list[tuple[str, str, float, CustomItem]]:
    """A custom archive's TABLE DATA items where its TOC places them, each
    sized by its text (custom_archive.item_texts: measured on the largest
    items' first data); ProbeError when the TOC places none (pg_dump wrote
    the archive to a pipe)."""
    ext = data_extents(archive)
    if ext is None:
        raise ProbeError(f"{archive}: its table of contents says where no table's data lies "
                         "(pg_dump wrote it to a pipe, or its version is not read here), so "
                         "the probe cannot read it; use --history or --from-timings")
    texts, _ = item_texts(archive, ext, {it.dump_id for it in data})
    out = []
    for it in data:
        if it.dump_id in ext.by_id:
            offset, length = ext.by_id[it.dump_id]
            out.append((f"{it.schema}.{it.tag}", archive, max(1.0, texts[it.dump_id] / text_ratio),
                        CustomItem(offset, ext.compression, ext.int_size, length)))
    return out


def run_restore_probe(target: ConnTarget, archive: str,
                      data_files: DataFiles | None = None,
                      create_sql: dict[str, str] | None = None, *,
                      budget_s: float, max_streams: int, server_version_num: int,
                      text_ratio: float = DEFAULT_TEXT_RATIO,
                      index_sql: Mapping[str, Sequence[str]] | None = None,
                      max_wal_size: float | None = None) -> ProbeResult:
    """Measure X(k) of a restore's data phase within budget_s seconds: k
    sessions COPY FROM the archive's data (through their decompressor; a
    custom archive's items through `custom_blocks`)
    into temporary clones of the tables; and, after the warm-up, the time of
    one index build (ProbeResult.build_s_per_byte).

    data_files: (table as "schema.name", path of NNNN.dat[.gz|.lz4|.zst],
    size), or (table, the custom archive's path, size, CustomItem), with size
    the file's work in heap bytes (the order, and whether a
    file is loaded whole or a range of its first lines, use it). create_sql:
    table -> the archive's CREATE TABLE text (a table missing here must exist
    in the target database: LIKE is used).  Either left out (None): read from
    the archive (`restore_probe_inputs`).  Work unit: heap bytes = COPY text
    bytes / text_ratio.  index_sql: table -> the archive's CREATE INDEX (or
    ALTER TABLE ... ADD PRIMARY KEY / UNIQUE) statements for it: the index
    build after the warm-up copies the first one that `index_on_temp` can
    rewrite, on the temporary table the warm-up loaded most into; without one,
    a btree on its first column.

    build_s_per_byte: seconds of that build / heap bytes (COPY text bytes /
    text_ratio) in the temporary table, one session, on what the warm-up
    loaded (tens of MB): so a build on a table of B heap bytes takes about
    build_s_per_byte * B seconds with nothing else running.  The build runs
    outside the timed steps, under a statement_timeout of INDEX_SHARE of the
    budget, and only when INDEX_MIN_LEFT_S are left after the warm-up.

    The temporary tables write no WAL: after the steps, the most streams
    measured load regular tables of their own once more when the budget
    holds it (`loggedtop`, ProbeResult.logged_top), then, when the budget
    is WAL_MIN_BUDGET_S or more, the WAL's own ceiling is measured at the
    counts the steps reached, or the most when the budget thinned the plan
    (`plan.steps_and_wal`, ProbeResult.wal; max_wal_size bounds its
    volume).  The sessions are read-write (temporary tables need that);
    nothing outside them is touched but the logged step's own tables,
    dropped after it, and the WAL."""
    t_start = time.monotonic()
    del server_version_num  # COPY FROM works on any version; kept for symmetry
    if not isinstance(archive, (str, os.PathLike)):
        raise ProbeError("the restore probe needs the archive's path")
    archive = os.fspath(archive)
    check_args(budget_s, max_streams)
    data_files, create_sql, index_sql = _inputs(archive, data_files, create_sql,
                                                index_sql, text_ratio)
    psql = checked_psql()
    env = psql_env(target, statement_timeout_ms=int((budget_s + 30) * 1000), read_only=False)
    notes: list[str] = []
    device = probe_device(archive, notes)
    scratch, files, label = _linked_files(data_files)
    source = RestoreSource(files, create_sql, scratch, text_ratio)
    probe = StepRunner(psql=psql, comp=None, env=env, scratch=scratch, source=source,
                       device=device, local=is_local_host(env.get("PGHOST")),
                       connect_timeout_s=float(target.connect_timeout_s))
    built: dict[str, Any] = {}
    finale = _index_build(source, index_sql, t_start + budget_s, INDEX_SHARE * budget_s,
                          built, notes)

    # pg_restore's own client CPU per byte (timed before the steps): the steps as it reads them
    client_real = pg_restore_client_cost(files, text_ratio)
    top = _logged_top(target, probe, source, data_files, client_real, notes,
                      logged_top_reserve(budget_s, rest_needs(max_streams), max_streams))
    with top:
        points, wal, plan = steps_and_wal(probe, scratch, notes, t_start, budget_s,
                                          max_streams, target, max_wal_size, finale,
                                          reserve_s=top.reserve_s, between=top)
    if client_real is not None:
        points = _as_real_client(points, client_real, notes)
    build_s_per_byte, build = _timed_build(built, budget_s, notes)
    notes += _what_was_measured(source.reused, bool(wal), build_s_per_byte, build)
    cpu_note(probe, points, notes)
    return ProbeResult(points=points, seconds=time.monotonic() - t_start, budget_s=budget_s,
                       compression=label, ratio=None, device=device, notes=notes,
                       build_s_per_byte=build_s_per_byte, build=build,
                       client_s_per_byte=client_real, wal=wal, skipped=plan.skipped,
                       logged_top=top.result)


def _logged_top(target: ConnTarget, probe: StepRunner, source: RestoreSource,
                data_files: DataFiles, client_real: float | None,
                notes: list[str], reserve_s: float) -> LoggedTop:
    """The step into logged tables (`loggedtop`): the steps' runner over the
    same data files, linked into a scratch directory of its own, into
    regular tables of each stream's own."""
    logged: list[RestoreSource] = []

    def runner(schema: str, base: str) -> StepRunner:
        scratch, files, _ = _linked_files(data_files)
        logged.append(RestoreSource(files, source.create, scratch, source.text_ratio,
                                    logged=(schema, base)))
        # the row width the steps learnt sizes its ranges of a large file's
        # first lines (a fresh source's first guess, 100 B a line, would ask
        # a table of 4 kB rows for 40 times the bytes meant)
        logged[-1].bytes_seen, logged[-1].lines_seen = source.bytes_seen, source.lines_seen
        return dataclasses.replace(probe, scratch=scratch, source=logged[-1], step_no=0)

    return LoggedTop(target, runner, lambda: [n for src in logged for n in src.logged_tables],
                     client_real, notes, reserve_s)


def _linked_files(data_files: DataFiles) -> tuple[str, list[DataFile], str]:
    """(scratch directory, the data files linked into it, their compression:
    one decompressor's name, "none" or "mixed"); ProbeError when a file or
    its decompressor is missing (the scratch directory then removed). A
    custom archive is linked once; each of its items is read by
    `custom_blocks`, run as a script (copied into the scratch directory),
    and for lz4 or zstd that format's command."""
    try:
        scratch = tempfile.mkdtemp(prefix="pgparmon-restore-probe-")
    except OSError as exc:
        raise ProbeError(f"cannot make a scratch directory: {exc.strerror or exc}") from None
    try:
        files: list[DataFile] = []
        kinds: set[str] = set()
        links: dict[str, str] = {}  # a custom archive's path -> its link
        unpacked = 0.0
        commands = 0  # lz4 / zstd items written out (a command each)
        for n, entry in enumerate(data_files):
            table, path, size = entry[0], entry[1], entry[2]
            if len(entry) > 3:
                item = entry[3]
                assert isinstance(item, CustomItem)
                framed = item.compression in frames.TOOLS
                if (0 < item.length <= UNPACK_ITEM_BYTES and unpacked < UNPACK_TOTAL_BYTES
                        and (not framed or commands < UNPACK_COMMANDS)):
                    # a small item: its text written out now, loaded as a plain file
                    link = f"f{n}.dat"
                    text = _unpack(path, item, os.path.join(scratch, link))
                    commands += framed
                    if text is not None:
                        unpacked += text
                        kinds.add(item.compression)
                        files.append(DataFile(table, path, float(size), link, None, text=text,
                                              item=item))
                        continue
                if path not in links:
                    links[path] = f"a{len(links)}.dump"
                    _link(path, scratch, links[path])
                kinds.add(item.compression)
                dec = (_tool(item.compression, "the archive's data")
                       if item.compression in ("lz4", "zstd") else None)
                files.append(DataFile(table, path, float(size), links[path], dec,
                                      extract=_extract_command(scratch, links[path], item, dec),
                                      item=item))
                continue
            suffix = os.path.splitext(path)[1]
            dec: str | None = None
            if suffix in _DECOMPRESSORS:
                tool = _DECOMPRESSORS[suffix]
                dec = _tool(tool, os.path.basename(path))
                kinds.add(tool)
            else:
                kinds.add("none")
            link = f"f{n}{suffix if suffix in _DECOMPRESSORS else '.dat'}"
            _link(path, scratch, link)
            files.append(DataFile(table, path, float(size), link, dec,
                                  text=exact_text_size(path)))
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return scratch, files, kinds.pop() if len(kinds) == 1 else "mixed"


def _link(path: str, scratch: str, link: str) -> None:
    try:
        os.symlink(os.path.abspath(path), os.path.join(scratch, link))
    except OSError as exc:
        raise ProbeError(f"cannot use {path}: {exc.strerror or exc}") from None
    if not os.path.exists(os.path.join(scratch, link)):
        raise ProbeError(f"{path}: no such file")


def _tool(tool: str, what: str) -> str:
    """A decompressor's path as a \\copy ... FROM PROGRAM may name it (its
    bare name where the path holds odd characters); ProbeError when it is
    missing."""
    found = shutil.which(tool)
    if found is None:
        raise ProbeError(f"the probe decompresses {what} with the {tool} command, which is "
                         "not installed (or not on PATH)")
    return found if _SAFE_WORD.match(found) else tool


# custom_blocks.py as the scratch directory holds it
_BLOCKS = "blocks.py"
# A custom archive's item of at most this many bytes (in the archive) is
# written out as text before the steps, up to this much text in all: a
# range of small tables (up to MAX_FILES_PER_RANGE) would otherwise start
# Python once a table (~14 ms against gzip's ~1 ms for a directory
# archive's file), and time those starts, not the load.
UNPACK_ITEM_BYTES = 256 * 1024
UNPACK_TOTAL_BYTES = 32e6
# and of lz4 or zstd items, at most this many (a command each, ~3 ms: the
# probe's ranges reach the largest items first, seldom thousands of tiny ones)
UNPACK_COMMANDS = 256


def _unpack(path: str, item: CustomItem, out: str) -> float | None:
    """Write a custom archive's item as COPY text to `out`; its bytes, or
    None when it cannot be read here (the steps' reading then tries, and
    says what failed). lz4 and zstd: its whole frame through their command
    once (frames.inflate_head)."""
    framed = item.compression in frames.TOOLS
    if item.compression not in ("gzip", "none") and not framed:
        return None
    try:
        with open(path, "rb") as src, open(out, "wb") as dst:
            if framed:
                text = frames.inflate_head(b"".join(custom_blocks.chunks(
                    src, item.offset, item.int_size)), item.compression)
                if text is None:
                    return None
                dst.write(text)
            else:
                for piece in custom_blocks.text(src, item.offset, item.int_size,
                                                item.compression):
                    dst.write(piece)
            return float(dst.tell())
    except (OSError, custom_blocks.BlockError, zlib.error):
        return None


def _extract_command(scratch: str, link: str, item: CustomItem, dec: str | None) -> str:
    """The shell command that writes a custom archive's item as COPY text:
    custom_blocks run by this Python without its site (-S: a start as quick
    as a decompressor's), inflating gzip itself; lz4 and zstd frames go
    through their own command (dec)."""
    target = os.path.join(scratch, _BLOCKS)
    if not os.path.exists(target):
        shutil.copyfile(custom_blocks.__file__, target)
    python = sys.executable if _SAFE_WORD.match(sys.executable or "") else "python3"
    mode = "gzip" if item.compression == "gzip" else "raw"
    cmd = f"{python} -S {_BLOCKS} {link} {item.offset} {item.int_size} {mode}"
    return cmd + (f" | {dec} -dc" if dec is not None else "")


def _as_real_client(points: list[ProbePoint], client_real: float, notes: list[str]
                    ) -> list[ProbePoint]:
    """The steps read as pg_restore's own client would have run them (its
    CPU per byte, timed apart), with a note when that changed them."""
    raw = points
    points, factor = as_pg_restore(points, client_real)
    if factor is not None:
        worst = max(raw, key=lambda p: p.client_cpu_s / max(p.heap_bytes, 1.0))
        notes.append(
            f"the probe's client (decompressor, head/dd, psql \\copy) spent "
            f"{worst.client_cpu_s / worst.heap_bytes * GB:.1f} s/GB where pg_restore's "
            f"would spend {client_real * GB:.1f} s/GB; the steps that filled the host's "
            f"CPUs are read as if it had (up to {factor:.2f}x faster: the CPU goes to "
            f"the server)")
    return points


def _timed_build(built: dict[str, Any], budget_s: float, notes: list[str]
                 ) -> tuple[float | None, dict[str, Any] | None]:
    """(build_s_per_byte, build) from the index build the warm-up's last
    session ran; (None, None) with a note when it was not timed."""
    s_ix = built.pop("stream", None)
    if s_ix is None:
        return None, None
    res_ix = s_ix.index_result
    if res_ix is not None and res_ix[1] > 0 and built["heap_bytes"] > 0:
        return res_ix[0] / built["heap_bytes"], dict(built, seconds=round(res_ix[0], 6))
    if res_ix is not None and res_ix[0] >= 0.9 * min(INDEX_SHARE * budget_s, 1e9):
        notes.append(f"the index build on {built['table']} took longer than the probe "
                     f"allows ({res_ix[0]:.1f} s): not measured")
    else:
        err = error_line(s_ix.other)
        notes.append(f"the index build on {built['table']} failed"
                     + (f": {err}" if err else ""))
    return None, None


def _index_build(source: RestoreSource, index_sql: Mapping[str, Sequence[str]], end: float,
                 limit_s: float, built: dict[str, Any], notes: list[str]
                 ) -> Callable[[Stream], str | None]:
    """The warm-up's finale: the index build, after its last range, in its
    session, timed (into `built`) when the budget (ending at `end`) leaves
    INDEX_MIN_LEFT_S; at most limit_s."""
    def finale(s: Stream) -> str | None:
        left = end - CLEANUP_RESERVE_S - time.monotonic()
        if left < INDEX_MIN_LEFT_S:
            notes.append("no time left in the budget for the index build")
            return None
        got = source.index_script(s, index_sql, min(limit_s, left / 4))
        if got is None:
            notes.append("the warm-up loaded too little to time an index build on")
            return None
        script, table, shown, heap = got
        built.update(stream=s, table=table, index=shown, heap_bytes=heap)
        return script

    return finale


def _what_was_measured(reused: bool, wal: bool, build_s_per_byte: float | None,
                       build: dict[str, Any] | None) -> list[str]:
    """The probe's notes on what it measured and how far to trust it."""
    out = []
    if reused:
        out.append("the archive's data files were read more than once (the archive is "
                   "small): the cache helped and the throughput may be optimistic")
    out.append("restore probe: COPY into temporary tables (no WAL): parsing, inserting "
               "and decompression" + ("; the WAL measured apart" if wal else
                                      " only (the WAL not measured)"))
    if build_s_per_byte is not None and build is not None:
        out.append(f"index build: {build['index']} on {fmt.size(build['heap_bytes'])} of "
                   f"{build['table']} in {build['seconds']:.3f} s "
                   f"({build_s_per_byte * GB:.2f} s/GB)")
    return out


def _inputs(archive: str, data_files: DataFiles | None,
            create_sql: dict[str, str] | None, index_sql: Mapping[str, Sequence[str]] | None,
            text_ratio: float) -> tuple[DataFiles, dict[str, str],
                                        Mapping[str, Sequence[str]]]:
    """The probe's inputs as given, the missing ones read from the archive;
    ProbeError when it holds no table data."""
    if data_files is None or create_sql is None:
        found_files, found_create = restore_probe_inputs(archive, text_ratio=text_ratio)
        data_files = found_files if data_files is None else data_files
        create_sql = found_create if create_sql is None else create_sql
    if index_sql is None:
        index_sql = archive_index_sql(archive)
    if not data_files:
        raise ProbeError("the archive has no table data to probe")
    return data_files, create_sql, index_sql
