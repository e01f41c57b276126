"""One step of the probe: k streams, each fed ranges until the step's time
is up, then the sessions closed, the files fsynced and the step measured
(heap bytes per second of all streams, CPU of the client and the server,
the target's disk).  The plan that chooses the steps is `plan`.
"""

from __future__ import annotations

import dataclasses
import os
import selectors
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ...analyze.hostrates import host_rates
from ...readers.host import HostSample, read_host
from .compress import Compressor
from .results import ProbeError, ProbePoint
from .streams import (
    DONE_RE,
    INDEX_RE,
    PID_RE,
    RangeSource,
    Stream,
    children_cpu,
    cpu_of,
    fsync_path,
    looks_like_backend,
)

# Fixed costs of one step besides its timed part: connecting k sessions,
# closing them, fsync.
STEP_OVERHEAD_S = 0.25


def sync_all(paths: list[str], directory: str) -> None:
    """fsync the step's files at once, then their directory.  One after the
    other, k files cost k times the device's flush latency, a cost that grows
    with the stream count and that a real run (its files written back while
    it works, synced once at its end) does not pay per step: 8 files at the
    46 ms await a 16-core host's disk showed in such a step are up to 0.4 s
    of a 2.2 s step, which read 25% under the real pg_dump -j 8."""
    if len(paths) > 1:
        with ThreadPoolExecutor(max_workers=min(len(paths), 64)) as pool:
            list(pool.map(fsync_path, paths))
    elif paths:
        fsync_path(paths[0])
    fsync_path(directory, directory=True)


class Aborted(Exception):
    """A step ran into the budget's deadline."""


# no range asks for more than this (the warm-up doubles its ranges)
MAX_RANGE_BYTES = 64e9


