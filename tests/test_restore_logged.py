"""The restore probe's step into logged tables (`probe.loggedtop`): its most
streams once more into regular tables, as pg_restore loads them, and the
steps read as logged loads from it (`loggedtop.as_logged_load`)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import dumped

from pgparmon.advise import evidence
from pgparmon.advise.probe import ProbeResult, loggedtop, run_restore_probe
from pgparmon.advise.probe.loggedtop import (
    as_logged_load,
    logged_contention,
    logged_count,
    logged_top_need,
    logged_top_reserve,
    logged_top_s,
)
from pgparmon.advise.probe.restore_ranges import DataFile, RestoreSource
from pgparmon.advise.probe.results import LoggedStep, ProbePoint
from pgparmon.advise.probe.streams import Stream
from pgparmon.cluster import Cluster
from pgparmon.connect import ConnTarget

DB = "logged_probe"


@pytest.fixture(scope="module")
def archive(cluster: Cluster) -> Iterator[Path]:
    """A -Fd archive (gzip) of a table of a few MB and a small one."""
    cluster.psql(f"CREATE DATABASE {DB}")
    cluster.psql("CREATE TABLE big (id int PRIMARY KEY, h text, h2 text); "
                 "INSERT INTO big SELECT g, md5(g::text), md5((g * 7)::text) "
                 "FROM generate_series(1, 60000) g; "
                 "CREATE TABLE small AS SELECT g AS id FROM generate_series(1, 2000) g",
                 dbname=DB)
    cluster.psql(f"CREATE DATABASE {DB}_target")
    with dumped(cluster, DB, "pgparmon-logged-archive-") as out:
        yield out


def _target(cluster: Cluster, user: str | None = None) -> ConnTarget:
    return ConnTarget(dbname=f"{DB}_target", host=str(cluster.sockdir), port=cluster.port,
                      user=user or cluster.superuser)


def _ours(cluster: Cluster) -> str:
    return cluster.psql("SELECT count(*) FROM pg_class WHERE relname LIKE 'pgparmon%'",
                        dbname=f"{DB}_target").strip()


def _stream() -> Stream:
    s = Stream.__new__(Stream)
    s.created, s.loaded, s.exact, s.table_of = set(), {}, {}, {}
    return s


def test_a_logged_source_gives_each_stream_its_own_regular_tables(tmp_path: Path) -> None:
    f = DataFile("public.t", str(tmp_path / "1.dat"), 1e6, "f0.dat", None, text=1e6)
    create = {"public.t": "CREATE TABLE public.t (\n    id integer\n);"}
    src = RestoreSource([f], create, str(tmp_path), 1.0, logged=("s", "pgparmon_probe_1_ab"))
    a, b = _stream(), _stream()
    ra, rb = src.take(a, 1e6), src.take(b, 1e6)
    assert '"s"."pgparmon_probe_1_ab_0_0"' in ra.script
    assert '"s"."pgparmon_probe_1_ab_1_0"' in rb.script
    assert 'CREATE TABLE "s"."pgparmon_probe_1_ab_0_0" (' in ra.script
    assert "TEMP" not in ra.script + rb.script
    assert src.logged_tables == ['"s"."pgparmon_probe_1_ab_0_0"', '"s"."pgparmon_probe_1_ab_1_0"']
    # the same stream again: its table is not created twice
    again = src.take(a, 1e6)
    assert "CREATE" not in again.script and len(src.logged_tables) == 2
    # without logged: temporary tables, shared names
    plain = RestoreSource([f], create, str(tmp_path), 1.0)
    assert "CREATE TEMP TABLE pgparmon_probe_0 (" in plain.take(_stream(), 1e6).script
    assert plain.logged_tables == []


def test_the_logged_step_is_kept_only_when_the_rest_fits() -> None:
    assert logged_top_reserve(20.0, 5.0, 16, cores=16) == logged_top_s()
    assert logged_top_reserve(5.0 + logged_top_s() - 0.01, 5.0, 16, cores=16) == 0.0
    # under 4 streams within the cores: no step (nor time kept for it)
    assert logged_top_reserve(20.0, 5.0, 16, cores=2) == 0.0
    assert logged_top_reserve(20.0, 5.0, 3, cores=16) == 0.0
    assert logged_top_reserve(20.0, 5.0, 4, cores=4) == logged_top_s()
    assert logged_top_need(16, cores=16) == logged_top_s() and logged_top_need(16, cores=3) == 0


def _res(top_rate: float, k: int = 16, temp_rate: float = 600e6) -> ProbeResult:
    pts = [ProbePoint(streams=n, heap_bytes=temp_rate * n / k * 1.5, out_bytes=0,
                      elapsed_s=1.5, bytes_per_s=temp_rate * n / k, client_cpu_s=1.0 * n,
                      server_cpu_s=1.5 * n, disk_util=None, disk_await_ms=None, disk_queue=None)
           for n in (1, 2, 4, 8, 16) if n <= k]
    top = ProbePoint(streams=k, heap_bytes=top_rate * 1.5, out_bytes=0, elapsed_s=1.5,
                     bytes_per_s=top_rate, client_cpu_s=1.0 * k, server_cpu_s=1.5 * k,
                     disk_util=None, disk_await_ms=None, disk_queue=None)
    return ProbeResult(points=pts, seconds=10, budget_s=10, compression="gzip", ratio=None,
                       device=None, logged_top=LoggedStep(top, top_rate * 1.5, 1.6, 0.0))


def test_a_logged_step_reads_every_step_as_a_logged_load() -> None:
    """L(n) = X(n) / (1 + s (n - 1)) through the logged step's L(k)."""
    res = _res(430e6)
    s = logged_contention(res)
    assert s == pytest.approx((600e6 / 430e6 - 1) / 15)
    out, limit = as_logged_load(res)
    got = {p.streams: p.bytes_per_s for p in out.points}
    assert got[1] == pytest.approx(600e6 / 16)  # one stream shares nothing
    assert got[16] == pytest.approx(430e6)  # the logged step's own rate
    assert got[8] == pytest.approx(300e6 / (1 + 7 * s))
    for p, q in zip(res.points, out.points, strict=True):
        assert q.elapsed_s == pytest.approx(p.elapsed_s * p.bytes_per_s / q.bytes_per_s)
        assert q.heap_bytes == p.heap_bytes and q.server_cpu_s == p.server_cpu_s
    assert limit is not None and "the WAL-logged load" in limit and "72%" in limit
    # the fitted curve goes through them, the limit named where it flattens
    ev, pj = evidence._probe_fit(res, 10.0, [])
    assert ev is not None and ev.limit == limit
    assert ev.throughput(16) == pytest.approx(430e6, rel=0.05)
    assert ev.throughput(2) < 2 * ev.throughput(1)
    assert pj["points"][-1]["bytes_per_s"] == pytest.approx(600e6)  # the JSON as measured
    assert pj["logged_top"]["point"]["bytes_per_s"] == pytest.approx(430e6)


