"""A restore of a 100,000-entry archive: does the monitor keep up? A
synthetic `pg_restore -j W` of a custom-format archive whose TOC holds N
entries (60% TABLE DATA of small tables, 40% their indexes) on a
simulated clock: each sample every worker is on a new table (k tables a
worker a sample go by, most between two samples, as tiny tables do), then
on a new index. Each sample is analysed by the real Monitor (plan from the
TOC, tracker, ETA, the published document) and drawn by the full-screen TUI
(Textual's headless driver, 160x50, every sample drawn). Then the job ends
(its sessions gone, the catalog shows every table and index: the end settles
N items) and the end summary is built and drawn.

Printed: CPU per drawn sample (the analysis's share apart) and the updates a
second that leaves possible, early and late in the run; the end's CPU; RSS
after the plan and at the end. Target (issue "cost of watching"): >= 4
screen updates a second with a 100,000-item TOC.

    .venv/bin/python bench/tui_toc.py [--entries 100000] [--workers 4]   # ~1 min
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
from soak import T0, SynthSource

from pgparmon.follow import Follower
from pgparmon.jobs.base import Job, PlanInputs
from pgparmon.monitor import Monitor
from pgparmon.readers.db import ServerFacts
from pgparmon.snapshot import Backend, CopyProgress, DbSample, Snapshot


class SynthRestore(SynthSource):
    """pg_restore -j W of an archive of `entries` TOC entries, simulated
    (the source's other answers are soak.SynthSource's)."""

    def __init__(self, entries: int, workers: int, skip: int) -> None:
        self.n_data = entries * 6 // 10
        self.n_index = entries - self.n_data
        self.workers, self.skip = workers, skip
        self.t = 0.0
        self.over = False
        self.facts = ServerFacts(
            version_num=150000, version="15.0 (synthetic)", database="restore", user="bench",
            backend_pid=1, backend_start=None, postmaster_start=None,
            settings={"block_size": "8192"}, is_superuser=True, read_all_stats=True,
            has_copy_progress=True, has_index_progress=True)
        self.job: Job | None = Job(kind="pg_restore", database="restore", jobs=workers,
                                   format="custom", usename="bench",
                                   pid_hint=frozenset(1000 + w for w in range(workers)))

    def samples_to_end(self) -> int:
        per = self.workers * self.skip
        return (self.n_data + per - 1) // per + (self.n_index + per - 1) // per

    def _backends(self) -> list[Backend]:
        if self.over:
            return []
        step = int(self.t)
        per = self.workers * self.skip
        data_steps = (self.n_data + per - 1) // per
        out = []
        for w in range(self.workers):
            if step < data_steps:
                i = min(self.n_data - 1, (step * self.workers + w) * self.skip)
                q = f"COPY public.t{i} (id, note) FROM stdin;\n"
            else:
                j = min(self.n_index - 1, ((step - data_steps) * self.workers + w) * self.skip)
                q = f"CREATE INDEX t{j}_note_idx ON public.t{j} USING btree (note);"
            out.append(Backend(pid=1000 + w, datname="restore", usename="bench",
                               application_name="pg_restore", client_addr=None,
                               client_port=None, backend_start=T0 - 5,
                               xact_start=T0 + self.t, query_start=T0 + self.t, state="active",
                               wait_event_type=None, wait_event=None,
                               backend_type="client backend", backend_xmin=None,
                               leader_pid=None, query=q))
        return out

    def snapshot(self) -> Snapshot:
        self.t += 1.0
        backends = tuple(self._backends())
        copies = tuple(CopyProgress(b.pid, "restore", 16384, None, "COPY FROM", "PIPE",
                                    20_000, 0, 200, 0)
                       for b in backends if b.query and b.query.startswith("COPY"))
        db = DbSample(server_ts=T0 + self.t, backends=backends, copies=copies, indexes=(),
                      latency_ms=1.0, checkpoints=(int(self.t // 300), int(self.t // 300)))
        return Snapshot(ts=self.t, wall=T0 + self.t, db=db, host=None, files=())

    def plan_inputs(self, req: Any = None) -> PlanInputs:
        toc: list[dict[str, Any]] = []
        files: dict[str, Any] = {}
        targets: dict[str, Any] = {}
        for i in range(self.n_data):
            toc.append({"dump_id": 10 + i, "catalog_oid": 0, "oid": 0, "desc": "TABLE DATA",
                        "schema": "public", "tag": f"t{i}", "owner": "bench"})
            files[str(10 + i)] = [None, 8192.0 * (1 + i % 7)]
        for j in range(self.n_index):
            did = 10 + self.n_data + j
            toc.append({"dump_id": did, "catalog_oid": 0, "oid": 0, "desc": "INDEX",
                        "schema": "public", "tag": f"t{j}_note_idx", "owner": "bench"})
            targets[str(did)] = {"desc": "INDEX", "schema": "public", "name": f"t{j}_note_idx",
                                 "table": f"public.t{j % self.n_data}", "references": None,
                                 "kind": "index", "dump_id": did}
        return PlanInputs(toc=toc, archive_files=files, targets=targets)

    def catalog_done(self, database: str | None = None) -> dict[str, Any]:
        if not self.over:
            return {}
        return {"loaded": [f"public.t{i}" for i in range(self.n_data)],
                "relations": [f"public.t{j}_note_idx" for j in range(self.n_index)]}

    def may_ask_again(self, kind: str) -> bool:
        return False


def rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2 ** 20


async def run(entries: int, workers: int, skip: int, samples: int,
              settle: bool = True) -> dict[str, Any]:
    from pgparmon.tui.app import PgParMonApp

    src = SynthRestore(entries, workers, skip)
    mon = Monitor(src)
    mon.settle_heap = settle  # as attach sets it (its heap frozen after the plan)
    mon.discover()
    fol = Follower(mon, interval=1.0, as_json=True, duration=None)
    app = PgParMonApp(fol, 1.0, "toc", autostart=False)
    res: dict[str, Any] = {"entries": entries, "workers": workers, "tables_per_sample":
                           workers * skip, "rss_mb_start": round(rss_mb(), 1)}
    total = src.samples_to_end()

    async with app.run_test(size=(160, 50)) as pilot:
        c0 = time.process_time()
        app.ingest(fol.tick())  # the plan: N items
        await pilot.pause()
        res["first_sample_cpu_s"] = round(time.process_time() - c0, 3)
        res["rss_mb_after_plan"] = round(rss_mb(), 1)

        async def window(name: str) -> None:
            c0, t0, analysis = time.process_time(), time.perf_counter(), 0.0
            for _ in range(samples):
                a = time.process_time()
                doc = fol.tick()
                analysis += time.process_time() - a
                app.ingest(doc)
                await pilot.pause()
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
            res[name] = {"cpu_ms_per_sample": round(1000 * cpu / samples, 1),
                         "analysis_ms_per_sample": round(1000 * analysis / samples, 1),
                         "updates_per_s": round(samples / wall, 1),
                         "done_fraction": (doc.get("progress") or {}).get("fraction")}
            print(f"{name}: {res[name]['cpu_ms_per_sample']} ms CPU per drawn sample "
                  f"({res[name]['analysis_ms_per_sample']} ms of it the analysis), "
                  f"{res[name]['updates_per_s']} updates/s possible", flush=True)

        for _ in range(10):  # warm: rates, the widgets' first layout
            app.ingest(fol.tick())
            await pilot.pause()
        await window("early")
        while src.t < total - samples - 5:  # on to the last indexes, not drawn
            src.t += 1.0
        await window("late")
        src.over = True
        c0 = time.process_time()
        for _ in range(10):
            app.ingest(fol.tick())
            await pilot.pause()
            if fol.outcome is not None:
                break
        app.ended = True
        summary = fol.summary()
        app._show_summary(summary, None)
        await pilot.pause()
        res["end_cpu_s"] = round(time.process_time() - c0, 2)
        res["outcome"] = fol.outcome.state if fol.outcome else None
        res["rss_mb_end"] = round(rss_mb(), 1)
    print(f"first sample (the plan) {res['first_sample_cpu_s']} s CPU; end "
          f"({res['outcome']}) {res['end_cpu_s']} s CPU; RSS {res['rss_mb_start']} -> "
          f"{res['rss_mb_after_plan']} after the plan -> {res['rss_mb_end']} MB at the end")
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--skip", type=int, default=10, help="tables a worker a sample")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--no-settle", action="store_true",
                    help="leave the heap unfrozen (attach freezes it once planned)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" /
                                         "bench" / "tui_toc.json"))
    a = ap.parse_args()
    res = asyncio.run(run(a.entries, a.workers, a.skip, a.samples, settle=not a.no_settle))
    res["heap_frozen"] = not a.no_settle
    write_json(Path(a.out), {"benchmark": "tui_toc", "machine": machine(), **res})


if __name__ == "__main__":
    main()
