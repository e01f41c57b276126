"""Recordings: the readings of a run (and what was derived from them) on disk.

A recording is gzip-compressed JSON Lines, one event per line:

    {"t": "header", "v": {"schema": "pgparmon.recording/1", "job": ..., "facts": ...}}
    {"t": "snapshot", "v": {...}}     raw readings of one tick
    {"t": "plan" | "done" | "files", "v": ...}   the other readings the analysis used
    {"t": "sample", "v": {...}}       the published pgparmon.sample/1 of that tick
    {"t": "summary", "v": {...}}      at the end

Every event is followed by a gzip sync flush, so the file on disk is always a
readable prefix: a crash or a killed terminal loses at most the event being
written, and the file can be read while it is still being written.

A recording is created 0600 whatever the umask (private.py): it holds the
job's statements, table names and the host's facts.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from .private import open_private

SCHEMA = "pgparmon.recording/1"


class RecordingError(ValueError):
    """A file that is not a recording we can read: one line, what to do."""


class Recorder:
    def __init__(self, path: str) -> None:
        self.path = path
        try:
            # the job's statements and the host's facts: its owner's alone (0600)
            self._raw: IO[bytes] = open_private(path)
        except OSError as exc:
            raise RecordingError(f"cannot write the recording {path}: {exc.strerror}") from None
        self._gz = gzip.GzipFile(fileobj=self._raw, mode="wb", compresslevel=6)
        self._lock = threading.Lock()
        self.closed = False

    def header(self, v: dict[str, Any]) -> None:
        self.event("header", {"schema": SCHEMA, "created": time.time(), **v})

    def event(self, kind: str, value: Any) -> None:
        from .redact import redact_text

        line = json.dumps({"t": kind, "v": value}, separators=(",", ":"), default=_json_default)
        # belt and braces: nothing that looks like a password reaches the disk
        # (each string redacted on its own: the line stays valid JSON)
        if "password" in line.lower():
            line = json.dumps({"t": kind, "v": _redacted(json.loads(line)["v"], redact_text)},
                              separators=(",", ":"))
        with self._lock:
            if self.closed:
                return
            self._gz.write(line.encode() + b"\n")
            self._gz.flush(zlib.Z_SYNC_FLUSH)
            self._raw.flush()

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            try:
                self._gz.close()
                try:
                    os.fsync(self._raw.fileno())
                except OSError:
                    pass
            finally:  # a full disk: the file is closed all the same
                self._raw.close()


def _redacted(v: Any, redact: Any) -> Any:
    if isinstance(v, str):
        return redact(v)
    if isinstance(v, list):
        return [_redacted(x, redact) for x in v]
    if isinstance(v, dict):
        return {k: _redacted(x, redact) for k, x in v.items()}
    return v


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


@dataclass
class Recording:
    path: str
    header: dict[str, Any]
    events: list[tuple[str, Any]] = field(default_factory=list)
    truncated: bool = False  # the file ended mid-event (still being written, or a crash)

    @property
    def samples(self) -> list[dict[str, Any]]:
        return [v for k, v in self.events if k == "sample"]

    @property
    def summary(self) -> dict[str, Any] | None:
        for k, v in reversed(self.events):
            if k == "summary":
                return v  # type: ignore[no-any-return]
        return None


def _lines(path: str) -> Iterator[tuple[bytes, bool]]:
    """Complete lines of a possibly unfinished gzip stream; the flag says the
    stream ended early. zlib directly, not gzip.open: gzip.open discards
    the last decompressed chunk of a stream that has no end marker yet."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror}") from None
    with f:
        head = f.read(2)
        if not head:
            raise RecordingError(f"{path} is empty, not a pgparmon recording")
        if head != b"\x1f\x8b":
            raise RecordingError(f"{path} is not a pgparmon recording (not gzip)")
        f.seek(0)
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        buf = b""
        ended = False
        while True:
            chunk = f.read(1 << 16)
            if not chunk:
                break
            try:
                data = d.decompress(chunk)
            except zlib.error:
                break  # corrupt from here on: keep what came before
            buf += data
            *full, buf = buf.split(b"\n")
            for ln in full:
                yield ln, False
            if d.eof:
                ended = True
                break
    if not ended or buf.strip():
        yield b"", True


def read_recording(path: str) -> Recording:
    header: dict[str, Any] | None = None
    events: list[tuple[str, Any]] = []
    truncated = False
    for n, (raw, cut) in enumerate(_lines(path)):
        if cut:
            truncated = True
            break
        if not raw.strip():
            continue
        try:
            ev = json.loads(raw)
            kind, value = ev["t"], ev["v"]
        except (ValueError, KeyError, TypeError):
            if header is None:
                raise RecordingError(f"{path} is not a pgparmon recording "
                                     "(first line is not a header)") from None
            truncated = True  # a corrupt line: keep what came before it
            break
        if header is None:
            if kind != "header" or not isinstance(value, dict):
                raise RecordingError(f"{path} is not a pgparmon recording (no header)")
            schema = str(value.get("schema", ""))
            if not schema.startswith("pgparmon.recording/"):
                raise RecordingError(f"{path} is not a pgparmon recording")
            if schema != SCHEMA:
                raise RecordingError(f"{path} was written by a newer pgparmon ({schema}); "
                                     "upgrade pgparmon to read it")
            header = value
            continue
        events.append((kind, value))
        del n
    if header is None:
        raise RecordingError(f"{path} is empty or not a pgparmon recording")
    return Recording(path=path, header=header, events=events, truncated=truncated)
