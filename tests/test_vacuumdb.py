"""vacuumdb -j N (jobs/vacuumdb*.py): its command line, its work list, its
rounds followed from scripted samples (no server), and live runs of
vacuumdb found by `attach` from its process and followed by `run`."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from support import Lines, QuietSource, monitor_replay, pgparmon_cmd

from pgparmon.analyze.advice_live import AdviceTracker
from pgparmon.analyze.progress import Tracker
from pgparmon.cluster import Cluster
from pgparmon.jobs.base import TREE, Job, PlanInputs
from pgparmon.jobs.registry import driver_for, driver_for_argv, parse_argv
from pgparmon.jobs.vacuumdb_options import name_parts, options_of, table_part
from pgparmon.jobs.vacuumdb_plan import VacState, chosen
from pgparmon.jobs.vacuumdb_rounds import state, statement_table
from pgparmon.monitor import Monitor
from pgparmon.readers.db import ServerFacts
from pgparmon.sample import Sample
from pgparmon.snapshot import Backend, ClientProc, DbSample, MaintProgress, Snapshot

# ---- the command line ------------------------------------------------------------


def test_its_client_spec_reads_vacuumdbs_options() -> None:
    o = options_of(["vacuumdb", "-zj4", "-t", "public.t(a, b)", "--table=\"Odd\"",
                    "--min-xid-age=1000", "--skip-locked", "--verbose", "mydb"])
    assert (o.jobs, o.dbname, o.analyze, o.analyze_only, o.in_stages) == (4, "mydb", True,
                                                                         False, False)
    assert o.tables == ("public.t", '"Odd"') and o.min_xid_age == 1000 and o.skip_locked
    assert (o.statement, o.words(), o.stages) == ("vacuum-analyze", "VACUUM (ANALYZE)", 1)
    # --analyze-in-stages is an ANALYZE only, three times; -d wins over the positional
    o = options_of(["vacuumdb", "--jobs", "8", "--analyze-in-stages", "-d", "a", "b"])
    assert (o.jobs, o.dbname, o.analyze_only, o.stages, o.words()) == (8, "a", True, 3, "ANALYZE")
    o = options_of(["vacuumdb", "-a", "-F", "-f", "--maintenance-db=postgres", "-n", "s1",
                    "--exclude-schema", "s2", "--no-process-toast"])
    assert o.all_databases and o.full and o.freeze and o.no_process_toast
    assert (o.maintenance_db, o.schemas, o.exclude_schemas) == ("postgres", ("s1",), ("s2",))
    assert (o.statement, o.words()) == ("vacuum-full", "VACUUM (FULL, FREEZE)")
    # through the registry: its program, its job count, its database; no password kept
    args = parse_argv(["/usr/lib/postgresql/15/bin/vacuumdb", "-j2",
                       "-d", "host=h dbname=app password=sekrit", "-Z"])
    assert (args.program, args.jobs, args.dbname) == ("vacuumdb", 2, "app")
    assert "sekrit" not in repr(args)
    assert driver_for_argv(["vacuumdb", "-j", "2"]).kind == "vacuumdb"  # type: ignore[union-attr]


def test_names_read_as_the_server_reads_them() -> None:
    assert name_parts('Public."My Table"') == ["public", "My Table"]
    assert name_parts('"a""b".C') == ['a"b', "c"]
    assert table_part('s."t(1)"(x, y)') == 's."t(1)"'
    assert statement_table('VACUUM (ANALYZE) public."Big T";') == "public.Big T"
    assert statement_table("ANALYZE s.t(a, b);") == "s.t"
    assert statement_table("VACUUM (SKIP_DATABASE_STATS, FREEZE) pg_catalog.pg_class;") \
        == "pg_catalog.pg_class"
    assert statement_table("VACUUM (ONLY_DATABASE_STATS);") is None
    assert statement_table("VACUUM") is None  # a text cut to its first word


# ---- the work list -----------------------------------------------------------------

FACTS = ServerFacts(version_num=150000, version="15.0", database="shop", user="postgres",
                    backend_pid=1, backend_start=None, postmaster_start=None,
                    settings={"block_size": "8192"}, is_superuser=True, read_all_stats=True,
                    has_copy_progress=True, has_index_progress=True)
OIDS = {"a": 101, "b": 102, "c": 103, "d": 104}


def _row(oid: int, nsp: str, rel: str, pages: int, kind: str = "r", toast: int = 0,
         xid_age: int | None = 50) -> list[Any]:
    return [oid, nsp, rel, kind, pages, pages * 100.0, toast, f"base/1/{oid}",
            oid + 1000 if toast else 0, None, xid_age, 10, None, None]


ROWS = [_row(101, "public", "a", 1000, toast=200), _row(102, "public", "b", 500),
        _row(103, "public", "c", 10), _row(104, "public", "d", 10),
        _row(201, "pg_catalog", "pg_class", 20), _row(301, "app", "a", 40, kind="m"),
        _row(302, "app", "parted", 0, kind="p", xid_age=None)]


def _job(argv: list[str], database: str = "shop") -> Job:
    return Job(kind="vacuumdb", database=database, client_pid=100, jobs=parse_argv(argv).jobs,
               command=tuple(argv), grouping=TREE)


def _planned(argv: list[str], dbs: list[dict[str, Any]]) -> Tracker:
    job = _job(argv)
    tr = Tracker(job, driver_for("vacuumdb"))
    req = driver_for("vacuumdb").plan_request(tr)
    assert req is not None
    assert driver_for("vacuumdb").plan(tr, PlanInputs(extra={"request": req, "dbs": dbs}))
    return tr


def test_the_tables_vacuumdb_takes() -> None:
    def names(argv: list[str]) -> list[str]:
        return [f"{r[1]}.{r[2]}" for r in chosen(ROWS, options_of(argv))]

    # tables and materialized views of every schema, catalogs too, in its order
    assert names(["vacuumdb"]) == ["public.a", "public.b", "public.c", "public.d",
                                   "pg_catalog.pg_class", "app.a"]
    # -t: any kind, unqualified through pg_catalog then public; -n / -N
    assert names(["vacuumdb", "-t", "a", "-t", "pg_class", "-t", "app.parted"]) == [
        "public.a", "pg_catalog.pg_class", "app.parted"]
    assert names(["vacuumdb", "-n", "APP"]) == ["app.a"]
    assert names(["vacuumdb", "-N", "public", "-N", "pg_catalog"]) == ["app.a"]
    assert names(["vacuumdb", "--min-xid-age", "40"]) == names(["vacuumdb"])
    assert names(["vacuumdb", "--min-xid-age", "60"]) == []


def test_stages_and_databases_make_rounds() -> None:
    dbs = [{"name": n, "target": 100, "tables": ROWS[:4], "sizes": {}} for n in ("a1", "b2")]
    tr = _planned(["vacuumdb", "-a", "-j", "2", "--analyze-in-stages"], dbs)
    st: VacState = _vac(tr)
    # the stage outermost: every database at 1 target, then at 10, then the default
    assert [(r.stage, r.db) for r in st.rounds] == [(0, "a1"), (0, "b2"), (1, "a1"), (1, "b2"),
                                                    (2, "a1"), (2, "b2")]
    assert len(tr.items) == 24 and tr.planned
    first, last = (tr.items[st.rounds[r].keys[0]] for r in (0, 4))
    assert first.name == "a1: public.a (stage 1)" and first.kind == "analyze"
    # an ANALYZE reads 300 rows per target from as many blocks, at most the table's
    assert first.work == 300 * 8192 and last.work == 1000 * 8192
    # -z: its heap, its TOAST table, then its sample
    tr = _planned(["vacuumdb", "-z", "-j", "2"], dbs[:1])
    a = tr.items["0:a1:public.a"]
    assert a.kind == "vacuum-analyze" and a.work == (1000 + 200 + 1000) * 8192


# ---- scripted samples: rounds, evidence, the end ----------------------------------

T0 = 1000.0  # the process began here, the server's clock and ours alike


def _session(pid: int, start: float, query: str | None, state: str = "active",
             **kw: Any) -> Backend:
    return Backend(pid=pid, datname="shop", usename="postgres", application_name="vacuumdb",
                   client_addr=None, client_port=-1, backend_start=start, xact_start=start,
                   query_start=kw.pop("query_start", start), state=state,
                   wait_event_type=kw.pop("wait_event_type", None), wait_event=None,
                   backend_type="client backend", backend_xmin=None, leader_pid=None,
                   query=query, **kw)


def _analyzing(pid: int, table: str, done: int, total: int = 1000) -> MaintProgress:
    """A session sampling `table` (a's 1000 blocks at 10 targets or more, the
    300 at most of --analyze-in-stages' first stage)."""
    return MaintProgress(pid=pid, datname="shop", relid=OIDS[table], relation=f"public.{table}",
                         command="ANALYZE", phase="acquiring sample rows", blocks_total=total,
                         blocks_done=done)


HOLDER = Backend(pid=99, datname="shop", usename="app", application_name="psql",
                 client_addr=None, client_port=-1, backend_start=T0, xact_start=T0 - 60,
                 query_start=T0, state="idle in transaction", wait_event_type="Client",
                 wait_event="ClientRead", backend_type="client backend", backend_xmin=None,
                 leader_pid=None, query="LOCK TABLE public.a IN SHARE UPDATE EXCLUSIVE MODE")


def _script() -> list[tuple[tuple[Backend, ...], tuple[MaintProgress, ...], Any]]:
    """vacuumdb -j 2 --analyze-in-stages on public.a-d, sample by sample:
    (sessions, progress rows, this kind's part)."""
    s1 = T0 + 0.1
    a, b = f"ANALYZE public.{'a'};", "ANALYZE public.b;"
    part1 = {"db": "shop", "since": s1,
             "tables": [[OIDS["b"], None, T0 + 1.5], [OIDS["c"], None, T0 + 1.8]]}
    s2 = T0 + 4.0
    waits: dict[str, Any] = {"wait_event_type": "Lock", "blocked_by": (99,),
                             "waiting_for": ("relation", "ShareUpdateExclusiveLock", "public.a")}
    return [
        ((_session(11, s1, a), _session(12, s1 + 0.01, b)),
         (_analyzing(11, "a", 30, 300), _analyzing(12, "b", 30, 300)), None),
        ((_session(11, s1, a), _session(12, s1 + 0.01, "ANALYZE public.d;", query_start=T0 + 1.9)),
         (_analyzing(11, "a", 180, 300),), part1),
        ((_session(11, s1, a), _session(12, s1 + 0.01, "ANALYZE public.d;", "idle")),
         (_analyzing(11, "a", 270, 300),), part1),
        ((), (), None),  # between the stages: it reconnects
        # stage 2's first table, queued behind a lock; its text not read yet
        ((_session(21, s2, "ANALYZE", **waits), HOLDER), (), None),
        ((_session(21, s2, a, **waits), HOLDER), (), None),
        ((_session(21, s2, a), _session(22, s2 + 0.01, b)), (_analyzing(21, "a", 500),), None),
        ((), (), None),
        ((_session(31, T0 + 9.0, a),), (_analyzing(31, "a", 200),), None),
    ]


class ScriptedVacuumdb(QuietSource):
    """A Source playing the script, then vacuumdb's process gone; the
    statistics read at the end show every table analyzed in the last stage."""

    def __init__(self, script: list[Any] | None = None) -> None:
        self.script = script or _script()
        self.facts = FACTS
        self.job: Job | None = _job(["vacuumdb", "-j", "2", "--analyze-in-stages", "shop"])
        self.target_dir = None
        self.devices: set[str] = set()
        self.ticks = itertools.count()
        self.asked: list[str | None] = []

    def discover(self) -> Job:
        assert self.job is not None
        return self.job

    def snapshot(self) -> Snapshot:
        t = next(self.ticks)
        script = self.script
        alive = t < len(script)
        backends, maint, part = script[t] if alive else ((), (), None)
        db = DbSample(server_ts=T0 + 1 + t, backends=backends, maint=maint,
                      parts={"vacuumdb_done": part})
        links = tuple((b.pid, 100) for b in backends if b.application_name == "vacuumdb")
        proc = ClientProc(pid=100, ppid=1, name="vacuumdb", create_time=T0, status="sleeping",
                          cpu_user=0.0, cpu_system=0.0, read_chars=0, write_chars=0,
                          open_files=())
        return Snapshot(ts=float(t), wall=T0 + 1 + t, db=db, host=None,
                        clients=(proc,) if alive else (), root_alive=alive, links=links)

    def plan_inputs(self, req: dict[str, Any] | None = None) -> PlanInputs:
        return PlanInputs(extra={"request": req, "dbs": [
            {"name": "shop", "target": 100, "tables": ROWS[:4], "sizes": {}}]})

    def catalog_done(self, database: str | None = None) -> dict[str, Any]:
        self.asked.append(database)
        return {"maintained": [[oid, f"public.{t}", None, T0 + 9.5] for t, oid in OIDS.items()]}


def test_rounds_followed_from_samples_alone() -> None:
    src = ScriptedVacuumdb()
    mon = Monitor(src)  # type: ignore[arg-type]
    mon.discover()
    docs = []
    while mon.outcome is None and len(docs) < 20:
        docs.append(mon.tick().to_json())
    jobs = [d["job"] for d in docs]
    assert [j["round"] for j in jobs] == [1, 1, 1, 1, 2, 2, 2, 2, 3, 3]
    first = jobs[0]
    assert (first["kind"], first["jobs"], first["items_total"], first["rounds"]) == (
        "vacuumdb", 2, 12, 3)
    assert first["stage"] == "1/3: minimal optimizer statistics (1 target)"
    assert {(w["item"], w["phase"]) for w in docs[0]["workers"]} == {
        ("public.a (stage 1)", "sampling"), ("public.b (stage 1)", "sampling")}
    # b and c ran between samples: the statistics say so (c ties with d: no order
    # evidence); the stage's end settles the rest
    assert jobs[1]["tables"] == {"waiting": 0, "running": 2, "done": 2}
    assert jobs[4]["tables"]["done"] == 0 and jobs[4]["items_done"] == 4
    # a new session on the table stage 1 had done: stage 2, queued behind a lock
    blocked = docs[4]["workers"][0]
    assert (blocked["phase"], blocked["item"]) == ("lock-wait", "public.a (stage 2)")
    verdict = docs[4]["bottleneck"]
    assert verdict["kind"] == "locks" and "ANALYZE of public.a" in verdict["detail"]
    assert "pid 99 (psql, idle in transaction for 1 min 05 s)" in verdict["detail"]
    progress = [j["progress"] for j in jobs]
    assert progress == sorted(progress) and progress[-1] == 1.0
    # gone with stage 3 half seen: the statistics show every table analyzed since
    assert jobs[-1]["state"] == "finished" and mon.outcome is not None
    assert mon.outcome.reason == "all items done" and src.asked == ["shop"]


def _rounds(script: list[Any]) -> list[dict[str, Any]]:
    mon = Monitor(ScriptedVacuumdb(script))  # type: ignore[arg-type]
    mon.discover()
    return [mon.tick().to_json()["job"] for _ in script]


def test_a_first_stage_over_before_the_first_sample() -> None:
    """--analyze-in-stages' first stage runs without the cost-based delay
    (vacuumdb sets vacuum_cost_delay = 0 for it) and may be over before
    the first sample: the first sessions seen, opened within a second of
    the process, are the second stage's. Their ANALYZE samples more blocks
    than the first stage's target lets it (pg_stat_progress_analyze: a's
    1000 blocks, 300 at most at 1 target): the second stage, and the first
    is done (before, the job stayed one stage behind to its end)."""
    s2, s3 = T0 + 0.15, T0 + 3.5
    script: list[Any] = [
        ((_session(21, s2, "ANALYZE public.a;"), _session(22, s2 + 0.02, "ANALYZE public.b;")),
         (_analyzing(21, "a", 100), _analyzing(22, "b", 50, 500)), None),
        ((_session(21, s2, "ANALYZE public.a;"), _session(22, s2 + 0.02, "ANALYZE public.c;")),
         (_analyzing(21, "a", 700),), None),
        ((), (), None),
        # the third stage's first session, its progress row not sampling yet
        ((_session(31, s3, "ANALYZE public.a;"),),
         (dataclasses.replace(_analyzing(31, "a", 0, 0), phase="initializing"),), None),
    ]
    jobs = _rounds(script)
    assert [j["round"] for j in jobs] == [2, 2, 2, 3]
    assert jobs[0]["stage"] == "2/3: medium optimizer statistics (10 targets)"
    assert jobs[0]["items_done"] >= 4  # the first stage's four tables


def test_the_first_stage_is_over_only_before_the_session_began() -> None:
    """The statistics read with the plan show an ANALYZE as soon as it
    ends, while its stage's sessions are still there: every table of the
    first stage analyzed since the process began says the first stage is
    over only for a session that began after the last of them."""
    from pgparmon.jobs.vacuumdb_plan import first_round

    rows = [r[:] for r in ROWS[:4]]
    for i, r in enumerate(rows):
        r[13] = T0 + 0.02 * (i + 1)  # last_analyze: T0 + 0.02 ... T0 + 0.08
    tr = _planned(["vacuumdb", "-j", "2", "--analyze-in-stages"],
                  [{"name": "shop", "target": 100, "tables": rows, "sizes": {}}])
    st = _vac(tr)
    assert first_round(st, "shop", T0 + 0.01, T0) == 0 and not st.uncertain
    assert first_round(st, "shop", T0 + 0.05, T0) == 0  # began before c and d ended
    assert first_round(st, "shop", T0 + 0.1, T0) == 1 and st.uncertain
    rows[3][13] = T0 - 60  # d analyzed before this run: not this stage's
    tr = _planned(["vacuumdb", "-j", "2", "--analyze-in-stages"],
                  [{"name": "shop", "target": 100, "tables": rows, "sizes": {}}])
    assert first_round(_vac(tr), "shop", T0 + 0.1, T0) == 0


def test_a_new_stage_first_seen_on_a_table_the_last_one_never_showed() -> None:
    """Both of the first stage's connections seen (on a and b), then a
    session that began after them on c, which the first stage was not seen
    doing (c ties with d: no order evidence; the statistics not flushed
    yet): vacuumdb opens at most -j connections a round and closes them
    all at its end, so it is the next stage's, not a late connection of
    the first (before, the job stayed one stage behind)."""
    s1, s2 = T0 + 0.1, T0 + 1.5  # samples at T0 + 1, 2, 3 (server time)
    script: list[Any] = [
        ((_session(11, s1, "ANALYZE public.a;"), _session(12, s1 + 0.01, "ANALYZE public.b;")),
         (_analyzing(11, "a", 30, 300), _analyzing(12, "b", 30, 300)), None),
        ((_session(21, s2, "ANALYZE public.c;"),), (), None),
        ((_session(21, s2, "ANALYZE public.d;"), _session(22, s2 + 0.01, "ANALYZE public.b;")),
         (), None),
    ]
    jobs = _rounds(script)
    assert [j["round"] for j in jobs] == [1, 2, 2]
    # the first stage's four tables, and the second's a and b: larger than c,
    # handed out before it
    assert jobs[1]["items_done"] == 6 and jobs[1]["tables"]["running"] == 1


def test_a_stall_behind_a_lock_keeps_the_lock_verdict() -> None:
    """Stage 2's table queued behind another session's lock for 8 samples
    (8 s): no progress, so the job is stalled (no ETA), but the verdict
    stays the driver's, which names the lock and its holder; the stall is
    said in it."""
    script = _script()
    src = ScriptedVacuumdb(script[:6] + [script[5]] * 8 + script[6:])
    mon = Monitor(src)  # type: ignore[arg-type]
    mon.discover()
    docs = [mon.tick().to_json() for _ in range(14)]
    stalled = [d for d in docs if d["job"]["eta_reason"] == "stalled: no progress"]
    assert stalled and all(d["workers"][0]["phase"] == "lock-wait" for d in stalled)
    for d in stalled:
        verdict = d["bottleneck"]
        assert verdict["kind"] == "locks", verdict
        assert "pid 99 (psql, idle in transaction" in verdict["detail"]
        assert "no progress" in verdict["detail"]
    # before the stall is called, the same lock without the note
    assert docs[5]["bottleneck"]["kind"] == "locks"
    assert "no progress" not in docs[5]["bottleneck"]["detail"]


def test_the_eta_simulates_round_after_round() -> None:
    dbs = [{"name": "shop", "target": 100, "tables": ROWS[:4], "sizes": {}}]
    eta = {}
    for argv in (["vacuumdb", "-j", "2", "-Z"], ["vacuumdb", "-j", "2", "--analyze-in-stages"]):
        tr = _planned(argv, dbs)
        for t in range(5):  # two streams, 8192 bytes a second each
            tr.history.append((float(t), 2, 2 * 8192.0 * t))
        eta[len(_vac(tr).rounds)] = driver_for("vacuumdb").own_eta(tr)
    one, three = eta[1], eta[3]
    assert one is not None and three is not None and one.reason is None
    # -Z: public.a's 1000 sample blocks alone, the three others on the second stream
    assert one.seconds == pytest.approx(1000.0)
    # three stages, each waiting for its last table: at 1 target a and b sample
    # 300 blocks each, c and d 10 each after them (310); at 10 and at the
    # default a's 1000 blocks outlast b, c and d on the other stream
    assert three.seconds == pytest.approx(310 + 1000 + 1000)
    # like the simulation's, its last item and tail: the last round's, where
    # a's 1000 blocks run alone for 480 s after b, c and d (520)
    assert (one.last_item, one.tail_s) == ("public.a", pytest.approx(480.0))
    assert (three.last_item, three.tail_s) == ("public.a (stage 3)", pytest.approx(480.0))
    # stage 1 done, 40 s longer than its reading: 20 s more a table from then on
    st = _vac(tr)
    st.rounds[0].start, st.rounds[1].start, st.cur = T0, T0 + 310 + 40, 1
    assert driver_for("vacuumdb").own_eta(tr).seconds == pytest.approx(1020 + 1020)


def test_its_last_item_reaches_the_views() -> None:
    """The driver's own ETA names the run's last item in the typed sample
    (job.last_item), in its document, and in the live advice the views
    draw from the samples."""
    mon = Monitor(ScriptedVacuumdb())  # type: ignore[arg-type]
    mon.discover()
    samples = [mon.tick() for _ in range(9)]
    timed = [s for s in samples if s.job.eta_s is not None]
    assert timed and all(s.job.eta_reason is None for s in timed)
    # the last round's tables (which one ends last follows the rates measured)
    lasts = {s.job.last_item for s in timed}
    assert lasts and all(x and x.endswith("(stage 3)") for x in lasts), lasts
    last = timed[-1].job.last_item
    assert Sample.from_json(timed[-1].to_json()).job.last_item == last
    advice = AdviceTracker()
    for s in samples:
        advice.add(s)
    assert advice.last_item == last


def test_the_heap_and_the_sample_at_their_own_rates() -> None:
    """A VACUUM (ANALYZE)'s sample reads what its heap scan just dirtied,
    clean: under the cost-based delay far faster a block. Each part is
    timed at its own measured rate; ANALYZE's sample is the server's."""
    dbs = [{"name": "shop", "target": 100, "tables": ROWS[:1], "sizes": {}}]
    tr = _planned(["vacuumdb", "-j", "1", "-z"], dbs)
    for t in range(5):  # one stream, 100 blocks a second
        tr.history.append((float(t), 1, 100 * 8192.0 * t))
    driver, rates = driver_for("vacuumdb"), _vac(tr).rates
    # heap 1000 + TOAST 200 + sample 1000 blocks, all at the job's rate
    assert driver.own_eta(tr).seconds == pytest.approx(22.0)
    for t, done in ((0.0, 0.0), (1.0, 100 * 8192.0)):
        rates.observe("h", t, done, "heap")
    for t, done in ((2.0, 0.0), (3.0, 1000 * 8192.0)):
        rates.observe("s", t, done, "sample")
    assert driver.own_eta(tr).seconds == pytest.approx(12.0 + 1.0)
    # seen with 100 heap blocks left, done 2 s later: its 1000-block sample took
    # half of the second its heap did not (2000 blocks a second)
    rates.steps.pop("sample")
    rates.observe("a", 10.0, 1100 * 8192.0, "heap")
    rates.finished("a", 12.0, 1200 * 8192.0, 2200 * 8192.0)
    assert rates.rate("sample") == pytest.approx(2000 * 8192.0)
    # seen once sampling, half of it left, done a second later: 1000 a second more
    rates.observe("b", 20.0, 1700 * 8192.0, "sample")
    rates.finished("b", 21.0, 1200 * 8192.0, 2200 * 8192.0)
    assert rates.rate("sample") == pytest.approx(1500 / 1.0 * 8192.0)
    # -Z: the sample the server reads, once its progress row says it
    tr = _planned(["vacuumdb", "-Z"], dbs)
    mp = dataclasses.replace(_analyzing(11, "a", 50), blocks_total=250)
    tr.update(Snapshot(ts=0.0, wall=T0, host=None, links=((11, 100),), db=DbSample(
        server_ts=T0, backends=(_session(11, T0, "ANALYZE public.a;"),), maint=(mp,))))
    a = tr.items["0:shop:public.a"]
    assert (a.work, a.done) == (250 * 8192, 50 * 8192)


def _vacuuming(pid: int, relid: int, phase: str, done: int, total: int,
               db: str = "a1") -> MaintProgress:
    return MaintProgress(pid=pid, datname=db, relid=relid, relation=None, command="VACUUM",
                         phase=phase, blocks_total=total, blocks_done=done)


class _End:
    """An EndContext whose statistics show what `done` says, per database."""

    def __init__(self, done: dict[str, list[list[Any]]]) -> None:
        self.done = done

    def catalog_done(self, database: str | None = None) -> dict[str, Any]:
        rows = self.done.get(database or "")
        return {"maintained": rows} if rows is not None else {}


def test_databases_in_turn_its_phases_and_its_end() -> None:
    """vacuumdb -a -z: a table's heap, its TOAST table, its indexes; the next
    database's session ends the first database's round; at the end, what
    the statistics show and what they do not."""
    dbs = [{"name": n, "target": 100, "tables": ROWS[:4], "sizes": {}} for n in ("a1", "b2")]
    tr = _planned(["vacuumdb", "-a", "-j", "2", "-z"], dbs)
    st: VacState = _vac(tr)
    q = "VACUUM (ANALYZE) public.a;"
    steps = [  # (session's database, progress row)
        ("a1", _vacuuming(11, 101, "scanning heap", 250, 1000)),
        ("a1", _vacuuming(11, 1101, "scanning heap", 100, 200)),  # its TOAST table
        ("a1", _vacuuming(11, 101, "vacuuming indexes", 1000, 1000)),
    ]
    a = tr.items["0:a1:public.a"]
    phases, done = [], []
    for t, (db, mp) in enumerate(steps):
        b = dataclasses.replace(_session(11, T0, q), datname=db)
        tr.update(Snapshot(ts=float(t), wall=T0 + t, host=None, links=((11, 100),),
                           db=DbSample(server_ts=T0 + t, backends=(b,), maint=(mp,))))
        phases.append(tr.workers[11].phase)
        done.append(a.done / 8192)
    assert phases == ["heap-scan", "heap-scan", "vac-index"]
    # 90% of the heap's scan is its VACUUM (the index passes the rest), then its TOAST
    assert done[0] == pytest.approx(0.9 * 0.25 * 1000)
    assert done[1] == pytest.approx(1000 + 0.9 * 0.5 * 200)
    assert tr.workers[11].bytes_rate.rate() is not None  # its bytes are the job's throughput
    b2 = dataclasses.replace(_session(21, T0 + 5, "VACUUM (ANALYZE) public.b;"), datname="b2")
    tr.update(Snapshot(ts=5.0, wall=T0 + 5, host=None, links=((21, 100),),
                       db=DbSample(server_ts=T0 + 5, backends=(b2,))))
    assert st.cur == 1 and all(tr.items[k].state == "done" for k in st.rounds[0].keys)
    assert driver_for("vacuumdb").job_fields(tr, [], "running")["current_database"] == "b2"
    # gone: a was handed out before b (larger), the statistics show b and c done, not d
    assert tr.items["1:b2:public.a"].state == "done"
    rows = [[OIDS[t], f"public.{t}", T0 + 6, T0 + 6] for t in ("b", "c")]
    driver = driver_for("vacuumdb")
    driver.settle_at_end(tr, _End({"b2": rows}), Snapshot(ts=7.0, wall=T0 + 7, db=None,
                                                           host=None))
    left = tr.unfinished()
    assert [i.name for i in left] == ["b2: public.d"]
    state, why = driver.leftover_verdict(tr, left)
    assert state == "failed" and "b2: public.d" in why
    # statistics that do not show this run at all (track_counts off, no privilege): unknown
    st.evidence = False
    assert driver.leftover_verdict(tr, left)[0] == "ended"


def test_a_remote_vacuumdb_is_found_by_its_sessions() -> None:
    """No process on this host: its sessions (application_name, user, client
    address) make one job; its statements say what it runs."""
    from pgparmon.discover import find_jobs

    remote = [dataclasses.replace(_session(pid, T0, q), client_addr="10.0.0.5")
              for pid, q in ((41, "VACUUM (ANALYZE) public.a;"), (42, "VACUUM"))]
    other = dataclasses.replace(_session(43, T0, "VACUUM"), client_addr="10.0.0.6")
    jobs = find_jobs(FACTS, DbSample(server_ts=T0, backends=(*remote, other)),
                     scan_processes=False)
    job = next(j for j in jobs if j.client_addr == "10.0.0.5")
    assert (job.kind, job.jobs, job.pid_hint) == ("vacuumdb", 2, frozenset({41, 42}))
    assert job.grouping is not None and job.grouping.startswith("inferred")
    assert len(jobs) == 2  # the other address: another vacuumdb
    tr = Tracker(job, driver_for("vacuumdb"))
    assert driver_for("vacuumdb").plan_request(tr) is None  # no statement seen yet
    tr.update(Snapshot(ts=0.0, wall=T0, host=None, db=DbSample(server_ts=T0, backends=(
        *remote, other))))
    req = driver_for("vacuumdb").plan_request(tr)
    assert req is not None and req["inferred"] and req["options"]["analyze"]
    assert set(tr.workers) == {41, 42}


# ---- live: attach finds it, run follows it ------------------------------------------

DB = "vacjob"


@pytest.fixture(scope="module")
def vacdb(cluster: Cluster) -> str:
    """Tables of uneven sizes: `gate` the largest (vacuumdb's first), TOAST in
    `wide`, `fresh` never analyzed (relpages 0: sized by its file), small ones."""
    cluster.psql(f"DROP DATABASE IF EXISTS {DB}")
    cluster.psql(f"CREATE DATABASE {DB}")
    cluster.psql(
        "CREATE TABLE gate (id int, v text); "
        "INSERT INTO gate SELECT g, repeat('x', 200) FROM generate_series(1, 40000) g; "
        "CREATE TABLE big (id int PRIMARY KEY, v text); "
        "INSERT INTO big SELECT g, repeat('y', 100) FROM generate_series(1, 20000) g; "
        "CREATE TABLE wide (id int, doc text); INSERT INTO wide SELECT g, (SELECT "
        "string_agg(md5((g * 50 + i)::text), '') FROM generate_series(1, 80) i) "
        "FROM generate_series(1, 1000) g; "
        + "".join(f"CREATE TABLE s{i} (id int); INSERT INTO s{i} SELECT generate_series(1, "
                  f"{i * 300}); " for i in range(1, 6))
        + "ANALYZE; CREATE TABLE fresh (id int); "
        "INSERT INTO fresh SELECT generate_series(1, 30000)", dbname=DB)
    return DB


@pytest.fixture()
def gate(cluster: Cluster, vacdb: str) -> Iterator[psycopg.Connection[Any]]:
    """A session holding `gate` (SHARE UPDATE EXCLUSIVE, as VACUUM and ANALYZE
    take it): vacuumdb's first table waits until the test lets it go."""
    conn = psycopg.connect(cluster.conninfo(vacdb), autocommit=True, application_name="gate")
    conn.execute("BEGIN; LOCK TABLE gate IN SHARE UPDATE EXCLUSIVE MODE")
    try:
        yield conn
    finally:
        conn.close()


def _waiting_on_gate(cluster: Cluster, proc: subprocess.Popen[Any]) -> None:
    with psycopg.connect(cluster.conninfo(DB), autocommit=True) as c:
        deadline = time.monotonic() + 60
        while not c.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name "
                            "LIKE 'vacuumdb%' AND wait_event_type = 'Lock'").fetchone()[0]:
            assert proc.poll() is None and time.monotonic() < deadline, "vacuumdb never waited"
            time.sleep(0.05)


