"""A packaged migration tool, pgcopydb (Debian package, installed by the test
setup when missing): `pgcopydb clone` copies one database into another with
N parallel COPY streams (COPY TO on the source, COPY FROM on the target: two
sessions per stream across databases), then builds indexes in parallel.
Attach without --pid finds it as ONE COPY job, by its process tree."""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support import pgparmon_cmd, read_jsonl, wait_for_monitor

from pgparmon.cluster import Cluster

integration = pytest.mark.integration

SRC, DST = "cpsrc", "cpdst"

# the source's CHECK constraint and index expression nap every 1000th row:
# they travel with the schema, so the target's COPY and index builds last
SCHEMA = """
CREATE FUNCTION slowcheck(i bigint) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF i % 1000 = 0 THEN PERFORM pg_sleep(0.1); END IF;
  RETURN true;
END $$;
CREATE FUNCTION slowkey(i bigint) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF i % 1000 = 0 THEN PERFORM pg_sleep(0.04); END IF;
  RETURN i;
END $$;
CREATE TABLE big (id bigint PRIMARY KEY CHECK (slowcheck(id)), v text, w text);
CREATE TABLE mid (id bigint PRIMARY KEY CHECK (slowcheck(id)), v text);
CREATE TABLE small (id int PRIMARY KEY, big_id bigint REFERENCES big (id), t text);
INSERT INTO big SELECT i, md5(i::text), repeat('x', 40) FROM generate_series(1, 60000) i;
INSERT INTO mid SELECT i, md5(i::text) FROM generate_series(1, 40000) i;
INSERT INTO small SELECT i, i, 'a' FROM generate_series(1, 2000) i;
CREATE INDEX big_slow ON big (slowkey(id));
CREATE INDEX mid_slow ON mid (slowkey(id));
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def _uri(cluster: Cluster, db: str) -> str:
    return f"postgresql://postgres@/{db}?host={cluster.sockdir}&port={cluster.port}"


@integration
def test_pgcopydb_clone_is_one_copy_job(cluster: Cluster, pgcopydb: str,
                                        workdir: Path) -> None:
    for db in (SRC, DST):
        cluster.psql(f"DROP DATABASE IF EXISTS {db}")
        cluster.psql(f"CREATE DATABASE {db}")
    cluster.psql(SCHEMA, dbname=SRC)
    # attach waits for the job before the tool starts: whatever step it is
    # at when found (its schema pg_dump, the copies), the job is pgcopydb's
    attach = subprocess.Popen(pgparmon_cmd("attach", "-h", str(cluster.sockdir), "-p",
                                           str(cluster.port), "-U", "postgres", "-d", DST,
                                           "--json", "--interval", "0.2", "--wait", "60",
                                           "--record", str(workdir / "clone.pgparmon.gz")),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env())
    wait_for_monitor(cluster, attach, DST)  # looking, before the tool starts
    log = open(workdir / "pgcopydb.log", "w")
    tool = subprocess.Popen([pgcopydb, "clone", "--source", _uri(cluster, SRC),
                             "--target", _uri(cluster, DST), "--table-jobs", "2",
                             "--index-jobs", "2", "--dir", str(workdir / "cp"), "--no-owner"],
                            env=_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        out, err = attach.communicate(timeout=120)
        assert tool.poll() is not None, ("attach returned while pgcopydb still ran",
                                         [d.get("job", d.get("state")) for d in
                                          read_jsonl(out)][:2], err[-1000:])
    finally:
        for p in (attach, tool):
            if p.poll() is None:
                p.kill()
        tool.wait(timeout=60)
        log.close()
    res = subprocess.CompletedProcess(attach.args, attach.returncode, out, err)
    assert tool.returncode == 0, (workdir / "pgcopydb.log").read_text()[-2000:]
    assert res.returncode == 0, res.stderr
    docs = read_jsonl(res.stdout)
    samples: list[dict[str, Any]] = [d for d in docs if d.get("schema") == "pgparmon.sample/1"]
    summary = next(d for d in docs if d.get("schema") == "pgparmon.summary/1")
    first = samples[0]["job"]
    assert first["kind"] == "copy" and first["grouping"] == "process tree"
    assert first["client_pid"] == tool.pid
    assert set(first["databases"]) == {SRC, DST} or set(summary["databases"]) == {SRC, DST}
    assert set(summary["databases"]) == {SRC, DST}
    # two streams at once: each a COPY FROM on the target fed by a COPY TO on
    # the source
    loads = [s for s in samples if sum(1 for w in s["workers"] if w["phase"] == "copy"
                                       and w["direction"] == "from") == 2]
    assert loads, [[(w["phase"], w["direction"]) for w in s["workers"]] for s in samples]
    assert any(w["direction"] == "to" for s in loads for w in s["workers"])
    builds = [s for s in samples if s["job"]["phase"] == "index build"]
    assert builds and {w["phase"] for s in builds for w in s["workers"]} >= {"index"}
    # planned from the source's catalog: its 3 tables and its 5 indexes and 1
    # foreign key to rebuild on the target; progress and an ETA mid-copy
    planned = [s for s in samples if s["job"]["progress_basis"] == f"source catalog ({SRC})"]
    assert planned, {s["job"]["progress_basis"] for s in samples}
    kinds = Counter(i["kind"] for i in summary["items"])
    assert (kinds["data"], kinds["index"], kinds["fk"]) == (3, 5, 1), kinds
    copying = [s for s in planned if s["job"]["phase"] == "copy"]
    assert copying and all(s["job"]["progress"] is not None for s in copying)
    assert any(s["job"]["eta_s"] is not None for s in copying), \
        [(s["elapsed_s"], s["job"]["eta_reason"], s["job"]["progress"]) for s in copying]
    prog = [s["job"]["progress"] for s in planned if s["job"]["progress"] is not None]
    assert prog == sorted(prog)
    items = {w["item"] for s in builds for w in s["workers"] if w["phase"] == "index"}
    assert items & {"big_slow", "mid_slow", "big_pkey", "mid_pkey"}, items
    assert samples[-1]["job"]["items_done"] == samples[-1]["job"]["items_total"]
    # the plan (the source's catalog) and the target's catalog at the end are
    # in the recording: the replay follows the same copy to the same end
    from pgparmon.playback import ReplayFeed
    from pgparmon.record import read_recording

    r = read_recording(str(workdir / "clone.pgparmon.gz"))
    feed = ReplayFeed(r, speed=1000.0)
    replayed = []
    while not feed.ended and feed.outcome is None:
        replayed.append(feed.tick())
    assert [s.to_json() for s in replayed] == r.samples and feed.summary() == r.summary
    # its VACUUM ANALYZE of each table on the target (~100 ms each: a sample
    # sees some or none) are items too, named by their table once a sample
    # showed the statement's text (a session's first sample has only its verb)
    for i in summary["items"]:
        if i["kind"] in ("vacuum", "analyze"):
            where = i["relation"] or "(database)"
            assert i["name"] == f"{i['kind'].upper()} {where}", i
    assert all(s["job"]["state"] == "running" for s in samples[:-1])
    assert samples[-1]["job"]["state"] == "finished"
    assert summary["state"] == "finished" and summary["grouping"] == "process tree"


# ---- without a server: the relay rule ----------------------------------------


def test_a_relay_counts_its_load_side_once() -> None:
    """COPY TO on the source feeding COPY FROM on the target: the read side
    is shown (direction "to") but is no item, and the job's throughput counts
    each byte once; a dump (COPY TO only) still counts its COPYs."""
    from test_copy_jobs import Scripted, _b, _cp, _snap

    from pgparmon.jobs.base import Job
    from pgparmon.jobs.copy import TREE
    from pgparmon.monitor import Monitor
    from pgparmon.sample_doc import throughput as _throughput
    from pgparmon.snapshot import ClientProc

    assert _throughput({"from": 10.0, "to": 12.0, None: 0.0}) == 10.0
    assert _throughput({"to": 12.0, None: 0.0}) == 12.0
    job = Job(kind="copy", database="dst", databases=("dst", "src"), client_pid=50, jobs=5,
              client_pids=frozenset({50}), grouping=TREE, pid_hint=frozenset({1, 2}))
    snaps = []
    for t in range(1, 8):
        backends = (_b(1, "src", query='copy "public"."big" to stdout', since=0.5),
                    _b(2, "dst", query='copy "public"."big" from stdin with (freeze)',
                       since=0.5))
        snaps.append(_snap(t, backends, (_cp(1, 1000 * t), _cp(2, 1000 * t)),
                           clients=(ClientProc(50, 1, "tool", 0.0, "running", 0, 0, 0, 0, ()),),
                           root_alive=True, links=((1, 50), (2, 50))))
    mon = Monitor(Scripted(job, snaps))
    mon.discover()
    docs = [mon.tick().to_json() for _ in snaps]
    last = docs[-1]
    assert {w["pid"]: w["direction"] for w in last["workers"]} == {1: "to", 2: "from"}
    assert all(w["phase"] == "copy" for w in last["workers"])
    assert last["job"]["items_total"] == 1  # the COPY FROM
    assert 900 <= last["job"]["bytes_per_s"] <= 1100, last["job"]["bytes_per_s"]
    # 5 sessions at discovery, 1 load running: no plan, so no "items left" tail
    assert all(d["bottleneck"]["kind"] != "one-table" for d in docs)


STEP = r"""
import subprocess, sys, threading, time
import psycopg