def test_a_logged_step_that_kept_pace_names_no_limit() -> None:
    out, limit = as_logged_load(_res(560e6))
    assert limit is None and out.points[-1].bytes_per_s == pytest.approx(560e6)
    # faster than the temporary tables (noise): nothing changes
    out, limit = as_logged_load(_res(650e6))
    assert limit is None
    assert [p.bytes_per_s for p in out.points] == [p.bytes_per_s for p in _res(650e6).points]


def test_without_a_logged_step_at_four_streams_or_more_nothing_changes() -> None:
    """Over one other stream the share cannot be told from a logged
    stream's dearer CPU, nor from the noise: a step under 4 streams (a
    recording's, or a test's) is not read."""
    res = _res(430e6)
    for other in (dataclasses.replace(res, logged_top=None),
                  dataclasses.replace(res, points=res.points[:-1]),
                  _res(30e6, k=1), _res(50e6, k=2)):
        assert logged_contention(other) is None
        assert as_logged_load(other) == (other, None)


def test_the_logged_step_round_trips_through_json() -> None:
    res = _res(430e6)
    doc = json.loads(json.dumps(res.to_json()))
    back = ProbeResult.from_json(doc)
    assert back.logged_top is not None
    assert back.logged_top.point.bytes_per_s == pytest.approx(430e6)
    assert back.logged_top.wal_per_byte == pytest.approx(1.0)
    assert ProbeResult.from_json({**doc, "logged_top": None}).logged_top is None


