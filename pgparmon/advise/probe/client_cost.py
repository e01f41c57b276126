"""What pg_restore's own client would spend, and the restore probe's steps
read as if its client cost that much.

The restore probe feeds each stream through ``\\copy ... FROM PROGRAM``: a
decompressor CLI (GNU gzip inflates ~25% slower than zlib), ``head | dd``
for a range of a large file, and psql reading and re-sending every line.
pg_restore does the same work in one process with the library (zlib,
liblz4, libzstd) and hands buffers to libpq unparsed.  Measured on the
project's 2-core VM: the probe's client used 0.79 of a core per stream
where zlib alone needs about a fifth of that, so one stream filled the host
and a second stream looked like no gain while the real restore gained ~25%.

`pg_restore_client_cost` times what pg_restore's client does per heap byte
on a sample of the archive's largest data file (zlib in this process for
gzip; the tool's own CLI for lz4 and zstd; a plain read for uncompressed
files).  `as_pg_restore` then reads each step that filled the host's CPUs
as if the client had cost that much: the CPU the probe's client spent
beyond it goes to the server, at the server's own CPU per byte, and never
beyond what k backends can do flat out.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import tempfile
import time
import zlib
from collections.abc import Sequence

from ...custom_blocks import BlockError, chunks
from .restore_ranges import DataFile
from .results import ProbePoint

# Decompress at most this much of the sample's compressed input, or for at
# most this much CPU time.
SAMPLE_IN_BYTES = 8 << 20
SAMPLE_CPU_S = 0.25
# The most a decompressor's command may take to write its first bytes.
CLI_START_S = 10.0
# A step filled the host when its CPUs were this busy (percent of all).
HOST_FULL_PERCENT = 85.0


def pg_restore_client_cost(files: Sequence[DataFile], text_ratio: float) -> float | None:
    """CPU seconds per heap byte that pg_restore's client spends on the
    largest data file's format (decompression and reading); None when it
    cannot be measured (no readable file, an unknown format, the tool
    missing)."""
    big = max(files, key=lambda f: f.size, default=None)
    if big is None:
        return None
    path = big.path
    try:
        if big.item is not None:
            cpu, text = _custom_sample(big)
        elif path.endswith(".gz"):
            cpu, text = _zlib_sample(path)
        elif path.endswith((".lz4", ".zst")):
            if big.decompress is None:
                return None
            cpu, text = _cli_sample(big.decompress, path)
        else:
            cpu, text = _read_sample(path)
    except (OSError, zlib.error, subprocess.SubprocessError, BlockError):
        return None
    if text <= 0:
        return None
    return cpu / (text / text_ratio)


def _zlib_sample(path: str) -> tuple[float, float]:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    t0 = time.thread_time()
    text = 0
    read = 0
    with open(path, "rb") as f:
        while read < SAMPLE_IN_BYTES and time.thread_time() - t0 < SAMPLE_CPU_S:
            chunk = f.read(256 << 10)
            if not chunk:
                break
            read += len(chunk)
            text += len(d.decompress(chunk))
            while d.unused_data:  # pg_dump writes one member, but be safe
                rest = d.unused_data
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                text += len(d.decompress(rest))
    return time.thread_time() - t0, float(text)


def _custom_sample(f: DataFile) -> tuple[float, float]:
    """(CPU seconds, text bytes) of pg_restore's work on the start of a
    custom archive's item: its chunks read and, with gzip, inflated here
    (zlib, as pg_restore); lz4 and zstd chunks through their command, fed
    from a file of the sample's frame; uncompressed, its bytes read."""
    assert f.item is not None
    item = f.item
    if item.compression == "none":
        # a chunk a row, which pg_restore reads in C: timed as a plain read
        # of the item's bytes (a Python loop over the rows would time Python)
        return _read_sample(f.path, item.offset)
    t0 = time.thread_time()
    inflate = zlib.decompressobj(47) if item.compression == "gzip" else None
    raw: list[bytes] = []
    read = text = 0
    with open(f.path, "rb", buffering=1 << 20) as src:
        for chunk in chunks(src, item.offset, item.int_size):
            read += len(chunk)
            if inflate is not None:
                text += len(inflate.decompress(chunk))
            else:
                raw.append(chunk)
            if read >= SAMPLE_IN_BYTES or time.thread_time() - t0 >= SAMPLE_CPU_S:
                break
    if inflate is not None:
        return time.thread_time() - t0, float(text)
    if f.decompress is None:
        raise OSError("no decompressor")
    with tempfile.NamedTemporaryFile(prefix="pgparmon-sample-") as tmp:
        tmp.write(b"".join(raw))
        tmp.flush()
        return _cli_sample(f.decompress, tmp.name)


