"""A report of one run: a self-contained HTML file, or text for a terminal.

The HTML has no external reference at all (no CDN, no font, no script): CSS
is inline and the charts are SVG drawn here, so the file can be mailed,
attached to a ticket or opened on an air-gapped host. Every piece of text
from the run (table names, command lines, notes) is escaped.

The analysis is the TUI's: `analyze.timeline` for the Gantt chart and the
time series, `analyze.advice_live` for the saturation point and the -j to use
next time, so the report says what the live screen said. The facts and
item rows are views/summary.py's, shared with `pgparmon run` and the TUI.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from ..jobs.registry import all_phases, phase_of
from ..analyze.advice_live import LiveAdvice, advise_samples
from ..analyze.timeline import SeriesPoint, Span, TimelineBuilder, build, idle_share
from .. import units as fmt
from ..sample import Sample
from .summary import (
    ItemRow,
    RunFacts,
    end_summary,
    limits,
    row_cells,
    unmeasured,
    verdict_shares,
)
from .text import ItemsTable, summary_head

Doc = Mapping[str, Any]  # the summary (pgparmon.summary/1) and a recording's header

PALETTE = ("#3a6ea5", "#e76f51", "#2a9d8f", "#9b5de5", "#f4a261", "#6c757d")


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


# ---- SVG ---------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    name: str
    color: str
    points: Sequence[tuple[float, float | None]]
    step: bool = False  # counts (workers) change in steps, rates are drawn as lines
    fill: bool = False
    width: float = 2.0
    opacity: float = 1.0


def _nice_max(v: float) -> float:
    if v <= 0 or not math.isfinite(v):
        return 1.0
    exp = math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if m * 10 ** exp >= v:
            return float(m * 10 ** exp)
    return float(10 ** (exp + 1))


def _time_ticks(t_end: float, n: int = 6) -> list[float]:
    if t_end <= 0:
        return [0.0]
    raw = t_end / n
    steps = (1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0,
             3600.0, 7200.0, 14400.0)
    step = next((s for s in steps if s >= raw), steps[-1])
    if raw < 1:
        step = 0.5 if raw > 0.2 else 0.2
    ticks, t = [], 0.0
    while t <= t_end + 1e-9:
        ticks.append(t)
        t += step
    return ticks


def svg_chart(title: str, t_end: float, lines: Sequence[Line], *,
              y_fmt: Callable[[float], str], y_max: float | None = None,
              right: Sequence[Line] = (), right_max: float | None = None,
              right_fmt: Callable[[float], str] | None = None, right_label: str = "",
              width: int = 960, height: int = 240, chart_id: str = "") -> str:
    """A time chart: lines (or areas) on the left axis, optional step lines
    on a right axis (the worker count under a throughput, say)."""
    ml, mr, mt, mb = 78, (56 if right else 16), 30, 30
    pw, ph = width - ml - mr, height - mt - mb
    vals = [v for ln in lines for _, v in ln.points if v is not None]
    ymax = y_max if y_max is not None else _nice_max(max(vals) if vals else 0.0)
    rvals = [v for ln in right for _, v in ln.points if v is not None]
    rmax = right_max if right_max is not None else _nice_max(max(rvals) if rvals else 0.0)
    t_end = max(t_end, 1e-6)

    def x(t: float) -> float:
        return ml + pw * max(0.0, min(1.0, t / t_end))

    def y(v: float, top: float) -> float:
        return mt + ph * (1 - max(0.0, min(1.0, v / top)))

    out = [(f'<svg class="chart" id="{esc(chart_id)}" xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {width} {height}" width="100%" role="img" '
            f'aria-label="{esc(title)}">'),
           f'<title>{esc(title)}</title>',
           f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" class="plot"/>']
    for i in range(5):
        v = ymax * i / 4
        yy = y(v, ymax)
        out.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{yy:.1f}" y2="{yy:.1f}" class="grid"/>')
        out.append(f'<text x="{ml - 6}" y="{yy + 4:.1f}" class="axis" '
                   f'text-anchor="end">{esc(y_fmt(v))}</text>')
        if right and right_fmt:
            rv = rmax * i / 4
            out.append(f'<text x="{ml + pw + 6}" y="{yy + 4:.1f}" class="axis">'
                       f'{esc(right_fmt(rv))}</text>')
    for t in _time_ticks(t_end):
        xx = x(t)
        out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{mt}" y2="{mt + ph}" class="grid"/>')
        out.append(f'<text x="{xx:.1f}" y="{mt + ph + 18}" class="axis" '
                   f'text-anchor="middle">{esc(fmt.duration(t))}</text>')
    for ln in lines:
        out.append(_path(ln, x, lambda v: y(v, ymax), mt + ph))
    for ln in right:
        out.append(_path(ln, x, lambda v: y(v, rmax), mt + ph, dash=True))
    lx = ml
    for ln in (*lines, *right):
        out.append(f'<rect x="{lx}" y="8" width="12" height="12" fill="{esc(ln.color)}"/>')
        out.append(f'<text x="{lx + 16}" y="18" class="legend">{esc(ln.name)}</text>')
        lx += 26 + 7 * len(ln.name)
    if right_label:
        out.append(f'<text x="{width - 4}" y="18" class="axis" text-anchor="end">'
                   f'{esc(right_label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _path(ln: Line, x: Callable[[float], float], y: Callable[[float], float], base: float,
          dash: bool = False) -> str:
    pts: list[tuple[float, float]] = []
    prev: tuple[float, float] | None = None
    for t, v in ln.points:
        if v is None:
            continue
        px, py = x(t), y(v)
        if ln.step and prev is not None:
            pts.append((px, prev[1]))
        pts.append((px, py))
        prev = (px, py)
    if not pts:
        return ""
    d = "M" + " L".join(f"{a:.1f},{b:.1f}" for a, b in pts)
    parts = []
    if ln.fill:
        area = d + f" L{pts[-1][0]:.1f},{base:.1f} L{pts[0][0]:.1f},{base:.1f} Z"
        parts.append(f'<path d="{area}" fill="{esc(ln.color)}" fill-opacity="0.18" '
                     'stroke="none"/>')
    parts.append(f'<path d="{d}" fill="none" stroke="{esc(ln.color)}" '
                 f'stroke-width="{ln.width}" stroke-opacity="{ln.opacity}"'
                 + (' stroke-dasharray="5,3"' if dash else "") + "/>")
    return "".join(parts)


def svg_gantt(spans: Mapping[int, Sequence[Span]], t_end: float, width: int = 960,
              t_first: float = 0.0) -> str:
    """Items per worker over the run: each item a bar (hover for its name,
    phase and duration), grey where the worker was idle, the idle share at
    the end of the row; nothing before the first sample (t_first: the job
    ran before the monitor saw it)."""
    row_h, ml, mr, mt, mb = 24, 78, 70, 30, 30
    pids = list(spans)
    height = mt + mb + row_h * max(1, len(pids))
    pw = width - ml - mr
    t_end = max(t_end, 1e-6)
    idle = idle_share(spans, t_first, t_end)

    def x(t: float) -> float:
        return ml + pw * max(0.0, min(1.0, t / t_end))

    out = [(f'<svg class="chart gantt" id="gantt" xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {width} {height}" width="100%" role="img" '
            'aria-label="items per worker over time">'),
           "<title>items per worker over time</title>"]
    for t in _time_ticks(t_end):
        xx = x(t)
        out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{mt}" y2="{height - mb}" '
                   'class="grid"/>')
        out.append(f'<text x="{xx:.1f}" y="{height - mb + 18}" class="axis" '
                   f'text-anchor="middle">{esc(fmt.duration(t))}</text>')
    for r, pid in enumerate(pids):
        top = mt + r * row_h
        x_seen = x(t_first)
        out.append(f'<rect x="{x_seen:.1f}" y="{top + 3}" width="{ml + pw - x_seen:.1f}" '
                   f'height="{row_h - 6}" class="idle"/>')
        out.append(f'<text x="{ml - 6}" y="{top + row_h / 2 + 4}" class="axis" '
                   f'text-anchor="end">{esc(pid)}</text>')
        for n, sp in enumerate(spans[pid]):
            x0, x1 = x(sp.start), x(sp.end)
            w = max(1.5, x1 - x0)
            fill = phase_of(sp.phase).fill or "#888888"
            op = "1" if n % 2 == 0 else "0.75"
            dur = sp.end - sp.start
            out.append(f'<g class="span"><rect x="{x0:.1f}" y="{top + 3}" width="{w:.1f}" '
                       f'height="{row_h - 6}" fill="{fill}" fill-opacity="{op}" rx="2">'
                       f'<title>{esc(sp.item)} ({esc(sp.phase)}) {fmt.duration(sp.start)} → '
                       f'{fmt.duration(sp.end)}, {fmt.duration(dur)}</title></rect>')
            label = sp.item.split(".", 1)[1] if sp.item.startswith("public.") else sp.item
            if w > 7 * len(label) + 6:
                out.append(f'<text x="{x0 + 4:.1f}" y="{top + row_h / 2 + 4}" '
                           f'class="spanlabel">{esc(label)}</text>')
            out.append("</g>")
        out.append(f'<text x="{ml + pw + 6}" y="{top + row_h / 2 + 4}" class="axis">'
                   f'idle {100 * idle.get(pid, 0):.0f}%</text>')
    lx = ml
    fills = {p.label: p.fill for p in all_phases() if p.fill}
    for phase, fill in fills.items():
        out.append(f'<rect x="{lx}" y="8" width="12" height="12" fill="{fill}"/>')
        out.append(f'<text x="{lx + 16}" y="18" class="legend">{esc(phase)}</text>')
        lx += 30 + 7 * len(phase)
    out.append("</svg>")
    return "\n".join(out)


# ---- the page ------------------------------------------------------------------

CSS = """
:root { --fg: #1d232a; --muted: #5c6670; --bg: #ffffff; --panel: #f3f5f7; --grid: #d9dee3;
        --accent: #3a6ea5; --bad: #b3261e; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6e8ea; --muted: #9aa4ae; --bg: #15191d; --panel: #1f252b; --grid: #323a42;
          --accent: #7fb0e0; --bad: #ff7a70; } }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
       background: var(--bg); margin: 0 auto; max-width: 1040px; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.sub { color: var(--muted); margin-bottom: 16px; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--grid); }