@pytest.mark.integration
def test_the_restore_probe_loads_logged_tables_at_its_most_streams(
        cluster: Cluster, archive: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # this VM has 2 cores: the step runs from 4 streams within them
    monkeypatch.setattr(loggedtop, "MIN_STREAMS", 2)
    res = run_restore_probe(_target(cluster), str(archive), budget_s=9.0, max_streams=2,
                            server_version_num=150000)
    top = res.logged_top
    assert top is not None, res.notes
    assert top.point.streams == max(p.streams for p in res.points)
    assert top.point.bytes_per_s > 0 and top.point.heap_bytes > 0
    # a heap byte loaded into a logged table writes about a byte of WAL
    assert top.wal_per_byte is not None and 0.5 <= top.wal_per_byte <= 3.0, top.to_json()
    assert any("into logged tables" in n for n in res.notes)
    assert res.seconds <= 9.0 + 1.0
    # nothing left behind in the target database
    assert _ours(cluster) == "0"
    back = ProbeResult.from_json(json.loads(json.dumps(res.to_json())))
    assert back.logged_top is not None
    assert back.logged_top.point.streams == top.point.streams


@pytest.mark.integration
def test_without_the_create_privilege_the_logged_step_is_left_out(
        cluster: Cluster, archive: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loggedtop, "MIN_STREAMS", 2)
    cluster.psql("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'nocreate') "
                 "THEN CREATE ROLE nocreate LOGIN; END IF; END $$; "
                 f"GRANT CONNECT, TEMP ON DATABASE {DB}_target TO nocreate",
                 dbname=f"{DB}_target")
    res = run_restore_probe(_target(cluster, "nocreate"), str(archive), budget_s=8.0,
                            max_streams=2, server_version_num=150000)
    assert res.logged_top is None
    assert any("no CREATE privilege on schema public" in n for n in res.notes), res.notes
    assert res.points and _ours(cluster) == "0"
    # the advice then says its predictions from MIN_STREAMS jobs may be short, and why
    why = loggedtop.unmeasured(res.to_json(), 2, cores=2)
    assert why is not None and "no CREATE privilege on schema public" in why
    assert "at -j 2 and more they may be short" in why


def test_predictions_without_a_logged_step_say_they_may_be_short() -> None:
    """loggedtop.unmeasured: only when the probe ran without the step, on a
    host with MIN_STREAMS cores, for advice that reaches MIN_STREAMS jobs."""
    measured = _res(430e6).to_json()
    without = {**measured, "logged_top": None,
               "notes": ["the budget was too short for a step into logged tables: what the "
                         "restore's WAL costs many sessions is not measured"]}
    why = loggedtop.unmeasured(without, 16, cores=16)
    assert why is not None and "the budget was too short" in why and "-j 4 and more" in why
    assert loggedtop.unmeasured(measured, 16, cores=16) is None  # the step measured it
    assert loggedtop.unmeasured(None, 16, cores=16) is None  # no probe
    assert loggedtop.unmeasured(without, 3, cores=16) is None  # too few jobs to show
    assert loggedtop.unmeasured(without, 16, cores=2) is None  # the step would not run
    bare = loggedtop.unmeasured({**without, "notes": []}, 8, cores=16)
    assert bare is not None and "the step did not run" in bare


def test_the_logged_steps_source_keeps_the_row_width_the_steps_learnt(tmp_path: Path) -> None:
    """A large file's ranges are its first N lines, N from the row width
    seen so far: the logged step's fresh source starts from the steps'
    (a first guess of 100 B a line asked a table of 4 kB rows for 40 times
    the bytes meant, and the step ran past the probe's end)."""
    from pgparmon.advise.probe import restore
    from pgparmon.advise.probe.steps import StepRunner

    data = tmp_path / "1.dat"
    data.write_text("x\n")
    src = RestoreSource([DataFile("public.t", str(data), 1e9, "f0.dat", None)], {},
                        str(tmp_path), 1.0)
    src.bytes_seen, src.lines_seen = 4000.0 * 50, 50
    probe = StepRunner(psql="psql", comp=None, env={}, scratch=str(tmp_path), source=src,
                       device=None, local=True, connect_timeout_s=5.0)
    top = restore._logged_top(ConnTarget(dbname="x"), probe, src, [("public.t", str(data), 1e9)],
                              None, [], 0.0)
    runner = top.make_runner("public", "pgparmon_probe_1_ab")
    try:
        logged = runner.source
        assert isinstance(logged, RestoreSource) and logged.logged == ("public",
                                                                       "pgparmon_probe_1_ab")
        r = logged.take(_stream(), 4e6)
        assert r.lines == 1000  # 4 MB of 4 kB rows, not 40,000 lines of the first guess
    finally:
        subprocess.run(["rm", "-rf", runner.scratch], check=False)


def test_the_logged_step_repeats_the_most_streams_that_each_have_a_core() -> None:
    pts = _res(430e6).points  # 1, 2, 4, 8, 16 streams
    assert logged_count(pts, 16).streams == 16
    assert logged_count(pts, 64).streams == 16
    assert logged_count(pts, 6).streams == 4  # past the cores the CPU is shared out too
    assert logged_count(pts, 2).streams == 2
    assert logged_count(pts[2:], 2).streams == 4  # none within: the fewest measured


@pytest.mark.integration
def test_under_four_streams_within_the_cores_no_logged_step_runs(
        cluster: Cluster, archive: Path) -> None:
    res = run_restore_probe(_target(cluster), str(archive), budget_s=6.0, max_streams=2,
                            server_version_num=150000)
    assert res.logged_top is None and res.points
    assert not any("into logged tables" in n for n in res.notes), res.notes
    assert _ours(cluster) == "0"


class _Conn:
    """A monitor connection's stand-in: WAL positions that advance, the
    schema check, and the DROPs it was asked for."""

    def __init__(self) -> None:
        self.lsn = 0.0
        self.sql: list[str] = []

    def execute(self, sql: str) -> "_Conn":
        self.sql.append(sql)
        self.lsn += 1e6
        self.row = (("public", True) if "current_schema" in sql else (self.lsn,))
        return self

    def fetchone(self) -> tuple[object, ...]:
        return self.row

    def close(self) -> None:
        pass


def test_a_failed_logged_step_loses_only_itself(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """A session of the step that fails (a statement_timeout, a full disk)
    leaves the steps standing: a note, no result, its tables dropped."""
    from pgparmon.advise.probe import ProbeError
    from pgparmon.advise.probe.steps import StepRunner

    conn = _Conn()
    monkeypatch.setattr(loggedtop, "connect", lambda _t: conn)
    monkeypatch.setattr(loggedtop, "usable_cores", lambda: 16)

    class Failing(StepRunner):
        def run_step(self, *_a: object, **_k: object) -> ProbePoint:
            raise ProbeError("psql: ERROR:  canceling statement due to statement timeout")

    made: list[str] = []

    def runner(schema: str, base: str) -> StepRunner:
        made.append(f'"{schema}"."{base}_0_0"')
        return Failing(psql="psql", comp=None, env={}, scratch=str(tmp_path / "s"),
                       source=None, device=None, local=True,  # type: ignore[arg-type]
                       connect_timeout_s=5.0)

    notes: list[str] = []
    top = loggedtop.LoggedTop(ConnTarget(dbname="x"), runner, lambda: made, None, notes,
                              logged_top_s())
    top(_res(430e6).points, 0.0, 1e12)
    assert top.result is None
    assert notes == ["the step into logged tables failed (psql: ERROR:  canceling statement "
                     "due to statement timeout): what the restore's WAL costs many sessions "
                     "is not measured"]
    assert any(s.startswith(f"DROP TABLE IF EXISTS {made[0]}") for s in conn.sql), conn.sql


def test_the_restore_advice_carries_the_caution(monkeypatch: pytest.MonkeyPatch) -> None:
    """RestoreStrategy.run_warnings: a `wal` caution when the probe ran
    without the step on a host of 16 cores, none when it measured it."""
    from pgparmon.advise.predict import Choice
    from pgparmon.advise.request import Request
    from pgparmon.advise.strategies import RestoreStrategy, Situation

    monkeypatch.setattr(loggedtop, "usable_cores", lambda: 16)
    s = Situation(req=Request(kind="restore", conn=None))
    choice = Choice(recommended=8, fastest=16, knee=8, efficient=None)
    without = {**_res(430e6).to_json(), "logged_top": None, "notes": []}
    codes = [c.code for c in RestoreStrategy().run_warnings(s, choice, 8, False, without)]
    assert "wal" in codes
    measured = _res(430e6).to_json()
    codes = [c.code for c in RestoreStrategy().run_warnings(s, choice, 8, False, measured)]
    assert "wal" not in codes
