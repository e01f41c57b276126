"""What limits the run now, in one line, from wait events and the host.

The verdict is read over a short window of samples (wait events flicker),
following docs/signals.md ("Reading the limit"): ClientWrite with a busy client means
compression, DataFile waits mean storage, WAL waits mean WAL, Lock means
blocked, and a run whose other workers sit idle is waiting on one table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..verdicts import register_verdicts

BUSY_CPU = 80.0  # % of one core: a process that is CPU bound
HOST_CPU = 90.0

# the kinds judge() gives (pgparmon.verdicts); a driver's own verdict hook
# registers those it adds (Driver.verdicts)
JUDGED = register_verdicts("client-cpu", "client-feed", "server-cpu", "host-cpu", "disk-read",
                           "disk-write", "wal", "locks", "one-table", "stalled", "starting",
                           "nothing", "throttled")


@dataclass(frozen=True)
class Verdict:
    kind: str  # a registered verdict kind (pgparmon.verdicts): JUDGED, or a driver's
    detail: str


STALLED = Verdict("stalled", "no progress in the last samples: the job is stalled")
LOCKS = Verdict("locks", "workers wait on locks held by other sessions")
# verdicts that name what the job's workers wait on (a lock another session
# holds, a checkpoint, WAL archiving, a free sync worker, a sync that keeps
# failing): a stall is what they cause, so they say more than it does
WAITS_ON = frozenset({"locks", "checkpoint", "archiving", "worker-slots", "sync-failing"})


def against_stall(reason: Verdict | None, stalled: bool) -> Verdict | None:
    """The one rule between a stall and another reason (a driver's own
    verdict, the judge's): a stall replaces it (None), unless it names what
    the workers wait on (WAITS_ON), which explains the stall: that reason
    stays, with the stall said. Not stalled: the reason as it is."""
    if not stalled or reason is None:
        return reason
    if reason.kind in WAITS_ON:
        return Verdict(reason.kind, f"{reason.detail} (no progress in the last samples)")
    return None


@dataclass(frozen=True)
class WorkerObs:
    """One worker in one sample, as the verdict needs it."""

    phase: str
    wait: str | None  # "Type:Event" or None (running on CPU)
    client_cpu: float | None  # % of a core used by its client process
    server_cpu: float | None  # % of a core used by its backend process
    direction: str | None  # "to" (dump) | "from" (restore / load) | None


def judge(window: Sequence[Sequence[WorkerObs]], *, flow: str | None, jobs: int | None,
          pending: int, running_items: Sequence[tuple[str, float]],
          host: Any | None, devices: Mapping[str, Any] | None = None,
          stalled: bool = False, stopped_clients: int = 0, tool: str = "client") -> Verdict:
    """window: the last few samples' worker observations (oldest first).
    flow: "out" when the server sends the job's data to the client (a dump),
    "in" when the client feeds the server (a restore, a load), None when its
    driver declares neither. tool names the client program in the verdict."""
    if stopped_clients:
        return Verdict("stalled", f"{stopped_clients} client process(es) are stopped (SIGSTOP): "
                                  "no work is done until they continue")
    # a process waiting in its main loop for something to do (a WAL stream
    # waiting for new WAL: Activity:WalSenderMain) is idle, not limited
    obs = [o for sample in window for o in sample if o.phase not in ("idle",)
           and not (o.wait or "").startswith("Activity:")]
    if stalled:  # workers that wait on locks explain it
        locked = obs and 2 * sum(1 for o in obs if o.phase == "lock-wait") >= len(obs)
        return against_stall(LOCKS if locked else None, True) or STALLED
    if not window or not obs:
        idle = [o for sample in window for o in sample]
        if idle and all(window) and pending == 0 and not running_items:
            # sessions there, all idle through the window, nothing running:
            # the client sends no work (a loader between batches, a tool
            # between steps)
            cpu = _mean([o.client_cpu for o in idle if o.client_cpu is not None])
            if cpu is not None and cpu >= BUSY_CPU:
                return Verdict("client-cpu", f"every session is idle while the client "
                               f"processes run at {cpu:.0f}% of a core: the client is "
                               "preparing the next batch (parsing, transforming)")
            return Verdict("client-feed", "every session is idle: the client sends no work "
                           "now (between batches or steps)")
        if pending == 0 and not running_items:
            return Verdict("nothing", "no work running")
        return Verdict("starting", "waiting for workers to start")
    n = len(obs)
    waits = Counter(o.wait for o in obs)
    locked = sum(1 for o in obs if o.phase == "lock-wait")
    if locked >= n / 2:
        return LOCKS
    tail = _tail(jobs, pending, running_items)
    inner = _inner(obs, waits, n, host, devices, flow, tool)
    if tail is not None:
        return Verdict("one-table", f"{tail}; {inner.detail}" if inner.kind != "nothing"
                       else tail)
    return inner


def _tail(jobs: int | None, pending: int, running: Sequence[tuple[str, float]]) -> str | None:
    if pending > 0 or not running or not jobs or jobs <= 1 or len(running) >= jobs:
        return None
    if len(running) == 1:
        name, frac = running[0]
        return (f"one big table left: {name} ({frac:.0%} done), {jobs - 1} of {jobs} "
                "workers idle")
    return f"{len(running)} items left, {jobs - len(running)} of {jobs} workers idle"


def _share(waits: Counter[str | None], n: int, pred: Any) -> float:
    return sum(c for w, c in waits.items() if w and pred(w)) / n


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _inner(obs: list[WorkerObs], waits: Counter[str | None], n: int, host: Any | None,
           devices: Mapping[str, Any] | None, flow: str | None, tool: str) -> Verdict:
    client_cpu = _mean([o.client_cpu for o in obs if o.client_cpu is not None])
    server_cpu = _mean([o.server_cpu for o in obs if o.server_cpu is not None])
    host_cpu = getattr(host, "cpu_percent", None) if host is not None else None
    iowait = getattr(host, "iowait_percent", None) if host is not None else None
    client_write = _share(waits, n, lambda w: w == "Client:ClientWrite")
    client_read = _share(waits, n, lambda w: w == "Client:ClientRead")
    io_read = _share(waits, n, lambda w: w in ("IO:DataFileRead", "IO:DataFilePrefetch",
                                               "IO:BaseBackupRead"))
    io_write = _share(waits, n, lambda w: (w.startswith("IO:DataFile") and "Read" not in w
                                          and "Prefetch" not in w)
                      or w in ("IO:BaseBackupWrite", "IO:BaseBackupSync"))
    throttled = _share(waits, n, lambda w: w == "Timeout:BaseBackupThrottle")
    wal = _share(waits, n, lambda w: "WAL" in w or w.startswith("IO:Checkpoint")
                 or w == "LWLock:WALInsert")
    on_cpu = waits.get(None, 0) / n
    disk = _busiest(devices)
    cpu_txt = f"; host CPU {host_cpu:.0f}%" if host_cpu is not None else ""
    if throttled >= 0.3:
        return Verdict("throttled", "the base backup sleeps to keep to its --max-rate "
                       "(BaseBackupThrottle): the rate it was given is the limit; raise or drop "
                       "--max-rate for a faster backup" + cpu_txt)
    if client_write >= 0.4 and flow == "out":
        if client_cpu is not None and client_cpu >= BUSY_CPU:
            return Verdict("client-cpu", f"{tool} workers at {client_cpu:.0f}% of a core while "
                           "the server waits to send (ClientWrite): compression is the limit; "
                           "try -Z 1, or lz4/zstd on 16+" + cpu_txt)
        if disk and disk[1] >= 85:
            return Verdict("disk-write", f"the server waits on the client (ClientWrite) and "
                           f"{disk[0]} is {disk[1]:.0f}% busy: writing the dump is the limit")
        return Verdict("client-cpu", "the server waits to send (ClientWrite): the client "
                       "cannot take data faster (compression, disk or network)" + cpu_txt)
    if client_read >= 0.4 and flow == "in":
        if client_cpu is not None and client_cpu >= BUSY_CPU:
            return Verdict("client-cpu", f"client processes at {client_cpu:.0f}% of a core "
                           "while the server waits for data (ClientRead): decompression or "
                           "parsing in the client is the limit" + cpu_txt)
        return Verdict("client-feed", "the server waits for data (ClientRead): the client "
                       "does not feed COPY fast enough (reading the archive, network)")
    if wal >= 0.3:
        return Verdict("wal", "workers wait on WAL writes or checkpoints: raise max_wal_size, "
                       "put WAL on faster storage")
    if io_read >= 0.3:
        return Verdict("disk-read", "workers wait on data file reads (IO:DataFileRead): "
                       "storage read speed is the limit")
    if io_write >= 0.3:
        return Verdict("disk-write", "workers wait on data file writes/extends: storage "
                       "write speed is the limit")
    if host_cpu is not None and host_cpu >= HOST_CPU:
        return Verdict("host-cpu", f"host CPU {host_cpu:.0f}% busy: more jobs will not help "
                       "on this host")
    if on_cpu >= 0.5 and server_cpu is not None and server_cpu >= BUSY_CPU:
        return Verdict("server-cpu", f"server backends at {server_cpu:.0f}% of a core each: "
                       "the server's CPU work per row is the limit")
    if iowait is not None and iowait >= 30 and disk:
        return Verdict("disk-read" if flow == "out" else "disk-write",
                       f"iowait {iowait:.0f}%, {disk[0]} {disk[1]:.0f}% busy")
    return Verdict("nothing", "no resource saturated: more jobs would likely help" + cpu_txt)


def _busiest(devices: Mapping[str, Any] | None) -> tuple[str, float] | None:
    if not devices:
        return None
    best: tuple[str, float] | None = None
    for name, d in devices.items():
        util = getattr(d, "util_percent", None)
        if util is None:
            continue
        if best is None or util > best[1]:
            best = (name, float(util))
    return best
