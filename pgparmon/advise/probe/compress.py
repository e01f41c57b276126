"""The compressor of the dump probe: the command that compresses a stream
the way pg_dump would (the same method and level, one thread).
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass

from .results import ProbeError

# method -> (binary, default level (pg_dump's), lowest, highest)
_COMPRESSORS: dict[str, tuple[str, int, int, int]] = {
    "gzip": ("gzip", 6, 1, 9),
    "lz4": ("lz4", 1, 1, 12),
    "zstd": ("zstd", 3, 1, 19),
}
_SUFFIX = {"gzip": ".gz", "lz4": ".lz4", "zstd": ".zst", "none": ""}


# stdin -> gzip format at level argv[1] -> stdout, with zlib (as pg_dump does).
# Unbuffered reads take what the pipe holds: waiting to fill a 1 MiB buffer
# stalls psql behind a full pipe and made the stream ~25% slower than
# pg_dump, which compresses what each network read brings.
ZLIB_FILTER = (
    "import sys, zlib\n"
    "c = zlib.compressobj(int(sys.argv[1]), zlib.DEFLATED, 31)\n"
    "r, w = sys.stdin.buffer.raw, sys.stdout.buffer\n"
    "while True:\n"
    "    b = r.read(1 << 20)\n"
    "    if not b:\n"
    "        break\n"
    "    w.write(c.compress(b))\n"
    "w.write(c.flush())\n"
    "w.flush()\n"
)


@dataclass(frozen=True)
class Compressor:
    method: str  # gzip | lz4 | zstd | none
    level: int | None
    argv: tuple[str, ...] | None  # None: psql writes the file itself

    @property
    def label(self) -> str:
        return self.method if self.level is None else f"{self.method}:{self.level}"

    @property
    def suffix(self) -> str:
        return _SUFFIX[self.method]


def compressor(compression: str, level: int | None = None) -> Compressor:
    """The CLI that compresses like pg_dump would (one thread, the same
    level).  Level 0 means: gzip none (pg_dump -Z 0), lz4/zstd their default.
    ProbeError for an unknown method, a bad level or a missing binary."""
    method = (compression or "gzip").strip().lower()
    if method in ("", "0") or (method == "gzip" and level == 0):
        method = "none"
    if method == "none":
        return Compressor("none", None, None)
    if method not in _COMPRESSORS:
        raise ProbeError(f"unknown compression {compression!r}: use gzip, lz4, zstd or none")
    binary, default, lo, hi = _COMPRESSORS[method]
    lvl = default if level is None or level == 0 else int(level)
    if not lo <= lvl <= hi:
        raise ProbeError(f"{method} level {lvl} is out of range ({lo}..{hi})")
    if method == "gzip":
        # pg_dump compresses with zlib in its own process; GNU gzip has its
        # own deflate, measurably slower (~15-20% here): a zlib filter in a
        # Python process keeps the probe's CPU per byte the same as pg_dump's.
        return Compressor(method, lvl, (sys.executable, "-I", "-c", ZLIB_FILTER, str(lvl)))
    path = shutil.which(binary)
    if path is None:
        raise ProbeError(f"the probe compresses with the {binary} command, which is not "
                         f"installed (or not on PATH): install it or choose another --compress")
    argv: tuple[str, ...]
    if method == "lz4":
        argv = (path, f"-{lvl}", "-q", "-c")
    else:
        argv = (path, f"-{lvl}", "-q", "-c", "-T1")
    return Compressor(method, lvl, argv)
