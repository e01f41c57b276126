"""The exporter's metrics, built at scrape time from the exporter's state.

Pure: a `State` (what the exporter knows now, copied under its lock) in,
metric families out. Nothing here reads the server or the host, so a scrape
costs no query, and the naming and cardinality rules can be tested without a
server (tests/test_exporter.py). Every metric is listed in docs/metrics.md.

Cardinality: jobs are labelled by `server`, `database`, `kind` and `tool`
only (never a pid, a table, a path or a time); the one-hot families add one
label whose values come from a fixed list (`state`) or a registry the core
and the drivers fill (`phase`: pgparmon.phases; `bottleneck`, `code`:
pgparmon.verdicts). Two jobs that would share the same labels (two dumps of one
database at once) are shown as one: the running one that started last.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..jobs.registry import all_phases, all_verdicts, all_warnings
from ..sample import Sample

PREFIX = "pgparmon_"
JOB_LABELS = ("server", "database", "kind", "tool")
SUCCESS_LABELS = ("server", "database", "kind")

# the values of the one-hot families are known before they happen, so that a
# series exists (at 0) from a job's first sample and alerts can compare: the
# job's states here; phases, verdict kinds and warning codes from their
# registries, which the drivers extend
STATES = ("running", "finished", "failed", "ended")


@dataclass(frozen=True)
class JobView:
    """One followed job as the collector shows it: its labels and the last
    published sample (pgparmon.sample/1) with the few figures the sample
    does not hold."""

    server: str
    database: str
    kind: str
    tool: str
    doc: Sample  # the last published sample
    started: float  # wall clock, seconds since the epoch
    ended: float | None = None
    bytes_done: float = 0.0  # monotonic over the job's life
    rows_done: float = 0.0
    last_progress: float | None = None  # wall time the job last moved on

    @property
    def labels(self) -> tuple[str, str, str, str]:
        return (self.server, self.database, self.kind, self.tool)

    @property
    def state(self) -> str:
        return str(self.doc.job.state or "running")


@dataclass(frozen=True)
class ServerView:
    name: str  # redacted, stable: host:port/db or --name
    up: bool = False
    connected_once: bool = False
    last_sample: float | None = None  # wall time of the last good sample
    sample_seconds: float | None = None  # the last pass over this server
    errors: int = 0
    jobs: int = 0  # jobs followed now (running)


@dataclass(frozen=True)
class State:
    servers: tuple[ServerView, ...] = ()
    jobs: tuple[JobView, ...] = ()
    # (server, database, kind) -> wall time of the last job that finished well
    last_success: dict[tuple[str, str, str], float] = field(default_factory=dict)
    started: float = 0.0  # the exporter's own start
    recordings_dir: str | None = None
    recordings_bytes: int | None = None
    recordings_files: int | None = None
    recording_errors: int = 0
    retention_deleted: int = 0


def pick_jobs(jobs: Iterable[JobView]) -> list[JobView]:
    """One job per label set: running before ended, then the latest start."""
    best: dict[tuple[str, ...], JobView] = {}
    for j in jobs:
        cur = best.get(j.labels)
        key = (j.state == "running", j.started)
        if cur is None or key > (cur.state == "running", cur.started):
            best[j.labels] = j
    return [best[k] for k in sorted(best)]


class ExporterCollector(Collector):
    """A prometheus_client collector over the exporter's current state."""

    def __init__(self, state: Callable[[], State]) -> None:
        self.state = state

    def describe(self) -> list[Metric]:
        return []  # no description pass at registration (the state may be empty)

    def collect(self) -> Iterator[Metric]:
        yield from families(self.state())


def _g(name: str, doc: str, labels: Iterable[str], unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, labels=list(labels), unit=unit)


def _c(name: str, doc: str, labels: Iterable[str], unit: str = "") -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, doc, labels=list(labels), unit=unit)


