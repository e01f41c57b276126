"""Where the TUI's drawing time goes, widget by widget (issue "cost of
watching"): a recording replayed fast through the TUI under Textual's
headless driver, each widget's `render_lines` timed, and every frame (a
compositor refresh) listed with the widgets it re-rendered.

It complements `bench/tui_cost.py` (the process's CPU in a real terminal,
the headline figure): this one says which widget to work on. Headless
means no terminal output is written, so its totals are below the real
terminal's; the shares between widgets are what it is for.

    .venv/bin/python bench/tui_widgets.py                    # records a dump first (~1 min)
    .venv/bin/python bench/tui_widgets.py --recording FILE --size 160x50

Prints a table (milliseconds per frame and per render call, by widget),
the frames per sample, and the causes of layout passes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def measure(recording: Path, width: int, height: int, speed: float) -> dict[str, Any]:
    from textual.screen import Screen
    from textual.widget import Widget

    from pgparmon.playback import ReplayFeed
    from pgparmon.record import read_recording
    from pgparmon.tui.app import PgParMonApp

    spent: dict[str, float] = collections.defaultdict(float)
    calls: collections.Counter[str] = collections.Counter()
    layouts: collections.Counter[str] = collections.Counter()
    frames: list[list[str]] = []

    orig_lines, orig_refresh = Widget.render_lines, Widget.refresh
    orig_frame = Screen._compositor_refresh

    def render_lines(self: Widget, crop: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return orig_lines(self, crop)
        finally:
            spent[type(self).__name__] += time.perf_counter() - t0
            calls[type(self).__name__] += 1

    def refresh(self: Widget, *regions: Any, **kw: Any) -> Any:
        if kw.get("layout"):
            st = traceback.extract_stack(limit=4)[:-1]
            layouts[f"{type(self).__name__} <- {st[-1].name}"] += 1
        return orig_refresh(self, *regions, **kw)

    def frame(self: Screen) -> None:
        frames.append(sorted(type(w).__name__ for w in self._dirty_widgets))
        orig_frame(self)

    Widget.render_lines = render_lines  # type: ignore[method-assign]
    Widget.refresh = refresh  # type: ignore[method-assign]
    Screen._compositor_refresh = frame  # type: ignore[method-assign]
    app = PgParMonApp(ReplayFeed(read_recording(str(recording)), speed=speed), 0.0,
                      "bench", autostart=True)

    async def run() -> None:
        async with app.run_test(size=(width, height)) as pilot:
            for _ in range(600):
                await pilot.pause(0.05)
                if app.ended:
                    break
            await pilot.pause(0.3)

    try:
        asyncio.run(run())
    finally:
        Widget.render_lines, Widget.refresh = orig_lines, orig_refresh  # type: ignore
        Screen._compositor_refresh = orig_frame  # type: ignore[method-assign]
    return {"samples": app.ticks, "frames": len(frames), "spent_s": dict(spent),
            "calls": dict(calls), "layouts": dict(layouts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recording", type=Path, default=None,
                    help="a pgparmon recording (default: record a pg_dump -j 2 of the demo "
                         "database, as bench/tui_cost.py does)")
    ap.add_argument("--size", default="160x50")
    ap.add_argument("--speed", type=float, default=20.0, help="replay speed (default 20)")
    ap.add_argument("--repeats", type=int, default=5, help="replays (default 5; medians)")
    a = ap.parse_args()
    width, height = (int(x) for x in a.size.split("x"))
    rec = a.recording
    if rec is None:
        sys.path.insert(0, str(REPO / "bench"))
        from tui_cost import record
        rec = Path(tempfile.mkdtemp(prefix="pgparmon-tui-widgets-")) / "dump.rec"
        record(2.0, 2, rec)
    runs = [measure(rec, width, height, a.speed) for _ in range(max(1, a.repeats))]
    r = runs[-1]
    print(f"{r['samples']} samples, frames {[x['frames'] for x in runs]} "
          f"({r['frames'] / max(1, r['samples']):.2f} a sample) at {a.size}, "
          f"{len(runs)} replays: medians")
    print(f"{'widget':22} {'ms/frame':>9} {'ms/call':>8}")
    names = sorted({k for x in runs for k in x["spent_s"]})

    def med(xs: list[float]) -> float:
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    rows = []
    for name in names:
        per_frame = med([1000 * x["spent_s"].get(name, 0.0) / max(1, x["frames"]) for x in runs])
        per_call = med([1000 * x["spent_s"][name] / x["calls"][name]
                        for x in runs if x["calls"].get(name)])
        rows.append((per_frame, name, per_call))
    for per_frame, name, per_call in sorted(rows, reverse=True):
        print(f"{name:22} {per_frame:9.2f} {per_call:8.2f}")
    total = med([1000 * sum(x["spent_s"].values()) / max(1, x["frames"]) for x in runs])
    print(f"{'all widgets':22} {total:9.2f}")
    print("layout passes asked for (last replay), by widget <- caller:")
    for k, v in sorted(r["layouts"].items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {v:4d}  {k}")


if __name__ == "__main__":
    main()
