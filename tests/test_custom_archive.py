"""A custom-format archive's data extents (custom_archive.py), read from
real archives of pg_dump 15 to 18, and a restore's progress from where a
worker reads the archive (jobs/pg_restore.py)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zlib
from pathlib import Path

import pytest
from pgversions import bindir_for

from pgparmon.analyze.items import Item
from pgparmon.analyze.progress import Tracker
from pgparmon.cluster import Cluster
from pgparmon.custom_archive import data_extents, row_widths, text_of, text_ratios
from pgparmon.jobs.base import Job, state_of
from pgparmon.jobs.pg_restore import PgRestore, RestoreState
from pgparmon.jobs.registry import driver_for
from pgparmon.snapshot import ClientProc, OpenFile, Snapshot
from pgparmon.toc import list_archive


def test_what_is_no_custom_archive_has_no_extents(tmp_path: Path) -> None:
    assert data_extents(str(tmp_path / "none")) is None
    (tmp_path / "text.sql").write_text("-- a plain dump\n")
    assert data_extents(str(tmp_path / "text.sql")) is None
    (tmp_path / "short").write_bytes(b"PGDMP\x01\x10\x00\x04\x08\x01")  # a header cut short
    assert data_extents(str(tmp_path / "short")) is None
    (tmp_path / "tar").write_bytes(b"PGDMP\x01\x10\x00\x04\x08\x03" + b"\x00" * 64)
    assert data_extents(str(tmp_path / "tar")) is None  # format 3: tar
    # a corrupt length (2 GiB of database name) is not read, let alone held
    head = b"PGDMP\x01\x10\x00\x04\x08\x01\x01" + b"\x00\x01\x00\x00\x00" * 7
    (tmp_path / "corrupt").write_bytes(head + b"\x00\xff\xff\xff\x7f" + b"x" * 100)
    assert data_extents(str(tmp_path / "corrupt")) is None


@pytest.fixture(scope="module")
def shapes(cluster: Cluster) -> str:
    cluster.psql("CREATE DATABASE shapes")
    cluster.psql("CREATE TABLE big AS SELECT g, md5(g::text) AS v"
                 " FROM generate_series(1, 100000) g;"
                 " CREATE TABLE mid AS SELECT g FROM generate_series(1, 20000) g;"
                 " CREATE TABLE small (a int); INSERT INTO small VALUES (1);"
                 " CREATE TABLE empty (a int); SELECT lo_from_bytea(0, 'abc');"
                 " CREATE INDEX ON big (g)", dbname="shapes")
    return "shapes"


@pytest.mark.integration
@pytest.mark.parametrize("major", [15, 16, 17, 18])
@pytest.mark.parametrize("level", ["default", "0"])
def test_each_items_data_length_as_pg_restore_computes_it(cluster: Cluster, shapes: str,
                                                          tmp_path: Path, major: int,
                                                          level: str) -> None:
    """Every data item (the tables' and the objects') has an extent; they
    tile the file from the first data block to its end; the larger table's
    is the longer; uncompressed, a table's length is its COPY text's and a
    header a row. The archive bytes a text byte, read from the data, are
    the text's through zlib (or, uncompressed, the headers')."""
    bindir = bindir_for(major)
    out = tmp_path / "a.dump"
    subprocess.run([str(bindir / "pg_dump"), "-Fc", *(["-Z", "0"] if level == "0" else []),
                    "-f", str(out), shapes], env=cluster.env(), check=True)
    ext = data_extents(str(out))
    assert ext is not None
    assert ext.compression == ("none" if level == "0" else "gzip") and ext.version[0] == 1
    _, toc = list_archive(out, str(bindir / "pg_restore"))
    data = {t.dump_id: t for t in toc if t.desc in ("TABLE DATA", "BLOBS")}
    assert set(ext.by_id) == set(data), (ext.by_id, data)
    spans = sorted(ext.by_id.values())
    assert all(a[0] + a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert spans[-1][0] + spans[-1][1] == os.path.getsize(out)
    length = {data[k].tag: n for k, (_, n) in ext.by_id.items()}
    assert length["big"] > length["mid"] > length["small"]
    # the archive bytes a byte of COPY text, read from the start of the
    # largest tables' data, and from all of big's against its real text
    big = next(k for k, t in data.items() if t.tag == "big")
    tables = {k for k, t in data.items() if t.desc == "TABLE DATA"}
    copy_text = "".join(f"{g}\t{hashlib.md5(str(g).encode()).hexdigest()}\n"
                        for g in range(1, 100001)).encode()
    whole = text_ratios(str(out), ext, {big}, budget=1 << 30)[big]
    sampled = text_ratios(str(out), ext, tables)
    assert set(sampled) == tables  # the 5 largest: all 4 tables
    if level == "0":
        # uncompressed, each row is a block of its own behind a length (an
        # integer: a sign byte and 4 bytes)
        assert 0 < length["big"] - (len(copy_text) + 5 * 100000) < 64  # and its block's header
        assert whole == pytest.approx((len(copy_text) + 5 * 100000) / len(copy_text))
    else:  # zlib at pg_dump's default level, and a header a chunk
        assert whole == pytest.approx(len(zlib.compress(copy_text, 6)) / len(copy_text),
                                      rel=0.03)
    assert sampled[big] == pytest.approx(whole, rel=0.1)
    # each table's text over its own ratio; one not measured over theirs
    text = text_of(ext, sampled, 0.3)
    assert text[big] == pytest.approx(len(copy_text), rel=0.1)
    lo = next(k for k, t in data.items() if t.desc == "BLOBS")
    n = sum(ext.by_id[k][1] for k in tables)
    assert text[lo] == pytest.approx(ext.by_id[lo][1] * sum(text[k] for k in tables) / n)
    assert text_of(ext, {}, 0.5)[big] == ext.by_id[big][1] / 0.5
    # a row's text, from the first 64 kB of each table's: big's rows are
    # 35-38 bytes there (g of 1 to 4 digits, a tab, 32, a newline)
    widths = row_widths(str(out), ext, {k: f"public.{data[k].tag}" for k in tables})
    # small: its one row and the end of its COPY text
    assert 35 < widths["public.big"] < 40 and 1 < widths["public.small"] <= 2


@pytest.mark.integration
def test_an_archive_written_to_a_pipe_has_no_offsets(cluster: Cluster, shapes: str,
                                                     tmp_path: Path) -> None:
    out = tmp_path / "piped.dump"
    with open(out, "wb") as f:  # pg_dump -Fc db | cat > piped.dump
        dump = subprocess.Popen([cluster.client("pg_dump"), "-Fc", shapes], env=cluster.env(),
                                stdout=subprocess.PIPE)
        subprocess.run(["cat"], stdin=dump.stdout, stdout=f, check=True)
        assert dump.wait() == 0
    # pg_dump could not seek back to write them: no sizes (pg_restore has none either)
    assert data_extents(str(out)) is None


def _restore_tracker(extents: dict[str, tuple[int, int]]) -> Tracker:
    tr = Tracker(Job(kind="pg_restore", database="db", client_pid=100, jobs=2),
                 driver_for("pg_restore"))
    st = state_of(tr, RestoreState)
    st.extents, st.archive = dict(extents), "/backups/db.dump"
    for key, (_, n) in extents.items():
        tr.add(Item(key=key, kind="data", relation=f"public.t{key}", name=f"t{key}",
                    size=float(n), work=float(n)))
    return tr


def _snap(*files: OpenFile) -> Snapshot:
    return Snapshot(ts=1.0, wall=1.0, db=None, host=None,
                    clients=(ClientProc(101, 100, "pg_restore", None, None, 0.0, 0.0, None, None,
                                        files),))


def test_a_custom_archives_item_is_as_far_as_a_worker_reads_its_extent() -> None:
    tr = _restore_tracker({"3001": (1000, 8000), "3002": (9000, 2000)})
    drv = tr.driver
    assert isinstance(drv, PgRestore)
    big, small = tr.items["3001"], tr.items["3002"]
    # one worker 6000 bytes into 3001's data, another at 3002's very start
    drv.progress(tr, big, None, None, _snap(OpenFile("/backups/db.dump", 7000, "r"),
                                            OpenFile("/backups/db.dump", 9000, "r")))
    assert big.fraction == pytest.approx(0.75)
    drv.progress(tr, small, None, None, _snap(OpenFile("/backups/db.dump", 9000, "r")))
    assert small.fraction == 0  # the end of 3001 is not yet 3002
    # another file at that position says nothing
    drv.progress(tr, small, None, None, _snap(OpenFile("/elsewhere.dump", 10000, "r")))
    assert small.fraction == 0
    drv.progress(tr, small, None, None, _snap(OpenFile("/backups/db.dump", 10000, "r")))
    assert small.fraction == pytest.approx(0.5)
    # the leader at the file's end (it sized the last item) says nothing of
    # the last item; a worker done with the item before rests at its start
    last = _restore_tracker({"3001": (1000, 8000), "3002": (9000, 2000)})
    it = last.items["3002"]
    drv.progress(last, it, None, None, _snap(OpenFile("/backups/db.dump", 11000, "r")))
    assert it.fraction == 0
    drv.progress(last, it, None, None, _snap(OpenFile("/backups/db.dump", 9001, "r"),
                                             OpenFile("/backups/db.dump", 10500, "r")))
    assert it.fraction == pytest.approx(0.75)


@pytest.mark.integration
def test_the_advice_sizes_a_custom_archives_tables_as_a_directory_archives(
        cluster: Cluster, shapes: str, tmp_path: Path) -> None:
    """The restore's inventory of a -Fc archive: each table by its data's
    length over the archive bytes a text byte read from its data, near what
    the same database's -Fd archive says (its gzip trailers); before, every
    table was the archive's size over their number."""
    from pgparmon.advise.inventory import restore_inventory

    invs = {}
    for fmt in ("d", "c"):
        out = tmp_path / f"a.{fmt}"
        subprocess.run([cluster.client("pg_dump"), f"-F{fmt}", "-f", str(out), shapes],
                       env=cluster.env(), check=True)
        invs[fmt] = restore_inventory(str(out), cluster.client("pg_restore")).to_json()
    d, c = invs["d"], invs["c"]
    assert c["largest_item"] == d["largest_item"] == "public.big", invs
    assert c["largest_item_bytes"] == pytest.approx(d["largest_item_bytes"], rel=0.1), invs
    assert c["data_bytes"] == pytest.approx(d["data_bytes"], rel=0.1), invs
    assert c["archive_compression"] == "gzip"


