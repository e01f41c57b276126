"""Does the monitor's memory stay flat over a long run? A synthetic COPY
load that never ends (W sessions, each copying table after table, a new
table every 10 minutes, at a steady rate) is fed through the real Monitor
and the headless follower (what `attach --json` runs) on a simulated clock:
24 hours at 1 sample a second in a few minutes. The process's RSS is read
at every simulated hour; with --tui the same samples are also ingested by
the full-screen TUI (Textual's headless driver), drawn every 300 samples.

    .venv/bin/python bench/soak.py [--hours 24] [--workers 4] [--tui]

Raw results: docs/bench/soak.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from pathlib import Path
from typing import Any

import psutil
from common import machine, write_json

from pgparmon.follow import Follower
from pgparmon.jobs.base import Job
from pgparmon.jobs.copy import CopyLoad
from pgparmon.monitor import Monitor
from pgparmon.readers.db import ServerFacts
from pgparmon.snapshot import Backend, CopyProgress, DbSample, FileSize, Snapshot

T0 = 1_790_000_000.0  # the simulated run's wall clock start


class SynthSource:
    """A never-ending COPY load, on a simulated clock (1 s a sample)."""

    local = False
    target_dir = None
    devices: set[str] = set()

    def __init__(self, workers: int, table_s: float = 600.0, rate: float = 20e6) -> None:
        self.workers = workers
        self.table_s = table_s
        self.rate = rate
        self.t = 0.0
        self.facts = ServerFacts(
            version_num=150000, version="15.0 (synthetic)", database="load", user="bench",
            backend_pid=1, backend_start=None, postmaster_start=None,
            settings={"block_size": "8192"}, is_superuser=True, read_all_stats=True,
            has_copy_progress=True, has_index_progress=True)
        self.job: Job | None = CopyLoad().from_sessions(self._backends())

    def _backends(self) -> list[Backend]:
        k = int(self.t // self.table_s)
        return [Backend(pid=1000 + w, datname="load", usename="bench", application_name="loader",
                        client_addr="10.0.0.2", client_port=40000 + w,
                        backend_start=T0 - 5, xact_start=T0 + k * self.table_s,
                        query_start=T0 + k * self.table_s, state="active",
                        wait_event_type=None, wait_event=None, backend_type="client backend",
                        backend_xmin=None, leader_pid=None,
                        query=f"COPY public.t{k}_{w} FROM STDIN (FORMAT csv)")
                for w in range(self.workers)]

    def discover(self) -> Job:
        assert self.job is not None
        return self.job

    def snapshot(self) -> Snapshot:
        self.t += 1.0
        k = int(self.t // self.table_s)
        into = self.t - k * self.table_s
        backends = tuple(self._backends())
        copies = tuple(CopyProgress(b.pid, "load", 16384 + k, f"public.t{k}_{i}", "COPY FROM",
                                    "PIPE", int(into * self.rate), 0, int(into * self.rate / 100),
                                    0) for i, b in enumerate(backends))
        db = DbSample(server_ts=T0 + self.t, backends=backends, copies=copies, indexes=(),
                      latency_ms=1.0, checkpoints=(int(self.t // 300), int(self.t // 300)))
        return Snapshot(ts=self.t, wall=T0 + self.t, db=db, host=None,
                        files=(FileSize("/nonexistent", 0),)[:0])

    def plan_inputs(self, req: Any = None) -> Any:
        from pgparmon.jobs.base import PlanInputs

        return PlanInputs()

    def catalog_done(self, database: str | None = None) -> dict[str, Any]:
        return {}

    def final_files(self) -> None:
        return None

    def may_ask_again(self, kind: str) -> bool:
        return True

    def pause(self, seconds: float) -> None:
        pass

    def details(self, pid: int, client_pid: int | None) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


def rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2 ** 20


async def soak(hours: float, workers: int, tui: bool,
               table_s: float = 600.0) -> list[dict[str, float]]:
    src = SynthSource(workers, table_s=table_s)
    mon = Monitor(src)
    mon.discover()
    fol = Follower(mon, interval=1.0, as_json=True, duration=None)
    app: Any = None
    pilot_cm: Any = None
    pilot: Any = None
    if tui:
        from pgparmon.tui.app import PgParMonApp

        app = PgParMonApp(fol, 1.0, "soak", autostart=False)
        pilot_cm = app.run_test(size=(160, 50))
        pilot = await pilot_cm.__aenter__()
    out = [{"hour": 0.0, "rss_mb": round(rss_mb(), 1), "cpu_s": 0.0}]
    c0 = time.process_time()
    per_hour = 3600
    try:
        for h in range(1, int(hours) + 1):
            for i in range(per_hour):
                doc = fol.tick()
                if app is not None:
                    app.ingest(doc)
                    if i % 300 == 0:
                        await pilot.pause()
            out.append({"hour": float(h), "rss_mb": round(rss_mb(), 1),
                        "cpu_s": round(time.process_time() - c0, 1),
                        "items": float(len(mon.tracker.items) if mon.tracker else 0)})
            print(f"hour {h}: RSS {out[-1]['rss_mb']} MB, CPU {out[-1]['cpu_s']} s, "
                  f"items {int(out[-1]['items'])}", flush=True)
    finally:
        if pilot_cm is not None:
            await pilot_cm.__aexit__(None, None, None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=float, default=24)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--tui", action="store_true")
    ap.add_argument("--table-s", type=float, default=600.0,
                    help="seconds per table (each a new item of the job)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" /
                                         "bench" / "soak.json"))
    a = ap.parse_args()
    points = asyncio.run(soak(a.hours, a.workers, a.tui, a.table_s))
    first, last = points[1], points[-1]
    growth = (last["rss_mb"] - first["rss_mb"]) / max(1.0, last["hour"] - first["hour"])
    write_json(Path(a.out), {"benchmark": "soak", "machine": machine(), "hours": a.hours,
                             "workers": a.workers, "tui": a.tui, "table_s": a.table_s,
                             "points": points,
                             "rss_growth_mb_per_hour_after_hour_1": round(growth, 3)})
    print(f"RSS {first['rss_mb']} MB at hour 1, {last['rss_mb']} MB at hour {last['hour']:.0f}: "
          f"{growth:+.3f} MB per hour")


if __name__ == "__main__":
    main()