@dataclass
class StepRunner:
    """Runs the steps of one probe: k streams at a time over ranges from
    `source`, each step measured into a ProbePoint.  comp None is a restore
    probe; local: the server runs on this host (its backends' CPU is read);
    server_cpu_missing is set once a step could not read it."""

    psql: str
    comp: Compressor | None  # None: a restore (psql's output goes nowhere)
    env: dict[str, str]
    scratch: str
    source: RangeSource
    device: str | None
    local: bool
    connect_timeout_s: float
    step_no: int = 0
    server_cpu_missing: bool = False
    # called with k before each step's sessions start (the COPY probe empties
    # its scratch table there)
    before_step: Any = None
    waits: Any = None  # a WaitSampler: the sessions' I/O waits during each step

    def run_step(self, k: int, t_step: float, want_bytes: float, deadline: float,
                 grow: bool = False, finale: Any = None) -> ProbePoint:
        """k streams copying ranges of about want_bytes heap bytes until
        t_step seconds have passed (grow: the range doubles each time, for
        the warm-up).  finale(stream) -> a script (or None) the stream runs
        after its last range, outside the timed part: it must end with a
        ``\\warn pgparmon-probe index SECONDS N`` line.  Raises Aborted at
        the deadline, ProbeError on a failure."""
        self.step_no += 1
        if self.before_step is not None:
            self.before_step(k)
        streams: list[Stream] = []
        sel = selectors.DefaultSelector()
        cpu_before = children_cpu()
        try:
            self._open(k, want_bytes, sel, streams)
            self._connect(sel, streams, deadline)
            # the timed part
            if self.waits is not None:
                self.waits.start([s.pid for s in streams if s.pid is not None])
            h0 = self._host()
            t0 = time.monotonic()
            self._copy(sel, streams, t0, t0 + t_step, deadline, grow, finale)
            self._close(sel, streams, deadline)
            t_sync = time.monotonic()
            sync_all([s.path for s in streams if s.path is not None], self.scratch)
            t_final = time.monotonic()
            h1 = self._host()
            cpu_after = children_cpu()
            io_share = self.waits.stop() if self.waits is not None else None
        finally:
            if self.waits is not None:
                self.waits.stop()
            for s in streams:
                s.kill()
            sel.close()

        p = self._point(k, streams, t0, t_final, h0, h1, cpu_after - cpu_before)
        return dataclasses.replace(p, reread=bool(getattr(self.source, "reused", False)),
                                   io_wait_share=io_share,
                                   sync_s=t_final - t_sync if self.comp is not None else None)

    def _host(self) -> HostSample:
        return read_host([self.device] if self.device else [])

    def _open(self, k: int, want_bytes: float, sel: selectors.BaseSelector,
              streams: list[Stream]) -> None:
        """k sessions started (into `streams`, which the caller kills
        whatever happens), each with its output file and its stderr watched."""
        for i in range(k):
            path = (os.path.join(self.scratch,
                                 f"step{self.step_no:02d}_k{k}_{i}.dat{self.comp.suffix}")
                    if self.comp is not None else None)
            s = Stream(self.psql, self.comp, self.env, path, cwd=self.scratch)
            s.want = want_bytes
            streams.append(s)
            assert s.psql is not None and s.psql.stderr is not None
            sel.register(s.psql.stderr, selectors.EVENT_READ, s)

    def _connect(self, sel: selectors.BaseSelector, streams: list[Stream],
                 deadline: float) -> None:
        """Every session connected and has told its backend pid (whose CPU is
        read from here on when the server is local)."""
        wait_s = self.connect_timeout_s + 5
        connect_deadline = min(deadline, time.monotonic() + wait_s)
        try:
            while any(s.pid is None for s in streams):
                self._pump(sel, streams, connect_deadline, on_done=None)
        except Aborted:
            if time.monotonic() < deadline:
                raise ProbeError(f"the probe's psql sessions did not connect within "
                                 f"{wait_s:g} s") from None
            raise
        for s in streams:
            if self.local and s.pid is not None and looks_like_backend(s.pid):
                s.cpu0 = cpu_of(s.pid)

    def _copy(self, sel: selectors.BaseSelector, streams: list[Stream], t0: float,
              t_stop: float, deadline: float, grow: bool, finale: Any) -> None:
        """Each stream copies ranges from t0 on, one after the other, until
        t_stop; then runs its finale (if any) and closes its input."""
        for s in streams:
            if not s.start_range(self.source.take(s, s.want), t0):
                raise self._fail(sel, s)

        def on_done(s: Stream, now: float) -> None:
            last = now - s.ranges[-1].t0
            if grow:
                # doubling: but tiny tables end ranges at once, and a
                # thousand doublings would overflow the size
                s.want = min(2 * s.want, MAX_RANGE_BYTES)
                last *= 2
            # another range only while the step's time lasts and the
            # range (as long as the last one, with room) ends before the
            # budget's deadline: stop early rather than be cut off
            if now < t_stop and now + 1.5 * last + STEP_OVERHEAD_S < deadline:
                if not s.start_range(self.source.take(s, s.want), now):
                    raise self._fail(sel, s)
                return
            s.t_end = now
            if s.cpu0 is not None:
                s.cpu1 = cpu_of(s.pid)
            extra = finale(s) if finale is not None else None
            if extra and s.send(extra + "\n"):
                s.index_wait = True
            s.close_input()

        while any(s.t_end is None or s.index_wait for s in streams):
            self._pump(sel, streams, deadline, on_done=on_done)

    def _close(self, sel: selectors.BaseSelector, streams: list[Stream],
               deadline: float) -> None:
        """Sessions ended, compressors flushed, output files closed; Aborted
        at the deadline, ProbeError for one that failed."""
        for s in streams:
            for proc in (s.psql, s.comp_proc):
                if proc is None:
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Aborted
                try:
                    rc = proc.wait(timeout=left)
                except subprocess.TimeoutExpired:
                    raise Aborted from None
                if rc != 0:
                    raise self._fail(sel, s)
            if s.out is not None:
                s.out.close()

    def _point(self, k: int, streams: list[Stream], t0: float, t_final: float,
               h0: HostSample, h1: HostSample, client_cpu: float) -> ProbePoint:
        heap = float(sum(r.heap for s in streams for r in s.ranges if r.t1 is not None))
        out = 0
        for s in streams:
            try:
                out += os.path.getsize(s.path) if s.path is not None else 0
            except OSError:
                pass
        ends = [(s.t_end or t_final) - t0 for s in streams]
        close_s = max(0.0, (t_final - t0) - max(ends))
        # the ragged end (streams done at different times) at its average
        eff = max(1e-6, sum(ends) / len(ends) + close_s)
        server: float | None = None
        if all(s.cpu0 is not None and s.cpu1 is not None for s in streams):
            server = sum((s.cpu1 or 0.0) - (s.cpu0 or 0.0) for s in streams)
        else:
            self.server_cpu_missing = True
        rates = host_rates(h0, h1)
        d = rates.disks.get(self.device) if self.device else None
        return ProbePoint(
            streams=k, heap_bytes=heap, out_bytes=out, elapsed_s=eff,
            bytes_per_s=heap / eff, client_cpu_s=max(0.0, client_cpu), server_cpu_s=server,
            disk_util=d.util_percent if d else None, disk_await_ms=d.await_ms if d else None,
            disk_queue=d.queue_depth if d else None, wall_s=t_final - t0,
            host_cpu_percent=rates.cpu_percent,
            ranges=sum(1 for s in streams for r in s.ranges if r.t1 is not None))

    def _pump(self, sel: selectors.BaseSelector, streams: list[Stream], deadline: float,
              on_done: Any) -> None:
        """Read what the sessions said on stderr for up to 50 ms."""
        now = time.monotonic()
        if now >= deadline:
            raise Aborted
        for key, _ in sel.select(timeout=min(0.05, deadline - now)):
            s: Stream = key.data
            try:
                data = os.read(key.fd, 65536)
            except OSError:
                data = b""
            if not data:
                sel.unregister(key.fileobj)
                s.stderr_eof = True
                continue
            now = time.monotonic()
            for line in s.feed(data):
                m = PID_RE.match(line)
                if m:
                    s.pid = int(m.group(1))
                    continue
                m = INDEX_RE.match(line)
                if m and s.index_wait:
                    s.index_result = (float(m.group(1)), int(m.group(2)))
                    s.index_wait = False
                    continue
                m = DONE_RE.match(line)
                if m:
                    n = int(m.group(1))
                    if 1 <= n <= len(s.ranges) and s.ranges[n - 1].t1 is None:
                        s.ranges[n - 1].t1 = now
                        self.source.finish(s.ranges[n - 1])
                        if on_done is not None and n == len(s.ranges):
                            on_done(s, now)
                    continue
                s.other.append(line)
        for s in streams:
            # a session that exits before its work is done failed
            waiting = s.pid is None or (s.t_end is None and on_done is not None)
            if waiting and s.psql is not None and s.psql.poll() is not None:
                raise self._fail(sel, s)
            if s.index_wait and s.stderr_eof:
                s.index_wait = False  # psql ended without telling: nothing measured

    def _fail(self, sel: selectors.BaseSelector, s: Stream) -> ProbeError:
        """The error for a stream whose psql (or compressor) failed."""
        for proc in (s.psql, s.comp_proc):
            if proc is not None:
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
        self._drain(sel, s)
        return ProbeError(self._failure(s))

    def _drain(self, sel: selectors.BaseSelector, s: Stream) -> None:
        # only once psql has exited: a read would block while it runs
        if (s.psql is None or s.psql.stderr is None or s.stderr_eof
                or s.psql.poll() is None):
            return
        try:
            rest = s.psql.stderr.read()
        except (OSError, ValueError):
            rest = b""
        s.other += s.feed(rest + b"\n")
        s.stderr_eof = True

    def _failure(self, s: Stream) -> str:
        """The one-line message for a stream that failed."""
        msg = s.error_text()
        cur = s.current or (s.ranges[-1] if s.ranges else None)
        table = cur.label if cur is not None else None
        low = msg.lower()
        if "lock timeout" in low:
            return (f"{table or 'a table'} is locked by another session (the probe waits "
                    "only briefly for locks): try again later or use --history / --from-timings")
        if "permission denied" in low:
            return (f"the probe cannot read {table or 'a table'}: {msg} (connect as a user "
                    "who can dump it, or use --history / --from-timings)")
        if s.pid is None and s.psql is not None and s.psql.poll() not in (None, 0, 3):
            return f"the probe's psql could not connect: {msg or 'no message'}"
        if table is not None:
            return f"the probe failed copying {table}: {msg or 'psql exited early'}"
        return f"the probe failed: {msg or 'psql exited early'}"
