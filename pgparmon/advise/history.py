"""Throughput against the number of active streams, from recordings of
earlier runs (`pgparmon attach --record FILE`, `pgparmon run --record FILE`):
docs/advise.md, evidence source 2. Every run's tail, where fewer workers remain
busy than -j, gives the points below N for free.

What is read: the published samples (`pgparmon.sample/1`, docs/json.md) of a
recording, in order: `elapsed_s`, `job.active_workers` (k, workers not idle),
`job.progress`, `job.bytes_per_s`, `job.state`, `workers[].phase` and
`server.error`; its summary (`items[].work`, `items[].bytes`); its header
(the job: kind, -j); and, when there is no summary, its plan readings.

Units. The fit needs the unit the advice's items are sized in
(advise/inventory.py): heap bytes, relpages * block_size as pg_dump orders
tables. `job.bytes_per_s` is not that: it counts COPY text bytes (about
DEFAULT_TEXT_RATIO of the heap, varying with the row format). But the
recording does carry work in the tracker's unit (analyze/progress.py):
`job.progress` is the share of the total work done, and the total is the sum
of the summary's `items[].work` (or, for a recording cut before its summary,
what the job's driver plans from the recorded plan). So:

- pg_dump: work done = progress * total, in heap bytes already (the
  tracker's unit for a dump): its rate is used directly.
- pg_restore: the tracker counts archive data-file bytes (compressed for a
  gzip/lz4/zstd archive) and index/constraint builds in proportion to them;
  the inventory counts heap bytes estimated from the COPY text
  (text / DEFAULT_TEXT_RATIO). One factor converts the whole stream: COPY
  text bytes per archive byte, from the summary's finished data items (their
  `bytes` over their `work`), divided by DEFAULT_TEXT_RATIO; without a
  summary, the ratio the inventory assumes for the data files' compression.
- copy (a COPY pool): COPY bytes per second as the server counts them,
  `job.bytes_per_s`; the unit is "COPY bytes".
- A run with no progress (its plan failed, or a custom-format restore whose
  data files have no sizes): `job.bytes_per_s` / DEFAULT_TEXT_RATIO over the
  intervals where every active worker is in COPY; an estimate, said so in
  the run's note.

`progress` is published rounded to 4 decimals: over a steady stretch the
rounding telescopes, costing at most 2e-4 of the total per stretch.

Steady samples. An interval between two consecutive samples counts for k
when both show k active workers, both have a server reading, neither is the
job's last (a finished job's progress jumps to 1), it is not a gap (longer
than GAP_FACTOR times the usual interval), and it is not in the warm-up after
a change of k: the first WARMUP_INTERVALS intervals, and for a rate measured
over the monitor's 5 s window, until that window lies wholly after the change.
X(k) is then the work of the steady intervals over their time (time
weighted), and a run reports only the k it saw for at least MIN_STEADY
steady intervals.

The tail's k < N points come from whichever items ran last (usually the
largest tables, LPT order): their per-stream rate stands for every item's.

Pure, apart from reading the files.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from ..analyze.progress import DEFAULT_TEXT_RATIO, Tracker
from ..jobs.base import Job, PlanInputs
from ..jobs.registry import driver_for
from ..record import Recording, RecordingError, read_recording
from ..sample import Sample, SampleError, read_samples
from .kinds import BY_TOOL

# The job kinds a recording may hold, and the unit each one's X(k) is in
# (what the advice's items are sized in): kinds.py's HistoryMeasure.
KINDS = tuple(BY_TOOL)
UNITS = {tool: k.history.unit for tool, k in BY_TOOL.items()}
MIN_STEADY = 3  # steady intervals a stream count needs in one run
WARMUP_INTERVALS = 1  # intervals skipped after a change of k
RATE_WINDOW_S = 5.0  # job.bytes_per_s is the rate over the last 5 s (monitor.py)
GAP_FACTOR = 3.0  # an interval this many times the median one is a gap
START_PROGRESS = 0.05  # a run first seen past this share was attached mid-run
# COPY text bytes per archive byte that the inventory assumes for a data
# file's compression, when the recording has no finished item to say.
ARCHIVE_TEXT_RATIO = {".dat": 1.0, ".gz": 1 / 0.3, ".zst": 1 / 0.3, ".lz4": 1 / 0.5}


class HistoryError(Exception):
    """A recording that cannot serve as history: one line, naming the file."""


@dataclass(frozen=True)
class HistoryRun:
    path: str
    kind: str  # pg_dump | pg_restore | copy
    jobs: int | None  # the -j of the run (a COPY pool: loaders seen)
    wall_s: float | None  # the whole run, when it finished and was followed from its start
    points: list[tuple[int, float, float]]  # (active streams k, X(k) in unit/s, seconds at k)
    unit: str = "heap bytes"  # what X counts (UNITS[kind], unless the note says otherwise)
    note: str = ""  # how the work was measured, or why there are no points


@dataclass(frozen=True)
class _Obs:
    t: float
    k: int
    ok: bool  # a server reading, the job still running
    work: float | None  # cumulative work, in the run's unit
    rate: float | None  # unit/s over the monitor's window, when all active workers COPY


def load_history(paths: list[str]) -> list[HistoryRun]:
    return [load_run(p) for p in paths]


def load_run(path: str) -> HistoryRun:
    try:
        rec = read_recording(path)
    except RecordingError as exc:
        raise HistoryError(_one_line(str(exc))) from None
    job = rec.header.get("job")
    if not isinstance(job, dict):
        job = {}
    kind = job.get("kind")
    if kind not in KINDS:
        labels = [k.label for k in BY_TOOL.values()]
        raise HistoryError(f"{path}: the recording names no {', '.join(labels[:-1])} or "
                           f"{labels[-1]} job")
    try:
        samples = read_samples(s for s in rec.samples
                               if isinstance(s, dict) and isinstance(s.get("job"), dict))
    except SampleError as exc:
        raise HistoryError(f"{path}: a sample is not a pgparmon.sample/1 document "
                           f"({_one_line(str(exc))})") from None
    if not samples:
        raise HistoryError(f"{path}: the recording holds no samples (it was cut before the "
                           "first one)")
    jobs = job.get("jobs") if isinstance(job.get("jobs"), int) else samples[0].job.jobs
    try:
        obs, unit, note, warm_s = _observations(rec, kind, samples)
    except (KeyError, TypeError, ValueError) as exc:
        raise HistoryError(f"{path}: a sample is not a pgparmon.sample/1 document "
                           f"({type(exc).__name__}: {_one_line(str(exc))})") from None
    acc = steady_work(obs, warm_s)
    points = [(k, w / s, s) for k, (w, s, n) in sorted(acc.items())
              if n >= MIN_STEADY and s > 0 and w > 0]
    if not points and not note:
        note = f"no stream count held for {MIN_STEADY} steady samples"
    return HistoryRun(path=path, kind=kind, jobs=jobs if isinstance(jobs, int) else None,
                      wall_s=_wall(rec, samples), points=points, unit=unit, note=note)


def history_points(runs: list[HistoryRun], kind: str) -> list[tuple[float, float]]:
    """(k, X(k)) over the runs of this kind, time-weighted: each run's X(k)
    counts for the seconds it was seen at k. A run's points already hold only
    the k it saw for MIN_STEADY steady intervals (load_run). Runs whose X is
    in another unit than the kind's (UNITS) are left out."""
    acc: defaultdict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in runs:
        if r.kind != kind or r.unit != UNITS.get(kind):
            continue
        for k, x, s in r.points:
            if k >= 1 and s > 0 and x > 0 and math.isfinite(x) and math.isfinite(s):
                acc[k][0] += x * s
                acc[k][1] += s
    return [(float(k), ws / s) for k, (ws, s) in sorted(acc.items()) if s > 0]


