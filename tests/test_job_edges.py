"""A job's edges as a user's script meets them: a script that starts a load
in the background and then runs `pgparmon attach` in the foreground. The
script is the loader's parent and the monitor's too, and lives as long as the
monitor does: the job is the loader's tree, and ends with it (docs/faults.md).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support import pgparmon_cmd, read_jsonl

from pgparmon.cluster import Cluster

integration = pytest.mark.integration

DB = "edges"
INTERVAL = 0.5

# a CSV loader of the usual kind: the file cut in two, each half COPYed by a
# process of its own, every 1000th row napping in a trigger (a few seconds)
LOADER = r"""
import multiprocessing, os, sys, time
import psycopg

conninfo, path, done = sys.argv[1], sys.argv[2], sys.argv[3]


def work(n):
    size = os.path.getsize(path)
    with open(path, "rb") as f, psycopg.connect(conninfo, application_name="csvload") as c:
        start, end = n * size // 2, (n + 1) * size // 2
        if start:
            f.seek(start - 1)
            f.readline()  # the line the other half ends with
        with c.cursor().copy("COPY t FROM STDIN (FORMAT csv)") as cp:
            while f.tell() < end:
                line = f.readline()
                if not line:
                    break
                cp.write(line)


if __name__ == "__main__":
    multiprocessing.set_start_method("fork")
    ps = [multiprocessing.Process(target=work, args=(n,)) for n in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    with open(done, "w") as f:  # the last thing it does
        f.write(repr(time.time()))
    sys.exit(max(p.exitcode or 0 for p in ps))
"""

SLOW = """
CREATE TABLE t (id bigint, v text, w text);
CREATE FUNCTION nap() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.id % 1000 = 0 THEN PERFORM pg_sleep(0.05); END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER nap BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION nap();
"""


@pytest.fixture(scope="module")
def edges_db(cluster: Cluster) -> str:
    cluster.psql(f"DROP DATABASE IF EXISTS {DB}")
    cluster.psql(f"CREATE DATABASE {DB}")
    cluster.psql(SLOW, dbname=DB)
    return DB


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def _ts(doc: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(doc["ts"]).replace("Z", "+00:00")).timestamp()


def _script(workdir: Path, start_load: str, attach: list[str]) -> Path:
    """sh: the load in the background, then attach in the foreground (its
    JSON Lines to a file), then wait for the load."""
    out = workdir / "attach.jsonl"
    script = workdir / "job.sh"
    script.write_text("#!/bin/sh\n"
                      f"{start_load} &\n"
                      f"{shlex.join(attach)} > {shlex.quote(str(out))}\n"
                      "echo \"attach exited $?\" >&2\n"
                      "wait\n")
    return script


@integration
def test_a_script_that_attaches_to_its_own_background_loader_sees_it_end(
        cluster: Cluster, edges_db: str, workdir: Path) -> None:
    csv = workdir / "in.csv"
    with open(csv, "w") as f:
        f.write("".join(f"{i},0123456789abcdef0123456789abcdef,fedcba9876543210\n"
                        for i in range(80_000)))
    loader = workdir / "loader.py"
    loader.write_text(LOADER)
    done = workdir / "loader.done"
    attach = pgparmon_cmd("attach", "-h", str(cluster.sockdir), "-p", str(cluster.port),
                          "-U", "postgres", "-d", DB, "--json", "--interval", str(INTERVAL),
                          "--wait", "30")
    start = shlex.join([sys.executable, str(loader), cluster.conninfo(DB), str(csv), str(done)])
    script = _script(workdir, start, attach)
    res = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=120,
                         env=_env())
    assert res.returncode == 0, res.stderr
    docs = read_jsonl((workdir / "attach.jsonl").read_text())
    assert "attach exited 0" in res.stderr, json.dumps([docs[-2]["job"], docs[-1]])
    samples = [d for d in docs if d["schema"] == "pgparmon.sample/1"]
    summary = next(d for d in docs if d["schema"] == "pgparmon.summary/1")
    first = samples[0]["job"]
    assert first["kind"] == "copy" and first["grouping"] == "process tree"
    # the job is the loader's tree, not the script that also runs the monitor
    assert "loader.py" in " ".join(first["command"]), first["command"]
    assert len({w["pid"] for s in samples for w in s["workers"]}) == 2
    # it ended with the loader: at most two samples after the loader's last act
    ended = float(done.read_text())
    after = [s for s in samples if _ts(s) > ended]
    assert 1 <= len(after) <= 2, [(s["ts"], s["job"]["state"]) for s in after]
    assert samples[-1]["job"]["state"] == "finished"
    assert all(s["job"]["state"] == "running" for s in samples[:-1])
    assert summary["state"] == "finished"
    json.dumps(summary)


@integration
def test_a_script_that_attaches_to_its_own_background_pgcopydb_sees_it_end(
        cluster: Cluster, pgcopydb: str, workdir: Path) -> None:
    """The same with a packaged copy tool: `pgcopydb clone` in the background."""
    src, dst = "edges_src", "edges_dst"
    for db in (src, dst):
        cluster.psql(f"DROP DATABASE IF EXISTS {db}")
        cluster.psql(f"CREATE DATABASE {db}")
    # the CHECK travels with the schema: the target's COPY naps every 1000th row
    cluster.psql("""
CREATE FUNCTION slowcheck(i bigint) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF i % 1000 = 0 THEN PERFORM pg_sleep(0.05); END IF;
  RETURN true;
END $$;
CREATE TABLE t (id bigint PRIMARY KEY CHECK (slowcheck(id)), v text);
CREATE TABLE u (id bigint PRIMARY KEY CHECK (slowcheck(id)), v text);
INSERT INTO t SELECT i, md5(i::text) FROM generate_series(1, 60000) i;
INSERT INTO u SELECT i, md5(i::text) FROM generate_series(1, 40000) i;
""", dbname=src)

    def uri(db: str) -> str:
        return f"postgresql://postgres@/{db}?host={cluster.sockdir}&port={cluster.port}"

    done = workdir / "pgcopydb.done"
    work = workdir / "pgcopydb"
    clone = shlex.join([pgcopydb, "clone", "--source", uri(src), "--target", uri(dst),
                        "--table-jobs", "2", "--index-jobs", "2", "--dir", str(work),
                        "--no-role-passwords", "--no-owner", "--no-acl"])
    stamp = shlex.join([sys.executable, "-c", "import time; print(time.time())"])
    start = "sh -c " + shlex.quote(f"{clone}; {stamp} > {shlex.quote(str(done))}")
    attach = pgparmon_cmd("attach", "-h", str(cluster.sockdir), "-p", str(cluster.port),
                          "-U", "postgres", "-d", dst, "--json", "--interval", str(INTERVAL),
                          "--wait", "30")
    script = _script(workdir, start, attach)
    res = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=180,
                         env=_env())
    assert res.returncode == 0, res.stderr
    docs = read_jsonl((workdir / "attach.jsonl").read_text())
    samples = [d for d in docs if d["schema"] == "pgparmon.sample/1"]
    assert samples, res.stderr
    assert samples[0]["job"]["kind"] == "copy"
    ended = float(done.read_text())
    after = [s for s in samples if _ts(s) > ended]
    assert len(after) <= 2, [(s["ts"], s["job"]["state"]) for s in after]
    assert samples[-1]["job"]["state"] == "finished"
    progress = [s["job"]["progress"] for s in samples if s["job"]["progress"] is not None]
    assert all(b >= a for a, b in zip(progress, progress[1:], strict=False)), progress


def test_a_file_cut_into_ranges_counts_once_and_is_not_cut_short() -> None:
    """Two readers of one file, one from its start, one from its middle:
    the file counts once, covered by both spans; when both have read their
    range and exited the file is done, not 'stopped mid-file'."""
    from types import SimpleNamespace

    from pgparmon.analyze.progress import Tracker
    from pgparmon.jobs.base import Job, state_of
    from pgparmon.jobs.copy import CopyLoad
    from pgparmon.jobs.copy_inputs import CopyState, input_files

    mb = 1e6
    size = 1000 * mb
    tr = Tracker(Job(kind="copy", database="db"), CopyLoad())
    st = state_of(tr, CopyState)
    st.inputs = {"1:/d/in.csv": [size, 300 * mb], "2:/d/in.csv": [size, 800 * mb],
                 "3:/d/other.csv": [500 * mb, 100 * mb]}
    st.input_start = {"1:/d/in.csv": 0.0, "2:/d/in.csv": 500 * mb, "3:/d/other.csv": 0.0}
    assert input_files(st) == (1500 * mb, 700 * mb)
    # the first reader first seen late (attached mid-run): counted from 0
    st.input_start["1:/d/in.csv"] = 120 * mb
    assert input_files(st)[1] == 700 * mb
    # both at their ranges' ends, processes gone: done, and no cut
    st.inputs = {"1:/d/in.csv": [size, 500 * mb], "2:/d/in.csv": [size, size]}
    assert input_files(st) == (size, size)
    st.input_seen = {"1:/d/in.csv": (10.0, 500 * mb, mb, "public.t"),
                     "2:/d/in.csv": (10.0, size, mb, "public.t")}
    snap = SimpleNamespace(clients=[], ts=20.0)
    assert CopyLoad().cut_short(tr, snap) is None  # type: ignore[arg-type]
    # one reader of its own file left mid-way: cut short, said so
    st.inputs = {"1:/d/in.csv": [size, 500 * mb]}
    st.input_seen = {"1:/d/in.csv": (10.0, 500 * mb, mb, "public.t")}
    assert "stopped mid-file" in (CopyLoad().cut_short(tr, snap) or "")  # type: ignore[arg-type]