def _block(dump_id: int, pieces: list[bytes], int_size: int = 4) -> bytes:
    """A table data block as pg_dump writes it: BLK_DATA, the dump id, each
    piece behind its length, a zero length."""
    def num(v: int) -> bytes:
        return bytes([1 if v < 0 else 0]) + abs(v).to_bytes(int_size, "little")

    return b"\x01" + num(dump_id) + b"".join(num(len(p)) + p for p in pieces) + num(0)


def test_an_items_chunks_read_one_by_one_or_in_runs() -> None:
    """An uncompressed block stores a chunk a row: read in large runs (the
    lengths parsed within each read, runs crossing the reads' ends) it is
    the same bytes as chunk by chunk; a cut block or a corrupt length is a
    BlockError, as is an offset with no table data."""
    import io

    from pgparmon import custom_blocks

    rows = [f"{i}\tvalue {i * 7}\n".encode() * (1 + i % 3) for i in range(500)]
    for int_size in (4, 8):
        data = b"junk" + _block(4321, rows, int_size) + b"next item"
        want = b"".join(rows)
        f = io.BytesIO(data)
        assert b"".join(custom_blocks.chunks(f, 4, int_size)) == want  # type: ignore[arg-type]
        for block in (7, 100, 1 << 20):  # runs and reads shorter than a row, and longer
            runs = list(custom_blocks.raw_runs(f, 4, int_size, block=block))  # type: ignore[arg-type]
            assert b"".join(runs) == want
            assert len(runs) >= len(want) // max(block, 40) // 2
    cut = io.BytesIO(_block(1, rows)[:-9])
    with pytest.raises(custom_blocks.BlockError, match="ends inside"):
        b"".join(custom_blocks.raw_runs(cut, 0, 4))  # type: ignore[arg-type]
    with pytest.raises(custom_blocks.BlockError, match="ends inside"):
        b"".join(custom_blocks.chunks(cut, 0, 4))  # type: ignore[arg-type]
    corrupt = io.BytesIO(b"\x01\x00\x01\x00\x00\x00\x00\xff\xff\xff\x7f" + b"x" * 64)
    with pytest.raises(custom_blocks.BlockError, match="corrupt"):
        b"".join(custom_blocks.raw_runs(corrupt, 0, 4))  # type: ignore[arg-type]
    with pytest.raises(custom_blocks.BlockError, match="no table data"):
        b"".join(custom_blocks.chunks(io.BytesIO(b"\x03" + b"\x00" * 20), 0, 4))  # type: ignore[arg-type]