# ---- steady intervals ----------------------------------------------------------


def steady_work(obs: list[_Obs], warm_s: float = 0.0
                ) -> dict[int, tuple[float, float, int]]:
    """k -> (work, seconds, intervals) over the steady intervals at k (see
    the module's docstring). warm_s: how long after a change of k the
    measure still remembers the previous k (the rate window), beyond the
    WARMUP_INTERVALS skipped in any case."""
    dts = [b.t - a.t for a, b in itertools.pairwise(obs) if b.t > a.t]
    if not dts:
        return {}
    gap = GAP_FACTOR * statistics.median(dts)
    out: dict[int, tuple[float, float, int]] = {}
    run_i, run_t = 0, obs[0].t  # where the current stretch of one k began
    for i in range(1, len(obs)):
        a, b = obs[i - 1], obs[i]
        dt = b.t - a.t
        if not (a.ok and b.ok) or a.k != b.k or dt <= 0 or dt > gap:
            run_i, run_t = i, b.t
            continue
        if a.k <= 0 or i - run_i <= WARMUP_INTERVALS or b.t - warm_s < run_t:
            continue
        if a.work is not None and b.work is not None:
            if b.work < a.work:
                continue
            work = b.work - a.work
        elif a.rate is not None and b.rate is not None:
            work = b.rate * dt  # the rate over the window that ends at b
        else:
            continue
        w0, s0, n0 = out.get(a.k, (0.0, 0.0, 0))
        out[a.k] = (w0 + work, s0 + dt, n0 + 1)
    return out


# ---- reading the samples -------------------------------------------------------


