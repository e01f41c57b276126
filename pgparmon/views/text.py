"""Headless views of the sample stream: a compact rich screen for a terminal,
one plain line per sample for a pipe, and the end-of-run summary."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text


def human_bytes(n: float | None, per_s: bool = False) -> str:
    if n is None:
        return "-"
    units = ["B", "kB", "MB", "GB", "TB"]
    x = float(n)
    i = 0
    while abs(x) >= 1000 and i < len(units) - 1:
        x /= 1000
        i += 1
    s = f"{x:.0f} {units[i]}" if i == 0 else f"{x:.1f} {units[i]}"
    return s + ("/s" if per_s else "")


def human_s(s: float | None) -> str:
    if s is None:
        return "?"
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f}s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def _bar(frac: float | None, width: int = 20) -> str:
    if frac is None:
        return "·" * width
    n = int(round(max(0.0, min(1.0, frac)) * width))
    return "█" * n + "░" * (width - n)


def headline(doc: dict[str, Any]) -> str:
    j = doc["job"]
    prog = f"{j['progress']:.1%}" if j.get("progress") is not None else "n/a"
    eta = human_s(j.get("eta_s")) if j.get("eta_s") is not None else (j.get("eta_reason") or "?")
    jobs = f" -j {j['jobs']}" if j.get("jobs") else ""
    return (f"{j['kind']}{jobs} {j.get('database') or ''} [{j['state']}] "
            f"elapsed {human_s(doc.get('elapsed_s'))} progress {prog} ETA {eta} "
            f"{human_bytes(j.get('bytes_per_s'), True)} "
            f"items {j.get('items_done')}/{j.get('items_total')}")


def plain_line(doc: dict[str, Any]) -> str:
    b = doc["bottleneck"]
    act = sum(1 for w in doc["workers"] if w["phase"] != "idle")
    return f"{doc['ts']} {headline(doc)} workers {act} | {b['kind']}: {b['detail']}"


def screen(doc: dict[str, Any]) -> Group:
    j = doc["job"]
    head = Text()
    head.append(headline(doc), style="bold")
    b = doc["bottleneck"]
    verdict = Text(f"limit: {b['kind']} — {b['detail']}",
                   style="yellow" if b["kind"] not in ("nothing", "starting") else "green")
    bar = Text(f"{_bar(j.get('progress'), 40)} {j.get('progress') or 0:.1%}")
    t = Table(box=None, expand=False, pad_edge=False, header_style="bold")
    for col in ("pid", "client", "phase", "relation / item", "rate", "rows/s", "done", "wait"):
        t.add_column(col)
    for w in doc["workers"]:
        style = "red" if w["phase"] == "lock-wait" else None
        blk = f" ← {','.join(map(str, w['blocked_by']))}" if w.get("blocked_by") else ""
        t.add_row(str(w["pid"]), str(w.get("client_pid") or "-"), w["phase"],
                  (w.get("item") or w.get("relation") or "")[:40],
                  human_bytes(w.get("bytes_per_s"), True),
                  f"{w['tuples_per_s']:.0f}" if w.get("tuples_per_s") else "-",
                  _bar(w.get("progress"), 10), (w.get("wait_event") or "CPU") + blk, style=style)
    h = doc["host"]
    host = Text(f"host CPU {h.get('cpu_percent') or 0:.0f}% (iowait "
                f"{h.get('iowait_percent') or 0:.0f}%) per core "
                + " ".join(f"{c or 0:.0f}" for c in h.get("per_cpu") or []))
    disks = [Text(f"  {n}: read {human_bytes(d['read_bytes_per_s'], True)} write "
                  f"{human_bytes(d['write_bytes_per_s'], True)} util {d['util_percent'] or 0:.0f}%"
                  f" await {d['await_ms'] if d['await_ms'] is not None else '-'} ms")
             for n, d in (h.get("disks") or {}).items()]
    notes = [Text(f"! {n}", style="magenta") for n in doc.get("notes") or []][-4:]
    err = doc.get("server", {}).get("error")
    extra = [Text(f"server: {err}", style="red")] if err else []
    return Group(head, bar, verdict, t, host, *disks, *extra, *notes)


def summary_table(summary: dict[str, Any]) -> Group:
    head = Text(f"{summary['kind']} on {summary.get('database')}: {summary['state']} "
                f"({summary.get('reason') or ''}) in {human_s(summary['wall_s'])}",
                style={"finished": "bold green", "ended": "bold yellow"}.get(summary["state"],
                                                                            "bold red"))
    t = Table(box=None, header_style="bold")
    for col in ("item", "kind", "state", "duration", "rows", "bytes"):
        t.add_column(col)
    items = sorted(summary["items"], key=lambda i: -(i.get("duration_s") or 0))
    for it in items[:25]:
        t.add_row(it["name"][:48], it["kind"], it["state"], human_s(it.get("duration_s")),
                  str(it.get("tuples") or "-"), human_bytes(it.get("bytes")))
    more = [Text(f"… and {len(items) - 25} more items")] if len(items) > 25 else []
    return Group(head, t, *more)