th { color: var(--muted); font-weight: 600; }
td.num, th.num { text-align: right; }
table.facts td:first-child { color: var(--muted); width: 180px; }
code { font: 12px/1.4 ui-monospace, "SFMono-Regular", Menlo, monospace; word-break: break-all; }
.advice { background: var(--panel); border-left: 4px solid var(--accent); padding: 10px 14px; }
.advice b { font-size: 15px; } .muted { color: var(--muted); }
.advice table { width: auto; } #verdicts td:first-child { white-space: nowrap; }
.state-failed { color: var(--bad); font-weight: 600; } .state-finished { font-weight: 600; }
svg.chart { display: block; margin: 4px 0 8px; }
svg .plot { fill: var(--panel); } svg .grid { stroke: var(--grid); stroke-width: 1; }
svg .axis { fill: var(--muted); font: 11px system-ui, sans-serif; }
svg .legend { fill: var(--fg); font: 12px system-ui, sans-serif; }
svg .idle { fill: var(--panel); }
svg .spanlabel { fill: #ffffff; font: 11px system-ui, sans-serif; pointer-events: none; }
details { margin-top: 8px; } footer { margin-top: 32px; color: var(--muted); font-size: 12px; }
"""


def build_html(samples: Sequence[Sample], summary: Doc | None, header: Doc | None) -> str:
    """The whole report as one HTML string (write it to a file)."""
    es = end_summary(summary, samples, header=header)
    facts = es.facts
    tl = build(samples)
    spans = tl.spans()
    advice = advise_samples(samples)
    t_end = tl.t_end or facts.wall_s
    title = f"pgparmon report: {facts.kind} of {facts.database}"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # no network, ever: a CSP that forbids loading anything external
        ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
         'style-src \'unsafe-inline\'; img-src data:">'),
        f"<title>{esc(title)}</title>", f"<style>{CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        (f'<div class="sub">{esc(facts.started or "")} · {len(samples)} samples · '
         f'<span class="state-{esc(facts.state)}">{esc(facts.state)}</span>'
         f'{" — " + esc(facts.reason) if facts.reason else ""}</div>'),
        _advice_html(advice, facts),
        "<h2>The job</h2>", _facts_html(facts, header),
        "<h2>Timeline: items per worker</h2>",
        ('<p class="muted">Each bar is one item (table data, index or constraint) on the '
         "worker that ran it; grey is idle time, blank the time before the monitor's first "
         "sample. A long bar alone at the end is the long tail: more workers cannot "
         "shorten it.</p>"),
        (svg_gantt(spans, t_end, t_first=tl.t_first or 0.0) if spans
         else '<p class="muted">no worker seen</p>'),
        "<h2>Throughput and active workers</h2>", _throughput_svg(tl, facts),
        "<h2>Host CPU</h2>", _cpu_svg(samples, tl),
        "<h2>Disks</h2>", _disk_svg(tl),
        "<h2>What limited the run</h2>", _verdicts_html(samples),
        "<h2>Items</h2>", _items_html(es.items, es.interval),
        _notes_html(samples, summary),
        (f"<footer>pgparmon report · {esc(facts.kind)} · generated from "
         f"{len(samples)} samples of pgparmon.sample/1</footer>"),
        "</body></html>",
    ]
    return "\n".join(parts)


def _advice_html(a: LiveAdvice, facts: RunFacts) -> str:
    rows = "".join(f"<tr><td class=\"num\">{k}</td><td class=\"num\">{esc(fmt.rate(v))}"
                   f"</td><td class=\"num\">{a.steady_samples.get(k, 0)}</td></tr>"
                   for k, v in sorted(a.by_streams.items()))
    table = ("<table><tr><th class=\"num\">streaming workers</th><th class=\"num\">throughput"
             "</th><th class=\"num\">steady intervals</th></tr>" + rows + "</table>"
             if rows else "")
    nxt = (f"<p>Next time: <b>-j {a.next_jobs}</b> (this run: -j {esc(facts.jobs)})</p>"
           if a.next_jobs else "<p>Next time: no -j can be recommended from this run "
           "alone.</p>")
    return (f'<div class="advice" id="advice"><b>{esc(a.headline)}</b>'
            f'<p class="muted">{esc(a.detail)}</p>{nxt}{table}</div>')


def _facts_html(f: RunFacts, header: Doc | None) -> str:
    rows = [("kind", f.kind), ("database", f.database), ("-j", f.jobs), ("format", f.format),
            ("target", f.target), ("server", f.server_version), ("started", f.started),
            ("ended", f.ended), ("wall time", fmt.duration(f.wall_s)),
            ("state", f"{f.state}" + (f" — {f.reason}" if f.reason else "")),
            ("exit code", f.exit_code), ("items", f"{f.items_done} / {f.items_total} done"),
            ("streamed" if f.scope == "cluster" else "COPY data",
             f"{fmt.size(f.copy_bytes)}"
             + ("" if f.scope == "cluster" else f", {fmt.count_exact(f.copy_rows)} rows")
             + (f", {fmt.rate(f.copy_bytes / f.wall_s)} on average"
                if f.wall_s > 0 and f.copy_bytes else ""))]
    body = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v if v is not None else '-')}</td></tr>"
                   for k, v in rows)
    body += f"<tr><td>command</td><td><code>{esc(f.command)}</code></td></tr>"
    out = f'<table class="facts" id="facts">{body}</table>'
    settings = ((header or {}).get("facts") or {}).get("settings") or {}
    if settings:
        srows = "".join(f"<tr><td>{esc(k)}</td><td><code>{esc(v)}</code></td></tr>"
                        for k, v in sorted(settings.items()))
        out += (f"<details><summary>server settings ({len(settings)})</summary>"
                f'<table class="facts">{srows}</table></details>')
    return out


def _throughput_svg(tl: TimelineBuilder, facts: RunFacts) -> str:
    s = tl.series
    if not s:
        return '<p class="muted">no samples</p>'
    bps = Line("bytes/s", PALETTE[0], [(p.t, p.bytes_per_s) for p in s], fill=True)
    act = Line("active workers", PALETTE[1], [(p.t, float(p.active_workers)) for p in s],
               step=True)
    cps = Line("streaming workers", PALETTE[2], [(p.t, float(p.copy_streams)) for p in s],
               step=True, width=1.5)
    top = float(max([facts.jobs or 0] + [p.active_workers for p in s]) or 1)
    return svg_chart("throughput and active workers", tl.t_end, [bps],
                     y_fmt=fmt.rate, right=[act, cps], right_max=top,
                     right_fmt=lambda v: f"{v:.0f}" if v == int(v) else f"{v:.1f}",
                     right_label="workers", chart_id="throughput")


def _cpu_svg(samples: Sequence[Sample], tl: TimelineBuilder) -> str:
    s = tl.series
    if not any(p.cpu_percent is not None for p in s):
        return '<p class="muted">no host CPU readings (the server is on another host?)</p>'
    lines = [Line("CPU busy %", PALETTE[0], [(p.t, p.cpu_percent) for p in s], fill=True),
             Line("iowait %", PALETTE[4], [(p.t, p.iowait_percent) for p in s])]
    ncpu = max((len(d.host.per_cpu) for d in samples), default=0)
    if 0 < ncpu <= 16:
        for c in range(ncpu):
            pts = []
            for d in samples:
                per = d.host.per_cpu
                v: Any = per[c] if c < len(per) else None
                if isinstance(v, Mapping):  # an early recording's {"busy": ...}
                    v = v.get("busy")
                pts.append((float(d.elapsed_s or 0), None if v is None else float(v)))
            lines.append(Line(f"core {c}", PALETTE[5], pts, width=1, opacity=0.45))
    return svg_chart("host CPU", tl.t_end, lines, y_fmt=lambda v: f"{v:.0f}%", y_max=100.0,
                     chart_id="cpu")


def _disk_svg(tl: TimelineBuilder) -> str:
    s = tl.series
    names = sorted({n for p in s for n in p.disks})
    if not names:
        return '<p class="muted">no disk readings</p>'
    lines, util = [], []
    for i, n in enumerate(names):
        col = PALETTE[i % len(PALETTE)]
        lines.append(Line(f"{n} read", col, _disk_pts(s, n, "read_bytes_per_s"), fill=True))
        lines.append(Line(f"{n} write", PALETTE[(i + 1) % len(PALETTE)],
                          _disk_pts(s, n, "write_bytes_per_s")))
        util.append(Line(f"{n} util %", PALETTE[(i + 3) % len(PALETTE)],
                         _disk_pts(s, n, "util_percent"), width=1.5))
    charts = svg_chart("disk throughput", tl.t_end, lines, y_fmt=fmt.rate,
                       right=util, right_max=100.0, right_fmt=lambda v: f"{v:.0f}%",
                       right_label="util", chart_id="disk")
    lat = [Line(f"{n} await ms", PALETTE[i % len(PALETTE)], _disk_pts(s, n, "await_ms"))
           for i, n in enumerate(names)]
    qd = [Line(f"{n} queue", PALETTE[(i + 4) % len(PALETTE)], _disk_pts(s, n, "queue_depth"),
               step=True) for i, n in enumerate(names)]
    charts += svg_chart("disk latency and queue depth", tl.t_end, lat,
                        y_fmt=lambda v: f"{v:.1f} ms", right=qd,
                        right_fmt=lambda v: f"{v:.1f}", right_label="queue",
                        height=200, chart_id="disk-latency")
    return charts


def _disk_pts(s: Sequence[SeriesPoint], name: str, key: str) -> list[tuple[float, float | None]]:
    out: list[tuple[float, float | None]] = []
    for p in s:
        d = p.disks.get(name)
        v = getattr(d, key) if d is not None else None
        out.append((p.t, None if v is None else float(v)))
    return out


def _verdicts_html(samples: Sequence[Sample]) -> str:
    shares = verdict_shares(samples)
    total = sum(s for _, s, _ in shares) or 1.0
    rows = "".join(f"<tr><td>{esc(k)}</td><td class=\"num\">{fmt.duration(s)}</td>"
                   f"<td class=\"num\">{100 * s / total:.0f}%</td><td>{esc(d)}</td></tr>"
                   for k, s, d in shares)
    return ('<table id="verdicts"><tr><th>limit</th><th class="num">time</th>'
            f'<th class="num">share</th><th>last said</th></tr>{rows}</table>')


def _items_html(rows: Sequence[ItemRow], interval: float | None) -> str:
    """Every item, ungrouped: a file has room for all of them. An item done
    within a sample interval has no measured duration or rate, as on a
    terminal ("< 1.0 s")."""
    body = []
    for r in rows:
        c = row_cells(r, interval, exact_rows=True)
        rps = (r.rows / r.duration_s if r.rows and r.duration_s
               and not unmeasured(r, interval) else None)
        cells = (c["start"], c["duration"], c["bytes"], c["rows"], c["bytes/s"], fmt.count(rps))
        body.append(
            f"<tr><td>{esc(r.label())}</td><td>{esc(r.kind)}</td><td>{esc(r.worker or '-')}</td>"
            f"<td>{esc(r.state)}</td>"
            + "".join(f'<td class="num">{esc(c)}</td>' for c in cells) + "</tr>")
    return ('<table id="items"><tr><th>item</th><th>kind</th><th>worker</th><th>state</th>'
            '<th class="num">start</th><th class="num">duration</th><th class="num">bytes</th>'
            '<th class="num">rows</th><th class="num">bytes/s</th><th class="num">rows/s</th>'
            "</tr>" + "".join(body) + "</table>")


def run_notes(samples: Sequence[Sample], summary: Doc | None) -> list[str]:
    """What the monitor said during the run (its notes, the server's errors),
    each once, in the order said."""
    notes: list[str] = []
    for d in samples:
        for n in d.notes:
            if n not in notes:
                notes.append(n)
        err = d.server.error
        if err and f"server: {err}" not in notes:
            notes.append(f"server: {err}")
    for n in (summary or {}).get("notes") or ():
        if n not in notes:
            notes.append(n)
    return notes


def _notes_html(samples: Sequence[Sample], summary: Doc | None) -> str:
    notes = run_notes(samples, summary)
    if not notes:
        return ""
    return "<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"


# ---- terminal ------------------------------------------------------------------


def render_summary_text(samples: Sequence[Sample], summary: Doc | None) -> RenderableType:
    """`pgparmon report FILE` without --html: the same facts and advice as
    the HTML, as rich text (no charts); the items as `pgparmon run` prints
    them at the end, whole names, short items grouped (views/summary.py)."""
    es = end_summary(summary, samples)
    tl = build(samples)
    advice = advise_samples(samples)
    head = summary_head(es).append(f", {len(samples)} samples")
    adv = Text()
    adv.append("advice: ", style="bold")
    adv.append(advice.headline, style="bold magenta" if advice.next_jobs else "")
    adv.append(f"\n  {advice.detail}", style="dim")
    lim = Text("limits: " + limits(samples))
    idle = idle_share(tl.spans(), tl.t_first or 0.0, tl.t_end)
    idle_t = Text("idle share per worker: " + ", ".join(f"{pid} {100 * v:.0f}%"
                                                         for pid, v in idle.items()))
    notes = [Text(f"! {n}", style="magenta") for n in run_notes(samples, summary)]
    return Group(head, adv, lim, idle_t, ItemsTable(es), *notes)
