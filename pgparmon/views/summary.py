"""The end-of-run summary, built once for every view: `pgparmon run`'s final
print (views/text.py), `pgparmon report` (views/report.py, terminal and
HTML) and the TUI's end screen (tui/widgets/summary_table.py).

`end_summary` turns the summary doc (pgparmon.summary/1) and the samples
into facts about the run and item rows; the views only lay them out. Times
count from the job's start (`started`: its client process, else its first
session), not from the monitor's first sample.

Grouping of short items: the samples see an item that ran for less than a
sample interval at one sample at most, so its measured duration means
nothing ("0 ms", 200 times over in a restore of many small tables). Items
that are done, whose measured duration is shorter than the sample interval,
and that were seen done at the same sample are one row per kind ("200 small
tables, done 13.0–14.0 s", their bytes and rows summed) when there are at
least GROUP_MIN of them; one alone stays a row of its own, its duration
"< 1.0 s" (the interval) rather than a figure. Items seen done at the first
sample finished between the job's start and that sample. Every other item
is a row of its own, longest first; the groups follow, in time order.
`EndSummary.items` keeps every item ungrouped (the HTML report lists them
all).
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Any

from ..analyze.timeline import build
from ..jobs.registry import item_kind
from .. import units as fmt
from ..sample import Sample

Doc = Mapping[str, Any]  # the summary (pgparmon.summary/1) and a recording's header
NO_SAMPLE = Sample.from_json({})  # every field None: no samples to take a fact from

GROUP_MIN = 2  # this many short items of a kind seen done at one sample make a group


@dataclass(frozen=True)
class RunFacts:
    kind: str
    database: str
    jobs: int | None
    format: str | None
    target: str | None
    command: str
    server_version: str | None
    started: str | None
    ended: str | None
    wall_s: float
    state: str
    reason: str | None
    exit_code: int | None
    items_done: int
    items_total: int
    copy_bytes: int
    copy_rows: int
    scope: str | None = None  # "cluster": a physical backup, no database of its own


@dataclass(frozen=True)
class ItemRow:
    name: str
    kind: str
    worker: int | None
    state: str
    start_s: float | None  # since the job's start
    duration_s: float | None
    bytes: int | None
    rows: int | None
    table: str | None = None  # the table an index, constraint or VACUUM is on

    @property
    def bytes_per_s(self) -> float | None:
        return self.bytes / self.duration_s if self.bytes and self.duration_s else None

    def label(self, short_schema: bool = False) -> str:
        """The item's name, with its table where the name does not say it
        (an index, a constraint: "orders_pkey on public.orders");
        short_schema: the default schema `public.` left out."""
        name, table = self.name, self.table
        says = not table or name == table or name.endswith(" " + table)  # "VACUUM t"
        if short_schema:
            name, table = _unqualified(name) or name, _unqualified(table)
        return name if says else f"{name} on {table}"


@dataclass(frozen=True)
class ItemGroup:
    """Short items of one kind that finished between two samples."""

    kind: str
    count: int
    after_s: float  # the sample before they finished
    by_s: float  # the sample that saw them done
    bytes: int | None
    rows: int | None
    workers: int  # how many workers ran them

    @property
    def name(self) -> str:
        noun = item_kind(self.kind).several  # what the kind's registry calls several
        return f"{self.count} {noun}, done {fmt.period(self.after_s, self.by_s)}"

    @property
    def state(self) -> str:
        return "done"

    def label(self, short_schema: bool = False) -> str:
        return self.name


Row = ItemRow | ItemGroup


@dataclass(frozen=True)
class EndSummary:
    facts: RunFacts
    items: list[ItemRow]  # every item, longest first
    rows: list[Row]  # the same with short items grouped: what a terminal shows
    interval: float | None  # the sample interval the grouping used


def end_summary(summary: Doc | None, samples: Sequence[Sample] = (), *,
                header: Doc | None = None, times: Sequence[float] | None = None
                ) -> EndSummary:
    """The summary of a run from its summary doc and samples (the first and
    last give the job's facts; `times`, the samples' elapsed_s, default to
    those of `samples`: a caller that kept only the first and the last
    sample passes them)."""
    facts = run_facts(samples, summary, header)
    items = item_rows(samples, summary)
    edges = list(times if times is not None
                 else (float(d.elapsed_s or 0.0) for d in samples))
    interval = sample_interval(edges)
    if edges and edges[0] > 0:  # attached after the start: what the first
        edges.insert(0, 0.0)  # sample saw done ended between the two
    return EndSummary(facts, items, group_rows(items, edges, interval), interval)


def job_start(samples: Sequence[Sample], summary: Doc | None) -> float | None:
    """When the job started (unix time): the first sample's time less its
    elapsed_s (which counts from the job's start; from the monitor's first
    sample in recordings made before it did), else the summary's `started`."""
    if samples:
        t = _parse_ts(samples[0].ts)
        if t is not None:
            return t - float(samples[0].elapsed_s or 0.0)
    return _parse_ts((summary or {}).get("started"))


