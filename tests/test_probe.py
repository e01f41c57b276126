"""pgparmon.advise.probe (a package): the calibration probe (docs/advise.md, "Evidence
sources" 1): a real probe on a small table within its budget, the psql
environment (no connection settings on argv), and cleanup on every way out."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest

from pgparmon.advise import probe
from pgparmon.advise.evidence import storage_bound
from pgparmon.advise.probe import (
    ProbeError,
    ProbePoint,
    ProbeResult,
    ProbeTable,
    compressor,
    index_on_temp,
    psql_argv,
    psql_env,
    restore_probe_inputs,
    run_probe,
    run_restore_probe,
    steps,
    stream_plan,
    temp_table_sql,
)
from pgparmon.advise.probe.dump import BlockRanges
from pgparmon.advise.probe.plan import run_steps
from pgparmon.advise.probe.restore import exact_text_size
from pgparmon.advise.probe.restore_ranges import DataFile, RestoreSource
from pgparmon.cluster import Cluster
from pgparmon.connect import ConnTarget
from pgparmon.ddl import column_settings

PROBE_DB = "probe"
SECRET = "sekrit-probe-pw"


@pytest.fixture(scope="module")
def probe_db(cluster: Cluster) -> dict[str, int]:
    """A database with a table of a few MB (and a tiny one), analyzed so
    pg_class.relpages is set: {table: relpages}."""
    cluster.psql(f"CREATE DATABASE {PROBE_DB}")
    cluster.psql("CREATE TABLE big AS SELECT g AS id, md5(g::text) AS h, md5((g * 7)::text) AS h2 "
                 "FROM generate_series(1, 50000) g; "
                 "CREATE TABLE small AS SELECT g AS id FROM generate_series(1, 2000) g",
                 dbname=PROBE_DB)
    cluster.psql("VACUUM ANALYZE", dbname=PROBE_DB)
    rows = cluster.psql("SELECT relname, relpages FROM pg_class WHERE relname IN ('big', 'small')",
                        dbname=PROBE_DB)
    return {name: int(pages) for name, pages in (ln.split("|") for ln in rows.split())}


def _target(cluster: Cluster, password: str | None = None, db: str = PROBE_DB) -> ConnTarget:
    dbname = db if password is None else f"dbname={db} password={password}"
    return ConnTarget(dbname=dbname, host=str(cluster.sockdir), port=cluster.port,
                      user=cluster.superuser)


def _tables(pages: dict[str, int]) -> list[ProbeTable]:
    return [ProbeTable.of("public", name, n) for name, n in pages.items()]


def _our_tools() -> list[psutil.Process]:
    names = {"psql", "gzip", "lz4", "zstd"}
    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if c.name() in names and c.status() != psutil.STATUS_ZOMBIE:
                out.append(c)
        except psutil.Error:
            pass
    return out


@pytest.fixture()
def popen_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[list[str], Any]]]:
    """Every command line (and environment) the probe starts."""
    calls: list[tuple[list[str], Any]] = []
    real = subprocess.Popen

    class Recording(real):  # type: ignore[valid-type,misc]
        def __init__(self, args: Any, *a: Any, **kw: Any) -> None:
            calls.append(([str(x) for x in args], kw.get("env")))
            super().__init__(args, *a, **kw)

    monkeypatch.setattr(subprocess, "Popen", Recording)
    yield calls


# ------------------------------------------------------------ the real probe


@pytest.mark.integration
def test_probe_measures_within_budget(cluster: Cluster, probe_db: dict[str, int],
                                      workdir: Path,
                                      popen_calls: list[tuple[list[str], Any]]) -> None:
    budget = 6.0
    t = time.monotonic()
    res = run_probe(_target(cluster, password=SECRET), _tables(probe_db), str(workdir),
                    budget_s=budget, max_streams=2, compression="gzip",
                    server_version_num=150000)
    wall = time.monotonic() - t

    assert wall <= budget + 0.5 and res.seconds <= budget + 0.5, (wall, res.seconds)
    assert res.budget_s == budget and res.compression == "gzip:6"
    # both stream counts; on a slow disk of a busy machine the budget may
    # run out before the second step: then it is dropped, and said
    streams = [p.streams for p in res.points]
    assert streams == [1, 2] or (
        streams == [1] and "the budget of 6 s allowed up to 1 of 2 streams" in res.notes), \
        (streams, res.notes)
    for p in res.points:
        assert p.bytes_per_s > 0 and p.heap_bytes > 0 and p.out_bytes > 0
        assert p.elapsed_s > 0.5 and p.ranges >= 1
        assert p.bytes_per_s == pytest.approx(p.heap_bytes / p.elapsed_s)
        assert p.client_cpu_s > 0  # gzip works
        assert p.server_cpu_s is not None  # the server is local: backends are readable
    assert res.ratio is not None and 0 < res.ratio < 1
    assert [k for k, _ in res.fit_points()] == [1.0, 2.0]
    cpu = res.cpu_s_per_gb(1)
    assert cpu is not None and cpu > 0 and res.cpu_s_per_gb(3) is None
    # a few MB are read several times over: the notes say the cache helped
    assert any("more than once" in n for n in res.notes)
    doc = json.loads(json.dumps(res.to_json()))
    assert doc["schema"] == "pgparmon.probe/1" and len(doc["points"]) == 2

    # the scratch directory is gone, nothing was left behind
    assert list(workdir.iterdir()) == []
    assert _our_tools() == []
    # the password went through the environment, never a command line
    psqls = [(argv, env) for argv, env in popen_calls if argv[1:] == psql_argv("")[1:]]
    assert len(psqls) >= 3  # warm-up, 1 stream, 2 streams
    for argv, env in popen_calls:
        assert not any(SECRET in a for a in argv), argv
    for _argv, env in psqls:
        assert env["PGPASSWORD"] == SECRET and env["PGAPPNAME"] == "pgparmon-probe"
        assert "default_transaction_read_only=on" in env["PGOPTIONS"]
    for argv, env in popen_calls:
        if argv[-2:] == [probe.ZLIB_FILTER, "6"]:  # pg_dump's zlib, level 6
            assert not any(k.startswith("PG") for k in env)
            break
    else:
        raise AssertionError("no zlib compressor was started")


# ------------------------------------------------------------ environment


def test_psql_env_carries_the_connection() -> None:
    target = ConnTarget(dbname="host=/run/pg port=5433 dbname=shop password=pw1 sslmode=disable "
                               "keepalives=1", user="ann")
    env = psql_env(target, statement_timeout_ms=36000, base={"PATH": "/bin", "PGPASSWORD": "x"})
    assert env["PGPASSWORD"] == "pw1"  # the conninfo's wins over the inherited one
    assert env["PGHOST"] == "/run/pg" and env["PGPORT"] == "5433"
    assert env["PGDATABASE"] == "shop" and env["PGUSER"] == "ann"
    assert env["PGSSLMODE"] == "disable" and env["PGAPPNAME"] == "pgparmon-probe"
    assert env["PATH"] == "/bin" and env["LC_ALL"] == "C"
    opts = env["PGOPTIONS"]
    assert "statement_timeout=36000" in opts and "lock_timeout=100" in opts
    assert "default_transaction_read_only=on" in opts
    assert not any(k.startswith("PG") and "KEEPALIVE" in k for k in env)
    argv = psql_argv("/usr/bin/psql")
    assert not any("pw1" in a or "shop" in a or "5433" in a for a in argv)
    assert argv[:2] == ["/usr/bin/psql", "-X"] and "ON_ERROR_STOP=1" in argv

    rw = psql_env(target, statement_timeout_ms=1000, read_only=False, base={})
    assert "default_transaction_read_only=off" in rw["PGOPTIONS"]
    assert "default_transaction_read_only=on" not in rw["PGOPTIONS"]

    with pytest.raises(ProbeError, match="sslpassword"):
        psql_env(ConnTarget(dbname="dbname=x sslpassword=s"), statement_timeout_ms=1, base={})


# ---------------------------------------------------------- refusals, errors


def test_needs_pg14(workdir: Path) -> None:
    with pytest.raises(ProbeError) as ei:
        run_probe(ConnTarget(dbname="x"), [ProbeTable.of("public", "t", 10)], str(workdir),
                  budget_s=6, max_streams=2, server_version_num=130011)
    assert str(ei.value) == ("the probe needs PostgreSQL 14+ (TID range scans); "
                             "use --history or --from-timings")
    assert list(workdir.iterdir()) == []


def test_missing_compressor(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(workdir))  # holds no zstd
    with pytest.raises(ProbeError, match="zstd"):
        run_probe(ConnTarget(dbname="x"), [ProbeTable.of("public", "t", 10)], str(workdir),
                  budget_s=6, max_streams=2, compression="zstd", server_version_num=160000)
    assert list(workdir.iterdir()) == []


def test_compressor_commands() -> None:
    assert compressor("gzip").argv is not None and compressor("gzip").label == "gzip:6"
    assert compressor("gzip", 0).method == "none"  # pg_dump -Z 0
    assert compressor("none").argv is None and compressor("none").suffix == ""
    assert compressor("zstd").label == "zstd:3" and "-T1" in (compressor("zstd").argv or ())
    assert compressor("lz4", 0).label == "lz4:1"
    with pytest.raises(ProbeError, match="out of range"):
        compressor("lz4", 13)
    with pytest.raises(ProbeError, match="unknown compression"):
        compressor("brotli")


def test_bad_arguments(workdir: Path) -> None:
    t = ConnTarget(dbname="x")
    with pytest.raises(ProbeError, match="too short"):
        run_probe(t, [ProbeTable.of("public", "t", 10)], str(workdir), budget_s=0.5,
                  max_streams=2, server_version_num=160000)
    with pytest.raises(ProbeError, match="relpages"):
        run_probe(t, [ProbeTable.of("public", "t", 0)], str(workdir), budget_s=5,
                  max_streams=2, server_version_num=160000)
    assert list(workdir.iterdir()) == []


@pytest.mark.integration
def test_error_removes_scratch(cluster: Cluster, probe_db: dict[str, int],
                               workdir: Path) -> None:
    # the dump target does not exist yet (pg_dump -Fd creates it): the probe
    # works in its parent and leaves nothing there either
    target_dir = workdir / "dump"
    t = time.monotonic()
    with pytest.raises(ProbeError) as ei:
        run_probe(_target(cluster), [ProbeTable.of("public", "no such table", 100)],
                  str(target_dir), budget_s=6, max_streams=2, server_version_num=150000)
    msg = str(ei.value)
    assert '"no such table"' in msg and "does not exist" in msg and "\n" not in msg
    assert time.monotonic() - t < 3
    assert list(workdir.iterdir()) == []
    assert _our_tools() == []


@pytest.mark.integration
def test_locked_table_fails_fast(cluster: Cluster, probe_db: dict[str, int],
                                 workdir: Path) -> None:
    with psycopg.connect(cluster.conninfo(dbname=PROBE_DB)) as conn:
        conn.execute("LOCK TABLE small IN ACCESS EXCLUSIVE MODE")
        t = time.monotonic()
        with pytest.raises(ProbeError, match="locked"):
            run_probe(_target(cluster), [ProbeTable.of("public", "small", probe_db["small"])],
                      str(workdir), budget_s=6, max_streams=2, server_version_num=150000)
        assert time.monotonic() - t < 3
        conn.rollback()
    assert list(workdir.iterdir()) == []
    assert _our_tools() == []


@pytest.mark.integration
def test_interrupt_removes_scratch(cluster: Cluster, probe_db: dict[str, int], workdir: Path,
                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def interrupted(*_a: Any, **_k: Any) -> Any:
        # psql sessions and compressors are running when this is called
        assert _our_tools()
        assert len([p for p in workdir.iterdir() if p.name.startswith(".pgparmon-probe-")]) == 1
        raise KeyboardInterrupt

    monkeypatch.setattr(steps, "read_host", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_probe(_target(cluster), _tables(probe_db), str(workdir), budget_s=6,
                  max_streams=2, server_version_num=150000)
    assert list(workdir.iterdir()) == []
    assert _our_tools() == []


@pytest.mark.integration
def test_a_short_budget_spans_to_the_cores(cluster: Cluster, probe_db: dict[str, int],
                                           workdir: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    """The real probe on a host taken to have 8 cores, with 5 s: no time for
    a step at 1, 2, 4 and 8 streams, so the counts are thinned from the
    middle (1 and 8), and the result and its notes say which were skipped.
    (Should the busy machine let the 8-stream step run into the budget, it
    is dropped and said; it is never replaced by a count in the middle.)"""
    from pgparmon.advise.probe import plan

    monkeypatch.setattr(plan, "usable_cores", lambda: 8)
    res = run_probe(_target(cluster), _tables(probe_db), str(workdir), budget_s=5.0,
                    max_streams=8, compression="gzip", server_version_num=150000)
    streams = [p.streams for p in res.points]
    # 8 is planned second; 4 only as the point between 1 and 8 had 8 been
    # flat over 1 (a thinned plan measures between only then)
    assert streams[0] == 1 and 2 not in streams and 2 in res.skipped, (streams, res.notes)
    assert 8 in streams or any("with 8 streams ran into the budget" in n
                               for n in res.notes), (streams, res.notes)
    assert any("did not hold a step at every stream count up to 8" in n
               and "skipped 2" in n for n in res.notes), res.notes
    assert res.to_json()["skipped_streams"] == sorted(res.skipped)


# ------------------------------------------------------------------- pieces


def test_stream_plan() -> None:
    assert stream_plan(1) == [1]
    assert stream_plan(2) == [1, 2]
    assert stream_plan(6) == [1, 2, 4, 6]
    assert stream_plan(8) == [1, 2, 4, 8]


def test_ranges_are_disjoint_then_reused() -> None:
    a = ProbeTable.of("s", 'we"ird', 100)
    b = ProbeTable.of("s", "b", 30)
    assert a.name == '"s"."we""ird"'
    r = BlockRanges([b, a, ProbeTable.of("s", "empty", 0)])
    seen: list[tuple[str, int, int]] = []
    while not r.reused:
        t, lo, hi = r.take(16)
        seen.append((t.relname, lo, hi))
    *first, again = seen
    # largest table first, every block exactly once, no sliver left over
    assert next(s for s in first if s[0] == 'we"ird') == ('we"ird', 0, 16)
    for name, pages in (('we"ird', 100), ("b", 30)):
        blocks = [x for n, lo, hi in first if n == name for x in range(lo, hi)]
        assert blocks == list(range(pages))
    assert ("b", 16, 30) in first
    assert again == ('we"ird', 0, 16)
    assert "ctid >= '(0,0)'::tid AND ctid < '(16,0)'::tid" in probe.copy_sql(a, 0, 16)
    assert 'FROM "s"."we""ird"' in probe.copy_sql(a, 0, 16)


class ScriptedSteps:
    """Stands in for the StepRunner: each run_step(k) returns the next
    scripted (rate, io_wait_share, reread) for k streams; the warm-up (grow)
    is answered at once."""

    def __init__(self, script: dict[int, list[tuple[float, float, bool]]]) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.ran: list[int] = []

    def run_step(self, k: int, t_step: float, want_bytes: float, deadline: float,
                 grow: bool = False, finale: Any = None) -> ProbePoint:
        rate, share, reread = (20e6, 0.9, False) if grow else self.script[k].pop(0)
        if not grow:
            self.ran.append(k)
        return ProbePoint(streams=k, heap_bytes=rate * 1.6, out_bytes=0, elapsed_s=1.6,
                          bytes_per_s=rate, client_cpu_s=0.1, server_cpu_s=0.1, disk_util=None,
                          disk_await_ms=None, disk_queue=None, reread=reread,
                          io_wait_share=share)


def _plan(script: dict[int, list[tuple[float, float, bool]]]) -> tuple[
        list[int], dict[int, float], list[str]]:
    steps = ScriptedSteps(script)
    notes: list[str] = []
    pts = run_steps(steps, tempfile.mkdtemp(), notes, time.monotonic(),  # type: ignore[arg-type]
                    60.0, 4)
    return steps.ran, {p.streams: p.bytes_per_s for p in pts}, notes


def test_storage_knee_measured_again() -> None:
    """Storage flat from 2 to 4 streams (sessions waiting on I/O) and 1 -> 2
    gaining +25%: the knee is 1 or 2, so 1 stream is measured again in
    place of the midpoint at 3, and the faster measurement stands; a re-read
    (the cache, not the disk) is not taken; a steep 1 -> 2 keeps the
    midpoint; a flat doubling not waiting on storage keeps it too."""
    ran, rates, notes = _plan({1: [(17.0e6, 0.87, False), (21.3e6, 0.94, False)],
                               2: [(21.5e6, 1.0, False)], 4: [(22.6e6, 1.0, False)]})
    assert ran == [1, 2, 4, 1]
    assert rates == {1: 21.3e6, 2: 21.5e6, 4: 22.6e6}
    assert any("measured again, where the storage knee is" in n for n in notes), notes
    assert storage_bound([ProbePoint(streams=k, heap_bytes=1.0, out_bytes=0, elapsed_s=1.0,
                                     bytes_per_s=x, client_cpu_s=0.0, server_cpu_s=None,
                                     disk_util=None, disk_await_ms=None, disk_queue=None,
                                     io_wait_share=0.95)
                          for k, x in rates.items()])[0] == 1  # type: ignore[index]

    ran, rates, notes = _plan({1: [(17.0e6, 0.87, False), (16.0e6, 0.9, False)],
                               2: [(21.5e6, 1.0, False)], 4: [(22.6e6, 1.0, False)]})
    assert ran == [1, 2, 4, 1] and rates[1] == 17.0e6  # the slower does not replace it

    ran, rates, notes = _plan({1: [(17.0e6, 0.87, False), (240e6, 0.04, True)],
                               2: [(21.5e6, 1.0, False)], 4: [(22.6e6, 1.0, False)]})
    assert rates[1] == 17.0e6 and any("read all the data" in n for n in notes), notes

    ran, _, _ = _plan({1: [(12e6, 0.9, False)], 2: [(21.5e6, 1.0, False)],
                       4: [(22.6e6, 1.0, False)], 3: [(22e6, 1.0, False)]})
    assert ran == [1, 2, 4, 3]
    ran, _, _ = _plan({1: [(17.0e6, 0.1, False)], 2: [(21.5e6, 0.1, False)],
                       4: [(22.6e6, 0.1, False)], 3: [(22e6, 0.1, False)]})
    assert ran == [1, 2, 4, 3]


def test_result_methods() -> None:
    def pt(k: int, x: float, cpu: float, server: float | None) -> ProbePoint:
        return ProbePoint(streams=k, heap_bytes=2e9, out_bytes=10**9, elapsed_s=2e9 / x,
                          bytes_per_s=x, client_cpu_s=cpu, server_cpu_s=server, disk_util=None,
                          disk_await_ms=None, disk_queue=None)

    res = ProbeResult(points=[pt(2, 150e6, 30.0, None), pt(1, 100e6, 20.0, 4.0)], seconds=9.0,
                      budget_s=10.0, compression="gzip:6", ratio=0.5, device="vda")
    assert res.fit_points() == [(1.0, 100e6), (2.0, 150e6)]
    assert res.cpu_s_per_gb(1) == pytest.approx(12.0)  # (20 + 4) s / 2 GB
    assert res.cpu_s_per_gb(2) == pytest.approx(15.0)  # server unknown: client only
    assert res.cpu_s_per_gb(4) is None
    doc = res.to_json()
    assert [p["streams"] for p in doc["points"]] == [1, 2]
    assert json.loads(json.dumps(doc)) == doc


def test_psql_is_found() -> None:
    path = probe.find_psql()
    assert os.path.basename(path) == "psql" and os.access(path, os.X_OK)


# ------------------------------------------------------------ restore probe


@pytest.fixture(scope="module")
def probe_archive(cluster: Cluster, probe_db: dict[str, int]) -> Iterator[Path]:
    """A -Fd archive of the probe database (gzip, pg_dump's default)."""
    d = Path(tempfile.mkdtemp(prefix="pgparmon-probe-archive-"))
    out = d / "probe.dump"
    subprocess.run([cluster.client("pg_dump"), "-Fd", "-f", str(out), PROBE_DB],
                   env=cluster.env(), check=True, capture_output=True)
    try:
        yield out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _data_files(archive: Path) -> list[tuple[str, str, float]]:
    from pgparmon.toc import list_archive

    _, items = list_archive(archive)
    out = []
    for it in items:
        if it.desc == "TABLE DATA":
            path = archive / f"{it.dump_id}.dat.gz"
            out.append((f"{it.schema}.{it.tag}", str(path), path.stat().st_size / 0.3 / 0.85))
    return out


@pytest.mark.integration
def test_restore_probe_inputs(probe_archive: Path) -> None:
    files, create = restore_probe_inputs(str(probe_archive))
    assert sorted(f[:2] for f in files) == sorted(f[:2] for f in _data_files(probe_archive))
    big = next(f for f in files if f[0] == "public.big")
    # the gzip trailer gives the text size: heap-equivalent bytes of MBs
    assert big[2] > 2e6
    assert set(create) == {"public.big", "public.small"}
    assert create["public.big"].startswith("CREATE TABLE public.big (")
    assert temp_table_sql(create["public.big"], "public.big", "x") == (
        "CREATE TEMP TABLE x (\n    id integer,\n    h text,\n    h2 text\n);")
    plain = probe_archive.parent / "plain.sql"
    plain.write_text("--\n-- PostgreSQL database dump\n--\n")
    with pytest.raises(ProbeError, match="directory-format .* or custom-format"):
        restore_probe_inputs(str(plain))


@pytest.mark.integration
def test_restore_probe(cluster: Cluster, probe_archive: Path,
                       popen_calls: list[tuple[list[str], Any]],
                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    before = {p.name: p.stat().st_size for p in probe_archive.iterdir()}
    # a temp dir of this test's own: other probes on the machine make scratch too
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    scratch_glob = os.path.join(tempfile.gettempdir(), "pgparmon-restore-probe-*")
    scratch_before = set(glob.glob(scratch_glob))
    assert scratch_before == set()
    budget = 5.0
    # into a database without the tables (a restore's usual target): the
    # temporary clones come from the archive's CREATE TABLE statements
    index_sql = {"public.big": ["CREATE INDEX big_h_idx ON public.big USING btree (h);"],
                 "public.small": [("ALTER TABLE ONLY public.small ADD CONSTRAINT small_pkey "
                                   "PRIMARY KEY (id);")]}
    res = run_restore_probe(_target(cluster, password=SECRET, db="postgres"), str(probe_archive),
                            budget_s=budget, max_streams=2, server_version_num=150000,
                            index_sql=index_sql)
    assert res.seconds <= budget + 0.5
    # the index build after the warm-up, on what it loaded most of (big's first lines)
    assert res.build is not None and res.build_s_per_byte is not None, res.notes
    assert res.build["table"] == "public.big"
    assert res.build["index"].startswith("CREATE INDEX ON pgparmon_probe_")
    assert res.build["index"].endswith("USING btree (h)")
    assert res.build["heap_bytes"] >= probe.INDEX_MIN_HEAP
    assert 0 < res.build["seconds"] <= probe.INDEX_SHARE * budget
    assert res.build_s_per_byte == pytest.approx(res.build["seconds"] / res.build["heap_bytes"])
    doc = res.to_json()
    assert doc["build_s_per_byte"] == res.build_s_per_byte
    assert json.loads(json.dumps(doc)) == doc
    assert [p.streams for p in res.points] == [1, 2]
    for p in res.points:
        assert p.bytes_per_s > 0 and p.heap_bytes > 0 and p.out_bytes == 0
        assert p.server_cpu_s is not None
    assert res.compression == "gzip" and res.ratio is None
    assert any("temporary tables" in n for n in res.notes)
    # nothing left behind, the archive untouched, nothing created in the database
    assert set(glob.glob(scratch_glob)) == scratch_before
    assert {p.name: p.stat().st_size for p in probe_archive.iterdir()} == before
    assert _our_tools() == []
    assert cluster.psql("SELECT count(*) FROM pg_class WHERE relname LIKE 'pgparmon%' "
                        "OR relname IN ('big', 'small')").strip() == "0"
    psqls = [env for argv, env in popen_calls if argv[1:] == psql_argv("")[1:]]
    assert psqls
    for env in psqls:
        assert "default_transaction_read_only=off" in env["PGOPTIONS"]
    for argv, _env in popen_calls:
        assert not any(SECRET in a for a in argv)


@pytest.fixture(scope="module")
def custom_archives(cluster: Cluster, probe_db: dict[str, int]) -> Iterator[dict[str, Path]]:
    """-Fc archives of the probe database: gzip (pg_dump's default), -Z 0,
    -Z lz4 (pg_dump 17's: 15 has no lz4 for custom archives), and one
    written to a pipe (no data offsets)."""
    from pgversions import bindir_for

    d = Path(tempfile.mkdtemp(prefix="pgparmon-probe-custom-"))
    out = {"gzip": d / "gzip.dump", "none": d / "none.dump", "lz4": d / "lz4.dump",
           "piped": d / "piped.dump"}
    for key, extra in (("gzip", []), ("none", ["-Z", "0"]), ("lz4", ["-Z", "lz4"])):
        pg_dump = (str(bindir_for(17) / "pg_dump") if key == "lz4"
                   else cluster.client("pg_dump"))
        subprocess.run([pg_dump, "-Fc", *extra, "-f", str(out[key]),
                        PROBE_DB], env=cluster.env(), check=True, capture_output=True)
    with open(out["piped"], "wb") as f:  # pg_dump -Fc db | cat > piped.dump
        dump = subprocess.Popen([cluster.client("pg_dump"), "-Fc", PROBE_DB], env=cluster.env(),
                                stdout=subprocess.PIPE)
        subprocess.run(["cat"], stdin=dump.stdout, stdout=f, check=True)
        assert dump.wait() == 0
    try:
        yield out
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.integration
@pytest.mark.parametrize("compression", ["gzip", "none", "lz4"])
def test_restore_probe_of_a_custom_archive(cluster: Cluster, probe_archive: Path,
                                           custom_archives: dict[str, Path], compression: str,
                                           monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    """A custom archive (pg_restore -j's most common input) is probed as a
    directory archive is: its items found where its TOC places them, sized
    as the directory archive's files of the same data say, each loaded
    through custom_blocks; pg_restore's client cost timed on the largest."""
    from pgparmon.advise.probe.restore_ranges import CustomItem

    if compression == "lz4":
        from pgversions import bindir_for
        from support import ensure_debian_package, install_failure

        if ensure_debian_package("lz4", "lz4") is None:
            pytest.skip(install_failure("lz4") or "no lz4 command")
        # its archive is pg_dump 17's (version 1.16): pg_restore 15 cannot list it
        monkeypatch.setenv("PGPARMON_PGBIN", str(bindir_for(17)))
    archive = custom_archives[compression]
    files, create = restore_probe_inputs(str(archive))
    d_files, d_create = restore_probe_inputs(str(probe_archive))
    assert create == d_create
    assert sorted(f[0] for f in files) == sorted(f[0] for f in d_files)
    assert all(f[1] == str(archive) and isinstance(f[3], CustomItem)  # type: ignore[misc]
               and f[3].compression == compression for f in files)  # type: ignore[misc]
    d_size = {f[0]: f[2] for f in d_files}
    big = next(f for f in files if f[0] == "public.big")
    assert big[2] == pytest.approx(d_size["public.big"], rel=0.1)
    # the small table's text written out beforehand (no Python start a
    # load; lz4's through its command once), the large one's read by
    # custom_blocks in each range
    from pgparmon.advise.probe.restore import _linked_files

    scratch, linked, label = _linked_files(files)
    try:
        assert label == compression
        by = {f.table: f for f in linked}
        small = by["public.small"]
        assert small.extract is None and small.text is not None and small.text > 0
        with open(os.path.join(scratch, small.link), "rb") as fh:
            assert fh.read().endswith(b"\\.\n\n\n")
        assert by["public.big"].extract is not None and by["public.big"].text is None
        assert "blocks.py" in by["public.big"].extract
    finally:
        shutil.rmtree(scratch)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    res = run_restore_probe(_target(cluster, db="postgres"), str(archive), budget_s=5.0,
                            max_streams=2, server_version_num=150000)
    # on a busy machine the budget may hold one stream, or leave no time
    # for the index build: the notes then say so
    steps = [p.streams for p in res.points]
    assert steps == [1, 2] or (steps == [1] and any("allowed up to 1 of 2" in n
                                                    for n in res.notes)), res.notes
    assert all(p.heap_bytes > 0 and p.bytes_per_s > 0 for p in res.points)
    assert res.compression == compression
    assert res.client_s_per_byte is not None and res.client_s_per_byte > 0
    if res.build is None:
        assert any("too little" in n or "no time left" in n for n in res.notes), res.notes
    else:
        assert res.build["table"] == "public.big", res.notes
    assert glob.glob(str(tmp_path / "pgparmon-*")) == []
    assert _our_tools() == []
    assert cluster.psql("SELECT count(*) FROM pg_class WHERE relname LIKE 'pgparmon%'"
                        ).strip() == "0"
    with pytest.raises(ProbeError, match="written to a pipe|wrote it to a pipe"):
        restore_probe_inputs(str(custom_archives["piped"]))


@pytest.mark.integration
def test_restore_probe_needs_a_path(cluster: Cluster) -> None:
    with pytest.raises(ProbeError, match="archive's path"):
        run_restore_probe(_target(cluster), object(), budget_s=5,  # type: ignore[arg-type]
                          max_streams=2, server_version_num=150000)


@pytest.mark.integration
def test_restore_probe_bad_table_definition(cluster: Cluster, probe_archive: Path) -> None:
    files = [f for f in _data_files(probe_archive) if f[0] == "public.big"]
    create = {"public.big": "CREATE TABLE public.big (id no_such_type, h text, h2 text);"}
    with pytest.raises(ProbeError, match="no_such_type"):
        run_restore_probe(_target(cluster), str(probe_archive), files, create, budget_s=5,
                          max_streams=2, server_version_num=150000)
    assert _our_tools() == []


def test_temp_table_sql() -> None:
    sql = ("CREATE TABLE \"we ird\".\"t(1)\" (\n    id integer NOT NULL,\n"
           "    note text DEFAULT 'a)b''c'::text,\n    e text DEFAULT E'x\\')',\n"
           "    n numeric(10,2),\n    CONSTRAINT c CHECK ((n > (0)::numeric))\n)\n"
           "PARTITION BY RANGE (id);\n\nALTER TABLE x OWNER TO y;")
    assert temp_table_sql(sql, "x.y", "tmp1") == (
        "CREATE TEMP TABLE tmp1 (\n    id integer NOT NULL,\n"
        "    note text DEFAULT 'a)b''c'::text,\n    e text DEFAULT E'x\\')',\n"
        "    n numeric(10,2),\n    CONSTRAINT c CHECK ((n > (0)::numeric))\n);")
    like = temp_table_sql("CREATE TABLE public.p1 PARTITION OF public.p FOR VALUES IN (1);",
                          'public."P 1"', "tmp2")
    assert like == ('CREATE TEMP TABLE tmp2 (LIKE "public"."P 1" INCLUDING DEFAULTS '
                    "INCLUDING GENERATED INCLUDING STORAGE);")
    assert "LIKE" in temp_table_sql(None, "public.t", "tmp3")


# a TABLE entry as pg_dump 15 writes it (pg_restore -v --section=pre-data)
STORAGE_ENTRY = ('CREATE TABLE public.th (\n    id integer NOT NULL,\n    t text,\n'
                 '    u text,\n    "W; x" text\n);\n'
                 "ALTER TABLE ONLY public.th ALTER COLUMN t SET STORAGE EXTERNAL;\n"
                 "ALTER TABLE ONLY public.th ALTER COLUMN u SET COMPRESSION lz4;\n"
                 'ALTER TABLE ONLY public.th ALTER COLUMN "W; x" SET STORAGE MAIN;\n\n\n'
                 "ALTER TABLE public.th OWNER TO postgres;\n")


def test_temp_table_keeps_column_storage() -> None:
    assert column_settings(STORAGE_ENTRY) == [
        "ALTER COLUMN t SET STORAGE EXTERNAL", "ALTER COLUMN u SET COMPRESSION lz4",
        'ALTER COLUMN "W; x" SET STORAGE MAIN']
    assert temp_table_sql(STORAGE_ENTRY, "public.th", "tmp9").endswith(
        ' ALTER TABLE tmp9 ALTER COLUMN t SET STORAGE EXTERNAL, ALTER COLUMN u SET '
        'COMPRESSION lz4, ALTER COLUMN "W; x" SET STORAGE MAIN;')
    assert column_settings("CREATE TABLE a (b text);\nALTER TABLE a OWNER TO c;") == []


@pytest.mark.integration
def test_temp_table_storage_on_server(cluster: Cluster) -> None:
    """The clone the restore probe loads stores its wide values as the
    restore will (a column kept EXTERNAL is not compressed on the clone)."""
    sql = temp_table_sql(STORAGE_ENTRY, "public.th", "tmp9")
    out = cluster.psql(sql + " SELECT string_agg(attname || '=' || attstorage::text "
                       "|| attcompression::text, ',' ORDER BY attnum) FROM pg_attribute "
                       "WHERE attrelid = 'tmp9'::regclass AND attnum > 0")
    assert out.strip().splitlines()[-1] == "id=p,t=e,u=xl,W; x=m"


def test_index_on_temp() -> None:
    t = "pgparmon_probe_0"
    assert index_on_temp("CREATE INDEX eq_0_c_idx ON public.eq_0 USING btree (c);", t) == (
        "CREATE INDEX ON pgparmon_probe_0 USING btree (c)")
    assert index_on_temp('CREATE UNIQUE INDEX "I x" ON ONLY "we ird"."t.1" USING btree '
                         "(lower(a), b) INCLUDE (c) WHERE (b > 0);", t) == (
        "CREATE INDEX ON pgparmon_probe_0 USING btree (lower(a), b) INCLUDE (c) "
        "WHERE (b > 0)")
    assert index_on_temp("CREATE INDEX ON s.x (a)", t) == "CREATE INDEX ON pgparmon_probe_0 (a)"
    assert index_on_temp("ALTER TABLE ONLY public.eq_0\n    ADD CONSTRAINT eq_0_pkey "
                         "PRIMARY KEY (id);", t) == (
        "CREATE INDEX ON pgparmon_probe_0 (id)")
    assert index_on_temp("ALTER TABLE ONLY public.x ADD CONSTRAINT x_u UNIQUE (a, b);", t) == (
        "CREATE INDEX ON pgparmon_probe_0 (a, b)")
    assert index_on_temp("ALTER TABLE ONLY public.x ADD CONSTRAINT x_fk FOREIGN KEY (a) "
                         "REFERENCES y(id);", t) is None
    assert index_on_temp("CREATE TRIGGER x AFTER INSERT ON t EXECUTE FUNCTION f();", t) is None


def _gz(path: Path, rows: int) -> None:
    import gzip

    with gzip.open(path, "wt") as f:
        for i in range(rows):
            f.write(f"{i}\tsome text {i}\n")


def test_restore_ranges_of_many_small_files(tmp_path: Path) -> None:
    """Small files are loaded whole, several to a range, with no pipeline
    (their size comes from the gzip trailer), into one temporary table per
    column shape, emptied only when it has grown; a large file gives a range
    of its first lines, never a skip into it (which would decompress the
    skipped part for nothing)."""
    from types import SimpleNamespace

    files = []
    for n in range(40):
        path = tmp_path / f"{n}.dat.gz"
        _gz(path, 200)
        text = exact_text_size(str(path))
        assert text is not None and text > 2000  # the gzip trailer: the exact text size
        files.append(DataFile(f"public.s{n}", str(path), text / 0.85, f"f{n}.dat.gz",
                              "gzip", text=text))
    big = tmp_path / "big.dat.gz"
    _gz(big, 20000)
    files.append(DataFile("public.big", str(big), 30e6, "fbig.dat.gz", "gzip",
                          text=exact_text_size(str(big))))
    create = {f.table: f"CREATE TABLE {f.table} (id integer, t text);" for f in files}
    create["public.big"] = "CREATE TABLE public.big (id bigint, t text);"
    src = RestoreSource(files, create, str(tmp_path), 0.85)
    s = SimpleNamespace(created=set(), loaded={}, exact={}, table_of={})

    r = src.take(s, 1e6)  # the largest file first: its first lines, counted by dd
    assert len(r.parts) == 1 and r.parts[0].lines > 0 and r.parts[0].count_path
    assert "head -n" in r.script and "tail" not in r.script

    r = src.take(s, 50_000.0)  # small files: whole, several to a range
    n_first = len(r.parts)
    assert 2 <= n_first < 40
    assert all(p.lines == 0 and p.known is not None and p.count_path is None for p in r.parts)
    assert r.script.count("\\copy") == len(r.parts)
    assert "head" not in r.script and "tail" not in r.script and "dd " not in r.script
    assert r.script.count("CREATE TEMP TABLE") == 1  # one shape, one temporary table
    assert "TRUNCATE" not in r.script
    src.finish(r)
    assert r.heap == pytest.approx(sum(p.known for p in r.parts) / 0.85)
    assert s.exact[r.parts[0].temp] == pytest.approx(r.heap)

    # the rest of the small files in one range, then round again from the largest
    r = src.take(s, 1e9)
    assert len(r.parts) == 40 - n_first
    assert src.i == len(src.files)
    assert not src.reused
    src.take(s, 1e6)
    assert src.reused

    # a temporary table is emptied once it has grown past the threshold
    s.loaded[r.parts[0].temp] = probe.TRUNCATE_AFTER_BYTES
    r = src.take(s, 50_000.0)
    assert r.script.startswith(f"TRUNCATE {r.parts[0].temp};") and r.parts[0].truncate


@pytest.fixture(scope="module")
def many_small_archive(cluster: Cluster) -> Iterator[Path]:
    """A -Fd archive of 60 small tables."""
    cluster.psql("CREATE DATABASE probe_many")
    cluster.psql(";".join(f"CREATE TABLE t{i} AS SELECT g AS id, md5(g::text) AS a "
                          f"FROM generate_series(1, 3000) g" for i in range(60)),
                 dbname="probe_many")
    d = Path(tempfile.mkdtemp(prefix="pgparmon-probe-many-"))
    out = d / "many.dump"
    subprocess.run([cluster.client("pg_dump"), "-Fd", "-f", str(out), "probe_many"],
                   env=cluster.env(), check=True, capture_output=True)
    try:
        yield out
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.integration
def test_restore_probe_many_small_files(cluster: Cluster, many_small_archive: Path) -> None:
    res = run_restore_probe(_target(cluster, db="postgres"), str(many_small_archive),
                            budget_s=6.0, max_streams=2, server_version_num=150000)
    assert [p.streams for p in res.points] == [1, 2]
    for p in res.points:
        # every step loaded data (ranges past a file's end once loaded nothing)
        assert p.heap_bytes > 0 and p.bytes_per_s > 0
        # several files to a range: far fewer ranges than files loaded
        assert p.ranges < p.heap_bytes / (3000 * 40 / 0.85)
    assert res.build_s_per_byte is not None and res.build is not None
    assert res.build["index"] == "btree on the first column"


def test_pg_restore_client_cost_and_steps_read_as_pg_restore(tmp_path: Path) -> None:
    """pg_restore's client cost is timed on the largest data file (zlib for
    gzip, a read for plain files); a step that filled the host whose client
    spent more gets the difference for its server, capped at k backends at a
    full core; a step with the host not full, or no server CPU, is left."""
    import gzip

    from pgparmon.advise.probe.client_cost import as_pg_restore, pg_restore_client_cost

    text = b"".join(b"%d\tsome text of a row %d\n" % (i, i * 7) for i in range(200_000))
    gz = tmp_path / "3001.dat.gz"
    gz.write_bytes(gzip.compress(text, 6))
    plain = tmp_path / "3002.dat"
    plain.write_bytes(text)
    small = DataFile("public.a", str(plain), 1e3, "f1.dat", None)
    big = DataFile("public.b", str(gz), len(text) / 0.85, "f0.dat.gz", "gzip")
    c_gz = pg_restore_client_cost([small, big], 0.85)
    c_plain = pg_restore_client_cost([dataclasses.replace(big, path=str(plain))], 0.85)
    assert c_gz is not None and c_plain is not None and c_gz > c_plain > 0
    assert pg_restore_client_cost([], 0.85) is None
    assert pg_restore_client_cost([dataclasses.replace(big, path=str(tmp_path / "x.gz"))],
                                  0.85) is None

    def pt(k: int, rate: float, client: float, server: float | None,
           host: float | None) -> ProbePoint:
        """client, server: CPU seconds per heap byte"""
        heap = rate * 1.5
        return ProbePoint(streams=k, heap_bytes=heap, out_bytes=0, elapsed_s=1.5,
                          bytes_per_s=rate, client_cpu_s=client * heap,
                          server_cpu_s=None if server is None else server * heap,
                          disk_util=None, disk_await_ms=None, disk_queue=None,
                          host_cpu_percent=host)

    c_real = 5e-9  # s per heap byte
    # 2 streams at 78 MB/s on a full host: server 15.2 ns/B, client 10.3 ns/B
    two = pt(2, 78e6, 10.3e-9, 15.2e-9, 97.0)
    # 1 stream: its backend near a full core: the cap (k / s) holds it
    one = pt(1, 76.7e6, 10.3e-9, 12.4e-9, 87.0)
    idle = pt(2, 78e6, 10.3e-9, 15.2e-9, 60.0)
    remote = pt(2, 78e6, 10.3e-9, None, 97.0)
    out, most = as_pg_restore([one, two, idle, remote], c_real)
    assert out[1].bytes_per_s == pytest.approx(78e6 * (15.2 + 10.3) / (15.2 + 5), rel=1e-6)
    assert out[1].probe_bytes_per_s == 78e6 and out[1].probe_client_cpu_s == two.client_cpu_s
    assert out[1].client_cpu_s == pytest.approx(c_real * two.heap_bytes)
    assert out[1].heap_bytes / out[1].elapsed_s == pytest.approx(out[1].bytes_per_s)
    assert out[0].bytes_per_s == pytest.approx(1 / 12.4e-9, rel=1e-6)  # capped at a core
    assert out[2] is idle and out[3] is remote
    assert most == pytest.approx((15.2 + 10.3) / (15.2 + 5))
    assert as_pg_restore([two], 20e-9) == ([two], None)  # its client was cheaper


# ------------------------------------------------------------ the WAL's ceiling


def _wal_lsn(cluster: Cluster) -> int:
    return int(cluster.psql("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").strip())


@pytest.mark.integration
def test_wal_step_measures_the_wal_and_leaves_only_wal(cluster: Cluster,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """k sessions of a plain role (no privilege granted: the function is
    everyone's) write WAL for a step each; the rate comes back, the volume
    stays within the cap (plus what was in flight when a step stopped), no
    session or relation is left, and a role denied the function gets a note
    instead of an error."""
    from pgparmon.advise.probe import walstep
    from pgparmon.advise.probe.walstep import CHUNK_BYTES, measure_wal

    monkeypatch.setattr(walstep, "WAL_MIN_CAP", 96 << 20)  # a small cap: a short test
    cap = 96 << 20

    cluster.psql("DROP ROLE IF EXISTS walprobe; CREATE ROLE walprobe LOGIN")
    target = ConnTarget(dbname="postgres", host=str(cluster.sockdir), port=cluster.port,
                        user="walprobe")
    rels = cluster.psql("SELECT count(*) FROM pg_class").strip()
    notes: list[str] = []
    before = _wal_lsn(cluster)
    pts = measure_wal(target, [1, 2], time.monotonic() + 20, None, notes)
    written = _wal_lsn(cluster) - before
    assert [p.streams for p in pts] == [1, 2], notes
    for p in pts:
        assert p.wal_bytes > 0 and 0 < p.seconds <= 1.0 and p.bytes_per_s > 1e6
        assert p.to_json()["bytes_per_s"] == round(p.bytes_per_s)
    # within the cap over both steps, and the statement each session had in flight
    assert sum(p.wal_bytes for p in pts) <= cap + 3 * CHUNK_BYTES
    assert written <= cap + 3 * CHUNK_BYTES + (8 << 20)  # and the server's own bit of WAL
    assert any(n.startswith("WAL: ") and "pg_logical_emit_message" in n for n in notes)
    assert cluster.psql("SELECT count(*) FROM pg_class").strip() == rels
    assert cluster.psql("SELECT count(*) FROM pg_stat_activity WHERE usename = 'walprobe'"
                        ).strip() == "0"
    # no time left: nothing measured, said so
    notes = []
    assert measure_wal(target, [1], time.monotonic(), None, notes) == []
    assert any("no time left" in n for n in notes)
    # the function revoked: a note, no error
    cluster.psql("REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) "
                 "FROM PUBLIC")
    try:
        notes = []
        assert measure_wal(target, [1], time.monotonic() + 20, None, notes) == []
        assert any("WAL was not measured" in n and "permission denied" in n for n in notes), notes
    finally:
        cluster.psql("GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) "
                     "TO PUBLIC")


@pytest.mark.integration
def test_restore_probe_measures_the_wal_after_its_steps(cluster: Cluster, probe_archive: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """With budget for it, the restore probe measures the WAL at the stream
    counts its steps reached, and the advice's evidence is held under it."""
    from pgparmon.advise import evidence, predict
    from pgparmon.advise.probe import walstep

    monkeypatch.setattr(walstep, "WAL_MIN_BUDGET_S", 0.0)  # a short probe for the suite
    res = run_restore_probe(_target(cluster, db="postgres"), str(probe_archive), budget_s=6.0,
                            max_streams=1, server_version_num=150000)
    assert [p.streams for p in res.points] == [1]
    assert [w.streams for w in res.wal] == [1] and res.wal[0].bytes_per_s > 0, res.notes
    assert res.client_s_per_byte is not None and res.client_s_per_byte > 0
    assert any("the WAL measured apart" in n for n in res.notes)
    doc = res.to_json()
    assert doc["wal"][0]["streams"] == 1 and json.loads(json.dumps(doc)) == doc
    back = ProbeResult.from_json(doc)
    assert [(w.streams, w.wal_bytes) for w in back.wal] == [
        (w.streams, round(w.wal_bytes)) for w in res.wal]
    assert back.wal[0].seconds == pytest.approx(res.wal[0].seconds, abs=1e-4)
    assert back.client_s_per_byte == res.client_s_per_byte
    ev = predict.points_evidence("probe", res.fit_points(), limit="x")
    ev = evidence.bounded(ev, res, 2, walstep.WAL_PER_HEAP)
    wal = next(c for c in ev.ceilings if c.name == "WAL writes and flushes")
    assert wal.at(1) == pytest.approx(res.wal[0].bytes_per_s / walstep.WAL_PER_HEAP)
    assert ev.throughput(1) <= wal.at(1)