conninfo, pg_dump, out, mode = sys.argv[1:5]
conn = psycopg.connect(conninfo, autocommit=mode == "busy")
if mode == "holding":  # idle in transaction, holding the lock
    conn.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
else:  # a statement running while it holds the lock
    threading.Thread(target=conn.execute, daemon=True, args=(
        "BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(60)",)).start()
    with psycopg.connect(conninfo, autocommit=True) as look:  # until it holds it
        while not look.execute("SELECT count(*) FROM pg_locks WHERE granted AND mode = "
                               "'AccessExclusiveLock' AND relation = 't'::regclass"
                               ).fetchone()[0]:
            time.sleep(0.02)
dump = subprocess.Popen([pg_dump, "-d", conninfo, "-t", "t", "-f", out])
time.sleep(60)
"""


@pytest.mark.parametrize("mode", ["holding", "busy"])
@integration
def test_pg_dump_run_by_a_tool_holding_a_transaction_is_a_step_of_its_job(
        cluster: Cluster, workdir: Path, mode: str) -> None:
    """A program that holds a transaction open (its snapshot) while it runs
    pg_dump: the pg_dump is a step of that program's job (a migration tool's
    schema step), not a job of its own. Its sessions busy otherwise: the
    pg_dump is its own job (a script running a dump)."""
    import sys

    import psutil
    from test_copy_jobs import _kill_tree

    from support import jobs_found

    cluster.psql("DROP DATABASE IF EXISTS cpstep")
    cluster.psql("CREATE DATABASE cpstep")
    cluster.psql("CREATE TABLE t (id int)", dbname="cpstep")
    script = workdir / "step.py"
    script.write_text(STEP)
    tool = subprocess.Popen([sys.executable, str(script), cluster.conninfo("cpstep"),
                             cluster.client("pg_dump"), str(workdir / "t.sql"),
                             mode], env=_env())
    try:
        deadline = time.monotonic() + 60
        with psycopg.connect(cluster.conninfo("cpstep"), autocommit=True) as conn:
            while not conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type "
                                   "= 'Lock' AND application_name = 'pg_dump'"
                                   ).fetchone()[0]:  # type: ignore[index]
                assert tool.poll() is None
                assert time.monotonic() < deadline, "pg_dump never waited for the lock"
                time.sleep(0.05)
        db, jobs = jobs_found(cluster, "cpstep")
        dump_pid = next(p.pid for p in psutil.Process(tool.pid).children()
                        if p.name() == "pg_dump")
        mine = [j for j in jobs if j.client_pid in (tool.pid, dump_pid)]
        assert len(mine) == 1, [j.describe() for j in jobs]
        if mode == "holding":
            assert mine[0].kind == "copy" and mine[0].client_pid == tool.pid
            dump_backends = {b.pid for b in db.backends if b.application_name == "pg_dump"}
            assert dump_backends and dump_backends <= mine[0].pid_hint
        else:
            assert mine[0].kind == "pg_dump" and mine[0].client_pid == dump_pid
    finally:
        _kill_tree(tool)
        # its sessions (pg_dump's waits for a lock) must not outlive the test
        cluster.psql("DROP DATABASE cpstep WITH (FORCE)")


def _relay_snaps() -> list[Any]:
    """Two streams copying src -> dst (big 100k rows, mid 50k, small 1k),
    then the target's index and foreign-key builds, then the tool exits."""
    from test_copy_jobs import _b, _snap

    from pgparmon.snapshot import ClientProc, CopyProgress

    def cp(pid: int, db: str, rel: str, rows: int, cmd: str) -> CopyProgress:
        return CopyProgress(pid, db, None, None, cmd, "PIPE", rows * 40, 0, rows, 0)

    def stream(a: int, b: int, rel: str, rows: int, t: float) -> tuple[Any, ...]:
        return ((_b(a, "src", query=f'copy "public"."{rel}" to stdout', since=t),
                 _b(b, "dst", query=f'copy "public"."{rel}" from stdin', since=t)),
                (cp(a, "src", rel, rows, "COPY TO"), cp(b, "dst", rel, rows, "COPY FROM")))

    tool = (ClientProc(50, 1, "tool", 0.0, "running", 0, 0, 0, 0, ()),)
    links = ((1, 50), (2, 50), (3, 50), (4, 50))
    snaps = []
    for t in range(1, 16):
        bs: tuple[Any, ...] = ()
        cps: tuple[Any, ...] = ()
        if t <= 10:
            b1, c1 = stream(1, 2, "big", 10000 * t, 0.5)
            bs, cps = bs + b1, cps + c1
        elif t <= 12:
            bs += (_b(2, "dst", query="CREATE UNIQUE INDEX big_pkey ON public.big (id)",
                      since=10.5),)
        elif t == 13:
            bs += (_b(2, "dst", query="ALTER TABLE public.small ADD CONSTRAINT "
                      "small_big_id_fkey FOREIGN KEY (big_id) REFERENCES public.big (id)",
                      since=12.5),)
        if t <= 5:
            b2, c2 = stream(3, 4, "mid", 10000 * t, 0.5)
            bs, cps = bs + b2, cps + c2
        elif t == 6:
            b2, c2 = stream(3, 4, "small", 1000, 5.5)
            bs, cps = bs + b2, cps + c2
        elif t <= 8:
            bs += (_b(4, "dst", query="CREATE UNIQUE INDEX mid_pkey ON public.mid (id)",
                      since=6.5),)
        snaps.append(_snap(t, bs, cps, clients=tool if t < 15 else (), root_alive=t < 15,
                           links=links))
    return snaps


