"""How the full-screen TUI keeps up with many workers: the synthetic COPY
load of bench/soak.py with 4, 64 and 256 sessions, each sample analysed by
the real Monitor and drawn by the TUI (Textual's headless driver, 160x50,
every sample drawn); CPU per drawn sample (the analysis's share apart) and
the screen updates a second that leaves possible. Target (issue "cost of
watching"): 256 workers at >= 4 updates a second.

    .venv/bin/python bench/tui_scale.py [--samples 60]        # ~1 min
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from common import machine, write_json
from soak import Follower, Monitor, SynthSource


async def one(workers: int, samples: int) -> dict[str, float]:
    from pgparmon.tui.app import PgParMonApp

    src = SynthSource(workers, table_s=1e9)
    mon = Monitor(src)
    mon.discover()
    fol = Follower(mon, interval=1.0, as_json=True, duration=None)
    app = PgParMonApp(fol, 1.0, "scale", autostart=False)
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(20):  # warm: rates, the plan, the widgets' first layout
            app.ingest(fol.tick())
            await pilot.pause()
        c0, t0, analysis = time.process_time(), time.perf_counter(), 0.0
        for _ in range(samples):
            a = time.process_time()
            doc = fol.tick()
            analysis += time.process_time() - a
            app.ingest(doc)
            await pilot.pause()
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    return {"workers": workers, "cpu_ms_per_sample": round(1000 * cpu / samples, 1),
            "analysis_ms_per_sample": round(1000 * analysis / samples, 1),
            "updates_per_s": round(samples / wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" /
                                         "bench" / "tui_scale.json"))
    a = ap.parse_args()
    rows = []
    for w in (4, 64, 256):
        r = asyncio.run(one(w, a.samples))
        rows.append(r)
        print(f"{w} workers: {r['cpu_ms_per_sample']} ms CPU per drawn sample "
              f"({r['analysis_ms_per_sample']} ms of it the analysis), "
              f"{r['updates_per_s']} updates/s possible", flush=True)
    write_json(Path(a.out), {"benchmark": "tui_scale", "machine": machine(),
                             "samples": a.samples, "rows": rows})


if __name__ == "__main__":
    main()