def _read_sample(path: str, start: int = 0) -> tuple[float, float]:
    t0 = time.thread_time()
    n = 0
    with open(path, "rb") as f:
        f.seek(start)
        while n < SAMPLE_IN_BYTES:
            chunk = f.read(256 << 10)
            if not chunk:
                break
            n += len(chunk)
    return time.thread_time() - t0, float(n)


def _cli_sample(tool: str, path: str) -> tuple[float, float]:
    """The tool's CPU (its rusage) while it writes the first output bytes
    of path; it is stopped once the sample is big enough."""
    proc = subprocess.Popen([tool, "-dc", path], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    n = 0
    try:
        # the sample's time counts from the tool's first output: on a busy
        # host its start alone can take longer (then it had sampled nothing)
        t_end = time.monotonic() + CLI_START_S
        while n < 4 * SAMPLE_IN_BYTES and time.monotonic() < t_end:
            chunk = proc.stdout.read(256 << 10)
            if not chunk:
                break
            if n == 0:
                t_end = time.monotonic() + 4 * SAMPLE_CPU_S
            n += len(chunk)
    finally:
        proc.stdout.close()
        # not Popen.poll or kill, which reap a tool that has ended (a sample
        # shorter than what is read: a cut frame) and lose its rusage: a
        # signal to a zombie is a no-op, and wait4 reaps it with its CPU
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, _, ru = os.wait4(proc.pid, 0)
        proc.returncode = 0
    return ru.ru_utime + ru.ru_stime, float(n)


def as_pg_restore(points: Sequence[ProbePoint], client_s_per_byte: float
                  ) -> tuple[list[ProbePoint], float | None]:
    """The steps as pg_restore would see them: a step that filled the host's
    CPUs, whose client spent more per byte than pg_restore's would, gets the
    difference for its server: rate x (s + c) / (s + c_real), s and c the
    step's own server and client CPU per heap byte, capped at k backends
    each at a full core (k / s).  Its client CPU becomes pg_restore's.  The
    steps it does not change come back as they were.  Returns the points and
    the largest factor applied (None: none changed)."""
    out: list[ProbePoint] = []
    most: float | None = None
    for p in points:
        f = _factor(p, client_s_per_byte)
        if f is None:
            out.append(p)
            continue
        most = f if most is None else max(most, f)
        out.append(dataclasses.replace(
            p, bytes_per_s=p.bytes_per_s * f, elapsed_s=p.elapsed_s / f,
            client_cpu_s=client_s_per_byte * p.heap_bytes,
            probe_bytes_per_s=p.bytes_per_s, probe_client_cpu_s=p.client_cpu_s))
    return out, most


def _factor(p: ProbePoint, c_real: float) -> float | None:
    if (p.server_cpu_s is None or p.heap_bytes <= 0 or p.bytes_per_s <= 0
            or p.host_cpu_percent is None or p.host_cpu_percent < HOST_FULL_PERCENT):
        return None
    s = p.server_cpu_s / p.heap_bytes
    c = p.client_cpu_s / p.heap_bytes
    if s <= 0 or c <= c_real:
        return None
    f = min((s + c) / (s + c_real), (p.streams / s) / p.bytes_per_s)
    return f if f > 1.0 else None
