"""The head of an lz4 or zstd stream through its command (frames.py), and a
directory archive's ratio read once from its largest files."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pgparmon import frames
from pgparmon.jobs import archive_files


def _tool(method: str) -> str:
    from support import ensure_debian_package, install_failure

    path = ensure_debian_package(method, method)
    if path is None:
        pytest.skip(install_failure(method) or f"no {method} command")
    return path


@pytest.mark.parametrize("method", ["lz4", "zstd"])
def test_a_cut_head_gives_its_whole_blocks(tmp_path: Path, method: str) -> None:
    tool = _tool(method)
    text = b"".join(b"%d\trow number %d of a table\n" % (i, i * 7) for i in range(200_000))
    # lz4's command makes blocks of 4 MB unless told: pg_dump's are of 64 kB (-B4)
    framed = subprocess.run([tool, "-c", *(["-B4"] if method == "lz4" else [])], input=text,
                            capture_output=True, check=True).stdout
    got = frames.ratio(framed, True, method)
    assert got is not None and got[1] == text  # the whole stream: exact
    assert got[0] == pytest.approx(len(framed) / len(text))
    cut = framed[:len(framed) // 2]
    half = frames.ratio(cut, False, method)
    assert half is not None and text.startswith(half[1]) and 0 < len(half[1]) < len(text)
    assert frames.ratio(framed[:100], False, method) is None  # too short to say
    assert frames.inflate_head(b"not a frame at all", method) is None
    assert frames.inflate_head(framed, "brotli") is None and not frames.have("brotli")


def test_a_directory_archives_ratio_is_read_once(tmp_path: Path) -> None:
    """From the largest files of the kind (not the objects'), cached while
    the archive's toc.dat is unchanged."""
    tool = _tool("zstd")
    text = b"".join(b"%d\t%s\n" % (i, b"x" * (i % 50)) for i in range(100_000))
    (tmp_path / "toc.dat").write_bytes(b"PGDMP")
    for name, data in (("3001.dat.zst", text), ("3002.dat.zst", text[:5000]),
                       ("blob_77.dat.zst", os.urandom(300_000))):
        subprocess.run([tool, "-q", "-o", str(tmp_path / name), "-"], input=data, check=True)
    size = (tmp_path / "3001.dat.zst").stat().st_size
    r = archive_files.frame_ratio(str(tmp_path), "zstd")
    assert r is not None and r < 0.2  # the objects' random bytes left out
    got, comp = archive_files.text_bytes(str(tmp_path / "3001.dat.zst"), size)
    assert comp == "zstd" and got == pytest.approx(len(text), rel=0.05)
    calls = []
    real = frames.ratio
    frames.ratio = lambda *a: calls.append(a) or real(*a)  # type: ignore[assignment]
    try:
        assert archive_files.frame_ratio(str(tmp_path), "zstd") == r
        assert calls == []
    finally:
        frames.ratio = real  # type: ignore[assignment]


def test_the_ratio_cache_keeps_only_the_newest_archives(tmp_path: Path) -> None:
    """A process that runs for days (the exporter) sees new archives every
    day: the ratios of the oldest are forgotten, the newest kept."""
    archive_files._frame_ratios.clear()
    dirs = []
    for i in range(archive_files.FRAME_CACHE + 5):
        d = tmp_path / f"a{i}"
        d.mkdir()
        (d / "toc.dat").write_bytes(b"PGDMP")
        dirs.append(str(d))
        assert archive_files.frame_ratio(str(d), "lz4") is None  # no data file
    assert len(archive_files._frame_ratios) == archive_files.FRAME_CACHE
    kept = {k[0] for k in archive_files._frame_ratios}
    assert kept == set(dirs[-archive_files.FRAME_CACHE:])


def test_a_decompressor_that_ends_first_is_still_timed(tmp_path: Path) -> None:
    """The client cost's sample of a file shorter than what it reads: the
    tool ends by itself, and its CPU is still read (it was reaped, and the
    sample lost, before)."""
    import gzip
    import shutil

    from pgparmon.advise.probe.client_cost import _cli_sample

    text = b"1\tsome row\n" * 50_000
    path = tmp_path / "3001.dat.gz"
    path.write_bytes(gzip.compress(text))
    gz = shutil.which("gzip")
    assert gz is not None
    for _ in range(3):
        cpu, n = _cli_sample(gz, str(path))
        assert n == len(text) and cpu >= 0
    # a tool that has surely ended before its output does: it leaves the
    # writing to a child of its own
    tool = tmp_path / "early"
    tool.write_text(f'#!/bin/sh\n{gz} -dc "$2" &\nexit 0\n')
    tool.chmod(0o755)
    cpu, n = _cli_sample(str(tool), str(path))
    assert n == len(text) and cpu >= 0