def families(st: State) -> list[Metric]:
    """Every family, built from the state (docs/metrics.md lists them)."""
    out: list[Metric] = []
    out += _exporter_families(st)
    out += _job_families(pick_jobs(st.jobs))
    out += _host_families(st.jobs)
    success = _g("last_success_time_seconds", "Wall time (Unix seconds) the last job of this "
                 "kind on this database ended successfully", SUCCESS_LABELS, unit="seconds")
    for (server, database, kind), ts in sorted(st.last_success.items()):
        success.add_metric([server, database, kind], ts)
    out.append(success)
    return out


def _exporter_families(st: State) -> list[Metric]:
    start = _g("exporter_start_time_seconds", "Wall time (Unix seconds) the exporter started",
               (), unit="seconds")
    start.add_metric([], st.started)
    up = _g("server_up", "1 when the exporter's last sample of this server succeeded, else 0",
            ("server",))
    lat = _g("exporter_sample_duration_seconds", "Wall time of the exporter's last sampling "
             "pass over this server (discovery query and every followed job's sample)",
             ("server",), unit="seconds")
    last = _g("exporter_last_sample_time_seconds", "Wall time (Unix seconds) of the last "
              "successful sample of this server", ("server",), unit="seconds")
    errs = _c("exporter_errors", "Samples of this server that failed (connection lost, "
              "timeout, missing privilege, a job that could not be followed)", ("server",))
    followed = _g("exporter_jobs", "Jobs the exporter follows on this server now (running)",
                  ("server",))
    for s in st.servers:
        up.add_metric([s.name], 1.0 if s.up else 0.0)
        if s.sample_seconds is not None:
            lat.add_metric([s.name], s.sample_seconds)
        if s.last_sample is not None:
            last.add_metric([s.name], s.last_sample)
        errs.add_metric([s.name], float(s.errors))
        followed.add_metric([s.name], float(s.jobs))
    out: list[Metric] = [start, up, lat, last, errs, followed]
    rec_errs = _c("exporter_recording_errors", "Recording writes or deletions that failed "
                  "(a full or unwritable recordings directory); following goes on", ())
    rec_errs.add_metric([], float(st.recording_errors))
    deleted = _c("exporter_recordings_deleted", "Finished recordings deleted by the "
                 "retention limits", ())
    deleted.add_metric([], float(st.retention_deleted))
    out += [rec_errs, deleted]
    if st.recordings_bytes is not None:
        size = _g("exporter_recordings_bytes", "Total size of the recordings in the "
                  "recordings directory", (), unit="bytes")
        size.add_metric([], float(st.recordings_bytes))
        files = _g("exporter_recordings", "Recordings in the recordings directory", ())
        files.add_metric([], float(st.recordings_files or 0))
        out += [size, files]
    return out