def _vac(tr: Tracker) -> VacState:
    st = state(tr)
    assert st is not None, "not planned"
    return st


def _monotone(samples: list[dict[str, Any]]) -> list[float]:
    progress = [s["job"]["progress"] for s in samples if s["job"]["progress"] is not None]
    assert progress == sorted(progress), progress
    return progress


@pytest.mark.integration
def test_its_queries(cluster: Cluster, vacdb: str) -> None:
    """Its plan's tables and databases, and its sample part: catalogs and
    statistics only, read on a monitor connection (read-only, timeouts).
    Before the live runs below, which vacuum `fresh`."""
    from pgparmon import sql
    from pgparmon.connect import ConnTarget, connect

    mon = connect(ConnTarget(dbname=vacdb, host=str(cluster.sockdir), port=cluster.port,
                             user=cluster.superuser))
    work = psycopg.connect(cluster.conninfo(vacdb), autocommit=True, application_name="vacuumdb")
    try:
        (doc,) = mon.execute(sql.load("vacuumdb_tables", 150000)).fetchone()  # type: ignore[misc]
        rows = {f"{r[1]}.{r[2]}": r for r in doc["tables"]}
        assert doc["target"] == 100 and doc["tables"][0][2] == "gate"  # relpages DESC
        assert rows["public.fresh"][4] == 0 and rows["public.fresh"][7].startswith("base/")
        assert rows["public.wide"][8] and not rows["public.s1"][8]  # its TOAST table, or none
        assert rows["pg_catalog.pg_class"][3] == "r" and rows["public.gate"][13] is not None
        (names,) = mon.execute(sql.load("vacuumdb_databases", 150000)).fetchone()  # type: ignore[misc]
        assert vacdb in names and "template1" in names and "template0" not in names
        part = sql.load("vacuumdb_done", 150000)
        pid = work.info.backend_pid
        (before,) = mon.execute(part, {"pids": [pid]}).fetchone()  # type: ignore[misc]
        assert before["tables"] == []  # nothing since that session began
        work.execute("VACUUM s1")
        (seen,) = mon.execute(part, {"pids": [pid]}).fetchone()  # type: ignore[misc]
        assert seen["db"] == vacdb and seen["since"] <= time.time()
        assert [t[0] for t in seen["tables"]] == [rows["public.s1"][0]]
        assert mon.execute(part, {"pids": []}).fetchone() == (None,)  # no vacuumdb followed
    finally:
        work.close()
        mon.close()