def row_cells(r: Row, interval: float | None, exact_rows: bool = False) -> dict[str, str]:
    """The text of a row's columns, as every terminal view writes them. An
    item done in less than the sample interval (seen at one sample, or
    settled between two) has no measured duration or rate: "< 1.0 s" (a
    group: each of its items)."""
    rows = fmt.count_exact(r.rows) if exact_rows else fmt.count(r.rows)
    if isinstance(r, ItemGroup):
        return {"kind": r.kind, "worker": f"{r.workers} workers" if r.workers > 1 else "-",
                "state": r.state, "start": "-", "duration": f"< {fmt.about(interval)}",
                "bytes": fmt.size(r.bytes), "rows": rows, "bytes/s": "-"}
    short = unmeasured(r, interval)
    return {"kind": r.kind, "worker": str(r.worker or "-"), "state": r.state,
            "start": fmt.duration(r.start_s),
            "duration": f"< {fmt.about(interval)}" if short else fmt.duration(r.duration_s),
            "bytes": fmt.size(r.bytes), "rows": rows,
            "bytes/s": "-" if short else fmt.rate(r.bytes_per_s)}


def unmeasured(r: ItemRow, interval: float | None) -> bool:
    """Done in less than the sample interval: its duration is not measured."""
    return (r.state == "done" and interval is not None and r.duration_s is not None
            and r.duration_s < interval)


def fit_columns(widths: Mapping[str, int], room: int, label_w: int,
                drop: Sequence[str]) -> list[str]:
    """The columns (keys of `widths`, in its order) that leave the item
    column `label_w` cells of `room`: the columns of `drop` go, in that
    order, until the widest name fits, so that names are not folded while
    some column can give way (narrower still, they fold)."""
    cols = list(widths)
    for key in drop:
        if room - sum(widths[c] for c in cols) >= label_w:
            break
        if key in cols:
            cols.remove(key)
    return cols


def sample_interval(times: Sequence[float]) -> float | None:
    """The typical time between two samples (the median gap)."""
    gaps = [b - a for a, b in pairwise(times) if b > a]
    return statistics.median(gaps) if gaps else None


def group_rows(items: Sequence[ItemRow], times: Sequence[float],
               interval: float | None) -> list[Row]:
    """`items` with the short ones that finished between the same two
    samples grouped (see the module's docstring)."""
    if not interval or len(times) < 2:
        return list(items)
    buckets: dict[tuple[int, str], list[ItemRow]] = {}
    for r in items:
        if r.state != "done" or r.start_s is None or (r.duration_s or 0.0) >= interval:
            continue
        end = r.start_s + (r.duration_s or 0.0)
        # settled at a sample: it ends at that sample's time, give or take
        # the rounding of the times to ms
        i = min(max(1, bisect.bisect_left(times, end - 5e-3)), len(times) - 1)
        buckets.setdefault((i, r.kind), []).append(r)
    grouped = {id(r) for b in buckets.values() if len(b) >= GROUP_MIN for r in b}
    rows: list[Row] = [r for r in items if id(r) not in grouped]
    for (i, kind), b in sorted(buckets.items()):
        if len(b) >= GROUP_MIN:
            rows.append(ItemGroup(kind, len(b), times[i - 1], times[i],
                                  sum(r.bytes or 0 for r in b) or None,
                                  sum(r.rows or 0 for r in b) or None,
                                  len({r.worker for r in b if r.worker is not None})))
    return rows