RELAY_TABLES = [[1, "public", "big", "r", 1000, 100000.0, 0, "base/1/1"],
                [2, "public", "mid", "r", 500, 50000.0, 0, "base/1/2"],
                [3, "public", "small", "r", 10, 1000.0, 0, "base/1/3"],
                [4, "public", "mv", "m", 10, 1000.0, 0, "base/1/4"]]
RELAY_POSTDATA = {"indexes": [["public", "big", "big_pkey", "big_pkey", "p"],
                              ["public", "mid", "mid_pkey", "mid_pkey", "p"],
                              ["public", "small", "small_pkey", "small_pkey", "p"]],
                  "fks": [["public", "small", "small_big_id_fkey", "public.big"]]}


@pytest.mark.parametrize("target_has_small_pkey", [True, False])
def test_a_copy_between_databases_is_planned_from_the_source_catalog(
        target_has_small_pkey: bool) -> None:
    """A relay src -> dst: the source's tables and post-data objects are the
    work list (matviews are not copied), both sides of a stream advance the
    table's item, the ETA simulates the rest at the streams seen, the target's
    builds are items, and at the end what the target's catalog holds settles
    builds never seen running; what it lacks is named, not called failed."""
    from test_copy_jobs import Scripted

    from pgparmon.jobs.base import Job, PlanInputs
    from pgparmon.jobs.copy import TREE
    from pgparmon.monitor import Monitor

    job = Job(kind="copy", database="dst", databases=("dst", "src"), client_pid=50, jobs=4,
              client_pids=frozenset({50}), grouping=TREE, pid_hint=frozenset({1, 2, 3, 4}))
    src = Scripted(job, _relay_snaps(), plan=PlanInputs(tables=RELAY_TABLES[:3], source="src",
                                                         postdata=RELAY_POSTDATA))
    src.done = {"relations": ["public.small_pkey"] if target_has_small_pkey else []}
    mon = Monitor(src)
    mon.discover()
    docs = []
    while mon.outcome is None:
        docs.append(mon.tick().to_json())
    assert src.plan_asks and src.plan_asks[0] == {"source": "src"}
    assert set(src.done_asks) == {"dst"}  # the target's catalog, not the monitor's database
    running = [d for d in docs if d["job"]["state"] == "running"]
    assert all(d["job"]["progress_basis"] == "source catalog (src)" for d in running[1:])
    assert running[-1]["job"]["items_total"] == 7  # 3 tables, 3 indexes, 1 foreign key
    prog = [d["job"]["progress"] for d in running if d["job"]["progress"] is not None]
    assert prog and prog == sorted(prog) and 0.3 < running[4]["job"]["progress"] < 0.8
    # mid-copy (t=5: big half done, mid ending): an ETA from the simulation,
    # ending with big's table or its index build
    mid = running[4]
    assert mid["job"]["eta_s"] is not None and mid["job"]["eta_s"] > 0, mid["job"]
    assert mid["job"]["last_item"] in ("public.big", "big_pkey")
    # a worker on the target's index build works on the index's item
    builds = [w for d in running for w in d["workers"] if w["phase"] == "index"]
    assert builds and {w["item"] for w in builds} >= {"big_pkey", "mid_pkey"}
    assert any(d["job"]["phase"] == "index build" for d in running)
    end = docs[-1]["job"]
    if target_has_small_pkey:
        assert end["state"] == "finished", end
    else:
        assert end["state"] == "ended" and "small_pkey" in end["outcome"], end
        assert "not seen built" in end["outcome"]