@pytest.mark.integration
def test_attach_finds_vacuumdb_by_its_process(cluster: Cluster, vacdb: str,
                                              gate: psycopg.Connection[Any]) -> None:
    # through a shell, as a script starts it (a program holding a transaction
    # would leave it its own job too: tests/test_vacuumdb_live.py)
    cmd = f"{cluster.client('vacuumdb')} -j 2 -z -d {vacdb}; exit $?"
    sh = subprocess.Popen(["sh", "-c", cmd], env=cluster.env(), stdout=subprocess.DEVNULL)
    try:
        _waiting_on_gate(cluster, sh)
        vac = psutil.Process(sh.pid).children()[0].pid
        att = Lines(subprocess.Popen(
            pgparmon_cmd("attach", "-d", vacdb, "--json", "--interval", "0.2"),
            env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        first = att.wait_for(lambda s: bool(s["workers"]), "vacuumdb's workers")
        job = first["job"]
        assert (job["kind"], job["jobs"], job["client_pid"], job["grouping"]) == (
            "vacuumdb", 2, vac, "process tree")
        assert job["statement"] == "VACUUM (ANALYZE)" and job["database"] == vacdb
        by_item = {w["item"]: w for w in first["workers"]}
        assert by_item["public.gate"]["phase"] == "lock-wait"
        assert first["bottleneck"]["kind"] == "locks"
        assert "public.gate" in first["bottleneck"]["detail"] and "gate, idle in transaction" \
            in first["bottleneck"]["detail"]
        # the other connection did every other table: the statistics say so
        att.wait_for(lambda s: s["job"]["tables"]["waiting"] == 0, "the other tables done")
        gate.execute("COMMIT")
        samples, summary, _ = att.finish()
    finally:
        gate.execute("ROLLBACK") if gate.info.transaction_status else None
        sh.wait(timeout=60)
    assert sh.returncode == 0 and att.proc.returncode == 0, att.stderr[-1500:]
    assert summary["kind"] == "vacuumdb" and summary["state"] == "finished", summary["reason"]
    assert _monotone(samples)[-1] == 1.0
    names = {i["name"] for i in summary["items"]}
    assert {"public.gate", "public.fresh", "public.wide", "pg_catalog.pg_class"} <= names
    assert all(i["state"] == "done" for i in summary["items"])


@pytest.mark.integration
def test_run_follows_the_stages(cluster: Cluster, vacdb: str, gate: psycopg.Connection[Any],
                                workdir: Path) -> None:
    rec = workdir / "vacuumdb.rec.gz"
    run = Lines(subprocess.Popen(
        pgparmon_cmd("run", "--json", "--interval", "0.2", "--record", str(rec), "--",
                     cluster.client("vacuumdb"), "-j", "2", "--analyze-in-stages", "-d", vacdb),
        env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        s1 = run.wait_for(lambda s: any(w["phase"] == "lock-wait" for w in s["workers"]),
                          "stage 1 queued behind the gate")
        assert (s1["job"]["kind"], s1["job"]["jobs"], s1["job"]["round"]) == ("vacuumdb", 2, 1)
        n = s1["job"]["items_total"] // 3
        assert s1["job"]["stage"].startswith("1/3") and s1["job"]["rounds"] == 3
        # let stage 1's ANALYZE of gate through and hold it again at once: the
        # lock queues behind that ANALYZE, before stage 2 can ask for it
        gate.execute("COMMIT; BEGIN; LOCK TABLE gate IN SHARE UPDATE EXCLUSIVE MODE")
        s2 = run.wait_for(lambda s: s["job"]["round"] == 2 and any(
            w["phase"] == "lock-wait" and w["item"] == "public.gate (stage 2)"
            for w in s["workers"]), "stage 2 queued behind the gate")
        assert s2["job"]["items_done"] >= n  # stage 1 over, every table of it
        gate.execute("COMMIT")
        samples, summary, _ = run.finish()
    finally:
        gate.execute("ROLLBACK") if gate.info.transaction_status else None
    assert run.proc.returncode == 0, run.stderr[-1500:]
    assert summary["state"] == "finished" and summary["exit_code"] == 0
    assert len(summary["items"]) == 3 * n and _monotone(samples)[-1] == 1.0
    # a replay of the recording reaches the same samples
    replayed, again, _ = monitor_replay(rec)
    assert [s["job"] for s in replayed] == [s["job"] for s in samples]
    assert again["state"] == "finished"


@pytest.mark.integration
def test_attach_during_the_second_stage(cluster: Cluster) -> None:
    """--analyze-in-stages' first stage runs without the cost-based delay
    (vacuumdb sets vacuum_cost_delay = 0 for it) and is over long before
    the next ones here (throttled for the database). Attached while the
    second stage samples its largest table (more blocks than the first
    stage's target lets it), the job is in the second stage from its first
    sample, moves on to the third, and never back."""
    db = "vacstages"
    cluster.psql(f"DROP DATABASE IF EXISTS {db}")
    cluster.psql(f"CREATE DATABASE {db}")
    cluster.psql("CREATE TABLE wide (id int, v text); INSERT INTO wide SELECT g, "
                 "repeat('x', 200) FROM generate_series(1, 20000) g; "
                 + "".join(f"CREATE TABLE t{i} AS SELECT generate_series(1, {i * 500}) AS id; "
                           for i in range(1, 4)), dbname=db)
    cluster.psql("VACUUM", dbname=db)  # relpages, which vacuumdb orders by
    cluster.psql(f"ALTER DATABASE {db} SET vacuum_cost_limit = 1")
    cluster.psql(f"ALTER DATABASE {db} SET vacuum_cost_delay = '10ms'")
    vac = subprocess.Popen([cluster.client("vacuumdb"), "-j", "2", "--analyze-in-stages",
                            "-d", db], env=cluster.env(), stdout=subprocess.DEVNULL)
    att: Lines | None = None
    try:
        with psycopg.connect(cluster.conninfo(db), autocommit=True) as c:
            deadline = time.monotonic() + 120
            while not c.execute(
                    "SELECT count(*) FROM pg_stat_progress_analyze p JOIN pg_stat_activity a "
                    "USING (pid) WHERE a.application_name = 'vacuumdb' "
                    "AND p.sample_blks_total > 300").fetchone()[0]:  # type: ignore[index]
                assert vac.poll() is None and time.monotonic() < deadline, \
                    "the second stage never sampled wide"
                time.sleep(0.02)
        att = Lines(subprocess.Popen(
            pgparmon_cmd("attach", "-d", db, "--json", "--interval", "0.2"),
            env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        first = att.wait_for(lambda s: s["job"].get("round") is not None, "the job's round")
        assert (first["job"]["round"], first["job"]["rounds"]) == (2, 3), first["job"]
        assert first["job"]["stage"].startswith("2/3")
        samples, summary, _ = att.finish()
    finally:
        vac.wait(timeout=300)
    assert vac.returncode == 0 and att is not None and att.proc.returncode == 0, att.stderr[-1500:]
    rounds = [s["job"]["round"] for s in samples if s["job"].get("round") is not None]
    assert rounds == sorted(rounds) and rounds[-1] == 3, rounds
    assert summary["state"] == "finished", summary["reason"]
    assert _monotone(samples)[-1] == 1.0


def test_missing_stats_only_takes_the_tables_never_analyzed() -> None:
    rows = [r[:] + [None] for r in ROWS[:4]]
    rows[0][13] = T0  # analyzed by hand
    rows[1][14] = T0  # by autovacuum
    rows[2][5] = 0.0  # empty: vacuumdb leaves it out (reltuples 0)
    o = options_of(["vacuumdb", "-Z", "--missing-stats-only"])
    assert [r[2] for r in chosen(rows, o)] == ["d"]
    # an estimate: tables left at the end are not a failure it can tell
    from pgparmon.jobs.vacuumdb_rounds import leftover_verdict

    tr = _planned(["vacuumdb", "-Z", "--missing-stats-only"],
                  [{"name": "shop", "target": 100, "tables": rows, "sizes": {}}])
    st = _vac(tr)
    st.evidence = True
    assert leftover_verdict(st, tr.unfinished())[0] == "ended"