def _observations(rec: Recording, kind: str, samples: list[Sample]
                  ) -> tuple[list[_Obs], str, str, float]:
    """The samples as (t, k, work or rate), in the kind's unit; the unit, a
    note on the measure, and the warm-up the measure needs."""
    measure = BY_TOOL[kind].history
    total = _work_total(rec, kind)
    scale: float | None = 1.0
    note = ""
    if measure.archive_work and total is not None:
        scale, how = _restore_scale(rec)
        if scale is None:
            total = None
        elif how:
            note = how
    use_progress = measure.by_progress and total is not None and total > 0 and any(
        s.job.progress is not None for s in samples)
    unit = measure.unit
    rate_scale = 1.0
    if not use_progress and measure.by_progress:
        rate_scale = 1.0 / DEFAULT_TEXT_RATIO
        note = ("no progress in the recording: heap bytes estimated from COPY bytes / "
                f"{DEFAULT_TEXT_RATIO}, over intervals where every active worker ran COPY")
    obs: list[_Obs] = []
    for s in samples:
        jd = s.job
        t = float(s.elapsed_s)
        k = int(jd.active_workers or 0)
        ok = s.server.error is None and (jd.state or "running") == "running"
        work = rate = None
        if use_progress:
            p = jd.progress
            if p is not None and total is not None and scale is not None:
                work = float(p) * total * scale
        else:
            bps = jd.bytes_per_s
            copying = sum(1 for w in s.workers if w.phase == "copy")
            if bps is not None and copying == k:
                rate = float(bps) * rate_scale
        if not math.isfinite(t):
            raise ValueError(f"elapsed_s {t}")
        obs.append(_Obs(t, k, ok, work, rate))
    return obs, unit, note, 0.0 if use_progress else RATE_WINDOW_S


def _work_total(rec: Recording, kind: str) -> float | None:
    """The tracker's total work: the summary's items, else the recorded plan
    replanned (a recording cut before its summary)."""
    summ = rec.summary
    if summ and summ.get("items"):
        total = sum(float(it.get("work") or 0.0) for it in summ["items"])
        if total > 0:
            return total
    return _plan_total(rec, kind)


def _plan_total(rec: Recording, kind: str) -> float | None:
    plan = next((v for k, v in reversed(rec.events) if k == "plan" and isinstance(v, dict)
                 and not v.get("error")), None)
    if plan is None:
        return None
    facts = rec.header.get("facts") or {}
    try:
        job = Job.from_dict(rec.header["job"])
        tr = Tracker(job, driver_for(job.kind),
                     block_size=int(facts.get("block_size") or 8192))
        if not tr.driver.plan(tr, PlanInputs.from_dict(plan)):
            return None
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    total = tr.work_total()
    return total if total > 0 else None


def _restore_scale(rec: Recording) -> tuple[float | None, str]:
    """Heap bytes (as the inventory estimates them) per unit of the tracker's
    restore work (archive data-file bytes)."""
    summ = rec.summary
    done = [it for it in (summ or {}).get("items") or ()
            if it.get("kind") == "data" and it.get("state") == "done"
            and (it.get("bytes") or 0) > 0 and (it.get("work") or 0) > 1]
    if done:
        ratio = sum(float(it["bytes"]) for it in done) / sum(float(it["work"]) for it in done)
        return ratio / DEFAULT_TEXT_RATIO, ""
    if summ and summ.get("items") and not any(
            (it.get("work") or 0) > 1 for it in summ["items"] if it.get("kind") == "data"):
        return None, ""  # data files without sizes (a custom-format archive)
    plan = next((v for k, v in reversed(rec.events) if k == "plan" and isinstance(v, dict)
                 and v.get("archive_files")), None)
    exts = set()
    for entry in (plan or {}).get("archive_files", {}).values():
        path = entry[0] if isinstance(entry, (list, tuple)) and entry else None
        if isinstance(path, str):
            exts.add(next((e for e in ARCHIVE_TEXT_RATIO if path.endswith(e)), "?"))
    if len(exts) == 1 and "?" not in exts:
        ext = exts.pop()
        how = (f"COPY text per archive byte assumed {ARCHIVE_TEXT_RATIO[ext]:.2f} ({ext} "
               "data files; the recording has no finished item to measure it)")
        return ARCHIVE_TEXT_RATIO[ext] / DEFAULT_TEXT_RATIO, how
    return None, ""


def _wall(rec: Recording, samples: list[Sample]) -> float | None:
    """The run's wall time, when it finished: its last sample's elapsed_s
    where the samples count from the job's own start (`job.started_from`: its
    client process or its sessions), even when the monitor attached late.
    Older recordings count from their first sample: there only when the
    recording saw the job start: its first sample at under START_PROGRESS of
    the work (`attach` as the job began), or, with no work list yet, before
    any worker was busy (`pgparmon run` samples before the client
    connects)."""
    lastj = samples[-1].job
    summ = rec.summary
    finished = lastj.state == "finished" or (summ or {}).get("state") == "finished"
    if not finished:
        return None
    first = samples[0].job
    if first.started_from in ("client process", "sessions"):
        wall = float(samples[-1].elapsed_s)
        return wall if wall > 0 and math.isfinite(wall) else None
    p0 = first.progress
    saw_start = (float(p0) <= START_PROGRESS if p0 is not None
                 else int(first.active_workers or 0) == 0)
    if not saw_start:
        return None
    wall = float(samples[-1].elapsed_s) - float(samples[0].elapsed_s)
    return wall if wall > 0 and math.isfinite(wall) else None


def _one_line(s: str) -> str:
    return " ".join(s.split())

