"""A table's data in a custom-format archive (`pg_dump -Fc`), read as
pg_restore reads it, and written out as COPY text.

At an item's data offset (custom_archive.data_extents) lie a block header
(a type byte, BLK_DATA for a table's rows, and the item's dump id) and
chunks, each an integer length and its bytes, to a zero length; integers
are a sign byte and `int_size` little-endian bytes. Compressed with gzip,
the chunks make one zlib stream; with lz4 or zstd, one frame of that
format; uncompressed, they are the text itself (a chunk a row).

This module imports nothing but the standard library and nothing of its
package: the restore probe runs it as a script, by its path, to feed one
item's text to psql (``python -S custom_blocks.py ARCHIVE OFFSET INT_SIZE
MODE``: MODE "gzip" writes the text, "raw" the chunks' bytes as they are,
for the lz4 or zstd command, or as text when uncompressed), as quick to
start as a decompressor.
"""

from __future__ import annotations

import io
import sys
import zlib

TYPE_CHECKING = False  # typing itself costs 18 ms a start, collections.abc 5
if TYPE_CHECKING:
    from collections.abc import Iterator

BLK_DATA = 1
# a chunk longer than this is taken for a corrupt length (pg_dump writes
# chunks of a few kB to a row's length: a row is at most 1 GB)
MAX_CHUNK = 1 << 30


class BlockError(Exception):
    """The item's data is not laid out as a table's data block."""


def _int(f: io.BufferedReader, int_size: int) -> int:
    b = f.read(1 + int_size)
    if len(b) < 1 + int_size:
        raise BlockError("the archive ends inside a data block")
    v = int.from_bytes(b[1:], "little")
    return -v if b[0] else v


def chunks(f: io.BufferedReader, start: int, int_size: int,
           longest: int = MAX_CHUNK) -> Iterator[bytes]:
    """The chunks of the table data block at `start`, as stored; BlockError
    when the block is not a table's data or a length is corrupt (over
    `longest`)."""
    f.seek(start)
    kind = f.read(1)
    if kind != bytes([BLK_DATA]):
        raise BlockError("no table data block at this offset")
    _int(f, int_size)  # its dump id
    while True:
        n = _int(f, int_size)
        if n <= 0:
            return
        if n > longest:
            raise BlockError(f"a chunk length of {n} bytes: the archive is corrupt")
        chunk = f.read(n)
        if len(chunk) < n:
            raise BlockError("the archive ends inside a data block")
        yield chunk


def raw_runs(f: io.BufferedReader, start: int, int_size: int, block: int = 1 << 20
             ) -> Iterator[bytes]:
    """The block's chunks' bytes as `chunks` gives them, joined into runs
    of about `block` bytes: the lengths are parsed in large reads, not a
    read per chunk (an uncompressed archive stores a chunk a row, and a
    read per row is slower than the load it feeds)."""
    f.seek(start)
    head = f.read(2 + int_size)
    if len(head) < 2 + int_size or head[0] != BLK_DATA:
        raise BlockError("no table data block at this offset")
    buf = b""
    pos = 0
    step = 1 + int_size
    while True:
        out: list[bytes] = []
        size = 0
        while size < block:
            if len(buf) - pos < step:
                more = f.read(max(block, step))
                if not more:
                    raise BlockError("the archive ends inside a data block")
                buf, pos = buf[pos:] + more, 0
                continue
            n = int.from_bytes(buf[pos + 1:pos + step], "little")
            if buf[pos]:
                n = -n
            if n <= 0:
                if out:
                    yield b"".join(out)
                return
            if n > MAX_CHUNK:
                raise BlockError(f"a chunk length of {n} bytes: the archive is corrupt")
            end = pos + step + n
            if end > len(buf):
                more = f.read(max(block, end - len(buf)))
                if not more:
                    raise BlockError("the archive ends inside a data block")
                buf, pos = buf[pos:] + more, 0
                continue
            out.append(buf[pos + step:end])
            size += n
            pos = end
        yield b"".join(out)


def text(f: io.BufferedReader, start: int, int_size: int, compression: str) -> Iterator[bytes]:
    """The block's COPY text (gzip inflated, none as it is); the raw
    frame's bytes for lz4 and zstd (their own command inflates them)."""
    if compression != "gzip":
        yield from chunks(f, start, int_size)
        return
    inflate = zlib.decompressobj(47)  # zlib or gzip header, as pg_restore accepts
    for chunk in chunks(f, start, int_size):
        out = inflate.decompress(chunk)
        if out:
            yield out
    rest = inflate.flush()
    if rest:
        yield rest


def main(argv: list[str]) -> int:
    """ARCHIVE OFFSET INT_SIZE MODE: the item's text (MODE gzip) or raw
    chunks (MODE raw) on standard output. Exit 0 also when the reader
    stops early (head has what it wanted), 1 with a line on a bad block."""
    # a reader that has enough ends us quietly (SIGPIPE's default); the
    # builtin _signal, not signal, which imports enum (4 ms a start)
    import _signal

    _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)
    if len(argv) != 4 or argv[3] not in ("gzip", "raw"):
        sys.stderr.write("usage: custom_blocks.py ARCHIVE OFFSET INT_SIZE gzip|raw\n")
        return 2
    path, start, int_size, mode = argv[0], int(argv[1]), int(argv[2]), argv[3]
    out = sys.stdout.buffer
    try:
        with open(path, "rb", buffering=1 << 20) as f:
            pieces = (text(f, start, int_size, "gzip") if mode == "gzip"
                      else raw_runs(f, start, int_size))
            for piece in pieces:
                out.write(piece)
        out.flush()
    except (OSError, BlockError, zlib.error) as exc:
        sys.stderr.write(f"{path}: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