def run_facts(samples: Sequence[Sample], summary: Doc | None, header: Doc | None) -> RunFacts:
    first = samples[0] if samples else NO_SAMPLE
    last = samples[-1] if samples else NO_SAMPLE
    j0, j1 = first.job, last.job
    hjob = (header or {}).get("job") or {}
    facts = (header or {}).get("facts") or {}
    items = (summary or {}).get("items") or []
    server = last.server.version or facts.get("version")
    cmd = j0.command or hjob.get("command") or []
    return RunFacts(
        kind=str(j0.kind or (summary or {}).get("kind") or hjob.get("kind") or "?"),
        database=("the whole cluster" if j1.scope == "cluster" else
                  str(j0.database or (summary or {}).get("database")
                      or hjob.get("database") or "?")),
        scope=j1.scope,
        jobs=j0.jobs or (summary or {}).get("jobs") or hjob.get("jobs"),
        format=j0.format or hjob.get("format"),
        target=j0.target or (header or {}).get("target_dir"),
        command=" ".join(map(str, cmd)) if isinstance(cmd, (list, tuple)) else str(cmd),
        server_version=server,
        started=j0.started or (summary or {}).get("started") or first.ts,
        ended=last.ts,
        wall_s=float((summary or {}).get("wall_s") or last.elapsed_s or 0.0),
        state=str((summary or {}).get("state") or j1.state or "?"),
        reason=(summary or {}).get("reason") or j1.outcome,
        exit_code=(summary or {}).get("exit_code", j1.exit_code),
        items_done=int(j1.items_done or sum(1 for i in items if i.get("state") == "done")),
        items_total=int(j1.items_total or len(items)),
        copy_bytes=int(sum(i.get("bytes") or 0 for i in items)),
        copy_rows=int(sum(i.get("tuples") or 0 for i in items)),
    )


def verdict_shares(samples: Sequence[Sample]) -> list[tuple[str, float, str]]:
    """(bottleneck kind, seconds, its latest detail), most time first: what
    limited the run, over the whole run rather than at one instant."""
    secs: dict[str, float] = {}
    detail: dict[str, str] = {}
    for a, b in pairwise(samples):
        bn = a.bottleneck
        k = str(bn.kind or "?")
        dt = float(b.elapsed_s or 0) - float(a.elapsed_s or 0)
        secs[k] = secs.get(k, 0.0) + max(0.0, dt)
        detail[k] = str(bn.detail or "")
    return [(k, s, detail[k]) for k, s in sorted(secs.items(), key=lambda kv: -kv[1])]


def limits(samples: Sequence[Sample], most: int = 5) -> str:
    """What limited the run, its share of the time each: "host-cpu 62%,
    one-table 30%"."""
    shares = verdict_shares(samples)
    total = sum(s for _, s, _ in shares) or 1.0
    return ", ".join(f"{k} {100 * s / total:.0f}%" for k, s, _ in shares[:most])


def item_rows(samples: Sequence[Sample], summary: Doc | None) -> list[ItemRow]:
    """Per item, longest first: from the summary when there is one (it has
    the exact start and end), else from what the samples showed. Start times
    count from the job's start (from the first item's start when neither
    samples nor the summary say it)."""
    items = (summary or {}).get("items") or []
    if not items:
        spans = build(samples).spans()
        return sorted((ItemRow(sp.item, sp.phase, pid, "running" if sp.open else "done",
                               sp.start, sp.end - sp.start, None, None)
                       for pid, lst in spans.items() for sp in lst),
                      key=lambda r: (-(r.duration_s or 0), r.name))
    starts = [_parse_ts(it.get("started")) for it in items]
    t0 = job_start(samples, summary)
    if t0 is None:
        t0 = min((s for s in starts if s is not None), default=None)
    out = [ItemRow(str(it.get("name") or it.get("key") or "?"), str(it.get("kind") or ""),
                   it.get("worker"), str(it.get("state") or ""),
                   (st - t0) if st is not None and t0 is not None else None,
                   it.get("duration_s"), it.get("bytes"), it.get("tuples"),
                   it.get("relation") if it.get("kind") != "data" else None)
           for it, st in zip(items, starts, strict=True)]
    return sorted(out, key=lambda r: (-(r.duration_s or 0), r.name))


def _unqualified(name: str | None) -> str | None:
    """A name without the default schema (noise on a narrow screen)."""
    return name[len("public."):] if name and name.startswith("public.") else name


def _parse_ts(ts: Any) -> float | None:
    if not ts:
        return None
    try:
        return datetime.fromisoformat(str(ts)).timestamp()
    except ValueError:
        return None