def _job_families(jobs: list[JobView]) -> list[Metric]:
    L = JOB_LABELS
    info = _g("job_info", "A job the exporter follows or followed recently (always 1; its "
              "labels say which)", L)
    state = _g("job_state", "The job's state, one-hot: running, finished, failed, ended "
               "(outcome unknown)", (*L, "state"))
    progress = _g("job_progress_ratio", "Work done over the job's total work (0 to 1)", L,
                  unit="ratio")
    eta = _g("job_eta_seconds", "Seconds until the job is expected to end (schedule "
             "simulation); absent when it cannot be said", L, unit="seconds")
    bytes_total = _c("job_bytes", "Bytes the job has moved (dump: COPY bytes sent; restore: "
                     "archive bytes read; backup: bytes streamed)", L, unit="bytes")
    rows_total = _c("job_rows", "Rows the job has copied", L)
    tput = _g("job_throughput_bytes_per_second", "The job's throughput now, bytes per second "
              "(the last 5 s)", L)
    workers = _g("job_workers", "Parallel workers the job was started with (-j)", L)
    active = _g("job_active_workers", "The job's workers by what they do now", (*L, "phase"))
    items = _g("job_items", "Work items of the job (tables, indexes, files)", L)
    items_done = _g("job_items_done", "Work items the job has finished", L)
    neck = _g("job_bottleneck", "What limits the job now, one-hot", (*L, "bottleneck"))
    warn = _g("job_warning", "Warnings about the job now, one-hot by code", (*L, "code"))
    started = _g("job_start_time_seconds", "Wall time (Unix seconds) the job started (its "
                 "client process, else its first session)", L, unit="seconds")
    ended = _g("job_end_time_seconds", "Wall time (Unix seconds) the job ended; absent "
               "while it runs", L, unit="seconds")
    moved = _g("job_last_progress_time_seconds", "Wall time (Unix seconds) the job last "
               "made progress (bytes, rows or progress ratio went up)", L, unit="seconds")
    free = _g("job_target_free_bytes", "Free space on the filesystem of the job's target "
              "(a dump's directory)", L, unit="bytes")
    # every registered phase, verdict kind and warning code, a series at 0
    # before it happens
    worker_phases = tuple(p.name for p in all_phases())
    necks, codes_known = all_verdicts(), all_warnings()
    for j in jobs:
        lv = list(j.labels)
        d = j.doc.job
        info.add_metric(lv, 1.0)
        for s in STATES:
            state.add_metric([*lv, s], 1.0 if j.state == s else 0.0)
        if d.progress is not None:
            progress.add_metric(lv, float(d.progress))
        if d.eta_s is not None:
            eta.add_metric(lv, float(d.eta_s))
        bytes_total.add_metric(lv, j.bytes_done, created=j.started)
        rows_total.add_metric(lv, j.rows_done, created=j.started)
        tput.add_metric(lv, float(d.bytes_per_s or 0.0))
        if d.jobs:
            workers.add_metric(lv, float(d.jobs))
        counts: dict[str, int] = {}
        for w in j.doc.workers:
            ph = str(w.phase or "other")
            counts[ph] = counts.get(ph, 0) + 1
        for ph in _values(worker_phases, counts):
            active.add_metric([*lv, ph], float(counts.get(ph, 0)))
        items.add_metric(lv, float(d.items_total or 0))
        items_done.add_metric(lv, float(d.items_done or 0))
        kind = j.doc.bottleneck.kind if j.state == "running" else None
        for b in _values(necks, [kind] if kind else []):
            neck.add_metric([*lv, b], 1.0 if b == kind else 0.0)
        codes = {str(w.code) for w in j.doc.warnings}
        for c in _values(codes_known, codes):
            warn.add_metric([*lv, c], 1.0 if c in codes else 0.0)
        started.add_metric(lv, j.started)
        if j.ended is not None:
            ended.add_metric(lv, j.ended)
        if j.last_progress is not None:
            moved.add_metric(lv, j.last_progress)
        if j.doc.free_bytes is not None:
            free.add_metric(lv, float(j.doc.free_bytes))
    return [info, state, progress, eta, bytes_total, rows_total, tput, workers, active, items,
            items_done, neck, warn, started, ended, moved, free]


def _host_families(jobs: Iterable[JobView]) -> list[Metric]:
    """The host's CPU as the newest running job's last sample saw it (the
    exporter reads the host only while it follows a job: idle, nothing)."""
    cpu = _g("host_cpu_ratio", "Host CPU busy over the last sample interval (0 to 1), while "
             "a job is followed", (), unit="ratio")
    iowait = _g("host_iowait_ratio", "Host CPU time in iowait over the last sample interval "
                "(0 to 1), while a job is followed", (), unit="ratio")
    running = [j for j in jobs if j.state == "running" and j.doc.has("host")]
    if running:
        host = max(running, key=lambda j: j.started).doc.host
        if host.cpu_percent is not None:
            cpu.add_metric([], float(host.cpu_percent) / 100)
        if host.iowait_percent is not None:
            iowait.add_metric([], float(host.iowait_percent) / 100)
    return [cpu, iowait]


def _values(known: tuple[str, ...], seen: Iterable[str]) -> list[str]:
    """The registered values, and any value a sample holds that is not
    registered (a recording of another version, a plug-in that registered
    none: shown, not dropped)."""
    return list(known) + sorted({v for v in seen if v not in known})