# ---- a source on another server: --source ------------------------------------

SOURCE_LOADER = r"""
import multiprocessing, sys, time
import psycopg

conninfo = sys.argv[1]


def load(table, rows):
    with psycopg.connect(conninfo) as conn:
        with conn.cursor() as cur, cur.copy(f"COPY {table} (id, v) FROM STDIN") as cp:
            for start in range(0, rows, 5000):
                for i in range(start, min(rows, start + 5000)):
                    cp.write_row((i, "x" * 40))
                time.sleep(0.12)  # a relay paced by its source
        conn.commit()


if __name__ == "__main__":
    ps = [multiprocessing.Process(target=load, args=a) for a in (("a", 200000), ("b", 80000))]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
        assert p.exitcode == 0
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CREATE UNIQUE INDEX a_pkey ON a (id)")
"""


@integration
def test_a_copy_from_another_server_is_planned_from_source(cluster: Cluster,
                                                           workdir: Path) -> None:
    """A loader feeding this server from a source pgparmon does not watch
    (no COPY TO here): `--source CONNINFO` plans the copy from that server's
    catalog, its tables' COPY FROM streams advance them (rows over
    reltuples), the index to rebuild is an item, and the ETA simulates the
    rest."""
    import sys

    src, dst = "srcsrv", "dstsrv"
    for db in (src, dst):
        cluster.psql(f"DROP DATABASE IF EXISTS {db}")
        cluster.psql(f"CREATE DATABASE {db}")
    cluster.psql("CREATE TABLE a (id int PRIMARY KEY, v text); CREATE TABLE b (id int, v text); "
                 "INSERT INTO a SELECT g, repeat('x', 40) FROM generate_series(1, 200000) g; "
                 "INSERT INTO b SELECT g, repeat('x', 40) FROM generate_series(1, 80000) g; "
                 "ANALYZE", dbname=src)
    cluster.psql("CREATE TABLE a (id int, v text); CREATE TABLE b (id int, v text)", dbname=dst)
    script = workdir / "relay.py"
    script.write_text(SOURCE_LOADER)
    source = f"host={cluster.sockdir} port={cluster.port} dbname={src} user=postgres"
    rec = workdir / "relay.pgparmon.gz"
    res = subprocess.run(pgparmon_cmd("run", "-h", str(cluster.sockdir), "-p", str(cluster.port),
                                      "-U", "postgres", "-d", dst, "--json", "--interval", "0.3",
                                      "--record", str(rec), "--source", source, "--",
                                      sys.executable, str(script), cluster.conninfo(dst)),
                         capture_output=True, text=True, timeout=120, env=_env())
    assert res.returncode == 0, res.stderr[-2000:]
    # the source's catalog is in the recording: the replay plans the same copy
    from pgparmon.playback import ReplayFeed
    from pgparmon.record import read_recording

    r = read_recording(str(rec))
    feed = ReplayFeed(r, speed=1000.0)
    replayed = []
    while not feed.ended and feed.outcome is None:
        replayed.append(feed.tick())
    assert [s.to_json() for s in replayed] == r.samples and feed.summary() == r.summary
    docs = read_jsonl(res.stdout)
    samples: list[dict[str, Any]] = [d for d in docs if d.get("schema") == "pgparmon.sample/1"]
    summary = next(d for d in docs if d.get("schema") == "pgparmon.summary/1")
    planned = [s for s in samples
               if str(s["job"]["progress_basis"]).startswith("source catalog (")]
    assert planned, {s["job"]["progress_basis"] for s in samples}
    assert f"dbname={src}" in planned[0]["job"]["progress_basis"]
    assert planned[0]["job"]["source"] == source  # no password in it: nothing to redact
    assert {(i["kind"], i["name"]) for i in summary["items"]} == {
        ("data", "public.a"), ("data", "public.b"), ("index", "a_pkey")}
    copying = [s for s in planned if s["job"]["phase"] == "copy"]
    prog = [s["job"]["progress"] for s in copying]
    assert prog and None not in prog and prog == sorted(prog) and prog[-1] < 0.99, prog
    assert any(s["job"]["eta_s"] for s in copying), [s["job"]["eta_reason"] for s in copying]
    # both streams advance their tables: rows over the source's reltuples
    rels = {w["item"] for s in copying for w in s["workers"] if w["phase"] == "copy"}
    assert rels == {"public.a", "public.b"}, rels
    assert samples[-1]["job"]["state"] == "finished"
    assert all(i["state"] == "done" for i in summary["items"])