@pytest.mark.integration
@pytest.mark.parametrize("major,compress", [(15, "default"), (15, "0"), (16, "lz4"),
                                            (17, "zstd"), (18, "default")])
def test_an_items_text_is_what_pg_restore_restores(cluster: Cluster, shapes: str,
                                                   tmp_path: Path, major: int,
                                                   compress: str) -> None:
    """custom_blocks, run as the restore probe runs it (a script by its
    path, no site; lz4 and zstd frames through their command), writes each
    table's rows as `pg_restore --data-only` restores them, then the end
    of data pg_dump stores; cut short by `head`, it ends quietly."""
    import shlex
    import sys

    from pgparmon import custom_blocks
    from support import ensure_debian_package, install_failure

    tool = None
    if compress in ("lz4", "zstd"):
        tool = ensure_debian_package(compress, compress)
        if tool is None:
            pytest.skip(install_failure(compress) or f"no {compress} command")
    bindir = bindir_for(major)
    out = tmp_path / "a.dump"
    extra = [] if compress == "default" else ["-Z", compress]
    subprocess.run([str(bindir / "pg_dump"), "-Fc", *extra, "-f", str(out), shapes],
                   env=cluster.env(), check=True)
    ext = data_extents(str(out))
    assert ext is not None
    assert ext.compression == {"default": "gzip", "0": "none"}.get(compress, compress)
    pg_restore = str(bindir / "pg_restore")
    _, toc = list_archive(out, pg_restore)
    mode = "gzip" if ext.compression == "gzip" else "raw"
    for item in (t for t in toc if t.desc == "TABLE DATA"):
        cmd = (f"{shlex.quote(sys.executable)} -S {shlex.quote(custom_blocks.__file__)} "
               f"{shlex.quote(str(out))} {ext.by_id[item.dump_id][0]} {ext.int_size} {mode}")
        if tool is not None:
            cmd += f" | {tool} -dc"
        got = subprocess.run(cmd, shell=True, capture_output=True, check=True).stdout
        sql = subprocess.run([pg_restore, "--data-only", "-t", item.tag, "-f", "-", str(out)],
                             capture_output=True, check=True).stdout
        rows = sql.split(b" FROM stdin;\n", 1)[1].split(b"\\.\n", 1)[0]
        assert got.startswith(rows) and got[len(rows):].rstrip(b"\n") == b"\\.", item.tag
        if item.tag == "big":
            assert rows.count(b"\n") == 100000
            cut = subprocess.run(cmd + " | head -n 3", shell=True, capture_output=True,
                                 check=True)
            assert cut.stdout == b"".join(rows.splitlines(keepends=True)[:3])
            assert cut.stderr == b""
    bad = subprocess.run([sys.executable, "-S", custom_blocks.__file__, str(out), "0", "4",
                          mode], capture_output=True, text=True)
    assert bad.returncode == 1 and "no table data block" in bad.stderr


