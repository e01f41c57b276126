"""The head of an lz4 or zstd stream, inflated by that format's own command.

pg_dump 16+ compresses with lz4 or zstd on request (`-Z lz4`, `-Z zstd`):
a directory archive's data files are one frame each, a custom archive's
items one frame each in its chunks. Python's standard library reads
neither, and the ratio differs from data to data (where the usual
guesses were 0.5 and 0.3: a 100,000-row table of md5 text 0.97 with lz4
and 0.52 with zstd, one of wider repetitive rows 0.37 and 0.18): so the
head of a stream, cut anywhere, goes through
``lz4 -dc`` or ``zstd -dc``, which write every whole block before they
stop at the cut. The text of a head of N bytes is that of its whole
blocks: short of the truth by at most one block (lz4's 64 kB, zstd's 128
kB of text), so a head of 1 MB reads a ratio within a few percent.
"""

from __future__ import annotations

import shutil
import subprocess

# the most of a stream's head fed to its command
HEAD_BYTES = 1 << 20
TOOLS = {"lz4": "lz4", "zstd": "zstd"}
SUFFIXES = {".lz4": "lz4", ".zst": "zstd"}


def have(method: str) -> bool:
    """Whether the command of `method` (lz4, zstd) is on the PATH."""
    return shutil.which(TOOLS.get(method, "")) is not None


def inflate_head(head: bytes, method: str, timeout: float = 10.0) -> bytes | None:
    """The text of the whole blocks in `head` (the start of one lz4 or
    zstd frame, cut anywhere); None when the command is missing or wrote
    nothing."""
    tool = shutil.which(TOOLS.get(method, ""))
    if tool is None or not head:
        return None
    try:
        out = subprocess.run([tool, "-dc"], input=head, capture_output=True,
                             timeout=timeout, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def file_head(path: str, most: int = HEAD_BYTES) -> tuple[bytes, bool]:
    """(the first `most` bytes of a file, whether that is all of it)."""
    with open(path, "rb") as f:
        head = f.read(most)
        return head, not f.read(1)


def ratio(head: bytes, whole: bool, method: str) -> tuple[float, bytes] | None:
    """(compressed bytes a byte of text, the text) of a stream's head;
    `whole`: the head is the whole stream (the ratio is then exact). None
    when it cannot be read."""
    if not whole and len(head) < 4096:
        return None  # a cut head this short says little
    text = inflate_head(head, method)
    if text is None:
        return None
    return len(head) / len(text), text