@pytest.mark.integration
@pytest.mark.parametrize("method", ["lz4", "zstd"])
def test_lz4_and_zstd_data_is_sized_by_its_own_ratio(cluster: Cluster, shapes: str,
                                                    tmp_path: Path, method: str) -> None:
    """pg_dump 17 with -Z lz4 / -Z zstd, directory and custom: each table's
    text and rows are read from its data's head through the command
    (frames.py), not at the method's usual ratio (0.5 and 0.3: big's md5
    rows compress to 0.97 and 0.52 here); a directory archive's
    files at the ratio of its largest files, a custom archive's at its
    largest items' own."""
    from pgparmon import frames
    from pgparmon.custom_archive import USUAL_RATIO, item_texts
    from pgparmon.jobs.archive_files import sample_rows, text_bytes
    from support import ensure_debian_package, install_failure

    if ensure_debian_package(method, method) is None:
        pytest.skip(install_failure(method) or f"no {method} command")
    bindir = bindir_for(17)
    copy_text = "".join(f"{g}\t{hashlib.md5(str(g).encode()).hexdigest()}\n"
                        for g in range(1, 100001)).encode()
    real = len(copy_text) + len(b"\\.\n\n\n")  # pg_dump stores the end of data too
    d = tmp_path / "d"
    subprocess.run([str(bindir / "pg_dump"), "-Fd", "-Z", method, "-f", str(d), shapes],
                   env=cluster.env(), check=True)
    _, toc = list_archive(d, str(bindir / "pg_restore"))
    big = next(t for t in toc if t.desc == "TABLE DATA" and t.tag == "big")
    suffix = ".lz4" if method == "lz4" else ".zst"
    path = d / f"{big.dump_id}.dat{suffix}"
    size = path.stat().st_size
    text, comp = text_bytes(str(path), size)
    assert comp == method
    assert text == pytest.approx(real, rel=0.05)
    assert abs(size / real - USUAL_RATIO[method]) > 0.1  # the guess would be far off
    # from the first 256 kB of text, whose rows (g of 1 to 5 digits) are a
    # little narrower than the mean: a few percent more rows
    assert sample_rows(str(path), text) == pytest.approx(100000, rel=0.06)
    # a head cut anywhere (1 MB): its whole blocks' text
    head, whole = frames.file_head(str(path))
    assert not whole and len(head) == frames.HEAD_BYTES
    got = frames.ratio(head, whole, method)
    assert got is not None and copy_text.startswith(got[1])
    assert got[0] == pytest.approx(size / real, rel=0.1)

    c = tmp_path / "c.dump"
    subprocess.run([str(bindir / "pg_dump"), "-Fc", "-Z", method, "-f", str(c), shapes],
                   env=cluster.env(), check=True)
    ext = data_extents(str(c))
    assert ext is not None and ext.compression == method
    _, toc = list_archive(c, str(bindir / "pg_restore"))
    ids = {t.dump_id: f"public.{t.tag}" for t in toc if t.desc == "TABLE DATA"}
    big_id = next(k for k, rel in ids.items() if rel == "public.big")
    texts, measured = item_texts(str(c), ext, set(ids))
    assert big_id in measured
    assert texts[big_id] == pytest.approx(real, rel=0.05)
    widths = row_widths(str(c), ext, ids)
    assert 35 < widths["public.big"] < 40
